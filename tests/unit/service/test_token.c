/*
 * test_token.c - the scoped token's format (service/common/token.h):
 * minted tokens parse back to their claims and verify under their key
 * only; anything changed, cut, re-encoded or out of shape is refused.
 */
#include "service/common/token.h"
#include "service/common/util.h"
#include "test.h"

static const unsigned char secret[IPD_TOKEN_SECRET_LEN] = {
    1,  2,  3,  4,  5,  6,  7,  8,  9,  10, 11, 12, 13, 14, 15, 16,
    17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32};

static void claims(struct ipd_token_claims *c)
{
    memset(c, 0, sizeof(*c));
    snprintf(c->tenant, sizeof c->tenant, "acme");
    snprintf(c->user_id, sizeof c->user_id, "alice@x");
    snprintf(c->key_id, sizeof c->key_id, "key_abcdefghijklmnopqrstuvwxyz");
    c->scopes = IPD_SCOPE_FILES_READ | IPD_SCOPE_EXECUTIONS;
    c->expires_at_s = 1795940465;
}

static void key_of(const char *tenant, const char *cb, char key[IPD_SHA256_HEX])
{
    ipd_token_tenant_key(secret, tenant, cb, key);
}

static void mint_parse_verify(void)
{
    struct ipd_token_claims c, back;
    char key[IPD_SHA256_HEX], other[IPD_SHA256_HEX], tok[IPD_TOKEN_MAX];
    claims(&c);
    key_of("acme", "00ff", key);
    CHECK_INT(ipd_token_mint(key, &c, tok), IPD_OK);
    CHECK(ipd_token_is(tok));
    CHECK(!strncmp(tok, "ipdt_", 5));
    CHECK_INT(ipd_token_parse(tok, &back), IPD_OK);
    CHECK(!strcmp(back.tenant, "acme") && !strcmp(back.user_id, "alice@x") &&
          !strcmp(back.key_id, c.key_id) && back.scopes == c.scopes &&
          back.expires_at_s == c.expires_at_s);
    CHECK(ipd_token_mac_ok(tok, key));
    /* Another tenant's key, another callback secret, another node. */
    key_of("acme2", "00ff", other);
    CHECK(!ipd_token_mac_ok(tok, other));
    key_of("acme", "00fe", other);
    CHECK(!ipd_token_mac_ok(tok, other));
    unsigned char s2[IPD_TOKEN_SECRET_LEN];
    memcpy(s2, secret, sizeof s2);
    s2[31] ^= 1;
    ipd_token_tenant_key(s2, "acme", "00ff", other);
    CHECK(!ipd_token_mac_ok(tok, other));
}

/* Every single-byte change of a token is refused: by the parser or the
 * MAC. */
static void every_change_refused(void)
{
    struct ipd_token_claims c, back;
    char key[IPD_SHA256_HEX], tok[IPD_TOKEN_MAX];
    claims(&c);
    key_of("acme", "00ff", key);
    CHECK_INT(ipd_token_mint(key, &c, tok), IPD_OK);
    size_t n = strlen(tok);
    static const char repl[] = "Aa0_-.zZ9f";
    for (size_t i = 0; i < n; i++) {
        for (size_t k = 0; repl[k]; k++) {
            char t[IPD_TOKEN_MAX];
            memcpy(t, tok, n + 1);
            if (t[i] == repl[k])
                continue;
            t[i] = repl[k];
            bool ok = !ipd_token_parse(t, &back) && ipd_token_mac_ok(t, key);
            CHECKF(!ok, "changed byte %zu to %c: accepted", i, repl[k]);
        }
    }
    /* Cut, extended, empty, the prefix alone. */
    char t[IPD_TOKEN_MAX];
    memcpy(t, tok, n + 1);
    t[n - 1] = '\0';
    CHECK(ipd_token_parse(t, &back) || !ipd_token_mac_ok(t, key));
    CHECK(!ipd_token_mac_ok("", key) && ipd_token_parse("", &back));
    CHECK(ipd_token_parse("ipdt_", &back) == IPD_ERR_UNAUTHORIZED);
    CHECK(ipd_token_parse(NULL, &back) == IPD_ERR_UNAUTHORIZED);
}

/* A payload of the right MAC but the wrong shape: signed here with the
 * key, so only the parser can refuse it. */
static void shapes_refused(void)
{
    static const char *const payloads[] = {
        "{\"v\":2,\"t\":\"a\",\"u\":\"b\",\"k\":\"c\",\"s\":1,\"e\":9}",
        "{\"v\":1,\"t\":\"a\",\"u\":\"b\",\"k\":\"c\",\"s\":0,\"e\":9}",
        "{\"v\":1,\"t\":\"a\",\"u\":\"b\",\"k\":\"c\",\"s\":16,\"e\":9}",
        "{\"v\":1,\"t\":\"a\",\"u\":\"b\",\"k\":\"c\",\"s\":1,\"e\":0}",
        "{\"v\":1,\"t\":\"\",\"u\":\"b\",\"k\":\"c\",\"s\":1,\"e\":9}",
        "{\"v\":1,\"t\":\"a\",\"u\":\"b c\",\"k\":\"c\",\"s\":1,\"e\":9}",
        "{\"v\":1,\"t\":\"a\",\"u\":\"b\",\"k\":\"c\",\"s\":1}",
        "{\"v\":1,\"t\":\"a\",\"u\":\"b\",\"k\":\"c\",\"s\":1,\"e\":9,\"x\":1}",
        /* a key twice */
        ("{\"v\":1,\"t\":\"a\",\"t\":\"z\",\"u\":\"b\",\"k\":\"c\",\"s\":1,"
         "\"e\":9}"),
        "{\"v\":1,\"t\":\"a\",\"u\":\"b\",\"k\":\"c\",\"s\":\"1\",\"e\":9}",
        "[1,2,3]",
        "not json",
    };
    static const char b64[] =
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    char key[IPD_SHA256_HEX];
    key_of("a", "00", key);
    for (size_t i = 0; i < sizeof payloads / sizeof payloads[0]; i++) {
        const unsigned char *p = (const unsigned char *)payloads[i];
        size_t n = strlen(payloads[i]), o = 5;
        char t[IPD_TOKEN_MAX] = "ipdt_", mac[IPD_SHA256_HEX];
        for (size_t j = 0; j < n; j += 3) {
            unsigned v = (unsigned)p[j] << 16 |
                         (j + 1 < n ? (unsigned)p[j + 1] << 8 : 0) |
                         (j + 2 < n ? p[j + 2] : 0);
            t[o++] = b64[v >> 18 & 63];
            t[o++] = b64[v >> 12 & 63];
            if (j + 1 < n)
                t[o++] = b64[v >> 6 & 63];
            if (j + 2 < n)
                t[o++] = b64[v & 63];
        }
        ipd_hmac_sha256_hex(key, 64, t, o, mac);
        t[o++] = '.';
        memcpy(t + o, mac, 65);
        struct ipd_token_claims back;
        CHECK(ipd_token_mac_ok(t, key));
        CHECKF(ipd_token_parse(t, &back) == IPD_ERR_UNAUTHORIZED,
               "payload %zu accepted", i);
        CHECK(!back.tenant[0] && !back.scopes);
    }
}

/* One payload, one text: a last character whose unused bits are set
 * decodes to the same bytes, and is refused by the parser itself. */
static void base64_canonical(void)
{
    static const char b64[] =
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    struct ipd_token_claims c, back;
    char key[IPD_SHA256_HEX], tok[IPD_TOKEN_MAX];
    int tried = 0;
    key_of("acme", "00ff", key);
    for (int extra = 0; extra < 3; extra++) {
        claims(&c);
        snprintf(c.user_id, sizeof c.user_id, "u%.*s", extra, "xx");
        CHECK_INT(ipd_token_mint(key, &c, tok), IPD_OK);
        size_t plen = (size_t)(strchr(tok, '.') - tok) - 5;
        if (plen % 4 == 0)
            continue;
        tried++;
        char *last = tok + 5 + plen - 1;
        int v = (int)(strchr(b64, *last) - b64);
        *last = b64[v ^ 0x1]; /* the lowest bit is unused either way */
        CHECKF(ipd_token_parse(tok, &back) == IPD_ERR_UNAUTHORIZED,
               "a non-canonical payload (length %zu) parsed", plen);
    }
    CHECK(tried == 2);
}

static void mint_refuses_bad_claims(void)
{
    struct ipd_token_claims c;
    char key[IPD_SHA256_HEX], tok[IPD_TOKEN_MAX];
    key_of("acme", "00ff", key);
    claims(&c);
    c.scopes = IPD_SCOPE_ALL;
    CHECK_INT(ipd_token_mint(key, &c, tok), IPD_ERR_INVALID);
    claims(&c);
    c.scopes = 0;
    CHECK_INT(ipd_token_mint(key, &c, tok), IPD_ERR_INVALID);
    claims(&c);
    c.user_id[0] = '\0';
    CHECK_INT(ipd_token_mint(key, &c, tok), IPD_ERR_INVALID);
    claims(&c);
    snprintf(c.tenant, sizeof c.tenant, "a\"b");
    CHECK_INT(ipd_token_mint(key, &c, tok), IPD_OK); /* quoted in JSON */
    struct ipd_token_claims back;
    CHECK_INT(ipd_token_parse(tok, &back), IPD_OK);
    CHECK(!strcmp(back.tenant, "a\"b"));
    /* The longest claims still fit. */
    claims(&c);
    memset(c.tenant, 'T', sizeof c.tenant - 1);
    memset(c.user_id, 'U', sizeof c.user_id - 1);
    CHECK_INT(ipd_token_mint(key, &c, tok), IPD_OK);
    CHECK(strlen(tok) < IPD_TOKEN_MAX);
    CHECK_INT(ipd_token_parse(tok, &back), IPD_OK);
}

static void scope_names(void)
{
    CHECK(ipd_scope_named("files:read") == IPD_SCOPE_FILES_READ);
    CHECK(ipd_scope_named("files:write") == IPD_SCOPE_FILES_WRITE);
    CHECK(ipd_scope_named("executions") == IPD_SCOPE_EXECUTIONS);
    CHECK(ipd_scope_named("sessions") == IPD_SCOPE_SESSIONS);
    CHECK(ipd_scope_named("admin") == 0 && ipd_scope_named(NULL) == 0);
    CHECK(!strcmp(ipd_scope_name(IPD_SCOPE_SESSIONS), "sessions"));
    CHECK(ipd_scope_name(IPD_SCOPE_ALL) == NULL);
}

int main(void)
{
    static const struct test_case cases[] = {
        T(mint_parse_verify), T(every_change_refused),
        T(shapes_refused),    T(mint_refuses_bad_claims),
        T(scope_names),       T(base64_canonical),
    };
    return test_run(cases, sizeof cases / sizeof cases[0]);
}
