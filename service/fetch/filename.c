/*
 * filename.c - filename.h, and the other source of a fetched body's name:
 * the last segment of the URL's path.  Pure: no libcurl, no network;
 * fetch_curl.c asks the final answer's header and URL, this reads them.
 */
#include <stdbool.h>
#include <string.h>

#include "../common/util.h"
#include "fetch_internal.h"
#include "filename.h"

#define CD_HEADER_MAX (16 * 1024) /* longer Content-Disposition: refused */

static const char *skip_ows(const char *p)
{
    while (*p == ' ' || *p == '\t')
        p++;
    return p;
}

/*
 * Read one parameter value at p: a quoted-string (escapes undone) or,
 * leniently as browsers do, everything up to ';' less trailing blanks.
 * Copies into dst when dst is not NULL; *end is set after the value.
 */
static enum ipd_err cd_value(const char *p, char *dst, size_t dstsz,
                             const char **end)
{
    enum ipd_err rc = IPD_OK;
    size_t n = 0;
    const char *s, *e;
    if (*p == '"') {
        for (p++; *p != '"'; p++) {
            if (!*p) {
                rc = IPD_ERR_INVALID; /* unterminated quoted-string */
                break;
            }
            if (*p == '\\' && p[1])
                p++;
            if (dst && n + 1 < dstsz)
                dst[n++] = *p;
            else if (dst)
                rc = IPD_ERR_TOO_LARGE;
        }
        if (*p == '"')
            p++;
    } else {
        s = p;
        p += strcspn(p, ";");
        for (e = p; e > s && (e[-1] == ' ' || e[-1] == '\t');)
            e--;
        for (; s < e; s++) {
            if (dst && n + 1 < dstsz)
                dst[n++] = *s;
            else if (dst)
                rc = IPD_ERR_TOO_LARGE;
        }
    }
    if (dst && dstsz)
        dst[n] = 0;
    *end = p;
    return rc;
}

/* Append one byte, growing nothing: TOO_LARGE when out is full. */
static enum ipd_err put(char *out, size_t outsz, size_t *n, unsigned char c)
{
    if (*n + 1 >= outsz)
        return IPD_ERR_TOO_LARGE;
    out[(*n)++] = (char)c;
    return IPD_OK;
}

/* RFC 5987 ext-value: charset'language'pct-encoded, into UTF-8. */
static enum ipd_err cd_ext(const char *val, size_t hlen, char *out,
                           size_t outsz)
{
    char *raw = ipd_xmalloc(hlen + 1);
    const char *end, *p, *q;
    size_t n = 0;
    bool latin1 = false;
    enum ipd_err rc = cd_value(val, raw, hlen + 1, &end);
    if (rc)
        goto out;
    p = strchr(raw, '\'');
    q = p ? strchr(p + 1, '\'') : NULL;
    if (!q) {
        rc = IPD_ERR_INVALID;
        goto out;
    }
    if ((size_t)(p - raw) == 10 && !strncasecmp(raw, "ISO-8859-1", 10))
        latin1 = true;
    else if ((size_t)(p - raw) != 5 || strncasecmp(raw, "UTF-8", 5) != 0) {
        rc = IPD_ERR_INVALID; /* a charset we don't convert */
        goto out;
    }
    for (p = q + 1; *p && !rc; p++) {
        unsigned char c = (unsigned char)*p;
        if (c == '%') {
            int hi = ipd_hex_value(p[1]),
                lo = hi < 0 ? -1 : ipd_hex_value(p[2]);
            if (lo < 0 || (hi | lo) == 0) {
                rc = IPD_ERR_INVALID; /* bad escape, or NUL */
                break;
            }
            c = (unsigned char)(hi << 4 | lo);
            p += 2;
        }
        if (latin1 && c >= 0x80) {
            rc = put(out, outsz, &n, (unsigned char)(0xc0 | c >> 6));
            if (!rc)
                rc = put(out, outsz, &n, (unsigned char)(0x80 | (c & 0x3f)));
        } else {
            rc = put(out, outsz, &n, c);
        }
    }
    if (rc)
        goto out;
    out[n] = 0;
    if (!n)
        rc = IPD_ERR_NOT_FOUND;
    else if (!ipd_utf8_valid(out, n))
        rc = IPD_ERR_INVALID;
out:
    if (rc && outsz)
        out[0] = 0;
    free(raw);
    return rc;
}

enum ipd_err ipd_content_disposition_filename(const char *header, char *out,
                                              size_t outsz)
{
    const char *p, *q, *plain = NULL, *ext = NULL;
    enum ipd_err rc = IPD_ERR_NOT_FOUND, bad_plain = IPD_OK;
    size_t hlen;

    if (!outsz)
        return IPD_ERR_TOO_LARGE;
    out[0] = 0;
    if (!header)
        return IPD_ERR_NOT_FOUND;
    hlen = strlen(header);
    if (hlen > CD_HEADER_MAX)
        return IPD_ERR_TOO_LARGE;

    /* The disposition type, unless the value starts with a parameter. */
    p = skip_ows(header);
    for (q = p; ipd__fetch_is_tchar((unsigned char)*q);)
        q++;
    if (*skip_ows(q) != '=')
        p = q;

    while (*p) {
        p = skip_ows(p);
        if (*p == ';') {
            p++;
            continue;
        }
        if (!*p)
            break;
        const char *name = p;
        while (ipd__fetch_is_tchar((unsigned char)*p))
            p++;
        size_t nlen = (size_t)(p - name);
        p = skip_ows(p);
        if (!nlen || *p != '=') {
            /* Junk: skip to the next parameter. */
            p += strcspn(p, ";");
            continue;
        }
        p = skip_ows(p + 1);
        const char *val = p;
        enum ipd_err vrc = cd_value(p, NULL, 0, &p);
        if (nlen == 8 && !strncasecmp(name, "filename", 8) && !plain) {
            plain = val;
            bad_plain = vrc;
        } else if (nlen == 9 && !strncasecmp(name, "filename*", 9) && !ext) {
            ext = val;
        }
    }

    if (ext) {
        rc = cd_ext(ext, hlen, out, outsz);
        if (!rc)
            return IPD_OK;
    }
    if (plain) {
        const char *end;
        rc = bad_plain ? bad_plain : cd_value(plain, out, outsz, &end);
        if (!rc && !out[0])
            rc = IPD_ERR_NOT_FOUND;
        if (rc)
            out[0] = 0;
    }
    return rc;
}

/* Percent-decode the last segment of a URL path; NULL when empty.
 * Lenient: a '%' that starts no escape stays as it is. */
char *ipd__fetch_path_filename(const char *path)
{
    const char *seg = strrchr(path, '/');
    seg = seg ? seg + 1 : path;
    size_t len = strlen(seg);
    char *out;
    size_t n = 0;
    if (!len || len > IPD__FETCH_FILENAME_MAX)
        return NULL;
    out = ipd_xmalloc(len + 1);
    for (const char *p = seg; *p; p++) {
        int hi = *p == '%' ? ipd_hex_value(p[1]) : -1;
        int lo = hi < 0 ? -1 : ipd_hex_value(p[2]);
        if (lo >= 0) {
            if (!(hi | lo)) { /* %00 */
                free(out);
                return NULL;
            }
            out[n++] = (char)(hi << 4 | lo);
            p += 2;
        } else {
            out[n++] = *p;
        }
    }
    out[n] = 0;
    return out;
}
