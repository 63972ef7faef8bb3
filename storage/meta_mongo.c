/*
 * meta_mongo.c - the meta.h store on MongoDB (mongo-c-driver).  mongoc
 * types never leave the adapters (mongo.c, this file, blob_gridfs.c).
 *
 * Documents, as an operator sees them with mongosh:
 *
 *   user_files  { file_id, tenant, user_id, filename, file_size (int64),
 *                 file_type, mime_type, sha256, source, blob,
 *                 uploaded_at (date), expires_at (date, null = never) }
 *   api_keys    { key_id, tenant, hash, admin (bool), created_at (date),
 *                 revoked_at (date, null = valid), secret, policy,
 *                 prev_secret, secret_rotated_at (date, null = never) }
 *                 (documents from before a field existed may lack policy,
 *                 prev_secret and secret_rotated_at: read as "standard",
 *                 "" and never)
 *   quota_locks { _id: "<tenant>/<user_id>" (a user's scope) or "<tenant>"
 *                 (the tenant's), owner, expires_at (date) }
 *   leases      { _id: <random per holding>, name, owner, expires_at (date) }
 *   service_state: reserved (last cleanup, venv generation); this store
 *                 creates nothing in it.
 *
 * uploaded_at is struct ipd_file_meta's created_at_ms; BSON dates are
 * int64 milliseconds, so times round-trip exactly.  "Expired" means
 * expires_at <= now; the unexpired filter is
 * {$or: [{expires_at: null}, {expires_at: {$gt: now}}]}.
 *
 * Indexes (created at open with createIndexes, a no-op when they exist
 * with the same definition): user_files {tenant:1, user_id:1,
 * expires_at:-1} (usage and quota), {tenant:1, user_id:1, uploaded_at:-1,
 * file_id:-1} (list order), unique {file_id:1}, {expires_at:1} (sweeps);
 * api_keys unique {hash:1} and unique {key_id:1}; leases unique {name:1}.
 *
 * Quota without transactions.  FerretDB has none, and a count followed by
 * an insert races.  So an insert under a quota holds a per-scope lock: a
 * document in quota_locks with _id "<tenant>/<user_id>" (tenants and user
 * ids contain no '/'; were they to, two scopes would only share a lock,
 * which serialises them needlessly but stays correct).  Taking the lock is
 * an insert, which the unique _id makes atomic: duplicate key means someone
 * else holds it, and we retry with a jittered backoff for up to
 * LOCK_WAIT_MS, then answer IPD_ERR_UNAVAILABLE.  Holding it we sum the
 * scope's unexpired files, check, insert, and delete the lock by _id AND
 * owner (a random token), so we never delete a lock that was taken over.
 * Inserts without a quota (or with both limits unlimited), deletes and
 * sweeps don't take the lock: they can only lower usage.  With a tenant
 * quota the insert first takes the tenant's lock (_id "<tenant>", which
 * no user scope's id equals), then the user's: always in that order, so
 * two inserts never wait for each other's second lock.  Holding both it
 * sums the user's files and the tenant's (all its users), checks, inserts.
 * The tenant's lock serialises that tenant's quota inserts on every node;
 * other tenants are not held up.  NEEDSWORK: the tenant's sum reads one
 * small document per live file of the tenant (up to tenant-quota-files)
 * at each insert; a counter document would be O(1), but files expire by
 * time without a write, so it would need the sweep to keep it true.
 *
 * A holder that dies (crash, kill -9, network lost before the delete)
 * leaves its lock behind.  Each lock carries expires_at = wall clock +
 * TTL, where TTL = max(LOCK_TTL_MIN_MS, 3 * op_timeout_ms) (15 s by
 * default); a contender that finds one whose expires_at has passed
 * deletes it (filter on _id and expires_at < now, so two contenders can't
 * both steal the same generation) and retries at once.  So a dead holder
 * stalls its scope's quota inserts for at most the TTL (they answer 503
 * meanwhile).  The price is that a live holder slower than the TTL could
 * be overtaken and two inserts race past the quota.  So a holder refuses
 * to insert (IPD_ERR_UNAVAILABLE) when a third of the TTL has passed since
 * it took the lock; the insert itself then has the other two thirds, two
 * op_timeout_ms (server selection, then the socket timeout), to land.  A
 * server that applies a write long after the client gave up is the
 * residual risk (NEEDSWORK: a fencing token checked by the insert would
 * close it).  The TTL is wall-clock time compared across nodes: their
 * clocks must agree to well under a third of it (NTP does).
 *
 * A lock insert that fails after the server applied it (wtimeout, the
 * connection lost before the reply) leaves our lock behind too; it goes
 * stale the same way.
 *
 * Locks we lost track of.  When the server goes away while we hold a lock
 * (or while our lock insert is in flight), the release fails too, and
 * that scope's next quota insert after the server is back would wait
 * LOCK_WAIT_MS and answer 503 until the lock goes stale: every retried
 * upload of that user fails for up to the TTL after an outage.  So the
 * store remembers such locks (up to LOST_LOCKS_MAX; past that they go
 * stale) and deletes them by _id and owner before its next quota insert;
 * a delete that fails again keeps the entry.  A lock left by another node
 * or a dead process still waits out its TTL.
 *
 * Write concern and FerretDB.  mongo.c sets w:majority (wtimeout =
 * op_timeout_ms) and retryWrites=true on the URI unless it sets them.
 * What FerretDB 1.24.2 (SQLite handler) does with them, tried by hand:
 *  - writeConcern is accepted and ignored on insert, update, delete,
 *    findAndModify and createIndexes (even {w: 5}); it is one node, so an
 *    acknowledged write is as durable as its backend makes it.
 *  - hello names no replica set (standalone) but advertises
 *    logicalSessionTimeoutMinutes, so the driver sends implicit sessions
 *    and does not retry writes (retryWrites is accepted, unused); it has
 *    no endSessions (mongo.c mutes the driver's warning about that).
 *  - no transactions, hence the lock above; TTL indexes
 *    (expireAfterSeconds) are not implemented, so stale locks are reaped
 *    by contenders, not by the server.
 *  - unique indexes work (duplicate key is code 11000), as do
 *    findAndModify with remove, two-key sorts and $or with null.
 *  - a createIndexes listing two or more indexes that all exist already
 *    kills the connection (a panic in FerretDB): we create one index per
 *    command, which is idempotent there too.
 * On a real replica set the same code gets majority-acknowledged writes
 * and one automatic retry of each write across a fail-over.
 *
 * Leases (meta.h).  A lease is a document {_id: <random per holding>,
 * name, owner, expires_at} under a unique index on name.  Acquire inserts
 * a new one: the unique name makes exactly one of several acquirers win
 * (duplicate key is "not acquired").  When the insert meets an existing
 * lease: ours is extended; another holder's unexpired one means no; an
 * expired one is deleted by its _id and the insert is tried again, so of
 * several nodes taking over the same expired lease, one wins the insert.
 * Renew updates our generation by _id and reads it back; release deletes
 * our generation by _id.
 * Why not one findAndModify {_id: name, $or: [expired, ours]} with upsert,
 * which is atomic on MongoDB: FerretDB 1.x runs findAndModify, update and
 * delete as a query followed by writes by _id (FerretDB issue #3040), so
 * two nodes taking over the same expired lease both "won" (every time in
 * a test of 8 contenders), and a delete or update found before a takeover
 * would hit the new holder's document had it the same _id.  Inserts
 * against a unique index and writes to an _id that is never reused stay
 * exact there.  The remaining window: a holder whose lease expired mid-run
 * and was taken over may see one more renewal succeed if the takeover
 * lands between its update and its read-back; it finds out at the next
 * renewal.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "mongo_internal.h"

#include "../service/common/log.h"

#define COLL_FILES "user_files"
#define COLL_KEYS "api_keys"
#define COLL_LOCKS "quota_locks"
#define COLL_LEASES "leases"

#define LOCK_TTL_MIN_MS 10000 /* a dead holder's lock is stale after this */
#define LOCK_WAIT_MS 5000     /* wait this long for a busy lock, then 503 */
#define LOCK_BACKOFF_MAX_MS 50
#define LOST_LOCKS_MAX 64 /* our locks whose release is still owed */

/* A quota lock of ours that may still be in the store although we no
 * longer hold it (see "Locks we lost track of" at the top). */
struct lost_lock {
    char id[IPD_TENANT_MAX + IPD_USER_ID_MAX + 1];
    char owner[33];
};

struct meta_mongo {
    struct ipd_meta base;    /* first: the dispatcher casts */
    struct ipd_mongo *mg;    /* borrowed: outlives the store */
    pthread_mutex_t lost_mu; /* guards lost[] and n_lost */
    struct lost_lock lost[LOST_LOCKS_MAX];
    size_t n_lost;
};

/* A pooled client and one collection on it, for one operation. */
struct op {
    mongoc_client_t *c;        /* popped; pushed back by op_end */
    mongoc_collection_t *coll; /* owned */
};

static void op_begin(struct meta_mongo *s, const char *name, struct op *op)
{
    op->c = ipd__mongo_pop(s->mg);
    op->coll = mongoc_client_get_collection(op->c, s->mg->db, name);
}

/* Safe on a zeroed op. */
static void op_end(struct meta_mongo *s, struct op *op)
{
    mongoc_collection_destroy(op->coll);
    ipd__mongo_push(s->mg, op->c);
    op->coll = NULL;
    op->c = NULL;
}

/* ---- encoding ---------------------------------------------------------- */

/* Append a NUL-terminated string held in a cap-byte field; a field that
 * fills its array without a NUL is a caller bug. */
static enum ipd_err put_str(bson_t *b, const char *key, const char *v,
                            size_t cap)
{
    size_t n = strnlen(v, cap);

    if (n == cap || n > INT32_MAX) {
        ipd_error("meta_mongo: field %s: not NUL-terminated", key);
        return IPD_ERR_INTERNAL;
    }
    bson_append_utf8(b, key, -1, v, (int)n);
    return IPD_OK;
}

static enum ipd_err file_to_doc(const struct ipd_file_meta *f, bson_t *b)
{
    enum ipd_err rc;

    rc = put_str(b, "file_id", f->file_id, sizeof(f->file_id));
    if (!rc)
        rc = put_str(b, "tenant", f->tenant, sizeof(f->tenant));
    if (!rc)
        rc = put_str(b, "user_id", f->user_id, sizeof(f->user_id));
    if (!rc)
        rc = put_str(b, "filename", f->filename, sizeof(f->filename));
    if (rc)
        goto out;
    BSON_APPEND_INT64(b, "file_size", f->size);
    rc = put_str(b, "file_type", f->file_type, sizeof(f->file_type));
    if (!rc)
        rc = put_str(b, "mime_type", f->mime_type, sizeof(f->mime_type));
    if (!rc)
        rc = put_str(b, "sha256", f->sha256, sizeof(f->sha256));
    if (!rc)
        rc = put_str(b, "source", f->source, sizeof(f->source));
    if (!rc)
        rc = put_str(b, "blob", f->blob, sizeof(f->blob));
    if (rc)
        goto out;
    BSON_APPEND_DATE_TIME(b, "uploaded_at", f->created_at_ms);
    if (f->expires_at_ms == IPD_TIME_NEVER)
        BSON_APPEND_NULL(b, "expires_at");
    else
        BSON_APPEND_DATE_TIME(b, "expires_at", f->expires_at_ms);
out:
    return rc;
}

static enum ipd_err key_to_doc(const struct ipd_key *k, bson_t *b)
{
    enum ipd_err rc;

    rc = put_str(b, "key_id", k->key_id, sizeof(k->key_id));
    if (!rc)
        rc = put_str(b, "tenant", k->tenant, sizeof(k->tenant));
    if (!rc)
        rc = put_str(b, "hash", k->hash, sizeof(k->hash));
    if (rc)
        goto out;
    BSON_APPEND_BOOL(b, "admin", k->admin);
    BSON_APPEND_DATE_TIME(b, "created_at", k->created_at_ms);
    if (k->revoked_at_ms == 0)
        BSON_APPEND_NULL(b, "revoked_at");
    else
        BSON_APPEND_DATE_TIME(b, "revoked_at", k->revoked_at_ms);
    rc = put_str(b, "secret", k->secret, sizeof(k->secret));
    if (!rc)
        rc = put_str(b, "policy", k->policy, sizeof(k->policy));
    if (!rc)
        rc = put_str(b, "prev_secret", k->prev_secret, sizeof(k->prev_secret));
    if (rc)
        goto out;
    if (k->secret_rotated_at_ms == 0)
        BSON_APPEND_NULL(b, "secret_rotated_at");
    else
        BSON_APPEND_DATE_TIME(b, "secret_rotated_at", k->secret_rotated_at_ms);
out:
    return rc;
}

/* ---- decoding: a missing, mistyped or oversized field is a corrupt or
 * foreign document, IPD_ERR_INTERNAL, never an overflow. ------------------ */

static enum ipd_err bad_field(const char *key, const char *why)
{
    ipd_error("meta_mongo: field %s: %s", key, why);
    return IPD_ERR_INTERNAL;
}

static enum ipd_err get_str(const bson_t *d, const char *key, char *dst,
                            size_t cap)
{
    bson_iter_t it;
    const char *v;
    uint32_t n = 0;

    if (!bson_iter_init_find(&it, d, key))
        return bad_field(key, "missing");
    if (!BSON_ITER_HOLDS_UTF8(&it))
        return bad_field(key, "not a string");
    v = bson_iter_utf8(&it, &n);
    if ((size_t)n >= cap)
        return bad_field(key, "too long");
    if (memchr(v, '\0', n))
        return bad_field(key, "embedded NUL");
    memcpy(dst, v, n);
    dst[n] = '\0';
    return IPD_OK;
}

/* An integer stored as int32, int64, or (mongosh's default) an integral
 * double. */
static enum ipd_err get_i64(const bson_t *d, const char *key, int64_t *out)
{
    bson_iter_t it;
    double v;

    if (!bson_iter_init_find(&it, d, key))
        return bad_field(key, "missing");
    if (BSON_ITER_HOLDS_INT32(&it) || BSON_ITER_HOLDS_INT64(&it)) {
        *out = bson_iter_as_int64(&it);
        return IPD_OK;
    }
    if (!BSON_ITER_HOLDS_DOUBLE(&it))
        return bad_field(key, "not an integer");
    v = bson_iter_double(&it);
    if (!(v >= -9007199254740992.0 && v <= 9007199254740992.0) ||
        v != (double)(int64_t)v)
        return bad_field(key, "not an integer");
    *out = (int64_t)v;
    return IPD_OK;
}

/* A date; with null_ok, null (or NULL_VALUE) gives *out = if_null. */
static enum ipd_err get_date(const bson_t *d, const char *key, bool null_ok,
                             int64_t if_null, int64_t *out)
{
    bson_iter_t it;

    if (!bson_iter_init_find(&it, d, key))
        return bad_field(key, "missing");
    if (null_ok && BSON_ITER_HOLDS_NULL(&it)) {
        *out = if_null;
        return IPD_OK;
    }
    if (!BSON_ITER_HOLDS_DATE_TIME(&it))
        return bad_field(key, "not a date");
    *out = bson_iter_date_time(&it);
    return IPD_OK;
}

static enum ipd_err doc_to_file(const bson_t *d, struct ipd_file_meta *f)
{
    enum ipd_err rc;

    memset(f, 0, sizeof(*f));
    rc = get_str(d, "file_id", f->file_id, sizeof(f->file_id));
    if (!rc)
        rc = get_str(d, "tenant", f->tenant, sizeof(f->tenant));
    if (!rc)
        rc = get_str(d, "user_id", f->user_id, sizeof(f->user_id));
    if (!rc)
        rc = get_str(d, "filename", f->filename, sizeof(f->filename));
    if (!rc)
        rc = get_i64(d, "file_size", &f->size);
    if (!rc)
        rc = get_str(d, "file_type", f->file_type, sizeof(f->file_type));
    if (!rc)
        rc = get_str(d, "mime_type", f->mime_type, sizeof(f->mime_type));
    if (!rc)
        rc = get_str(d, "sha256", f->sha256, sizeof(f->sha256));
    if (!rc)
        rc = get_str(d, "source", f->source, sizeof(f->source));
    if (!rc)
        rc = get_str(d, "blob", f->blob, sizeof(f->blob));
    if (!rc)
        rc = get_date(d, "uploaded_at", false, 0, &f->created_at_ms);
    if (!rc)
        rc = get_date(d, "expires_at", true, IPD_TIME_NEVER, &f->expires_at_ms);
    return rc;
}

static enum ipd_err doc_to_key(const bson_t *d, struct ipd_key *k)
{
    bson_iter_t it;
    enum ipd_err rc;

    memset(k, 0, sizeof(*k));
    rc = get_str(d, "key_id", k->key_id, sizeof(k->key_id));
    if (!rc)
        rc = get_str(d, "tenant", k->tenant, sizeof(k->tenant));
    if (!rc)
        rc = get_str(d, "hash", k->hash, sizeof(k->hash));
    if (!rc)
        rc = get_str(d, "secret", k->secret, sizeof(k->secret));
    if (!rc)
        rc = get_date(d, "created_at", false, 0, &k->created_at_ms);
    if (!rc)
        rc = get_date(d, "revoked_at", true, 0, &k->revoked_at_ms);
    if (rc)
        goto out;
    if (!bson_iter_init_find(&it, d, "admin") || !BSON_ITER_HOLDS_BOOL(&it)) {
        rc = bad_field("admin", "missing or not a bool");
        goto out;
    }
    k->admin = bson_iter_bool(&it);
    /* Keys written before policies existed have none: the default. */
    if (bson_iter_init_find(&it, d, "policy"))
        rc = get_str(d, "policy", k->policy, sizeof(k->policy));
    else
        memcpy(k->policy, "standard", sizeof("standard"));
    /* Keys written before rotation existed: never rotated. */
    if (!rc && bson_iter_init_find(&it, d, "prev_secret"))
        rc = get_str(d, "prev_secret", k->prev_secret, sizeof(k->prev_secret));
    if (!rc && bson_iter_init_find(&it, d, "secret_rotated_at"))
        rc =
            get_date(d, "secret_rotated_at", true, 0, &k->secret_rotated_at_ms);
out:
    return rc;
}

/* ---- filters ----------------------------------------------------------- */

/* Append {$or: [{expires_at: null}, {expires_at: {$gt: now}}]} to b.  The
 * null branch also matches a document without expires_at, which then
 * fails to decode (IPD_ERR_INTERNAL) rather than vanish silently. */
static void append_unexpired(bson_t *b, int64_t now_ms)
{
    bson_t arr, d, cmp;

    bson_append_array_begin(b, "$or", -1, &arr);
    bson_append_document_begin(&arr, "0", -1, &d);
    BSON_APPEND_NULL(&d, "expires_at");
    bson_append_document_end(&arr, &d);
    bson_append_document_begin(&arr, "1", -1, &d);
    bson_append_document_begin(&d, "expires_at", -1, &cmp);
    BSON_APPEND_DATE_TIME(&cmp, "$gt", now_ms);
    bson_append_document_end(&d, &cmp);
    bson_append_document_end(&arr, &d);
    bson_append_array_end(b, &arr);
}

/* {tenant, user_id, <unexpired>} into an empty b; user_id NULL: the
 * whole tenant's. */
static void scope_filter(bson_t *b, const char *tenant, const char *user_id,
                         int64_t now_ms)
{
    BSON_APPEND_UTF8(b, "tenant", tenant);
    if (user_id)
        BSON_APPEND_UTF8(b, "user_id", user_id);
    append_unexpired(b, now_ms);
}

/* {file_id, tenant, user_id, <unexpired>} into an empty b. */
static void file_filter(bson_t *b, const char *tenant, const char *user_id,
                        const char *file_id, int64_t now_ms)
{
    BSON_APPEND_UTF8(b, "file_id", file_id);
    scope_filter(b, tenant, user_id, now_ms);
}

/* Rows to ask for: limit + 1 reveals whether another page follows.  0 is
 * "no limit" to MongoDB. */
static int64_t fetch_limit(size_t limit)
{
    if (limit >= (size_t)INT64_MAX)
        return 0;
    return (int64_t)limit + 1;
}

/* ---- queries ----------------------------------------------------------- */

/* Run find(filter, opts) on coll and convert up to limit documents into
 * a growing array of elem-sized items (*items, *n); one more sets *more.
 * On failure the array is freed.  The array grows with the documents
 * actually returned, not with the limit the caller asked for. */
static enum ipd_err collect(mongoc_collection_t *coll, const bson_t *filter,
                            const bson_t *opts, size_t limit, size_t elem,
                            enum ipd_err (*conv)(const bson_t *, void *),
                            const char *what, void **items, size_t *n,
                            bool *more)
{
    mongoc_cursor_t *cur =
        mongoc_collection_find_with_opts(coll, filter, opts, NULL);
    const bson_t *doc;
    bson_error_t err;
    size_t alloc = 0;
    enum ipd_err rc = IPD_OK;

    while (mongoc_cursor_next(cur, &doc)) {
        if (*n == limit) {
            if (more)
                *more = true;
            break;
        }
        if (*n == alloc) {
            alloc = alloc ? alloc * 2 : 16;
            *items = ipd_xrealloc(*items, alloc * elem);
        }
        rc = conv(doc, (char *)*items + *n * elem);
        if (rc)
            goto out;
        (*n)++;
    }
    if (mongoc_cursor_error(cur, &err))
        rc = ipd__mongo_err(&err, what);
out:
    if (rc) {
        free(*items);
        *items = NULL;
        *n = 0;
    }
    mongoc_cursor_destroy(cur);
    return rc;
}

static enum ipd_err conv_file(const bson_t *d, void *out)
{
    return doc_to_file(d, out);
}

static enum ipd_err conv_key(const bson_t *d, void *out)
{
    return doc_to_key(d, out);
}

/* The first document of coll matching filter, converted into *out (elem
 * bytes); IPD_ERR_NOT_FOUND when none matches. */
static enum ipd_err find_one(struct meta_mongo *s, const char *coll,
                             const bson_t *filter, size_t elem,
                             enum ipd_err (*conv)(const bson_t *, void *),
                             const char *what, void *out)
{
    struct op op = {0};
    bson_t opts = BSON_INITIALIZER;
    void *items = NULL;
    size_t n = 0;

    BSON_APPEND_INT64(&opts, "limit", 1);
    op_begin(s, coll, &op);
    enum ipd_err rc =
        collect(op.coll, filter, &opts, 1, elem, conv, what, &items, &n, NULL);
    if (!rc && !n)
        rc = IPD_ERR_NOT_FOUND;
    if (!rc)
        memcpy(out, items, elem);
    free(items);
    op_end(s, &op);
    bson_destroy(&opts);
    return rc;
}

/* Up to limit files into out; one more sets out->more. */
static enum ipd_err collect_files(mongoc_collection_t *coll,
                                  const bson_t *filter, const bson_t *opts,
                                  size_t limit, const char *what,
                                  struct ipd_file_list *out)
{
    void *items = out->items;
    enum ipd_err rc = collect(coll, filter, opts, limit, sizeof(*out->items),
                              conv_file, what, &items, &out->n, &out->more);
    out->items = items;
    if (rc)
        out->more = false;
    return rc;
}

/* Count the documents matching filter and sum their file_size, in C: the
 * server's $sum would turn an int64 overflow into a double.  Saturates at
 * INT64_MAX, which is over any byte quota. */
static enum ipd_err sum_sizes(mongoc_collection_t *coll, const bson_t *filter,
                              const char *what, int64_t *count, int64_t *bytes)
{
    bson_t opts = BSON_INITIALIZER, proj;
    mongoc_cursor_t *cur = NULL;
    const bson_t *doc;
    bson_error_t err;
    int64_t n = 0, sum = 0, size;
    enum ipd_err rc = IPD_OK;

    bson_append_document_begin(&opts, "projection", -1, &proj);
    BSON_APPEND_INT32(&proj, "_id", 0);
    BSON_APPEND_INT32(&proj, "file_size", 1);
    bson_append_document_end(&opts, &proj);
    cur = mongoc_collection_find_with_opts(coll, filter, &opts, NULL);
    while (mongoc_cursor_next(cur, &doc)) {
        rc = get_i64(doc, "file_size", &size);
        if (rc)
            goto out;
        n++;
        if (size < 0 || sum > INT64_MAX - size)
            sum = INT64_MAX;
        else
            sum += size;
    }
    if (mongoc_cursor_error(cur, &err)) {
        rc = ipd__mongo_err(&err, what);
        goto out;
    }
    *count = n;
    *bytes = sum;
out:
    mongoc_cursor_destroy(cur);
    bson_destroy(&opts);
    return rc;
}

/* ---- the per-scope quota lock (see the top) ---------------------------- */

static void sleep_ms(int64_t ms)
{
    struct timespec ts = {.tv_sec = (time_t)(ms / 1000),
                          .tv_nsec = (long)(ms % 1000) * 1000000L};

    nanosleep(&ts, NULL);
}

/* Remember a lock of ours that may still be in the store.  Past
 * LOST_LOCKS_MAX it is only logged: it goes stale after the TTL. */
static void lost_add(struct meta_mongo *s, const char *id, const char *owner)
{
    bool kept = false;

    pthread_mutex_lock(&s->lost_mu);
    if (s->n_lost < LOST_LOCKS_MAX) {
        struct lost_lock *l = &s->lost[s->n_lost++];
        /* Bounded: gcc -O3 cannot see that a re-added id fits. */
        snprintf(l->id, sizeof(l->id), "%.*s", (int)sizeof(l->id) - 1, id);
        snprintf(l->owner, sizeof(l->owner), "%.*s", (int)sizeof(l->owner) - 1,
                 owner);
        kept = true;
    }
    pthread_mutex_unlock(&s->lost_mu);
    if (!kept)
        ipd_warn("meta_mongo: quota lock of %s may stay until it goes "
                 "stale",
                 id);
}

/* Delete the scope's lock if its holder let it expire.  [out] *deleted */
static enum ipd_err lock_reap(mongoc_collection_t *locks, const char *id,
                              bool *deleted)
{
    bson_t filter = BSON_INITIALIZER, cmp, reply = BSON_INITIALIZER;
    bson_error_t err;
    bson_iter_t it;
    enum ipd_err rc = IPD_OK;

    *deleted = false;
    BSON_APPEND_UTF8(&filter, "_id", id);
    bson_append_document_begin(&filter, "expires_at", -1, &cmp);
    BSON_APPEND_DATE_TIME(&cmp, "$lt", ipd_now_ms());
    bson_append_document_end(&filter, &cmp);
    bson_destroy(&reply);
    if (!mongoc_collection_delete_one(locks, &filter, NULL, &reply, &err)) {
        rc = ipd__mongo_err(&err, "quota lock reap");
        goto out;
    }
    if (bson_iter_init_find(&it, &reply, "deletedCount") &&
        bson_iter_as_int64(&it) > 0) {
        ipd_warn("meta_mongo: took over the stale quota lock of %s", id);
        *deleted = true;
    }
out:
    bson_destroy(&reply);
    bson_destroy(&filter);
    return rc;
}

/* Take the lock id for owner, waiting up to LOCK_WAIT_MS. */
static enum ipd_err lock_take(struct meta_mongo *s, mongoc_collection_t *locks,
                              const char *id, const char *owner, int64_t ttl_ms)
{
    int64_t deadline = ipd_mono_ms() + LOCK_WAIT_MS;
    int64_t backoff = 1;
    bson_error_t err;
    enum ipd_err rc;
    bool reaped;

    for (;;) {
        bson_t doc = BSON_INITIALIZER;
        uint32_t jitter;
        bool ok;

        BSON_APPEND_UTF8(&doc, "_id", id);
        BSON_APPEND_UTF8(&doc, "owner", owner);
        BSON_APPEND_DATE_TIME(&doc, "expires_at", ipd_now_ms() + ttl_ms);
        ok = mongoc_collection_insert_one(locks, &doc, NULL, NULL, &err);
        bson_destroy(&doc);
        if (ok) {
            rc = IPD_OK;
            break;
        }
        rc = ipd__mongo_err(&err, "quota lock");
        if (rc != IPD_ERR_CONFLICT) {
            lost_add(s, id, owner); /* the insert may have landed */
            break;
        }
        rc = lock_reap(locks, id, &reaped);
        if (rc)
            break;
        if (reaped)
            continue;
        if (ipd_mono_ms() >= deadline) {
            ipd_warn("meta_mongo: quota lock of %s busy for %d ms", id,
                     LOCK_WAIT_MS);
            rc = IPD_ERR_UNAVAILABLE;
            break;
        }
        /* Jitter spreads the contenders so they don't retry in step. */
        ipd_random_bytes(&jitter, sizeof(jitter));
        sleep_ms(backoff / 2 + (int64_t)(jitter % (uint32_t)(backoff + 1)));
        backoff = backoff * 2 > LOCK_BACKOFF_MAX_MS ? LOCK_BACKOFF_MAX_MS
                                                    : backoff * 2;
    }
    return rc;
}

/* Delete our lock (by _id and owner: never one taken over).  false when
 * the store did not answer. */
static bool lock_delete(mongoc_collection_t *locks, const char *id,
                        const char *owner)
{
    bson_t filter = BSON_INITIALIZER;
    bson_error_t err;
    bool ok;

    BSON_APPEND_UTF8(&filter, "_id", id);
    BSON_APPEND_UTF8(&filter, "owner", owner);
    ok = mongoc_collection_delete_one(locks, &filter, NULL, NULL, &err);
    if (!ok)
        ipd__mongo_err(&err, "quota lock release");
    bson_destroy(&filter);
    return ok;
}

/* Release our lock; when that fails it is remembered and released before
 * the next quota insert (see the top). */
static void lock_drop(struct meta_mongo *s, mongoc_collection_t *locks,
                      const char *id, const char *owner)
{
    if (!lock_delete(locks, id, owner))
        lost_add(s, id, owner);
}

/* Delete the locks we lost track of; those whose delete fails stay. */
static void lost_release(struct meta_mongo *s, mongoc_collection_t *locks)
{
    struct lost_lock todo[LOST_LOCKS_MAX];
    size_t n;

    pthread_mutex_lock(&s->lost_mu);
    n = s->n_lost;
    memcpy(todo, s->lost, n * sizeof(todo[0]));
    s->n_lost = 0;
    pthread_mutex_unlock(&s->lost_mu);
    for (size_t i = 0; i < n; i++) {
        if (lock_delete(locks, todo[i].id, todo[i].owner))
            ipd_info("meta_mongo: released the quota lock of %s left by "
                     "an outage",
                     todo[i].id);
        else
            lost_add(s, todo[i].id, todo[i].owner);
    }
}

/* IPD_ERR_QUOTA when adding f would take the scope (user_id NULL: the
 * tenant's) past the limits of q. */
static enum ipd_err scope_check(mongoc_collection_t *files,
                                const struct ipd_file_meta *f,
                                const char *user_id, const struct ipd_quota *q,
                                int64_t now_ms)
{
    bson_t filter = BSON_INITIALIZER;
    int64_t count = 0, bytes = 0;
    enum ipd_err rc;

    scope_filter(&filter, f->tenant, user_id, now_ms);
    rc = sum_sizes(files, &filter, "quota usage", &count, &bytes);
    if (!rc && ipd_quota_exceeded(q, count, bytes, f->size))
        rc = IPD_ERR_QUOTA;
    bson_destroy(&filter);
    return rc;
}

/* A user limit on q. */
static bool user_limits(const struct ipd_quota *q)
{
    return q->max_files >= 0 || q->max_bytes >= 0;
}

/* IPD_ERR_QUOTA when adding f would take the user's scope or the
 * tenant's past q. */
static enum ipd_err quota_check(mongoc_collection_t *files,
                                const struct ipd_file_meta *f,
                                const struct ipd_quota *q, int64_t now_ms)
{
    enum ipd_err rc = IPD_OK;

    if (user_limits(q))
        rc = scope_check(files, f, f->user_id, q, now_ms);
    if (!rc && ipd_quota_limits_tenant(q))
        rc = scope_check(files, f, NULL, q->tenant, now_ms);
    return rc;
}

static enum ipd_err insert_doc(mongoc_collection_t *coll, const bson_t *doc,
                               const char *what)
{
    bson_error_t err;

    if (!mongoc_collection_insert_one(coll, doc, NULL, NULL, &err))
        return ipd__mongo_err(&err, what);
    return IPD_OK;
}

/* Check q and insert doc (f's record) while holding the scopes' locks:
 * the tenant's (with a tenant limit), then the user's (with a user
 * limit). */
static enum ipd_err insert_with_quota(struct meta_mongo *s, struct op *op,
                                      const struct ipd_file_meta *f,
                                      const bson_t *doc,
                                      const struct ipd_quota *q, int64_t now_ms)
{
    mongoc_collection_t *locks = NULL;
    char id[IPD_TENANT_MAX + IPD_USER_ID_MAX + 1];
    char tid[IPD_TENANT_MAX];
    char owner[33];
    unsigned char raw[16];
    int64_t ttl = 3 * s->mg->op_timeout_ms;
    int64_t taken = 0;
    bool held = false, theld = false;
    enum ipd_err rc = IPD_OK;

    snprintf(id, sizeof(id), "%s/%s", f->tenant, f->user_id);
    snprintf(tid, sizeof(tid), "%s", f->tenant);
    ipd_random_bytes(raw, sizeof(raw));
    ipd_hex(raw, sizeof(raw), owner);
    if (ttl < LOCK_TTL_MIN_MS)
        ttl = LOCK_TTL_MIN_MS;
    locks = mongoc_client_get_collection(op->c, s->mg->db, COLL_LOCKS);
    lost_release(s, locks);
    /* A third of the TTL counts from the first lock taken: it is the
     * first to go stale. */
    if (ipd_quota_limits_tenant(q)) {
        rc = lock_take(s, locks, tid, owner, ttl);
        theld = !rc;
        taken = ipd_mono_ms();
    }
    if (!rc && user_limits(q)) {
        rc = lock_take(s, locks, id, owner, ttl);
        held = !rc;
        if (!theld)
            taken = ipd_mono_ms();
    }
    if (rc)
        goto out;
    rc = quota_check(op->coll, f, q, now_ms);
    if (rc)
        goto out;
    /* Leave the insert time to land before contenders may take the lock
     * over as stale (see the top). */
    if (ipd_mono_ms() - taken > ttl / 3) {
        ipd_warn("meta_mongo: quota lock of %s held too long; giving up", id);
        rc = IPD_ERR_UNAVAILABLE;
        goto out;
    }
    rc = insert_doc(op->coll, doc, "file_insert");
out:
    if (held)
        lock_drop(s, locks, id, owner);
    if (theld)
        lock_drop(s, locks, tid, owner);
    mongoc_collection_destroy(locks);
    return rc;
}

/* ---- ops --------------------------------------------------------------- */

static enum ipd_err mg_ping(struct ipd_meta *m)
{
    struct meta_mongo *s = (struct meta_mongo *)m;

    return ipd_mongo_ping(s->mg);
}

static enum ipd_err mg_gate(struct ipd_meta *m)
{
    return ipd_mongo_gate(((struct meta_mongo *)m)->mg);
}

static enum ipd_err mg_file_insert(struct ipd_meta *m,
                                   const struct ipd_file_meta *f,
                                   const struct ipd_quota *quota,
                                   int64_t now_ms)
{
    struct meta_mongo *s = (struct meta_mongo *)m;
    struct op op = {0};
    bson_t doc = BSON_INITIALIZER;
    enum ipd_err rc;

    rc = file_to_doc(f, &doc);
    if (rc)
        goto out;
    op_begin(s, COLL_FILES, &op);
    if (ipd_quota_limits(quota))
        rc = insert_with_quota(s, &op, f, &doc, quota, now_ms);
    else
        rc = insert_doc(op.coll, &doc, "file_insert");
out:
    op_end(s, &op);
    bson_destroy(&doc);
    return rc;
}

static enum ipd_err mg_file_get(struct ipd_meta *m, const char *tenant,
                                const char *user_id, const char *file_id,
                                int64_t now_ms, struct ipd_file_meta *out)
{
    bson_t filter = BSON_INITIALIZER;
    file_filter(&filter, tenant, user_id, file_id, now_ms);
    enum ipd_err rc = find_one((struct meta_mongo *)m, COLL_FILES, &filter,
                               sizeof(*out), conv_file, "file_get", out);
    bson_destroy(&filter);
    return rc;
}

/* {sort: {<k1>: dir, <k2>: dir}, limit: fetch_limit(limit)} into empty b. */
static void sort_limit_opts(bson_t *b, const char *k1, const char *k2,
                            int32_t dir, size_t limit)
{
    bson_t sort;

    bson_append_document_begin(b, "sort", -1, &sort);
    BSON_APPEND_INT32(&sort, k1, dir);
    BSON_APPEND_INT32(&sort, k2, dir);
    bson_append_document_end(b, &sort);
    BSON_APPEND_INT64(b, "limit", fetch_limit(limit));
}

/* Append the records strictly after c in (uploaded_at desc, file_id desc)
 * order: {$or: [{uploaded_at: {$lt: t}},
 *               {uploaded_at: t, file_id: {$lt: id}}]}. */
static void append_after(bson_t *b, const struct ipd_cursor *c)
{
    bson_t or, br, cmp;

    bson_append_array_begin(b, "$or", -1, & or);
    bson_append_document_begin(& or, "0", -1, &br);
    bson_append_document_begin(&br, "uploaded_at", -1, &cmp);
    BSON_APPEND_DATE_TIME(&cmp, "$lt", c->created_at_ms);
    bson_append_document_end(&br, &cmp);
    bson_append_document_end(& or, &br);
    bson_append_document_begin(& or, "1", -1, &br);
    BSON_APPEND_DATE_TIME(&br, "uploaded_at", c->created_at_ms);
    bson_append_document_begin(&br, "file_id", -1, &cmp);
    BSON_APPEND_UTF8(&cmp, "$lt", c->id);
    bson_append_document_end(&br, &cmp);
    bson_append_document_end(& or, &br);
    bson_append_array_end(b, & or);
}

static enum ipd_err mg_file_list(struct ipd_meta *m, const char *tenant,
                                 const char *user_id, int64_t now_ms,
                                 const struct ipd_cursor *after, size_t limit,
                                 struct ipd_file_list *out)
{
    struct meta_mongo *s = (struct meta_mongo *)m;
    struct op op = {0};
    bson_t filter = BSON_INITIALIZER, opts = BSON_INITIALIZER;
    bson_t and, d;
    enum ipd_err rc;

    memset(out, 0, sizeof(*out));
    BSON_APPEND_UTF8(&filter, "tenant", tenant);
    BSON_APPEND_UTF8(&filter, "user_id", user_id);
    if (!after) {
        append_unexpired(&filter, now_ms);
    } else {
        /* Two $or clauses can't share one document: $and them. */
        bson_append_array_begin(&filter, "$and", -1, &and);
        bson_append_document_begin(&and, "0", -1, &d);
        append_unexpired(&d, now_ms);
        bson_append_document_end(&and, &d);
        bson_append_document_begin(&and, "1", -1, &d);
        append_after(&d, after);
        bson_append_document_end(&and, &d);
        bson_append_array_end(&filter, &and);
    }
    sort_limit_opts(&opts, "uploaded_at", "file_id", -1, limit);
    op_begin(s, COLL_FILES, &op);
    rc = collect_files(op.coll, &filter, &opts, limit, "file_list", out);
    op_end(s, &op);
    bson_destroy(&opts);
    bson_destroy(&filter);
    return rc;
}

static enum ipd_err mg_file_delete(struct ipd_meta *m, const char *tenant,
                                   const char *user_id, const char *file_id,
                                   int64_t now_ms, struct ipd_file_meta *out)
{
    struct meta_mongo *s = (struct meta_mongo *)m;
    struct op op = {0};
    bson_t filter = BSON_INITIALIZER, reply = BSON_INITIALIZER;
    struct ipd_file_meta rec;
    bson_error_t err;
    bson_iter_t it;
    enum ipd_err rc;

    /* Read the record, then delete_one with the same filter and let the
     * deleted count pick the one winner of concurrent deletes.
     * findAndModify with remove would be one round trip, but FerretDB 1.x
     * runs it as a find and a delete, so two callers could both "win". */
    rc = mg_file_get(m, tenant, user_id, file_id, now_ms, &rec);
    if (rc)
        return rc;
    file_filter(&filter, tenant, user_id, file_id, now_ms);
    op_begin(s, COLL_FILES, &op);
    bson_destroy(&reply);
    if (!mongoc_collection_delete_one(op.coll, &filter, NULL, &reply, &err)) {
        rc = ipd__mongo_err(&err, "file_delete");
        goto out;
    }
    if (!bson_iter_init_find(&it, &reply, "deletedCount") ||
        bson_iter_as_int64(&it) != 1) {
        rc = IPD_ERR_NOT_FOUND;
        goto out;
    }
    if (out)
        *out = rec;
out:
    op_end(s, &op);
    bson_destroy(&reply);
    bson_destroy(&filter);
    return rc;
}

static enum ipd_err mg_file_usage(struct ipd_meta *m, const char *tenant,
                                  const char *user_id, int64_t now_ms,
                                  int64_t *count, int64_t *bytes)
{
    struct meta_mongo *s = (struct meta_mongo *)m;
    struct op op = {0};
    bson_t filter = BSON_INITIALIZER;
    enum ipd_err rc;

    scope_filter(&filter, tenant, user_id, now_ms);
    op_begin(s, COLL_FILES, &op);
    rc = sum_sizes(op.coll, &filter, "file_usage", count, bytes);
    op_end(s, &op);
    bson_destroy(&filter);
    return rc;
}

static enum ipd_err mg_file_list_expired(struct ipd_meta *m, int64_t now_ms,
                                         size_t limit,
                                         struct ipd_file_list *out)
{
    struct meta_mongo *s = (struct meta_mongo *)m;
    struct op op = {0};
    bson_t filter = BSON_INITIALIZER, opts = BSON_INITIALIZER, cmp;
    enum ipd_err rc;

    memset(out, 0, sizeof(*out));
    /* $lte on a date matches dates only (never null: never expires). */
    bson_append_document_begin(&filter, "expires_at", -1, &cmp);
    BSON_APPEND_DATE_TIME(&cmp, "$lte", now_ms);
    bson_append_document_end(&filter, &cmp);
    sort_limit_opts(&opts, "expires_at", "file_id", 1, limit);
    op_begin(s, COLL_FILES, &op);
    rc =
        collect_files(op.coll, &filter, &opts, limit, "file_list_expired", out);
    op_end(s, &op);
    bson_destroy(&opts);
    bson_destroy(&filter);
    return rc;
}

/* delete_one(filter) on coll; IPD_ERR_NOT_FOUND when nothing matched. */
static enum ipd_err delete_one(mongoc_collection_t *coll, const bson_t *filter,
                               const char *what)
{
    bson_t reply = BSON_INITIALIZER;
    bson_error_t err;
    bson_iter_t it;
    enum ipd_err rc = IPD_OK;

    bson_destroy(&reply);
    if (!mongoc_collection_delete_one(coll, filter, NULL, &reply, &err)) {
        rc = ipd__mongo_err(&err, what);
        goto out;
    }
    if (!bson_iter_init_find(&it, &reply, "deletedCount")) {
        rc = bad_field("deletedCount", "missing");
        goto out;
    }
    if (bson_iter_as_int64(&it) == 0)
        rc = IPD_ERR_NOT_FOUND;
out:
    bson_destroy(&reply);
    return rc;
}

static enum ipd_err mg_file_delete_by_id(struct ipd_meta *m,
                                         const char *file_id)
{
    struct meta_mongo *s = (struct meta_mongo *)m;
    struct op op = {0};
    bson_t filter = BSON_INITIALIZER;
    enum ipd_err rc;

    BSON_APPEND_UTF8(&filter, "file_id", file_id);
    op_begin(s, COLL_FILES, &op);
    rc = delete_one(op.coll, &filter, "file_delete_by_id");
    op_end(s, &op);
    bson_destroy(&filter);
    return rc;
}

static enum ipd_err mg_file_totals(struct ipd_meta *m, int64_t now_ms,
                                   int64_t *count, int64_t *bytes)
{
    struct meta_mongo *s = (struct meta_mongo *)m;
    struct op op = {0};
    bson_t filter = BSON_INITIALIZER;
    enum ipd_err rc;

    /* NEEDSWORK: streams one small document per file; an aggregate would
     * do better on a large store, at the price of $sum's overflow to
     * double. */
    append_unexpired(&filter, now_ms);
    op_begin(s, COLL_FILES, &op);
    rc = sum_sizes(op.coll, &filter, "file_totals", count, bytes);
    op_end(s, &op);
    bson_destroy(&filter);
    return rc;
}

static enum ipd_err mg_key_insert(struct ipd_meta *m, const struct ipd_key *k)
{
    struct meta_mongo *s = (struct meta_mongo *)m;
    struct op op = {0};
    bson_t doc = BSON_INITIALIZER;
    enum ipd_err rc;

    rc = key_to_doc(k, &doc);
    if (rc)
        goto out;
    op_begin(s, COLL_KEYS, &op);
    rc = insert_doc(op.coll, &doc, "key_insert");
out:
    op_end(s, &op);
    bson_destroy(&doc);
    return rc;
}

static enum ipd_err mg_key_rotate_secret(struct ipd_meta *m, const char *tenant,
                                         const char *current, const char *next,
                                         int64_t now_ms)
{
    struct meta_mongo *s = (struct meta_mongo *)m;
    struct op op = {0};
    bson_t filter = BSON_INITIALIZER, update = BSON_INITIALIZER, set;
    bson_t reply = BSON_INITIALIZER;
    bson_error_t err;
    bson_iter_t it;
    enum ipd_err rc = IPD_OK;

    /* One updateMany: the keys that still hold `current` (no update
     * pipeline: FerretDB has none, and current is known anyway). */
    BSON_APPEND_UTF8(&filter, "tenant", tenant);
    BSON_APPEND_UTF8(&filter, "secret", current);
    bson_append_document_begin(&update, "$set", -1, &set);
    BSON_APPEND_UTF8(&set, "secret", next);
    BSON_APPEND_UTF8(&set, "prev_secret", current);
    BSON_APPEND_DATE_TIME(&set, "secret_rotated_at", now_ms);
    bson_append_document_end(&update, &set);
    op_begin(s, COLL_KEYS, &op);
    bson_destroy(&reply);
    if (!mongoc_collection_update_many(op.coll, &filter, &update, NULL, &reply,
                                       &err)) {
        rc = ipd__mongo_err(&err, "key_rotate_secret");
        goto out;
    }
    if (!bson_iter_init_find(&it, &reply, "matchedCount"))
        rc = bad_field("matchedCount", "missing");
    else if (bson_iter_as_int64(&it) == 0)
        rc = IPD_ERR_NOT_FOUND;
out:
    op_end(s, &op);
    bson_destroy(&reply);
    bson_destroy(&update);
    bson_destroy(&filter);
    return rc;
}

/* Every key matching filter into out. */
static enum ipd_err collect_keys(mongoc_collection_t *coll,
                                 const bson_t *filter, const bson_t *opts,
                                 const char *what, struct ipd_key_list *out)
{
    void *items = out->items;
    enum ipd_err rc = collect(coll, filter, opts, SIZE_MAX, sizeof(*out->items),
                              conv_key, what, &items, &out->n, NULL);
    out->items = items;
    return rc;
}

/* The one key whose field is value (both unique: key_id, hash). */
static enum ipd_err key_find_by(struct ipd_meta *m, const char *field,
                                const char *value, const char *what,
                                struct ipd_key *out)
{
    bson_t filter = BSON_INITIALIZER;
    BSON_APPEND_UTF8(&filter, field, value);
    enum ipd_err rc = find_one((struct meta_mongo *)m, COLL_KEYS, &filter,
                               sizeof(*out), conv_key, what, out);
    bson_destroy(&filter);
    return rc;
}

static enum ipd_err mg_key_find_by_id(struct ipd_meta *m, const char *key_id,
                                      struct ipd_key *out)
{
    return key_find_by(m, "key_id", key_id, "key_find_by_id", out);
}

static enum ipd_err mg_key_find_by_hash(struct ipd_meta *m, const char *hash,
                                        struct ipd_key *out)
{
    return key_find_by(m, "hash", hash, "key_find_by_hash", out);
}

/* The newest key of tenant holding a secret: sorted like key_list,
 * backwards, the first. */
static enum ipd_err mg_key_find_tenant(struct ipd_meta *m, const char *tenant,
                                       struct ipd_key *out)
{
    struct meta_mongo *s = (struct meta_mongo *)m;
    struct op op = {0};
    bson_t filter = BSON_INITIALIZER, opts = BSON_INITIALIZER, sort, ne;
    struct ipd_key_list got = {0};
    enum ipd_err rc;

    BSON_APPEND_UTF8(&filter, "tenant", tenant);
    bson_append_document_begin(&filter, "secret", -1, &ne);
    BSON_APPEND_UTF8(&ne, "$ne", "");
    bson_append_document_end(&filter, &ne);
    bson_append_document_begin(&opts, "sort", -1, &sort);
    BSON_APPEND_INT32(&sort, "created_at", -1);
    BSON_APPEND_INT32(&sort, "key_id", -1);
    bson_append_document_end(&opts, &sort);
    BSON_APPEND_INT64(&opts, "limit", 1);
    op_begin(s, COLL_KEYS, &op);
    rc = collect_keys(op.coll, &filter, &opts, "key_find_tenant", &got);
    op_end(s, &op);
    if (!rc && !got.n)
        rc = IPD_ERR_NOT_FOUND;
    if (!rc)
        *out = got.items[0];
    ipd_key_list_release(&got);
    bson_destroy(&opts);
    bson_destroy(&filter);
    return rc;
}

static enum ipd_err mg_key_list(struct ipd_meta *m, struct ipd_key_list *out)
{
    struct meta_mongo *s = (struct meta_mongo *)m;
    struct op op = {0};
    bson_t filter = BSON_INITIALIZER, opts = BSON_INITIALIZER, sort;
    enum ipd_err rc;

    memset(out, 0, sizeof(*out));
    bson_append_document_begin(&opts, "sort", -1, &sort);
    BSON_APPEND_INT32(&sort, "created_at", 1);
    BSON_APPEND_INT32(&sort, "key_id", 1);
    bson_append_document_end(&opts, &sort);
    op_begin(s, COLL_KEYS, &op);
    rc = collect_keys(op.coll, &filter, &opts, "key_list", out);
    op_end(s, &op);
    bson_destroy(&opts);
    bson_destroy(&filter);
    return rc;
}

static enum ipd_err mg_key_revoke(struct ipd_meta *m, const char *key_id,
                                  int64_t now_ms)
{
    struct meta_mongo *s = (struct meta_mongo *)m;
    struct op op = {0};
    bson_t filter = BSON_INITIALIZER, update = BSON_INITIALIZER, set;
    bson_t reply = BSON_INITIALIZER;
    bson_error_t err;
    bson_iter_t it;
    int64_t n;
    enum ipd_err rc = IPD_OK;

    /* Only a valid key is updated, so the first revocation time sticks;
     * when nothing matched, the key is either revoked already (OK) or
     * unknown (NOT_FOUND). */
    BSON_APPEND_UTF8(&filter, "key_id", key_id);
    BSON_APPEND_NULL(&filter, "revoked_at");
    bson_append_document_begin(&update, "$set", -1, &set);
    BSON_APPEND_DATE_TIME(&set, "revoked_at", now_ms);
    bson_append_document_end(&update, &set);
    op_begin(s, COLL_KEYS, &op);
    bson_destroy(&reply);
    if (!mongoc_collection_update_one(op.coll, &filter, &update, NULL, &reply,
                                      &err)) {
        rc = ipd__mongo_err(&err, "key_revoke");
        goto out;
    }
    if (!bson_iter_init_find(&it, &reply, "matchedCount")) {
        rc = bad_field("matchedCount", "missing");
        goto out;
    }
    if (bson_iter_as_int64(&it) > 0)
        goto out;
    bson_reinit(&filter);
    BSON_APPEND_UTF8(&filter, "key_id", key_id);
    n = mongoc_collection_count_documents(op.coll, &filter, NULL, NULL, NULL,
                                          &err);
    if (n < 0) {
        rc = ipd__mongo_err(&err, "key_revoke count");
        goto out;
    }
    if (n == 0)
        rc = IPD_ERR_NOT_FOUND;
out:
    op_end(s, &op);
    bson_destroy(&reply);
    bson_destroy(&update);
    bson_destroy(&filter);
    return rc;
}

static enum ipd_err mg_file_get_by_id(struct ipd_meta *m, const char *file_id,
                                      struct ipd_file_meta *out)
{
    bson_t filter = BSON_INITIALIZER;
    BSON_APPEND_UTF8(&filter, "file_id", file_id);
    enum ipd_err rc = find_one((struct meta_mongo *)m, COLL_FILES, &filter,
                               sizeof(*out), conv_file, "file_get_by_id", out);
    bson_destroy(&filter);
    return rc;
}

static enum ipd_err mg_file_scan(struct ipd_meta *m, const char *after,
                                 size_t limit, struct ipd_file_list *out)
{
    struct meta_mongo *s = (struct meta_mongo *)m;
    struct op op = {0};
    bson_t filter = BSON_INITIALIZER, opts = BSON_INITIALIZER, cmp, sort;
    enum ipd_err rc;

    memset(out, 0, sizeof(*out));
    /* The unique file_id index gives the order and the start; $gt on a
     * string matches strings only. */
    bson_append_document_begin(&filter, "file_id", -1, &cmp);
    BSON_APPEND_UTF8(&cmp, "$gt", after);
    bson_append_document_end(&filter, &cmp);
    bson_append_document_begin(&opts, "sort", -1, &sort);
    BSON_APPEND_INT32(&sort, "file_id", 1);
    bson_append_document_end(&opts, &sort);
    BSON_APPEND_INT64(&opts, "limit", fetch_limit(limit));
    op_begin(s, COLL_FILES, &op);
    rc = collect_files(op.coll, &filter, &opts, limit, "file_scan", out);
    op_end(s, &op);
    bson_destroy(&opts);
    bson_destroy(&filter);
    return rc;
}

/* The lease document of name (any owner) into *id (its generation's
 * _id), *owner and *expires; IPD_ERR_NOT_FOUND when there is none. */
struct lease_doc {
    char id[33];
    char owner[IPD_LEASE_OWNER_MAX];
    int64_t expires_at_ms;
};

static enum ipd_err conv_lease(const bson_t *d, void *out)
{
    struct lease_doc *l = out;
    enum ipd_err rc = get_str(d, "_id", l->id, sizeof(l->id));
    if (!rc)
        rc = get_str(d, "owner", l->owner, sizeof(l->owner));
    if (!rc)
        rc = get_date(d, "expires_at", false, 0, &l->expires_at_ms);
    return rc;
}

static enum ipd_err lease_find(struct meta_mongo *s, const char *key,
                               const char *value, struct lease_doc *out)
{
    bson_t filter = BSON_INITIALIZER;
    BSON_APPEND_UTF8(&filter, key, value);
    enum ipd_err rc = find_one(s, COLL_LEASES, &filter, sizeof(*out),
                               conv_lease, "lease lookup", out);
    bson_destroy(&filter);
    return rc;
}

/* Set expires_at of the generation id (ours) to until, then read it back:
 * FerretDB answers an update from its query step, so only the read shows
 * whether the write landed on a document that still exists.  [out] *held */
static enum ipd_err lease_extend(struct meta_mongo *s, const char *id,
                                 const char *owner, int64_t until, bool *held)
{
    struct op op = {0};
    bson_t filter = BSON_INITIALIZER, update = BSON_INITIALIZER, set;
    bson_error_t err;
    struct lease_doc now;
    enum ipd_err rc = IPD_OK;

    *held = false;
    BSON_APPEND_UTF8(&filter, "_id", id);
    BSON_APPEND_UTF8(&filter, "owner", owner);
    bson_append_document_begin(&update, "$set", -1, &set);
    BSON_APPEND_DATE_TIME(&set, "expires_at", until);
    bson_append_document_end(&update, &set);
    op_begin(s, COLL_LEASES, &op);
    if (!mongoc_collection_update_one(op.coll, &filter, &update, NULL, NULL,
                                      &err))
        rc = ipd__mongo_err(&err, "lease renew");
    op_end(s, &op);
    if (!rc) {
        rc = lease_find(s, "_id", id, &now);
        if (!rc)
            *held = !strcmp(now.owner, owner) && now.expires_at_ms == until;
        else if (rc == IPD_ERR_NOT_FOUND)
            rc = IPD_OK; /* taken over meanwhile */
    }
    bson_destroy(&update);
    bson_destroy(&filter);
    return rc;
}

/* Insert a new generation of lease name for owner.  IPD_ERR_CONFLICT when
 * a lease of that name exists (the unique index on name). */
static enum ipd_err lease_insert(struct meta_mongo *s, const char *name,
                                 const char *owner, int64_t until)
{
    struct op op = {0};
    bson_t doc = BSON_INITIALIZER;
    unsigned char raw[16];
    char id[33];
    enum ipd_err rc;

    ipd_random_bytes(raw, sizeof(raw));
    ipd_hex(raw, sizeof(raw), id);
    BSON_APPEND_UTF8(&doc, "_id", id);
    BSON_APPEND_UTF8(&doc, "name", name);
    BSON_APPEND_UTF8(&doc, "owner", owner);
    BSON_APPEND_DATE_TIME(&doc, "expires_at", until);
    op_begin(s, COLL_LEASES, &op);
    rc = insert_doc(op.coll, &doc, "lease insert");
    op_end(s, &op);
    bson_destroy(&doc);
    return rc;
}

/* Delete one generation by its _id: ours (expired_at_or_before < 0), or
 * one that has expired by then, checked in the same filter: a holder that
 * renewed it after we read it keeps it.  Gone or not, the caller looks
 * again. */
static enum ipd_err lease_drop(struct meta_mongo *s, const char *id,
                               int64_t expired_at_or_before)
{
    struct op op = {0};
    bson_t filter = BSON_INITIALIZER, cmp;
    enum ipd_err rc;

    BSON_APPEND_UTF8(&filter, "_id", id);
    if (expired_at_or_before >= 0) {
        bson_append_document_begin(&filter, "expires_at", -1, &cmp);
        BSON_APPEND_DATE_TIME(&cmp, "$lte", expired_at_or_before);
        bson_append_document_end(&filter, &cmp);
    }
    op_begin(s, COLL_LEASES, &op);
    rc = delete_one(op.coll, &filter, "lease delete");
    op_end(s, &op);
    bson_destroy(&filter);
    return rc == IPD_ERR_NOT_FOUND ? IPD_OK : rc;
}

#define LEASE_TRIES 4 /* insert, take over, insert again, with a margin */

static enum ipd_err mg_lease_acquire(struct ipd_meta *m, const char *name,
                                     const char *owner, int64_t now_ms,
                                     int64_t ttl_ms, bool *got)
{
    struct meta_mongo *s = (struct meta_mongo *)m;
    struct lease_doc cur;
    enum ipd_err rc = IPD_OK;

    *got = false;
    for (int tries = 0; tries < LEASE_TRIES; tries++) {
        rc = lease_insert(s, name, owner, now_ms + ttl_ms);
        if (rc != IPD_ERR_CONFLICT) {
            *got = !rc;
            break;
        }
        rc = lease_find(s, "name", name, &cur);
        if (rc == IPD_ERR_NOT_FOUND)
            continue; /* released meanwhile: insert again */
        if (rc)
            break;
        if (!strcmp(cur.owner, owner)) {
            rc = lease_extend(s, cur.id, owner, now_ms + ttl_ms, got);
            break;
        }
        if (cur.expires_at_ms > now_ms)
            break; /* another holder's, running */
        /* Expired: drop that generation, then race the others to insert
         * the next one; the unique name lets exactly one win. */
        ipd_info("meta_mongo: lease %s of %s expired; taking it over", name,
                 cur.owner);
        rc = lease_drop(s, cur.id, now_ms);
        if (rc)
            break;
    }
    /* Out of tries while others kept winning: not acquired. */
    if (rc == IPD_ERR_NOT_FOUND || rc == IPD_ERR_CONFLICT)
        rc = IPD_OK;
    return rc;
}

static enum ipd_err mg_lease_renew(struct ipd_meta *m, const char *name,
                                   const char *owner, int64_t now_ms,
                                   int64_t ttl_ms, bool *held)
{
    struct meta_mongo *s = (struct meta_mongo *)m;
    struct lease_doc cur;
    enum ipd_err rc;

    *held = false;
    rc = lease_find(s, "name", name, &cur);
    if (rc == IPD_ERR_NOT_FOUND || (!rc && strcmp(cur.owner, owner)))
        return IPD_OK; /* released, or someone else's now */
    if (rc)
        return rc;
    return lease_extend(s, cur.id, owner, now_ms + ttl_ms, held);
}

static enum ipd_err mg_lease_release(struct ipd_meta *m, const char *name,
                                     const char *owner)
{
    struct meta_mongo *s = (struct meta_mongo *)m;
    struct lease_doc cur;
    enum ipd_err rc;

    rc = lease_find(s, "name", name, &cur);
    if (rc == IPD_ERR_NOT_FOUND || (!rc && strcmp(cur.owner, owner)))
        return IPD_OK;
    if (rc)
        return rc;
    /* By generation: a release can never delete a lease taken over after
     * ours expired, whatever the server does between query and delete. */
    return lease_drop(s, cur.id, -1);
}

/* a goes before b in the tenant list: more bytes, then by name. */
static bool tenant_before(const struct ipd_tenant_usage *a,
                          const struct ipd_tenant_usage *b)
{
    return a->bytes > b->bytes ||
           (a->bytes == b->bytes && strcmp(a->tenant, b->tenant) < 0);
}

/* Offer u to out[0..*n), the best limit so far in that order; *more once
 * one is left out. */
static void tenant_offer(struct ipd_tenant_usage *out, size_t limit, size_t *n,
                         bool *more, const struct ipd_tenant_usage *u)
{
    size_t i = *n;

    if (*n == limit) {
        *more = true;
        if (!limit || !tenant_before(u, &out[limit - 1]))
            return;
        i = limit - 1;
    } else {
        (*n)++;
    }
    for (; i > 0 && tenant_before(u, &out[i - 1]); i--)
        out[i] = out[i - 1];
    out[i] = *u;
}

/* Every unexpired record's tenant and size, in tenant order, summed per
 * tenant in C (exact int64 sums, as sum_sizes); the list keeps the top
 * limit. */
static enum ipd_err mg_tenant_usage(struct ipd_meta *m, int64_t now_ms,
                                    size_t limit, struct ipd_tenant_usage *out,
                                    size_t *n, bool *more)
{
    struct meta_mongo *s = (struct meta_mongo *)m;
    struct op op = {0};
    bson_t filter = BSON_INITIALIZER, opts = BSON_INITIALIZER, proj, sort;
    mongoc_cursor_t *cur = NULL;
    const bson_t *doc;
    bson_error_t err;
    struct ipd_tenant_usage u = {0}, next;
    enum ipd_err rc = IPD_OK;
    int64_t size = 0;

    append_unexpired(&filter, now_ms);
    bson_append_document_begin(&opts, "projection", -1, &proj);
    BSON_APPEND_INT32(&proj, "_id", 0);
    BSON_APPEND_INT32(&proj, "tenant", 1);
    BSON_APPEND_INT32(&proj, "file_size", 1);
    bson_append_document_end(&opts, &proj);
    bson_append_document_begin(&opts, "sort", -1, &sort);
    BSON_APPEND_INT32(&sort, "tenant", 1);
    bson_append_document_end(&opts, &sort);
    op_begin(s, COLL_FILES, &op);
    cur = mongoc_collection_find_with_opts(op.coll, &filter, &opts, NULL);
    while (!rc && mongoc_cursor_next(cur, &doc)) {
        memset(&next, 0, sizeof(next));
        rc = get_str(doc, "tenant", next.tenant, sizeof(next.tenant));
        if (!rc)
            rc = get_i64(doc, "file_size", &size);
        if (rc)
            break;
        if (u.files && strcmp(u.tenant, next.tenant)) {
            tenant_offer(out, limit, n, more, &u);
            memset(&u, 0, sizeof(u));
        }
        memcpy(u.tenant, next.tenant, sizeof(u.tenant));
        u.files++;
        u.bytes =
            size < 0 || u.bytes > INT64_MAX - size ? INT64_MAX : u.bytes + size;
    }
    if (!rc && mongoc_cursor_error(cur, &err))
        rc = ipd__mongo_err(&err, "tenant_usage");
    if (!rc && u.files)
        tenant_offer(out, limit, n, more, &u);
    mongoc_cursor_destroy(cur);
    op_end(s, &op);
    bson_destroy(&opts);
    bson_destroy(&filter);
    return rc;
}

static void mg_free(struct ipd_meta *m)
{
    struct meta_mongo *s = (struct meta_mongo *)m;

    pthread_mutex_destroy(&s->lost_mu);
    free(s);
}

static const struct ipd_meta_ops mongo_ops = {
    .name = "mongodb",
    .free = mg_free,
    .ping = mg_ping,
    .gate = mg_gate,
    .file_insert = mg_file_insert,
    .file_get = mg_file_get,
    .file_list = mg_file_list,
    .file_delete = mg_file_delete,
    .file_usage = mg_file_usage,
    .file_list_expired = mg_file_list_expired,
    .file_delete_by_id = mg_file_delete_by_id,
    .file_totals = mg_file_totals,
    .key_insert = mg_key_insert,
    .key_find_by_hash = mg_key_find_by_hash,
    .key_find_by_id = mg_key_find_by_id,
    .key_list = mg_key_list,
    .key_find_tenant = mg_key_find_tenant,
    .key_revoke = mg_key_revoke,
    .key_rotate_secret = mg_key_rotate_secret,
    .file_get_by_id = mg_file_get_by_id,
    .file_scan = mg_file_scan,
    .lease_acquire = mg_lease_acquire,
    .lease_renew = mg_lease_renew,
    .lease_release = mg_lease_release,
    .tenant_usage = mg_tenant_usage,
};

/* ---- indexes ----------------------------------------------------------- */

/* One index: keys in order, each ascending (1) or descending (-1). */
struct index_def {
    const char *name;
    bool unique;
    const char *fields[4]; /* NULL-terminated unless all 4 are used */
    int32_t dirs[4];
};

/* Create one index on coll with a createIndexes command (a no-op when it
 * exists with the same definition; an error when a different one has its
 * name).  One command per index: FerretDB 1.24 drops the connection
 * (a panic in its handler) on a createIndexes that lists two or more
 * indexes which all exist already, that is on every restart. */
static enum ipd_err create_index(mongoc_database_t *db, const char *coll,
                                 const struct index_def *def)
{
    bson_t cmd = BSON_INITIALIZER, arr, spec, key;
    bson_error_t err;
    enum ipd_err rc = IPD_OK;

    BSON_APPEND_UTF8(&cmd, "createIndexes", coll);
    bson_append_array_begin(&cmd, "indexes", -1, &arr);
    bson_append_document_begin(&arr, "0", -1, &spec);
    bson_append_document_begin(&spec, "key", -1, &key);
    for (size_t j = 0; j < 4 && def->fields[j]; j++)
        BSON_APPEND_INT32(&key, def->fields[j], def->dirs[j]);
    bson_append_document_end(&spec, &key);
    BSON_APPEND_UTF8(&spec, "name", def->name);
    if (def->unique)
        BSON_APPEND_BOOL(&spec, "unique", true);
    bson_append_document_end(&arr, &spec);
    bson_append_array_end(&cmd, &arr);
    if (!mongoc_database_write_command_with_opts(db, &cmd, NULL, NULL, &err))
        rc = ipd__mongo_err(&err, "createIndexes");
    bson_destroy(&cmd);
    return rc;
}

static enum ipd_err create_indexes(mongoc_database_t *db, const char *coll,
                                   const struct index_def *defs, size_t n)
{
    enum ipd_err rc = IPD_OK;

    for (size_t i = 0; i < n && !rc; i++)
        rc = create_index(db, coll, &defs[i]);
    return rc;
}

static const struct index_def file_indexes[] = {
    {"scope_expiry",
     false,
     {"tenant", "user_id", "expires_at", NULL},
     {1, 1, -1, 0}},
    {"scope_order",
     false,
     {"tenant", "user_id", "uploaded_at", "file_id"},
     {1, 1, -1, -1}},
    {"file_id", true, {"file_id", NULL}, {1, 0}},
    {"expiry", false, {"expires_at", NULL}, {1, 0}},
};

static const struct index_def key_indexes[] = {
    {"hash", true, {"hash", NULL}, {1, 0}},
    {"key_id", true, {"key_id", NULL}, {1, 0}},
};

static const struct index_def lease_indexes[] = {
    {"name", true, {"name", NULL}, {1, 0}},
};

enum ipd_err ipd_meta_mongo_exists(struct ipd_mongo *mg, bool *exists)
{
    mongoc_client_t *c = ipd__mongo_pop(mg);
    mongoc_database_t *db = mongoc_client_get_database(c, mg->db);
    bson_error_t err;
    enum ipd_err rc = IPD_OK;

    memset(&err, 0, sizeof(err));
    *exists = mongoc_database_has_collection(db, COLL_KEYS, &err);
    if (!*exists && err.code)
        rc = ipd__mongo_err(&err, "listCollections");
    mongoc_database_destroy(db);
    ipd__mongo_push(mg, c);
    return rc;
}

enum ipd_err ipd_meta_mongo_open(struct ipd_mongo *mg, struct ipd_meta **out)
{
    struct meta_mongo *s = NULL;
    mongoc_client_t *c = NULL;
    mongoc_database_t *db = NULL;
    enum ipd_err rc;

    *out = NULL;
    s = ipd_xcalloc(1, sizeof(*s));
    s->base.ops = &mongo_ops;
    s->mg = mg;
    pthread_mutex_init(&s->lost_mu, NULL);
    c = ipd__mongo_pop(mg);
    db = mongoc_client_get_database(c, mg->db);
    /* createIndexes creates the collection too, and is a no-op for an
     * index that exists with the same definition: opening is idempotent,
     * and several nodes may open at once. */
    rc = create_indexes(db, COLL_FILES, file_indexes,
                        IPD_ARRAY_LEN(file_indexes));
    if (rc)
        goto out;
    rc = create_indexes(db, COLL_KEYS, key_indexes, IPD_ARRAY_LEN(key_indexes));
    if (rc)
        goto out;
    rc = create_indexes(db, COLL_LEASES, lease_indexes,
                        IPD_ARRAY_LEN(lease_indexes));
    if (rc)
        goto out;
    *out = &s->base;
    s = NULL;
out:
    mongoc_database_destroy(db);
    ipd__mongo_push(mg, c);
    if (s)
        mg_free(&s->base);
    return rc;
}
