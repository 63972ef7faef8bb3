#!/usr/bin/env python3
"""The chat-bot flow against a running interpd, with the standard library
only: upload a CSV and a spreadsheet, run Python on them with load_file(),
and save the chart the run draws.

    python3 examples/bot_flow.py                  # key from ./interpd-data/admin.key
    python3 examples/bot_flow.py --url http://127.0.0.1:8080 --key KEY --out chart.png

Exit status 0 when the chart was saved, 1 (with the server's error) if not.
"""
import argparse
import base64
import json
import os
import sys
import urllib.error
import urllib.parse
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))

CODE = """
import matplotlib.pyplot as plt
sales = load_file("sales.csv")
targets = load_file("sales.xlsx", sheet_name="targets")
units = sales.groupby("region")["units"].sum()
print(units.to_string())
print("best month:", sales.groupby("month")["revenue"].sum().idxmax())
ax = units.plot(kind="bar", title="Units per region", color="#2a6eb4")
ax.plot(range(len(targets)), targets.set_index("region").loc[units.index,
        "target_units"], "k_", markersize=30, label="target")
ax.legend(loc="lower right")
"""


def call(args, method, path, body=None, content_type=None):
    req = urllib.request.Request(args.url + path, data=body, method=method)
    req.add_header("Authorization", "Bearer " + args.key)
    req.add_header("X-User-Id", args.user)
    if content_type:
        req.add_header("Content-Type", content_type)
    try:
        with urllib.request.urlopen(req, timeout=120) as resp:
            return json.load(resp)
    except urllib.error.HTTPError as e:
        err = json.load(e).get("error", {})
        sys.exit("%s %s: %d %s: %s" % (method, path, e.code, err.get("code"),
                                      err.get("message")))


def upload(args, name, content_type):
    with open(os.path.join(HERE, name), "rb") as f:
        data = f.read()
    path = "/v1/files?filename=" + urllib.parse.quote(name)
    f = call(args, "POST", path, data, content_type)
    print("uploaded %s: %s (%s, %d bytes)" % (name, f["file_id"],
                                               f["file_type"], f["size"]))
    return f["file_id"]


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--url", default="http://127.0.0.1:8080")
    p.add_argument("--key", default=os.environ.get("INTERPD_KEY"))
    p.add_argument("--user", default="alice")
    p.add_argument("--out", default="chart.png")
    args = p.parse_args()
    if not args.key:
        with open("interpd-data/admin.key") as f:
            args.key = f.read().strip()

    ids = [upload(args, "sales.csv", "text/csv"),
           upload(args, "sales.xlsx", "application/vnd.openxmlformats-"
                  "officedocument.spreadsheetml.sheet")]
    body = json.dumps({"code": CODE, "files": ids}).encode()
    r = call(args, "POST", "/v1/executions", body, "application/json")
    sys.stdout.write(r["stdout"])
    if not r["success"]:
        sys.exit("the code failed: %s" % json.dumps(r["error"]))
    for f in r["generated_files"]:
        if f.get("mime_type") == "image/png" and f.get("data_base64"):
            png = base64.b64decode(f["data_base64"])
            with open(args.out, "wb") as out:
                out.write(png)
            print("chart saved to %s (%d bytes)" % (args.out, len(png)))
            return 0
    sys.exit("the run drew no chart: %s" % json.dumps(r["generated_files"]))


if __name__ == "__main__":
    sys.exit(main())
