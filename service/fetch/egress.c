/*
 * egress.c - the HTTP proxy on a networked run's egress socket (egress.h):
 * the request parser (pure), then the proxy: one accepting thread, one
 * thread per connection, each polling an eventfd that ipd_egress_stop
 * makes readable, so every wait ends at the stop.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "../common/log.h"
#include "../common/util.h"
#include "egress.h"
#include "fetch_internal.h"

#define DEFAULT_CONNECT_MS 10000
#define DEFAULT_HEAD_MS 10000
#define DEFAULT_IDLE_MS 300000
#define DEFAULT_MAX_CONNS 16
#define RELAY_BUF 16384
#define LOGGED_REFUSALS 8 /* per proxy: a run cannot flood the log */

/* ---- the request parser ------------------------------------------------ */

static enum ipd_err bad(char *why, size_t whysz, const char *msg)
{
    snprintf(why, whysz, "%s", msg);
    return IPD_ERR_INVALID;
}

size_t ipd_egress_head_len(const char *buf, size_t len)
{
    for (size_t i = 0; i < len; i++) {
        if (buf[i] != '\n')
            continue;
        if (i + 1 < len && buf[i + 1] == '\n')
            return i + 2;
        if (i + 2 < len && buf[i + 1] == '\r' && buf[i + 2] == '\n')
            return i + 3;
    }
    return 0;
}

/* The line at *pos (its ending, LF or CRLF, left out); false when no
 * complete line is left. */
static bool next_line(const char *h, size_t len, size_t *pos, const char **line,
                      size_t *llen)
{
    const char *nl;

    if (*pos >= len)
        return false;
    nl = memchr(h + *pos, '\n', len - *pos);
    if (!nl)
        return false;
    *line = h + *pos;
    *llen = (size_t)(nl - *line);
    if (*llen && (*line)[*llen - 1] == '\r')
        (*llen)--;
    *pos = (size_t)(nl - h) + 1;
    return true;
}

static bool parse_port(const char *p, size_t n, char out[8])
{
    unsigned v = 0;

    if (n == 0 || n > 5)
        return false;
    for (size_t i = 0; i < n; i++) {
        if (p[i] < '0' || p[i] > '9')
            return false;
        v = v * 10 + (unsigned)(p[i] - '0');
    }
    if (v == 0 || v > 65535)
        return false;
    snprintf(out, 8, "%u", v);
    return true;
}

/* A bracketed IPv6 literal at a[0..n): host into req, *rest after ']'. */
static enum ipd_err parse_v6(const char *a, size_t n,
                             struct ipd_egress_request *req, const char **rest,
                             char *why, size_t whysz)
{
    const char *rb = memchr(a, ']', n);
    size_t hl = rb ? (size_t)(rb - a) - 1 : 0;
    struct in6_addr v6;

    if (!rb || hl == 0 || hl >= sizeof req->host)
        return bad(why, whysz, "bad IPv6 literal");
    memcpy(req->host, a + 1, hl);
    req->host[hl] = '\0';
    if (inet_pton(AF_INET6, req->host, &v6) != 1)
        return bad(why, whysz, "bad IPv6 literal");
    *rest = rb + 1;
    return IPD_OK;
}

/* host[:port] (a name, IPv4, or [IPv6]) into req; no port: 80, unless
 * need_port (CONNECT). */
static enum ipd_err parse_authority(const char *a, size_t n, bool need_port,
                                    struct ipd_egress_request *req, char *why,
                                    size_t whysz)
{
    const char *rest, *end = a + n;

    if (n && a[0] == '[') {
        enum ipd_err rc = parse_v6(a, n, req, &rest, why, whysz);
        if (rc)
            return rc;
        if (rest < end && *rest != ':')
            return bad(why, whysz, "bad authority");
    } else {
        const char *colon = memchr(a, ':', n);
        size_t hl = colon ? (size_t)(colon - a) : n;
        if (hl == 0 || hl > 253)
            return bad(why, whysz, "bad host");
        for (size_t i = 0; i < hl; i++) {
            unsigned char c = (unsigned char)a[i];
            if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') ||
                  (c >= 'A' && c <= 'Z') || c == '.' || c == '-' || c == '_'))
                return bad(why, whysz, "bad host");
        }
        memcpy(req->host, a, hl);
        req->host[hl] = '\0';
        rest = a + hl;
    }
    if (rest < end) {
        if (!parse_port(rest + 1, (size_t)(end - rest - 1), req->port))
            return bad(why, whysz, "bad port");
    } else if (need_port) {
        return bad(why, whysz, "CONNECT needs host:port");
    } else {
        snprintf(req->port, sizeof req->port, "80");
    }
    return IPD_OK;
}

static bool prefix_ci(const char *s, size_t n, const char *p)
{
    size_t pl = strlen(p);
    return n >= pl && strncasecmp(s, p, pl) == 0;
}

/* An absolute http:// target: the authority into req, the origin-form
 * request line into req->out. */
static enum ipd_err parse_absolute(const char *m, size_t ml, const char *t,
                                   size_t tl, const char *ver,
                                   struct ipd_egress_request *req, char *why,
                                   size_t whysz)
{
    size_t al = 0;
    enum ipd_err rc;

    if (prefix_ci(t, tl, "https://"))
        return bad(why, whysz, "https:// goes through CONNECT");
    if (!prefix_ci(t, tl, "http://"))
        return bad(why, whysz,
                   tl && t[0] == '/' ? "not a proxy request (origin form)"
                                     : "only http:// URLs and CONNECT");
    t += 7;
    tl -= 7;
    while (al < tl && t[al] != '/' && t[al] != '?' && t[al] != '#')
        al++;
    if (memchr(t, '@', al))
        return bad(why, whysz, "user info in the URL");
    rc = parse_authority(t, al, false, req, why, whysz);
    if (rc)
        return rc;
    if (memchr(t + al, '#', tl - al))
        return bad(why, whysz, "a fragment in the request target");
    ipd_buf_addf(&req->out, "%.*s %s%.*s %s\r\n", (int)ml, m,
                 al < tl && t[al] == '/' ? "" : "/", (int)(tl - al), t + al,
                 ver);
    return IPD_OK;
}

/* METHOD SP target SP HTTP/1.x */
static enum ipd_err parse_request_line(const char *l, size_t n,
                                       struct ipd_egress_request *req,
                                       char *why, size_t whysz)
{
    const char *sp1 = memchr(l, ' ', n), *sp2, *t, *ver;
    size_t ml, tl;

    if (!sp1)
        return bad(why, whysz, "bad request line");
    sp2 = memchr(sp1 + 1, ' ', n - (size_t)(sp1 + 1 - l));
    if (!sp2)
        return bad(why, whysz, "bad request line");
    ml = (size_t)(sp1 - l);
    t = sp1 + 1;
    tl = (size_t)(sp2 - t);
    ver = sp2 + 1;
    if ((size_t)(l + n - ver) != 8 ||
        (memcmp(ver, "HTTP/1.1", 8) && memcmp(ver, "HTTP/1.0", 8)))
        return bad(why, whysz, "not HTTP/1.0 or HTTP/1.1");
    if (ml == 0 || ml > 20 || tl == 0)
        return bad(why, whysz, "bad request line");
    for (size_t i = 0; i < ml; i++)
        if (!ipd__fetch_is_tchar((unsigned char)l[i]))
            return bad(why, whysz, "bad method");
    for (size_t i = 0; i < tl; i++)
        if ((unsigned char)t[i] <= 0x20 || (unsigned char)t[i] >= 0x7f)
            return bad(why, whysz, "bad request target");
    if (ml == 7 && !memcmp(l, "CONNECT", 7)) {
        req->tunnel = true;
        return parse_authority(t, tl, true, req, why, whysz);
    }
    return parse_absolute(l, ml, t, tl, ver[7] == '1' ? "HTTP/1.1" : "HTTP/1.0",
                          req, why, whysz);
}

/* Headers a proxy must not pass on (hop-by-hop) or must not leak. */
static bool hop_header(const char *name, size_t n)
{
    static const char *const drop[] = {"connection", "proxy-connection",
                                       "keep-alive", "proxy-authorization"};
    for (size_t i = 0; i < IPD_ARRAY_LEN(drop); i++)
        if (strlen(drop[i]) == n && !strncasecmp(name, drop[i], n))
            return true;
    return false;
}

/* One header line: checked; for plain HTTP passed on unless hop-by-hop. */
static enum ipd_err header_line(const char *l, size_t n,
                                struct ipd_egress_request *req, bool *host,
                                char *why, size_t whysz)
{
    const char *colon = memchr(l, ':', n);
    size_t nl = colon ? (size_t)(colon - l) : 0;

    if (l[0] == ' ' || l[0] == '\t')
        return bad(why, whysz, "folded header line");
    if (!colon || nl == 0)
        return bad(why, whysz, "bad header line");
    for (size_t i = 0; i < nl; i++)
        if (!ipd__fetch_is_tchar((unsigned char)l[i]))
            return bad(why, whysz, "bad header name");
    for (size_t i = nl + 1; i < n; i++) {
        unsigned char c = (unsigned char)l[i];
        if ((c < 0x20 && c != '\t') || c == 0x7f)
            return bad(why, whysz, "bad header value");
    }
    if (nl == 4 && !strncasecmp(l, "host", 4))
        *host = true;
    if (!req->tunnel && !hop_header(l, nl))
        ipd_buf_addf(&req->out, "%.*s\r\n", (int)n, l);
    return IPD_OK;
}

enum ipd_err ipd_egress_parse(const char *head, size_t len,
                              struct ipd_egress_request *req, char *why,
                              size_t whysz)
{
    const char *line;
    size_t llen, pos = 0;
    bool host = false, ended = false;
    enum ipd_err rc;

    memset(req, 0, sizeof *req);
    /* Each bare LF of the head becomes CRLF: the head can grow by a
     * third ("a:\n" is 3 bytes, "a:\r\n" 4), plus the added lines. */
    ipd_buf_init(&req->out, 2 * IPD_EGRESS_HEAD_MAX + 512);
    why[0] = '\0';
    if (len > IPD_EGRESS_HEAD_MAX)
        return bad(why, whysz, "request head too large");
    if (!next_line(head, len, &pos, &line, &llen))
        return bad(why, whysz, "incomplete request head");
    rc = parse_request_line(line, llen, req, why, whysz);
    while (!rc && next_line(head, len, &pos, &line, &llen)) {
        if (llen == 0) {
            ended = true;
            break;
        }
        rc = header_line(line, llen, req, &host, why, whysz);
    }
    if (rc)
        return rc;
    if (!ended || pos != len)
        return bad(why, whysz, "incomplete request head");
    if (!req->tunnel && !host)
        ipd_buf_addf(&req->out, "Host: %s%s%s%s%s\r\n",
                     strchr(req->host, ':') ? "[" : "", req->host,
                     strchr(req->host, ':') ? "]" : "",
                     strcmp(req->port, "80") ? ":" : "",
                     strcmp(req->port, "80") ? req->port : "");
    if (!req->tunnel)
        ipd_buf_adds(&req->out, "Connection: close\r\n\r\n");
    return IPD_OK;
}

/* ---- the proxy ------------------------------------------------------------
 */

struct conn {
    struct ipd_egress *eg;
    pthread_t th;
    int client;
    bool used; /* a thread runs or ran here and was not joined yet */
    bool done; /* that thread has finished: join it */
};

struct ipd_egress {
    struct ipd_egress_opts o;
    int listen_fd;
    int stop_fd;                /* eventfd, readable once stopping */
    pthread_t th;               /* the accepting thread */
    pthread_mutex_t mu;         /* conns[].used/done, st but accepted */
    struct conn *conns;         /* o.max_conns of them */
    struct ipd_egress_stats st; /* .accepted: the accepting thread's */
};

static bool stopping(const struct ipd_egress *eg)
{
    struct pollfd p = {eg->stop_fd, POLLIN, 0};
    return poll(&p, 1, 0) > 0;
}

/* Wait until fd is ready for ev, the stop, or deadline (mono ms).
 * true when fd is ready. */
static bool wait_fd(const struct ipd_egress *eg, int fd, short ev,
                    int64_t deadline)
{
    for (;;) {
        struct pollfd p[2] = {{fd, ev, 0}, {eg->stop_fd, POLLIN, 0}};
        int64_t left = deadline - ipd_mono_ms();
        int n;

        if (left <= 0)
            return false;
        n = poll(p, 2, (int)(left > 60000 ? 60000 : left));
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 || p[1].revents)
            return false;
        if (p[0].revents)
            return true;
    }
}

static bool send_all(const struct ipd_egress *eg, int fd, const void *buf,
                     size_t len, int64_t deadline)
{
    const char *p = buf;

    while (len) {
        ssize_t n = send(fd, p, len, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno == EAGAIN) {
            if (!wait_fd(eg, fd, POLLOUT, deadline))
                return false;
            continue;
        }
        if (n <= 0)
            return false;
        p += n;
        len -= (size_t)n;
    }
    return true;
}

static const char *status_text(int status)
{
    switch (status) {
    case 400: return "Bad Request";
    case 403: return "Forbidden";
    case 408: return "Request Timeout";
    case 431: return "Request Header Fields Too Large";
    case 503: return "Service Unavailable";
    case 504: return "Gateway Timeout";
    default: return "Bad Gateway";
    }
}

/* The proxy's own answer; the connection ends after it. */
static void reply(const struct ipd_egress *eg, int fd, int status,
                  const char *why)
{
    char msg[512], head[256];
    int ml = snprintf(msg, sizeof msg, "interpd egress: %s\n", why);
    int hl;

    if (ml < 0 || (size_t)ml >= sizeof msg)
        ml = (int)sizeof msg - 1;
    hl = snprintf(head, sizeof head,
                  "HTTP/1.1 %d %s\r\nContent-Type: text/plain\r\n"
                  "Content-Length: %d\r\nConnection: close\r\n\r\n",
                  status, status_text(status), ml);
    if (send_all(eg, fd, head, (size_t)hl, ipd_mono_ms() + 5000))
        (void)send_all(eg, fd, msg, (size_t)ml, ipd_mono_ms() + 5000);
}

/* A 403 (logged, the first few) or a 502/504, counted. */
static void note_failure(struct ipd_egress *eg, int status, const char *what,
                         const char *why)
{
    pthread_mutex_lock(&eg->mu);
    bool log = status == 403 && eg->st.refused < LOGGED_REFUSALS;
    if (status == 403)
        eg->st.refused++;
    else
        eg->st.failed++;
    snprintf(eg->st.last, sizeof eg->st.last, "%s", why);
    pthread_mutex_unlock(&eg->mu);
    if (log)
        ipd_log(IPD_LOG_INFO, "egress: refused %s: %s", what, why);
}

/* Read the request head into buf (at most IPD_EGRESS_HEAD_MAX bytes).
 * Returns 0 with *have bytes read and the head's length in *hl, -1 when
 * the connection just ends (EOF, an error, the stop), or the status to
 * answer (408, 431). */
static int read_head(const struct ipd_egress *eg, int fd, char *buf,
                     size_t *have, size_t *hl)
{
    int64_t deadline = ipd_mono_ms() + eg->o.head_timeout_ms;

    *have = *hl = 0;
    while (*have < IPD_EGRESS_HEAD_MAX) {
        ssize_t n =
            recv(fd, buf + *have, IPD_EGRESS_HEAD_MAX - *have, MSG_DONTWAIT);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno == EAGAIN) {
            if (wait_fd(eg, fd, POLLIN, deadline))
                continue;
            return stopping(eg) ? -1 : 408;
        }
        if (n <= 0)
            return -1;
        *have += (size_t)n;
        *hl = ipd_egress_head_len(buf, *have);
        if (*hl)
            return 0;
    }
    return 431;
}

/* A non-blocking connect to one checked address, bounded by deadline.
 * The socket, or -1 with errno (ETIMEDOUT at the deadline). */
static int connect_one(const struct ipd_egress *eg, const struct addrinfo *a,
                       int64_t deadline)
{
    int fd =
        socket(a->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    int err = 0;
    socklen_t el = sizeof err;

    if (fd < 0)
        return -1;
    if (connect(fd, a->ai_addr, a->ai_addrlen) == 0)
        return fd;
    if (errno != EINPROGRESS) {
        err = errno;
    } else if (!wait_fd(eg, fd, POLLOUT, deadline)) {
        err = ETIMEDOUT;
    } else if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el) != 0) {
        err = errno;
    }
    if (!err)
        return fd;
    close(fd);
    errno = err;
    return -1;
}

/* A tunnel is raw TCP: to port 443 (HTTPS) only, unless the operator's
 * allowlist names every address (a mirror or an API of theirs on another
 * port); so a run cannot tunnel SMTP, SSH or a database protocol to the
 * internet.  Plain HTTP in absolute form goes to any port: it is HTTP. */
static enum ipd_err tunnel_port_check(const struct ipd_egress *eg,
                                      const struct ipd_egress_request *req,
                                      const struct sockaddr **addrs, size_t n,
                                      struct ipd_buf *why)
{
    if (!strcmp(req->port, "443"))
        return IPD_OK;
    for (size_t i = 0; i < n; i++)
        if (!ipd_fetch_allowlisted(addrs[i], eg->o.allow))
            return ipd_buf_fail(why, IPD_ERR_FORBIDDEN,
                                "a tunnel (CONNECT) to port %s of host %s is "
                                "not allowed: port 443 only, unless "
                                "--fetch-allow names its addresses",
                                req->port, req->host);
    return IPD_OK;
}

/* Resolve req's host, check every address with the guard, connect to one
 * of exactly those.  The origin socket, or -1 with the status to answer
 * in *status and the reason in why. */
static int dial(const struct ipd_egress *eg,
                const struct ipd_egress_request *req, int *status,
                struct ipd_buf *why)
{
    struct addrinfo *ai = NULL;
    const struct sockaddr **addrs = NULL;
    unsigned char lit[sizeof(struct in6_addr)];
    bool literal = inet_pton(AF_INET, req->host, lit) == 1 ||
                   inet_pton(AF_INET6, req->host, lit) == 1;
    int64_t deadline = ipd_mono_ms() + eg->o.connect_timeout_ms;
    size_t n = 0, i = 0;
    int fd = -1, err = 0;
    enum ipd_err rc = ipd__fetch_resolve(req->host, req->port, literal,
                                         eg->o.connect_timeout_ms, &ai, why);

    *status = rc == IPD_ERR_UPSTREAM_TIMEOUT ? 504 : 502;
    if (rc)
        goto out;
    for (const struct addrinfo *p = ai; p; p = p->ai_next)
        n++;
    addrs = ipd_xcalloc(n ? n : 1, sizeof *addrs);
    for (const struct addrinfo *p = ai; p; p = p->ai_next)
        addrs[i++] = p->ai_addr;
    rc = ipd_fetch_addresses_check(req->host, addrs, n, eg->o.allow, why);
    if (!rc && req->tunnel)
        rc = tunnel_port_check(eg, req, addrs, n, why);
    if (rc) {
        *status = rc == IPD_ERR_FORBIDDEN ? 403 : 502;
        goto out;
    }
    /* Only the addresses just checked: no second lookup to rebind. */
    for (const struct addrinfo *p = ai; p && fd < 0 && !stopping(eg);
         p = p->ai_next) {
        fd = connect_one(eg, p, deadline);
        err = fd < 0 ? errno : 0;
    }
    if (fd < 0) {
        *status = err == ETIMEDOUT ? 504 : 502;
        ipd_buf_addf(why, "could not connect to %s port %s: %s", req->host,
                     req->port, strerror(err ? err : ECANCELED));
    }
out:
    free(addrs);
    if (ai)
        freeaddrinfo(ai);
    return fd;
}

/* One direction of a relay. */
struct dir {
    int from, to;
    size_t len, off;
    bool eof, shut;
    char buf[RELAY_BUF];
};

/* One step of d (fd ready): write what is buffered, or read more; at EOF
 * with nothing left, half-close the other side.  false: the relay ends. */
static bool step(struct dir *d)
{
    if (d->len > d->off) {
        ssize_t w = send(d->to, d->buf + d->off, d->len - d->off,
                         MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w < 0)
            return errno == EAGAIN || errno == EINTR;
        d->off += (size_t)w;
        if (d->off == d->len)
            d->off = d->len = 0;
    } else {
        ssize_t r = recv(d->from, d->buf, sizeof d->buf, MSG_DONTWAIT);
        if (r < 0)
            return errno == EAGAIN || errno == EINTR;
        if (r == 0)
            d->eof = true;
        else
            d->len = (size_t)r;
    }
    if (d->eof && d->len == 0 && !d->shut) {
        (void)shutdown(d->to, SHUT_WR);
        d->shut = true;
    }
    return true;
}

/* Bytes both ways until both sides are done, an error, the stop, or
 * idle_timeout_ms without a byte. */
static void relay(const struct ipd_egress *eg, int client, int origin)
{
    struct dir *d = ipd_xcalloc(2, sizeof *d);
    int64_t idle_until = ipd_mono_ms() + eg->o.idle_timeout_ms;

    d[0].from = d[1].to = client;
    d[0].to = d[1].from = origin;
    while (!(d[0].shut && d[1].shut)) {
        struct pollfd p[3] = {{eg->stop_fd, POLLIN, 0}};
        int idx[2] = {-1, -1}, n = 1, r;
        int64_t left = idle_until - ipd_mono_ms();

        for (int k = 0; k < 2; k++) {
            if (d[k].len > d[k].off)
                p[idx[k] = n++] = (struct pollfd){d[k].to, POLLOUT, 0};
            else if (!d[k].eof)
                p[idx[k] = n++] = (struct pollfd){d[k].from, POLLIN, 0};
        }
        if (left <= 0)
            break;
        r = poll(p, (nfds_t)n, (int)(left > 60000 ? 60000 : left));
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0 || p[0].revents)
            break;
        bool ok = true;
        for (int k = 0; k < 2 && ok; k++) {
            if (idx[k] < 0 || !p[idx[k]].revents)
                continue;
            ok = step(&d[k]);
            idle_until = ipd_mono_ms() + eg->o.idle_timeout_ms;
        }
        if (!ok)
            break;
    }
    free(d);
}

/* One connection of the run, start to end. */
static void serve(struct ipd_egress *eg, int client)
{
    static const char established[] =
        "HTTP/1.1 200 Connection established\r\n\r\n";
    char *head = ipd_xcalloc(1, IPD_EGRESS_HEAD_MAX);
    char why[128], what[300];
    struct ipd_egress_request req;
    struct ipd_buf err;
    size_t have, hl;
    int status = read_head(eg, client, head, &have, &hl), origin = -1;
    int64_t deadline = ipd_mono_ms() + eg->o.head_timeout_ms;

    ipd_buf_init(&err, 400);
    memset(&req, 0, sizeof req);
    ipd_buf_init(&req.out, 0);
    if (status) {
        if (status > 0)
            reply(eg, client, status,
                  status == 408 ? "no request in time"
                                : "request head too large");
        goto out;
    }
    if (ipd_egress_parse(head, hl, &req, why, sizeof why)) {
        reply(eg, client, 400, why);
        goto out;
    }
    snprintf(what, sizeof what, "%s %s port %s",
             req.tunnel ? "CONNECT" : "http", req.host, req.port);
    origin = dial(eg, &req, &status, &err);
    if (origin < 0) {
        note_failure(eg, status, what, err.buf);
        reply(eg, client, status, err.buf);
        goto out;
    }
    if (req.tunnel ? !send_all(eg, client, established, sizeof established - 1,
                               deadline)
                   : !send_all(eg, origin, req.out.buf, req.out.len, deadline))
        goto out;
    /* Bytes the client sent after the head (a pipelined body, TLS). */
    if (have > hl && !send_all(eg, origin, head + hl, have - hl, deadline))
        goto out;
    relay(eg, client, origin);
out:
    if (origin >= 0)
        close(origin);
    ipd_buf_release(&req.out);
    ipd_buf_release(&err);
    free(head);
}

static void *conn_main(void *arg)
{
    struct conn *c = arg;

    serve(c->eg, c->client);
    close(c->client);
    pthread_mutex_lock(&c->eg->mu);
    c->done = true;
    pthread_mutex_unlock(&c->eg->mu);
    return NULL;
}

/* Join the connection threads that finished (all: wait for every one).
 * Only the accepting thread calls it. */
static void reap(struct ipd_egress *eg, bool all)
{
    for (unsigned i = 0; i < eg->o.max_conns; i++) {
        struct conn *c = &eg->conns[i];
        pthread_mutex_lock(&eg->mu);
        bool join = c->used && (all || c->done);
        pthread_mutex_unlock(&eg->mu);
        if (!join)
            continue;
        pthread_join(c->th, NULL);
        c->used = c->done = false;
    }
}

/* A thread for the accepted fd, or 503 when the run has max_conns. */
static void conn_start(struct ipd_egress *eg, int fd)
{
    struct conn *c = NULL;

    reap(eg, false);
    for (unsigned i = 0; i < eg->o.max_conns && !c; i++)
        if (!eg->conns[i].used)
            c = &eg->conns[i];
    if (c) {
        c->eg = eg;
        c->client = fd;
        c->done = false;
        c->used = pthread_create(&c->th, NULL, conn_main, c) == 0;
        if (c->used)
            return;
    }
    reply(eg, fd, 503, "too many connections at once");
    close(fd);
}

static void *accept_main(void *arg)
{
    struct ipd_egress *eg = arg;

    for (;;) {
        struct pollfd p[2] = {{eg->listen_fd, POLLIN, 0},
                              {eg->stop_fd, POLLIN, 0}};
        int n = poll(p, 2, -1), fd;

        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 || p[1].revents || (p[0].revents & POLLNVAL))
            break;
        fd = accept4(eg->listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS ||
                errno == ENOMEM)
                (void)wait_fd(eg, eg->stop_fd, POLLIN, ipd_mono_ms() + 100);
            continue; /* EAGAIN, ECONNABORTED, EINTR: the next one */
        }
        eg->st.accepted++;
        conn_start(eg, fd);
    }
    reap(eg, true);
    return NULL;
}

static void egress_free(struct ipd_egress *eg)
{
    if (eg->listen_fd >= 0)
        close(eg->listen_fd);
    if (eg->stop_fd >= 0)
        close(eg->stop_fd);
    pthread_mutex_destroy(&eg->mu);
    free(eg->conns);
    free(eg);
}

enum ipd_err ipd_egress_start(const struct ipd_egress_opts *opts, int listen_fd,
                              struct ipd_egress **out)
{
    struct ipd_egress *eg = ipd_xcalloc(1, sizeof *eg);

    eg->o = *opts;
    if (eg->o.connect_timeout_ms <= 0)
        eg->o.connect_timeout_ms = DEFAULT_CONNECT_MS;
    if (eg->o.head_timeout_ms <= 0)
        eg->o.head_timeout_ms = DEFAULT_HEAD_MS;
    if (eg->o.idle_timeout_ms <= 0)
        eg->o.idle_timeout_ms = DEFAULT_IDLE_MS;
    if (!eg->o.max_conns)
        eg->o.max_conns = DEFAULT_MAX_CONNS;
    eg->listen_fd = listen_fd;
    eg->conns = ipd_xcalloc(eg->o.max_conns, sizeof *eg->conns);
    pthread_mutex_init(&eg->mu, NULL);
    eg->stop_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    *out = NULL;
    int err = eg->stop_fd < 0 ? errno
                              : pthread_create(&eg->th, NULL, accept_main, eg);
    if (err) {
        ipd_log(IPD_LOG_WARN, "egress: no proxy for the run: %s",
                strerror(err));
        egress_free(eg);
        return IPD_ERR_INTERNAL;
    }
    *out = eg;
    return IPD_OK;
}

void ipd_egress_stop(struct ipd_egress *eg, struct ipd_egress_stats *st)
{
    uint64_t one = 1;

    if (st)
        memset(st, 0, sizeof *st);
    if (!eg)
        return;
    /* Cannot fail on an eventfd at 0 (only an overflow could). */
    ssize_t w = write(eg->stop_fd, &one, sizeof one);
    IPD_ASSERT(w == (ssize_t)sizeof one);
    pthread_join(eg->th, NULL);
    if (st)
        *st = eg->st;
    egress_free(eg);
}
