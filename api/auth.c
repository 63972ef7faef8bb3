/*
 * auth.c - the principal of a request: its API key, then its end user.
 */
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "../service/keys.h"
#include "../service/tokens.h"
#include "../service/common/log.h"
#include "../service/common/util.h"
#include "http.h"

/* A scoped token (service/tokens.h): its own user, its scopes. */
static bool auth_token(struct ipd_req *r, const char *token)
{
    enum ipd_err rc = r->app->tokens
                          ? ipd_tokens_verify(r->app->tokens, r->app->meta,
                                              token, &r->principal)
                          : IPD_ERR_UNAUTHORIZED;
    if (rc == IPD_ERR_UNAUTHORIZED) {
        ipd_reply_failure(r, rc, "invalid, expired or revoked token",
                          "checking the token");
        return false;
    }
    if (rc) {
        ipd_reply_failure(r, rc, NULL, "checking the token");
        return false;
    }
    r->authed = true;
    return true;
}

bool ipd_auth_key(struct ipd_req *r)
{
    const char *h = ipd_req_header(r, MHD_HTTP_HEADER_AUTHORIZATION);
    if (!h) {
        ipd_reply_code(r, IPD_HE_UNAUTHORIZED,
                       "missing Authorization: Bearer <api key>");
        return false;
    }
    if (strncasecmp(h, "Bearer ", 7) != 0) {
        ipd_reply_code(r, IPD_HE_UNAUTHORIZED,
                       "Authorization must use the Bearer scheme");
        return false;
    }
    const char *key = h + 7;
    while (*key == ' ')
        key++;
    if (ipd_token_is(key))
        return auth_token(r, key);
    bool cached = false;
    /* The key record holds the tenant's callback secrets: it stays here,
     * only the principal goes on with the request. */
    struct ipd_key k;
    enum ipd_err rc = ipd_keys_authenticate_cached(
        r->app->key_cache, r->app->meta, key, &k, &cached);
    if (!rc)
        ipd_keys_principal(&k, &r->principal);
    if (cached)
        ipd_debug("request_id=%s the metadata store is unavailable: key of "
                  "tenant %s accepted from the key cache",
                  r->request_id, r->principal.tenant);
    if (rc == IPD_ERR_UNAUTHORIZED) {
        ipd_reply_failure(r, rc, "invalid or revoked API key",
                          "checking the API key");
        return false;
    }
    if (rc) {
        ipd_reply_failure(r, rc, NULL, "checking the API key");
        return false;
    }
    r->authed = true;
    return true;
}

bool ipd_auth_user(struct ipd_req *r)
{
    const char *u = ipd_req_header(r, "X-User-Id");
    if (r->principal.token) {
        /* The token's user; a header may only repeat it. */
        if (u && strcmp(u, r->principal.user_id) != 0) {
            ipd_reply_code(r, IPD_HE_FORBIDDEN,
                           "X-User-Id differs from the token's user (a "
                           "token needs no X-User-Id)");
            return false;
        }
        return true;
    }
    if (!u) {
        ipd_reply_code(r, IPD_HE_INVALID_USER_ID,
                       "missing X-User-Id header naming the end user");
        return false;
    }
    if (!ipd_user_id_valid(u)) {
        ipd_reply_code(r, IPD_HE_INVALID_USER_ID,
                       "X-User-Id must be 1-128 characters of "
                       "[A-Za-z0-9_.@:-]");
        return false;
    }
    snprintf(r->principal.user_id, sizeof(r->principal.user_id), "%s", u);
    return true;
}
