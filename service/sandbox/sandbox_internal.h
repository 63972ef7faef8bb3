/*
 * sandbox_internal.h - what the files of service/sandbox/ share.
 *
 * Private to the sandbox library: nothing outside service/sandbox/
 * includes it (tests aside); the rest of the program uses sandbox.h.
 */
#ifndef IPD_SANDBOX_INTERNAL_H
#define IPD_SANDBOX_INTERNAL_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/resource.h>
#include <sys/types.h>

#include "sandbox.h"
#include "zproto.h"

/* The seccomp filter as raw BPF (seccomp.c). */
struct ipd__sandbox_bpf {
    void *filter; /* struct sock_filter[len], owned */
    unsigned short len;
};
/* Compile the filter for network on/off once (zygote: a zygote's, the
 * no-network filter plus what its children need to make their
 * namespaces, sandbox.h); IPD_ERR_INTERNAL on failure with a reason in
 * err. */
enum ipd_err ipd__sandbox_seccomp_compile(bool network, bool zygote,
                                          struct ipd__sandbox_bpf *out,
                                          char *err, size_t errlen);
void ipd__sandbox_bpf_release(struct ipd__sandbox_bpf *b);

/* The tables the filter is compiled from (seccomp.c), one copy read by
 * the compile and by tests/unit/service/test_seccomp_filter.c, which
 * evaluates the compiled program against them.  Static, never freed. */
struct ipd__seccomp_sc {
    const char *name;
    int nr; /* x86_64; checked against libseccomp's table when it knows */
};
struct ipd__seccomp_tables {
    const struct ipd__seccomp_sc *allow; /* allowed whatever the args */
    size_t n_allow;
    const struct ipd__seccomp_sc *zygote_allow; /* a zygote's extras */
    size_t n_zygote_allow;
    const unsigned long *ioctl_ok; /* ioctl commands (low 32 bits) */
    size_t n_ioctl_ok;
    const unsigned long *fcntl_ok; /* fcntl commands */
    size_t n_fcntl_ok;
    const int *families;     /* socket/socketpair families: the first */
    size_t n_families_nonet; /* n_families_nonet without network, */
    size_t n_families_net;   /* the first n_families_net with it */
    uint64_t ns_clone_flags; /* clone with any of these: EPERM */
    int last_reviewed;       /* above it, up to newer_last: ENOSYS */
    int newer_last;
};
const struct ipd__seccomp_tables *ipd__seccomp_tables(void);

/* cgroups (cgroup.c) */
struct ipd__cgroups;     /* parents found at probe */
struct ipd__cgroup_run { /* one run's cgroups */
    char v2[512];        /* run dir under cgroup2 or "" */
    char mem[512];       /* run dir holding the memory limit or "" */
    char pids[512];      /* run dir holding the pids limit or "" */
    char cpuacct[512];   /* v1 cpuacct run dir or "" */
    char cpu[512];       /* run dir holding the CPU quota or "" */
    int v2_fd;           /* O_DIRECTORY fd of v2 (CLONE_INTO_CGROUP) */
    int procs_fd[4];     /* v1 cgroup.procs fds to join, -1 unused */
    bool mem_is_v2, pids_is_v2, cpu_is_v2, cpu_is_cpuacct;
};
enum ipd_err ipd__cgroups_probe(const char *name, struct ipd__cgroups **out,
                                unsigned *mech, char *err, size_t errlen);
void ipd__cgroups_free(struct ipd__cgroups *cg);
/* Create the run's cgroups "run-<pid>-<n>" (n counts per process) and
 * set limits; fds are O_CLOEXEC.  A leftover dir of that name (a dead
 * process's with our pid) is taken over when empty, else the next n is
 * tried. */
struct ipd__cgroup_limits {
    int64_t memory_bytes, pids;
    int64_t cpu_millis; /* 1000 = one core */
};
enum ipd_err ipd__cgroup_run_create(const struct ipd__cgroups *cg,
                                    const struct ipd__cgroup_limits *lim,
                                    struct ipd__cgroup_run *run, char *err,
                                    size_t errlen);
/* Kill everything in the run's cgroups (cgroup.kill; v1: signal each
 * listed pid).  Safe to call repeatedly. */
/* Send sig to every process of the run (the first of its cgroups that
 * lists any); the pid namespace's init ignores what it has no handler
 * for. */
void ipd__cgroup_run_signal(const struct ipd__cgroup_run *run, int sig);
void ipd__cgroup_run_kill(const struct ipd__cgroup_run *run);
/* The largest VmHWM (peak resident set, KiB) of the processes in the
 * run's cgroup, 0 when there is none or no cgroup lists them. */
long ipd__cgroup_run_hwm_kib(const struct ipd__cgroup_run *run);
/* Read counters: OOM kills, cpu usec, memory peak (-1 when unknown). */
void ipd__cgroup_run_stats(const struct ipd__cgroup_run *run,
                           int64_t *oom_kills, int64_t *cpu_usec,
                           int64_t *mem_peak);
/* The run's memory use now (bytes; -1 when unknown). */
int64_t ipd__cgroup_run_memory(const struct ipd__cgroup_run *run);
/* Remove the run's cgroups (waiting, bounded, for them to empty) and
 * close the fds.  IPD_ERR_INTERNAL if a process survived. */
enum ipd_err ipd__cgroup_run_destroy(struct ipd__cgroup_run *run);

/* What the probe prepares once for every run (cfg->state; probe.c). */
struct ipd_sandbox_state {
    struct ipd__sandbox_bpf bpf_nonet;  /* network denied */
    struct ipd__sandbox_bpf bpf_net;    /* network allowed */
    struct ipd__sandbox_bpf bpf_zygote; /* a zygote's (no network) */
    struct ipd__cgroups *cg;
    int cap_last;                 /* /proc/sys/kernel/cap_last_cap */
    uintptr_t arg_start, arg_end; /* P's argv and environment areas, */
    uintptr_t env_start, env_end; /* wiped in C1 (/proc/1/cmdline) */
    bool cgroupns;
};

/* The control socket's messages and the zygote's verbs: zproto.h. */

/* Descriptor passing (fdpass.c).  Allocation-free and async-signal-safe:
 * the cloned children (child.c) use it too. */
#define IPD_FDPASS_MAX 16 /* descriptors in one message, at most */
/* Send msg (len bytes) with nfds (<= IPD_FDPASS_MAX) descriptors of fds,
 * MSG_NOSIGNAL, retried on EINTR.  The descriptors stay the caller's.
 * Returns sendmsg's result (-1 with errno). */
ssize_t ipd__fdpass_send(int sock, const void *msg, size_t len, const int *fds,
                         size_t nfds);
/* Receive one message into buf (len bytes; flags: recvmsg's, e.g.
 * MSG_DONTWAIT) and at most max_fds descriptors into fds (close-on-exec;
 * *nfds how many, each the caller's to close).  Any other descriptor
 * that came along is closed here, or discarded by the kernel when it did
 * not fit.  Returns recvmsg's result (-1 with errno: no descriptors). */
ssize_t ipd__fdpass_recv(int sock, void *buf, size_t len, int flags, int *fds,
                         size_t max_fds, size_t *nfds);

#define IPD__SANDBOX_MAX_MOUNTS 64

struct plan_mount {
    int tree_fd;         /* a detached copy of host_path's tree made by P
                            (open_tree), moved into place by C1: no path
                            walk as the sandbox's uid; -1 when P may not
                            make one (not root: C1 binds src) */
    char src[PATH_MAX];  /* "/oldroot" + realpath(host_path) */
    char dst[PATH_MAX];  /* "/newroot" + sandbox_path */
    char link[PATH_MAX]; /* target when host_path is a symlink */
    bool is_link, is_dir, writable;
};

/* A staging area (sandbox.h). */
struct ipd_sandbox_stage {
    int fd;        /* the detached tmpfs's mount fd, or the directory's */
    bool detached; /* a tmpfs no host path leads to */
    char *dir;     /* owned; the fallback directory's path, else NULL */
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
    struct rlimit rl_cpu, rl_fsize, rl_nofile, rl_sigpending, rl_msgqueue;
    /* As root, C0 creates the user namespace with these effective ids
     * (its owner, charged for what the run uses of per-user budgets),
     * then takes root back to write the maps; 0: C0 keeps its ids. */
    uid_t creator_uid;
    gid_t creator_gid;
    unsigned long ns_flags;
    pid_t parent_pid;
    bool dry_run; /* probe: full setup, then C2 exits 0 instead of exec */
    bool egress;  /* networked: C1 brings lo up and sends P a socket
                     listening on 127.0.0.1:IPD_SANDBOX_EGRESS_PORT */
    /* descriptors (child ends) */
    int ctl, out_w, err_w, in_r;
    int extra_fd; /* fd 3 in C2: a zygote's command socket, or a
                     streamed run's call socket (calls.h); else -1 */
    int procs_fd[4];
};

/* C0, in the clone3 child P just made (child.c): build the tree and
 * exit.  Never returns; allocates nothing. */
IPD_NORETURN void ipd__sandbox_c0_main(struct plan *pl);

/* What differs for a zygote's run (zygote.c); NULL for any other. */
struct ipd__run_extra {
    int fd; /* given to the program as fd 3; P closes it once the
               children have it */
};

/* ipd_sandbox_run (run.c); with dry_run the whole setup happens but C2
 * exits 0 instead of exec (the probe's trial run); x: a zygote's. */
enum ipd_err ipd__sandbox_run(const struct ipd_sandbox_config *cfg,
                              const struct ipd_sandbox_policy *policy,
                              const struct ipd_sandbox_spec *spec, bool dry_run,
                              const struct ipd__run_extra *x,
                              struct ipd_sandbox_result *out);

/* The policy with its zero fields from the defaults (run.c). */
void ipd__policy_complete(const struct ipd_sandbox_policy *in,
                          struct ipd_sandbox_policy *p);
/* tmpfs options of a run's /tmp and /mnt/output (run.c). */
void ipd__tmpfs_opts(const struct ipd_sandbox_config *cfg,
                     const struct ipd_sandbox_policy *p, char *tmp,
                     size_t tmplen, char *out, size_t outlen);

/* A parked child (zygote.c), seen from P until it runs (run.c). */
struct ipd_sandbox_parked {
    struct ipd_sandbox_policy p; /* completed; name borrowed */
    struct ipd__cgroup_run cgr;  /* its own, attached at park */
    int ctl;                     /* P's end of its control socket */
    int out_r, err_r;
    int pidfd;  /* its init's (not P's child) */
    pid_t pid;  /* its init's host pid */
    int outdir; /* its /mnt/output (MSG_OUTDIR) */
};
/* Wait (bounded) until the process behind pidfd, not P's child, has
 * been reaped by its parent (run.c). */
void ipd__wait_reaped(int pidfd);
/* Kill a parked child's tree (cgroup and init).  Safe to repeat. */
void ipd__parked_kill(struct ipd_sandbox_parked *pk);

#endif
