/*
 * scheduler.h - periodic jobs inside the daemon (the expiry sweep, the
 * orphan reconcile), each on a thread of its own.
 *
 * Why a thread per job rather than one scheduler thread: a job may run
 * for minutes (a sweep over a big store, a database call waiting out its
 * timeout) and must not hold back the others; with its own thread a job
 * can only delay itself.  Jobs are few (two or three), so the threads cost
 * nothing that matters.  All of them wait on one condition variable with
 * a timeout (CLOCK_MONOTONIC) until their next run is due, a run is asked
 * for, or the scheduler stops: no sleep-polling, and stop wakes them at
 * once.
 *
 * Guarantees:
 *  - a job never overlaps itself: its runs happen one after the other on
 *    its thread (ipd_scheduler_run_now hands the run to that thread, or,
 *    before start, runs it in the caller under the same exclusion);
 *  - a run that returns an error is logged, counted in `failures`, and the
 *    job runs again at its next tick; it never stops the scheduler or the
 *    service;
 *  - the next run is due one interval after the previous one started; a
 *    run that took longer than its interval is followed by one run at once,
 *    never by a burst of missed ones.
 *
 * Leases (IPD_JOB_LEASE): with several processes on one metadata store
 * (nodes on one MongoDB, two daemons on one SQLite file), a job runs only
 * while its process holds the lease named after the job (meta.h): taken
 * before the run (not taken: the run is skipped and counted in `skipped`,
 * not a failure), renewed by ipd_job_continue between batches, released
 * at the end.  A run that lost its lease stops at its next
 * ipd_job_continue.
 *
 * Thread-safety: add jobs before ipd_scheduler_start; everything else may
 * be called from any thread.
 */
#ifndef IPD_SCHEDULER_H
#define IPD_SCHEDULER_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "../service/common/ipd.h"
#include "../storage/meta.h"

#define IPD_JOB_NAME_MAX                                                       \
    48 /* job names (and their lease names), NUL included */

enum ipd_job_flags {
    IPD_JOB_LEASE = 1 << 0,        /* run only while holding the job's lease */
    IPD_JOB_RUN_AT_START = 1 << 1, /* first run at start, not one interval in */
};

struct ipd_scheduler;
/* What a running job gets: pass it to ipd_job_continue between batches.
 * Valid during the call only. */
struct ipd_job_run;

/*
 * A new, stopped scheduler (free with ipd_scheduler_free).  leases (may be
 * NULL: then no job may ask for IPD_JOB_LEASE) is borrowed and must
 * outlive the scheduler; lease_ttl_ms (> 0) is how long a lease lasts
 * without renewal: after a crash, the other nodes wait that long.
 * owner_hint (may be NULL) starts the lease owner token (e.g. the node's
 * host name); a random part makes it unique per scheduler.
 */
struct ipd_scheduler *ipd_scheduler_new(struct ipd_meta *leases,
                                        int64_t lease_ttl_ms,
                                        const char *owner_hint);
/* Stop (if running) and free; NULL is fine. */
void ipd_scheduler_free(struct ipd_scheduler *s);

/*
 * Add a job, before ipd_scheduler_start.  name: 1 to IPD_JOB_NAME_MAX - 1
 * characters (also the lease name); interval_ms > 0; flags from enum
 * ipd_job_flags.  IPD_ERR_INVALID for a bad name, interval or flag (a
 * lease without a store), IPD_ERR_CONFLICT for a name in use or a
 * scheduler already started.
 *
 * fn does one run and returns IPD_OK or the error that stopped it.  ctx
 * is passed to it (borrowed; it must outlive the scheduler).  A job that
 * runs long calls ipd_job_continue(run) between batches and stops
 * (returning what that returned) when it is not IPD_OK.
 */
enum ipd_err ipd_scheduler_add(struct ipd_scheduler *s, const char *name,
                               int64_t interval_ms,
                               enum ipd_err (*fn)(void *ctx,
                                                  struct ipd_job_run *run),
                               void *ctx, unsigned flags);

/* Start every job's thread.  IPD_ERR_CONFLICT when already started (or
 * stopped: a scheduler starts once), IPD_ERR_INTERNAL when a thread can't
 * be created (the others are stopped again). */
enum ipd_err ipd_scheduler_start(struct ipd_scheduler *s);
/* Stop: wake every job thread and join it.  A job between runs stops at
 * once; a running job is told through ipd_job_continue (which then answers
 * IPD_ERR_UNAVAILABLE) and is waited for.  Idempotent. */
void ipd_scheduler_stop(struct ipd_scheduler *s);

/*
 * Run the job name now and wait for that run: on its thread when the
 * scheduler runs (after the current run, if one is under way), else in
 * the caller.  Returns the run's result; IPD_ERR_NOT_FOUND for an unknown
 * job, IPD_ERR_UNAVAILABLE when the scheduler stops meanwhile.  *ran
 * (may be NULL) is false when the run was skipped because another process
 * holds the job's lease.
 */
enum ipd_err ipd_scheduler_run_now(struct ipd_scheduler *s, const char *name,
                                   bool *ran);

/*
 * Between batches of a run: IPD_OK to go on; IPD_ERR_UNAVAILABLE when the
 * scheduler is stopping; for a leased job, renews the lease when a third
 * of its TTL has passed since the last renewal, and answers
 * IPD_ERR_CONFLICT when it was lost (another process took it over) or the
 * renewal's error.  run may be NULL (a job called outside the scheduler):
 * always IPD_OK.
 */
enum ipd_err ipd_job_continue(struct ipd_job_run *run);

/* One job's state, for admin status.  Times are wall clock, 0 = never. */
struct ipd_job_status {
    char name[IPD_JOB_NAME_MAX];
    int64_t interval_ms;
    bool leased;           /* IPD_JOB_LEASE */
    bool running;          /* a run is under way now */
    int64_t last_start_ms; /* the last run (skipped ones excluded) */
    int64_t last_end_ms;
    enum ipd_err last_result; /* of the last finished run */
    int64_t runs;             /* finished runs (skipped ones excluded) */
    int64_t failures;         /* runs that returned an error */
    int64_t skipped;          /* runs skipped: another process held the lease */
    int64_t next_run_ms;      /* when the next run is due (0: not started) */
};

/* The state of job name into *out; IPD_ERR_NOT_FOUND for an unknown job. */
enum ipd_err ipd_scheduler_status(struct ipd_scheduler *s, const char *name,
                                  struct ipd_job_status *out);
/*
 * Every job's state as a new JSON object keyed by job name:
 *   {"sweep": {"interval_ms", "leased", "running", "last_start",
 *              "last_end" (RFC 3339 or null), "last_result" ("ok",
 *              "unavailable", ... or null), "runs", "failures", "skipped",
 *              "next_run" (RFC 3339 or null)}, ...}
 */
json_t *ipd_scheduler_status_json(struct ipd_scheduler *s);

#endif
