/*
 * h_admin.c - the /v1/admin endpoints: admin keys only (403 for others).
 */
#include "../scheduler/sweep.h"
#include "../service/util.h"
#include "http.h"

static void admin_cleanup(struct ipd_req *r)
{
    struct ipd_sweep_result res;
    enum ipd_err rc =
        ipd_sweep_expired(r->app->meta, r->app->blobs, ipd_now_ms(), &res);
    if (rc) {
        ipd_reply_err(r, rc, "sweeping expired files");
        return;
    }
    ipd_reply_json(r, MHD_HTTP_OK, ipd_sweep_json(&res));
}

const struct ipd_handler ipd_h_admin_cleanup = {
    .flags = IPD_H_AUTH | IPD_H_ADMIN,
    .finish = admin_cleanup,
};
