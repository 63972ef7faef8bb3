/*
 * sweep.h - the expiry sweep: delete expired files' metadata, then their
 * bytes, in batches.  Idempotent: a sweep interrupted at any point and run
 * again finishes the job; two sweeps at once delete each file once (the
 * metadata delete decides who does).
 */
#ifndef IPD_SWEEP_H
#define IPD_SWEEP_H

#include <jansson.h>
#include <stdint.h>

#include "../service/ipd.h"
#include "../storage/blob.h"
#include "../storage/meta.h"

struct ipd_sweep_result {
    int64_t deleted_files;
    int64_t freed_bytes;
    int64_t orphans_removed; /* NEEDSWORK: the orphan reconcile job */
    int64_t duration_ms;
};

/* Sweep everything that expired at or before now_ms. */
enum ipd_err ipd_sweep_expired(struct ipd_meta *m, struct ipd_blobs *b,
                               int64_t now_ms, struct ipd_sweep_result *out);

/* The contract's JSON for a result (new reference). */
json_t *ipd_sweep_json(const struct ipd_sweep_result *r);

#endif
