df = load_file('sales.csv')
print(df.shape)
print(df.dtypes)
print(df.describe())
