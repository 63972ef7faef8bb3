/*
 * serve.c - start-up, signal handling and graceful shutdown.
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../api/http.h"
#include "../scheduler/reconcile.h"
#include "../scheduler/scheduler.h"
#include "../scheduler/sweep.h"
#include "../storage/mongo.h"
#include "../venv/allowlist.h"
#include "../venv/venv.h"
#include "exec/executor.h"
#include "exec/pool.h"
#include "keys.h"
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
        rc = ipd_mongo_new(cfg->mongo_uri, cfg->mongo_connect_timeout_ms,
                           &s->mongo);
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

enum ipd_err ipd_stores_open(const struct ipd_config *cfg, bool with_blobs,
                             struct ipd_stores *s)
{
    enum ipd_err rc;
    memset(s, 0, sizeof(*s));
    if (mkdir(cfg->data_dir, 0700) && errno != EEXIST) {
        ipd_error("cannot create data dir %s: %s", cfg->data_dir,
                  strerror(errno));
        return IPD_ERR_IO;
    }
    rc = open_meta(cfg, s);
    if (rc || !with_blobs)
        return rc;
    if (!strcmp(cfg->blob_store, "gridfs"))
        rc = ipd_blobs_open_gridfs(s->mongo, &s->blobs);
    else
        rc = ipd_blobs_open_local(cfg->data_dir, &s->blobs);
    return rc;
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
    _Static_assert(IPD_EXEC_POLICIES_MAX >= IPD_POLICIES_MAX &&
                       IPD_EXEC_POLICY_NAME_MAX >= IPD_POLICY_NAME_MAX,
                   "the executor holds every configured policy");
    ipd_executor_options_default(o);
    o->data_dir = cfg->data_dir;
    o->max_file_size = cfg->max_file_size;
    o->file_ttl_ms = cfg->file_ttl_ms;
    o->quota.max_files = cfg->quota_files;
    o->quota.max_bytes = cfg->quota_bytes;
    for (size_t i = 0; i < cfg->n_policies; i++) {
        const struct ipd_policy *p = &cfg->policies[i];
        struct ipd_exec_policy *e = &o->policies[i];
        memcpy(e->name, p->name, sizeof(p->name));
        e->timeout_ms = p->timeout_ms;
        e->max_timeout_ms = p->max_timeout_ms;
        e->memory_bytes = p->memory_bytes;
        e->max_processes = p->max_processes;
        e->output_bytes = p->output_bytes;
        e->tmp_bytes = p->tmp_bytes;
        e->output_dir_bytes = p->output_dir_bytes;
        e->network = p->network;
    }
    o->n_policies = cfg->n_policies;
    o->python = cfg->python;
    o->prelude_dir = cfg->prelude_dir;
    o->sandbox_uid = (uid_t)cfg->sandbox_uid;
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
    if (cfg->venv_dir)
        ipd_buf_adds(&root, cfg->venv_dir);
    else
        ipd_buf_addf(&root, "%s/venv", cfg->data_dir);
    memset(&o, 0, sizeof(o));
    o.root = root.buf;
    o.base_python = cfg->venv_python ? cfg->venv_python : cfg->python;
    o.system_site_packages = cfg->venv_system_site != 0;
    o.index_url = cfg->pip_index_url;
    o.find_links = cfg->pip_find_links;
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
        ipd_info("venv: %s, %zu allowlisted distributions, index %s",
                 root.buf, ipd_allowlist_count(*allow),
                 cfg->pip_index_url ? cfg->pip_index_url : "pip's default");
out:
    ipd_buf_release(&err);
    ipd_buf_release(&root);
    return rc;
}

int ipd_serve(struct ipd_config *cfg)
{
    struct ipd_app app = {0};
    struct ipd_stores stores = {0};
    struct ipd_daemon *d = NULL;
    struct ipd_executor *executor = NULL;
    struct ipd_allowlist *allow = NULL;
    struct ipd_scheduler *sched = NULL;
    struct jobs jobs;
    struct ipd_fetch_allowlist *fetch_allow = NULL;
    struct ipd_fetch_opts fetch_opts;
    struct ipd_callbacks *callbacks = NULL;
    sigset_t sigs;
    int sig = 0, code = 1;
    bool created = false;
    enum ipd_err rc;

    app.cfg = cfg;
    app.started_ms = ipd_now_ms();
    memset(&jobs, 0, sizeof(jobs));
    pthread_mutex_init(&app.status_lock, NULL);
    if (ipd_metrics_new(IPD_VERSION, &app.metrics))
        ipd_warn("metrics are unavailable");
    ipd_info("interpd %s starting", IPD_VERSION);
    ipd_config_print(cfg, stderr);

    /* Block the stop signals before any thread exists, so every thread
     * inherits the mask and only sigwait below sees them. */
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGINT);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN);

    /* Outbound HTTP (URL ingest, callbacks) under the SSRF guard. */
    struct ipd_buf ferr;
    ipd_buf_init(&ferr, 1024);
    rc = ipd_fetch_global_init();
    if (!rc)
        rc = ipd_fetch_allowlist_parse(cfg->fetch_allow, &fetch_allow, &ferr);
    if (rc) {
        ipd_error("fetch-allow: %s", ferr.len ? ferr.buf : ipd_err_name(rc));
        ipd_buf_release(&ferr);
        goto out;
    }
    ipd_buf_release(&ferr);
    ipd_fetch_opts_init(&fetch_opts);
    fetch_opts.connect_timeout_ms = cfg->fetch_connect_timeout_ms;
    fetch_opts.total_timeout_ms = cfg->fetch_timeout_ms;
    fetch_opts.max_redirects = (int)cfg->fetch_max_redirects;
    fetch_opts.max_bytes = cfg->max_file_size;
    fetch_opts.allow = fetch_allow;
    app.fetch = &fetch_opts;
    if (ipd_workq_new(4, 64, &app.bg))
        ipd_error("URL ingest is unavailable: no background threads");
    if (ipd_callbacks_new(&fetch_opts, cfg->callback_retry_delay_ms,
                          &callbacks))
        ipd_error("execution callbacks are unavailable: no delivery thread");

    rc = ipd_stores_open(cfg, true, &stores);
    app.meta = stores.meta;
    app.blobs = stores.blobs;
    if (rc)
        goto out;
    rc = ipd_filetype_new(&app.ft);
    if (rc) {
        ipd_error("cannot load the libmagic database");
        goto out;
    }
    rc = ipd_keys_bootstrap_admin(app.meta, cfg->data_dir, &created);
    if (rc) {
        ipd_error("cannot create the first admin key: %s", ipd_err_name(rc));
        goto out;
    }
    if (created)
        ipd_info("created the first admin key; it is in %s/admin.key "
                 "(mode 0600)", cfg->data_dir);
    /* Executions need the sandbox; without it the service still serves
     * files, answers executions 503 and is not ready. */
    struct ipd_executor_options eo;
    ipd_serve_executor_options(cfg, &eo);
    if (ipd_executor_new(app.meta, app.blobs, app.ft, &eo, &executor)) {
        ipd_error("executions are unavailable: the sandbox could not be "
                  "set up");
    } else {
        long cores = sysconf(_SC_NPROCESSORS_ONLN);
        unsigned slots = cfg->exec_slots ? (unsigned)cfg->exec_slots
                                         : (unsigned)(cores < 1 ? 1 : cores);
        app.sandbox = ipd_executor_sandbox_status(executor);
        ipd_info("sandbox: %s", app.sandbox);
        if (open_venv(cfg, executor, &allow, &app.venv))
            ipd_error("package installs are unavailable (see above); "
                      "executions use %s as it is", cfg->python);
        else if (ipd_workq_new(1, IPD_INSTALL_QUEUE_MAX, &app.pkgs))
            ipd_error("package installs are unavailable: no installer "
                      "thread");
        ipd_executor_set_venv(executor, app.venv, cfg->auto_install != 0);
        if (app.venv)
            ipd_venv_set_metrics(app.venv, app.metrics);
        struct ipd_exec_pool_options po = {
            .slots = slots,
            .queue = (unsigned)cfg->exec_queue,
            .metrics = app.metrics,
            .result_ttl_ms = cfg->result_ttl_ms,
            .callbacks = callbacks,
        };
        if (ipd_exec_pool_new(executor, &po, &app.exec))
            ipd_error("executions are unavailable: no worker threads");
        else
            ipd_info("executions: %u slots, queue of %lld", slots,
                     (long long)cfg->exec_queue);
    }
    ipd_metrics_set_gauge_fn(app.metrics, IPD_METRICS_EXEC_QUEUE_DEPTH,
                             gauge_queued, &app);
    ipd_metrics_set_gauge_fn(app.metrics, IPD_METRICS_EXEC_RUNNING,
                             gauge_running, &app);
    ipd_metrics_set_gauge_fn(app.metrics, IPD_METRICS_FILES_STORED,
                             gauge_files, &app);
    ipd_metrics_set_gauge_fn(app.metrics, IPD_METRICS_BYTES_STORED,
                             gauge_bytes, &app);
    /* Scheduled jobs: the sweep and the reconcile under a lease (one node
     * at a time on a shared MongoDB), the venv check per host. */
    jobs.app = &app;
    jobs.orphan_min_age_ms = cfg->orphan_min_age_ms;
    jobs.reconcile = (struct ipd_reconcile_job){app.meta, app.blobs,
                                                cfg->orphan_min_age_ms};
    sched = ipd_scheduler_new(app.meta, cfg->lease_ttl_ms, NULL);
    app.sched = sched;
    if (cfg->sweep_interval_ms != IPD_TIME_NEVER)
        ipd_scheduler_add(sched, "sweep", cfg->sweep_interval_ms, job_sweep,
                          &jobs, IPD_JOB_LEASE | IPD_JOB_RUN_AT_START);
    if (cfg->reconcile_interval_ms != IPD_TIME_NEVER)
        ipd_scheduler_add(sched, "reconcile", cfg->reconcile_interval_ms,
                          ipd_reconcile_job, &jobs.reconcile, IPD_JOB_LEASE);
    if (app.venv && cfg->venv_check_interval_ms != IPD_TIME_NEVER)
        ipd_scheduler_add(sched, "venv", cfg->venv_check_interval_ms,
                          job_venv, &jobs, IPD_JOB_RUN_AT_START);
    if (ipd_scheduler_start(sched))
        ipd_error("scheduler: cannot start its threads; expired files are "
                  "only deleted by `interpd cleanup`");
    rc = ipd_daemon_start(&app, &d);
    if (rc)
        goto out;
    ipd_info("listening on %s (port %u), metadata=%s blobs=%s",
             cfg->listen, ipd_daemon_port(d), ipd_meta_backend(app.meta),
             ipd_blobs_backend(app.blobs));
    notify_ready(cfg, ipd_daemon_port(d));

    while (sigwait(&sigs, &sig) == EINTR)
        ;
    ipd_info("received %s; finishing in-flight requests (at most %lld ms)",
             sig == SIGTERM ? "SIGTERM" : "SIGINT",
             (long long)cfg->shutdown_timeout_ms);
    unsigned left = ipd_daemon_shutdown(d, cfg->shutdown_timeout_ms);
    d = NULL;
    ipd_info("stopped%s", left ? " with requests cut off" : " cleanly");
    code = 0;
out:
    ipd_daemon_shutdown(d, 0); /* also stops the execution workers */
    /* The jobs borrow the stores and the venv: stop them first. */
    ipd_scheduler_free(sched);
    app.sched = NULL;
    ipd_exec_pool_free(app.exec);
    ipd_workq_free(app.bg);
    ipd_callbacks_free(callbacks);
    ipd_fetch_allowlist_free(fetch_allow);
    ipd_workq_free(app.pkgs);
    ipd_venv_free(app.venv);
    ipd_allowlist_free(allow);
    ipd_executor_free(executor);
    ipd_metrics_free(app.metrics);
    json_decref(app.last_cleanup);
    pthread_mutex_destroy(&app.status_lock);
    ipd_filetype_free(app.ft);
    ipd_stores_close(&stores);
    return code;
}

int ipd_cli_cleanup(struct ipd_config *cfg)
{
    struct ipd_stores st;
    struct ipd_sweep_result res;
    int code = 1;
    enum ipd_err rc = ipd_stores_open(cfg, true, &st);
    if (rc) {
        fprintf(stderr, "interpd cleanup: cannot open the stores: %s\n",
                ipd_err_name(rc));
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
    ipd_stores_close(&st);
    return code;
}
