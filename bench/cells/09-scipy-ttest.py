from scipy import stats

df = load_file('sales.csv')
online = df.loc[df['channel'] == 'Online', 'revenue']
retail = df.loc[df['channel'] == 'Retail', 'revenue']
t, p = stats.ttest_ind(online, retail, equal_var=False)
print(f"Online mean {online.mean():.2f} vs retail mean {retail.mean():.2f}")
print(f"Welch t = {t:.3f}, p = {p:.4f}")
print('significant at 5%' if p < 0.05 else 'not significant at 5%')
