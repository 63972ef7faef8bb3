/*
 * test_sessions.c - stateful sessions through the real daemon (CONTRACT.md,
 * "Sessions"): POST/GET/DELETE /v1/sessions, a session's variables, and
 * POST /v1/executions with "session_id".
 *
 * What is checked, each as an outcome seen over HTTP (or in the host's
 * /proc and the data dir):
 *  - state persists from call to call (variables, imports, /mnt/output
 *    files), generated_files lists only what is new or changed since the
 *    previous call, a bare last expression (a DataFrame) is displayed as
 *    text/html: on a cold server and on a warm one;
 *  - "variables" and "files" on any call of a session, "packages" refused;
 *  - the variables listing: a long repr capped at 500 characters, modules
 *    and names starting with "_" left out;
 *  - two users (and another tenant) never see each other's sessions,
 *    variables or files; malformed and unknown ids are 404;
 *  - a networked policy cannot have a session, a strict one keeps its
 *    policy;
 *  - a call past the output cap is truncated and the session goes on; a
 *    timeout, a memory kill and the interpreter's exit end the session
 *    (that call says session_ended, later ones 410), and its processes go;
 *  - a concurrent call is 409 session_busy;
 *  - --max-sessions and --sessions-per-user (429 with Retry-After), the
 *    admin status and the metrics;
 *  - idle sessions and sessions past --session-max-life are reaped;
 *  - every bound across two tenants (the same user id in both): the
 *    per-user cap, the tenant's tenant-sessions share (from its key's
 *    policy), the memory charged per tenant (tenant-session-memory) and
 *    per node (sessions-memory), max-sessions, each 429 with the
 *    Retry-After of the earliest session that can end, while the other
 *    tenant goes on; the admin status and metrics of the charges;
 *  - a session's time holds under calls, with no reaper pass: back-to-
 *    back calls end at the maximum life (that call's result says so), a
 *    call or variables call past the maximum life or the idle timeout is
 *    410, and a call that started in time runs past the maximum life +
 *    60 s (the zygote's wall limit once) and is whole, not a 500;
 *  - SIGTERM ends every session: no process of the sandbox uid range stays
 *    and nothing of theirs is left in the data dir.
 *
 * Servers whose processes are counted get a sandbox uid range of their own
 * (400000 + 8 * (pid % 50000), clear of test_escape's), so runs of other
 * test programs never show up in the counts.  Waits are bounded polls of
 * the API: nothing else announces a session's state.
 */
#include <dirent.h>
#include <pthread.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"

#define CALL_MS 120000 /* one call's transfer (a first call starts Python) */

/* ---- helpers ----------------------------------------------------------- */

/* A sandbox uid range of this program's own (8 uids). */
static unsigned own_sandbox_uid(void)
{
    return 400000u + 8u * ((unsigned)getpid() % 50000u);
}

/* Poll (bounded) until no process has a uid in [lo, hi]; the count last
 * seen. */
static int wait_no_uids(unsigned lo, unsigned hi, int timeout_ms)
{
    double until = itest_now() + timeout_ms / 1000.0;
    int n = test_count_uids(lo, hi);
    while (n != 0 && itest_now() < until) {
        usleep(50 * 1000);
        n = test_count_uids(lo, hi);
    }
    return n;
}

/* POST /v1/sessions {} as user with key. */
static long post_session(struct itest_server *s, const char *key,
                         const char *user, struct itest_resp *r)
{
    return itest_request(s, "POST", "/v1/sessions", key, user,
                         "application/json", "{}", 2, NULL, r);
}

/* A Session object: its id, timestamps, a live status and policy. */
static void check_session_obj(const json_t *j, const char *id,
                              const char *policy)
{
    const char *sid = itest_json_str(j, "session_id");
    const char *st = itest_json_str(j, "status");
    CHECKF(sid && !strncmp(sid, "sess_", 5) && strlen(sid) > 10,
           "session_id %s", sid ? sid : "(none)");
    if (id)
        CHECK_STR(sid, id);
    CHECK(itest_parse_time(itest_json_str(j, "created_at")) > 0);
    CHECK(itest_parse_time(itest_json_str(j, "expires_at")) > 0);
    CHECK(itest_parse_time(itest_json_str(j, "last_used_at")) > 0);
    CHECKF(st && (!strcmp(st, "starting") || !strcmp(st, "ready") ||
                  !strcmp(st, "busy")),
           "status %s", st ? st : "(none)");
    CHECK_STR(itest_json_str(j, "policy"), policy);
}

/* A new session of user (201 checked); its id (free()) or NULL. */
static char *new_session_p(struct itest_server *s, const char *key,
                           const char *user, const char *policy)
{
    struct itest_resp r;
    char *id = NULL;
    post_session(s, key, user, &r);
    CHECK_STATUS(&r, 201);
    if (r.status == 201) {
        check_session_obj(r.json, NULL, policy);
        id = itest_json_dup(r.json, "session_id");
    }
    itest_resp_release(&r);
    if (id && !id[0]) {
        free(id);
        id = NULL;
    }
    return id;
}

static char *new_session(struct itest_server *s, const char *key,
                         const char *user)
{
    return new_session_p(s, key, user, "standard");
}

/* METHOD /v1/sessions/{sid}{tail}. */
static long sess_req(struct itest_server *s, const char *method,
                     const char *key, const char *user, const char *sid,
                     const char *tail, struct itest_resp *r)
{
    char *path = itest_fmt("/v1/sessions/%s%s", sid, tail);
    long st = itest_request(s, method, path, key, user, NULL, NULL, 0, NULL, r);
    free(path);
    return st;
}

/* POST /v1/executions with body (stolen) plus "session_id": sid. */
static long run_body(struct itest_server *s, const char *key, const char *user,
                     const char *sid, json_t *body, struct itest_resp *r)
{
    if (body && sid)
        json_object_set_new(body, "session_id", json_string(sid));
    return itest_exec(s, key, user, body, CALL_MS, r);
}

static long run_in(struct itest_server *s, const char *key, const char *user,
                   const char *sid, const char *code, struct itest_resp *r)
{
    return run_body(s, key, user, sid, json_pack("{s:s}", "code", code), r);
}

/* A session call's result: 200, success, the session's id, not ended,
 * the stdout wanted (NULL: not checked). */
static void check_call_ok(const struct itest_resp *r, const char *sid,
                          const char *want_out)
{
    CHECK_STATUS(r, 200);
    CHECKF(json_is_true(itest_json_get(r->json, "success")),
           "not a success: %s", r->body);
    CHECK_STR(itest_json_str(r->json, "session_id"), sid);
    CHECKF(json_is_false(itest_json_get(r->json, "session_ended")),
           "session_ended not false: %s", r->body);
    if (want_out)
        CHECK_STR(itest_exec_stdout(r), want_out);
}

/* Run code in sid and check it succeeded with want_out. */
static void run_ok(struct itest_server *s, const char *key, const char *user,
                   const char *sid, const char *code, const char *want_out)
{
    struct itest_resp r;
    run_in(s, key, user, sid, code, &r);
    check_call_ok(&r, sid, want_out);
    itest_resp_release(&r);
}

/* The names of r's generated_files, sorted, comma-separated (free()). */
static char *gen_names(const struct itest_resp *r)
{
    json_t *gen = itest_json_get(r->json, "generated_files");
    size_t n = json_array_size(gen), i, j;
    const char **v = calloc(n + 1, sizeof(*v));
    char *out = itest_fmt("%s", json_is_array(gen) ? "" : "(no array)");
    for (i = 0; i < n; i++)
        v[i] = itest_json_str(json_array_get(gen, i), "filename");
    for (i = 0; i < n; i++) /* insertion sort: a handful of names */
        for (j = i;
             j > 0 && strcmp(v[j - 1] ? v[j - 1] : "", v[j] ? v[j] : "") > 0;
             j--) {
            const char *t = v[j];
            v[j] = v[j - 1];
            v[j - 1] = t;
        }
    for (i = 0; i < n; i++) {
        char *next =
            itest_fmt("%s%s%s", out, i ? "," : "", v[i] ? v[i] : "(null)");
        free(out);
        out = next;
    }
    free(v);
    return out;
}

#define CHECK_GEN(r, want)                                                     \
    do {                                                                       \
        char *got__ = gen_names(r);                                            \
        CHECKF(!strcmp(got__, (want)), "generated_files [%s], want [%s]",      \
               got__, (want));                                                 \
        free(got__);                                                           \
    } while (0)

/* sid is among user's GET /v1/sessions. */
static bool listed(struct itest_server *s, const char *key, const char *user,
                   const char *sid, size_t *count)
{
    struct itest_resp r;
    bool found = false;
    size_t i;
    json_t *e;
    itest_request(s, "GET", "/v1/sessions", key, user, NULL, NULL, 0, NULL, &r);
    CHECK_STATUS(&r, 200);
    json_t *a = itest_json_get(r.json, "sessions");
    CHECKF(json_is_array(a), "no sessions array: %s", r.body);
    if (count)
        *count = json_array_size(a);
    json_array_foreach(a, i, e)
    {
        const char *id = itest_json_str(e, "session_id");
        if (id && sid && !strcmp(id, sid))
            found = true;
    }
    itest_resp_release(&r);
    return found;
}

/* The session ended: GET, variables and a call are 410 session_expired,
 * and it is no longer listed. */
static void check_gone(struct itest_server *s, const char *key,
                       const char *user, const char *sid)
{
    struct itest_resp r;
    sess_req(s, "GET", key, user, sid, "", &r);
    CHECK_ERROR(&r, 410, "session_expired");
    itest_resp_release(&r);
    sess_req(s, "GET", key, user, sid, "/variables", &r);
    CHECK_ERROR(&r, 410, "session_expired");
    itest_resp_release(&r);
    run_in(s, key, user, sid, "print('after the end')", &r);
    CHECK_ERROR(&r, 410, "session_expired");
    CHECK(strstr(r.body, "after the end") == NULL);
    itest_resp_release(&r);
    CHECKF(!listed(s, key, user, sid, NULL), "%s still listed", sid);
}

/* A call that ends its session: 200, session_ended true. */
static void check_call_ended(const struct itest_resp *r, const char *sid)
{
    CHECK_STATUS(r, 200);
    CHECK_STR(itest_json_str(r->json, "session_id"), sid);
    CHECKF(json_is_true(itest_json_get(r->json, "session_ended")),
           "session_ended not true: %s", r->body);
    CHECK(json_is_false(itest_json_get(r->json, "success")));
}

static void delete_ok(struct itest_server *s, const char *key, const char *user,
                      const char *sid)
{
    struct itest_resp r;
    sess_req(s, "DELETE", key, user, sid, "", &r);
    CHECK_STATUS(&r, 204);
    CHECK(r.len == 0);
    itest_resp_release(&r);
}

/* The "sessions" object of GET /v1/admin/status (new reference). */
static json_t *status_sessions(struct itest_server *s)
{
    struct itest_resp r;
    json_t *out = NULL;
    itest_request(s, "GET", "/v1/admin/status", s->admin_key, NULL, NULL, NULL,
                  0, NULL, &r);
    CHECK_STATUS(&r, 200);
    out = json_incref(itest_json_get(r.json, "sessions"));
    CHECKF(json_is_object(out), "no \"sessions\" in the status: %s", r.body);
    itest_resp_release(&r);
    return out;
}

static long long status_int(const json_t *ss, const char *name)
{
    json_t *v = json_object_get(ss, name);
    CHECKF(json_is_integer(v), "sessions.%s is not an integer", name);
    return json_integer_value(v);
}

/* The value of an unlabelled metric in GET /metrics; -1 when absent. */
static long long metric(struct itest_server *s, const char *name)
{
    struct itest_resp r;
    long long v = -1;
    size_t n = strlen(name);
    itest_request(s, "GET", "/metrics", s->admin_key, NULL, NULL, NULL, 0, NULL,
                  &r);
    CHECK_STATUS(&r, 200);
    for (const char *p = r.body; p && *p;) {
        if (!strncmp(p, name, n) && p[n] == ' ') {
            v = strtoll(p + n + 1, NULL, 10);
            break;
        }
        p = strchr(p, '\n');
        if (p)
            p++;
    }
    itest_resp_release(&r);
    CHECKF(v >= 0, "no metric %s", name);
    return v;
}

/* ---- state from call to call (cold and warm) ---------------------------- */

static const char df_code[] =
    "import pandas as pd\n"
    "df = pd.DataFrame({'city': ['Oslo', 'Lima'], 'pop': [700, 9000]})\n"
    "df\n";

/* Variables, imports and files persist; generated_files has what is new
 * or changed; a bare DataFrame is displayed as HTML. */
static void state_persists(struct itest_server *s, const char *user)
{
    const char *k = s->admin_key;
    struct itest_resp r;
    char *sid = new_session(s, k, user);
    REQUIRE(sid);
    run_in(s, k, user, sid,
           "import math\nx = 41\nopen('a.txt', 'w').write('a')\n"
           "open('b.txt', 'w').write('b')\nprint('one')",
           &r);
    check_call_ok(&r, sid, "one\n");
    CHECK_GEN(&r, "a.txt,b.txt");
    itest_resp_release(&r);

    /* b.txt changed, c.txt new, a.txt untouched: only b and c come back. */
    run_in(s, k, user, sid,
           "x += 1\nprint(x, round(math.pi, 2))\n"
           "open('b.txt', 'w').write('bb')\nopen('c.txt', 'w').write('c')\n"
           "import os\n"
           "print(sorted(f for f in os.listdir('.') if f[0] != '.'))",
           &r);
    check_call_ok(&r, sid, "42 3.14\n['a.txt', 'b.txt', 'c.txt']\n");
    CHECK_GEN(&r, "b.txt,c.txt");
    json_t *gen = itest_json_get(r.json, "generated_files");
    for (size_t i = 0; i < json_array_size(gen); i++) {
        json_t *f = json_array_get(gen, i);
        if (!strcmp(itest_json_str(f, "filename"), "b.txt"))
            CHECK_INT(json_integer_value(json_object_get(f, "size")), 2);
    }
    itest_resp_release(&r);

    run_in(s, k, user, sid, "print(x, open('a.txt').read())", &r);
    check_call_ok(&r, sid, "42 a\n");
    CHECK_GEN(&r, "");
    itest_resp_release(&r);

    run_in(s, k, user, sid, df_code, &r);
    check_call_ok(&r, sid, "");
    json_t *d = itest_json_get(r.json, "display");
    const char *html = itest_json_str(json_array_get(d, 0), "text/html");
    const char *plain = itest_json_str(json_array_get(d, 0), "text/plain");
    CHECKF(json_array_size(d) == 1 && html && strstr(html, "<table") &&
               strstr(html, "Oslo") && plain && strstr(plain, "Lima"),
           "want one bundle with an HTML table: %s", r.body);
    itest_resp_release(&r);
    run_ok(s, k, user, sid, "print(len(df), df['pop'].sum())", "2 9700\n");
    delete_ok(s, k, user, sid);
    free(sid);
}

static void cold_server_sessions(void)
{
    const char *args[] = {"--exec-mode", "cold", NULL};
    struct itest_opts o = {.args = args};
    struct itest_server *s = itest_start(&o);
    REQUIRE(s);
    state_persists(s, "u1");
    itest_stop(s);
}

static void warm_server_sessions(void)
{
    const char *args[] = {"--exec-mode", "warm", "--exec-slots", "1", NULL};
    struct itest_opts o = {.args = args};
    struct itest_server *s = itest_start(&o);
    REQUIRE(s);
    state_persists(s, "u1");
    /* The warm slot still serves plain executions beside the session. */
    struct itest_resp r;
    itest_exec(s, s->admin_key, "u1",
               json_pack("{s:s}", "code", "print('plain')"), CALL_MS, &r);
    CHECK_STATUS(&r, 200);
    CHECK_STR(itest_exec_stdout(&r), "plain\n");
    CHECK(itest_json_get(r.json, "session_id") == NULL ||
          json_is_null(itest_json_get(r.json, "session_id")));
    itest_resp_release(&r);
    itest_stop(s);
}

/* ---- one server for the API cases --------------------------------------- */

static struct itest_server *srv;

static void start_api_server(void)
{
    struct itest_opts o = {0};
    srv = itest_start(&o);
    REQUIRE(srv);
}

static void stop_api_server(void)
{
    itest_stop(srv);
    srv = NULL;
}

/* Create, get, list, delete; afterwards 410 everywhere. */
static void lifecycle(void)
{
    const char *k;
    struct itest_resp r;
    REQUIRE(srv);
    k = srv->admin_key;
    post_session(srv, k, "life", &r);
    CHECK_STATUS(&r, 201);
    check_session_obj(r.json, NULL, "standard");
    char *sid = itest_json_dup(r.json, "session_id");
    int64_t created = itest_parse_time(itest_json_str(r.json, "created_at"));
    int64_t expires = itest_parse_time(itest_json_str(r.json, "expires_at"));
    CHECKF(expires - created == 20 * 60,
           "expires_at %lld s after created_at"
           " (want the 20 min idle timeout)",
           (long long)(expires - created));
    itest_resp_release(&r);
    REQUIRE(sid[0]);

    sess_req(srv, "GET", k, "life", sid, "", &r);
    CHECK_STATUS(&r, 200);
    check_session_obj(r.json, sid, "standard");
    itest_resp_release(&r);
    size_t n = 0;
    CHECK(listed(srv, k, "life", sid, &n));
    CHECK_INT(n, 1);

    run_ok(srv, k, "life", sid, "v = 'kept'\nprint(v)", "kept\n");
    sess_req(srv, "GET", k, "life", sid, "", &r);
    CHECK_STATUS(&r, 200);
    CHECK_STR(itest_json_str(r.json, "status"), "ready");
    CHECK(itest_parse_time(itest_json_str(r.json, "last_used_at")) >= created);
    itest_resp_release(&r);

    delete_ok(srv, k, "life", sid);
    check_gone(srv, k, "life", sid);
    /* A plain execution of the same user is unaffected. */
    itest_exec(srv, k, "life", json_pack("{s:s}", "code", "print(2)"), CALL_MS,
               &r);
    CHECK_STATUS(&r, 200);
    CHECK_STR(itest_exec_stdout(&r), "2\n");
    itest_resp_release(&r);
    free(sid);
}

/* "variables" and "files" on calls of a session; "packages" refused. */
static void variables_and_files(void)
{
    static const char csv[] = "city,pop\nOslo,700\nLima,9000\n";
    static const char notes[] = "hello notes";
    const char *k, *u = "vf";
    struct itest_resp r;
    REQUIRE(srv);
    k = srv->admin_key;
    itest_upload_raw(srv, k, u, "in.csv", "text/csv", csv, sizeof(csv) - 1,
                     NULL, &r);
    REQUIRE_STATUS(&r, 201);
    char *csv_id = itest_json_dup(r.json, "file_id");
    itest_resp_release(&r);
    itest_upload_raw(srv, k, u, "notes.txt", "text/plain", notes,
                     sizeof(notes) - 1, NULL, &r);
    REQUIRE_STATUS(&r, 201);
    char *notes_id = itest_json_dup(r.json, "file_id");
    itest_resp_release(&r);
    char *sid = new_session(srv, k, u);
    REQUIRE(sid);

    run_body(srv, k, u, sid,
             json_pack("{s:s, s:{s:[i,i], s:{s:s}, s:s}}", "code",
                       "print(y, z['k'], name)", "variables", "y", 1, 2, "z",
                       "k", "v", "name", "ada"),
             &r);
    check_call_ok(&r, sid, "[1, 2] v ada\n");
    itest_resp_release(&r);
    run_ok(srv, k, u, sid, "print(y[1] + 1, name)", "3 ada\n");

    /* Files of a later call: FILES and load_file see them. */
    run_body(srv, k, u, sid,
             json_pack("{s:s, s:[s]}", "code",
                       "df2 = load_file('in.csv')\n"
                       "print(list(df2['city']), "
                       "open(FILES['in.csv']).read().count('\\n'))",
                       "files", csv_id),
             &r);
    check_call_ok(&r, sid, "['Oslo', 'Lima'] 3\n");
    CHECK_GEN(&r, "");
    itest_resp_release(&r);
    run_body(srv, k, u, sid,
             json_pack("{s:s, s:[s]}", "code",
                       "print(open(FILES['notes.txt']).read(), len(df2))",
                       "files", notes_id),
             &r);
    check_call_ok(&r, sid, "hello notes 2\n");
    itest_resp_release(&r);

    run_body(srv, k, u, sid,
             json_pack("{s:s, s:[s]}", "code", "print('installed')", "packages",
                       "six"),
             &r);
    CHECK_ERROR(&r, 400, "invalid_request");
    CHECK(strstr(r.body, "installed\\n") == NULL);
    itest_resp_release(&r);
    run_ok(srv, k, u, sid, "print(name)", "ada\n");
    delete_ok(srv, k, u, sid);
    free(sid);
    free(csv_id);
    free(notes_id);
}

/* The variable named name in a listing, or NULL. */
static json_t *var_named(json_t *vars, const char *name)
{
    size_t i;
    json_t *v;
    json_array_foreach(vars, i, v)
    {
        const char *n = itest_json_str(v, "name");
        if (n && !strcmp(n, name))
            return v;
    }
    return NULL;
}

/* GET .../variables: reprs capped at 500, no modules, no "_" names. */
/* HEAD on the variables answers from the session's state: it never
 * calls into the session (regression: it ran the code's __repr__s). */
static void variables_head_calls_nothing(void)
{
    const char *k, *u = "vh";
    struct itest_resp r;
    REQUIRE(srv);
    k = srv->admin_key;
    char *sid = new_session(srv, k, u);
    REQUIRE(sid);
    run_ok(srv, k, u, sid,
           "class Loud:\n"
           "    def __repr__(self):\n"
           "        open('/tmp/repr_ran', 'a').write('x')\n"
           "        return 'loud'\n"
           "loud = Loud()\n",
           "");
    sess_req(srv, "HEAD", k, u, sid, "/variables", &r);
    CHECK_STATUS(&r, 200);
    itest_resp_release(&r);
    run_ok(srv, k, u, sid, "import os\nprint(os.path.exists('/tmp/repr_ran'))",
           "False\n");
    sess_req(srv, "HEAD", k, u, "sess_aaaaaaaaaaaaaaaaaaaaaaaaaa", "/variables",
             &r);
    CHECK_STATUS(&r, 404);
    itest_resp_release(&r);
    delete_ok(srv, k, u, sid);
    free(sid);
}

static void variables_listing(void)
{
    const char *k, *u = "vl";
    struct itest_resp r;
    REQUIRE(srv);
    k = srv->admin_key;
    char *sid = new_session(srv, k, u);
    REQUIRE(sid);
    /* Before any call: the interpreter starts, nothing is defined. */
    sess_req(srv, "GET", k, u, sid, "/variables", &r);
    CHECK_STATUS(&r, 200);
    CHECKF(json_array_size(itest_json_get(r.json, "variables")) == 0 &&
               json_is_array(itest_json_get(r.json, "variables")),
           "a fresh session's variables: %s", r.body);
    itest_resp_release(&r);

    run_ok(srv, k, u, sid,
           "import json, os\nimport numpy as np\nlong_text = 'a' * 2000\n"
           "n = 3\n_hidden = 1\n__also_hidden = 2\ndata = {'k': [0, 1, 2]}\n"
           "def f():\n    return 1\nprint('defined')",
           "defined\n");
    sess_req(srv, "GET", k, u, sid, "/variables", &r);
    CHECK_STATUS(&r, 200);
    json_t *vars = itest_json_get(r.json, "variables");
    CHECK(json_is_false(itest_json_get(r.json, "truncated")));
    CHECKF(json_array_size(vars) == 4, "want data, f, long_text, n: %s",
           r.body);
    json_t *lt = var_named(vars, "long_text");
    const char *lrepr = itest_json_str(lt, "repr");
    CHECK_STR(itest_json_str(lt, "type"), "str");
    CHECKF(lrepr && strlen(lrepr) == 500 && !strncmp(lrepr, "'aaaa", 5),
           "long_text repr of %zu characters", lrepr ? strlen(lrepr) : 0);
    CHECK_STR(itest_json_str(var_named(vars, "n"), "repr"), "3");
    CHECK_STR(itest_json_str(var_named(vars, "n"), "type"), "int");
    CHECK_STR(itest_json_str(var_named(vars, "data"), "repr"),
              "{'k': [0, 1, 2]}");
    CHECK_STR(itest_json_str(var_named(vars, "data"), "type"), "dict");
    CHECK_STR(itest_json_str(var_named(vars, "f"), "type"), "function");
    const char *hidden[] = {
        "json",  "os",        "np",           "_hidden", "__also_hidden",
        "FILES", "load_file", "__builtins__", NULL};
    for (int i = 0; hidden[i]; i++)
        CHECKF(!var_named(vars, hidden[i]), "%s listed: %s", hidden[i], r.body);
    itest_resp_release(&r);
    /* Listing writes nothing the next call reports as generated. */
    run_in(srv, k, u, sid, "print(n)", &r);
    check_call_ok(&r, sid, "3\n");
    CHECK_GEN(&r, "");
    itest_resp_release(&r);
    delete_ok(srv, k, u, sid);
    free(sid);
}

/* Probes one user's session runs for another's traces. */
static const char probe_code[] =
    "import os\n"
    "print('secret' in globals(), 'theirs' in dir())\n"
    "print(sorted(f for f in os.listdir('/mnt/output') if f[0] != '.'))\n"
    "print([os.path.join(d, f) for top in ('/mnt', '/tmp')\n"
    "       for d, _, fs in os.walk(top) for f in fs\n"
    "       if f in ('alice.txt', 'bob.txt')])\n";

static void check_not_listed_on(struct itest_server *s, const char *user,
                                const char *k, const char *sid)
{
    struct itest_resp r;
    sess_req(s, "GET", k, user, sid, "", &r);
    CHECK_ERROR(&r, 404, "not_found");
    itest_resp_release(&r);
    sess_req(s, "GET", k, user, sid, "/variables", &r);
    CHECK_ERROR(&r, 404, "not_found");
    itest_resp_release(&r);
    sess_req(s, "HEAD", k, user, sid, "/variables", &r);
    CHECK_STATUS(&r, 404);
    itest_resp_release(&r);
    sess_req(s, "DELETE", k, user, sid, "", &r);
    CHECK_ERROR(&r, 404, "not_found");
    itest_resp_release(&r);
    run_in(s, k, user, sid, "print(secret)", &r);
    CHECK_ERROR(&r, 404, "not_found");
    CHECK(strstr(r.body, "alice-") == NULL);
    itest_resp_release(&r);
    CHECK(!listed(s, k, user, sid, NULL));
}

static void check_not_listed_for(const char *user, const char *k,
                                 const char *sid)
{
    check_not_listed_on(srv, user, k, sid);
}

/* Two users, and another tenant, never reach each other's sessions. */
static void users_are_isolated(void)
{
    const char *k;
    struct itest_resp r;
    REQUIRE(srv);
    k = srv->admin_key;
    char *sa = new_session(srv, k, "alice");
    char *sb = new_session(srv, k, "bob");
    REQUIRE(sa && sb);
    CHECK(strcmp(sa, sb) != 0);
    run_ok(srv, k, "alice", sa,
           "secret = 'alice-' + 'secret'\ntheirs = 1\n"
           "open('alice.txt', 'w').write(secret)\nprint('ok')",
           "ok\n");
    run_ok(srv, k, "bob", sb, probe_code, "False False\n[]\n[]\n");
    run_ok(srv, k, "bob", sb,
           "secret = 'bob'\nopen('bob.txt', 'w').write(secret)\nprint('ok')",
           "ok\n");
    run_ok(srv, k, "alice", sa,
           "import os\nprint(secret, sorted(f for f in os.listdir('.') "
           "if f[0] != '.'))",
           "alice-secret ['alice.txt']\n");

    sess_req(srv, "GET", k, "bob", sb, "/variables", &r);
    CHECK_STATUS(&r, 200);
    json_t *vars = itest_json_get(r.json, "variables");
    CHECK_STR(itest_json_str(var_named(vars, "secret"), "repr"), "'bob'");
    CHECK(var_named(vars, "theirs") == NULL);
    itest_resp_release(&r);

    /* Bob, and alice of another tenant, get 404 for alice's session. */
    check_not_listed_for("bob", k, sa);
    char *other = NULL;
    REQUIRE(itest_create_key(srv, "other", false, &other, NULL));
    check_not_listed_for("alice", other, sa);
    size_t n = 9;
    CHECK(!listed(srv, other, "alice", sa, &n));
    CHECK_INT(n, 0);
    CHECK(listed(srv, k, "bob", sb, &n));
    CHECK_INT(n, 1);
    /* None of that touched alice's session. */
    run_ok(srv, k, "alice", sa, "print(secret)", "alice-secret\n");
    delete_ok(srv, k, "alice", sa);
    delete_ok(srv, k, "bob", sb);
    free(other);
    free(sa);
    free(sb);
}

/* Ids that are nobody's session: 404 everywhere. */
static void malformed_ids(void)
{
    static const char *const ids[] = {"nonsense",
                                      "sess_",
                                      "sess_bad",
                                      "file_aaaaaaaaaaaaaaaaaaaaaaaaaa",
                                      "sess_aaaaaaaaaaaaaaaaaaaaaaaaaa",
                                      "SESS_AAAAAAAAAAAAAAAAAAAAAAAAAA",
                                      NULL};
    const char *k;
    struct itest_resp r;
    REQUIRE(srv);
    k = srv->admin_key;
    for (int i = 0; ids[i]; i++) {
        sess_req(srv, "GET", k, "u1", ids[i], "", &r);
        CHECK_ERROR(&r, 404, "not_found");
        itest_resp_release(&r);
        sess_req(srv, "GET", k, "u1", ids[i], "/variables", &r);
        CHECK_ERROR(&r, 404, "not_found");
        itest_resp_release(&r);
        sess_req(srv, "DELETE", k, "u1", ids[i], "", &r);
        CHECK_ERROR(&r, 404, "not_found");
        itest_resp_release(&r);
        run_in(srv, k, "u1", ids[i], "print(1)", &r);
        CHECK_ERROR(&r, 404, "not_found");
        itest_resp_release(&r);
    }
}

/* A networked key cannot have a session; a strict one keeps its policy. */
static void session_policies(void)
{
    struct itest_resp r;
    REQUIRE(srv);
    char *net = itest_create_policy_key(srv, "net", "networked");
    char *strict = itest_create_policy_key(srv, "str", "strict");
    REQUIRE(net && strict);
    post_session(srv, net, "u1", &r);
    CHECK_ERROR(&r, 400, "invalid_request");
    itest_resp_release(&r);
    size_t n = 9;
    listed(srv, net, "u1", NULL, &n);
    CHECK_INT(n, 0);

    char *sid = new_session_p(srv, strict, "u1", "strict");
    REQUIRE(sid);
    run_in(srv, strict, "u1", sid, "print('strict')", &r);
    check_call_ok(&r, sid, "strict\n");
    CHECK_STR(itest_json_str(r.json, "resources.policy"), "strict");
    itest_resp_release(&r);
    delete_ok(srv, strict, "u1", sid);
    free(sid);
    free(net);
    free(strict);
}

/* ---- calls that end a session, and the output cap ---------------------- */

/* standard: 4 KiB of output, 256 MiB of memory; one slot, 3 sessions. */
static struct itest_server *start_limits(unsigned uid)
{
    char u[16];
    snprintf(u, sizeof(u), "%u", uid);
    const char *args[] = {"--sandbox-uid",
                          u,
                          "--exec-slots",
                          "1",
                          "--max-sessions",
                          "3",
                          "--ready-check-interval",
                          "never",
                          NULL};
    struct itest_opts o = {.args = args,
                           .config = "policy.standard.output-limit = 4K\n"
                                     "policy.standard.memory = 256M\n"};
    return itest_start(&o);
}

/* Per-call timeouts and the output cap; then a timeout ends it. */
static void ended_by_timeout(struct itest_server *s, unsigned first,
                             unsigned last)
{
    const char *k = s->admin_key;
    struct itest_resp r;
    char *sid = new_session(s, k, "u1");
    REQUIRE(sid);
    run_body(s, k, "u1", sid,
             json_pack("{s:s, s:i}", "code",
                       "import time\ntime.sleep(1)\nprint('slept')", "timeout",
                       5),
             &r);
    check_call_ok(&r, sid, "slept\n");
    CHECK(json_is_false(itest_json_get(r.json, "timed_out")));
    itest_resp_release(&r);
    CHECK(test_count_uids(first, last) > 0);

    run_in(s, k, "u1", sid,
           "import sys\nprint('x' * 10000)\nsys.stderr.write('e' * 10000)\n"
           "after_cap = 7",
           &r);
    check_call_ok(&r, sid, NULL);
    CHECK(json_is_true(itest_json_get(r.json, "stdout_truncated")));
    CHECK_INT(strlen(itest_exec_stdout(&r)), 4096);
    CHECK(json_is_true(itest_json_get(r.json, "stderr_truncated")));
    CHECKF(strlen(itest_exec_stderr(&r)) <= 4096 &&
               strlen(itest_exec_stderr(&r)) >= 1024,
           "stderr of %zu bytes", strlen(itest_exec_stderr(&r)));
    itest_resp_release(&r);
    run_ok(s, k, "u1", sid, "print(after_cap)", "7\n");

    double t0 = itest_now();
    run_body(s, k, "u1", sid,
             json_pack("{s:s, s:i}", "code",
                       "import time\nprint('before', flush=True)\n"
                       "time.sleep(60)",
                       "timeout", 1),
             &r);
    double took = itest_now() - t0;
    check_call_ended(&r, sid);
    CHECK(json_is_true(itest_json_get(r.json, "timed_out")));
    CHECK_STR(itest_json_str(r.json, "error.type"), "Timeout");
    CHECK_STR(itest_exec_stdout(&r), "before\n");
    CHECKF(took < 15, "a 1 s timeout took %.1f s", took);
    itest_resp_release(&r);
    check_gone(s, k, "u1", sid);
    int left = wait_no_uids(first, last, 15000);
    CHECKF(left == 0, "%d processes of the ended session's uids", left);
    free(sid);
}

static void ended_by_exit(struct itest_server *s, unsigned first, unsigned last)
{
    const char *k = s->admin_key;
    struct itest_resp r;
    char *sid = new_session(s, k, "u1");
    REQUIRE(sid);
    run_ok(s, k, "u1", sid, "y = 1", "");
    run_in(s, k, "u1", sid, "import os\nprint('bye', flush=True)\nos._exit(3)",
           &r);
    check_call_ended(&r, sid);
    CHECK_STR(itest_exec_stdout(&r), "bye\n");
    CHECK_INT(json_integer_value(itest_json_get(r.json, "exit_code")), 3);
    itest_resp_release(&r);
    check_gone(s, k, "u1", sid);
    int left = wait_no_uids(first, last, 15000);
    CHECKF(left == 0, "%d processes of the ended session's uids", left);
    free(sid);
}

static void ended_by_memory(struct itest_server *s, unsigned first,
                            unsigned last)
{
    const char *k = s->admin_key;
    struct itest_resp r;
    char *sid = new_session(s, k, "u1");
    REQUIRE(sid);
    run_ok(s, k, "u1", sid, "z = 1", "");
    /* 1 GiB written byte by byte under a 256 MiB policy. */
    run_in(s, k, "u1", sid, "b = b'x' * (1 << 30)\nprint(len(b))", &r);
    check_call_ended(&r, sid);
    CHECK(json_is_true(itest_json_get(r.json, "resources.oom_killed")));
    CHECK(strstr(itest_exec_stdout(&r), "1073741824") == NULL);
    itest_resp_release(&r);
    check_gone(s, k, "u1", sid);
    int left = wait_no_uids(first, last, 15000);
    CHECKF(left == 0, "%d processes of the ended session's uids", left);
    free(sid);
}

static void calls_that_end_a_session(void)
{
    unsigned uid = own_sandbox_uid();
    /* Sessions' host uids: after the internal uid and the one slot. */
    unsigned first = uid + 2, last = uid + 2 + 2;
    struct itest_server *s = start_limits(uid);
    REQUIRE(s);
    CHECK(itest_wait_job_ran(s, "venv", 60000));
    CHECK_INT(test_count_uids(first, last), 0);
    ended_by_timeout(s, first, last);
    ended_by_exit(s, first, last);
    ended_by_memory(s, first, last);
    json_t *ss = status_sessions(s);
    CHECK_INT(status_int(ss, "live"), 0);
    json_decref(ss);
    itest_stop(s);
}

/* ---- busy ------------------------------------------------------------- */

/* Poll (bounded) until GET says the session's status is want. */
static bool wait_session_status(struct itest_server *s, const char *user,
                                const char *sid, const char *want,
                                int timeout_ms)
{
    double until = itest_now() + timeout_ms / 1000.0;
    bool seen = false;
    while (!seen && itest_now() < until) {
        struct itest_resp r;
        sess_req(s, "GET", s->admin_key, user, sid, "", &r);
        const char *st = itest_json_str(r.json, "status");
        seen = r.status == 200 && st && !strcmp(st, want);
        itest_resp_release(&r);
        if (!seen)
            usleep(20 * 1000);
    }
    return seen;
}

/* The result of an async execution once done (new reference), polled
 * with a bound; NULL when it did not finish. */
static json_t *wait_async(struct itest_server *s, const char *user,
                          const char *id, int timeout_ms)
{
    char *path = itest_fmt("/v1/executions/%s", id);
    double until = itest_now() + timeout_ms / 1000.0;
    json_t *res = NULL;
    while (!res && itest_now() < until) {
        struct itest_resp r;
        itest_request(s, "GET", path, s->admin_key, user, NULL, NULL, 0, NULL,
                      &r);
        const char *st = itest_json_str(r.json, "status");
        if (r.status == 200 && st && !strcmp(st, "done"))
            res = json_incref(itest_json_get(r.json, "result"));
        else if (r.status != 200)
            CHECKF(0, "GET %s: %ld %s", path, r.status, r.body);
        bool failed = r.status != 200;
        itest_resp_release(&r);
        if (failed)
            break;
        if (!res)
            usleep(50 * 1000);
    }
    free(path);
    return res;
}

/* A call while another runs in the session is 409 session_busy, at
 * once; the first one's result and state are whole. */
static void concurrent_call(const char *const *args)
{
    struct itest_opts o = {.args = args};
    struct itest_server *s = itest_start(&o);
    struct itest_resp r;
    REQUIRE(s);
    const char *k = s->admin_key;
    char *sid = new_session(s, k, "u1");
    REQUIRE(sid);
    run_ok(s, k, "u1", sid, "x = 1", "");
    run_body(s, k, "u1", sid,
             json_pack("{s:s, s:b}", "code",
                       "import time\ntime.sleep(5)\nx = 2\nprint('slow done')",
                       "async", 1),
             &r);
    CHECK_STATUS(&r, 202);
    char *eid = itest_json_dup(r.json, "execution_id");
    itest_resp_release(&r);
    REQUIRE(eid[0]);
    CHECK(wait_session_status(s, "u1", sid, "busy", 30000));

    double t0 = itest_now();
    run_in(s, k, "u1", sid, "print('second')", &r);
    double took = itest_now() - t0;
    CHECK_ERROR(&r, 409, "session_busy");
    CHECK(strstr(r.body, "second") == NULL);
    CHECKF(took < 2.5,
           "the concurrent call was answered after %.1f s "
           "(waited for the first instead of 409 at once)",
           took);
    itest_resp_release(&r);
    sess_req(s, "GET", k, "u1", sid, "/variables", &r);
    CHECK_ERROR(&r, 409, "session_busy");
    itest_resp_release(&r);

    json_t *res = wait_async(s, "u1", eid, 60000);
    CHECKF(res != NULL, "the first call did not finish");
    CHECK(json_is_true(json_object_get(res, "success")));
    CHECK_STR(itest_json_str(res, "stdout"), "slow done\n");
    CHECK_STR(itest_json_str(res, "session_id"), sid);
    CHECK(json_is_false(json_object_get(res, "session_ended")));
    json_decref(res);
    run_ok(s, k, "u1", sid, "print(x)", "2\n");
    CHECK(wait_session_status(s, "u1", sid, "ready", 5000));
    free(eid);
    free(sid);
    itest_stop(s);
}

/* Two slots, the default shares: one tenant runs one execution at a
 * time, so a second call of a busy session must not wait in the queue. */
static void concurrent_call_default_shares(void)
{
    const char *args[] = {"--exec-slots", "2", NULL};
    concurrent_call(args);
}

/* The tenant may use every slot: the second call gets one at once. */
static void concurrent_call_free_slot(void)
{
    const char *args[] = {"--exec-slots", "2",
                          "--policy.standard.tenant-running", "100%", NULL};
    concurrent_call(args);
}

struct long_call {
    struct itest_server *s;
    const char *sid;
    struct itest_resp r;
};

static void *long_call(void *arg)
{
    struct long_call *c = arg;
    run_in(c->s, c->s->admin_key, "u1", c->sid,
           "import time\ntime.sleep(60)\nprint('not cut short')", &c->r);
    return NULL;
}

/* A session ended while a call runs in it (DELETE here) is over for
 * everybody at once: the running call answers 410 session_expired (its
 * child is stopped with the session), and so do the pre-check of a new
 * call (sync and async), the take of one, GET and the variables call;
 * never 409 session_busy for a session that has ended. */
static void delete_during_call(void)
{
    const char *args[] = {"--exec-slots", "2",
                          "--policy.standard.tenant-running", "100%", NULL};
    struct itest_opts o = {.args = args};
    struct itest_server *s = itest_start(&o);
    struct itest_resp r;
    REQUIRE(s);
    const char *k = s->admin_key;
    char *sid = new_session(s, k, "u1");
    REQUIRE(sid);
    run_ok(s, k, "u1", sid, "x = 1", "");

    struct long_call c = {s, sid, {0}};
    pthread_t th;
    REQUIRE(pthread_create(&th, NULL, long_call, &c) == 0);
    CHECK(wait_session_status(s, "u1", sid, "busy", 30000));
    double t0 = itest_now();
    delete_ok(s, k, "u1", sid);
    pthread_join(th, NULL);
    CHECKF(itest_now() - t0 < 30, "the running call was not stopped");
    CHECK_ERROR(&c.r, 410, "session_expired");
    CHECKF(strstr(c.r.body, "deleted") != NULL, "no reason: %s", c.r.body);
    CHECK(strstr(c.r.body, "not cut short") == NULL);
    itest_resp_release(&c.r);

    check_gone(s, k, "u1", sid);
    run_body(s, k, "u1", sid,
             json_pack("{s:s, s:b}", "code", "print(x)", "async", 1), &r);
    CHECK_ERROR(&r, 410, "session_expired");
    itest_resp_release(&r);
    free(sid);
    itest_stop(s);
}

/* ---- caps, status and metrics ------------------------------------------ */

static void check_refused(struct itest_server *s, const char *user)
{
    struct itest_resp r;
    post_session(s, s->admin_key, user, &r);
    CHECK_ERROR(&r, 429, "too_many_requests");
    const char *ra = itest_header(&r, "Retry-After");
    CHECKF(ra && atoi(ra) > 0, "Retry-After %s", ra ? ra : "(none)");
    itest_resp_release(&r);
}

static void caps_status_metrics(void)
{
    const char *args[] = {"--max-sessions",
                          "3",
                          "--sessions-per-user",
                          "2",
                          "--policy.standard.tenant-sessions",
                          "100%",
                          NULL};
    struct itest_opts o = {.args = args};
    struct itest_server *s = itest_start(&o);
    REQUIRE(s);
    const char *k = s->admin_key;
    json_t *ss = status_sessions(s);
    CHECK_INT(status_int(ss, "live"), 0);
    CHECK_INT(status_int(ss, "max"), 3);
    CHECK_INT(status_int(ss, "per_user"), 2);
    CHECK_INT(status_int(ss, "memory_bytes"), 0);
    json_decref(ss);
    CHECK_INT(metric(s, "interpd_sessions_live"), 0);

    char *a = new_session(s, k, "u1");
    char *b = new_session(s, k, "u1");
    REQUIRE(a && b);
    check_refused(s, "u1"); /* the user's 2 */
    char *d = new_session(s, k, "u2");
    REQUIRE(d);
    check_refused(s, "u3"); /* the node's 3 */
    size_t n = 0;
    listed(s, k, "u1", a, &n);
    CHECK_INT(n, 2);
    run_ok(s, k, "u1", a, "big = list(range(200000))\nprint(len(big))",
           "200000\n");

    ss = status_sessions(s);
    CHECK_INT(status_int(ss, "live"), 3);
    CHECKF(status_int(ss, "memory_bytes") > 0, "memory_bytes %lld",
           status_int(ss, "memory_bytes"));
    json_decref(ss);
    CHECK_INT(metric(s, "interpd_sessions_live"), 3);
    CHECK(metric(s, "interpd_sessions_memory_bytes") > 0);

    /* An ended session frees its place at once. */
    delete_ok(s, k, "u1", b);
    char *e = new_session(s, k, "u3");
    CHECK(e != NULL);
    check_refused(s, "u1"); /* the node's 3 again */
    delete_ok(s, k, "u1", a);
    delete_ok(s, k, "u2", d);
    if (e)
        delete_ok(s, k, "u3", e);
    ss = status_sessions(s);
    CHECK_INT(status_int(ss, "live"), 0);
    CHECK_INT(status_int(ss, "memory_bytes"), 0);
    json_decref(ss);
    CHECK_INT(metric(s, "interpd_sessions_live"), 0);
    free(a);
    free(b);
    free(d);
    free(e);
    itest_stop(s);
}

/* ---- bounds across tenants (issue 20, items 1 and 12) ------------------ */

/* POST /v1/sessions is 429 with a message holding why and Retry-After in
 * [lo, hi]. */
static void check_bound(struct itest_server *s, const char *key,
                        const char *user, const char *why, long lo, long hi)
{
    struct itest_resp r;
    post_session(s, key, user, &r);
    CHECK_ERROR(&r, 429, "too_many_requests");
    const char *msg = itest_json_str(r.json, "error.message");
    CHECKF(msg && strstr(msg, why), "message %s, want one with \"%s\"",
           msg ? msg : "(none)", why);
    const char *ra = itest_header(&r, "Retry-After");
    long v = ra ? strtol(ra, NULL, 10) : -1;
    CHECKF(v >= lo && v <= hi, "Retry-After %s, want %ld..%ld (%s)",
           ra ? ra : "(none)", lo, hi, r.body);
    itest_resp_release(&r);
}

/* The admin status's sessions.tenants entry of tenant (borrowed from
 * ss), or NULL. */
static json_t *status_tenant(json_t *ss, const char *tenant)
{
    json_t *a = json_object_get(ss, "tenants"), *e;
    size_t i;
    CHECKF(json_is_array(a), "sessions.tenants is not an array");
    json_array_foreach(a, i, e)
    {
        const char *t = itest_json_str(e, "tenant");
        if (t && !strcmp(t, tenant))
            return e;
    }
    return NULL;
}

static void check_status_tenant(json_t *ss, const char *tenant, long long live,
                                long long charged)
{
    json_t *e = status_tenant(ss, tenant);
    CHECKF(e != NULL, "tenant %s not in sessions.tenants", tenant);
    if (!e)
        return;
    CHECK_INT(status_int(e, "live"), live);
    CHECK_INT(status_int(e, "memory_charged_bytes"), charged);
}

/* Servers whose sessions only count: cold slots, zygotes that import
 * little, idle expiry 10 minutes (the Retry-After of a full bound). */
#define BOUNDS_CONF                                                            \
    "exec-mode = cold\n"                                                       \
    "warm-modules = json\n"                                                    \
    "ready-check-interval = never\n"                                           \
    "session-idle-timeout = 10m\n"                                             \
    "session-max-life = 1h\n"                                                  \
    "policy.standard.memory = 256M\n"

/* The per-user bound tells tenants apart, each tenant holds at most its
 * key's policy's tenant-sessions (default 50% of max-sessions) while
 * others still create, the node's max-sessions holds, and a session of
 * one tenant is nobody's in another with the same user id. */
static void tenant_session_share(void)
{
    struct itest_opts o = {.config =
                               BOUNDS_CONF "max-sessions = 8\n"
                                           "sessions-per-user = 2\n"
                                           "policy.solo.memory = 256M\n"
                                           "policy.solo.tenant-sessions = 1\n"};
    struct itest_server *s = itest_start(&o);
    REQUIRE(s);
    char *a = itest_create_policy_key(s, "tenant-a", "standard");
    char *b = itest_create_policy_key(s, "tenant-b", "standard");
    char *c = itest_create_policy_key(s, "tenant-c", "solo");
    REQUIRE(a && b && c);
    char *sa[4] = {new_session(s, a, "u1"), new_session(s, a, "u1"), NULL,
                   NULL};
    REQUIRE(sa[0] && sa[1]);
    check_bound(s, a, "u1", "this user has 2 live sessions", 590, 600);
    /* The same user id in another tenant is another user. */
    char *sb = new_session(s, b, "u1");
    REQUIRE(sb);
    check_not_listed_on(s, "u1", b, sa[0]);
    check_not_listed_on(s, "u1", a, sb);
    sa[2] = new_session(s, a, "u2");
    sa[3] = new_session(s, a, "u2");
    REQUIRE(sa[2] && sa[3]);
    /* tenant-a holds 4 of 8: its share; others go on. */
    check_bound(s, a, "u3", "tenant-sessions", 590, 600);
    char *sc = new_session_p(s, c, "u1", "solo");
    REQUIRE(sc);
    check_bound(s, c, "u2", "tenant-sessions", 590, 600); /* solo: 1 */
    char *sb2 = new_session(s, b, "u1");
    char *sb3 = new_session(s, b, "u2");
    REQUIRE(sb2 && sb3);
    check_bound(s, b, "u3", "as many live sessions as it allows", 590, 600);

    json_t *ss = status_sessions(s);
    CHECK_INT(status_int(ss, "live"), 8);
    CHECK_INT(status_int(ss, "memory_charged_bytes"), 8 * (256LL << 20));
    CHECK_INT(status_int(ss, "memory_budget_bytes"), 8LL << 30);
    check_status_tenant(ss, "tenant-a", 4, 4 * (256LL << 20));
    check_status_tenant(ss, "tenant-b", 3, 3 * (256LL << 20));
    check_status_tenant(ss, "tenant-c", 1, 256LL << 20);
    json_decref(ss);
    CHECK_INT(metric(s, "interpd_sessions_memory_charged_bytes"),
              8 * (256LL << 20));
    /* An ended session gives its tenant its place back. */
    delete_ok(s, a, "u2", sa[3]);
    char *again = new_session(s, a, "u3");
    CHECK(again != NULL);
    for (int i = 0; i < 4; i++)
        free(sa[i]);
    free(again);
    free(sb);
    free(sb2);
    free(sb3);
    free(sc);
    free(a);
    free(b);
    free(c);
    itest_stop(s);
}

/* Each session is charged its policy's memory limit: a tenant's sum
 * stays within its policy's tenant-session-memory, the node's within
 * sessions-memory; a policy over the budget alone gets no session. */
static void session_memory_budget(void)
{
    struct itest_opts o = {.config = BOUNDS_CONF
                           "max-sessions = 8\n"
                           "sessions-per-user = 3\n"
                           "sessions-memory = 1536M\n"
                           "policy.big.memory = 512M\n"
                           "policy.big.tenant-session-memory = 1G\n"
                           "policy.huge.memory = 2G\n"};
    struct itest_server *s = itest_start(&o);
    struct itest_resp r;
    REQUIRE(s);
    char *a = itest_create_policy_key(s, "tenant-a", "big");
    char *b = itest_create_policy_key(s, "tenant-b", "big");
    char *b2 = itest_create_policy_key(s, "tenant-b", "standard");
    char *h = itest_create_policy_key(s, "tenant-h", "huge");
    REQUIRE(a && b && b2 && h);
    post_session(s, h, "u1", &r);
    CHECK_ERROR(&r, 503, "unavailable");
    CHECKF(strstr(r.body, "memory") != NULL, "%s", r.body);
    itest_resp_release(&r);

    char *sa1 = new_session_p(s, a, "u1", "big");
    char *sa2 = new_session_p(s, a, "u2", "big");
    REQUIRE(sa1 && sa2);
    check_bound(s, a, "u3", "tenant-session-memory", 590, 600);
    char *sb = new_session_p(s, b, "u1", "big");
    REQUIRE(sb);
    /* 1.5 GiB charged: the node's budget, whatever the tenant's share. */
    check_bound(s, b, "u1", "sessions-memory", 590, 600);
    check_bound(s, b2, "u2", "sessions-memory", 590, 600);

    json_t *ss = status_sessions(s);
    CHECK_INT(status_int(ss, "live"), 3);
    CHECK_INT(status_int(ss, "memory_charged_bytes"), 1536LL << 20);
    CHECK_INT(status_int(ss, "memory_budget_bytes"), 1536LL << 20);
    check_status_tenant(ss, "tenant-a", 2, 1LL << 30);
    check_status_tenant(ss, "tenant-b", 1, 512LL << 20);
    json_decref(ss);
    CHECK_INT(metric(s, "interpd_sessions_memory_charged_bytes"), 1536LL << 20);
    delete_ok(s, a, "u2", sa2);
    char *sb2 = new_session_p(s, b, "u1", "big");
    CHECK(sb2 != NULL);
    free(sa1);
    free(sa2);
    free(sb);
    free(sb2);
    free(a);
    free(b);
    free(b2);
    free(h);
    itest_stop(s);
}

/* ---- reaping ------------------------------------------------------------ */

struct reaped {
    const char *name;
    char *sid;
    double created, last_used; /* itest_now() */
    /* The 410 that said it ended: sent at ended (0: live), answered at
     * ended_seen.  Idleness is exact now (a look after it is 410), so the
     * end lies between the last 200's sending and ended_seen. */
    double ended, ended_seen;
    bool keep_using;
};

/* One step of the reaping poll for one session. */
static void reap_step(struct itest_server *s, struct reaped *x)
{
    struct itest_resp r;
    double t = itest_now();
    if (x->ended > 0)
        return;
    if (x->keep_using)
        run_in(s, s->admin_key, "u1", x->sid, "print(1)", &r);
    else
        sess_req(s, "GET", s->admin_key, "u1", x->sid, "", &r);
    if (r.status == 410) {
        CHECK_ERROR(&r, 410, "session_expired");
        x->ended = t;
        x->ended_seen = itest_now();
    } else {
        CHECKF(r.status == 200, "%s: %ld %s", x->name, r.status, r.body);
        if (x->keep_using)
            x->last_used = t;
    }
    itest_resp_release(&r);
}

/* idle 4 s, at most 16 s of life, reaped every second (a first call
 * waits for its session's imports, seconds on a loaded machine, while
 * the others stay idle: 2 s was too tight for CI, and the warm modules
 * are json alone: three zygotes importing numpy, pandas and matplotlib
 * at once took the first call past 4 s on a shared machine). */
static void idle_and_old_sessions_end(void)
{
    unsigned uid = own_sandbox_uid();
    char u[16];
    snprintf(u, sizeof(u), "%u", uid);
    const char *args[] = {"--sandbox-uid",
                          u,
                          "--exec-slots",
                          "1",
                          "--max-sessions",
                          "3",
                          "--session-idle-timeout",
                          "4s",
                          "--session-max-life",
                          "16s",
                          "--session-reap-interval",
                          "1s",
                          "--policy.standard.tenant-sessions",
                          "100%",
                          "--warm-modules",
                          "json",
                          "--ready-check-interval",
                          "never",
                          NULL};
    struct itest_opts o = {.args = args};
    struct itest_server *s = itest_start(&o);
    REQUIRE(s);
    struct reaped x[3] = {{"used once", NULL, 0, 0, 0, 0, false},
                          {"never used", NULL, 0, 0, 0, 0, false},
                          {"kept busy", NULL, 0, 0, 0, 0, true}};
    for (int i = 0; i < 2; i++) {
        x[i].sid = new_session(s, s->admin_key, "u1");
        x[i].created = x[i].last_used = itest_now();
        REQUIRE(x[i].sid);
    }
    run_ok(s, s->admin_key, "u1", x[0].sid, "x = 1", "");
    x[0].last_used = itest_now();
    /* The busy one is made now, its first call at once below: made
     * before the first call above (which waits for its session's imports,
     * seconds on a loaded machine), it was idle 4 s before its first use
     * and rightly ended. */
    x[2].sid = new_session(s, s->admin_key, "u1");
    x[2].created = x[2].last_used = itest_now();
    REQUIRE(x[2].sid);
    struct itest_resp r;
    sess_req(s, "GET", s->admin_key, "u1", x[0].sid, "", &r);
    CHECK_INT(itest_parse_time(itest_json_str(r.json, "expires_at")) -
                  itest_parse_time(itest_json_str(r.json, "last_used_at")),
              4);
    itest_resp_release(&r);

    /* Bounded poll; the busy one is used every 250 ms meanwhile. */
    double until = itest_now() + 40;
    while (itest_now() < until &&
           !(x[0].ended > 0 && x[1].ended > 0 && x[2].ended > 0)) {
        for (int i = 0; i < 3; i++)
            reap_step(s, &x[i]);
        usleep(250 * 1000);
    }
    for (int i = 0; i < 3; i++)
        CHECKF(x[i].ended > 0, "%s: not reaped within 40 s", x[i].name);
    /* Idle ones end once idle 4 s (reaped within a second or so), long
     * before the 16 s life; the used one lives until its 16 s. */
    for (int i = 0; i < 2; i++)
        CHECKF(x[i].ended_seen - x[i].last_used >= 3.5 &&
                   x[i].ended - x[i].created < 13,
               "%s ended %.1f-%.1f s after its last use, %.1f s after "
               "creation",
               x[i].name, x[i].ended - x[i].last_used,
               x[i].ended_seen - x[i].last_used, x[i].ended - x[i].created);
    CHECKF(x[2].ended_seen - x[2].created >= 13 &&
               x[2].ended - x[2].last_used < 3,
           "the used session ended %.1f s after creation, %.1f s after its "
           "last use",
           x[2].ended - x[2].created, x[2].ended - x[2].last_used);
    for (int i = 0; i < 3; i++) {
        check_gone(s, s->admin_key, "u1", x[i].sid);
        free(x[i].sid);
    }
    json_t *ss = status_sessions(s);
    CHECK_INT(status_int(ss, "live"), 0);
    json_decref(ss);
    int left = wait_no_uids(uid + 2, uid + 2 + 2, 15000);
    CHECKF(left == 0, "%d processes of reaped sessions' uids", left);
    itest_stop(s);
}

/* ---- time holds under calls (issue 20, item 4) -------------------------- */

/* The Unix time (seconds) at which code in a session sleeps until. */
static json_t *sleep_until_body(double until, int timeout)
{
    char *code = itest_fmt("import time\n"
                           "time.sleep(max(0.0, %.3f - time.time()))\n"
                           "print('woke')",
                           until);
    json_t *b = json_pack("{s:s, s:i}", "code", code, "timeout", timeout);
    free(code);
    return b;
}

/* A call that ended its session by its maximum life: 200, the code's
 * own outcome, session_ended and why. */
static void check_ended_by_life(json_t *res, const char *sid,
                                const char *want_out)
{
    char *body = json_dumps(res, 0);
    CHECK_STR(itest_json_str(res, "session_id"), sid);
    CHECKF(json_is_true(itest_json_get(res, "success")), "%s", body);
    CHECK_STR(itest_json_str(res, "stdout"), want_out);
    CHECKF(json_is_true(itest_json_get(res, "session_ended")),
           "session_ended not true: %s", body);
    CHECK_STR(itest_json_str(res, "session_end_reason"),
              "it reached its maximum life");
    free(body);
}

/* r is 410 session_expired saying why. */
static void check_410_why(const struct itest_resp *r, const char *why)
{
    CHECK_ERROR(r, 410, "session_expired");
    const char *msg = itest_json_str(r->json, "error.message");
    CHECKF(msg && strstr(msg, why), "message %s, want \"%s\"",
           msg ? msg : "(none)", why);
}

/* Back-to-back 1 s calls: the session ends at its maximum life (8 s),
 * at the end of the call running then, whose result says so; never a
 * 500. */
static void busy_session_ends_at_life(struct itest_server *s)
{
    const char *k = s->admin_key;
    double t0 = itest_now(), ended = 0;
    char *sid = new_session(s, k, "busy");
    REQUIRE(sid);
    struct itest_resp r;
    int calls = 0;
    while (ended == 0 && itest_now() < t0 + 40) {
        run_in(s, k, "busy", sid, "import time\ntime.sleep(1)\nprint('k')", &r);
        calls++;
        CHECKF(r.status == 200, "call %d: %ld %s", calls, r.status, r.body);
        if (r.status != 200 ||
            json_is_true(itest_json_get(r.json, "session_ended"))) {
            ended = itest_now();
            check_ended_by_life(r.json, sid, "k\n");
        } else {
            CHECK(json_is_null(itest_json_get(r.json, "session_end_reason")));
        }
        itest_resp_release(&r);
    }
    CHECKF(ended > 0 && ended - t0 >= 7.5 &&
                   ended - t0<14,
                              "a session under 1 s calls ended %.1f s after "
                              "its creation "
                              "(max life 8 s)",
                              ended> 0
               ? ended - t0
               : -1.0);
    run_in(s, k, "busy", sid, "print(1)", &r);
    check_410_why(&r, "maximum life");
    itest_resp_release(&r);
    free(sid);
}

/* Idle since before its maximum life, though not idle: the next call
 * (the variables call too) is 410, and GET says it ended, with no
 * reaper pass (its interval is an hour). */
static void call_past_life_refused(struct itest_server *s)
{
    const char *k = s->admin_key;
    struct itest_resp r;
    double t0 = itest_now();
    char *sid = new_session(s, k, "late");
    double t1 = itest_now();
    REQUIRE(sid);
    run_body(s, k, "late", sid, sleep_until_body(t0 + 6.5, 30), &r);
    check_call_ok(&r, sid, "woke\n");
    itest_resp_release(&r);
    itest_sleep_until(t1 + 8.3); /* past its life, 2 s from its last use */
    sess_req(s, "GET", k, "late", sid, "/variables", &r);
    check_410_why(&r, "maximum life");
    itest_resp_release(&r);
    check_gone(s, k, "late", sid);
    free(sid);
}

/* Idle for its idle timeout (4 s): GET, a list, the status and a call
 * see it ended at once, and it holds no place. */
static void call_past_idle_refused(struct itest_server *s)
{
    const char *k = s->admin_key;
    struct itest_resp r;
    char *sid = new_session(s, k, "idle");
    REQUIRE(sid);
    run_ok(s, k, "idle", sid, "z = 1", "");
    itest_sleep_until(itest_now() + 4.5);
    CHECKF(!listed(s, k, "idle", sid, NULL), "an idle session is listed");
    sess_req(s, "GET", k, "idle", sid, "", &r);
    CHECK_ERROR(&r, 410, "session_expired");
    itest_resp_release(&r);
    run_in(s, k, "idle", sid, "print(z)", &r);
    check_410_why(&r, "idle");
    itest_resp_release(&r);
    free(sid);
}

/* Max life 8 s, idle 4 s, no reaper pass during the test: every check of
 * a session's time is the one at a call's start or end, or at a look.
 * A call that starts before the maximum life runs to its end, past the
 * maximum life + 60 s (the zygote's wall limit, once): its result is
 * whole and says the session ended. */
static void life_holds_under_calls(void)
{
    const char *args[] = {"--session-max-life",
                          "8s",
                          "--session-idle-timeout",
                          "4s",
                          "--session-reap-interval",
                          "1h",
                          "--exec-mode",
                          "cold",
                          "--warm-modules",
                          "json",
                          "--exec-slots",
                          "2",
                          "--max-sessions",
                          "4",
                          "--policy.standard.tenant-running",
                          "100%",
                          "--policy.standard.tenant-sessions",
                          "100%",
                          "--ready-check-interval",
                          "never",
                          NULL};
    struct itest_opts o = {.args = args};
    struct itest_server *s = itest_start(&o);
    struct itest_resp r;
    REQUIRE(s);
    const char *k = s->admin_key;
    double t0 = itest_now();
    char *lid = new_session(s, k, "long");
    REQUIRE(lid);
    /* Starts at once, ends 75 s on: past 8 s + 60 s. */
    json_t *body = sleep_until_body(t0 + 75, 100);
    json_object_set_new(body, "async", json_true());
    run_body(s, k, "long", lid, body, &r);
    CHECK_STATUS(&r, 202);
    char *eid = itest_json_dup(r.json, "execution_id");
    itest_resp_release(&r);
    REQUIRE(eid[0]);
    CHECK(wait_session_status(s, "long", lid, "busy", 5000));

    busy_session_ends_at_life(s);
    call_past_life_refused(s);
    call_past_idle_refused(s);

    /* Busy past its maximum life, it is listed and counted till its call
     * ends. */
    CHECK(listed(s, k, "long", lid, NULL));
    json_t *res = wait_async(s, "long", eid, 120000);
    CHECKF(res != NULL, "the long call did not finish");
    if (res)
        check_ended_by_life(res, lid, "woke\n");
    json_decref(res);
    run_in(s, k, "long", lid, "print(1)", &r);
    check_410_why(&r, "maximum life");
    itest_resp_release(&r);
    json_t *ss = status_sessions(s);
    CHECK_INT(status_int(ss, "live"), 0);
    CHECK_INT(status_int(ss, "memory_charged_bytes"), 0);
    json_decref(ss);
    free(eid);
    free(lid);
    itest_stop(s);
}

/* ---- shutdown ---------------------------------------------------------- */

/* Every path under dir (files and folders), relative, appended to *v. */
static void list_tree(const char *dir, const char *rel, char ***v, size_t *n)
{
    char *path = rel[0] ? itest_fmt("%s/%s", dir, rel) : itest_fmt("%s", dir);
    DIR *d = opendir(path);
    struct dirent *e;
    if (!d) {
        free(path);
        return;
    }
    while ((e = readdir(d)) != NULL) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        char *sub = rel[0] ? itest_fmt("%s/%s", rel, e->d_name)
                           : itest_fmt("%s", e->d_name);
        char *full = itest_fmt("%s/%s", dir, sub);
        struct stat st;
        bool is_dir = !lstat(full, &st) && S_ISDIR(st.st_mode);
        free(full);
        *v = realloc(*v, (*n + 2) * sizeof(**v));
        (*v)[(*n)++] = sub;
        (*v)[*n] = NULL;
        if (is_dir)
            list_tree(dir, sub, v, n);
    }
    closedir(d);
    free(path);
}

static bool in_list(char **v, const char *s)
{
    for (size_t i = 0; v && v[i]; i++)
        if (!strcmp(v[i], s))
            return true;
    return false;
}

struct call_ctx {
    struct itest_server *s;
    const char *sid;
    struct itest_resp r;
};

static void *slow_call(void *arg)
{
    struct call_ctx *c = arg;
    run_in(c->s, c->s->admin_key, "u1", c->sid,
           "import time\ntime.sleep(2)\nprint('late')", &c->r);
    return NULL;
}

/* As root, session i's processes run as host uid sandbox-uid + 1 +
 * slots + i (inside, every sandbox is uid 1000 of its own namespace, so
 * only the host's /proc tells). */
static void check_session_uids(unsigned uid, unsigned slots, unsigned n)
{
    if (geteuid() != 0)
        return;
    for (unsigned i = 0; i < n; i++) {
        unsigned want = uid + 1 + slots + i;
        CHECKF(test_count_uids(want, want) > 0,
               "no process of session %u's "
               "host uid %u",
               i, want);
    }
    CHECKF(test_count_uids(uid + 1 + slots + n, uid + 7) == 0,
           "processes of uids past the %u sessions'", n);
}

/* SIGTERM with sessions ready, starting and busy: the service exits 0,
 * no process of its uid range stays, nothing new in the data dir. */
static void shutdown_ends_sessions(void)
{
    unsigned uid = own_sandbox_uid();
    char u[16];
    snprintf(u, sizeof(u), "%u", uid);
    const char *args[] = {"--sandbox-uid",
                          u,
                          "--exec-slots",
                          "1",
                          "--max-sessions",
                          "4",
                          "--exec-mode",
                          "cold",
                          "--policy.standard.tenant-sessions",
                          "100%",
                          "--ready-check-interval",
                          "never",
                          NULL};
    struct itest_opts o = {.args = args};
    struct itest_server *s = itest_start(&o);
    REQUIRE(s);
    CHECK(itest_wait_job_ran(s, "venv", 60000));
    char **before = NULL, **after = NULL;
    size_t nb = 0, na = 0;
    list_tree(s->data_dir, "", &before, &nb);

    char *s0 = new_session(s, s->admin_key, "u1");
    char *s1 = new_session(s, s->admin_key, "u1");
    char *s2 = new_session(s, s->admin_key, "u2"); /* never called */
    REQUIRE(s0 && s1 && s2);
    run_ok(s, s->admin_key, "u1", s0, "a = 0", "");
    run_ok(s, s->admin_key, "u1", s1, "b = 1", "");
    check_session_uids(uid, 1, 3);

    struct call_ctx c = {s, s1, {0}};
    pthread_t th;
    REQUIRE(pthread_create(&th, NULL, slow_call, &c) == 0);
    CHECK(wait_session_status(s, "u1", s1, "busy", 30000));
    itest_signal(s, SIGTERM);
    pthread_join(th, NULL);
    CHECKF(c.r.status != 0, "the busy call got no answer: %s", c.r.curl_err);
    itest_resp_release(&c.r);
    int status = 0;
    CHECK(itest_wait_exit(s, 60000, &status));
    CHECKF(WIFEXITED(status) && WEXITSTATUS(status) == 0, "status 0x%x",
           status);
    int left = test_count_uids(uid, uid + 1 + 1 + 4);
    CHECKF(left == 0, "%d processes of uids %u-%u after the exit", left, uid,
           uid + 6);

    list_tree(s->data_dir, "", &after, &na);
    for (size_t i = 0; i < na; i++)
        CHECKF(in_list(before, after[i]) || !strncmp(after[i], "meta.db", 7),
               "left in the data dir after shutdown: %s", after[i]);
    itest_strv_free(before);
    itest_strv_free(after);
    free(s0);
    free(s1);
    free(s2);
    itest_stop(s);
}

TEST_MAIN(T(tenant_session_share), T(session_memory_budget),
          T(life_holds_under_calls), T(cold_server_sessions),
          T(warm_server_sessions), T(start_api_server), T(lifecycle),
          T(variables_and_files), T(variables_listing),
          T(variables_head_calls_nothing), T(users_are_isolated),
          T(malformed_ids), T(session_policies), T(stop_api_server),
          T(calls_that_end_a_session), T(concurrent_call_default_shares),
          T(concurrent_call_free_slot), T(delete_during_call),
          T(caps_status_metrics), T(idle_and_old_sessions_end),
          T(shutdown_ends_sessions))
