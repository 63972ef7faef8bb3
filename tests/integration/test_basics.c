/*
 * test_basics.c - the service's plumbing, seen from a client: /healthz,
 * /readyz, the OpenAPI document, request ids, routing (404/405 before
 * auth), CORS and the access log.
 */
#include "harness.h"

#include <ctype.h>
#include <errno.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

static bool sane_request_id(const char *id)
{
    size_t n = id ? strlen(id) : 0;
    if (n < 1 || n > 128)
        return false;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)id[i];
        if (!isalnum(c) && c != '.' && c != '_' && c != ':' && c != '-')
            return false;
    }
    return true;
}

static bool content_type_is_json(const struct itest_resp *r)
{
    const char *ct = itest_header(r, "Content-Type");
    return ct && !strncasecmp(ct, "application/json", 16);
}

static void healthz(void)
{
    struct itest_server *s = itest_start(NULL);
    REQUIRE(s);
    struct itest_resp r;
    itest_request(s, "GET", "/healthz", NULL, NULL, NULL, NULL, 0, NULL, &r);
    CHECK_STATUS(&r, 200);
    CHECKF(content_type_is_json(&r), "Content-Type %s",
           itest_header(&r, "Content-Type"));
    CHECK_STR(itest_json_str(r.json, "status"), "ok");
    CHECKF(sane_request_id(itest_header(&r, "X-Request-Id")),
           "want a generated X-Request-Id, got %s",
           itest_header(&r, "X-Request-Id"));
    itest_resp_release(&r);
    itest_stop(s);
}

static void readyz(void)
{
    struct itest_server *s = itest_start(NULL);
    REQUIRE(s);
    struct itest_resp r;
    itest_request(s, "GET", "/readyz", NULL, NULL, NULL, NULL, 0, NULL, &r);
    CHECK_STATUS(&r, 200);
    CHECKF(content_type_is_json(&r), "Content-Type %s",
           itest_header(&r, "Content-Type"));
    CHECK_STR(itest_json_str(r.json, "status"), "ready");
    CHECK_STR(itest_json_str(r.json, "checks.metadata"), "ok");
    CHECK_STR(itest_json_str(r.json, "checks.blobs"), "ok");
    CHECKF(itest_header(&r, "X-Request-Id"), "no X-Request-Id");
    itest_resp_release(&r);
    itest_stop(s);
}

static void openapi_document(void)
{
    struct itest_server *s = itest_start(NULL);
    REQUIRE(s);
    struct itest_resp r;
    itest_request(s, "GET", "/v1/openapi.json", NULL, NULL, NULL, NULL, 0, NULL,
                  &r);
    CHECK_STATUS(&r, 200);
    CHECKF(content_type_is_json(&r), "Content-Type %s",
           itest_header(&r, "Content-Type"));
    CHECKF(json_is_object(r.json), "body is not a JSON object: %.200s", r.body);
    const char *v = itest_json_str(r.json, "openapi");
    CHECKF(v && v[0] == '3', "want an \"openapi\" version string, got %s",
           v ? v : "(none)");
    itest_resp_release(&r);
    itest_stop(s);
}

/* Ask /healthz with X-Request-Id sent; return the header that came back
 * (new string) or NULL. */
static char *request_id_roundtrip(struct itest_server *s, const char *sent,
                                  long want_status, const char *path)
{
    struct itest_req rq = {0};
    rq.path = path;
    rq.request_id = sent;
    struct itest_resp r;
    itest_do(s, &rq, &r);
    CHECK_STATUS(&r, want_status);
    const char *h = itest_header(&r, "X-Request-Id");
    char *out = h ? strdup(h) : NULL;
    if (want_status >= 400) {
        /* The error body names the same id. */
        CHECK_ERROR(&r, want_status, "not_found");
    }
    itest_resp_release(&r);
    return out;
}

static void request_ids(void)
{
    struct itest_server *s = itest_start(NULL);
    REQUIRE(s);
    char id128[129];
    memset(id128, 'a', 128);
    id128[128] = 0;
    char id129[130];
    memset(id129, 'b', 129);
    id129[129] = 0;

    /* Sane ids are echoed, on successes and on errors. */
    const char *sane[] = {"itest-123", "A.b_c:d-9", id128};
    for (size_t i = 0; i < sizeof(sane) / sizeof(sane[0]); i++) {
        char *got = request_id_roundtrip(s, sane[i], 200, "/healthz");
        CHECKF(got && !strcmp(got, sane[i]), "sent X-Request-Id %s, got %s",
               sane[i], got ? got : "(none)");
        free(got);
        got = request_id_roundtrip(s, sane[i], 404, "/no/such/path");
        CHECKF(got && !strcmp(got, sane[i]), "sent X-Request-Id %s, got %s",
               sane[i], got ? got : "(none)");
        free(got);
    }

    /* Others are replaced by a generated id, itself sane. */
    const char *insane[] = {"bad id", id129, "a\"b", "x<script>", "\xc3\xa4"};
    for (size_t i = 0; i < sizeof(insane) / sizeof(insane[0]); i++) {
        char *got = request_id_roundtrip(s, insane[i], 200, "/healthz");
        CHECKF(got && strcmp(got, insane[i]) && sane_request_id(got),
               "sent X-Request-Id \"%s\": want a generated sane id, got %s",
               insane[i], got ? got : "(none)");
        free(got);
    }

    /* Generated ids differ between requests. */
    char *a = request_id_roundtrip(s, NULL, 200, "/healthz");
    char *b = request_id_roundtrip(s, NULL, 200, "/healthz");
    CHECKF(a && b && strcmp(a, b), "two generated ids: %s and %s",
           a ? a : "(none)", b ? b : "(none)");
    free(a);
    free(b);
    itest_stop(s);
}

static void not_found_routes(void)
{
    struct itest_server *s = itest_start(NULL);
    REQUIRE(s);
    const char *paths[] = {
        "/",
        "/nope",
        "/v1",
        "/v1/nope",
        "/v2/files",
        "/healthz/extra",
        "/v1/files/file_aaaaaaaaaaaaaaaaaaaaaaaaaa/bogus",
        "/v1/files/file_aaaaaaaaaaaaaaaaaaaaaaaaaa/content/more",
    };
    for (size_t i = 0; i < sizeof(paths) / sizeof(paths[0]); i++) {
        /* Routing comes before auth: no key, still 404, not 401. */
        struct itest_resp r;
        itest_request(s, "GET", paths[i], NULL, NULL, NULL, NULL, 0, NULL, &r);
        CHECK_ERROR(&r, 404, "not_found");
        itest_resp_release(&r);
        itest_request(s, "GET", paths[i], s->admin_key, "u1", NULL, NULL, 0,
                      NULL, &r);
        CHECK_ERROR(&r, 404, "not_found");
        itest_resp_release(&r);
    }
    itest_stop(s);
}

static void check_405(struct itest_server *s, const char *method,
                      const char *path, const char *const *allowed,
                      const char *not_allowed)
{
    const char *keys[] = {NULL, s->admin_key};
    for (size_t k = 0; k < 2; k++) {
        struct itest_resp r;
        itest_request(s, method, path, keys[k], "u1",
                      strcmp(method, "GET") ? "text/plain" : NULL,
                      strcmp(method, "GET") ? "x" : NULL, 1, NULL, &r);
        CHECK_ERROR(&r, 405, "method_not_allowed");
        const char *allow = itest_header(&r, "Allow");
        for (size_t i = 0; allowed[i]; i++)
            CHECKF(itest_list_has(allow, allowed[i]),
                   "%s %s: want Allow to list %s, got %s", method, path,
                   allowed[i], allow ? allow : "(none)");
        CHECKF(!itest_list_has(allow, not_allowed), "%s %s: Allow lists %s: %s",
               method, path, not_allowed, allow ? allow : "(none)");
        itest_resp_release(&r);
    }
}

static void method_not_allowed(void)
{
    struct itest_server *s = itest_start(NULL);
    REQUIRE(s);
    static const char *const files[] = {"GET", "POST", NULL};
    static const char *const one[] = {"GET", "DELETE", NULL};
    static const char *const get[] = {"GET", NULL};
    check_405(s, "PUT", "/v1/files", files, "PUT");
    check_405(s, "DELETE", "/v1/files", files, "DELETE");
    check_405(s, "PATCH", "/v1/files", files, "PATCH");
    check_405(s, "POST", "/v1/files/file_aaaaaaaaaaaaaaaaaaaaaaaaaa", one,
              "POST");
    check_405(s, "PUT", "/v1/files/file_aaaaaaaaaaaaaaaaaaaaaaaaaa", one,
              "PUT");
    check_405(s, "POST", "/v1/files/file_aaaaaaaaaaaaaaaaaaaaaaaaaa/content",
              get, "POST");
    check_405(s, "DELETE", "/v1/files/file_aaaaaaaaaaaaaaaaaaaaaaaaaa/content",
              get, "DELETE");
    check_405(s, "PATCH", "/healthz", get, "PATCH");
    check_405(s, "POST", "/healthz", get, "POST");
    check_405(s, "DELETE", "/readyz", get, "DELETE");
    check_405(s, "POST", "/v1/openapi.json", get, "POST");
    itest_stop(s);
}

/* Route (404/405), then auth (401), then the user id (400). */
static void check_order(void)
{
    struct itest_server *s = itest_start(NULL);
    REQUIRE(s);
    struct itest_resp r;
    itest_request(s, "GET", "/v1/files", NULL, "bad user", NULL, NULL, 0, NULL,
                  &r);
    CHECK_ERROR(&r, 401, "unauthorized");
    itest_resp_release(&r);
    itest_request(s, "GET", "/v1/files", "wrong-key", NULL, NULL, NULL, 0, NULL,
                  &r);
    CHECK_ERROR(&r, 401, "unauthorized");
    itest_resp_release(&r);
    itest_request(s, "GET", "/v1/files", s->admin_key, "bad user", NULL, NULL,
                  0, NULL, &r);
    CHECK_ERROR(&r, 400, "invalid_user_id");
    itest_resp_release(&r);
    itest_request(s, "PUT", "/v1/files", NULL, "bad user", "text/plain", "x", 1,
                  NULL, &r);
    CHECK_ERROR(&r, 405, "method_not_allowed");
    itest_resp_release(&r);
    itest_request(s, "GET", "/v1/filez", NULL, "bad user", NULL, NULL, 0, NULL,
                  &r);
    CHECK_ERROR(&r, 404, "not_found");
    itest_resp_release(&r);
    itest_stop(s);
}

static void access_log(void)
{
    struct itest_server *s = itest_start(NULL);
    REQUIRE(s);
    struct itest_req rq = {0};
    rq.path = "/healthz";
    rq.request_id = "itest-123";
    struct itest_resp r;
    itest_do(s, &rq, &r);
    CHECK_STATUS(&r, 200);
    itest_resp_release(&r);
    rq.path = "/v1/files";
    rq.request_id = "itest-456";
    itest_do(s, &rq, &r); /* no key: 401, also logged */
    CHECK_ERROR(&r, 401, "unauthorized");
    itest_resp_release(&r);
    CHECKF(
        itest_wait_log_line(s, 5000, "request_id=itest-123", "status=", NULL),
        "no access log line with request_id=itest-123 and status= within "
        "5 s");
    CHECKF(itest_wait_log_line(s, 5000, "request_id=itest-456", "status=401",
                               NULL),
           "no access log line with request_id=itest-456 and status=401 "
           "within 5 s");
    /* The admin key never reaches the log. */
    char *log = itest_read_log(s);
    CHECKF(log && !strstr(log, s->admin_key), "the server log contains the "
                                              "admin key");
    free(log);
    itest_stop(s);
}

/* Hardening item 16: a request path carrying a newline or a terminal
 * escape, without a key, could forge log lines or drive the operator's
 * terminal.  Every line stays one line, escapes are shown as \xNN, and a
 * space cannot end the path field early. */
static void access_log_escapes_request_bytes(void)
{
    struct itest_server *s = itest_start(NULL);
    REQUIRE(s);
    struct itest_req rq = {0};
    struct itest_resp r;
    rq.path = "/x%0a2026-01-01T00:00:00Z%20info%20forged%0d%1b[31mred"
              "%20status=200%07%c3%28";
    rq.request_id = "itest-forge";
    itest_do(s, &rq, &r);
    CHECK_ERROR(&r, 404, "not_found");
    itest_resp_release(&r);
    CHECKF(itest_wait_log_line(s, 5000, "request_id=itest-forge",
                               "path=/x\\x0a2026", NULL),
           "no access line with the escaped path");
    char *log = itest_read_log(s);
    REQUIRE(log);
    CHECKF(!strchr(log, '\x1b') && !strchr(log, '\r') && !strchr(log, '\a'),
           "a raw control character reached the log");
    /* The path's text is only ever inside the access line. */
    for (const char *l = log; l && *l;) {
        const char *e = strchr(l, '\n');
        size_t n = e ? (size_t)(e - l) : strlen(l);
        if (memmem(l, n, "forged", 6))
            CHECKF(memmem(l, n, "request_id=itest-forge", 22) != NULL,
                   "a forged line: %.*s", (int)(n > 80 ? 80 : n), l);
        l = e ? e + 1 : NULL;
    }
    CHECKF(strstr(log, "%20status=200") && strstr(log, "\\x1b[31m") &&
               strstr(log, "\\xc3("),
           "the path's space, escape and bad byte are not shown escaped");
    free(log);
    itest_stop(s);
}

/* Read one response from fd: its status (0 on EOF or a timeout); the body
 * is consumed using Content-Length. */
static int read_response(int fd)
{
    char buf[8192];
    size_t n = 0;
    char *end = NULL;
    while (!end && n < sizeof(buf) - 1) {
        ssize_t got = read(fd, buf + n, sizeof(buf) - 1 - n);
        if (got < 0 && errno == EINTR)
            continue;
        if (got <= 0)
            return 0;
        n += (size_t)got;
        buf[n] = 0;
        end = strstr(buf, "\r\n\r\n");
    }
    if (!end || strncmp(buf, "HTTP/1.1 ", 9))
        return 0;
    int status = (int)strtol(buf + 9, NULL, 10);
    const char *cl = strcasestr(buf, "\r\nContent-Length:");
    size_t body = cl ? (size_t)strtoul(cl + 17, NULL, 10) : 0;
    size_t have = n - (size_t)(end + 4 - buf);
    while (have < body) {
        ssize_t got = read(
            fd, buf, sizeof(buf) < body - have ? sizeof(buf) : body - have);
        if (got < 0 && errno == EINTR)
            continue;
        if (got <= 0)
            return 0;
        have += (size_t)got;
    }
    return status;
}

/* One connection serves several requests, errors included. */
static void keep_alive(void)
{
    struct itest_server *s = itest_start(NULL);
    REQUIRE(s);
    int fd = itest_connect(s);
    REQUIRE(fd >= 0);
    struct timeval tv = {10, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    char *files = itest_fmt("GET /v1/files HTTP/1.1\r\nHost: x\r\n"
                            "Authorization: Bearer %s\r\nX-User-Id: u1\r\n"
                            "\r\n",
                            s->admin_key);
    struct {
        const char *req;
        int want;
    } seq[] = {
        {"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n", 200},
        {"GET /nope HTTP/1.1\r\nHost: x\r\n\r\n", 404},
        {"GET /v1/files HTTP/1.1\r\nHost: x\r\n\r\n", 401},
        {files, 200},
        {"GET /readyz HTTP/1.1\r\nHost: x\r\n\r\n", 200},
    };
    for (size_t i = 0; i < sizeof(seq) / sizeof(seq[0]); i++) {
        bool sent = itest_send_all(fd, seq[i].req, strlen(seq[i].req));
        int status = sent ? read_response(fd) : 0;
        CHECKF(status == seq[i].want,
               "request %zu on one kept-alive connection: status %d, want %d "
               "(0: the connection was closed)",
               i + 1, status, seq[i].want);
        if (status != seq[i].want)
            break;
    }
    close(fd);
    free(files);
    itest_stop(s);
}

static struct itest_server *cors_server(void)
{
    static const char *const args[] = {
        "--cors-origins", "http://app.example,http://b.example", NULL};
    struct itest_opts o = {.args = args};
    return itest_start(&o);
}

static void cors_preflight(void)
{
    struct itest_server *s = cors_server();
    REQUIRE(s);
    static const char *const pre[] = {
        "Origin: http://app.example", "Access-Control-Request-Method: POST",
        "Access-Control-Request-Headers: authorization, x-user-id", NULL};
    struct itest_resp r;
    /* A preflight carries no credentials. */
    itest_request(s, "OPTIONS", "/v1/files", NULL, NULL, NULL, NULL, 0, pre,
                  &r);
    CHECK_STATUS(&r, 204);
    CHECK_STR(itest_header(&r, "Access-Control-Allow-Origin"),
              "http://app.example");
    const char *m = itest_header(&r, "Access-Control-Allow-Methods");
    CHECKF(itest_list_has(m, "POST") && itest_list_has(m, "GET"),
           "Access-Control-Allow-Methods: %s", m ? m : "(none)");
    const char *h = itest_header(&r, "Access-Control-Allow-Headers");
    CHECKF(itest_list_has(h, "Authorization") && itest_list_has(h, "X-User-Id"),
           "Access-Control-Allow-Headers: %s", h ? h : "(none)");
    CHECKF(r.len == 0, "204 with a body: %s", r.body);
    itest_resp_release(&r);

    /* The second listed origin works too. */
    static const char *const pre_b[] = {"Origin: http://b.example",
                                        "Access-Control-Request-Method: DELETE",
                                        NULL};
    itest_request(s, "OPTIONS", "/v1/files/file_aaaaaaaaaaaaaaaaaaaaaaaaaa",
                  NULL, NULL, NULL, NULL, 0, pre_b, &r);
    CHECK_STATUS(&r, 204);
    CHECK_STR(itest_header(&r, "Access-Control-Allow-Origin"),
              "http://b.example");
    m = itest_header(&r, "Access-Control-Allow-Methods");
    CHECKF(itest_list_has(m, "DELETE"), "Access-Control-Allow-Methods: %s",
           m ? m : "(none)");
    itest_resp_release(&r);

    /* An origin not on the list gets no grant. */
    static const char *const evil[] = {"Origin: http://evil.example",
                                       "Access-Control-Request-Method: POST",
                                       NULL};
    itest_request(s, "OPTIONS", "/v1/files", NULL, NULL, NULL, NULL, 0, evil,
                  &r);
    CHECKF(!itest_header(&r, "Access-Control-Allow-Origin"),
           "preflight from an unlisted origin: Access-Control-Allow-Origin: "
           "%s",
           itest_header(&r, "Access-Control-Allow-Origin"));
    itest_resp_release(&r);
    itest_stop(s);
}

static void cors_simple_requests(void)
{
    struct itest_server *s = cors_server();
    REQUIRE(s);
    static const char *const app[] = {"Origin: http://app.example", NULL};
    static const char *const evil[] = {"Origin: http://evil.example", NULL};
    struct itest_resp r;
    itest_request(s, "GET", "/healthz", NULL, NULL, NULL, NULL, 0, app, &r);
    CHECK_STATUS(&r, 200);
    CHECK_STR(itest_header(&r, "Access-Control-Allow-Origin"),
              "http://app.example");
    const char *e = itest_header(&r, "Access-Control-Expose-Headers");
    CHECKF(itest_list_has(e, "X-Request-Id"),
           "Access-Control-Expose-Headers: %s", e ? e : "(none)");
    itest_resp_release(&r);

    itest_request(s, "GET", "/v1/files", s->admin_key, "u1", NULL, NULL, 0, app,
                  &r);
    CHECK_STATUS(&r, 200);
    CHECK_STR(itest_header(&r, "Access-Control-Allow-Origin"),
              "http://app.example");
    itest_resp_release(&r);

    itest_request(s, "GET", "/v1/files", s->admin_key, "u1", NULL, NULL, 0,
                  evil, &r);
    CHECK_STATUS(&r, 200);
    CHECKF(!itest_header(&r, "Access-Control-Allow-Origin"),
           "unlisted origin got Access-Control-Allow-Origin: %s",
           itest_header(&r, "Access-Control-Allow-Origin"));
    itest_resp_release(&r);
    itest_stop(s);

    /* Without --cors-origins nobody is granted anything. */
    s = itest_start(NULL);
    REQUIRE(s);
    itest_request(s, "GET", "/healthz", NULL, NULL, NULL, NULL, 0, app, &r);
    CHECK_STATUS(&r, 200);
    CHECKF(!itest_header(&r, "Access-Control-Allow-Origin"),
           "CORS off, yet Access-Control-Allow-Origin: %s",
           itest_header(&r, "Access-Control-Allow-Origin"));
    itest_resp_release(&r);
    itest_stop(s);
}

TEST_MAIN(T(healthz), T(readyz), T(openapi_document), T(request_ids),
          T(not_found_routes), T(method_not_allowed), T(check_order),
          T(access_log), T(access_log_escapes_request_bytes), T(keep_alive),
          T(cors_preflight), T(cors_simple_requests))
