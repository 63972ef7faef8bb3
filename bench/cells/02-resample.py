import pandas as pd

df = load_file('sales.csv')
df['date'] = pd.to_datetime(df['date'])
monthly = df.set_index('date').resample('M')['revenue'].sum()
print(monthly.round(2))
print(f"Best month: {monthly.idxmax():%B %Y} ({monthly.max():,.2f})")
