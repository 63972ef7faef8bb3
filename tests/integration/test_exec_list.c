/*
 * test_exec_list.c - every execution has its id from the start (issue
 * 22): a synchronous answer carries it in X-Execution-Id, and
 * GET /v1/executions lists the caller's executions, synchronous and
 * asynchronous, newest first, paged like the file list, scoped to the
 * caller; a run still going shows as "running" to a second connection
 * while its caller waits.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <sys/socket.h>
#include <unistd.h>

#include "harness.h"

/* ---- helpers ------------------------------------------------------------ */

/* A synchronous run of code as user: its execution id (new; NULL when it
 * did not answer 200 with the header equal to the body's id). */
static char *run_sync(struct itest_server *s, const char *key, const char *user,
                      const char *code)
{
    struct itest_resp r;
    char *id = NULL;
    itest_exec(s, key, user, json_pack("{s:s}", "code", code), 0, &r);
    CHECK_STATUS(&r, 200);
    const char *hdr = itest_header(&r, "X-Execution-Id");
    const char *body = itest_json_str(r.json, "execution_id");
    CHECKF(hdr && body && !strcmp(hdr, body),
           "X-Execution-Id %s, execution_id %s", hdr ? hdr : "(none)",
           body ? body : "(none)");
    if (r.status == 200 && hdr && body && !strcmp(hdr, body))
        id = strdup(body);
    itest_resp_release(&r);
    return id;
}

/* An asynchronous run as user, waited for until done (bounded poll of
 * GET /v1/executions/{id}: the API's way to wait); its id (new) or NULL. */
static char *run_async(struct itest_server *s, const char *user,
                       const char *code)
{
    struct itest_resp r;
    itest_exec(s, s->admin_key, user,
               json_pack("{s:s, s:b}", "code", code, "async", 1), 0, &r);
    CHECK_STATUS(&r, 202);
    char *id = itest_json_dup(r.json, "execution_id");
    itest_resp_release(&r);
    if (!*id) {
        free(id);
        return NULL;
    }
    char *path = itest_fmt("/v1/executions/%s", id);
    bool done = false;
    for (int i = 0; i < 1200 && !done; i++) {
        itest_request(s, "GET", path, s->admin_key, user, NULL, NULL, 0, NULL,
                      &r);
        const char *st = itest_json_str(r.json, "status");
        done = r.status != 200 || (st && !strcmp(st, "done"));
        itest_resp_release(&r);
        if (!done)
            usleep(50 * 1000);
    }
    CHECKF(done, "async %s never done", id);
    free(path);
    return id;
}

/* GET path (a list) as key/user: the answer's JSON (new) after checking
 * the status is 200, else NULL. */
static json_t *get_list(struct itest_server *s, const char *key,
                        const char *user, const char *path)
{
    struct itest_resp r;
    itest_request(s, "GET", path, key, user, NULL, NULL, 0, NULL, &r);
    CHECK_STATUS(&r, 200);
    json_t *j = r.status == 200 ? json_incref(r.json) : NULL;
    itest_resp_release(&r);
    return j;
}

/* One entry of a list has the contract's fields and types. */
static void check_entry(const json_t *e, const char *id, const char *status)
{
    CHECK_STR(itest_json_str(e, "execution_id"), id);
    CHECK_STR(itest_json_str(e, "status"), status);
    const char *at = itest_json_str(e, "created_at");
    CHECKF(at && strlen(at) == 20 && at[19] == 'Z', "created_at %s",
           at ? at : "(none)");
    CHECK(json_is_null(json_object_get(e, "session_id")));
    json_t *d = json_object_get(e, "duration");
    if (!strcmp(status, "done"))
        CHECKF(json_is_number(d) && json_number_value(d) >= 0 &&
                   json_number_value(d) < 120,
               "duration of a done execution: %g (JSON type %d)",
               json_number_value(d), d ? (int)json_typeof(d) : -1);
    else
        CHECK(json_is_null(d));
}

static void check_bad(struct itest_server *s, const char *path)
{
    struct itest_resp r;
    itest_request(s, "GET", path, s->admin_key, "u1", NULL, NULL, 0, NULL, &r);
    CHECK_ERROR(&r, 400, "invalid_request");
    itest_resp_release(&r);
}

/* ---- tests -------------------------------------------------------------- */

/* Sync and async runs listed newest first, paged with limit=1 and the
 * cursor, a bad cursor and a bad limit refused, and nobody else sees
 * them. */
static void list_and_page(void)
{
    struct itest_server *s = itest_start(NULL);
    struct itest_resp r;
    REQUIRE(s);
    char *ids[3] = {run_sync(s, s->admin_key, "u1", "print(1)"),
                    run_async(s, "u1", "print(2)"),
                    run_sync(s, s->admin_key, "u1", "print(3)")};
    REQUIRE(ids[0] && ids[1] && ids[2]);

    json_t *l = get_list(s, s->admin_key, "u1", "/v1/executions");
    REQUIRE(l);
    json_t *ex = json_object_get(l, "executions");
    CHECK_INT(json_array_size(ex), 3);
    CHECK(json_is_null(json_object_get(l, "next_cursor")));
    for (size_t i = 0; i < json_array_size(ex) && i < 3; i++)
        check_entry(json_array_get(ex, i), ids[2 - i], "done");
    json_decref(l);

    /* A synchronous execution by id: done, its result not kept. */
    char *path = itest_fmt("/v1/executions/%s", ids[0]);
    itest_request(s, "GET", path, s->admin_key, "u1", NULL, NULL, 0, NULL, &r);
    CHECK_STATUS(&r, 200);
    CHECK_STR(itest_json_str(r.json, "execution_id"), ids[0]);
    CHECK_STR(itest_json_str(r.json, "status"), "done");
    CHECK(json_is_null(json_object_get(r.json, "result")));
    itest_resp_release(&r);

    /* Pages of one, by the cursor, until next_cursor is null. */
    char *cursor = NULL;
    for (int page = 0; page < 3; page++) {
        char *p = cursor ? itest_fmt("/v1/executions?limit=1&cursor=%s", cursor)
                         : itest_fmt("/v1/executions?limit=1");
        l = get_list(s, s->admin_key, "u1", p);
        free(p);
        free(cursor);
        cursor = NULL;
        REQUIRE(l);
        ex = json_object_get(l, "executions");
        CHECK_INT(json_array_size(ex), 1);
        CHECK_STR(itest_json_str(json_array_get(ex, 0), "execution_id"),
                  ids[2 - page]);
        const char *next = itest_json_str(l, "next_cursor");
        if (page < 2)
            CHECKF(next, "page %d has no next_cursor", page);
        else
            CHECK(json_is_null(json_object_get(l, "next_cursor")));
        cursor = next ? strdup(next) : NULL;
        json_decref(l);
        if (page < 2 && !cursor)
            break;
    }
    free(cursor);

    check_bad(s, "/v1/executions?cursor=garbage");
    check_bad(s, "/v1/executions?cursor=1700000000000.exec_");
    /* A file list's cursor is not an execution list's. */
    check_bad(
        s,
        "/v1/executions?cursor=1795301645528.file_w7xorh3wzd2hdyj6hjdlruerqe");
    check_bad(s, "/v1/executions?limit=0");
    check_bad(s, "/v1/executions?limit=1001");
    check_bad(s, "/v1/executions?limit=abc");

    /* Another user of the tenant, and another tenant's user of the same
     * name: nothing listed, the id not found. */
    l = get_list(s, s->admin_key, "u2", "/v1/executions");
    CHECK(l && json_array_size(json_object_get(l, "executions")) == 0);
    json_decref(l);
    itest_request(s, "GET", path, s->admin_key, "u2", NULL, NULL, 0, NULL, &r);
    CHECK_ERROR(&r, 404, "not_found");
    itest_resp_release(&r);
    char *beta = NULL;
    CHECK(itest_create_key(s, "beta", false, &beta, NULL));
    if (beta) {
        l = get_list(s, beta, "u1", "/v1/executions");
        CHECK(l && json_array_size(json_object_get(l, "executions")) == 0);
        json_decref(l);
        itest_request(s, "GET", path, beta, "u1", NULL, NULL, 0, NULL, &r);
        CHECK_ERROR(&r, 404, "not_found");
        itest_resp_release(&r);
    }
    free(beta);
    free(path);
    for (int i = 0; i < 3; i++)
        free(ids[i]);
    itest_stop(s);
}

/* ---- a run seen running ------------------------------------------------- */

/* The test's origin on 127.0.0.2, which the networked run fetches: its
 * connection arriving says the code runs; the answer, sent when the test
 * has looked, lets it end. */
struct waiter {
    struct itest_server *s;
    const char *key;
    char *code;
    struct itest_resp r;
};

static void *waiter_main(void *arg)
{
    struct waiter *w = arg;
    itest_exec(w->s, w->key, "u1", json_pack("{s:s}", "code", w->code), 0,
               &w->r);
    return NULL;
}

static int listen_origin(int *port)
{
    struct sockaddr_in sa = {.sin_family = AF_INET};
    socklen_t len = sizeof sa;
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sa.sin_addr.s_addr = inet_addr("127.0.0.2");
    if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof sa) ||
        listen(fd, 4) || getsockname(fd, (struct sockaddr *)&sa, &len)) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    *port = ntohs(sa.sin_port);
    return fd;
}

/* The list as seen from a second connection while the caller waits: its
 * one entry (new reference) or NULL. */
static json_t *only_entry(struct itest_server *s, const char *key)
{
    json_t *l = get_list(s, key, "u1", "/v1/executions");
    json_t *ex = json_object_get(l, "executions");
    CHECK_INT(json_array_size(ex), 1);
    json_t *e = json_incref(json_array_get(ex, 0));
    json_decref(l);
    return e;
}

static void running_seen_from_another_connection(void)
{
    const char *args[] = {"--fetch-allow", "127.0.0.2/32", NULL};
    struct itest_opts o = {.args = args};
    int port = 0, lfd = listen_origin(&port);
    REQUIRE(lfd >= 0);
    struct itest_server *s = itest_start(&o);
    if (!s)
        close(lfd);
    REQUIRE(s);
    char *key = itest_create_policy_key(s, "net", "networked");
    struct waiter w = {.s = s, .key = key};
    pthread_t th;
    bool started = false;
    if (!key)
        goto out;
    w.code =
        itest_fmt("import urllib.request\n"
                  "print(urllib.request.urlopen("
                  "'http://127.0.0.2:%d/go', timeout=60).read().decode())\n",
                  port);
    started = !pthread_create(&th, NULL, waiter_main, &w);
    CHECK(started);
    if (!started)
        goto out;
    /* The code's request arriving is the sign that it runs. */
    struct pollfd pfd = {.fd = lfd, .events = POLLIN};
    CHECKF(poll(&pfd, 1, 90000) == 1, "the run never fetched the origin");
    int c = pfd.revents ? accept4(lfd, NULL, NULL, SOCK_CLOEXEC) : -1;
    json_t *e = only_entry(s, key);
    CHECK_STR(itest_json_str(e, "status"), "running");
    CHECK(json_is_null(json_object_get(e, "duration")));
    char *id = itest_json_dup(e, "execution_id");
    json_decref(e);
    if (c >= 0) {
        static const char ans[] = "HTTP/1.1 200 OK\r\nContent-Length: 7\r\n"
                                  "Connection: close\r\n\r\nfetched";
        char *req = itest_read_request(c, 30000, &(size_t){0});
        free(req);
        CHECK(itest_send_all(c, ans, sizeof ans - 1));
        close(c);
    }
    pthread_join(th, NULL);
    CHECK_STATUS(&w.r, 200);
    CHECK_STR(itest_exec_stdout(&w.r), "fetched\n");
    CHECK_STR(itest_header(&w.r, "X-Execution-Id"), id);
    CHECK_STR(itest_json_str(w.r.json, "execution_id"), id);
    itest_resp_release(&w.r);
    e = only_entry(s, key);
    check_entry(e, id, "done");
    json_decref(e);
    free(id);
out:
    close(lfd);
    free(w.code);
    free(key);
    itest_stop(s);
}

TEST_MAIN(T(list_and_page), T(running_seen_from_another_connection))
