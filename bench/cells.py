"""bench/cells.py - the driver of bench/cells.sh (issue 26, item 4): the
cells a chat bot writes after a user uploads a CSV, timed on interpd and on
a Jupyter kernel.

Run with Debian's /usr/bin/python3 (python3-jupyter-client, -ipykernel and
the data stack the cells import):

  cells.py WORKDIR ROUNDS WARMUP WARM=PORT:KEY COLD=PORT:KEY

The cells are bench/cells/NN-name.py, sent as they are by every contestant.
Their inputs are made here, deterministically, in WORKDIR/inputs: sales.csv
(a year of orders), targets.xlsx (written with openpyxl) and orders.json (a
nested export).  Contestants:

  warm      interpd started with --exec-mode warm (plus $WARM_OPTS), a
            synchronous POST /v1/executions per cell, keep-alive
  cold      a second interpd, --exec-mode cold
  session   one session on the warm server (POST /v1/sessions), every cell
            a call in it
  Jupyter   a Jupyter kernel (jupyter_client KernelManager, Debian's
            ipykernel, the default inline matplotlib backend as a
            notebook has), no sandbox, no HTTP.  load_file and FILES are a
            shim defined once in the kernel (KERNEL_SHIM below) that reads
            the same files from WORKDIR/inputs, so the cell text is the same

interpd gets the inputs by POST /v1/files; each execution names the files
its cell reads (its load_file('NAME') calls), as a bot attaches the
conversation's uploads.

WARMUP rounds (untimed) run every cell on every contestant: the kernel and
the session have then run each cell before (a bot's kernel is a used one),
and an adaptive warm set has seen the runs it adapts to.  Then the warm
server's status is printed (GET /v1/admin/status: execution_mode, and
its adaptive warm set when the server has one) and ROUNDS timed rounds follow: in
each, every cell in order (print(1) at the start, middle and end), the
contestants in a shuffled order per cell (fixed seed).  Every result is
checked (cell 17 must fail with its KeyError and traceback, every other
succeed; each chart comes back exactly once; see EXPECT): a wrong one stops
the run.  Prints the per-cell figures, then a markdown table: p50 per
contestant and the issue's budget, warm print(1) p50 + 1.5 x the Jupyter
p50 of the cell.
"""
import base64
import datetime
import http.client
import json
import os
import random
import re
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import exec_client as ec  # noqa: E402
import warm  # noqa: E402  (its Kernel, the Jupyter contestant of issue 14)

CELL_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "cells")
USER = "cells-bencher"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
PRINT1 = "print(1)"
IDLE_CLOSE_S = 10   # reconnect before the server's 30 s header timeout
# The cells of the done-when: within budget once the warm set adapted.
DONE_WHEN = ("09-scipy-ttest", "10-sympy-solve", "11-seaborn", "12-sklearn")

# What each cell must give back.  out: a text its stdout (or, for a last
# expression, its display text) contains; files: exactly the files it
# writes (each once); shown: images it shows with plt.show(); error: the
# exception type and a line of the user's code the traceback must quote.
EXPECT = {
    "01-describe": dict(out="mean"),
    "02-resample": dict(out="Best month"),
    "03-numpy": dict(out="correlation units/revenue"),
    "04-pil": dict(out="Saved region_card.png", files=["region_card.png"]),
    "05-openpyxl": dict(out="Saved revenue_summary.xlsx",
                        files=["revenue_summary.xlsx"]),
    "06-last-expression": dict(display="revenue", html=True),
    "07-groupby-bar": dict(files=["units.png"]),
    "08-plt-show": dict(shown=1),
    "09-scipy-ttest": dict(out="Welch t"),
    "10-sympy-solve": dict(out="Break-even volume"),
    "11-seaborn": dict(shown=1),
    "12-sklearn": dict(out="R^2"),
    "13-statsmodels": dict(out="OLS Regression Results"),
    "14-plotly": dict(out="Saved revenue_by_region.html",
                      files=["revenue_by_region.html"]),
    "15-excel-upload": dict(out="attainment_%"),
    "16-json": dict(out="orders exported"),
    "17-traceback": dict(error="KeyError", tb="df.groupby('Month')"),
    "18-long-print": dict(out="ORD-10499", out_min=46000),
    "print(1)": dict(out="1"),
}

# Defined once in the Jupyter kernel before anything else: the cells' view
# of the inputs, as interpd's prelude gives it (FILES: filename -> path;
# load_file: a DataFrame for CSV, Excel and JSON records, else the parsed
# JSON).  The same readers interpd's load_file calls (pd.read_csv,
# pd.read_excel, json).
KERNEL_SHIM = """
import json as _json, os as _os
_INPUTS = %r
FILES = {_n: _os.path.join(_INPUTS, _n) for _n in sorted(_os.listdir(_INPUTS))}
def load_file(name, **kwargs):
    import pandas as pd
    path = FILES[name]
    ext = _os.path.splitext(path)[1].lower()
    if ext == '.csv':
        return pd.read_csv(path, **kwargs)
    if ext in ('.xlsx', '.xls'):
        return pd.read_excel(path, **kwargs)
    with open(path, 'rb') as f:
        obj = _json.loads(f.read())
    if isinstance(obj, list) and obj and all(isinstance(x, dict) for x in obj):
        return pd.DataFrame(obj)
    return obj
"""


def fail(msg):
    sys.exit("cells.py: " + msg)


# ----------------------------------------------------------------- inputs

REGIONS = {"North": 1.0, "South": 0.85, "East": 1.1, "West": 0.95}
PRODUCTS = {"Widget": 19.99, "Gadget": 34.50, "Gizmo": 12.75,
            "Doohickey": 54.00, "Thingamajig": 8.25}


def make_inputs(dirname):
    """sales.csv (1,500 orders of 2025), targets.xlsx, orders.json; the same
    bytes on every run (fixed seed)."""
    os.makedirs(dirname, exist_ok=True)
    rng = random.Random(26)
    start = datetime.date(2025, 1, 1)
    rows = ["order_id,date,region,product,channel,units,unit_price,discount,revenue"]
    for i in range(1500):
        day = start + datetime.timedelta(days=rng.randrange(365))
        region = rng.choice(list(REGIONS))
        product = rng.choice(list(PRODUCTS))
        channel = "Online" if rng.random() < 0.55 else "Retail"
        season = 1.0 + 0.35 * (day.month in (11, 12)) - 0.15 * (day.month in (1, 2))
        units = max(1, int(rng.gauss(12, 5) * REGIONS[region] * season))
        price = round(PRODUCTS[product] * rng.uniform(0.9, 1.1), 2)
        discount = rng.choice((0.0, 0.0, 0.0, 0.05, 0.1, 0.15))
        revenue = round(units * price * (1 - discount)
                        * (1.04 if channel == "Online" else 1.0), 2)
        rows.append(f"ORD-{10000 + i},{day.isoformat()},{region},{product},"
                    f"{channel},{units},{price:.2f},{discount:.2f},{revenue:.2f}")
    with open(os.path.join(dirname, "sales.csv"), "w", encoding="utf-8") as f:
        f.write("\n".join(rows) + "\n")

    from openpyxl import Workbook
    from openpyxl.styles import Font
    wb = Workbook()
    ws = wb.active
    ws.title = "Targets 2025"
    ws.append(["region", "target", "owner"])
    for cell in ws[1]:
        cell.font = Font(bold=True)
    owners = ("Ana Ruiz", "Ben Okafor", "Chen Wei", "Dana Levi")
    for (region, k), owner in zip(REGIONS.items(), owners):
        ws.append([region, round(140000 * k, -3), owner])
    wb.save(os.path.join(dirname, "targets.xlsx"))

    tiers = ("bronze", "silver", "gold")
    orders = []
    for i in range(200):
        items = [{"sku": rng.choice(list(PRODUCTS)), "qty": rng.randint(1, 5)}
                 for _ in range(rng.randint(1, 4))]
        total = round(sum(PRODUCTS[x["sku"]] * x["qty"] for x in items), 2)
        orders.append({"id": f"WEB-{5000 + i}",
                       "customer": {"id": f"C{rng.randint(100, 999)}",
                                    "tier": rng.choice(tiers)},
                       "items": items, "total": total})
    doc = {"store": "Acme Online", "exported_at": "2026-01-05T09:30:00Z",
           "orders": orders}
    with open(os.path.join(dirname, "orders.json"), "w", encoding="utf-8") as f:
        json.dump(doc, f, indent=1)


def load_cells(only):
    """[(name, code, [input filenames])] from bench/cells/, in order; only:
    comma-separated name prefixes to keep (empty: all)."""
    cells = []
    for fn in sorted(os.listdir(CELL_DIR)):
        if not re.fullmatch(r"\d\d-[a-z0-9-]+\.py", fn):
            continue
        name = fn[:-3]
        if name not in EXPECT:
            fail(f"bench/cells/{fn} has no entry in EXPECT")
        if only and not any(name.startswith(p) for p in only.split(",")):
            continue
        with open(os.path.join(CELL_DIR, fn), encoding="utf-8") as f:
            code = f.read()
        inputs = sorted(set(re.findall(r"load_file\('([^']+)'\)", code)))
        cells.append((name, code, inputs))
    if not cells:
        fail(f"no cells match CELLS={only!r}")
    return cells


# ---------------------------------------------------------------- checks

def check_text(who, name, out):
    want = EXPECT[name]
    if "out" in want and want["out"] not in out:
        fail(f"{who} {name}: stdout lacks {want['out']!r}: {out[:500]!r}")
    if len(out) < want.get("out_min", 0):
        fail(f"{who} {name}: stdout has {len(out)} characters, "
             f"want at least {want['out_min']}")


def check_interpd(who, name, doc):
    """An interpd result against EXPECT: success or the expected error,
    stdout, display, and every written file and chart exactly once."""
    want = EXPECT[name]
    err = doc.get("error")
    if "error" in want:
        if doc.get("success") or not err or err.get("type") != want["error"]:
            fail(f"{who} {name}: want a {want['error']}, got success "
                 f"{doc.get('success')}, error {err}")
        if want["tb"] not in (err.get("traceback") or ""):
            fail(f"{who} {name}: the traceback does not quote {want['tb']!r}: "
                 f"{err.get('traceback')!r}")
        return
    if not doc.get("success") or err:
        fail(f"{who} {name}: failed: {err}; stderr {doc.get('stderr', '')[-2000:]!r}")
    if doc.get("stdout_truncated"):
        fail(f"{who} {name}: stdout truncated")
    check_text(who, name, doc["stdout"])
    gen = doc.get("generated_files") or []
    names = sorted(g.get("filename") for g in gen)
    if names != sorted(want.get("files", [])):
        fail(f"{who} {name}: generated_files {names}, want {want.get('files', [])}")
    for g in gen:
        if not g.get("stored"):
            fail(f"{who} {name}: {g.get('filename')} not stored: {g.get('message')}")
        if g["filename"].endswith(".png"):
            data = base64.b64decode(g.get("data_base64") or "")
            if not data.startswith(PNG_MAGIC):
                fail(f"{who} {name}: {g['filename']} did not come back inline as a PNG")
    disp = doc.get("display") or []
    shown = [d for d in disp if "image/png" in d]
    if len(shown) != want.get("shown", 0):
        fail(f"{who} {name}: {len(shown)} images in display, want {want.get('shown', 0)}")
    for d in shown:
        if not base64.b64decode(d["image/png"]).startswith(PNG_MAGIC):
            fail(f"{who} {name}: a display image is not a PNG")
    if "display" in want:
        if len(disp) != 1 or want["display"] not in disp[0].get("text/plain", "") \
                or (want.get("html") and "<table" not in disp[0].get("text/html", "")):
            fail(f"{who} {name}: display {json.dumps(disp)[:500]}")


ANSI = re.compile(r"\x1b\[[0-9;]*m")


def check_kernel(name, res, cwd):
    """A Jupyter outcome (Kernel.cell) against EXPECT; the files the cell
    wrote are checked, then removed.  The inline backend also shows a
    figure the cell saved and left open (07): more images are allowed
    there, fewer never."""
    want = EXPECT[name]
    files = sorted(os.listdir(cwd))
    if "error" in want:
        tb = ANSI.sub("", "\n".join(res["traceback"]))
        if res["status"] != "error" or res["ename"] != want["error"] \
                or want["tb"] not in tb:
            fail(f"Jupyter {name}: want a {want['error']} quoting {want['tb']!r}, "
                 f"got {res['status']} {res['ename']}: {tb[-1000:]!r}")
        return
    if res["status"] != "ok":
        fail(f"Jupyter {name}: {res['ename']}: {res['evalue']}")
    check_text("Jupyter", name, res["stdout"])
    if files != sorted(want.get("files", [])):
        fail(f"Jupyter {name}: wrote {files}, want {want.get('files', [])}")
    for fn in files:
        path = os.path.join(cwd, fn)
        if fn.endswith(".png"):
            with open(path, "rb") as f:
                if not f.read(8) == PNG_MAGIC:
                    fail(f"Jupyter {name}: {fn} is not a PNG")
        os.unlink(path)
    if len(res["images"]) < want.get("shown", 0):
        fail(f"Jupyter {name}: {len(res['images'])} images shown, "
             f"want {want.get('shown', 0)}")
    if "display" in want:
        if want["display"] not in res["plain"] or \
                (want.get("html") and "<table" not in res["html"]):
            fail(f"Jupyter {name}: display {res['plain'][:300]!r}")


# ------------------------------------------------------------ contestants

class Http:
    """One keep-alive connection to an interpd, reopened (untimed) when it
    has been idle long enough for the server to close it."""

    def __init__(self, port, key):
        self.c = ec.Client("127.0.0.1", port, key, USER, b"")
        self.last = time.monotonic()

    def request(self, method, path, body=b"", ctype="application/json"):
        """(status, body bytes); not timed."""
        self.fresh()
        h = dict(self.c.headers, **{"Content-Type": ctype})
        self.c.conn.request(method, path, body=body, headers=h)
        resp = self.c.conn.getresponse()
        data = resp.read()
        self.last = time.monotonic()
        return resp.status, data

    def fresh(self):
        if time.monotonic() - self.last > IDLE_CLOSE_S:
            self.c.conn.close()   # http.client reconnects on the next request

    def execute(self, body):
        """One synchronous execution: (round trip ms, result)."""
        self.fresh()
        self.c.body = body
        status, doc, ms, data = self.c.post()
        self.last = time.monotonic()
        if status != 200:
            fail(f"POST /v1/executions answered {status}: {data[:2000]!r}")
        return ms, doc


class Interpd:
    """A server (warm or cold), or a session on one (session_id)."""

    def __init__(self, name, port, key, file_ids, session_id=None):
        self.name, self.http, self.ids = name, Http(port, key), file_ids
        self.sid = session_id
        self.modes = {}      # cell -> {resources.mode: count}, timed runs
        self.et = {}         # cell -> [execution_time ms], timed runs

    def run(self, name, code, inputs, timed):
        body = {"code": code, "files": [self.ids[f] for f in inputs]}
        if self.sid:
            body["session_id"] = self.sid
        ms, doc = self.http.execute(json.dumps(body).encode())
        check_interpd(self.name, name, doc)
        if timed:
            mode = (doc.get("resources") or {}).get("mode", "?")
            m = self.modes.setdefault(name, {})
            m[mode] = m.get(mode, 0) + 1
            self.et.setdefault(name, []).append(doc["execution_time"] * 1000)
        return ms

    def close(self):
        if self.sid:
            self.http.request("DELETE", "/v1/sessions/" + self.sid)


def upload(http, dirname, fn):
    # Raw bytes; a JSON file not as application/json (that is the URL form).
    ctype = "text/csv" if fn.endswith(".csv") else "application/octet-stream"
    with open(os.path.join(dirname, fn), "rb") as f:
        status, data = http.request("POST", "/v1/files?filename=" + fn,
                                    f.read(), ctype)
    if status != 201:
        fail(f"upload of {fn}: {status} {data[:500]!r}")
    doc = json.loads(data)
    want = {"csv": "csv", "xlsx": "excel", "json": "json"}[fn.rsplit(".", 1)[1]]
    if doc.get("file_type") != want:
        fail(f"{fn} was stored as file_type {doc.get('file_type')!r}, not {want!r}")
    return doc["file_id"]


def open_session(port, key, ids):
    http = Http(port, key)
    status, data = http.request("POST", "/v1/sessions", b"{}")
    if status != 201:
        fail(f"POST /v1/sessions answered {status}: {data[:500]!r}")
    sid = json.loads(data)["session_id"]
    return Interpd("session", port, key, ids, sid)


class Kernel(warm.Kernel):
    """The Jupyter contestant: warm.Kernel's kernel, but with the inline
    matplotlib backend (a notebook's: plt.show() gives a PNG), the
    load_file shim, and every outcome (errors, display) collected."""

    def __init__(self, work, inputs):
        from jupyter_client.manager import KernelManager
        import ipykernel
        import jupyter_client
        self.name = "Jupyter"
        self.dir = os.path.join(work, "kernel")
        os.makedirs(self.dir, exist_ok=True)
        # The sandbox's thread caps (interpd runs with them) and the same
        # font cache location; no MPLBACKEND: ipykernel picks inline.
        env = {k: v for k, v in os.environ.items() if k != "MPLBACKEND"}
        env.update(MPLCONFIGDIR=os.path.join(work, "mpl"),
                   OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")
        self.km = KernelManager(kernel_name="python3")
        self.log = open(os.path.join(work, "kernel.log"), "wb")
        self.km.start_kernel(cwd=self.dir, env=env, stdout=self.log,
                             stderr=self.log)
        self.kc = self.km.client()
        self.kc.start_channels()
        self.kc.wait_for_ready(timeout=60)
        res = self.cell("import sys; print(sys.executable)")[1]
        if res["stdout"].strip() != warm.PY:
            fail(f"the kernel runs {res['stdout']!r}, not {warm.PY}")
        res = self.cell(KERNEL_SHIM % inputs)[1]
        if res["status"] != "ok":
            fail(f"the kernel's load_file shim: {res['ename']}: {res['evalue']}")
        res = self.cell("import matplotlib; print(matplotlib.get_backend())")[1]
        self.note = (f"ipykernel {ipykernel.__version__}, jupyter_client "
                     f"{jupyter_client.__version__}, {warm.PY}, matplotlib "
                     f"backend {res['stdout'].strip()}")

    def cell(self, code):
        """Execute code; wait for its reply and for the kernel to go idle
        (all output delivered): (ms, outcome dict)."""
        t0 = time.perf_counter_ns()
        msg_id = self.kc.execute(code)
        res = {"stdout": "", "images": [], "plain": "", "html": "",
               "status": None, "ename": None, "evalue": None, "traceback": []}
        while True:
            msg = self.kc.get_iopub_msg(timeout=300)
            if msg["parent_header"].get("msg_id") != msg_id:
                continue
            kind, content = msg["msg_type"], msg["content"]
            if kind == "stream" and content["name"] == "stdout":
                res["stdout"] += content["text"]
            elif kind in ("display_data", "execute_result"):
                data = content["data"]
                if "image/png" in data:
                    res["images"].append(data["image/png"])
                res["plain"] += data.get("text/plain", "")
                res["html"] += data.get("text/html", "")
            elif kind == "error":
                res["ename"], res["evalue"] = content["ename"], content["evalue"]
                res["traceback"] = content["traceback"]
            elif kind == "status" and content["execution_state"] == "idle":
                break
        while True:
            reply = self.kc.get_shell_msg(timeout=300)
            if reply["parent_header"].get("msg_id") == msg_id:
                break
        ms = (time.perf_counter_ns() - t0) / 1e6
        res["status"] = reply["content"]["status"]
        return ms, res

    def run(self, name, code, inputs, timed):
        ms, res = self.cell(code)
        check_kernel(name, res, self.dir)
        return ms


# --------------------------------------------------------------- the run

def warm_status(http):
    """What the warm server says of its warm set (tolerates fields that
    this build does not have)."""
    status, data = http.request("GET", "/v1/admin/status")
    if status != 200:
        return f"GET /v1/admin/status answered {status}"
    doc = json.loads(data)
    em = doc.get("execution_mode") or {}
    slots = ", ".join(f"slot {s.get('slot')} {s.get('mode')} runs {s.get('runs')} "
                      f"restarts {s.get('restarts')} warm_set "
                      f"{','.join(s.get('warm_set') or []) or '-'}"
                      for s in em.get("slots", []))
    out = [f"execution_mode: serving {em.get('serving')}, modules "
           f"{em.get('modules')}; {slots}"]
    ad = em.get("adaptive")
    if isinstance(ad, dict):
        out.append(f"adaptive warm set: plan {','.join(ad.get('plan', []))} "
                   f"(generation {ad.get('plan_generation')}); newest set "
                   f"{','.join(ad.get('set') or []) or '-'}, "
                   f"{(ad.get('set_bytes') or 0) / 1048576:.1f} MiB over a "
                   f"{(ad.get('floor_bytes') or 0) / 1048576:.1f} MiB floor")
    else:
        out.append("adaptive warm set: not reported by this server")
    return "\n# ".join(out)


def wait_warm(http, seconds=120):
    """Poll /readyz until the warm server serves warm again (an adaptive
    warm set restarts its zygotes): its mode when it did or the deadline
    passed."""
    deadline = time.monotonic() + seconds
    mode = None
    while time.monotonic() < deadline:
        status, data = http.request("GET", "/readyz")
        mode = json.loads(data).get("execution_mode") if data else None
        if mode == "warm":
            break
        time.sleep(0.2)   # polling a condition with a deadline, not a sync
    return mode


def schedule(cells):
    """One round: print(1), the first half of the cells, print(1), the
    rest, print(1)."""
    p1 = ("print(1)", PRINT1, [])
    half = (len(cells) + 1) // 2
    return [p1] + cells[:half] + [p1] + cells[half:] + [p1]


def main(a):
    if len(a) != 5:
        sys.exit(__doc__)
    work, rounds, warmup = a[0], int(a[1]), int(a[2])
    servers = {}
    for spec in a[3:]:
        label, rest = spec.split("=", 1)
        port, key = rest.split(":", 1)
        servers[label] = (port, key)
    inputs = os.path.join(work, "inputs")
    make_inputs(inputs)
    cells = load_cells(os.environ.get("CELLS", ""))
    contestants = []
    try:
        for label in ("warm", "cold"):
            port, key = servers[label]
            http = Http(port, key)
            ids = {fn: upload(http, inputs, fn) for fn in sorted(os.listdir(inputs))}
            contestants.append(Interpd(label, port, key, ids))
            if label == "warm":
                warm_http = http
                contestants.append(open_session(port, key, ids))
        contestants.append(Kernel(work, inputs))
        run(contestants, warm_http, cells, rounds, warmup)
    finally:
        for c in contestants:
            c.close()


def run(contestants, warm_http, cells, rounds, warmup):
    kernel = contestants[-1]
    t0 = time.time()
    for r in range(warmup):
        for name, code, inputs in schedule(cells):
            for c in contestants:
                c.run(name, code, inputs, False)
        print(f"# warm-up round {r + 1}/{warmup} done, "
              f"load {os.getloadavg()[0]:.2f}", flush=True)
    print(f"# warm server after the warm-up ({time.time() - t0:.0f} s): "
          f"readyz execution_mode {wait_warm(warm_http)}")
    print("# " + warm_status(warm_http), flush=True)
    rng = random.Random(26)
    times = {c.name: {} for c in contestants}
    t1 = time.time()
    for r in range(rounds):
        for name, code, inputs in schedule(cells):
            order = list(contestants)
            rng.shuffle(order)
            for c in order:
                times[c.name].setdefault(name, []).append(
                    c.run(name, code, inputs, True))
        print(f"# round {r + 1}/{rounds} done, load {os.getloadavg()[0]:.2f}",
              flush=True)
    print("# warm server after the rounds: " + warm_status(warm_http))
    report(contestants, cells, times,
           dict(rounds=rounds, warmup=warmup, wall=time.time() - t1,
                kernel=kernel.note))


# ---------------------------------------------------------------- report

def ms2(x):
    return f"{x:.1f}" if x < 100 else f"{x:,.0f}"


def report(contestants, cells, times, run):
    names = ["print(1)"] + [c[0] for c in cells]
    print("\n# measurements (ms, round trip; execution_time is interpd's own; "
          "mode: resources.mode of the timed runs)")
    for name in names:
        for c in contestants:
            line = "  " + ec.fmt(f"{name} [{c.name}]", times[c.name][name])
            if isinstance(c, Interpd):
                et = c.et[name]
                line += (f" execution_time p50={ec.pct(et, 50):.1f}"
                         f" mode={c.modes[name]}")
            print(line)
    p = {c.name: {n: (ec.pct(times[c.name][n], 50), ec.pct(times[c.name][n], 90))
                  for n in names} for c in contestants}
    ref = p["warm"]["print(1)"][0]
    print(f"\n# run: {run['warmup']} warm-up rounds, {run['rounds']} timed rounds "
          f"({run['wall']:.0f} s); print(1) 3 times a round; kernel: "
          f"{run['kernel']}\n")
    print("| cell | warm p50 | cold p50 | session p50 | Jupyter p50 "
          "| budget (= warm print(1) p50 + 1.5 x Jupyter p50) | within budget? |")
    print("|---|---|---|---|---|---|---|")
    for n in names:
        row = [ms2(p[k][n][0]) for k in ("warm", "cold", "session", "Jupyter")]
        budget = ref + 1.5 * p["Jupyter"][n][0]
        w = p["warm"][n][0]
        ok = "yes" if w <= budget else f"no ({w / budget:.1f}x)"
        label = f"**{n}**" if n in DONE_WHEN else n
        print(f"| {label} | {' | '.join(row)} | {ms2(budget)} | {ok} |")
    print(f"\nms, p50 of {run['rounds']} rounds (print(1): {3 * run['rounds']}); "
          f"**bold**: the issue's done-when cells; budget from warm print(1) "
          f"p50 {ms2(ref)} ms.\n")
    print("| cell | warm p90 | cold p90 | session p90 | Jupyter p90 |")
    print("|---|---|---|---|---|")
    for n in names:
        row = [ms2(p[k][n][1]) for k in ("warm", "cold", "session", "Jupyter")]
        print(f"| {n} | {' | '.join(row)} |")


if __name__ == "__main__":
    main(sys.argv[1:])
