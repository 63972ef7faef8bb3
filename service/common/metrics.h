/*
 * metrics.h - counters, gauges and histograms for GET /metrics, rendered in
 * the Prometheus text exposition format 0.0.4.
 *
 * Two layers.  The generic core: a registry of families (one metric name,
 * its HELP and TYPE, up to IPD_METRICS_MAX_LABELS label names), each with at
 * most IPD_METRICS_MAX_SERIES series (one per combination of label values).
 * The interpd layer on top: one function per event the service records, so
 * a call site is one line.
 *
 * Cardinality is bounded.  Once a family holds IPD_METRICS_MAX_SERIES
 * series, a new combination of label values is counted in the overflow
 * series whose every label value is "other" (IPD_METRICS_OTHER).  So are
 * label values that are not short (IPD_METRICS_VALUE_MAX) valid UTF-8.
 *
 * Thread-safety: everything here may be called from any thread, except
 * ipd_metrics_free.  Updates are lock-free C11 atomics; looking up an
 * existing series is lock-free; creating one takes the family's mutex once.
 * Rendering, registering families and value functions take the registry's
 * mutex.
 *
 * NULL-safety: a NULL struct ipd_metrics (metrics off, or a test without
 * them), family or series makes every call a no-op, so call sites never
 * test for it.
 */
#ifndef IPD_METRICS_H
#define IPD_METRICS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "buf.h"
#include "ipd.h"

#define IPD_METRICS_MAX_FAMILIES 64
#define IPD_METRICS_MAX_LABELS 4   /* label names per family */
#define IPD_METRICS_MAX_SERIES 256 /* series per family, besides "other" */
#define IPD_METRICS_MAX_BUCKETS 32 /* finite bucket bounds per histogram */
#define IPD_METRICS_VALUE_MAX 128  /* bytes in a label value */
#define IPD_METRICS_OTHER "other"  /* every label value of the overflow */

/* Content-Type of what ipd_metrics_render writes. */
#define IPD_METRICS_CONTENT_TYPE "text/plain; version=0.0.4; charset=utf-8"

struct ipd_metrics;       /* the registry, with the interpd families */
struct ipd_metric_family; /* one metric name and its series */
struct ipd_metric_series; /* one combination of label values */

enum ipd_metric_type {
    IPD_METRIC_COUNTER,   /* monotonic event count (integer) */
    IPD_METRIC_GAUGE,     /* a double that goes up and down */
    IPD_METRIC_HISTOGRAM, /* bucketed observations, _sum and _count */
};

/*
 * A value function: called while rendering, under the registry's mutex, to
 * produce an unlabelled counter or gauge sample (a stored value, memory
 * use).  Write the value to *value and return IPD_OK; any other return
 * omits the sample from that scrape and adds one to
 * interpd_scrape_errors_total{metric="<family name>"}.  It must not call
 * ipd_metrics_render, _family_add, _family_set_fn or _set_gauge_fn (the
 * mutex is held); observing and setting values is fine.
 */
typedef enum ipd_err ipd_metrics_value_fn(void *ctx, double *value);

/*
 * Lifecycle.  Creates a registry with every interpd family below and the
 * process metrics.  version is copied (NULL: "unknown").  *out is a new
 * registry; free it with ipd_metrics_free once no other thread uses it.
 */
enum ipd_err ipd_metrics_new(const char *version, struct ipd_metrics **out);
void ipd_metrics_free(struct ipd_metrics *m); /* NULL is fine */

/*
 * Append the exposition of every family with at least one sample to out:
 * "# HELP" and "# TYPE" once per family, then its samples.  Value functions
 * run first, so a failure shows in interpd_scrape_errors_total of the same
 * scrape.  Numbers never depend on the locale.  IPD_ERR_TOO_LARGE when out
 * reaches its max; out then holds a partial text the caller must discard.
 * A NULL registry appends nothing.  Serialised with other renders.
 */
enum ipd_err ipd_metrics_render(struct ipd_metrics *m, struct ipd_buf *out);

/* ---- The interpd layer ------------------------------------------------ */

/*
 * interpd_http_requests_total{route,method,status} and
 * interpd_http_request_duration_seconds{route}.  route is a route template
 * from the router's fixed table ("/v1/files/{id}"), never a raw path (NULL:
 * "other"); the string is only borrowed.  method outside
 * GET/HEAD/POST/PUT/PATCH/DELETE/OPTIONS and status outside 100..599 are
 * counted as "other".  A negative or NaN seconds counts the request
 * without observing a duration.
 */
void ipd_metrics_http_observe(struct ipd_metrics *m, const char *route,
                              const char *method, int status, double seconds);

enum ipd_metrics_exec_outcome {
    IPD_METRICS_EXEC_SUCCESS,         /* "success": ran, exit status 0 */
    IPD_METRICS_EXEC_ERROR,           /* "error": ran, failed */
    IPD_METRICS_EXEC_TIMEOUT,         /* "timeout": killed at the limit */
    IPD_METRICS_EXEC_OOM,             /* "oom": killed for memory */
    IPD_METRICS_EXEC_FAILED_TO_START, /* "failed_to_start": sandbox setup */
};

/* interpd_executions_total{outcome} and
 * interpd_execution_duration_seconds; seconds as for http_observe.  An
 * outcome outside the enum counts as "other". */
void ipd_metrics_exec_observe(struct ipd_metrics *m,
                              enum ipd_metrics_exec_outcome outcome,
                              double seconds);

/* One sweep: interpd_sweep_runs_total{result="ok"|"error"},
 * interpd_sweep_deleted_files_total and interpd_sweep_freed_bytes_total
 * (also for a failed sweep's partial work; negatives count as 0). */
void ipd_metrics_sweep_observe(struct ipd_metrics *m, bool ok,
                               int64_t deleted_files, int64_t freed_bytes);

enum ipd_metrics_install_outcome {
    IPD_METRICS_INSTALL_INSTALLED,         /* "installed" */
    IPD_METRICS_INSTALL_ALREADY_INSTALLED, /* "already_installed" */
    IPD_METRICS_INSTALL_NOT_ALLOWED,       /* "not_allowed" */
    IPD_METRICS_INSTALL_INVALID,           /* "invalid" */
    IPD_METRICS_INSTALL_FAILED,            /* "failed" */
};

/* One requested package: interpd_package_installs_total{outcome}.  An
 * outcome outside the enum counts as "other". */
void ipd_metrics_install_observe(struct ipd_metrics *m,
                                 enum ipd_metrics_install_outcome outcome);

enum ipd_metrics_gauge {
    IPD_METRICS_EXEC_QUEUE_DEPTH, /* interpd_exec_queue_depth */
    IPD_METRICS_EXEC_RUNNING,     /* interpd_exec_running */
    IPD_METRICS_FILES_STORED,     /* interpd_files_stored */
    IPD_METRICS_BYTES_STORED,     /* interpd_bytes_stored */
    IPD_METRICS_SESSIONS_LIVE,    /* interpd_sessions_live */
    IPD_METRICS_SESSIONS_MEMORY,  /* interpd_sessions_memory_bytes */
    IPD_METRICS_SESSIONS_CHARGED, /* interpd_sessions_memory_charged_bytes */
    IPD_METRICS_WARM_SET_MODULES, /* interpd_warm_set_modules */
    IPD_METRICS_WARM_SET_BYTES,   /* interpd_warm_set_bytes */
};

/* Set a gauge, or add delta (negative to subtract) to it.  The two exec
 * gauges start at 0; the stored ones have no sample until set or given a
 * value function. */
void ipd_metrics_gauge_set(struct ipd_metrics *m, enum ipd_metrics_gauge g,
                           double value);
void ipd_metrics_gauge_add(struct ipd_metrics *m, enum ipd_metrics_gauge g,
                           double delta);

/*
 * Compute a gauge at scrape time instead: fn(ctx) while rendering (see
 * ipd_metrics_value_fn); while set, it replaces the stored value.  fn NULL
 * removes it.  ctx is borrowed: once this returns, fn is not running and
 * will not run with the previous ctx, so the caller may free that.
 */
void ipd_metrics_set_gauge_fn(struct ipd_metrics *m, enum ipd_metrics_gauge g,
                              ipd_metrics_value_fn *fn, void *ctx);

/* ---- The generic core -------------------------------------------------- */

/*
 * Register a family.  name matches [a-zA-Z_:][a-zA-Z0-9_:]*; help is any
 * text; labels (nlabels <= IPD_METRICS_MAX_LABELS) match
 * [a-zA-Z_][a-zA-Z0-9_]*, are distinct, don't start with "__", and a
 * histogram's aren't "le".  A histogram has 1..IPD_METRICS_MAX_BUCKETS
 * finite, strictly increasing upper bounds (the +Inf bucket is implied);
 * others pass buckets NULL, nbuckets 0.  Every string and array is copied.
 * IPD_ERR_INVALID for a bad argument, IPD_ERR_CONFLICT for a name already
 * registered, IPD_ERR_TOO_LARGE past IPD_METRICS_MAX_FAMILIES.  *out
 * (may be NULL) is borrowed: it lives as long as the registry.  Families
 * render in the order they were added.
 */
enum ipd_err ipd_metrics_family_add(struct ipd_metrics *m,
                                    enum ipd_metric_type type, const char *name,
                                    const char *help, const char *const *labels,
                                    size_t nlabels, const double *buckets,
                                    size_t nbuckets,
                                    struct ipd_metric_family **out);

/*
 * The series for these label values (nlabels of them, in the family's
 * order; a NULL value reads as ""), created at 0 on first use; the
 * overflow series once the family is full.  The result is borrowed, lives
 * as long as the registry and may be kept; NULL only for a NULL family.
 * Lock-free when the series exists.
 */
struct ipd_metric_series *ipd_metrics_series_get(struct ipd_metric_family *f,
                                                 const char *const *values);

/* Add n to a counter. */
void ipd_metrics_series_inc(struct ipd_metric_series *s, uint64_t n);
/* Set a gauge, or add delta to it. */
void ipd_metrics_series_set(struct ipd_metric_series *s, double value);
void ipd_metrics_series_add(struct ipd_metric_series *s, double delta);
/* Record one histogram observation: the first bucket whose bound is >=
 * value (NaN: only +Inf), _sum and _count. */
void ipd_metrics_series_observe(struct ipd_metric_series *s, double value);

/*
 * Give an unlabelled counter or gauge family a value function (see
 * ipd_metrics_value_fn and ipd_metrics_set_gauge_fn for ctx); fn NULL
 * removes it.  IPD_ERR_INVALID for a histogram or a labelled family.
 */
enum ipd_err ipd_metrics_family_set_fn(struct ipd_metric_family *f,
                                       ipd_metrics_value_fn *fn, void *ctx);

#endif
