"""bench/exec_client.py - the client side of bench/exec_latency.sh (issue 4).

Run with Debian's /usr/bin/python3 (standard library only):

  exec_client.py baseline N [ARGV...]
      time N starts of ARGV (default /usr/bin/python3 -c 'print(1)') with
      os.posix_spawn, stdout on a pipe read to EOF, then waitpid; prints
      "baseline n=N p50=.. p90=.. min=.. (ms)"
  exec_client.py latency HOST PORT KEY USER N WARMUP CODEFILE [PRELUDE WORKDIR]
      WARMUP then N sequential POST /v1/executions of the code in CODEFILE
      on one keep-alive connection; prints the HTTP round trip and the
      result's execution_time and cpu_time (p50/p90/min, ms), and checks
      every result succeeded.  With PRELUDE (path of prelude.py) and
      WORKDIR, each request is interleaved with one baseline start and one
      run of the prelude directly (no sandbox, the executor's argv and
      environment, job and output dirs under WORKDIR)
  exec_client.py throughput HOST PORT KEY USER CLIENTS SECONDS CODEFILE
      CLIENTS threads, each with its own keep-alive connection, posting the
      code back to back for SECONDS; prints executions/s (200 with success
      true), the count of 429s and of anything else, and the latencies

Times are monotonic (time.perf_counter_ns).  The client is plain http.client
so that it costs about the same per request in every mode.
"""
import http.client
import json
import os
import sys
import threading
import time


def pct(xs, p):
    """Nearest-rank percentile of a non-empty list (p in 0..100)."""
    s = sorted(xs)
    k = max(0, min(len(s) - 1, int(round(p / 100 * len(s) + 0.5)) - 1))
    return s[k]


def fmt(name, xs):
    return (f"{name} n={len(xs)} p50={pct(xs, 50):.2f} p90={pct(xs, 90):.2f} "
            f"min={min(xs):.2f} max={max(xs):.2f} (ms)")


def spawn_ms(argv, env=None, cwd=None):
    """Start argv with stdout on a pipe, read it to EOF, wait: (ms, stdout)."""
    r, w = os.pipe()
    fa = [(os.POSIX_SPAWN_DUP2, w, 1), (os.POSIX_SPAWN_CLOSE, r)]
    old = None
    if cwd:
        old = os.open(".", os.O_RDONLY)
        os.chdir(cwd)
    t0 = time.perf_counter_ns()
    pid = os.posix_spawn(argv[0], argv, os.environ if env is None else env,
                         file_actions=fa)
    os.close(w)
    out = b""
    while True:
        b = os.read(r, 65536)
        if not b:
            break
        out += b
    _, st = os.waitpid(pid, 0)
    ms = (time.perf_counter_ns() - t0) / 1e6
    os.close(r)
    if old is not None:
        os.fchdir(old)
        os.close(old)
    if st != 0:
        sys.exit(f"{argv} exited with status {st}")
    return ms, out


def baseline(n, argv):
    times = []
    for _ in range(n):
        ms, out = spawn_ms(argv)
        times.append(ms)
    print(fmt("baseline", times) + f" argv={argv!r} stdout={out!r}")


class Client:
    def __init__(self, host, port, key, user, body):
        self.conn = http.client.HTTPConnection(host, int(port))
        self.headers = {"Authorization": "Bearer " + key, "X-User-Id": user,
                        "Content-Type": "application/json"}
        self.body = body

    def post(self):
        """One execution: (status, parsed body or None, round trip ms)."""
        t0 = time.perf_counter_ns()
        self.conn.request("POST", "/v1/executions", body=self.body,
                          headers=self.headers)
        resp = self.conn.getresponse()
        data = resp.read()
        ms = (time.perf_counter_ns() - t0) / 1e6
        doc = None
        if resp.status == 200:
            doc = json.loads(data)
        elif resp.getheader("Connection", "").lower() == "close":
            self.conn.close()
        return resp.status, doc, ms, data


def body_of(codefile):
    with open(codefile, encoding="utf-8") as f:
        return json.dumps({"code": f.read()}).encode()


def check(status, doc, data):
    if status != 200 or not doc.get("success"):
        sys.exit(f"execution failed: HTTP {status}: {data[:2000]!r}")


BASELINE = ["/usr/bin/python3", "-c", "print(1)"]


def latency(host, port, key, user, n, warmup, codefile, prelude=None,
            workdir=None):
    """Sequential executions.  With prelude and workdir, each request is
    interleaved with the baseline (python3 -c 'print(1)') and with the
    prelude run directly, outside any sandbox, with the executor's argv
    and environment, so that the three see the same machine state."""
    c = Client(host, port, key, user, body_of(codefile))
    direct = None
    if prelude:
        job, out = os.path.join(workdir, "job"), os.path.join(workdir, "output")
        os.makedirs(job, exist_ok=True)
        os.makedirs(out, exist_ok=True)
        with open(codefile, encoding="utf-8") as f, \
                open(os.path.join(job, "code.py"), "w", encoding="utf-8") as g:
            g.write(f.read())
        env = {"PYTHONUNBUFFERED": "1", "PYTHONDONTWRITEBYTECODE": "1",
               "MPLBACKEND": "Agg", "MPLCONFIGDIR": os.path.join(workdir, "mpl"),
               "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1",
               "HOME": workdir, "LANG": "C.UTF-8", "PATH": "/usr/bin:/bin",
               "IPD_PRELUDE_JOB": job, "IPD_PRELUDE_OUTPUT": out}
        pargv = ["/usr/bin/python3", "-u", "-I", "-B", prelude]
        direct = lambda: spawn_ms(pargv, env=env, cwd=out)
    for _ in range(warmup):
        status, doc, _, data = c.post()
        check(status, doc, data)
        if direct:
            spawn_ms(BASELINE)
            direct()
    rt, et, cpu, base, pre = [], [], [], [], []
    for _ in range(n):
        if direct:
            base.append(spawn_ms(BASELINE)[0])
            ms, pout = direct()
            pre.append(ms)
        status, doc, ms, data = c.post()
        check(status, doc, data)
        rt.append(ms)
        et.append(doc["execution_time"] * 1000)
        cpu.append(doc["resources"]["cpu_time"] * 1000)
    if direct:
        print(fmt("baseline", base) + f" argv={BASELINE!r}")
        print(fmt("prelude_direct", pre) + f" stdout={pout!r}")
    print(fmt("http", rt))
    print(fmt("execution_time", et))
    print(fmt("cpu_time", cpu))
    if direct:
        d = [a - b for a, b in zip(rt, base)]
        print(fmt("paired_overhead", d) + " (http - baseline, same iteration)")
    gen = doc.get("generated_files") or []
    kinds = [g.get("mime_type", "?") + (" inline" if g.get("data_base64") else "")
             for g in gen]
    print(f"last result: stdout={doc['stdout']!r} generated_files={len(gen)} "
          f"{kinds} max_rss_kb={doc['resources']['max_rss_kb']}")


def run_clients(clients, seconds, make_op):
    """CLIENTS threads, each calling op = make_op() back to back for SECONDS
    (make_op runs in the thread, before the common start).  op() returns
    (outcome, ms): outcome "200" counts as a success, anything else is
    tallied by name.  Returns (elapsed s, success latencies, {outcome: n})."""
    lock = threading.Lock()
    ok_ms, codes = [], {}
    start = threading.Barrier(clients + 1)
    deadline = [0.0]

    def worker():
        op = make_op()
        start.wait()
        while time.perf_counter() < deadline[0]:
            outcome, ms = op()
            with lock:
                codes[outcome] = codes.get(outcome, 0) + 1
                if outcome == "200":
                    ok_ms.append(ms)

    threads = [threading.Thread(target=worker) for _ in range(clients)]
    for t in threads:
        t.start()
    t0 = time.perf_counter()
    deadline[0] = t0 + seconds
    start.wait()
    for t in threads:
        t.join()
    return time.perf_counter() - t0, ok_ms, codes


def http_op(host, port, key, user, body):
    """make_op for run_clients: one execution on a keep-alive connection."""
    def make():
        c = Client(host, port, key, user, body)

        def op():
            try:
                status, doc, ms, data = c.post()
            except (OSError, http.client.HTTPException) as e:
                c.conn.close()
                return type(e).__name__, 0.0
            if status == 200 and not doc.get("success"):
                return "200 unsuccessful", ms
            return str(status), ms
        return op
    return make


def throughput(host, port, key, user, clients, seconds, codefile):
    elapsed, ok_ms, codes = run_clients(
        clients, seconds, http_op(host, port, key, user, body_of(codefile)))
    n429 = codes.get("429", 0)
    other = {k: v for k, v in codes.items() if k not in ("200", "429")}
    print(f"throughput clients={clients} seconds={elapsed:.2f} ok={len(ok_ms)} "
          f"execs_per_s={len(ok_ms) / elapsed:.1f} http_429={n429} other={other or 0}")
    if ok_ms:
        print(fmt(f"latency_c{clients}", ok_ms))


def main(a):
    if not a:
        sys.exit(__doc__)
    mode = a[0]
    if mode == "baseline":
        baseline(int(a[1]), a[2:] or ["/usr/bin/python3", "-c", "print(1)"])
    elif mode == "latency":
        latency(a[1], a[2], a[3], a[4], int(a[5]), int(a[6]), a[7], *a[8:10])
    elif mode == "throughput":
        throughput(a[1], a[2], a[3], a[4], int(a[5]), float(a[6]), a[7])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv[1:])
