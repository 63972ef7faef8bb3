/*
 * sandbox.h - run one program in a fresh, locked-down process tree.
 *
 * Isolation model (details in child.c):
 *   - new user, pid, mount, IPC, UTS, cgroup and network namespaces: a
 *     run never shares the host's network; a networked one gets its own
 *     loopback and one way out, the egress socket (spec->egress);
 *   - uid/gid inside (default 1000) map to ONE unprivileged host uid/gid
 *     (default 200000 when interpd runs as root; the caller's own ids when
 *     it does not), setgroups denied, supplementary groups dropped;
 *   - a read-only tmpfs root holding read-only binds, a generated /etc,
 *     /dev/{null,zero,urandom}, a fresh /proc of the pid namespace, a
 *     size- and inode-limited /tmp and /mnt/output, after pivot_root;
 *   - no capabilities (bounding, ambient, effective, permitted,
 *     inheritable), no_new_privs, a seccomp filter that fails closed;
 *   - memory and process limits from a per-run cgroup (v2 where the
 *     controllers are delegated, v1 otherwise), RLIMIT_CPU/FSIZE/NOFILE,
 *     no core dumps;
 *   - a wall timeout owned by the caller's thread that kills the whole
 *     tree (cgroup.kill, and the pid namespace's init), after which no
 *     process of the run survives when ipd_sandbox_run returns.
 *
 * Output directory: /mnt/output is a tmpfs created inside the sandbox's
 * mount namespace (so its size limit is a real filesystem limit and no
 * host mount is needed).  The sandbox's setup sends an open directory
 * descriptor of it to the caller over a unix socket (SCM_RIGHTS); the
 * descriptor keeps the filesystem alive after the tree is gone.  The
 * caller never sees a host path the sandbox controls: collect with
 * ipd_sandbox_output_open() (openat2 RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS)
 * or openat(O_NOFOLLOW) one component at a time.
 *
 * Thread-safety: a probed config is read-only and may be shared by any
 * number of threads running ipd_sandbox_run concurrently.  The process
 * must not reap children it did not start (no waitpid(-1)).
 */
#ifndef IPD_SANDBOX_H
#define IPD_SANDBOX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "../common/buf.h"
#include "../common/ipd.h"
#include "zproto.h"

/* Mechanisms found by ipd_sandbox_probe. */
enum ipd_sandbox_mech {
    IPD_SANDBOX_USERNS = 1 << 0,      /* user namespaces with id maps */
    IPD_SANDBOX_SECCOMP = 1 << 1,     /* filter compiled and loadable */
    IPD_SANDBOX_CG2_KILL = 1 << 2,    /* v2 cgroup with cgroup.kill */
    IPD_SANDBOX_CG2_MEMORY = 1 << 3,  /* v2 memory.max delegated */
    IPD_SANDBOX_CG2_PIDS = 1 << 4,    /* v2 pids.max delegated */
    IPD_SANDBOX_CG1_MEMORY = 1 << 5,  /* v1 memory controller */
    IPD_SANDBOX_CG1_PIDS = 1 << 6,    /* v1 pids controller */
    IPD_SANDBOX_CG1_CPUACCT = 1 << 7, /* v1 cpuacct (CPU time of the tree) */
    IPD_SANDBOX_CGROUPNS = 1 << 8,    /* CLONE_NEWCGROUP */
    IPD_SANDBOX_CG2_CPU = 1 << 9,     /* v2 cpu.max delegated */
    IPD_SANDBOX_CG1_CPU = 1 << 10,    /* v1 cpu controller (CFS quota) */
};

struct ipd_sandbox_state; /* private: compiled filters, cgroup parents */

/*
 * Host-wide settings, filled by the caller, completed by ipd_sandbox_probe
 * and released with ipd_sandbox_config_release.  Zero means "default".
 */
struct ipd_sandbox_config {
    uid_t host_uid;          /* host uid the sandbox runs as (default 200000
                                as root; must be the own uid otherwise) */
    gid_t host_gid;          /* likewise (default: host_uid) */
    uid_t inner_uid;         /* uid seen inside (default 1000) */
    gid_t inner_gid;         /* gid seen inside (default 1000) */
    const char *cgroup_name; /* borrowed; parent cgroup created under the
                                process's own cgroup in every hierarchy
                                used (default "interpd-sandbox") */
    /* OUT: */
    unsigned mechanisms; /* enum ipd_sandbox_mech bits */
    char status[512];    /* "sandbox: userns uid 1000->200000, ..." */
    struct ipd_sandbox_state *state; /* owned; freed by _release */
};

/*
 * A staging area: as root, a tmpfs the caller's thread makes (fsopen,
 * fsmount) and never attaches anywhere on the host, so no host path leads
 * to it and a run that is handed a directory of it sees only that
 * directory's path inside the stage ("/job") in /proc/self/mountinfo.
 * The caller fills it through ipd_sandbox_stage_fd (openat, mkdirat:
 * never a path, no symlink followed out of it).  Its memory is the
 * service's (charged to the service's cgroup, swappable) until the stage
 * is freed and the last run it was handed to is gone.  Without root (no
 * CAP_SYS_ADMIN for fsopen) it is a 0700 directory made with mkdtemp
 * under fallback_dir instead, owned by the service, whose uid the
 * sandbox then has: a run sees that host path.
 * Thread-safety: one thread fills a stage; any number of runs may be
 * handed directories of it at once; free it after they returned.
 */
struct ipd_sandbox_stage;
struct ipd_live;

/* bytes, inodes: the tmpfs's size and inode limits (not reserved).
 * IPD_ERR_INTERNAL with the reason in err when neither works. */
enum ipd_err ipd_sandbox_stage_new(int64_t bytes, int64_t inodes,
                                   const char *fallback_dir,
                                   struct ipd_sandbox_stage **out, char *err,
                                   size_t errlen);
/* A directory fd of the stage's root (borrowed; valid until freed). */
int ipd_sandbox_stage_fd(const struct ipd_sandbox_stage *st);
/* Release the stage (the fallback directory is removed).  NULL is fine. */
void ipd_sandbox_stage_free(struct ipd_sandbox_stage *st);
/* True for a detached tmpfs, false for the fallback directory (or NULL). */
bool ipd_sandbox_stage_detached(const struct ipd_sandbox_stage *st);
/*
 * Copy the tree at host_dir into a new directory name (one component) at
 * the stage's root: directories, regular files, symlinks (as they are,
 * never followed), owners, modes and times (a .pyc stays valid against
 * its source's mtime); a file with several links inside the tree becomes
 * as many links of one copy.  Devices, fifos and sockets are skipped.
 * The caller's thread reads host_dir with its own rights.
 * IPD_ERR_TOO_LARGE when the stage's size or inode limit ran out,
 * IPD_ERR_IO for anything else; the reason is in err either way and a
 * partial copy is left (free the stage).
 */
enum ipd_err ipd_sandbox_stage_copy(struct ipd_sandbox_stage *st,
                                    const char *name, const char *host_dir,
                                    char *err, size_t errlen);
/*
 * True when dir (resolved) is where a filesystem's root is mounted in the
 * service's mount namespace (the last mount there; "/" in mountinfo's
 * root field): a bind of anything in it shows only paths below that
 * root in a run's /proc/self/mountinfo.
 */
bool ipd_sandbox_is_fs_root(const char *dir);

/* One bind mount.  Strings are borrowed for the duration of the run. */
struct ipd_sandbox_mount {
    const char *host_path;    /* absolute; symlinks are resolved, except
                                 that a host path that IS a symlink (/lib ->
                                 usr/lib) is recreated as the same symlink.
                                 As root the caller's thread copies the tree
                                 (open_tree), so the directories above it
                                 need not be searchable by host_uid.  With
                                 stage: a relative path inside the stage
                                 (no "..", no symlink followed) */
    const char *sandbox_path; /* absolute, no ".." */
    bool writable;            /* false: read-only, nosuid, nodev */
    const struct ipd_sandbox_stage *stage; /* borrowed; NULL: a host path */
};

/* A named capability policy.  0 for a limit means the built-in default
 * shown in ipd_sandbox_policy_default. */
struct ipd_sandbox_policy {
    const char *name;          /* borrowed, e.g. "standard" */
    int64_t wall_timeout_ms;   /* killed (whole tree) after this */
    int64_t cpu_seconds;       /* RLIMIT_CPU per process */
    int64_t memory_bytes;      /* cgroup memory limit of the tree */
    int64_t max_processes;     /* cgroup pids limit of the tree */
    size_t output_cap_bytes;   /* per stream; the rest is drained */
    int64_t tmp_bytes;         /* /tmp tmpfs size */
    int64_t tmp_inodes;        /* /tmp tmpfs inodes */
    int64_t output_dir_bytes;  /* /mnt/output tmpfs size */
    int64_t output_dir_inodes; /* /mnt/output tmpfs inodes */
    int64_t fsize_bytes;       /* RLIMIT_FSIZE */
    int64_t nofile;            /* RLIMIT_NOFILE */
    int64_t cpu_millis;        /* CPU share of the tree, 1000 = one core
                                  (v2 cpu.max, else v1 CFS quota) */
    int64_t sigpending;        /* RLIMIT_SIGPENDING (queued signals and
                                  POSIX timers of the run's host uid) */
    int64_t msgqueue_bytes;    /* RLIMIT_MSGQUEUE (POSIX mqueue bytes) */
    bool network;              /* loopback up, the egress socket
                                  (spec->egress), AF_INET/AF_INET6/
                                  AF_NETLINK sockets allowed */
};

/* Defaults: 30 s wall, 30 s CPU, 512 MiB memory, 64 processes, 100 KiB
 * per stream, /tmp 64 MiB / 4096 inodes, /mnt/output 64 MiB / 4096
 * inodes, 64 MiB fsize, 256 files, one core, 256 pending signals, 256 KiB
 * of message queues, no network. */

/* The port of a networked run's egress socket, on 127.0.0.1 inside the
 * run's own network namespace (nothing else listens there). */
#define IPD_SANDBOX_EGRESS_PORT 3128
void ipd_sandbox_policy_default(struct ipd_sandbox_policy *p);

/* The RLIMIT_CPU (seconds) of a run with the wall timeout wall_ms:
 * RLIMIT_CPU is per process, so it never fires before the wall does. */
static inline int64_t ipd_sandbox_cpu_seconds(int64_t wall_ms)
{
    return (wall_ms + 999) / 1000 + 1;
}

/* What to run.  All pointers are borrowed for the duration of the run. */
struct ipd_sandbox_spec {
    const char *const *argv; /* NULL-terminated; argv[0] an absolute path
                                inside the sandbox */
    const char *const *env;  /* NULL-terminated "K=V" (may be NULL); added
                                to the defaults, overriding equal keys:
                                PATH, HOME=/tmp, LANG=C.UTF-8, TMPDIR,
                                PYTHONUNBUFFERED=1, PYTHONDONTWRITEBYTECODE=1,
                                OPENBLAS/OMP/MKL_NUM_THREADS=1, MPLBACKEND=Agg,
                                MPLCONFIGDIR=/tmp/matplotlib */
    const struct ipd_sandbox_mount *mounts; /* read-only binds etc. */
    size_t n_mounts;
    const char *cwd;        /* default "/mnt/output" */
    const void *stdin_data; /* NULL: stdin is /dev/null */
    size_t stdin_len;
    /* This run's host uid and gid (an execution slot's); 0: the
     * config's (host_gid 0 with a host_uid: the same number).  Only as
     * root; never 0.  Per-uid kernel budgets (pipe pages, fds in flight,
     * and through the user namespace's owner: pending signals, mqueue
     * bytes, inotify, processes) are this uid's. */
    uid_t host_uid;
    gid_t host_gid;
    /* Networked runs only (policy network).  Every run has its own
     * network namespace; a networked one gets its loopback up and, made
     * by its init before the program starts, a TCP socket listening on
     * 127.0.0.1:IPD_SANDBOX_EGRESS_PORT inside that namespace: the run's
     * only way out.  egress is called at most once, on the calling
     * thread during ipd_sandbox_run, with that socket, which it then
     * owns (it may accept on it from any thread; the program's
     * connections wait in the backlog until it does, and are refused
     * once it is closed).  NULL: the socket is closed at once and the
     * run reaches nothing outside itself. */
    void (*egress)(void *ctx, int listen_fd);
    void *egress_ctx;
    /* The execution's live channel (service/common/live.h), borrowed, or
     * NULL: the run is killed as at a timeout once it is cancelled
     * (result cancelled), and its output goes to the channel as it is
     * read, only while the channel has room (else the pipes fill and the
     * program blocks, its wall clock running). */
    struct ipd_live *live;
};

/* Result of a run; release with ipd_sandbox_result_release. */
struct ipd_sandbox_result {
    int exit_code;    /* exit status, or -1 when signalled */
    int term_signal;  /* signal that ended the program, else 0 */
    bool timed_out;   /* killed at the wall timeout */
    bool cancelled;   /* killed, or interrupted, for the live channel's
                         cancel */
    bool interrupted; /* a session call that answered its cancel's SIGINT
                         (not killed) */
    bool oom_killed;  /* the cgroup counted an OOM kill */
    double wall_seconds;
    double cpu_seconds;        /* user+sys of the whole tree */
    int64_t max_rss_kib;       /* largest RSS of a reaped process */
    int64_t memory_peak_bytes; /* cgroup peak, or 0 if unknown */
    struct ipd_buf out;        /* owned; stdout, at most output_cap_bytes */
    struct ipd_buf err;        /* owned; stderr, likewise */
    bool out_truncated;
    bool err_truncated;
    bool warm;        /* a parked child of a zygote ran it */
    int output_dirfd; /* owned; O_DIRECTORY fd of the sandbox's
                         /mnt/output tmpfs, or -1 */
    char error[256];  /* why setup failed (IPD_ERR_INTERNAL) */
};

/*
 * Detect the mechanisms, compile the seccomp filters, create the parent
 * cgroups.  Fails (IPD_ERR_UNAVAILABLE, reason in cfg->status) when a
 * required mechanism is missing: user namespaces, seccomp, a memory limit
 * and a process limit (v2 or v1).  Call once at startup; on failure still
 * call ipd_sandbox_config_release.
 */
enum ipd_err ipd_sandbox_probe(struct ipd_sandbox_config *cfg);
/*
 * Check that the host ids first..first+count-1 (uids and the gids of the
 * same numbers) belong to nobody: no passwd or group entry (NSS, so LDAP
 * too).  IPD_ERR_UNAVAILABLE with the id and its owner in why.  A process
 * already running under one of the uids is logged as a warning (another
 * interpd with the same range shares its budgets), not refused.  Files
 * owned by the range are not searched for: that is the operator's promise
 * (docs/DEPLOYMENT.md).
 */
enum ipd_err ipd_sandbox_check_ids(uid_t first, unsigned count, char *why,
                                   size_t whylen);

/* Free what probe allocated; removes nothing on disk (the parent cgroups
 * are reused by the next start).  Accepts a never-probed config. */
void ipd_sandbox_config_release(struct ipd_sandbox_config *cfg);

/*
 * Run spec->argv in a new sandbox under policy p and wait for it.
 * Returns IPD_OK when the program ran (whatever its exit status, timeout
 * or OOM: see out); IPD_ERR_INVALID for a bad spec or policy;
 * IPD_ERR_INTERNAL (out->error says which step) when the sandbox could
 * not be set up, in which case the program never ran.  In every case *out
 * is initialised and must be released with ipd_sandbox_result_release.
 * Blocks the calling thread for at most the wall timeout plus a bounded
 * cleanup.
 */
enum ipd_err ipd_sandbox_run(const struct ipd_sandbox_config *cfg,
                             const struct ipd_sandbox_policy *p,
                             const struct ipd_sandbox_spec *spec,
                             struct ipd_sandbox_result *out);

/*
 * Warm runs (docs/SANDBOX.md, "Warm, cold and session runs").
 *
 * A zygote is a long-lived program run like any other (ipd_sandbox_run's
 * namespaces, mounts, limits and ids: ipd_sandbox_zygote_run), except
 * that its seccomp filter also lets it unshare namespaces, mount, and
 * change capabilities inside namespaces it makes, and that it gets a
 * command socket as fd 3.  It holds no request data.  On each park
 * command it forks a child that makes itself a fresh user, mount, pid,
 * IPC, UTS, network and cgroup namespace, mounts its own /proc, /tmp and
 * /mnt/output and the stage mounts the park names, is attached by the
 * service to a cgroup of its own, then drops every capability, loads the
 * same filter as a cold run on top of the zygote's, forks the program
 * child and waits.  Everything but the request is done when the request
 * comes: ipd_sandbox_parked_run only says go and supervises, as
 * ipd_sandbox_run does.  The zygote's side is service/exec/python/
 * zygote.py; the wire protocol is in zygote.c.
 *
 * Thread-safety: one thread runs the zygote (ipd_sandbox_zygote_run
 * blocks for its life); any thread may park and wait for readiness; a
 * parked child is used by one thread.
 */
struct ipd_sandbox_zygote;
struct ipd_sandbox_parked;

/* A zygote handle for one zygote run.  IPD_ERR_INTERNAL when its
 * command socket cannot be made. */
enum ipd_err ipd_sandbox_zygote_new(const struct ipd_sandbox_config *cfg,
                                    struct ipd_sandbox_zygote **out);
/*
 * Run the zygote program spec under p (p's wall timeout is the zygote's
 * whole life) on the calling thread until it ends: see ipd_sandbox_run.
 * It ends when its program exits (it does when the command socket
 * closes: ipd_sandbox_zygote_stop), at the timeout, or when killed.
 * Once per handle.
 */
enum ipd_err ipd_sandbox_zygote_run(struct ipd_sandbox_zygote *z,
                                    const struct ipd_sandbox_policy *p,
                                    const struct ipd_sandbox_spec *spec,
                                    struct ipd_sandbox_result *out);
/* Wait up to timeout_ms for the zygote's "ready" (its imports are
 * done).  IPD_OK once it said so (at once after that); IPD_ERR_TIMEOUT;
 * IPD_ERR_UNAVAILABLE when it ended or said it failed (why[]). */
enum ipd_err ipd_sandbox_zygote_wait_ready(struct ipd_sandbox_zygote *z,
                                           int64_t timeout_ms, char *why,
                                           size_t whylen);
/* The text that came with the zygote's "ready" (its warm set's report,
 * zproto.h; untrusted, not NUL-terminated, *len bytes, at most
 * IPD_ZPROTO_REPORT_MAX), borrowed for the handle's life; NULL until
 * it is ready. */
const char *ipd_sandbox_zygote_report(struct ipd_sandbox_zygote *z,
                                      size_t *len);
/* Make the zygote end (its command socket is shut down: it exits); its
 * parked children end with it.  Any thread; repeatable. */
void ipd_sandbox_zygote_stop(struct ipd_sandbox_zygote *z);
/* After ipd_sandbox_zygote_run returned and nobody parks any more. */
void ipd_sandbox_zygote_free(struct ipd_sandbox_zygote *z);

/*
 * Park a child of the zygote for a run under policy p (its limits are
 * set now; the wall timeout is the run's).  mounts: stage mounts only
 * (m->stage set, detached stages: as root), attached read-only or as
 * m->writable says before the request; fill them before
 * ipd_sandbox_parked_run.  Blocks up to timeout_ms for the child's
 * set-up (the cgroup attach is here).  IPD_ERR_UNAVAILABLE when the
 * zygote is gone; IPD_ERR_INVALID for a mount that is not a detached
 * stage; IPD_ERR_INTERNAL otherwise; the reason in err.
 */
#define IPD_SANDBOX_PARK_SESSION 1u /* kept for calls (parked_call) */
enum ipd_err ipd_sandbox_park(struct ipd_sandbox_zygote *z,
                              const struct ipd_sandbox_policy *p,
                              const struct ipd_sandbox_mount *mounts,
                              size_t n_mounts, unsigned flags,
                              const char *rehearse, int64_t timeout_ms,
                              struct ipd_sandbox_parked **out, char *err,
                              size_t errlen);
/*
 * Start the parked child's program and supervise it as ipd_sandbox_run
 * does (timeout_ms: its wall timeout; 0: the policy's; live: as the
 * spec's).  Consumes pk.
 * *out as ipd_sandbox_run's.
 */
enum ipd_err ipd_sandbox_parked_run(struct ipd_sandbox_parked *pk,
                                    int64_t timeout_ms, struct ipd_live *live,
                                    struct ipd_sandbox_result *out);
/*
 * A session's child (parked with IPD_SANDBOX_PARK_SESSION): one call
 * (zproto.h).  verb IPD_ZPROTO_GO runs the job now in its stage mounts
 * in the same interpreter (stdout and stderr new pipes for this call,
 * capped as a run's); IPD_ZPROTO_VARIABLES has it write
 * .interpd/variables.json.  Waits for its answer at most
 * timeout_ms (0: the policy's wall timeout).  *out as ipd_sandbox_run's
 * for this call (output_dirfd a new descriptor of the session's
 * /mnt/output; cpu_seconds and oom_killed this call's; exit_code the
 * call's status).  *ended: the child is gone (it exited, was killed for
 * memory, or timed out here: then killed); free pk then.  pk stays the
 * caller's either way; one call at a time.  live (or NULL): as the
 * spec's, except that a cancel first sends SIGINT to the session's
 * processes (the code sees KeyboardInterrupt) and kills the child (*ended)
 * only when it has not answered 2 s later: out->interrupted says which.
 */
enum ipd_err ipd_sandbox_parked_call(struct ipd_sandbox_parked *pk,
                                     enum ipd_zproto_verb verb,
                                     int64_t timeout_ms, struct ipd_live *live,
                                     struct ipd_sandbox_result *out,
                                     bool *ended);
/* A session child's cgroup memory now (bytes), -1 when unknown. */
int64_t ipd_sandbox_parked_memory(const struct ipd_sandbox_parked *pk);
/* SIGKILL every process of a parked child (its cgroup's, and its init)
 * without waiting for them; pk stays the caller's (free it with
 * ipd_sandbox_parked_free).  Any thread; NULL is fine. */
void ipd_sandbox_parked_kill(struct ipd_sandbox_parked *pk);
/* A parked child not used: killed, its cgroup removed.  NULL is fine. */
void ipd_sandbox_parked_free(struct ipd_sandbox_parked *pk);

/* Free the output buffers and close output_dirfd.  Accepts NULL. */
void ipd_sandbox_result_release(struct ipd_sandbox_result *r);

/*
 * Open relpath below the result's output directory without following any
 * symlink and without leaving the directory (openat2 with RESOLVE_BENEATH
 * | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV).
 * flags are open(2) flags (O_CLOEXEC and O_NOFOLLOW are added).  Returns
 * a new fd the caller closes, or -1 with errno (ELOOP for a symlink).
 */
int ipd_sandbox_output_open(const struct ipd_sandbox_result *r,
                            const char *relpath, int flags);

#endif
