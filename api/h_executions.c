/*
 * h_executions.c - POST /v1/executions and GET /v1/executions/{id}.
 *
 * Executions never run on the HTTP event threads: the handler validates
 * the request and hands the job to the execution pool
 * (service/exec/pool.h).  A synchronous job's connection is suspended
 * (libmicrohttpd keeps it open and stops polling it) when the pool admits
 * the job and resumed from the pool's done hook; the handler replies on
 * the call that follows.  An asynchronous job is answered 202 at once and
 * read back by id.  Beyond the pool's queue the answer is 429 with
 * Retry-After.  Files, health and everything else keep being served by
 * the event threads meanwhile.
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../service/common/util.h"
#include "../service/exec/executor.h"
#include "../service/exec/pool.h"
#include "../service/fetch/fetch.h"
#include "../venv/requirement.h"
#include "http.h"

#define CODE_MAX (1024 * 1024)           /* CONTRACT.md: code at most 1 MiB */
#define BODY_MAX (8 * 1024 * 1024)       /* code escaped in JSON, and the rest */
#define FILES_MAX 100
#define CALLBACK_URL_MAX 2048

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

/* A callback_url the SSRF guard refuses on its face (scheme, an address
 * literal, a loopback name) is refused now, while the client is there to
 * be told; a name that needs DNS is checked at delivery.  Replies and
 * returns false on a refusal. */
static bool callback_url_ok(struct ipd_req *r, json_t *v)
{
    const char *u = json_string_value(v);
    struct ipd_buf err;
    enum ipd_err rc;
    if (!u || json_string_length(v) > CALLBACK_URL_MAX ||
        strlen(u) != json_string_length(v) ||
        (strncmp(u, "http://", 7) != 0 && strncmp(u, "https://", 8) != 0)) {
        ipd_reply_code(r, IPD_HE_INVALID_REQUEST,
                       "\"callback_url\" must be an http or https URL "
                       "of at most %d bytes",
                       CALLBACK_URL_MAX);
        return false;
    }
    ipd_buf_init(&err, 512);
    rc = ipd_fetch_url_check(r->app->fetch, u, &err);
    if (rc == IPD_ERR_FORBIDDEN || rc == IPD_ERR_INVALID) {
        /* Refused or unusable, the request is what is wrong: invalid. */
        char msg[768];
        snprintf(msg, sizeof(msg),
                 rc == IPD_ERR_FORBIDDEN
                     ? "\"callback_url\" is refused: %s; an operator can "
                       "allow such addresses with --fetch-allow (CIDRs)"
                     : "\"callback_url\" is not usable: %s",
                 err.buf);
        ipd_reply_failure(r, IPD_ERR_INVALID, msg, "checking the callback_url");
    } else if (rc) {
        ipd_reply_failure(r, rc, NULL, "checking the callback_url");
    }
    ipd_buf_release(&err);
    return rc == IPD_OK;
}

/* Check the optional fields (packages, async, callback_url, store_outputs,
 * session_id, variables): a session id of the wrong shape is nobody's
 * (404), and a session keeps its packages (400).  Replies and returns
 * true on a bad request. */
static bool unsupported(struct ipd_req *r, json_t *doc)
{
    json_t *v = json_object_get(doc, "packages");
    if (v && !json_is_null(v) && !json_is_array(v)) {
        ipd_reply_code(r, IPD_HE_INVALID_REQUEST,
                        "\"packages\" must be an array of requirement "
                        "strings");
        return true;
    }
    char why[128];
    if (!ipd_requirement_list_ok(v, why, sizeof(why))) {
        ipd_reply_code(r, IPD_HE_INVALID_REQUEST, "%s", why);
        return true;
    }
    v = json_object_get(doc, "async");
    if (v && !json_is_boolean(v) && !json_is_null(v)) {
        ipd_reply_code(r, IPD_HE_INVALID_REQUEST,
                        "\"async\" must be true or false");
        return true;
    }
    v = json_object_get(doc, "callback_url");
    if (v && !json_is_null(v) && !callback_url_ok(r, v))
        return true;
    v = json_object_get(doc, "session_id");
    if (v && !json_is_null(v)) {
        /* An id of the wrong shape is nobody's session. */
        if (!json_is_string(v) || !ipd_id_valid("sess", json_string_value(v))) {
            ipd_reply_code(r, IPD_HE_NOT_FOUND, "no such session");
            return true;
        }
        json_t *pk = json_object_get(doc, "packages");
        if (json_array_size(pk) > 0) {
            ipd_reply_code(r, IPD_HE_INVALID_REQUEST,
                            "a session keeps the packages it started with: "
                            "install them (POST /v1/packages) and create a "
                            "new session");
            return true;
        }
    }
    v = json_object_get(doc, "store_outputs");
    if (v && !json_is_boolean(v) && !json_is_null(v)) {
        ipd_reply_code(r, IPD_HE_INVALID_REQUEST,
                        "\"store_outputs\" must be true or false");
        return true;
    }
    v = json_object_get(doc, "variables");
    if (v && !json_is_null(v) && !json_is_object(v)) {
        ipd_reply_code(r, IPD_HE_INVALID_REQUEST,
                        "\"variables\" must be an object of name: value");
        return true;
    }
    return false;
}

/* The body's code, files and timeout, then its optional fields.  Replies
 * and returns false on a bad request. */
static bool body_ok(struct ipd_req *r, json_t *doc)
{
    json_t *code = json_object_get(doc, "code");
    json_t *files = json_object_get(doc, "files");
    json_t *timeout = json_object_get(doc, "timeout");
    if (!json_is_object(doc) || !json_is_string(code)) {
        ipd_reply_code(r, IPD_HE_INVALID_REQUEST,
                        "the body must be an object with a string \"code\"");
        return false;
    }
    if (json_string_length(code) > CODE_MAX) {
        ipd_reply_code(r, IPD_HE_PAYLOAD_TOO_LARGE,
                        "code is %zu bytes; at most %d are allowed",
                        json_string_length(code), CODE_MAX);
        return false;
    }
    if (files && !json_is_null(files) &&
        (!json_is_array(files) || json_array_size(files) > FILES_MAX)) {
        ipd_reply_code(r, IPD_HE_INVALID_REQUEST,
                        "\"files\" must be an array of at most %d file ids",
                        FILES_MAX);
        return false;
    }
    if (timeout && !json_is_null(timeout) &&
        (!json_is_number(timeout) || json_number_value(timeout) <= 0 ||
         json_number_value(timeout) > 86400)) {
        ipd_reply_code(r, IPD_HE_INVALID_REQUEST,
                        "\"timeout\" must be a positive number of seconds");
        return false;
    }
    return !unsupported(r, doc);
}

/* The key's policy, or a stricter one the request names (borrowed from
 * the key or doc).  Replies and returns NULL when neither can be used. */
static const char *pick_policy(struct ipd_req *r, json_t *doc)
{
    const char *policy = r->key.policy[0] ? r->key.policy : "standard";
    const struct ipd_exec_policy *kp = ipd_config_policy(r->app->cfg, policy);
    json_t *want = json_object_get(doc, "policy");
    if (!kp) {
        /* The operator removed the policy this key names from the config:
         * never fall back to another one. */
        ipd_reply_code(r, IPD_HE_FORBIDDEN,
                        "this key's policy %s is not configured on the "
                        "server; ask an administrator",
                        policy);
        return NULL;
    }
    if (!want || json_is_null(want))
        return policy;
    const char *name = json_string_value(want);
    const struct ipd_exec_policy *wp =
        name ? ipd_config_policy(r->app->cfg, name) : NULL;
    if (!wp) {
        ipd_reply_code(r, IPD_HE_INVALID_REQUEST,
                        "\"policy\" must name a configured policy "
                        "(strict, standard, networked, or one the "
                        "operator defined)");
        return NULL;
    }
    if (!ipd_policy_within(wp, kp)) {
        ipd_reply_code(r, IPD_HE_FORBIDDEN,
                        "policy %s is less strict than this key's "
                        "policy %s; a request can only tighten it",
                        name, policy);
        return NULL;
    }
    return name;
}

/* The body's file ids into j.  Replies 404 and returns false for an id
 * that can't be one of the caller's files. */
static bool add_files(struct ipd_req *r, struct ipd_exec_job *j,
                      json_t *files)
{
    size_t n = json_is_array(files) ? json_array_size(files) : 0;
    j->file_ids = ipd_xcalloc(n ? n : 1, sizeof(*j->file_ids));
    for (size_t i = 0; i < n; i++) {
        json_t *id = json_array_get(files, i);
        /* An id of the wrong shape can't be one of the caller's files. */
        if (!json_is_string(id) || !ipd_id_valid("file", json_string_value(id))) {
            ipd_reply_code(r, IPD_HE_NOT_FOUND, "no such file: %s",
                            json_is_string(id) ? json_string_value(id)
                                               : "(not a string)");
            return false;
        }
        j->file_ids[j->n_files++] = ipd_xstrdup(json_string_value(id));
    }
    return true;
}

/* A new job from a checked body (doc borrowed), run under policy. */
static struct ipd_exec_job *job_new(struct ipd_req *r, json_t *doc,
                                    const char *policy)
{
    struct ipd_exec_job *j = ipd_exec_job_new();
    json_t *code = json_object_get(doc, "code");
    json_t *timeout = json_object_get(doc, "timeout");
    snprintf(j->tenant, sizeof(j->tenant), "%s", r->key.tenant);
    snprintf(j->user_id, sizeof(j->user_id), "%s", r->user_id);
    snprintf(j->policy, sizeof(j->policy), "%s", policy);
    j->code_len = json_string_length(code);
    j->code = ipd_xmalloc(j->code_len + 1);
    memcpy(j->code, json_string_value(code), j->code_len + 1);
    if (timeout && json_is_number(timeout))
        j->timeout_ms = (int64_t)(json_number_value(timeout) * 1000.0);
    json_t *vars = json_object_get(doc, "variables");
    if (json_is_object(vars) && json_object_size(vars))
        j->variables = json_incref(vars);
    json_t *sid = json_object_get(doc, "session_id");
    if (json_is_string(sid))
        snprintf(j->session_id, sizeof(j->session_id), "%s",
                 json_string_value(sid));
    json_t *cbu = json_object_get(doc, "callback_url");
    if (json_is_string(cbu))
        j->callback_url = ipd_xstrdup(json_string_value(cbu));
    memcpy(j->secret, r->key.secret, sizeof(j->secret));
    j->store_outputs = !json_is_false(json_object_get(doc, "store_outputs"));
    j->admin = r->key.admin;
    memcpy(j->prev_secret, r->key.prev_secret, sizeof(j->prev_secret));
    j->secret_rotated_at_ms = r->key.secret_rotated_at_ms;
    json_t *pk = json_object_get(doc, "packages");
    size_t np = json_array_size(pk);
    j->packages = ipd_xcalloc(np ? np : 1, sizeof(*j->packages));
    for (size_t i = 0; i < np; i++)
        j->packages[j->n_packages++] =
            ipd_xstrdup(json_string_value(json_array_get(pk, i)));
    return j;
}

/* Parse and validate the body into a new job (*async: the caller does not
 * wait for it); replies and returns NULL on a bad request. */
static struct ipd_exec_job *parse_job(struct ipd_req *r, bool *async)
{
    struct ipd_exec_job *j = NULL;
    const char *policy = NULL;
    json_t *doc = ipd_req_json_body(r);
    if (!doc)
        return NULL;
    if (!body_ok(r, doc))
        goto out;
    policy = pick_policy(r, doc);
    if (!policy)
        goto out;
    j = job_new(r, doc, policy);
    /* The shares are the key's, whatever policy the request names. */
    const struct ipd_exec_policy *kp = ipd_req_key_policy(r);
    j->share_running = kp->tenant_running;
    j->share_queued = kp->tenant_queued;
    j->share_results = kp->tenant_results;
    j->share_callbacks = kp->tenant_callbacks;
    *async = json_is_true(json_object_get(doc, "async")) ||
             json_is_string(json_object_get(doc, "callback_url"));
    if (!add_files(r, j, json_object_get(doc, "files"))) {
        ipd_exec_job_free(j);
        j = NULL;
    }
out:
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

static void executions_finish(struct ipd_req *r)
{
    struct ipd_exec_pool *p = r->app->exec;
    struct ipd_exec_job *j = r->state;
    struct ipd_buf why;
    char id[IPD_ID_MAX];
    bool async = false;
    enum ipd_err rc;

    if (j) {
        IPD_ASSERT(j->finished);
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
    ipd_buf_init(&why, 512);
    /* An unknown, ended or busy session is told now, not after a place
     * in the queue (the worker checks again: it may change meanwhile). */
    if (j->session_id[0] &&
        (rc = ipd_executor_session_check(r->app->executor, j->tenant,
                                         j->user_id, j->session_id, &why))) {
        j->rc = rc;
        ipd_buf_add(&j->detail, why.buf, why.len);
        reply_result(r, j);
        ipd_exec_job_free(j);
        ipd_buf_release(&why);
        return;
    }
    if (async) {
        rc = ipd_exec_pool_submit_async(p, j, id, &why);
        if (!rc)
            ipd_reply_json(r, MHD_HTTP_ACCEPTED,
                           json_pack("{s:s, s:s}", "execution_id", id,
                                     "status", "queued"));
    } else {
        /* Ours again once conn_resume ran: cleanup frees it. */
        r->state = j;
        rc = ipd_exec_pool_submit(p, j, conn_suspend, conn_resume, r, &why);
    }
    if (rc) {
        r->state = NULL;
        r->retry_after_s = j->retry_after_s;
        ipd_exec_job_free(j);
        ipd_reply_failure(r, rc, why.buf, "queueing the execution");
    }
    ipd_buf_release(&why);
}

static void executions_cleanup(struct ipd_req *r)
{
    ipd_exec_job_free(r->state);
    r->state = NULL;
}

const struct ipd_handler ipd_h_executions_create = {
    .flags = IPD_H_AUTH | IPD_H_USER,
    .body_max = BODY_MAX,
    .finish = executions_finish,
    .cleanup = executions_cleanup,
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

/* GET /v1/executions/{id}: the caller's own asynchronous executions. */
static void executions_get(struct ipd_req *r)
{
    struct ipd_exec_pool *p = r->app->exec;
    struct ipd_exec_reply *x = ipd_xcalloc(1, sizeof(*x));
    enum ipd_err rc = IPD_ERR_NOT_FOUND;
    ipd_exec_reply_init(x);
    if (p)
        rc = ipd_exec_pool_lookup(p, r->param, r->key.tenant, r->user_id, x);
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
    struct MHD_Response *resp =
        MHD_create_response_from_callback(len, 64 * 1024, read_reply, x,
                                          free_reply);
    IPD_ASSERT(resp);
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE,
                            "application/json");
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
    ipd_reply_response(r, MHD_HTTP_OK, resp, len);
}

const struct ipd_handler ipd_h_executions_get = {
    .flags = IPD_H_AUTH | IPD_H_USER,
    .finish = executions_get,
};
