/*
 * fuzz_request.c - the whole request path: each input is the raw bytes of
 * one or more HTTP requests, sent over a real socket to the real daemon
 * (libmicrohttpd, router, auth, handlers) running in this process on
 * SQLite + local blobs + libmagic in a temporary data dir.  Executions,
 * packages and URL ingest have no backend here (their handlers answer
 * 503; GET /v1/executions checks its limit and cursor, then answers an
 * empty page; an answer to a call, POST /v1/executions/{id}/calls/
 * {call_id}, checks its body, then finds no execution: 404); the metrics
 * registry and CORS are on.
 *
 * Placeholders let inputs reach the authenticated handlers: @KEY@ (a
 * normal key), @ADMIN@ (an admin key), @TOKEN@ (a scoped token of the
 * normal key for u1, every scope), @FILE@ (an existing file of user
 * u1), @LEN@ (the length of what follows the first blank line, for a
 * Content-Length that matches).
 *
 * Invariants, checked on the first response (and on pipelined ones while
 * they can be told apart): the server answers within a bound and closes
 * after our end-of-input; a response starts "HTTP/1.1 NNN "; no 500 and no
 * 5xx besides 503 unavailable and 507 quota_exceeded (nothing is injected
 * here, so anything else is a bug); every JSON error body parses (valid
 * UTF-8) with error.code matching the status, a message and the
 * request_id of X-Request-Id; a first request whose target hides a NUL
 * (raw, or "%00") never gets a 2xx or 3xx; and every 64 inputs /healthz
 * still answers 200.  A broken invariant prints the exchange and aborts.
 *
 * Executions answer 503 here before their body is read, so the body of
 * every input (what follows the first blank line) also goes, when it is
 * JSON, straight to the execution request parser (service/exec/request.h)
 * with the configured policies: a job within the bounds, for the
 * principal, with file ids that are ids; or a refusal with one of the
 * parser's contract codes and a message.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include "api/http.h"
#include "scheduler/sweep.h"
#include "service/common/log.h"
#include "service/common/metrics.h"
#include "service/common/util.h"
#include "service/exec/request.h"
#include "service/keys.h"
#include "service/tokens.h"
#include "api/mcp.h"
#include "service/serve.h"

#define REPLY_MAX (8 << 20) /* the OpenAPI document is the largest */
#define IO_TIMEOUT_MS 5000  /* the daemon answers well within this */
#define HEALTH_EVERY 64
#define SWEEP_EVERY 4096

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

struct fuzz_env {
    struct ipd_config cfg;
    struct ipd_stores stores;
    struct ipd_app app;
    struct ipd_daemon *d;
    uint16_t port;
    char dir[64];
    char key[IPD_KEY_PLAIN_MAX];
    char admin[IPD_KEY_PLAIN_MAX];
    char token[IPD_TOKEN_MAX]; /* of key, for u1, every scope */
    char file_id[IPD_ID_MAX];
    unsigned long runs;
};

static struct fuzz_env *env;

/* What is being checked, for the failure report. */
static const char *cur_req;
static size_t cur_req_len;

IPD_PRINTF(3, 4)
static _Noreturn void fail(const char *reply, size_t reply_len, const char *fmt,
                           ...)
{
    va_list ap;
    fprintf(stderr, "\n==== fuzz_request: invariant broken: ");
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\n---- request (%zu bytes):\n", cur_req_len);
    if (cur_req)
        fwrite(cur_req, 1, cur_req_len < 4096 ? cur_req_len : 4096, stderr);
    fprintf(stderr, "\n---- reply (%zu bytes):\n", reply_len);
    if (reply)
        fwrite(reply, 1, reply_len < 4096 ? reply_len : 4096, stderr);
    fprintf(stderr, "\n====\n");
    abort();
}

/* ---- one exchange over a socket -------------------------------------- */

static int connect_daemon(void)
{
    struct sockaddr_in sa = {.sin_family = AF_INET,
                             .sin_port = htons(env->port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0)
        fail(NULL, 0, "socket: %s", strerror(errno));
    if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) && errno != EINPROGRESS)
        fail(NULL, 0, "connect: %s", strerror(errno));
    return fd;
}

/* Send req (then end our side) and read until the server closes, both
 * at once so neither side can block the other.  False when the server
 * neither answered nor closed within IO_TIMEOUT_MS. */
static bool exchange(const char *req, size_t len, struct ipd_buf *out)
{
    int fd = connect_daemon();
    size_t sent = 0;
    bool shut = false, done = false;
    int64_t deadline = ipd_mono_ms() + IO_TIMEOUT_MS;
    char chunk[65536];

    while (!done && ipd_mono_ms() < deadline) {
        if (sent == len && !shut) {
            shutdown(fd, SHUT_WR);
            shut = true;
        }
        struct pollfd p = {fd, (short)(POLLIN | (shut ? 0 : POLLOUT)), 0};
        if (poll(&p, 1, (int)(deadline - ipd_mono_ms())) <= 0)
            continue;
        if (!shut && (p.revents & (POLLOUT | POLLERR | POLLHUP))) {
            ssize_t k = send(fd, req + sent, len - sent, MSG_NOSIGNAL);
            if (k > 0)
                sent += (size_t)k;
            else if (k < 0 && errno != EAGAIN && errno != EINTR)
                sent = len; /* the server closed early: read its answer */
        }
        if (p.revents & (POLLIN | POLLERR | POLLHUP)) {
            ssize_t k = recv(fd, chunk, sizeof(chunk), 0);
            if (k > 0 && ipd_buf_add(out, chunk, (size_t)k))
                fail(out->buf, out->len, "reply over %d bytes", REPLY_MAX);
            /* 0: closed; a reset after an early reply ends it too. */
            if (k == 0 || (k < 0 && errno != EAGAIN && errno != EINTR))
                done = true;
        }
    }
    close(fd);
    return done;
}

/* ---- checking a reply ------------------------------------------------ */

struct reply {
    unsigned status;
    const char *head; /* the header block, from the status line */
    size_t head_len;
    const char *body;
    size_t body_len;
    size_t total;  /* bytes up to the next response */
    bool bodiless; /* the answer to HEAD: headers only */
};

/* A header's value in a header block (not NUL-terminated; *n its length). */
static const char *header(const struct reply *rp, const char *name, size_t *n)
{
    size_t nl = strlen(name);
    const char *p = rp->head, *end = rp->head + rp->head_len;
    while ((p = memmem(p, (size_t)(end - p), "\r\n", 2)) && p + 2 < end) {
        p += 2;
        if ((size_t)(end - p) > nl && !strncasecmp(p, name, nl) &&
            p[nl] == ':') {
            const char *v = p + nl + 1,
                       *e = memmem(v, (size_t)(end - v), "\r\n", 2);
            while (v < end && *v == ' ')
                v++;
            *n = e ? (size_t)(e - v) : (size_t)(end - v);
            return v;
        }
    }
    return NULL;
}

static bool header_is(const struct reply *rp, const char *name,
                      const char *want)
{
    size_t n = 0;
    const char *v = header(rp, name, &n);
    return v && n == strlen(want) && !strncasecmp(v, want, n);
}

/* Parse one response at p.  bodiless: the answer to HEAD.  False when it
 * is not a complete HTTP/1.1 response (why says how). */
static bool parse_reply(const char *p, size_t n, bool bodiless,
                        struct reply *rp, const char **why)
{
    memset(rp, 0, sizeof(*rp));
    rp->bodiless = bodiless;
    *why = "no \"HTTP/1.1 NNN \" status line";
    if (n < 13 || memcmp(p, "HTTP/1.1 ", 9) || p[9] < '1' || p[9] > '5' ||
        p[10] < '0' || p[10] > '9' || p[11] < '0' || p[11] > '9' ||
        p[12] != ' ')
        return false;
    rp->status =
        (unsigned)((p[9] - '0') * 100 + (p[10] - '0') * 10 + (p[11] - '0'));
    const char *eoh = memmem(p, n, "\r\n\r\n", 4);
    *why = "the header block does not end";
    if (!eoh)
        return false;
    rp->head = p;
    rp->head_len = (size_t)(eoh - p) + 2;
    rp->body = eoh + 4;
    size_t avail = n - (size_t)(rp->body - p), cl_n = 0;
    const char *cl = header(rp, "Content-Length", &cl_n);
    if (bodiless || rp->status < 200 || rp->status == 204 ||
        rp->status == 304) {
        rp->body_len = 0;
    } else if (header_is(rp, "Transfer-Encoding", "chunked")) {
        rp->body_len = avail; /* streamed: taken as the rest */
    } else if (cl) {
        char num[24];
        snprintf(num, sizeof(num), "%.*s", (int)(cl_n < 23 ? cl_n : 23), cl);
        rp->body_len = (size_t)strtoull(num, NULL, 10);
        *why = "the body is shorter than its Content-Length";
        if (rp->body_len > avail)
            return false;
    } else {
        rp->body_len = avail; /* ends at close */
    }
    rp->total = (size_t)(rp->body - p) + rp->body_len;
    return true;
}

/* The contract's error codes by status (CONTRACT.md). */
static bool code_fits(unsigned status, const char *code)
{
    static const struct {
        unsigned status;
        const char *code;
    } t[] = {{400, "invalid_request"},
             {400, "invalid_json"},
             {400, "invalid_user_id"},
             {401, "unauthorized"},
             {403, "forbidden"},
             {404, "not_found"},
             {405, "method_not_allowed"},
             {409, "conflict"},
             {409, "session_busy"},
             {410, "session_expired"},
             {410, "call_expired"},
             {413, "payload_too_large"},
             {415, "unsupported_media_type"},
             {429, "too_many_requests"},
             {503, "unavailable"},
             {507, "quota_exceeded"}};
    for (size_t i = 0; i < IPD_ARRAY_LEN(t); i++)
        if (t[i].status == status && !strcmp(t[i].code, code))
            return true;
    return false;
}

/* A JSON error body: {"error":{"code","message","request_id"}}, valid
 * UTF-8 (jansson refuses anything else), matching status and header. */
static void check_error_body(const struct reply *rp, const char *all,
                             size_t all_len)
{
    json_error_t jerr;
    json_t *doc = json_loadb(rp->body, rp->body_len, 0, &jerr);
    if (!doc)
        fail(all, all_len, "error body is not JSON/UTF-8: %s", jerr.text);
    const char *code = NULL, *msg = NULL, *rid = NULL;
    if (json_unpack(doc, "{s:{s:s, s:s, s:s}}", "error", "code", &code,
                    "message", &msg, "request_id", &rid))
        fail(all, all_len, "error body without code/message/request_id");
    if (!code_fits(rp->status, code))
        fail(all, all_len, "status %u with code %s", rp->status, code);
    if (!*msg)
        fail(all, all_len, "empty error message");
    size_t n = 0;
    const char *h = header(rp, "X-Request-Id", &n);
    if (!h || n != strlen(rid) || memcmp(h, rid, n))
        fail(all, all_len, "request_id %s differs from X-Request-Id", rid);
    json_decref(doc);
}

/* libmicrohttpd's own refusals (a bad request line or Content-Length,
 * headers too large, HTTP/2.0) never reach our code; they are the only
 * responses without our X-Request-Id.  Their bodies are its business
 * (0.9.75 even sends the header block twice for "Content-Length: -1"). */
static void check_mhd_reply(const struct reply *rp, const char *all,
                            size_t all_len)
{
    static const unsigned ok[] = {400, 413, 414, 417, 431, 501, 505};
    for (size_t i = 0; i < IPD_ARRAY_LEN(ok); i++)
        if (rp->status == ok[i])
            return;
    fail(all, all_len, "a %u without X-Request-Id", rp->status);
}

static void check_reply(const struct reply *rp, const char *all, size_t all_len)
{
    size_t n = 0;
    if (rp->status < 200)
        return; /* 100 Continue, then the answer */
    if (!header(rp, "X-Request-Id", &n)) {
        check_mhd_reply(rp, all, all_len);
        return;
    }
    bool json = header_is(rp, "Content-Type", "application/json");
    if (rp->status == 500)
        fail(all, all_len, "500 (nothing is injected here: a bug)");
    if (rp->status >= 500 && rp->status != 503 && rp->status != 507)
        fail(all, all_len, "unexpected %u", rp->status);
    if (rp->status >= 400 && !json)
        fail(all, all_len, "a %u without a JSON error body", rp->status);
    if (rp->bodiless)
        return;
    if (rp->status >= 400)
        check_error_body(rp, all, all_len);
    /* A success in JSON is a document, except a download whose file
     * happens to be JSON (it has a Content-Disposition). */
    if (rp->status < 300 && json && rp->body_len &&
        !header(rp, "Content-Disposition", &n)) {
        json_t *doc = json_loadb(rp->body, rp->body_len, JSON_DECODE_ANY, NULL);
        if (!doc)
            fail(all, all_len, "a %u JSON body that does not parse",
                 rp->status);
        json_decref(doc);
    }
}

/* Issue 20 item 5: does the first request line's target hide a NUL (a
 * raw one anywhere, or "%00" in its path)?  Such a request addresses
 * nothing and may never succeed: libmicrohttpd's decoded path is a C
 * string, and "<id>%00" once reached <id>.  (A query key or value with
 * "%00" is another key, or refused by the route that reads it.) */
static bool target_hides_nul(const char *req, size_t len)
{
    const char *sp = memchr(req, ' ', len);
    const char *end = req + len;
    bool query = false;
    for (const char *p = sp ? sp + 1 : end; p < end; p++) {
        if (*p == '\r' || *p == '\n')
            break;
        query = query || *p == '?';
        if (*p == '\0' || (!query && end - p >= 3 && !memcmp(p, "%00", 3)))
            return true;
    }
    return false;
}

/* Check every response we can delimit: the first must be there unless
 * the server closed without answering (a request it could not parse at
 * all, or one cut short by our end-of-input).  Which pipelined request a
 * later answer is for is not known here: after a HEAD anywhere past the
 * first request, only the next answer's head is checked. */
static void check_replies(const char *req, size_t req_len,
                          const struct ipd_buf *out)
{
    size_t off = 0;
    bool bodiless = req_len >= 5 && !memcmp(req, "HEAD ", 5);
    bool head_later = req_len > 5 && memmem(req + 1, req_len - 1, "HEAD ", 5);
    bool nul_target = target_hides_nul(req, req_len), final_seen = false;
    for (int i = 0; off < out->len; i++) {
        struct reply rp;
        const char *why;
        bool last = i > 0 && head_later;
        if (!parse_reply(out->buf + off, out->len - off, bodiless || last, &rp,
                         &why)) {
            if (i == 0)
                fail(out->buf, out->len, "first reply: %s", why);
            return; /* a later answer cut short by a close */
        }
        check_reply(&rp, out->buf, out->len);
        if (!final_seen && rp.status >= 200) {
            final_seen = true;
            if (nul_target && rp.status < 400)
                fail(out->buf, out->len, "a %u for a target that hides a NUL",
                     rp.status);
        }
        if (last || header_is(&rp, "Connection", "close"))
            return; /* anything after it is not an answer */
        off += rp.total;
        bodiless = bodiless && rp.status < 200;
    }
}

/* ---- placeholders ------------------------------------------------------ */

static void expand(const uint8_t *data, size_t size, struct ipd_buf *req)
{
    static const char *const names[] = {"@KEY@", "@ADMIN@", "@TOKEN@", "@FILE@",
                                        "@LEN@"};
    const char *vals[] = {env->key, env->admin, env->token, env->file_id, NULL};
    const char *p = (const char *)data, *end = p + size;
    size_t len_at = SIZE_MAX;
    while (p < end) {
        size_t i = IPD_ARRAY_LEN(names);
        if (*p == '@')
            for (i = 0; i < IPD_ARRAY_LEN(names); i++)
                if ((size_t)(end - p) >= strlen(names[i]) &&
                    !memcmp(p, names[i], strlen(names[i])))
                    break;
        if (i == IPD_ARRAY_LEN(names)) {
            ipd_buf_add(req, p++, 1);
        } else if (vals[i]) {
            ipd_buf_adds(req, vals[i]);
            p += strlen(names[i]);
        } else {
            if (len_at == SIZE_MAX)
                len_at = req->len; /* the first @LEN@ only */
            p += strlen(names[i]);
        }
    }
    if (len_at == SIZE_MAX)
        return;
    const char *eoh = memmem(req->buf, req->len, "\r\n\r\n", 4);
    size_t body = eoh ? req->len - (size_t)(eoh + 4 - req->buf) : 0;
    char num[24];
    int n = snprintf(num, sizeof(num), "%zu", body);
    struct ipd_buf tmp;
    ipd_buf_init(&tmp, IPD_BUF_UNLIMITED);
    ipd_buf_add(&tmp, req->buf, len_at);
    ipd_buf_add(&tmp, num, (size_t)n);
    ipd_buf_add(&tmp, req->buf + len_at, req->len - len_at);
    ipd_buf_release(req);
    *req = tmp;
}

/* ---- the service --------------------------------------------------------- */

/* One request the harness itself makes; the reply's first response. */
static unsigned ask(const char *req, json_t **json)
{
    struct ipd_buf out;
    struct reply rp;
    const char *why;
    ipd_buf_init(&out, REPLY_MAX);
    cur_req = req;
    cur_req_len = strlen(req);
    if (!exchange(req, strlen(req), &out))
        fail(out.buf, out.len, "no answer within %d ms", IO_TIMEOUT_MS);
    if (!parse_reply(out.buf, out.len, false, &rp, &why))
        fail(out.buf, out.len, "%s", why);
    check_reply(&rp, out.buf, out.len);
    if (json)
        *json = json_loadb(rp.body, rp.body_len, 0, NULL);
    ipd_buf_release(&out);
    return rp.status;
}

/* The file @FILE@ names: uploaded again whenever an input deleted it (or
 * it expired). */
static void ensure_file(void)
{
    char req[512];
    if (env->file_id[0]) {
        snprintf(req, sizeof(req),
                 "GET /v1/files/%s HTTP/1.1\r\nHost: f\r\nAuthorization: "
                 "Bearer %s\r\nX-User-Id: u1\r\n\r\n",
                 env->file_id, env->key);
        if (ask(req, NULL) == 200)
            return;
    }
    snprintf(req, sizeof(req),
             "POST /v1/files?filename=seed.csv HTTP/1.1\r\nHost: f\r\n"
             "Authorization: Bearer %s\r\nX-User-Id: u1\r\n"
             "Content-Type: text/csv\r\nContent-Length: 8\r\n\r\na,b\n1,2\n",
             env->key);
    json_t *doc = NULL;
    const char *id = NULL;
    if (ask(req, &doc) != 201 || json_unpack(doc, "{s:s}", "file_id", &id))
        fail(NULL, 0, "the harness could not upload its file");
    snprintf(env->file_id, sizeof(env->file_id), "%s", id);
    json_decref(doc);
}

static void health_check(void)
{
    json_t *doc = NULL;
    const char *st = NULL;
    if (ask("GET /healthz HTTP/1.1\r\nHost: h\r\n\r\n", &doc) != 200 ||
        json_unpack(doc, "{s:s}", "status", &st) || strcmp(st, "ok"))
        fail(NULL, 0, "GET /healthz no longer answers 200 ok");
    json_decref(doc);
    ensure_file();
}

/* Scoped tokens on, and @TOKEN@: one of key k's, for u1, every scope. */
static enum ipd_err mint_token(const struct ipd_key *k)
{
    static const unsigned char secret[IPD_TOKEN_SECRET_LEN] = {7};
    struct ipd_principal who;
    int64_t expires;
    env->app.tokens = ipd_tokens_new(secret, 30000, 0, 24LL * 3600 * 1000);
    ipd_keys_principal(k, &who);
    return ipd_tokens_mint(env->app.tokens, env->app.meta, &who, "u1",
                           IPD_SCOPE_TOKEN_ALL, 24LL * 3600 * 1000, env->token,
                           &expires);
}

static void teardown(void)
{
    if (!env)
        return;
    ipd_daemon_shutdown(env->d, 1000);
    ipd_metrics_free(env->app.metrics);
    json_decref(env->app.last_cleanup);
    pthread_mutex_destroy(&env->app.status_lock);
    ipd_filetype_free(env->app.ft);
    ipd_tokens_free(env->app.tokens);
    ipd_mcp_free(env->app.mcp);
    ipd_stores_close(&env->stores);
    ipd_config_release(&env->cfg);
    ipd_remove_tree_at(AT_FDCWD, env->dir);
    free(env);
    env = NULL;
}

/* Options for a quick, bounded service: small files (so the 413 paths
 * are in reach of the fuzzer's input sizes), files that expire soon and
 * are swept by the harness, CORS for one origin, quiet logs. */
static void configure(struct ipd_config *c, const char *dir)
{
    static const char *const opts[][2] = {
        {"listen", "127.0.0.1:0"},    {"threads", "2"},
        {"log-level", "error"},       {"max-file-size", "4096"},
        {"file-ttl", "60s"},          {"quota-files", "1000"},
        {"connection-timeout", "5s"}, {"cors-origins", "https://app.example"},
        {"shutdown-timeout", "1s"}};
    struct ipd_buf err;
    ipd_buf_init(&err, 1024);
    ipd_config_init(c);
    if (ipd_config_set(c, "data-dir", dir, "fuzz", &err))
        fail(NULL, 0, "config: %s", err.buf);
    for (size_t i = 0; i < IPD_ARRAY_LEN(opts); i++)
        if (ipd_config_set(c, opts[i][0], opts[i][1], "fuzz", &err))
            fail(NULL, 0, "config %s: %s", opts[i][0], err.buf);
    ipd_buf_release(&err);
    ipd_log_set_level(c->log_level);
}

/* The way service/serve.c wires it, minus the sandbox, the venv, URL
 * ingest and the scheduler. */
static void setup(void)
{
    struct ipd_key k;
    env = ipd_xcalloc(1, sizeof(*env));
    const char *tmp = getenv("TMPDIR");
    snprintf(env->dir, sizeof(env->dir), "%s/ipd-fuzz-XXXXXX",
             tmp && *tmp && strlen(tmp) < 40 ? tmp : "/tmp");
    if (!mkdtemp(env->dir))
        fail(NULL, 0, "mkdtemp %s: %s", env->dir, strerror(errno));
    configure(&env->cfg, env->dir);
    env->app.cfg = &env->cfg;
    env->app.started_ms = ipd_now_ms();
    pthread_mutex_init(&env->app.status_lock, NULL);
    signal(SIGPIPE, SIG_IGN);
    if (ipd_metrics_new(IPD_VERSION, &env->app.metrics) ||
        ipd_stores_open(&env->cfg, true, &env->stores))
        fail(NULL, 0, "cannot open the stores in %s", env->dir);
    env->app.meta = env->stores.meta;
    env->app.blobs = env->stores.blobs;
    env->app.mcp = ipd_mcp_new(); /* sessions; no workers: tools get 503 */
    if (ipd_filetype_new(&env->app.ft) ||
        ipd_keys_create(env->app.meta, "fuzz", false, NULL, env->key, &k) ||
        mint_token(&k) ||
        ipd_keys_create(env->app.meta, "ops", true, NULL, env->admin, &k) ||
        ipd_daemon_start(&env->app, &env->d))
        fail(NULL, 0, "cannot start the service");
    env->port = ipd_daemon_port(env->d);
    atexit(teardown);
    health_check();
}

/* Expired files go, as the service's scheduler would do it. */
static void sweep(void)
{
    struct ipd_sweep_result res;
    enum ipd_err rc =
        ipd_sweep_expired(env->app.meta, env->app.blobs, ipd_now_ms(), &res);
    if (rc)
        fail(NULL, 0, "sweep: %s", ipd_err_name(rc));
}

/* A job the parser made from a body for who: within every bound. */
static void check_job(const struct ipd_exec_job *j,
                      const struct ipd_principal *who)
{
    if (j->code_len > IPD_EXEC_CODE_MAX || j->n_files > IPD_EXEC_FILES_MAX ||
        strcmp(j->tenant, who->tenant) || strcmp(j->user_id, who->user_id))
        fail(NULL, 0,
             "parser: a job out of bounds (code %zu bytes, %zu "
             "files) or for someone else",
             j->code_len, j->n_files);
    for (size_t i = 0; i < j->n_files; i++)
        if (!ipd_id_valid("file", j->file_ids[i]))
            fail(NULL, 0, "parser: file id %s in a job", j->file_ids[i]);
    if (j->session_id[0] && !ipd_id_valid("sess", j->session_id))
        fail(NULL, 0, "parser: session id %s in a job", j->session_id);
    if (j->timeout_ms < 0)
        fail(NULL, 0, "parser: timeout %lld ms", (long long)j->timeout_ms);
}

/* The body of req (after the first blank line), when it is JSON, through
 * the execution request parser. */
static void check_parser(const char *req, size_t len)
{
    static const struct ipd_principal who = {.tenant = "t",
                                             .user_id = "u1",
                                             .policy = "standard",
                                             .scopes = IPD_SCOPE_ALL};
    static const char *const codes[] = {"invalid_request", "forbidden",
                                        "not_found", "payload_too_large"};
    const struct ipd_exec_request_env penv = {
        .policies = env->cfg.policies, .n_policies = env->cfg.n_policies};
    const char *eoh = memmem(req, len, "\r\n\r\n", 4);
    json_error_t jerr;
    json_t *doc =
        eoh ? json_loadb(eoh + 4, len - (size_t)(eoh + 4 - req),
                         JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, &jerr)
            : NULL;
    struct ipd_exec_job *j = NULL;
    struct ipd_refusal f;
    bool async = false, known = false;
    if (!doc)
        return;
    enum ipd_err rc = ipd_exec_request_parse(&penv, &who, doc, &j, &async, &f);
    if (!rc != (j != NULL) || (rc && rc != IPD_ERR_INVALID))
        fail(NULL, 0, "parser: %s with%s a job", ipd_err_name(rc),
             j ? "" : "out");
    if (j)
        check_job(j, &who);
    for (size_t i = 0; rc && i < IPD_ARRAY_LEN(codes); i++)
        known |= f.code && !strcmp(f.code, codes[i]);
    if (rc && (!known || !f.message[0]))
        fail(NULL, 0, "parser: refused with code %s, message \"%s\"",
             f.code ? f.code : "(none)", f.message);
    ipd_exec_job_free(j);
    json_decref(doc);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct ipd_buf req, out;
    if (!env)
        setup();
    ipd_buf_init(&req, IPD_BUF_UNLIMITED);
    ipd_buf_init(&out, REPLY_MAX);
    expand(data, size, &req);
    cur_req = req.buf;
    cur_req_len = req.len;
    if (!exchange(req.buf, req.len, &out))
        fail(out.buf, out.len, "no answer and no close within %d ms",
             IO_TIMEOUT_MS);
    check_replies(req.buf, req.len, &out);
    check_parser(req.buf, req.len);
    ipd_buf_release(&out);
    ipd_buf_release(&req);
    cur_req = NULL;
    if (++env->runs % HEALTH_EVERY == 0)
        health_check();
    if (env->runs % SWEEP_EVERY == 0)
        sweep();
    return 0;
}
