/*
 * test_meta_sqlite.c - the SQLite metadata store: the backend-agnostic
 * conformance suite, then what only SQLite has (schema versions, reopening
 * a file, WAL, lock timeouts, rows written by someone else).
 *
 * Every store lives in one temporary directory, removed by the last test.
 */
#include <dirent.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <sqlite3.h>

#include "test.h"

#include "meta_conformance.h"
#include "storage/meta.h"

#define BUSY_MS 10000

static char tmp_dir[64];
static unsigned store_seq;

/* A fresh database path in the test directory, created on first use. */
static void new_path(char *out, size_t cap)
{
    if (!tmp_dir[0]) {
        snprintf(tmp_dir, sizeof(tmp_dir), "/tmp/ipd-meta-sqlite-XXXXXX");
        if (!mkdtemp(tmp_dir)) {
            perror("mkdtemp");
            abort();
        }
    }
    snprintf(out, cap, "%s/store-%u.db", tmp_dir, store_seq++);
}

static struct ipd_meta *open_path(const char *path, int busy_ms)
{
    struct ipd_meta *m = NULL;
    enum ipd_err rc = ipd_meta_sqlite_open(path, busy_ms, &m);
    CHECK_INT(rc, IPD_OK);
    if (rc)
        return NULL;
    return m;
}

/* The conformance factory: a new empty database file each call. */
static struct ipd_meta *open_fresh(void)
{
    char path[128];
    new_path(path, sizeof(path));
    return open_path(path, BUSY_MS);
}

/* A raw connection for poking at the file behind the store's back. */
static sqlite3 *raw_open(const char *path)
{
    sqlite3 *db = NULL;
    int src = sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE, NULL);
    CHECK_INT(src, SQLITE_OK);
    sqlite3_busy_timeout(db, BUSY_MS);
    return db;
}

/* The first column of the first row of sql as an integer (-1: none). */
static int64_t raw_int(sqlite3 *db, const char *sql)
{
    sqlite3_stmt *st = NULL;
    int64_t v = -1;
    CHECK_INT(sqlite3_prepare_v2(db, sql, -1, &st, NULL), SQLITE_OK);
    if (st && sqlite3_step(st) == SQLITE_ROW)
        v = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    return v;
}

static void raw_exec(sqlite3 *db, const char *sql)
{
    char *err = NULL;
    int src = sqlite3_exec(db, sql, NULL, NULL, &err);
    if (src)
        fprintf(stderr, "raw_exec: %s: %s\n", sql, err ? err : "?");
    CHECK_INT(src, SQLITE_OK);
    sqlite3_free(err);
}

static void conformance(void)
{
    meta_conformance_run(open_fresh);
}

static void schema_version_table(void)
{
    char path[128];
    new_path(path, sizeof(path));
    struct ipd_meta *m = open_path(path, BUSY_MS);
    REQUIRE(m);
    CHECK_STR(ipd_meta_backend(m), "sqlite");
    ipd_meta_free(m);

    sqlite3 *db = raw_open(path);
    CHECK_INT(raw_int(db, "SELECT max(version) FROM schema_version"), 5);
    CHECK_INT(raw_int(db, "SELECT count(*) FROM schema_version"), 5);
    CHECK_INT(raw_int(db, "SELECT count(*) FROM sqlite_master WHERE"
                          " type = 'table' AND name IN ('files', 'api_keys',"
                          " 'leases')"),
              3);
    CHECK_INT(raw_int(db, "SELECT count(*) FROM sqlite_master WHERE"
                          " type = 'index' AND name IN ('files_scope_expiry',"
                          " 'files_scope_order', 'files_expiry',"
                          " 'files_tenant_usage')"),
              4);
    sqlite3_close(db);
}

static void reopen_keeps_data(void)
{
    char path[128];
    new_path(path, sizeof(path));
    struct ipd_meta *m = open_path(path, BUSY_MS);
    REQUIRE(m);
    struct ipd_file_meta f = mc_file("t", "u", 7, MC_NOW, IPD_TIME_NEVER, 99);
    struct ipd_key k = mc_key(7, "t", true, MC_NOW);
    CHECK_INT(ipd_meta_file_insert(m, &f, NULL, MC_NOW), IPD_OK);
    CHECK_INT(ipd_meta_key_insert(m, &k), IPD_OK);
    ipd_meta_free(m);

    m = open_path(path, BUSY_MS);
    REQUIRE(m);
    struct ipd_file_meta got;
    struct ipd_key kgot;
    CHECK_INT(ipd_meta_file_get(m, "t", "u", f.file_id, MC_NOW, &got), IPD_OK);
    mc_check_file_eq(&got, &f);
    CHECK_INT(ipd_meta_key_find_by_hash(m, k.hash, &kgot), IPD_OK);
    mc_check_key_eq(&kgot, &k);
    ipd_meta_free(m);

    /* Reopening did not run the migration again. */
    sqlite3 *db = raw_open(path);
    CHECK_INT(raw_int(db, "SELECT count(*) FROM schema_version"), 5);
    /* "never" is SQL NULL, not a sentinel number. */
    CHECK_INT(raw_int(db, "SELECT count(*) FROM files"
                          " WHERE expires_at_ms IS NULL"),
              1);
    sqlite3_close(db);
}

/* A version 1 database (keys without a policy, no leases) opened by this
 * build gets migrations 2 to 5: its keys have the default policy,
 * "standard", and leases work. */
static void migrates_v1_keys(void)
{
    char path[128];
    new_path(path, sizeof(path));
    struct ipd_meta *m = open_path(path, BUSY_MS);
    REQUIRE(m);
    struct ipd_key k = mc_key(8, "t", false, MC_NOW);
    k.policy[0] = '\0';
    CHECK_INT(ipd_meta_key_insert(m, &k), IPD_OK);
    ipd_meta_free(m);
    /* Back to version 1's shape. */
    sqlite3 *db = raw_open(path);
    raw_exec(db, "ALTER TABLE api_keys DROP COLUMN policy;"
                 "ALTER TABLE api_keys DROP COLUMN prev_secret;"
                 "ALTER TABLE api_keys DROP COLUMN secret_rotated_at_ms;"
                 "DROP TABLE leases;"
                 "DROP INDEX files_tenant_usage;"
                 "DELETE FROM schema_version WHERE version >= 2");
    sqlite3_close(db);

    m = open_path(path, BUSY_MS);
    REQUIRE(m);
    struct ipd_key got;
    CHECK_INT(ipd_meta_key_find_by_hash(m, k.hash, &got), IPD_OK);
    CHECK_STR(got.policy, "standard");
    bool held = false;
    CHECK_INT(ipd_meta_lease_acquire(m, "sweep", "me", MC_NOW, 1000, &held),
              IPD_OK);
    CHECK(held);
    ipd_meta_free(m);
    db = raw_open(path);
    CHECK_INT(raw_int(db, "SELECT max(version) FROM schema_version"), 5);
    sqlite3_close(db);
}

/* A version 3 database (keys without the secret's rotation) opened by this
 * build gets migrations 4 and 5: its keys were never rotated, and can be. */
static void migrates_v3_keys(void)
{
    char path[128];
    new_path(path, sizeof(path));
    struct ipd_meta *m = open_path(path, BUSY_MS);
    REQUIRE(m);
    struct ipd_key k = mc_key(9, "t", false, MC_NOW);
    CHECK_INT(ipd_meta_key_insert(m, &k), IPD_OK);
    ipd_meta_free(m);
    sqlite3 *db = raw_open(path);
    raw_exec(db, "ALTER TABLE api_keys DROP COLUMN prev_secret;"
                 "ALTER TABLE api_keys DROP COLUMN secret_rotated_at_ms;"
                 "DROP INDEX files_tenant_usage;"
                 "DELETE FROM schema_version WHERE version >= 4");
    sqlite3_close(db);

    m = open_path(path, BUSY_MS);
    REQUIRE(m);
    struct ipd_key got;
    CHECK_INT(ipd_meta_key_find_by_hash(m, k.hash, &got), IPD_OK);
    mc_check_key_eq(&got, &k);
    CHECK_STR(got.prev_secret, "");
    CHECK_INT(got.secret_rotated_at_ms, 0);
    CHECK_INT(ipd_meta_key_rotate_secret(m, "t", k.secret, "fresh", MC_NOW),
              IPD_OK);
    CHECK_INT(ipd_meta_key_find_by_hash(m, k.hash, &got), IPD_OK);
    CHECK_STR(got.secret, "fresh");
    CHECK_STR(got.prev_secret, k.secret);
    ipd_meta_free(m);
    db = raw_open(path);
    CHECK_INT(raw_int(db, "SELECT max(version) FROM schema_version"), 5);
    sqlite3_close(db);
}

static void wal_mode(void)
{
    char path[128], wal[160];
    struct stat sb;
    new_path(path, sizeof(path));
    struct ipd_meta *m = open_path(path, BUSY_MS);
    REQUIRE(m);
    struct ipd_file_meta f = mc_file("t", "u", 1, MC_NOW, IPD_TIME_NEVER, 1);
    CHECK_INT(ipd_meta_file_insert(m, &f, NULL, MC_NOW), IPD_OK);
    snprintf(wal, sizeof(wal), "%s-wal", path);
    CHECK_INT(stat(wal, &sb), 0);

    sqlite3 *db = raw_open(path);
    sqlite3_stmt *st = NULL;
    CHECK_INT(sqlite3_prepare_v2(db, "PRAGMA journal_mode", -1, &st, NULL),
              SQLITE_OK);
    CHECK_INT(sqlite3_step(st), SQLITE_ROW);
    CHECK_STR((const char *)sqlite3_column_text(st, 0), "wal");
    sqlite3_finalize(st);
    sqlite3_close(db);
    ipd_meta_free(m);
}

static void newer_schema_refused(void)
{
    char path[128];
    new_path(path, sizeof(path));
    struct ipd_meta *m = open_path(path, BUSY_MS);
    REQUIRE(m);
    ipd_meta_free(m);

    sqlite3 *db = raw_open(path);
    raw_exec(db, "INSERT INTO schema_version VALUES (99, 0)");
    sqlite3_close(db);
    static struct ipd_meta sentinel;
    m = &sentinel; /* must be reset to NULL on failure */
    CHECK_INT(ipd_meta_sqlite_open(path, BUSY_MS, &m), IPD_ERR_INTERNAL);
    CHECK(m == NULL);
}

static void bad_path(void)
{
    struct ipd_meta *m = NULL;
    enum ipd_err rc =
        ipd_meta_sqlite_open("/nonexistent-ipd-dir/x/meta.db", 100, &m);
    CHECK(rc != IPD_OK);
    CHECK(m == NULL);
    ipd_meta_free(m);
}

/* A row another program wrote with a value longer than the struct field
 * is an internal error, never an overflow. */
static void oversized_stored_value(void)
{
    char path[128];
    new_path(path, sizeof(path));
    struct ipd_meta *m = open_path(path, BUSY_MS);
    REQUIRE(m);
    struct ipd_file_meta f = mc_file("t", "u", 1, MC_NOW, IPD_TIME_NEVER, 1);
    CHECK_INT(ipd_meta_file_insert(m, &f, NULL, MC_NOW), IPD_OK);

    sqlite3 *db = raw_open(path);
    raw_exec(db, "UPDATE files SET filename = printf('%.300c', 'x')");
    raw_exec(db, "INSERT INTO api_keys (key_id, tenant, hash, admin,"
                 " created_at_ms, revoked_at_ms, secret, policy)"
                 " VALUES ('key_x', 't', 'h', 0, 1, NULL,"
                 " printf('%.65c', 's'), 'standard')");
    sqlite3_close(db);

    mc_check_corrupt(m, f.file_id);
    ipd_meta_free(m);
}

/* Another process holding the write lock: writes give up with
 * UNAVAILABLE after the busy timeout, reads carry on (WAL). */
static void locked_by_other_process(void)
{
    char path[128];
    new_path(path, sizeof(path));
    struct ipd_meta *m = open_path(path, 100);
    REQUIRE(m);
    struct ipd_file_meta f1 = mc_file("t", "u", 1, MC_NOW, IPD_TIME_NEVER, 1);
    struct ipd_file_meta f2 = mc_file("t", "u", 2, MC_NOW, IPD_TIME_NEVER, 1);
    struct ipd_file_meta got;
    CHECK_INT(ipd_meta_file_insert(m, &f1, NULL, MC_NOW), IPD_OK);

    sqlite3 *db = raw_open(path);
    raw_exec(db, "BEGIN IMMEDIATE");
    int64_t t0 = ipd_mono_ms();
    CHECK_INT(ipd_meta_file_insert(m, &f2, NULL, MC_NOW), IPD_ERR_UNAVAILABLE);
    int64_t waited = ipd_mono_ms() - t0;
    CHECK(waited >= 50);
    CHECK(waited < 5000);
    CHECK_INT(ipd_meta_file_delete_by_id(m, f1.file_id), IPD_ERR_UNAVAILABLE);
    CHECK_INT(ipd_meta_key_revoke(m, "key_x", MC_NOW), IPD_ERR_UNAVAILABLE);
    CHECK_INT(ipd_meta_file_get(m, "t", "u", f1.file_id, MC_NOW, &got), IPD_OK);
    CHECK_INT(ipd_meta_ping(m), IPD_OK);
    raw_exec(db, "ROLLBACK");
    sqlite3_close(db);

    /* Nothing half-done was left behind. */
    CHECK_INT(ipd_meta_file_insert(m, &f2, NULL, MC_NOW), IPD_OK);
    CHECK_INT(ipd_meta_file_get(m, "t", "u", f1.file_id, MC_NOW, &got), IPD_OK);
    ipd_meta_free(m);
}

struct twin_worker {
    pthread_t tid;
    struct ipd_meta *m;
    unsigned base;
    unsigned failures; /* OUT */
};

static void *twin_run(void *arg)
{
    struct twin_worker *w = arg;
    for (unsigned i = 0; i < 50; i++) {
        struct ipd_file_meta f =
            mc_file("t", "u", w->base + i, MC_NOW - (int64_t)(w->base + i),
                    IPD_TIME_NEVER, 1);
        /* An unlimited quota still reads before it writes: the case
         * where a deferred transaction would fail on a busy snapshot. */
        struct ipd_quota q = {.max_files = -1, .max_bytes = -1};
        if (ipd_meta_file_insert(w->m, &f, &q, MC_NOW))
            w->failures++;
    }
    return NULL;
}

/* Two stores on one file (as two daemons would be): their writers meet
 * in SQLite's lock, not our mutex, and BEGIN IMMEDIATE plus the busy
 * timeout must still let every write through. */
static void two_stores_one_file(void)
{
    char path[128];
    new_path(path, sizeof(path));
    struct ipd_meta *a = open_path(path, BUSY_MS);
    struct ipd_meta *b = open_path(path, BUSY_MS);
    REQUIRE(a && b);
    struct twin_worker w[8];
    for (unsigned t = 0; t < 8; t++) {
        w[t] = (struct twin_worker){.m = t % 2 ? a : b, .base = t * 1000};
        CHECK_INT(pthread_create(&w[t].tid, NULL, twin_run, &w[t]), 0);
    }
    unsigned failures = 0;
    for (unsigned t = 0; t < 8; t++) {
        pthread_join(w[t].tid, NULL);
        failures += w[t].failures;
    }
    CHECK_INT(failures, 0);
    int64_t count = -1, bytes = -1;
    CHECK_INT(ipd_meta_file_usage(a, "t", "u", MC_NOW, &count, &bytes), IPD_OK);
    CHECK_INT(count, 400);
    CHECK_INT(ipd_meta_file_usage(b, "t", "u", MC_NOW, &count, &bytes), IPD_OK);
    CHECK_INT(count, 400);
    ipd_meta_free(a);
    ipd_meta_free(b);
}

/* Several threads, each with a store of its own on one file, take over
 * the same expired lease at once: exactly one wins (BEGIN IMMEDIATE makes
 * the check and the write one step). */
static void lease_takeover_race(void)
{
    char path[128];
    new_path(path, sizeof(path));
    struct ipd_meta *stores[MC_THREADS];
    for (int t = 0; t < MC_THREADS; t++) {
        stores[t] = open_path(path, BUSY_MS);
        REQUIRE(stores[t]);
    }
    for (int round = 0; round < 5; round++) {
        struct mc_leaser l[MC_THREADS];
        int winners = 0;
        /* A holder that died: its lease expired at MC_NOW + round. */
        bool got = false;
        CHECK_INT(ipd_meta_lease_acquire(stores[0], "race", "dead",
                                         MC_NOW + round - 60000, 60000, &got),
                  IPD_OK);
        CHECK(got || round > 0);
        for (int t = 0; t < MC_THREADS; t++) {
            l[t] = (struct mc_leaser){.m = stores[t], .now = MC_NOW + round};
            snprintf(l[t].owner, sizeof(l[t].owner), "o-%d-%d", round, t);
            CHECK_INT(pthread_create(&l[t].tid, NULL, mc_leaser_run, &l[t]), 0);
        }
        for (int t = 0; t < MC_THREADS; t++) {
            pthread_join(l[t].tid, NULL);
            CHECK_INT(l[t].rc, IPD_OK);
            winners += l[t].got;
        }
        CHECK_INT(winners, 1);
        /* Hand it back to "dead" for the next round: expire the winner's
         * lease by acquiring far in its future. */
        CHECK_INT(ipd_meta_lease_acquire(stores[0], "race", "dead",
                                         MC_NOW + round + 60000, 1, &got),
                  IPD_OK);
        CHECK(got);
    }
    for (int t = 0; t < MC_THREADS; t++)
        ipd_meta_free(stores[t]);
}

/* Two processes on one data dir: a lease is exclusive across them.  Each
 * child loops taking the lease and, while it holds it, creates a marker
 * file with O_EXCL; a second holder would find the marker there.  A
 * child's exit code is how often it held the lease (at most 199), or 200
 * and up for an error. */
static void lease_two_processes(void)
{
    enum { CHILDREN = 3, ROUNDS = 150 };
    char path[128], marker[160];
    new_path(path, sizeof(path));
    snprintf(marker, sizeof(marker), "%s.holder", path);
    struct ipd_meta *m = open_path(path, BUSY_MS);
    REQUIRE(m);
    ipd_meta_free(m); /* created with its schema; children open their own */
    pid_t pids[CHILDREN];
    for (int c = 0; c < CHILDREN; c++) {
        pids[c] = fork();
        REQUIRE(pids[c] >= 0);
        if (pids[c] > 0)
            continue;
        struct ipd_meta *cm = NULL;
        char owner[32];
        int held = 0, code = 0;
        snprintf(owner, sizeof(owner), "proc-%d", c);
        if (ipd_meta_sqlite_open(path, BUSY_MS, &cm))
            _exit(203);
        for (int i = 0; i < ROUNDS && !code; i++) {
            bool got = false;
            if (ipd_meta_lease_acquire(cm, "job", owner, ipd_now_ms(), 60000,
                                       &got)) {
                code = 204;
                break;
            }
            if (!got)
                continue;
            held++;
            int fd = open(marker, O_CREAT | O_EXCL | O_WRONLY, 0600);
            if (fd < 0) {
                code = 205; /* someone else holds it too */
                break;
            }
            close(fd);
            unlink(marker);
            if (ipd_meta_lease_release(cm, "job", owner))
                code = 206;
        }
        ipd_meta_free(cm);
        _exit(code ? code : held > 199 ? 199 : held);
    }
    int failures = 0, held = 0;
    for (int c = 0; c < CHILDREN; c++) {
        int status = 0;
        CHECK_INT(waitpid(pids[c], &status, 0), pids[c]);
        if (!WIFEXITED(status) || WEXITSTATUS(status) >= 200) {
            fprintf(stderr, "child %d: status 0x%x\n", c, status);
            failures++;
        } else {
            held += WEXITSTATUS(status);
        }
    }
    CHECK_INT(failures, 0);
    CHECK(held > 0);
    unlink(marker);
}

/* The mode of a path (not followed), or -1. */
static int mode_of(const char *path)
{
    struct stat st;
    return lstat(path, &st) ? -1 : (int)(st.st_mode & 07777);
}

/* The store's files are the service's alone: a new one is 0600 with its
 * -wal and -shm, an older 0644 one is tightened at open; a symlinked one
 * opens and its target (not ours) keeps its mode. */
static void file_modes(void)
{
    char path[128], wal[160], real[160];
    struct ipd_meta *m;
    new_path(path, sizeof(path));
    m = open_path(path, BUSY_MS);
    REQUIRE(m);
    snprintf(wal, sizeof(wal), "%s-wal", path);
    CHECK_INT(mode_of(path), 0600);
    CHECK_INT(mode_of(wal), 0600);
    ipd_meta_free(m);
    CHECK_INT(chmod(path, 0644), 0);
    m = open_path(path, BUSY_MS);
    CHECK_INT(mode_of(path), 0600);
    ipd_meta_free(m);

    snprintf(real, sizeof(real), "%s.real", path);
    CHECK_INT(rename(path, real), 0);
    CHECK_INT(chmod(real, 0640), 0);
    CHECK_INT(symlink(real, path), 0);
    m = open_path(path, BUSY_MS);
    CHECK(m != NULL);
    CHECK_INT(mode_of(real), 0640);
    ipd_meta_free(m);
}

/* A cursor names its kind of id: a file list's is no execution list's,
 * and each formats back to itself. */
static void cursor_kinds(void)
{
    struct ipd_cursor c;
    char out[IPD_CURSOR_MAX];
    const char *exec = "1795301645528.exec_w7xorh3wzd2hdyj6hjdlruerqe";
    const char *file = "1795301645528.file_w7xorh3wzd2hdyj6hjdlruerqe";
    CHECK(ipd_cursor_parse_kind(exec, "exec", &c));
    CHECK(c.created_at_ms == 1795301645528LL);
    CHECK_STR(c.id, "exec_w7xorh3wzd2hdyj6hjdlruerqe");
    ipd_cursor_format_id(c.created_at_ms, c.id, out);
    CHECK_STR(out, exec);
    CHECK(!ipd_cursor_parse_kind(file, "exec", &c));
    CHECK(!ipd_cursor_parse(exec, &c));
    CHECK(ipd_cursor_parse(file, &c));
    CHECK_STR(c.id, "file_w7xorh3wzd2hdyj6hjdlruerqe");
    CHECK(!ipd_cursor_parse_kind("1795301645528.exec_", "exec", &c));
    CHECK(!ipd_cursor_parse_kind("-1.exec_w7xorh3wzd2hdyj6hjdlruerqe", "exec",
                                 &c));
    CHECK(!ipd_cursor_parse_kind("", "exec", &c));
}

static void cleanup(void)
{
    if (!tmp_dir[0])
        return;
    DIR *d = opendir(tmp_dir);
    REQUIRE(d);
    struct dirent *e;
    char p[512];
    for (e = readdir(d); e; e = readdir(d)) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        snprintf(p, sizeof(p), "%s/%s", tmp_dir, e->d_name);
        CHECK_INT(unlink(p), 0);
    }
    closedir(d);
    CHECK_INT(rmdir(tmp_dir), 0);
}

TEST_MAIN(T(conformance), T(schema_version_table), T(reopen_keeps_data),
          T(migrates_v1_keys), T(migrates_v3_keys), T(wal_mode),
          T(newer_schema_refused), T(bad_path), T(oversized_stored_value),
          T(locked_by_other_process), T(two_stores_one_file),
          T(lease_takeover_race), T(lease_two_processes), T(file_modes),
          T(cursor_kinds), T(cleanup))
