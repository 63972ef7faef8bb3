/*
 * netns.h - a network namespace of the test's own in which this host has
 * public addresses on its interface (as a VPS has on eth0): the IPv4
 * TEST_HOST_V4 (an alias, lo:1) and the global IPv6 TEST_HOST_V6, beside
 * 127.0.0.1 and ::1 on lo, which is up.  The guard's classifier allows
 * both; only its "an address of this host" refusal stops them.
 *
 * Call it in a forked child (root, single-threaded so far): the
 * namespace dies with the child and nothing outside it changes.
 */
#ifndef IPD_TEST_NETNS_H
#define IPD_TEST_NETNS_H

#include <arpa/inet.h>
#include <errno.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdbool.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#define TEST_HOST_V4 "203.0.114.5"
#define TEST_HOST_V6 "2a01:4f8:1::5"

/* Whether the netlink message h is the local route of addr (the kernel
 * adds it, on its own time, once the address is usable). */
static inline bool test_netns_is_local_route(struct nlmsghdr *h,
                                             const struct in6_addr *addr)
{
    /* Not const: the netlink macros cast to char * (clang -Wcast-qual). */
    struct rtmsg *rt = NLMSG_DATA(h);
    int len = (int)RTM_PAYLOAD(h);
    if (h->nlmsg_type != RTM_NEWROUTE || rt->rtm_type != RTN_LOCAL)
        return false;
    for (struct rtattr *a = RTM_RTA(rt); RTA_OK(a, len); a = RTA_NEXT(a, len))
        if (a->rta_type == RTA_DST && RTA_PAYLOAD(a) == sizeof(*addr) &&
            !memcmp(RTA_DATA(a), addr, sizeof(*addr)))
            return true;
    return false;
}

/* Add ip6/128 to interface ifindex (rtnetlink, IFA_F_NODAD: never
 * tentative) and wait (5 s at most) for the kernel's event that its local
 * route is in: until then a connection to it is "host unreachable".
 * 0, or -1 with errno. */
static inline int test_netns_add_ip6(const char *ip6, int ifindex)
{
    struct {
        struct nlmsghdr nh;
        struct ifaddrmsg ifa;
        struct rtattr rta;
        struct in6_addr addr;
    } m;
    struct sockaddr_nl me = {.nl_family = AF_NETLINK,
                             .nl_groups = RTMGRP_IPV6_ROUTE};
    struct sockaddr_nl kernel = {.nl_family = AF_NETLINK};
    int fd = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE);
    bool acked = false, routed = false;
    int rc = -1;
    if (fd < 0)
        return -1;
    memset(&m, 0, sizeof(m));
    m.nh.nlmsg_len = NLMSG_LENGTH(sizeof(m.ifa)) + RTA_LENGTH(sizeof(m.addr));
    m.nh.nlmsg_type = RTM_NEWADDR;
    m.nh.nlmsg_flags = NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL;
    m.ifa.ifa_family = AF_INET6;
    m.ifa.ifa_prefixlen = 128;
    m.ifa.ifa_flags = IFA_F_NODAD;
    m.ifa.ifa_index = (unsigned)ifindex;
    m.rta.rta_type = IFA_LOCAL;
    m.rta.rta_len = RTA_LENGTH(sizeof(m.addr));
    inet_pton(AF_INET6, ip6, &m.addr);
    /* Subscribed before the request: the route's event cannot be missed. */
    if (bind(fd, (struct sockaddr *)&me, sizeof(me)) ||
        sendto(fd, &m, m.nh.nlmsg_len, 0, (struct sockaddr *)&kernel,
               sizeof(kernel)) != (ssize_t)m.nh.nlmsg_len)
        goto out;
    while (!acked || !routed) {
        union {
            char b[8192];
            struct nlmsghdr align;
        } buf;
        struct pollfd p = {fd, POLLIN, 0};
        if (poll(&p, 1, 5000) != 1) {
            errno = ETIMEDOUT;
            goto out;
        }
        ssize_t n = recv(fd, buf.b, sizeof(buf.b), 0);
        if (n <= 0)
            goto out;
        for (struct nlmsghdr *h = &buf.align; NLMSG_OK(h, (unsigned)n);
             h = NLMSG_NEXT(h, n)) {
            if (h->nlmsg_type == NLMSG_ERROR) {
                const struct nlmsgerr *e = NLMSG_DATA(h);
                if (e->error) {
                    errno = -e->error;
                    goto out;
                }
                acked = true;
            }
            routed = routed || test_netns_is_local_route(h, &m.addr);
        }
    }
    rc = 0;
out:
    close(fd);
    return rc;
}

/* 0, or -1 with errno (and a perror). */
static inline int test_netns_with_host_addresses(void)
{
    struct ifreq ifr;
    struct sockaddr_in *in = (struct sockaddr_in *)(void *)&ifr.ifr_addr;
    int rc = -1, fd = -1;

    if (unshare(CLONE_NEWNET)) {
        perror("unshare(CLONE_NEWNET)");
        return -1;
    }
    fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        goto out;
    memset(&ifr, 0, sizeof(ifr));
    snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "lo");
    if (ioctl(fd, SIOCGIFFLAGS, &ifr))
        goto out;
    ifr.ifr_flags |= IFF_UP;
    if (ioctl(fd, SIOCSIFFLAGS, &ifr))
        goto out;
    memset(&ifr, 0, sizeof(ifr));
    snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "lo:1");
    in->sin_family = AF_INET;
    inet_pton(AF_INET, TEST_HOST_V4, &in->sin_addr);
    if (ioctl(fd, SIOCSIFADDR, &ifr))
        goto out;
    if (test_netns_add_ip6(TEST_HOST_V6, (int)if_nametoindex("lo")))
        goto out;
    rc = 0;
out:
    if (rc)
        perror("a network namespace with " TEST_HOST_V4 " and " TEST_HOST_V6);
    if (fd >= 0)
        close(fd);
    return rc;
}

#endif
