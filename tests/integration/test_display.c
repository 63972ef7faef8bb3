/*
 * test_display.c - notebook output (issue 14): display(obj) and a bare
 * last expression come back in the result's "display" list as MIME
 * bundles, cold sync and async alike, within the policy's output limit
 * (texts) and the inline limit (images); what the code writes into the
 * prelude's channel (.interpd/display.jsonl) itself never gets through
 * as anything but checked bundles.
 *
 * One server for the whole program (policy.standard.output-limit 16K,
 * --inline-image-max 65536), started by the first case and stopped by the
 * last.
 */
#include <unistd.h>

#include "harness.h"

#define OUTPUT_LIMIT (16 * 1024)
#define INLINE_MAX 65536

static struct itest_server *srv;

static void start_server(void)
{
    const char *args[] = {"--inline-image-max", "65536", NULL};
    struct itest_opts o = {.args = args,
                           .config = "policy.standard.output-limit = 16K\n"};
    srv = itest_start(&o);
    REQUIRE(srv);
}

static void stop_server(void)
{
    itest_stop(srv);
}

/* POST code (sync); the response's JSON in *out (release it). */
static void run(const char *code, struct itest_resp *out)
{
    json_t *body = json_pack("{s:s}", "code", code);
    itest_exec(srv, srv->admin_key, "u1", body, 90000, out);
    CHECK_STATUS(out, 200);
}

static char *dump(const json_t *j)
{
    return json_dumps(j, JSON_COMPACT | JSON_ENCODE_ANY);
}

/* r's display equals want (JSON text) and display_truncated is trunc. */
static void check_display(const struct itest_resp *r, const char *want,
                          bool trunc)
{
    json_t *w = json_loads(want, 0, NULL);
    json_t *got = itest_json_get(r->json, "display");
    char *g = dump(got);
    REQUIRE(w);
    CHECKF(json_equal(got, w), "display %s, want %s", g, want);
    CHECKF(json_is_boolean(itest_json_get(r->json, "display_truncated")) &&
               json_is_true(itest_json_get(r->json, "display_truncated")) ==
                   trunc,
           "display_truncated: want %d in %s", trunc, r->body);
    free(g);
    json_decref(w);
}

/* Every bundle of display has text/plain and only the allowed MIME keys,
 * every image/png decodes to a PNG; the texts' total bytes. */
static size_t check_bundles(const json_t *display)
{
    size_t i, total = 0;
    json_t *b;
    CHECK(json_is_array(display));
    json_array_foreach(display, i, b)
    {
        const char *key;
        json_t *v;
        CHECK(json_is_string(json_object_get(b, "text/plain")));
        json_object_foreach(b, key, v)
        {
            CHECKF(!strcmp(key, "text/plain") || !strcmp(key, "text/html") ||
                       !strcmp(key, "image/png"),
                   "bundle %zu has key %s", i, key);
            CHECK(json_is_string(v));
            if (!strcmp(key, "image/png")) {
                size_t len = 0;
                unsigned char *png =
                    itest_b64_decode(json_string_value(v), &len);
                CHECKF(png && len > 8 && !memcmp(png, "\x89PNG\r\n\x1a\n", 8),
                       "bundle %zu: image/png is no PNG", i);
                CHECK(len <= INLINE_MAX);
                free(png);
            } else {
                total += json_string_length(v);
            }
        }
    }
    return total;
}

static void last_expression_shown(void)
{
    struct itest_resp r;
    run("1+1", &r);
    check_display(&r, "[{\"text/plain\": \"2\"}]", false);
    CHECK_STR(itest_json_str(r.json, "stdout"), "");
    itest_resp_release(&r);

    run("x = 5\nprint(x)\nx;\n", &r);
    check_display(&r, "[]", false);
    itest_resp_release(&r);

    run("display('a')\nprint('between')\ndisplay({'k': [1]})\nNone\n", &r);
    check_display(&r,
                  "[{\"text/plain\": \"'a'\"}, "
                  "{\"text/plain\": \"{'k': [1]}\"}]",
                  false);
    itest_resp_release(&r);

    /* The traceback of a last expression that raises: the user's lines. */
    run("a = 1\n\n(a /\n 0)\n", &r);
    CHECK_STR(itest_json_str(r.json, "error.type"), "ZeroDivisionError");
    const char *tb = itest_json_str(r.json, "error.traceback");
    CHECKF(tb && strstr(tb, "File \"<code>\", line 3, in <module>"), "%s",
           r.body);
    check_display(&r, "[]", false);
    itest_resp_release(&r);
}

static void dataframe_has_html(void)
{
    struct itest_resp r;
    run("import pandas as pd\n"
        "pd.DataFrame({'city': ['Oslo', 'Lima'], 'pop': [700, 9000]})\n",
        &r);
    json_t *b = json_array_get(itest_json_get(r.json, "display"), 0);
    const char *html = itest_json_str(b, "text/html");
    const char *plain = itest_json_str(b, "text/plain");
    CHECKF(html && strstr(html, "<table") && strstr(html, "<td>Lima</td>"),
           "%s", r.body);
    CHECKF(plain && strstr(plain, "Oslo"), "%s", r.body);
    CHECK_INT(json_array_size(itest_json_get(r.json, "display")), 1);
    check_bundles(itest_json_get(r.json, "display"));
    itest_resp_release(&r);
}

static const char figure_code[] =
    "import matplotlib.pyplot as plt\n"
    "fig, ax = plt.subplots(figsize=(2, 1.5), dpi=40)\n"
    "ax.plot([1, 2, 3], [4, 1, 9])\n"
    "display(fig)\n"
    "big, ax2 = plt.subplots(figsize=(12, 12), dpi=150)\n"
    "ax2.imshow(__import__('numpy').random.default_rng(1).random((300, 300)))\n"
    "display(big)\n"
    "print('ok')\n";

/* A figure via display gives image/png that decodes as a PNG; one over
 * the inline limit keeps its text/plain only; both charts still come
 * back as generated files. */
static void check_figures(const json_t *res, const char *body)
{
    json_t *d = itest_json_get(res, "display");
    CHECKF(json_array_size(d) == 2, "%s", body);
    check_bundles(d);
    json_t *small = json_array_get(d, 0), *big = json_array_get(d, 1);
    const char *plain = itest_json_str(small, "text/plain");
    CHECKF(plain && strstr(plain, "Figure"), "%s", body);
    CHECKF(json_is_string(json_object_get(small, "image/png")), "%s", body);
    CHECKF(json_object_get(big, "image/png") == NULL, "%s", body);
    CHECKF(json_is_string(json_object_get(big, "text/plain")), "%s", body);
    CHECK(json_is_true(itest_json_get(res, "display_truncated")));
    CHECK_INT(json_array_size(itest_json_get(res, "generated_files")), 2);
}

static void figure_has_png(void)
{
    struct itest_resp r;
    run(figure_code, &r);
    check_figures(r.json, r.body);
    itest_resp_release(&r);
}

/* The same result through an asynchronous execution. */
static void async_same_display(void)
{
    struct itest_resp r;
    json_t *body = json_pack("{s:s, s:b}", "code", figure_code, "async", 1);
    itest_exec(srv, srv->admin_key, "u1", body, 90000, &r);
    CHECK_STATUS(&r, 202);
    char *id = itest_json_dup(r.json, "execution_id");
    char *path = itest_fmt("/v1/executions/%s", id);
    itest_resp_release(&r);
    bool done = false;
    /* Bounded poll: the API offers no other way to wait. */
    for (int i = 0; i < 1800 && !done; i++) {
        itest_request(srv, "GET", path, srv->admin_key, "u1", NULL, NULL, 0,
                      NULL, &r);
        const char *st = itest_json_str(r.json, "status");
        done = r.status == 200 && st && !strcmp(st, "done");
        if (!done) {
            itest_resp_release(&r);
            usleep(50 * 1000);
        }
    }
    REQUIRE(done);
    check_figures(itest_json_get(r.json, "result"), r.body);
    itest_resp_release(&r);

    run("display(7)\n'x' * 3\n", &r);
    check_display(&r, "[{\"text/plain\": \"7\"}, {\"text/plain\": \"'xxx'\"}]",
                  false);
    itest_resp_release(&r);
    free(path);
    free(id);
}

/* Texts beyond the output limit are cut: the first bundles whole, then a
 * cut text/plain, then nothing; display_truncated. */
static void beyond_the_cap_is_cut(void)
{
    struct itest_resp r;
    run("for i in range(6):\n"
        "    display(str(i) * 5000)\n"
        "print('done')\n",
        &r);
    json_t *d = itest_json_get(r.json, "display");
    size_t total = check_bundles(d);
    CHECKF(total <= OUTPUT_LIMIT, "%zu bytes of text", total);
    CHECKF(json_array_size(d) == 4, "%zu bundles", json_array_size(d));
    const char *first = itest_json_str(json_array_get(d, 0), "text/plain");
    CHECK(first && strlen(first) == 5002);
    const char *last = itest_json_str(json_array_get(d, 3), "text/plain");
    CHECK(last && strlen(last) < 5002 && last[0] == '\'');
    CHECK(json_is_true(itest_json_get(r.json, "display_truncated")));
    CHECK_STR(itest_json_str(r.json, "stdout"), "done\n");
    itest_resp_release(&r);

    /* A huge repr: cut, the result stays small. */
    run("'é' * 10**6\n", &r);
    d = itest_json_get(r.json, "display");
    total = check_bundles(d);
    CHECKF(total <= OUTPUT_LIMIT && total > OUTPUT_LIMIT - 100, "%zu", total);
    CHECK(json_is_true(itest_json_get(r.json, "display_truncated")));
    /* The answer escapes each 2-byte é as \u00e9: 3 times the bytes. */
    CHECKF(strlen(r.body) < 4 * OUTPUT_LIMIT, "%zu", strlen(r.body));
    itest_resp_release(&r);
}

/* The code writes the channel itself: garbage lines, other MIME keys,
 * non-strings, bad base64, a non-PNG, NULs, deep nesting; only checked
 * bundles come back, and the result is valid JSON (the harness parsed
 * it). */
static void tampering_is_contained(void)
{
    struct itest_resp r;
    run("import base64, os\n"
        "display('real')\n"
        "lines = [\n"
        "  'not json', '[1, 2]', '\"str\"', '{\"text/plain\": 5}',\n"
        "  '{\"text/plain\": \"js\", \"application/javascript\": \"alert(1)\","
        " \"text/html\": 7}',\n"
        "  '{\"text/plain\": \"badpng\", \"image/png\": \"!!!!notbase64\"}',\n"
        "  '{\"text/plain\": \"gif\", \"image/png\": \"%s\"}' % "
        "base64.b64encode(b'GIF89a' + bytes(64)).decode(),\n"
        "  '{\"text/plain\": \"nul\\\\u0000\"}',\n"
        "  '[' * 5000 + ']' * 5000,\n"
        "]\n"
        "with open('.interpd/display.jsonl', 'ab') as f:\n"
        "    for l in lines:\n"
        "        f.write(l.encode('utf-8', 'surrogateescape') + b'\\n')\n"
        "    f.write(b'{\"text/plain\": \"\\xff\"}\\n')\n"
        "display('after')\n",
        &r);
    REQUIRE(r.json);
    json_t *d = itest_json_get(r.json, "display");
    check_bundles(d);
    check_display(&r,
                  "[{\"text/plain\": \"'real'\"}, {\"text/plain\": \"js\"}, "
                  "{\"text/plain\": \"badpng\"}, {\"text/plain\": \"gif\"}, "
                  "{\"text/plain\": \"'after'\"}]",
                  true);
    itest_resp_release(&r);

    /* A channel far over its bound, and many tiny bundles. */
    run("with open('.interpd/display.jsonl', 'w') as f:\n"
        "    f.write('{\"text/plain\": \"\"}\\n' * 600000)\n",
        &r);
    d = itest_json_get(r.json, "display");
    CHECKF(json_array_size(d) <= 1000, "%zu", json_array_size(d));
    CHECK(json_is_true(itest_json_get(r.json, "display_truncated")));
    CHECK(strlen(r.body) < 3 * OUTPUT_LIMIT);
    itest_resp_release(&r);

    /* A symlink or a fifo in its place is not read. */
    run("import os\n"
        "os.symlink('/etc/passwd', '.interpd/display.jsonl')\n",
        &r);
    check_display(&r, "[]", false);
    itest_resp_release(&r);
    run("import os\nos.mkfifo('.interpd/display.jsonl')\n", &r);
    check_display(&r, "[]", false);
    itest_resp_release(&r);
}

TEST_MAIN(T(start_server), T(last_expression_shown), T(dataframe_has_html),
          T(figure_has_png), T(async_same_display), T(beyond_the_cap_is_cut),
          T(tampering_is_contained), T(stop_server))
