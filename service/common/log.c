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
    char out[sizeof(line) * 4 + 2];
    size_t o = ipd_log_escape(out, sizeof(out) - 1, line, len);
    out[o++] = '\n';
    /* One write per line: concurrent threads never interleave. */
    ssize_t w = write(STDERR_FILENO, out, o);
    (void)w;
}

void ipd_log_lines(enum ipd_log_level level, const char *prefix,
                   const char *text, size_t len, size_t max_lines)
{
    size_t shown = 0, more = 0;
    if (level < threshold)
        return;
    for (size_t i = 0; i < len;) {
        const char *nl = memchr(text + i, '\n', len - i);
        size_t n = nl ? (size_t)(nl - (text + i)) : len - i;
        size_t m = n;
        while (m && text[i + m - 1] == '\r')
            m--;
        if (m && shown < max_lines) {
            ipd_log(level, "%s%.*s", prefix, (int)m, text + i);
            shown++;
        } else if (m) {
            more++;
        }
        i += n + 1;
    }
    if (more)
        ipd_log(level, "%s(%zu more lines not shown)", prefix, more);
}

size_t ipd_log_escape(char *out, size_t outsz, const char *s, size_t len)
{
    static const char hex[] = "0123456789abcdef";
    size_t i = 0, o = 0;
    while (i < len) {
        size_t n = ipd_utf8_char(s + i, len - i);
        unsigned char c = (unsigned char)s[i];
        if (n > 1 || (n == 1 && c >= 0x20 && c != 0x7f)) {
            if (o + n > outsz)
                break;
            memcpy(out + o, s + i, n);
            o += n;
            i += n;
            continue;
        }
        /* A control character or a byte of no character: shown, never
         * obeyed (no forged lines, no terminal escapes). */
        if (o + 4 > outsz)
            break;
        out[o++] = '\\';
        out[o++] = 'x';
        out[o++] = hex[c >> 4];
        out[o++] = hex[c & 15];
        i++;
    }
    return o;
}
