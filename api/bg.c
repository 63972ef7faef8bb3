/*
 * bg.c - request work that blocks (URL ingest, package installs) on a
 * worker queue (service/workq.c), so it never runs on the HTTP event
 * threads.
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

bool ipd_bg_submit(struct ipd_workq *q, struct ipd_req *r,
                   void (*fn)(struct ipd_req *r, bool stopping))
{
    if (!q)
        return false;
    struct bg_job *j = ipd_xcalloc(1, sizeof(*j));
    j->r = r;
    j->fn = fn;
    if (ipd_workq_submit(q, bg_run, bg_done, j, bg_admit)) {
        free(j);
        return false;
    }
    return true;
}
