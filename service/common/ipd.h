/*
 * ipd.h - the basics every module uses: the error enum, assertions and the
 * aborting allocator.
 *
 * Every fallible function returns enum ipd_err.  The numbers are stable: they
 * appear in logs and tests, so never renumber, only append.
 */
#ifndef IPD_H
#define IPD_H

/* The common system headers come first, before banned.h below (as in
 * git's git-compat-util.h): system inline definitions of banned names
 * must be seen before the macros that ban them. */
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

enum ipd_err {
    IPD_OK = 0,
    IPD_ERR_NOMEM = 1,         /* allocation sized by a request failed */
    IPD_ERR_IO = 2,            /* disk or socket I/O failed */
    IPD_ERR_INVALID = 3,       /* the caller's input is malformed */
    IPD_ERR_NOT_FOUND = 4,     /* no such object in the caller's scope */
    IPD_ERR_CONFLICT = 5,      /* unique constraint, lost race or lease */
    IPD_ERR_TOO_LARGE = 6,     /* over a size limit */
    IPD_ERR_QUOTA = 7,         /* over the user's quota */
    IPD_ERR_UNAVAILABLE = 8,   /* a backend is down; retry later */
    IPD_ERR_INTERNAL = 9,      /* a bug or an unexpected backend answer */
    IPD_ERR_UNAUTHORIZED = 10, /* missing, wrong or revoked key */
    IPD_ERR_FORBIDDEN = 11,    /* key valid but not allowed here */
    IPD_ERR_MEDIA_TYPE = 12,   /* unsupported Content-Type */
    IPD_ERR_TIMEOUT = 13,      /* an operation ran out of time */
    IPD_ERR_BUSY = 14,         /* a queue or table is full; retry later */
    IPD_ERR_UPSTREAM = 15,     /* a remote server failed or answered non-2xx */
    IPD_ERR_UPSTREAM_TIMEOUT = 16, /* a remote server ran out of time */
    IPD_ERR_NO_SPACE = 17,         /* the disk (or the database's) is full */
    IPD_ERR_GONE = 18,   /* the object existed and ended (a session) */
    IPD_ERR_IN_USE = 19, /* the object is busy with another call (a
                            session running an execution) */
};

/* A short stable name for an error ("not_found"); never NULL, static. */
const char *ipd_err_name(enum ipd_err err);

/* Invariants only: request data is validated, never asserted. */
#define IPD_ASSERT(cond)                                                       \
    do {                                                                       \
        if (!(cond))                                                           \
            ipd__assert_fail(#cond, __FILE__, __LINE__);                       \
    } while (0)

#if defined(__GNUC__)
#define IPD_NORETURN __attribute__((noreturn))
#define IPD_PRINTF(f, a) __attribute__((format(printf, f, a)))
#define IPD_UNUSED __attribute__((unused))
#else
#define IPD_NORETURN
#define IPD_PRINTF(f, a)
#define IPD_UNUSED
#endif

IPD_NORETURN void ipd__assert_fail(const char *expr, const char *file,
                                   int line);

/*
 * Small fixed-size allocations.  These abort the process on OOM, so use
 * them only for sizes not chosen by a client; check request-sized
 * allocations against a limit first.  The caller owns the result and
 * frees it with free().
 */
void *ipd_xmalloc(size_t size);
void *ipd_xcalloc(size_t n, size_t size);
void *ipd_xrealloc(void *p, size_t size);
char *ipd_xstrdup(const char *s);
char *ipd_xstrndup(const char *s, size_t n);

/* Failure injection for tests: when the environment variable
 * IPD_FAIL_ALLOC_AT=N is set, the Nth ipd_xmalloc-family call aborts as if
 * out of memory.  Read once at first use. */

#define IPD_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

/* Last, after the system headers each source includes first: a banned call
 * is a compile error from here on. */
#include "banned.h"

#endif
