/*
 * router.c - (method, path) to handler.  The path as sent is matched
 * segment by segment, each decoded with its length; a "{name}" segment
 * matches one segment and is copied into a parameter: the first into
 * r->param, the second into r->param2 ("/v1/executions/{id}/calls/
 * {call_id}").
 */
#include <stdlib.h>
#include <string.h>

#include "../service/common/util.h"
#include "http.h"

struct method_handler {
    const char *method;
    const struct ipd_handler *handler;
};

struct route {
    const char *pattern;
    const char *allow; /* the Allow header: every method, plus OPTIONS */
    struct method_handler methods[4];
};

static const struct route routes[] = {
    {"/healthz", "GET, HEAD, OPTIONS", {{"GET", &ipd_h_healthz}}},
    {"/readyz", "GET, HEAD, OPTIONS", {{"GET", &ipd_h_readyz}}},
    {"/v1/openapi.json", "GET, HEAD, OPTIONS", {{"GET", &ipd_h_openapi}}},
    {"/console", "GET, HEAD, OPTIONS", {{"GET", &ipd_h_console}}},
    {"/console/{asset}", "GET, HEAD, OPTIONS", {{"GET", &ipd_h_console_asset}}},
    {"/v1/files",
     "GET, HEAD, POST, OPTIONS",
     {{"GET", &ipd_h_files_list}, {"POST", &ipd_h_files_create}}},
    {"/v1/files/{id}",
     "GET, HEAD, DELETE, OPTIONS",
     {{"GET", &ipd_h_files_get}, {"DELETE", &ipd_h_files_delete}}},
    {"/v1/admin/cleanup", "POST, OPTIONS", {{"POST", &ipd_h_admin_cleanup}}},
    {"/v1/admin/status", "GET, HEAD, OPTIONS", {{"GET", &ipd_h_admin_status}}},
    {"/metrics", "GET, HEAD, OPTIONS", {{"GET", &ipd_h_metrics}}},
    {"/v1/executions",
     "GET, HEAD, POST, OPTIONS",
     {{"GET", &ipd_h_executions_list}, {"POST", &ipd_h_executions_create}}},
    {"/v1/executions/{id}",
     "GET, HEAD, DELETE, OPTIONS",
     {{"GET", &ipd_h_executions_get}, {"DELETE", &ipd_h_executions_cancel}}},
    {"/v1/executions/{id}/calls/{call_id}",
     "POST, OPTIONS",
     {{"POST", &ipd_h_calls_answer}}},
    {"/v1/tokens", "POST, OPTIONS", {{"POST", &ipd_h_tokens_create}}},
    {"/mcp",
     "POST, DELETE, OPTIONS",
     {{"POST", &ipd_h_mcp_post}, {"DELETE", &ipd_h_mcp_delete}}},
    {"/v1/packages",
     "GET, HEAD, POST, OPTIONS",
     {{"GET", &ipd_h_packages_list}, {"POST", &ipd_h_packages_install}}},
    {"/v1/files/{id}/content",
     "GET, HEAD, OPTIONS",
     {{"GET", &ipd_h_files_content}}},
    {"/v1/sessions",
     "GET, HEAD, POST, OPTIONS",
     {{"GET", &ipd_h_sessions_list}, {"POST", &ipd_h_sessions_create}}},
    {"/v1/sessions/{id}",
     "GET, HEAD, DELETE, OPTIONS",
     {{"GET", &ipd_h_session_get}, {"DELETE", &ipd_h_session_delete}}},
    {"/v1/sessions/{id}/variables",
     "GET, HEAD, OPTIONS",
     {{"GET", &ipd_h_session_variables}}},
};

/* Percent-decode the n raw bytes of one segment into out (cap bytes, no
 * NUL added); a "%" without two hex digits stays itself, as
 * libmicrohttpd leaves it.  The decoded length, or cap + 1 when it does
 * not fit. */
static size_t segment_decode(const char *s, size_t n, char *out, size_t cap)
{
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (c == '%' && i + 2 < n && ipd_hex_value(s[i + 1]) >= 0 &&
            ipd_hex_value(s[i + 2]) >= 0) {
            c = (char)(ipd_hex_value(s[i + 1]) * 16 + ipd_hex_value(s[i + 2]));
            i += 2;
        }
        if (o == cap)
            return cap + 1;
        out[o++] = c;
    }
    return o;
}

/* The length of the segment at p (up to the next '/' or the end). */
static size_t segment_len(const char *p)
{
    const char *e = strchr(p, '/');
    return e ? (size_t)(e - p) : strlen(p);
}

bool ipd_path_valid(const char *raw)
{
    size_t len = strlen(raw);
    char *seg = ipd_xmalloc(len + 1);
    bool ok = true;
    for (const char *p = raw; ok && *p;) {
        if (*p == '/') {
            p++;
            continue;
        }
        size_t n = segment_len(p);
        size_t m = segment_decode(p, n, seg, len);
        for (size_t i = 0; ok && i < m; i++)
            ok = (unsigned char)seg[i] >= 0x20 && seg[i] != 0x7f &&
                 seg[i] != '/';
        ok = ok && ipd_utf8_valid(seg, m);
        p += n;
    }
    free(seg);
    return ok;
}

/* Is the n bytes of pattern at p a parameter ("{name}")? */
static bool is_param(const char *p, size_t n)
{
    return n > 2 && p[0] == '{' && p[n - 1] == '}';
}

/* Match the raw path against pattern, segment by segment, each segment
 * percent-decoded with its length: a decoded NUL or "/" is a byte like
 * any other, so "<id>%00" and "<id>%2Fcontent" are ids that exist
 * nowhere, never <id>.  The parameter segments go to r->param and
 * r->param2, in order (each empty when the pattern has none), with the
 * same decoding and bound: an empty one, or one that does not fit, does
 * not match. */
static bool match(const char *pattern, const char *path, struct ipd_req *r)
{
    char *params[] = {r->param, r->param2};
    size_t n_params = 0;
    char lit[64];
    r->param[0] = r->param2[0] = '\0';
    while (*pattern && *path) {
        if (*pattern != '/' || *path != '/')
            return false;
        pattern++;
        path++;
        size_t pn = segment_len(pattern), sn = segment_len(path);
        if (is_param(pattern, pn)) {
            IPD_ASSERT(n_params < IPD_ARRAY_LEN(params));
            char *param = params[n_params++];
            size_t m = segment_decode(path, sn, param, IPD_ROUTE_PARAM_MAX - 1);
            if (!m || m >= IPD_ROUTE_PARAM_MAX || memchr(param, '\0', m))
                return false;
            param[m] = '\0';
        } else {
            size_t m = segment_decode(path, sn, lit, sizeof(lit));
            if (m != pn || memcmp(pattern, lit, pn) != 0)
                return false;
        }
        pattern += pn;
        path += sn;
    }
    return !*pattern && !*path;
}

const struct ipd_handler *ipd_route(struct ipd_req *r, const char **allow)
{
    *allow = NULL;
    for (size_t i = 0; i < IPD_ARRAY_LEN(routes); i++) {
        if (!match(routes[i].pattern, r->raw_path ? r->raw_path : r->path, r))
            continue;
        *allow = routes[i].allow;
        r->route = routes[i].pattern;
        /* HEAD is GET without the body; libmicrohttpd drops the body. */
        const char *m = strcmp(r->method, "HEAD") ? r->method : "GET";
        for (size_t k = 0; k < IPD_ARRAY_LEN(routes[i].methods); k++) {
            const struct method_handler *mh = &routes[i].methods[k];
            if (mh->method && !strcmp(mh->method, m))
                return mh->handler;
        }
        return NULL;
    }
    r->param[0] = r->param2[0] = '\0';
    r->route = "unmatched";
    return NULL;
}

size_t ipd_route_count(void)
{
    size_t n = 0;
    for (size_t i = 0; i < IPD_ARRAY_LEN(routes); i++)
        for (size_t k = 0; k < IPD_ARRAY_LEN(routes[i].methods); k++)
            n += routes[i].methods[k].method != NULL;
    return n;
}

void ipd_route_at(size_t i, const char **method, const char **pattern)
{
    *method = NULL;
    *pattern = NULL;
    for (size_t r = 0; r < IPD_ARRAY_LEN(routes); r++) {
        for (size_t k = 0; k < IPD_ARRAY_LEN(routes[r].methods); k++) {
            if (!routes[r].methods[k].method)
                continue;
            if (i-- == 0) {
                *method = routes[r].methods[k].method;
                *pattern = routes[r].pattern;
                return;
            }
        }
    }
}
