/*
 * config.h - the service's options.
 *
 * Every option has one name ("file-ttl") and is read, lowest precedence
 * first, from the defaults, the config file (`name = value` lines, `#`
 * comments), INTERPD_<NAME> environment variables (INTERPD_FILE_TTL) and
 * command-line flags (--file-ttl 2s or --file-ttl=2s).
 */
#ifndef IPD_CONFIG_H
#define IPD_CONFIG_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "buf.h"
#include "ipd.h"

struct ipd_config {
    char *config_file;       /* --config */
    char *listen;            /* "HOST:PORT" */
    char *data_dir;
    char *mongo_uri;         /* NULL: SQLite in the data dir (secret: redacted) */
    int64_t mongo_connect_timeout_ms; /* start-up retries for MongoDB */
    char *blob_store;        /* "local" or "gridfs" */
    int64_t file_ttl_ms;     /* IPD_TIME_NEVER for "never" */
    int64_t max_file_size;   /* bytes */
    int64_t quota_files;     /* per user; < 0 unlimited */
    int64_t quota_bytes;     /* per user; < 0 unlimited */
    int64_t threads;         /* HTTP worker threads */
    int64_t max_connections;
    int64_t connection_timeout_ms; /* idle connection timeout */
    int64_t connection_memory;     /* per-connection buffer limit */
    int64_t shutdown_timeout_ms;   /* bounded wait for in-flight requests */
    int64_t db_busy_timeout_ms;
    char *cors_origins;      /* comma-separated origins, "*" for any; NULL none */
    char *log_level;         /* debug, info, warn, error */
    int64_t ready_fd;        /* write the port here when listening; -1 none */
    int64_t exec_slots;      /* executions running at once; 0: CPU cores */
    int64_t exec_queue;      /* executions waiting; beyond: 429 */
    char *python;            /* interpreter run inside the sandbox */
    char *prelude_dir;       /* directory holding prelude.py */
    int64_t sandbox_uid;     /* host uid/gid of sandboxed code (as root) */
    int64_t max_generated_files; /* returned per execution */
    int64_t inline_image_max;    /* data_base64 for images up to this */

    /* Where each option's value came from, for the start-up print. */
    const char *source[32];
};

/* Fill c with the defaults.  Release with ipd_config_release. */
void ipd_config_init(struct ipd_config *c);
void ipd_config_release(struct ipd_config *c);

/*
 * Apply the config file (from --config, or INTERPD_CONFIG), then the
 * environment, then the flags in argv[0..argc).  Non-option arguments and
 * flags that are not options are collected into *rest (owned array of
 * borrowed argv pointers, free() it); with rest NULL they are errors.
 * On error writes a message into err and returns IPD_ERR_INVALID.
 */
enum ipd_err ipd_config_load(struct ipd_config *c, int argc,
                             const char *const *argv, const char ***rest,
                             size_t *nrest, struct ipd_buf *err);

/* Set one option by name from a string (used by all three sources). */
enum ipd_err ipd_config_set(struct ipd_config *c, const char *name,
                            const char *value, const char *source,
                            struct ipd_buf *err);

/* Print every option, one per line, with secrets redacted. */
void ipd_config_print(const struct ipd_config *c, FILE *out);

/* Usage text for the options. */
void ipd_config_usage(FILE *out);

/* A URI with its password replaced by "****".  New string, free(). */
char *ipd_redact_uri(const char *uri);

#endif
