/*
 * test_admin.c - GET /v1/admin/status and GET /metrics: admin keys only,
 * every contract field, counts that follow what the service did, and a
 * Prometheus exposition that a strict parser accepts.
 */
#include <fcntl.h>
#include <unistd.h>

#include <sys/stat.h>

#include "harness.h"

#ifndef ITEST_SOURCE_DIR
#define ITEST_SOURCE_DIR "."
#endif

static const char *const status_fields[] = {
    "venv_exists",        "python_path",
    "installed_packages", "package_count",
    "last_cleanup",       "total_user_files",
    "total_file_size_mb", "file_expiration_hours",
    "max_file_size_mb",   "version",
    "uptime_seconds",     "metadata_backend",
    "blob_backend",       "sandbox",
    "executions"};

static void status_fields_and_counts(void)
{
    struct itest_server *s = NULL;
    struct itest_opts o = {0};
    struct itest_resp r;
    char *bot = NULL, *bot_id = NULL;
    s = itest_start(&o);
    REQUIRE(s);

    REQUIRE(itest_create_key(s, "bot", false, &bot, &bot_id));
    itest_request(s, "GET", "/v1/admin/status", bot, NULL, NULL, NULL, 0, NULL,
                  &r);
    CHECK_ERROR(&r, 403, "forbidden");
    itest_resp_release(&r);
    itest_request(s, "GET", "/v1/admin/status", NULL, NULL, NULL, NULL, 0, NULL,
                  &r);
    CHECK_ERROR(&r, 401, "unauthorized");
    itest_resp_release(&r);

    /* Two files of 5 and 1,048,576 bytes, one execution. */
    itest_upload_raw(s, bot, "u1", "a.txt", "text/plain", "hello", 5, NULL, &r);
    CHECK_STATUS(&r, 201);
    itest_resp_release(&r);
    char *mib = calloc(1, 1 << 20);
    REQUIRE(mib);
    itest_upload_raw(s, bot, "u2", "b.bin", "application/octet-stream", mib,
                     1 << 20, NULL, &r);
    free(mib);
    CHECK_STATUS(&r, 201);
    itest_resp_release(&r);
    itest_exec(s, bot, "u1", json_pack("{s:s}", "code", "print(6 * 7)"), 60000,
               &r);
    CHECK_STATUS(&r, 200);
    CHECK_STR(itest_exec_stdout(&r), "42\n");
    itest_resp_release(&r);
    itest_exec(s, bot, "u1", json_pack("{s:s}", "code", "1/0"), 60000, &r);
    CHECK_STATUS(&r, 200);
    itest_resp_release(&r);
    itest_request(s, "POST", "/v1/admin/cleanup", s->admin_key, NULL, NULL,
                  NULL, 0, NULL, &r);
    CHECK_STATUS(&r, 200);
    itest_resp_release(&r);

    itest_request(s, "GET", "/v1/admin/status", s->admin_key, NULL, NULL, NULL,
                  0, NULL, &r);
    CHECK_STATUS(&r, 200);
    for (size_t i = 0; i < sizeof(status_fields) / sizeof(*status_fields); i++)
        CHECKF(itest_json_get(r.json, status_fields[i]) != NULL,
               "status has no \"%s\"", status_fields[i]);
    CHECK_INT(json_integer_value(itest_json_get(r.json, "total_user_files")),
              2);
    double mb = json_number_value(itest_json_get(r.json, "total_file_size_mb"));
    CHECKF(mb > 1.0 && mb < 1.0001, "total_file_size_mb %f", mb);
    CHECK(json_number_value(itest_json_get(r.json, "file_expiration_hours")) ==
          48.0);
    CHECK(json_number_value(itest_json_get(r.json, "max_file_size_mb")) ==
          50.0);
    CHECK_STR(itest_json_str(r.json, "version"), "0.1.0");
    CHECK_INT(json_integer_value(itest_json_get(r.json, "executions.total")),
              2);
    CHECK_INT(json_integer_value(itest_json_get(r.json, "executions.success")),
              1);
    CHECK_INT(json_integer_value(itest_json_get(r.json, "executions.error")),
              1);
    CHECK_INT(json_integer_value(itest_json_get(r.json, "executions.running")),
              0);
    const char *sandbox = itest_json_str(r.json, "sandbox");
    CHECKF(sandbox && strstr(sandbox, "cgroup"),
           "sandbox should say which cgroup version is used: %s",
           sandbox ? sandbox : "(null)");
    CHECKF(sandbox && strncmp(sandbox, "sandbox", 7) != 0,
           "the sandbox field repeats its name: %s", sandbox ? sandbox : "");
    /* No install yet: the base interpreter, which sees Debian's stack. */
    CHECK(json_is_false(itest_json_get(r.json, "venv_exists")));
    CHECK_STR(itest_json_str(r.json, "python_path"), "/usr/bin/python3");
    CHECK(json_integer_value(itest_json_get(r.json, "package_count")) > 5);
    CHECK_INT(json_integer_value(
                  itest_json_get(r.json, "last_cleanup.deleted_files")),
              0);
    CHECK(itest_json_str(r.json, "last_cleanup.at") != NULL);
    const char *meta = itest_json_str(r.json, "metadata_backend");
    CHECKF(meta && (!strcmp(meta, "sqlite") || !strcmp(meta, "mongodb")),
           "metadata_backend %s", meta ? meta : "(null)");
    itest_resp_release(&r);

    itest_request(s, "GET", "/metrics", bot, NULL, NULL, NULL, 0, NULL, &r);
    CHECK_ERROR(&r, 403, "forbidden");
    itest_resp_release(&r);
    free(bot);
    free(bot_id);
    itest_stop(s);
}

/* Write text to a file and run check-prom.py on it: 0 when valid. */
static int check_prom(struct itest_server *s, const char *text, size_t len)
{
    char *path = itest_fmt("%s/metrics.txt", s->tmp_dir);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0 || !itest_send_all(fd, text, len)) {
        if (fd >= 0)
            close(fd);
        free(path);
        return -1;
    }
    close(fd);
    const char *argv[] = {"/usr/bin/python3",
                          ITEST_SOURCE_DIR "/tests/support/check-prom.py", path,
                          NULL};
    int rc = itest_run(argv, NULL, 60000);
    free(path);
    return rc;
}

static bool has_line(const char *text, const char *prefix)
{
    size_t n = strlen(prefix);
    for (const char *p = text; p && *p;) {
        if (!strncmp(p, prefix, n))
            return true;
        p = strchr(p, '\n');
        if (p)
            p++;
    }
    return false;
}

static void metrics_exposition(void)
{
    /* No scheduled sweep: the one sweep counted is the request's. */
    const char *args[] = {"--sweep-interval", "never", NULL};
    struct itest_opts o = {.args = args};
    struct itest_server *s = itest_start(&o);
    struct itest_resp r;
    REQUIRE(s);
    itest_upload_raw(s, s->admin_key, "u1", "a.txt", "text/plain", "hi", 2,
                     NULL, &r);
    itest_resp_release(&r);
    for (int i = 0; i < 3; i++) {
        itest_request(s, "GET", "/v1/files", s->admin_key, "u1", NULL, NULL, 0,
                      NULL, &r);
        itest_resp_release(&r);
    }
    itest_request(s, "GET", "/v1/files/file_aaaaaaaaaaaaaaaaaaaaaaaaaa",
                  s->admin_key, "u1", NULL, NULL, 0, NULL, &r);
    itest_resp_release(&r);
    itest_exec(s, s->admin_key, "u1", json_pack("{s:s}", "code", "print(1)"),
               60000, &r);
    itest_resp_release(&r);
    itest_request(s, "POST", "/v1/admin/cleanup", s->admin_key, NULL, NULL,
                  NULL, 0, NULL, &r);
    itest_resp_release(&r);

    itest_request(s, "GET", "/metrics", s->admin_key, NULL, NULL, NULL, 0, NULL,
                  &r);
    CHECK_STATUS(&r, 200);
    const char *ct = itest_header(&r, "Content-Type");
    CHECKF(ct && !strncmp(ct, "text/plain; version=0.0.4", 25),
           "Content-Type %s", ct ? ct : "(none)");
    CHECK_INT(check_prom(s, r.body, r.len), 0);
    /* Requests by route template (never the raw path), status, method. */
    CHECK(has_line(r.body, "interpd_http_requests_total{route=\"/v1/files\","
                           "method=\"GET\",status=\"200\"} 3"));
    CHECK(has_line(r.body, "interpd_http_requests_total{route=\"/v1/files/"
                           "{id}\",method=\"GET\",status=\"404\"} 1"));
    CHECK(!strstr(r.body, "file_aaaaaaaa"));
    CHECK(has_line(r.body, "interpd_executions_total{outcome=\"success\"} 1"));
    CHECK(has_line(r.body, "interpd_execution_duration_seconds_count 1"));
    CHECK(has_line(r.body, "interpd_files_stored 1"));
    CHECK(has_line(r.body, "interpd_bytes_stored 2"));
    CHECK(has_line(r.body, "interpd_exec_running 0"));
    CHECK(has_line(r.body, "interpd_exec_queue_depth 0"));
    CHECK(has_line(r.body, "interpd_sweep_runs_total{result=\"ok\"} 1"));
    CHECK(has_line(r.body, "interpd_build_info{version=\"0.1.0\"} 1"));
    CHECK(has_line(r.body, "interpd_package_installs_total{outcome="));
    itest_resp_release(&r);

    /* The checker itself rejects a broken exposition. */
    static const char bad[] = "# TYPE x counter\nx{a=\"1} 2\n";
    CHECK(check_prom(s, bad, sizeof(bad) - 1) != 0);
    itest_stop(s);
}

/* `interpd status` asks the running server with the admin key from the
 * data dir, and fails clearly when no server answers. */
static void status_command(void)
{
    struct itest_opts o = {0};
    struct itest_server *s = itest_start(&o);
    char *out = NULL;
    REQUIRE(s);
    char *listen = itest_fmt("127.0.0.1:%d", s->port);
    int code = itest_cli(s, &out, "status", "--data-dir", s->data_dir,
                         "--listen", listen, NULL);
    CHECK_INT(code, 0);
    json_error_t jerr;
    json_t *doc = out ? json_loads(out, 0, &jerr) : NULL;
    CHECK(doc != NULL);
    CHECK_STR(itest_json_str(doc, "version"), "0.1.0");
    CHECK(itest_json_get(doc, "total_user_files") != NULL);
    json_decref(doc);
    free(out);
    out = NULL;
    free(listen);
    /* Every wildcard form the server accepts for --listen (the same
     * parser) is reached on loopback. */
    static const char *const wild[] = {"*", "0.0.0.0", "", "localhost"};
    for (size_t i = 0; i < sizeof(wild) / sizeof(*wild); i++) {
        listen = itest_fmt("%s:%d", wild[i], s->port);
        code = itest_cli(s, &out, "status", "--data-dir", s->data_dir,
                         "--listen", listen, NULL);
        CHECKF(code == 0, "interpd status --listen %s: exit %d", listen, code);
        free(out);
        out = NULL;
        free(listen);
    }
    /* Port 1 on loopback: nobody listens. */
    code = itest_cli(s, &out, "status", "--data-dir", s->data_dir, "--listen",
                     "127.0.0.1:1", NULL);
    CHECK_INT(code, 1);
    free(out);
    itest_stop(s);
}

/* The in-process scheduler deletes expired files without cron, and the
 * admin status shows its jobs. */
static void scheduled_sweep(void)
{
    const char *args[] = {
        "--file-ttl", "1s", "--sweep-interval", "1s", "--reconcile-interval",
        "1s",         NULL};
    struct itest_opts o = {.args = args};
    struct itest_server *s = itest_start(&o);
    struct itest_resp r;
    REQUIRE(s);
    itest_upload_raw(s, s->admin_key, "u1", "a.txt", "text/plain", "hello", 5,
                     NULL, &r);
    CHECK_STATUS(&r, 201);
    itest_resp_release(&r);
    /* Expired after 1 s; the sweep runs every second: bounded wait for the
     * bytes and the record to go, nobody calling cleanup. */
    CHECK(itest_wait_strays_at_most(s, 0, 20000));
    /* The counter is cumulative (last_cleanup is overwritten by the next
     * sweep a second later). */
    bool swept = false;
    for (int i = 0; i < 200 && !swept; i++) {
        itest_request(s, "GET", "/metrics", s->admin_key, NULL, NULL, NULL, 0,
                      NULL, &r);
        swept = has_line(r.body, "interpd_sweep_deleted_files_total 1");
        itest_resp_release(&r);
        if (!swept)
            usleep(100 * 1000);
    }
    itest_request(s, "GET", "/v1/admin/status", s->admin_key, NULL, NULL, NULL,
                  0, NULL, &r);
    CHECK(json_integer_value(itest_json_get(r.json, "jobs.sweep.runs")) >= 1);
    CHECK(itest_json_get(r.json, "jobs.reconcile") != NULL);
    CHECK(itest_json_get(r.json, "last_cleanup.at") != NULL);
    CHECK_INT(json_integer_value(itest_json_get(r.json, "total_user_files")),
              0);
    itest_resp_release(&r);
    CHECK(swept);
    /* The venv job runs at start (its interval is an hour): it lists the
     * base interpreter off the HTTP threads. */
    CHECK(itest_wait_job_ran(s, "venv", 30000));
    itest_request(s, "GET", "/v1/admin/status", s->admin_key, NULL, NULL, NULL,
                  0, NULL, &r);
    CHECK_STR(itest_json_str(r.json, "jobs.venv.last_result"), "ok");
    itest_resp_release(&r);
    itest_stop(s);
}

/* Regression (issue 20 item 8): `interpd status` with a key the server
 * refuses said only "the URL answered 401".  It now says the key was
 * refused and where it came from (the admin.key file, or
 * INTERPD_ADMIN_KEY), and a non-admin key is told apart. */
static void status_refused_key(void)
{
    struct itest_server *s = itest_start(NULL);
    REQUIRE(s);
    char *listen = itest_fmt("127.0.0.1:%d", s->port);
    char *dir = itest_fmt("%s/other-data", s->tmp_dir);
    char *keyfile = itest_fmt("%s/admin.key", dir);
    REQUIRE(mkdir(dir, 0700) == 0);
    FILE *f = fopen(keyfile, "w");
    REQUIRE(f);
    fputs("ipd_not_a_key_of_this_server\n", f);
    fclose(f);
    char *out = NULL;
    int code = itest_cli(s, &out, "status", "--data-dir", dir, "--listen",
                         listen, NULL);
    CHECK_INT(code, 1);
    CHECK(itest_cli_said(s, "refused the admin key from"));
    CHECK(itest_cli_said(s, keyfile));
    free(out);
    out = NULL;
    /* A tenant's key in the file: refused as not an admin key. */
    char *key = NULL;
    REQUIRE(itest_create_key(s, "acme", false, &key, NULL));
    f = fopen(keyfile, "w");
    REQUIRE(f);
    fprintf(f, "%s\n", key);
    fclose(f);
    code = itest_cli(s, &out, "status", "--data-dir", dir, "--listen", listen,
                     NULL);
    CHECK_INT(code, 1);
    CHECK(itest_cli_said(s, "(403: not an admin key)"));
    free(out);
    free(key);
    free(keyfile);
    free(dir);
    free(listen);
    itest_stop(s);
}

TEST_MAIN(T(status_fields_and_counts), T(metrics_exposition), T(status_command),
          T(scheduled_sweep), T(status_refused_key))
