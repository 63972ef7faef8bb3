/*
 * warm.c - warm executions: per execution slot a zygote (sandbox.h,
 * "Warm runs"; service/exec/python/zygote.py) on the venv's current
 * generation (hosted by zygote_host.c), and WARM_PARKED children of it
 * parked for the "standard" policy with their stage ready (struct
 * ipd__run_stage: job/, data/, interpd/ as a cold run's), so a request
 * only writes its job and says go.
 *
 * Threads per slot: the zygote's (runs it, blocking for its life, and
 * starts the next one: a new generation, N runs, T minutes, a timeout,
 * OOM kill or seccomp kill in a child, or its death end it) and the
 * parker's (keeps WARM_PARKED children parked while the zygote serves, so
 * back-to-back requests never wait for one).  The slot's execution
 * worker takes a parked child (ipd__warm_take), or waits for the one
 * being parked; a request
 * for another policy parks one of its own on the spot.  A networked
 * policy never runs warm: its runs are cold.  When a zygote cannot start
 * (three failures in a row), the slot serves cold and tries again after
 * a minute; the status says which mode serves and why.
 */
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../../venv/venv.h"
#include "../common/log.h"
#include "../common/util.h"
#include "exec_internal.h"

#define PARK_TIMEOUT_MS                                                        \
    30000                        /* the parker's (the first may wait           \
                                    for the zygote's imports) */
#define PARK_NOW_TIMEOUT_MS 5000 /* a request's own park */
#define PARK_FAILURES_TO_COLD 3
#define READY_TIMEOUT_MS 1000 /* one wait; the parker waits again */
#define FAILURES_TO_COLD 3
#define WARM_PARKED 2 /* children kept parked per slot */
#define RETRY_COLD_MS 60000

enum slot_state { SLOT_STARTING, SLOT_READY, SLOT_COLD, SLOT_STOPPED };

struct warm_slot {
    struct ipd__warm *w;
    unsigned idx;
    pthread_t zthread, pthread;
    bool zthread_made, pthread_made;
    /* under w->lock: */
    struct ipd_sandbox_zygote *z;      /* while one runs */
    struct ipd_sandbox_zygote *next_z; /* the zygote thread's own */
    bool z_ready;
    enum slot_state state;
    char gen[PATH_MAX]; /* the zygote's generation ("" base) */
    struct ipd__parked_job *parked[WARM_PARKED]; /* standard's */
    unsigned n_parked;
    bool parking;     /* the parker is parking one now */
    unsigned z_users; /* threads using z outside the lock:
                         the zygote thread frees it only
                         when none is */
    int64_t started_ms, runs, restarts;
    unsigned failures;
    unsigned park_failures;             /* in a row */
    bool recycle;                       /* this zygote is to end */
    char why[256];                      /* why the slot serves cold */
    uint64_t plan_gen;                  /* the warm set's plan it was given */
    char warm_set[IPD_WARMSET_ENV_MAX]; /* what it imported of it */
    int64_t warm_set_bytes;
};

struct ipd__warm {
    struct ipd_executor *ex;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    bool stopping;
    unsigned n;
    struct warm_slot *slots;
};

void ipd__parked_job_free(struct ipd__parked_job *pj)
{
    if (!pj)
        return;
    ipd_sandbox_parked_free(pj->pk);
    ipd__run_stage_remove(&pj->wk);
    free(pj);
}

/* The slot's zygote runs now (its thread, before ipd_sandbox_zygote_run). */
static void slot_started(void *ctx, const char *gen)
{
    struct warm_slot *s = ctx;

    pthread_mutex_lock(&s->w->lock);
    s->z = s->next_z;
    s->z_ready = false;
    s->recycle = s->w->stopping;
    snprintf(s->gen, sizeof(s->gen), "%s", gen);
    s->started_ms = ipd_now_ms();
    s->runs = 0;
    s->warm_set[0] = '\0';
    s->warm_set_bytes = 0;
    pthread_cond_broadcast(&s->w->cond);
    pthread_mutex_unlock(&s->w->lock);
    if (s->recycle)
        ipd_sandbox_zygote_stop(s->next_z);
}

/* Run one zygote on the current generation until it ends.  Returns how
 * long it served (ms), or -1 when it never got ready. */
static int64_t zygote_once(struct warm_slot *s)
{
    struct ipd_executor *ex = s->w->ex;
    struct ipd_sandbox_result r;
    int64_t t0 = ipd_mono_ms(), served = -1;
    char why[200] = "";
    char cand[IPD_WARMSET_ENV_MAX], budget[64];
    const char *plan[2] = {cand, budget};

    if (ipd_sandbox_zygote_new(&ex->sbx, &s->next_z)) {
        snprintf(s->why, sizeof(s->why), "no command socket");
        return -1;
    }
    uint64_t plan_gen = ipd_warmset_plan(ex->warmset, cand, budget);
    pthread_mutex_lock(&s->w->lock);
    s->plan_gen = plan_gen;
    pthread_mutex_unlock(&s->w->lock);
    enum ipd_err rc = ipd__zygote_serve(
        ex, s->next_z, ipd__slot_uid(ex, s->idx), ex->warm_recycle_ms + 60000,
        plan, slot_started, s, &r, why, sizeof(why));
    pthread_mutex_lock(&s->w->lock);
    served = s->z_ready ? ipd_mono_ms() - t0 : -1;
    if (!s->z_ready)
        snprintf(s->why, sizeof(s->why),
                 "the zygote ended before it was "
                 "ready: %.100s%.100s",
                 why[0] ? why
                 : rc   ? r.error
                        : "",
                 r.err.len ? r.err.buf : "");
    s->z = NULL;
    s->z_ready = false;
    while (s->z_users > 0)
        pthread_cond_wait(&s->w->cond, &s->w->lock);
    if (s->state == SLOT_READY)
        s->state = SLOT_STARTING; /* the next one comes */
    struct ipd__parked_job *left[WARM_PARKED];
    unsigned n_left = s->n_parked;
    memcpy(left, s->parked, sizeof(left));
    s->n_parked = 0;
    pthread_cond_broadcast(&s->w->cond);
    pthread_mutex_unlock(&s->w->lock);
    for (unsigned i = 0; i < n_left; i++)
        ipd__parked_job_free(left[i]);
    if (served < 0 || r.exit_code != 0)
        ipd_warn("executor: slot %u's zygote ended (exit %d, signal %d%s): "
                 "%.300s",
                 s->idx, r.exit_code, r.term_signal,
                 r.timed_out ? ", its time was up" : "",
                 r.err.len ? r.err.buf : why);
    ipd_sandbox_result_release(&r);
    ipd_sandbox_zygote_free(s->next_z);
    s->next_z = NULL;
    return served;
}

void ipd__cond_wait_ms(pthread_cond_t *c, pthread_mutex_t *m, int64_t ms)
{
    struct timespec ts = ipd_deadline_after(CLOCK_REALTIME, ms);

    (void)pthread_cond_timedwait(c, m, &ts);
}

static void *zygote_thread(void *arg)
{
    struct warm_slot *s = arg;
    struct ipd__warm *w = s->w;

    pthread_mutex_lock(&w->lock);
    while (!w->stopping) {
        pthread_mutex_unlock(&w->lock);
        int64_t served = zygote_once(s);
        pthread_mutex_lock(&w->lock);
        s->restarts++;
        if (served >= 0) {
            s->failures = 0;
            continue;
        }
        if (++s->failures >= FAILURES_TO_COLD) {
            if (s->state != SLOT_COLD)
                ipd_warn("executor: slot %u serves cold: %s", s->idx, s->why);
            s->state = SLOT_COLD;
        }
        /* The whole pause: w->cond is every slot's, broadcast whenever
         * any of them changes. */
        int64_t until = ipd_mono_ms() + (s->failures >= FAILURES_TO_COLD
                                             ? RETRY_COLD_MS
                                             : 1000LL << s->failures);
        while (!w->stopping && ipd_mono_ms() < until)
            ipd__cond_wait_ms(&w->cond, &w->lock, until - ipd_mono_ms());
    }
    s->state = SLOT_STOPPED;
    pthread_mutex_unlock(&w->lock);
    return NULL;
}

static void recycle_locked(struct warm_slot *s, const char *why);

/* The warm set's plan changed: replace the zygotes given an older one,
 * one slot at a time (a slot serves cold while its zygote starts), the
 * next once this one is ready.  Under w->lock. */
static void adapt_locked(struct ipd__warm *w)
{
    uint64_t gen = ipd_warmset_plan_gen(w->ex->warmset);

    if (w->stopping)
        return;
    for (unsigned i = 0; i < w->n; i++) {
        const struct warm_slot *s = &w->slots[i];
        if (s->state != SLOT_COLD && (!s->z || !s->z_ready || s->recycle))
            return; /* one is starting */
    }
    for (unsigned i = 0; i < w->n; i++) {
        struct warm_slot *s = &w->slots[i];
        if (s->state == SLOT_READY && s->plan_gen < gen) {
            recycle_locked(s, "the warm set changed");
            return;
        }
    }
}

/* A thread is done with s->z outside the lock (under the lock). */
static void z_release(struct warm_slot *s)
{
    if (--s->z_users == 0)
        pthread_cond_broadcast(&s->w->cond);
}

/* Park a child of z under policy ep with a run stage of its own. */
static enum ipd_err park_one(struct warm_slot *s, struct ipd_sandbox_zygote *z,
                             const struct ipd_exec_policy *ep,
                             int64_t timeout_ms, struct ipd__parked_job **out)
{
    struct ipd_executor *ex = s->w->ex;
    struct ipd__parked_job *pj = ipd_xcalloc(1, sizeof(*pj));
    struct ipd_sandbox_policy p;
    struct ipd_buf why;
    char err[256];
    enum ipd_err rc;

    ipd_buf_init(&why, 512);
    pj->wk.job_fd = pj->wk.data_fd = -1;
    snprintf(pj->policy, sizeof(pj->policy), "%s", ep->name);
    rc = ipd__run_stage_create(ex, &pj->wk, NULL, ipd__slot_uid(ex, s->idx),
                               &why);
    if (rc) {
        snprintf(err, sizeof(err), "%s", why.buf);
    } else {
        struct ipd_sandbox_mount m[] = {
            {"job", "/mnt/job", false, pj->wk.stage},
            {"data", "/mnt/data", false, pj->wk.stage}};
        char rehearse[IPD_WARMSET_REHEARSE_MAX];
        ipd_warmset_rehearsal(ex->warmset, rehearse, sizeof(rehearse));
        ipd__policy_to_sandbox(ep, ep->max_timeout_ms, &p);
        rc = ipd_sandbox_park(z, &p, m, 2, 0, rehearse, timeout_ms, &pj->pk,
                              err, sizeof(err));
    }
    ipd_buf_release(&why);
    pthread_mutex_lock(&s->w->lock);
    if (rc && ++s->park_failures >= PARK_FAILURES_TO_COLD && s->z == z &&
        s->state == SLOT_READY) {
        /* A zygote that cannot park: cold until its successor can. */
        snprintf(s->why, sizeof(s->why), "parking a child: %.200s", err);
        s->state = SLOT_COLD;
        recycle_locked(s, "it cannot park children");
    } else if (!rc) {
        s->park_failures = 0;
    }
    pthread_mutex_unlock(&s->w->lock);
    if (rc) {
        ipd_warn("executor: slot %u: parking a child failed: %s", s->idx, err);
        ipd__parked_job_free(pj);
        pj = NULL;
    }
    *out = pj;
    return rc;
}

/* Wait until this slot's zygote said ready (under w->lock, released
 * while waiting).  True when it did; false when it ended. */
static bool zygote_ready(struct warm_slot *s, struct ipd_sandbox_zygote *z)
{
    char why[256];
    enum ipd_err rc;

    if (s->z_ready)
        return true;
    pthread_mutex_unlock(&s->w->lock);
    rc = ipd_sandbox_zygote_wait_ready(z, READY_TIMEOUT_MS, why, sizeof(why));
    pthread_mutex_lock(&s->w->lock);
    if (rc == IPD_OK && s->z == z) {
        s->z_ready = true;
        s->state = SLOT_READY;
        s->failures = 0;
        s->park_failures = 0;
        size_t len = 0;
        const char *report = ipd_sandbox_zygote_report(z, &len);
        if (report && len &&
            !ipd_warmset_report(s->w->ex->warmset, report, len, s->warm_set,
                                sizeof(s->warm_set), &s->warm_set_bytes))
            ipd_warn("executor: slot %u's zygote sent a malformed warm set "
                     "report",
                     s->idx);
        ipd_info("executor: slot %u's zygote is ready%s%s", s->idx,
                 s->warm_set[0] ? "; it warmed " : "", s->warm_set);
        adapt_locked(s->w);
        pthread_cond_broadcast(&s->w->cond);
    } else if (rc == IPD_ERR_UNAVAILABLE && s->z == z) {
        snprintf(s->why, sizeof(s->why), "%s", why);
        ipd_sandbox_zygote_stop(z);
    }
    return rc == IPD_OK;
}

static void *parker_thread(void *arg)
{
    struct warm_slot *s = arg;
    struct ipd__warm *w = s->w;
    const struct ipd_exec_policy *std = ipd__policy_find(w->ex, "standard");

    pthread_mutex_lock(&w->lock);
    while (!w->stopping) {
        struct ipd_sandbox_zygote *z = s->z;
        if (!z || s->n_parked >= WARM_PARKED || s->recycle) {
            pthread_cond_wait(&w->cond, &w->lock);
            continue;
        }
        s->z_users++;
        if (!zygote_ready(s, z)) {
            z_release(s);
            continue;
        }
        s->parking = true;
        pthread_mutex_unlock(&w->lock);
        struct ipd__parked_job *pj = NULL;
        enum ipd_err rc = park_one(s, z, std, PARK_TIMEOUT_MS, &pj);
        pthread_mutex_lock(&w->lock);
        z_release(s);
        s->parking = false;
        if (!rc && s->z == z && s->n_parked < WARM_PARKED && !s->recycle) {
            s->parked[s->n_parked++] = pj;
            pj = NULL;
        }
        pthread_cond_broadcast(&w->cond);
        if (pj) {
            pthread_mutex_unlock(&w->lock);
            ipd__parked_job_free(pj);
            pthread_mutex_lock(&w->lock);
        }
        if (rc && !w->stopping)
            /* a zygote that cannot park: it ends */
            ipd__cond_wait_ms(&w->cond, &w->lock, 1000);
    }
    pthread_mutex_unlock(&w->lock);
    return NULL;
}

/* ---- the executor's side ----------------------------------------------- */

enum ipd_err ipd__warm_start(struct ipd_executor *ex)
{
    struct ipd__warm *w = ipd_xcalloc(1, sizeof(*w));

    w->ex = ex;
    w->n = ex->slots ? ex->slots : 1;
    w->slots = ipd_xcalloc(w->n, sizeof(*w->slots));
    pthread_mutex_init(&w->lock, NULL);
    pthread_cond_init(&w->cond, NULL);
    ex->warm = w;
    for (unsigned i = 0; i < w->n; i++) {
        struct warm_slot *s = &w->slots[i];
        s->w = w;
        s->idx = i;
        s->state = SLOT_STARTING;
        s->zthread_made =
            pthread_create(&s->zthread, NULL, zygote_thread, s) == 0;
        s->pthread_made =
            pthread_create(&s->pthread, NULL, parker_thread, s) == 0;
        if (!s->zthread_made || !s->pthread_made) {
            ipd_error("executor: cannot start the warm workers' threads");
            return IPD_ERR_INTERNAL;
        }
    }
    return IPD_OK;
}

void ipd__warm_stop(struct ipd_executor *ex)
{
    struct ipd__warm *w = ex->warm;

    if (!w)
        return;
    pthread_mutex_lock(&w->lock);
    w->stopping = true;
    for (unsigned i = 0; i < w->n; i++) {
        w->slots[i].recycle = true;
        ipd_sandbox_zygote_stop(w->slots[i].z);
    }
    pthread_cond_broadcast(&w->cond);
    pthread_mutex_unlock(&w->lock);
    for (unsigned i = 0; i < w->n; i++) {
        if (w->slots[i].pthread_made)
            pthread_join(w->slots[i].pthread, NULL);
        if (w->slots[i].zthread_made)
            pthread_join(w->slots[i].zthread, NULL);
        for (unsigned k = 0; k < w->slots[i].n_parked; k++)
            ipd__parked_job_free(w->slots[i].parked[k]);
    }
    pthread_mutex_destroy(&w->lock);
    pthread_cond_destroy(&w->cond);
    free(w->slots);
    free(w);
    ex->warm = NULL;
}

/* End s's zygote (the zygote thread starts the next).  Under w->lock. */
static void recycle_locked(struct warm_slot *s, const char *why)
{
    if (s->recycle || !s->z)
        return;
    ipd_info("executor: slot %u's zygote is recycled: %s", s->idx, why);
    s->recycle = true;
    ipd_sandbox_zygote_stop(s->z);
}

void ipd__warm_generation(struct ipd_executor *ex)
{
    struct ipd__warm *w = ex->warm;

    if (!w)
        return;
    ipd_warmset_venv_changed(ex->warmset);
    pthread_mutex_lock(&w->lock);
    for (unsigned i = 0; i < w->n; i++)
        recycle_locked(&w->slots[i], "a new venv generation");
    pthread_mutex_unlock(&w->lock);
}

void ipd_executor_warm_set_gauges(struct ipd_executor *ex, int64_t *modules,
                                  int64_t *bytes)
{
    ipd_warmset_gauges(ex->warmset, modules, bytes);
}

void ipd__warm_adapt(struct ipd_executor *ex)
{
    struct ipd__warm *w = ex->warm;

    if (!w)
        return;
    pthread_mutex_lock(&w->lock);
    adapt_locked(w);
    pthread_mutex_unlock(&w->lock);
}

/* A parked child for ep (under w->lock): one of the slot's, or, for
 * standard while the parker is at work, the one it parks (waited for,
 * bounded).  NULL: none; *park_now: park one for this request. */
static struct ipd__parked_job *take_locked(struct warm_slot *s,
                                           const struct ipd_exec_policy *ep,
                                           bool *park_now)
{
    int64_t deadline = ipd_mono_ms() + PARK_NOW_TIMEOUT_MS;

    *park_now = false;
    while (s->z && s->z_ready && !s->recycle && s->state == SLOT_READY) {
        if (s->n_parked && !strcmp(s->parked[0]->policy, ep->name)) {
            struct ipd__parked_job *pj = s->parked[0];
            memmove(s->parked, s->parked + 1,
                    --s->n_parked * sizeof(s->parked[0]));
            pthread_cond_broadcast(&s->w->cond);
            return pj;
        }
        if (strcmp(ep->name, "standard") != 0 || !s->parking ||
            ipd_mono_ms() >= deadline) {
            *park_now = true;
            return NULL;
        }
        ipd__cond_wait_ms(&s->w->cond, &s->w->lock, deadline - ipd_mono_ms());
    }
    return NULL;
}

struct ipd__parked_job *ipd__warm_take(struct ipd_executor *ex, unsigned slot,
                                       const struct ipd_exec_policy *ep,
                                       const char *gen_dir)
{
    struct ipd__warm *w = ex->warm;
    struct ipd__parked_job *pj = NULL;
    struct ipd_sandbox_zygote *z = NULL;
    struct warm_slot *s;
    bool park_now = false;

    if (!w || ep->network || slot >= w->n)
        return NULL;
    s = &w->slots[slot];
    pthread_mutex_lock(&w->lock);
    if (s->z && strcmp(s->gen, gen_dir ? gen_dir : "") != 0)
        recycle_locked(s, "a new venv generation");
    pj = take_locked(s, ep, &park_now);
    if (park_now) {
        z = s->z;
        s->z_users++;
    }
    pthread_mutex_unlock(&w->lock);
    if (z) {
        (void)park_one(s, z, ep, PARK_NOW_TIMEOUT_MS, &pj);
        pthread_mutex_lock(&w->lock);
        z_release(s);
        pthread_mutex_unlock(&w->lock);
    }
    return pj;
}

enum ipd_err ipd__warm_run(struct ipd_executor *ex, unsigned slot,
                           struct ipd__parked_job *pj, int64_t timeout_ms,
                           struct ipd_live *live, struct ipd_sandbox_result *r)
{
    struct ipd__warm *w = ex->warm;
    struct warm_slot *s = &w->slots[slot];
    struct ipd_sandbox_parked *pk = pj->pk;
    enum ipd_err rc;
    const char *why = NULL;

    pj->pk = NULL;
    rc = ipd_sandbox_parked_run(pk, timeout_ms, live, r);
    if (rc)
        why = "a run failed to start";
    else if (r->timed_out)
        why = "a run timed out";
    else if (r->oom_killed)
        why = "a run was killed for its memory";
    else if (r->term_signal == SIGSYS)
        why = "a run was killed by the seccomp filter";
    pthread_mutex_lock(&w->lock);
    s->runs++;
    if (!why && ex->warm_recycle_runs > 0 && s->runs >= ex->warm_recycle_runs)
        why = "it served its number of runs";
    if (!why && ex->warm_recycle_ms > 0 &&
        ipd_now_ms() - s->started_ms >= ex->warm_recycle_ms)
        why = "its time was up";
    if (why)
        recycle_locked(s, why);
    pthread_mutex_unlock(&w->lock);
    return rc;
}

/* A slot whose zygote is being replaced serves cold until the next is
 * ready: shown as starting. */
static enum slot_state shown_state(const struct warm_slot *s)
{
    return s->state == SLOT_READY && s->recycle ? SLOT_STARTING : s->state;
}

static const char *state_name(enum slot_state st)
{
    switch (st) {
    case SLOT_STARTING: return "starting";
    case SLOT_READY: return "warm";
    case SLOT_COLD: return "cold";
    case SLOT_STOPPED: return "stopped";
    }
    return "unknown";
}

const char *ipd__warm_mode(struct ipd_executor *ex)
{
    struct ipd__warm *w = ex->warm;
    unsigned ready = 0, starting = 0;

    if (!w)
        return "cold";
    pthread_mutex_lock(&w->lock);
    for (unsigned i = 0; i < w->n; i++) {
        ready += shown_state(&w->slots[i]) == SLOT_READY;
        starting += shown_state(&w->slots[i]) == SLOT_STARTING;
    }
    pthread_mutex_unlock(&w->lock);
    if (ready == w->n)
        return "warm";
    if (ready)
        return "mixed";
    return starting ? "starting" : "cold";
}

json_t *ipd__warm_json(struct ipd_executor *ex)
{
    struct ipd__warm *w = ex->warm;
    json_t *slots = json_array();

    if (!w)
        return json_pack("{s:s,s:s,s:o}", "configured", "cold", "serving",
                         "cold", "slots", slots);
    pthread_mutex_lock(&w->lock);
    for (unsigned i = 0; i < w->n; i++) {
        struct warm_slot *s = &w->slots[i];
        json_t *o = json_pack("{s:i,s:s,s:I,s:I,s:s}", "slot", (int)i, "mode",
                              state_name(shown_state(s)), "runs",
                              (json_int_t)s->runs, "restarts",
                              (json_int_t)s->restarts, "generation", s->gen);
        if (shown_state(s) == SLOT_READY)
            json_object_set_new(o, "started_at",
                                json_integer(s->started_ms / 1000));
        if (s->state == SLOT_COLD && s->why[0])
            json_object_set_new(o, "why", json_string(s->why));
        if (shown_state(s) == SLOT_READY && ex->warmset) {
            json_object_set_new(o, "warm_set",
                                ipd_warmset_list_json(s->warm_set));
            json_object_set_new(o, "warm_set_bytes",
                                json_integer(s->warm_set_bytes));
        }
        json_array_append_new(slots, o);
    }
    pthread_mutex_unlock(&w->lock);
    return json_pack("{s:s,s:s,s:s,s:o,s:o}", "configured", "warm", "serving",
                     ipd__warm_mode(ex), "modules", ex->warm_modules, "slots",
                     slots, "adaptive", ipd_warmset_json(ex->warmset));
}
