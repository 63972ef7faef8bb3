/*
 * test_warmset.c - the adaptive warm set through the real daemon
 * (service/exec/warmset.c, zygote.py's _adapt): what runs import is
 * counted, the zygotes are renewed one slot at a time to pre-import it,
 * the runs then find it imported, a module that does not import is refused
 * without breaking the zygote or renewing it again, the budget bounds the
 * set, and the admin status and metrics say what is warm.
 *
 * The servers warm only json (--warm-modules json) so that a zygote starts
 * fast, look at the plan every 3 runs, and use tabulate (Debian's
 * python3-tabulate, installed by scripts/install-deps.sh) as the module
 * runs import: small and quick to import.
 */
#include <unistd.h>

#include "harness.h"

#define EXEC_TIMEOUT_MS 120000
#define ADAPT_TIMEOUT_MS 90000

static struct itest_server *srv; /* two slots, budget 128M */

/* Prints whether tabulate was imported before the code imported it. */
static const char tabulate_cell[] = "import sys\n"
                                    "warm = 'tabulate' in sys.modules\n"
                                    "import tabulate\n"
                                    "print(warm)\n";

static const char missing_cell[] = "try:\n"
                                   "    import ipd_no_such_module\n"
                                   "except ImportError:\n"
                                   "    pass\n"
                                   "print('ok')\n";

/* Run code on s as the admin tenant's user u1; its stdout, copied into
 * out ("" after a failed check). */
static void run_cell(struct itest_server *s, const char *code, char *out,
                     size_t len, const char **mode)
{
    struct itest_resp r;
    json_t *body = json_pack("{s:s}", "code", code);
    static char m[16];

    itest_exec(s, s->admin_key, "u1", body, EXEC_TIMEOUT_MS, &r);
    CHECK_STATUS(&r, 200);
    const char *so = itest_exec_stdout(&r);
    CHECKF(json_is_true(itest_json_get(r.json, "success")), "run: %s", r.body);
    snprintf(out, len, "%s", so ? so : "");
    snprintf(m, sizeof(m), "%s",
             itest_json_str(r.json, "resources.mode")
                 ? itest_json_str(r.json, "resources.mode")
                 : "");
    if (mode)
        *mode = m;
    itest_resp_release(&r);
}

/* GET /v1/admin/status's execution_mode (new reference, or NULL after a
 * failed check). */
static json_t *exec_status(struct itest_server *s)
{
    struct itest_resp r;
    itest_request(s, "GET", "/v1/admin/status", s->admin_key, NULL, NULL, NULL,
                  0, NULL, &r);
    json_t *em = itest_json_get(r.json, "execution_mode");
    CHECKF(r.status == 200 && json_is_object(em), "admin status: %ld %s",
           r.status, r.body);
    json_incref(em);
    itest_resp_release(&r);
    return json_is_object(em) ? em : NULL;
}

/* An array of strings holds name. */
static bool has_name(const json_t *a, const char *name)
{
    size_t i;
    const json_t *v;
    json_array_foreach(a, i,
                       v) if (json_is_string(v) &&
                              !strcmp(json_string_value(v), name)) return true;
    return false;
}

/* adaptive.modules' entry for name (borrowed from em), or NULL. */
static json_t *module_entry(json_t *em, const char *name)
{
    size_t i;
    json_t *v;
    json_array_foreach(itest_json_get(em, "adaptive.modules"), i, v)
    {
        const char *n = itest_json_str(v, "module");
        if (n && !strcmp(n, name))
            return v;
    }
    return NULL;
}

/* Every slot serves warm with name in its warm set. */
static bool all_slots_warm_with(json_t *em, const char *name)
{
    size_t i;
    json_t *s;
    json_t *slots = json_object_get(em, "slots");
    if (!json_array_size(slots))
        return false;
    json_array_foreach(slots, i, s)
    {
        const char *mode = itest_json_str(s, "mode");
        if (!mode || strcmp(mode, "warm") ||
            !has_name(json_object_get(s, "warm_set"), name))
            return false;
    }
    return true;
}

/* Poll the status (bounded) until every slot has warmed name. */
static bool wait_all_warm_with(struct itest_server *s, const char *name)
{
    double deadline = itest_now() + ADAPT_TIMEOUT_MS / 1000.0;
    for (;;) {
        json_t *em = exec_status(s);
        bool ok = em && all_slots_warm_with(em, name);
        json_decref(em);
        if (ok || itest_now() > deadline)
            return ok;
        usleep(100 * 1000);
    }
}

/* The sum of the slots' restarts. */
static long long restarts(struct itest_server *s)
{
    json_t *em = exec_status(s), *v;
    long long n = 0;
    size_t i;
    json_array_foreach(json_object_get(em, "slots"), i, v) n +=
        json_integer_value(json_object_get(v, "restarts"));
    json_decref(em);
    return n;
}

/* Occurrences of needle in the server's log. */
static int log_count(struct itest_server *s, const char *needle)
{
    char *log = itest_read_log(s);
    int n = 0;
    for (const char *p = log ? strstr(log, needle) : NULL; p;
         p = strstr(p + 1, needle))
        n++;
    free(log);
    return n;
}

/* A metric's value in GET /metrics (-1 when it is not there). */
static double metric(struct itest_server *s, const char *name)
{
    struct itest_resp r;
    double v = -1;
    itest_request(s, "GET", "/metrics", s->admin_key, NULL, NULL, NULL, 0, NULL,
                  &r);
    CHECK_STATUS(&r, 200);
    char *want = itest_fmt("\n%s ", name);
    const char *p = r.body ? strstr(r.body, want) : NULL;
    if (p)
        v = strtod(p + strlen(want), NULL);
    free(want);
    itest_resp_release(&r);
    return v;
}

/* ---- tests ---- */

static void start(void)
{
    const char *args[] = {"--exec-mode",
                          "warm",
                          "--exec-slots",
                          "2",
                          "--warm-modules",
                          "json",
                          "--warm-adapt-runs",
                          "3",
                          "--warm-memory-budget",
                          "128M",
                          "--policy.standard.tenant-running",
                          "100%",
                          NULL};
    struct itest_opts o = {.args = args};
    srv = itest_start(&o);
    REQUIRE(srv);
}

/* Before any run imports it, tabulate is not warm; three runs that do make
 * the plan name it; both slots are renewed, one after the other, and runs
 * then find it imported. */
static void adapts_to_imports(void)
{
    char out[256];
    const char *mode;

    json_t *em = exec_status(srv);
    CHECKF(json_is_true(itest_json_get(em, "adaptive.enabled")) &&
               json_array_size(itest_json_get(em, "adaptive.plan")) == 0,
           "adaptive before any run: %s",
           em ? json_dumps(json_object_get(em, "adaptive"), 0) : "");
    json_decref(em);
    for (int i = 0; i < 3; i++) {
        run_cell(srv, tabulate_cell, out, sizeof(out), &mode);
        CHECK_STR(out, "False\n");
    }
    /* The plan is looked at every 3 runs (whatever they import): two more
     * make sure a look has come since the third. */
    for (int i = 0; i < 2; i++)
        run_cell(srv, tabulate_cell, out, sizeof(out), &mode);
    CHECKF(wait_all_warm_with(srv, "tabulate"),
           "both slots warm with tabulate within %d ms", ADAPT_TIMEOUT_MS);
    for (int i = 0; i < 4; i++) {
        run_cell(srv, tabulate_cell, out, sizeof(out), &mode);
        CHECK_STR(out, "True\n");
        CHECK_STR(mode, "warm");
    }
    em = exec_status(srv);
    json_t *e = module_entry(em, "tabulate");
    CHECKF(e && !strcmp(itest_json_str(e, "state"), "warm") &&
               json_integer_value(json_object_get(e, "bytes")) > 0 &&
               json_integer_value(json_object_get(e, "runs")) >= 3,
           "tabulate's entry: %s", e ? json_dumps(e, 0) : "none");
    CHECK(has_name(itest_json_get(em, "adaptive.set"), "tabulate"));
    CHECK(json_integer_value(itest_json_get(em, "adaptive.set_bytes")) > 0);
    CHECK(json_integer_value(itest_json_get(em, "adaptive.floor_bytes")) > 0);
    json_decref(em);
    CHECK(metric(srv, "interpd_warm_set_modules") == 1);
    CHECK(metric(srv, "interpd_warm_set_bytes") > 0);
    /* One slot at a time: the second was recycled only once the first's
     * new zygote was ready. */
    char *log = itest_read_log(srv);
    const char *r1 = log ? strstr(log, "recycled: the warm set changed") : NULL;
    const char *ready1 = r1 ? strstr(r1, "it warmed") : NULL;
    const char *r2 =
        r1 ? strstr(r1 + 1, "recycled: the warm set changed") : NULL;
    CHECKF(r1 && ready1 && r2 && ready1 < r2,
           "recycled, ready, then the other slot recycled");
    free(log);
    CHECK(log_count(srv, "recycled: the warm set changed") == 2);
}

/* A module that does not import is tried once, by a probe in a child of
 * the zygote: refused, the zygote serves on, and its slot is not renewed
 * for it again. */
static void refused_module_never_breaks_the_zygote(void)
{
    char out[256];
    const char *mode;

    for (int i = 0; i < 5; i++) { /* 3, and a look since (above) */
        run_cell(srv, missing_cell, out, sizeof(out), NULL);
        CHECK_STR(out, "ok\n");
    }
    /* The plan named it: both slots are renewed and report it refused. */
    double deadline = itest_now() + ADAPT_TIMEOUT_MS / 1000.0;
    bool refused = false;
    while (!refused && itest_now() < deadline) {
        json_t *em = exec_status(srv);
        json_t *e = module_entry(em, "ipd_no_such_module");
        refused = e && !strcmp(itest_json_str(e, "state"), "refused") &&
                  all_slots_warm_with(em, "tabulate");
        if (refused) {
            CHECK_STR(itest_json_str(e, "why"), "not_importable");
            CHECK(!has_name(itest_json_get(em, "adaptive.plan"),
                            "ipd_no_such_module"));
            CHECK(has_name(itest_json_get(em, "adaptive.plan"), "tabulate"));
        }
        json_decref(em);
        if (!refused)
            usleep(100 * 1000);
    }
    CHECKF(refused, "ipd_no_such_module refused within %d ms",
           ADAPT_TIMEOUT_MS);
    CHECK(itest_wait_exec_mode(srv, "warm", ADAPT_TIMEOUT_MS));
    /* More runs of both: looks that find the same plan renew nothing. */
    long long before = restarts(srv);
    for (int i = 0; i < 7; i++) {
        run_cell(srv, i % 2 ? missing_cell : tabulate_cell, out, sizeof(out),
                 &mode);
        CHECK_STR(mode, "warm");
    }
    CHECK(restarts(srv) == before);
    CHECK(log_count(srv, "malformed warm set report") == 0);
}

/* The standard library, relative imports and names only a string holds
 * are not counted. */
static void only_imports_beyond_the_stdlib(void)
{
    char out[256];

    run_cell(srv,
             "import os, json, collections.abc\n"
             "from email import message\n"
             "s = 'import tabulate_in_a_string'\n"
             "def f():\n"
             "    from . import nothing\n"
             "print('done')\n",
             out, sizeof(out), NULL);
    CHECK_STR(out, "done\n");
    json_t *em = exec_status(srv);
    CHECK(!module_entry(em, "os") && !module_entry(em, "json") &&
          !module_entry(em, "collections.abc") && !module_entry(em, "email") &&
          !module_entry(em, "tabulate_in_a_string") &&
          !module_entry(em, "nothing"));
    json_decref(em);
}

static void stop(void)
{
    itest_stop(srv);
}

/* A one-slot server like srv but with this --warm-memory-budget (NULL
 * after a failed start). */
static struct itest_server *start_one_slot(const char *budget)
{
    const char *args[] = {"--exec-mode",
                          "warm",
                          "--exec-slots",
                          "1",
                          "--warm-modules",
                          "json",
                          "--warm-adapt-runs",
                          "3",
                          "--warm-memory-budget",
                          budget,
                          NULL};
    struct itest_opts o = {.args = args};
    return itest_start(&o);
}

/* A budget smaller than the module: it is measured, left out, and the
 * zygote serves with the floor alone. */
static void budget_bounds_the_set(void)
{
    struct itest_server *s = start_one_slot("4K");
    char out[256];
    const char *mode;
    REQUIRE(s);
    for (int i = 0; i < 5; i++)
        run_cell(s, tabulate_cell, out, sizeof(out), NULL);
    double deadline = itest_now() + ADAPT_TIMEOUT_MS / 1000.0;
    bool over = false;
    while (!over && itest_now() < deadline) {
        json_t *em = exec_status(s);
        json_t *e = module_entry(em, "tabulate");
        over = e && !strcmp(itest_json_str(e, "state"), "over_budget");
        if (over)
            CHECKF(json_integer_value(json_object_get(e, "bytes")) > 4096 &&
                       json_array_size(json_object_get(
                           json_array_get(json_object_get(em, "slots"), 0),
                           "warm_set")) == 0,
                   "over budget: %s", json_dumps(em, 0));
        json_decref(em);
        if (!over)
            usleep(100 * 1000);
    }
    CHECKF(over, "tabulate over the budget within %d ms", ADAPT_TIMEOUT_MS);
    CHECK(itest_wait_exec_mode(s, "warm", ADAPT_TIMEOUT_MS));
    run_cell(s, tabulate_cell, out, sizeof(out), &mode);
    CHECK_STR(out, "False\n");
    CHECK_STR(mode, "warm");
    CHECK(metric(s, "interpd_warm_set_modules") == 0);
    itest_stop(s);
}

/* --warm-memory-budget 0: the set never adapts and no zygote is renewed
 * for it. */
static void budget_zero_is_off(void)
{
    struct itest_server *s = start_one_slot("0");
    char out[256];
    REQUIRE(s);
    for (int i = 0; i < 6; i++) {
        run_cell(s, tabulate_cell, out, sizeof(out), NULL);
        CHECK_STR(out, "False\n");
    }
    json_t *em = exec_status(s);
    CHECK(json_is_false(itest_json_get(em, "adaptive.enabled")));
    CHECK(json_array_size(itest_json_get(em, "adaptive.plan")) == 0);
    json_decref(em);
    CHECK(restarts(s) == 0);
    CHECK(log_count(s, "the warm set changed") == 0);
    itest_stop(s);
}

TEST_MAIN(T(start), T(adapts_to_imports),
          T(refused_module_never_breaks_the_zygote),
          T(only_imports_beyond_the_stdlib), T(stop), T(budget_bounds_the_set),
          T(budget_zero_is_off))
