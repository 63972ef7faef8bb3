/*
 * varlist.c - a session's variables listing, parsed as untrusted input
 * (see varlist.h).  Pure: the bytes come from session.c.
 */
#include <stdlib.h>
#include <string.h>

#include "varlist.h"

/* A name as the prelude lists them: a Python identifier, checked on its
 * ASCII part (any byte >= 0x80 is taken as part of a letter: jansson has
 * already checked the UTF-8), so nothing a page could read as markup or
 * a separator. */
static bool name_ok(const char *s, size_t n)
{
    if (n == 0 || n > IPD_VARLIST_NAME_MAX || (s[0] >= '0' && s[0] <= '9'))
        return false;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (!(c >= 0x80 || c == '_' || (c >= 'a' && c <= 'z') ||
              (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')))
            return false;
    }
    return true;
}

/* A new string of s cut to max characters (code points of valid UTF-8):
 * the first max - 3 and "..." when it has more. */
static json_t *capped(const char *s, size_t n, size_t max)
{
    size_t chars = 0, keep = n;

    for (size_t i = 0; i < n; i++) {
        if (((unsigned char)s[i] & 0xc0) == 0x80)
            continue;
        if (chars == max - 3)
            keep = i;
        chars++;
    }
    if (chars <= max)
        return json_stringn(s, n);
    char *text = ipd_xmalloc(keep + 3);
    memcpy(text, s, keep);
    memcpy(text + keep, "...", 3);
    json_t *out = json_stringn(text, keep + 3);
    free(text);
    return out;
}

/* The entry e as it is returned, or NULL to leave it out; prev: the name
 * of the last entry kept ("" before the first). */
static json_t *entry(const json_t *e, const char *prev)
{
    const json_t *name = json_object_get(e, "name");
    const json_t *type = json_object_get(e, "type");
    const json_t *repr = json_object_get(e, "repr");

    if (!json_is_object(e) || json_object_size(e) != 3 ||
        !json_is_string(name) || !json_is_string(type) || !json_is_string(repr))
        return NULL;
    const char *n = json_string_value(name);
    size_t nlen = json_string_length(name);
    if (!name_ok(n, nlen) || strlen(n) != nlen || strcmp(n, prev) <= 0)
        return NULL;
    return json_pack("{s:s%,s:o,s:o}", "name", n, nlen, "type",
                     capped(json_string_value(type), json_string_length(type),
                            IPD_VARLIST_TYPE_MAX),
                     "repr",
                     capped(json_string_value(repr), json_string_length(repr),
                            IPD_VARLIST_REPR_MAX));
}

/* The document's shape: exactly "variables" (an array) and "truncated"
 * (a boolean). */
static bool doc_ok(const json_t *doc)
{
    return json_is_object(doc) && json_object_size(doc) == 2 &&
           json_is_array(json_object_get(doc, "variables")) &&
           json_is_boolean(json_object_get(doc, "truncated"));
}

enum ipd_err ipd_varlist_parse(const char *text, size_t len, json_t **out)
{
    json_t *doc = NULL, *list = NULL, *v;
    const char *prev = "";
    bool truncated;
    size_t i;

    *out = NULL;
    if (!text || len > IPD_VARLIST_FILE_MAX)
        return IPD_ERR_INVALID;
    doc = json_loadb(text, len, JSON_REJECT_DUPLICATES, NULL);
    if (!doc_ok(doc)) {
        json_decref(doc);
        return IPD_ERR_INVALID;
    }
    truncated = json_is_true(json_object_get(doc, "truncated"));
    list = json_array();
    json_array_foreach(json_object_get(doc, "variables"), i, v)
    {
        if (json_array_size(list) >= IPD_VARLIST_COUNT_MAX) {
            truncated = true;
            break;
        }
        json_t *kept = entry(v, prev);
        if (!kept) {
            truncated = true;
            continue;
        }
        json_array_append_new(list, kept);
        prev = json_string_value(json_object_get(kept, "name"));
    }
    *out = json_pack("{s:o,s:b}", "variables", list, "truncated", truncated);
    json_decref(doc);
    return IPD_OK;
}
