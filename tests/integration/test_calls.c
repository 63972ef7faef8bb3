/*
 * test_calls.c - calls from the running code to its client (issue 22):
 * call_client and the request's "functions" reach a streaming client as
 * "call" events, and its answers (POST /v1/executions/{id}/calls/{id})
 * come back to the code as results or exceptions; the run's clock is
 * paused while a call waits; the limits (size, count, in flight, time),
 * the scoping of answers (another user, a second answer, a late one),
 * batches and the async form, a session defining functions per call, a
 * client that leaves, a code that breaks the socket's framing, and
 * display events as each bundle is shown.  Runs cold, warm
 * (integration-warm/) and in sessions (integration-session/).
 */
#include <poll.h>
#include <unistd.h>

#include "sse.h"

static struct itest_server *srv;

/* The limits this file's server runs under (--policy.standard.*). */
#define CALL_TIMEOUT_S 2
#define MAX_CALLS 20
#define IN_FLIGHT 4
#define CALL_SIZE 65536

/* A session for this run in session mode, else NULL. */
static char *maybe_session(const char *user)
{
    return itest_exec_session() ? session_new(srv, user) : NULL;
}

static void session_done(const char *user, char *sid)
{
    if (sid)
        session_end(srv, user, sid);
    free(sid);
}

/* POST an answer (JSON text) to call cid of execution eid as user: the
 * status (and the response in *out when given). */
static long answer(const char *user, const char *eid, const char *cid,
                   const char *body, struct itest_resp *out)
{
    struct itest_resp r;
    char *path = itest_fmt("/v1/executions/%s/calls/%s", eid, cid);
    long st = itest_request(srv, "POST", path, srv->admin_key, user,
                            "application/json", body, strlen(body), NULL, &r);
    free(path);
    if (out)
        *out = r;
    else
        itest_resp_release(&r);
    return st;
}

/* A streamed run as a client sees it. */
struct run {
    struct sse c;
    char eid[64];
    const char *user;
    json_t *calls;    /* the call events' data, in order */
    json_t *displays; /* the display events' data, in order */
    char *out;        /* stdout joined */
    json_t *result;   /* the result event's data */
    double display_at[8];
};

static void run_open(struct run *r, const char *user, const char *body)
{
    memset(r, 0, sizeof(*r));
    r->user = user;
    r->calls = json_array();
    r->displays = json_array();
    r->out = calloc(1, 1);
    sse_open(&r->c, srv, srv->admin_key, user, body, NULL);
    CHECKF(r->c.status == 200, "stream: %d", r->c.status);
    CHECK(sse_header(&r->c, "X-Execution-Id", r->eid, sizeof r->eid));
}

/* The next event: a call (returned: borrowed, in r->calls), or, when
 * none comes before the result, NULL with r->result set.  Output and
 * display events are kept. */
static json_t *run_next(struct run *r, int timeout_ms)
{
    struct sse_event e;
    while (!r->result && sse_next(&r->c, timeout_ms, &e)) {
        json_t *d = e.kind[0] && e.data
                        ? json_loads(e.data, JSON_DECODE_ANY, NULL)
                        : NULL;
        json_t *call = NULL;
        if (!strcmp(e.kind, "result")) {
            r->result = json_incref(d);
        } else if (!strcmp(e.kind, "call")) {
            json_array_append(r->calls, d);
            call = d;
        } else if (!strcmp(e.kind, "display")) {
            size_t n = json_array_size(r->displays);
            if (n < 8)
                r->display_at[n] = itest_now();
            json_array_append(r->displays, d);
        } else if (!strcmp(e.kind, "stdout") && json_is_string(d)) {
            char *o = itest_fmt("%s%s", r->out, json_string_value(d));
            free(r->out);
            r->out = o;
        }
        json_decref(d);
        sse_event_release(&e);
        if (call)
            return call;
    }
    return NULL;
}

static const char *call_id(const json_t *call)
{
    return json_string_value(json_object_get(call, "call_id"));
}

/* Answer every call with answer_of(call) (JSON text, owned; NULL: none)
 * until the result; the result (borrowed). */
static json_t *run_answering(struct run *r, char *(*answer_of)(json_t *call))
{
    json_t *call;
    while ((call = run_next(r, 30000)) != NULL) {
        char *a = answer_of(call);
        if (a) {
            struct itest_resp ar;
            long st = answer(r->user, r->eid, call_id(call), a, &ar);
            CHECKF(st == 204, "answer %s: %ld %s", a, st, ar.body);
            itest_resp_release(&ar);
            free(a);
        }
    }
    CHECKF(r->result != NULL, "no result for %s", r->eid);
    return r->result;
}

static void run_close(struct run *r)
{
    sse_close(&r->c);
    json_decref(r->calls);
    json_decref(r->displays);
    json_decref(r->result);
    free(r->out);
}

/* {"result": {"name": name, "args": args, "kwargs": kwargs}}: an echo. */
static char *echo(json_t *call)
{
    json_t *a = json_pack("{s:o}", "result", json_deep_copy(call));
    json_object_del(json_object_get(a, "result"), "call_id");
    char *t = json_dumps(a, JSON_COMPACT);
    json_decref(a);
    return t;
}

static char *body_with(const char *code, const char *sid, const char *extra)
{
    json_t *b = extra ? json_loads(extra, 0, NULL) : json_object();
    CHECK(b != NULL);
    json_object_set_new(b, "code", json_string(code));
    json_object_set_new(b, "stream", json_true());
    if (sid)
        json_object_set_new(b, "session_id", json_string(sid));
    char *t = json_dumps(b, JSON_COMPACT);
    json_decref(b);
    return t;
}

/* ---- the tests ---------------------------------------------------------- */

/* A declared function and call_client both reach the client with their
 * arguments; its results come back as JSON values. */
static void test_round_trip(void)
{
    char *sid = maybe_session("u-rt");
    char *body = body_with(
        "r = llm_query('hi', n=2)\n"
        "print(r['name'], r['args'], r['kwargs'])\n"
        "s = call_client('search', [1, 2.5, None], deep={'a': True})\n"
        "print(s['name'], s['args'], s['kwargs'])\n"
        "print(repr(llm_query))\n"
        "x = 0.1 + 0.2\n"
        "print(call_client('p', x, 'é€😀')['args'] == [x, 'é€😀'])\n",
        sid, "{\"functions\": [\"llm_query\"]}");
    struct run r;
    run_open(&r, "u-rt", body);
    json_t *res = run_answering(&r, echo);
    CHECKF(json_is_true(json_object_get(res, "success")), "%s",
           json_dumps(res, 0));
    CHECKF(streq(r.out, "llm_query ['hi'] {'n': 2}\n"
                        "search [[1, 2.5, None]] {'deep': {'a': True}}\n"
                        "<function llm_query: answered by the client>\n"
                        "True\n"),
           "stdout %s", r.out);
    CHECK(json_array_size(r.calls) == 3);
    json_t *c0 = json_array_get(r.calls, 0);
    CHECK(streq(json_string_value(json_object_get(c0, "name")), "llm_query"));
    CHECK(!strncmp(call_id(c0), "call_", 5) && strlen(call_id(c0)) == 31);
    CHECK(json_object_size(c0) == 4);
    CHECK(strcmp(call_id(c0), call_id(json_array_get(r.calls, 1))) != 0);
    /* The stream's result is the execution's. */
    CHECK(
        streq(json_string_value(json_object_get(res, "execution_id")), r.eid));
    run_close(&r);
    free(body);
    session_done("u-rt", sid);
}

static char *errors_of(json_t *call)
{
    const char *name = json_string_value(json_object_get(call, "name"));
    return itest_fmt("{\"error\":{\"type\":\"%s\",\"message\":\"no %s\"}}",
                     name, name);
}

/* An error answer raises that type (a builtin) or a CallError subclass
 * of that name. */
static void test_error_answer(void)
{
    char *sid = maybe_session("u-err");
    char *body =
        body_with("try:\n    call_client('ValueError')\n"
                  "except ValueError as e:\n    print('VE', e)\n"
                  "try:\n    call_client('RateLimited')\n"
                  "except CallError as e:\n    print(type(e).__name__, e)\n"
                  "call_client('KeyError')\n",
                  sid, NULL);
    struct run r;
    run_open(&r, "u-err", body);
    json_t *res = run_answering(&r, errors_of);
    CHECKF(streq(r.out, "VE no ValueError\nRateLimited no RateLimited\n"), "%s",
           r.out);
    CHECK(streq(itest_json_str(res, "error.type"), "KeyError"));
    CHECK(json_is_false(json_object_get(res, "success")));
    run_close(&r);
    free(body);
    session_done("u-err", sid);
}

/* The clock stops while a call waits: a run of 1 s waits 3 s for two
 * calls and is not timed out; an unanswered call raises TimeoutError
 * after the call timeout; an answer to it after that is 410. */
static void test_time(void)
{
    char *sid = maybe_session("u-time");
    char *body =
        body_with("import time\nt = time.monotonic()\n"
                  "try:\n    call_client('slow')\n"
                  "except TimeoutError as e:\n    print('timeout', e)\n"
                  "print(call_client('late'))\n"
                  "print(time.monotonic() - t > 3)\n",
                  sid, "{\"timeout\": 1}");
    struct run r;
    run_open(&r, "u-time", body);
    json_t *first = run_next(&r, 10000);
    CHECK(first != NULL);
    char *first_id = strdup(first ? call_id(first) : "");
    double t0 = itest_now();
    json_t *second = run_next(&r, 10000);
    CHECK(second != NULL);
    double waited = itest_now() - t0;
    CHECKF(waited > CALL_TIMEOUT_S - 0.5 && waited < CALL_TIMEOUT_S + 5,
           "the unanswered call took %.2f s", waited);
    struct itest_resp ar;
    CHECK(answer("u-time", r.eid, first_id, "{\"result\":1}", &ar) == 410);
    CHECK_ERROR(&ar, 410, "call_expired");
    itest_resp_release(&ar);
    /* The client is slow with the second one: past the run's 1 s. */
    struct pollfd none = {-1, 0, 0};
    (void)poll(&none, 0, 1500);
    CHECK(answer("u-time", r.eid, second ? call_id(second) : "",
                 "{\"result\":\"ok\"}", NULL) == 204);
    CHECK(run_next(&r, 30000) == NULL && r.result);
    CHECKF(r.result && json_is_true(json_object_get(r.result, "success")) &&
               json_is_false(json_object_get(r.result, "timed_out")),
           "%s", r.result ? json_dumps(r.result, 0) : "(none)");
    CHECKF(strstr(r.out, "timeout interpd: the client did not answer") &&
               strstr(r.out, "ok\nTrue\n"),
           "%s", r.out);
    /* Over: 410 for any of its calls. */
    CHECK(answer("u-time", r.eid, second ? call_id(second) : "",
                 "{\"result\":2}", NULL) == 410);
    free(first_id);
    run_close(&r);
    free(body);
    session_done("u-time", sid);
}

/* Only the caller answers, once; unknown calls and executions are 404. */
static void test_answer_scoping(void)
{
    char *sid = maybe_session("u-own");
    /* The run waits on a second call meanwhile: it is not over (then
     * every answer is 410). */
    char *body =
        body_with("print(call_client('q'))\ncall_client('hold')\n", sid, NULL);
    struct run r;
    run_open(&r, "u-own", body);
    json_t *call = run_next(&r, 30000);
    CHECK(call != NULL);
    const char *cid = call ? call_id(call) : "";
    struct itest_resp ar;
    CHECK(answer("u-other", r.eid, cid, "{\"result\":0}", &ar) == 404);
    CHECK_ERROR(&ar, 404, "not_found");
    itest_resp_release(&ar);
    CHECK(answer("u-own", r.eid, "call_aaaaaaaaaaaaaaaaaaaaaaaaaa",
                 "{\"result\":0}", NULL) == 404);
    CHECK(answer("u-own", "exec_aaaaaaaaaaaaaaaaaaaaaaaaaa", cid,
                 "{\"result\":0}", NULL) == 404);
    /* A body that is neither answer is refused and changes nothing. */
    CHECK(answer("u-own", r.eid, cid, "{\"result\":1,\"error\":{}}", NULL) ==
          400);
    CHECK(answer("u-own", r.eid, cid, "{\"result\":\"first\"}", NULL) == 204);
    CHECK(answer("u-own", r.eid, cid, "{\"result\":\"second\"}", &ar) == 409);
    CHECK_ERROR(&ar, 409, "conflict");
    itest_resp_release(&ar);
    json_t *hold = run_next(&r, 30000);
    CHECK(hold &&
          answer("u-own", r.eid, call_id(hold), "{\"result\":0}", NULL) == 204);
    CHECK(run_next(&r, 30000) == NULL && r.result);
    CHECKF(streq(r.out, "first\n"), "%s", r.out);
    /* Regression: the result event went out before the execution was
     * over, so right after it the status could say running and an
     * answer get 409.  Now at once: done, and 410. */
    char *path = itest_fmt("/v1/executions/%s", r.eid);
    itest_request(srv, "GET", path, srv->admin_key, "u-own", NULL, NULL, 0,
                  NULL, &ar);
    CHECKF(streq(itest_json_str(ar.json, "status"), "done"), "%s", ar.body);
    itest_resp_release(&ar);
    free(path);
    CHECK(answer("u-own", r.eid, cid, "{\"result\":\"late\"}", &ar) == 410);
    CHECK_ERROR(&ar, 410, "call_expired");
    itest_resp_release(&ar);
    run_close(&r);
    free(body);
    session_done("u-own", sid);
}

/* Arguments over the call size are refused in the code (ValueError), an
 * answer over it is 413; the run's calls are counted (RuntimeError past
 * them). */
static void test_limits(void)
{
    char *sid = maybe_session("u-lim");
    char *code =
        itest_fmt("try:\n    call_client('big', 'x' * %d)\n"
                  "except ValueError as e:\n    print('VE', 'over' in str(e))\n"
                  "try:\n    call_client('nan', float('nan'))\n"
                  "except ValueError as e:\n    print('NaN refused')\n"
                  "print(call_client('huge'))\n"
                  "n = 0\n"
                  "try:\n    for i in range(%d):\n        call_client('c', i)\n"
                  "        n += 1\n"
                  "except RuntimeError as e:\n    print(n, 'calls', e)\n",
                  CALL_SIZE + 10, MAX_CALLS + 5);
    char *body = body_with(code, sid, NULL);
    struct run r;
    run_open(&r, "u-lim", body);
    json_t *call;
    while ((call = run_next(&r, 30000)) != NULL) {
        const char *name = json_string_value(json_object_get(call, "name"));
        if (streq(name, "huge")) {
            char *big = malloc(CALL_SIZE + 64);
            int n = snprintf(big, 32, "{\"result\":\"");
            memset(big + n, 'y', CALL_SIZE);
            strcpy(big + n + CALL_SIZE, "\"}");
            struct itest_resp ar;
            CHECK(answer("u-lim", r.eid, call_id(call), big, &ar) == 413);
            CHECK_ERROR(&ar, 413, "payload_too_large");
            itest_resp_release(&ar);
            free(big);
            CHECK(answer("u-lim", r.eid, call_id(call),
                         "{\"result\":\"small\"}", NULL) == 204);
        } else {
            CHECK(answer("u-lim", r.eid, call_id(call), "{\"result\":null}",
                         NULL) == 204);
        }
    }
    CHECK(r.result != NULL);
    /* huge is call 1; then MAX_CALLS - 1 more. */
    char *want = itest_fmt("VE True\nNaN refused\nsmall\n%d calls interpd: "
                           "this run made as many calls as its policy "
                           "allows (calls)\n",
                           MAX_CALLS - 1);
    CHECKF(streq(r.out, want), "stdout:\n%s\nwant:\n%s", r.out, want);
    CHECK(json_array_size(r.calls) == MAX_CALLS);
    free(want);
    free(code);
    run_close(&r);
    free(body);
    session_done("u-lim", sid);
}

/* A batch keeps IN_FLIGHT calls going (no more), its results in order
 * whatever order the answers come in; the async form awaits together. */
static void test_batch_and_async(void)
{
    char *sid = maybe_session("u-batch");
    char *body =
        body_with("print(llm_query.batch(range(10)))\n"
                  "import asyncio\n"
                  "async def main():\n"
                  "    return await asyncio.gather(call_client_async('a', 1),\n"
                  "                                llm_query.call_async(2))\n"
                  "print(asyncio.run(main()))\n",
                  sid, "{\"functions\": [\"llm_query\"]}");
    struct run r;
    run_open(&r, "u-batch", body);
    /* The batch: take IN_FLIGHT calls, then answer them newest first. */
    for (int round = 0; round < 3; round++) {
        json_t *got[IN_FLIGHT];
        int n = 0;
        int want = round < 2 ? IN_FLIGHT : 2;
        while (n < want && (got[n] = run_next(&r, 30000)) != NULL)
            n++;
        CHECKF(n == want, "round %d: %d calls", round, n);
        /* No more than IN_FLIGHT wait at once: nothing else comes. */
        struct sse_event e;
        CHECK(!sse_next(&r.c, 300, &e) || !strcmp(e.kind, ""));
        sse_event_release(&e);
        for (int i = n - 1; i >= 0; i--) {
            json_t *arg = json_array_get(json_object_get(got[i], "args"), 0);
            char *a = itest_fmt("{\"result\": %lld}",
                                (long long)json_integer_value(arg) * 10);
            CHECK(answer("u-batch", r.eid, call_id(got[i]), a, NULL) == 204);
            free(a);
        }
    }
    json_t *res = run_answering(&r, echo);
    CHECK(json_is_true(json_object_get(res, "success")));
    CHECKF(streq(r.out, "[0, 10, 20, 30, 40, 50, 60, 70, 80, 90]\n"
                        "[{'name': 'a', 'args': [1], 'kwargs': {}}, "
                        "{'name': 'llm_query', 'args': [2], 'kwargs': {}}]\n"),
           "%s", r.out);
    run_close(&r);
    free(body);
    session_done("u-batch", sid);
}

/* A session's functions are the call's: the next call that declares
 * none has none (its own variables stay). */
static void test_session_functions(void)
{
    char *sid = session_new(srv, "u-sf");
    char *b1 =
        body_with("x = 1\nprint(f(3))\n", sid, "{\"functions\": [\"f\"]}");
    struct run r;
    run_open(&r, "u-sf", b1);
    run_answering(&r, echo);
    CHECKF(strstr(r.out, "'args': [3]") != NULL, "%s", r.out);
    run_close(&r);
    char *b2 = body_with("print(x)\ntry:\n    f\n"
                         "except NameError:\n    print('no f')\n"
                         "print(g('z'))\n",
                         sid, "{\"functions\": [\"g\"]}");
    run_open(&r, "u-sf", b2);
    run_answering(&r, echo);
    CHECKF(strstr(r.out, "1\nno f\n{'name': 'g', 'args': ['z']") == r.out, "%s",
           r.out);
    run_close(&r);
    free(b1);
    free(b2);
    session_end(srv, "u-sf", sid);
    free(sid);
}

/* Without a stream nobody could answer: "functions" is 400, and
 * call_client raises RuntimeError. */
static void test_without_stream(void)
{
    struct itest_resp r;
    const char *b = "{\"code\":\"1\",\"functions\":[\"f\"]}";
    itest_request(srv, "POST", "/v1/executions", srv->admin_key, "u-ns",
                  "application/json", b, strlen(b), NULL, &r);
    CHECK_ERROR(&r, 400, "invalid_request");
    itest_resp_release(&r);
    const char *bad = "{\"code\":\"1\",\"stream\":true,\"functions\":[\"9x\"]}";
    itest_request(srv, "POST", "/v1/executions", srv->admin_key, "u-ns",
                  "application/json", bad, strlen(bad), NULL, &r);
    CHECK_ERROR(&r, 400, "invalid_request");
    itest_resp_release(&r);
    CHECK(itest_exec(srv, srv->admin_key, "u-ns",
                     json_pack("{s:s}", "code",
                               "try:\n    call_client('f')\n"
                               "except RuntimeError as e:\n    print(e)\n"),
                     30000, &r) == 200);
    CHECKF(strstr(itest_exec_stdout(&r), "not streamed") != NULL, "%s",
           itest_exec_stdout(&r));
    itest_resp_release(&r);
}

/* A client that leaves while a call waits cancels the run; one that
 * detached lets it go on, its calls failing with ConnectionError. */
static void test_client_leaves(void)
{
    char *sid = maybe_session("u-leave");
    char *body = body_with("call_client('q')\n", sid, NULL);
    struct run r;
    run_open(&r, "u-leave", body);
    CHECK(run_next(&r, 30000) != NULL);
    char eid[64];
    snprintf(eid, sizeof eid, "%s", r.eid);
    run_close(&r);
    char st[32];
    json_t *res = NULL;
    CHECKF(itest_exec_wait_status(srv, "u-leave", eid, "cancelled", st,
                                  sizeof st, NULL),
           "status %s", st);
    free(body);

    body = body_with("try:\n    call_client('q')\n"
                     "except ConnectionError as e:\n    print('gone', e)\n",
                     sid, "{\"detach\": true}");
    run_open(&r, "u-leave", body);
    CHECK(run_next(&r, 30000) != NULL);
    snprintf(eid, sizeof eid, "%s", r.eid);
    run_close(&r);
    CHECKF(itest_exec_wait_status(srv, "u-leave", eid, "done", st, sizeof st,
                                  &res),
           "status %s", st);
    const char *so = itest_json_str(res, "stdout");
    CHECKF(so && strstr(so, "gone interpd: the client") != NULL, "stdout %s",
           so ? so : "(none)");
    json_decref(res);
    free(body);
    session_done("u-leave", sid);
}

/* The code writes its own bytes on the call socket: a frame that breaks
 * the framing closes it (its calls fail with ConnectionError), and the
 * service goes on. */
static void test_bad_frames(void)
{
    /* Python expressions of the bytes the code writes (f: a frame of
     * these bytes, its length first). */
    static const char *const frames[] = {
        "f(b'hello')",                          /* no JSON */
        "b'\\xff\\xff\\xff\\xff' + b'x' * 100", /* over the bound */
        "b'\\x00\\x00\\x00\\x00'",              /* empty */
        "f(b'{\"op\":\"call\",\"seq\":7,\"name\":\"x\",\"args\":[],"
        "\"kwargs\":{}}')", /* out of order */
        "f(b'{\"op\":\"call\",\"seq\":1,\"name\":\"x\",\"args\":[],"
        "\"kwargs\":{},\"more\":1}')", /* another key */
        "f(b'{\"op\":\"call\",\"seq\":1,\"name\":\"\",\"args\":[],"
        "\"kwargs\":{}}')", /* no name */
        "f(b'{\"op\":\"call\",\"seq\":1,\"name\":\"x\",\"args\":{},"
        "\"kwargs\":{}}')", /* args not a list */
        "f(b'{\"op\":\"call\",\"seq\":1,\"name\":\"x\",\"args\":[\"' + "
        "b'y' * 70000 + b'\"],\"kwargs\":{}}')", /* over the call size */
        "f(b'{\"op\":\"call\",\"seq\":1,\"seq\":1,\"name\":\"x\","
        "\"args\":[],\"kwargs\":{}}')",             /* a key twice */
        "f(b'{\"op\":\"display\",\"bundle\":[]}')", /* not a bundle */
    };
    for (size_t i = 0; i < sizeof frames / sizeof frames[0]; i++) {
        char *sid = maybe_session("u-bad");
        char *code = itest_fmt(
            "import os\n"
            "fd = call_client.__globals__['_CALL_FD'][0]\n"
            "def f(body):\n    return len(body).to_bytes(4, 'big') + body\n"
            "data = %s\n"
            "while data:\n    data = data[os.write(fd, data):]\n"
            "try:\n    call_client('q')\n"
            "except ConnectionError as e:\n    print('closed')\n",
            frames[i]);
        char *body = body_with(code, sid, NULL);
        struct run r;
        run_open(&r, "u-bad", body);
        json_t *call;
        while ((call = run_next(&r, 30000)) != NULL)
            answer("u-bad", r.eid, call_id(call), "{\"result\":1}", NULL);
        CHECKF(r.result && streq(r.out, "closed\n") &&
                   json_array_size(r.calls) == 0,
               "frame %zu: %s", i, r.out);
        run_close(&r);
        free(body);
        free(code);
        session_done("u-bad", sid);
    }
    /* The service goes on. */
    struct itest_resp g;
    CHECK(itest_exec(srv, srv->admin_key, "u-bad",
                     json_pack("{s:s}", "code", "print(6 * 7)"), 30000,
                     &g) == 200);
    CHECK(streq(itest_exec_stdout(&g), "42\n"));
    itest_resp_release(&g);
}

/* Calls the code writes itself past calls-in-flight are refused at once
 * (RuntimeError), whatever the library does. */
static void test_in_flight_enforced(void)
{
    char *sid = maybe_session("u-fl");
    /* Six calls written at once; the two past calls-in-flight are refused
     * before any is answered (the client answers only once the code says
     * it has those two refusals). */
    char *code = itest_fmt(
        "import os, json, sys\n"
        "fd = call_client.__globals__['_CALL_FD'][0]\n"
        "for seq in range(1, %d):\n"
        "    b = json.dumps({'op': 'call', 'seq': seq, 'name': 'n',\n"
        "                    'args': [seq], 'kwargs': {}}).encode()\n"
        "    os.write(fd, len(b).to_bytes(4, 'big') + b)\n"
        "buf, got, said = b'', {}, False\n"
        "while len(got) < %d:\n"
        "    buf += os.read(fd, 65536)\n"
        "    while len(buf) >= 4 and len(buf) >= 4 + int.from_bytes(buf[:4], "
        "'big'):\n"
        "        n = int.from_bytes(buf[:4], 'big')\n"
        "        a = json.loads(buf[4:4 + n])\n"
        "        buf = buf[4 + n:]\n"
        "        got[a['seq']] = a.get('result', a.get('error', "
        "{}).get('type'))\n"
        "    if not said and %d in got and %d in got:\n"
        "        print('refused', flush=True)\n"
        "        said = True\n"
        "print(sorted(got.items()))\n",
        IN_FLIGHT + 3, IN_FLIGHT + 2, IN_FLIGHT + 1, IN_FLIGHT + 2);
    char *body = body_with(code, sid, NULL);
    struct run r;
    run_open(&r, "u-fl", body);
    json_t *got[IN_FLIGHT];
    int n = 0;
    while (n < IN_FLIGHT && (got[n] = run_next(&r, 30000)) != NULL)
        n++;
    CHECK(n == IN_FLIGHT);
    /* Wait for the code's word (stdout), then answer. */
    for (int i = 0; i < 300 && !strstr(r.out, "refused") && !r.result; i++) {
        struct sse_event e;
        if (!sse_next(&r.c, 100, &e))
            continue;
        CHECKF(!strcmp(e.kind, "stdout") || !e.kind[0], "event %s", e.kind);
        json_t *d =
            e.kind[0] ? json_loads(e.data, JSON_DECODE_ANY, NULL) : NULL;
        if (json_is_string(d)) {
            char *o = itest_fmt("%s%s", r.out, json_string_value(d));
            free(r.out);
            r.out = o;
        }
        json_decref(d);
        sse_event_release(&e);
    }
    CHECKF(strstr(r.out, "refused") != NULL, "%s", r.out);
    for (int i = 0; i < n; i++) {
        char *a = itest_fmt("{\"result\": %lld}",
                            (long long)json_integer_value(json_array_get(
                                json_object_get(got[i], "args"), 0)));
        CHECK(answer("u-fl", r.eid, call_id(got[i]), a, NULL) == 204);
        free(a);
    }
    CHECK(run_next(&r, 30000) == NULL && r.result);
    CHECKF(streq(r.out, "refused\n[(1, 1), (2, 2), (3, 3), (4, 4), "
                        "(5, 'RuntimeError'), (6, 'RuntimeError')]\n"),
           "%s", r.out);
    run_close(&r);
    free(body);
    free(code);
    session_done("u-fl", sid);
}

/* The clock is paused at most max-call-wait in all: past it the run
 * times out at its wall clock, even while a call waits. */
static void test_call_wait_ceiling(void)
{
    char *key = itest_create_policy_key(srv, "t-tight", "tight");
    char *sid = NULL;
    struct itest_resp sr;
    if (itest_exec_session()) {
        itest_request(srv, "POST", "/v1/sessions", key, "u-ceil",
                      "application/json", "{}", 2, NULL, &sr);
        CHECK_STATUS(&sr, 201);
        sid = itest_json_dup(sr.json, "session_id");
        itest_resp_release(&sr);
    }
    char *body = body_with("call_client('never')\n", sid, "{\"timeout\": 1}");
    struct run r;
    memset(&r, 0, sizeof r);
    r.user = "u-ceil";
    r.calls = json_array();
    r.displays = json_array();
    r.out = calloc(1, 1);
    sse_open(&r.c, srv, key, "u-ceil", body, NULL);
    CHECK(r.c.status == 200);
    CHECK(run_next(&r, 30000) != NULL);
    double t0 = itest_now();
    CHECK(run_next(&r, 30000) == NULL && r.result);
    double took = itest_now() - t0;
    CHECKF(r.result && json_is_true(json_object_get(r.result, "timed_out")),
           "%s", r.result ? json_dumps(r.result, 0) : "(none)");
    /* 1 s paused, the rest of the run's 1 s, well before the call's own
     * 10 s timeout. */
    CHECKF(took > 0.9 && took < 6, "timed out %.2f s after the call", took);
    run_close(&r);
    free(body);
    if (sid) {
        char *path = itest_fmt("/v1/sessions/%s", sid);
        itest_request(srv, "DELETE", path, key, "u-ceil", NULL, NULL, 0, NULL,
                      &sr);
        itest_resp_release(&sr);
        free(path);
        free(sid);
    }
    free(key);
}

/* A display bundle is an event when it is shown, not when the code ends,
 * and the events are the result's display list. */
static void test_display_as_shown(void)
{
    char *sid = maybe_session("u-disp");
    char *body = body_with("import time\ndisplay({'a': 1})\n"
                           "time.sleep(2)\n[1, 2]\n",
                           sid, NULL);
    struct run r;
    double t0 = itest_now();
    run_open(&r, "u-disp", body);
    run_answering(&r, echo);
    double t_end = itest_now();
    CHECK(json_array_size(r.displays) == 2);
    CHECKF(r.display_at[0] - t0 < t_end - t0 - 1.5,
           "first display at %.2f s of %.2f", r.display_at[0] - t0, t_end - t0);
    CHECKF(json_equal(r.displays, json_object_get(r.result, "display")),
           "events %s, result %s", json_dumps(r.displays, 0),
           json_dumps(json_object_get(r.result, "display"), 0));
    run_close(&r);
    free(body);
    session_done("u-disp", sid);
}

int main(void)
{
    static const struct test_case cases[] = {
        T(test_round_trip),
        T(test_error_answer),
        T(test_time),
        T(test_answer_scoping),
        T(test_limits),
        T(test_batch_and_async),
        T(test_session_functions),
        T(test_without_stream),
        T(test_client_leaves),
        T(test_bad_frames),
        T(test_display_as_shown),
        T(test_in_flight_enforced),
        T(test_call_wait_ceiling),
    };
    /* In a config file: `keys create --policy tight` reads it too. */
    const char *config = "policy.standard.call-timeout = 2s\n"
                         "policy.standard.calls = 20\n"
                         "policy.standard.calls-in-flight = 4\n"
                         "policy.standard.call-size = 64K\n"
                         "policy.tight.max-call-wait = 1s\n"
                         "policy.tight.call-timeout = 10s\n";
    srv = itest_start(&(struct itest_opts){.config = config});
    if (!srv)
        return 1;
    int rc = test_run(cases, (sizeof(cases) / sizeof(cases[0])));
    int before = test__failed_checks;
    itest_stop(srv);
    return rc || test__failed_checks != before;
}
