/*
 * keys.c - API keys.
 */
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "keys.h"
#include "common/log.h"
#include "common/util.h"

#define KEY_PREFIX "ipd_"
#define KEY_HEX 64

/* The newest key of tenant that has a secret (its secret and rotation are
 * the tenant's), into *out; IPD_ERR_NOT_FOUND when the tenant has none. */
static enum ipd_err tenant_secret(struct ipd_meta *m, const char *tenant,
                                  struct ipd_key *out)
{
    struct ipd_key_list all = {0};
    enum ipd_err rc = ipd_meta_key_list(m, &all);
    bool found = false;
    if (rc)
        return rc;
    /* Oldest first: the last match is the newest. */
    for (size_t i = 0; i < all.n; i++)
        if (!strcmp(all.items[i].tenant, tenant) && all.items[i].secret[0]) {
            *out = all.items[i];
            found = true;
        }
    ipd_key_list_release(&all);
    return found ? IPD_OK : IPD_ERR_NOT_FOUND;
}

enum ipd_err ipd_keys_create(struct ipd_meta *m, const char *tenant,
                             bool admin, const char *policy,
                             char plain[IPD_KEY_PLAIN_MAX],
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
    enum ipd_err lrc = tenant_secret(m, tenant, &cur);
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
                                    int64_t now_ms,
                                    char secret[IPD_SHA256_HEX])
{
    unsigned char rnd[32];
    struct ipd_key cur;
    char next[IPD_SHA256_HEX];
    enum ipd_err rc;

    if (!ipd_tenant_valid(tenant))
        return IPD_ERR_INVALID;
    rc = tenant_secret(m, tenant, &cur);
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

static enum ipd_err write_key_file(const char *data_dir, const char *plain)
{
    char path[4096], tmp[4200];
    enum ipd_err rc = IPD_OK;
    snprintf(path, sizeof(path), "%s/admin.key", data_dir);
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW,
                  0600);
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

enum ipd_err ipd_keys_bootstrap_admin(struct ipd_meta *m,
                                      const char *data_dir, bool *created)
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
