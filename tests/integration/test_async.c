/*
 * test_async.c - asynchronous executions: 202 then GET to completion,
 * results scoped to their user and kept for result-ttl, and callbacks
 * POSTed with an X-Interpd-Signature the bot can verify with the tenant's
 * secret from `interpd keys list`, retried while the bot is down.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <openssl/hmac.h>

#include "harness.h"

/* ---- a callback receiver ----------------------------------------------------
 */

#define RECV_MAX 4

struct receiver {
    int fd; /* bound; listening once started */
    int port;
    pthread_t thread;
    bool running;
    int n;                    /* connections to serve (0: 1) */
    int status[RECV_MAX];     /* the answer to each (0: 200) */
    char *requests[RECV_MAX]; /* each whole request received, or NULL */
    int got;                  /* requests received */
    char *request;            /* the last one (borrowed from requests) */
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

/* Read one request (headers + Content-Length body) from c, answer
 * status; the request as a new string, or NULL. */
static char *serve_one(int c, int status, size_t *len)
{
    char *req = itest_read_request(c, 30000, len);
    char *answer = itest_fmt("HTTP/1.1 %d Scripted\r\nContent-Length: 0\r\n"
                             "Connection: close\r\n\r\n",
                             status ? status : 200);
    itest_send_all(c, answer, strlen(answer));
    free(answer);
    return req;
}

/* Accept rc->n connections, one request each, answered as scripted. */
static void *receiver_main(void *arg)
{
    struct receiver *rc = arg;
    int n = rc->n ? rc->n : 1;
    for (int i = 0; i < n && i < RECV_MAX; i++) {
        struct pollfd pfd = {.fd = rc->fd, .events = POLLIN};
        if (poll(&pfd, 1, 60000) != 1)
            return NULL;
        int c = accept4(rc->fd, NULL, NULL, SOCK_CLOEXEC);
        if (c < 0)
            return NULL;
        rc->requests[i] = serve_one(c, rc->status[i], &rc->len);
        close(c);
        rc->request = rc->requests[i];
        rc->got = i + 1;
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

static void receiver_release(struct receiver *rc)
{
    for (int i = 0; i < RECV_MAX; i++)
        free(rc->requests[i]);
    memset(rc->requests, 0, sizeof(rc->requests));
    rc->request = NULL;
}

/* A request's body (borrowed). */
static const char *body_of(const char *req)
{
    const char *end = req ? strstr(req, "\r\n\r\n") : NULL;
    return end ? end + 4 : NULL;
}

static const char *request_body(const struct receiver *rc)
{
    return body_of(rc->request);
}

/* A request header's value (new string), or NULL. */
static char *header_of(const char *req, const char *name)
{
    char needle[128];
    snprintf(needle, sizeof(needle), "\r\n%s:", name);
    const char *h = req ? strcasestr(req, needle) : NULL;
    if (!h)
        return NULL;
    h += strlen(needle);
    while (*h == ' ')
        h++;
    return strndup(h, strcspn(h, "\r\n"));
}

static char *request_header(const struct receiver *rc, const char *name)
{
    return header_of(rc->request, name);
}

/* ---- the signature, checked independently of the server's code --------- */

/* "t=<digits>,v1=<64 hex>[,v1=<64 hex>]": t and the v1 values in order;
 * false when the header has any other shape. */
static bool sig_parse(const char *h, long long *t, char v1[2][65], int *n)
{
    char *end;
    *n = 0;
    if (!h || strncmp(h, "t=", 2) != 0)
        return false;
    *t = strtoll(h + 2, &end, 10);
    if (end == h + 2)
        return false;
    h = end;
    while (*h) {
        if (strncmp(h, ",v1=", 4) != 0 || *n == 2 ||
            strspn(h + 4, "0123456789abcdef") != 64)
            return false;
        memcpy(v1[*n], h + 4, 64);
        v1[(*n)++][64] = '\0';
        h += 4 + 64;
    }
    return *n > 0;
}

/* HMAC-SHA256 of "<t>.<body>" under secret, in hex. */
static void sig_expect(const char *secret, long long t, const char *body,
                       char out[65])
{
    unsigned char mac[32];
    unsigned int maclen = 0;
    char *text = itest_fmt("%lld.%s", t, body);
    HMAC(EVP_sha256(), secret, (int)strlen(secret), (const unsigned char *)text,
         strlen(text), mac, &maclen);
    for (unsigned i = 0; i < maclen; i++)
        snprintf(out + 2 * i, 3, "%02x", mac[i]);
    free(text);
}

/* Check req's X-Interpd-Signature: t within a minute of now, and exactly
 * the v1 values of secrets[0..n) in that order. */
static void check_sig_of(const char *req, const char *const *secrets,
                         int nsecrets)
{
    char *sig = header_of(req, "X-Interpd-Signature");
    const char *body = body_of(req);
    long long t = 0;
    char v1[2][65], want[65];
    int n = 0;
    CHECKF(sig_parse(sig, &t, v1, &n), "signature header \"%s\"",
           sig ? sig : "(none)");
    CHECKF(llabs(t - (long long)time(NULL)) < 60, "t=%lld", t);
    CHECK_INT(n, nsecrets);
    for (int i = 0; i < n && i < nsecrets && body; i++) {
        sig_expect(secrets[i], t, body, want);
        CHECK_STR(v1[i], want);
    }
    free(sig);
}

/* ---- helpers ---------------------------------------------------------------
 */

static struct itest_server *start(const char *ttl)
{
    const char *args[] = {"--fetch-allow",
                          "127.0.0.1/32",
                          "--callback-retry-delay",
                          "1s",
                          "--result-ttl",
                          ttl,
                          NULL};
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
    json_array_foreach(arr, i, k)
    {
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
        itest_request(s, "GET", path, s->admin_key, user, NULL, NULL, 0, NULL,
                      &r);
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

/* ---- tests ------------------------------------------------------------------
 */

static void poll_to_completion(void)
{
    struct itest_server *s = start("1h");
    struct itest_resp r;
    REQUIRE(s);
    char *id = submit(
        s, "u1", json_pack("{s:s, s:b}", "code", "print(2 + 2)", "async", 1),
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
    char *unknown = itest_json_dup(r.json, "error.message");
    itest_resp_release(&r);
    /* Another tenant's user of the same id: 404 too, the answer of an
     * unknown id (existence does not leak), on GET and HEAD. */
    char *beta = NULL;
    CHECK(itest_create_key(s, "beta", false, &beta, NULL));
    if (beta) {
        itest_request(s, "GET", path, beta, "u1", NULL, NULL, 0, NULL, &r);
        CHECK_ERROR(&r, 404, "not_found");
        CHECK_STR(itest_json_str(r.json, "error.message"), unknown);
        itest_resp_release(&r);
        itest_request(s, "HEAD", path, beta, "u1", NULL, NULL, 0, NULL, &r);
        CHECK_STATUS(&r, 404);
        itest_resp_release(&r);
    }
    /* ... while the owner still gets it. */
    itest_request(s, "GET", path, s->admin_key, "u1", NULL, NULL, 0, NULL, &r);
    CHECK_STATUS(&r, 200);
    CHECK_STR(itest_json_str(r.json, "result.stdout"), "4\n");
    itest_resp_release(&r);
    free(beta);
    free(unknown);
    free(path);

    /* Failures come back as results too; bad fields are 400 at once. */
    char *id2 = submit(s, "u1",
                       json_pack("{s:s, s:b}", "code", "1/0", "async", 1), 202);
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
    char *id = submit(
        s, "u1", json_pack("{s:s, s:b}", "code", "print(1)", "async", 1), 202);
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

/* The callback in rc: the result of execution id, signed with the admin
 * tenant's secret alone, with a delivery id (returned, new). */
static char *check_callback(struct itest_server *s, struct receiver *rc,
                            const char *id)
{
    const char *body = request_body(rc);
    json_error_t jerr;
    json_t *doc = body ? json_loads(body, 0, &jerr) : NULL;
    CHECKF(doc != NULL, "callback body \"%s\"", body ? body : "(none)");
    CHECK_STR(itest_json_str(doc, "execution_id"), id);
    CHECK_STR(itest_json_str(doc, "stdout"), "called back\n");
    json_decref(doc);
    char *secret = admin_secret(s);
    CHECK(secret != NULL);
    const char *secrets[] = {secret ? secret : "?"};
    check_sig_of(rc->request, secrets, 1);
    char *ct = request_header(rc, "Content-Type");
    CHECK_STR(ct, "application/json");
    free(ct);
    free(secret);
    char *dlv = request_header(rc, "X-Interpd-Delivery");
    CHECKF(dlv && !strncmp(dlv, "dlv_", 4) && strlen(dlv) > 10,
           "X-Interpd-Delivery \"%s\"", dlv ? dlv : "(none)");
    return dlv;
}

/* GET the execution: its "callback" object (a new reference). */
static json_t *callback_of(struct itest_server *s, const char *user,
                           const char *id)
{
    struct itest_resp r;
    char *path = itest_fmt("/v1/executions/%s", id);
    itest_request(s, "GET", path, s->admin_key, user, NULL, NULL, 0, NULL, &r);
    CHECK_STATUS(&r, 200);
    json_t *cb = json_incref(itest_json_get(r.json, "callback"));
    itest_resp_release(&r);
    free(path);
    return cb;
}

/* Poll (bounded) until the callback is no longer pending. */
static json_t *callback_final(struct itest_server *s, const char *user,
                              const char *id)
{
    json_t *cb = NULL;
    for (int i = 0; i < 1200; i++) {
        json_decref(cb);
        cb = callback_of(s, user, id);
        const char *st = itest_json_str(cb, "status");
        if (!st || strcmp(st, "pending") != 0)
            break;
        usleep(50 * 1000);
    }
    return cb;
}

static void check_callback_state(json_t *cb, const char *status, long attempts,
                                 const char *error_has)
{
    CHECK_STR(itest_json_str(cb, "status"), status);
    CHECK_INT(json_integer_value(itest_json_get(cb, "attempts")), attempts);
    const char *err = itest_json_str(cb, "error");
    if (error_has)
        CHECKF(err && strstr(err, error_has), "error \"%s\", want \"%s\"",
               err ? err : "(null)", error_has);
    else
        CHECK(json_is_null(itest_json_get(cb, "error")));
}

static void callback_signed(void)
{
    struct itest_server *s = start("1h");
    struct receiver rc, rc2;
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
    char *dlv = check_callback(s, &rc, id);
    CHECK(strncmp(rc.request, "POST /hook?x=1 HTTP/1.1\r\n", 25) == 0);
    /* Once called back, the result is there at the first look (it is
     * stored before the callback goes out); the delivery's outcome is
     * recorded once the receiver's answer is in. */
    struct itest_resp pr;
    char *path = itest_fmt("/v1/executions/%s", id);
    itest_request(s, "GET", path, s->admin_key, "u1", NULL, NULL, 0, NULL, &pr);
    CHECK_STATUS(&pr, 200);
    CHECK_STR(itest_json_str(pr.json, "status"), "done");
    CHECK(json_is_object(itest_json_get(pr.json, "result")));
    itest_resp_release(&pr);
    json_t *cb = callback_final(s, "u1", id);
    check_callback_state(cb, "delivered", 1, NULL);
    CHECK_STR(itest_json_str(cb, "delivery_id"), dlv);
    json_decref(cb);

    /* Another execution is another delivery. */
    REQUIRE(receiver_bind(&rc2));
    REQUIRE(receiver_start(&rc2));
    char *url2 = itest_fmt("http://127.0.0.1:%d/hook", rc2.port);
    char *id2 = submit(s, "u1",
                       json_pack("{s:s, s:s}", "code", "print('called back')",
                                 "callback_url", url2),
                       202);
    REQUIRE(id2);
    receiver_finish(&rc2);
    char *dlv2 = check_callback(s, &rc2, id2);
    CHECK(dlv && dlv2 && strcmp(dlv, dlv2) != 0);
    /* Without a callback_url there is no "callback". */
    char *id3 =
        submit(s, "u1", json_pack("{s:s, s:b}", "code", "1", "async", 1), 202);
    REQUIRE(id3);
    json_decref(wait_done(s, "u1", id3));
    cb = callback_of(s, "u1", id3);
    CHECK(cb == NULL);
    receiver_release(&rc);
    receiver_release(&rc2);
    free(path);
    free(url);
    free(url2);
    free(dlv);
    free(dlv2);
    free(id);
    free(id2);
    free(id3);
    itest_stop(s);
}

/* The bot is down (port bound, not listening: connection refused) for the
 * first attempt and up for the second, within the 3-attempt budget;
 * meanwhile the callback is pending with the first attempt's error. */
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
    CHECK(
        itest_wait_log_line(s, 60000, "callback dlv_", "attempt 1 of 3", NULL));
    json_t *cb = callback_of(s, "u1", id);
    check_callback_state(cb, "pending", 1, "could not");
    json_decref(cb);
    REQUIRE(receiver_start(&rc));
    receiver_finish(&rc);
    free(check_callback(s, &rc, id));
    cb = callback_final(s, "u1", id);
    check_callback_state(cb, "delivered", 2, NULL);
    json_decref(cb);
    receiver_release(&rc);
    free(url);
    free(id);
    itest_stop(s);
}

/* A receiver answering 503 and then 200 sees the same X-Interpd-Delivery
 * twice, each attempt signed afresh. */
static void callback_retry_same_delivery(void)
{
    struct itest_server *s = start("1h");
    struct receiver rc;
    REQUIRE(s);
    REQUIRE(receiver_bind(&rc));
    rc.n = 2;
    rc.status[0] = 503;
    REQUIRE(receiver_start(&rc));
    char *url = itest_fmt("http://127.0.0.1:%d/hook", rc.port);
    char *id = submit(s, "u1",
                      json_pack("{s:s, s:s}", "code", "print('called back')",
                                "callback_url", url),
                      202);
    REQUIRE(id);
    receiver_finish(&rc);
    REQUIRE(rc.got == 2);
    char *d1 = header_of(rc.requests[0], "X-Interpd-Delivery");
    char *d2 = header_of(rc.requests[1], "X-Interpd-Delivery");
    CHECK(d1 && d2 && !strcmp(d1, d2));
    char *secret = admin_secret(s);
    REQUIRE(secret);
    const char *secrets[] = {secret};
    check_sig_of(rc.requests[0], secrets, 1);
    check_sig_of(rc.requests[1], secrets, 1);
    CHECK_STR(body_of(rc.requests[0]), body_of(rc.requests[1]));
    json_t *cb = callback_final(s, "u1", id);
    check_callback_state(cb, "delivered", 2, NULL);
    CHECK_STR(itest_json_str(cb, "delivery_id"), d1);
    json_decref(cb);
    receiver_release(&rc);
    free(secret);
    free(d1);
    free(d2);
    free(url);
    free(id);
    itest_stop(s);
}

/* A callback_url the guard refuses on its face is 400 at submit, with the
 * guard's reason: nothing runs, nothing is queued or stored, nothing is
 * sent. */
static void callback_refused_at_submit(void)
{
    const char *args[] = {"--callback-retry-delay", "0s", NULL};
    struct itest_opts o = {.args = args};
    struct itest_server *s = itest_start(&o);
    struct receiver rc;
    struct itest_resp r;
    REQUIRE(s);
    REQUIRE(receiver_bind(&rc));
    REQUIRE(receiver_start(&rc));
    struct {
        char *url;
        const char *why;
    } urls[] = {
        {itest_fmt("http://10.1.2.3/hook"), "(private)"},
        {itest_fmt("http://127.0.0.1:%d/hook", rc.port), "(loopback)"},
        {itest_fmt("http://[::1]:%d/hook", rc.port), "(loopback)"},
        {itest_fmt("http://localhost:%d/hook", rc.port),
         "of host localhost is not allowed (loopback)"},
        {itest_fmt("http://169.254.169.254/latest/meta-data"), "(link-local"},
        {itest_fmt("file:///etc/passwd"), "http or https"},
        {itest_fmt("gopher://127.0.0.1:%d/", rc.port), "http or https"},
        {itest_fmt("http://exa mple.com/"), "not usable"},
    };
    for (size_t i = 0; i < sizeof(urls) / sizeof(urls[0]); i++) {
        json_t *body = json_pack("{s:s, s:s}", "code", "print(1)",
                                 "callback_url", urls[i].url);
        itest_exec(s, s->admin_key, "u1", body, 60000, &r);
        CHECK_ERROR(&r, 400, "invalid_request");
        const char *msg = itest_json_str(r.json, "error.message");
        CHECKF(msg && strstr(msg, "callback_url") && strstr(msg, urls[i].why),
               "%s: message \"%s\"", urls[i].url, msg ? msg : "(none)");
        itest_resp_release(&r);
        free(urls[i].url);
    }
    itest_request(s, "GET", "/v1/admin/status", s->admin_key, NULL, NULL, NULL,
                  0, NULL, &r);
    CHECK_STATUS(&r, 200);
    CHECK_INT(json_integer_value(itest_json_get(r.json, "executions.total")),
              0);
    CHECK_INT(json_integer_value(itest_json_get(r.json, "executions.queued")),
              0);
    itest_resp_release(&r);
    /* Nothing connected: close the listener and see the thread idle. */
    shutdown(rc.fd, SHUT_RDWR);
    receiver_finish(&rc);
    CHECK(rc.request == NULL);
    itest_stop(s);
}

/* A name that passes at submit but resolves to a refused address: the
 * machine's own host name, which /etc/hosts (or nss-myhostname) maps to a
 * loopback address here and on any ordinary Linux host (checked first).
 * One attempt, not retried, "failed" with the guard's reason. */
static void callback_refused_at_delivery(void)
{
    char host[256];
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *ai = NULL;
    REQUIRE(gethostname(host, sizeof(host)) == 0);
    REQUIRE(strcmp(host, "localhost") != 0 && !strchr(host, ':'));
    REQUIRE(getaddrinfo(host, "80", &hints, &ai) == 0);
    bool refused_only = true;
    for (struct addrinfo *p = ai; p; p = p->ai_next) {
        if (p->ai_family == AF_INET) {
            uint32_t a =
                ntohl(((struct sockaddr_in *)p->ai_addr)->sin_addr.s_addr);
            refused_only &= (a >> 24) == 127 || (a >> 24) == 10 ||
                            (a >> 20) == 0xac1 || (a >> 16) == 0xc0a8;
        } else {
            refused_only &=
                p->ai_family == AF_INET6 &&
                IN6_IS_ADDR_LOOPBACK(
                    &((struct sockaddr_in6 *)p->ai_addr)->sin6_addr);
        }
    }
    freeaddrinfo(ai);
    CHECKF(refused_only,
           "host name %s resolves to a public address here; "
           "this test needs it private or loopback",
           host);
    const char *args[] = {"--callback-retry-delay", "0s", NULL};
    struct itest_opts o = {.args = args};
    struct itest_server *s = itest_start(&o);
    REQUIRE(s);
    char *url = itest_fmt("http://%s:9/hook", host);
    char *id = submit(
        s, "u1",
        json_pack("{s:s, s:s}", "code", "print(1)", "callback_url", url), 202);
    REQUIRE(id);
    json_t *cb = callback_final(s, "u1", id);
    check_callback_state(cb, "failed", 1, "is not allowed (");
    CHECK(strstr(itest_json_str(cb, "error") ? itest_json_str(cb, "error") : "",
                 host) != NULL);
    json_decref(cb);
    CHECK(itest_wait_log_line(s, 5000, "failed after 1 attempt", "not retried",
                              NULL));
    char *log = itest_read_log(s);
    CHECK(log && !strstr(log, "attempt 2 of 3"));
    free(log);
    free(url);
    free(id);
    itest_stop(s);
}

/* ---- secret rotation and the documented verifiers --------------------- */

/* One callback of an execution run with key: the request received (new),
 * or NULL. */
static char *one_callback(struct itest_server *s, const char *key)
{
    struct receiver rc;
    struct itest_resp r;
    if (!receiver_bind(&rc) || !receiver_start(&rc))
        return NULL;
    char *url = itest_fmt("http://127.0.0.1:%d/hook", rc.port);
    json_t *body = json_pack("{s:s, s:s}", "code", "print('called back')",
                             "callback_url", url);
    itest_exec(s, key, "u1", body, 60000, &r);
    CHECK_STATUS(&r, 202);
    bool queued = r.status == 202;
    itest_resp_release(&r);
    if (!queued)
        shutdown(rc.fd, SHUT_RDWR);
    receiver_finish(&rc);
    char *req = rc.requests[0];
    rc.requests[0] = NULL;
    receiver_release(&rc);
    free(url);
    return req;
}

/* `interpd keys ARGS...` as JSON (new), NULL unless it exits 0. */
static json_t *keys_cli(struct itest_server *s, const char *cmd,
                        const char *tenant)
{
    char *out = NULL;
    json_error_t jerr;
    int code = itest_cli(s, &out, "keys", cmd, "--data-dir", s->data_dir,
                         tenant ? "--tenant" : NULL, tenant, NULL);
    json_t *j = !code && out ? json_loads(out, JSON_DECODE_ANY, &jerr) : NULL;
    CHECKF(j != NULL, "keys %s: exit %d, %s", cmd, code, out ? out : "");
    free(out);
    return j;
}

/* The secret `keys list` shows for every key of tenant (they must all
 * agree): new string or NULL; *rotated: whether secret_rotated_at is set. */
static char *listed_secret(struct itest_server *s, const char *tenant,
                           bool *rotated)
{
    json_t *arr = keys_cli(s, "list", NULL), *k;
    char *secret = NULL;
    size_t i;
    json_array_foreach(arr, i, k)
    {
        if (strcmp(itest_json_str(k, "tenant"), tenant) != 0)
            continue;
        const char *sec = itest_json_str(k, "secret");
        if (!secret)
            secret = strdup(sec);
        CHECK_STR(sec, secret);
        *rotated = json_is_string(json_object_get(k, "secret_rotated_at"));
    }
    json_decref(arr);
    return secret;
}

/* `keys create` prints the tenant's secret with the key; after
 * `keys rotate-secret` callbacks carry two v1= (the new secret first)
 * until --callback-secret-grace ends, then the new one alone. */
static void secret_rotation(void)
{
    const char *args[] = {"--fetch-allow",
                          "127.0.0.1/32",
                          "--callback-retry-delay",
                          "1s",
                          "--callback-secret-grace",
                          "3s",
                          NULL};
    struct itest_opts o = {.args = args};
    struct itest_server *s = itest_start(&o);
    bool rotated = true;
    REQUIRE(s);
    json_t *c1 = keys_cli(s, "create", "acme");
    REQUIRE(c1);
    const char *key = itest_json_str(c1, "key");
    const char *s0 = itest_json_str(c1, "secret");
    REQUIRE(key && s0);
    CHECK(strlen(s0) == 64 && strspn(s0, "0123456789abcdef") == 64);
    char *listed = listed_secret(s, "acme", &rotated);
    CHECK_STR(listed, s0);
    CHECK(!rotated);
    free(listed);
    char *admin0 = admin_secret(s);
    CHECK(admin0 && strcmp(admin0, s0) != 0);

    char *req = one_callback(s, key);
    const char *only0[] = {s0};
    REQUIRE(req);
    check_sig_of(req, only0, 1);
    free(req);

    json_t *rot = keys_cli(s, "rotate-secret", "acme");
    REQUIRE(rot);
    int64_t rotated_ms = (int64_t)time(NULL) * 1000;
    const char *s1 = itest_json_str(rot, "secret");
    REQUIRE(s1 && strcmp(s1, s0) != 0);
    CHECK_STR(itest_json_str(rot, "tenant"), "acme");
    CHECK(itest_json_str(rot, "previous_valid_until") != NULL);
    listed = listed_secret(s, "acme", &rotated);
    CHECK_STR(listed, s1);
    CHECK(rotated);
    free(listed);
    /* Another tenant's secret is untouched; a new key of the tenant
     * shares the new secret. */
    char *admin1 = admin_secret(s);
    CHECK_STR(admin1, admin0);
    json_t *c2 = keys_cli(s, "create", "acme");
    CHECK_STR(itest_json_str(c2, "secret"), s1);

    req = one_callback(s, key);
    const char *both[] = {s1, s0};
    REQUIRE(req);
    check_sig_of(req, both, 2);
    free(req);

    /* The wait is the thing under test: past the 3 s grace (wall clock,
     * whole seconds, so one more). */
    while ((int64_t)time(NULL) * 1000 < rotated_ms + 4000)
        usleep(200 * 1000);
    req = one_callback(s, key);
    const char *only1[] = {s1};
    REQUIRE(req);
    check_sig_of(req, only1, 1);
    free(req);

    /* Refusals: unknown tenant, malformed arguments. */
    char *out = NULL;
    CHECK_INT(itest_cli(s, &out, "keys", "rotate-secret", "--data-dir",
                        s->data_dir, "--tenant", "nobody", NULL),
              1);
    free(out);
    out = NULL;
    CHECK_INT(itest_cli(s, &out, "keys", "rotate-secret", "--data-dir",
                        s->data_dir, NULL),
              2);
    free(out);
    json_decref(c1);
    json_decref(c2);
    json_decref(rot);
    free(admin0);
    free(admin1);
    itest_stop(s);
}

/* The text between `<!-- name:begin -->` and `<!-- name:end -->` in
 * docs/API.md, without the code fence lines (new), or NULL. */
static char *doc_snippet(const char *name)
{
    char *path = itest_fmt("%s/docs/API.md", ITEST_SOURCE_DIR);
    char *doc = itest_read_file(path, NULL);
    char *begin = itest_fmt("<!-- %s:begin -->", name);
    char *end = itest_fmt("<!-- %s:end -->", name);
    char *out = NULL;
    const char *b = doc ? strstr(doc, begin) : NULL;
    const char *e = b ? strstr(b, end) : NULL;
    if (b && e) {
        b = strstr(b, "\n```");
        b = b ? strchr(b + 1, '\n') : NULL;                /* after the fence */
        const char *close = b ? strstr(b, "\n```") : NULL; /* the last */
        if (b && close && close < e)
            out = strndup(b + 1, (size_t)(close - b));
    }
    free(path);
    free(doc);
    free(begin);
    free(end);
    return out;
}

static bool write_text(const char *path, const char *a, const char *b)
{
    FILE *f = fopen(path, "w");
    if (!f)
        return false;
    bool ok = fputs(a, f) >= 0 && (!b || fputs(b, f) >= 0);
    return fclose(f) == 0 && ok;
}

static const char py_driver[] =
    "\nimport sys\n"
    "secret = open(sys.argv[1]).read()\n"
    "header = open(sys.argv[2]).read()\n"
    "body = open(sys.argv[3], 'rb').read()\n"
    "now = float(sys.argv[4]) if len(sys.argv) > 4 else None\n"
    "ok = verify_interpd_signature(secret, header, body, now=now)\n"
    "sys.exit(0 if ok is True else 3)\n";
static const char js_driver[] =
    "\nconst fs = require('fs');\n"
    "const a = process.argv.slice(2);\n"
    "const secret = fs.readFileSync(a[0], 'utf8');\n"
    "const header = fs.readFileSync(a[1], 'utf8');\n"
    "const body = fs.readFileSync(a[2]);\n"
    "const ok = a.length > 3\n"
    "  ? verifyInterpdSignature(secret, header, body, 300, Number(a[3]))\n"
    "  : verifyInterpdSignature(secret, header, body);\n"
    "process.exit(ok === true ? 0 : 3);\n";

/* Run the documented verifier (python or node) on secret, the header and
 * body of req (body replaced by `body` when not NULL), at now (0: the
 * clock): its exit code (0 accepted, 3 rejected, else it broke). */
static int run_verifier(struct itest_server *s, bool node, const char *secret,
                        const char *req, const char *body, long long now)
{
    char *script = itest_fmt("%s/verify.%s", s->tmp_dir, node ? "js" : "py");
    char *fs = itest_fmt("%s/v.secret", s->tmp_dir);
    char *fh = itest_fmt("%s/v.header", s->tmp_dir);
    char *fb = itest_fmt("%s/v.body", s->tmp_dir);
    char *nows = itest_fmt("%lld", now);
    char *header = header_of(req, "X-Interpd-Signature");
    int code = -1;
    if (write_text(fs, secret, NULL) && header &&
        write_text(fh, header, NULL) &&
        write_text(fb, body ? body : body_of(req), NULL)) {
        const char *argv[] = {node ? "/usr/bin/node" : "/usr/bin/python3",
                              script,
                              fs,
                              fh,
                              fb,
                              now ? nows : NULL,
                              NULL};
        code = itest_run(argv, NULL, 30000);
    }
    free(script);
    free(fs);
    free(fh);
    free(fb);
    free(nows);
    free(header);
    return code;
}

/* The Python and Node snippets of docs/API.md, exactly as written there,
 * verify a callback the server really delivered, and reject a changed
 * body, another secret and a replay 10 minutes later. */
static void verify_snippets(void)
{
    struct itest_server *s = start("1h");
    REQUIRE(s);
    char *py = doc_snippet("verify-python");
    char *js = doc_snippet("verify-node");
    REQUIRE(py && js);
    char *pyf = itest_fmt("%s/verify.py", s->tmp_dir);
    char *jsf = itest_fmt("%s/verify.js", s->tmp_dir);
    REQUIRE(write_text(pyf, py, py_driver) && write_text(jsf, js, js_driver));
    char *secret = admin_secret(s);
    char *req = one_callback(s, s->admin_key);
    REQUIRE(secret && req);
    char *sig = header_of(req, "X-Interpd-Signature");
    long long t = sig ? strtoll(sig + 2, NULL, 10) : 0;
    char *tampered = strdup(body_of(req));
    char *p = strstr(tampered, "called back");
    REQUIRE(p);
    p[0] = 'C';
    for (int node = 0; node < 2; node++) {
        const char *lang = node ? "node" : "python";
        int rc = run_verifier(s, node, secret, req, NULL, 0);
        CHECKF(rc == 0, "%s: the real callback: exit %d", lang, rc);
        rc = run_verifier(s, node, secret, req, tampered, 0);
        CHECKF(rc == 3, "%s: a changed body: exit %d", lang, rc);
        rc = run_verifier(s, node, "not-the-secret", req, NULL, 0);
        CHECKF(rc == 3, "%s: another secret: exit %d", lang, rc);
        rc = run_verifier(s, node, secret, req, NULL, t + 600);
        CHECKF(rc == 3, "%s: 10 minutes later: exit %d", lang, rc);
        rc = run_verifier(s, node, secret, req, NULL, t + 200);
        CHECKF(rc == 0, "%s: within the window: exit %d", lang, rc);
    }
    free(tampered);
    free(sig);
    free(req);
    free(secret);
    free(pyf);
    free(jsf);
    free(py);
    free(js);
    itest_stop(s);
}

/* A receiver that accepts and never answers holds one delivery thread;
 * another callback still arrives meanwhile.  Regression: with one
 * delivery thread every tenant's callbacks waited behind it for the
 * whole fetch timeout (here 120 s, longer than the receiver waits). */
static void slow_receiver_does_not_block_others(void)
{
    const char *args[] = {"--fetch-allow",
                          "127.0.0.1/32",
                          "--callback-retry-delay",
                          "1s",
                          "--fetch-timeout",
                          "120s",
                          NULL};
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
    char *a = submit(
        s, "u1",
        json_pack("{s:s, s:s}", "code", "print('a')", "callback_url", slow),
        202);
    /* Bounded wait until the slow callback's connection is pending. */
    struct pollfd pfd = {.fd = hang.fd, .events = POLLIN};
    CHECK(poll(&pfd, 1, 60000) == 1);
    char *b = submit(
        s, "u1",
        json_pack("{s:s, s:s}", "code", "print('b')", "callback_url", fast),
        202);
    REQUIRE(a && b);
    receiver_finish(&rc); /* the fast one's request, or 60 s without */
    CHECKF(rc.request && strstr(rc.request, "POST /fast ") == rc.request,
           "the second callback did not arrive while the first hung");
    CHECK(request_body(&rc) && strstr(request_body(&rc), b));
    receiver_release(&rc);
    receiver_finish(&hang);
    free(slow);
    free(fast);
    free(a);
    free(b);
    itest_stop(s);
}

TEST_MAIN(T(poll_to_completion), T(results_expire), T(callback_signed),
          T(callback_retried), T(callback_retry_same_delivery),
          T(callback_refused_at_submit), T(callback_refused_at_delivery),
          T(secret_rotation), T(verify_snippets),
          T(slow_receiver_does_not_block_others))
