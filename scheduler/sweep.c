/*
 * sweep.c - the expiry sweep (see sweep.h).
 */
#include <stdlib.h>

#include "../service/log.h"
#include "../service/util.h"
#include "sweep.h"

#define BATCH 500

enum ipd_err ipd_sweep_expired(struct ipd_meta *m, struct ipd_blobs *b,
                               int64_t now_ms, struct ipd_sweep_result *out)
{
    int64_t t0 = ipd_mono_ms();
    enum ipd_err rc = IPD_OK;
    struct ipd_file_list l = {0};
    size_t seen = 0;

    out->deleted_files = out->freed_bytes = out->orphans_removed = 0;
    for (;;) {
        rc = ipd_meta_file_list_expired(m, now_ms, BATCH, &l);
        if (rc)
            break;
        for (size_t i = 0; i < l.n; i++) {
            const struct ipd_file_meta *f = &l.items[i];
            /* Metadata first: once it is gone the file is gone for every
             * reader, and whoever deleted it removes the bytes. */
            enum ipd_err drc = ipd_meta_file_delete_by_id(m, f->file_id);
            if (drc == IPD_ERR_NOT_FOUND)
                continue; /* another sweep got it */
            if (drc) {
                rc = drc;
                goto out;
            }
            ipd_blob_delete_later(b, f->file_id);
            out->deleted_files++;
            out->freed_bytes += f->size;
        }
        seen += l.n;
        bool last = l.n < BATCH;
        ipd_file_list_release(&l);
        if (last)
            break;
    }
out:
    ipd_file_list_release(&l);
    out->duration_ms = ipd_mono_ms() - t0;
    if (rc)
        ipd_error("expiry sweep stopped after %zu records: %s", seen,
                  ipd_err_name(rc));
    else if (out->deleted_files)
        ipd_info("expiry sweep: deleted %lld files, %lld bytes, in %lld ms",
                 (long long)out->deleted_files, (long long)out->freed_bytes,
                 (long long)out->duration_ms);
    return rc;
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
