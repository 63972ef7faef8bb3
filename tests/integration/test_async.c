/*
 * test_async.c - asynchronous executions: 202 then GET to completion,
 * results scoped to their user and kept for result-ttl, and callbacks
 * POSTed with an X-Interpd-Signature the bot can verify with the tenant's
 * secret from `interpd keys list`, retried while the bot is down.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <sys/socket.h>
#include <unistd.h>

#include <openssl/hmac.h>

#include "harness.h"

/* ---- a one-shot callback receiver ---------------------------------------- */

struct receiver {
    int fd;               /* bound; listening once started */
    int port;
    pthread_t thread;
    bool running;
    char *request;        /* the whole request received, or NULL */
    size_t len;
};

static bool receiver_bind(struct receiver *rc)
{
    struct sockaddr_in a = {.sin_family = AF_INET};
    socklen_t al = sizeof(a);
    memset(rc, 0, sizeof(*rc));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    rc->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (rc->fd < 0 || bind(rc->fd, (struct sockaddr *)&a, sizeof(a)) ||
        getsockname(rc->fd, (struct sockaddr *)&a, &al))
        return false;
    rc->port = ntohs(a.sin_port);
    return true;
}

/* Accept one connection, read the request (headers + Content-Length
 * body), answer 200. */
static void *receiver_main(void *arg)
{
    struct receiver *rc = arg;
    struct pollfd pfd = {.fd = rc->fd, .events = POLLIN};
    if (poll(&pfd, 1, 60000) != 1)
        return NULL;
    int c = accept4(rc->fd, NULL, NULL, SOCK_CLOEXEC);
    if (c < 0)
        return NULL;
    char buf[65536];
    size_t got = 0, want = SIZE_MAX;
    while (got < sizeof(buf) - 1 && got < want) {
        struct pollfd cp = {.fd = c, .events = POLLIN};
        if (poll(&cp, 1, 30000) != 1)
            break;
        ssize_t n = read(c, buf + got, sizeof(buf) - 1 - got);
        if (n <= 0)
            break;
        got += (size_t)n;
        buf[got] = '\0';
        char *end = strstr(buf, "\r\n\r\n");
        char *cl = strcasestr(buf, "\r\nContent-Length:");
        if (end && cl && cl < end)
            want = (size_t)(end + 4 - buf) + strtoul(cl + 17, NULL, 10);
    }
    static const char ok[] =
        "HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
    itest_send_all(c, ok, sizeof(ok) - 1);
    close(c);
    rc->request = malloc(got + 1);
    if (rc->request) {
        memcpy(rc->request, buf, got);
        rc->request[got] = '\0';
        rc->len = got;
    }
    return NULL;
}

static bool receiver_start(struct receiver *rc)
{
    if (listen(rc->fd, 8))
        return false;
    rc->running = pthread_create(&rc->thread, NULL, receiver_main, rc) == 0;
    return rc->running;
}

static void receiver_finish(struct receiver *rc)
{
    if (rc->running)
        pthread_join(rc->thread, NULL);
    rc->running = false;
    if (rc->fd >= 0)
        close(rc->fd);
    rc->fd = -1;
}

/* The request's body and X-Interpd-Signature value (borrowed). */
static const char *request_body(const struct receiver *rc)
{
    const char *end = rc->request ? strstr(rc->request, "\r\n\r\n") : NULL;
    return end ? end + 4 : NULL;
}

static char *request_header(const struct receiver *rc, const char *name)
{
    char needle[128];
    snprintf(needle, sizeof(needle), "\r\n%s:", name);
    const char *h = rc->request ? strcasestr(rc->request, needle) : NULL;
    if (!h)
        return NULL;
    h += strlen(needle);
    while (*h == ' ')
        h++;
    return strndup(h, strcspn(h, "\r\n"));
}

/* ---- helpers --------------------------------------------------------------- */

static struct itest_server *start(const char *ttl)
{
    const char *args[] = {"--fetch-allow", "127.0.0.1/32",
                          "--callback-retry-delay", "1s", "--result-ttl",
                          ttl, NULL};
    struct itest_opts o = {.args = args};
    return itest_start(&o);
}

/* The admin tenant's callback secret, from `interpd keys list`. */
static char *admin_secret(struct itest_server *s)
{
    char *out = NULL, *secret = NULL;
    json_error_t jerr;
    if (itest_cli(s, &out, "keys", "list", "--data-dir", s->data_dir, NULL))
        return NULL;
    json_t *arr = out ? json_loads(out, 0, &jerr) : NULL;
    size_t i;
    json_t *k;
    json_array_foreach(arr, i, k) {
        if (json_is_true(json_object_get(k, "admin")))
            secret = strdup(json_string_value(json_object_get(k, "secret")));
    }
    json_decref(arr);
    free(out);
    return secret;
}

static json_t *wait_done(struct itest_server *s, const char *user,
                         const char *id)
{
    char *path = itest_fmt("/v1/executions/%s", id);
    json_t *result = NULL;
    /* Bounded poll: the API offers no other way to wait. */
    for (int i = 0; i < 600 && !result; i++) {
        struct itest_resp r;
        itest_request(s, "GET", path, s->admin_key, user, NULL, NULL, 0,
                      NULL, &r);
        if (r.status != 200) {
            itest_resp_release(&r);
            break;
        }
        const char *st = itest_json_str(r.json, "status");
        CHECKF(st && (!strcmp(st, "queued") || !strcmp(st, "running") ||
                      !strcmp(st, "done")),
               "status %s", st ? st : "(none)");
        if (st && !strcmp(st, "done"))
            result = json_incref(itest_json_get(r.json, "result"));
        else
            CHECK(json_is_null(itest_json_get(r.json, "result")));
        itest_resp_release(&r);
        if (!result)
            usleep(50 * 1000);
    }
    free(path);
    return result;
}

static char *submit(struct itest_server *s, const char *user, json_t *body,
                    long want)
{
    struct itest_resp r;
    itest_exec(s, s->admin_key, user, body, 60000, &r);
    CHECK_STATUS(&r, want);
    char *id = want == 202 ? itest_json_dup(r.json, "execution_id") : NULL;
    if (want == 202)
        CHECK_STR(itest_json_str(r.json, "status"), "queued");
    itest_resp_release(&r);
    return id;
}

/* ---- tests ------------------------------------------------------------------ */

static void poll_to_completion(void)
{
    struct itest_server *s = start("1h");
    struct itest_resp r;
    REQUIRE(s);
    char *id = submit(s, "u1",
                      json_pack("{s:s, s:b}", "code", "print(2 + 2)", "async",
                                1),
                      202);
    REQUIRE(id);
    json_t *res = wait_done(s, "u1", id);
    REQUIRE(res);
    CHECK_STR(itest_json_str(res, "execution_id"), id);
    CHECK(json_is_true(json_object_get(res, "success")));
    CHECK_STR(itest_json_str(res, "stdout"), "4\n");
    json_decref(res);

    /* Another user of the tenant, and an unknown id: 404. */
    char *path = itest_fmt("/v1/executions/%s", id);
    itest_request(s, "GET", path, s->admin_key, "u2", NULL, NULL, 0, NULL, &r);
    CHECK_ERROR(&r, 404, "not_found");
    itest_resp_release(&r);
    itest_request(s, "GET", "/v1/executions/exec_aaaaaaaaaaaaaaaaaaaaaaaaaa",
                  s->admin_key, "u1", NULL, NULL, 0, NULL, &r);
    CHECK_ERROR(&r, 404, "not_found");
    itest_resp_release(&r);
    free(path);

    /* Failures come back as results too; bad fields are 400 at once. */
    char *id2 = submit(s, "u1",
                       json_pack("{s:s, s:b}", "code", "1/0", "async", 1),
                       202);
    REQUIRE(id2);
    res = wait_done(s, "u1", id2);
    REQUIRE(res);
    CHECK(json_is_false(json_object_get(res, "success")));
    CHECK_STR(itest_json_str(res, "error.type"), "ZeroDivisionError");
    json_decref(res);
    submit(s, "u1", json_pack("{s:s, s:s}", "code", "1", "async", "yes"), 400);
    submit(s, "u1",
           json_pack("{s:s, s:s}", "code", "1", "callback_url",
                     "file:///etc/passwd"),
           400);
    free(id);
    free(id2);
    itest_stop(s);
}

static void results_expire(void)
{
    struct itest_server *s = start("2s");
    struct itest_resp r;
    REQUIRE(s);
    char *id = submit(s, "u1",
                      json_pack("{s:s, s:b}", "code", "print(1)", "async", 1),
                      202);
    REQUIRE(id);
    json_t *res = wait_done(s, "u1", id);
    CHECK(res != NULL);
    json_decref(res);
    char *path = itest_fmt("/v1/executions/%s", id);
    /* The wait is the thing under test: past the 2 s result-ttl. */
    usleep(2300 * 1000);
    itest_request(s, "GET", path, s->admin_key, "u1", NULL, NULL, 0, NULL, &r);
    CHECK_ERROR(&r, 404, "not_found");
    itest_resp_release(&r);
    free(path);
    free(id);
    itest_stop(s);
}

static void check_signature(struct itest_server *s, struct receiver *rc,
                            const char *id)
{
    const char *body = request_body(rc);
    REQUIRE(body);
    json_error_t jerr;
    json_t *doc = json_loads(body, 0, &jerr);
    REQUIRE(doc);
    CHECK_STR(itest_json_str(doc, "execution_id"), id);
    CHECK_STR(itest_json_str(doc, "stdout"), "called back\n");
    json_decref(doc);
    char *sig = request_header(rc, "X-Interpd-Signature");
    char *secret = admin_secret(s);
    REQUIRE(sig && secret);
    unsigned char mac[32];
    unsigned int maclen = 0;
    HMAC(EVP_sha256(), secret, (int)strlen(secret),
         (const unsigned char *)body, strlen(body), mac, &maclen);
    char want[7 + 65] = "sha256=";
    for (unsigned i = 0; i < maclen; i++)
        snprintf(want + 7 + 2 * i, 3, "%02x", mac[i]);
    CHECK_STR(sig, want);
    char *ct = request_header(rc, "Content-Type");
    CHECK_STR(ct, "application/json");
    free(ct);
    free(sig);
    free(secret);
}

static void callback_signed(void)
{
    struct itest_server *s = start("1h");
    struct receiver rc;
    REQUIRE(s);
    REQUIRE(receiver_bind(&rc));
    REQUIRE(receiver_start(&rc));
    char *url = itest_fmt("http://127.0.0.1:%d/hook?x=1", rc.port);
    char *id = submit(s, "u1",
                      json_pack("{s:s, s:s}", "code", "print('called back')",
                                "callback_url", url),
                      202);
    REQUIRE(id);
    receiver_finish(&rc); /* joins once the one request is in */
    check_signature(s, &rc, id);
    CHECK(strncmp(rc.request, "POST /hook?x=1 HTTP/1.1\r\n", 25) == 0);
    /* Once called back, the result is there at the first look (it is
     * stored before the callback goes out). */
    struct itest_resp pr;
    char *path = itest_fmt("/v1/executions/%s", id);
    itest_request(s, "GET", path, s->admin_key, "u1", NULL, NULL, 0, NULL,
                  &pr);
    CHECK_STATUS(&pr, 200);
    CHECK_STR(itest_json_str(pr.json, "status"), "done");
    CHECK(json_is_object(itest_json_get(pr.json, "result")));
    itest_resp_release(&pr);
    free(path);
    free(rc.request);
    free(url);
    free(id);
    itest_stop(s);
}

/* The bot is down (port bound, not listening: connection refused) for the
 * first attempt and up for the second, within the 3-attempt budget. */
static void callback_retried(void)
{
    struct itest_server *s = start("1h");
    struct receiver rc;
    REQUIRE(s);
    REQUIRE(receiver_bind(&rc));
    char *url = itest_fmt("http://127.0.0.1:%d/hook", rc.port);
    char *id = submit(s, "u1",
                      json_pack("{s:s, s:s}", "code", "print('called back')",
                                "callback_url", url),
                      202);
    REQUIRE(id);
    CHECK(itest_wait_log_line(s, 60000, "callback to", "attempt 1 of 3",
                              NULL));
    REQUIRE(receiver_start(&rc));
    receiver_finish(&rc);
    check_signature(s, &rc, id);
    free(rc.request);
    free(url);
    free(id);
    itest_stop(s);
}

/* A callback to an address the guard refuses is never sent. */
static void callback_guarded(void)
{
    const char *args[] = {"--callback-retry-delay", "0s", NULL};
    struct itest_opts o = {.args = args};
    struct itest_server *s = itest_start(&o);
    struct receiver rc;
    REQUIRE(s);
    REQUIRE(receiver_bind(&rc));
    REQUIRE(receiver_start(&rc));
    char *url = itest_fmt("http://127.0.0.1:%d/hook", rc.port);
    char *id = submit(s, "u1",
                      json_pack("{s:s, s:s}", "code", "print(1)",
                                "callback_url", url),
                      202);
    REQUIRE(id);
    CHECK(itest_wait_log_line(s, 60000, "callback to", "dropped after 3",
                              NULL));
    CHECK(itest_wait_log_line(s, 1000, "not allowed (loopback)", NULL));
    /* Nothing connected: close the listener and see the thread idle. */
    shutdown(rc.fd, SHUT_RDWR);
    receiver_finish(&rc);
    CHECK(rc.request == NULL);
    free(url);
    free(id);
    itest_stop(s);
}

/* A receiver that accepts and never answers holds one delivery thread;
 * another callback still arrives meanwhile.  Regression: with one
 * delivery thread every tenant's callbacks waited behind it for the
 * whole fetch timeout (here 120 s, longer than the receiver waits). */
static void slow_receiver_does_not_block_others(void)
{
    const char *args[] = {"--fetch-allow", "127.0.0.1/32",
                          "--callback-retry-delay", "1s",
                          "--fetch-timeout", "120s", NULL};
    struct itest_opts o = {.args = args};
    struct itest_server *s = itest_start(&o);
    struct receiver hang, rc;
    REQUIRE(s);
    /* Listening, never accepting: the kernel completes the connection,
     * the request sits in the backlog unanswered. */
    REQUIRE(receiver_bind(&hang));
    REQUIRE(listen(hang.fd, 8) == 0);
    REQUIRE(receiver_bind(&rc));
    REQUIRE(receiver_start(&rc));
    char *slow = itest_fmt("http://127.0.0.1:%d/slow", hang.port);
    char *fast = itest_fmt("http://127.0.0.1:%d/fast", rc.port);
    char *a = submit(s, "u1",
                     json_pack("{s:s, s:s}", "code", "print('a')",
                               "callback_url", slow),
                     202);
    /* Bounded wait until the slow callback's connection is pending. */
    struct pollfd pfd = {.fd = hang.fd, .events = POLLIN};
    CHECK(poll(&pfd, 1, 60000) == 1);
    char *b = submit(s, "u1",
                     json_pack("{s:s, s:s}", "code", "print('b')",
                               "callback_url", fast),
                     202);
    REQUIRE(a && b);
    receiver_finish(&rc); /* the fast one's request, or 60 s without */
    CHECKF(rc.request && strstr(rc.request, "POST /fast ") == rc.request,
           "the second callback did not arrive while the first hung");
    CHECK(request_body(&rc) && strstr(request_body(&rc), b));
    free(rc.request);
    receiver_finish(&hang);
    free(slow);
    free(fast);
    free(a);
    free(b);
    itest_stop(s);
}

TEST_MAIN(T(poll_to_completion), T(results_expire), T(callback_signed),
          T(callback_retried), T(callback_guarded),
          T(slow_receiver_does_not_block_others))
