/*
 * metrics.c - the metrics registry and its Prometheus text rendering (see
 * metrics.h for the model, bounds and thread-safety).
 *
 * Series lookup: each family has a fixed open-addressing table of
 * IPD_METRICS_SLOTS pointers, more than twice the most series a family can
 * hold, so probing always ends at an empty slot.  A series is fully built
 * before its pointer is published with a release store, and is never moved
 * or freed before the registry, so readers probe without a lock.  Inserts
 * take the family's mutex and look again first.
 *
 * Values: a counter is an atomic uint64; a gauge, and a histogram's sum,
 * are the bits of a double updated by compare-and-swap.  A histogram keeps
 * per-bucket (not cumulative) atomic counts; rendering sums them, so the
 * +Inf bucket always equals _count even while other threads observe.
 */
#include <dirent.h>
#include <fcntl.h>
#include <inttypes.h>
#include <locale.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/resource.h>
#include <unistd.h>

#include "log.h"
#include "metrics.h"
#include "util.h"

#define IPD_METRICS_SLOTS 1024 /* power of two, ~4 * (MAX_SERIES + 1) */
#define IPD_METRICS_CACHE_LINE 64

struct ipd_metric_series {
    _Atomic uint64_t v; /* counter value; gauge or histogram sum bits */
    struct ipd_metric_family *fam;
    uint64_t hash;
    const char *values[IPD_METRICS_MAX_LABELS]; /* copies, in this block */
    _Atomic uint64_t buckets[];                 /* histogram: nbuckets + 1 */
};

struct ipd_metric_family {
    struct ipd_metrics *reg;
    enum ipd_metric_type type;
    char *name;
    char *help;
    size_t nlabels;
    char *labels[IPD_METRICS_MAX_LABELS];
    size_t nbuckets;                        /* finite bounds */
    double bounds[IPD_METRICS_MAX_BUCKETS]; /* strictly increasing */
    char le[IPD_METRICS_MAX_BUCKETS][32];   /* bounds, formatted */

    pthread_mutex_t insert_lock; /* creating series */
    size_t nregular;             /* under insert_lock: series in the bound */
    struct ipd_metric_series *overflow; /* under insert_lock; NULL: none yet */
    _Atomic(struct ipd_metric_series *) slots[IPD_METRICS_SLOTS];
    struct ipd_metric_series *list[IPD_METRICS_MAX_SERIES + 1]; /* by age */
    _Atomic size_t nseries; /* published entries of list */

    ipd_metrics_value_fn *fn; /* under reg->lock; NULL: none */
    void *fn_ctx;
    bool fn_ok; /* under reg->lock: this scrape's result */
    double fn_value;
};

struct ipd_metrics {
    pthread_mutex_t lock; /* families, value functions, rendering */
    struct ipd_metric_family *fams[IPD_METRICS_MAX_FAMILIES];
    size_t nfams;
    locale_t c_locale; /* numbers are formatted in "C" whatever the
                        * process locale */

    /* The interpd families and the series every scrape shows. */
    struct ipd_metric_family *http_requests, *http_duration;
    struct ipd_metric_family *exec_total, *exec_duration;
    struct ipd_metric_family *gauges[9]; /* by enum ipd_metrics_gauge */
    struct ipd_metric_family *sweep_runs, *installs, *scrape_errors;
    struct ipd_metric_series *exec_series[5]; /* by outcome */
    struct ipd_metric_series *exec_duration_series;
    struct ipd_metric_series *install_series[5]; /* by outcome */
    struct ipd_metric_series *sweep_ok, *sweep_error;
    struct ipd_metric_series *sweep_deleted, *sweep_freed;
};

static const char *const exec_outcomes[] = {
    "success", "error", "timeout", "oom", "failed_to_start",
};
static const char *const install_outcomes[] = {
    "installed", "already_installed", "not_allowed", "invalid", "failed",
};

/* ---- Doubles as atomic bits ------------------------------------------- */

static uint64_t dbits(double d)
{
    uint64_t u;
    memcpy(&u, &d, sizeof(u));
    return u;
}

static double bitsd(uint64_t u)
{
    double d;
    memcpy(&d, &u, sizeof(d));
    return d;
}

static void atomic_add_double(_Atomic uint64_t *a, double delta)
{
    uint64_t old = atomic_load_explicit(a, memory_order_relaxed);
    uint64_t next;
    do {
        next = dbits(bitsd(old) + delta);
    } while (!atomic_compare_exchange_weak_explicit(
        a, &old, next, memory_order_relaxed, memory_order_relaxed));
}

/*
 * The shortest decimal that reads back as the same double, in fixed
 * notation for exponents -4..20 ("10", "0.005", "300") and "1e+21" style
 * outside; +Inf, -Inf and NaN as Prometheus spells them.  The caller has
 * made "C" the thread's locale, so the decimal point is '.'.
 */
static void format_double(double v, char out[32])
{
    if (isnan(v)) {
        memcpy(out, "NaN", 4);
        return;
    }
    if (isinf(v)) {
        memcpy(out, v > 0 ? "+Inf" : "-Inf", 5);
        return;
    }
    int prec = 0; /* significant digits; 17 always round-trips */
    do {
        prec++;
        snprintf(out, 32, "%.*e", prec - 1, v);
    } while (prec < 17 && strtod(out, NULL) != v);
    long e10 = strtol(strchr(out, 'e') + 1, NULL, 10);
    if (e10 >= -4 && e10 < 21)
        snprintf(out, 32, "%.*f", (int)(e10 < prec - 1 ? prec - 1 - e10 : 0),
                 v);
}

/* ---- Names and label values ------------------------------------------- */

static bool name_valid(const char *s, bool colon)
{
    if (!s || !*s || (*s >= '0' && *s <= '9'))
        return false;
    for (; *s; s++) {
        char c = *s;
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                  (c >= '0' && c <= '9') || c == '_' || (colon && c == ':');
        if (!ok)
            return false;
    }
    return true;
}

/* Label values go out verbatim (escaped); Prometheus wants UTF-8. */
static bool value_valid(const char *s)
{
    size_t n = strnlen(s, IPD_METRICS_VALUE_MAX + 1);
    return n <= IPD_METRICS_VALUE_MAX && ipd_utf8_valid(s, n);
}

static uint64_t hash_values(const char *const *values, size_t n)
{
    uint64_t h = 14695981039346656037ULL; /* FNV-1a */
    for (size_t i = 0; i < n; i++) {
        for (const unsigned char *p = (const unsigned char *)values[i]; *p; p++)
            h = (h ^ *p) * 1099511628211ULL;
        h = (h ^ 0xff) * 1099511628211ULL; /* 0xff never occurs in UTF-8 */
    }
    return h;
}

static bool same_values(const struct ipd_metric_series *s,
                        const char *const *values, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(s->values[i], values[i]) != 0)
            return false;
    return true;
}

/* ---- Series ------------------------------------------------------------ */

static struct ipd_metric_series *find(struct ipd_metric_family *f, uint64_t h,
                                      const char *const *values)
{
    size_t i = (size_t)h & (IPD_METRICS_SLOTS - 1);
    for (;;) {
        struct ipd_metric_series *s =
            atomic_load_explicit(&f->slots[i], memory_order_acquire);
        if (!s)
            return NULL;
        if (s->hash == h && same_values(s, values, f->nlabels))
            return s;
        i = (i + 1) & (IPD_METRICS_SLOTS - 1);
    }
}

/* Whole cache lines, so two hot series never share one. */
static void *xaligned(size_t size)
{
    size_t n = (size + IPD_METRICS_CACHE_LINE - 1) &
               ~(size_t)(IPD_METRICS_CACHE_LINE - 1);
    void *p = aligned_alloc(IPD_METRICS_CACHE_LINE, n);
    if (!p) {
        ipd_error("out of memory allocating %zu bytes", n);
        abort();
    }
    memset(p, 0, n);
    return p;
}

/* Under f->insert_lock; the caller knows the series is not there. */
static struct ipd_metric_series *insert(struct ipd_metric_family *f, uint64_t h,
                                        const char *const *values)
{
    size_t nb = f->type == IPD_METRIC_HISTOGRAM ? f->nbuckets + 1 : 0;
    size_t head =
        sizeof(struct ipd_metric_series) + nb * sizeof(_Atomic uint64_t);
    size_t strs = 0;
    for (size_t i = 0; i < f->nlabels; i++)
        strs += strlen(values[i]) + 1;

    struct ipd_metric_series *s = xaligned(head + strs);
    char *p = (char *)s + head;
    s->fam = f;
    s->hash = h;
    for (size_t i = 0; i < f->nlabels; i++) {
        size_t len = strlen(values[i]) + 1;
        memcpy(p, values[i], len);
        s->values[i] = p;
        p += len;
    }

    size_t n = atomic_load_explicit(&f->nseries, memory_order_relaxed);
    IPD_ASSERT(n < IPD_ARRAY_LEN(f->list));
    f->list[n] = s;
    atomic_store_explicit(&f->nseries, n + 1, memory_order_release);
    size_t i = (size_t)h & (IPD_METRICS_SLOTS - 1);
    while (atomic_load_explicit(&f->slots[i], memory_order_relaxed))
        i = (i + 1) & (IPD_METRICS_SLOTS - 1);
    atomic_store_explicit(&f->slots[i], s, memory_order_release);
    return s;
}

/* Under f->insert_lock: the all-"other" series, created past the bound. */
static struct ipd_metric_series *overflow(struct ipd_metric_family *f)
{
    if (!f->overflow) {
        const char *other[IPD_METRICS_MAX_LABELS];
        for (size_t i = 0; i < f->nlabels; i++)
            other[i] = IPD_METRICS_OTHER;
        uint64_t h = hash_values(other, f->nlabels);
        f->overflow = find(f, h, other);
        if (!f->overflow)
            f->overflow = insert(f, h, other);
    }
    return f->overflow;
}

static struct ipd_metric_series *create(struct ipd_metric_family *f, uint64_t h,
                                        const char *const *values)
{
    pthread_mutex_lock(&f->insert_lock);
    struct ipd_metric_series *s = find(f, h, values);
    bool valid = true;
    for (size_t i = 0; !s && i < f->nlabels; i++)
        valid = valid && value_valid(values[i]);
    if (!s && (!valid || f->nregular >= IPD_METRICS_MAX_SERIES)) {
        s = overflow(f);
    } else if (!s) {
        s = insert(f, h, values);
        f->nregular++;
    }
    pthread_mutex_unlock(&f->insert_lock);
    return s;
}

struct ipd_metric_series *ipd_metrics_series_get(struct ipd_metric_family *f,
                                                 const char *const *values)
{
    const char *v[IPD_METRICS_MAX_LABELS];
    if (!f)
        return NULL;
    for (size_t i = 0; i < f->nlabels; i++)
        v[i] = values && values[i] ? values[i] : "";
    uint64_t h = hash_values(v, f->nlabels);
    struct ipd_metric_series *s = find(f, h, v);
    return s ? s : create(f, h, v);
}

void ipd_metrics_series_inc(struct ipd_metric_series *s, uint64_t n)
{
    if (!s)
        return;
    IPD_ASSERT(s->fam->type == IPD_METRIC_COUNTER);
    atomic_fetch_add_explicit(&s->v, n, memory_order_relaxed);
}

void ipd_metrics_series_set(struct ipd_metric_series *s, double value)
{
    if (!s)
        return;
    IPD_ASSERT(s->fam->type == IPD_METRIC_GAUGE);
    atomic_store_explicit(&s->v, dbits(value), memory_order_relaxed);
}

void ipd_metrics_series_add(struct ipd_metric_series *s, double delta)
{
    if (!s)
        return;
    IPD_ASSERT(s->fam->type == IPD_METRIC_GAUGE);
    atomic_add_double(&s->v, delta);
}

void ipd_metrics_series_observe(struct ipd_metric_series *s, double value)
{
    if (!s)
        return;
    const struct ipd_metric_family *f = s->fam;
    IPD_ASSERT(f->type == IPD_METRIC_HISTOGRAM);
    /* A linear scan: at most 32 bounds, and short durations (the common
     * case) stop early.  NaN compares false and lands in +Inf. */
    size_t i = 0;
    while (i < f->nbuckets && !(value <= f->bounds[i]))
        i++;
    atomic_fetch_add_explicit(&s->buckets[i], 1, memory_order_relaxed);
    atomic_add_double(&s->v, value);
}

/* ---- Families ---------------------------------------------------------- */

static void family_free(struct ipd_metric_family *f)
{
    if (!f)
        return;
    size_t n = atomic_load(&f->nseries);
    for (size_t i = 0; i < n; i++)
        free(f->list[i]);
    for (size_t i = 0; i < f->nlabels; i++)
        free(f->labels[i]);
    free(f->name);
    free(f->help);
    pthread_mutex_destroy(&f->insert_lock);
    free(f);
}

static bool labels_valid(enum ipd_metric_type type, const char *const *labels,
                         size_t nlabels)
{
    if (nlabels > IPD_METRICS_MAX_LABELS || (nlabels && !labels))
        return false;
    for (size_t i = 0; i < nlabels; i++) {
        if (!name_valid(labels[i], false) || !strncmp(labels[i], "__", 2))
            return false;
        if (type == IPD_METRIC_HISTOGRAM && !strcmp(labels[i], "le"))
            return false;
        for (size_t j = 0; j < i; j++)
            if (!strcmp(labels[i], labels[j]))
                return false;
    }
    return true;
}

static bool buckets_valid(enum ipd_metric_type type, const double *buckets,
                          size_t nbuckets)
{
    if (type != IPD_METRIC_HISTOGRAM)
        return nbuckets == 0;
    if (!buckets || nbuckets < 1 || nbuckets > IPD_METRICS_MAX_BUCKETS)
        return false;
    for (size_t i = 0; i < nbuckets; i++) {
        if (!isfinite(buckets[i]) || (i && !(buckets[i] > buckets[i - 1])))
            return false;
    }
    return true;
}

static bool name_taken(const struct ipd_metrics *m, const char *name)
{
    for (size_t i = 0; i < m->nfams; i++)
        if (!strcmp(m->fams[i]->name, name))
            return true;
    return false;
}

enum ipd_err ipd_metrics_family_add(struct ipd_metrics *m,
                                    enum ipd_metric_type type, const char *name,
                                    const char *help, const char *const *labels,
                                    size_t nlabels, const double *buckets,
                                    size_t nbuckets,
                                    struct ipd_metric_family **out)
{
    enum ipd_err rc = IPD_OK;
    struct ipd_metric_family *f = NULL;
    bool locked = false;
    if (out)
        *out = NULL;
    if (!m)
        goto out;
    if (type > IPD_METRIC_HISTOGRAM || !name_valid(name, true) ||
        !labels_valid(type, labels, nlabels) ||
        !buckets_valid(type, buckets, nbuckets)) {
        rc = IPD_ERR_INVALID;
        goto out;
    }

    f = ipd_xcalloc(1, sizeof(*f));
    pthread_mutex_init(&f->insert_lock, NULL);
    f->reg = m;
    f->type = type;
    f->name = ipd_xstrdup(name);
    f->help = ipd_xstrdup(help ? help : "");
    f->nlabels = nlabels;
    for (size_t i = 0; i < nlabels; i++)
        f->labels[i] = ipd_xstrdup(labels[i]);
    f->nbuckets = nbuckets;
    locale_t old = uselocale(m->c_locale); /* le labels, like the values */
    for (size_t i = 0; i < nbuckets; i++) {
        f->bounds[i] = buckets[i];
        format_double(buckets[i], f->le[i]);
    }
    uselocale(old);

    pthread_mutex_lock(&m->lock);
    locked = true;
    if (name_taken(m, name)) {
        rc = IPD_ERR_CONFLICT;
        goto out;
    }
    if (m->nfams >= IPD_METRICS_MAX_FAMILIES) {
        rc = IPD_ERR_TOO_LARGE;
        goto out;
    }
    m->fams[m->nfams++] = f;
    if (out)
        *out = f;
    f = NULL;
out:
    if (locked)
        pthread_mutex_unlock(&m->lock);
    family_free(f);
    return rc;
}

enum ipd_err ipd_metrics_family_set_fn(struct ipd_metric_family *f,
                                       ipd_metrics_value_fn *fn, void *ctx)
{
    if (!f)
        return IPD_OK;
    if (f->type == IPD_METRIC_HISTOGRAM || f->nlabels)
        return IPD_ERR_INVALID;
    struct ipd_metrics *m = f->reg;
    /* So a failing function shows as 0 errors until it fails. */
    if (fn && f != m->scrape_errors) {
        const char *v[1] = {f->name};
        ipd_metrics_series_get(m->scrape_errors, v);
    }
    pthread_mutex_lock(&m->lock);
    f->fn = fn;
    f->fn_ctx = ctx;
    pthread_mutex_unlock(&m->lock);
    return IPD_OK;
}

/* ---- Rendering --------------------------------------------------------- */

/* Appends that stop at the first error, so rendering reads straight. */
struct writer {
    struct ipd_buf *b;
    enum ipd_err rc;
};

static void put(struct writer *w, const char *s, size_t n)
{
    if (!w->rc)
        w->rc = ipd_buf_add(w->b, s, n);
}

static void puts_(struct writer *w, const char *s)
{
    put(w, s, strlen(s));
}

/* Label values escape \, " and newline; HELP text only \ and newline. */
static void put_escaped(struct writer *w, const char *s, bool quote)
{
    const char *run = s;
    for (; *s; s++) {
        const char *esc = NULL;
        if (*s == '\\')
            esc = "\\\\";
        else if (*s == '\n')
            esc = "\\n";
        else if (*s == '"' && quote)
            esc = "\\\"";
        if (esc) {
            put(w, run, (size_t)(s - run));
            put(w, esc, 2);
            run = s + 1;
        }
    }
    put(w, run, (size_t)(s - run));
}

static void put_u64(struct writer *w, uint64_t v)
{
    char s[24];
    int n = snprintf(s, sizeof(s), "%" PRIu64, v);
    put(w, s, (size_t)n);
}

static void put_double(struct writer *w, double v)
{
    char s[32];
    format_double(v, s);
    puts_(w, s);
}

/* name[suffix]{labels[,le="le"]} */
static void put_series_name(struct writer *w, const struct ipd_metric_family *f,
                            const struct ipd_metric_series *s,
                            const char *suffix, const char *le)
{
    puts_(w, f->name);
    puts_(w, suffix);
    if (!f->nlabels && !le)
        return;
    put(w, "{", 1);
    for (size_t i = 0; i < f->nlabels; i++) {
        if (i)
            put(w, ",", 1);
        puts_(w, f->labels[i]);
        put(w, "=\"", 2);
        put_escaped(w, s->values[i], true);
        put(w, "\"", 1);
    }
    if (le) {
        puts_(w, f->nlabels ? ",le=\"" : "le=\"");
        puts_(w, le);
        put(w, "\"", 1);
    }
    put(w, "}", 1);
}

static void put_histogram(struct writer *w, const struct ipd_metric_family *f,
                          struct ipd_metric_series *s)
{
    uint64_t cum = 0;
    for (size_t i = 0; i <= f->nbuckets; i++) {
        cum += atomic_load_explicit(&s->buckets[i], memory_order_relaxed);
        put_series_name(w, f, s, "_bucket",
                        i < f->nbuckets ? f->le[i] : "+Inf");
        put(w, " ", 1);
        put_u64(w, cum);
        put(w, "\n", 1);
    }
    put_series_name(w, f, s, "_sum", NULL);
    put(w, " ", 1);
    put_double(w, bitsd(atomic_load_explicit(&s->v, memory_order_relaxed)));
    put(w, "\n", 1);
    put_series_name(w, f, s, "_count", NULL);
    put(w, " ", 1);
    put_u64(w, cum);
    put(w, "\n", 1);
}

static void put_series(struct writer *w, const struct ipd_metric_family *f,
                       struct ipd_metric_series *s)
{
    if (f->type == IPD_METRIC_HISTOGRAM) {
        put_histogram(w, f, s);
        return;
    }
    put_series_name(w, f, s, "", NULL);
    put(w, " ", 1);
    uint64_t v = atomic_load_explicit(&s->v, memory_order_relaxed);
    if (f->type == IPD_METRIC_COUNTER)
        put_u64(w, v);
    else
        put_double(w, bitsd(v));
    put(w, "\n", 1);
}

static const char *type_name(enum ipd_metric_type t)
{
    switch (t) {
    case IPD_METRIC_COUNTER: return "counter";
    case IPD_METRIC_GAUGE: return "gauge";
    case IPD_METRIC_HISTOGRAM: return "histogram";
    }
    return "untyped";
}

/* Under m->lock, after run_value_fns. */
static void put_family(struct writer *w, struct ipd_metric_family *f)
{
    size_t n = atomic_load_explicit(&f->nseries, memory_order_acquire);
    if (f->fn ? !f->fn_ok : !n)
        return; /* a family without samples is left out */
    puts_(w, "# HELP ");
    puts_(w, f->name);
    put(w, " ", 1);
    put_escaped(w, f->help, false);
    puts_(w, "\n# TYPE ");
    puts_(w, f->name);
    put(w, " ", 1);
    puts_(w, type_name(f->type));
    put(w, "\n", 1);
    if (f->fn) {
        puts_(w, f->name);
        put(w, " ", 1);
        put_double(w, f->fn_value);
        put(w, "\n", 1);
        return;
    }
    for (size_t i = 0; i < n; i++)
        put_series(w, f, f->list[i]);
}

/* Under m->lock: every value function, before anything is written, so
 * their errors count in this scrape. */
static void run_value_fns(struct ipd_metrics *m)
{
    for (size_t i = 0; i < m->nfams; i++) {
        struct ipd_metric_family *f = m->fams[i];
        if (!f->fn)
            continue;
        f->fn_value = 0;
        f->fn_ok = f->fn(f->fn_ctx, &f->fn_value) == IPD_OK;
        if (!f->fn_ok) {
            const char *v[1] = {f->name};
            ipd_metrics_series_inc(ipd_metrics_series_get(m->scrape_errors, v),
                                   1);
        }
    }
}

enum ipd_err ipd_metrics_render(struct ipd_metrics *m, struct ipd_buf *out)
{
    struct writer w = {out, IPD_OK};
    if (!m)
        return IPD_OK;
    pthread_mutex_lock(&m->lock);
    /* printf and strtod follow LC_NUMERIC; Prometheus wants '.' always. */
    locale_t old = uselocale(m->c_locale);
    run_value_fns(m);
    for (size_t i = 0; i < m->nfams && !w.rc; i++)
        put_family(&w, m->fams[i]);
    uselocale(old);
    pthread_mutex_unlock(&m->lock);
    return w.rc;
}

/* ---- Process metrics --------------------------------------------------- */

/* /proc/self/statm: size resident shared text lib data dt, in pages. */
static enum ipd_err read_statm(size_t field, double *value)
{
    char s[256];
    enum ipd_err rc = IPD_ERR_IO;
    int fd = open("/proc/self/statm", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return rc;
    ssize_t n = read(fd, s, sizeof(s) - 1);
    close(fd);
    if (n <= 0)
        return rc;
    s[n] = '\0';
    char *p = s;
    unsigned long long pages = 0;
    for (size_t i = 0; i <= field; i++) {
        char *end;
        pages = strtoull(p, &end, 10);
        if (end == p)
            return rc;
        p = end;
    }
    long page = sysconf(_SC_PAGESIZE);
    if (page <= 0)
        return rc;
    *value = (double)pages * (double)page;
    return IPD_OK;
}

static enum ipd_err resident_bytes(void *ctx, double *value)
{
    (void)ctx;
    return read_statm(1, value);
}

static enum ipd_err virtual_bytes(void *ctx, double *value)
{
    (void)ctx;
    return read_statm(0, value);
}

static enum ipd_err open_fds(void *ctx, double *value)
{
    (void)ctx;
    DIR *d = opendir("/proc/self/fd");
    if (!d)
        return IPD_ERR_IO;
    long self = dirfd(d), n = 0;
    struct dirent *e;
    while ((e = ipd_readdir(d)) != NULL) {
        if (strtol(e->d_name, NULL, 10) != self)
            n++;
    }
    closedir(d);
    *value = (double)n;
    return IPD_OK;
}

static enum ipd_err max_fds(void *ctx, double *value)
{
    struct rlimit rl;
    (void)ctx;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
        return IPD_ERR_IO;
    *value = rl.rlim_cur == RLIM_INFINITY ? INFINITY : (double)rl.rlim_cur;
    return IPD_OK;
}

static enum ipd_err cpu_seconds(void *ctx, double *value)
{
    struct timespec ts;
    (void)ctx;
    if (clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts) != 0)
        return IPD_ERR_IO;
    *value = (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
    return IPD_OK;
}

/* ---- The interpd families ---------------------------------------------- */

/* Tables, laid out as tables: */
/* clang-format off */
/* Request latencies run from a health check to a synchronous execution at
 * its 300 s ceiling. */
static const double http_buckets[] = {
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
    0.5,   1,      2.5,   5,    10,    30,   60,  120,  300,
};
static const double exec_buckets[] = {
    0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300,
};

struct family_def {
    size_t offset; /* of the struct ipd_metric_family * in struct ipd_metrics;
                      SIZE_MAX: not kept */
    enum ipd_metric_type type;
    const char *name;
    const char *help;
    const char *labels[3];
    size_t nlabels;
    const double *buckets;
    size_t nbuckets;
    ipd_metrics_value_fn *fn;
};

#define KEEP(field) offsetof(struct ipd_metrics, field)
#define NOKEEP SIZE_MAX

static const struct family_def family_defs[] = {
    {NOKEEP, IPD_METRIC_GAUGE, "interpd_build_info",
     "Always 1; the version is a label.", {"version"}, 1, NULL, 0, NULL},
    {NOKEEP, IPD_METRIC_GAUGE, "interpd_start_time_seconds",
     "Start time of the process since the Unix epoch, in seconds.", {0}, 0,
     NULL, 0, NULL},
    {KEEP(http_requests), IPD_METRIC_COUNTER, "interpd_http_requests_total",
     "HTTP requests answered, by route template, method and status.",
     {"route", "method", "status"}, 3, NULL, 0, NULL},
    {KEEP(http_duration), IPD_METRIC_HISTOGRAM,
     "interpd_http_request_duration_seconds",
     "Time from a request's arrival to its answer, by route template.",
     {"route"}, 1, http_buckets, IPD_ARRAY_LEN(http_buckets), NULL},
    {KEEP(exec_total), IPD_METRIC_COUNTER, "interpd_executions_total",
     "Code executions finished, by outcome.", {"outcome"}, 1, NULL, 0, NULL},
    {KEEP(exec_duration), IPD_METRIC_HISTOGRAM,
     "interpd_execution_duration_seconds",
     "Wall time of code executions, sandbox set-up included.", {0}, 0,
     exec_buckets, IPD_ARRAY_LEN(exec_buckets), NULL},
    {KEEP(gauges[IPD_METRICS_EXEC_QUEUE_DEPTH]), IPD_METRIC_GAUGE,
     "interpd_exec_queue_depth", "Executions waiting for a worker.", {0}, 0,
     NULL, 0, NULL},
    {KEEP(gauges[IPD_METRICS_EXEC_RUNNING]), IPD_METRIC_GAUGE,
     "interpd_exec_running", "Executions running now.", {0}, 0, NULL, 0,
     NULL},
    {KEEP(gauges[IPD_METRICS_SESSIONS_LIVE]), IPD_METRIC_GAUGE,
     "interpd_sessions_live", "Live sessions on this node.", {0}, 0, NULL, 0,
     NULL},
    {KEEP(gauges[IPD_METRICS_SESSIONS_MEMORY]), IPD_METRIC_GAUGE,
     "interpd_sessions_memory_bytes",
     "Memory of the live sessions' cgroups at their last call's end.", {0},
     0, NULL, 0, NULL},
    {KEEP(gauges[IPD_METRICS_SESSIONS_CHARGED]), IPD_METRIC_GAUGE,
     "interpd_sessions_memory_charged_bytes",
     "What the live sessions are charged against sessions-memory: their "
     "policies' memory limits.", {0}, 0, NULL, 0, NULL},
    {KEEP(gauges[IPD_METRICS_WARM_SET_MODULES]), IPD_METRIC_GAUGE,
     "interpd_warm_set_modules",
     "Modules the newest warm zygote imported beyond warm-modules (the "
     "adaptive warm set).", {0}, 0, NULL, 0, NULL},
    {KEEP(gauges[IPD_METRICS_WARM_SET_BYTES]), IPD_METRIC_GAUGE,
     "interpd_warm_set_bytes",
     "Resident memory the adaptive warm set adds to each warm zygote.", {0},
     0, NULL, 0, NULL},
    {KEEP(gauges[IPD_METRICS_FILES_STORED]), IPD_METRIC_GAUGE,
     "interpd_files_stored", "Files in the metadata store.", {0}, 0, NULL, 0,
     NULL},
    {KEEP(gauges[IPD_METRICS_BYTES_STORED]), IPD_METRIC_GAUGE,
     "interpd_bytes_stored", "Bytes of the files in the metadata store.",
     {0}, 0, NULL, 0, NULL},
    {KEEP(sweep_runs), IPD_METRIC_COUNTER, "interpd_sweep_runs_total",
     "Expiry sweeps run, by result.", {"result"}, 1, NULL, 0, NULL},
    {NOKEEP, IPD_METRIC_COUNTER, "interpd_sweep_deleted_files_total",
     "Expired files deleted by sweeps.", {0}, 0, NULL, 0, NULL},
    {NOKEEP, IPD_METRIC_COUNTER, "interpd_sweep_freed_bytes_total",
     "Bytes freed by sweeps.", {0}, 0, NULL, 0, NULL},
    {KEEP(installs), IPD_METRIC_COUNTER, "interpd_package_installs_total",
     "Packages requested for installation, by outcome.", {"outcome"}, 1,
     NULL, 0, NULL},
    {KEEP(scrape_errors), IPD_METRIC_COUNTER, "interpd_scrape_errors_total",
     "Samples left out of a scrape because computing them failed, by "
     "metric.",
     {"metric"}, 1, NULL, 0, NULL},
    {NOKEEP, IPD_METRIC_GAUGE, "process_resident_memory_bytes",
     "Resident memory size in bytes.", {0}, 0, NULL, 0, resident_bytes},
    {NOKEEP, IPD_METRIC_GAUGE, "process_virtual_memory_bytes",
     "Virtual memory size in bytes.", {0}, 0, NULL, 0, virtual_bytes},
    {NOKEEP, IPD_METRIC_GAUGE, "process_open_fds",
     "Open file descriptors.", {0}, 0, NULL, 0, open_fds},
    {NOKEEP, IPD_METRIC_GAUGE, "process_max_fds",
     "Limit on open file descriptors.", {0}, 0, NULL, 0, max_fds},
    {NOKEEP, IPD_METRIC_COUNTER, "process_cpu_seconds_total",
     "User and system CPU time spent, in seconds.", {0}, 0, NULL, 0,
     cpu_seconds},
};
/* clang-format on */

static enum ipd_err add_families(struct ipd_metrics *m)
{
    enum ipd_err rc = IPD_OK;
    for (size_t i = 0; i < IPD_ARRAY_LEN(family_defs) && !rc; i++) {
        const struct family_def *d = &family_defs[i];
        struct ipd_metric_family *f = NULL;
        rc = ipd_metrics_family_add(m, d->type, d->name, d->help, d->labels,
                                    d->nlabels, d->buckets, d->nbuckets, &f);
        if (!rc && d->offset != NOKEEP)
            memcpy((char *)m + d->offset, &f, sizeof(f));
        if (!rc && d->fn)
            rc = ipd_metrics_family_set_fn(f, d->fn, NULL);
    }
    return rc;
}

static struct ipd_metric_family *family_named(struct ipd_metrics *m,
                                              const char *name)
{
    for (size_t i = 0; i < m->nfams; i++)
        if (!strcmp(m->fams[i]->name, name))
            return m->fams[i];
    return NULL;
}

/* The series every scrape shows, at 0 until used, so rate() sees the
 * first event. */
static void add_series(struct ipd_metrics *m, const char *version)
{
    const char *v[1] = {version};
    ipd_metrics_series_set(
        ipd_metrics_series_get(family_named(m, "interpd_build_info"), v), 1);
    ipd_metrics_series_set(
        ipd_metrics_series_get(family_named(m, "interpd_start_time_seconds"),
                               NULL),
        (double)ipd_now_ms() / 1000.0);
    for (size_t i = 0; i < IPD_ARRAY_LEN(exec_outcomes); i++) {
        v[0] = exec_outcomes[i];
        m->exec_series[i] = ipd_metrics_series_get(m->exec_total, v);
    }
    for (size_t i = 0; i < IPD_ARRAY_LEN(install_outcomes); i++) {
        v[0] = install_outcomes[i];
        m->install_series[i] = ipd_metrics_series_get(m->installs, v);
    }
    v[0] = "ok";
    m->sweep_ok = ipd_metrics_series_get(m->sweep_runs, v);
    v[0] = "error";
    m->sweep_error = ipd_metrics_series_get(m->sweep_runs, v);
    m->sweep_deleted = ipd_metrics_series_get(
        family_named(m, "interpd_sweep_deleted_files_total"), NULL);
    m->sweep_freed = ipd_metrics_series_get(
        family_named(m, "interpd_sweep_freed_bytes_total"), NULL);
    m->exec_duration_series = ipd_metrics_series_get(m->exec_duration, NULL);
    ipd_metrics_series_get(m->gauges[IPD_METRICS_EXEC_QUEUE_DEPTH], NULL);
    ipd_metrics_series_get(m->gauges[IPD_METRICS_EXEC_RUNNING], NULL);
}

enum ipd_err ipd_metrics_new(const char *version, struct ipd_metrics **out)
{
    enum ipd_err rc = IPD_OK;
    struct ipd_metrics *m = ipd_xcalloc(1, sizeof(*m));
    *out = NULL;
    pthread_mutex_init(&m->lock, NULL);
    m->c_locale = newlocale(LC_ALL_MASK, "C", (locale_t)0);
    if (!m->c_locale) {
        rc = IPD_ERR_NOMEM;
        goto out;
    }
    rc = add_families(m);
    if (rc)
        goto out;
    add_series(m, version ? version : "unknown");
    *out = m;
    m = NULL;
out:
    ipd_metrics_free(m);
    return rc;
}

void ipd_metrics_free(struct ipd_metrics *m)
{
    if (!m)
        return;
    for (size_t i = 0; i < m->nfams; i++)
        family_free(m->fams[i]);
    if (m->c_locale)
        freelocale(m->c_locale);
    pthread_mutex_destroy(&m->lock);
    free(m);
}

/* ---- The interpd layer ------------------------------------------------- */

/* Methods come from the client: anything unusual is "other", so a client
 * can't fill the family. */
static const char *method_label(const char *method)
{
    static const char *const known[] = {"GET",   "HEAD",   "POST",   "PUT",
                                        "PATCH", "DELETE", "OPTIONS"};
    for (size_t i = 0; method && i < IPD_ARRAY_LEN(known); i++)
        if (!strcmp(method, known[i]))
            return known[i];
    return IPD_METRICS_OTHER;
}

static const char *status_label(int status, char out[4])
{
    if (status < 100 || status > 599)
        return IPD_METRICS_OTHER;
    out[0] = (char)('0' + status / 100);
    out[1] = (char)('0' + status / 10 % 10);
    out[2] = (char)('0' + status % 10);
    out[3] = '\0';
    return out;
}

void ipd_metrics_http_observe(struct ipd_metrics *m, const char *route,
                              const char *method, int status, double seconds)
{
    char st[4];
    if (!m)
        return;
    const char *v[3] = {route ? route : IPD_METRICS_OTHER, method_label(method),
                        status_label(status, st)};
    ipd_metrics_series_inc(ipd_metrics_series_get(m->http_requests, v), 1);
    if (seconds >= 0)
        ipd_metrics_series_observe(ipd_metrics_series_get(m->http_duration, v),
                                   seconds);
}

void ipd_metrics_exec_observe(struct ipd_metrics *m,
                              enum ipd_metrics_exec_outcome outcome,
                              double seconds)
{
    const char *other[1] = {IPD_METRICS_OTHER};
    if (!m)
        return;
    if ((size_t)outcome < IPD_ARRAY_LEN(m->exec_series))
        ipd_metrics_series_inc(m->exec_series[outcome], 1);
    else
        ipd_metrics_series_inc(ipd_metrics_series_get(m->exec_total, other), 1);
    if (seconds >= 0)
        ipd_metrics_series_observe(m->exec_duration_series, seconds);
}

void ipd_metrics_sweep_observe(struct ipd_metrics *m, bool ok,
                               int64_t deleted_files, int64_t freed_bytes)
{
    if (!m)
        return;
    ipd_metrics_series_inc(ok ? m->sweep_ok : m->sweep_error, 1);
    if (deleted_files > 0)
        ipd_metrics_series_inc(m->sweep_deleted, (uint64_t)deleted_files);
    if (freed_bytes > 0)
        ipd_metrics_series_inc(m->sweep_freed, (uint64_t)freed_bytes);
}

void ipd_metrics_install_observe(struct ipd_metrics *m,
                                 enum ipd_metrics_install_outcome outcome)
{
    const char *other[1] = {IPD_METRICS_OTHER};
    if (!m)
        return;
    if ((size_t)outcome < IPD_ARRAY_LEN(m->install_series))
        ipd_metrics_series_inc(m->install_series[outcome], 1);
    else
        ipd_metrics_series_inc(ipd_metrics_series_get(m->installs, other), 1);
}

static struct ipd_metric_family *gauge_family(struct ipd_metrics *m,
                                              enum ipd_metrics_gauge g)
{
    return m && (size_t)g < IPD_ARRAY_LEN(m->gauges) ? m->gauges[g] : NULL;
}

void ipd_metrics_gauge_set(struct ipd_metrics *m, enum ipd_metrics_gauge g,
                           double value)
{
    ipd_metrics_series_set(ipd_metrics_series_get(gauge_family(m, g), NULL),
                           value);
}

void ipd_metrics_gauge_add(struct ipd_metrics *m, enum ipd_metrics_gauge g,
                           double delta)
{
    ipd_metrics_series_add(ipd_metrics_series_get(gauge_family(m, g), NULL),
                           delta);
}

void ipd_metrics_set_gauge_fn(struct ipd_metrics *m, enum ipd_metrics_gauge g,
                              ipd_metrics_value_fn *fn, void *ctx)
{
    ipd_metrics_family_set_fn(gauge_family(m, g), fn, ctx);
}
