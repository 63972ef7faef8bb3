/*
 * reconcile_cases.h - the orphan reconcile (scheduler/reconcile.h) and the
 * sweep that runs it, against any pair of stores.  A backend's test
 * program fills a struct rc_backend and calls reconcile_cases_run().
 *
 * Times are the wall clock (blob commit times are), moved with min_age
 * and with backend->backdate, which sets a blob's commit time.
 */
#ifndef IPD_RECONCILE_CASES_H
#define IPD_RECONCILE_CASES_H

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test.h"

#include "scheduler/reconcile.h"
#include "scheduler/sweep.h"
#include "service/common/util.h"

#define RC_HOUR INT64_C(3600000)

struct rc_backend {
    /* Fresh, empty stores for one case. */
    void (*open)(struct ipd_meta **m, struct ipd_blobs **b);
    void (*close)(struct ipd_meta *m, struct ipd_blobs *b);
    /* Set the commit time of blob id to ms (wall clock). */
    void (*backdate)(struct ipd_blobs *b, const char *id, int64_t ms);
};

static const struct rc_backend *rc_be;

/* Commit len bytes under a new id (into id). */
static void rc_blob(struct ipd_blobs *b, char id[IPD_ID_MAX], size_t len)
{
    struct ipd_blob_writer *w = NULL;
    char buf[64] = {0};
    ipd_id_new("file", id);
    IPD_ASSERT(len <= sizeof(buf));
    IPD_ASSERT(ipd_blob_writer_new(b, id, 1 << 20, &w) == IPD_OK);
    IPD_ASSERT(ipd_blob_writer_write(w, buf, len) == IPD_OK);
    IPD_ASSERT(ipd_blob_writer_commit(w) == IPD_OK);
}

/* A record for id in the blob store named blob. */
static void rc_record(struct ipd_meta *m, const char *id, const char *blob,
                      int64_t created, int64_t expires, int64_t size)
{
    struct ipd_file_meta f;
    memset(&f, 0, sizeof(f));
    snprintf(f.file_id, sizeof(f.file_id), "%s", id);
    snprintf(f.tenant, sizeof(f.tenant), "t");
    snprintf(f.user_id, sizeof(f.user_id), "u");
    snprintf(f.filename, sizeof(f.filename), "f.bin");
    snprintf(f.mime_type, sizeof(f.mime_type), "application/octet-stream");
    snprintf(f.file_type, sizeof(f.file_type), "binary");
    snprintf(f.source, sizeof(f.source), "upload");
    snprintf(f.blob, sizeof(f.blob), "%s", blob);
    f.size = size;
    f.created_at_ms = created;
    f.expires_at_ms = expires;
    IPD_ASSERT(ipd_meta_file_insert(m, &f, NULL, created) == IPD_OK);
}

/* A whole file (bytes and record) created at `created`. */
static void rc_file(struct ipd_meta *m, struct ipd_blobs *b,
                    char id[IPD_ID_MAX], int64_t created, int64_t expires)
{
    rc_blob(b, id, 7);
    rc_be->backdate(b, id, created);
    rc_record(m, id, ipd_blobs_backend(b), created, expires, 7);
}

static bool rc_has_blob(struct ipd_blobs *b, const char *id)
{
    struct ipd_blob_info i;
    enum ipd_err rc = ipd_blob_stat(b, id, &i);
    CHECK(rc == IPD_OK || rc == IPD_ERR_NOT_FOUND);
    return rc == IPD_OK;
}

static bool rc_has_record(struct ipd_meta *m, const char *id)
{
    struct ipd_file_meta f;
    enum ipd_err rc = ipd_meta_file_get_by_id(m, id, &f);
    CHECK(rc == IPD_OK || rc == IPD_ERR_NOT_FOUND);
    return rc == IPD_OK;
}

static int64_t rc_count_blobs(struct ipd_blobs *b)
{
    struct ipd_blob_iter *it = NULL;
    struct ipd_blob_info batch[16];
    size_t n = 0;
    int64_t total = 0;
    CHECK_INT(ipd_blob_iter_new(b, &it), IPD_OK);
    while (it && !ipd_blob_iter_next(it, batch, 16, &n) && n)
        total += (int64_t)n;
    ipd_blob_iter_free(it);
    return total;
}

/* Orphan bytes older than min age go, younger stay; a record without
 * bytes goes, a young one stays, another store's stays; normal and
 * expired files are untouched (expiry is the sweep's job). */
static void rc_orphans(void)
{
    struct ipd_meta *m = NULL;
    struct ipd_blobs *b = NULL;
    struct ipd_reconcile_result res;
    struct ipd_reconcile_opts o = {.min_age_ms = RC_HOUR, .batch = 3};
    char f1[IPD_ID_MAX], o1[IPD_ID_MAX], y1[IPD_ID_MAX], r1[IPD_ID_MAX];
    char r2[IPD_ID_MAX], r3[IPD_ID_MAX], e1[IPD_ID_MAX], o2[IPD_ID_MAX];
    int64_t now = ipd_now_ms(), old = now - 2 * RC_HOUR;

    rc_be->open(&m, &b);
    REQUIRE(m && b);
    rc_file(m, b, f1, old, IPD_TIME_NEVER);
    rc_blob(b, o1, 5);
    rc_be->backdate(b, o1, old);
    rc_blob(b, y1, 6); /* an upload whose record is being written */
    ipd_id_new("file", r1);
    rc_record(m, r1, ipd_blobs_backend(b), old, IPD_TIME_NEVER, 3);
    ipd_id_new("file", r2);
    rc_record(m, r2, ipd_blobs_backend(b), now, IPD_TIME_NEVER, 3);
    ipd_id_new("file", r3);
    rc_record(m, r3, "elsewhere", old, IPD_TIME_NEVER, 3);
    rc_file(m, b, e1, old, now - 1);

    CHECK_INT(ipd_reconcile(m, b, now, &o, &res), IPD_OK);
    CHECK_INT(res.orphan_blobs, 1);
    CHECK_INT(res.orphan_records, 1);
    CHECK_INT(res.incomplete, 0);
    CHECK_INT(res.blobs_checked, 4);
    CHECK_INT(res.records_checked, 5);
    CHECK_INT(ipd_reconcile_removed(&res), 2);
    CHECK(!rc_has_blob(b, o1));
    CHECK(rc_has_blob(b, y1));
    CHECK(rc_has_blob(b, f1) && rc_has_record(m, f1));
    CHECK(rc_has_blob(b, e1) && rc_has_record(m, e1));
    CHECK(!rc_has_record(m, r1));
    CHECK(rc_has_record(m, r2));
    CHECK(rc_has_record(m, r3));

    /* Run again: nothing more to do. */
    CHECK_INT(ipd_reconcile(m, b, now, &o, &res), IPD_OK);
    CHECK_INT(ipd_reconcile_removed(&res), 0);

    /* The sweep with the reconcile: the expired file goes, and the
     * orphan count is the reconcile's. */
    rc_blob(b, o2, 5);
    rc_be->backdate(b, o2, old);
    struct ipd_sweep_opts so = {.reconcile = true,
                                .orphan_min_age_ms = RC_HOUR};
    struct ipd_sweep_result sr;
    CHECK_INT(ipd_sweep_run(m, b, now, &so, &sr), IPD_OK);
    CHECK_INT(sr.deleted_files, 1);
    CHECK_INT(sr.freed_bytes, 7);
    CHECK_INT(sr.orphans_removed, 1);
    CHECK(!rc_has_blob(b, o2));
    CHECK(!rc_has_blob(b, e1) && !rc_has_record(m, e1));
    json_t *j = ipd_sweep_json(&sr);
    CHECK_INT(json_object_size(j), 4);
    CHECK_INT(json_integer_value(json_object_get(j, "orphans_removed")), 1);
    CHECK_INT(json_integer_value(json_object_get(j, "deleted_files")), 1);
    CHECK(json_is_integer(json_object_get(j, "duration_ms")));
    json_decref(j);
    /* Without the reconcile, orphans_removed stays 0. */
    CHECK_INT(ipd_sweep_expired(m, b, now, &sr), IPD_OK);
    CHECK_INT(sr.orphans_removed, 0);

    /* A min age of 0 takes the young ones too. */
    o.min_age_ms = 0;
    CHECK_INT(ipd_reconcile(m, b, ipd_now_ms() + 1000, &o, &res), IPD_OK);
    CHECK_INT(res.orphan_blobs, 1);
    CHECK_INT(res.orphan_records, 1);
    CHECK(!rc_has_blob(b, y1));
    CHECK(!rc_has_record(m, r2));
    CHECK(rc_has_record(m, r3));
    CHECK(rc_has_blob(b, f1) && rc_has_record(m, f1));
    rc_be->close(m, b);
}

/* Many orphans over many small batches, deleting while walking. */
static void rc_batches(void)
{
    struct ipd_meta *m = NULL;
    struct ipd_blobs *b = NULL;
    struct ipd_reconcile_result res;
    struct ipd_reconcile_opts o = {.min_age_ms = RC_HOUR, .batch = 4};
    char keep[5][IPD_ID_MAX], id[IPD_ID_MAX];
    int64_t now = ipd_now_ms(), old = now - 2 * RC_HOUR;

    rc_be->open(&m, &b);
    REQUIRE(m && b);
    for (int i = 0; i < 37; i++) {
        rc_blob(b, id, 1);
        rc_be->backdate(b, id, old);
    }
    for (int i = 0; i < 7; i++) {
        ipd_id_new("file", id);
        rc_record(m, id, ipd_blobs_backend(b), old, IPD_TIME_NEVER, 1);
    }
    /* Enough good records that the safety valve stays shut, in whatever
     * order the ids fall (7 missing can never be more than half of 16). */
    for (int i = 0; i < 5; i++)
        rc_file(m, b, keep[i], old, IPD_TIME_NEVER);
    for (int i = 0; i < 30; i++)
        rc_file(m, b, id, old, IPD_TIME_NEVER);
    CHECK_INT(ipd_reconcile(m, b, now, &o, &res), IPD_OK);
    CHECK_INT(res.orphan_blobs, 37);
    CHECK_INT(res.orphan_records, 7);
    CHECK_INT(res.blobs_checked, 37 + 35);
    CHECK_INT(res.records_checked, 7 + 35);
    CHECK_INT(rc_count_blobs(b), 35);
    for (int i = 0; i < 5; i++)
        CHECK(rc_has_blob(b, keep[i]) && rc_has_record(m, keep[i]));
    rc_be->close(m, b);
}

/* Most records without bytes: the blob store looks wrong, and nothing is
 * deleted. */
static void rc_safety_valve(void)
{
    struct ipd_meta *m = NULL;
    struct ipd_blobs *b = NULL;
    struct ipd_reconcile_result res;
    char ids[20][IPD_ID_MAX], id[IPD_ID_MAX];
    int64_t now = ipd_now_ms(), old = now - 2 * RC_HOUR;

    rc_be->open(&m, &b);
    REQUIRE(m && b);
    for (int i = 0; i < 20; i++) {
        ipd_id_new("file", ids[i]);
        rc_record(m, ids[i], ipd_blobs_backend(b), old, IPD_TIME_NEVER, 1);
    }
    rc_file(m, b, id, old, IPD_TIME_NEVER);
    rc_file(m, b, id, old, IPD_TIME_NEVER);
    CHECK_INT(ipd_reconcile(m, b, now, NULL, &res), IPD_ERR_INTERNAL);
    CHECK_INT(res.orphan_records, 0);
    for (int i = 0; i < 20; i++)
        CHECK(rc_has_record(m, ids[i]));
    rc_be->close(m, b);
}

/* An upload abandoned long ago goes; one in progress stays. */
static void rc_abandoned_upload(void)
{
    struct ipd_meta *m = NULL;
    struct ipd_blobs *b = NULL;
    struct ipd_blob_writer *w = NULL;
    struct ipd_reconcile_result res;
    static char big[300 * 1024]; /* past a GridFS chunk */
    char id[IPD_ID_MAX];
    int64_t n = -1;

    rc_be->open(&m, &b);
    REQUIRE(m && b);
    ipd_id_new("file", id);
    REQUIRE(ipd_blob_writer_new(b, id, sizeof(big), &w) == IPD_OK);
    CHECK_INT(ipd_blob_writer_write(w, big, sizeof(big)), IPD_OK);
    CHECK_INT(ipd_reconcile(m, b, ipd_now_ms(), NULL, &res), IPD_OK);
    CHECK_INT(res.incomplete, 0);
    CHECK_INT(ipd_blobs_count_incomplete(b, &n), IPD_OK);
    CHECK_INT(n, 1);
    /* Two hours on.  GridFS takes the uploader for dead; the local store
     * sees its writer alive (the temporary file's flock) and keeps the
     * file until the writer is gone. */
    bool local = !strcmp(ipd_blobs_backend(b), "local");
    CHECK_INT(ipd_reconcile(m, b, ipd_now_ms() + 2 * RC_HOUR, NULL, &res),
              IPD_OK);
    CHECK_INT(res.incomplete, local ? 0 : 1);
    CHECK_INT(ipd_reconcile_removed(&res), local ? 0 : 1);
    CHECK_INT(ipd_blobs_count_incomplete(b, &n), IPD_OK);
    CHECK_INT(n, local ? 1 : 0);
    ipd_blob_writer_abort(w);
    CHECK_INT(ipd_blobs_count_incomplete(b, &n), IPD_OK);
    CHECK_INT(n, 0);
    rc_be->close(m, b);
}

struct rc_deleter {
    pthread_t tid;
    struct ipd_meta *m;
    struct ipd_blobs *b;
    char (*ids)[IPD_ID_MAX];
    int n;
    int done;     /* atomic */
    int failures; /* OUT */
};

/* Deletes files the way DELETE /v1/files/{id} does: record, then bytes. */
static void *rc_delete_all(void *arg)
{
    struct rc_deleter *d = arg;
    for (int i = 0; i < d->n; i++) {
        struct ipd_file_meta f;
        if (ipd_meta_file_delete(d->m, "t", "u", d->ids[i], ipd_now_ms(), &f))
            d->failures++;
        enum ipd_err rc = ipd_blob_delete(d->b, d->ids[i]);
        /* The reconcile may have taken the bytes in between: fine. */
        if (rc && rc != IPD_ERR_NOT_FOUND)
            d->failures++;
    }
    __atomic_store_n(&d->done, 1, __ATOMIC_RELEASE);
    return NULL;
}

/* Deletes running alongside the reconcile: a record is never removed as
 * "without bytes" (the re-read finds it gone), whatever the timing. */
static void rc_races_deletes(void)
{
    enum { N = 300 };
    struct ipd_meta *m = NULL;
    struct ipd_blobs *b = NULL;
    struct ipd_reconcile_opts o = {.min_age_ms = 0, .batch = 16};
    struct ipd_reconcile_result res;
    static char ids[N][IPD_ID_MAX];
    int64_t old = ipd_now_ms() - 2 * RC_HOUR, orphan_records = 0;

    rc_be->open(&m, &b);
    REQUIRE(m && b);
    for (int i = 0; i < N; i++)
        rc_file(m, b, ids[i], old, IPD_TIME_NEVER);
    struct rc_deleter d = {.m = m, .b = b, .ids = ids, .n = N};
    REQUIRE(pthread_create(&d.tid, NULL, rc_delete_all, &d) == 0);
    int runs = 0;
    do {
        enum ipd_err rc = ipd_reconcile(m, b, ipd_now_ms(), &o, &res);
        /* The safety valve may see many missing at once: a refusal, never
         * a wrong delete. */
        CHECK(rc == IPD_OK || rc == IPD_ERR_INTERNAL);
        orphan_records += res.orphan_records;
        runs++;
    } while (!__atomic_load_n(&d.done, __ATOMIC_ACQUIRE) && runs < 100000);
    pthread_join(d.tid, NULL);
    CHECK_INT(d.failures, 0);
    CHECK_INT(orphan_records, 0);
    CHECK_INT(rc_count_blobs(b), 0);
    for (int i = 0; i < N; i++)
        CHECK(!rc_has_record(m, ids[i]));
    rc_be->close(m, b);
}

struct rc_case {
    const char *name;
    void (*fn)(void);
};

static void reconcile_cases_run(const struct rc_backend *be)
{
    static const struct rc_case cases[] = {
        {"orphans", rc_orphans},
        {"batches", rc_batches},
        {"safety_valve", rc_safety_valve},
        {"abandoned_upload", rc_abandoned_upload},
        {"races_deletes", rc_races_deletes},
    };
    rc_be = be;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        int before = test__failed_checks;
        cases[i].fn();
        printf("%s reconcile/%s\n",
               test__failed_checks == before ? "ok  " : "FAIL", cases[i].name);
    }
}

#endif
