/*
 * serve.h - the service's lifecycle and the command-line commands.
 */
#ifndef IPD_SERVE_H
#define IPD_SERVE_H

#include "../storage/meta.h"
#include "common/buf.h"
#include "config.h"

/* `interpd serve`: open the stores, listen, wait for SIGTERM/SIGINT, shut
 * down gracefully.  Returns the process exit code. */
int ipd_serve(struct ipd_config *cfg);

/* `interpd cleanup`: one expiry sweep on the configured stores; prints its
 * JSON and returns 0, or a message and 1 when it could not run. */
int ipd_cli_cleanup(struct ipd_config *cfg);

/* `interpd status`: GET /v1/admin/status of the server at --listen with
 * the admin key (INTERPD_ADMIN_KEY, else DATA-DIR/admin.key); prints it,
 * exit 0; 1 with a message when the server can't be asked. */
int ipd_cli_status(struct ipd_config *cfg);

/* `interpd keys create|list|revoke ...`; args are what follows "keys".
 * Returns the process exit code. */
int ipd_cli_keys(struct ipd_config *cfg, const char **args, size_t nargs);

struct ipd_executor_options;

/* The executor's options from the config (data-dir, max-file-size,
 * file-ttl, the quotas, the policies, python, prelude-dir,
 * max-generated-files, inline-image-max, sandbox-uid); o's strings are
 * borrowed from cfg. */
void ipd_serve_executor_options(const struct ipd_config *cfg,
                                struct ipd_executor_options *o);

struct ipd_mongo;
struct ipd_blobs;

/* The stores a process works on. */
struct ipd_stores {
    struct ipd_mongo *mongo; /* NULL without --mongo-uri */
    struct ipd_meta *meta;
    struct ipd_blobs *blobs; /* NULL unless asked for */
};

/* Create the data dir (0700) and open the metadata store the config names
 * (SQLite in the data dir, or MongoDB, retried for mongo-connect-timeout),
 * and with with_blobs the blob store.  Logs what failed.  Close with
 * ipd_stores_close (also after a failure). */
enum ipd_err ipd_stores_open(const struct ipd_config *cfg, bool with_blobs,
                             struct ipd_stores *s);
/* For every command but serve, which never creates a store: like
 * ipd_stores_open, but first IPD_ERR_NOT_FOUND when the config names no
 * store (SQLite: no DATA-DIR/meta.db; MongoDB: a database without the
 * api_keys collection serve makes at its first start; local blobs: no
 * data dir), creating nothing.  why gets the reason naming the path or
 * database looked at. */
enum ipd_err ipd_stores_open_existing(const struct ipd_config *cfg,
                                      bool with_blobs, struct ipd_stores *s,
                                      struct ipd_buf *why);
void ipd_stores_close(struct ipd_stores *s);
/* Print why (and, when rc is IPD_ERR_NOT_FOUND, what to do) for the
 * command cmd; returns its exit code: 2 for no store, else 1. */
int ipd_cli_no_store(const char *cmd, enum ipd_err rc,
                     const struct ipd_buf *why);

#endif
