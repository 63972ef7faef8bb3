/*
 * daemon.c - libmicrohttpd set-up, the access handler that drives each
 * request through route, auth, begin/data/finish, the access log, CORS and
 * graceful shutdown.
 */
#include <arpa/inet.h>
#include <ctype.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "../service/common/live.h"
#include "../service/common/log.h"
#include "../service/common/util.h"
#include "../service/common/metrics.h"
#include "../service/common/token.h"
#include "../service/common/workq.h"
#include "http.h"

/* One open connection, for the deadlines of its request head and body
 * (slowloris: libmicrohttpd's idle timeout restarts with every byte, so
 * a client that trickles holds a connection for ever).  Linked from
 * NOTIFY_STARTED to NOTIFY_CLOSED, which libmicrohttpd runs before it
 * closes the fd: under conns_lock the fd is always still the
 * connection's. */
struct conn_entry {
    struct conn_entry *next, **pprev;
    int fd;
    int64_t deadline_ms;   /* monotonic; 0: none (a request being handled) */
    const char *phase;     /* "head", "body" or "idle" (keep-alive) */
    bool shut;             /* shutdown() done: libmicrohttpd closes it */
    struct ipd_live *live; /* a reference while it streams (ipd_req_stream):
                              the sweeper's keep-alive and stall check */
};

struct ipd_daemon {
    struct ipd_app *app;
    struct MHD_Daemon *mhd;
    uint16_t port;
    pthread_mutex_t lock;
    pthread_cond_t idle;
    unsigned in_flight; /* requests between first call and completion */
    pthread_mutex_t conns_lock;
    struct conn_entry *conns;           /* under conns_lock */
    int64_t head_ms, body_ms;           /* the deadlines */
    pthread_t sweeper;                  /* closes connections past them */
    bool sweeper_started, sweeper_stop; /* stop under conns_lock */
    pthread_cond_t sweep_wake;          /* CLOCK_MONOTONIC */
};

/* ---- request head and body deadlines ----------------------------------- */

static void on_connection(void *cls, struct MHD_Connection *conn,
                          void **socket_context,
                          enum MHD_ConnectionNotificationCode code)
{
    struct ipd_daemon *d = cls;
    struct conn_entry *e = *socket_context;
    pthread_mutex_lock(&d->conns_lock);
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
        const union MHD_ConnectionInfo *ci =
            MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
        e = ipd_xcalloc(1, sizeof(*e));
        e->fd = ci ? ci->connect_fd : -1;
        e->deadline_ms = ipd_mono_ms() + d->head_ms;
        e->phase = "head";
        e->next = d->conns;
        if (e->next)
            e->next->pprev = &e->next;
        e->pprev = &d->conns;
        d->conns = e;
        *socket_context = e;
    } else if (e) {
        *e->pprev = e->next;
        if (e->next)
            e->next->pprev = e->pprev;
        ipd_live_unref(e->live);
        free(e);
        *socket_context = NULL;
    }
    pthread_mutex_unlock(&d->conns_lock);
}

/* The connection's next deadline: phase "head", "idle" (a keep-alive
 * connection's next head) or "body" from now, or none (NULL phase). */
static void conn_deadline(struct ipd_daemon *d, struct MHD_Connection *conn,
                          const char *phase)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    struct conn_entry *e = ci ? ci->socket_context : NULL;
    if (!e)
        return;
    pthread_mutex_lock(&d->conns_lock);
    e->phase = phase;
    e->deadline_ms =
        !phase
            ? 0
            : ipd_mono_ms() + (strcmp(phase, "body") ? d->head_ms : d->body_ms);
    pthread_mutex_unlock(&d->conns_lock);
}

/* Every quarter second: shut down the connections past their deadline
 * (libmicrohttpd then reads the end and closes them as a client abort).
 * An idle keep-alive connection ("idle": no next request within the
 * head's deadline) is closed silently; a trickled head or body is
 * counted and logged once per sweep, after the lock. */
/* A stream to wake after the sweep: for its keep-alive (idle_ms
 * IPD_SSE_KEEPALIVE_MS), or at once (0) when it was shut down, so that
 * libmicrohttpd, which does not watch a suspended connection, sees it. */
struct poke {
    struct ipd_live *live; /* a reference */
    int64_t idle_ms;
};

/* A stream's part of a sweep (under conns_lock): shut it down when its
 * client hung up (a suspended connection is not read, so libmicrohttpd
 * would not notice until a write failed) or when what waits for it has
 * waited IPD_SSE_STALL_MS (it reads nothing: gone); either way it is
 * woken after the lock (the channel's lock is never taken under
 * conns_lock). */
static void sweep_stream(struct conn_entry *e, int64_t now, struct poke **poke,
                         size_t *n, size_t *cap)
{
    struct pollfd pf = {e->fd, POLLRDHUP, 0};
    int64_t since = ipd_live_waiting_since(e->live);
    bool gone = (poll(&pf, 1, 0) == 1 &&
                 (pf.revents & (POLLRDHUP | POLLHUP | POLLERR))) ||
                (since && now - since >= IPD_SSE_STALL_MS);
    if (gone) {
        e->shut = true;
        (void)shutdown(e->fd, SHUT_RDWR);
    }
    if (*n == *cap) {
        *cap = *cap ? *cap * 2 : 16;
        *poke = ipd_xrealloc(*poke, *cap * sizeof(**poke));
    }
    (*poke)[(*n)++] =
        (struct poke){ipd_live_ref(e->live), gone ? 0 : IPD_SSE_KEEPALIVE_MS};
}

/* Wake the streams of the sweep (a keep-alive when idle long enough). */
static void poke_streams(struct poke *poke, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        (void)ipd_live_poke(poke[i].live, poke[i].idle_ms);
        ipd_live_unref(poke[i].live);
    }
}

static void *sweeper_main(void *arg)
{
    struct ipd_daemon *d = arg;
    struct poke *poke = NULL;
    size_t n_poke = 0, cap_poke = 0;
    pthread_mutex_lock(&d->conns_lock);
    while (!d->sweeper_stop) {
        int64_t now = ipd_mono_ms();
        unsigned heads = 0, bodies = 0;
        for (struct conn_entry *e = d->conns; e; e = e->next) {
            if (e->live && !e->shut && e->fd >= 0)
                sweep_stream(e, now, &poke, &n_poke, &cap_poke);
            if (e->shut || !e->deadline_ms || now < e->deadline_ms || e->fd < 0)
                continue;
            e->shut = true;
            (void)shutdown(e->fd, SHUT_RDWR);
            heads += !strcmp(e->phase, "head");
            bodies += !strcmp(e->phase, "body");
        }
        pthread_mutex_unlock(&d->conns_lock);
        poke_streams(poke, n_poke);
        n_poke = 0;
        if (heads)
            ipd_warn("http: closed %u connection(s) whose request head did "
                     "not arrive within %lld s (request-header-timeout)",
                     heads, (long long)(d->head_ms / 1000));
        if (bodies)
            ipd_warn("http: closed %u connection(s) whose request body did "
                     "not arrive within %lld s (request-body-timeout)",
                     bodies, (long long)(d->body_ms / 1000));
        pthread_mutex_lock(&d->conns_lock);
        int64_t due = now + 250;
        struct timespec ts = {.tv_sec = (time_t)(due / 1000),
                              .tv_nsec = (long)(due % 1000) * 1000000L};
        if (!d->sweeper_stop)
            (void)pthread_cond_timedwait(&d->sweep_wake, &d->conns_lock, &ts);
    }
    pthread_mutex_unlock(&d->conns_lock);
    free(poke);
    return NULL;
}

void ipd_req_stream(struct ipd_req *r, struct ipd_live *live)
{
    struct ipd_daemon *d = r->daemon;
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(r->conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    struct conn_entry *e = ci ? ci->socket_context : NULL;
    if (!e || !d)
        return;
    pthread_mutex_lock(&d->conns_lock);
    ipd_live_unref(e->live);
    e->live = ipd_live_ref(live);
    e->deadline_ms = 0;
    e->phase = "stream";
    pthread_mutex_unlock(&d->conns_lock);
}

/* The request is over: its stream (if any) is no longer swept. */
static void conn_unstream(struct ipd_daemon *d, struct MHD_Connection *conn)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    struct conn_entry *e = ci ? ci->socket_context : NULL;
    struct ipd_live *live = NULL;
    if (!e)
        return;
    pthread_mutex_lock(&d->conns_lock);
    live = e->live;
    e->live = NULL;
    pthread_mutex_unlock(&d->conns_lock);
    ipd_live_unref(live);
}

static int64_t now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* A client's X-Request-Id is echoed when it is short and plain; anything
 * else could smuggle text into logs, so we make our own. */
static void set_request_id(struct ipd_req *r)
{
    const char *c = ipd_req_header(r, "X-Request-Id");
    size_t n = 0;
    if (c && !r->bad_header) {
        for (; c[n] && n < IPD_REQUEST_ID_MAX - 1; n++)
            if (!isalnum((unsigned char)c[n]) && !strchr("._:-", c[n]))
                break;
        if (n > 0 && !c[n]) {
            memcpy(r->request_id, c, n + 1);
            return;
        }
    }
    ipd_id_new("req", r->request_id);
}

/* The Origin when the configured CORS origins allow it. */
static const char *allowed_origin(struct ipd_req *r)
{
    const char *list = r->app->cfg->cors_origins;
    const char *origin = ipd_req_header(r, "Origin");
    if (!list || !origin || !*origin)
        return NULL;
    size_t olen = strlen(origin);
    for (const char *p = list; *p;) {
        while (*p == ' ' || *p == ',')
            p++;
        const char *e = p;
        while (*e && *e != ',' && *e != ' ')
            e++;
        size_t n = (size_t)(e - p);
        if ((n == 1 && *p == '*') || (n == olen && !strncmp(p, origin, n)))
            return origin;
        p = e;
    }
    return NULL;
}

static void reply_preflight(struct ipd_req *r, const char *allow)
{
    struct MHD_Response *resp =
        MHD_create_response_from_buffer(0, NULL, MHD_RESPMEM_PERSISTENT);
    IPD_ASSERT(resp);
    MHD_add_response_header(resp, MHD_HTTP_HEADER_ALLOW, allow);
    if (r->origin) {
        MHD_add_response_header(resp, "Access-Control-Allow-Methods", allow);
        MHD_add_response_header(
            resp, "Access-Control-Allow-Headers",
            "Authorization, Content-Type, X-User-Id, X-Request-Id, "
            "Mcp-Session-Id, MCP-Protocol-Version");
        MHD_add_response_header(resp, "Access-Control-Max-Age", "600");
    }
    ipd_reply_response(r, MHD_HTTP_NO_CONTENT, resp, 0);
}

/* First call: route, CORS, auth, begin.  May reply. */
static enum MHD_Result count_header(void *cls, enum MHD_ValueKind kind,
                                    const char *key, const char *value)
{
    (void)kind;
    (void)value;
    if (!strcasecmp(key, MHD_HTTP_HEADER_TRANSFER_ENCODING))
        (*(unsigned *)cls)++;
    return MHD_YES;
}

/* RFC 9112 section 6: a body is framed by chunked alone or by
 * Content-Length.  Any other transfer coding (gzip, "chunked, gzip",
 * "identity, chunked", a stray space libmicrohttpd would not parse), more
 * than one Transfer-Encoding field, or both framings: 400 and close,
 * before anything waits for a body it cannot delimit. */
static bool framing_ok(struct ipd_req *r)
{
    unsigned n = 0;
    MHD_get_connection_values(r->conn, MHD_HEADER_KIND, count_header, &n);
    const char *te = ipd_req_header(r, MHD_HTTP_HEADER_TRANSFER_ENCODING);
    if (!n || (n == 1 && te && !strcasecmp(te, "chunked") &&
               !ipd_req_header(r, MHD_HTTP_HEADER_CONTENT_LENGTH)))
        return true;
    r->close = true;
    ipd_reply_code(r, IPD_HE_INVALID_REQUEST,
                   "unsupported body framing: only \"Transfer-Encoding: "
                   "chunked\" or a Content-Length is accepted");
    return false;
}

static void start_request(struct ipd_req *r)
{
    const char *allow = NULL;
    if (!framing_ok(r))
        return;
    /* Before routing, auth or any handler reads a C string of it. */
    if (r->bytes_bad) {
        ipd_req_bytes_refuse(r);
        return;
    }
    r->origin = allowed_origin(r);
    r->handler = ipd_route(r, &allow);
    if (!r->handler && !strcmp(r->method, "OPTIONS") && allow) {
        reply_preflight(r, allow);
        return;
    }
    if (!r->handler && allow) {
        r->allow = allow;
        ipd_reply_code(r, IPD_HE_METHOD_NOT_ALLOWED,
                       "%s is not allowed on %s; allowed: %s", r->method,
                       r->path, allow);
        return;
    }
    if (!r->handler) {
        ipd_reply_code(r, IPD_HE_NOT_FOUND, "no such route: %s", r->path);
        return;
    }
    if (r->handler->body_max)
        r->body.max = r->handler->body_max;
    if ((r->handler->flags & IPD_H_AUTH) && !ipd_auth_key(r))
        return;
    if (r->principal.token && !(r->handler->scope & r->principal.scopes)) {
        const char *need = ipd_scope_name(r->handler->scope);
        ipd_reply_code(r, IPD_HE_FORBIDDEN,
                       need ? "this token's scopes do not include %s"
                            : "%s: this endpoint needs an API key, not a "
                              "token",
                       need ? need : r->path);
        return;
    }
    if ((r->handler->flags & IPD_H_ADMIN) && !r->principal.admin) {
        ipd_reply_code(r, IPD_HE_FORBIDDEN, "this endpoint needs an admin key");
        return;
    }
    if ((r->handler->flags & IPD_H_USER) && !ipd_auth_user(r))
        return;
    if (r->handler->begin)
        r->handler->begin(r);
}

static bool expects_body(struct ipd_req *r)
{
    const char *cl = ipd_req_header(r, MHD_HTTP_HEADER_CONTENT_LENGTH);
    const char *te = ipd_req_header(r, MHD_HTTP_HEADER_TRANSFER_ENCODING);
    return te || (cl && strcmp(cl, "0") != 0);
}

static void body_chunk(struct ipd_req *r, const char *data, size_t size)
{
    r->bytes_in += (int64_t)size;
    if (r->handler->data) {
        r->handler->data(r, data, size);
        return;
    }
    if (r->body_too_large)
        return;
    if (ipd_buf_add(&r->body, data, size)) {
        /* Keep reading and discarding so the client sees the answer. */
        r->body_too_large = true;
        ipd_buf_release(&r->body);
    }
}

/* Runs as soon as a request line is parsed, before the headers: from here
 * on the request counts as in flight, so a shutdown waits for it. */
static void *on_uri(void *cls, const char *uri, struct MHD_Connection *conn)
{
    struct ipd_daemon *d = cls;
    struct ipd_req *r = ipd_xcalloc(1, sizeof(*r));
    (void)conn;
    /* The target as sent, before libmicrohttpd splits off the query and
     * decodes the path in place: the router matches this. */
    size_t n = strlen(uri);
    const char *q = memchr(uri, '?', n);
    r->raw_path = ipd_xstrndup(uri, q ? (size_t)(q - uri) : n);
    r->raw_end = uri + n;
    r->app = d->app;
    r->daemon = d;
    r->start_us = now_us();
    ipd_buf_init(&r->body, IPD_JSON_BODY_MAX);
    pthread_mutex_lock(&d->lock);
    d->in_flight++;
    pthread_mutex_unlock(&d->lock);
    return r;
}

/* MHD_NO closes the connection: when libmicrohttpd refused our reply,
 * nothing else would ever answer it. */
static enum MHD_Result carry_on(const struct ipd_req *r)
{
    return r->unqueued ? MHD_NO : MHD_YES;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn,
                                  const char *url, const char *method,
                                  const char *version, const char *upload,
                                  size_t *upload_size, void **req_cls)
{
    struct ipd_daemon *d = cls;
    struct ipd_req *r = *req_cls;

    if (!r) {
        /* on_uri always runs first; this is only a safety net. */
        r = on_uri(d, url, conn);
        r->raw_end = NULL;
        *req_cls = r;
    }
    if (!r->method) {
        r->conn = conn;
        r->method = method;
        r->path = url;
        (void)ipd_req_bytes_check(r, version);
        set_request_id(r);
        /* The head is in; the body (if any) has its own deadline. */
        conn_deadline(d, conn, expects_body(r) ? "body" : NULL);
        /* Without a body, wait for the second call: libmicrohttpd closes
         * the connection after a reply queued before the request is
         * complete, and keep-alive matters to browsers and bots. */
        if (expects_body(r))
            start_request(r);
        else
            r->deferred = true;
        return carry_on(r);
    }
    if (r->deferred) {
        r->deferred = false;
        start_request(r);
        if (r->status)
            return carry_on(r);
    }
    if (*upload_size) {
        /* After an early reply libmicrohttpd discards the rest. */
        if (!r->status)
            body_chunk(r, upload, *upload_size);
        *upload_size = 0;
        return carry_on(r);
    }
    conn_deadline(d, conn, NULL); /* the body is complete */
    if (!r->status) {
        r->suspended = false;
        if (r->body_too_large)
            ipd_reply_code(r, IPD_HE_PAYLOAD_TOO_LARGE,
                           "request body over %zu bytes", r->body.max);
        else
            r->handler->finish(r);
    }
    if (!r->status && !r->suspended)
        ipd_reply_code(r, IPD_HE_INTERNAL_ERROR, "the handler did not reply");
    return carry_on(r);
}

/* A request's method or path as one access-log field: space, '"' and '%'
 * are percent-encoded so the field cannot end early or pose as another
 * (controls are escaped by the logger); cut with "..." past outsz. */
static const char *log_field(char *out, size_t outsz, const char *s)
{
    static const char hex[] = "0123456789ABCDEF";
    size_t o = 0, room = outsz - 4; /* "..." and the NUL always fit */
    for (; s && *s; s++) {
        unsigned char c = (unsigned char)*s;
        bool enc = c == ' ' || c == '"' || c == '%';
        if (o + (enc ? 3 : 1) > room)
            break;
        if (enc) {
            out[o++] = '%';
            out[o++] = hex[c >> 4];
            out[o++] = hex[c & 15];
        } else {
            out[o++] = (char)c;
        }
    }
    if (s && *s)
        out[o++] = '.', out[o++] = '.', out[o++] = '.';
    out[o] = '\0';
    return out;
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **req_cls,
                         enum MHD_RequestTerminationCode toe)
{
    struct ipd_daemon *d = cls;
    struct ipd_req *r = *req_cls;
    /* A keep-alive connection's next request head. */
    conn_unstream(d, conn);
    conn_deadline(d, conn, "idle");
    if (!r)
        return;
    if (r->handler && r->handler->cleanup)
        r->handler->cleanup(r);
    double ms = (double)(now_us() - r->start_us) / 1000.0;
    if (r->method)
        ipd_metrics_http_observe(d->app->metrics,
                                 r->route ? r->route : "unmatched", r->method,
                                 (int)r->status, ms / 1000.0);
    char method[64], path[1024];
    if (r->method)
        ipd_info(
            "access method=%s path=%s status=%u bytes=%llu duration_ms=%.3f "
            "tenant=%s user=%s request_id=%s%s%s%s",
            log_field(method, sizeof(method), r->method),
            log_field(path, sizeof(path), r->path), r->status,
            (unsigned long long)r->bytes_out, ms,
            r->authed ? r->principal.tenant : "-",
            r->principal.user_id[0] ? r->principal.user_id : "-", r->request_id,
            r->error_code ? " error=" : "", r->error_code ? r->error_code : "",
            toe == MHD_REQUEST_TERMINATED_COMPLETED_OK   ? ""
            : toe == MHD_REQUEST_TERMINATED_CLIENT_ABORT ? " aborted=client"
                                                         : " aborted=server");
    ipd_buf_release(&r->body);
    free(r->raw_path);
    free(r);
    *req_cls = NULL;
    pthread_mutex_lock(&d->lock);
    d->in_flight--;
    if (!d->in_flight)
        pthread_cond_broadcast(&d->idle);
    pthread_mutex_unlock(&d->lock);
}

IPD_PRINTF(2, 0)
static void on_mhd_log(void *cls, const char *fmt, va_list ap)
{
    char msg[512];
    (void)cls;
    vsnprintf(msg, sizeof(msg), fmt, ap);
    size_t n = strlen(msg);
    while (n && (msg[n - 1] == '\n' || msg[n - 1] == '\r'))
        msg[--n] = '\0';
    ipd_warn("http: %s", msg);
}

/* The sweeper of the request deadlines, with its lock and list. */
static bool sweeper_start(struct ipd_daemon *d)
{
    pthread_condattr_t ca;
    d->head_ms = d->app->cfg->request_header_timeout_ms;
    d->body_ms = d->app->cfg->request_body_timeout_ms;
    pthread_mutex_init(&d->conns_lock, NULL);
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&d->sweep_wake, &ca);
    pthread_condattr_destroy(&ca);
    d->sweeper_started = !pthread_create(&d->sweeper, NULL, sweeper_main, d);
    if (!d->sweeper_started)
        ipd_error("cannot start the request deadline thread");
    return d->sweeper_started;
}

/* Stop the sweeper and free d (libmicrohttpd stopped or never
 * started: no connection is left in the list). */
static void daemon_free(struct ipd_daemon *d)
{
    if (d->sweeper_started) {
        pthread_mutex_lock(&d->conns_lock);
        d->sweeper_stop = true;
        pthread_cond_broadcast(&d->sweep_wake);
        pthread_mutex_unlock(&d->conns_lock);
        pthread_join(d->sweeper, NULL);
    }
    pthread_mutex_destroy(&d->conns_lock);
    pthread_cond_destroy(&d->sweep_wake);
    pthread_mutex_destroy(&d->lock);
    pthread_cond_destroy(&d->idle);
    free(d);
}

enum ipd_err ipd_daemon_start(struct ipd_app *app, struct ipd_daemon **out)
{
    const struct ipd_config *c = app->cfg;
    struct sockaddr_storage ss;
    socklen_t sslen = 0;
    bool v6 = false;
    struct ipd_daemon *d = NULL;

    *out = NULL;
    if (ipd_listen_parse(c->listen, &ss, &sslen, &v6)) {
        /* ipd_config_load checked it already: only a caller that set
         * the config by hand gets here. */
        ipd_error("listen \"%s\" is not HOST:PORT (HOST: a numeric IPv4 "
                  "address, [IPv6], localhost, or * or nothing)",
                  c->listen);
        return IPD_ERR_INVALID;
    }
    /* One event loop per core: list requests are CPU-bound, and more
     * threads than cores only add scheduling delay to the tail. */
    unsigned threads = (unsigned)c->threads;
    if (!threads) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        threads = n < 2 ? 2 : (unsigned)n;
    }
    d = ipd_xcalloc(1, sizeof(*d));
    d->app = app;
    pthread_mutex_init(&d->lock, NULL);
    pthread_cond_init(&d->idle, NULL);
    if (!sweeper_start(d)) {
        daemon_free(d);
        return IPD_ERR_INTERNAL;
    }
    /* poll(), not epoll: with epoll libmicrohttpd 0.9.75 misses a client
     * that sends part of a body and closes at once (the connection sits in
     * CLOSE-WAIT and its upload is never cleaned up). */
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL |
                     MHD_USE_ITC | MHD_USE_ERROR_LOG | MHD_ALLOW_SUSPEND_RESUME;
    if (v6)
        flags |= MHD_USE_IPv6;
    d->mhd = MHD_start_daemon(
        flags, 0, NULL, NULL, on_request, d,
        /* The logger must come first to catch option errors too. */
        MHD_OPTION_EXTERNAL_LOGGER, on_mhd_log, d, MHD_OPTION_SOCK_ADDR,
        (struct sockaddr *)&ss, MHD_OPTION_THREAD_POOL_SIZE, threads,
        MHD_OPTION_CONNECTION_LIMIT, (unsigned)c->max_connections,
        MHD_OPTION_PER_IP_CONNECTION_LIMIT, (unsigned)c->max_connections_per_ip,
        MHD_OPTION_NOTIFY_CONNECTION, on_connection, d,
        MHD_OPTION_CONNECTION_TIMEOUT,
        (unsigned)((c->connection_timeout_ms + 999) / 1000),
        MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)c->connection_memory,
        MHD_OPTION_LISTEN_BACKLOG_SIZE, 512u, MHD_OPTION_NOTIFY_COMPLETED,
        on_completed, d, MHD_OPTION_URI_LOG_CALLBACK, on_uri, d,
        MHD_OPTION_END);
    if (!d->mhd) {
        ipd_error("cannot listen on %s (address in use, or not allowed)",
                  c->listen);
        daemon_free(d);
        return IPD_ERR_IO;
    }
    const union MHD_DaemonInfo *info =
        MHD_get_daemon_info(d->mhd, MHD_DAEMON_INFO_BIND_PORT);
    d->port = info ? info->port : 0;
    *out = d;
    return IPD_OK;
}

uint16_t ipd_daemon_port(const struct ipd_daemon *d)
{
    return d->port;
}

/* Wait up to timeout_ms for no request in flight; how many are left. */
static unsigned wait_idle(struct ipd_daemon *d, int64_t timeout_ms)
{
    struct timespec deadline;
    clock_gettime(CLOCK_REALTIME, &deadline);
    int64_t ns = deadline.tv_nsec + (timeout_ms % 1000) * 1000000;
    deadline.tv_sec += (time_t)(timeout_ms / 1000 + ns / 1000000000);
    deadline.tv_nsec = (long)(ns % 1000000000);
    pthread_mutex_lock(&d->lock);
    while (d->in_flight) {
        if (pthread_cond_timedwait(&d->idle, &d->lock, &deadline))
            break;
    }
    unsigned left = d->in_flight;
    pthread_mutex_unlock(&d->lock);
    return left;
}

unsigned ipd_daemon_shutdown(struct ipd_daemon *d, int64_t timeout_ms)
{
    unsigned left;
    if (!d)
        return 0;
    /* Stop accepting first: the listening socket closes now, while the
     * connections in flight keep being served. */
    MHD_socket lsock = MHD_quiesce_daemon(d->mhd);
    if (lsock != MHD_INVALID_SOCKET)
        close(lsock);
    left = wait_idle(d, timeout_ms);
    if (left)
        ipd_warn("shutdown: %u requests still running after %lld ms; "
                 "closing them",
                 left, (long long)timeout_ms);
    /* Executions still queued are answered 503 and running ones finish
     * (bounded by their timeouts): libmicrohttpd must not be stopped with
     * connections suspended.  Stopped, not freed: a keep-alive connection
     * can still bring a request that reaches them (it gets a 503); the
     * owner frees them after the daemon is gone. */
    if (d->app->exec || d->app->pkgs || d->app->bg || d->app->sess_wq ||
        d->app->mcp_wq) {
        /* MCP tools first: they ask this server's REST routes, which
         * answer them while the pools below still run. */
        ipd_workq_stop(d->app->mcp_wq);
        ipd_exec_pool_stop(d->app->exec);
        ipd_workq_stop(d->app->pkgs);
        ipd_workq_stop(d->app->bg);
        ipd_workq_stop(d->app->sess_wq);
        wait_idle(d, 2000);
    }
    MHD_stop_daemon(d->mhd);
    daemon_free(d);
    return left;
}
