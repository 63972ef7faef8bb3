/*
 * keys.h - API keys: creation, hashing, authentication, the first admin
 * key.  Plain keys are "ipd_" + 64 hex digits (256 random bits); only their
 * SHA-256 is stored.  A key with that much entropy needs no slow hash.
 */
#ifndef IPD_KEYS_H
#define IPD_KEYS_H

#include <stdbool.h>
#include <stdint.h>

#include "../storage/meta.h"
#include "common/ipd.h"
#include "common/principal.h"

#define IPD_KEY_PLAIN_MAX 80

/* Create and store a key for tenant with an execution policy (NULL:
 * "standard").  plain receives the key, shown once; *out the stored
 * record. */
enum ipd_err ipd_keys_create(struct ipd_meta *m, const char *tenant, bool admin,
                             const char *policy, char plain[IPD_KEY_PLAIN_MAX],
                             struct ipd_key *out);

/*
 * Give tenant a new callback signing secret (every key of the tenant: the
 * secret is per tenant).  The old one becomes the keys' prev_secret, which
 * still signs callbacks until now_ms + the configured grace
 * (--callback-secret-grace).  secret receives the new one.
 * IPD_ERR_INVALID for a malformed tenant name, IPD_ERR_NOT_FOUND when the
 * tenant has no keys, IPD_ERR_CONFLICT when another rotation changed the
 * secret meanwhile; backend errors pass through.
 */
enum ipd_err ipd_keys_rotate_secret(struct ipd_meta *m, const char *tenant,
                                    int64_t now_ms,
                                    char secret[IPD_SHA256_HEX]);

/* The principal a key stands for (user_id "": the request's X-User-Id
 * fills it): its tenant, key id, policy ("standard" when the record names
 * none), admin flag, every scope, no expiry.  No secret is copied. */
void ipd_keys_principal(const struct ipd_key *k, struct ipd_principal *out);

/* The stored record for a presented key, compared in constant time.
 * IPD_ERR_UNAUTHORIZED for unknown, malformed or revoked keys; backend
 * errors pass through. */
enum ipd_err ipd_keys_authenticate(struct ipd_meta *m, const char *plain,
                                   struct ipd_key *out);

/*
 * The last-known-good cache: keys verified by the store lately, so that
 * requests still authenticate through a short outage of the metadata
 * store.  The store is always asked first: a revoked or deleted key is
 * refused as soon as the store says so.  Only when the store cannot
 * answer (IPD_ERR_UNAVAILABLE or IPD_ERR_TIMEOUT) does a key verified
 * within the last ttl_ms count as valid; so a key revoked while this
 * node cannot reach the store works at most ttl_ms after its last
 * successful check.  At most IPD_KEY_CACHE_MAX keys (the least recently
 * verified goes first).  ttl_ms 0: no cache.  Thread-safe.
 * *out is new; free with ipd_key_cache_free (NULL is fine).
 */
#define IPD_KEY_CACHE_MAX 1024
struct ipd_key_cache;
struct ipd_key_cache *ipd_key_cache_new(int64_t ttl_ms);
void ipd_key_cache_free(struct ipd_key_cache *c);

/* ipd_keys_authenticate through the cache c (NULL: no cache).  [out]
 * *from_cache says the store could not be asked and the cache answered. */
enum ipd_err ipd_keys_authenticate_cached(struct ipd_key_cache *c,
                                          struct ipd_meta *m, const char *plain,
                                          struct ipd_key *out,
                                          bool *from_cache);

/* On an empty key store, create an admin key and write it to
 * <data_dir>/admin.key (mode 0600, atomically).  *created says whether it
 * did. */
enum ipd_err ipd_keys_bootstrap_admin(struct ipd_meta *m, const char *data_dir,
                                      bool *created);

#endif
