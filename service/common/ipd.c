/*
 * ipd.c - assertions and the aborting allocator.
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "ipd.h"

const char *ipd_err_name(enum ipd_err err)
{
    switch (err) {
    case IPD_OK: return "ok";
    case IPD_ERR_NOMEM: return "out_of_memory";
    case IPD_ERR_IO: return "io_error";
    case IPD_ERR_INVALID: return "invalid";
    case IPD_ERR_NOT_FOUND: return "not_found";
    case IPD_ERR_CONFLICT: return "conflict";
    case IPD_ERR_TOO_LARGE: return "too_large";
    case IPD_ERR_QUOTA: return "quota_exceeded";
    case IPD_ERR_UNAVAILABLE: return "unavailable";
    case IPD_ERR_INTERNAL: return "internal";
    case IPD_ERR_UNAUTHORIZED: return "unauthorized";
    case IPD_ERR_FORBIDDEN: return "forbidden";
    case IPD_ERR_MEDIA_TYPE: return "unsupported_media_type";
    case IPD_ERR_TIMEOUT: return "timeout";
    case IPD_ERR_BUSY: return "busy";
    case IPD_ERR_UPSTREAM: return "upstream_error";
    case IPD_ERR_UPSTREAM_TIMEOUT: return "upstream_timeout";
    case IPD_ERR_NO_SPACE: return "no_space";
    case IPD_ERR_GONE: return "gone";
    case IPD_ERR_IN_USE: return "in_use";
    }
    return "unknown";
}

void ipd__assert_fail(const char *expr, const char *file, int line)
{
    ipd_error("assertion failed: %s (%s:%d)", expr, file, line);
    abort();
}

/* Failure injection: IPD_FAIL_ALLOC_AT=N makes the Nth allocation fail. */
static long fail_at = -1;
static atomic_long alloc_count;

static void check_injected_failure(void)
{
    static atomic_int loaded;
    if (!atomic_load(&loaded)) {
        const char *s = getenv("IPD_FAIL_ALLOC_AT");
        fail_at = s ? strtol(s, NULL, 10) : -1;
        atomic_store(&loaded, 1);
    }
    if (fail_at > 0 && atomic_fetch_add(&alloc_count, 1) + 1 == fail_at) {
        ipd_error("injected allocation failure");
        abort();
    }
}

static void *oom(size_t size)
{
    ipd_error("out of memory allocating %zu bytes", size);
    abort();
}

void *ipd_xmalloc(size_t size)
{
    check_injected_failure();
    void *p = malloc(size ? size : 1);
    return p ? p : oom(size);
}

void *ipd_xcalloc(size_t n, size_t size)
{
    check_injected_failure();
    void *p = calloc(n ? n : 1, size ? size : 1);
    return p ? p : oom(n * size);
}

void *ipd_xrealloc(void *p, size_t size)
{
    check_injected_failure();
    void *q = realloc(p, size ? size : 1);
    return q ? q : oom(size);
}

char *ipd_xstrdup(const char *s)
{
    return ipd_xstrndup(s, strlen(s));
}

char *ipd_xstrndup(const char *s, size_t n)
{
    size_t len = strnlen(s, n);
    char *p = ipd_xmalloc(len + 1);
    memcpy(p, s, len);
    p[len] = '\0';
    return p;
}
