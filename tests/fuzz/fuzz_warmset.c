/*
 * fuzz_warmset.c - the adaptive warm set's two hostile inputs
 * (service/exec/warmset.h): a zygote's report (ipd_warmset_report on the
 * bytes) and a run's "imports" (the bytes as JSON, ipd_warmset_note on
 * them, enough times to reach the plan).  No crash, and whatever is
 * taken in leaves the status and the plan in their shape: valid names, at
 * most IPD_WARMSET_PLAN_MAX candidates, no negative bytes.
 */
#include <stdint.h>
#include <string.h>

#include "service/common/ipd.h"
#include "service/exec/warmset.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static bool name_ok(const json_t *s)
{
    return json_is_string(s) &&
           ipd_warmset_name_ok(json_string_value(s), json_string_length(s));
}

/* A list of names ("a,b" as JSON), each valid, at most max. */
static void check_names(const json_t *a, size_t max)
{
    size_t i;
    const json_t *v;

    IPD_ASSERT(json_is_array(a) && json_array_size(a) <= max);
    json_array_foreach(a, i, v) IPD_ASSERT(name_ok(v));
}

static void check_status(struct ipd_warmset *ws, bool reported)
{
    json_t *o = ipd_warmset_json(ws), *m;
    size_t i;
    static const char *const states[] = {"warm", "over_budget", "refused",
                                         "planned", "counted"};

    check_names(json_object_get(o, "plan"), IPD_WARMSET_PLAN_MAX);
    IPD_ASSERT(json_is_array(json_object_get(o, "modules")));
    json_array_foreach(json_object_get(o, "modules"), i, m)
    {
        const char *st = json_string_value(json_object_get(m, "state"));
        const json_t *b = json_object_get(m, "bytes");
        bool known = false;
        IPD_ASSERT(name_ok(json_object_get(m, "module")));
        IPD_ASSERT(json_integer_value(json_object_get(m, "runs")) >= 0);
        for (size_t k = 0; st && k < sizeof(states) / sizeof(states[0]); k++)
            known = known || !strcmp(st, states[k]);
        IPD_ASSERT(known);
        IPD_ASSERT(!b || json_integer_value(b) >= 0);
    }
    IPD_ASSERT(reported == (json_object_get(o, "set") != NULL));
    if (reported) {
        check_names(json_object_get(o, "set"), IPD_WARMSET_PLAN_MAX);
        IPD_ASSERT(json_integer_value(json_object_get(o, "set_bytes")) >= 0);
        IPD_ASSERT(json_integer_value(json_object_get(o, "floor_bytes")) >= 0);
    }
    json_decref(o);
}

/* IPD_WARM_CANDIDATES=name[=KiB],... with valid names, at most
 * IPD_WARMSET_PLAN_MAX of them. */
static void check_plan(struct ipd_warmset *ws)
{
    char env[IPD_WARMSET_ENV_MAX], budget[64];
    size_t n = 0;

    ipd_warmset_plan(ws, env, budget);
    IPD_ASSERT(!strncmp(env, "IPD_WARM_CANDIDATES=", 20));
    IPD_ASSERT(!strcmp(budget, "IPD_WARM_BUDGET_KB=1024"));
    for (const char *p = env + 20; *p; n++) {
        size_t len = strcspn(p, ",=");
        IPD_ASSERT(ipd_warmset_name_ok(p, len));
        p += len;
        if (*p == '=') {
            size_t d = strspn(++p, "0123456789");
            IPD_ASSERT(d > 0 && (p[d] == ',' || p[d] == '\0'));
            p += d;
        }
        p += *p == ',';
    }
    IPD_ASSERT(n <= IPD_WARMSET_PLAN_MAX);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct ipd_warmset *ws = ipd_warmset_new("numpy", 1024 * 1024, 1);
    json_t *seen =
        json_loads("[\"a\",\"b\",\"numpy\",\"scipy.stats\"]", 0, NULL);
    char set[IPD_WARMSET_ENV_MAX];
    int64_t bytes = -1;

    /* The bytes as a report, against a plan of known names. */
    for (int i = 0; i < 3; i++)
        ipd_warmset_note(ws, seen);
    bool ok = ipd_warmset_report(ws, (const char *)data, size, set, sizeof(set),
                                 &bytes);
    IPD_ASSERT(ok || (set[0] == '\0' && bytes == 0));
    IPD_ASSERT(bytes >= 0 && strlen(set) < sizeof(set));
    check_status(ws, ok);
    check_plan(ws);

    /* The bytes as a run's imports, enough runs for a look to take them
     * into the plan, then the report again on what they named. */
    json_t *imports = json_loadb((const char *)data, size,
                                 JSON_DECODE_ANY | JSON_ALLOW_NUL, NULL);
    for (int i = 0; i < 4; i++)
        ipd_warmset_note(ws, imports);
    json_decref(imports);
    check_status(ws, ok);
    check_plan(ws);
    ok =
        ipd_warmset_report(ws, (const char *)data, size, NULL, 0, &bytes) || ok;
    check_status(ws, ok);
    check_plan(ws);
    ipd_warmset_venv_changed(ws);
    check_plan(ws);

    json_decref(seen);
    ipd_warmset_free(ws);
    return 0;
}
