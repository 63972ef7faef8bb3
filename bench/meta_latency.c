/*
 * meta_latency.c - per-operation latency of the metadata stores, SQLite and
 * MongoDB, in one run (issue 3's benchmark).  Not a test: run by hand via
 * bench/meta_latency.sh, which provides the MongoDB server.
 *
 *   bench_meta_latency SQLITE_DIR MONGO_URI [N]
 *
 * For each backend: 1,000 files for one user, then N timed operations of
 * each kind: insert (with the quota check, as uploads do), get, list 50 of
 * the 1,000 (first page), delete.  Prints p50/p90/mean in microseconds and
 * the MongoDB/SQLite ratio of the medians.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "storage/meta.h"
#include "storage/mongo.h"

enum { PREFILL = 1000, OPS = 4 };
static const char *const op_names[OPS] = {"insert", "get", "list50", "delete"};

static double now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void file_rec(struct ipd_file_meta *f, const char *user, int64_t t)
{
    memset(f, 0, sizeof(*f));
    ipd_id_new("file", f->file_id);
    snprintf(f->tenant, sizeof(f->tenant), "bench");
    snprintf(f->user_id, sizeof(f->user_id), "%s", user);
    snprintf(f->filename, sizeof(f->filename), "data-%lld.csv", (long long)t);
    f->size = 1234;
    snprintf(f->mime_type, sizeof(f->mime_type), "text/csv");
    snprintf(f->file_type, sizeof(f->file_type), "csv");
    memset(f->sha256, 'a', 64);
    snprintf(f->source, sizeof(f->source), "upload");
    snprintf(f->blob, sizeof(f->blob), "local");
    f->created_at_ms = t;
    f->expires_at_ms = t + 48LL * 3600 * 1000;
}

/* Times of n operations of each kind into t[op][i]. */
static int run(struct ipd_meta *m, int n, double *t[OPS])
{
    struct ipd_quota q = {-1, -1, NULL};
    struct ipd_file_meta f, out;
    struct ipd_file_list list = {0};
    int64_t now = ipd_now_ms();
    char(*ids)[IPD_ID_MAX] = calloc((size_t)n, IPD_ID_MAX);
    char(*pre)[IPD_ID_MAX] = calloc(PREFILL, IPD_ID_MAX);

    for (int i = 0; i < PREFILL; i++) {
        file_rec(&f, "big", now - PREFILL + i);
        memcpy(pre[i], f.file_id, IPD_ID_MAX);
        if (ipd_meta_file_insert(m, &f, NULL, now))
            return 1;
    }
    /* Quota as the upload path uses it (100 files, 1 GiB). */
    q.max_files = n + 1;
    q.max_bytes = 1LL << 30;
    for (int i = 0; i < n; i++) {
        file_rec(&f, "small", now + i);
        memcpy(ids[i], f.file_id, IPD_ID_MAX);
        double t0 = now_us();
        enum ipd_err rc = ipd_meta_file_insert(m, &f, &q, now);
        t[0][i] = now_us() - t0;
        if (rc)
            return 1;
    }
    for (int i = 0; i < n; i++) {
        double t0 = now_us();
        enum ipd_err rc = ipd_meta_file_get(
            m, "bench", "big", pre[(i * 7919) % PREFILL], now, &out);
        t[1][i] = now_us() - t0;
        if (rc)
            return 1;
    }
    for (int i = 0; i < n; i++) {
        double t0 = now_us();
        enum ipd_err rc =
            ipd_meta_file_list(m, "bench", "big", now, NULL, 50, &list);
        t[2][i] = now_us() - t0;
        if (rc || list.n != 50)
            return 1;
        ipd_file_list_release(&list);
    }
    for (int i = 0; i < n; i++) {
        double t0 = now_us();
        enum ipd_err rc =
            ipd_meta_file_delete(m, "bench", "small", ids[i], now, &out);
        t[3][i] = now_us() - t0;
        if (rc)
            return 1;
    }
    free(ids);
    free(pre);
    return 0;
}

static void report(const char *backend, int n, double *t[OPS], double med[OPS])
{
    for (int op = 0; op < OPS; op++) {
        double sum = 0;
        qsort(t[op], (size_t)n, sizeof(double), cmp_double);
        for (int i = 0; i < n; i++)
            sum += t[op][i];
        med[op] = t[op][n / 2];
        printf("%-8s %-7s p50 %8.1f us  p90 %8.1f us  mean %8.1f us\n", backend,
               op_names[op], t[op][n / 2], t[op][n * 9 / 10], sum / n);
    }
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: %s SQLITE_DIR MONGO_URI [N]\n", argv[0]);
        return 2;
    }
    int n = argc > 3 ? (int)strtol(argv[3], NULL, 10) : 300;
    double *t[OPS], med_sq[OPS], med_mg[OPS];
    char path[4096];
    struct ipd_meta *sq = NULL, *mg = NULL;
    struct ipd_mongo *conn = NULL;

    for (int op = 0; op < OPS; op++)
        t[op] = calloc((size_t)n, sizeof(double));
    snprintf(path, sizeof(path), "%s/bench-meta.db", argv[1]);
    if (ipd_meta_sqlite_open(path, 5000, &sq) || run(sq, n, t)) {
        fprintf(stderr, "sqlite run failed\n");
        return 1;
    }
    report("sqlite", n, t, med_sq);
    if (ipd_mongo_new(argv[2], 30000, &conn) ||
        ipd_meta_mongo_open(conn, &mg) || run(mg, n, t)) {
        fprintf(stderr, "mongodb run failed\n");
        return 1;
    }
    report("mongodb", n, t, med_mg);
    for (int op = 0; op < OPS; op++)
        printf("ratio    %-7s mongodb/sqlite p50 %.1fx\n", op_names[op],
               med_mg[op] / med_sq[op]);
    ipd_meta_free(sq);
    ipd_meta_free(mg);
    ipd_mongo_drop_database(conn);
    ipd_mongo_free(conn);
    for (int op = 0; op < OPS; op++)
        free(t[op]);
    return 0;
}
