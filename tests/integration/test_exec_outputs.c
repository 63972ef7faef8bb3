/*
 * test_exec_outputs.c - what becomes of the files an execution writes
 * (issue 12, "generated files never vanish"): every generated_files entry
 * says whether it was stored; a file the user's quota cannot take, or
 * that the request asked not to store ("store_outputs": false), comes
 * back without a file_id, with the reason, and with its bytes inline when
 * they fit the inline limit; nothing of it is left in the stores.
 *
 * One server for the whole program (--quota-files 3, --quota-bytes
 * 200000, --inline-image-max 65536), started by the first case and
 * stopped by the last; each case has its own user id.
 */
#include <unistd.h>

#include "harness.h"

#define QUOTA_FILES 3
#define QUOTA_BYTES 200000
#define INLINE_MAX 65536

static struct itest_server *srv;

/* A small matplotlib chart (a few KiB of PNG) and a CSV. */
static const char chart_and_csv[] =
    "import matplotlib.pyplot as plt\n"
    "fig, ax = plt.subplots(figsize=(2, 1.5), dpi=40)\n"
    "ax.plot([1, 2, 3], [4, 1, 9])\n"
    "fig.savefig('chart.png')\n"
    "plt.close(fig)\n"
    "open('table.csv', 'w').write('city,pop\\nOslo,700\\n')\n"
    "print('done')\n";
static const char csv_bytes[] = "city,pop\nOslo,700\n";

static void start_server(void)
{
    const char *args[] = {
        "--quota-files", "3", "--quota-bytes", "200000", "--inline-image-max",
        "65536",         NULL};
    struct itest_opts o = {.args = args};
    srv = itest_start(&o);
    REQUIRE(srv);
}

static long run_body(const char *user, json_t *body, struct itest_resp *out)
{
    return itest_exec(srv, srv->admin_key, user, body, 90000, out);
}

/* The entry of generated_files named name, or NULL. */
static json_t *entry(const json_t *result, const char *name)
{
    json_t *gen = itest_json_get(result, "generated_files");
    json_t *f;
    size_t i;
    json_array_foreach(gen, i, f)
    {
        const char *n = itest_json_str(f, "filename");
        if (n && !strcmp(n, name))
            return f;
    }
    return NULL;
}

/* f is a generated file that was not stored for reason: no file_id,
 * stored false, the reason and a message containing msg_part; its
 * data_base64 (when want_inline) decodes to bytes of the size and sha256
 * it reports, starting with head (or want_bytes exactly, when given). */
static void check_unstored(const json_t *f, const char *reason,
                           const char *msg_part, bool want_inline,
                           const char *head, const char *want_bytes)
{
    REQUIRE(f);
    const char *msg = itest_json_str(f, "message");
    char *dump = json_dumps(f, JSON_COMPACT);
    CHECKF(json_is_false(itest_json_get(f, "stored")), "%s", dump);
    CHECKF(itest_json_get(f, "file_id") == NULL, "%s", dump);
    CHECKF(itest_json_get(f, "expires_at") == NULL, "%s", dump);
    free(dump);
    CHECK_STR(itest_json_str(f, "not_stored_reason"), reason);
    CHECKF(msg && strstr(msg, msg_part), "message %s, want \"%s\" in it",
           msg ? msg : "(none)", msg_part);
    CHECK_STR(itest_json_str(f, "source"), "generated");
    const char *b64 = itest_json_str(f, "data_base64");
    if (!want_inline) {
        CHECK(b64 == NULL);
        CHECK_STR(itest_json_str(f, "not_inline_reason"), "over_inline_limit");
        return;
    }
    CHECK(itest_json_get(f, "not_inline_reason") == NULL);
    REQUIRE(b64);
    size_t len = 0;
    unsigned char *bytes = itest_b64_decode(b64, &len);
    REQUIRE(bytes);
    CHECK_INT(json_integer_value(itest_json_get(f, "size")), len);
    char sha[65];
    itest_sha256_hex(bytes, len, sha);
    CHECK_STR(itest_json_str(f, "sha256"), sha);
    if (head)
        CHECK(len > strlen(head) && !memcmp(bytes, head, strlen(head)));
    if (want_bytes)
        CHECK(len == strlen(want_bytes) && !memcmp(bytes, want_bytes, len));
    free(bytes);
}

/* How many files GET /v1/files lists for user. */
static size_t files_of(const char *user)
{
    struct itest_resp r;
    itest_request(srv, "GET", "/v1/files?limit=100", srv->admin_key, user, NULL,
                  NULL, 0, NULL, &r);
    CHECK_STATUS(&r, 200);
    size_t n = json_array_size(itest_json_get(r.json, "files"));
    itest_resp_release(&r);
    return n;
}

static long long total_user_files(void)
{
    struct itest_resp r;
    itest_request(srv, "GET", "/v1/admin/status", srv->admin_key, NULL, NULL,
                  NULL, 0, NULL, &r);
    CHECK_STATUS(&r, 200);
    long long n =
        json_integer_value(itest_json_get(r.json, "total_user_files"));
    itest_resp_release(&r);
    return n;
}

/* Upload n small files as user. */
static void fill(const char *user, int n)
{
    for (int i = 0; i < n; i++) {
        struct itest_resp r;
        char name[32];
        snprintf(name, sizeof(name), "own%d.txt", i);
        itest_upload_raw(srv, srv->admin_key, user, name, "text/plain", "x", 1,
                         NULL, &r);
        CHECK_STATUS(&r, 201);
        itest_resp_release(&r);
    }
}

/* Every blob has its record and nothing is half-written. */
static void check_stores(void)
{
    CHECKF(itest_store_consistent(srv, NULL), "stores inconsistent");
}

/* (1) At the file quota: the chart comes back inline, not stored; the
 * CSV too; nothing new among the user's files. */
static void at_quota_returned_inline(void)
{
    struct itest_resp r;
    REQUIRE(srv);
    fill("q_full", QUOTA_FILES);
    CHECK_INT(files_of("q_full"), QUOTA_FILES);
    run_body("q_full", json_pack("{s:s}", "code", chart_and_csv), &r);
    CHECK_STATUS(&r, 200);
    CHECKF(json_is_true(itest_json_get(r.json, "success")), "%s", r.body);
    CHECKF(json_array_size(itest_json_get(r.json, "generated_files")) == 2,
           "%s", r.body);
    check_unstored(entry(r.json, "chart.png"), "quota_exceeded", "quota", true,
                   "\x89PNG\r\n\x1a\n", NULL);
    CHECK_STR(itest_json_str(entry(r.json, "chart.png"), "file_type"), "image");
    check_unstored(entry(r.json, "table.csv"), "quota_exceeded", "quota", true,
                   NULL, csv_bytes);
    CHECK_INT(
        json_array_size(itest_json_get(r.json, "generated_files_skipped")), 0);
    itest_resp_release(&r);
    CHECK_INT(files_of("q_full"), QUOTA_FILES);
    check_stores();
}

/* (2) "store_outputs": false under the quota: the same shape, nothing
 * stored, the quota usage unchanged. */
static void store_outputs_false(void)
{
    struct itest_resp r;
    REQUIRE(srv);
    long long before = total_user_files();
    run_body("q_inline",
             json_pack("{s:s, s:b}", "code", chart_and_csv, "store_outputs", 0),
             &r);
    CHECK_STATUS(&r, 200);
    CHECKF(json_is_true(itest_json_get(r.json, "success")), "%s", r.body);
    CHECKF(json_array_size(itest_json_get(r.json, "generated_files")) == 2,
           "%s", r.body);
    check_unstored(entry(r.json, "chart.png"), "store_outputs_false",
                   "store_outputs", true, "\x89PNG\r\n\x1a\n", NULL);
    check_unstored(entry(r.json, "table.csv"), "store_outputs_false",
                   "store_outputs", true, NULL, csv_bytes);
    itest_resp_release(&r);
    CHECK_INT(files_of("q_inline"), 0);
    CHECK_INT(total_user_files(), before);
    check_stores();
}

/* (3) The normal case: stored, "stored": true, the chart inline as
 * before, the CSV by id only. */
static void stored_as_before(void)
{
    struct itest_resp r, dl;
    REQUIRE(srv);
    run_body("q_normal",
             json_pack("{s:s, s:b}", "code", chart_and_csv, "store_outputs", 1),
             &r);
    CHECK_STATUS(&r, 200);
    json_t *png = entry(r.json, "chart.png");
    json_t *csv = entry(r.json, "table.csv");
    REQUIRE(png && csv);
    CHECK(json_is_true(itest_json_get(png, "stored")));
    CHECK(json_is_true(itest_json_get(csv, "stored")));
    CHECK(itest_json_get(png, "not_stored_reason") == NULL);
    CHECK(itest_json_get(csv, "not_stored_reason") == NULL);
    CHECK(itest_json_str(png, "data_base64") != NULL);
    CHECK(itest_json_get(csv, "data_base64") == NULL);
    CHECK(itest_json_str(csv, "expires_at") != NULL);
    char *path =
        itest_fmt("/v1/files/%s/content", itest_json_str(csv, "file_id"));
    itest_request(srv, "GET", path, srv->admin_key, "q_normal", NULL, NULL, 0,
                  NULL, &dl);
    free(path);
    CHECK_STATUS(&dl, 200);
    CHECK(dl.len == strlen(csv_bytes) && !memcmp(dl.body, csv_bytes, dl.len));
    itest_resp_release(&dl);
    itest_resp_release(&r);
    CHECK_INT(files_of("q_normal"), 2);

    /* null is the default too. */
    run_body("q_normal2",
             json_pack("{s:s, s:n}", "code", "open('a.txt', 'w').write('a')",
                       "store_outputs"),
             &r);
    CHECK_STATUS(&r, 200);
    CHECK(json_is_true(itest_json_get(entry(r.json, "a.txt"), "stored")));
    itest_resp_release(&r);
    check_stores();
}

/* (4) A store_outputs that is not a boolean: 400 naming the field, and
 * nothing ran. */
static void store_outputs_not_boolean(void)
{
    struct itest_resp r;
    REQUIRE(srv);
    json_t *bad[] = {json_string("yes"), json_integer(1), json_array()};
    for (size_t i = 0; i < sizeof(bad) / sizeof(*bad); i++) {
        run_body("q_bad",
                 json_pack("{s:s, s:o}", "code",
                           "open('ran.txt', 'w').write('1')", "store_outputs",
                           bad[i]),
                 &r);
        CHECK_ERROR(&r, 400, "invalid_request");
        const char *msg = itest_json_str(r.json, "error.message");
        CHECKF(msg && strstr(msg, "store_outputs"), "message %s",
               msg ? msg : "(none)");
        itest_resp_release(&r);
    }
    CHECK_INT(files_of("q_bad"), 0);
}

/* (5) A file over the inline limit that is not stored: listed, with its
 * size and sha256, no bytes, and why. */
static void over_inline_limit_not_stored(void)
{
    struct itest_resp r;
    REQUIRE(srv);
    run_body("q_big",
             json_pack("{s:s, s:b}", "code",
                       "open('big.bin', 'wb').write(bytes(range(256)) * 400)\n",
                       "store_outputs", 0),
             &r);
    CHECK_STATUS(&r, 200);
    json_t *f = entry(r.json, "big.bin");
    check_unstored(f, "store_outputs_false", "too large to return inline",
                   false, NULL, NULL);
    CHECK_INT(json_integer_value(itest_json_get(f, "size")), 102400);
    unsigned char *want = malloc(102400);
    for (size_t i = 0; i < 102400; i++)
        want[i] = (unsigned char)(i % 256);
    char sha[65];
    itest_sha256_hex(want, 102400, sha);
    free(want);
    CHECK_STR(itest_json_str(f, "sha256"), sha);
    itest_resp_release(&r);
    CHECK_INT(files_of("q_big"), 0);
    check_stores();
}

/* Quota reached in the middle of several files: each is reported as what
 * became of it, and only the stored ones are left in the stores.  Sorted:
 * big.bin (over --quota-bytes alone: refused), x and y (stored: 3 files
 * with the upload), z (over --quota-files: refused). */
static void partially_stored(void)
{
    struct itest_resp r;
    REQUIRE(srv);
    fill("q_part", 1);
    run_body("q_part",
             json_pack("{s:s}", "code",
                       "open('big.bin', 'wb').write(b'b' * 250000)\n"
                       "for n in 'xyz':\n"
                       "    open(n + '.txt', 'w').write(n * 3)\n"),
             &r);
    CHECK_STATUS(&r, 200);
    CHECKF(json_array_size(itest_json_get(r.json, "generated_files")) == 4,
           "%s", r.body);
    check_unstored(entry(r.json, "big.bin"), "quota_exceeded", "200000 bytes",
                   false, NULL, NULL);
    const char *stored[] = {"x.txt", "y.txt"};
    for (size_t i = 0; i < 2; i++) {
        json_t *f = entry(r.json, stored[i]);
        CHECKF(f && json_is_true(itest_json_get(f, "stored")) &&
                   itest_json_str(f, "file_id") != NULL,
               "%s in %s", stored[i], r.body);
    }
    check_unstored(entry(r.json, "z.txt"), "quota_exceeded", "3 files", true,
                   NULL, "zzz");
    itest_resp_release(&r);
    CHECK_INT(files_of("q_part"), QUOTA_FILES);
    check_stores();
}

/* (6) Asynchronous: the same result object, read back by id. */
static void async_same_result(void)
{
    struct itest_resp r;
    REQUIRE(srv);
    run_body("q_async",
             json_pack("{s:s, s:b, s:b}", "code", chart_and_csv,
                       "store_outputs", 0, "async", 1),
             &r);
    CHECK_STATUS(&r, 202);
    char *path =
        itest_fmt("/v1/executions/%s", itest_json_str(r.json, "execution_id"));
    itest_resp_release(&r);
    json_t *result = NULL;
    /* Bounded poll: the API offers no other way to wait. */
    for (int i = 0; i < 1200 && !result; i++) {
        itest_request(srv, "GET", path, srv->admin_key, "q_async", NULL, NULL,
                      0, NULL, &r);
        if (r.status != 200) {
            CHECK_STATUS(&r, 200);
            itest_resp_release(&r);
            break;
        }
        const char *st = itest_json_str(r.json, "status");
        if (st && !strcmp(st, "done"))
            result = json_incref(itest_json_get(r.json, "result"));
        itest_resp_release(&r);
        if (!result)
            usleep(50 * 1000);
    }
    free(path);
    REQUIRE(result);
    CHECK(json_is_true(json_object_get(result, "success")));
    check_unstored(entry(result, "chart.png"), "store_outputs_false",
                   "store_outputs", true, "\x89PNG\r\n\x1a\n", NULL);
    check_unstored(entry(result, "table.csv"), "store_outputs_false",
                   "store_outputs", true, NULL, csv_bytes);
    json_decref(result);
    CHECK_INT(files_of("q_async"), 0);
}

static void stop_server(void)
{
    REQUIRE(srv);
    itest_stop(srv);
    srv = NULL;
}

/* Hardening item 13: outputs were sized by st_size per name, so hard
 * links (one file, many names) and sparse files (holes stored as bytes)
 * let a run store many times its output limit.  Each inode counts once and
 * at its full size against the output limit (here 8 MiB of tmpfs); the
 * rest is skipped with the reason. */
static void links_and_holes_within_output_limit(void)
{
    const char *args[] = {"--policy.standard.output-dir-size", "8M", NULL};
    struct itest_opts o = {.args = args};
    struct itest_server *s = itest_start(&o);
    REQUIRE(s);
    json_t *body = json_pack("{s:s}", "code",
                             "import os\n"
                             "with open('a.bin', 'wb') as f:\n"
                             "    f.write(os.urandom(1 << 20))\n"
                             "for i in range(5):\n"
                             "    os.link('a.bin', 'link%d.bin' % i)\n"
                             "for i in range(6):\n"
                             "    with open('sparse%d.bin' % i, 'wb') as f:\n"
                             "        f.truncate(3 << 20)\n"
                             "print('made')\n");
    struct itest_resp r;
    itest_exec(s, s->admin_key, "u1", body, 120000, &r);
    CHECK_STATUS(&r, 200);
    CHECK_STR(itest_exec_stdout(&r), "made\n");
    json_t *gen = itest_json_get(r.json, "generated_files");
    int64_t stored_bytes = 0;
    size_t stored = 0;
    for (size_t i = 0; i < json_array_size(gen); i++) {
        json_t *f = json_array_get(gen, i);
        if (json_is_true(json_object_get(f, "stored"))) {
            stored++;
            stored_bytes += json_integer_value(json_object_get(f, "size"));
        }
    }
    CHECKF(stored_bytes <= 8 << 20, "stored %lld bytes from 8 MiB of tmpfs",
           (long long)stored_bytes);
    CHECK_INT(stored, 3); /* a.bin, sparse0.bin, sparse1.bin */
    json_t *skipped = itest_json_get(r.json, "generated_files_skipped");
    size_t links = 0, holes = 0;
    for (size_t i = 0; i < json_array_size(skipped); i++) {
        const char *why = itest_json_str(json_array_get(skipped, i), "reason");
        links += why && !strcmp(why, "hard_link");
        holes += why && !strcmp(why, "sparse_over_output_limit");
    }
    CHECK_INT(links, 5);
    CHECK_INT(holes, 4);
    itest_resp_release(&r);
    size_t nrec = 0;
    CHECK(itest_store_consistent(s, &nrec));
    CHECK_INT(nrec, 3);
    itest_stop(s);
}

TEST_MAIN(T(start_server), T(at_quota_returned_inline), T(store_outputs_false),
          T(stored_as_before), T(store_outputs_not_boolean),
          T(over_inline_limit_not_stored), T(partially_stored),
          T(async_same_result), T(stop_server),
          T(links_and_holes_within_output_limit))
