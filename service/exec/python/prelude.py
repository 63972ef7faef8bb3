"""interpd prelude: runs one user's code inside the sandbox.

The executor starts, inside the sandbox,

    /usr/bin/python3 -u -I -B /opt/interpd/prelude.py

with the working directory /mnt/output.  This file reads the job, runs the
user's code as the __main__ module and leaves a structured result for the
executor.  It adds nothing to sys.path.

Inputs (read-only, under IPD_PRELUDE_JOB, default /mnt/job):
  code.py         the user's code, UTF-8
  files.json      [{"file_id", "filename", "path", "file_type", "mime_type",
                   "size"}, ...]; a missing file counts as []
  variables.json  optional {"name": <JSON value>} defined as globals
  display.json    optional {"inline_image_max": bytes}: the service's budget
                  for the images of display (--inline-image-max); missing:
                  no limit known
  calls.json      a streamed run's only: {"functions": [names],
                  "max_bytes", "max_in_flight"}: call_client and its
                  kin may call the client through the call socket (fd 3;
                  a session's call: the one its GO brought, _CALL_FD),
                  and each name is defined as a function that does
                  (prelude_lib.py, "calls from the code to its client").
                  Without it, call_client raises RuntimeError.

Outputs (under IPD_PRELUDE_OUTPUT, default /mnt/output, also the cwd):
  stdout/stderr   the code's own, plus the traceback on stderr as Python
                  prints it (without the prelude's frames)
  figure_N.png    the matplotlib figures left open when the code ends,
                  but one the code saved itself (Figure.savefig into a file
                  under the output dir, also through plt.savefig or a file
                  object) and did not change afterwards: a chart comes back
                  once.  "Changed" is matplotlib's Figure.stale, which the
                  prelude's savefig wrapper clears once the save drew the
                  figure (savefig's own restoring of colours sets it).  A
                  figure saved into a buffer or outside the output dir is
                  saved as figure_N.png as any other.  A name the code wrote
                  itself is never overwritten: the next free number is taken
  plt.show()      as a notebook's inline backend: each open figure becomes
                  one display bundle (text/plain and image/png, see below),
                  in order with the other display output, and is closed (one
                  saved and unchanged is only closed: its file is its copy);
                  with no open figure it does nothing.  fig.show() does the
                  same for that one figure.  A figure that gets
                  no bundle (no PNG, or the display file is full or holds
                  the service's 1000 bundles already) stays open and is
                  saved at the end.  display(fig) leaves the figure open, as
                  a notebook does.  The patches (pyplot.show, Figure.show,
                  Figure.savefig) are put in by each run when pyplot is
                  imported or already is (a warm run: the zygote imported
                  it and never patches); their state is per call.
                  The service keeps the images of display only while their
                  PNGs fit in display.json's inline_image_max together, in
                  order; the prelude counts them the same way, and a shown
                  figure whose PNG would not fit in what is left is saved
                  as the next figure_N.png instead (listed in "figures"),
                  its bundle a text/plain only, "<Figure ...> saved as
                  figure_N.png: ...", so the chart is never lost, nor sent
                  twice.
  .interpd/result.json, written atomically (temp file + rename):
      {"error": null | {"type", "message", "traceback"},
       "figures": ["figure_1.png", ...],
       "imports": ["scipy", "scipy.stats", ...]}
                  imports: the modules the code's import statements named
                  beyond the standard library (_imported), which the
                  service counts for its adaptive warm set
                  (service/exec/warmset.h); at most 32.
                  The prelude creates .interpd/ and the temp file
                  (.interpd/result.json.<pid>.tmp, 128 KiB allocated) before
                  the code runs, so a code that fills the disk still gets its
                  result; error.message is capped at 16 Ki characters and
                  error.traceback at 64 Ki (its head and tail kept).
  .interpd/display.jsonl, appended by each display(obj) and by a bare
                  expression as the code's last statement: one MIME bundle
                  per line, {"text/plain": repr, "text/html": ...,
                  "image/png": base64}, in the order shown (see _show);
                  a text over 256 Ki characters is cut (text/plain, with
                  a note and "truncated": true) or left out (text/html);
                  once the file would pass 8 MiB, one {"truncated": true}
                  line and nothing more.  Untrusted by the executor, which
                  checks every line (service/exec/result.c).

Exit status: 0; 1 after an uncaught exception (KeyboardInterrupt too);
sys.exit(n) gives n (a non-integer code is printed to stderr and gives 1,
as in Python); 70 when the prelude itself could not start (unreadable or
malformed job files), with error.type "PreludeError".  A child the code
forked that reaches the end of the code writes neither figures nor
result.json.

The code is compiled with the filename "<code>" and runs in a fresh module
(__name__ == "__main__", also sys.modules["__main__"]), so frames read
File "<code>", line N with the user's own numbering.  It is parsed once
(compile with PyCF_ONLY_AST: no import of ast) and, as in a notebook cell,
a bare expression as its last statement is split off, evaluated after the
rest with its own line numbers, and its value shown (display) unless it is
None or the statement ends with ";" (read from the source text, as
IPython does).  display(*objs) is a builtin (builtins.display, so the
module's globals stay the code's own); IPython.display.display, when the
code imports it, is the same function.  Its source is entered
in linecache when linecache is first imported, so tracebacks and warnings
show the lines.  Tracebacks leave out every frame of this file and of
prelude_lib.py.

Start-up cost.  This file is compiled on every start (python never caches
the main script), so only the part every run needs is plain code; the rest
(load_file's readers, traceback formatting, figures, matplotlib's font
cache) is prelude_lib.py beside it, compiled into this module's globals
the first time it is needed (_lib(); the zygote does that once, before it
forks).  On the success path nothing is imported beyond
what `python3 -I` already loads: not json (files.json "[]" needs no parser,
result.json is written by hand), not traceback, not matplotlib.

matplotlib: MPLBACKEND defaults to Agg.  Font cache: when the code first
imports matplotlib, the regular files of /opt/interpd/mplcache (override:
IPD_PRELUDE_MPLCACHE), which the executor prepares once, e.g. with
`MPLCONFIGDIR=/opt/interpd/mplcache python3 -c 'import matplotlib.pyplot'`,
are copied into $MPLCONFIGDIR unless already there, so matplotlib finds its
fontlist-*.json instead of rebuilding it (100-250 ms here).  A copy, not a pointer:
matplotlib wants a writable config dir.

Random state: random and numpy seed themselves from os.urandom when first
imported; if either is already imported when a run starts (a pre-started
worker), it is reseeded from os.urandom.
"""

import os
import sys

_JOB = os.environ.get("IPD_PRELUDE_JOB") or "/mnt/job"
_OUTPUT = os.environ.get("IPD_PRELUDE_OUTPUT") or "/mnt/output"
_MPLCACHE = os.environ.get("IPD_PRELUDE_MPLCACHE") or "/opt/interpd/mplcache"
_CODE_NAME = "<code>"
_EX_PRELUDE = 70
_MAX_MESSAGE = 16 * 1024
_MAX_TRACEBACK = 64 * 1024
_ONLY_AST = 0x400   # PyCF_ONLY_AST

_SOURCE_LINES = []  # the code's lines, for linecache
_ENTRIES = {}       # file_id, filename and path -> files.json entry
_AMBIGUOUS = {}     # a filename several files share -> their ids


class AmbiguousFileError(KeyError):
    """A filename that several of the execution's files share (a KeyError,
    as for any name FILES does not hold)."""

    def __str__(self):
        return str(self.args[0]) if self.args else ""


def _ambiguous(label, name):
    return AmbiguousFileError(
        "%s: %d files are named %r; use one of their ids: %s"
        % (label, len(_AMBIGUOUS[name]), name, ", ".join(_AMBIGUOUS[name])))


class _Files(dict):
    """FILES: file ids and unambiguous filenames -> paths."""

    def __missing__(self, key):
        if isinstance(key, str) and key in _AMBIGUOUS:
            raise _ambiguous("FILES[%r]" % (key,), key)
        raise KeyError(key)
_FIGURES = []       # figure files saved so far
_CALL_FD = [3]      # the call socket (a session's call: its own, zygote.py)
_CALLS = []         # a streamed run's [max_bytes, max_in_flight, channel]
_CALL_NAMES = []    # the request's functions, defined in the namespace
_IMPORTS = []       # the code's import statements (_import_statements)


_LIB_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                         "prelude_lib.py")


def _lib():
    """The globals, with prelude_lib.py compiled into them on first use."""
    g = globals()
    if "_format_exception" not in g:
        with open(_LIB_PATH, "rb") as f:
            source = f.read()
        exec(compile(source, _LIB_PATH, "exec"), g)
    return g


class _Hooks:
    """A meta path finder that only watches the first import of a few
    modules: before[name] is called before it is looked for, after[name]
    once it has executed (names of functions in prelude_lib.py)."""

    def __init__(self):
        self.before = {}
        self.after = {}

    def find_spec(self, name, path=None, target=None):
        if name in self.before or name in self.after:
            return _lib()["_hooked_find_spec"](self, name, path, target)
        return None


_hooks = _Hooks()


def _watch(name, before=None, after=None):
    if name in sys.modules:
        if after is not None:
            _lib()["_call_hook"](after, sys.modules[name])
        return
    if before is not None:
        _hooks.before[name] = before
    if after is not None:
        _hooks.after[name] = after
    if _hooks not in sys.meta_path:
        sys.meta_path.insert(0, _hooks)


def _read_bytes(path):
    with open(path, "rb") as f:
        return f.read()


def _read_input(name, missing):
    try:
        return _read_bytes(os.path.join(_JOB, name))
    except FileNotFoundError:
        if missing is None:
            raise
        return missing


def load_file(name, **kwargs):
    """Load one of this execution's files by file id or filename.

    Returns a pandas DataFrame for csv, tsv, excel (first sheet), JSON
    records (a list of objects), JSON Lines and parquet; a dict or list for
    other JSON and for YAML; a str for text, markdown, python, XML and HTML;
    a PIL image for images (bytes when PIL is missing); bytes otherwise.
    Keyword arguments go to the pandas reader (csv, tsv, excel, parquet),
    e.g. load_file("data.csv", sep=";").  FILES maps ids and names to paths.
    """
    return _lib()["_load_file"](name, kwargs)


def display(*objs, **kwargs):
    """Show each object in the execution's result, as a notebook does: a
    MIME bundle per object in the result's "display" list (text/plain, and
    text/html or image/png where the object provides them).  Keyword
    arguments of IPython's display are accepted and ignored."""
    _lib()["_show"](objs)


class CallError(Exception):
    """An error a client answered a call with, when its type is not one
    of Python's built-in exceptions: the exception's class is named as
    the client's type and derives from this (a builtin, as call_client)."""


def call_client(name, *args, **kwargs):
    """Call the client of this streamed execution: it gets a "call" event
    {"call_id", "name", "args", "kwargs"} and answers it; its result (JSON)
    comes back, or its error is raised (a built-in exception of that type,
    else a CallError subclass of that name).  Blocks until the answer;
    the run's clock is paused meanwhile, up to the policy's call timeout
    (then TimeoutError).  Arguments and result are JSON values."""
    return _lib()["_call"](name, args, kwargs)


def call_client_batch(name, items, return_exceptions=False):
    """call_client(name, item) for each item, several in flight at once;
    the results in order.  With return_exceptions, an error is returned
    in its place instead of raised."""
    return _lib()["_call_batch"](name, items, return_exceptions)


async def call_client_async(name, *args, **kwargs):
    """call_client for asyncio: awaits the answer in a worker thread."""
    import asyncio
    import functools
    return await asyncio.get_running_loop().run_in_executor(
        None, functools.partial(call_client, name, *args, **kwargs))


def _stderr(text):
    stream = sys.stderr or sys.__stderr__
    try:
        stream.write(text)
        stream.flush()
    except Exception:
        pass


_JSON_ESCAPES = {i: "\\u%04x" % i for i in range(32)}
_JSON_ESCAPES.update({0x22: '\\"', 0x5c: "\\\\", 0x08: "\\b", 0x09: "\\t",
                      0x0a: "\\n", 0x0c: "\\f", 0x0d: "\\r"})


def _jstr(s):
    # Lone surrogates (from surrogateescape'd bytes) are not valid JSON text.
    s = s.encode("utf-8", "replace").decode("utf-8")
    return '"' + s.translate(_JSON_ESCAPES) + '"'


_RESERVE = 128 * 1024
_reserved = []      # [fd, temp path, (st_dev, st_ino)] of the result's file
_TMP_FLAGS = (os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
              | os.O_CLOEXEC)


def _reserve_result():
    """Before the code runs: .interpd/ and the result's temp file, with its
    space allocated, so a code that fills the disk still gets its result."""
    d = os.path.join(_OUTPUT, ".interpd")
    try:
        try:
            os.mkdir(d, 0o755)
        except FileExistsError:     # not a fresh output dir: no old display
            try:
                os.unlink(os.path.join(d, "display.jsonl"))
            except OSError:
                pass
        tmp = os.path.join(d, "result.json.%d.tmp" % os.getpid())
        fd = os.open(tmp, _TMP_FLAGS, 0o644)
    except OSError:
        return
    try:
        os.posix_fallocate(fd, 0, _RESERVE)
    except OSError:
        pass
    st = os.fstat(fd)
    _reserved[:] = [fd, tmp, (st.st_dev, st.st_ino)]


def _write_into_reserved(data):
    """The reserved temp file's path once data is in it; None when there is
    none or the code closed or replaced it."""
    if not _reserved:
        return None
    fd, tmp, ident = _reserved
    del _reserved[:]
    try:
        st = os.fstat(fd)
        if (st.st_dev, st.st_ino) != ident:
            return None         # the code closed it: the fd is not ours
    except OSError:
        return None
    try:
        st = os.lstat(tmp)
        if (st.st_dev, st.st_ino) != ident:
            return None         # the code replaced the file
        done = 0
        while done < len(data):
            done += os.pwrite(fd, data[done:], done)
        os.ftruncate(fd, len(data))
        return tmp
    except OSError:
        return None
    finally:
        os.close(fd)


def _write_result(error, figures, imports=()):
    """.interpd/result.json, through a temp file and a rename."""
    err = "null"
    if error is not None:
        err = '{"type": %s, "message": %s, "traceback": %s}' % (
            _jstr(error["type"]), _jstr(error["message"]),
            _jstr(error["traceback"]))
    data = ('{"error": %s, "figures": [%s], "imports": [%s]}\n' % (
        err, ", ".join(_jstr(f) for f in figures),
        ", ".join(_jstr(m) for m in imports))).encode("utf-8")
    d = os.path.join(_OUTPUT, ".interpd")
    tmp = _write_into_reserved(data)
    if tmp is None:
        try:
            os.mkdir(d, 0o755)
        except FileExistsError:
            pass
        tmp = os.path.join(d, "result.json.%d.tmp" % os.getpid())
        try:
            fd = os.open(tmp, _TMP_FLAGS, 0o644)
        except FileExistsError:     # left by the code: never write through
            os.unlink(tmp)
            fd = os.open(tmp, _TMP_FLAGS, 0o644)
        try:
            while data:
                data = data[os.write(fd, data):]
        finally:
            os.close(fd)
    os.replace(tmp, os.path.join(d, "result.json"))


def _ends_with_semicolon(node):
    """The source text has ";" right after node (IPython: show nothing).
    Column offsets count UTF-8 bytes."""
    try:
        line = _SOURCE_LINES[node.end_lineno - 1].encode("utf-8")
        rest = line[node.end_col_offset:]
    except Exception:
        return False
    return rest.lstrip(b" \t\f").startswith(b";")


def _split_last(tree):
    """The bare expression ending the module, removed from tree, as an
    Expression to eval; None when the code does not end with one."""
    body = tree.body
    if not body or type(body[-1]).__name__ != "Expr":
        return None
    if _ends_with_semicolon(body[-1]):
        return None
    last = compile("0", _CODE_NAME, "eval", _ONLY_AST, dont_inherit=True)
    last.body = body.pop().value
    return last


_STATEMENT_BODIES = ("body", "orelse", "finalbody", "handlers", "cases")


def _import_statements(tree):
    """(module, names) of each absolute import statement in the code, at
    any depth of statements (a function's, a branch's): what the warm set
    counts.  Expressions are not walked: no statement is in one."""
    found, todo = [], [tree]
    while todo and len(found) < 256:
        node = todo.pop()
        kind = type(node).__name__
        if kind == "Import":
            found.extend((a.name, ()) for a in node.names)
        elif kind == "ImportFrom" and not node.level and node.module:
            found.append((node.module, tuple(a.name for a in node.names)))
        for field in _STATEMENT_BODIES:
            body = getattr(node, field, None)
            if type(body) is list:
                todo.extend(body)
    return found


def _imported():
    """The modules the code's import statements named, beyond the
    standard library, for the warm set (result.json's "imports"; nothing
    else about the code leaves): "import a.b" names a.b; "from a import
    b" names a, and a.b when that is a module now."""
    names = []
    skip = sys.stdlib_module_names
    for module, items in _IMPORTS:
        top = module.partition(".")[0]
        if top in skip or top in sys.builtin_module_names or \
                top.startswith("_"):
            continue
        for name in (module,) + tuple(module + "." + i for i in items):
            if name not in names and len(name) <= 100 and \
                    (name == module or name in sys.modules):
                names.append(name)
        if len(names) >= 32:
            break
    return names[:32]


# A session's interrupt gate (its cancel sends SIGINT, again until the
# call answers): KeyboardInterrupt is raised only while the code runs;
# one that comes before it starts in this call is held for it (raised as
# it starts), one from before the call is dropped (run_cell).
_GATE = [False, False]   # [the code runs, one is held]


def _on_sigint(signum, frame):
    if _GATE[0]:
        raise KeyboardInterrupt
    _GATE[1] = True


def install_interrupt_gate():
    """For a session's interpreter (zygote.py): SIGINT through the gate."""
    import signal
    signal.signal(signal.SIGINT, _on_sigint)


def _execute(source, ns):
    """Run the code: (exit status or SystemExit code, error object).  A
    bare expression as its last statement is shown (_split_last)."""
    try:
        tree = compile(source, _CODE_NAME, "exec", _ONLY_AST,
                       dont_inherit=True)
        _IMPORTS[:] = _import_statements(tree)
        last = _split_last(tree)
        code = compile(tree, _CODE_NAME, "exec", dont_inherit=True)
        if last is not None:
            last = compile(last, _CODE_NAME, "eval", dont_inherit=True)
        del tree
        _GATE[0] = True
        if _GATE[1]:
            raise KeyboardInterrupt
        exec(code, ns)
        if last is not None:
            value = eval(last, ns)
            if value is not None:
                _lib()["_show"]((value,))
        _GATE[0] = False
    except SystemExit as e:
        _GATE[0] = False
        if e.code is None or e.code == 0 or e.code is False:
            return 0, None
        return e.code, _lib()["_error_object"](e, False)
    except BaseException as e:
        _GATE[0] = False
        return 1, _lib()["_error_object"](e, True)
    return 0, None


def new_main_module():
    """The __main__ module the code runs in (kept between a session's
    calls)."""
    mod = type(sys)("__main__")
    ns = mod.__dict__
    ns["__builtins__"] = sys.modules["builtins"]
    ns["FILES"] = _Files()
    ns["load_file"] = load_file
    b = ns["__builtins__"]
    b.display = display
    b.call_client = call_client
    b.call_client_batch = call_client_batch
    b.call_client_async = call_client_async
    b.CallError = CallError
    return mod


def _reset_call(ns):
    """What one call's results are made of starts empty (a session's
    later calls), and so do FILES and load_file's view: a call's input
    files are staged for that call only."""
    _ENTRIES.clear()
    _AMBIGUOUS.clear()
    files = ns.get("FILES")
    if type(files) is _Files:
        files.clear()
    else:
        ns["FILES"] = _Files()
    _FIGURES[:] = []
    _IMPORTS[:] = []
    for name in _CALL_NAMES:     # the last call's functions, unless rebound
        f = ns.get(name)
        if type(f).__name__ == "_ClientFunction":
            del ns[name]
    _CALL_NAMES[:] = []
    _CALLS[:] = []
    if "_display_full" in globals():
        _display_full[:] = []
        _display_count[:] = [0, 0]
        _saved_figures[:] = []
    for name in ("display.jsonl", "result.json"):
        try:
            os.unlink(os.path.join(_OUTPUT, ".interpd", name))
        except OSError:
            pass


def run_cell(mod, first=True):
    """Run the job under _JOB in mod and leave its result; the exit
    status.  first: the process's first job (random state is reseeded
    only then: a session's sequence goes on)."""
    pid = os.getpid()
    ns = mod.__dict__
    _GATE[1] = False   # an interrupt from before this call
    if not first:
        _reset_call(ns)
    try:
        os.chdir(_OUTPUT)
        source = _read_input("code.py", None)
        files = _read_input("files.json", b"[]")
        variables = _read_input("variables.json", b"")
        if files.strip() not in (b"[]", b"") or variables.strip():
            _lib()["_apply_job"](ns, files, variables)
        calls = _read_input("calls.json", b"")
        if calls:
            _lib()["_apply_calls"](ns, calls)
    except Exception as e:
        msg = "interpd prelude: %s: %s\n" % (type(e).__name__, e)
        _stderr(msg)
        try:
            _write_result({"type": "PreludeError", "message": str(e),
                           "traceback": msg}, [])
        except Exception:
            pass
        return _EX_PRELUDE

    text = source.decode("utf-8", "replace")
    if text.startswith("\ufeff"):
        text = text[1:]
    import io
    _SOURCE_LINES[:] = io.StringIO(text, newline=None).readlines()
    _watch("linecache", after="_register_source")
    _watch("matplotlib.pyplot", after="_patch_pyplot")
    _watch("matplotlib", before="_seed_mpl_cache")
    _watch("IPython.display", after="_patch_ipython")
    _reserve_result()
    if first and ("random" in sys.modules or "numpy" in sys.modules):
        _lib()["_reseed"]()
    sys.modules["__main__"] = mod
    sys.argv[:] = [_CODE_NAME]

    status, error = _execute(source, ns)

    if os.getpid() != pid:   # a child the code forked: not ours to report
        sys.exit(status)
    if "matplotlib.pyplot" in sys.modules:
        _lib()["_save_figures"]()
    try:
        _write_result(error, _FIGURES, _imported())
    except OSError as e:
        _stderr("interpd: could not write the result: %s\n" % e)
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass
    return status


def main():
    sys.exit(run_cell(new_main_module()))


if __name__ == "__main__":
    main()
