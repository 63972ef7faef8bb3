/*
 * json_out.h - write JSON text straight into a buffer, for hot responses
 * (file lists) where building a jansson tree costs most of the request.
 * The caller writes the structure ('{', ',', keys); these helpers write
 * values.  All append to b; on a full buffer they return its error.
 */
#ifndef IPD_JSON_OUT_H
#define IPD_JSON_OUT_H

#include <stdint.h>

#include <jansson.h>

#include "buf.h"

/* How every JSON answer is written (jansson's json_dumps flags): one
 * line, ASCII, reals to 12 digits.  A streamed result is the same text. */
#define IPD_JSON_REPLY_FLAGS                                                   \
    (JSON_COMPACT | JSON_ENSURE_ASCII | JSON_REAL_PRECISION(12))

/* A JSON string for the UTF-8 text s: quotes, backslashes, control
 * characters and U+2028/U+2029 escaped; other UTF-8 passes through. */
enum ipd_err ipd_jw_str(struct ipd_buf *b, const char *s);
/* "key": (key is trusted ASCII) */
enum ipd_err ipd_jw_key(struct ipd_buf *b, const char *key);
/* An RFC 3339 time string, or null for IPD_TIME_NEVER. */
enum ipd_err ipd_jw_time(struct ipd_buf *b, int64_t ms);
/* The same time as a jansson value: a string, or null for
 * IPD_TIME_NEVER.  New reference. */
json_t *ipd_json_time(int64_t ms);
/* A decimal integer. */
enum ipd_err ipd_jw_int(struct ipd_buf *b, int64_t v);

#endif
