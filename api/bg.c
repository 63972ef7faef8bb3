/*
 * bg.c - request work that blocks (URL ingest, package installs, session
 * create, delete and variables calls) on a worker queue
 * (service/common/workq.c), so it never runs on the HTTP event threads.
 *
 * The handler suspends the connection and submits; a worker runs fn(r)
 * (which must not reply: libmicrohttpd answers only from its own
 * callbacks), then resumes the connection, and the handler's finish runs
 * again and replies from what fn left in r->state.
 */
#include <stdlib.h>

#include "../service/common/workq.h"
#include "http.h"

struct bg_job {
    struct ipd_req *r;
    void (*fn)(struct ipd_req *r, bool stopping);
};

/* Under the queue's lock, before a worker can see the job: its resume
 * must never come first. */
static enum ipd_err bg_admit(void *arg)
{
    struct bg_job *j = arg;
    j->r->suspended = true;
    MHD_suspend_connection(j->r->conn);
    return IPD_OK;
}

/* Work that had not started when shutdown began is only told so (it
 * records a 503 for its handler); the connection is resumed either way.
 * Work already running finishes: it is bounded by its own timeouts. */
static void bg_run(void *arg, bool stopping)
{
    struct bg_job *j = arg;
    j->fn(j->r, stopping);
}

/* After the job stopped counting as running: the handler replies. */
static void bg_done(void *arg)
{
    struct bg_job *j = arg;
    MHD_resume_connection(j->r->conn);
    free(j);
}

/* Queue fn(r) as a job of share (NULL: nobody's). */
static enum ipd_err bg_queue(struct ipd_workq *q, struct ipd_req *r,
                             void (*fn)(struct ipd_req *r, bool stopping),
                             const struct ipd_workq_share *share,
                             bool *share_full)
{
    struct bg_job *j = ipd_xcalloc(1, sizeof(*j));
    j->r = r;
    j->fn = fn;
    enum ipd_err rc = ipd_workq_submit_shared(q, bg_run, bg_done, j, bg_admit,
                                              share, share_full);
    if (rc)
        free(j);
    return rc;
}

bool ipd_bg_submit(struct ipd_workq *q, struct ipd_req *r,
                   void (*fn)(struct ipd_req *r, bool stopping))
{
    return q && bg_queue(q, r, fn, NULL, NULL) == IPD_OK;
}

/* r's tenant's share v of q's places. */
static struct ipd_workq_share share_of(struct ipd_workq *q, struct ipd_req *r,
                                       int64_t v)
{
    unsigned threads = ipd_workq_threads(q);
    return (struct ipd_workq_share){
        .group = r->principal.tenant,
        .running_max = threads > 1 ? threads / 2 : 0,
        .held_max = ipd_policy_share(v, threads + ipd_workq_queue_max(q)),
    };
}

/* A refused submission rc, told to r: 429 (the queue, or the tenant's
 * share of it, full) or 503 (stopping). */
static void refused(struct ipd_workq *q, struct ipd_req *r, enum ipd_err rc,
                    const struct ipd_workq_share *share, bool share_full,
                    const char *what, const char *field)
{
    unsigned cap = ipd_workq_threads(q) + ipd_workq_queue_max(q);
    /* IPD_ERR_BUSY (the queue, or the tenant's share of it, is full) or
     * IPD_ERR_UNAVAILABLE (stopping): reply.c's 429 or 503. */
    char msg[512];
    if (share_full)
        snprintf(msg, sizeof(msg),
                 "this tenant has %u %s running or waiting, its share "
                 "(policy %s); retry later",
                 share->held_max, what, field);
    else if (rc == IPD_ERR_BUSY)
        snprintf(msg, sizeof(msg),
                 "all %u places for %s are taken; retry later", cap, what);
    else
        snprintf(msg, sizeof(msg),
                 "%s are unavailable: the service is shutting down", what);
    r->retry_after_s = 1;
    ipd_reply_failure(r, rc, msg, what);
}

bool ipd_bg_submit_shared(struct ipd_workq *q, struct ipd_req *r,
                          void (*fn)(struct ipd_req *r, bool stopping),
                          int64_t v, const char *what, const char *field)
{
    struct ipd_workq_share share = share_of(q, r, v);
    bool share_full = false;
    enum ipd_err rc =
        q ? bg_queue(q, r, fn, &share, &share_full) : IPD_ERR_UNAVAILABLE;
    if (rc)
        refused(q, r, rc, &share, share_full, what, field);
    return rc == IPD_OK;
}

bool ipd_bg_submit_detached(struct ipd_workq *q, struct ipd_req *r,
                            void (*run)(void *arg, bool stopping),
                            void (*done)(void *arg), void *arg, int64_t v,
                            const char *what, const char *field)
{
    struct ipd_workq_share share = share_of(q, r, v);
    bool share_full = false;
    enum ipd_err rc = q ? ipd_workq_submit_shared(q, run, done, arg, NULL,
                                                  &share, &share_full)
                        : IPD_ERR_UNAVAILABLE;
    if (rc)
        refused(q, r, rc, &share, share_full, what, field);
    return rc == IPD_OK;
}
