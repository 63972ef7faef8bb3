/*
 * fetch_curl.c - fetch.h on libcurl: outbound GET/POST behind the SSRF
 * guard (whose verdicts are guard.c's), with hosts resolved by
 * resolve.c's bounded resolver; the suggested filename is parsed in
 * filename.c.  Only what needs libcurl is here, and no other file sees
 * its types.
 *
 * One hop is one easy handle: parse the URL (CURLU), resolve its host
 * (ipd__fetch_resolve), check every address, hand curl the checked
 * addresses with CURLOPT_RESOLVE so it never resolves by itself, and
 * check again in the open-socket callback that what curl connects to is
 * one of them.
 * Redirects are followed here, hop by hop, never by curl.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include <curl/curl.h>

#include "fetch.h"
#include "../common/util.h"
#include "fetch_internal.h"

#ifndef IPD_VERSION
#define IPD_VERSION "0"
#endif

/* ---- process-wide state ----------------------------------------------- */

static pthread_once_t global_once = PTHREAD_ONCE_INIT;
static CURLcode global_rc = CURLE_FAILED_INIT;

static void global_init_once(void)
{
    global_rc = curl_global_init(CURL_GLOBAL_DEFAULT);
}

enum ipd_err ipd_fetch_global_init(void)
{
    pthread_once(&global_once, global_init_once);
    return global_rc == CURLE_OK ? IPD_OK : IPD_ERR_INTERNAL;
}

/* IPD_FAIL_FETCH_AT=N: the Nth fetch fails (see fetch.h). */
static bool injected_failure(void)
{
    static atomic_long count;
    static atomic_long fail_at = -2; /* -2: not read yet */
    long at = atomic_load(&fail_at);
    if (at == -2) {
        const char *s = getenv("IPD_FAIL_FETCH_AT");
        at = s ? strtol(s, NULL, 10) : -1;
        atomic_store(&fail_at, at);
    }
    return at > 0 && atomic_fetch_add(&count, 1) + 1 == at;
}

#define fail ipd_buf_fail /* append why to err, return the code */

void ipd_fetch_opts_init(struct ipd_fetch_opts *o)
{
    memset(o, 0, sizeof(*o));
    o->connect_timeout_ms = IPD_FETCH_CONNECT_TIMEOUT_MS;
    o->total_timeout_ms = IPD_FETCH_TOTAL_TIMEOUT_MS;
    o->max_redirects = IPD_FETCH_MAX_REDIRECTS;
    o->max_bytes = IPD_FETCH_MAX_BYTES;
}

void ipd_fetch_result_init(struct ipd_fetch_result *r)
{
    memset(r, 0, sizeof(*r));
}

void ipd_fetch_result_release(struct ipd_fetch_result *r)
{
    free(r->url);
    free(r->content_type);
    free(r->filename);
    ipd_fetch_result_init(r);
}

/* ---- one hop ---------------------------------------------------------- */

enum abort_reason {
    ABORT_NONE,
    ABORT_STATUS,    /* we have the status and need no body */
    ABORT_TOO_LARGE, /* over max_bytes */
    ABORT_SINK,      /* the sink said no */
};

struct hop {
    CURL *h;                     /* owned */
    char *host;                  /* owned (curl_free): as curl uses it */
    char *port;                  /* owned (curl_free) */
    struct sockaddr_storage *ok; /* owned: the checked, pinned addresses */
    size_t n_ok;
    bool literal; /* the host is an IP address */
    const struct ipd_fetch_allowlist *allow;
    const struct ipd_fetch_sink *sink; /* NULL: the body is dropped */
    int64_t max_bytes;
    int64_t bytes; /* accepted so far */
    bool checked;  /* status looked at (first body chunk) */
    int status;
    enum abort_reason abort;
    enum ipd_err sink_rc;
    char refused[256]; /* set when on_socket refused */
    char errbuf[CURL_ERROR_SIZE];
    struct curl_slist *headers; /* borrowed: a GET's extra headers */
};

static void hop_release(struct hop *x)
{
    curl_easy_cleanup(x->h);
    curl_free(x->host);
    curl_free(x->port);
    free(x->ok);
    memset(x, 0, sizeof(*x));
}

static bool is_2xx(int status)
{
    return status >= 200 && status <= 299;
}

static size_t on_body(char *data, size_t size, size_t nmemb, void *ud)
{
    struct hop *x = ud;
    size_t len = size * nmemb;
    if (!x->checked) {
        long code = 0;
        curl_off_t cl = -1;
        curl_easy_getinfo(x->h, CURLINFO_RESPONSE_CODE, &code);
        curl_easy_getinfo(x->h, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &cl);
        x->status = (int)code;
        x->checked = true;
        /* A redirect's or an error's body is never needed, and a POST's
         * answer is read only for its status: stop here. */
        if (!is_2xx(x->status) || !x->sink) {
            x->abort = ABORT_STATUS;
            return CURL_WRITEFUNC_ERROR;
        }
        if (cl > x->max_bytes) {
            x->abort = ABORT_TOO_LARGE;
            return CURL_WRITEFUNC_ERROR;
        }
    }
    /* Enforced while receiving: Content-Length may be absent or a lie. */
    if (len > (uint64_t)(x->max_bytes - x->bytes)) {
        x->abort = ABORT_TOO_LARGE;
        return CURL_WRITEFUNC_ERROR;
    }
    if (len) {
        enum ipd_err rc = x->sink->write(x->sink->ctx, data, len);
        if (rc) {
            x->abort = ABORT_SINK;
            x->sink_rc = rc;
            return CURL_WRITEFUNC_ERROR;
        }
    }
    x->bytes += (int64_t)len;
    return len;
}

static bool same_addr(const struct sockaddr_storage *a,
                      const struct sockaddr_storage *b)
{
    if (a->ss_family != b->ss_family)
        return false;
    if (a->ss_family == AF_INET) {
        const struct sockaddr_in *x = (const void *)a, *y = (const void *)b;
        return x->sin_port == y->sin_port &&
               x->sin_addr.s_addr == y->sin_addr.s_addr;
    }
    if (a->ss_family == AF_INET6) {
        const struct sockaddr_in6 *x = (const void *)a, *y = (const void *)b;
        return x->sin6_port == y->sin6_port &&
               !memcmp(&x->sin6_addr, &y->sin6_addr, 16);
    }
    return false;
}

/*
 * Curl is about to connect: the address must be one this hop resolved and
 * checked.  CURLOPT_RESOLVE already pins them; this is the backstop for
 * any path where curl would resolve by itself (the DNS rebinding attack).
 */
static curl_socket_t on_socket(void *ud, curlsocktype purpose,
                               struct curl_sockaddr *a)
{
    struct hop *x = ud;
    struct sockaddr_storage ss;
    char why[IPD__FETCH_WHY_MAX], s[INET6_ADDRSTRLEN];
    bool pinned = false;

    if (purpose != CURLSOCKTYPE_IPCXN || a->addrlen > sizeof(ss) ||
        (a->family != AF_INET && a->family != AF_INET6)) {
        snprintf(x->refused, sizeof(x->refused),
                 "a connection of an unexpected kind was refused");
        return CURL_SOCKET_BAD;
    }
    memset(&ss, 0, sizeof(ss));
    memcpy(&ss, &a->addr, a->addrlen);
    for (size_t i = 0; i < x->n_ok && !pinned; i++)
        pinned = same_addr(&ss, &x->ok[i]);
    ipd__fetch_addr_str((const struct sockaddr *)&ss, s, sizeof(s));
    if (!pinned) {
        snprintf(x->refused, sizeof(x->refused),
                 "address %s of host %s was not the checked one", s, x->host);
        return CURL_SOCKET_BAD;
    }
    if (!ipd_fetch_address_allowed((const struct sockaddr *)&ss, x->allow, why,
                                   sizeof(why))) {
        snprintf(x->refused, sizeof(x->refused),
                 "address %s of host %s is not allowed (%s)", s, x->host, why);
        return CURL_SOCKET_BAD;
    }
    int fd = socket(a->family, a->socktype | SOCK_CLOEXEC, a->protocol);
    return fd < 0 ? CURL_SOCKET_BAD : fd;
}

/*
 * Parse url (relative to base when base is not NULL: a Location) into a
 * new CURLU in *out; only http and https pass.
 */
static enum ipd_err url_parse(CURLU *base, const char *url, CURLU **out,
                              struct ipd_buf *err)
{
    CURLU *u = base ? curl_url_dup(base) : curl_url();
    char *scheme = NULL;
    const char *what = base ? "the redirect location" : "the URL";
    enum ipd_err rc = IPD_OK;
    CURLUcode uc;

    *out = NULL;
    if (!u) {
        rc = fail(err, IPD_ERR_NOMEM, "could not fetch: out of memory");
        goto out;
    }
    if (strlen(url) > IPD_FETCH_URL_MAX) {
        rc = fail(err, IPD_ERR_INVALID, "%s is longer than %d bytes", what,
                  IPD_FETCH_URL_MAX);
        goto out;
    }
    uc = curl_url_set(u, CURLUPART_URL, url, 0);
    if (uc == CURLUE_OUT_OF_MEMORY) {
        rc = fail(err, IPD_ERR_NOMEM, "could not fetch: out of memory");
        goto out;
    }
    if (uc == CURLUE_UNSUPPORTED_SCHEME) {
        rc = fail(err, IPD_ERR_INVALID,
                  "only http and https URLs can be fetched (%s has another "
                  "scheme)",
                  what);
        goto out;
    }
    if (uc) {
        rc = fail(err, IPD_ERR_INVALID, "%s is malformed (%s)", what,
                  curl_url_strerror(uc));
        goto out;
    }
    uc = curl_url_get(u, CURLUPART_SCHEME, &scheme, 0);
    if (uc || (strcmp(scheme, "http") != 0 && strcmp(scheme, "https") != 0)) {
        rc = fail(err, IPD_ERR_INVALID,
                  "only http and https URLs can be fetched (%s is %s:)", what,
                  scheme ? scheme : "?");
        goto out;
    }
    *out = u;
    u = NULL;
out:
    curl_free(scheme);
    curl_url_cleanup(u);
    return rc;
}

static bool host_chars_ok(const char *h)
{
    if (!*h)
        return false;
    for (const char *p = h; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
              (*p >= '0' && *p <= '9') || *p == '-' || *p == '.' || *p == '_'))
            return false;
    return true;
}

/* The host of a parsed URL as curl will use it, checked. */
struct url_host {
    char *host;       /* owned (curl_free): "[::1]" for IPv6, punycode */
    char *port;       /* owned (curl_free); the scheme's default if none */
    const char *name; /* what getaddrinfo gets: host or v6 */
    char v6[INET6_ADDRSTRLEN + 2]; /* an IPv6 literal without brackets */
    bool literal;                  /* an IP address, not a name */
};

static void url_host_release(struct url_host *h)
{
    curl_free(h->host);
    curl_free(h->port);
    memset(h, 0, sizeof(*h));
}

/* u's host and port into *h (released by the caller, also on failure):
 * an IPv4 or bracketed IPv6 literal (no zone id), or a name of
 * letters, digits, '-', '.' and '_'.  curl has already normalised the
 * other IPv4 spellings ("127.1", "0x7f.1", "2130706433") to dotted
 * quads. */
static enum ipd_err url_host_get(CURLU *u, struct url_host *h,
                                 struct ipd_buf *err)
{
    char *zone = NULL;
    enum ipd_err rc = IPD_OK;
    struct in_addr a4;
    CURLUcode uc;

    memset(h, 0, sizeof(*h));
    uc = curl_url_get(u, CURLUPART_HOST, &h->host, CURLU_PUNYCODE);
    if (!uc)
        uc = curl_url_get(u, CURLUPART_PORT, &h->port, CURLU_DEFAULT_PORT);
    if (uc) {
        rc = fail(err, IPD_ERR_INVALID, "the URL's host is not usable (%s)",
                  curl_url_strerror(uc));
        goto out;
    }
    if (curl_url_get(u, CURLUPART_ZONEID, &zone, 0) == CURLUE_OK) {
        rc = fail(err, IPD_ERR_INVALID, "IPv6 zone ids are not allowed");
        goto out;
    }
    h->name = h->host;
    if (h->host[0] == '[') {
        /* CURLU gives IPv6 literals in brackets; getaddrinfo wants none. */
        size_t len = strlen(h->host);
        if (len < 3 || len - 2 >= sizeof(h->v6) || h->host[len - 1] != ']') {
            rc = fail(err, IPD_ERR_INVALID, "the URL's host is malformed");
            goto out;
        }
        memcpy(h->v6, h->host + 1, len - 2);
        h->v6[len - 2] = 0;
        h->name = h->v6;
        h->literal = true;
    } else if (inet_pton(AF_INET, h->host, &a4) == 1) {
        h->literal = true;
    } else if (!host_chars_ok(h->host)) {
        rc = fail(err, IPD_ERR_INVALID, "the URL's host is malformed");
    }
out:
    curl_free(zone);
    return rc;
}

/* Resolve the URL's host and check every address; pin the good ones. */
static enum ipd_err hop_guard(struct hop *x, CURLU *u, int64_t timeout_ms,
                              struct ipd_buf *err)
{
    struct url_host h;
    struct addrinfo *ai = NULL;
    const struct sockaddr **list = NULL;
    enum ipd_err rc;
    size_t n = 0;

    rc = url_host_get(u, &h, err);
    if (rc)
        goto out;
    x->host = h.host;
    x->port = h.port;
    x->literal = h.literal;
    h.host = h.port = NULL; /* x's now */
    rc = ipd__fetch_resolve(h.name, x->port, h.literal, timeout_ms, &ai, err);
    if (rc)
        goto out;
    for (const struct addrinfo *p = ai; p; p = p->ai_next)
        if (p->ai_family == AF_INET || p->ai_family == AF_INET6)
            n++;
    list = ipd_xcalloc(n ? n : 1, sizeof(*list));
    x->ok = ipd_xcalloc(n ? n : 1, sizeof(*x->ok));
    for (const struct addrinfo *p = ai; p; p = p->ai_next) {
        if ((p->ai_family != AF_INET && p->ai_family != AF_INET6) ||
            p->ai_addrlen > sizeof(*x->ok))
            continue;
        memcpy(&x->ok[x->n_ok], p->ai_addr, p->ai_addrlen);
        list[x->n_ok] = (const struct sockaddr *)&x->ok[x->n_ok];
        x->n_ok++;
    }
    rc = ipd_fetch_addresses_check(x->host, list, x->n_ok, x->allow, err);
out:
    url_host_release(&h);
    if (ai)
        freeaddrinfo(ai);
    free(list);
    return rc;
}

/* "localhost" or a name under it, with or without the final dot: loopback
 * by definition (RFC 6761 6.3), whatever DNS says. */
static bool is_localhost_name(const char *host)
{
    size_t n = strlen(host);
    if (n && host[n - 1] == '.')
        n--;
    if (n < 9 || strncasecmp(host + n - 9, "localhost", 9) != 0)
        return false;
    return n == 9 || host[n - 10] == '.';
}

enum ipd_err ipd_fetch_url_check(const struct ipd_fetch_opts *opts,
                                 const char *url, struct ipd_buf *err)
{
    /* A loopback name stands for both loopback addresses. */
    static const char *const loopback[] = {"127.0.0.1", "::1"};
    struct url_host h = {0};
    struct addrinfo *ai[2] = {NULL, NULL};
    const struct sockaddr *list[2];
    size_t n = 0;
    CURLU *u = NULL;
    enum ipd_err rc = IPD_OK;

    if (ipd_fetch_global_init())
        rc = fail(err, IPD_ERR_INTERNAL, "libcurl did not initialise");
    if (!rc)
        rc = url_parse(NULL, url, &u, err);
    if (!rc)
        rc = url_host_get(u, &h, err);
    if (rc)
        goto out;
    if (h.literal) {
        rc = ipd__fetch_resolve(h.name, h.port, true, 0, &ai[0], err);
    } else if (is_localhost_name(h.host)) {
        for (size_t i = 0; i < 2 && !rc; i++)
            rc = ipd__fetch_resolve(loopback[i], h.port, true, 0, &ai[i], err);
    } else {
        goto out; /* a name: resolved and checked when it is used */
    }
    for (size_t i = 0; i < 2 && !rc; i++)
        if (ai[i])
            list[n++] = ai[i]->ai_addr;
    if (!rc)
        rc = ipd_fetch_addresses_check(h.host, list, n,
                                       opts ? opts->allow : NULL, err);
out:
    for (size_t i = 0; i < 2; i++)
        if (ai[i])
            freeaddrinfo(ai[i]);
    url_host_release(&h);
    curl_url_cleanup(u);
    return rc;
}

/* "host:port:addr,[addr6],..." for CURLOPT_RESOLVE. */
static struct curl_slist *resolve_list(const struct hop *x, bool *oom)
{
    struct ipd_buf b, name;
    struct curl_slist *list = NULL, *t;
    char s[INET6_ADDRSTRLEN];
    size_t hlen = strlen(x->host);

    *oom = false;
    ipd_buf_init(&b, IPD_BUF_UNLIMITED);
    ipd_buf_init(&name, IPD_BUF_UNLIMITED);
    for (size_t i = 0; i < x->n_ok; i++) {
        ipd__fetch_addr_str((const struct sockaddr *)&x->ok[i], s, sizeof(s));
        ipd_buf_addf(&b, x->ok[i].ss_family == AF_INET6 ? "%s[%s]" : "%s%s",
                     i ? "," : "", s);
    }
    /* Curl may look the name up with or without a trailing dot: pin both. */
    for (int pass = 0; pass < 2; pass++) {
        size_t len = pass ? hlen - 1 : hlen;
        if (pass && (hlen < 2 || x->host[hlen - 1] != '.'))
            break;
        ipd_buf_reset(&name);
        ipd_buf_addf(&name, "%.*s:%s:%s", (int)len, x->host, x->port, b.buf);
        t = curl_slist_append(list, name.buf);
        if (!t) {
            *oom = true;
            break;
        }
        list = t;
    }
    ipd_buf_release(&b);
    ipd_buf_release(&name);
    return list;
}

struct post {
    const void *body;
    size_t len;
    struct curl_slist *headers; /* borrowed */
};

#define SET(opt, val)                                                          \
    do {                                                                       \
        if (cc == CURLE_OK)                                                    \
            cc = curl_easy_setopt(x->h, opt, val);                             \
    } while (0)

static enum ipd_err hop_setup(struct hop *x, CURLU *u,
                              const struct ipd_fetch_opts *o, int64_t remaining,
                              const struct post *post,
                              struct curl_slist *resolve_entries)
{
    CURLcode cc = CURLE_OK;
    int64_t connect_ms =
        o->connect_timeout_ms < remaining ? o->connect_timeout_ms : remaining;
    x->h = curl_easy_init();
    if (!x->h)
        return IPD_ERR_INTERNAL;
    SET(CURLOPT_CURLU, u);
    SET(CURLOPT_PROTOCOLS_STR, "http,https");
    SET(CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
    SET(CURLOPT_FOLLOWLOCATION, 0L);
    SET(CURLOPT_MAXREDIRS, 0L);
    /* No proxy: *_proxy variables must not route us around the guard. */
    SET(CURLOPT_PROXY, "");
    SET(CURLOPT_NOPROXY, "*");
    SET(CURLOPT_NOSIGNAL, 1L);
    SET(CURLOPT_CONNECTTIMEOUT_MS, (long)connect_ms);
    SET(CURLOPT_TIMEOUT_MS, (long)remaining);
    SET(CURLOPT_USERAGENT,
        o->user_agent ? o->user_agent : "interpd/" IPD_VERSION);
    SET(CURLOPT_ERRORBUFFER, x->errbuf);
    SET(CURLOPT_WRITEFUNCTION, on_body);
    SET(CURLOPT_WRITEDATA, x);
    SET(CURLOPT_OPENSOCKETFUNCTION, on_socket);
    SET(CURLOPT_OPENSOCKETDATA, x);
    if (resolve_entries)
        SET(CURLOPT_RESOLVE, resolve_entries);
    if (post) {
        SET(CURLOPT_POST, 1L);
        SET(CURLOPT_POSTFIELDS, post->len ? post->body : "");
        SET(CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)post->len);
        SET(CURLOPT_HTTPHEADER, post->headers);
    } else if (x->headers) {
        SET(CURLOPT_HTTPHEADER, x->headers);
    }
    if (cc == CURLE_OUT_OF_MEMORY)
        return IPD_ERR_NOMEM;
    return cc == CURLE_OK ? IPD_OK : IPD_ERR_INTERNAL;
}

#undef SET

/* Why curl failed, in words for the client. */
static enum ipd_err map_curl(struct hop *x, CURLcode cc, int64_t total_ms,
                             struct ipd_buf *err)
{
    long os = 0;
    curl_off_t connected = 0;
    curl_easy_getinfo(x->h, CURLINFO_OS_ERRNO, &os);
    curl_easy_getinfo(x->h, CURLINFO_CONNECT_TIME_T, &connected);
    const char *detail = x->errbuf[0] ? x->errbuf : curl_easy_strerror(cc);

    switch (cc) {
    case CURLE_OPERATION_TIMEDOUT:
        if (!connected)
            return fail(err, IPD_ERR_UPSTREAM_TIMEOUT,
                        "could not fetch: connecting timed out");
        return fail(err, IPD_ERR_UPSTREAM_TIMEOUT,
                    "could not fetch: timed out (limit %lld ms)",
                    (long long)total_ms);
    case CURLE_COULDNT_CONNECT:
        if (x->refused[0])
            return fail(err, IPD_ERR_FORBIDDEN, "%s", x->refused);
        if (os == ECONNREFUSED)
            return fail(err, IPD_ERR_UPSTREAM,
                        "could not fetch: connection refused");
        if (os == ENETUNREACH || os == EHOSTUNREACH)
            return fail(err, IPD_ERR_UPSTREAM,
                        "could not fetch: host unreachable");
        return fail(err, IPD_ERR_UPSTREAM, "could not fetch: %s", detail);
    case CURLE_RECV_ERROR:
    case CURLE_SEND_ERROR:
        if (os == ECONNRESET || os == EPIPE)
            return fail(err, IPD_ERR_UPSTREAM,
                        "could not fetch: connection reset");
        return fail(err, IPD_ERR_UPSTREAM, "could not fetch: %s", detail);
    case CURLE_PARTIAL_FILE:
        return fail(err, IPD_ERR_UPSTREAM,
                    "could not fetch: the connection closed before the "
                    "whole body arrived");
    case CURLE_GOT_NOTHING:
        return fail(err, IPD_ERR_UPSTREAM,
                    "could not fetch: the server sent no reply");
    case CURLE_OUT_OF_MEMORY:
        return fail(err, IPD_ERR_NOMEM, "could not fetch: out of memory");
    case CURLE_COULDNT_RESOLVE_HOST:
        return fail(err, IPD_ERR_UPSTREAM,
                    "could not fetch: could not resolve host %s", x->host);
    case CURLE_UNSUPPORTED_PROTOCOL:
    case CURLE_URL_MALFORMAT:
        return fail(err, IPD_ERR_INVALID, "could not fetch: %s", detail);
    default: break;
    }
    if (cc == CURLE_SSL_CONNECT_ERROR || cc == CURLE_PEER_FAILED_VERIFICATION ||
        cc == CURLE_SSL_CERTPROBLEM || cc == CURLE_SSL_CIPHER ||
        cc == CURLE_SSL_CACERT_BADFILE || cc == CURLE_SSL_ISSUER_ERROR ||
        cc == CURLE_SSL_ENGINE_INITFAILED)
        return fail(err, IPD_ERR_UPSTREAM, "could not fetch: TLS: %s", detail);
    return fail(err, IPD_ERR_UPSTREAM, "could not fetch: %s", detail);
}

/*
 * Run one request to u: guard, pin, perform.  On IPD_OK x->status is the
 * answer's status and x->h stays open for headers; the caller releases x.
 */
static enum ipd_err hop_run(struct hop *x, CURLU *u,
                            const struct ipd_fetch_opts *o, int64_t deadline,
                            const struct ipd_fetch_sink *sink,
                            const struct post *post, struct ipd_buf *err)
{
    struct curl_slist *entries = NULL;
    enum ipd_err rc;
    bool oom = false;
    long code = 0;
    int64_t remaining = deadline - ipd_mono_ms();

    x->allow = o->allow;
    x->sink = sink;
    x->max_bytes = o->max_bytes;
    if (remaining <= 0) {
        rc = fail(err, IPD_ERR_UPSTREAM_TIMEOUT,
                  "could not fetch: timed out (limit "
                  "%lld ms)",
                  (long long)o->total_timeout_ms);
        goto out;
    }
    rc = hop_guard(x, u,
                   o->connect_timeout_ms < remaining ? o->connect_timeout_ms
                                                     : remaining,
                   err);
    if (rc)
        goto out;
    /* Curl never resolves an address literal: nothing to pin. */
    if (!x->literal)
        entries = resolve_list(x, &oom);
    if (oom) {
        rc = fail(err, IPD_ERR_NOMEM, "could not fetch: out of memory");
        goto out;
    }
    remaining = deadline - ipd_mono_ms();
    if (remaining <= 0) {
        rc = fail(err, IPD_ERR_UPSTREAM_TIMEOUT,
                  "could not fetch: timed out (limit "
                  "%lld ms)",
                  (long long)o->total_timeout_ms);
        goto out;
    }
    rc = hop_setup(x, u, o, remaining, post, entries);
    if (rc) {
        fail(err, rc, "could not fetch: libcurl could not be set up");
        goto out;
    }
    CURLcode cc = curl_easy_perform(x->h);
    curl_easy_getinfo(x->h, CURLINFO_RESPONSE_CODE, &code);
    x->status = (int)code;
    if (x->abort == ABORT_TOO_LARGE) {
        rc = fail(err, IPD_ERR_TOO_LARGE,
                  "the body is larger than the limit of %lld bytes",
                  (long long)o->max_bytes);
    } else if (x->abort == ABORT_SINK) {
        rc = fail(err, x->sink_rc, "could not store the body (%s)",
                  ipd_err_name(x->sink_rc));
    } else if (x->abort == ABORT_STATUS) {
        rc = IPD_OK; /* cut short on purpose; the status is all we need */
    } else if (cc) {
        rc = map_curl(x, cc, o->total_timeout_ms, err);
    }
out:
    curl_slist_free_all(entries);
    return rc;
}

static enum ipd_err fetch_start(const struct ipd_fetch_opts *o,
                                struct ipd_buf *err)
{
    if (ipd_fetch_global_init())
        return fail(err, IPD_ERR_INTERNAL,
                    "could not fetch: libcurl did not initialise");
    if (o->connect_timeout_ms <= 0 || o->total_timeout_ms <= 0 ||
        o->max_redirects < 0 || o->max_bytes < 0)
        return fail(err, IPD_ERR_INVALID, "fetch options out of range");
    if (injected_failure())
        return fail(err, IPD_ERR_UNAVAILABLE,
                    "could not fetch: injected failure");
    return IPD_OK;
}

static bool is_redirect(int status)
{
    return status == 301 || status == 302 || status == 303 || status == 307 ||
           status == 308;
}

static const char *header(CURL *h, const char *name)
{
    struct curl_header *hh = NULL;
    if (curl_easy_header(h, name, 0, CURLH_HEADER, -1, &hh) != CURLHE_OK)
        return NULL;
    return hh->value;
}

static void set_str(char **dst, const char *s)
{
    free(*dst);
    *dst = s ? ipd_xstrdup(s) : NULL;
}

/* The final answer's name for the body: Content-Disposition, else the
 * URL's last path segment. */
static char *suggested_name(CURL *h, CURLU *u)
{
    char name[IPD__FETCH_FILENAME_MAX + 1], *path = NULL, *r = NULL;
    const char *cd = header(h, "Content-Disposition");
    if (cd &&
        ipd_content_disposition_filename(cd, name, sizeof(name)) == IPD_OK)
        return ipd_xstrdup(name);
    if (curl_url_get(u, CURLUPART_PATH, &path, 0) == CURLUE_OK)
        r = ipd__fetch_path_filename(path);
    curl_free(path);
    return r;
}

static bool header_ok(const char *h);

enum ipd_err ipd_fetch_get(const struct ipd_fetch_opts *opts, const char *url,
                           const struct ipd_fetch_sink *sink,
                           struct ipd_fetch_result *res, struct ipd_buf *err)
{
    struct ipd_fetch_opts defaults;
    struct hop x;
    CURLU *u = NULL, *next = NULL;
    char *s = NULL;
    struct curl_slist *headers = NULL;
    enum ipd_err rc;

    memset(&x, 0, sizeof(x));
    if (!opts) {
        ipd_fetch_opts_init(&defaults);
        opts = &defaults;
    }
    int64_t deadline = ipd_mono_ms() + opts->total_timeout_ms;
    rc = fetch_start(opts, err);
    for (size_t i = 0; !rc && opts->headers && opts->headers[i]; i++) {
        if (!header_ok(opts->headers[i])) {
            rc = fail(err, IPD_ERR_INVALID, "bad request header");
            break;
        }
        struct curl_slist *t = curl_slist_append(headers, opts->headers[i]);
        if (!t)
            rc = fail(err, IPD_ERR_NOMEM, "could not fetch: out of memory");
        else
            headers = t;
    }
    if (!rc)
        rc = url_parse(NULL, url, &u, err);
    while (!rc) {
        if (curl_url_get(u, CURLUPART_URL, &s, 0) == CURLUE_OK)
            set_str(&res->url, s);
        curl_free(s);
        s = NULL;
        hop_release(&x);
        x.headers = headers;
        rc = hop_run(&x, u, opts, deadline, sink, NULL, err);
        res->status = x.status;
        res->bytes = x.bytes;
        if (rc)
            break;
        const char *location = header(x.h, "Location");
        if (is_redirect(x.status) && location) {
            if (res->redirects >= opts->max_redirects) {
                rc = fail(err, IPD_ERR_UPSTREAM,
                          "too many redirects (limit %d)", opts->max_redirects);
                break;
            }
            rc = url_parse(u, location, &next, err);
            hop_release(&x); /* it uses u: release it first */
            curl_url_cleanup(u);
            u = next;
            next = NULL;
            res->redirects++;
            continue;
        }
        if (!is_2xx(x.status)) {
            rc = fail(err, IPD_ERR_UPSTREAM, "the URL answered %d", x.status);
            break;
        }
        const char *type = NULL;
        curl_easy_getinfo(x.h, CURLINFO_CONTENT_TYPE, &type);
        set_str(&res->content_type, type);
        free(res->filename);
        res->filename = suggested_name(x.h, u);
        break;
    }
    if (rc && sink && sink->discard)
        sink->discard(sink->ctx);
    hop_release(&x);
    curl_url_cleanup(u);
    curl_slist_free_all(headers);
    return rc;
}

static bool header_ok(const char *h)
{
    const char *colon = strchr(h, ':');
    if (!colon || colon == h || strpbrk(h, "\r\n"))
        return false;
    for (const char *p = h; p < colon; p++)
        if (!ipd__fetch_is_tchar((unsigned char)*p))
            return false;
    return true;
}

enum ipd_err ipd_fetch_post(const struct ipd_fetch_opts *opts, const char *url,
                            const char *content_type, const void *body,
                            size_t len, const char *const *extra_headers,
                            int *status, struct ipd_buf *err)
{
    struct ipd_fetch_opts defaults;
    struct hop x;
    struct post post = {body, len, NULL};
    struct ipd_buf line;
    CURLU *u = NULL;
    enum ipd_err rc;

    memset(&x, 0, sizeof(x));
    ipd_buf_init(&line, IPD_BUF_UNLIMITED);
    if (status)
        *status = 0;
    if (!opts) {
        ipd_fetch_opts_init(&defaults);
        opts = &defaults;
    }
    int64_t deadline = ipd_mono_ms() + opts->total_timeout_ms;
    rc = fetch_start(opts, err);
    if (rc)
        goto out;
    if (!content_type)
        content_type = "application/octet-stream";
    ipd_buf_addf(&line, "Content-Type: %s", content_type);
    const char *fixed[] = {line.buf, "Expect:", NULL};
    for (int pass = 0; pass < 2; pass++) {
        const char *const *list = pass ? extra_headers : fixed;
        for (size_t i = 0; list && list[i]; i++) {
            if (!header_ok(list[i])) {
                rc = fail(err, IPD_ERR_INVALID,
                          "bad request header for the callback");
                goto out;
            }
            struct curl_slist *t = curl_slist_append(post.headers, list[i]);
            if (!t) {
                rc = fail(err, IPD_ERR_NOMEM, "could not fetch: out of memory");
                goto out;
            }
            post.headers = t;
        }
    }
    rc = url_parse(NULL, url, &u, err);
    if (rc)
        goto out;
    rc = hop_run(&x, u, opts, deadline, NULL, &post, err);
    if (status)
        *status = x.status;
    if (rc)
        goto out;
    if (is_redirect(x.status))
        rc = fail(err, IPD_ERR_UPSTREAM,
                  "the URL answered %d, a redirect, which is not followed "
                  "for a POST",
                  x.status);
    else if (!is_2xx(x.status))
        rc = fail(err, IPD_ERR_UPSTREAM, "the URL answered %d", x.status);
out:
    hop_release(&x);
    curl_slist_free_all(post.headers);
    curl_url_cleanup(u);
    ipd_buf_release(&line);
    return rc;
}
