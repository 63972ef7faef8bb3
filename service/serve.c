/*
 * serve.c - start-up, signal handling and graceful shutdown.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../api/http.h"
#include "../scheduler/sweep.h"
#include "../storage/mongo.h"
#include "executor.h"
#include "keys.h"
#include "log.h"
#include "serve.h"
#include "util.h"

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

int ipd_serve(struct ipd_config *cfg)
{
    struct ipd_app app = {0};
    struct ipd_stores stores = {0};
    struct ipd_daemon *d = NULL;
    struct ipd_executor *executor = NULL;
    sigset_t sigs;
    int sig = 0, code = 1;
    bool created = false;
    enum ipd_err rc;

    app.cfg = cfg;
    app.started_ms = ipd_now_ms();
    ipd_info("interpd %s starting", IPD_VERSION);
    ipd_config_print(cfg, stderr);

    /* Block the stop signals before any thread exists, so every thread
     * inherits the mask and only sigwait below sees them. */
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGINT);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN);

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
    ipd_executor_options_default(&eo);
    eo.python = cfg->python;
    eo.prelude_dir = cfg->prelude_dir;
    eo.sandbox_uid = (uid_t)cfg->sandbox_uid;
    eo.max_generated_files = cfg->max_generated_files;
    eo.inline_image_max = cfg->inline_image_max;
    if (ipd_executor_new_with(cfg, app.meta, app.blobs, app.ft, &eo,
                              &executor)) {
        ipd_error("executions are unavailable: the sandbox could not be "
                  "set up");
    } else {
        long cores = sysconf(_SC_NPROCESSORS_ONLN);
        unsigned slots = cfg->exec_slots ? (unsigned)cfg->exec_slots
                                         : (unsigned)(cores < 1 ? 1 : cores);
        ipd_info("sandbox: %s", ipd_executor_sandbox_status(executor));
        if (ipd_exec_pool_new(executor, slots, (unsigned)cfg->exec_queue,
                              &app.exec))
            ipd_error("executions are unavailable: no worker threads");
        else
            ipd_info("executions: %u slots, queue of %lld", slots,
                     (long long)cfg->exec_queue);
    }
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
    ipd_exec_pool_free(app.exec);
    ipd_executor_free(executor);
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
    rc = ipd_sweep_expired(st.meta, st.blobs, ipd_now_ms(), &res);
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
