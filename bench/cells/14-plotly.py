import pandas as pd
import plotly.express as px

df = load_file('sales.csv')
df['date'] = pd.to_datetime(df['date'])
monthly = (df.groupby([pd.Grouper(key='date', freq='M'), 'region'])['revenue']
           .sum().reset_index())
fig = px.line(monthly, x='date', y='revenue', color='region',
              title='Monthly revenue by region')
fig.write_html('revenue_by_region.html')
print('Saved revenue_by_region.html')
