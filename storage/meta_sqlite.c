/*
 * meta_sqlite.c - the meta.h store on SQLite.  sqlite3 types never leave
 * this file.
 *
 * Connections.  One writer connection behind a mutex, plus a pool of
 * IPD_SQLITE_READERS reader connections.  In WAL mode readers never block
 * the writer and the writer never blocks readers, so request threads that
 * only read (get, list, usage, key lookup on every request) run in
 * parallel.  SQLite allows one writer at a time anyway: several writer
 * connections would only take turns through the busy handler, which polls
 * with sleeps of up to 100 ms and is unfair, so writers queue on our mutex
 * instead and are woken as soon as the previous write commits.  Writes
 * still take BEGIN IMMEDIATE and a busy timeout, for another process
 * (a second daemon, the sqlite3 shell, a backup) holding the lock.
 * Each connection is used by one thread at a time, so connections are
 * opened with SQLITE_OPEN_NOMUTEX, and each keeps its own cache of
 * prepared statements, prepared on first use.
 *
 * busy_timeout_ms bounds every wait: for the writer mutex, for a free
 * reader, and (as sqlite3_busy_timeout) for SQLite's own locks.  Past it
 * an operation answers IPD_ERR_UNAVAILABLE.  A write can wait twice (mutex,
 * then the file lock held by another process), so the worst case is about
 * twice the timeout.
 *
 * Durability: synchronous=NORMAL.  In WAL mode that fsyncs at checkpoints
 * rather than at each commit: the database can't be corrupted by a crash,
 * and a process crash loses nothing, but an OS crash or power cut may
 * lose the last few commits.  Records are short-lived (48 h TTL) and
 * their blobs live elsewhere; a lost record leaves an orphan blob, not a
 * dangling one.  FULL would cost an fsync per upload on the single writer.
 *
 * Leases (meta.h) are rows of the table leases, each changed by one
 * statement in a BEGIN IMMEDIATE transaction, so they are exclusive across
 * connections and across processes sharing the file.
 *
 * Times: expires_at_ms is NULL for IPD_TIME_NEVER, so "never" needs no
 * sentinel in SQL and a NULL is never in an expiry range; revoked_at_ms is
 * NULL while a key is valid (0 in struct ipd_key).
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <sqlite3.h>

#include "../service/common/log.h"
#include "meta.h"

#define IPD_SQLITE_READERS 4
#define SCHEMA_VERSION 5

/* Every statement the store runs.  All SQL is constant; user data only
 * ever reaches SQLite through bound parameters. */
enum stmt_id {
    S_BEGIN,
    S_COMMIT,
    S_ROLLBACK,
    S_PING,
    S_FILE_USAGE,
    S_FILE_INSERT,
    S_FILE_GET,
    S_FILE_LIST_FIRST,
    S_FILE_LIST_AFTER,
    S_FILE_DELETE,
    S_FILE_LIST_EXPIRED,
    S_FILE_DELETE_BY_ID,
    S_FILE_TOTALS,
    S_KEY_INSERT,
    S_KEY_FIND,
    S_KEY_FIND_ID,
    S_KEY_LIST,
    S_KEY_FIND_TENANT,
    S_KEY_REVOKE,
    S_KEY_ROTATE_SECRET,
    S_FILE_GET_BY_ID,
    S_FILE_SCAN,
    S_LEASE_ACQUIRE,
    S_LEASE_RENEW,
    S_LEASE_RELEASE,
    S_TENANT_USAGE,
    S_TENANT_LIST,
    S__COUNT
};

#define FILE_COLS                                                              \
    "file_id, tenant, user_id, filename, size, mime_type, file_type, "         \
    "sha256, source, blob, created_at_ms, expires_at_ms"
#define KEY_COLS                                                               \
    "key_id, tenant, hash, admin, created_at_ms, revoked_at_ms, secret, "      \
    "policy, prev_secret, secret_rotated_at_ms"
/* A record is visible at time ?now while it has not expired. */
#define UNEXPIRED(now) "(expires_at_ms IS NULL OR expires_at_ms > " now ")"

static const char *const stmt_sql[S__COUNT] = {
    [S_BEGIN] = "BEGIN IMMEDIATE",
    [S_COMMIT] = "COMMIT",
    [S_ROLLBACK] = "ROLLBACK",
    [S_PING] = "SELECT max(version) FROM schema_version",
    [S_FILE_USAGE] = "SELECT count(*), coalesce(sum(size), 0) FROM files"
                     " WHERE tenant = ?1 AND user_id = ?2 AND " UNEXPIRED("?3"),
    [S_FILE_INSERT] = "INSERT INTO files (" FILE_COLS ")"
                      " VALUES (?1, ?2, ?3, ?4, ?5, ?6,"
                      " ?7, ?8, ?9, ?10, ?11, ?12)",
    [S_FILE_GET] = "SELECT " FILE_COLS " FROM files"
                   " WHERE file_id = ?1 AND tenant = ?2 AND user_id = ?3"
                   " AND " UNEXPIRED("?4"),
    [S_FILE_LIST_FIRST] =
        "SELECT " FILE_COLS " FROM files"
        " WHERE tenant = ?1 AND user_id = ?2"
        " AND " UNEXPIRED("?3") " ORDER BY created_at_ms DESC, file_id DESC"
                                " LIMIT ?4",
    [S_FILE_LIST_AFTER] =
        "SELECT " FILE_COLS " FROM files"
        " WHERE tenant = ?1 AND user_id = ?2"
        " AND " UNEXPIRED("?3") " AND (created_at_ms < ?5"
                                " OR (created_at_ms = ?5 AND file_id < ?6))"
                                " ORDER BY created_at_ms DESC, file_id DESC"
                                " LIMIT ?4",
    [S_FILE_DELETE] = "DELETE FROM files"
                      " WHERE file_id = ?1 AND tenant = ?2 AND user_id = ?3"
                      " AND " UNEXPIRED("?4") " RETURNING " FILE_COLS,
    [S_FILE_LIST_EXPIRED] = "SELECT " FILE_COLS " FROM files"
                            " WHERE expires_at_ms IS NOT NULL"
                            " AND expires_at_ms <= ?1"
                            " ORDER BY expires_at_ms, file_id LIMIT ?2",
    [S_FILE_DELETE_BY_ID] = "DELETE FROM files WHERE file_id = ?1",
    [S_FILE_TOTALS] = "SELECT count(*), coalesce(sum(size), 0) FROM files"
                      " WHERE " UNEXPIRED("?1"),
    [S_KEY_INSERT] = "INSERT INTO api_keys (" KEY_COLS ")"
                     " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
    [S_KEY_FIND] = "SELECT " KEY_COLS " FROM api_keys WHERE hash = ?1",
    [S_KEY_FIND_ID] = "SELECT " KEY_COLS " FROM api_keys WHERE key_id = ?1",
    [S_KEY_LIST] = "SELECT " KEY_COLS " FROM api_keys"
                   " ORDER BY created_at_ms, key_id",
    /* The newest of the tenant's keys: the last key_list would show. */
    [S_KEY_FIND_TENANT] = "SELECT " KEY_COLS " FROM api_keys"
                          " WHERE tenant = ?1 AND secret <> ''"
                          " ORDER BY created_at_ms DESC, key_id DESC"
                          " LIMIT 1",
    /* coalesce keeps the first revocation time. */
    [S_KEY_REVOKE] = "UPDATE api_keys"
                     " SET revoked_at_ms = coalesce(revoked_at_ms, ?2)"
                     " WHERE key_id = ?1",
    /* The right-hand sides see the row before the update: prev_secret
     * gets the old secret. */
    [S_KEY_ROTATE_SECRET] = "UPDATE api_keys"
                            " SET prev_secret = secret, secret = ?3,"
                            " secret_rotated_at_ms = ?4"
                            " WHERE tenant = ?1 AND secret = ?2",
    [S_FILE_GET_BY_ID] = "SELECT " FILE_COLS " FROM files WHERE file_id = ?1",
    /* The primary key's index gives the order and the start. */
    [S_FILE_SCAN] = "SELECT " FILE_COLS " FROM files WHERE file_id > ?1"
                    " ORDER BY file_id LIMIT ?2",
    /* One statement inside BEGIN IMMEDIATE: insert the lease, or take it
     * over when it has expired or is ours already.  changes() is 1 when
     * we hold it afterwards, 0 when the WHERE kept another holder's. */
    [S_LEASE_ACQUIRE] = "INSERT INTO leases (name, owner, expires_at_ms)"
                        " VALUES (?1, ?2, ?3)"
                        " ON CONFLICT (name) DO UPDATE"
                        " SET owner = excluded.owner,"
                        " expires_at_ms = excluded.expires_at_ms"
                        " WHERE leases.expires_at_ms <= ?4"
                        " OR leases.owner = excluded.owner",
    [S_LEASE_RENEW] = "UPDATE leases"
                      " SET expires_at_ms = ?3"
                      " WHERE name = ?1 AND owner = ?2",
    [S_LEASE_RELEASE] = "DELETE FROM leases WHERE name = ?1 AND owner = ?2",
    /* The tenant quota's count, from the covering index of migration 5
     * (no table rows read). */
    [S_TENANT_USAGE] = "SELECT count(*), coalesce(sum(size), 0) FROM files"
                       " INDEXED BY files_tenant_usage"
                       " WHERE tenant = ?1 AND " UNEXPIRED("?2"),
    [S_TENANT_LIST] =
        "SELECT tenant, count(*), coalesce(sum(size), 0)"
        " FROM files WHERE " UNEXPIRED(
            "?1") " GROUP BY tenant ORDER BY 3 DESC, tenant LIMIT ?2",
};

/*
 * Migrations: migrations[i] takes the schema from version i to i + 1.
 * Append only; never edit a released step.  Each runs inside the
 * BEGIN IMMEDIATE transaction of migrate(), with its schema_version row.
 */
static const char *const migrations[SCHEMA_VERSION] = {
    "CREATE TABLE files ("
    "  file_id TEXT PRIMARY KEY NOT NULL,"
    "  tenant TEXT NOT NULL,"
    "  user_id TEXT NOT NULL,"
    "  filename TEXT NOT NULL,"
    "  size INTEGER NOT NULL CHECK (size >= 0),"
    "  mime_type TEXT NOT NULL,"
    "  file_type TEXT NOT NULL,"
    "  sha256 TEXT NOT NULL,"
    "  source TEXT NOT NULL,"
    "  blob TEXT NOT NULL,"
    "  created_at_ms INTEGER NOT NULL,"
    "  expires_at_ms INTEGER"
    ");"
    "CREATE INDEX files_scope_expiry ON files (tenant, user_id, expires_at_ms);"
    "CREATE INDEX files_scope_order"
    "  ON files (tenant, user_id, created_at_ms DESC, file_id DESC);"
    "CREATE INDEX files_expiry ON files (expires_at_ms);"
    "CREATE TABLE api_keys ("
    "  key_id TEXT PRIMARY KEY NOT NULL,"
    "  tenant TEXT NOT NULL,"
    "  hash TEXT NOT NULL UNIQUE,"
    "  admin INTEGER NOT NULL CHECK (admin IN (0, 1)),"
    "  created_at_ms INTEGER NOT NULL,"
    "  revoked_at_ms INTEGER,"
    "  secret TEXT NOT NULL"
    ");",
    /* 2: each key names its execution policy. */
    "ALTER TABLE api_keys ADD COLUMN policy TEXT NOT NULL"
    "  DEFAULT 'standard';",
    /* 3: leases for jobs that one process at a time may run (meta.h). */
    "CREATE TABLE leases ("
    "  name TEXT PRIMARY KEY NOT NULL,"
    "  owner TEXT NOT NULL,"
    "  expires_at_ms INTEGER NOT NULL"
    ");",
    /* 4: the callback secret's rotation (the previous secret still signs
     * during a grace period). */
    "ALTER TABLE api_keys ADD COLUMN prev_secret TEXT NOT NULL DEFAULT '';"
    "ALTER TABLE api_keys ADD COLUMN secret_rotated_at_ms INTEGER NOT NULL"
    "  DEFAULT 0;",
    /* 5: the tenant quota counts a tenant's files and bytes at each
     * insert: an index that holds all it reads. */
    "CREATE INDEX IF NOT EXISTS files_tenant_usage"
    "  ON files (tenant, expires_at_ms, size);",
};

struct conn {
    sqlite3 *db;
    sqlite3_stmt *stmts[S__COUNT]; /* prepared on first use, owned */
};

struct meta_sqlite {
    struct ipd_meta base; /* first: the dispatcher casts */
    int busy_timeout_ms;
    pthread_mutex_t write_lock; /* held while a thread uses writer */
    struct conn writer;
    pthread_mutex_t pool_lock; /* guards free_readers and nfree */
    pthread_cond_t pool_cond;  /* signalled when a reader is returned */
    struct conn readers[IPD_SQLITE_READERS];
    struct conn *free_readers[IPD_SQLITE_READERS]; /* stack of idle readers */
    size_t nfree;
};

/* Map a SQLite result code to ipd_err and log what deserves a log line:
 * I/O and internal errors, not contention or constraint hits. */
static enum ipd_err db_err(struct conn *c, int src, const char *what)
{
    enum ipd_err rc;
    int ext = c->db ? sqlite3_extended_errcode(c->db) : src;

    switch (src & 0xff) {
    case SQLITE_BUSY:
    case SQLITE_LOCKED: rc = IPD_ERR_UNAVAILABLE; break;
    case SQLITE_CONSTRAINT:
        if (ext == SQLITE_CONSTRAINT_PRIMARYKEY ||
            ext == SQLITE_CONSTRAINT_UNIQUE)
            rc = IPD_ERR_CONFLICT;
        else
            rc = IPD_ERR_INTERNAL;
        break;
    case SQLITE_FULL: rc = IPD_ERR_NO_SPACE; break;
    case SQLITE_IOERR:
    case SQLITE_CANTOPEN:
        /* A write or fsync refused by a full disk can surface as an I/O
         * error (the WAL, the shm file); it is still "no space". */
        rc = c->db && (sqlite3_system_errno(c->db) == ENOSPC ||
                       sqlite3_system_errno(c->db) == EDQUOT)
                 ? IPD_ERR_NO_SPACE
                 : IPD_ERR_IO;
        break;
    default: rc = IPD_ERR_INTERNAL; break;
    }
    if (rc == IPD_ERR_IO || rc == IPD_ERR_INTERNAL || rc == IPD_ERR_NO_SPACE)
        ipd_error("meta_sqlite: %s: %s (%d)", what,
                  c->db ? sqlite3_errmsg(c->db) : sqlite3_errstr(src), ext);
    return rc;
}

/* The cached statement id on c, prepared on first use.  [out] *out is
 * borrowed from c; give it back with stmt_done. */
static enum ipd_err stmt_get(struct conn *c, enum stmt_id id,
                             sqlite3_stmt **out)
{
    enum ipd_err rc = IPD_OK;
    int src;

    *out = NULL;
    if (!c->stmts[id]) {
        src =
            sqlite3_prepare_v3(c->db, stmt_sql[id], -1,
                               SQLITE_PREPARE_PERSISTENT, &c->stmts[id], NULL);
        if (src) {
            rc = db_err(c, src, stmt_sql[id]);
            goto out;
        }
    }
    *out = c->stmts[id];
out:
    return rc;
}

/* Reset st so it releases its read snapshot, and drop its bindings, which
 * point at the caller's strings (SQLITE_STATIC).  NULL is fine. */
static void stmt_done(sqlite3_stmt *st)
{
    if (!st)
        return;
    sqlite3_reset(st);
    sqlite3_clear_bindings(st);
}

/* Bind a NUL-terminated string of at most cap - 1 bytes (cap 0: any
 * length).  A field that fills its array without a NUL is a caller bug. */
static int bind_text(sqlite3_stmt *st, int idx, const char *s, size_t cap)
{
    size_t n = cap ? strnlen(s, cap) : strlen(s);

    if ((cap && n == cap) || n > INT32_MAX)
        return SQLITE_TOOBIG;
    return sqlite3_bind_text(st, idx, s, (int)n, SQLITE_STATIC);
}

/* ?1 file id, ?2 tenant, ?3 user, ?4 now: one file in its owner's scope,
 * unexpired (S_FILE_GET, S_FILE_DELETE). */
static int bind_file_scope(sqlite3_stmt *st, const char *file_id,
                           const char *tenant, const char *user_id,
                           int64_t now_ms)
{
    int src = bind_text(st, 1, file_id, 0);
    if (!src)
        src = bind_text(st, 2, tenant, 0);
    if (!src)
        src = bind_text(st, 3, user_id, 0);
    if (!src)
        src = sqlite3_bind_int64(st, 4, now_ms);
    return src;
}

/* A row limit as SQLite wants it: limit + 1 rows reveal whether another
 * page follows. */
static sqlite3_int64 fetch_limit(size_t limit)
{
    if (limit >= (size_t)INT64_MAX)
        return INT64_MAX;
    return (sqlite3_int64)limit + 1;
}

/* Copy a TEXT column into a fixed array.  A NULL or a value that does not
 * fit is a corrupt or foreign row: IPD_ERR_INTERNAL, never an overflow. */
static enum ipd_err col_text(sqlite3_stmt *st, int col, char *dst, size_t cap)
{
    const unsigned char *t = sqlite3_column_text(st, col);
    int n = sqlite3_column_bytes(st, col);
    enum ipd_err rc = IPD_OK;

    if (!t || n < 0 || (size_t)n >= cap) {
        ipd_error("meta_sqlite: column %s: %s", sqlite3_column_name(st, col),
                  t ? "too long" : "NULL");
        rc = IPD_ERR_INTERNAL;
        goto out;
    }
    memcpy(dst, t, (size_t)n);
    dst[n] = '\0';
out:
    return rc;
}

/* Fill *f from a row of FILE_COLS. */
static enum ipd_err row_to_file(sqlite3_stmt *st, struct ipd_file_meta *f)
{
    enum ipd_err rc;

    memset(f, 0, sizeof(*f));
    rc = col_text(st, 0, f->file_id, sizeof(f->file_id));
    if (!rc)
        rc = col_text(st, 1, f->tenant, sizeof(f->tenant));
    if (!rc)
        rc = col_text(st, 2, f->user_id, sizeof(f->user_id));
    if (!rc)
        rc = col_text(st, 3, f->filename, sizeof(f->filename));
    if (!rc)
        rc = col_text(st, 5, f->mime_type, sizeof(f->mime_type));
    if (!rc)
        rc = col_text(st, 6, f->file_type, sizeof(f->file_type));
    if (!rc)
        rc = col_text(st, 7, f->sha256, sizeof(f->sha256));
    if (!rc)
        rc = col_text(st, 8, f->source, sizeof(f->source));
    if (!rc)
        rc = col_text(st, 9, f->blob, sizeof(f->blob));
    if (rc)
        goto out;
    f->size = sqlite3_column_int64(st, 4);
    f->created_at_ms = sqlite3_column_int64(st, 10);
    if (sqlite3_column_type(st, 11) == SQLITE_NULL)
        f->expires_at_ms = IPD_TIME_NEVER;
    else
        f->expires_at_ms = sqlite3_column_int64(st, 11);
out:
    return rc;
}

/* Fill *k from a row of KEY_COLS. */
static enum ipd_err row_to_key(sqlite3_stmt *st, struct ipd_key *k)
{
    enum ipd_err rc;

    memset(k, 0, sizeof(*k));
    rc = col_text(st, 0, k->key_id, sizeof(k->key_id));
    if (!rc)
        rc = col_text(st, 1, k->tenant, sizeof(k->tenant));
    if (!rc)
        rc = col_text(st, 2, k->hash, sizeof(k->hash));
    if (!rc)
        rc = col_text(st, 6, k->secret, sizeof(k->secret));
    if (!rc)
        rc = col_text(st, 7, k->policy, sizeof(k->policy));
    if (!rc)
        rc = col_text(st, 8, k->prev_secret, sizeof(k->prev_secret));
    if (rc)
        goto out;
    k->secret_rotated_at_ms = sqlite3_column_int64(st, 9);
    k->admin = sqlite3_column_int(st, 3) != 0;
    k->created_at_ms = sqlite3_column_int64(st, 4);
    if (sqlite3_column_type(st, 5) == SQLITE_NULL)
        k->revoked_at_ms = 0;
    else
        k->revoked_at_ms = sqlite3_column_int64(st, 5);
out:
    return rc;
}

/* Take the writer connection, waiting at most the busy timeout.
 * [out] *out is borrowed until writer_release. */
static enum ipd_err writer_acquire(struct meta_sqlite *s, struct conn **out)
{
    /* pthread_mutex_timedlock measures against CLOCK_REALTIME. */
    struct timespec dl = ipd_deadline_after(CLOCK_REALTIME, s->busy_timeout_ms);
    enum ipd_err rc = IPD_OK;
    int e;

    *out = NULL;
    e = pthread_mutex_timedlock(&s->write_lock, &dl);
    if (e == ETIMEDOUT) {
        rc = IPD_ERR_UNAVAILABLE;
        goto out;
    }
    IPD_ASSERT(e == 0);
    *out = &s->writer;
out:
    return rc;
}

static void writer_release(struct meta_sqlite *s, struct conn *c)
{
    if (c)
        pthread_mutex_unlock(&s->write_lock);
}

/* Take an idle reader connection, waiting at most the busy timeout.
 * [out] *out is borrowed until reader_release. */
static enum ipd_err reader_acquire(struct meta_sqlite *s, struct conn **out)
{
    struct timespec dl =
        ipd_deadline_after(CLOCK_MONOTONIC, s->busy_timeout_ms);
    enum ipd_err rc = IPD_OK;
    int e = 0;

    *out = NULL;
    pthread_mutex_lock(&s->pool_lock);
    while (!s->nfree && e != ETIMEDOUT)
        e = pthread_cond_timedwait(&s->pool_cond, &s->pool_lock, &dl);
    if (!s->nfree) {
        rc = IPD_ERR_UNAVAILABLE;
        goto out;
    }
    *out = s->free_readers[--s->nfree];
out:
    pthread_mutex_unlock(&s->pool_lock);
    return rc;
}

static void reader_release(struct meta_sqlite *s, struct conn *c)
{
    if (!c)
        return;
    pthread_mutex_lock(&s->pool_lock);
    IPD_ASSERT(s->nfree < IPD_SQLITE_READERS);
    s->free_readers[s->nfree++] = c;
    pthread_cond_signal(&s->pool_cond);
    pthread_mutex_unlock(&s->pool_lock);
}

/* Run a statement that returns no rows (BEGIN, COMMIT, ...). */
static enum ipd_err exec_stmt(struct conn *c, enum stmt_id id)
{
    sqlite3_stmt *st = NULL;
    enum ipd_err rc;
    int src;

    rc = stmt_get(c, id, &st);
    if (rc)
        goto out;
    src = sqlite3_step(st);
    if (src != SQLITE_DONE)
        rc = db_err(c, src, stmt_sql[id]);
out:
    stmt_done(st);
    return rc;
}

/* Roll back the writer's transaction if one is still open (a failed
 * COMMIT or statement may already have ended it). */
static void tx_rollback(struct conn *c)
{
    if (!sqlite3_get_autocommit(c->db))
        exec_stmt(c, S_ROLLBACK);
}

/* End c's transaction: COMMIT while rc is IPD_OK, then roll back what is
 * still open (rc was an error, or COMMIT failed).  Passes rc through, or
 * COMMIT's error. */
static enum ipd_err tx_end(struct conn *c, enum ipd_err rc)
{
    if (!rc)
        rc = exec_stmt(c, S_COMMIT);
    tx_rollback(c);
    return rc;
}

/* Run a one-row count/sum query already bound on st. */
static enum ipd_err step_count_sum(struct conn *c, sqlite3_stmt *st,
                                   const char *what, int64_t *count,
                                   int64_t *bytes)
{
    enum ipd_err rc = IPD_OK;
    int src = sqlite3_step(st);

    if (src != SQLITE_ROW) {
        rc = db_err(c, src, what);
        goto out;
    }
    *count = sqlite3_column_int64(st, 0);
    *bytes = sqlite3_column_int64(st, 1);
out:
    return rc;
}

/* The unexpired (count, bytes) of a scope, on connection c; user_id
 * NULL: the whole tenant's. */
static enum ipd_err usage_on(struct conn *c, const char *tenant,
                             const char *user_id, int64_t now_ms,
                             int64_t *count, int64_t *bytes)
{
    sqlite3_stmt *st = NULL;
    enum ipd_err rc;
    int src, i = 1;

    rc = stmt_get(c, user_id ? S_FILE_USAGE : S_TENANT_USAGE, &st);
    if (rc)
        goto out;
    src = bind_text(st, i++, tenant, 0);
    if (!src && user_id)
        src = bind_text(st, i++, user_id, 0);
    if (!src)
        src = sqlite3_bind_int64(st, i, now_ms);
    if (src) {
        rc = db_err(c, src, "file_usage bind");
        goto out;
    }
    rc = step_count_sum(c, st, "file_usage", count, bytes);
out:
    stmt_done(st);
    return rc;
}

/* IPD_ERR_QUOTA when adding f would take its user's scope, or its
 * tenant's, past q.  Runs inside the writer's IMMEDIATE transaction, so
 * no other insert can slip in between these counts and the INSERT. */
static enum ipd_err quota_check(struct conn *c, const struct ipd_file_meta *f,
                                const struct ipd_quota *q, int64_t now_ms)
{
    int64_t count = 0, bytes = 0;
    enum ipd_err rc = IPD_OK;

    if (q->max_files >= 0 || q->max_bytes >= 0) {
        rc = usage_on(c, f->tenant, f->user_id, now_ms, &count, &bytes);
        if (!rc && ipd_quota_exceeded(q, count, bytes, f->size))
            rc = IPD_ERR_QUOTA;
    }
    if (!rc && ipd_quota_limits_tenant(q)) {
        rc = usage_on(c, f->tenant, NULL, now_ms, &count, &bytes);
        if (!rc && ipd_quota_exceeded(q->tenant, count, bytes, f->size))
            rc = IPD_ERR_QUOTA;
    }
    return rc;
}

/* Bind f to S_FILE_INSERT; the SQLite code of the first bind that fails. */
static int bind_file_row(sqlite3_stmt *st, const struct ipd_file_meta *f)
{
    int src = bind_text(st, 1, f->file_id, sizeof(f->file_id));

    if (!src)
        src = bind_text(st, 2, f->tenant, sizeof(f->tenant));
    if (!src)
        src = bind_text(st, 3, f->user_id, sizeof(f->user_id));
    if (!src)
        src = bind_text(st, 4, f->filename, sizeof(f->filename));
    if (!src)
        src = sqlite3_bind_int64(st, 5, f->size);
    if (!src)
        src = bind_text(st, 6, f->mime_type, sizeof(f->mime_type));
    if (!src)
        src = bind_text(st, 7, f->file_type, sizeof(f->file_type));
    if (!src)
        src = bind_text(st, 8, f->sha256, sizeof(f->sha256));
    if (!src)
        src = bind_text(st, 9, f->source, sizeof(f->source));
    if (!src)
        src = bind_text(st, 10, f->blob, sizeof(f->blob));
    if (!src)
        src = sqlite3_bind_int64(st, 11, f->created_at_ms);
    if (!src && f->expires_at_ms == IPD_TIME_NEVER)
        src = sqlite3_bind_null(st, 12);
    else if (!src)
        src = sqlite3_bind_int64(st, 12, f->expires_at_ms);
    return src;
}

/* Bind k to S_KEY_INSERT; the SQLite code of the first bind that fails. */
static int bind_key_row(sqlite3_stmt *st, const struct ipd_key *k)
{
    int src = bind_text(st, 1, k->key_id, sizeof(k->key_id));

    if (!src)
        src = bind_text(st, 2, k->tenant, sizeof(k->tenant));
    if (!src)
        src = bind_text(st, 3, k->hash, sizeof(k->hash));
    if (!src)
        src = sqlite3_bind_int(st, 4, k->admin ? 1 : 0);
    if (!src)
        src = sqlite3_bind_int64(st, 5, k->created_at_ms);
    if (!src && k->revoked_at_ms == 0)
        src = sqlite3_bind_null(st, 6);
    else if (!src)
        src = sqlite3_bind_int64(st, 6, k->revoked_at_ms);
    if (!src)
        src = bind_text(st, 7, k->secret, sizeof(k->secret));
    if (!src)
        src = bind_text(st, 8, k->policy, sizeof(k->policy));
    if (!src)
        src = bind_text(st, 9, k->prev_secret, sizeof(k->prev_secret));
    if (!src)
        src = sqlite3_bind_int64(st, 10, k->secret_rotated_at_ms);
    return src;
}

/* The SQLite code of a caller's binds turned into ours (logged as "<what>
 * bind"). */
static enum ipd_err bind_err(struct conn *c, int bind_src, const char *what)
{
    char buf[64];

    if (!bind_src)
        return IPD_OK;
    snprintf(buf, sizeof(buf), "%s bind", what);
    return db_err(c, bind_src, buf);
}

/* After the caller's binds (bind_src), step st once, expecting want:
 * SQLITE_ROW (IPD_ERR_NOT_FOUND when there is no row) or SQLITE_DONE. */
static enum ipd_err step_one(struct conn *c, sqlite3_stmt *st, int bind_src,
                             int want, const char *what)
{
    enum ipd_err rc = bind_err(c, bind_src, what);
    int src;

    if (rc)
        return rc;
    src = sqlite3_step(st);
    if (src == want)
        return IPD_OK;
    if (want == SQLITE_ROW && src == SQLITE_DONE)
        return IPD_ERR_NOT_FOUND;
    return db_err(c, src, what);
}

/*
 * A read on a reader connection: rd_begin takes the connection and the
 * prepared statement id, rd_bound turns the SQLite code of the caller's
 * binds into ours, rd_one steps to the one row a lookup expects
 * (IPD_ERR_NOT_FOUND without one), rd_end gives everything back and
 * passes rc through.  Every step is a no-op after an error:
 *
 *     enum ipd_err rc = rd_begin(s, S_X, &r);
 *     if (!rc)
 *         rc = rd_one(&r, bind_text(r.st, 1, id, 0), "x");
 *     if (!rc)
 *         rc = row_to_file(r.st, out);
 *     return rd_end(s, &r, rc);
 */
struct rd {
    struct conn *c;
    sqlite3_stmt *st;
};

static enum ipd_err rd_begin(struct meta_sqlite *s, enum stmt_id id,
                             struct rd *r)
{
    enum ipd_err rc;

    r->c = NULL;
    r->st = NULL;
    rc = reader_acquire(s, &r->c);
    if (!rc)
        rc = stmt_get(r->c, id, &r->st);
    return rc;
}

static enum ipd_err rd_bound(struct rd *r, int bind_src, const char *what)
{
    return bind_err(r->c, bind_src, what);
}

static enum ipd_err rd_one(struct rd *r, int bind_src, const char *what)
{
    return step_one(r->c, r->st, bind_src, SQLITE_ROW, what);
}

static enum ipd_err rd_end(struct meta_sqlite *s, struct rd *r, enum ipd_err rc)
{
    stmt_done(r->st);
    reader_release(s, r->c);
    return rc;
}

/*
 * A write, in one BEGIN IMMEDIATE transaction on the writer connection:
 * wr_begin takes the writer (waiting at most the busy timeout), begins
 * and takes the prepared statement id; wr_step turns the SQLite code of
 * the caller's binds into ours and steps to the row (SQLITE_ROW;
 * IPD_ERR_NOT_FOUND without one) or to the end (SQLITE_DONE) the caller
 * expects, and may be called again; wr_end commits while rc is IPD_OK,
 * rolls back otherwise, gives the writer back and passes rc (or COMMIT's
 * error) through.  Other statements of the same transaction run on w.c
 * (file_insert's quota count).  As with rd, each step runs while rc is
 * IPD_OK, and wr_end always:
 *
 *     enum ipd_err rc = wr_begin(s, S_X, &w);
 *     if (!rc)
 *         rc = wr_step(&w, bind_text(w.st, 1, id, 0), SQLITE_DONE, "x");
 *     return wr_end(s, &w, rc);
 */
struct wr {
    struct conn *c;
    sqlite3_stmt *st;
};

static enum ipd_err wr_begin(struct meta_sqlite *s, enum stmt_id id,
                             struct wr *w)
{
    enum ipd_err rc;

    w->c = NULL;
    w->st = NULL;
    rc = writer_acquire(s, &w->c);
    if (!rc)
        rc = exec_stmt(w->c, S_BEGIN);
    if (!rc)
        rc = stmt_get(w->c, id, &w->st);
    return rc;
}

static enum ipd_err wr_step(struct wr *w, int bind_src, int want,
                            const char *what)
{
    return step_one(w->c, w->st, bind_src, want, what);
}

static enum ipd_err wr_end(struct meta_sqlite *s, struct wr *w, enum ipd_err rc)
{
    /* Reset first: COMMIT fails while a statement is still running. */
    stmt_done(w->st);
    if (w->c)
        rc = tx_end(w->c, rc);
    writer_release(s, w->c);
    return rc;
}

static void sq_free(struct ipd_meta *m);

static enum ipd_err sq_ping(struct ipd_meta *m)
{
    struct meta_sqlite *s = (struct meta_sqlite *)m;
    struct rd r;
    enum ipd_err rc = rd_begin(s, S_PING, &r);

    if (!rc)
        rc = rd_one(&r, SQLITE_OK, "ping");
    return rd_end(s, &r, rc == IPD_ERR_NOT_FOUND ? IPD_ERR_INTERNAL : rc);
}

static enum ipd_err sq_file_insert(struct ipd_meta *m,
                                   const struct ipd_file_meta *f,
                                   const struct ipd_quota *quota,
                                   int64_t now_ms)
{
    struct meta_sqlite *s = (struct meta_sqlite *)m;
    struct wr w;
    enum ipd_err rc = wr_begin(s, S_FILE_INSERT, &w);

    if (!rc && quota)
        rc = quota_check(w.c, f, quota, now_ms);
    if (!rc)
        rc = wr_step(&w, bind_file_row(w.st, f), SQLITE_DONE, "file_insert");
    return wr_end(s, &w, rc);
}

static enum ipd_err sq_file_get(struct ipd_meta *m, const char *tenant,
                                const char *user_id, const char *file_id,
                                int64_t now_ms, struct ipd_file_meta *out)
{
    struct meta_sqlite *s = (struct meta_sqlite *)m;
    struct rd r;
    enum ipd_err rc = rd_begin(s, S_FILE_GET, &r);

    if (!rc)
        rc = rd_one(&r, bind_file_scope(r.st, file_id, tenant, user_id, now_ms),
                    "file_get");
    if (!rc)
        rc = row_to_file(r.st, out);
    return rd_end(s, &r, rc);
}

/* Step st to the end, collecting up to limit rows into *out and setting
 * out->more when a further row exists (st fetches limit + 1).  On error
 * *out is released. */
static enum ipd_err collect_files(struct conn *c, sqlite3_stmt *st,
                                  size_t limit, const char *what,
                                  struct ipd_file_list *out)
{
    size_t alloc = 0;
    enum ipd_err rc = IPD_OK;
    int src;

    for (;;) {
        src = sqlite3_step(st);
        if (src == SQLITE_DONE)
            break;
        if (src != SQLITE_ROW) {
            rc = db_err(c, src, what);
            goto out;
        }
        if (out->n == limit) {
            out->more = true;
            break;
        }
        /* Grows with the rows actually returned, not with the limit the
         * caller asked for. */
        if (out->n == alloc) {
            alloc = alloc ? alloc * 2 : 16;
            out->items = ipd_xrealloc(out->items, alloc * sizeof(*out->items));
        }
        rc = row_to_file(st, &out->items[out->n]);
        if (rc)
            goto out;
        out->n++;
    }
out:
    if (rc)
        ipd_file_list_release(out);
    return rc;
}

static enum ipd_err sq_file_list(struct ipd_meta *m, const char *tenant,
                                 const char *user_id, int64_t now_ms,
                                 const struct ipd_cursor *after, size_t limit,
                                 struct ipd_file_list *out)
{
    struct meta_sqlite *s = (struct meta_sqlite *)m;
    struct rd r;
    enum ipd_err rc;
    int src;

    memset(out, 0, sizeof(*out));
    rc = rd_begin(s, after ? S_FILE_LIST_AFTER : S_FILE_LIST_FIRST, &r);
    if (rc)
        return rd_end(s, &r, rc);
    src = bind_text(r.st, 1, tenant, 0);
    if (!src)
        src = bind_text(r.st, 2, user_id, 0);
    if (!src)
        src = sqlite3_bind_int64(r.st, 3, now_ms);
    if (!src)
        src = sqlite3_bind_int64(r.st, 4, fetch_limit(limit));
    if (!src && after)
        src = sqlite3_bind_int64(r.st, 5, after->created_at_ms);
    if (!src && after)
        src = bind_text(r.st, 6, after->id, sizeof(after->id));
    rc = rd_bound(&r, src, "file_list");
    if (!rc)
        rc = collect_files(r.c, r.st, limit, "file_list", out);
    return rd_end(s, &r, rc);
}

static enum ipd_err sq_file_delete(struct ipd_meta *m, const char *tenant,
                                   const char *user_id, const char *file_id,
                                   int64_t now_ms, struct ipd_file_meta *out)
{
    struct meta_sqlite *s = (struct meta_sqlite *)m;
    struct ipd_file_meta rec;
    struct wr w;
    enum ipd_err rc = wr_begin(s, S_FILE_DELETE, &w);

    if (!rc)
        rc =
            wr_step(&w, bind_file_scope(w.st, file_id, tenant, user_id, now_ms),
                    SQLITE_ROW, "file_delete");
    if (!rc)
        rc = row_to_file(w.st, &rec);
    /* file_id is the primary key: one row at most.  Step to the end so
     * the DELETE completes before COMMIT. */
    if (!rc)
        rc = wr_step(&w, SQLITE_OK, SQLITE_DONE, "file_delete");
    rc = wr_end(s, &w, rc);
    if (!rc && out)
        *out = rec;
    return rc;
}

static enum ipd_err sq_file_usage(struct ipd_meta *m, const char *tenant,
                                  const char *user_id, int64_t now_ms,
                                  int64_t *count, int64_t *bytes)
{
    struct meta_sqlite *s = (struct meta_sqlite *)m;
    struct conn *c = NULL;
    enum ipd_err rc;

    rc = reader_acquire(s, &c);
    if (rc)
        goto out;
    rc = usage_on(c, tenant, user_id, now_ms, count, bytes);
out:
    reader_release(s, c);
    return rc;
}

/* A page of files by statement id binding ?1 (text1, or int1 when text1
 * is NULL) and ?2 the row limit. */
static enum ipd_err read_page(struct meta_sqlite *s, enum stmt_id id,
                              const char *what, const char *text1, int64_t int1,
                              size_t limit, struct ipd_file_list *out)
{
    struct rd r;
    enum ipd_err rc;
    int src;

    memset(out, 0, sizeof(*out));
    rc = rd_begin(s, id, &r);
    if (rc)
        return rd_end(s, &r, rc);
    src = text1 ? bind_text(r.st, 1, text1, 0)
                : sqlite3_bind_int64(r.st, 1, int1);
    if (!src)
        src = sqlite3_bind_int64(r.st, 2, fetch_limit(limit));
    rc = rd_bound(&r, src, what);
    if (!rc)
        rc = collect_files(r.c, r.st, limit, what, out);
    return rd_end(s, &r, rc);
}

static enum ipd_err sq_file_list_expired(struct ipd_meta *m, int64_t now_ms,
                                         size_t limit,
                                         struct ipd_file_list *out)
{
    return read_page((struct meta_sqlite *)m, S_FILE_LIST_EXPIRED,
                     "file_list_expired", NULL, now_ms, limit, out);
}

/* One write statement binding a text (?1) and optionally an integer (?2),
 * in its own transaction; IPD_ERR_NOT_FOUND when it changed no row. */
static enum ipd_err write_one(struct meta_sqlite *s, enum stmt_id id,
                              const char *what, const char *text,
                              const int64_t *num)
{
    struct wr w;
    enum ipd_err rc = wr_begin(s, id, &w);
    int src;

    if (rc)
        return wr_end(s, &w, rc);
    src = bind_text(w.st, 1, text, 0);
    if (!src && num)
        src = sqlite3_bind_int64(w.st, 2, *num);
    rc = wr_step(&w, src, SQLITE_DONE, what);
    /* changes() counts matched rows, also where an update kept a value. */
    if (!rc && sqlite3_changes(w.c->db) == 0)
        rc = IPD_ERR_NOT_FOUND;
    return wr_end(s, &w, rc);
}

static enum ipd_err sq_file_delete_by_id(struct ipd_meta *m,
                                         const char *file_id)
{
    return write_one((struct meta_sqlite *)m, S_FILE_DELETE_BY_ID,
                     "file_delete_by_id", file_id, NULL);
}

static enum ipd_err sq_file_totals(struct ipd_meta *m, int64_t now_ms,
                                   int64_t *count, int64_t *bytes)
{
    struct meta_sqlite *s = (struct meta_sqlite *)m;
    struct rd r;
    enum ipd_err rc = rd_begin(s, S_FILE_TOTALS, &r);

    if (!rc)
        rc = rd_bound(&r, sqlite3_bind_int64(r.st, 1, now_ms), "file_totals");
    if (!rc)
        rc = step_count_sum(r.c, r.st, "file_totals", count, bytes);
    return rd_end(s, &r, rc);
}

static enum ipd_err sq_tenant_usage(struct ipd_meta *m, int64_t now_ms,
                                    size_t limit, struct ipd_tenant_usage *out,
                                    size_t *n, bool *more)
{
    struct meta_sqlite *s = (struct meta_sqlite *)m;
    struct rd r;
    enum ipd_err rc = rd_begin(s, S_TENANT_LIST, &r);
    int src = SQLITE_OK;

    if (rc)
        return rd_end(s, &r, rc);
    src = sqlite3_bind_int64(r.st, 1, now_ms);
    if (!src)
        src = sqlite3_bind_int64(r.st, 2, fetch_limit(limit));
    rc = rd_bound(&r, src, "tenant_usage");
    while (!rc && (src = sqlite3_step(r.st)) == SQLITE_ROW) {
        if (*n == limit) {
            *more = true;
            break;
        }
        rc = col_text(r.st, 0, out[*n].tenant, sizeof(out[*n].tenant));
        out[*n].files = sqlite3_column_int64(r.st, 1);
        out[*n].bytes = sqlite3_column_int64(r.st, 2);
        if (!rc)
            (*n)++;
    }
    if (!rc && src != SQLITE_ROW && src != SQLITE_DONE)
        rc = db_err(r.c, src, "tenant_usage");
    return rd_end(s, &r, rc);
}

static enum ipd_err sq_key_insert(struct ipd_meta *m, const struct ipd_key *k)
{
    struct meta_sqlite *s = (struct meta_sqlite *)m;
    struct wr w;
    enum ipd_err rc = wr_begin(s, S_KEY_INSERT, &w);

    if (!rc)
        rc = wr_step(&w, bind_key_row(w.st, k), SQLITE_DONE, "key_insert");
    return wr_end(s, &w, rc);
}

/* The one key statement st finds for value (a unique column). */
static enum ipd_err key_find_by(struct ipd_meta *m, enum stmt_id st,
                                const char *value, const char *what,
                                struct ipd_key *out)
{
    struct meta_sqlite *s = (struct meta_sqlite *)m;
    struct rd r;
    enum ipd_err rc = rd_begin(s, st, &r);

    if (!rc)
        rc = rd_one(&r, bind_text(r.st, 1, value, 0), what);
    if (!rc)
        rc = row_to_key(r.st, out);
    return rd_end(s, &r, rc);
}

static enum ipd_err sq_key_find_by_hash(struct ipd_meta *m, const char *hash,
                                        struct ipd_key *out)
{
    return key_find_by(m, S_KEY_FIND, hash, "key_find_by_hash", out);
}

static enum ipd_err sq_key_find_by_id(struct ipd_meta *m, const char *key_id,
                                      struct ipd_key *out)
{
    return key_find_by(m, S_KEY_FIND_ID, key_id, "key_find_by_id", out);
}

static enum ipd_err sq_key_find_tenant(struct ipd_meta *m, const char *tenant,
                                       struct ipd_key *out)
{
    struct meta_sqlite *s = (struct meta_sqlite *)m;
    struct rd r;
    enum ipd_err rc = rd_begin(s, S_KEY_FIND_TENANT, &r);

    if (!rc)
        rc = rd_one(&r, bind_text(r.st, 1, tenant, 0), "key_find_tenant");
    if (!rc)
        rc = row_to_key(r.st, out);
    return rd_end(s, &r, rc);
}

static enum ipd_err sq_key_list(struct ipd_meta *m, struct ipd_key_list *out)
{
    struct meta_sqlite *s = (struct meta_sqlite *)m;
    struct rd r;
    size_t alloc = 0;
    enum ipd_err rc;
    int src;

    memset(out, 0, sizeof(*out));
    rc = rd_begin(s, S_KEY_LIST, &r);
    while (!rc) {
        src = sqlite3_step(r.st);
        if (src == SQLITE_DONE)
            break;
        if (src != SQLITE_ROW) {
            rc = db_err(r.c, src, "key_list");
            break;
        }
        if (out->n == alloc) {
            alloc = alloc ? alloc * 2 : 16;
            out->items = ipd_xrealloc(out->items, alloc * sizeof(*out->items));
        }
        rc = row_to_key(r.st, &out->items[out->n]);
        if (!rc)
            out->n++;
    }
    if (rc)
        ipd_key_list_release(out);
    return rd_end(s, &r, rc);
}

static enum ipd_err sq_key_revoke(struct ipd_meta *m, const char *key_id,
                                  int64_t now_ms)
{
    /* The statement keeps the first revocation time (coalesce). */
    return write_one((struct meta_sqlite *)m, S_KEY_REVOKE, "key_revoke",
                     key_id, &now_ms);
}

static enum ipd_err sq_key_rotate_secret(struct ipd_meta *m, const char *tenant,
                                         const char *current, const char *next,
                                         int64_t now_ms)
{
    struct meta_sqlite *s = (struct meta_sqlite *)m;
    struct wr w;
    enum ipd_err rc = wr_begin(s, S_KEY_ROTATE_SECRET, &w);
    int src;

    if (rc)
        return wr_end(s, &w, rc);
    src = bind_text(w.st, 1, tenant, 0);
    if (!src)
        src = bind_text(w.st, 2, current, 0);
    if (!src)
        src = bind_text(w.st, 3, next, 0);
    if (!src)
        src = sqlite3_bind_int64(w.st, 4, now_ms);
    rc = wr_step(&w, src, SQLITE_DONE, "key_rotate_secret");
    if (!rc && sqlite3_changes(w.c->db) == 0)
        rc = IPD_ERR_NOT_FOUND;
    return wr_end(s, &w, rc);
}

static enum ipd_err sq_file_get_by_id(struct ipd_meta *m, const char *file_id,
                                      struct ipd_file_meta *out)
{
    struct meta_sqlite *s = (struct meta_sqlite *)m;
    struct rd r;
    enum ipd_err rc = rd_begin(s, S_FILE_GET_BY_ID, &r);

    if (!rc)
        rc = rd_one(&r, bind_text(r.st, 1, file_id, 0), "file_get_by_id");
    if (!rc)
        rc = row_to_file(r.st, out);
    return rd_end(s, &r, rc);
}

static enum ipd_err sq_file_scan(struct ipd_meta *m, const char *after,
                                 size_t limit, struct ipd_file_list *out)
{
    return read_page((struct meta_sqlite *)m, S_FILE_SCAN, "file_scan", after,
                     0, limit, out);
}

/* Run the lease statement id with ?1 name, ?2 owner, ?3 until and (acquire
 * only) ?4 now, in a BEGIN IMMEDIATE transaction: the write lock makes it
 * exclusive against every connection, also another process's on the same
 * file.  [out] *changed: whether a row changed. */
static enum ipd_err lease_write(struct meta_sqlite *s, enum stmt_id id,
                                const char *name, const char *owner,
                                const int64_t *until, const int64_t *now,
                                bool *changed)
{
    struct wr w;
    bool done = false;
    enum ipd_err rc;
    int src;

    *changed = false;
    rc = wr_begin(s, id, &w);
    if (rc)
        return wr_end(s, &w, rc);
    src = bind_text(w.st, 1, name, IPD_LEASE_NAME_MAX);
    if (!src)
        src = bind_text(w.st, 2, owner, IPD_LEASE_OWNER_MAX);
    if (!src && until)
        src = sqlite3_bind_int64(w.st, 3, *until);
    if (!src && now)
        src = sqlite3_bind_int64(w.st, 4, *now);
    rc = wr_step(&w, src, SQLITE_DONE, stmt_sql[id]);
    if (!rc)
        done = sqlite3_changes(w.c->db) > 0;
    rc = wr_end(s, &w, rc);
    if (!rc)
        *changed = done;
    return rc;
}

static enum ipd_err sq_lease_acquire(struct ipd_meta *m, const char *name,
                                     const char *owner, int64_t now_ms,
                                     int64_t ttl_ms, bool *got)
{
    int64_t until = now_ms + ttl_ms;
    return lease_write((struct meta_sqlite *)m, S_LEASE_ACQUIRE, name, owner,
                       &until, &now_ms, got);
}

static enum ipd_err sq_lease_renew(struct ipd_meta *m, const char *name,
                                   const char *owner, int64_t now_ms,
                                   int64_t ttl_ms, bool *held)
{
    int64_t until = now_ms + ttl_ms;
    return lease_write((struct meta_sqlite *)m, S_LEASE_RENEW, name, owner,
                       &until, NULL, held);
}

static enum ipd_err sq_lease_release(struct ipd_meta *m, const char *name,
                                     const char *owner)
{
    bool gone;
    return lease_write((struct meta_sqlite *)m, S_LEASE_RELEASE, name, owner,
                       NULL, NULL, &gone);
}

static const struct ipd_meta_ops sqlite_ops = {
    .name = "sqlite",
    .free = sq_free,
    .ping = sq_ping,
    .file_insert = sq_file_insert,
    .file_get = sq_file_get,
    .file_list = sq_file_list,
    .file_delete = sq_file_delete,
    .file_usage = sq_file_usage,
    .file_list_expired = sq_file_list_expired,
    .file_delete_by_id = sq_file_delete_by_id,
    .file_totals = sq_file_totals,
    .key_insert = sq_key_insert,
    .key_find_by_hash = sq_key_find_by_hash,
    .key_find_by_id = sq_key_find_by_id,
    .key_list = sq_key_list,
    .key_find_tenant = sq_key_find_tenant,
    .key_revoke = sq_key_revoke,
    .key_rotate_secret = sq_key_rotate_secret,
    .file_get_by_id = sq_file_get_by_id,
    .file_scan = sq_file_scan,
    .lease_acquire = sq_lease_acquire,
    .lease_renew = sq_lease_renew,
    .lease_release = sq_lease_release,
    .tenant_usage = sq_tenant_usage,
};

/* Finalize c's statements and close it.  Safe on a never-opened conn. */
static void conn_close(struct conn *c)
{
    for (size_t i = 0; i < S__COUNT; i++) {
        sqlite3_finalize(c->stmts[i]);
        c->stmts[i] = NULL;
    }
    sqlite3_close_v2(c->db);
    c->db = NULL;
}

/* Run a constant PRAGMA and copy its one-row text answer (if any) into
 * ans.  Only ever called with literal SQL. */
static enum ipd_err pragma(struct conn *c, const char *sql, char *ans,
                           size_t cap)
{
    sqlite3_stmt *st = NULL;
    enum ipd_err rc = IPD_OK;
    int src;

    src = sqlite3_prepare_v2(c->db, sql, -1, &st, NULL);
    if (src) {
        rc = db_err(c, src, sql);
        goto out;
    }
    src = sqlite3_step(st);
    if (src == SQLITE_ROW && ans) {
        rc = col_text(st, 0, ans, cap);
        if (rc)
            goto out;
        src = sqlite3_step(st);
    }
    if (src != SQLITE_DONE && src != SQLITE_ROW)
        rc = db_err(c, src, sql);
out:
    sqlite3_finalize(st);
    return rc;
}

/* Open one connection to path with the settings every connection shares. */
static enum ipd_err conn_open(struct conn *c, const char *path, int flags,
                              int busy_timeout_ms)
{
    enum ipd_err rc;
    int src;

    src = sqlite3_open_v2(path, &c->db, flags | SQLITE_OPEN_NOMUTEX, NULL);
    if (src) {
        rc = db_err(c, src, "open");
        goto out;
    }
    sqlite3_extended_result_codes(c->db, 1);
    src = sqlite3_busy_timeout(c->db, busy_timeout_ms);
    if (src) {
        rc = db_err(c, src, "busy_timeout");
        goto out;
    }
    rc = pragma(c, "PRAGMA synchronous = NORMAL", NULL, 0);
    if (rc)
        goto out;
    rc = pragma(c, "PRAGMA foreign_keys = ON", NULL, 0);
out:
    return rc;
}

/* The schema version recorded in the database; 0 for a new database. */
static enum ipd_err schema_version_get(struct conn *c, int64_t *version)
{
    sqlite3_stmt *st = NULL;
    enum ipd_err rc = IPD_OK;
    int src;

    src = sqlite3_prepare_v2(c->db,
                             "SELECT coalesce(max(version), 0)"
                             " FROM schema_version",
                             -1, &st, NULL);
    if (!src)
        src = sqlite3_step(st);
    if (src != SQLITE_ROW) {
        rc = db_err(c, src, "schema_version");
        goto out;
    }
    *version = sqlite3_column_int64(st, 0);
out:
    sqlite3_finalize(st);
    return rc;
}

/* Record that version v is applied. */
static enum ipd_err schema_version_add(struct conn *c, int64_t v)
{
    sqlite3_stmt *st = NULL;
    enum ipd_err rc = IPD_OK;
    int src;

    src = sqlite3_prepare_v2(c->db,
                             "INSERT INTO schema_version"
                             " (version, applied_at_ms) VALUES (?1, ?2)",
                             -1, &st, NULL);
    if (!src)
        src = sqlite3_bind_int64(st, 1, v);
    if (!src)
        src = sqlite3_bind_int64(st, 2, ipd_now_ms());
    if (!src)
        src = sqlite3_step(st);
    if (src != SQLITE_DONE)
        rc = db_err(c, src, "schema_version insert");
    sqlite3_finalize(st);
    return rc;
}

/* Bring the schema to SCHEMA_VERSION in one transaction, so a crash
 * mid-migration leaves the previous version intact.  A database from a
 * newer build is refused rather than misread. */
static enum ipd_err migrate(struct conn *c)
{
    int64_t version = 0;
    enum ipd_err rc;
    int src;

    rc = exec_stmt(c, S_BEGIN);
    if (rc)
        goto out;
    src = sqlite3_exec(c->db,
                       "CREATE TABLE IF NOT EXISTS schema_version ("
                       "  version INTEGER PRIMARY KEY NOT NULL,"
                       "  applied_at_ms INTEGER NOT NULL)",
                       NULL, NULL, NULL);
    if (src) {
        rc = db_err(c, src, "create schema_version");
        goto out;
    }
    rc = schema_version_get(c, &version);
    if (rc)
        goto out;
    if (version < 0 || version > SCHEMA_VERSION) {
        ipd_error("meta_sqlite: schema version %lld is newer than this "
                  "build (%d)",
                  (long long)version, SCHEMA_VERSION);
        rc = IPD_ERR_INTERNAL;
        goto out;
    }
    for (int64_t v = version; v < SCHEMA_VERSION; v++) {
        src = sqlite3_exec(c->db, migrations[v], NULL, NULL, NULL);
        if (src) {
            rc = db_err(c, src, "migration");
            goto out;
        }
        rc = schema_version_add(c, v + 1);
        if (rc)
            goto out;
    }
out:
    return tx_end(c, rc);
}

/* chmod 0600 without following a symlink; a symlink (its target is not
 * ours to change) and a file system that refuses modes (EPERM, EROFS)
 * are left as they are with a warning.  -1 with errno on another
 * failure. */
static int tighten(const char *name)
{
    int fd = open(name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    int rc = fd < 0 ? -1 : fchmod(fd, 0600);
    int e = errno;
    if (fd >= 0)
        close(fd);
    if (rc && e == ENOENT)
        return 0;
    if (rc && (e == ELOOP || e == EPERM || e == EROFS)) {
        ipd_warn("meta_sqlite: %s: cannot make it 0600: %s", name, strerror(e));
        return 0;
    }
    errno = e;
    return rc;
}

/* The database holds key hashes and callback secrets: it and its -wal
 * and -shm are the service's alone (0600).  SQLite gives -wal and -shm
 * the database file's mode, so the file is made 0600 before SQLite first
 * creates it; a store made by an older version (0644) is tightened.
 * ":memory:" and URIs are left alone. */
static enum ipd_err own_files(const char *path)
{
    static const char *const suffixes[] = {"", "-wal", "-shm"};
    char name[PATH_MAX];
    int fd;

    if (path[0] == ':' || !strncmp(path, "file:", 5))
        return IPD_OK;
    fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd >= 0)
        close(fd);
    else if (errno != EEXIST)
        return IPD_ERR_IO;
    for (size_t i = 0; i < sizeof(suffixes) / sizeof(suffixes[0]); i++) {
        if ((size_t)snprintf(name, sizeof(name), "%s%s", path, suffixes[i]) >=
            sizeof(name))
            return IPD_ERR_IO;
        if (tighten(name))
            return IPD_ERR_IO;
    }
    return IPD_OK;
}

/* Open and configure the writer: WAL, then the schema. */
static enum ipd_err writer_open(struct meta_sqlite *s, const char *path)
{
    char mode[16];
    enum ipd_err rc;

    rc = own_files(path);
    if (rc) {
        ipd_error("meta_sqlite: %s: %s", path, strerror(errno));
        goto out;
    }
    rc = conn_open(&s->writer, path, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE,
                   s->busy_timeout_ms);
    if (rc)
        goto out;
    /* journal_mode answers the mode in force; anything but "wal" (":memory:",
     * a filesystem without shared memory) would break concurrent readers. */
    rc = pragma(&s->writer, "PRAGMA journal_mode = WAL", mode, sizeof(mode));
    if (rc)
        goto out;
    if (strcmp(mode, "wal") != 0) {
        ipd_error("meta_sqlite: %s: journal mode %s, not wal", path, mode);
        rc = IPD_ERR_INTERNAL;
        goto out;
    }
    rc = migrate(&s->writer);
out:
    return rc;
}

static void sq_free(struct ipd_meta *m)
{
    struct meta_sqlite *s = (struct meta_sqlite *)m;

    if (!s)
        return;
    for (size_t i = 0; i < IPD_SQLITE_READERS; i++)
        conn_close(&s->readers[i]);
    /* The writer closes last: the last connection checkpoints the WAL. */
    conn_close(&s->writer);
    pthread_cond_destroy(&s->pool_cond);
    pthread_mutex_destroy(&s->pool_lock);
    pthread_mutex_destroy(&s->write_lock);
    free(s);
}

enum ipd_err ipd_meta_sqlite_open(const char *path, int busy_timeout_ms,
                                  struct ipd_meta **out)
{
    struct meta_sqlite *s = NULL;
    pthread_condattr_t ca;
    enum ipd_err rc;

    *out = NULL;
    /* Connections are NOMUTEX, but SQLite's shared state (the page cache,
     * the WAL index) still needs a threadsafe build. */
    if (!sqlite3_threadsafe()) {
        ipd_error("meta_sqlite: libsqlite3 built without thread support");
        rc = IPD_ERR_INTERNAL;
        goto out;
    }
    s = ipd_xcalloc(1, sizeof(*s));
    s->base.ops = &sqlite_ops;
    s->busy_timeout_ms = busy_timeout_ms > 0 ? busy_timeout_ms : 0;
    IPD_ASSERT(pthread_mutex_init(&s->write_lock, NULL) == 0);
    IPD_ASSERT(pthread_mutex_init(&s->pool_lock, NULL) == 0);
    IPD_ASSERT(pthread_condattr_init(&ca) == 0);
    IPD_ASSERT(pthread_condattr_setclock(&ca, CLOCK_MONOTONIC) == 0);
    IPD_ASSERT(pthread_cond_init(&s->pool_cond, &ca) == 0);
    pthread_condattr_destroy(&ca);

    rc = writer_open(s, path);
    if (rc)
        goto out;
    for (size_t i = 0; i < IPD_SQLITE_READERS; i++) {
        rc = conn_open(&s->readers[i], path, SQLITE_OPEN_READWRITE,
                       s->busy_timeout_ms);
        if (rc)
            goto out;
        /* Readers only read; make a slip a loud error, not a second
         * writer racing the first. */
        rc = pragma(&s->readers[i], "PRAGMA query_only = ON", NULL, 0);
        if (rc)
            goto out;
        s->free_readers[s->nfree++] = &s->readers[i];
    }
    *out = &s->base;
    s = NULL;
out:
    if (s)
        sq_free(&s->base);
    return rc;
}
