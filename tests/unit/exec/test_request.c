/*
 * test_request.c - service/exec/request.c: a JSON document and a
 * principal into a job, or a refusal with the contract's code and the
 * message clients and docs quote; the bounds at their edges.
 */
#include <stdlib.h>
#include <string.h>

#include "service/config.h"
#include "service/exec/request.h"
#include "test.h"

static struct ipd_config cfg;
static struct ipd_exec_request_env env;
static const struct ipd_principal who = {.tenant = "acme",
                                         .user_id = "u1",
                                         .key_id = "key_x",
                                         .policy = "standard",
                                         .admin = true,
                                         .scopes = IPD_SCOPE_ALL};

static void setup(void)
{
    if (env.policies)
        return;
    ipd_config_init(&cfg);
    env.policies = cfg.policies;
    env.n_policies = cfg.n_policies;
    env.fetch = NULL;
}

/* Parse text (a JSON document) for p: the job (new) or NULL with *f. */
static struct ipd_exec_job *parse_as(const struct ipd_principal *p,
                                     const char *text, bool *async,
                                     struct ipd_refusal *f)
{
    json_error_t jerr;
    json_t *doc = json_loads(text, JSON_DECODE_ANY | JSON_ALLOW_NUL, &jerr);
    struct ipd_exec_job *j = NULL;
    bool a = false;
    setup();
    if (!doc)
        abort(); /* the test's own documents are JSON */
    enum ipd_err rc = ipd_exec_request_parse(&env, p, doc, &j, &a, f);
    CHECK_INT(rc, j ? IPD_OK : IPD_ERR_INVALID);
    if (async)
        *async = a;
    json_decref(doc);
    return j;
}

static struct ipd_exec_job *parse(const char *text, bool *async,
                                  struct ipd_refusal *f)
{
    return parse_as(&who, text, async, f);
}

/* text is refused with code and exactly message. */
static void refused(const char *text, const char *code, const char *message)
{
    struct ipd_refusal f;
    struct ipd_exec_job *j = parse(text, NULL, &f);
    CHECKF(!j, "accepted: %.200s", text);
    ipd_exec_job_free(j);
    if (j)
        return;
    CHECK_STR(f.code, code);
    CHECK_STR(f.message, message);
}

static void accepted(const char *text)
{
    struct ipd_refusal f = {0};
    struct ipd_exec_job *j = parse(text, NULL, &f);
    CHECKF(j != NULL, "refused %.200s: %s %s", text, f.code ? f.code : "",
           f.message);
    ipd_exec_job_free(j);
}

static void good_document(void)
{
    struct ipd_refusal f;
    bool async = true;
    struct ipd_exec_job *j =
        parse("{\"code\":\"print(1)\",\"files\":[\"file_"
              "abcdefghijklmnopqrstuvwxyz\"],"
              "\"timeout\":2.5,\"variables\":{\"x\":1},\"store_outputs\":false,"
              "\"packages\":[\"six\"],\"policy\":\"strict\",\"async\":false}",
              &async, &f);
    REQUIRE(j);
    CHECK(!async);
    CHECK_STR(j->tenant, "acme");
    CHECK_STR(j->user_id, "u1");
    CHECK(j->admin);
    CHECK_STR(j->policy, "strict");
    CHECK_INT(j->code_len, 8);
    CHECK_STR(j->code, "print(1)");
    CHECK_INT(j->n_files, 1);
    CHECK_STR(j->file_ids[0], "file_abcdefghijklmnopqrstuvwxyz");
    CHECK_INT(j->timeout_ms, 2500);
    CHECK_INT(json_integer_value(json_object_get(j->variables, "x")), 1);
    CHECK(!j->store_outputs);
    CHECK_INT(j->n_packages, 1);
    CHECK_STR(j->packages[0], "six");
    CHECK_STR(j->session_id, "");
    CHECK(j->callback_url == NULL);
    /* The shares are those of the principal's policy, not the one the
     * request names. */
    const struct ipd_exec_policy *st = ipd_config_policy(&cfg, "standard");
    CHECK_INT(j->share_running, st->tenant_running);
    CHECK_INT(j->share_queued, st->tenant_queued);
    CHECK_INT(j->share_results, st->tenant_results);
    CHECK_INT(j->share_callbacks, st->tenant_callbacks);
    ipd_exec_job_free(j);

    /* The least: code alone, under the principal's policy; a callback
     * makes it asynchronous, so does "async". */
    j = parse("{\"code\":\"\"}", &async, &f);
    REQUIRE(j);
    CHECK(!async);
    CHECK_STR(j->policy, "standard");
    CHECK(j->store_outputs);
    CHECK_INT(j->n_files, 0);
    CHECK_INT(j->timeout_ms, 0);
    CHECK(j->variables == NULL);
    ipd_exec_job_free(j);
    j = parse("{\"code\":\"1\",\"callback_url\":\"https://example.com/cb\"}",
              &async, &f);
    REQUIRE(j);
    CHECK(async);
    CHECK_STR(j->callback_url, "https://example.com/cb");
    ipd_exec_job_free(j);
    j = parse("{\"code\":\"1\",\"async\":true,"
              "\"session_id\":\"sess_abcdefghijklmnopqrstuvwxyz\"}",
              &async, &f);
    REQUIRE(j);
    CHECK(async);
    CHECK_STR(j->session_id, "sess_abcdefghijklmnopqrstuvwxyz");
    ipd_exec_job_free(j);
    /* No secret: a principal has none to give (principal.h), and the
     * job has no field for one. */
}

static void refusals(void)
{
    static const char shape[] =
        "the body must be an object with a string \"code\"";
    refused("[]", "invalid_request", shape);
    refused("{}", "invalid_request", shape);
    refused("{\"code\":1}", "invalid_request", shape);
    refused("\"code\"", "invalid_request", shape);
    refused("{\"code\":\"1\",\"files\":{}}", "invalid_request",
            "\"files\" must be an array of at most 100 file ids");
    refused("{\"code\":\"1\",\"timeout\":\"5\"}", "invalid_request",
            "\"timeout\" must be a positive number of seconds");
    refused("{\"code\":\"1\",\"timeout\":-1}", "invalid_request",
            "\"timeout\" must be a positive number of seconds");
    refused("{\"code\":\"1\",\"packages\":\"six\"}", "invalid_request",
            "\"packages\" must be an array of requirement strings");
    refused("{\"code\":\"1\",\"async\":1}", "invalid_request",
            "\"async\" must be true or false");
    refused("{\"code\":\"1\",\"callback_url\":\"ftp://x/\"}", "invalid_request",
            "\"callback_url\" must be an http or https URL of at most 2048 "
            "bytes");
    refused("{\"code\":\"1\",\"callback_url\":5}", "invalid_request",
            "\"callback_url\" must be an http or https URL of at most 2048 "
            "bytes");
    struct ipd_refusal f;
    CHECK(!parse("{\"code\":\"1\",\"callback_url\":\"http://127.0.0.1/\"}",
                 NULL, &f));
    CHECK_STR(f.code, "invalid_request");
    CHECK(!strncmp(f.message, "\"callback_url\" is refused: ", 27));
    CHECK(strstr(f.message, "--fetch-allow") != NULL);
    refused("{\"code\":\"1\",\"session_id\":\"sess_x\"}", "not_found",
            "no such session");
    refused("{\"code\":\"1\",\"session_id\":7}", "not_found",
            "no such session");
    refused(
        "{\"code\":\"1\",\"session_id\":\"sess_abcdefghijklmnopqrstuvwxyz\","
        "\"packages\":[\"six\"]}",
        "invalid_request",
        "a session keeps the packages it started with: install them "
        "(POST /v1/packages) and create a new session");
    refused("{\"code\":\"1\",\"store_outputs\":\"no\"}", "invalid_request",
            "\"store_outputs\" must be true or false");
    refused("{\"code\":\"1\",\"variables\":[1]}", "invalid_request",
            "\"variables\" must be an object of name: value");
    refused("{\"code\":\"1\",\"policy\":\"nosuch\"}", "invalid_request",
            "\"policy\" must name a configured policy (strict, standard, "
            "networked, or one the operator defined)");
    refused("{\"code\":\"1\",\"policy\":3}", "invalid_request",
            "\"policy\" must name a configured policy (strict, standard, "
            "networked, or one the operator defined)");
    refused("{\"code\":\"1\",\"policy\":\"networked\"}", "forbidden",
            "policy networked is less strict than this key's policy "
            "standard; a request can only tighten it");
    refused("{\"code\":\"1\",\"files\":[\"file_nope\"]}", "not_found",
            "no such file: file_nope");
    refused("{\"code\":\"1\",\"files\":[1]}", "not_found",
            "no such file: (not a string)");
    /* A policy the operator removed: never another one. */
    struct ipd_principal gone = who;
    snprintf(gone.policy, sizeof(gone.policy), "removed");
    CHECK(!parse_as(&gone, "{\"code\":\"1\"}", NULL, &f));
    CHECK_STR(f.code, "forbidden");
    CHECK_STR(f.message, "this key's policy removed is not configured on "
                         "the server; ask an administrator");
}

/* {"code":"<n bytes>"<rest>} (new: free). */
static char *with_code(size_t n, const char *rest)
{
    struct ipd_buf b;
    ipd_buf_init(&b, IPD_BUF_UNLIMITED);
    ipd_buf_adds(&b, "{\"code\":\"");
    for (size_t i = 0; i < n; i++)
        ipd_buf_adds(&b, "x");
    ipd_buf_addf(&b, "\"%s}", rest);
    return ipd_buf_detach(&b, NULL);
}

/* ,"files":[n valid ids] (new: free). */
static char *files_of(size_t n)
{
    struct ipd_buf b;
    ipd_buf_init(&b, IPD_BUF_UNLIMITED);
    ipd_buf_adds(&b, ",\"files\":[");
    for (size_t i = 0; i < n; i++)
        ipd_buf_addf(&b, "%s\"file_abcdefghijklmnopqrstuvwx%c%c\"",
                     i ? "," : "", "abcdefghijklmnopqrstuvwxyz234567"[i / 32],
                     "abcdefghijklmnopqrstuvwxyz234567"[i % 32]);
    ipd_buf_adds(&b, "]");
    return ipd_buf_detach(&b, NULL);
}

/* {"code":"1","callback_url":"<url>"} (new: free). */
static char *with_url(const char *url)
{
    struct ipd_buf b;
    ipd_buf_init(&b, IPD_BUF_UNLIMITED);
    ipd_buf_addf(&b, "{\"code\":\"1\",\"callback_url\":\"%s\"}", url);
    return ipd_buf_detach(&b, NULL);
}

static void bounds(void)
{
    char *t = with_code(IPD_EXEC_CODE_MAX, "");
    accepted(t);
    free(t);
    t = with_code(IPD_EXEC_CODE_MAX + 1, "");
    refused(t, "payload_too_large",
            "code is 1048577 bytes; at most 1048576 are allowed");
    free(t);

    char *fs = files_of(IPD_EXEC_FILES_MAX);
    t = with_code(1, fs);
    accepted(t);
    free(t);
    free(fs);
    fs = files_of(IPD_EXEC_FILES_MAX + 1);
    t = with_code(1, fs);
    refused(t, "invalid_request",
            "\"files\" must be an array of at most 100 file ids");
    free(t);
    free(fs);

    accepted("{\"code\":\"1\",\"timeout\":86400}");
    accepted("{\"code\":\"1\",\"timeout\":0.001}");
    refused("{\"code\":\"1\",\"timeout\":86400.5}", "invalid_request",
            "\"timeout\" must be a positive number of seconds");
    refused("{\"code\":\"1\",\"timeout\":0}", "invalid_request",
            "\"timeout\" must be a positive number of seconds");

    /* callback_url: 2048 bytes, not one more. */
    char url[IPD_EXEC_CALLBACK_URL_MAX + 2];
    memcpy(url, "https://example.com/", 20);
    memset(url + 20, 'a', sizeof(url) - 21);
    url[IPD_EXEC_CALLBACK_URL_MAX] = '\0';
    char *doc = with_code(1, "");
    free(doc);
    doc = with_url(url);
    accepted(doc);
    free(doc);
    url[IPD_EXEC_CALLBACK_URL_MAX] = 'a';
    url[IPD_EXEC_CALLBACK_URL_MAX + 1] = '\0';
    doc = with_url(url);
    refused(doc, "invalid_request",
            "\"callback_url\" must be an http or https URL of at most 2048 "
            "bytes");
    /* A NUL inside (a transport that lets one through): not the URL it
     * would be read as. */
    refused("{\"code\":\"1\",\"callback_url\":\"https://a.example/\\u0000x\"}",
            "invalid_request",
            "\"callback_url\" must be an http or https URL of at most 2048 "
            "bytes");
    free(doc);
}

TEST_MAIN(T(good_document), T(refusals), T(bounds))
