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

#define IPD_KEY_PLAIN_MAX 80

/* Create and store a key for tenant with an execution policy (NULL:
 * "standard").  plain receives the key, shown once; *out the stored
 * record. */
enum ipd_err ipd_keys_create(struct ipd_meta *m, const char *tenant,
                             bool admin, const char *policy,
                             char plain[IPD_KEY_PLAIN_MAX],
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

/* The stored record for a presented key, compared in constant time.
 * IPD_ERR_UNAUTHORIZED for unknown, malformed or revoked keys; backend
 * errors pass through. */
enum ipd_err ipd_keys_authenticate(struct ipd_meta *m, const char *plain,
                                   struct ipd_key *out);

/* On an empty key store, create an admin key and write it to
 * <data_dir>/admin.key (mode 0600, atomically).  *created says whether it
 * did. */
enum ipd_err ipd_keys_bootstrap_admin(struct ipd_meta *m,
                                      const char *data_dir, bool *created);

#endif
