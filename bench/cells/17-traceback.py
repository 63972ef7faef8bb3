df = load_file('sales.csv')
monthly = df.groupby('Month')['Revenue'].sum()
print(monthly)
