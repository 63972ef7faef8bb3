/*
 * buf.c - the growable buffer (see buf.h for the invariants).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "buf.h"

static char empty_buf[1];

void ipd_buf_init(struct ipd_buf *b, size_t max)
{
    b->buf = empty_buf;
    b->len = 0;
    b->alloc = 0;
    b->max = max;
}

void ipd_buf_release(struct ipd_buf *b)
{
    if (b->alloc)
        free(b->buf);
    ipd_buf_init(b, b->max);
}

void ipd_buf_reset(struct ipd_buf *b)
{
    b->len = 0;
    b->buf[0] = '\0';
}

/* Make room for extra more bytes plus the NUL. */
static enum ipd_err grow(struct ipd_buf *b, size_t extra)
{
    if (extra > b->max - b->len)
        return IPD_ERR_TOO_LARGE;
    size_t need = b->len + extra + 1;
    if (need <= b->alloc)
        return IPD_OK;
    size_t n = b->alloc ? b->alloc : 64;
    while (n < need)
        n = n < SIZE_MAX / 2 ? n * 2 : need;
    char *p = realloc(b->alloc ? b->buf : NULL, n);
    if (!p)
        return IPD_ERR_NOMEM;
    if (!b->alloc)
        p[0] = '\0';
    b->buf = p;
    b->alloc = n;
    return IPD_OK;
}

enum ipd_err ipd_buf_add(struct ipd_buf *b, const void *data, size_t len)
{
    enum ipd_err rc = grow(b, len);
    if (rc)
        return rc;
    if (len)
        memcpy(b->buf + b->len, data, len);
    b->len += len;
    b->buf[b->len] = '\0';
    return IPD_OK;
}

enum ipd_err ipd_buf_adds(struct ipd_buf *b, const char *s)
{
    return ipd_buf_add(b, s, strlen(s));
}

enum ipd_err ipd_buf_addch(struct ipd_buf *b, char c)
{
    return ipd_buf_add(b, &c, 1);
}

enum ipd_err ipd_buf_vaddf(struct ipd_buf *b, const char *fmt, va_list ap)
{
    va_list cp;
    va_copy(cp, ap);
    int n = vsnprintf(NULL, 0, fmt, cp);
    va_end(cp);
    if (n < 0)
        return IPD_ERR_INVALID;
    enum ipd_err rc = grow(b, (size_t)n);
    if (rc)
        return rc;
    vsnprintf(b->buf + b->len, (size_t)n + 1, fmt, ap);
    b->len += (size_t)n;
    return IPD_OK;
}

enum ipd_err ipd_buf_addf(struct ipd_buf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    enum ipd_err rc = ipd_buf_vaddf(b, fmt, ap);
    va_end(ap);
    return rc;
}

char *ipd_buf_detach(struct ipd_buf *b, size_t *len)
{
    char *p = b->alloc ? b->buf : ipd_xstrdup("");
    if (len)
        *len = b->len;
    ipd_buf_init(b, b->max);
    return p;
}

enum ipd_err ipd_buf_fail(struct ipd_buf *b, enum ipd_err rc, const char *fmt,
                          ...)
{
    if (b) {
        va_list ap;
        va_start(ap, fmt);
        ipd_buf_vaddf(b, fmt, ap);
        va_end(ap);
    }
    return rc;
}
