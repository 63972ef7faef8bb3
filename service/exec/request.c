/*
 * request.c - an execution request from a JSON document and a principal
 * (request.h).  The messages are the ones the contract's examples and the
 * tests quote: change them only with those.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../venv/requirement.h"
#include "../common/util.h"
#include "request.h"

/* The contract's error codes a request can be refused with. */
static const char INVALID[] = "invalid_request";
static const char FORBIDDEN[] = "forbidden";
static const char NOT_FOUND[] = "not_found";
static const char TOO_LARGE[] = "payload_too_large";

/* Fill f with code and the printf-style message; returns false, so a
 * check can `return refuse(...)`. */
IPD_PRINTF(3, 4)
static bool refuse(struct ipd_refusal *f, const char *code, const char *fmt,
                   ...)
{
    va_list ap;
    f->code = code;
    va_start(ap, fmt);
    vsnprintf(f->message, sizeof(f->message), fmt, ap);
    va_end(ap);
    return false;
}

/* The configured policy called name, or NULL. */
static const struct ipd_exec_policy *
policy_named(const struct ipd_exec_request_env *env, const char *name)
{
    for (size_t i = 0; name && i < env->n_policies; i++)
        if (!strcmp(env->policies[i].name, name))
            return &env->policies[i];
    return NULL;
}

/* A callback_url the SSRF guard refuses on its face (scheme, an address
 * literal, a loopback name) is refused now, while the client is there to
 * be told; a name that needs DNS is checked at delivery. */
static bool callback_url_ok(const struct ipd_exec_request_env *env,
                            const json_t *v, struct ipd_refusal *f)
{
    const char *u = json_string_value(v);
    struct ipd_buf err;
    enum ipd_err rc;
    if (!u || json_string_length(v) > IPD_EXEC_CALLBACK_URL_MAX ||
        strlen(u) != json_string_length(v) ||
        (strncmp(u, "http://", 7) != 0 && strncmp(u, "https://", 8) != 0))
        return refuse(f, INVALID,
                      "\"callback_url\" must be an http or https URL "
                      "of at most %d bytes",
                      IPD_EXEC_CALLBACK_URL_MAX);
    ipd_buf_init(&err, 512);
    rc = ipd_fetch_url_check(env->fetch, u, &err);
    /* Refused or unusable (the guard answers nothing else), the request
     * is what is wrong: invalid. */
    if (rc == IPD_ERR_FORBIDDEN)
        refuse(f, INVALID,
               "\"callback_url\" is refused: %s; an operator can allow "
               "such addresses with --fetch-allow (CIDRs)",
               err.buf);
    else if (rc)
        refuse(f, INVALID, "\"callback_url\" is not usable: %s",
               err.len ? err.buf : ipd_err_name(rc));
    ipd_buf_release(&err);
    return rc == IPD_OK;
}

/* packages, async and callback_url. */
static bool delivery_ok(const struct ipd_exec_request_env *env,
                        const json_t *doc, struct ipd_refusal *f)
{
    const json_t *v = json_object_get(doc, "packages");
    char why[128];
    if (v && !json_is_null(v) && !json_is_array(v))
        return refuse(f, INVALID,
                      "\"packages\" must be an array of requirement "
                      "strings");
    if (!ipd_requirement_list_ok(v, why, sizeof(why)))
        return refuse(f, INVALID, "%s", why);
    static const char *const flags[] = {"async", "stream", "detach"};
    for (size_t i = 0; i < IPD_ARRAY_LEN(flags); i++) {
        v = json_object_get(doc, flags[i]);
        if (v && !json_is_boolean(v) && !json_is_null(v))
            return refuse(f, INVALID, "\"%s\" must be true or false", flags[i]);
    }
    v = json_object_get(doc, "callback_url");
    return !v || json_is_null(v) || callback_url_ok(env, v, f);
}

/* A Python identifier of ASCII letters, digits and _, not a dunder. */
static bool function_name_ok(const char *s, size_t n)
{
    if (!n || n > IPD_EXEC_FUNCTION_NAME_MAX || (s[0] >= '0' && s[0] <= '9') ||
        (n > 1 && s[0] == '_' && s[1] == '_'))
        return false;
    for (size_t i = 0; i < n; i++)
        if (!(s[i] == '_' || (s[i] >= '0' && s[i] <= '9') ||
              ((s[i] | 0x20) >= 'a' && (s[i] | 0x20) <= 'z')))
            return false;
    return true;
}

/* "functions": at most IPD_EXEC_FUNCTIONS_MAX distinct names. */
static bool functions_ok(const json_t *doc, struct ipd_refusal *f)
{
    const json_t *v = json_object_get(doc, "functions");
    size_t i, k;
    if (!v || json_is_null(v))
        return true;
    if (!json_is_array(v) || json_array_size(v) > IPD_EXEC_FUNCTIONS_MAX)
        return refuse(f, INVALID,
                      "\"functions\" must be an array of at most %d names",
                      IPD_EXEC_FUNCTIONS_MAX);
    for (i = 0; i < json_array_size(v); i++) {
        const json_t *name = json_array_get(v, i);
        if (!json_is_string(name) ||
            !function_name_ok(json_string_value(name),
                              json_string_length(name)))
            return refuse(f, INVALID,
                          "\"functions\"[%zu] must be a Python name (ASCII "
                          "letters, digits and _, not starting with a digit "
                          "or __, at most %d characters)",
                          i, IPD_EXEC_FUNCTION_NAME_MAX);
        for (k = 0; k < i; k++)
            if (json_equal(name, json_array_get(v, k)))
                return refuse(f, INVALID, "\"functions\" names %s twice",
                              json_string_value(name));
    }
    return true;
}

/* session_id, store_outputs and variables: a session id of the wrong
 * shape is nobody's (not_found), and a session keeps its packages. */
static bool session_ok(const json_t *doc, struct ipd_refusal *f)
{
    const json_t *v = json_object_get(doc, "session_id");
    if (v && !json_is_null(v)) {
        if (!json_is_string(v) || !ipd_id_valid("sess", json_string_value(v)))
            return refuse(f, NOT_FOUND, "no such session");
        if (json_array_size(json_object_get(doc, "packages")) > 0)
            return refuse(f, INVALID,
                          "a session keeps the packages it started with: "
                          "install them (POST /v1/packages) and create a "
                          "new session");
    }
    v = json_object_get(doc, "store_outputs");
    if (v && !json_is_boolean(v) && !json_is_null(v))
        return refuse(f, INVALID, "\"store_outputs\" must be true or false");
    v = json_object_get(doc, "variables");
    if (v && !json_is_null(v) && !json_is_object(v))
        return refuse(f, INVALID,
                      "\"variables\" must be an object of name: value");
    return true;
}

/* The body's code, files and timeout, then its optional fields. */
static bool body_ok(const struct ipd_exec_request_env *env, const json_t *doc,
                    struct ipd_refusal *f)
{
    const json_t *code = json_object_get(doc, "code");
    const json_t *files = json_object_get(doc, "files");
    const json_t *timeout = json_object_get(doc, "timeout");
    if (!json_is_object(doc) || !json_is_string(code))
        return refuse(f, INVALID,
                      "the body must be an object with a string \"code\"");
    if (json_string_length(code) > IPD_EXEC_CODE_MAX)
        return refuse(f, TOO_LARGE, "code is %zu bytes; at most %d are allowed",
                      json_string_length(code), IPD_EXEC_CODE_MAX);
    if (files && !json_is_null(files) &&
        (!json_is_array(files) || json_array_size(files) > IPD_EXEC_FILES_MAX))
        return refuse(f, INVALID,
                      "\"files\" must be an array of at most %d file ids",
                      IPD_EXEC_FILES_MAX);
    if (timeout && !json_is_null(timeout) &&
        (!json_is_number(timeout) || json_number_value(timeout) <= 0 ||
         json_number_value(timeout) > IPD_EXEC_TIMEOUT_MAX_S))
        return refuse(f, INVALID,
                      "\"timeout\" must be a positive number of seconds");
    return delivery_ok(env, doc, f) && session_ok(doc, f) &&
           functions_ok(doc, f);
}

/* The principal's policy, or a stricter one the request names (borrowed
 * from who or doc); NULL when neither can be used. */
static const char *pick_policy(const struct ipd_exec_request_env *env,
                               const struct ipd_principal *who,
                               const json_t *doc, struct ipd_refusal *f)
{
    const char *policy = who->policy[0] ? who->policy : "standard";
    const struct ipd_exec_policy *kp = policy_named(env, policy);
    const json_t *want = json_object_get(doc, "policy");
    if (!kp) {
        /* The operator removed the policy this key names from the config:
         * never fall back to another one. */
        refuse(f, FORBIDDEN,
               "this key's policy %s is not configured on the server; ask "
               "an administrator",
               policy);
        return NULL;
    }
    if (!want || json_is_null(want))
        return policy;
    const char *name = json_string_value(want);
    const struct ipd_exec_policy *wp = policy_named(env, name);
    if (!wp) {
        refuse(f, INVALID,
               "\"policy\" must name a configured policy (strict, standard, "
               "networked, or one the operator defined)");
        return NULL;
    }
    if (!ipd_policy_within(wp, kp)) {
        refuse(f, FORBIDDEN,
               "policy %s is less strict than this key's policy %s; a "
               "request can only tighten it",
               name, policy);
        return NULL;
    }
    return name;
}

/* The body's file ids into j; false for an id that can't be one of the
 * caller's files. */
static bool add_files(struct ipd_exec_job *j, const json_t *files,
                      struct ipd_refusal *f)
{
    size_t n = json_is_array(files) ? json_array_size(files) : 0;
    j->file_ids = ipd_xcalloc(n ? n : 1, sizeof(*j->file_ids));
    for (size_t i = 0; i < n; i++) {
        const json_t *id = json_array_get(files, i);
        /* An id of the wrong shape can't be one of the caller's files. */
        if (!json_is_string(id) || !ipd_id_valid("file", json_string_value(id)))
            return refuse(f, NOT_FOUND, "no such file: %s",
                          json_is_string(id) ? json_string_value(id)
                                             : "(not a string)");
        j->file_ids[j->n_files++] = ipd_xstrdup(json_string_value(id));
    }
    return true;
}

/* The optional fields of a checked body into j. */
static void add_options(struct ipd_exec_job *j, const json_t *doc)
{
    const json_t *timeout = json_object_get(doc, "timeout");
    if (json_is_number(timeout))
        j->timeout_ms = (int64_t)(json_number_value(timeout) * 1000.0);
    json_t *vars = json_object_get(doc, "variables");
    if (json_is_object(vars) && json_object_size(vars))
        j->variables = json_incref(vars);
    const json_t *sid = json_object_get(doc, "session_id");
    if (json_is_string(sid))
        snprintf(j->session_id, sizeof(j->session_id), "%s",
                 json_string_value(sid));
    const json_t *cbu = json_object_get(doc, "callback_url");
    if (json_is_string(cbu))
        j->callback_url = ipd_xstrdup(json_string_value(cbu));
    j->store_outputs = !json_is_false(json_object_get(doc, "store_outputs"));
    j->stream = json_is_true(json_object_get(doc, "stream"));
    j->detach = json_is_true(json_object_get(doc, "detach"));
    json_t *fn = json_object_get(doc, "functions");
    if (json_array_size(fn)) {
        j->functions = json_incref(fn);
        j->n_functions = json_array_size(fn);
    }
    const json_t *pk = json_object_get(doc, "packages");
    size_t np = json_array_size(pk);
    j->packages = ipd_xcalloc(np ? np : 1, sizeof(*j->packages));
    for (size_t i = 0; i < np; i++)
        j->packages[j->n_packages++] =
            ipd_xstrdup(json_string_value(json_array_get(pk, i)));
}

/* A new job from a checked body for who, run under policy; the shares
 * are those of who's policy kp, whatever policy the request names. */
static struct ipd_exec_job *job_new(const struct ipd_principal *who,
                                    const json_t *doc, const char *policy,
                                    const struct ipd_exec_policy *kp)
{
    struct ipd_exec_job *j = ipd_exec_job_new();
    const json_t *code = json_object_get(doc, "code");
    snprintf(j->tenant, sizeof(j->tenant), "%s", who->tenant);
    snprintf(j->user_id, sizeof(j->user_id), "%s", who->user_id);
    snprintf(j->policy, sizeof(j->policy), "%s", policy);
    j->admin = who->admin;
    j->code_len = json_string_length(code);
    j->code = ipd_xmalloc(j->code_len + 1);
    memcpy(j->code, json_string_value(code), j->code_len + 1);
    j->share_running = kp->tenant_running;
    j->share_queued = kp->tenant_queued;
    j->share_results = kp->tenant_results;
    j->share_callbacks = kp->tenant_callbacks;
    add_options(j, doc);
    return j;
}

enum ipd_err ipd_exec_request_parse(const struct ipd_exec_request_env *env,
                                    const struct ipd_principal *who,
                                    const json_t *doc,
                                    struct ipd_exec_job **out, bool *async,
                                    struct ipd_refusal *refusal)
{
    struct ipd_exec_job *j = NULL;
    const char *policy = NULL;
    enum ipd_err rc = IPD_ERR_INVALID;

    *out = NULL;
    *async = false;
    refusal->code = NULL;
    refusal->message[0] = '\0';
    if (!body_ok(env, doc, refusal))
        goto out;
    policy = pick_policy(env, who, doc, refusal);
    if (!policy)
        goto out;
    j = job_new(who, doc, policy,
                policy_named(env, who->policy[0] ? who->policy : "standard"));
    if (!add_files(j, json_object_get(doc, "files"), refusal))
        goto out;
    *async = json_is_true(json_object_get(doc, "async")) ||
             json_is_string(json_object_get(doc, "callback_url"));
    *out = j;
    j = NULL;
    rc = IPD_OK;
out:
    ipd_exec_job_free(j);
    return rc;
}
