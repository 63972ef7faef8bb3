/*
 * h_executions.c - POST /v1/executions, and the workers that run them.
 *
 * Executions never run on the HTTP event threads: the handler validates the
 * request, suspends the connection (libmicrohttpd keeps it open and stops
 * polling it) and queues a job; one of `slots` long-lived worker threads
 * runs it through the executor and resumes the connection, and the handler
 * replies on the call that follows.  Beyond `queue` waiting jobs the answer
 * is 429 with Retry-After.  Files, health and everything else keep being
 * served by the event threads meanwhile.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "../service/exec/callbacks.h"
#include "../service/common/crypto.h"
#include "../service/exec/executor.h"
#include "../service/common/log.h"
#include "../service/common/metrics.h"
#include "../service/common/util.h"
#include "../service/common/workq.h"
#include "../venv/requirement.h"
#include "http.h"

#define CODE_MAX (1024 * 1024)           /* CONTRACT.md: code at most 1 MiB */
#define BODY_MAX (8 * 1024 * 1024)       /* code escaped in JSON, and the rest */
#define FILES_MAX 100
#define ASYNC_MAX 10000                  /* results kept at once */
#define CALLBACK_URL_MAX 2048

struct job {
    struct ipd_exec_pool *pool;
    struct ipd_req *r;               /* suspended while queued or running */
    char tenant[IPD_TENANT_MAX];
    char user_id[IPD_USER_ID_MAX];
    char *code;                      /* owned */
    size_t code_len;
    char **file_ids;                 /* owned array of owned strings */
    size_t n_files;
    int64_t timeout_ms;
    char policy[IPD_POLICY_MAX];
    json_t *variables;               /* new reference or NULL */
    char **packages;                 /* owned array of owned strings */
    size_t n_packages;
    enum ipd_err rc;                 /* the executor's answer */
    json_t *result;                  /* new reference when rc == IPD_OK */
    struct ipd_buf detail;
    bool done;
    /* Asynchronous executions: no connection waits for the job. */
    bool async;
    char exec_id[IPD_ID_MAX];
    char *callback_url;              /* owned, or NULL */
    char secret[IPD_SHA256_HEX];     /* the tenant's callback secret */
};

/* An asynchronous execution's state, kept result_ttl after it is done. */
struct async_entry {
    struct async_entry *next;
    char id[IPD_ID_MAX];
    char tenant[IPD_TENANT_MAX];
    char user_id[IPD_USER_ID_MAX];
    const char *status;              /* "queued", "running", "done" */
    json_t *result;                  /* new reference once done */
    int64_t done_ms;
};

struct ipd_exec_pool {
    struct ipd_executor *ex;
    struct ipd_metrics *metrics; /* borrowed, may be NULL */
    struct ipd_workq *q;         /* the slots and the queue */
    pthread_mutex_t lock;
    /* Outcomes since start (under lock): the admin status. */
    uint64_t n_total, n_success, n_error, n_timeout, n_oom, n_failed;
    struct async_entry *async;       /* under lock */
    size_t n_async;
    int64_t result_ttl_ms;
    struct ipd_callbacks *callbacks; /* borrowed, may be NULL */
};

static void job_free(struct job *j)
{
    if (!j)
        return;
    free(j->code);
    for (size_t i = 0; i < j->n_files; i++)
        free(j->file_ids[i]);
    free(j->file_ids);
    json_decref(j->result);
    json_decref(j->variables);
    for (size_t i = 0; i < j->n_packages; i++)
        free(j->packages[i]);
    free(j->packages);
    free(j->callback_url);
    ipd_buf_release(&j->detail);
    free(j);
}

/* ---- asynchronous executions --------------------------------------------- */

/* Drop results older than the ttl.  Under p->lock. */
static void async_prune(struct ipd_exec_pool *p, int64_t now)
{
    for (struct async_entry **pp = &p->async; *pp;) {
        struct async_entry *e = *pp;
        if (e->result && now - e->done_ms >= p->result_ttl_ms) {
            *pp = e->next;
            json_decref(e->result);
            free(e);
            p->n_async--;
        } else {
            pp = &e->next;
        }
    }
}

static struct async_entry *async_find(struct ipd_exec_pool *p, const char *id)
{
    for (struct async_entry *e = p->async; e; e = e->next)
        if (!strcmp(e->id, id))
            return e;
    return NULL;
}

/* The result of an asynchronous job that did not produce one: the same
 * object shape, success false, the reason in error. */
static json_t *failure_result(const struct job *j)
{
    const char *type = "ServiceError";
    if (j->rc == IPD_ERR_NOT_FOUND)
        type = "NotFound";
    else if (j->rc == IPD_ERR_INVALID || j->rc == IPD_ERR_TOO_LARGE)
        type = "InvalidRequest";
    return json_pack("{s:s, s:b, s:n, s:b, s:s, s:s, s:{s:s, s:s, s:s}}",
                     "execution_id", j->exec_id, "success", 0, "exit_code",
                     "timed_out", 0, "stdout", "", "stderr", "", "error",
                     "type", type, "message",
                     j->detail.len ? j->detail.buf : ipd_err_name(j->rc),
                     "traceback", "");
}

/* An asynchronous job ended: keep its result, send the callback. */
static void async_done(struct ipd_exec_pool *p, struct job *j)
{
    json_t *result = j->rc == IPD_OK ? json_incref(j->result)
                                     : failure_result(j);
    char *body = j->callback_url && p->callbacks
                     ? json_dumps(result, JSON_COMPACT)
                     : NULL;
    /* Stored before the callback goes out: a bot that polls as soon as
     * it is called back finds the result. */
    pthread_mutex_lock(&p->lock);
    struct async_entry *e = async_find(p, j->exec_id);
    if (e) {
        e->status = "done";
        e->result = result;
        e->done_ms = ipd_now_ms();
        result = NULL;
    }
    pthread_mutex_unlock(&p->lock);
    json_decref(result);
    if (body)
        ipd_callbacks_send(p->callbacks, j->callback_url, body, strlen(body),
                           j->secret);
    free(body);
}

/* The job is over: let libmicrohttpd call the handler again. */
static void job_finish(struct ipd_exec_pool *p, struct job *j)
{
    pthread_mutex_lock(&p->lock);
    j->done = true;
    pthread_mutex_unlock(&p->lock);
    MHD_resume_connection(j->r->conn);
}

static void run_job(struct ipd_exec_pool *p, struct job *j)
{
    struct ipd_exec_request rq = {
        .tenant = j->tenant,
        .user_id = j->user_id,
        .code = j->code,
        .code_len = j->code_len,
        .file_ids = (const char *const *)j->file_ids,
        .n_files = j->n_files,
        .timeout_ms = j->timeout_ms,
        .variables = j->variables,
        .policy = j->policy,
        .packages = (const char *const *)j->packages,
        .n_packages = j->n_packages,
        .execution_id = j->exec_id[0] ? j->exec_id : NULL,
    };
    int64_t t0 = ipd_now_ms();
    j->rc = ipd_executor_run(p->ex, &rq, &j->result, &j->detail);
    /* Outcomes of code that ran, plus runs the service failed to start;
     * a client's bad request (unknown file, bad package) is neither. */
    enum ipd_metrics_exec_outcome o;
    double secs = (double)(ipd_now_ms() - t0) / 1000.0;
    bool counted = true;
    if (j->rc == IPD_OK) {
        json_t *res = json_object_get(j->result, "resources");
        json_t *et = json_object_get(j->result, "execution_time");
        if (json_is_number(et))
            secs = json_number_value(et);
        if (json_is_true(json_object_get(j->result, "timed_out")))
            o = IPD_METRICS_EXEC_TIMEOUT;
        else if (json_is_true(json_object_get(res, "oom_killed")))
            o = IPD_METRICS_EXEC_OOM;
        else if (json_is_true(json_object_get(j->result, "success")))
            o = IPD_METRICS_EXEC_SUCCESS;
        else
            o = IPD_METRICS_EXEC_ERROR;
    } else if (j->rc == IPD_ERR_INTERNAL || j->rc == IPD_ERR_UNAVAILABLE) {
        o = IPD_METRICS_EXEC_FAILED_TO_START;
    } else {
        counted = false;
        o = IPD_METRICS_EXEC_ERROR;
    }
    if (!counted)
        return;
    ipd_metrics_exec_observe(p->metrics, o, secs);
    pthread_mutex_lock(&p->lock);
    p->n_total++;
    switch (o) {
    case IPD_METRICS_EXEC_SUCCESS: p->n_success++; break;
    case IPD_METRICS_EXEC_ERROR: p->n_error++; break;
    case IPD_METRICS_EXEC_TIMEOUT: p->n_timeout++; break;
    case IPD_METRICS_EXEC_OOM: p->n_oom++; break;
    default: p->n_failed++; break;
    }
    pthread_mutex_unlock(&p->lock);
}

/* A worker runs one job; jobs that had not started at shutdown are
 * answered 503. */
static void exec_work(void *arg, bool stopping)
{
    struct job *j = arg;
    struct ipd_exec_pool *p = j->pool;
    if (stopping) {
        j->rc = IPD_ERR_UNAVAILABLE;
        ipd_buf_adds(&j->detail, "the service is shutting down");
        return;
    }
    if (j->async) {
        pthread_mutex_lock(&p->lock);
        struct async_entry *e = async_find(p, j->exec_id);
        if (e)
            e->status = "running";
        pthread_mutex_unlock(&p->lock);
    }
    run_job(p, j);
}

/* Once the job no longer counts as running: the reply (or the stored
 * result and the callback), so a client that then asks for the status
 * does not see it running. */
static void exec_done(void *arg)
{
    struct job *j = arg;
    if (j->async) {
        async_done(j->pool, j);
        job_free(j);
    } else {
        job_finish(j->pool, j);
    }
}

enum ipd_err ipd_exec_pool_new(struct ipd_executor *ex,
                               const struct ipd_exec_pool_options *o,
                               struct ipd_exec_pool **out)
{
    struct ipd_exec_pool *p = ipd_xcalloc(1, sizeof(*p));
    p->ex = ex;
    p->metrics = o->metrics;
    p->callbacks = o->callbacks;
    p->result_ttl_ms = o->result_ttl_ms > 0 ? o->result_ttl_ms : 3600000;
    pthread_mutex_init(&p->lock, NULL);
    if (ipd_workq_new(o->slots, o->queue, &p->q)) {
        ipd_exec_pool_free(p);
        *out = NULL;
        return IPD_ERR_INTERNAL;
    }
    *out = p;
    return IPD_OK;
}

void ipd_exec_pool_stop(struct ipd_exec_pool *p)
{
    if (p)
        ipd_workq_stop(p->q);
}

void ipd_exec_pool_free(struct ipd_exec_pool *p)
{
    if (!p)
        return;
    /* Queued jobs are answered 503 (the queue hands them over stopping),
     * running ones finish: their time is bounded by the policy's
     * timeout. */
    ipd_workq_free(p->q);
    while (p->async) {
        struct async_entry *e = p->async;
        p->async = e->next;
        json_decref(e->result);
        free(e);
    }
    pthread_mutex_destroy(&p->lock);
    free(p);
}

json_t *ipd_exec_pool_stats(struct ipd_exec_pool *p)
{
    unsigned running, queued;
    if (!p)
        return json_null();
    ipd_workq_counts(p->q, &running, &queued);
    pthread_mutex_lock(&p->lock);
    json_t *j = json_pack(
        "{s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I}", "slots",
        (json_int_t)ipd_workq_threads(p->q), "queue",
        (json_int_t)ipd_workq_queue_max(p->q), "running", (json_int_t)running,
        "queued", (json_int_t)queued, "total", (json_int_t)p->n_total,
        "success", (json_int_t)p->n_success, "error", (json_int_t)p->n_error,
        "timeout", (json_int_t)p->n_timeout, "oom", (json_int_t)p->n_oom,
        "failed_to_start", (json_int_t)p->n_failed);
    pthread_mutex_unlock(&p->lock);
    return j;
}

void ipd_exec_pool_counts(struct ipd_exec_pool *p, unsigned *running,
                          unsigned *queued)
{
    ipd_workq_counts(p->q, running, queued);
}

/* ---- the handler ------------------------------------------------------- */

static void reply_result(struct ipd_req *r, struct job *j)
{
    const char *msg = j->detail.len ? j->detail.buf : NULL;
    switch (j->rc) {
    case IPD_OK:
        ipd_reply_json(r, MHD_HTTP_OK, j->result);
        j->result = NULL;
        return;
    case IPD_ERR_NOT_FOUND:
        ipd_reply_code(r, IPD_HE_NOT_FOUND, "%s", msg ? msg : "no such file");
        return;
    case IPD_ERR_INVALID:
        ipd_reply_code(r, IPD_HE_INVALID_REQUEST, "%s",
                        msg ? msg : "invalid execution request");
        return;
    case IPD_ERR_TOO_LARGE:
        ipd_reply_code(r, IPD_HE_PAYLOAD_TOO_LARGE, "%s",
                        msg ? msg : "request too large");
        return;
    default:
        break;
    }
    if (msg && j->rc == IPD_ERR_UNAVAILABLE)
        ipd_reply_code(r, IPD_HE_UNAVAILABLE, "%s", msg);
    else
        ipd_reply_failure(r, j->rc, NULL, "running the code");
}

/* Check the optional fields (packages, async, callback_url, variables);
 * sessions are not built yet: refused clearly.  Replies and returns true
 * on a bad request. */
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
    if (v && !json_is_null(v)) {
        const char *u = json_string_value(v);
        if (!u || json_string_length(v) > CALLBACK_URL_MAX ||
            strlen(u) != json_string_length(v) ||
            (strncmp(u, "http://", 7) != 0 &&
             strncmp(u, "https://", 8) != 0)) {
            ipd_reply_code(r, IPD_HE_INVALID_REQUEST,
                            "\"callback_url\" must be an http or https URL "
                            "of at most %d bytes",
                            CALLBACK_URL_MAX);
            return true;
        }
    }
    v = json_object_get(doc, "session_id");
    if (v && !json_is_null(v)) {
        ipd_reply_code(r, IPD_HE_INVALID_REQUEST,
                        "sessions are not available on this server yet");
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

/* Parse and validate the body into a new job; replies and returns NULL on
 * a bad request. */
static struct job *parse_job(struct ipd_req *r)
{
    struct job *j = NULL;
    json_t *doc = ipd_req_json_body(r);
    if (!doc)
        return NULL;
    json_t *code = json_object_get(doc, "code");
    json_t *files = json_object_get(doc, "files");
    json_t *timeout = json_object_get(doc, "timeout");
    if (!json_is_object(doc) || !json_is_string(code)) {
        ipd_reply_code(r, IPD_HE_INVALID_REQUEST,
                        "the body must be an object with a string \"code\"");
        goto out;
    }
    if (json_string_length(code) > CODE_MAX) {
        ipd_reply_code(r, IPD_HE_PAYLOAD_TOO_LARGE,
                        "code is %zu bytes; at most %d are allowed",
                        json_string_length(code), CODE_MAX);
        goto out;
    }
    if (files && !json_is_null(files) &&
        (!json_is_array(files) || json_array_size(files) > FILES_MAX)) {
        ipd_reply_code(r, IPD_HE_INVALID_REQUEST,
                        "\"files\" must be an array of at most %d file ids",
                        FILES_MAX);
        goto out;
    }
    if (timeout && !json_is_null(timeout) &&
        (!json_is_number(timeout) || json_number_value(timeout) <= 0 ||
         json_number_value(timeout) > 86400)) {
        ipd_reply_code(r, IPD_HE_INVALID_REQUEST,
                        "\"timeout\" must be a positive number of seconds");
        goto out;
    }
    if (unsupported(r, doc))
        goto out;
    /* The key's policy, or a stricter one the request names. */
    const char *policy = r->key.policy[0] ? r->key.policy : "standard";
    const struct ipd_policy *kp = ipd_config_policy(r->app->cfg, policy);
    json_t *want = json_object_get(doc, "policy");
    if (!kp) {
        /* The operator removed the policy this key names from the config:
         * never fall back to another one. */
        ipd_reply_code(r, IPD_HE_FORBIDDEN,
                        "this key's policy %s is not configured on the "
                        "server; ask an administrator",
                        policy);
        goto out;
    }
    if (want && !json_is_null(want)) {
        const char *name = json_string_value(want);
        const struct ipd_policy *wp =
            name ? ipd_config_policy(r->app->cfg, name) : NULL;
        if (!wp) {
            ipd_reply_code(r, IPD_HE_INVALID_REQUEST,
                            "\"policy\" must name a configured policy "
                            "(strict, standard, networked, or one the "
                            "operator defined)");
            goto out;
        }
        if (!ipd_policy_within(wp, kp)) {
            ipd_reply_code(r, IPD_HE_FORBIDDEN,
                            "policy %s is less strict than this key's "
                            "policy %s; a request can only tighten it",
                            name, policy);
            goto out;
        }
        policy = name;
    }
    j = ipd_xcalloc(1, sizeof(*j));
    ipd_buf_init(&j->detail, 1024);
    j->r = r;
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
    json_t *cbu = json_object_get(doc, "callback_url");
    j->async = json_is_true(json_object_get(doc, "async")) ||
               json_is_string(cbu);
    if (json_is_string(cbu))
        j->callback_url = ipd_xstrdup(json_string_value(cbu));
    memcpy(j->secret, r->key.secret, sizeof(j->secret));
    json_t *pk = json_object_get(doc, "packages");
    size_t np = json_array_size(pk);
    j->packages = ipd_xcalloc(np ? np : 1, sizeof(*j->packages));
    for (size_t i = 0; i < np; i++)
        j->packages[j->n_packages++] =
            ipd_xstrdup(json_string_value(json_array_get(pk, i)));
    size_t n = json_is_array(files) ? json_array_size(files) : 0;
    j->file_ids = ipd_xcalloc(n ? n : 1, sizeof(*j->file_ids));
    for (size_t i = 0; i < n; i++) {
        json_t *id = json_array_get(files, i);
        /* An id of the wrong shape can't be one of the caller's files. */
        if (!json_is_string(id) || !ipd_id_valid("file", json_string_value(id))) {
            ipd_reply_code(r, IPD_HE_NOT_FOUND, "no such file: %s",
                            json_is_string(id) ? json_string_value(id)
                                               : "(not a string)");
            job_free(j);
            j = NULL;
            goto out;
        }
        j->file_ids[j->n_files++] = ipd_xstrdup(json_string_value(id));
    }
out:
    json_decref(doc);
    return j;
}

/* Admission, under the queue's lock before a worker can see the job. */
static enum ipd_err admit_sync(void *arg)
{
    struct job *j = arg;
    /* Suspended before a worker can resume it. */
    j->r->state = j;
    j->r->suspended = true;
    MHD_suspend_connection(j->r->conn);
    return IPD_OK;
}

/* An asynchronous job gets its entry (status "queued"); at most
 * ASYNC_MAX results are held (IPD_ERR_QUOTA: 429). */
static enum ipd_err admit_async(void *arg)
{
    struct job *j = arg;
    struct ipd_exec_pool *p = j->pool;
    enum ipd_err rc = IPD_OK;
    pthread_mutex_lock(&p->lock);
    async_prune(p, ipd_now_ms());
    if (p->n_async >= ASYNC_MAX) {
        rc = IPD_ERR_QUOTA;
    } else {
        struct async_entry *e = ipd_xcalloc(1, sizeof(*e));
        memcpy(e->id, j->exec_id, sizeof(e->id));
        snprintf(e->tenant, sizeof(e->tenant), "%s", j->tenant);
        snprintf(e->user_id, sizeof(e->user_id), "%s", j->user_id);
        e->status = "queued";
        e->next = p->async;
        p->async = e;
        p->n_async++;
    }
    pthread_mutex_unlock(&p->lock);
    return rc;
}

static void executions_finish(struct ipd_req *r)
{
    struct ipd_exec_pool *p = r->app->exec;
    struct job *j = r->state;

    if (j && j->done) {
        reply_result(r, j);
        return;
    }
    IPD_ASSERT(!j);
    if (!p) {
        ipd_reply_code(r, IPD_HE_UNAVAILABLE,
                        "executions are unavailable on this server: the "
                        "sandbox could not be set up (see the server log)");
        return;
    }
    j = parse_job(r);
    if (!j)
        return;
    j->pool = p;
    j->r = r;
    /* The job is the worker's once queued (an async one may be over and
     * freed before submit returns): its id is kept here. */
    char id[IPD_ID_MAX] = "";
    if (j->async) {
        ipd_id_new("exec", j->exec_id);
        memcpy(id, j->exec_id, sizeof(id));
    }
    enum ipd_err rc = ipd_workq_submit(p->q, exec_work, exec_done, j,
                                       j->async ? admit_async : admit_sync);
    if (rc == IPD_OK) {
        if (id[0])
            ipd_reply_json(r, MHD_HTTP_ACCEPTED,
                           json_pack("{s:s, s:s}", "execution_id", id,
                                     "status", "queued"));
        return;
    }
    r->state = NULL;
    job_free(j);
    if (rc == IPD_ERR_UNAVAILABLE) {
        ipd_reply_code(r, IPD_HE_UNAVAILABLE, "the service is shutting down");
    } else if (rc == IPD_ERR_QUOTA) {
        ipd_reply_code(r, IPD_HE_TOO_MANY_REQUESTS,
                        "%d asynchronous results are held; retry later",
                        ASYNC_MAX);
    } else {
        unsigned running, queued;
        ipd_workq_counts(p->q, &running, &queued);
        ipd_reply_code(r, IPD_HE_TOO_MANY_REQUESTS,
                        "all %u execution slots are busy and %u requests are "
                        "waiting; retry later",
                        ipd_workq_threads(p->q), queued);
    }
}

static void executions_cleanup(struct ipd_req *r)
{
    job_free(r->state);
    r->state = NULL;
}

const struct ipd_handler ipd_h_executions_create = {
    .flags = IPD_H_AUTH | IPD_H_USER,
    .body_max = BODY_MAX,
    .finish = executions_finish,
    .cleanup = executions_cleanup,
};

/* GET /v1/executions/{id}: the caller's own asynchronous executions. */
static void executions_get(struct ipd_req *r)
{
    struct ipd_exec_pool *p = r->app->exec;
    json_t *out = NULL;
    if (!p) {
        ipd_reply_code(r, IPD_HE_NOT_FOUND, "no such execution");
        return;
    }
    pthread_mutex_lock(&p->lock);
    async_prune(p, ipd_now_ms());
    struct async_entry *e = async_find(p, r->param);
    if (e && !strcmp(e->tenant, r->key.tenant) &&
        !strcmp(e->user_id, r->user_id))
        out = json_pack("{s:s, s:s, s:O?}", "execution_id", e->id, "status",
                        e->status, "result", e->result);
    pthread_mutex_unlock(&p->lock);
    if (!out) {
        ipd_reply_code(r, IPD_HE_NOT_FOUND,
                        "no such execution (results are kept for a limited "
                        "time)");
        return;
    }
    ipd_reply_json(r, MHD_HTTP_OK, out);
}

const struct ipd_handler ipd_h_executions_get = {
    .flags = IPD_H_AUTH | IPD_H_USER,
    .finish = executions_get,
};
