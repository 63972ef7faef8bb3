/*
 * test_live.c - live executions (issue 22): a streamed answer
 * (Server-Sent Events) in the order and at the time the code writes,
 * its result event equal to the synchronous answer, the keep-alive
 * comment, a client that leaves (cancel, or detach), a client that reads
 * nothing (its run ends, the service's memory does not grow), cancel of
 * queued and running executions, and the refusals.  Runs cold, warm
 * (integration-warm/) and in a session (integration-session/: every
 * streamed or cancelled run is a call in a session of the test's own).
 *
 * The stream is read with a plain socket and a small HTTP/1.1 chunked
 * reader here, so what is checked is the bytes on the wire.
 */
#include <ctype.h>
#include <dirent.h>
#include <poll.h>
#include <pthread.h>
#include <sys/socket.h>
#include <unistd.h>

#include "sse.h"

static struct itest_server *srv;

/* maybe_session's end: the session ended (when there is one) and sid
 * freed. */
static void session_done(const char *user, char *sid)
{
    if (sid)
        session_end(srv, user, sid);
    free(sid);
}

/* A session for this test's runs in session mode, else NULL. */
static char *maybe_session(const char *user)
{
    return itest_exec_session() ? session_new(srv, user) : NULL;
}

static bool wait_status(const char *user, const char *id, const char *want,
                        char *st, size_t stsz, json_t **result)
{
    return itest_exec_wait_status(srv, user, id, want, st, stsz, result);
}

/* Processes on the host whose command line holds marker. */
static int procs_with(const char *marker)
{
    DIR *d = opendir("/proc");
    struct dirent *de;
    int found = 0;
    while (d && (de = readdir(d))) {
        if (!isdigit((unsigned char)de->d_name[0]))
            continue;
        char *p = itest_fmt("/proc/%s/cmdline", de->d_name);
        size_t len = 0;
        char *cmd = itest_read_file(p, &len);
        for (size_t k = 0; cmd && k < len; k++)
            if (!cmd[k])
                cmd[k] = ' ';
        if (cmd && len && memmem(cmd, len, marker, strlen(marker)))
            found++;
        free(cmd);
        free(p);
    }
    if (d)
        closedir(d);
    return found;
}

/* ---- tests -------------------------------------------------------------- */

/* Events come as the code writes them: the first chunk before a later
 * sleep ends, stdout and stderr in order, ids from 1, and the result
 * last; the answer is 200 text/event-stream with X-Execution-Id. */
static void test_order_and_timing(void)
{
    char *sid = maybe_session("u-order");
    char *body = body_of("import sys, time\n"
                         "print('first')\n"
                         "sys.stderr.write('warn\\n')\n"
                         "time.sleep(3)\n"
                         "print('second')\n",
                         false, sid, NULL);
    struct sse c;
    sse_open(&c, srv, srv->admin_key, "u-order", body, "text/event-stream");
    CHECKF(c.status == 200, "status %d", c.status);
    char ct[128] = "", xid[128] = "";
    CHECK(sse_header(&c, "Content-Type", ct, sizeof ct) &&
          !strncmp(ct, "text/event-stream", 17));
    CHECK(sse_header(&c, "X-Execution-Id", xid, sizeof xid));
    /* stdout's "first\n" (one event, or "first" and "\n": print writes
     * twice, unbuffered), then stderr's "warn\n". */
    struct sse_event e;
    char early[64] = "";
    double t_first = -1;
    long next = 1;
    while (sse_next(&c, 20000, &e) && !strcmp(e.kind, "stdout")) {
        CHECKF(e.id == next, "event id %ld, want %ld", e.id, next);
        next = e.id + 1;
        if (t_first < 0)
            t_first = itest_now();
        json_t *d = json_loads(e.data, JSON_DECODE_ANY, NULL);
        snprintf(early + strlen(early), sizeof early - strlen(early), "%s",
                 json_string_value(d) ? json_string_value(d) : "?");
        json_decref(d);
        sse_event_release(&e);
    }
    CHECKF(!strcmp(early, "first\n"), "stdout before stderr: %s", early);
    CHECKF(!strcmp(e.kind, "stderr") && e.id == next && e.data &&
               !strcmp(e.data, "\"warn\\n\""),
           "then %s %ld %s", e.kind, e.id, e.data ? e.data : "");
    sse_event_release(&e);
    char *out = NULL;
    json_t *res = sse_collect(&c, 20000, next + 1, &out, NULL);
    double t_end = itest_now();
    CHECKF(t_end - t_first >= 2.5,
           "the first chunk came %.2f s before the end: not before the "
           "sleep ended",
           t_end - t_first);
    CHECKF(res && json_is_true(json_object_get(res, "success")),
           "result not a success");
    CHECKF(streq(itest_json_str(res, "execution_id"), xid), "X-Execution-Id %s",
           xid);
    CHECKF(out && !strcmp(out, "second\n"), "later stdout %s", out ? out : "");
    CHECK(streq(itest_json_str(res, "stdout"), "first\nsecond\n"));
    CHECK(c.eof || !sse_next(&c, 2000, &e));
    json_decref(res);
    free(out);
    sse_close(&c);
    free(body);
    session_done("u-order", sid);
}

/* The fields of a result that two runs of the same code share. */
static const char *const same_fields[] = {
    "success",    "exit_code",     "timed_out",        "cancelled",
    "stdout",     "stderr",        "stdout_truncated", "stderr_truncated",
    "error.type", "error.message",
};

static void check_same(const json_t *a, const json_t *b, const char *code)
{
    for (size_t i = 0; i < (sizeof(same_fields) / sizeof(same_fields[0]));
         i++) {
        const char *f = same_fields[i];
        json_t *x = itest_json_get(a, f), *y = itest_json_get(b, f);
        char *xs = x ? json_dumps(x, JSON_ENCODE_ANY) : NULL;
        char *ys = y ? json_dumps(y, JSON_ENCODE_ANY) : NULL;
        CHECKF(json_equal(x, y) || (!x && !y),
               "%s differs for %.40s: stream %.200s, sync %.200s", f, code,
               xs ? xs : "(none)", ys ? ys : "(none)");
        free(xs);
        free(ys);
    }
    json_t *da = json_object_get(a, "display"),
           *db = json_object_get(b, "display");
    CHECK(json_array_size(da) == json_array_size(db));
    json_t *ga = json_object_get(a, "generated_files");
    json_t *gb = json_object_get(b, "generated_files");
    CHECK(json_array_size(ga) == json_array_size(gb));
}

/* The result event is exactly what a synchronous call answers (the same
 * caps, flags and files), for success, an exception, a timeout, output
 * over the cap, a generated file and a displayed value; the stdout
 * events join to the result's stdout. */
static void test_result_equals_sync(void)
{
    static const struct {
        const char *code;
        int timeout;
    } cases[] = {
        {"print('hello')\n", 0},
        {"print('before')\n1/0\n", 0},
        {"import time\nprint('t')\ntime.sleep(30)\n", 2},
        {"import sys\nfor i in range(3000):\n"
         "    sys.stdout.write('x' * 1000 + '\\n')\n",
         0},
        {"open('out.txt', 'w').write('data')\nprint('wrote')\n", 0},
        {"display({'a': 1})\n42\n", 0},
    };
    char *sid = maybe_session("u-same");
    for (size_t i = 0; i < (sizeof(cases) / sizeof(cases[0])); i++) {
        json_t *extra = json_object();
        if (cases[i].timeout)
            json_object_set_new(extra, "timeout",
                                json_integer(cases[i].timeout));
        char *sb = body_of(cases[i].code, true, sid, json_deep_copy(extra));
        struct sse c;
        sse_open(&c, srv, srv->admin_key, "u-same", sb, NULL);
        CHECKF(c.status == 200, "case %zu: status %d", i, c.status);
        char *out = NULL;
        json_t *streamed = sse_collect(&c, 30000, 1, &out, NULL);
        sse_close(&c);
        /* A timeout ends a session: the synchronous twin gets a new one. */
        if (sid && cases[i].timeout) {
            session_end(srv, "u-same", sid);
            free(sid);
            sid = maybe_session("u-same");
        }
        char *yb = body_of(cases[i].code, false, sid, extra);
        CHECKF(streamed != NULL, "case %zu: no result event", i);
        struct itest_resp r;
        itest_request(srv, "POST", "/v1/executions", srv->admin_key, "u-same",
                      "application/json", yb, strlen(yb), NULL, &r);
        CHECK_STATUS(&r, 200);
        if (streamed && r.json) {
            check_same(streamed, r.json, cases[i].code);
            CHECKF(out && !strcmp(out, itest_json_str(streamed, "stdout")),
                   "case %zu: the stdout events are not the result's stdout",
                   i);
        }
        itest_resp_release(&r);
        json_decref(streamed);
        free(out);
        free(sb);
        free(yb);
        /* ... and so does the next case. */
        if (sid && cases[i].timeout) {
            session_end(srv, "u-same", sid);
            free(sid);
            sid = maybe_session("u-same");
        }
    }
    session_done("u-same", sid);
}

/* A run that prints nothing for a while gets the keep-alive comment; a
 * flood of tiny writes comes as few events. */
static void test_keepalive_and_coalescing(void)
{
    char *sid = maybe_session("u-ka");
    char *body = body_of("import time, sys\n"
                         "for i in range(20000):\n"
                         "    sys.stdout.write('.')\n"
                         "    sys.stdout.flush()\n"
                         "time.sleep(6.5)\n",
                         true, sid, NULL);
    struct sse c;
    sse_open(&c, srv, srv->admin_key, "u-ka", body, NULL);
    CHECK(c.status == 200);
    struct sse_event e;
    int comments = 0, chunks = 0;
    size_t dots = 0;
    bool result = false;
    while (!result && sse_next(&c, 30000, &e)) {
        if (!e.kind[0])
            comments += e.data && strstr(e.data, "keep-alive") != NULL;
        else if (!strcmp(e.kind, "stdout")) {
            chunks++;
            json_t *d = json_loads(e.data, JSON_DECODE_ANY, NULL);
            dots += json_string_length(d);
            json_decref(d);
        }
        result = !strcmp(e.kind, "result");
        sse_event_release(&e);
    }
    CHECK(result);
    CHECKF(comments >= 1, "keep-alive comments: %d", comments);
    CHECKF(dots == 20000, "dots %zu", dots);
    CHECKF(chunks < 2000, "20000 one-byte writes came as %d events", chunks);
    sse_close(&c);
    free(body);
    session_done("u-ka", sid);
}

/* A client that disconnects cancels the run: its status turns
 * "cancelled" and no process of it is left (a child process it started
 * included). */
static void test_disconnect_cancels(void)
{
    char marker[64];
    snprintf(marker, sizeof marker, "ipd-live-%d-%ld", (int)getpid(),
             (long)(itest_now() * 1000) % 1000000);
    char *sid = maybe_session("u-gone");
    char *code = itest_fmt("import subprocess, sys, time\n"
                           "subprocess.Popen([sys.executable, '-c', "
                           "'import time; time.sleep(600)', '%s'])\n"
                           "print('started', flush=True)\n"
                           "time.sleep(600)\n",
                           marker);
    char *body = body_of(code, true, sid, NULL);
    struct sse c;
    sse_open(&c, srv, srv->admin_key, "u-gone", body, NULL);
    CHECK(c.status == 200);
    char xid[128] = "";
    CHECK(sse_header(&c, "X-Execution-Id", xid, sizeof xid));
    struct sse_event e;
    CHECK(sse_next(&c, 20000, &e) && !strcmp(e.kind, "stdout"));
    sse_event_release(&e);
    /* Bounded: the child's exec may still be under way on a busy host. */
    int running = 0;
    for (int i = 0; i < 100 && !running; i++) {
        running = procs_with(marker);
        if (!running)
            usleep(50 * 1000);
    }
    CHECKF(running >= 1, "the run's child: %d processes", running);
    double t0 = itest_now();
    sse_close(&c);
    char st[32];
    json_t *res = NULL;
    CHECKF(wait_status("u-gone", xid, "cancelled", st, sizeof st, &res),
           "status %s after the client left", st);
    fprintf(stderr, "test_live: cancelled %.2f s after the disconnect\n",
            itest_now() - t0);
    CHECKF(procs_with(marker) == 0, "%d process(es) of the run left",
           procs_with(marker));
    json_decref(res);
    free(body);
    free(code);
    session_done("u-gone", sid);
}

/* "detach": true: the run goes on after its client left, and its result
 * is kept like an asynchronous one's. */
static void test_detach(void)
{
    char *sid = maybe_session("u-detach");
    json_t *extra = json_pack("{s:b}", "detach", 1);
    char *body = body_of("import time\nprint('one', flush=True)\n"
                         "time.sleep(2)\nprint('two')\n",
                         true, sid, extra);
    struct sse c;
    sse_open(&c, srv, srv->admin_key, "u-detach", body, NULL);
    CHECK(c.status == 200);
    char xid[128] = "";
    CHECK(sse_header(&c, "X-Execution-Id", xid, sizeof xid));
    struct sse_event e;
    CHECK(sse_next(&c, 20000, &e));
    sse_event_release(&e);
    sse_close(&c);
    char st[32];
    json_t *res = NULL;
    CHECKF(wait_status("u-detach", xid, "done", st, sizeof st, &res),
           "detached run: status %s", st);
    CHECKF(res && streq(itest_json_str(res, "stdout"), "one\ntwo\n"),
           "detached result stdout %s",
           res ? itest_json_str(res, "stdout") : "(none)");
    json_decref(res);
    free(body);
    session_done("u-detach", sid);
}

/* A client that reads nothing: the run blocks on its full pipe, the
 * service's memory stays flat while it would print 100 MB, and the client
 * is treated as gone (its run cancelled). */
static long server_rss_kib(void)
{
    char *p = itest_fmt("/proc/%d/status", (int)srv->pid);
    char *st = itest_read_file(p, NULL);
    const char *v = st ? strstr(st, "VmRSS:") : NULL;
    long kib = v ? atol(v + 6) : -1;
    free(st);
    free(p);
    return kib;
}

static void test_slow_reader(void)
{
    /* An output limit over what is printed: only the client's not
     * reading can hold the run back. */
    const char *const args[] = {"--policy.standard.output-limit", "256M", NULL};
    struct itest_opts o = {.args = args};
    struct itest_server *big = itest_start(&o);
    REQUIRE(big);
    struct itest_server *keep = srv;
    srv = big;
    char *sid = maybe_session("u-slow");
    char *body = body_of("import sys\nline = 'y' * 1023 + '\\n'\n"
                         "for i in range(100 * 1024):\n"
                         "    sys.stdout.write(line)\n",
                         true, sid, NULL);
    long before = server_rss_kib(), peak = before;
    struct sse c;
    sse_open(&c, srv, srv->admin_key, "u-slow", body, NULL);
    CHECK(c.status == 200);
    char xid[128] = "";
    CHECK(sse_header(&c, "X-Execution-Id", xid, sizeof xid));
    char st[32] = "";
    json_t *res = NULL;
    /* Read nothing; watch the server's memory until the run is over
     * (the stall rule: within some 5 s; bounded at 60 s). */
    bool over = false;
    for (double end = itest_now() + 60; !over && itest_now() < end;) {
        long now = server_rss_kib();
        peak = now > peak ? now : peak;
        over =
            itest_exec_status_is(srv, "u-slow", xid, NULL, st, sizeof st, &res);
        if (!over)
            usleep(50 * 1000);
    }
    CHECKF(over && !strcmp(st, "cancelled"),
           "a client that reads nothing: status %s", st);
    /* A sanitizer build keeps freed memory in quarantine: its RSS says
     * little about what is held. */
    long bound = ITEST_SANITIZED ? 160 * 1024 : 40 * 1024;
    CHECKF(peak - before < bound,
           "server RSS grew %ld KiB (from %ld) while a client read nothing",
           peak - before, before);
    fprintf(stderr, "test_live: slow reader: RSS %ld -> peak %ld KiB\n", before,
            peak);
    json_decref(res);
    sse_close(&c);
    free(body);
    session_done("u-slow", sid);
    srv = keep;
    itest_stop(big);
}

/* A synchronous caller whose run is cancelled from another connection
 * gets the cancelled result: cancelled true, timed_out false,
 * error.type Cancelled. */
struct sync_call {
    const char *body;
    const char *user;
    struct itest_resp r;
};

static void *sync_call_main(void *arg)
{
    struct sync_call *sc = arg;
    itest_request(srv, "POST", "/v1/executions", srv->admin_key, sc->user,
                  "application/json", sc->body, strlen(sc->body), NULL, &sc->r);
    return NULL;
}

/* The id of user's newest execution with status st (bounded wait). */
static char *newest_with(const char *user, const char *st)
{
    for (int i = 0; i < 400; i++) {
        struct itest_resp r;
        itest_request(srv, "GET", "/v1/executions?limit=5", srv->admin_key,
                      user, NULL, NULL, 0, NULL, &r);
        json_t *a = json_object_get(r.json, "executions"), *x;
        size_t k;
        json_array_foreach(a, k, x)
        {
            if (!strcmp(json_string_value(json_object_get(x, "status")), st)) {
                char *id = strdup(
                    json_string_value(json_object_get(x, "execution_id")));
                itest_resp_release(&r);
                return id;
            }
        }
        itest_resp_release(&r);
        usleep(50 * 1000);
    }
    return NULL;
}

static long delete_exec(const char *user, const char *id)
{
    struct itest_resp r;
    char *path = itest_fmt("/v1/executions/%s", id);
    long st = itest_request(srv, "DELETE", path, srv->admin_key, user, NULL,
                            NULL, 0, NULL, &r);
    itest_resp_release(&r);
    free(path);
    return st;
}

static void test_cancel_running(void)
{
    char *sid = maybe_session("u-cancel");
    char *body = body_of("import time\nprint('x', flush=True)\n"
                         "time.sleep(60)\n",
                         false, sid, NULL);
    struct sync_call sc = {.body = body, .user = "u-cancel"};
    pthread_t t;
    pthread_create(&t, NULL, sync_call_main, &sc);
    char *id = newest_with("u-cancel", "running");
    CHECK(id != NULL);
    if (id) {
        CHECKF(delete_exec("u-other", id) == 404, "another user cancelled it");
        CHECK(delete_exec("u-cancel", id) == 202);
    }
    pthread_join(t, NULL);
    CHECK_STATUS(&sc.r, 200);
    CHECK(json_is_true(json_object_get(sc.r.json, "cancelled")));
    CHECK(json_is_false(json_object_get(sc.r.json, "timed_out")));
    CHECK(json_is_false(json_object_get(sc.r.json, "success")));
    CHECKF(streq(itest_json_str(sc.r.json, "error.type"), "Cancelled"),
           "error.type %s", itest_json_str(sc.r.json, "error.type"));
    if (sid) {
        /* KeyboardInterrupt, and the session goes on. */
        CHECKF(streq(itest_json_str(sc.r.json, "cancel_mode"), "interrupted"),
               "cancel_mode %s", itest_json_str(sc.r.json, "cancel_mode"));
        const char *tb = itest_json_str(sc.r.json, "error.traceback");
        CHECKF(tb && strstr(tb, "KeyboardInterrupt"), "traceback %s",
               tb ? tb : "(none)");
    }
    if (id) {
        char st[32];
        CHECK(wait_status("u-cancel", id, "cancelled", st, sizeof st, NULL));
        CHECKF(delete_exec("u-cancel", id) == 404,
               "a cancelled execution cancelled again");
    }
    itest_resp_release(&sc.r);
    free(id);
    free(body);
    if (sid) {
        /* The session still answers, its state intact. */
        char *b2 = body_of("print('alive')\n", false, sid, NULL);
        struct itest_resp r;
        itest_request(srv, "POST", "/v1/executions", srv->admin_key, "u-cancel",
                      "application/json", b2, strlen(b2), NULL, &r);
        CHECK_STATUS(&r, 200);
        CHECK(streq(itest_exec_stdout(&r), "alive\n"));
        itest_resp_release(&r);
        free(b2);
        session_end(srv, "u-cancel", sid);
    }
    free(sid);
}

/* A session call that swallows KeyboardInterrupt is killed after the
 * grace: cancel_mode "killed", and the session has ended. */
static void test_cancel_session_killed(void)
{
    if (!itest_exec_session())
        return; /* a session's own case: the other modes kill at once */
    char *sid = session_new(srv, "u-stub");
    char *body = body_of("import time\nprint('x', flush=True)\n"
                         "while True:\n"
                         "    try:\n"
                         "        time.sleep(60)\n"
                         "    except KeyboardInterrupt:\n"
                         "        pass\n",
                         false, sid, NULL);
    struct sync_call sc = {.body = body, .user = "u-stub"};
    pthread_t t;
    pthread_create(&t, NULL, sync_call_main, &sc);
    char *id = newest_with("u-stub", "running");
    CHECK(id && delete_exec("u-stub", id) == 202);
    pthread_join(t, NULL);
    CHECK_STATUS(&sc.r, 200);
    CHECK(json_is_true(json_object_get(sc.r.json, "cancelled")));
    CHECKF(streq(itest_json_str(sc.r.json, "cancel_mode"), "killed"),
           "cancel_mode %s", itest_json_str(sc.r.json, "cancel_mode"));
    itest_resp_release(&sc.r);
    char *b2 = body_of("print(1)\n", false, sid, NULL);
    struct itest_resp r;
    itest_request(srv, "POST", "/v1/executions", srv->admin_key, "u-stub",
                  "application/json", b2, strlen(b2), NULL, &r);
    CHECK_ERROR(&r, 410, "session_expired");
    itest_resp_release(&r);
    free(b2);
    free(id);
    free(body);
    free(sid);
}

/* A queued execution is taken off the queue at once: its status turns
 * "cancelled" while the one ahead of it still runs, and its result says
 * it never started. */
static void test_cancel_queued(void)
{
    /* The queue is the pool's, the same in every mode; in session mode
     * the harness would turn this test's runs into session calls. */
    if (itest_exec_session())
        return;
    const char *const args[] = {"--exec-slots", "1", NULL};
    struct itest_opts o = {.args = args};
    struct itest_server *one = itest_start(&o);
    REQUIRE(one);
    struct itest_server *keep = srv;
    srv = one;
    struct itest_resp r;
    const char *hog = "{\"code\":\"import time\\ntime.sleep(60)\","
                      "\"async\":true}";
    itest_request(srv, "POST", "/v1/executions", srv->admin_key, "u-q",
                  "application/json", hog, strlen(hog), NULL, &r);
    CHECK_STATUS(&r, 202);
    char *hog_id = itest_json_dup(r.json, "execution_id");
    itest_resp_release(&r);
    char st[32];
    CHECK(wait_status("u-q", hog_id, "running", st, sizeof st, NULL));
    char *body = body_of("print('never')\n", false, NULL, NULL);
    struct sync_call sc = {.body = body, .user = "u-q"};
    pthread_t t;
    pthread_create(&t, NULL, sync_call_main, &sc);
    char *id = newest_with("u-q", "queued");
    CHECK(id && delete_exec("u-q", id) == 202);
    pthread_join(t, NULL);
    CHECK_STATUS(&sc.r, 200);
    CHECK(json_is_true(json_object_get(sc.r.json, "cancelled")));
    CHECK(streq(itest_json_str(sc.r.json, "error.type"), "Cancelled"));
    CHECK(streq(itest_exec_stdout(&sc.r), ""));
    itest_resp_release(&sc.r);
    /* The one ahead still runs.  A stream queued behind it is answered
     * at once and kept alive while it waits; it runs once the one ahead
     * is cancelled (an async one, whose cancelled result is kept). */
    CHECK(wait_status("u-q", hog_id, "running", st, sizeof st, NULL));
    struct sse c;
    sse_open(&c, srv, srv->admin_key, "u-q",
             "{\"code\":\"print('late')\",\"stream\":true}", NULL);
    CHECKF(c.status == 200, "a queued stream: %d", c.status);
    struct sse_event e;
    bool kept_alive = false;
    while (!kept_alive && sse_next(&c, 12000, &e)) {
        kept_alive = !e.kind[0];
        CHECKF(!e.kind[0], "an event (%s) while queued", e.kind);
        sse_event_release(&e);
    }
    CHECK(kept_alive);
    CHECK(delete_exec("u-q", hog_id) == 202);
    char *late = NULL;
    json_t *lres = sse_collect(&c, 30000, 1, &late, NULL);
    CHECKF(lres && streq(late, "late\n"), "the queued stream's stdout %s",
           late ? late : "(none)");
    json_decref(lres);
    free(late);
    sse_close(&c);
    json_t *res = NULL;
    CHECK(wait_status("u-q", hog_id, "cancelled", st, sizeof st, &res));
    CHECK(res && json_is_true(json_object_get(res, "cancelled")));
    json_decref(res);
    CHECK(delete_exec("u-q", "exec_aaaaaaaaaaaaaaaaaaaaaaaaaa") == 404);
    free(id);
    free(hog_id);
    free(body);
    srv = keep;
    itest_stop(one);
}

/* A stored generated File comes as a `file` event, each package's
 * install result as an `install` event and each displayed bundle as a
 * `display` event, before the result, each equal to its entry in the
 * result.  (An index nobody listens on: the install
 * fails, soon; a session keeps its packages, so there only the file.) */
static void test_file_and_install_events(void)
{
    const char *const args[] = {"--pip-index-url", "http://127.0.0.1:1/simple/",
                                NULL};
    struct itest_opts o = {.args = args};
    struct itest_server *s2 = itest_start(&o);
    REQUIRE(s2);
    struct itest_server *keep = srv;
    srv = s2;
    char *sid = maybe_session("u-ev");
    json_t *extra =
        sid ? json_object() : json_pack("{s:[s]}", "packages", "polars");
    char *body = body_of("open('out.txt', 'w').write('data')\n"
                         "display({'a': 1})\n",
                         true, sid, extra);
    struct sse c;
    sse_open(&c, srv, srv->admin_key, "u-ev", body, NULL);
    CHECKF(c.status == 200, "status %d", c.status);
    struct sse_event e;
    json_t *file = NULL, *inst = NULL, *res = NULL, *shown = json_array();
    bool order_ok = true;
    while (!res && sse_next(&c, 120000, &e)) {
        json_t *d = e.data ? json_loads(e.data, JSON_DECODE_ANY, NULL) : NULL;
        if (!strcmp(e.kind, "install")) {
            order_ok = order_ok && !file;
            json_decref(inst);
            inst = json_incref(d);
        } else if (!strcmp(e.kind, "file")) {
            file = json_incref(d);
        } else if (!strcmp(e.kind, "display")) {
            json_array_append(shown, d);
        } else if (!strcmp(e.kind, "result")) {
            res = json_incref(d);
        }
        json_decref(d);
        sse_event_release(&e);
    }
    CHECK(res != NULL);
    CHECKF(order_ok, "an install event after a file event");
    json_t *g0 = json_array_get(json_object_get(res, "generated_files"), 0);
    CHECKF(file && g0 && json_equal(file, g0),
           "the file event is not the result's generated file");
    CHECK(streq(itest_json_str(file, "filename"), "out.txt"));
    CHECKF(json_array_size(shown) == 1 &&
               json_equal(shown, json_object_get(res, "display")),
           "%zu display events, not the result's display",
           json_array_size(shown));
    if (!sid) {
        json_t *i0 =
            json_array_get(json_object_get(res, "installed_packages"), 0);
        CHECKF(inst && i0 && json_equal(inst, i0),
               "the install event is not the result's installed package");
        CHECK(streq(itest_json_str(inst, "package"), "polars"));
        CHECK(streq(itest_json_str(inst, "status"), "failed"));
    }
    json_decref(file);
    json_decref(shown);
    json_decref(inst);
    json_decref(res);
    sse_close(&c);
    free(body);
    session_done("u-ev", sid);
    srv = keep;
    itest_stop(s2);
}

/* Refusals are ordinary JSON errors, not streams: detach without a
 * stream, a stream with async, and a failure before the run starts
 * (an unknown file). */
static void test_refusals(void)
{
    struct itest_resp r;
    const char *b1 = "{\"code\":\"print(1)\",\"detach\":true}";
    itest_request(srv, "POST", "/v1/executions", srv->admin_key, "u-ref",
                  "application/json", b1, strlen(b1), NULL, &r);
    CHECK_ERROR(&r, 400, "invalid_request");
    itest_resp_release(&r);
    const char *b2 = "{\"code\":\"print(1)\",\"stream\":true,\"async\":true}";
    itest_request(srv, "POST", "/v1/executions", srv->admin_key, "u-ref",
                  "application/json", b2, strlen(b2), NULL, &r);
    CHECK_ERROR(&r, 400, "invalid_request");
    itest_resp_release(&r);
    const char *b3 = "{\"code\":\"print(1)\",\"stream\":\"yes\"}";
    itest_request(srv, "POST", "/v1/executions", srv->admin_key, "u-ref",
                  "application/json", b3, strlen(b3), NULL, &r);
    CHECK_ERROR(&r, 400, "invalid_request");
    itest_resp_release(&r);
    struct sse c;
    sse_open(&c, srv, srv->admin_key, "u-ref",
             "{\"code\":\"print(1)\",\"stream\":true,"
             "\"files\":[\"file_aaaaaaaaaaaaaaaaaaaaaaaaaa\"]}",
             NULL);
    CHECKF(c.status == 404, "unknown file streamed: %d", c.status);
    char ct[128] = "";
    CHECK(sse_header(&c, "Content-Type", ct, sizeof ct) &&
          !strncmp(ct, "application/json", 16));
    sse_close(&c);
}

int main(void)
{
    static const struct test_case cases[] = {
        T(test_order_and_timing),
        T(test_result_equals_sync),
        T(test_keepalive_and_coalescing),
        T(test_disconnect_cancels),
        T(test_detach),
        T(test_slow_reader),
        T(test_cancel_running),
        T(test_cancel_session_killed),
        T(test_cancel_queued),
        T(test_file_and_install_events),
        T(test_refusals),
    };
    srv = itest_start(NULL);
    if (!srv)
        return 1;
    int rc = test_run(cases, (sizeof(cases) / sizeof(cases[0])));
    int before = test__failed_checks;
    itest_stop(srv);
    return rc || test__failed_checks != before;
}
