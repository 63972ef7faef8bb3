/*
 * test_pool_answer.c - ipd_exec_pool_answer (service/exec/pool.h): a
 * client's answer to a call reaches its execution's live channel, in the
 * caller's scope only, and each outcome is told apart: no such execution
 * (another user's or tenant's too), no such call (or calls off), too
 * large, answered, answered twice, a call that is over, an execution that
 * is over.
 *
 * No code runs here: the pool has no executor.  A job is held in its
 * admit hook, which runs under the queue's lock before any worker can see
 * the job (pool.h), so it stays queued while the test answers; its live
 * channel (the test's, with calls enabled and a consumer attached) plays
 * the run's side (ipd_live_call_open, ipd_live_call_take).  Then the job
 * is cancelled through its channel before it is released, so the worker
 * that takes it does not run it (a cancelled result) and its entry is
 * over.
 */
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "service/common/live.h"
#include "service/common/util.h"
#include "service/exec/pool.h"
#include "test.h"

/* One held job: the thread that submits it (blocked in admit until
 * released) and the handshake with the test. */
struct held {
    struct ipd_exec_pool *p;
    struct ipd_exec_job *job;
    struct ipd_live *live; /* the test's reference */
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    bool admitted, released, done;
    enum ipd_err submit_rc;
};

static void on_sleep(void *ctx)
{
    (void)ctx;
}

static void on_wake(void *ctx)
{
    (void)ctx;
}

static void flag_set(struct held *h, bool *flag)
{
    pthread_mutex_lock(&h->lock);
    *flag = true;
    pthread_cond_broadcast(&h->cond);
    pthread_mutex_unlock(&h->lock);
}

static void flag_wait(struct held *h, const bool *flag)
{
    pthread_mutex_lock(&h->lock);
    while (!*flag)
        pthread_cond_wait(&h->cond, &h->lock);
    pthread_mutex_unlock(&h->lock);
}

/* Under the queue's lock: no worker sees the job until the test says. */
static void admit_hold(void *ctx)
{
    struct held *h = ctx;
    flag_set(h, &h->admitted);
    flag_wait(h, &h->released);
}

static void job_done(void *ctx)
{
    struct held *h = ctx;
    flag_set(h, &h->done);
}

static void *submit_main(void *arg)
{
    struct held *h = arg;
    struct ipd_buf why;
    ipd_buf_init(&why, 512);
    h->submit_rc =
        ipd_exec_pool_submit(h->p, h->job, admit_hold, job_done, h, &why);
    ipd_buf_release(&why);
    return NULL;
}

/* The limits of every test's run: answers up to 64 bytes. */
static const struct ipd_live_call_limits limits = {.max_bytes = 64,
                                                   .max_calls = 8,
                                                   .max_in_flight = 4,
                                                   .call_timeout_ms = 60000,
                                                   .max_wait_ms = 60000};

/* A job of (t1, u1), streamed, with calls when calls_on, queued and held
 * in its admit hook once this returns. */
static void hold(struct held *h, struct ipd_exec_pool *p, bool calls_on)
{
    static const struct ipd_live_consumer c = {on_sleep, on_wake, NULL};
    memset(h, 0, sizeof(*h));
    h->p = p;
    pthread_mutex_init(&h->lock, NULL);
    pthread_cond_init(&h->cond, NULL);
    h->job = ipd_exec_job_new();
    snprintf(h->job->tenant, sizeof(h->job->tenant), "t1");
    snprintf(h->job->user_id, sizeof(h->job->user_id), "u1");
    h->job->code = ipd_xstrdup("print(1)");
    h->job->code_len = strlen(h->job->code);
    h->live = ipd_live_new();
    IPD_ASSERT(h->live);
    ipd_live_stream(h->live, &c);
    if (calls_on)
        ipd_live_calls_enable(h->live, &limits);
    h->job->live = ipd_live_ref(h->live);
    IPD_ASSERT(pthread_create(&h->thread, NULL, submit_main, h) == 0);
    flag_wait(h, &h->admitted);
}

/* Cancel the held job, let it go, and wait until it is over (its worker
 * does not run a cancelled job). */
static void finish(struct held *h)
{
    ipd_live_cancel(h->live);
    flag_set(h, &h->released);
    pthread_join(h->thread, NULL);
    CHECK_INT(h->submit_rc, IPD_OK);
    flag_wait(h, &h->done);
    CHECK(h->job->finished);
}

static void release(struct held *h)
{
    ipd_live_unstream(h->live);
    ipd_live_unref(h->live);
    ipd_exec_job_free(h->job);
    pthread_cond_destroy(&h->cond);
    pthread_mutex_destroy(&h->lock);
}

static char dir[64];

static struct ipd_exec_pool *pool_new(void)
{
    struct ipd_exec_pool *p = NULL;
    snprintf(dir, sizeof(dir), "/tmp/ipd-pool-answer-XXXXXX");
    IPD_ASSERT(mkdtemp(dir));
    struct ipd_exec_pool_options o = {.slots = 1, .queue = 4, .data_dir = dir};
    IPD_ASSERT(ipd_exec_pool_new(NULL, &o, &p) == IPD_OK);
    return p;
}

static void pool_free(struct ipd_exec_pool *p)
{
    ipd_exec_pool_free(p);
    CHECK(ipd_remove_tree_at(AT_FDCWD, dir) == 0);
}

static enum ipd_exec_answer answer(struct held *h, const char *tenant,
                                   const char *user, const char *call,
                                   const char *json)
{
    return ipd_exec_pool_answer(h->p, h->job->exec_id, tenant, user, call, json,
                                strlen(json), NULL);
}

/* Who may answer: the execution's own (tenant, user), no one else. */
static void test_scope(void)
{
    struct ipd_exec_pool *p = pool_new();
    struct held h;
    char id[IPD_LIVE_CALL_ID_MAX];
    hold(&h, p, true);
    REQUIRE(ipd_live_call_open(h.live, 1, id) == IPD_LIVE_CALL_OK);
    CHECK_INT(answer(&h, "t1", "u2", id, "{\"result\":1}"),
              IPD_EXEC_ANSWER_NO_EXEC);
    CHECK_INT(answer(&h, "t2", "u1", id, "{\"result\":1}"),
              IPD_EXEC_ANSWER_NO_EXEC);
    CHECK_INT(ipd_exec_pool_answer(p, "exec_nosuchexecutionxxxxxxxxx", "t1",
                                   "u1", id, "{\"result\":1}", 12, NULL),
              IPD_EXEC_ANSWER_NO_EXEC);
    /* Not handed on by those: the owner's answer is the first. */
    CHECK_INT(answer(&h, "t1", "u1", id, "{\"result\":1}"), IPD_EXEC_ANSWER_OK);
    finish(&h);
    release(&h);
    pool_free(p);
}

/* The outcomes of a running (here: held) execution's calls, and what the
 * run then takes. */
static void test_outcomes(void)
{
    struct ipd_exec_pool *p = pool_new();
    struct held h;
    char id1[IPD_LIVE_CALL_ID_MAX], id2[IPD_LIVE_CALL_ID_MAX];
    char big[80];
    size_t max = 0;
    struct ipd_buf got;
    uint64_t seq = 0;
    ipd_buf_init(&got, 4096);
    hold(&h, p, true);
    REQUIRE(ipd_live_call_open(h.live, 1, id1) == IPD_LIVE_CALL_OK);
    REQUIRE(ipd_live_call_open(h.live, 2, id2) == IPD_LIVE_CALL_OK);
    CHECK_INT(answer(&h, "t1", "u1", "call_nosuchcallxxxxxxxxxxxxxx",
                     "{\"result\":1}"),
              IPD_EXEC_ANSWER_NO_CALL);
    /* Over max_bytes (64): refused with the bound, and not handed on. */
    snprintf(big, sizeof(big), "{\"result\":\"%0*d\"}", 60, 7);
    CHECK_INT(ipd_exec_pool_answer(p, h.job->exec_id, "t1", "u1", id1, big,
                                   strlen(big), &max),
              IPD_EXEC_ANSWER_TOO_LARGE);
    CHECK_INT(max, 64);
    CHECK_INT(answer(&h, "t1", "u1", id1, "{\"result\":[1,2]}"),
              IPD_EXEC_ANSWER_OK);
    CHECK_INT(answer(&h, "t1", "u1", id1, "{\"result\":3}"),
              IPD_EXEC_ANSWER_TWICE);
    /* The run takes the first answer, as it was given. */
    REQUIRE(ipd_live_call_take(h.live, ipd_mono_ms(), &seq, &got));
    CHECK_INT(seq, 1);
    CHECK_STR(got.buf, "{\"result\":[1,2]}");
    CHECK_INT(answer(&h, "t1", "u1", id1, "{\"result\":3}"),
              IPD_EXEC_ANSWER_TWICE);
    /* The second call times out for the run, unanswered: over. */
    ipd_buf_reset(&got);
    REQUIRE(ipd_live_call_take(h.live, ipd_mono_ms() + 60001, &seq, &got));
    CHECK_INT(seq, 2);
    CHECK(strstr(got.buf, "TimeoutError") != NULL);
    CHECK_INT(answer(&h, "t1", "u1", id2, "{\"result\":3}"),
              IPD_EXEC_ANSWER_GONE);
    /* Once the execution is over, any answer is late. */
    finish(&h);
    CHECK_INT(answer(&h, "t1", "u1", id1, "{\"result\":3}"),
              IPD_EXEC_ANSWER_OVER);
    CHECK_INT(answer(&h, "t1", "u1", "call_nosuchcallxxxxxxxxxxxxxx",
                     "{\"result\":3}"),
              IPD_EXEC_ANSWER_OVER);
    /* ... and still someone else's is not found. */
    CHECK_INT(answer(&h, "t1", "u2", id1, "{\"result\":3}"),
              IPD_EXEC_ANSWER_NO_EXEC);
    ipd_buf_release(&got);
    release(&h);
    pool_free(p);
}

/* A run without calls has none to answer, whatever the size. */
static void test_calls_off(void)
{
    struct ipd_exec_pool *p = pool_new();
    struct held h;
    char big[200];
    hold(&h, p, false);
    CHECK_INT(answer(&h, "t1", "u1", "call_nosuchcallxxxxxxxxxxxxxx",
                     "{\"result\":1}"),
              IPD_EXEC_ANSWER_NO_CALL);
    snprintf(big, sizeof(big), "{\"result\":\"%0*d\"}", 150, 7);
    CHECK_INT(answer(&h, "t1", "u1", "call_nosuchcallxxxxxxxxxxxxxx", big),
              IPD_EXEC_ANSWER_NO_CALL);
    finish(&h);
    release(&h);
    pool_free(p);
}

TEST_MAIN(T(test_scope), T(test_outcomes), T(test_calls_off))
