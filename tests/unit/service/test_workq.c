/*
 * test_workq.c - the worker queue under the execution slots, URL ingest
 * and package installs: every job runs exactly once, capacity is threads
 * + queue, admission runs before a worker can see the job, and stopping
 * hands waiting jobs over as refusals while running ones finish.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <time.h>

#include "service/common/workq.h"
#include "test.h"

#define N_JOBS 2000

static atomic_int ran[N_JOBS];
static atomic_int stopped_runs;

static void count_job(void *arg, bool stopping)
{
    int i = (int)(intptr_t)arg;
    atomic_fetch_add(&ran[i], 1);
    if (stopping)
        atomic_fetch_add(&stopped_runs, 1);
}

static void each_job_runs_once(void)
{
    struct ipd_workq *q = NULL;
    REQUIRE(ipd_workq_new(4, N_JOBS, &q) == IPD_OK);
    CHECK_INT(ipd_workq_threads(q), 4);
    CHECK_INT(ipd_workq_queue_max(q), N_JOBS);
    for (int i = 0; i < N_JOBS; i++)
        CHECK_INT(
            ipd_workq_submit(q, count_job, NULL, (void *)(intptr_t)i, NULL),
            IPD_OK);
    ipd_workq_free(q); /* drains: every queued job is handed over */
    for (int i = 0; i < N_JOBS; i++)
        CHECK_INT(atomic_load(&ran[i]), 1);
}

/* A job that holds its worker until released. */
struct gate {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    bool entered, open, stopping;
};

static void gate_job(void *arg, bool stopping)
{
    struct gate *g = arg;
    pthread_mutex_lock(&g->lock);
    g->stopping = stopping;
    g->entered = true;
    pthread_cond_broadcast(&g->cond);
    while (!g->open)
        pthread_cond_wait(&g->cond, &g->lock);
    pthread_mutex_unlock(&g->lock);
}

static void gate_wait_entered(struct gate *g)
{
    pthread_mutex_lock(&g->lock);
    while (!g->entered)
        pthread_cond_wait(&g->cond, &g->lock);
    pthread_mutex_unlock(&g->lock);
}

static void gate_open(struct gate *g)
{
    pthread_mutex_lock(&g->lock);
    g->open = true;
    pthread_cond_broadcast(&g->cond);
    pthread_mutex_unlock(&g->lock);
}

struct admitted {
    int calls;
    enum ipd_err answer;
};

static enum ipd_err admit(void *arg)
{
    /* arg is the job's; the test passes a struct with both roles */
    struct admitted *a = arg;
    a->calls++;
    return a->answer;
}

static atomic_int refused_ran;

static void never_runs(void *arg, bool stopping)
{
    (void)arg;
    (void)stopping;
    atomic_fetch_add(&refused_ran, 1);
}

static void *free_queue(void *arg)
{
    ipd_workq_free(arg);
    return NULL;
}

static void capacity_admission_and_stop(void)
{
    struct ipd_workq *q = NULL;
    struct gate g = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, false,
                     false, false};
    struct admitted refuse = {0, IPD_ERR_QUOTA};
    pthread_t t;
    enum ipd_err rc;

    atomic_store(&stopped_runs, 0);
    for (int i = 0; i < 3; i++)
        atomic_store(&ran[i], 0);
    REQUIRE(ipd_workq_new(1, 2, &q) == IPD_OK);
    REQUIRE(ipd_workq_submit(q, gate_job, NULL, &g, NULL) == IPD_OK);
    gate_wait_entered(&g);
    /* Admission can refuse: nothing queued, fn never called. */
    CHECK_INT(ipd_workq_submit(q, never_runs, NULL, &refuse, admit),
              IPD_ERR_QUOTA);
    CHECK_INT(refuse.calls, 1);
    /* One running + two waiting, then full. */
    CHECK_INT(ipd_workq_submit(q, count_job, NULL, (void *)(intptr_t)0, NULL),
              IPD_OK);
    CHECK_INT(ipd_workq_submit(q, count_job, NULL, (void *)(intptr_t)1, NULL),
              IPD_OK);
    CHECK_INT(ipd_workq_submit(q, never_runs, NULL, NULL, NULL), IPD_ERR_BUSY);
    unsigned running = 9, queued = 9;
    ipd_workq_counts(q, &running, &queued);
    CHECK_INT(running, 1);
    CHECK_INT(queued, 2);

    /* Stop while the gate job runs; a submit that says "unavailable"
     * shows the stop has begun. */
    REQUIRE(pthread_create(&t, NULL, free_queue, q) == 0);
    do
        rc = ipd_workq_submit(q, never_runs, NULL, NULL, NULL);
    while (rc == IPD_ERR_BUSY);
    CHECK_INT(rc, IPD_ERR_UNAVAILABLE);
    gate_open(&g);
    pthread_join(t, NULL);
    CHECK(!g.stopping);                 /* it had started: it finished */
    CHECK_INT(atomic_load(&ran[0]), 1); /* waiting ones were handed */
    CHECK_INT(atomic_load(&ran[1]), 1); /* over, told "stopping" */
    CHECK_INT(atomic_load(&stopped_runs), 2);
    CHECK_INT(atomic_load(&refused_ran), 0); /* refused jobs never ran */
}

/* Stopped but not freed (the daemon stops the pools before libmicrohttpd
 * and frees them after): submit says unavailable, counts still answer,
 * stop again is harmless.  Regression: the pools were freed while a
 * keep-alive connection could still bring a request to them. */
static void stopped_queue_stays_usable(void)
{
    struct ipd_workq *q = NULL;
    unsigned running = 9, queued = 9;
    atomic_store(&refused_ran, 0);
    REQUIRE(ipd_workq_new(2, 4, &q) == IPD_OK);
    ipd_workq_stop(q);
    CHECK_INT(ipd_workq_submit(q, never_runs, NULL, NULL, NULL),
              IPD_ERR_UNAVAILABLE);
    ipd_workq_counts(q, &running, &queued);
    CHECK_INT(running, 0);
    CHECK_INT(queued, 0);
    ipd_workq_stop(q);
    ipd_workq_free(q);
    CHECK_INT(atomic_load(&refused_ran), 0);
}

struct seen {
    struct ipd_workq *q;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    bool done;
    unsigned running_at_done, queued_at_done;
};

static void nothing(void *arg, bool stopping)
{
    (void)arg;
    (void)stopping;
}

static void note_counts(void *arg)
{
    struct seen *x = arg;
    unsigned running, queued;
    ipd_workq_counts(x->q, &running, &queued);
    pthread_mutex_lock(&x->lock);
    x->running_at_done = running;
    x->queued_at_done = queued;
    x->done = true;
    pthread_cond_broadcast(&x->cond);
    pthread_mutex_unlock(&x->lock);
}

/* done runs once the job no longer counts as running: whoever it tells
 * (a client whose connection it resumes) and who then asks for the
 * status sees running 0.  Regression: the admin status said one execution
 * was running right after both had answered. */
static void done_sees_job_no_longer_running(void)
{
    struct seen x = {
        NULL, PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, false, 9, 9};
    REQUIRE(ipd_workq_new(1, 4, &x.q) == IPD_OK);
    CHECK_INT(ipd_workq_submit(x.q, nothing, note_counts, &x, NULL), IPD_OK);
    pthread_mutex_lock(&x.lock);
    while (!x.done)
        pthread_cond_wait(&x.cond, &x.lock);
    pthread_mutex_unlock(&x.lock);
    CHECK_INT(x.running_at_done, 0);
    CHECK_INT(x.queued_at_done, 0);
    ipd_workq_free(x.q);
}

/* Like gate_wait_entered, but gives up after 10 s: false then. */
static bool gate_entered_within(struct gate *g)
{
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += 10;
    pthread_mutex_lock(&g->lock);
    int rc = 0;
    while (!g->entered && rc == 0)
        rc = pthread_cond_timedwait(&g->cond, &g->lock, &until);
    bool entered = g->entered;
    pthread_mutex_unlock(&g->lock);
    return entered;
}

static atomic_int order_next;
static int order_of[4];

static void order_job(void *arg, bool stopping)
{
    (void)stopping;
    order_of[(intptr_t)arg] = atomic_fetch_add(&order_next, 1);
}

/* Per-group shares (fairness between tenants): group a may run one job
 * and hold three; the worker left idle by a's bound takes the next
 * eligible job (b's), not a's older one; a's fourth is refused as its
 * share (share_full), b's job beyond the queue's own capacity as the
 * queue's (share_full false); a's waiting jobs then run oldest first. */
static void group_shares(void)
{
    struct ipd_workq *q = NULL;
    struct gate ga = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER,
                      false, false, false};
    struct gate gb = ga;
    const struct ipd_workq_share a = {"a", 1, 3}, b = {"b", 1, 0};
    bool full = true;
    unsigned running = 9, queued = 9;
    atomic_store(&order_next, 0);
    atomic_store(&refused_ran, 0);
    REQUIRE(ipd_workq_new(2, 2, &q) == IPD_OK);
    CHECK_INT(ipd_workq_submit_shared(q, gate_job, NULL, &ga, NULL, &a, &full),
              IPD_OK);
    CHECK(!full);
    CHECK(gate_entered_within(&ga));
    for (intptr_t i = 1; i <= 2; i++)
        CHECK_INT(ipd_workq_submit_shared(q, order_job, NULL, (void *)i, NULL,
                                          &a, NULL),
                  IPD_OK);
    CHECK_INT(
        ipd_workq_submit_shared(q, never_runs, NULL, NULL, NULL, &a, &full),
        IPD_ERR_BUSY);
    CHECK(full);
    /* The second worker skips a's waiting jobs for b's. */
    CHECK_INT(ipd_workq_submit_shared(q, gate_job, NULL, &gb, NULL, &b, &full),
              IPD_OK);
    CHECK(!full);
    CHECK(gate_entered_within(&gb));
    ipd_workq_group_counts(q, "a", &running, &queued);
    CHECK_INT(running, 1);
    CHECK_INT(queued, 2);
    ipd_workq_group_counts(q, "b", &running, &queued);
    CHECK_INT(running, 1);
    CHECK_INT(queued, 0);
    ipd_workq_counts(q, &running, &queued);
    CHECK_INT(running, 2);
    CHECK_INT(queued, 2);
    /* 2 running + 2 waiting: the queue is full for b too (no share of
     * its own to blame). */
    CHECK_INT(
        ipd_workq_submit_shared(q, never_runs, NULL, NULL, NULL, &b, &full),
        IPD_ERR_BUSY);
    CHECK(!full);
    CHECK_INT(atomic_load(&order_next), 0); /* a's bound held them */
    gate_open(&ga);
    gate_open(&gb);
    ipd_workq_free(q);
    CHECK_INT(atomic_load(&order_next), 2);
    CHECK_INT(order_of[1], 0); /* oldest first */
    CHECK_INT(order_of[2], 1);
    CHECK_INT(atomic_load(&refused_ran), 0);
}

/* A job held back by its group's running bound takes no worker: with no
 * waiting places (queue 0), a's second job is refused (it would have to
 * wait) and b's starts on the idle worker.  (Before: a's second job was
 * queued, held back, and b was refused while a worker sat idle.) */
static void held_back_jobs_leave_no_worker_idle(void)
{
    struct ipd_workq *q = NULL;
    struct gate ga = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER,
                      false, false, false};
    struct gate gb = ga;
    const struct ipd_workq_share a = {"a", 1, 2}, b = {"b", 1, 2};
    unsigned running = 9, queued = 9;
    atomic_store(&refused_ran, 0);
    REQUIRE(ipd_workq_new(2, 0, &q) == IPD_OK);
    CHECK_INT(ipd_workq_submit_shared(q, gate_job, NULL, &ga, NULL, &a, NULL),
              IPD_OK);
    CHECK(gate_entered_within(&ga));
    CHECK_INT(
        ipd_workq_submit_shared(q, never_runs, NULL, NULL, NULL, &a, NULL),
        IPD_ERR_BUSY);
    CHECK_INT(ipd_workq_submit_shared(q, gate_job, NULL, &gb, NULL, &b, NULL),
              IPD_OK);
    CHECK(gate_entered_within(&gb));
    ipd_workq_counts(q, &running, &queued);
    CHECK_INT(running, 2);
    CHECK_INT(queued, 0);
    gate_open(&ga);
    gate_open(&gb);
    ipd_workq_free(q);
    CHECK_INT(atomic_load(&refused_ran), 0);
}

TEST_MAIN(T(each_job_runs_once), T(capacity_admission_and_stop),
          T(stopped_queue_stays_usable), T(done_sees_job_no_longer_running),
          T(group_shares), T(held_back_jobs_leave_no_worker_idle))
