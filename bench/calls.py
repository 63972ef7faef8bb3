"""bench/calls.py - the driver of bench/calls.sh (issue 22: calls).

Run with Debian's /usr/bin/python3 (standard library only):

  calls.py ROUNDS N PORT KEY [SERVER_PID]

against one warm interpd on 127.0.0.1:PORT (the admin KEY).  The issue's
target: a call round trip through the service at most 2 ms p50 on this
machine, measured against a local echo client.  In one run, ROUNDS rounds
of these contestants, in a shuffled order per round (fixed seed):

  calls     one streamed run ("stream": true, "functions": ["llm_query"])
            whose code makes N sequential calls, llm_query(i) for i in
            0..N-1, and times each one inside the code (time.perf_counter
            before and after the call); it checks each result equals
            what it sent and prints the times at the end.  The client is the
            local echo client: it reads the stream on one keep-alive
            connection and answers every `call` event at once, echoing
            its argument ({"result": i}), with a POST to
            /v1/executions/{id}/calls/{call_id} on a keep-alive
            connection of its own (timed too: the answer POST as the
            client sees it, request to 204).
  http      baseline: the same client, the same N answer POSTs on its own
            keep-alive connection, to a call of a finished execution: 410
            call_expired.  The same route, key check, body parse and
            execution lookup as a real answer, but nothing goes through a
            sandboxed run: the HTTP hop an answer costs.
  echo      baseline: N round trips of the code's own framing (a 4-byte
            big-endian length, then the JSON call frame; the answer frame
            back) over an AF_UNIX socketpair to a forked Python echo
            process, timed as the code times its calls: the floor of any
            call from Python code to another process, with no service.

Why these baselines: a call round trip is, at least, the code's frame to
the service over its call socket, the call event to the client over the
stream, the client's answer POST, and the answer frame back to the code.
The answer POST is an HTTP request the client makes whatever the service
does inside (`http` measures it on the same server, with the same client
code, so that what the client library costs is in both); the two hops
between the code and the service are at least a Python process's round
trip over a socket (`echo`).  So `calls` minus `http` minus `echo` is
about what the service adds: the SSE event's write and wake-ups, the
call's bookkeeping, the answer handed to the run's supervisor.  A local
echo client is what the issue measures against: no model behind it, so
the figure is the service's and the client library's, not an answer's.

Every answer is checked: the stream's events are N `call` events (ids 1,
2, 3..., name llm_query, args [i] in order, kwargs {}, call ids distinct)
with `stdout` events among them and a `result` last, the result a
success whose execution_id is X-Execution-Id and whose stdout is the
code's N pairs of times; every answer POST 204 with no body; every baseline
POST 410 call_expired; every echo the value sent.  A wrong one stops the
run.

Each call is also split in three legs, from the times the code took (its
time.perf_counter before and after the call) and the client's (when it had
read the call event, when it had the 204): the sandbox has no clock of its
own (no time namespace), so both are on one CLOCK_MONOTONIC; the report
checks they look it (no leg 1 below 0) and, for the calls over the target,
counts which leg was the longest.

With SERVER_PID, the server's CPU time (utime + stime of /proc/PID/stat,
all its threads; the sandboxed runs are not its threads) per call or
request is given for each contestant, and the driver's own.
"""
import http.client
import json
import os
import random
import socket
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import exec_client as ec  # noqa: E402

USER = "bencher"
TARGET_MS = 2.0   # the issue: a call round trip at most 2 ms p50
MARK = "calls "   # the code's last line: this, then [[t0, t1], ...] (JSON)

# Each call's start and end (time.perf_counter, seconds), printed at the
# end: the round trip is t1 - t0.
CODE = """\
import json, time
ts = []
for i in range({n}):
    t0 = time.perf_counter()
    r = llm_query(i)
    t1 = time.perf_counter()
    ts.append((t0, t1))
    if r != i:
        raise AssertionError(f"call {{i}}: sent {{i!r}}, got {{r!r}}")
print({mark!r} + json.dumps(ts))
"""


class BadAnswer(Exception):
    """A wrong answer: it stops the run."""


def fail(msg):
    raise BadAnswer(msg)


def ms_since(t0):
    return (time.perf_counter_ns() - t0) / 1e6


class ServerCpu:
    """The server's CPU time (all its threads) in ms, or None without a
    pid."""

    def __init__(self, pid):
        self.path = f"/proc/{pid}/stat" if pid else None
        self.tick = os.sysconf("SC_CLK_TCK")

    def ms(self):
        if not self.path:
            return None
        with open(self.path) as f:
            # Fields after the command (which may hold spaces): utime and
            # stime are the 14th and 15th of the line.
            rest = f.read().rpartition(")")[2].split()
        return (int(rest[11]) + int(rest[12])) * 1000 / self.tick


class Answerer:
    """POSTs answers on one keep-alive connection."""

    def __init__(self, port, key):
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        self.headers = {"Authorization": "Bearer " + key, "X-User-Id": USER,
                        "Content-Type": "application/json"}
        self.connects = 0   # posts that had to open the connection first

    def post(self, xid, cid, value):
        """(status, ms from sending to the whole response, body)."""
        body = json.dumps({"result": value}).encode()
        self.connects += self.conn.sock is None
        t0 = time.perf_counter_ns()
        self.conn.request("POST", f"/v1/executions/{xid}/calls/{cid}",
                          body=body, headers=self.headers)
        resp = self.conn.getresponse()
        data = resp.read()
        return resp.status, ms_since(t0), data

    def close(self):
        self.conn.close()


class Calls:
    """One streamed run of N llm_query(i) calls, each answered at once."""

    name = "calls"

    def __init__(self, port, key, n):
        self.n = n
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        self.headers = {"Authorization": "Bearer " + key, "X-User-Id": USER,
                        "Content-Type": "application/json",
                        "Accept": "text/event-stream"}
        self.body = json.dumps({"code": CODE.format(n=n, mark=MARK),
                                "stream": True,
                                "functions": ["llm_query"]}).encode()
        self.answerer = Answerer(port, key)
        self.connects = 0
        self.last = None    # (execution id, a call id) of the last run

    def run(self):
        """{"rtt": [ms per call, as the code saw it], "first": the first
        call's (it also sets up the code's end of the call socket),
        "answer": [ms per answer POST], "to_client" and "to_code": [ms
        per call] (legs), "run": ms from the request to the result
        event}."""
        self.connects += self.conn.sock is None
        t0 = time.perf_counter_ns()
        self.conn.request("POST", "/v1/executions", body=self.body,
                          headers=self.headers)
        resp = self.conn.getresponse()
        ctype = resp.getheader("Content-Type", "")
        if resp.status != 200 or not ctype.startswith("text/event-stream"):
            fail(f"calls: HTTP {resp.status} {ctype}: {resp.read()[:2000]!r}")
        xid = resp.getheader("X-Execution-Id")
        got = {"answer": [], "ids": [], "calls": [], "stdout": [],
               "seen": []}
        result = None
        # events() ends after the result, once the body's end is read.
        for eid, kind, data in events(resp):
            got["ids"].append(eid)
            if kind == "call":
                self.answer(xid, json.loads(data), got)
            elif kind == "stdout":
                got["stdout"].append(json.loads(data))
            elif kind == "result":
                ms, result = ms_since(t0), json.loads(data)
            else:
                fail(f"calls: an unexpected {kind} event: {data[:2000]}")
        if result is None:
            fail(f"calls: the body ended before the result: {got['ids']}")
        ts = self.check(xid, result, got)
        rtt = [(t1 - t0) * 1000 for t0, t1 in ts]
        return {"rtt": rtt, "first": rtt[0], "answer": got["answer"],
                "run": ms,
                "to_client": [(e - t0) * 1000
                              for (t0, _), (e, _) in zip(ts, got["seen"])],
                "to_code": [(t1 - a) * 1000
                            for (_, t1), (_, a) in zip(ts, got["seen"])]}

    def answer(self, xid, call, got):
        """Echo the call's argument at once; check the call and the 204.
        Notes when the event was read and the 204 (time.perf_counter, s:
        the sandbox has no clock of its own, so the code's are on the same
        clock; report() checks that they look it)."""
        seen = time.perf_counter()
        i = len(got["calls"])
        if call.get("name") != "llm_query" or call.get("args") != [i] or \
                call.get("kwargs") != {}:
            fail(f"calls: call {i} is {call}")
        got["calls"].append(call["call_id"])
        status, ms, data = self.answerer.post(xid, call["call_id"], i)
        if status != 204 or data:
            fail(f"calls: answer {i}: HTTP {status}: {data[:2000]!r}")
        got["answer"].append(ms)
        got["seen"].append((seen, time.perf_counter()))

    def check(self, xid, doc, got):
        """The code's [[t0, t1], ...], after checking the run."""
        ids = got["ids"]
        if ids != [str(k) for k in range(1, len(ids) + 1)]:
            fail(f"calls: ids {ids}")
        if len(got["calls"]) != self.n or \
                len(set(got["calls"])) != self.n:
            fail(f"calls: {len(got['calls'])} calls, "
                 f"{len(set(got['calls']))} ids, of {self.n}")
        out = doc.get("stdout") if isinstance(doc, dict) else None
        if doc.get("success") is not True or doc.get("execution_id") != xid \
                or "".join(got["stdout"]) != out:
            fail(f"calls: the result {str(doc)[:2000]}")
        lines = out.splitlines()
        if len(lines) != 1 or not lines[0].startswith(MARK):
            fail(f"calls: stdout {out[:2000]!r}")
        ts = json.loads(lines[0][len(MARK):])
        if len(ts) != self.n:
            fail(f"calls: {len(ts)} round trips of {self.n}")
        self.last = (xid, got["calls"][-1])
        return ts

    def close(self):
        self.conn.close()
        self.answerer.close()


def events(resp):
    """The stream's events as (id, event, data) until the result event,
    then the check that the body ends there (the chunked framing's end,
    so that the connection can take the next request).  Only what interpd
    sends is parsed: `id`, `event`, one `data` line, a blank line; a
    comment line is skipped."""
    fields = {}
    while True:
        line = resp.readline()
        if not line:
            return
        line = line.rstrip(b"\r\n").decode()
        if line.startswith(":"):
            continue
        if line:
            name, _, value = line.partition(":")
            fields[name] = value[1:] if value.startswith(" ") else value
            continue
        if not fields:
            continue
        kind = fields.get("event")
        yield fields.get("id"), kind, fields.get("data")
        fields = {}
        if kind == "result":
            break
    rest = resp.read()
    if rest:
        fail(f"calls: bytes after the result: {rest[:200]!r}")


class Expired:
    """Baseline: N answer POSTs to a call of a finished execution (410),
    on a keep-alive connection of their own."""

    name = "http"

    def __init__(self, port, key, n, done):
        self.n = n
        self.xid, self.cid = done
        self.answerer = Answerer(port, key)

    def run(self):
        ms = []
        for i in range(self.n):
            status, t, data = self.answerer.post(self.xid, self.cid, i)
            if status != 410 or b'"call_expired"' not in data:
                fail(f"http: HTTP {status}: {data[:2000]!r}")
            ms.append(t)
        return {"post": ms}

    def close(self):
        self.answerer.close()


def frame(body):
    return len(body).to_bytes(4, "big") + body


def read_frame(fd, buf):
    """(the frame's JSON, the bytes after it); None at EOF.  Read as the
    prelude reads its call socket (prelude_lib.py _CallChannel)."""
    while True:
        if len(buf) >= 4:
            n = int.from_bytes(buf[:4], "big")
            if len(buf) >= 4 + n:
                return json.loads(buf[4:4 + n]), buf[4 + n:]
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            return None
        buf += chunk


def echo_server(fd):
    """The forked echo process: each call frame answered with its first
    argument, {"seq", "result"}, until EOF."""
    buf = b""
    while True:
        got = read_frame(fd, buf)
        if got is None:
            os._exit(0)
        call, buf = got
        os.write(fd, frame(json.dumps({"seq": call["seq"],
                                       "result": call["args"][0]},
                                      separators=(",", ":")).encode()))


class Echo:
    """Baseline: N round trips of the code's framing over a socketpair to
    a forked Python echo process, timed as the code times a call."""

    name = "echo"

    def __init__(self, n):
        self.n = n
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        self.pid = os.fork()   # before any thread: the driver has none
        if self.pid == 0:
            mine.close()
            echo_server(theirs.fileno())
        theirs.close()
        self.sock = mine
        self.enc = json.JSONEncoder(ensure_ascii=False, allow_nan=False,
                                    separators=(",", ":"))
        self.seq = 0

    def run(self):
        fd, buf, ms = self.sock.fileno(), b"", []
        for i in range(self.n):
            t0 = time.perf_counter()
            self.seq += 1
            # The frame as the prelude writes a call (_CallChannel.send).
            body = ('{"op":"call","seq":%d,"name":%s,"args":%s,"kwargs":%s}'
                    % (self.seq, self.enc.encode("llm_query"),
                       self.enc.encode([i]), self.enc.encode({})))
            os.write(fd, frame(body.encode("utf-8")))
            got = read_frame(fd, buf)
            ms.append((time.perf_counter() - t0) * 1000)
            if got is None:
                fail("echo: the echo process closed its socket")
            answer, buf = got
            if answer != {"seq": self.seq, "result": i}:
                fail(f"echo: sent {i}, got {answer}")
        return {"echo": ms}

    def close(self):
        self.sock.close()
        _, st = os.waitpid(self.pid, 0)
        if st:
            fail(f"echo: the echo process exited with status {st}")


# --------------------------------------------------------------- the run

def wait_done(port, key, xid):
    """Until GET says the execution is done (the result event may come a
    moment before the status turns), at most 10 s."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    hdr = {"Authorization": "Bearer " + key, "X-User-Id": USER}
    deadline = time.monotonic() + 10
    while True:
        c.request("GET", f"/v1/executions/{xid}", headers=hdr)
        resp = c.getresponse()
        doc = json.loads(resp.read())
        if resp.status == 200 and doc.get("status") == "done":
            c.close()
            return
        if time.monotonic() > deadline:
            fail(f"{xid} not done after 10 s: {resp.status} {doc}")
        time.sleep(0.05)   # polling a status, not synchronising a test


def rounds(contestants, n, rng, cpu):
    """n rounds of one run of each contestant, shuffled per round:
    ({name: {part: [ms, ...]}}, {name: [server CPU ms or None, driver
    CPU ms]}, [calls p50 per round])."""
    times = {c.name: {} for c in contestants}
    none = cpu.ms() is None
    spent = {c.name: [None if none else 0.0, 0.0] for c in contestants}
    per_round = []
    for r in range(n):
        order = list(contestants)
        rng.shuffle(order)
        for c in order:
            c0, d0 = cpu.ms(), time.process_time()
            got = c.run()
            spent[c.name][1] += (time.process_time() - d0) * 1000
            if c0 is not None:
                spent[c.name][0] += cpu.ms() - c0
            for part, ms in got.items():
                times[c.name].setdefault(part, []).extend(
                    ms if isinstance(ms, list) else [ms])
            if c.name == "calls":
                per_round.append(ec.pct(got["rtt"], 50))
        if (r + 1) % 5 == 0 or r + 1 == n:
            print(f"# round {r + 1}/{n} done, load {os.getloadavg()[0]:.2f}",
                  flush=True)
    return times, spent, per_round


def main(a):
    if len(a) not in (4, 5):
        sys.exit(__doc__)
    try:
        run(int(a[0]), int(a[1]), int(a[2]), a[3],
            int(a[4]) if len(a) == 5 else None)
    except BadAnswer as e:
        sys.exit(f"calls.py: {e}")


def run(n_rounds, n, port, key, pid):
    echo = Echo(n)
    calls = Calls(port, key, n)
    calls.run()   # warm-up, untimed; its last call answers the baseline
    wait_done(port, key, calls.last[0])
    contestants = [calls, Expired(port, key, n, calls.last), echo]
    for c in contestants[1:]:   # warm-ups, untimed
        c.run()
    calls.connects = calls.answerer.connects = 0
    contestants[1].answerer.connects = 0
    t0 = time.time()
    times, spent, per_round = rounds(contestants, n_rounds,
                                     random.Random(22), ServerCpu(pid))
    wall = time.time() - t0
    # A timed request that opened its connection would count a TCP connect:
    # say so (keep-alive should make it none).
    print(f"# connections opened during the timed rounds: stream "
          f"{calls.connects}, answers {calls.answerer.connects}, baseline "
          f"{contestants[1].answerer.connects}", flush=True)
    for c in contestants:
        c.close()
    report(times, spent, per_round,
           dict(rounds=n_rounds, n=n, wall=wall))


# ---------------------------------------------------------------- report

def row(name, xs):
    p = ec.pct
    return (f"| {name} | {p(xs, 50):.3f} | {p(xs, 90):.3f} | "
            f"{p(xs, 99):.3f} | {min(xs):.3f} |")


def report(times, spent, per_round, run):
    c, h, e = times["calls"], times["http"], times["echo"]
    rows = [("call round trip, in the code (llm_query(i))", c["rtt"]),
            ("call round trip, the first of each run", c["first"]),
            ("answer POST, 204, as the client sees it", c["answer"]),
            ("baseline http: answer POST to a finished execution, 410",
             h["post"]),
            ("baseline echo: Python echo over a socketpair", e["echo"])]
    print("# measurements (ms)")
    for name, xs in rows:
        print("  " + ec.fmt(name, xs) + f" p99={ec.pct(xs, 99):.2f}")
    print("  " + ec.fmt("whole run, request to result event", c["run"]))
    print("  calls p50 per round: " +
          " ".join(f"{x:.2f}" for x in per_round))
    total = run["rounds"] * run["n"]
    print(f"\n# run: {run['rounds']} rounds of a streamed run of "
          f"{run['n']} calls, {run['n']} baseline answer POSTs and "
          f"{run['n']} echoes (shuffled per round), {total} of each in "
          f"all; {run['wall']:.0f} s\n")
    print("| ms | p50 | p90 | p99 | min |")
    print("|---|---|---|---|---|")
    for name, xs in rows:
        print(row(name, xs))
    print("\n| CPU per call, POST or echo, ms | server | driver |")
    print("|---|---|---|")
    for name, what in (("calls", "calls (a whole run's / N)"),
                       ("http", "baseline http"), ("echo", "baseline echo")):
        server, driver = spent[name]
        server = "-" if server is None else f"{server / total:.3f}"
        print(f"| {what} | {server} | {driver / total:.3f} |")
    legs(c)
    ratios(c, h, e)


def legs(c):
    """A call's round trip in three legs, from the times the code and the
    driver took on the one clock they share: the call to the client's
    having read its event, the answer POST, the 204 to the code's having
    the answer.  The calls over the target, by their longest leg."""
    a, b, z = c["to_client"], c["answer"], c["to_code"]
    if min(a) < 0 or min(x + y for x, y in zip(b, z)) < 0:
        print("\nthe code's clock is not the driver's (a leg < 0): no "
              "legs")
        return
    print("\n| a call's legs, ms | p50 | p90 | p99 | min |")
    print("|---|---|---|---|---|")
    print(row("1. the code calls, to the client's having read the call "
              "event", a))
    print(row("2. the answer POST, to its 204", b))
    print(row("3. the 204, to the code's having the answer (< 0: before "
              "it)", z))
    slow = [k for k, t in enumerate(c["rtt"]) if t > TARGET_MS]
    by = [0, 0, 0]
    for k in slow:
        legs3 = (a[k], b[k], z[k])
        by[legs3.index(max(legs3))] += 1
    print(f"\ncalls over {TARGET_MS:g} ms: {len(slow)} of {len(a)} "
          f"({100 * len(slow) / len(a):.1f}%); their longest leg: 1 in "
          f"{by[0]}, 2 in {by[1]}, 3 in {by[2]}")


def ratios(c, h, e):
    p = ec.pct
    rtt, post, base, echo = (p(c["rtt"], 50), p(c["answer"], 50),
                             p(h["post"], 50), p(e["echo"], 50))
    ok = ("met" if rtt <= TARGET_MS
          else f"NOT met, by {rtt - TARGET_MS:.2f} ms")
    print(f"\n| call round trip p50 against | ms | ratio |")
    print("|---|---|---|")
    print(f"| the target | {TARGET_MS:.3f} | {rtt / TARGET_MS:.2f}x "
          f"({ok}) |")
    print(f"| baseline http (answer POST, 410) | {base:.3f} | "
          f"{rtt / base:.2f}x |")
    print(f"| baseline echo (socketpair) | {echo:.3f} | {rtt / echo:.1f}x |")
    print(f"| baseline http + echo | {base + echo:.3f} | "
          f"{rtt / (base + echo):.2f}x |")
    print(f"\nthe answer POST (204) p50 {post:.3f} ms, "
          f"{post - base:+.3f} ms against the baseline's 410")


if __name__ == "__main__":
    main(sys.argv[1:])
