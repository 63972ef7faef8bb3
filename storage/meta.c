/*
 * meta.c - dispatch from the ipd_meta_* API to the backend's ops.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../service/common/json_out.h"
#include "meta.h"

void ipd_file_list_release(struct ipd_file_list *l)
{
    if (!l)
        return;
    free(l->items);
    l->items = NULL;
    l->n = 0;
    l->more = false;
}

void ipd_cursor_format_id(int64_t created_at_ms, const char *id,
                          char out[IPD_CURSOR_MAX])
{
    snprintf(out, IPD_CURSOR_MAX, "%lld.%s", (long long)created_at_ms, id);
}

void ipd_cursor_format(const struct ipd_file_meta *f, char out[IPD_CURSOR_MAX])
{
    ipd_cursor_format_id(f->created_at_ms, f->file_id, out);
}

bool ipd_cursor_parse(const char *s, struct ipd_cursor *c)
{
    return ipd_cursor_parse_kind(s, "file", c);
}

bool ipd_cursor_parse_kind(const char *s, const char *kind,
                           struct ipd_cursor *c)
{
    const char *dot = s ? strchr(s, '.') : NULL;
    char num[24];
    int64_t ms = 0;
    if (!dot || (size_t)(dot - s) >= sizeof(num))
        return false;
    memcpy(num, s, (size_t)(dot - s));
    num[dot - s] = '\0';
    if (ipd_int_parse(num, 0, INT64_MAX, &ms) || !ipd_id_valid(kind, dot + 1))
        return false;
    c->created_at_ms = ms;
    snprintf(c->id, sizeof(c->id), "%s", dot + 1);
    return true;
}

bool ipd_quota_exceeded(const struct ipd_quota *q, int64_t count, int64_t bytes,
                        int64_t size)
{
    if (q->max_files >= 0 && count >= q->max_files)
        return true;
    /* Written as a subtraction so huge sizes can't overflow. */
    return q->max_bytes >= 0 &&
           (size > q->max_bytes || bytes > q->max_bytes - size);
}

bool ipd_quota_limits_tenant(const struct ipd_quota *q)
{
    return q && q->tenant &&
           (q->tenant->max_files >= 0 || q->tenant->max_bytes >= 0);
}

bool ipd_quota_limits(const struct ipd_quota *q)
{
    return q && (q->max_files >= 0 || q->max_bytes >= 0 ||
                 ipd_quota_limits_tenant(q));
}

enum ipd_err ipd_meta_quota_full(struct ipd_meta *m, const struct ipd_quota *q,
                                 const char *tenant, const char *user_id,
                                 int64_t size, int64_t now_ms,
                                 const char **full)
{
    int64_t count = 0, bytes = 0;
    enum ipd_err rc = IPD_OK;

    *full = NULL;
    if (q && (q->max_files >= 0 || q->max_bytes >= 0)) {
        rc = ipd_meta_file_usage(m, tenant, user_id, now_ms, &count, &bytes);
        if (!rc && ipd_quota_exceeded(q, count, bytes, size))
            *full = "user";
    }
    if (!rc && !*full && ipd_quota_limits_tenant(q)) {
        rc = ipd_meta_file_usage(m, tenant, NULL, now_ms, &count, &bytes);
        if (!rc && ipd_quota_exceeded(q->tenant, count, bytes, size))
            *full = "tenant";
    }
    return rc;
}

void ipd_quota_message(const struct ipd_quota *q, const char *full, char *out,
                       size_t n)
{
    bool tenant = full && !strcmp(full, "tenant") && q && q->tenant;
    const struct ipd_quota *l = tenant ? q->tenant : q;
    char files[48] = "", bytes[48] = "";

    if (l && l->max_files >= 0)
        snprintf(files, sizeof(files), "at most %lld files",
                 (long long)l->max_files);
    if (l && l->max_bytes >= 0)
        snprintf(bytes, sizeof(bytes), "at most %lld bytes",
                 (long long)l->max_bytes);
    snprintf(out, n, "%s (%s%s%s%s)",
             tenant ? "the tenant's storage quota is exhausted"
                    : "the user's storage quota is exhausted",
             files, files[0] && bytes[0] ? ", " : "", bytes,
             tenant ? " for all of the tenant's users together" : "");
}

enum ipd_err ipd_meta_tenant_usage(struct ipd_meta *m, int64_t now_ms,
                                   size_t limit, struct ipd_tenant_usage *out,
                                   size_t *n, bool *more)
{
    *n = 0;
    *more = false;
    return m->ops->tenant_usage(m, now_ms, limit, out, n, more);
}

void ipd_key_list_release(struct ipd_key_list *l)
{
    if (!l)
        return;
    free(l->items);
    l->items = NULL;
    l->n = 0;
}

void ipd_meta_free(struct ipd_meta *m)
{
    if (m)
        m->ops->free(m);
}

const char *ipd_meta_backend(const struct ipd_meta *m)
{
    return m->ops->name;
}

/* A backend that knows it is down answers at once (mongo.h, the
 * breaker) instead of making an HTTP event thread wait out its timeout.
 * Gated: the operations requests make. */
static enum ipd_err gate(struct ipd_meta *m)
{
    return m->ops->gate ? m->ops->gate(m) : IPD_OK;
}

enum ipd_err ipd_meta_ping(struct ipd_meta *m)
{
    return m->ops->ping(m);
}

enum ipd_err ipd_meta_file_insert(struct ipd_meta *m,
                                  const struct ipd_file_meta *f,
                                  const struct ipd_quota *quota, int64_t now_ms)
{
    enum ipd_err rc = gate(m);
    return rc ? rc : m->ops->file_insert(m, f, quota, now_ms);
}

enum ipd_err ipd_meta_file_get(struct ipd_meta *m, const char *tenant,
                               const char *user_id, const char *file_id,
                               int64_t now_ms, struct ipd_file_meta *out)
{
    enum ipd_err rc = gate(m);
    return rc ? rc : m->ops->file_get(m, tenant, user_id, file_id, now_ms, out);
}

enum ipd_err ipd_meta_file_list(struct ipd_meta *m, const char *tenant,
                                const char *user_id, int64_t now_ms,
                                const struct ipd_cursor *after, size_t limit,
                                struct ipd_file_list *out)
{
    enum ipd_err rc = gate(m);
    return rc ? rc
              : m->ops->file_list(m, tenant, user_id, now_ms, after, limit,
                                  out);
}

enum ipd_err ipd_meta_file_delete(struct ipd_meta *m, const char *tenant,
                                  const char *user_id, const char *file_id,
                                  int64_t now_ms, struct ipd_file_meta *out)
{
    enum ipd_err rc = gate(m);
    return rc ? rc
              : m->ops->file_delete(m, tenant, user_id, file_id, now_ms, out);
}

enum ipd_err ipd_meta_file_usage(struct ipd_meta *m, const char *tenant,
                                 const char *user_id, int64_t now_ms,
                                 int64_t *count, int64_t *bytes)
{
    enum ipd_err rc = gate(m);
    return rc ? rc
              : m->ops->file_usage(m, tenant, user_id, now_ms, count, bytes);
}

enum ipd_err ipd_meta_file_list_expired(struct ipd_meta *m, int64_t now_ms,
                                        size_t limit, struct ipd_file_list *out)
{
    return m->ops->file_list_expired(m, now_ms, limit, out);
}

enum ipd_err ipd_meta_file_delete_by_id(struct ipd_meta *m, const char *file_id)
{
    return m->ops->file_delete_by_id(m, file_id);
}

enum ipd_err ipd_meta_file_totals(struct ipd_meta *m, int64_t now_ms,
                                  int64_t *count, int64_t *bytes)
{
    enum ipd_err rc = gate(m);
    return rc ? rc : m->ops->file_totals(m, now_ms, count, bytes);
}

enum ipd_err ipd_meta_key_insert(struct ipd_meta *m, const struct ipd_key *k)
{
    struct ipd_key named;

    if (k->policy[0])
        return m->ops->key_insert(m, k);
    /* A key without a policy is stored with the default, by every backend. */
    named = *k;
    memcpy(named.policy, "standard", sizeof("standard"));
    return m->ops->key_insert(m, &named);
}

enum ipd_err ipd_meta_key_find_by_hash(struct ipd_meta *m, const char *hash,
                                       struct ipd_key *out)
{
    enum ipd_err rc = gate(m);
    return rc ? rc : m->ops->key_find_by_hash(m, hash, out);
}

enum ipd_err ipd_meta_key_find_by_id(struct ipd_meta *m, const char *key_id,
                                     struct ipd_key *out)
{
    enum ipd_err rc = gate(m);
    return rc ? rc : m->ops->key_find_by_id(m, key_id, out);
}

enum ipd_err ipd_meta_key_list(struct ipd_meta *m, struct ipd_key_list *out)
{
    return m->ops->key_list(m, out);
}

enum ipd_err ipd_meta_key_find_tenant(struct ipd_meta *m, const char *tenant,
                                      struct ipd_key *out)
{
    enum ipd_err rc = gate(m);
    return rc ? rc : m->ops->key_find_tenant(m, tenant, out);
}

enum ipd_err ipd_meta_key_revoke(struct ipd_meta *m, const char *key_id,
                                 int64_t now_ms)
{
    return m->ops->key_revoke(m, key_id, now_ms);
}

enum ipd_err ipd_meta_key_rotate_secret(struct ipd_meta *m, const char *tenant,
                                        const char *current, const char *next,
                                        int64_t now_ms)
{
    if (!tenant || !*tenant || !current || !*current || !next || !*next)
        return IPD_ERR_INVALID;
    return m->ops->key_rotate_secret(m, tenant, current, next, now_ms);
}

enum ipd_err ipd_meta_file_get_by_id(struct ipd_meta *m, const char *file_id,
                                     struct ipd_file_meta *out)
{
    return m->ops->file_get_by_id(m, file_id, out);
}

enum ipd_err ipd_meta_file_scan(struct ipd_meta *m, const char *after,
                                size_t limit, struct ipd_file_list *out)
{
    return m->ops->file_scan(m, after ? after : "", limit, out);
}

/* Shared argument checks, so every backend refuses the same input. */
static bool lease_args_ok(const char *name, const char *owner)
{
    return name && owner && name[0] && owner[0] &&
           strlen(name) < IPD_LEASE_NAME_MAX &&
           strlen(owner) < IPD_LEASE_OWNER_MAX;
}

enum ipd_err ipd_meta_lease_acquire(struct ipd_meta *m, const char *name,
                                    const char *owner, int64_t now_ms,
                                    int64_t ttl_ms, bool *got)
{
    *got = false;
    if (!lease_args_ok(name, owner) || ttl_ms <= 0 ||
        now_ms > INT64_MAX - ttl_ms)
        return IPD_ERR_INVALID;
    return m->ops->lease_acquire(m, name, owner, now_ms, ttl_ms, got);
}

enum ipd_err ipd_meta_lease_renew(struct ipd_meta *m, const char *name,
                                  const char *owner, int64_t now_ms,
                                  int64_t ttl_ms, bool *held)
{
    *held = false;
    if (!lease_args_ok(name, owner) || ttl_ms <= 0 ||
        now_ms > INT64_MAX - ttl_ms)
        return IPD_ERR_INVALID;
    return m->ops->lease_renew(m, name, owner, now_ms, ttl_ms, held);
}

enum ipd_err ipd_meta_lease_release(struct ipd_meta *m, const char *name,
                                    const char *owner)
{
    if (!lease_args_ok(name, owner))
        return IPD_ERR_INVALID;
    return m->ops->lease_release(m, name, owner);
}

enum ipd_err ipd_jw_file(struct ipd_buf *b, const struct ipd_file_meta *f)
{
    enum ipd_err rc = ipd_buf_adds(b, "{\"file_id\":");
    if (!rc)
        rc = ipd_jw_str(b, f->file_id);
    if (!rc)
        rc = ipd_buf_adds(b, ",\"filename\":");
    if (!rc)
        rc = ipd_jw_str(b, f->filename);
    if (!rc)
        rc = ipd_buf_adds(b, ",\"size\":");
    if (!rc)
        rc = ipd_jw_int(b, f->size);
    if (!rc)
        rc = ipd_buf_adds(b, ",\"mime_type\":");
    if (!rc)
        rc = ipd_jw_str(b, f->mime_type);
    if (!rc)
        rc = ipd_buf_adds(b, ",\"file_type\":");
    if (!rc)
        rc = ipd_jw_str(b, f->file_type);
    if (!rc)
        rc = ipd_buf_adds(b, ",\"sha256\":");
    if (!rc)
        rc = ipd_jw_str(b, f->sha256);
    if (!rc)
        rc = ipd_buf_adds(b, ",\"source\":");
    if (!rc)
        rc = ipd_jw_str(b, f->source);
    if (!rc)
        rc = ipd_buf_adds(b, ",\"created_at\":");
    if (!rc)
        rc = ipd_jw_time(b, f->created_at_ms);
    if (!rc)
        rc = ipd_buf_adds(b, ",\"expires_at\":");
    if (!rc)
        rc = ipd_jw_time(b, f->expires_at_ms);
    if (!rc)
        rc = ipd_buf_addch(b, '}');
    return rc;
}
