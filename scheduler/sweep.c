/*
 * sweep.c - the expiry sweep (see sweep.h).
 */
#include <stdlib.h>
#include <string.h>

#include "../service/common/log.h"
#include "../service/common/util.h"
#include "reconcile.h"
#include "sweep.h"

#define BATCH 500

/* Delete one page of expired records, then their bytes. */
static enum ipd_err sweep_page(struct ipd_meta *m, struct ipd_blobs *b,
                               const struct ipd_file_list *l,
                               struct ipd_sweep_result *out)
{
    for (size_t i = 0; i < l->n; i++) {
        const struct ipd_file_meta *f = &l->items[i];
        /* Metadata first: once it is gone the file is gone for every
         * reader, and whoever deleted it removes the bytes. */
        enum ipd_err rc = ipd_meta_file_delete_by_id(m, f->file_id);
        if (rc == IPD_ERR_NOT_FOUND)
            continue; /* another sweep got it */
        if (rc)
            return rc;
        ipd_blob_delete_later(b, f->file_id);
        out->deleted_files++;
        out->freed_bytes += f->size;
    }
    return IPD_OK;
}

static enum ipd_err sweep_expired(struct ipd_meta *m, struct ipd_blobs *b,
                                  int64_t now_ms,
                                  const struct ipd_sweep_opts *o,
                                  struct ipd_sweep_result *out)
{
    size_t batch = o->batch ? o->batch : BATCH;
    enum ipd_err rc = IPD_OK;
    struct ipd_file_list l = {0};
    size_t seen = 0;

    for (;;) {
        rc = ipd_meta_file_list_expired(m, now_ms, batch, &l);
        if (rc)
            break;
        rc = sweep_page(m, b, &l, out);
        if (rc)
            break;
        seen += l.n;
        bool last = !l.more;
        ipd_file_list_release(&l);
        if (last)
            break;
        /* Between batches: the scheduler may be stopping, or the lease
         * lost to another node (which carries on). */
        rc = ipd_job_continue(o->run);
        if (rc)
            break;
    }
    ipd_file_list_release(&l);
    if (rc)
        ipd_error("expiry sweep stopped after %zu records: %s", seen,
                  ipd_err_name(rc));
    else if (out->deleted_files)
        ipd_info("expiry sweep: deleted %lld files, %lld bytes",
                 (long long)out->deleted_files, (long long)out->freed_bytes);
    return rc;
}

enum ipd_err ipd_sweep_run(struct ipd_meta *m, struct ipd_blobs *b,
                           int64_t now_ms, const struct ipd_sweep_opts *o,
                           struct ipd_sweep_result *out)
{
    static const struct ipd_sweep_opts defaults = {.orphan_min_age_ms = -1};
    int64_t t0 = ipd_mono_ms();
    enum ipd_err rc;

    if (!o)
        o = &defaults;
    memset(out, 0, sizeof(*out));
    rc = sweep_expired(m, b, now_ms, o, out);
    if (!rc && o->reconcile) {
        struct ipd_reconcile_opts ro = {.min_age_ms = o->orphan_min_age_ms,
                                        .batch = o->batch,
                                        .run = o->run};
        struct ipd_reconcile_result rr;
        rc = ipd_reconcile(m, b, now_ms, &ro, &rr);
        out->orphans_removed = ipd_reconcile_removed(&rr);
    }
    out->duration_ms = ipd_mono_ms() - t0;
    return rc;
}

enum ipd_err ipd_sweep_expired(struct ipd_meta *m, struct ipd_blobs *b,
                               int64_t now_ms, struct ipd_sweep_result *out)
{
    return ipd_sweep_run(m, b, now_ms, NULL, out);
}

json_t *ipd_sweep_json(const struct ipd_sweep_result *r)
{
    json_t *j = json_pack("{s:I, s:I, s:I, s:I}", "deleted_files",
                          (json_int_t)r->deleted_files, "freed_bytes",
                          (json_int_t)r->freed_bytes, "orphans_removed",
                          (json_int_t)r->orphans_removed, "duration_ms",
                          (json_int_t)r->duration_ms);
    IPD_ASSERT(j);
    return j;
}

enum ipd_err ipd_sweep_job(void *ctx, struct ipd_job_run *run)
{
    struct ipd_sweep_job *j = ctx;
    struct ipd_sweep_opts o = {.reconcile = j->reconcile,
                               .orphan_min_age_ms = j->orphan_min_age_ms,
                               .run = run};
    struct ipd_sweep_result res;
    return ipd_sweep_run(j->meta, j->blobs, ipd_now_ms(), &o, &res);
}
