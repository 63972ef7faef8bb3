/*
 * keys.c - API keys.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sys/stat.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "keys.h"
#include "common/log.h"
#include "common/util.h"

#define KEY_PREFIX "ipd_"
#define KEY_HEX 64

enum ipd_err ipd_keys_create(struct ipd_meta *m, const char *tenant, bool admin,
                             const char *policy, char plain[IPD_KEY_PLAIN_MAX],
                             struct ipd_key *out)
{
    unsigned char rnd[32];
    struct ipd_key k;

    if (!policy)
        policy = "standard";
    if (!ipd_tenant_valid(tenant) || strlen(policy) >= sizeof(k.policy))
        return IPD_ERR_INVALID;
    memset(&k, 0, sizeof(k));
    ipd_random_bytes(rnd, sizeof(rnd));
    memcpy(plain, KEY_PREFIX, sizeof(KEY_PREFIX));
    ipd_hex(rnd, sizeof(rnd), plain + strlen(KEY_PREFIX));
    /* The callback signing secret is the tenant's (CONTRACT.md): a new key
     * of a tenant that has keys shares theirs, with its rotation (the
     * previous secret and when it was replaced); the first key makes it. */
    struct ipd_key cur;
    enum ipd_err lrc = ipd_meta_key_find_tenant(m, tenant, &cur);
    if (lrc == IPD_OK) {
        memcpy(k.secret, cur.secret, sizeof(k.secret));
        memcpy(k.prev_secret, cur.prev_secret, sizeof(k.prev_secret));
        k.secret_rotated_at_ms = cur.secret_rotated_at_ms;
    } else if (lrc != IPD_ERR_NOT_FOUND) {
        return lrc;
    } else {
        ipd_random_bytes(rnd, sizeof(rnd));
        ipd_hex(rnd, sizeof(rnd), k.secret);
    }
    ipd_id_new("key", k.key_id);
    snprintf(k.tenant, sizeof(k.tenant), "%s", tenant);
    ipd_sha256_hex(plain, strlen(plain), k.hash);
    k.admin = admin;
    memcpy(k.policy, policy, strlen(policy) + 1);
    k.created_at_ms = ipd_now_ms();
    enum ipd_err rc = ipd_meta_key_insert(m, &k);
    if (!rc && out)
        *out = k;
    return rc;
}

enum ipd_err ipd_keys_rotate_secret(struct ipd_meta *m, const char *tenant,
                                    int64_t now_ms, char secret[IPD_SHA256_HEX])
{
    unsigned char rnd[32];
    struct ipd_key cur;
    char next[IPD_SHA256_HEX];
    enum ipd_err rc;

    if (!ipd_tenant_valid(tenant))
        return IPD_ERR_INVALID;
    rc = ipd_meta_key_find_tenant(m, tenant, &cur);
    if (rc)
        return rc;
    ipd_random_bytes(rnd, sizeof(rnd));
    ipd_hex(rnd, sizeof(rnd), next);
    /* Only the keys still holding cur.secret change: a rotation that
     * raced this one and won leaves nothing to match (NOT_FOUND then, and
     * the caller sees the winner's secret in `keys list`). */
    rc = ipd_meta_key_rotate_secret(m, tenant, cur.secret, next, now_ms);
    if (rc == IPD_ERR_NOT_FOUND)
        rc = IPD_ERR_CONFLICT;
    if (!rc)
        memcpy(secret, next, IPD_SHA256_HEX);
    memset(next, 0, sizeof(next));
    return rc;
}

enum ipd_err ipd_keys_authenticate(struct ipd_meta *m, const char *plain,
                                   struct ipd_key *out)
{
    char hash[IPD_SHA256_HEX];
    size_t n = plain ? strlen(plain) : 0;
    if (n != strlen(KEY_PREFIX) + KEY_HEX ||
        strncmp(plain, KEY_PREFIX, strlen(KEY_PREFIX)) != 0)
        return IPD_ERR_UNAUTHORIZED;
    ipd_sha256_hex(plain, n, hash);
    enum ipd_err rc = ipd_meta_key_find_by_hash(m, hash, out);
    if (rc == IPD_ERR_NOT_FOUND)
        return IPD_ERR_UNAUTHORIZED;
    if (rc)
        return rc;
    /* The lookup matched on the hash; compare again in constant time so
     * no backend quirk (collation, prefix match) can let a near miss in. */
    if (!ipd_ct_equal(out->hash, hash, KEY_HEX) || out->revoked_at_ms)
        return IPD_ERR_UNAUTHORIZED;
    return IPD_OK;
}

struct cache_entry {
    char hash[IPD_SHA256_HEX]; /* "" when free */
    int64_t verified_ms;       /* monotonic: the store last said valid */
    struct ipd_key key;
};

struct ipd_key_cache {
    pthread_mutex_t lock;
    int64_t ttl_ms;
    size_t n;
    struct cache_entry e[IPD_KEY_CACHE_MAX];
};

struct ipd_key_cache *ipd_key_cache_new(int64_t ttl_ms)
{
    if (ttl_ms <= 0)
        return NULL;
    struct ipd_key_cache *c = ipd_xcalloc(1, sizeof(*c));
    pthread_mutex_init(&c->lock, NULL);
    c->ttl_ms = ttl_ms;
    return c;
}

void ipd_key_cache_free(struct ipd_key_cache *c)
{
    if (!c)
        return;
    pthread_mutex_destroy(&c->lock);
    /* The entries hold callback secrets. */
    memset(c->e, 0, sizeof(c->e));
    free(c);
}

/* The entry for hash, or NULL; the caller holds c->lock. */
static struct cache_entry *cache_find(struct ipd_key_cache *c, const char *hash)
{
    for (size_t i = 0; i < c->n; i++)
        if (ipd_ct_equal(c->e[i].hash, hash, KEY_HEX))
            return &c->e[i];
    return NULL;
}

/* Remember (or forget, with k NULL) what the store said about hash. */
static void cache_note(struct ipd_key_cache *c, const char *hash,
                       const struct ipd_key *k)
{
    pthread_mutex_lock(&c->lock);
    struct cache_entry *e = cache_find(c, hash);
    if (!k && e) {
        *e = c->e[--c->n]; /* the last one fills the hole */
        memset(&c->e[c->n], 0, sizeof(c->e[c->n]));
    } else if (k && !e) {
        if (c->n < IPD_KEY_CACHE_MAX) {
            e = &c->e[c->n++];
        } else { /* full: the least recently verified goes */
            e = &c->e[0];
            for (size_t i = 1; i < c->n; i++)
                if (c->e[i].verified_ms < e->verified_ms)
                    e = &c->e[i];
        }
    }
    if (k) {
        memcpy(e->hash, hash, IPD_SHA256_HEX);
        e->key = *k;
        e->verified_ms = ipd_mono_ms();
    }
    pthread_mutex_unlock(&c->lock);
}

/* The key verified for hash within the cache's lifetime, into *out. */
static bool cache_get(struct ipd_key_cache *c, const char *hash,
                      struct ipd_key *out)
{
    bool hit = false;
    pthread_mutex_lock(&c->lock);
    struct cache_entry *e = cache_find(c, hash);
    if (e && ipd_mono_ms() - e->verified_ms <= c->ttl_ms) {
        *out = e->key;
        hit = true;
    }
    pthread_mutex_unlock(&c->lock);
    return hit;
}

enum ipd_err ipd_keys_authenticate_cached(struct ipd_key_cache *c,
                                          struct ipd_meta *m, const char *plain,
                                          struct ipd_key *out, bool *from_cache)
{
    char hash[IPD_SHA256_HEX];
    *from_cache = false;
    enum ipd_err rc = ipd_keys_authenticate(m, plain, out);
    if (!c || (rc && rc != IPD_ERR_UNAUTHORIZED && rc != IPD_ERR_UNAVAILABLE &&
               rc != IPD_ERR_TIMEOUT))
        return rc;
    /* ipd_keys_authenticate refuses malformed keys before any lookup. */
    size_t n = strlen(plain);
    if (n != strlen(KEY_PREFIX) + KEY_HEX)
        return rc;
    ipd_sha256_hex(plain, n, hash);
    if (rc == IPD_OK || rc == IPD_ERR_UNAUTHORIZED) {
        cache_note(c, hash, rc ? NULL : out);
    } else if (cache_get(c, hash, out)) {
        *from_cache = true;
        rc = IPD_OK;
    }
    memset(hash, 0, sizeof(hash));
    return rc;
}

static enum ipd_err write_key_file(const char *data_dir, const char *plain)
{
    char path[4096], tmp[4200];
    enum ipd_err rc = IPD_OK;
    snprintf(path, sizeof(path), "%s/admin.key", data_dir);
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    int fd =
        open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0)
        return IPD_ERR_IO;
    size_t len = strlen(plain);
    if (write(fd, plain, len) != (ssize_t)len || write(fd, "\n", 1) != 1 ||
        fchmod(fd, 0600) || fsync(fd))
        rc = IPD_ERR_IO;
    if (close(fd))
        rc = IPD_ERR_IO;
    if (!rc && rename(tmp, path))
        rc = IPD_ERR_IO;
    if (rc) {
        ipd_error("cannot write %s: %s", path, strerror(errno));
        unlink(tmp);
    }
    return rc;
}

enum ipd_err ipd_keys_bootstrap_admin(struct ipd_meta *m, const char *data_dir,
                                      bool *created)
{
    struct ipd_key_list keys = {0};
    char plain[IPD_KEY_PLAIN_MAX];
    struct ipd_key k;
    enum ipd_err rc;

    *created = false;
    rc = ipd_meta_key_list(m, &keys);
    if (rc)
        goto out;
    if (keys.n)
        goto out;
    rc = ipd_keys_create(m, "admin", true, "standard", plain, &k);
    if (rc)
        goto out;
    rc = write_key_file(data_dir, plain);
    if (rc) {
        /* A key nobody can read is useless; take it back. */
        ipd_meta_key_revoke(m, k.key_id, ipd_now_ms());
        goto out;
    }
    *created = true;
out:
    ipd_key_list_release(&keys);
    memset(plain, 0, sizeof(plain));
    return rc;
}

void ipd_keys_principal(const struct ipd_key *k, struct ipd_principal *out)
{
    memset(out, 0, sizeof(*out));
    snprintf(out->tenant, sizeof(out->tenant), "%s", k->tenant);
    snprintf(out->key_id, sizeof(out->key_id), "%s", k->key_id);
    snprintf(out->policy, sizeof(out->policy), "%s",
             k->policy[0] ? k->policy : "standard");
    out->admin = k->admin;
    out->scopes = IPD_SCOPE_ALL;
    out->expires_at_ms = 0;
}
