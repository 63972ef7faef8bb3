/*
 * test_sweep_kill.c - a sweep killed with SIGKILL halfway through (a
 * process crash, the OOM killer) and run again finishes cleanly: every
 * expired file is gone exactly once, live files are untouched, the bytes
 * whose record the killed sweep had deleted are removed by the reconcile,
 * and the database is intact.  SQLite and the local disk.
 *
 * The child sweeps; the parent polls the number of expired records left
 * (a bounded loop, no sleeps) and kills the child once it has passed the
 * middle.
 */
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <sqlite3.h>

#include "test.h"

#include "scheduler/sweep.h"
#include "service/common/util.h"

#define WAIT_MS 120000

static char dir[64];

static void open_stores(struct ipd_meta **m, struct ipd_blobs **b)
{
    char path[128];
    snprintf(path, sizeof(path), "%s/meta.db", dir);
    IPD_ASSERT(ipd_meta_sqlite_open(path, 5000, m) == IPD_OK);
    IPD_ASSERT(ipd_blobs_open_local(dir, b) == IPD_OK);
}

static void put(struct ipd_meta *m, struct ipd_blobs *b, int64_t created,
                int64_t expires, char id[IPD_ID_MAX])
{
    struct ipd_file_meta f;
    struct ipd_blob_writer *w = NULL;
    memset(&f, 0, sizeof(f));
    ipd_id_new("file", f.file_id);
    IPD_ASSERT(ipd_blob_writer_new(b, f.file_id, 100, &w) == IPD_OK);
    IPD_ASSERT(ipd_blob_writer_write(w, "0123456789", 10) == IPD_OK);
    IPD_ASSERT(ipd_blob_writer_sha256(w, f.sha256) == IPD_OK);
    IPD_ASSERT(ipd_blob_writer_commit(w) == IPD_OK);
    snprintf(f.tenant, sizeof(f.tenant), "t");
    snprintf(f.user_id, sizeof(f.user_id), "u");
    snprintf(f.filename, sizeof(f.filename), "f.bin");
    snprintf(f.mime_type, sizeof(f.mime_type), "application/octet-stream");
    snprintf(f.file_type, sizeof(f.file_type), "binary");
    snprintf(f.source, sizeof(f.source), "upload");
    snprintf(f.blob, sizeof(f.blob), "local");
    f.size = 10;
    f.created_at_ms = created;
    f.expires_at_ms = expires;
    IPD_ASSERT(ipd_meta_file_insert(m, &f, NULL, created) == IPD_OK);
    memcpy(id, f.file_id, IPD_ID_MAX);
}

static int64_t raw_int(sqlite3 *db, const char *sql)
{
    sqlite3_stmt *st = NULL;
    int64_t v = -1;
    if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) == SQLITE_OK &&
        sqlite3_step(st) == SQLITE_ROW)
        v = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    return v;
}

static int64_t count_blobs(struct ipd_blobs *b)
{
    struct ipd_blob_iter *it = NULL;
    struct ipd_blob_info batch[64];
    size_t n = 0;
    int64_t total = 0;
    CHECK_INT(ipd_blob_iter_new(b, &it), IPD_OK);
    while (it && !ipd_blob_iter_next(it, batch, 64, &n) && n)
        total += (int64_t)n;
    ipd_blob_iter_free(it);
    return total;
}

static void killed_sweep_finishes(void)
{
    enum { N = 3000, LIVE = 10 };
    struct ipd_meta *m = NULL;
    struct ipd_blobs *b = NULL;
    static char live[LIVE][IPD_ID_MAX];
    char id[IPD_ID_MAX], path[128];
    int64_t now = ipd_now_ms();

    snprintf(dir, sizeof(dir), "/tmp/ipd-sweep-kill-XXXXXX");
    IPD_ASSERT(mkdtemp(dir));
    open_stores(&m, &b);
    for (int i = 0; i < N; i++)
        put(m, b, now - 10000, now - 1000 - i, id);
    for (int i = 0; i < LIVE; i++)
        put(m, b, now - 10000, IPD_TIME_NEVER, live[i]);
    /* No store is open across the fork: the child opens its own. */
    ipd_blobs_free(b);
    ipd_meta_free(m);

    pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
        struct ipd_sweep_opts o = {.batch = 50};
        struct ipd_sweep_result res;
        open_stores(&m, &b);
        enum ipd_err rc = ipd_sweep_run(m, b, now, &o, &res);
        _exit(rc ? 1 : 0);
    }

    sqlite3 *db = NULL;
    snprintf(path, sizeof(path), "%s/meta.db", dir);
    CHECK_INT(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL),
              SQLITE_OK);
    sqlite3_busy_timeout(db, 5000);
    /* Bounded poll: the number of expired records left is the only
     * progress signal a separate process gives. */
    int64_t left = N, deadline = ipd_mono_ms() + WAIT_MS;
    while (ipd_mono_ms() < deadline) {
        left = raw_int(db, "SELECT count(*) FROM files"
                           " WHERE expires_at_ms IS NOT NULL");
        if (left >= 0 && left <= N / 2)
            break;
    }
    kill(pid, SIGKILL);
    int status = 0;
    CHECK_INT(waitpid(pid, &status, 0), pid);
    if (!WIFSIGNALED(status))
        fprintf(stderr, "the sweep ended (status 0x%x) before the kill\n",
                status);
    CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
    left = raw_int(db, "SELECT count(*) FROM files"
                       " WHERE expires_at_ms IS NOT NULL");
    CHECK(left > 0 && left <= N / 2);
    sqlite3_close(db);
    fprintf(stderr, "killed with %lld of %d expired records left\n",
            (long long)left, N);

    /* Run again, with the reconcile: the records left go, and so do the
     * bytes whose record the killed sweep had deleted (at most one). */
    open_stores(&m, &b);
    struct ipd_sweep_opts o = {.reconcile = true, .orphan_min_age_ms = 0};
    struct ipd_sweep_result res;
    CHECK_INT(ipd_sweep_run(m, b, ipd_now_ms(), &o, &res), IPD_OK);
    CHECK_INT(res.deleted_files, left);
    CHECK_INT(res.freed_bytes, left * 10);
    CHECK(res.orphans_removed >= 0 && res.orphans_removed <= 1);
    CHECK_INT(count_blobs(b), LIVE);
    int64_t count = -1, bytes = -1;
    CHECK_INT(ipd_meta_file_totals(m, now, &count, &bytes), IPD_OK);
    CHECK_INT(count, LIVE);
    CHECK_INT(bytes, LIVE * 10);
    for (int i = 0; i < LIVE; i++) {
        struct ipd_file_meta f;
        struct ipd_blob_info bi;
        CHECK_INT(ipd_meta_file_get(m, "t", "u", live[i], now, &f), IPD_OK);
        CHECK_INT(ipd_blob_stat(b, live[i], &bi), IPD_OK);
    }
    int64_t incomplete = -1;
    CHECK_INT(ipd_blobs_count_incomplete(b, &incomplete), IPD_OK);
    CHECK_INT(incomplete, 0);
    /* And once more: nothing left to do. */
    CHECK_INT(ipd_sweep_run(m, b, ipd_now_ms(), &o, &res), IPD_OK);
    CHECK_INT(res.deleted_files, 0);
    CHECK_INT(res.orphans_removed, 0);
    ipd_blobs_free(b);
    ipd_meta_free(m);

    CHECK_INT(sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE, NULL),
              SQLITE_OK);
    sqlite3_stmt *st = NULL;
    CHECK_INT(sqlite3_prepare_v2(db, "PRAGMA integrity_check", -1, &st, NULL),
              SQLITE_OK);
    CHECK_INT(sqlite3_step(st), SQLITE_ROW);
    CHECK_STR((const char *)sqlite3_column_text(st, 0), "ok");
    sqlite3_finalize(st);
    sqlite3_close(db);
}

static void cleanup(void)
{
    char cmd[128];
    if (!dir[0])
        return;
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    CHECK(system(cmd) == 0);
}

TEST_MAIN(T(killed_sweep_finishes), T(cleanup))
