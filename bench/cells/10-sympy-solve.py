import sympy as sp

df = load_file('sales.csv')
price = round(df['unit_price'].mean(), 2)
unit_cost = round(price * 0.55, 2)
fixed_costs = 25000

q = sp.symbols('q', positive=True)
solution = sp.solve(sp.Eq(price * q, fixed_costs + unit_cost * q), q)
print(f"Average price {price}, unit cost {unit_cost}")
print(f"Break-even volume: {float(solution[0]):.0f} units")
