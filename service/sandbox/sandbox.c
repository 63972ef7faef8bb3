/*
 * sandbox.c - the process tree, namespaces, root filesystem, credentials,
 * limits and the supervising loop of one sandboxed run.
 *
 * Process tree (P = the calling thread):
 *
 *   P --clone3(CLONE_PIDFD|CLONE_INTO_CGROUP)--> C0  host namespaces, root
 *        C0 joins the run's v1 cgroups, drops supplementary groups (a root
 *        caller's group 0 would otherwise stay effective inside: setgroups
 *        is denied there, so they can't be dropped later), then
 *   C0 --clone(CLONE_PARENT|NEWUSER|NEWPID|NEWNS|NEWNET|NEWIPC|NEWUTS|
 *              NEWCGROUP)--> C1, a child of P, not of C0
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
 * on a SOCK_SEQPACKET control socket as MSG_ERROR and the program is
 * never executed; the same socket carries the output directory's fd and
 * the final wait status.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/capability.h>
#include <linux/filter.h>
#include <linux/openat2.h>
#include <linux/sched.h>
#include <linux/seccomp.h>
#include <linux/securebits.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../common/log.h"
#include "sandbox_internal.h"
#include "../common/util.h"

#define DEFAULT_HOST_ID 200000
#define DEFAULT_INNER_ID 1000
#define MAX_MOUNTS 64
#define MAX_ENV 128
#define SETUP_FAIL_EXIT 121
#define KILL_GRACE_MS 5000 /* after SIGKILL, the tree must be gone */

struct ipd_sandbox_state {
    struct ipd__sandbox_bpf bpf_nonet; /* network denied */
    struct ipd__sandbox_bpf bpf_net;   /* network allowed */
    struct ipd__cgroups *cg;
    int cap_last;                      /* /proc/sys/kernel/cap_last_cap */
    uintptr_t arg_start, arg_end;      /* P's argv and environment areas, */
    uintptr_t env_start, env_end;      /* wiped in C1 (/proc/1/cmdline) */
    bool cgroupns;
};

enum msg_kind { MSG_ERROR = 1, MSG_OUTDIR = 2, MSG_STATUS = 3, MSG_INIT = 4 };

struct ctl_msg {
    uint32_t kind;
    int32_t status;       /* MSG_STATUS: C2's wait status; MSG_INIT:
                             C1's host pid */
    struct rusage ru_all; /* MSG_STATUS: C1's RUSAGE_CHILDREN */
    char text[200];       /* MSG_ERROR */
};

struct plan_mount {
    char src[PATH_MAX];  /* "/oldroot" + realpath(host_path) */
    char dst[PATH_MAX];  /* "/newroot" + sandbox_path */
    char link[PATH_MAX]; /* target when host_path is a symlink */
    bool is_link, is_dir, writable;
};

/* Everything the children need, prepared by P. */
struct plan {
    const struct ipd_sandbox_state *st;
    const struct ipd__sandbox_bpf *bpf;
    struct plan_mount *mounts;
    size_t n_mounts;
    char *const *argv;
    char **envp;
    const char *cwd;
    char uid_map[64], gid_map[64];
    uid_t inner_uid;
    gid_t inner_gid;
    char tmp_opts[160], out_opts[160];
    char passwd[512], group[256];
    struct rlimit rl_cpu, rl_fsize, rl_nofile;
    unsigned long ns_flags;
    pid_t parent_pid;
    bool dry_run; /* probe: full setup, then C2 exits 0 instead of exec */
    /* descriptors (child ends) */
    int ctl, out_w, err_w, in_r;
    int procs_fd[3];
};

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

static void send_msg(int ctl, const struct ctl_msg *m)
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
    struct ctl_msg m;
    size_t pos = 0;
    const char *name = err ? strerrorname_np(err) : NULL;

    memset(&m, 0, sizeof m);
    m.kind = MSG_ERROR;
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

static void lock_mount(const struct plan *pl, const char *path,
                       uint64_t attrs, bool recursive)
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
    if (mount(m->src, m->dst, NULL, MS_BIND | MS_REC, NULL) != 0)
        fail(pl, "bind", m->src, errno);
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
    static const char *const names[] = {"/newroot/etc/passwd",
                                        "/newroot/etc/group",
                                        "/newroot/etc/hosts",
                                        "/newroot/etc/nsswitch.conf",
                                        "/newroot/etc/hostname"};
    const char *contents[] = {pl->passwd, pl->group, etc_hosts, etc_nsswitch,
                              "sandbox\n"};

    for (size_t i = 0; i < IPD_ARRAY_LEN(names); i++) {
        int err = write_path(names[i], contents[i], O_CREAT | O_EXCL);
        if (err)
            fail(pl, "write", names[i], err);
    }
}

static void send_outdir(const struct plan *pl, int fd)
{
    struct ctl_msg m;
    struct iovec iov = {&m, sizeof m};
    union {
        char buf[CMSG_SPACE(sizeof(int))];
        struct cmsghdr align;
    } u;
    struct msghdr mh;
    struct cmsghdr *c;

    memset(&m, 0, sizeof m);
    memset(&u, 0, sizeof u);
    memset(&mh, 0, sizeof mh);
    m.kind = MSG_OUTDIR;
    mh.msg_iov = &iov;
    mh.msg_iovlen = 1;
    mh.msg_control = u.buf;
    mh.msg_controllen = sizeof u.buf;
    c = CMSG_FIRSTHDR(&mh);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(c), &fd, sizeof fd);
    if (sendmsg(pl->ctl, &mh, MSG_NOSIGNAL) != (ssize_t)sizeof m)
        fail(pl, "sendmsg", "output dir", errno);
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
    if (mount("proc", "/newroot/proc", "proc",
              MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) != 0)
        fail(pl, "mount", "/proc", errno);
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
        setrlimit(RLIMIT_CORE, &(struct rlimit){0, 0}) != 0)
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

/* Raise fd to >= 3 so the dup2s onto 0..2 cannot clobber it. */
static int lift(const struct plan *pl, int fd)
{
    int nfd;

    if (fd < 0 || fd > 2)
        return fd;
    nfd = fcntl(fd, F_DUPFD_CLOEXEC, 3);
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
    if (in < 0) {
        in = open("/dev/null", O_RDONLY | O_CLOEXEC);
        if (in < 0)
            fail(pl, "open", "/dev/null", errno);
        in = lift(pl, in);
    }
    if (dup2(in, 0) < 0 || dup2(out, 1) < 0 || dup2(err, 2) < 0)
        fail(pl, "dup2", "stdio", errno);
    close_except(&pl->ctl, 1);
    if (chdir(pl->cwd) != 0)
        fail(pl, "chdir", pl->cwd, errno);
    if (pl->dry_run)
        _exit(0);
    execve(pl->argv[0], pl->argv, pl->envp);
    fail(pl, "execve", pl->argv[0], errno);
}

IPD_NORETURN static void c1_main(struct plan *pl, int sync_r)
{
    struct ctl_msg m;
    pid_t c2;
    char byte = 0;
    ssize_t n;
    int keep[5];

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
    keep[0] = pl->ctl;
    keep[1] = pl->out_w;
    keep[2] = pl->err_w;
    keep[3] = pl->in_r;
    keep[4] = -1;
    close_except(keep, IPD_ARRAY_LEN(keep));
    /* C1 still runs as host root, which has no id in the namespace:
     * files it created would have no owner (EOVERFLOW).  Create them as
     * the inner user; capabilities in the namespace stay (uid 0 is not
     * mapped, so no setuid fixup applies). */
    if (syscall(SYS_setfsgid, pl->inner_gid) < 0 ||
        syscall(SYS_setfsuid, pl->inner_uid) < 0)
        fail(pl, "setfsuid", NULL, errno);

    /* C1 is a copy of P: its /proc/1/cmdline (world-readable in the
     * namespace) would show the service's command line.  Wipe the copy's
     * argv and environment areas. */
    if (pl->st->arg_end > pl->st->arg_start)
        memset((void *)pl->st->arg_start, 0,
               pl->st->arg_end - pl->st->arg_start);
    if (pl->st->env_end > pl->st->env_start)
        memset((void *)pl->st->env_start, 0,
               pl->st->env_end - pl->st->env_start);

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

    /* Init: reap everything until the program itself is gone. */
    memset(&m, 0, sizeof m);
    m.kind = MSG_STATUS;
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

IPD_NORETURN static void c0_main(struct plan *pl)
{
    int sync[2], keep[8];
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
    for (size_t i = 0; i < IPD_ARRAY_LEN(pl->procs_fd); i++)
        keep[k++] = pl->procs_fd[i];
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
    if (pipe2(sync, O_CLOEXEC) != 0)
        fail(pl, "pipe", NULL, errno);
    /* CLONE_PARENT: the exit signal is C0's own, SIGCHLD. */
    c1 = (pid_t)syscall(SYS_clone, pl->ns_flags | CLONE_PARENT, 0, 0, 0, 0);
    if (c1 < 0)
        fail(pl, "clone namespaces", NULL, errno);
    if (c1 == 0) {
        close(sync[1]);
        c1_main(pl, sync[0]);
    }
    close(sync[0]);
    {
        struct ctl_msg m;
        memset(&m, 0, sizeof m);
        m.kind = MSG_INIT;
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

/* ---------------------------------------------------------------------
 * Parent side.
 */

void ipd_sandbox_policy_default(struct ipd_sandbox_policy *p)
{
    memset(p, 0, sizeof *p);
    p->name = "default";
    p->wall_timeout_ms = 30000;
    p->cpu_seconds = 30;
    p->memory_bytes = 512LL << 20;
    p->max_processes = 64;
    p->output_cap_bytes = 100 << 10;
    p->tmp_bytes = 64LL << 20;
    p->tmp_inodes = 4096;
    p->output_dir_bytes = 64LL << 20;
    p->output_dir_inodes = 4096;
    p->fsize_bytes = 64LL << 20;
    p->nofile = 256;
    p->network = false;
}

/* Fill zero fields of *p from the defaults. */
static void policy_complete(const struct ipd_sandbox_policy *in,
                            struct ipd_sandbox_policy *p)
{
    struct ipd_sandbox_policy d;

    ipd_sandbox_policy_default(&d);
    *p = *in;
    if (!p->name)
        p->name = d.name;
#define DEF(f)                                                                 \
    if (p->f <= 0)                                                             \
    p->f = d.f
    DEF(wall_timeout_ms);
    DEF(cpu_seconds);
    DEF(memory_bytes);
    DEF(max_processes);
    DEF(tmp_bytes);
    DEF(tmp_inodes);
    DEF(output_dir_bytes);
    DEF(output_dir_inodes);
    DEF(fsize_bytes);
    DEF(nofile);
#undef DEF
    if (!p->output_cap_bytes)
        p->output_cap_bytes = d.output_cap_bytes;
}

static bool sandbox_path_ok(const char *p)
{
    static const char *const reserved[] = {"/", "/proc", "/dev", "/tmp",
                                           "/mnt/output", "/etc/passwd",
                                           "/etc/group", "/etc/hosts",
                                           "/etc/nsswitch.conf",
                                           "/etc/hostname"};
    size_t len;

    if (!p || p[0] != '/')
        return false;
    len = strlen(p);
    if (len + sizeof "/newroot" > PATH_MAX || strstr(p, "/../") ||
        strstr(p, "/./") || strstr(p, "//") ||
        (len >= 3 && strcmp(p + len - 3, "/..") == 0) ||
        (len >= 2 && strcmp(p + len - 2, "/.") == 0) || p[len - 1] == '/')
        return false;
    for (size_t i = 0; i < IPD_ARRAY_LEN(reserved); i++) {
        size_t rl = strlen(reserved[i]);
        if (strcmp(p, reserved[i]) == 0)
            return false;
        /* nothing may be mounted inside the special trees */
        if (rl > 1 && strncmp(p, reserved[i], rl) == 0 && p[rl] == '/')
            return false;
    }
    return true;
}

static int cmp_mount(const void *a, const void *b)
{
    const struct plan_mount *x = a, *y = b;
    return strcmp(x->dst, y->dst);
}

static enum ipd_err plan_mounts(struct plan *pl,
                                const struct ipd_sandbox_spec *spec,
                                char *err, size_t errlen)
{
    enum ipd_err rc = IPD_OK;

    if (spec->n_mounts > MAX_MOUNTS) {
        snprintf(err, errlen, "too many mounts (%zu > %d)", spec->n_mounts,
                 MAX_MOUNTS);
        return IPD_ERR_INVALID;
    }
    pl->mounts = ipd_xcalloc(spec->n_mounts ? spec->n_mounts : 1,
                             sizeof *pl->mounts);
    pl->n_mounts = spec->n_mounts;
    for (size_t i = 0; i < spec->n_mounts; i++) {
        const struct ipd_sandbox_mount *m = &spec->mounts[i];
        struct plan_mount *pm = &pl->mounts[i];
        char real[PATH_MAX];
        struct stat sb;

        if (!m->host_path || m->host_path[0] != '/' ||
            !sandbox_path_ok(m->sandbox_path)) {
            snprintf(err, errlen, "bad mount %s -> %s",
                     m->host_path ? m->host_path : "(null)",
                     m->sandbox_path ? m->sandbox_path : "(null)");
            rc = IPD_ERR_INVALID;
            goto out;
        }
        snprintf(pm->dst, sizeof pm->dst, "/newroot%s", m->sandbox_path);
        pm->writable = m->writable;
        if (lstat(m->host_path, &sb) != 0) {
            snprintf(err, errlen, "mount source %s: %s", m->host_path,
                     strerror(errno));
            rc = IPD_ERR_INVALID;
            goto out;
        }
        if (S_ISLNK(sb.st_mode)) {
            ssize_t n = readlink(m->host_path, pm->link, sizeof pm->link - 1);
            if (n < 0) {
                snprintf(err, errlen, "readlink %s: %s", m->host_path,
                         strerror(errno));
                rc = IPD_ERR_INVALID;
                goto out;
            }
            pm->link[n] = '\0';
            pm->is_link = true;
            continue;
        }
        if (!realpath(m->host_path, real) || stat(real, &sb) != 0) {
            snprintf(err, errlen, "mount source %s: %s", m->host_path,
                     strerror(errno));
            rc = IPD_ERR_INVALID;
            goto out;
        }
        pm->is_dir = S_ISDIR(sb.st_mode);
        if (!pm->is_dir && !S_ISREG(sb.st_mode)) {
            snprintf(err, errlen, "mount source %s: not a file or directory",
                     m->host_path);
            rc = IPD_ERR_INVALID;
            goto out;
        }
        if ((size_t)snprintf(pm->src, sizeof pm->src, "/oldroot%s", real) >=
            sizeof pm->src) {
            snprintf(err, errlen, "mount source %s: path too long",
                     m->host_path);
            rc = IPD_ERR_INVALID;
            goto out;
        }
    }
    /* Parents before children: "/usr" sorts before "/usr/lib". */
    qsort(pl->mounts, pl->n_mounts, sizeof *pl->mounts, cmp_mount);
out:
    return rc;
}

static const char *const default_env[] = {
    "PATH=/usr/local/bin:/usr/bin:/bin",
    "HOME=/tmp",
    "LANG=C.UTF-8",
    "TMPDIR=/tmp",
    "PYTHONUNBUFFERED=1",
    "PYTHONDONTWRITEBYTECODE=1",
    "OPENBLAS_NUM_THREADS=1",
    "OMP_NUM_THREADS=1",
    "MKL_NUM_THREADS=1",
    "NUMEXPR_NUM_THREADS=1",
    "MPLBACKEND=Agg",
    "MPLCONFIGDIR=/tmp/matplotlib",
};

static bool same_key(const char *a, const char *b)
{
    const char *ea = strchr(a, '='), *eb = strchr(b, '=');
    return ea && eb && ea - a == eb - b &&
           memcmp(a, b, (size_t)(ea - a)) == 0;
}

/* envp: borrowed strings in an owned array (free() the array only). */
static enum ipd_err plan_env(struct plan *pl,
                             const struct ipd_sandbox_spec *spec, char *err,
                             size_t errlen)
{
    size_t n = 0, extra = 0;

    while (spec->env && spec->env[extra])
        extra++;
    if (extra > MAX_ENV) {
        snprintf(err, errlen, "too many environment variables");
        return IPD_ERR_INVALID;
    }
    pl->envp = ipd_xcalloc(IPD_ARRAY_LEN(default_env) + extra + 1,
                           sizeof *pl->envp);
    for (size_t i = 0; i < IPD_ARRAY_LEN(default_env); i++) {
        bool overridden = false;
        for (size_t j = 0; j < extra; j++)
            overridden = overridden || same_key(default_env[i], spec->env[j]);
        if (!overridden)
            pl->envp[n++] = (char *)(uintptr_t)default_env[i];
    }
    for (size_t j = 0; j < extra; j++) {
        if (!strchr(spec->env[j], '=') || spec->env[j][0] == '=') {
            snprintf(err, errlen, "bad environment entry");
            return IPD_ERR_INVALID;
        }
        pl->envp[n++] = (char *)(uintptr_t)spec->env[j];
    }
    return IPD_OK;
}

static void plan_release(struct plan *pl)
{
    free(pl->mounts);
    free(pl->envp);
    pl->mounts = NULL;
    pl->envp = NULL;
}

static enum ipd_err plan_build(struct plan *pl,
                               const struct ipd_sandbox_config *cfg,
                               const struct ipd_sandbox_policy *p,
                               const struct ipd_sandbox_spec *spec,
                               char *err, size_t errlen)
{
    enum ipd_err rc;
    const struct ipd_sandbox_state *st = cfg->state;

    memset(pl, 0, sizeof *pl);
    pl->ctl = pl->out_w = pl->err_w = pl->in_r = -1;
    for (size_t i = 0; i < IPD_ARRAY_LEN(pl->procs_fd); i++)
        pl->procs_fd[i] = -1;
    pl->st = st;
    pl->bpf = p->network ? &st->bpf_net : &st->bpf_nonet;
    pl->argv = (char *const *)(uintptr_t)spec->argv;
    pl->cwd = spec->cwd ? spec->cwd : "/mnt/output";
    pl->inner_uid = cfg->inner_uid;
    pl->inner_gid = cfg->inner_gid;
    snprintf(pl->uid_map, sizeof pl->uid_map, "%u %u 1\n",
             (unsigned)cfg->inner_uid, (unsigned)cfg->host_uid);
    snprintf(pl->gid_map, sizeof pl->gid_map, "%u %u 1\n",
             (unsigned)cfg->inner_gid, (unsigned)cfg->host_gid);
    snprintf(pl->tmp_opts, sizeof pl->tmp_opts,
             "mode=1777,size=%lld,nr_inodes=%lld", (long long)p->tmp_bytes,
             (long long)p->tmp_inodes);
    snprintf(pl->out_opts, sizeof pl->out_opts,
             "mode=0755,uid=%u,gid=%u,size=%lld,nr_inodes=%lld",
             (unsigned)cfg->inner_uid, (unsigned)cfg->inner_gid,
             (long long)p->output_dir_bytes, (long long)p->output_dir_inodes);
    snprintf(pl->passwd, sizeof pl->passwd,
             "root:x:0:0:root:/root:/usr/sbin/nologin\n"
             "sandbox:x:%u:%u:sandbox:/tmp:/usr/sbin/nologin\n"
             "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n",
             (unsigned)cfg->inner_uid, (unsigned)cfg->inner_gid);
    snprintf(pl->group, sizeof pl->group,
             "root:x:0:\nsandbox:x:%u:\nnogroup:x:65534:\n",
             (unsigned)cfg->inner_gid);
    /* RLIMIT_CPU: SIGXCPU at the soft limit, SIGKILL a second later. */
    pl->rl_cpu.rlim_cur = (rlim_t)p->cpu_seconds;
    pl->rl_cpu.rlim_max = (rlim_t)p->cpu_seconds + 1;
    pl->rl_fsize.rlim_cur = pl->rl_fsize.rlim_max = (rlim_t)p->fsize_bytes;
    pl->rl_nofile.rlim_cur = pl->rl_nofile.rlim_max = (rlim_t)p->nofile;
    pl->ns_flags = CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNS | CLONE_NEWIPC |
                   CLONE_NEWUTS | (p->network ? 0 : CLONE_NEWNET) |
                   (st->cgroupns ? CLONE_NEWCGROUP : 0);
    pl->parent_pid = getpid();
    rc = plan_mounts(pl, spec, err, errlen);
    if (rc)
        return rc;
    return plan_env(pl, spec, err, errlen);
}

static enum ipd_err validate(const struct ipd_sandbox_config *cfg,
                             const struct ipd_sandbox_policy *p,
                             const struct ipd_sandbox_spec *spec, char *err,
                             size_t errlen)
{
    if (!cfg->state) {
        snprintf(err, errlen, "sandbox not probed");
        return IPD_ERR_INTERNAL;
    }
    if (!spec->argv || !spec->argv[0] || spec->argv[0][0] != '/') {
        snprintf(err, errlen, "argv[0] must be an absolute path");
        return IPD_ERR_INVALID;
    }
    if (spec->cwd && spec->cwd[0] != '/') {
        snprintf(err, errlen, "cwd must be absolute");
        return IPD_ERR_INVALID;
    }
    if (p->cpu_seconds < 0 || p->memory_bytes < 0 || p->max_processes < 0 ||
        p->wall_timeout_ms < 0 || p->nofile < 0 || p->nofile > 1 << 20) {
        snprintf(err, errlen, "bad policy %s", p->name ? p->name : "");
        return IPD_ERR_INVALID;
    }
    return IPD_OK;
}

/* Supervision state of one run in P. */
struct run {
    struct ipd_sandbox_result *out;
    size_t cap;
    int out_r, err_r, in_w, ctl;
    int pidfd;    /* C0 */
    pid_t c1;     /* the namespace's init, P's child; 0 until known */
    int c1fd;     /* its pidfd */
    const unsigned char *in_data;
    size_t in_len, in_off;
    bool c0_done, c1_done, got_status, setup_error, timed_out, killed;
    int status;
    struct rusage ru_all; /* C1's report: its reaped descendants */
    struct rusage ru_c1;  /* wait4 on C1: the whole tree, even if killed */
};

static void drain(struct run *r, int *fd, struct ipd_buf *b, bool *trunc)
{
    char chunk[65536];
    /* A few reads per wakeup, so one chatty stream does not starve the
     * other or the deadline. */
    for (int i = 0; i < 16; i++) {
        ssize_t n = read(*fd, chunk, sizeof chunk);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno == EAGAIN)
            return;
        if (n <= 0) {
            close(*fd);
            *fd = -1;
            return;
        }
        size_t room = r->cap > b->len ? r->cap - b->len : 0;
        size_t take = (size_t)n < room ? (size_t)n : room;
        if (take && ipd_buf_add(b, chunk, take))
            take = 0;
        if (take < (size_t)n)
            *trunc = true; /* keep draining: never kill for printing */
    }
}

static void feed_stdin(struct run *r)
{
    while (r->in_off < r->in_len) {
        size_t len = r->in_len - r->in_off;
        ssize_t n = write(r->in_w, r->in_data + r->in_off,
                          len > 65536 ? 65536 : len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno == EAGAIN)
            return;
        if (n < 0)
            break; /* EPIPE: the program closed stdin */
        r->in_off += (size_t)n;
    }
    close(r->in_w);
    r->in_w = -1;
}

static void read_ctl(struct run *r)
{
    struct ctl_msg m;
    struct iovec iov = {&m, sizeof m};
    union {
        char buf[CMSG_SPACE(sizeof(int))];
        struct cmsghdr align;
    } u;
    struct msghdr mh;
    ssize_t n;

    memset(&mh, 0, sizeof mh);
    mh.msg_iov = &iov;
    mh.msg_iovlen = 1;
    mh.msg_control = u.buf;
    mh.msg_controllen = sizeof u.buf;
    n = recvmsg(r->ctl, &mh, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
    if (n < 0 && (errno == EINTR || errno == EAGAIN))
        return;
    if (n <= 0) {
        close(r->ctl);
        r->ctl = -1;
        return;
    }
    for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c)) {
        if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
            int fd;
            memcpy(&fd, CMSG_DATA(c), sizeof fd);
            if (m.kind == MSG_OUTDIR && r->out->output_dirfd < 0 &&
                (size_t)n == sizeof m)
                r->out->output_dirfd = fd;
            else
                close(fd);
        }
    }
    if ((size_t)n != sizeof m)
        return;
    if (m.kind == MSG_ERROR && !r->setup_error) {
        r->setup_error = true;
        m.text[sizeof m.text - 1] = '\0';
        snprintf(r->out->error, sizeof r->out->error, "sandbox setup: %s",
                 m.text);
    } else if (m.kind == MSG_INIT && r->c1 == 0 && m.status > 0) {
        /* C1 is our unreaped child: the pid cannot be recycled. */
        r->c1 = (pid_t)m.status;
        r->c1fd = (int)syscall(SYS_pidfd_open, r->c1, 0);
        if (r->c1fd < 0) {
            snprintf(r->out->error, sizeof r->out->error,
                     "pidfd_open: %s", strerror(errno));
            r->setup_error = true;
            kill(r->c1, SIGKILL);
        }
    } else if (m.kind == MSG_STATUS) {
        r->got_status = true;
        r->status = m.status;
        r->ru_all = m.ru_all;
    }
}

static void kill_tree(struct run *r, const struct ipd__cgroup_run *cgr)
{
    ipd__cgroup_run_kill(cgr);
    if (r->c1fd >= 0 && !r->c1_done)
        (void)syscall(SYS_pidfd_send_signal, r->c1fd, SIGKILL, NULL, 0);
    else if (r->c1 > 0 && !r->c1_done)
        kill(r->c1, SIGKILL);
    if (r->pidfd >= 0 && !r->c0_done)
        (void)syscall(SYS_pidfd_send_signal, r->pidfd, SIGKILL, NULL, 0);
    r->killed = true;
}

static void reap(struct run *r, bool block)
{
    int flags = __WALL | (block ? 0 : WNOHANG);

    if (!r->c0_done && r->pidfd >= 0) {
        siginfo_t si;
        memset(&si, 0, sizeof si);
        if (waitid((idtype_t)P_PIDFD, (id_t)r->pidfd, &si, WEXITED | flags) ==
                0 &&
            si.si_pid != 0)
            r->c0_done = true;
    }
    if (!r->c1_done && r->c1 > 0) {
        int st;
        if (wait4(r->c1, &st, flags, &r->ru_c1) == r->c1)
            r->c1_done = true;
    }
}

/* True while a process of ours may still write or must be reaped. */
static bool running(const struct run *r)
{
    return !r->c0_done || (r->c1 > 0 && !r->c1_done) || r->out_r >= 0 ||
           r->err_r >= 0 || r->ctl >= 0;
}

/* Poll until C0 and C1 are reaped and every pipe is at EOF; the deadline
 * kills the tree, after which everything must end within KILL_GRACE_MS. */
static enum ipd_err supervise(struct run *r, const struct ipd__cgroup_run *cgr,
                              int64_t start_ms, int64_t timeout_ms)
{
    int64_t deadline = start_ms + timeout_ms, hard = 0;

    while (running(r)) {
        struct pollfd pfd[6];
        nfds_t n = 0;
        int64_t now = ipd_mono_ms(), wait_ms;
        int idx_out = -1, idx_err = -1, idx_in = -1, idx_ctl = -1,
            idx_c0 = -1, idx_c1 = -1;

        if (!r->killed && now >= deadline) {
            r->timed_out = true;
            kill_tree(r, cgr);
            hard = now + KILL_GRACE_MS;
        }
        if (!r->killed && r->c1_done) {
            /* The init is gone, so is its namespace; only buffered data
             * is left, and C0 if it failed.  Bound that too. */
            kill_tree(r, cgr);
            hard = now + KILL_GRACE_MS;
        }
        if (!r->killed && r->c0_done && r->c1 == 0 && r->ctl < 0) {
            /* C0 failed before creating the namespace. */
            kill_tree(r, cgr);
            hard = now + KILL_GRACE_MS;
        }
        if (r->killed && now >= hard) {
            snprintf(r->out->error, sizeof r->out->error,
                     "sandbox: tree did not end %d ms after SIGKILL",
                     KILL_GRACE_MS);
            return IPD_ERR_INTERNAL;
        }
        wait_ms = (r->killed ? hard : deadline) - now;
        if (r->out_r >= 0) {
            idx_out = (int)n;
            pfd[n++] = (struct pollfd){r->out_r, POLLIN, 0};
        }
        if (r->err_r >= 0) {
            idx_err = (int)n;
            pfd[n++] = (struct pollfd){r->err_r, POLLIN, 0};
        }
        if (r->in_w >= 0) {
            idx_in = (int)n;
            pfd[n++] = (struct pollfd){r->in_w, POLLOUT, 0};
        }
        if (r->ctl >= 0) {
            idx_ctl = (int)n;
            pfd[n++] = (struct pollfd){r->ctl, POLLIN, 0};
        }
        if (!r->c0_done) {
            idx_c0 = (int)n;
            pfd[n++] = (struct pollfd){r->pidfd, POLLIN, 0};
        }
        if (r->c1fd >= 0 && !r->c1_done) {
            idx_c1 = (int)n;
            pfd[n++] = (struct pollfd){r->c1fd, POLLIN, 0};
        }
        if (poll(pfd, n, (int)(wait_ms > 0 ? wait_ms : 0)) < 0) {
            if (errno == EINTR)
                continue;
            snprintf(r->out->error, sizeof r->out->error, "poll: %s",
                     strerror(errno));
            kill_tree(r, cgr);
            return IPD_ERR_INTERNAL;
        }
        if (idx_out >= 0 && pfd[idx_out].revents)
            drain(r, &r->out_r, &r->out->out, &r->out->out_truncated);
        if (idx_err >= 0 && pfd[idx_err].revents)
            drain(r, &r->err_r, &r->out->err, &r->out->err_truncated);
        if (idx_in >= 0 && pfd[idx_in].revents)
            feed_stdin(r);
        if (idx_ctl >= 0 && pfd[idx_ctl].revents)
            read_ctl(r);
        if ((idx_c0 >= 0 && pfd[idx_c0].revents) ||
            (idx_c1 >= 0 && pfd[idx_c1].revents))
            reap(r, false);
        if (r->c1 > 0 && r->c1fd < 0 && !r->c1_done)
            reap(r, false); /* no pidfd: poll the child */
    }
    return IPD_OK;
}

static int set_nonblock(int fd)
{
    int fl = fcntl(fd, F_GETFL);
    return fl < 0 ? -1 : fcntl(fd, F_SETFL, fl | O_NONBLOCK);
}

static void close_fd(int *fd)
{
    if (*fd >= 0)
        close(*fd);
    *fd = -1;
}

static enum ipd_err run_internal(const struct ipd_sandbox_config *cfg,
                                 const struct ipd_sandbox_policy *policy,
                                 const struct ipd_sandbox_spec *spec,
                                 bool dry_run, struct ipd_sandbox_result *out)
{
    enum ipd_err rc;
    struct ipd_sandbox_policy p;
    struct plan pl;
    struct run r;
    struct ipd__cgroup_run cgr;
    int outp[2] = {-1, -1}, errp[2] = {-1, -1}, inp[2] = {-1, -1},
        ctl[2] = {-1, -1};
    bool cg_made = false;
    int64_t start = ipd_mono_ms(), oom = -1, cpu = -1, peak = -1;
    struct clone_args ca;
    long pid;

    memset(out, 0, sizeof *out);
    memset(&r, 0, sizeof r);
    memset(&cgr, 0, sizeof cgr);
    cgr.v2_fd = -1;
    memset(&pl, 0, sizeof pl);
    out->output_dirfd = -1;
    out->exit_code = -1;
    r.out = out;
    r.out_r = r.err_r = r.in_w = r.ctl = r.pidfd = r.c1fd = -1;
    ipd_buf_init(&out->out, IPD_BUF_UNLIMITED);
    ipd_buf_init(&out->err, IPD_BUF_UNLIMITED);
    rc = validate(cfg, policy, spec, out->error, sizeof out->error);
    if (rc)
        goto out;
    policy_complete(policy, &p);
    r.cap = p.output_cap_bytes;
    rc = plan_build(&pl, cfg, &p, spec, out->error, sizeof out->error);
    if (rc)
        goto out;
    pl.dry_run = dry_run;
    rc = ipd__cgroup_run_create(cfg->state->cg, p.memory_bytes,
                                p.max_processes, &cgr, out->error,
                                sizeof out->error);
    if (rc)
        goto out;
    cg_made = true;
    rc = IPD_ERR_INTERNAL;
    if (pipe2(outp, O_CLOEXEC) || pipe2(errp, O_CLOEXEC) ||
        (spec->stdin_data && pipe2(inp, O_CLOEXEC)) ||
        socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, ctl)) {
        snprintf(out->error, sizeof out->error, "pipes: %s", strerror(errno));
        goto out;
    }
    pl.out_w = outp[1];
    pl.err_w = errp[1];
    pl.in_r = inp[0];
    pl.ctl = ctl[1];
    for (size_t i = 0; i < IPD_ARRAY_LEN(pl.procs_fd); i++)
        pl.procs_fd[i] = cgr.procs_fd[i];

    memset(&ca, 0, sizeof ca);
    ca.flags = CLONE_PIDFD | (cgr.v2_fd >= 0 ? CLONE_INTO_CGROUP : 0);
    ca.pidfd = (uint64_t)(uintptr_t)&r.pidfd;
    ca.exit_signal = SIGCHLD;
    ca.cgroup = cgr.v2_fd >= 0 ? (uint64_t)cgr.v2_fd : 0;
    pid = syscall(SYS_clone3, &ca, sizeof ca);
    if (pid < 0) {
        snprintf(out->error, sizeof out->error, "clone3: %s",
                 strerror(errno));
        goto out;
    }
    if (pid == 0)
        c0_main(&pl);

    close_fd(&outp[1]);
    close_fd(&errp[1]);
    close_fd(&inp[0]);
    close_fd(&ctl[1]);
    r.out_r = outp[0];
    r.err_r = errp[0];
    r.in_w = inp[1];
    r.ctl = ctl[0];
    outp[0] = errp[0] = inp[1] = ctl[0] = -1;
    r.in_data = spec->stdin_data;
    r.in_len = spec->stdin_len;
    if (set_nonblock(r.out_r) || set_nonblock(r.err_r) ||
        (r.in_w >= 0 && set_nonblock(r.in_w))) {
        snprintf(out->error, sizeof out->error, "fcntl: %s", strerror(errno));
        kill_tree(&r, &cgr);
    }
    if (r.in_w >= 0 && r.in_len == 0)
        close_fd(&r.in_w);

    rc = supervise(&r, &cgr, start, p.wall_timeout_ms);
    out->wall_seconds = (double)(ipd_mono_ms() - start) / 1000.0;
    ipd__cgroup_run_stats(&cgr, &oom, &cpu, &peak);
    if (rc)
        goto out;
    out->oom_killed = oom > 0;
    out->timed_out = r.timed_out;
    out->memory_peak_bytes = peak > 0 ? peak : 0;
    if (r.got_status) {
        out->max_rss_kib = r.ru_all.ru_maxrss;
        if (WIFEXITED(r.status)) {
            out->exit_code = WEXITSTATUS(r.status);
        } else if (WIFSIGNALED(r.status)) {
            out->term_signal = WTERMSIG(r.status);
        }
    } else if (r.timed_out || out->oom_killed) {
        out->term_signal = SIGKILL; /* the tree was killed */
    }
    if (cpu >= 0)
        out->cpu_seconds = (double)cpu / 1e6;
    else
        out->cpu_seconds =
            (double)(r.ru_c1.ru_utime.tv_sec + r.ru_c1.ru_stime.tv_sec) +
            (double)(r.ru_c1.ru_utime.tv_usec + r.ru_c1.ru_stime.tv_usec) /
                1e6;
    if (r.setup_error) {
        rc = IPD_ERR_INTERNAL;
        goto out;
    }
    if (!r.got_status && !r.timed_out && !out->oom_killed) {
        snprintf(out->error, sizeof out->error,
                 "sandbox: init ended without a status");
        rc = IPD_ERR_INTERNAL;
        goto out;
    }
    rc = IPD_OK;
out:
    if ((r.pidfd >= 0 && !r.c0_done) || (r.c1 > 0 && !r.c1_done)) {
        kill_tree(&r, &cgr);
        reap(&r, true);
    }
    close_fd(&r.pidfd);
    close_fd(&r.c1fd);
    if (cg_made) {
        enum ipd_err drc = ipd__cgroup_run_destroy(&cgr);
        if (drc && !rc) {
            snprintf(out->error, sizeof out->error,
                     "sandbox: a process of the run survived the kill");
            rc = drc;
        }
    }
    close_fd(&r.out_r);
    close_fd(&r.err_r);
    close_fd(&r.in_w);
    close_fd(&r.ctl);
    for (int i = 0; i < 2; i++) {
        close_fd(&outp[i]);
        close_fd(&errp[i]);
        close_fd(&inp[i]);
        close_fd(&ctl[i]);
    }
    plan_release(&pl);
    return rc;
}

enum ipd_err ipd_sandbox_run(const struct ipd_sandbox_config *cfg,
                             const struct ipd_sandbox_policy *p,
                             const struct ipd_sandbox_spec *spec,
                             struct ipd_sandbox_result *out)
{
    return run_internal(cfg, p, spec, false, out);
}

void ipd_sandbox_result_release(struct ipd_sandbox_result *r)
{
    if (!r)
        return;
    ipd_buf_release(&r->out);
    ipd_buf_release(&r->err);
    if (r->output_dirfd >= 0)
        close(r->output_dirfd);
    r->output_dirfd = -1;
}

int ipd_sandbox_output_open(const struct ipd_sandbox_result *r,
                            const char *relpath, int flags)
{
    struct open_how how;

    if (!r || r->output_dirfd < 0 || !relpath) {
        errno = EBADF;
        return -1;
    }
    memset(&how, 0, sizeof how);
    how.flags = (uint64_t)(flags | O_CLOEXEC | O_NOFOLLOW);
    how.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS |
                  RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV;
    return (int)syscall(SYS_openat2, r->output_dirfd, relpath, &how,
                        sizeof how);
}

/* ---------------------------------------------------------------------
 * Probe.
 */

static int read_cap_last(void)
{
    char buf[16] = {0};
    int fd = open("/proc/sys/kernel/cap_last_cap", O_RDONLY | O_CLOEXEC);
    ssize_t n;
    int64_t v = -1;

    if (fd < 0)
        return 63; /* drop everything the field can hold */
    n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return 63;
    buf[strcspn(buf, "\n")] = '\0';
    if (ipd_int_parse(buf, 0, 63, &v))
        return 63;
    return (int)v;
}

/* arg_start, arg_end, env_start, env_end: fields 48-51 of
 * /proc/self/stat (counted after the parenthesised comm). */
static void read_mm_areas(struct ipd_sandbox_state *st)
{
    char buf[2048];
    const char *p;
    ssize_t n;
    int fd = open("/proc/self/stat", O_RDONLY | O_CLOEXEC);
    uintptr_t v[4] = {0, 0, 0, 0};

    if (fd < 0)
        return;
    n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return;
    buf[n] = '\0';
    p = strrchr(buf, ')');
    if (!p)
        return;
    p++;
    for (int field = 3; field <= 51 && *p; field++) {
        char *end;
        unsigned long long x;
        while (*p == ' ')
            p++;
        x = strtoull(p, &end, 10);
        if (field >= 48)
            v[field - 48] = (uintptr_t)x;
        p = end;
        while (*p && *p != ' ')
            p++;
    }
    st->arg_start = v[0];
    st->arg_end = v[1];
    st->env_start = v[2];
    st->env_end = v[3];
}

static void describe(struct ipd_sandbox_config *cfg)
{
    unsigned m = cfg->mechanisms;
    const struct ipd_sandbox_state *st = cfg->state;

    snprintf(cfg->status, sizeof cfg->status,
             "sandbox: user namespace (uid %u->%u, gid %u->%u, setgroups "
             "denied), pid/mount/ipc/uts%s namespaces, network namespace "
             "unless the policy allows network, seccomp %s (%u/%u "
             "instructions), memory: %s, pids: %s, kill: %s, cpu: %s",
             (unsigned)cfg->inner_uid, (unsigned)cfg->host_uid,
             (unsigned)cfg->inner_gid, (unsigned)cfg->host_gid,
             (m & IPD_SANDBOX_CGROUPNS) ? "/cgroup" : "",
             (m & IPD_SANDBOX_SECCOMP) ? "on" : "OFF",
             st ? (unsigned)st->bpf_nonet.len : 0,
             st ? (unsigned)st->bpf_net.len : 0,
             (m & IPD_SANDBOX_CG2_MEMORY)   ? "cgroup v2"
             : (m & IPD_SANDBOX_CG1_MEMORY) ? "cgroup v1"
                                            : "NONE",
             (m & IPD_SANDBOX_CG2_PIDS)   ? "cgroup v2"
             : (m & IPD_SANDBOX_CG1_PIDS) ? "cgroup v1"
                                          : "NONE",
             (m & IPD_SANDBOX_CG2_KILL) ? "cgroup.kill + pid-namespace init"
                                        : "pid-namespace init + v1 pid list",
             (m & (IPD_SANDBOX_CG2_KILL)) ? "cgroup v2 cpu.stat"
             : (m & IPD_SANDBOX_CG1_CPUACCT) ? "cgroup v1 cpuacct"
                                             : "rusage");
}

/* A full setup whose C2 exits instead of exec: proves every mechanism
 * works here before the first request does. */
static enum ipd_err dry_run(struct ipd_sandbox_config *cfg, char *err,
                            size_t errlen)
{
    struct ipd_sandbox_policy p;
    struct ipd_sandbox_spec spec;
    struct ipd_sandbox_result res;
    static const char *const argv[] = {"/nonexistent", NULL};
    enum ipd_err rc;

    ipd_sandbox_policy_default(&p);
    p.wall_timeout_ms = 10000;
    memset(&spec, 0, sizeof spec);
    spec.argv = argv;
    spec.cwd = "/";
    rc = run_internal(cfg, &p, &spec, true, &res);
    if (!rc && (res.exit_code != 0 || res.output_dirfd < 0)) {
        snprintf(res.error, sizeof res.error,
                 "dry run exited %d (signal %d)", res.exit_code,
                 res.term_signal);
        rc = IPD_ERR_UNAVAILABLE;
    }
    if (rc)
        snprintf(err, errlen, "%s", res.error);
    ipd_sandbox_result_release(&res);
    return rc;
}

enum ipd_err ipd_sandbox_probe(struct ipd_sandbox_config *cfg)
{
    enum ipd_err rc = IPD_ERR_UNAVAILABLE;
    struct ipd_sandbox_state *st = NULL;
    char err[400] = "";
    uid_t euid = geteuid();

    cfg->mechanisms = 0;
    cfg->state = NULL;
    if (!cfg->inner_uid)
        cfg->inner_uid = DEFAULT_INNER_ID;
    if (!cfg->inner_gid)
        cfg->inner_gid = DEFAULT_INNER_ID;
    if (!cfg->cgroup_name)
        cfg->cgroup_name = "interpd-sandbox";
    if (euid == 0) {
        if (!cfg->host_uid)
            cfg->host_uid = DEFAULT_HOST_ID;
        if (!cfg->host_gid)
            cfg->host_gid = (gid_t)cfg->host_uid;
    } else {
        /* Without newuidmap only the own ids can be mapped. */
        if (!cfg->host_uid)
            cfg->host_uid = euid;
        if (!cfg->host_gid)
            cfg->host_gid = getegid();
        if (cfg->host_uid != euid || cfg->host_gid != getegid()) {
            snprintf(err, sizeof err,
                     "host uid/gid %u/%u: only the own ids %u/%u can be "
                     "mapped when not running as root",
                     (unsigned)cfg->host_uid, (unsigned)cfg->host_gid,
                     (unsigned)euid, (unsigned)getegid());
            goto out;
        }
    }
    if (cfg->host_uid == 0 || cfg->host_gid == 0) {
        snprintf(err, sizeof err, "refusing to map the sandbox to host root");
        goto out;
    }
    if (strchr(cfg->cgroup_name, '/') || cfg->cgroup_name[0] == '.' ||
        !cfg->cgroup_name[0]) {
        snprintf(err, sizeof err, "bad cgroup name");
        goto out;
    }
    st = ipd_xcalloc(1, sizeof *st);
    st->cap_last = read_cap_last();
    read_mm_areas(st);
    st->cgroupns = true;
    rc = ipd__sandbox_seccomp_compile(false, &st->bpf_nonet, err, sizeof err);
    if (rc)
        goto out;
    rc = ipd__sandbox_seccomp_compile(true, &st->bpf_net, err, sizeof err);
    if (rc)
        goto out;
    rc = ipd__cgroups_probe(cfg->cgroup_name, &st->cg, &cfg->mechanisms, err,
                            sizeof err);
    if (rc)
        goto out;
    cfg->state = st;
    st = NULL;
    rc = dry_run(cfg, err, sizeof err);
    if (rc) {
        /* NEWCGROUP is optional: retry without it. */
        cfg->state->cgroupns = false;
        rc = dry_run(cfg, err, sizeof err);
    }
    if (rc) {
        rc = IPD_ERR_UNAVAILABLE;
        goto out;
    }
    cfg->mechanisms |= IPD_SANDBOX_USERNS | IPD_SANDBOX_SECCOMP;
    if (cfg->state->cgroupns)
        cfg->mechanisms |= IPD_SANDBOX_CGROUPNS;
    describe(cfg);
    rc = IPD_OK;
out:
    if (rc) {
        snprintf(cfg->status, sizeof cfg->status, "sandbox: unavailable: %s",
                 err);
        ipd_warn("%s", cfg->status);
    }
    if (st) {
        ipd__sandbox_bpf_release(&st->bpf_nonet);
        ipd__sandbox_bpf_release(&st->bpf_net);
        ipd__cgroups_free(st->cg);
        free(st);
    }
    return rc;
}

void ipd_sandbox_config_release(struct ipd_sandbox_config *cfg)
{
    struct ipd_sandbox_state *st;

    if (!cfg || !cfg->state)
        return;
    st = cfg->state;
    ipd__sandbox_bpf_release(&st->bpf_nonet);
    ipd__sandbox_bpf_release(&st->bpf_net);
    ipd__cgroups_free(st->cg);
    free(st);
    cfg->state = NULL;
}
