/*
 * test_ingest.c - POST /v1/files {"url": ...}: the service fetches the
 * bytes from servers this test runs on 127.0.0.1 (allowlisted with
 * --fetch-allow) and stores them like an upload; redirects, the SSRF guard,
 * timeouts, size limits and broken servers all end in a clear 4xx with
 * nothing left behind.
 */
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/socket.h>
#include <unistd.h>

#include "harness.h"

/* ---- a scripted HTTP server ------------------------------------------- */

struct origin {
    int fd, port;
    const char *addr; /* "127.0.0.1" or "127.0.0.2" */
    int other_port;   /* the 127.0.0.2 server, for /away */
    int release[2];   /* closed at the end: stalled handlers go */
    pthread_t thread;
    atomic_int connections;
    bool stop;
};

struct conn {
    struct origin *o;
    int fd;
};

static void send_str(int fd, const char *s)
{
    itest_send_all(fd, s, strlen(s));
}

static void *conn_main(void *arg)
{
    struct conn *c = arg;
    struct origin *o = c->o;
    char req[4096], path[1024] = "";
    size_t got = 0;
    while (got < sizeof(req) - 1) {
        struct pollfd p = {.fd = c->fd, .events = POLLIN};
        if (poll(&p, 1, 10000) != 1)
            break;
        ssize_t n = read(c->fd, req + got, sizeof(req) - 1 - got);
        if (n <= 0)
            break;
        got += (size_t)n;
        req[got] = '\0';
        if (strstr(req, "\r\n\r\n"))
            break;
    }
    req[got] = '\0';
    sscanf(req, "GET %1023s", path);
    char *resp = NULL;
    if (!strcmp(path, "/data.csv")) {
        send_str(c->fd, "HTTP/1.1 200 OK\r\nContent-Type: text/csv\r\n"
                        "Content-Disposition: attachment; "
                        "filename=\"quarterly.csv\"\r\nContent-Length: 16\r\n"
                        "Connection: close\r\n\r\nregion,sales\nn,1");
    } else if (!strcmp(path, "/files/report%20v2.txt")) {
        send_str(c->fd, "HTTP/1.1 200 OK\r\nContent-Length: 11\r\n"
                        "Connection: close\r\n\r\nhello world");
    } else if (!strncmp(path, "/r/", 3)) {
        int n = atoi(path + 3);
        if (n > 0)
            resp = itest_fmt("HTTP/1.1 302 Found\r\nLocation: /r/%d\r\n"
                             "Content-Length: 0\r\nConnection: close\r\n\r\n",
                             n - 1);
        else
            resp = itest_fmt("HTTP/1.1 200 OK\r\nContent-Length: 7\r\n"
                             "Connection: close\r\n\r\narrived");
        send_str(c->fd, resp);
    } else if (!strcmp(path, "/away")) {
        resp = itest_fmt("HTTP/1.1 302 Found\r\nLocation: "
                         "http://127.0.0.2:%d/secret\r\nContent-Length: 0\r\n"
                         "Connection: close\r\n\r\n",
                         o->other_port);
        send_str(c->fd, resp);
    } else if (!strcmp(path, "/drip")) {
        send_str(c->fd, "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n"
                        "Connection: close\r\n\r\nx");
        struct pollfd p = {.fd = o->release[0], .events = POLLIN};
        (void)poll(&p, 1, 60000);
    } else if (!strcmp(path, "/big")) {
        send_str(c->fd, "HTTP/1.1 200 OK\r\nContent-Length: 8192\r\n"
                        "Connection: close\r\n\r\n");
        char block[8192];
        memset(block, 'b', sizeof(block));
        itest_send_all(c->fd, block, sizeof(block));
    } else if (!strcmp(path, "/reset")) {
        send_str(c->fd, "HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n"
                        "Connection: close\r\n\r\nonly-a-bit");
        struct linger l = {.l_onoff = 1, .l_linger = 0};
        setsockopt(c->fd, SOL_SOCKET, SO_LINGER, &l, sizeof(l));
    } else if (!strcmp(path, "/missing")) {
        send_str(c->fd, "HTTP/1.1 404 Not Found\r\nContent-Length: 4\r\n"
                        "Connection: close\r\n\r\nnope");
    } else {
        send_str(c->fd, "HTTP/1.1 200 OK\r\nContent-Length: 6\r\n"
                        "Connection: close\r\n\r\nsecret");
    }
    free(resp);
    close(c->fd);
    free(c);
    return NULL;
}

static void *origin_main(void *arg)
{
    struct origin *o = arg;
    for (;;) {
        struct pollfd p[2] = {{.fd = o->fd, .events = POLLIN},
                              {.fd = o->release[0], .events = POLLIN}};
        if (poll(p, 2, -1) < 0 || p[1].revents)
            break;
        int fd = accept4(o->fd, NULL, NULL, SOCK_CLOEXEC);
        if (fd < 0)
            continue;
        atomic_fetch_add(&o->connections, 1);
        struct conn *c = calloc(1, sizeof(*c));
        pthread_t t;
        c->o = o;
        c->fd = fd;
        if (pthread_create(&t, NULL, conn_main, c)) {
            close(fd);
            free(c);
            continue;
        }
        pthread_detach(t);
    }
    return NULL;
}

static bool origin_start(struct origin *o, const char *addr)
{
    struct sockaddr_in a = {.sin_family = AF_INET};
    socklen_t al = sizeof(a);
    memset(o, 0, sizeof(*o));
    o->addr = addr;
    if (pipe2(o->release, O_CLOEXEC))
        return false;
    inet_pton(AF_INET, addr, &a.sin_addr);
    o->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int one = 1;
    setsockopt(o->fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (o->fd < 0 || bind(o->fd, (struct sockaddr *)&a, sizeof(a)) ||
        listen(o->fd, 64) || getsockname(o->fd, (struct sockaddr *)&a, &al))
        return false;
    o->port = ntohs(a.sin_port);
    return pthread_create(&o->thread, NULL, origin_main, o) == 0;
}

static void origin_stop(struct origin *o)
{
    close(o->release[1]); /* wakes the accept loop and stalled handlers */
    pthread_join(o->thread, NULL);
    close(o->fd);
    close(o->release[0]);
}

/* ---- helpers ------------------------------------------------------------ */

static long ingest(struct itest_server *s, json_t *body, struct itest_resp *r)
{
    char *text = json_dumps(body, JSON_COMPACT);
    json_decref(body);
    long st = itest_request(s, "POST", "/v1/files", s->admin_key, "u1",
                            "application/json", text, strlen(text), NULL, r);
    free(text);
    return st;
}

static long ingest_url(struct itest_server *s, const char *url,
                       struct itest_resp *r)
{
    return ingest(s, json_pack("{s:s}", "url", url), r);
}

/* ---- tests -------------------------------------------------------------- */

static void fetch_and_name(void)
{
    struct origin o;
    REQUIRE(origin_start(&o, "127.0.0.1"));
    const char *args[] = {"--fetch-allow", "127.0.0.1/32", NULL};
    struct itest_opts opts = {.args = args};
    struct itest_server *s = itest_start(&opts);
    struct itest_resp r;
    REQUIRE(s);

    /* Content-Disposition names it; libmagic + extension type it. */
    char *url = itest_fmt("http://127.0.0.1:%d/data.csv", o.port);
    ingest_url(s, url, &r);
    CHECK_STATUS(&r, 201);
    CHECK_STR(itest_json_str(r.json, "filename"), "quarterly.csv");
    CHECK_STR(itest_json_str(r.json, "source"), "url");
    CHECK_STR(itest_json_str(r.json, "file_type"), "csv");
    CHECK_INT(json_integer_value(itest_json_get(r.json, "size")), 16);
    char *id = itest_json_dup(r.json, "file_id");
    itest_resp_release(&r);
    char *path = itest_fmt("/v1/files/%s/content", id);
    itest_request(s, "GET", path, s->admin_key, "u1", NULL, NULL, 0, NULL, &r);
    CHECK_STATUS(&r, 200);
    CHECK(r.len == 16 && !memcmp(r.body, "region,sales\nn,1", 16));
    itest_resp_release(&r);
    free(path);
    free(id);
    free(url);

    /* The request's filename wins; else the URL's last segment, decoded. */
    url = itest_fmt("http://127.0.0.1:%d/data.csv", o.port);
    ingest(s, json_pack("{s:s, s:s}", "url", url, "filename", "mine.csv"), &r);
    CHECK_STATUS(&r, 201);
    CHECK_STR(itest_json_str(r.json, "filename"), "mine.csv");
    itest_resp_release(&r);
    free(url);
    url = itest_fmt("http://127.0.0.1:%d/files/report%%20v2.txt", o.port);
    ingest_url(s, url, &r);
    CHECK_STATUS(&r, 201);
    CHECK_STR(itest_json_str(r.json, "filename"), "report v2.txt");
    CHECK_STR(itest_json_str(r.json, "file_type"), "text");
    itest_resp_release(&r);
    free(url);

    /* ttl_hours shortens the lifetime like an upload's. */
    url = itest_fmt("http://127.0.0.1:%d/r/0", o.port);
    ingest(s,
           json_pack("{s:s, s:s, s:i}", "url", url, "filename", "t.txt",
                     "ttl_hours", 1),
           &r);
    CHECK_STATUS(&r, 201);
    int64_t c = itest_parse_time(itest_json_str(r.json, "created_at"));
    int64_t e = itest_parse_time(itest_json_str(r.json, "expires_at"));
    CHECK_INT(e - c, 3600);
    itest_resp_release(&r);
    free(url);

    /* A bad name is 400 before anything is fetched. */
    int before = atomic_load(&o.connections);
    url = itest_fmt("http://127.0.0.1:%d/data.csv", o.port);
    ingest(s, json_pack("{s:s, s:s}", "url", url, "filename", ".."), &r);
    CHECK_ERROR(&r, 400, "invalid_request");
    itest_resp_release(&r);
    CHECK_INT(atomic_load(&o.connections), before);
    free(url);
    itest_stop(s);
    origin_stop(&o);
}

static void redirects_and_guard(void)
{
    struct origin o, other;
    REQUIRE(origin_start(&other, "127.0.0.2"));
    REQUIRE(origin_start(&o, "127.0.0.1"));
    o.other_port = other.port;
    const char *args[] = {"--fetch-allow", "127.0.0.1/32", NULL};
    struct itest_opts opts = {.args = args};
    struct itest_server *s = itest_start(&opts);
    struct itest_resp r;
    REQUIRE(s);

    char *url = itest_fmt("http://127.0.0.1:%d/r/3", o.port);
    ingest_url(s, url, &r);
    CHECK_STATUS(&r, 201);
    CHECK_INT(json_integer_value(itest_json_get(r.json, "size")), 7);
    itest_resp_release(&r);
    free(url);
    url = itest_fmt("http://127.0.0.1:%d/r/4", o.port);
    ingest_url(s, url, &r);
    /* Issue 12: the remote server's failure is 502 upstream_error. */
    CHECK_ERROR(&r, 502, "upstream_error");
    CHECK(strstr(itest_json_str(r.json, "error.message"), "redirects"));
    itest_resp_release(&r);
    free(url);

    /* A redirect to 127.0.0.2, outside the narrowed allowlist: refused
     * before connecting. */
    url = itest_fmt("http://127.0.0.1:%d/away", o.port);
    ingest_url(s, url, &r);
    CHECK_ERROR(&r, 400, "invalid_request");
    CHECK(strstr(itest_json_str(r.json, "error.message"), "not allowed"));
    /* ... naming the option that allows it (issue 12). */
    CHECK(strstr(itest_json_str(r.json, "error.message"), "--fetch-allow"));
    itest_resp_release(&r);
    CHECK_INT(atomic_load(&other.connections), 0);
    free(url);

    /* Refused schemes and a 404. */
    static const char *const schemes[] = {"file:///etc/passwd",
                                          "gopher://127.0.0.1:70/1",
                                          "ftp://127.0.0.1/x", "not a url"};
    for (size_t i = 0; i < sizeof(schemes) / sizeof(*schemes); i++) {
        ingest_url(s, schemes[i], &r);
        CHECK_ERROR(&r, 400, "invalid_request");
        itest_resp_release(&r);
    }
    url = itest_fmt("http://127.0.0.1:%d/missing", o.port);
    ingest_url(s, url, &r);
    CHECK_ERROR(&r, 502, "upstream_error");
    CHECK(strstr(itest_json_str(r.json, "error.message"), "404"));
    itest_resp_release(&r);
    free(url);
    /* Only the one that arrived is stored. */
    itest_request(s, "GET", "/v1/files", s->admin_key, "u1", NULL, NULL, 0,
                  NULL, &r);
    CHECK_INT(json_array_size(itest_json_get(r.json, "files")), 1);
    itest_resp_release(&r);
    itest_stop(s);

    /* Without an allowlist, loopback and the cloud metadata address are
     * refused. */
    struct itest_opts plain = {0};
    s = itest_start(&plain);
    REQUIRE(s);
    url = itest_fmt("http://127.0.0.1:%d/data.csv", o.port);
    ingest_url(s, url, &r);
    CHECK_ERROR(&r, 400, "invalid_request");
    CHECK(strstr(itest_json_str(r.json, "error.message"), "loopback"));
    CHECK(strstr(itest_json_str(r.json, "error.message"), "--fetch-allow"));
    itest_resp_release(&r);
    free(url);
    ingest_url(s, "http://169.254.169.254/latest/meta-data/", &r);
    CHECK_ERROR(&r, 400, "invalid_request");
    itest_resp_release(&r);
    ingest_url(s, "http://[::ffff:127.0.0.1]:1/", &r);
    CHECK_ERROR(&r, 400, "invalid_request");
    itest_resp_release(&r);
    itest_stop(s);
    origin_stop(&o);
    origin_stop(&other);
}

static void limits_and_broken_servers(void)
{
    struct origin o;
    REQUIRE(origin_start(&o, "127.0.0.1"));
    const char *args[] = {"--fetch-allow",
                          "127.0.0.1/32",
                          "--fetch-timeout",
                          "1s",
                          "--max-file-size",
                          "4K",
                          NULL};
    struct itest_opts opts = {.args = args};
    struct itest_server *s = itest_start(&opts);
    struct itest_resp r;
    REQUIRE(s);

    char *url = itest_fmt("http://127.0.0.1:%d/big", o.port);
    ingest_url(s, url, &r);
    CHECK_ERROR(&r, 413, "payload_too_large");
    itest_resp_release(&r);
    free(url);
    url = itest_fmt("http://127.0.0.1:%d/drip", o.port);
    ingest_url(s, url, &r);
    CHECK_ERROR(&r, 504, "upstream_timeout");
    CHECK(strstr(itest_json_str(r.json, "error.message"), "timed out"));
    itest_resp_release(&r);
    free(url);
    url = itest_fmt("http://127.0.0.1:%d/reset", o.port);
    ingest_url(s, url, &r);
    CHECK_ERROR(&r, 502, "upstream_error");
    itest_resp_release(&r);
    free(url);
    /* Nothing of the three stayed on disk or in the store, and the
     * service goes on serving. */
    CHECK(itest_wait_strays_at_most(s, 0, ITEST_CLEANUP_WAIT_MS));
    itest_request(s, "GET", "/v1/files", s->admin_key, "u1", NULL, NULL, 0,
                  NULL, &r);
    CHECK_STATUS(&r, 200);
    CHECK_INT(json_array_size(itest_json_get(r.json, "files")), 0);
    itest_resp_release(&r);
    itest_stop(s);
    origin_stop(&o);
}

TEST_MAIN(T(fetch_and_name), T(redirects_and_guard),
          T(limits_and_broken_servers))
