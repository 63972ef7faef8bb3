import matplotlib.pyplot as plt
import pandas as pd

df = load_file('sales.csv')
df['date'] = pd.to_datetime(df['date'])
weekly = df.set_index('date')['revenue'].resample('W').sum()
plt.figure(figsize=(10, 4))
plt.plot(weekly.index, weekly.values, marker='o')
plt.title('Weekly revenue')
plt.grid(True, alpha=0.3)
plt.show()
