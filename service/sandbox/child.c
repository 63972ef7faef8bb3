/*
 * child.c - the cloned children of one sandboxed run (C0, C1, C2): the
 * id maps, the root filesystem and binds, the privilege drop, the exec.
 * Nothing here may allocate: see the end of this comment.
 *
 * Process tree (P = the calling thread):
 *
 *   P --clone3(CLONE_PIDFD|CLONE_INTO_CGROUP)--> C0  host namespaces, root
 *        C0 joins the run's v1 cgroups, drops supplementary groups (a root
 *        caller's group 0 would otherwise stay effective inside: setgroups
 *        is denied there, so they can't be dropped later), then
 *   C0 --clone(CLONE_PARENT|NEWUSER|NEWPID|NEWNS|NEWNET|NEWIPC|NEWUTS|
 *              NEWCGROUP)--> C1, a child of P, not of C0 (NEWNET always:
 *        a networked run gets the egress socket, never the host's net)
 *        C0 writes C1's setgroups "deny", uid_map and gid_map (one line
 *        each: inner id -> the unprivileged host id), releases C1, tells P
 *        C1's pid (P opens a pidfd: C1 is its unreaped child, so the pid
 *        cannot be reused) and exits.  Being P's child, C1 is never
 *        orphaned to the host's init, which need not reap (a container's
 *        pid 1 often does not: the zombie would outlive the run).
 *        C1 is pid 1 of the new pid namespace: it builds
 *        the root, locks itself down (ids, caps, no_new_privs, seccomp),
 *        forks
 *   C1 --fork--> C2  setsid, stdio pipes, stray fds closed, execve.
 *
 *   C1 stays as the namespace's init: it reaps orphans (a double-forked
 *   daemon gets reparented to it), ignores signals from inside (kill(-1)
 *   cannot reach it), reports C2's wait status to P and exits as soon as
 *   C2 does, which makes the kernel kill everything else in the pid
 *   namespace.  On timeout P kills C1 (pidfd) and the cgroup (cgroup.kill
 *   on v2); if P's thread dies, PDEATHSIG kills C1 and with it the
 *   namespace.
 *
 * The children never allocate and never call glibc functions that keep
 * process-wide state (no malloc, stdio, set*id wrappers): they are raw
 * clones of a multithreaded process.  Everything they need is prepared in
 * P in struct plan before the first clone.  Setup failures are reported
 * on a SOCK_SEQPACKET control socket (zproto.h) as IPD_ZPROTO_CTL_ERROR
 * and the program is never executed; the same socket carries the output
 * directory's fd and the final wait status.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/capability.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <linux/securebits.h>
#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../common/util.h"
#include "sandbox_internal.h"

#define SETUP_FAIL_EXIT 121

static const char etc_hosts[] = "127.0.0.1\tlocalhost\n"
                                "::1\tlocalhost ip6-localhost\n"
                                "127.0.1.1\tsandbox\n";
static const char etc_nsswitch[] = "passwd: files\ngroup: files\n"
                                   "shadow: files\nhosts: files\n";

/* ---------------------------------------------------------------------
 * Child side: async-signal-safe helpers only.
 */

static size_t s_append(char *dst, size_t pos, size_t cap, const char *s)
{
    while (s && *s && pos + 1 < cap)
        dst[pos++] = *s++;
    dst[pos] = '\0';
    return pos;
}

static void send_msg(int ctl, const struct ipd_zproto_ctl *m)
{
    ssize_t n;
    do {
        n = send(ctl, m, sizeof *m, MSG_NOSIGNAL);
    } while (n < 0 && errno == EINTR);
}

/* Report a failed setup step and exit: the program never runs. */
IPD_NORETURN static void fail(const struct plan *pl, const char *step,
                              const char *arg, int err)
{
    struct ipd_zproto_ctl m;
    size_t pos = 0;
    const char *name = err ? strerrorname_np(err) : NULL;

    memset(&m, 0, sizeof m);
    m.kind = IPD_ZPROTO_CTL_ERROR;
    pos = s_append(m.text, pos, sizeof m.text, step);
    if (arg) {
        pos = s_append(m.text, pos, sizeof m.text, " ");
        pos = s_append(m.text, pos, sizeof m.text, arg);
    }
    if (err) {
        pos = s_append(m.text, pos, sizeof m.text, ": ");
        (void)s_append(m.text, pos, sizeof m.text, name ? name : "error");
    }
    send_msg(pl->ctl, &m);
    _exit(SETUP_FAIL_EXIT);
}

static int write_path(const char *path, const char *s, int flags)
{
    int fd = open(path, O_WRONLY | O_CLOEXEC | flags, 0644);
    int err = 0;

    if (fd < 0)
        return errno;
    if (ipd_write_all(fd, s, strlen(s)))
        err = errno ? errno : EIO;
    close(fd);
    return err;
}

/* Reset what a raw clone inherits from P: handlers and the mask. */
static void reset_signals(void)
{
    struct sigaction sa;
    sigset_t none;

    memset(&sa, 0, sizeof sa);
    sa.sa_handler = SIG_DFL;
    for (int sig = 1; sig < NSIG; sig++) {
        if (sig != SIGKILL && sig != SIGSTOP)
            (void)sigaction(sig, &sa, NULL);
    }
    sigemptyset(&none);
    (void)sigprocmask(SIG_SETMASK, &none, NULL);
}

/* Close every fd >= 3 except those in keep[]. */
static void close_except(const int *keep, size_t n)
{
    unsigned lo = 3;

    for (;;) {
        unsigned next = ~0u;
        for (size_t i = 0; i < n; i++) {
            if (keep[i] >= 0 && (unsigned)keep[i] >= lo &&
                (unsigned)keep[i] < next)
                next = (unsigned)keep[i];
        }
        if (next == ~0u) {
            (void)syscall(SYS_close_range, lo, ~0u, 0);
            return;
        }
        if (next > lo)
            (void)syscall(SYS_close_range, lo, next - 1, 0);
        lo = next + 1;
    }
}

/* mkdir -p for the components of path below /newroot. */
static int mkdir_parents(const char *path)
{
    char buf[PATH_MAX];
    size_t len = strlen(path);

    if (len >= sizeof buf)
        return ENAMETOOLONG;
    memcpy(buf, path, len + 1);
    for (size_t i = 1; i < len; i++) {
        if (buf[i] != '/')
            continue;
        buf[i] = '\0';
        if (mkdir(buf, 0755) != 0 && errno != EEXIST)
            return errno;
        buf[i] = '/';
    }
    return 0;
}

static void lock_mount(const struct plan *pl, const char *path, uint64_t attrs,
                       bool recursive)
{
    struct mount_attr attr;

    memset(&attr, 0, sizeof attr);
    attr.attr_set = attrs;
    if (mount_setattr(AT_FDCWD, path, recursive ? AT_RECURSIVE : 0, &attr,
                      sizeof attr) != 0)
        fail(pl, "mount_setattr", path, errno);
}

static void bind_one(const struct plan *pl, const struct plan_mount *m)
{
    int err = mkdir_parents(m->dst);

    if (err)
        fail(pl, "mkdir", m->dst, err);
    if (m->is_link) {
        if (symlink(m->link, m->dst) != 0)
            fail(pl, "symlink", m->dst, errno);
        return;
    }
    if (m->is_dir) {
        if (mkdir(m->dst, 0755) != 0 && errno != EEXIST)
            fail(pl, "mkdir", m->dst, errno);
    } else {
        int fd = open(m->dst, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
        if (fd < 0)
            fail(pl, "create", m->dst, errno);
        close(fd);
    }
    if (m->tree_fd >= 0) {
        /* P's detached copy: nothing above the source is walked here,
         * where the fs ids are already the sandbox's. */
        if (move_mount(m->tree_fd, "", AT_FDCWD, m->dst,
                       MOVE_MOUNT_F_EMPTY_PATH) != 0)
            fail(pl, "move_mount", m->src, errno);
        close(m->tree_fd);
    } else if (mount(m->src, m->dst, NULL, MS_BIND | MS_REC, NULL) != 0) {
        fail(pl, "bind", m->src, errno);
    }
    /* Right after the bind, so a later mount point below a read-only
     * bind fails instead of creating directories on the host. */
    lock_mount(pl, m->dst,
               MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV |
                   (m->writable ? 0 : MOUNT_ATTR_RDONLY),
               true);
}

static void make_dev(const struct plan *pl)
{
    static const char *const nodes[] = {"null", "zero", "urandom"};
    static const char *const links[][2] = {
        {"/proc/self/fd", "/newroot/dev/fd"},
        {"/proc/self/fd/0", "/newroot/dev/stdin"},
        {"/proc/self/fd/1", "/newroot/dev/stdout"},
        {"/proc/self/fd/2", "/newroot/dev/stderr"},
        {"/tmp", "/newroot/dev/shm"}, /* per-run, inside the /tmp limit */
    };
    char src[64], dst[64];

    for (size_t i = 0; i < IPD_ARRAY_LEN(nodes); i++) {
        int fd;
        size_t n = s_append(src, 0, sizeof src, "/oldroot/dev/");
        (void)s_append(src, n, sizeof src, nodes[i]);
        n = s_append(dst, 0, sizeof dst, "/newroot/dev/");
        (void)s_append(dst, n, sizeof dst, nodes[i]);
        fd = open(dst, O_WRONLY | O_CREAT | O_CLOEXEC, 0666);
        if (fd < 0)
            fail(pl, "create", dst, errno);
        close(fd);
        if (mount(src, dst, NULL, MS_BIND, NULL) != 0)
            fail(pl, "bind", src, errno);
        lock_mount(pl, dst, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NOEXEC, false);
    }
    for (size_t i = 0; i < IPD_ARRAY_LEN(links); i++) {
        if (symlink(links[i][0], links[i][1]) != 0)
            fail(pl, "symlink", links[i][1], errno);
    }
}

static void make_etc(const struct plan *pl)
{
    static const char *const names[] = {
        "/newroot/etc/passwd", "/newroot/etc/group", "/newroot/etc/hosts",
        "/newroot/etc/nsswitch.conf", "/newroot/etc/hostname"};
    const char *contents[] = {pl->passwd, pl->group, etc_hosts, etc_nsswitch,
                              "sandbox\n"};

    for (size_t i = 0; i < IPD_ARRAY_LEN(names); i++) {
        int err = write_path(names[i], contents[i], O_CREAT | O_EXCL);
        if (err)
            fail(pl, "write", names[i], err);
    }
}

/* Send fd to P with a message of kind (IPD_ZPROTO_CTL_OUTDIR,
 * IPD_ZPROTO_CTL_EGRESS). */
static void send_fd(const struct plan *pl, uint32_t kind, int fd,
                    const char *what)
{
    struct ipd_zproto_ctl m;

    memset(&m, 0, sizeof m);
    m.kind = kind;
    if (ipd__fdpass_send(pl->ctl, &m, sizeof m, &fd, 1) != (ssize_t)sizeof m)
        fail(pl, "sendmsg", what, errno);
}

static void send_outdir(const struct plan *pl, int fd)
{
    send_fd(pl, IPD_ZPROTO_CTL_OUTDIR, fd, "output dir");
}

/* A networked run: its own network namespace gets its loopback up, and a
 * socket listening on 127.0.0.1:IPD_SANDBOX_EGRESS_PORT there goes to P,
 * whose caller relays what it accepts (the run's only way out).  Made
 * here, before the program exists and while C1 still has CAP_NET_ADMIN
 * over the namespace (its user namespace owns it), so the program can
 * never race its creation or take the port first. */
static void egress_listen(const struct plan *pl)
{
    struct ifreq ifr;
    struct sockaddr_in sa;
    int fd;

    if (!pl->egress)
        return;
    fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        fail(pl, "socket", "lo", errno);
    memset(&ifr, 0, sizeof ifr);
    (void)s_append(ifr.ifr_name, 0, sizeof ifr.ifr_name, "lo");
    if (ioctl(fd, SIOCGIFFLAGS, &ifr) != 0)
        fail(pl, "SIOCGIFFLAGS", "lo", errno);
    ifr.ifr_flags = (short)(ifr.ifr_flags | IFF_UP);
    if (ioctl(fd, SIOCSIFFLAGS, &ifr) != 0)
        fail(pl, "SIOCSIFFLAGS", "lo", errno);
    close(fd);
    fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        fail(pl, "socket", "egress", errno);
    memset(&sa, 0, sizeof sa);
    sa.sin_family = AF_INET;
    sa.sin_port = htons(IPD_SANDBOX_EGRESS_PORT);
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(fd, (struct sockaddr *)&sa, sizeof sa) != 0)
        fail(pl, "bind", "egress", errno);
    if (listen(fd, 64) != 0)
        fail(pl, "listen", "egress", errno);
    send_fd(pl, IPD_ZPROTO_CTL_EGRESS, fd, "egress");
    close(fd);
}

/* The namespace's own ucount limits (the run's /proc/sys/user, writable
 * while C1 has its capabilities there): a few inotify instances and
 * watches, not the host user's default budget.  A kernel without inotify
 * has no such files. */
static void lower_ns_limits(const struct plan *pl)
{
    static const char *const files[][2] = {
        {"/newroot/proc/sys/user/max_inotify_instances", "16"},
        {"/newroot/proc/sys/user/max_inotify_watches", "1024"},
    };

    for (size_t i = 0; i < IPD_ARRAY_LEN(files); i++) {
        int err = write_path(files[i][0], files[i][1], 0);
        if (err && err != ENOENT)
            fail(pl, "write", files[i][0], err);
    }
}

/* The root: a tmpfs staged over /tmp (bubblewrap's trick), pivoted into
 * so the host tree is reachable at /oldroot while binding, then a second
 * tmpfs at /newroot becomes the final root and /oldroot is detached. */
static void build_root(const struct plan *pl)
{
    int outfd;

    if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0)
        fail(pl, "make / private", NULL, errno);
    if (mount("tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV,
              "mode=0700,size=64k,nr_inodes=64") != 0)
        fail(pl, "mount staging tmpfs", NULL, errno);
    if (chdir("/tmp") != 0)
        fail(pl, "chdir", "/tmp", errno);
    if (mkdir("newroot", 0755) != 0 || mkdir("oldroot", 0755) != 0)
        fail(pl, "mkdir", "staging", errno);
    if (syscall(SYS_pivot_root, ".", "oldroot") != 0)
        fail(pl, "pivot_root", "staging", errno);
    if (chdir("/") != 0)
        fail(pl, "chdir", "/", errno);
    if (mount("tmpfs", "/newroot", "tmpfs", MS_NOSUID | MS_NODEV,
              "mode=0755,size=1m,nr_inodes=1024") != 0)
        fail(pl, "mount root tmpfs", NULL, errno);
    if (mkdir("/newroot/etc", 0755) != 0 || mkdir("/newroot/dev", 0755) != 0 ||
        mkdir("/newroot/proc", 0555) != 0 || mkdir("/newroot/tmp", 0755) != 0 ||
        mkdir("/newroot/mnt", 0755) != 0 ||
        mkdir("/newroot/mnt/output", 0755) != 0)
        fail(pl, "mkdir", "root skeleton", errno);
    make_etc(pl);
    make_dev(pl);
    for (size_t i = 0; i < pl->n_mounts; i++)
        bind_one(pl, &pl->mounts[i]);
    if (mount("tmpfs", "/newroot/tmp", "tmpfs", MS_NOSUID | MS_NODEV,
              pl->tmp_opts) != 0)
        fail(pl, "mount /tmp", pl->tmp_opts, errno);
    if (mount("tmpfs", "/newroot/mnt/output", "tmpfs", MS_NOSUID | MS_NODEV,
              pl->out_opts) != 0)
        fail(pl, "mount /mnt/output", pl->out_opts, errno);
    outfd = open("/newroot/mnt/output", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (outfd < 0)
        fail(pl, "open", "/mnt/output", errno);
    send_outdir(pl, outfd);
    close(outfd);
    /* Before /oldroot goes: the kernel lets a user namespace mount proc
     * only while a fully visible proc is mounted in it. */
    if (mount("proc", "/newroot/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC,
              NULL) != 0)
        fail(pl, "mount", "/proc", errno);
    lower_ns_limits(pl);
    if (chdir("/newroot") != 0)
        fail(pl, "chdir", "/newroot", errno);
    if (syscall(SYS_pivot_root, ".", ".") != 0)
        fail(pl, "pivot_root", "/newroot", errno);
    if (umount2(".", MNT_DETACH) != 0)
        fail(pl, "umount", "old root", errno);
    if (chdir("/") != 0)
        fail(pl, "chdir", "/", errno);
    if (mount(NULL, "/", NULL,
              MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV,
              NULL) != 0)
        fail(pl, "remount / read-only", NULL, errno);
}

static void drop_privileges(const struct plan *pl)
{
    struct __user_cap_header_struct hdr = {_LINUX_CAPABILITY_VERSION_3, 0};
    struct __user_cap_data_struct data[2];

    if (setrlimit(RLIMIT_CPU, &pl->rl_cpu) != 0 ||
        setrlimit(RLIMIT_FSIZE, &pl->rl_fsize) != 0 ||
        setrlimit(RLIMIT_NOFILE, &pl->rl_nofile) != 0 ||
        /* 1, not 0: a core_pattern that pipes to a helper (systemd-
         * coredump, apport) ignores RLIMIT_CORE except for the value 1,
         * which the kernel reserves to skip the dump (fs/coredump.c);
         * for a file pattern 1 byte is under the minimum dump, so no
         * core is ever written.  The hard limit keeps it there. */
        setrlimit(RLIMIT_CORE, &(struct rlimit){1, 1}) != 0)
        fail(pl, "setrlimit", NULL, errno);
    for (int cap = 0; cap <= pl->st->cap_last; cap++) {
        if (prctl(PR_CAPBSET_DROP, (unsigned long)cap, 0, 0, 0) != 0)
            fail(pl, "drop bounding set", NULL, errno);
    }
    if (prctl(PR_SET_SECUREBITS,
              SECBIT_NOROOT | SECBIT_NOROOT_LOCKED | SECBIT_NO_SETUID_FIXUP |
                  SECBIT_NO_SETUID_FIXUP_LOCKED | SECBIT_KEEP_CAPS_LOCKED |
                  SECBIT_NO_CAP_AMBIENT_RAISE |
                  SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED,
              0, 0, 0) != 0)
        fail(pl, "securebits", NULL, errno);
    /* Raw syscalls: glibc's set*id wrappers signal every thread it knows
     * of, and this raw clone inherited P's thread list. */
    if (syscall(SYS_setresgid, pl->inner_gid, pl->inner_gid, pl->inner_gid) ||
        syscall(SYS_setresuid, pl->inner_uid, pl->inner_uid, pl->inner_uid))
        fail(pl, "setresuid", NULL, errno);
    memset(data, 0, sizeof data);
    if (syscall(SYS_capset, &hdr, data) != 0)
        fail(pl, "capset", NULL, errno);
    if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) != 0)
        fail(pl, "clear ambient caps", NULL, errno);
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0)
        fail(pl, "no_new_privs", NULL, errno);
    /* Non-dumpable: C1 holds a copy of P's memory; with no capabilities
     * left and this flag, /proc/1/mem and /proc/1/fd are closed to the
     * program even though it runs as the same uid. */
    if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0)
        fail(pl, "dumpable", NULL, errno);
}

static void load_seccomp(const struct plan *pl)
{
    struct sock_fprog prog;

    prog.len = pl->bpf->len;
    prog.filter = pl->bpf->filter;
    if (syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &prog) != 0)
        fail(pl, "seccomp", NULL, errno);
}

/* Raise fd to >= 4 so the dup2s onto 0..3 cannot clobber it. */
static int lift(const struct plan *pl, int fd)
{
    int nfd;

    if (fd < 0 || fd > 3)
        return fd;
    nfd = fcntl(fd, F_DUPFD_CLOEXEC, 4);
    if (nfd < 0)
        fail(pl, "dup", NULL, errno);
    return nfd;
}

IPD_NORETURN static void c2_main(struct plan *pl)
{
    int in = pl->in_r, out, err;

    if (setsid() < 0)
        fail(pl, "setsid", NULL, errno);
    pl->ctl = lift(pl, pl->ctl);
    out = lift(pl, pl->out_w);
    err = lift(pl, pl->err_w);
    in = lift(pl, in);
    pl->extra_fd = lift(pl, pl->extra_fd);
    if (in < 0) {
        in = open("/dev/null", O_RDONLY | O_CLOEXEC);
        if (in < 0)
            fail(pl, "open", "/dev/null", errno);
        in = lift(pl, in);
    }
    if (dup2(in, 0) < 0 || dup2(out, 1) < 0 || dup2(err, 2) < 0)
        fail(pl, "dup2", "stdio", errno);
    /* A zygote's command socket, or the run's call socket: fd 3, kept
     * across the exec. */
    if (pl->extra_fd >= 0 && dup2(pl->extra_fd, 3) != 3)
        fail(pl, "dup2", "fd 3", errno);
    {
        int keep[2] = {pl->ctl, pl->extra_fd >= 0 ? 3 : -1};
        close_except(keep, 2);
    }
    if (chdir(pl->cwd) != 0)
        fail(pl, "chdir", pl->cwd, errno);
    if (pl->dry_run)
        _exit(0);
    execve(pl->argv[0], pl->argv, pl->envp);
    fail(pl, "execve", pl->argv[0], errno);
}

/* C1 is a copy of P: its /proc/1/cmdline (world-readable in the
 * namespace) would show the service's command line.  Wipe the copy's
 * argv and environment areas. */
static void wipe_cmdline(const struct plan *pl)
{
    if (pl->st->arg_end > pl->st->arg_start)
        memset((void *)pl->st->arg_start, 0,
               pl->st->arg_end - pl->st->arg_start);
    if (pl->st->env_end > pl->st->env_start)
        memset((void *)pl->st->env_start, 0,
               pl->st->env_end - pl->st->env_start);
}

/* Init: reap everything until the program itself (c2) is gone, send P
 * its wait status and exit. */
IPD_NORETURN static void init_loop(const struct plan *pl, pid_t c2)
{
    struct ipd_zproto_ctl m;

    memset(&m, 0, sizeof m);
    m.kind = IPD_ZPROTO_CTL_STATUS;
    for (;;) {
        int status = 0;
        pid_t w = (pid_t)wait4(-1, &status, __WALL, NULL);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0)
            _exit(SETUP_FAIL_EXIT); /* cannot happen: c2 not yet reaped */
        if (w == c2) {
            m.status = status;
            break;
        }
    }
    (void)getrusage(RUSAGE_CHILDREN, &m.ru_all);
    send_msg(pl->ctl, &m);
    _exit(0); /* the kernel now kills the rest of the namespace */
}

IPD_NORETURN static void c1_main(struct plan *pl, int sync_r)
{
    pid_t c2;
    char byte = 0;
    ssize_t n;
    int keep[5 + IPD__SANDBOX_MAX_MOUNTS];
    size_t k = 0;

    /* Dies with P's thread (C1 is P's child).  A C0 already gone shows
     * as EOF on the sync pipe. */
    if (prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) != 0)
        _exit(SETUP_FAIL_EXIT);
    do {
        n = read(sync_r, &byte, 1);
    } while (n < 0 && errno == EINTR);
    if (n != 1)
        _exit(SETUP_FAIL_EXIT);
    close(sync_r);
    keep[k++] = pl->ctl;
    keep[k++] = pl->out_w;
    keep[k++] = pl->err_w;
    keep[k++] = pl->in_r;
    keep[k++] = pl->extra_fd;
    for (size_t i = 0; i < pl->n_mounts; i++)
        keep[k++] = pl->mounts[i].tree_fd;
    close_except(keep, k);
    /* C1 still runs as host root, which has no id in the namespace:
     * files it created would have no owner (EOVERFLOW).  Create them as
     * the inner user; capabilities in the namespace stay (uid 0 is not
     * mapped, so no setuid fixup applies). */
    if (syscall(SYS_setfsgid, pl->inner_gid) < 0 ||
        syscall(SYS_setfsuid, pl->inner_uid) < 0)
        fail(pl, "setfsuid", NULL, errno);

    wipe_cmdline(pl);
    egress_listen(pl);
    build_root(pl);
    if (sethostname("sandbox", 7) != 0)
        fail(pl, "sethostname", NULL, errno);
    drop_privileges(pl);
    load_seccomp(pl);
    /* PDEATHSIG was armed in time only if P is still there now: its end
     * of the control socket tells. */
    {
        struct pollfd pfd = {pl->ctl, POLLOUT, 0};
        if (poll(&pfd, 1, 0) != 1 || (pfd.revents & (POLLHUP | POLLERR)))
            _exit(SETUP_FAIL_EXIT);
    }

    c2 = (pid_t)syscall(SYS_clone, SIGCHLD, 0, 0, 0, 0);
    if (c2 < 0)
        fail(pl, "fork", NULL, errno);
    if (c2 == 0)
        c2_main(pl);
    close(pl->out_w);
    close(pl->err_w);
    if (pl->in_r >= 0)
        close(pl->in_r);
    if (pl->extra_fd >= 0)
        close(pl->extra_fd);

    init_loop(pl, c2);
}

static void write_maps(const struct plan *pl, pid_t c1)
{
    char path[64], num[16];
    int pos, err;
    static const char *const files[] = {"setgroups", "uid_map", "gid_map"};
    const char *contents[] = {"deny", pl->uid_map, pl->gid_map};

    /* pid as decimal without stdio */
    pos = (int)sizeof num - 1;
    num[pos] = '\0';
    for (unsigned v = (unsigned)c1; v || pos == (int)sizeof num - 1; v /= 10)
        num[--pos] = (char)('0' + v % 10);
    for (size_t i = 0; i < IPD_ARRAY_LEN(files); i++) {
        size_t n = s_append(path, 0, sizeof path, "/proc/");
        n = s_append(path, n, sizeof path, num + pos);
        n = s_append(path, n, sizeof path, "/");
        (void)s_append(path, n, sizeof path, files[i]);
        err = write_path(path, contents[i], 0);
        if (err) {
            kill(c1, SIGKILL);
            fail(pl, "write", files[i], err);
        }
    }
}

/*
 * The kernel charges what a user namespace's processes use of per-user
 * budgets (pending signals, mqueue bytes, inotify instances, processes)
 * to the namespace's owner as well: the effective uid of its creator.
 * As root, C0 therefore creates it with the run's host ids as its
 * effective ids (the real and saved ids stay 0, so it can switch back),
 * and takes root back afterwards (its effective capabilities return with
 * euid 0) to write the maps, which a non-root writer could not do for
 * ids other than its own.  enter: before the clone; else after it.
 */
static void become_creator(const struct plan *pl, bool enter)
{
    long gid = enter ? (long)pl->creator_gid : 0;
    long uid = enter ? (long)pl->creator_uid : 0;

    if (!pl->creator_uid)
        return;
    /* uid last on the way in (setresgid needs euid 0), first on the way
     * out; raw syscalls: glibc's wrappers signal P's other threads. */
    if (enter && syscall(SYS_setresgid, -1L, gid, -1L) != 0)
        fail(pl, "setresgid", "creator", errno);
    if (syscall(SYS_setresuid, -1L, uid, -1L) != 0)
        fail(pl, "setresuid", "creator", errno);
    if (!enter && syscall(SYS_setresgid, -1L, gid, -1L) != 0)
        fail(pl, "setresgid", "creator", errno);
}

IPD_NORETURN void ipd__sandbox_c0_main(struct plan *pl)
{
    int sync[2], keep[9 + IPD__SANDBOX_MAX_MOUNTS];
    pid_t c1;
    size_t k = 0;

    reset_signals();
    if (prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) != 0 ||
        getppid() != pl->parent_pid)
        _exit(SETUP_FAIL_EXIT);
    keep[k++] = pl->ctl;
    keep[k++] = pl->out_w;
    keep[k++] = pl->err_w;
    keep[k++] = pl->in_r;
    keep[k++] = pl->extra_fd;
    for (size_t i = 0; i < IPD_ARRAY_LEN(pl->procs_fd); i++)
        keep[k++] = pl->procs_fd[i];
    for (size_t i = 0; i < pl->n_mounts; i++)
        keep[k++] = pl->mounts[i].tree_fd;
    close_except(keep, k);
    for (size_t i = 0; i < IPD_ARRAY_LEN(pl->procs_fd); i++) {
        if (pl->procs_fd[i] < 0)
            continue;
        if (write(pl->procs_fd[i], "0", 1) != 1)
            fail(pl, "join cgroup", NULL, errno);
        close(pl->procs_fd[i]);
        pl->procs_fd[i] = -1;
    }
    if (syscall(SYS_setgroups, 0, NULL) != 0)
        fail(pl, "setgroups", NULL, errno);
    /* Before the clone: the new user namespace keeps them as the most
     * its owner may be charged through it. */
    if (setrlimit(RLIMIT_SIGPENDING, &pl->rl_sigpending) != 0 ||
        setrlimit(RLIMIT_MSGQUEUE, &pl->rl_msgqueue) != 0)
        fail(pl, "setrlimit", "sigpending/msgqueue", errno);
    if (pipe2(sync, O_CLOEXEC) != 0)
        fail(pl, "pipe", NULL, errno);
    become_creator(pl, true);
    /* CLONE_PARENT: the exit signal is C0's own, SIGCHLD. */
    c1 = (pid_t)syscall(SYS_clone, pl->ns_flags | CLONE_PARENT, 0, 0, 0, 0);
    if (c1 < 0)
        fail(pl, "clone namespaces", NULL, errno);
    if (c1 == 0) {
        close(sync[1]);
        c1_main(pl, sync[0]);
    }
    become_creator(pl, false);
    close(sync[0]);
    {
        struct ipd_zproto_ctl m;
        memset(&m, 0, sizeof m);
        m.kind = IPD_ZPROTO_CTL_INIT;
        m.status = c1;
        send_msg(pl->ctl, &m);
    }
    write_maps(pl, c1);
    if (write(sync[1], "x", 1) != 1) {
        kill(c1, SIGKILL);
        fail(pl, "release init", NULL, errno);
    }
    _exit(0);
}
