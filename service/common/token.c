/*
 * token.c - scoped tokens (see token.h).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "token.h"
#include "util.h"

static const struct {
    const char *name;
    uint32_t bit;
} scopes[] = {
    {"files:read", IPD_SCOPE_FILES_READ},
    {"files:write", IPD_SCOPE_FILES_WRITE},
    {"executions", IPD_SCOPE_EXECUTIONS},
    {"sessions", IPD_SCOPE_SESSIONS},
};

uint32_t ipd_scope_named(const char *name)
{
    for (size_t i = 0; name && i < IPD_ARRAY_LEN(scopes); i++)
        if (!strcmp(name, scopes[i].name))
            return scopes[i].bit;
    return 0;
}

const char *ipd_scope_name(uint32_t bit)
{
    for (size_t i = 0; i < IPD_ARRAY_LEN(scopes); i++)
        if (scopes[i].bit == bit)
            return scopes[i].name;
    return NULL;
}

void ipd_token_tenant_key(const unsigned char secret[IPD_TOKEN_SECRET_LEN],
                          const char *tenant, const char *callback_secret,
                          char key[IPD_SHA256_HEX])
{
    char msg[32 + IPD_TENANT_MAX + IPD_SHA256_HEX];
    int n = snprintf(msg, sizeof msg, "interpd token key v1\n%s\n%s", tenant,
                     callback_secret);
    IPD_ASSERT(n > 0 && (size_t)n < sizeof msg);
    ipd_hmac_sha256_hex(secret, IPD_TOKEN_SECRET_LEN, msg, (size_t)n, key);
}

/* ---- base64url, no padding ---------------------------------------------- */

static const char b64[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

static size_t b64_encode(const unsigned char *in, size_t n, char *out)
{
    size_t o = 0;
    for (size_t i = 0; i < n; i += 3) {
        uint32_t v = (uint32_t)in[i] << 16;
        if (i + 1 < n)
            v |= (uint32_t)in[i + 1] << 8;
        if (i + 2 < n)
            v |= in[i + 2];
        out[o++] = b64[v >> 18 & 63];
        out[o++] = b64[v >> 12 & 63];
        if (i + 1 < n)
            out[o++] = b64[v >> 6 & 63];
        if (i + 2 < n)
            out[o++] = b64[v & 63];
    }
    out[o] = '\0';
    return o;
}

static int b64_value(char c)
{
    const char *p = c ? strchr(b64, c) : NULL;
    return p ? (int)(p - b64) : -1;
}

/* Strict: only the alphabet, no padding, unused bits zero.  The decoded
 * length, or (size_t)-1. */
static size_t b64_decode(const char *in, size_t n, unsigned char *out,
                         size_t cap)
{
    size_t o = 0;
    if (n % 4 == 1 || n / 4 * 3 + 2 > cap)
        return (size_t)-1;
    for (size_t i = 0; i < n; i += 4) {
        uint32_t v = 0;
        size_t k = n - i < 4 ? n - i : 4;
        for (size_t j = 0; j < 4; j++) {
            int d = j < k ? b64_value(in[i + j]) : 0;
            if (d < 0)
                return (size_t)-1;
            v = v << 6 | (uint32_t)d;
        }
        out[o++] = (unsigned char)(v >> 16);
        if (k > 2)
            out[o++] = (unsigned char)(v >> 8);
        if (k > 3)
            out[o++] = (unsigned char)v;
        if ((k == 2 && (v & 0xffff)) || (k == 3 && (v & 0xff)))
            return (size_t)-1; /* unused bits set: not canonical */
    }
    return o;
}

/* ---- mint, parse, verify ------------------------------------------------ */

/* An expiry beyond any real one (some 34,000 years): in milliseconds it
 * still fits an int64_t, whatever a forged payload says. */
#define EXPIRY_MAX ((int64_t)1 << 40)

/* A claim's string: non-empty, shorter than max, printable ASCII. */
static bool claim_ok(const char *s, size_t max)
{
    size_t n = s ? strlen(s) : 0;
    if (!n || n >= max)
        return false;
    for (size_t i = 0; i < n; i++)
        if (s[i] < 0x21 || s[i] > 0x7e)
            return false;
    return true;
}

static bool claims_ok(const struct ipd_token_claims *c)
{
    return claim_ok(c->tenant, sizeof c->tenant) &&
           claim_ok(c->user_id, sizeof c->user_id) &&
           claim_ok(c->key_id, sizeof c->key_id) && c->scopes &&
           !(c->scopes & ~(uint32_t)IPD_SCOPE_TOKEN_ALL) &&
           c->expires_at_s > 0 && c->expires_at_s < EXPIRY_MAX;
}

enum ipd_err ipd_token_mint(const char key[IPD_SHA256_HEX],
                            const struct ipd_token_claims *c,
                            char out[IPD_TOKEN_MAX])
{
    char mac[IPD_SHA256_HEX];
    if (!claims_ok(c))
        return IPD_ERR_INVALID;
    json_t *doc =
        json_pack("{s:i, s:s, s:s, s:s, s:I, s:I}", "v", 1, "t", c->tenant, "u",
                  c->user_id, "k", c->key_id, "s", (json_int_t)c->scopes, "e",
                  (json_int_t)c->expires_at_s);
    char *text = json_dumps(doc, JSON_COMPACT);
    json_decref(doc);
    IPD_ASSERT(text);
    size_t n = strlen(text), pre = strlen(IPD_TOKEN_PREFIX);
    /* prefix + payload + "." + mac + NUL */
    if (pre + (n + 2) / 3 * 4 + 1 + 64 + 1 > IPD_TOKEN_MAX) {
        free(text);
        return IPD_ERR_INVALID;
    }
    memcpy(out, IPD_TOKEN_PREFIX, pre);
    size_t len = pre + b64_encode((const unsigned char *)text, n, out + pre);
    free(text);
    ipd_hmac_sha256_hex(key, IPD_SHA256_HEX - 1, out, len, mac);
    out[len] = '.';
    memcpy(out + len + 1, mac, IPD_SHA256_HEX);
    return IPD_OK;
}

bool ipd_token_is(const char *text)
{
    return text && !strncmp(text, IPD_TOKEN_PREFIX, strlen(IPD_TOKEN_PREFIX));
}

/* The "." before the MAC, when text has the shape prefix.payload.mac
 * (NULL otherwise). */
static const char *mac_dot(const char *text)
{
    size_t n = strnlen(text, IPD_TOKEN_MAX);
    if (n >= IPD_TOKEN_MAX || !ipd_token_is(text) ||
        n < strlen(IPD_TOKEN_PREFIX) + 2 + 64)
        return NULL;
    const char *dot = text + n - 65;
    if (*dot != '.')
        return NULL;
    for (size_t i = 1; i <= 64; i++)
        if (!((dot[i] >= '0' && dot[i] <= '9') ||
              (dot[i] >= 'a' && dot[i] <= 'f')))
            return NULL;
    return dot;
}

static bool copy_claim(const json_t *doc, const char *name, char *out,
                       size_t cap)
{
    const json_t *v = json_object_get(doc, name);
    if (!json_is_string(v) || json_string_length(v) >= cap)
        return false;
    memcpy(out, json_string_value(v), json_string_length(v) + 1);
    return true;
}

enum ipd_err ipd_token_parse(const char *text, struct ipd_token_claims *c)
{
    unsigned char raw[IPD_TOKEN_MAX];
    const char *dot = text ? mac_dot(text) : NULL;

    memset(c, 0, sizeof(*c));
    if (!dot)
        return IPD_ERR_UNAUTHORIZED;
    const char *p = text + strlen(IPD_TOKEN_PREFIX); /* text is a token's */
    size_t n = b64_decode(p, (size_t)(dot - p), raw, sizeof raw);
    if (n == (size_t)-1)
        return IPD_ERR_UNAUTHORIZED;
    json_t *doc =
        json_loadb((const char *)raw, n, JSON_REJECT_DUPLICATES, NULL);
    const json_t *v = json_object_get(doc, "v");
    const json_t *s = json_object_get(doc, "s");
    const json_t *e = json_object_get(doc, "e");
    bool ok = json_is_object(doc) && json_object_size(doc) == 6 &&
              json_is_integer(v) && json_integer_value(v) == 1 &&
              json_is_integer(s) && json_integer_value(s) > 0 &&
              json_integer_value(s) <= IPD_SCOPE_TOKEN_ALL &&
              json_is_integer(e) && json_integer_value(e) > 0 &&
              copy_claim(doc, "t", c->tenant, sizeof c->tenant) &&
              copy_claim(doc, "u", c->user_id, sizeof c->user_id) &&
              copy_claim(doc, "k", c->key_id, sizeof c->key_id);
    if (ok) {
        c->scopes = (uint32_t)json_integer_value(s);
        c->expires_at_s = (int64_t)json_integer_value(e);
        ok = claims_ok(c);
    }
    json_decref(doc);
    if (!ok)
        memset(c, 0, sizeof(*c));
    return ok ? IPD_OK : IPD_ERR_UNAUTHORIZED;
}

bool ipd_token_mac_ok(const char *text, const char key[IPD_SHA256_HEX])
{
    char mac[IPD_SHA256_HEX];
    const char *dot = text ? mac_dot(text) : NULL;
    if (!dot)
        return false;
    ipd_hmac_sha256_hex(key, IPD_SHA256_HEX - 1, text, (size_t)(dot - text),
                        mac);
    return ipd_ct_equal(mac, dot + 1, 64);
}
