"""bench/fork_probe/forkcost.py - issue 24 experiment: what one warm run's
process shapes cost in CPU, from a zygote-like image (zygote.py's own
_warm: the warm modules imported, one chart drawn, the prelude loaded,
gc.freeze()), outside the service.  Run as root with /usr/bin/python3; it
drops to UID (default 65534) before building the image, as a zygote runs
unprivileged.

  forkcost.py [--modules numpy,pandas,matplotlib] [--k 20] [--rounds 5]
              [--init /tmp/fp-tinyinit] [--uid 65534] [--collapse]
              [VARIANT ...]

Variants (each iteration ends with every process of it reaped):
  fork_exit      fork, the child os._exit(0)s
  nested2/3      the child forks, and so on: 2 or 3 copies
  run            fork; the child runs prelude.main() on a print(1) job
  rehearse_run   the same after zygote.py's rehearsal steps
  today          today's shape: A (unshare user + map, unshare mount, IPC,
                 UTS, net, pid), B the init (forks, waits), C runs the job
  today_rehearse today's, C rehearses first (as a parked child does)
  spawn_init     posix_spawn of a static init (tinyinit.c) that makes the
                 namespaces (T0) and their pid 1 (T); the zygote enters
                 T's pid namespace for its children (setns), forks X, goes
                 back; X setns's into T's user, mount, IPC, UTS and net
                 namespaces and runs the job; T exits when told
  spawn_only     the init alone (no X)
  clone_direct   the zygote clones X straight into new user, mount, IPC,
                 UTS and net namespaces (one raw clone, no init: a lower
                 bound for a single copy with namespaces)

Prints per variant the CPU per iteration (the process itself + its reaped
children; user and system) and the wall time, medians over rounds.
"""
import argparse
import ctypes
import os
import resource
import shutil
import socket
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
PYDIR = os.path.join(HERE, "..", "..", "service", "exec", "python")

CLONE_NEWNS = 0x00020000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
SIGCHLD = 17
PR_SET_CHILD_SUBREAPER = 36

libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long


def check(rc, what):
    if rc < 0:
        e = ctypes.get_errno()
        raise OSError(e, "%s: %s" % (what, os.strerror(e)))
    return rc


def write(path, s):
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, s.encode())
    finally:
        os.close(fd)


def reap_all():
    while True:
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            return


class Image:
    def __init__(self, args, tmp):
        self.uid, self.gid = os.getuid(), os.getgid()
        job = os.path.join(tmp, "job")
        self.out = os.path.join(tmp, "out")
        os.makedirs(job)
        os.makedirs(self.out)
        with open(os.path.join(job, "code.py"), "w") as f:
            f.write("print(1)\n")
        os.environ.update({
            "IPD_PRELUDE_JOB": job, "IPD_PRELUDE_OUTPUT": self.out,
            "IPD_PRELUDE_MPLCACHE": os.path.join(tmp, "mplcache"),
            "MPLCONFIGDIR": os.path.join(tmp, "mpl"), "MPLBACKEND": "Agg",
            "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1",
            "IPD_WARM_MODULES": args.modules})
        sys.path.insert(0, PYDIR)
        import zygote
        self.z = zygote
        self.prelude = zygote._load_prelude()
        zygote._warm(self.prelude)
        if args.collapse:
            sys.path.insert(0, HERE)
            import thp
            print("# collapse: %r" % (thp.collapse(),), flush=True)
        self.init = args.init
        null = os.open(os.devnull, os.O_WRONLY)
        self.null = null
        # Design S's zygote: a user namespace of its own (U1: capabilities
        # over what it creates from now on), a pid namespace for its
        # children (P1) whose init R only reaps; P1 is where it comes
        # back to after forking a program child into a run's namespace.
        check(libc.unshare(CLONE_NEWUSER), "unshare user")
        write("/proc/self/setgroups", "deny")
        write("/proc/self/uid_map", "%d %d 1\n" % (self.uid, self.uid))
        write("/proc/self/gid_map", "%d %d 1\n" % (self.gid, self.gid))
        check(libc.unshare(CLONE_NEWPID), "unshare pid")
        self.r_sock, theirs = socket.socketpair(socket.AF_UNIX,
                                                socket.SOCK_SEQPACKET)
        self.r_pid = os.posix_spawn(self.init, [self.init, "reaper"], {},
                                    file_actions=[(os.POSIX_SPAWN_DUP2,
                                                   theirs.fileno(), 3)])
        theirs.close()
        self.p1 = os.open("/proc/self/ns/pid_for_children", os.O_RDONLY)

    def r_ticks(self):
        """What R reaped (T, and today's B): user, system seconds."""
        with open("/proc/%d/stat" % self.r_pid, "rb") as f:
            s = f.read()
        rest = s[s.rindex(b")") + 2:].split()
        hz = os.sysconf("SC_CLK_TCK")
        return int(rest[13]) / hz, int(rest[14]) / hz

    # ---- what a child does
    def job(self, rehearse=False):
        os.dup2(self.null, 1)
        os.dup2(self.null, 2)
        os.chdir(self.out)
        if rehearse:
            for step in self.z._rehearsal_steps(sys.modules):
                step()
        st = 0
        try:
            self.prelude.main()
        except SystemExit as e:
            st = e.code or 0
        except BaseException:
            st = 1
        for s in (sys.stdout, sys.stderr):
            try:
                s.flush()
            except BaseException:
                pass
        os._exit(st if isinstance(st, int) else 1)

    # ---- variants
    def fork_exit(self):
        pid = os.fork()
        if pid == 0:
            os._exit(0)
        os.waitpid(pid, 0)

    def nested(self, depth):
        pid = os.fork()
        if pid == 0:
            if depth > 1:
                self.nested(depth - 1)
            os._exit(0)
        os.waitpid(pid, 0)

    def nested2(self):
        self.nested(2)

    def nested3(self):
        self.nested(3)

    def run(self):
        pid = os.fork()
        if pid == 0:
            self.job()
        os.waitpid(pid, 0)

    def rehearse_run(self):
        pid = os.fork()
        if pid == 0:
            self.job(rehearse=True)
        os.waitpid(pid, 0)

    def _today(self, rehearse):
        a = os.fork()
        if a == 0:
            try:
                check(libc.unshare(CLONE_NEWUSER), "unshare user")
                write("/proc/self/setgroups", "deny")
                write("/proc/self/uid_map", "%d %d 1\n" % (self.uid, self.uid))
                write("/proc/self/gid_map", "%d %d 1\n" % (self.gid, self.gid))
                check(libc.unshare(CLONE_NEWNS | CLONE_NEWIPC | CLONE_NEWUTS |
                                   CLONE_NEWNET | CLONE_NEWPID), "unshare")
                if os.fork() != 0:
                    os._exit(0)
                c = os.fork()     # B, pid 1, forks the program
                if c == 0:
                    self.job(rehearse)
                os.waitpid(c, 0)
                os._exit(0)
            except BaseException as e:
                sys.__stderr__.write("today: %s\n" % e)
                os._exit(9)
        os.waitpid(a, 0)    # B is reparented to R (P1's init), which reaps

    def today(self):
        self._today(False)

    def today_rehearse(self):
        self._today(True)

    def _spawn_init(self):
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        t0 = os.posix_spawn(self.init, [self.init, str(self.uid),
                                        str(self.gid)], {},
                            file_actions=[(os.POSIX_SPAWN_DUP2,
                                           theirs.fileno(), 3)])
        theirs.close()
        _, fds, _, _ = socket.recv_fds(mine, 1, 1)
        os.waitpid(t0, 0)
        return mine, fds[0]

    def spawn_only(self):
        sock, pidfd = self._spawn_init()
        os.close(pidfd)
        sock.close()        # T exits; R reaps it

    def spawn_init(self):
        sock, pidfd = self._spawn_init()
        check(libc.setns(pidfd, CLONE_NEWPID), "setns pid")
        x = os.fork()
        if x == 0:
            try:
                check(libc.setns(pidfd, CLONE_NEWUSER | CLONE_NEWNS |
                                 CLONE_NEWIPC | CLONE_NEWUTS | CLONE_NEWNET),
                      "setns")
                if os.getpid() != 2:
                    raise OSError("X is pid %d" % os.getpid())
            except BaseException as e:
                sys.__stderr__.write("spawn_init: %s\n" % e)
                os._exit(9)
            self.job()
        check(libc.setns(self.p1, CLONE_NEWPID), "setns back")
        os.close(pidfd)
        _, st = os.waitpid(x, 0)
        if st:
            raise SystemExit("X: status %d" % st)
        sock.close()

    def clone_direct(self):
        # no CLONE_NEWPID: this zygote's pid_for_children is P1 already
        # (unshare/clone refuse a new one then); a pid namespace adds ~0
        flags = (CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWIPC | CLONE_NEWUTS |
                 CLONE_NEWNET | SIGCHLD)
        os.register_at_fork  # (a raw clone skips Python's fork hooks)
        pid = libc.syscall(56, ctypes.c_ulong(flags), None, None, None, None)
        if pid == 0:
            self.job()
        check(pid, "clone")
        os.waitpid(pid, 0)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--modules", default="numpy,pandas,matplotlib")
    ap.add_argument("--k", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--init", default="/tmp/fp-tinyinit")
    ap.add_argument("--uid", type=int, default=65534)
    ap.add_argument("--collapse", action="store_true",
                    help="THP-collapse the image after its imports (thp.py)")
    ap.add_argument("variants", nargs="*", default=[
        "fork_exit", "nested2", "nested3", "run", "today", "spawn_only",
        "spawn_init", "clone_direct", "rehearse_run", "today_rehearse"])
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="forkcost.")
    os.chmod(tmp, 0o755)
    if os.getuid() == 0:
        os.chown(tmp, args.uid, args.uid)
        libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
        os.setgroups([])
        os.setresgid(args.uid, args.uid, args.uid)
        os.setresuid(args.uid, args.uid, args.uid)
        libc.prctl(4, 1, 0, 0, 0)   # PR_SET_DUMPABLE: as after an exec
    else:
        libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    try:
        img = Image(args, tmp)
        st = open("/proc/self/status").read()
        rss = {l.split(":")[0]: l.split()[1] for l in st.splitlines()
               if l.startswith(("VmRSS", "RssAnon", "RssFile", "VmSize",
                                "VmPTE"))}
        for l in open("/proc/self/smaps_rollup"):
            if l.startswith("AnonHugePages"):
                rss["AnonHuge"] = l.split()[1]
        rss["vmas"] = len(open("/proc/self/maps").readlines())
        print("# image: modules=%r %s (kB); uid %d; PYTHONMALLOC=%s "
              "GLIBC_TUNABLES=%s" % (args.modules, rss, os.getuid(),
                                     os.environ.get("PYTHONMALLOC", ""),
                                     os.environ.get("GLIBC_TUNABLES", "")),
              flush=True)
        res = {v: [] for v in args.variants}
        for v in args.variants:      # one warm-up each
            getattr(img, v)()
        for r in range(args.rounds):
            for v in args.variants:
                time.sleep(0.05)     # R reaps what the last batch left
                t0, r0 = os.times(), img.r_ticks()
                w0 = time.perf_counter()
                for _ in range(args.k):
                    getattr(img, v)()
                w = (time.perf_counter() - w0) * 1000 / args.k
                time.sleep(0.05)
                t1, r1 = os.times(), img.r_ticks()
                us = (t1.user - t0.user + t1.children_user -
                      t0.children_user + r1[0] - r0[0]) * 1000 / args.k
                sy = (t1.system - t0.system + t1.children_system -
                      t0.children_system + r1[1] - r0[1]) * 1000 / args.k
                res[v].append((us + sy, us, sy, w))
        print("%-16s %8s %8s %8s %8s  (ms per iteration, median of %d x %d)"
              % ("variant", "cpu", "user", "sys", "wall", args.rounds,
                 args.k))
        for v, rows in res.items():
            med = [sorted(c)[len(c) // 2] for c in zip(*rows)]
            print("%-16s %8.2f %8.2f %8.2f %8.2f" % (v, *med), flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
