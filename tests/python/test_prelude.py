#!/usr/bin/python3
"""Tests of service/exec/python/prelude.py, the Python side of an execution.

Each test runs the prelude as the executor does (/usr/bin/python3 -u -I -B
prelude.py, a clean environment, cwd = the output dir) on a job in temp
dirs, IPD_PRELUDE_JOB and IPD_PRELUDE_OUTPUT pointing at them, and checks
stdout, stderr, the exit status, .interpd/result.json and the files written.

Run with Debian's interpreter (the data stack comes from apt):
    /usr/bin/python3 tests/python/test_prelude.py [-v] [TestName ...]
IPD_PRELUDE overrides the prelude's path.  Ends with "N passed, N failed"
and exits non-zero when anything failed.
"""

import base64
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
PRELUDE = os.path.abspath(os.environ.get("IPD_PRELUDE") or os.path.join(
    HERE, "..", "..", "service", "python", "prelude.py"))
PYTHON = "/usr/bin/python3"
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"

_tmp_root = None
_mpl_cache = None   # a prepared matplotlib font cache, like /opt/interpd/mplcache


def setUpModule():
    global _tmp_root, _mpl_cache
    _tmp_root = tempfile.mkdtemp(prefix="ipd-prelude-test-")
    _mpl_cache = os.path.join(_tmp_root, "mplcache")
    env = dict(_base_env(), MPLCONFIGDIR=_mpl_cache)
    subprocess.run([PYTHON, "-I", "-c", "import matplotlib.font_manager"],
                   env=env, check=True, capture_output=True, timeout=120)


def tearDownModule():
    if _tmp_root:
        shutil.rmtree(_tmp_root, ignore_errors=True)


def _base_env():
    return {
        "PATH": "/usr/bin:/bin",
        "PYTHONUNBUFFERED": "1",
        "PYTHONDONTWRITEBYTECODE": "1",
        "MPLBACKEND": "Agg",
        "OPENBLAS_NUM_THREADS": "1",
        "OMP_NUM_THREADS": "1",
        "LANG": "C.UTF-8",
    }


def _write_xlsx(path):
    import openpyxl
    wb = openpyxl.Workbook()
    ws = wb.active
    ws.append(["product", "qty"])
    ws.append(["apple", 3])
    ws.append(["pear", 9])
    wb.save(path)


class Run:
    """What one execution left: rc, stdout, stderr, result (or None)."""

    def __init__(self, proc, out):
        self.rc = proc.returncode
        self.stdout = proc.stdout.decode("utf-8", "replace")
        self.stderr = proc.stderr.decode("utf-8", "replace")
        self.out = out
        path = os.path.join(out, ".interpd", "result.json")
        self.raw = None
        self.result = None
        if os.path.exists(path):
            with open(path, "rb") as f:
                self.raw = f.read()
            self.result = json.loads(self.raw.decode("utf-8"))

    @property
    def error(self):
        return self.result["error"]

    def __repr__(self):
        return ("Run(rc=%r, stdout=%r, stderr=%r, result=%r)"
                % (self.rc, self.stdout[-2000:], self.stderr[-2000:],
                   self.result))


class PreludeCase(unittest.TestCase):

    def setUp(self):
        self.dir = tempfile.mkdtemp(dir=_tmp_root)
        self.job = os.path.join(self.dir, "job")
        self.data = os.path.join(self.dir, "data")
        self.out = os.path.join(self.dir, "output")
        self.mpl = os.path.join(self.dir, "mpl")
        for d in (self.job, self.data, self.out):
            os.mkdir(d)
        self.files = []

    def add_file(self, filename, content, file_type=None, mime_type=None,
                 file_id=None):
        """Put a file under data/<id>/<filename> and list it in files.json."""
        file_id = file_id or "file_%02d" % (len(self.files) + 1)
        d = os.path.join(self.data, file_id)
        os.makedirs(d, exist_ok=True)
        path = os.path.join(d, filename)
        if callable(content):
            content(path)
        else:
            if isinstance(content, str):
                content = content.encode("utf-8")
            with open(path, "wb") as f:
                f.write(content)
        entry = {"file_id": file_id, "filename": filename, "path": path,
                 "size": os.path.getsize(path)}
        if file_type is not None:
            entry["file_type"] = file_type
        if mime_type is not None:
            entry["mime_type"] = mime_type
        self.files.append(entry)
        return entry

    def run_code(self, code, variables=None, env=None, raw_code=None,
                 files_json=None, timeout=60, wrap=(), result_dir=None):
        with open(os.path.join(self.job, "code.py"), "wb") as f:
            f.write(raw_code if raw_code is not None
                    else textwrap.dedent(code).lstrip("\n").encode("utf-8"))
        with open(os.path.join(self.job, "files.json"), "w") as f:
            f.write(files_json if files_json is not None
                    else json.dumps(self.files))
        if variables is not None:
            with open(os.path.join(self.job, "variables.json"), "w") as f:
                json.dump(variables, f)
        e = dict(_base_env(), HOME=self.dir, MPLCONFIGDIR=self.mpl,
                 IPD_PRELUDE_JOB=self.job, IPD_PRELUDE_OUTPUT=self.out,
                 IPD_PRELUDE_MPLCACHE=_mpl_cache)
        e.update(env or {})
        proc = subprocess.run(list(wrap) + [PYTHON, "-u", "-I", "-B",
                                            PRELUDE],
                              cwd=self.out, env=e, capture_output=True,
                              stdin=subprocess.DEVNULL, timeout=timeout)
        return Run(proc, result_dir or self.out)

    def assert_ok(self, r):
        self.assertEqual(r.rc, 0, r)
        self.assertIsNotNone(r.result, r)
        self.assertIsNone(r.error, r)

    def assert_no_prelude_frames(self, text):
        self.assertNotIn("prelude", text)
        self.assertNotIn(PRELUDE, text)

    def code_frames(self, traceback_text):
        """[(line, function)] of the File "<code>" frames, in order."""
        out = []
        for line in traceback_text.splitlines():
            line = line.strip()
            if line.startswith('File "<code>", line '):
                rest = line[len('File "<code>", line '):]
                num, _, func = rest.partition(", in ")
                out.append((int(num), func))
        return out


class TestOutputAndErrors(PreludeCase):

    def test_stdout_stderr_and_success(self):
        r = self.run_code("""
            import sys
            print("hello", 6 * 7)
            print("to stderr", file=sys.stderr)
            print("héllo ✓", end="")
        """)
        self.assert_ok(r)
        self.assertEqual(r.stdout, "hello 42\nhéllo ✓")
        self.assertEqual(r.stderr, "to stderr\n")
        self.assertEqual(r.result,
                         {"error": None, "figures": [], "imports": []})

    def test_exception_type_message_and_line_numbers(self):
        r = self.run_code(
            "x = 1\n"
            "\n"
            "def divide(a, b):\n"
            "    # a comment\n"
            "    return a / b\n"
            "\n"
            "print('before')\n"
            "divide(x, 0)\n"
            "print('after')\n")
        self.assertEqual(r.rc, 1, r)
        self.assertEqual(r.stdout, "before\n")
        err = r.error
        self.assertEqual(err["type"], "ZeroDivisionError")
        self.assertEqual(err["message"], "division by zero")
        tb = err["traceback"]
        self.assertTrue(tb.startswith("Traceback (most recent call last):\n"),
                        tb)
        self.assertEqual(self.code_frames(tb),
                         [(8, "<module>"), (5, "divide")])
        self.assertIn("    divide(x, 0)\n", tb)       # the source lines
        self.assertIn("    return a / b\n", tb)
        self.assertTrue(tb.endswith("ZeroDivisionError: division by zero\n"))
        self.assert_no_prelude_frames(tb)
        # stderr carries the same traceback, as Python prints it
        self.assertEqual(r.stderr, tb)

    def test_library_frames_are_kept(self):
        r = self.run_code("""
            import json

            data = json.loads('{"a": 1,}')
        """)
        self.assertEqual(r.rc, 1, r)
        self.assertEqual(r.error["type"], "JSONDecodeError")
        tb = r.error["traceback"]
        self.assertEqual(self.code_frames(tb)[0], (3, "<module>"))
        self.assertIn("json/decoder.py", tb)
        self.assert_no_prelude_frames(tb)

    def test_chained_exceptions(self):
        r = self.run_code("""
            def parse(s):
                return int(s)

            try:
                parse("x")
            except ValueError as e:
                raise RuntimeError("bad input") from e
        """)
        self.assertEqual(r.rc, 1, r)
        self.assertEqual(r.error["type"], "RuntimeError")
        self.assertEqual(r.error["message"], "bad input")
        tb = r.error["traceback"]
        self.assertIn("direct cause of the following exception", tb)
        self.assertEqual(self.code_frames(tb),
                         [(5, "<module>"), (2, "parse"), (7, "<module>")])
        self.assert_no_prelude_frames(tb)

    def test_crlf_source_line_numbers(self):
        r = self.run_code(None, raw_code=b"a = 1\r\nb = 2\r\nc = a / 0\r\n")
        self.assertEqual(r.error["type"], "ZeroDivisionError")
        self.assertEqual(self.code_frames(r.error["traceback"]),
                         [(3, "<module>")])
        self.assertIn("    c = a / 0\n", r.error["traceback"])

    def test_syntax_error(self):
        r = self.run_code("print('ok')\nx = 1\nif x ==:\n    pass\n")
        self.assertEqual(r.rc, 1, r)
        self.assertEqual(r.stdout, "")   # nothing ran
        err = r.error
        self.assertEqual(err["type"], "SyntaxError")
        self.assertIn("line 3", err["message"])
        self.assertIn('File "<code>", line 3', err["traceback"])
        self.assertIn("if x ==:", err["traceback"])
        self.assertIn("SyntaxError", err["traceback"])
        self.assert_no_prelude_frames(err["traceback"])

    def test_indentation_error(self):
        r = self.run_code("def f():\nreturn 1\n")
        self.assertEqual(r.rc, 1, r)
        self.assertEqual(r.error["type"], "IndentationError")
        self.assertIn("line 2", r.error["message"])
        self.assertIn('File "<code>", line 2', r.error["traceback"])

    def test_sys_exit_code(self):
        r = self.run_code("""
            import sys
            print("leaving")
            sys.exit(3)
            print("not reached")
        """)
        self.assertEqual(r.rc, 3, r)
        self.assertEqual(r.stdout, "leaving\n")
        self.assertEqual(r.stderr, "")
        self.assertEqual(r.error["type"], "SystemExit")
        self.assertEqual(r.error["message"], "3")
        self.assertEqual(self.code_frames(r.error["traceback"]),
                         [(3, "<module>")])

    def test_sys_exit_zero_and_exit_builtin(self):
        for code in ("import sys\nsys.exit(0)\n", "import sys\nsys.exit()\n",
                     "exit()\n", "raise SystemExit\n"):
            with self.subTest(code=code):
                r = self.run_code(code)
                self.assert_ok(r)

    def test_sys_exit_message(self):
        r = self.run_code("import sys\nsys.exit('giving up')\n")
        self.assertEqual(r.rc, 1, r)
        self.assertEqual(r.stderr, "giving up\n")   # as Python prints it
        self.assertEqual(r.error["type"], "SystemExit")
        self.assertEqual(r.error["message"], "giving up")

    def test_keyboard_interrupt_and_base_exception(self):
        r = self.run_code("print(1)\nraise KeyboardInterrupt\n")
        self.assertEqual(r.rc, 1, r)
        self.assertEqual(r.error["type"], "KeyboardInterrupt")
        self.assertEqual(self.code_frames(r.error["traceback"]),
                         [(2, "<module>")])
        r = self.run_code("class Stop(BaseException):\n    pass\n"
                          "raise Stop('now')\n")
        self.assertEqual(r.error["type"], "Stop")
        self.assertEqual(r.error["message"], "now")

    def test_traceback_printed_by_the_code_shows_its_lines(self):
        r = self.run_code("""
            import traceback
            try:
                {}["missing"]
            except KeyError:
                traceback.print_exc()
            print("done")
        """)
        self.assert_ok(r)
        self.assertIn('File "<code>", line 3, in <module>', r.stderr)
        self.assertIn('{}["missing"]', r.stderr)
        self.assert_no_prelude_frames(r.stderr)

    def test_warning_shows_source_line(self):
        r = self.run_code("""
            import warnings
            warnings.warn("careful now")
        """)
        self.assert_ok(r)
        self.assertIn("<code>:2: UserWarning: careful now", r.stderr)
        self.assertIn('warnings.warn("careful now")', r.stderr)

    def test_module_namespace(self):
        r = self.run_code("""
            import sys, pickle, __main__
            class Point:
                def __init__(self, x):
                    self.x = x
            p = pickle.loads(pickle.dumps(Point(4)))
            print(__name__, __main__.Point is Point, p.x, sys.argv)
            print(sorted(k for k in globals() if not k.startswith("__")))
        """)
        self.assert_ok(r)
        lines = r.stdout.splitlines()
        self.assertEqual(lines[0], "__main__ True 4 ['<code>']")
        self.assertEqual(lines[1], "['FILES', 'Point', 'load_file', 'p', "
                                   "'pickle', 'sys']")

    def test_sys_path_is_pythons_own(self):
        r = self.run_code("import sys\nprint(repr(sys.path))\n")
        self.assert_ok(r)
        plain = subprocess.run([PYTHON, "-I", "-c",
                                "import sys; print(repr(sys.path))"],
                               env=_base_env(), capture_output=True,
                               cwd=self.out, check=True)
        self.assertEqual(r.stdout, plain.stdout.decode())
        self.assertNotIn(self.out, r.stdout)
        self.assertNotIn(os.path.dirname(PRELUDE), r.stdout)

    def test_no_heavy_imports_when_unused(self):
        r = self.run_code("""
            import atexit, sys
            heavy = ("matplotlib", "numpy", "pandas", "PIL", "json",
                     "traceback", "linecache", "random")
            print(sorted(m for m in heavy if m in sys.modules))
            # runs after the prelude saved figures and wrote result.json
            atexit.register(lambda: print("at exit:", sorted(
                m for m in heavy if m in sys.modules)))
        """)
        self.assert_ok(r)
        self.assertEqual(r.stdout, "[]\nat exit: []\n")

    def test_forked_child_writes_no_result(self):
        r = self.run_code("""
            import os, time
            if os.fork() == 0:
                time.sleep(0.3)
                raise ValueError("child")
            print("parent done")
        """)
        self.assertEqual(r.rc, 0, r)
        self.assertIn("parent done", r.stdout)
        self.assertIn("ValueError: child", r.stderr)   # the child did fail
        self.assertIsNone(r.error, r)                  # the parent's result

    def test_chdir_in_code_keeps_outputs_in_place(self):
        r = self.run_code("""
            import os
            os.chdir("/")
            raise LookupError("moved away")
        """)
        self.assertEqual(r.error["type"], "LookupError")
        self.assertEqual(r.error["message"], "moved away")


class TestResultFile(PreludeCase):

    def test_result_is_replaced_atomically(self):
        r = self.run_code("""
            import os
            tmp = ".interpd/result.json.%d.tmp" % os.getpid()
            print(os.listdir(".interpd") == [os.path.basename(tmp)])
            with open(".interpd/result.json", "w") as f:
                f.write("garbage")
            os.link(".interpd/result.json", "kept.txt")
            with open("victim.txt", "w") as f:
                f.write("victim")
            os.unlink(tmp)
            os.symlink(os.path.abspath("victim.txt"), tmp)
        """)
        self.assert_ok(r)
        self.assertEqual(r.stdout, "True\n")     # reserved before the code ran
        self.assertEqual(r.result,
                         {"error": None, "figures": [], "imports": []})
        with open(os.path.join(self.out, "kept.txt")) as f:
            self.assertEqual(f.read(), "garbage")   # renamed over, not rewritten
        with open(os.path.join(self.out, "victim.txt")) as f:
            self.assertEqual(f.read(), "victim")    # no write through a link
        self.assertEqual(os.listdir(os.path.join(self.out, ".interpd")),
                         ["result.json"])

    def test_closed_descriptors_are_not_written(self):
        r = self.run_code("""
            import os
            os.closerange(3, 4096)
            mine = open("mine.txt", "w")   # likely the prelude's old fd number
            mine.write("mine")
            mine.flush()
            1 / 0
        """)
        self.assertEqual(r.error["type"], "ZeroDivisionError")
        with open(os.path.join(self.out, "mine.txt")) as f:
            self.assertEqual(f.read(), "mine")
        self.assertEqual(os.listdir(os.path.join(self.out, ".interpd")),
                         ["result.json"])

    def test_full_disk_still_gives_a_result(self):
        probe = subprocess.run(["unshare", "-r", "-m", "true"],
                               capture_output=True)
        if probe.returncode != 0:
            self.skipTest("no user+mount namespaces for a small tmpfs")
        saved = os.path.join(self.dir, "saved")
        os.mkdir(saved)
        r = self.run_code("""
            print("filling")
            with open("big.bin", "wb") as f:
                while True:
                    f.write(b"x" * 65536)
        """, wrap=["unshare", "-r", "-m", "sh", "-c",
                   'mount -t tmpfs -o size=1m tmpfs "$0" && cd "$0" && '
                   '"$@"; rc=$?; cp -a "$0/.interpd" "%s/"; exit $rc' % saved,
                   self.out], result_dir=saved)
        self.assertEqual(r.rc, 1, r)
        self.assertEqual(r.stdout, "filling\n")
        self.assertEqual(r.error["type"], "OSError")
        self.assertIn("No space left on device", r.error["message"])
        self.assertEqual(self.code_frames(r.error["traceback"])[0],
                         (4, "<module>"))

    def test_result_json_is_strict_utf8_json(self):
        r = self.run_code(r"""
            raise ValueError('quote " backslash \\ tab \t nl \n ctl \x01 '
                             'é ✓ \U0001F600 lone \udcff end')
        """)
        self.assertEqual(r.rc, 1, r)
        text = r.raw.decode("utf-8")          # strict: no lone surrogates
        self.assertNotIn("\\ud", text.lower())
        self.assertEqual(r.error["message"],
                         'quote " backslash \\ tab \t nl \n ctl \x01 '
                         'é ✓ \U0001F600 lone ? end')

    def test_long_messages_are_capped(self):
        r = self.run_code("raise ValueError('x' * 1000000)\n")
        self.assertEqual(r.error["type"], "ValueError")
        self.assertLess(len(r.error["message"]), 20000)
        self.assertIn("characters omitted", r.error["message"])
        self.assertLess(len(r.error["traceback"]), 70000)
        self.assertTrue(r.error["traceback"].endswith("x\n"))

    def test_bad_job_is_a_prelude_error(self):
        r = self.run_code("print(1)\n", files_json="{not json")
        self.assertEqual(r.rc, 70, r)
        self.assertEqual(r.stdout, "")
        self.assertEqual(r.error["type"], "PreludeError")
        self.assertIn("files.json", r.error["message"])


class TestFilesAndVariables(PreludeCase):

    def test_files_by_id_and_name(self):
        a = self.add_file("notes.txt", "first", "text", file_id="id_a")
        b = self.add_file("notes.txt", "second", "text", file_id="id_b")
        c = self.add_file("other.txt", "third", "text", file_id="id_c")
        r = self.run_code("""
            print(FILES["id_a"])
            print(FILES["id_b"])
            print("notes.txt" in FILES)
            print(open(FILES["other.txt"]).read())
            print(load_file("id_a"), load_file("id_b"),
                  load_file(FILES["other.txt"]), load_file(FILES["id_a"]))
            print(len(FILES))
        """)
        self.assert_ok(r)
        self.assertEqual(r.stdout.splitlines(), [
            a["path"], b["path"], "False", "third",
            "first second third first", "4"])
        self.assertTrue(c["path"].startswith(self.data))

    def test_shared_filename_fails_listing_the_ids(self):
        # Two files named alike: neither load_file nor FILES guesses.
        self.add_file("sales.csv", "a\n1\n", "csv", file_id="f_one")
        self.add_file("sales.csv", "a\n2\n", "csv", file_id="f_two")
        r = self.run_code("""
            try:
                FILES["sales.csv"]
            except KeyError as e:
                print(type(e).__name__, e)
            load_file("sales.csv")
        """)
        self.assertEqual(r.rc, 1, r)
        self.assertIn("AmbiguousFileError", r.stdout)
        self.assertIn("f_one, f_two", r.stdout)
        self.assertEqual(r.error["type"], "AmbiguousFileError")
        self.assertIn("2 files are named 'sales.csv'", r.error["message"])
        self.assertIn("f_one, f_two", r.error["message"])
        self.assertEqual(self.code_frames(r.error["traceback"]),
                         [(5, "<module>")])

    def test_unknown_file_lists_available_names(self):
        self.add_file("sales.csv", "a\n1\n", "csv", file_id="f_sales")
        r = self.run_code("""
            x = 1
            load_file("nope.csv")
        """)
        self.assertEqual(r.rc, 1, r)
        self.assertEqual(r.error["type"], "FileNotFoundError")
        self.assertIn("'nope.csv'", r.error["message"])
        self.assertIn("'sales.csv' (id f_sales)", r.error["message"])
        self.assertEqual(self.code_frames(r.error["traceback"]),
                         [(2, "<module>")])
        self.assert_no_prelude_frames(r.error["traceback"])

    def test_no_files_means_empty_files(self):
        r = self.run_code("print(FILES)\ntry:\n    load_file('x')\n"
                          "except FileNotFoundError as e:\n    print(e)\n")
        self.assert_ok(r)
        self.assertEqual(r.stdout, "{}\nload_file('x'): no such file; no "
                                   "files were provided to this execution\n")

    def test_variables_define_globals(self):
        r = self.run_code("""
            print(repr(n), repr(name), repr(items), repr(cfg), repr(nothing))
            print(type(n).__name__, type(ratio).__name__)
        """, variables={"n": 42, "name": "Zoë", "items": [1, "two", None],
                        "cfg": {"a": {"b": True}}, "nothing": None,
                        "ratio": 0.5, "not-a-name": 1, "class": 2,
                        "__builtins__": 3})
        self.assert_ok(r)
        self.assertEqual(r.stdout.splitlines(), [
            "42 'Zoë' [1, 'two', None] {'a': {'b': True}} None",
            "int float"])
        for bad in ("not-a-name", "class", "__builtins__"):
            self.assertIn("variable %r ignored" % bad, r.stderr)

    def test_csv_dataframe(self):
        self.add_file("sales.csv", "region,units,price\nnorth,3,2.5\n"
                      "south,5,1.25\nwest,7,4.0\n", "csv", "text/csv",
                      file_id="f1")
        r = self.run_code("""
            df = load_file("sales.csv")
            print(type(df).__name__, df.shape, list(df.columns))
            print(df["units"].sum(), df["price"].dtype, df.iloc[1]["region"])
            print(load_file("f1").equals(df))
        """)
        self.assert_ok(r)
        self.assertEqual(r.stdout.splitlines(), [
            "DataFrame (3, 3) ['region', 'units', 'price']",
            "15 float64 south", "True"])

    def test_csv_by_extension_semicolons_and_cp1252(self):
        self.add_file("eu.csv", "name;amount\nCafé;1\nBär;2\n".encode("cp1252"),
                      "binary")
        r = self.run_code("""
            df = load_file("eu.csv")
            print(df.shape, list(df["name"]), int(df["amount"].sum()))
            print(load_file("eu.csv", sep=",").shape)
        """)
        self.assert_ok(r)
        self.assertEqual(r.stdout.splitlines(),
                         ["(2, 2) ['Café', 'Bär'] 3", "(2, 1)"])

    def test_tsv_dataframe(self):
        self.add_file("t.tsv", "a\tb\n1\tx y\n2\tz\n", "tsv")
        r = self.run_code("""
            df = load_file("t.tsv")
            print(df.shape, list(df.columns), list(df["b"]))
        """)
        self.assert_ok(r)
        self.assertEqual(r.stdout, "(2, 2) ['a', 'b'] ['x y', 'z']\n")

    def test_broken_csv_names_the_file(self):
        self.add_file("broken.csv", "a,b\n1,2\n3,4,5\n", "csv")
        r = self.run_code("""
            import pandas
            df = load_file("broken.csv")
        """)
        self.assertEqual(r.rc, 1, r)
        self.assertEqual(r.error["type"], "ValueError")
        msg = r.error["message"]
        self.assertTrue(msg.startswith("load_file('broken.csv'): could not "
                                       "parse as CSV: "), msg)
        self.assertIn("Expected 2 fields in line 3, saw 3", msg)
        self.assertEqual(self.code_frames(r.error["traceback"]),
                         [(2, "<module>")])
        self.assert_no_prelude_frames(r.error["traceback"])

    def test_excel_dataframe(self):
        self.add_file("stock.xlsx", _write_xlsx, "excel")
        r = self.run_code("""
            df = load_file("stock.xlsx")
            print(type(df).__name__, df.shape, list(df["product"]),
                  int(df["qty"].sum()))
        """)
        self.assert_ok(r)
        self.assertEqual(r.stdout, "DataFrame (2, 2) ['apple', 'pear'] 12\n")

    def test_json_records_object_and_list(self):
        self.add_file("rec.json", json.dumps([{"a": 1, "b": "x"},
                                              {"a": 2, "b": "y"}]), "json")
        self.add_file("obj.json", '\ufeff{"k": [1, 2], "n": null}', "json")
        self.add_file("nums.json", "[1, 2, 3]", "json")
        self.add_file("bad.json", '{"k": ', "json")
        r = self.run_code("""
            df = load_file("rec.json")
            print(type(df).__name__, df.shape, list(df["b"]))
            print(load_file("obj.json"), load_file("nums.json"))
            load_file("bad.json")
        """)
        self.assertEqual(r.stdout.splitlines(), [
            "DataFrame (2, 2) ['x', 'y']",
            "{'k': [1, 2], 'n': None} [1, 2, 3]"])
        self.assertEqual(r.error["type"], "ValueError")
        self.assertTrue(r.error["message"].startswith(
            "load_file('bad.json'): could not parse as JSON: "),
            r.error["message"])

    def test_jsonl_dataframe_and_bad_line(self):
        self.add_file("ev.jsonl", '{"e": "a", "v": 1}\n\n{"e": "b", "v": 2}\n',
                      "jsonl")
        self.add_file("bad.jsonl", '{"e": 1}\n{"e": \n', "jsonl")
        r = self.run_code("""
            df = load_file("ev.jsonl")
            print(type(df).__name__, df.shape, list(df["e"]), int(df["v"].sum()))
            load_file("bad.jsonl")
        """)
        self.assertEqual(r.stdout, "DataFrame (2, 2) ['a', 'b'] 3\n")
        self.assertEqual(r.error["type"], "ValueError")
        self.assertIn("load_file('bad.jsonl'): could not parse as JSON Lines: "
                      "line 2:", r.error["message"])

    def test_yaml(self):
        self.add_file("conf.yaml", "name: demo\nports:\n  - 80\n  - 443\n",
                      "yaml")
        self.add_file("bad.yml", "a: [1, 2\n", None)
        r = self.run_code("""
            print(load_file("conf.yaml"))
            load_file("bad.yml")
        """)
        self.assertEqual(r.stdout, "{'name': 'demo', 'ports': [80, 443]}\n")
        self.assertEqual(r.error["type"], "ValueError")
        self.assertIn("load_file('bad.yml'): could not parse as YAML",
                      r.error["message"])

    def test_text_kinds_are_str(self):
        self.add_file("readme.md", "# Title\nbody ✓\n", "markdown")
        self.add_file("script.py", "print('hi')\n", "python")
        self.add_file("doc.xml", "<a><b/></a>", "xml")
        self.add_file("log.txt", "line1\nline2\n", "text")
        r = self.run_code("""
            for n in ("readme.md", "script.py", "doc.xml", "log.txt"):
                v = load_file(n)
                print(type(v).__name__, repr(v))
        """)
        self.assert_ok(r)
        self.assertEqual(r.stdout.splitlines(), [
            "str '# Title\\nbody ✓\\n'", "str \"print('hi')\\n\"",
            "str '<a><b/></a>'", "str 'line1\\nline2\\n'"])

    def test_image_is_pil(self):
        def write(path):
            from PIL import Image
            img = Image.new("RGB", (4, 3), (255, 0, 0))
            img.putpixel((1, 2), (0, 0, 255))
            img.save(path, "PNG")
        self.add_file("red.png", write, "image", "image/png")
        self.add_file("bad.png", b"not an image", "image", "image/png")
        r = self.run_code("""
            img = load_file("red.png")
            print(type(img).__module__.split(".")[0], img.size, img.mode,
                  img.getpixel((1, 2)), img.getpixel((0, 0)))
            load_file("bad.png")
        """)
        self.assertEqual(r.stdout, "PIL (4, 3) RGB (0, 0, 255) (255, 0, 0)\n")
        self.assertEqual(r.error["type"], "ValueError")
        self.assertIn("load_file('bad.png'): could not open as an image",
                      r.error["message"])

    def test_unknown_binary_is_bytes(self):
        blob = bytes(range(256)) * 3
        self.add_file("blob.bin", blob, "binary", "application/octet-stream")
        self.add_file("doc.pdf", b"%PDF-1.4\n", "pdf", "application/pdf")
        r = self.run_code("""
            b = load_file("blob.bin")
            print(type(b).__name__, len(b), b[:4], b[-1])
            print(load_file("doc.pdf"))
        """)
        self.assert_ok(r)
        self.assertEqual(r.stdout, "bytes 768 b'\\x00\\x01\\x02\\x03' 255\n"
                                   "b'%PDF-1.4\\n'\n")

    def test_missing_optional_packages(self):
        # sys.modules[name] = None makes "import name" raise ImportError.
        self.add_file("c.yaml", "a: 1\n", "yaml")
        self.add_file("p.png", b"\x89PNG\r\n\x1a\nrest", "image")
        self.add_file("s.xlsx", _write_xlsx, "excel")
        self.add_file("d.csv", "a\n1\n", "csv")
        r = self.run_code("""
            import sys
            for mod, name in (("yaml", "c.yaml"), ("PIL", "p.png"),
                              ("openpyxl", "s.xlsx"), ("pandas", "d.csv")):
                sys.modules[mod] = None
                try:
                    v = load_file(name)
                    print(name, type(v).__name__, v[:4])
                except ImportError as e:
                    print(name, "ImportError", e)
        """)
        self.assert_ok(r)
        lines = r.stdout.splitlines()
        self.assertEqual(len(lines), 4, r)
        self.assertEqual(lines[0], "c.yaml ImportError load_file('c.yaml'): "
                                   "reading YAML needs PyYAML, which is not "
                                   "installed")
        self.assertEqual(lines[1], "p.png bytes b'\\x89PNG'")
        self.assertTrue(lines[2].startswith(
            "s.xlsx ImportError load_file('s.xlsx'): cannot read Excel: "),
            lines[2])
        self.assertIn("openpyxl", lines[2])
        self.assertEqual(lines[3], "d.csv ImportError load_file('d.csv'): "
                                   "reading CSV needs pandas, which is not "
                                   "installed")

    def test_parquet(self):
        try:
            import pyarrow  # noqa: F401
            have_engine = True
        except ImportError:
            try:
                import fastparquet  # noqa: F401
                have_engine = True
            except ImportError:
                have_engine = False
        if have_engine:
            def write(path):
                import pandas
                pandas.DataFrame({"a": [1, 2]}).to_parquet(path)
            self.add_file("t.parquet", write, "parquet")
        else:
            self.add_file("t.parquet", b"PAR1\x00\x00PAR1", "parquet")
        r = self.run_code("""
            df = load_file("t.parquet")
            print(df.shape)
        """)
        if have_engine:
            self.assert_ok(r)
            self.assertEqual(r.stdout, "(2, 1)\n")
        else:
            self.assertEqual(r.error["type"], "ImportError")
            self.assertTrue(r.error["message"].startswith(
                "load_file('t.parquet'): cannot read Parquet: "),
                r.error["message"])
            self.assertIn("pyarrow", r.error["message"])


class TestFigures(PreludeCase):

    def figure_bytes(self, name):
        with open(os.path.join(self.out, name), "rb") as f:
            return f.read()

    def test_open_figure_saved_as_png(self):
        r = self.run_code("""
            import matplotlib.pyplot as plt
            plt.plot([1, 2, 3], [4, 1, 9])
            plt.title("left open")
        """)
        self.assert_ok(r)
        self.assertEqual(r.result["figures"], ["figure_1.png"])
        self.assertTrue(self.figure_bytes("figure_1.png")
                        .startswith(PNG_SIGNATURE))
        self.assertEqual(r.stderr, "")

    def test_saved_figure_keeps_labels_outside_the_axes(self):
        # A label placed left of the canvas (a long y label does the same)
        # is inside the saved image: the box is tight, so the image grows
        # past the default 640 px instead of cutting it off.
        r = self.run_code("""
            import matplotlib.pyplot as plt
            fig, ax = plt.subplots()
            ax.plot([1, 2, 3])
            fig.text(-0.4, 0.5, "a label far left of the canvas")
        """)
        self.assert_ok(r)
        png = self.figure_bytes("figure_1.png")
        width = int.from_bytes(png[16:20], "big")
        self.assertGreater(width, 700, "the far-left label was cut off")

    def test_user_file_not_overwritten(self):
        r = self.run_code("""
            import matplotlib.pyplot as plt
            with open("figure_1.png", "wb") as f:
                f.write(b"mine")
            plt.figure()
            plt.bar(["a", "b"], [3, 5])
            fig, ax = plt.subplots()
            ax.scatter([1, 2], [2, 1])
        """)
        self.assert_ok(r)
        self.assertEqual(r.result["figures"], ["figure_2.png", "figure_3.png"])
        self.assertEqual(self.figure_bytes("figure_1.png"), b"mine")
        for name in r.result["figures"]:
            self.assertTrue(self.figure_bytes(name).startswith(PNG_SIGNATURE))

    def test_figures_saved_after_an_exception(self):
        r = self.run_code("""
            import matplotlib
            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
            plt.plot([0, 1])
            raise RuntimeError("plot then fail")
        """)
        self.assertEqual(r.rc, 1, r)
        self.assertEqual(r.error["type"], "RuntimeError")
        self.assertEqual(r.result["figures"], ["figure_1.png"])
        self.assertTrue(self.figure_bytes("figure_1.png")
                        .startswith(PNG_SIGNATURE))

    def test_font_cache_is_seeded(self):
        # Re-dump the prepared cache compactly: matplotlib writes it indented,
        # so if it rebuilt its cache the copy would change.
        cache = os.path.join(self.dir, "prepared")
        os.mkdir(cache)
        names = [n for n in os.listdir(_mpl_cache)
                 if n.startswith("fontlist-")]
        self.assertEqual(len(names), 1, os.listdir(_mpl_cache))
        with open(os.path.join(_mpl_cache, names[0])) as f:
            compact = json.dumps(json.load(f), separators=(",", ":"))
        with open(os.path.join(cache, names[0]), "w") as f:
            f.write(compact)
        r = self.run_code("""
            import matplotlib.pyplot as plt
            plt.plot([1, 2])
        """, env={"IPD_PRELUDE_MPLCACHE": cache})
        self.assert_ok(r)
        self.assertEqual(r.result["figures"], ["figure_1.png"])
        with open(os.path.join(self.mpl, names[0])) as f:
            self.assertEqual(f.read(), compact)


class TestDisplay(PreludeCase):
    """display(obj) and the value of a bare last expression, as bundles in
    .interpd/display.jsonl (issue 14, notebook output)."""

    def shown(self, r):
        """The display lines, parsed; [] when there is no file."""
        path = os.path.join(self.out, ".interpd", "display.jsonl")
        if not os.path.exists(path):
            return []
        with open(path, "rb") as f:
            raw = f.read()
        return [json.loads(line) for line in raw.decode("utf-8").splitlines()]

    def test_last_expression_is_shown(self):
        r = self.run_code("x = 40\nx + 2\n")
        self.assert_ok(r)
        self.assertEqual(self.shown(r), [{"text/plain": "42"}])
        self.assertEqual(r.stdout, "")

    def test_multiline_last_expression(self):
        r = self.run_code("d = {'a': 1}\n(d['a'] +\n 1)  # two\n")
        self.assert_ok(r)
        self.assertEqual(self.shown(r), [{"text/plain": "2"}])

    def test_none_assignment_and_semicolon_show_nothing(self):
        for code in ("print('hi')\n", "x = 5\n", "x = 5\nx;\n",
                     "x = 5\nx ;  # quiet\n", "None\n", "import os\n",
                     "def f():\n    return 1\n", "for i in range(2):\n    i\n",
                     "# only a comment\n", ""):
            with self.subTest(code=code):
                r = self.run_code(None, raw_code=code.encode())
                self.assert_ok(r)
                self.assertEqual(self.shown(r), [])

    def test_semicolon_between_statements_still_shows_the_last(self):
        r = self.run_code("x = 'é'; x\n")
        self.assert_ok(r)
        self.assertEqual(self.shown(r), [{"text/plain": "'é'"}])

    def test_display_calls_in_order_then_last_expression(self):
        r = self.run_code("""
            def helper():
                display("from a function")
            display(1)
            helper()
            display([1, 2], {"k": None})
            print("printed")
            display(int)
            "last"
        """)
        self.assert_ok(r)
        self.assertEqual([b["text/plain"] for b in self.shown(r)],
                         ["1", "'from a function'", "[1, 2]",
                          "{'k': None}", "<class 'int'>", "'last'"])
        self.assertEqual(r.stdout, "printed\n")
        self.assertEqual(r.result,
                         {"error": None, "figures": [], "imports": []})

    def test_dataframe_has_html(self):
        r = self.run_code("""
            import pandas as pd
            df = pd.DataFrame({"city": ["Oslo", "Lima"], "pop": [700, 9000]})
            display(df.head(1))
            df
        """)
        self.assert_ok(r)
        first, last = self.shown(r)
        self.assertIn("Oslo", first["text/plain"])
        self.assertNotIn("Lima", first["text/plain"])
        self.assertIn("<table", last["text/html"])
        self.assertIn("<td>Lima</td>", last["text/html"])
        self.assertIn("city", last["text/plain"])
        self.assertNotIn("image/png", last)

    def test_figure_and_pil_image_have_png(self):
        import base64
        r = self.run_code("""
            import matplotlib.pyplot as plt
            from PIL import Image
            fig, ax = plt.subplots(figsize=(2, 2))
            ax.plot([1, 3, 2])
            display(fig)
            Image.new("CMYK", (7, 5))
        """)
        self.assert_ok(r)
        fig, img = self.shown(r)
        self.assertIn("Figure", fig["text/plain"])
        png = base64.b64decode(fig["image/png"], validate=True)
        self.assertTrue(png.startswith(PNG_SIGNATURE))
        self.assertIn("PIL", img["text/plain"])
        png = base64.b64decode(img["image/png"], validate=True)
        self.assertTrue(png.startswith(PNG_SIGNATURE))
        self.assertEqual(int.from_bytes(png[16:20], "big"), 7)
        # charts still come back as files: the figure stayed open
        self.assertEqual(r.result["figures"], ["figure_1.png"])

    def test_raising_reprs_do_not_crash(self):
        r = self.run_code("""
            class Bad:
                def __repr__(self):
                    raise ValueError("no repr for you")
                def _repr_html_(self):
                    raise RuntimeError("no html either")
                def _repr_png_(self):
                    return b"not a png"
            class Odd:
                def _repr_html_(self):
                    return 42
                def __getattr__(self, name):
                    return lambda: "<b>made up</b>"
            display(Bad())
            display(Odd())
            Bad()
        """)
        self.assert_ok(r)
        bad, odd, last = self.shown(r)
        self.assertEqual(bad, {"text/plain": "<Bad object: repr() failed: "
                                             "ValueError: no repr for you>"})
        self.assertEqual(last, bad)
        self.assertEqual(set(odd), {"text/plain"})

    def test_huge_repr_is_capped(self):
        r = self.run_code("""
            display("x" * 300000)
            "<p>" * 100000
        """)
        self.assert_ok(r)
        plain, _ = self.shown(r)
        self.assertTrue(plain["truncated"])
        self.assertLess(len(plain["text/plain"]), 256 * 1024 + 100)
        self.assertIn("characters omitted", plain["text/plain"])

    def test_each_mime_type_against_its_own_length(self):
        r = self.run_code("""
            class Wide:
                def __repr__(self):
                    return "w"
                def _repr_html_(self):
                    return "<p>" * 100000
            class Tall:
                def __repr__(self):
                    return "t" * 300000
                def _repr_html_(self):
                    return "<b>t</b>"
            display(Wide())
            display(Tall())
        """)
        self.assert_ok(r)
        wide, tall = self.shown(r)
        # html over its cap is left out, however short the text is...
        self.assertEqual(wide, {"text/plain": "w", "truncated": True})
        # ...and html within it is kept, however long the text was.
        self.assertEqual(tall["text/html"], "<b>t</b>")
        self.assertTrue(tall["truncated"])
        self.assertIn("characters omitted", tall["text/plain"])

    def test_str_subclasses_cannot_dodge_the_caps(self):
        """A repr or _repr_html_ returning a str subclass whose __len__,
        encode or translate lie is cut on its real text."""
        r = self.run_code("""
            class Liar(str):
                def __len__(self):
                    return 1
                def encode(self, *a, **k):
                    return b"lie"
                def translate(self, *a):
                    return "lie"
            class Big:
                def __repr__(self):
                    return Liar("x" * 300000)
                def _repr_html_(self):
                    return Liar("<p>" * 100000)
            display(Big())
        """)
        self.assert_ok(r)
        (b,) = self.shown(r)
        self.assertTrue(b["truncated"])
        self.assertTrue(b["text/plain"].startswith("x" * 1000))
        self.assertLess(len(b["text/plain"]), 256 * 1024 + 100)
        self.assertNotIn("text/html", b)

    def test_display_file_is_bounded(self):
        r = self.run_code("""
            for i in range(40):
                display("y" * 250000)
            print("done")
        """)
        self.assert_ok(r)
        path = os.path.join(self.out, ".interpd", "display.jsonl")
        self.assertLessEqual(os.path.getsize(path), 8 * 1024 * 1024 + 32)
        shown = self.shown(r)
        self.assertEqual(shown[-1], {"truncated": True})
        self.assertGreater(len(shown), 10)

    def test_last_expression_error_keeps_line_numbers(self):
        r = self.run_code(
            "def f(a):\n"
            "    return a / 0\n"
            "\n"
            "x = 1\n"
            "f(\n"
            "  x)\n")
        self.assertEqual(r.rc, 1, r)
        self.assertEqual(r.error["type"], "ZeroDivisionError")
        self.assertEqual(self.code_frames(r.error["traceback"]),
                         [(5, "<module>"), (2, "f")])
        self.assertIn("    return a / 0\n", r.error["traceback"])
        self.assert_no_prelude_frames(r.error["traceback"])
        self.assertEqual(self.shown(r), [])

    def test_last_expression_sys_exit(self):
        r = self.run_code("import sys\nprint('bye')\nsys.exit(4)\n")
        self.assertEqual(r.rc, 4, r)
        self.assertEqual(r.error["type"], "SystemExit")
        self.assertEqual(self.code_frames(r.error["traceback"]),
                         [(3, "<module>")])
        self.assertEqual(self.shown(r), [])

    def test_compiler_errors_keep_line_numbers(self):
        r = self.run_code("x = 1\n\nreturn x\n")
        self.assertEqual(r.rc, 1, r)
        self.assertEqual(r.error["type"], "SyntaxError")
        self.assertIn('File "<code>", line 3', r.error["traceback"])
        r = self.run_code("from __future__ import annotations\n"
                          "def f(a: Undefined) -> int:\n"
                          "    return 1\n"
                          "f.__annotations__['a']\n")
        self.assert_ok(r)
        self.assertEqual(self.shown(r), [{"text/plain": "'Undefined'"}])

    def test_display_file_cannot_redirect_writes(self):
        target = os.path.join(self.dir, "target")
        r = self.run_code("""
            import os
            os.unlink(".interpd/display.jsonl") if os.path.exists(
                ".interpd/display.jsonl") else None
            os.symlink(%r, ".interpd/display.jsonl")
            display("through the link?")
            os.unlink(".interpd/display.jsonl")
            os.mkfifo(".interpd/display.jsonl")
            display("into a fifo?")
            print("still running")
        """ % target)
        self.assert_ok(r)
        self.assertFalse(os.path.exists(target))
        self.assertEqual(r.stdout, "still running\n")

    def test_ipython_display_is_the_preludes(self):
        r = self.run_code("""
            from IPython.display import display as d, HTML
            d(HTML("<b>bold</b>"))
        """)
        self.assert_ok(r)
        (b,) = self.shown(r)
        self.assertEqual(b["text/html"], "<b>bold</b>")
        self.assertEqual(r.stdout, "")


class TestCharts(PreludeCase):
    """A chart comes back once (issue 26 item 2): a figure the code saved
    into the output directory and did not change since is not saved
    again; plt.show() makes each open figure a display bundle (image/png)
    and closes it; a figure neither saved nor shown is saved as
    figure_N.png.  Each case prints plt.get_fignums() where it matters."""

    def shown(self):
        """The display lines, parsed; [] when there is no file."""
        path = os.path.join(self.out, ".interpd", "display.jsonl")
        if not os.path.exists(path):
            return []
        with open(path, "rb") as f:
            raw = f.read()
        return [json.loads(line) for line in raw.decode("utf-8").splitlines()]

    def figure_bytes(self, name):
        with open(os.path.join(self.out, name), "rb") as f:
            return f.read()

    def pngs(self):
        """The .png files the run left in its output directory."""
        return sorted(n for n in os.listdir(self.out) if n.endswith(".png"))

    def assert_figure_bundle(self, bundle):
        import base64
        self.assertEqual(sorted(bundle), ["image/png", "text/plain"], bundle)
        self.assertTrue(bundle["text/plain"].startswith("<Figure size "),
                        bundle["text/plain"])
        png = base64.b64decode(bundle["image/png"], validate=True)
        self.assertTrue(png.startswith(PNG_SIGNATURE))
        return png

    def test_saved_figure_is_not_saved_again(self):
        r = self.run_code("""
            import matplotlib.pyplot as plt
            plt.plot([1, 2, 3], [4, 1, 9])
            plt.title("units")
            plt.savefig("a.png")
        """)
        self.assert_ok(r)
        self.assertEqual(self.pngs(), ["a.png"])
        self.assertEqual(r.result["figures"], [])
        self.assertEqual(self.shown(), [])

    def test_show_is_one_display_item_and_closes(self):
        r = self.run_code("""
            import matplotlib.pyplot as plt
            plt.plot([1, 2, 3], [4, 1, 9])
            plt.show()
            print(plt.get_fignums())
        """)
        self.assert_ok(r)
        self.assertEqual(r.stdout, "[]\n")
        (b,) = self.shown()
        self.assert_figure_bundle(b)
        self.assertEqual(self.pngs(), [])
        self.assertEqual(r.result["figures"], [])

    def test_show_with_no_figure_does_nothing(self):
        r = self.run_code("""
            import matplotlib.pyplot as plt
            plt.show()
            plt.show(block=False)
            print(plt.get_fignums())
        """)
        self.assert_ok(r)
        self.assertEqual(r.stdout, "[]\n")
        self.assertEqual(self.shown(), [])
        self.assertEqual(self.pngs(), [])

    def test_show_twice_shows_each_figure_once_in_order(self):
        r = self.run_code("""
            import matplotlib.pyplot as plt
            plt.plot([1, 2])
            plt.show()
            plt.show()
            display("between")
            plt.figure(figsize=(3, 2))
            plt.bar(["a", "b"], [3, 5])
            plt.show()
            print("done")
        """)
        self.assert_ok(r)
        first, between, second = self.shown()
        self.assert_figure_bundle(first)
        self.assertEqual(between, {"text/plain": "'between'"})
        png = self.assert_figure_bundle(second)
        self.assertIn("300x200", second["text/plain"])
        self.assertGreater(int.from_bytes(png[16:20], "big"), 0)
        self.assertEqual(self.pngs(), [])
        self.assertEqual(r.result["figures"], [])

    def test_save_then_show(self):
        # Saved into the output directory and unchanged: it comes back
        # once, as that file; show() only closes it.
        r = self.run_code("""
            import matplotlib.pyplot as plt
            plt.plot([1, 2, 3])
            plt.savefig("a.png")
            plt.show()
            print(plt.get_fignums())
        """)
        self.assert_ok(r)
        self.assertEqual(r.stdout, "[]\n")
        self.assertEqual(self.pngs(), ["a.png"])
        self.assertEqual(self.shown(), [])
        self.assertEqual(r.result["figures"], [])

    def test_save_two_figures(self):
        r = self.run_code("""
            import matplotlib.pyplot as plt
            f1 = plt.figure()
            plt.plot([1, 2])
            f2, ax = plt.subplots()
            ax.bar(["x"], [1])
            f2.savefig("b.png")
            plt.figure(f1.number)
            plt.savefig("a.png", dpi=50, bbox_inches="tight")
        """)
        self.assert_ok(r)
        self.assertEqual(self.pngs(), ["a.png", "b.png"])
        self.assertEqual(r.result["figures"], [])

    def test_subplots(self):
        r = self.run_code("""
            import matplotlib.pyplot as plt
            fig, axes = plt.subplots(2, 2, figsize=(4, 4))
            for i, ax in enumerate(axes.flat):
                ax.plot(range(i + 2))
            fig.tight_layout()
            plt.show()
            fig, (a, b) = plt.subplots(1, 2, sharey=True)
            a.plot([1, 2])
            b.hist([1, 2, 2, 3])
            fig.suptitle("two")
            fig.savefig("pair.png")
        """)
        self.assert_ok(r)
        (b,) = self.shown()
        self.assert_figure_bundle(b)
        self.assertIn("with 4 Axes", b["text/plain"])
        self.assertEqual(self.pngs(), ["pair.png"])
        self.assertEqual(r.result["figures"], [])

    def test_figure_changed_after_saving_is_saved_again(self):
        r = self.run_code("""
            import matplotlib.pyplot as plt
            plt.plot([1, 2, 3])
            plt.savefig("a.png")
            plt.title("a title added after saving")
            f2, ax = plt.subplots()
            ax.plot([3, 1])
            f2.savefig("b.png")
            ax.set_xlim(0, 9)
            f2.savefig("c.png")
        """)
        self.assert_ok(r)
        # the first changed after its save: again; the second saved after
        # its change: not again
        self.assertEqual(r.result["figures"], ["figure_1.png"])
        self.assertEqual(self.pngs(), ["a.png", "b.png", "c.png",
                                       "figure_1.png"])
        self.assertNotEqual(self.figure_bytes("a.png"),
                            self.figure_bytes("figure_1.png"))

    def test_figure_changed_after_saving_is_shown(self):
        r = self.run_code("""
            import matplotlib.pyplot as plt
            plt.plot([1, 2, 3])
            plt.savefig("a.png")
            plt.xticks(rotation=45)
            plt.show()
        """)
        self.assert_ok(r)
        (b,) = self.shown()
        self.assert_figure_bundle(b)
        self.assertEqual(self.pngs(), ["a.png"])
        self.assertEqual(r.result["figures"], [])

    def test_neither_saved_nor_shown_is_saved_as_today(self):
        r = self.run_code("""
            import matplotlib.pyplot as plt
            plt.figure()
            plt.plot([1, 2])
            plt.savefig("saved.png")
            plt.figure()
            plt.plot([2, 1])
            plt.show()
            plt.figure()
            points = plt.scatter([1], [1])
        """)
        self.assert_ok(r)
        self.assertEqual(len(self.shown()), 1)
        self.assertEqual(r.result["figures"], ["figure_1.png"])
        self.assertEqual(self.pngs(), ["figure_1.png", "saved.png"])

    def test_saved_where_it_does_not_come_back_is_saved_as_today(self):
        # A buffer, or a file outside the output directory, does not
        # bring the chart back: it is still saved at the end.  A file
        # object on a file in the output directory, or a path in a
        # folder of it, does.
        r = self.run_code("""
            import io, os, pathlib
            import matplotlib.pyplot as plt
            os.makedirs("sub")
            plt.plot([1, 2])
            plt.savefig(io.BytesIO(), format="png")
            plt.figure()
            plt.plot([2, 1])
            plt.savefig(%r)
            plt.figure()
            plt.plot([3, 1])
            with open("sub/obj.png", "wb") as f:
                plt.savefig(f, format="png")
            plt.figure()
            plt.plot([1, 3])
            plt.savefig(pathlib.Path("sub") / "path")
        """ % os.path.join(self.dir, "elsewhere.png"))
        self.assert_ok(r)
        self.assertTrue(os.path.exists(os.path.join(self.dir,
                                                    "elsewhere.png")))
        self.assertEqual(sorted(os.listdir(os.path.join(self.out, "sub"))),
                         ["obj.png", "path.png"])
        self.assertEqual(r.result["figures"], ["figure_1.png",
                                               "figure_2.png"])

    def test_pandas_plotting(self):
        # The cell: a pandas bar chart saved once comes back once.
        r = self.run_code("""
            import pandas as pd
            import matplotlib.pyplot as plt
            df = pd.DataFrame({"region": ["n", "s", "n", "e"],
                               "units": [3, 5, 2, 7]})
            df.groupby("region")["units"].sum().plot(kind="bar")
            plt.tight_layout()
            plt.savefig("units.png")
            df.plot(x="region", y="units", kind="line")
            plt.show()
            ax = df["units"].plot.hist()
            ax.figure.savefig("hist.png")
        """)
        self.assert_ok(r)
        self.assertEqual(self.pngs(), ["hist.png", "units.png"])
        (b,) = self.shown()
        self.assert_figure_bundle(b)
        self.assertEqual(r.result["figures"], [])

    def test_seaborn_style_plotting(self):
        # What seaborn does with matplotlib (seaborn itself is checked by
        # integration/test_figures, where it must be installed): a theme
        # through rcParams, figure-level grids (plt.figure + add_subplot,
        # FacetGrid.savefig's bbox_inches="tight" default), despine,
        # axes-level plots on plt.gca() that a plt.show() displays.
        r = self.run_code("""
            import matplotlib as mpl
            import matplotlib.pyplot as plt
            import pandas as pd
            mpl.rcParams.update({"axes.grid": True,
                                 "axes.facecolor": "#EAEAF2"})
            df = pd.DataFrame({"day": ["a", "b", "c"], "tip": [1.0, 2.5, 2]})
            fig = plt.figure(figsize=(4, 3))
            ax = fig.add_subplot(1, 1, 1)
            ax.bar(df["day"], df["tip"])
            for side in ("top", "right"):
                ax.spines[side].set_visible(False)
            fig.tight_layout()
            kwargs = {}
            kwargs.setdefault("bbox_inches", "tight")
            fig.savefig("grid.png", **kwargs)
            with mpl.rc_context({"lines.linewidth": 3}):
                ax2 = plt.figure().gca()
                ax2.plot(df["day"], df["tip"])
                ax2.set(xlabel="day", ylabel="tip")
            plt.show()
        """)
        self.assert_ok(r)
        self.assertEqual(self.pngs(), ["grid.png"])
        (b,) = self.shown()
        self.assert_figure_bundle(b)
        self.assertEqual(r.result["figures"], [])

    def test_full_display_channel_leaves_shown_figures_as_files(self):
        # A figure that cannot get its bundle (the channel's 8 MiB are
        # used up) stays open and comes back as a file, as it would
        # after display(fig).
        r = self.run_code("""
            import matplotlib.pyplot as plt
            for i in range(34):
                display("y" * 250000)
            plt.plot([1, 2])
            plt.show()
            print(plt.get_fignums())
        """)
        self.assert_ok(r)
        self.assertEqual(r.stdout, "[1]\n")
        self.assertFalse(any("image/png" in b for b in self.shown()))
        self.assertEqual(r.result["figures"], ["figure_1.png"])

    def test_display_of_a_figure_is_unchanged(self):
        # display(fig) leaves the figure open, as a notebook does: it is
        # also saved at the end (API.md says so, and how to avoid it).
        r = self.run_code("""
            import matplotlib.pyplot as plt
            fig, ax = plt.subplots()
            ax.plot([1, 2])
            display(fig)
            print(plt.get_fignums())
        """)
        self.assert_ok(r)
        self.assertEqual(r.stdout, "[1]\n")
        (b,) = self.shown()
        self.assert_figure_bundle(b)
        self.assertEqual(r.result["figures"], ["figure_1.png"])

    def test_display_after_saving_is_no_change(self):
        # display(fig) draws the figure into a buffer: that is no change,
        # and the figure saved before is not saved again; changed after
        # display, it is.
        r = self.run_code("""
            import matplotlib.pyplot as plt
            fig, ax = plt.subplots()
            ax.plot([1, 2])
            fig.savefig("a.png")
            display(fig)
            f2, ax2 = plt.subplots()
            ax2.plot([2, 1])
            f2.savefig("b.png")
            display(f2)
            _ = ax2.set_title("changed after display")
        """)
        self.assert_ok(r)
        self.assertEqual(len(self.shown()), 2)
        self.assertEqual(r.result["figures"], ["figure_1.png"])
        self.assertEqual(self.pngs(), ["a.png", "b.png", "figure_1.png"])

    def test_bundle_count_is_the_services(self):
        # _DISPLAY_ENTRIES_MAX copies service/exec/display.h's number.
        import re
        header = os.path.join(os.path.dirname(PRELUDE), "..", "display.h")
        with open(header) as f:
            m = re.search(r"#define IPD_DISPLAY_ENTRIES_MAX (\d+)", f.read())
        self.assertIsNotNone(m, header)
        spec = importlib.util.spec_from_file_location("interpd_prelude",
                                                      PRELUDE)
        prelude = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(prelude)
        self.assertEqual(prelude._lib()["_DISPLAY_ENTRIES_MAX"],
                         int(m.group(1)))

    def test_full_bundle_count_leaves_shown_figures_as_files(self):
        r = self.run_code("""
            import matplotlib.pyplot as plt
            for i in range(1000):
                display(i)
            plt.plot([1, 2])
            plt.show()
            print(plt.get_fignums())
        """)
        self.assert_ok(r)
        self.assertEqual(r.stdout, "[1]\n")
        self.assertEqual(len(self.shown()), 1000)
        self.assertEqual(r.result["figures"], ["figure_1.png"])

    def test_fig_show_shows_that_figure_once(self):
        # fig.show() (Figure.show, not plt.show): that one figure becomes
        # one bundle and is closed; the other, left open, is saved at the
        # end; a plt.show() after it shows nothing of it again.
        r = self.run_code("""
            import matplotlib.pyplot as plt
            f1, a1 = plt.subplots()
            a1.plot([1, 2])
            f2, a2 = plt.subplots(figsize=(3, 2))
            a2.bar(["a", "b"], [3, 5])
            f2.show()
            print(plt.get_fignums())
            f1.savefig("a.png")
            f1.show()
            plt.show()
            f3 = plt.figure()
            f3.show()
            f3.show()
            print(plt.get_fignums())
            display("end")
        """)
        self.assert_ok(r)
        self.assertNotIn("non-interactive", r.stderr)
        self.assertEqual(r.stdout, "[1]\n[]\n")
        first, second, end = self.shown()
        self.assert_figure_bundle(first)
        self.assertIn("300x200", first["text/plain"])
        self.assert_figure_bundle(second)
        self.assertEqual(end, {"text/plain": "'end'"})
        self.assertEqual(self.pngs(), ["a.png"])
        self.assertEqual(r.result["figures"], [])

    def budget(self, n):
        """The job's display.json, as the service writes it."""
        with open(os.path.join(self.job, "display.json"), "w") as f:
            f.write('{"inline_image_max": %d}\n' % n)

    def assert_kept_as_file(self, bundle, name):
        self.assertEqual(sorted(bundle), ["text/plain"], bundle)
        self.assertTrue(bundle["text/plain"].startswith("<Figure size "),
                        bundle)
        self.assertIn(" saved as %s: " % name, bundle["text/plain"])
        self.assertTrue(self.figure_bytes(name).startswith(PNG_SIGNATURE))

    _TWO_SHOWN = """
        import matplotlib.pyplot as plt
        plt.plot([1, 2, 3])
        plt.show()
        plt.plot([1, 2, 3])
        plt.show()
        fig = plt.figure()
        fig.gca().plot([1, 2, 3])
        fig.show()
        print(plt.get_fignums())
    """

    def test_shown_figure_over_the_image_budget_is_a_file(self):
        # The service keeps display images while they fit in its
        # --inline-image-max together (display.json says it): the first
        # shown figure fits, the next would not and is saved as a file
        # instead (fig.show() too), its bundle naming it.
        r = self.run_code(self._TWO_SHOWN)
        self.assert_ok(r)
        pngs = [base64.b64decode(b["image/png"]) for b in self.shown()]
        self.assertEqual(len(pngs), 3)
        self.assertEqual(len(pngs[0]), len(pngs[1]))   # the same size
        shutil.rmtree(self.out)
        os.mkdir(self.out)

        self.budget(len(pngs[0]) + len(pngs[1]) // 2)
        r = self.run_code(self._TWO_SHOWN)
        self.assert_ok(r)
        self.assertEqual(r.stdout, "[]\n")
        shown, kept, kept_fig_show = self.shown()
        self.assertEqual(self.assert_figure_bundle(shown), pngs[0])
        self.assert_kept_as_file(kept, "figure_1.png")
        self.assert_kept_as_file(kept_fig_show, "figure_2.png")
        self.assertEqual(self.figure_bytes("figure_1.png"), pngs[1])
        self.assertEqual(r.result["figures"], ["figure_1.png",
                                               "figure_2.png"])
        self.assertEqual(self.pngs(), ["figure_1.png", "figure_2.png"])

    def test_image_budget_counts_displayed_images(self):
        # display() of an image is charged as the service charges it: a
        # figure shown after it no longer fits.  An image over what is
        # left is not charged (the service leaves it out): a figure that
        # fits the rest is shown.
        code = """
            import matplotlib.pyplot as plt
            import random
            from PIL import Image
            w = %d     # random pixels: the PNG is about w * 40 bytes
            display(Image.frombytes("L", (w, 40),
                                    random.Random(1).randbytes(w * 40)))
            plt.plot([1, 2])
            plt.show()
        """
        r = self.run_code(code % 40)
        self.assert_ok(r)
        img, fig = [len(base64.b64decode(b["image/png"]))
                    for b in self.shown()]
        shutil.rmtree(self.out)
        os.mkdir(self.out)
        self.budget(fig + img // 2)
        r = self.run_code(code % 40)
        self.assert_ok(r)
        shown = self.shown()
        self.assertIn("image/png", shown[0])
        self.assert_kept_as_file(shown[1], "figure_1.png")
        shutil.rmtree(self.out)
        os.mkdir(self.out)
        self.budget(fig)
        r = self.run_code(code % 4000)    # an image over the whole budget
        self.assert_ok(r)
        big, shown = self.shown()
        self.assertGreater(len(base64.b64decode(big["image/png"])), fig)
        self.assert_figure_bundle(shown)
        self.assertEqual(self.pngs(), [])

    def test_no_image_budget_makes_every_shown_figure_a_file(self):
        # --inline-image-max 0: the service keeps no image.  The code's
        # own figure_1.png is left alone: the next free name is taken.
        self.budget(0)
        r = self.run_code("""
            import matplotlib.pyplot as plt
            open("figure_1.png", "w").write("mine")
            plt.plot([1, 2])
            plt.savefig("a.png")
            plt.show()
            plt.plot([2, 1])
            plt.show()
        """)
        self.assert_ok(r)
        (kept,) = self.shown()
        self.assert_kept_as_file(kept, "figure_2.png")
        self.assertIn("(0 bytes)", kept["text/plain"])
        self.assertEqual(self.figure_bytes("figure_1.png"), b"mine")
        self.assertEqual(self.pngs(), ["a.png", "figure_1.png",
                                       "figure_2.png"])
        self.assertEqual(r.result["figures"], ["figure_2.png"])

    def test_the_code_sees_matplotlibs_own_names(self):
        r = self.run_code("""
            import matplotlib.pyplot as plt
            from matplotlib.figure import Figure
            print(Figure.savefig.__name__, plt.show.__name__,
                  Figure.show.__name__,
                  Figure.savefig.__doc__ == Figure.savefig.__wrapped__.__doc__)
            fig = plt.figure()
            print(fig.savefig("x.png") is None, fig.show() is None)
        """)
        self.assert_ok(r)
        self.assertEqual(r.stdout, "savefig show show True\nTrue True\n")


class TestReseed(unittest.TestCase):

    def test_reseed_when_already_imported(self):
        spec = importlib.util.spec_from_file_location("interpd_prelude",
                                                      PRELUDE)
        prelude = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(prelude)
        import random
        import numpy
        random.seed(1)
        numpy.random.seed(1)
        fixed = (random.random(), numpy.random.random())
        random.seed(1)
        numpy.random.seed(1)
        prelude._lib()["_reseed"]()
        self.assertNotEqual(random.random(), fixed[0])
        self.assertNotEqual(numpy.random.random(), fixed[1])


# Warm runs as zygote.py makes them, without the sandbox: the zygote's
# _load_prelude and _warm (matplotlib imported, one plot drawn), then a
# forked child per run (argv[2]: a JSON list of codes) that runs
# run_cell; one JSON line per run, and a last one with what the zygote
# itself has of the prelude's patches afterwards.
_WARM_DRIVER = r"""
import importlib.util, json, os, shutil, sys
spec = importlib.util.spec_from_file_location("zygote", sys.argv[1])
z = importlib.util.module_from_spec(spec)
spec.loader.exec_module(z)
p = z._load_prelude()
z._warm(p)
job, out = os.environ["IPD_PRELUDE_JOB"], os.environ["IPD_PRELUDE_OUTPUT"]
for code in json.loads(sys.argv[2]):
    for name in os.listdir(out):
        path = os.path.join(out, name)
        if os.path.isdir(path):
            shutil.rmtree(path)
        else:
            os.unlink(path)
    with open(os.path.join(job, "code.py"), "w") as f:
        f.write(code)
    sys.stdout.flush()
    pid = os.fork()
    if pid == 0:
        os._exit(p.run_cell(p.new_main_module()))
    _, st = os.waitpid(pid, 0)
    with open(os.path.join(out, ".interpd", "result.json")) as f:
        res = json.load(f)
    shown = []
    if os.path.exists(os.path.join(out, ".interpd", "display.jsonl")):
        with open(os.path.join(out, ".interpd", "display.jsonl")) as f:
            shown = [sorted(json.loads(x)) for x in f]
    pngs = sorted(n for n in os.listdir(out) if n.endswith(".png"))
    sys.stdout.write(json.dumps({"status": os.waitstatus_to_exitcode(st),
                                 "error": res["error"],
                                 "figures": res["figures"],
                                 "display": shown, "pngs": pngs}) + "\n")
import matplotlib.pyplot as plt
from matplotlib.figure import Figure
sys.stdout.write(json.dumps({
    "zygote": [getattr(Figure.savefig, "_interpd", False),
               getattr(plt.show, "_interpd", False),
               getattr(Figure.show, "_interpd", False)]}) + "\n")
"""


class TestWarmCharts(PreludeCase):
    """The chart rules in warm runs: the zygote imported matplotlib and
    drew before forking; each run installs the patches itself and the
    zygote keeps none of them."""

    def warm_runs(self, codes):
        """Each code run warm, in a child of one zygote; what each left,
        and last what the zygote has of the patches."""
        zygote = os.path.join(os.path.dirname(PRELUDE), "zygote.py")
        e = dict(_base_env(), HOME=self.dir, MPLCONFIGDIR=self.mpl,
                 IPD_PRELUDE_JOB=self.job, IPD_PRELUDE_OUTPUT=self.out,
                 IPD_PRELUDE_MPLCACHE=_mpl_cache,
                 IPD_WARM_MODULES="numpy,pandas,matplotlib")
        with open(os.path.join(self.job, "files.json"), "w") as f:
            f.write("[]")
        proc = subprocess.run([PYTHON, "-I", "-B", "-c", _WARM_DRIVER,
                               zygote, json.dumps(codes)],
                              cwd=self.out, env=e, capture_output=True,
                              stdin=subprocess.DEVNULL, timeout=120)
        self.assertEqual(proc.returncode, 0, proc.stderr.decode())
        out = [json.loads(x) for x in proc.stdout.decode().splitlines()
               if x.startswith("{")]
        self.assertEqual(len(out), len(codes) + 1, proc.stdout.decode())
        for o in out[:-1]:
            self.assertEqual((o["status"], o["error"]), (0, None), o)
        self.assertEqual(out[-1], {"zygote": [False, False, False]})
        return out[:-1]

    def test_fig_show_and_the_image_budget(self):
        codes = [
            "import matplotlib.pyplot as plt\nf, ax = plt.subplots()\n"
            "ax.plot([1, 2])\nf.show()\nf.show()\n",
            "import matplotlib.pyplot as plt\nplt.plot([1, 2])\n"
            "plt.show()\n",
        ]
        fig_show, shown = self.warm_runs(codes)
        self.assertEqual((fig_show["pngs"], fig_show["display"]),
                         ([], [["image/png", "text/plain"]]))
        self.assertEqual(shown["display"], [["image/png", "text/plain"]])
        # The job says the service keeps no image over 2000 bytes: each
        # shown figure is kept as a file, named in a text/plain bundle.
        with open(os.path.join(self.job, "display.json"), "w") as f:
            f.write('{"inline_image_max": 2000}')
        for o in self.warm_runs(codes):
            self.assertEqual((o["pngs"], o["figures"], o["display"]),
                             (["figure_1.png"], ["figure_1.png"],
                              [["text/plain"]]), o)

    def test_each_forked_run_follows_the_rules(self):
        zygote = os.path.join(os.path.dirname(PRELUDE), "zygote.py")
        codes = [
            "import matplotlib.pyplot as plt\nplt.plot([1, 2])\n"
            "plt.savefig('a.png')\n",
            "import matplotlib.pyplot as plt\nplt.plot([1, 2])\n"
            "plt.show()\n",
            "import matplotlib.pyplot as plt\nplt.plot([1, 2])\n"
            "plt.savefig('a.png')\nplt.title('changed')\n",
            "import matplotlib.pyplot as plt\nplt.plot([1, 2]);\n",
        ]
        e = dict(_base_env(), HOME=self.dir, MPLCONFIGDIR=self.mpl,
                 IPD_PRELUDE_JOB=self.job, IPD_PRELUDE_OUTPUT=self.out,
                 IPD_PRELUDE_MPLCACHE=_mpl_cache,
                 IPD_WARM_MODULES="numpy,pandas,matplotlib")
        with open(os.path.join(self.job, "files.json"), "w") as f:
            f.write("[]")
        proc = subprocess.run([PYTHON, "-I", "-B", "-c", _WARM_DRIVER,
                               zygote, json.dumps(codes)],
                              cwd=self.out, env=e, capture_output=True,
                              stdin=subprocess.DEVNULL, timeout=120)
        self.assertEqual(proc.returncode, 0, proc.stderr.decode())
        out = [json.loads(x) for x in proc.stdout.decode().splitlines()
               if x.startswith("{")]
        self.assertEqual(len(out), len(codes) + 1, proc.stdout.decode())
        for o in out[:-1]:
            self.assertEqual((o["status"], o["error"]), (0, None), o)
        saved, shown, changed, left = out[:-1]
        self.assertEqual((saved["pngs"], saved["display"]), (["a.png"], []))
        self.assertEqual((shown["pngs"], shown["display"]),
                         ([], [["image/png", "text/plain"]]))
        self.assertEqual((changed["pngs"], changed["figures"]),
                         (["a.png", "figure_1.png"], ["figure_1.png"]))
        self.assertEqual((left["pngs"], left["display"]),
                         (["figure_1.png"], []))
        self.assertEqual(out[-1], {"zygote": [False, False, False]})


# A session's program as zygote.py runs it: the prelude loaded once as the
# module "_interpd_prelude", one __main__ module for every call.  The
# driver reads steps (JSON) from argv: ["cell", code, files] runs
# run_cell, ["vars"] the variables call; it prints one JSON line per step.
_SESSION_DRIVER = r"""
import importlib.util, json, os, sys
spec = importlib.util.spec_from_file_location("_interpd_prelude", sys.argv[1])
p = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = p
spec.loader.exec_module(p)
job, out = os.environ["IPD_PRELUDE_JOB"], os.environ["IPD_PRELUDE_OUTPUT"]
mod = p.new_main_module()
first = True
for step in json.loads(sys.argv[2]):
    if step[0] == "cell":
        for name, text in (("code.py", step[1]), ("files.json", step[2])):
            with open(os.path.join(job, name), "w") as f:
                f.write(text)
        status = p.run_cell(mod, first)
        first = False
        with open(os.path.join(out, ".interpd", "result.json")) as f:
            res = json.load(f)
        shown = []
        if os.path.exists(os.path.join(out, ".interpd", "display.jsonl")):
            with open(os.path.join(out, ".interpd", "display.jsonl")) as f:
                shown = [sorted(json.loads(x)) for x in f]
        sys.__stdout__.write(json.dumps({"status": status,
                                         "error": res["error"],
                                         "figures": res["figures"],
                                         "display": shown}) + "\n")
    else:
        p._lib()["_write_variables"](mod.__dict__)
        with open(os.path.join(out, ".interpd", "variables.json"), "rb") as f:
            sys.__stdout__.write(json.dumps({"raw": f.read().decode()})
                                 + "\n")
    sys.__stdout__.flush()
"""


class TestSession(PreludeCase):
    """A session's calls in one interpreter (run_cell, _write_variables)."""

    def session(self, steps):
        e = dict(_base_env(), HOME=self.dir, MPLCONFIGDIR=self.mpl,
                 IPD_PRELUDE_JOB=self.job, IPD_PRELUDE_OUTPUT=self.out,
                 IPD_PRELUDE_MPLCACHE=_mpl_cache)
        proc = subprocess.run([PYTHON, "-I", "-B", "-c", _SESSION_DRIVER,
                               PRELUDE, json.dumps(steps)],
                              cwd=self.out, env=e, capture_output=True,
                              stdin=subprocess.DEVNULL, timeout=120)
        self.assertEqual(proc.returncode, 0, proc.stderr.decode())
        lines = proc.stdout.decode().splitlines()
        out = [json.loads(x) for x in lines if x.startswith("{")]
        self.assertEqual(len(out), len(steps), proc.stdout.decode())
        return out

    def listing(self, step_out):
        doc = json.loads(step_out["raw"])
        self.assertEqual(sorted(doc), ["truncated", "variables"])
        return doc, {v["name"]: v for v in doc["variables"]}

    def test_charts_are_per_call(self):
        out = self.session([
            ["cell", "import matplotlib.pyplot as plt\n"
                     "plt.plot([1, 2])\nplt.show()\n", "[]"],
            ["cell", "assert plt.get_fignums() == [], plt.get_fignums()\n"
                     "_ = plt.plot([2, 1])\n", "[]"],
            ["cell", "assert plt.get_fignums() == [], plt.get_fignums()\n"
                     "plt.plot([3])\nplt.savefig('s.png')\n", "[]"],
            ["cell", "plt.figure(figsize=(2, 2))\nplt.bar(['a'], [1])\n"
                     "plt.savefig('t.png')\n_ = plt.ylabel('changed')\n",
             "[]"],
            ["cell", "assert plt.get_fignums() == [], plt.get_fignums()\n",
             "[]"],
        ])
        self.assertEqual([o["status"] for o in out], [0] * 5, out)
        self.assertEqual([len(o["figures"]) for o in out], [0, 1, 0, 1, 0],
                         out)
        self.assertEqual([o["display"] for o in out],
                         [[["image/png", "text/plain"]], [], [], [], []])

    def test_image_budget_is_per_call(self):
        # The service's image budget is per result (16000 bytes: one
        # 4x3 figure of about 11000 fits, two do not): a figure that fits
        # is shown in each call, the next one in a call is kept as a
        # file (the next free name: the session's output dir keeps the
        # earlier one), and fig.show() shows once.
        with open(os.path.join(self.job, "display.json"), "w") as f:
            f.write('{"inline_image_max": 16000}')
        cell = ("import matplotlib.pyplot as plt\n"
                "for i in range(2):\n"
                "    f = plt.figure(figsize=(4, 3))\n"
                "    f.gca().plot([1, 2, 3])\n"
                "    f.show()\n    f.show()\n")
        out = self.session([["cell", cell, "[]"], ["cell", cell, "[]"]])
        self.assertEqual([o["status"] for o in out], [0, 0], out)
        self.assertEqual([o["figures"] for o in out],
                         [["figure_1.png"], ["figure_2.png"]])
        for o in out:
            self.assertEqual(o["display"], [["image/png", "text/plain"],
                                            ["text/plain"]], o)

    def test_files_are_per_call(self):
        a = self.add_file("a.txt", "alpha")
        files_a = json.dumps([a])
        out = self.session([
            ["cell", "print(sorted(FILES), load_file('a.txt'))", files_a],
            ["cell", "import json\nassert dict(FILES) == {}, dict(FILES)\n"
                     "try:\n    load_file('a.txt')\n"
                     "except FileNotFoundError:\n    pass\n"
                     "else:\n    raise AssertionError('still loaded')\n",
             "[]"],
            ["cell", "FILES = {'mine': 1}", "[]"],
            ["cell", "assert type(FILES).__name__ == '_Files', FILES\n"
                     "print(load_file('a.txt'))", files_a],
        ])
        self.assertEqual([o["status"] for o in out], [0, 0, 0, 0], out)

    def test_repr_cut_on_real_text(self):
        out = self.session([
            ["cell", "class S(str):\n"
                     "    def __len__(self):\n        return 1\n"
                     "    def __getitem__(self, k):\n        return self\n"
                     "    def __str__(self):\n        return 'short'\n"
                     "    def encode(self, *a, **k):\n        return b'short'\n"
                     "class Big:\n"
                     "    def __repr__(self):\n"
                     "        return S('x' * 200000)\n"
                     "big = Big()\n", "[]"],
            ["vars"]])
        doc, by = self.listing(out[1])
        self.assertEqual(by["big"]["repr"], "x" * 497 + "...")
        self.assertEqual(by["big"]["type"], "Big")
        self.assertFalse(doc["truncated"])

    def test_type_name_nul_and_surrogates(self):
        out = self.session([
            ["cell", "class Meta(type):\n"
                     "    @property\n"
                     "    def __name__(cls):\n        return 'forged'\n"
                     "class K(metaclass=Meta):\n    pass\n"
                     "k = K()\n"
                     "class L:\n    pass\n"
                     "L.__name__ = 'T' * 5000\n"
                     "l = L()\n"
                     "class N:\n"
                     "    def __repr__(self):\n"
                     "        return 'a\\x00b\\ud800c'\n"
                     "n = N()\n", "[]"],
            ["vars"]])
        raw = out[1]["raw"]
        self.assertNotIn("\\u0000", raw)
        self.assertNotIn("\\ud800", raw.lower().replace("\\\\ud800", ""))
        doc, by = self.listing(out[1])
        self.assertEqual(by["k"]["type"], "K")
        self.assertEqual(len(by["l"]["type"]), 256)
        self.assertTrue(by["l"]["type"].endswith("..."))
        self.assertEqual(by["n"]["repr"], "a\\x00b\\ud800c")

    def test_names_listed_are_names(self):
        out = self.session([
            ["cell", "g = globals()\ng['a b'] = 1\ng[7] = 2\n"
                     "g['x' * 300] = 3\nok = 4\n", "[]"],
            ["vars"]])
        doc, by = self.listing(out[1])
        self.assertEqual(sorted(by), ["g", "ok"])
        self.assertTrue(doc["truncated"])   # the 300-byte name left out

    def test_listing_fits_the_services_read(self):
        out = self.session([
            ["cell", "for i in range(1200):\n"
                     "    globals()['v%04d' % i] = '\\U0001F600' * 600\n",
             "[]"],
            ["vars"]])
        raw = out[1]["raw"]
        self.assertLessEqual(len(raw.encode()), 1000000)
        doc, by = self.listing(out[1])
        self.assertTrue(doc["truncated"])
        self.assertLess(len(by), 1000)
        for v in by.values():
            self.assertLessEqual(len(v["repr"]), 500)


class TestImports(PreludeCase):
    """result.json's "imports" (_import_statements, _imported): what the
    adaptive warm set counts (service/exec/warmset.h)."""

    def imports(self, code):
        r = self.run_code(code)
        self.assertIsNotNone(r.result, r)
        self.assertIn("imports", r.result)
        got = r.result["imports"]
        self.assertEqual(len(got), len(set(got)), got)
        return r, got

    def test_none(self):
        r, got = self.imports("print(1)")
        self.assert_ok(r)
        self.assertEqual(got, [])

    def test_nested_statements(self):
        r, got = self.imports("""
            import numpy
            def f():
                import ipd_never_a.deep
            class C:
                import ipd_in_class
            if False:
                import ipd_in_if
            elif False:
                import ipd_in_elif
            else:
                import yaml
            try:
                import ipd_in_try
            except ImportError:
                import ipd_in_except
            else:
                import ipd_in_try_else
            finally:
                import ipd_in_finally
            with open("/dev/null") as fh:
                import PIL
            for i in []:
                import ipd_in_for
            while False:
                import ipd_in_while
            match 1:
                case 2:
                    import ipd_in_case
            x = [__import__("ipd_call_not_counted") for _ in []]
            """)
        self.assertEqual(r.rc, 1, r)   # ipd_in_try is not there
        self.assertEqual(sorted(got), sorted([
            "numpy", "ipd_never_a.deep", "ipd_in_class", "ipd_in_if",
            "ipd_in_elif", "yaml", "ipd_in_try", "ipd_in_except",
            "ipd_in_try_else", "ipd_in_finally", "PIL", "ipd_in_for",
            "ipd_in_while", "ipd_in_case"]))

    def test_from_names_a_submodule_only_when_it_is_one(self):
        r, got = self.imports("""
            from numpy import linalg, array
            from numpy.fft import fft
            from PIL import ipd_not_a_module_here
            """)
        self.assertEqual(sorted(got), ["PIL", "numpy", "numpy.fft",
                                       "numpy.linalg"])

    def test_relative_stdlib_and_private_left_out(self):
        r, got = self.imports("""
            from __future__ import annotations
            import os, json, xml.dom, collections.abc
            from os import path
            import _thread
            if False:
                from . import sibling
                from .mod import thing
                from .. import up
                import _ipd_private
            import yaml
            """)
        self.assert_ok(r)
        self.assertEqual(got, ["yaml"])

    def test_at_most_32(self):
        code = "if False:\n" + "".join(
            "    import ipd_m%02d\n" % i for i in range(40))
        r, got = self.imports(code)
        self.assert_ok(r)
        self.assertEqual(len(got), 32)
        self.assertTrue(set(got) <= {"ipd_m%02d" % i for i in range(40)})
        code = "if False:\n" + "".join(
            "    import ipd_n%03d\n" % i for i in range(300))
        r, got = self.imports(code)
        self.assertEqual(len(got), 32)

    def test_syntax_error_lists_nothing(self):
        r, got = self.imports("import numpy\nimport (\n")
        self.assertEqual(r.error["type"], "SyntaxError")
        self.assertEqual(got, [])

    def test_error_still_lists(self):
        r, got = self.imports("import numpy\n1/0\n")
        self.assertEqual(r.error["type"], "ZeroDivisionError")
        self.assertEqual(got, ["numpy"])


class _CountingResult(unittest.TextTestResult):
    pass


def main():
    runner = unittest.TextTestRunner(resultclass=_CountingResult,
                                     verbosity=2 if "-v" in sys.argv else 1,
                                     # The mutation check's: stop at the
                                     # first failure (a killed mutant).
                                     failfast=bool(os.environ.get(
                                         "IPD_TEST_STOP_ON_FAIL")))
    argv = [a for a in sys.argv[1:] if a != "-v"]
    loader = unittest.defaultTestLoader
    if argv:
        suite = loader.loadTestsFromNames(argv, sys.modules[__name__])
    else:
        suite = loader.loadTestsFromModule(sys.modules[__name__])
    result = runner.run(suite)
    failed = (len(result.failures) + len(result.errors)
              + len(result.unexpectedSuccesses))
    passed = result.testsRun - failed - len(result.skipped)
    if result.skipped:
        print("%d skipped" % len(result.skipped))
    print("%d passed, %d failed" % (passed, failed))
    sys.exit(0 if failed == 0 and result.testsRun > 0 else 1)


if __name__ == "__main__":
    main()
