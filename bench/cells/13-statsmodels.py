import statsmodels.formula.api as smf

df = load_file('sales.csv')
model = smf.ols('revenue ~ units + unit_price + C(region)', data=df).fit()
print(model.summary())
