/*
 * test_concurrency.c - many clients at once, quota races, graceful
 * shutdown with an upload in flight, clients that vanish mid-upload or
 * stall, and the server's own timeouts.
 */
#include "harness.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define NCLIENTS 20

struct uploader {
    struct itest_server *s;
    const char *key;
    pthread_barrier_t *start;
    uint32_t seed;
    size_t len;
    long status;       /* OUT */
    char file_id[64];  /* OUT */
    char sha_got[65];  /* OUT: the File object's sha256 */
    char sha_want[65]; /* OUT: the real one */
    char error[512];   /* OUT: why it went wrong */
};

static void *upload_thread(void *arg)
{
    struct uploader *u = arg;
    unsigned char *data = malloc(u->len);
    if (!data)
        abort();
    itest_pattern_fill(u->seed, 0, data, u->len);
    itest_sha256_hex(data, u->len, u->sha_want);
    char name[32];
    snprintf(name, sizeof(name), "part-%u.bin", (unsigned)u->seed);
    pthread_barrier_wait(u->start);
    struct itest_resp r;
    itest_upload_raw(u->s, u->key, "u1", name, "application/octet-stream", data,
                     u->len, NULL, &r);
    u->status = r.status;
    const char *id = itest_json_str(r.json, "file_id");
    const char *sha = itest_json_str(r.json, "sha256");
    snprintf(u->file_id, sizeof(u->file_id), "%s", id ? id : "");
    snprintf(u->sha_got, sizeof(u->sha_got), "%s", sha ? sha : "");
    if (r.status != 201)
        snprintf(u->error, sizeof(u->error), "%.200s: %.200s", r.curl_err,
                 r.body);
    itest_resp_release(&r);
    free(data);
    return NULL;
}

/* Run NCLIENTS uploads at once (released together by a barrier); with
 * with_cli, create keys with the CLI meanwhile (the same SQLite database,
 * another process). */
static void run_uploads(struct itest_server *s, const char *key,
                        struct uploader *u, bool with_cli)
{
    pthread_barrier_t start;
    pthread_barrier_init(&start, NULL, NCLIENTS);
    pthread_t t[NCLIENTS];
    for (size_t i = 0; i < NCLIENTS; i++) {
        u[i].s = s;
        u[i].key = key;
        u[i].start = &start;
        u[i].seed = (uint32_t)(100 + i);
        u[i].len = 32 * 1024 + i * 4093;
        if (pthread_create(&t[i], NULL, upload_thread, &u[i]))
            abort();
    }
    for (int i = 0; with_cli && i < 3; i++) {
        char *k = NULL;
        CHECKF(itest_create_key(s, "busy", false, &k, NULL),
               "keys create during uploads failed");
        free(k);
    }
    for (size_t i = 0; i < NCLIENTS; i++)
        pthread_join(t[i], NULL);
    pthread_barrier_destroy(&start);
}

static void concurrent_uploads(void)
{
    struct itest_server *s = itest_start(NULL);
    REQUIRE(s);
    char *key = NULL;
    REQUIRE(itest_create_key(s, "acme", false, &key, NULL));
    struct uploader u[NCLIENTS];
    memset(u, 0, sizeof(u));
    run_uploads(s, key, u, true);
    for (size_t i = 0; i < NCLIENTS; i++) {
        CHECKF(u[i].status == 201, "upload %zu: status %ld, want 201: %s", i,
               u[i].status, u[i].error);
        CHECKF(!strcmp(u[i].sha_got, u[i].sha_want),
               "upload %zu: sha256 %s, want %s", i, u[i].sha_got,
               u[i].sha_want);
    }

    /* All listed, once each, and each downloads its own bytes. */
    struct itest_resp r;
    itest_request(s, "GET", "/v1/files?limit=100", key, "u1", NULL, NULL, 0,
                  NULL, &r);
    CHECK_STATUS(&r, 200);
    json_t *files = itest_json_get(r.json, "files");
    CHECKF(json_array_size(files) == NCLIENTS, "listed %zu files, want %d",
           json_array_size(files), NCLIENTS);
    for (size_t i = 0; i < NCLIENTS; i++) {
        size_t hits = 0, k;
        json_t *f;
        json_array_foreach(files, k, f)
        {
            const char *id = itest_json_str(f, "file_id");
            if (id && !strcmp(id, u[i].file_id))
                hits++;
        }
        CHECKF(hits == 1, "upload %zu (%s) listed %zu times", i, u[i].file_id,
               hits);
    }
    itest_resp_release(&r);
    for (size_t i = 0; i < NCLIENTS; i++) {
        char *path = itest_fmt("/v1/files/%s/content", u[i].file_id);
        itest_request(s, "GET", path, key, "u1", NULL, NULL, 0, NULL, &r);
        free(path);
        CHECK_STATUS(&r, 200);
        char sha[65];
        itest_sha256_hex(r.body, r.len, sha);
        CHECKF(!strcmp(sha, u[i].sha_want),
               "download %zu: %zu bytes with sha256 %s, want %zu bytes, %s", i,
               r.len, sha, u[i].len, u[i].sha_want);
        itest_resp_release(&r);
    }
    free(key);
    itest_stop(s);
}

/* The quota holds under concurrent inserts. */
static void concurrent_quota(void)
{
    static const char *const args[] = {"--quota-files", "5", "--threads", "4",
                                       NULL};
    struct itest_opts o = {.args = args};
    struct itest_server *s = itest_start(&o);
    REQUIRE(s);
    char *key = NULL;
    REQUIRE(itest_create_key(s, "acme", false, &key, NULL));
    struct uploader u[NCLIENTS];
    memset(u, 0, sizeof(u));
    run_uploads(s, key, u, false);
    size_t ok = 0, full = 0;
    for (size_t i = 0; i < NCLIENTS; i++) {
        if (u[i].status == 201)
            ok++;
        else if (u[i].status == 507)
            full++;
        else
            CHECKF(0, "upload %zu: status %ld, want 201 or 507: %s", i,
                   u[i].status, u[i].error);
    }
    CHECKF(ok == 5 && full == NCLIENTS - 5,
           "with --quota-files 5: %zu uploads accepted and %zu refused, want "
           "5 and %d",
           ok, full, NCLIENTS - 5);
    struct itest_resp r;
    itest_request(s, "GET", "/v1/files", key, "u1", NULL, NULL, 0, NULL, &r);
    CHECK_STATUS(&r, 200);
    CHECK_INT(json_array_size(itest_json_get(r.json, "files")), 5);
    itest_resp_release(&r);
    bool clean = itest_wait_strays_at_most(s, 5, ITEST_CLEANUP_WAIT_MS);
    if (!clean)
        itest_print_strays(s);
    CHECKF(clean, "refused uploads left files on disk");
    free(key);
    itest_stop(s);
}

struct deleter {
    struct itest_server *s;
    const char *key;
    const char *path;
    pthread_barrier_t *start;
    long status; /* OUT */
};

static void *delete_thread(void *arg)
{
    struct deleter *d = arg;
    pthread_barrier_wait(d->start);
    struct itest_resp r;
    itest_request(d->s, "DELETE", d->path, d->key, "u1", NULL, NULL, 0, NULL,
                  &r);
    d->status = r.status;
    itest_resp_release(&r);
    return NULL;
}

/* Racing DELETEs of one file: exactly one wins. */
static void concurrent_deletes(void)
{
    struct itest_server *s = itest_start(NULL);
    REQUIRE(s);
    char *key = NULL;
    REQUIRE(itest_create_key(s, "acme", false, &key, NULL));
    struct itest_resp r;
    itest_upload_raw(s, key, "u1", "contested.txt", "text/plain", "mine\n", 5,
                     NULL, &r);
    REQUIRE_STATUS(&r, 201);
    char *path = itest_fmt("/v1/files/%s", itest_json_str(r.json, "file_id"));
    itest_resp_release(&r);

    pthread_barrier_t start;
    pthread_barrier_init(&start, NULL, NCLIENTS);
    struct deleter d[NCLIENTS];
    pthread_t t[NCLIENTS];
    for (size_t i = 0; i < NCLIENTS; i++) {
        d[i] = (struct deleter){s, key, path, &start, 0};
        if (pthread_create(&t[i], NULL, delete_thread, &d[i]))
            abort();
    }
    size_t ok = 0, gone = 0;
    for (size_t i = 0; i < NCLIENTS; i++) {
        pthread_join(t[i], NULL);
        ok += d[i].status == 204;
        gone += d[i].status == 404;
    }
    pthread_barrier_destroy(&start);
    CHECKF(ok == 1 && gone == NCLIENTS - 1,
           "%d racing DELETEs: %zu answered 204 and %zu 404, want 1 and %d",
           NCLIENTS, ok, gone, NCLIENTS - 1);
    bool clean = itest_wait_strays_at_most(s, 0, ITEST_CLEANUP_WAIT_MS);
    if (!clean)
        itest_print_strays(s);
    CHECKF(clean, "the deleted file's bytes stay on disk");
    free(path);
    free(key);
    itest_stop(s);
}

/* A body that stops halfway until the test lets it go on. */
struct slow_body {
    struct itest_pattern_src src;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool half_sent; /* the first half is out */
    bool go;        /* the test allows the rest */
};

static size_t slow_read(char *buf, size_t size, size_t n, void *ctx)
{
    struct slow_body *b = ctx;
    uint64_t half = b->src.total / 2;
    if (b->src.sent >= half) {
        pthread_mutex_lock(&b->mu);
        b->half_sent = true;
        pthread_cond_broadcast(&b->cv);
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_sec += 30; /* never hang the suite on a bug */
        while (!b->go) {
            if (pthread_cond_timedwait(&b->cv, &b->mu, &until) == ETIMEDOUT)
                break;
        }
        pthread_mutex_unlock(&b->mu);
    } else if (size * n > half - b->src.sent) {
        n = (size_t)(half - b->src.sent); /* stop exactly at half */
        size = 1;
    }
    return itest_pattern_read(buf, size, n, &b->src);
}

struct slow_upload {
    struct itest_server *s;
    const char *key;
    struct slow_body body;
    struct itest_resp resp; /* OUT */
};

static void *slow_upload_thread(void *arg)
{
    struct slow_upload *u = arg;
    struct itest_req rq = {0};
    rq.path = "/v1/files?filename=inflight.bin";
    rq.key = u->key;
    rq.user_id = "u1";
    rq.content_type = "application/octet-stream";
    rq.read_cb = slow_read;
    rq.read_ctx = &u->body;
    rq.read_len = (curl_off_t)u->body.src.total;
    itest_do(u->s, &rq, &u->resp);
    return NULL;
}

static bool wait_half(struct slow_body *b)
{
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += 30;
    pthread_mutex_lock(&b->mu);
    while (!b->half_sent) {
        if (pthread_cond_timedwait(&b->cv, &b->mu, &until) == ETIMEDOUT)
            break;
    }
    bool ok = b->half_sent;
    pthread_mutex_unlock(&b->mu);
    return ok;
}

static void release_rest(struct slow_body *b)
{
    pthread_mutex_lock(&b->mu);
    b->go = true;
    pthread_cond_broadcast(&b->cv);
    pthread_mutex_unlock(&b->mu);
}

static void sigterm_during_upload(void)
{
    struct itest_server *s = itest_start(NULL);
    REQUIRE(s);
    char *key = NULL;
    REQUIRE(itest_create_key(s, "acme", false, &key, NULL));

    struct slow_upload u;
    memset(&u, 0, sizeof(u));
    u.s = s;
    u.key = key;
    u.body.src.seed = 42;
    u.body.src.total = 512 * 1024;
    pthread_mutex_init(&u.body.mu, NULL);
    pthread_cond_init(&u.body.cv, NULL);
    pthread_t t;
    REQUIRE(pthread_create(&t, NULL, slow_upload_thread, &u) == 0);

    bool half = wait_half(&u.body);
    CHECKF(half, "the upload never got halfway");
    itest_signal(s, SIGTERM);
    CHECKF(itest_wait_signal_delivered(s, SIGTERM, 5000),
           "SIGTERM still pending after 5 s");

    /* New connections now are refused or answered, never left hanging. */
    struct itest_req rq = {0};
    rq.path = "/healthz";
    rq.timeout_ms = 3000;
    struct itest_resp r;
    itest_do(s, &rq, &r);
    /* A connection the kernel queued before the listening socket closed
     * is reset: a refusal too. */
    CHECKF(r.status > 0 || r.curl_rc == CURLE_COULDNT_CONNECT ||
               r.curl_rc == CURLE_RECV_ERROR || r.curl_rc == CURLE_GOT_NOTHING,
           "a new request during shutdown: no answer and not refused (%s)",
           r.curl_err);
    itest_resp_release(&r);

    release_rest(&u.body);
    pthread_join(t, NULL);
    char want_sha[65];
    itest_pattern_sha256(42, u.body.src.total, want_sha);
    CHECK_STATUS(&u.resp, 201);
    CHECK_STR(itest_json_str(u.resp.json, "sha256"), want_sha);
    char *id = itest_json_dup(u.resp.json, "file_id");
    itest_resp_release(&u.resp);

    int status = 0;
    bool exited = itest_wait_exit(s, 15000, &status);
    CHECKF(exited, "the server did not exit within 15 s of SIGTERM");
    if (exited)
        CHECKF(WIFEXITED(status) && WEXITSTATUS(status) == 0,
               "exit status 0x%x after SIGTERM, want exit 0", (unsigned)status);

    /* No temporary file remains: just the stored file's bytes. */
    char **files;
    size_t n = itest_stray_files(s, &files);
    CHECKF(n == 1,
           "%zu files under the data dir besides the database, "
           "want 1 (the upload)",
           n);
    if (n != 1)
        itest_print_strays(s);
    if (n == 1) {
        size_t len;
        char *bytes = itest_read_stored(s, files[0], &len);
        char sha[65];
        itest_sha256_hex(bytes, bytes ? len : 0, sha);
        CHECKF(!strcmp(sha, want_sha), "%s is not the uploaded file", files[0]);
        free(bytes);
    }
    itest_strv_free(files);

    /* And the upload is committed: a restarted server serves it. */
    if (!exited) {
        itest_signal(s, SIGKILL);
        itest_wait_exit(s, 5000, &status);
    }
    CHECK(itest_restart(s, NULL));
    char *path = itest_fmt("/v1/files/%s/content", id);
    itest_request(s, "GET", path, key, "u1", NULL, NULL, 0, NULL, &r);
    CHECK_STATUS(&r, 200);
    char sha[65];
    itest_sha256_hex(r.body, r.len, sha);
    CHECK_STR(sha, want_sha);
    itest_resp_release(&r);
    free(path);
    free(id);
    pthread_mutex_destroy(&u.body.mu);
    pthread_cond_destroy(&u.body.cv);
    free(key);
    itest_stop(s);
}

/* Read an HTTP response head from fd (bounded by SO_RCVTIMEO); the status
 * code, 0 when none came. */
static int read_status(int fd)
{
    struct timeval tv = {15, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    char buf[4096];
    size_t n = 0;
    while (n < sizeof(buf) - 1) {
        ssize_t got = read(fd, buf + n, sizeof(buf) - 1 - n);
        if (got < 0 && errno == EINTR)
            continue;
        if (got <= 0)
            break;
        n += (size_t)got;
        buf[n] = 0;
        if (strstr(buf, "\r\n\r\n"))
            break;
    }
    buf[n] = 0;
    int status = 0;
    if (n > 12 && !strncmp(buf, "HTTP/1.", 7))
        status = (int)strtol(buf + 9, NULL, 10);
    return status;
}

/* A request whose first bytes arrived before SIGTERM is in flight too,
 * even though its headers are not complete yet. */
static void sigterm_with_partial_headers(void)
{
    struct itest_server *s = itest_start(NULL);
    REQUIRE(s);
    char *key = NULL;
    REQUIRE(itest_create_key(s, "acme", false, &key, NULL));
    int fd = itest_connect(s);
    REQUIRE(fd >= 0);
    static const char first[] = "POST /v1/files?filename=late.txt HTTP/1.1\r\n"
                                "Host: 127.0.0.1\r\n";
    CHECK(itest_send_all(fd, first, strlen(first)));
    /* The server has the bytes when a request on another connection,
     * sent after them, has been answered. */
    struct itest_resp r;
    itest_request(s, "GET", "/healthz", NULL, NULL, NULL, NULL, 0, NULL, &r);
    CHECK_STATUS(&r, 200);
    itest_resp_release(&r);

    itest_signal(s, SIGTERM);
    CHECKF(itest_wait_signal_delivered(s, SIGTERM, 5000),
           "SIGTERM still pending after 5 s");
    char *rest = itest_fmt("Authorization: Bearer %s\r\n"
                           "X-User-Id: u1\r\n"
                           "Content-Type: text/plain\r\n"
                           "Content-Length: 5\r\n"
                           "Connection: close\r\n"
                           "\r\n"
                           "late\n",
                           key);
    bool sent = itest_send_all(fd, rest, strlen(rest));
    int status = sent ? read_status(fd) : 0;
    CHECKF(status == 201,
           "a request begun before SIGTERM and completed after it: status "
           "%d, want 201 (0: the connection was dropped)",
           status);
    close(fd);
    free(rest);
    int st = 0;
    bool exited = itest_wait_exit(s, 15000, &st);
    CHECKF(exited && WIFEXITED(st) && WEXITSTATUS(st) == 0,
           "after SIGTERM: %s, wait status 0x%x, want exit 0",
           exited ? "exited" : "still running", (unsigned)st);
    free(key);
    itest_stop(s);
}

static void sigint_exits_zero(void)
{
    struct itest_server *s = itest_start(NULL);
    REQUIRE(s);
    itest_signal(s, SIGINT);
    int status = 0;
    bool exited = itest_wait_exit(s, 15000, &status);
    CHECKF(exited, "no exit within 15 s of SIGINT");
    CHECKF(!exited || (WIFEXITED(status) && WEXITSTATUS(status) == 0),
           "exit status 0x%x after SIGINT, want exit 0", (unsigned)status);
    itest_stop(s);
}

static char *raw_request_head(const char *key, const char *target,
                              const char *ctype, const char *framing)
{
    return itest_fmt("POST %s HTTP/1.1\r\n"
                     "Host: 127.0.0.1\r\n"
                     "Authorization: Bearer %s\r\n"
                     "X-User-Id: u1\r\n"
                     "Content-Type: %s\r\n"
                     "%s\r\n"
                     "\r\n",
                     target, key, ctype, framing);
}

/* Send head, then `sent` bytes of body, then close the socket. */
static void abandon_upload(struct itest_server *s, const char *head,
                           const char *preamble, size_t sent, bool chunked)
{
    int fd = itest_connect(s);
    REQUIRE(fd >= 0);
    bool ok = itest_send_all(fd, head, strlen(head));
    if (preamble)
        ok = ok && itest_send_all(fd, preamble, strlen(preamble));
    unsigned char buf[64 * 1024];
    for (size_t off = 0; ok && off < sent; off += sizeof(buf)) {
        itest_pattern_fill(5, off, buf, sizeof(buf));
        if (chunked) {
            char size_line[32];
            snprintf(size_line, sizeof(size_line), "%zx\r\n", sizeof(buf));
            ok = itest_send_all(fd, size_line, strlen(size_line));
        }
        ok = ok && itest_send_all(fd, buf, sizeof(buf));
        if (chunked)
            ok = ok && itest_send_all(fd, "\r\n", 2);
    }
    CHECKF(ok, "sending the partial upload failed");
    close(fd);
}

static void client_disconnects(void)
{
    struct itest_server *s = itest_start(NULL);
    REQUIRE(s);
    char *key = NULL;
    REQUIRE(itest_create_key(s, "acme", false, &key, NULL));
    const size_t sent = 1024 * 1024;

    char *raw =
        raw_request_head(key, "/v1/files?filename=partial.bin",
                         "application/octet-stream", "Content-Length: 4194304");
    char *chunked = raw_request_head(key, "/v1/files?filename=partial.bin",
                                     "application/octet-stream",
                                     "Transfer-Encoding: chunked");
    char *multi =
        raw_request_head(key, "/v1/files", "multipart/form-data; boundary=XYZ",
                         "Content-Length: 4194304");
    static const char preamble[] =
        "--XYZ\r\n"
        "Content-Disposition: form-data; name=\"file\"; "
        "filename=\"partial.bin\"\r\n"
        "Content-Type: application/octet-stream\r\n\r\n";
    struct {
        const char *what, *head, *preamble;
        bool chunked;
    } cases[] = {
        {"a raw upload", raw, NULL, false},
        {"a chunked upload", chunked, NULL, true},
        {"a multipart upload", multi, preamble, false},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        abandon_upload(s, cases[i].head, cases[i].preamble, sent,
                       cases[i].chunked);
        /* Nothing announces the server noticed: poll the disk, bounded. */
        bool clean = itest_wait_strays_at_most(s, 0, ITEST_CLEANUP_WAIT_MS);
        if (!clean) {
            fprintf(stderr, "5 s after abandoning %s:\n", cases[i].what);
            itest_print_strays(s);
        }
        CHECKF(clean, "abandoning %s left a temporary file", cases[i].what);
        struct itest_resp r;
        itest_request(s, "GET", "/healthz", NULL, NULL, NULL, NULL, 0, NULL,
                      &r);
        CHECK_STATUS(&r, 200);
        itest_resp_release(&r);
    }
    struct itest_resp r;
    itest_request(s, "GET", "/v1/files", key, "u1", NULL, NULL, 0, NULL, &r);
    CHECK_STATUS(&r, 200);
    CHECKF(json_array_size(itest_json_get(r.json, "files")) == 0,
           "abandoned uploads are listed: %s", r.body);
    itest_resp_release(&r);
    free(raw);
    free(chunked);
    free(multi);
    free(key);
    itest_stop(s);
}

/* A client that never finishes must not hold shutdown past its timeout. */
static void shutdown_timeout_bounds_stall(void)
{
    static const char *const args[] = {"--shutdown-timeout", "1s", NULL};
    struct itest_opts o = {.args = args};
    struct itest_server *s = itest_start(&o);
    REQUIRE(s);
    char *key = NULL;
    REQUIRE(itest_create_key(s, "acme", false, &key, NULL));
    char *head =
        raw_request_head(key, "/v1/files?filename=stall.bin",
                         "application/octet-stream", "Content-Length: 1048576");
    int fd = itest_connect(s);
    REQUIRE(fd >= 0);
    unsigned char buf[4096];
    itest_pattern_fill(9, 0, buf, sizeof(buf));
    CHECK(itest_send_all(fd, head, strlen(head)));
    CHECK(itest_send_all(fd, buf, sizeof(buf)));
    /* The server is alive and has had a full round trip's time to take
     * the stalled request in. */
    struct itest_resp r;
    itest_request(s, "GET", "/healthz", NULL, NULL, NULL, NULL, 0, NULL, &r);
    CHECK_STATUS(&r, 200);
    itest_resp_release(&r);

    double t0 = itest_now();
    itest_signal(s, SIGTERM);
    int status = 0;
    bool exited = itest_wait_exit(s, 8000, &status);
    double took = itest_now() - t0;
    CHECKF(exited, "with --shutdown-timeout 1s and a stalled upload, the "
                   "server still runs 8 s after SIGTERM");
    CHECKF(!exited || (WIFEXITED(status) && WEXITSTATUS(status) == 0),
           "exit status 0x%x, want exit 0", (unsigned)status);
    if (exited)
        printf("     (exited %.2f s after SIGTERM)\n", took);
    close(fd);
    char **files;
    size_t n = itest_stray_files(s, &files);
    itest_strv_free(files);
    if (n)
        itest_print_strays(s);
    CHECKF(n == 0, "the stalled upload left %zu files", n);
    free(head);
    free(key);
    itest_stop(s);
}

/* --connection-timeout closes a connection that stalls mid-request. */
static void connection_timeout(void)
{
    static const char *const args[] = {"--connection-timeout", "1s", NULL};
    struct itest_opts o = {.args = args};
    struct itest_server *s = itest_start(&o);
    REQUIRE(s);
    int fd = itest_connect(s);
    REQUIRE(fd >= 0);
    static const char partial[] = "GET /healthz HTTP/1.1\r\nHost: x\r\n";
    CHECK(itest_send_all(fd, partial, strlen(partial)));
    struct timeval tv = {10, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    double t0 = itest_now();
    char buf[4096];
    ssize_t got;
    /* The close is the event: read until EOF or reset (a 408 first is
     * fine). */
    do {
        got = read(fd, buf, sizeof(buf));
    } while (got > 0 || (got < 0 && errno == EINTR));
    bool closed = got == 0 || (got < 0 && errno == ECONNRESET);
    double took = itest_now() - t0;
    CHECKF(closed,
           "with --connection-timeout 1s a stalled connection is "
           "still open after %.1f s",
           took);
    close(fd);
    struct itest_resp r;
    itest_request(s, "GET", "/healthz", NULL, NULL, NULL, NULL, 0, NULL, &r);
    CHECK_STATUS(&r, 200);
    itest_resp_release(&r);
    itest_stop(s);
}

TEST_MAIN(T(concurrent_uploads), T(concurrent_quota), T(concurrent_deletes),
          T(sigterm_during_upload), T(sigterm_with_partial_headers),
          T(sigint_exits_zero), T(client_disconnects),
          T(shutdown_timeout_bounds_stall), T(connection_timeout))
