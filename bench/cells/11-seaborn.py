import matplotlib.pyplot as plt
import seaborn as sns

df = load_file('sales.csv')
sns.set_theme(style='whitegrid')
plt.figure(figsize=(8, 5))
sns.boxplot(data=df, x='region', y='revenue', hue='channel')
plt.title('Order revenue by region and channel')
plt.show()
