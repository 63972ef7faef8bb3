/*
 * fetch_internal.h - what the files of service/fetch/ share among
 * themselves; nothing outside the folder includes it.
 */
#ifndef IPD_FETCH_INTERNAL_H
#define IPD_FETCH_INTERNAL_H

#include <stddef.h>

struct sockaddr;

#define IPD__FETCH_WHY_MAX 96 /* a refusal's reason, NUL included */

/* The address of sa in text ("127.0.0.1", "::1"; the port left out), or
 * "(family N)" when it is neither IPv4 nor IPv6.  guard.c. */
void ipd__fetch_addr_str(const struct sockaddr *sa, char *out, size_t outsz);

#endif
