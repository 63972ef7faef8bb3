from openpyxl import Workbook
from openpyxl.styles import Font, PatternFill

df = load_file('sales.csv')
summary = df.pivot_table(index='product', columns='region', values='revenue',
                         aggfunc='sum').round(2)

wb = Workbook()
ws = wb.active
ws.title = 'Revenue by product'
ws.append(['product'] + list(summary.columns))
for product, row in summary.iterrows():
    ws.append([product] + row.tolist())
for cell in ws[1]:
    cell.font = Font(bold=True, color='FFFFFF')
    cell.fill = PatternFill('solid', fgColor='4472C4')
ws.column_dimensions['A'].width = 20
wb.save('revenue_summary.xlsx')
print(f"Saved revenue_summary.xlsx with {len(summary)} products")
