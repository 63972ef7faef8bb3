/*
 * test_fetch.c - outbound HTTP and its SSRF guard, against tiny HTTP
 * servers run on threads of this program (raw sockets on 127.0.0.1 and
 * 127.0.0.2, ephemeral ports, scripted answers).  No mocks, no sleeps: a
 * stalled server waits on a pipe that the test writes when it is done.
 * A name with two addresses comes from a private /etc/hosts, in a child
 * with a mount namespace of its own (mixed_name_refused_whole).
 * The guard's verdicts on addresses alone are test_fetch_guard.c's, the
 * suggested filename's parsing test_fetch_filename.c's.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <netdb.h>
#include <pthread.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "service/common/buf.h"
#include "service/fetch/fetch.h"
#include "service/common/util.h"
#include "netns.h"
#include "test.h"

/* ---- a scripted HTTP server ------------------------------------------- */

struct srv {
    int lfd;
    int port;
    int stop[2]; /* written by srv_stop: ends the loop and any stall */
    pthread_t th;
    char redirect_to[256]; /* Location for /away */
    int conns;             /* accepted; read after srv_stop (joined) */
    char req[16384];       /* the last request, headers and body */
    size_t req_len;
};

static void send_all(int fd, const void *data, size_t len)
{
    const char *p = data;
    while (len) {
        ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
        if (n <= 0)
            return; /* the client went away, as some tests make it */
        p += n;
        len -= (size_t)n;
    }
}

static void respond(int fd, const char *status, const char *headers,
                    const char *body)
{
    char head[1024];
    int n = snprintf(head, sizeof(head),
                     "HTTP/1.1 %s\r\nContent-Length: %zu\r\n"
                     "Connection: close\r\n%s\r\n",
                     status, strlen(body), headers);
    send_all(fd, head, (size_t)n);
    send_all(fd, body, strlen(body));
}

/* Wait until srv_stop. */
static void stall(struct srv *s)
{
    struct pollfd p = {s->stop[0], POLLIN, 0};
    while (poll(&p, 1, -1) < 0 && errno == EINTR)
        ;
}

/* Read one request (headers, then Content-Length bytes of body). */
static void read_request(struct srv *s, int fd)
{
    size_t want = 0;
    s->req_len = 0;
    s->req[0] = 0;
    for (;;) {
        struct pollfd p[2] = {{fd, POLLIN, 0}, {s->stop[0], POLLIN, 0}};
        if (poll(p, 2, -1) < 0 || p[1].revents)
            return;
        ssize_t n =
            recv(fd, s->req + s->req_len, sizeof(s->req) - 1 - s->req_len, 0);
        if (n <= 0)
            return;
        s->req_len += (size_t)n;
        s->req[s->req_len] = 0;
        char *end = strstr(s->req, "\r\n\r\n");
        if (!end)
            continue;
        if (!want) {
            const char *cl = strcasestr(s->req, "\r\nContent-Length:");
            want = (size_t)(end + 4 - s->req);
            if (cl && cl < end)
                want += (size_t)strtoul(cl + 17, NULL, 10);
        }
        if (s->req_len >= want || s->req_len == sizeof(s->req) - 1)
            return;
    }
}

static void big_body(int fd, bool with_length)
{
    static char chunk[65536];
    char head[256];
    size_t total = 1 << 20;
    memset(chunk, 'b', sizeof(chunk));
    int n = with_length
                ? snprintf(head, sizeof(head),
                           "HTTP/1.1 200 OK\r\nContent-Length: %zu\r\n"
                           "Connection: close\r\n\r\n",
                           total)
                : snprintf(head, sizeof(head),
                           "HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n");
    send_all(fd, head, (size_t)n);
    for (size_t sent = 0; sent < total; sent += sizeof(chunk))
        send_all(fd, chunk, sizeof(chunk));
}

/* Answer one request; returns false when it closed fd itself. */
static bool route(struct srv *s, int fd)
{
    char path[512] = "";
    const char *sp = strchr(s->req, ' ');
    if (sp)
        sscanf(sp + 1, "%511s", path);
    char loc[512];
    int n;

    if (!strcmp(path, "/hello.txt")) {
        respond(fd, "200 OK", "Content-Type: text/plain\r\n", "hello world");
    } else if (!strcmp(path, "/cd")) {
        respond(fd, "200 OK",
                "Content-Type: application/pdf\r\nContent-Disposition: "
                "attachment; filename=\"fallback.txt\"; "
                "filename*=UTF-8''r%C3%A9sum%C3%A9.pdf\r\n",
                "%PDF");
    } else if (!strcmp(path, "/dir/na%20me.csv")) {
        respond(fd, "200 OK", "", "a,b\n");
    } else if (!strncmp(path, "/r/", 3)) {
        n = (int)strtol(path + 3, NULL, 10) - 1;
        if (n < 0) {
            respond(fd, "200 OK", "", "done");
        } else {
            snprintf(loc, sizeof(loc), "Location: /r/%d\r\n", n);
            respond(fd, "302 Found", loc, "moved");
        }
    } else if (!strcmp(path, "/away")) {
        snprintf(loc, sizeof(loc), "Location: %s\r\n", s->redirect_to);
        respond(fd, "302 Found", loc, "");
    } else if (!strcmp(path, "/big")) {
        big_body(fd, true);
    } else if (!strcmp(path, "/big-stream")) {
        big_body(fd, false);
    } else if (!strcmp(path, "/drip")) {
        const char *head = "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nx";
        send_all(fd, head, strlen(head));
        stall(s);
    } else if (!strcmp(path, "/reset")) {
        const char *head =
            "HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n0123456789";
        struct linger lg = {1, 0};
        send_all(fd, head, strlen(head));
        /* Linger 0: close sends RST, not FIN. */
        setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
        close(fd);
        return false;
    } else if (!strcmp(path, "/hook")) {
        respond(fd, "200 OK", "", "ok");
    } else if (!strcmp(path, "/hook-redirect")) {
        respond(fd, "303 See Other", "Location: /elsewhere\r\n", "");
    } else {
        respond(fd, "404 Not Found", "", "nope");
    }
    return true;
}

static void *srv_main(void *arg)
{
    struct srv *s = arg;
    for (;;) {
        struct pollfd p[2] = {{s->lfd, POLLIN, 0}, {s->stop[0], POLLIN, 0}};
        if (poll(p, 2, -1) < 0 && errno == EINTR)
            continue;
        if (p[1].revents)
            break;
        int fd = accept4(s->lfd, NULL, NULL, SOCK_CLOEXEC);
        if (fd < 0)
            continue;
        s->conns++;
        read_request(s, fd);
        if (route(s, fd)) {
            shutdown(fd, SHUT_WR);
            close(fd);
        }
    }
    return NULL;
}

/* Listen on ip (IPv4 or IPv6 text), an ephemeral port, on a thread. */
static bool srv_start(struct srv *s, const char *ip)
{
    struct sockaddr_storage a;
    struct sockaddr_in *in = (struct sockaddr_in *)&a;
    struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&a;
    socklen_t alen = sizeof(a);
    memset(s, 0, sizeof(*s));
    memset(&a, 0, sizeof(a));
    if (inet_pton(AF_INET, ip, &in->sin_addr) == 1)
        a.ss_family = AF_INET;
    else if (inet_pton(AF_INET6, ip, &in6->sin6_addr) == 1)
        a.ss_family = AF_INET6;
    else
        return false;
    s->lfd = socket(a.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (s->lfd < 0 ||
        bind(s->lfd, (struct sockaddr *)&a,
             a.ss_family == AF_INET ? sizeof(*in) : sizeof(*in6)) ||
        listen(s->lfd, 16) ||
        getsockname(s->lfd, (struct sockaddr *)&a, &alen) ||
        pipe2(s->stop, O_CLOEXEC))
        return false;
    s->port = ntohs(a.ss_family == AF_INET ? in->sin_port : in6->sin6_port);
    return pthread_create(&s->th, NULL, srv_main, s) == 0;
}

static void srv_stop(struct srv *s)
{
    ssize_t n = write(s->stop[1], "x", 1);
    (void)n;
    pthread_join(s->th, NULL);
    close(s->lfd);
    close(s->stop[0]);
    close(s->stop[1]);
}

/* ---- a sink that keeps everything ------------------------------------- */

struct rec {
    struct ipd_buf got;
    int discards;
    enum ipd_err fail_with;
};

static enum ipd_err rec_write(void *ctx, const void *data, size_t len)
{
    struct rec *r = ctx;
    if (r->fail_with)
        return r->fail_with;
    return ipd_buf_add(&r->got, data, len);
}

static void rec_discard(void *ctx)
{
    struct rec *r = ctx;
    r->discards++;
}

struct fx {
    struct ipd_fetch_opts o;
    struct ipd_fetch_allowlist *allow;
    struct rec rec;
    struct ipd_fetch_sink sink;
    struct ipd_fetch_result res;
    struct ipd_buf err;
    char url[512];
};

static void fx_init(struct fx *f, const char *allow)
{
    memset(f, 0, sizeof(*f));
    ipd_fetch_opts_init(&f->o);
    f->o.connect_timeout_ms = 2000;
    f->o.total_timeout_ms = 10000;
    IPD_ASSERT(ipd_fetch_allowlist_parse(allow, &f->allow, NULL) == IPD_OK);
    f->o.allow = f->allow;
    ipd_buf_init(&f->rec.got, IPD_BUF_UNLIMITED);
    f->sink.write = rec_write;
    f->sink.discard = rec_discard;
    f->sink.ctx = &f->rec;
    ipd_fetch_result_init(&f->res);
    ipd_buf_init(&f->err, 4096);
}

static void fx_release(struct fx *f)
{
    ipd_fetch_allowlist_free(f->allow);
    ipd_buf_release(&f->rec.got);
    ipd_fetch_result_release(&f->res);
    ipd_buf_release(&f->err);
}

static enum ipd_err fx_get(struct fx *f, const char *fmt, ...) IPD_PRINTF(2, 3);

static enum ipd_err fx_get(struct fx *f, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(f->url, sizeof(f->url), fmt, ap);
    va_end(ap);
    ipd_fetch_result_release(&f->res);
    ipd_buf_reset(&f->err);
    ipd_buf_reset(&f->rec.got);
    f->rec.discards = 0;
    return ipd_fetch_get(&f->o, f->url, &f->sink, &f->res, &f->err);
}

static bool ends_with(const char *s, const char *suffix)
{
    size_t a = s ? strlen(s) : 0, b = strlen(suffix);
    return s && a >= b && !strcmp(s + a - b, suffix);
}

#define CHECK_HAS(hay, needle)                                                 \
    do {                                                                       \
        if (!strstr((hay), (needle))) {                                        \
            fprintf(stderr, "%s:%d: \"%s\" does not contain \"%s\"\n",         \
                    __FILE__, __LINE__, (hay), (needle));                      \
            test__failed_checks++;                                             \
        }                                                                      \
    } while (0)

/* The guard's verdict on an address (its own tests: test_fetch_guard.c). */
static bool verdict(const char *ip, const struct ipd_fetch_allowlist *allow,
                    char *why, size_t whysz)
{
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof(ss));
    struct sockaddr_in *in = (struct sockaddr_in *)&ss;
    struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&ss;
    if (inet_pton(AF_INET, ip, &in->sin_addr) == 1) {
        in->sin_family = AF_INET;
    } else {
        IPD_ASSERT(inet_pton(AF_INET6, ip, &in6->sin6_addr) == 1);
        in6->sin6_family = AF_INET6;
    }
    return ipd_fetch_address_allowed((struct sockaddr *)&ss, allow, why, whysz);
}

static void refused_schemes(void)
{
    struct fx f;
    fx_init(&f, "127.0.0.0/8");
    static const char *urls[] = {
        "file:///etc/passwd", "gopher://127.0.0.1:70/_x",
        "ftp://127.0.0.1/x",  "dict://127.0.0.1:11211/stats",
        "FILE:///etc/passwd", "javascript:alert(1)"};
    for (size_t i = 0; i < IPD_ARRAY_LEN(urls); i++) {
        CHECK_INT(fx_get(&f, "%s", urls[i]), IPD_ERR_INVALID);
        CHECK_HAS(f.err.buf, "only http and https URLs can be fetched");
        CHECK_INT(f.rec.discards, 1);
    }
    CHECK_INT(fx_get(&f, "not a url"), IPD_ERR_INVALID);
    CHECK_INT(fx_get(&f, "%s", ""), IPD_ERR_INVALID);
    CHECK_INT(fx_get(&f, "http://"), IPD_ERR_INVALID);
    CHECK_INT(fx_get(&f, "http://[fe80::1%%25eth0]/"), IPD_ERR_INVALID);
    fx_release(&f);
}

/* ---- against the servers ---------------------------------------------- */

static void plain_fetch(void)
{
    struct srv s;
    struct fx f;
    /* A proxy from the environment must not be used (port 1: nobody). */
    setenv("http_proxy", "http://127.0.0.1:1", 1);
    setenv("ALL_PROXY", "http://127.0.0.1:1", 1);
    REQUIRE(srv_start(&s, "127.0.0.1"));
    fx_init(&f, "127.0.0.1/32");

    CHECK_INT(fx_get(&f, "http://127.0.0.1:%d/hello.txt", s.port), IPD_OK);
    CHECK_STR(f.rec.got.buf, "hello world");
    CHECK_INT(f.res.status, 200);
    CHECK_INT(f.res.bytes, 11);
    CHECK_INT(f.res.redirects, 0);
    CHECK_STR(f.res.content_type, "text/plain");
    CHECK_STR(f.res.filename, "hello.txt");
    CHECK(ends_with(f.res.url, "/hello.txt"));
    CHECK_INT(f.rec.discards, 0);
    CHECK_STR(f.err.buf, "");

    CHECK_INT(fx_get(&f, "http://127.0.0.1:%d/cd", s.port), IPD_OK);
    CHECK_STR(f.res.filename, "r\xc3\xa9sum\xc3\xa9.pdf");
    CHECK_STR(f.res.content_type, "application/pdf");
    CHECK_STR(f.rec.got.buf, "%PDF");

    CHECK_INT(fx_get(&f, "http://127.0.0.1:%d/dir/na%%20me.csv", s.port),
              IPD_OK);
    CHECK_STR(f.res.filename, "na me.csv");
    CHECK(f.res.content_type == NULL);

    CHECK_INT(fx_get(&f, "http://127.0.0.1:%d/", s.port), IPD_ERR_UPSTREAM);
    CHECK(f.res.filename == NULL);

    srv_stop(&s);
    unsetenv("http_proxy");
    unsetenv("ALL_PROXY");
    CHECK_INT(s.conns, 4);
    CHECK_HAS(s.req, "User-Agent: interpd/");
    fx_release(&f);
}

static void localhost_via_etc_hosts(void)
{
    struct srv s;
    struct fx f;
    REQUIRE(srv_start(&s, "127.0.0.1"));
    /* ::1 too, in case this machine's /etc/hosts gives localhost both. */
    fx_init(&f, "127.0.0.1/32, ::1/128");
    CHECK_INT(fx_get(&f, "http://localhost:%d/hello.txt", s.port), IPD_OK);
    CHECK_STR(f.rec.got.buf, "hello world");
    CHECK_STR(f.err.buf, "");
    fx_release(&f);

    /* Without the allowlist, every way of writing loopback is refused
     * before a connection is made. */
    fx_init(&f, "");
    CHECK_INT(fx_get(&f, "http://localhost:%d/hello.txt", s.port),
              IPD_ERR_FORBIDDEN);
    CHECK_HAS(f.err.buf, "of host localhost is not allowed (loopback)");
    CHECK_INT(fx_get(&f, "http://LocalHost:%d/hello.txt", s.port),
              IPD_ERR_FORBIDDEN);
    CHECK_HAS(f.err.buf, "is not allowed (loopback)");
    CHECK_INT(fx_get(&f, "http://127.0.0.1:%d/hello.txt", s.port),
              IPD_ERR_FORBIDDEN);
    CHECK_STR(f.err.buf,
              "address 127.0.0.1 of host 127.0.0.1 is not allowed (loopback)");
    CHECK_INT(fx_get(&f, "http://2130706433:%d/hello.txt", s.port),
              IPD_ERR_FORBIDDEN);
    CHECK_HAS(f.err.buf, "(loopback)");
    CHECK_INT(fx_get(&f, "http://0x7f.1:%d/hello.txt", s.port),
              IPD_ERR_FORBIDDEN);
    CHECK_HAS(f.err.buf, "(loopback)");
    CHECK_INT(fx_get(&f, "http://[::ffff:127.0.0.1]:%d/hello.txt", s.port),
              IPD_ERR_FORBIDDEN);
    CHECK_HAS(f.err.buf, "loopback (IPv4-mapped)");
    CHECK_INT(fx_get(&f, "http://0.0.0.0:%d/hello.txt", s.port),
              IPD_ERR_FORBIDDEN);
    CHECK_HAS(f.err.buf, "(unspecified)");
    CHECK_INT(fx_get(&f, "http://[::]:%d/hello.txt", s.port),
              IPD_ERR_FORBIDDEN);
    CHECK_HAS(f.err.buf, "(unspecified)");
    CHECK_INT(f.rec.discards, 1);
    fx_release(&f);

    srv_stop(&s);
    CHECK_INT(s.conns, 1);
}

static void redirects(void)
{
    struct srv s;
    struct fx f;
    REQUIRE(srv_start(&s, "127.0.0.1"));
    fx_init(&f, "127.0.0.1/32");

    CHECK_INT(fx_get(&f, "http://127.0.0.1:%d/r/2", s.port), IPD_OK);
    CHECK_STR(f.rec.got.buf, "done");
    CHECK_INT(f.res.redirects, 2);
    CHECK(ends_with(f.res.url, "/r/0"));
    CHECK_STR(f.res.filename, "0");

    /* Three redirects is the limit; the fourth is refused. */
    CHECK_INT(fx_get(&f, "http://127.0.0.1:%d/r/3", s.port), IPD_OK);
    CHECK_INT(f.res.redirects, 3);
    CHECK_INT(fx_get(&f, "http://127.0.0.1:%d/r/4", s.port), IPD_ERR_UPSTREAM);
    CHECK_STR(f.err.buf, "too many redirects (limit 3)");
    CHECK_INT(f.res.status, 302);
    CHECK_INT(f.rec.got.len, 0); /* no redirect body reaches the sink */
    CHECK_INT(f.rec.discards, 1);

    f.o.max_redirects = 0;
    CHECK_INT(fx_get(&f, "http://127.0.0.1:%d/r/1", s.port), IPD_ERR_UPSTREAM);
    CHECK_STR(f.err.buf, "too many redirects (limit 0)");

    /* Off to another scheme. */
    f.o.max_redirects = 3;
    snprintf(s.redirect_to, sizeof(s.redirect_to), "file:///etc/passwd");
    CHECK_INT(fx_get(&f, "http://127.0.0.1:%d/away", s.port), IPD_ERR_INVALID);
    CHECK_HAS(f.err.buf, "only http and https URLs can be fetched");

    srv_stop(&s);
    /* 3 + 4 + 4 + 1 + 1 requests; the 5th hop of /r/4 never went out. */
    CHECK_INT(s.conns, 13);
    fx_release(&f);
}

static void redirect_to_refused_address(void)
{
    struct srv a, b;
    struct fx f;
    char why[128];
    REQUIRE(srv_start(&a, "127.0.0.1"));
    REQUIRE(srv_start(&b, "127.0.0.2"));
    fx_init(&f, "127.0.0.1/32");

    snprintf(a.redirect_to, sizeof(a.redirect_to), "http://127.0.0.2:%d/x",
             b.port);
    CHECK_INT(fx_get(&f, "http://127.0.0.1:%d/away", a.port),
              IPD_ERR_FORBIDDEN);
    CHECK_STR(f.err.buf,
              "address 127.0.0.2 of host 127.0.0.2 is not allowed (loopback)");
    CHECK_INT(f.res.redirects, 1);

    snprintf(a.redirect_to, sizeof(a.redirect_to), "http://[::1]:%d/x", b.port);
    CHECK_INT(fx_get(&f, "http://127.0.0.1:%d/away", a.port),
              IPD_ERR_FORBIDDEN);
    CHECK_STR(f.err.buf, "address ::1 of host [::1] is not allowed (loopback)");

    /* Off-machine targets: only when the classifier refuses them, so a
     * broken guard can never send a packet there. */
    if (!verdict("169.254.169.254", f.allow, why, sizeof(why)) &&
        !verdict("10.0.0.1", f.allow, why, sizeof(why))) {
        snprintf(a.redirect_to, sizeof(a.redirect_to),
                 "http://169.254.169.254/latest/meta-data/");
        CHECK_INT(fx_get(&f, "http://127.0.0.1:%d/away", a.port),
                  IPD_ERR_FORBIDDEN);
        CHECK_HAS(f.err.buf, "is not allowed (link-local (cloud metadata))");
        snprintf(a.redirect_to, sizeof(a.redirect_to), "http://10.0.0.1/");
        CHECK_INT(fx_get(&f, "http://127.0.0.1:%d/away", a.port),
                  IPD_ERR_FORBIDDEN);
        CHECK_HAS(f.err.buf, "address 10.0.0.1 of host 10.0.0.1");
    } else {
        test__failed_checks++;
    }
    fx_release(&f);

    /* The control: allowed, the same redirect does reach b. */
    fx_init(&f, "127.0.0.0/8");
    snprintf(a.redirect_to, sizeof(a.redirect_to), "http://127.0.0.2:%d/x",
             b.port);
    CHECK_INT(fx_get(&f, "http://127.0.0.1:%d/away", a.port), IPD_ERR_UPSTREAM);
    CHECK_STR(f.err.buf, "the URL answered 404");
    CHECK_INT(f.res.status, 404);
    CHECK_HAS(f.res.url, "http://127.0.0.2:");
    fx_release(&f);

    srv_stop(&a);
    srv_stop(&b);
    CHECK_INT(a.conns, 5);
    CHECK_INT(b.conns, 1); /* only the allowed one */
}

/* ---- a name with an allowed and a refused address --------------------- */

#define MIXED_NAME "mixed.interpd.test"

static bool write_text(const char *path, const char *text)
{
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    bool ok = fd >= 0 && write(fd, text, strlen(text)) == (ssize_t)strlen(text);
    if (fd >= 0)
        ok = close(fd) == 0 && ok;
    return ok;
}

/*
 * Give this process (a child forked for it: it must be single-threaded)
 * an /etc/hosts of its own in which MIXED_NAME has 127.0.0.1 and
 * 127.0.0.2: a private mount namespace (in a user namespace of its own
 * unless root) and a file bind-mounted over /etc/hosts.  getaddrinfo
 * reads it as it reads the real one: the fetch resolves the name for
 * real, no resolver is mocked, and nothing outside the child changes.
 */
static bool private_hosts(void)
{
    char tmp[] = "/tmp/ipd-hosts-XXXXXX", map[64];
    const char *text = "127.0.0.1 localhost\n127.0.0.1 " MIXED_NAME
                       "\n127.0.0.2 " MIXED_NAME "\n";
    uid_t uid = geteuid();
    gid_t gid = getegid();
    bool ok = false;
    int fd = -1;

    if (uid != 0 || unshare(CLONE_NEWNS)) {
        if (unshare(CLONE_NEWUSER | CLONE_NEWNS)) {
            perror("private_hosts: unshare");
            return false;
        }
        snprintf(map, sizeof(map), "0 %u 1", (unsigned)uid);
        if (!write_text("/proc/self/setgroups", "deny") ||
            !write_text("/proc/self/uid_map", map))
            return false;
        snprintf(map, sizeof(map), "0 %u 1", (unsigned)gid);
        if (!write_text("/proc/self/gid_map", map))
            return false;
    }
    fd = mkstemp(tmp);
    if (fd < 0)
        return false;
    ok = write(fd, text, strlen(text)) == (ssize_t)strlen(text) &&
         fchmod(fd, 0644) == 0 &&
         mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) == 0 &&
         mount(tmp, "/etc/hosts", NULL, MS_BIND, NULL) == 0;
    if (!ok)
        perror("private_hosts: writing or mounting the hosts file");
    close(fd);
    unlink(tmp); /* the bind mount keeps the file */
    return ok;
}

/* MIXED_NAME resolves to exactly 127.0.0.1 and 127.0.0.2 here (else the
 * test would prove nothing). */
static bool mixed_name_resolves(void)
{
    struct addrinfo hints, *ai = NULL;
    bool one = false, two = false, other = false;
    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    if (getaddrinfo(MIXED_NAME, "80", &hints, &ai))
        return false;
    for (const struct addrinfo *p = ai; p; p = p->ai_next) {
        char s[INET6_ADDRSTRLEN] = "";
        const struct sockaddr_in *in = (const void *)p->ai_addr;
        if (p->ai_family == AF_INET)
            inet_ntop(AF_INET, &in->sin_addr, s, sizeof(s));
        one = one || !strcmp(s, "127.0.0.1");
        two = two || !strcmp(s, "127.0.0.2");
        other = other || (strcmp(s, "127.0.0.1") && strcmp(s, "127.0.0.2"));
    }
    freeaddrinfo(ai);
    return one && two && !other;
}

/* The child's checks; the number of failed ones. */
static int mixed_name_child(void)
{
    int before = test__failed_checks;
    struct srv a, b;
    struct fx f;

    if (!private_hosts() || !mixed_name_resolves()) {
        fprintf(stderr,
                "%s:%d: no private /etc/hosts giving %s two "
                "addresses\n",
                __FILE__, __LINE__, MIXED_NAME);
        return 1;
    }
    if (!srv_start(&a, "127.0.0.1") || !srv_start(&b, "127.0.0.1"))
        return 1;
    /* b listens on the allowed address, at the port the name is asked
     * for: any connection the guard lets through reaches it. */
    snprintf(a.redirect_to, sizeof(a.redirect_to),
             "http://" MIXED_NAME ":%d/hello.txt", b.port);
    fx_init(&f, "127.0.0.1/32");

    /* The first URL, and a redirect hop: refused as a whole. */
    CHECK_INT(fx_get(&f, "http://" MIXED_NAME ":%d/hello.txt", b.port),
              IPD_ERR_FORBIDDEN);
    CHECK_STR(f.err.buf, "address 127.0.0.2 of host " MIXED_NAME
                         " is not allowed (loopback)");
    CHECK_INT(f.rec.discards, 1);
    CHECK_INT(fx_get(&f, "http://127.0.0.1:%d/away", a.port),
              IPD_ERR_FORBIDDEN);
    CHECK_STR(f.err.buf, "address 127.0.0.2 of host " MIXED_NAME
                         " is not allowed (loopback)");
    CHECK_INT(f.res.redirects, 1);
    CHECK_INT(f.rec.got.len, 0);
    fx_release(&f);

    /* The control: with both addresses allowed the same redirect gets
     * the file (from b, whichever address curl tries first). */
    fx_init(&f, "127.0.0.0/8");
    CHECK_INT(fx_get(&f, "http://127.0.0.1:%d/away", a.port), IPD_OK);
    CHECK_STR(f.rec.got.buf, "hello world");
    fx_release(&f);

    srv_stop(&a);
    srv_stop(&b);
    CHECK_INT(a.conns, 2);
    CHECK_INT(b.conns, 1); /* the control's: the refused hops made none */
    return test__failed_checks - before;
}

/*
 * A host that resolves to any refused address is refused as a whole, on
 * the first URL and on a redirect hop, before any connection: never just
 * the refused address at connect time while the allowed one is used.
 */
static void mixed_name_refused_whole(void)
{
    int st = 0;
    fflush(NULL);
    pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0)
        _exit(mixed_name_child() ? 1 : 0);
    REQUIRE(waitpid(pid, &st, 0) == pid);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0); /* its checks said why */
}

static void error_status(void)
{
    struct srv s;
    struct fx f;
    REQUIRE(srv_start(&s, "127.0.0.1"));
    fx_init(&f, "127.0.0.1/32");
    CHECK_INT(fx_get(&f, "http://127.0.0.1:%d/missing", s.port),
              IPD_ERR_UPSTREAM);
    CHECK_STR(f.err.buf, "the URL answered 404");
    CHECK_INT(f.res.status, 404);
    CHECK_INT(f.rec.got.len, 0); /* the error page is not the file */
    CHECK_INT(f.rec.discards, 1);

    f.rec.fail_with = IPD_ERR_QUOTA;
    CHECK_INT(fx_get(&f, "http://127.0.0.1:%d/hello.txt", s.port),
              IPD_ERR_QUOTA);
    CHECK_INT(f.rec.discards, 1);
    srv_stop(&s);
    fx_release(&f);
}

static void slow_drip_times_out(void)
{
    struct srv s;
    struct fx f;
    REQUIRE(srv_start(&s, "127.0.0.1"));
    fx_init(&f, "127.0.0.1/32");
    f.o.total_timeout_ms = 500;
    int64_t t0 = ipd_mono_ms();
    CHECK_INT(fx_get(&f, "http://127.0.0.1:%d/drip", s.port),
              IPD_ERR_UPSTREAM_TIMEOUT);
    int64_t took = ipd_mono_ms() - t0;
    CHECK(took >= 400 && took < 6000); /* bounded, loosely */
    CHECK_HAS(f.err.buf, "timed out");
    CHECK_INT(f.rec.discards, 1);
    CHECK(f.rec.got.len <= 1);
    srv_stop(&s); /* unblocks the stalled answer */
    fx_release(&f);
}

static void body_over_limit(void)
{
    struct srv s;
    struct fx f;
    REQUIRE(srv_start(&s, "127.0.0.1"));
    fx_init(&f, "127.0.0.1/32");

    /* Content-Length says too much: nothing is written. */
    f.o.max_bytes = 1000;
    CHECK_INT(fx_get(&f, "http://127.0.0.1:%d/big", s.port), IPD_ERR_TOO_LARGE);
    CHECK_INT(f.rec.got.len, 0);
    CHECK_INT(f.rec.discards, 1);
    CHECK_STR(f.err.buf, "the body is larger than the limit of 1000 bytes");

    /* No Content-Length: cut while receiving, never past the limit. */
    f.o.max_bytes = 100000;
    CHECK_INT(fx_get(&f, "http://127.0.0.1:%d/big-stream", s.port),
              IPD_ERR_TOO_LARGE);
    CHECK(f.rec.got.len <= 100000);
    CHECK(f.res.bytes == (int64_t)f.rec.got.len);
    CHECK_INT(f.rec.discards, 1);

    /* At the limit exactly it passes. */
    f.o.max_bytes = 11;
    CHECK_INT(fx_get(&f, "http://127.0.0.1:%d/hello.txt", s.port), IPD_OK);
    f.o.max_bytes = 10;
    CHECK_INT(fx_get(&f, "http://127.0.0.1:%d/hello.txt", s.port),
              IPD_ERR_TOO_LARGE);
    srv_stop(&s);
    fx_release(&f);
}

static void connection_failures(void)
{
    struct srv s;
    struct fx f;
    REQUIRE(srv_start(&s, "127.0.0.1"));
    fx_init(&f, "127.0.0.1/32");
    CHECK_INT(fx_get(&f, "http://127.0.0.1:%d/reset", s.port),
              IPD_ERR_UPSTREAM);
    CHECK_HAS(f.err.buf, "could not fetch: ");
    CHECK_INT(f.rec.discards, 1);
    CHECK(f.rec.got.len <= 10);
    fprintf(stderr, "  (reset: %s)\n", f.err.buf);
    srv_stop(&s);

    /* A port nobody listens on: that server's, now closed. */
    CHECK_INT(fx_get(&f, "http://127.0.0.1:%d/", s.port), IPD_ERR_UPSTREAM);
    CHECK_STR(f.err.buf, "could not fetch: connection refused");
    fx_release(&f);
}

static void post_callback(void)
{
    struct srv s;
    struct ipd_fetch_opts o;
    struct ipd_fetch_allowlist *allow = NULL;
    struct ipd_buf err;
    char url[256];
    int status = -1;
    const char *body = "{\"execution_id\":\"exec_1\",\"status\":\"ok\"}";
    const char *headers[] = {"X-Interpd-Signature: sha256=abc123", "X-Other: 1",
                             NULL};
    REQUIRE(srv_start(&s, "127.0.0.1"));
    ipd_buf_init(&err, 1024);
    ipd_fetch_opts_init(&o);
    IPD_ASSERT(ipd_fetch_allowlist_parse("127.0.0.1", &allow, NULL) == 0);
    o.allow = allow;

    snprintf(url, sizeof(url), "http://127.0.0.1:%d/hook", s.port);
    CHECK_INT(ipd_fetch_post(&o, url, "application/json", body, strlen(body),
                             headers, &status, &err),
              IPD_OK);
    CHECK_INT(status, 200);
    CHECK_STR(err.buf, "");
    /* The request is complete once the handler ran: stop to read it. */
    srv_stop(&s);
    CHECK(!strncmp(s.req, "POST /hook HTTP/1.1\r\n", 21));
    CHECK_HAS(s.req, "\r\nX-Interpd-Signature: sha256=abc123\r\n");
    CHECK_HAS(s.req, "\r\nContent-Type: application/json\r\n");
    CHECK(ends_with(s.req, body));
    CHECK(!strcasestr(s.req, "Expect:"));

    REQUIRE(srv_start(&s, "127.0.0.1"));
    snprintf(url, sizeof(url), "http://127.0.0.1:%d/hook-redirect", s.port);
    CHECK_INT(ipd_fetch_post(&o, url, "application/json", body, strlen(body),
                             NULL, &status, &err),
              IPD_ERR_UPSTREAM);
    CHECK_INT(status, 303);
    CHECK_HAS(err.buf, "not followed");

    ipd_buf_reset(&err);
    snprintf(url, sizeof(url), "http://127.0.0.1:%d/nope", s.port);
    CHECK_INT(ipd_fetch_post(&o, url, NULL, NULL, 0, NULL, &status, &err),
              IPD_ERR_UPSTREAM);
    CHECK_INT(status, 404);
    CHECK_STR(err.buf, "the URL answered 404");

    /* Header injection and refused targets: no connection at all. */
    const char *evil[] = {"X-A: 1\r\nX-Injected: 2", NULL};
    snprintf(url, sizeof(url), "http://127.0.0.1:%d/hook", s.port);
    CHECK_INT(ipd_fetch_post(&o, url, "application/json", body, strlen(body),
                             evil, &status, &err),
              IPD_ERR_INVALID);
    ipd_buf_reset(&err);
    o.allow = NULL;
    CHECK_INT(ipd_fetch_post(&o, url, "application/json", body, strlen(body),
                             NULL, &status, &err),
              IPD_ERR_FORBIDDEN);
    CHECK_HAS(err.buf, "is not allowed (loopback)");
    CHECK_INT(status, 0);
    CHECK_INT(ipd_fetch_post(&o, "gopher://127.0.0.1/", NULL, NULL, 0, NULL,
                             &status, &err),
              IPD_ERR_INVALID);
    srv_stop(&s);
    CHECK_INT(s.conns, 2);
    ipd_fetch_allowlist_free(allow);
    ipd_buf_release(&err);
}

/* Runs first: IPD_FAIL_FETCH_AT is read at the first fetch. */
static void injected_failure(void)
{
    struct fx f;
    setenv("IPD_FAIL_FETCH_AT", "1", 1);
    fx_init(&f, "127.0.0.1/32");
    CHECK_INT(fx_get(&f, "http://127.0.0.1:1/"), IPD_ERR_UNAVAILABLE);
    CHECK_STR(f.err.buf, "could not fetch: injected failure");
    CHECK_INT(f.rec.discards, 1);
    CHECK_INT(fx_get(&f, "gopher://x/"), IPD_ERR_INVALID); /* the 2nd */
    fx_release(&f);
    unsetenv("IPD_FAIL_FETCH_AT");
}

static void global_init_is_idempotent(void)
{
    CHECK_INT(ipd_fetch_global_init(), IPD_OK);
    CHECK_INT(ipd_fetch_global_init(), IPD_OK);
}

/* ipd_fetch_url_check: refusals that need no DNS; the same verdict as a
 * POST to the same URL gives (which resolves), for literals and
 * localhost; names that need DNS pass and are left to the fetch. */
static void url_check_on_its_face(void)
{
    struct ipd_fetch_opts o;
    struct ipd_fetch_allowlist *allow = NULL;
    struct ipd_buf err;
    static const struct {
        const char *url;
        enum ipd_err want;
        const char *msg;
    } cases[] = {
        {"http://10.1.2.3/hook", IPD_ERR_FORBIDDEN, "not allowed (private)"},
        {"http://127.0.0.1:9/hook", IPD_ERR_FORBIDDEN,
         "address 127.0.0.1 of host 127.0.0.1 is not allowed (loopback)"},
        {"http://[::1]/hook", IPD_ERR_FORBIDDEN, "not allowed (loopback)"},
        {"https://169.254.169.254/latest", IPD_ERR_FORBIDDEN, "link-local"},
        {"http://[::ffff:10.0.0.1]/", IPD_ERR_FORBIDDEN, "private"},
        /* Other spellings of IPv4 are normalised by the URL parser. */
        {"http://127.1/", IPD_ERR_FORBIDDEN, "loopback"},
        {"http://2130706433/", IPD_ERR_FORBIDDEN, "loopback"},
        {"http://0x7f.0.0.1/", IPD_ERR_FORBIDDEN, "loopback"},
        {"http://localhost/hook", IPD_ERR_FORBIDDEN,
         "of host localhost is not allowed (loopback)"},
        {"http://LocalHost./hook", IPD_ERR_FORBIDDEN, "loopback"},
        {"http://api.localhost:8080/hook", IPD_ERR_FORBIDDEN, "loopback"},
        {"file:///etc/passwd", IPD_ERR_INVALID, "only http and https"},
        {"gopher://example.com/", IPD_ERR_INVALID, "only http and https"},
        {"not a url", IPD_ERR_INVALID, ""},
        {"http://[fe80::1%25eth0]/", IPD_ERR_INVALID, "zone ids"},
        {"http://exa mple.com/", IPD_ERR_INVALID, ""},
        {"https://93.184.216.34/hook", IPD_OK, ""},
        {"https://example.com/hook", IPD_OK, ""},
        {"http://notlocalhost/hook", IPD_OK, ""},
        {"http://localhost.example.com/hook", IPD_OK, ""},
    };
    ipd_buf_init(&err, 1024);
    ipd_fetch_opts_init(&o);
    for (size_t i = 0; i < IPD_ARRAY_LEN(cases); i++) {
        ipd_buf_reset(&err);
        enum ipd_err rc = ipd_fetch_url_check(&o, cases[i].url, &err);
        if (rc != cases[i].want || !strstr(err.buf, cases[i].msg))
            fprintf(stderr, "%s: %s (%s)\n", cases[i].url, ipd_err_name(rc),
                    err.buf);
        CHECK_INT(rc, cases[i].want);
        CHECK_HAS(err.buf, cases[i].msg);
    }
    /* What a fetch of the same URL says (no connection is made). */
    int status = -1;
    ipd_buf_reset(&err);
    CHECK_INT(ipd_fetch_post(&o, "http://localhost:9/hook", NULL, NULL, 0, NULL,
                             &status, &err),
              IPD_ERR_FORBIDDEN);
    CHECK_HAS(err.buf, "not allowed (loopback)");

    /* The allowlist counts: localhost needs both loopback addresses. */
    IPD_ASSERT(
        ipd_fetch_allowlist_parse("127.0.0.1, 10.0.0.0/8", &allow, NULL) == 0);
    o.allow = allow;
    CHECK_INT(ipd_fetch_url_check(&o, "http://127.0.0.1:9/", &err), IPD_OK);
    CHECK_INT(ipd_fetch_url_check(&o, "http://10.1.2.3/", &err), IPD_OK);
    ipd_buf_reset(&err);
    CHECK_INT(ipd_fetch_url_check(&o, "http://localhost/", &err),
              IPD_ERR_FORBIDDEN);
    CHECK_HAS(err.buf, "address ::1 of host localhost");
    ipd_fetch_allowlist_free(allow);
    IPD_ASSERT(ipd_fetch_allowlist_parse("127.0.0.1, ::1", &allow, NULL) == 0);
    o.allow = allow;
    CHECK_INT(ipd_fetch_url_check(&o, "http://localhost/", &err), IPD_OK);
    CHECK_INT(ipd_fetch_url_check(NULL, "http://localhost/", &err),
              IPD_ERR_FORBIDDEN);
    ipd_fetch_allowlist_free(allow);
    ipd_buf_release(&err);
}

/* The checks of host_addresses_refused, in the child; the number of
 * failed ones. */
static int host_addresses_child(void)
{
    int before = test__failed_checks;
    struct srv v4, v6, lo;
    struct fx f;
    struct ipd_buf err;
    int status = -1;

    if (test_netns_with_host_addresses())
        return 1;
    if (!srv_start(&v4, TEST_HOST_V4) || !srv_start(&v6, TEST_HOST_V6) ||
        !srv_start(&lo, "127.0.0.1")) {
        perror("listening on the host's addresses");
        return 1;
    }
    snprintf(lo.redirect_to, sizeof(lo.redirect_to),
             "http://[" TEST_HOST_V6 "]:%d/hello.txt", v6.port);
    fx_init(&f, "127.0.0.1");
    ipd_buf_init(&err, 1024);

    /* URL ingest: the first URL, written in each family, and a hop. */
    CHECK_INT(fx_get(&f, "http://" TEST_HOST_V4 ":%d/hello.txt", v4.port),
              IPD_ERR_FORBIDDEN);
    CHECK_STR(f.err.buf, "address " TEST_HOST_V4 " of host " TEST_HOST_V4
                         " is not allowed (an address of this host)");
    CHECK_INT(
        fx_get(&f, "http://[::ffff:" TEST_HOST_V4 "]:%d/hello.txt", v4.port),
        IPD_ERR_FORBIDDEN);
    CHECK_HAS(f.err.buf, "is not allowed (an address of this host)");
    CHECK_INT(fx_get(&f, "http://[" TEST_HOST_V6 "]:%d/hello.txt", v6.port),
              IPD_ERR_FORBIDDEN);
    CHECK_STR(f.err.buf, "address " TEST_HOST_V6 " of host [" TEST_HOST_V6
                         "] is not allowed (an address of this host)");
    CHECK_INT(fx_get(&f, "http://127.0.0.1:%d/away", lo.port),
              IPD_ERR_FORBIDDEN);
    CHECK_STR(f.err.buf, "address " TEST_HOST_V6 " of host [" TEST_HOST_V6
                         "] is not allowed (an address of this host)");
    CHECK_INT(f.rec.got.len, 0);

    /* A callback_url on its face (the handler's 400), in each family. */
    static const char *const faces[] = {"http://" TEST_HOST_V4 ":9/hook",
                                        "http://[::ffff:" TEST_HOST_V4 "]/",
                                        "https://[" TEST_HOST_V6 "]/hook"};
    for (size_t i = 0; i < IPD_ARRAY_LEN(faces); i++) {
        ipd_buf_reset(&err);
        CHECKF(ipd_fetch_url_check(&f.o, faces[i], &err) == IPD_ERR_FORBIDDEN &&
                   strstr(err.buf, "(an address of this host)"),
               "%s: %s", faces[i], err.buf);
    }
    ipd_buf_reset(&err);

    /* Callbacks: the same refusal, before any connection. */
    snprintf(f.url, sizeof(f.url), "http://" TEST_HOST_V4 ":%d/hook", v4.port);
    CHECK_INT(ipd_fetch_post(&f.o, f.url, "application/json", "{}", 2, NULL,
                             &status, &err),
              IPD_ERR_FORBIDDEN);
    CHECK_HAS(err.buf, "(an address of this host)");
    ipd_buf_reset(&err);
    snprintf(f.url, sizeof(f.url), "http://[" TEST_HOST_V6 "]:%d/hook",
             v6.port);
    CHECK_INT(ipd_fetch_post(&f.o, f.url, "application/json", "{}", 2, NULL,
                             &status, &err),
              IPD_ERR_FORBIDDEN);
    CHECK_HAS(err.buf, "(an address of this host)");
    fx_release(&f);

    /* The control: allowlisted, both are reached (so the refusals above
     * were the guard's, not a dead address). */
    fx_init(&f, TEST_HOST_V4 ", " TEST_HOST_V6);
    CHECK_INT(fx_get(&f, "http://" TEST_HOST_V4 ":%d/hello.txt", v4.port),
              IPD_OK);
    CHECK_STR(f.rec.got.buf, "hello world");
    CHECKF(fx_get(&f, "http://[" TEST_HOST_V6 "]:%d/hello.txt", v6.port) ==
               IPD_OK,
           "%s", f.err.buf);
    CHECK_STR(f.rec.got.buf, "hello world");
    fx_release(&f);
    ipd_buf_release(&err);
    srv_stop(&v4);
    srv_stop(&v6);
    srv_stop(&lo);
    CHECK_INT(v4.conns, 1); /* the controls' only */
    CHECK_INT(v6.conns, 1);
    return test__failed_checks - before;
}

/*
 * An address of this host's own interfaces (a public IPv4 or a global
 * IPv6 one, as a VPS has) is refused for URL ingest (every hop) and for
 * callbacks, in either family, unless allowlisted: it reaches the host's
 * own services as loopback does.
 */
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

TEST_MAIN(T(injected_failure), T(global_init_is_idempotent), T(refused_schemes),
          T(plain_fetch), T(localhost_via_etc_hosts), T(redirects),
          T(redirect_to_refused_address), T(mixed_name_refused_whole),
          T(error_status), T(slow_drip_times_out), T(body_over_limit),
          T(connection_failures), T(post_callback), T(url_check_on_its_face),
          T(host_addresses_refused))
