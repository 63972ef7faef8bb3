/*
 * tinyinit.c - issue 24 experiment (bench/fork_probe): a small static
 * init for a warm run's pid namespace, started by the zygote with
 * posix_spawn (no copy of the zygote's image).
 *
 *   tinyinit UID GID   (fd 3: a unix socket to the zygote)
 *   tinyinit reaper    (fd 3: the same) a pid namespace's init that only
 *                      reaps, until fd 3 reads EOF
 *
 * T0 (this process): a user namespace of its own (UID/GID mapped to
 * themselves), then mount, IPC, UTS, network and pid namespaces; forks
 * T, the pid namespace's init, and exits.  T sends a pidfd of itself on
 * fd 3 and reaps whatever is reparented to it until fd 3 reads EOF (the
 * zygote's end closed), then exits: the kernel kills the rest of the
 * namespace.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

static void put(const char *path, const char *s)
{
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0 || write(fd, s, strlen(s)) != (ssize_t)strlen(s))
        _exit(120);
    close(fd);
}

static void send_fd(int sock, int fd)
{
    char c = 'H', buf[CMSG_SPACE(sizeof(int))];
    struct iovec iov = {&c, 1};
    struct msghdr mh = {0};
    struct cmsghdr *cm;

    memset(buf, 0, sizeof buf);
    mh.msg_iov = &iov;
    mh.msg_iovlen = 1;
    mh.msg_control = buf;
    mh.msg_controllen = sizeof buf;
    cm = CMSG_FIRSTHDR(&mh);
    cm->cmsg_level = SOL_SOCKET;
    cm->cmsg_type = SCM_RIGHTS;
    cm->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(cm), &fd, sizeof fd);
    if (sendmsg(sock, &mh, MSG_NOSIGNAL) != 1)
        _exit(121);
}

int main(int argc, char **argv)
{
    char map[64];
    pid_t t;

    if (argc == 2 && !strcmp(argv[1], "reaper")) {
        for (;;) {
            struct pollfd p = {3, POLLIN, 0};
            int st;
            /* blocks while there is a child; polls fd 3 when none */
            if (waitpid(-1, &st, 0) > 0)
                continue;
            if (poll(&p, 1, 5) == 1) {
                char c;
                if (read(3, &c, 1) <= 0)
                    _exit(0);
            }
        }
    }
    if (argc < 3)
        return 2;
    if (unshare(CLONE_NEWUSER) != 0)
        return 3;
    put("/proc/self/setgroups", "deny");
    snprintf(map, sizeof map, "%s %s 1\n", argv[1], argv[1]);
    put("/proc/self/uid_map", map);
    snprintf(map, sizeof map, "%s %s 1\n", argv[2], argv[2]);
    put("/proc/self/gid_map", map);
    if (unshare(CLONE_NEWNS | CLONE_NEWIPC | CLONE_NEWUTS | CLONE_NEWNET |
                CLONE_NEWPID) != 0)
        return 4;
    t = fork();
    if (t < 0)
        return 5;
    if (t > 0)
        _exit(0);
    /* T: pid 1 */
    {
        int pfd = (int)syscall(SYS_pidfd_open, getpid(), 0);
        if (pfd < 0)
            _exit(122);
        send_fd(3, pfd);
        close(pfd);
    }
    for (;;) {
        struct pollfd p = {3, POLLIN, 0};
        int st;
        while (waitpid(-1, &st, WNOHANG) > 0)
            ;
        /* a real init would wake on SIGCHLD (signalfd); enough here */
        if (poll(&p, 1, 50) == 1) {
            char c;
            if (read(3, &c, 1) <= 0)
                _exit(0);
        }
    }
}
