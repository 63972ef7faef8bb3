/*
 * test_fetch_guard.c - service/fetch/guard.h, the SSRF guard's verdicts,
 * on addresses alone: no network, no libcurl (guard.c has none).  Every
 * refused class with its boundaries and exact reason, the IPv4 embedded in
 * IPv6 forms, the allowlist (parsing, host bits, families, the IPv4-mapped
 * rule) and the all-or-nothing check of a host's addresses.
 */
#include <arpa/inet.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "service/common/buf.h"
#include "service/fetch/guard.h"
#include "netns.h"
#include "test.h"

#define CHECK_HAS(hay, needle)                                                 \
    do {                                                                       \
        if (!strstr((hay), (needle))) {                                        \
            fprintf(stderr, "%s:%d: \"%s\" does not contain \"%s\"\n",         \
                    __FILE__, __LINE__, (hay), (needle));                      \
            test__failed_checks++;                                             \
        }                                                                      \
    } while (0)

/* ss = the address ip, IPv4 or IPv6 text, port 0. */
static void sa_make(const char *ip, struct sockaddr_storage *ss)
{
    memset(ss, 0, sizeof(*ss));
    struct sockaddr_in *in = (struct sockaddr_in *)ss;
    struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)ss;
    if (inet_pton(AF_INET, ip, &in->sin_addr) == 1) {
        in->sin_family = AF_INET;
    } else {
        IPD_ASSERT(inet_pton(AF_INET6, ip, &in6->sin6_addr) == 1);
        in6->sin6_family = AF_INET6;
    }
}

static bool verdict(const char *ip, const struct ipd_fetch_allowlist *allow,
                    char *why, size_t whysz)
{
    struct sockaddr_storage ss;
    sa_make(ip, &ss);
    return ipd_fetch_address_allowed((struct sockaddr *)&ss, allow, why, whysz);
}

static void address_classes(void)
{
    static const struct {
        const char *ip;
        const char *why; /* NULL: allowed; else part of the reason */
    } cases[] = {
        {"127.0.0.1", "loopback"},
        {"127.255.255.254", "loopback"},
        {"10.0.0.1", "private"},
        {"10.255.255.255", "private"},
        {"172.16.0.1", "private"},
        {"172.31.255.255", "private"},
        {"172.15.255.255", NULL},
        {"172.32.0.1", NULL},
        {"192.168.1.1", "private"},
        {"169.254.169.254", "link-local (cloud metadata)"},
        {"169.254.1.1", "link-local"},
        {"224.0.0.1", "multicast"},
        {"239.255.255.250", "multicast"},
        {"0.0.0.0", "unspecified"},
        {"0.1.2.3", "unspecified"},
        {"255.255.255.255", "broadcast"},
        {"100.64.0.1", "carrier-grade NAT"},
        {"100.127.255.255", "carrier-grade NAT"},
        {"100.63.255.255", NULL},
        {"100.128.0.1", NULL},
        {"240.0.0.1", "reserved"},
        {"250.1.2.3", "reserved"},
        {"192.0.2.1", "reserved (documentation)"},
        {"198.18.0.1", "reserved (benchmarking)"},
        {"8.8.8.8", NULL},
        {"1.1.1.1", NULL},
        {"11.0.0.1", NULL},
        {"::1", "loopback"},
        {"::", "unspecified"},
        {"::ffff:127.0.0.1", "loopback (IPv4-mapped)"},
        {"::ffff:10.0.0.1", "private (IPv4-mapped)"},
        {"::ffff:169.254.169.254", "cloud metadata"},
        {"::ffff:0.0.0.0", "unspecified (IPv4-mapped)"},
        {"::ffff:8.8.8.8", NULL},
        {"::127.0.0.1", "loopback (IPv4-compatible)"},
        {"::8.8.8.8", "reserved (IPv4-compatible)"},
        {"::ffff:0:127.0.0.1", "loopback (IPv4-translated)"},
        {"64:ff9b::127.0.0.1", "loopback (NAT64)"},
        {"64:ff9b::a9fe:a9fe", "cloud metadata"},
        {"64:ff9b::8.8.8.8", NULL},
        {"64:ff9b:1::1", "private"},
        {"2002:7f00:1::1", "loopback (6to4)"},
        {"2002:a00:1::1", "private (6to4)"},
        {"2002:808:808::1", NULL},
        /* Teredo: server 65.54.227.120, client ~(127.0.0.1). */
        {"2001:0:4136:e378:8000:63bf:80ff:fffe", "loopback (Teredo)"},
        {"2001:0:7f00:1::", "loopback (Teredo server)"},
        {"2001:0:4136:e378:8000:63bf:f7f7:f7f7", NULL}, /* client 8.8.8.8 */
        {"fc00::1", "private"},
        {"fd12:3456::1", "private"},
        {"fe80::1", "link-local"},
        {"febf::1", "link-local"},
        {"fec0::1", "site-local"},
        {"ff02::1", "multicast"},
        {"ff0e::1", "multicast"},
        {"2001:db8::1", "documentation"},
        {"100::1", "reserved"},
        {"4000::1", "reserved"},
        {"2606:4700:4700::1111", NULL},
        {"2001:4860:4860::8888", NULL},
    };
    char why[128];
    for (size_t i = 0; i < IPD_ARRAY_LEN(cases); i++) {
        bool ok = verdict(cases[i].ip, NULL, why, sizeof(why));
        if (ok != !cases[i].why ||
            (cases[i].why && !strstr(why, cases[i].why))) {
            fprintf(stderr, "  %s: allowed=%d why=\"%s\", want %s\n",
                    cases[i].ip, ok, why,
                    cases[i].why ? cases[i].why : "allowed");
            test__failed_checks++;
        }
        if (ok)
            CHECK_STR(why, "");
    }
}

static void allowlist(void)
{
    struct ipd_fetch_allowlist *a = NULL;
    struct ipd_buf err;
    char why[128];
    ipd_buf_init(&err, 1024);

    CHECK_INT(ipd_fetch_allowlist_parse(
                  "127.0.0.1/32, 10.1.2.3/8 fd00::/8,,192.168.7.7", &a, &err),
              IPD_OK);
    REQUIRE(a);
    CHECK(verdict("127.0.0.1", a, why, sizeof(why)));
    CHECK(!verdict("127.0.0.2", a, why, sizeof(why)));
    CHECK_STR(why, "loopback");
    CHECK(verdict("10.200.0.1", a, why, sizeof(why))); /* host bits ignored */
    CHECK(verdict("192.168.7.7", a, why, sizeof(why)));
    CHECK(!verdict("192.168.7.8", a, why, sizeof(why)));
    CHECK(verdict("::ffff:127.0.0.1", a, why, sizeof(why)));
    CHECK(verdict("fd00::5", a, why, sizeof(why)));
    CHECK(!verdict("fc00::1", a, why, sizeof(why)));
    CHECK(!verdict("169.254.169.254", a, why, sizeof(why)));
    CHECK(!verdict("::1", a, why, sizeof(why)));
    CHECK(verdict("8.8.8.8", a, why, sizeof(why)));
    ipd_fetch_allowlist_free(a);

    CHECK_INT(ipd_fetch_allowlist_parse("", &a, &err), IPD_OK);
    CHECK(!verdict("127.0.0.1", a, why, sizeof(why)));
    ipd_fetch_allowlist_free(a);
    CHECK_INT(ipd_fetch_allowlist_parse(NULL, &a, &err), IPD_OK);
    ipd_fetch_allowlist_free(a);
    CHECK_INT(ipd_fetch_allowlist_parse("::/0", &a, &err), IPD_OK);
    CHECK(verdict("::1", a, why, sizeof(why)));
    CHECK(!verdict("127.0.0.1", a, why, sizeof(why)));
    ipd_fetch_allowlist_free(a);

    static const char *bad[] = {"10.0.0.0/33", "abc",        "::1/129",
                                "1.2.3.4/",    "1.2.3.4/-1", "1.2.3/8",
                                "10.0.0.0/8;"};
    for (size_t i = 0; i < IPD_ARRAY_LEN(bad); i++) {
        ipd_buf_reset(&err);
        a = (struct ipd_fetch_allowlist *)&err; /* must be reset to NULL */
        CHECK_INT(ipd_fetch_allowlist_parse(bad[i], &a, &err), IPD_ERR_INVALID);
        CHECK(a == NULL);
        CHECK_HAS(err.buf, "bad allowlist entry");
    }
    ipd_buf_release(&err);
}

static void any_refused_address_refuses_all(void)
{
    struct sockaddr_in good, bad;
    struct sockaddr_in6 good6;
    struct ipd_buf err;
    ipd_buf_init(&err, 1024);
    memset(&good, 0, sizeof(good));
    memset(&bad, 0, sizeof(bad));
    memset(&good6, 0, sizeof(good6));
    good.sin_family = bad.sin_family = AF_INET;
    good6.sin6_family = AF_INET6;
    inet_pton(AF_INET, "93.184.216.34", &good.sin_addr);
    inet_pton(AF_INET, "127.0.0.1", &bad.sin_addr);
    inet_pton(AF_INET6, "2606:4700:4700::1111", &good6.sin6_addr);
    const struct sockaddr *mixed[] = {(struct sockaddr *)&good,
                                      (struct sockaddr *)&good6,
                                      (struct sockaddr *)&bad};
    CHECK_INT(ipd_fetch_addresses_check("example", mixed, 3, NULL, &err),
              IPD_ERR_FORBIDDEN);
    CHECK_STR(err.buf,
              "address 127.0.0.1 of host example is not allowed (loopback)");
    ipd_buf_reset(&err);
    CHECK_INT(ipd_fetch_addresses_check("example", mixed, 2, NULL, &err),
              IPD_OK);
    CHECK_INT(ipd_fetch_addresses_check("example", mixed, 0, NULL, &err),
              IPD_ERR_UPSTREAM);
    ipd_buf_release(&err);
}

/* ---- exact reasons, at the edges of each range ------------------------ */

struct want {
    const char *ip;
    const char *why; /* NULL: allowed; else the whole reason */
};

static void check_exact(const struct want *cases, size_t n,
                        const struct ipd_fetch_allowlist *allow)
{
    char why[128];
    for (size_t i = 0; i < n; i++) {
        memcpy(why, "stale", 6); /* must be overwritten either way */
        bool ok = verdict(cases[i].ip, allow, why, sizeof(why));
        const char *want = cases[i].why ? cases[i].why : "";
        if (ok != !cases[i].why || strcmp(why, want) != 0) {
            fprintf(stderr, "  %s: allowed=%d why=\"%s\", want %s \"%s\"\n",
                    cases[i].ip, ok, why, cases[i].why ? "refused" : "allowed",
                    want);
            test__failed_checks++;
        }
    }
}

static void ipv4_edges(void)
{
    static const struct want cases[] = {
        {"0.0.0.0", "unspecified"},
        {"0.255.255.255", "unspecified"},
        {"1.0.0.0", NULL},
        {"9.255.255.255", NULL},
        {"10.0.0.0", "private"},
        {"11.0.0.0", NULL},
        {"100.63.255.255", NULL},
        {"100.64.0.0", "carrier-grade NAT"},
        {"100.127.255.255", "carrier-grade NAT"},
        {"100.128.0.0", NULL},
        {"126.255.255.255", NULL},
        {"127.0.0.0", "loopback"},
        {"127.0.0.1", "loopback"},
        {"127.255.255.255", "loopback"},
        {"128.0.0.0", NULL},
        {"169.253.255.255", NULL},
        {"169.254.0.0", "link-local"},
        {"169.254.169.253", "link-local"},
        {"169.254.169.254", "link-local (cloud metadata)"},
        {"169.254.169.255", "link-local"},
        {"169.254.255.255", "link-local"},
        {"169.255.0.0", NULL},
        {"172.15.255.255", NULL},
        {"172.16.0.0", "private"},
        {"172.31.255.255", "private"},
        {"172.32.0.0", NULL},
        {"191.255.255.255", NULL},
        {"192.0.0.0", "reserved"},
        {"192.0.0.255", "reserved"},
        {"192.0.1.0", NULL},
        {"192.0.2.0", "reserved (documentation)"},
        {"192.0.2.255", "reserved (documentation)"},
        {"192.0.3.0", NULL},
        {"192.88.98.255", NULL},
        {"192.88.99.1", "reserved (6to4 relay)"},
        {"192.88.100.0", NULL},
        {"192.167.255.255", NULL},
        {"192.168.0.0", "private"},
        {"192.168.255.255", "private"},
        {"192.169.0.0", NULL},
        {"198.17.255.255", NULL},
        {"198.18.0.0", "reserved (benchmarking)"},
        {"198.19.255.255", "reserved (benchmarking)"},
        {"198.20.0.0", NULL},
        {"198.51.100.7", "reserved (documentation)"},
        {"198.51.101.0", NULL},
        {"203.0.113.7", "reserved (documentation)"},
        {"203.0.114.0", NULL},
        {"223.255.255.255", NULL},
        {"224.0.0.0", "multicast"},
        {"239.255.255.255", "multicast"},
        {"240.0.0.0", "reserved"},
        {"255.255.255.254", "reserved"},
        {"255.255.255.255", "broadcast"},
        {"8.8.8.8", NULL},
        {"93.184.216.34", NULL},
    };
    check_exact(cases, IPD_ARRAY_LEN(cases), NULL);
}

static void ipv6_edges(void)
{
    static const struct want cases[] = {
        {"::", "unspecified"},
        {"::1", "loopback"},
        {"100::", "reserved (discard)"},
        {"100::ffff:ffff:ffff:ffff", "reserved (discard)"},
        {"100:0:0:1::", "reserved"}, /* past the /64: outside 2000::/3 */
        {"1fff:ffff::1", "reserved"},
        {"2000::", NULL},
        {"2001:10::1", "reserved (ORCHID)"},
        {"2001:20::1", "reserved (ORCHID)"},
        {"2001:30::1", NULL},
        {"2001:db8::", "reserved (documentation)"},
        {"2001:db8:ffff:ffff::1", "reserved (documentation)"},
        {"2001:db9::1", NULL},
        {"3fff::1", "reserved (documentation)"},
        {"3fff:fff:ffff::1", "reserved (documentation)"},
        {"3fff:1000::1", NULL},
        {"3fff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", NULL},
        {"4000::", "reserved"},
        {"fbff:ffff::1", "reserved"},
        {"fc00::", "private"},
        {"fdff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "private"},
        {"fe00::1", "reserved"},
        {"fe80::", "link-local"},
        {"febf:ffff::1", "link-local"},
        {"fec0::", "private (site-local)"},
        {"feff:ffff::1", "private (site-local)"},
        {"ff00::", "multicast"},
        {"ff02::1", "multicast"},
        {"ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "multicast"},
        {"2606:4700:4700::1111", NULL},
    };
    check_exact(cases, IPD_ARRAY_LEN(cases), NULL);
}

/* An IPv4 address inside IPv6 gets the IPv4 reason and the form. */
static void ipv6_embedding_ipv4(void)
{
    static const struct want cases[] = {
        /* IPv4-mapped ::ffff:0:0/96: a public address is allowed. */
        {"::ffff:192.168.1.1", "private (IPv4-mapped)"},
        {"::ffff:172.16.0.1", "private (IPv4-mapped)"},
        {"::ffff:169.254.169.254", "link-local (cloud metadata) (IPv4-mapped)"},
        {"::ffff:100.64.0.1", "carrier-grade NAT (IPv4-mapped)"},
        {"::ffff:224.0.0.1", "multicast (IPv4-mapped)"},
        {"::ffff:255.255.255.255", "broadcast (IPv4-mapped)"},
        {"::ffff:192.0.2.1", "reserved (documentation) (IPv4-mapped)"},
        {"::ffff:93.184.216.34", NULL},
        /* IPv4-compatible ::/96 and -translated ::ffff:0:0:0/96: refused
         * even when the IPv4 is public. */
        {"::2", "unspecified (IPv4-compatible)"},
        {"::10.0.0.1", "private (IPv4-compatible)"},
        {"::93.184.216.34", "reserved (IPv4-compatible)"},
        {"::ffff:0:10.0.0.1", "private (IPv4-translated)"},
        {"::ffff:0:8.8.8.8", "reserved (IPv4-translated)"},
        /* NAT64 64:ff9b::/96; the local-use 64:ff9b:1::/48 is private. */
        {"64:ff9b::10.0.0.1", "private (NAT64)"},
        {"64:ff9b::169.254.169.254", "link-local (cloud metadata) (NAT64)"},
        {"64:ff9b::93.184.216.34", NULL},
        {"64:ff9b:1::8.8.8.8", "private (local NAT64)"},
        /* 6to4 2002::/16: the IPv4 is bits 16..47. */
        {"2002:c0a8:101::1", "private (6to4)"},
        {"2002:a9fe:a9fe::", "link-local (cloud metadata) (6to4)"},
        {"2002:e000:1::", "multicast (6to4)"},
        {"2002:5db8:d822::1", NULL}, /* 93.184.216.34 */
        /* Teredo 2001::/32: server at bits 32..63, client inverted in the
         * last 32 bits. */
        {"2001:0:a00:1::", "private (Teredo server)"},
        {"2001:0:4136:e378:8000:63bf:f5ff:fffe", "private (Teredo)"},
        {"2001:0:4136:e378:8000:63bf:9bbf:fffe", "carrier-grade NAT (Teredo)"},
        {"2001:0:4136:e378:8000:63bf:a247:27dd", NULL}, /* 93.184.216.34 */
    };
    check_exact(cases, IPD_ARRAY_LEN(cases), NULL);
}

/* why is optional, cut to whysz, and "" whenever the address is allowed. */
static void why_buffer(void)
{
    struct sockaddr_un un;
    char why[8], full[32];

    CHECK(!verdict("127.0.0.1", NULL, NULL, 0));
    CHECK(!verdict("127.0.0.1", NULL, why, 0));
    CHECK(verdict("8.8.8.8", NULL, NULL, 0));
    CHECK(!verdict("169.254.169.254", NULL, why, 5));
    CHECK_STR(why, "link");
    CHECK(!verdict("::ffff:10.0.0.1", NULL, why, sizeof(why)));
    CHECK_STR(why, "private");
    CHECK(verdict("2606:4700:4700::1111", NULL, why, sizeof(why)));
    CHECK_STR(why, "");

    memset(&un, 0, sizeof(un));
    un.sun_family = AF_UNIX;
    CHECK(!ipd_fetch_address_allowed((struct sockaddr *)&un, NULL, full,
                                     sizeof(full)));
    CHECK_STR(full, "not an IP address");
}

/* ---- the allowlist ---------------------------------------------------- */

/* An entry makes exactly its range allowed, in its own family; an IPv4
 * entry also covers the IPv4-mapped spelling, and no other embedding. */
static void allowlist_exceptions(void)
{
    static const struct {
        const char *spec;
        struct want cases[8];
    } lists[] = {
        {"10.0.0.0/8",
         {{"10.1.2.3", NULL},
          {"10.255.255.255", NULL},
          {"172.16.0.1", "private"},
          {"::ffff:10.1.2.3", NULL},
          {"::10.1.2.3", "private (IPv4-compatible)"},
          {"64:ff9b::10.1.2.3", "private (NAT64)"},
          {"2002:a01:203::1", "private (6to4)"}}},
        {"169.254.169.254",
         {{"169.254.169.254", NULL},
          {"169.254.169.253", "link-local"},
          {"::ffff:169.254.169.254", NULL}}},
        {"fe80::/10",
         {{"fe80::1", NULL},
          {"febf::1", NULL},
          {"fec0::1", "private (site-local)"},
          {"169.254.1.1", "link-local"}}},
        {"64:ff9b::/96",
         {{"64:ff9b::10.0.0.1", NULL},
          {"64:ff9b::7f00:1", NULL},
          {"10.0.0.1", "private"}}},
        {"::ffff:0:0/96",
         {{"::ffff:127.0.0.1", NULL}, {"127.0.0.1", "loopback"}}},
        {"0.0.0.0/0",
         {{"0.0.0.0", NULL},
          {"255.255.255.255", NULL},
          {"::ffff:127.0.0.1", NULL},
          {"::1", "loopback"},
          {"::127.0.0.1", "loopback (IPv4-compatible)"}}},
        {"10.9.9.9/0", {{"192.168.1.1", NULL}, {"fd00::1", "private"}}},
        {"::1", {{"::1", NULL}, {"::2", "unspecified (IPv4-compatible)"}}},
        {" 127.0.0.1\t,\n::1 ,",
         {{"127.0.0.1", NULL}, {"::1", NULL}, {"127.0.0.2", "loopback"}}},
    };
    for (size_t i = 0; i < IPD_ARRAY_LEN(lists); i++) {
        struct ipd_fetch_allowlist *a = NULL;
        size_t n = 0;
        CHECK_INT(ipd_fetch_allowlist_parse(lists[i].spec, &a, NULL), IPD_OK);
        REQUIRE(a);
        while (n < IPD_ARRAY_LEN(lists[i].cases) && lists[i].cases[n].ip)
            n++;
        check_exact(lists[i].cases, n, a);
        ipd_fetch_allowlist_free(a);
    }
    ipd_fetch_allowlist_free(NULL);
}

static void allowlist_parse_errors(void)
{
    struct ipd_fetch_allowlist *a = NULL;
    struct ipd_buf err;
    char spec[128], want[256];
    ipd_buf_init(&err, 1024);

    CHECK_INT(ipd_fetch_allowlist_parse("abc", &a, &err), IPD_ERR_INVALID);
    CHECK_STR(err.buf, "bad allowlist entry \"abc\": expected an IPv4 or "
                       "IPv6 address or CIDR");
    /* The bad entry is named, not the first. */
    ipd_buf_reset(&err);
    CHECK_INT(ipd_fetch_allowlist_parse("10.0.0.0/8, 300.0.0.1", &a, &err),
              IPD_ERR_INVALID);
    CHECK(a == NULL);
    CHECK_HAS(err.buf, "\"300.0.0.1\"");
    /* Zone ids are not CIDRs. */
    ipd_buf_reset(&err);
    CHECK_INT(ipd_fetch_allowlist_parse("fe80::1%eth0", &a, &err),
              IPD_ERR_INVALID);
    /* A long entry is quoted cut to 64 bytes. */
    memset(spec, 'a', 100);
    spec[100] = 0;
    ipd_buf_reset(&err);
    CHECK_INT(ipd_fetch_allowlist_parse(spec, &a, &err), IPD_ERR_INVALID);
    spec[64] = 0;
    snprintf(want, sizeof(want),
             "bad allowlist entry \"%s\": expected an IPv4 or IPv6 address "
             "or CIDR",
             spec);
    CHECK_STR(err.buf, want);
    /* err may be NULL. */
    CHECK_INT(ipd_fetch_allowlist_parse("1.2.3.4/33", &a, NULL),
              IPD_ERR_INVALID);
    CHECK(a == NULL);
    ipd_buf_release(&err);
}

/* ---- a host's addresses, all or nothing ------------------------------- */

static void addresses_check_messages(void)
{
    struct sockaddr_storage ss[4];
    struct sockaddr_un un;
    const struct sockaddr *list[4];
    struct ipd_fetch_allowlist *lo = NULL;
    struct ipd_buf err;
    static const char *ips[] = {"8.8.8.8", "10.0.0.1", "127.0.0.1", "fe80::1"};
    ipd_buf_init(&err, 1024);
    for (size_t i = 0; i < 4; i++) {
        sa_make(ips[i], &ss[i]);
        list[i] = (const struct sockaddr *)&ss[i];
    }

    /* The first refused address is the one named. */
    CHECK_INT(ipd_fetch_addresses_check("h", list, 4, NULL, &err),
              IPD_ERR_FORBIDDEN);
    CHECK_STR(err.buf, "address 10.0.0.1 of host h is not allowed (private)");
    ipd_buf_reset(&err);
    CHECK_INT(ipd_fetch_addresses_check("h", list + 3, 1, NULL, &err),
              IPD_ERR_FORBIDDEN);
    CHECK_STR(err.buf, "address fe80::1 of host h is not allowed (link-local)");
    ipd_buf_reset(&err);
    sa_make("::ffff:127.0.0.1", &ss[0]);
    CHECK_INT(ipd_fetch_addresses_check("h", list, 1, NULL, &err),
              IPD_ERR_FORBIDDEN);
    CHECK_STR(err.buf, "address ::ffff:127.0.0.1 of host h is not allowed "
                       "(loopback (IPv4-mapped))");
    ipd_buf_reset(&err);
    CHECK_INT(ipd_fetch_addresses_check("example", list, 0, NULL, &err),
              IPD_ERR_UPSTREAM);
    CHECK_STR(err.buf, "could not fetch: host example has no address");

    /* Allowlisted: nothing refused, nothing said. */
    ipd_buf_reset(&err);
    CHECK_INT(ipd_fetch_allowlist_parse("127.0.0.0/8", &lo, NULL), IPD_OK);
    CHECK_INT(ipd_fetch_addresses_check("h", list, 1, lo, &err), IPD_OK);
    CHECK_INT(ipd_fetch_addresses_check("h", list + 2, 1, lo, &err), IPD_OK);
    CHECK_STR(err.buf, "");
    CHECK_INT(ipd_fetch_addresses_check("h", list + 1, 2, lo, NULL),
              IPD_ERR_FORBIDDEN); /* err may be NULL */
    ipd_fetch_allowlist_free(lo);

    memset(&un, 0, sizeof(un));
    un.sun_family = AF_UNIX;
    list[0] = (const struct sockaddr *)&un;
    CHECK_INT(ipd_fetch_addresses_check("h", list, 1, NULL, &err),
              IPD_ERR_FORBIDDEN);
    CHECK_STR(
        err.buf,
        "address (family 1) of host h is not allowed (not an IP address)");
    ipd_buf_release(&err);
}

/* One address for the check of a host's addresses: ip (IPv4 or IPv6
 * text), with scope id scope for IPv6. */
struct host_case {
    const char *ip;
    unsigned scope;
    const char *want; /* the reason refused, or NULL: allowed */
};

/* ipd_fetch_addresses_check on the one address c: its verdict as
 * c->want says, with the exact reason. */
static void check_host_case(const struct host_case *c,
                            const struct ipd_fetch_allowlist *allow)
{
    struct sockaddr_storage ss;
    const struct sockaddr *a[1] = {(struct sockaddr *)&ss};
    struct ipd_buf err;
    char want[256];
    ipd_buf_init(&err, 256);
    sa_make(c->ip, &ss);
    if (ss.ss_family == AF_INET6)
        ((struct sockaddr_in6 *)&ss)->sin6_scope_id = c->scope;
    enum ipd_err rc = ipd_fetch_addresses_check("h", a, 1, allow, &err);
    if (c->want) {
        char txt[INET6_ADDRSTRLEN];
        if (ss.ss_family == AF_INET6)
            inet_ntop(AF_INET6, &((struct sockaddr_in6 *)&ss)->sin6_addr, txt,
                      sizeof(txt));
        else
            inet_ntop(AF_INET, &((struct sockaddr_in *)&ss)->sin_addr, txt,
                      sizeof(txt));
        snprintf(want, sizeof(want), "address %s of host h is not allowed (%s)",
                 txt, c->want);
        CHECKF(rc == IPD_ERR_FORBIDDEN && !strcmp(err.buf, want),
               "%s%%%u: rc %d \"%s\", want \"%s\"", c->ip, c->scope, (int)rc,
               err.buf, want);
    } else {
        CHECKF(rc == IPD_OK, "%s%%%u: rc %d \"%s\", want allowed", c->ip,
               c->scope, (int)rc, err.buf);
    }
    ipd_buf_release(&err);
}

/* The checks of host_address_refused, in the child: its exit code is
 * the number of failed checks (100: no namespace). */
static int host_address_child(void)
{
    /* Every family and scope an address of this host can be written in,
     * and the classes that are the host whatever its interfaces. */
    static const struct host_case refused[] = {
        {TEST_HOST_V4, 0, "an address of this host"},
        {"::ffff:" TEST_HOST_V4, 0, "an address of this host"},
        {TEST_HOST_V6, 0, "an address of this host"},
        {TEST_HOST_V6, 1, "an address of this host"}, /* %lo */
        {TEST_HOST_V6, 7, "an address of this host"}, /* any scope id */
        {"::" TEST_HOST_V4, 0, "reserved (IPv4-compatible)"},
        {"127.0.0.1", 0, "loopback"},
        {"127.9.9.9", 0, "loopback"},
        {"::1", 0, "loopback"},
        {"::1", 1, "loopback"},
        {"::ffff:127.0.0.1", 0, "loopback (IPv4-mapped)"},
        {"::127.0.0.1", 0, "loopback (IPv4-compatible)"},
        {"0.0.0.0", 0, "unspecified"},
        {"::", 0, "unspecified"},
        {"::ffff:0.0.0.0", 0, "unspecified (IPv4-mapped)"},
        {"fe80::1", 1, "link-local"},
        {"fe80::1", 0, "link-local"},
        {"169.254.1.1", 0, "link-local"},
        {"fd00::5", 0, "private"},
        {"fc00::5", 0, "private"},
    };
    static const struct host_case allowed[] = {
        {"203.0.114.6", 0, NULL}, /* public, not the host's */
        {"::ffff:203.0.114.6", 0, NULL},
        {"2a01:4f8:1::6", 0, NULL}, /* global, not the host's */
        {"2a01:4f8:1::6", 1, NULL},
    };
    struct ipd_fetch_allowlist *allow = NULL;
    struct ipd_buf err;
    if (test_netns_with_host_addresses())
        return 100;
    ipd_buf_init(&err, 256);
    /* Public addresses, so the classifier alone lets them through... */
    CHECK(verdict(TEST_HOST_V4, NULL, NULL, 0));
    CHECK(verdict(TEST_HOST_V6, NULL, NULL, 0));
    /* ...but they are this host's: refused, in every form. */
    for (size_t i = 0; i < IPD_ARRAY_LEN(refused); i++)
        check_host_case(&refused[i], NULL);
    for (size_t i = 0; i < IPD_ARRAY_LEN(allowed); i++)
        check_host_case(&allowed[i], NULL);
    /* The operator's allowlist names them: allowed (the IPv4 entry covers
     * the IPv4-mapped form). */
    CHECK_INT(
        ipd_fetch_allowlist_parse(TEST_HOST_V4 ", " TEST_HOST_V6, &allow, &err),
        IPD_OK);
    for (size_t i = 0; i < 5; i++) {
        struct host_case c = refused[i];
        c.want = NULL;
        check_host_case(&c, allow);
    }
    ipd_fetch_allowlist_free(allow);
    /* An allowlist of one family does not cover the other's address. */
    CHECK_INT(ipd_fetch_allowlist_parse(TEST_HOST_V4, &allow, &err), IPD_OK);
    check_host_case(&refused[2], allow);
    ipd_fetch_allowlist_free(allow);
    CHECK_INT(ipd_fetch_allowlist_parse(TEST_HOST_V6, &allow, &err), IPD_OK);
    check_host_case(&refused[0], allow);
    check_host_case(&refused[1], allow);
    ipd_fetch_allowlist_free(allow);
    ipd_buf_release(&err);
    return test__failed_checks;
}

/* An address of this host's own interfaces is refused whatever its class
 * (a public IPv4 or global IPv6 address reaches the host's services as
 * loopback does), in either family and any scope, unless allowlisted. */
static void host_address_refused(void)
{
    int st = 0;
    fflush(NULL);
    pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0)
        _exit(host_address_child());
    REQUIRE(waitpid(pid, &st, 0) == pid);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
        fprintf(stderr,
                "the checks in the namespace failed (wait status "
                "0x%x)\n",
                (unsigned)st);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

TEST_MAIN(T(address_classes), T(allowlist), T(any_refused_address_refuses_all),
          T(ipv4_edges), T(ipv6_edges), T(ipv6_embedding_ipv4), T(why_buffer),
          T(allowlist_exceptions), T(allowlist_parse_errors),
          T(addresses_check_messages), T(host_address_refused))
