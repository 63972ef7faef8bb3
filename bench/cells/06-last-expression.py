df = load_file('sales.csv')
df.groupby('region')[['units', 'revenue']].sum().sort_values('revenue', ascending=False)
