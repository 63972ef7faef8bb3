/*
 * request.c - what handlers read from a request: headers, query values
 * and the JSON body; and the check of a request's head bytes before
 * anything reads them.
 */
#include <string.h>
#include <strings.h>

#include "../service/common/json_out.h"
#include "../service/common/util.h"
#include "http.h"

const char *ipd_req_header(struct ipd_req *r, const char *name)
{
    return MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, name);
}

bool ipd_media_type_is(const char *ct, const char *want)
{
    size_t n = strlen(want);
    return ct && !strncasecmp(ct, want, n) &&
           (ct[n] == '\0' || ct[n] == ';' || ct[n] == ' ');
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

bool ipd_req_list_query(struct ipd_req *r, const char *kind, int64_t *limit,
                        struct ipd_cursor *c, const struct ipd_cursor **after)
{
    size_t lsn = 0, csn = 0;
    const char *ls = ipd_req_query_n(r, "limit", &lsn);
    const char *cs = ipd_req_query_n(r, "cursor", &csn);

    *limit = IPD_LIST_DEFAULT;
    *after = NULL;
    /* A NUL inside a value would cut it short: never let that pass. */
    if ((ls && strlen(ls) != lsn) || (cs && strlen(cs) != csn)) {
        ipd_reply_code(r, IPD_HE_INVALID_REQUEST,
                       "query values must not contain NUL bytes");
        return false;
    }
    if (ls && ipd_int_parse(ls, 1, IPD_LIST_MAX, limit)) {
        ipd_reply_code(r, IPD_HE_INVALID_REQUEST,
                       "limit must be a whole number from 1 to %d",
                       IPD_LIST_MAX);
        return false;
    }
    if (cs && *cs && !ipd_cursor_parse_kind(cs, kind, c)) {
        ipd_reply_code(r, IPD_HE_INVALID_REQUEST,
                       "cursor is not one this server gave out");
        return false;
    }
    if (cs && *cs)
        *after = c;
    return true;
}

enum ipd_err ipd_list_json_end(struct ipd_buf *b, bool more,
                               int64_t last_created_ms, const char *last_id)
{
    enum ipd_err rc = ipd_buf_adds(b, "],\"next_cursor\":");
    if (!rc && more) {
        char cur[IPD_CURSOR_MAX];
        ipd_cursor_format_id(last_created_ms, last_id, cur);
        rc = ipd_jw_str(b, cur);
    } else if (!rc) {
        rc = ipd_buf_adds(b, "null");
    }
    if (!rc)
        rc = ipd_buf_addch(b, '}');
    return rc;
}

const struct ipd_exec_policy *ipd_req_key_policy(struct ipd_req *r)
{
    return ipd_config_policy(r->app->cfg, r->principal.policy);
}

static bool has_control(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if ((c < 0x20 && c != '\t') || c == 0x7f)
            return true;
    }
    return false;
}

struct header_walk {
    const char *prev_value; /* the previous header's value and length */
    size_t prev_len;
    bool bad;
};

/* Did the value v (n bytes as libmicrohttpd kept it) end where its line
 * ended, or at a NUL inside the line?  libmicrohttpd 0.9.75 keeps header
 * values in its read buffer, each line's CR and LF overwritten with
 * NULs, and stores a value's length as its strlen.  So the next header's
 * name starts one byte after the value (a bare LF) or two (CR LF, both
 * now NULs); anything else is a line that went on past a NUL.  The last
 * header has no next name: its line went on when the byte after its
 * end is not the NUL of a CR or LF.  (A NUL just before the last line's
 * end goes unseen; it cuts nothing, as the value is every byte before
 * it.) */
static bool value_was_cut(const char *v, size_t n, const char *next)
{
    if (!next)
        return v[n + 1] != '\0';
    return next != v + n + 1 && (next != v + n + 2 || v[n + 1] != '\0');
}

/* NEEDSWORK: this reads libmicrohttpd's buffer layout; nul_bytes_elsewhere
 * in tests/integration/test_bad_input.c fails if a new version changes
 * it (a newer libmicrohttpd refuses such lines itself). */
static enum MHD_Result header_bad(void *cls, enum MHD_ValueKind kind,
                                  const char *key, size_t key_size,
                                  const char *value, size_t value_size)
{
    struct header_walk *w = cls;
    (void)kind;
    if (w->prev_value && value_was_cut(w->prev_value, w->prev_len, key))
        w->bad = true;
    if (has_control(key, key_size) || (value && has_control(value, value_size)))
        w->bad = true;
    w->prev_value = value;
    w->prev_len = value ? value_size : 0;
    return w->bad ? MHD_NO : MHD_YES;
}

bool ipd_req_bytes_check(struct ipd_req *r, const char *version)
{
    struct header_walk w = {0};
    /* The version follows the target's end and a space: a target that
     * hid a raw NUL ends sooner. */
    r->bad_path = (r->raw_end && version != r->raw_end + 1) ||
                  (r->raw_path && !ipd_path_valid(r->raw_path));
    MHD_get_connection_values_n(r->conn, MHD_HEADER_KIND, header_bad, &w);
    r->bad_header = w.bad || (w.prev_value &&
                              value_was_cut(w.prev_value, w.prev_len, NULL));
    r->bytes_bad = r->bad_path     ? "its path holds a NUL, a control "
                                     "character, an encoded \"/\" or bytes "
                                     "that are not UTF-8"
                   : r->bad_header ? "a header holds a NUL or a control "
                                     "character other than a tab"
                                   : NULL;
    return !r->bytes_bad;
}

void ipd_req_bytes_refuse(struct ipd_req *r)
{
    if (r->bad_path)
        ipd_reply_code(r, IPD_HE_NOT_FOUND, "no such route: %s (%s)", r->path,
                       r->bytes_bad);
    else
        ipd_reply_code(r, IPD_HE_INVALID_REQUEST, "%s", r->bytes_bad);
}
