/*
 * scheduler.c - periodic jobs, one thread each (see scheduler.h).
 *
 * One mutex and one condition variable (CLOCK_MONOTONIC) guard every
 * job's state.  A job thread sleeps on the condition until its next run is
 * due, a run_now request arrives, or stop; a finished run broadcasts so
 * run_now callers waiting for it wake.  Jobs are few, so the broadcast
 * waking every thread costs nothing.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../service/common/json_out.h"
#include "../service/common/log.h"
#include "../service/common/util.h"
#include "scheduler.h"

enum sched_state { S_NEW, S_RUNNING, S_STOPPED };

struct job {
    struct job *next;
    struct ipd_scheduler *s;
    char name[IPD_JOB_NAME_MAX];
    int64_t interval_ms;
    enum ipd_err (*fn)(void *ctx, struct ipd_job_run *run);
    void *ctx;
    unsigned flags;
    pthread_t thread;
    bool thread_started;

    /* Guarded by s->lock. */
    bool running;       /* a run is under way (thread or run_now inline) */
    int64_t due_mono;   /* next periodic run, monotonic ms */
    uint64_t requested; /* run_now requests made */
    uint64_t served;    /* requests that a finished run started after */
    bool last_ran;      /* the last finished run was not skipped */
    struct ipd_job_status st;
};

struct ipd_scheduler {
    struct ipd_meta *leases; /* borrowed, may be NULL */
    int64_t lease_ttl_ms;
    char owner[IPD_LEASE_OWNER_MAX];
    pthread_mutex_t lock;
    pthread_cond_t cond; /* CLOCK_MONOTONIC */
    enum sched_state state;
    bool stopping; /* stop asked: runs end at ipd_job_continue */
    struct job *jobs;
};

struct ipd_job_run {
    struct job *job;
    bool leased;          /* holds the job's lease */
    int64_t renewed_mono; /* when the lease was last taken or renewed */
};

struct ipd_scheduler *ipd_scheduler_new(struct ipd_meta *leases,
                                        int64_t lease_ttl_ms,
                                        const char *owner_hint)
{
    struct ipd_scheduler *s = ipd_xcalloc(1, sizeof(*s));
    pthread_condattr_t ca;
    char host[64] = "node", rnd[9];
    unsigned char raw[4];

    s->leases = leases;
    s->lease_ttl_ms = lease_ttl_ms > 0 ? lease_ttl_ms : 60000;
    if (!owner_hint && gethostname(host, sizeof(host)) == 0)
        host[sizeof(host) - 1] = '\0';
    /* Unique per scheduler, readable in the leases collection: which node
     * and process holds a job. */
    ipd_random_bytes(raw, sizeof(raw));
    ipd_hex(raw, sizeof(raw), rnd);
    snprintf(s->owner, sizeof(s->owner), "%.80s:%ld:%s",
             owner_hint ? owner_hint : host, (long)getpid(), rnd);
    IPD_ASSERT(pthread_mutex_init(&s->lock, NULL) == 0);
    IPD_ASSERT(pthread_condattr_init(&ca) == 0);
    IPD_ASSERT(pthread_condattr_setclock(&ca, CLOCK_MONOTONIC) == 0);
    IPD_ASSERT(pthread_cond_init(&s->cond, &ca) == 0);
    pthread_condattr_destroy(&ca);
    return s;
}

void ipd_scheduler_free(struct ipd_scheduler *s)
{
    if (!s)
        return;
    ipd_scheduler_stop(s);
    while (s->jobs) {
        struct job *j = s->jobs;
        s->jobs = j->next;
        free(j);
    }
    pthread_cond_destroy(&s->cond);
    pthread_mutex_destroy(&s->lock);
    free(s);
}

static struct job *find_job(struct ipd_scheduler *s, const char *name)
{
    for (struct job *j = s->jobs; j; j = j->next)
        if (!strcmp(j->name, name))
            return j;
    return NULL;
}

enum ipd_err ipd_scheduler_add(struct ipd_scheduler *s, const char *name,
                               int64_t interval_ms,
                               enum ipd_err (*fn)(void *ctx,
                                                  struct ipd_job_run *run),
                               void *ctx, unsigned flags)
{
    enum ipd_err rc = IPD_OK;
    size_t len = name ? strlen(name) : 0;

    if (!len || len >= IPD_JOB_NAME_MAX || interval_ms <= 0 || !fn ||
        (flags & ~(unsigned)(IPD_JOB_LEASE | IPD_JOB_RUN_AT_START)) ||
        ((flags & IPD_JOB_LEASE) && !s->leases))
        return IPD_ERR_INVALID;
    pthread_mutex_lock(&s->lock);
    if (s->state != S_NEW || find_job(s, name)) {
        rc = IPD_ERR_CONFLICT;
        goto out;
    }
    struct job *j = ipd_xcalloc(1, sizeof(*j));
    j->s = s;
    memcpy(j->name, name, len + 1);
    j->interval_ms = interval_ms;
    j->fn = fn;
    j->ctx = ctx;
    j->flags = flags;
    memcpy(j->st.name, name, len + 1);
    j->st.interval_ms = interval_ms;
    j->st.leased = flags & IPD_JOB_LEASE;
    /* Appended: jobs list (and status) in the order they were added. */
    struct job **tail = &s->jobs;
    while (*tail)
        tail = &(*tail)->next;
    *tail = j;
out:
    pthread_mutex_unlock(&s->lock);
    return rc;
}

/* a + b for a time and an interval, saturating: an interval of "never"
 * (INT64_MAX) must not wrap into the past and run the job back to back. */
static int64_t due_after(int64_t a, int64_t b)
{
    return b > INT64_MAX - a ? INT64_MAX : a + b;
}

/* Take the job's lease for run.  [out] *got */
static enum ipd_err lease_take(struct job *j, struct ipd_job_run *run,
                               bool *got)
{
    struct ipd_scheduler *s = j->s;
    enum ipd_err rc = ipd_meta_lease_acquire(
        s->leases, j->name, s->owner, ipd_now_ms(), s->lease_ttl_ms, got);
    if (rc)
        ipd_warn("job %s: cannot take its lease: %s", j->name,
                 ipd_err_name(rc));
    else if (*got) {
        run->leased = true;
        run->renewed_mono = ipd_mono_ms();
    } else
        ipd_debug("job %s: another process holds the lease; skipped", j->name);
    return rc;
}

/* One run of j, outside the lock.  [out] *ran: false when skipped for the
 * lease; *start_ms: wall-clock start. */
static enum ipd_err run_once(struct job *j, bool *ran, int64_t *start_ms)
{
    struct ipd_job_run run = {.job = j};
    enum ipd_err rc = IPD_OK;
    bool got = true;

    *ran = true;
    *start_ms = ipd_now_ms();
    if (j->flags & IPD_JOB_LEASE) {
        rc = lease_take(j, &run, &got);
        if (rc)
            return rc; /* a failed run: the store is down */
        if (!got) {
            *ran = false;
            return IPD_OK;
        }
    }
    rc = j->fn(j->ctx, &run);
    if (run.leased) {
        /* A release that fails only makes the others wait for the TTL. */
        enum ipd_err lrc =
            ipd_meta_lease_release(j->s->leases, j->name, j->s->owner);
        if (lrc)
            ipd_warn("job %s: releasing its lease: %s", j->name,
                     ipd_err_name(lrc));
    }
    return rc;
}

/* Record a finished run in j's status; under s->lock. */
static void record(struct job *j, enum ipd_err rc, bool ran, int64_t start_ms)
{
    struct ipd_scheduler *s = j->s;
    j->last_ran = ran;
    if (!ran) {
        j->st.skipped++;
        return;
    }
    j->st.runs++;
    j->st.last_start_ms = start_ms;
    j->st.last_end_ms = ipd_now_ms();
    j->st.last_result = rc;
    /* A run cut short by stop is not a failure of the job, nor is a lease
     * that expired during a long batch and went to another process (it
     * goes on with the work; ipd_job_continue said so in the log). */
    if (rc && !(s->stopping && rc == IPD_ERR_UNAVAILABLE) &&
        !(rc == IPD_ERR_CONFLICT && (j->flags & IPD_JOB_LEASE))) {
        j->st.failures++;
        ipd_warn("job %s failed: %s (%lld of %lld runs failed); it runs "
                 "again at its next tick",
                 j->name, ipd_err_name(rc), (long long)j->st.failures,
                 (long long)j->st.runs);
    } else {
        ipd_debug("job %s finished in %lld ms", j->name,
                  (long long)(j->st.last_end_ms - start_ms));
    }
}

/* Wait on s->cond until the monotonic time due_mono (or a wake-up). */
static void wait_until(struct ipd_scheduler *s, int64_t due_mono)
{
    int64_t delta = due_mono - ipd_mono_ms();
    if (delta <= 0)
        return;
    struct timespec ts = ipd_deadline_after(CLOCK_MONOTONIC, delta);
    pthread_cond_timedwait(&s->cond, &s->lock, &ts);
}

static void *job_thread(void *arg)
{
    struct job *j = arg;
    struct ipd_scheduler *s = j->s;

    pthread_mutex_lock(&s->lock);
    for (;;) {
        /* j->running here means a run_now that began in its caller
         * before start is still going: wait for it, never overlap. */
        while (!s->stopping && (j->running || (j->requested == j->served &&
                                               ipd_mono_ms() < j->due_mono))) {
            if (j->running)
                pthread_cond_wait(&s->cond, &s->lock);
            else
                wait_until(s, j->due_mono);
        }
        if (s->stopping)
            break;
        uint64_t req = j->requested;
        int64_t start_mono = ipd_mono_ms(), start_ms = 0;
        bool ran = false;
        j->running = true;
        pthread_mutex_unlock(&s->lock);
        enum ipd_err rc = run_once(j, &ran, &start_ms);
        pthread_mutex_lock(&s->lock);
        j->running = false;
        j->served = req;
        record(j, rc, ran, start_ms);
        /* One interval after this run started; a run longer than that is
         * followed by one more at once, not by the ticks it missed. */
        j->due_mono = due_after(start_mono, j->interval_ms);
        pthread_cond_broadcast(&s->cond);
    }
    pthread_mutex_unlock(&s->lock);
    return NULL;
}

/* Tell every thread to stop and join them; s->lock not held. */
static void stop_threads(struct ipd_scheduler *s)
{
    pthread_mutex_lock(&s->lock);
    s->stopping = true;
    pthread_cond_broadcast(&s->cond);
    pthread_mutex_unlock(&s->lock);
    for (struct job *j = s->jobs; j; j = j->next) {
        if (j->thread_started)
            pthread_join(j->thread, NULL);
        j->thread_started = false;
    }
}

enum ipd_err ipd_scheduler_start(struct ipd_scheduler *s)
{
    enum ipd_err rc = IPD_OK;
    int64_t now = ipd_mono_ms();

    pthread_mutex_lock(&s->lock);
    if (s->state != S_NEW) {
        pthread_mutex_unlock(&s->lock);
        return IPD_ERR_CONFLICT;
    }
    s->state = S_RUNNING;
    for (struct job *j = s->jobs; j; j = j->next)
        j->due_mono = j->flags & IPD_JOB_RUN_AT_START
                          ? now
                          : due_after(now, j->interval_ms);
    pthread_mutex_unlock(&s->lock);
    for (struct job *j = s->jobs; j && !rc; j = j->next) {
        if (pthread_create(&j->thread, NULL, job_thread, j)) {
            ipd_error("scheduler: cannot start the thread of job %s", j->name);
            rc = IPD_ERR_INTERNAL;
        } else {
            j->thread_started = true;
        }
    }
    if (rc) {
        stop_threads(s);
        pthread_mutex_lock(&s->lock);
        s->state = S_STOPPED;
        pthread_mutex_unlock(&s->lock);
        return rc;
    }
    for (struct job *j = s->jobs; j; j = j->next)
        ipd_info("scheduler: job %s every %lld ms%s", j->name,
                 (long long)j->interval_ms,
                 j->flags & IPD_JOB_LEASE ? " (under a lease)" : "");
    return IPD_OK;
}

void ipd_scheduler_stop(struct ipd_scheduler *s)
{
    bool was_running;
    pthread_mutex_lock(&s->lock);
    was_running = s->state == S_RUNNING;
    pthread_mutex_unlock(&s->lock);
    if (!was_running)
        return;
    stop_threads(s);
    pthread_mutex_lock(&s->lock);
    s->state = S_STOPPED;
    /* Runs done after this (run_now inline) are not cut short. */
    s->stopping = false;
    pthread_cond_broadcast(&s->cond);
    pthread_mutex_unlock(&s->lock);
}

/* run_now without job threads: run in the caller, after any run under
 * way.  Called and returns with s->lock held. */
static enum ipd_err run_inline(struct job *j, bool *ran)
{
    struct ipd_scheduler *s = j->s;
    int64_t start_ms = 0;

    while (j->running)
        pthread_cond_wait(&s->cond, &s->lock);
    j->running = true;
    pthread_mutex_unlock(&s->lock);
    enum ipd_err rc = run_once(j, ran, &start_ms);
    pthread_mutex_lock(&s->lock);
    j->running = false;
    record(j, rc, *ran, start_ms);
    pthread_cond_broadcast(&s->cond);
    return rc;
}

enum ipd_err ipd_scheduler_run_now(struct ipd_scheduler *s, const char *name,
                                   bool *ran)
{
    enum ipd_err rc;
    bool ran_here = false;

    pthread_mutex_lock(&s->lock);
    struct job *j = find_job(s, name);
    if (!j) {
        rc = IPD_ERR_NOT_FOUND;
        goto out;
    }
    if (s->state != S_RUNNING) {
        rc = run_inline(j, &ran_here);
        goto out;
    }
    /* Hand the run to the job's thread, so it never overlaps the job's
     * own runs, and wait for a run that started after this request. */
    uint64_t req = ++j->requested;
    pthread_cond_broadcast(&s->cond);
    while (j->served < req && s->state == S_RUNNING && !s->stopping)
        pthread_cond_wait(&s->cond, &s->lock);
    if (j->served < req) {
        rc = IPD_ERR_UNAVAILABLE;
        goto out;
    }
    rc = j->st.last_result;
    ran_here = j->last_ran;
    if (!ran_here)
        rc = IPD_OK;
out:
    pthread_mutex_unlock(&s->lock);
    if (ran)
        *ran = ran_here;
    return rc;
}

enum ipd_err ipd_job_continue(struct ipd_job_run *run)
{
    if (!run)
        return IPD_OK;
    struct job *j = run->job;
    struct ipd_scheduler *s = j->s;
    bool stopping;

    pthread_mutex_lock(&s->lock);
    stopping = s->stopping;
    pthread_mutex_unlock(&s->lock);
    if (stopping)
        return IPD_ERR_UNAVAILABLE;
    if (!run->leased || ipd_mono_ms() - run->renewed_mono < s->lease_ttl_ms / 3)
        return IPD_OK;
    bool held = false;
    enum ipd_err rc = ipd_meta_lease_renew(
        s->leases, j->name, s->owner, ipd_now_ms(), s->lease_ttl_ms, &held);
    if (rc) {
        ipd_warn("job %s: renewing its lease: %s; stopping this run", j->name,
                 ipd_err_name(rc));
        return rc;
    }
    if (!held) {
        /* Expired while a batch ran long, and another process took it:
         * that one goes on; two at once would only repeat work. */
        ipd_warn("job %s: lost its lease to another process; stopping this "
                 "run",
                 j->name);
        run->leased = false;
        return IPD_ERR_CONFLICT;
    }
    run->renewed_mono = ipd_mono_ms();
    return IPD_OK;
}

/* j's status with next_run_ms filled in; under s->lock. */
static void status_of(struct job *j, struct ipd_job_status *out)
{
    *out = j->st;
    out->running = j->running;
    out->next_run_ms = 0;
    if (j->s->state == S_RUNNING && !j->s->stopping) {
        int64_t left = j->due_mono - ipd_mono_ms();
        out->next_run_ms = due_after(ipd_now_ms(), left > 0 ? left : 0);
    }
}

enum ipd_err ipd_scheduler_status(struct ipd_scheduler *s, const char *name,
                                  struct ipd_job_status *out)
{
    enum ipd_err rc = IPD_OK;
    pthread_mutex_lock(&s->lock);
    struct job *j = find_job(s, name);
    if (j)
        status_of(j, out);
    else
        rc = IPD_ERR_NOT_FOUND;
    pthread_mutex_unlock(&s->lock);
    return rc;
}

/* A status time (0: none yet) as JSON: a string, or null. */
static json_t *status_time(int64_t ms)
{
    return ipd_json_time(ms ? ms : IPD_TIME_NEVER);
}

static json_t *status_json(const struct ipd_job_status *st)
{
    json_t *o = json_object();
    IPD_ASSERT(o);
    json_object_set_new(o, "interval_ms", json_integer(st->interval_ms));
    json_object_set_new(o, "leased", json_boolean(st->leased));
    json_object_set_new(o, "running", json_boolean(st->running));
    json_object_set_new(o, "last_start", status_time(st->last_start_ms));
    json_object_set_new(o, "last_end", status_time(st->last_end_ms));
    json_object_set_new(o, "last_result",
                        st->runs ? json_string(ipd_err_name(st->last_result))
                                 : json_null());
    json_object_set_new(o, "runs", json_integer(st->runs));
    json_object_set_new(o, "failures", json_integer(st->failures));
    json_object_set_new(o, "skipped", json_integer(st->skipped));
    json_object_set_new(o, "next_run", status_time(st->next_run_ms));
    return o;
}

json_t *ipd_scheduler_status_json(struct ipd_scheduler *s)
{
    json_t *all = json_object();
    IPD_ASSERT(all);
    pthread_mutex_lock(&s->lock);
    for (struct job *j = s->jobs; j; j = j->next) {
        struct ipd_job_status st;
        status_of(j, &st);
        json_object_set_new(all, j->name, status_json(&st));
    }
    pthread_mutex_unlock(&s->lock);
    return all;
}
