/*
 * test_exec_functional.c - what user code sees and gets back through
 * POST /v1/executions: stdout/stderr, exit codes, exceptions with the
 * user's line numbers, load_file on csv/excel/json/text/image (files made
 * by the test or by a first execution, then passed to a second one),
 * matplotlib figures returned as PNG with data_base64, variables, and the
 * request errors (unknown file 404, code over 1 MiB 413, bad JSON 400).
 * test_executions.c has the first cases of each; these go further.
 *
 * One server for the whole program, started by the first case and stopped
 * by the last; each case has its own user id.
 */
#include <unistd.h>

#include "harness.h"

static struct itest_server *srv;

/* POST /v1/executions as user with body (taken). */
static long exec_body(const char *user, json_t *body, struct itest_resp *out)
{
    return itest_exec(srv, srv->admin_key, user, body, 90000, out);
}

static long run_py(const char *user, const char *code, struct itest_resp *out)
{
    return exec_body(user, json_pack("{s:s, s:i}", "code", code, "timeout", 60),
                     out);
}

/* Run code with the given file ids (NULL-terminated). */
static long run_with_files(const char *user, const char *code,
                           const char *const *ids, struct itest_resp *out)
{
    json_t *files = json_array();
    for (size_t i = 0; ids[i]; i++)
        json_array_append_new(files, json_string(ids[i]));
    return exec_body(user,
                     json_pack("{s:s, s:i, s:o}", "code", code, "timeout", 60,
                               "files", files),
                     out);
}

#define out_of(r) itest_exec_stdout(r)
#define err_of(r) itest_exec_stderr(r)

/* The run succeeded and printed exactly want; else say what came back. */
#define CHECK_RAN(r, want)                                                     \
    do {                                                                       \
        CHECK_STATUS((r), 200);                                                \
        CHECKF(json_is_true(itest_json_get((r)->json, "success")),             \
               "not a success: %s", (r)->body);                                \
        CHECKF(!strcmp(out_of(r), (want)),                                     \
               "stdout:\n%s\nwant:\n%s\nstderr:\n%s", out_of(r), (want),       \
               err_of(r));                                                     \
    } while (0)

/* A 3x2 red RGB PNG. */
static const unsigned char tiny_png[] =
    "\x89\x50\x4e\x47\x0d\x0a\x1a\x0a\x00\x00\x00\x0d\x49\x48\x44\x52\x00\x00"
    "\x00\x03\x00\x00\x00\x02\x08\x02\x00\x00\x00\x12\x16\xf1\x4d\x00\x00\x00"
    "\x10\x49\x44\x41\x54\x78\x9c\x63\xf8\xcf\xc0\x00\x41\x0c\x70\x16\x00\x41"
    "\xd2\x05\xfb\x87\xf0\xb9\x48\x00\x00\x00\x00\x49\x45\x4e\x44\xae\x42\x60"
    "\x82";

/* Upload data as user: the new file's id (free()), NULL on failure. */
static char *upload(const char *user, const char *name, const char *type,
                    const void *data, size_t len)
{
    struct itest_resp r;
    char *id = NULL;
    itest_upload_raw(srv, srv->admin_key, user, name, type, data, len, NULL,
                     &r);
    CHECK_STATUS(&r, 201);
    if (r.status == 201)
        id = itest_json_dup(r.json, "file_id");
    itest_resp_release(&r);
    return id;
}

/* ---- cases ---- */

static void start_server(void)
{
    struct itest_opts o = {0};
    srv = itest_start(&o);
    REQUIRE(srv);
}

static void stdout_and_stderr(void)
{
    struct itest_resp r;
    REQUIRE(srv);
    /* Interleaved writes, unbuffered and buffered, text and bytes, UTF-8,
     * a warning (stderr), and output without a final newline. */
    run_py("fn_out",
           "import sys, os, warnings\n"
           "for i in range(3):\n"
           "    print('out', i)\n"
           "    print('err', i, file=sys.stderr)\n"
           "sys.stdout.write('caf\\u00e9 \\u2603\\n')\n"
           "sys.stdout.buffer.write(b'raw bytes\\n')\n"
           "sys.stdout.flush()\n"
           "os.write(1, b'fd write\\n')\n"
           "warnings.warn('careful')\n"
           "print('x' * 5000)\n"
           "print('no newline', end='')\n",
           &r);
    char xs[5001];
    memset(xs, 'x', 5000);
    xs[5000] = '\0';
    char *want = itest_fmt("out 0\nout 1\nout 2\ncaf\xc3\xa9 \xe2\x98\x83\n"
                           "raw bytes\nfd write\n%s\nno newline",
                           xs);
    CHECK_RAN(&r, want);
    free(want);
    const char *err = err_of(&r);
    CHECKF(!strncmp(err, "err 0\nerr 1\nerr 2\n", 18), "stderr: %s", err);
    CHECKF(strstr(err, "UserWarning: careful") != NULL, "stderr: %s", err);
    CHECKF(strstr(err, "<code>:9") != NULL, "warning line in: %s", err);
    CHECK(json_is_false(itest_json_get(r.json, "stdout_truncated")));
    CHECK(json_is_false(itest_json_get(r.json, "stderr_truncated")));
    CHECK(json_is_null(itest_json_get(r.json, "error")));
    json_t *t = itest_json_get(r.json, "execution_time");
    CHECK(json_is_number(t) && json_number_value(t) > 0 &&
          json_number_value(t) < 30);
    itest_resp_release(&r);
}

static void exit_codes(void)
{
    struct itest_resp r;
    REQUIRE(srv);
    run_py("fn_exit",
           "print('before')\nimport sys\nsys.exit(3)\n"
           "print('after')\n",
           &r);
    CHECK_STATUS(&r, 200);
    CHECK_INT(json_integer_value(itest_json_get(r.json, "exit_code")), 3);
    CHECK(json_is_false(itest_json_get(r.json, "success")));
    CHECK(json_is_false(itest_json_get(r.json, "timed_out")));
    CHECK_STR(out_of(&r), "before\n");
    itest_resp_release(&r);

    run_py("fn_exit", "import sys\nsys.exit(0)\n", &r);
    CHECK_STATUS(&r, 200);
    CHECK_INT(json_integer_value(itest_json_get(r.json, "exit_code")), 0);
    CHECK(json_is_true(itest_json_get(r.json, "success")));
    CHECK(json_is_null(itest_json_get(r.json, "error")));
    itest_resp_release(&r);

    /* A string code: printed to stderr, exit status 1, as in Python. */
    run_py("fn_exit", "import sys\nsys.exit('bye now')\n", &r);
    CHECK_STATUS(&r, 200);
    CHECK_INT(json_integer_value(itest_json_get(r.json, "exit_code")), 1);
    CHECK(json_is_false(itest_json_get(r.json, "success")));
    CHECKF(strstr(err_of(&r), "bye now") != NULL, "stderr: %s", err_of(&r));
    itest_resp_release(&r);

    /* os._exit skips everything. */
    run_py("fn_exit", "import os\nprint('x', flush=True)\nos._exit(7)\n", &r);
    CHECK_STATUS(&r, 200);
    CHECK_INT(json_integer_value(itest_json_get(r.json, "exit_code")), 7);
    CHECK(json_is_false(itest_json_get(r.json, "success")));
    CHECK_STR(out_of(&r), "x\n");
    itest_resp_release(&r);
}

static void exception_line_numbers(void)
{
    struct itest_resp r;
    REQUIRE(srv);
    run_py("fn_exc",
           "import json\n"                          /* 1 */
           "\n"                                     /* 2 */
           "def parse(s):\n"                        /* 3 */
           "    return json.loads(s)['key']\n"      /* 4 */
           "\n"                                     /* 5 */
           "def outer(items):\n"                    /* 6 */
           "    return [parse(x) for x in items]\n" /* 7 */
           "\n"                                     /* 8 */
           "print('start')\n"                       /* 9 */
           "outer(['{\"key\": 1}', '{}'])\n",       /* 10 */
           &r);
    CHECK_STATUS(&r, 200);
    CHECK(json_is_false(itest_json_get(r.json, "success")));
    CHECK_INT(json_integer_value(itest_json_get(r.json, "exit_code")), 1);
    CHECK_STR(out_of(&r), "start\n");
    CHECK_STR(itest_json_str(r.json, "error.type"), "KeyError");
    CHECK_STR(itest_json_str(r.json, "error.message"), "'key'");
    const char *tb = itest_json_str(r.json, "error.traceback");
    tb = tb ? tb : "";
    const char *l10 = strstr(tb, "File \"<code>\", line 10, in <module>");
    const char *l7 = strstr(tb, "File \"<code>\", line 7, in ");
    const char *l4 = strstr(tb, "File \"<code>\", line 4, in parse");
    CHECKF(l10 && l7 && l4 && l10 < l7 && l7 < l4,
           "want frames at lines 10, 7, 4 in order: %s", tb);
    CHECKF(strstr(tb, "return json.loads(s)['key']") != NULL,
           "source line not shown: %s", tb);
    CHECKF(!strstr(tb, "prelude"), "prelude frames in: %s", tb);
    CHECKF(strstr(err_of(&r), "KeyError") != NULL, "stderr: %s", err_of(&r));
    itest_resp_release(&r);

    /* A custom exception raised deep in a call chain. */
    run_py("fn_exc",
           "class Boom(Exception):\n"
           "    pass\n"
           "def a(n):\n"
           "    if n == 0:\n"
           "        raise Boom('at the bottom')\n"
           "    a(n - 1)\n"
           "a(3)\n",
           &r);
    CHECK_STATUS(&r, 200);
    CHECK_STR(itest_json_str(r.json, "error.type"), "Boom");
    CHECK_STR(itest_json_str(r.json, "error.message"), "at the bottom");
    tb = itest_json_str(r.json, "error.traceback");
    tb = tb ? tb : "";
    CHECKF(strstr(tb, "line 7, in <module>") && strstr(tb, "line 6, in a") &&
               strstr(tb, "line 5, in a"),
           "traceback: %s", tb);
    itest_resp_release(&r);

    /* A syntax error: nothing runs, the line is the user's. */
    run_py("fn_exc", "print('never')\nx = 1\ny = (2 +\nz = 3\n", &r);
    CHECK_STATUS(&r, 200);
    CHECK(json_is_false(itest_json_get(r.json, "success")));
    CHECK_STR(itest_json_str(r.json, "error.type"), "SyntaxError");
    CHECK_STR(out_of(&r), "");
    tb = itest_json_str(r.json, "error.traceback");
    CHECKF(tb && strstr(tb, "line 3"), "traceback: %s", tb ? tb : "(none)");
    itest_resp_release(&r);
}

static void load_csv_json_text(void)
{
    struct itest_resp r;
    REQUIRE(srv);
    const char csv[] = "region,units,price\nnorth,3,1.5\nsouth,5,2.0\n"
                       "east,7,2.5\nwest,1,9.0\n";
    const char records[] = "[{\"a\": 1, \"b\": \"x\"},"
                           " {\"a\": 2, \"b\": \"y\"},"
                           " {\"a\": 3, \"b\": \"z\"}]";
    const char config[] = "{\"name\": \"cfg\", \"nested\": {\"k\": [1, 2, 3]}}";
    const char text[] = "line one\nline two\n\xc3\xa9t\xc3\xa9\n";
    char *ids[5] = {0};
    ids[0] = upload("fn_load", "sales.csv", "text/csv", csv, sizeof(csv) - 1);
    /* application/json would be a URL import: the bytes go as octet-stream. */
    ids[1] = upload("fn_load", "records.json", "application/octet-stream",
                    records, sizeof(records) - 1);
    ids[2] = upload("fn_load", "config.json", "application/octet-stream",
                    config, sizeof(config) - 1);
    ids[3] =
        upload("fn_load", "notes.txt", "text/plain", text, sizeof(text) - 1);
    REQUIRE(ids[0] && ids[1] && ids[2] && ids[3]);
    char *code = itest_fmt(
        "import pandas as pd\n"
        "df = load_file('sales.csv')\n"
        "print(type(df).__name__, df.shape, list(df.columns))\n"
        "print(int(df['units'].sum()), float((df.units * df.price).sum()))\n"
        "same = load_file('%s')\n"
        "print('by id', same.equals(df))\n"
        "rec = load_file('records.json')\n"
        "print(type(rec).__name__, rec.shape, list(rec['b']))\n"
        "cfg = load_file('config.json')\n"
        "print(type(cfg).__name__, cfg['nested']['k'])\n"
        "t = load_file('notes.txt')\n"
        "print(type(t).__name__, t.splitlines())\n"
        "print(sorted(k for k in FILES if not k.startswith('file_')))\n",
        ids[0]);
    run_with_files("fn_load", code, (const char *const *)ids, &r);
    free(code);
    CHECK_RAN(&r, "DataFrame (4, 3) ['region', 'units', 'price']\n"
                  "16 41.0\n"
                  "by id True\n"
                  "DataFrame (3, 2) ['x', 'y', 'z']\n"
                  "dict [1, 2, 3]\n"
                  "str ['line one', 'line two', '\xc3\xa9t\xc3\xa9']\n"
                  "['config.json', 'notes.txt', 'records.json', "
                  "'sales.csv']\n");
    itest_resp_release(&r);
    for (int i = 0; i < 4; i++)
        free(ids[i]);
}

/* A first execution writes an .xlsx with openpyxl (a generated file of the
 * user), a second one gets it by id and reads it with load_file. */
static void load_excel_end_to_end(void)
{
    struct itest_resp r;
    REQUIRE(srv);
    run_py("fn_xlsx",
           "import openpyxl\n"
           "wb = openpyxl.Workbook()\n"
           "ws = wb.active\n"
           "ws.title = 'data'\n"
           "ws.append(['city', 'pop'])\n"
           "for c, p in [('Oslo', 700), ('Bergen', 290), ('Tromso', 77)]:\n"
           "    ws.append([c, p])\n"
           "wb.save('cities.xlsx')\n"
           "print('saved')\n",
           &r);
    CHECK_RAN(&r, "saved\n");
    json_t *gen = itest_json_get(r.json, "generated_files");
    REQUIRE(json_array_size(gen) == 1);
    json_t *f = json_array_get(gen, 0);
    CHECK_STR(itest_json_str(f, "filename"), "cities.xlsx");
    CHECK_STR(itest_json_str(f, "source"), "generated");
    CHECKF(json_integer_value(itest_json_get(f, "size")) > 1000, "%s", r.body);
    char *id = itest_json_dup(f, "file_id");
    itest_resp_release(&r);

    const char *ids[] = {id, NULL};
    run_with_files("fn_xlsx",
                   "df = load_file('cities.xlsx')\n"
                   "print(type(df).__name__, df.shape)\n"
                   "print(df.to_dict('list'))\n"
                   "print(int(df['pop'].sum()))\n",
                   ids, &r);
    CHECK_RAN(&r, "DataFrame (3, 2)\n"
                  "{'city': ['Oslo', 'Bergen', 'Tromso'], "
                  "'pop': [700, 290, 77]}\n"
                  "1067\n");
    itest_resp_release(&r);

    /* Another user can't use it. */
    run_with_files("fn_xlsx_other", "print(1)", ids, &r);
    CHECK_ERROR(&r, 404, "not_found");
    itest_resp_release(&r);
    free(id);
}

static void load_image(void)
{
    struct itest_resp r;
    REQUIRE(srv);
    /* A PNG made here... */
    char *png_id = upload("fn_img", "red.png", "image/png", tiny_png,
                          sizeof(tiny_png) - 1);
    REQUIRE(png_id);
    const char *ids[] = {png_id, NULL};
    run_with_files("fn_img",
                   "im = load_file('red.png')\n"
                   "print(type(im).__module__.split('.')[0], im.size, im.mode,"
                   " im.getpixel((0, 0)))\n",
                   ids, &r);
    CHECK_RAN(&r, "PIL (3, 2) RGB (255, 0, 0)\n");
    itest_resp_release(&r);

    /* ... and a JPEG made by a first execution with PIL. */
    run_py("fn_img",
           "from PIL import Image\n"
           "Image.new('RGB', (40, 30), (0, 0, 255)).save('blue.jpg')\n",
           &r);
    CHECK_RAN(&r, "");
    json_t *gen = itest_json_get(r.json, "generated_files");
    REQUIRE(json_array_size(gen) == 1);
    char *jpg_id = itest_json_dup(json_array_get(gen, 0), "file_id");
    CHECK_STR(itest_json_str(json_array_get(gen, 0), "file_type"), "image");
    itest_resp_release(&r);
    const char *ids2[] = {jpg_id, png_id, NULL};
    run_with_files("fn_img",
                   "a = load_file('blue.jpg'); b = load_file('red.png')\n"
                   "print(a.format, a.size, b.format, b.size)\n",
                   ids2, &r);
    CHECK_RAN(&r, "JPEG (40, 30) PNG (3, 2)\n");
    itest_resp_release(&r);
    free(jpg_id);
    free(png_id);
}

/* A matplotlib figure left open comes back as a PNG generated file, with
 * its bytes inline; one saved explicitly too. */
static void matplotlib_png(void)
{
    struct itest_resp r, dl;
    REQUIRE(srv);
    run_py("fn_plot",
           "import matplotlib.pyplot as plt\n"
           "fig, ax = plt.subplots(figsize=(4, 3), dpi=50)\n"
           "ax.plot([1, 2, 3], [4, 1, 9])\n"
           "ax.set_title('sales')\n"
           "print('plotted')\n",
           &r);
    CHECK_RAN(&r, "plotted\n");
    json_t *gen = itest_json_get(r.json, "generated_files");
    REQUIRE(json_array_size(gen) == 1);
    json_t *f = json_array_get(gen, 0);
    const char *name = itest_json_str(f, "filename");
    CHECKF(name && !strncmp(name, "figure_", 7) && strlen(name) > 4 &&
               !strcmp(name + strlen(name) - 4, ".png"),
           "figure name %s", name ? name : "(none)");
    CHECK_STR(itest_json_str(f, "mime_type"), "image/png");
    CHECK_STR(itest_json_str(f, "source"), "generated");
    const char *b64 = itest_json_str(f, "data_base64");
    REQUIRE(b64);
    size_t len = 0;
    unsigned char *png = itest_b64_decode(b64, &len);
    REQUIRE(png);
    CHECK(len > 33 && !memcmp(png, "\x89PNG\r\n\x1a\n", 8) &&
          !memcmp(png + 12, "IHDR", 4));
    if (len > 24) {
        uint32_t w = (uint32_t)png[16] << 24 | (uint32_t)png[17] << 16 |
                     (uint32_t)png[18] << 8 | png[19];
        uint32_t h = (uint32_t)png[20] << 24 | (uint32_t)png[21] << 16 |
                     (uint32_t)png[22] << 8 | png[23];
        /* Saved with a tight bounding box (issue 12): the drawn area of a
         * 4x3 in figure at 50 dpi, about 200x150, never the default
         * 640x480. */
        CHECKF(w >= 150 && w <= 260 && h >= 110 && h <= 200,
               "figure %ux%u, want about 200x150", w, h);
    }
    CHECK_INT(json_integer_value(itest_json_get(f, "size")), len);
    char sha[65];
    itest_sha256_hex(png, len, sha);
    CHECK_STR(itest_json_str(f, "sha256"), sha);
    /* The stored file is the same PNG. */
    char *path =
        itest_fmt("/v1/files/%s/content", itest_json_str(f, "file_id"));
    itest_request(srv, "GET", path, srv->admin_key, "fn_plot", NULL, NULL, 0,
                  NULL, &dl);
    free(path);
    CHECK_STATUS(&dl, 200);
    CHECK(dl.len == len && !memcmp(dl.body, png, len));
    itest_resp_release(&dl);
    free(png);
    itest_resp_release(&r);

    /* savefig + an open figure: two PNGs; the saved one keeps its name. */
    run_py("fn_plot",
           "import matplotlib\n"
           "import matplotlib.pyplot as plt\n"
           "plt.bar(['a', 'b'], [3, 5])\n"
           "plt.savefig('bars.png')\n"
           "plt.close()\n"
           "plt.figure(); plt.plot([0, 1])\n"
           "print(matplotlib.get_backend().lower())\n",
           &r);
    CHECK_RAN(&r, "agg\n");
    gen = itest_json_get(r.json, "generated_files");
    CHECKF(json_array_size(gen) == 2, "%s", r.body);
    size_t i, pngs = 0;
    json_array_foreach(gen, i, f)
    {
        const char *d = itest_json_str(f, "data_base64");
        unsigned char *bytes = d ? itest_b64_decode(d, &len) : NULL;
        if (bytes && len > 8 && !memcmp(bytes, "\x89PNG\r\n\x1a\n", 8))
            pngs++;
        free(bytes);
    }
    CHECK_INT(pngs, 2);
    CHECKF(strstr(r.body, "\"filename\":\"bars.png\"") != NULL, "%s", r.body);
    itest_resp_release(&r);
}

static void variables_defined(void)
{
    struct itest_resp r;
    REQUIRE(srv);
    exec_body("fn_vars",
              json_pack("{s:s, s:{s:i}}", "code", "print(x + 1)", "variables",
                        "x", 41),
              &r);
    CHECK_RAN(&r, "42\n");
    itest_resp_release(&r);
    exec_body("fn_vars",
              json_pack("{s:s, s:{s:s, s:[i, f, n, b], s:{s:s}}}", "code",
                        "print(repr(name), items, d['k'])", "variables", "name",
                        "caf\xc3\xa9", "items", 1, 2.5, 1, "d", "k", "v"),
              &r);
    CHECK_RAN(&r, "'caf\xc3\xa9' [1, 2.5, None, True] v\n");
    itest_resp_release(&r);
}

static void request_errors(void)
{
    struct itest_resp r;
    REQUIRE(srv);
    /* A well-formed id that never existed, next to a real one: 404 and
     * nothing ran (no generated file appears). */
    char *real = upload("fn_err", "a.txt", "text/plain", "a", 1);
    REQUIRE(real);
    const char *ids[] = {real, "file_zzzzzzzzzzzzzzzzzzzzzzzzzz", NULL};
    run_with_files("fn_err", "open('ran.txt', 'w').write('1')", ids, &r);
    CHECK_ERROR(&r, 404, "not_found");
    itest_resp_release(&r);
    itest_request(srv, "GET", "/v1/files", srv->admin_key, "fn_err", NULL, NULL,
                  0, NULL, &r);
    CHECK_STATUS(&r, 200);
    CHECK_INT(json_array_size(itest_json_get(r.json, "files")), 1);
    itest_resp_release(&r);
    free(real);

    /* Code of exactly 1 MiB runs; one byte more is 413. */
    size_t n = 1024 * 1024;
    char *big = malloc(n + 2);
    memset(big, '#', n + 1);
    memcpy(big, "print('big')\n", 13);
    big[n] = '\0';
    run_py("fn_err", big, &r);
    CHECK_RAN(&r, "big\n");
    itest_resp_release(&r);
    big[n] = '#';
    big[n + 1] = '\0';
    run_py("fn_err", big, &r);
    CHECK_ERROR(&r, 413, "payload_too_large");
    itest_resp_release(&r);
    free(big);

    /* Invalid JSON bodies: 400 invalid_json. */
    const char *bad[] = {"{\"code\": \"print(1)\"",
                         "{\"code\": \"print(1)\"} x", "",
                         "{'code': 'print(1)'}"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(*bad); i++) {
        struct itest_req rq = {.method = "POST",
                               .path = "/v1/executions",
                               .key = srv->admin_key,
                               .user_id = "fn_err",
                               .content_type = "application/json",
                               .body = bad[i],
                               .body_len = strlen(bad[i])};
        itest_do(srv, &rq, &r);
        CHECK_ERROR(&r, 400, "invalid_json");
        itest_resp_release(&r);
    }
}

static void stop_server(void)
{
    REQUIRE(srv);
    itest_stop(srv);
    srv = NULL;
}

TEST_MAIN(T(start_server), T(stdout_and_stderr), T(exit_codes),
          T(exception_line_numbers), T(load_csv_json_text),
          T(load_excel_end_to_end), T(load_image), T(matplotlib_png),
          T(variables_defined), T(request_errors), T(stop_server))
