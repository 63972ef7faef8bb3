/*
 * test_live.c - an execution's live channel (service/common/live.h): a
 * character split across the run's writes never splits an event, output
 * is coalesced, what waits is bounded (room, and the producer's wake-up
 * when the consumer takes), the result comes last, the consumer's hooks
 * run in pairs (sleep, then one wake), and the cancel flag wakes the
 * producer.
 */
#include <jansson.h>
#include <poll.h>
#include <stdint.h>

#include "service/common/live.h"
#include "test.h"

struct hooks {
    int sleeps, wakes;
};

static void on_sleep(void *ctx)
{
    ((struct hooks *)ctx)->sleeps++;
}

static void on_wake(void *ctx)
{
    ((struct hooks *)ctx)->wakes++;
}

static struct ipd_live *streamed(struct hooks *h)
{
    struct ipd_live *l = ipd_live_new();
    struct ipd_live_consumer c = {on_sleep, on_wake, h};
    if (l)
        ipd_live_stream(l, &c);
    return l;
}

/* Every event until none is waiting: the stdout text joined (JSON
 * strings decoded), the count of events, and whether every chunk was
 * whole UTF-8 (no U+FFFD). */
static char *take_all(struct ipd_live *l, int *events, bool *whole)
{
    char kind[IPD_LIVE_KIND_MAX];
    uint64_t id;
    struct ipd_buf data, text;
    ipd_buf_init(&text, IPD_BUF_UNLIMITED);
    *events = 0;
    *whole = true;
    for (;;) {
        ipd_buf_init(&data, IPD_BUF_UNLIMITED);
        enum ipd_live_take t = ipd_live_take(l, &id, kind, &data);
        if (t != IPD_LIVE_EVENT) {
            ipd_buf_release(&data);
            break;
        }
        (*events)++;
        json_t *s = json_loads(data.buf, JSON_DECODE_ANY, NULL);
        const char *v = json_string_value(s);
        if (v && strstr(v, "\xef\xbf\xbd"))
            *whole = false;
        if (v && !strcmp(kind, "stdout"))
            ipd_buf_adds(&text, v);
        json_decref(s);
        ipd_buf_release(&data);
    }
    return ipd_buf_detach(&text, NULL);
}

/* "é€😀" written one byte at a time, each byte taken as it comes: no
 * event holds part of a character. */
static void split_characters_stay_whole(void)
{
    static const char s[] = "a\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80z";
    struct hooks h = {0};
    struct ipd_live *l = streamed(&h);
    REQUIRE(l);
    struct ipd_buf all;
    ipd_buf_init(&all, IPD_BUF_UNLIMITED);
    for (size_t i = 0; i + 1 < sizeof s; i++) {
        ipd_live_output(l, 1, s + i, 1);
        int n;
        bool whole;
        char *got = take_all(l, &n, &whole);
        CHECKF(whole, "byte %zu: a chunk held part of a character", i);
        ipd_buf_adds(&all, got);
        free(got);
    }
    CHECK_STR(all.buf, s);
    ipd_buf_release(&all);
    ipd_live_unref(l);
}

/* Output that waits is one event (coalesced), and the room says when the
 * bound is reached; taking it wakes the producer (its fd readable). */
static void bounded_and_coalesced(void)
{
    struct hooks h = {0};
    struct ipd_live *l = streamed(&h);
    REQUIRE(l);
    char chunk[1024];
    memset(chunk, 'x', sizeof chunk);
    size_t written = 0;
    while (ipd_live_room(l) > 0) {
        ipd_live_output(l, 1, chunk, sizeof chunk);
        written += sizeof chunk;
    }
    CHECK_INT((long long)written, IPD_LIVE_PENDING_MAX);
    ipd_live_fd_clear(l);
    struct pollfd pf = {ipd_live_fd(l), POLLIN, 0};
    CHECK_INT(poll(&pf, 1, 0), 0);
    int n;
    bool whole;
    char *got = take_all(l, &n, &whole);
    CHECK_INT((long long)strlen(got), IPD_LIVE_PENDING_MAX);
    CHECKF(n <= IPD_LIVE_PENDING_MAX / IPD_LIVE_EVENT_MAX,
           "%d events for %d bytes", n, IPD_LIVE_PENDING_MAX);
    CHECK_INT(poll(&pf, 1, 0), 1); /* room again: the producer is told */
    CHECK(ipd_live_room(l) == IPD_LIVE_PENDING_MAX);
    free(got);
    ipd_live_unref(l);
}

/* Nothing streams: no bound, nothing kept. */
static void unstreamed_keeps_nothing(void)
{
    struct ipd_live *l = ipd_live_new();
    REQUIRE(l);
    CHECK(ipd_live_room(l) == SIZE_MAX);
    CHECK(ipd_live_room(NULL) == SIZE_MAX);
    ipd_live_output(l, 1, "abc", 3);
    CHECK(!ipd_live_streamed(l));
    ipd_live_unref(l);
}

/* The result is last: the output before it (a held-back split byte
 * too), then it, then over; ids count from 1; output after it is
 * dropped. */
static void result_last(void)
{
    struct hooks h = {0};
    struct ipd_live *l = streamed(&h);
    REQUIRE(l);
    ipd_live_output(l, 2, "err\n", 4);
    ipd_live_output(l, 1, "out\xc3", 4);
    char *res = strdup("{\"success\":true}");
    ipd_live_end(l, res, strlen(res));
    ipd_live_output(l, 1, "late", 4); /* after the end: dropped */
    /* The held-back byte joins the last stdout event at the end (as
     * U+FFFD: it never became a character). */
    static const char *const want[] = {"stderr", "stdout", "result"};
    static const char *const data_want[] = {"\"err\\n\"", "\"out\xef\xbf\xbd\"",
                                            "{\"success\":true}"};
    char kind[IPD_LIVE_KIND_MAX];
    uint64_t id;
    struct ipd_buf data;
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        ipd_buf_init(&data, IPD_BUF_UNLIMITED);
        CHECK_INT(ipd_live_take(l, &id, kind, &data), IPD_LIVE_EVENT);
        CHECK_INT((long long)id, (long long)i + 1);
        CHECK_STR(kind, want[i]);
        CHECK_STR(data.buf, data_want[i]);
        ipd_buf_release(&data);
    }
    ipd_buf_init(&data, IPD_BUF_UNLIMITED);
    CHECK_INT(ipd_live_take(l, &id, kind, &data), IPD_LIVE_OVER);
    ipd_buf_release(&data);
    ipd_live_unref(l);
}

/* A take that finds nothing puts the consumer to sleep; what comes next
 * wakes it once; a poke after the idle time gives a keep-alive. */
static void hooks_in_pairs(void)
{
    struct hooks h = {0};
    struct ipd_live *l = streamed(&h);
    REQUIRE(l);
    char kind[IPD_LIVE_KIND_MAX];
    uint64_t id;
    struct ipd_buf data;
    ipd_buf_init(&data, IPD_BUF_UNLIMITED);
    CHECK_INT(ipd_live_take(l, &id, kind, &data), IPD_LIVE_NONE);
    CHECK_INT(h.sleeps, 1);
    ipd_live_event(l, "file", "{}", 2);
    ipd_live_event(l, "file", "{}", 2);
    CHECK_INT(h.wakes, 1);
    CHECK_INT(ipd_live_take(l, &id, kind, &data), IPD_LIVE_EVENT);
    CHECK_INT(ipd_live_take(l, &id, kind, &data), IPD_LIVE_EVENT);
    CHECK_INT(ipd_live_take(l, &id, kind, &data), IPD_LIVE_NONE);
    CHECK(ipd_live_poke(l, 0));
    CHECK_INT(h.wakes, 2);
    CHECK_INT(ipd_live_take(l, &id, kind, &data), IPD_LIVE_PING);
    CHECK(!ipd_live_poke(l, 60000)); /* not idle that long */
    ipd_buf_release(&data);
    ipd_live_unref(l);
}

/* A cancel sets the flag once and makes the producer's fd readable. */
static void cancel_wakes_producer(void)
{
    struct ipd_live *l = ipd_live_new();
    REQUIRE(l);
    struct pollfd pf = {ipd_live_fd(l), POLLIN, 0};
    CHECK_INT(poll(&pf, 1, 0), 0);
    CHECK(!ipd_live_cancelled(l));
    CHECK(ipd_live_cancel(l));
    CHECK(!ipd_live_cancel(l));
    CHECK(ipd_live_cancelled(l));
    CHECK_INT(poll(&pf, 1, 0), 1);
    CHECK(!ipd_live_cancelled(NULL));
    ipd_live_unref(l);
}

TEST_MAIN(T(split_characters_stay_whole), T(bounded_and_coalesced),
          T(unstreamed_keeps_nothing), T(result_last), T(hooks_in_pairs),
          T(cancel_wakes_producer))
