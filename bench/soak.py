"""bench/soak.py - the driver of bench/soak.sh (issue 20, item 11).

Run with Debian's /usr/bin/python3 (standard library only):

  soak.py OUTDIR HOST PORT KEY PID SECONDS CLIENTS SAMPLE_S STEADY_AFTER_S \
          SERVER_LOG

CLIENTS threads (one user each, one keep-alive connection each) loop over a
weighted mix for SECONDS: raw uploads (1-256 KiB, random text), listings,
downloads (bytes checked against what was sent), deletes, executions (the
code reads one of the user's files from /mnt/data and prints its length;
every fifth one also writes a small output file) and URL ingests of a file
this driver serves itself on 127.0.0.1 (the server needs --fetch-allow
127.0.0.1/32).  A user keeps at most 40 files: past that, the op is a delete.

A sampler thread reads, every SAMPLE_S seconds, the server's
/proc/PID/status (VmRSS, RssAnon, RssFile, RssShmem, Threads) and
/proc/PID/smaps_rollup, and keeps the previous /proc/PID/smaps: when RSS
rose by 2 MiB or more since the last sample, it writes the mappings that
grew (and the thread list) to OUTDIR/step-<t>.txt; every 30 s it saves
the parsed smaps to OUTDIR/smaps-<t>.json (compare two with
`soak.py diff A.json B.json`).  From the same smaps it counts the malloc
arenas (glibc's 64 MiB-aligned heaps) with their RSS, and the mappings of
libmagic's compiled database (magic.mgc) with theirs.  Every sample goes to OUTDIR/samples.tsv; the server log lines
(SERVER_LOG) are echoed with their offset into the run.

At the end: per op the count of answers by status, the lost files (every
file a client still holds is downloaded and compared), the RSS per minute
(min / max / last sample of each minute), the max, and the drift after
STEADY_AFTER_S: (max - min) / min of RSS over the samples after it, and
(last - first) / first.  Exit status 1 if any answer was 5xx, a file was
lost or a check failed.
"""
import collections
import hashlib
import http.client
import http.server
import json
import os
import random
import re
import subprocess
import sys
import threading
import time

T0 = time.monotonic()
STOP = threading.Event()
LOCK = threading.Lock()
COUNTS = collections.defaultdict(collections.Counter)   # op -> status -> n
PROBLEMS = []                                            # strings
FIRST = threading.Event()      # set once the sampler has its first sample
MAX_FILES = 40
WEIGHTS = [("upload", 22), ("list", 18), ("download", 16), ("delete", 12),
           ("exec", 20), ("ingest", 12)]
INGEST_BODY = ("a,b,c\n" + "".join(f"{i},{i * i},{i % 7}\n"
                                   for i in range(4000))).encode()


def now():
    return time.monotonic() - T0


def problem(msg):
    with LOCK:
        if len(PROBLEMS) < 200:
            PROBLEMS.append(f"{now():7.1f}s {msg}")


def count(op, status):
    with LOCK:
        COUNTS[op][status] += 1


class Handler(http.server.BaseHTTPRequestHandler):
    """Serves INGEST_BODY at every path (the file of every URL ingest)."""
    protocol_version = "HTTP/1.1"

    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Type", "text/csv")
        self.send_header("Content-Length", str(len(INGEST_BODY)))
        self.end_headers()
        self.wfile.write(INGEST_BODY)

    def log_message(self, *args):
        pass


class Client:
    def __init__(self, i, host, port, key, ingest_base):
        self.i = i
        self.host, self.port = host, port
        self.user = f"soak{i}"
        self.hdr = {"Authorization": f"Bearer {key}", "X-User-Id": self.user}
        self.ingest_base = ingest_base
        self.files = collections.OrderedDict()   # file_id -> sha256 hex
        self.rng = random.Random(i)
        self.conn = None

    def request(self, method, path, body=None, headers=None):
        h = dict(self.hdr)
        h.update(headers or {})
        for attempt in range(2):
            if self.conn is None:
                self.conn = http.client.HTTPConnection(self.host, self.port,
                                                       timeout=120)
            try:
                self.conn.request(method, path, body=body, headers=h)
                r = self.conn.getresponse()
                data = r.read()
                if r.getheader("Connection", "").lower() == "close":
                    self.conn.close()
                    self.conn = None
                return r.status, data
            except (http.client.HTTPException, OSError) as e:
                self.conn.close()
                self.conn = None
                if attempt == 1 or method not in ("GET",):
                    raise RuntimeError(f"{method} {path}: {e!r}") from e
        raise AssertionError("unreachable")

    def add(self, op, status, data):
        if status == 201:
            f = json.loads(data)
            self.files[f["file_id"]] = f["sha256"]
        elif status != 429:
            problem(f"{self.user} {op} -> {status} {data[:200]!r}")

    def op_upload(self):
        n = self.rng.randint(1024, 256 * 1024)
        body = "".join(self.rng.choice("abcdefgh,\n") for _ in range(256))
        body = (body * (n // 256 + 1))[:n].encode()
        st, data = self.request("POST", f"/v1/files?filename=u{self.i}.txt",
                                body, {"Content-Type":
                                       "application/octet-stream"})
        count("upload", st)
        self.add("upload", st, data)
        if st == 201:
            want = hashlib.sha256(body).hexdigest()
            got = json.loads(data)["sha256"]
            if got != want:
                problem(f"{self.user} upload sha256 {got} != {want}")

    def op_ingest(self):
        url = f"{self.ingest_base}/data/{self.i}/t{int(now() * 1000)}.csv"
        st, data = self.request("POST", "/v1/files",
                                json.dumps({"url": url}).encode(),
                                {"Content-Type": "application/json"})
        count("ingest", st)
        self.add("ingest", st, data)

    def op_list(self):
        st, data = self.request("GET", "/v1/files?limit=50")
        count("list", st)
        if st != 200:
            problem(f"{self.user} list -> {st} {data[:200]!r}")
            return
        listed = {f["file_id"] for f in json.loads(data)["files"]}
        # Every file this user holds is in its first page (at most 40).
        missing = [f for f in self.files if f not in listed]
        if missing:
            problem(f"{self.user} list misses {missing[:3]}")

    def check_content(self, fid, op):
        st, data = self.request("GET", f"/v1/files/{fid}/content")
        count(op, st)
        if st != 200:
            problem(f"{self.user} {op} {fid} -> {st} {data[:200]!r}")
            return False
        if hashlib.sha256(data).hexdigest() != self.files[fid]:
            problem(f"{self.user} {op} {fid}: bytes differ from sha256")
            return False
        return True

    def op_download(self):
        if self.files:
            self.check_content(self.rng.choice(list(self.files)), "download")

    def op_delete(self):
        if not self.files:
            return
        fid = next(iter(self.files))
        st, data = self.request("DELETE", f"/v1/files/{fid}")
        count("delete", st)
        if st == 204:
            del self.files[fid]
        else:
            problem(f"{self.user} delete {fid} -> {st} {data[:200]!r}")

    def op_exec(self):
        req = {"code": "print(1)"}
        if self.files:
            fid = self.rng.choice(list(self.files))
            req["files"] = [fid]
            req["code"] = ("import glob\n"
                           f"p = glob.glob('/mnt/data/{fid}/*')[0]\n"
                           "print(len(open(p, 'rb').read()))\n")
            if self.rng.random() < 0.2:
                req["code"] += "open('/mnt/output/out.txt', 'w').write('x')\n"
                req["store_outputs"] = False
        st, data = self.request("POST", "/v1/executions",
                                json.dumps(req).encode(),
                                {"Content-Type": "application/json"})
        count("exec", st)
        if st == 200:
            r = json.loads(data)
            if not r.get("success"):
                problem(f"{self.user} exec failed: {data[:300]!r}")
        elif st != 429:
            problem(f"{self.user} exec -> {st} {data[:200]!r}")

    def run(self):
        ops, weights = zip(*WEIGHTS)
        while not STOP.is_set():
            op = self.rng.choices(ops, weights)[0]
            if op in ("upload", "ingest") and len(self.files) >= MAX_FILES:
                op = "delete"
            try:
                getattr(self, "op_" + op)()
            except Exception as e:   # noqa: BLE001 - any failure is a finding
                count(op, "exception")
                problem(f"{self.user} {op}: {e!r}")

    def final_check(self):
        lost = 0
        for fid in list(self.files):
            if not self.check_content(fid, "final"):
                lost += 1
        return lost


def read_kv(path):
    out = {}
    with open(path) as f:
        for line in f:
            k, _, v = line.partition(":")
            v = v.split()
            if v and v[0].isdigit():
                out[k.strip()] = int(v[0])
    return out


def read_smaps(pid):
    """{(start, perms, name): (size_kib, rss_kib, anon_kib)} of smaps."""
    maps = {}
    head = None
    cur = {}
    with open(f"/proc/{pid}/smaps") as f:
        for line in f:
            if re.match(r"^[0-9a-f]+-[0-9a-f]+ ", line):
                if head:
                    maps[head] = (cur.get("Size", 0), cur.get("Rss", 0),
                                  cur.get("Anonymous", 0))
                parts = line.split()
                name = parts[5] if len(parts) > 5 else "[anon]"
                # Keyed by start and name: a malloc heap grows in place.
                head = (parts[0].split("-")[0], parts[1], name)
                cur = {}
            else:
                k, _, v = line.partition(":")
                v = v.split()
                if v and v[0].isdigit():
                    cur[k] = int(v[0])
    if head:
        maps[head] = (cur.get("Size", 0), cur.get("Rss", 0),
                      cur.get("Anonymous", 0))
    return maps


def threads(pid):
    names = collections.Counter()
    for t in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{t}/comm") as f:
                names[f.read().strip()] += 1
        except OSError:
            pass
    return names


def arenas(maps):
    """The malloc arenas other than the main one, read from smaps: glibc
    makes each a 64 MiB-aligned heap (HEAP_MAX_SIZE), so: the anonymous
    read-write mappings starting on a 64 MiB boundary.  (count, rss KiB)."""
    heaps = [v for k, v in maps.items()
             if k[2] == "[anon]" and k[1] == "rw-p"
             and int(k[0], 16) % (64 << 20) == 0]
    return len(heaps), sum(v[1] for v in heaps)


def smaps_diff(before, after):
    rows = []
    for k, (size, rss, anon) in after.items():
        b = before.get(k, (0, 0, 0))
        if rss - b[1] >= 64:
            rows.append((rss - b[1], k, b, (size, rss, anon)))
    for k, b in before.items():
        if k not in after and b[1] >= 64:
            rows.append((-b[1], k, b, (0, 0, 0)))
    rows.sort(reverse=True)
    return "\n".join(f"{d:+7d} KiB rss  {k[0]} {k[1]} {k[2]:<30} size "
                     f"{b[0]}->{a[0]} rss {b[1]}->{a[1]} anon {b[2]}->{a[2]}"
                     for d, k, b, a in rows[:40])


def sampler(pid, outdir, every, samples):
    tsv = open(os.path.join(outdir, "samples.tsv"), "w")
    tsv.write("t_s\tvmrss_kib\trss_anon_kib\trss_file_kib\trss_shmem_kib\t"
              "threads\tsmaps_rss_kib\tsmaps_anon_kib\tprivate_dirty_kib\t"
              "arenas\tarenas_rss_kib\tmagic_mgc_maps\tmagic_mgc_rss_kib\n")
    prev_smaps = read_smaps(pid)
    prev_rss = None
    next_snap = 0.0
    while not STOP.is_set():
        t = now()
        st = read_kv(f"/proc/{pid}/status")
        ro = read_kv(f"/proc/{pid}/smaps_rollup")
        cur = read_smaps(pid)
        mgc = [v for k, v in cur.items() if k[2].endswith(".mgc")]
        row = (round(t, 1), st["VmRSS"], st.get("RssAnon", 0),
               st.get("RssFile", 0), st.get("RssShmem", 0), st["Threads"],
               ro.get("Rss", 0), ro.get("Anonymous", 0),
               ro.get("Private_Dirty", 0), *arenas(cur), len(mgc),
               sum(v[1] for v in mgc))
        samples.append(row)
        FIRST.set()
        tsv.write("\t".join(map(str, row)) + "\n")
        tsv.flush()
        if prev_rss is not None and st["VmRSS"] - prev_rss >= 2048:
            name = os.path.join(outdir, f"step-{int(t)}.txt")
            with open(name, "w") as f:
                f.write(f"t={t:.1f}s VmRSS {prev_rss} -> {st['VmRSS']} KiB; "
                        f"threads {dict(threads(pid))}\n")
                f.write(smaps_diff(prev_smaps, cur) + "\n")
            print(f"# {t:7.1f}s RSS step {prev_rss} -> {st['VmRSS']} KiB "
                  f"(+{st['VmRSS'] - prev_rss}); diff in {name}", flush=True)
        prev_smaps, prev_rss = cur, st["VmRSS"]
        if t >= next_snap:
            next_snap += 30.0
            with open(os.path.join(outdir, f"smaps-{int(t):05d}.json"),
                      "w") as f:
                json.dump([[*k, *v] for k, v in cur.items()], f)
        STOP.wait(max(0.0, every - (now() - t)))
    tsv.close()


def tail_log(path):
    """Echo the server's log lines with their offset into the run."""
    with open(path, errors="replace") as f:
        while not STOP.is_set():
            line = f.readline()
            if not line:
                STOP.wait(0.5)
                continue
            if " access " not in line:
                print(f"# {now():7.1f}s log: {line.rstrip()[:240]}",
                      flush=True)


def report(samples, steady_after, seconds):
    print("\nminute  samples  VmRSS min / max / last (MiB)  anon / file "
          "(last, MiB)  threads  arenas (RSS MiB)  magic.mgc maps (RSS MiB)")
    by_min = collections.defaultdict(list)
    for r in samples:
        by_min[int(r[0] // 60)].append(r)
    for m in sorted(by_min):
        rs = by_min[m]
        v = [r[1] for r in rs]
        print(f"{m + 1:6d}  {len(rs):7d}  {min(v) / 1024:8.1f} / "
              f"{max(v) / 1024:5.1f} / {v[-1] / 1024:5.1f}          "
              f"{rs[-1][2] / 1024:5.1f} / {rs[-1][3] / 1024:5.1f}"
              f"         {rs[-1][5]:7d}  {rs[-1][9]:6d} ({rs[-1][10] / 1024:4.1f})"
              f"  {rs[-1][11]:14d} ({rs[-1][12] / 1024:4.1f})")
    allv = [r[1] for r in samples]
    top = max(samples, key=lambda r: r[1])
    print(f"max VmRSS {max(allv) / 1024:.1f} MiB at {top[0]:.0f} s; first "
          f"sample {allv[0] / 1024:.1f} MiB, last {allv[-1] / 1024:.1f} MiB")
    steady = [r for r in samples if r[0] >= steady_after]
    if len(steady) >= 2:
        v = [r[1] for r in steady]
        spread = (max(v) - min(v)) / min(v) * 100
        drift = (v[-1] - v[0]) / v[0] * 100
        print(f"steady state (after {steady_after:.0f} s, {len(v)} samples): "
              f"min {min(v) / 1024:.1f} MiB, max {max(v) / 1024:.1f} MiB, "
              f"spread (max-min)/min {spread:.1f} %, drift (last-first)/first "
              f"{drift:+.1f} %: {'within' if spread <= 5 else 'NOT within'} 5 %")


def load_snap(path):
    with open(path) as f:
        return {tuple(r[:3]): tuple(r[3:]) for r in json.load(f)}


def main():
    if sys.argv[1] == "diff":
        # soak.py diff OUTDIR/smaps-A.json OUTDIR/smaps-B.json
        print(smaps_diff(load_snap(sys.argv[2]), load_snap(sys.argv[3])))
        return
    (outdir, host, port, key, pid, seconds, nclients, every,
     steady_after, server_log) = sys.argv[1:11]
    port, pid, nclients = int(port), int(pid), int(nclients)
    seconds, every = float(seconds), float(every)
    steady_after = float(steady_after)

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    ingest_base = f"http://127.0.0.1:{srv.server_address[1]}"

    samples = []
    ts = [threading.Thread(target=sampler, daemon=True,
                           args=(pid, outdir, every, samples)),
          threading.Thread(target=tail_log, args=(server_log,), daemon=True)]
    clients = [Client(i, host, port, key, ingest_base)
               for i in range(nclients)]
    ts += [threading.Thread(target=c.run) for c in clients]
    print(f"# soak: {nclients} clients, {seconds:.0f} s, sample every "
          f"{every:.0f} s", flush=True)
    # The first sample is the server before any load: clients start after.
    for t in ts[:2]:
        t.start()
    FIRST.wait()
    for t in ts[2:]:
        t.start()
    last = 0
    while now() < seconds:
        STOP.wait(min(60.0, seconds - now()))
        m = int(now() // 60)
        if m > last and samples:
            last = m
            with LOCK:
                ops = {op: sum(c.values()) for op, c in COUNTS.items()}
            print(f"# {now():7.1f}s VmRSS {samples[-1][1] / 1024:.1f} MiB "
                  f"threads {dict(threads(pid))} ops {ops}", flush=True)
    STOP.set()
    for t in ts[2:]:
        t.join()
    lost = sum(c.final_check() for c in clients)
    srv.shutdown()

    print("\nop        answers by status")
    bad5 = 0
    for op in sorted(COUNTS):
        c = COUNTS[op]
        bad5 += sum(n for s, n in c.items() if isinstance(s, int) and s >= 500)
        print(f"{op:9s} {sum(c.values()):6d}  {dict(sorted(c.items(), key=str))}")
    held = sum(len(c.files) for c in clients)
    print(f"files held at the end {held}, lost {lost}; 5xx answers {bad5}; "
          f"problems {len(PROBLEMS)}")
    for p in PROBLEMS[:30]:
        print("  " + p)
    report(samples, steady_after, seconds)
    sys.exit(1 if bad5 or lost or PROBLEMS else 0)


if __name__ == "__main__":
    main()
