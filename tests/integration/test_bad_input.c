/*
 * test_bad_input.c - what clients get wrong, on purpose or not: broken
 * multipart bodies, JSON bodies, hostile file names, bad user ids and
 * oversized uploads.  Every rejection is a 4xx of CONTRACT.md and leaves
 * nothing on disk.
 *
 * Elsewhere: bad keys in test_auth.c, unknown routes and wrong methods in
 * test_basics.c, foreign ids in test_auth.c (isolation), client disconnects
 * in test_concurrency.c.
 */
#include <sys/socket.h>
#include <unistd.h>
#include <sys/time.h>
#include "harness.h"

#define N_OF(a) (sizeof(a) / sizeof((a)[0]))

static struct itest_server *start_keyed(const char *const *args, char **key)
{
    struct itest_opts o = {.args = args};
    struct itest_server *s = itest_start(&o);
    *key = NULL;
    if (s && !itest_create_key(s, "acme", false, key, NULL))
        test__failed_checks++;
    return s;
}

/* Nothing of a rejected upload stays on disk, and nothing is listed. */
static void check_nothing_stored(struct itest_server *s, const char *key,
                                 const char *what)
{
    /* Cleanup may run as the request completes, after the answer: poll. */
    bool clean = itest_wait_strays_at_most(s, 0, ITEST_CLEANUP_WAIT_MS);
    if (!clean) {
        fprintf(stderr, "after %s:\n", what);
        itest_print_strays(s);
    }
    CHECKF(clean, "%s left files on disk", what);
    struct itest_resp r;
    itest_request(s, "GET", "/v1/files", key, "u1", NULL, NULL, 0, NULL, &r);
    CHECK_STATUS(&r, 200);
    CHECKF(json_array_size(itest_json_get(r.json, "files")) == 0,
           "after %s, files are listed: %s", what, r.body);
    itest_resp_release(&r);
}

static long post_files(struct itest_server *s, const char *key,
                       const char *path, const char *ct, const char *body,
                       size_t len, struct itest_resp *r)
{
    return itest_request(s, "POST", path, key, "u1", ct, body, len, NULL, r);
}

static void multipart_without_boundary(void)
{
    char *key;
    struct itest_server *s = start_keyed(NULL, &key);
    REQUIRE(s && key);
    static const char body[] =
        "--XYZ\r\n"
        "Content-Disposition: form-data; name=\"file\"; filename=\"a.txt\"\r\n"
        "Content-Type: text/plain\r\n\r\n"
        "hello\r\n"
        "--XYZ--\r\n";
    const char *types[] = {
        "multipart/form-data", "multipart/form-data; ",
        "multipart/form-data; boundary=", "multipart/form-data; charset=utf-8"};
    for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++) {
        struct itest_resp r;
        post_files(s, key, "/v1/files", types[i], body, strlen(body), &r);
        CHECK_ERROR(&r, 400, "invalid_request");
        itest_resp_release(&r);
    }
    check_nothing_stored(s, key, "multipart without a boundary");
    free(key);
    itest_stop(s);
}

static void multipart_truncated(void)
{
    char *key;
    struct itest_server *s = start_keyed(NULL, &key);
    REQUIRE(s && key);
    const char *bodies[] = {
        /* cut in the middle of the file's bytes */
        "--XYZ\r\n"
        "Content-Disposition: form-data; name=\"file\"; filename=\"a.txt\"\r\n"
        "Content-Type: text/plain\r\n\r\n"
        "hello wor",
        /* the file complete, the closing delimiter missing */
        "--XYZ\r\n"
        "Content-Disposition: form-data; name=\"file\"; filename=\"a.txt\"\r\n"
        "Content-Type: text/plain\r\n\r\n"
        "hello world\r\n",
        /* a second part begun and cut in its headers */
        "--XYZ\r\n"
        "Content-Disposition: form-data; name=\"file\"; filename=\"a.txt\"\r\n"
        "\r\n"
        "hello world\r\n"
        "--XYZ\r\n"
        "Content-Disposition: form-da",
        /* cut in the first part's headers */
        ("--XYZ\r\n"
         "Content-Disposition: form-data; name=\"fi"),
        /* only the opening delimiter */
        "--XYZ\r\n",
        /* no delimiter at all */
        "hello world",
    };
    for (size_t i = 0; i < sizeof(bodies) / sizeof(bodies[0]); i++) {
        struct itest_resp r;
        post_files(s, key, "/v1/files", "multipart/form-data; boundary=XYZ",
                   bodies[i], strlen(bodies[i]), &r);
        CHECK_ERROR(&r, 400, "invalid_request");
        if (r.status != 400)
            fprintf(stderr, "  (truncated body #%zu)\n", i);
        itest_resp_release(&r);
    }
    check_nothing_stored(s, key, "truncated multipart bodies");

    /* The same body, completed, is accepted: the 400s were for the cut. */
    static const char whole[] =
        "--XYZ\r\n"
        "Content-Disposition: form-data; name=\"file\"; filename=\"a.txt\"\r\n"
        "Content-Type: text/plain\r\n\r\n"
        "hello world\r\n"
        "--XYZ--\r\n";
    struct itest_resp r;
    post_files(s, key, "/v1/files", "multipart/form-data; boundary=XYZ", whole,
               strlen(whole), &r);
    CHECK_STATUS(&r, 201);
    CHECK_FILE(r.json, "a.txt", "hello world", 11);
    itest_resp_release(&r);
    free(key);
    itest_stop(s);
}

static void multipart_without_file_part(void)
{
    char *key;
    struct itest_server *s = start_keyed(NULL, &key);
    REQUIRE(s && key);
    struct itest_part fields[] = {
        {"ttl_hours", NULL, NULL, "1", 1, NULL},
        {"filename", NULL, NULL, "x.txt", 5, NULL},
    };
    struct itest_part wrong_name[] = {
        {"upload", "x.txt", "text/plain", "data", 4, NULL},
    };
    struct {
        const struct itest_part *parts;
        size_t n;
    } cases[] = {{fields, 2}, {wrong_name, 1}};
    for (size_t i = 0; i < 2; i++) {
        struct itest_req rq = {0};
        rq.path = "/v1/files";
        rq.key = key;
        rq.user_id = "u1";
        rq.parts = cases[i].parts;
        rq.nparts = cases[i].n;
        struct itest_resp r;
        itest_do(s, &rq, &r);
        CHECK_ERROR(&r, 400, "invalid_request");
        itest_resp_release(&r);
    }
    /* A `file` part without any filename, and no `filename` field. */
    static const char nameless[] =
        "--XYZ\r\n"
        "Content-Disposition: form-data; name=\"file\"\r\n"
        "Content-Type: text/plain\r\n\r\n"
        "hello\r\n"
        "--XYZ--\r\n";
    static const char empty_name[] =
        "--XYZ\r\n"
        "Content-Disposition: form-data; name=\"file\"; filename=\"\"\r\n"
        "Content-Type: text/plain\r\n\r\n"
        "hello\r\n"
        "--XYZ--\r\n";
    const char *nameless_bodies[] = {nameless, empty_name};
    for (size_t i = 0; i < 2; i++) {
        struct itest_resp r;
        post_files(s, key, "/v1/files", "multipart/form-data; boundary=XYZ",
                   nameless_bodies[i], strlen(nameless_bodies[i]), &r);
        CHECK_ERROR(&r, 400, "invalid_request");
        itest_resp_release(&r);
    }
    /* An empty multipart body (just the closing delimiter). */
    static const char empty[] = "--XYZ--\r\n";
    struct itest_resp r;
    post_files(s, key, "/v1/files", "multipart/form-data; boundary=XYZ", empty,
               strlen(empty), &r);
    CHECK_ERROR(&r, 400, "invalid_request");
    itest_resp_release(&r);
    check_nothing_stored(s, key, "multipart without a file part");
    free(key);
    itest_stop(s);
}

static void json_body(void)
{
    char *key;
    struct itest_server *s = start_keyed(NULL, &key);
    REQUIRE(s && key);
    const char *invalid[] = {"{not json", "", "{\"url\": ", "\xff\xfe"};
    for (size_t i = 0; i < sizeof(invalid) / sizeof(invalid[0]); i++) {
        struct itest_resp r;
        post_files(s, key, "/v1/files", "application/json", invalid[i],
                   strlen(invalid[i]), &r);
        CHECK_ERROR(&r, 400, "invalid_json");
        itest_resp_release(&r);
    }
    const char *no_url[] = {"{}",
                            "{\"url\": 5}",
                            "[1, 2]",
                            "\"url\"",
                            "{\"filename\": \"a.txt\"}",
                            "{\"url\": null}"};
    for (size_t i = 0; i < sizeof(no_url) / sizeof(no_url[0]); i++) {
        struct itest_resp r;
        post_files(s, key, "/v1/files", "application/json; charset=utf-8",
                   no_url[i], strlen(no_url[i]), &r);
        CHECK_ERROR(&r, 400, "invalid_request");
        itest_resp_release(&r);
    }
    check_nothing_stored(s, key, "JSON bodies");
    free(key);
    itest_stop(s);
}

static void raw_without_filename(void)
{
    char *key;
    struct itest_server *s = start_keyed(NULL, &key);
    REQUIRE(s && key);
    const char *paths[] = {"/v1/files", "/v1/files?ttl_hours=1",
                           "/v1/files?filename=", "/v1/files?name=a.txt"};
    const char *types[] = {"text/plain", NULL, "application/octet-stream"};
    for (size_t i = 0; i < sizeof(paths) / sizeof(paths[0]); i++) {
        for (size_t t = 0; t < sizeof(types) / sizeof(types[0]); t++) {
            struct itest_resp r;
            post_files(s, key, paths[i], types[t], "abc", 3, &r);
            CHECK_ERROR(&r, 400, "invalid_request");
            itest_resp_release(&r);
        }
    }
    check_nothing_stored(s, key, "raw uploads without a filename");
    free(key);
    itest_stop(s);
}

/* Upload under `sent` (raw query, percent-encoded; or multipart file part
 * name; or multipart `filename` field) and expect `stored`. */
enum name_form { BY_QUERY, BY_PART, BY_FIELD };

/* A string literal and its length, NUL bytes inside included. */
#define LIT(s) (s), (sizeof(s) - 1)

static void check_name(struct itest_server *s, const char *key,
                       const char *sent, size_t sent_len, enum name_form form,
                       const char *stored)
{
    struct itest_resp r;
    if (form == BY_QUERY) {
        char *enc = itest_urlencode(sent, sent_len);
        char *path = itest_fmt("/v1/files?filename=%s", enc);
        post_files(s, key, path, "text/plain", "n\n", 2, &r);
        free(path);
        free(enc);
    } else {
        struct itest_part parts[2] = {
            {"file", form == BY_PART ? sent : "placeholder.bin", NULL, "n\n", 2,
             NULL},
            {"filename", NULL, NULL, sent, sent_len, NULL},
        };
        struct itest_req rq = {0};
        rq.path = "/v1/files";
        rq.key = key;
        rq.user_id = "u1";
        rq.parts = parts;
        rq.nparts = form == BY_FIELD ? 2 : 1;
        itest_do(s, &rq, &r);
    }
    static const char *const forms[] = {"query", "file part", "filename field"};
    if (stored) {
        CHECK_STATUS(&r, 201);
        const char *got = itest_json_str(r.json, "filename");
        CHECKF(got && !strcmp(got, stored),
               "name sent by %s: want it stored as \"%s\", got \"%s\"",
               forms[form], stored, got ? got : "(none)");
    } else {
        CHECK_ERROR(&r, 400, "invalid_request");
        if (r.status != 400)
            fprintf(stderr, "  (name of %zu bytes sent by %s)\n", sent_len,
                    forms[form]);
    }
    itest_resp_release(&r);
}

static void filename_paths(void)
{
    char *key;
    struct itest_server *s = start_keyed(NULL, &key);
    REQUIRE(s && key);
    for (int f = BY_QUERY; f <= BY_FIELD; f++) {
        check_name(s, key, LIT("../../etc/passwd"), (enum name_form)f,
                   "passwd");
        check_name(s, key, LIT("a/b.txt"), (enum name_form)f, "b.txt");
        check_name(s, key, LIT("/abs/path/c.csv"), (enum name_form)f, "c.csv");
    }
    /* Windows paths (old browsers send them); not through the part header,
     * where a backslash may be an escape. */
    check_name(s, key, LIT("C:\\Users\\x\\report.csv"), BY_QUERY, "report.csv");
    check_name(s, key, LIT("C:\\Users\\x\\report.csv"), BY_FIELD, "report.csv");
    /* Nothing left after the last separator. */
    check_name(s, key, LIT("dir/"), BY_QUERY, NULL);
    check_name(s, key, LIT("a/.."), BY_QUERY, NULL);
    free(key);
    itest_stop(s);
}

static void filename_controls(void)
{
    char *key;
    struct itest_server *s = start_keyed(NULL, &key);
    REQUIRE(s && key);
    check_name(s, key, LIT("a\nb.txt"), BY_QUERY, "a_b.txt");
    check_name(s, key, LIT("a\nb.txt"), BY_FIELD, "a_b.txt");
    check_name(s, key, LIT("a\rb.txt"), BY_QUERY, "a_b.txt");
    check_name(s, key, LIT("a\0b.txt"), BY_QUERY, "a_b.txt");
    check_name(s, key, LIT("a\0b.txt"), BY_FIELD, "a_b.txt");
    check_name(s, key, LIT("a\tb.txt"), BY_QUERY, "a_b.txt");
    check_name(s, key,
               LIT("a\x7f"
                   "b.txt"),
               BY_QUERY, "a_b.txt");
    check_name(s, key,
               LIT("a\x01"
                   "b.txt"),
               BY_FIELD, "a_b.txt");
    check_name(s, key,
               LIT("a\xc2\x85"
                   "b.txt"),
               BY_QUERY, "a_b.txt"); /* C1 */
    check_name(s, key, LIT("a\x1b[31mred.txt"), BY_QUERY, "a_[31mred.txt");
    free(key);
    itest_stop(s);
}

static void filename_lengths(void)
{
    char *key;
    struct itest_server *s = start_keyed(NULL, &key);
    REQUIRE(s && key);
    char *huge = malloc(10001);
    REQUIRE(huge);
    memset(huge, 'a', 10000);
    huge[10000] = 0;
    check_name(s, key, huge, 10000, BY_QUERY, NULL);
    check_name(s, key, huge, 10000, BY_FIELD, NULL);
    /* 256 bytes: one over. */
    check_name(s, key, huge, 256, BY_QUERY, NULL);
    /* 254 a's and a two-byte character: 256 bytes. */
    memcpy(huge + 254, "\xc3\xa9", 2);
    check_name(s, key, huge, 256, BY_QUERY, NULL);
    check_nothing_stored(s, key, "over-long names");

    /* 255 bytes is the longest name. */
    memset(huge, 'a', 255);
    huge[255] = 0;
    check_name(s, key, huge, 255, BY_QUERY, huge);
    check_name(s, key, huge, 255, BY_FIELD, huge);
    free(huge);
    free(key);
    itest_stop(s);
}

static void filename_dots_empty_utf8(void)
{
    char *key;
    struct itest_server *s = start_keyed(NULL, &key);
    REQUIRE(s && key);
    check_name(s, key, LIT("."), BY_QUERY, NULL);
    check_name(s, key, LIT(".."), BY_QUERY, NULL);
    check_name(s, key, LIT("."), BY_FIELD, NULL);
    check_name(s, key, LIT(".."), BY_FIELD, NULL);
    check_name(s, key, LIT(".."), BY_PART, NULL);
    check_name(s, key, LIT("   "), BY_QUERY, NULL);
    check_name(s, key, LIT("/"), BY_QUERY, NULL);
    /* Not UTF-8: cannot be a JSON string. */
    check_name(s, key,
               LIT("a\xff"
                   "b.txt"),
               BY_QUERY, NULL);
    check_name(s, key,
               LIT("a\xc0\xaf"
                   "b.txt"),
               BY_QUERY, NULL); /* overlong */
    check_nothing_stored(s, key, "invalid names");
    /* Names that only look odd are fine. */
    check_name(s, key, LIT(".hidden"), BY_QUERY, ".hidden");
    check_name(s, key, LIT("..."), BY_QUERY, "...");
    check_name(s, key, LIT("\xe6\x97\xa5\xe6\x9c\xac.txt"), BY_QUERY,
               "\xe6\x97\xa5\xe6\x9c\xac.txt");
    free(key);
    itest_stop(s);
}

/* U+202E RIGHT-TO-LEFT OVERRIDE: stored as given, defused on download. */
static void filename_bidi(void)
{
    char *key;
    struct itest_server *s = start_keyed(NULL, &key);
    REQUIRE(s && key);
    static const char name[] = "invoice\xE2\x80\xAE"
                               "fdp.exe";
    for (int f = BY_QUERY; f <= BY_FIELD; f++) {
        struct itest_resp r;
        check_name(s, key, name, strlen(name), (enum name_form)f, name);
        itest_request(s, "GET", "/v1/files?limit=1", key, "u1", NULL, NULL, 0,
                      NULL, &r);
        const char *id = itest_json_str(
            json_array_get(itest_json_get(r.json, "files"), 0), "file_id");
        char *path = itest_fmt("/v1/files/%s/content", id ? id : "none");
        itest_resp_release(&r);
        itest_request(s, "GET", path, key, "u1", NULL, NULL, 0, NULL, &r);
        free(path);
        CHECK_STATUS(&r, 200);
        const char *cd = itest_header(&r, "Content-Disposition");
        CHECKF(cd, "no Content-Disposition");
        for (const char *p = cd; p && *p; p++)
            CHECKF((unsigned char)*p >= 0x20 && (unsigned char)*p < 0x7f,
                   "Content-Disposition has raw byte 0x%02x: %s",
                   (unsigned)(unsigned char)*p, cd);
        CHECKF(cd && strcasestr(cd, "filename*=UTF-8''invoice%E2%80%AEfdp.exe"),
               "want filename*=UTF-8''invoice%%E2%%80%%AEfdp.exe in "
               "Content-Disposition: %s",
               cd ? cd : "(none)");
        CHECKF(cd && !strncasecmp(cd, "attachment;", 11),
               "Content-Disposition: %s", cd ? cd : "(none)");
        itest_resp_release(&r);
    }
    free(key);
    itest_stop(s);
}

static void check_bad_user(struct itest_server *s, const char *key,
                           const char *user, const char *const *headers)
{
    const char *paths[] = {"/v1/files", "/v1/files?limit=5",
                           "/v1/files/file_aaaaaaaaaaaaaaaaaaaaaaaaaa",
                           "/v1/files/file_aaaaaaaaaaaaaaaaaaaaaaaaaa/content"};
    for (size_t i = 0; i < sizeof(paths) / sizeof(paths[0]); i++) {
        struct itest_resp r;
        itest_request(s, "GET", paths[i], key, user, NULL, NULL, 0, headers,
                      &r);
        CHECK_ERROR(&r, 400, "invalid_user_id");
        itest_resp_release(&r);
    }
    struct itest_resp r;
    itest_request(s, "DELETE", paths[2], key, user, NULL, NULL, 0, headers, &r);
    CHECK_ERROR(&r, 400, "invalid_user_id");
    itest_resp_release(&r);
    itest_request(s, "POST", "/v1/files?filename=a.txt", key, user,
                  "text/plain", "abc", 3, headers, &r);
    CHECK_ERROR(&r, 400, "invalid_user_id");
    itest_resp_release(&r);
    itest_upload_multipart(s, key, user, "a.txt", "abc", 3, NULL, &r);
    CHECK_ERROR(&r, 400, "invalid_user_id");
    itest_resp_release(&r);
}

static void bad_user_ids(void)
{
    char *key;
    struct itest_server *s = start_keyed(NULL, &key);
    REQUIRE(s && key);
    char long_id[130];
    memset(long_id, 'u', 129);
    long_id[129] = 0;
    const char *bad[] = {"bad user",
                         long_id,
                         "\xc3\xa4",
                         "a/b",
                         "u1,u2",
                         "a\"b",
                         "x;y",
                         "\xe2\x80\xae"
                         "u1"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        check_bad_user(s, key, bad[i], NULL);
    check_bad_user(s, key, NULL, NULL); /* missing */
    static const char *const empty[] = {"X-User-Id;", NULL};
    check_bad_user(s, key, NULL, empty);
    check_nothing_stored(s, key, "uploads with bad user ids");

    /* The edges of the valid set. */
    long_id[128] = 0;
    const char *good[] = {long_id, "a", "A.b_c@d:e-9", "user@example.com"};
    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
        struct itest_resp r;
        itest_request(s, "GET", "/v1/files", key, good[i], NULL, NULL, 0, NULL,
                      &r);
        CHECK_STATUS(&r, 200);
        itest_resp_release(&r);
    }
    free(key);
    itest_stop(s);
}

/* 60 MiB against the default 50 MiB limit; the bytes are generated while
 * sending. */
static void oversized_default_limit(void)
{
    char *key;
    struct itest_server *s = start_keyed(NULL, &key);
    REQUIRE(s && key);
    const curl_off_t size = 60 * 1024 * 1024;
    for (int chunked = 0; chunked < 2; chunked++) {
        struct itest_pattern_src src = {11, (uint64_t)size, 0};
        struct itest_req rq = {0};
        rq.path = "/v1/files?filename=huge.bin";
        rq.key = key;
        rq.user_id = "u1";
        rq.content_type = "application/octet-stream";
        rq.read_cb = itest_pattern_read;
        rq.read_ctx = &src;
        rq.read_len = chunked ? -1 : size;
        struct itest_resp r;
        itest_do(s, &rq, &r);
        CHECK_ERROR(&r, 413, "payload_too_large");
        if (r.status != 413)
            fprintf(stderr, "  (%s upload)\n", chunked ? "chunked" : "sized");
        itest_resp_release(&r);
        check_nothing_stored(
            s, key, chunked ? "a chunked 60 MiB upload" : "a 60 MiB upload");
    }
    /* Multipart: the file part alone is over the limit. */
    struct itest_pattern_src src = {12, (uint64_t)size, 0};
    struct itest_part part = {"file", "huge.bin", NULL, NULL, 0, &src};
    struct itest_req rq = {0};
    rq.path = "/v1/files";
    rq.key = key;
    rq.user_id = "u1";
    rq.parts = &part;
    rq.nparts = 1;
    struct itest_resp r;
    itest_do(s, &rq, &r);
    CHECK_ERROR(&r, 413, "payload_too_large");
    itest_resp_release(&r);
    check_nothing_stored(s, key, "a 60 MiB multipart upload");

    itest_request(s, "GET", "/healthz", NULL, NULL, NULL, NULL, 0, NULL, &r);
    CHECK_STATUS(&r, 200);
    itest_resp_release(&r);
    free(key);
    itest_stop(s);
}

/* Regression (hardening item 17): a request whose bytes reach an error
 * message as invalid UTF-8, or as a message cut in the middle of a
 * character, aborted the process.  Every such reply is a JSON 4xx with a
 * well-formed message, and the service keeps serving. */
static void check_utf8_error(struct itest_resp *r, long status,
                             const char *code, const char *what)
{
    CHECK_ERROR(r, status, code);
    const char *msg = itest_json_str(r->json, "error.message");
    CHECKF(msg && *msg, "%s: no message: %s", what, r->body);
    CHECKF(r->json != NULL, "%s: the body is not valid JSON (UTF-8)", what);
}

static void error_messages_stay_utf8(void)
{
    char *key;
    struct itest_server *s = start_keyed(NULL, &key);
    REQUIRE(s && key);
    struct itest_resp r;

    /* A path that decodes to bytes that are no UTF-8, without a key. */
    const char *paths[] = {"/%ff%fe",    "/%c3",          "/v1/%80abc",
                           "/%ed%a0%80", "/%f4%90%80%80", "/a%00b"};
    for (size_t i = 0; i < sizeof(paths) / sizeof(paths[0]); i++) {
        itest_request(s, "GET", paths[i], NULL, NULL, NULL, NULL, 0, NULL, &r);
        check_utf8_error(&r, 404, "not_found", paths[i]);
        itest_resp_release(&r);
    }
    const char *msg;
    itest_request(s, "GET", "/%ff", NULL, NULL, NULL, NULL, 0, NULL, &r);
    msg = itest_json_str(r.json, "error.message");
    CHECKF(msg && strstr(msg, "\xef\xbf\xbd"),
           "a bad byte is shown as U+FFFD: %s", r.body);
    itest_resp_release(&r);

    /* A message longer than the cap, cut in the middle of a character:
     * both parities of the cut. */
    for (int shift = 0; shift < 2; shift++) {
        char path[8192];
        size_t n =
            (size_t)snprintf(path, sizeof(path), "/%s", shift ? "x" : "");
        for (int k = 0; k < 700; k++)
            n += (size_t)snprintf(path + n, sizeof(path) - n, "%%C3%%A9");
        itest_request(s, "GET", path, NULL, NULL, NULL, NULL, 0, NULL, &r);
        check_utf8_error(&r, 404, "not_found", "a long path");
        itest_resp_release(&r);
    }

    /* A file id in an execution request, long enough to be cut. */
    char body[8192];
    size_t n = (size_t)snprintf(body, sizeof(body),
                                "{\"code\":\"1\","
                                "\"files\":[\"");
    for (int k = 0; k < 1500 && n + 8 < sizeof(body); k++)
        n += (size_t)snprintf(body + n, sizeof(body) - n, "\xc3\xa9");
    n += (size_t)snprintf(body + n, sizeof(body) - n, "\"]}");
    itest_request(s, "POST", "/v1/executions", key, "u1", "application/json",
                  body, n, NULL, &r);
    check_utf8_error(&r, 404, "not_found", "a long file id");
    itest_resp_release(&r);

    itest_request(s, "GET", "/healthz", NULL, NULL, NULL, NULL, 0, NULL, &r);
    CHECK_STATUS(&r, 200);
    itest_resp_release(&r);
    free(key);
    itest_stop(s);
}

/* Hardening item 20: a Transfer-Encoding other than chunked, a list of
 * codings, a stray space, two Transfer-Encoding fields, or both framings
 * got no answer at all (the request waited for a body nobody could
 * delimit).  RFC 9112 section 6: 400, and the connection closes. */
static void odd_transfer_encodings(void)
{
    char *key;
    struct itest_server *s = start_keyed(NULL, &key);
    REQUIRE(s && key);
    static const char *const framings[] = {
        "Transfer-Encoding: gzip\r\n",
        "Transfer-Encoding: chunked, gzip\r\n",
        "Transfer-Encoding: identity, chunked\r\n",
        "Transfer-Encoding: gzip, chunked\r\n",
        "Transfer-Encoding: chunked \r\n",
        "Transfer-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n",
        "Transfer-Encoding: chunked\r\nContent-Length: 10\r\n",
    };
    for (size_t i = 0; i < sizeof(framings) / sizeof(*framings); i++) {
        int fd = itest_connect(s);
        REQUIRE(fd >= 0);
        struct timeval tv = {10, 0}; /* a bound, not a wait */
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
        char req[1024];
        int n = snprintf(req, sizeof(req),
                         "POST /v1/files?filename=a.txt HTTP/1.1\r\n"
                         "Host: x\r\nAuthorization: Bearer %s\r\n"
                         "X-User-Id: u1\r\nContent-Type: text/plain\r\n"
                         "%s\r\n5\r\nhello\r\n0\r\n\r\n",
                         key, framings[i]);
        CHECK(itest_send_all(fd, req, (size_t)n));
        char buf[4096];
        size_t got = 0;
        ssize_t k;
        while (got < sizeof(buf) - 1 &&
               (k = read(fd, buf + got, sizeof(buf) - 1 - got)) > 0)
            got += (size_t)k;
        buf[got] = '\0';
        /* read() ended with 0: the server closed the connection. */
        CHECKF(!strncmp(buf, "HTTP/1.1 400 ", 13) &&
                   strcasestr(buf, "\r\nConnection: close\r\n") &&
                   strstr(buf, "\"invalid_request\""),
               "framing %zu (%.40s): answered %.60s", i, framings[i], buf);
        close(fd);
    }
    check_nothing_stored(s, key, "oddly framed uploads");
    free(key);
    itest_stop(s);
}

/* Found by fuzz_request: a header with a bare CR, "Expect: 100-continue"
 * and bytes after the header block without a Content-Length.
 * libmicrohttpd 0.9.75 sends "100 Continue", then refuses the 404 we
 * queue; the connection stayed open with no answer until the idle timeout
 * (60 s), so a client could hold connection slots for a byte each.  Now
 * the connection is closed at once (an answer libmicrohttpd would take is
 * not possible in that state). */
static void refused_reply_closes(void)
{
    struct itest_server *s = itest_start(NULL);
    REQUIRE(s);
    static const char req[] = "POST /v1/biles HTTP/1.1\r\nHost: x\r\n"
                              "X: u1\rA\nExpect: 100-continue\r\n\r\n"
                              "continued";
    int fd = itest_connect(s);
    REQUIRE(fd >= 0);
    struct timeval tv = {10, 0}; /* a bound, not a wait */
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    CHECK(itest_send_all(fd, req, sizeof(req) - 1));
    shutdown(fd, SHUT_WR);
    char buf[4096];
    size_t got = 0;
    ssize_t k = 0;
    double t0 = itest_now();
    while (got < sizeof(buf) - 1 &&
           (k = read(fd, buf + got, sizeof(buf) - 1 - got)) > 0)
        got += (size_t)k;
    buf[got] = '\0';
    /* read() ended with 0: the server closed the connection. */
    CHECKF(k == 0 && itest_now() - t0 < 5,
           "the connection is closed at once (read %zd after %.1f s): %s", k,
           itest_now() - t0, buf);
    CHECKF(!strstr(buf, "HTTP/1.1 5"), "no 5xx: %s", buf);
    close(fd);

    struct itest_resp r;
    itest_request(s, "GET", "/healthz", NULL, NULL, NULL, NULL, 0, NULL, &r);
    CHECK_STATUS(&r, 200);
    itest_resp_release(&r);
    itest_stop(s);
}

/* An upload refused before its body is read (here: over the byte quota,
 * known from Content-Length) by a client that sends the body at once,
 * without waiting for 100 Continue: the answer came while the body was
 * still arriving, the connection closed under the client, and it often
 * saw "Send failure: Broken pipe" instead of the 507 (a CI run of
 * test_mongo_faults lost a 503 the same way).  The refusal now comes
 * after the body; with Expect: 100-continue it still comes at once. */
static void refusal_before_the_body_arrives(void)
{
    const char *args[] = {"--quota-bytes", "1000", NULL};
    char *key;
    struct itest_server *s = start_keyed(args, &key);
    REQUIRE(s && key);
    size_t len = 8 << 20;
    char *body = malloc(len);
    REQUIRE(body);
    memset(body, 'x', len);
    static const char *const no_expect[] = {"Expect:", NULL};
    static const char *const expect[] = {"Expect: 100-continue", NULL};
    for (int i = 0; i < 6; i++) {
        struct itest_req rq = {0};
        rq.path = "/v1/files?filename=big.bin";
        rq.key = key;
        rq.user_id = "u1";
        rq.content_type = "application/octet-stream";
        rq.body = body;
        rq.body_len = len;
        rq.headers = i % 2 ? expect : no_expect;
        struct itest_resp r;
        itest_do(s, &rq, &r);
        if (r.status != 507)
            fprintf(stderr, "  try %d (%s): status %ld, curl: %s\n", i,
                    i % 2 ? "expect" : "no expect", r.status,
                    r.curl_rc ? r.curl_err : "ok");
        CHECK_ERROR(&r, 507, "quota_exceeded");
        itest_resp_release(&r);
    }
    free(body);
    check_nothing_stored(s, key, "uploads refused before their body");
    free(key);
    itest_stop(s);
}

/* ---- issue 20 item 5: ids are exact; request bytes reach no C string cut
 * short ------------------------------------------------------------------ */

/* Send raw bytes (one request, "Connection: close") and read the answer
 * into buf; its status, 0 when none came. */
static long raw_exchange(struct itest_server *s, const char *req, size_t len,
                         char *buf, size_t bufsz)
{
    int fd = itest_connect(s);
    if (fd < 0)
        return 0;
    struct timeval tv = {10, 0}; /* a bound, not a wait */
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    size_t got = 0;
    ssize_t k;
    if (itest_send_all(fd, req, len))
        while (got < bufsz - 1 &&
               (k = read(fd, buf + got, bufsz - 1 - got)) > 0)
            got += (size_t)k;
    buf[got] = '\0';
    close(fd);
    long status = 0;
    if (!strncmp(buf, "HTTP/1.1 ", 9))
        status = strtol(buf + 9, NULL, 10);
    return status;
}

/* One request with its head given as raw bytes (hlen of them, NULs
 * allowed), after the request line "<method> <target> HTTP/1.1". */
static long raw_request(struct itest_server *s, const char *line,
                        size_t line_len, const char *head, size_t hlen,
                        char *buf, size_t bufsz)
{
    char req[4096];
    size_t n = 0;
    if (line_len + hlen + 64 >= sizeof(req))
        return 0;
    memcpy(req, line, line_len);
    n += line_len;
    n += (size_t)snprintf(req + n, sizeof(req) - n,
                          " HTTP/1.1\r\nHost: x\r\nConnection: close\r\n");
    memcpy(req + n, head, hlen);
    n += hlen;
    memcpy(req + n, "\r\n", 2);
    n += 2;
    return raw_exchange(s, req, n, buf, bufsz);
}

/* GET or DELETE path as u1: the status, and the body checked as the
 * contract's JSON error when it is one. */
static long status_of(struct itest_server *s, const char *key,
                      const char *method, const char *path)
{
    struct itest_resp r;
    long st =
        itest_request(s, method, path, key, "u1", NULL, NULL, 0, NULL, &r);
    if (st >= 400 && strcmp(method, "HEAD") != 0)
        CHECKF(itest_json_str(r.json, "error.code") != NULL,
               "%s %s: %ld without a JSON error: %s", method, path, st, r.body);
    itest_resp_release(&r);
    return st;
}

/* Regression (issue 20 item 5): GET /v1/sessions/<id>%00 answered 200 and
 * DELETE 204 for <id>, and the same for /v1/files/<fid>%00 and its
 * /content: the router saw libmicrohttpd's decoded path as a C string,
 * which ends at the NUL.  A path that decodes to a NUL, a control byte,
 * a "/" inside a segment or bytes that are not UTF-8 now addresses
 * nothing: 404, on every route, and nothing is changed. */
static void ids_exact_in_paths(void)
{
    char *key;
    struct itest_server *s = start_keyed(NULL, &key);
    REQUIRE(s && key);
    struct itest_resp r;
    itest_upload_raw(s, key, "u1", "a.txt", "text/plain", "hello", 5, NULL, &r);
    CHECK_STATUS(&r, 201);
    char *fid = itest_json_dup(r.json, "file_id");
    itest_resp_release(&r);
    itest_request(s, "POST", "/v1/sessions", key, "u1", "application/json",
                  "{}", 2, NULL, &r);
    CHECK_STATUS(&r, 201);
    char *sid = itest_json_dup(r.json, "session_id");
    itest_resp_release(&r);
    itest_request(s, "POST", "/v1/executions", key, "u1", "application/json",
                  "{\"code\":\"1\",\"async\":true}", 25, NULL, &r);
    CHECK_STATUS(&r, 202);
    char *eid = itest_json_dup(r.json, "execution_id");
    itest_resp_release(&r);
    REQUIRE(*fid && *sid && *eid);

    /* A raw NUL or control byte in the request line (first: the
     * DELETEs below would have removed the file on a server that
     * honours them). */
    char buf[4096];
    for (int c = 0; c < 2; c++) {
        char line[256];
        int n = snprintf(line, sizeof(line), "GET /v1/files/%sX", fid);
        line[n - 1] = c ? '\x01' : '\0';
        n += snprintf(line + n, sizeof(line) - (size_t)n, "junk");
        char head[512];
        int h = snprintf(head, sizeof(head),
                         "Authorization: Bearer %s\r\nX-User-Id: u1\r\n", key);
        long st =
            raw_request(s, line, (size_t)n, head, (size_t)h, buf, sizeof(buf));
        CHECKF(st == 404, "a raw 0x%02x after the id: want 404, got %ld: %.80s",
               c, st, buf);
    }

    static const char *const tails[] = {"%00", "%00junk",    "%00/", "%01",
                                        "%0a", "%0D",        "%1f",  "%7f",
                                        "%2f", "%2Fcontent", "%ff",  "%c3"};
    struct {
        const char *method, *prefix, *id, *suffix;
    } routes[] = {
        {"GET", "/v1/files/", fid, ""},
        {"HEAD", "/v1/files/", fid, ""},
        {"OPTIONS", "/v1/files/", fid, ""},
        {"DELETE", "/v1/files/", fid, ""},
        {"GET", "/v1/files/", fid, "/content"},
        {"GET", "/v1/sessions/", sid, ""},
        {"DELETE", "/v1/sessions/", sid, ""},
        {"GET", "/v1/sessions/", sid, "/variables"},
        {"GET", "/v1/executions/", eid, ""},
    };
    for (size_t i = 0; i < N_OF(routes); i++) {
        for (size_t t = 0; t < N_OF(tails); t++) {
            char *path = itest_fmt("%s%s%s%s", routes[i].prefix, routes[i].id,
                                   tails[t], routes[i].suffix);
            long st = status_of(s, key, routes[i].method, path);
            CHECKF(st == 404, "%s %s: want 404, got %ld", routes[i].method,
                   path, st);
            free(path);
        }
    }
    /* Literal segments are exact too: a decoded NUL or "/" matches none. */
    static const char *const lists[] = {"/v1/files%00", "/v1/files%00/x",
                                        "/v1%2ffiles",  "/v1/sessions%00",
                                        "/healthz%00",  "/v1/files%20"};
    for (size_t i = 0; i < N_OF(lists); i++) {
        long st = status_of(s, key, "GET", lists[i]);
        CHECKF(st == 404, "GET %s: want 404, got %ld", lists[i], st);
    }
    /* ... while an escaped letter is still that letter. */
    CHECKF(status_of(s, key, "GET", "/v1/fil%65s") == 200,
           "GET /v1/fil%%65s is /v1/files");

    /* Nothing was deleted: the file, its bytes, the session. */
    char *path = itest_fmt("/v1/files/%s/content", fid);
    itest_request(s, "GET", path, key, "u1", NULL, NULL, 0, NULL, &r);
    CHECK_STATUS(&r, 200);
    CHECKF(r.len == 5 && !memcmp(r.body, "hello", 5), "content: %s", r.body);
    itest_resp_release(&r);
    free(path);
    path = itest_fmt("/v1/sessions/%s", sid);
    itest_request(s, "GET", path, key, "u1", NULL, NULL, 0, NULL, &r);
    CHECK_STATUS(&r, 200);
    const char *st = itest_json_str(r.json, "status");
    CHECKF(st && strcmp(st, "ended") != 0, "the session ended: %s", r.body);
    itest_resp_release(&r);
    CHECKF(status_of(s, key, "DELETE", path) == 204, "DELETE %s", path);
    free(path);
    free(fid);
    free(sid);
    free(eid);
    free(key);
    itest_stop(s);
}

/* Issue 20 item 5, the rest of the class: every other place where request
 * bytes that hide a NUL (or a control byte) could reach a C string.  Header
 * values are refused before routing: libmicrohttpd keeps one only up to a
 * NUL, so "X-User-Id: u1\0junk" was user u1, "Authorization: Bearer
 * KEY\0junk" was KEY and "X-Request-Id: ab\0cd" was echoed as "ab".  JSON
 * strings with \u0000 are refused by jansson (no JSON_ALLOW_NUL).  Multipart
 * part names and filenames that hide a NUL are not cut to a shorter name. */
static void nul_bytes_elsewhere(void)
{
    char *key;
    struct itest_server *s = start_keyed(NULL, &key);
    REQUIRE(s && key);
    struct itest_resp r;

    /* Query values are read with their length: a value a route reads
     * that hides a NUL is refused (the filename's NUL becomes "_", as
     * filename_controls shows), and a key that hides one is another
     * key, never the shorter one. */
    static const char *const queries[] = {
        "/v1/files?limit=5%00x",
        "/v1/files?cursor=%00",
        "/v1/files?limit=5%00",
    };
    for (size_t i = 0; i < N_OF(queries); i++) {
        itest_request(s, "GET", queries[i], key, "u1", NULL, NULL, 0, NULL, &r);
        CHECK_ERROR(&r, 400, "invalid_request");
        itest_resp_release(&r);
    }
    itest_request(s, "POST", "/v1/files?filename=a.txt&ttl_hours=1%00", key,
                  "u1", "text/plain", "abc", 3, NULL, &r);
    CHECK_ERROR(&r, 400, "invalid_request");
    itest_resp_release(&r);
    itest_request(s, "GET", "/v1/files?limit%00=abc&cursor%00x=zz", key, "u1",
                  NULL, NULL, 0, NULL, &r);
    CHECK_STATUS(&r, 200);
    itest_resp_release(&r);
    itest_request(s, "POST", "/v1/files?filename%00=a.txt", key, "u1",
                  "text/plain", "abc", 3, NULL, &r);
    CHECK_ERROR(&r, 400, "invalid_request");
    itest_resp_release(&r);

    /* Header values: a NUL or a control byte other than a tab. */
    struct {
        const char *fmt; /* "@": the key; '#' is replaced by the byte */
        char byte;
    } heads[] = {
        {"Authorization: Bearer @\r\nX-User-Id: u1#junk\r\n", '\0'},
        {"Authorization: Bearer @#junk\r\nX-User-Id: u1\r\n", '\0'},
        {"Authorization: Bearer @\r\nX-User-Id: u1\r\nX-Request-Id: ab#cd\r\n",
         '\0'},
        {"Authorization: Bearer @\r\nX-User-Id: u1\r\nAccept: a#b\r\n", '\0'},
        {"X-User-Id: u1\r\nAuthorization: Bearer @#\r\nAccept: x\r\n", '\0'},
        {"Authorization: Bearer @#\r\nX-User-Id: u1\r\n", '\x01'},
        {"Authorization: Bearer @\r\nX-User-Id: u1\r\nAccept: a#b\r\n", '\x1b'},
        {"Authorization: Bearer @\r\nX-User-Id: u1\r\nAccept: a#b\r\n", '\x7f'},
    };
    char buf[4096];
    for (size_t i = 0; i < N_OF(heads); i++) {
        char head[512];
        const char *at = strchr(heads[i].fmt, '@');
        int h = snprintf(head, sizeof(head), "%.*s%s%s",
                         (int)(at - heads[i].fmt), heads[i].fmt, key, at + 1);
        char *hash = memchr(head, '#', (size_t)h);
        REQUIRE(hash);
        *hash = heads[i].byte;
        long st = raw_request(s, "GET /v1/files", 13, head, (size_t)h, buf,
                              sizeof(buf));
        CHECKF(st == 400 && strstr(buf, "\"invalid_request\"") &&
                   !strstr(buf, "X-Request-Id: ab\r\n"),
               "header case %zu (byte 0x%02x): want 400 invalid_request, "
               "got %.200s",
               i, (unsigned)(unsigned char)heads[i].byte, buf);
    }
    /* What stays allowed: a tab, a trailing blank, bare LF line ends. */
    {
        char req[1024];
        int n = snprintf(req, sizeof(req),
                         "GET /v1/files HTTP/1.1\nHost: x\nConnection: close\n"
                         "Authorization: Bearer %s\nX-User-Id: u1\n"
                         "Accept: a\tb \n\n",
                         key);
        long st = raw_exchange(s, req, (size_t)n, buf, sizeof(buf));
        CHECKF(st == 200, "bare LF, tabs and blanks: want 200, got %.200s",
               buf);
    }

    /* JSON strings with \u0000: jansson refuses them. */
    static const struct {
        const char *path, *body;
    } jsons[] = {
        {"/v1/executions", "{\"code\":\"print(1)\\u0000\"}"},
        {"/v1/files", "{\"url\":\"http://example.com/\\u0000x\"}"},
        {"/v1/sessions", "{\"policy\":\"standard\\u0000x\"}"},
        {"/v1/packages", "{\"packages\":[\"numpy\\u0000x\"]}"},
    };
    for (size_t i = 0; i < N_OF(jsons); i++) {
        itest_request(s, "POST", jsons[i].path, key, "u1", "application/json",
                      jsons[i].body, strlen(jsons[i].body), NULL, &r);
        CHECK_ERROR(&r, 400, "invalid_json");
        itest_resp_release(&r);
    }

    /* JSON strings with another control byte reach checks that refuse
     * them: a URL to ingest, a callback_url, a session id. */
    static const struct {
        const char *path, *body;
        long status;
        const char *code;
    } ctls[] = {
        {"/v1/files", "{\"url\":\"http://example.com/a\\u0001b\"}", 400,
         "invalid_request"},
        {"/v1/files", "{\"url\":\"http://exa\\u000ample.com/\"}", 400,
         "invalid_request"},
        {"/v1/executions",
         "{\"code\":\"1\",\"async\":true,"
         "\"callback_url\":\"https://example.com/\\u0001\"}",
         400, "invalid_request"},
        {"/v1/executions", "{\"code\":\"1\",\"session_id\":\"sess_\\u0001\"}",
         404, "not_found"},
    };
    for (size_t i = 0; i < N_OF(ctls); i++) {
        itest_request(s, "POST", ctls[i].path, key, "u1", "application/json",
                      ctls[i].body, strlen(ctls[i].body), NULL, &r);
        CHECK_ERROR(&r, ctls[i].status, ctls[i].code);
        itest_resp_release(&r);
    }

    /* Multipart: a part name or a filename hiding a NUL is not the
     * shorter name. */
    static const char *const parts[] = {
        "name=\"file#x\"; filename=\"a.txt\"",
        "name=\"file\"; filename=\"a.txt#.exe\"",
    };
    for (size_t i = 0; i < N_OF(parts); i++) {
        char body[512];
        int b = snprintf(body, sizeof(body),
                         "--XyZ\r\nContent-Disposition: form-data; %s\r\n"
                         "Content-Type: text/plain\r\n\r\nhello\r\n--XyZ--\r\n",
                         parts[i]);
        *(char *)memchr(body, '#', (size_t)b) = '\0';
        char req[1024];
        int n = snprintf(req, sizeof(req),
                         "POST /v1/files HTTP/1.1\r\nHost: x\r\n"
                         "Connection: close\r\nAuthorization: Bearer %s\r\n"
                         "X-User-Id: u1\r\nContent-Type: multipart/form-data; "
                         "boundary=XyZ\r\nContent-Length: %d\r\n\r\n",
                         key, b);
        memcpy(req + n, body, (size_t)b);
        long st = raw_exchange(s, req, (size_t)n + (size_t)b, buf, sizeof(buf));
        CHECKF(st == 400 && strstr(buf, "\"invalid_request\""),
               "multipart case %zu: want 400, got %.200s", i, buf);
    }
    check_nothing_stored(s, key, "requests hiding NUL bytes");
    free(key);
    itest_stop(s);
}

TEST_MAIN(T(multipart_without_boundary), T(multipart_truncated),
          T(multipart_without_file_part), T(json_body), T(raw_without_filename),
          T(filename_paths), T(filename_controls), T(filename_lengths),
          T(filename_dots_empty_utf8), T(filename_bidi), T(bad_user_ids),
          T(oversized_default_limit), T(error_messages_stay_utf8),
          T(odd_transfer_encodings), T(refusal_before_the_body_arrives),
          T(refused_reply_closes), T(ids_exact_in_paths),
          T(nul_bytes_elsewhere))
