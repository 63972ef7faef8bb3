/*
 * router.c - (method, path) to handler.  Paths are matched segment by
 * segment; "{id}" matches one segment and is copied into r->param.
 */
#include <string.h>

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
    {"/v1/files",
     "GET, HEAD, POST, OPTIONS",
     {{"GET", &ipd_h_files_list}, {"POST", &ipd_h_files_create}}},
    {"/v1/files/{id}",
     "GET, HEAD, DELETE, OPTIONS",
     {{"GET", &ipd_h_files_get}, {"DELETE", &ipd_h_files_delete}}},
    {"/v1/admin/cleanup", "POST, OPTIONS",
     {{"POST", &ipd_h_admin_cleanup}}},
    {"/v1/admin/status", "GET, HEAD, OPTIONS",
     {{"GET", &ipd_h_admin_status}}},
    {"/metrics", "GET, HEAD, OPTIONS", {{"GET", &ipd_h_metrics}}},
    {"/v1/executions", "POST, OPTIONS",
     {{"POST", &ipd_h_executions_create}}},
    {"/v1/executions/{id}", "GET, HEAD, OPTIONS",
     {{"GET", &ipd_h_executions_get}}},
    {"/v1/packages", "GET, HEAD, POST, OPTIONS",
     {{"GET", &ipd_h_packages_list}, {"POST", &ipd_h_packages_install}}},
    {"/v1/files/{id}/content",
     "GET, HEAD, OPTIONS",
     {{"GET", &ipd_h_files_content}}},
    {"/v1/sessions", "GET, HEAD, POST, OPTIONS",
     {{"GET", &ipd_h_sessions_list}, {"POST", &ipd_h_sessions_create}}},
    {"/v1/sessions/{id}", "GET, HEAD, DELETE, OPTIONS",
     {{"GET", &ipd_h_session_get}, {"DELETE", &ipd_h_session_delete}}},
    {"/v1/sessions/{id}/variables", "GET, HEAD, OPTIONS",
     {{"GET", &ipd_h_session_variables}}},
};

/* Match path against pattern; the {id} segment goes to param. */
static bool match(const char *pattern, const char *path, char *param,
                  size_t param_size)
{
    while (*pattern && *path) {
        if (*pattern != '/' || *path != '/')
            return false;
        pattern++;
        path++;
        const char *pe = strchr(pattern, '/');
        const char *se = strchr(path, '/');
        size_t pn = pe ? (size_t)(pe - pattern) : strlen(pattern);
        size_t sn = se ? (size_t)(se - path) : strlen(path);
        if (pn == 4 && !strncmp(pattern, "{id}", 4)) {
            if (!sn || sn >= param_size)
                return false;
            memcpy(param, path, sn);
            param[sn] = '\0';
        } else if (pn != sn || strncmp(pattern, path, pn) != 0) {
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
        if (!match(routes[i].pattern, r->path, r->param, sizeof(r->param)))
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
    r->param[0] = '\0';
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
