/*
 * serve.c - start-up, signal handling and graceful shutdown.
 */
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../api/http.h"
#include "../api/mcp.h"
#include "../scheduler/reconcile.h"
#include "../scheduler/scheduler.h"
#include "../scheduler/sweep.h"
#include "../storage/mongo.h"
#include "../venv/allowlist.h"
#include "../venv/venv.h"
#include "exec/executor.h"
#include "sandbox/sandbox.h"
#include "exec/pool.h"
#include "keys.h"
#include "tokens.h"
#include "../storage/space.h"
#include "exec/callbacks.h"
#include "fetch/fetch.h"
#include "common/log.h"
#include "common/metrics.h"
#include "serve.h"
#include "common/util.h"
#include "common/workq.h"

static enum ipd_err open_meta(const struct ipd_config *cfg,
                              struct ipd_stores *s)
{
    char path[4096];
    enum ipd_err rc;
    if (cfg->mongo_uri) {
        rc = s->mongo ? IPD_OK
                      : ipd_mongo_new_with(cfg->mongo_uri,
                                           cfg->mongo_connect_timeout_ms,
                                           cfg->mongo_timeout_ms, &s->mongo);
        if (!rc)
            rc = ipd_meta_mongo_open(s->mongo, &s->meta);
        if (rc) {
            char *r = ipd_redact_uri(cfg->mongo_uri);
            ipd_error("cannot use MongoDB at %s: %s", r, ipd_err_name(rc));
            free(r);
        }
        return rc;
    }
    snprintf(path, sizeof(path), "%s/meta.db", cfg->data_dir);
    rc = ipd_meta_sqlite_open(path, (int)cfg->db_busy_timeout_ms, &s->meta);
    if (rc)
        ipd_error("cannot open the metadata store %s: %s", path,
                  ipd_err_name(rc));
    return rc;
}

/* With a data dir of its own (SQLite, local blobs) a store is its
 * meta.db; on MongoDB, the database's api_keys collection. */
static enum ipd_err find_store(const struct ipd_config *cfg, bool with_blobs,
                               struct ipd_stores *s, struct ipd_buf *why)
{
    char path[4096];
    struct stat st;
    bool exists = false;
    bool local = with_blobs && !strcmp(cfg->blob_store, "local");

    if (!cfg->mongo_uri || local) {
        if (stat(cfg->data_dir, &st) || !S_ISDIR(st.st_mode)) {
            ipd_buf_addf(why, "no data dir at %s", cfg->data_dir);
            return IPD_ERR_NOT_FOUND;
        }
    }
    if (!cfg->mongo_uri) {
        snprintf(path, sizeof(path), "%s/meta.db", cfg->data_dir);
        if (stat(path, &st) || !S_ISREG(st.st_mode) || st.st_size == 0) {
            ipd_buf_addf(why, "no store in %s (no %s)", cfg->data_dir, path);
            return IPD_ERR_NOT_FOUND;
        }
        return IPD_OK;
    }
    enum ipd_err rc =
        ipd_mongo_new_with(cfg->mongo_uri, cfg->mongo_connect_timeout_ms,
                           cfg->mongo_timeout_ms, &s->mongo);
    if (!rc)
        rc = ipd_meta_mongo_exists(s->mongo, &exists);
    if (rc) {
        ipd_buf_addf(why, "cannot ask MongoDB: %s", ipd_err_name(rc));
        return rc;
    }
    if (!exists) {
        char *r = ipd_redact_uri(cfg->mongo_uri);
        ipd_buf_addf(why,
                     "no store in MongoDB database \"%s\" at %s (it "
                     "has no api_keys collection)",
                     ipd_mongo_database(s->mongo), r);
        free(r);
        return IPD_ERR_NOT_FOUND;
    }
    return IPD_OK;
}

static enum ipd_err stores_open(const struct ipd_config *cfg, bool with_blobs,
                                struct ipd_stores *s)
{
    enum ipd_err rc = open_meta(cfg, s);
    if (rc || !with_blobs)
        return rc;
    if (!strcmp(cfg->blob_store, "gridfs"))
        rc = ipd_blobs_open_gridfs(s->mongo, &s->blobs);
    else
        rc = ipd_blobs_open_local(cfg->data_dir, &s->blobs);
    return rc;
}

enum ipd_err ipd_stores_open(const struct ipd_config *cfg, bool with_blobs,
                             struct ipd_stores *s)
{
    memset(s, 0, sizeof(*s));
    if (mkdir(cfg->data_dir, 0700) && errno != EEXIST) {
        ipd_error("cannot create data dir %s: %s", cfg->data_dir,
                  strerror(errno));
        return IPD_ERR_IO;
    }
    return stores_open(cfg, with_blobs, s);
}

enum ipd_err ipd_stores_open_existing(const struct ipd_config *cfg,
                                      bool with_blobs, struct ipd_stores *s,
                                      struct ipd_buf *why)
{
    memset(s, 0, sizeof(*s));
    enum ipd_err rc = find_store(cfg, with_blobs, s, why);
    if (rc)
        return rc;
    rc = stores_open(cfg, with_blobs, s);
    if (rc)
        ipd_buf_addf(why, "cannot open the store: %s", ipd_err_name(rc));
    return rc;
}

/* The exit code and message of a command that found no store. */
int ipd_cli_no_store(const char *cmd, enum ipd_err rc,
                     const struct ipd_buf *why)
{
    fprintf(stderr, "interpd %s: %s\n", cmd, why->buf);
    if (rc != IPD_ERR_NOT_FOUND)
        return 1;
    fprintf(stderr,
            "interpd %s: only `interpd serve` creates a store; pass "
            "the --data-dir (or --mongo-uri) the server uses\n",
            cmd);
    return 2;
}

void ipd_stores_close(struct ipd_stores *s)
{
    ipd_blobs_free(s->blobs);
    ipd_meta_free(s->meta);
    ipd_mongo_free(s->mongo);
    memset(s, 0, sizeof(*s));
}

void ipd_serve_executor_options(const struct ipd_config *cfg,
                                struct ipd_executor_options *o)
{
    ipd_executor_options_default(o);
    o->data_dir = cfg->data_dir;
    o->max_file_size = cfg->max_file_size;
    o->file_ttl_ms = cfg->file_ttl_ms;
    o->quota.max_files = cfg->quota_files;
    o->quota.max_bytes = cfg->quota_bytes;
    memcpy(o->policies, cfg->policies,
           cfg->n_policies * sizeof(cfg->policies[0]));
    o->tenant_quota.max_files = cfg->tenant_quota_files;
    o->tenant_quota.max_bytes = cfg->tenant_quota_bytes;
    o->n_policies = cfg->n_policies;
    o->python = cfg->python;
    o->prelude_dir = cfg->prelude_dir;
    o->sandbox_uid = (uid_t)cfg->sandbox_uid;
    o->venv_stage_max = cfg->venv_stage_max;
    o->warm = !strcmp(cfg->exec_mode, "warm");
    o->warm_modules = cfg->warm_modules;
    o->warm_recycle_runs = cfg->warm_recycle_runs;
    o->warm_recycle_ms = cfg->warm_recycle_ms;
    o->warm_memory_budget = cfg->warm_memory_budget;
    o->warm_adapt_runs = (unsigned)cfg->warm_adapt_runs;
    o->max_sessions = (unsigned)cfg->max_sessions;
    o->sessions_per_user = (unsigned)cfg->sessions_per_user;
    o->sessions_memory = cfg->sessions_memory;
    o->session_idle_ms = cfg->session_idle_ms;
    o->session_max_life_ms = cfg->session_max_life_ms;
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    o->slots = cfg->exec_slots ? (unsigned)cfg->exec_slots
                               : (unsigned)(cores < 1 ? 1 : cores);
    o->max_generated_files = cfg->max_generated_files;
    o->inline_image_max = cfg->inline_image_max;
}

/* Tell whoever started us which port we got (tests use port 0). */
static void notify_ready(const struct ipd_config *cfg, uint16_t port)
{
    if (cfg->ready_fd < 0)
        return;
    char line[16];
    int n = snprintf(line, sizeof(line), "%u\n", port);
    if (write((int)cfg->ready_fd, line, (size_t)n) != n)
        ipd_warn("could not write the port to fd %lld: %s",
                 (long long)cfg->ready_fd, strerror(errno));
    close((int)cfg->ready_fd);
}

/* ---- scheduled jobs ------------------------------------------------------ */

struct jobs {
    struct ipd_app *app;
    int64_t orphan_min_age_ms;
    struct ipd_reconcile_job reconcile;
};

/* The expiry sweep, noted for the admin status and metrics. */
static enum ipd_err job_sweep(void *ctx, struct ipd_job_run *run)
{
    struct jobs *j = ctx;
    struct ipd_sweep_result res;
    struct ipd_sweep_opts o = {.orphan_min_age_ms = j->orphan_min_age_ms,
                               .run = run};
    int64_t now = ipd_now_ms();
    enum ipd_err rc = ipd_sweep_run(j->app->meta, j->app->blobs, now, &o, &res);
    ipd_app_note_sweep(j->app, &res, rc, now);
    if (!rc && res.deleted_files)
        ipd_info("sweep: deleted %lld expired files (%lld bytes)",
                 (long long)res.deleted_files, (long long)res.freed_bytes);
    return rc;
}

/* The venv age check: rebuild a venv older than venv-max-age, remove
 * generations no execution holds; with no venv yet, list the base
 * interpreter's packages for the status.  Per host (the venv is), no
 * lease; first run at start. */
static enum ipd_err job_venv(void *ctx, struct ipd_job_run *run)
{
    struct jobs *j = ctx;
    (void)run;
    return j->app->venv ? ipd_venv_maintain(j->app->venv) : IPD_OK;
}

/* The end-to-end execution check behind /readyz (executor.h). */
static enum ipd_err job_ready_check(void *ctx, struct ipd_job_run *run)
{
    struct jobs *j = ctx;
    (void)run;
    return ipd_executor_check(j->app->executor);
}

/* Idle and too old sessions end (executor.h). */
static enum ipd_err job_sessions(void *ctx, struct ipd_job_run *run)
{
    struct jobs *j = ctx;
    (void)run;
    ipd_executor_sessions_reap(j->app->executor);
    return IPD_OK;
}

/* which: 0 the warm set's modules, 1 its bytes. */
static enum ipd_err gauge_warm_set(void *ctx, double *value, int which)
{
    struct ipd_app *app = ctx;
    int64_t v[2] = {0, 0};
    if (!app->executor)
        return IPD_ERR_UNAVAILABLE;
    ipd_executor_warm_set_gauges(app->executor, &v[0], &v[1]);
    *value = (double)v[which];
    return IPD_OK;
}

static enum ipd_err gauge_warm_set_modules(void *ctx, double *value)
{
    return gauge_warm_set(ctx, value, 0);
}

static enum ipd_err gauge_warm_set_bytes(void *ctx, double *value)
{
    return gauge_warm_set(ctx, value, 1);
}

/* Gauges read at scrape time. */
static enum ipd_err gauge_exec(void *ctx, double *value, bool queued)
{
    struct ipd_app *app = ctx;
    unsigned running = 0, waiting = 0;
    if (!app->exec)
        return IPD_ERR_UNAVAILABLE;
    ipd_exec_pool_counts(app->exec, &running, &waiting);
    *value = queued ? waiting : running;
    return IPD_OK;
}

/* which: 0 live sessions, 1 their memory, 2 what they are charged. */
static enum ipd_err gauge_sessions(void *ctx, double *value, int which)
{
    struct ipd_app *app = ctx;
    int64_t v[3] = {0, 0, 0};
    if (!app->executor)
        return IPD_ERR_UNAVAILABLE;
    ipd_executor_sessions_gauges(app->executor, &v[0], &v[1], &v[2]);
    *value = (double)v[which];
    return IPD_OK;
}

static enum ipd_err gauge_sessions_live(void *ctx, double *value)
{
    return gauge_sessions(ctx, value, 0);
}

static enum ipd_err gauge_sessions_memory(void *ctx, double *value)
{
    return gauge_sessions(ctx, value, 1);
}

static enum ipd_err gauge_sessions_charged(void *ctx, double *value)
{
    return gauge_sessions(ctx, value, 2);
}

static enum ipd_err gauge_queued(void *ctx, double *value)
{
    return gauge_exec(ctx, value, true);
}

static enum ipd_err gauge_running(void *ctx, double *value)
{
    return gauge_exec(ctx, value, false);
}

static enum ipd_err gauge_totals(void *ctx, double *value, bool bytes)
{
    struct ipd_app *app = ctx;
    int64_t n = 0, b = 0;
    enum ipd_err rc = ipd_meta_file_totals(app->meta, ipd_now_ms(), &n, &b);
    *value = (double)(bytes ? b : n);
    return rc;
}

static enum ipd_err gauge_files(void *ctx, double *value)
{
    return gauge_totals(ctx, value, false);
}

static enum ipd_err gauge_bytes(void *ctx, double *value)
{
    return gauge_totals(ctx, value, true);
}

/* --venv-dir, or beside the data dir: DATA-DIR-venv.  Its generations
 * are read by the sandbox's uids, so they are kept out of the data dir,
 * which stays the service's alone (0700, files 0600).  A venv an older
 * version made in DATA-DIR/venv is moved there (rename: the venv's own
 * paths are /opt/venv inside the sandbox, wherever it is on the host). */
static void default_venv_dir(const struct ipd_config *cfg, struct ipd_buf *root)
{
    struct ipd_buf old;
    struct stat st;
    size_t len = strlen(cfg->data_dir);

    if (cfg->venv_dir) {
        ipd_buf_adds(root, cfg->venv_dir);
        return;
    }
    while (len > 1 && cfg->data_dir[len - 1] == '/')
        len--;
    ipd_buf_addf(root, "%.*s-venv", (int)len, cfg->data_dir);
    ipd_buf_init(&old, IPD_BUF_UNLIMITED);
    ipd_buf_addf(&old, "%.*s/venv", (int)len, cfg->data_dir);
    if (lstat(old.buf, &st) == 0 && S_ISDIR(st.st_mode) &&
        lstat(root->buf, &st) != 0 && errno == ENOENT) {
        if (rename(old.buf, root->buf) == 0)
            ipd_info("venv: moved %s to %s (the venv is kept out of the "
                     "data dir)",
                     old.buf, root->buf);
        else
            ipd_warn("venv: cannot move %s to %s: %s", old.buf, root->buf,
                     strerror(errno));
    }
    ipd_buf_release(&old);
}

/* A bind of a venv generation shows its path relative to the root of its
 * filesystem in /proc/self/mountinfo: runs get a copy in a private tmpfs
 * instead (venv-stage-max, exec/venv_stage.c), or, when the venv dir is
 * the root of a filesystem of its own, the generation itself, which then
 * shows only /gen-... (SANDBOX.md, "What a run sees of the host").  Says
 * which, once at start; a generation that cannot be copied is logged
 * when it is first used. */
static void venv_dir_exposure(const char *dir, int64_t stage_max)
{
    if (ipd_sandbox_is_fs_root(dir))
        ipd_info("venv: %s is the root of its own filesystem: runs see "
                 "/gen-... for it, no host path",
                 dir);
    else if (stage_max > 0)
        ipd_info("venv: %s is not the root of a filesystem of its own: "
                 "runs get each generation copied into a private tmpfs of "
                 "at most %lld bytes (venv-stage-max)",
                 dir, (long long)stage_max);
    else
        ipd_warn("venv: %s is not the root of a filesystem of its own and "
                 "venv-stage-max is 0: runs on a generation see its host "
                 "path in /proc/self/mountinfo (docs/SANDBOX.md)",
                 dir);
}

/* The venv (packages) on top of the executor's sandbox.  Without it,
 * executions still run on the base interpreter. */
static enum ipd_err open_venv(const struct ipd_config *cfg,
                              struct ipd_executor *ex,
                              struct ipd_allowlist **allow,
                              struct ipd_venv **out)
{
    struct ipd_buf err, root;
    struct ipd_venv_runner runner;
    struct ipd_venv_options o;
    enum ipd_err rc;
    ipd_buf_init(&err, 4096);
    ipd_buf_init(&root, IPD_BUF_UNLIMITED);
    rc = ipd_allowlist_load(cfg->allowlist, cfg->allowed_deps,
                            cfg->import_names, allow, &err);
    if (rc) {
        ipd_error("allowlist: %s", err.buf);
        goto out;
    }
    default_venv_dir(cfg, &root);
    memset(&o, 0, sizeof(o));
    o.root = root.buf;
    o.base_python = cfg->venv_python ? cfg->venv_python : cfg->python;
    o.system_site_packages = cfg->venv_system_site != 0;
    o.index_url = cfg->pip_index_url;
    o.find_links = cfg->pip_find_links;
    o.no_index = cfg->pip_no_index != 0;
    o.pip_retries = (int)cfg->pip_retries;
    o.auto_retry_after_ms = cfg->auto_install_retry_ms;
    o.pip_timeout_ms = cfg->pip_timeout_ms;
    o.allow_sdist = cfg->pip_allow_sdist != 0;
    o.max_age_ms = cfg->venv_max_age_ms;
    o.link_clone = !strcmp(cfg->venv_clone, "link");
    o.tools_dir = cfg->prelude_dir;
    o.owner_uid = geteuid() == 0 ? (uid_t)cfg->sandbox_uid : (uid_t)-1;
    o.owner_gid = geteuid() == 0 ? (gid_t)cfg->sandbox_uid : (gid_t)-1;
    o.allow = *allow;
    ipd_executor_venv_runner(ex, &runner);
    rc = ipd_venv_new(&o, &runner, out, &err);
    if (rc)
        ipd_error("%s", err.buf);
    else
        ipd_info("venv: %s, %zu allowlisted distributions, index %s", root.buf,
                 ipd_allowlist_count(*allow),
                 cfg->pip_no_index    ? "none (--pip-no-index)"
                 : cfg->pip_index_url ? cfg->pip_index_url
                                      : "pip's default");
    if (!rc)
        venv_dir_exposure(root.buf, cfg->venv_stage_max);
out:
    ipd_buf_release(&err);
    ipd_buf_release(&root);
    return rc;
}

/* What `interpd serve` runs (opened stores, outbound, executions);
 * closed in reverse (serve_close). */
struct server {
    const struct ipd_config *cfg;
    struct ipd_app app;
    struct ipd_fetch_allowlist *fetch_allow;
    struct ipd_fetch_opts fetch_opts; /* app.fetch points here */
    struct ipd_callbacks *callbacks;
    struct ipd_stores stores;
    struct ipd_executor *executor; /* NULL: executions unavailable */
    struct ipd_allowlist *allow;
    struct jobs jobs;
    struct ipd_daemon *d;
};

/* Outbound HTTP (URL ingest, callbacks) under the SSRF guard, the
 * threads for blocking request work and the callback delivery.  Only a
 * bad fetch-allow is fatal. */
static enum ipd_err open_outbound(struct server *sv)
{
    const struct ipd_config *cfg = sv->cfg;
    struct ipd_buf ferr;
    ipd_buf_init(&ferr, 1024);
    enum ipd_err rc = ipd_fetch_global_init();
    if (!rc)
        rc = ipd_fetch_allowlist_parse(cfg->fetch_allow, &sv->fetch_allow,
                                       &ferr);
    if (rc) {
        ipd_error("fetch-allow: %s", ferr.len ? ferr.buf : ipd_err_name(rc));
        goto out;
    }
    ipd_fetch_opts_init(&sv->fetch_opts);
    sv->fetch_opts.connect_timeout_ms = cfg->fetch_connect_timeout_ms;
    sv->fetch_opts.total_timeout_ms = cfg->fetch_timeout_ms;
    sv->fetch_opts.max_redirects = (int)cfg->fetch_max_redirects;
    sv->fetch_opts.max_bytes = cfg->max_file_size;
    sv->fetch_opts.allow = sv->fetch_allow;
    sv->app.fetch = &sv->fetch_opts;
    sv->app.mcp = ipd_mcp_new();
    if (ipd_workq_new(IPD_MCP_WORKERS, IPD_MCP_QUEUE_MAX, &sv->app.mcp_wq))
        return IPD_ERR_INTERNAL;
    if (ipd_workq_new(4, 64, &sv->app.bg))
        ipd_error("URL ingest is unavailable: no background threads");
    if (ipd_callbacks_new(&sv->fetch_opts, sv->app.meta,
                          cfg->callback_retry_delay_ms,
                          cfg->callback_secret_grace_ms, &sv->callbacks))
        ipd_error("execution callbacks are unavailable: no delivery thread");
out:
    ipd_buf_release(&ferr);
    return rc;
}

/* The stores, the file type detector and, on an empty key store, the
 * first admin key. */
/* Scoped tokens: the node's secret (service/tokens.h). */
static enum ipd_err open_tokens(struct server *sv)
{
    const struct ipd_config *cfg = sv->cfg;
    unsigned char secret[IPD_TOKEN_SECRET_LEN];
    char why[512];
    enum ipd_err rc = ipd_tokens_secret_load(
        cfg->data_dir, cfg->token_secret_file, secret, why, sizeof why);
    if (rc) {
        ipd_error("scoped tokens: %s", why);
        return rc;
    }
    sv->app.tokens =
        ipd_tokens_new(secret, cfg->key_cache_ttl_ms,
                       cfg->callback_secret_grace_ms, cfg->token_max_ttl_ms);
    memset(secret, 0, sizeof secret);
    return IPD_OK;
}

static enum ipd_err open_stores(struct server *sv)
{
    const struct ipd_config *cfg = sv->cfg;
    bool created = false;
    enum ipd_err rc = ipd_stores_open(cfg, true, &sv->stores);
    sv->app.meta = sv->stores.meta;
    sv->app.blobs = sv->stores.blobs;
    if (rc)
        return rc;
    rc = ipd_filetype_new(&sv->app.ft);
    if (rc) {
        ipd_error("cannot load the libmagic database");
        return rc;
    }
    rc = ipd_space_open(cfg->data_dir, cfg->disk_reserve, &sv->app.space);
    if (rc)
        return rc;
    sv->app.key_cache = ipd_key_cache_new(cfg->key_cache_ttl_ms);
    rc = open_tokens(sv);
    if (rc)
        return rc;
    rc = ipd_keys_bootstrap_admin(sv->app.meta, cfg->data_dir, &created);
    if (rc) {
        ipd_error("cannot create the first admin key: %s", ipd_err_name(rc));
        return rc;
    }
    if (created)
        ipd_info("created the first admin key; it is in %s/admin.key "
                 "(mode 0600)",
                 cfg->data_dir);
    return IPD_OK;
}

/* The venv and its installer thread on top of the executor; without them
 * executions run on the base interpreter. */
static void open_packages(struct server *sv)
{
    const struct ipd_config *cfg = sv->cfg;
    if (open_venv(cfg, sv->executor, &sv->allow, &sv->app.venv))
        ipd_error("package installs are unavailable (see above); "
                  "executions use %s as it is",
                  cfg->python);
    else if (ipd_workq_new(1, IPD_INSTALL_QUEUE_MAX, &sv->app.pkgs))
        ipd_error("package installs are unavailable: no installer "
                  "thread");
    ipd_executor_set_venv(sv->executor, sv->app.venv, cfg->auto_install != 0);
    if (sv->app.venv)
        ipd_venv_set_metrics(sv->app.venv, sv->app.metrics);
    if (ipd_executor_start_warm(sv->executor))
        ipd_error("warm executions are unavailable; every run is cold");
}

/* Before listening: one execution end to end, through the staging, the
 * binds and the sandbox a request uses.  A service whose executions
 * cannot work refuses to start rather than answer each one 500. */
static enum ipd_err start_check(struct server *sv)
{
    char why[256];
    if (ipd_executor_check(sv->executor)) {
        ipd_executor_ready(sv->executor, why, sizeof(why));
        ipd_error("executions do not work here: %s; not starting (fix the "
                  "cause named above, e.g. the data dir %s, --python or "
                  "--prelude-dir, and start again)",
                  why, sv->cfg->data_dir);
        return IPD_ERR_UNAVAILABLE;
    }
    json_t *j = ipd_executor_check_json(sv->executor);
    int64_t every = sv->cfg->ready_check_interval_ms;
    ipd_info("executions: the start-up check ran an execution end to end "
             "in %lld ms (then every %lld s)",
             (long long)json_integer_value(json_object_get(j, "duration_ms")),
             every == IPD_TIME_NEVER ? -1LL : (long long)(every / 1000));
    json_decref(j);
    return IPD_OK;
}

/* The executor, the packages and the execution pool.  Executions need
 * the sandbox; without it the service still serves files, answers
 * executions 503 and is not ready.  With it, they must work: the
 * start-up check's failure is fatal. */
static enum ipd_err open_executions(struct server *sv)
{
    const struct ipd_config *cfg = sv->cfg;
    struct ipd_executor_options eo;
    ipd_serve_executor_options(cfg, &eo);
    /* Networked runs get out under URL ingest's guard (open_outbound). */
    eo.egress_allow = sv->fetch_allow;
    eo.egress_connect_timeout_ms = cfg->fetch_connect_timeout_ms;
    if (ipd_executor_new(sv->app.meta, sv->app.blobs, sv->app.ft, &eo,
                         &sv->executor)) {
        ipd_error("executions are unavailable: the sandbox could not be "
                  "set up");
        return IPD_OK;
    }
    sv->app.executor = sv->executor;
    ipd_executor_set_space(sv->executor, sv->app.space);
    if (ipd_workq_new(IPD_SESSION_WORKERS, IPD_SESSION_QUEUE_MAX,
                      &sv->app.sess_wq))
        ipd_error("sessions are unavailable: no session workers");
    unsigned slots = eo.slots;
    sv->app.sandbox = ipd_executor_sandbox_status(sv->executor);
    ipd_info("sandbox: %s", sv->app.sandbox);
    open_packages(sv);
    struct ipd_exec_pool_options po = {
        .slots = slots,
        .queue = (unsigned)cfg->exec_queue,
        .metrics = sv->app.metrics,
        .result_ttl_ms = cfg->result_ttl_ms,
        .callbacks = sv->callbacks,
        .data_dir = cfg->data_dir,
        .tenant_results_max_bytes = cfg->async_results_max_bytes,
        .space = sv->app.space,
    };
    if (ipd_exec_pool_new(sv->executor, &po, &sv->app.exec)) {
        ipd_error("executions are unavailable: no worker threads");
        return IPD_OK;
    }
    ipd_info("executions: %u slots, queue of %lld", slots,
             (long long)cfg->exec_queue);
    return start_check(sv);
}

/* Scheduled jobs: the sweep and the reconcile under a lease (one node at
 * a time on a shared MongoDB), the venv check per host. */
static void start_jobs(struct server *sv)
{
    const struct ipd_config *cfg = sv->cfg;
    struct ipd_app *app = &sv->app;
    sv->jobs.app = app;
    sv->jobs.orphan_min_age_ms = cfg->orphan_min_age_ms;
    sv->jobs.reconcile = (struct ipd_reconcile_job){app->meta, app->blobs,
                                                    cfg->orphan_min_age_ms};
    app->sched = ipd_scheduler_new(app->meta, cfg->lease_ttl_ms, NULL);
    if (cfg->sweep_interval_ms != IPD_TIME_NEVER)
        ipd_scheduler_add(app->sched, "sweep", cfg->sweep_interval_ms,
                          job_sweep, &sv->jobs,
                          IPD_JOB_LEASE | IPD_JOB_RUN_AT_START);
    if (cfg->reconcile_interval_ms != IPD_TIME_NEVER)
        ipd_scheduler_add(app->sched, "reconcile", cfg->reconcile_interval_ms,
                          ipd_reconcile_job, &sv->jobs.reconcile,
                          IPD_JOB_LEASE);
    if (app->executor && cfg->ready_check_interval_ms != IPD_TIME_NEVER)
        ipd_scheduler_add(app->sched, "ready-check",
                          cfg->ready_check_interval_ms, job_ready_check,
                          &sv->jobs, 0);
    if (app->executor)
        ipd_scheduler_add(app->sched, "sessions", cfg->session_reap_ms,
                          job_sessions, &sv->jobs, 0);
    if (app->venv && cfg->venv_check_interval_ms != IPD_TIME_NEVER)
        ipd_scheduler_add(app->sched, "venv", cfg->venv_check_interval_ms,
                          job_venv, &sv->jobs, IPD_JOB_RUN_AT_START);
    if (ipd_scheduler_start(app->sched))
        ipd_error("scheduler: cannot start its threads; expired files are "
                  "only deleted by `interpd cleanup`");
}

/* Gauges read at scrape time. */
static void set_gauges(struct ipd_app *app)
{
    ipd_metrics_set_gauge_fn(app->metrics, IPD_METRICS_EXEC_QUEUE_DEPTH,
                             gauge_queued, app);
    ipd_metrics_set_gauge_fn(app->metrics, IPD_METRICS_EXEC_RUNNING,
                             gauge_running, app);
    ipd_metrics_set_gauge_fn(app->metrics, IPD_METRICS_SESSIONS_LIVE,
                             gauge_sessions_live, app);
    ipd_metrics_set_gauge_fn(app->metrics, IPD_METRICS_SESSIONS_MEMORY,
                             gauge_sessions_memory, app);
    ipd_metrics_set_gauge_fn(app->metrics, IPD_METRICS_SESSIONS_CHARGED,
                             gauge_sessions_charged, app);
    ipd_metrics_set_gauge_fn(app->metrics, IPD_METRICS_WARM_SET_MODULES,
                             gauge_warm_set_modules, app);
    ipd_metrics_set_gauge_fn(app->metrics, IPD_METRICS_WARM_SET_BYTES,
                             gauge_warm_set_bytes, app);
    ipd_metrics_set_gauge_fn(app->metrics, IPD_METRICS_FILES_STORED,
                             gauge_files, app);
    ipd_metrics_set_gauge_fn(app->metrics, IPD_METRICS_BYTES_STORED,
                             gauge_bytes, app);
}

/* Listen until SIGTERM or SIGINT, then finish the requests in flight
 * within the shutdown timeout (the daemon stops the pools first). */
static enum ipd_err serve_until_signal(struct server *sv, const sigset_t *sigs)
{
    const struct ipd_config *cfg = sv->cfg;
    int sig = 0;
    enum ipd_err rc = ipd_daemon_start(&sv->app, &sv->d);
    if (rc)
        return rc;
    ipd_info("listening on %s (port %u), metadata=%s blobs=%s", cfg->listen,
             ipd_daemon_port(sv->d), ipd_meta_backend(sv->app.meta),
             ipd_blobs_backend(sv->app.blobs));
    notify_ready(cfg, ipd_daemon_port(sv->d));

    while (sigwait(sigs, &sig) == EINTR)
        ;
    ipd_info("received %s; finishing in-flight requests (at most %lld ms)",
             sig == SIGTERM ? "SIGTERM" : "SIGINT",
             (long long)cfg->shutdown_timeout_ms);
    unsigned left = ipd_daemon_shutdown(sv->d, cfg->shutdown_timeout_ms);
    sv->d = NULL;
    ipd_info("stopped%s", left ? " with requests cut off" : " cleanly");
    return IPD_OK;
}

/* The shutdown order: libmicrohttpd stops after the pools stopped (the
 * daemon stops them while it still runs), the pools are freed after it;
 * the scheduled jobs borrow the stores and the venv, so they stop before
 * either goes. */
static void serve_close(struct server *sv)
{
    ipd_daemon_shutdown(sv->d, 0); /* also stops the execution workers */
    sv->d = NULL;
    ipd_scheduler_free(sv->app.sched);
    sv->app.sched = NULL;
    ipd_exec_pool_free(sv->app.exec);
    ipd_workq_free(sv->app.bg);
    ipd_workq_free(sv->app.mcp_wq);
    ipd_mcp_free(sv->app.mcp);
    ipd_workq_free(sv->app.sess_wq);
    ipd_callbacks_free(sv->callbacks);
    ipd_fetch_allowlist_free(sv->fetch_allow);
    ipd_workq_free(sv->app.pkgs);
    ipd_venv_free(sv->app.venv);
    ipd_allowlist_free(sv->allow);
    ipd_executor_free(sv->executor);
    ipd_metrics_free(sv->app.metrics);
    json_decref(sv->app.last_cleanup);
    pthread_mutex_destroy(&sv->app.status_lock);
    ipd_filetype_free(sv->app.ft);
    ipd_key_cache_free(sv->app.key_cache);
    ipd_tokens_free(sv->app.tokens);
    ipd_space_free(sv->app.space);
    ipd_stores_close(&sv->stores);
}

/* The effective options, one "config NAME = VALUE (SOURCE)" log line
 * each, like every other line of the log. */
static void log_config(const struct ipd_config *cfg)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f) {
        ipd_warn("cannot list the configuration: %s", strerror(errno));
        return;
    }
    ipd_config_print(cfg, f);
    fclose(f);
    ipd_log_lines(IPD_LOG_INFO, "", text, len, SIZE_MAX);
    free(text);
}

int ipd_serve(struct ipd_config *cfg)
{
    struct server sv;
    sigset_t sigs;
    int code = 1;

    memset(&sv, 0, sizeof(sv));
    sv.cfg = cfg;
    sv.app.cfg = cfg;
    sv.app.started_ms = ipd_now_ms();
    pthread_mutex_init(&sv.app.status_lock, NULL);
    if (ipd_metrics_new(IPD_VERSION, &sv.app.metrics))
        ipd_warn("metrics are unavailable");
    ipd_info("interpd %s starting", IPD_VERSION);
    log_config(cfg);

    /* Block the stop signals before any thread exists, so every thread
     * inherits the mask and only sigwait sees them. */
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGINT);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN);

    /* The stores first: the callback sender reads the tenants' secrets
     * from the key store. */
    if (open_stores(&sv) || open_outbound(&sv) || open_executions(&sv))
        goto out;
    set_gauges(&sv.app);
    start_jobs(&sv);
    if (serve_until_signal(&sv, &sigs))
        goto out;
    code = 0;
out:
    serve_close(&sv);
    return code;
}

int ipd_cli_cleanup(struct ipd_config *cfg)
{
    struct ipd_stores st;
    struct ipd_sweep_result res;
    int code = 1;
    struct ipd_buf why;
    ipd_buf_init(&why, 1024);
    enum ipd_err rc = ipd_stores_open_existing(cfg, true, &st, &why);
    if (rc) {
        code = ipd_cli_no_store("cleanup", rc, &why);
        goto out;
    }
    struct ipd_sweep_opts o = {.reconcile = true,
                               .orphan_min_age_ms = cfg->orphan_min_age_ms};
    rc = ipd_sweep_run(st.meta, st.blobs, ipd_now_ms(), &o, &res);
    if (rc) {
        fprintf(stderr, "interpd cleanup: the sweep failed: %s\n",
                ipd_err_name(rc));
        goto out;
    }
    json_t *j = ipd_sweep_json(&res);
    char *text = json_dumps(j, JSON_COMPACT);
    json_decref(j);
    if (text)
        puts(text);
    free(text);
    code = 0;
out:
    ipd_buf_release(&why);
    ipd_stores_close(&st);
    return code;
}
