/*
 * zygote.c - warm runs seen from P: a zygote's command socket, parking
 * a child of it (its cgroup attach included) and letting one go
 * (sandbox.h, "Warm runs"; the child's run is supervised in run.c).
 *
 * The zygote's program (service/exec/python/zygote.py) gets the command
 * socket as fd 3; what travels on it and on a parked child's control
 * socket is defined in zproto.h.
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/filter.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <jansson.h>

#include "../common/util.h"
#include "sandbox_internal.h"

struct ipd_sandbox_zygote {
    const struct ipd_sandbox_config *cfg;
    int cmd;              /* P's end */
    int z_end;            /* the zygote's end until its run takes it, else -1 */
    pthread_mutex_t lock; /* ready, why, reads of cmd */
    bool ready, gone;
    char why[256];
    char report[IPD_ZPROTO_REPORT_MAX]; /* READY's text (untrusted) */
    size_t report_len;
};

enum ipd_err ipd_sandbox_zygote_new(const struct ipd_sandbox_config *cfg,
                                    struct ipd_sandbox_zygote **out)
{
    struct ipd_sandbox_zygote *z;
    const struct ipd__sandbox_bpf *bpf;
    int sv[2];
    size_t len;
    char *msg;
    ssize_t n;

    *out = NULL;
    if (!cfg->state)
        return IPD_ERR_INTERNAL;
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0)
        return IPD_ERR_INTERNAL;
    bpf = &cfg->state->bpf_nonet;
    len = 1 + (size_t)bpf->len * sizeof(struct sock_filter);
    msg = ipd_xmalloc(len);
    msg[0] = IPD_ZPROTO_CMD_INIT;
    memcpy(msg + 1, bpf->filter, len - 1);
    n = send(sv[0], msg, len, MSG_NOSIGNAL | MSG_DONTWAIT);
    free(msg);
    if (n != (ssize_t)len) {
        close(sv[0]);
        close(sv[1]);
        return IPD_ERR_INTERNAL;
    }
    z = ipd_xcalloc(1, sizeof *z);
    z->cfg = cfg;
    z->cmd = sv[0];
    z->z_end = sv[1];
    pthread_mutex_init(&z->lock, NULL);
    *out = z;
    return IPD_OK;
}

enum ipd_err ipd_sandbox_zygote_run(struct ipd_sandbox_zygote *z,
                                    const struct ipd_sandbox_policy *p,
                                    const struct ipd_sandbox_spec *spec,
                                    struct ipd_sandbox_result *out)
{
    struct ipd__run_extra x = {z->z_end};
    struct ipd_sandbox_policy zp = *p;

    z->z_end = -1; /* the run consumes it */
    zp.network = false;
    return ipd__sandbox_run(z->cfg, &zp, spec, false, &x, out);
}

/* One message of the zygote's on cmd, within timeout_ms.  1: got one;
 * 0: timeout; -1: the zygote is gone. */
static int cmd_read(struct ipd_sandbox_zygote *z, char *buf, size_t len,
                    int64_t timeout_ms, ssize_t *got)
{
    struct pollfd pfd = {z->cmd, POLLIN, 0};
    int rc;

    do {
        rc = poll(&pfd, 1, (int)(timeout_ms > 0 ? timeout_ms : 0));
    } while (rc < 0 && errno == EINTR);
    if (rc == 0)
        return 0;
    if (rc < 0)
        return -1;
    *got = recv(z->cmd, buf, len, MSG_DONTWAIT);
    if (*got < 0 && errno == EAGAIN)
        return 0;
    return *got > 0 ? 1 : -1;
}

enum ipd_err ipd_sandbox_zygote_wait_ready(struct ipd_sandbox_zygote *z,
                                           int64_t timeout_ms, char *why,
                                           size_t whylen)
{
    enum ipd_err rc = IPD_OK;
    char buf[1 + IPD_ZPROTO_REPORT_MAX + 1];
    ssize_t n = 0;

    pthread_mutex_lock(&z->lock);
    if (!z->ready && !z->gone) {
        /* A message longer than buf is cut by the SEQPACKET socket: its
         * report is then malformed JSON, and ignored by its reader. */
        int got = cmd_read(z, buf, sizeof buf - 1, timeout_ms, &n);
        if (got == 1 && buf[0] == IPD_ZPROTO_CMD_READY) {
            z->ready = true;
            z->report_len =
                (size_t)n - 1 <= sizeof(z->report) ? (size_t)n - 1 : 0;
            memcpy(z->report, buf + 1, z->report_len);
        } else if (got == 0) {
            rc = IPD_ERR_TIMEOUT;
        } else {
            z->gone = true;
            if (got == 1 && buf[0] == IPD_ZPROTO_CMD_FAILED) {
                buf[n] = '\0';
                snprintf(z->why, sizeof z->why, "%.200s", buf + 1);
            } else {
                snprintf(z->why, sizeof z->why, "the zygote ended");
            }
        }
    }
    if (!rc && z->gone)
        rc = IPD_ERR_UNAVAILABLE;
    if (rc && why)
        snprintf(why, whylen, "%s",
                 rc == IPD_ERR_TIMEOUT ? "the zygote is not ready yet"
                                       : z->why);
    pthread_mutex_unlock(&z->lock);
    return rc;
}

const char *ipd_sandbox_zygote_report(struct ipd_sandbox_zygote *z, size_t *len)
{
    const char *r = NULL;

    *len = 0;
    pthread_mutex_lock(&z->lock);
    if (z->ready) {
        r = z->report;
        *len = z->report_len;
    }
    pthread_mutex_unlock(&z->lock);
    return r;
}

void ipd_sandbox_zygote_stop(struct ipd_sandbox_zygote *z)
{
    if (z && z->cmd >= 0)
        (void)shutdown(z->cmd, SHUT_RDWR);
}

void ipd_sandbox_zygote_free(struct ipd_sandbox_zygote *z)
{
    if (!z)
        return;
    ipd_close_fd(&z->cmd);
    ipd_close_fd(&z->z_end);
    pthread_mutex_destroy(&z->lock);
    free(z);
}

/* ---- parking ----------------------------------------------------------- */

static json_t *rl_pair(int64_t soft, int64_t hard)
{
    return json_pack("[I,I]", (json_int_t)soft, (json_int_t)hard);
}

/* The park command's JSON (see the top of this file). */
static char *park_params(const struct ipd_sandbox_config *cfg,
                         const struct ipd_sandbox_policy *p,
                         const struct ipd_sandbox_mount *mounts, size_t n,
                         bool session, const char *rehearse)
{
    char tmp[160], out[160];
    json_t *o, *m = json_array();
    char *text;

    ipd__tmpfs_opts(cfg, p, tmp, sizeof tmp, out, sizeof out);
    for (size_t i = 0; i < n; i++)
        json_array_append_new(
            m, json_pack("[s,b]", mounts[i].sandbox_path, mounts[i].writable));
    o = json_pack(
        "{s:s,s:s,s:o,s:i,s:i,s:i,s:{s:o,s:o,s:o,s:o,s:o}}", "tmp", tmp, "out",
        out, "mounts", m, "uid", (int)cfg->inner_uid, "gid",
        (int)cfg->inner_gid, "cap_last", cfg->state->cap_last, "rlimits",
        /* a session's calls set their own soft limit (zygote.py,
         * _session_loop): its hard one is the zygote's */
        "cpu",
        rl_pair(p->cpu_seconds, session ? INT64_MAX : p->cpu_seconds + 1),
        "fsize", rl_pair(p->fsize_bytes, p->fsize_bytes), "nofile",
        rl_pair(p->nofile, p->nofile), "sigpending",
        rl_pair(p->sigpending, p->sigpending), "msgqueue",
        rl_pair(p->msgqueue_bytes, p->msgqueue_bytes));
    if (o) {
        json_object_set_new(o, "session", json_boolean(session));
        json_object_set_new(o, "rehearse",
                            json_string(session || !rehearse ? "" : rehearse));
    }
    text = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    return text;
}

/* Send PARK + params with fds to the zygote. */
static enum ipd_err send_park(struct ipd_sandbox_zygote *z, const char *params,
                              const int *fds, size_t nfds, char *err,
                              size_t errlen)
{
    size_t plen = strlen(params);
    char *msg = ipd_xmalloc(plen + 1);
    ssize_t n;

    msg[0] = IPD_ZPROTO_CMD_PARK;
    memcpy(msg + 1, params, plen);
    n = ipd__fdpass_send(z->cmd, msg, plen + 1, fds, nfds);
    free(msg);
    if (n != (ssize_t)(plen + 1)) {
        snprintf(err, errlen, "zygote: park: %s",
                 n < 0 ? strerror(errno) : "short send");
        return IPD_ERR_UNAVAILABLE;
    }
    return IPD_OK;
}

/* The child's next message within the deadline; its fd (if any) in
 * *fd.  IPD_OK, or an error with the reason in err. */
static enum ipd_err child_msg(struct ipd_sandbox_parked *pk, int64_t deadline,
                              struct ipd_zproto_ctl *m, int *fd, char *err,
                              size_t errlen)
{
    struct pollfd pfd = {pk->ctl, POLLIN, 0};
    int64_t left = deadline - ipd_mono_ms();
    size_t nfds = 0;
    ssize_t n;
    int rc;

    *fd = -1;
    do {
        rc = poll(&pfd, 1, (int)(left > 0 ? left : 0));
    } while (rc < 0 && errno == EINTR);
    if (rc == 0) {
        snprintf(err, errlen, "zygote: the parked child did not answer");
        return IPD_ERR_TIMEOUT;
    }
    memset(m, 0, sizeof *m);
    n = ipd__fdpass_recv(pk->ctl, m, sizeof *m, MSG_DONTWAIT, fd, 1, &nfds);
    if (n != (ssize_t)sizeof *m) {
        ipd_close_fd(fd);
        snprintf(err, errlen, "zygote: the parked child %s",
                 n == 0 ? "ended" : "sent a bad message");
        return IPD_ERR_UNAVAILABLE;
    }
    if (m->kind == IPD_ZPROTO_CTL_ERROR) {
        m->text[sizeof m->text - 1] = '\0';
        ipd_close_fd(fd);
        snprintf(err, errlen, "zygote child setup: %s", m->text);
        return IPD_ERR_INTERNAL;
    }
    return IPD_OK;
}

/* The host pid behind a pidfd (its fdinfo, in P's pid namespace). */
static pid_t pidfd_pid(int pidfd)
{
    char path[64], buf[1024];
    ssize_t n;
    int fd;
    char *p;

    snprintf(path, sizeof path, "/proc/self/fdinfo/%d", pidfd);
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return -1;
    buf[n] = '\0';
    p = strstr(buf, "\nPid:");
    return p ? (pid_t)strtol(p + 5, NULL, 10) : -1;
}

/* Move pid into every cgroup of the run: the v1 hierarchies' and the
 * v2 one's. */
static enum ipd_err attach(struct ipd_sandbox_parked *pk, char *err,
                           size_t errlen)
{
    char num[24];
    int len = snprintf(num, sizeof num, "%d", (int)pk->pid);

    for (size_t i = 0; i < IPD_ARRAY_LEN(pk->cgr.procs_fd); i++) {
        if (pk->cgr.procs_fd[i] >= 0 &&
            write(pk->cgr.procs_fd[i], num, (size_t)len) != len)
            goto fail;
    }
    if (pk->cgr.v2_fd >= 0) {
        int fd = openat(pk->cgr.v2_fd, "cgroup.procs", O_WRONLY | O_CLOEXEC);
        bool ok = fd >= 0 && write(fd, num, (size_t)len) == len;
        if (fd >= 0)
            close(fd);
        if (!ok)
            goto fail;
    }
    return IPD_OK;
fail:
    snprintf(err, errlen,
             "zygote: attaching the parked child to its "
             "cgroup: %s",
             strerror(errno));
    return IPD_ERR_INTERNAL;
}

/* The child's handshake after the park command: its output dir, its
 * pidfd (attach, ATTACHED), then READY. */
static enum ipd_err handshake(struct ipd_sandbox_parked *pk, int64_t deadline,
                              char *err, size_t errlen)
{
    struct ipd_zproto_ctl m;
    enum ipd_err rc;
    int fd;

    while (pk->outdir < 0 || pk->pidfd < 0) {
        rc = child_msg(pk, deadline, &m, &fd, err, errlen);
        if (rc)
            return rc;
        if (m.kind == IPD_ZPROTO_CTL_OUTDIR && fd >= 0 && pk->outdir < 0)
            pk->outdir = fd;
        else if (m.kind == IPD_ZPROTO_CTL_HELLO && fd >= 0 && pk->pidfd < 0)
            pk->pidfd = fd;
        else
            ipd_close_fd(&fd);
    }
    pk->pid = pidfd_pid(pk->pidfd);
    if (pk->pid <= 0) {
        snprintf(err, errlen, "zygote: the parked child's pid is unknown");
        return IPD_ERR_INTERNAL;
    }
    rc = attach(pk, err, errlen);
    if (rc)
        return rc;
    if (send(pk->ctl, &(char){IPD_ZPROTO_ATTACHED}, 1, MSG_NOSIGNAL) != 1) {
        snprintf(err, errlen, "zygote: the parked child ended");
        return IPD_ERR_UNAVAILABLE;
    }
    rc = child_msg(pk, deadline, &m, &fd, err, errlen);
    ipd_close_fd(&fd);
    if (!rc && m.kind != IPD_ZPROTO_CTL_READY) {
        snprintf(err, errlen, "zygote: the parked child is not ready");
        rc = IPD_ERR_INTERNAL;
    }
    return rc;
}

/* The stage trees of the park's mounts into fds[3...]. */
static enum ipd_err park_trees(const struct ipd_sandbox_mount *mounts, size_t n,
                               int *fds, char *err, size_t errlen)
{
    for (size_t i = 0; i < n; i++) {
        const struct ipd_sandbox_mount *m = &mounts[i];
        if (!m->stage || !ipd_sandbox_stage_detached(m->stage) ||
            !m->host_path || m->host_path[0] == '/' ||
            strstr(m->host_path, "..") || !m->sandbox_path ||
            m->sandbox_path[0] != '/' || strstr(m->sandbox_path, "..")) {
            snprintf(err, errlen,
                     "zygote: a parked child's mount must be "
                     "a path of a detached stage");
            return IPD_ERR_INVALID;
        }
        fds[3 + i] = open_tree(ipd_sandbox_stage_fd(m->stage), m->host_path,
                               OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC |
                                   AT_RECURSIVE | AT_SYMLINK_NOFOLLOW);
        if (fds[3 + i] < 0) {
            snprintf(err, errlen, "zygote: open_tree %s: %s", m->host_path,
                     strerror(errno));
            return IPD_ERR_INTERNAL;
        }
    }
    return IPD_OK;
}

/* The child's control socket and stdout/stderr pipes: P's ends into
 * pk, the child's into fds[0..2]. */
static enum ipd_err park_pipes(struct ipd_sandbox_parked *pk, int *fds,
                               char *err, size_t errlen)
{
    int out_p[2] = {-1, -1}, err_p[2] = {-1, -1}, ctl[2] = {-1, -1};

    if (pipe2(out_p, O_CLOEXEC) || pipe2(err_p, O_CLOEXEC) ||
        socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, ctl)) {
        snprintf(err, errlen, "zygote: pipes: %s", strerror(errno));
        for (int i = 0; i < 2; i++) {
            ipd_close_fd(&out_p[i]);
            ipd_close_fd(&err_p[i]);
            ipd_close_fd(&ctl[i]);
        }
        return IPD_ERR_INTERNAL;
    }
    pk->ctl = ctl[0];
    pk->out_r = out_p[0];
    pk->err_r = err_p[0];
    fds[0] = ctl[1];
    fds[1] = out_p[1];
    fds[2] = err_p[1];
    return IPD_OK;
}

void ipd__parked_kill(struct ipd_sandbox_parked *pk)
{
    ipd__cgroup_run_kill(&pk->cgr);
    if (pk->pidfd >= 0)
        (void)syscall(SYS_pidfd_send_signal, pk->pidfd, SIGKILL, NULL, 0);
}

void ipd_sandbox_parked_kill(struct ipd_sandbox_parked *pk)
{
    if (pk)
        ipd__parked_kill(pk);
}

void ipd_sandbox_parked_free(struct ipd_sandbox_parked *pk)
{
    if (!pk)
        return;
    ipd__parked_kill(pk);
    if (pk->pidfd >= 0) {
        /* gone (reaped) within the grace: the cgroup can then go */
        struct pollfd pf = {pk->pidfd, POLLIN, 0};
        (void)poll(&pf, 1, 5000);
        ipd__wait_reaped(pk->pidfd);
    }
    ipd_close_fd(&pk->pidfd);
    ipd_close_fd(&pk->ctl);
    ipd_close_fd(&pk->out_r);
    ipd_close_fd(&pk->err_r);
    ipd_close_fd(&pk->outdir);
    (void)ipd__cgroup_run_destroy(&pk->cgr);
    free(pk);
}

enum ipd_err ipd_sandbox_park(struct ipd_sandbox_zygote *z,
                              const struct ipd_sandbox_policy *policy,
                              const struct ipd_sandbox_mount *mounts,
                              size_t n_mounts, unsigned flags,
                              const char *rehearse, int64_t timeout_ms,
                              struct ipd_sandbox_parked **out, char *err,
                              size_t errlen)
{
    struct ipd_sandbox_parked *pk = ipd_xcalloc(1, sizeof *pk);
    int fds[IPD_ZPROTO_PARK_FDS_MAX];
    int64_t deadline = ipd_mono_ms() + timeout_ms;
    char *params = NULL;
    enum ipd_err rc;

    *out = NULL;
    for (size_t i = 0; i < IPD_ARRAY_LEN(fds); i++)
        fds[i] = -1;
    pk->ctl = pk->out_r = pk->err_r = pk->pidfd = pk->outdir = -1;
    pk->cgr.v2_fd = -1;
    for (size_t i = 0; i < IPD_ARRAY_LEN(pk->cgr.procs_fd); i++)
        pk->cgr.procs_fd[i] = -1;
    ipd__policy_complete(policy, &pk->p);
    if (n_mounts > IPD_ZPROTO_PARK_FDS_MAX - 3 || pk->p.network) {
        snprintf(err, errlen, "zygote: %s",
                 pk->p.network ? "a networked run is never parked"
                               : "too many mounts");
        rc = IPD_ERR_INVALID;
        goto out;
    }
    rc = park_trees(mounts, n_mounts, fds, err, errlen);
    if (rc)
        goto out;
    rc = ipd__cgroup_run_create(
        z->cfg->state->cg,
        &(struct ipd__cgroup_limits){pk->p.memory_bytes, pk->p.max_processes,
                                     pk->p.cpu_millis},
        &pk->cgr, err, errlen);
    if (rc) {
        pk->cgr.v2_fd = -1; /* nothing to destroy */
        goto out;
    }
    rc = park_pipes(pk, fds, err, errlen);
    if (rc)
        goto out;
    params = park_params(z->cfg, &pk->p, mounts, n_mounts,
                         flags & IPD_SANDBOX_PARK_SESSION, rehearse);
    rc = params ? send_park(z, params, fds, 3 + n_mounts, err, errlen)
                : IPD_ERR_INTERNAL;
    for (size_t i = 0; i < IPD_ARRAY_LEN(fds); i++)
        ipd_close_fd(&fds[i]); /* the zygote's now, or never sent */
    if (!rc)
        rc = handshake(pk, deadline, err, errlen);
out:
    free(params);
    for (size_t i = 0; i < IPD_ARRAY_LEN(fds); i++)
        ipd_close_fd(&fds[i]);
    if (rc) {
        if (pk->cgr.v2[0] || pk->cgr.mem[0] || pk->cgr.pids[0] ||
            pk->cgr.cpuacct[0] || pk->cgr.cpu[0] || pk->pidfd >= 0)
            ipd_sandbox_parked_free(pk);
        else {
            ipd_close_fd(&pk->ctl);
            ipd_close_fd(&pk->out_r);
            ipd_close_fd(&pk->err_r);
            ipd_close_fd(&pk->outdir);
            free(pk);
        }
        return rc;
    }
    *out = pk;
    return IPD_OK;
}
