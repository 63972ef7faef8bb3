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

#include "../service/executor.h"
#include "../service/log.h"
#include "../service/util.h"
#include "http.h"

#define CODE_MAX (1024 * 1024)           /* CONTRACT.md: code at most 1 MiB */
#define BODY_MAX (8 * 1024 * 1024)       /* code escaped in JSON, and the rest */
#define FILES_MAX 100

struct job {
    struct job *next;
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
    enum ipd_err rc;                 /* the executor's answer */
    json_t *result;                  /* new reference when rc == IPD_OK */
    struct ipd_buf detail;
    bool done;
};

struct ipd_exec_pool {
    struct ipd_executor *ex;
    pthread_t *threads;
    unsigned slots, started, queue_max;
    pthread_mutex_t lock;
    pthread_cond_t work;
    struct job *head, *tail;
    unsigned queued, running;
    bool stop;
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
    ipd_buf_release(&j->detail);
    free(j);
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
    };
    j->rc = ipd_executor_run(p->ex, &rq, &j->result, &j->detail);
}

static void *worker(void *arg)
{
    struct ipd_exec_pool *p = arg;
    pthread_mutex_lock(&p->lock);
    for (;;) {
        while (!p->head && !p->stop)
            pthread_cond_wait(&p->work, &p->lock);
        if (!p->head)
            break; /* stopping, and nothing left */
        struct job *j = p->head;
        p->head = j->next;
        if (!p->head)
            p->tail = NULL;
        p->queued--;
        p->running++;
        bool stopping = p->stop;
        pthread_mutex_unlock(&p->lock);
        if (stopping) {
            j->rc = IPD_ERR_UNAVAILABLE;
            ipd_buf_adds(&j->detail, "the service is shutting down");
        } else {
            run_job(p, j);
        }
        pthread_mutex_lock(&p->lock);
        p->running--;
        pthread_mutex_unlock(&p->lock);
        job_finish(p, j);
        pthread_mutex_lock(&p->lock);
    }
    pthread_mutex_unlock(&p->lock);
    return NULL;
}

enum ipd_err ipd_exec_pool_new(struct ipd_executor *ex, unsigned slots,
                               unsigned queue, struct ipd_exec_pool **out)
{
    struct ipd_exec_pool *p = ipd_xcalloc(1, sizeof(*p));
    p->ex = ex;
    p->slots = slots ? slots : 1;
    p->queue_max = queue;
    pthread_mutex_init(&p->lock, NULL);
    pthread_cond_init(&p->work, NULL);
    p->threads = ipd_xcalloc(p->slots, sizeof(*p->threads));
    for (unsigned i = 0; i < p->slots; i++) {
        if (pthread_create(&p->threads[i], NULL, worker, p)) {
            ipd_error("cannot start execution worker %u", i);
            ipd_exec_pool_free(p);
            *out = NULL;
            return IPD_ERR_INTERNAL;
        }
        p->started++;
    }
    *out = p;
    return IPD_OK;
}

void ipd_exec_pool_free(struct ipd_exec_pool *p)
{
    if (!p)
        return;
    /* Queued jobs are answered 503 by the workers (stop is set), running
     * ones finish: their time is bounded by the policy's timeout. */
    pthread_mutex_lock(&p->lock);
    p->stop = true;
    pthread_cond_broadcast(&p->work);
    pthread_mutex_unlock(&p->lock);
    for (unsigned i = 0; i < p->started; i++)
        pthread_join(p->threads[i], NULL);
    pthread_mutex_destroy(&p->lock);
    pthread_cond_destroy(&p->work);
    free(p->threads);
    free(p);
}

void ipd_exec_pool_counts(struct ipd_exec_pool *p, unsigned *running,
                          unsigned *queued)
{
    pthread_mutex_lock(&p->lock);
    *running = p->running;
    *queued = p->queued;
    pthread_mutex_unlock(&p->lock);
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
        ipd_reply_error(r, IPD_HE_NOT_FOUND, "%s", msg ? msg : "no such file");
        return;
    case IPD_ERR_INVALID:
        ipd_reply_error(r, IPD_HE_INVALID_REQUEST, "%s",
                        msg ? msg : "invalid execution request");
        return;
    case IPD_ERR_TOO_LARGE:
        ipd_reply_error(r, IPD_HE_PAYLOAD_TOO_LARGE, "%s",
                        msg ? msg : "request too large");
        return;
    default:
        break;
    }
    if (msg && j->rc == IPD_ERR_UNAVAILABLE)
        ipd_reply_error(r, IPD_HE_UNAVAILABLE, "%s", msg);
    else
        ipd_reply_err(r, j->rc, "running the code");
}

/* Reject request fields whose features are not built yet, clearly. */
static bool unsupported(struct ipd_req *r, json_t *doc)
{
    json_t *v = json_object_get(doc, "packages");
    if (v && !json_is_null(v) &&
        !(json_is_array(v) && json_array_size(v) == 0)) {
        ipd_reply_error(r, IPD_HE_INVALID_REQUEST,
                        "package installs are not available on this server "
                        "yet; send \"packages\": []");
        return true;
    }
    v = json_object_get(doc, "async");
    if ((v && json_is_true(v)) || json_object_get(doc, "callback_url")) {
        ipd_reply_error(r, IPD_HE_INVALID_REQUEST,
                        "asynchronous executions are not available on this "
                        "server yet");
        return true;
    }
    v = json_object_get(doc, "session_id");
    if (v && !json_is_null(v)) {
        ipd_reply_error(r, IPD_HE_INVALID_REQUEST,
                        "sessions are not available on this server yet");
        return true;
    }
    v = json_object_get(doc, "variables");
    if (v && !json_is_null(v) && !json_is_object(v)) {
        ipd_reply_error(r, IPD_HE_INVALID_REQUEST,
                        "\"variables\" must be an object of name: value");
        return true;
    }
    return false;
}

/* Parse and validate the body into a new job; replies and returns NULL on
 * a bad request. */
static struct job *parse_job(struct ipd_req *r)
{
    json_error_t jerr;
    struct job *j = NULL;
    json_t *doc = json_loadb(r->body.buf, r->body.len,
                             JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, &jerr);
    if (!doc) {
        ipd_reply_error(r, IPD_HE_INVALID_JSON, "invalid JSON: %s (line %d)",
                        jerr.text, jerr.line);
        return NULL;
    }
    json_t *code = json_object_get(doc, "code");
    json_t *files = json_object_get(doc, "files");
    json_t *timeout = json_object_get(doc, "timeout");
    if (!json_is_object(doc) || !json_is_string(code)) {
        ipd_reply_error(r, IPD_HE_INVALID_REQUEST,
                        "the body must be an object with a string \"code\"");
        goto out;
    }
    if (json_string_length(code) > CODE_MAX) {
        ipd_reply_error(r, IPD_HE_PAYLOAD_TOO_LARGE,
                        "code is %zu bytes; at most %d are allowed",
                        json_string_length(code), CODE_MAX);
        goto out;
    }
    if (files && !json_is_null(files) &&
        (!json_is_array(files) || json_array_size(files) > FILES_MAX)) {
        ipd_reply_error(r, IPD_HE_INVALID_REQUEST,
                        "\"files\" must be an array of at most %d file ids",
                        FILES_MAX);
        goto out;
    }
    if (timeout && !json_is_null(timeout) &&
        (!json_is_number(timeout) || json_number_value(timeout) <= 0 ||
         json_number_value(timeout) > 86400)) {
        ipd_reply_error(r, IPD_HE_INVALID_REQUEST,
                        "\"timeout\" must be a positive number of seconds");
        goto out;
    }
    if (unsupported(r, doc))
        goto out;
    /* The key's policy, or a stricter one the request names. */
    const char *policy = r->key.policy[0] ? r->key.policy : "standard";
    json_t *want = json_object_get(doc, "policy");
    if (want && !json_is_null(want)) {
        const char *name = json_string_value(want);
        if (!name || !ipd_exec_policy_known(name)) {
            ipd_reply_error(r, IPD_HE_INVALID_REQUEST,
                            "\"policy\" must be strict, standard or "
                            "networked");
            goto out;
        }
        if (!ipd_exec_policy_within(name, policy)) {
            ipd_reply_error(r, IPD_HE_FORBIDDEN,
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
    size_t n = json_is_array(files) ? json_array_size(files) : 0;
    j->file_ids = ipd_xcalloc(n ? n : 1, sizeof(*j->file_ids));
    for (size_t i = 0; i < n; i++) {
        json_t *id = json_array_get(files, i);
        /* An id of the wrong shape can't be one of the caller's files. */
        if (!json_is_string(id) || !ipd_id_valid("file", json_string_value(id))) {
            ipd_reply_error(r, IPD_HE_NOT_FOUND, "no such file: %s",
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
        ipd_reply_error(r, IPD_HE_UNAVAILABLE,
                        "executions are unavailable on this server: the "
                        "sandbox could not be set up (see the server log)");
        return;
    }
    j = parse_job(r);
    if (!j)
        return;
    pthread_mutex_lock(&p->lock);
    /* Room for every slot plus queue_max waiting: idle workers take
     * queued jobs at once. */
    if (p->stop || p->queued + p->running >= p->slots + p->queue_max) {
        bool stopping = p->stop;
        pthread_mutex_unlock(&p->lock);
        job_free(j);
        if (stopping)
            ipd_reply_error(r, IPD_HE_UNAVAILABLE,
                            "the service is shutting down");
        else
            ipd_reply_error(r, IPD_HE_TOO_MANY_REQUESTS,
                            "all %u execution slots are busy and %u requests "
                            "are waiting; retry later",
                            p->slots, p->queued);
        return;
    }
    /* Suspend before a worker can see the job: its resume must never come
     * first. */
    r->state = j;
    r->suspended = true;
    MHD_suspend_connection(r->conn);
    if (p->tail)
        p->tail->next = j;
    else
        p->head = j;
    p->tail = j;
    p->queued++;
    pthread_cond_signal(&p->work);
    pthread_mutex_unlock(&p->lock);
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
