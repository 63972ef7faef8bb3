/*
 * h_health.c - /healthz, /readyz and the OpenAPI document.
 */
#include <stdio.h>
#include <string.h>

#include "../service/exec/executor.h"
#include "../venv/venv.h"
#include "http.h"

extern const char ipd_openapi_json[];
extern const unsigned long ipd_openapi_json_len;

static void healthz(struct ipd_req *r)
{
    ipd_reply_json(r, MHD_HTTP_OK, json_pack("{s:s}", "status", "ok"));
}

const struct ipd_handler ipd_h_healthz = {.finish = healthz};

/* Executions are ready when the pool runs and the last end-to-end check
 * (an execution through the real staging and binds, at start and then
 * every ready-check-interval) passed; why[] says what is wrong. */
static bool exec_ready(const struct ipd_app *app, char *why, size_t len)
{
    if (!app->exec || !app->executor) {
        snprintf(why, len, "no sandbox");
        return false;
    }
    return ipd_executor_ready(app->executor, why, len);
}

/* Enough free space on the data dir's disk (--min-free-space); puts the
 * delete reserve back when there is room again.  space[] says how much. */
static bool disk_ready(struct ipd_app *app, char *space, size_t len)
{
    int64_t avail = 0, total = 0, min = app->cfg->min_free_space;
    if (!app->space)
        return true;
    ipd_space_refill(app->space);
    if (ipd_space_stat(app->space, &avail, &total)) {
        snprintf(space, len, " disk space (cannot stat the data dir)");
        return false;
    }
    if (avail >= min)
        return true;
    snprintf(space, len, " disk space (%lld MiB free, below %lld MiB)",
             (long long)(avail >> 20), (long long)(min >> 20));
    return false;
}

static void readyz(struct ipd_req *r)
{
    char why[256] = "", space[128] = "";
    enum ipd_err meta = ipd_meta_ping(r->app->meta);
    enum ipd_err blobs = ipd_blobs_ping(r->app->blobs);
    bool exec = exec_ready(r->app, why, sizeof(why));
    bool venv = r->app->venv && !ipd_venv_ping(r->app->venv);
    bool disk = disk_ready(r->app, space, sizeof(space));
    json_t *checks = json_pack("{s:s, s:s, s:s, s:s, s:s}", "metadata",
                               meta ? ipd_err_name(meta) : "ok", "blobs",
                               blobs ? ipd_err_name(blobs) : "ok", "executions",
                               exec ? "ok" : "unavailable", "venv",
                               venv ? "ok" : "unavailable", "disk",
                               disk ? "ok" : "low_space");
    if (!meta && !blobs && exec && venv && disk) {
        /* Which mode serves executions: warm, mixed, starting, cold. */
        ipd_reply_json(r, MHD_HTTP_OK,
                       json_pack("{s:s, s:o, s:s}", "status", "ready", "checks",
                                 checks, "execution_mode",
                                 r->app->executor
                                     ? ipd_executor_mode(r->app->executor)
                                     : "cold"));
        return;
    }
    json_decref(checks);
    ipd_reply_code(r, IPD_HE_UNAVAILABLE, "not ready:%s%s%s%s%s%s%s",
                   meta ? " metadata store" : "", blobs ? " blob store" : "",
                   exec ? "" : " executions (", exec ? "" : why,
                   exec ? "" : ")", venv ? "" : " venv", space);
}

const struct ipd_handler ipd_h_readyz = {.finish = readyz};

static void openapi(struct ipd_req *r)
{
    struct MHD_Response *resp = MHD_create_response_from_buffer(
        ipd_openapi_json_len, (void *)(uintptr_t)ipd_openapi_json,
        MHD_RESPMEM_PERSISTENT);
    IPD_ASSERT(resp);
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE,
                            "application/json");
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL,
                            "public, max-age=300");
    ipd_reply_response(r, MHD_HTTP_OK, resp, ipd_openapi_json_len);
}

const struct ipd_handler ipd_h_openapi = {.finish = openapi};
