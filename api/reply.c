/*
 * reply.c - replies: JSON bodies, the contract's error body, the common
 * headers, and the one mapping from internal errors to HTTP statuses
 * (ipd_http_error_of).
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../service/common/log.h"
#include "../service/common/util.h"
#include "../service/common/json_out.h"
#include "../service/exec/request.h"
#include "http.h"

static const struct {
    unsigned status;
    const char *code;
} http_errors[] = {
    [IPD_HE_INVALID_REQUEST] = {400, "invalid_request"},
    [IPD_HE_INVALID_JSON] = {400, "invalid_json"},
    [IPD_HE_INVALID_USER_ID] = {400, "invalid_user_id"},
    [IPD_HE_UNAUTHORIZED] = {401, "unauthorized"},
    [IPD_HE_FORBIDDEN] = {403, "forbidden"},
    [IPD_HE_NOT_FOUND] = {404, "not_found"},
    [IPD_HE_METHOD_NOT_ALLOWED] = {405, "method_not_allowed"},
    [IPD_HE_CONFLICT] = {409, "conflict"},
    [IPD_HE_SESSION_BUSY] = {409, "session_busy"},
    [IPD_HE_SESSION_EXPIRED] = {410, "session_expired"},
    /* Beyond the contract's codes: an answer to a call that is over (its
     * run ended, it timed out); docs/API.md. */
    [IPD_HE_CALL_EXPIRED] = {410, "call_expired"},
    [IPD_HE_PAYLOAD_TOO_LARGE] = {413, "payload_too_large"},
    [IPD_HE_UNSUPPORTED_MEDIA_TYPE] = {415, "unsupported_media_type"},
    [IPD_HE_TOO_MANY_REQUESTS] = {429, "too_many_requests"},
    [IPD_HE_INTERNAL_ERROR] = {500, "internal_error"},
    [IPD_HE_UPSTREAM_ERROR] = {502, "upstream_error"},
    [IPD_HE_UNAVAILABLE] = {503, "unavailable"},
    [IPD_HE_UPSTREAM_TIMEOUT] = {504, "upstream_timeout"},
    [IPD_HE_QUOTA_EXCEEDED] = {507, "quota_exceeded"},
};

static void add_common_headers(struct ipd_req *r, struct MHD_Response *resp)
{
    MHD_add_response_header(resp, "X-Request-Id", r->request_id);
    MHD_add_response_header(resp, "X-Content-Type-Options", "nosniff");
    if (r->allow)
        MHD_add_response_header(resp, MHD_HTTP_HEADER_ALLOW, r->allow);
    if (r->execution_id)
        MHD_add_response_header(resp, "X-Execution-Id", r->execution_id);
    if (r->mcp_session[0])
        MHD_add_response_header(resp, "Mcp-Session-Id", r->mcp_session);
    if (r->close)
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONNECTION, "close");
    if (r->origin) {
        MHD_add_response_header(resp, "Access-Control-Allow-Origin", r->origin);
        MHD_add_response_header(resp, "Vary", "Origin");
        MHD_add_response_header(
            resp, "Access-Control-Expose-Headers",
            "X-Request-Id, X-Execution-Id, ETag, Content-Disposition, "
            "Retry-After, Mcp-Session-Id");
    }
}

void ipd_reply_response(struct ipd_req *r, unsigned status,
                        struct MHD_Response *resp, uint64_t body_len)
{
    IPD_ASSERT(!r->status);
    IPD_ASSERT(resp);
    add_common_headers(r, resp);
    r->status = status;
    r->bytes_out = body_len;
    /* Refused in a state where libmicrohttpd takes no answer (seen after
     * a 100 Continue for a request with a bare CR in a header): nothing
     * would ever answer the client, so the daemon closes the connection
     * (r->unqueued) instead of leaving it open until the idle timeout. */
    if (MHD_queue_response(r->conn, status, resp) != MHD_YES) {
        r->unqueued = true;
        ipd_warn("request_id=%s could not queue the response; closing the "
                 "connection",
                 r->request_id);
    }
    MHD_destroy_response(resp);
}

/* A response for a JSON body we own (malloc'd text of len bytes). */
static struct MHD_Response *json_response(char *text, size_t len)
{
    struct MHD_Response *resp =
        MHD_create_response_from_buffer(len, text, MHD_RESPMEM_MUST_FREE);
    IPD_ASSERT(resp);
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE,
                            "application/json");
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
    return resp;
}

static void reply_json_text(struct ipd_req *r, unsigned status, char *text,
                            size_t len)
{
    ipd_reply_response(r, status, json_response(text, len), len);
}

void ipd_reply_json(struct ipd_req *r, unsigned status, json_t *json)
{
    char *text = json ? json_dumps(json, IPD_JSON_REPLY_FLAGS) : NULL;
    json_decref(json);
    if (!text) {
        /* A value that could not be built or encoded is our bug, never a
         * reason to stop serving. */
        ipd_reply_code(r, IPD_HE_INTERNAL_ERROR,
                       "the reply could not be encoded");
        return;
    }
    reply_json_text(r, status, text, strlen(text));
}

void ipd_reply_json_buf(struct ipd_req *r, unsigned status, struct ipd_buf *b)
{
    size_t len = 0;
    char *text = ipd_buf_detach(b, &len);
    reply_json_text(r, status, text, len);
}

void ipd_reply_empty(struct ipd_req *r, unsigned status)
{
    struct MHD_Response *resp =
        MHD_create_response_from_buffer(0, NULL, MHD_RESPMEM_PERSISTENT);
    IPD_ASSERT(resp);
    ipd_reply_response(r, status, resp, 0);
}

void ipd_reply_code(struct ipd_req *r, enum ipd_http_error e, const char *fmt,
                    ...)
{
    char raw[1024], msg[1024];
    struct ipd_buf b;
    size_t len;
    va_list ap;
    int n;

    va_start(ap, fmt);
    n = vsnprintf(raw, sizeof(raw), fmt, ap);
    va_end(ap);
    /* Messages carry request bytes (a path, a filename): whatever they
     * hold, the body is valid UTF-8, cut on a character boundary. */
    ipd_utf8_lossy(msg, sizeof(msg), raw,
                   n < 0 ? 0 : strnlen(raw, sizeof(raw)));

    unsigned status = http_errors[e].status;
    r->error_code = http_errors[e].code;
    ipd_buf_init(&b, IPD_BUF_UNLIMITED);
    enum ipd_err wrc = ipd_buf_adds(&b, "{\"error\":{\"code\":");
    if (!wrc)
        wrc = ipd_jw_str(&b, http_errors[e].code);
    if (!wrc)
        wrc = ipd_buf_adds(&b, ",\"message\":");
    if (!wrc)
        wrc = ipd_jw_str(&b, msg);
    if (!wrc)
        wrc = ipd_buf_adds(&b, ",\"request_id\":");
    if (!wrc)
        wrc = ipd_jw_str(&b, r->request_id);
    if (!wrc)
        wrc = ipd_buf_adds(&b, "}}");
    char *text = ipd_buf_detach(&b, &len);
    if (wrc) { /* an unlimited buffer only grows; never a reason to stop */
        free(text);
        text = ipd_xstrdup("{\"error\":{\"code\":\"internal_error\"}}");
        len = strlen(text);
    }
    struct MHD_Response *resp = json_response(text, len);
    if (e == IPD_HE_UNAUTHORIZED)
        MHD_add_response_header(resp, MHD_HTTP_HEADER_WWW_AUTHENTICATE,
                                "Bearer");
    if (e == IPD_HE_UNAVAILABLE || e == IPD_HE_TOO_MANY_REQUESTS) {
        char ra[16];
        snprintf(ra, sizeof(ra), "%d",
                 r->retry_after_s > 0 ? r->retry_after_s : 5);
        MHD_add_response_header(resp, MHD_HTTP_HEADER_RETRY_AFTER, ra);
    }
    /* Client faults are logged apart from our own failures. */
    if (status >= 500)
        ipd_error("request_id=%s %u %s: %s", r->request_id, status,
                  http_errors[e].code, msg);
    else
        ipd_debug("request_id=%s client error %u %s: %s", r->request_id, status,
                  http_errors[e].code, msg);
    ipd_reply_response(r, status, resp, len);
}

/* The one place an enum ipd_err becomes an HTTP status: its contract
 * error, and the message when the caller has no detail: pre, then the
 * operation ("what") unless post is NULL, then post.  Errors not listed
 * (IPD_OK included: a failure without one is our bug) are
 * internal_error. */
static const struct {
    bool set;
    enum ipd_http_error he;
    const char *pre, *post;
} failures[] = {
    [IPD_ERR_NOT_FOUND] = {true, IPD_HE_NOT_FOUND, "not found", NULL},
    [IPD_ERR_INVALID] = {true, IPD_HE_INVALID_REQUEST, "invalid ", ""},
    [IPD_ERR_CONFLICT] = {true, IPD_HE_CONFLICT, "conflict while ", ""},
    [IPD_ERR_TOO_LARGE] = {true, IPD_HE_PAYLOAD_TOO_LARGE, "", ": too large"},
    [IPD_ERR_QUOTA] = {true, IPD_HE_QUOTA_EXCEEDED,
                       "the user's storage quota is exhausted", NULL},
    /* 507 is the contract's "no room for this write"; the message tells a
     * full server from a full quota.  Deletes keep working (the reserve). */
    [IPD_ERR_NO_SPACE] = {true, IPD_HE_QUOTA_EXCEEDED,
                          "the server is out of storage space while ",
                          "; delete files or retry later"},
    /* Only sessions end and are busy (service/exec/session.c). */
    [IPD_ERR_GONE] = {true, IPD_HE_SESSION_EXPIRED, "the session ended", NULL},
    [IPD_ERR_IN_USE] = {true, IPD_HE_SESSION_BUSY, "the session is busy", NULL},
    [IPD_ERR_BUSY] = {true, IPD_HE_TOO_MANY_REQUESTS, "too busy while ",
                      "; retry later"},
    [IPD_ERR_UNAUTHORIZED] = {true, IPD_HE_UNAUTHORIZED, "invalid API key",
                              NULL},
    [IPD_ERR_FORBIDDEN] = {true, IPD_HE_FORBIDDEN, "not allowed", NULL},
    [IPD_ERR_MEDIA_TYPE] = {true, IPD_HE_UNSUPPORTED_MEDIA_TYPE,
                            "unsupported content type", NULL},
    [IPD_ERR_UNAVAILABLE] = {true, IPD_HE_UNAVAILABLE,
                             "storage is unavailable while ", "; retry later"},
    [IPD_ERR_TIMEOUT] = {true, IPD_HE_UNAVAILABLE,
                         "storage is unavailable while ", "; retry later"},
    [IPD_ERR_UPSTREAM] = {true, IPD_HE_UPSTREAM_ERROR,
                          "the remote server failed while ", ""},
    [IPD_ERR_UPSTREAM_TIMEOUT] = {true, IPD_HE_UPSTREAM_TIMEOUT,
                                  "the remote server timed out while ", ""},
};

static bool listed(enum ipd_err err)
{
    return (size_t)err < IPD_ARRAY_LEN(failures) && failures[err].set;
}

enum ipd_http_error ipd_http_error_of(enum ipd_err err)
{
    return listed(err) ? failures[err].he : IPD_HE_INTERNAL_ERROR;
}

void ipd_reply_failure(struct ipd_req *r, enum ipd_err err, const char *detail,
                       const char *what)
{
    enum ipd_http_error he = ipd_http_error_of(err);
    if (detail && *detail)
        ipd_reply_code(r, he, "%s", detail);
    else if (!listed(err))
        ipd_reply_code(r, he, "internal error while %s (%s)", what,
                       ipd_err_name(err));
    else if (!failures[err].post)
        ipd_reply_code(r, he, "%s", failures[err].pre);
    else
        ipd_reply_code(r, he, "%s%s%s", failures[err].pre, what,
                       failures[err].post);
}

void ipd_reply_refusal(struct ipd_req *r, const struct ipd_refusal *f)
{
    for (size_t e = 0; f->code && e < IPD_ARRAY_LEN(http_errors); e++)
        if (http_errors[e].code && !strcmp(http_errors[e].code, f->code)) {
            ipd_reply_code(r, (enum ipd_http_error)e, "%s", f->message);
            return;
        }
    /* A code the contract does not have is our bug. */
    ipd_reply_code(r, IPD_HE_INTERNAL_ERROR,
                   "internal error: refused with an unknown code (%s): %s",
                   f->code ? f->code : "none", f->message);
}
