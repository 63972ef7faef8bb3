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
#include "keys.h"
#include "log.h"
#include "serve.h"
#include "util.h"

enum ipd_err ipd_open_meta(const struct ipd_config *cfg,
                           struct ipd_meta **out)
{
    char path[4096];
    *out = NULL;
    if (mkdir(cfg->data_dir, 0700) && errno != EEXIST) {
        ipd_error("cannot create data dir %s: %s", cfg->data_dir,
                  strerror(errno));
        return IPD_ERR_IO;
    }
    if (cfg->mongo_uri) {
        char *r = ipd_redact_uri(cfg->mongo_uri);
        /* NEEDSWORK: the MongoDB backend lands with its own issue. */
        ipd_error("--mongo-uri %s: this build has no MongoDB backend yet", r);
        free(r);
        return IPD_ERR_INVALID;
    }
    snprintf(path, sizeof(path), "%s/meta.db", cfg->data_dir);
    enum ipd_err rc =
        ipd_meta_sqlite_open(path, (int)cfg->db_busy_timeout_ms, out);
    if (rc)
        ipd_error("cannot open the metadata store %s: %s", path,
                  ipd_err_name(rc));
    return rc;
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
    struct ipd_daemon *d = NULL;
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

    rc = ipd_open_meta(cfg, &app.meta);
    if (rc)
        goto out;
    rc = ipd_blobs_open_local(cfg->data_dir, &app.blobs);
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
    ipd_daemon_shutdown(d, 0);
    ipd_filetype_free(app.ft);
    ipd_blobs_free(app.blobs);
    ipd_meta_free(app.meta);
    return code;
}
