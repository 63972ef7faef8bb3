/*
 * test_data_dir.c - the data dir works wherever the service's own user
 * can write (issue 12): a relative --data-dir, a data dir under a 0700
 * parent (like /root), and a readiness that runs a real execution, so it
 * cannot say "ok" while executions fail.
 */
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"

/* POST /v1/executions {"code": code} as u1; the status. */
static long run(struct itest_server *s, const char *code, struct itest_resp *r)
{
    return itest_exec(s, s->admin_key, "u1", json_pack("{s:s}", "code", code),
                      0, r);
}

/* Poll GET /readyz (bounded) until it answers want; true when it did.
 * *last gets the last body (new string, free()). */
static bool wait_readyz(struct itest_server *s, long want, int timeout_ms,
                        char **last)
{
    struct timespec gap = {0, 50 * 1000 * 1000};
    double deadline = itest_now() + timeout_ms / 1000.0;
    bool got = false;
    *last = NULL;
    while (!got) {
        struct itest_resp r;
        itest_request(s, "GET", "/readyz", NULL, NULL, NULL, NULL, 0, NULL, &r);
        got = r.status == want;
        free(*last);
        *last = itest_fmt("%ld %s", r.status, r.body);
        itest_resp_release(&r);
        if (got || itest_now() > deadline)
            break;
        nanosleep(&gap, NULL); /* the pace of the poll, not a wait for it */
    }
    return got;
}

/* README command 1 as written: a relative --data-dir, resolved at start. */
static void relative_data_dir(void)
{
    struct itest_opts o = {.relative_data_dir = true};
    struct itest_server *s = itest_start(&o);
    struct itest_resp r;
    REQUIRE(s);
    run(s, "print(6 * 7)", &r);
    CHECK_STATUS(&r, 200);
    CHECK_STR(itest_exec_stdout(&r), "42\n");
    itest_resp_release(&r);
    itest_request(s, "GET", "/readyz", NULL, NULL, NULL, NULL, 0, NULL, &r);
    CHECK_STATUS(&r, 200);
    CHECK_STR(itest_json_str(r.json, "status"), "ready");
    itest_resp_release(&r);
    /* The config line shows the absolute path the server works in. */
    char *want = itest_fmt("data-dir = %s (flag)", s->data_dir);
    CHECK(itest_wait_log_line(s, 5000, want, NULL));
    free(want);
    itest_stop(s);
}

/* A data dir under a parent only its owner can enter (mkdtemp, then 0700,
 * like a clone under /root): executions, an upload read back with
 * load_file, a generated file. */
static void private_parent(void)
{
    struct itest_opts o = {.private_parent = true};
    struct itest_server *s = itest_start(&o);
    struct itest_resp r;
    struct stat st;
    REQUIRE(s);
    CHECK(stat(s->tmp_dir, &st) == 0 && (st.st_mode & 07777) == 0700);
    run(s, "print('hi')", &r);
    CHECK_STATUS(&r, 200);
    CHECK_STR(itest_exec_stdout(&r), "hi\n");
    itest_resp_release(&r);

    itest_upload_raw(s, s->admin_key, "u1", "note.txt", "text/plain",
                     "private bytes", 13, NULL, &r);
    REQUIRE_STATUS(&r, 201);
    char *id = itest_json_dup(r.json, "file_id");
    itest_resp_release(&r);
    char *code = itest_fmt("print(load_file('%s'))\n"
                           "open('/mnt/output/out.txt', 'w').write('made')\n",
                           id);
    itest_exec(s, s->admin_key, "u1",
               json_pack("{s:s, s:[s]}", "code", code, "files", id), 0, &r);
    CHECK_STATUS(&r, 200);
    CHECK_STR(itest_exec_stdout(&r), "private bytes\n");
    json_t *gen = itest_json_get(r.json, "generated_files");
    CHECKF(json_array_size(gen) == 1, "generated_files: %s", r.body);
    CHECK_STR(itest_json_str(json_array_get(gen, 0), "filename"), "out.txt");
    itest_resp_release(&r);
    free(code);
    free(id);

    /* The service changed neither the parent nor the data dir. */
    CHECK(stat(s->tmp_dir, &st) == 0 && (st.st_mode & 07777) == 0700);
    CHECK(stat(s->data_dir, &st) == 0 && (st.st_mode & 07777) == 0700);
    itest_request(s, "GET", "/readyz", NULL, NULL, NULL, NULL, 0, NULL, &r);
    CHECK_STATUS(&r, 200);
    itest_resp_release(&r);
    itest_stop(s);
}

/* A copy of the source tree's prelude dir in a new temp dir (the test
 * breaks it, never the checkout's); the dir's path, free() it. */
static char *prelude_copy(void)
{
    char tmpl[] = "/tmp/interpd-prelude-XXXXXX";
    CHECK(mkdtemp(tmpl));
    char *dir = itest_fmt("%s/python", tmpl);
    char *src =
        itest_fmt("%s/service/exec/python/prelude.py", ITEST_SOURCE_DIR);
    char *dst = itest_fmt("%s/prelude.py", dir);
    size_t len = 0;
    char *text = itest_read_file(src, &len);
    FILE *f = mkdir(dir, 0755) == 0 && text ? fopen(dst, "w") : NULL;
    CHECK(f && fwrite(text, 1, len, f) == len);
    if (f)
        fclose(f);
    free(text);
    free(src);
    free(dst);
    return dir;
}

/* Readiness runs an execution: with the prelude dir gone (a file in its
 * place: staging a job copies it), /readyz turns 503 naming executions
 * within the check interval, and ready again once it is repaired. */
static void readiness_follows_executions(void)
{
    char *work = prelude_copy();
    const char *args[] = {"--ready-check-interval", "1s", "--prelude-dir", work,
                          NULL};
    struct itest_opts o = {.args = args};
    struct itest_server *s = itest_start(&o);
    struct itest_resp r;
    char *last = NULL;
    REQUIRE(s);
    CHECK(
        itest_wait_log_line(s, 5000, "start-up check ran an execution", NULL));
    itest_request(s, "GET", "/v1/admin/status", s->admin_key, NULL, NULL, NULL,
                  0, NULL, &r);
    CHECK_STATUS(&r, 200);
    CHECKF(json_is_true(itest_json_get(r.json, "execution_check.ok")),
           "execution_check: %s", r.body);
    CHECK(json_integer_value(itest_json_get(r.json, "execution_check.runs")) >=
          1);
    itest_resp_release(&r);
    CHECK(wait_readyz(s, 200, 5000, &last));
    free(last);

    char *away = itest_fmt("%s.away", work);
    REQUIRE(rename(work, away) == 0);
    FILE *f = fopen(work, "w");
    REQUIRE(f);
    fclose(f);
    CHECKF(wait_readyz(s, 503, 15000, &last), "readyz: %s", last);
    CHECKF(last && strstr(last, "executions") && strstr(last, "stage"),
           "readyz: %s", last ? last : "");
    free(last);
    itest_request(s, "GET", "/v1/admin/status", s->admin_key, NULL, NULL, NULL,
                  0, NULL, &r);
    CHECKF(json_is_false(itest_json_get(r.json, "execution_check.ok")) &&
               itest_json_str(r.json, "execution_check.error"),
           "execution_check: %s", r.body);
    itest_resp_release(&r);

    REQUIRE(unlink(work) == 0 && rename(away, work) == 0);
    CHECKF(wait_readyz(s, 200, 15000, &last), "readyz: %s", last);
    free(last);
    run(s, "print('back')", &r);
    CHECK_STATUS(&r, 200);
    CHECK_STR(itest_exec_stdout(&r), "back\n");
    itest_resp_release(&r);
    char *parent = itest_fmt("%s", work);
    *strrchr(parent, '/') = '\0';
    CHECK(itest_rm_rf(parent) == 0);
    free(parent);
    free(work);
    free(away);
    itest_stop(s);
}

/* A server whose executions cannot work refuses to start (exit 1) rather
 * than answer every execution 500. */
static void broken_executions_refuse_start(void)
{
    char tmpl[] = "/tmp/interpd-refuse-XXXXXX";
    REQUIRE(mkdtemp(tmpl));
    char *dir = itest_fmt("%s/data", tmpl);
    const char *bin = getenv("INTERPD_BIN");
    REQUIRE(bin);
    const char *argv[] = {
        bin,          "serve", "--listen", "127.0.0.1:0",
        "--data-dir", dir,     "--python", "/usr/bin/no-such-python",
        NULL};
    const char *unset[] = {"INTERPD_MONGO_URI", NULL};
    CHECK_INT(itest_run(argv, unset, 30000), 1);
    free(dir);
    CHECK(itest_rm_rf(tmpl) == 0);
}

TEST_MAIN(T(relative_data_dir), T(private_parent),
          T(readiness_follows_executions), T(broken_executions_refuse_start))
