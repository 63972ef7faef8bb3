/*
 * test_cleanup.c - POST /v1/admin/cleanup and `interpd cleanup`: expired
 * files are deleted from the store and the disk (or GridFS); admin keys
 * only; the CLI prints the same JSON for cron.
 */
#include <errno.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness.h"

static void expired_files_are_swept(void)
{
    const char *args[] = {"--file-ttl", "1s", NULL};
    struct itest_opts o = {.args = args};
    struct itest_server *s = itest_start(&o);
    struct itest_resp r;
    char *bot = NULL, *bot_id = NULL;
    REQUIRE(s);
    int64_t last_expiry = 0;
    for (int i = 0; i < 3; i++) {
        char name[16];
        snprintf(name, sizeof(name), "f%d.txt", i);
        itest_upload_raw(s, s->admin_key, "u1", name, "text/plain", "hello", 5,
                         NULL, &r);
        CHECK_STATUS(&r, 201);
        int64_t e = itest_parse_time(itest_json_str(r.json, "expires_at"));
        if (e > last_expiry)
            last_expiry = e;
        itest_resp_release(&r);
    }
    /* The wait is the thing under test: past the files' expiry. */
    itest_sleep_until((double)last_expiry + 1.1);

    REQUIRE(itest_create_key(s, "bot", false, &bot, &bot_id));
    itest_request(s, "POST", "/v1/admin/cleanup", bot, NULL, NULL, NULL, 0,
                  NULL, &r);
    CHECK_ERROR(&r, 403, "forbidden");
    itest_resp_release(&r);

    itest_request(s, "POST", "/v1/admin/cleanup", s->admin_key, NULL, NULL,
                  NULL, 0, NULL, &r);
    CHECK_STATUS(&r, 200);
    CHECK_INT(json_integer_value(itest_json_get(r.json, "deleted_files")), 3);
    CHECK_INT(json_integer_value(itest_json_get(r.json, "freed_bytes")), 15);
    CHECK(json_is_integer(itest_json_get(r.json, "orphans_removed")));
    CHECK(json_is_integer(itest_json_get(r.json, "duration_ms")));
    itest_resp_release(&r);

    char **strays = NULL;
    size_t n = itest_stray_files(s, &strays);
    CHECKF(n == 0, "%zu stored entries left after the sweep", n);
    if (n)
        itest_print_strays(s);
    itest_strv_free(strays);

    /* The CLI, as cron runs it: nothing left, exit 0, the same JSON. */
    char *out = NULL;
    int code = itest_cli(s, &out, "cleanup", "--data-dir", s->data_dir, NULL);
    CHECK_INT(code, 0);
    json_error_t jerr;
    json_t *j = out ? json_loads(out, 0, &jerr) : NULL;
    CHECKF(j != NULL, "cleanup printed: %s", out ? out : "(nothing)");
    CHECK_INT(json_integer_value(json_object_get(j, "deleted_files")), 0);
    json_decref(j);
    free(out);
    free(bot);
    free(bot_id);
    itest_stop(s);
}

/* `interpd cleanup` on a data dir (or MongoDB database) without a store
 * exits 2 naming it and creates nothing; run from another directory it
 * used to make a fresh empty store there and print zeros. */
static void cleanup_refuses_no_store(void)
{
    struct itest_server *s = itest_start(NULL);
    REQUIRE(s);
    char *absent = itest_fmt("%s/nostore", s->tmp_dir);
    char *empty = itest_fmt("%s/empty", s->tmp_dir);
    REQUIRE(mkdir(empty, 0700) == 0);
    char *out = NULL;
    struct stat st;
    CHECK_INT(itest_cli(s, &out, "cleanup", "--data-dir", absent, NULL), 2);
    CHECK(itest_cli_said(s, absent));
    CHECK(stat(absent, &st) != 0);
    CHECKF(!out || !out[0], "cleanup printed: %s", out);
    free(out);
    char *fresh =
        itest_backend_mongo() ? itest_mongo_fixture_uri(NULL, NULL) : NULL;
    if (fresh) {
        CHECK_INT(itest_cli(s, NULL, "cleanup", "--data-dir", empty,
                            "--mongo-uri", fresh, NULL),
                  2);
        char *db = strrchr(fresh, '/');
        CHECK(db && itest_cli_said(s, db + 1));
        CHECK_INT(itest_mongo_collection_count(fresh), 0);
    } else {
        CHECK_INT(itest_cli(s, NULL, "cleanup", "--data-dir", empty, NULL), 2);
        CHECK(itest_cli_said(s, empty));
    }
    char **left = NULL;
    CHECKF(itest_list_files(empty, &left) == 0, "%s is no longer empty", empty);
    itest_strv_free(left);
    CHECK(rmdir(empty) == 0);
    /* The real store still works. */
    CHECK_INT(itest_cli(s, NULL, "cleanup", "--data-dir", s->data_dir, NULL),
              0);
    free(fresh);
    free(absent);
    free(empty);
    itest_stop(s);
}

/* `interpd cleanup` with no --data-dir, as cron might run it from an
 * empty directory: the default ./interpd-data is not there, so exit 2
 * naming it and nothing is created (on MongoDB too: the environment
 * names the server's database, but the local blob store needs the data
 * dir).  `interpd status` from there reads no admin key: exit 1 naming
 * the path (docs/DEPLOYMENT.md), nothing created either. */
static void cleanup_default_data_dir_absent(void)
{
    struct itest_server *s = itest_start(NULL);
    REQUIRE(s);
    char *cwd = itest_fmt("%s/cron", s->tmp_dir);
    char *dflt = itest_fmt("%s/interpd-data", cwd);
    REQUIRE(mkdir(cwd, 0700) == 0);
    char *out = NULL;
    CHECK_INT(itest_cli_in(s, cwd, &out, "cleanup", NULL), 2);
    CHECKF(!out || !out[0], "cleanup printed: %s", out);
    free(out);
    CHECK(itest_cli_said(s, dflt));
    out = NULL;
    CHECK_INT(itest_cli_in(s, cwd, &out, "status", NULL), 1);
    CHECKF(!out || !out[0], "status printed: %s", out);
    free(out);
    char *key = itest_fmt("%s/admin.key", dflt);
    CHECK(itest_cli_said(s, key));
    struct stat st;
    CHECKF(lstat(dflt, &st) != 0, "%s was created", dflt);
    char **left = NULL;
    CHECKF(itest_list_files(cwd, &left) == 0, "%s is no longer empty", cwd);
    itest_strv_free(left);
    CHECKF(rmdir(cwd) == 0, "rmdir %s: %s", cwd, strerror(errno));
    free(key);
    free(dflt);
    free(cwd);
    itest_stop(s);
}

TEST_MAIN(T(expired_files_are_swept), T(cleanup_refuses_no_store),
          T(cleanup_default_data_dir_absent))
