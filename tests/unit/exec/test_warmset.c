/*
 * test_warmset.c - service/exec/warmset.c through warmset.h: module names,
 * what a run's imports count, the plan a new zygote is given (its order,
 * thresholds, floor, budget and known costs, its generation), the zygote's
 * report (accepted and applied, or rejected whole), decay and the bounded
 * table.  The constants copied here are warmset.c's (WARMSET_*).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "service/exec/warmset.h"
#include "test.h"

#define MIN_RUNS 3     /* WARMSET_MIN_RUNS */
#define HALF_LIFE 1000 /* WARMSET_HALF_LIFE */
#define TABLE 128      /* WARMSET_TABLE */
#define SHOWN 20       /* WARMSET_SHOWN */
#define MIB (1024 * 1024)

/* One run whose result.json "imports" is text (a JSON document). */
static bool note(struct ipd_warmset *ws, const char *text)
{
    json_t *doc = json_loads(text, JSON_DECODE_ANY, NULL);
    if (!doc)
        abort(); /* the test's own documents are JSON */
    bool changed = ipd_warmset_note(ws, doc);
    json_decref(doc);
    return changed;
}

/* n runs each importing text. */
static void note_n(struct ipd_warmset *ws, const char *text, int n)
{
    for (int i = 0; i < n; i++)
        note(ws, text);
}

/* The candidates a zygote starting now is given (IPD_WARM_CANDIDATES's
 * value), into out[IPD_WARMSET_ENV_MAX]. */
static const char *cands(struct ipd_warmset *ws, char *out)
{
    char env[IPD_WARMSET_ENV_MAX], budget[64];
    ipd_warmset_plan(ws, env, budget);
    snprintf(out, IPD_WARMSET_ENV_MAX, "%s",
             strncmp(env, "IPD_WARM_CANDIDATES=", 20) ? "(none)" : env + 20);
    return out;
}

/* A JSON array of strings as "a,b" into out[IPD_WARMSET_ENV_MAX]. */
static const char *joined(const json_t *a, char *out)
{
    size_t i, len = 0;
    const json_t *v;
    out[0] = '\0';
    if (!json_is_array(a))
        return "(not an array)";
    json_array_foreach(a, i, v)
    {
        len += (size_t)snprintf(out + len, IPD_WARMSET_ENV_MAX - len, "%s%s",
                                i ? "," : "", json_string_value(v));
    }
    return out;
}

/* The status' plan as "a,b" into out. */
static const char *status_plan(struct ipd_warmset *ws, char *out)
{
    json_t *o = ipd_warmset_json(ws);
    joined(json_object_get(o, "plan"), out);
    json_decref(o);
    return out;
}

/* The status' entry for name (new reference) or NULL. */
static json_t *status_module(struct ipd_warmset *ws, const char *name)
{
    json_t *o = ipd_warmset_json(ws), *m, *found = NULL;
    size_t i;
    json_array_foreach(json_object_get(o, "modules"), i, m)
    {
        if (!strcmp(json_string_value(json_object_get(m, "module")), name))
            found = json_incref(m);
    }
    json_decref(o);
    return found;
}

/* The status' runs for name; -1 when it is not listed. */
static long long runs_of(struct ipd_warmset *ws, const char *name)
{
    json_t *m = status_module(ws, name);
    long long r = m ? json_integer_value(json_object_get(m, "runs")) : -1;
    json_decref(m);
    return r;
}

/* The status' state word for name into out[32] ("" when not listed). */
static const char *state_of(struct ipd_warmset *ws, const char *name, char *out)
{
    json_t *m = status_module(ws, name);
    snprintf(out, 32, "%s",
             m ? json_string_value(json_object_get(m, "state")) : "");
    json_decref(m);
    return out;
}

static long long status_int(struct ipd_warmset *ws, const char *key)
{
    json_t *o = ipd_warmset_json(ws);
    long long v = json_integer_value(json_object_get(o, key));
    json_decref(o);
    return v;
}

static bool report(struct ipd_warmset *ws, const char *text)
{
    char set[IPD_WARMSET_ENV_MAX];
    int64_t bytes = -1;
    return ipd_warmset_report(ws, text, strlen(text), set, sizeof(set), &bytes);
}

static bool name_ok(const char *s)
{
    return ipd_warmset_name_ok(s, strlen(s));
}

static void names(void)
{
    char n[IPD_WARMSET_NAME_MAX + 2];

    CHECK(name_ok("numpy"));
    CHECK(name_ok("scipy.stats"));
    CHECK(name_ok("_priv.Sub_2.x9"));
    CHECK(name_ok("A"));
    CHECK(!name_ok(""));
    CHECK(!name_ok("."));
    CHECK(!name_ok(".a"));
    CHECK(!name_ok("a."));
    CHECK(!name_ok("a..b"));
    CHECK(!name_ok("1abc"));
    CHECK(!name_ok("a.1b"));
    CHECK(!name_ok("a-b"));
    CHECK(!name_ok("a b"));
    CHECK(!name_ok("a/b"));
    CHECK(!name_ok("a,b"));
    CHECK(!name_ok("a=1"));
    CHECK(!name_ok("caf\xc3\xa9"));
    CHECK(!name_ok("\xc3\xa9t\xc3\xa9"));
    CHECK(!ipd_warmset_name_ok(NULL, 3));
    /* len is what counts: a NUL inside is not a name, a longer buffer is
     * read only to len. */
    CHECK(!ipd_warmset_name_ok("ab\0c", 4));
    CHECK(ipd_warmset_name_ok("ab.c", 2));
    CHECK(!ipd_warmset_name_ok("ab.c", 3));
    /* IPD_WARMSET_NAME_MAX bytes, not one more. */
    memset(n, 'a', sizeof(n));
    n[IPD_WARMSET_NAME_MAX] = '\0';
    CHECK(name_ok(n));
    n[50] = '.';
    CHECK(name_ok(n));
    n[IPD_WARMSET_NAME_MAX] = 'a';
    n[IPD_WARMSET_NAME_MAX + 1] = '\0';
    CHECK(!name_ok(n));
}

static void counting(void)
{
    struct ipd_warmset *ws = ipd_warmset_new("", MIB, 1000);
    char buf[IPD_WARMSET_ENV_MAX];

    /* A name twice in one run counts once. */
    note_n(ws, "[\"a\",\"a\",\"b\",\"a\"]", 3);
    CHECK_INT(runs_of(ws, "a"), 3);
    CHECK_INT(runs_of(ws, "b"), 3);
    CHECK_INT(status_int(ws, "runs_counted"), 3);

    /* Non-strings and invalid names are ignored, the run is counted. */
    note(ws, "[1, null, {}, [\"c\"], \"1bad\", \"a..b\", \"\", \"c\"]");
    CHECK_INT(runs_of(ws, "c"), 1);
    CHECK_INT(runs_of(ws, "1bad"), -1);
    CHECK_INT(runs_of(ws, "a..b"), -1);
    CHECK_INT(status_int(ws, "runs_counted"), 4);

    /* Anything but an array counts a run with no imports. */
    CHECK(!ipd_warmset_note(ws, NULL));
    note(ws, "{\"a\": 1}");
    note(ws, "\"a\"");
    note(ws, "7");
    CHECK_INT(status_int(ws, "runs_counted"), 8);
    CHECK_INT(runs_of(ws, "a"), 3);
    ipd_warmset_free(ws);

    /* More than 32 names: only the first 32 (valid, distinct) count.
     * _x and b00..b30 first, then a0..a7: listed by name at equal counts,
     * any a counted would be shown before every b. */
    ws = ipd_warmset_new("", MIB, 1000);
    size_t len = (size_t)snprintf(buf, sizeof(buf), "[\"_x\",\"1bad\",\"_x\"");
    for (int i = 0; i < IPD_WARMSET_NAMES_PER_RUN - 1; i++)
        len += (size_t)snprintf(buf + len, sizeof(buf) - len, ",\"b%02d\"", i);
    for (int i = 0; i < 8; i++)
        len += (size_t)snprintf(buf + len, sizeof(buf) - len, ",\"a%d\"", i);
    snprintf(buf + len, sizeof(buf) - len, "]");
    note(ws, buf);
    CHECK_INT(runs_of(ws, "_x"), 1);
    CHECK_INT(runs_of(ws, "b00"), 1);
    CHECK_INT(runs_of(ws, "b18"), 1); /* _x and b00..b18: the 20 shown */
    for (int i = 0; i < 8; i++) {
        char a[8];
        snprintf(a, sizeof(a), "a%d", i);
        CHECKF(runs_of(ws, a) == -1, "%s counted past the first 32", a);
    }
    /* Which of the 32 is counted last (b30) shows when the shown ones
     * are imported again. */
    note(ws, "[\"b30\"]");
    CHECK_INT(runs_of(ws, "b30"), 2);
    ipd_warmset_free(ws);
}

static void plan_thresholds(void)
{
    struct ipd_warmset *ws = ipd_warmset_new("", MIB, 1);
    char buf[IPD_WARMSET_ENV_MAX], env[IPD_WARMSET_ENV_MAX], budget[64];

    /* Nothing before WARMSET_MIN_RUNS runs imported it. */
    for (int i = 1; i < MIN_RUNS; i++)
        CHECK(!note(ws, "[\"a\"]"));
    CHECK_STR(cands(ws, buf), "");
    CHECK_INT(ipd_warmset_plan_gen(ws), 0);
    CHECK(note(ws, "[\"a\"]"));
    CHECK_INT(ipd_warmset_plan(ws, env, budget), 1);
    CHECK_STR(env, "IPD_WARM_CANDIDATES=a");
    CHECK_STR(budget, "IPD_WARM_BUDGET_KB=1024");
    CHECK_STR(status_plan(ws, buf), "a");
    ipd_warmset_free(ws);

    /* The share: imported by at least 2% of the runs counted (3 of 150
     * is, 3 of 151 is not). */
    ws = ipd_warmset_new("", MIB, 1000);
    note_n(ws, "[\"rare\"]", 3);
    note_n(ws, "[]", 147);
    CHECK_STR(cands(ws, buf), "rare");
    note(ws, "[]");
    CHECK_STR(cands(ws, buf), "");
    ipd_warmset_free(ws);

    /* The floor's names are never candidates (spaces around them
     * aside). */
    ws = ipd_warmset_new("numpy, pandas ,matplotlib", MIB, 1000);
    note_n(ws, "[\"numpy\",\"pandas\",\"matplotlib\",\"scipy\",\"numpy.x\"]",
           5);
    CHECK_STR(cands(ws, buf), "numpy.x,scipy");
    ipd_warmset_free(ws);
}

static void plan_order_and_gen(void)
{
    struct ipd_warmset *ws = ipd_warmset_new("", MIB, 1);
    char buf[IPD_WARMSET_ENV_MAX], env[IPD_WARMSET_ENV_MAX], budget[64];
    uint64_t gen;

    /* note() is true exactly when a look changes the plan. */
    CHECK(!note(ws, "[\"b\",\"c\"]"));
    CHECK(!note(ws, "[\"b\",\"c\"]"));
    CHECK(note(ws, "[\"b\",\"c\"]"));
    CHECK_INT(ipd_warmset_plan_gen(ws), 1);
    CHECK_STR(status_plan(ws, buf), "b,c"); /* equal counts: by name */
    CHECK(!note(ws, "[\"b\",\"c\"]"));
    CHECK(!note(ws, "[\"b\"]"));
    CHECK_INT(ipd_warmset_plan_gen(ws), 1);
    CHECK(!note(ws, "[\"a\"]"));
    CHECK(!note(ws, "[\"a\"]"));
    CHECK(note(ws, "[\"a\"]")); /* b 5, c 4, a 3 */
    CHECK_INT(ipd_warmset_plan_gen(ws), 2);
    gen = ipd_warmset_plan(ws, env, budget);
    CHECK_INT(gen, 2);
    CHECK_STR(env, "IPD_WARM_CANDIDATES=b,c,a");
    /* The same names in another order: the plan's order follows the
     * counts, but its generation stays (renewing the zygotes for an
     * order would flap them as counts overtake one another). */
    note_n(ws, "[\"a\"]", 1); /* a 4 = c 4: a first by name */
    CHECK_STR(cands(ws, buf), "b,a,c");
    CHECK_STR(status_plan(ws, buf), "b,a,c");
    CHECK_INT(ipd_warmset_plan_gen(ws), 2);
    CHECK(!note(ws, "[\"a\"]")); /* a 5 = b 5: a first */
    CHECK_STR(cands(ws, buf), "a,b,c");
    CHECK(!note(ws, "[\"a\"]"));
    CHECK_INT(ipd_warmset_plan_gen(ws), 2);
    ipd_warmset_free(ws);

    /* With adapt_runs 4 the plan is looked at every 4th run only. */
    ws = ipd_warmset_new("", MIB, 4);
    CHECK(!note(ws, "[\"a\"]"));
    CHECK(!note(ws, "[\"a\"]"));
    CHECK(!note(ws, "[\"a\"]"));
    CHECK_INT(ipd_warmset_plan_gen(ws), 0);
    CHECK_STR(status_plan(ws, buf), "");
    CHECK(note(ws, "[]"));
    CHECK_INT(ipd_warmset_plan_gen(ws), 1);
    CHECK_INT(status_int(ws, "adapt_runs"), 4);
    ipd_warmset_free(ws);

    /* Budget 0: adaptation off. */
    ws = ipd_warmset_new("", 0, 1);
    for (int i = 0; i < 10; i++)
        CHECK(!note(ws, "[\"a\",\"b\"]"));
    strcpy(env, "x");
    strcpy(budget, "x");
    CHECK_INT(ipd_warmset_plan(ws, env, budget), 0);
    CHECK_STR(env, "");
    CHECK_STR(budget, "");
    CHECK_INT(ipd_warmset_plan_gen(ws), 0);
    json_t *o = ipd_warmset_json(ws);
    CHECK(json_is_false(json_object_get(o, "enabled")));
    CHECK_INT(json_array_size(json_object_get(o, "plan")), 0);
    json_decref(o);
    ipd_warmset_free(ws);
    ws = ipd_warmset_new("", -5, 1);
    CHECK_INT(status_int(ws, "budget_bytes"), 0);
    ipd_warmset_free(ws);

    /* At most IPD_WARMSET_PLAN_MAX candidates. */
    ws = ipd_warmset_new("", 100LL * MIB, 1000);
    for (int i = 0; i < 20; i++) {
        char one[32];
        snprintf(one, sizeof(one), "[\"m%02d\"]", i);
        note_n(ws, one, 30 - i);
    }
    CHECK_STR(cands(ws, buf),
              "m00,m01,m02,m03,m04,m05,m06,m07,m08,m09,m10,m11,m12,m13,m14,"
              "m15");
    ipd_warmset_free(ws);
}

static void plan_costs(void)
{
    /* 1 MiB: a (300 KiB) and c (700 KiB) fit, b (2000 KiB) does not. */
    struct ipd_warmset *ws = ipd_warmset_new("", MIB, 1000);
    char buf[IPD_WARMSET_ENV_MAX], set[IPD_WARMSET_ENV_MAX], st[32];
    int64_t bytes = -1;
    const char *r = "{\"floor_kib\":50000,\"modules\":[[\"a\",\"warm\",300],"
                    "[\"b\",\"over_budget\",2000],[\"c\",\"warm\",700]]}";

    note_n(ws, "[\"a\",\"b\",\"c\",\"d\"]", 3);
    note_n(ws, "[\"a\",\"b\"]", 2);
    note_n(ws, "[\"a\"]", 2); /* a 7, b 5, c 3, d 3 */
    CHECK_STR(cands(ws, buf), "a,b,c,d");
    CHECK(ipd_warmset_report(ws, r, strlen(r), set, sizeof(set), &bytes));
    CHECK_STR(set, "a,c");
    CHECK_INT(bytes, 1000 * 1024);
    CHECK_STR(cands(ws, buf), "a=300,c=700,d");
    CHECK_STR(state_of(ws, "a", st), "warm");
    CHECK_STR(state_of(ws, "b", st), "over_budget");
    CHECK_STR(state_of(ws, "d", st), "planned");
    json_t *m = status_module(ws, "b");
    CHECK_INT(json_integer_value(json_object_get(m, "bytes")), 2000 * 1024);
    json_decref(m);
    json_t *o = ipd_warmset_json(ws);
    CHECK_STR(joined(json_object_get(o, "set"), buf), "a,c");
    CHECK_INT(json_integer_value(json_object_get(o, "set_bytes")), 1000 * 1024);
    CHECK_INT(json_integer_value(json_object_get(o, "floor_bytes")),
              50000LL * 1024);
    json_decref(o);
    int64_t mods = -1, gb = -1;
    ipd_warmset_gauges(ws, &mods, &gb);
    CHECK_INT(mods, 2);
    CHECK_INT(gb, 1000 * 1024);

    /* A cost that no longer fits what is left is left out, the next that
     * does is kept (c now 800 KiB: a 300 + c 800 > 1024). */
    r = "{\"floor_kib\":1,\"modules\":[[\"c\",\"warm\",800]]}";
    CHECK(report(ws, r));
    CHECK_STR(cands(ws, buf), "a=300,d");
    /* A known cost of 0 ("loaded": already there) is given as such. */
    r = "{\"floor_kib\":1,\"modules\":[[\"d\",\"loaded\",0]]}";
    CHECK(report(ws, r));
    CHECK_STR(cands(ws, buf), "a=300,d=0");
    ipd_warmset_free(ws);
}

/* text is rejected whole: nothing applied, the status unchanged. */
static void rejected(const char *text, size_t len)
{
    struct ipd_warmset *ws = ipd_warmset_new("", MIB, 1);
    char set[IPD_WARMSET_ENV_MAX] = "x", buf[IPD_WARMSET_ENV_MAX], st[32];
    int64_t bytes = -1;

    note_n(ws, "[\"a\",\"b\"]", MIN_RUNS);
    CHECKF(!ipd_warmset_report(ws, text, len, set, sizeof(set), &bytes),
           "accepted: %.300s", text);
    CHECK_STR(set, "");
    CHECK_INT(bytes, 0);
    json_t *o = ipd_warmset_json(ws);
    CHECK(json_object_get(o, "set") == NULL);
    json_decref(o);
    CHECK_STR(state_of(ws, "a", st), "planned");
    CHECK_STR(cands(ws, buf), "a,b");
    ipd_warmset_free(ws);
}

static void rejected_s(const char *text)
{
    rejected(text, strlen(text));
}

static void report_rejected(void)
{
    char big[IPD_WARMSET_REPORT_MAX + 64];

    rejected_s("{\"floor_kib\":1,\"modules\":[[\"a\",\"warm\",1]],\"x\":1}");
    rejected_s("{\"floor_kib\":1,\"modules\":[[\"a\",\"warm\",1]],"
               "\"modules\":[]}");
    rejected_s("{\"floor_kib\":1,\"floor_kib\":1,\"modules\":[]}");
    rejected_s("{\"modules\":[[\"a\",\"warm\",1]]}");
    rejected_s("{\"floor_kib\":1}");
    rejected_s("{\"floor_kib\":\"1\",\"modules\":[]}");
    rejected_s("{\"floor_kib\":1.5,\"modules\":[]}");
    rejected_s("{\"floor_kib\":-1,\"modules\":[]}");
    rejected_s("{\"floor_kib\":1,\"modules\":{}}");
    rejected_s("{\"floor_kib\":1,\"modules\":[\"a\"]}");
    rejected_s("{\"floor_kib\":1,\"modules\":[[\"a\",\"warm\"]]}");
    rejected_s("{\"floor_kib\":1,\"modules\":[[\"a\",\"warm\",1,2]]}");
    rejected_s("{\"floor_kib\":1,\"modules\":[[1,\"warm\",1]]}");
    rejected_s("{\"floor_kib\":1,\"modules\":[[\"a\",1,1]]}");
    rejected_s("{\"floor_kib\":1,\"modules\":[[\"a\",\"warm\",\"1\"]]}");
    rejected_s("{\"floor_kib\":1,\"modules\":[[\"a\",\"warm\",1.0]]}");
    rejected_s("{\"floor_kib\":1,\"modules\":[[\"a\",\"warm\",null]]}");
    rejected_s("{\"floor_kib\":1,\"modules\":[[\"a\",\"warm\",-1]]}");
    rejected_s("{\"floor_kib\":1,\"modules\":[[\"a\",\"ok\",1]]}");
    rejected_s("{\"floor_kib\":1,\"modules\":[[\"a\",\"WARM\",1]]}");
    rejected_s("{\"floor_kib\":1,\"modules\":[[\"a\",\"refused\",1]]}");
    rejected_s("{\"floor_kib\":1,\"modules\":[[\"1a\",\"warm\",1]]}");
    rejected_s("{\"floor_kib\":1,\"modules\":[[\"a.\",\"warm\",1]]}");
    /* A module twice (its bytes would count twice). */
    rejected_s("{\"floor_kib\":1,\"modules\":[[\"a\",\"warm\",1],"
               "[\"a\",\"warm\",1]]}");
    /* One bad entry after a good one: nothing of it applied. */
    rejected_s("{\"floor_kib\":1,\"modules\":[[\"a\",\"crashed\",0],"
               "[\"b\",\"warm\",-1]]}");
    rejected_s("{\"floor_kib\":1,\"modules\":[[\"a\",\"crashed\",0],"
               "[\"b\",\"warm\",1,\"x\"]]}");
    /* Not JSON, or not an object. */
    rejected_s("");
    rejected_s("{");
    rejected_s("[]");
    rejected_s("null");
    rejected_s("{\"floor_kib\":1,\"modules\":[]} x");
    static const char nul[] = "{\"floor_kib\":1,\"modules\":[]}";
    rejected(nul, sizeof(nul)); /* its NUL too */
    rejected(NULL, 0);

    /* More than IPD_WARMSET_PLAN_MAX modules. */
    size_t len =
        (size_t)snprintf(big, sizeof(big), "{\"floor_kib\":1,\"modules\":[");
    for (int i = 0; i <= IPD_WARMSET_PLAN_MAX; i++)
        len += (size_t)snprintf(big + len, sizeof(big) - len,
                                "%s[\"m%d\",\"warm\",1]", i ? "," : "", i);
    snprintf(big + len, sizeof(big) - len, "]}");
    rejected_s(big);

    /* IPD_WARMSET_REPORT_MAX bytes are read, not one more (spaces pad a
     * well-formed report). */
    const char *ok = "{\"floor_kib\":1,\"modules\":[[\"a\",\"warm\",1]]}";
    memset(big, ' ', sizeof(big));
    memcpy(big, ok, strlen(ok));
    rejected(big, IPD_WARMSET_REPORT_MAX + 1);
    struct ipd_warmset *ws = ipd_warmset_new("", MIB, 1);
    note_n(ws, "[\"a\"]", MIN_RUNS);
    CHECK(ipd_warmset_report(ws, big, IPD_WARMSET_REPORT_MAX, NULL, 0, NULL));
    char st[32];
    CHECK_STR(state_of(ws, "a", st), "warm");
    ipd_warmset_free(ws);
}

static void report_accepted(void)
{
    struct ipd_warmset *ws = ipd_warmset_new("", MIB, 1);
    char buf[IPD_WARMSET_ENV_MAX], set[IPD_WARMSET_ENV_MAX], st[32];
    int64_t bytes = -1;
    const char *r;

    /* Every state word, and names never counted (ignored). */
    note_n(ws, "[\"a\",\"b\",\"c\",\"d\",\"e\",\"f\",\"g\",\"h\"]", MIN_RUNS);
    r = "{\"floor_kib\":0,\"modules\":[[\"a\",\"warm\",10],"
        "[\"b\",\"loaded\",0],[\"c\",\"over_budget\",5000],"
        "[\"d\",\"not_importable\",0],[\"e\",\"crashed\",7],"
        "[\"f\",\"threads\",3],[\"g\",\"timeout\",0],[\"h\",\"stdlib\",0],"
        "[\"zz\",\"warm\",99]]}";
    CHECK(ipd_warmset_report(ws, r, strlen(r), set, sizeof(set), &bytes));
    CHECK_STR(set, "a,b");
    CHECK_INT(bytes, 10 * 1024);
    CHECK_STR(state_of(ws, "a", st), "warm");
    CHECK_STR(state_of(ws, "b", st), "warm");
    CHECK_STR(state_of(ws, "c", st), "over_budget");
    const char *why[] = {"d", "not_importable", "e", "crashed",
                         "f", "threads",        "h", "stdlib"};
    for (size_t i = 0; i < sizeof(why) / sizeof(why[0]); i += 2) {
        json_t *m = status_module(ws, why[i]);
        CHECK_STR(json_string_value(json_object_get(m, "state")), "refused");
        CHECK_STR(json_string_value(json_object_get(m, "why")), why[i + 1]);
        CHECK(json_object_get(m, "bytes") == NULL);
        json_decref(m);
    }
    CHECK_INT(runs_of(ws, "zz"), -1);
    /* A probe's timeout (a loaded host?) is not a refusal yet: g is
     * tried again, and refused at its third. */
    CHECK_STR(state_of(ws, "g", st), "planned");
    /* Refused ones leave the plan at once, without a new generation (a
     * slot recycled for them would get the same plan). */
    CHECK_INT(ipd_warmset_plan_gen(ws), 1);
    CHECK_STR(status_plan(ws, buf), "a,b,g");
    CHECK_STR(cands(ws, buf), "a=10,b=0,g");
    /* ... and stay out while runs import them. */
    CHECK(!note(ws, "[\"d\",\"e\"]"));
    CHECK_STR(cands(ws, buf), "a=10,b=0,g");
    r = "{\"floor_kib\":0,\"modules\":[[\"g\",\"timeout\",0]]}";
    CHECK(ipd_warmset_report(ws, r, strlen(r), set, sizeof(set), &bytes));
    CHECK_STR(cands(ws, buf), "a=10,b=0,g");
    CHECK(ipd_warmset_report(ws, r, strlen(r), set, sizeof(set), &bytes));
    CHECK_STR(state_of(ws, "g", st), "refused");
    CHECK_STR(cands(ws, buf), "a=10,b=0");

    /* The venv changed: every candidate is probed again. */
    ipd_warmset_venv_changed(ws);
    CHECK_STR(cands(ws, buf), "d,e,a,b,c,f,g,h");
    CHECK_STR(state_of(ws, "d", st), "counted"); /* until the next look */
    CHECK(note(ws, "[]"));
    CHECK_INT(ipd_warmset_plan_gen(ws), 2);
    CHECK_STR(state_of(ws, "d", st), "planned");

    /* A later report replaces the set. */
    r = "{\"floor_kib\":0,\"modules\":[]}";
    CHECK(ipd_warmset_report(ws, r, strlen(r), set, sizeof(set), &bytes));
    CHECK_STR(set, "");
    CHECK_INT(bytes, 0);
    json_t *o = ipd_warmset_json(ws);
    CHECK_INT(json_array_size(json_object_get(o, "set")), 0);
    CHECK_INT(json_integer_value(json_object_get(o, "set_bytes")), 0);
    json_decref(o);

    /* No warm set: a report is still checked, and refused without one. */
    CHECK(!ipd_warmset_report(NULL, r, strlen(r), set, sizeof(set), &bytes));
    ipd_warmset_free(ws);
}

static void decay(void)
{
    struct ipd_warmset *ws = ipd_warmset_new("", MIB, 100000);

    note_n(ws, "[\"a\"]", 10);
    note(ws, "[\"rare\"]");
    note_n(ws, "[]", HALF_LIFE - 12);
    CHECK_INT(runs_of(ws, "a"), 10);
    CHECK_INT(status_int(ws, "runs_counted"), HALF_LIFE - 1);
    note(ws, "[]"); /* the HALF_LIFE-th run: halved */
    CHECK_INT(status_int(ws, "runs_counted"), HALF_LIFE / 2);
    CHECK_INT(runs_of(ws, "a"), 5);
    CHECK_INT(runs_of(ws, "rare"), 1); /* 0.5, shown rounded */
    note_n(ws, "[]", HALF_LIFE);
    CHECK_INT(runs_of(ws, "rare"), -1); /* 0.25: gone */
    CHECK_INT(runs_of(ws, "a"), 3);     /* 2.5 */
    CHECK_INT(status_int(ws, "runs_counted"), 750);
    ipd_warmset_free(ws);
}

static void table_bound(void)
{
    struct ipd_warmset *ws = ipd_warmset_new("", MIB, 1000);
    char one[32];

    note_n(ws, "[\"hot\"]", 8);
    for (int i = 0; i < 10; i++) {
        snprintf(one, sizeof(one), "[\"warm%d\"]", i);
        note_n(ws, one, 5);
    }
    /* Far more names once each than the table holds: what was counted
     * more than runs / TABLE times stays (the Space-Saving guarantee: 442
     * runs, 3.5 per place; what the plan needs, 2% of the runs, is far
     * more). */
    for (int i = 0; i < 3 * TABLE; i++) {
        snprintf(one, sizeof(one), "[\"cold%03d\"]", i);
        note(ws, one);
    }
    CHECK_INT(runs_of(ws, "hot"), 8);
    for (int i = 0; i < 10; i++) {
        snprintf(one, sizeof(one), "warm%d", i);
        CHECKF(runs_of(ws, one) == 5, "%s evicted", one);
    }
    json_t *o = ipd_warmset_json(ws);
    CHECK_INT(json_array_size(json_object_get(o, "modules")), SHOWN);
    json_decref(o);
    /* A name counted again after its entry went is shown from 1 (what is
     * sure of it, not what it inherited). */
    note(ws, "[\"cold000\"]");
    note(ws, "[\"cold000\"]");
    CHECK_INT(runs_of(ws, "cold000"), 2);
    ipd_warmset_free(ws);
}

/* A full table of names imported once, then a module every other run
 * imports, between runs that each import a name never seen before (one
 * tenant's generated names): the module reaches the plan. */
static void table_newcomer(void)
{
    struct ipd_warmset *ws = ipd_warmset_new("", MIB, 1000);
    char one[32], buf[IPD_WARMSET_ENV_MAX];

    for (int i = 0; i < TABLE; i++) {
        snprintf(one, sizeof(one), "[\"old%03d\"]", i);
        note(ws, one);
    }
    for (int i = 0; i < 10; i++) {
        note(ws, "[\"popular\"]");
        snprintf(one, sizeof(one), "[\"new%03d\"]", i);
        note(ws, one);
    }
    CHECKF(runs_of(ws, "popular") >= MIN_RUNS, "popular counted %lld times",
           runs_of(ws, "popular"));
    CHECK_STR(cands(ws, buf), "popular");
    ipd_warmset_free(ws);
}

static void list_json(void)
{
    char buf[IPD_WARMSET_ENV_MAX];
    json_t *a = ipd_warmset_list_json("a,,b.c,");
    CHECK_STR(joined(a, buf), "a,b.c");
    json_decref(a);
    a = ipd_warmset_list_json("");
    CHECK_INT(json_array_size(a), 0);
    json_decref(a);
    CHECK_INT(ipd_warmset_plan_gen(NULL), 0);
    CHECK(!ipd_warmset_note(NULL, NULL));
    ipd_warmset_venv_changed(NULL);
    ipd_warmset_free(NULL);
}

/* What a child parked now rehearses: pandas and chart until 20 runs are
 * counted, then when their modules (or submodules) are imported by one in
 * 32 of the recent runs ("chart": matplotlib or seaborn); the adaptive
 * set's groups always (the zygote has their modules only when runs use
 * them). */
static void rehearsal(void)
{
    char out[IPD_WARMSET_REHEARSE_MAX];
    const char *all = "pandas,chart,scipy,sympy,seaborn,sklearn,statsmodels";
    const char *adaptive = "scipy,sympy,seaborn,sklearn,statsmodels";
    struct ipd_warmset *ws = ipd_warmset_new("numpy,pandas,matplotlib", 0, 0);

    ipd_warmset_rehearsal(ws, out, sizeof out);
    CHECK_STR(out, all);
    note_n(ws, "[]", IPD_WARMSET_REHEARSE_MIN_RUNS - 1);
    ipd_warmset_rehearsal(ws, out, sizeof out);
    CHECK_STR(out, all);
    note(ws, "[]"); /* 20 runs, none importing anything */
    ipd_warmset_rehearsal(ws, out, sizeof out);
    CHECK_STR(out, adaptive);
    /* 2 of 64 import pandas and matplotlib.pyplot: exactly one in 32;
     * scipy once: less. */
    note_n(ws, "[\"pandas\", \"matplotlib.pyplot\"]", 2);
    note(ws, "[\"scipy\", \"scipy.stats\"]");
    note(ws, "[\"sklearnx\"]"); /* not sklearn */
    note_n(ws, "[]", 40);
    ipd_warmset_rehearsal(ws, out, sizeof out);
    CHECK_STR(out, "pandas,chart,scipy,sympy,seaborn,sklearn,statsmodels");
    /* seaborn alone calls for the chart's; pandas falls below one in 32
     * (2 of 67). */
    note_n(ws, "[\"seaborn\"]", 3);
    ipd_warmset_rehearsal(ws, out, sizeof out);
    CHECK_STR(out, "chart,scipy,sympy,seaborn,sklearn,statsmodels");
    ipd_warmset_free(ws);

    ipd_warmset_rehearsal(NULL, out, sizeof out);
    CHECK_STR(out, "");
}

TEST_MAIN(T(rehearsal), T(names), T(counting), T(plan_thresholds),
          T(plan_order_and_gen), T(plan_costs), T(report_rejected),
          T(report_accepted), T(decay), T(table_bound), T(table_newcomer),
          T(list_json))
