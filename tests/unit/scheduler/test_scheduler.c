/*
 * test_scheduler.c - the in-process job scheduler: a job never overlaps
 * itself (not even while blocked past its interval), failures are counted
 * and retried at the next tick, stop is prompt (also for a running job that
 * checks ipd_job_continue), run_now, status, and leases between two
 * schedulers on one SQLite store (skip while the other holds it; a lost
 * lease stops the run).
 *
 * Waits are bounded waits on a condition variable that the jobs signal;
 * the only timed waits with an expected timeout are those that check that
 * something does NOT happen while intervals elapse.
 */
#include <errno.h>
#include <pthread.h>
#include <time.h>
#include <unistd.h>

#include "test.h"

#include "scheduler/scheduler.h"
#include "service/common/util.h"

#define WAIT_MS 10000 /* bound on every wait for something to happen */

/* What the jobs share with the test thread. */
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv;

static void cv_init(void)
{
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&cv, &ca);
    pthread_condattr_destroy(&ca);
}

/* Wait on cv (mu held) until the monotonic deadline; false at the
 * deadline. */
static bool cv_wait_until(int64_t deadline_mono)
{
    int64_t left = deadline_mono - ipd_mono_ms();
    struct timespec ts;
    if (left <= 0)
        return false;
    ts = ipd_deadline_after(CLOCK_MONOTONIC, left);
    pthread_cond_timedwait(&cv, &mu, &ts);
    return ipd_mono_ms() < deadline_mono;
}

/* Wait (mu held) until *v >= want or ms pass; the final value. */
static long wait_at_least(const long *v, long want, int ms)
{
    int64_t deadline = ipd_mono_ms() + ms;
    while (*v < want && cv_wait_until(deadline))
        ;
    return *v;
}

/* ---- a job that blocks on a gate --------------------------------------- */

struct gated {
    long starts, ends;
    long active, max_active;
    bool open; /* the gate */
};

static enum ipd_err gated_job(void *ctx, struct ipd_job_run *run)
{
    struct gated *g = ctx;
    (void)run;
    pthread_mutex_lock(&mu);
    g->starts++;
    g->active++;
    if (g->active > g->max_active)
        g->max_active = g->active;
    pthread_cond_broadcast(&cv);
    while (!g->open)
        pthread_cond_wait(&cv, &mu);
    g->active--;
    g->ends++;
    pthread_cond_broadcast(&cv);
    pthread_mutex_unlock(&mu);
    return IPD_OK;
}

/* A job blocked while many of its intervals elapse is not started again
 * meanwhile; once it returns, one overdue run follows, never a burst. */
static void no_overlap(void)
{
    struct gated g = {0};
    struct ipd_scheduler *s = ipd_scheduler_new(NULL, 0, NULL);
    struct ipd_job_status st;
    CHECK_INT(
        ipd_scheduler_add(s, "gated", 5, gated_job, &g, IPD_JOB_RUN_AT_START),
        IPD_OK);
    CHECK_INT(ipd_scheduler_start(s), IPD_OK);
    pthread_mutex_lock(&mu);
    CHECK_INT(wait_at_least(&g.starts, 1, WAIT_MS), 1);
    /* 40 intervals pass with the run blocked: no second start. */
    int64_t until = ipd_mono_ms() + 200;
    while (g.starts == 1 && cv_wait_until(until))
        ;
    CHECK_INT(g.starts, 1);
    pthread_mutex_unlock(&mu);
    CHECK_INT(ipd_scheduler_status(s, "gated", &st), IPD_OK);
    CHECK(st.running);
    CHECK_INT(st.runs, 0);
    pthread_mutex_lock(&mu);
    g.open = true;
    pthread_cond_broadcast(&cv);
    CHECK(wait_at_least(&g.ends, 3, WAIT_MS) >= 3);
    pthread_mutex_unlock(&mu);
    ipd_scheduler_stop(s);
    CHECK_INT(g.max_active, 1);
    CHECK_INT(ipd_scheduler_status(s, "gated", &st), IPD_OK);
    CHECK(!st.running);
    CHECK(st.runs >= 3);
    CHECK_INT(st.failures, 0);
    CHECK_INT(st.last_result, IPD_OK);
    ipd_scheduler_free(s);
}

/* ---- failures ---------------------------------------------------------- */

struct flaky {
    long calls;
    long fail_first; /* this many runs fail */
};

static enum ipd_err flaky_job(void *ctx, struct ipd_job_run *run)
{
    struct flaky *f = ctx;
    (void)run;
    pthread_mutex_lock(&mu);
    long n = ++f->calls;
    pthread_cond_broadcast(&cv);
    pthread_mutex_unlock(&mu);
    return n <= f->fail_first ? IPD_ERR_UNAVAILABLE : IPD_OK;
}

/* A failing job is logged, counted and run again at its next tick; the
 * scheduler goes on. */
static void failures_counted_and_retried(void)
{
    struct flaky f = {.fail_first = 3};
    struct ipd_scheduler *s = ipd_scheduler_new(NULL, 0, NULL);
    struct ipd_job_status st;
    CHECK_INT(
        ipd_scheduler_add(s, "flaky", 5, flaky_job, &f, IPD_JOB_RUN_AT_START),
        IPD_OK);
    CHECK_INT(ipd_scheduler_start(s), IPD_OK);
    pthread_mutex_lock(&mu);
    CHECK(wait_at_least(&f.calls, 5, WAIT_MS) >= 5);
    pthread_mutex_unlock(&mu);
    ipd_scheduler_stop(s);
    CHECK_INT(ipd_scheduler_status(s, "flaky", &st), IPD_OK);
    CHECK_INT(st.failures, 3);
    CHECK(st.runs >= 5);
    CHECK_INT(st.last_result, IPD_OK);
    CHECK(st.last_start_ms > 0 && st.last_end_ms >= st.last_start_ms);
    json_t *j = ipd_scheduler_status_json(s);
    json_t *o = json_object_get(j, "flaky");
    CHECK(json_is_object(o));
    CHECK_INT(json_integer_value(json_object_get(o, "failures")), 3);
    CHECK_INT(json_integer_value(json_object_get(o, "interval_ms")), 5);
    CHECK_STR(json_string_value(json_object_get(o, "last_result")), "ok");
    CHECK(json_is_string(json_object_get(o, "last_start")));
    CHECK(json_is_string(json_object_get(o, "last_end")));
    CHECK(json_is_false(json_object_get(o, "running")));
    CHECK(json_is_false(json_object_get(o, "leased")));
    CHECK(json_is_integer(json_object_get(o, "skipped")));
    CHECK(json_is_null(json_object_get(o, "next_run"))); /* stopped */
    json_decref(j);
    ipd_scheduler_free(s);
}

/* An interval of "never" (INT64_MAX) after a run at start: the next run
 * is never due.  Regression: start + interval wrapped into the past and
 * the job ran back to back (millions of runs a second). */
static void never_interval_does_not_wrap(void)
{
    struct flaky f = {0};
    struct ipd_scheduler *s = ipd_scheduler_new(NULL, 0, NULL);
    struct ipd_job_status st;
    CHECK_INT(ipd_scheduler_add(s, "never", IPD_TIME_NEVER, flaky_job, &f,
                                IPD_JOB_RUN_AT_START),
              IPD_OK);
    CHECK_INT(ipd_scheduler_start(s), IPD_OK);
    pthread_mutex_lock(&mu);
    CHECK_INT(wait_at_least(&f.calls, 1, WAIT_MS), 1);
    /* Something that must NOT happen: a second run within 300 ms. */
    CHECK_INT(wait_at_least(&f.calls, 2, 300), 1);
    pthread_mutex_unlock(&mu);
    CHECK_INT(ipd_scheduler_status(s, "never", &st), IPD_OK);
    CHECK(st.next_run_ms > ipd_now_ms() + 365LL * 86400 * 1000);
    ipd_scheduler_stop(s);
    ipd_scheduler_free(s);
}

/* ---- stop -------------------------------------------------------------- */

struct looper {
    long started;
    enum ipd_err rc; /* what ipd_job_continue said at the end */
};

/* Runs until ipd_job_continue says stop (bounded), pacing itself with a
 * short timed wait between "batches". */
static enum ipd_err looper_job(void *ctx, struct ipd_job_run *run)
{
    struct looper *l = ctx;
    enum ipd_err rc = IPD_OK;
    int64_t deadline = ipd_mono_ms() + WAIT_MS;
    pthread_mutex_lock(&mu);
    l->started++;
    pthread_cond_broadcast(&cv);
    pthread_mutex_unlock(&mu);
    while (ipd_mono_ms() < deadline) {
        rc = ipd_job_continue(run);
        if (rc)
            break;
        pthread_mutex_lock(&mu);
        cv_wait_until(ipd_mono_ms() + 2);
        pthread_mutex_unlock(&mu);
    }
    pthread_mutex_lock(&mu);
    l->rc = rc;
    pthread_mutex_unlock(&mu);
    return rc;
}

static void stop_is_prompt(void)
{
    /* Idle jobs with long intervals: stop wakes them at once. */
    struct flaky f = {0};
    struct ipd_scheduler *s = ipd_scheduler_new(NULL, 0, NULL);
    CHECK_INT(ipd_scheduler_add(s, "hourly", 3600000, flaky_job, &f, 0),
              IPD_OK);
    CHECK_INT(ipd_scheduler_add(s, "daily", 86400000, flaky_job, &f, 0),
              IPD_OK);
    CHECK_INT(ipd_scheduler_start(s), IPD_OK);
    int64_t t0 = ipd_mono_ms();
    ipd_scheduler_stop(s);
    CHECK(ipd_mono_ms() - t0 < 1000);
    CHECK_INT(f.calls, 0);
    ipd_scheduler_stop(s); /* idempotent */
    ipd_scheduler_free(s);

    /* A running job that checks ipd_job_continue ends promptly, and the
     * run cut short is not a failure. */
    struct looper l = {0};
    struct ipd_job_status st;
    s = ipd_scheduler_new(NULL, 0, NULL);
    CHECK_INT(ipd_scheduler_add(s, "long", 3600000, looper_job, &l,
                                IPD_JOB_RUN_AT_START),
              IPD_OK);
    CHECK_INT(ipd_scheduler_start(s), IPD_OK);
    pthread_mutex_lock(&mu);
    CHECK_INT(wait_at_least(&l.started, 1, WAIT_MS), 1);
    pthread_mutex_unlock(&mu);
    t0 = ipd_mono_ms();
    ipd_scheduler_stop(s);
    CHECK(ipd_mono_ms() - t0 < 1000);
    CHECK_INT(l.rc, IPD_ERR_UNAVAILABLE);
    CHECK_INT(ipd_scheduler_status(s, "long", &st), IPD_OK);
    CHECK_INT(st.runs, 1);
    CHECK_INT(st.failures, 0);
    ipd_scheduler_free(s);
    ipd_scheduler_free(NULL);
}

/* ---- run_now ----------------------------------------------------------- */

struct where {
    pthread_t last;
    long calls;
    enum ipd_err result;
};

static enum ipd_err where_job(void *ctx, struct ipd_job_run *run)
{
    struct where *w = ctx;
    CHECK_INT(ipd_job_continue(run), IPD_OK);
    pthread_mutex_lock(&mu);
    w->last = pthread_self();
    w->calls++;
    pthread_mutex_unlock(&mu);
    return w->result;
}

struct caller {
    pthread_t tid;
    struct ipd_scheduler *s;
    enum ipd_err rc;
};

static void *call_run_now(void *arg)
{
    struct caller *c = arg;
    c->rc = ipd_scheduler_run_now(c->s, "gated", NULL);
    return NULL;
}

static void run_now(void)
{
    struct where w = {.result = IPD_ERR_IO};
    struct ipd_scheduler *s = ipd_scheduler_new(NULL, 0, NULL);
    bool ran = false;
    CHECK_INT(ipd_scheduler_add(s, "job", 3600000, where_job, &w, 0), IPD_OK);
    /* Before start: in the caller, with the job's result. */
    CHECK_INT(ipd_scheduler_run_now(s, "job", &ran), IPD_ERR_IO);
    CHECK(ran);
    CHECK(pthread_equal(w.last, pthread_self()));
    CHECK_INT(ipd_scheduler_run_now(s, "nope", &ran), IPD_ERR_NOT_FOUND);
    /* Started: on the job's thread. */
    CHECK_INT(ipd_scheduler_start(s), IPD_OK);
    w.result = IPD_OK;
    CHECK_INT(ipd_scheduler_run_now(s, "job", &ran), IPD_OK);
    CHECK(ran);
    CHECK(!pthread_equal(w.last, pthread_self()));
    CHECK_INT(w.calls, 2);
    struct ipd_job_status st;
    CHECK_INT(ipd_scheduler_status(s, "job", &st), IPD_OK);
    CHECK_INT(st.runs, 2);
    CHECK_INT(st.failures, 1);
    CHECK(st.next_run_ms > ipd_now_ms() + 3000000);
    CHECK_INT(ipd_scheduler_status(s, "nope", &st), IPD_ERR_NOT_FOUND);
    /* Stopped: in the caller again. */
    ipd_scheduler_stop(s);
    CHECK_INT(ipd_scheduler_run_now(s, "job", &ran), IPD_OK);
    CHECK(pthread_equal(w.last, pthread_self()));
    ipd_scheduler_free(s);

    /* Several callers while the job is blocked: they queue behind it and
     * each waits for a run; the job never overlaps itself. */
    struct gated g = {0};
    s = ipd_scheduler_new(NULL, 0, NULL);
    CHECK_INT(ipd_scheduler_add(s, "gated", 3600000, gated_job, &g, 0), IPD_OK);
    CHECK_INT(ipd_scheduler_start(s), IPD_OK);
    struct caller c[4];
    for (int i = 0; i < 4; i++) {
        c[i] = (struct caller){.s = s, .rc = IPD_ERR_INTERNAL};
        CHECK_INT(pthread_create(&c[i].tid, NULL, call_run_now, &c[i]), 0);
    }
    pthread_mutex_lock(&mu);
    CHECK_INT(wait_at_least(&g.starts, 1, WAIT_MS), 1);
    g.open = true;
    pthread_cond_broadcast(&cv);
    pthread_mutex_unlock(&mu);
    for (int i = 0; i < 4; i++) {
        pthread_join(c[i].tid, NULL);
        CHECK_INT(c[i].rc, IPD_OK);
    }
    CHECK_INT(g.max_active, 1);
    CHECK(g.starts >= 1 && g.starts <= 4);
    ipd_scheduler_free(s);
}

/* run_now waiting while the scheduler stops answers UNAVAILABLE (or the
 * run's result, if the run got in first): never hangs. */
static void run_now_during_stop(void)
{
    struct gated g = {0};
    struct ipd_scheduler *s = ipd_scheduler_new(NULL, 0, NULL);
    CHECK_INT(ipd_scheduler_add(s, "gated", 3600000, gated_job, &g,
                                IPD_JOB_RUN_AT_START),
              IPD_OK);
    CHECK_INT(ipd_scheduler_start(s), IPD_OK);
    pthread_mutex_lock(&mu);
    CHECK_INT(wait_at_least(&g.starts, 1, WAIT_MS), 1);
    pthread_mutex_unlock(&mu);
    struct caller c = {.s = s, .rc = IPD_ERR_INTERNAL};
    CHECK_INT(pthread_create(&c.tid, NULL, call_run_now, &c), 0);
    /* The blocked run finishes once stop has been asked for. */
    pthread_mutex_lock(&mu);
    g.open = true;
    pthread_cond_broadcast(&cv);
    pthread_mutex_unlock(&mu);
    ipd_scheduler_stop(s);
    pthread_join(c.tid, NULL);
    CHECK(c.rc == IPD_ERR_UNAVAILABLE || c.rc == IPD_OK);
    CHECK_INT(g.max_active, 1);
    ipd_scheduler_free(s);
}

static void add_rules(void)
{
    struct flaky f = {0};
    struct ipd_scheduler *s = ipd_scheduler_new(NULL, 0, NULL);
    char longname[IPD_JOB_NAME_MAX + 1];
    memset(longname, 'j', IPD_JOB_NAME_MAX);
    longname[IPD_JOB_NAME_MAX] = '\0';
    CHECK_INT(ipd_scheduler_add(s, "a", 10, flaky_job, &f, 0), IPD_OK);
    CHECK_INT(ipd_scheduler_add(s, "a", 10, flaky_job, &f, 0),
              IPD_ERR_CONFLICT);
    CHECK_INT(ipd_scheduler_add(s, "", 10, flaky_job, &f, 0), IPD_ERR_INVALID);
    CHECK_INT(ipd_scheduler_add(s, longname, 10, flaky_job, &f, 0),
              IPD_ERR_INVALID);
    CHECK_INT(ipd_scheduler_add(s, "b", 0, flaky_job, &f, 0), IPD_ERR_INVALID);
    CHECK_INT(ipd_scheduler_add(s, "b", 10, NULL, &f, 0), IPD_ERR_INVALID);
    /* A lease needs a store. */
    CHECK_INT(ipd_scheduler_add(s, "b", 10, flaky_job, &f, IPD_JOB_LEASE),
              IPD_ERR_INVALID);
    CHECK_INT(ipd_scheduler_add(s, "b", 10, flaky_job, &f, 1u << 7),
              IPD_ERR_INVALID);
    CHECK_INT(ipd_scheduler_start(s), IPD_OK);
    CHECK_INT(ipd_scheduler_start(s), IPD_ERR_CONFLICT);
    CHECK_INT(ipd_scheduler_add(s, "c", 10, flaky_job, &f, 0),
              IPD_ERR_CONFLICT);
    ipd_scheduler_free(s);
}

/* ---- leases ------------------------------------------------------------ */

static char tmp_dir[64];

static struct ipd_meta *open_meta(void)
{
    char path[128];
    struct ipd_meta *m = NULL;
    if (!tmp_dir[0]) {
        snprintf(tmp_dir, sizeof(tmp_dir), "/tmp/ipd-sched-XXXXXX");
        IPD_ASSERT(mkdtemp(tmp_dir));
    }
    snprintf(path, sizeof(path), "%s/meta.db", tmp_dir);
    IPD_ASSERT(ipd_meta_sqlite_open(path, 5000, &m) == IPD_OK);
    return m;
}

/* Two schedulers (two processes' worth: each its own store connection
 * and owner) on one store: while one runs the leased job, the other's run
 * is skipped; once the first releases it, the other runs. */
static void lease_skips_while_held(void)
{
    struct ipd_meta *m1 = open_meta(), *m2 = open_meta();
    struct gated g = {0};
    struct flaky f = {0};
    struct ipd_scheduler *s1 = ipd_scheduler_new(m1, 60000, "node1");
    struct ipd_scheduler *s2 = ipd_scheduler_new(m2, 60000, "node2");
    struct ipd_job_status st;
    bool ran = true;
    CHECK_INT(ipd_scheduler_add(s1, "sweep", 3600000, gated_job, &g,
                                IPD_JOB_LEASE | IPD_JOB_RUN_AT_START),
              IPD_OK);
    CHECK_INT(
        ipd_scheduler_add(s2, "sweep", 3600000, flaky_job, &f, IPD_JOB_LEASE),
        IPD_OK);
    CHECK_INT(ipd_scheduler_start(s1), IPD_OK);
    CHECK_INT(ipd_scheduler_start(s2), IPD_OK);
    pthread_mutex_lock(&mu);
    CHECK_INT(wait_at_least(&g.starts, 1, WAIT_MS), 1);
    pthread_mutex_unlock(&mu);
    /* s1 runs the job under the lease: s2's run is skipped. */
    CHECK_INT(ipd_scheduler_run_now(s2, "sweep", &ran), IPD_OK);
    CHECK(!ran);
    CHECK_INT(f.calls, 0);
    CHECK_INT(ipd_scheduler_status(s2, "sweep", &st), IPD_OK);
    CHECK_INT(st.skipped, 1);
    CHECK_INT(st.runs, 0);
    CHECK(st.leased);
    pthread_mutex_lock(&mu);
    g.open = true;
    pthread_cond_broadcast(&cv);
    CHECK_INT(wait_at_least(&g.ends, 1, WAIT_MS), 1);
    pthread_mutex_unlock(&mu);
    /* s1's thread releases the lease after the job returns: once its run
     * is recorded as finished, s2 gets the lease. */
    int64_t deadline = ipd_mono_ms() + WAIT_MS;
    for (;;) {
        struct ipd_job_status s1st;
        CHECK_INT(ipd_scheduler_status(s1, "sweep", &s1st), IPD_OK);
        if (!s1st.running || ipd_mono_ms() > deadline)
            break;
        pthread_mutex_lock(&mu);
        cv_wait_until(ipd_mono_ms() + 2);
        pthread_mutex_unlock(&mu);
    }
    CHECK_INT(ipd_scheduler_run_now(s2, "sweep", &ran), IPD_OK);
    CHECK(ran);
    CHECK_INT(f.calls, 1);
    ipd_scheduler_free(s1);
    ipd_scheduler_free(s2);
    ipd_meta_free(m1);
    ipd_meta_free(m2);
}

/* A run whose lease another process takes over (it expired while a batch
 * ran long) stops at its next ipd_job_continue with IPD_ERR_CONFLICT. */
static void lost_lease_stops_run(void)
{
    struct ipd_meta *m = open_meta(), *other = open_meta();
    struct looper l = {0};
    struct ipd_job_status st;
    bool got = false;
    /* TTL 60 ms: ipd_job_continue renews after 20 ms. */
    struct ipd_scheduler *s = ipd_scheduler_new(m, 60, "victim");
    CHECK_INT(ipd_scheduler_add(s, "reconcile", 3600000, looper_job, &l,
                                IPD_JOB_LEASE | IPD_JOB_RUN_AT_START),
              IPD_OK);
    CHECK_INT(ipd_scheduler_start(s), IPD_OK);
    pthread_mutex_lock(&mu);
    CHECK_INT(wait_at_least(&l.started, 1, WAIT_MS), 1);
    pthread_mutex_unlock(&mu);
    /* Another node, whose clock says the lease has expired, takes it. */
    CHECK_INT(ipd_meta_lease_acquire(other, "reconcile", "thief",
                                     ipd_now_ms() + 3600000, 3600000, &got),
              IPD_OK);
    CHECK(got);
    int64_t deadline = ipd_mono_ms() + WAIT_MS;
    for (;;) {
        CHECK_INT(ipd_scheduler_status(s, "reconcile", &st), IPD_OK);
        if (st.runs || ipd_mono_ms() > deadline)
            break;
        pthread_mutex_lock(&mu);
        cv_wait_until(ipd_mono_ms() + 5);
        pthread_mutex_unlock(&mu);
    }
    CHECK_INT(st.runs, 1);
    CHECK_INT(st.last_result, IPD_ERR_CONFLICT);
    CHECK_INT(st.failures, 0); /* a handover, not a failure of the job */
    CHECK_INT(l.rc, IPD_ERR_CONFLICT);
    /* The thief's lease was left alone by the loser's release. */
    CHECK_INT(ipd_meta_lease_renew(other, "reconcile", "thief", ipd_now_ms(),
                                   1000, &got),
              IPD_OK);
    CHECK(got);
    ipd_scheduler_free(s);
    ipd_meta_free(m);
    ipd_meta_free(other);
}

static void cleanup(void)
{
    char cmd[128];
    if (!tmp_dir[0])
        return;
    snprintf(cmd, sizeof(cmd), "rm -rf %s", tmp_dir);
    CHECK(system(cmd) == 0);
}

int main(void)
{
    cv_init();
    static const struct test_case cases[] = {
        T(no_overlap),
        T(failures_counted_and_retried),
        T(never_interval_does_not_wrap),
        T(stop_is_prompt),
        T(run_now),
        T(run_now_during_stop),
        T(add_rules),
        T(lease_skips_while_held),
        T(lost_lease_stops_run),
        T(cleanup),
    };
    return test_run(cases, sizeof(cases) / sizeof(cases[0]));
}
