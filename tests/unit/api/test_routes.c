/*
 * test_routes.c - the router's table (api/router.c) against the OpenAPI
 * document (docs/openapi.json): every (method, path) the server routes is
 * documented, and the document describes nothing the server does not route.
 *
 * Paths are compared with every "{name}" segment reduced to "{}": the
 * router says "{id}", the document names it ("{file_id}").  HEAD and
 * OPTIONS are implied by the router (HEAD wherever GET is, OPTIONS on every
 * path) and are not operations of the document, so a "head" or "options"
 * operation in the document is a difference too.
 *
 * The document checked is the copy compiled into the server (what
 * GET /v1/openapi.json serves); it must also be byte for byte the source
 * docs/openapi.json, found from this file's path.
 */
#include <ctype.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "api/http.h"
#include "test.h"

extern const char ipd_openapi_json[];
extern const unsigned long ipd_openapi_json_len;

static const char *const http_methods[] = {"get",     "put",  "post",  "delete",
                                           "options", "head", "patch", "trace"};

/* pattern with each {name} segment as {}. */
static void normalize(const char *pattern, char *out, size_t n)
{
    size_t o = 0;
    for (const char *p = pattern; *p && o + 3 < n; p++) {
        if (*p == '{') {
            const char *e = strchr(p, '}');
            if (e) {
                out[o++] = '{';
                out[o++] = '}';
                p = e;
                continue;
            }
        }
        out[o++] = *p;
    }
    out[o] = '\0';
}

static void lower(const char *s, char *out, size_t n)
{
    size_t i = 0;
    for (; s[i] && i + 1 < n; i++)
        out[i] = (char)tolower((unsigned char)s[i]);
    out[i] = '\0';
}

static json_t *load_doc(void)
{
    json_error_t err;
    json_t *doc = json_loadb(ipd_openapi_json, ipd_openapi_json_len, 0, &err);
    if (!doc)
        fprintf(stderr,
                "the embedded docs/openapi.json does not parse: "
                "line %d: %s\n",
                err.line, err.text);
    return doc;
}

/* Does the document have (method, path), compared normalized? */
static bool doc_has(json_t *paths, const char *method, const char *pattern)
{
    char want[256], have[256], m[16];
    const char *path;
    json_t *item;
    normalize(pattern, want, sizeof(want));
    lower(method, m, sizeof(m));
    json_object_foreach(paths, path, item)
    {
        normalize(path, have, sizeof(have));
        if (!strcmp(have, want) && json_object_get(item, m))
            return true;
    }
    return false;
}

static bool router_has(const char *method, const char *path)
{
    char want[256], have[256], m[16];
    normalize(path, want, sizeof(want));
    for (size_t i = 0; i < ipd_route_count(); i++) {
        const char *rm, *rp;
        ipd_route_at(i, &rm, &rp);
        normalize(rp, have, sizeof(have));
        lower(rm, m, sizeof(m));
        if (!strcmp(have, want) && !strcmp(m, method))
            return true;
    }
    return false;
}

static void test_every_route_is_documented(void)
{
    json_t *doc = load_doc();
    REQUIRE(doc);
    json_t *paths = json_object_get(doc, "paths");
    REQUIRE(json_is_object(paths));
    REQUIRE(ipd_route_count() > 0);
    for (size_t i = 0; i < ipd_route_count(); i++) {
        const char *m, *p;
        ipd_route_at(i, &m, &p);
        REQUIRE(m && p);
        if (!doc_has(paths, m, p)) {
            fprintf(stderr, "routed but not in docs/openapi.json: %s %s\n", m,
                    p);
            test__failed_checks++;
        }
    }
    const char *m, *p;
    ipd_route_at(ipd_route_count(), &m, &p);
    CHECK(!m && !p);
    json_decref(doc);
}

static void test_every_documented_operation_is_routed(void)
{
    json_t *doc = load_doc();
    REQUIRE(doc);
    json_t *paths = json_object_get(doc, "paths");
    REQUIRE(json_is_object(paths));
    const char *path;
    json_t *item;
    json_object_foreach(paths, path, item)
    {
        for (size_t k = 0; k < IPD_ARRAY_LEN(http_methods); k++) {
            if (!json_object_get(item, http_methods[k]))
                continue;
            if (!router_has(http_methods[k], path)) {
                fprintf(stderr, "in docs/openapi.json but not routed: %s %s\n",
                        http_methods[k], path);
                test__failed_checks++;
            }
        }
    }
    json_decref(doc);
}

/* The document serves itself: GET /v1/openapi.json is in both. */
static void test_openapi_route_in_both(void)
{
    json_t *doc = load_doc();
    REQUIRE(doc);
    CHECK(json_object_get(
        json_object_get(json_object_get(doc, "paths"), "/v1/openapi.json"),
        "get"));
    CHECK(router_has("get", "/v1/openapi.json"));
    json_decref(doc);
}

/* The pattern with each {id} as a concrete segment. */
static void concrete(const char *pattern, char *out, size_t n)
{
    char norm[256];
    normalize(pattern, norm, sizeof(norm));
    size_t o = 0;
    for (const char *p = norm; *p && o + 2 < n; p++) {
        if (p[0] == '{' && p[1] == '}') {
            o += (size_t)snprintf(out + o, n - o, "x1");
            p++;
            continue;
        }
        out[o++] = *p;
    }
    out[o] = '\0';
}

/* Each table entry is reachable (no earlier pattern shadows it) and its
 * Allow header lists exactly its methods, HEAD after GET, then OPTIONS:
 * what the document's HEAD and OPTIONS conventions promise. */
static void test_routes_reachable_and_allow_matches(void)
{
    for (size_t i = 0; i < ipd_route_count(); i++) {
        const char *m, *p, *allow = NULL;
        char path[256], want[128] = "";
        struct ipd_req r;
        ipd_route_at(i, &m, &p);
        concrete(p, path, sizeof(path));
        memset(&r, 0, sizeof(r));
        r.method = m;
        r.path = path;
        const struct ipd_handler *h = ipd_route(&r, &allow);
        if (!h || !r.route || strcmp(r.route, p) != 0) {
            fprintf(stderr, "%s %s does not route to its own entry\n", m, p);
            test__failed_checks++;
            continue;
        }
        for (size_t k = 0; k < ipd_route_count(); k++) {
            const char *km, *kp;
            ipd_route_at(k, &km, &kp);
            if (strcmp(kp, p) != 0)
                continue;
            snprintf(want + strlen(want), sizeof(want) - strlen(want), "%s%s",
                     km, strcmp(km, "GET") ? ", " : ", HEAD, ");
        }
        snprintf(want + strlen(want), sizeof(want) - strlen(want), "OPTIONS");
        CHECK_STR(allow, want);
    }
}

/* method path routed: its handler (NULL: none), Allow into *allow, the
 * parameters into r. */
static const struct ipd_handler *route(struct ipd_req *r, const char *method,
                                       const char *path, const char **allow)
{
    memset(r, 0, sizeof(*r));
    r->method = method;
    r->path = path;
    return ipd_route(r, allow);
}

/* A route with two parameters: each segment decoded into its own, with
 * the same bounds; a missing, empty, oversized or NUL-hiding one routes
 * nowhere; a route with one parameter leaves the second empty. */
static void test_two_params(void)
{
    struct ipd_req r;
    const char *allow;
    char path[256], long_seg[IPD_ROUTE_PARAM_MAX + 1];
    CHECK(route(&r, "POST", "/v1/executions/exec_a/calls/call_b", &allow) ==
          &ipd_h_calls_answer);
    CHECK_STR(r.param, "exec_a");
    CHECK_STR(r.param2, "call_b");
    CHECK_STR(r.route, "/v1/executions/{id}/calls/{call_id}");
    CHECK(route(&r, "POST", "/v1/executions/%65xec_a/calls/%63all_%62",
                &allow) == &ipd_h_calls_answer);
    CHECK_STR(r.param, "exec_a");
    CHECK_STR(r.param2, "call_b");
    CHECK(!route(&r, "GET", "/v1/executions/exec_a/calls/call_b", &allow));
    CHECK_STR(allow, "POST, OPTIONS");
    CHECK(!route(&r, "DELETE", "/v1/executions/exec_a/calls/call_b", &allow));
    CHECK_STR(allow, "POST, OPTIONS");
    static const char *const nowhere[] = {
        "/v1/executions/exec_a/calls/",
        "/v1/executions/exec_a/calls",
        "/v1/executions//calls/call_b",
        "/v1/executions/exec_a/calls/c%00",
        "/v1/executions/exec_a/calls/b/x",
        "/v1/executions/exec_a/call/call_b",
        "/v1/executions/exec_a/calls/call_b/"};
    for (size_t i = 0; i < IPD_ARRAY_LEN(nowhere); i++) {
        CHECKF(!route(&r, "POST", nowhere[i], &allow) && !allow, "%s routed",
               nowhere[i]);
        CHECK_STR(r.route, "unmatched");
        CHECK_STR(r.param2, "");
    }
    /* The bound: IPD_ROUTE_PARAM_MAX - 1 bytes fit, one more does not. */
    memset(long_seg, 'c', sizeof(long_seg) - 1);
    long_seg[IPD_ROUTE_PARAM_MAX - 1] = '\0';
    snprintf(path, sizeof(path), "/v1/executions/x/calls/%s", long_seg);
    CHECK(route(&r, "POST", path, &allow) == &ipd_h_calls_answer);
    CHECK_INT(strlen(r.param2), IPD_ROUTE_PARAM_MAX - 1);
    long_seg[IPD_ROUTE_PARAM_MAX - 1] = 'c';
    long_seg[IPD_ROUTE_PARAM_MAX] = '\0';
    snprintf(path, sizeof(path), "/v1/executions/x/calls/%s", long_seg);
    CHECK(!route(&r, "POST", path, &allow) && !allow);
    /* One parameter: the second is empty, whatever was tried before. */
    CHECK(route(&r, "DELETE", "/v1/executions/exec_a", &allow) ==
          &ipd_h_executions_cancel);
    CHECK_STR(r.param, "exec_a");
    CHECK_STR(r.param2, "");
}

/* The compiled copy is the source file (a stale build would test the old
 * document). */
static void test_embedded_copy_is_the_source(void)
{
    const char *f = __FILE__;
    const char *at = strstr(f, "/tests/unit/api/");
    char path[1024];
    REQUIRE(f[0] == '/' && at);
    snprintf(path, sizeof(path), "%.*s/docs/openapi.json", (int)(at - f), f);
    FILE *fp = fopen(path, "rb");
    if (!fp)
        fprintf(stderr, "cannot open %s\n", path);
    REQUIRE(fp);
    char *text = malloc(ipd_openapi_json_len + 2);
    REQUIRE(text);
    size_t n = fread(text, 1, ipd_openapi_json_len + 1, fp);
    fclose(fp);
    CHECK_INT(n, ipd_openapi_json_len);
    CHECK(n == ipd_openapi_json_len &&
          !memcmp(text, ipd_openapi_json, ipd_openapi_json_len));
    free(text);
}

static void test_normalize(void)
{
    char out[64];
    normalize("/v1/files/{file_id}/content", out, sizeof(out));
    CHECK_STR(out, "/v1/files/{}/content");
    normalize("/v1/files/{id}", out, sizeof(out));
    CHECK_STR(out, "/v1/files/{}");
}

TEST_MAIN(T(test_normalize), T(test_every_route_is_documented),
          T(test_every_documented_operation_is_routed),
          T(test_openapi_route_in_both),
          T(test_routes_reachable_and_allow_matches), T(test_two_params),
          T(test_embedded_copy_is_the_source))
