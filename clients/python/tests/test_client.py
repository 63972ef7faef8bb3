#!/usr/bin/python3
"""interpd_client against a real interpd (ctest: clients/python).

setUpModule:
1. pip-installs clients/python (a copy, so the source tree stays clean)
   with Debian's pip into a temporary folder, offline (--no-index
   --no-build-isolation), and imports interpd_client from there: the
   tests exercise the installed package;
2. builds the suite's test wheels (tests/support/make-wheels.py) and
   serves them with tests/support/pkg-index.py on 127.0.0.1;
3. starts $INTERPD_BIN serve on 127.0.0.1:0 (its port from --ready-fd),
   SQLite and local blobs in a temporary data dir, --exec-mode cold, one
   execution slot and no queue (so a held slot answers 429 at once), a
   small file size limit and quota, that index and an allowlist of
   ipdtest-alpha, and --fetch-allow 127.0.0.1/32 (pip through the egress
   proxy, URL ingest from a local server); then makes a tenant key with
   `interpd keys create`.

Each test uses a user id of its own, so listings are exact.  Nothing
sleeps to synchronise: a slot is held by code waiting on a call the test
answers, and a running execution is polled for.  Never skips: a missing
INTERPD_BIN, pip or setuptools fails the run.
"""
import http.server
import io
import json
import logging
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest

from interpd_fixture import (PY, START_TIMEOUT, SUPPORT, Server,
                             check_installed, interpd_binary, pip_install,
                             poll_until)

MAX_FILE_SIZE = 1024 * 1024
QUOTA_FILES = 12

ic = None        # the installed interpd_client module
server = None    # Server
index = None     # subprocess of pkg-index.py
web = None       # the local file server for URL ingest
TMP = None
KEY = None       # a tenant ("bot") key
ADMIN_KEY = None


# ---- fixtures -------------------------------------------------------------------

def start_index(tmp):
    wheels = os.path.join(tmp, "wheels")
    subprocess.run([PY, os.path.join(SUPPORT, "make-wheels.py"), wheels],
                   check=True, stdout=subprocess.DEVNULL, timeout=300)
    port_file = os.path.join(tmp, "index.port")
    proc = subprocess.Popen(
        [PY, os.path.join(SUPPORT, "pkg-index.py"), "--dir", wheels,
         "--port", "0", "--port-file", port_file],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + START_TIMEOUT
    while not os.path.exists(port_file):
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError("pkg-index.py did not start")
        time.sleep(0.02)  # polling for the port file it writes atomically
    with open(port_file) as f:
        return proc, int(f.read())


class WebFiles(http.server.BaseHTTPRequestHandler):
    """GET /sales.csv: a small CSV; anything else 404."""

    def do_GET(self):
        if self.path == "/sales.csv":
            body = b"a,b\n1,2\n"
            self.send_response(200)
            self.send_header("Content-Type", "text/csv")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        else:
            self.send_error(404)

    def log_message(self, *args):
        pass


def setUpModule():
    global ic, server, index, web, TMP, KEY, ADMIN_KEY
    binary = interpd_binary()
    TMP = tempfile.mkdtemp(prefix="ipd-pyclient-")
    os.chmod(TMP, 0o711)  # the sandbox's user walks to the data dir
    site = pip_install(TMP)
    sys.path.insert(0, site)
    import interpd_client
    ic = interpd_client
    check_installed(ic, site)
    index, index_port = start_index(TMP)
    allow = os.path.join(TMP, "allowlist.txt")
    with open(allow, "w") as f:
        f.write("ipdtest-alpha\n")
    deps = os.path.join(TMP, "allowed-deps.txt")
    with open(deps, "w") as f:
        f.write("")
    web = http.server.ThreadingHTTPServer(("127.0.0.1", 0), WebFiles)
    threading.Thread(target=web.serve_forever, daemon=True).start()
    server = Server(binary, TMP, [
        "--exec-mode", "cold", "--exec-slots", "1", "--exec-queue", "0",
        "--max-file-size", str(MAX_FILE_SIZE), "--quota-files",
        str(QUOTA_FILES), "--allowlist", allow, "--allowed-deps", deps,
        "--pip-index-url", "http://127.0.0.1:%d/simple/" % index_port,
        "--pip-timeout", "120s", "--fetch-allow", "127.0.0.1/32"])
    ADMIN_KEY = server.admin_key()
    KEY = server.cli("keys", "create", "--tenant", "bot")["key"]


def tearDownModule():
    failed = False
    why = server.stop_failure() if server else None
    if why:
        print(why, file=sys.stderr)
        failed = True
    if index:
        index.terminate()
        index.wait(30)
    if web:
        web.shutdown()
        web.server_close()
    if TMP:
        shutil.rmtree(TMP, ignore_errors=True)
    if failed:
        raise RuntimeError("interpd did not stop cleanly")


def client(user, **kw):
    return ic.Client(server.base, api_key=KEY, user_id=user, **kw)


def admin():
    return ic.Client(server.base, api_key=ADMIN_KEY)


class RetryLog(logging.Handler):
    """Counts the client's retry log records; `first` is set at the first."""

    def __init__(self):
        super().__init__(logging.INFO)
        self.records = []
        self.first = threading.Event()

    def emit(self, record):
        if "retry" in record.getMessage():
            self.records.append(record.getMessage())
            self.first.set()

    def __enter__(self):
        lg = logging.getLogger("interpd_client")
        lg.setLevel(logging.INFO)
        lg.addHandler(self)
        return self

    def __exit__(self, *exc):
        logging.getLogger("interpd_client").removeHandler(self)


class HeldSlot:
    """The one execution slot held by a streamed run whose code waits on a
    call (`hold`) until release()."""

    def __init__(self, c):
        self.stream = c.stream("print('holding', flush=True)\n"
                               "print(call_client('hold'))")
        self.events = iter(self.stream)
        for ev in self.events:
            if isinstance(ev, ic.CallEvent):
                self.call = ev
                return
        raise AssertionError("no call event")

    def release(self):
        self.call.answer("released")
        for _ in self.events:
            pass
        return self.stream.result


# ---- files ------------------------------------------------------------------------

class FilesTest(unittest.TestCase):

    def test_upload_forms_and_download(self):
        c = client("u-files")
        f1 = c.upload(b"a,b\n1,2\n", filename="sales.csv")
        self.assertIsInstance(f1, ic.File)
        self.assertEqual((f1.filename, f1.size, f1.file_type, f1.source),
                         ("sales.csv", 8, "csv", "upload"))
        self.assertEqual(f1["sha256"], f1.sha256)
        path = os.path.join(TMP, "notes.txt")
        with open(path, "wb") as f:
            f.write(b"hello from a path\n")
        f2 = c.upload(path, ttl_hours=1)
        self.assertEqual((f2.filename, f2.size), ("notes.txt", 18))
        created = time.strptime(f2.created_at, "%Y-%m-%dT%H:%M:%SZ")
        expires = time.strptime(f2.expires_at, "%Y-%m-%dT%H:%M:%SZ")
        self.assertEqual(time.mktime(expires) - time.mktime(created), 3600)
        buf = io.BytesIO(b"skip" + b"x" * 100000)
        buf.seek(4)
        f3 = c.upload(buf, filename="big.bin")
        self.assertEqual(f3.size, 100000)
        f4 = c.upload(b"col\n1\n", filename="donn\u00e9es \"q\".csv",
                      multipart=True, ttl_hours=2)
        self.assertEqual(f4.filename, "donn\u00e9es \"q\".csv")
        self.assertEqual(f4.size, 6)
        r, w = os.pipe()
        os.write(w, b"from a pipe\n")
        os.close(w)
        with os.fdopen(r, "rb") as pipe:
            f5 = c.upload(pipe, filename="pipe.txt")
        self.assertEqual(f5.size, 12)
        f6 = c.upload(path, multipart=True)
        self.assertEqual((f6.filename, f6.size), ("notes.txt", 18))
        r, w = os.pipe()
        os.write(w, b"a pipe, as a form\n")
        os.close(w)
        with os.fdopen(r, "rb") as pipe:
            f7 = c.upload(pipe, filename="form.txt", multipart=True)
        self.assertEqual(c.download(f7), b"a pipe, as a form\n")

        self.assertEqual(c.get_file(f1.file_id), f1)
        self.assertEqual(c.get_file(f1), f1)
        self.assertEqual(c.download(f1), b"a,b\n1,2\n")
        self.assertEqual(c.download(f5.file_id), b"from a pipe\n")
        dest = os.path.join(TMP, "downloaded.bin")
        self.assertEqual(c.download(f3, dest), dest)
        with open(dest, "rb") as f:
            self.assertEqual(f.read(), b"x" * 100000)
        out = io.BytesIO()
        self.assertEqual(c.download(f2, out), 18)
        self.assertEqual(out.getvalue(), b"hello from a path\n")

        c.delete_file(f1)
        with self.assertRaises(ic.NotFound):
            c.get_file(f1.file_id)
        with self.assertRaises(ic.NotFound):
            c.download(f1.file_id)
        with self.assertRaises(ic.NotFound):
            c.delete_file(f1.file_id)

    def test_paging(self):
        c = client("u-paging")
        ids = [c.upload(b"%d" % i, filename="f%d.txt" % i).file_id
               for i in range(5)]
        page = c.list_files(limit=2)
        self.assertIsInstance(page, ic.FilePage)
        self.assertEqual([f.file_id for f in page], ids[::-1][:2])
        self.assertTrue(page.next_cursor)
        page2 = c.list_files(limit=2, cursor=page.next_cursor)
        self.assertEqual([f.file_id for f in page2], ids[::-1][2:4])
        every = list(c.iter_files(page_size=2))
        self.assertEqual([f.file_id for f in every], ids[::-1])
        self.assertTrue(all(isinstance(f, ic.File) for f in every))
        last = c.list_files(limit=5)
        self.assertIsNone(last.next_cursor)
        other = c.for_user("u-paging-other")
        self.assertIs(other._transport, c._transport)
        self.assertEqual(other.list_files(), [])
        with self.assertRaises(ic.InvalidRequest) as cm:
            c.list_files(limit=0)
        self.assertEqual(cm.exception.status, 400)

    def test_upload_url(self):
        c = client("u-url")
        url = "http://127.0.0.1:%d/sales.csv" % web.server_port
        f = c.upload_url(url)
        self.assertEqual((f.filename, f.size, f.source, f.file_type),
                         ("sales.csv", 8, "url", "csv"))
        self.assertEqual(c.download(f), b"a,b\n1,2\n")
        g = c.upload_url(url, filename="renamed.csv", ttl_hours=1)
        self.assertEqual(g.filename, "renamed.csv")
        with self.assertRaises(ic.UpstreamError) as cm:
            c.upload_url("http://127.0.0.1:%d/missing" % web.server_port)
        self.assertEqual(cm.exception.status, 502)
        with self.assertRaises(ic.InvalidRequest):
            c.upload_url("file:///etc/passwd")

    def test_limits(self):
        c = client("u-limits")
        with self.assertRaises(ic.PayloadTooLarge) as cm:
            c.upload(b"z" * (2 * MAX_FILE_SIZE), filename="huge.bin")
        self.assertEqual(cm.exception.status, 413)
        for i in range(QUOTA_FILES):
            c.upload(b"q", filename="q%d.txt" % i)
        with self.assertRaises(ic.QuotaExceeded) as cm:
            c.upload(b"q", filename="one-too-many.txt")
        self.assertEqual(cm.exception.code, "quota_exceeded")
        self.assertEqual(len(list(c.iter_files())), QUOTA_FILES)
        # The connection an early 413 closed is not reused.
        self.assertEqual(c.list_files(limit=1)[0].size, 1)


# ---- executions ---------------------------------------------------------------------

class ExecutionsTest(unittest.TestCase):

    def test_run(self):
        c = client("u-run")
        r = c.run("print(6 * 7)")
        self.assertIsInstance(r, ic.ExecutionResult)
        self.assertTrue(r.success)
        self.assertEqual(r.stdout, "42\n")
        self.assertIsNone(r.error)
        self.assertIsNone(r.error_type)
        self.assertTrue(r.execution_id.startswith("exec_"))
        r = c.run("1 / 0")
        self.assertFalse(r.success)
        self.assertEqual(r.error_type, "ZeroDivisionError")
        f = c.upload(b"a,b\n1,2\n3,4\n", filename="sales.csv")
        r = c.run("df = load_file('sales.csv')\nprint(int(df['b'].sum()) + n)",
                  files=[f], variables={"n": 100}, timeout=30)
        self.assertEqual(r.stdout, "106\n", r.stderr)
        r = c.run("open('out.txt', 'w').write('made')", store_outputs=True)
        self.assertEqual([g.filename for g in r.generated_files], ["out.txt"])
        self.assertIsInstance(r.generated_files[0], ic.File)
        self.assertEqual(c.download(r.generated_files[0]), b"made")
        with self.assertRaises(ic.NotFound):
            c.run("print(1)", files=["file_aaaaaaaaaaaaaaaaaaaaaaaaaa"])

    def test_async_and_wait(self):
        c = client("u-async")
        ex = c.submit("print(6 * 7)")
        self.assertIsInstance(ex, ic.Execution)
        self.assertEqual(ex.status, "queued")
        res = ex.wait(timeout=120)
        self.assertEqual(res.stdout, "42\n")
        st = c.get_execution(ex.execution_id)
        self.assertIsInstance(st, ic.ExecutionStatus)
        self.assertEqual(st.status, "done")
        self.assertTrue(st.finished)
        self.assertIsInstance(st.result, ic.ExecutionResult)
        self.assertEqual(st.result.execution_id, ex.execution_id)
        self.assertEqual(c.wait(ex.execution_id).stdout, "42\n")
        # A synchronous run's result is not kept: wait answers None.
        sync = c.run("print(1)")
        self.assertIsNone(c.wait(sync.execution_id))

    def test_wait_timeout_and_cancel(self):
        c = client("u-cancel")
        ex = c.submit("import time\nprint('working', flush=True)\n"
                      "time.sleep(60)")
        poll_until("running", lambda: ex.refresh().status == "running")
        with self.assertRaises(ic.WaitTimeout):
            ex.wait(timeout=0.3)
        ans = ex.cancel()
        self.assertEqual(ans, {"execution_id": ex.execution_id,
                               "cancelled": True})
        res = ex.wait(timeout=60)
        self.assertTrue(res.cancelled)
        self.assertEqual(res.error_type, "Cancelled")
        self.assertEqual(res.stdout, "working\n")
        self.assertEqual(c.get_execution(ex).status, "cancelled")
        with self.assertRaises(ic.NotFound):
            c.cancel(ex.execution_id)

    def test_stream_events(self):
        c = client("u-stream")
        code = ("import sys\nprint('hello', flush=True)\n"
                "print('warn', file=sys.stderr, flush=True)\n"
                "display({'k': 1})\n"
                "open('out.txt', 'w').write('data')\n"
                "42\n")
        with c.stream(code) as s:
            self.assertTrue(s.execution_id.startswith("exec_"))
            events = list(s)
            self.assertEqual(list(s), [])   # read to its end already
        kinds = [e.kind for e in events]
        self.assertEqual([e.id for e in events],
                         list(range(1, len(events) + 1)))
        self.assertEqual(kinds[-1], "result")
        self.assertIsInstance(events[-1], ic.ResultEvent)
        res = s.result
        self.assertEqual(res, events[-1].result)
        self.assertEqual(res.execution_id, s.execution_id)
        out = "".join(e.text for e in events if e.kind == "stdout")
        err = "".join(e.text for e in events if e.kind == "stderr")
        self.assertEqual((out, err), (res.stdout, res.stderr))
        self.assertEqual((out, err), ("hello\n", "warn\n"))
        shown = [e.bundle for e in events if isinstance(e, ic.DisplayEvent)]
        self.assertEqual(shown, res.display)
        self.assertEqual([b["text/plain"] for b in shown],
                         ["{'k': 1}", "42"])
        files = [e.file for e in events if isinstance(e, ic.FileEvent)]
        self.assertEqual([f.file_id for f in files],
                         [f.file_id for f in res.generated_files])
        self.assertEqual(c.download(files[0]), b"data")
        # stdout before the first display, files after the code ended.
        self.assertLess(kinds.index("stdout"), kinds.index("display"))
        self.assertGreater(kinds.index("file"),
                           max(i for i, k in enumerate(kinds)
                               if k == "display"))
        # on_event sees the same events of a run.
        seen = []
        r = c.run("print('x')", on_event=seen.append)
        self.assertEqual([e.kind for e in seen][-1], "result")
        self.assertEqual(r, seen[-1].result)

    def test_stream_cancel(self):
        c = client("u-stream-cancel")
        s = c.stream("import time\nprint('started', flush=True)\n"
                     "time.sleep(60)")
        kinds = []
        for ev in s:
            kinds.append(ev.kind)
            if ev.kind == "stdout" and len(kinds) == 1:
                self.assertEqual(s.cancel()["cancelled"], True)
        self.assertEqual(kinds[-1], "result")
        self.assertTrue(s.result.cancelled)
        self.assertEqual(s.result.error_type, "Cancelled")
        poll_until("cancelled", lambda: c.get_execution(
            s.execution_id).status == "cancelled")

    def test_list_executions(self):
        c = client("u-list")
        a = c.run("print('a')")
        b = c.run("print('b')")
        page = c.list_executions(limit=1)
        self.assertIsInstance(page, ic.Page)
        self.assertEqual([e.execution_id for e in page], [b.execution_id])
        self.assertIsInstance(page[0], ic.ExecutionSummary)
        self.assertEqual(page[0].status, "done")
        self.assertTrue(page.next_cursor)
        every = list(c.iter_executions(page_size=1))
        self.assertEqual([e.execution_id for e in every],
                         [b.execution_id, a.execution_id])


# ---- calls from the code ---------------------------------------------------------------

class RateLimitError(Exception):
    pass


class CallsTest(unittest.TestCase):

    def test_functions_answer_calls(self):
        c = client("u-calls")
        got = []
        lock = threading.Lock()

        def llm_query(prompt, temperature=None):
            with lock:
                got.append(prompt)
            if prompt == "fail":
                raise ValueError("bad prompt")
            if prompt == "limit":
                raise RateLimitError("try again in 20 s")
            if prompt == "object":
                return object()
            return {"text": "echo:" + prompt, "t": temperature}

        code = "\n".join([
            "print(llm_query('hi', temperature=0))",
            "try:",
            "    llm_query('fail')",
            "except ValueError as e:",
            "    print('ValueError', e)",
            "try:",
            "    llm_query('limit')",
            "except CallError as e:",
            "    print(type(e).__name__, e)",
            "try:",
            "    llm_query('object')",
            "except TypeError as e:",
            "    print('TypeError', 'not JSON' in str(e))",
            "try:",
            "    call_client('nope')",
            "except NameError as e:",
            "    print('NameError', e)",
            "print([r['text'] for r in call_client_batch('llm_query',"
            " ['a', 'b', 'c'])])",
        ])
        seen = []
        r = c.run(code, functions={"llm_query": llm_query},
                  on_event=seen.append)
        self.assertTrue(r.success, r.stderr)
        self.assertEqual(r.stdout.splitlines(), [
            "{'text': 'echo:hi', 't': 0}",
            "ValueError bad prompt",
            "RateLimitError try again in 20 s",
            "TypeError True",
            "NameError the client has no function 'nope'",
            "['echo:a', 'echo:b', 'echo:c']",
        ])
        self.assertEqual(sorted(got), sorted(["hi", "fail", "limit",
                                              "object", "a", "b", "c"]))
        calls = [e for e in seen if isinstance(e, ic.CallEvent)]
        self.assertEqual(len(calls), 8)
        self.assertTrue(all(e.answered for e in calls))
        self.assertEqual((calls[0].name, calls[0].args, calls[0].kwargs),
                         ("llm_query", ["hi"], {"temperature": 0}))

    def test_answer_by_hand(self):
        c = client("u-calls-hand")
        s = c.stream("a = call_client('one', 1)\nb = call_client('two')\n"
                     "print(a, b)")
        events = iter(s)
        one = next(e for e in events if isinstance(e, ic.CallEvent))
        self.assertEqual((one.name, one.args), ("one", [1]))
        one.answer({"n": 1})
        with self.assertRaises(ic.Conflict) as cm:
            c.answer_call(s.execution_id, one.call_id, result=2)
        self.assertEqual(cm.exception.status, 409)
        two = next(e for e in events if isinstance(e, ic.CallEvent))
        two.answer_error("KeyError", "no two")
        for _ in events:
            pass
        self.assertFalse(s.result.success)
        self.assertEqual(s.result.error_type, "KeyError")
        # The result event can come a moment before the execution's
        # status turns done; an answer after that is 410.
        poll_until("done", lambda: c.get_execution(s.execution_id).finished)
        with self.assertRaises(ic.CallExpired) as cm:
            c.answer_call(s.execution_id, two.call_id, result=None)
        self.assertEqual(cm.exception.status, 410)


# ---- sessions ------------------------------------------------------------------------

class SessionsTest(unittest.TestCase):

    def test_session(self):
        c = client("u-session")
        with c.create_session() as sess:
            self.assertIsInstance(sess, ic.Session)
            self.assertTrue(sess.session_id.startswith("sess_"))
            r = sess.run("x = 41\nimport math")
            self.assertTrue(r.success, r.stderr)
            self.assertEqual(r.session_id, sess.session_id)
            self.assertEqual(sess.run("print(x + 1)").stdout, "42\n")
            names = {v.name: v for v in sess.variables()}
            self.assertEqual((names["x"].type, names["x"].repr),
                             ("int", "41"))
            self.assertNotIn("math", names)
            self.assertFalse(sess.variables().truncated)
            self.assertIn(sess.session_id,
                          [s.session_id for s in c.list_sessions()])
            self.assertEqual(sess.refresh().status, "ready")
            self.assertEqual(c.get_session(sess.session_id).session_id,
                             sess.session_id)
            # run(session=...) with the id, and a stream in the session.
            self.assertEqual(c.run("print(x)", session=sess.session_id)
                             .stdout, "41\n")
            with sess.stream("print(x * 2)") as s:
                list(s)
            self.assertEqual(s.result.stdout, "82\n")
            ex = sess.submit("print(x + 2)")
            self.assertEqual(ex.wait(timeout=60).stdout, "43\n")
        with self.assertRaises(ic.SessionExpired) as cm:
            c.get_session(sess.session_id)
        self.assertEqual(cm.exception.status, 410)
        with self.assertRaises(ic.SessionExpired):
            sess.run("print(x)")
        self.assertNotIn(sess.session_id,
                         [s.session_id for s in c.list_sessions()])
        with self.assertRaises(ic.NotFound):
            c.get_session("sess_aaaaaaaaaaaaaaaaaaaaaaaaaa")

    def test_session_busy(self):
        c = client("u-session-busy")
        sess = c.create_session()
        try:
            s = sess.stream("print(call_client('wait'))")
            events = iter(s)
            call = next(e for e in events if isinstance(e, ic.CallEvent))
            with self.assertRaises(ic.SessionBusy) as cm:
                sess.run("print(1)")
            self.assertEqual(cm.exception.attempts, 1)  # 409: no retry
            call.answer("done")
            for _ in events:
                pass
            self.assertEqual(s.result.stdout, "done\n")
        finally:
            sess.delete()


# ---- packages, tokens, admin -------------------------------------------------------------

class PackagesTest(unittest.TestCase):

    def test_packages(self):
        c = client("u-packages")
        pk = c.packages()
        self.assertEqual(pk["allowed"], ["ipdtest-alpha"])
        res = c.install_packages(["ipdtest-alpha==1.0", "left-pad"])
        self.assertEqual([(p.package, p.status) for p in res],
                         [("ipdtest-alpha==1.0", "installed"),
                          ("left-pad", "not_allowed")])
        self.assertIsInstance(res[0], ic.PackageResult)
        self.assertEqual(res[0].version, "1.0")
        self.assertIn({"name": "ipdtest-alpha", "version": "1.0"},
                      c.packages()["installed"])
        seen = []
        r = c.run("import ipdtest_alpha\nprint(ipdtest_alpha.hello())",
                  packages=["ipdtest-alpha==1.0"], on_event=seen.append)
        self.assertEqual(r.stdout, "alpha 1.0\n", r.stderr)
        inst = [e.package for e in seen if isinstance(e, ic.InstallEvent)]
        self.assertEqual([(p.package, p.status) for p in inst],
                         [("ipdtest-alpha==1.0", "already_installed")])
        with self.assertRaises(ic.InvalidRequest):
            c.run("print(1)", packages=["left-pad"])


class TokensTest(unittest.TestCase):

    def test_token(self):
        key_client = client("u-token")
        f = key_client.upload(b"shared", filename="shared.txt")
        tok = key_client.mint_token("u-token", ["files:read"], ttl="5m")
        self.assertIsInstance(tok, ic.Token)
        self.assertTrue(tok.token.startswith("ipdt_"))
        self.assertEqual((tok.user_id, tok.scopes),
                         ("u-token", ["files:read"]))
        tc = ic.Client(server.base, token=tok.token)
        self.assertNotIn("X-User-Id", tc._headers())
        self.assertEqual([g.file_id for g in tc.list_files()], [f.file_id])
        self.assertEqual(tc.download(f), b"shared")
        with self.assertRaises(ic.Forbidden) as cm:
            tc.upload(b"x", filename="x.txt")
        self.assertEqual(cm.exception.status, 403)
        with self.assertRaises(ic.Forbidden):
            tc.run("print(1)")
        with self.assertRaises(ic.Forbidden):
            tc.packages()
        # for_token shares the pool; the token's user is its own.
        self.assertEqual(len(list(key_client.for_token(tok).iter_files())),
                         1)
        with self.assertRaises(ic.Unauthorized):
            ic.Client(server.base, token=tok.token + "x").list_files()


class AdminTest(unittest.TestCase):

    def test_admin(self):
        a = admin()
        st = a.admin_status()
        self.assertEqual(st["metadata_backend"], "sqlite")
        self.assertIn("version", st)
        self.assertEqual(st["executions"]["slots"], 1)
        sweep = a.admin_cleanup()
        self.assertEqual(set(sweep), {"deleted_files", "freed_bytes",
                                      "orphans_removed", "duration_ms"})
        with self.assertRaises(ic.Forbidden):
            client("u-admin").admin_status()
        self.assertEqual(a.health(), {"status": "ok"})
        self.assertEqual(a.ready()["status"], "ready")


# ---- errors, retries, the transport ------------------------------------------------------

class ErrorsTest(unittest.TestCase):

    def test_mapping(self):
        c = client("u-errors")
        with self.assertRaises(ic.NotFound) as cm:
            c.get_file("file_aaaaaaaaaaaaaaaaaaaaaaaaaa")
        e = cm.exception
        self.assertIsInstance(e, ic.InterpdError)
        self.assertEqual((e.status, e.code), (404, "not_found"))
        self.assertTrue(e.request_id.startswith("req_"), e.request_id)
        self.assertEqual(e.headers["x-request-id"], e.request_id)
        self.assertTrue(e.message)
        self.assertIn(e.request_id, str(e))
        with self.assertRaises(ic.Unauthorized):
            ic.Client(server.base, api_key="ipd_" + "0" * 64,
                      user_id="u").list_files()
        with self.assertRaises(ic.InvalidUserId) as cm:
            ic.Client(server.base, api_key=KEY).list_files()
        self.assertEqual(cm.exception.code, "invalid_user_id")

    def test_429_retries(self):
        c = client("u-429")
        held = HeldSlot(c)
        try:
            quick = client("u-429", retries=2)
            t0 = time.monotonic()
            with RetryLog() as rl:
                with self.assertRaises(ic.TooManyRequests) as cm:
                    quick.run("print(1)")
            e = cm.exception
            self.assertEqual((e.status, e.code, e.attempts),
                             (429, "too_many_requests", 3))
            self.assertEqual(e.retry_after, 1.0)
            self.assertEqual(len(rl.records), 2)
            self.assertGreaterEqual(time.monotonic() - t0, 2.0)
            # A Retry-After over max_retry_wait is not waited for.
            with RetryLog() as rl:
                with self.assertRaises(ic.TooManyRequests) as cm:
                    client("u-429", max_retry_wait=0.5).run("print(1)")
            self.assertEqual((cm.exception.attempts, rl.records), (1, []))
            with self.assertRaises(ic.TooManyRequests) as cm:
                client("u-429", retries=0).run("print(1)")
            self.assertEqual(cm.exception.attempts, 1)
            # Retries that outlast the hold succeed.
            patient = client("u-429", retries=20)
            out = {}
            with RetryLog() as rl:
                t = threading.Thread(target=lambda: out.update(
                    r=patient.run("print('after the wait')")))
                t.start()
                self.assertTrue(rl.first.wait(60))
                self.assertEqual(held.release().stdout,
                                 "holding\nreleased\n")
                held = None
                t.join(120)
            self.assertEqual(out["r"].stdout, "after the wait\n")
            self.assertGreaterEqual(len(rl.records), 1)
        finally:
            if held:
                held.release()

    def test_transport_failures(self):
        # Nothing listens: ConnectionFailed.
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        s.close()
        with self.assertRaises(ic.ConnectionFailed) as cm:
            ic.Client("http://127.0.0.1:%d" % port, api_key=KEY).health()
        self.assertIsNone(cm.exception.status)
        # A server that accepts and never answers: RequestTimeout.
        mute = socket.socket()
        mute.bind(("127.0.0.1", 0))
        mute.listen(1)
        try:
            t0 = time.monotonic()
            with self.assertRaises(ic.RequestTimeout):
                ic.Client("http://127.0.0.1:%d" % mute.getsockname()[1],
                          api_key=KEY, timeout=0.5).health()
            self.assertLess(time.monotonic() - t0, 10)
        finally:
            mute.close()

    def test_keep_alive(self):
        c = client("u-keepalive")
        c.health()
        pool = c._transport._idle
        self.assertEqual(len(pool), 1)
        sock = pool[0].sock
        c.list_files()
        self.assertIs(pool[0].sock, sock)   # the same connection again
        # A pooled connection that broke is replaced once, silently.
        pool[0].sock.shutdown(socket.SHUT_RDWR)
        self.assertEqual(c.list_files(), [])
        self.assertIsNot(pool[0].sock, sock)
        # Many threads share one client.
        f = c.upload(b"t", filename="t.txt")
        errs = []

        def work():
            try:
                for _ in range(5):
                    if c.get_file(f.file_id) != f:
                        errs.append("differs")
            except Exception as e:  # reported below
                errs.append(repr(e))
        threads = [threading.Thread(target=work) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        self.assertEqual(errs, [])
        self.assertLessEqual(len(pool), c._transport.max_idle)
        c.close()
        self.assertEqual(pool, [])


# ---- without a server --------------------------------------------------------------------

class Fake(http.server.BaseHTTPRequestHandler):
    """A server that misbehaves on purpose: GET /v1/files/file_x answers
    503 (Retry-After: 0) until `fails` is used up; the content of file_bad
    does not match its ETag; a stream ends without its result."""

    protocol_version = "HTTP/1.1"
    fails = 0
    seen = []

    def _send(self, status, body, ctype="application/json", extra=()):
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        for k, v in extra:
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        Fake.seen.append(self.path)
        if self.path == "/v1/files/file_x":
            if Fake.fails > 0:
                Fake.fails -= 1
                self._send(503, b'{"error": {"code": "unavailable", '
                           b'"message": "busy", "request_id": "req_f"}}',
                           extra=[("Retry-After", "0")])
            else:
                self._send(200, b'{"file_id": "file_x"}')
        elif self.path == "/v1/files/file_bad/content":
            self._send(200, b"tampered", "text/plain",
                       [("ETag", '"%s"' % ("0" * 64))])
        else:
            self._send(404, b"{}")

    def do_POST(self):
        self.rfile.read(int(self.headers["Content-Length"]))
        body = b'id: 1\nevent: stdout\ndata: "partial"\n\n'
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("X-Execution-Id", "exec_fake")
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(body)
        self.close_connection = True

    def log_message(self, *args):
        pass


class OfflineTest(unittest.TestCase):

    def test_misbehaving_server(self):
        fake = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Fake)
        threading.Thread(target=fake.serve_forever, daemon=True).start()
        try:
            c = ic.Client("http://127.0.0.1:%d" % fake.server_port,
                          api_key="k", user_id="u")
            Fake.fails, Fake.seen = 2, []
            with RetryLog() as rl:
                self.assertEqual(c.get_file("file_x"), {"file_id": "file_x"})
            self.assertEqual(Fake.seen, ["/v1/files/file_x"] * 3)
            self.assertEqual(len(rl.records), 2)
            Fake.fails = 5
            with self.assertRaises(ic.Unavailable) as cm:
                c.get_file("file_x")
            self.assertEqual((cm.exception.attempts,
                              cm.exception.retry_after), (4, 0.0))
            with self.assertRaises(ic.ProtocolError):
                c.download("file_bad")
            dest = os.path.join(TMP, "bad.bin")
            with self.assertRaises(ic.ProtocolError):
                c.download("file_bad", dest)
            self.assertFalse(os.path.exists(dest))
            s = c.stream("print(1)")
            self.assertEqual(s.execution_id, "exec_fake")
            got = []
            with self.assertRaises(ic.ProtocolError):
                for ev in s:
                    got.append(ev.text)
            self.assertEqual(got, ["partial"])
            c.close()
        finally:
            fake.shutdown()
            fake.server_close()

    def test_sse_parser(self):
        from interpd_client.events import parse_sse
        lines = [b": keep-alive\n", b"\n", b"id: 1\r\n", b"event: stdout\r\n",
                 b"data: \"a\"\r\n", b"\r\n", b"id: 2\n", b"event: new_kind\n",
                 b"data: {\"x\":\n", b"data: 1}\n", b"\n", b"id: 3\n",
                 b"event: result\n", b"data:{\"success\": true}\n", b"\n",
                 b"id: 4\n", b"event: call\n", b"data: not json\n", b"\n"]
        evs = list(parse_sse(iter(lines)))
        self.assertEqual([(type(e).__name__, e.kind, e.id) for e in evs], [
            ("OutputEvent", "stdout", 1), ("Event", "new_kind", 2),
            ("ResultEvent", "result", 3), ("CallEvent", "call", 4)])
        self.assertEqual(evs[0].text, "a")
        self.assertEqual(evs[1].data, {"x": 1})
        self.assertEqual(evs[2].result, {"success": True})
        self.assertIsNone(evs[3].data)
        self.assertEqual(evs[3].raw, "not json")

    def test_retry_after(self):
        from interpd_client._http import parse_retry_after
        self.assertEqual(parse_retry_after("5"), 5.0)
        self.assertIsNone(parse_retry_after(None))
        self.assertIsNone(parse_retry_after("soon"))
        self.assertEqual(parse_retry_after("Mon, 01 Jan 2001 00:00:00 GMT"),
                         0.0)

    def test_error_classes(self):
        self.assertIs(ic.error_class(404, "not_found"), ic.NotFound)
        self.assertIs(ic.error_class(409, "session_busy"), ic.SessionBusy)
        self.assertIs(ic.error_class(410, "call_expired"), ic.CallExpired)
        self.assertIs(ic.error_class(409, "brand_new"), ic.Conflict)
        self.assertIs(ic.error_class(418, "teapot"), ic.InterpdError)
        from interpd_client.errors import error_from_response
        e = error_from_response(502, b"<html>bad gateway</html>",
                                {"x-request-id": "req_x"})
        self.assertIsInstance(e, ic.UpstreamError)
        self.assertEqual((e.code, e.request_id), ("upstream_error", "req_x"))

    def test_call_answer(self):
        Erreur = type("\u00c9rreur", (Exception,), {})

        def boom():
            raise Erreur("x" * 70000)
        fns = {"boom": boom, "nan": lambda: float("nan"),
               "ok": lambda a, b=0: [a, b]}
        self.assertEqual(ic.call_answer(fns, "ok", [1], {"b": 2}),
                         {"result": [1, 2]})
        err = ic.call_answer(fns, "boom", [], {})["error"]
        self.assertEqual(err["type"], "CallError")
        self.assertLessEqual(len(err["message"].encode()), 64 * 1024)
        self.assertEqual(ic.call_answer(fns, "nan", [], {})["error"]["type"],
                         "TypeError")
        self.assertEqual(ic.call_answer(fns, "x", [], {})["error"]["type"],
                         "NameError")

    def test_models(self):
        f = ic.File({"file_id": "file_x", "data_base64": "aGk="})
        self.assertEqual((f.file_id, f.data, f.expires_at),
                         ("file_x", b"hi", None))
        with self.assertRaises(AttributeError):
            f.no_such_field
        self.assertEqual(json.loads(json.dumps(f)), dict(f))
        with self.assertRaises(ValueError):
            ic.Client("http://h", api_key="k", token="t")
        with self.assertRaises(ValueError):
            ic.Client("ftp://h")


if __name__ == "__main__":
    unittest.main(verbosity=2)
