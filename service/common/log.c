/*
 * log.c - line-atomic logging to stderr.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "log.h"
#include "util.h"

static enum ipd_log_level threshold = IPD_LOG_INFO;
static const char *const names[] = {"debug", "info", "warn", "error"};

enum ipd_err ipd_log_set_level(const char *name)
{
    for (size_t i = 0; i < IPD_ARRAY_LEN(names); i++) {
        if (name && !strcmp(name, names[i])) {
            threshold = (enum ipd_log_level)i;
            return IPD_OK;
        }
    }
    return IPD_ERR_INVALID;
}

void ipd_log(enum ipd_log_level level, const char *fmt, ...)
{
    char line[4096], ts[IPD_TIME_STR];
    if (level < threshold)
        return;
    ipd_time_format(ipd_now_ms(), ts);
    int n = snprintf(line, sizeof(line), "%s %s ", ts, names[level]);
    va_list ap;
    va_start(ap, fmt);
    int m = vsnprintf(line + n, sizeof(line) - (size_t)n - 1, fmt, ap);
    va_end(ap);
    size_t len = (size_t)n + (m < 0 ? 0 : (size_t)m);
    if (len > sizeof(line) - 2)
        len = sizeof(line) - 2;
    line[len++] = '\n';
    /* One write per line: concurrent threads never interleave. */
    ssize_t w = write(STDERR_FILENO, line, len);
    (void)w;
}
