/*
 * test_mongo_nodes.c - two interpd processes on different ports sharing one
 * MongoDB database and its GridFS bucket: what one node stores, the other
 * lists, serves and deletes; keys made by the CLI or by the first node's
 * bootstrap work on both.  Runs on the fixture's MongoDB whatever
 * ITEST_BACKEND says (this file is about MongoDB only).
 */
#include "harness.h"
#include "nodes.h"

#include <sys/stat.h>

static long get(struct itest_server *s, const char *key, const char *path,
                struct itest_resp *r)
{
    return itest_request(s, "GET", path, key, "u1", NULL, NULL, 0, NULL, r);
}

/* The file ids listed for u1 on s, as one comma-separated string. */
static char *listed_ids(struct itest_server *s, const char *key)
{
    struct itest_resp r;
    get(s, key, "/v1/files?limit=100", &r);
    CHECK_STATUS(&r, 200);
    char *ids = itest_fmt("%s", "");
    size_t i;
    json_t *f;
    json_array_foreach(itest_json_get(r.json, "files"), i, f)
    {
        const char *id = itest_json_str(f, "file_id");
        char *more = itest_fmt("%s%s%s", ids, i ? "," : "", id ? id : "?");
        free(ids);
        ids = more;
    }
    itest_resp_release(&r);
    return ids;
}

static void shared_files(void)
{
    int mark = test__failed_checks;
    struct nodes n;
    bool up = nodes_start(&n);
    CHECKF(up, "two nodes on one database did not start");
    if (!up) {
        nodes_stop(&n, mark);
        return;
    }
    CHECKF(n.a->port != n.b->port, "both nodes on port %d", n.a->port);
    char *key = NULL;
    CHECK(itest_create_key(n.a, "acme", false, &key, NULL));
    if (!key) {
        nodes_stop(&n, mark);
        return;
    }

    /* Upload through A: a small file and one of several GridFS chunks. */
    const size_t big_len = 700 * 1024 + 17;
    unsigned char *big = malloc(big_len);
    REQUIRE(big);
    itest_pattern_fill(77, 0, big, big_len);
    struct itest_resp r;
    itest_upload_raw(n.a, key, "u1", "small.txt", "text/plain", "from A\n", 7,
                     NULL, &r);
    CHECK_STATUS(&r, 201);
    char *small_id = itest_json_dup(r.json, "file_id");
    json_t *small_obj = json_incref(r.json);
    itest_resp_release(&r);
    itest_upload_multipart(n.a, key, "u1", "big.bin", big, big_len, NULL, &r);
    CHECK_STATUS(&r, 201);
    CHECK_FILE(r.json, "big.bin", big, big_len);
    char *big_id = itest_json_dup(r.json, "file_id");
    itest_resp_release(&r);

    /* B lists both, in the same order as A, with the same File objects. */
    char *on_a = listed_ids(n.a, key);
    char *on_b = listed_ids(n.b, key);
    char *want = itest_fmt("%s,%s", big_id, small_id);
    CHECK_STR(on_b, want);
    CHECK_STR(on_a, on_b);
    free(on_a);
    free(on_b);
    free(want);
    char *p = itest_fmt("/v1/files/%s", small_id);
    get(n.b, key, p, &r);
    CHECK_STATUS(&r, 200);
    CHECKF(json_equal(r.json, small_obj),
           "node B's File object differs from the one A returned: %s", r.body);
    itest_resp_release(&r);
    free(p);

    /* B serves A's bytes. */
    p = itest_fmt("/v1/files/%s/content", big_id);
    get(n.b, key, p, &r);
    CHECK_STATUS(&r, 200);
    char got[65], exp[65];
    itest_sha256_hex(r.body, r.len, got);
    itest_sha256_hex(big, big_len, exp);
    CHECKF(r.len == big_len && !strcmp(got, exp),
           "node B served %zu bytes with sha256 %s, want %zu bytes, %s", r.len,
           got, big_len, exp);
    itest_resp_release(&r);
    free(p);
    p = itest_fmt("/v1/files/%s/content", small_id);
    get(n.b, key, p, &r);
    CHECK_STATUS(&r, 200);
    CHECKF(r.len == 7 && !memcmp(r.body, "from A\n", 7), "content: %s", r.body);
    itest_resp_release(&r);
    free(p);

    /* B deletes; A no longer finds it, and its bytes are gone. */
    p = itest_fmt("/v1/files/%s", big_id);
    itest_request(n.b, "DELETE", p, key, "u1", NULL, NULL, 0, NULL, &r);
    CHECK_STATUS(&r, 204);
    itest_resp_release(&r);
    get(n.a, key, p, &r);
    CHECK_ERROR(&r, 404, "not_found");
    itest_resp_release(&r);
    char *pc = itest_fmt("/v1/files/%s/content", big_id);
    get(n.a, key, pc, &r);
    CHECK_ERROR(&r, 404, "not_found");
    itest_resp_release(&r);
    itest_request(n.a, "DELETE", p, key, "u1", NULL, NULL, 0, NULL, &r);
    CHECK_ERROR(&r, 404, "not_found");
    itest_resp_release(&r);
    free(p);
    free(pc);
    on_a = listed_ids(n.a, key);
    CHECK_STR(on_a, small_id);
    free(on_a);

    /* Upload through B, read through A: both ways. */
    itest_upload_raw(n.b, key, "u1", "from-b.txt", "text/plain", "from B\n", 7,
                     NULL, &r);
    CHECK_STATUS(&r, 201);
    char *b_id = itest_json_dup(r.json, "file_id");
    itest_resp_release(&r);
    p = itest_fmt("/v1/files/%s/content", b_id);
    get(n.a, key, p, &r);
    CHECK_STATUS(&r, 200);
    CHECKF(r.len == 7 && !memcmp(r.body, "from B\n", 7), "content: %s", r.body);
    itest_resp_release(&r);
    free(p);

    /* The shared store holds exactly the two files, nothing half-made. */
    size_t nrec = 0;
    CHECK(itest_store_consistent(n.a, &nrec));
    CHECK_INT(nrec, 2);
    char **strays;
    size_t ns = itest_stray_files(n.a, &strays);
    CHECKF(ns == 2, "GridFS holds %zu entries, want 2", ns);
    if (ns != 2)
        itest_print_strays(n.a);
    itest_strv_free(strays);

    json_decref(small_obj);
    free(big);
    free(small_id);
    free(big_id);
    free(b_id);
    free(key);
    nodes_stop(&n, mark);
}

static void shared_keys(void)
{
    int mark = test__failed_checks;
    struct nodes n;
    bool up = nodes_start(&n);
    CHECKF(up, "two nodes on one database did not start");
    if (!up) {
        nodes_stop(&n, mark);
        return;
    }
    /* A wrote admin.key; B found keys in the database and wrote none. */
    CHECKF(n.a->admin_key != NULL, "node A has no admin.key");
    char *b_key_path = itest_fmt("%s/admin.key", n.b->data_dir);
    struct stat st;
    CHECKF(stat(b_key_path, &st) != 0,
           "node B wrote %s although the shared database has keys", b_key_path);
    free(b_key_path);

    /* A key made with the CLI on the shared database, with --mongo-uri
     * given as a flag the way an operator does. */
    char *cli_dir = itest_fmt("%s/cli-data", n.a->tmp_dir);
    char *out = NULL;
    int code = itest_cli(n.a, &out, "keys", "create", "--mongo-uri", n.uri,
                         "--data-dir", cli_dir, "--tenant", "globex", NULL);
    CHECK_INT(code, 0);
    json_error_t jerr;
    json_t *j = out ? json_loads(out, 0, &jerr) : NULL;
    const char *key = itest_json_str(j, "key");
    CHECKF(key != NULL, "keys create printed: %s", out ? out : "(nothing)");
    struct itest_server *both[2] = {n.a, n.b};
    struct itest_resp r;
    for (int i = 0; i < 2 && key; i++) {
        itest_request(both[i], "GET", "/v1/files", key, "u1", NULL, NULL, 0,
                      NULL, &r);
        CHECK_STATUS(&r, 200);
        itest_resp_release(&r);
    }
    /* A's admin key works on B (tenant "admin" there too). */
    if (n.a->admin_key) {
        itest_upload_raw(n.b, n.a->admin_key, "u9", "adm.txt", "text/plain",
                         "adm\n", 4, NULL, &r);
        CHECK_STATUS(&r, 201);
        itest_resp_release(&r);
        itest_request(n.a, "GET", "/v1/files", n.a->admin_key, "u9", NULL, NULL,
                      0, NULL, &r);
        CHECK_STATUS(&r, 200);
        CHECK_INT(json_array_size(itest_json_get(r.json, "files")), 1);
        itest_resp_release(&r);
    }
    /* A key revoked with the CLI is refused by both nodes at once. */
    const char *kid = itest_json_str(j, "key_id");
    if (kid) {
        CHECK_INT(itest_cli(n.a, NULL, "keys", "revoke", "--mongo-uri", n.uri,
                            "--data-dir", cli_dir, kid, NULL),
                  0);
        for (int i = 0; i < 2 && key; i++) {
            itest_request(both[i], "GET", "/v1/files", key, "u1", NULL, NULL, 0,
                          NULL, &r);
            CHECK_ERROR(&r, 401, "unauthorized");
            itest_resp_release(&r);
        }
    }
    json_decref(j);
    free(out);
    free(cli_dir);
    nodes_stop(&n, mark);
}

TEST_MAIN(T(shared_files), T(shared_keys))
