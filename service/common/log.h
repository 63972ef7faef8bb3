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
/* Multi-line text (a tool's stderr, a listing) logged one line per line
 * of it, each "<prefix><line>" at level, so every line of the log keeps
 * the "<time> <level> <text>" shape: CR and blank lines dropped, at most
 * max_lines lines, then one that says how many more there were.  Each
 * line is escaped as ipd_log escapes (a control character inside a line
 * stays \xNN).  prefix and text stay the caller's. */
void ipd_log_lines(enum ipd_log_level level, const char *prefix,
                   const char *text, size_t len, size_t max_lines);
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
