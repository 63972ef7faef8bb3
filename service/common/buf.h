/*
 * buf.h - the one growable byte buffer.
 *
 * Invariants: after ipd_buf_init, buf is never NULL and always
 * NUL-terminated (buf[len] == 0); len never exceeds max.  Appending past max
 * fails with IPD_ERR_TOO_LARGE and leaves the buffer unchanged.
 */
#ifndef IPD_BUF_H
#define IPD_BUF_H

#include <stdarg.h>
#include <stddef.h>

#include "ipd.h"

struct ipd_buf {
    char *buf;    /* never NULL after init; NUL-terminated */
    size_t len;   /* bytes used, not counting the NUL */
    size_t alloc; /* bytes allocated; 0 while buf points at a static "" */
    size_t max;   /* hard limit on len */
};

#define IPD_BUF_UNLIMITED ((size_t)-1 / 2)

/* Initialise an empty buffer that may grow to max bytes. */
void ipd_buf_init(struct ipd_buf *b, size_t max);
/* Free the storage and re-initialise to empty (keeps max). */
void ipd_buf_release(struct ipd_buf *b);
/* Empty the buffer, keep its storage. */
void ipd_buf_reset(struct ipd_buf *b);

enum ipd_err ipd_buf_add(struct ipd_buf *b, const void *data, size_t len);
enum ipd_err ipd_buf_adds(struct ipd_buf *b, const char *s);
enum ipd_err ipd_buf_addch(struct ipd_buf *b, char c);
enum ipd_err ipd_buf_addf(struct ipd_buf *b, const char *fmt, ...)
    IPD_PRINTF(2, 3);
enum ipd_err ipd_buf_vaddf(struct ipd_buf *b, const char *fmt, va_list ap)
    IPD_PRINTF(2, 0);
/* Append a printf-style message to b when b is not NULL, and return rc:
 * the one-line "say why and fail" of functions with an optional err. */
enum ipd_err ipd_buf_fail(struct ipd_buf *b, enum ipd_err rc, const char *fmt,
                          ...) IPD_PRINTF(3, 4);

/* Hand the storage to the caller, who now owns it (free()); the buffer is
 * re-initialised to empty.  Never returns NULL. */
char *ipd_buf_detach(struct ipd_buf *b, size_t *len);

#endif
