/*
 * seccomp.c - the sandbox's seccomp filter (the only file that
 * knows libseccomp).
 *
 * The filter is compiled once per network setting at probe time and
 * exported as raw BPF; the sandbox's init loads it with
 * seccomp(SECCOMP_SET_MODE_FILTER) (0.13 ms instead of 0.27 ms for
 * compiling in the child, and no allocation after fork).
 *
 * It is an ALLOW LIST over x86_64 (docs/SANDBOX.md, "The seccomp
 * filter", has the reasoning and the comparison with Docker's profile):
 *   - any other architecture (i386 int 0x80, x32) kills the process;
 *   - the system calls below are allowed, some only with the arguments
 *     named (clone without namespace flags, socket families per policy,
 *     a list of ioctl and fcntl commands, personality(PER_LINUX));
 *   - clone3 gets ENOSYS so libc falls back to clone, whose flags the
 *     filter can read;
 *   - numbers above the last one reviewed here (LAST_REVIEWED) get
 *     ENOSYS: a newer kernel's calls look absent, and libc falls back;
 *   - everything else, every reviewed call not listed, gets EPERM.
 *
 * Provenance of the list (measured 2026-11-25, Debian 12: Python 3.11,
 * glibc 2.36, numpy 1.24, pandas 1.5, matplotlib 3.6, Pillow 9.4,
 * pip 23.0, kernel 6.18): `strace -f -c -S calls` over
 *   [W] a workload script of the data stack and the standard library:
 *       numpy/scipy linear algebra with OpenBLAS, pandas read/write of
 *       csv, xlsx (openpyxl), json, pickle; matplotlib savefig png, svg,
 *       pdf; PIL; yaml; lxml; sqlite3; zip/tar/gzip/bz2/lzma;
 *       shutil.copy/copytree; threads, multiprocessing with fork, spawn
 *       and forkserver (Pool, Queue, Lock, Value), ProcessPoolExecutor,
 *       subprocess (sh, python, sleep + SIGTERM), asyncio subprocesses,
 *       AF_UNIX sockets, select/poll/epoll, setitimer + SIGALRM, mmap,
 *       tempfile, uuid, locale, platform, ctypes.util;
 *   [P] tests/python/test_prelude.py (the prelude of every execution);
 *   [V] python3 -m venv --system-site-packages (ensurepip), pip install
 *       of wheels and of an sdist (setup.py build) from
 *       tests/support/pkg-index.py, pip index versions;
 *   [I] the sandbox's own init and program child after the filter is
 *       loaded (child.c: poll, clone, close/close_range, dup2, fcntl,
 *       openat, setsid, chdir, execve, send, wait4, getrusage, exit);
 * then checked in the real sandbox with a build whose non-allowed
 * actions log instead of refusing (-DIPD_SECCOMP_MEASURE, below; the
 * kernel's audit records, type=1326, in dmesg) over the workload [W]
 * and the sandbox, executions, exec_functional and packages suites
 * (sdist builds included): mbind was the only call logged.  Calls
 * marked [S] were not measured: they are the direct system calls of
 * Python's own os, signal, select, socket, time and resource functions
 * that user code may call, reviewed one by one.
 * Measured but refused: mbind (OpenBLAS sets MPOL_PREFERRED and ignores
 * the result), mount and unshare (the prelude test's own harness, not
 * the prelude).
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/sockios.h>
#include <sched.h>
#include <seccomp.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sandbox_internal.h"

#if !defined(__x86_64__)
#error "the seccomp allow list is written for x86_64 system call numbers"
#endif

/* -DIPD_SECCOMP_MEASURE (a measuring build only, never a production
 * one): every call the list would refuse with EPERM or ENOSYS is
 * allowed and logged by the kernel (audit type=1326 in dmesg), so a
 * run of the suites shows what is missing.  That includes the calls
 * whose arguments fail a check (clone with namespace flags, ioctl and
 * fcntl commands not listed): they fall to the default action.  Only
 * clone3 and the socket families still refuse. */
#ifdef IPD_SECCOMP_MEASURE
#define REFUSE(e) SCMP_ACT_LOG
#else
#define REFUSE(e) SCMP_ACT_ERRNO(e)
#endif

/* The tables below are the policy; ipd__seccomp_tables (at their end)
 * hands them to the compile and to tests/unit/service/
 * test_seccomp_filter.c, which checks the compiled program against them
 * call by call. */

/* Tables, laid out as tables: */
/* clang-format off */
/* Allowed whatever the arguments. */
static const struct ipd__seccomp_sc allow[] = {
    /* memory [W P V] */
    {"brk", 12}, {"mmap", 9}, {"munmap", 11}, {"mprotect", 10},
    {"mremap", 25}, {"madvise", 28}, {"msync", 26},
    {"map_shadow_stack", 453}, /* glibc >= 2.39 shadow stacks [S] */
    {"mseal", 462},            /* only restricts the caller [S] */
    /* file descriptors and I/O [W P V I] */
    {"read", 0}, {"write", 1}, {"readv", 19}, {"writev", 20},
    {"pread64", 17}, {"pwrite64", 18}, {"preadv", 295}, {"pwritev", 296},
    {"preadv2", 327}, {"pwritev2", 328}, /* os.preadv/pwritev [S] */
    {"open", 2}, {"openat", 257}, {"close", 3}, {"close_range", 436},
    {"dup", 32}, {"dup2", 33}, {"dup3", 292}, {"lseek", 8},
    {"pipe", 22}, {"pipe2", 293}, {"flock", 73}, {"fsync", 74},
    {"fdatasync", 75}, {"sync", 162}, {"fadvise64", 221},
    {"fallocate", 285}, {"sendfile", 40}, {"copy_file_range", 326},
    {"splice", 275}, /* os.splice [S] */
    {"eventfd2", 290}, {"memfd_create", 319}, /* os.memfd_create [S] */
    /* paths and metadata [W P V] */
    {"stat", 4}, {"fstat", 5}, {"lstat", 6}, {"newfstatat", 262},
    {"statx", 332}, {"statfs", 137}, {"fstatfs", 138}, {"access", 21},
    {"faccessat", 269}, {"faccessat2", 439}, {"getcwd", 79},
    {"chdir", 80}, {"fchdir", 81}, {"getdents64", 217},
    {"readlink", 89}, {"readlinkat", 267}, {"mkdir", 83},
    {"mkdirat", 258}, {"rmdir", 84}, {"unlink", 87}, {"unlinkat", 263},
    {"rename", 82}, {"renameat", 264}, {"renameat2", 316}, {"link", 86},
    {"linkat", 265}, {"symlink", 88}, {"symlinkat", 266},
    {"chmod", 90}, {"fchmod", 91}, {"fchmodat", 268},
    {"fchmodat2", 452}, /* glibc >= 2.39 lchmod [S] */
    {"chown", 92}, {"fchown", 93}, {"lchown", 94}, {"fchownat", 260},
    {"truncate", 76}, {"ftruncate", 77}, {"utimensat", 280},
    {"umask", 95}, {"mknodat", 259}, /* os.mkfifo; nodev mounts [S] */
    {"getxattr", 191}, {"lgetxattr", 192}, {"fgetxattr", 193},
    {"setxattr", 188}, {"lsetxattr", 189}, {"fsetxattr", 190},
    {"listxattr", 194}, {"llistxattr", 195}, {"flistxattr", 196},
    {"removexattr", 197}, {"lremovexattr", 198}, {"fremovexattr", 199},
    /* processes [W P V I] (clone: below, with its flags checked) */
    {"vfork", 58}, {"execve", 59}, {"execveat", 322}, {"exit", 60},
    {"exit_group", 231}, {"wait4", 61}, {"waitid", 247}, {"kill", 62},
    {"tgkill", 234}, {"getpid", 39}, {"getppid", 110}, {"gettid", 186},
    {"getuid", 102}, {"geteuid", 107}, {"getgid", 104}, {"getegid", 108},
    {"getresuid", 118}, {"getresgid", 120}, {"getgroups", 115},
    {"setuid", 105}, {"setgid", 106}, {"setreuid", 113},
    {"setregid", 114}, {"setresuid", 117}, {"setresgid", 119},
    {"getpgid", 121}, {"getpgrp", 111}, {"getsid", 124}, {"setsid", 112},
    {"setpgid", 109}, {"getpriority", 140}, {"setpriority", 141},
    {"sched_yield", 24}, {"sched_getaffinity", 204},
    {"sched_setaffinity", 203}, {"sched_getparam", 143},
    {"sched_getscheduler", 145}, {"sched_get_priority_max", 146},
    {"sched_get_priority_min", 147}, {"sched_rr_get_interval", 148},
    {"getcpu", 309}, {"prlimit64", 302}, {"getrlimit", 97},
    {"setrlimit", 160}, {"getrusage", 98}, {"times", 100},
    {"sysinfo", 99}, {"uname", 63}, {"prctl", 157}, {"arch_prctl", 158},
    {"set_tid_address", 218}, {"set_robust_list", 273}, {"rseq", 334},
    {"futex", 202}, {"futex_wake", 454}, {"futex_wait", 455},
    {"futex_requeue", 456}, /* futex2: futex under another name [S] */
    {"pidfd_open", 434}, {"pidfd_send_signal", 424}, /* [S] */
    {"restart_syscall", 219}, {"getrandom", 318},
    /* signals and time [W P V] */
    {"rt_sigaction", 13}, {"rt_sigprocmask", 14}, {"rt_sigreturn", 15},
    {"rt_sigpending", 127}, {"rt_sigsuspend", 130},
    {"rt_sigtimedwait", 128}, {"rt_sigqueueinfo", 129},
    {"rt_tgsigqueueinfo", 297}, {"sigaltstack", 131}, {"alarm", 37},
    {"pause", 34}, {"getitimer", 36}, {"setitimer", 38},
    {"clock_gettime", 228}, {"clock_getres", 229},
    {"clock_nanosleep", 230}, {"nanosleep", 35}, {"gettimeofday", 96},
    {"time", 201},
    /* POSIX timers and message queues [B]: not measured in the workloads,
     * allowed as Docker does because what they take is bounded per run
     * (RLIMIT_SIGPENDING, RLIMIT_MSGQUEUE, the namespace's owner is the
     * run's uid; tests/sandbox/test_budgets.c fills them). */
    {"timer_create", 222}, {"timer_settime", 223}, {"timer_gettime", 224},
    {"timer_getoverrun", 225}, {"timer_delete", 226},
    {"mq_open", 240}, {"mq_unlink", 241}, {"mq_timedsend", 242},
    {"mq_timedreceive", 243}, {"mq_notify", 244}, {"mq_getsetattr", 245},
    /* waiting for descriptors [W P V I] */
    {"select", 23}, {"pselect6", 270}, {"poll", 7}, {"ppoll", 271},
    {"epoll_create", 213}, {"epoll_create1", 291}, {"epoll_ctl", 233},
    {"epoll_wait", 232}, {"epoll_pwait", 281}, {"epoll_pwait2", 441},
    /* sockets (socket/socketpair: below, by family) [W V I] */
    {"bind", 49}, {"listen", 50}, {"accept", 43}, {"accept4", 288},
    {"connect", 42}, {"getsockname", 51}, {"getpeername", 52},
    {"getsockopt", 55}, {"setsockopt", 54}, {"sendto", 44},
    {"recvfrom", 45}, {"sendmsg", 46}, {"recvmsg", 47},
    {"sendmmsg", 307}, {"recvmmsg", 299}, {"shutdown", 48},
};

/* Numbers at or below this were reviewed: those not allowed get EPERM.
 * Above it (newer kernels) they get ENOSYS.  469 is file_setattr
 * (Linux 6.17). */
#define LAST_REVIEWED 469
#define NEWER_LAST 1023

static const uint64_t ns_clone_flags = CLONE_NEWNS | CLONE_NEWUTS |
                                       CLONE_NEWIPC | CLONE_NEWUSER |
                                       CLONE_NEWPID | CLONE_NEWNET |
                                       CLONE_NEWCGROUP;

/* ioctl commands allowed (low 32 bits, as the kernel compares them);
 * any other command, TIOCSTI and TIOCLINUX among them, gets EPERM.
 * Measured [W P V]:
 * TCGETS (isatty), TIOCGWINSZ, FIONBIO, FIOCLEX (Python sets
 * inheritance with it and raises on EPERM), SIOCGIFCONF/SIOCGIFHWADDR
 * (uuid).  [S]: FIONCLEX, FIONREAD, TIOCGPGRP, the other read-only
 * SIOCGIF* queries. */
static const unsigned long ioctl_ok[] = {
    TCGETS,      TIOCGWINSZ,    TIOCGPGRP,    FIONREAD,
    FIONBIO,     FIOCLEX,       FIONCLEX,     SIOCGIFCONF,
    SIOCGIFADDR, SIOCGIFHWADDR, SIOCGIFINDEX, SIOCGIFNAME,
    SIOCGIFFLAGS, SIOCGIFMTU,
};

/* fcntl commands allowed; the others (F_NOTIFY watches a directory,
 * also a shared read-only bind; F_SETLEASE, F_SETOWN*, F_SETSIG,
 * ...) get EPERM.  Measured: F_GETFD, F_SETFD, F_GETFL,
 * F_SETFL, F_DUPFD, F_DUPFD_CLOEXEC, F_SETLK (sqlite3); [S] the other
 * record locks, seals and F_GETPIPE_SZ. */
static const unsigned long fcntl_ok[] = {
    F_DUPFD,      F_DUPFD_CLOEXEC, F_GETFD,     F_SETFD,
    F_GETFL,      F_SETFL,         F_GETLK,     F_SETLK,
    F_SETLKW,     F_OFD_GETLK,     F_OFD_SETLK, F_OFD_SETLKW,
    F_ADD_SEALS,  F_GET_SEALS,     F_GETPIPE_SZ,
    F_SETPIPE_SZ, /* [B] pipe pages are counted per host uid: one per slot */
};

/* socket and socketpair: without network the first one, with network
 * all four (glibc's getaddrinfo asks the kernel for the host's
 * addresses over AF_NETLINK). */
static const int families[] = {AF_UNIX, AF_INET, AF_INET6, AF_NETLINK};

/* A zygote's extras (sandbox.h, warm runs): what its children need to
 * make their own namespaces and mounts before they load the cold filter
 * on top of this one.  Capabilities exist only in the namespaces the
 * child makes (user namespaces it creates), so these reach nothing the
 * zygote's own user namespace does not own; the program child never
 * runs under this filter alone. */
static const struct ipd__seccomp_sc zygote_allow[] = {
    {"unshare", 272},     {"mount", 165},        {"umount2", 166},
    {"open_tree", 428},   {"move_mount", 429},   {"mount_setattr", 442},
    {"capget", 125},      {"capset", 126},
};

static const struct ipd__seccomp_tables tables = {
    .allow = allow,
    .n_allow = IPD_ARRAY_LEN(allow),
    .zygote_allow = zygote_allow,
    .n_zygote_allow = IPD_ARRAY_LEN(zygote_allow),
    .ioctl_ok = ioctl_ok,
    .n_ioctl_ok = IPD_ARRAY_LEN(ioctl_ok),
    .fcntl_ok = fcntl_ok,
    .n_fcntl_ok = IPD_ARRAY_LEN(fcntl_ok),
    .families = families,
    .n_families_nonet = 1,
    .n_families_net = IPD_ARRAY_LEN(families),
    .ns_clone_flags = ns_clone_flags,
    .last_reviewed = LAST_REVIEWED,
    .newer_last = NEWER_LAST,
};
/* clang-format on */

const struct ipd__seccomp_tables *ipd__seccomp_tables(void)
{
    return &tables;
}

static void set_err(char *err, size_t errlen, const char *what, int rc)
{
    snprintf(err, errlen, "seccomp: %s: %s", what, strerror(-rc));
}

static int failed_nr; /* for the error message; probe is single-threaded */

static int add(scmp_filter_ctx ctx, uint32_t action, int nr, unsigned n,
               const struct scmp_arg_cmp *cmp)
{
    int rc = seccomp_rule_add_array(ctx, action, nr, n, cmp);
    if (rc)
        failed_nr = nr;
    return rc;
}

/* Allow every call of table t (n entries).  The table's number must be
 * libseccomp's for the name, where it knows the name (a typo or a wrong
 * number fails the probe, closed). */
static int add_table(scmp_filter_ctx ctx, const struct ipd__seccomp_sc *t,
                     size_t n)
{
    for (size_t i = 0; i < n; i++) {
        int nr = seccomp_syscall_resolve_name(t[i].name);
        int rc;
        if (nr >= 0 && nr != t[i].nr) {
            failed_nr = t[i].nr;
            return -EINVAL;
        }
        rc = add(ctx, SCMP_ACT_ALLOW, t[i].nr, 0, NULL);
        if (rc)
            return rc;
    }
    return 0;
}

static bool is_allowed(int nr)
{
    for (size_t i = 0; i < tables.n_allow; i++) {
        if (tables.allow[i].nr == nr)
            return true;
    }
    return false;
}

/* Unreviewed numbers: ENOSYS, "this kernel has no such call". */
static int add_newer(scmp_filter_ctx ctx)
{
#ifdef IPD_SECCOMP_MEASURE
    (void)ctx; /* the default action already logs them */
    return 0;
#endif
    for (int nr = tables.last_reviewed + 1; nr <= tables.newer_last; nr++) {
        int rc;
        if (is_allowed(nr))
            continue;
        rc = add(ctx, REFUSE(ENOSYS), nr, 0, NULL);
        if (rc)
            return rc;
    }
    return 0;
}

/* Allow the commands listed (arg 1, low 32 bits, as the kernel reads
 * an int); other commands fall to the default, EPERM (libseccomp drops
 * argument rules when the same call also has a rule without one, so
 * "ENOTTY for the rest" cannot be said). */
static int add_cmd_list(scmp_filter_ctx ctx, int nr, const unsigned long *cmds,
                        size_t n)
{
    int rc = 0;

    for (size_t i = 0; i < n && !rc; i++) {
        struct scmp_arg_cmp c =
            SCMP_A1(SCMP_CMP_MASKED_EQ, 0xffffffffu, cmds[i]);
        rc = add(ctx, SCMP_ACT_ALLOW, nr, 1, &c);
    }
    return rc;
}

/* socket and socketpair: the families allowed, EAFNOSUPPORT for any
 * other (all 64 bits compared: a family with high bits set is refused,
 * as the kernel would read only the low ones). */
static int add_socket_rules(scmp_filter_ctx ctx, bool network)
{
    const int nrs[] = {SCMP_SYS(socket), SCMP_SYS(socketpair)};
    size_t n_ok = network ? tables.n_families_net : tables.n_families_nonet;
    int rc = 0;

    for (size_t s = 0; s < IPD_ARRAY_LEN(nrs) && !rc; s++) {
        struct scmp_arg_cmp c = SCMP_A0(SCMP_CMP_GE, 64, 0);
        rc = add(ctx, SCMP_ACT_ERRNO(EAFNOSUPPORT), nrs[s], 1, &c);
        for (int fam = 0; fam < 64 && !rc; fam++) {
            bool ok = false;
            for (size_t i = 0; i < n_ok; i++)
                ok = ok || tables.families[i] == fam;
            c = SCMP_A0(SCMP_CMP_EQ, (scmp_datum_t)fam, 0);
            rc = add(ctx, ok ? SCMP_ACT_ALLOW : SCMP_ACT_ERRNO(EAFNOSUPPORT),
                     nrs[s], 1, &c);
        }
    }
    return rc;
}

static int add_rules(scmp_filter_ctx ctx, bool network, bool zygote)
{
    struct scmp_arg_cmp c;
    int rc;

    rc = add_table(ctx, tables.allow, tables.n_allow);
    if (!rc && zygote)
        rc = add_table(ctx, tables.zygote_allow, tables.n_zygote_allow);
    if (!rc)
        rc = add_newer(ctx);
    /* clone3 passes flags in memory the filter cannot read. */
    if (!rc)
        rc = add(ctx, SCMP_ACT_ERRNO(ENOSYS), SCMP_SYS(clone3), 0, NULL);
    /* clone only without namespace flags (else the default, EPERM). */
    c = SCMP_A0(SCMP_CMP_MASKED_EQ, tables.ns_clone_flags, 0);
    if (!rc)
        rc = add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(clone), 1, &c);
    /* personality: only PER_LINUX (0); any other persona
     * (READ_IMPLIES_EXEC, ADDR_NO_RANDOMIZE, ...) and the query
     * 0xffffffff are refused (neither Python nor glibc query it). */
    c = SCMP_A0(SCMP_CMP_EQ, 0, 0);
    if (!rc)
        rc = add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(personality), 1, &c);
    if (!rc)
        rc = add_cmd_list(ctx, SCMP_SYS(ioctl), tables.ioctl_ok,
                          tables.n_ioctl_ok);
    if (!rc)
        rc = add_cmd_list(ctx, SCMP_SYS(fcntl), tables.fcntl_ok,
                          tables.n_fcntl_ok);
    if (!rc)
        rc = add_socket_rules(ctx, network);
    return rc;
}

enum ipd_err ipd__sandbox_seccomp_compile(bool network, bool zygote,
                                          struct ipd__sandbox_bpf *out,
                                          char *err, size_t errlen)
{
    enum ipd_err ret = IPD_ERR_INTERNAL;
    scmp_filter_ctx ctx = NULL;
    int fd = -1;
    off_t size;
    int rc;

    out->filter = NULL;
    out->len = 0;
    ctx = seccomp_init(REFUSE(EPERM));
    if (!ctx) {
        snprintf(err, errlen, "seccomp: seccomp_init failed");
        goto out;
    }
    rc = seccomp_attr_set(ctx, SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_KILL_PROCESS);
    if (rc) {
        set_err(err, errlen, "bad-arch action", rc);
        goto out;
    }
    /* A binary tree of syscall numbers: about 10 comparisons per call
     * instead of walking some 600 rules. */
    rc = seccomp_attr_set(ctx, SCMP_FLTATR_CTL_OPTIMIZE, 2);
    if (rc) {
        set_err(err, errlen, "optimize attribute", rc);
        goto out;
    }
    /* The caller sets no_new_privs itself, before loading. */
    rc = seccomp_attr_set(ctx, SCMP_FLTATR_CTL_NNP, 0);
    if (rc) {
        set_err(err, errlen, "nnp attribute", rc);
        goto out;
    }
    rc = add_rules(ctx, network, zygote);
    if (rc) {
        char what[64];
        snprintf(what, sizeof what, "adding a rule for syscall %d", failed_nr);
        set_err(err, errlen, what, rc);
        goto out;
    }
    fd = memfd_create("ipd-seccomp", MFD_CLOEXEC);
    if (fd < 0) {
        set_err(err, errlen, "memfd_create", -errno);
        goto out;
    }
    rc = seccomp_export_bpf(ctx, fd);
    if (rc) {
        set_err(err, errlen, "export", rc);
        goto out;
    }
    size = lseek(fd, 0, SEEK_END);
    if (size <= 0 || size % (off_t)sizeof(struct sock_filter) != 0 ||
        size / (off_t)sizeof(struct sock_filter) > BPF_MAXINSNS) {
        snprintf(err, errlen, "seccomp: exported filter has size %lld",
                 (long long)size);
        goto out;
    }
    out->filter = ipd_xmalloc((size_t)size);
    if (pread(fd, out->filter, (size_t)size, 0) != size) {
        set_err(err, errlen, "reading the exported filter", -errno);
        goto out;
    }
    out->len = (unsigned short)(size / (off_t)sizeof(struct sock_filter));
    ret = IPD_OK;
out:
    if (ret)
        ipd__sandbox_bpf_release(out);
    if (fd >= 0)
        close(fd);
    seccomp_release(ctx);
    return ret;
}

void ipd__sandbox_bpf_release(struct ipd__sandbox_bpf *b)
{
    if (!b)
        return;
    free(b->filter);
    b->filter = NULL;
    b->len = 0;
}
