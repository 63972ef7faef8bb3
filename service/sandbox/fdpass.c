/*
 * fdpass.c - one message with descriptors (SCM_RIGHTS) on a
 * SOCK_SEQPACKET socket, both ways (zproto.h says what travels).
 *
 * Used by P and by the cloned children (child.c), where nothing may
 * allocate: stack buffers only, no stdio, only async-signal-safe calls.
 */
#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "sandbox_internal.h"

/* Control buffer for the most descriptors one message carries. */
union fdpass_cmsg {
    char buf[CMSG_SPACE(sizeof(int) * IPD_FDPASS_MAX)];
    struct cmsghdr align;
};

ssize_t ipd__fdpass_send(int sock, const void *msg, size_t len, const int *fds,
                         size_t nfds)
{
    struct iovec iov = {(void *)(uintptr_t)msg, len};
    union fdpass_cmsg u;
    struct msghdr mh;
    ssize_t n;

    if (nfds > IPD_FDPASS_MAX) {
        errno = EINVAL;
        return -1;
    }
    memset(&u, 0, sizeof u);
    memset(&mh, 0, sizeof mh);
    mh.msg_iov = &iov;
    mh.msg_iovlen = 1;
    if (nfds) {
        struct cmsghdr *c;
        mh.msg_control = u.buf;
        mh.msg_controllen = CMSG_SPACE(sizeof(int) * nfds);
        c = CMSG_FIRSTHDR(&mh);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(sizeof(int) * nfds);
        memcpy(CMSG_DATA(c), fds, sizeof(int) * nfds);
    }
    do {
        n = sendmsg(sock, &mh, MSG_NOSIGNAL);
    } while (n < 0 && errno == EINTR);
    return n;
}

/* Every descriptor of the message's SCM_RIGHTS into fds up to max, the
 * rest closed; *nfds how many were kept. */
static void take_fds(struct msghdr *mh, int *fds, size_t max, size_t *nfds)
{
    for (struct cmsghdr *c = CMSG_FIRSTHDR(mh); c; c = CMSG_NXTHDR(mh, c)) {
        size_t k;
        if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
            continue;
        k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (size_t i = 0; i < k; i++) {
            int fd;
            memcpy(&fd, CMSG_DATA(c) + i * sizeof fd, sizeof fd);
            if (*nfds < max)
                fds[(*nfds)++] = fd;
            else
                close(fd);
        }
    }
}

ssize_t ipd__fdpass_recv(int sock, void *buf, size_t len, int flags, int *fds,
                         size_t max_fds, size_t *nfds)
{
    struct iovec iov = {buf, len};
    union fdpass_cmsg u;
    struct msghdr mh;
    ssize_t n;

    *nfds = 0;
    if (max_fds > IPD_FDPASS_MAX)
        max_fds = IPD_FDPASS_MAX;
    memset(&mh, 0, sizeof mh);
    mh.msg_iov = &iov;
    mh.msg_iovlen = 1;
    mh.msg_control = u.buf;
    /* Room for max_fds (at least one, so a stray one is seen and closed
     * here): the kernel discards what does not fit (MSG_CTRUNC). */
    mh.msg_controllen = CMSG_SPACE(sizeof(int) * (max_fds ? max_fds : 1));
    n = recvmsg(sock, &mh, MSG_CMSG_CLOEXEC | flags);
    if (n < 0)
        return n;
    take_fds(&mh, fds, max_fds, nfds);
    return n;
}
