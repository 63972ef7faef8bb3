/*
 * session.c - stateful sessions (CONTRACT.md, Sessions; docs/SANDBOX.md,
 * "Warm, cold and session runs").
 *
 * A session is a zygote of its own (its own host uid: sandbox-uid + 1 +
 * slots + its index, so no two live sessions share per-user kernel
 * budgets) and one child of it parked as a session's
 * (IPD_SANDBOX_PARK_SESSION): its interpreter, __main__ module, /tmp and
 * /mnt/output live from call to call.  Its staging (job/, data/,
 * interpd/) is kept too: each call rewrites the job and adds its files.
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
 * Locking: ss->lock guards the list and every session's state; a call
 * holds no lock while it runs (state BUSY keeps the session's parts
 * alive: the thread frees them only once no call is in).
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../../venv/venv.h"
#include "../common/log.h"
#include "../common/util.h"
#include "exec_internal.h"

#define READY_WAIT_MS 60000   /* a first call waits this long for imports */
#define PARK_WAIT_MS 30000
#define VARIABLES_TIMEOUT_MS 10000
#define TOMBSTONE_MS (3600LL * 1000)
#define VARIABLES_FILE_MAX (1 << 20)
#define ENDING_WAIT_MS 5000   /* a create waits for an ending one's uid */
#define DELETE_WAIT_MS 5000   /* a DELETE waits for the session's end */

enum sess_state { S_STARTING, S_READY, S_BUSY, S_ENDING, S_ENDED };

struct ipd__session {
    struct ipd__sessions *ss;
    char id[IPD_ID_MAX];
    char *tenant, *user;      /* owned */
    char policy[IPD_EXEC_POLICY_NAME_MAX];
    unsigned idx;             /* its uid's index */
    int64_t created_ms, used_ms, ended_ms; /* wall clock */
    enum sess_state state;
    char why[320];            /* why it ended (with its interpreter's
                                 own words when that ended it) */
    bool calls;               /* a call has run (the child is parked) */
    pthread_t th;
    struct ipd_sandbox_zygote *z;
    struct ipd_sandbox_parked *pk;
    struct ipd__work wk;      /* the session's staging */
    json_t *snapshot;         /* /mnt/output after the last call */
    int64_t memory;           /* bytes, at the last call's end */
    struct ipd__session *next;
};

struct ipd__sessions {
    struct ipd_executor *ex;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    struct ipd__session *list;
    bool *used;               /* uid indexes in use (max) */
    bool stopping;
};

static int64_t expires_ms(const struct ipd__executor_sessions_cfg *c,
                          const struct ipd__session *s)
{
    int64_t idle = s->used_ms + c->idle_ms;
    int64_t life = s->created_ms + c->max_life_ms;
    return idle < life ? idle : life;
}

static const char *state_name(enum sess_state st)
{
    switch (st) {
    case S_STARTING: return "starting";
    case S_READY: return "ready";
    case S_BUSY: return "busy";
    case S_ENDING:
    case S_ENDED: return "ended";
    }
    return "ended";
}

/* The session's JSON (under the lock). */
static json_t *session_json(const struct ipd__session *s)
{
    char c[IPD_TIME_STR], e[IPD_TIME_STR], u[IPD_TIME_STR];
    const struct ipd__executor_sessions_cfg *cfg = &s->ss->ex->sess_cfg;

    ipd_time_format(s->created_ms, c);
    ipd_time_format(expires_ms(cfg, s), e);
    ipd_time_format(s->used_ms, u);
    return json_pack("{s:s,s:s,s:s,s:s,s:s,s:s}", "session_id", s->id,
                     "created_at", c, "expires_at", e, "last_used_at", u,
                     "status", state_name(s->state), "policy", s->policy);
}

/* End s (under the lock): its zygote stops; the session's thread frees
 * the rest once no call is in. */
static void end_locked(struct ipd__session *s, const char *why)
{
    if (s->state == S_ENDED)
        return;
    if (!s->ended_ms) { /* the first reason is the one kept */
        snprintf(s->why, sizeof(s->why), "%s", why);
        s->ended_ms = ipd_now_ms();
        ipd_sandbox_zygote_stop(s->z);
        /* What the code runs stops now, not once the zygote has wound
         * down (its interpreter's exit, some 50 ms).  Not under a call:
         * that one kills the child itself when it sees the zygote go. */
        if (s->state != S_BUSY)
            ipd_sandbox_parked_kill(s->pk);
        ipd_info("session %s ended: %s", s->id, why);
    }
    if (s->state != S_BUSY)
        s->state = S_ENDING;
    pthread_cond_broadcast(&s->ss->cond);
}

/* ---- the session's thread ---------------------------------------------- */

static void session_started(void *ctx, const char *gen)
{
    (void)ctx;
    (void)gen;
}

/* Why the session's zygote ended, for the session's why (what a call
 * answers then): the exit status or signal and the first line of its
 * stderr (e.g. "can't open file '/opt/interpd/zygote.py'"), printable
 * ASCII only, cut to fit. */
static void zygote_end_cause(const struct ipd_sandbox_result *r,
                             const char *notstarted, char *out, size_t len)
{
    char line[200];
    size_t n = 0;

    for (size_t i = 0; i < r->err.len && r->err.buf[i] != '\n' &&
                       n + 1 < sizeof(line);
         i++) {
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

static void session_run(struct ipd__session *s)
{
    struct ipd_executor *ex = s->ss->ex;
    struct ipd_sandbox_result r;
    char why[200] = "", cause[sizeof(s->why)];

    if (ipd__zygote_serve(ex, s->z, ipd__session_uid(ex, s->idx),
                          ex->sess_cfg.max_life_ms + 60000, session_started,
                          s, &r, why, sizeof(why)) &&
        why[0])
        ipd_warn("session %s: its interpreter did not start: %s", s->id,
                 why);
    zygote_end_cause(&r, why, cause, sizeof(cause));
    ipd_sandbox_result_release(&r);
    pthread_mutex_lock(&s->ss->lock);
    end_locked(s, cause);
    while (s->state == S_BUSY)
        pthread_cond_wait(&s->ss->cond, &s->ss->lock);
    pthread_mutex_unlock(&s->ss->lock);
    ipd_sandbox_parked_free(s->pk);
    ipd__work_remove(&s->wk);
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
    session_run(arg);
    return NULL;
}

/* ---- the executor's side ----------------------------------------------- */

enum ipd_err ipd__sessions_new(struct ipd_executor *ex)
{
    struct ipd__sessions *ss = ipd_xcalloc(1, sizeof(*ss));

    ss->ex = ex;
    pthread_mutex_init(&ss->lock, NULL);
    pthread_cond_init(&ss->cond, NULL);
    ss->used = ipd_xcalloc(ex->sess_cfg.max ? ex->sess_cfg.max : 1,
                           sizeof(bool));
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
            !strcmp(s->user, user))
            return s;
    }
    return NULL;
}

/* Wait (under the lock, bounded) until s has ENDED: its thread has freed
 * the child and its zygote's run is over, so no process of it is left.
 * s stays listed meanwhile (a tombstone lives an hour). */
static void wait_ended_locked(struct ipd__sessions *ss,
                              struct ipd__session *s)
{
    for (int64_t end = ipd_mono_ms() + DELETE_WAIT_MS;
         s->state != S_ENDED && ipd_mono_ms() < end;) {
        ipd__cond_wait_ms(&ss->cond, &ss->lock, 50);
    }
}

/* Counts of live sessions: all, and the caller's (under the lock). */
static void count_locked(struct ipd__sessions *ss, const char *tenant,
                         const char *user, unsigned *all, unsigned *mine)
{
    *all = *mine = 0;
    for (struct ipd__session *s = ss->list; s; s = s->next) {
        if (s->state == S_ENDED || s->state == S_ENDING)
            continue;
        (*all)++;
        if (!strcmp(s->tenant, tenant) && !strcmp(s->user, user))
            (*mine)++;
    }
}

/* A session is ending: its uid comes free soon (under the lock). */
static bool ending_locked(struct ipd__sessions *ss)
{
    for (struct ipd__session *s = ss->list; s; s = s->next) {
        if (s->state == S_ENDING || (s->ended_ms && s->state != S_ENDED))
            return true;
    }
    return false;
}

static enum ipd_err create_checks(struct ipd__sessions *ss,
                                  const char *tenant, const char *user,
                                  unsigned *idx, struct ipd_buf *detail)
{
    const struct ipd__executor_sessions_cfg *c = &ss->ex->sess_cfg;
    unsigned all, mine;

    count_locked(ss, tenant, user, &all, &mine);
    if (ss->stopping || !c->max) {
        ipd_buf_adds(detail, "sessions are not available on this server");
        return IPD_ERR_UNAVAILABLE;
    }
    if (mine >= c->per_user) {
        ipd_buf_addf(detail, "this user has %u live sessions, the most "
                             "allowed; end one (DELETE) first", mine);
        return IPD_ERR_BUSY;
    }
    for (*idx = 0; *idx < c->max && ss->used[*idx]; (*idx)++)
        ;
    if (all >= c->max || *idx >= c->max) {
        ipd_buf_adds(detail, "this server has as many live sessions as it "
                             "allows; retry later");
        return IPD_ERR_BUSY;
    }
    return IPD_OK;
}

enum ipd_err ipd_executor_session_create(struct ipd_executor *ex,
                                         const char *tenant,
                                         const char *user,
                                         const char *policy, json_t **out,
                                         struct ipd_buf *detail)
{
    struct ipd__sessions *ss = ex->sessions;
    const struct ipd_exec_policy *ep = ipd__policy_find(ex, policy);
    struct ipd__session *s;
    unsigned idx = 0;
    enum ipd_err rc;

    *out = NULL;
    if (!ep || ep->network) {
        ipd_buf_addf(detail, "%s", ep ? "a session cannot have a networked "
                                        "policy; use one without network"
                                      : "unknown policy");
        return IPD_ERR_INVALID;
    }
    pthread_mutex_lock(&ss->lock);
    rc = create_checks(ss, tenant, user, &idx, detail);
    /* A session that just ended (DELETE) holds its uid until its
     * processes are gone, a few ms: wait for that rather than refuse. */
    for (int64_t end = ipd_mono_ms() + ENDING_WAIT_MS;
         rc == IPD_ERR_BUSY && ending_locked(ss) && ipd_mono_ms() < end;) {
        ipd__cond_wait_ms(&ss->cond, &ss->lock, 50);
        ipd_buf_reset(detail);
        rc = create_checks(ss, tenant, user, &idx, detail);
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
    if (s && (s->state == S_ENDED || s->state == S_ENDING))
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

    pthread_mutex_lock(&ss->lock);
    for (struct ipd__session *s = ss->list; s; s = s->next) {
        if (s->state != S_ENDED && s->state != S_ENDING &&
            !strcmp(s->tenant, tenant) && !strcmp(s->user, user))
            json_array_append_new(a, session_json(s));
    }
    pthread_mutex_unlock(&ss->lock);
    return json_pack("{s:o}", "sessions", a);
}

enum ipd_err ipd_executor_session_delete(struct ipd_executor *ex,
                                         const char *tenant,
                                         const char *user, const char *id)
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
    for (struct ipd__session *s = ss->list; s; s = s->next) {
        if (s->state != S_READY && s->state != S_STARTING)
            continue;
        if (now >= s->created_ms + ex->sess_cfg.max_life_ms)
            end_locked(s, "it reached its maximum life");
        else if (now >= s->used_ms + ex->sess_cfg.idle_ms)
            end_locked(s, "it was idle");
    }
    prune_locked(ss, now, &dead);
    pthread_mutex_unlock(&ss->lock);
    while (dead) {
        struct ipd__session *s = dead;
        dead = s->next;
        pthread_join(s->th, NULL);
        session_free(s);
    }
}

json_t *ipd_executor_sessions_json(struct ipd_executor *ex)
{
    struct ipd__sessions *ss = ex->sessions;
    int64_t live = 0, mem = 0;

    ipd_executor_sessions_gauges(ex, &live, &mem);
    return json_pack("{s:I,s:I,s:I,s:I}", "live", (json_int_t)live, "max",
                     (json_int_t)(ss ? ex->sess_cfg.max : 0), "per_user",
                     (json_int_t)ex->sess_cfg.per_user, "memory_bytes",
                     (json_int_t)mem);
}

void ipd_executor_sessions_gauges(struct ipd_executor *ex, int64_t *live,
                                  int64_t *memory)
{
    struct ipd__sessions *ss = ex->sessions;

    *live = *memory = 0;
    if (!ss)
        return;
    pthread_mutex_lock(&ss->lock);
    for (struct ipd__session *s = ss->list; s; s = s->next) {
        if (s->state == S_ENDED || s->state == S_ENDING)
            continue;
        (*live)++;
        *memory += s->memory;
    }
    pthread_mutex_unlock(&ss->lock);
}

/* ---- calls -------------------------------------------------------------- */

enum ipd_err ipd_executor_session_check(struct ipd_executor *ex,
                                        const char *tenant, const char *user,
                                        const char *id,
                                        struct ipd_buf *detail)
{
    struct ipd__sessions *ss = ex->sessions;
    enum ipd_err rc = IPD_OK;

    pthread_mutex_lock(&ss->lock);
    struct ipd__session *s = find_locked(ss, tenant, user, id);
    if (!s) {
        rc = IPD_ERR_NOT_FOUND;
        ipd_buf_adds(detail, "no such session");
    } else if (s->ended_ms || s->state == S_ENDED) {
        rc = IPD_ERR_GONE;
        ipd_buf_addf(detail, "the session ended: %s", s->why);
    } else if (s->state == S_BUSY) {
        rc = IPD_ERR_IN_USE;
        ipd_buf_adds(detail, "the session is running another execution");
    }
    pthread_mutex_unlock(&ss->lock);
    return rc;
}

/* Take the caller's session for a call: BUSY, parked (the first call
 * waits for the zygote and parks its child).  *sp on IPD_OK; else
 * NOT_FOUND, GONE, IN_USE (busy), UNAVAILABLE, with detail. */
enum ipd_err ipd__session_begin(struct ipd_executor *ex, const char *tenant,
                                const char *user, const char *id,
                                struct ipd__session **sp,
                                struct ipd_buf *detail)
{
    struct ipd__sessions *ss = ex->sessions;
    struct ipd__session *s;
    enum ipd_err rc = IPD_OK;

    *sp = NULL;
    pthread_mutex_lock(&ss->lock);
    s = find_locked(ss, tenant, user, id);
    if (!s)
        rc = IPD_ERR_NOT_FOUND;
    else if (s->state == S_ENDED || s->state == S_ENDING)
        rc = IPD_ERR_GONE;
    else if (s->state == S_BUSY)
        rc = IPD_ERR_IN_USE;
    if (rc) {
        if (rc == IPD_ERR_GONE)
            ipd_buf_addf(detail, "the session ended: %s", s->why);
        else
            ipd_buf_adds(detail, rc == IPD_ERR_IN_USE
                                     ? "the session is running another "
                                       "execution"
                                     : "no such session");
        pthread_mutex_unlock(&ss->lock);
        return rc;
    }
    s->state = S_BUSY;
    s->used_ms = ipd_now_ms();
    pthread_mutex_unlock(&ss->lock);
    if (!s->pk) {
        rc = ipd__session_park(ex, s, detail);
        if (rc) {
            ipd__session_end(ex, s, "its interpreter could not start", NULL);
            return rc;
        }
    }
    *sp = s;
    return IPD_OK;
}

/* The 503's detail when a session's interpreter could not start, with
 * the cause, which also becomes the session's why (its later calls' 410).
 * A zygote that is gone ended on its own (it could not open its program,
 * an import failed): its exit status and stderr come with the end of its
 * run, on the session's thread, which records them as the session's why
 * (session_run) within moments; wait for that, bounded. */
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
    while (rc == IPD_ERR_UNAVAILABLE && !s->ended_ms &&
           ipd_now_ms() < until)
        ipd__cond_wait_ms(&ss->cond, &ss->lock, 50);
    if (!s->ended_ms) {
        snprintf(cause, sizeof(cause), "%s%s", nostart,
                 err[0] ? err : why[0] ? why : "no reason given");
        end_locked(s, cause);
    }
    if (!strncmp(s->why, ended, sizeof(ended) - 1))
        ipd_buf_addf(detail, "the session's interpreter could not start: it "
                             "ended%s", s->why + sizeof(ended) - 1);
    else if (!strncmp(s->why, nostart, sizeof(nostart) - 1))
        ipd_buf_addf(detail, "the session's interpreter could not start: %s",
                     s->why + sizeof(nostart) - 1);
    else /* ended meanwhile for another reason (DELETE, shutdown) */
        ipd_buf_addf(detail, "the session's interpreter could not start: the "
                             "session ended: %s", s->why);
    pthread_mutex_unlock(&ss->lock);
}

enum ipd_err ipd__session_park(struct ipd_executor *ex,
                               struct ipd__session *s, struct ipd_buf *detail)
{
    const struct ipd_exec_policy *ep = ipd__policy_find(ex, s->policy);
    struct ipd_sandbox_policy p;
    struct ipd_buf why;
    char err[256] = "";
    enum ipd_err rc;

    ipd_buf_init(&why, 256);
    rc = ipd_sandbox_zygote_wait_ready(s->z, READY_WAIT_MS, err, sizeof(err));
    if (!rc)
        rc = ipd__work_create(ex, &s->wk, NULL,
                              ipd__session_uid(ex, s->idx), &why);
    if (!rc) {
        struct ipd_sandbox_mount m[] = {
            {"job", "/mnt/job", false, s->wk.stage},
            {"data", "/mnt/data", false, s->wk.stage}};
        ipd__policy_to_sandbox(ep, ep->max_timeout_ms, &p);
        rc = ipd_sandbox_park(s->z, &p, m, 2, IPD_SANDBOX_PARK_SESSION,
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

/* The call is over: READY again, or ended (why). */
void ipd__session_end(struct ipd_executor *ex, struct ipd__session *s,
                      const char *why, const struct ipd_sandbox_result *r)
{
    struct ipd__sessions *ss = ex->sessions;
    int64_t mem = s->pk ? ipd_sandbox_parked_memory(s->pk) : -1;

    (void)r;
    pthread_mutex_lock(&ss->lock);
    s->calls = true;
    s->used_ms = ipd_now_ms();
    s->memory = mem > 0 ? mem : 0;
    if (s->state == S_BUSY)
        s->state = S_READY;
    /* Ended by this call, or during it (DELETE, idleness, shutdown). */
    if (why || ss->stopping || s->ended_ms)
        end_locked(s, why ? why : "the service stopped");
    pthread_cond_broadcast(&ss->cond);
    pthread_mutex_unlock(&ss->lock);
}

struct ipd__work *ipd__session_work(struct ipd__session *s)
{
    return &s->wk;
}

struct ipd_sandbox_parked *ipd__session_parked(struct ipd__session *s)
{
    return s->pk;
}

json_t *ipd__session_snapshot(struct ipd__session *s)
{
    return s->snapshot;
}

const char *ipd__session_policy(const struct ipd__session *s)
{
    return s->policy;
}

bool ipd__session_ended(struct ipd__session *s, struct ipd_buf *detail)
{
    bool ended;

    pthread_mutex_lock(&s->ss->lock);
    ended = s->ended_ms != 0;
    if (ended)
        ipd_buf_addf(detail, "the session ended: %s", s->why);
    pthread_mutex_unlock(&s->ss->lock);
    return ended;
}

/* ---- variables ---------------------------------------------------------- */

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
    rc = ipd__session_begin(ex, tenant, user, id, &s, detail);
    if (rc)
        return rc;
    rc = ipd_sandbox_parked_call(s->pk, 'V', VARIABLES_TIMEOUT_MS, &r,
                                 &ended);
    if (!rc && !ended && r.exit_code == 0)
        *out = ipd__read_output_json(&r, ".interpd/variables.json",
                                     VARIABLES_FILE_MAX);
    ipd__session_end(ex, s,
                     ended ? (r.timed_out ? "listing its variables timed out"
                                          : "its interpreter ended")
                           : NULL,
                     &r);
    ipd_sandbox_result_release(&r);
    if (!*out || !json_is_array(json_object_get(*out, "variables"))) {
        json_decref(*out);
        *out = NULL;
        ipd_buf_adds(detail, ended ? "the session ended while listing its "
                                     "variables"
                                   : "the session's variables could not be "
                                     "listed");
        return ended ? IPD_ERR_GONE : IPD_ERR_INTERNAL;
    }
    return IPD_OK;
}
