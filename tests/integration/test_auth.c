/*
 * test_auth.c - API keys (admin.key, the `keys` CLI against a running
 * server), 401s, and the isolation of users and tenants.
 */
#include <regex.h>
#include <sys/stat.h>

#include "harness.h"

#include <sys/stat.h>

static const char file_path_fmt[] = "/v1/files/%s";

static void admin_key_file(void)
{
    struct itest_server *s = itest_start(NULL);
    REQUIRE(s);
    char *path = itest_fmt("%s/admin.key", s->data_dir);
    struct stat st;
    CHECKF(stat(path, &st) == 0, "stat %s", path);
    CHECKF((st.st_mode & 0777) == 0600, "%s has mode %o, want 600", path,
           (unsigned)(st.st_mode & 0777));
    size_t len;
    char *text = itest_read_file(path, &len);
    CHECKF(text && strlen(s->admin_key) >= 16 &&
               len == strlen(s->admin_key) + 1 && !strchr(s->admin_key, ' '),
           "admin.key is \"%s\": want one key of at least 16 characters and "
           "a newline",
           text ? text : "(unreadable)");
    free(text);
    free(path);

    /* The log names the file, never the key. */
    char *log = itest_read_log(s);
    CHECKF(log && strstr(log, "admin.key"), "the log does not mention "
                                            "admin.key");
    CHECKF(log && !strstr(log, s->admin_key), "the log contains the admin "
                                              "key");
    free(log);

    /* The admin key works on the files endpoints (tenant "admin"). */
    struct itest_resp r;
    itest_upload_raw(s, s->admin_key, "u1", "a.txt", "text/plain", "hi\n", 3,
                     NULL, &r);
    CHECK_STATUS(&r, 201);
    CHECK_FILE(r.json, "a.txt", "hi\n", 3);
    itest_resp_release(&r);
    itest_request(s, "GET", "/v1/files", s->admin_key, "u1", NULL, NULL, 0,
                  NULL, &r);
    CHECK_STATUS(&r, 200);
    CHECK_INT(json_array_size(itest_json_get(r.json, "files")), 1);
    itest_resp_release(&r);
    itest_stop(s);
}

/* A restart keeps the admin key, the other keys and the files. */
static void restart_keeps_state(void)
{
    struct itest_server *s = itest_start(NULL);
    REQUIRE(s);
    char *key = NULL;
    CHECK(itest_create_key(s, "acme", false, &key, NULL));
    struct itest_resp r;
    itest_upload_raw(s, key, "u1", "keep.txt", "text/plain", "keep me\n", 8,
                     NULL, &r);
    CHECK_STATUS(&r, 201);
    char *id = itest_json_dup(r.json, "file_id");
    itest_resp_release(&r);
    char *admin_before = strdup(s->admin_key);

    CHECK(itest_restart(s, NULL));
    CHECK_STR(s->admin_key, admin_before);
    itest_request(s, "GET", "/healthz", NULL, NULL, NULL, NULL, 0, NULL, &r);
    CHECK_STATUS(&r, 200);
    itest_resp_release(&r);
    char *path = itest_fmt("/v1/files/%s/content", id);
    itest_request(s, "GET", path, key, "u1", NULL, NULL, 0, NULL, &r);
    CHECK_STATUS(&r, 200);
    CHECKF(r.len == 8 && !memcmp(r.body, "keep me\n", 8),
           "content after restart: %s", r.body);
    itest_resp_release(&r);
    itest_request(s, "GET", "/v1/files", s->admin_key, "u1", NULL, NULL, 0,
                  NULL, &r);
    CHECK_STATUS(&r, 200);
    itest_resp_release(&r);
    free(path);
    free(id);
    free(key);
    free(admin_before);
    itest_stop(s);
}

static void keys_create(void)
{
    struct itest_server *s = itest_start(NULL);
    REQUIRE(s);
    char *out = NULL;
    int code = itest_cli(s, &out, "keys", "create", "--data-dir", s->data_dir,
                         "--tenant", "acme", NULL);
    CHECK_INT(code, 0);
    json_error_t jerr;
    json_t *j = out ? json_loads(out, 0, &jerr) : NULL;
    CHECKF(json_is_object(j), "keys create printed: %s", out ? out : "");
    const char *kid = itest_json_str(j, "key_id");
    const char *key = itest_json_str(j, "key");
    CHECKF(kid && !strncmp(kid, "key_", 4), "key_id %s", kid ? kid : "(none)");
    CHECK_STR(itest_json_str(j, "tenant"), "acme");
    CHECKF(json_is_false(itest_json_get(j, "admin")), "admin is not false");
    const char *ca = itest_json_str(j, "created_at");
    CHECKF(ca && itest_parse_time(ca) > 0, "created_at %s", ca ? ca : "(none)");
    CHECKF(key && strlen(key) >= 16, "key %s", key ? key : "(none)");

    /* The new key works against the running server at once. */
    struct itest_resp r;
    if (key) {
        itest_request(s, "GET", "/v1/files", key, "u1", NULL, NULL, 0, NULL,
                      &r);
        CHECK_STATUS(&r, 200);
        CHECKF(json_is_array(itest_json_get(r.json, "files")),
               "no files array: %s", r.body);
        itest_resp_release(&r);
    }
    json_decref(j);
    free(out);

    /* --admin */
    out = NULL;
    code = itest_cli(s, &out, "keys", "create", "--data-dir", s->data_dir,
                     "--tenant", "ops", "--admin", NULL);
    CHECK_INT(code, 0);
    j = out ? json_loads(out, 0, &jerr) : NULL;
    CHECKF(json_is_true(itest_json_get(j, "admin")),
           "keys create --admin printed: %s", out ? out : "");
    key = itest_json_str(j, "key");
    if (key) {
        itest_request(s, "GET", "/v1/files", key, "u1", NULL, NULL, 0, NULL,
                      &r);
        CHECK_STATUS(&r, 200);
        itest_resp_release(&r);
    }
    json_decref(j);
    free(out);

    /* Bad tenants and a missing --tenant fail without printing a key. */
    const char *bad[] = {"bad tenant", "", "a/b", "\xc3\xa4"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        out = NULL;
        code = itest_cli(s, &out, "keys", "create", "--data-dir", s->data_dir,
                         "--tenant", bad[i], NULL);
        CHECKF(code > 0 && out && !strstr(out, "\"key\""),
               "keys create --tenant \"%s\": exit %d, stdout %s (want a "
               "failure and no key)",
               bad[i], code, out ? out : "");
        free(out);
    }
    out = NULL;
    code =
        itest_cli(s, &out, "keys", "create", "--data-dir", s->data_dir, NULL);
    CHECKF(code > 0 && out && !strstr(out, "\"key\""),
           "keys create without --tenant: exit %d, stdout %s", code,
           out ? out : "");
    free(out);
    itest_stop(s);
}

static void keys_list(void)
{
    struct itest_server *s = itest_start(NULL);
    REQUIRE(s);
    char *k1 = NULL, *id1 = NULL, *k2 = NULL, *id2 = NULL;
    CHECK(itest_create_key(s, "acme", false, &k1, &id1));
    CHECK(itest_create_key(s, "globex", true, &k2, &id2));
    char *out = NULL;
    int code =
        itest_cli(s, &out, "keys", "list", "--data-dir", s->data_dir, NULL);
    CHECK_INT(code, 0);
    json_error_t jerr;
    json_t *j = out ? json_loads(out, 0, &jerr) : NULL;
    CHECKF(json_is_array(j), "keys list printed: %s", out ? out : "");
    CHECKF(json_array_size(j) == 3,
           "want 3 keys (admin, acme, globex), got "
           "%zu: %s",
           json_array_size(j), out ? out : "");
    bool seen_admin = false, seen1 = false, seen2 = false;
    size_t i;
    json_t *e;
    json_array_foreach(j, i, e)
    {
        const char *kid = itest_json_str(e, "key_id");
        const char *tenant = itest_json_str(e, "tenant");
        const json_t *adm = itest_json_get(e, "admin");
        const char *ca = itest_json_str(e, "created_at");
        const json_t *rev = itest_json_get(e, "revoked_at");
        const char *secret = itest_json_str(e, "secret");
        CHECKF(kid && tenant && json_is_boolean(adm) && ca &&
                   itest_parse_time(ca) > 0 && json_is_null(rev) && secret &&
                   secret[0],
               "entry %zu lacks a field or has a wrong type", i);
        CHECKF(!itest_json_get(e, "key") && !itest_json_get(e, "hash"),
               "entry %zu shows the key or its hash", i);
        if (tenant && !strcmp(tenant, "admin") && json_is_true(adm))
            seen_admin = true;
        if (kid && id1 && !strcmp(kid, id1))
            seen1 = tenant && !strcmp(tenant, "acme") && json_is_false(adm);
        if (kid && id2 && !strcmp(kid, id2))
            seen2 = tenant && !strcmp(tenant, "globex") && json_is_true(adm);
    }
    CHECKF(seen_admin, "no admin key of tenant \"admin\" listed");
    CHECKF(seen1 && seen2, "created keys not listed right: %s", out ? out : "");
    /* Neither plain keys nor their hashes appear anywhere. */
    const char *plain[] = {k1, k2, s->admin_key};
    for (size_t p = 0; p < 3; p++) {
        if (!plain[p] || !out)
            continue;
        char hash[65];
        itest_sha256_hex(plain[p], strlen(plain[p]), hash);
        CHECKF(!strstr(out, plain[p]), "keys list shows a plain key");
        CHECKF(!strstr(out, hash), "keys list shows a key's sha256");
    }
    json_decref(j);
    free(out);
    free(k1);
    free(k2);
    free(id1);
    free(id2);
    itest_stop(s);
}

static void keys_revoke(void)
{
    struct itest_server *s = itest_start(NULL);
    REQUIRE(s);
    char *key = NULL, *kid = NULL, *other = NULL;
    REQUIRE(itest_create_key(s, "acme", false, &key, &kid));
    CHECK(itest_create_key(s, "acme", false, &other, NULL));
    struct itest_resp r;
    itest_request(s, "GET", "/v1/files", key, "u1", NULL, NULL, 0, NULL, &r);
    CHECK_STATUS(&r, 200);
    itest_resp_release(&r);

    CHECK_INT(itest_cli(s, NULL, "keys", "revoke", "--data-dir", s->data_dir,
                        kid, NULL),
              0);
    /* Refused at once by the running server. */
    itest_request(s, "GET", "/v1/files", key, "u1", NULL, NULL, 0, NULL, &r);
    CHECK_ERROR(&r, 401, "unauthorized");
    CHECKF(itest_header(&r, "WWW-Authenticate") &&
               !strncasecmp(itest_header(&r, "WWW-Authenticate"), "Bearer", 6),
           "WWW-Authenticate: %s", itest_header(&r, "WWW-Authenticate"));
    itest_resp_release(&r);
    itest_upload_raw(s, key, "u1", "x.txt", "text/plain", "x", 1, NULL, &r);
    CHECK_ERROR(&r, 401, "unauthorized");
    itest_resp_release(&r);
    /* The tenant's other key still works. */
    itest_request(s, "GET", "/v1/files", other, "u1", NULL, NULL, 0, NULL, &r);
    CHECK_STATUS(&r, 200);
    itest_resp_release(&r);

    /* The list shows the revocation time. */
    char *out = NULL;
    CHECK_INT(
        itest_cli(s, &out, "keys", "list", "--data-dir", s->data_dir, NULL), 0);
    json_error_t jerr;
    json_t *j = out ? json_loads(out, 0, &jerr) : NULL;
    size_t i;
    json_t *e;
    bool found = false;
    json_array_foreach(j, i, e)
    {
        const char *id = itest_json_str(e, "key_id");
        if (!id || strcmp(id, kid))
            continue;
        found = true;
        const char *rev = itest_json_str(e, "revoked_at");
        CHECKF(rev && itest_parse_time(rev) > 0, "revoked key's revoked_at: %s",
               rev ? rev : "(not a time)");
    }
    CHECKF(found, "revoked key missing from keys list: %s", out ? out : "");
    json_decref(j);
    free(out);

    /* Unknown id: exit 1. */
    CHECK_INT(itest_cli(s, NULL, "keys", "revoke", "--data-dir", s->data_dir,
                        "key_aaaaaaaaaaaaaaaaaaaaaaaaaa", NULL),
              1);
    CHECK_INT(itest_cli(s, NULL, "keys", "revoke", "--data-dir", s->data_dir,
                        "nonsense", NULL),
              1);
    free(key);
    free(kid);
    free(other);
    itest_stop(s);
}

static void check_401(struct itest_server *s, const char *authorization)
{
    const char *hdrs[] = {authorization, NULL};
    struct itest_resp r;
    itest_request(s, "GET", "/v1/files", NULL, "u1", NULL, NULL, 0,
                  authorization ? hdrs : NULL, &r);
    CHECK_ERROR(&r, 401, "unauthorized");
    const char *w = itest_header(&r, "WWW-Authenticate");
    CHECKF(w && !strncasecmp(w, "Bearer", 6),
           "Authorization \"%s\": want WWW-Authenticate: Bearer, got %s",
           authorization ? authorization : "(none)", w ? w : "(none)");
    itest_resp_release(&r);
}

static void unauthorized(void)
{
    struct itest_server *s = itest_start(NULL);
    REQUIRE(s);
    check_401(s, NULL);
    check_401(s, "Authorization: Bearer wrong-key");
    check_401(s, "Authorization: Bearer");
    check_401(s, "Authorization: Bearer ");
    char *basic = itest_fmt("Authorization: Basic %s", s->admin_key);
    check_401(s, basic);
    free(basic);
    char *extra = itest_fmt("Authorization: Bearer %sx", s->admin_key);
    check_401(s, extra);
    free(extra);
    char *prefix = itest_fmt("Authorization: Bearer %.*s",
                             (int)strlen(s->admin_key) - 1, s->admin_key);
    check_401(s, prefix);
    free(prefix);

    /* Every files endpoint asks for the key. */
    struct itest_resp r;
    itest_upload_raw(s, NULL, "u1", "a.txt", "text/plain", "a", 1, NULL, &r);
    CHECK_ERROR(&r, 401, "unauthorized");
    itest_resp_release(&r);
    const char *paths[] = {"/v1/files/file_aaaaaaaaaaaaaaaaaaaaaaaaaa",
                           "/v1/files/file_aaaaaaaaaaaaaaaaaaaaaaaaaa/content"};
    for (size_t i = 0; i < 2; i++) {
        itest_request(s, "GET", paths[i], NULL, "u1", NULL, NULL, 0, NULL, &r);
        CHECK_ERROR(&r, 401, "unauthorized");
        itest_resp_release(&r);
    }
    itest_request(s, "DELETE", paths[0], "nope", "u1", NULL, NULL, 0, NULL, &r);
    CHECK_ERROR(&r, 401, "unauthorized");
    itest_resp_release(&r);
    itest_stop(s);
}

/* Every way to reach someone else's file answers 404. */
static void check_invisible(struct itest_server *s, const char *key,
                            const char *user, const char *id)
{
    struct itest_resp r;
    itest_request(s, "GET", "/v1/files", key, user, NULL, NULL, 0, NULL, &r);
    CHECK_STATUS(&r, 200);
    CHECKF(json_array_size(itest_json_get(r.json, "files")) == 0,
           "user %s sees files: %s", user, r.body);
    itest_resp_release(&r);
    char *p = itest_fmt(file_path_fmt, id);
    char *pc = itest_fmt("/v1/files/%s/content", id);
    itest_request(s, "GET", p, key, user, NULL, NULL, 0, NULL, &r);
    CHECK_ERROR(&r, 404, "not_found");
    itest_resp_release(&r);
    itest_request(s, "GET", pc, key, user, NULL, NULL, 0, NULL, &r);
    CHECK_ERROR(&r, 404, "not_found");
    itest_resp_release(&r);
    itest_request(s, "DELETE", p, key, user, NULL, NULL, 0, NULL, &r);
    CHECK_ERROR(&r, 404, "not_found");
    itest_resp_release(&r);
    free(p);
    free(pc);
}

static void isolation(void)
{
    struct itest_server *s = itest_start(NULL);
    REQUIRE(s);
    char *ka = NULL, *kb = NULL;
    CHECK(itest_create_key(s, "tenant-a", false, &ka, NULL));
    CHECK(itest_create_key(s, "tenant-b", false, &kb, NULL));
    REQUIRE(ka && kb);

    struct itest_resp r;
    itest_upload_raw(s, ka, "u1", "secret.txt", "text/plain", "A/u1 secret\n",
                     12, NULL, &r);
    REQUIRE_STATUS(&r, 201);
    char *id = itest_json_dup(r.json, "file_id");
    itest_resp_release(&r);

    check_invisible(s, ka, "u2", id);           /* same tenant, other user */
    check_invisible(s, kb, "u1", id);           /* other tenant, same user */
    check_invisible(s, s->admin_key, "u1", id); /* admin is its own tenant */

    /* B's own upload stays B's. */
    itest_upload_raw(s, kb, "u1", "b.txt", "text/plain", "B\n", 2, NULL, &r);
    CHECK_STATUS(&r, 201);
    itest_resp_release(&r);

    /* The owner still has exactly its file, untouched by those DELETEs. */
    itest_request(s, "GET", "/v1/files", ka, "u1", NULL, NULL, 0, NULL, &r);
    CHECK_STATUS(&r, 200);
    json_t *files = itest_json_get(r.json, "files");
    CHECKF(json_array_size(files) == 1 &&
               !strcmp(itest_json_str(json_array_get(files, 0), "file_id")
                           ? itest_json_str(json_array_get(files, 0), "file_id")
                           : "",
                       id),
           "owner's list: %s", r.body);
    itest_resp_release(&r);
    char *pc = itest_fmt("/v1/files/%s/content", id);
    itest_request(s, "GET", pc, ka, "u1", NULL, NULL, 0, NULL, &r);
    CHECK_STATUS(&r, 200);
    CHECKF(r.len == 12 && !memcmp(r.body, "A/u1 secret\n", 12), "content: %s",
           r.body);
    itest_resp_release(&r);
    free(pc);
    free(id);
    free(ka);
    free(kb);
    itest_stop(s);
}

/* How many times the CLI's stderr so far (tmp_dir/cli.log, appended to
 * by every itest_cli) holds needle. */
static int cli_said_count(struct itest_server *s, const char *needle)
{
    char *path = itest_fmt("%s/cli.log", s->tmp_dir);
    char *log = itest_read_file(path, NULL);
    int n = 0;
    for (const char *p = log ? strstr(log, needle) : NULL; p;
         p = strstr(p + 1, needle))
        n++;
    free(log);
    free(path);
    return n;
}

/* `keys create`, `list`, `revoke` and `rotate-secret` on a data dir (or
 * MongoDB database) without a store exit 2 naming it and create nothing:
 * a key printed there would be one the server answers 401. */
static void keys_refuse_no_store(void)
{
    struct itest_server *s = itest_start(NULL);
    REQUIRE(s);
    char *absent = itest_fmt("%s/nostore", s->tmp_dir);
    char *fresh =
        itest_backend_mongo() ? itest_mongo_fixture_uri(NULL, NULL) : NULL;
    const char *where = absent;
    if (fresh) {
        const char *db = strrchr(fresh, '/');
        where = db ? db + 1 : fresh;
    }
    const char *store_flag = fresh ? "--mongo-uri" : "--data-dir";
    const char *store = fresh ? fresh : absent;
    char *out = NULL;
    struct stat st;
    CHECK_INT(itest_cli(s, &out, "keys", "create", store_flag, store,
                        "--data-dir", absent, "--tenant", "t", NULL),
              2);
    CHECKF(!out || !out[0], "keys create printed: %s", out);
    free(out);
    CHECK(itest_cli_said(s, where));
    out = NULL;
    CHECK_INT(itest_cli(s, &out, "keys", "list", store_flag, store,
                        "--data-dir", absent, NULL),
              2);
    CHECKF(!out || !out[0], "keys list printed: %s", out);
    free(out);
    /* The commands that change a store: refused before any of their own
     * checks (an unknown key id, a tenant without keys), each naming
     * what it looked at. */
    int said = cli_said_count(s, where);
    out = NULL;
    CHECK_INT(itest_cli(s, &out, "keys", "revoke", "X", store_flag, store,
                        "--data-dir", absent, NULL),
              2);
    CHECKF(!out || !out[0], "keys revoke printed: %s", out);
    free(out);
    CHECKF(cli_said_count(s, where) > said, "keys revoke did not name %s",
           where);
    said = cli_said_count(s, where);
    out = NULL;
    CHECK_INT(itest_cli(s, &out, "keys", "rotate-secret", "--tenant", "t",
                        store_flag, store, "--data-dir", absent, NULL),
              2);
    CHECKF(!out || !out[0], "keys rotate-secret printed: %s", out);
    free(out);
    CHECKF(cli_said_count(s, where) > said,
           "keys rotate-secret did not name %s", where);
    CHECK(stat(absent, &st) != 0);
    if (fresh)
        CHECK_INT(itest_mongo_collection_count(fresh), 0);
    /* With the real store: as before. */
    out = NULL;
    CHECK_INT(
        itest_cli(s, &out, "keys", "list", "--data-dir", s->data_dir, NULL), 0);
    free(out);
    free(fresh);
    free(absent);
    itest_stop(s);
}

/* One CLI call that must fail on its arguments: exit 2, stderr naming
 * want, nothing on stdout, and the data dir (absent) not created, since
 * the arguments are checked before anything is opened. */
static void cli_refuses(struct itest_server *s, const char *absent,
                        const char *want, const char *const *argv)
{
    char *out = NULL;
    int said = cli_said_count(s, want);
    const char *a[10] = {0};
    size_t n = 0;
    for (; argv[n] && n < 7; n++)
        a[n] = argv[n];
    a[n++] = "--data-dir";
    a[n++] = absent;
    int code = itest_cli(s, &out, a[0], a[1], a[2], a[3], a[4], a[5], a[6],
                         a[7], a[8], NULL);
    struct stat st;
    CHECKF(code == 2 && cli_said_count(s, want) > said && (!out || !out[0]) &&
               stat(absent, &st) != 0,
           "interpd %s %s %s %s: exit %d (want 2), stdout \"%s\", data dir "
           "%s; want stderr to say: %s",
           a[0], a[1] ? a[1] : "", a[1] && a[2] ? a[2] : "",
           a[1] && a[2] && a[3] ? a[3] : "", code, out ? out : "",
           stat(absent, &st) ? "absent" : "created", want);
    free(out);
}

/* Regression (issue 20 item 8): the CLI's words.  `keys list --json` said
 * `unknown command "list"`; `keys create --policy` with no value said
 * `unexpected "--policy"`; `--tenant 'bad tenant!'` said `--tenant NAME is
 * required`; `serve --listen bogus` was caught after the stores opened and
 * the zygotes started, exited 1 and said "numeric host".  Every option of
 * every command is now checked before anything is opened: a missing
 * value, an unknown option, an extra argument or a bad value exits 2
 * naming it. */
static void cli_words(void)
{
    struct itest_server *s = itest_start(NULL);
    REQUIRE(s);
    char *absent = itest_fmt("%s/nothing-here", s->tmp_dir);
    static const struct {
        const char *argv[6];
        const char *want;
    } cases[] = {
        {{"keys", "list", "--json"},
         "interpd keys list: unknown option \"--json\""},
        {{"keys", "list", "extra"},
         "interpd keys list: unexpected argument \"extra\""},
        {{"keys", "create", "--tenant", "t", "--policy"},
         "interpd keys create: option --policy needs a value"},
        {{"keys", "create", "--policy", "--tenant", "t"},
         "interpd keys create: option --policy needs a value"},
        {{"keys", "create", "--tenant"},
         "interpd keys create: option --tenant needs a value"},
        {{"keys", "create", "--tenant", "bad tenant!"},
         "interpd keys create: invalid tenant \"bad tenant!\": use 1-64 "
         "characters of A-Z a-z 0-9 _ . -"},
        {{"keys", "create", "--tenant=a/b"}, "invalid tenant \"a/b\""},
        {{"keys", "create"}, "interpd keys create: --tenant NAME is required"},
        {{"keys", "create", "--tenant", "t", "--frob"},
         "interpd keys create: unknown option \"--frob\""},
        {{"keys", "create", "--tenant", "t", "--admin=yes"},
         "interpd keys create: option --admin takes no value"},
        {{"keys", "create", "--tenant", "t", "extra"},
         "interpd keys create: unexpected argument \"extra\""},
        {{"keys", "create", "--tenant", "t", "--policy", "nope"},
         "interpd keys create: unknown policy \"nope\""},
        {{"keys", "revoke"}, "interpd keys revoke: KEY_ID is required"},
        {{"keys", "revoke", "--all"},
         "interpd keys revoke: unknown option \"--all\""},
        {{"keys", "revoke", "k1", "k2"},
         "interpd keys revoke: unexpected argument \"k2\""},
        {{"keys", "rotate-secret", "--tenant", "bad tenant!"},
         "interpd keys rotate-secret: invalid tenant \"bad tenant!\""},
        {{"keys", "rotate-secret", "--tenant"},
         "interpd keys rotate-secret: option --tenant needs a value"},
        {{"keys", "frob"}, "interpd keys: unknown command \"frob\""},
        {{"serve", "--listen", "bogus"},
         "interpd serve: listen \"bogus\" is not HOST:PORT"},
        {{"serve", "--listen", "localhost:99999"},
         "interpd serve: listen \"localhost:99999\" is not HOST:PORT"},
        {{"serve", "--listen"}, "interpd serve: option --listen needs a value"},
        {{"serve", "--fetch-allow", "not-a-cidr"},
         "interpd serve: fetch-allow"},
        {{"serve", "--frob", "1"}, "interpd serve: unknown option --frob"},
        {{"serve", "extra"}, "interpd serve: unexpected argument \"extra\""},
        {{"serve", "--log-level", "loud"},
         "interpd serve: log-level \"loud\" is not one of debug, info, "
         "warn, error"},
        {{"status", "--listen", "bogus"},
         "interpd status: listen \"bogus\" is not HOST:PORT"},
        {{"cleanup", "--listen", "bogus"},
         "interpd cleanup: listen \"bogus\" is not HOST:PORT"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(*cases); i++)
        cli_refuses(s, absent, cases[i].want, cases[i].argv);
    /* The listen message names every form the docs allow. */
    CHECK(itest_cli_said(s, "HOST: a numeric IPv4 address, [IPv6], "
                            "localhost, or * or nothing for every address"));
    /* serve refused before its stores and zygotes: nothing started. */
    CHECKF(cli_said_count(s, "zygote") == 0 &&
               cli_said_count(s, "starting") == 0,
           "serve started something before refusing its options");
    free(absent);
    itest_stop(s);
}

/* Issue 20 item 10, a member of the class: the metadata store's own
 * messages (a store that cannot open, a failed statement) were written
 * raw to stderr ("interpd: meta_sqlite: ..."), without time or level, in
 * the middle of the service's log.  `serve` on a data dir whose meta.db
 * cannot be opened: every line it writes has the log's one shape. */
static void serve_store_error_log_shape(void)
{
    struct itest_server *s = itest_start(NULL);
    REQUIRE(s);
    char *dir = itest_fmt("%s/bad-store", s->tmp_dir);
    char *db = itest_fmt("%s/meta.db", dir);
    REQUIRE(mkdir(dir, 0700) == 0 && mkdir(db, 0700) == 0);
    char *out = NULL;
    /* SQLite on either backend's run ("--mongo-uri=": none): the
     * messages checked are the SQLite adapter's. */
    int code = itest_cli(s, &out, "serve", "--data-dir", dir, "--listen",
                         "127.0.0.1:0", "--mongo-uri=", NULL);
    CHECK_INT(code, 1);
    free(out);
    char *path = itest_fmt("%s/cli.log", s->tmp_dir);
    char *log = itest_read_file(path, NULL);
    REQUIRE(log);
    regex_t re;
    REQUIRE(regcomp(&re,
                    "^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z "
                    "(debug|info|warn|error) [^ ]",
                    REG_EXTENDED | REG_NOSUB) == 0);
    int lines = 0;
    for (char *l = log, *e; l && *l; l = e ? e + 1 : NULL) {
        e = strchr(l, '\n');
        if (e)
            *e = '\0';
        lines++;
        CHECKF(regexec(&re, l, 0, NULL, 0) == 0,
               "a log line of another "
               "shape: %s",
               l);
    }
    regfree(&re);
    CHECKF(lines > 3, "serve wrote %d lines", lines);
    CHECK(itest_cli_said(s, " error meta_sqlite: open: "));
    free(log);
    free(path);
    free(db);
    free(dir);
    itest_stop(s);
}

TEST_MAIN(T(admin_key_file), T(restart_keeps_state), T(keys_create),
          T(keys_list), T(keys_revoke), T(unauthorized), T(isolation),
          T(keys_refuse_no_store), T(cli_words), T(serve_store_error_log_shape))
