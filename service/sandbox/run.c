/*
 * run.c - one sandboxed run seen from the calling thread (P): the policy
 * and the plan the children follow, the clone of C0, and the supervision
 * (stdin, output pumping under a cap, the wall timeout, killing and
 * reaping the tree) down to the result.  The process tree is described
 * in child.c.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/openat2.h>
#include <linux/sched.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../common/calls.h"
#include "../common/live.h"
#include "../common/util.h"
#include "sandbox_internal.h"

#define MAX_ENV 128
#define KILL_GRACE_MS 5000 /* after SIGKILL, the tree must be gone */
/* A cancelled session call: SIGINT, again every INTERRUPT_EVERY_MS, and
 * the kill INTERRUPT_GRACE_MS after the first. */
#define INTERRUPT_GRACE_MS 2000
#define INTERRUPT_EVERY_MS 200

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
    p->cpu_millis = 1000;
    p->sigpending = 256;
    p->msgqueue_bytes = 256 << 10;
    p->network = false;
}

/* Fill zero fields of *p from the defaults. */
void ipd__policy_complete(const struct ipd_sandbox_policy *in,
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
    DEF(cpu_millis);
    DEF(sigpending);
    DEF(msgqueue_bytes);
#undef DEF
    if (!p->output_cap_bytes)
        p->output_cap_bytes = d.output_cap_bytes;
}

static bool sandbox_path_ok(const char *p)
{
    static const char *const reserved[] = {"/",
                                           "/proc",
                                           "/dev",
                                           "/tmp",
                                           "/mnt/output",
                                           "/etc/passwd",
                                           "/etc/group",
                                           "/etc/hosts",
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

/* A detached copy of the tree at real, made with P's view and rights
 * (open_tree): C1 moves it into place, so no directory above it has to
 * be searchable by the sandbox's uid (a data dir under /root, 0700).
 * Making one needs CAP_SYS_ADMIN: a service that is not root gets -1 and
 * C1 binds the path itself, as the service's own uid, which the sandbox
 * runs as then anyway.  -1 with errno for any other failure. */
static int clone_tree(const char *real, bool *fallback)
{
    int fd = open_tree(AT_FDCWD, real,
                       OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_RECURSIVE);

    *fallback = fd < 0 && (errno == EPERM || errno == ENOSYS);
    return fd;
}

/* A directory or file of a detached stage: P's clone of it (the
 * stage's own paths are all a run sees).  A path of the fallback
 * directory goes the host-path way (*host gets it). */
static enum ipd_err plan_stage_mount(struct plan_mount *pm,
                                     const struct ipd_sandbox_mount *m,
                                     char *host, char *err, size_t errlen)
{
    const struct ipd_sandbox_stage *st = m->stage;
    char probe[PATH_MAX + 2];
    struct stat sb;

    snprintf(probe, sizeof probe, "/%s", m->host_path);
    if (m->host_path[0] == '/' || !sandbox_path_ok(probe)) {
        snprintf(err, errlen, "bad stage path %s", m->host_path);
        return IPD_ERR_INVALID;
    }
    if (!st->detached) {
        if ((size_t)snprintf(host, PATH_MAX, "%s/%s", st->dir, m->host_path) >=
            PATH_MAX) {
            snprintf(err, errlen, "stage path %s: too long", m->host_path);
            return IPD_ERR_INVALID;
        }
        return IPD_OK;
    }
    errno = 0;
    if (fstatat(st->fd, m->host_path, &sb, AT_SYMLINK_NOFOLLOW) != 0 ||
        (!S_ISDIR(sb.st_mode) && !S_ISREG(sb.st_mode))) {
        snprintf(err, errlen, "stage path %s: %s", m->host_path,
                 errno ? strerror(errno) : "not a file or directory");
        return IPD_ERR_INVALID;
    }
    pm->is_dir = S_ISDIR(sb.st_mode);
    snprintf(pm->src, sizeof pm->src, "stage:%s", m->host_path);
    pm->tree_fd = open_tree(st->fd, m->host_path,
                            OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_RECURSIVE |
                                AT_SYMLINK_NOFOLLOW);
    if (pm->tree_fd < 0) {
        snprintf(err, errlen, "stage path %s: open_tree: %s", m->host_path,
                 strerror(errno));
        return IPD_ERR_INTERNAL;
    }
    return IPD_OK;
}

/* One mount of the spec into pm: the symlink it is, or the file or
 * directory it resolves to (a tree fd, else a path for C1). */
static enum ipd_err plan_mount(struct plan_mount *pm,
                               const struct ipd_sandbox_mount *m, char *err,
                               size_t errlen)
{
    char real[PATH_MAX], staged[PATH_MAX];
    struct stat sb;
    bool fallback = false;
    const char *host = m->host_path;

    if (m->host_path && m->stage) {
        enum ipd_err rc;
        staged[0] = '\0';
        snprintf(pm->dst, sizeof pm->dst, "/newroot%s",
                 m->sandbox_path ? m->sandbox_path : "");
        pm->writable = m->writable;
        if (!sandbox_path_ok(m->sandbox_path)) {
            snprintf(err, errlen, "bad mount stage:%s", m->host_path);
            return IPD_ERR_INVALID;
        }
        rc = plan_stage_mount(pm, m, staged, err, errlen);
        if (rc || !staged[0])
            return rc;
        host = staged;
    }
    if (!host || host[0] != '/' || !sandbox_path_ok(m->sandbox_path)) {
        snprintf(err, errlen, "bad mount %s -> %s", host ? host : "(null)",
                 m->sandbox_path ? m->sandbox_path : "(null)");
        return IPD_ERR_INVALID;
    }
    snprintf(pm->dst, sizeof pm->dst, "/newroot%s", m->sandbox_path);
    pm->writable = m->writable;
    if (lstat(host, &sb) != 0)
        goto fail_errno;
    if (S_ISLNK(sb.st_mode)) {
        ssize_t n = readlink(host, pm->link, sizeof pm->link - 1);
        if (n < 0)
            goto fail_errno;
        pm->link[n] = '\0';
        pm->is_link = true;
        return IPD_OK;
    }
    if (!realpath(host, real) || stat(real, &sb) != 0)
        goto fail_errno;
    pm->is_dir = S_ISDIR(sb.st_mode);
    if (!pm->is_dir && !S_ISREG(sb.st_mode)) {
        snprintf(err, errlen, "mount source %s: not a file or directory", host);
        return IPD_ERR_INVALID;
    }
    if ((size_t)snprintf(pm->src, sizeof pm->src, "/oldroot%s", real) >=
        sizeof pm->src) {
        snprintf(err, errlen, "mount source %s: path too long", host);
        return IPD_ERR_INVALID;
    }
    pm->tree_fd = clone_tree(real, &fallback);
    if (pm->tree_fd < 0 && !fallback) {
        snprintf(err, errlen, "mount source %s: open_tree: %s", host,
                 strerror(errno));
        return IPD_ERR_INTERNAL;
    }
    return IPD_OK;
fail_errno:
    snprintf(err, errlen, "mount source %s: %s", host, strerror(errno));
    return IPD_ERR_INVALID;
}

static enum ipd_err plan_mounts(struct plan *pl,
                                const struct ipd_sandbox_spec *spec, char *err,
                                size_t errlen)
{
    if (spec->n_mounts > IPD__SANDBOX_MAX_MOUNTS) {
        snprintf(err, errlen, "too many mounts (%zu > %d)", spec->n_mounts,
                 IPD__SANDBOX_MAX_MOUNTS);
        return IPD_ERR_INVALID;
    }
    pl->mounts =
        ipd_xcalloc(spec->n_mounts ? spec->n_mounts : 1, sizeof *pl->mounts);
    pl->n_mounts = spec->n_mounts;
    for (size_t i = 0; i < spec->n_mounts; i++)
        pl->mounts[i].tree_fd = -1;
    for (size_t i = 0; i < spec->n_mounts; i++) {
        enum ipd_err rc =
            plan_mount(&pl->mounts[i], &spec->mounts[i], err, errlen);
        if (rc)
            return rc;
    }
    /* Parents before children: "/usr" sorts before "/usr/lib". */
    qsort(pl->mounts, pl->n_mounts, sizeof *pl->mounts, cmp_mount);
    return IPD_OK;
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
    return ea && eb && ea - a == eb - b && memcmp(a, b, (size_t)(ea - a)) == 0;
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
    pl->envp =
        ipd_xcalloc(IPD_ARRAY_LEN(default_env) + extra + 1, sizeof *pl->envp);
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
    for (size_t i = 0; pl->mounts && i < pl->n_mounts; i++) {
        if (pl->mounts[i].tree_fd >= 0)
            close(pl->mounts[i].tree_fd);
    }
    free(pl->mounts);
    free(pl->envp);
    pl->mounts = NULL;
    pl->envp = NULL;
}

/* The run's host ids: the spec's (gid 0: the uid's number), else the
 * config's. */
static void run_ids(const struct ipd_sandbox_config *cfg,
                    const struct ipd_sandbox_spec *spec, uid_t *uid, gid_t *gid)
{
    *uid = spec->host_uid ? spec->host_uid : cfg->host_uid;
    *gid = spec->host_gid   ? spec->host_gid
           : spec->host_uid ? (gid_t)spec->host_uid
                            : cfg->host_gid;
}

void ipd__tmpfs_opts(const struct ipd_sandbox_config *cfg,
                     const struct ipd_sandbox_policy *p, char *tmp,
                     size_t tmplen, char *out, size_t outlen)
{
    snprintf(tmp, tmplen, "mode=1777,size=%lld,nr_inodes=%lld",
             (long long)p->tmp_bytes, (long long)p->tmp_inodes);
    snprintf(out, outlen, "mode=0755,uid=%u,gid=%u,size=%lld,nr_inodes=%lld",
             (unsigned)cfg->inner_uid, (unsigned)cfg->inner_gid,
             (long long)p->output_dir_bytes, (long long)p->output_dir_inodes);
}

static enum ipd_err plan_build(struct plan *pl,
                               const struct ipd_sandbox_config *cfg,
                               const struct ipd_sandbox_policy *p,
                               const struct ipd_sandbox_spec *spec, char *err,
                               size_t errlen)
{
    enum ipd_err rc;
    const struct ipd_sandbox_state *st = cfg->state;
    uid_t host_uid;
    gid_t host_gid;

    memset(pl, 0, sizeof *pl);
    pl->ctl = pl->out_w = pl->err_w = pl->in_r = pl->extra_fd = -1;
    for (size_t i = 0; i < IPD_ARRAY_LEN(pl->procs_fd); i++)
        pl->procs_fd[i] = -1;
    pl->st = st;
    pl->bpf = p->network ? &st->bpf_net : &st->bpf_nonet;
    pl->argv = (char *const *)(uintptr_t)spec->argv;
    pl->cwd = spec->cwd ? spec->cwd : "/mnt/output";
    pl->inner_uid = cfg->inner_uid;
    pl->inner_gid = cfg->inner_gid;
    run_ids(cfg, spec, &host_uid, &host_gid);
    snprintf(pl->uid_map, sizeof pl->uid_map, "%u %u 1\n",
             (unsigned)cfg->inner_uid, (unsigned)host_uid);
    snprintf(pl->gid_map, sizeof pl->gid_map, "%u %u 1\n",
             (unsigned)cfg->inner_gid, (unsigned)host_gid);
    if (geteuid() == 0) {
        pl->creator_uid = host_uid;
        pl->creator_gid = host_gid;
    }
    ipd__tmpfs_opts(cfg, p, pl->tmp_opts, sizeof pl->tmp_opts, pl->out_opts,
                    sizeof pl->out_opts);
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
    pl->rl_sigpending.rlim_cur = pl->rl_sigpending.rlim_max =
        (rlim_t)p->sigpending;
    pl->rl_msgqueue.rlim_cur = pl->rl_msgqueue.rlim_max =
        (rlim_t)p->msgqueue_bytes;
    /* Never the host's network namespace: a networked run's way out is
     * the egress socket C1 makes (sandbox.h), not the host's loopback. */
    pl->ns_flags = CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNS | CLONE_NEWIPC |
                   CLONE_NEWUTS | CLONE_NEWNET |
                   (st->cgroupns ? CLONE_NEWCGROUP : 0);
    pl->egress = p->network;
    pl->parent_pid = getpid();
    rc = plan_mounts(pl, spec, err, errlen);
    if (rc)
        return rc;
    return plan_env(pl, spec, err, errlen);
}

/* A run's own host ids: only as root (otherwise only the own ids can be
 * mapped, and they are the config's), never root's. */
static enum ipd_err validate_ids(const struct ipd_sandbox_config *cfg,
                                 const struct ipd_sandbox_spec *spec, char *err,
                                 size_t errlen)
{
    uid_t uid;
    gid_t gid;

    run_ids(cfg, spec, &uid, &gid);
    if (uid == 0 || gid == 0 || uid == (uid_t)-1 || gid == (gid_t)-1 ||
        (geteuid() != 0 && (uid != cfg->host_uid || gid != cfg->host_gid))) {
        snprintf(err, errlen, "host ids %u/%u can't be a run's", (unsigned)uid,
                 (unsigned)gid);
        return IPD_ERR_INVALID;
    }
    return IPD_OK;
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
        p->wall_timeout_ms < 0 || p->nofile < 0 || p->nofile > 1 << 20 ||
        p->cpu_millis < 0 || p->cpu_millis > 1 << 20 || p->sigpending < 0 ||
        p->msgqueue_bytes < 0) {
        snprintf(err, errlen, "bad policy %s", p->name ? p->name : "");
        return IPD_ERR_INVALID;
    }
    return validate_ids(cfg, spec, err, errlen);
}

/* Supervision state of one run in P. */
struct run {
    struct ipd_sandbox_result *out;
    size_t cap;
    int out_r, err_r, in_w, ctl;
    int pidfd; /* C0 */
    pid_t c1;  /* the namespace's init, P's child; 0 until known */
    int c1fd;  /* its pidfd */
    const unsigned char *in_data;
    size_t in_len, in_off;
    bool c0_done, c1_done, got_status, setup_error, timed_out, killed;
    bool foreign; /* a parked child's init: not P's child, so never
                     waited for; its pidfd says when it is gone */
    int status;
    struct rusage ru_all; /* C1's report: its reaped descendants */
    struct rusage ru_c1;  /* wait4 on C1: the whole tree, even if killed */
    long hwm_kib;         /* peak RSS of the tree's largest process, read
                             just before a timeout kill (0: unknown) */
    void (*egress)(void *ctx, int listen_fd); /* spec's; NULL: none */
    void *egress_ctx;
    bool egress_given;       /* the egress socket arrived (at most once) */
    struct ipd_live *live;   /* borrowed, or NULL: its cancel and stream */
    bool cancelled;          /* killed (or interrupted) for a cancel */
    bool last_drain;         /* what is left is read whatever the stream's
                                room (the run is over or killed) */
    struct ipd_calls *calls; /* the call socket's service end, or NULL */
};

/* What may be read for the stream now (SIZE_MAX: no bound). */
static size_t stream_room(struct run *r)
{
    return r->killed || r->last_drain ? SIZE_MAX : ipd_live_room(r->live);
}

/* stream: 1 stdout, 2 stderr (the live channel's). */
static void drain(struct run *r, int *fd, struct ipd_buf *b, bool *trunc,
                  int stream)
{
    char chunk[65536];
    /* A few reads per wakeup, so one chatty stream does not starve the
     * other or the deadline. */
    for (int i = 0; i < 16; i++) {
        /* A streamed run's output waits for its client, bounded: no
         * room, no read (the pipe fills and the program blocks). */
        size_t live_room = stream_room(r);
        if (!live_room)
            return;
        ssize_t n = read(*fd, chunk,
                         live_room < sizeof chunk ? live_room : sizeof chunk);
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
        ipd_live_output(r->live, stream, chunk, take);
        if (take < (size_t)n)
            *trunc = true; /* keep draining: never kill for printing */
    }
}

static void feed_stdin(struct run *r)
{
    while (r->in_off < r->in_len) {
        size_t len = r->in_len - r->in_off;
        ssize_t n =
            write(r->in_w, r->in_data + r->in_off, len > 65536 ? 65536 : len);
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

/* A networked run's egress socket: the caller's from now on. */
static void take_egress(struct run *r, int fd)
{
    r->egress_given = true;
    r->egress(r->egress_ctx, fd);
}

static void read_ctl(struct run *r)
{
    struct ipd_zproto_ctl m;
    size_t nfds = 0;
    int fd = -1;
    ssize_t n;

    n = ipd__fdpass_recv(r->ctl, &m, sizeof m, MSG_DONTWAIT, &fd, 1, &nfds);
    if (n < 0 && (errno == EINTR || errno == EAGAIN))
        return;
    if (n <= 0) {
        ipd_close_fd(&r->ctl);
        return;
    }
    /* Only a whole message of its kind brings a descriptor we keep. */
    if ((size_t)n != sizeof m) {
        ipd_close_fd(&fd);
        return;
    }
    if (nfds && m.kind == IPD_ZPROTO_CTL_OUTDIR && r->out->output_dirfd < 0)
        r->out->output_dirfd = fd;
    else if (nfds && m.kind == IPD_ZPROTO_CTL_EGRESS && !r->egress_given &&
             r->egress)
        take_egress(r, fd);
    else
        ipd_close_fd(&fd);
    if (m.kind == IPD_ZPROTO_CTL_ERROR && !r->setup_error) {
        r->setup_error = true;
        m.text[sizeof m.text - 1] = '\0';
        snprintf(r->out->error, sizeof r->out->error, "sandbox setup: %s",
                 m.text);
    } else if (m.kind == IPD_ZPROTO_CTL_INIT && r->c1 == 0 && m.status > 0) {
        /* C1 is our unreaped child: the pid cannot be recycled. */
        r->c1 = (pid_t)m.status;
        r->c1fd = (int)syscall(SYS_pidfd_open, r->c1, 0);
        if (r->c1fd < 0) {
            snprintf(r->out->error, sizeof r->out->error, "pidfd_open: %s",
                     strerror(errno));
            r->setup_error = true;
            kill(r->c1, SIGKILL);
        }
    } else if (m.kind == IPD_ZPROTO_CTL_STATUS) {
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
    if (!r->c1_done && r->c1 > 0 && r->foreign) {
        struct pollfd pf = {r->c1fd, POLLIN, 0};
        if (poll(&pf, 1, block ? KILL_GRACE_MS : 0) == 1)
            r->c1_done = true;
    } else if (!r->c1_done && r->c1 > 0) {
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

/* The deadline passed.  The init reports no rusage when killed: read the
 * peaks while the processes still exist, then kill. */
static void time_out(struct run *r, const struct ipd__cgroup_run *cgr)
{
    r->timed_out = true;
    r->hwm_kib = ipd__cgroup_run_hwm_kib(cgr);
    kill_tree(r, cgr);
}

/* One wait of a run's poll loop (supervise, call_wait), up to wait_ms:
 * whatever of the run's pipes is ready is drained or fed here; *ctl_in:
 * its control socket is readable; *pid_in: pid0 or pid1 (pidfds, -1:
 * none) is.  A negative fd is left out (poll ignores it).  0, or -1 when
 * poll failed (errno). */
static int wait_once(struct run *r, int64_t wait_ms, int pid0, int pid1,
                     bool *ctl_in, bool *pid_in)
{
    enum { P_OUT, P_ERR, P_IN, P_CTL, P_PID0, P_PID1, P_LIVE, P_CALLS, P_N };
    /* Without room for the stream, the pipes wait (the live fd says
     * when there is room again). */
    bool room = stream_room(r) > 0;
    struct pollfd pfd[P_N] = {{room ? r->out_r : -1, POLLIN, 0},
                              {room ? r->err_r : -1, POLLIN, 0},
                              {r->in_w, POLLOUT, 0},
                              {r->ctl, POLLIN, 0},
                              {pid0, POLLIN, 0},
                              {pid1, POLLIN, 0},
                              {ipd_live_fd(r->live), POLLIN, 0},
                              {-1, 0, 0}};

    *ctl_in = *pid_in = false;
    if (!r->killed)
        ipd_calls_pollfd(r->calls, &pfd[P_CALLS]);
    /* Coalesced output still owed to the stream is due first, and a
     * call's timeout. */
    int64_t due = ipd_live_due(r->live);
    if (due >= 0 && due < wait_ms)
        wait_ms = due;
    due = ipd_calls_due(r->calls, ipd_mono_ms());
    if (due >= 0 && due < wait_ms)
        wait_ms = due;
    if (poll(pfd, P_N, (int)(wait_ms > 0 ? wait_ms : 0)) < 0)
        return errno == EINTR ? 0 : -1;
    ipd_live_flush(r->live);
    if (pfd[P_LIVE].revents)
        ipd_live_fd_clear(r->live);
    if (pfd[P_OUT].revents)
        drain(r, &r->out_r, &r->out->out, &r->out->out_truncated, 1);
    if (pfd[P_ERR].revents)
        drain(r, &r->err_r, &r->out->err, &r->out->err_truncated, 2);
    if (pfd[P_IN].revents)
        feed_stdin(r);
    ipd_calls_io(r->calls, pfd[P_CALLS].revents);
    ipd_calls_tick(r->calls, ipd_mono_ms());
    *ctl_in = pfd[P_CTL].revents != 0;
    *pid_in = pfd[P_PID0].revents || pfd[P_PID1].revents;
    return 0;
}

/* Poll until C0 and C1 are reaped and every pipe is at EOF; the deadline
 * kills the tree, after which everything must end within KILL_GRACE_MS. */
static enum ipd_err supervise(struct run *r, const struct ipd__cgroup_run *cgr,
                              int64_t start_ms, int64_t timeout_ms)
{
    int64_t deadline, hard = 0;

    while (running(r)) {
        int64_t now = ipd_mono_ms();
        bool ctl_in, pid_in;

        /* The clock stops while a call waits for the client. */
        deadline = start_ms + timeout_ms + ipd_calls_paused_ms(r->calls);
        if (!r->killed && now >= deadline) {
            time_out(r, cgr);
            hard = now + KILL_GRACE_MS;
        }
        if (!r->killed && ipd_live_cancelled(r->live)) {
            r->cancelled = true;
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
        if (wait_once(r, (r->killed ? hard : deadline) - now,
                      r->c0_done ? -1 : r->pidfd, r->c1_done ? -1 : r->c1fd,
                      &ctl_in, &pid_in)) {
            snprintf(r->out->error, sizeof r->out->error, "poll: %s",
                     strerror(errno));
            kill_tree(r, cgr);
            return IPD_ERR_INTERNAL;
        }
        if (ctl_in)
            read_ctl(r);
        if (pid_in)
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

/* The stdio pipes and the control socket of one run until the clone.
 * out, err: C2 writes [1], P reads [0]; in: P writes [1] (only with stdin
 * data); ctl: P holds [0], the children [1]. */
struct pipes {
    int out[2], err[2], in[2], ctl[2];
};

/* What every way out of a run leaves initialised, and the run's state. */
static void run_init(struct run *r, struct ipd_sandbox_result *out)
{
    memset(out, 0, sizeof *out);
    memset(r, 0, sizeof *r);
    out->output_dirfd = -1;
    out->exit_code = -1;
    r->out = out;
    r->out_r = r->err_r = r->in_w = r->ctl = r->pidfd = r->c1fd = -1;
    ipd_buf_init(&out->out, IPD_BUF_UNLIMITED);
    ipd_buf_init(&out->err, IPD_BUF_UNLIMITED);
}

/* Create the pipes and the control socket; the children's ends and the
 * v1 cgroup.procs fds go into the plan. */
static enum ipd_err open_pipes(struct pipes *pp, struct plan *pl,
                               const struct ipd_sandbox_spec *spec,
                               const struct ipd__cgroup_run *cgr, char *err,
                               size_t errlen)
{
    if (pipe2(pp->out, O_CLOEXEC) || pipe2(pp->err, O_CLOEXEC) ||
        (spec->stdin_data && pipe2(pp->in, O_CLOEXEC)) ||
        socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pp->ctl)) {
        snprintf(err, errlen, "pipes: %s", strerror(errno));
        return IPD_ERR_INTERNAL;
    }
    pl->out_w = pp->out[1];
    pl->err_w = pp->err[1];
    pl->in_r = pp->in[0];
    pl->ctl = pp->ctl[1];
    for (size_t i = 0; i < IPD_ARRAY_LEN(pl->procs_fd); i++)
        pl->procs_fd[i] = cgr->procs_fd[i];
    return IPD_OK;
}

/* clone3 C0 straight into the run's v2 cgroup (if any), with a pidfd in
 * *pidfd.  Returns in P only; C0 goes on in child.c. */
static enum ipd_err start_c0(struct plan *pl, const struct ipd__cgroup_run *cgr,
                             int *pidfd, char *err, size_t errlen)
{
    struct clone_args ca;
    long pid;

    memset(&ca, 0, sizeof ca);
    ca.flags = CLONE_PIDFD | (cgr->v2_fd >= 0 ? CLONE_INTO_CGROUP : 0);
    ca.pidfd = (uint64_t)(uintptr_t)pidfd;
    ca.exit_signal = SIGCHLD;
    ca.cgroup = cgr->v2_fd >= 0 ? (uint64_t)cgr->v2_fd : 0;
    pid = syscall(SYS_clone3, &ca, sizeof ca);
    if (pid < 0) {
        snprintf(err, errlen, "clone3: %s", strerror(errno));
        return IPD_ERR_INTERNAL;
    }
    if (pid == 0)
        ipd__sandbox_c0_main(pl);
    return IPD_OK;
}

/* After the clone: close the children's ends; P's ends move to the run,
 * non-blocking.  A failure here kills the tree (supervise then ends). */
static void take_ends(struct run *r, struct pipes *pp,
                      const struct ipd_sandbox_spec *spec,
                      const struct ipd__cgroup_run *cgr)
{
    ipd_close_fd(&pp->out[1]);
    ipd_close_fd(&pp->err[1]);
    ipd_close_fd(&pp->in[0]);
    ipd_close_fd(&pp->ctl[1]);
    r->out_r = pp->out[0];
    r->err_r = pp->err[0];
    r->in_w = pp->in[1];
    r->ctl = pp->ctl[0];
    pp->out[0] = pp->err[0] = pp->in[1] = pp->ctl[0] = -1;
    r->in_data = spec->stdin_data;
    r->in_len = spec->stdin_len;
    if (set_nonblock(r->out_r) || set_nonblock(r->err_r) ||
        (r->in_w >= 0 && set_nonblock(r->in_w))) {
        snprintf(r->out->error, sizeof r->out->error, "fcntl: %s",
                 strerror(errno));
        kill_tree(r, cgr);
    }
    if (r->in_w >= 0 && r->in_len == 0)
        ipd_close_fd(&r->in_w);
}

/* The result of a supervised run, from C1's report, the cgroup's
 * counters (-1: unknown) and C1's rusage.  IPD_ERR_INTERNAL when the
 * setup failed or the init ended without a status. */
static enum ipd_err fill_result(const struct run *r, int64_t oom, int64_t cpu,
                                int64_t peak)
{
    struct ipd_sandbox_result *out = r->out;

    out->oom_killed = oom > 0;
    out->timed_out = r->timed_out;
    out->memory_peak_bytes = peak > 0 ? peak : 0;
    if (r->got_status) {
        out->max_rss_kib = r->ru_all.ru_maxrss;
        if (WIFEXITED(r->status)) {
            out->exit_code = WEXITSTATUS(r->status);
        } else if (WIFSIGNALED(r->status)) {
            out->term_signal = WTERMSIG(r->status);
        }
    } else if (r->timed_out || out->oom_killed || r->cancelled) {
        out->term_signal = SIGKILL; /* the tree was killed */
        out->max_rss_kib =
            r->hwm_kib > r->ru_c1.ru_maxrss ? r->hwm_kib : r->ru_c1.ru_maxrss;
    }
    if (cpu >= 0)
        out->cpu_seconds = (double)cpu / 1e6;
    else
        out->cpu_seconds =
            (double)(r->ru_c1.ru_utime.tv_sec + r->ru_c1.ru_stime.tv_sec) +
            (double)(r->ru_c1.ru_utime.tv_usec + r->ru_c1.ru_stime.tv_usec) /
                1e6;
    if (r->setup_error)
        return IPD_ERR_INTERNAL;
    out->cancelled = r->cancelled;
    if (!r->got_status && !r->timed_out && !out->oom_killed && !r->cancelled) {
        snprintf(out->error, sizeof out->error,
                 "sandbox: init ended without a status");
        return IPD_ERR_INTERNAL;
    }
    return IPD_OK;
}

/* A parked child's init is its zygote's init's to reap, not P's: its
 * pidfd turns readable when it exits, while it may still be a zombie of
 * the run's host uid.  Wait, bounded, until it is reaped (newer kernels
 * report POLLHUP on the pidfd then, 6.18 measured; pidfd_send_signal(0)
 * fails with ESRCH on any kernel), so no process of the run exists on
 * return, as after a cold run. */
void ipd__wait_reaped(int pidfd)
{
    int64_t end = ipd_mono_ms() + KILL_GRACE_MS;

    while (syscall(SYS_pidfd_send_signal, pidfd, 0, NULL, 0) == 0 &&
           ipd_mono_ms() < end) {
        struct pollfd pf = {pidfd, 0, 0};
        (void)poll(&pf, 1, 1);
    }
}

/* However the run went: kill and reap what is left, remove the cgroups
 * (a survivor turns IPD_OK into IPD_ERR_INTERNAL), close P's ends.
 * Returns rc, or the cgroup's error. */
static enum ipd_err end_run(struct run *r, struct ipd__cgroup_run *cgr,
                            bool cg_made, enum ipd_err rc)
{
    if ((r->pidfd >= 0 && !r->c0_done) || (r->c1 > 0 && !r->c1_done)) {
        kill_tree(r, cgr);
        reap(r, true);
    }
    if (r->foreign && r->c1_done && r->c1fd >= 0)
        ipd__wait_reaped(r->c1fd);
    ipd_close_fd(&r->pidfd);
    ipd_close_fd(&r->c1fd);
    if (cg_made) {
        enum ipd_err drc = ipd__cgroup_run_destroy(cgr);
        if (drc && !rc) {
            snprintf(r->out->error, sizeof r->out->error,
                     "sandbox: a process of the run survived the kill");
            rc = drc;
        }
    }
    ipd_close_fd(&r->out_r);
    ipd_close_fd(&r->err_r);
    ipd_close_fd(&r->in_w);
    ipd_close_fd(&r->ctl);
    ipd_calls_free(r->calls);
    r->calls = NULL;
    return rc;
}

/* A streamed run's call socket (calls.h), when its live channel has
 * calls: the service's end goes to r->calls, the program's into *prog
 * (-1 without calls). */
static enum ipd_err open_calls(struct run *r, int *prog, char *err,
                               size_t errlen)
{
    struct ipd_live_call_limits lim;
    int sv[2];

    *prog = -1;
    if (!ipd_live_calls_limits(r->live, &lim))
        return IPD_OK;
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv)) {
        snprintf(err, errlen, "call socket: %s", strerror(errno));
        return IPD_ERR_INTERNAL;
    }
    r->calls = ipd_calls_new(r->live, sv[0]);
    *prog = sv[1];
    return IPD_OK;
}

static void close_pipes(struct pipes *pp)
{
    for (int i = 0; i < 2; i++) {
        ipd_close_fd(&pp->out[i]);
        ipd_close_fd(&pp->err[i]);
        ipd_close_fd(&pp->in[i]);
        ipd_close_fd(&pp->ctl[i]);
    }
}

enum ipd_err ipd__sandbox_run(const struct ipd_sandbox_config *cfg,
                              const struct ipd_sandbox_policy *policy,
                              const struct ipd_sandbox_spec *spec, bool dry_run,
                              const struct ipd__run_extra *x,
                              struct ipd_sandbox_result *out)
{
    enum ipd_err rc;
    struct ipd_sandbox_policy p;
    struct plan pl;
    struct run r;
    struct ipd__cgroup_run cgr;
    struct pipes pp = {{-1, -1}, {-1, -1}, {-1, -1}, {-1, -1}};
    bool cg_made = false;
    int64_t start = ipd_mono_ms(), oom = -1, cpu = -1, peak = -1;
    int xfd = x ? x->fd : -1; /* consumed */

    run_init(&r, out);
    r.live = spec->live;
    r.egress = spec->egress;
    r.egress_ctx = spec->egress_ctx;
    memset(&cgr, 0, sizeof cgr);
    cgr.v2_fd = -1;
    memset(&pl, 0, sizeof pl);
    rc = validate(cfg, policy, spec, out->error, sizeof out->error);
    if (rc)
        goto out;
    ipd__policy_complete(policy, &p);
    r.cap = p.output_cap_bytes;
    rc = plan_build(&pl, cfg, &p, spec, out->error, sizeof out->error);
    if (rc)
        goto out;
    pl.dry_run = dry_run;
    if (x) {
        pl.extra_fd = xfd;
        pl.bpf = &cfg->state->bpf_zygote;
    } else {
        rc = open_calls(&r, &xfd, out->error, sizeof out->error);
        if (rc)
            goto out;
        pl.extra_fd = xfd; /* the program's end of its call socket */
    }
    rc = ipd__cgroup_run_create(cfg->state->cg,
                                &(struct ipd__cgroup_limits){p.memory_bytes,
                                                             p.max_processes,
                                                             p.cpu_millis},
                                &cgr, out->error, sizeof out->error);
    if (rc)
        goto out;
    cg_made = true;
    rc = open_pipes(&pp, &pl, spec, &cgr, out->error, sizeof out->error);
    if (rc)
        goto out;
    rc = start_c0(&pl, &cgr, &r.pidfd, out->error, sizeof out->error);
    if (rc)
        goto out;
    take_ends(&r, &pp, spec, &cgr);
    ipd_close_fd(&xfd); /* the children hold it now */
    rc = supervise(&r, &cgr, start, p.wall_timeout_ms);
    out->wall_seconds = (double)(ipd_mono_ms() - start) / 1000.0;
    ipd__cgroup_run_stats(&cgr, &oom, &cpu, &peak);
    if (rc)
        goto out;
    rc = fill_result(&r, oom, cpu, peak);
out:
    rc = end_run(&r, &cgr, cg_made, rc);
    close_pipes(&pp);
    plan_release(&pl);
    ipd_close_fd(&xfd);
    return rc;
}

enum ipd_err ipd_sandbox_run(const struct ipd_sandbox_config *cfg,
                             const struct ipd_sandbox_policy *p,
                             const struct ipd_sandbox_spec *spec,
                             struct ipd_sandbox_result *out)
{
    return ipd__sandbox_run(cfg, p, spec, false, NULL, out);
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

/* Send verb and the CPU seconds of the run or call (its RLIMIT_CPU; a
 * session's: on top of what the interpreter has used so far), with the
 * call's stdout and stderr write ends for a session's GO (out_w >= 0),
 * and the program's end of the call socket (call_w >= 0) for any GO. */
static int call_send(int ctl, enum ipd_zproto_verb verb, int64_t cpu_s,
                     int out_w, int err_w, int call_w)
{
    char msg[32];
    int len = snprintf(msg, sizeof msg, "%c%lld", (int)verb, (long long)cpu_s);
    int fds[3];
    size_t nfds = 0;

    if (verb == IPD_ZPROTO_GO && out_w >= 0) {
        fds[nfds++] = out_w;
        fds[nfds++] = err_w;
    }
    if (verb == IPD_ZPROTO_GO && call_w >= 0)
        fds[nfds++] = call_w;

    return ipd__fdpass_send(ctl, msg, (size_t)len, fds, nfds) == len ? 0 : -1;
}

/* ---- a parked child's run (zygote.c parks it) -------------------------- */

enum ipd_err ipd_sandbox_parked_run(struct ipd_sandbox_parked *pk,
                                    int64_t timeout_ms, struct ipd_live *live,
                                    struct ipd_sandbox_result *out)
{
    struct run r;
    enum ipd_err rc = IPD_OK;
    int64_t start = ipd_mono_ms(), oom = -1, cpu = -1, peak = -1;

    run_init(&r, out);
    r.live = live;
    out->warm = true;
    r.cap = pk->p.output_cap_bytes;
    r.c0_done = true; /* there is no C0 */
    r.foreign = true;
    r.c1 = pk->pid;
    r.c1fd = pk->pidfd;
    r.ctl = pk->ctl;
    r.out_r = pk->out_r;
    r.err_r = pk->err_r;
    out->output_dirfd = pk->outdir;
    pk->pidfd = pk->ctl = pk->out_r = pk->err_r = pk->outdir = -1;
    /* The run's RLIMIT_CPU as a cold run's: never past the wall (the
     * child was parked with the policy's longest timeout's). */
    int64_t cpu_s = pk->p.cpu_seconds;
    if (timeout_ms > 0 && ipd_sandbox_cpu_seconds(timeout_ms) < cpu_s)
        cpu_s = ipd_sandbox_cpu_seconds(timeout_ms);
    int call_w = -1;
    if (set_nonblock(r.out_r) || set_nonblock(r.err_r) ||
        open_calls(&r, &call_w, out->error, sizeof out->error) ||
        call_send(r.ctl, IPD_ZPROTO_GO, cpu_s, -1, -1, call_w)) {
        if (!out->error[0])
            snprintf(out->error, sizeof out->error, "parked child: go: %s",
                     strerror(errno));
        kill_tree(&r, &pk->cgr);
        rc = IPD_ERR_INTERNAL;
    }
    ipd_close_fd(&call_w);
    if (!rc)
        rc = supervise(&r, &pk->cgr, start,
                       timeout_ms > 0 ? timeout_ms : pk->p.wall_timeout_ms);
    out->wall_seconds = (double)(ipd_mono_ms() - start) / 1000.0;
    ipd__cgroup_run_stats(&pk->cgr, &oom, &cpu, &peak);
    if (!rc)
        rc = fill_result(&r, oom, cpu, peak);
    rc = end_run(&r, &pk->cgr, true, rc);
    free(pk);
    return rc;
}

/* ---- a session's calls ------------------------------------------------ */

/* One message from a session's child (zproto.h): DONE + int32 status,
 * a struct ipd_zproto_ctl (STATUS: the program is gone) or EOF.  Any
 * descriptor that comes along is closed. */
static void call_read_ctl(struct run *r, bool *done, bool *ended)
{
    union {
        struct ipd_zproto_ctl m;
        char b[sizeof(struct ipd_zproto_ctl)];
    } u;
    int fds[4];
    size_t nfds = 0;
    ssize_t n;

    n = ipd__fdpass_recv(r->ctl, &u, sizeof u, MSG_DONTWAIT, fds,
                         IPD_ARRAY_LEN(fds), &nfds);
    if (n < 0 && (errno == EINTR || errno == EAGAIN))
        return;
    for (size_t i = 0; i < nfds; i++)
        close(fds[i]);
    if (n == (ssize_t)IPD_ZPROTO_DONE_LEN && u.b[0] == IPD_ZPROTO_DONE) {
        int32_t st;
        memcpy(&st, u.b + 1, sizeof st);
        r->status = st;
        *done = true;
    } else if (n == (ssize_t)sizeof u.m && u.m.kind == IPD_ZPROTO_CTL_STATUS) {
        r->got_status = true; /* a wait status: the program ended */
        r->status = u.m.status;
        *ended = true;
    } else if (n <= 0) {
        *ended = true;
    }
}

/* Poll the call until the child answers, ends, or the deadline.  A
 * cancel interrupts the call (SIGINT to the session's processes: the
 * code sees KeyboardInterrupt); when it has not answered
 * INTERRUPT_GRACE_MS later, it ends as a timeout does. */
static void call_wait(struct run *r, struct ipd_sandbox_parked *pk,
                      int64_t base, bool *done, bool *ended)
{
    int64_t next_int = 0, grace = INT64_MAX;
    while (!*done && !*ended) {
        int64_t now = ipd_mono_ms();
        bool ctl_in, pid_in;

        if (!r->cancelled && ipd_live_cancelled(r->live)) {
            r->cancelled = true;
            grace = now + INTERRUPT_GRACE_MS;
        }
        /* base, and the time the call's calls waited for the client;
         * a cancel's grace at most. */
        int64_t deadline = base + ipd_calls_paused_ms(r->calls);
        if (grace < deadline)
            deadline = grace;
        /* Again until it answers: one that came before the cell ran is
         * held for it by the child (prelude.py, the interrupt gate), one
         * that came between calls is dropped there. */
        if (r->cancelled && now >= next_int) {
            ipd__cgroup_run_signal(&pk->cgr, SIGINT);
            next_int = now + INTERRUPT_EVERY_MS;
        }
        if (now >= deadline) {
            r->timed_out = !r->cancelled;
            r->hwm_kib = ipd__cgroup_run_hwm_kib(&pk->cgr);
            *ended = true;
            return;
        }
        int64_t until =
            r->cancelled && next_int < deadline ? next_int : deadline;
        if (wait_once(r, until - now, pk->pidfd, -1, &ctl_in, &pid_in)) {
            *ended = true;
            return;
        }
        if (ctl_in)
            call_read_ctl(r, done, ended);
        if (pid_in)
            *ended = true;
    }
}

/* What the call's answer, or the child's end, says. */
static void call_result(struct run *r, struct ipd_sandbox_parked *pk, bool done,
                        int64_t oom0, int64_t cpu0)
{
    struct ipd_sandbox_result *out = r->out;
    int64_t oom = -1, cpu = -1, peak = -1;

    ipd__cgroup_run_stats(&pk->cgr, &oom, &cpu, &peak);
    out->oom_killed = oom > 0 && oom > oom0;
    out->timed_out = r->timed_out;
    out->cancelled = r->cancelled;
    out->interrupted = r->cancelled && done;
    out->memory_peak_bytes = peak > 0 ? peak : 0;
    out->cpu_seconds = cpu >= 0 && cpu0 >= 0 ? (double)(cpu - cpu0) / 1e6 : 0.0;
    out->max_rss_kib =
        r->hwm_kib ? r->hwm_kib : ipd__cgroup_run_hwm_kib(&pk->cgr);
    if (done) {
        out->exit_code = r->status & 0xff;
    } else if (r->got_status && WIFEXITED(r->status)) {
        out->exit_code = WEXITSTATUS(r->status);
    } else if (r->got_status && WIFSIGNALED(r->status)) {
        out->term_signal = WTERMSIG(r->status);
    } else {
        out->term_signal = SIGKILL; /* killed: timeout, memory, or gone */
    }
}

enum ipd_err ipd_sandbox_parked_call(struct ipd_sandbox_parked *pk,
                                     enum ipd_zproto_verb verb,
                                     int64_t timeout_ms, struct ipd_live *live,
                                     struct ipd_sandbox_result *out,
                                     bool *ended)
{
    struct run r;
    int out_p[2] = {-1, -1}, err_p[2] = {-1, -1}, call_w = -1;
    int64_t start = ipd_mono_ms(), oom0 = -1, cpu0 = -1, peak0 = -1;
    bool done = false;

    *ended = false;
    run_init(&r, out);
    r.live = live;
    out->warm = true;
    r.cap = pk->p.output_cap_bytes;
    r.ctl = pk->ctl;
    out->output_dirfd = fcntl(pk->outdir, F_DUPFD_CLOEXEC, 3);
    ipd__cgroup_run_stats(&pk->cgr, &oom0, &cpu0, &peak0);
    if (verb == IPD_ZPROTO_GO &&
        (pipe2(out_p, O_CLOEXEC) || pipe2(err_p, O_CLOEXEC) ||
         set_nonblock(out_p[0]) || set_nonblock(err_p[0]) ||
         open_calls(&r, &call_w, out->error, sizeof out->error))) {
        if (!out->error[0])
            snprintf(out->error, sizeof out->error, "pipes: %s",
                     strerror(errno));
        close_pipes(&(struct pipes){
            {out_p[0], out_p[1]}, {err_p[0], err_p[1]}, {-1, -1}, {-1, -1}});
        ipd_calls_free(r.calls);
        return IPD_ERR_INTERNAL;
    }
    /* The call's CPU limit as a warm run's (ipd_sandbox_parked_run):
     * never past its wall. */
    int64_t wall = timeout_ms > 0 ? timeout_ms : pk->p.wall_timeout_ms;
    int64_t cpu_s = pk->p.cpu_seconds;
    if (ipd_sandbox_cpu_seconds(wall) < cpu_s)
        cpu_s = ipd_sandbox_cpu_seconds(wall);
    if (call_send(pk->ctl, verb, cpu_s, out_p[1], err_p[1], call_w)) {
        snprintf(out->error, sizeof out->error, "session: the child is gone");
        *ended = true;
    }
    ipd_close_fd(&out_p[1]);
    ipd_close_fd(&err_p[1]);
    ipd_close_fd(&call_w);
    r.out_r = out_p[0];
    r.err_r = err_p[0];
    if (!*ended)
        call_wait(&r, pk,
                  start + (timeout_ms > 0 ? timeout_ms : pk->p.wall_timeout_ms),
                  &done, ended);
    if (*ended)
        ipd__parked_kill(pk);
    /* What the call wrote before its answer is in the pipes; a
     * background process still holding them gets EPIPE from now on. */
    r.last_drain = true;
    if (r.out_r >= 0)
        drain(&r, &r.out_r, &out->out, &out->out_truncated, 1);
    if (r.err_r >= 0)
        drain(&r, &r.err_r, &out->err, &out->err_truncated, 2);
    ipd_close_fd(&r.out_r);
    ipd_close_fd(&r.err_r);
    ipd_calls_free(r.calls);
    out->wall_seconds = (double)(ipd_mono_ms() - start) / 1000.0;
    call_result(&r, pk, done, oom0, cpu0);
    return done || r.timed_out || r.cancelled || r.got_status || out->oom_killed
               ? IPD_OK
               : IPD_ERR_INTERNAL;
}

int64_t ipd_sandbox_parked_memory(const struct ipd_sandbox_parked *pk)
{
    return ipd__cgroup_run_memory(&pk->cgr);
}
