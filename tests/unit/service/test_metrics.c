/*
 * test_metrics.c - the metrics registry: exact counts under 8 threads,
 * histogram buckets, label escaping, the cardinality bound, value
 * functions, number formatting, and the rendered text through
 * tests/support/check-prom.py (which runs promtool too when it is on PATH
 * or named by PROMTOOL).  The checker itself is tested on malformed texts.
 * Ends with a micro-benchmark that only prints (no timing assertions).
 *
 * The checker is found from this file's path, or IPD_CHECK_PROM.
 */
#include <fcntl.h>
#include <ftw.h>
#include <locale.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "service/common/buf.h"
#include "service/common/metrics.h"
#include "test.h"

#define PYTHON "/usr/bin/python3"

/* ---- Helpers ----------------------------------------------------------- */

/* The whole rendering, NUL-terminated; free() it.  NULL on error. */
static char *render(struct ipd_metrics *m)
{
    struct ipd_buf b;
    ipd_buf_init(&b, IPD_BUF_UNLIMITED);
    if (ipd_metrics_render(m, &b) != IPD_OK) {
        ipd_buf_release(&b);
        return NULL;
    }
    return ipd_buf_detach(&b, NULL);
}

/* Copy the value text of the sample line "<series> <value>" to out. */
static bool sample(const char *text, const char *series, char *out, size_t n)
{
    size_t len = strlen(series);
    for (const char *p = text; p && *p;) {
        const char *eol = strchr(p, '\n');
        size_t line = eol ? (size_t)(eol - p) : strlen(p);
        if (line > len && !strncmp(p, series, len) && p[len] == ' ') {
            size_t v = line - len - 1;
            if (v >= n)
                return false;
            memcpy(out, p + len + 1, v);
            out[v] = '\0';
            return true;
        }
        p = eol ? eol + 1 : NULL;
    }
    return false;
}

/* A sample's value as a number; NaN when missing. */
static double value(const char *text, const char *series)
{
    char v[64];
    return sample(text, series, v, sizeof(v)) ? strtod(v, NULL) : NAN;
}

/* A count sample's value; -1 when missing or not a whole number. */
static long long count(const char *text, const char *series)
{
    double v = value(text, series);
    return v >= 0 && v < 9e15 && v == (double)(long long)v ? (long long)v : -1;
}

static size_t count_lines_with_prefix(const char *text, const char *prefix)
{
    size_t n = 0, len = strlen(prefix);
    for (const char *p = text; p && *p;) {
        if (!strncmp(p, prefix, len))
            n++;
        p = strchr(p, '\n');
        p = p ? p + 1 : NULL;
    }
    return n;
}

/* <source root>/tests/support/check-prom.py, from this file's path. */
static const char *checker_path(void)
{
    static char path[1024];
    const char *env = getenv("IPD_CHECK_PROM");
    if (env && *env)
        return env;
    const char *f = __FILE__;
    const char *p = strstr(f, "/tests/unit/service/");
    if (f[0] != '/' || !p)
        return NULL;
    snprintf(path, sizeof(path), "%.*s/tests/support/check-prom.py",
             (int)(p - f), f);
    return path;
}

static bool write_file(const char *path, const char *data, size_t len)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0)
        return false;
    bool ok = true;
    while (len && ok) {
        ssize_t n = write(fd, data, len);
        ok = n > 0;
        if (ok) {
            data += n;
            len -= (size_t)n;
        }
    }
    close(fd);
    return ok;
}

static void read_file(const char *path, struct ipd_buf *out)
{
    char chunk[4096];
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    ssize_t n;
    if (fd < 0)
        return;
    while ((n = read(fd, chunk, sizeof(chunk))) > 0)
        ipd_buf_add(out, chunk, (size_t)n);
    close(fd);
}

/*
 * Run check-prom.py on len bytes of text; its exit status (-1: it did not
 * run or died).  Its stderr is appended to err (may be NULL: then it goes
 * to ours).
 */
static int run_checker(const char *text, size_t len, bool promtool,
                       struct ipd_buf *err)
{
    const char *script = checker_path();
    char in[] = "/tmp/ipd-metrics-in-XXXXXX";
    char errf[] = "/tmp/ipd-metrics-err-XXXXXX";
    int rc = -1, status = 0;
    int fd_in = mkstemp(in);
    int fd_err = mkstemp(errf);
    if (!script || fd_in < 0 || fd_err < 0)
        goto out;
    close(fd_in);
    if (!write_file(in, text, len))
        goto out;
    pid_t pid = fork();
    if (pid == 0) {
        if (err)
            dup2(fd_err, 2);
        if (promtool)
            execl(PYTHON, PYTHON, script, in, (char *)NULL);
        else
            execl(PYTHON, PYTHON, script, "--no-promtool", in, (char *)NULL);
        _exit(127);
    }
    if (pid > 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status))
        rc = WEXITSTATUS(status);
    if (err)
        read_file(errf, err);
out:
    if (fd_in >= 0)
        unlink(in);
    if (fd_err >= 0) {
        close(fd_err);
        unlink(errf);
    }
    return rc;
}

/* The rendering passes the checker (and promtool when present). */
static void check_valid(const char *text)
{
    int rc = run_checker(text, strlen(text), true, NULL);
    CHECK_INT(rc, 0);
    if (rc != 0)
        fprintf(stderr, "--- rejected text ---\n%s--- end ---\n", text);
}

/* ---- The registry ------------------------------------------------------ */

static void null_registry_is_noop(void)
{
    struct ipd_buf b;
    struct ipd_metric_family *f = (struct ipd_metric_family *)&b;
    const char *v[1] = {"x"};
    ipd_buf_init(&b, 1024);
    ipd_metrics_http_observe(NULL, "/v1/files", "GET", 200, 0.1);
    ipd_metrics_exec_observe(NULL, IPD_METRICS_EXEC_SUCCESS, 1);
    ipd_metrics_sweep_observe(NULL, true, 1, 2);
    ipd_metrics_install_observe(NULL, IPD_METRICS_INSTALL_FAILED);
    ipd_metrics_gauge_set(NULL, IPD_METRICS_EXEC_RUNNING, 1);
    ipd_metrics_gauge_add(NULL, IPD_METRICS_EXEC_RUNNING, 1);
    ipd_metrics_set_gauge_fn(NULL, IPD_METRICS_FILES_STORED, NULL, NULL);
    CHECK_INT(ipd_metrics_family_add(NULL, IPD_METRIC_COUNTER, "x_total", "",
                                     NULL, 0, NULL, 0, &f),
              IPD_OK);
    CHECK(f == NULL);
    CHECK(ipd_metrics_series_get(NULL, v) == NULL);
    ipd_metrics_series_inc(NULL, 1);
    ipd_metrics_series_set(NULL, 1);
    ipd_metrics_series_add(NULL, 1);
    ipd_metrics_series_observe(NULL, 1);
    CHECK_INT(ipd_metrics_family_set_fn(NULL, NULL, NULL), IPD_OK);
    CHECK_INT(ipd_metrics_render(NULL, &b), IPD_OK);
    CHECK_INT(b.len, 0);
    ipd_metrics_free(NULL);
    ipd_buf_release(&b);
}

static void fresh_registry_renders_valid_text(void)
{
    struct ipd_metrics *m = NULL;
    REQUIRE(ipd_metrics_new("1.2.3", &m) == IPD_OK);
    char *t = render(m);
    REQUIRE(t);
    CHECK(value(t, "interpd_build_info{version=\"1.2.3\"}") == 1);
    double start = value(t, "interpd_start_time_seconds");
    CHECK(fabs(start - (double)time(NULL)) < 120);
    CHECK(value(t, "process_resident_memory_bytes") > 0);
    CHECK(value(t, "process_virtual_memory_bytes") > 0);
    CHECK(value(t, "process_open_fds") >= 3);
    CHECK(value(t, "process_max_fds") >= 3);
    CHECK(value(t, "process_cpu_seconds_total") >= 0);
    CHECK(value(t, "interpd_executions_total{outcome=\"timeout\"}") == 0);
    CHECK(value(t, "interpd_package_installs_total{outcome=\"not_allowed\"}") ==
          0);
    CHECK(value(t, "interpd_sweep_runs_total{result=\"error\"}") == 0);
    CHECK(value(t, "interpd_execution_duration_seconds_count") == 0);
    CHECK(value(t, "interpd_exec_queue_depth") == 0);
    CHECK(
        value(t, "interpd_scrape_errors_total{metric=\"process_open_fds\"}") ==
        0);
    /* No HTTP request yet, no stored-files function: no such families. */
    CHECK(!strstr(t, "interpd_http_requests_total"));
    CHECK(!strstr(t, "interpd_files_stored"));
    CHECK_INT(count_lines_with_prefix(t, "# TYPE interpd_executions_total "),
              1);
    CHECK(strstr(t, "# TYPE interpd_execution_duration_seconds histogram\n"));
    CHECK(t[strlen(t) - 1] == '\n');
    check_valid(t);
    free(t);
    ipd_metrics_free(m);

    REQUIRE(ipd_metrics_new(NULL, &m) == IPD_OK);
    t = render(m);
    REQUIRE(t);
    CHECK(value(t, "interpd_build_info{version=\"unknown\"}") == 1);
    free(t);
    ipd_metrics_free(m);
}

/* ---- 8 threads --------------------------------------------------------- */

#define THREADS 8
#define ITERS 20000

static const char *const routes[] = {"/v1/files", "/v1/files/{id}",
                                     "/v1/executions", "other"};

struct worker {
    struct ipd_metrics *m;
    struct ipd_metric_family *fam; /* series created by racing threads */
    int id;
};

/* Every route sees both methods and both statuses. */
static const char *method_of(int i)
{
    return i / 4 % 2 ? "GET" : "POST";
}
static int status_of(int i)
{
    return i % 3 ? 200 : 404;
}

static void *observe_loop(void *arg)
{
    const struct worker *w = arg;
    char name[32];
    for (int i = 0; i < ITERS; i++) {
        ipd_metrics_http_observe(w->m, routes[i % 4], method_of(i),
                                 status_of(i), 0.25);
        ipd_metrics_exec_observe(w->m, (enum ipd_metrics_exec_outcome)(i % 5),
                                 i % 2 ? 0.5 : 2);
        ipd_metrics_install_observe(w->m,
                                    (enum ipd_metrics_install_outcome)(i % 5));
        ipd_metrics_sweep_observe(w->m, i % 4 != 0, 1, 10);
        ipd_metrics_gauge_add(w->m, IPD_METRICS_EXEC_RUNNING, 1);
        ipd_metrics_gauge_add(w->m, IPD_METRICS_EXEC_QUEUE_DEPTH, 0.5);
        ipd_metrics_gauge_add(w->m, IPD_METRICS_EXEC_RUNNING, -1);
        /* 50 series per thread, created while other threads look up. */
        snprintf(name, sizeof(name), "k%d", i % 50);
        const char *v[2] = {name, (w->id % 2) ? "odd" : "even"};
        ipd_metrics_series_inc(ipd_metrics_series_get(w->fam, v), 1);
    }
    return NULL;
}

static void concurrent_observes_are_exact(void)
{
    struct ipd_metrics *m = NULL;
    struct ipd_metric_family *fam = NULL;
    const char *labels[2] = {"key", "parity"};
    pthread_t th[THREADS];
    struct worker w[THREADS];
    REQUIRE(ipd_metrics_new("t", &m) == IPD_OK);
    REQUIRE(ipd_metrics_family_add(m, IPD_METRIC_COUNTER, "test_race_total",
                                   "Racing inserts.", labels, 2, NULL, 0,
                                   &fam) == IPD_OK);
    for (int t = 0; t < THREADS; t++) {
        w[t] = (struct worker){m, fam, t};
        REQUIRE(pthread_create(&th[t], NULL, observe_loop, &w[t]) == 0);
    }
    /* Render while they run: every mid-flight text is consistent. */
    for (int i = 0; i < 3; i++) {
        char *mid = render(m);
        if (mid)
            check_valid(mid);
        free(mid);
    }
    for (int t = 0; t < THREADS; t++)
        pthread_join(th[t], NULL);

    char *t = render(m);
    REQUIRE(t);
    char series[256];
    long expect[4][2][2] = {{{0}}}; /* route, GET?, 404? */
    for (int i = 0; i < ITERS; i++)
        expect[i % 4][i / 4 % 2][status_of(i) == 404]++;
    for (int r = 0; r < 4; r++) {
        for (int g = 0; g < 2; g++) {
            for (int s = 0; s < 2; s++) {
                snprintf(series, sizeof(series),
                         "interpd_http_requests_total{route=\"%s\","
                         "method=\"%s\",status=\"%s\"}",
                         routes[r], g ? "GET" : "POST", s ? "404" : "200");
                CHECK_INT(count(t, series), THREADS * expect[r][g][s]);
            }
        }
        snprintf(series, sizeof(series),
                 "interpd_http_request_duration_seconds_count{route=\"%s\"}",
                 routes[r]);
        CHECK_INT(count(t, series), THREADS * ITERS / 4);
        snprintf(series, sizeof(series),
                 "interpd_http_request_duration_seconds_sum{route=\"%s\"}",
                 routes[r]);
        CHECK(value(t, series) == THREADS * ITERS / 4 * 0.25);
        snprintf(series, sizeof(series),
                 "interpd_http_request_duration_seconds_bucket{route=\"%s\","
                 "le=\"0.1\"}",
                 routes[r]);
        CHECK(value(t, series) == 0);
        snprintf(series, sizeof(series),
                 "interpd_http_request_duration_seconds_bucket{route=\"%s\","
                 "le=\"0.25\"}",
                 routes[r]);
        CHECK_INT(count(t, series), THREADS * ITERS / 4);
    }
    static const char *const outcomes[] = {"success", "error", "timeout", "oom",
                                           "failed_to_start"};
    for (int o = 0; o < 5; o++) {
        snprintf(series, sizeof(series),
                 "interpd_executions_total{outcome=\"%s\"}", outcomes[o]);
        CHECK_INT(count(t, series), THREADS * ITERS / 5);
    }
    CHECK_INT(count(t, "interpd_execution_duration_seconds_count"),
              THREADS * ITERS);
    CHECK(value(t, "interpd_execution_duration_seconds_sum") ==
          THREADS * (ITERS / 2 * 0.5 + ITERS / 2 * 2.0));
    CHECK_INT(count(t, "interpd_execution_duration_seconds_bucket{le=\"0.5\"}"),
              THREADS * ITERS / 2);
    CHECK_INT(count(t, "interpd_package_installs_total{outcome=\"invalid\"}"),
              THREADS * ITERS / 5);
    CHECK_INT(count(t, "interpd_sweep_runs_total{result=\"ok\"}"),
              THREADS * ITERS / 4 * 3);
    CHECK_INT(count(t, "interpd_sweep_runs_total{result=\"error\"}"),
              THREADS * ITERS / 4);
    CHECK_INT(count(t, "interpd_sweep_deleted_files_total"), THREADS * ITERS);
    CHECK_INT(count(t, "interpd_sweep_freed_bytes_total"),
              THREADS * ITERS * 10LL);
    CHECK(value(t, "interpd_exec_running") == 0);
    CHECK(value(t, "interpd_exec_queue_depth") == THREADS * ITERS * 0.5);
    for (int k = 0; k < 50; k++) {
        snprintf(series, sizeof(series),
                 "test_race_total{key=\"k%d\",parity=\"odd\"}", k);
        CHECK_INT(count(t, series), THREADS / 2 * ITERS / 50);
    }
    CHECK_INT(count_lines_with_prefix(t, "test_race_total{"), 100);
    check_valid(t);
    free(t);
    ipd_metrics_free(m);
}

/* ---- Histograms -------------------------------------------------------- */

static void histogram_bucket_math(void)
{
    struct ipd_metrics *m = NULL;
    struct ipd_metric_family *h = NULL, *hl = NULL;
    const double bounds[] = {0.1, 1, 10};
    const char *lab[1] = {"route"};
    const double obs[] = {0.05, 0.1, 0.5, 1, 5, 10, 11, -3};
    REQUIRE(ipd_metrics_new("t", &m) == IPD_OK);
    REQUIRE(ipd_metrics_family_add(m, IPD_METRIC_HISTOGRAM,
                                   "test_latency_seconds", "Latency.", NULL, 0,
                                   bounds, 3, &h) == IPD_OK);
    REQUIRE(ipd_metrics_family_add(m, IPD_METRIC_HISTOGRAM,
                                   "test_labelled_seconds", "Labelled.", lab, 1,
                                   bounds, 3, &hl) == IPD_OK);
    struct ipd_metric_series *s = ipd_metrics_series_get(h, NULL);
    for (size_t i = 0; i < IPD_ARRAY_LEN(obs); i++)
        ipd_metrics_series_observe(s, obs[i]);
    const char *v[1] = {"/a"};
    ipd_metrics_series_observe(ipd_metrics_series_get(hl, v), 0.5);
    ipd_metrics_series_observe(ipd_metrics_series_get(hl, v), NAN);

    char *t = render(m);
    REQUIRE(t);
    /* le is inclusive: 0.1 and 10 land in their own bucket. */
    CHECK(strstr(t, "test_latency_seconds_bucket{le=\"0.1\"} 3\n"
                    "test_latency_seconds_bucket{le=\"1\"} 5\n"
                    "test_latency_seconds_bucket{le=\"10\"} 7\n"
                    "test_latency_seconds_bucket{le=\"+Inf\"} 8\n"
                    "test_latency_seconds_sum "));
    CHECK(fabs(value(t, "test_latency_seconds_sum") - 24.65) < 1e-9);
    CHECK(strstr(t, "test_latency_seconds_count 8\n"));
    /* NaN counts only in +Inf and makes the sum NaN. */
    CHECK(strstr(t, "test_labelled_seconds_bucket{route=\"/a\",le=\"0.1\"} 0\n"
                    "test_labelled_seconds_bucket{route=\"/a\",le=\"1\"} 1\n"
                    "test_labelled_seconds_bucket{route=\"/a\",le=\"10\"} 1\n"
                    "test_labelled_seconds_bucket{route=\"/a\",le=\"+Inf\"} 2\n"
                    "test_labelled_seconds_sum{route=\"/a\"} NaN\n"
                    "test_labelled_seconds_count{route=\"/a\"} 2\n"));
    /* The interpd buckets, as Prometheus spells them. */
    ipd_metrics_http_observe(m, "/v1/health", "GET", 200, 0.003);
    ipd_metrics_http_observe(m, "/v1/health", "GET", 200, -1); /* no time */
    free(t);
    t = render(m);
    REQUIRE(t);
    CHECK(value(t, "interpd_http_request_duration_seconds_bucket{route=\"/v1/"
                   "health\",le=\"0.0025\"}") == 0);
    CHECK(value(t, "interpd_http_request_duration_seconds_bucket{route=\"/v1/"
                   "health\",le=\"0.005\"}") == 1);
    CHECK(value(t, "interpd_http_request_duration_seconds_bucket{route=\"/v1/"
                   "health\",le=\"300\"}") == 1);
    CHECK(value(t, "interpd_http_request_duration_seconds_count{route=\"/v1/"
                   "health\"}") == 1);
    CHECK(value(t, "interpd_http_requests_total{route=\"/v1/health\","
                   "method=\"GET\",status=\"200\"}") == 2);
    CHECK(value(t, "interpd_execution_duration_seconds_bucket{le=\"0.01\"}") ==
          0);
    check_valid(t);
    free(t);
    ipd_metrics_free(m);
}

/* ---- Labels ------------------------------------------------------------ */

static void label_values_and_help_are_escaped(void)
{
    struct ipd_metrics *m = NULL;
    struct ipd_metric_family *f = NULL;
    const char *lab[1] = {"v"};
    const char *vals[] = {"a\"b",
                          "back\\slash",
                          "new\nline",
                          "",
                          "\xc3\xbc\xc3\xb1\xc3\xad",
                          "{x=\"y\"} 1"};
    REQUIRE(ipd_metrics_new("t", &m) == IPD_OK);
    REQUIRE(ipd_metrics_family_add(m, IPD_METRIC_COUNTER, "test_escape_total",
                                   "line1\nback\\slash \"quoted\"", lab, 1,
                                   NULL, 0, &f) == IPD_OK);
    for (size_t i = 0; i < IPD_ARRAY_LEN(vals); i++) {
        const char *v[1] = {vals[i]};
        ipd_metrics_series_inc(ipd_metrics_series_get(f, v), i + 1);
    }
    ipd_metrics_series_inc(ipd_metrics_series_get(f, NULL), 10); /* "" */
    char *t = render(m);
    REQUIRE(t);
    CHECK(strstr(t, "# HELP test_escape_total line1\\nback\\\\slash "
                    "\"quoted\"\n"));
    CHECK(strstr(t, "\ntest_escape_total{v=\"a\\\"b\"} 1\n"));
    CHECK(strstr(t, "\ntest_escape_total{v=\"back\\\\slash\"} 2\n"));
    CHECK(strstr(t, "\ntest_escape_total{v=\"new\\nline\"} 3\n"));
    CHECK(strstr(t, "\ntest_escape_total{v=\"\"} 14\n"));
    CHECK(strstr(t, "\ntest_escape_total{v=\"\xc3\xbc\xc3\xb1\xc3\xad\"} 5\n"));
    CHECK(strstr(t, "\ntest_escape_total{v=\"{x=\\\"y\\\"} 1\"} 6\n"));
    check_valid(t);
    free(t);
    ipd_metrics_free(m);
}

static void cardinality_bound_counts_into_other(void)
{
    struct ipd_metrics *m = NULL;
    struct ipd_metric_family *f = NULL, *g = NULL;
    const char *lab[2] = {"id", "kind"};
    char id[32], longv[IPD_METRICS_VALUE_MAX + 2];
    REQUIRE(ipd_metrics_new("t", &m) == IPD_OK);
    REQUIRE(ipd_metrics_family_add(m, IPD_METRIC_COUNTER, "test_overflow_total",
                                   "Bounded.", lab, 2, NULL, 0, &f) == IPD_OK);
    REQUIRE(ipd_metrics_family_add(m, IPD_METRIC_COUNTER, "test_other_total",
                                   "Other is also a real value.", lab, 1, NULL,
                                   0, &g) == IPD_OK);
    for (int i = 0; i < 300; i++) {
        snprintf(id, sizeof(id), "v%d", i);
        const char *v[2] = {id, "x"};
        ipd_metrics_series_inc(ipd_metrics_series_get(f, v), 1);
    }
    const char *v0[2] = {"v0", "x"};
    ipd_metrics_series_inc(ipd_metrics_series_get(f, v0), 1); /* exists */
    /* Not short valid UTF-8: "other" even while there is room. */
    memset(longv, 'a', sizeof(longv) - 1);
    longv[sizeof(longv) - 1] = '\0';
    const char *bad[2] = {"\xff\xfe", "x"};
    const char *lng[2] = {longv, "x"};
    ipd_metrics_series_inc(ipd_metrics_series_get(f, bad), 1);
    ipd_metrics_series_inc(ipd_metrics_series_get(f, lng), 1);
    /* g: "other" is a regular series first, the overflow later. */
    const char *o[1] = {"other"};
    ipd_metrics_series_inc(ipd_metrics_series_get(g, o), 1);
    for (int i = 0; i < 300; i++) {
        snprintf(id, sizeof(id), "v%d", i);
        const char *v[1] = {id};
        ipd_metrics_series_inc(ipd_metrics_series_get(g, v), 1);
    }
    /* Client-chosen methods and odd statuses can't add series. */
    ipd_metrics_http_observe(m, "/v1/files", "BREW", 999, 0.1);
    ipd_metrics_http_observe(m, NULL, NULL, 42, 0.1);

    char *t = render(m);
    REQUIRE(t);
    CHECK_INT(count_lines_with_prefix(t, "test_overflow_total{"),
              IPD_METRICS_MAX_SERIES + 1);
    CHECK(value(t, "test_overflow_total{id=\"v0\",kind=\"x\"}") == 2);
    CHECK(value(t, "test_overflow_total{id=\"v255\",kind=\"x\"}") == 1);
    CHECK(isnan(value(t, "test_overflow_total{id=\"v256\",kind=\"x\"}")));
    CHECK_INT(count(t, "test_overflow_total{id=\"other\",kind=\"other\"}"),
              300 - IPD_METRICS_MAX_SERIES + 2);
    CHECK_INT(count_lines_with_prefix(t, "test_other_total{"),
              IPD_METRICS_MAX_SERIES);
    CHECK_INT(count(t, "test_other_total{id=\"other\"}"),
              1 + 300 - (IPD_METRICS_MAX_SERIES - 1));
    CHECK(value(t, "interpd_http_requests_total{route=\"/v1/files\","
                   "method=\"other\",status=\"other\"}") == 1);
    CHECK(value(t, "interpd_http_requests_total{route=\"other\","
                   "method=\"other\",status=\"other\"}") == 1);
    check_valid(t);
    free(t);
    ipd_metrics_free(m);
}

/* ---- Value functions ---------------------------------------------------- */

static enum ipd_err answer_42(void *ctx, double *v)
{
    (void)ctx;
    *v = 42;
    return IPD_OK;
}

static enum ipd_err always_fails(void *ctx, double *v)
{
    (void)ctx;
    (void)v;
    return IPD_ERR_UNAVAILABLE;
}

static enum ipd_err count_calls(void *ctx, double *v)
{
    atomic_int *calls = ctx;
    *v = (double)(atomic_fetch_add(calls, 1) + 1);
    return IPD_OK;
}

static void gauge_functions(void)
{
    struct ipd_metrics *m = NULL;
    struct ipd_metric_family *hist = NULL, *lab = NULL;
    atomic_int calls = 0;
    const double b[] = {1};
    const char *l[1] = {"x"};
    REQUIRE(ipd_metrics_new("t", &m) == IPD_OK);
    ipd_metrics_gauge_set(m, IPD_METRICS_EXEC_RUNNING, 3);
    ipd_metrics_set_gauge_fn(m, IPD_METRICS_FILES_STORED, answer_42, NULL);
    ipd_metrics_set_gauge_fn(m, IPD_METRICS_BYTES_STORED, always_fails, NULL);
    ipd_metrics_set_gauge_fn(m, IPD_METRICS_EXEC_RUNNING, count_calls, &calls);

    char *t = render(m);
    REQUIRE(t);
    CHECK(value(t, "interpd_files_stored") == 42);
    CHECK(!strstr(t, "# TYPE interpd_bytes_stored"));
    CHECK(!strstr(t, "\ninterpd_bytes_stored "));
    CHECK(value(t, "interpd_scrape_errors_total{metric=\"interpd_bytes_"
                   "stored\"}") == 1);
    CHECK(value(t, "interpd_scrape_errors_total{metric=\"interpd_files_"
                   "stored\"}") == 0);
    CHECK(value(t, "interpd_exec_running") == 1);
    check_valid(t);
    free(t);

    t = render(m);
    REQUIRE(t);
    CHECK(value(t, "interpd_scrape_errors_total{metric=\"interpd_bytes_"
                   "stored\"}") == 2);
    CHECK(value(t, "interpd_exec_running") == 2);
    free(t);

    /* Removed: the stored value again, or no sample when never set. */
    ipd_metrics_set_gauge_fn(m, IPD_METRICS_EXEC_RUNNING, NULL, NULL);
    ipd_metrics_set_gauge_fn(m, IPD_METRICS_FILES_STORED, NULL, NULL);
    ipd_metrics_set_gauge_fn(m, IPD_METRICS_BYTES_STORED, NULL, NULL);
    ipd_metrics_gauge_set(m, IPD_METRICS_BYTES_STORED, 1e12);
    t = render(m);
    REQUIRE(t);
    CHECK(value(t, "interpd_exec_running") == 3);
    CHECK(!strstr(t, "# TYPE interpd_files_stored"));
    CHECK(value(t, "interpd_bytes_stored") == 1e12);
    CHECK_INT(atomic_load(&calls), 2);
    check_valid(t);
    free(t);

    REQUIRE(ipd_metrics_family_add(m, IPD_METRIC_HISTOGRAM, "test_h_seconds",
                                   "H.", NULL, 0, b, 1, &hist) == IPD_OK);
    REQUIRE(ipd_metrics_family_add(m, IPD_METRIC_GAUGE, "test_labelled", "L.",
                                   l, 1, NULL, 0, &lab) == IPD_OK);
    CHECK_INT(ipd_metrics_family_set_fn(hist, answer_42, NULL),
              IPD_ERR_INVALID);
    CHECK_INT(ipd_metrics_family_set_fn(lab, answer_42, NULL), IPD_ERR_INVALID);
    ipd_metrics_free(m);
}

/* ---- Numbers ----------------------------------------------------------- */

static char locale_dir[64]; /* a LOCPATH this test built; "" if none */

static int remove_entry(const char *path, const struct stat *st, int flag,
                        struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    return remove(path);
}

static void drop_comma_locale(void)
{
    if (!locale_dir[0])
        return;
    nftw(locale_dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
    unsetenv("LOCPATH");
    locale_dir[0] = '\0';
}

/*
 * Make LC_NUMERIC a locale whose decimal point is ',': an installed one,
 * or de_DE built with localedef into a temporary LOCPATH when the system
 * has the locale sources.  Its name, or NULL when neither works.
 */
static const char *comma_locale(void)
{
    static const char *const names[] = {"de_DE.UTF-8", "de_DE.utf8",
                                        "fr_FR.UTF-8", "fr_FR.utf8"};
    char out[128];
    int status = 0;
    for (size_t i = 0; i < IPD_ARRAY_LEN(names); i++)
        if (setlocale(LC_NUMERIC, names[i]))
            return names[i];
    if (access("/usr/bin/localedef", X_OK) != 0 ||
        access("/usr/share/i18n/locales/de_DE", R_OK) != 0)
        return NULL;
    snprintf(locale_dir, sizeof(locale_dir), "/tmp/ipd-metrics-loc-XXXXXX");
    if (!mkdtemp(locale_dir)) {
        locale_dir[0] = '\0';
        return NULL;
    }
    snprintf(out, sizeof(out), "%s/de_DE.UTF-8", locale_dir);
    pid_t pid = fork();
    if (pid == 0) {
        int fd = open("/dev/null", O_WRONLY);
        dup2(fd, 1);
        dup2(fd, 2);
        execl("/usr/bin/localedef", "localedef", "-i", "de_DE", "-f", "UTF-8",
              out, (char *)NULL);
        _exit(127);
    }
    if (pid > 0)
        waitpid(pid, &status, 0);
    setenv("LOCPATH", locale_dir, 1);
    if (setlocale(LC_NUMERIC, "de_DE.UTF-8") &&
        localeconv()->decimal_point[0] == ',')
        return "de_DE.UTF-8 (built with localedef)";
    setlocale(LC_NUMERIC, "C");
    drop_comma_locale();
    return NULL;
}

static void numbers_round_trip_in_any_locale(void)
{
    static const struct {
        double v;
        const char *text;
    } cases[] = {
        {0.1, "0.1"},
        {1e-9, "1e-09"},
        {1e21, "1e+21"},
        {123456789, "123456789"},
        {-2.5, "-2.5"},
        {1.0 / 3, "0.3333333333333333"},
        {0, "0"},
        {-0.0, "-0"},
        {0.005, "0.005"},
        {10, "10"},
        {300, "300"},
        {1e12, "1000000000000"},
        {0.0001, "0.0001"},
        {0.00001, "1e-05"},
        {1e20, "100000000000000000000"},
        {5e-324, "5e-324"},
        {1.7976931348623157e308, "1.7976931348623157e+308"},
        {0.1 + 0.2, "0.30000000000000004"},
    };
    struct ipd_metrics *m = NULL;
    struct ipd_metric_family *f = NULL;
    const char *lab[1] = {"k"};
    char series[64], got[64];
    /* Created under the comma locale: the le labels are formatted then. */
    const char *loc = comma_locale();
    if (loc)
        printf("note: rendering under LC_NUMERIC=%s\n", loc);
    else
        printf("note: no comma-decimal locale available; C locale only\n");

    REQUIRE(ipd_metrics_new("t", &m) == IPD_OK);
    REQUIRE(ipd_metrics_family_add(m, IPD_METRIC_GAUGE, "test_float", "F.", lab,
                                   1, NULL, 0, &f) == IPD_OK);
    for (size_t i = 0; i < IPD_ARRAY_LEN(cases); i++) {
        snprintf(series, sizeof(series), "c%zu", i);
        const char *v[1] = {series};
        ipd_metrics_series_set(ipd_metrics_series_get(f, v), cases[i].v);
    }
    const char *inf[1] = {"inf"}, *ninf[1] = {"ninf"}, *nan_[1] = {"nan"};
    ipd_metrics_series_set(ipd_metrics_series_get(f, inf), INFINITY);
    ipd_metrics_series_set(ipd_metrics_series_get(f, ninf), -INFINITY);
    ipd_metrics_series_set(ipd_metrics_series_get(f, nan_), NAN);
    ipd_metrics_exec_observe(m, IPD_METRICS_EXEC_SUCCESS, 0.3);
    char *t = render(m);
    setlocale(LC_NUMERIC, "C");
    drop_comma_locale();
    REQUIRE(t);
    CHECK(
        strstr(t, "interpd_execution_duration_seconds_bucket{le=\"0.5\"} 1\n"));
    CHECK(strstr(t, "interpd_execution_duration_seconds_sum 0.3\n"));
    for (size_t i = 0; i < IPD_ARRAY_LEN(cases); i++) {
        snprintf(series, sizeof(series), "test_float{k=\"c%zu\"}", i);
        CHECK(sample(t, series, got, sizeof(got)));
        CHECK_STR(got, cases[i].text);
        CHECK(strtod(got, NULL) == cases[i].v);
    }
    CHECK(sample(t, "test_float{k=\"inf\"}", got, sizeof(got)));
    CHECK_STR(got, "+Inf");
    CHECK(sample(t, "test_float{k=\"ninf\"}", got, sizeof(got)));
    CHECK_STR(got, "-Inf");
    CHECK(sample(t, "test_float{k=\"nan\"}", got, sizeof(got)));
    CHECK_STR(got, "NaN");
    check_valid(t);
    free(t);
    ipd_metrics_free(m);
}

static void family_arguments_are_checked(void)
{
    struct ipd_metrics *m = NULL;
    struct ipd_metric_family *f = NULL;
    const double good[] = {1, 2}, unsorted[] = {2, 1}, inf[] = {1, INFINITY};
    const char *le[1] = {"le"}, *res[1] = {"__x"}, *dup[2] = {"a", "a"};
    const char *bad[1] = {"a-b"}, *five[5] = {"a", "b", "c", "d", "e"};
    REQUIRE(ipd_metrics_new("t", &m) == IPD_OK);
    CHECK_INT(ipd_metrics_family_add(m, IPD_METRIC_COUNTER, "1x", "", NULL, 0,
                                     NULL, 0, &f),
              IPD_ERR_INVALID);
    CHECK(f == NULL);
    CHECK_INT(ipd_metrics_family_add(m, IPD_METRIC_COUNTER, "a-b", "", NULL, 0,
                                     NULL, 0, &f),
              IPD_ERR_INVALID);
    CHECK_INT(ipd_metrics_family_add(m, IPD_METRIC_COUNTER, "", "", NULL, 0,
                                     NULL, 0, &f),
              IPD_ERR_INVALID);
    CHECK_INT(ipd_metrics_family_add(m, IPD_METRIC_COUNTER, NULL, "", NULL, 0,
                                     NULL, 0, &f),
              IPD_ERR_INVALID);
    CHECK_INT(ipd_metrics_family_add(m, IPD_METRIC_HISTOGRAM, "h", "", le, 1,
                                     good, 2, &f),
              IPD_ERR_INVALID);
    CHECK_INT(ipd_metrics_family_add(m, IPD_METRIC_COUNTER, "c", "", res, 1,
                                     NULL, 0, &f),
              IPD_ERR_INVALID);
    CHECK_INT(ipd_metrics_family_add(m, IPD_METRIC_COUNTER, "c", "", dup, 2,
                                     NULL, 0, &f),
              IPD_ERR_INVALID);
    CHECK_INT(ipd_metrics_family_add(m, IPD_METRIC_COUNTER, "c", "", bad, 1,
                                     NULL, 0, &f),
              IPD_ERR_INVALID);
    CHECK_INT(ipd_metrics_family_add(m, IPD_METRIC_COUNTER, "c", "", five, 5,
                                     NULL, 0, &f),
              IPD_ERR_INVALID);
    CHECK_INT(ipd_metrics_family_add(m, IPD_METRIC_HISTOGRAM, "h", "", NULL, 0,
                                     unsorted, 2, &f),
              IPD_ERR_INVALID);
    CHECK_INT(ipd_metrics_family_add(m, IPD_METRIC_HISTOGRAM, "h", "", NULL, 0,
                                     inf, 2, &f),
              IPD_ERR_INVALID);
    CHECK_INT(ipd_metrics_family_add(m, IPD_METRIC_HISTOGRAM, "h", "", NULL, 0,
                                     NULL, 0, &f),
              IPD_ERR_INVALID);
    CHECK_INT(ipd_metrics_family_add(m, IPD_METRIC_GAUGE, "g", "", NULL, 0,
                                     good, 2, &f),
              IPD_ERR_INVALID);
    CHECK_INT(ipd_metrics_family_add(m, IPD_METRIC_GAUGE,
                                     "interpd_exec_running", "", NULL, 0, NULL,
                                     0, &f),
              IPD_ERR_CONFLICT);
    CHECK_INT(ipd_metrics_family_add(m, IPD_METRIC_GAUGE, "ns:g_x", "", NULL, 0,
                                     NULL, 0, &f),
              IPD_OK);
    CHECK(f != NULL);
    enum ipd_err rc = IPD_OK;
    char name[32];
    for (int i = 0; i < IPD_METRICS_MAX_FAMILIES + 1 && !rc; i++) {
        snprintf(name, sizeof(name), "test_fill_%d", i);
        rc = ipd_metrics_family_add(m, IPD_METRIC_GAUGE, name, "", NULL, 0,
                                    NULL, 0, NULL);
    }
    CHECK_INT(rc, IPD_ERR_TOO_LARGE);
    ipd_metrics_free(m);
}

static void render_respects_the_buffer_limit(void)
{
    struct ipd_metrics *m = NULL;
    struct ipd_buf b;
    REQUIRE(ipd_metrics_new("t", &m) == IPD_OK);
    ipd_buf_init(&b, 100);
    CHECK_INT(ipd_metrics_render(m, &b), IPD_ERR_TOO_LARGE);
    CHECK(b.len <= 100);
    ipd_buf_release(&b);
    ipd_metrics_free(m);
}

/* ---- The checker itself ------------------------------------------------ */

static void checker_rejects_malformed_text(void)
{
    static const struct {
        const char *text;
        int line; /* the line the checker must name */
    } bad[] = {
        {"# TYPE a gauge\na 1", 2},                           /* no \n */
        {"b 1\n", 1},                                         /* no TYPE */
        {"# TYPE a gauge\n# TYPE a gauge\na 1\n", 2},         /* 2 TYPEs */
        {"# HELP a x\n# HELP a y\n# TYPE a gauge\na 1\n", 2}, /* 2 HELPs */
        {"# TYPE a gauge\na 1\n# HELP a late\n", 3},          /* after */
        {"# TYPE a gauge\na 1\n# TYPE b gauge\nb 1\na{x=\"1\"} 2\n", 5},
        {"# TYPE 1a gauge\n", 1}, /* name */
        {"# TYPE a gauge\n1a 1\n", 2},
        {"# TYPE a gauge\na{1x=\"y\"} 1\n", 2},        /* label */
        {"# TYPE a gauge\na{x=\"\\q\"} 1\n", 2},       /* escape */
        {"# TYPE a gauge\na{x=\"y} 1\n", 2},           /* unclosed */
        {"# TYPE a gauge\na{x=\"y\"z=\"w\"} 1\n", 2},  /* no comma */
        {"# TYPE a gauge\na{x=\"1\",x=\"2\"} 1\n", 2}, /* dup label */
        {"# TYPE a gauge\na{__x=\"1\"} 1\n", 2},       /* reserved */
        {"# TYPE a gauge\na{x=\"\xff\"} 1\n", 2},      /* UTF-8 */
        {"# TYPE a gauge\na 1,5\n", 2},                /* float */
        {"# TYPE a gauge\na inf\n", 2},
        {"# TYPE a gauge\na 0x10\n", 2},
        {"# TYPE a gauge\na\n", 2},                            /* no value */
        {"# TYPE a gauge\na 1 \n", 2},                         /* trailing */
        {"# TYPE a gauge\na 1 1.5\n", 2},                      /* timestamp */
        {"# TYPE a gauge\r\na 1\n", 1},                        /* CR */
        {"# TYPE a gauge\n a 1\n", 2},                         /* leading */
        {"# TYPE a gauge\na 1\na 2\n", 3},                     /* duplicate */
        {"# TYPE a counterz\n", 1},                            /* type */
        {"# TYPE a counter\na -1\n", 2},                       /* negative */
        {"# HELP a bad \\t escape\n# TYPE a gauge\na 1\n", 1}, /* HELP */
        {"# TYPE a gauge\na{le=\"1\"} 1\n", 2},                /* le */
        {"# TYPE h histogram\nh 1\n", 2},                      /* suffix */
        {"# TYPE h histogram\nh_bucket 1\n", 2},               /* no le */
        {"# TYPE h histogram\nh_bucket{le=\"x\"} 1\n", 2},     /* bad le */
        {"# TYPE h histogram\nh_bucket{le=\"1\"} 2\n"
         "h_bucket{le=\"+Inf\"} 1\nh_sum 1\nh_count 1\n",
         3}, /* cumulative */
        {"# TYPE h histogram\nh_bucket{le=\"2\"} 1\n"
         "h_bucket{le=\"1\"} 1\nh_bucket{le=\"+Inf\"} 1\n"
         "h_sum 1\nh_count 1\n",
         3}, /* order */
        {"# TYPE h histogram\nh_bucket{le=\"1\"} 1\n"
         "h_sum 1\nh_count 1\n",
         2}, /* no +Inf */
        {"# TYPE h histogram\nh_bucket{le=\"+Inf\"} 3\n"
         "h_sum 1\nh_count 4\n",
         4}, /* _count */
        {"# TYPE h histogram\nh_bucket{le=\"+Inf\"} 3\n"
         "h_count 3\n",
         2},                                               /* no _sum */
        {"# TYPE h histogram\n# TYPE h_count gauge\n", 2}, /* collision */
    };
    struct ipd_buf err;
    char want[16];
    REQUIRE(checker_path());
    ipd_buf_init(&err, IPD_BUF_UNLIMITED);

    /* Valid text passes, so a rejection below is a rejection. */
    const char *good =
        "# HELP a_total A \\\\ help\\n.\n# TYPE a_total counter\n"
        "a_total{x=\"q\\\"\\\\\\n\",y=\"\",} 3 1700000000000\n"
        "# ordinary comment\n\n"
        "# TYPE h histogram\nh_bucket{le=\"0.5\"} 1\nh_bucket{le=\"1e3\"} 2\n"
        "h_bucket{le=\"+Inf\"} 2\nh_sum 1.5e-3\nh_count 2\n"
        "# TYPE s summary\ns{quantile=\"0.5\"} NaN\ns_sum -Inf\ns_count 0\n"
        "# TYPE u untyped\nu -.5\n";
    int rc = run_checker(good, strlen(good), false, &err);
    CHECK_INT(rc, 0);
    if (rc)
        fprintf(stderr, "%s", err.buf);

    for (size_t i = 0; i < IPD_ARRAY_LEN(bad); i++) {
        ipd_buf_reset(&err);
        rc = run_checker(bad[i].text, strlen(bad[i].text), false, &err);
        snprintf(want, sizeof(want), ":%d: ", bad[i].line);
        if (rc != 1 || !strstr(err.buf, want)) {
            fprintf(stderr, "case %zu: exit %d, want 1 naming line %d:\n%s\n",
                    i, rc, bad[i].line, err.buf);
            CHECK(false);
        }
    }
    ipd_buf_release(&err);
}

/* ---- Micro-benchmark (prints only) ------------------------------------- */

static double now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

#define BENCH_N 1000000

struct bench {
    struct ipd_metrics *m;
    const char *route;
};

static void *bench_http(void *arg)
{
    const struct bench *b = arg;
    for (int i = 0; i < BENCH_N; i++)
        ipd_metrics_http_observe(b->m, b->route, "GET", 200, 0.012);
    return NULL;
}

static void threaded(struct ipd_metrics *m, bool same, const char *what)
{
    static const char *const r[THREADS] = {"/r0", "/r1", "/r2", "/r3",
                                           "/r4", "/r5", "/r6", "/r7"};
    pthread_t th[THREADS];
    struct bench b[THREADS];
    double t0 = now_ns();
    for (int t = 0; t < THREADS; t++) {
        b[t] = (struct bench){m, same ? "/v1/files/{id}" : r[t]};
        pthread_create(&th[t], NULL, bench_http, &b[t]);
    }
    for (int t = 0; t < THREADS; t++)
        pthread_join(th[t], NULL);
    double wall = now_ns() - t0;
    printf("bench: %-44s %7.1f ns/observe aggregate (wall / %d calls; "
           "%ld CPUs)\n",
           what, wall / ((double)BENCH_N * THREADS), BENCH_N * THREADS,
           sysconf(_SC_NPROCESSORS_ONLN));
}

static void micro_benchmark(void)
{
    struct ipd_metrics *m = NULL;
    struct ipd_metric_family *c = NULL;
    const char *lab[1] = {"k"}, *v[1] = {"x"};
    REQUIRE(ipd_metrics_new("t", &m) == IPD_OK);
    REQUIRE(ipd_metrics_family_add(m, IPD_METRIC_COUNTER, "bench_total", "B.",
                                   lab, 1, NULL, 0, &c) == IPD_OK);
    struct ipd_metric_series *s = ipd_metrics_series_get(c, v);
    double t0 = now_ns();
    for (int i = 0; i < BENCH_N; i++)
        ipd_metrics_series_inc(s, 1);
    printf("bench: %-44s %7.1f ns/op\n", "series_inc (cached series)",
           (now_ns() - t0) / BENCH_N);
    t0 = now_ns();
    for (int i = 0; i < BENCH_N; i++)
        ipd_metrics_series_inc(ipd_metrics_series_get(c, v), 1);
    printf("bench: %-44s %7.1f ns/op\n", "series_get + inc (1 label)",
           (now_ns() - t0) / BENCH_N);
    t0 = now_ns();
    for (int i = 0; i < BENCH_N; i++)
        ipd_metrics_http_observe(m, "/v1/files/{id}", "GET", 200, 0.012);
    printf("bench: %-44s %7.1f ns/op\n", "http_observe (counter + histogram)",
           (now_ns() - t0) / BENCH_N);
    t0 = now_ns();
    for (int i = 0; i < BENCH_N; i++)
        ipd_metrics_exec_observe(m, IPD_METRICS_EXEC_SUCCESS, 1.5);
    printf("bench: %-44s %7.1f ns/op\n", "exec_observe (counter + histogram)",
           (now_ns() - t0) / BENCH_N);
    t0 = now_ns();
    for (int i = 0; i < BENCH_N; i++)
        ipd_metrics_gauge_add(m, IPD_METRICS_EXEC_RUNNING, 1);
    printf("bench: %-44s %7.1f ns/op\n", "gauge_add",
           (now_ns() - t0) / BENCH_N);
    threaded(m, true, "http_observe, 8 threads, same series");
    threaded(m, false, "http_observe, 8 threads, own route each");

    struct ipd_buf b;
    ipd_buf_init(&b, IPD_BUF_UNLIMITED);
    t0 = now_ns();
    for (int i = 0; i < 100; i++) {
        ipd_buf_reset(&b);
        ipd_metrics_render(m, &b);
    }
    printf("bench: %-44s %7.1f us/render (%zu bytes)\n", "render",
           (now_ns() - t0) / 100 / 1000, b.len);
    ipd_buf_release(&b);
    const char *tool = getenv("PROMTOOL");
    printf("note: promtool %s\n",
           tool && *tool ? tool
           : access("/usr/bin/promtool", X_OK) == 0
               ? "/usr/bin/promtool"
               : "not found (check-prom.py checks alone)");
    ipd_metrics_free(m);
}

TEST_MAIN(T(null_registry_is_noop), T(fresh_registry_renders_valid_text),
          T(concurrent_observes_are_exact), T(histogram_bucket_math),
          T(label_values_and_help_are_escaped),
          T(cardinality_bound_counts_into_other), T(gauge_functions),
          T(numbers_round_trip_in_any_locale), T(family_arguments_are_checked),
          T(render_respects_the_buffer_limit),
          T(checker_rejects_malformed_text), T(micro_benchmark))
