/*
 * crypto.h - hashing and comparisons (OpenSSL's libcrypto behind it; its
 * types never leave service/crypto_openssl.c).
 */
#ifndef IPD_CRYPTO_H
#define IPD_CRYPTO_H

#include <stdbool.h>
#include <stddef.h>

#include "ipd.h"

#define IPD_SHA256_HEX 65 /* 64 hex digits and the NUL */

struct ipd_sha256;

/* A streaming SHA-256.  The caller owns the result: ipd_sha256_free. */
struct ipd_sha256 *ipd_sha256_new(void);
void ipd_sha256_update(struct ipd_sha256 *h, const void *data, size_t len);
/* Finish and write the lowercase hex digest; h can't be updated after. */
void ipd_sha256_final(struct ipd_sha256 *h, char hex[IPD_SHA256_HEX]);
void ipd_sha256_free(struct ipd_sha256 *h); /* NULL is fine */

/* One-shot hex digest. */
void ipd_sha256_hex(const void *data, size_t len, char hex[IPD_SHA256_HEX]);

/* HMAC-SHA256 of data under key, lowercase hex. */
void ipd_hmac_sha256_hex(const void *key, size_t key_len, const void *data,
                         size_t len, char hex[IPD_SHA256_HEX]);

/* Constant-time equality of two n-byte regions. */
bool ipd_ct_equal(const void *a, const void *b, size_t n);

#endif
