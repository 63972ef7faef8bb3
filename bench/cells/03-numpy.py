import numpy as np

df = load_file('sales.csv')
revenue = df['revenue'].to_numpy()
print(f"mean {np.mean(revenue):.2f}, median {np.median(revenue):.2f}, "
      f"p90 {np.percentile(revenue, 90):.2f}")
print(f"correlation units/revenue: {np.corrcoef(df['units'], revenue)[0, 1]:.3f}")
slope, intercept = np.polyfit(df['unit_price'], df['units'], 1)
print(f"units = {slope:.3f} * price + {intercept:.2f}")
