#!/usr/bin/python3
"""Streamed executions read by real clients (ctest: clients/sse).

Starts $INTERPD_BIN serve on 127.0.0.1 (port 0, SQLite and local blobs in
a temporary data dir, the admin key it writes there) and reads
`POST /v1/executions` streams with two clients that know nothing of
interpd:

1. Python's standard library: http.client, the body read line by line
   (HTTPResponse.readline, which undoes the chunked framing and returns as
   soon as a line is there) and parsed by the small Server-Sent Events
   parser below (the WHATWG rules: fields, comments, the blank line that
   dispatches).  It checks the status and Content-Type, that output comes
   while the code still runs (the result at least 1.5 s after the first
   chunk of a run that sleeps 2 s), ids 1, 2, 3..., the stdout chunks
   joined equal to the result's stdout, the result's execution_id equal to
   X-Execution-Id, `"stream": true` and `Accept: text/event-stream` each
   switching the answer to a stream (and neither: JSON), a raise giving a
   stderr chunk and a result with success false, and the keep-alive
   comment of an idle run.
2. The npm package `eventsource` (a WHATWG EventSource, pinned in
   tests/support/sse/package.json): tests/support/sse/eventsource_check.mjs
   URL KEY, whose exit status is its verdict.

Never skips: a missing INTERPD_BIN, node or eventsource package fails the
test (scripts/install-deps.sh installs the package).  Ends with "N passed,
N failed" and exits non-zero on any failure.
"""
import http.client
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests", "support"))
from interpd_server import Server, npm_pinned  # noqa: E402
SSE_DIR = os.path.join(ROOT, "tests", "support", "sse")
NODE_CHECK = os.path.join(SSE_DIR, "eventsource_check.mjs")
READ_TIMEOUT = 30  # seconds without a byte before a stream read fails
NODE_TIMEOUT = 120

results = {"passed": 0, "failed": 0}


def check(ok, what):
    results["passed" if ok else "failed"] += 1
    print(("ok   " if ok else "FAIL ") + what, flush=True)
    return ok


# ---- Server-Sent Events -----------------------------------------------------

class Stream:
    """One streamed answer: the response head and everything read."""

    def __init__(self):
        self.status = 0
        self.headers = {}
        self.t0 = 0.0      # when the request went out (monotonic)
        self.events = []   # dicts: id, event, data, fields, t (arrival)
        self.comments = []  # (text, t)
        self.eof = False   # the body ended after the result
        self.body = b""    # a non-stream answer's body


def parse_sse(lines, on_event, on_comment):
    """Feed SSE lines (bytes, with their line ending) to the callbacks:
    on_event(fields) once per dispatched event, where fields is the list
    of (name, value) lines in order; on_comment(text) per comment line.
    The rules of the WHATWG "event stream interpretation": a line starting
    with ':' is a comment, otherwise NAME[: VALUE] with one leading space
    of the value dropped, and a blank line dispatches what came before
    (nothing when no field came)."""
    fields = []
    for raw in lines:
        line = raw.decode("utf-8")
        for end in ("\r\n", "\n", "\r"):
            if line.endswith(end):
                line = line[:-len(end)]
                break
        if line == "":
            if fields:
                on_event(fields)
            fields = []
        elif line.startswith(":"):
            on_comment(line[1:])
        else:
            name, colon, value = line.partition(":")
            if colon and value.startswith(" "):
                value = value[1:]
            fields.append((name, value))


def event_of(fields, t):
    """The event a browser would dispatch: the last id and event, the data
    lines joined with newlines."""
    e = {"id": None, "event": "message", "data": None, "fields": fields,
         "t": t}
    data = []
    for name, value in fields:
        if name == "data":
            data.append(value)
        elif name in ("id", "event"):
            e[name] = value
    e["data"] = "\n".join(data) if data else None
    return e


def lines_of(resp, stream):
    """The body's lines; stops after the line that ends the result event,
    then notes whether the body ends there."""
    got_result = False
    while True:
        line = resp.readline()
        if not line:
            return
        yield line
        if got_result and line in (b"\n", b"\r\n"):
            stream.eof = resp.read(1) == b""
            return
        got_result = got_result or line.startswith(b"event: result")


def post(base, key, user, body, accept=None):
    """POST /v1/executions and read the answer: as a stream when it is
    one (until the result event), else the whole JSON body."""
    host, port = base.split("//", 1)[1].split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=READ_TIMEOUT)
    headers = {"Authorization": "Bearer " + key, "X-User-Id": user,
               "Content-Type": "application/json"}
    if accept:
        headers["Accept"] = accept
    s = Stream()
    s.t0 = time.monotonic()
    try:
        conn.request("POST", "/v1/executions", json.dumps(body), headers)
        resp = conn.getresponse()
        s.status = resp.status
        s.headers = {k.lower(): v for k, v in resp.getheaders()}
        if not s.headers.get("content-type", "").startswith(
                "text/event-stream"):
            s.body = resp.read()
            return s
        parse_sse(lines_of(resp, s),
                  lambda f: s.events.append(event_of(f, time.monotonic())),
                  lambda c: s.comments.append((c, time.monotonic())))
    finally:
        conn.close()
    return s


def result_of(s):
    """The result event's object (None without one)."""
    if not s.events or s.events[-1]["event"] != "result":
        return None
    try:
        return json.loads(s.events[-1]["data"])
    except ValueError:
        return None


def joined(s, kind):
    """The data of every `kind` event (each a JSON string), concatenated;
    None when one is not a JSON string."""
    out = []
    for e in s.events:
        if e["event"] == kind:
            try:
                v = json.loads(e["data"])
            except ValueError:
                return None
            if not isinstance(v, str):
                return None
            out.append(v)
    return "".join(out)


def check_shape(s, what):
    """What every streamed answer must be: 200, text/event-stream,
    X-Execution-Id, each event exactly `id`, `event`, `data` (one data
    line), ids 1, 2, 3..., stdout/stderr events then one result, the
    body ending after it, and the result's execution_id the header's."""
    check(s.status == 200, "%s: status %d" % (what, s.status))
    ctype = s.headers.get("content-type", "")
    check(ctype.startswith("text/event-stream"),
          "%s: Content-Type %r" % (what, ctype))
    xid = s.headers.get("x-execution-id")
    check(bool(xid), "%s: X-Execution-Id %r" % (what, xid))
    check(all([n for n, _ in e["fields"]] == ["id", "event", "data"]
              for e in s.events),
          "%s: every event is the lines id, event, data: %s" % (
              what, [[n for n, _ in e["fields"]] for e in s.events]))
    ids = [e["id"] for e in s.events]
    check(ids == [str(n) for n in range(1, len(ids) + 1)],
          "%s: ids count up from 1: %s" % (what, ids))
    kinds = [e["event"] for e in s.events]
    check(len(kinds) >= 1 and kinds[-1] == "result" and
          all(k in ("stdout", "stderr") for k in kinds[:-1]),
          "%s: stdout/stderr events, then the result: %s" % (what, kinds))
    check(s.eof, "%s: the body ends after the result" % what)
    res = result_of(s)
    check(isinstance(res, dict), "%s: the result's data is a JSON object"
          % what)
    res = res if isinstance(res, dict) else {}
    check(res.get("execution_id") == xid,
          "%s: result execution_id %r, X-Execution-Id %r" % (
              what, res.get("execution_id"), xid))
    out = joined(s, "stdout")
    check(out == res.get("stdout"),
          "%s: stdout chunks joined %r, the result's stdout %r" % (
              what, out, res.get("stdout")))
    return res


# ---- the checks -------------------------------------------------------------

def check_timing(base, key):
    """"stream": true; output while the code sleeps."""
    code = ("import time\nprint('first', flush=True)\ntime.sleep(2)\n"
            "print('second')\n")
    s = post(base, key, "u-sse-py", {"code": code, "stream": True})
    res = check_shape(s, "stream: true")
    check(res.get("success") is True and
          res.get("stdout") == "first\nsecond\n",
          "stream: true: success %r, stdout %r" % (
              res.get("success"), res.get("stdout")))
    outs = [e for e in s.events if e["event"] == "stdout"]
    check(bool(outs) and json.loads(outs[0]["data"]).startswith("first"),
          "stream: true: the first stdout chunk is the first print: %r" % (
              outs[0]["data"] if outs else None))
    if outs and s.events and s.events[-1]["event"] == "result":
        gap = s.events[-1]["t"] - outs[0]["t"]
        check(gap >= 1.5, "stream: true: the result came %.2f s after the "
              "first chunk (>= 1.5: the chunk came before the sleep ended)"
              % gap)


def check_accept(base, key):
    """Accept: text/event-stream alone streams; neither it nor "stream"
    answers JSON."""
    s = post(base, key, "u-sse-py", {"code": "print('via accept')"},
             accept="text/event-stream")
    res = check_shape(s, "Accept")
    check(res.get("success") is True and res.get("stdout") == "via accept\n",
          "Accept: stdout %r" % res.get("stdout"))
    s = post(base, key, "u-sse-py", {"code": "print('plain')"},
             accept="application/json")
    ctype = s.headers.get("content-type", "")
    try:
        plain = json.loads(s.body)
    except ValueError:
        plain = {}
    check(s.status == 200 and ctype.startswith("application/json") and
          plain.get("stdout") == "plain\n",
          "neither: %d %s %r" % (s.status, ctype, s.body[:200]))


def check_raise(base, key):
    """A raise: a stderr chunk and success false."""
    s = post(base, key, "u-sse-py",
             {"code": "print('before')\nraise ValueError('boom')\n",
              "stream": True})
    res = check_shape(s, "raise")
    err = joined(s, "stderr")
    check(bool(err) and "ValueError: boom" in err,
          "raise: stderr chunks %r" % err)
    check(err == res.get("stderr"), "raise: stderr chunks joined %r, the "
          "result's stderr %r" % (err, res.get("stderr")))
    check(res.get("success") is False, "raise: success %r"
          % res.get("success"))


def check_keepalive(base, key):
    """An idle run (no output for over 5 s) gets the `: keep-alive`
    comment before its result."""
    code = "import time\ntime.sleep(6.5)\nprint('late')\n"
    s = post(base, key, "u-sse-py", {"code": code, "stream": True})
    res = check_shape(s, "keep-alive")
    end = s.events[-1]["t"] if s.events else 0
    check(any(c == " keep-alive" and t < end for c, t in s.comments),
          "keep-alive: a `: keep-alive` comment before the result: %r"
          % [c for c, _ in s.comments])
    check(res.get("stdout") == "late\n", "keep-alive: stdout %r"
          % res.get("stdout"))


def check_eventsource(base, key):
    """The npm EventSource reads the same streams (its script checks)."""
    node = shutil.which("node")
    if not check(node is not None, "node is on PATH (install nodejs: "
                 "scripts/install-deps.sh)"):
        return
    want, have = npm_pinned(SSE_DIR, "eventsource")
    if not check(have == want, "npm eventsource %s installed in "
                 "tests/support/sse (have %s; run scripts/install-deps.sh)"
                 % (want, have)):
        return
    try:
        p = subprocess.run([node, NODE_CHECK, base + "/v1/executions", key],
                           timeout=NODE_TIMEOUT, cwd=SSE_DIR)
        rc = p.returncode
    except subprocess.TimeoutExpired:
        rc = "timeout after %d s" % NODE_TIMEOUT
    check(rc == 0, "eventsource_check.mjs exit status %s" % rc)


# ---- the server ---------------------------------------------------------------

def main():
    binary = os.environ.get("INTERPD_BIN")
    if not binary or not os.access(binary, os.X_OK):
        print("clients/sse: INTERPD_BIN is not set to the interpd binary "
              "(ctest sets it)", file=sys.stderr)
        return 1
    tmp = tempfile.mkdtemp(prefix="ipd-sse-clients-")
    # The sandbox user must reach the data dir inside (as with any data dir).
    os.chmod(tmp, 0o711)
    server = None
    try:
        server = Server(binary, os.path.join(tmp, "data"),
                        os.path.join(tmp, "interpd.log"))
        with open(os.path.join(tmp, "data", "admin.key")) as f:
            key = f.read().strip()
        for step in (check_timing, check_accept, check_raise,
                     check_keepalive, check_eventsource):
            step(server.base, key)
    except (OSError, RuntimeError, http.client.HTTPException) as e:
        check(False, "%s: %s" % (type(e).__name__, e))
    finally:
        if server:
            why = server.stop_failure()
            check(why is None, why or "interpd exits 0 after SIGTERM")
            if results["failed"] and not why:
                print("---- interpd log (last lines) ----\n" +
                      server.log_tail(), flush=True)
        shutil.rmtree(tmp, ignore_errors=True)
    print("%d passed, %d failed" % (results["passed"], results["failed"]))
    return 1 if results["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
