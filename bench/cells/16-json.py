import pandas as pd

data = load_file('orders.json')
orders = pd.json_normalize(data['orders'], sep='_')
print(f"{data['store']}: {len(orders)} orders exported {data['exported_at']}")
print(orders.groupby('customer_tier')['total'].agg(['count', 'mean', 'sum']).round(2))
