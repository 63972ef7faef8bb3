/*
 * tokens.h - scoped tokens, minted and verified against the key store
 * (the token's format is service/common/token.h; docs/API.md "POST
 * /v1/tokens").
 *
 * The node's token secret (32 random bytes) is read from a file: the
 * data dir's token.key, made at the first start (mode 0600), or
 * --token-secret-file, which several nodes serving one store must share.
 * It never reaches the store.
 *
 * Verification needs the minting key's record (its tenant, whether it is
 * revoked, the tenant's callback secrets the token key comes from):
 * records are cached by key id for ttl_ms (--key-cache-ttl), so a token
 * costs no store round trip on the hot path, and a revoked key's tokens
 * stop working within ttl_ms.  A MAC that fits neither cached secret is
 * checked once more against a fresh record (a rotation on another node).
 *
 * Thread-safety: every function may be called from any thread.
 */
#ifndef IPD_TOKENS_H
#define IPD_TOKENS_H

#include <stdbool.h>
#include <stdint.h>

#include "../storage/meta.h"
#include "common/principal.h"
#include "common/token.h"

struct ipd_tokens;

/* The node's secret: path's 64 hex digits, or, with path NULL,
 * data_dir/token.key, made (0600, atomically) when it does not exist.
 * IPD_ERR_IO or IPD_ERR_INVALID (a file of another shape) with why. */
enum ipd_err ipd_tokens_secret_load(const char *data_dir, const char *path,
                                    unsigned char secret[IPD_TOKEN_SECRET_LEN],
                                    char *why, size_t whylen);

/* ttl_ms: how long a key record is trusted; grace_ms: how long after a
 * rotation the previous callback secret's token key still verifies
 * (--callback-secret-grace); max_ttl_ms: a token's longest life. */
struct ipd_tokens *
ipd_tokens_new(const unsigned char secret[IPD_TOKEN_SECRET_LEN], int64_t ttl_ms,
               int64_t grace_ms, int64_t max_ttl_ms);
void ipd_tokens_free(struct ipd_tokens *t); /* NULL is fine */
int64_t ipd_tokens_max_ttl_ms(const struct ipd_tokens *t);

/* A token for user of key (an API key's principal: never a token's),
 * with scopes (of IPD_SCOPE_TOKEN_ALL), living ttl_ms (at most the
 * maximum).  *expires_at_ms: its end (wall clock). */
enum ipd_err ipd_tokens_mint(struct ipd_tokens *t, struct ipd_meta *m,
                             const struct ipd_principal *key, const char *user,
                             uint32_t scopes, int64_t ttl_ms,
                             char out[IPD_TOKEN_MAX], int64_t *expires_at_ms);

/* The principal of token: IPD_ERR_UNAUTHORIZED when it is malformed,
 * forged, expired or its key revoked or gone; a store error when the
 * key's record had to be read and could not be. */
enum ipd_err ipd_tokens_verify(struct ipd_tokens *t, struct ipd_meta *m,
                               const char *token, struct ipd_principal *out);

#endif
