/*
 * test_installed.c - the interpd users deploy: `cmake --install` of this
 * build tree into a fresh prefix, then that installed binary, started with
 * no --prelude-dir and no package-list options, is the server under test
 * (docs/DEPLOYMENT.md, "Install on a host").
 *
 * What is checked:
 *  - every file the program reads from its share dir is installed
 *    (prelude.py, prelude_lib.py, zygote.py, venv_check.py, the three
 *    package lists), and
 *    the installed binary uses those (its `config` lines name
 *    PREFIX/share/interpd, not the source tree);
 *  - it serves warm (/readyz execution_mode "warm"), a session keeps a
 *    variable across two calls, and a matplotlib chart comes back as a PNG;
 *  - with zygote.py taken out of the prefix, a session's first call is
 *    503 and the next 410, and both say why: the interpreter's own words
 *    ("can't open file ... zygote.py") and its exit status.
 *
 * ctest gives ITEST_CMAKE (the cmake that configured the build) and
 * ITEST_BUILD_DIR; the prefix is a temp dir removed when the test passes.
 */
#include <sys/stat.h>
#include <unistd.h>

#include "harness.h"

#define CALL_MS 120000
#define WARM_MS 120000

static char *prefix; /* the install prefix (owned) */

static bool is_file(const char *dir, const char *name)
{
    char *p = itest_fmt("%s/%s", dir, name);
    struct stat st;
    bool ok = !stat(p, &st) && S_ISREG(st.st_mode);
    free(p);
    return ok;
}

/* cmake --install ITEST_BUILD_DIR --prefix <new temp dir>. */
static void install_prefix(void)
{
    const char *cmake = getenv("ITEST_CMAKE");
    const char *build = getenv("ITEST_BUILD_DIR");
    char tmpl[] = "/tmp/interpd-installed-XXXXXX";

    REQUIRE(cmake && build);
    REQUIRE(mkdtemp(tmpl));
    REQUIRE(chmod(tmpl, 0755) == 0); /* the sandbox's uids read share/ */
    prefix = strdup(tmpl);
    const char *argv[] = {cmake, "--install", build, "--prefix", prefix, NULL};
    /* A DESTDIR in the environment would put the tree elsewhere. */
    static const char *const unset[] = {"DESTDIR", NULL};
    CHECK_INT(itest_run(argv, unset, 120000), 0);
    char *bin = itest_fmt("%s/bin/interpd", prefix);
    CHECK(access(bin, X_OK) == 0);
    setenv("INTERPD_BIN", bin, 1);
    free(bin);
    char *share = itest_fmt("%s/share/interpd", prefix);
    static const char *const files[] = {
        "prelude.py",    "prelude_lib.py",   "zygote.py",       "venv_check.py",
        "allowlist.txt", "allowed-deps.txt", "import-names.txt"};
    for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++)
        CHECKF(is_file(share, files[i]), "%s/%s is not installed", share,
               files[i]);
    free(share);
}

/* The server's log says it took opt from PREFIX/share/interpd[/file]. */
static void check_config_line(struct itest_server *s, const char *opt,
                              const char *file)
{
    char *log = itest_read_log(s);
    char *want = itest_fmt("config %s = %s/share/interpd%s%s (default)\n", opt,
                           prefix, file ? "/" : "", file ? file : "");
    const char *said = log ? strstr(log, "config prelude-dir") : NULL;
    CHECKF(log && strstr(log, want),
           "no line \"%.*s\" in the log; it says: %.*s", (int)strlen(want) - 1,
           want, said ? (int)strcspn(said, "\n") : 9,
           said ? said : "(nothing)");
    free(want);
    free(log);
}

static long call(struct itest_server *s, const char *user, const char *sid,
                 const char *code, struct itest_resp *r)
{
    json_t *body = json_pack("{s:s,s:i}", "code", code, "timeout", 60);
    if (sid)
        json_object_set_new(body, "session_id", json_string(sid));
    return itest_exec(s, s->admin_key, user, body, CALL_MS, r);
}

/* The installed binary serves warm, keeps a session's variable and draws a
 * chart. */
static void installed_serves_warm(void)
{
    static const char *const args[] = {"--exec-mode", "warm", NULL};
    const struct itest_opts o = {.args = args, .no_warm_wait = true};
    struct itest_resp r;
    REQUIRE(prefix);
    struct itest_server *s = itest_start(&o);
    REQUIRE(s);
    check_config_line(s, "prelude-dir", NULL);
    check_config_line(s, "allowlist", "allowlist.txt");
    check_config_line(s, "allowed-deps", "allowed-deps.txt");
    check_config_line(s, "import-names", "import-names.txt");

    bool warm = itest_wait_exec_mode(s, "warm", WARM_MS);
    itest_request(s, "GET", "/readyz", NULL, NULL, NULL, NULL, 0, NULL, &r);
    CHECKF(warm, "/readyz never said execution_mode warm: %ld %s", r.status,
           r.body);
    itest_resp_release(&r);

    char *sid = itest_session_new(s, s->admin_key, "inst_sess");
    if (sid) {
        call(s, "inst_sess", sid, "x = 41\n", &r);
        CHECK_STATUS(&r, 200);
        CHECKF(json_is_true(itest_json_get(r.json, "success")),
               "first call: %s", r.body);
        itest_resp_release(&r);
        call(s, "inst_sess", sid, "print(x + 1)\n", &r);
        CHECK_STATUS(&r, 200);
        CHECKF(!strcmp(itest_exec_stdout(&r), "42\n"), "second call: %s",
               r.body);
        itest_resp_release(&r);
    }
    free(sid);

    call(s, "inst_chart", NULL,
         "import matplotlib.pyplot as plt\n"
         "fig, ax = plt.subplots(figsize=(3, 2), dpi=50)\n"
         "ax.plot([1, 2, 3], [4, 1, 9])\n"
         "print('plotted')\n",
         &r);
    CHECK_STATUS(&r, 200);
    CHECKF(!strcmp(itest_exec_stdout(&r), "plotted\n"), "chart: %s", r.body);
    json_t *f = json_array_get(itest_json_get(r.json, "generated_files"), 0);
    CHECK_STR(itest_json_str(f, "mime_type"), "image/png");
    size_t n = 0;
    const char *b64 = itest_json_str(f, "data_base64");
    unsigned char *png = b64 ? itest_b64_decode(b64, &n) : NULL;
    CHECKF(png && n > 8 && !memcmp(png, "\x89PNG\r\n\x1a\n", 8),
           "not a PNG (%zu bytes): %s", n, r.body);
    free(png);
    itest_resp_release(&r);
    itest_stop(s);
}

/* Without zygote.py a session cannot start, and its answers say why. */
static void missing_zygote_says_why(void)
{
    struct itest_resp r;
    REQUIRE(prefix);
    char *zy = itest_fmt("%s/share/interpd/zygote.py", prefix);
    CHECK(unlink(zy) == 0);
    free(zy);
    static const char *const args[] = {"--exec-mode", "warm", NULL};
    const struct itest_opts o = {.args = args, .no_warm_wait = true};
    struct itest_server *s = itest_start(&o);
    REQUIRE(s);
    char *sid = itest_session_new(s, s->admin_key, "inst_broken");
    REQUIRE(sid);
    call(s, "inst_broken", sid, "x = 1\n", &r);
    CHECK_STATUS(&r, 503);
    const char *m = itest_json_str(r.json, "error.message");
    CHECKF(m && strstr(m, "could not start") && strstr(m, "zygote.py") &&
               strstr(m, "exit status 2"),
           "503's message: %s", r.body);
    printf("first call: %ld %s\n", r.status, m ? m : r.body);
    itest_resp_release(&r);
    call(s, "inst_broken", sid, "x = 1\n", &r);
    CHECK_STATUS(&r, 410);
    m = itest_json_str(r.json, "error.message");
    CHECKF(m && strstr(m, "zygote.py") && strstr(m, "exit status 2"),
           "410's message: %s", r.body);
    printf("next call: %ld %s\n", r.status, m ? m : r.body);
    itest_resp_release(&r);
    free(sid);
    itest_stop(s);
}

static void cleanup(void)
{
    if (prefix && test__failed_checks == 0)
        itest_rm_rf(prefix);
    else if (prefix)
        fprintf(stderr, "the prefix stays for a look: %s\n", prefix);
    free(prefix);
}

TEST_MAIN(T(install_prefix), T(installed_serves_warm),
          T(missing_zygote_says_why), T(cleanup))
