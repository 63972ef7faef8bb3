/*
 * h_calls.c - POST /v1/executions/{id}/calls/{call_id}: a client's answer
 * to a call its running code made (call_client: the stream's "call"
 * event; docs/API.md, "Calls from the code to its client").
 *
 * The body is request data on its way into a sandboxed run: it is read
 * bounded (IPD_EXEC_ANSWER_BODY_MAX), parsed, checked for its exact keys
 * and types (every field bounded), written again compactly and handed to
 * the execution pool (ipd_exec_pool_answer), which finds the execution in
 * the caller's scope and gives the answer to its live channel; the run's
 * supervisor wakes and writes it to the code.  Nothing blocks: 204 at
 * once, or the pool's refusal (the table below).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../service/exec/pool.h"
#include "http.h"

#define TYPE_MAX 64             /* error.type: a Python identifier */
#define MESSAGE_MAX (64 * 1024) /* error.message, bytes */
#define WHY_MAX 256

/* How the answer is handed on: one line, the client's numbers as they
 * came (no JSON_REAL_PRECISION: a reply's 12 digits would change the
 * code's data), its text as UTF-8 (jansson checked it). */
#define ANSWER_FLAGS JSON_COMPACT

/* The pool's refusals, as the client is told them. */
static const struct {
    enum ipd_http_error he;
    const char *msg;
} refusals[] = {
    [IPD_EXEC_ANSWER_NO_EXEC] = {IPD_HE_NOT_FOUND,
                                 "no such execution (results are kept for a "
                                 "limited time)"},
    [IPD_EXEC_ANSWER_OVER] = {IPD_HE_CALL_EXPIRED,
                              "the execution is over: its calls can no "
                              "longer be answered"},
    [IPD_EXEC_ANSWER_NO_CALL] = {IPD_HE_NOT_FOUND,
                                 "no such call in this execution"},
    [IPD_EXEC_ANSWER_TWICE] = {IPD_HE_CONFLICT,
                               "this call has been answered already"},
    [IPD_EXEC_ANSWER_GONE] = {IPD_HE_CALL_EXPIRED,
                              "the call is over: it was not answered in "
                              "time, or the execution's client went away"},
};

/* Refused before the body: a Content-Type that is not JSON (none is
 * taken as JSON), or a Content-Length over the bound (the daemon would
 * refuse it after reading it all). */
static void answer_begin(struct ipd_req *r)
{
    const char *ct = ipd_req_header(r, MHD_HTTP_HEADER_CONTENT_TYPE);
    const char *cl = ipd_req_header(r, MHD_HTTP_HEADER_CONTENT_LENGTH);
    int64_t len = 0;
    if (ct && !ipd_media_type_is(ct, "application/json"))
        ipd_reply_code(r, IPD_HE_UNSUPPORTED_MEDIA_TYPE,
                       "an answer is JSON: send Content-Type: "
                       "application/json");
    else if (cl && !ipd_int_parse(cl, 0, INT64_MAX, &len) &&
             len > IPD_EXEC_ANSWER_BODY_MAX)
        ipd_reply_code(r, IPD_HE_PAYLOAD_TOO_LARGE,
                       "request body over %d bytes", IPD_EXEC_ANSWER_BODY_MAX);
}

/* s (n bytes) is a Python identifier of ASCII: [A-Za-z_][A-Za-z0-9_]*, 1
 * to TYPE_MAX characters. */
static bool identifier(const char *s, size_t n)
{
    if (n < 1 || n > TYPE_MAX || (s[0] >= '0' && s[0] <= '9'))
        return false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
              (c >= '0' && c <= '9') || c == '_'))
            return false;
    }
    return true;
}

/* err is an answer's "error": exactly {"type": <identifier>, "message":
 * <string of at most MESSAGE_MAX bytes>}.  Else false with why. */
static bool error_valid(const json_t *err, char why[WHY_MAX])
{
    const json_t *type = json_object_get(err, "type");
    const json_t *msg = json_object_get(err, "message");
    if (!json_is_object(err) || json_object_size(err) != 2 || !type || !msg)
        snprintf(why, WHY_MAX,
                 "\"error\" must be an object with exactly the keys "
                 "\"type\" and \"message\"");
    else if (!json_is_string(type) ||
             !identifier(json_string_value(type), json_string_length(type)))
        snprintf(why, WHY_MAX,
                 "error.type must be a Python identifier: 1 to %d ASCII "
                 "letters, digits and underscores, not starting with a digit",
                 TYPE_MAX);
    else if (!json_is_string(msg))
        snprintf(why, WHY_MAX, "error.message must be a string");
    else if (json_string_length(msg) > MESSAGE_MAX)
        snprintf(why, WHY_MAX, "error.message is over %d bytes", MESSAGE_MAX);
    else
        return true;
    return false;
}

/* doc is an answer: exactly {"result": <any JSON>} or {"error": {...}}
 * (error_valid).  Else false with why, for the client. */
static bool answer_valid(const json_t *doc, char why[WHY_MAX])
{
    const json_t *err = json_object_get(doc, "error");
    if (json_is_object(doc) && json_object_size(doc) == 1 &&
        json_object_get(doc, "result"))
        return true;
    if (json_is_object(doc) && json_object_size(doc) == 1 && err)
        return error_valid(err, why);
    snprintf(why, WHY_MAX,
             "an answer is an object with exactly one key: \"result\" (any "
             "JSON) or \"error\" ({\"type\", \"message\"})");
    return false;
}

/* The pool's outcome rc for an answer of len bytes (the run's bound:
 * max), as the reply. */
static void reply_outcome(struct ipd_req *r, enum ipd_exec_answer rc,
                          size_t len, size_t max)
{
    if (rc == IPD_EXEC_ANSWER_OK)
        ipd_reply_empty(r, MHD_HTTP_NO_CONTENT);
    else if (rc == IPD_EXEC_ANSWER_TOO_LARGE)
        ipd_reply_code(r, IPD_HE_PAYLOAD_TOO_LARGE,
                       "the answer is %zu bytes (written compactly), over "
                       "this execution's limit of %zu bytes",
                       len, max);
    else
        ipd_reply_code(r, refusals[rc].he, "%s", refusals[rc].msg);
}

static void answer_finish(struct ipd_req *r)
{
    struct ipd_exec_pool *p = r->app->exec;
    char why[WHY_MAX];
    size_t max = 0;
    json_t *doc = ipd_req_json_body(r);
    if (!doc)
        return;
    if (!answer_valid(doc, why)) {
        ipd_reply_code(r, IPD_HE_INVALID_REQUEST, "%s", why);
        json_decref(doc);
        return;
    }
    char *text = json_dumps(doc, ANSWER_FLAGS);
    json_decref(doc);
    if (!text) {
        ipd_reply_code(r, IPD_HE_INTERNAL_ERROR,
                       "the answer could not be encoded");
        return;
    }
    size_t len = strlen(text);
    /* Without executions on this server there are none to answer, as
     * GET /v1/executions/{id} finds none. */
    enum ipd_exec_answer rc =
        p ? ipd_exec_pool_answer(p, r->param, r->principal.tenant,
                                 r->principal.user_id, r->param2, text, len,
                                 &max)
          : IPD_EXEC_ANSWER_NO_EXEC;
    free(text);
    reply_outcome(r, rc, len, max);
}

const struct ipd_handler ipd_h_calls_answer = {
    .flags = IPD_H_AUTH | IPD_H_USER,
    .scope = IPD_SCOPE_EXECUTIONS,
    .body_max = IPD_EXEC_ANSWER_BODY_MAX,
    .begin = answer_begin,
    .finish = answer_finish,
};
