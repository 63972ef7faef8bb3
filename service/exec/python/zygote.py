"""interpd zygote: the warm side of executions (docs/SANDBOX.md, "Warm,
cold and session runs").

The executor starts, inside a sandbox like any run's (its own
namespaces, mounts, seccomp filter, limits and unprivileged uid),

    python3 -u -I -B /opt/interpd/zygote.py

with its command socket as fd 3 (service/sandbox/zproto.h defines the
wire protocol; the constants below copy its numbers).  This process
imports the warm modules (IPD_WARM_MODULES, default
numpy,pandas,matplotlib), draws one plot, imports the adaptive warm set
(IPD_WARM_CANDIDATES within IPD_WARM_BUDGET_KB: _adapt; its report goes
with READY), loads the prelude and freezes the garbage collector; then, for each park command, it forks a
child that

  1. makes a user namespace of its own (the zygote's uid mapped to
     itself: no capability outside it) and, inside it, mount, IPC, UTS,
     network and pid namespaces, and forks the pid namespace's init;
  2. (the init) mounts a fresh /proc, /tmp and /mnt/output, the stage
     trees the command names (/mnt/job, /mnt/data), sends the service
     its output dir and a pidfd of itself and waits while the service
     moves it into the run's cgroup;
  3. makes a cgroup namespace, sets the policy's rlimits, drops every
     capability (bounding set, securebits locked, capset, ambient),
     sets no_new_privs and non-dumpable, and loads the cold runs' seccomp
     filter on top of the zygote's;
  4. forks the program child: setsid, stdio on the service's pipes, every
     other descriptor closed, cwd /mnt/output; it waits for "go", then
     runs the prelude's main() (prelude.py) exactly as a cold run does,
     and exits with its status.  The init reaps, reports the program's
     wait status and rusage, and exits, which ends the namespace.

The zygote never holds request data: the code, files and variables are
written by the service into the parked child's stage after it is parked.
Nothing here runs user code: only the program child does, after step 3.
"""

import ctypes
import gc
import json
import os
import resource
import signal
import socket
import struct
import sys

CLONE_NEWNS = 0x00020000
CLONE_NEWCGROUP = 0x02000000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
MS_NOSUID, MS_NODEV, MS_NOEXEC = 2, 4, 8
MS_REC, MS_PRIVATE = 0x4000, 1 << 18
MOUNT_ATTR_RDONLY, MOUNT_ATTR_NOSUID, MOUNT_ATTR_NODEV = 1, 2, 4
AT_FDCWD, AT_RECURSIVE = -100, 0x8000
MOVE_MOUNT_F_EMPTY_PATH = 4
SYS_CAPSET, SYS_MOVE_MOUNT, SYS_MOUNT_SETATTR = 126, 429, 442
PR_SET_PDEATHSIG, PR_SET_DUMPABLE, PR_SET_SECCOMP = 1, 4, 22
PR_CAPBSET_DROP, PR_SET_SECUREBITS, PR_SET_NO_NEW_PRIVS = 24, 28, 38
PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL = 47, 4
SECCOMP_MODE_FILTER = 2
# NOROOT, NO_SETUID_FIXUP and NO_CAP_AMBIENT_RAISE, each locked, and
# KEEP_CAPS locked off: as a cold run's init sets them (child.c).
SECUREBITS = 0x01 | 0x02 | 0x04 | 0x08 | 0x20 | 0x40 | 0x80
CAP_VERSION_3 = 0x20080522

# The zygote protocol: service/sandbox/zproto.h defines it and its wire
# layout; these are its numbers, which tests/python/test_zproto.py checks
# against the header.  The command socket's first byte (P <-> Z):
CMD_INIT, CMD_READY, CMD_FAILED, CMD_PARK = b"I", b"R", b"E", b"P"
PARK_FDS_MAX = 3 + 8
REPORT_MAX = 4096       # READY's report (the warm set's), bytes
# The control message's kinds (child -> P; 4 and 5 are cold runs' only):
CTL_ERROR, CTL_OUTDIR, CTL_STATUS, CTL_INIT = 1, 2, 3, 4
CTL_EGRESS, CTL_HELLO, CTL_READY = 5, 6, 7
CTL_TEXT = 200
# P -> a parked child, and a session child's answer:
VERB_ATTACHED, VERB_GO, VERB_VARIABLES, VERB_DONE = b"A", b"G", b"V", b"D"
# struct ipd_zproto_ctl: kind, status, struct rusage (two timevals and 14
# longs), text; and a session call's answer: DONE, int32 status.
_CTL = struct.Struct("=Ii18q%ds" % CTL_TEXT)
_DONE = struct.Struct("=ci")
SETUP_FAIL_EXIT = 121

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long
_libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p,
                        ctypes.c_ulong, ctypes.c_char_p]
_libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong,
                        ctypes.c_ulong, ctypes.c_ulong]


class _MountAttr(ctypes.Structure):
    _fields_ = [("attr_set", ctypes.c_uint64), ("attr_clr", ctypes.c_uint64),
                ("propagation", ctypes.c_uint64),
                ("userns_fd", ctypes.c_uint64)]


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32),
                ("permitted", ctypes.c_uint32),
                ("inheritable", ctypes.c_uint32)]


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


class _SetupError(Exception):
    pass


def _check(rc, what):
    if rc < 0:
        err = ctypes.get_errno()
        raise _SetupError("%s: %s" % (what, os.strerror(err)))
    return rc


def _prctl(option, arg2=0, arg3=0):
    _check(_libc.prctl(option, arg2, arg3, 0, 0), "prctl %d" % option)


def _write(path, text):
    fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def _msg(kind, status=0, ru=None, text=""):
    fields = [0] * 18
    if ru is not None:
        fields[0], fields[1] = int(ru.ru_utime), int(ru.ru_utime % 1 * 1e6)
        fields[2], fields[3] = int(ru.ru_stime), int(ru.ru_stime % 1 * 1e6)
        fields[4] = ru.ru_maxrss
        fields[8], fields[9] = ru.ru_minflt, ru.ru_majflt
        fields[16], fields[17] = ru.ru_nvcsw, ru.ru_nivcsw
    return _CTL.pack(kind, status, *fields, text.encode()[:CTL_TEXT - 1])


def _send(sock, kind, fd=None, **kw):
    data = _msg(kind, **kw)
    if fd is None:
        sock.send(data)
    else:
        socket.send_fds(sock, [data], [fd])


# ------------------------------------------------------------ the child

def _enter_namespaces(p):
    """A user namespace of our own, then the others inside it."""
    rl = p["rlimits"]
    # Before the user namespace: it keeps them as the most its owner may
    # be charged (as a cold run's C0 does).
    for name, res in (("sigpending", resource.RLIMIT_SIGPENDING),
                      ("msgqueue", resource.RLIMIT_MSGQUEUE)):
        _setrlimit(res, rl[name])
    _check(_libc.unshare(CLONE_NEWUSER), "unshare user")
    _write("/proc/self/setgroups", "deny")
    _write("/proc/self/uid_map", "%d %d 1\n" % (p["uid"], p["uid"]))
    _write("/proc/self/gid_map", "%d %d 1\n" % (p["gid"], p["gid"]))
    _check(_libc.unshare(CLONE_NEWNS | CLONE_NEWIPC | CLONE_NEWUTS |
                         CLONE_NEWNET | CLONE_NEWPID), "unshare")


def _setrlimit(res, pair):
    """The policy's limits, never above what the zygote itself has."""
    soft, hard = pair
    cur_soft, cur_hard = resource.getrlimit(res)
    if cur_hard != resource.RLIM_INFINITY:
        hard = min(hard, cur_hard)
    resource.setrlimit(res, (min(soft, hard), hard))


def _mounts(p, trees):
    flags = MS_NOSUID | MS_NODEV
    _check(_libc.mount(None, b"/", None, MS_REC | MS_PRIVATE, None),
           "make / private")
    _check(_libc.mount(b"proc", b"/proc", b"proc", flags | MS_NOEXEC, None),
           "mount /proc")
    _check(_libc.mount(b"tmpfs", b"/tmp", b"tmpfs", flags,
                       p["tmp"].encode()), "mount /tmp")
    _check(_libc.mount(b"tmpfs", b"/mnt/output", b"tmpfs", flags,
                       p["out"].encode()), "mount /mnt/output")
    for fd, (dst, writable) in zip(trees, p["mounts"]):
        path = dst.encode()
        _check(_libc.syscall(SYS_MOVE_MOUNT, fd, b"", AT_FDCWD, path,
                             MOVE_MOUNT_F_EMPTY_PATH), "move_mount " + dst)
        attr = _MountAttr(MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV |
                          (0 if writable else MOUNT_ATTR_RDONLY), 0, 0, 0)
        _check(_libc.syscall(SYS_MOUNT_SETATTR, AT_FDCWD, path, AT_RECURSIVE,
                             ctypes.byref(attr), ctypes.sizeof(attr)),
               "mount_setattr " + dst)


def _lower_ns_limits():
    """The namespace's own inotify limits, as a cold run's init sets
    them (child.c, lower_ns_limits): writable while the init has its
    capabilities in the namespace."""
    for name, value in (("max_inotify_instances", "16"),
                        ("max_inotify_watches", "1024")):
        try:
            _write("/proc/sys/user/" + name, value)
        except FileNotFoundError:
            pass


def _lock_down(p, bpf):
    """Everything a cold run's init does before its program starts."""
    rl = p["rlimits"]
    _check(_libc.unshare(CLONE_NEWCGROUP), "unshare cgroup")
    for name, res in (("cpu", resource.RLIMIT_CPU),
                      ("fsize", resource.RLIMIT_FSIZE),
                      ("nofile", resource.RLIMIT_NOFILE)):
        _setrlimit(res, rl[name])
    resource.setrlimit(resource.RLIMIT_CORE, (1, 1))
    for cap in range(p["cap_last"] + 1):
        _prctl(PR_CAPBSET_DROP, cap)
    _prctl(PR_SET_SECUREBITS, SECUREBITS)
    os.setresgid(p["gid"], p["gid"], p["gid"])
    os.setresuid(p["uid"], p["uid"], p["uid"])
    hdr = _CapHeader(CAP_VERSION_3, 0)
    data = (_CapData * 2)()
    _check(_libc.syscall(SYS_CAPSET, ctypes.byref(hdr), ctypes.byref(data)),
           "capset")
    _prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL)
    _prctl(PR_SET_NO_NEW_PRIVS, 1)
    _prctl(PR_SET_DUMPABLE, 0)
    buf = ctypes.create_string_buffer(bpf, len(bpf))
    prog = _SockFprog(len(bpf) // 8, ctypes.cast(buf, ctypes.c_void_p))
    _prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER,
           ctypes.cast(ctypes.pointer(prog), ctypes.c_void_p).value)


# The rehearsal's groups, named in a park command's "rehearse" (the
# service picks those whose modules recent runs imported: warmset.c,
# ipd_warmset_rehearsal, which keeps the same names).
REHEARSAL_GROUPS = frozenset(("pandas", "chart", "scipy", "sympy", "seaborn",
                              "sklearn", "statsmodels"))


def _rehearsal_steps(mods, wanted=REHEARSAL_GROUPS):
    """The steps of _rehearse for the groups wanted whose modules the
    zygote imported, each a few to a few tens of ms."""
    if "pandas" in wanted and "pandas" in mods and "numpy" in mods:
        pd, np = mods["pandas"], mods["numpy"]
        box = {}

        def frame():
            df = pd.DataFrame({"k": ["a", "b"] * 8, "v": np.arange(16.0),
                               "d": pd.date_range("2025-01-01", periods=16)})
            sel = df.loc[df["k"] == "a", "v"]
            sel.mean(), sel.std()
            box["df"] = df

        def summary():
            df = box["df"]
            str(df.describe()), str(df.head()), df.to_string()

        def group():
            df = box.pop("df")
            df.groupby("k")["v"].agg(["sum", "mean"])
            df.set_index("d")["v"].resample("W").sum()

        yield frame
        yield summary
        yield group
    if "chart" in wanted and "matplotlib.pyplot" in mods:
        plt = mods["matplotlib.pyplot"]

        def chart():
            # Not drawn: rendering opens the font file again (the fds the
            # zygote's drawing left were closed), and the run would find
            # a descriptor a cold run does not have.
            fig, ax = plt.subplots()
            ax.plot([1, 2, 3], [1, 4, 9])
            plt.close(fig)

        yield chart
    for group, name, step in _MODULE_REHEARSALS:
        if group in wanted and name in mods:
            def bound(step=step):
                step(mods)
            bound.__name__ = step.__name__
            yield bound


# What runs most often do with the modules the adaptive warm set may hold:
# one step each, when the zygote imported the module (a small, fixed
# input; random states are reseeded by the run anyway).
def _rehearse_scipy_stats(mods):
    st = mods["scipy.stats"]
    st.ttest_ind([1.0, 2.0, 3.0, 4.0], [2.0, 3.0, 4.0, 6.0], equal_var=False)
    st.describe([1.0, 2.0, 3.0, 5.0])


def _rehearse_sympy(mods):
    sp = mods["sympy"]
    x = sp.Symbol("x")
    sp.solve(x ** 2 - 4, x)
    str(sp.simplify((x ** 2 - 1) / (x - 1)))


def _rehearse_seaborn(mods):
    sns, plt = mods["seaborn"], mods.get("matplotlib.pyplot")
    if plt is None:
        return
    fig, ax = plt.subplots()
    sns.barplot(x=["a", "b", "a", "b"], y=[1.0, 2.0, 1.5, 2.5], ax=ax)
    plt.close(fig)


def _rehearse_sklearn(mods):
    X, y = [[0.0], [1.0], [2.0], [3.0]], [0.0, 1.1, 1.9, 3.2]
    mods["sklearn.linear_model"].LinearRegression().fit(X, y).predict(X)
    if "sklearn.model_selection" in mods:
        mods["sklearn.model_selection"].train_test_split(
            X, y, test_size=0.25, random_state=0)
    if "sklearn.metrics" in mods:
        mods["sklearn.metrics"].r2_score(y, [0.0, 1.0, 2.0, 3.0])


def _rehearse_statsmodels(mods):
    pd = mods.get("pandas")
    if pd is None:
        return
    df = pd.DataFrame({"x": [float(i) for i in range(24)],
                       "y": [2.0 * i + (i % 3) for i in range(24)]})
    mods["statsmodels.formula.api"].ols("y ~ x", data=df).fit().summary()


_MODULE_REHEARSALS = (
    ("scipy", "scipy.stats", _rehearse_scipy_stats),
    ("sympy", "sympy", _rehearse_sympy),
    ("seaborn", "seaborn", _rehearse_seaborn),
    ("sklearn", "sklearn.linear_model", _rehearse_sklearn),
    ("statsmodels", "statsmodels.formula.api", _rehearse_statsmodels),
)


def _rehearse(ctl, wanted=REHEARSAL_GROUPS):
    """While parked, before any request: use pandas, numpy and pyplot (the
    groups wanted: what recent runs used) the way most runs do, so that the pages those writes land on (reference
    counts, caches: objects the zygote made) are this child's own copies
    before its run starts.  A fork shares every page copy-on-write, and a
    run's first writes to them cost a page fault each (some 1,000 for a
    small pandas cell, 40 us each on a VM: more than the cell itself);
    here they cost the parked child's idle time instead.  It stops as soon
    as go has come (ctl readable), so a run waits at most one step; when
    runs come back to back it does little.  Nothing of a request exists
    yet, nothing is printed, and what it makes is gone before the run
    (docs/SANDBOX.md, "Warm runs")."""
    import select
    import warnings
    # Whatever a step would print or warn goes nowhere: the run's stdout
    # and stderr are already fds 1 and 2.  ("ignore" leaves no mark in the
    # warnings registries: the run still sees its own warnings.)
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    saved = os.dup(1), os.dup(2)
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 1)
    os.dup2(null, 2)
    os.close(null)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for step in _rehearsal_steps(sys.modules, wanted):
                if select.select([ctl], [], [], 0)[0]:
                    return
                step()
    except Exception:
        pass
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:
                pass
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        os.close(saved[0])
        os.close(saved[1])


def _program(ctl, out_w, err_w, session, rehearse=frozenset()):
    """The program child: set up like a cold run's, then wait for go (a
    session's: its calls come later, _session_loop)."""
    os.setsid()
    _prctl(PR_SET_DUMPABLE, 1)   # as after a cold run's execve
    null = os.open("/dev/null", os.O_RDWR)
    for fd in (ctl, out_w, err_w, null):
        if fd <= 2:
            raise _SetupError("descriptor %d in the way of stdio" % fd)
    os.dup2(null, 0)
    os.dup2(null if session else out_w, 1)
    os.dup2(null if session else err_w, 2)
    os.closerange(3, ctl)
    os.closerange(ctl + 1, 1 << 20)
    os.chdir("/mnt/output")
    if session:
        return
    if rehearse:
        _rehearse(ctl, rehearse)
    # GO, with a streamed run's call socket: fd 3, as a cold run's.
    sock = socket.socket(fileno=ctl)
    go, fds, _, _ = socket.recv_fds(sock, 32, 1)
    sock.detach()
    os.close(ctl)
    if go[:1] != VERB_GO:
        os._exit(SETUP_FAIL_EXIT)
    for fd in fds:
        if fd != 3:
            os.dup2(fd, 3)
            os.close(fd)
        else:
            os.set_inheritable(3, True)
    if len(go) > 1:  # GO + the run's CPU seconds: its RLIMIT_CPU
        cpu = int(go[1:])
        resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))


def _init_loop(sock, c2):
    """Reap until the program child is gone, report it, end the
    namespace."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    while True:
        try:
            pid, status, _ = os.wait4(-1, 0)
        except InterruptedError:
            continue
        except ChildProcessError:
            os._exit(SETUP_FAIL_EXIT)
        if pid == c2:
            break
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    _send(sock, CTL_STATUS, status=status, ru=ru)
    os._exit(0)


def _child(p, fds, bpf):
    """The parked child (see the top).  Returns only in the program
    child, once it may run the request; every other process ends here."""
    ctl, out_w, err_w, trees = fds[0], fds[1], fds[2], fds[3:]
    session = bool(p.get("session"))
    if session:
        # A cancel's SIGINT (to every process of the session's cgroup,
        # from the moment it is attached) must not end a child still
        # setting up: ignored until the session loop has its gate
        # (prelude.install_interrupt_gate).
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    sock = socket.socket(fileno=ctl)
    try:
        _enter_namespaces(p)
        if os.fork() != 0:
            os._exit(0)      # the init is the zygote's init's to reap
        _mounts(p, trees)
        _lower_ns_limits()
        for fd in trees:
            os.close(fd)
        outdir = os.open("/mnt/output", os.O_RDONLY | os.O_DIRECTORY)
        _send(sock, CTL_OUTDIR, fd=outdir)
        os.close(outdir)
        pidfd = os.pidfd_open(os.getpid())
        _send(sock, CTL_HELLO, fd=pidfd)
        os.close(pidfd)
        if sock.recv(16) != VERB_ATTACHED:
            os._exit(SETUP_FAIL_EXIT)
        _lock_down(p, bpf)
        c2 = os.fork()
        if c2 == 0:
            sock.detach()
            _program(ctl, out_w, err_w, session,
                     REHEARSAL_GROUPS & frozenset(
                         str(p.get("rehearse", "")).split(",")))
            return ctl if session else None
    except (OSError, _SetupError, ValueError, KeyError) as e:
        try:
            _send(sock, CTL_ERROR, text=str(e))
        except OSError:
            pass
        os._exit(SETUP_FAIL_EXIT)
    os.close(out_w)
    os.close(err_w)
    _send(sock, CTL_READY)
    _init_loop(sock, c2)


# ------------------------------------------------------------ the zygote

def _load_prelude():
    import importlib.util
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                        "prelude.py")
    spec = importlib.util.spec_from_file_location("_interpd_prelude", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


def _rss_kib():
    with open("/proc/self/statm", "rb") as f:
        return int(f.read().split()[1]) * (os.sysconf("SC_PAGE_SIZE") // 1024)


def _status(field):
    """A number of /proc/self/status (field: b"Threads:", b"RssAnon:")."""
    with open("/proc/self/status", "rb") as f:
        for line in f:
            if line.startswith(field):
                return int(line.split()[1])
    return 0


def _threads():
    return _status(b"Threads:")


def _anon_kib():
    """The process's anonymous resident memory: what an import adds that
    is this process's own.  Not VmRSS: a forked probe faults in file pages
    the zygote already has (shared libraries' code), which are no cost of
    the module's."""
    return _status(b"RssAnon:")


PROBE_TIMEOUT = 20.0    # seconds a candidate's import may take


def _probe(name):
    """Import name in a child of this process, which then exits: (state,
    KiB it added).  "ok", or why it is refused: "not_importable" (it
    raised), "threads" (it started a thread: forking would copy a process
    with threads), "crashed" (the child died: a signal, the seccomp
    filter, os._exit), "timeout"."""
    import select
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(r)
            null = os.open(os.devnull, os.O_WRONLY)
            os.dup2(null, 1)
            os.dup2(null, 2)
            before, threads = _anon_kib(), _threads()
            try:
                __import__(name)
                state = b"threads" if _threads() > threads else b"ok"
            except BaseException:
                state = b"not_importable"
            os.write(w, b"%s %d" % (state, max(0, _anon_kib() - before)))
        finally:
            os._exit(0)
    os.close(w)
    data = b""
    try:
        ready, _, _ = select.select([r], [], [], PROBE_TIMEOUT)
        if ready:
            data = os.read(r, 64)
    finally:
        os.close(r)
        if not data:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        os.waitpid(pid, 0)
    if not data:
        return ("crashed" if ready else "timeout"), 0
    state, _, kib = data.partition(b" ")
    return state.decode("ascii", "replace"), int(kib or 0)


def _adapt(budget, candidates):
    """The warm set beyond the floor: each candidate ("name" or
    "name=KiB", the most imported first) is imported when it fits what is
    left of the budget (KiB).  A cost the service gives is one a probe of
    this venv measured; the others are probed in a child first, so a
    candidate that fails, crashes, hangs or starts threads never touches
    this process.  Returns the report's "modules": [name, state, KiB]."""
    out = []
    left = budget
    for item in candidates.split(",")[:16]:
        name, _, known = item.strip().partition("=")
        if not name:
            continue
        top = name.partition(".")[0]
        if top in sys.stdlib_module_names or top in sys.builtin_module_names:
            out.append([name, "stdlib", 0])
            continue
        if name in sys.modules:
            out.append([name, "loaded", 0])
            continue
        if known.isdigit():
            cost = int(known)
        else:
            state, cost = _probe(name)
            if state != "ok":
                out.append([name, state, cost])
                continue
        if cost > left:
            out.append([name, "over_budget", cost])
            continue
        before = _anon_kib()
        try:
            __import__(name)
        except BaseException:   # it imported in this venv's probe
            out.append([name, "not_importable", 0])
            continue
        cost = max(0, _anon_kib() - before)
        left -= cost
        out.append([name, "warm", cost])
    return out


def _warm(prelude):
    """Import the warm modules, draw once, add the adaptive warm set (the
    service's candidates within its budget), compile the prelude's rest.
    The report for READY, or b"" without an adaptive set."""
    lib = prelude._lib()
    names = [m.strip() for m in
             os.environ.pop("IPD_WARM_MODULES",
                            "numpy,pandas,matplotlib").split(",")
             if m.strip()]
    candidates = os.environ.pop("IPD_WARM_CANDIDATES", "")
    budget = os.environ.pop("IPD_WARM_BUDGET_KB", "")
    if "matplotlib" in names:
        lib["_seed_mpl_cache"]()
    for name in names:
        try:
            __import__(name)
        except Exception as e:
            sys.stderr.write("zygote: %s not imported: %s: %s\n"
                             % (name, type(e).__name__, e))
    if "matplotlib" in sys.modules:
        import io
        import matplotlib.pyplot as plt
        fig = plt.figure()
        plt.plot([1, 2, 3], [1, 4, 9])
        fig.savefig(io.BytesIO(), format="png")
        plt.close("all")
    report = b""
    if budget.isdigit():
        floor = _rss_kib()
        mods = _adapt(int(budget), candidates)
        while True:
            report = json.dumps({"floor_kib": floor, "modules": mods},
                                separators=(",", ":")).encode()
            if len(report) <= REPORT_MAX or not mods:
                break
            mods.pop()
    import traceback  # noqa: F401  (the error path's)
    gc.collect()
    gc.freeze()
    return report


def _exit_status(code):
    """An exit status as python gives one for sys.exit(code)."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xff
    sys.stderr.write("%s\n" % (code,))
    return 1


class _Go(BaseException):
    """Raised in a program child once it may run the request (ctl: a
    session's control socket, else None): unwinds it to the module level
    (the end of this file), where the prelude runs as deep in the stack
    as a cold run's, so the code may recurse as deep."""

    def __init__(self, ctl):
        super().__init__()
        self.ctl = ctl


def _finish(status):
    """Exit as python would (non-daemon threads joined, atexit
    functions, streams flushed)."""
    try:
        import threading
        threading._shutdown()
    except BaseException:
        pass
    try:
        import atexit
        atexit._run_exitfuncs()
    except BaseException:
        pass
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BaseException:
            pass
    os._exit(status)


def _flush():
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BaseException:
            pass


def _session_call(prelude, mod, first):
    try:
        status = _exit_status(prelude.run_cell(mod, first))
    except SystemExit as e:   # a child the code forked ends here
        _flush()
        os._exit(_exit_status(e.code))
    except BaseException:
        status = 1
    _flush()
    return status


def _call_cpu(data):
    """A call's RLIMIT_CPU (its verb is followed by its CPU seconds): it
    counts the interpreter's whole life, so the call may use what it has
    used so far and the call's own on top."""
    try:
        cpu = int(data[1:])
    except ValueError:
        return
    ru = resource.getrusage(resource.RUSAGE_SELF)
    soft = int(ru.ru_utime + ru.ru_stime) + 1 + cpu
    hard = resource.getrlimit(resource.RLIMIT_CPU)[1]
    if hard != resource.RLIM_INFINITY:
        soft = min(soft, hard)
    resource.setrlimit(resource.RLIMIT_CPU, (soft, hard))


def _only_me(me):
    """Go no further in a process the code forked (not the session's
    interpreter, me): it never speaks on the control channel, never takes
    a call."""
    if os.getpid() != me:
        os._exit(0)


def _session_loop(prelude, ctl):
    """A session's program child: calls until the service ends it
    (zproto.h).  VERB_GO with the call's stdout and stderr runs the job
    now in /mnt/job in the same __main__ module; VERB_VARIABLES writes the
    user's variables to .interpd/variables.json.  Each answers VERB_DONE
    + its status (int32).

    Only this process speaks for the session.  A process the code forks
    (in a cell, a __repr__, a signal handler that runs here between calls,
    a __del__) is a copy of this one, control socket and all: os.fork's
    hook closes the socket in it, and every step here that reads or
    answers first checks that it runs in this process (a fork that skips
    the hook, libc's own, still stops there).  Waiting is poll, then a
    non-blocking read, so even such a copy waiting here never takes a
    call: it wakes, sees it is not the session and exits."""
    import select
    os.set_inheritable(ctl, False)  # the program's own: never what it runs
    me = os.getpid()
    sock = socket.socket(fileno=ctl)

    def forked():
        try:
            sock.detach()
            os.close(ctl)
        except OSError:
            pass
    os.register_at_fork(after_in_child=forked)
    poller = select.poll()
    poller.register(ctl, select.POLLIN)
    mod = prelude.new_main_module()
    prelude.install_interrupt_gate()
    first = True
    null = os.open("/dev/null", os.O_RDWR)
    while True:
        _only_me(me)
        try:
            poller.poll()
            _only_me(me)
            data, fds, _, _ = socket.recv_fds(sock, 64, 3,
                                              socket.MSG_DONTWAIT)
        except (InterruptedError, BlockingIOError):
            continue
        except OSError:
            os._exit(0)
        except BaseException:   # a signal handler of the code's raised
            continue
        if not data:
            os._exit(0)
        status = 0
        if data[:1] in (VERB_GO, VERB_VARIABLES):
            _call_cpu(data)
        if data[:1] == VERB_GO and len(fds) in (2, 3):
            os.dup2(fds[0], 1)
            os.dup2(fds[1], 2)
            for fd in fds[:2]:
                os.close(fd)
            call_fd = fds[2] if len(fds) == 3 else -1
            prelude._CALL_FD[0] = call_fd   # a streamed call's socket
            status = _session_call(prelude, mod, first)
            if call_fd >= 0:
                try:
                    os.close(call_fd)
                except OSError:
                    pass
            prelude._CALL_FD[0] = 3
            _only_me(me)
            first = False
            os.dup2(null, 1)
            os.dup2(null, 2)
        elif data[:1] == VERB_VARIABLES:
            for fd in fds:
                os.close(fd)
            try:
                prelude._lib()["_write_variables"](mod.__dict__)
            except BaseException:
                status = 1
        else:
            for fd in fds:
                os.close(fd)
            continue
        _only_me(me)
        try:
            sock.send(_DONE.pack(VERB_DONE, status))
        except OSError:
            os._exit(0)


def _serve(cmd, bpf, prelude):
    while True:
        try:
            data, fds, _, _ = socket.recv_fds(cmd, 1 << 16, PARK_FDS_MAX)
        except InterruptedError:
            continue
        if not data:
            return 0
        if data[:1] != CMD_PARK or len(fds) < 3:
            for fd in fds:
                os.close(fd)
            continue
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            try:
                cmd.close()
                ctl = _child(json.loads(data[1:]), fds, bpf)
            except BaseException:
                os._exit(SETUP_FAIL_EXIT)
            raise _Go(ctl)
        for fd in fds:
            os.close(fd)
        try:
            os.waitpid(pid, 0)
        except ChildProcessError:
            pass


_PRELUDE = None  # the prelude module, for the program children


def main():
    global _PRELUDE
    cmd = socket.socket(fileno=3)
    init = cmd.recv(1 << 20)
    if init[:1] != CMD_INIT or (len(init) - 1) % 8 or len(init) < 9:
        sys.stderr.write("zygote: no filter from the service\n")
        return 2
    bpf = init[1:]
    try:
        prelude = _load_prelude()
        report = _warm(prelude)
    except Exception as e:
        cmd.send(CMD_FAILED + b"%s: %s" % (type(e).__name__.encode(),
                                           str(e).encode()[:200]))
        return 2
    _PRELUDE = prelude
    try:
        cmd.send(CMD_READY + report)
    except OSError:
        return 0    # the service stopped this zygote while it started
    return _serve(cmd, bpf, prelude)


if __name__ == "__main__":
    _go = None
    try:
        sys.exit(main())
    except _Go as e:
        _go = e     # a program child; out of the handler first, so the
                    # code's exceptions have no context
    if _go.ctl is not None:
        _session_loop(_PRELUDE, _go.ctl)
    _status = 0
    try:
        _PRELUDE.main()
    except SystemExit as _e:
        _status = _exit_status(_e.code)
    except BaseException:
        _status = 1
    _finish(_status)
