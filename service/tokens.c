/*
 * tokens.c - scoped tokens against the key store (see tokens.h).
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/log.h"
#include "common/util.h"
#include "tokens.h"

#define CACHE_MAX 1024  /* key records */
#define REFETCH_MS 1000 /* a record is fetched again at most this often */

struct cached_key {
    struct ipd_key key;
    int64_t fetched_ms; /* monotonic */
};

struct ipd_tokens {
    unsigned char secret[IPD_TOKEN_SECRET_LEN];
    int64_t ttl_ms, grace_ms, max_ttl_ms;
    pthread_mutex_t lock;
    struct cached_key cache[CACHE_MAX]; /* under lock */
    size_t n;
};

/* ---- the node's secret -------------------------------------------------- */

static enum ipd_err secret_parse(const char *text, size_t n,
                                 unsigned char secret[IPD_TOKEN_SECRET_LEN])
{
    while (n && (text[n - 1] == '\n' || text[n - 1] == '\r'))
        n--;
    if (n != 2 * IPD_TOKEN_SECRET_LEN)
        return IPD_ERR_INVALID;
    for (size_t i = 0; i < IPD_TOKEN_SECRET_LEN; i++) {
        int hi = ipd_hex_value(text[2 * i]),
            lo = ipd_hex_value(text[2 * i + 1]);
        if (hi < 0 || lo < 0)
            return IPD_ERR_INVALID;
        secret[i] = (unsigned char)(hi * 16 + lo);
    }
    return IPD_OK;
}

/* A new secret into path (0600, through a temp file and a link, so two
 * nodes starting at once on one data dir keep the first). */
static enum ipd_err secret_create(const char *path, char *why, size_t whylen)
{
    unsigned char raw[IPD_TOKEN_SECRET_LEN];
    char hex[2 * IPD_TOKEN_SECRET_LEN + 2], tmp[4200];
    ipd_random_bytes(raw, sizeof raw);
    ipd_hex(raw, sizeof raw, hex);
    memset(raw, 0, sizeof raw);
    memcpy(hex + 2 * IPD_TOKEN_SECRET_LEN, "\n", 2);
    /* A unique temp name (mkstemp: a pid repeats in containers, and a
     * file a killed start left would block every later one). */
    snprintf(tmp, sizeof tmp, "%s.XXXXXX", path);
    int fd = mkostemp(tmp, O_CLOEXEC);
    enum ipd_err rc = fd < 0 ? IPD_ERR_IO : IPD_OK;
    if (!rc &&
        (write(fd, hex, strlen(hex)) != (ssize_t)strlen(hex) || fsync(fd)))
        rc = IPD_ERR_IO;
    if (fd >= 0 && close(fd))
        rc = IPD_ERR_IO;
    if (!rc && link(tmp, path) && errno != EEXIST)
        rc = IPD_ERR_IO;
    if (rc)
        snprintf(why, whylen, "cannot write %s: %s", path, strerror(errno));
    unlink(tmp);
    memset(hex, 0, sizeof hex);
    return rc;
}

enum ipd_err ipd_tokens_secret_load(const char *data_dir, const char *path,
                                    unsigned char secret[IPD_TOKEN_SECRET_LEN],
                                    char *why, size_t whylen)
{
    char own[4096], text[128];
    if (!path) {
        snprintf(own, sizeof own, "%s/token.key", data_dir);
        path = own;
    }
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0 && errno == ENOENT && path == own) {
        enum ipd_err rc = secret_create(path, why, whylen);
        if (rc)
            return rc;
        fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    }
    if (fd < 0) {
        snprintf(why, whylen, "cannot read %s: %s", path, strerror(errno));
        return IPD_ERR_IO;
    }
    struct stat st;
    ssize_t n = read(fd, text, sizeof text);
    bool open_to_others = !fstat(fd, &st) && (st.st_mode & 077);
    close(fd);
    enum ipd_err rc =
        n > 0 ? secret_parse(text, (size_t)n, secret) : IPD_ERR_INVALID;
    memset(text, 0, sizeof text);
    if (rc)
        snprintf(why, whylen, "%s must hold 64 hex digits (32 random bytes)",
                 path);
    else if (open_to_others)
        ipd_warn("%s can be read by others than its owner (chmod 600 it)",
                 path);
    return rc;
}

/* ---- the key records ---------------------------------------------------- */

struct ipd_tokens *
ipd_tokens_new(const unsigned char secret[IPD_TOKEN_SECRET_LEN], int64_t ttl_ms,
               int64_t grace_ms, int64_t max_ttl_ms)
{
    struct ipd_tokens *t = ipd_xcalloc(1, sizeof(*t));
    memcpy(t->secret, secret, IPD_TOKEN_SECRET_LEN);
    t->ttl_ms = ttl_ms;
    t->grace_ms = grace_ms;
    t->max_ttl_ms = max_ttl_ms;
    pthread_mutex_init(&t->lock, NULL);
    return t;
}

void ipd_tokens_free(struct ipd_tokens *t)
{
    if (!t)
        return;
    pthread_mutex_destroy(&t->lock);
    memset(t, 0, sizeof(*t));
    free(t);
}

int64_t ipd_tokens_max_ttl_ms(const struct ipd_tokens *t)
{
    return t->max_ttl_ms;
}

static struct cached_key *cache_find(struct ipd_tokens *t, const char *key_id)
{
    for (size_t i = 0; i < t->n; i++)
        if (!strcmp(t->cache[i].key.key_id, key_id))
            return &t->cache[i];
    return NULL;
}

/* The record of key_id: the cached one when fetched within max_age_ms,
 * else the store's, then cached. */
static enum ipd_err key_record(struct ipd_tokens *t, struct ipd_meta *m,
                               const char *key_id, int64_t max_age_ms,
                               struct ipd_key *out)
{
    pthread_mutex_lock(&t->lock);
    struct cached_key *e = cache_find(t, key_id);
    bool hit = e && ipd_mono_ms() - e->fetched_ms <= max_age_ms;
    if (hit)
        *out = e->key;
    pthread_mutex_unlock(&t->lock);
    if (hit)
        return IPD_OK;
    enum ipd_err rc = ipd_meta_key_find_by_id(m, key_id, out);
    if (rc == IPD_ERR_NOT_FOUND)
        return IPD_ERR_UNAUTHORIZED;
    if (rc)
        return rc;
    /* An older key without a secret signs with its tenant's. */
    struct ipd_key tk;
    if (!out->secret[0] && !ipd_meta_key_find_tenant(m, out->tenant, &tk)) {
        memcpy(out->secret, tk.secret, sizeof out->secret);
        memcpy(out->prev_secret, tk.prev_secret, sizeof out->prev_secret);
        out->secret_rotated_at_ms = tk.secret_rotated_at_ms;
    }
    pthread_mutex_lock(&t->lock);
    e = cache_find(t, key_id);
    if (!e) {
        if (t->n < CACHE_MAX) {
            e = &t->cache[t->n++];
        } else { /* full: the oldest fetch goes */
            e = &t->cache[0];
            for (size_t i = 1; i < t->n; i++)
                if (t->cache[i].fetched_ms < e->fetched_ms)
                    e = &t->cache[i];
        }
    }
    e->key = *out;
    e->fetched_ms = ipd_mono_ms();
    pthread_mutex_unlock(&t->lock);
    return IPD_OK;
}

/* ---- mint and verify ---------------------------------------------------- */

enum ipd_err ipd_tokens_mint(struct ipd_tokens *t, struct ipd_meta *m,
                             const struct ipd_principal *key, const char *user,
                             uint32_t scopes, int64_t ttl_ms,
                             char out[IPD_TOKEN_MAX], int64_t *expires_at_ms)
{
    struct ipd_key k;
    char tkey[IPD_SHA256_HEX];
    struct ipd_token_claims c;

    if (key->token || !ipd_user_id_valid(user) || !scopes ||
        (scopes & ~(uint32_t)IPD_SCOPE_TOKEN_ALL) || ttl_ms <= 0 ||
        ttl_ms > t->max_ttl_ms)
        return IPD_ERR_INVALID;
    enum ipd_err rc = key_record(t, m, key->key_id, 0, &k);
    if (rc)
        return rc;
    if (k.revoked_at_ms || strcmp(k.tenant, key->tenant) || !k.secret[0])
        return IPD_ERR_UNAUTHORIZED;
    memset(&c, 0, sizeof c);
    snprintf(c.tenant, sizeof c.tenant, "%s", k.tenant);
    snprintf(c.user_id, sizeof c.user_id, "%s", user);
    snprintf(c.key_id, sizeof c.key_id, "%s", k.key_id);
    c.scopes = scopes;
    /* Whole seconds, rounded down: never past the asked life. */
    c.expires_at_s = (ipd_now_ms() + ttl_ms) / 1000;
    ipd_token_tenant_key(t->secret, k.tenant, k.secret, tkey);
    rc = ipd_token_mint(tkey, &c, out);
    memset(tkey, 0, sizeof tkey);
    memset(&k, 0, sizeof k);
    *expires_at_ms = c.expires_at_s * 1000;
    return rc;
}

/* Whether token's MAC fits the tenant key of k's current secret, or of
 * its previous one within the grace. */
static bool mac_fits(const struct ipd_tokens *t, const struct ipd_key *k,
                     const char *token)
{
    char tkey[IPD_SHA256_HEX];
    bool ok = false;
    if (k->secret[0]) {
        ipd_token_tenant_key(t->secret, k->tenant, k->secret, tkey);
        ok = ipd_token_mac_ok(token, tkey);
    }
    if (!ok && k->prev_secret[0] &&
        ipd_now_ms() - k->secret_rotated_at_ms < t->grace_ms) {
        ipd_token_tenant_key(t->secret, k->tenant, k->prev_secret, tkey);
        ok = ipd_token_mac_ok(token, tkey);
    }
    memset(tkey, 0, sizeof tkey);
    return ok;
}

enum ipd_err ipd_tokens_verify(struct ipd_tokens *t, struct ipd_meta *m,
                               const char *token, struct ipd_principal *out)
{
    struct ipd_token_claims c;
    struct ipd_key k;

    memset(out, 0, sizeof(*out));
    enum ipd_err rc = ipd_token_parse(token, &c);
    if (rc)
        return rc;
    if (c.expires_at_s * 1000 <= ipd_now_ms() || !ipd_user_id_valid(c.user_id))
        return IPD_ERR_UNAUTHORIZED;
    rc = key_record(t, m, c.key_id, t->ttl_ms, &k);
    /* A rotation the cache missed?  Asked again, at most once a second
     * per key, so forged tokens cannot make every request a lookup. */
    if (!rc && !mac_fits(t, &k, token))
        rc = key_record(t, m, c.key_id, REFETCH_MS, &k);
    if (rc)
        return rc;
    bool ok = mac_fits(t, &k, token) && !k.revoked_at_ms &&
              !strcmp(k.tenant, c.tenant);
    if (ok) {
        snprintf(out->tenant, sizeof out->tenant, "%s", c.tenant);
        snprintf(out->user_id, sizeof out->user_id, "%s", c.user_id);
        snprintf(out->key_id, sizeof out->key_id, "%s", c.key_id);
        snprintf(out->policy, sizeof out->policy, "%s",
                 k.policy[0] ? k.policy : "standard");
        out->token = true;
        out->scopes = c.scopes;
        out->expires_at_ms = c.expires_at_s * 1000;
    }
    memset(&k, 0, sizeof k);
    return ok ? IPD_OK : IPD_ERR_UNAUTHORIZED;
}
