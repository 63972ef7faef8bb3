"""bench/warm.py - the driver of bench/warm.sh (issue 14: warm execution).

Run with Debian's /usr/bin/python3 (it needs python3-jupyter-client and
python3-ipykernel, plus pandas and matplotlib for the job):

  warm.py WORKDIR ROUNDS PER_ROUND DURATION REPS SERVER...

SERVER is LABEL=PORT:KEY, one per interpd started by bench/warm.sh (one per
mode: "cold" today; "warm" and others are more servers with other options).
In one run it measures, contestants interleaved in a shuffled order:

  A         /usr/bin/python3 -c 'print(1)', a fresh process each time
  B         a fresh /usr/bin/python3 running bench/png_job.py
  C         a Jupyter kernel (jupyter_client KernelManager, Debian's
            ipykernel): print(1), and png_job.py with its imports done
  LABEL     interpd over HTTP, keep-alive: print(1) and png_job.py
  LABEL session
            when the server answers POST /v1/sessions with 201: png_job.py
            in a session that already ran it once (imports done, its
            DataFrame loaded); otherwise reported as not available

Each round runs PER_ROUND print(1)s of every contestant (one each, in turn),
then one job of each.  Then executions/s of print(1) at 2 and 8 clients,
DURATION seconds each, REPS times, for A (concurrent process starts) and
every server.  Prints the measurements, then a markdown summary with the
ratios against the issue's targets.
"""
import json
import os
import random
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import exec_client as ec  # noqa: E402

PY = "/usr/bin/python3"
JOB = os.path.join(os.path.dirname(os.path.abspath(__file__)), "png_job.py")
PRINT1 = "print(1)\n"
USER = "bencher"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
CLIENTS = (2, 8)


def fail(msg):
    sys.exit("warm.py: " + msg)


def read(path):
    with open(path, "rb") as f:
        return f.read()


def job_code():
    return read(JOB).decode()


def check_chart(dirname):
    """B and C write chart.png into their working directory: check, remove."""
    path = os.path.join(dirname, "chart.png")
    data = read(path)
    if not data.startswith(PNG_MAGIC) or len(data) < 1000:
        fail(f"{path} is not a PNG ({len(data)} bytes)")
    os.unlink(path)


def check_job_stdout(out, who):
    if not out.startswith("png_job "):
        fail(f"{who}: the job printed {out!r}")


# ------------------------------------------------------------ contestants

class Contestant:
    """name; print1() and job() each run once and return ms (None: the
    contestant has no such part); op() is a make_op for ec.run_clients."""
    print1 = None
    job = None
    op = None
    note = ""

    def rest(self):
        """Close idle keep-alive connections (the throughput part lasts
        longer than the server's request-header-timeout)."""

    def close(self):
        pass


class FreshPython(Contestant):
    """A (print1) and B (job): a new /usr/bin/python3 per run."""

    def __init__(self, work):
        self.name, self.note = "A, B: fresh /usr/bin/python3", ""
        self.dir = os.path.join(work, "fresh")
        os.makedirs(self.dir, exist_ok=True)
        self.env = dict(os.environ, MPLCONFIGDIR=os.path.join(work, "mpl"),
                        MPLBACKEND="Agg")

    def print1(self):
        ms, out = ec.spawn_ms(ec.BASELINE)
        if out != b"1\n":
            fail(f"A printed {out!r}")
        return ms

    def job(self):
        ms, out = ec.spawn_ms([PY, JOB], env=self.env, cwd=self.dir)
        check_job_stdout(out.decode(), "B")
        check_chart(self.dir)
        return ms

    def op(self):
        def one():
            t0 = time.perf_counter_ns()
            ec.spawn_ms(ec.BASELINE)
            return "200", (time.perf_counter_ns() - t0) / 1e6
        return one


class Kernel(Contestant):
    """C: one Jupyter kernel, no sandbox, no HTTP; the job's imports are
    done (and the job run once) before anything is timed."""

    def __init__(self, work):
        from jupyter_client.manager import KernelManager
        self.name = "C: Jupyter kernel"
        self.dir = os.path.join(work, "kernel")
        os.makedirs(self.dir, exist_ok=True)
        env = dict(os.environ, MPLCONFIGDIR=os.path.join(work, "mpl"),
                   MPLBACKEND="Agg")
        self.km = KernelManager(kernel_name="python3")
        # The kernel's own chatter (its debugger's warning about frozen
        # modules) goes to WORKDIR/kernel.log.
        self.log = open(os.path.join(work, "kernel.log"), "wb")
        self.km.start_kernel(cwd=self.dir, env=env, stdout=self.log,
                             stderr=self.log)
        self.kc = self.km.client()
        self.kc.start_channels()
        self.kc.wait_for_ready(timeout=60)
        exe = self.run("import sys; print(sys.executable)")[1].strip()
        if exe != PY:
            fail(f"the kernel runs {exe!r}, not {PY}")
        self.run("import matplotlib\nmatplotlib.use('Agg')\n"
                 "import matplotlib.pyplot as plt\nimport pandas as pd\n")
        self.code = job_code()
        import ipykernel
        import jupyter_client
        self.note = (f"ipykernel {ipykernel.__version__}, jupyter_client "
                     f"{jupyter_client.__version__}, {exe}")

    def run(self, code):
        """Execute code; wait for its reply and for the kernel to go idle
        (all output delivered): (ms, stdout)."""
        t0 = time.perf_counter_ns()
        msg_id = self.kc.execute(code)
        out = []
        while True:
            msg = self.kc.get_iopub_msg(timeout=120)
            if msg["parent_header"].get("msg_id") != msg_id:
                continue
            kind, content = msg["msg_type"], msg["content"]
            if kind == "stream" and content["name"] == "stdout":
                out.append(content["text"])
            elif kind == "error":
                fail(f"kernel: {content['ename']}: {content['evalue']}")
            elif kind == "status" and content["execution_state"] == "idle":
                break
        while True:
            reply = self.kc.get_shell_msg(timeout=120)
            if reply["parent_header"].get("msg_id") == msg_id:
                break
        ms = (time.perf_counter_ns() - t0) / 1e6
        if reply["content"]["status"] != "ok":
            fail(f"kernel reply: {reply['content']}")
        return ms, "".join(out)

    def print1(self):
        ms, out = self.run(PRINT1)
        if out != "1\n":
            fail(f"C printed {out!r}")
        return ms

    def job(self):
        ms, out = self.run(self.code)
        check_job_stdout(out, "C")
        check_chart(self.dir)
        return ms

    def close(self):
        self.kc.stop_channels()
        self.km.shutdown_kernel()
        self.log.close()
        del self.kc, self.km   # not left to __del__ at interpreter exit


def check_result(doc, who, want_chart):
    """An interpd result: succeeded; the job returned chart.png inline."""
    if want_chart:
        check_job_stdout(doc["stdout"], who)
        gen = [g for g in doc.get("generated_files") or []
               if g.get("filename") == "chart.png"]
        if (not gen or gen[0].get("mime_type") != "image/png" or
                not gen[0].get("data_base64")):
            files = [(g.get("filename"), g.get("mime_type"), "data_base64" in g)
                     for g in doc.get("generated_files") or []]
            fail(f"{who}: no inline chart.png in generated_files {files}")
    elif doc["stdout"] != "1\n":
        fail(f"{who}: print(1) printed {doc['stdout']!r}")


class Interpd(Contestant):
    """One interpd server (one mode), over HTTP with keep-alive: one
    connection for print(1), one for the job."""

    def __init__(self, label, port, key):
        self.name, self.port, self.key = label, port, key
        self.et = {"print1": [], "job": []}   # the results' execution_time
        self.c1 = ec.Client("127.0.0.1", port, key, USER,
                            json.dumps({"code": PRINT1}).encode())
        self.cj = ec.Client("127.0.0.1", port, key, USER,
                            json.dumps({"code": job_code()}).encode())

    def post(self, c, part):
        status, doc, ms, data = c.post()
        ec.check(status, doc, data)
        check_result(doc, self.name, part == "job")
        self.et[part].append(doc["execution_time"] * 1000)
        return ms

    def rest(self):
        self.c1.conn.close()   # http.client reconnects on the next request
        self.cj.conn.close()

    def print1(self):
        return self.post(self.c1, "print1")

    def job(self):
        return self.post(self.cj, "job")

    def op(self):
        return ec.http_op("127.0.0.1", self.port, self.key, USER,
                          json.dumps({"code": PRINT1}).encode())()


class Session(Contestant):
    """The job in an interpd session that already ran it once."""

    def __init__(self, srv, session_id):
        self.name, self.srv, self.sid = srv.name + " session", srv, session_id
        self.c = ec.Client("127.0.0.1", srv.port, srv.key, USER, json.dumps(
            {"code": job_code(), "session_id": session_id}).encode())
        self.job()   # imports, the DataFrame: loaded before any timing

    def job(self):
        status, doc, ms, data = self.c.post()
        ec.check(status, doc, data)
        check_result(doc, self.name, True)
        return ms

    def rest(self):
        self.c.conn.close()

    def close(self):
        self.c.conn.request("DELETE", "/v1/sessions/" + self.sid,
                            headers=self.c.headers)
        self.c.conn.getresponse().read()


def open_session(srv):
    """A Session on srv, or (None, why) when srv has no sessions."""
    c = ec.Client("127.0.0.1", srv.port, srv.key, USER, b"{}")
    c.conn.request("POST", "/v1/sessions", body=b"{}", headers=c.headers)
    resp = c.conn.getresponse()
    data = resp.read()
    c.conn.close()
    if resp.status != 201:
        return None, f"POST /v1/sessions answered {resp.status}"
    return Session(srv, json.loads(data)["session_id"]), ""


# --------------------------------------------------------------- the run

def stats(xs):
    return {"p50": ec.pct(xs, 50), "p90": ec.pct(xs, 90), "n": len(xs)}


def measure(contestants, rounds, per_round, rng):
    times = {c.name: {"print1": [], "job": []} for c in contestants}
    for r in range(rounds):
        for _ in range(per_round):
            order = [c for c in contestants if c.print1]
            rng.shuffle(order)
            for c in order:
                times[c.name]["print1"].append(c.print1())
        order = [c for c in contestants if c.job]
        rng.shuffle(order)
        for c in order:
            times[c.name]["job"].append(c.job())
        print(f"# round {r + 1}/{rounds} done, load {os.getloadavg()[0]:.2f}",
              flush=True)
    return times


def throughput(contestants, seconds, reps, rng):
    """{name: {clients: [execs/s per rep]}}, plus the non-200 outcomes."""
    eps = {c.name: {n: [] for n in CLIENTS} for c in contestants if c.op}
    bad = {}
    for c in contestants:
        c.rest()
    for rep in range(reps):
        for n in CLIENTS:
            order = [c for c in contestants if c.op]
            rng.shuffle(order)
            for c in order:
                cpu0 = time.process_time()
                elapsed, ok_ms, codes = ec.run_clients(n, seconds, c.op)
                cpu = (time.process_time() - cpu0) * 1000 / max(1, len(ok_ms))
                eps[c.name][n].append(len(ok_ms) / elapsed)
                for k, v in codes.items():
                    if k != "200":
                        bad[(c.name, n, k)] = bad.get((c.name, n, k), 0) + v
                print(f"# throughput {c.name}, {n} clients, rep {rep + 1}: "
                      f"{len(ok_ms) / elapsed:.1f}/s, outcomes {codes}, "
                      f"latency p50 {ec.pct(ok_ms, 50) if ok_ms else 0:.1f} ms, "
                      f"driver CPU {cpu:.2f} ms per request", flush=True)
    return eps, bad


def setup(work):
    """Warm everything that a first run pays once (matplotlib's font cache
    in work/mpl, the kernel's imports)."""
    fresh = FreshPython(work)
    fresh.job()
    return [fresh, Kernel(work)]


def main(a):
    if len(a) < 6:
        sys.exit(__doc__)
    work = a[0]
    rounds, per_round, seconds, reps = int(a[1]), int(a[2]), float(a[3]), int(a[4])
    contestants = []
    try:
        contestants += setup(work)
        run(contestants, a[5:], rounds, per_round, seconds, reps)
    finally:
        for c in contestants:
            c.close()


def run(contestants, specs, rounds, per_round, seconds, reps):
    """Add the servers (and their sessions) to contestants, warm up, measure."""
    kernel = contestants[1]
    servers = []
    for spec in specs:
        label, rest = spec.split("=", 1)
        port, key = rest.split(":", 1)
        servers.append(Interpd(label, port, key))
    contestants += servers
    no_session = {}
    for srv in servers:
        s, why = open_session(srv)
        if s:
            contestants.append(s)
        else:
            no_session[srv.name] = why
    for c in contestants:   # warm-ups, untimed
        for _ in range(3):
            c.print1 and c.print1()
        for _ in range(2):
            c.job and c.job()
    for srv in servers:
        srv.et = {"print1": [], "job": []}
    rng = random.Random(14)
    t0 = time.time()
    times = measure(contestants, rounds, per_round, rng)
    eps, bad = throughput(contestants, seconds, reps, rng)
    report(contestants, servers, times, eps, bad, no_session,
           dict(rounds=rounds, per_round=per_round, seconds=seconds, reps=reps,
                wall=time.time() - t0, kernel=kernel.note))


# ---------------------------------------------------------------- report

def ms2(x):
    return f"{x:.1f}" if x < 100 else f"{x:,.0f}"


def pair(xs):
    if not xs:
        return ""
    s = stats(xs)
    return f"{ms2(s['p50'])} / {ms2(s['p90'])}"


def verdict(ratio, target, higher_is_better=False):
    """'met' or the gap, stated as the factor still missing."""
    if higher_is_better:
        return "met" if ratio >= target else f"NOT met: {target / ratio:.1f}x short"
    return "met" if ratio <= target else f"NOT met: {ratio / target:.1f}x too slow"


def report(contestants, servers, times, eps, bad, no_session, run):
    p50 = {n: {k: ec.pct(v, 50) for k, v in t.items() if v} for n, t in times.items()}
    print("# measurements (ms; p50 / p90, n); execution_time is the result's own")
    for c in contestants:
        for part in ("print1", "job"):
            xs = times[c.name][part]
            if xs:
                print("  " + ec.fmt(f"{c.name} [{part}]", xs))
    for srv in servers:
        for part, xs in srv.et.items():
            print("  " + ec.fmt(f"{srv.name} [{part} execution_time]", xs))
    for k, v in sorted(bad.items()):
        print(f"  non-200 outcomes: {k}: {v}")
    A, B = p50[contestants[0].name]["print1"], p50[contestants[0].name]["job"]
    C1, CJ = p50[contestants[1].name]["print1"], p50[contestants[1].name]["job"]
    print(f"\n# run: {run['rounds']} rounds x {run['per_round']} print(1) + 1 job "
          f"each; throughput {run['seconds']:g} s x {run['reps']} reps per point "
          f"(median shown); {run['wall']:.0f} s; kernel: {run['kernel']}\n")
    print("| contestant | `print(1)` p50 / p90 ms | PNG job p50 / p90 ms "
          "| execs/s, 2 clients | execs/s, 8 clients |")
    print("|---|---|---|---|---|")
    for c in contestants:
        t, e = times[c.name], eps.get(c.name, {})
        rates = [f"{statistics.median(e[n]):.1f}" if e.get(n) else "" for n in CLIENTS]
        print(f"| {c.name} | {pair(t['print1'])} | {pair(t['job'])} | "
              f"{rates[0]} | {rates[1]} |")
    print("\n| interpd mode | target | measured | ratio | |")
    print("|---|---|---|---|---|")
    for srv in servers:
        s = p50[srv.name]
        rows = [("`print(1)` p50 <= 0.25 x A", s["print1"], A, 0.25),
                ("`print(1)` p50 <= C's round trip", s["print1"], C1, 1.0),
                ("PNG job p50 <= 0.25 x B", s["job"], B, 0.25)]
        for what, got, base, target in rows:
            r = got / base
            print(f"| {srv.name} | {what} | {ms2(got)} vs {ms2(base)} ms | "
                  f"{r:.2f} | {verdict(r, target)} |")
        sess = srv.name + " session"
        if sess in p50:
            r = p50[sess]["job"] / CJ
            print(f"| {srv.name} | session call, data loaded, p50 <= 1.2 x C's "
                  f"job | {ms2(p50[sess]['job'])} vs {ms2(CJ)} ms | {r:.2f} | "
                  f"{verdict(r, 1.2)} |")
        else:
            print(f"| {srv.name} | session call, data loaded, p50 <= 1.2 x C's "
                  f"job | not measurable: {no_session[srv.name]} | | NOT met |")
        r8 = statistics.median(eps[srv.name][8])
        print(f"| {srv.name} | >= 300 `print(1)`/s, 8 clients | {r8:.1f}/s | "
              f"{r8 / 300:.2f} | {verdict(r8, 300, True)} |")


if __name__ == "__main__":
    main(sys.argv[1:])
