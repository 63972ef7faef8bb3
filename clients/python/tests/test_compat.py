#!/usr/bin/python3
"""interpd_compat against a real interpd (ctest: clients/compat).

interpd_compat replaces the seed bot's src/utils/code_interpreter.py
(Coder-Vippro/ChatGPT-Discord-Bot at ee9d114).  Each of its functions is
called here and its result checked against the shape the seed module
returns: the exact keys and their types, written below from the seed's
code (each shape names the function it comes from), and the values a bot
reads.  Then the seed's own guide (docs/CODE_INTERPRETER_GUIDE.md) runs
through it (guide_examples.py); with COMPAT_TRANSCRIPT=PATH in the
environment its transcript is written to PATH.

setUpModule pip-installs clients/python into a temporary folder (so the
installed interpd_compat is tested), starts $INTERPD_BIN serve on
127.0.0.1:0 (cold executions, one slot, a 1 MiB file limit, pip offline)
and makes a tenant key.  Each test uses user ids of its own.  Nothing
sleeps to synchronise; never skips.
"""
import asyncio
import datetime
import os
import shutil
import socket
import sys
import tempfile
import unittest

from interpd_fixture import (Server, check_installed, interpd_binary,
                             pip_install, poll_until)
import guide_examples

NoneType = type(None)
NUMBER = (int, float)

# ---- the seed's shapes (src/utils/code_interpreter.py at ee9d114) ---------------

# FileManager.save_file's `metadata`; list_user_files (the second, effective
# definition) and get_file_metadata return these documents (without _id).
METADATA = {"file_id": str, "user_id": int, "filename": str,
            "file_path": str, "file_size": int, "file_type": str,
            "uploaded_at": str, "expires_at": (str, NoneType)}
# upload_file / upload_discord_attachment (FileManager.save_file).
UPLOAD_OK = {"success": bool, "file_id": str, "file_path": str,
             "metadata": dict}
FAILED = {"success": bool, "error": str}
# CodeExecutor.execute_code's result; installed_packages and
# failed_packages only when not empty.
EXECUTED = {"success": bool, "output": str, "error": str,
            "execution_time": NUMBER, "return_code": int,
            "generated_files": list, "generated_file_ids": list}
EXECUTED_OPTIONAL = {"installed_packages": list, "failed_packages": list}
GENERATED = {"filename": str, "data": bytes, "type": str, "size": int,
             "file_id": (str, NoneType)}
# its asyncio.TimeoutError branch
TIMED_OUT = {"success": bool, "output": str, "error": str,
             "execution_time": NUMBER, "return_code": int}
# the module-level execute_code's except branch
EXEC_ERROR = {"success": bool, "output": str, "error": str,
              "execution_time": NUMBER}
LOADED = {"success": bool, "file_id": str, "filename": str,
          "file_type": str, "file_size": int, "data": bytes,
          "uploaded_at": str, "expires_at": (str, NoneType)}
DELETED = {"success": bool, "message": str}
DELETED_ALL = {"success": bool, "deleted_count": int, "failed_count": int,
               "message": str}
DELETED_NONE = {"success": bool, "deleted_count": int, "message": str}
DELETE_ALL_FAILED = {"success": bool, "error": str, "deleted_count": int}
STATUS = {"venv_exists": bool, "python_path": str,
          "installed_packages": list, "package_count": int,
          "last_cleanup": (str, NoneType), "total_user_files": int,
          "total_file_size_mb": NUMBER, "file_expiration_hours": NUMBER,
          "max_file_size_mb": int}
STATUS_ERROR = {"error": str}

MAX_FILE_SIZE = 1024 * 1024
CSV = b"month,units,revenue\n1,10,100.0\n2,12,130.5\n3,9,95.25\n"

compat = None    # the installed interpd_compat module
ic = None        # the installed interpd_client
server = None
TMP = None
KEY = None
ADMIN_KEY = None
MIRROR = None


def setUpModule():
    global compat, ic, server, TMP, KEY, ADMIN_KEY, MIRROR
    binary = interpd_binary()
    TMP = tempfile.mkdtemp(prefix="ipd-compat-")
    os.chmod(TMP, 0o711)  # the sandbox's user walks to the data dir
    site = pip_install(TMP)
    sys.path.insert(0, site)
    import interpd_client
    import interpd_compat
    check_installed(interpd_client, site)
    check_installed(interpd_compat, site)
    compat, ic = interpd_compat, interpd_client
    wheels = os.path.join(TMP, "no-wheels")
    os.mkdir(wheels)
    server = Server(binary, TMP, [
        "--exec-mode", "cold", "--exec-slots", "1",
        "--max-file-size", str(MAX_FILE_SIZE),
        "--pip-no-index", "1", "--pip-find-links", wheels])
    ADMIN_KEY = server.admin_key()
    KEY = server.cli("keys", "create", "--tenant", "bot")["key"]
    MIRROR = os.path.join(TMP, "mirror")
    use_tenant_key()


def tearDownModule():
    why = server.stop_failure() if server else None
    if TMP:
        shutil.rmtree(TMP, ignore_errors=True)
    if why:
        raise RuntimeError(why)


def use_tenant_key():
    compat.configure(url=server.base, api_key=KEY, files_dir=MIRROR)


def use_admin_key():
    compat.configure(url=server.base, api_key=KEY, admin_key=ADMIN_KEY,
                     files_dir=MIRROR)


def run(coro):
    return asyncio.run(coro)


def closed_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class ShapeTest(unittest.TestCase):

    def assertShape(self, value, shape, optional=None):
        """``value`` is a dict with exactly the keys of ``shape`` (plus
        any of ``optional``), each of its type (an int is not a bool)."""
        self.assertIsInstance(value, dict)
        optional = optional or {}
        keys = set(value)
        self.assertTrue(set(shape) <= keys, "missing %s in %r" % (
            sorted(set(shape) - keys), value))
        self.assertTrue(keys <= set(shape) | set(optional),
                        "extra %s in %r" % (
                            sorted(keys - set(shape) - set(optional)), value))
        for k, v in value.items():
            want = shape.get(k, optional.get(k))
            self.assertIsInstance(v, want, "%s: %r" % (k, v))
            if want is int or want == (int, NoneType):
                self.assertNotIsInstance(v, bool, k)

    def upload(self, user, data=CSV, name="sales.csv", **kw):
        r = run(compat.upload_file(user, data, name, **kw))
        self.assertShape(r, UPLOAD_OK)
        self.assertTrue(r["success"])
        return r


class TestExecute(ShapeTest):

    def test_hello(self):
        r = run(compat.execute_code("print('Hello, world!')", 1001))
        self.assertShape(r, EXECUTED)
        self.assertEqual((r["success"], r["output"], r["error"],
                          r["return_code"], r["generated_files"],
                          r["generated_file_ids"]),
                         (True, "Hello, world!\n", "", 0, [], []))
        self.assertGreater(r["execution_time"], 0)

    def test_error_is_stderr(self):
        r = run(compat.execute_code(
            "import sys\nprint('before')\nprint('careful', file=sys.stderr)"
            "\n1/0\n", 1002))
        self.assertShape(r, EXECUTED)
        self.assertFalse(r["success"])
        self.assertEqual(r["return_code"], 1)
        self.assertEqual(r["output"], "before\n")
        self.assertTrue(r["error"].startswith("careful\nTraceback"))
        self.assertIn('File "<code>", line 4', r["error"])
        self.assertTrue(r["error"].rstrip().endswith(
            "ZeroDivisionError: division by zero"))

    def test_generated_files(self):
        code = ("import matplotlib.pyplot as plt\n"
                "plt.plot([1, 2, 3])\nplt.savefig('plot.png')\n"
                "open('out.csv', 'w').write('a,b\\n1,2\\n')\n"
                "plt.figure()\nplt.plot([3, 1])\nplt.show()\n")
        r = run(compat.execute_code(code, 1003))
        self.assertShape(r, EXECUTED)
        self.assertTrue(r["success"], r["error"])
        by_name = {g["filename"]: g for g in r["generated_files"]}
        self.assertEqual(set(by_name), {"plot.png", "out.csv",
                                        "display_1.png"})
        for g in r["generated_files"]:
            self.assertShape(g, GENERATED)
            self.assertEqual(g["size"], len(g["data"]))
        self.assertEqual(by_name["out.csv"]["data"], b"a,b\n1,2\n")
        self.assertEqual(by_name["out.csv"]["type"], "data")
        self.assertTrue(by_name["plot.png"]["data"].startswith(b"\x89PNG"))
        self.assertEqual(by_name["plot.png"]["type"], "image")
        shown = by_name["display_1.png"]
        self.assertEqual((shown["type"], shown["file_id"]), ("image", None))
        self.assertTrue(shown["data"].startswith(b"\x89PNG"))
        stored = [by_name[n]["file_id"] for n in ("plot.png", "out.csv")]
        self.assertEqual(sorted(r["generated_file_ids"]), sorted(stored))
        # stored generated files are the user's, with a local copy
        meta = run(compat.get_file_metadata(by_name["out.csv"]["file_id"],
                                            1003))
        self.assertShape(meta, METADATA)
        with open(meta["file_path"], "rb") as f:
            self.assertEqual(f.read(), b"a,b\n1,2\n")

    def test_files_and_helpers(self):
        fid = self.upload(1004)["file_id"]
        code = ("df = load_file('%s')\n"
                "path = get_file_path('%s')\n"
                "print(len(df), path == FILES['%s'])\n"
                "get_file_path('nope')\n" % (fid, fid, fid))
        r = run(compat.execute_code(code, 1004,
                                    user_files=[fid, "no_such_file", fid]))
        self.assertShape(r, EXECUTED)
        self.assertEqual(r["output"], "3 True\n")
        self.assertFalse(r["success"])
        # the seed's helper's error, at the code's own line number
        self.assertIn('File "<code>", line 4', r["error"])
        self.assertIn("ValueError: File 'nope' not found", r["error"])
        r = run(compat.execute_code("print(get_file_path)\nx = (\n", 1004))
        self.assertIn('File "<code>", line 2', r["error"])
        self.assertIn("SyntaxError", r["error"])
        # another user's file is not found: left out, as in the seed
        r = run(compat.execute_code("print(sorted(FILES))", 1005,
                                    user_files=[fid]))
        self.assertEqual((r["success"], r["output"]), (True, "[]\n"))

    def test_packages(self):
        r = run(compat.execute_code("import pandas\nprint('ok')", 1006,
                                    install_packages=["pandas",
                                                      "left-pad"]))
        self.assertShape(r, EXECUTED, EXECUTED_OPTIONAL)
        self.assertEqual(r["output"], "ok\n")
        self.assertEqual(r["installed_packages"], ["pandas"])
        [(name, why)] = r["failed_packages"]
        self.assertEqual(name, "left-pad")
        self.assertIn("allowlist", why)

    def test_timeout(self):
        r = run(compat.execute_code(
            "import time\nprint('x', flush=True)\ntime.sleep(60)", 1007,
            timeout=1))
        self.assertShape(r, TIMED_OUT)
        self.assertEqual(r, {"success": False, "output": "",
                             "error": "Execution timeout after 1 seconds",
                             "execution_time": 1, "return_code": -1})

    def test_event_loop_not_blocked(self):
        async def both():
            ticks = 0
            task = asyncio.ensure_future(compat.execute_code(
                "import time\ntime.sleep(1)\nprint('done')", 1008))
            while not task.done():
                await asyncio.sleep(0.02)
                ticks += 1
            return ticks, task.result()
        ticks, r = run(both())
        self.assertEqual(r["output"], "done\n")
        self.assertGreater(ticks, 10)

    def test_unreachable(self):
        compat.configure(client=ic.Client(
            "http://127.0.0.1:%d" % closed_port(), api_key=KEY, retries=0))
        try:
            r = run(compat.execute_code("print(1)", 1009))
        finally:
            use_tenant_key()
        self.assertShape(r, EXEC_ERROR)
        self.assertEqual((r["success"], r["output"], r["execution_time"]),
                         (False, "", 0))
        self.assertTrue(r["error"].startswith("Code interpreter error: "))


class TestFiles(ShapeTest):

    def test_upload(self):
        before = datetime.datetime.now()
        r = self.upload(2001, file_type="excel")
        meta = r["metadata"]
        self.assertShape(meta, METADATA)
        self.assertEqual((meta["file_id"], meta["user_id"], meta["filename"],
                          meta["file_size"], meta["file_type"],
                          meta["file_path"]),
                         (r["file_id"], 2001, "sales.csv", len(CSV), "excel",
                          r["file_path"]))
        self.assertTrue(r["file_path"].endswith(r["file_id"] + ".csv"))
        with open(r["file_path"], "rb") as f:
            self.assertEqual(f.read(), CSV)
        # the seed's times: naive local isoformat, 48 hours apart
        up = datetime.datetime.fromisoformat(meta["uploaded_at"])
        exp = datetime.datetime.fromisoformat(meta["expires_at"])
        self.assertIsNone(up.tzinfo)
        self.assertLess(abs((up - before).total_seconds()), 120)
        self.assertEqual(exp - up, datetime.timedelta(hours=48))
        # the file_type argument is echoed, interpd keeps its own
        self.assertEqual(run(compat.get_file_metadata(r["file_id"], 2001))
                         ["file_type"], "csv")

    def test_upload_errors(self):
        r = run(compat.upload_file(2002, b"x" * (MAX_FILE_SIZE + 1),
                                   "big.bin"))
        self.assertEqual(r, {"success": False,
                             "error": "File too large. Maximum size is 1MB"})
        r = run(compat.upload_file(2002, "/etc/passwd", "passwd.txt"))
        self.assertShape(r, FAILED)
        self.assertFalse(r["success"])
        self.assertEqual(run(compat.list_user_files(2002)), [])

    def test_upload_discord_attachment(self):
        class Attachment:  # what discord.Attachment offers the seed
            filename = "notes.txt"

            async def read(self):
                return b"hello\n"
        r = run(compat.upload_discord_attachment(Attachment(), 2003))
        self.assertShape(r, UPLOAD_OK)
        self.assertShape(r["metadata"], METADATA)
        self.assertEqual((r["metadata"]["filename"],
                          r["metadata"]["file_type"]),
                         ("notes.txt", "text"))

        class Broken:
            filename = "x.txt"

            async def read(self):
                raise OSError("connection lost")
        r = run(compat.upload_discord_attachment(Broken(), 2003))
        self.assertEqual(r, {"success": False, "error": "connection lost"})

    def test_load_file(self):
        up = self.upload(2004)
        os.unlink(up["file_path"])
        r = run(compat.load_file(up["file_id"], 2004))
        self.assertShape(r, LOADED)
        self.assertEqual((r["success"], r["file_id"], r["filename"],
                          r["file_size"], r["data"]),
                         (True, up["file_id"], "sales.csv", len(CSV), CSV))
        self.assertEqual(r["uploaded_at"], up["metadata"]["uploaded_at"])
        with open(up["file_path"], "rb") as f:  # written again
            self.assertEqual(f.read(), CSV)
        missing = {"success": False, "error": "File not found or expired"}
        self.assertEqual(run(compat.load_file("no_such", 2004)), missing)
        self.assertEqual(run(compat.load_file(up["file_id"], 2005)),
                         missing)

    def test_list_and_metadata(self):
        self.assertEqual(run(compat.list_user_files(2006)), [])
        a = self.upload(2006, name="a.csv")
        b = self.upload(2006, b'{"k": 1}', "b.json")
        files = run(compat.list_user_files(2006, db_handler=object()))
        self.assertEqual([f["file_id"] for f in files],
                         [b["file_id"], a["file_id"]])  # newest first
        for f in files:
            self.assertShape(f, METADATA)
        self.assertEqual(files[0], b["metadata"])
        self.assertEqual(files[0]["file_type"], "json")
        self.assertEqual(run(compat.get_file_metadata(a["file_id"], 2006)),
                         a["metadata"])
        self.assertIsNone(run(compat.get_file_metadata(a["file_id"], 2007)))
        self.assertIsNone(run(compat.get_file_metadata("no_such", 2006)))
        self.assertEqual(run(compat.list_user_files(2007)), [])

    def test_deletes(self):
        a = self.upload(2008, name="a.csv")
        self.assertFalse(run(compat.delete_user_file(a["file_id"], 2009)))
        self.assertTrue(run(compat.delete_user_file(a["file_id"], 2008)))
        self.assertFalse(os.path.exists(a["file_path"]))
        self.assertFalse(run(compat.delete_user_file(a["file_id"], 2008)))

        b = self.upload(2008, name="b.csv")
        r = run(compat.delete_file(b["file_id"], 2008))
        self.assertShape(r, DELETED)
        self.assertEqual(r, {"success": True,
                             "message": "Deleted file: b.csv"})
        self.assertFalse(os.path.exists(b["file_path"]))
        r = run(compat.delete_file(b["file_id"], 2008))
        self.assertEqual(r, {"success": False, "error": "File not found or "
                             "you don't have permission to delete it"})

    def test_delete_all(self):
        r = run(compat.delete_all_user_files(2010))
        self.assertShape(r, DELETED_NONE)
        self.assertEqual(r, {"success": True, "deleted_count": 0,
                             "message": "No files to delete"})
        paths = [self.upload(2010, name="f%d.csv" % i)["file_path"]
                 for i in range(3)]
        keep = self.upload(2011)
        r = run(compat.delete_all_user_files(2010, db_handler=None))
        self.assertShape(r, DELETED_ALL)
        self.assertEqual(r, {"success": True, "deleted_count": 3,
                             "failed_count": 0,
                             "message": "Deleted 3 file(s)"})
        self.assertEqual(run(compat.list_user_files(2010)), [])
        self.assertFalse(any(os.path.exists(p) for p in paths))
        self.assertEqual(len(run(compat.list_user_files(2011))), 1)
        self.assertTrue(os.path.exists(keep["file_path"]))


class TestMaintenance(ShapeTest):

    def test_cleanup(self):
        # A file that expires in 7 s, with its local copy (load_file).
        c = ic.Client(server.base, api_key=KEY, user_id=3001)
        f = c.upload(CSV, filename="short.csv", ttl_hours=0.002)
        loaded = run(compat.load_file(f.file_id, 3001))
        self.assertTrue(loaded["success"], loaded)
        live = self.upload(3001)
        copy = run(compat.get_file_metadata(f.file_id, 3001))["file_path"]
        self.assertTrue(os.path.exists(copy))
        poll_until("the file to expire", lambda: run(
            compat.get_file_metadata(f.file_id, 3001)) is None, timeout=60)
        # a tenant key: interpd's sweep is refused; the copies of files
        # interpd no longer has are removed and counted
        n = run(compat.cleanup_expired_files())
        self.assertIsInstance(n, int)
        self.assertGreaterEqual(n, 1)
        self.assertFalse(os.path.exists(copy))
        self.assertTrue(os.path.exists(live["file_path"]))
        # an admin key: interpd's sweep, which deletes the expired bytes
        use_admin_key()
        try:
            n = run(compat.cleanup_expired_files(db_handler=None))
            again = run(compat.cleanup_expired_files())
        finally:
            use_tenant_key()
        self.assertGreaterEqual(n, 1)
        self.assertEqual(again, 0)

    def test_status(self):
        use_admin_key()
        try:
            s = run(compat.get_interpreter_status())
        finally:
            use_tenant_key()
        self.assertShape(s, STATUS)
        self.assertEqual((s["file_expiration_hours"], s["max_file_size_mb"]),
                         (48, 1))
        self.assertTrue(s["python_path"])
        self.assertIn("pandas", s["installed_packages"])
        self.assertTrue(all(isinstance(p, str)
                            for p in s["installed_packages"]))
        self.assertEqual(s["package_count"], len(s["installed_packages"]))
        # a tenant key: what GET /v1/packages says, the seed's settings
        t = run(compat.get_interpreter_status(db_handler=object()))
        self.assertShape(t, STATUS)
        self.assertEqual(t["installed_packages"], s["installed_packages"])
        self.assertEqual((t["python_path"], t["total_user_files"],
                          t["file_expiration_hours"],
                          t["max_file_size_mb"]), ("", 0, 48, 50))

    def test_failures_keep_the_seed_shapes(self):
        compat.configure(client=ic.Client(
            "http://127.0.0.1:%d" % closed_port(), api_key=KEY, retries=0))
        try:
            results = run(self._all_calls())
        finally:
            use_tenant_key()
        (up, att, load, listed, meta, deleted, dfile, dall, cleaned,
         status) = results
        for r in (up, att, load, dfile):
            self.assertShape(r, FAILED)
            self.assertFalse(r["success"])
        self.assertEqual((listed, meta, deleted, cleaned), ([], None,
                                                            False, 0))
        self.assertShape(dall, DELETE_ALL_FAILED)
        self.assertEqual((dall["success"], dall["deleted_count"]), (False, 0))
        self.assertShape(status, STATUS_ERROR)

    async def _all_calls(self):
        class Attachment:
            filename = "a.txt"

            async def read(self):
                return b"a"
        return [await compat.upload_file(1, b"a", "a.txt"),
                await compat.upload_discord_attachment(Attachment(), 1),
                await compat.load_file("f", 1),
                await compat.list_user_files(1),
                await compat.get_file_metadata("f", 1),
                await compat.delete_user_file("f", 1),
                await compat.delete_file("f", 1),
                await compat.delete_all_user_files(1),
                await compat.cleanup_expired_files(),
                await compat.get_interpreter_status()]

    def test_environment(self):
        # configured from the environment when configure() is not called
        env = {"INTERPD_URL": server.base, "INTERPD_API_KEY": KEY,
               "INTERPD_COMPAT_FILES_DIR": MIRROR}
        saved = {k: os.environ.get(k) for k in env}
        os.environ.update(env)
        compat._state.clear()
        try:
            r = run(compat.execute_code("print(7)", 3002))
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
            use_tenant_key()
        self.assertEqual(r["output"], "7\n")


class TestGuide(ShapeTest):
    """The seed's guide, each snippet as written but for its import."""

    def test_guide_examples(self):
        work = os.path.join(TMP, "guide")
        os.mkdir(work)
        use_admin_key()  # the guide's status check is an operator's
        try:
            entries = run(guide_examples.run_examples(work))
        finally:
            use_tenant_key()
        got = {e["title"]: e for e in entries}

        def shown(title, name="result"):
            return got[title]["shown"][name]
        r = shown("1. Code Execution")
        self.assertShape(r, EXECUTED)
        self.assertEqual((r["success"], r["output"], r["error"],
                          r["return_code"]),
                         (True, "Hello, world!\n", "", 0))
        files = shown("2. File Upload & Management", "files")
        self.assertEqual([f["filename"] for f in files], ["data.csv"])
        r = shown("3. Code with File Access")
        self.assertTrue(r["success"], r["error"])
        self.assertIn("Total rows: 3", r["output"])
        r = shown("4. Package Installation")
        self.assertShape(r, EXECUTED, EXECUTED_OPTIONAL)
        self.assertFalse(r["success"])  # no network for load_dataset
        self.assertEqual(r["installed_packages"], ["seaborn", "matplotlib"])
        r = shown("5. Data Analysis (verbatim: 'file_id_here')")
        self.assertFalse(r["success"])
        self.assertIn("file_id_here", r["error"])
        r = shown("5. Data Analysis (placeholder filled in)")
        self.assertTrue(r["success"], r["error"])
        self.assertEqual([g["filename"] for g in r["generated_files"]],
                         ["correlation.png"])
        self.assertIn("Generated: correlation.png",
                      got["5. Data Analysis (placeholder filled in)"]
                      ["stdout"])
        self.assertFalse(shown("File Expiration: Manual File Deletion",
                               "success"))
        self.assertShape(shown("Status Check", "status"), STATUS)
        reply = shown("Integration Example: calling it", "reply")
        self.assertTrue(reply.startswith("✅ Execution completed in "), reply)
        self.assertIn("325.75", reply)
        self.assertIn("📊 Generated: revenue.png", reply)
        self.assertEqual(shown("Migration: Update function calls (New)")
                         ["output"], "4\n")
        r = shown("Migration: Handle file uploads (New)")
        self.assertShape(r, FAILED)
        out = os.environ.get("COMPAT_TRANSCRIPT")
        if out:
            guide_examples.write_transcript(out, entries, transcript_header())


def transcript_header():
    version = ic.Client(server.base, api_key=ADMIN_KEY).admin_status().get(
        "version")
    return TRANSCRIPT_HEADER % {"commit": guide_examples.SEED_COMMIT,
                                "seed": guide_examples.SEED,
                                "guide": guide_examples.GUIDE,
                                "python": sys.version.split()[0],
                                "version": version}


TRANSCRIPT_HEADER = """\
# The seed bot's guide, run through interpd_compat

The examples of `%(guide)s` in %(seed)s
(commit `%(commit)s`), each snippet as the guide writes it except its
import:

```diff
-from src.utils.code_interpreter import execute_code
+from interpd_compat import execute_code
```

run one after another in one namespace (top-level `await`, as in a Python
session) against a real interpd on 127.0.0.1 (SQLite, local blobs, cold
executions, one slot, a 1 MiB file limit, the default allowlist, pip
offline), with a tenant key, and the admin key for the status check;
interpd %(version)s, Python %(python)s. What each printed is under
"Printed", then the values it left. Bytes are abbreviated as
`<N bytes: b'...'>`, lists past 12 items after their tenth; times and ids
differ from run to run.

Generated by the ctest `clients/compat` (clients/python/tests/test_compat.py,
which also checks these outcomes):

```sh
COMPAT_TRANSCRIPT=$PWD/clients/python/COMPAT-TRANSCRIPT.md \\
    ctest --test-dir build -R clients/compat
```

Set before the first snippet:

```python
""" + guide_examples.PREAMBLE + """```
"""


if __name__ == "__main__":
    unittest.main(verbosity=2)
