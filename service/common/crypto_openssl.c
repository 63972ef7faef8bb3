/*
 * crypto_openssl.c - the crypto.h adapter for OpenSSL's libcrypto.
 */
#include <stdlib.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "crypto.h"
#include "util.h"

struct ipd_sha256 {
    EVP_MD_CTX *ctx;
};

struct ipd_sha256 *ipd_sha256_new(void)
{
    struct ipd_sha256 *h = ipd_xmalloc(sizeof(*h));
    h->ctx = EVP_MD_CTX_new();
    IPD_ASSERT(h->ctx);
    IPD_ASSERT(EVP_DigestInit_ex(h->ctx, EVP_sha256(), NULL) == 1);
    return h;
}

void ipd_sha256_update(struct ipd_sha256 *h, const void *data, size_t len)
{
    IPD_ASSERT(EVP_DigestUpdate(h->ctx, data, len) == 1);
}

void ipd_sha256_final(struct ipd_sha256 *h, char hex[IPD_SHA256_HEX])
{
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int n = 0;
    IPD_ASSERT(EVP_DigestFinal_ex(h->ctx, md, &n) == 1 && n == 32);
    ipd_hex(md, n, hex);
}

void ipd_sha256_free(struct ipd_sha256 *h)
{
    if (!h)
        return;
    EVP_MD_CTX_free(h->ctx);
    free(h);
}

void ipd_sha256_hex(const void *data, size_t len, char hex[IPD_SHA256_HEX])
{
    struct ipd_sha256 *h = ipd_sha256_new();
    ipd_sha256_update(h, data, len);
    ipd_sha256_final(h, hex);
    ipd_sha256_free(h);
}

void ipd_hmac_sha256_hex(const void *key, size_t key_len, const void *data,
                         size_t len, char hex[IPD_SHA256_HEX])
{
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int n = 0;
    IPD_ASSERT(key_len <= INT32_MAX);
    IPD_ASSERT(HMAC(EVP_sha256(), key, (int)key_len, data, len, md, &n));
    ipd_hex(md, n, hex);
}

bool ipd_ct_equal(const void *a, const void *b, size_t n)
{
    return CRYPTO_memcmp(a, b, n) == 0;
}
