from PIL import Image, ImageDraw

df = load_file('sales.csv')
totals = df.groupby('region')['revenue'].sum().sort_values(ascending=False)

img = Image.new('RGB', (480, 40 * len(totals) + 20), 'white')
draw = ImageDraw.Draw(img)
for i, (region, value) in enumerate(totals.items()):
    y = 10 + 40 * i
    width = int(300 * value / totals.max())
    draw.rectangle([160, y, 160 + width, y + 28], fill=(70, 130, 180))
    draw.text((10, y + 8), f"{region}: {value:,.0f}", fill='black')
img.save('region_card.png')
print('Saved region_card.png', img.size)
