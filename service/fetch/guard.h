/*
 * guard.h - the SSRF guard's verdicts: which addresses an outbound
 * connection may reach, and the operator's allowlist of exceptions
 * (--fetch-allow).  Pure functions on addresses: no network, no libcurl;
 * fetch.h applies them to every hop and every socket (see there).
 *
 * Thread-safety: every function may be called from any thread at once.
 * An allowlist is immutable after parsing and can be shared by any number
 * of threads.
 */
#ifndef IPD_FETCH_GUARD_H
#define IPD_FETCH_GUARD_H

#include <stdbool.h>
#include <stddef.h>

#include "../common/buf.h"
#include "../common/ipd.h"

struct sockaddr;

/* Operator CIDRs that may be fetched although the guard refuses them. */
struct ipd_fetch_allowlist;

/*
 * Parse an allowlist: comma- or space-separated CIDRs, IPv4 or IPv6
 * ("127.0.0.1/32, 10.0.0.0/8, fd00::/8"); a bare address is a /32 or /128;
 * host bits are ignored.  NULL or "" gives an empty list.  An IPv4 entry
 * also covers that address written IPv4-mapped (::ffff:a.b.c.d).
 * @param out  [out] a new list, owned by the caller:
 *             ipd_fetch_allowlist_free; NULL on failure
 * @return IPD_OK, or IPD_ERR_INVALID with a message in err.
 */
enum ipd_err ipd_fetch_allowlist_parse(const char *spec,
                                       struct ipd_fetch_allowlist **out,
                                       struct ipd_buf *err);
void ipd_fetch_allowlist_free(struct ipd_fetch_allowlist *a); /* NULL ok */

/*
 * The guard's verdict on one address (AF_INET or AF_INET6; the port is
 * ignored).  Refused unless allowlisted: loopback, private (RFC 1918,
 * fc00::/7, fec0::/10), link-local (169.254/16 with the cloud metadata
 * address, fe80::/10), multicast, unspecified (0/8, ::), broadcast,
 * carrier-grade NAT (100.64/10), reserved (240/4, documentation and
 * benchmarking ranges, IPv6 outside 2000::/3), and any refused IPv4
 * address embedded in IPv6: IPv4-mapped, -compatible and -translated,
 * NAT64 (64:ff9b::/96), 6to4 (2002::/16), Teredo (2001::/32).
 * @param allow  may be NULL
 * @param why    [out] on refusal the reason ("loopback", "private (IPv4-
 *               mapped)"), else ""; may be NULL
 * @return true when a connection to sa is allowed.
 */
bool ipd_fetch_address_allowed(const struct sockaddr *sa,
                               const struct ipd_fetch_allowlist *allow,
                               char *why, size_t whysz);

/* True when the operator's allowlist names sa (an IPv4-mapped IPv6
 * address by its IPv4 entry too); allow may be NULL. */
bool ipd_fetch_allowlisted(const struct sockaddr *sa,
                           const struct ipd_fetch_allowlist *allow);

/*
 * Check every address host resolved to (addrs[0..n)); any refused one
 * refuses them all: IPD_ERR_FORBIDDEN with "address A of host H is not
 * allowed (why)" in err.  Besides the classes of ipd_fetch_address_allowed,
 * an address of one of this host's own interfaces is refused unless
 * allowlisted (a public IPv4 or global IPv6 address of the host reaches
 * its local services as loopback does); it asks the kernel (getifaddrs)
 * at each call, and refuses when the addresses cannot be listed.  n == 0
 * is IPD_ERR_UPSTREAM.  URL ingest uses it for every hop, the egress
 * proxy for every connection; exported for tests.
 */
enum ipd_err ipd_fetch_addresses_check(const char *host,
                                       const struct sockaddr *const *addrs,
                                       size_t n,
                                       const struct ipd_fetch_allowlist *allow,
                                       struct ipd_buf *err);

#endif
