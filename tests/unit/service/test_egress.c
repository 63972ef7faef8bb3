/*
 * test_egress.c - service/fetch/egress.h: the request parser (request
 * lines, CONNECT authorities, IPv6 literals, the rewritten head of plain
 * HTTP, garbage) and the proxy itself in-process on loopback sockets: the
 * guard's 403, a CONNECT tunnel to an allowlisted listener, 400 for
 * garbage, 503 past max_conns, and a stop that ends idle connections.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "service/common/buf.h"
#include "service/common/util.h"
#include "service/fetch/egress.h"
#include "netns.h"
#include "test.h"

/* Parse head; IPD_OK or not, with req filled (release req->out). */
static enum ipd_err parse(const char *head, struct ipd_egress_request *req,
                          char *why)
{
    return ipd_egress_parse(head, strlen(head), req, why, 128);
}

static void connect_forms(void)
{
    static const struct {
        const char *line, *host, *port;
    } ok[] = {
        {"CONNECT example.org:443 HTTP/1.1\r\n", "example.org", "443"},
        {"CONNECT 10.0.0.1:8443 HTTP/1.0\r\n", "10.0.0.1", "8443"},
        {"CONNECT [::1]:443 HTTP/1.1\r\n", "::1", "443"},
        {"CONNECT [2001:db8::5]:65535 HTTP/1.1\r\n", "2001:db8::5", "65535"},
        {"CONNECT a-b_c.d:1 HTTP/1.1\n", "a-b_c.d", "1"},
        {"CONNECT host:080 HTTP/1.1\r\n", "host", "80"},
    };
    for (size_t i = 0; i < IPD_ARRAY_LEN(ok); i++) {
        struct ipd_egress_request req;
        char head[256], why[128];
        snprintf(head, sizeof head, "%sHost: x\r\n\r\n", ok[i].line);
        CHECK_INT(parse(head, &req, why), IPD_OK);
        CHECK(req.tunnel);
        CHECK_STR(req.host, ok[i].host);
        CHECK_STR(req.port, ok[i].port);
        CHECK_INT((int)req.out.len, 0);
        ipd_buf_release(&req.out);
    }
}

static void absolute_forms(void)
{
    struct ipd_egress_request req;
    char why[128];

    CHECK_INT(parse("GET http://example.org/a/b?c=d HTTP/1.1\r\n"
                    "Host: example.org\r\nProxy-Connection: keep-alive\r\n"
                    "Proxy-Authorization: Basic c2VjcmV0\r\n"
                    "Connection: keep-alive\r\nKeep-Alive: 5\r\n"
                    "Accept: */*\r\n\r\n",
                    &req, why),
              IPD_OK);
    CHECK(!req.tunnel);
    CHECK_STR(req.host, "example.org");
    CHECK_STR(req.port, "80");
    CHECK_STR(req.out.buf, "GET /a/b?c=d HTTP/1.1\r\nHost: example.org\r\n"
                           "Accept: */*\r\nConnection: close\r\n\r\n");
    ipd_buf_release(&req.out);

    /* No path, a query only, a port, IPv6, no Host: one is added. */
    CHECK_INT(parse("HEAD HTTP://[::1]:8080 HTTP/1.0\r\n\r\n", &req, why),
              IPD_OK);
    CHECK_STR(req.host, "::1");
    CHECK_STR(req.port, "8080");
    CHECK_STR(req.out.buf, "HEAD / HTTP/1.0\r\nHost: [::1]:8080\r\n"
                           "Connection: close\r\n\r\n");
    ipd_buf_release(&req.out);
    CHECK_INT(
        parse("POST http://h?q HTTP/1.1\nContent-Length: 0\n\n", &req, why),
        IPD_OK);
    CHECK_STR(req.out.buf, "POST /?q HTTP/1.1\r\nContent-Length: 0\r\n"
                           "Host: h\r\nConnection: close\r\n\r\n");
    ipd_buf_release(&req.out);

    /* A head of bare LFs near the limit grows by a third as CRLFs: all of
     * it goes on, ended, never cut short. */
    char head[IPD_EGRESS_HEAD_MAX + 1];
    size_t n = (size_t)snprintf(head, sizeof head, "GET http://h/ HTTP/1.1\n");
    while (n + 3 + 1 <= IPD_EGRESS_HEAD_MAX) {
        memcpy(head + n, "a:\n", 3);
        n += 3;
    }
    head[n++] = '\n';
    head[n] = '\0';
    size_t lines = (n - 24) / 3;
    CHECK_INT(ipd_egress_parse(head, n, &req, why, sizeof why), IPD_OK);
    CHECK(req.out.len > n);
    CHECK(req.out.len >= 4 &&
          !memcmp(req.out.buf + req.out.len - 4, "\r\n\r\n", 4));
    CHECK(strstr(req.out.buf, "Connection: close\r\n\r\n") != NULL);
    size_t kept = 0;
    for (const char *p = req.out.buf; (p = strstr(p, "\r\na:\r\n")); p += 2)
        kept++;
    CHECK_INT(kept, lines);
    ipd_buf_release(&req.out);
}

static void garbage(void)
{
    static const struct {
        const char *head, *why;
    } bad[] = {
        {"", "incomplete request head"},
        {"\r\n\r\n", "bad request line"},
        {"GET / HTTP/1.1\r\n\r\n", "not a proxy request (origin form)"},
        {"GET https://x/ HTTP/1.1\r\n\r\n", "https:// goes through CONNECT"},
        {"GET ftp://x/ HTTP/1.1\r\n\r\n", "only http:// URLs and CONNECT"},
        {"GET http://u:p@x/ HTTP/1.1\r\n\r\n", "user info in the URL"},
        {"GET http://x/#f HTTP/1.1\r\n\r\n",
         "a fragment in the request target"},
        {"GET http:///p HTTP/1.1\r\n\r\n", "bad host"},
        {"GET http://x y/ HTTP/1.1\r\n\r\n", "not HTTP/1.0 or HTTP/1.1"},
        {"GET http://x/ HTTP/2.0\r\n\r\n", "not HTTP/1.0 or HTTP/1.1"},
        {"GET  http://x/ HTTP/1.1\r\n\r\n", "not HTTP/1.0 or HTTP/1.1"},
        {"G(T http://x/ HTTP/1.1\r\n\r\n", "bad method"},
        {"CONNECT x HTTP/1.1\r\n\r\n", "CONNECT needs host:port"},
        {"CONNECT x: HTTP/1.1\r\n\r\n", "bad port"},
        {"CONNECT x:0 HTTP/1.1\r\n\r\n", "bad port"},
        {"CONNECT x:65536 HTTP/1.1\r\n\r\n", "bad port"},
        {"CONNECT x:123456 HTTP/1.1\r\n\r\n", "bad port"},
        {"CONNECT x:4a HTTP/1.1\r\n\r\n", "bad port"},
        {"CONNECT ::1:443 HTTP/1.1\r\n\r\n", "bad host"},
        {"CONNECT [::1:443 HTTP/1.1\r\n\r\n", "bad IPv6 literal"},
        {"CONNECT []:443 HTTP/1.1\r\n\r\n", "bad IPv6 literal"},
        {"CONNECT [zz::1]:443 HTTP/1.1\r\n\r\n", "bad IPv6 literal"},
        {"CONNECT [fe80::1%25eth0]:443 HTTP/1.1\r\n\r\n", "bad IPv6 literal"},
        {"CONNECT [::1]x:443 HTTP/1.1\r\n\r\n", "bad authority"},
        {"CONNECT h\xc3\xa9:443 HTTP/1.1\r\n\r\n", "bad request target"},
        {"CONNECT x:443 HTTP/1.1\r\nbad header\r\n\r\n", "bad header line"},
        {"CONNECT x:443 HTTP/1.1\r\n: v\r\n\r\n", "bad header line"},
        {"CONNECT x:443 HTTP/1.1\r\nA b: v\r\n\r\n", "bad header name"},
        {"CONNECT x:443 HTTP/1.1\r\nA: v\r\n folded\r\n\r\n",
         "folded header line"},
        {"CONNECT x:443 HTTP/1.1\r\nA: v\rw\r\n\r\n", "bad header value"},
        {"CONNECT x:443 HTTP/1.1\r\nA: v\r\n", "incomplete request head"},
        {"CONNECT x:443 HTTP/1.1\r\n\r\nextra", "incomplete request head"},
    };
    for (size_t i = 0; i < IPD_ARRAY_LEN(bad); i++) {
        struct ipd_egress_request req;
        char why[128];
        CHECK_INT(parse(bad[i].head, &req, why), IPD_ERR_INVALID);
        CHECK_STR(why, bad[i].why);
        ipd_buf_release(&req.out);
    }
    /* A NUL inside a header value, and a head over the limit. */
    {
        struct ipd_egress_request req;
        char why[128];
        static const char nul[] = "CONNECT x:1 HTTP/1.1\r\nA: \0\r\n\r\n";
        CHECK_INT(ipd_egress_parse(nul, sizeof nul - 1, &req, why, 128),
                  IPD_ERR_INVALID);
        CHECK_STR(why, "bad header value");
        ipd_buf_release(&req.out);
        char *big = ipd_xcalloc(1, IPD_EGRESS_HEAD_MAX + 2);
        memset(big, 'a', IPD_EGRESS_HEAD_MAX + 1);
        CHECK_INT(
            ipd_egress_parse(big, IPD_EGRESS_HEAD_MAX + 1, &req, why, 128),
            IPD_ERR_INVALID);
        CHECK_STR(why, "request head too large");
        ipd_buf_release(&req.out);
        free(big);
    }
}

static void head_len(void)
{
    CHECK_INT((int)ipd_egress_head_len("GET x\r\n\r\nbody", 13), 9);
    CHECK_INT((int)ipd_egress_head_len("GET x\n\nbody", 11), 7);
    CHECK_INT((int)ipd_egress_head_len("GET x\r\nA: b\r\n", 13), 0);
    CHECK_INT((int)ipd_egress_head_len("GET x\r\n\r", 8), 0);
    CHECK_INT((int)ipd_egress_head_len("", 0), 0);
}

/* ---- the proxy in-process -------------------------------------------------
 */

static int listen_lo(int *port)
{
    struct sockaddr_in sa;
    socklen_t len = sizeof sa;
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

    IPD_ASSERT(fd >= 0);
    memset(&sa, 0, sizeof sa);
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    IPD_ASSERT(bind(fd, (struct sockaddr *)&sa, sizeof sa) == 0);
    IPD_ASSERT(listen(fd, 16) == 0);
    IPD_ASSERT(getsockname(fd, (struct sockaddr *)&sa, &len) == 0);
    *port = ntohs(sa.sin_port);
    return fd;
}

static int dial_lo(int port)
{
    struct sockaddr_in sa;
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

    IPD_ASSERT(fd >= 0);
    memset(&sa, 0, sizeof sa);
    sa.sin_family = AF_INET;
    sa.sin_port = htons((uint16_t)port);
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    IPD_ASSERT(connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0);
    return fd;
}

/* Everything fd sends within 10 s, until EOF or (with until) a string
 * containing it.  New string. */
static char *read_reply(int fd, const char *until)
{
    struct ipd_buf b;
    int64_t deadline = ipd_mono_ms() + 10000;

    ipd_buf_init(&b, 1 << 16);
    while (ipd_mono_ms() < deadline && !(until && strstr(b.buf, until))) {
        struct pollfd p = {fd, POLLIN, 0};
        char chunk[512];
        if (poll(&p, 1, 200) <= 0)
            continue;
        ssize_t n = read(fd, chunk, sizeof chunk);
        if (n <= 0)
            break;
        ipd_buf_add(&b, chunk, (size_t)n);
    }
    return ipd_buf_detach(&b, NULL);
}

static char *ask(int proxy_port, const char *req, const char *until)
{
    int fd = dial_lo(proxy_port);
    IPD_ASSERT(write(fd, req, strlen(req)) == (ssize_t)strlen(req));
    char *r = read_reply(fd, until);
    close(fd);
    return r;
}

static void proxy_in_process(void)
{
    struct ipd_fetch_allowlist *allow = NULL;
    struct ipd_egress *eg = NULL;
    int pport, oport, ofd = listen_lo(&oport);
    struct ipd_egress_opts o = {.max_conns = 4, .head_timeout_ms = 2000};

    /* Without an allowlist: loopback refused, 403 with the reason. */
    CHECK_INT(ipd_egress_start(&o, listen_lo(&pport), &eg), IPD_OK);
    char *req = ipd_xcalloc(1, 128);
    snprintf(req, 128, "CONNECT 127.0.0.1:%d HTTP/1.1\r\n\r\n", oport);
    char *r = ask(pport, req, NULL);
    CHECK(!strncmp(r, "HTTP/1.1 403 Forbidden\r\n", 24));
    CHECK(strstr(r, "\r\n\r\ninterpd egress: address 127.0.0.1 of host "
                    "127.0.0.1 is not allowed (loopback)\n") != NULL);
    free(r);
    r = ask(pport, "HELLO\r\n\r\n", NULL);
    CHECK(!strncmp(r, "HTTP/1.1 400 Bad Request\r\n", 26));
    free(r);
    /* A public address the guard allows, but a tunnel to port 25 (SMTP)
     * is raw TCP to a non-HTTPS port: refused before any connection. */
    r = ask(pport, "CONNECT 203.0.114.9:25 HTTP/1.1\r\n\r\n", NULL);
    CHECK(!strncmp(r, "HTTP/1.1 403 Forbidden\r\n", 24));
    CHECK(strstr(r, "port 443 only") != NULL);
    free(r);
    struct ipd_egress_stats st;
    ipd_egress_stop(eg, &st);
    CHECK_INT((int)st.accepted, 3);
    CHECK_INT((int)st.refused, 2);
    CHECK_INT((int)st.failed, 0);
    CHECK(strstr(st.last, "port 443 only") != NULL);

    /* Allowlisted: a tunnel; a second connection meanwhile gets 503; the
     * stop ends the idle tunnel. */
    CHECK_INT(ipd_fetch_allowlist_parse("127.0.0.1", &allow, NULL), IPD_OK);
    o.allow = allow;
    o.max_conns = 1;
    CHECK_INT(ipd_egress_start(&o, listen_lo(&pport), &eg), IPD_OK);
    int c = dial_lo(pport);
    CHECK(write(c, req, strlen(req)) == (ssize_t)strlen(req));
    int of = accept(ofd, NULL, NULL);
    CHECK(of >= 0);
    r = read_reply(c, "\r\n\r\n");
    CHECK_STR(r, "HTTP/1.1 200 Connection established\r\n\r\n");
    free(r);
    CHECK(write(c, "ping", 4) == 4);
    r = read_reply(of, "ping");
    CHECK_STR(r, "ping");
    free(r);
    CHECK(write(of, "pong", 4) == 4);
    r = read_reply(c, "pong");
    CHECK_STR(r, "pong");
    free(r);
    r = ask(pport, req, NULL);
    CHECK(!strncmp(r, "HTTP/1.1 503 Service Unavailable\r\n", 34));
    free(r);
    int64_t t0 = ipd_mono_ms();
    ipd_egress_stop(eg, &st);
    CHECK_INT((int)st.accepted, 2);
    CHECK(ipd_mono_ms() - t0 < 2000);
    r = read_reply(c, NULL); /* EOF: the proxy closed it */
    CHECK_STR(r, "");
    free(r);
    close(c);
    close(of);
    close(ofd);
    free(req);
    ipd_fetch_allowlist_free(allow);
    ipd_egress_stop(NULL, &st);
    CHECK_INT((int)st.accepted, 0);
}

/* A listener on ip:port (IPv6 text); the fd. */
static int listen_at6(const char *ip, int port)
{
    struct sockaddr_in6 sa;
    int fd = socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int on = 1;

    IPD_ASSERT(fd >= 0);
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
    memset(&sa, 0, sizeof sa);
    sa.sin6_family = AF_INET6;
    sa.sin6_port = htons((uint16_t)port);
    IPD_ASSERT(inet_pton(AF_INET6, ip, &sa.sin6_addr) == 1);
    IPD_ASSERT(bind(fd, (struct sockaddr *)&sa, sizeof sa) == 0);
    IPD_ASSERT(listen(fd, 16) == 0);
    return fd;
}

/* The checks of host_addresses_refused, in the child; the number of
 * failed ones. */
static int host_addresses_child(void)
{
    static const char *const reqs[] = {
        "CONNECT " TEST_HOST_V4 ":443 HTTP/1.1\r\n\r\n",
        "CONNECT [::ffff:" TEST_HOST_V4 "]:443 HTTP/1.1\r\n\r\n",
        "CONNECT [" TEST_HOST_V6 "]:443 HTTP/1.1\r\n\r\n",
        "GET http://" TEST_HOST_V4 ":443/ HTTP/1.1\r\nHost: x\r\n\r\n",
        "GET http://[" TEST_HOST_V6 "]:443/ HTTP/1.1\r\nHost: x\r\n\r\n",
    };
    int before = test__failed_checks;
    struct ipd_fetch_allowlist *allow = NULL;
    struct ipd_egress *eg = NULL;
    struct ipd_egress_opts o = {.max_conns = 4, .head_timeout_ms = 2000};
    struct ipd_egress_stats st;
    int pport;

    if (test_netns_with_host_addresses())
        return 1;
    /* Origins on both of the host's addresses, port 443: a connection
     * the guard let through would reach them. */
    int o4 = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in sa4 = {.sin_family = AF_INET, .sin_port = htons(443)};
    inet_pton(AF_INET, TEST_HOST_V4, &sa4.sin_addr);
    IPD_ASSERT(o4 >= 0 && !bind(o4, (struct sockaddr *)&sa4, sizeof sa4) &&
               !listen(o4, 16));
    int o6 = listen_at6(TEST_HOST_V6, 443);
    CHECK_INT(ipd_egress_start(&o, listen_lo(&pport), &eg), IPD_OK);
    for (size_t i = 0; i < IPD_ARRAY_LEN(reqs); i++) {
        char *r = ask(pport, reqs[i], NULL);
        CHECKF(!strncmp(r, "HTTP/1.1 403 Forbidden\r\n", 24) &&
                   strstr(r, "is not allowed (an address of this host)\n"),
               "%.60s answered %s", reqs[i], r);
        free(r);
    }
    ipd_egress_stop(eg, &st);
    CHECK_INT((int)st.refused, (int)IPD_ARRAY_LEN(reqs));

    /* The control: allowlisted, a tunnel to each. */
    CHECK_INT(
        ipd_fetch_allowlist_parse(TEST_HOST_V4 " " TEST_HOST_V6, &allow, NULL),
        IPD_OK);
    o.allow = allow;
    CHECK_INT(ipd_egress_start(&o, listen_lo(&pport), &eg), IPD_OK);
    for (size_t i = 0; i < 3; i += 2) {
        int c = dial_lo(pport);
        CHECK(write(c, reqs[i], strlen(reqs[i])) == (ssize_t)strlen(reqs[i]));
        char *r = read_reply(c, "\r\n\r\n");
        CHECKF(!strcmp(r, "HTTP/1.1 200 Connection established\r\n\r\n"),
               "allowlisted %.60s answered %s", reqs[i], r);
        free(r);
        int of = accept(i ? o6 : o4, NULL, NULL);
        CHECK(of >= 0);
        if (of >= 0)
            close(of);
        close(c);
    }
    ipd_egress_stop(eg, &st);
    ipd_fetch_allowlist_free(allow);
    close(o4);
    close(o6);
    return test__failed_checks - before;
}

/* An address of this host's own interfaces (a public IPv4 or a global
 * IPv6 one) is refused by the egress proxy, for a tunnel and for plain
 * HTTP, in either family, unless allowlisted. */
static void host_addresses_refused(void)
{
    int st = 0;
    fflush(NULL);
    pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0)
        _exit(host_addresses_child() ? 1 : 0);
    REQUIRE(waitpid(pid, &st, 0) == pid);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0); /* its checks said why */
}

TEST_MAIN(T(connect_forms), T(absolute_forms), T(garbage), T(head_len),
          T(proxy_in_process), T(host_addresses_refused))
