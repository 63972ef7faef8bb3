/*
 * test_calls_api.c - POST /v1/executions/{id}/calls/{call_id}, the
 * client's answer to a call of its running code (issue 22), as far as
 * HTTP goes: the route (405 with Allow), the body's checks (415, 400
 * invalid_json and invalid_request at each bound, 413 over the route's
 * bound), and the scoping and outcomes a run without a call can show:
 * 404 for an unknown execution, another user's or another tenant's, 404
 * for an unknown call of a running (streamed) execution, 410
 * call_expired once the execution is over.  The answers that reach a
 * call (204, 409, a call that timed out, over the run's max_bytes) are
 * unit/test_pool_answer's and the calls round trip's.
 */
#include <poll.h>
#include <unistd.h>

#include "harness.h"

#define N_OF(a) (sizeof(a) / sizeof((a)[0]))

static struct itest_server *srv;

#define UNKNOWN_EXEC "exec_aaaaaaaaaaaaaaaaaaaaaaaaaa"
#define UNKNOWN_CALL "call_aaaaaaaaaaaaaaaaaaaaaaaaaa"

/* POST an answer body (len bytes; content_type may be NULL) to call of
 * execution exec as user with key: the status (*r filled; release it). */
static long answer(const char *key, const char *user, const char *exec,
                   const char *call, const char *content_type, const char *body,
                   size_t len, struct itest_resp *r)
{
    char *path = itest_fmt("/v1/executions/%s/calls/%s", exec, call);
    long st = itest_request(srv, "POST", path, key, user, content_type, body,
                            len, NULL, r);
    free(path);
    return st;
}

/* answer with a JSON body as the admin key's user, checking the error
 * status and code. */
static void answer_is(const char *user, const char *exec, const char *call,
                      const char *body, long status, const char *code)
{
    struct itest_resp r;
    answer(srv->admin_key, user, exec, call, "application/json", body,
           strlen(body), &r);
    CHECK_ERROR(&r, status, code);
    itest_resp_release(&r);
}

/* The message of an error reply holds needle. */
static bool message_has(const struct itest_resp *r, const char *needle)
{
    const char *m = itest_json_str(r->json, "error.message");
    return m && strstr(m, needle);
}

static void test_unknown_execution(void)
{
    struct itest_resp r;
    const char *b = "{\"result\": 1}";
    answer(srv->admin_key, "u1", UNKNOWN_EXEC, UNKNOWN_CALL, "application/json",
           b, strlen(b), &r);
    CHECK_ERROR(&r, 404, "not_found");
    CHECKF(message_has(&r, "no such execution"), "%s", r.body);
    itest_resp_release(&r);
    /* No key, no user: the usual refusals first. */
    answer(NULL, "u1", UNKNOWN_EXEC, UNKNOWN_CALL, "application/json", b,
           strlen(b), &r);
    CHECK_ERROR(&r, 401, "unauthorized");
    itest_resp_release(&r);
    answer(srv->admin_key, NULL, UNKNOWN_EXEC, UNKNOWN_CALL, "application/json",
           b, strlen(b), &r);
    CHECK_ERROR(&r, 400, "invalid_user_id");
    itest_resp_release(&r);
}

/* POST only: any other method is 405 with Allow. */
static void test_methods(void)
{
    static const char *const methods[] = {"GET", "DELETE", "PUT", "PATCH"};
    char *path =
        itest_fmt("/v1/executions/%s/calls/%s", UNKNOWN_EXEC, UNKNOWN_CALL);
    for (size_t i = 0; i < N_OF(methods); i++) {
        struct itest_resp r;
        itest_request(srv, methods[i], path, srv->admin_key, "u1", NULL, NULL,
                      0, NULL, &r);
        CHECK_ERROR(&r, 405, "method_not_allowed");
        const char *allow = itest_header(&r, "Allow");
        CHECKF(allow && !strcmp(allow, "POST, OPTIONS"), "%s: Allow %s",
               methods[i], allow ? allow : "(none)");
        itest_resp_release(&r);
    }
    free(path);
    /* An empty call id, or a path below it, routes nowhere. */
    answer_is("u1", UNKNOWN_EXEC, "", "{\"result\":1}", 404, "not_found");
    answer_is("u1", UNKNOWN_EXEC, UNKNOWN_CALL "/x", "{\"result\":1}", 404,
              "not_found");
}

/* A body is checked before the execution is looked up: each refusal
 * comes for an unknown execution too, and a body that passes gets that
 * execution's 404. */
static void test_bodies(void)
{
    static const char *const invalid[] = {
        "{}",
        "[1]",
        "\"result\"",
        "null",
        "{\"results\": 1}",
        "{\"result\": 1, \"error\": {\"type\": \"E\", \"message\": \"m\"}}",
        "{\"error\": \"ValueError\"}",
        "{\"error\": null}",
        "{\"error\": {\"type\": \"E\"}}",
        "{\"error\": {\"message\": \"m\"}}",
        "{\"error\": {\"type\": \"E\", \"message\": \"m\", \"x\": 1}}",
        "{\"error\": {\"type\": \"1E\", \"message\": \"m\"}}",
        "{\"error\": {\"type\": \"\", \"message\": \"m\"}}",
        "{\"error\": {\"type\": \"a-b\", \"message\": \"m\"}}",
        "{\"error\": {\"type\": \"a.B\", \"message\": \"m\"}}",
        "{\"error\": {\"type\": \"\\u00c9rror\", \"message\": \"m\"}}",
        "{\"error\": {\"type\": 5, \"message\": \"m\"}}",
        "{\"error\": {\"type\": \"E\", \"message\": 5}}",
        "{\"error\": {\"type\": \"E\", \"message\": null}}",
    };
    static const char *const bad_json[] = {"", "{", "{\"result\": 1} x",
                                           "{\"result\": 1, \"result\": 2}",
                                           "{\"result\": \"\\u0000\"}"};
    static const char *const valid[] = {
        "{\"result\": null}",
        "{\"result\": {\"text\": \"ok\", \"n\": [1, 2.5, true]}}",
        "{\"result\": \"\\u00e9\"}",
        "{\"error\": {\"type\": \"ValueError\", \"message\": \"\"}}",
        "{\"error\": {\"type\": \"_x9\", \"message\": \"m\"}}",
    };
    for (size_t i = 0; i < N_OF(invalid); i++)
        answer_is("u1", UNKNOWN_EXEC, UNKNOWN_CALL, invalid[i], 400,
                  "invalid_request");
    for (size_t i = 0; i < N_OF(bad_json); i++)
        answer_is("u1", UNKNOWN_EXEC, UNKNOWN_CALL, bad_json[i], 400,
                  "invalid_json");
    for (size_t i = 0; i < N_OF(valid); i++)
        answer_is("u1", UNKNOWN_EXEC, UNKNOWN_CALL, valid[i], 404, "not_found");
}

/* error.type: at most 64 characters; error.message: at most 64 KiB. */
static void test_bounds(void)
{
    char type[66];
    memset(type, 'T', sizeof(type));
    type[64] = '\0';
    char *b =
        itest_fmt("{\"error\":{\"type\":\"%s\",\"message\":\"m\"}}", type);
    answer_is("u1", UNKNOWN_EXEC, UNKNOWN_CALL, b, 404, "not_found");
    free(b);
    type[64] = 'T';
    type[65] = '\0';
    b = itest_fmt("{\"error\":{\"type\":\"%s\",\"message\":\"m\"}}", type);
    answer_is("u1", UNKNOWN_EXEC, UNKNOWN_CALL, b, 400, "invalid_request");
    free(b);
    size_t n = 64 * 1024;
    char *msg = malloc(n + 2);
    REQUIRE(msg);
    memset(msg, 'm', n + 1);
    msg[n] = '\0';
    b = itest_fmt("{\"error\":{\"type\":\"E\",\"message\":\"%s\"}}", msg);
    answer_is("u1", UNKNOWN_EXEC, UNKNOWN_CALL, b, 404, "not_found");
    free(b);
    msg[n] = 'm';
    msg[n + 1] = '\0';
    b = itest_fmt("{\"error\":{\"type\":\"E\",\"message\":\"%s\"}}", msg);
    answer_is("u1", UNKNOWN_EXEC, UNKNOWN_CALL, b, 400, "invalid_request");
    free(b);
    /* Bytes, not characters: 32768 two-byte characters are 64 KiB. */
    char *two = malloc(n + 1);
    REQUIRE(two);
    for (size_t i = 0; i < n; i += 2)
        memcpy(two + i, "\xc3\xa9", 2);
    two[n] = '\0';
    b = itest_fmt("{\"error\":{\"type\":\"E\",\"message\":\"%se\"}}", two);
    answer_is("u1", UNKNOWN_EXEC, UNKNOWN_CALL, b, 400, "invalid_request");
    free(b);
    free(two);
    free(msg);
}

/* JSON only: another Content-Type is 415 (none is taken as JSON). */
static void test_media_type(void)
{
    static const char *const refused[] = {
        "text/plain", "application/x-www-form-urlencoded",
        "multipart/form-data; boundary=x", "application/jsonx"};
    static const char *const taken[] = {"application/json",
                                        "application/json; charset=utf-8",
                                        "Application/JSON", NULL};
    const char *b = "{\"result\": 1}";
    struct itest_resp r;
    for (size_t i = 0; i < N_OF(refused); i++) {
        answer(srv->admin_key, "u1", UNKNOWN_EXEC, UNKNOWN_CALL, refused[i], b,
               strlen(b), &r);
        CHECK_ERROR(&r, 415, "unsupported_media_type");
        itest_resp_release(&r);
    }
    for (size_t i = 0; i < N_OF(taken); i++) {
        answer(srv->admin_key, "u1", UNKNOWN_EXEC, UNKNOWN_CALL, taken[i], b,
               strlen(b), &r);
        CHECK_ERROR(&r, 404, "not_found");
        itest_resp_release(&r);
    }
}

/* Over the route's bound (8 MiB): 413, told by its Content-Length before
 * the body, or once a chunked body passes it. */
static void test_too_large(void)
{
    struct itest_pattern_src src = {.seed = 7, .total = 8 * 1024 * 1024 + 1};
    char *path =
        itest_fmt("/v1/executions/%s/calls/%s", UNKNOWN_EXEC, UNKNOWN_CALL);
    for (int chunked = 0; chunked < 2; chunked++) {
        struct itest_req rq = {.method = "POST",
                               .path = path,
                               .key = srv->admin_key,
                               .user_id = "u1",
                               .content_type = "application/json",
                               .read_cb = itest_pattern_read,
                               .read_ctx = &src,
                               .read_len =
                                   chunked ? -1 : (curl_off_t)src.total};
        struct itest_resp r;
        src.sent = 0;
        itest_do(srv, &rq, &r);
        CHECK_ERROR(&r, 413, "payload_too_large");
        itest_resp_release(&r);
    }
    free(path);
}

/* Once an execution is over, its calls are: 410 call_expired, for its
 * own caller only (anyone else: 404). */
static void test_over(void)
{
    struct itest_resp r;
    char *beta = NULL;
    itest_exec(srv, srv->admin_key, "u-over",
               json_pack("{s:s}", "code", "print(1)"), 0, &r);
    CHECK_STATUS(&r, 200);
    const char *h = itest_header(&r, "X-Execution-Id");
    char *id = strdup(h ? h : "exec_none");
    itest_resp_release(&r);
    const char *b = "{\"result\": 1}";
    answer(srv->admin_key, "u-over", id, UNKNOWN_CALL, "application/json", b,
           strlen(b), &r);
    CHECK_ERROR(&r, 410, "call_expired");
    CHECKF(message_has(&r, "the execution is over"), "%s", r.body);
    itest_resp_release(&r);
    answer_is("u-other", id, UNKNOWN_CALL, b, 404, "not_found");
    REQUIRE(itest_create_key(srv, "beta", false, &beta, NULL));
    answer(beta, "u-over", id, UNKNOWN_CALL, "application/json", b, strlen(b),
           &r);
    CHECK_ERROR(&r, 404, "not_found");
    itest_resp_release(&r);
    free(beta);
    free(id);
}

/* A streamed execution, running (it sleeps): its id from the response
 * head, read from a plain socket (fd kept open; closing it cancels the
 * run).  False when no 200 head came. */
static bool stream_start(const char *user, int *fd, char id[64])
{
    const char *body = "{\"code\":\"import time\\nprint(1, flush=True)\\n"
                       "time.sleep(60)\",\"stream\":true}";
    char head[8192];
    size_t got = 0;
    *fd = itest_connect(srv);
    char *rq = itest_fmt("POST /v1/executions HTTP/1.1\r\nHost: x\r\n"
                         "Authorization: Bearer %s\r\nX-User-Id: %s\r\n"
                         "Content-Type: application/json\r\n"
                         "Content-Length: %zu\r\n\r\n%s",
                         srv->admin_key, user, strlen(body), body);
    bool ok = *fd >= 0 && itest_send_all(*fd, rq, strlen(rq));
    free(rq);
    while (ok && got < sizeof(head) - 1 && !strstr(head, "\r\n\r\n")) {
        struct pollfd pf = {*fd, POLLIN, 0};
        ssize_t n = poll(&pf, 1, 30000) == 1
                        ? read(*fd, head + got, sizeof(head) - 1 - got)
                        : -1;
        ok = n > 0;
        got += ok ? (size_t)n : 0;
        head[got] = '\0';
    }
    const char *x = ok ? strcasestr(head, "\r\nX-Execution-Id: ") : NULL;
    if (!ok || strncmp(head, "HTTP/1.1 200 ", 13) || !x) {
        fprintf(stderr, "no stream: %.*s\n", (int)got, head);
        return false;
    }
    x += strlen("\r\nX-Execution-Id: ");
    snprintf(id, 64, "%.*s", (int)strcspn(x, "\r"), x);
    return true;
}

/* id's status is want (polled: bounded, 30 s). */
static bool wait_status(const char *user, const char *id, const char *want)
{
    char *path = itest_fmt("/v1/executions/%s", id);
    bool ok = false;
    for (int i = 0; i < 600 && !ok; i++) {
        struct itest_resp r;
        itest_request(srv, "GET", path, srv->admin_key, user, NULL, NULL, 0,
                      NULL, &r);
        const char *st = itest_json_str(r.json, "status");
        ok = st && !strcmp(st, want);
        itest_resp_release(&r);
        if (!ok)
            usleep(50 * 1000); /* a poll of a status no event announces */
    }
    free(path);
    return ok;
}

/* A running execution without that call: 404 (the call's, not the
 * execution's); someone else's: 404 (the execution's); after the client
 * left (the run cancelled): 410. */
static void test_running(void)
{
    int fd = -1;
    char id[64];
    struct itest_resp r;
    const char *b = "{\"result\": 1}";
    REQUIRE(stream_start("u-run", &fd, id));
    CHECK(wait_status("u-run", id, "running"));
    answer(srv->admin_key, "u-run", id, UNKNOWN_CALL, "application/json", b,
           strlen(b), &r);
    CHECK_ERROR(&r, 404, "not_found");
    CHECKF(message_has(&r, "no such call"), "%s", r.body);
    itest_resp_release(&r);
    answer(srv->admin_key, "u-else", id, UNKNOWN_CALL, "application/json", b,
           strlen(b), &r);
    CHECK_ERROR(&r, 404, "not_found");
    CHECKF(message_has(&r, "no such execution"), "%s", r.body);
    itest_resp_release(&r);
    close(fd);
    CHECK(wait_status("u-run", id, "cancelled"));
    answer_is("u-run", id, UNKNOWN_CALL, b, 410, "call_expired");
}

/* Without a stream nobody could answer: "functions" is 400. */
static void test_functions_need_stream(void)
{
    struct itest_resp r;
    itest_exec(
        srv, srv->admin_key, "u-fn",
        json_pack("{s:s, s:[s]}", "code", "print(1)", "functions", "llm_query"),
        0, &r);
    CHECK_ERROR(&r, 400, "invalid_request");
    itest_resp_release(&r);
}

int main(void)
{
    static const struct test_case cases[] = {
        T(test_unknown_execution),
        T(test_methods),
        T(test_bodies),
        T(test_bounds),
        T(test_media_type),
        T(test_too_large),
        T(test_over),
        T(test_running),
        T(test_functions_need_stream),
    };
    srv = itest_start(NULL);
    if (!srv)
        return 1;
    int rc = test_run(cases, (sizeof(cases) / sizeof(cases[0])));
    int before = test__failed_checks;
    itest_stop(srv);
    return rc || test__failed_checks != before;
}
