/*
 * reconcile.c - the orphan reconcile (see reconcile.h).
 */
#include <stdlib.h>
#include <string.h>

#include "../service/common/log.h"
#include "../service/common/util.h"
#include "reconcile.h"

#define DEFAULT_BATCH 500
#define GUARD_MIN 16 /* eligible records before the safety valve applies */

/* One reconcile run's settings and tallies. */
struct rec {
    struct ipd_meta *m;
    struct ipd_blobs *b;
    int64_t cut; /* older than this (wall clock ms) is eligible */
    size_t batch;
    struct ipd_job_run *run; /* or NULL */
    const char *backend;     /* ipd_blobs_backend(b): records' blob field */
    struct ipd_reconcile_result *out;
};

/* Bytes without a record: remove them if old enough. */
static enum ipd_err check_blob(struct rec *r, const struct ipd_blob_info *bi)
{
    struct ipd_file_meta f;
    enum ipd_err rc;

    r->out->blobs_checked++;
    /* Young bytes may be an upload that has committed them and is
     * writing its record right now. */
    if (bi->mtime_ms > r->cut)
        return IPD_OK;
    rc = ipd_meta_file_get_by_id(r->m, bi->file_id, &f);
    if (rc != IPD_ERR_NOT_FOUND)
        return rc; /* IPD_OK: a file like any other */
    rc = ipd_blob_delete(r->b, bi->file_id);
    if (rc == IPD_ERR_NOT_FOUND)
        return IPD_OK; /* another sweep or node removed it first */
    if (rc)
        return rc;
    r->out->orphan_blobs++;
    ipd_info("reconcile: removed blob %s (%lld bytes): it has no record",
             bi->file_id, (long long)bi->size);
    return IPD_OK;
}

static enum ipd_err orphan_blobs(struct rec *r)
{
    struct ipd_blob_iter *it = NULL;
    struct ipd_blob_info *batch = ipd_xcalloc(r->batch, sizeof(*batch));
    size_t n = 0;
    enum ipd_err rc;

    rc = ipd_blob_iter_new(r->b, &it);
    if (rc)
        goto out;
    for (;;) {
        rc = ipd_blob_iter_next(it, batch, r->batch, &n);
        if (rc || !n)
            break;
        for (size_t i = 0; i < n && !rc; i++)
            rc = check_blob(r, &batch[i]);
        if (!rc)
            rc = ipd_job_continue(r->run);
        if (rc)
            break;
    }
out:
    ipd_blob_iter_free(it);
    free(batch);
    return rc;
}

/* A record whose bytes looked missing: check both again, then remove it.
 * A delete under way removes the record first, so the re-read finds it
 * gone; bytes that appeared meanwhile keep it. */
static enum ipd_err drop_record(struct rec *r, const char *file_id)
{
    struct ipd_file_meta f;
    struct ipd_blob_info bi;
    char created[IPD_TIME_STR];
    enum ipd_err rc;

    rc = ipd_meta_file_get_by_id(r->m, file_id, &f);
    if (rc)
        return rc == IPD_ERR_NOT_FOUND ? IPD_OK : rc;
    if (strcmp(f.blob, r->backend) || f.created_at_ms > r->cut)
        return IPD_OK; /* not the record we saw */
    rc = ipd_blob_stat(r->b, file_id, &bi);
    if (rc != IPD_ERR_NOT_FOUND)
        return rc;
    rc = ipd_meta_file_delete_by_id(r->m, file_id);
    if (rc)
        return rc == IPD_ERR_NOT_FOUND ? IPD_OK : rc;
    r->out->orphan_records++;
    ipd_time_format(f.created_at_ms, created);
    ipd_warn("reconcile: removed the record of file %s (tenant %s, user %s, "
             "%lld bytes, created %s): its bytes are missing from the %s "
             "store",
             f.file_id, f.tenant, f.user_id, (long long)f.size, created,
             r->backend);
    return IPD_OK;
}

/* Check one page of records; the ids whose bytes are missing go to
 * cand[*nc].  Counts in *eligible and *missing. */
static enum ipd_err check_records(struct rec *r, const struct ipd_file_list *l,
                                  char (*cand)[IPD_ID_MAX], size_t *nc,
                                  int64_t *eligible, int64_t *missing)
{
    struct ipd_blob_info bi;
    enum ipd_err rc;

    *nc = 0;
    for (size_t i = 0; i < l->n; i++) {
        const struct ipd_file_meta *f = &l->items[i];
        r->out->records_checked++;
        /* Another store's bytes are not ours to judge; a young record's
         * are checked next time. */
        if (strcmp(f->blob, r->backend) || f->created_at_ms > r->cut)
            continue;
        (*eligible)++;
        rc = ipd_blob_stat(r->b, f->file_id, &bi);
        if (rc == IPD_OK)
            continue;
        if (rc != IPD_ERR_NOT_FOUND)
            return rc; /* could not tell: never "missing" */
        (*missing)++;
        memcpy(cand[(*nc)++], f->file_id, sizeof(f->file_id));
    }
    return IPD_OK;
}

static enum ipd_err orphan_records(struct rec *r)
{
    char after[IPD_ID_MAX] = "";
    char(*cand)[IPD_ID_MAX] = ipd_xcalloc(r->batch, IPD_ID_MAX);
    struct ipd_file_list l = {0};
    int64_t eligible = 0, missing = 0;
    size_t nc = 0;
    enum ipd_err rc;

    for (;;) {
        rc = ipd_meta_file_scan(r->m, after, r->batch, &l);
        if (rc)
            break;
        if (l.n)
            memcpy(after, l.items[l.n - 1].file_id, sizeof(after));
        rc = check_records(r, &l, cand, &nc, &eligible, &missing);
        if (rc)
            break;
        if (nc && eligible >= GUARD_MIN && missing * 2 > eligible) {
            ipd_error("reconcile: %lld of %lld records checked have no bytes "
                      "in the %s store; it looks wrong (not mounted? another "
                      "database?), so no record is removed",
                      (long long)missing, (long long)eligible, r->backend);
            rc = IPD_ERR_INTERNAL;
            break;
        }
        for (size_t i = 0; i < nc && !rc; i++)
            rc = drop_record(r, cand[i]);
        bool more = l.more;
        ipd_file_list_release(&l);
        if (!rc && more)
            rc = ipd_job_continue(r->run);
        if (rc || !more)
            break;
    }
    ipd_file_list_release(&l);
    free(cand);
    return rc;
}

int64_t ipd_reconcile_removed(const struct ipd_reconcile_result *r)
{
    return r->orphan_blobs + r->orphan_records + r->incomplete;
}

enum ipd_err ipd_reconcile(struct ipd_meta *m, struct ipd_blobs *b,
                           int64_t now_ms, const struct ipd_reconcile_opts *o,
                           struct ipd_reconcile_result *out)
{
    int64_t t0 = ipd_mono_ms();
    int64_t min_age =
        o && o->min_age_ms >= 0 ? o->min_age_ms : IPD_RECONCILE_MIN_AGE_MS;
    struct rec r = {
        .m = m,
        .b = b,
        .cut = now_ms - min_age,
        .batch = o && o->batch ? o->batch : DEFAULT_BATCH,
        .run = o ? o->run : NULL,
        .backend = ipd_blobs_backend(b),
        .out = out,
    };
    const char *step = "blobs";
    int64_t n = 0;
    enum ipd_err rc;

    memset(out, 0, sizeof(*out));
    rc = orphan_blobs(&r);
    if (!rc) {
        step = "records";
        rc = orphan_records(&r);
    }
    if (!rc) {
        step = "abandoned uploads";
        rc = ipd_blobs_reap_incomplete(b, r.cut, &n);
        out->incomplete = n;
    }
    if (!rc) {
        step = "empty directories";
        rc = ipd_blobs_prune_dirs(b, &n);
        out->empty_dirs = n;
    }
    out->duration_ms = ipd_mono_ms() - t0;
    if (rc)
        ipd_warn("reconcile stopped at the %s step: %s", step,
                 ipd_err_name(rc));
    if (ipd_reconcile_removed(out) || out->empty_dirs)
        ipd_info("reconcile: %lld blobs and %lld records checked; removed "
                 "%lld orphan blobs, %lld records without bytes, %lld "
                 "abandoned uploads, %lld empty directories in %lld ms",
                 (long long)out->blobs_checked, (long long)out->records_checked,
                 (long long)out->orphan_blobs, (long long)out->orphan_records,
                 (long long)out->incomplete, (long long)out->empty_dirs,
                 (long long)out->duration_ms);
    return rc;
}

enum ipd_err ipd_reconcile_job(void *ctx, struct ipd_job_run *run)
{
    struct ipd_reconcile_job *j = ctx;
    struct ipd_reconcile_opts o = {.min_age_ms = j->min_age_ms, .run = run};
    struct ipd_reconcile_result res;
    return ipd_reconcile(j->meta, j->blobs, ipd_now_ms(), &o, &res);
}
