/*
 * http.h - what the daemon, the router and the handlers share.
 *
 * api/ is the adapter for libmicrohttpd: MHD types appear in api/ headers
 * and nowhere outside api/.
 *
 * Request lifecycle (libmicrohttpd calls the access handler several times):
 *   1st call     the daemon allocates struct ipd_req in *req_cls, routes
 *                (404/405), answers CORS preflights, authenticates as the
 *                route's flags ask, then calls handler->begin;
 *   data calls   handler->data with each chunk of the body (or, without a
 *                data callback, the body is collected in req->body up to
 *                IPD_JSON_BODY_MAX);
 *   last call    handler->finish, which must reply.
 * Any step may reply early (an error); the rest of the body is then
 * discarded.  The request is freed in the completion callback only.
 */
#ifndef IPD_HTTP_H
#define IPD_HTTP_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include <jansson.h>
#include <microhttpd.h>

#include "../service/common/buf.h"
#include "../service/common/live.h"
#include "../service/config.h"
/* The execution pool (struct ipd_app's exec): the daemon stops it, the
 * admin status reads its counters. */
#include "../service/exec/pool.h"
#include "../storage/blob.h"
#include "../storage/filetype.h"
#include "../storage/meta.h"
#include "../storage/space.h"

#define IPD_JSON_BODY_MAX (1024 * 1024)
#define IPD_REQUEST_ID_MAX 129
/* A path parameter ({id}, {call_id}), its NUL included. */
#define IPD_ROUTE_PARAM_MAX (IPD_ID_MAX + 16)

/* Service-wide state; handlers borrow it. */
struct ipd_exec_pool;
struct ipd_fetch_opts;
struct ipd_workq;
struct ipd_scheduler;
struct ipd_venv;

struct ipd_key_cache;
struct ipd_tokens;
struct ipd_mcp;

struct ipd_app {
    const struct ipd_config *cfg;
    struct ipd_meta *meta;
    struct ipd_blobs *blobs;
    struct ipd_key_cache *key_cache; /* or NULL (service/keys.h) */
    struct ipd_tokens *tokens;       /* scoped tokens, or NULL: none
                                        (service/tokens.h) */
    struct ipd_mcp *mcp;             /* MCP sessions (mcp.h), or NULL */
    struct ipd_workq *mcp_wq;        /* the MCP tools' workers, or NULL */
    struct ipd_space *space;         /* the data dir's disk, or NULL */
    struct ipd_filetype *ft;
    struct ipd_exec_pool *exec;    /* NULL when executions are unavailable */
    struct ipd_executor *executor; /* its end-to-end check, or NULL */
    struct ipd_venv *venv;         /* NULL when packages are unavailable */
    struct ipd_workq *pkgs;        /* the installer thread, with venv */
    struct ipd_metrics *metrics;   /* NULL: no metrics (observes are no-ops) */
    const struct ipd_fetch_opts *fetch; /* URL ingest's limits and guard */
    struct ipd_workq *bg;               /* threads for blocking request work */
    struct ipd_workq *sess_wq;          /* the session workers: create, delete,
                                         * variables (h_sessions.c), or NULL */
    struct ipd_scheduler *sched;        /* the periodic jobs, or NULL */
    const char *sandbox;                /* what isolation is active, or NULL */
    pthread_mutex_t status_lock;        /* last_cleanup */
    json_t *last_cleanup; /* the last sweep's result and time, or NULL */
    int64_t started_ms;
};

/* The error codes of CONTRACT.md; reply.c maps each to its status in one
 * table. */
enum ipd_http_error {
    IPD_HE_INVALID_REQUEST,
    IPD_HE_INVALID_JSON,
    IPD_HE_INVALID_USER_ID,
    IPD_HE_UNAUTHORIZED,
    IPD_HE_FORBIDDEN,
    IPD_HE_NOT_FOUND,
    IPD_HE_METHOD_NOT_ALLOWED,
    IPD_HE_CONFLICT,
    IPD_HE_SESSION_BUSY,
    IPD_HE_SESSION_EXPIRED,
    IPD_HE_CALL_EXPIRED,
    IPD_HE_PAYLOAD_TOO_LARGE,
    IPD_HE_UNSUPPORTED_MEDIA_TYPE,
    IPD_HE_TOO_MANY_REQUESTS,
    IPD_HE_INTERNAL_ERROR,
    IPD_HE_UPSTREAM_ERROR,
    IPD_HE_UNAVAILABLE,
    IPD_HE_UPSTREAM_TIMEOUT,
    IPD_HE_QUOTA_EXCEEDED,
};

enum ipd_handler_flags {
    IPD_H_AUTH = 1 << 0,  /* needs a valid API key */
    IPD_H_USER = 1 << 1,  /* needs a valid X-User-Id */
    IPD_H_ADMIN = 1 << 2, /* needs an admin key */
};

struct ipd_req;

struct ipd_handler {
    unsigned flags;  /* enum ipd_handler_flags */
    uint32_t scope;  /* the enum ipd_scope a scoped token needs here; 0:
                        API keys only (service/common/principal.h) */
    size_t body_max; /* collected body limit; 0: IPD_JSON_BODY_MAX */
    /* Optional: called once after auth, before any body. */
    void (*begin)(struct ipd_req *r);
    /* Optional: each body chunk; without it the body goes to r->body. */
    void (*data)(struct ipd_req *r, const char *data, size_t size);
    /* Required: the body is complete; reply, or suspend the connection
     * (r->suspended) and reply when called again after the resume. */
    void (*finish)(struct ipd_req *r);
    /* Optional: release handler state (r->state), always called. */
    void (*cleanup)(struct ipd_req *r);
};

struct ipd_req {
    struct ipd_app *app;
    struct ipd_daemon *daemon; /* the one serving it */
    struct MHD_Connection *conn;
    const char *method;    /* borrowed from MHD */
    const char *path;      /* borrowed from MHD, without the query,
                              percent-decoded: for messages and the
                              log only, never for routing */
    char *raw_path;        /* owned: the path as sent (still
                              percent-encoded, without the query);
                              what the router matches */
    const char *raw_end;   /* the end of libmicrohttpd's copy of the
                              target, for ipd_req_bytes_check; NULL:
                              not known */
    const char *bytes_bad; /* what ipd_req_bytes_check refused, or
                              NULL */
    bool bad_path;         /* it refused the path (404) ... */
    bool bad_header;       /* ... or a header (400): no header is
                              read, X-Request-Id neither */
    const struct ipd_handler *handler;
    const char *route;                /* the route's pattern ("/v1/files/{id}"),
                                         "unmatched" or NULL before routing */
    char param[IPD_ROUTE_PARAM_MAX];  /* the route's first parameter ({id}),
                                         or "" */
    char param2[IPD_ROUTE_PARAM_MAX]; /* its second ({call_id}), or "" */
    char request_id[IPD_REQUEST_ID_MAX];
    const char *origin; /* Origin when CORS allows it, else NULL */
    const char *allow;  /* Allow header for 405 answers (static) */
    int64_t start_us;

    struct ipd_principal principal; /* who the request acts for: set by
                                       ipd_auth_key (user_id "" until
                                       ipd_auth_user) */
    bool authed;

    struct ipd_buf body; /* collected body (no data callback) */
    void *state;         /* the handler's own */

    unsigned status;    /* 0 until replied */
    uint64_t bytes_out; /* response body size */
    int64_t bytes_in;   /* body bytes received */
    bool body_too_large;
    bool deferred;          /* no body: start on the second call */
    bool close;             /* the reply closes the connection */
    bool unqueued;          /* libmicrohttpd refused the reply: the
                               connection is closed instead */
    bool suspended;         /* waiting for a worker; finish runs again */
    int retry_after_s;      /* Retry-After of a 429/503 (0: 5 s) */
    const char *error_code; /* for the access log */

    /* X-Execution-Id of the reply (borrowed: it lives until the reply
     * is queued), or NULL. */
    const char *execution_id;
    /* Mcp-Session-Id of the reply, or "" (h_mcp.c). */
    char mcp_session[IPD_ID_MAX];
};

/* Reply with a JSON document (steals json).  Adds the common headers. */
void ipd_reply_json(struct ipd_req *r, unsigned status, json_t *json);
/* Reply with JSON text already written into b (see json_out.h); takes
 * b's storage and leaves b empty. */
void ipd_reply_json_buf(struct ipd_req *r, unsigned status, struct ipd_buf *b);
/* Reply with the contract's error code e (its status from the table in
 * reply.c); the message is printf-style. */
void ipd_reply_code(struct ipd_req *r, enum ipd_http_error e, const char *fmt,
                    ...) IPD_PRINTF(3, 4);
/* The contract's error for err: the one place an enum ipd_err becomes an
 * HTTP status. */
enum ipd_http_error ipd_http_error_of(enum ipd_err err);
/* Reply with the contract's error for err.  The message is detail when
 * given, else made from what, which names the operation ("reading the
 * file list"). */
void ipd_reply_failure(struct ipd_req *r, enum ipd_err err, const char *detail,
                       const char *what);
/* Reply with a refusal of the core (service/exec/request.h): its
 * contract code's status and its message. */
struct ipd_refusal;
void ipd_reply_refusal(struct ipd_req *r, const struct ipd_refusal *f);
/* Reply with an MHD response built by the caller (takes ownership). */
void ipd_reply_response(struct ipd_req *r, unsigned status,
                        struct MHD_Response *resp, uint64_t body_len);
/* Reply with no body (204, 304). */
void ipd_reply_empty(struct ipd_req *r, unsigned status);

/* Server-Sent Events (sse.c) from an execution's live channel
 * (service/common/live.h).  A comment line goes to a stream idle for
 * IPD_SSE_KEEPALIVE_MS; a client that leaves an event (or that comment)
 * untaken for IPD_SSE_STALL_MS reads nothing and is treated as gone (its
 * connection is shut down). */
#define IPD_SSE_KEEPALIVE_MS 5000
#define IPD_SSE_STALL_MS 5000
/* The live channel's consumer hooks for r's connection: sleep suspends
 * it, wake resumes it (ipd_live_stream before the job is submitted). */
void ipd_sse_consumer(struct ipd_req *r, struct ipd_live_consumer *c);
/* Reply 200 text/event-stream with live's events from now on. */
void ipd_sse_reply(struct ipd_req *r, struct ipd_live *live);
/* daemon.c: r's connection streams live (its keep-alive and stall
 * check, by the daemon's sweeper, until the request is over). */
void ipd_req_stream(struct ipd_req *r, struct ipd_live *live);

/* request.c: header and query lookups (borrowed strings, NULL when
 * absent), and the JSON body.  A header value holds no NUL (see
 * ipd_req_bytes_check); a query value may, so it is only read with its
 * length. */
const char *ipd_req_header(struct ipd_req *r, const char *name);
/* A Content-Type value ct (NULL: none) names the media type want
 * ("application/json"), case-insensitively, with or without
 * parameters. */
bool ipd_media_type_is(const char *ct, const char *want);
/* Query value with its length (may contain NUL bytes: a caller that
 * wants a C string checks strlen against *len). */
const char *ipd_req_query_n(struct ipd_req *r, const char *name, size_t *len);
/* The request body parsed as JSON (duplicate keys refused), a new
 * reference; NULL after replying 400 invalid_json. */
json_t *ipd_req_json_body(struct ipd_req *r);

/* A list's page (GET /v1/files, GET /v1/executions): limit's default and
 * its largest value. */
#define IPD_LIST_DEFAULT 50
#define IPD_LIST_MAX 1000
/* The paging query of a list: limit, a whole number from 1 to
 * IPD_LIST_MAX (IPD_LIST_DEFAULT when absent), and cursor, one this
 * server made for ids of kind ("file", "exec"; ipd_cursor_parse_kind)
 * into *c, with *after pointing at c (NULL without a cursor).  Replies
 * 400 and returns false on a bad value. */
bool ipd_req_list_query(struct ipd_req *r, const char *kind, int64_t *limit,
                        struct ipd_cursor *c, const struct ipd_cursor **after);
/* Close a list's JSON in b (the items' array is open): `],"next_cursor":`
 * with the cursor of the last item (last_created_ms, last_id) when more
 * follow it, else null, and `}`.  b's error, if any. */
enum ipd_err ipd_list_json_end(struct ipd_buf *b, bool more,
                               int64_t last_created_ms, const char *last_id);

/* Check the bytes of r's head before anything reads them as C strings
 * (libmicrohttpd ends a header value, and its decoded path, at a NUL):
 * the target holds no NUL; the path's segments decode to no NUL, no
 * control byte, no "/" and valid UTF-8 (ipd_path_valid); no header name
 * or value holds a NUL or a control byte other than a tab.  (Query
 * values are read with their length: ipd_req_query_n.)  Sets r->bytes_bad to a
 * message for the client (static) and returns false when one fails; replies
 * nothing. */
bool ipd_req_bytes_check(struct ipd_req *r, const char *version);
/* Reply to a request ipd_req_bytes_check refused: 404 for its path (it
 * addresses nothing), else 400. */
void ipd_req_bytes_refuse(struct ipd_req *r);

/* Authenticate the Authorization header into r->principal (its key's
 * tenant, policy, admin flag); replies 401 and returns false on failure. */
bool ipd_auth_key(struct ipd_req *r);
/* Validate X-User-Id into r->principal.user_id; replies 400 and returns
 * false. */
bool ipd_auth_user(struct ipd_req *r);

/* Route a request: the handler for (method, path), filling r->param and
 * r->param2.
 * NULL with *allow set (a static "GET, POST, OPTIONS" list) when the path
 * exists but not the method; NULL with *allow NULL for an unknown path. */
const struct ipd_handler *ipd_route(struct ipd_req *r, const char **allow);
/* A raw (percent-encoded) path whose every segment decodes to bytes
 * that are valid UTF-8 with no NUL, no control byte and no "/" (an
 * encoded slash, "%2F", is refused as web servers do by default). */
bool ipd_path_valid(const char *raw);
/* The routing table, for tests that compare it with docs/openapi.json:
 * ipd_route_count() (method, pattern) pairs, one per handler (HEAD and
 * OPTIONS are implied, never listed).  ipd_route_at sets both to static
 * strings ("GET", "/v1/files/{id}"), or to NULL when i is out of range. */
size_t ipd_route_count(void);
void ipd_route_at(size_t i, const char **method, const char **pattern);

/* Handlers, one file per resource. */
extern const struct ipd_handler ipd_h_healthz, ipd_h_readyz, ipd_h_openapi;
extern const struct ipd_handler ipd_h_console, ipd_h_console_asset;
extern const struct ipd_handler ipd_h_files_create, ipd_h_files_list,
    ipd_h_files_get, ipd_h_files_content, ipd_h_files_delete;
extern const struct ipd_handler ipd_h_executions_create, ipd_h_executions_get,
    ipd_h_executions_list, ipd_h_executions_cancel;
extern const struct ipd_handler ipd_h_calls_answer;
extern const struct ipd_handler ipd_h_tokens_create;
extern const struct ipd_handler ipd_h_mcp_post;
extern const struct ipd_handler ipd_h_mcp_delete;
extern const struct ipd_handler ipd_h_admin_cleanup;
extern const struct ipd_handler ipd_h_packages_list, ipd_h_packages_install;
extern const struct ipd_handler ipd_h_admin_status, ipd_h_metrics;
extern const struct ipd_handler ipd_h_sessions_create, ipd_h_sessions_list,
    ipd_h_session_get, ipd_h_session_delete, ipd_h_session_variables;

/* Remember a sweep's result for the admin status (h_admin.c); borrows
 * res's fields.  Thread-safe. */
struct ipd_sweep_result;
void ipd_app_note_sweep(struct ipd_app *app, const struct ipd_sweep_result *res,
                        enum ipd_err rc, int64_t at_ms);

/* The policy of r's principal (its tenant's shares of the shared pools,
 * exec/policy.h), or NULL when the config has none of that name. */
const struct ipd_exec_policy *ipd_req_key_policy(struct ipd_req *r);

/* POST /v1/packages runs on a bg pool of one thread with this queue. */
#define IPD_INSTALL_QUEUE_MAX 16
/* Session create, delete and variables calls (h_sessions.c) run on their
 * own workers: each holds one for seconds at most (5 s waiting for a
 * session's uid or its end, 10 s for a listing), so four serve a node's
 * sessions (max-sessions 8 by default) and give two tenants two each
 * (a tenant runs at most half of them). */
#define IPD_SESSION_WORKERS 4
#define IPD_SESSION_QUEUE_MAX 64

/* Request work that blocks (bg.c), on a worker queue (service/workq.h;
 * free it while the daemon still runs).  Suspend r and run fn(r,
 * stopping) on a worker, then resume r: the handler's finish runs again
 * and replies from r->state (fn must not reply).  stopping: the service
 * is shutting down and the work had not started; fn should only record
 * that (a 503).  false (r not suspended) when the queue is full or
 * stopping, or q is NULL. */
bool ipd_bg_submit(struct ipd_workq *q, struct ipd_req *r,
                   void (*fn)(struct ipd_req *r, bool stopping));
/* ipd_bg_submit as a job of r's tenant (its key's policy's share v of
 * the queue: running or waiting, at most half the threads running);
 * when refused, replies 429 (Retry-After 1 s) naming what (the
 * share's policy field, e.g. "tenant-fetches") and returns false. */
bool ipd_bg_submit_shared(struct ipd_workq *q, struct ipd_req *r,
                          void (*fn)(struct ipd_req *r, bool stopping),
                          int64_t v, const char *what, const char *field);

/* Queue run(arg), then done(arg), as a job of r's tenant (share v, as
 * ipd_bg_submit_shared), not tied to r's connection: work that feeds a
 * stream r already answers with (its consumer resumes the connection).
 * When refused, replies 429 or 503 and returns false (done never runs). */
bool ipd_bg_submit_detached(struct ipd_workq *q, struct ipd_req *r,
                            void (*run)(void *arg, bool stopping),
                            void (*done)(void *arg), void *arg, int64_t v,
                            const char *what, const char *field);

/* The HTTP daemon. */
struct ipd_daemon;
/* Start listening with the config's limits.  *out is new. */
enum ipd_err ipd_daemon_start(struct ipd_app *app, struct ipd_daemon **out);
/* The bound port (useful with port 0). */
uint16_t ipd_daemon_port(const struct ipd_daemon *d);
/* Stop accepting, wait up to timeout_ms for in-flight requests, stop and
 * free.  Returns how many requests were still running at the end. */
unsigned ipd_daemon_shutdown(struct ipd_daemon *d, int64_t timeout_ms);

#endif
