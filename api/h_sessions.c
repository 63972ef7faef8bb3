/*
 * h_sessions.c - /v1/sessions (CONTRACT.md, Sessions): create, list, get,
 * delete, and a session's variables.  The sessions themselves are the
 * executor's (service/exec/session.c); a session belongs to its (tenant,
 * user), so another caller's id answers 404 like an unknown one.
 * Executions in a session go through POST /v1/executions (session_id).
 */
#include <stdlib.h>
#include <string.h>

#include "../service/exec/executor.h"
#include "http.h"

/* The executor, or a 503 and NULL. */
static struct ipd_executor *executor(struct ipd_req *r)
{
    if (!r->app->executor || !r->app->exec) {
        ipd_reply_code(r, IPD_HE_UNAVAILABLE,
                       "executions are unavailable on this server (see "
                       "the server log)");
        return NULL;
    }
    return r->app->executor;
}

/* The {id} when it can be a session's; else a 404 and false. */
static bool id_ok(struct ipd_req *r)
{
    if (ipd_id_valid("sess", r->param))
        return true;
    ipd_reply_code(r, IPD_HE_NOT_FOUND, "no such session");
    return false;
}

/* A session call failed: reply.c's status for rc, with the executor's
 * detail (msg, may be NULL or empty).  An unknown id and another
 * caller's are told alike. */
static void session_failure(struct ipd_req *r, enum ipd_err rc, const char *msg)
{
    if (rc == IPD_ERR_NOT_FOUND)
        msg = "no such session";
    ipd_reply_failure(r, rc, msg, "serving the session");
}

/* Creating, deleting and the variables call may wait on a sandbox (a
 * session's uid coming free, its processes ending, a __repr__ running):
 * they run on the session workers (r->app->sess_wq), never on an event
 * thread.  The handler's finish runs twice: first it checks the request
 * and submits (suspending r), then, resumed, it replies from the job. */
struct sess_job {
    bool submitted, ran;
    enum ipd_err rc;
    int retry_after_s; /* the executor's, at a session bound */
    json_t *out;       /* new reference, or NULL */
    struct ipd_buf detail;
};

/* A new job in r->state (freed by sess_job_cleanup). */
static struct sess_job *sess_job_new(struct ipd_req *r)
{
    struct sess_job *j = ipd_xcalloc(1, sizeof(*j));
    ipd_buf_init(&j->detail, 512);
    r->state = j;
    return j;
}

/* Submit fn(r) to the session workers as a job of r's tenant: its key's
 * policy's tenant-sessions share of their places, at most half of them
 * running; refused: 429 (or 503 when stopping) and false. */
static bool sess_submit(struct ipd_req *r,
                        void (*fn)(struct ipd_req *r, bool stopping))
{
    struct sess_job *j;
    const struct ipd_exec_policy *kp = ipd_req_key_policy(r);

    if (!r->app->sess_wq) {
        ipd_reply_code(r, IPD_HE_UNAVAILABLE,
                       "sessions are unavailable on this server (see the "
                       "server log)");
        return false;
    }
    j = sess_job_new(r);
    j->submitted = ipd_bg_submit_shared(r->app->sess_wq, r, fn,
                                        kp ? kp->tenant_sessions : -50,
                                        "session requests", "tenant-sessions");
    return j->submitted;
}

/* The job ran (or was refused at shutdown): reply from it.  reply is
 * called with its output when rc is IPD_OK. */
static void sess_reply(struct ipd_req *r,
                       void (*reply)(struct ipd_req *r, struct sess_job *j))
{
    struct sess_job *j = r->state;

    if (!j->ran)
        ipd_reply_code(r, IPD_HE_UNAVAILABLE, "the service is shutting down");
    else if (j->rc) {
        r->retry_after_s = j->retry_after_s;
        session_failure(r, j->rc, j->detail.buf);
    } else
        reply(r, j);
}

/* The job's second call: true when it was submitted (and replied to). */
static bool sess_resumed(struct ipd_req *r,
                         void (*reply)(struct ipd_req *r, struct sess_job *j))
{
    struct sess_job *j = r->state;

    if (!j || !j->submitted)
        return false;
    sess_reply(r, reply);
    return true;
}

static void sess_job_cleanup(struct ipd_req *r)
{
    struct sess_job *j = r->state;

    if (!j)
        return;
    json_decref(j->out);
    ipd_buf_release(&j->detail);
    free(j);
    r->state = NULL;
}

/* Replies with j->out (which it takes). */
static void reply_out(struct ipd_req *r, unsigned status, struct sess_job *j)
{
    ipd_reply_json(r, status, j->out);
    j->out = NULL;
}

static void reply_created(struct ipd_req *r, struct sess_job *j)
{
    reply_out(r, MHD_HTTP_CREATED, j);
}

static void reply_ok(struct ipd_req *r, struct sess_job *j)
{
    reply_out(r, MHD_HTTP_OK, j);
}

static void reply_deleted(struct ipd_req *r, struct sess_job *j)
{
    (void)j;
    ipd_reply_empty(r, MHD_HTTP_NO_CONTENT);
}

/* On a session worker.  The key's policy: the session's limits and the
 * tenant's shares.  At a bound (IPD_ERR_BUSY) Retry-After is when the
 * earliest session holding it can end. */
static void create_run(struct ipd_req *r, bool stopping)
{
    struct sess_job *j = r->state;

    if (stopping)
        return;
    j->ran = true;
    j->rc = ipd_executor_session_create(
        r->app->executor, r->principal.tenant, r->principal.user_id,
        r->principal.policy, &j->out, &j->retry_after_s, &j->detail);
}

static void sessions_create(struct ipd_req *r)
{
    json_t *doc = NULL;

    if (sess_resumed(r, reply_created) || !executor(r))
        return;
    if (r->body.len) {
        doc = ipd_req_json_body(r);
        if (!doc)
            return; /* replied */
        if (!json_is_object(doc)) {
            json_decref(doc);
            ipd_reply_code(r, IPD_HE_INVALID_REQUEST,
                           "the body must be a JSON object ({})");
            return;
        }
        json_decref(doc);
    }
    sess_submit(r, create_run);
}

static void sessions_list(struct ipd_req *r)
{
    struct ipd_executor *ex = executor(r);

    if (ex)
        ipd_reply_json(r, MHD_HTTP_OK,
                       ipd_executor_session_list(ex, r->principal.tenant,
                                                 r->principal.user_id));
}

static void session_get(struct ipd_req *r)
{
    struct ipd_executor *ex = executor(r);
    json_t *out = NULL;
    enum ipd_err rc;

    if (!ex || !id_ok(r))
        return;
    rc = ipd_executor_session_get(ex, r->principal.tenant, r->principal.user_id,
                                  r->param, &out);
    if (rc)
        session_failure(r, rc, NULL);
    else
        ipd_reply_json(r, MHD_HTTP_OK, out);
}

/* On a session worker: it answers once the session's processes are
 * gone (up to 5 s). */
static void delete_run(struct ipd_req *r, bool stopping)
{
    struct sess_job *j = r->state;

    if (stopping)
        return;
    j->ran = true;
    j->rc = ipd_executor_session_delete(r->app->executor, r->principal.tenant,
                                        r->principal.user_id, r->param);
}

static void session_delete(struct ipd_req *r)
{
    if (sess_resumed(r, reply_deleted) || !executor(r) || !id_ok(r))
        return;
    sess_submit(r, delete_run);
}

/* GET /v1/sessions/{id}/variables: a call into the session, on a
 * session worker (it may take up to 10 s). */
static void vars_run(struct ipd_req *r, bool stopping)
{
    struct sess_job *j = r->state;

    if (stopping)
        return;
    j->ran = true;
    j->rc = ipd_executor_session_variables(
        r->app->executor, r->principal.tenant, r->principal.user_id, r->param,
        &j->out, &j->detail);
}

static void session_variables(struct ipd_req *r)
{
    if (sess_resumed(r, reply_ok) || !executor(r) || !id_ok(r))
        return;
    if (!strcmp(r->method, "HEAD")) {
        /* Headers only: never a call into the session (it would run the
         * code's __repr__s and count as a use). */
        struct ipd_buf why;
        ipd_buf_init(&why, 256);
        enum ipd_err rc =
            ipd_executor_session_check(r->app->executor, r->principal.tenant,
                                       r->principal.user_id, r->param, &why);
        if (rc)
            session_failure(r, rc, why.buf);
        else
            ipd_reply_json(r, MHD_HTTP_OK, json_object());
        ipd_buf_release(&why);
        return;
    }
    sess_submit(r, vars_run);
}

const struct ipd_handler ipd_h_sessions_create = {
    .flags = IPD_H_AUTH | IPD_H_USER,
    .scope = IPD_SCOPE_SESSIONS,
    .finish = sessions_create,
    .cleanup = sess_job_cleanup,
};
const struct ipd_handler ipd_h_sessions_list = {
    .flags = IPD_H_AUTH | IPD_H_USER,
    .scope = IPD_SCOPE_SESSIONS,
    .finish = sessions_list,
};
const struct ipd_handler ipd_h_session_get = {
    .flags = IPD_H_AUTH | IPD_H_USER,
    .scope = IPD_SCOPE_SESSIONS,
    .finish = session_get,
};
const struct ipd_handler ipd_h_session_delete = {
    .flags = IPD_H_AUTH | IPD_H_USER,
    .scope = IPD_SCOPE_SESSIONS,
    .finish = session_delete,
    .cleanup = sess_job_cleanup,
};
const struct ipd_handler ipd_h_session_variables = {
    .flags = IPD_H_AUTH | IPD_H_USER,
    .scope = IPD_SCOPE_SESSIONS,
    .finish = session_variables,
    .cleanup = sess_job_cleanup,
};
