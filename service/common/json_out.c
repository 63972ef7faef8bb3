/*
 * json_out.c - direct JSON writing (see json_out.h).
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "util.h"
#include "json_out.h"

enum ipd_err ipd_jw_str(struct ipd_buf *b, const char *s)
{
    enum ipd_err rc = ipd_buf_addch(b, '"');
    const unsigned char *p = (const unsigned char *)s, *run = p;
    while (!rc && *p) {
        const char *esc = NULL;
        char u[8];
        if (*p == '"')
            esc = "\\\"";
        else if (*p == '\\')
            esc = "\\\\";
        else if (*p == '\n')
            esc = "\\n";
        else if (*p == '\t')
            esc = "\\t";
        else if (*p == '\r')
            esc = "\\r";
        else if (*p < 0x20 || *p == 0x7f) {
            snprintf(u, sizeof(u), "\\u%04x", *p);
            esc = u;
        } else if (p[0] == 0xe2 && p[1] == 0x80 &&
                   (p[2] == 0xa8 || p[2] == 0xa9)) {
            /* Line and paragraph separators end lines in JavaScript. */
            snprintf(u, sizeof(u), "\\u%04x", p[2] == 0xa8 ? 0x2028 : 0x2029);
            esc = u;
            rc = ipd_buf_add(b, run, (size_t)(p - run));
            if (!rc)
                rc = ipd_buf_adds(b, esc);
            p += 3;
            run = p;
            continue;
        }
        if (!esc) {
            p++;
            continue;
        }
        rc = ipd_buf_add(b, run, (size_t)(p - run));
        if (!rc)
            rc = ipd_buf_adds(b, esc);
        p++;
        run = p;
    }
    if (!rc)
        rc = ipd_buf_add(b, run, (size_t)(p - run));
    if (!rc)
        rc = ipd_buf_addch(b, '"');
    return rc;
}

enum ipd_err ipd_jw_key(struct ipd_buf *b, const char *key)
{
    return ipd_buf_addf(b, "\"%s\":", key);
}

enum ipd_err ipd_jw_time(struct ipd_buf *b, int64_t ms)
{
    char t[IPD_TIME_STR + 2];
    if (ms == IPD_TIME_NEVER)
        return ipd_buf_adds(b, "null");
    t[0] = '"';
    ipd_time_format(ms, t + 1);
    size_t n = strlen(t);
    t[n] = '"';
    return ipd_buf_add(b, t, n + 1);
}

json_t *ipd_json_time(int64_t ms)
{
    char t[IPD_TIME_STR];
    if (ms == IPD_TIME_NEVER)
        return json_null();
    ipd_time_format(ms, t);
    return json_string(t);
}

enum ipd_err ipd_jw_int(struct ipd_buf *b, int64_t v)
{
    char d[24], *p = d + sizeof(d);
    uint64_t u = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
    do {
        *--p = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    if (v < 0)
        *--p = '-';
    return ipd_buf_add(b, p, (size_t)(d + sizeof(d) - p));
}
