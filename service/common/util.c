/*
 * util.c - ids, clocks, RFC 3339 times, durations, sizes and small
 * validators.
 */
#include <arpa/inet.h>
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <unistd.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <netinet/in.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>

#include "buf.h"
#include "util.h"

void ipd_random_bytes(void *buf, size_t n)
{
    unsigned char *p = buf;
    while (n) {
        ssize_t r = getrandom(p, n, 0);
        if (r < 0 && errno == EINTR)
            continue;
        /* No entropy means no safe ids or keys: refuse to go on. */
        IPD_ASSERT(r > 0);
        p += r;
        n -= (size_t)r;
    }
}

static const char base32[] = "abcdefghijklmnopqrstuvwxyz234567";

void ipd_id_new(const char *prefix, char out[IPD_ID_MAX])
{
    unsigned char rnd[16];
    size_t plen = strlen(prefix);
    IPD_ASSERT(plen + 1 + IPD_ID_RANDOM_CHARS < IPD_ID_MAX);
    ipd_random_bytes(rnd, sizeof(rnd));
    memcpy(out, prefix, plen);
    out[plen] = '_';
    char *p = out + plen + 1;
    /* 128 bits as 26 base32 digits, five bits at a time. */
    unsigned int acc = 0, bits = 0;
    size_t i = 0, k = 0;
    while (k < IPD_ID_RANDOM_CHARS) {
        if (bits < 5) {
            acc = (acc << 8) | (i < sizeof(rnd) ? rnd[i] : 0);
            i++;
            bits += 8;
        }
        p[k++] = base32[(acc >> (bits - 5)) & 31];
        bits -= 5;
    }
    p[k] = '\0';
}

bool ipd_id_valid(const char *prefix, const char *s)
{
    size_t plen = strlen(prefix);
    if (!s || strncmp(s, prefix, plen) != 0 || s[plen] != '_')
        return false;
    s += plen + 1;
    size_t n = 0;
    for (; s[n]; n++)
        if (!memchr(base32, s[n], sizeof(base32) - 1))
            return false;
    return n == IPD_ID_RANDOM_CHARS;
}

int64_t ipd_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int64_t ipd_mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

struct timespec ipd_deadline_after(clockid_t clock, int64_t ms)
{
    struct timespec ts;

    clock_gettime(clock, &ts);
    ts.tv_sec += (time_t)(ms / 1000);
    ts.tv_nsec += (long)(ms % 1000) * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    return ts;
}

static char *put2(char *p, int v)
{
    p[0] = (char)('0' + v / 10 % 10);
    p[1] = (char)('0' + v % 10);
    return p + 2;
}

void ipd_time_format(int64_t ms, char out[IPD_TIME_STR])
{
    time_t t = (time_t)(ms / 1000);
    struct tm tm;
    /* By hand rather than strftime: file lists format two per file. */
    if (!gmtime_r(&t, &tm) || tm.tm_year + 1900 < 0 ||
        tm.tm_year + 1900 > 9999) {
        snprintf(out, IPD_TIME_STR, "1970-01-01T00:00:00Z");
        return;
    }
    int y = tm.tm_year + 1900;
    char *p = put2(out, y / 100);
    p = put2(p, y % 100);
    *p++ = '-';
    p = put2(p, tm.tm_mon + 1);
    *p++ = '-';
    p = put2(p, tm.tm_mday);
    *p++ = 'T';
    p = put2(p, tm.tm_hour);
    *p++ = ':';
    p = put2(p, tm.tm_min);
    *p++ = ':';
    p = put2(p, tm.tm_sec);
    *p++ = 'Z';
    *p = '\0';
}

enum ipd_err ipd_time_parse(const char *s, int64_t *ms)
{
    struct tm tm;
    memset(&tm, 0, sizeof(tm));
    const char *end = strptime(s, "%Y-%m-%dT%H:%M:%S", &tm);
    if (!end)
        return IPD_ERR_INVALID;
    int64_t frac = 0;
    if (*end == '.') {
        int digits = 0;
        for (end++; isdigit((unsigned char)*end); end++, digits++)
            if (digits < 3)
                frac = frac * 10 + (*end - '0');
        if (!digits)
            return IPD_ERR_INVALID;
        for (; digits < 3; digits++)
            frac *= 10;
    }
    if (strcmp(end, "Z") != 0)
        return IPD_ERR_INVALID;
    time_t t = timegm(&tm);
    if (t == (time_t)-1)
        return IPD_ERR_INVALID;
    *ms = (int64_t)t * 1000 + frac;
    return IPD_OK;
}

enum ipd_err ipd_int_parse(const char *s, int64_t min, int64_t max,
                           int64_t *out)
{
    if (!s || !*s || isspace((unsigned char)*s))
        return IPD_ERR_INVALID;
    char *end = NULL;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || *end || v < min || v > max)
        return IPD_ERR_INVALID;
    *out = v;
    return IPD_OK;
}

/* A non-negative decimal number followed by a unit from the table. */
struct unit {
    const char *name;
    int64_t mult;
};

static enum ipd_err parse_with_unit(const char *s, const struct unit *units,
                                    int64_t *out)
{
    if (!s || !isdigit((unsigned char)*s))
        return IPD_ERR_INVALID;
    char *end = NULL;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno)
        return IPD_ERR_INVALID;
    for (const struct unit *u = units; u->name; u++) {
        if (strcasecmp(end, u->name) != 0)
            continue;
        if (v > (unsigned long long)(INT64_MAX / u->mult))
            return IPD_ERR_INVALID;
        *out = (int64_t)v * u->mult;
        return IPD_OK;
    }
    return IPD_ERR_INVALID;
}

enum ipd_err ipd_duration_parse(const char *s, int64_t *ms)
{
    static const struct unit units[] = {
        {"", 1000},         {"ms", 1},           {"s", 1000}, {"m", 60 * 1000},
        {"h", 3600 * 1000}, {"d", 86400 * 1000}, {NULL, 0}};
    if (s && strcasecmp(s, "never") == 0) {
        *ms = IPD_TIME_NEVER;
        return IPD_OK;
    }
    return parse_with_unit(s, units, ms);
}

enum ipd_err ipd_size_parse(const char *s, int64_t *bytes)
{
    static const struct unit units[] = {{"", 1},
                                        {"b", 1},
                                        {"k", 1024},
                                        {"kb", 1024},
                                        {"kib", 1024},
                                        {"m", 1024 * 1024},
                                        {"mb", 1024 * 1024},
                                        {"mib", 1024 * 1024},
                                        {"g", 1024 * 1024 * 1024},
                                        {"gb", 1024 * 1024 * 1024},
                                        {"gib", 1024 * 1024 * 1024},
                                        {"t", 1024LL * 1024 * 1024 * 1024},
                                        {"tb", 1024LL * 1024 * 1024 * 1024},
                                        {"tib", 1024LL * 1024 * 1024 * 1024},
                                        {NULL, 0}};
    return parse_with_unit(s, units, bytes);
}

static bool all_in(const char *s, size_t max, const char *extra)
{
    size_t n = 0;
    if (!s)
        return false;
    for (; s[n]; n++) {
        unsigned char c = (unsigned char)s[n];
        if (n >= max)
            return false;
        if (!(isascii(c) && isalnum(c)) && !strchr(extra, c))
            return false;
    }
    return n >= 1;
}

bool ipd_user_id_valid(const char *s)
{
    return all_in(s, 128, "_.@:-");
}

bool ipd_tenant_valid(const char *s)
{
    return all_in(s, 64, "_.-");
}

size_t ipd_utf8_char(const char *str, size_t len)
{
    const unsigned char *s = (const unsigned char *)str;
    size_t n;
    uint32_t cp;
    if (!len)
        return 0;
    if (s[0] < 0x80)
        return 1;
    if ((s[0] & 0xE0) == 0xC0) {
        n = 1;
        cp = s[0] & 0x1F;
    } else if ((s[0] & 0xF0) == 0xE0) {
        n = 2;
        cp = s[0] & 0x0F;
    } else if ((s[0] & 0xF8) == 0xF0) {
        n = 3;
        cp = s[0] & 0x07;
    } else {
        return 0;
    }
    if (len <= n)
        return 0;
    for (size_t k = 1; k <= n; k++) {
        if ((s[k] & 0xC0) != 0x80)
            return 0;
        cp = (cp << 6) | (s[k] & 0x3F);
    }
    if ((n == 1 && cp < 0x80) || (n == 2 && cp < 0x800) ||
        (n == 3 && cp < 0x10000) || cp > 0x10FFFF ||
        (cp >= 0xD800 && cp <= 0xDFFF))
        return 0;
    return n + 1;
}

bool ipd_utf8_valid(const char *s, size_t len)
{
    size_t i = 0;
    while (i < len) {
        size_t n = ipd_utf8_char(s + i, len - i);
        if (!n)
            return false;
        i += n;
    }
    return true;
}

size_t ipd_utf8_lossy(char *dst, size_t dstsz, const char *src, size_t len)
{
    static const char repl[] = "\xef\xbf\xbd"; /* U+FFFD */
    size_t i = 0, o = 0;
    IPD_ASSERT(dstsz > 0);
    while (i < len) {
        size_t n = ipd_utf8_char(src + i, len - i);
        const char *from = n ? src + i : repl;
        size_t k = n ? n : sizeof(repl) - 1;
        if (n == 1 && src[i] == '\0')
            from = repl, k = sizeof(repl) - 1;
        if (o + k >= dstsz)
            break; /* cut on a character boundary */
        memcpy(dst + o, from, k);
        o += k;
        i += n ? n : 1;
    }
    dst[o] = '\0';
    return o;
}

int ipd_hex_value(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

void ipd_hex(const void *data, size_t n, char *out)
{
    static const char digits[] = "0123456789abcdef";
    const unsigned char *p = data;
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = digits[p[i] >> 4];
        out[2 * i + 1] = digits[p[i] & 15];
    }
    out[2 * n] = '\0';
}

/* rm -rf name below dirfd, never following a symlink. */
static int remove_tree(int dirfd, const char *name, int depth)
{
    int rc = 0;
    if (!unlinkat(dirfd, name, 0) || errno == ENOENT)
        return 0;
    if (depth > IPD_REMOVE_TREE_DEPTH)
        return -1;
    int fd =
        openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return -1;
    DIR *d = fdopendir(fd);
    if (!d) {
        close(fd);
        return -1;
    }
    struct dirent *e;
    while ((e = ipd_readdir(d)) != NULL) {
        if (remove_tree(fd, e->d_name, depth + 1))
            rc = -1;
    }
    closedir(d);
    if (unlinkat(dirfd, name, AT_REMOVEDIR) && errno != ENOENT)
        rc = -1;
    return rc;
}

int ipd_remove_tree_at(int dirfd, const char *name)
{
    return remove_tree(dirfd, name, 0);
}

enum ipd_err ipd_copy_fd(int in, int out, int64_t *copied)
{
    char buf[64 * 1024];
    *copied = 0;
    for (;;) {
        ssize_t n = copy_file_range(in, NULL, out, NULL, 1 << 30, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EXDEV || errno == EINVAL || errno == ENOSYS ||
                      errno == EOPNOTSUPP))
            break; /* fall back to read/write below */
        if (n < 0)
            return IPD_ERR_IO;
        if (n == 0)
            return IPD_OK;
        *copied += n;
    }
    for (;;) {
        ssize_t n = read(in, buf, sizeof(buf));
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return IPD_ERR_IO;
        if (n == 0)
            return IPD_OK;
        if (ipd_write_all(out, buf, (size_t)n))
            return IPD_ERR_IO;
        *copied += n;
    }
}

enum ipd_err ipd_listen_parse(const char *s, struct sockaddr_storage *ss,
                              socklen_t *len, bool *v6)
{
    char host[256];
    const char *colon = strrchr(s, ':');
    int64_t port = 0;
    if (!colon || (size_t)(colon - s) >= sizeof(host))
        return IPD_ERR_INVALID;
    memcpy(host, s, (size_t)(colon - s));
    host[colon - s] = '\0';
    if (ipd_int_parse(colon + 1, 0, 65535, &port))
        return IPD_ERR_INVALID;
    memset(ss, 0, sizeof(*ss));
    size_t hl = strlen(host);
    if (hl >= 2 && host[0] == '[' && host[hl - 1] == ']') {
        struct sockaddr_in6 *a = (struct sockaddr_in6 *)ss;
        host[hl - 1] = '\0';
        a->sin6_family = AF_INET6;
        a->sin6_port = htons((uint16_t)port);
        if (inet_pton(AF_INET6, host + 1, &a->sin6_addr) != 1)
            return IPD_ERR_INVALID;
        *len = sizeof(*a);
        *v6 = true;
        return IPD_OK;
    }
    struct sockaddr_in *a = (struct sockaddr_in *)ss;
    a->sin_family = AF_INET;
    a->sin_port = htons((uint16_t)port);
    if (!strcmp(host, "localhost"))
        memcpy(host, "127.0.0.1", 10);
    if (!*host || !strcmp(host, "*"))
        a->sin_addr.s_addr = htonl(INADDR_ANY);
    else if (inet_pton(AF_INET, host, &a->sin_addr) != 1)
        return IPD_ERR_INVALID;
    *len = sizeof(*a);
    *v6 = false;
    return IPD_OK;
}

char *ipd_redact_uri(const char *uri)
{
    struct ipd_buf b;
    ipd_buf_init(&b, IPD_BUF_UNLIMITED);
    const char *scheme = strstr(uri, "://");
    const char *start = scheme ? scheme + 3 : uri;
    const char *at = strchr(start, '@');
    const char *slash = strchr(start, '/');
    const char *colon = strchr(start, ':');
    if (at && (!slash || at < slash) && colon && colon < at) {
        ipd_buf_add(&b, uri, (size_t)(colon - uri + 1));
        ipd_buf_adds(&b, "****");
        ipd_buf_adds(&b, at);
    } else {
        ipd_buf_adds(&b, uri);
    }
    return ipd_buf_detach(&b, NULL);
}

void ipd_close_fd(int *fd)
{
    if (*fd >= 0)
        close(*fd);
    *fd = -1;
}

DIR *ipd_fdopendir(int fd)
{
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    int saved = errno;

    if (!d && fd >= 0) {
        close(fd);
        errno = saved;
    }
    return d;
}

struct dirent *ipd_readdir(DIR *d)
{
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
            break;
    return e;
}

enum ipd_err ipd_write_all(int fd, const void *data, size_t len)
{
    const char *p = data;
    while (len) {
        ssize_t n = write(fd, p, len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            /* Nothing written without an error: take it as a full
             * device, so callers can read errno either way. */
            if (!n)
                errno = ENOSPC;
            return IPD_ERR_IO;
        }
        p += n;
        len -= (size_t)n;
    }
    return IPD_OK;
}
