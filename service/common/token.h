/*
 * token.h - scoped tokens for browsers (CONTRACT.md "Scoped tokens";
 * docs/API.md "POST /v1/tokens"): what an API key mints for one user of
 * its tenant, for a while, with some of its rights.  Pure functions:
 * text in, text out; the key store and the node's secret are the
 * caller's (api/h_tokens.c mints, api/auth.c verifies).
 *
 * A token is
 *
 *     ipdt_<payload>.<mac>
 *
 * payload: base64url (no padding) of the compact JSON {"v": 1, "t":
 * tenant, "u": user id, "k": the minting key's id, "s": scope bits, "e":
 * expiry in Unix seconds}; mac: the lowercase hex HMAC-SHA256 of
 * "ipdt_<payload>" under the tenant's token key.  The tenant's token key
 * is the hex HMAC-SHA256, under the node's token secret (32 random bytes
 * that never reach the store), of "interpd token key v1\n" tenant "\n"
 * and the tenant's callback secret: the store alone cannot forge a token,
 * nor can a callback receiver holding that secret; rotating the callback
 * secret (`interpd keys rotate-secret`) rotates it, the previous one
 * still verifying during the same grace.
 *
 * Untrusted: ipd_token_parse reads at most IPD_TOKEN_MAX bytes, decodes
 * strictly and takes exactly those keys, each checked; only then is the
 * MAC compared (constant time) by ipd_token_mac_ok.
 */
#ifndef IPD_TOKEN_H
#define IPD_TOKEN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "crypto.h"
#include "ipd.h"
#include "principal.h"

#define IPD_TOKEN_PREFIX "ipdt_"
#define IPD_TOKEN_MAX 1024 /* a token's text, NUL included */
#define IPD_TOKEN_SECRET_LEN 32

struct ipd_token_claims {
    char tenant[IPD_TENANT_MAX];
    char user_id[IPD_USER_ID_MAX];
    char key_id[IPD_ID_MAX];
    uint32_t scopes;      /* enum ipd_scope bits, never IPD_SCOPE_ALL */
    int64_t expires_at_s; /* Unix seconds */
};

/* The scope of a name ("files:read", "files:write", "executions",
 * "sessions"), 0 for any other; and the name of one scope bit. */
uint32_t ipd_scope_named(const char *name);
const char *ipd_scope_name(uint32_t bit);

/* The tenant's token key (above) from the node's secret and the tenant's
 * callback secret (hex). */
void ipd_token_tenant_key(const unsigned char secret[IPD_TOKEN_SECRET_LEN],
                          const char *tenant, const char *callback_secret,
                          char key[IPD_SHA256_HEX]);

/* A token for c, signed with key, into out.  IPD_ERR_INVALID when a
 * claim is out of shape (then nothing is written). */
enum ipd_err ipd_token_mint(const char key[IPD_SHA256_HEX],
                            const struct ipd_token_claims *c,
                            char out[IPD_TOKEN_MAX]);

/* True when text looks like a token (its prefix): the caller then treats
 * it as one, never as an API key. */
bool ipd_token_is(const char *text);

/* The claims of text, not yet verified (for finding the key to verify it
 * with).  IPD_ERR_UNAUTHORIZED for anything malformed. */
enum ipd_err ipd_token_parse(const char *text, struct ipd_token_claims *c);

/* True when text's MAC is right under key. */
bool ipd_token_mac_ok(const char *text, const char key[IPD_SHA256_HEX]);

#endif
