/*
 * mongo.c - the MongoDB connection (mongo-c-driver) shared by the MongoDB
 * metadata store (meta_mongo.c) and the GridFS blob store (blob_gridfs.c).
 *
 * Process-wide state.  mongoc_init runs once per process (pthread_once)
 * and mongoc_cleanup is never called: the driver forbids calling
 * mongoc_init again after mongoc_cleanup, and a process may create and
 * free several connections in turn (tests do; a daemon could reconnect),
 * so a "last one out" refcount would break the next ipd_mongo_new.  What
 * mongoc_init allocates is process-lifetime and stays reachable, so leak
 * checkers don't report it.  The driver's own log lines (warnings and
 * errors; debug and info are dropped) go through service/log.h.
 *
 * Bounds.  Every operation is bounded by op_timeout_ms (5 s unless the URI
 * sets serverSelectionTimeoutMS): server selection, connect and socket
 * timeouts take it unless the URI sets them, so a dead or hung server
 * turns into MONGOC_ERROR_SERVER_SELECTION or MONGOC_ERROR_STREAM, which
 * ipd__mongo_err maps to IPD_ERR_UNAVAILABLE.  Writes use w:majority with
 * wtimeout = op_timeout_ms and retryWrites=true unless the URI says
 * otherwise; the driver itself only retries writes on servers that
 * support it (replica sets and sharded clusters, not a standalone).
 *
 * Start-up.  The pool connects lazily and, being multi-threaded, waits the
 * whole serverSelectionTimeoutMS for an unreachable server, which would
 * overshoot a shorter connect_timeout_ms.  So ipd_mongo_new probes with a
 * throw-away single-threaded client per attempt ("try once" selection:
 * a refused connection fails at once) and retries with a backoff until
 * connect_timeout_ms has passed.
 *
 * The breaker.  A pooled client waits the whole serverSelectionTimeoutMS
 * for a server that is gone, and the callers are HTTP event threads: a
 * dead database would hold every one of them (and /healthz behind them)
 * for a timeout per request.  So the first operation that finds the server
 * unreachable (ipd__mongo_err: server selection or stream errors) marks
 * the connection down; gated operations (ipd_mongo_gate, which the
 * stores call before each operation) then fail at once with
 * IPD_ERR_UNAVAILABLE, and a monitor thread pings with a throw-away
 * client every MONITOR_INTERVAL_MS until the server answers, which closes
 * the breaker.  Only operations already waiting when the server died
 * wait out their bound.  Which connection to trip is the one whose client
 * this thread popped last (ipd__mongo_err has no other way to know).
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "mongo_internal.h"

#include "../service/common/log.h"

#define DEFAULT_DB "interpd"
#define DEFAULT_OP_TIMEOUT_MS 5000
#define PROBE_BACKOFF_MIN_MS 50
#define PROBE_BACKOFF_MAX_MS 1000
#define MONITOR_INTERVAL_MS 250

/* The connection whose client this thread holds (set by ipd__mongo_pop,
 * cleared by ipd__mongo_push): the breaker ipd__mongo_err trips. */
static _Thread_local struct ipd_mongo *tls_held;

static pthread_once_t init_once = PTHREAD_ONCE_INIT;

/* The driver's log lines, through ours.  Its debug and info chatter (and
 * the trace level) are of no use to an operator. */
static void driver_log(mongoc_log_level_t level, const char *domain,
                       const char *message, void *user_data)
{
    (void)user_data;
    /* Servers that advertise sessions but lack endSessions (FerretDB 1.x)
     * make every client destroy warn; the sessions just time out there. */
    if (strstr(message, "\"endSessions\""))
        return;
    switch (level) {
    case MONGOC_LOG_LEVEL_ERROR:
    case MONGOC_LOG_LEVEL_CRITICAL:
        ipd_error("mongoc %s: %s", domain, message);
        break;
    case MONGOC_LOG_LEVEL_WARNING:
        ipd_warn("mongoc %s: %s", domain, message);
        break;
    default: break;
    }
}

static void driver_init(void)
{
    mongoc_init();
    mongoc_log_set_handler(driver_log, NULL);
}

static void sleep_ms(int64_t ms)
{
    struct timespec ts;

    if (ms <= 0)
        return;
    ts.tv_sec = (time_t)(ms / 1000);
    ts.tv_nsec = (long)(ms % 1000) * 1000000L;
    while (nanosleep(&ts, &ts) && errno == EINTR)
        ;
}

static int32_t clamp_i32(int64_t v)
{
    if (v < 1)
        return 1;
    if (v > INT32_MAX)
        return INT32_MAX;
    return (int32_t)v;
}

/* Set an int32 URI option unless the URI already carries it. */
static void uri_default_i32(mongoc_uri_t *uri, const char *key, int32_t v)
{
    if (!mongoc_uri_has_option(uri, key))
        mongoc_uri_set_option_as_int32(uri, key, v);
}

/* Apply our defaults to uri: timeouts, appname, write concern, retries. */
static void uri_apply_defaults(mongoc_uri_t *uri, int64_t op_timeout_ms)
{
    const mongoc_write_concern_t *have = mongoc_uri_get_write_concern(uri);
    mongoc_write_concern_t *wc = NULL;
    int32_t t = clamp_i32(op_timeout_ms);

    uri_default_i32(uri, MONGOC_URI_SERVERSELECTIONTIMEOUTMS, t);
    uri_default_i32(uri, MONGOC_URI_CONNECTTIMEOUTMS, t);
    uri_default_i32(uri, MONGOC_URI_SOCKETTIMEOUTMS, t);
    if (!mongoc_uri_get_appname(uri))
        mongoc_uri_set_appname(uri, "interpd");
    if (!mongoc_uri_has_option(uri, MONGOC_URI_RETRYWRITES))
        mongoc_uri_set_option_as_bool(uri, MONGOC_URI_RETRYWRITES, true);
    /* A write acknowledged by a majority survives a fail-over; wtimeout
     * keeps a replica set without a majority from hanging the request. */
    if (!have ||
        mongoc_write_concern_get_w(have) == MONGOC_WRITE_CONCERN_W_DEFAULT) {
        wc = mongoc_write_concern_new();
        mongoc_write_concern_set_wmajority(wc, t);
        mongoc_uri_set_write_concern(uri, wc);
    }
    mongoc_write_concern_destroy(wc);
}

/* One ping on a fresh single-threaded client whose bounds fit in
 * budget_ms.  [out] err on failure. */
static bool probe_once(const mongoc_uri_t *base, int64_t budget_ms,
                       bson_error_t *err)
{
    mongoc_uri_t *uri = mongoc_uri_copy(base);
    mongoc_client_t *c = NULL;
    bson_t cmd = BSON_INITIALIZER;
    bool ok = false;
    int32_t t = clamp_i32(budget_ms);

    if (!uri) {
        bson_set_error(err, MONGOC_ERROR_CLIENT, 0, "URI copy failed");
        goto out;
    }
    if (mongoc_uri_get_option_as_int32(uri, MONGOC_URI_CONNECTTIMEOUTMS, t) > t)
        mongoc_uri_set_option_as_int32(uri, MONGOC_URI_CONNECTTIMEOUTMS, t);
    if (mongoc_uri_get_option_as_int32(uri, MONGOC_URI_SERVERSELECTIONTIMEOUTMS,
                                       t) > t)
        mongoc_uri_set_option_as_int32(uri, MONGOC_URI_SERVERSELECTIONTIMEOUTMS,
                                       t);
    c = mongoc_client_new_from_uri_with_error(uri, err);
    if (!c)
        goto out;
    mongoc_client_set_error_api(c, MONGOC_ERROR_API_VERSION_2);
    BSON_APPEND_INT32(&cmd, "ping", 1);
    ok = mongoc_client_command_simple(c, "admin", &cmd, NULL, NULL, err);
out:
    bson_destroy(&cmd);
    mongoc_client_destroy(c);
    mongoc_uri_destroy(uri);
    return ok;
}

/* Ping until the server answers or connect_timeout_ms has passed. */
static enum ipd_err probe(struct ipd_mongo *mg, int64_t connect_timeout_ms)
{
    int64_t start = ipd_mono_ms();
    int64_t deadline =
        start + (connect_timeout_ms > 0 ? connect_timeout_ms : 0);
    int64_t backoff = PROBE_BACKOFF_MIN_MS;
    bson_error_t err;
    enum ipd_err rc = IPD_OK;
    int attempts = 0;

    memset(&err, 0, sizeof(err));
    for (;;) {
        int64_t left = deadline - ipd_mono_ms();

        attempts++;
        if (probe_once(mg->uri,
                       left < mg->op_timeout_ms ? left : mg->op_timeout_ms,
                       &err))
            break;
        left = deadline - ipd_mono_ms();
        if (left <= 0) {
            ipd_error("mongo: %s unreachable after %lld ms (%d attempts): %s",
                      mg->redacted, (long long)(ipd_mono_ms() - start),
                      attempts, err.message);
            rc = IPD_ERR_UNAVAILABLE;
            goto out;
        }
        sleep_ms(backoff < left ? backoff : left);
        backoff = backoff * 2 > PROBE_BACKOFF_MAX_MS ? PROBE_BACKOFF_MAX_MS
                                                     : backoff * 2;
    }
out:
    return rc;
}

/* Wait up to ms on brk_cond (the caller holds brk_lock). */
static void monitor_wait(struct ipd_mongo *mg, int64_t ms)
{
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    int64_t ns = until.tv_nsec + (ms % 1000) * 1000000;
    until.tv_sec += (time_t)(ms / 1000 + ns / 1000000000);
    until.tv_nsec = (long)(ns % 1000000000);
    pthread_cond_timedwait(&mg->brk_cond, &mg->brk_lock, &until);
}

/* Sleeps while the breaker is closed; while open, pings every
 * MONITOR_INTERVAL_MS and closes it at the first answer. */
static void *monitor_main(void *arg)
{
    struct ipd_mongo *mg = arg;
    bson_error_t err;

    pthread_mutex_lock(&mg->brk_lock);
    while (!mg->stop) {
        if (!atomic_load(&mg->down)) {
            pthread_cond_wait(&mg->brk_cond, &mg->brk_lock);
            continue;
        }
        pthread_mutex_unlock(&mg->brk_lock);
        bool up = probe_once(mg->uri, mg->op_timeout_ms, &err);
        pthread_mutex_lock(&mg->brk_lock);
        if (up) {
            atomic_store(&mg->down, false);
            ipd_info("mongo: %s answers again; requests use it again",
                     mg->redacted);
            continue;
        }
        if (!mg->stop)
            monitor_wait(mg, MONITOR_INTERVAL_MS);
    }
    pthread_mutex_unlock(&mg->brk_lock);
    return NULL;
}

static void trip(struct ipd_mongo *mg, const bson_error_t *e)
{
    if (atomic_exchange(&mg->down, true))
        return;
    ipd_warn("mongo: %s unreachable (%s): requests fail at once with 503 "
             "until it answers a ping",
             mg->redacted, e->message);
    pthread_mutex_lock(&mg->brk_lock);
    pthread_cond_signal(&mg->brk_cond);
    pthread_mutex_unlock(&mg->brk_lock);
}

enum ipd_err ipd_mongo_gate(struct ipd_mongo *mg)
{
    return atomic_load(&mg->down) ? IPD_ERR_UNAVAILABLE : IPD_OK;
}

enum ipd_err ipd_mongo_new(const char *uri, int64_t connect_timeout_ms,
                           struct ipd_mongo **out)
{
    return ipd_mongo_new_with(uri, connect_timeout_ms, 0, out);
}

enum ipd_err ipd_mongo_new_with(const char *uri, int64_t connect_timeout_ms,
                                int64_t op_timeout_ms, struct ipd_mongo **out)
{
    struct ipd_mongo *mg = NULL;
    bson_error_t err;
    const char *db;
    enum ipd_err rc = IPD_OK;

    *out = NULL;
    pthread_once(&init_once, driver_init);
    mg = ipd_xcalloc(1, sizeof(*mg));
    atomic_init(&mg->down, false);
    pthread_mutex_init(&mg->brk_lock, NULL);
    pthread_cond_init(&mg->brk_cond, NULL);
    mg->redacted = ipd_redact_uri(uri ? uri : "");
    if (!uri) {
        rc = IPD_ERR_INVALID;
        goto out;
    }
    mg->uri = mongoc_uri_new_with_error(uri, &err);
    if (!mg->uri) {
        ipd_error("mongo: invalid URI %s: %s", mg->redacted, err.message);
        rc = IPD_ERR_INVALID;
        goto out;
    }
    mg->op_timeout_ms = mongoc_uri_get_option_as_int32(
        mg->uri, MONGOC_URI_SERVERSELECTIONTIMEOUTMS,
        clamp_i32(op_timeout_ms > 0 ? op_timeout_ms : DEFAULT_OP_TIMEOUT_MS));
    uri_apply_defaults(mg->uri, mg->op_timeout_ms);
    db = mongoc_uri_get_database(mg->uri);
    mg->db = ipd_xstrdup(db && db[0] ? db : DEFAULT_DB);

    mg->pool = mongoc_client_pool_new_with_error(mg->uri, &err);
    if (!mg->pool) {
        ipd_error("mongo: %s: %s", mg->redacted, err.message);
        rc = IPD_ERR_INVALID;
        goto out;
    }
    if (!mongoc_client_pool_set_error_api(mg->pool,
                                          MONGOC_ERROR_API_VERSION_2)) {
        rc = IPD_ERR_INTERNAL;
        goto out;
    }
    rc = probe(mg, connect_timeout_ms);
    if (rc)
        goto out;
    if (pthread_create(&mg->monitor, NULL, monitor_main, mg)) {
        rc = IPD_ERR_INTERNAL;
        goto out;
    }
    mg->monitor_started = true;
    *out = mg;
    mg = NULL;
out:
    ipd_mongo_free(mg);
    return rc;
}

void ipd_mongo_free(struct ipd_mongo *mg)
{
    if (!mg)
        return;
    if (mg->monitor_started) {
        pthread_mutex_lock(&mg->brk_lock);
        mg->stop = true;
        pthread_cond_signal(&mg->brk_cond);
        pthread_mutex_unlock(&mg->brk_lock);
        pthread_join(mg->monitor, NULL);
    }
    pthread_mutex_destroy(&mg->brk_lock);
    pthread_cond_destroy(&mg->brk_cond);
    /* Every popped client must be back by now (the stores are freed
     * first); the pool destroys them. */
    mongoc_client_pool_destroy(mg->pool);
    mongoc_uri_destroy(mg->uri);
    free(mg->db);
    free(mg->redacted);
    free(mg);
}

mongoc_client_t *ipd__mongo_pop(struct ipd_mongo *mg)
{
    mongoc_client_t *c = mongoc_client_pool_pop(mg->pool);

    /* pop only fails when the pool was created without error checking of
     * its URI, which ipd_mongo_new did. */
    IPD_ASSERT(c != NULL);
    tls_held = mg;
    return c;
}

void ipd__mongo_push(struct ipd_mongo *mg, mongoc_client_t *c)
{
    tls_held = NULL;
    if (c)
        mongoc_client_pool_push(mg->pool, c);
}

/* Server error codes that mean "not now" rather than "never": the server
 * is shutting down, stepping down, out of time or unreachable. */
static bool server_code_transient(uint32_t code)
{
    switch (code) {
    case 6:     /* HostUnreachable */
    case 7:     /* HostNotFound */
    case 50:    /* MaxTimeMSExpired */
    case 64:    /* WriteConcernFailed (wtimeout) */
    case 89:    /* NetworkTimeout */
    case 91:    /* ShutdownInProgress */
    case 112:   /* WriteConflict */
    case 134:   /* ReadConcernMajorityNotAvailableYet */
    case 189:   /* PrimarySteppedDown */
    case 202:   /* NetworkInterfaceExceededTimeLimit */
    case 262:   /* ExceededTimeLimit */
    case 9001:  /* SocketException */
    case 10107: /* NotWritablePrimary */
    case 11600: /* InterruptedAtShutdown */
    case 11602: /* InterruptedDueToReplStateChange */
    case 13435: /* NotPrimaryNoSecondaryOk */
    case 13436: /* NotPrimaryOrSecondary */ return true;
    default: return false;
    }
}

enum ipd_err ipd__mongo_err(const bson_error_t *e, const char *what)
{
    enum ipd_err rc = IPD_ERR_INTERNAL;

    switch (e->domain) {
    case MONGOC_ERROR_SERVER_SELECTION:
    case MONGOC_ERROR_STREAM:
        rc = IPD_ERR_UNAVAILABLE;
        if (tls_held)
            trip(tls_held, e);
        break;
    case MONGOC_ERROR_SERVER:
    case MONGOC_ERROR_WRITE_CONCERN:
    case MONGOC_ERROR_QUERY:
    case MONGOC_ERROR_COLLECTION:
        if (e->code == 11000 || e->code == 11001 || e->code == 12582)
            rc = IPD_ERR_CONFLICT; /* duplicate key */
        else if (e->code == 14031) /* OutOfDiskSpace */
            rc = IPD_ERR_NO_SPACE;
        else if (server_code_transient(e->code))
            rc = IPD_ERR_UNAVAILABLE;
        break;
    default: break;
    }
    if (rc == IPD_ERR_UNAVAILABLE)
        ipd_warn("mongo: %s: unavailable: %s (domain %u, code %u)", what,
                 e->message, e->domain, e->code);
    else if (rc == IPD_ERR_INTERNAL)
        ipd_error("mongo: %s: %s (domain %u, code %u)", what, e->message,
                  e->domain, e->code);
    return rc;
}

enum ipd_err ipd_mongo_ping(struct ipd_mongo *mg)
{
    mongoc_client_t *c = NULL;
    bson_t cmd = BSON_INITIALIZER;
    bson_error_t err;
    enum ipd_err rc = ipd_mongo_gate(mg);

    if (rc)
        return rc;
    c = ipd__mongo_pop(mg);
    BSON_APPEND_INT32(&cmd, "ping", 1);
    if (!mongoc_client_command_simple(c, "admin", &cmd, NULL, NULL, &err))
        rc = ipd__mongo_err(&err, "ping");
    bson_destroy(&cmd);
    ipd__mongo_push(mg, c);
    return rc;
}

const char *ipd_mongo_database(const struct ipd_mongo *mg)
{
    return mg->db;
}

enum ipd_err ipd_mongo_drop_database(struct ipd_mongo *mg)
{
    mongoc_client_t *c = ipd__mongo_pop(mg);
    mongoc_database_t *db = mongoc_client_get_database(c, mg->db);
    bson_error_t err;
    enum ipd_err rc = IPD_OK;

    if (!mongoc_database_drop_with_opts(db, NULL, &err))
        rc = ipd__mongo_err(&err, "drop database");
    mongoc_database_destroy(db);
    ipd__mongo_push(mg, c);
    return rc;
}
