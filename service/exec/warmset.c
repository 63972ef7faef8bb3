/*
 * warmset.c - the adaptive warm set: counts of what runs import, the plan
 * each new zygote is given, and what the zygotes report back (warmset.h).
 */
#include "warmset.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/util.h"

#define WARMSET_TABLE 128      /* names counted at most */
#define WARMSET_HALF_LIFE 1000 /* runs after which every count is halved */
#define WARMSET_MIN_RUNS 3     /* a candidate was imported by this many */
#define WARMSET_MIN_SHARE 2    /* ... and by this % of the runs counted */
#define WARMSET_SHOWN 20       /* names in the status */
#define WARMSET_TIMEOUTS 3     /* probe timeouts before a name is refused */

enum ws_state {
    WS_NEW,     /* no zygote has tried it */
    WS_WARM,    /* the newest zygote to try it imported it */
    WS_OVER,    /* it did not fit the budget (bytes: its cost) */
    WS_REFUSED, /* it does not import cleanly (why) */
};

struct ws_entry {
    char name[IPD_WARMSET_NAME_MAX + 1];
    double runs;   /* runs that imported it, decayed: at most err over */
    double err;    /* what it inherited when it took a full table's place */
    int64_t bytes; /* its measured cost in a zygote; -1: not known */
    enum ws_state state;
    char why[32];      /* WS_REFUSED: the zygote's reason */
    unsigned timeouts; /* probes of it that timed out */
};

struct ipd_warmset {
    pthread_mutex_t lock;
    char floor[256];
    int64_t budget;
    unsigned adapt_runs;
    struct ws_entry e[WARMSET_TABLE];
    size_t n;
    double total;         /* runs counted, decayed as the counts are */
    unsigned since_look;  /* runs since the plan was last looked at */
    unsigned since_decay; /* runs since the counts were last halved */
    uint64_t plan_gen;
    char plan_names[IPD_WARMSET_ENV_MAX]; /* the plan, names only */
    /* the newest report's */
    char set[IPD_WARMSET_ENV_MAX];
    int64_t set_modules, set_bytes, floor_bytes;
    bool reported;
};

struct ipd_warmset *ipd_warmset_new(const char *floor, int64_t budget_bytes,
                                    unsigned adapt_runs)
{
    struct ipd_warmset *ws = ipd_xcalloc(1, sizeof(*ws));

    pthread_mutex_init(&ws->lock, NULL);
    snprintf(ws->floor, sizeof(ws->floor), "%s", floor ? floor : "");
    ws->budget = budget_bytes > 0 ? budget_bytes : 0;
    ws->adapt_runs = adapt_runs ? adapt_runs : 100;
    return ws;
}

void ipd_warmset_free(struct ipd_warmset *ws)
{
    if (!ws)
        return;
    pthread_mutex_destroy(&ws->lock);
    free(ws);
}

static bool ident_start(char c)
{
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '_';
}

static bool ident_char(char c)
{
    return ident_start(c) || (c >= '0' && c <= '9');
}

bool ipd_warmset_name_ok(const char *name, size_t len)
{
    bool part_start = true;

    if (!name || len == 0 || len > IPD_WARMSET_NAME_MAX)
        return false;
    for (size_t i = 0; i < len; i++) {
        char c = name[i];
        if (c == '.') {
            if (part_start)
                return false;
            part_start = true;
        } else if (part_start ? ident_start(c) : ident_char(c)) {
            part_start = false;
        } else {
            return false;
        }
    }
    return !part_start;
}

/* name is one of the comma-separated entries of list. */
static bool in_list(const char *list, const char *name)
{
    size_t len = strlen(name);

    for (const char *p = list; *p;) {
        while (*p == ' ' || *p == ',')
            p++;
        const char *end = p;
        while (*end && *end != ',')
            end++;
        const char *last = end;
        while (last > p && last[-1] == ' ')
            last--;
        if ((size_t)(last - p) == len && !memcmp(p, name, len))
            return true;
        p = end;
    }
    return false;
}

static struct ws_entry *find_locked(struct ipd_warmset *ws, const char *name,
                                    size_t len)
{
    for (size_t i = 0; i < ws->n; i++)
        if (strlen(ws->e[i].name) == len && !memcmp(ws->e[i].name, name, len))
            return &ws->e[i];
    return NULL;
}

/* The entry for name, made when new.  Once the table is full the least
 * counted entry makes room, and the newcomer inherits its count as an
 * error bound (the Space-Saving algorithm: Metwally, Agrawal, El Abbadi,
 * 2005): so a name that keeps coming climbs past the long tail instead of
 * being the next one evicted, and runs - err never overstates it. */
static struct ws_entry *entry_locked(struct ipd_warmset *ws, const char *name,
                                     size_t len)
{
    struct ws_entry *e = find_locked(ws, name, len);

    if (e)
        return e;
    if (ws->n < WARMSET_TABLE) {
        e = &ws->e[ws->n++];
    } else {
        /* the least counted; of those, the least sure (a newcomer's
         * inherited count goes before a count of real runs) */
        e = &ws->e[0];
        for (size_t i = 1; i < ws->n; i++)
            if (ws->e[i].runs < e->runs ||
                (ws->e[i].runs == e->runs && ws->e[i].err > e->err))
                e = &ws->e[i];
    }
    double inherited = ws->n == WARMSET_TABLE && e->name[0] ? e->runs : 0;
    memset(e, 0, sizeof(*e));
    memcpy(e->name, name, len);
    e->runs = e->err = inherited;
    e->bytes = -1;
    return e;
}

static void decay_locked(struct ipd_warmset *ws)
{
    size_t k = 0;

    ws->total /= 2;
    for (size_t i = 0; i < ws->n; i++) {
        ws->e[i].runs /= 2;
        ws->e[i].err /= 2;
        if (ws->e[i].runs >= 0.5)
            ws->e[k++] = ws->e[i];
    }
    ws->n = k;
}

/* What an entry's count guarantees (see entry_locked). */
static double surely(const struct ws_entry *e)
{
    return e->runs - e->err;
}

static int by_runs(const void *a, const void *b)
{
    const struct ws_entry *x = *(const struct ws_entry *const *)a;
    const struct ws_entry *y = *(const struct ws_entry *const *)b;

    if (surely(x) != surely(y))
        return surely(x) < surely(y) ? 1 : -1;
    return strcmp(x->name, y->name);
}

/* The entries, most counted first, into order[WARMSET_TABLE]. */
static size_t sorted_locked(struct ipd_warmset *ws, struct ws_entry **order)
{
    for (size_t i = 0; i < ws->n; i++)
        order[i] = &ws->e[i];
    qsort(order, ws->n, sizeof(order[0]), by_runs);
    return ws->n;
}

/* ",name" (or "name" first, "name=KiB" when kib >= 0) onto out; false
 * (out unchanged) when it does not fit. */
static bool append(char *out, size_t cap, size_t *len, const char *name,
                   long long kib)
{
    char cost[24] = "";
    int n;

    if (kib >= 0)
        snprintf(cost, sizeof(cost), "=%lld", kib);
    n = snprintf(out + *len, cap - *len, "%s%s%s", *len ? "," : "", name, cost);

    if (n > 0 && (size_t)n < cap - *len) {
        *len += (size_t)n;
        return true;
    }
    out[*len] = '\0'; /* never a partial entry */
    return false;
}

/* The plan: the most imported names that may fit, into names ("a,b")
 * and costs ("a=KiB,b": a measured cost when known); both
 * IPD_WARMSET_ENV_MAX. */
static void plan_locked(struct ipd_warmset *ws, char *names, char *costs)
{
    struct ws_entry *order[WARMSET_TABLE];
    size_t n = sorted_locked(ws, order), k = 0, nl = 0, cl = 0;
    int64_t left = ws->budget;

    names[0] = costs[0] = '\0';
    if (!ws->budget)
        return;
    for (size_t i = 0; i < n && k < IPD_WARMSET_PLAN_MAX; i++) {
        struct ws_entry *e = order[i];
        if (surely(e) < WARMSET_MIN_RUNS ||
            surely(e) * 100 < ws->total * WARMSET_MIN_SHARE ||
            e->state == WS_REFUSED || in_list(ws->floor, e->name))
            continue;
        if (e->bytes > left)
            continue;
        /* names holds less than costs: when an entry fits there, it fits
         * here, and the two lists stay the same names. */
        if (!append(costs, IPD_WARMSET_ENV_MAX - 40, &cl, e->name,
                    e->bytes >= 0 ? (long long)(e->bytes / 1024) : -1))
            break;
        (void)append(names, IPD_WARMSET_ENV_MAX - 40, &nl, e->name, -1);
        if (e->bytes >= 0)
            left -= e->bytes;
        k++;
    }
}

/* Two plans' lists ("a,b") name the same modules, in any order: a plan
 * whose names only changed places renews no zygote (its order matters only
 * where the budget cuts it, and then the names differ). */
static bool same_names(const char *a, const char *b)
{
    size_t na = 0, nb = 0;

    for (const char *p = a; *p;) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        char name[IPD_WARMSET_NAME_MAX + 1];
        snprintf(name, sizeof(name), "%.*s", (int)len, p);
        if (len && !in_list(b, name))
            return false;
        na += len > 0;
        p += len + (end ? 1 : 0);
    }
    for (const char *p = b; *p; p++)
        nb += *p == ',';
    nb += *b != '\0';
    return na == nb;
}

bool ipd_warmset_note(struct ipd_warmset *ws, const json_t *imports)
{
    bool changed = false;
    size_t i, counted = 0;
    const json_t *v;

    if (!ws)
        return false;
    pthread_mutex_lock(&ws->lock);
    ws->total += 1;
    if (json_is_array(imports)) {
        json_array_foreach(imports, i, v)
        {
            if (counted >= IPD_WARMSET_NAMES_PER_RUN)
                break;
            const char *s = json_string_value(v);
            size_t len = json_string_length(v);
            if (!s || !ipd_warmset_name_ok(s, len))
                continue;
            /* A name twice in one run counts once. */
            bool dup = false;
            for (size_t k = 0; k < i && !dup; k++) {
                const json_t *w = json_array_get(imports, k);
                dup = json_string_length(w) == len &&
                      !memcmp(json_string_value(w), s, len);
            }
            if (dup)
                continue;
            entry_locked(ws, s, len)->runs += 1;
            counted++;
        }
    }
    if (++ws->since_decay >= WARMSET_HALF_LIFE) {
        ws->since_decay = 0;
        decay_locked(ws);
    }
    if (ws->budget && ++ws->since_look >= ws->adapt_runs) {
        char names[IPD_WARMSET_ENV_MAX], costs[IPD_WARMSET_ENV_MAX];
        ws->since_look = 0;
        plan_locked(ws, names, costs);
        if (!same_names(names, ws->plan_names)) {
            ws->plan_gen++;
            changed = true;
        }
        memcpy(ws->plan_names, names, sizeof(names));
    }
    pthread_mutex_unlock(&ws->lock);
    return changed;
}

uint64_t ipd_warmset_plan(struct ipd_warmset *ws, char *cand_env,
                          char *budget_env)
{
    char names[IPD_WARMSET_ENV_MAX], costs[IPD_WARMSET_ENV_MAX];
    uint64_t gen;

    cand_env[0] = budget_env[0] = '\0';
    if (!ws || !ws->budget)
        return 0;
    pthread_mutex_lock(&ws->lock);
    plan_locked(ws, names, costs);
    gen = ws->plan_gen;
    /* costs holds at most IPD_WARMSET_ENV_MAX - 40 bytes (append). */
    snprintf(cand_env, IPD_WARMSET_ENV_MAX, "IPD_WARM_CANDIDATES=%.*s",
             IPD_WARMSET_ENV_MAX - 40, costs);
    snprintf(budget_env, 64, "IPD_WARM_BUDGET_KB=%lld",
             (long long)(ws->budget / 1024));
    pthread_mutex_unlock(&ws->lock);
    return gen;
}

uint64_t ipd_warmset_plan_gen(struct ipd_warmset *ws)
{
    uint64_t gen;

    if (!ws)
        return 0;
    pthread_mutex_lock(&ws->lock);
    gen = ws->plan_gen;
    pthread_mutex_unlock(&ws->lock);
    return gen;
}

static const struct {
    const char *word;
    enum ws_state state;
} report_states[] = {
    /* clang-format off */
    {"warm", WS_WARM},          {"loaded", WS_WARM},
    {"over_budget", WS_OVER},   {"not_importable", WS_REFUSED},
    {"crashed", WS_REFUSED},    {"threads", WS_REFUSED},
    {"timeout", WS_REFUSED},    {"stdlib", WS_REFUSED},
    /* clang-format on */
};

/* One [name, state, KiB] of a report, checked; false when malformed. */
static bool report_item(const json_t *item, const char **name, size_t *len,
                        size_t *state, int64_t *bytes)
{
    const json_t *n = json_array_get(item, 0), *s = json_array_get(item, 1),
                 *k = json_array_get(item, 2);

    if (!json_is_array(item) || json_array_size(item) != 3 ||
        !json_is_string(n) || !json_is_string(s) || !json_is_integer(k))
        return false;
    *name = json_string_value(n);
    *len = json_string_length(n);
    if (!ipd_warmset_name_ok(*name, *len) || json_integer_value(k) < 0 ||
        json_integer_value(k) > (1LL << 40))
        return false;
    *bytes = (int64_t)json_integer_value(k) * 1024;
    for (*state = 0; *state < IPD_ARRAY_LEN(report_states); (*state)++)
        if (!strcmp(json_string_value(s), report_states[*state].word))
            return true;
    return false;
}

/* The report, checked whole before anything is applied. */
static json_t *report_parse(const char *text, size_t len)
{
    json_t *doc, *mods, *fl;
    const char *key;
    json_t *v;
    size_t i;

    if (!text || len == 0 || len > IPD_WARMSET_REPORT_MAX)
        return NULL;
    doc = json_loadb(text, len, JSON_REJECT_DUPLICATES, NULL);
    if (!json_is_object(doc))
        goto bad;
    json_object_foreach(doc, key, v) if (strcmp(key, "floor_kib") != 0 &&
                                         strcmp(key, "modules") != 0) goto bad;
    mods = json_object_get(doc, "modules");
    fl = json_object_get(doc, "floor_kib");
    if (!json_is_array(mods) || json_array_size(mods) > IPD_WARMSET_PLAN_MAX ||
        !json_is_integer(fl) || json_integer_value(fl) < 0 ||
        json_integer_value(fl) > (1LL << 40))
        goto bad;
    json_array_foreach(mods, i, v)
    {
        const char *name, *other;
        size_t nlen, olen, st;
        int64_t bytes;
        if (!report_item(v, &name, &nlen, &st, &bytes))
            goto bad;
        for (size_t k = 0; k < i; k++) { /* each name once */
            (void)report_item(json_array_get(mods, k), &other, &olen, &st,
                              &bytes);
            if (olen == nlen && !memcmp(other, name, nlen))
                goto bad;
        }
    }
    return doc;
bad:
    json_decref(doc);
    return NULL;
}

bool ipd_warmset_report(struct ipd_warmset *ws, const char *text, size_t len,
                        char *set, size_t setlen, int64_t *set_bytes)
{
    json_t *doc = report_parse(text, len), *v;
    size_t i, sl = 0;
    int64_t sum = 0, count = 0;

    if (set && setlen)
        set[0] = '\0';
    if (set_bytes)
        *set_bytes = 0;
    if (!ws || !doc) {
        json_decref(doc);
        return false;
    }
    pthread_mutex_lock(&ws->lock);
    ws->set[0] = '\0';
    json_array_foreach(json_object_get(doc, "modules"), i, v)
    {
        const char *name;
        size_t nlen, st;
        int64_t bytes;
        (void)report_item(v, &name, &nlen, &st, &bytes);
        struct ws_entry *e = find_locked(ws, name, nlen);
        if (!e) /* decayed away meanwhile, or never planned */
            continue;
        /* A probe that timed out may have met a loaded host: tried again
         * by the next zygotes, refused at the third. */
        if (!strcmp(report_states[st].word, "timeout") &&
            ++e->timeouts < WARMSET_TIMEOUTS) {
            e->state = WS_NEW;
            e->bytes = -1;
            continue;
        }
        e->state = report_states[st].state;
        if (e->state == WS_REFUSED) {
            snprintf(e->why, sizeof(e->why), "%s", report_states[st].word);
            e->bytes = -1;
            continue;
        }
        e->bytes = bytes;
        if (e->state != WS_WARM)
            continue;
        sum += bytes;
        count++;
        (void)append(ws->set, sizeof(ws->set), &sl, e->name, -1);
    }
    ws->set_modules = count;
    ws->set_bytes = sum;
    ws->floor_bytes =
        (int64_t)json_integer_value(json_object_get(doc, "floor_kib")) * 1024;
    ws->reported = true;
    /* What this zygote could not take is out of the plan now, without a
     * new generation: its slot would be recycled for nothing. */
    {
        char costs[IPD_WARMSET_ENV_MAX];
        plan_locked(ws, ws->plan_names, costs);
    }
    if (set && setlen)
        snprintf(set, setlen, "%s", ws->set);
    pthread_mutex_unlock(&ws->lock);
    if (set_bytes)
        *set_bytes = sum;
    json_decref(doc);
    return true;
}

/* The rehearsal groups of zygote.py for the floor's modules, and the
 * modules (with their submodules) whose import calls for each.  The
 * other groups (scipy, sympy, seaborn, sklearn, statsmodels) rehearse a
 * module of the adaptive set: a zygote has it only because runs import
 * it, and zygote.py skips a group whose module it has not imported. */
static const struct {
    const char *group;
    const char *modules[2];
} rehearsals[] = {
    {"pandas", {"pandas"}},
    {"chart", {"matplotlib", "seaborn"}},
};
static const char adaptive_groups[] = "scipy,sympy,seaborn,sklearn,statsmodels";

/* The largest count of a name that is module or one of its submodules: a
 * lower bound of the runs that imported any of them. */
static double module_runs_locked(const struct ipd_warmset *ws,
                                 const char *module)
{
    size_t len = strlen(module);
    double most = 0;
    for (size_t i = 0; i < ws->n; i++) {
        const char *n = ws->e[i].name;
        if (!strncmp(n, module, len) && (n[len] == '\0' || n[len] == '.') &&
            ws->e[i].runs > most)
            most = ws->e[i].runs;
    }
    return most;
}

void ipd_warmset_rehearsal(struct ipd_warmset *ws, char *out, size_t cap)
{
    size_t len = 0;

    IPD_ASSERT(cap >= IPD_WARMSET_REHEARSE_MAX);
    out[0] = '\0';
    if (!ws)
        return;
    pthread_mutex_lock(&ws->lock);
    bool all = ws->total < IPD_WARMSET_REHEARSE_MIN_RUNS;
    for (size_t g = 0; g < IPD_ARRAY_LEN(rehearsals); g++) {
        double runs = 0;
        for (size_t m = 0; m < 2 && rehearsals[g].modules[m]; m++) {
            double r = module_runs_locked(ws, rehearsals[g].modules[m]);
            runs = r > runs ? r : runs;
        }
        if (all || runs * IPD_WARMSET_REHEARSE_ONE_IN >= ws->total)
            len += (size_t)snprintf(out + len, cap - len, "%s%s",
                                    len ? "," : "", rehearsals[g].group);
    }
    snprintf(out + len, cap - len, "%s%s", len ? "," : "", adaptive_groups);
    pthread_mutex_unlock(&ws->lock);
}

void ipd_warmset_venv_changed(struct ipd_warmset *ws)
{
    if (!ws)
        return;
    pthread_mutex_lock(&ws->lock);
    for (size_t i = 0; i < ws->n; i++) {
        ws->e[i].state = WS_NEW;
        ws->e[i].bytes = -1;
        ws->e[i].timeouts = 0;
        ws->e[i].why[0] = '\0';
    }
    pthread_mutex_unlock(&ws->lock);
}

static const char *state_word(const struct ipd_warmset *ws,
                              const struct ws_entry *e)
{
    switch (e->state) {
    case WS_WARM: return "warm";
    case WS_OVER: return "over_budget";
    case WS_REFUSED: return "refused";
    case WS_NEW: break;
    }
    return in_list(ws->plan_names, e->name) ? "planned" : "counted";
}

json_t *ipd_warmset_list_json(const char *list)
{
    json_t *a = json_array();

    for (const char *p = list; *p;) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        if (len)
            json_array_append_new(a, json_stringn(p, len));
        p += len + (end ? 1 : 0);
    }
    return a;
}

json_t *ipd_warmset_json(struct ipd_warmset *ws)
{
    struct ws_entry *order[WARMSET_TABLE];
    json_t *mods = json_array(), *o;
    char rehearse[IPD_WARMSET_REHEARSE_MAX];

    ipd_warmset_rehearsal(ws, rehearse, sizeof(rehearse));
    pthread_mutex_lock(&ws->lock);
    size_t n = sorted_locked(ws, order);
    for (size_t i = 0; i < n && i < WARMSET_SHOWN; i++) {
        const struct ws_entry *e = order[i];
        json_t *m = json_pack("{s:s,s:I,s:s}", "module", e->name, "runs",
                              (json_int_t)(surely(e) + 0.5), "state",
                              state_word(ws, e));
        if (e->bytes >= 0)
            json_object_set_new(m, "bytes", json_integer(e->bytes));
        if (e->state == WS_REFUSED)
            json_object_set_new(m, "why", json_string(e->why));
        json_array_append_new(mods, m);
    }
    o = json_pack("{s:b,s:I,s:I,s:I,s:I,s:o,s:o}", "enabled", ws->budget > 0,
                  "budget_bytes", (json_int_t)ws->budget, "adapt_runs",
                  (json_int_t)ws->adapt_runs, "runs_counted",
                  (json_int_t)(ws->total + 0.5), "plan_generation",
                  (json_int_t)ws->plan_gen, "plan",
                  ipd_warmset_list_json(ws->plan_names), "modules", mods);
    if (ws->reported) {
        json_object_set_new(o, "set", ipd_warmset_list_json(ws->set));
        json_object_set_new(o, "set_bytes", json_integer(ws->set_bytes));
        json_object_set_new(o, "floor_bytes", json_integer(ws->floor_bytes));
    }
    json_object_set_new(o, "rehearsal", ipd_warmset_list_json(rehearse));
    pthread_mutex_unlock(&ws->lock);
    return o;
}

void ipd_warmset_gauges(struct ipd_warmset *ws, int64_t *modules,
                        int64_t *bytes)
{
    *modules = *bytes = 0;
    if (!ws)
        return;
    pthread_mutex_lock(&ws->lock);
    *modules = ws->set_modules;
    *bytes = ws->set_bytes;
    pthread_mutex_unlock(&ws->lock);
}
