/*
 * h_admin.c - the admin endpoints: POST /v1/admin/cleanup,
 * GET /v1/admin/status and GET /metrics.  Admin keys only (403 for
 * others).
 */
#include <pthread.h>
#include <stdlib.h>

#include "../scheduler/scheduler.h"
#include "../scheduler/sweep.h"
#include "../service/common/metrics.h"
#include "../service/common/util.h"
#include "../service/exec/executor.h"
#include "../venv/venv.h"
#include "../service/common/workq.h"
#include "http.h"

void ipd_app_note_sweep(struct ipd_app *app, const struct ipd_sweep_result *res,
                        enum ipd_err rc, int64_t at_ms)
{
    char at[IPD_TIME_STR];
    /* A sweep that stopped (lost lease, shutdown, reconcile refused) did
     * delete what it counted: keep those with the error. */
    json_t *j = ipd_sweep_json(res);
    if (rc)
        json_object_set_new(j, "error", json_string(ipd_err_name(rc)));
    ipd_time_format(at_ms, at);
    json_object_set_new(j, "at", json_string(at));
    ipd_metrics_sweep_observe(app->metrics, rc == IPD_OK, res->deleted_files,
                              res->freed_bytes);
    pthread_mutex_lock(&app->status_lock);
    json_decref(app->last_cleanup);
    app->last_cleanup = j;
    pthread_mutex_unlock(&app->status_lock);
}

static void admin_cleanup(struct ipd_req *r)
{
    struct ipd_sweep_result res;
    int64_t now = ipd_now_ms();
    /* Expiry, then the orphan reconcile (orphans_removed).  No lease: each
     * delete has exactly one winner, so concurrent sweeps are safe. */
    struct ipd_sweep_opts o = {
        .reconcile = true, .orphan_min_age_ms = r->app->cfg->orphan_min_age_ms};
    enum ipd_err rc = ipd_sweep_run(r->app->meta, r->app->blobs, now, &o, &res);
    ipd_app_note_sweep(r->app, &res, rc, now);
    if (rc) {
        ipd_reply_failure(r, rc, NULL, "sweeping expired files");
        return;
    }
    ipd_reply_json(r, MHD_HTTP_OK, ipd_sweep_json(&res));
}

const struct ipd_handler ipd_h_admin_cleanup = {
    .flags = IPD_H_AUTH | IPD_H_ADMIN,
    .finish = admin_cleanup,
};

/* The data dir's filesystem: free and total bytes, the readiness
 * threshold and the delete reserve (storage/space.h).  null fields when
 * it cannot be asked. */
static json_t *disk_json(struct ipd_app *app)
{
    int64_t avail = 0, total = 0;
    bool ok = app->space && !ipd_space_stat(app->space, &avail, &total);
    json_t *d = json_object();
    json_object_set_new(d, "path", json_string(app->cfg->data_dir));
    json_object_set_new(d, "free_bytes",
                        ok ? json_integer(avail) : json_null());
    json_object_set_new(d, "total_bytes",
                        ok ? json_integer(total) : json_null());
    json_object_set_new(d, "min_free_bytes",
                        json_integer(app->cfg->min_free_space));
    json_object_set_new(d, "low_space",
                        json_boolean(ok && avail < app->cfg->min_free_space));
    json_object_set_new(
        d, "reserve_bytes",
        json_integer(app->space ? ipd_space_reserve_size(app->space) : 0));
    json_object_set_new(
        d, "reserve_in_place",
        json_boolean(app->space && ipd_space_reserved(app->space)));
    return d;
}

#define STATUS_TENANTS_MAX 100 /* tenants listed, most bytes first */

/* "tenants": the tenants with the most stored bytes, each with its usage
 * and the tenant quota; "tenants_truncated" when more have files.  null
 * (and "metadata" degraded, once) when the store cannot say. */
static void tenants_status(struct ipd_app *app, int64_t now, json_t *st,
                           json_t *degraded, bool meta_down)
{
    const struct ipd_config *cfg = app->cfg;
    struct ipd_tenant_usage *t = ipd_xcalloc(STATUS_TENANTS_MAX, sizeof(*t));
    size_t n = 0;
    bool more = false;
    enum ipd_err rc =
        ipd_meta_tenant_usage(app->meta, now, STATUS_TENANTS_MAX, t, &n, &more);
    json_t *list = rc ? json_null() : json_array();
    if (rc && !meta_down)
        json_array_append_new(degraded, json_string("metadata"));
    for (size_t i = 0; !rc && i < n; i++)
        json_array_append_new(
            list, json_pack("{s:s, s:I, s:I, s:I, s:I}", "tenant", t[i].tenant,
                            "files", (json_int_t)t[i].files, "bytes",
                            (json_int_t)t[i].bytes, "quota_files",
                            (json_int_t)cfg->tenant_quota_files, "quota_bytes",
                            (json_int_t)cfg->tenant_quota_bytes));
    json_object_set_new(st, "tenants", list);
    json_object_set_new(st, "tenants_truncated", json_boolean(more));
    free(t);
}

/*
 * Every field of CONTRACT.md's admin status, the seed's own names
 * included.  total_* count unexpired files of every tenant.  A store that
 * is down makes its fields null (and "degraded" lists it) rather than
 * failing the whole answer: status is what an operator reads when
 * something is wrong.
 */
/* The executor's parts of the status: sessions, execution mode (warm
 * or cold) and the end-to-end check. */
static void executor_status(struct ipd_app *app, json_t *st)
{
    struct ipd_executor *ex = app->executor;

    json_object_set_new(st, "sessions",
                        ex ? ipd_executor_sessions_json(ex) : json_null());
    json_object_set_new(st, "execution_mode",
                        ex ? ipd_executor_warm_json(ex) : json_null());
    json_object_set_new(st, "execution_check",
                        ex ? ipd_executor_check_json(ex) : json_null());
}

static void admin_status(struct ipd_req *r)
{
    struct ipd_app *app = r->app;
    const struct ipd_config *cfg = app->cfg;
    int64_t now = ipd_now_ms(), files = 0, bytes = 0;
    json_t *degraded = json_array();
    enum ipd_err rc = ipd_meta_file_totals(app->meta, now, &files, &bytes);
    if (rc)
        json_array_append_new(degraded, json_string("metadata"));
    if (ipd_blobs_ping(app->blobs))
        json_array_append_new(degraded, json_string("blobs"));

    json_t *venv = app->venv ? ipd_venv_status(app->venv) : NULL;
    json_t *vinfo = json_object_get(venv, "venv");
    json_t *installed = json_object_get(venv, "installed");
    if (!venv)
        json_array_append_new(degraded, json_string("packages"));

    json_t *st = json_object();
    json_object_set_new(st, "version", json_string(IPD_VERSION));
    json_object_set_new(st, "uptime_seconds",
                        json_integer((now - app->started_ms) / 1000));
    json_object_set_new(st, "metadata_backend",
                        json_string(ipd_meta_backend(app->meta)));
    json_object_set_new(st, "blob_backend",
                        json_string(ipd_blobs_backend(app->blobs)));
    json_object_set_new(st, "sandbox",
                        app->sandbox ? json_string(app->sandbox) : json_null());
    json_object_set_new(st, "executions", ipd_exec_pool_stats(app->exec));
    json_object_set_new(st, "disk", disk_json(app));
    executor_status(app, st);
    /* The seed's fields. */
    json_object_set_new(
        st, "venv_exists",
        json_boolean(json_is_true(json_object_get(vinfo, "exists"))));
    json_t *py = json_object_get(vinfo, "python_path");
    json_object_set_new(st, "python_path",
                        py ? json_copy(py) : json_string(cfg->python));
    json_object_set_new(st, "installed_packages",
                        installed ? json_copy(installed) : json_array());
    json_object_set_new(st, "package_count",
                        json_integer((json_int_t)json_array_size(installed)));
    pthread_mutex_lock(&app->status_lock);
    json_object_set_new(st, "last_cleanup",
                        app->last_cleanup ? json_copy(app->last_cleanup)
                                          : json_null());
    pthread_mutex_unlock(&app->status_lock);
    json_object_set_new(st, "total_user_files",
                        rc ? json_null() : json_integer(files));
    json_object_set_new(st, "total_file_size_mb",
                        rc ? json_null()
                           : json_real((double)bytes / (1024.0 * 1024.0)));
    json_object_set_new(st, "file_expiration_hours",
                        cfg->file_ttl_ms == IPD_TIME_NEVER
                            ? json_null()
                            : json_real((double)cfg->file_ttl_ms / 3600000.0));
    json_object_set_new(
        st, "max_file_size_mb",
        json_real((double)cfg->max_file_size / (1024.0 * 1024.0)));
    /* The venv's own details (generation, rebuild times and errors). */
    json_object_set_new(st, "venv", vinfo ? json_copy(vinfo) : json_null());
    unsigned ir = 0, iq = 0, fr = 0, fq = 0, sr = 0, sq = 0;
    ipd_workq_counts(app->pkgs, &ir, &iq);
    ipd_workq_counts(app->bg, &fr, &fq);
    ipd_workq_counts(app->sess_wq, &sr, &sq);
    json_object_set_new(st, "installs",
                        json_pack("{s:I, s:I}", "running", (json_int_t)ir,
                                  "queued", (json_int_t)iq));
    json_object_set_new(st, "url_fetches",
                        json_pack("{s:I, s:I}", "running", (json_int_t)fr,
                                  "queued", (json_int_t)fq));
    json_object_set_new(st, "session_requests",
                        json_pack("{s:I, s:I}", "running", (json_int_t)sr,
                                  "queued", (json_int_t)sq));
    tenants_status(app, now, st, degraded, rc != IPD_OK);
    json_object_set_new(st, "jobs",
                        app->sched ? ipd_scheduler_status_json(app->sched)
                                   : json_null());
    json_object_set_new(st, "degraded", degraded);
    json_decref(venv);
    ipd_reply_json(r, MHD_HTTP_OK, st);
}

const struct ipd_handler ipd_h_admin_status = {
    .flags = IPD_H_AUTH | IPD_H_ADMIN,
    .finish = admin_status,
};

static void metrics(struct ipd_req *r)
{
    struct ipd_buf b;
    ipd_buf_init(&b, 16 * 1024 * 1024);
    enum ipd_err rc = ipd_metrics_render(r->app->metrics, &b);
    if (rc) {
        ipd_buf_release(&b);
        ipd_reply_failure(r, rc, NULL, "rendering the metrics");
        return;
    }
    size_t len = b.len;
    char *text = ipd_buf_detach(&b, NULL);
    struct MHD_Response *resp =
        MHD_create_response_from_buffer(len, text, MHD_RESPMEM_MUST_FREE);
    IPD_ASSERT(resp);
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE,
                            IPD_METRICS_CONTENT_TYPE);
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
    ipd_reply_response(r, MHD_HTTP_OK, resp, len);
}

const struct ipd_handler ipd_h_metrics = {
    .flags = IPD_H_AUTH | IPD_H_ADMIN,
    .finish = metrics,
};
