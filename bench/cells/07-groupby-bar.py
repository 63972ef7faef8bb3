import matplotlib.pyplot as plt

df = load_file('sales.csv')
df.groupby('product')['units'].sum().plot(kind='bar')
plt.title('Units sold by product')
plt.ylabel('units')
plt.tight_layout()
plt.savefig('units.png')
