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

#include "exec/policy.h"
#include "common/buf.h"
#include "common/ipd.h"

struct ipd_config {
    char *config_file; /* --config */
    char *listen;      /* "HOST:PORT" */
    char *data_dir;
    char *mongo_uri; /* NULL: SQLite in the data dir (secret: redacted) */
    int64_t mongo_connect_timeout_ms; /* start-up retries for MongoDB */
    int64_t mongo_timeout_ms; /* one MongoDB operation, unless the URI says */
    int64_t key_cache_ttl_ms; /* a verified key survives an outage this long */
    int64_t disk_reserve;     /* bytes kept free for deletes on a full disk */
    int64_t min_free_space;   /* /readyz: not ready below this (0: never) */
    char *blob_store;         /* "local" or "gridfs" */
    int64_t file_ttl_ms;      /* IPD_TIME_NEVER for "never" */
    int64_t max_file_size;    /* bytes */
    int64_t quota_files;      /* per user; < 0 unlimited */
    int64_t quota_bytes;      /* per user; < 0 unlimited */
    int64_t tenant_quota_files; /* per tenant (all its users); < 0 unlimited */
    int64_t tenant_quota_bytes; /* per tenant (all its users); < 0 unlimited */
    int64_t threads;            /* HTTP worker threads */
    int64_t max_connections;
    int64_t max_connections_per_ip;    /* 0: no bound but max_connections */
    int64_t request_header_timeout_ms; /* a request's head, however slow */
    int64_t request_body_timeout_ms;   /* its body, from the head */
    int64_t connection_timeout_ms;     /* idle connection timeout */
    int64_t connection_memory;         /* per-connection buffer limit */
    int64_t shutdown_timeout_ms;       /* bounded wait for in-flight requests */
    int64_t db_busy_timeout_ms;
    char *cors_origins; /* comma-separated origins, "*" for any; NULL none */
    int64_t token_max_ttl_ms; /* a scoped token's longest life */
    int64_t console;          /* 1: serve the web console at /console */
    char *token_secret_file;  /* NULL: DATA-DIR/token.key */
    char *log_level;          /* debug, info, warn, error */
    int64_t ready_fd;         /* write the port here when listening; -1 none */
    int64_t exec_slots;       /* executions running at once; 0: CPU cores */
    int64_t exec_queue;       /* executions waiting; beyond: 429 */
    int64_t ready_check_interval_ms; /* end-to-end execution check period
                                        (IPD_TIME_NEVER: at start only) */
    char *python;                    /* interpreter run inside the sandbox */
    char *prelude_dir;               /* directory holding prelude.py */
    int64_t sandbox_uid;         /* as root: first host uid/gid of the sandbox's
                                    range (internal runs; slot i: +1+i) */
    int64_t max_generated_files; /* returned per execution */
    int64_t inline_image_max;    /* data_base64 for images up to this */
    char *venv_dir;              /* NULL: <data-dir>/venv */
    char *venv_python;          /* base interpreter of the venv; NULL: python */
    int64_t venv_system_site;   /* 1: --system-site-packages */
    int64_t venv_max_age_ms;    /* rebuild period */
    char *venv_clone;           /* "link" or "copy" */
    int64_t venv_stage_max;     /* a generation's tmpfs copy for runs */
    char *exec_mode;            /* "warm" or "cold" */
    char *warm_modules;         /* a zygote's imports, comma-separated */
    int64_t warm_recycle_runs;  /* a zygote's runs before it is replaced */
    int64_t warm_recycle_ms;    /* its life */
    int64_t warm_memory_budget; /* the adaptive warm set's bytes */
    int64_t warm_adapt_runs;    /* runs between two looks at it */
    int64_t max_sessions;       /* live sessions on this node */
    int64_t sessions_per_user;  /* live sessions of one user */
    int64_t sessions_memory;    /* the live sessions' memory limits, summed
                                   (0: no bound) */
    int64_t session_idle_ms;    /* an unused session ends */
    int64_t session_max_life_ms; /* a session ends anyway */
    int64_t session_reap_ms;     /* how often idle ones are looked for */
    char *allowlist;             /* file: one distribution per line */
    char *allowed_deps;          /* file: names allowed only as dependencies */
    char *import_names;          /* file: "module distribution" lines */
    char *pip_index_url;         /* NULL: pip's default */
    char *pip_find_links;        /* a directory of wheels, or NULL */
    int64_t pip_no_index;        /* 1: only pip_find_links, no network */
    int64_t pip_retries;         /* pip --retries */
    int64_t pip_timeout_ms;
    int64_t pip_allow_sdist; /* 1: pip may build sdists (in the sandbox) */
    int64_t auto_install;    /* 1: install a missing allowlisted module */
    int64_t auto_install_retry_ms;  /* a failed auto-install is kept */
    int64_t venv_check_interval_ms; /* how often the venv's age is checked */
    char *fetch_allow;              /* CIDRs URL ingest and callbacks may reach
                                       although the SSRF guard refuses them */
    int64_t fetch_connect_timeout_ms;
    int64_t fetch_timeout_ms;
    int64_t fetch_max_redirects;
    int64_t result_ttl_ms;            /* async results are kept this long */
    int64_t async_results_max_bytes;  /* async results held per tenant */
    int64_t callback_retry_delay_ms;  /* first retry; doubles after */
    int64_t callback_secret_grace_ms; /* the previous callback secret
                                         still signs this long after a
                                         rotation */
    int64_t sweep_interval_ms;        /* the in-process expiry sweep */
    int64_t reconcile_interval_ms;    /* the orphan reconcile */
    int64_t orphan_min_age_ms;        /* bytes without a record older than this
                                         are orphans */
    int64_t lease_ttl_ms;             /* multi-node job leases */

    struct ipd_exec_policy policies[IPD_EXEC_POLICIES_MAX];
    size_t n_policies;

    /* Where each option's value came from, for the start-up print. */
    const char *source[88];
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

/* The policy called name (NULL: "standard"), or NULL when there is none.
 * Borrowed from c. */
const struct ipd_exec_policy *ipd_config_policy(const struct ipd_config *c,
                                                const char *name);

/* Print every option, one per line, with secrets redacted. */
void ipd_config_print(const struct ipd_config *c, FILE *out);

/* Usage text for the options. */
void ipd_config_usage(FILE *out);

#endif
