# bench/png_job.py - the "pandas + matplotlib PNG job" of bench/warm.sh
# (issue 14), run as it is by every contestant: a fresh /usr/bin/python3
# (baseline B), a Jupyter kernel (baseline C) and interpd (the code of a
# POST /v1/executions).  It writes chart.png into the working directory
# (interpd's /mnt/output, so interpd returns it in generated_files, inline)
# and prints one line the driver checks.  It closes its figure, so interpd's
# prelude has no open figure left to save a second time.
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
import pandas as pd

df = pd.DataFrame({"month": range(1, 13),
                   "sales": [12, 15, 11, 18, 21, 25, 24, 27, 22, 19, 16, 20]})
df["avg3"] = df["sales"].rolling(3, min_periods=1).mean()
fig, ax = plt.subplots(figsize=(6, 4), dpi=100)
df.plot(x="month", y=["sales", "avg3"], title="sales", ax=ax)
ax.set_ylabel("units")
fig.savefig("chart.png", format="png")
plt.close(fig)
print("png_job", round(float(df["avg3"].sum()), 2))
