/*
 * reconcile.h - the orphan reconcile: make the blob store and the metadata
 * agree again after crashes and failed deletes.
 *
 *  1. bytes without a record, committed more than min_age_ms ago, are
 *     removed (an expiry sweep or a delete killed between the record and
 *     the bytes; a failed upload whose undo never ran);
 *  2. records without bytes, created more than min_age_ms ago, are
 *     removed and logged (bytes lost behind our back); each is checked
 *     twice (record re-read, bytes looked up again) before it goes;
 *  3. uploads abandoned more than min_age_ms ago (local temporary files,
 *     GridFS chunks without a files document) are removed;
 *  4. empty blob directories are removed (local disk).
 *
 * Races.  An upload commits its bytes first and writes its record after:
 * for that moment the bytes have no record, which is what the age
 * threshold is for (an hour by default; an upload's commit-to-insert gap is
 * bounded by the database timeouts, seconds).  Deletes go record first,
 * bytes after, so a record without bytes is normally a delete under way:
 * the re-read finds the record gone and nothing is done.
 *
 * Batches.  Blobs are walked with ipd_blob_iter (a batch in memory at a
 * time) and each is checked with an indexed lookup of its id
 * (ipd_meta_file_get_by_id); records are walked with ipd_meta_file_scan
 * pages in id order, each checked with ipd_blob_stat.  Memory stays one
 * batch whatever the store's size.
 *
 * Safety valve.  When more than half of the eligible records checked so
 * far (once there are at least 16) have no bytes, the blob store looks
 * wrong (a disk not mounted, another bucket): step 2 stops before
 * deleting that batch, logs an error, and the run answers
 * IPD_ERR_INTERNAL.  The walk is in id order, so the check is
 * deterministic for a given store.  Records of another blob backend (their
 * `blob` field names another store) are never touched.
 *
 * Several nodes may reconcile at once: each delete has one winner and only
 * winners count.
 */
#ifndef IPD_RECONCILE_H
#define IPD_RECONCILE_H

#include <stdint.h>

#include "../service/common/ipd.h"
#include "../storage/blob.h"
#include "../storage/meta.h"
#include "scheduler.h"

#define IPD_RECONCILE_MIN_AGE_MS (60 * 60 * 1000) /* the default: one hour */

struct ipd_reconcile_opts {
    int64_t min_age_ms;      /* leave anything younger alone; < 0: default */
    size_t batch;            /* blobs or records per batch; 0: 500 */
    struct ipd_job_run *run; /* the scheduler's run (checked between
                              * batches: stop, lease) or NULL */
};

struct ipd_reconcile_result {
    int64_t orphan_blobs;   /* bytes without a record, removed */
    int64_t orphan_records; /* records without bytes, removed */
    int64_t incomplete;     /* abandoned uploads removed */
    int64_t empty_dirs;     /* empty blob directories removed */
    int64_t blobs_checked;
    int64_t records_checked;
    int64_t duration_ms;
};

/* Run the four steps at now_ms (wall clock) on m and b.  *out holds what
 * was done, also when a step failed (then the first error is returned and
 * the later steps are not run).  o may be NULL (defaults). */
enum ipd_err ipd_reconcile(struct ipd_meta *m, struct ipd_blobs *b,
                           int64_t now_ms, const struct ipd_reconcile_opts *o,
                           struct ipd_reconcile_result *out);

/* The three removal counts added: what the sweep JSON calls
 * orphans_removed. */
int64_t ipd_reconcile_removed(const struct ipd_reconcile_result *r);

/* A scheduler job (scheduler.h): ctx is a struct ipd_reconcile_job, which
 * the caller fills and keeps alive as long as the scheduler. */
struct ipd_reconcile_job {
    struct ipd_meta *meta;   /* borrowed */
    struct ipd_blobs *blobs; /* borrowed */
    int64_t min_age_ms;      /* < 0: IPD_RECONCILE_MIN_AGE_MS */
};
enum ipd_err ipd_reconcile_job(void *ctx, struct ipd_job_run *run);

#endif
