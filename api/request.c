/*
 * request.c - what handlers read from a request: headers, query values
 * and the JSON body.
 */
#include <string.h>

#include "http.h"

const char *ipd_req_header(struct ipd_req *r, const char *name)
{
    return MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, name);
}

const char *ipd_req_query(struct ipd_req *r, const char *name)
{
    return MHD_lookup_connection_value(r->conn, MHD_GET_ARGUMENT_KIND, name);
}

const char *ipd_req_query_n(struct ipd_req *r, const char *name, size_t *len)
{
    const char *v = NULL;
    if (MHD_lookup_connection_value_n(r->conn, MHD_GET_ARGUMENT_KIND, name,
                                      strlen(name), &v, len) != MHD_YES)
        return NULL;
    return v;
}

json_t *ipd_req_json_body(struct ipd_req *r)
{
    json_error_t jerr;
    json_t *doc = json_loadb(r->body.buf, r->body.len,
                             JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, &jerr);
    if (!doc)
        ipd_reply_code(r, IPD_HE_INVALID_JSON, "invalid JSON: %s (line %d)",
                        jerr.text, jerr.line);
    return doc;
}

const struct ipd_exec_policy *ipd_req_key_policy(struct ipd_req *r)
{
    return ipd_config_policy(r->app->cfg,
                             r->key.policy[0] ? r->key.policy : "standard");
}
