/*
 * meta.h - the metadata store: file records, API keys and leases.
 *
 * One interface, several backends (meta_sqlite.c today, meta_mongo.c next).
 * Nothing above storage/ knows which backend runs: callers use the
 * ipd_meta_* functions below, which dispatch through struct ipd_meta_ops.
 *
 * Scoping: every file operation takes (tenant, user_id) and never sees a
 * record outside that scope; a foreign or unknown id is IPD_ERR_NOT_FOUND.
 *
 * Expiry: operations that read files take `now_ms` and treat a record with
 * expires_at_ms <= now_ms as absent, so an expired file vanishes from every
 * endpoint at once, before any sweep deletes it.
 *
 * Ids: file ids are unique across every tenant and user (backends index
 * file_id alone), and an expired record keeps its id until a sweep deletes
 * it.
 *
 * Thread-safety: a struct ipd_meta is shared by all request threads; every
 * operation may be called concurrently.
 *
 * Errors: IPD_OK, IPD_ERR_NOT_FOUND, IPD_ERR_CONFLICT (unique id taken),
 * IPD_ERR_QUOTA, IPD_ERR_UNAVAILABLE (backend down or busy past its
 * timeout: retry later), IPD_ERR_INTERNAL (anything else; logged).
 */
#ifndef IPD_META_H
#define IPD_META_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../service/common/crypto.h"
#include "../service/common/ipd.h"
#include "../service/common/principal.h"
#include "../service/common/buf.h"
#include "../service/common/util.h"

/* IPD_TENANT_MAX, IPD_USER_ID_MAX, IPD_POLICY_MAX: principal.h */
#define IPD_FILENAME_MAX 256 /* 255 bytes of UTF-8 and the NUL */
#define IPD_MIME_MAX 128
#define IPD_FILE_TYPE_MAX 32
#define IPD_SOURCE_MAX 16
#define IPD_BLOB_MAX 64

/* One file's metadata.  Plain data: copy it with =, nothing to free. */
struct ipd_file_meta {
    char file_id[IPD_ID_MAX]; /* "file_<26 base32>" */
    char tenant[IPD_TENANT_MAX];
    char user_id[IPD_USER_ID_MAX];
    char filename[IPD_FILENAME_MAX];   /* as given, sanitised (no '/') */
    int64_t size;                      /* bytes */
    char mime_type[IPD_MIME_MAX];      /* from libmagic */
    char file_type[IPD_FILE_TYPE_MAX]; /* category, see filetype.h */
    char sha256[IPD_SHA256_HEX];       /* lowercase hex */
    char source[IPD_SOURCE_MAX];       /* "upload", "url", "generated" */
    char blob[IPD_BLOB_MAX]; /* where the bytes are: blob backend name */
    int64_t created_at_ms;
    int64_t expires_at_ms; /* IPD_TIME_NEVER when it never expires */
};

/* A page of files.  ipd_file_list_release frees items. */
struct ipd_file_list {
    struct ipd_file_meta *items; /* owned array of n */
    size_t n;
    bool more; /* another page follows the last item */
};
void ipd_file_list_release(struct ipd_file_list *l);

/* Position in a newest-first order (created_at_ms desc, id desc): files
 * by file_id, and the execution pool's list (service/exec/pool.h) by
 * execution id.  A page "after" a cursor holds the records strictly older
 * in that order, so a cursor stays valid while records are added or
 * deleted. */
struct ipd_cursor {
    int64_t created_at_ms;
    char id[IPD_ID_MAX]; /* a file_id, or an execution id */
};

/* Cursors travel to clients as "<created_at_ms>.<id>", opaque to them.
 * Format the cursor that follows f; IPD_CURSOR_MAX bytes. */
#define IPD_CURSOR_MAX 72
void ipd_cursor_format(const struct ipd_file_meta *f, char out[IPD_CURSOR_MAX]);
/* The same for any record: created_at_ms and its id. */
void ipd_cursor_format_id(int64_t created_at_ms, const char *id,
                          char out[IPD_CURSOR_MAX]);
/* Parse a client's cursor of the file list; false for anything this
 * server didn't make. */
bool ipd_cursor_parse(const char *s, struct ipd_cursor *c);
/* The same for ids of kind (ipd_id_new's prefix: "file", "exec"). */
bool ipd_cursor_parse_kind(const char *s, const char *kind,
                           struct ipd_cursor *c);

/* Quota checked atomically with an insert; a limit < 0 means unlimited.
 * max_files and max_bytes bound one (tenant, user_id) scope; tenant, when
 * set, bounds all of the tenant's users together (its max_files and
 * max_bytes; its own tenant field is ignored), so a tenant cannot escape
 * its quota by inventing user ids.  Zero-initialised, tenant is NULL: no
 * tenant limit. */
struct ipd_quota {
    int64_t max_files;
    int64_t max_bytes;
    const struct ipd_quota *tenant; /* borrowed, or NULL */
};

/* True when a scope with count files of bytes in total may not add one
 * more file of size bytes under q's max_files and max_bytes (limits < 0
 * are unlimited; q->tenant is not looked at).  The one rule every backend
 * and the early checks apply, to the user's scope and to the tenant's. */
bool ipd_quota_exceeded(const struct ipd_quota *q, int64_t count, int64_t bytes,
                        int64_t size);
/* True when q (NULL: none) limits anything, the user's scope or the
 * tenant's. */
bool ipd_quota_limits(const struct ipd_quota *q);
/* True when q has a tenant limit that limits anything. */
bool ipd_quota_limits_tenant(const struct ipd_quota *q);

/* One tenant's unexpired files (the admin status). */
struct ipd_tenant_usage {
    char tenant[IPD_TENANT_MAX];
    int64_t files;
    int64_t bytes;
};

#define IPD_KEY_NAME_MAX 128

/* One API key record; the plain key is never stored. */
struct ipd_key {
    char key_id[IPD_ID_MAX]; /* "key_<26 base32>", public */
    char tenant[IPD_TENANT_MAX];
    char hash[IPD_SHA256_HEX]; /* sha256 hex of the plain key */
    bool admin;
    int64_t created_at_ms;
    int64_t revoked_at_ms;            /* 0 while the key is valid */
    char secret[IPD_SHA256_HEX];      /* the tenant's callback signing
                                         secret (every key of a tenant
                                         holds the same) */
    char policy[IPD_POLICY_MAX];      /* execution policy ("standard") */
    char prev_secret[IPD_SHA256_HEX]; /* the secret before the last
                                         rotation, or "" */
    int64_t secret_rotated_at_ms;     /* that rotation's time; 0: never */
};

struct ipd_key_list {
    struct ipd_key *items; /* owned array of n */
    size_t n;
};
void ipd_key_list_release(struct ipd_key_list *l);

struct ipd_meta;

struct ipd_meta_ops {
    const char *name; /* "sqlite", "mongodb" */
    void (*free)(struct ipd_meta *m);
    enum ipd_err (*ping)(struct ipd_meta *m);
    /* NULL, or IPD_ERR_UNAVAILABLE at once while the backend is known to
     * be down (checked before the operations requests make). */
    enum ipd_err (*gate)(struct ipd_meta *m);

    enum ipd_err (*file_insert)(struct ipd_meta *m,
                                const struct ipd_file_meta *f,
                                const struct ipd_quota *quota, int64_t now_ms);
    enum ipd_err (*file_get)(struct ipd_meta *m, const char *tenant,
                             const char *user_id, const char *file_id,
                             int64_t now_ms, struct ipd_file_meta *out);
    enum ipd_err (*file_list)(struct ipd_meta *m, const char *tenant,
                              const char *user_id, int64_t now_ms,
                              const struct ipd_cursor *after, size_t limit,
                              struct ipd_file_list *out);
    enum ipd_err (*file_delete)(struct ipd_meta *m, const char *tenant,
                                const char *user_id, const char *file_id,
                                int64_t now_ms, struct ipd_file_meta *out);
    enum ipd_err (*file_usage)(struct ipd_meta *m, const char *tenant,
                               const char *user_id, int64_t now_ms,
                               int64_t *count, int64_t *bytes);
    enum ipd_err (*file_list_expired)(struct ipd_meta *m, int64_t now_ms,
                                      size_t limit, struct ipd_file_list *out);
    enum ipd_err (*file_delete_by_id)(struct ipd_meta *m, const char *file_id);
    enum ipd_err (*file_totals)(struct ipd_meta *m, int64_t now_ms,
                                int64_t *count, int64_t *bytes);

    enum ipd_err (*key_insert)(struct ipd_meta *m, const struct ipd_key *k);
    enum ipd_err (*key_find_by_hash)(struct ipd_meta *m, const char *hash,
                                     struct ipd_key *out);
    enum ipd_err (*key_find_by_id)(struct ipd_meta *m, const char *key_id,
                                   struct ipd_key *out);
    enum ipd_err (*key_list)(struct ipd_meta *m, struct ipd_key_list *out);
    enum ipd_err (*key_find_tenant)(struct ipd_meta *m, const char *tenant,
                                    struct ipd_key *out);
    enum ipd_err (*key_revoke)(struct ipd_meta *m, const char *key_id,
                               int64_t now_ms);
    enum ipd_err (*key_rotate_secret)(struct ipd_meta *m, const char *tenant,
                                      const char *current, const char *next,
                                      int64_t now_ms);

    enum ipd_err (*file_get_by_id)(struct ipd_meta *m, const char *file_id,
                                   struct ipd_file_meta *out);
    enum ipd_err (*file_scan)(struct ipd_meta *m, const char *after,
                              size_t limit, struct ipd_file_list *out);
    enum ipd_err (*lease_acquire)(struct ipd_meta *m, const char *name,
                                  const char *owner, int64_t now_ms,
                                  int64_t ttl_ms, bool *got);
    enum ipd_err (*lease_renew)(struct ipd_meta *m, const char *name,
                                const char *owner, int64_t now_ms,
                                int64_t ttl_ms, bool *held);
    enum ipd_err (*lease_release)(struct ipd_meta *m, const char *name,
                                  const char *owner);
    enum ipd_err (*tenant_usage)(struct ipd_meta *m, int64_t now_ms,
                                 size_t limit, struct ipd_tenant_usage *out,
                                 size_t *n, bool *more);
};

/* Base struct every backend embeds first. */
struct ipd_meta {
    const struct ipd_meta_ops *ops;
};

/*
 * Open the SQLite store at path (created with its schema when missing;
 * migrated when older).  busy_timeout_ms bounds waits for the write lock;
 * past it an operation answers IPD_ERR_UNAVAILABLE.
 * On success *out is a new store the caller frees with ipd_meta_free.
 */
enum ipd_err ipd_meta_sqlite_open(const char *path, int busy_timeout_ms,
                                  struct ipd_meta **out);

/* Frees the store and closes its connections; NULL is fine. */
void ipd_meta_free(struct ipd_meta *m);
const char *ipd_meta_backend(const struct ipd_meta *m);
/* IPD_OK while the store can serve requests. */
enum ipd_err ipd_meta_ping(struct ipd_meta *m);

/* Insert f.  With quota non-NULL, count the user's unexpired files and
 * bytes (and with quota->tenant the tenant's, all its users together) and
 * insert only if the new totals stay within the limits (IPD_ERR_QUOTA
 * otherwise), atomically with respect to other inserts.
 * IPD_ERR_CONFLICT when f->file_id exists. */
enum ipd_err ipd_meta_file_insert(struct ipd_meta *m,
                                  const struct ipd_file_meta *f,
                                  const struct ipd_quota *quota,
                                  int64_t now_ms);
/* The unexpired file in (tenant, user_id) scope. [out] out */
enum ipd_err ipd_meta_file_get(struct ipd_meta *m, const char *tenant,
                               const char *user_id, const char *file_id,
                               int64_t now_ms, struct ipd_file_meta *out);
/* Up to limit unexpired files, newest first, strictly after *after (NULL:
 * from the newest).  [out] out, release with ipd_file_list_release. */
enum ipd_err ipd_meta_file_list(struct ipd_meta *m, const char *tenant,
                                const char *user_id, int64_t now_ms,
                                const struct ipd_cursor *after, size_t limit,
                                struct ipd_file_list *out);
/* Delete the unexpired file in scope; the deleted record goes to *out
 * (may be NULL) so the caller can remove its bytes. */
enum ipd_err ipd_meta_file_delete(struct ipd_meta *m, const char *tenant,
                                  const char *user_id, const char *file_id,
                                  int64_t now_ms, struct ipd_file_meta *out);
/* The user's unexpired file count and total bytes; with user_id NULL,
 * the tenant's (all its users together). */
enum ipd_err ipd_meta_file_usage(struct ipd_meta *m, const char *tenant,
                                 const char *user_id, int64_t now_ms,
                                 int64_t *count, int64_t *bytes);
/* The early quota check, before any byte is received or written: reads
 * the user's usage (and the tenant's when q has a tenant limit) and sets
 * *full to "user" or "tenant" (static) when that scope has no room for
 * one more file of size bytes (0 when the size is not known yet), NULL
 * when both have.  The insert checks again, atomically.  q NULL: no
 * quota (*full NULL, nothing read). */
enum ipd_err ipd_meta_quota_full(struct ipd_meta *m, const struct ipd_quota *q,
                                 const char *tenant, const char *user_id,
                                 int64_t size, int64_t now_ms,
                                 const char **full);
/* The message of a 507 for scope full ("user" or "tenant") of q, naming
 * its limits, into out (n bytes). */
void ipd_quota_message(const struct ipd_quota *q, const char *full, char *out,
                       size_t n);
/* Up to limit tenants with unexpired files, most bytes first (ties by
 * tenant), into out (an array of limit the caller provides); *n of them
 * filled, *more when further tenants have files.  Reads every unexpired
 * record: the admin status, not a request path. */
enum ipd_err ipd_meta_tenant_usage(struct ipd_meta *m, int64_t now_ms,
                                   size_t limit, struct ipd_tenant_usage *out,
                                   size_t *n, bool *more);
/* Up to limit expired records of any scope, oldest expiry first. */
enum ipd_err ipd_meta_file_list_expired(struct ipd_meta *m, int64_t now_ms,
                                        size_t limit,
                                        struct ipd_file_list *out);
/* Delete a record by id alone, whatever its scope or expiry (sweeps).
 * IPD_ERR_NOT_FOUND when it is already gone. */
enum ipd_err ipd_meta_file_delete_by_id(struct ipd_meta *m,
                                        const char *file_id);
/* All unexpired files of every scope (admin status). */
enum ipd_err ipd_meta_file_totals(struct ipd_meta *m, int64_t now_ms,
                                  int64_t *count, int64_t *bytes);

/* IPD_ERR_CONFLICT when the id or the hash exists.  A key without a policy
 * is stored with "standard" (backends are never given an empty one). */
enum ipd_err ipd_meta_key_insert(struct ipd_meta *m, const struct ipd_key *k);
/* The key with that hash, revoked or not (the caller checks
 * revoked_at_ms).  [out] out */
enum ipd_err ipd_meta_key_find_by_hash(struct ipd_meta *m, const char *hash,
                                       struct ipd_key *out);
/* The key with that id, revoked or not.  IPD_ERR_NOT_FOUND when there is
 * none.  [out] out */
enum ipd_err ipd_meta_key_find_by_id(struct ipd_meta *m, const char *key_id,
                                     struct ipd_key *out);
/* The newest of tenant's keys that holds a secret (created last, ties by
 * the greater key_id), revoked or not (a rotation changes them all: its
 * secret, prev_secret and secret_rotated_at_ms are the tenant's): what
 * the callback sender signs with at each attempt and a new key of the
 * tenant copies.  One query.  IPD_ERR_NOT_FOUND when the tenant has
 * none.  [out] out */
enum ipd_err ipd_meta_key_find_tenant(struct ipd_meta *m, const char *tenant,
                                      struct ipd_key *out);
/* Every key, oldest first (ties by key_id).  Release with ipd_key_list_release.
 */
enum ipd_err ipd_meta_key_list(struct ipd_meta *m, struct ipd_key_list *out);
/* Mark revoked at now_ms (> 0: 0 means "valid"); IPD_ERR_NOT_FOUND for an
 * unknown id.  Revoking a revoked key is IPD_OK and keeps the first
 * revocation time. */
enum ipd_err ipd_meta_key_revoke(struct ipd_meta *m, const char *key_id,
                                 int64_t now_ms);
/* Rotate tenant's callback signing secret: every key of tenant whose
 * secret is `current` (revoked ones too) gets secret = next, prev_secret =
 * current and secret_rotated_at_ms = now_ms, in one statement.  Keys
 * holding another secret are left alone, so of two rotations that race
 * one finds nothing to change.  IPD_ERR_NOT_FOUND when no key matched;
 * IPD_ERR_INVALID for an empty tenant, current or next. */
enum ipd_err ipd_meta_key_rotate_secret(struct ipd_meta *m, const char *tenant,
                                        const char *current, const char *next,
                                        int64_t now_ms);

/* ---- Reconcile: records of every scope, expired or not ---------------- */

/* The record with that id whatever its scope or expiry (an indexed
 * lookup: file ids are unique).  IPD_ERR_NOT_FOUND when there is none.
 * [out] out */
enum ipd_err ipd_meta_file_get_by_id(struct ipd_meta *m, const char *file_id,
                                     struct ipd_file_meta *out);
/* Up to limit records of every scope, expired or not, in file_id order
 * (strcmp), strictly after the id `after` ("" or NULL: from the first).
 * Pass the last id of a page as `after` for the next: a walk holds one
 * page in memory, whatever the store's size, and stays valid while
 * records are added or deleted.  out->more says another page follows.
 * [out] out, release with ipd_file_list_release. */
enum ipd_err ipd_meta_file_scan(struct ipd_meta *m, const char *after,
                                size_t limit, struct ipd_file_list *out);

/* ---- Leases: one holder at a time across processes and nodes ---------- */

#define IPD_LEASE_NAME_MAX 64   /* lease names, NUL included */
#define IPD_LEASE_OWNER_MAX 128 /* owner tokens, NUL included */

/*
 * A lease is a named record {name, owner, expires_at} shared by every
 * process on the store (several nodes on one MongoDB, or two daemons on one
 * SQLite file).  At most one owner holds a name at a time, until
 * expires_at; past it anyone may take it over.  Owners are opaque tokens,
 * unique per holder (see scheduler.h); times are wall-clock milliseconds
 * the caller passes (ipd_now_ms() in production): nodes must agree on the
 * time to well under the TTL.
 *
 * Acquire: *got = true when the lease was free (absent or expired) or
 * already owner's, and is now owner's until now_ms + ttl_ms; false when
 * another owner holds it.  Losing a race to another acquirer is *got =
 * false, not an error.
 * Renew: extend owner's lease to now_ms + ttl_ms; *held = false (and
 * nothing changes) when the lease is no longer owner's (taken over after
 * it expired, or released).  A lease that expired but that nobody took
 * is renewed.
 * Release: delete the lease if owner holds it; IPD_OK either way (a
 * release after a takeover leaves the new holder's lease alone).
 * Errors: IPD_ERR_INVALID for an empty or oversized name or owner, or
 * ttl_ms <= 0; backend errors as elsewhere.
 */
enum ipd_err ipd_meta_lease_acquire(struct ipd_meta *m, const char *name,
                                    const char *owner, int64_t now_ms,
                                    int64_t ttl_ms, bool *got);
enum ipd_err ipd_meta_lease_renew(struct ipd_meta *m, const char *name,
                                  const char *owner, int64_t now_ms,
                                  int64_t ttl_ms, bool *held);
enum ipd_err ipd_meta_lease_release(struct ipd_meta *m, const char *name,
                                    const char *owner);

/* The File object of CONTRACT.md as JSON text, appended to b (the one
 * writer of it: file replies, lists and execution results). */
enum ipd_err ipd_jw_file(struct ipd_buf *b, const struct ipd_file_meta *f);

#endif
