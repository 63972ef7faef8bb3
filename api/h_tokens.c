/*
 * h_tokens.c - POST /v1/tokens: an API key mints a scoped token for one
 * user of its tenant (CONTRACT.md "Scoped tokens"; docs/API.md).  The
 * body is exactly {"user_id", "scopes", "ttl"?}; the answer 201 {"token",
 * "user_id", "scopes", "expires_at"}.  A token never mints (the route
 * names no scope: API keys only), never carries admin rights, and never
 * outlives --token-max-ttl.  The token is in the answer only: never
 * logged.
 */
#include <stdio.h>
#include <string.h>

#include "../service/common/json_out.h"
#include "../service/common/util.h"
#include "../service/tokens.h"
#include "http.h"

#define TTL_DEFAULT_MS (15 * 60 * 1000) /* without "ttl": 15 min */
#define WHY_MAX 256

/* "scopes": a non-empty array of scope names, each once.  Their bits,
 * or 0 with why. */
static uint32_t scopes_of(const json_t *v, char why[WHY_MAX])
{
    uint32_t bits = 0;
    size_t i;
    const json_t *s;
    if (!json_is_array(v) || !json_array_size(v)) {
        snprintf(why, WHY_MAX,
                 "\"scopes\" must be a non-empty array of files:read, "
                 "files:write, executions and sessions");
        return 0;
    }
    json_array_foreach(v, i, s)
    {
        uint32_t bit = ipd_scope_named(json_string_value(s));
        if (!bit || (bits & bit)) {
            snprintf(why, WHY_MAX,
                     "\"scopes\"[%zu] must be one of files:read, "
                     "files:write, executions and sessions, each once",
                     i);
            return 0;
        }
        bits |= bit;
    }
    return bits;
}

/* "ttl": a duration ("15m", "1h", "90s"), at most max_ms; *ms. */
static bool ttl_of(const json_t *v, int64_t max_ms, int64_t *ms,
                   char why[WHY_MAX])
{
    if (!v || json_is_null(v)) {
        *ms = TTL_DEFAULT_MS < max_ms ? TTL_DEFAULT_MS : max_ms;
        return true;
    }
    if (!json_is_string(v) || ipd_duration_parse(json_string_value(v), ms) ||
        *ms < 1000 || *ms > max_ms) {
        snprintf(why, WHY_MAX,
                 "\"ttl\" must be a duration (\"15m\", \"1h\") from 1s to "
                 "the server's --token-max-ttl, %llds",
                 (long long)(max_ms / 1000));
        return false;
    }
    return true;
}

/* The body's fields, checked: exactly user_id, scopes and maybe ttl. */
static bool body_of(struct ipd_req *r, const json_t *doc, const char **user,
                    uint32_t *scopes, int64_t *ttl_ms, char why[WHY_MAX])
{
    const json_t *u = json_object_get(doc, "user_id");
    const json_t *ttl = json_object_get(doc, "ttl");
    size_t keys = 2 + (ttl != NULL);
    if (!json_is_object(doc) || json_object_size(doc) != keys ||
        !json_object_get(doc, "scopes") || !u) {
        snprintf(why, WHY_MAX,
                 "the body must be {\"user_id\", \"scopes\"} and maybe "
                 "\"ttl\", nothing else");
        return false;
    }
    *user = json_string_value(u);
    if (!*user || !ipd_user_id_valid(*user)) {
        snprintf(why, WHY_MAX,
                 "\"user_id\" must be 1-128 characters of [A-Za-z0-9_.@:-]");
        return false;
    }
    *scopes = scopes_of(json_object_get(doc, "scopes"), why);
    return *scopes &&
           ttl_of(ttl, ipd_tokens_max_ttl_ms(r->app->tokens), ttl_ms, why);
}

static void tokens_finish(struct ipd_req *r)
{
    char why[WHY_MAX], token[IPD_TOKEN_MAX];
    const char *user = NULL;
    uint32_t scopes = 0;
    int64_t ttl_ms = 0, expires_ms = 0;

    if (!r->app->tokens) {
        ipd_reply_failure(r, IPD_ERR_UNAVAILABLE,
                          "tokens are unavailable on this server (see its "
                          "log)",
                          "minting a token");
        return;
    }
    json_t *doc = ipd_req_json_body(r);
    if (!doc)
        return;
    if (!body_of(r, doc, &user, &scopes, &ttl_ms, why)) {
        ipd_reply_code(r, IPD_HE_INVALID_REQUEST, "%s", why);
        json_decref(doc);
        return;
    }
    enum ipd_err rc =
        ipd_tokens_mint(r->app->tokens, r->app->meta, &r->principal, user,
                        scopes, ttl_ms, token, &expires_ms);
    if (rc) {
        json_decref(doc);
        ipd_reply_failure(r, rc, NULL, "minting a token");
        return;
    }
    json_t *names = json_array();
    for (uint32_t bit = 1; bit <= IPD_SCOPE_TOKEN_ALL; bit <<= 1)
        if (scopes & bit)
            json_array_append_new(names, json_string(ipd_scope_name(bit)));
    ipd_reply_json(r, MHD_HTTP_CREATED,
                   json_pack("{s:s, s:s, s:o, s:o}", "token", token, "user_id",
                             user, "scopes", names, "expires_at",
                             ipd_json_time(expires_ms)));
    memset(token, 0, sizeof token);
    json_decref(doc);
}

const struct ipd_handler ipd_h_tokens_create = {
    .flags = IPD_H_AUTH,
    .finish = tokens_finish,
};
