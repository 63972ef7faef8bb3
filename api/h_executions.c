/*
 * h_executions.c - POST /v1/executions, GET /v1/executions (the caller's
 * recent ones) and GET /v1/executions/{id}.
 *
 * Executions never run on the HTTP event threads: the handler has the
 * body parsed into a job (service/exec/request.h), replies with the
 * refusal if there is one, and hands the job to the execution pool
 * (service/exec/pool.h).  A synchronous job's connection is suspended
 * (libmicrohttpd keeps it open and stops polling it) when the pool admits
 * the job and resumed from the pool's done hook; the handler replies on
 * the call that follows, with the job's id (the pool gave it at submit;
 * while it runs, GET /v1/executions lists it) in X-Execution-Id.  An
 * asynchronous job is answered 202 at once and read back by id.  Beyond
 * the pool's queue the answer is 429 with Retry-After.  Files, health
 * and everything else keep being served by the event threads meanwhile.
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../service/common/json_out.h"
#include "../service/common/util.h"
#include "../service/exec/executor.h"
#include "../service/exec/pool.h"
#include "../service/exec/request.h"
#include "http.h"

#define BODY_MAX (8 * 1024 * 1024) /* code escaped in JSON, and the rest */

/* The failures whose detail from the executor goes to the client: the
 * request was at fault, or the service is unavailable or busy (an
 * internal failure's stays in the server log).  Without a detail, the
 * fallback, or (NULL) reply.c's message for the error. */
static const struct {
    enum ipd_err rc;
    const char *fallback;
} told[] = {
    {IPD_ERR_NOT_FOUND, "no such file"},
    {IPD_ERR_INVALID, "invalid execution request"},
    {IPD_ERR_TOO_LARGE, "request too large"},
    {IPD_ERR_UNAVAILABLE, NULL},
    {IPD_ERR_BUSY, NULL},
    {IPD_ERR_IN_USE, NULL}, /* the session runs another call */
    {IPD_ERR_GONE, NULL},   /* the session ended */
};

/* The executor's answer to a synchronous job. */
static void reply_result(struct ipd_req *r, struct ipd_exec_job *j)
{
    const char *msg = NULL;

    if (!j->rc) {
        ipd_reply_json(r, MHD_HTTP_OK, j->result);
        j->result = NULL;
        return;
    }
    for (size_t i = 0; i < IPD_ARRAY_LEN(told); i++)
        if (told[i].rc == j->rc)
            msg = j->detail.len ? j->detail.buf : told[i].fallback;
    ipd_reply_failure(r, j->rc, msg, "running the code");
}

/* A job refused before it was queued (rc, why's detail), answered as the
 * executor's answer would be; j and why are released. */
static void refuse_job(struct ipd_req *r, struct ipd_exec_job *j,
                       enum ipd_err rc, struct ipd_buf *why)
{
    j->rc = rc;
    ipd_buf_add(&j->detail, why->buf, why->len);
    reply_result(r, j);
    ipd_exec_job_free(j);
    ipd_buf_release(why);
}

/* Parse and check the body into a new job (*async: the caller does not
 * wait for it); replies and returns NULL on a bad request. */
static struct ipd_exec_job *parse_job(struct ipd_req *r, bool *async)
{
    const struct ipd_config *cfg = r->app->cfg;
    struct ipd_exec_request_env env = {.policies = cfg->policies,
                                       .n_policies = cfg->n_policies,
                                       .fetch = r->app->fetch};
    struct ipd_exec_job *j = NULL;
    struct ipd_refusal refusal;
    json_t *doc = ipd_req_json_body(r);
    if (!doc)
        return NULL;
    if (ipd_exec_request_parse(&env, &r->principal, doc, &j, async, &refusal))
        ipd_reply_refusal(r, &refusal);
    json_decref(doc);
    return j;
}

/* Under the pool's queue lock, before a worker can see the job: the
 * connection is suspended before the done hook can resume it. */
static void conn_suspend(void *ctx)
{
    struct ipd_req *r = ctx;
    r->suspended = true;
    MHD_suspend_connection(r->conn);
}

/* The job is over: let libmicrohttpd call the handler again. */
static void conn_resume(void *ctx)
{
    struct ipd_req *r = ctx;
    MHD_resume_connection(r->conn);
}

/* A request's state between the calls of its handler: a synchronous
 * job (ours again once done), or a streamed one's live channel (the job
 * is the pool's). */
struct exec_state {
    struct ipd_exec_job *job;
    struct ipd_live *live; /* a reference */
    bool detach;
    char id[IPD_ID_MAX];
};

/* Whether the client asked for a stream: "stream": true, or an Accept
 * that names text/event-stream. */
static bool wants_stream(struct ipd_req *r, const struct ipd_exec_job *j)
{
    const char *accept = ipd_req_header(r, MHD_HTTP_HEADER_ACCEPT);
    return j->stream || (accept && strstr(accept, "text/event-stream"));
}

/* A scoped token runs code with what its scopes allow (docs/API.md
 * "Scoped tokens"): a session needs "sessions", input files
 * "files:read", and its generated files are stored only with
 * "files:write" (else they come back inline only); packages and
 * callbacks are for API keys.  Refused: replied 403 (j freed) and true. */
static bool refuse_token_fields(struct ipd_req *r, struct ipd_exec_job *j)
{
    const struct ipd_principal *p = &r->principal;
    const char *msg = NULL;
    if (!p->token)
        return false;
    if (j->session_id[0] && !(p->scopes & IPD_SCOPE_SESSIONS))
        msg = "this token's scopes do not include sessions (session_id)";
    else if (j->n_files && !(p->scopes & IPD_SCOPE_FILES_READ))
        msg = "this token's scopes do not include files:read (files)";
    else if (j->n_packages)
        msg = "packages are installed with an API key, not a token";
    else if (j->callback_url)
        msg = "callback_url needs an API key, not a token";
    if (!(p->scopes & IPD_SCOPE_FILES_WRITE))
        j->store_outputs = false;
    if (!msg)
        return false;
    ipd_reply_code(r, IPD_HE_FORBIDDEN, "%s", msg);
    ipd_exec_job_free(j);
    return true;
}

/* What only a stream can use, asked for without one: replied 400 (j
 * freed) and true. */
static bool refuse_stream_only(struct ipd_req *r, struct ipd_exec_job *j)
{
    const char *msg = NULL;
    if (wants_stream(r, j))
        return false;
    if (j->detach)
        msg = "\"detach\" is for a streamed execution (\"stream\": true or "
              "Accept: text/event-stream)";
    /* Nobody could answer the calls of a run that does not stream. */
    else if (j->n_functions)
        msg = "\"functions\" are for a streamed execution (\"stream\": "
              "true or Accept: text/event-stream): only its client can "
              "answer their calls";
    if (!msg)
        return false;
    ipd_reply_code(r, IPD_HE_INVALID_REQUEST, "%s", msg);
    ipd_exec_job_free(j);
    return true;
}

/* A streamed job: checked now as the executor would check it (a refusal
 * is an ordinary JSON error), then queued with this connection as its
 * live channel's consumer, and answered at once: the stream (keep-alives
 * while it waits in the queue, then its events). */
static void start_stream(struct ipd_req *r, struct ipd_exec_job *j, bool async)
{
    struct ipd_exec_request rq;
    struct ipd_live_consumer c;
    struct ipd_buf why;
    enum ipd_err rc;

    if (async && !j->detach) {
        ipd_reply_code(r, IPD_HE_INVALID_REQUEST,
                       "a streamed execution is not asynchronous: \"async\" "
                       "and \"callback_url\" need \"detach\": true (its "
                       "result is then kept and called back like an "
                       "asynchronous one's)");
        ipd_exec_job_free(j);
        return;
    }
    ipd_buf_init(&why, 512);
    ipd_exec_job_request(j, &rq);
    rc = ipd_executor_precheck(r->app->executor, &rq, &why);
    if (rc) {
        refuse_job(r, j, rc, &why);
        return;
    }
    struct exec_state *st = ipd_xcalloc(1, sizeof(*st));
    st->detach = j->detach;
    st->live = ipd_live_new();
    if (!st->live) {
        rc = IPD_ERR_UNAVAILABLE;
        ipd_buf_adds(&why, "the server is out of file descriptors; retry");
    } else {
        ipd_sse_consumer(r, &c);
        ipd_live_stream(st->live, &c);
        j->live = ipd_live_ref(st->live);
        rc = ipd_exec_pool_submit_live(r->app->exec, j, st->detach, st->id,
                                       &why);
    }
    if (rc) {
        ipd_live_unstream(st->live);
        ipd_live_unref(st->live);
        free(st);
        r->retry_after_s = j->retry_after_s;
        ipd_exec_job_free(j);
        ipd_reply_failure(r, rc, why.buf, "queueing the execution");
        ipd_buf_release(&why);
        return;
    }
    ipd_buf_release(&why);
    r->state = st;
    r->execution_id = st->id;
    ipd_sse_reply(r, st->live);
}

static void executions_finish(struct ipd_req *r)
{
    struct ipd_exec_pool *p = r->app->exec;
    struct exec_state *st = r->state;
    struct ipd_exec_job *j = NULL;
    struct ipd_buf why;
    char id[IPD_ID_MAX];
    bool async = false;
    enum ipd_err rc;

    if (st) {
        j = st->job;
        IPD_ASSERT(j->finished);
        r->execution_id = j->exec_id; /* j lives until cleanup */
        reply_result(r, j);
        return;
    }
    if (!p) {
        ipd_reply_failure(r, IPD_ERR_UNAVAILABLE,
                          "executions are unavailable on this server: the "
                          "sandbox could not be set up (see the server log)",
                          "running the code");
        return;
    }
    j = parse_job(r, &async);
    if (!j)
        return;
    if (refuse_token_fields(r, j) || refuse_stream_only(r, j))
        return;
    ipd_buf_init(&why, 512);
    /* An unknown, ended or busy session is told now, not after a place
     * in the queue (the worker checks again: it may change meanwhile). */
    if (j->session_id[0] &&
        (rc = ipd_executor_session_check(r->app->executor, j->tenant,
                                         j->user_id, j->session_id, &why))) {
        refuse_job(r, j, rc, &why);
        return;
    }
    if (wants_stream(r, j)) {
        ipd_buf_release(&why);
        start_stream(r, j, async);
        return;
    }
    if (async) {
        rc = ipd_exec_pool_submit_async(p, j, id, &why);
        if (!rc)
            ipd_reply_json(r, MHD_HTTP_ACCEPTED,
                           json_pack("{s:s, s:s}", "execution_id", id, "status",
                                     "queued"));
    } else {
        /* Ours again once conn_resume ran: cleanup frees it. */
        st = ipd_xcalloc(1, sizeof(*st));
        st->job = j;
        r->state = st;
        rc = ipd_exec_pool_submit(p, j, conn_suspend, conn_resume, r, &why);
    }
    if (rc) {
        free(r->state);
        r->state = NULL;
        r->retry_after_s = j->retry_after_s;
        ipd_exec_job_free(j);
        ipd_reply_failure(r, rc, why.buf, "queueing the execution");
    }
    ipd_buf_release(&why);
}

/* A streamed job's client is gone (or got the result): its output is no
 * longer kept, and unless it said "detach", the run is cancelled (killed
 * like a timeout; nothing when it is over already). */
static void executions_cleanup(struct ipd_req *r)
{
    struct exec_state *st = r->state;
    if (!st)
        return;
    if (st->live) {
        ipd_live_unstream(st->live);
        /* Queued: taken off the queue; running: killed. */
        if (!st->detach && !ipd_live_ended(st->live))
            (void)ipd_exec_pool_cancel(r->app->exec, st->id,
                                       r->principal.tenant,
                                       r->principal.user_id);
        ipd_live_unref(st->live);
    }
    ipd_exec_job_free(st->job);
    free(st);
    r->state = NULL;
}

const struct ipd_handler ipd_h_executions_create = {
    .flags = IPD_H_AUTH | IPD_H_USER,
    .scope = IPD_SCOPE_EXECUTIONS,
    .body_max = BODY_MAX,
    .finish = executions_finish,
    .cleanup = executions_cleanup,
};

/* One execution of the list: {execution_id, status, created_at,
 * session_id, duration}. */
static enum ipd_err jw_summary(struct ipd_buf *b,
                               const struct ipd_exec_summary *x)
{
    enum ipd_err rc = ipd_buf_adds(b, "{\"execution_id\":");
    if (!rc)
        rc = ipd_jw_str(b, x->id);
    if (!rc)
        rc = ipd_buf_adds(b, ",\"status\":");
    if (!rc)
        rc = ipd_jw_str(b, x->status);
    if (!rc)
        rc = ipd_buf_adds(b, ",\"created_at\":");
    if (!rc)
        rc = ipd_jw_time(b, x->created_at_ms);
    if (!rc)
        rc = ipd_buf_adds(b, ",\"session_id\":");
    if (!rc)
        rc = x->session_id[0] ? ipd_jw_str(b, x->session_id)
                              : ipd_buf_adds(b, "null");
    if (!rc)
        rc = ipd_buf_adds(b, ",\"duration\":");
    if (!rc && x->duration_ms < 0)
        rc = ipd_buf_adds(b, "null");
    else if (!rc)
        rc = ipd_buf_addf(b, "%lld.%03lld", (long long)(x->duration_ms / 1000),
                          (long long)(x->duration_ms % 1000));
    if (!rc)
        rc = ipd_buf_addch(b, '}');
    return rc;
}

/* GET /v1/executions: the caller's executions this node holds, newest
 * first, paged like the file list.  Without executions on this server
 * there are none (an empty page), as GET /v1/executions/{id} finds none. */
static void executions_list(struct ipd_req *r)
{
    struct ipd_cursor cursor;
    const struct ipd_cursor *after = NULL;
    struct ipd_exec_list list = {0};
    int64_t limit = IPD_LIST_DEFAULT;

    if (!ipd_req_list_query(r, "exec", &limit, &cursor, &after))
        return;
    if (r->app->exec)
        ipd_exec_pool_list(r->app->exec, r->principal.tenant,
                           r->principal.user_id, after, (size_t)limit, &list);
    struct ipd_buf b;
    ipd_buf_init(&b, IPD_BUF_UNLIMITED);
    enum ipd_err rc = ipd_buf_adds(&b, "{\"executions\":[");
    for (size_t i = 0; !rc && i < list.n; i++) {
        if (i)
            rc = ipd_buf_addch(&b, ',');
        if (!rc)
            rc = jw_summary(&b, &list.items[i]);
    }
    const struct ipd_exec_summary *last =
        list.n ? &list.items[list.n - 1] : NULL;
    if (!rc)
        rc = ipd_list_json_end(&b, list.more && last,
                               last ? last->created_at_ms : 0,
                               last ? last->id : NULL);
    ipd_exec_list_release(&list);
    IPD_ASSERT(rc == IPD_OK);
    ipd_reply_json_buf(r, MHD_HTTP_OK, &b);
}

const struct ipd_handler ipd_h_executions_list = {
    .flags = IPD_H_AUTH | IPD_H_USER,
    .scope = IPD_SCOPE_EXECUTIONS,
    .finish = executions_list,
};

/* The reply of a lookup, streamed: head, the result file, tail. */
static ssize_t read_reply(void *cls, uint64_t pos, char *buf, size_t max)
{
    struct ipd_exec_reply *x = cls;
    uint64_t head = x->head.len, file = (uint64_t)x->len;
    size_t n = 0;
    if (pos < head) {
        n = (size_t)(head - pos) < max ? (size_t)(head - pos) : max;
        memcpy(buf, x->head.buf + pos, n);
        return (ssize_t)n;
    }
    if (pos < head + file) {
        size_t want = (size_t)(head + file - pos) < max
                          ? (size_t)(head + file - pos)
                          : max;
        ssize_t got = pread(x->fd, buf, want, (off_t)(pos - head));
        /* The file was complete when opened and is never rewritten: a
         * short read is an I/O error, which ends the response. */
        return got > 0 ? got : MHD_CONTENT_READER_END_WITH_ERROR;
    }
    pos -= head + file;
    if (pos >= x->tail.len)
        return MHD_CONTENT_READER_END_OF_STREAM;
    n = (size_t)(x->tail.len - pos) < max ? (size_t)(x->tail.len - pos) : max;
    memcpy(buf, x->tail.buf + pos, n);
    return (ssize_t)n;
}

static void free_reply(void *cls)
{
    ipd_exec_reply_release(cls);
    free(cls);
}

/* GET /v1/executions/{id}: the caller's own executions (a synchronous
 * one's result is null: it went to its caller). */
static void executions_get(struct ipd_req *r)
{
    struct ipd_exec_pool *p = r->app->exec;
    struct ipd_exec_reply *x = ipd_xcalloc(1, sizeof(*x));
    enum ipd_err rc = IPD_ERR_NOT_FOUND;
    ipd_exec_reply_init(x);
    if (p)
        rc = ipd_exec_pool_lookup(p, r->param, r->principal.tenant,
                                  r->principal.user_id, x);
    if (rc) {
        ipd_reply_failure(r, rc,
                          rc == IPD_ERR_NOT_FOUND
                              ? "no such execution (results are kept for "
                                "a limited time)"
                              : NULL,
                          "reading the result");
        free_reply(x);
        return;
    }
    uint64_t len = x->head.len + (uint64_t)x->len + x->tail.len;
    struct MHD_Response *resp = MHD_create_response_from_callback(
        len, 64 * 1024, read_reply, x, free_reply);
    IPD_ASSERT(resp);
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE,
                            "application/json");
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
    ipd_reply_response(r, MHD_HTTP_OK, resp, len);
}

/* DELETE /v1/executions/{id}: cancel the caller's queued or running
 * execution; 202 at once (its status turns "cancelled" once its
 * processes are gone: GET it). */
static void executions_cancel(struct ipd_req *r)
{
    struct ipd_exec_pool *p = r->app->exec;
    enum ipd_err rc = p ? ipd_exec_pool_cancel(p, r->param, r->principal.tenant,
                                               r->principal.user_id)
                        : IPD_ERR_NOT_FOUND;
    if (rc) {
        ipd_reply_failure(r, rc,
                          "no such execution queued or running (a finished "
                          "one cannot be cancelled)",
                          "cancelling the execution");
        return;
    }
    ipd_reply_json(
        r, MHD_HTTP_ACCEPTED,
        json_pack("{s:s, s:b}", "execution_id", r->param, "cancelled", 1));
}

const struct ipd_handler ipd_h_executions_cancel = {
    .flags = IPD_H_AUTH | IPD_H_USER,
    .scope = IPD_SCOPE_EXECUTIONS,
    .finish = executions_cancel,
};

const struct ipd_handler ipd_h_executions_get = {
    .flags = IPD_H_AUTH | IPD_H_USER,
    .scope = IPD_SCOPE_EXECUTIONS,
    .finish = executions_get,
};
