/*
 * test_mongo_startup.c - `serve` with a MongoDB that isn't there: it
 * retries for --mongo-connect-timeout, then exits non-zero with a message
 * that names the URI with its password redacted.
 */
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"

/* A port nobody listens on: bind port 0, read it, close. */
static int free_port(void)
{
    struct sockaddr_in a = {.sin_family = AF_INET};
    socklen_t len = sizeof(a);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof(a)) ||
        getsockname(fd, (struct sockaddr *)&a, &len)) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    close(fd);
    return ntohs(a.sin_port);
}

static void unreachable_database_fails_startup(void)
{
    const char *bin = getenv("INTERPD_BIN");
    char dir[] = "/tmp/interpd-itest-startup-XXXXXX";
    char uri[128], log[128], listen_arg[] = "127.0.0.1:0";
    int port = free_port();
    REQUIRE(bin && port > 0);
    REQUIRE(mkdtemp(dir));
    snprintf(uri, sizeof(uri), "mongodb://app:s3cret@127.0.0.1:%d/interpd",
             port);
    snprintf(log, sizeof(log), "%s/server.log", dir);

    double t0 = itest_now();
    pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
        int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        dup2(fd, 2);
        dup2(fd, 1);
        execl(bin, bin, "serve", "--listen", listen_arg, "--data-dir", dir,
              "--mongo-uri", uri, "--mongo-connect-timeout", "1s",
              (char *)NULL);
        _exit(127);
    }
    int st = 0;
    /* Bounded wait: it must give up by itself. */
    pid_t done = 0;
    while (!done && itest_now() - t0 < 30) {
        done = waitpid(pid, &st, WNOHANG);
        if (!done)
            usleep(20 * 1000);
    }
    double took = itest_now() - t0;
    if (!done) {
        kill(pid, SIGKILL);
        waitpid(pid, &st, 0);
    }
    CHECK(done == pid);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) != 0);
    CHECK(took >= 0.9 && took < 15);

    size_t len = 0;
    char *text = itest_read_file(log, &len);
    REQUIRE(text);
    char want[64];
    snprintf(want, sizeof(want), "127.0.0.1:%d", port);
    CHECK(strstr(text, want) != NULL);
    CHECK(strstr(text, "app:****@") != NULL);
    CHECK(strstr(text, "s3cret") == NULL);
    if (test__failed_checks)
        fprintf(stderr, "server output:\n%s\n", text);
    free(text);
    itest_rm_rf(dir);
}

TEST_MAIN(T(unreachable_database_fails_startup))
