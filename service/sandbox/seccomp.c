/*
 * seccomp.c - the sandbox's seccomp filter (the only file that
 * knows libseccomp).
 *
 * The filter is compiled once per network setting at probe time and
 * exported as raw BPF; the sandbox's init loads it with
 * seccomp(SECCOMP_SET_MODE_FILTER) (0.13 ms instead of 0.27 ms for
 * compiling in the child, and no allocation after fork).
 *
 * It is a deny list over the native architecture that fails closed:
 *   - any other architecture (i386 int 0x80, x32) kills the process;
 *   - kernel attack surface and namespace/mount escapes get EPERM;
 *   - clone3 gets ENOSYS so libc falls back to clone, whose flags the
 *     filter can read (namespace flags -> EPERM);
 *   - syscall numbers newer than this list (above the last one reviewed
 *     here) get ENOSYS, so a new kernel does not silently widen it.
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <sched.h>
#include <seccomp.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sandbox_internal.h"

/* EPERM, whatever the arguments.  Names unknown to this libseccomp are
 * skipped (they resolve to __NR_SCMP_ERROR); the number range rule below
 * covers new ones. */
static const char *const deny_eperm[] = {
    "ptrace", "process_vm_readv", "process_vm_writev", "pidfd_getfd",
    /* mount API */
    "mount", "umount", "umount2", "fsopen", "fsmount", "move_mount",
    "open_tree", "fsconfig", "fspick", "mount_setattr", "pivot_root",
    "chroot", "open_tree_attr", "statmount", "listmount",
    /* namespaces */
    "unshare", "setns",
    /* kernel attack surface */
    "bpf", "perf_event_open", "userfaultfd", "keyctl", "add_key",
    "request_key", "kexec_load", "kexec_file_load", "init_module",
    "finit_module", "delete_module", "reboot", "swapon", "swapoff",
    "io_uring_setup", "io_uring_enter", "io_uring_register",
    "open_by_handle_at", "name_to_handle_at", "clock_settime",
    "clock_settime64", "settimeofday", "adjtimex", "clock_adjtime",
    "clock_adjtime64", "stime", "acct", "quotactl", "quotactl_fd",
    "syslog", "vhangup", "uselib", "lookup_dcookie", "fanotify_init",
    "iopl", "ioperm", "nfsservctl", "_sysctl", "sysfs", "ustat",
    "kcmp", "lsm_set_self_attr", "vm86", "vm86old", "create_module",
    "get_kernel_syms", "query_module", "afs_syscall", "security",
};

/* Syscall numbers at or above this are denied (ENOSYS) unless listed in
 * newer_allowed: 451 cachestat is the first after the list above was
 * reviewed (Linux 6.5). */
#define NEWER_FIRST 451
#define NEWER_LAST 1023
static const int newer_allowed[] = {
    451, /* cachestat */
    452, /* fchmodat2 (glibc 2.39 uses it) */
    453, /* map_shadow_stack */
    454, /* futex_wake */
    455, /* futex_wait */
    456, /* futex_requeue */
    462, /* mseal */
};

static const uint64_t ns_clone_flags[] = {
    CLONE_NEWNS,  CLONE_NEWUTS, CLONE_NEWIPC,    CLONE_NEWUSER,
    CLONE_NEWPID, CLONE_NEWNET, CLONE_NEWCGROUP,
};

static void set_err(char *err, size_t errlen, const char *what, int rc)
{
    snprintf(err, errlen, "seccomp: %s: %s", what, strerror(-rc));
}

static bool newer_is_allowed(int nr)
{
    for (size_t i = 0; i < IPD_ARRAY_LEN(newer_allowed); i++) {
        if (newer_allowed[i] == nr)
            return true;
    }
    return false;
}

/* Add rule; "rule equals the default action" never happens here. */
static int failed_nr; /* for the error message; probe is single-threaded */

static int add(scmp_filter_ctx ctx, uint32_t action, int nr, unsigned n,
               const struct scmp_arg_cmp *cmp)
{
    int rc = seccomp_rule_add_array(ctx, action, nr, n, cmp);
    if (rc)
        failed_nr = nr;
    return rc;
}

static int add_rules(scmp_filter_ctx ctx, bool network)
{
    int rc = 0;

    for (size_t i = 0; i < IPD_ARRAY_LEN(deny_eperm); i++) {
        int nr = seccomp_syscall_resolve_name(deny_eperm[i]);
        if (nr < 0)
            continue; /* not on this architecture */
        rc = add(ctx, SCMP_ACT_ERRNO(EPERM), nr, 0, NULL);
        if (rc)
            goto out;
    }
    for (int nr = NEWER_FIRST; nr <= NEWER_LAST; nr++) {
        char *name = NULL;
        if (newer_is_allowed(nr))
            continue;
        /* Rules for names in deny_eperm already exist. */
        name = seccomp_syscall_resolve_num_arch(SCMP_ARCH_NATIVE, nr);
        if (name) {
            bool listed = false;
            for (size_t i = 0; i < IPD_ARRAY_LEN(deny_eperm); i++)
                listed = listed || strcmp(name, deny_eperm[i]) == 0;
            free(name);
            if (listed)
                continue;
        }
        rc = add(ctx, SCMP_ACT_ERRNO(ENOSYS), nr, 0, NULL);
        if (rc)
            goto out;
    }

    /* clone3 passes flags in memory the filter cannot read. */
    rc = add(ctx, SCMP_ACT_ERRNO(ENOSYS), SCMP_SYS(clone3), 0, NULL);
    if (rc)
        goto out;
    for (size_t i = 0; i < IPD_ARRAY_LEN(ns_clone_flags); i++) {
        struct scmp_arg_cmp c =
            SCMP_A0(SCMP_CMP_MASKED_EQ, ns_clone_flags[i], ns_clone_flags[i]);
        rc = add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(clone), 1, &c);
        if (rc)
            goto out;
    }

    /* TIOCSTI/TIOCLINUX: the kernel compares the low 32 bits of cmd. */
    {
        struct scmp_arg_cmp c =
            SCMP_A1(SCMP_CMP_MASKED_EQ, 0xffffffffu, TIOCSTI);
        rc = add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(ioctl), 1, &c);
        if (rc)
            goto out;
        c = SCMP_A1(SCMP_CMP_MASKED_EQ, 0xffffffffu,
                                         TIOCLINUX);
        rc = add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(ioctl), 1, &c);
        if (rc)
            goto out;
    }

    /* personality: only PER_LINUX (0) passes; any other persona
     * (READ_IMPLIES_EXEC, ADDR_NO_RANDOMIZE, ...) and even the query
     * 0xffffffff are refused (libseccomp cannot compare one argument
     * twice in a rule, and neither Python nor glibc query it). */
    {
        struct scmp_arg_cmp c = SCMP_A0(SCMP_CMP_NE, 0, 0);
        rc = add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(personality), 1, &c);
        if (rc)
            goto out;
    }

    if (!network) {
        struct scmp_arg_cmp c = SCMP_A0(SCMP_CMP_NE, AF_UNIX, 0);
        rc = add(ctx, SCMP_ACT_ERRNO(EAFNOSUPPORT), SCMP_SYS(socket), 1, &c);
        if (rc)
            goto out;
        rc = add(ctx, SCMP_ACT_ERRNO(EAFNOSUPPORT), SCMP_SYS(socketpair), 1,
                 &c);
        if (rc)
            goto out;
    }
out:
    return rc;
}

enum ipd_err ipd__sandbox_seccomp_compile(bool network,
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
    ctx = seccomp_init(SCMP_ACT_ALLOW);
    if (!ctx) {
        snprintf(err, errlen, "seccomp: seccomp_init failed");
        goto out;
    }
    rc = seccomp_attr_set(ctx, SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_KILL_PROCESS);
    if (rc) {
        set_err(err, errlen, "bad-arch action", rc);
        goto out;
    }
    /* The caller sets no_new_privs itself, before loading. */
    rc = seccomp_attr_set(ctx, SCMP_FLTATR_CTL_NNP, 0);
    if (rc) {
        set_err(err, errlen, "nnp attribute", rc);
        goto out;
    }
    rc = add_rules(ctx, network);
    if (rc) {
        char what[64];
        snprintf(what, sizeof what, "adding a rule for syscall %d",
                 failed_nr);
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
