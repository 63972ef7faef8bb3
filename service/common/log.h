/*
 * log.h - one line per event on stderr: "<RFC 3339 time> <level> <text>".
 * Lines are written with a single write(2), so threads never interleave.
 */
#ifndef IPD_LOG_H
#define IPD_LOG_H

#include <stddef.h>

#include "ipd.h"

enum ipd_log_level { IPD_LOG_DEBUG, IPD_LOG_INFO, IPD_LOG_WARN, IPD_LOG_ERROR };

/* Set the threshold from a name; IPD_ERR_INVALID for an unknown name. */
enum ipd_err ipd_log_set_level(const char *name);
/* Every line is escaped with ipd_log_escape: whatever a message carries
 * (a request's path, a client's filename), it stays one line and sends
 * no terminal escapes. */
void ipd_log(enum ipd_log_level level, const char *fmt, ...) IPD_PRINTF(2, 3);
/* s[0..len) into out (at most outsz bytes, not NUL-terminated) with each
 * control character (C0, DEL) and each byte that starts no well-formed
 * UTF-8 character written as \xNN; stops before a piece that does not
 * fit.  Returns the bytes written. */
size_t ipd_log_escape(char *out, size_t outsz, const char *s, size_t len);

#define ipd_debug(...) ipd_log(IPD_LOG_DEBUG, __VA_ARGS__)
#define ipd_info(...) ipd_log(IPD_LOG_INFO, __VA_ARGS__)
#define ipd_warn(...) ipd_log(IPD_LOG_WARN, __VA_ARGS__)
#define ipd_error(...) ipd_log(IPD_LOG_ERROR, __VA_ARGS__)

#endif
