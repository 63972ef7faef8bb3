/*
 * sweep.h - the expiry sweep: delete expired files' metadata, then their
 * bytes, in batches.  Idempotent: a sweep interrupted at any point and run
 * again finishes the job; two sweeps at once delete each file once (the
 * metadata delete decides who does).  Optionally followed by the orphan
 * reconcile (reconcile.h), whose removals are the result's
 * orphans_removed.
 */
#ifndef IPD_SWEEP_H
#define IPD_SWEEP_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "../service/common/ipd.h"
#include "../storage/blob.h"
#include "../storage/meta.h"
#include "scheduler.h"

struct ipd_sweep_result {
    int64_t deleted_files;   /* expired files deleted (by this sweep) */
    int64_t freed_bytes;     /* their sizes added */
    int64_t orphans_removed; /* the reconcile's removals (0 without it):
                              * bytes without records, records without
                              * bytes, abandoned uploads */
    int64_t duration_ms;     /* both steps */
};

struct ipd_sweep_opts {
    bool reconcile;            /* run the orphan reconcile after */
    int64_t orphan_min_age_ms; /* its min_age_ms; < 0: the default (1 h) */
    size_t batch;              /* records per batch; 0: 500 */
    struct ipd_job_run *run;   /* the scheduler's run (checked between
                                * batches: stop, lease) or NULL */
};

/* Sweep everything that expired at or before now_ms (no reconcile).  The
 * same as ipd_sweep_run with default options. */
enum ipd_err ipd_sweep_expired(struct ipd_meta *m, struct ipd_blobs *b,
                               int64_t now_ms, struct ipd_sweep_result *out);

/* The expiry sweep at now_ms, then (o->reconcile) the orphan reconcile at
 * now_ms.  o may be NULL (defaults: no reconcile).  *out holds what was
 * done, also on failure; a failed expiry sweep skips the reconcile. */
enum ipd_err ipd_sweep_run(struct ipd_meta *m, struct ipd_blobs *b,
                           int64_t now_ms, const struct ipd_sweep_opts *o,
                           struct ipd_sweep_result *out);

/* The contract's JSON for a result (new reference):
 * {"deleted_files", "freed_bytes", "orphans_removed", "duration_ms"}. */
json_t *ipd_sweep_json(const struct ipd_sweep_result *r);

/* A scheduler job (scheduler.h): ctx is a struct ipd_sweep_job, filled and
 * kept alive by the caller as long as the scheduler.  Sweeps at
 * ipd_now_ms(). */
struct ipd_sweep_job {
    struct ipd_meta *meta;     /* borrowed */
    struct ipd_blobs *blobs;   /* borrowed */
    bool reconcile;            /* also reconcile on each run */
    int64_t orphan_min_age_ms; /* < 0: the default */
};
enum ipd_err ipd_sweep_job(void *ctx, struct ipd_job_run *run);

#endif
