/*
 * test_session_workers.c - session create, delete and variables calls
 * run on workers of their own (issue 21, item 4), never on an HTTP event
 * thread and never on the URL-fetch threads.
 *
 * What is checked, each as an outcome seen over HTTP:
 *  - with --threads 1 (one event thread) and session zygotes that start
 *    slowly (a copy of the prelude dir whose prelude sleeps while a
 *    zygote loads it), a DELETE that waits for its session's processes
 *    and a create that waits for that session's uid stay pending while
 *    GET of the session, /healthz and a file upload are answered;
 *  - a tenant holding every session worker it may (variables calls whose
 *    __repr__ sleeps) does not delay another tenant's create, and gets
 *    429 naming tenant-sessions past its share of the places;
 *  - URL fetches stuck on a server that never answers, filling every
 *    fetch thread, do not delay a variables call;
 *  - SIGTERM with session requests running and waiting answers every one
 *    of them (the waiting ones 503) before the server exits.
 *
 * Ordering, not timing: each "pending" is a request whose answer has not
 * come back (a flag its thread sets) when another one's has; the work
 * that keeps it pending takes seconds (the prelude's sleep, a __repr__'s
 * sleep, a fetch that never ends), the request that must pass it
 * milliseconds.  Waits are bounded polls of the admin status.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"

#define CALL_MS 120000

/* Servers with cold slots (only sessions start zygotes), zygotes that
 * import little, no periodic execution check. */
#define BASE_CONF                                                              \
    "exec-mode = cold\n"                                                       \
    "warm-modules = json\n"                                                    \
    "ready-check-interval = never\n"                                           \
    "session-idle-timeout = 10m\n"                                             \
    "policy.standard.memory = 256M\n"

/* ---- a request on a thread of its own ----------------------------------- */

struct async_req {
    struct itest_server *s;
    const char *method, *path, *key, *user, *body;
    pthread_t thread;
    atomic_bool done; /* the answer (or the failure) came back */
    long status;
    char *sid;            /* a create's session id (free()) */
    char error[64];       /* the error code of a refusal */
    char retry_after[16]; /* its Retry-After, or "" */
};

static void *async_main(void *arg)
{
    struct async_req *a = arg;
    struct itest_resp r;
    struct itest_req rq = {.method = a->method,
                           .path = a->path,
                           .key = a->key,
                           .user_id = a->user,
                           .content_type = a->body ? "application/json" : NULL,
                           .body = a->body,
                           .body_len = a->body ? strlen(a->body) : 0,
                           .timeout_ms = CALL_MS};
    a->status = itest_do(a->s, &rq, &r);
    if (a->status == 201)
        a->sid = itest_json_dup(r.json, "session_id");
    if (itest_json_str(r.json, "error.code"))
        snprintf(a->error, sizeof(a->error), "%s",
                 itest_json_str(r.json, "error.code"));
    if (itest_header(&r, "Retry-After"))
        snprintf(a->retry_after, sizeof(a->retry_after), "%s",
                 itest_header(&r, "Retry-After"));
    itest_resp_release(&r);
    atomic_store(&a->done, true);
    return NULL;
}

static void async_start(struct async_req *a, struct itest_server *s,
                        const char *method, const char *path, const char *key,
                        const char *user, const char *body)
{
    memset(a, 0, sizeof(*a));
    a->s = s;
    a->method = method;
    a->path = path;
    a->key = key;
    a->user = user;
    a->body = body;
    atomic_init(&a->done, false);
    REQUIRE(pthread_create(&a->thread, NULL, async_main, a) == 0);
}

static void async_join(struct async_req *a)
{
    pthread_join(a->thread, NULL);
}

/* ---- helpers ----------------------------------------------------------- */

/* A new session of user (201 checked); its id (free()) or NULL. */
static char *new_session(struct itest_server *s, const char *key,
                         const char *user)
{
    struct itest_resp r;
    char *id = NULL;
    itest_request(s, "POST", "/v1/sessions", key, user, "application/json",
                  "{}", 2, NULL, &r);
    CHECK_STATUS(&r, 201);
    if (r.status == 201)
        id = itest_json_dup(r.json, "session_id");
    itest_resp_release(&r);
    if (id && !id[0]) {
        free(id);
        id = NULL;
    }
    return id;
}

/* Run code in session sid; 200 checked. */
static void run_ok(struct itest_server *s, const char *key, const char *user,
                   const char *sid, const char *code)
{
    struct itest_resp r;
    itest_exec(s, key, user,
               json_pack("{s:s, s:s}", "code", code, "session_id", sid),
               CALL_MS, &r);
    CHECK_STATUS(&r, 200);
    CHECKF(json_is_true(itest_json_get(r.json, "success")), "call: %s", r.body);
    itest_resp_release(&r);
}

/* A copy of the prelude dir whose prelude sleeps secs seconds when a
 * zygote loads it (only a zygote's environment names the warm modules;
 * a cold run's does not), so a session's zygote starts slowly and a
 * session ended meanwhile ends only then.  The dir (free() it; the test
 * removes it). */
static char *slow_prelude_dir(int secs)
{
    static const char *const files[] = {"prelude.py", "zygote.py",
                                        "venv_check.py"};
    char tmpl[] = "/tmp/interpd-prelude-XXXXXX";
    char *dir = NULL;
    if (!mkdtemp(tmpl) || chmod(tmpl, 0755)) {
        CHECKF(false, "cannot make %s", tmpl);
        return NULL;
    }
    dir = itest_fmt("%s", tmpl);
    for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
        char *src =
            itest_fmt("%s/service/exec/python/%s", ITEST_SOURCE_DIR, files[i]);
        char *dst = itest_fmt("%s/%s", dir, files[i]);
        size_t len = 0;
        char *text = itest_read_file(src, &len);
        FILE *f = text ? fopen(dst, "w") : NULL;
        CHECK(f && fwrite(text, 1, len, f) == len);
        if (f && !strcmp(files[i], "prelude.py"))
            fprintf(f,
                    "\nif 'IPD_WARM_MODULES' in os.environ:\n"
                    "    import time as _t\n"
                    "    _t.sleep(%d)\n",
                    secs);
        if (f)
            fclose(f);
        free(text);
        free(src);
        free(dst);
    }
    return dir;
}

/* ---- the event thread is never held ------------------------------------ */

/* One event thread; max-sessions 1.  A's DELETE waits for A's zygote
 * (asleep in its prelude for 2 s) and B's create for A's uid; meanwhile
 * GET A (410 at once: it ended), /healthz and an upload are answered.
 * With the session calls on the event thread, GET A came back only
 * after the DELETE. */
static void event_thread_not_held(void)
{
    char *pdir = slow_prelude_dir(2);
    REQUIRE(pdir);
    const char *args[] = {"--threads", "1", "--prelude-dir", pdir, NULL};
    struct itest_opts o = {.args = args,
                           .config = BASE_CONF "max-sessions = 1\n"};
    struct itest_server *s = itest_start(&o);
    REQUIRE(s);
    const char *k = s->admin_key;
    char *a = new_session(s, k, "u1");
    REQUIRE(a);
    char *path = itest_fmt("/v1/sessions/%s", a);
    struct async_req del, create;
    async_start(&del, s, "DELETE", path, k, "u1", NULL);

    /* Bounded poll until A is seen ended. */
    struct itest_resp r;
    long st = 0;
    for (double until = itest_now() + 30; st != 410 && itest_now() < until;) {
        st = itest_request(s, "GET", path, k, "u1", NULL, NULL, 0, NULL, &r);
        itest_resp_release(&r);
    }
    CHECK_INT(st, 410);
    CHECKF(!atomic_load(&del.done),
           "the DELETE came back (%ld) before GET saw the session end: "
           "it held the event thread",
           del.status);
    async_start(&create, s, "POST", "/v1/sessions", k, "u1", "{}");
    /* B waits for A's uid (max-sessions 1): on a session worker. */
    CHECK(itest_wait_status_int(s, "session_requests.running", 2, 30000));
    itest_request(s, "GET", "/healthz", NULL, NULL, NULL, NULL, 0, NULL, &r);
    CHECK_STATUS(&r, 200);
    itest_resp_release(&r);
    itest_upload_raw(s, k, "u1", "a.txt", "text/plain", "hello", 5, NULL, &r);
    CHECK_STATUS(&r, 201);
    itest_resp_release(&r);
    CHECKF(!atomic_load(&del.done) && !atomic_load(&create.done),
           "DELETE (%ld) or create (%ld) came back before /healthz and an "
           "upload",
           del.status, create.status);
    async_join(&del);
    async_join(&create);
    CHECK_INT(del.status, 204);
    /* B's create waits at most 5 s for A's uid: on a loaded machine A's
     * zygote (2 s asleep, then its imports and exit) may take longer,
     * and B is refused at the node's bound. */
    CHECKF(create.status == 201 || (create.status == 429 &&
                                    !strcmp(create.error, "too_many_requests")),
           "create: %ld %s", create.status, create.error);
    if (create.sid) {
        char *p2 = itest_fmt("/v1/sessions/%s", create.sid);
        itest_request(s, "DELETE", p2, k, "u1", NULL, NULL, 0, NULL, &r);
        CHECK_STATUS(&r, 204);
        itest_resp_release(&r);
        free(p2);
    }
    free(create.sid);
    free(path);
    free(a);
    itest_stop(s);
    itest_rm_rf(pdir);
    free(pdir);
}

/* ---- fair shares -------------------------------------------------------- */

/* A variables call into a session holding `s`, whose __repr__ sleeps:
 * it holds a session worker for about 6 s (under the 10 s bound). */
static const char slow_repr_code[] = "class Slow:\n"
                                     "    def __repr__(self):\n"
                                     "        import time\n"
                                     "        time.sleep(6)\n"
                                     "        return 'slow'\n"
                                     "s = Slow()\n";

#define FLOOD 4

/* Tenant A (policy flood: tenant-sessions 4, so 4 places of the session
 * workers' 68) holds 2 workers running and 2 places waiting with slow
 * variables calls; its next request is 429 naming tenant-sessions, and
 * tenant B's create is served while A's calls are still running. */
static void tenant_share(void)
{
    struct itest_opts o = {.config =
                               BASE_CONF "max-sessions = 8\n"
                                         "sessions-per-user = 8\n"
                                         "policy.flood.memory = 256M\n"
                                         "policy.flood.tenant-sessions = 4\n"};
    struct itest_server *s = itest_start(&o);
    REQUIRE(s);
    char *ka = itest_create_policy_key(s, "tenant-a", "flood");
    char *kb = itest_create_policy_key(s, "tenant-b", "standard");
    REQUIRE(ka && kb);
    char *sid[FLOOD] = {0};
    char *path[FLOOD] = {0};
    struct async_req vars[FLOOD];
    for (int i = 0; i < FLOOD; i++) {
        sid[i] = new_session(s, ka, "u1");
        REQUIRE(sid[i]);
        run_ok(s, ka, "u1", sid[i], slow_repr_code);
        path[i] = itest_fmt("/v1/sessions/%s/variables", sid[i]);
    }
    for (int i = 0; i < FLOOD; i++)
        async_start(&vars[i], s, "GET", path[i], ka, "u1", NULL);
    /* A runs at most half of the 4 workers; the rest of its calls wait. */
    CHECK(itest_wait_status_int(s, "session_requests.queued", 2, 30000));
    CHECK(itest_wait_status_int(s, "session_requests.running", 2, 30000));
    struct itest_resp r;
    itest_request(s, "POST", "/v1/sessions", ka, "u2", "application/json", "{}",
                  2, NULL, &r);
    CHECK_ERROR(&r, 429, "too_many_requests");
    const char *msg = itest_json_str(r.json, "error.message");
    CHECKF(msg && strstr(msg, "tenant-sessions"), "message %s",
           msg ? msg : "(none)");
    CHECK(itest_header(&r, "Retry-After") != NULL);
    itest_resp_release(&r);
    char *b = new_session(s, kb, "u1");
    CHECK(b != NULL);
    int done = 0;
    for (int i = 0; i < FLOOD; i++)
        done += atomic_load(&vars[i].done);
    CHECKF(done == 0, "%d of A's variables calls came back before B's create",
           done);
    for (int i = 0; i < FLOOD; i++) {
        async_join(&vars[i]);
        CHECK_INT(vars[i].status, 200);
        free(path[i]);
        path[i] = itest_fmt("/v1/sessions/%s", sid[i]);
        itest_request(s, "DELETE", path[i], ka, "u1", NULL, NULL, 0, NULL, &r);
        CHECK_STATUS(&r, 204);
        itest_resp_release(&r);
        free(path[i]);
        free(sid[i]);
    }
    if (b) {
        char *p = itest_fmt("/v1/sessions/%s", b);
        itest_request(s, "DELETE", p, kb, "u1", NULL, NULL, 0, NULL, &r);
        CHECK_STATUS(&r, 204);
        itest_resp_release(&r);
        free(p);
    }
    free(b);
    free(ka);
    free(kb);
    itest_stop(s);
}

/* ---- not on the URL-fetch threads --------------------------------------- */

/* Four URL ingests (two tenants, two each: a tenant runs at most half
 * the fetch threads) hang on a listener that never accepts; a variables
 * call is answered meanwhile. */
static void variables_not_behind_fetches(void)
{
    const char *args[] = {"--fetch-allow", "127.0.0.1/32", "--fetch-timeout",
                          "60s", NULL};
    struct itest_opts o = {.args = args, .config = BASE_CONF};
    struct itest_server *s = itest_start(&o);
    REQUIRE(s);
    char *ka = itest_create_policy_key(s, "tenant-a", "standard");
    char *kb = itest_create_policy_key(s, "tenant-b", "standard");
    REQUIRE(ka && kb);
    const char *k = s->admin_key;
    char *sid = new_session(s, k, "u1");
    REQUIRE(sid);
    run_ok(s, k, "u1", sid, "x = 41 + 1");
    int port = 0;
    int hang = itest_listen_local(&port, 64);
    REQUIRE(hang >= 0);
    char *body = itest_fmt("{\"url\": \"http://127.0.0.1:%d/a.txt\"}", port);
    struct async_req in[4];
    for (int i = 0; i < 4; i++)
        async_start(&in[i], s, "POST", "/v1/files", i < 2 ? ka : kb, "u1",
                    body);
    CHECK(itest_wait_status_int(s, "url_fetches.running", 4, 30000));
    char *path = itest_fmt("/v1/sessions/%s/variables", sid);
    struct itest_resp r;
    struct itest_req rq = {
        .path = path, .key = k, .user_id = "u1", .timeout_ms = 30000};
    itest_do(s, &rq, &r);
    CHECK_STATUS(&r, 200);
    json_t *v = itest_json_get(r.json, "variables");
    CHECKF(json_is_array(v) && json_array_size(v) == 1, "variables %s", r.body);
    itest_resp_release(&r);
    int done = 0;
    for (int i = 0; i < 4; i++)
        done += atomic_load(&in[i].done);
    CHECKF(done == 0, "%d URL fetches ended before the variables call", done);
    close(hang); /* the fetches' connections are reset */
    for (int i = 0; i < 4; i++) {
        async_join(&in[i]);
        CHECKF(in[i].status >= 400, "fetch %d: %ld", i, in[i].status);
    }
    free(path);
    path = itest_fmt("/v1/sessions/%s", sid);
    itest_request(s, "DELETE", path, k, "u1", NULL, NULL, 0, NULL, &r);
    CHECK_STATUS(&r, 204);
    itest_resp_release(&r);
    free(path);
    free(body);
    free(sid);
    free(ka);
    free(kb);
    itest_stop(s);
}

/* ---- shutdown ------------------------------------------------------------ */

/* SIGTERM (no grace for requests in flight) while the session workers
 * hold two of a tenant's requests and a third waits: each is answered
 * (the waiting one 503), and the server exits 0. */
static void shutdown_answers_pending(void)
{
    char *pdir = slow_prelude_dir(2);
    REQUIRE(pdir);
    const char *args[] = {"--prelude-dir", pdir, "--shutdown-timeout", "0",
                          NULL};
    struct itest_opts o = {.args = args,
                           .config = BASE_CONF "max-sessions = 1\n"};
    struct itest_server *s = itest_start(&o);
    REQUIRE(s);
    const char *k = s->admin_key;
    char *a = new_session(s, k, "u1");
    REQUIRE(a);
    char *path = itest_fmt("/v1/sessions/%s", a);
    struct async_req del, c1, c2;
    async_start(&del, s, "DELETE", path, k, "u1", NULL);
    CHECK(itest_wait_status_int(s, "session_requests.running", 1, 30000));
    async_start(&c1, s, "POST", "/v1/sessions", k, "u1", "{}");
    CHECK(itest_wait_status_int(s, "session_requests.running", 2, 30000));
    async_start(&c2, s, "POST", "/v1/sessions", k, "u1", "{}");
    CHECK(itest_wait_status_int(s, "session_requests.queued", 1, 30000));
    CHECKF(!atomic_load(&del.done), "the DELETE came back (%ld) early",
           del.status);
    itest_signal(s, SIGTERM);
    async_join(&del);
    async_join(&c1);
    async_join(&c2);
    int status = 0;
    CHECK(itest_wait_exit(s, 60000, &status));
    CHECKF(WIFEXITED(status) && WEXITSTATUS(status) == 0, "exit status %d",
           status);
    CHECK_INT(del.status, 204);
    /* The running create ends as it would have (its session made, or
     * refused at the node's bound or by the stopping sessions); the
     * waiting one never ran. */
    CHECKF(c1.status == 201 || c1.status == 429 || c1.status == 503,
           "create 1: %ld", c1.status);
    CHECK_INT(c2.status, 503);
    CHECK_STR(c2.error, "unavailable");
    /* API.md: a server shutting down says come back in 5 s (a busy
     * queue's 1 s would be a retry storm at a stopping node). */
    CHECK_STR(c2.retry_after, "5");
    free(c1.sid);
    free(c2.sid);
    free(path);
    free(a);
    itest_stop(s);
    itest_rm_rf(pdir);
    free(pdir);
}

TEST_MAIN(T(event_thread_not_held), T(tenant_share),
          T(variables_not_behind_fetches), T(shutdown_answers_pending))
