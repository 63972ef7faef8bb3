/*
 * test_fairness.c - fairness between tenants (issue 13, item 10): for
 * each shared pool, tenant A holds its share (runs that sleep until the
 * test kills them, receivers that never answer) and gets 429 with
 * Retry-After beyond it, while tenant B's requests still succeed; and a
 * client address that opens 1,100 half-open connections or trickles a
 * request head cannot keep /healthz from answering.  (The installs'
 * share is tested in test_packages, next to the package index it needs;
 * the sessions' shares, tenant-sessions and tenant-session-memory, in
 * test_sessions, next to the session helpers.)
 */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness.h"

/* ---- two tenants ------------------------------------------------------- */

struct tenants {
    char *a, *b; /* plain keys */
};

static bool tenants_make(struct itest_server *s, struct tenants *t)
{
    char *ida = NULL, *idb = NULL;
    memset(t, 0, sizeof(*t));
    bool ok = itest_create_key(s, "tenant-a", false, &t->a, &ida) &&
              itest_create_key(s, "tenant-b", false, &t->b, &idb);
    free(ida);
    free(idb);
    return ok;
}

static void tenants_free(struct tenants *t)
{
    free(t->a);
    free(t->b);
}

/* r is 429 too_many_requests with Retry-After in [lo, hi]. */
static void check_429(const struct itest_resp *r, long lo, long hi,
                      const char *field)
{
    CHECK_ERROR(r, 429, "too_many_requests");
    const char *ra = itest_header(r, "Retry-After");
    long v = ra ? strtol(ra, NULL, 10) : -1;
    CHECKF(v >= lo && v <= hi, "Retry-After %s, want %ld..%ld",
           ra ? ra : "(none)", lo, hi);
    const char *msg = itest_json_str(r->json, "error.message");
    CHECKF(msg && strstr(msg, field), "message %s names no %s",
           msg ? msg : "(none)", field);
}

static char *submit_async(struct itest_server *s, const char *key, json_t *body,
                          struct itest_resp *r)
{
    json_object_set_new(body, "async", json_true());
    itest_exec(s, key, "u1", body, 30000, r);
    return r->status == 202 ? itest_json_dup(r->json, "execution_id") : NULL;
}

/* The execution's status ("queued", "running", "done"), new, or NULL. */
static char *exec_status(struct itest_server *s, const char *key,
                         const char *id)
{
    struct itest_resp r;
    char *path = itest_fmt("/v1/executions/%s", id);
    itest_request(s, "GET", path, key, "u1", NULL, NULL, 0, NULL, &r);
    char *st = r.status == 200 ? itest_json_dup(r.json, "status") : NULL;
    itest_resp_release(&r);
    free(path);
    return st;
}

/* Bounded poll until the execution is done (the API has no other way to
 * wait for an asynchronous result). */
static bool wait_done(struct itest_server *s, const char *key, const char *id)
{
    for (int i = 0; i < 1200; i++) {
        char *st = exec_status(s, key, id);
        bool done = st && !strcmp(st, "done");
        free(st);
        if (done)
            return true;
        usleep(50 * 1000);
    }
    return false;
}

/* ---- listeners: one that never answers, one that answers 200 ----------- */

/* Answers every request "200 hello" until stopped. */
struct responder {
    int fd, port;
    pthread_t thread;
    int served; /* under lock */
    pthread_mutex_t lock;
};

static void *responder_main(void *arg)
{
    struct responder *rs = arg;
    for (;;) {
        int c = accept4(rs->fd, NULL, NULL, SOCK_CLOEXEC);
        if (c < 0)
            return NULL; /* shut down */
        size_t len;
        free(itest_read_request(c, 10000, &len));
        static const char ans[] = "HTTP/1.1 200 OK\r\nContent-Type: "
                                  "text/plain\r\nContent-Length: 5\r\n"
                                  "Connection: close\r\n\r\nhello";
        itest_send_all(c, ans, sizeof(ans) - 1);
        close(c);
        pthread_mutex_lock(&rs->lock);
        rs->served++;
        pthread_mutex_unlock(&rs->lock);
    }
}

static bool responder_start(struct responder *rs)
{
    memset(rs, 0, sizeof(*rs));
    pthread_mutex_init(&rs->lock, NULL);
    rs->fd = itest_listen_local(&rs->port, 64);
    return rs->fd >= 0 &&
           pthread_create(&rs->thread, NULL, responder_main, rs) == 0;
}

static int responder_served(struct responder *rs)
{
    pthread_mutex_lock(&rs->lock);
    int n = rs->served;
    pthread_mutex_unlock(&rs->lock);
    return n;
}

static void responder_stop(struct responder *rs)
{
    shutdown(rs->fd, SHUT_RDWR);
    pthread_join(rs->thread, NULL);
    close(rs->fd);
    pthread_mutex_destroy(&rs->lock);
}

/* ---- the execution slots and queue ------------------------------------- */

/* A run that holds its slot until the test kills it. */
static json_t *gated_run(void)
{
    return json_pack("{s:s, s:i}", "code",
                     "import time\n"
                     "time.sleep(120)\n",
                     "timeout", 120);
}

/* SIGKILL the Python processes among the server's descendants (the runs
 * it supervises: host pids, whatever their namespaces).  The count. */
static int kill_runs(const struct itest_server *s)
{
    enum { MAXP = 4096 };
    static pid_t pid[MAXP], ppid[MAXP];
    static bool py[MAXP], mine[MAXP];
    int n = 0, killed = 0;
    DIR *d = opendir("/proc");
    struct dirent *e;
    while (d && (e = readdir(d)) && n < MAXP) {
        char path[300], buf[512], comm[64];
        int p, pp;
        if (e->d_name[0] < '1' || e->d_name[0] > '9')
            continue;
        snprintf(path, sizeof(path), "/proc/%s/stat", e->d_name);
        FILE *f = fopen(path, "re");
        if (!f)
            continue;
        bool ok = fgets(buf, sizeof(buf), f) &&
                  sscanf(buf, "%d (%63[^)]) %*c %d", &p, comm, &pp) == 3;
        fclose(f);
        if (!ok)
            continue;
        pid[n] = p;
        ppid[n] = pp;
        py[n] = !strncmp(comm, "python", 6);
        mine[n] = pp == s->pid;
        n++;
    }
    if (d)
        closedir(d);
    for (bool grew = true; grew;) {
        grew = false;
        for (int i = 0; i < n; i++)
            for (int j = 0; j < n && !mine[i]; j++)
                if (mine[j] && ppid[i] == pid[j])
                    mine[i] = grew = true;
    }
    for (int i = 0; i < n; i++)
        if (mine[i] && py[i] && !kill(pid[i], SIGKILL))
            killed++;
    return killed;
}

/* Kill the held runs until both executions are done (bounded). */
static bool release_runs(struct itest_server *s, const char *key,
                         const char *a1, const char *a2)
{
    double deadline = itest_now() + 60;
    while (itest_now() < deadline) {
        kill_runs(s);
        char *s1 = exec_status(s, key, a1), *s2 = exec_status(s, key, a2);
        bool done = s1 && s2 && !strcmp(s1, "done") && !strcmp(s2, "done");
        free(s1);
        free(s2);
        if (done)
            return true;
        itest_sleep_until(itest_now() + 0.05);
    }
    return false;
}

/* The defaults alone (policy standard: tenant-running 50% of the 2
 * slots, tenant-queued 50% of the 2 queue places): a server without
 * per-tenant shares fails the checks themselves (it runs both of A's
 * runs, queues A's third and keeps B waiting for a slot), not only its
 * options. */
static void exec_slots_shared(void)
{
    const char *args[] = {
        "--exec-slots", "2", "--exec-queue", "2", "--ready-check-interval",
        "never",        NULL};
    struct itest_opts o = {.args = args};
    struct itest_server *s = itest_start(&o);
    struct tenants t;
    struct itest_resp r;
    REQUIRE(s);
    REQUIRE(tenants_make(s, &t));
    char *a1 = submit_async(s, t.a, gated_run(), &r);
    CHECK_STATUS(&r, 202);
    itest_resp_release(&r);
    char *a2 = submit_async(s, t.a, gated_run(), &r);
    CHECK_STATUS(&r, 202);
    itest_resp_release(&r);
    /* Its share (one running, one waiting) is held: A is refused... */
    free(submit_async(s, t.a, gated_run(), &r));
    check_429(&r, 1, 1, "tenant-running");
    itest_resp_release(&r);
    itest_exec(s, t.a, "u2", json_pack("{s:s}", "code", "print(1)"), 15000, &r);
    check_429(&r, 1, 1, "tenant-queued");
    itest_resp_release(&r);
    /* ...while B runs at once on the slot A may not take (15 s: without
     * the shares B would wait for A's gated runs, 120 s). */
    itest_exec(s, t.b, "u1", json_pack("{s:s}", "code", "print('b')"), 15000,
               &r);
    CHECK_STATUS(&r, 200);
    CHECK_STR(itest_exec_stdout(&r), "b\n");
    itest_resp_release(&r);
    char *st = a2 ? exec_status(s, t.a, a2) : NULL;
    CHECKF(st && !strcmp(st, "queued"), "A's second run is %s, not queued",
           st ? st : "(none)");
    free(st);
    CHECKF(a1 && a2 && release_runs(s, t.a, a1, a2),
           "A's held runs did not end once killed");
    itest_stop(s);
    free(a1);
    free(a2);
    tenants_free(&t);
}

/* ---- the asynchronous result table ------------------------------------- */

static void async_results_shared(void)
{
    const char *args[] = {"--result-ttl", "1h",
                          "--policy.standard.tenant-async-results", "2", NULL};
    struct itest_opts o = {.args = args};
    struct itest_server *s = itest_start(&o);
    struct tenants t;
    struct itest_resp r;
    REQUIRE(s);
    REQUIRE(tenants_make(s, &t));
    for (int i = 0; i < 2; i++) {
        char *id =
            submit_async(s, t.a, json_pack("{s:s}", "code", "print(1)"), &r);
        CHECK_STATUS(&r, 202);
        itest_resp_release(&r);
        CHECK(id && wait_done(s, t.a, id));
        free(id);
    }
    /* A holds its two results for an hour: asked to come back then. */
    free(submit_async(s, t.a, json_pack("{s:s}", "code", "print(1)"), &r));
    check_429(&r, 3000, 3600, "tenant-async-results");
    itest_resp_release(&r);
    char *id = submit_async(s, t.b, json_pack("{s:s}", "code", "print(2)"), &r);
    CHECK_STATUS(&r, 202);
    itest_resp_release(&r);
    CHECK(id && wait_done(s, t.b, id));
    free(id);
    itest_stop(s);
    tenants_free(&t);
}

/* ---- callbacks ---------------------------------------------------------- */

static void callbacks_shared(void)
{
    const char *args[] = {"--fetch-allow",
                          "127.0.0.1/32",
                          "--callback-retry-delay",
                          "1s",
                          "--policy.standard.tenant-callbacks",
                          "6",
                          NULL};
    struct itest_opts o = {.args = args};
    struct itest_server *s = itest_start(&o);
    struct tenants t;
    struct itest_resp r;
    struct responder ok;
    int hang_port = 0;
    REQUIRE(s);
    REQUIRE(tenants_make(s, &t));
    /* Listening, never accepting: each attempt hangs until its timeout. */
    int hang = itest_listen_local(&hang_port, 64);
    REQUIRE(hang >= 0);
    REQUIRE(responder_start(&ok));
    char *slow = itest_fmt("http://127.0.0.1:%d/a", hang_port);
    char *fast = itest_fmt("http://127.0.0.1:%d/b", ok.port);
    for (int i = 0; i < 6; i++) {
        free(submit_async(
            s, t.a,
            json_pack("{s:s, s:s}", "code", "print(1)", "callback_url", slow),
            &r));
        CHECK_STATUS(&r, 202);
        itest_resp_release(&r);
    }
    free(submit_async(
        s, t.a,
        json_pack("{s:s, s:s}", "code", "print(1)", "callback_url", slow), &r));
    check_429(&r, 1, 60, "tenant-callbacks");
    itest_resp_release(&r);
    double t0 = itest_now();
    char *id = submit_async(
        s, t.b,
        json_pack("{s:s, s:s}", "code", "print(2)", "callback_url", fast), &r);
    CHECK_STATUS(&r, 202);
    itest_resp_release(&r);
    /* Bounded poll: B's callback arrives while A's hang (an attempt
     * hangs 15 s; A may hold only half the delivery threads). */
    while (responder_served(&ok) < 1 && itest_now() - t0 < 10)
        usleep(20 * 1000);
    CHECKF(responder_served(&ok) == 1,
           "B's callback did not arrive within 10 s while A's hung");
    close(hang); /* A's pending connections are reset */
    responder_stop(&ok);
    free(id);
    free(slow);
    free(fast);
    itest_stop(s);
    tenants_free(&t);
}

/* ---- URL ingest --------------------------------------------------------- */

struct ingest {
    struct itest_server *s;
    const char *key;
    char *url;
    pthread_t thread;
    long status;
};

static long ingest(struct itest_server *s, const char *key, const char *url,
                   long timeout_ms)
{
    struct itest_resp r;
    char *body = itest_fmt("{\"url\": \"%s\", \"filename\": \"x.txt\"}", url);
    struct itest_req rq = {.method = "POST",
                           .path = "/v1/files",
                           .key = key,
                           .user_id = "u1",
                           .content_type = "application/json",
                           .body = body,
                           .body_len = strlen(body),
                           .timeout_ms = timeout_ms};
    long st = itest_do(s, &rq, &r);
    if (st == 429)
        check_429(&r, 1, 1, "tenant-fetches");
    itest_resp_release(&r);
    free(body);
    return st;
}

static void *ingest_main(void *arg)
{
    struct ingest *in = arg;
    in->status = ingest(in->s, in->key, in->url, 90000);
    return NULL;
}

static void fetches_shared(void)
{
    const char *args[] = {"--fetch-allow",
                          "127.0.0.1/32",
                          "--fetch-timeout",
                          "60s",
                          "--policy.standard.tenant-fetches",
                          "2",
                          NULL};
    struct itest_opts o = {.args = args};
    struct itest_server *s = itest_start(&o);
    struct tenants t;
    struct responder ok;
    struct ingest in[2];
    int hang_port = 0;
    REQUIRE(s);
    REQUIRE(tenants_make(s, &t));
    int hang = itest_listen_local(&hang_port, 64);
    REQUIRE(hang >= 0);
    REQUIRE(responder_start(&ok));
    char *slow = itest_fmt("http://127.0.0.1:%d/a.txt", hang_port);
    char *fast = itest_fmt("http://127.0.0.1:%d/b.txt", ok.port);
    for (int i = 0; i < 2; i++) {
        in[i] = (struct ingest){.s = s, .key = t.a, .url = slow};
        REQUIRE(pthread_create(&in[i].thread, NULL, ingest_main, &in[i]) == 0);
    }
    CHECK(itest_wait_status_int(s, "url_fetches.running", 2, 30000));
    /* A's third fetch is refused at once, B's is served meanwhile. */
    CHECK_INT(ingest(s, t.a, slow, 10000), 429);
    CHECK_INT(ingest(s, t.b, fast, 10000), 201);
    close(hang);
    for (int i = 0; i < 2; i++) {
        pthread_join(in[i].thread, NULL);
        CHECKF(in[i].status >= 500, "A's fetch %d: %ld", i, in[i].status);
    }
    responder_stop(&ok);
    free(slow);
    free(fast);
    itest_stop(s);
    tenants_free(&t);
}

/* ---- connections -------------------------------------------------------- */

/* A non-blocking socket from address from (e.g. "127.0.0.2") connecting
 * to s; -1 on failure. */
static int connect_from(const struct itest_server *s, const char *from)
{
    struct sockaddr_in src = {.sin_family = AF_INET};
    struct sockaddr_in dst = {.sin_family = AF_INET,
                              .sin_port = htons((uint16_t)s->port)};
    inet_pton(AF_INET, from, &src.sin_addr);
    inet_pton(AF_INET, "127.0.0.1", &dst.sin_addr);
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0)
        return -1;
    if (bind(fd, (struct sockaddr *)&src, sizeof(src)) ||
        (connect(fd, (struct sockaddr *)&dst, sizeof(dst)) &&
         errno != EINPROGRESS)) {
        close(fd);
        return -1;
    }
    return fd;
}

#define ATTACKERS 1100

/* No options: the defaults (max-connections 1024, max-connections-per-ip
 * 128) keep room for other addresses, so a server without the per-address
 * bound, whose 1,024 connections the flood takes, fails the check. */
static void half_open_flood(void)
{
    struct rlimit rl = {.rlim_cur = 8192, .rlim_max = 8192};
    REQUIRE(setrlimit(RLIMIT_NOFILE, &rl) == 0); /* the server's too */
    struct itest_server *s = itest_start(NULL);
    REQUIRE(s);
    int *fds = calloc(ATTACKERS, sizeof(*fds));
    REQUIRE(fds);
    int opened = 0;
    for (int i = 0; i < ATTACKERS; i++) {
        fds[i] = connect_from(s, "127.0.0.2");
        opened += fds[i] >= 0;
    }
    CHECKF(opened == ATTACKERS, "opened only %d sockets", opened);
    struct pollfd p;
    for (int i = 0; i < ATTACKERS; i++) {
        p = (struct pollfd){.fd = fds[i], .events = POLLOUT};
        if (fds[i] >= 0 && poll(&p, 1, 2000) == 1)
            (void)send(fds[i], "GET /healthz HTTP/1.1\r\nHost: x\r\n", 32,
                       MSG_NOSIGNAL);
    }
    /* Another address is answered at once. */
    struct itest_req rq = {.path = "/healthz", .timeout_ms = 2000};
    struct itest_resp r;
    double t0 = itest_now();
    itest_do(s, &rq, &r);
    CHECK_STATUS(&r, 200);
    CHECKF(itest_now() - t0 < 2, "/healthz took %.1f s", itest_now() - t0);
    itest_resp_release(&r);
    for (int i = 0; i < ATTACKERS; i++)
        if (fds[i] >= 0)
            close(fds[i]);
    free(fds);
    itest_stop(s);
}

static void trickled_head(void)
{
    const char *args[] = {"--request-header-timeout", "3s", NULL};
    struct itest_opts o = {.args = args};
    struct itest_server *s = itest_start(&o);
    struct pollfd p;
    double t0;
    REQUIRE(s);
    /* One connection trickling its head a byte at a time: closed by the
     * head deadline (3 s), though it is never idle for the 60 s idle
     * timeout. */
    int fd = connect_from(s, "127.0.0.3");
    REQUIRE(fd >= 0);
    static const char head[] = "GET /healthz HTTP/1.1\r\nX-Slow: "
                               "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
                               "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
    t0 = itest_now();
    bool closed = false;
    for (size_t i = 0; i < sizeof(head) - 1 && !closed; i++) {
        /* The trickle's pace: wait 200 ms for the server to close it. */
        p = (struct pollfd){.fd = fd, .events = POLLIN};
        if (poll(&p, 1, 200) == 1) {
            char c;
            closed = recv(fd, &c, 1, 0) <= 0;
        }
        if (!closed && send(fd, head + i, 1, MSG_NOSIGNAL) != 1)
            closed = true;
    }
    double took = itest_now() - t0;
    CHECKF(closed && took >= 2.5 && took < 10,
           "a trickled head: closed %d after %.1f s", closed, took);
    close(fd);
    CHECK(itest_wait_log_line(s, 5000,
                              "closed 1 connection(s) whose request "
                              "head did not arrive within 3 s",
                              NULL));
    itest_stop(s);
}

/* A keep-alive connection idle past the head's deadline after a request
 * is closed as well, and quietly: that is no attack, so no warning. */
static void idle_keep_alive_closed_quietly(void)
{
    const char *args[] = {"--request-header-timeout", "2s", NULL};
    struct itest_opts o = {.args = args};
    struct itest_server *s = itest_start(&o);
    REQUIRE(s);
    int fd = connect_from(s, "127.0.0.1");
    REQUIRE(fd >= 0);
    static const char req[] = "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n";
    CHECK(itest_send_all(fd, req, sizeof(req) - 1));
    /* The answer, then the end of the connection within the deadline's
     * bound (the read waits for either; bounded). */
    char buf[4096];
    size_t got = 0;
    bool eof = false;
    double t0 = itest_now();
    while (!eof && itest_now() < t0 + 10) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, 500) != 1)
            continue;
        ssize_t n = recv(fd, buf + got, sizeof(buf) - 1 - got, 0);
        eof = n <= 0;
        got += n > 0 ? (size_t)n : 0;
    }
    buf[got] = '\0';
    CHECKF(!strncmp(buf, "HTTP/1.1 200", 12), "answer: %s", buf);
    CHECKF(eof && itest_now() - t0 >= 1.5,
           "the idle connection: closed %d after %.1f s", eof,
           itest_now() - t0);
    close(fd);
    char *log = itest_read_log(s);
    CHECKF(log && !strstr(log, "did not arrive"),
           "an idle keep-alive connection was logged as an attack");
    free(log);
    itest_stop(s);
}

TEST_MAIN(T(exec_slots_shared), T(async_results_shared), T(callbacks_shared),
          T(fetches_shared), T(half_open_flood), T(trickled_head),
          T(idle_keep_alive_closed_quietly))
