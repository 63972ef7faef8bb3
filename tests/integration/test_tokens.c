/*
 * test_tokens.c - scoped tokens (issue 23; CONTRACT.md "Scoped tokens"):
 * POST /v1/tokens mints for one user of the key's tenant; a token acts
 * for that user only, within its scopes, never as admin, never mints;
 * it stops at its expiry, when its key is revoked (within the key cache's
 * ttl) and, past the grace, when the tenant's secret is rotated; a
 * browser on an allowed origin uses it through CORS; it is never logged.
 */
#include "sse.h" /* streq */

static struct itest_server *srv;

/* POST /v1/tokens with body as key: the response in *r. */
static long mint_raw(const char *key, const char *body, struct itest_resp *r)
{
    return itest_request(srv, "POST", "/v1/tokens", key, NULL,
                         "application/json", body, strlen(body), NULL, r);
}

/* A token for user with scopes (a JSON array's text) and ttl; new
 * string, or NULL. */
static char *mint(const char *key, const char *user, const char *scopes,
                  const char *ttl)
{
    struct itest_resp r;
    char *body =
        ttl ? itest_fmt("{\"user_id\":\"%s\",\"scopes\":%s,"
                        "\"ttl\":\"%s\"}",
                        user, scopes, ttl)
            : itest_fmt("{\"user_id\":\"%s\",\"scopes\":%s}", user, scopes);
    mint_raw(key, body, &r);
    free(body);
    CHECKF(r.status == 201, "mint: %ld %s", r.status, r.body);
    char *tok = r.status == 201 ? itest_json_dup(r.json, "token") : NULL;
    itest_resp_release(&r);
    return tok;
}

/* A request with a token (no X-User-Id unless user): the status. */
static long with(const char *tok, const char *method, const char *path,
                 const char *user, const char *body, struct itest_resp *out)
{
    struct itest_resp r;
    long st = itest_request(srv, method, path, tok, user,
                            body ? "application/json" : NULL, body,
                            body ? strlen(body) : 0, NULL, &r);
    if (out)
        *out = r;
    else
        itest_resp_release(&r);
    return st;
}

static void test_mint(void)
{
    struct itest_resp r;
    mint_raw(
        srv->admin_key,
        "{\"user_id\":\"alice\",\"scopes\":[\"executions\",\"files:read\"],"
        "\"ttl\":\"10m\"}",
        &r);
    CHECK_STATUS(&r, 201);
    const char *tok = itest_json_str(r.json, "token");
    CHECK(tok && !strncmp(tok, "ipdt_", 5));
    CHECK(streq(itest_json_str(r.json, "user_id"), "alice"));
    json_t *sc = json_object_get(r.json, "scopes");
    CHECK(json_array_size(sc) == 2 &&
          streq(json_string_value(json_array_get(sc, 0)), "files:read") &&
          streq(json_string_value(json_array_get(sc, 1)), "executions"));
    CHECK(itest_json_str(r.json, "expires_at") != NULL);
    CHECK(json_object_size(r.json) == 4);
    char *log = itest_read_log(srv);
    CHECKF(log && tok && !strstr(log, tok + 5), "the token is in the log");
    free(log);
    itest_resp_release(&r);

    static const char *const bad[] = {
        "{\"user_id\":\"alice\"}",
        "{\"user_id\":\"alice\",\"scopes\":[]}",
        "{\"user_id\":\"alice\",\"scopes\":[\"admin\"]}",
        "{\"user_id\":\"alice\",\"scopes\":[\"sessions\",\"sessions\"]}",
        "{\"user_id\":\"a b\",\"scopes\":[\"sessions\"]}",
        "{\"user_id\":\"alice\",\"scopes\":[\"sessions\"],\"ttl\":\"2h\"}",
        "{\"user_id\":\"alice\",\"scopes\":[\"sessions\"],\"ttl\":\"0s\"}",
        "{\"user_id\":\"alice\",\"scopes\":[\"sessions\"],\"ttl\":60}",
        "{\"user_id\":\"alice\",\"scopes\":[\"sessions\"],\"admin\":true}",
        "[]",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        mint_raw(srv->admin_key, bad[i], &r);
        CHECKF(r.status == 400, "%s: %ld", bad[i], r.status);
        itest_resp_release(&r);
    }
    mint_raw(NULL, "{\"user_id\":\"alice\",\"scopes\":[\"sessions\"]}", &r);
    CHECK_ERROR(&r, 401, "unauthorized");
    itest_resp_release(&r);
    /* A token never mints. */
    char *t = mint(srv->admin_key, "alice", "[\"files:read\"]", NULL);
    mint_raw(t, "{\"user_id\":\"alice\",\"scopes\":[\"files:read\"]}", &r);
    CHECK_ERROR(&r, 403, "forbidden");
    itest_resp_release(&r);
    free(t);
}

/* What each scope allows, for the token's own user only. */
/* files:write uploads (as its user), files:read lists and reads; neither
 * does the other's part, and X-User-Id may only repeat the token's user. */
static void test_scope_files(void)
{
    struct itest_resp r;
    char *rd = mint(srv->admin_key, "carol", "[\"files:read\"]", NULL);
    char *wr = mint(srv->admin_key, "carol", "[\"files:write\"]", NULL);
    char *ex = mint(srv->admin_key, "carol", "[\"executions\"]", NULL);

    CHECK(itest_upload_raw(srv, wr, NULL, "a.txt", "text/plain", "hello", 5,
                           NULL, &r) == 201);
    char *fid = itest_json_dup(r.json, "file_id");
    itest_resp_release(&r);
    CHECK(itest_upload_raw(srv, rd, NULL, "b.txt", "text/plain", "x", 1, NULL,
                           &r) == 403);
    CHECK_ERROR(&r, 403, "forbidden");
    itest_resp_release(&r);
    CHECK(with(rd, "GET", "/v1/files", NULL, NULL, &r) == 200);
    CHECK(json_array_size(json_object_get(r.json, "files")) == 1);
    itest_resp_release(&r);
    char *content = itest_fmt("/v1/files/%s/content", fid);
    CHECK(with(rd, "GET", content, NULL, NULL, &r) == 200 &&
          streq(r.body, "hello"));
    itest_resp_release(&r);
    /* The key sees it as carol's; dave's view has nothing. */
    itest_request(srv, "GET", "/v1/files", srv->admin_key, "dave", NULL, NULL,
                  0, NULL, &r);
    CHECK(json_array_size(json_object_get(r.json, "files")) == 0);
    itest_resp_release(&r);
    CHECK(with(rd, "GET", "/v1/files", "carol", NULL, NULL) == 200);
    CHECK(with(rd, "GET", "/v1/files", "dave", NULL, &r) == 403);
    CHECK_ERROR(&r, 403, "forbidden");
    itest_resp_release(&r);
    CHECK(with(ex, "GET", "/v1/files", NULL, NULL, NULL) == 403);
    CHECK(with(wr, "DELETE", content, NULL, NULL, NULL) == 405);
    char *fpath = itest_fmt("/v1/files/%s", fid);
    CHECK(with(rd, "DELETE", fpath, NULL, NULL, NULL) == 403);
    CHECK(with(wr, "DELETE", fpath, NULL, NULL, NULL) == 204);
    free(fpath);
    free(content);
    free(fid);
    free(rd);
    free(wr);
    free(ex);
}

/* executions runs code and lists runs; the other scopes cannot.  Without
 * files:write its generated files come back, not stored. */
static void test_scope_executions(void)
{
    struct itest_resp r;
    char *rd = mint(srv->admin_key, "carol", "[\"files:read\"]", NULL);
    char *ex = mint(srv->admin_key, "carol", "[\"executions\"]", NULL);
    char *se = mint(srv->admin_key, "carol", "[\"sessions\"]", NULL);
    char *exw = mint(srv->admin_key, "carol",
                     "[\"executions\", \"files:write\", \"files:read\"]", NULL);

    const char *code = "{\"code\":\"print(6 * 7)\"}";
    CHECK(with(ex, "POST", "/v1/executions", NULL, code, &r) == 200);
    CHECK(streq(itest_exec_stdout(&r), "42\n"));
    itest_resp_release(&r);
    CHECK(with(rd, "POST", "/v1/executions", NULL, code, NULL) == 403);
    CHECK(with(se, "POST", "/v1/executions", NULL, code, NULL) == 403);
    CHECK(with(ex, "GET", "/v1/executions", NULL, NULL, NULL) == 200);
    const char *writes = "{\"code\":\"open('out.txt', 'w').write('x')\"}";
    CHECK(with(ex, "POST", "/v1/executions", NULL, writes, &r) == 200);
    json_t *gf = json_array_get(json_object_get(r.json, "generated_files"), 0);
    CHECKF(gf && json_is_false(json_object_get(gf, "stored")) &&
               !json_object_get(gf, "file_id"),
           "%s", r.body);
    itest_resp_release(&r);
    CHECK(with(exw, "POST", "/v1/executions", NULL, writes, &r) == 200);
    gf = json_array_get(json_object_get(r.json, "generated_files"), 0);
    CHECKF(gf && json_is_true(json_object_get(gf, "stored")), "%s", r.body);
    itest_resp_release(&r);
    free(rd);
    free(ex);
    free(se);
    free(exw);
}

/* Regression (review F1): executions alone reached sessions, files,
 * packages and callbacks through the execution's body.  Each needs its own
 * scope, or a key. */
static void test_scope_execution_fields(void)
{
    struct itest_resp r;
    char *ex = mint(srv->admin_key, "carol", "[\"executions\"]", NULL);
    char *exf = mint(srv->admin_key, "carol",
                     "[\"executions\", \"files:write\", \"files:read\"]", NULL);

    CHECK(itest_upload_raw(srv, exf, NULL, "in.txt", "text/plain", "in", 2,
                           NULL, &r) == 201);
    char *fid = itest_json_dup(r.json, "file_id");
    itest_resp_release(&r);
    CHECK(with(ex, "POST", "/v1/executions", NULL,
               "{\"code\":\"1\",\"session_id\":"
               "\"sess_aaaaaaaaaaaaaaaaaaaaaaaaaa\"}",
               &r) == 403);
    CHECK_ERROR(&r, 403, "forbidden");
    itest_resp_release(&r);
    char *with_file = itest_fmt("{\"code\":\"1\",\"files\":[\"%s\"]}", fid);
    CHECK(with(ex, "POST", "/v1/executions", NULL, with_file, NULL) == 403);
    CHECK(with(exf, "POST", "/v1/executions", NULL, with_file, NULL) == 200);
    CHECK(with(ex, "POST", "/v1/executions", NULL,
               "{\"code\":\"1\",\"packages\":[\"tabulate\"]}", NULL) == 403);
    CHECK(with(ex, "POST", "/v1/executions", NULL,
               "{\"code\":\"1\",\"callback_url\":"
               "\"https://example.com/cb\"}",
               NULL) == 403);
    free(with_file);
    free(fid);
    free(ex);
    free(exf);
}

/* sessions opens and ends sessions; admin, packages and tokens are for
 * keys only. */
static void test_scope_sessions_and_keys_only(void)
{
    struct itest_resp r;
    char *ex = mint(srv->admin_key, "carol", "[\"executions\"]", NULL);
    char *se = mint(srv->admin_key, "carol", "[\"sessions\"]", NULL);

    CHECK(with(se, "POST", "/v1/sessions", NULL, "{}", &r) == 201);
    char *sid = itest_json_dup(r.json, "session_id");
    itest_resp_release(&r);
    char *spath = itest_fmt("/v1/sessions/%s", sid);
    CHECK(with(ex, "DELETE", spath, NULL, NULL, NULL) == 403);
    CHECK(with(se, "DELETE", spath, NULL, NULL, NULL) == 204);
    CHECK(with(ex, "GET", "/v1/admin/status", NULL, NULL, NULL) == 403);
    CHECK(with(ex, "POST", "/v1/packages", NULL, "{\"packages\":[\"x\"]}",
               NULL) == 403);
    free(spath);
    free(sid);
    free(ex);
    free(se);
}

/* Polls path with tok until it answers want (bounded by ms): the time
 * it took, or -1. */
static double until_status(const char *tok, long want, int ms)
{
    double t0 = itest_now();
    while (itest_now() - t0 < ms / 1000.0) {
        if (with(tok, "GET", "/v1/files", NULL, NULL, NULL) == want)
            return itest_now() - t0;
        itest_sleep_until(itest_now() + 0.05);
    }
    return -1;
}

/* Expiry, a revoked key, a forged token. */
static void test_end_of_a_token(void)
{
    char *t = mint(srv->admin_key, "erin", "[\"files:read\"]", "1s");
    double took = until_status(t, 401, 5000);
    CHECKF(took >= 0, "a 1 s token still works after 5 s");
    free(t);

    char *key = NULL, *key_id = NULL;
    CHECK(itest_create_key(srv, "t-rev", false, &key, &key_id));
    t = mint(key, "erin", "[\"files:read\"]", NULL);
    CHECK(with(t, "GET", "/v1/files", NULL, NULL, NULL) == 200);
    CHECK(itest_cli(srv, NULL, "keys", "revoke", "--data-dir", srv->data_dir,
                    key_id, NULL) == 0);
    /* Within the key cache's ttl (1 s here). */
    took = until_status(t, 401, 5000);
    CHECKF(took >= 0 && took < 3, "revoked key's token: %.2f s", took);
    free(t);
    free(key);
    free(key_id);

    /* The same payload signed by another node's secret, or cut. */
    t = mint(srv->admin_key, "erin", "[\"files:read\"]", NULL);
    size_t n = strlen(t);
    t[n - 1] = t[n - 1] == '0' ? '1' : '0';
    CHECK(with(t, "GET", "/v1/files", NULL, NULL, NULL) == 401);
    t[n - 10] = '\0';
    CHECK(with(t, "GET", "/v1/files", NULL, NULL, NULL) == 401);
    CHECK(with("ipdt_", "GET", "/v1/files", NULL, NULL, NULL) == 401);
    free(t);
}

/* A rotation of the tenant's secret: old tokens work during the grace
 * (this server's: 0 s, so they stop within the cache's ttl), new ones
 * are signed with the new secret. */
static void test_rotation(void)
{
    char *key = NULL, *key_id = NULL;
    CHECK(itest_create_key(srv, "t-rot", false, &key, &key_id));
    char *old = mint(key, "fay", "[\"files:read\"]", NULL);
    CHECK(with(old, "GET", "/v1/files", NULL, NULL, NULL) == 200);
    CHECK(itest_cli(srv, NULL, "keys", "rotate-secret", "--data-dir",
                    srv->data_dir, "--tenant", "t-rot", NULL) == 0);
    char *fresh = mint(key, "fay", "[\"files:read\"]", NULL);
    CHECK(with(fresh, "GET", "/v1/files", NULL, NULL, NULL) == 200);
    double took = until_status(old, 401, 5000);
    CHECKF(took >= 0 && took < 3, "old token after rotation: %.2f s", took);
    CHECK(with(fresh, "GET", "/v1/files", NULL, NULL, NULL) == 200);
    free(old);
    free(fresh);
    free(key);
    free(key_id);
}

/* A page on an allowed origin: the preflight lets Authorization through,
 * and the answer exposes the headers a page reads. */
static void test_cors(void)
{
    char *t = mint(srv->admin_key, "gus", "[\"executions\"]", NULL);
    const char *pre[] = {"Origin: https://page.example",
                         "Access-Control-Request-Method: POST",
                         "Access-Control-Request-Headers: authorization, "
                         "content-type",
                         NULL};
    struct itest_resp r;
    itest_do(srv,
             &(struct itest_req){
                 .method = "OPTIONS", .path = "/v1/executions", .headers = pre},
             &r);
    CHECK(r.status == 204);
    CHECK(streq(itest_header(&r, "Access-Control-Allow-Origin"),
                "https://page.example"));
    const char *ah = itest_header(&r, "Access-Control-Allow-Headers");
    CHECK(ah && itest_list_has(ah, "Authorization") &&
          itest_list_has(ah, "Content-Type"));
    itest_resp_release(&r);
    const char *hdrs[] = {"Origin: https://page.example", NULL};
    const char *code = "{\"code\":\"print(1)\"}";
    itest_do(srv,
             &(struct itest_req){.method = "POST",
                                 .path = "/v1/executions",
                                 .key = t,
                                 .content_type = "application/json",
                                 .body = code,
                                 .body_len = strlen(code),
                                 .headers = hdrs},
             &r);
    CHECK(r.status == 200);
    const char *ex = itest_header(&r, "Access-Control-Expose-Headers");
    CHECK(ex && itest_list_has(ex, "X-Execution-Id") &&
          itest_list_has(ex, "X-Request-Id") &&
          itest_list_has(ex, "Retry-After"));
    CHECK(itest_header(&r, "X-Execution-Id") != NULL);
    itest_resp_release(&r);
    /* Another origin gets no CORS headers. */
    const char *other[] = {"Origin: https://evil.example", NULL};
    itest_do(srv,
             &(struct itest_req){.method = "GET",
                                 .path = "/v1/executions",
                                 .key = t,
                                 .headers = other},
             &r);
    CHECK(itest_header(&r, "Access-Control-Allow-Origin") == NULL);
    itest_resp_release(&r);
    free(t);
}

int main(void)
{
    static const struct test_case cases[] = {
        T(test_mint),
        T(test_scope_files),
        T(test_scope_executions),
        T(test_scope_execution_fields),
        T(test_scope_sessions_and_keys_only),
        T(test_end_of_a_token),
        T(test_rotation),
        T(test_cors),
    };
    const char *const args[] = {"--key-cache-ttl",
                                "1s",
                                "--callback-secret-grace",
                                "0s",
                                "--token-max-ttl",
                                "1h",
                                "--cors-origins",
                                "https://page.example",
                                NULL};
    srv = itest_start(&(struct itest_opts){.args = args});
    if (!srv)
        return 1;
    int rc = test_run(cases, (sizeof(cases) / sizeof(cases[0])));
    int before = test__failed_checks;
    itest_stop(srv);
    return rc || test__failed_checks != before;
}
