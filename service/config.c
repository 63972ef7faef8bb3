/*
 * config.c - table-driven options from defaults, file, environment, flags.
 */
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "config.h"
#include "common/util.h"
#include "fetch/guard.h"

enum opt_type { OPT_STRING, OPT_INT, OPT_SIZE, OPT_DURATION, OPT_FD, OPT_BOOL };

struct opt {
    const char *name;
    enum opt_type type;
    size_t offset;
    const char *def; /* NULL: unset */
    bool secret;
    const char *help;
};

#define OFF(f) offsetof(struct ipd_config, f)

#ifndef IPD_VENV_DATA_DIR
#define IPD_VENV_DATA_DIR "/usr/local/share/interpd"
#endif

#ifndef IPD_PRELUDE_DIR
#define IPD_PRELUDE_DIR "/usr/local/share/interpd"
#endif

static const struct opt opts[] = {
    {"config", OPT_STRING, OFF(config_file), NULL, false,
     "config file of `name = value` lines"},
    {"listen", OPT_STRING, OFF(listen), "127.0.0.1:8080", false,
     "HOST:PORT to listen on (port 0: any free port)"},
    {"data-dir", OPT_STRING, OFF(data_dir), "./interpd-data", false,
     "directory for the database, blobs and admin.key"},
    {"mongo-uri", OPT_STRING, OFF(mongo_uri), NULL, true,
     "MongoDB URI for metadata (default: SQLite in the data dir)"},
    {"mongo-connect-timeout", OPT_DURATION, OFF(mongo_connect_timeout_ms),
     "30s", false, "how long start-up retries an unreachable MongoDB"},
    {"mongo-timeout", OPT_DURATION, OFF(mongo_timeout_ms), "2s", false,
     "bound of one MongoDB operation (server selection, connect, socket, "
     "write concern) unless the URI sets it; past it requests get 503"},
    {"key-cache-ttl", OPT_DURATION, OFF(key_cache_ttl_ms), "30s", false,
     "how long a verified API key still authenticates while the metadata "
     "store cannot be asked (0s: never)"},
    {"disk-reserve", OPT_SIZE, OFF(disk_reserve), "16M", false,
     "room kept on the data dir's disk so deletes work when it is full "
     "(0: none)"},
    {"min-free-space", OPT_SIZE, OFF(min_free_space), "1G", false,
     "/readyz reports not ready below this much free space on the data "
     "dir's disk (0: never)"},
    {"blob-store", OPT_STRING, OFF(blob_store), "local", false,
     "where file bytes live: local (data dir) or gridfs (needs mongo-uri)"},
    {"file-ttl", OPT_DURATION, OFF(file_ttl_ms), "48h", false,
     "lifetime of stored files (e.g. 48h, 30m, 2s, never)"},
    {"max-file-size", OPT_SIZE, OFF(max_file_size), "50M", false,
     "largest accepted upload"},
    {"quota-files", OPT_INT, OFF(quota_files), "100", false,
     "files per user (-1: unlimited)"},
    {"quota-bytes", OPT_SIZE, OFF(quota_bytes), "1G", false, "bytes per user"},
    {"tenant-quota-files", OPT_INT, OFF(tenant_quota_files), "10000", false,
     "files per tenant, all its users together (-1: unlimited)"},
    {"tenant-quota-bytes", OPT_SIZE, OFF(tenant_quota_bytes), "10G", false,
     "bytes per tenant, all its users together"},
    {"threads", OPT_INT, OFF(threads), "0", false,
     "HTTP event-loop threads (0: one per CPU core, at least 2)"},
    {"max-connections", OPT_INT, OFF(max_connections), "1024", false,
     "concurrent connections"},
    {"max-connections-per-ip", OPT_INT, OFF(max_connections_per_ip), "128",
     false,
     "concurrent connections from one client address (0: no bound "
     "but max-connections; behind a proxy, set 0 or the proxy's "
     "own)"},
    {"request-header-timeout", OPT_DURATION, OFF(request_header_timeout_ms),
     "30s", false,
     "a request's head (line and headers) must arrive within "
     "this of the connection's start or its previous request's "
     "end, however it trickles, or the connection is closed"},
    {"request-body-timeout", OPT_DURATION, OFF(request_body_timeout_ms), "10m",
     false,
     "a request's body must arrive within this of its head, "
     "or the connection is closed"},
    {"connection-timeout", OPT_DURATION, OFF(connection_timeout_ms), "60s",
     false, "idle connection timeout"},
    {"connection-memory", OPT_SIZE, OFF(connection_memory), "512K", false,
     "per-connection buffer memory (larger reads make uploads faster)"},
    {"shutdown-timeout", OPT_DURATION, OFF(shutdown_timeout_ms), "10s", false,
     "how long SIGTERM waits for in-flight requests"},
    {"db-busy-timeout", OPT_DURATION, OFF(db_busy_timeout_ms), "5s", false,
     "how long a database write waits for the lock"},
    {"cors-origins", OPT_STRING, OFF(cors_origins), NULL, false,
     "comma-separated browser origins allowed by CORS (* for any)"},
    {"console", OPT_BOOL, OFF(console), "false", false,
     "serve the web console at /console (--console alone means true)"},
    {"token-max-ttl", OPT_DURATION, OFF(token_max_ttl_ms), "1h", false,
     "the longest life of a scoped token (POST /v1/tokens; 1s to 7d)"},
    {"token-secret-file", OPT_STRING, OFF(token_secret_file), NULL, false,
     "the file of the secret that signs scoped tokens, 64 hex digits "
     "(default: DATA-DIR/token.key, made at the first start; nodes of one "
     "store must share it)"},
    {"log-level", OPT_STRING, OFF(log_level), "info", false,
     "debug, info, warn or error"},
    {"exec-slots", OPT_INT, OFF(exec_slots), "0", false,
     "executions running at once (0: one per CPU core)"},
    {"exec-queue", OPT_INT, OFF(exec_queue), "32", false,
     "executions waiting for a slot; beyond that 429"},
    {"exec-mode", OPT_STRING, OFF(exec_mode), "warm", false,
     "cold: a fresh interpreter per run; warm: per execution slot a zygote "
     "with warm-modules imported and a child parked; networked policies "
     "always run cold (docs/DEPLOYMENT.md)"},
    {"warm-modules", OPT_STRING, OFF(warm_modules), "numpy,pandas,matplotlib",
     false, "modules a zygote imports (comma-separated)"},
    {"warm-recycle-runs", OPT_INT, OFF(warm_recycle_runs), "1000", false,
     "a zygote is replaced after this many runs (0: never)"},
    {"warm-recycle-after", OPT_DURATION, OFF(warm_recycle_ms), "1h", false,
     "a zygote is replaced after this long (more than 0, at most 7d)"},
    {"warm-memory-budget", OPT_SIZE, OFF(warm_memory_budget), "256M", false,
     "memory a zygote may add by importing what runs import most, beyond "
     "warm-modules (0: the warm set does not adapt)"},
    {"warm-adapt-runs", OPT_INT, OFF(warm_adapt_runs), "100", false,
     "runs between two looks at the adaptive warm set (1-100000)"},
    {"python", OPT_STRING, OFF(python), "/usr/bin/python3", false,
     "Python interpreter run inside the sandbox"},
    {"prelude-dir", OPT_STRING, OFF(prelude_dir), IPD_PRELUDE_DIR, false,
     "directory holding prelude.py"},
    {"sandbox-uid", OPT_INT, OFF(sandbox_uid), "200000", false,
     "as root: first host uid/gid of the sandbox's range (package installs; "
     "execution slot i runs as this+1+i, session i as this+1+slots+i); "
     "none up to this+slots+max-sessions may have a passwd/group entry"},
    {"max-generated-files", OPT_INT, OFF(max_generated_files), "20", false,
     "generated files returned per execution"},
    {"inline-image-max", OPT_SIZE, OFF(inline_image_max), "1M", false,
     "images up to this size are also returned inline as data_base64"},
    {"venv-dir", OPT_STRING, OFF(venv_dir), NULL, false,
     "where venv generations live, outside the data dir (default: "
     "DATA-DIR-venv)"},
    {"venv-stage-max", OPT_SIZE, OFF(venv_stage_max), "1G", false,
     "runs get a copy of the venv generation in a private tmpfs up to this "
     "size, so they see no host path (0: bind it by its host path)"},
    {"max-sessions", OPT_INT, OFF(max_sessions), "8", false,
     "live sessions on this node (0: none); as root each has its own uid "
     "after the slots'"},
    {"sessions-per-user", OPT_INT, OFF(sessions_per_user), "3", false,
     "live sessions of one user"},
    {"sessions-memory", OPT_SIZE, OFF(sessions_memory), "8G", false,
     "memory the live sessions of this node may hold together, each "
     "charged its policy's memory limit (0: no bound but max-sessions); "
     "a tenant gets its policy's tenant-session-memory share of it"},
    {"session-idle-timeout", OPT_DURATION, OFF(session_idle_ms), "20m", false,
     "a session unused this long ends"},
    {"session-max-life", OPT_DURATION, OFF(session_max_life_ms), "8h", false,
     "a session ends after this long, used or not"},
    {"session-reap-interval", OPT_DURATION, OFF(session_reap_ms), "30s", false,
     "how often idle sessions are looked for"},
    {"venv-python", OPT_STRING, OFF(venv_python), NULL, false,
     "base interpreter of the venv (default: the python option)"},
    {"venv-system-site-packages", OPT_INT, OFF(venv_system_site), "1", false,
     "1: the venv sees the distribution's packages (numpy, pandas...)"},
    {"venv-max-age", OPT_DURATION, OFF(venv_max_age_ms), "7d", false,
     "rebuild the venv from scratch when it is older than this"},
    {"venv-check-interval", OPT_DURATION, OFF(venv_check_interval_ms), "1h",
     false,
     "how often the venv's age is checked (and unused generations "
     "removed)"},
    {"venv-clone", OPT_STRING, OFF(venv_clone), "link", false,
     "how an install clones the venv: link (hard links) or copy"},
    {"allowlist", OPT_STRING, OFF(allowlist),
     IPD_VENV_DATA_DIR "/allowlist.txt", false,
     "file of installable distributions, one per line"},
    {"allowed-deps", OPT_STRING, OFF(allowed_deps),
     IPD_VENV_DATA_DIR "/allowed-deps.txt", false,
     "file of names allowed only as dependencies"},
    {"import-names", OPT_STRING, OFF(import_names),
     IPD_VENV_DATA_DIR "/import-names.txt", false,
     "file mapping import names to distributions (sklearn scikit-learn)"},
    {"pip-index-url", OPT_STRING, OFF(pip_index_url), NULL, false,
     "package index for installs (default: pip's own)"},
    {"pip-find-links", OPT_STRING, OFF(pip_find_links), NULL, false,
     "a directory of wheels pip may install from"},
    {"pip-no-index", OPT_INT, OFF(pip_no_index), "0", false,
     "1: offline host: pip installs only from --pip-find-links (no index, "
     "no network)"},
    {"pip-retries", OPT_INT, OFF(pip_retries), "1", false,
     "pip --retries per connection (pip's own default, 5, makes an "
     "unreachable index cost ~8 s)"},
    {"pip-timeout", OPT_DURATION, OFF(pip_timeout_ms), "10m", false,
     "longest one pip run may take"},
    {"pip-allow-sdist", OPT_INT, OFF(pip_allow_sdist), "0", false,
     "1: pip may build source distributions (their setup code runs in the "
     "sandbox); 0: wheels only"},
    {"auto-install", OPT_INT, OFF(auto_install), "1", false,
     "1: install a missing allowlisted module and run the code again"},
    {"auto-install-retry-after", OPT_DURATION, OFF(auto_install_retry_ms),
     "10m", false,
     "a failed automatic install is not retried for this long on the same "
     "venv generation (0: always retry)"},
    {"fetch-allow", OPT_STRING, OFF(fetch_allow), NULL, false,
     "CIDRs URL ingest, callbacks and networked runs may reach although "
     "private or loopback (e.g. 10.0.0.0/8)"},
    {"fetch-connect-timeout", OPT_DURATION, OFF(fetch_connect_timeout_ms),
     "10s", false, "connect timeout of URL ingest and callbacks"},
    {"fetch-timeout", OPT_DURATION, OFF(fetch_timeout_ms), "60s", false,
     "total timeout of one URL fetch or callback"},
    {"fetch-max-redirects", OPT_INT, OFF(fetch_max_redirects), "3", false,
     "redirects a URL ingest follows"},
    {"result-ttl", OPT_DURATION, OFF(result_ttl_ms), "1h", false,
     "how long asynchronous execution results are kept"},
    {"async-results-max-bytes", OPT_SIZE, OFF(async_results_max_bytes), "1G",
     false,
     "asynchronous results one tenant may hold (on disk, in "
     "DATA-DIR/results); beyond, its async submits get 429"},
    {"callback-retry-delay", OPT_DURATION, OFF(callback_retry_delay_ms), "2s",
     false, "wait before retrying a failed callback (doubles; 3 attempts)"},
    {"callback-secret-grace", OPT_DURATION, OFF(callback_secret_grace_ms),
     "24h", false,
     "after `keys rotate-secret`, how long callbacks are also signed with "
     "the previous secret (0s: not at all)"},
    {"sweep-interval", OPT_DURATION, OFF(sweep_interval_ms), "1h", false,
     "how often the service deletes expired files itself (never: only "
     "cron/cleanup)"},
    {"reconcile-interval", OPT_DURATION, OFF(reconcile_interval_ms), "6h",
     false, "how often orphan bytes and records are reconciled (never: off)"},
    {"orphan-min-age", OPT_DURATION, OFF(orphan_min_age_ms), "1h", false,
     "bytes without a record are removed only when older than this"},
    {"lease-ttl", OPT_DURATION, OFF(lease_ttl_ms), "60s", false,
     "lease of a scheduled job among nodes sharing MongoDB (renewed while "
     "it runs)"},
    {"ready-check-interval", OPT_DURATION, OFF(ready_check_interval_ms), "10s",
     false,
     "how often an end-to-end execution checks that "
     "executions work (/readyz; never: only at start)"},
    {"ready-fd", OPT_FD, OFF(ready_fd), "-1", false,
     "write the bound port to this fd and close it once listening"},
};

_Static_assert(IPD_ARRAY_LEN(opts) <=
                   IPD_ARRAY_LEN(((struct ipd_config *)0)->source),
               "grow ipd_config.source");

/* ---- execution policies ------------------------------------------------ */

/* Named fields: the struct is shared with the executor (exec/policy.h). */
#define IPD_POLICY(n, t, mt, mem, procs, out, tmp, dir, net)                   \
    {                                                                          \
        .name = n, .timeout_ms = t, .max_timeout_ms = mt, .memory_bytes = mem, \
        .max_processes = procs, .output_bytes = out, .tmp_bytes = tmp,         \
        .output_dir_bytes = dir, .network = net, .cpu_millis = 1000,           \
        .call_bytes = 1 << 20, .calls = 1000, .calls_in_flight = 16,           \
        .call_timeout_ms = 120000, .max_call_wait_ms = 600000,                 \
        .tenant_running = -50, .tenant_queued = -50, .tenant_results = -10,    \
        .tenant_fetches = -50, .tenant_callbacks = -10,                        \
        .tenant_installs = -25, .tenant_sessions = -50,                        \
        .tenant_session_memory = -50                                           \
    }
static const struct ipd_exec_policy builtin_policies[] = {
    IPD_POLICY("strict", 30000, 60000, 512LL << 20, 64, 64 * 1024, 64LL << 20,
               64LL << 20, false),
    IPD_POLICY("standard", 60000, 300000, 1LL << 30, 128, 100 * 1024,
               256LL << 20, 256LL << 20, false),
    IPD_POLICY("networked", 60000, 300000, 1LL << 30, 128, 100 * 1024,
               256LL << 20, 256LL << 20, true),
};
#undef IPD_POLICY

enum policy_field_type {
    PF_DURATION,
    PF_SIZE,
    PF_COUNT,
    PF_BOOL,
    PF_CPUS,
    PF_SHARE,
    PF_SIZE_SHARE
};

static const struct policy_field {
    const char *name;
    enum policy_field_type type;
    size_t offset;
    int64_t min; /* smallest accepted value */
} policy_fields[] = {
    {"timeout", PF_DURATION, offsetof(struct ipd_exec_policy, timeout_ms),
     1000},
    {"max-timeout", PF_DURATION,
     offsetof(struct ipd_exec_policy, max_timeout_ms), 1000},
    {"memory", PF_SIZE, offsetof(struct ipd_exec_policy, memory_bytes),
     32 << 20},
    {"processes", PF_COUNT, offsetof(struct ipd_exec_policy, max_processes), 4},
    {"output-limit", PF_SIZE, offsetof(struct ipd_exec_policy, output_bytes),
     1024},
    {"tmp-size", PF_SIZE, offsetof(struct ipd_exec_policy, tmp_bytes), 1 << 20},
    {"output-dir-size", PF_SIZE,
     offsetof(struct ipd_exec_policy, output_dir_bytes), 1 << 20},
    {"network", PF_BOOL, offsetof(struct ipd_exec_policy, network), 0},
    {"cpus", PF_CPUS, offsetof(struct ipd_exec_policy, cpu_millis), 10},
    /* At most IPD_EXEC_ANSWER_BODY_MAX (policy_set). */
    {"call-size", PF_SIZE, offsetof(struct ipd_exec_policy, call_bytes), 1024},
    {"calls", PF_COUNT, offsetof(struct ipd_exec_policy, calls), 1},
    {"calls-in-flight", PF_COUNT,
     offsetof(struct ipd_exec_policy, calls_in_flight), 1},
    {"call-timeout", PF_DURATION,
     offsetof(struct ipd_exec_policy, call_timeout_ms), 1000},
    {"max-call-wait", PF_DURATION,
     offsetof(struct ipd_exec_policy, max_call_wait_ms), 1000},
    {"tenant-running", PF_SHARE,
     offsetof(struct ipd_exec_policy, tenant_running), -100},
    {"tenant-queued", PF_SHARE, offsetof(struct ipd_exec_policy, tenant_queued),
     -100},
    {"tenant-async-results", PF_SHARE,
     offsetof(struct ipd_exec_policy, tenant_results), -100},
    {"tenant-fetches", PF_SHARE,
     offsetof(struct ipd_exec_policy, tenant_fetches), -100},
    {"tenant-callbacks", PF_SHARE,
     offsetof(struct ipd_exec_policy, tenant_callbacks), -100},
    {"tenant-installs", PF_SHARE,
     offsetof(struct ipd_exec_policy, tenant_installs), -100},
    {"tenant-sessions", PF_SHARE,
     offsetof(struct ipd_exec_policy, tenant_sessions), -100},
    {"tenant-session-memory", PF_SIZE_SHARE,
     offsetof(struct ipd_exec_policy, tenant_session_memory), -100},
};

/* "8" (a count), "50%" (of the pool: stored as -50) or "0" (no bound). */
static enum ipd_err share_parse(const char *s, int64_t *out)
{
    size_t n = s ? strlen(s) : 0;
    char num[24];
    if (!n || n >= sizeof(num))
        return IPD_ERR_INVALID;
    if (s[n - 1] != '%')
        return ipd_int_parse(s, 0, 1 << 20, out);
    memcpy(num, s, n - 1);
    num[n - 1] = '\0';
    enum ipd_err rc = ipd_int_parse(num, 1, 100, out);
    *out = -*out;
    return rc;
}

/* "4G" (bytes), "50%" (of the budget: stored as -50) or "0" (no bound). */
static enum ipd_err size_share_parse(const char *s, int64_t *out)
{
    size_t n = s ? strlen(s) : 0;
    if (n && s[n - 1] == '%')
        return share_parse(s, out);
    return ipd_size_parse(s, out);
}

/* "1", "0.5", "2.25": cores with at most three decimals, as thousandths;
 * up to 1024 cores. */
static enum ipd_err cpus_parse(const char *s, int64_t *out)
{
    int64_t whole = 0, frac = 0, scale = 100;
    const char *p = s;

    if (!s || !isdigit((unsigned char)*p))
        return IPD_ERR_INVALID;
    for (; isdigit((unsigned char)*p); p++) {
        whole = whole * 10 + (*p - '0');
        if (whole > 1024)
            return IPD_ERR_INVALID;
    }
    if (*p == '.') {
        if (!isdigit((unsigned char)*++p))
            return IPD_ERR_INVALID;
        for (; isdigit((unsigned char)*p) && scale; p++, scale /= 10)
            frac += (*p - '0') * scale;
    }
    if (*p || whole * 1000 + frac > 1024 * 1000)
        return IPD_ERR_INVALID;
    *out = whole * 1000 + frac;
    return IPD_OK;
}

const struct ipd_exec_policy *ipd_config_policy(const struct ipd_config *c,
                                                const char *name)
{
    if (!name)
        name = "standard";
    for (size_t i = 0; i < c->n_policies; i++)
        if (!strcmp(c->policies[i].name, name))
            return &c->policies[i];
    return NULL;
}

static bool policy_name_valid(const char *s, size_t len)
{
    if (!len || len >= IPD_EXEC_POLICY_NAME_MAX)
        return false;
    for (size_t i = 0; i < len; i++)
        if (!islower((unsigned char)s[i]) && !isdigit((unsigned char)s[i]) &&
            s[i] != '-' && s[i] != '_')
            return false;
    return true;
}

/* A policy field's value from its text; a bool is 0 or 1. */
static enum ipd_err policy_value(const struct policy_field *f,
                                 const char *value, int64_t *v)
{
    enum ipd_err rc = IPD_OK;
    switch (f->type) {
    case PF_DURATION:
        rc = ipd_duration_parse(value, v);
        if (!rc && *v == IPD_TIME_NEVER)
            rc = IPD_ERR_INVALID;
        break;
    case PF_SIZE: rc = ipd_size_parse(value, v); break;
    case PF_COUNT: rc = ipd_int_parse(value, 0, 1 << 20, v); break;
    case PF_CPUS: rc = cpus_parse(value, v); break;
    case PF_SHARE: rc = share_parse(value, v); break;
    case PF_SIZE_SHARE: rc = size_share_parse(value, v); break;
    case PF_BOOL:
        if (value && (!strcmp(value, "true") || !strcmp(value, "yes") ||
                      !strcmp(value, "1")))
            *v = 1;
        else if (value && (!strcmp(value, "false") || !strcmp(value, "no") ||
                           !strcmp(value, "0")))
            *v = 0;
        else
            rc = IPD_ERR_INVALID;
        break;
    }
    return rc;
}

/* "policy.<name>.<field>" = value.  A new name starts as a copy of
 * standard (the built-in one, whatever was set for it so far). */
static enum ipd_err set_policy(struct ipd_config *c, const char *key,
                               const char *value, const char *source,
                               struct ipd_buf *err)
{
    const char *name = key + strlen("policy.");
    const char *dot = strchr(name, '.');
    size_t nlen = dot ? (size_t)(dot - name) : 0;
    const struct policy_field *f = NULL;
    if (!dot || !policy_name_valid(name, nlen)) {
        ipd_buf_addf(err,
                     "bad policy option \"%s\" (from %s): expected "
                     "policy.<name>.<field>, name of a-z 0-9 - _",
                     key, source);
        return IPD_ERR_INVALID;
    }
    for (size_t i = 0; i < IPD_ARRAY_LEN(policy_fields); i++) {
        const char *n = policy_fields[i].name, *k = dot + 1;
        for (; *n && *k && (*k == '_' ? '-' : *k) == *n; n++, k++)
            ;
        if (!*n && !*k)
            f = &policy_fields[i];
    }
    if (!f) {
        ipd_buf_addf(err,
                     "unknown policy field in \"%s\" (from %s): "
                     "timeout, max-timeout, memory, processes, "
                     "output-limit, tmp-size, output-dir-size, network, "
                     "cpus, call-size, calls, calls-in-flight, "
                     "call-timeout, max-call-wait, tenant-running, "
                     "tenant-queued, "
                     "tenant-async-results, tenant-fetches, "
                     "tenant-callbacks, tenant-installs, "
                     "tenant-sessions or tenant-session-memory",
                     key, source);
        return IPD_ERR_INVALID;
    }
    char pname[IPD_EXEC_POLICY_NAME_MAX];
    memcpy(pname, name, nlen);
    pname[nlen] = '\0';
    struct ipd_exec_policy *p = NULL;
    for (size_t i = 0; i < c->n_policies && !p; i++)
        if (!strcmp(c->policies[i].name, pname))
            p = &c->policies[i];
    if (!p) {
        if (c->n_policies == IPD_EXEC_POLICIES_MAX) {
            ipd_buf_addf(err, "too many policies (at most %d)",
                         IPD_EXEC_POLICIES_MAX);
            return IPD_ERR_INVALID;
        }
        p = &c->policies[c->n_policies++];
        *p = builtin_policies[1];
        memcpy(p->name, pname, nlen + 1);
    }
    int64_t v = 0;
    enum ipd_err rc = policy_value(f, value, &v);
    if (!rc && f->type == PF_BOOL)
        p->network = v != 0;
    if (!rc && f->type != PF_BOOL && v < f->min)
        rc = IPD_ERR_INVALID;
    /* An answer's body is bounded by the API (IPD_EXEC_ANSWER_BODY_MAX): a
     * larger call-size could never be answered. */
    if (!rc && f->offset == offsetof(struct ipd_exec_policy, call_bytes) &&
        v > IPD_EXEC_ANSWER_BODY_MAX)
        rc = IPD_ERR_INVALID;
    if (rc) {
        ipd_buf_addf(err, "invalid value \"%s\" for %s (from %s)",
                     value ? value : "", key, source);
        return IPD_ERR_INVALID;
    }
    if (f->type != PF_BOOL)
        *(int64_t *)(void *)((char *)p + f->offset) = v;
    return IPD_OK;
}

static bool is_policy_key(const char *name, size_t len)
{
    return len > 7 && !strncmp(name, "policy.", 7);
}

static const struct opt *find_opt(const char *name, size_t len)
{
    for (size_t i = 0; i < IPD_ARRAY_LEN(opts); i++) {
        const char *n = opts[i].name;
        size_t k = 0;
        /* '_' and '-' are the same in option names (file_ttl, file-ttl). */
        for (; k < len && n[k]; k++) {
            char c =
                name[k] == '_' ? '-' : (char)tolower((unsigned char)name[k]);
            if (c != n[k])
                break;
        }
        if (k == len && !n[k])
            return &opts[i];
    }
    return NULL;
}

/* true/false, yes/no, on/off, 1/0, any case. */
static enum ipd_err bool_parse(const char *value, int64_t *out)
{
    static const char *const yes[] = {"true", "yes", "on", "1"};
    static const char *const no[] = {"false", "no", "off", "0"};
    for (size_t i = 0; value && i < IPD_ARRAY_LEN(yes); i++) {
        if (!strcasecmp(value, yes[i]) || !strcasecmp(value, no[i])) {
            *out = !strcasecmp(value, yes[i]);
            return IPD_OK;
        }
    }
    return IPD_ERR_INVALID;
}

static enum ipd_err set_opt(struct ipd_config *c, const struct opt *o,
                            const char *value, const char *source,
                            struct ipd_buf *err)
{
    char *base = (char *)c;
    enum ipd_err rc = IPD_OK;
    int64_t v = 0;

    switch (o->type) {
    case OPT_STRING: {
        char **p = (char **)(void *)(base + o->offset);
        free(*p);
        *p = (value && *value) ? ipd_xstrdup(value) : NULL;
        break;
    }
    case OPT_INT: rc = ipd_int_parse(value, -1, INT32_MAX, &v); break;
    case OPT_FD: rc = ipd_int_parse(value, -1, 1 << 20, &v); break;
    case OPT_SIZE:
        if (value && strcmp(value, "-1") == 0)
            v = -1;
        else
            rc = ipd_size_parse(value, &v);
        break;
    case OPT_DURATION: rc = ipd_duration_parse(value, &v); break;
    case OPT_BOOL: rc = bool_parse(value, &v); break;
    }
    if (rc) {
        ipd_buf_addf(err, "invalid value \"%s\" for %s (from %s)",
                     value ? value : "", o->name, source);
        return IPD_ERR_INVALID;
    }
    if (o->type != OPT_STRING)
        *(int64_t *)(void *)(base + o->offset) = v;
    c->source[o - opts] = source;
    return IPD_OK;
}

enum ipd_err ipd_config_set(struct ipd_config *c, const char *name,
                            const char *value, const char *source,
                            struct ipd_buf *err)
{
    if (is_policy_key(name, strlen(name)))
        return set_policy(c, name, value, source, err);
    const struct opt *o = find_opt(name, strlen(name));
    if (!o) {
        ipd_buf_addf(err, "unknown option \"%s\" (from %s)", name, source);
        return IPD_ERR_INVALID;
    }
    return set_opt(c, o, value, source, err);
}

/*
 * An installed interpd reads its files (prelude.py, zygote.py, the package
 * lists: CMakeLists.txt's IPD_SHARE_FILES) from <dir of the
 * executable>/../share/interpd when that holds prelude.py, wherever the
 * prefix is (cmake --install --prefix, DESTDIR, a moved tree): otherwise
 * an installed copy of a build tree's binary would read the source tree's
 * files, and a binary built for another prefix would miss them.  Else the
 * compiled-in dirs stay the defaults.  New string (free()) or NULL.
 */
static char *installed_share_dir(void)
{
    char exe[PATH_MAX], path[PATH_MAX + 64];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    char *slash;

    if (n <= 0)
        return NULL;
    exe[n] = '\0';
    slash = strrchr(exe, '/');
    if (!slash)
        return NULL;
    *slash = '\0';
    snprintf(path, sizeof(path), "%s/../share/interpd/prelude.py", exe);
    if (access(path, R_OK))
        return NULL;
    snprintf(path, sizeof(path), "%s/../share/interpd", exe);
    return realpath(path, NULL);
}

static void installed_defaults(struct ipd_config *c)
{
    static const char *const lists[][2] = {
        {"allowlist", "allowlist.txt"},
        {"allowed-deps", "allowed-deps.txt"},
        {"import-names", "import-names.txt"}};
    char *dir = installed_share_dir();
    char path[PATH_MAX + 64];
    struct ipd_buf err;

    if (!dir)
        return;
    ipd_buf_init(&err, 256);
    IPD_ASSERT(ipd_config_set(c, "prelude-dir", dir, "default", &err) ==
               IPD_OK);
    for (size_t i = 0; i < IPD_ARRAY_LEN(lists); i++) {
        snprintf(path, sizeof(path), "%s/%s", dir, lists[i][1]);
        IPD_ASSERT(ipd_config_set(c, lists[i][0], path, "default", &err) ==
                   IPD_OK);
    }
    ipd_buf_release(&err);
    free(dir);
}

void ipd_config_init(struct ipd_config *c)
{
    struct ipd_buf err;
    memset(c, 0, sizeof(*c));
    ipd_buf_init(&err, 1024);
    for (size_t i = 0; i < IPD_ARRAY_LEN(opts); i++) {
        if (opts[i].def)
            IPD_ASSERT(set_opt(c, &opts[i], opts[i].def, "default", &err) ==
                       IPD_OK);
        c->source[i] = "default";
    }
    installed_defaults(c);
    memcpy(c->policies, builtin_policies, sizeof(builtin_policies));
    c->n_policies = IPD_ARRAY_LEN(builtin_policies);
    ipd_buf_release(&err);
}

void ipd_config_release(struct ipd_config *c)
{
    for (size_t i = 0; i < IPD_ARRAY_LEN(opts); i++) {
        if (opts[i].type == OPT_STRING) {
            char **p = (char **)(void *)((char *)c + opts[i].offset);
            free(*p);
            *p = NULL;
        }
    }
}

static char *trim(char *s)
{
    while (isspace((unsigned char)*s))
        s++;
    char *e = s + strlen(s);
    while (e > s && isspace((unsigned char)e[-1]))
        *--e = '\0';
    return s;
}

static enum ipd_err load_file(struct ipd_config *c, const char *path,
                              struct ipd_buf *err)
{
    enum ipd_err rc = IPD_OK;
    char *line = NULL;
    size_t cap = 0;
    unsigned lineno = 0;
    FILE *f = fopen(path, "r");
    if (!f) {
        ipd_buf_addf(err, "cannot read config file %s: %s", path,
                     strerror(errno));
        return IPD_ERR_INVALID;
    }
    while (getline(&line, &cap, f) >= 0) {
        lineno++;
        char *s = trim(line);
        if (!*s || *s == '#')
            continue;
        char *eq = strchr(s, '=');
        if (!eq) {
            ipd_buf_addf(err, "%s:%u: expected `name = value`", path, lineno);
            rc = IPD_ERR_INVALID;
            goto out;
        }
        *eq = '\0';
        char *name = trim(s), *value = trim(eq + 1);
        size_t vlen = strlen(value);
        if (vlen >= 2 && value[0] == '"' && value[vlen - 1] == '"') {
            value[vlen - 1] = '\0';
            value++;
        }
        if (!strcmp(name, "config"))
            continue;
        rc = ipd_config_set(c, name, value, "file", err);
        if (rc)
            goto out;
    }
out:
    free(line);
    fclose(f);
    return rc;
}

static enum ipd_err load_env(struct ipd_config *c, struct ipd_buf *err)
{
    for (size_t i = 0; i < IPD_ARRAY_LEN(opts); i++) {
        char var[64] = "INTERPD_";
        size_t k = strlen(var);
        for (const char *n = opts[i].name; *n && k < sizeof(var) - 1; n++)
            var[k++] = *n == '-' ? '_' : (char)toupper((unsigned char)*n);
        var[k] = '\0';
        const char *v = getenv(var);
        if (!v || !strcmp(opts[i].name, "config"))
            continue;
        enum ipd_err rc = set_opt(c, &opts[i], v, "environment", err);
        if (rc)
            return rc;
    }
    return IPD_OK;
}

/* The flag's option and value, or NULL with err set. */
static const struct opt *parse_flag(int argc, const char *const *argv, int *i,
                                    const char **value, struct ipd_buf *err)
{
    const char *arg = argv[*i] + 2;
    const char *eq = strchr(arg, '=');
    size_t len = eq ? (size_t)(eq - arg) : strlen(arg);
    const struct opt *o = find_opt(arg, len);
    if (!o) {
        ipd_buf_addf(err, "unknown option --%.*s", (int)len, arg);
        return NULL;
    }
    /* "--listen --data-dir D": --listen has no value, and --data-dir is
     * not one. */
    if (eq) {
        *value = eq + 1;
    } else if (o->type == OPT_BOOL) {
        *value = "true"; /* "--console" alone; never takes the next word */
    } else if (*i + 1 < argc && strncmp(argv[*i + 1], "--", 2) != 0) {
        *value = argv[++*i];
    } else {
        ipd_buf_addf(err, "option --%s needs a value", o->name);
        return NULL;
    }
    return o;
}

/* --config wins over INTERPD_CONFIG; the file comes first in precedence
 * order, so it is found before anything else is read. */
static const char *config_file(int argc, const char *const *argv)
{
    const char *file = getenv("INTERPD_CONFIG");
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--config") && i + 1 < argc &&
            strncmp(argv[i + 1], "--", 2) != 0)
            file = argv[i + 1];
        else if (!strncmp(argv[i], "--config=", 9))
            file = argv[i] + 9;
    }
    return file;
}

/* --policy.<name>.<key> VALUE or =VALUE at argv[*i]; advances *i past a
 * separate value. */
static enum ipd_err policy_flag(struct ipd_config *c, int argc,
                                const char *const *argv, int *i, size_t nlen,
                                struct ipd_buf *err)
{
    const char *arg = argv[*i], *value;
    char key[128];
    if (nlen >= sizeof(key)) {
        ipd_buf_addf(err, "option %s is too long", arg);
        return IPD_ERR_INVALID;
    }
    memcpy(key, arg + 2, nlen);
    key[nlen] = '\0';
    if (arg[2 + nlen] == '=') {
        value = arg + 2 + nlen + 1;
    } else if (*i + 1 < argc && strncmp(argv[*i + 1], "--", 2) != 0) {
        value = argv[++*i];
    } else {
        ipd_buf_addf(err, "option --%s needs a value", key);
        return IPD_ERR_INVALID;
    }
    return set_policy(c, key, value, "flag", err);
}

/* The command line over what the file and the environment set.  Words
 * that are not options (and, with rest wanted, options we don't know) go
 * to pos. */
static enum ipd_err load_flags(struct ipd_config *c, int argc,
                               const char *const *argv, bool want_rest,
                               const char **pos, size_t *npos,
                               struct ipd_buf *err)
{
    const char *value = NULL;
    enum ipd_err rc;
    for (int i = 0; i < argc; i++) {
        if (strncmp(argv[i], "--", 2) != 0 || !argv[i][2]) {
            pos[(*npos)++] = argv[i];
            continue;
        }
        size_t nlen = strcspn(argv[i] + 2, "=");
        if (is_policy_key(argv[i] + 2, nlen)) {
            rc = policy_flag(c, argc, argv, &i, nlen, err);
            if (rc)
                return rc;
            continue;
        }
        if (want_rest && !find_opt(argv[i] + 2, nlen)) {
            pos[(*npos)++] = argv[i];
            continue;
        }
        const struct opt *o = parse_flag(argc, argv, &i, &value, err);
        if (!o)
            return IPD_ERR_INVALID;
        rc = set_opt(c, o, value, "flag", err);
        if (rc)
            return rc;
    }
    return IPD_OK;
}

/* A relative path is taken from the working directory at start: turn it
 * into an absolute one now (binds, logs and a later chdir need that). */
static bool make_absolute(char **path, const char *name, struct ipd_buf *err)
{
    char cwd[4096];
    const char *rel = *path;
    struct ipd_buf b;

    if (!rel || rel[0] == '/')
        return true;
    if (!getcwd(cwd, sizeof(cwd))) {
        ipd_buf_addf(err,
                     "%s %s is relative and the working directory is "
                     "unknown: %s",
                     name, rel, strerror(errno));
        return false;
    }
    while (rel[0] == '.' && rel[1] == '/')
        rel += 2;
    ipd_buf_init(&b, IPD_BUF_UNLIMITED);
    if (!strcmp(rel, ".") || !rel[0])
        ipd_buf_adds(&b, cwd);
    else
        ipd_buf_addf(&b, "%s%s%s", cwd, strcmp(cwd, "/") ? "/" : "", rel);
    free(*path);
    *path = ipd_buf_detach(&b, NULL);
    return true;
}

/* Stores, sizes and the venv's clone mode. */
static bool check_storage(const struct ipd_config *c, struct ipd_buf *err)
{
    if (!c->data_dir) {
        ipd_buf_adds(err, "data-dir must not be empty");
        return false;
    }
    /* The deadlines are added to clock readings: bounded (a "never"
     * would wrap and close every connection at once). */
    if (c->max_connections_per_ip < 0 || c->request_header_timeout_ms <= 0 ||
        c->request_body_timeout_ms <= 0 ||
        c->request_header_timeout_ms > 86400000 ||
        c->request_body_timeout_ms > 86400000) {
        ipd_buf_adds(err, "max-connections-per-ip must be 0 or more, "
                          "request-header-timeout and request-body-timeout "
                          "positive and at most 1d");
        return false;
    }
    if (c->max_file_size <= 0 || c->threads < 0 || c->max_connections < 1 ||
        c->exec_slots < 0 || c->exec_queue < 0) {
        ipd_buf_adds(err, "max-file-size and max-connections must be "
                          "positive; threads, exec-slots and exec-queue 0 "
                          "or more");
        return false;
    }
    if (!c->blob_store || (strcmp(c->blob_store, "local") != 0 &&
                           strcmp(c->blob_store, "gridfs") != 0)) {
        ipd_buf_adds(err, "blob-store must be local or gridfs");
        return false;
    }
    if (!strcmp(c->blob_store, "gridfs") && !c->mongo_uri) {
        ipd_buf_adds(err, "blob-store gridfs needs mongo-uri");
        return false;
    }
    if (!c->venv_clone || (strcmp(c->venv_clone, "link") != 0 &&
                           strcmp(c->venv_clone, "copy") != 0)) {
        ipd_buf_adds(err, "venv-clone must be link or copy");
        return false;
    }
    if (!c->exec_mode || (strcmp(c->exec_mode, "warm") != 0 &&
                          strcmp(c->exec_mode, "cold") != 0)) {
        ipd_buf_adds(err, "exec-mode must be warm or cold");
        return false;
    }
    if (c->max_sessions < 0 || c->max_sessions > 1000 ||
        c->sessions_per_user < 1 || c->sessions_memory < 0 ||
        c->session_idle_ms <= 0 || c->session_max_life_ms <= 0 ||
        c->session_idle_ms > 7LL * 24 * 3600 * 1000 ||
        c->session_max_life_ms > 30LL * 24 * 3600 * 1000 ||
        c->session_reap_ms <= 0 || c->session_reap_ms > 3600LL * 1000) {
        ipd_buf_adds(err, "max-sessions must be 0-1000, sessions-per-user at "
                          "least 1, session-idle-timeout at most 7d, "
                          "session-max-life at most 30d and "
                          "session-reap-interval at most 1h");
        return false;
    }
    if (c->warm_recycle_runs < 0) {
        ipd_buf_adds(err, "warm-recycle-runs must be >= 0");
        return false;
    }
    if (c->warm_memory_budget < 0 || c->warm_memory_budget > (64LL << 30) ||
        c->warm_adapt_runs < 1 || c->warm_adapt_runs > 100000) {
        ipd_buf_adds(err, "warm-memory-budget must be 0-64G and "
                          "warm-adapt-runs 1-100000");
        return false;
    }
    if (c->warm_recycle_ms <= 0 ||
        c->warm_recycle_ms > 7LL * 24 * 3600 * 1000) {
        ipd_buf_adds(err, "warm-recycle-after must be more than 0 and at "
                          "most 7d");
        return false;
    }
    return true;
}

/* The background jobs' intervals, timeouts and ages.  Timeouts and
 * delays are added to clock readings: bounded, so no "never" can wrap
 * them. */
static bool check_times(const struct ipd_config *c, struct ipd_buf *err)
{
    const int64_t day = 86400000;
    if (c->sweep_interval_ms <= 0 || c->reconcile_interval_ms <= 0 ||
        c->orphan_min_age_ms <= 0 || c->orphan_min_age_ms == IPD_TIME_NEVER ||
        c->lease_ttl_ms < 1000 || c->lease_ttl_ms == IPD_TIME_NEVER) {
        ipd_buf_adds(err, "sweep-interval and reconcile-interval must be "
                          "positive (or never), orphan-min-age positive, "
                          "lease-ttl at least 1s");
        return false;
    }
    if (c->fetch_connect_timeout_ms <= 0 || c->fetch_timeout_ms <= 0 ||
        c->fetch_connect_timeout_ms > day || c->fetch_timeout_ms > day ||
        c->fetch_max_redirects < 0 || c->fetch_max_redirects > 20 ||
        c->result_ttl_ms <= 0 || c->callback_retry_delay_ms < 0 ||
        c->callback_retry_delay_ms > day) {
        ipd_buf_adds(err, "fetch-connect-timeout and fetch-timeout must be "
                          "positive and at most 1d, result-ttl positive, "
                          "callback-retry-delay at most 1d, "
                          "fetch-max-redirects 0 to 20");
        return false;
    }
    if (c->callback_secret_grace_ms < 0 ||
        c->callback_secret_grace_ms > 30 * day) {
        ipd_buf_adds(err, "callback-secret-grace must be 0s to 30d");
        return false;
    }
    if (c->token_max_ttl_ms < 1000 || c->token_max_ttl_ms > 7 * day) {
        ipd_buf_adds(err, "token-max-ttl must be 1s to 7d");
        return false;
    }
    if (c->venv_max_age_ms <= 0 || c->pip_timeout_ms <= 0 ||
        c->pip_timeout_ms > day || c->venv_check_interval_ms <= 0) {
        ipd_buf_adds(err, "venv-max-age and venv-check-interval must be "
                          "positive (or never), pip-timeout positive and at "
                          "most 1d");
        return false;
    }
    if (c->mongo_timeout_ms < 100 || c->mongo_timeout_ms > 600000 ||
        c->key_cache_ttl_ms < 0 || c->key_cache_ttl_ms > 86400000 ||
        c->disk_reserve < 0 || c->min_free_space < 0) {
        ipd_buf_adds(err, "mongo-timeout must be 100ms to 10m, "
                          "key-cache-ttl 0s to 1d, disk-reserve and "
                          "min-free-space 0 or more");
        return false;
    }
    if (c->ready_check_interval_ms < 1000) {
        ipd_buf_adds(err, "ready-check-interval must be at least 1s (or "
                          "never)");
        return false;
    }
    if (c->pip_no_index && !(c->pip_find_links && *c->pip_find_links)) {
        ipd_buf_adds(err, "pip-no-index 1 needs pip-find-links (a folder of "
                          "wheels; see DEPLOYMENT.md, Offline hosts)");
        return false;
    }
    if (c->pip_retries < 1 || c->pip_retries > 20 ||
        c->auto_install_retry_ms < 0 || c->auto_install_retry_ms > day) {
        ipd_buf_adds(err, "pip-retries must be 1 to 20 and "
                          "auto-install-retry-after 0 to 1d");
        return false;
    }
    if (c->file_ttl_ms <= 0) {
        ipd_buf_adds(err, "file-ttl must be positive or \"never\"");
        return false;
    }
    return true;
}

/* Each execution policy's timeouts. */
static bool check_policies(const struct ipd_config *c, struct ipd_buf *err)
{
    for (size_t i = 0; i < c->n_policies; i++) {
        const struct ipd_exec_policy *p = &c->policies[i];
        if (p->timeout_ms > p->max_timeout_ms) {
            ipd_buf_addf(err,
                         "policy %s: timeout is longer than its "
                         "max-timeout",
                         p->name);
            return false;
        }
    }
    return true;
}

/* The values a running server would parse only when it gets to them
 * (the listen address when it listens, the fetch allowlist when it wires
 * URL ingest): parsed here, with the same parsers, so a bad one stops the
 * program (exit 2) before anything is opened or started. */
static bool check_formats(const struct ipd_config *c, struct ipd_buf *err)
{
    struct sockaddr_storage ss;
    socklen_t sslen = 0;
    bool v6 = false;
    struct ipd_fetch_allowlist *allow = NULL;
    if (ipd_listen_parse(c->listen ? c->listen : "", &ss, &sslen, &v6)) {
        ipd_buf_addf(err,
                     "listen \"%s\" is not HOST:PORT (HOST: a numeric "
                     "IPv4 address, [IPv6], localhost, or * or nothing "
                     "for every address; PORT: 0-65535, 0 for any free "
                     "port)",
                     c->listen ? c->listen : "");
        return false;
    }
    struct ipd_buf why;
    ipd_buf_init(&why, 1024);
    enum ipd_err rc = ipd_fetch_allowlist_parse(c->fetch_allow, &allow, &why);
    if (rc)
        ipd_buf_addf(err, "fetch-allow \"%s\": %s", c->fetch_allow,
                     why.len ? why.buf : ipd_err_name(rc));
    ipd_fetch_allowlist_free(allow);
    ipd_buf_release(&why);
    return !rc;
}

enum ipd_err ipd_config_load(struct ipd_config *c, int argc,
                             const char *const *argv, const char ***rest,
                             size_t *nrest, struct ipd_buf *err)
{
    enum ipd_err rc = IPD_OK;
    const char *file = config_file(argc, argv);
    const char **pos = ipd_xcalloc((size_t)argc + 1, sizeof(*pos));
    size_t npos = 0;

    if (file) {
        rc = ipd_config_set(c, "config", file, "flag", err);
        if (!rc)
            rc = load_file(c, file, err);
        if (rc)
            goto out;
    }
    rc = load_env(c, err);
    if (!rc)
        rc = load_flags(c, argc, argv, rest != NULL, pos, &npos, err);
    if (rc)
        goto out;
    if (!rest && npos) {
        ipd_buf_addf(err, "unexpected argument \"%s\"", pos[0]);
        rc = IPD_ERR_INVALID;
        goto out;
    }
    if (!check_storage(c, err) ||
        !make_absolute(&c->data_dir, "data-dir", err) ||
        !make_absolute(&c->venv_dir, "venv-dir", err) || !check_times(c, err) ||
        !check_policies(c, err) || !check_formats(c, err)) {
        rc = IPD_ERR_INVALID;
        goto out;
    }
    if (rest) {
        *rest = pos;
        *nrest = npos;
        pos = NULL;
    }
out:
    free((void *)pos);
    return rc;
}

static void print_value(const struct ipd_config *c, const struct opt *o,
                        FILE *out)
{
    const char *base = (const char *)c;
    if (o->type == OPT_STRING) {
        const char *v = *(char *const *)(const void *)(base + o->offset);
        if (!v) {
            fputs("(unset)", out);
        } else if (o->secret) {
            char *r = ipd_redact_uri(v);
            fputs(r, out);
            free(r);
        } else {
            fputs(v, out);
        }
        return;
    }
    int64_t v = *(const int64_t *)(const void *)(base + o->offset);
    if (o->type == OPT_DURATION && v == IPD_TIME_NEVER)
        fputs("never", out);
    else if (o->type == OPT_DURATION && v % 1000 == 0)
        fprintf(out, "%llds", (long long)(v / 1000));
    else if (o->type == OPT_DURATION)
        fprintf(out, "%lldms", (long long)v);
    else if (o->type == OPT_BOOL)
        fputs(v ? "true" : "false", out);
    else
        fprintf(out, "%lld", (long long)v);
}

void ipd_config_print(const struct ipd_config *c, FILE *out)
{
    flockfile(out);
    for (size_t i = 0; i < IPD_ARRAY_LEN(opts); i++) {
        fprintf(out, "config %s = ", opts[i].name);
        print_value(c, &opts[i], out);
        fprintf(out, " (%s)\n", c->source[i]);
    }
    for (size_t i = 0; i < c->n_policies; i++) {
        const struct ipd_exec_policy *p = &c->policies[i];
        char sh[8][24];
        const int64_t shv[8] = {p->tenant_running,   p->tenant_queued,
                                p->tenant_results,   p->tenant_fetches,
                                p->tenant_callbacks, p->tenant_installs,
                                p->tenant_sessions,  p->tenant_session_memory};
        for (int k = 0; k < 8; k++)
            snprintf(sh[k], sizeof(sh[k]), "%lld%s",
                     (long long)(shv[k] < 0 ? -shv[k] : shv[k]),
                     shv[k] < 0 ? "%" : "");
        fprintf(out,
                "config policy.%s = timeout %llds, max-timeout %llds, "
                "memory %lld, processes %lld, output-limit %lld, tmp-size "
                "%lld, output-dir-size %lld, network %s, cpus %.3g, "
                "call-size %lld, calls %lld, calls-in-flight %lld, "
                "call-timeout %llds, max-call-wait %llds, "
                "tenant-running %s, tenant-queued %s, tenant-async-results "
                "%s, tenant-fetches %s, tenant-callbacks %s, "
                "tenant-installs %s, tenant-sessions %s, "
                "tenant-session-memory %s\n",
                p->name, (long long)(p->timeout_ms / 1000),
                (long long)(p->max_timeout_ms / 1000),
                (long long)p->memory_bytes, (long long)p->max_processes,
                (long long)p->output_bytes, (long long)p->tmp_bytes,
                (long long)p->output_dir_bytes, p->network ? "yes" : "no",
                (double)p->cpu_millis / 1000.0, (long long)p->call_bytes,
                (long long)p->calls, (long long)p->calls_in_flight,
                (long long)(p->call_timeout_ms / 1000),
                (long long)(p->max_call_wait_ms / 1000), sh[0], sh[1], sh[2],
                sh[3], sh[4], sh[5], sh[6], sh[7]);
    }
    funlockfile(out);
}

void ipd_config_usage(FILE *out)
{
    fprintf(out, "  --policy.NAME.FIELD    execution policy settings: "
                 "timeout, max-timeout, memory, processes,\n"
                 "                         output-limit, tmp-size, "
                 "output-dir-size, network, cpus (see docs/SANDBOX.md),\n"
                 "                         call-size, calls, calls-in-flight, "
                 "call-timeout, max-call-wait (docs/API.md),\n"
                 "                         tenant-running, tenant-queued, "
                 "tenant-async-results, tenant-fetches,\n"
                 "                         tenant-callbacks, tenant-installs, "
                 "tenant-sessions (N, N%% of the pool,\n"
                 "                         0: none; docs/DEPLOYMENT.md), "
                 "tenant-session-memory (a size or\n"
                 "                         N%% of sessions-memory; "
                 "docs/SANDBOX.md)\n");
    for (size_t i = 0; i < IPD_ARRAY_LEN(opts); i++)
        fprintf(out, "  --%-20s %s%s%s%s\n", opts[i].name, opts[i].help,
                opts[i].def ? " [" : "", opts[i].def ? opts[i].def : "",
                opts[i].def ? "]" : "");
}
