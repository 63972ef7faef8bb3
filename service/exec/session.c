/*
 * session.c - stateful sessions (CONTRACT.md, Sessions; docs/SANDBOX.md,
 * "Warm, cold and session runs").
 *
 * A session is a zygote of its own (its own host uid: sandbox-uid + 1 +
 * slots + its index, so no two live sessions share per-user kernel
 * budgets) and one child of it parked as a session's
 * (IPD_SANDBOX_PARK_SESSION): its interpreter, __main__ module, /tmp and
 * /mnt/output live from call to call.  Its staging (job/, data/,
 * interpd/) stays mounted, but holds a job only during a call: the
 * call writes it and empties it again (ipd__session_call).
 *
 * Threads: each session has one, which runs its zygote for the session's
 * life (ipd_sandbox_zygote_run blocks) and then frees what the session
 * held.  The first call parks the child (waiting for the zygote's
 * imports).  Calls run on the execution pool's workers, one at a time
 * per session (409 session_busy); a timeout, a memory kill or the
 * program's exit end the session (410 session_expired afterwards, also
 * for idleness, the maximum life, DELETE and shutdown).  Ended sessions
 * are kept as tombstones for an hour so their callers learn why.
 *
 * Time (issue 20): a session past its idle expiry or its maximum life
 * ends at whatever touches it first (a call's start: 410; GET, a list, a
 * create's count, the admin status; the reaper otherwise), never later
 * than its expires_at says.  A call that started in time runs to its own
 * end (its timeout at most), and the session ends then if its maximum
 * life passed meanwhile: that call's result says so.  So the zygote's
 * own wall limit is the maximum life plus the longest a call can take
 * (waiting for the interpreter, parking, the policy's max-timeout) and a
 * margin: no call ever meets it.
 *
 * Bounds at create (issue 20): the node's max-sessions and
 * sessions-memory, the (tenant, user)'s sessions-per-user, and the
 * tenant's shares of the node's, from its key's policy: tenant-sessions
 * and tenant-session-memory.  Each session is charged its policy's
 * memory limit (what its code may hold, whatever it holds now).
 *
 * Locking: ss->lock guards the list and every session's state; a call
 * holds no lock while it runs (s->busy keeps the session's parts
 * alive: the thread frees them only once no call is in).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../../venv/venv.h"
#include "../common/log.h"
#include "../common/util.h"
#include "exec_internal.h"
#include "varlist.h"

#define READY_WAIT_MS 60000 /* a first call waits this long for imports */
#define PARK_WAIT_MS 30000
#define VARIABLES_TIMEOUT_MS 10000
#define TOMBSTONE_MS (3600LL * 1000)
#define ENDING_WAIT_MS 5000    /* a create waits for an ending one's uid */
#define DELETE_WAIT_MS 5000    /* a DELETE waits for the session's end */
#define ZYGOTE_MARGIN_MS 60000 /* the zygote's wall past any call's end */
#define RETRY_AFTER_MAX_S 3600
#define MIB (1024 * 1024)

/* STARTING until its first call ends, READY; ENDING from the moment it
 * is ended (end_locked: its why and ended_ms are set then) until its
 * thread has freed its processes: ENDED, a tombstone.  A call running in
 * it is s->busy, in any state up to ENDING. */
enum sess_state { S_STARTING, S_READY, S_ENDING, S_ENDED };

struct ipd__session {
    struct ipd__sessions *ss;
    char id[IPD_ID_MAX];
    char *tenant, *user; /* owned */
    char policy[IPD_EXEC_POLICY_NAME_MAX];
    unsigned idx;                /* its uid's index */
    int64_t created_ms, used_ms; /* wall clock */
    int64_t ended_ms;            /* wall clock of its end (a tombstone's
                                    age), set with S_ENDING */
    enum sess_state state;
    bool busy;     /* a call is in (one at a time) */
    char why[320]; /* why it ended (with its interpreter's
                      own words when that ended it) */
    pthread_t th;
    struct ipd_sandbox_zygote *z;
    struct ipd_sandbox_parked *pk;
    struct ipd__run_stage wk; /* the session's staging */
    json_t *snapshot;         /* /mnt/output after the last call */
    int64_t memory;           /* bytes, at the last call's end */
    int64_t charge;           /* against the memory budgets: its policy's
                                 memory limit */
    struct ipd__session *next;
};

struct ipd__sessions {
    struct ipd_executor *ex;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    struct ipd__session *list;
    bool *used; /* uid indexes in use (max) */
    bool stopping;
};

/* When s ends unless it is used: the earlier of its idle expiry and its
 * maximum life.  While a call runs, idleness counts from now at the
 * earliest (the call's end is a use). */
static int64_t expires_ms(const struct ipd__executor_sessions_cfg *c,
                          const struct ipd__session *s, int64_t now)
{
    int64_t from = s->busy && now > s->used_ms ? now : s->used_ms;
    int64_t idle = from + c->idle_ms;
    int64_t life = s->created_ms + c->max_life_ms;
    return idle < life ? idle : life;
}

/* Not ended (not even during its call). */
static bool live(const struct ipd__session *s)
{
    return s->state != S_ENDING && s->state != S_ENDED;
}

static const char *state_name(const struct ipd__session *s)
{
    if (!live(s))
        return "ended";
    if (s->busy)
        return "busy";
    return s->state == S_STARTING ? "starting" : "ready";
}

/* The session's JSON (under the lock). */
static json_t *session_json(const struct ipd__session *s)
{
    char c[IPD_TIME_STR], e[IPD_TIME_STR], u[IPD_TIME_STR];
    const struct ipd__executor_sessions_cfg *cfg = &s->ss->ex->sess_cfg;

    ipd_time_format(s->created_ms, c);
    ipd_time_format(expires_ms(cfg, s, ipd_now_ms()), e);
    ipd_time_format(s->used_ms, u);
    return json_pack("{s:s,s:s,s:s,s:s,s:s,s:s}", "session_id", s->id,
                     "created_at", c, "expires_at", e, "last_used_at", u,
                     "status", state_name(s), "policy", s->policy);
}

/* End s (under the lock): its zygote stops; the session's thread frees
 * the rest once no call is in. */
static void end_locked(struct ipd__session *s, const char *why)
{
    if (!live(s)) /* the first reason is the one kept */
        return;
    snprintf(s->why, sizeof(s->why), "%s", why);
    s->ended_ms = ipd_now_ms();
    s->state = S_ENDING;
    ipd_sandbox_zygote_stop(s->z);
    /* What the code runs stops now, not once the zygote has wound down
     * (its interpreter's exit, some 50 ms).  Not under a call: that one
     * kills the child itself when it sees the zygote go. */
    if (!s->busy)
        ipd_sandbox_parked_kill(s->pk);
    ipd_info("session %s ended: %s", s->id, why);
    pthread_cond_broadcast(&s->ss->cond);
}

/* End s (under the lock) when its time is over and no call runs in it.
 * A call running past its maximum life ends it at the call's end
 * (call_end); a running call is a use, never idleness. */
static void expire_locked(struct ipd__session *s, int64_t now)
{
    const struct ipd__executor_sessions_cfg *c = &s->ss->ex->sess_cfg;

    if (s->busy || !live(s))
        return;
    if (now >= s->created_ms + c->max_life_ms)
        end_locked(s, "it reached its maximum life");
    else if (now >= s->used_ms + c->idle_ms)
        end_locked(s, "it was idle");
}

/* ---- the session's thread ---------------------------------------------- */

/* Why the session's zygote ended, for the session's why (what a call
 * answers then): the exit status or signal and the first line of its
 * stderr (e.g. "can't open file '/opt/interpd/zygote.py'"), printable
 * ASCII only, cut to fit. */
static void zygote_end_cause(const struct ipd_sandbox_result *r,
                             const char *notstarted, char *out, size_t len)
{
    char line[200];
    size_t n = 0;

    for (size_t i = 0;
         i < r->err.len && r->err.buf[i] != '\n' && n + 1 < sizeof(line); i++) {
        unsigned char ch = (unsigned char)r->err.buf[i];
        line[n++] = ch >= 0x20 && ch < 0x7f ? (char)ch : '?';
    }
    line[n] = '\0';
    if (notstarted[0])
        snprintf(out, len, "its interpreter could not start: %s", notstarted);
    else if (r->term_signal)
        snprintf(out, len, "its interpreter ended (signal %d)%s%s",
                 r->term_signal, n ? ": " : "", line);
    else if (r->exit_code || n)
        snprintf(out, len, "its interpreter ended (exit status %d)%s%s",
                 r->exit_code, n ? ": " : "", line);
    else
        snprintf(out, len, "its interpreter ended");
}

static void serve_zygote(struct ipd__session *s)
{
    struct ipd_executor *ex = s->ss->ex;
    struct ipd_sandbox_result r;
    const struct ipd_exec_policy *ep = ipd__policy_find(ex, s->policy);
    char why[200] = "", cause[sizeof(s->why)];
    /* Its last call may start just before the maximum life, wait for
     * the interpreter and park, and run its whole timeout. */
    int64_t wall = ex->sess_cfg.max_life_ms + READY_WAIT_MS + PARK_WAIT_MS +
                   (ep ? ep->max_timeout_ms : 0) + ZYGOTE_MARGIN_MS;

    if (ipd__zygote_serve(ex, s->z, ipd__session_uid(ex, s->idx), wall, NULL,
                          NULL, NULL, &r, why, sizeof(why)) &&
        why[0])
        ipd_warn("session %s: its interpreter did not start: %s", s->id, why);
    zygote_end_cause(&r, why, cause, sizeof(cause));
    ipd_sandbox_result_release(&r);
    pthread_mutex_lock(&s->ss->lock);
    end_locked(s, cause);
    while (s->busy)
        pthread_cond_wait(&s->ss->cond, &s->ss->lock);
    pthread_mutex_unlock(&s->ss->lock);
    ipd_sandbox_parked_free(s->pk);
    ipd__run_stage_remove(&s->wk);
    pthread_mutex_lock(&s->ss->lock);
    s->pk = NULL;
    s->state = S_ENDED;
    s->ss->used[s->idx] = false;
    json_decref(s->snapshot);
    s->snapshot = NULL;
    pthread_cond_broadcast(&s->ss->cond);
    pthread_mutex_unlock(&s->ss->lock);
}

static void *session_thread(void *arg)
{
    serve_zygote(arg);
    return NULL;
}

/* ---- the executor's side ----------------------------------------------- */

enum ipd_err ipd__sessions_new(struct ipd_executor *ex,
                               const struct ipd_executor_options *opt)
{
    struct ipd__sessions *ss = ipd_xcalloc(1, sizeof(*ss));

    ex->sess_cfg.max = opt->max_sessions;
    ex->sess_cfg.per_user = opt->sessions_per_user;
    ex->sess_cfg.memory = opt->sessions_memory;
    ex->sess_cfg.idle_ms = opt->session_idle_ms;
    ex->sess_cfg.max_life_ms = opt->session_max_life_ms;
    ss->ex = ex;
    pthread_mutex_init(&ss->lock, NULL);
    pthread_cond_init(&ss->cond, NULL);
    ss->used =
        ipd_xcalloc(ex->sess_cfg.max ? ex->sess_cfg.max : 1, sizeof(bool));
    ex->sessions = ss;
    return IPD_OK;
}

/* After its thread was joined (or never made). */
static void session_free(struct ipd__session *s)
{
    ipd_sandbox_zygote_free(s->z);
    free(s->tenant);
    free(s->user);
    json_decref(s->snapshot);
    free(s);
}

void ipd__sessions_free(struct ipd_executor *ex)
{
    struct ipd__sessions *ss = ex->sessions;

    if (!ss)
        return;
    pthread_mutex_lock(&ss->lock);
    ss->stopping = true;
    for (struct ipd__session *s = ss->list; s; s = s->next)
        end_locked(s, "the service stopped");
    pthread_mutex_unlock(&ss->lock);
    while (ss->list) {
        struct ipd__session *s = ss->list;
        ss->list = s->next;
        pthread_join(s->th, NULL);
        session_free(s);
    }
    pthread_mutex_destroy(&ss->lock);
    pthread_cond_destroy(&ss->cond);
    free(ss->used);
    free(ss);
    ex->sessions = NULL;
}

/* The caller's session id (under the lock), tombstones included. */
static struct ipd__session *find_locked(struct ipd__sessions *ss,
                                        const char *tenant, const char *user,
                                        const char *id)
{
    for (struct ipd__session *s = ss->list; s; s = s->next) {
        if (!strcmp(s->id, id) && !strcmp(s->tenant, tenant) &&
            !strcmp(s->user, user)) {
            expire_locked(s, ipd_now_ms());
            return s;
        }
    }
    return NULL;
}

/* Wait (under the lock, bounded) until s has ENDED: its thread has freed
 * the child and its zygote's run is over, so no process of it is left.
 * s stays listed meanwhile (a tombstone lives an hour). */
static void wait_ended_locked(struct ipd__sessions *ss, struct ipd__session *s)
{
    for (int64_t end = ipd_mono_ms() + DELETE_WAIT_MS;
         s->state != S_ENDED && ipd_mono_ms() < end;) {
        ipd__cond_wait_ms(&ss->cond, &ss->lock, 50);
    }
}

/* What the live sessions hold, of the node and of one caller's tenant
 * and (tenant, user). */
struct held {
    unsigned all, tenant, mine;
    int64_t all_charge, tenant_charge;
};

/* Count the live sessions (under the lock), ending those whose time is
 * over first: an expired session holds no place. */
static void count_locked(struct ipd__sessions *ss, const char *tenant,
                         const char *user, struct held *h)
{
    int64_t now = ipd_now_ms();

    memset(h, 0, sizeof(*h));
    for (struct ipd__session *s = ss->list; s; s = s->next) {
        expire_locked(s, now);
        if (!live(s))
            continue;
        bool same_tenant = !strcmp(s->tenant, tenant);
        h->all++;
        h->all_charge += s->charge;
        h->tenant += same_tenant;
        h->tenant_charge += same_tenant ? s->charge : 0;
        if (same_tenant && !strcmp(s->user, user))
            h->mine++;
    }
}

/* A session is ending: its uid comes free soon (under the lock). */
static bool ending_locked(struct ipd__sessions *ss)
{
    for (struct ipd__session *s = ss->list; s; s = s->next) {
        if (s->state == S_ENDING)
            return true;
    }
    return false;
}

/* Seconds until the earliest live session of a scope can end (tenant
 * NULL: any; user NULL: any of the tenant's): its idle expiry or its
 * maximum life, whichever comes first (a busy one past its maximum life:
 * when its call ends, soon).  1..RETRY_AFTER_MAX_S (under the lock). */
static int retry_after_locked(struct ipd__sessions *ss, const char *tenant,
                              const char *user)
{
    const struct ipd__executor_sessions_cfg *c = &ss->ex->sess_cfg;
    int64_t now = ipd_now_ms(), first = INT64_MAX;

    for (struct ipd__session *s = ss->list; s; s = s->next) {
        if (!live(s) || (tenant && strcmp(s->tenant, tenant)) ||
            (user && strcmp(s->user, user)))
            continue;
        int64_t e = expires_ms(c, s, now);
        first = e < first ? e : first;
    }
    if (first == INT64_MAX) /* only ending ones: their places come free */
        return 1;
    int64_t secs = (first - now + 999) / 1000;
    return secs < 1                   ? 1
           : secs > RETRY_AFTER_MAX_S ? RETRY_AFTER_MAX_S
                                      : (int)secs;
}

/* A policy whose memory alone is over a budget never gets a session. */
static enum ipd_err charge_fits(const struct ipd_exec_policy *ep,
                                int64_t tenant_budget, int64_t node_budget,
                                struct ipd_buf *detail)
{
    int64_t budget =
        tenant_budget && (!node_budget || tenant_budget < node_budget)
            ? tenant_budget
            : node_budget;
    if (!budget || ep->memory_bytes <= budget)
        return IPD_OK;
    ipd_buf_addf(detail,
                 "a session of policy %s is charged its memory "
                 "limit, %lld MiB, more than this tenant may hold "
                 "in sessions (%lld MiB: sessions-memory and the "
                 "policy's tenant-session-memory); ask the operator",
                 ep->name, (long long)(ep->memory_bytes / MIB),
                 (long long)(budget / MIB));
    return IPD_ERR_UNAVAILABLE;
}

/* The caller's own bounds: the user's count, the tenant's shares. */
static enum ipd_err tenant_checks(struct ipd__sessions *ss,
                                  const struct ipd_exec_policy *ep,
                                  const char *tenant, const char *user,
                                  const struct held *h, int *retry,
                                  struct ipd_buf *detail)
{
    const struct ipd__executor_sessions_cfg *c = &ss->ex->sess_cfg;
    unsigned t_max = ipd_policy_share(ep->tenant_sessions, c->max);
    int64_t t_mem =
        ipd_policy_share_bytes(ep->tenant_session_memory, c->memory);
    enum ipd_err rc = charge_fits(ep, t_mem, c->memory, detail);

    if (rc)
        return rc;
    if (h->mine >= c->per_user) {
        ipd_buf_addf(detail,
                     "this user has %u live sessions, the most "
                     "allowed; end one (DELETE) first",
                     h->mine);
        *retry = retry_after_locked(ss, tenant, user);
        return IPD_ERR_BUSY;
    }
    if (t_max && h->tenant >= t_max) {
        ipd_buf_addf(detail,
                     "this tenant has %u live sessions, its share "
                     "of this server's %u (policy tenant-sessions); "
                     "end one (DELETE) or retry later",
                     h->tenant, c->max);
        *retry = retry_after_locked(ss, tenant, NULL);
        return IPD_ERR_BUSY;
    }
    if (t_mem && h->tenant_charge + ep->memory_bytes > t_mem) {
        ipd_buf_addf(detail,
                     "this tenant's live sessions are charged %lld "
                     "MiB (each its policy's memory limit); one more "
                     "of policy %s (%lld MiB) would pass its share, "
                     "%lld MiB (policy tenant-session-memory); end "
                     "one (DELETE) or retry later",
                     (long long)(h->tenant_charge / MIB), ep->name,
                     (long long)(ep->memory_bytes / MIB),
                     (long long)(t_mem / MIB));
        *retry = retry_after_locked(ss, tenant, NULL);
        return IPD_ERR_BUSY;
    }
    return IPD_OK;
}

static enum ipd_err create_checks(struct ipd__sessions *ss,
                                  const struct ipd_exec_policy *ep,
                                  const char *tenant, const char *user,
                                  unsigned *idx, int *retry,
                                  struct ipd_buf *detail)
{
    const struct ipd__executor_sessions_cfg *c = &ss->ex->sess_cfg;
    struct held h;
    enum ipd_err rc;

    count_locked(ss, tenant, user, &h);
    if (ss->stopping || !c->max) {
        ipd_buf_adds(detail, "sessions are not available on this server");
        return IPD_ERR_UNAVAILABLE;
    }
    rc = tenant_checks(ss, ep, tenant, user, &h, retry, detail);
    if (rc)
        return rc;
    for (*idx = 0; *idx < c->max && ss->used[*idx]; (*idx)++)
        ;
    if (h.all >= c->max || *idx >= c->max) {
        ipd_buf_adds(detail, "this server has as many live sessions as it "
                             "allows; retry later");
        *retry = retry_after_locked(ss, NULL, NULL);
        return IPD_ERR_BUSY;
    }
    if (c->memory && h.all_charge + ep->memory_bytes > c->memory) {
        ipd_buf_addf(detail,
                     "this server's live sessions are charged %lld "
                     "MiB of the %lld MiB they may hold together "
                     "(sessions-memory); one of policy %s needs "
                     "%lld MiB; retry later",
                     (long long)(h.all_charge / MIB),
                     (long long)(c->memory / MIB), ep->name,
                     (long long)(ep->memory_bytes / MIB));
        *retry = retry_after_locked(ss, NULL, NULL);
        return IPD_ERR_BUSY;
    }
    return IPD_OK;
}

enum ipd_err ipd_executor_session_create(struct ipd_executor *ex,
                                         const char *tenant, const char *user,
                                         const char *policy, json_t **out,
                                         int *retry_after_s,
                                         struct ipd_buf *detail)
{
    struct ipd__sessions *ss = ex->sessions;
    const struct ipd_exec_policy *ep = ipd__policy_find(ex, policy);
    struct ipd__session *s;
    unsigned idx = 0;
    enum ipd_err rc;

    *out = NULL;
    *retry_after_s = 0;
    if (!ep || ep->network) {
        ipd_buf_addf(detail, "%s",
                     ep ? "a session cannot have a networked "
                          "policy; use one without network"
                        : "unknown policy");
        return IPD_ERR_INVALID;
    }
    pthread_mutex_lock(&ss->lock);
    rc = create_checks(ss, ep, tenant, user, &idx, retry_after_s, detail);
    /* A session that just ended (DELETE) holds its uid until its
     * processes are gone, a few ms: wait for that rather than refuse. */
    for (int64_t end = ipd_mono_ms() + ENDING_WAIT_MS;
         rc == IPD_ERR_BUSY && ending_locked(ss) && ipd_mono_ms() < end;) {
        ipd__cond_wait_ms(&ss->cond, &ss->lock, 50);
        ipd_buf_reset(detail);
        rc = create_checks(ss, ep, tenant, user, &idx, retry_after_s, detail);
    }
    if (rc) {
        pthread_mutex_unlock(&ss->lock);
        return rc;
    }
    s = ipd_xcalloc(1, sizeof(*s));
    s->ss = ss;
    ipd_id_new("sess", s->id);
    s->tenant = ipd_xstrdup(tenant);
    s->user = ipd_xstrdup(user);
    snprintf(s->policy, sizeof(s->policy), "%s", ep->name);
    s->idx = idx;
    s->charge = ep->memory_bytes;
    s->created_ms = s->used_ms = ipd_now_ms();
    s->wk.job_fd = s->wk.data_fd = -1;
    s->snapshot = json_object();
    if (ipd_sandbox_zygote_new(&ex->sbx, &s->z) ||
        pthread_create(&s->th, NULL, session_thread, s)) {
        pthread_mutex_unlock(&ss->lock);
        session_free(s);
        ipd_buf_adds(detail, "the session could not be started");
        return IPD_ERR_INTERNAL;
    }
    ss->used[idx] = true;
    s->next = ss->list;
    ss->list = s;
    *out = session_json(s);
    pthread_mutex_unlock(&ss->lock);
    return IPD_OK;
}

enum ipd_err ipd_executor_session_get(struct ipd_executor *ex,
                                      const char *tenant, const char *user,
                                      const char *id, json_t **out)
{
    struct ipd__sessions *ss = ex->sessions;
    enum ipd_err rc = IPD_ERR_NOT_FOUND;

    *out = NULL;
    pthread_mutex_lock(&ss->lock);
    struct ipd__session *s = find_locked(ss, tenant, user, id);
    if (s && !live(s))
        rc = IPD_ERR_GONE;
    else if (s) {
        *out = session_json(s);
        rc = IPD_OK;
    }
    pthread_mutex_unlock(&ss->lock);
    return rc;
}

json_t *ipd_executor_session_list(struct ipd_executor *ex, const char *tenant,
                                  const char *user)
{
    struct ipd__sessions *ss = ex->sessions;
    json_t *a = json_array();

    int64_t now = ipd_now_ms();

    pthread_mutex_lock(&ss->lock);
    for (struct ipd__session *s = ss->list; s; s = s->next) {
        if (strcmp(s->tenant, tenant) || strcmp(s->user, user))
            continue;
        expire_locked(s, now);
        if (live(s))
            json_array_append_new(a, session_json(s));
    }
    pthread_mutex_unlock(&ss->lock);
    return json_pack("{s:o}", "sessions", a);
}

enum ipd_err ipd_executor_session_delete(struct ipd_executor *ex,
                                         const char *tenant, const char *user,
                                         const char *id)
{
    struct ipd__sessions *ss = ex->sessions;
    enum ipd_err rc = IPD_ERR_NOT_FOUND;

    pthread_mutex_lock(&ss->lock);
    struct ipd__session *s = find_locked(ss, tenant, user, id);
    if (s) {
        end_locked(s, "deleted");
        /* Answer once its processes are gone, as a run answers once its
         * tree is (a call running in it ends first: its child is
         * killed).  Bounded: the zygote's exit takes some 50 ms. */
        if (!ss->stopping)
            wait_ended_locked(ss, s);
        rc = IPD_OK;
    }
    pthread_mutex_unlock(&ss->lock);
    return rc;
}

/* Drop tombstones older than TOMBSTONE_MS whose thread is done (under
 * the lock); they are joined and freed by the caller: *dead. */
static void prune_locked(struct ipd__sessions *ss, int64_t now,
                         struct ipd__session **dead)
{
    for (struct ipd__session **pp = &ss->list; *pp;) {
        struct ipd__session *s = *pp;
        if (s->state == S_ENDED && now - s->ended_ms > TOMBSTONE_MS) {
            *pp = s->next;
            s->next = *dead;
            *dead = s;
        } else {
            pp = &s->next;
        }
    }
}

void ipd_executor_sessions_reap(struct ipd_executor *ex)
{
    struct ipd__sessions *ss = ex->sessions;
    struct ipd__session *dead = NULL;
    int64_t now = ipd_now_ms();

    if (!ss)
        return;
    pthread_mutex_lock(&ss->lock);
    for (struct ipd__session *s = ss->list; s; s = s->next)
        expire_locked(s, now);
    prune_locked(ss, now, &dead);
    pthread_mutex_unlock(&ss->lock);
    while (dead) {
        struct ipd__session *s = dead;
        dead = s->next;
        pthread_join(s->th, NULL);
        session_free(s);
    }
}

/* Per tenant, its live sessions and what they are charged (under the
 * lock): [{"tenant", "live", "memory_charged_bytes"}], most charged
 * first. */
static json_t *tenants_json_locked(struct ipd__sessions *ss)
{
    json_t *by = json_object(), *a = json_array(), *v;
    const char *t;

    for (struct ipd__session *s = ss->list; s; s = s->next) {
        if (!live(s))
            continue;
        json_t *e = json_object_get(by, s->tenant);
        if (!e) {
            e = json_pack("{s:s,s:I,s:I}", "tenant", s->tenant, "live",
                          (json_int_t)0, "memory_charged_bytes", (json_int_t)0);
            json_object_set_new(by, s->tenant, e);
        }
        json_t *n = json_object_get(e, "live");
        json_t *m = json_object_get(e, "memory_charged_bytes");
        json_integer_set(n, json_integer_value(n) + 1);
        json_integer_set(m, json_integer_value(m) + s->charge);
    }
    json_object_foreach(by, t, v)
    {
        size_t i = 0;
        json_int_t m =
            json_integer_value(json_object_get(v, "memory_charged_bytes"));
        while (i < json_array_size(a) &&
               json_integer_value(json_object_get(json_array_get(a, i),
                                                  "memory_charged_bytes")) >= m)
            i++;
        json_array_insert(a, i, v);
    }
    json_decref(by);
    return a;
}

json_t *ipd_executor_sessions_json(struct ipd_executor *ex)
{
    struct ipd__sessions *ss = ex->sessions;
    int64_t live_n = 0, mem = 0, charged = 0;
    json_t *tenants;

    ipd_executor_sessions_gauges(ex, &live_n, &mem, &charged);
    if (ss) {
        pthread_mutex_lock(&ss->lock);
        tenants = tenants_json_locked(ss);
        pthread_mutex_unlock(&ss->lock);
    } else {
        tenants = json_array();
    }
    return json_pack(
        "{s:I,s:I,s:I,s:I,s:I,s:I,s:o}", "live", (json_int_t)live_n, "max",
        (json_int_t)(ss ? ex->sess_cfg.max : 0), "per_user",
        (json_int_t)ex->sess_cfg.per_user, "memory_bytes", (json_int_t)mem,
        "memory_charged_bytes", (json_int_t)charged, "memory_budget_bytes",
        (json_int_t)ex->sess_cfg.memory, "tenants", tenants);
}

void ipd_executor_sessions_gauges(struct ipd_executor *ex, int64_t *live_n,
                                  int64_t *memory, int64_t *charged)
{
    struct ipd__sessions *ss = ex->sessions;
    int64_t now = ipd_now_ms();

    *live_n = *memory = *charged = 0;
    if (!ss)
        return;
    pthread_mutex_lock(&ss->lock);
    for (struct ipd__session *s = ss->list; s; s = s->next) {
        expire_locked(s, now);
        if (!live(s))
            continue;
        (*live_n)++;
        *memory += s->memory;
        *charged += s->charge;
    }
    pthread_mutex_unlock(&ss->lock);
}

/* ---- calls -------------------------------------------------------------- */

/* Whether s may take a call now (under the lock): NOT_FOUND (s NULL),
 * GONE (ended, also when it was ended while a call still runs in it:
 * the session is over, whatever its last call is doing), IN_USE (a call
 * runs), with detail; else IPD_OK.  The one answer for the pre-check
 * (ipd_executor_session_check) and the take (call_begin). */
static enum ipd_err call_refusal_locked(const struct ipd__session *s,
                                        struct ipd_buf *detail)
{
    if (!s) {
        ipd_buf_adds(detail, "no such session");
        return IPD_ERR_NOT_FOUND;
    }
    if (!live(s)) {
        ipd_buf_addf(detail, "the session ended: %s", s->why);
        return IPD_ERR_GONE;
    }
    if (s->busy) {
        ipd_buf_adds(detail, "the session is running another execution");
        return IPD_ERR_IN_USE;
    }
    return IPD_OK;
}

enum ipd_err ipd_executor_session_check(struct ipd_executor *ex,
                                        const char *tenant, const char *user,
                                        const char *id, struct ipd_buf *detail)
{
    struct ipd__sessions *ss = ex->sessions;
    enum ipd_err rc;

    pthread_mutex_lock(&ss->lock);
    rc = call_refusal_locked(find_locked(ss, tenant, user, id), detail);
    pthread_mutex_unlock(&ss->lock);
    return rc;
}

/* The 503's detail when a session's interpreter could not start, with
 * the cause, which also becomes the session's why (its later calls' 410).
 * A zygote that is gone ended on its own (it could not open its program,
 * an import failed): its exit status and stderr come with the end of its
 * run, on the session's thread, which records them as the session's why
 * (serve_zygote) within moments; wait for that, bounded. */
static void park_failure_detail(struct ipd__session *s, enum ipd_err rc,
                                const char *err, const char *why,
                                struct ipd_buf *detail)
{
    static const char ended[] = "its interpreter ended";
    static const char nostart[] = "its interpreter could not start: ";
    struct ipd__sessions *ss = s->ss;
    int64_t until = ipd_now_ms() + 5000;
    char cause[sizeof(s->why)];

    pthread_mutex_lock(&ss->lock);
    while (rc == IPD_ERR_UNAVAILABLE && live(s) && ipd_now_ms() < until)
        ipd__cond_wait_ms(&ss->cond, &ss->lock, 50);
    if (live(s)) {
        snprintf(cause, sizeof(cause), "%s%s", nostart,
                 err[0]   ? err
                 : why[0] ? why
                          : "no reason given");
        end_locked(s, cause);
    }
    if (!strncmp(s->why, ended, sizeof(ended) - 1))
        ipd_buf_addf(detail,
                     "the session's interpreter could not start: it "
                     "ended%s",
                     s->why + sizeof(ended) - 1);
    else if (!strncmp(s->why, nostart, sizeof(nostart) - 1))
        ipd_buf_addf(detail, "the session's interpreter could not start: %s",
                     s->why + sizeof(nostart) - 1);
    else /* ended meanwhile for another reason (DELETE, shutdown) */
        ipd_buf_addf(detail,
                     "the session's interpreter could not start: the "
                     "session ended: %s",
                     s->why);
    pthread_mutex_unlock(&ss->lock);
}

/* Park s's child for its calls (the first call: it waits for the
 * zygote's imports).  UNAVAILABLE with detail when it cannot; the
 * session is ended then. */
static enum ipd_err park_child(struct ipd_executor *ex, struct ipd__session *s,
                               struct ipd_buf *detail)
{
    const struct ipd_exec_policy *ep = ipd__policy_find(ex, s->policy);
    struct ipd_sandbox_policy p;
    struct ipd_buf why;
    char err[256] = "";
    enum ipd_err rc;

    ipd_buf_init(&why, 256);
    rc = ipd_sandbox_zygote_wait_ready(s->z, READY_WAIT_MS, err, sizeof(err));
    if (!rc)
        rc = ipd__run_stage_create(ex, &s->wk, NULL,
                                   ipd__session_uid(ex, s->idx), &why);
    if (!rc) {
        struct ipd_sandbox_mount m[] = {
            {"job", "/mnt/job", false, s->wk.stage},
            {"data", "/mnt/data", false, s->wk.stage}};
        ipd__policy_to_sandbox(ep, ep->max_timeout_ms, &p);
        rc = ipd_sandbox_park(s->z, &p, m, 2, IPD_SANDBOX_PARK_SESSION, NULL,
                              PARK_WAIT_MS, &s->pk, err, sizeof(err));
    }
    if (rc) {
        ipd_warn("session %s: cannot start: %s%s", s->id, err, why.buf);
        park_failure_detail(s, rc, err, why.buf, detail);
        rc = IPD_ERR_UNAVAILABLE;
    }
    ipd_buf_release(&why);
    return rc;
}

static void call_end(struct ipd_executor *ex, struct ipd__session *s,
                     const char *why);

/* Take the caller's session for one call (busy until call_end), its
 * child parked (the first call waits for the zygote and parks it).  *sp
 * on IPD_OK; else NOT_FOUND, GONE, IN_USE, UNAVAILABLE, with detail. */
static enum ipd_err call_begin(struct ipd_executor *ex, const char *tenant,
                               const char *user, const char *id,
                               struct ipd__session **sp, struct ipd_buf *detail)
{
    struct ipd__sessions *ss = ex->sessions;
    struct ipd__session *s;
    enum ipd_err rc;

    *sp = NULL;
    pthread_mutex_lock(&ss->lock);
    /* find_locked ended it if its time is over: a call never starts
     * past the session's idle expiry or maximum life. */
    s = find_locked(ss, tenant, user, id);
    rc = call_refusal_locked(s, detail);
    if (!rc) {
        s->busy = true;
        s->used_ms = ipd_now_ms();
    }
    pthread_mutex_unlock(&ss->lock);
    if (rc)
        return rc;
    if (!s->pk) {
        rc = park_child(ex, s, detail);
        if (rc) {
            call_end(ex, s, "its interpreter could not start");
            return rc;
        }
    }
    *sp = s;
    return IPD_OK;
}

/* The call is over: not busy any more, READY, or ended (why: this call
 * ended it; NULL: it did not).  A session past its maximum life ends
 * here too. */
static void call_end(struct ipd_executor *ex, struct ipd__session *s,
                     const char *why)
{
    struct ipd__sessions *ss = ex->sessions;
    int64_t mem = s->pk ? ipd_sandbox_parked_memory(s->pk) : -1;

    pthread_mutex_lock(&ss->lock);
    s->used_ms = ipd_now_ms();
    s->memory = mem > 0 ? mem : 0;
    s->busy = false;
    if (s->state == S_STARTING)
        s->state = S_READY;
    /* The maximum life passed during the call: it ends now, with it
     * (the reaper skips a busy session, and back-to-back calls keep it
     * busy). */
    if (!why && s->used_ms >= s->created_ms + ex->sess_cfg.max_life_ms)
        why = "it reached its maximum life";
    /* Ended by this call, or during it (DELETE, shutdown). */
    if (why || ss->stopping || !live(s))
        end_locked(s, why ? why : "the service stopped");
    pthread_cond_broadcast(&ss->cond);
    pthread_mutex_unlock(&ss->lock);
}

/* After call_end: set the call's result's "session_ended" (the session
 * has ended, by this call or when it ended: its maximum life) and
 * "session_end_reason" (why, or null).  result NULL: nothing. */
static void call_result(struct ipd__session *s, json_t *result)
{
    bool ended;
    char why[sizeof(s->why)];

    if (!result)
        return;
    pthread_mutex_lock(&s->ss->lock);
    ended = !live(s);
    snprintf(why, sizeof(why), "%s", s->why);
    pthread_mutex_unlock(&s->ss->lock);
    json_object_set_new(result, "session_ended", json_boolean(ended));
    json_object_set_new(result, "session_end_reason",
                        ended ? json_string(why) : json_null());
}

/* True when s was ended during its call (DELETE, reaping, shutdown);
 * appends "the session ended: <why>" to detail then. */
static bool ended_during_call(struct ipd__session *s, struct ipd_buf *detail)
{
    bool ended;

    pthread_mutex_lock(&s->ss->lock);
    ended = !live(s);
    if (ended)
        ipd_buf_addf(detail, "the session ended: %s", s->why);
    pthread_mutex_unlock(&s->ss->lock);
    return ended;
}

/* Cut dirfd/name to 0 bytes, then unlink it: a descriptor or mapping the
 * session's code kept reads nothing and holds no page of the stage (the
 * service's memory).  The session cannot write to the stage (a read-only
 * mount), so every name in it is one the service made. */
static void empty_and_unlink(int dirfd, const char *name)
{
    int w = openat(dirfd, name, O_WRONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (w >= 0 && ftruncate(w, 0))
        ipd_warn("session: a staged file could not be emptied: %s",
                 strerror(errno));
    if (w >= 0)
        close(w);
    (void)unlinkat(dirfd, name, 0);
}

/* Empty data/: every data/<file_id>/<filename> staged, then its dir. */
static void clear_inputs(int data_fd)
{
    int fd = data_fd >= 0 ? dup(data_fd) : -1;
    DIR *d = ipd_fdopendir(fd);
    struct dirent *e;

    if (!d)
        return;
    rewinddir(d); /* the offset is data_fd's, shared by the dup */
    while ((e = ipd_readdir(d)) != NULL) {
        int sub = openat(data_fd, e->d_name,
                         O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        DIR *sd = ipd_fdopendir(sub);
        struct dirent *f;
        if (!sd) {
            empty_and_unlink(data_fd, e->d_name);
            continue;
        }
        while ((f = ipd_readdir(sd)) != NULL)
            empty_and_unlink(sub, f->d_name);
        closedir(sd);
        (void)unlinkat(data_fd, e->d_name, AT_REMOVEDIR);
    }
    closedir(d);
}

/* A session's call is over (or about to start): nothing of a job stays
 * in the session's stage, neither its code, files.json and variables.json
 * (up to the request's 8 MiB) nor its input files.  What the call's code
 * copied is its own (/tmp, /mnt/output, memory), within the session's
 * limits. */
static void clear_call(struct ipd__run_stage *wk)
{
    static const char *const names[] = {"code.py", "files.json",
                                        "variables.json", "calls.json"};
    for (size_t i = 0; i < IPD_ARRAY_LEN(names); i++)
        empty_and_unlink(wk->job_fd, names[i]);
    clear_inputs(wk->data_fd);
}

/* Why a call ended its session, or NULL. */
static const char *session_end_why(const struct ipd_sandbox_result *r,
                                   bool ended)
{
    if (!ended)
        return NULL;
    if (r->timed_out)
        return "an execution timed out";
    if (r->oom_killed)
        return "an execution used more memory than its policy allows";
    if (r->cancelled)
        return "a cancelled call did not stop within 2 s of "
               "KeyboardInterrupt";
    return "its interpreter exited";
}

enum ipd_err ipd__session_call(struct ipd_executor *ex,
                               const struct ipd_exec_request *rq,
                               int64_t timeout_ms, json_t **result,
                               struct ipd_buf *detail)
{
    struct ipd__session *s = NULL;
    struct ipd_sandbox_result r;
    struct ipd__installs ins;
    char id[IPD_ID_MAX];
    bool ended = false;
    enum ipd_err rc =
        call_begin(ex, rq->tenant, rq->user_id, rq->session_id, &s, detail);
    if (rc)
        return rc;
    const struct ipd_exec_policy *ep = ipd__policy_find(ex, s->policy);
    struct ipd__run_stage *wk = &s->wk;
    /* The session's policy sets the limits, so its default timeout too
     * (not the one of a policy the request names). */
    if (!rq->timeout_ms)
        timeout_ms = ep->timeout_ms;
    if (timeout_ms > ep->max_timeout_ms)
        timeout_ms = ep->max_timeout_ms;
    memset(&ins, 0, sizeof(ins));
    ins.results = json_array();
    ipd__exec_id(rq->execution_id, id);
    clear_call(wk);
    /* A call's inputs are in the service's memory (the stage's tmpfs)
     * while it runs: at most what the session may hold itself. */
    rc = ipd__stage_job(ex, rq, ep, wk, ep->memory_bytes, detail);
    if (!rc) {
        rc = ipd_sandbox_parked_call(s->pk, IPD_ZPROTO_GO, timeout_ms, rq->live,
                                     &r, &ended);
        clear_call(wk);
        if (!rc) {
            *result = ipd__build_result(ex, rq, id, ep, timeout_ms, &r, &ins,
                                        s->snapshot);
            json_object_set_new(*result, "session_id",
                                json_string(rq->session_id));
        } else if (ended_during_call(s, detail)) {
            /* Ended under the call (DELETE, shutdown): its zygote, and
             * the child with it, were stopped.  Not an internal error. */
            rc = IPD_ERR_GONE;
            ended = true;
        } else {
            ipd_error("session %s: %s", rq->session_id, r.error);
            ipd_buf_adds(detail, "the session's interpreter failed");
            ended = true;
        }
        call_end(ex, s, session_end_why(&r, ended));
        call_result(s, *result); /* session_ended, and why */
        ipd_sandbox_result_release(&r);
    } else {
        clear_call(wk);
        call_end(ex, s, NULL);
    }
    json_decref(ins.results);
    return rc;
}

/* ---- variables ---------------------------------------------------------- */

/* The listing the variables call left (.interpd/variables.json in the
 * session's /mnt/output, written by code the session's user controls),
 * parsed by ipd_varlist_parse from at most IPD_VARLIST_FILE_MAX bytes
 * (one more is read to tell a longer file, which is refused).  New ref,
 * or NULL when there is no listing of the right shape. */
static json_t *read_listing(const struct ipd_sandbox_result *r)
{
    struct stat st;
    size_t max = IPD_VARLIST_FILE_MAX + 1, got = 0;
    char *text = NULL;
    json_t *out = NULL;
    int fd = ipd_sandbox_output_open(r, ".interpd/variables.json",
                                     O_RDONLY | O_NONBLOCK);

    if (fd < 0 || fstat(fd, &st) || !S_ISREG(st.st_mode))
        goto out;
    text = ipd_xmalloc(max);
    while (got < max) {
        ssize_t n = read(fd, text + got, max - got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        got += (size_t)n;
    }
    (void)ipd_varlist_parse(text, got, &out);
out:
    if (fd >= 0)
        close(fd);
    free(text);
    return out;
}

enum ipd_err ipd_executor_session_variables(struct ipd_executor *ex,
                                            const char *tenant,
                                            const char *user, const char *id,
                                            json_t **out,
                                            struct ipd_buf *detail)
{
    struct ipd__session *s = NULL;
    struct ipd_sandbox_result r;
    bool ended = false;
    enum ipd_err rc;

    *out = NULL;
    rc = call_begin(ex, tenant, user, id, &s, detail);
    if (rc)
        return rc;
    rc = ipd_sandbox_parked_call(s->pk, IPD_ZPROTO_VARIABLES,
                                 VARIABLES_TIMEOUT_MS, NULL, &r, &ended);
    if (!rc && !ended && r.exit_code == 0)
        *out = read_listing(&r);
    call_end(ex, s,
             ended ? (r.timed_out ? "listing its variables timed out"
                                  : "its interpreter ended")
                   : NULL);
    ipd_sandbox_result_release(&r);
    if (!*out) {
        ipd_buf_adds(detail, ended ? "the session ended while listing its "
                                     "variables"
                                   : "the session's variables could not be "
                                     "listed");
        return ended ? IPD_ERR_GONE : IPD_ERR_INTERNAL;
    }
    return IPD_OK;
}
