/*
 * test_warm.c - warm executions through the real daemon (`serve
 * --exec-mode warm`, service/exec/warm.c): nothing of one request reaches
 * the next one run by the same zygote, which runs are warm, what /readyz
 * and the admin status say, the cold fallback when no zygote can start,
 * recycling, and results that are the same warm or cold.
 *
 * Every server here says its mode itself (--exec-mode), whatever
 * ITEST_EXEC_MODE says; the harness waits until a warm one serves warm.
 */
#include <dirent.h>
#include <errno.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness.h"

#define EXEC_TIMEOUT_MS 120000
#define LEAK_PAIRS 20
#define SEEDED_RANDOM 0.13436424411240122 /* random.seed(1); random() */
#define SEEDED_NUMPY 0.417022004702574    /* np.random.seed(1); rand() */

static struct itest_server *srv; /* warm, one slot: every run shares a
                                  * zygote */
static char *key_a, *key_b;      /* two tenants, policy standard */

/* ---- helpers ---- */

/* POST /v1/executions of code as user with key (timeout in s, 0: the
 * policy's; extra: more request fields, taken, or NULL). */
static long run_code(struct itest_server *s, const char *key, const char *user,
                     const char *code, int timeout, json_t *extra,
                     struct itest_resp *out)
{
    json_t *body = json_pack("{s:s}", "code", code);
    if (timeout)
        json_object_set_new(body, "timeout", json_integer(timeout));
    if (extra)
        json_object_update(body, extra);
    json_decref(extra);
    return itest_exec(s, key, user, body, EXEC_TIMEOUT_MS, out);
}

#define MODE_OF(r) itest_json_str((r)->json, "resources.mode")

/* `keys create --tenant tenant --policy policy` (with the server's
 * config file when it has one): the plain key (free()), NULL on failure
 * (after saying why). */
static char *key_with_policy(struct itest_server *s, const char *tenant,
                             const char *policy, bool with_config)
{
    char *out = NULL, *conf = itest_fmt("%s/interpd.conf", s->tmp_dir);
    int code =
        with_config
            ? itest_cli(s, &out, "keys", "create", "--config", conf,
                        "--data-dir", s->data_dir, "--tenant", tenant,
                        "--policy", policy, NULL)
            : itest_cli(s, &out, "keys", "create", "--data-dir", s->data_dir,
                        "--tenant", tenant, "--policy", policy, NULL);
    json_error_t jerr;
    json_t *j = out ? json_loads(out, 0, &jerr) : NULL;
    char *key = itest_json_str(j, "key") ? itest_json_dup(j, "key") : NULL;
    const char *got = itest_json_str(j, "policy");
    CHECKF(code == 0 && key && got && !strcmp(got, policy),
           "keys create --policy %s: exit %d: %s", policy, code,
           out ? out : "");
    json_decref(j);
    free(out);
    free(conf);
    return key;
}

/* GET /v1/admin/status's "execution_mode" (new reference; NULL after
 * saying why). */
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

/* Slot i's counter field ("restarts", "runs") in the status; -1 when
 * there is none. */
static long long slot_int(struct itest_server *s, size_t i, const char *f)
{
    json_t *em = exec_status(s);
    json_t *v =
        json_object_get(json_array_get(json_object_get(em, "slots"), i), f);
    long long n = json_is_integer(v) ? json_integer_value(v) : -1;
    json_decref(em);
    return n;
}

/* Poll (bounded) until slot i's restarts reach want; the last value. */
static long long wait_restarts(struct itest_server *s, size_t i, long long want,
                               int timeout_ms)
{
    double deadline = itest_now() + timeout_ms / 1000.0;
    long long n = slot_int(s, i, "restarts");
    while (n < want && itest_now() < deadline) {
        usleep(50 * 1000);
        n = slot_int(s, i, "restarts");
    }
    return n;
}

/* GET /readyz's execution_mode, copied into buf ("" when none). */
static const char *readyz_mode(struct itest_server *s, char *buf, size_t len)
{
    struct itest_resp r;
    itest_request(s, "GET", "/readyz", NULL, NULL, NULL, NULL, 0, NULL, &r);
    const char *m = itest_json_str(r.json, "execution_mode");
    snprintf(buf, len, "%s", r.status == 200 && m ? m : "");
    itest_resp_release(&r);
    return buf;
}

/* r's stdout as JSON (new reference; NULL after saying why). */
static json_t *stdout_json(const struct itest_resp *r)
{
    json_error_t jerr;
    json_t *j = json_loads(itest_exec_stdout(r), 0, &jerr);
    CHECKF(j != NULL, "stdout is no JSON (%s):\n%s\nstderr:\n%s", jerr.text,
           itest_exec_stdout(r), itest_exec_stderr(r));
    return j;
}

/* ---- one warm server, one slot ---- */

static void start_warm(void)
{
    const char *args[] = {"--exec-mode", "warm", "--exec-slots", "1", NULL};
    struct itest_opts o = {.args = args};
    srv = itest_start(&o);
    REQUIRE(srv);
    key_a = key_with_policy(srv, "tenant-a", "standard", false);
    key_b = key_with_policy(srv, "tenant-b", "standard", false);
    REQUIRE(key_a && key_b);
}

/* What one request leaves behind in its process and its sandbox: files,
 * environment, a patched module, a module global, the random states, an
 * open descriptor, a thread still running at the end and a daemonised
 * grandchild.  It prints what it saw of its own doing (so the checks of
 * the next run are not vacuous) before leaving the seeds set. */
static const char leaker[] =
    "import os, json, random, threading, time\n"
    "import numpy\n"
    "open('/tmp/leak', 'w').write('a')\n"
    "open('/mnt/output/leak', 'w').write('a')\n"
    "os.environ['LEAK'] = '1'\n"
    "random.seed(1); r1 = random.random()\n"
    "numpy.random.seed(1); n1 = float(numpy.random.rand())\n"
    "fd = os.open('/tmp/leak', os.O_RDONLY)\n"
    "os.dup2(fd, 50, inheritable=True)\n"
    "t = threading.Thread(target=threading.Event().wait, args=(60,),\n"
    "                     daemon=True)\n"
    "t.start()\n"
    "if os.fork() == 0:\n"
    "    os.setsid()\n"
    "    if os.fork() == 0:\n"
    "        time.sleep(3600)\n"
    "    os._exit(0)\n"
    "os.wait()\n"
    "print(json.dumps({'r1': r1, 'n1': n1, 'thread': t.is_alive(),\n"
    "                  'fd50': os.path.samestat(os.fstat(50),\n"
    "                                           os.stat('/tmp/leak')),\n"
    "                  'pids': len([p for p in os.listdir('/proc')\n"
    "                               if p.isdigit()])}))\n"
    "json.dumps = lambda *a, **k: 'LEAKED'\n"
    "numpy.LEAK = 1\n"
    "random.seed(1)\n"
    "numpy.random.seed(1)\n";

/* What the next request sees (printed without json.dumps, which the
 * leaker patched). */
static const char checker[] =
    "import os, json, random, threading\n"
    "import numpy\n"
    "seen = {'tmp': os.path.exists('/tmp/leak'),\n"
    "        'out': os.path.exists('/mnt/output/leak'),\n"
    "        'env': os.environ.get('LEAK'),\n"
    "        'json': json.dumps({'a': 1}),\n"
    "        'json_module': getattr(json.dumps, '__module__', None),\n"
    "        'numpy': hasattr(numpy, 'LEAK'),\n"
    "        'random': random.random(),\n"
    "        'nprandom': float(numpy.random.rand()),\n"
    "        'threads': [t.name for t in threading.enumerate()],\n"
    "        'pids': sorted(int(p) for p in os.listdir('/proc')\n"
    "                       if p.isdigit()),\n"
    "        'me': os.getpid()}\n"
    "try:\n"
    "    os.fstat(50); seen['fd50'] = 'open'\n"
    "except OSError as e:\n"
    "    seen['fd50'] = e.errno\n"
    "print(json.JSONEncoder().encode(seen))\n";

/* The leaker's run: warm, and it did all it meant to. */
static void check_leaker(const struct itest_resp *r, const char *who)
{
    CHECK_STATUS(r, 200);
    CHECKF(MODE_OF(r) && !strcmp(MODE_OF(r), "warm"),
           "%s: the leaker ran %s, not warm", who, MODE_OF(r));
    CHECKF(json_is_true(itest_json_get(r->json, "success")), "%s: %s", who,
           r->body);
    json_t *j = stdout_json(r);
    CHECK(json_real_value(json_object_get(j, "r1")) == SEEDED_RANDOM);
    CHECK(json_real_value(json_object_get(j, "n1")) == SEEDED_NUMPY);
    CHECK(json_is_true(json_object_get(j, "thread")));
    CHECK(json_is_true(json_object_get(j, "fd50")));
    /* init, itself and the daemon: the daemon did run */
    CHECKF(json_integer_value(json_object_get(j, "pids")) >= 3, "%s",
           itest_exec_stdout(r));
    json_decref(j);
    json_t *gen = itest_json_get(r->json, "generated_files");
    CHECKF(
        json_array_size(gen) == 1 &&
            !strcmp(itest_json_str(json_array_get(gen, 0), "filename"), "leak"),
        "%s: generated_files: %s", who, r->body);
}

/* The checker's run: warm, and none of the leaker's doing is there. */
static void check_clean(const struct itest_resp *r, const char *who)
{
    CHECK_STATUS(r, 200);
    CHECKF(MODE_OF(r) && !strcmp(MODE_OF(r), "warm"),
           "%s: the checker ran %s, not warm", who, MODE_OF(r));
    json_t *j = stdout_json(r);
    if (!j)
        return;
    CHECKF(json_is_false(json_object_get(j, "tmp")) &&
               json_is_false(json_object_get(j, "out")),
           "%s: the leaker's files: %s", who, itest_exec_stdout(r));
    CHECKF(json_array_size(itest_json_get(r->json, "generated_files")) == 0,
           "%s: generated_files: %s", who, r->body);
    CHECKF(json_is_null(json_object_get(j, "env")),
           "%s: LEAK in the "
           "environment: %s",
           who, itest_exec_stdout(r));
    CHECK_STR(json_string_value(json_object_get(j, "json")), "{\"a\": 1}");
    CHECK_STR(json_string_value(json_object_get(j, "json_module")), "json");
    CHECK(json_is_false(json_object_get(j, "numpy")));
    double rnd = json_real_value(json_object_get(j, "random"));
    double np = json_real_value(json_object_get(j, "nprandom"));
    CHECKF(rnd != SEEDED_RANDOM && rnd > 0 && rnd < 1,
           "%s: random %.17g "
           "(seed(1) gives %.17g)",
           who, rnd, SEEDED_RANDOM);
    CHECKF(np != SEEDED_NUMPY && np > 0 && np < 1,
           "%s: numpy %.17g "
           "(seed(1) gives %.17g)",
           who, np, SEEDED_NUMPY);
    CHECK_INT(json_integer_value(json_object_get(j, "fd50")), EBADF);
    json_t *th = json_object_get(j, "threads");
    CHECKF(json_array_size(th) == 1 &&
               !strcmp(json_string_value(json_array_get(th, 0)), "MainThread"),
           "%s: threads %s", who, itest_exec_stdout(r));
    /* Its namespace's init and itself, nothing else. */
    json_t *pids = json_object_get(j, "pids");
    json_int_t me = json_integer_value(json_object_get(j, "me"));
    CHECKF(json_array_size(pids) == 2 &&
               json_integer_value(json_array_get(pids, 0)) == 1 &&
               json_integer_value(json_array_get(pids, 1)) == me,
           "%s: processes in /proc: %s", who, itest_exec_stdout(r));
    json_decref(j);
}

/* One leaker run, then one checker run of another user and tenant on the
 * same (only) slot; both orders, LEAK_PAIRS times. */
static void no_leaks_across_requests(void)
{
    REQUIRE(srv);
    for (int i = 0; i < LEAK_PAIRS; i++) {
        struct itest_resp r;
        bool ab = i % 2 == 0;
        char who[64];
        snprintf(who, sizeof(who), "pair %d (%s)", i,
                 ab ? "a leaks, b checks" : "b leaks, a checks");
        run_code(srv, ab ? key_a : key_b, ab ? "alice" : "bob", leaker, 30,
                 NULL, &r);
        check_leaker(&r, who);
        itest_resp_release(&r);
        run_code(srv, ab ? key_b : key_a, ab ? "bob" : "alice", checker, 30,
                 NULL, &r);
        check_clean(&r, who);
        itest_resp_release(&r);
    }
    CHECK_INT(slot_int(srv, 0, "restarts"), 0);
}

/* Two runs in a row of one user: fresh random states each. */
static void random_differs_between_runs(void)
{
    static const char code[] =
        "import random, numpy\n"
        "print(repr(random.random()), repr(float(numpy.random.rand())))\n";
    char out[2][128];
    REQUIRE(srv);
    for (int i = 0; i < 2; i++) {
        struct itest_resp r;
        run_code(srv, key_a, "alice", code, 30, NULL, &r);
        CHECK_STATUS(&r, 200);
        CHECK_STR(MODE_OF(&r), "warm");
        snprintf(out[i], sizeof(out[i]), "%s", itest_exec_stdout(&r));
        itest_resp_release(&r);
    }
    double r0, n0, r1, n1;
    REQUIRE(sscanf(out[0], "%lf %lf", &r0, &n0) == 2 &&
            sscanf(out[1], "%lf %lf", &r1, &n1) == 2);
    CHECKF(r0 != r1, "random.random() twice: %s / %s", out[0], out[1]);
    CHECKF(n0 != n1, "numpy.random.rand() twice: %s / %s", out[0], out[1]);
}

/* standard and strict runs are warm (strict parks a child on the spot);
 * networked ones are always cold. */
static void mode_per_policy(void)
{
    struct itest_resp r;
    REQUIRE(srv);
    char *strict = key_with_policy(srv, "tenant-s", "strict", false);
    char *net = key_with_policy(srv, "tenant-n", "networked", false);
    REQUIRE(strict && net);
    static const struct {
        int key; /* 0 standard (a), 1 strict, 2 networked */
        const char *ask, *policy, *mode;
    } cases[] = {
        {0, NULL, "standard", "warm"},   {1, NULL, "strict", "warm"},
        {0, "strict", "strict", "warm"}, {2, NULL, "networked", "cold"},
        {1, NULL, "strict", "warm"},     {0, NULL, "standard", "warm"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const char *key = cases[i].key == 0   ? key_a
                          : cases[i].key == 1 ? strict
                                              : net;
        json_t *extra =
            cases[i].ask ? json_pack("{s:s}", "policy", cases[i].ask) : NULL;
        run_code(srv, key, "pol", "print(6 * 7)", 30, extra, &r);
        CHECK_STATUS(&r, 200);
        CHECK_STR(itest_exec_stdout(&r), "42\n");
        CHECK_STR(itest_json_str(r.json, "resources.policy"), cases[i].policy);
        CHECKF(MODE_OF(&r) && !strcmp(MODE_OF(&r), cases[i].mode),
               "case %zu: policy %s ran %s, want %s", i, cases[i].policy,
               MODE_OF(&r), cases[i].mode);
        itest_resp_release(&r);
    }
    free(strict);
    free(net);
}

/* /readyz and the admin status say warm, and what serves. */
static void mode_reported_warm(void)
{
    char m[32];
    REQUIRE(srv);
    CHECK_STR(readyz_mode(srv, m, sizeof(m)), "warm");
    json_t *em = exec_status(srv);
    REQUIRE(em);
    CHECK_STR(itest_json_str(em, "configured"), "warm");
    CHECK_STR(itest_json_str(em, "serving"), "warm");
    CHECK_STR(itest_json_str(em, "modules"), "numpy,pandas,matplotlib");
    json_t *slots = json_object_get(em, "slots");
    CHECK_INT(json_array_size(slots), 1);
    json_t *s0 = json_array_get(slots, 0);
    CHECK_INT(json_integer_value(json_object_get(s0, "slot")), 0);
    CHECK_STR(itest_json_str(s0, "mode"), "warm");
    CHECK(json_integer_value(json_object_get(s0, "runs")) >= 1);
    CHECK(json_is_integer(json_object_get(s0, "restarts")));
    CHECK(json_is_string(json_object_get(s0, "generation")));
    json_int_t t = json_integer_value(json_object_get(s0, "started_at"));
    CHECKF((double)t > itest_now() - 3600 && (double)t <= itest_now() + 1,
           "started_at %lld", (long long)t);
    CHECK(json_object_get(s0, "why") == NULL);
    json_decref(em);
}

static void stop_warm(void)
{
    REQUIRE(srv);
    itest_stop(srv);
    srv = NULL;
    free(key_a);
    free(key_b);
}

/* ---- cold, and a zygote that cannot start ---- */

static void mode_reported_cold(void)
{
    const char *args[] = {"--exec-mode", "cold", NULL};
    struct itest_opts o = {.args = args};
    struct itest_server *s = itest_start(&o);
    struct itest_resp r;
    char m[32];
    REQUIRE(s);
    CHECK_STR(readyz_mode(s, m, sizeof(m)), "cold");
    json_t *em = exec_status(s);
    CHECK_STR(itest_json_str(em, "configured"), "cold");
    CHECK_STR(itest_json_str(em, "serving"), "cold");
    CHECK_INT(json_array_size(json_object_get(em, "slots")), 0);
    json_decref(em);
    run_code(s, s->admin_key, "u", "print(1)", 30, NULL, &r);
    CHECK_STATUS(&r, 200);
    CHECK_STR(itest_exec_stdout(&r), "1\n");
    CHECK_STR(MODE_OF(&r), "cold");
    itest_resp_release(&r);
    itest_stop(s);
}

/* A prelude dir with prelude.py and venv_check.py only (no zygote.py):
 * new, 0755; NULL after saying why. */
static char *prelude_without_zygote(void)
{
    const char *base = getenv("TMPDIR");
    char *dir = itest_fmt("%s/interpd-nozygote-XXXXXX",
                          base && base[0] ? base : "/tmp");
    bool ok = mkdtemp(dir) && chmod(dir, 0755) == 0;
    const char *names[] = {"prelude.py", "venv_check.py"};
    for (size_t i = 0; ok && i < 2; i++) {
        char *from =
            itest_fmt("%s/service/exec/python/%s", ITEST_SOURCE_DIR, names[i]);
        char *to = itest_fmt("%s/%s", dir, names[i]);
        size_t len = 0;
        char *text = itest_read_file(from, &len);
        FILE *f = text ? fopen(to, "w") : NULL;
        ok = f && fwrite(text, 1, len, f) == len;
        if (f && fclose(f))
            ok = false;
        ok = ok && chmod(to, 0644) == 0;
        CHECKF(ok, "copying %s to %s: %s", from, to, strerror(errno));
        free(text);
        free(from);
        free(to);
    }
    if (!ok) {
        itest_rm_rf(dir);
        free(dir);
        return NULL;
    }
    return dir;
}

/* No zygote can start: after three failures each slot serves cold, says
 * why, and waits a minute before trying again; executions run cold all
 * along. */
static void zygote_cannot_start(void)
{
    char *dir = prelude_without_zygote();
    REQUIRE(dir);
    const char *args[] = {
        "--exec-mode", "warm", "--exec-slots", "2", "--prelude-dir", dir, NULL};
    struct itest_opts o = {.args = args, .no_warm_wait = true};
    struct itest_server *s = itest_start(&o);
    struct itest_resp r;
    char m[32];
    if (!s) {
        itest_rm_rf(dir);
        free(dir);
    }
    REQUIRE(s);
    /* The executor's start-up check passed: it answers, cold. */
    run_code(s, s->admin_key, "u", "print(1)", 30, NULL, &r);
    CHECK_STATUS(&r, 200);
    CHECK_STR(itest_exec_stdout(&r), "1\n");
    CHECK_STR(MODE_OF(&r), "cold");
    itest_resp_release(&r);
    /* 3 failures, 2 s and 4 s apart: cold within 60 s. */
    CHECK(itest_wait_exec_mode(s, "cold", 60000));
    json_t *em = exec_status(s);
    CHECK_STR(itest_json_str(em, "configured"), "warm");
    CHECK_STR(itest_json_str(em, "serving"), "cold");
    json_t *slots = json_object_get(em, "slots");
    CHECK_INT(json_array_size(slots), 2);
    for (size_t i = 0; i < json_array_size(slots); i++) {
        json_t *sl = json_array_get(slots, i);
        const char *why = itest_json_str(sl, "why");
        CHECK_STR(itest_json_str(sl, "mode"), "cold");
        CHECKF(why && why[0], "slot %zu: no why", i);
        /* Three tries, then none for a minute. */
        CHECKF(json_integer_value(json_object_get(sl, "restarts")) == 3,
               "slot %zu: %lld zygote starts before serving cold, want 3: "
               "%s",
               i,
               (long long)json_integer_value(json_object_get(sl, "restarts")),
               why ? why : "");
    }
    json_decref(em);
    for (int i = 0; i < 3; i++) {
        run_code(s, s->admin_key, "u", "print(2)", 30, NULL, &r);
        CHECK_STATUS(&r, 200);
        CHECK_STR(itest_exec_stdout(&r), "2\n");
        CHECK_STR(MODE_OF(&r), "cold");
        CHECK(json_is_true(itest_json_get(r.json, "success")));
        itest_resp_release(&r);
    }
    CHECK_STR(readyz_mode(s, m, sizeof(m)), "cold");
    for (size_t i = 0; i < 2; i++)
        CHECKF(slot_int(s, i, "restarts") == 3,
               "slot %zu started %lld zygotes within a minute of going "
               "cold",
               i, slot_int(s, i, "restarts"));
    itest_stop(s);
    itest_rm_rf(dir);
    free(dir);
}

/* ---- recycling ---- */

/* One warm run of print(n) (after waiting until the slot serves warm). */
static void one_warm_run(struct itest_server *s, int n)
{
    struct itest_resp r;
    char code[32], want[16];
    CHECK(itest_wait_exec_mode(s, "warm", 60000));
    snprintf(code, sizeof(code), "print(%d)", n);
    snprintf(want, sizeof(want), "%d\n", n);
    run_code(s, s->admin_key, "u", code, 30, NULL, &r);
    CHECK_STATUS(&r, 200);
    CHECK_STR(itest_exec_stdout(&r), want);
    CHECKF(MODE_OF(&r) && !strcmp(MODE_OF(&r), "warm"), "run %d: %s", n,
           MODE_OF(&r));
    itest_resp_release(&r);
}

/* --warm-recycle-runs 2: every second run ends its zygote; runs go on,
 * warm again once the next one is up. */
static void recycled_after_runs(void)
{
    const char *args[] = {
        "--exec-mode", "warm", "--exec-slots", "1", "--warm-recycle-runs",
        "2",           NULL};
    struct itest_opts o = {.args = args};
    struct itest_server *s = itest_start(&o);
    REQUIRE(s);
    long long r0 = slot_int(s, 0, "restarts");
    CHECK_INT(r0, 0);
    one_warm_run(s, 1);
    CHECK_INT(slot_int(s, 0, "runs"), 1);
    CHECK_INT(slot_int(s, 0, "restarts"), r0);
    one_warm_run(s, 2);
    CHECK_INT(wait_restarts(s, 0, r0 + 1, 30000), r0 + 1);
    one_warm_run(s, 3);
    CHECK_INT(slot_int(s, 0, "runs"), 1); /* a new zygote's first */
    one_warm_run(s, 4);
    CHECK_INT(wait_restarts(s, 0, r0 + 2, 30000), r0 + 2);
    one_warm_run(s, 5);
    itest_stop(s);
}

/* A timed-out run ends its zygote; the next run is warm on a new one. */
static void recycled_after_timeout(void)
{
    const char *args[] = {"--exec-mode", "warm", "--exec-slots", "1", NULL};
    struct itest_opts o = {.args = args};
    struct itest_server *s = itest_start(&o);
    struct itest_resp r;
    REQUIRE(s);
    one_warm_run(s, 1);
    long long r0 = slot_int(s, 0, "restarts");
    run_code(s, s->admin_key, "u", "while True: pass", 1, NULL, &r);
    CHECK_STATUS(&r, 200);
    CHECK(json_is_true(itest_json_get(r.json, "timed_out")));
    CHECK_STR(itest_json_str(r.json, "error.type"), "Timeout");
    CHECK_STR(MODE_OF(&r), "warm");
    itest_resp_release(&r);
    CHECK_INT(wait_restarts(s, 0, r0 + 1, 30000), r0 + 1);
    one_warm_run(s, 2);
    one_warm_run(s, 3);
    CHECK_INT(slot_int(s, 0, "restarts"), r0 + 1);
    itest_stop(s);
}

/* ---- the same results warm and cold ---- */

struct same_case {
    const char *name, *code;
    int timeout;
    bool small; /* under the "small" policy (128 MiB) */
};

/* What differs by nature between two runs, or by mode on purpose. */
static void strip_volatile(json_t *j)
{
    json_t *res = json_object_get(j, "resources");
    json_object_del(j, "execution_id");
    json_object_del(j, "execution_time");
    json_object_del(res, "cpu_time");
    json_object_del(res, "max_rss_kb");
    json_object_del(res, "mode");
}

/* Run c on the warm server w (once it serves warm) and on the cold one;
 * both results must match but for strip_volatile's fields. */
static void same_on_both(struct itest_server *w, struct itest_server *c,
                         const char *wkey, const char *ckey,
                         const struct same_case *k)
{
    struct itest_resp rw, rc;
    CHECK(itest_wait_exec_mode(w, "warm", 60000));
    run_code(w, k->small ? wkey : w->admin_key, "same", k->code, k->timeout,
             NULL, &rw);
    run_code(c, k->small ? ckey : c->admin_key, "same", k->code, k->timeout,
             NULL, &rc);
    CHECK_STATUS(&rw, 200);
    CHECK_STATUS(&rc, 200);
    CHECKF(MODE_OF(&rw) && !strcmp(MODE_OF(&rw), "warm"), "%s: ran %s", k->name,
           MODE_OF(&rw));
    CHECKF(MODE_OF(&rc) && !strcmp(MODE_OF(&rc), "cold"), "%s: ran %s", k->name,
           MODE_OF(&rc));
    if (rw.json && rc.json) {
        strip_volatile(rw.json);
        strip_volatile(rc.json);
        char *a = json_dumps(rw.json, JSON_SORT_KEYS | JSON_INDENT(1));
        char *b = json_dumps(rc.json, JSON_SORT_KEYS | JSON_INDENT(1));
        CHECKF(json_equal(rw.json, rc.json),
               "%s: warm and cold differ:\n"
               "---- warm\n%s\n---- cold\n%s",
               k->name, a, b);
        free(a);
        free(b);
    }
    itest_resp_release(&rw);
    itest_resp_release(&rc);
}

static const char small_policy[] = "policy.small.memory = 128M\n"
                                   "policy.small.timeout = 20s\n";

/* Both servers with the "small" policy and a key of it. */
static bool start_pair(struct itest_server **w, struct itest_server **c,
                       char **wkey, char **ckey)
{
    const char *wargs[] = {"--exec-mode", "warm", "--exec-slots", "1", NULL};
    const char *cargs[] = {"--exec-mode", "cold", "--exec-slots", "1", NULL};
    struct itest_opts wo = {.args = wargs, .config = small_policy};
    struct itest_opts co = {.args = cargs, .config = small_policy};
    *w = itest_start(&wo);
    *c = *w ? itest_start(&co) : NULL;
    *wkey = *c ? key_with_policy(*w, "small", "small", true) : NULL;
    *ckey = *wkey ? key_with_policy(*c, "small", "small", true) : NULL;
    return *ckey != NULL;
}

static void run_same_cases(const struct same_case *cases, size_t n)
{
    struct itest_server *w = NULL, *c = NULL;
    char *wkey = NULL, *ckey = NULL;
    bool ok = start_pair(&w, &c, &wkey, &ckey);
    for (size_t i = 0; ok && i < n; i++)
        same_on_both(w, c, wkey, ckey, &cases[i]);
    CHECK(ok);
    itest_stop(w);
    itest_stop(c);
    free(wkey);
    free(ckey);
}

/* How runs end: a timeout, a memory kill, an exception, and exits. */
static void same_results_warm_and_cold(void)
{
    static const struct same_case cases[] = {
        {"timeout", "print('start', flush=True)\nwhile True: pass\n", 1, false},
        {"sleeping timeout",
         "import time\nprint('a', flush=True)\ntime.sleep(30)\n", 1, false},
        {"memory kill",
         "print('start', flush=True)\n"
         "b = bytearray(512 << 20)\n"
         "b[::4096] = b'\\1' * len(range(0, len(b), 4096))\n"
         "print('survived')\n",
         20, true},
        {"exception", "x = 1\ny = 0\nprint('before')\nprint(x / y)\n", 0,
         false},
        {"exception in numpy",
         "import numpy as np\nnp.array([1, 2]).reshape(3)\n", 0, false},
        {"sys.exit(3)", "import sys\nprint('x')\nsys.exit(3)\n", 0, false},
        {"sys.exit('bye')", "import sys\nsys.exit('bye')\n", 0, false},
        {"os._exit(5)", "import os\nprint('hi', flush=True)\nos._exit(5)\n", 0,
         false},
        {"SIGTERM",
         "import os, signal\nos.kill(os.getpid(), "
         "signal.SIGTERM)\n",
         0, false},
        {"KeyboardInterrupt", "raise KeyboardInterrupt\n", 0, false},
        {"atexit and a thread",
         "import atexit, threading, time\n"
         "atexit.register(lambda: print('atexit'))\n"
         "threading.Thread(target=lambda: (time.sleep(0.2), "
         "print('thread'))).start()\n"
         "print('main')\n",
         0, false},
    };
    run_same_cases(cases, sizeof(cases) / sizeof(cases[0]));
}

/* What the code sees of its process: environment, limits, ids, cwd,
 * interpreter flags, and how deep it may recurse. */
static void same_view_warm_and_cold(void)
{
    static const struct same_case cases[] = {
        {"environment", "import os\nprint(sorted(os.environ.items()))\n", 0,
         false},
        {"process",
         "import os, sys\n"
         "print(sys.argv, sys.path, os.getcwd(), __name__, sys.flags)\n"
         "print(os.getuid(), os.getgid(), os.getgroups(), os.umask(0o22))\n"
         "print(sorted(os.listdir('/proc/self/fd')))\n",
         0, false},
        {"limits (timeout 10)",
         "import resource\n"
         "for n in sorted(dir(resource)):\n"
         "    if n.startswith('RLIMIT_'):\n"
         "        print(n, resource.getrlimit(getattr(resource, n)))\n",
         10, false},
        {"recursion depth", "def f(n):\n    return f(n + 1)\nf(0)\n", 0, false},
    };
    run_same_cases(cases, sizeof(cases) / sizeof(cases[0]));
}

TEST_MAIN(T(start_warm), T(no_leaks_across_requests),
          T(random_differs_between_runs), T(mode_per_policy),
          T(mode_reported_warm), T(stop_warm), T(mode_reported_cold),
          T(zygote_cannot_start), T(recycled_after_runs),
          T(recycled_after_timeout), T(same_results_warm_and_cold),
          T(same_view_warm_and_cold))
