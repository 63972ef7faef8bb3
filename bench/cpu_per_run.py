"""bench/cpu_per_run.py - CPU per run, the driver of bench/cpu_per_run.sh
(issue 24).  Standard library only; run with /usr/bin/python3.

  cpu_per_run.py HOST PORT KEY SERVER_PID N BLOCKS [CODE]

BLOCKS blocks, each of three phases in an order that alternates from
block to block:

  warm    N sequential POST /v1/executions of CODE (default print(1)) on
          one keep-alive connection;
  bare    N sequential /usr/bin/python3 -c 'print(1)' processes
          (posix_spawn, stdout read to EOF, waitpid);
  idle    nothing, for as long as the warm phase took (the control);
  session (with SESSION=1 in the environment) N sequential calls of
          `pass` in one live session on the same server.

Every phase starts and ends at a settled point: the server's process tree
has used no CPU for SETTLE_MS (the slot's parker has re-parked and the
parked children have rehearsed), so the children parked during a phase
and the rehearsals they did are counted in it, and the number parked is
the same at both ends.

Two measures per phase, each per run:

  system  /proc/stat deltas (every CPU, everything on the machine):
          busy = user+nice+system+irq+softirq+steal, kernel =
          system+irq+softirq; "net" subtracts the idle control's rate
          over the same duration (other activity on the machine);
  tree    the server's process tree: for every live process descending
          from SERVER_PID (the service, the zygotes' inits, the zygotes,
          the parked children) utime+stime plus cutime+cstime (what it
          reaped), from /proc/PID/stat.  Not disturbed by other work on
          the machine; misses kernel threads working for the tree
          (kworkers, RCU callbacks, softirq), which the system figure
          has.  Split by role: P (the service), Z (the zygotes' own:
          the parent side of each fork), A (the intermediates, reaped
          by the zygote), BC (the parked inits and program children,
          live and reaped by the zygote's init).
  client  the driver's own CPU (warm) or its children's (bare: the
          python processes themselves, which is the contestant).

Prints one line per phase and a summary of medians per run in ms.
"""
import http.client
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from exec_client import spawn_ms  # noqa: E402

HZ = os.sysconf("SC_CLK_TCK")
SETTLE_MS = 400     # no CPU in the tree for this long: settled
SETTLE_MAX_S = 20
BARE = ["/usr/bin/python3", "-c", "print(1)"]


def proc_stat():
    """(busy, kernel) ticks of every CPU."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    user, nice, system, idle, iowait, irq, softirq, steal = v[:8]
    return user + nice + system + irq + softirq + steal, system + irq + softirq


def _stat(pid):
    """(ppid, utime, stime, cutime, cstime) of pid, or None."""
    try:
        with open("/proc/%d/stat" % pid, "rb") as f:
            s = f.read()
    except OSError:
        return None
    rest = s[s.rindex(b")") + 2:].split()
    return (int(rest[1]), int(rest[11]), int(rest[12]), int(rest[13]),
            int(rest[14]))


def _nspid_depth(pid):
    try:
        with open("/proc/%d/status" % pid, "rb") as f:
            for line in f:
                if line.startswith(b"NSpid:"):
                    return len(line.split()) - 1
    except OSError:
        pass
    return 0


def _cmd(pid):
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as f:
            return f.read()
    except OSError:
        return b""


def tree(root):
    """{role: [user ticks, sys ticks]} over root's live descendants."""
    procs = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            st = _stat(int(name))
            if st:
                procs[int(name)] = st
    kids = {}
    for pid, st in procs.items():
        kids.setdefault(st[0], []).append(pid)
    roles = {"P": [0, 0], "Z": [0, 0], "A": [0, 0], "BC": [0, 0],
             "other": [0, 0]}
    todo = [root]
    while todo:
        pid = todo.pop()
        todo.extend(kids.get(pid, []))
        st = procs.get(pid)
        if not st:
            continue
        _, ut, stt, cut, cst = st
        if pid == root:
            roles["P"][0] += ut + cut
            roles["P"][1] += stt + cst
            continue
        zyg = b"zygote.py" in _cmd(pid)
        depth = _nspid_depth(pid)
        if zyg and depth == 2:          # a zygote: its As are what it reaped
            roles["Z"][0] += ut
            roles["Z"][1] += stt
            roles["A"][0] += cut
            roles["A"][1] += cst
        elif zyg:                       # a parked init or program child
            roles["BC"][0] += ut + cut
            roles["BC"][1] += stt + cst
        elif procs.get(st[0]) and st[0] == root:
            # a zygote's init (a copy of P): it reaps the parked inits
            roles["BC"][0] += cut
            roles["BC"][1] += cst
            roles["other"][0] += ut
            roles["other"][1] += stt
        else:
            roles["other"][0] += ut + cut
            roles["other"][1] += stt + cst
    return roles


def pss_by_role(root):
    """{role: (processes, Pss KiB)} of the live tree now (smaps_rollup)."""
    procs = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            st = _stat(int(name))
            if st:
                procs[int(name)] = st[0]
    kids = {}
    for pid, ppid in procs.items():
        kids.setdefault(ppid, []).append(pid)
    out = {}
    todo = list(kids.get(root, []))
    while todo:
        pid = todo.pop()
        todo.extend(kids.get(pid, []))
        zyg = b"zygote.py" in _cmd(pid)
        role = ("Z" if _nspid_depth(pid) == 2 else "parked") if zyg \
            else "init"
        try:
            with open("/proc/%d/smaps_rollup" % pid) as f:
                pss = sum(int(l.split()[1]) for l in f
                          if l.startswith("Pss:"))
        except OSError:
            continue
        n, k = out.get(role, (0, 0))
        out[role] = (n + 1, k + pss)
    return out


def tree_total(root):
    r = tree(root)
    return sum(u + s for u, s in r.values())


def settle(root):
    """Wait until the tree has used no CPU for SETTLE_MS."""
    end = time.monotonic() + SETTLE_MAX_S
    last, since = tree_total(root), time.monotonic()
    while time.monotonic() < end:
        time.sleep(0.05)
        now = tree_total(root)
        if now != last:
            last, since = now, time.monotonic()
        elif time.monotonic() - since >= SETTLE_MS / 1000:
            return True
    return False


class Snap:
    def __init__(self, root):
        self.t = time.monotonic()
        self.busy, self.kern = proc_stat()
        self.tree = tree(root)
        self.me = os.times()


def delta(a, b):
    d = {"secs": b.t - a.t, "busy": (b.busy - a.busy) / HZ * 1000,
         "kern": (b.kern - a.kern) / HZ * 1000}
    for role in a.tree:
        d["tree_" + role] = [(b.tree[role][i] - a.tree[role][i]) / HZ * 1000
                             for i in (0, 1)]
    d["tree"] = sum(sum(d["tree_" + r]) for r in a.tree)
    d["tree_sys"] = sum(d["tree_" + r][1] for r in a.tree)
    d["client"] = (b.me.user - a.me.user + b.me.system - a.me.system) * 1000
    d["children"] = (b.me.children_user - a.me.children_user +
                     b.me.children_system - a.me.children_system) * 1000
    d["children_sys"] = (b.me.children_system - a.me.children_system) * 1000
    return d


def spawn(argv):
    _, out = spawn_ms(argv)
    if out != b"1\n":
        sys.exit("%r: stdout %r" % (argv, out))


class Client:
    def __init__(self, host, port, key, code, session_id=None):
        self.conn = http.client.HTTPConnection(host, int(port))
        self.headers = {"Authorization": "Bearer " + key,
                        "X-User-Id": "cpu-bench",
                        "Content-Type": "application/json"}
        doc = {"code": code}
        if session_id:
            doc["session_id"] = session_id
        self.body = json.dumps(doc).encode()
        self.modes = {}
        self.exec_ms = []
        self.rt_ms = []

    def open_session(self):
        self.conn.request("POST", "/v1/sessions", body=b"{}",
                          headers=self.headers)
        resp = self.conn.getresponse()
        data = resp.read()
        if resp.status != 201:
            sys.exit("POST /v1/sessions: HTTP %d: %r" % (resp.status,
                                                         data[:300]))
        return json.loads(data)["session_id"]

    def post(self):
        t0 = time.perf_counter()
        self.conn.request("POST", "/v1/executions", body=self.body,
                          headers=self.headers)
        resp = self.conn.getresponse()
        data = resp.read()
        self.rt_ms.append((time.perf_counter() - t0) * 1000)
        doc = json.loads(data) if resp.status == 200 else None
        if not doc or not doc.get("success"):
            sys.exit("execution failed: HTTP %d: %r" % (resp.status,
                                                        data[:500]))
        mode = doc.get("resources", {}).get("mode", "?")
        self.modes[mode] = self.modes.get(mode, 0) + 1
        self.exec_ms.append(doc["execution_time"] * 1000)


def phase(kind, root, n, client, idle_s, sess=None):
    if not settle(root):
        print("# warning: the tree did not settle", flush=True)
    a = Snap(root)
    if kind == "warm":
        for _ in range(n):
            client.post()
    elif kind == "session":
        for _ in range(n):
            sess.post()
    elif kind == "bare":
        for _ in range(n):
            spawn(BARE)
    else:
        time.sleep(idle_s)
    if kind in ("warm", "session"):
        settle(root)    # the re-parks and rehearsals this phase caused
    b = Snap(root)
    return delta(a, b)


def pct(xs, p):
    s = sorted(xs)
    return s[max(0, min(len(s) - 1, int(round(p / 100 * len(s) + 0.5)) - 1))]


def main(a):
    if len(a) < 6:
        sys.exit(__doc__)
    host, port, key, root, n, blocks = a[0], a[1], a[2], int(a[3]), \
        int(a[4]), int(a[5])
    code = a[6] if len(a) > 6 else "print(1)"
    client = Client(host, port, key, code)
    for _ in range(5):
        client.post()
    client.modes, client.exec_ms, client.rt_ms = {}, [], []
    sess = None
    if os.environ.get("SESSION") == "1":
        sid = Client(host, port, key, "").open_session()
        sess = Client(host, port, key, "pass", sid)
        for _ in range(5):
            sess.post()
        sess.modes, sess.exec_ms, sess.rt_ms = {}, [], []
    res = {"warm": [], "bare": [], "idle": [], "session": []}
    idle_s = 5.0
    for blk in range(blocks):
        order = ["warm", "idle", "bare"] if blk % 2 == 0 else \
            ["bare", "idle", "warm"]
        if sess:
            order.append("session")
        for kind in order:
            d = phase(kind, root, n, client, idle_s, sess)
            if kind == "warm":
                idle_s = d["secs"]
            res[kind].append(d)
            print("# block %d %-4s %6.2f s  /proc/stat busy %8.1f kern %8.1f "
                  "ms | tree %8.1f (sys %7.1f) | client %6.1f children "
                  "%7.1f ms | load %.2f" % (
                      blk + 1, kind, d["secs"], d["busy"], d["kern"],
                      d["tree"], d["tree_sys"], d["client"], d["children"],
                      os.getloadavg()[0]), flush=True)
    # per run, net of the idle control's rate (each block's own idle)
    rows = {"warm": [], "bare": [], "session": []}
    for kind in ("warm", "bare", "session"):
        for d, idle in zip(res[kind], res["idle"]):
            rate_b = idle["busy"] / idle["secs"]
            rate_k = idle["kern"] / idle["secs"]
            rows[kind].append({
                "busy": (d["busy"] - rate_b * d["secs"]) / n,
                "kern": (d["kern"] - rate_k * d["secs"]) / n,
                "raw_busy": d["busy"] / n, "raw_kern": d["kern"] / n,
                "tree": d["tree"] / n, "tree_sys": d["tree_sys"] / n,
                "client": d["client"] / n, "children": d["children"] / n,
                "children_sys": d["children_sys"] / n,
                "wall": d["secs"] * 1000 / n,
                **{"tree_" + r: [x / n for x in d["tree_" + r]]
                   for r in ("P", "Z", "A", "BC", "other")}})

    def med(kind, key, i=None):
        xs = [r[key] if i is None else r[key][i] for r in rows[kind]]
        return pct(xs, 50)

    print("# idle control: %s ms busy per s" % ", ".join(
        "%.1f" % (d["busy"] / d["secs"]) for d in res["idle"]))
    print("# warm modes: %s; round trip p50 %.2f p90 %.2f, execution_time "
          "p50 %.2f p90 %.2f ms" % (
              client.modes, pct(client.rt_ms, 50), pct(client.rt_ms, 90),
              pct(client.exec_ms, 50), pct(client.exec_ms, 90)))
    if sess:
        print("# session `pass` calls: round trip p50 %.2f p90 %.2f, "
              "execution_time p50 %.2f p90 %.2f ms" % (
                  pct(sess.rt_ms, 50), pct(sess.rt_ms, 90),
                  pct(sess.exec_ms, 50), pct(sess.exec_ms, 90)))
    print("per run (ms, median of %d blocks of %d):" % (blocks, n))
    print("  %-28s %8s %8s %8s %8s" % ("", "busy", "kernel", "raw busy",
                                          "wall"))
    for kind in ("warm", "bare"):
        print("  %-28s %8.2f %8.2f %8.2f %8.2f" % (
            kind + " (/proc/stat, net of idle)", med(kind, "busy"),
            med(kind, "kern"), med(kind, "raw_busy"), med(kind, "wall")))
    print("  warm, the server's tree:      %.2f (kernel %.2f); client %.2f" %
          (med("warm", "tree"), med("warm", "tree_sys"),
           med("warm", "client")))
    for r in ("P", "Z", "A", "BC", "other"):
        print("    %-5s user %6.2f sys %6.2f" % (
            r, med("warm", "tree_" + r, 0), med("warm", "tree_" + r, 1)))
    print("  bare, the python processes:   %.2f (kernel %.2f)" % (
        med("bare", "children"), med("bare", "children_sys")))
    if rows["session"]:
        print("  session call (/proc/stat net) %.2f (kernel %.2f); tree "
              "%.2f (kernel %.2f); wall %.2f" % (
                  med("session", "busy"), med("session", "kern"),
                  med("session", "tree"), med("session", "tree_sys"),
                  med("session", "wall")))
    settle(root)
    print("  Pss now (processes, MiB): %s" % ", ".join(
        "%s %d %.1f" % (r, n, k / 1024)
        for r, (n, k) in sorted(pss_by_role(root).items())))
    w, b = med("warm", "busy"), med("bare", "busy")
    wt, bt = med("warm", "tree"), med("bare", "children")
    print("ratio warm/bare: /proc/stat %.2f, tree/children %.2f "
          "(target <= 0.35)" % (w / b if b else 0, wt / bt if bt else 0))


if __name__ == "__main__":
    main(sys.argv[1:])
