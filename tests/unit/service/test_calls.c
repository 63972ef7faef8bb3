/*
 * test_calls.c - the service's end of a call socket (service/common/
 * calls.h) where the fuzz harness (tests/fuzz/fuzz_calls.c) does not
 * look: a code that floods display frames and exits while its client
 * reads nothing.
 */
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <jansson.h>

#include "service/common/calls.h"
#include "service/common/live.h"
#include "test.h"

static struct ipd_live *live;
static int shown;

/* As service/exec/result.c's hook: each bundle an event. */
static void show(void *ctx, json_t *bundle)
{
    (void)ctx;
    char *t = json_dumps(bundle, JSON_COMPACT);
    ipd_live_event(live, "display", t, strlen(t));
    free(t);
    shown++;
}

static void sleep_hook(void *ctx)
{
    (void)ctx;
}

/* Regression: a socket the code closed reports POLLHUP whatever was
 * asked, and the service read on POLLHUP even without room, so a code
 * that flooded display frames and exited had them all read (441,870
 * bytes waiting for a client that reads nothing, against the 256 KiB
 * bound, measured by the fuzz harness's author).  Now: no read without
 * room, even when a caller hands POLLHUP in. */
static void hangup_reads_only_with_room(void)
{
    int sv[2];
    struct ipd_live_consumer c = {sleep_hook, sleep_hook, NULL};
    live = ipd_live_new();
    ipd_live_stream(live, &c);
    struct ipd_live_call_limits lim = {
        .max_bytes = 4096,
        .max_calls = 8,
        .max_in_flight = 2,
        .call_timeout_ms = 1000000,
        .max_wait_ms = 1000,
        .display = show,
        .display_ctx = calloc(1, 1),
        .display_bytes = 8192,
    };
    ipd_live_calls_enable(live, &lim);
    CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv) == 0);
    struct ipd_calls *calls = ipd_calls_new(live, sv[0]);

    /* One display frame of 4000 bytes of text. */
    char body[4200];
    int n = snprintf(body, sizeof body,
                     "{\"op\":\"display\",\"bundle\":{\"text/plain\":\"");
    memset(body + n, 'x', 4000);
    n += 4000;
    n += snprintf(body + n, sizeof body - (size_t)n, "\"}}");
    unsigned char frame[4300] = {0, 0, (unsigned char)(n >> 8),
                                 (unsigned char)n};
    memcpy(frame + 4, body, (size_t)n);
    /* The code writes what the socket takes (the service reading while
     * it has room), then exits. */
    for (int i = 0; i < 10000; i++) {
        ssize_t w = write(sv[1], frame, (size_t)n + 4);
        struct pollfd p;
        ipd_calls_pollfd(calls, &p);
        if (p.fd >= 0 && poll(&p, 1, 0) > 0)
            ipd_calls_io(calls, p.revents);
        if (w < 0 && p.fd < 0)
            break; /* the socket is full and the service reads no more */
    }
    close(sv[1]);
    int before = shown;
    for (int i = 0; i < 1000; i++) {
        struct pollfd p;
        ipd_calls_pollfd(calls, &p);
        CHECK(p.fd < 0); /* no room: nothing asked */
        ipd_calls_io(calls, POLLHUP | POLLIN);
    }
    CHECKF(shown == before, "%d frames read after the hang-up", shown - before);
    /* Bounded: the channel's bound and one event over it. */
    CHECKF((size_t)shown <= IPD_LIVE_PENDING_MAX / 4000 + 1, "%d shown", shown);
    CHECK(ipd_live_room(live) == 0);
    ipd_calls_free(calls);
    ipd_live_unstream(live);
    ipd_live_unref(live);
}

int main(void)
{
    static const struct test_case cases[] = {
        T(hangup_reads_only_with_room),
    };
    return test_run(cases, sizeof cases / sizeof cases[0]);
}
