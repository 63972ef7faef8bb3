/*
 * guard.c - guard.h: the SSRF guard's address classifier and the
 * allowlist.  No libcurl, no network; the classifier is pure, and the
 * check of a host's addresses also asks the kernel for this host's own
 * interface addresses (getifaddrs).  Unit-tested on its own
 * (tests/unit/service/test_fetch_guard.c).
 */
#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "../common/util.h"
#include "fetch_internal.h"
#include "guard.h"

#define fail ipd_buf_fail /* append why to err, return the code */

/* ---- address classification ------------------------------------------- */

struct range4 {
    uint32_t net;
    unsigned bits;
    const char *why;
};

/* First match wins, so the narrow ranges come before the wide ones. */
static const struct range4 refused4[] = {
    {0xffffffffu, 32, "broadcast"},
    {0xa9fea9feu, 32, "link-local (cloud metadata)"},
    {0x00000000u, 8, "unspecified"},
    {0x0a000000u, 8, "private"},
    {0x64400000u, 10, "carrier-grade NAT"},
    {0x7f000000u, 8, "loopback"},
    {0xa9fe0000u, 16, "link-local"},
    {0xac100000u, 12, "private"},
    {0xc0000000u, 24, "reserved"},
    {0xc0000200u, 24, "reserved (documentation)"},
    {0xc0586300u, 24, "reserved (6to4 relay)"},
    {0xc0a80000u, 16, "private"},
    {0xc6120000u, 15, "reserved (benchmarking)"},
    {0xc6336400u, 24, "reserved (documentation)"},
    {0xcb007100u, 24, "reserved (documentation)"},
    {0xe0000000u, 4, "multicast"},
    {0xf0000000u, 4, "reserved"},
};

static const char *class4(uint32_t a)
{
    for (size_t i = 0; i < IPD_ARRAY_LEN(refused4); i++) {
        uint32_t mask = ~0u << (32 - refused4[i].bits);
        if ((a & mask) == refused4[i].net)
            return refused4[i].why;
    }
    return NULL;
}

struct range6 {
    uint8_t net[16];
    unsigned bits;
    const char *why;
};

/* Ranges with nothing embedded; checked after the embedding forms. */
static const struct range6 refused6[] = {
    {{0x20, 0x01, 0x0d, 0xb8}, 32, "reserved (documentation)"},
    {{0x3f, 0xff}, 20, "reserved (documentation)"},
    {{0x20, 0x01, 0x00, 0x10}, 28, "reserved (ORCHID)"},
    {{0x20, 0x01, 0x00, 0x20}, 28, "reserved (ORCHID)"},
    {{0x00, 0x64, 0xff, 0x9b, 0x00, 0x01}, 48, "private (local NAT64)"},
    {{0x01, 0x00}, 64, "reserved (discard)"},
    {{0xfc}, 7, "private"},
    {{0xfe, 0x80}, 10, "link-local"},
    {{0xfe, 0xc0}, 10, "private (site-local)"},
    {{0xff}, 8, "multicast"},
};

/* ::ffff:0:0/96, IPv4-mapped IPv6: the IPv4 host itself. */
static const uint8_t v4mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};

static bool prefix_match(const uint8_t *a, const uint8_t *net, unsigned bits)
{
    unsigned full = bits / 8, rest = bits % 8;
    if (memcmp(a, net, full) != 0)
        return false;
    if (!rest)
        return true;
    uint8_t mask = (uint8_t)(0xff << (8 - rest));
    return (a[full] & mask) == (net[full] & mask);
}

static uint32_t get32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 |
           (uint32_t)p[3];
}

static bool say(char *why, size_t whysz, const char *fmt, ...) IPD_PRINTF(3, 4);

static bool say(char *why, size_t whysz, const char *fmt, ...)
{
    if (why && whysz) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(why, whysz, fmt, ap);
        va_end(ap);
    }
    return true;
}

/* An IPv4 address carried inside IPv6 reaches that IPv4 host (mapped,
 * NAT64, 6to4, Teredo), so it is refused for the same reasons.  Forms with
 * no legitimate outbound use are refused even when the IPv4 is public. */
static bool embedded(uint32_t v4, const char *kind, bool always, char *why,
                     size_t whysz)
{
    const char *r = class4(v4);
    if (r)
        return say(why, whysz, "%s (%s)", r, kind);
    if (always)
        return say(why, whysz, "reserved (%s)", kind);
    return false;
}

/* True when the IPv6 address b is refused; the reason goes to why. */
static bool class6(const uint8_t *b, char *why, size_t whysz)
{
    static const uint8_t zero[16];
    static const uint8_t translated[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    static const uint8_t nat64[12] = {0x00, 0x64, 0xff, 0x9b};
    static const uint8_t teredo[4] = {0x20, 0x01, 0x00, 0x00};

    if (!memcmp(b, zero, 16))
        return say(why, whysz, "unspecified");
    if (!memcmp(b, zero, 15) && b[15] == 1)
        return say(why, whysz, "loopback");
    if (!memcmp(b, v4mapped, 12))
        return embedded(get32(b + 12), "IPv4-mapped", false, why, whysz);
    if (!memcmp(b, zero, 12))
        return embedded(get32(b + 12), "IPv4-compatible", true, why, whysz);
    if (!memcmp(b, translated, 12))
        return embedded(get32(b + 12), "IPv4-translated", true, why, whysz);
    if (!memcmp(b, nat64, 12))
        return embedded(get32(b + 12), "NAT64", false, why, whysz);
    if (b[0] == 0x20 && b[1] == 0x02)
        return embedded(get32(b + 2), "6to4", false, why, whysz);
    if (!memcmp(b, teredo, 4)) {
        /* Teredo: the server's IPv4, then the client's, inverted. */
        if (embedded(get32(b + 4), "Teredo server", false, why, whysz))
            return true;
        return embedded(~get32(b + 12), "Teredo", false, why, whysz);
    }
    for (size_t i = 0; i < IPD_ARRAY_LEN(refused6); i++)
        if (prefix_match(b, refused6[i].net, refused6[i].bits))
            return say(why, whysz, "%s", refused6[i].why);
    /* Only 2000::/3 is allocated as global unicast. */
    if ((b[0] & 0xe0) != 0x20)
        return say(why, whysz, "reserved");
    return false;
}

/* ---- allowlist -------------------------------------------------------- */

struct cidr {
    int family; /* AF_INET: net[0..4) */
    uint8_t net[16];
    unsigned bits;
};

struct ipd_fetch_allowlist {
    struct cidr *v; /* owned */
    size_t n;
};

void ipd_fetch_allowlist_free(struct ipd_fetch_allowlist *a)
{
    if (!a)
        return;
    free(a->v);
    free(a);
}

static enum ipd_err parse_cidr(const char *s, size_t len, struct cidr *c,
                               struct ipd_buf *err)
{
    char tmp[INET6_ADDRSTRLEN + 8];
    int64_t bits = -1;
    if (len >= sizeof(tmp))
        goto bad;
    memcpy(tmp, s, len);
    tmp[len] = 0;
    char *slash = strchr(tmp, '/');
    if (slash)
        *slash = 0;
    memset(c, 0, sizeof(*c));
    if (inet_pton(AF_INET, tmp, c->net) == 1)
        c->family = AF_INET;
    else if (inet_pton(AF_INET6, tmp, c->net) == 1)
        c->family = AF_INET6;
    else
        goto bad;
    int64_t max = c->family == AF_INET ? 32 : 128;
    if (!slash)
        bits = max;
    else if (ipd_int_parse(slash + 1, 0, max, &bits) != IPD_OK)
        goto bad;
    c->bits = (unsigned)bits;
    /* Clear the host bits so matching compares prefixes only. */
    for (unsigned i = 0; i < 16; i++) {
        unsigned keep = c->bits > i * 8 ? c->bits - i * 8 : 0;
        if (keep < 8)
            c->net[i] &= (uint8_t)(0xff00 >> keep);
    }
    return IPD_OK;
bad:
    return fail(err, IPD_ERR_INVALID,
                "bad allowlist entry \"%.*s\": expected an IPv4 or IPv6 "
                "address or CIDR",
                (int)(len > 64 ? 64 : len), s);
}

enum ipd_err ipd_fetch_allowlist_parse(const char *spec,
                                       struct ipd_fetch_allowlist **out,
                                       struct ipd_buf *err)
{
    struct ipd_fetch_allowlist *a = ipd_xcalloc(1, sizeof(*a));
    enum ipd_err rc = IPD_OK;
    size_t alloc = 0;
    const char *p = spec ? spec : "";

    *out = NULL;
    for (;;) {
        p += strspn(p, ", \t\n");
        if (!*p)
            break;
        size_t len = strcspn(p, ", \t\n");
        if (a->n == alloc) {
            alloc = alloc ? alloc * 2 : 8;
            a->v = ipd_xrealloc(a->v, alloc * sizeof(*a->v));
        }
        rc = parse_cidr(p, len, &a->v[a->n], err);
        if (rc)
            goto out;
        a->n++;
        p += len;
    }
    *out = a;
    a = NULL;
out:
    ipd_fetch_allowlist_free(a);
    return rc;
}

static bool allow_match(const struct ipd_fetch_allowlist *allow, int family,
                        const uint8_t *addr)
{
    if (!allow)
        return false;
    for (size_t i = 0; i < allow->n; i++)
        if (allow->v[i].family == family &&
            prefix_match(addr, allow->v[i].net, allow->v[i].bits))
            return true;
    return false;
}

bool ipd_fetch_address_allowed(const struct sockaddr *sa,
                               const struct ipd_fetch_allowlist *allow,
                               char *why, size_t whysz)
{
    char reason[IPD__FETCH_WHY_MAX] = "";
    if (why && whysz)
        why[0] = 0;
    if (sa->sa_family == AF_INET) {
        struct sockaddr_in in;
        uint8_t b[4];
        memcpy(&in, sa, sizeof(in));
        memcpy(b, &in.sin_addr, 4);
        const char *r = class4(get32(b));
        if (!r || allow_match(allow, AF_INET, b))
            return true;
        say(why, whysz, "%s", r);
        return false;
    }
    if (sa->sa_family == AF_INET6) {
        struct sockaddr_in6 in6;
        uint8_t b[16];
        memcpy(&in6, sa, sizeof(in6));
        memcpy(b, &in6.sin6_addr, 16);
        if (!class6(b, reason, sizeof(reason)))
            return true;
        if (allow_match(allow, AF_INET6, b))
            return true;
        /* ::ffff:a.b.c.d is a.b.c.d itself: its IPv4 entry covers it. */
        if (!memcmp(b, v4mapped, 12) && allow_match(allow, AF_INET, b + 12))
            return true;
        say(why, whysz, "%s", reason);
        return false;
    }
    say(why, whysz, "not an IP address");
    return false;
}

void ipd__fetch_addr_str(const struct sockaddr *sa, char *out, size_t outsz)
{
    const void *src = NULL;
    const char *r = NULL;
    if (sa->sa_family == AF_INET)
        src = &((const struct sockaddr_in *)(const void *)sa)->sin_addr;
    else if (sa->sa_family == AF_INET6)
        src = &((const struct sockaddr_in6 *)(const void *)sa)->sin6_addr;
    if (src)
        r = inet_ntop(sa->sa_family, src, out, (socklen_t)outsz);
    if (!r)
        snprintf(out, outsz, "(family %d)", (int)sa->sa_family);
}

/* sa's address bytes into b (4 or 16; an IPv4-mapped IPv6 address gives
 * its IPv4 one); the family, or 0 for neither. */
static int addr_bytes(const struct sockaddr *sa, uint8_t b[16])
{
    if (sa->sa_family == AF_INET) {
        memcpy(b, &((const struct sockaddr_in *)(const void *)sa)->sin_addr, 4);
        return AF_INET;
    }
    if (sa->sa_family != AF_INET6)
        return 0;
    memcpy(b, &((const struct sockaddr_in6 *)(const void *)sa)->sin6_addr, 16);
    if (memcmp(b, v4mapped, 12))
        return AF_INET6;
    memmove(b, b + 12, 4);
    return AF_INET;
}

/* Whether sa is one of the addresses of this host's interfaces in ifs,
 * which the kernel delivers locally whatever their class (a public
 * address on eth0, a global IPv6 address). */
static bool host_address(const struct sockaddr *sa, const struct ifaddrs *ifs)
{
    uint8_t want[16], have[16];
    int fam = addr_bytes(sa, want);
    for (const struct ifaddrs *i = ifs; fam && i; i = i->ifa_next)
        if (i->ifa_addr && addr_bytes(i->ifa_addr, have) == fam &&
            !memcmp(want, have, fam == AF_INET ? 4 : 16))
            return true;
    return false;
}

/* Whether sa, which the classifier allows, is refused as this host's own
 * (the reason in why); the interfaces are listed once per check, on
 * first need (*ifs, *listed). */
static bool refused_as_host(const struct sockaddr *sa,
                            const struct ipd_fetch_allowlist *allow,
                            struct ifaddrs **ifs, bool *listed, char *why,
                            size_t whysz)
{
    if (ipd_fetch_allowlisted(sa, allow))
        return false;
    if (!*listed) {
        *listed = true;
        if (getifaddrs(ifs))
            *ifs = NULL;
    }
    if (!*ifs)
        return say(why, whysz, "this host's addresses cannot be listed");
    return host_address(sa, *ifs) && say(why, whysz, "an address of this host");
}

bool ipd_fetch_allowlisted(const struct sockaddr *sa,
                           const struct ipd_fetch_allowlist *allow)
{
    uint8_t b[16];
    int fam = addr_bytes(sa, b);
    return fam && allow_match(allow, fam, b);
}

enum ipd_err ipd_fetch_addresses_check(const char *host,
                                       const struct sockaddr *const *addrs,
                                       size_t n,
                                       const struct ipd_fetch_allowlist *allow,
                                       struct ipd_buf *err)
{
    char why[IPD__FETCH_WHY_MAX], a[INET6_ADDRSTRLEN];
    if (!n)
        return fail(err, IPD_ERR_UPSTREAM,
                    "could not fetch: host %s has no address", host);
    struct ifaddrs *ifs = NULL;
    bool listed = false;
    enum ipd_err rc = IPD_OK;
    for (size_t i = 0; i < n && !rc; i++) {
        if (ipd_fetch_address_allowed(addrs[i], allow, why, sizeof(why)) &&
            !refused_as_host(addrs[i], allow, &ifs, &listed, why, sizeof(why)))
            continue;
        ipd__fetch_addr_str(addrs[i], a, sizeof(a));
        rc = fail(err, IPD_ERR_FORBIDDEN,
                  "address %s of host %s is not allowed (%s)", a, host, why);
    }
    if (ifs)
        freeifaddrs(ifs);
    return rc;
}
