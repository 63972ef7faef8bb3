df = load_file('sales.csv')
print(df.head(500).to_string())
print(f"{len(df)} rows in total; first 500 shown")
