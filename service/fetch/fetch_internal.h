/*
 * fetch_internal.h - what the files of service/fetch/ share among
 * themselves; nothing outside the folder includes it.
 */
#ifndef IPD_FETCH_INTERNAL_H
#define IPD_FETCH_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "../common/ipd.h"

struct addrinfo;
struct ipd_buf;
struct sockaddr;

#define IPD__FETCH_WHY_MAX 96        /* a refusal's reason, NUL included */
#define IPD__FETCH_FILENAME_MAX 1024 /* a longer suggested name is dropped */

/* The address of sa in text ("127.0.0.1", "::1"; the port left out), or
 * "(family N)" when it is neither IPv4 nor IPv6.  guard.c. */
void ipd__fetch_addr_str(const struct sockaddr *sa, char *out, size_t outsz);

/* RFC 9110 tchar: the bytes of a header's name and of a parameter's. */
static inline bool ipd__fetch_is_tchar(unsigned char c)
{
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') ||
           (c >= 'A' && c <= 'Z') || (c && strchr("!#$%&'*+-.^_`|~", c));
}

/* The last segment of a URL path, percent-decoded (a '%' that starts no
 * escape stays as it is).  NULL when it is empty, longer than
 * IPD__FETCH_FILENAME_MAX or holds %00; else a new string the caller
 * frees with free().  filename.c. */
char *ipd__fetch_path_filename(const char *path);

/* Resolve host:port (numeric) within timeout_ms (getaddrinfo on a
 * detached thread, left behind on timeout); literal: host is an address
 * literal, resolved at once.  *ai is the caller's to free with
 * freeaddrinfo.  IPD_ERR_UPSTREAM (no such host), _UPSTREAM_TIMEOUT,
 * _NOMEM, _INTERNAL, with a "could not fetch: ..." line in err (may be
 * NULL).  resolve.c; fetch_curl.c and the egress proxy use it. */
enum ipd_err ipd__fetch_resolve(const char *host, const char *port,
                                bool literal, int64_t timeout_ms,
                                struct addrinfo **ai, struct ipd_buf *err);

#endif
