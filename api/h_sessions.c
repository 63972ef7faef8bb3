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
static void session_failure(struct ipd_req *r, enum ipd_err rc,
                            const char *msg)
{
    if (rc == IPD_ERR_NOT_FOUND)
        msg = "no such session";
    ipd_reply_failure(r, rc, msg, "serving the session");
}

static void sessions_create(struct ipd_req *r)
{
    struct ipd_executor *ex = executor(r);
    struct ipd_buf detail;
    json_t *doc = NULL, *out = NULL;
    enum ipd_err rc;

    if (!ex)
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
    ipd_buf_init(&detail, 512);
    /* The key's policy: the session's limits and the tenant's shares. */
    rc = ipd_executor_session_create(
        ex, r->principal.tenant, r->principal.user_id,
        r->principal.policy, &out,
        &r->retry_after_s, &detail);
    /* At a bound (IPD_ERR_BUSY) Retry-After is when the earliest session
     * holding it can end. */
    if (rc)
        session_failure(r, rc, detail.buf);
    else
        ipd_reply_json(r, MHD_HTTP_CREATED, out);
    ipd_buf_release(&detail);
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
    rc = ipd_executor_session_get(ex, r->principal.tenant, r->principal.user_id, r->param,
                                  &out);
    if (rc)
        session_failure(r, rc, NULL);
    else
        ipd_reply_json(r, MHD_HTTP_OK, out);
}

static void session_delete(struct ipd_req *r)
{
    struct ipd_executor *ex = executor(r);
    enum ipd_err rc;

    if (!ex || !id_ok(r))
        return;
    rc = ipd_executor_session_delete(ex, r->principal.tenant, r->principal.user_id, r->param);
    if (rc)
        session_failure(r, rc, NULL);
    else
        ipd_reply_empty(r, MHD_HTTP_NO_CONTENT);
}

/* GET /v1/sessions/{id}/variables: a call into the session, on a
 * background thread (it may take up to 10 s). */
struct vars_job {
    bool submitted, ran;
    enum ipd_err rc;
    json_t *out;
    struct ipd_buf detail;
};

static void vars_run(struct ipd_req *r, bool stopping)
{
    struct vars_job *j = r->state;

    if (stopping)
        return;
    j->ran = true;
    j->rc = ipd_executor_session_variables(r->app->executor, r->principal.tenant,
                                           r->principal.user_id, r->param, &j->out,
                                           &j->detail);
}

static void session_variables(struct ipd_req *r)
{
    struct vars_job *j = r->state;

    if (j && j->submitted) {
        if (!j->ran)
            ipd_reply_code(r, IPD_HE_UNAVAILABLE,
                           "the service is shutting down");
        else if (j->rc)
            session_failure(r, j->rc, j->detail.buf);
        else {
            ipd_reply_json(r, MHD_HTTP_OK, j->out);
            j->out = NULL;
        }
        return;
    }
    if (!executor(r) || !id_ok(r))
        return;
    if (!strcmp(r->method, "HEAD")) {
        /* Headers only: never a call into the session (it would run the
         * code's __repr__s and count as a use). */
        struct ipd_buf why;
        ipd_buf_init(&why, 256);
        enum ipd_err rc = ipd_executor_session_check(
            r->app->executor, r->principal.tenant, r->principal.user_id, r->param, &why);
        if (rc)
            session_failure(r, rc, why.buf);
        else
            ipd_reply_json(r, MHD_HTTP_OK, json_object());
        ipd_buf_release(&why);
        return;
    }
    j = ipd_xcalloc(1, sizeof(*j));
    ipd_buf_init(&j->detail, 512);
    r->state = j;
    /* The URL-fetch threads: a tenant gets its tenant-fetches share of
     * them (a slow __repr__ holds one for up to 10 s), and a stopping
     * service answers 503, not 429. */
    const struct ipd_exec_policy *kp = ipd_req_key_policy(r);
    j->submitted = ipd_bg_submit_shared(
        r->app->bg, r, vars_run, kp ? kp->tenant_fetches : -50,
        "URL fetches and variables calls", "tenant-fetches");
}

static void vars_cleanup(struct ipd_req *r)
{
    struct vars_job *j = r->state;

    if (!j)
        return;
    json_decref(j->out);
    ipd_buf_release(&j->detail);
    free(j);
    r->state = NULL;
}

const struct ipd_handler ipd_h_sessions_create = {
    .flags = IPD_H_AUTH | IPD_H_USER,
    .finish = sessions_create,
};
const struct ipd_handler ipd_h_sessions_list = {
    .flags = IPD_H_AUTH | IPD_H_USER,
    .finish = sessions_list,
};
const struct ipd_handler ipd_h_session_get = {
    .flags = IPD_H_AUTH | IPD_H_USER,
    .finish = session_get,
};
const struct ipd_handler ipd_h_session_delete = {
    .flags = IPD_H_AUTH | IPD_H_USER,
    .finish = session_delete,
};
const struct ipd_handler ipd_h_session_variables = {
    .flags = IPD_H_AUTH | IPD_H_USER,
    .finish = session_variables,
    .cleanup = vars_cleanup,
};
