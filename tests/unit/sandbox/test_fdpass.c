/*
 * test_fdpass.c - service/sandbox/fdpass.c: a message with descriptors
 * arrives whole; a receiver keeps at most what it asked for and nothing
 * else stays open in it (the children's messages are hostile input).
 */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "service/common/util.h"
#include "service/sandbox/sandbox_internal.h"
#include "test.h"

/* Descriptors open in this process (F_GETFD on 0..1023). */
static int open_fds(void)
{
    int n = 0;
    for (int fd = 0; fd < 1024; fd++)
        n += fcntl(fd, F_GETFD) >= 0;
    return n;
}

static bool pair(int sv[2])
{
    return socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) == 0;
}

/* Send "hello" with k descriptors (a pipe's two ends, repeated). */
static void send_k(int sock, size_t k)
{
    int p[2], fds[IPD_FDPASS_MAX];
    REQUIRE(pipe2(p, O_CLOEXEC) == 0);
    for (size_t i = 0; i < k; i++)
        fds[i] = p[i % 2];
    CHECK_INT(ipd__fdpass_send(sock, "hello", 5, fds, k), 5);
    close(p[0]);
    close(p[1]);
}

static void message_and_fds_arrive(void)
{
    int sv[2], fds[2] = {-1, -1};
    char buf[16];
    size_t n = 9;
    REQUIRE(pair(sv));
    int before = open_fds();
    send_k(sv[0], 2);
    CHECK_INT(
        ipd__fdpass_recv(sv[1], buf, sizeof buf, MSG_DONTWAIT, fds, 2, &n), 5);
    CHECK(!memcmp(buf, "hello", 5));
    CHECK_INT(n, 2);
    for (int i = 0; i < 2; i++) {
        CHECK(fds[i] >= 0);
        CHECK(fcntl(fds[i], F_GETFD) & FD_CLOEXEC); /* MSG_CMSG_CLOEXEC */
        ipd_close_fd(&fds[i]);
        CHECK_INT(fds[i], -1);
    }
    CHECK_INT(open_fds(), before);
    close(sv[0]);
    close(sv[1]);
}

/* More than asked for, or any when none is expected: closed here. */
static void excess_fds_closed(void)
{
    int sv[2], fd = -1;
    char buf[16];
    size_t n = 9;
    REQUIRE(pair(sv));
    int before = open_fds();
    send_k(sv[0], 5);
    CHECK_INT(
        ipd__fdpass_recv(sv[1], buf, sizeof buf, MSG_DONTWAIT, &fd, 1, &n), 5);
    CHECK_INT(n, 1);
    ipd_close_fd(&fd);
    CHECK_INT(open_fds(), before);
    send_k(sv[0], IPD_FDPASS_MAX);
    CHECK_INT(
        ipd__fdpass_recv(sv[1], buf, sizeof buf, MSG_DONTWAIT, NULL, 0, &n), 5);
    CHECK_INT(n, 0);
    CHECK_INT(open_fds(), before);
    close(sv[0]);
    close(sv[1]);
}

static void bounds(void)
{
    int sv[2], fds[IPD_FDPASS_MAX + 1];
    char buf[4];
    size_t n = 9;
    REQUIRE(pair(sv));
    for (size_t i = 0; i < IPD_ARRAY_LEN(fds); i++)
        fds[i] = 0;
    errno = 0;
    CHECK_INT(ipd__fdpass_send(sv[0], "x", 1, fds, IPD_ARRAY_LEN(fds)), -1);
    CHECK_INT(errno, EINVAL);
    /* nothing waiting: -1 with EAGAIN, no descriptors */
    CHECK_INT(
        ipd__fdpass_recv(sv[1], buf, sizeof buf, MSG_DONTWAIT, fds, 1, &n), -1);
    CHECK_INT(errno, EAGAIN);
    CHECK_INT(n, 0);
    /* the peer gone: 0 */
    close(sv[0]);
    CHECK_INT(
        ipd__fdpass_recv(sv[1], buf, sizeof buf, MSG_DONTWAIT, fds, 1, &n), 0);
    close(sv[1]);
}

TEST_MAIN(T(message_and_fds_arrive), T(excess_fds_closed), T(bounds))
