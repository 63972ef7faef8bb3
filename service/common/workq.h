/*
 * workq.h - a fixed set of worker threads taking jobs from one FIFO.
 *
 * Used for the execution slots and for request work that blocks (URL
 * ingest, package installs).  Capacity is threads + queue_max jobs,
 * running or waiting; beyond that submit refuses.  Freeing stops it: jobs
 * that had not started are still handed to their fn, told `stopping`
 * (they only record a refusal), running ones finish.
 */
#ifndef IPD_WORKQ_H
#define IPD_WORKQ_H

#include <stdbool.h>

#include "ipd.h"

struct ipd_workq;

/* The job; runs on a worker.  stopping: the queue was stopped before the
 * job started. */
typedef void (*ipd_workq_fn)(void *arg, bool stopping);
/* Runs on the worker after fn, once the job no longer counts as running:
 * where to tell the world it is over (resume a connection, publish a
 * result), so that whoever hears of it sees the counts without it. */
typedef void (*ipd_workq_done_fn)(void *arg);
/* Called under the queue's lock once the job has room, before any worker
 * can see it (suspend a connection, register the job); a non-OK answer
 * refuses the job and is what submit returns.  NULL: nothing to do. */
typedef enum ipd_err (*ipd_workq_admit_fn)(void *arg);

enum ipd_err ipd_workq_new(unsigned threads, unsigned queue_max,
                           struct ipd_workq **out);
/* Stop: hand every waiting job to its fn (stopping), wait for the
 * running ones, join the workers.  The queue stays valid: submit answers
 * IPD_ERR_UNAVAILABLE and counts still work, so threads that may still
 * hold it (HTTP handlers on keep-alive connections) are safe until free.
 * Idempotent; NULL is fine. */
void ipd_workq_stop(struct ipd_workq *q);
/* Stop (if not yet) and free.  NULL is fine. */
void ipd_workq_free(struct ipd_workq *q);
/* Queue fn(arg), then done(arg) (done may be NULL).  IPD_OK: queued (fn
 * and done will run exactly once); IPD_ERR_UNAVAILABLE: stopping;
 * IPD_ERR_BUSY: full; or admit's refusal.  Unless IPD_OK, nothing was
 * queued and arg is the caller's. */
enum ipd_err ipd_workq_submit(struct ipd_workq *q, ipd_workq_fn fn,
                              ipd_workq_done_fn done, void *arg,
                              ipd_workq_admit_fn admit);
/* A job's group and its bounds (the job's share of the queue). */
struct ipd_workq_share {
    const char *group;    /* copied; NULL: no group (plain submit) */
    unsigned running_max; /* the group's jobs running at once; 0: none */
    unsigned held_max;    /* its jobs running or waiting; 0: no bound */
};
/* ipd_workq_submit for a job of share->group (share may be NULL): also
 * IPD_ERR_BUSY with *share_full set (share_full may be NULL) when the
 * group already holds held_max jobs.  The bounds are the submitting
 * job's: jobs of one group may carry different ones. */
enum ipd_err ipd_workq_submit_shared(struct ipd_workq *q, ipd_workq_fn fn,
                                     ipd_workq_done_fn done, void *arg,
                                     ipd_workq_admit_fn admit,
                                     const struct ipd_workq_share *share,
                                     bool *share_full);
/* Take a waiting job off the queue: the oldest whose arg match(arg,
 * ctx) accepts.  Its fn and done never run (the caller finishes it);
 * returns its arg, or NULL when no waiting job matched (it may be
 * running already). */
void *ipd_workq_withdraw(struct ipd_workq *q,
                         bool (*match)(void *arg, void *ctx), void *ctx);
/* The jobs of group running and waiting (0 and 0 for NULL). */
void ipd_workq_group_counts(struct ipd_workq *q, const char *group,
                            unsigned *running, unsigned *queued);
/* Jobs running and waiting (0 and 0 for NULL). */
void ipd_workq_counts(struct ipd_workq *q, unsigned *running, unsigned *queued);
/* The threads and the waiting room it was made with (0 for NULL). */
unsigned ipd_workq_threads(const struct ipd_workq *q);
unsigned ipd_workq_queue_max(const struct ipd_workq *q);

#endif
