/*
 * test_live.c - an execution's live channel (service/common/live.h): a
 * character split across the run's writes never splits an event, output
 * is coalesced, what waits is bounded (room, and the producer's wake-up
 * when the consumer takes), the result comes last, the consumer's hooks
 * run in pairs (sleep, then one wake), and the cancel flag wakes the
 * producer.  Every event counts toward the bound.  Calls from the code to
 * its client: off unless enabled and streamed, ids, limits, each
 * answer's outcome, the order the producer takes them in, time-outs, a
 * client gone, the producer's wake-up, and a thread answering while
 * calls are opened and taken.
 */
#include <jansson.h>
#include <poll.h>
#include <pthread.h>
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

/* The producer's fd is readable now (poll, no wait). */
static bool fd_readable(struct ipd_live *l)
{
    struct pollfd pf = {ipd_live_fd(l), POLLIN, 0};
    return poll(&pf, 1, 0) == 1;
}

/* JSON text of one string of n bytes in all ("\"yyy...\""); free it. */
static char *json_string_of(size_t n)
{
    char *s = ipd_xmalloc(n + 1);
    memset(s, 'y', n);
    s[0] = '"';
    s[n - 1] = '"';
    s[n] = '\0';
    return s;
}

/* Every event counts toward the bound, not only output: events fill the
 * room to the byte; one event larger than the bound leaves none; taking
 * it wakes the producer only when it had asked for room and seen none. */
static void events_count_toward_bound(void)
{
    struct hooks h = {0};
    struct ipd_live *l = streamed(&h);
    REQUIRE(l);
    char kind[IPD_LIVE_KIND_MAX];
    uint64_t id;
    struct ipd_buf data;
    ipd_buf_init(&data, IPD_BUF_UNLIMITED);
    char *quarter = json_string_of(IPD_LIVE_PENDING_MAX / 4);
    for (int i = 1; i <= 4; i++) {
        ipd_live_event(l, "file", quarter, strlen(quarter));
        CHECK(ipd_live_room(l) == (size_t)(4 - i) * (IPD_LIVE_PENDING_MAX / 4));
    }
    ipd_live_fd_clear(l);
    CHECK(!fd_readable(l));
    CHECK_INT(ipd_live_take(l, &id, kind, &data), IPD_LIVE_EVENT);
    CHECK(fd_readable(l)); /* room 0 was seen: the producer is told */
    CHECK(ipd_live_room(l) == IPD_LIVE_PENDING_MAX / 4);
    free(quarter);
    ipd_live_unref(l);

    char *big = json_string_of(IPD_LIVE_PENDING_MAX + 100);
    for (int asked = 0; asked <= 1; asked++) {
        l = streamed(&h);
        REQUIRE(l);
        CHECK(ipd_live_room(l) == IPD_LIVE_PENDING_MAX);
        ipd_live_event(l, "big", big, strlen(big));
        if (asked)
            CHECK(ipd_live_room(l) == 0);
        ipd_live_fd_clear(l);
        CHECK(!fd_readable(l));
        ipd_buf_reset(&data);
        CHECK_INT(ipd_live_take(l, &id, kind, &data), IPD_LIVE_EVENT);
        CHECK_STR(kind, "big");
        CHECK(data.len == strlen(big) && !strcmp(data.buf, big));
        CHECKF(fd_readable(l) == (bool)asked, "asked for room: %d", asked);
        CHECK(ipd_live_room(l) == IPD_LIVE_PENDING_MAX);
        ipd_live_unref(l);
    }
    free(big);
    ipd_buf_release(&data);
}

static const struct ipd_live_call_limits call_lim = {
    .max_bytes = 4096,
    .max_calls = 16,
    .max_in_flight = 4,
    .call_timeout_ms = 600000,
    .max_wait_ms = 1200000,
};

/* A streamed channel with calls on, within lim. */
static struct ipd_live *calling(struct hooks *h,
                                const struct ipd_live_call_limits *lim)
{
    struct ipd_live *l = streamed(h);
    if (l)
        ipd_live_calls_enable(l, lim);
    return l;
}

static enum ipd_live_call answer(struct ipd_live *l, const char *id,
                                 const char *json)
{
    return ipd_live_call_answer(l, id, json, strlen(json));
}

/* The next call over for the code, at now_ms: its seq (-1: none) and,
 * into text, its answer alone. */
static long long take_call(struct ipd_live *l, int64_t now_ms,
                           struct ipd_buf *text)
{
    uint64_t seq = 0;
    ipd_buf_reset(text);
    if (!ipd_live_call_take(l, now_ms, &seq, text))
        return -1;
    return (long long)seq;
}

/* text is exactly {"error": {"type": type, "message": a string}}. */
static bool error_of_type(const char *text, const char *type)
{
    json_t *j = json_loads(text, 0, NULL);
    json_t *err = json_object_get(j, "error");
    const char *t = json_string_value(json_object_get(err, "type"));
    bool ok = json_object_size(j) == 1 && json_object_size(err) == 2 && t &&
              !strcmp(t, type) &&
              json_string_value(json_object_get(err, "message"));
    json_decref(j);
    return ok;
}

/* Wait for the monotonic clock's next millisecond (at most one, so a
 * spin): what happens after it is stamped later than what came before. */
static int64_t next_ms(void)
{
    int64_t t = ipd_mono_ms(), now;
    do
        now = ipd_mono_ms();
    while (now == t);
    return now;
}

/* Calls are off unless enabled (limits false, open NOBODY), and open
 * answers NOBODY when nobody streams, once the consumer is gone, once the
 * run ended, once the calls were closed. */
static void calls_off(void)
{
    struct hooks h = {0};
    struct ipd_live_call_limits got;
    char id[IPD_LIVE_CALL_ID_MAX];
    struct ipd_live *l = streamed(&h);
    REQUIRE(l);
    CHECK(!ipd_live_calls_limits(l, &got));
    CHECK(!ipd_live_calls_limits(NULL, &got));
    CHECK_INT(ipd_live_call_open(l, 1, id), IPD_LIVE_CALL_NOBODY);
    CHECK_INT(ipd_live_calls_waiting(l), 0);
    ipd_live_calls_enable(l, &call_lim);
    memset(&got, 0, sizeof got);
    CHECK(ipd_live_calls_limits(l, &got));
    CHECK(got.max_bytes == call_lim.max_bytes);
    CHECK_INT(got.max_calls, call_lim.max_calls);
    CHECK_INT(got.max_in_flight, call_lim.max_in_flight);
    CHECK_INT(got.call_timeout_ms, call_lim.call_timeout_ms);
    CHECK_INT(got.max_wait_ms, call_lim.max_wait_ms);
    CHECK_INT(ipd_live_call_open(l, 1, id), IPD_LIVE_CALL_OK);
    ipd_live_unstream(l);
    CHECK_INT(ipd_live_call_open(l, 2, id), IPD_LIVE_CALL_NOBODY);
    ipd_live_unref(l);

    l = ipd_live_new(); /* nobody streams */
    REQUIRE(l);
    ipd_live_calls_enable(l, &call_lim);
    CHECK(ipd_live_calls_limits(l, &got));
    CHECK_INT(ipd_live_call_open(l, 1, id), IPD_LIVE_CALL_NOBODY);
    CHECK_INT(ipd_live_calls_waiting(l), 0);
    ipd_live_unref(l);

    l = calling(&h, &call_lim);
    REQUIRE(l);
    char *res = strdup("{\"success\":true}");
    ipd_live_end(l, res, strlen(res));
    CHECK_INT(ipd_live_call_open(l, 1, id), IPD_LIVE_CALL_NOBODY);
    ipd_live_unref(l);

    l = calling(&h, &call_lim);
    REQUIRE(l);
    ipd_live_calls_close(l);
    CHECK_INT(ipd_live_call_open(l, 1, id), IPD_LIVE_CALL_NOBODY);
    CHECK_INT(ipd_live_calls_waiting(l), 0);
    ipd_live_unref(l);
}

/* Each open gives a new id "call_" + 26 base32 characters; the waiting
 * calls are counted. */
static void call_ids(void)
{
    enum { N = 8 };
    struct hooks h = {0};
    struct ipd_live_call_limits lim = call_lim;
    lim.max_calls = lim.max_in_flight = N;
    struct ipd_live *l = calling(&h, &lim);
    REQUIRE(l);
    char ids[N][IPD_LIVE_CALL_ID_MAX];
    for (int i = 0; i < N; i++) {
        CHECK_INT(ipd_live_call_open(l, (uint64_t)i, ids[i]), IPD_LIVE_CALL_OK);
        CHECKF(ipd_id_valid("call", ids[i]), "id %s", ids[i]);
        CHECK(!strncmp(ids[i], "call_", 5));
        CHECK_INT(strlen(ids[i]), 5 + IPD_ID_RANDOM_CHARS);
        CHECK_INT(strspn(ids[i] + 5, "abcdefghijklmnopqrstuvwxyz234567"),
                  IPD_ID_RANDOM_CHARS);
        for (int j = 0; j < i; j++)
            CHECKF(strcmp(ids[i], ids[j]), "ids %d and %d: %s", j, i, ids[i]);
        CHECK_INT(ipd_live_calls_waiting(l), i + 1);
    }
    CHECK(!ipd_id_valid("file", ids[0]));
    ipd_live_unref(l);
}

/* At most max_in_flight calls wait (BUSY), a call answered no longer
 * waits for its answer (it frees its place at once), and at most
 * max_calls calls are opened in a run (LIMIT, even with none waiting). */
static void call_limits(void)
{
    struct hooks h = {0};
    struct ipd_live_call_limits lim = call_lim;
    lim.max_calls = 5;
    lim.max_in_flight = 2;
    struct ipd_live *l = calling(&h, &lim);
    REQUIRE(l);
    char ids[6][IPD_LIVE_CALL_ID_MAX];
    struct ipd_buf text;
    ipd_buf_init(&text, IPD_BUF_UNLIMITED);
    int64_t now = ipd_mono_ms();
    CHECK_INT(ipd_live_call_open(l, 0, ids[0]), IPD_LIVE_CALL_OK);
    CHECK_INT(ipd_live_call_open(l, 1, ids[1]), IPD_LIVE_CALL_OK);
    CHECK_INT(ipd_live_call_open(l, 2, ids[2]), IPD_LIVE_CALL_BUSY);
    CHECK_INT(ipd_live_call_open(l, 2, ids[2]), IPD_LIVE_CALL_BUSY);
    CHECK_INT(ipd_live_calls_waiting(l), 2);
    CHECK_INT(answer(l, ids[0], "{\"result\":0}"), IPD_LIVE_CALL_OK);
    CHECK_INT(ipd_live_calls_waiting(l), 1);
    CHECK_INT(take_call(l, now, &text), 0);
    CHECK_INT(ipd_live_call_open(l, 2, ids[2]), IPD_LIVE_CALL_OK);
    CHECK_INT(ipd_live_call_open(l, 3, ids[3]), IPD_LIVE_CALL_BUSY);
    /* Answered, not yet taken: it waits for the producer, not its
     * answer, and so is not in flight. */
    CHECK_INT(answer(l, ids[1], "{\"result\":1}"), IPD_LIVE_CALL_OK);
    CHECK_INT(ipd_live_call_open(l, 3, ids[3]), IPD_LIVE_CALL_OK);
    CHECK_INT(answer(l, ids[2], "{\"result\":2}"), IPD_LIVE_CALL_OK);
    CHECK_INT(ipd_live_call_open(l, 4, ids[4]), IPD_LIVE_CALL_OK);
    CHECK_INT(answer(l, ids[3], "{\"result\":3}"), IPD_LIVE_CALL_OK);
    CHECK_INT(answer(l, ids[4], "{\"result\":4}"), IPD_LIVE_CALL_OK);
    CHECK_INT(ipd_live_calls_waiting(l), 0);
    CHECK_INT(ipd_live_call_open(l, 5, ids[5]), IPD_LIVE_CALL_LIMIT);
    for (int i = 1; i <= 4; i++)
        CHECK_INT(take_call(l, now, &text), i);
    CHECK_INT(take_call(l, now, &text), -1);
    CHECK_INT(ipd_live_call_open(l, 5, ids[5]), IPD_LIVE_CALL_LIMIT);
    CHECK_INT(ipd_live_calls_waiting(l), 0);
    ipd_buf_release(&text);
    ipd_live_unref(l);
}

/* An answer is OK once, then TWICE (before and after the producer took
 * it, and after the calls closed), UNKNOWN for an id this channel never
 * gave, GONE for a call still waiting when the calls closed.  Only an
 * accepted answer wakes the producer. */
static void answer_outcomes(void)
{
    struct hooks h = {0};
    struct ipd_live *l = calling(&h, &call_lim);
    struct ipd_live *other = calling(&h, &call_lim);
    REQUIRE(l && other);
    char a[IPD_LIVE_CALL_ID_MAX], b[IPD_LIVE_CALL_ID_MAX];
    char c[IPD_LIVE_CALL_ID_MAX], o[IPD_LIVE_CALL_ID_MAX];
    struct ipd_buf text;
    ipd_buf_init(&text, IPD_BUF_UNLIMITED);
    int64_t now = ipd_mono_ms();
    CHECK_INT(ipd_live_call_open(l, 1, a), IPD_LIVE_CALL_OK);
    CHECK_INT(ipd_live_call_open(l, 2, b), IPD_LIVE_CALL_OK);
    CHECK_INT(ipd_live_call_open(l, 3, c), IPD_LIVE_CALL_OK);
    CHECK_INT(ipd_live_call_open(other, 1, o), IPD_LIVE_CALL_OK);
    ipd_live_fd_clear(l);
    CHECK(!fd_readable(l));
    CHECK_INT(answer(l, a, "{\"result\":\"a\"}"), IPD_LIVE_CALL_OK);
    CHECK(fd_readable(l));
    ipd_live_fd_clear(l);
    CHECK_INT(answer(l, a, "{\"result\":\"again\"}"), IPD_LIVE_CALL_TWICE);
    CHECK_INT(answer(l, o, "{\"result\":\"o\"}"), IPD_LIVE_CALL_UNKNOWN);
    CHECK_INT(answer(l, "call_aaaaaaaaaaaaaaaaaaaaaaaaaa", "{\"result\":0}"),
              IPD_LIVE_CALL_UNKNOWN);
    CHECK_INT(answer(l, "", "{\"result\":0}"), IPD_LIVE_CALL_UNKNOWN);
    CHECK(!fd_readable(l)); /* refused answers wake nobody */
    CHECK_INT(take_call(l, now, &text), 1);
    CHECK_STR(text.buf, "{\"result\":\"a\"}"); /* the first answer */
    CHECK_INT(answer(l, a, "{\"result\":\"again\"}"), IPD_LIVE_CALL_TWICE);
    CHECK_INT(answer(l, b, "{\"result\":\"b\"}"), IPD_LIVE_CALL_OK);
    CHECK_INT(ipd_live_calls_waiting(l), 1);
    ipd_live_calls_close(l);
    CHECK_INT(ipd_live_calls_waiting(l), 0);
    CHECK_INT(answer(l, c, "{\"result\":\"c\"}"), IPD_LIVE_CALL_GONE);
    CHECK_INT(answer(l, b, "{\"result\":\"b\"}"), IPD_LIVE_CALL_TWICE);
    CHECK_INT(answer(l, a, "{\"result\":\"a\"}"), IPD_LIVE_CALL_TWICE);
    CHECK_INT(take_call(l, now, &text), -1); /* the run is over */
    CHECK_INT(ipd_live_call_due(l, now), -1);
    CHECK_INT(answer(other, o, "{\"result\":\"o\"}"), IPD_LIVE_CALL_OK);
    ipd_buf_release(&text);
    ipd_live_unref(other);
    ipd_live_unref(l);
}

/* Answers come out in the order they were given (each in a millisecond
 * of its own here), each once, with the seq given at open and exactly
 * the JSON text given (len bytes of it), appended to the buffer. */
static void answers_taken_in_answer_order(void)
{
    static const char *const json[] = {
        "{\"error\":{\"type\":\"ValueError\",\"message\":\"no\"}}",
        "{\"result\":\"\xc3\xa9\\n\"}",
        "{\"result\":[1,\"two\",{\"3\":null}]}",
    };
    struct hooks h = {0};
    struct ipd_live *l = calling(&h, &call_lim);
    REQUIRE(l);
    char ids[3][IPD_LIVE_CALL_ID_MAX];
    for (int i = 0; i < 3; i++)
        CHECK_INT(ipd_live_call_open(l, 10 + (uint64_t)i, ids[i]),
                  IPD_LIVE_CALL_OK);
    /* Answered 12, 10, 11; only the first len bytes count. */
    static const char tail[] = "{\"result\":[1,\"two\",{\"3\":null}]}junk";
    CHECK_INT(ipd_live_call_answer(l, ids[2], tail, strlen(json[2])),
              IPD_LIVE_CALL_OK);
    next_ms();
    CHECK_INT(answer(l, ids[0], json[0]), IPD_LIVE_CALL_OK);
    next_ms();
    CHECK_INT(answer(l, ids[1], json[1]), IPD_LIVE_CALL_OK);
    CHECK_INT(ipd_live_calls_waiting(l), 0);
    static const int order[] = {2, 0, 1};
    struct ipd_buf text;
    ipd_buf_init(&text, IPD_BUF_UNLIMITED);
    int64_t now = ipd_mono_ms();
    for (int k = 0; k < 3; k++) {
        uint64_t seq = 0;
        ipd_buf_reset(&text);
        ipd_buf_adds(&text, "<");
        CHECK(ipd_live_call_take(l, now, &seq, &text));
        CHECK_INT(seq, 10 + order[k]);
        CHECK(text.len == 1 + strlen(json[order[k]]));
        CHECK_STR(text.buf + 1, json[order[k]]);
        CHECK(text.buf[0] == '<'); /* appended */
    }
    CHECK_INT(take_call(l, now, &text), -1);
    CHECK_INT(take_call(l, now + 10 * call_lim.call_timeout_ms, &text), -1);
    ipd_buf_release(&text);
    ipd_live_unref(l);
}

/* Regression: "the oldest answered first" was decided on the answer's
 * time in whole ms, ties going to the call opened first, so two answers
 * given within one millisecond came out in the order the calls were
 * opened.  Here b is answered before a, in the same ms: b first. */
static void same_ms_answers_taken_in_answer_order(void)
{
    struct hooks h = {0};
    struct ipd_buf text;
    ipd_buf_init(&text, IPD_BUF_UNLIMITED);
    bool tried = false;
    for (int attempt = 0; attempt < 100 && !tried; attempt++) {
        struct ipd_live *l = calling(&h, &call_lim);
        REQUIRE(l);
        char a[IPD_LIVE_CALL_ID_MAX], b[IPD_LIVE_CALL_ID_MAX];
        CHECK_INT(ipd_live_call_open(l, 1, a), IPD_LIVE_CALL_OK);
        CHECK_INT(ipd_live_call_open(l, 2, b), IPD_LIVE_CALL_OK);
        int64_t t = next_ms();
        CHECK_INT(answer(l, b, "{\"result\":\"b\"}"), IPD_LIVE_CALL_OK);
        CHECK_INT(answer(l, a, "{\"result\":\"a\"}"), IPD_LIVE_CALL_OK);
        if (ipd_mono_ms() == t) { /* both within one ms: the case */
            tried = true;
            CHECK_INT(take_call(l, t, &text), 2);
            CHECK_STR(text.buf, "{\"result\":\"b\"}");
            CHECK_INT(take_call(l, t, &text), 1);
            CHECK_STR(text.buf, "{\"result\":\"a\"}");
        }
        ipd_live_unref(l);
    }
    CHECKF(tried, "never answered twice within one millisecond");
    ipd_buf_release(&text);
}

/* A call that waits call_timeout_ms or longer is taken with a
 * TimeoutError (now_ms is the taker's clock: no waiting here), and then
 * its answer is GONE; ipd_live_call_due counts down to the oldest
 * waiting call's time-out. */
static void call_times_out(void)
{
    enum { T_MS = 1000 };
    struct hooks h = {0};
    struct ipd_live_call_limits lim = call_lim;
    lim.call_timeout_ms = T_MS;
    struct ipd_live *l = calling(&h, &lim);
    REQUIRE(l);
    char a[IPD_LIVE_CALL_ID_MAX], b[IPD_LIVE_CALL_ID_MAX];
    struct ipd_buf text;
    ipd_buf_init(&text, IPD_BUF_UNLIMITED);
    CHECK_INT(ipd_live_call_due(l, ipd_mono_ms()), -1);
    int64_t before_a = ipd_mono_ms();
    CHECK_INT(ipd_live_call_open(l, 7, a), IPD_LIVE_CALL_OK);
    int64_t after_a = ipd_mono_ms();
    int64_t due = ipd_live_call_due(l, after_a);
    CHECKF(due <= T_MS && due >= T_MS - (after_a - before_a), "due %lld",
           (long long)due);
    CHECK_INT(ipd_live_call_due(l, after_a + 100 * T_MS), 0);
    next_ms(); /* b opens after a's millisecond */
    CHECK_INT(ipd_live_call_open(l, 8, b), IPD_LIVE_CALL_OK);
    int64_t after_b = ipd_mono_ms();
    /* Both wait: a's time-out comes first (b's is at least a ms later). */
    due = ipd_live_call_due(l, after_b);
    CHECKF(due >= before_a + T_MS - after_b && due <= after_a + T_MS - after_b,
           "due %lld", (long long)due);
    CHECK_INT(take_call(l, before_a, &text), -1); /* nothing over yet */
    /* At after_a + T_MS, a has waited its time, b (opened later) not. */
    CHECK_INT(take_call(l, after_a + T_MS, &text), 7);
    CHECKF(error_of_type(text.buf, "TimeoutError"), "%s", text.buf);
    CHECK_INT(take_call(l, after_a + T_MS, &text), -1);
    CHECK_INT(ipd_live_calls_waiting(l), 1);
    due = ipd_live_call_due(l, after_a + T_MS); /* b's, now */
    CHECKF(due >= 1 && due <= after_b - after_a, "due %lld", (long long)due);
    /* A call that timed out had no answer: a late one is GONE, and the
     * producer is not woken for it. */
    ipd_live_fd_clear(l);
    CHECK_INT(answer(l, a, "{\"result\":\"late\"}"), IPD_LIVE_CALL_GONE);
    CHECK(!fd_readable(l));
    CHECK_INT(answer(l, b, "{\"result\":\"b\"}"), IPD_LIVE_CALL_OK);
    CHECK_INT(ipd_live_call_due(l, after_b), -1); /* none waits */
    /* Answered, then past its time-out: the answer, not a TimeoutError. */
    CHECK_INT(take_call(l, after_b + 100 * T_MS, &text), 8);
    CHECK_STR(text.buf, "{\"result\":\"b\"}");
    CHECK_INT(answer(l, b, "{\"result\":\"b\"}"), IPD_LIVE_CALL_TWICE);
    CHECK_INT(ipd_live_calls_waiting(l), 0);
    ipd_buf_release(&text);
    ipd_live_unref(l);
}

/* The client goes away (unstream) or the run ends: the producer is woken,
 * an answer already given is still taken first, then each waiting call
 * with a ConnectionError. */
static void client_gone(void)
{
    struct hooks h = {0};
    struct ipd_buf text;
    ipd_buf_init(&text, IPD_BUF_UNLIMITED);
    for (int end = 0; end <= 1; end++) {
        struct ipd_live *l = calling(&h, &call_lim);
        REQUIRE(l);
        char a[IPD_LIVE_CALL_ID_MAX], b[IPD_LIVE_CALL_ID_MAX];
        char c[IPD_LIVE_CALL_ID_MAX];
        int64_t now = ipd_mono_ms();
        CHECK_INT(ipd_live_call_open(l, 1, a), IPD_LIVE_CALL_OK);
        CHECK_INT(ipd_live_call_open(l, 2, b), IPD_LIVE_CALL_OK);
        CHECK_INT(ipd_live_call_open(l, 3, c), IPD_LIVE_CALL_OK);
        CHECK_INT(answer(l, b, "{\"result\":\"b\"}"), IPD_LIVE_CALL_OK);
        ipd_live_fd_clear(l);
        if (end) {
            char *res = strdup("{\"success\":true}");
            ipd_live_end(l, res, strlen(res));
        } else {
            ipd_live_unstream(l);
            CHECK(fd_readable(l)); /* calls waited: it must take them */
        }
        CHECK_INT(take_call(l, now, &text), 2);
        CHECK_STR(text.buf, "{\"result\":\"b\"}");
        for (int seq = 1; seq <= 3; seq += 2) {
            CHECK_INT(take_call(l, now, &text), seq);
            CHECKF(error_of_type(text.buf, "ConnectionError"), "end %d: %s",
                   end, text.buf);
        }
        CHECK_INT(take_call(l, now, &text), -1);
        CHECK_INT(ipd_live_calls_waiting(l), 0);
        CHECK_INT(ipd_live_call_due(l, now), -1);
        CHECK_INT(answer(l, a, "{\"result\":\"a\"}"), IPD_LIVE_CALL_GONE);
        ipd_live_unref(l);
    }
    ipd_buf_release(&text);
}

/* The client's side: answers each call handed to it, from its own
 * thread, with {"result": seq}. */
struct answerer {
    struct ipd_live *l;
    pthread_mutex_t lock;
    pthread_cond_t more;
    char (*ids)[IPD_LIVE_CALL_ID_MAX];
    uint64_t *seqs;
    unsigned head, tail; /* handed over: [head, tail) not yet answered */
    bool done;
    unsigned refused; /* answers not OK */
};

static void *answer_calls(void *arg)
{
    struct answerer *an = arg;
    for (;;) {
        pthread_mutex_lock(&an->lock);
        while (an->head == an->tail && !an->done)
            pthread_cond_wait(&an->more, &an->lock);
        if (an->head == an->tail) {
            pthread_mutex_unlock(&an->lock);
            break;
        }
        unsigned i = an->head++;
        pthread_mutex_unlock(&an->lock);
        char json[64];
        snprintf(json, sizeof json, "{\"result\":%llu}",
                 (unsigned long long)an->seqs[i]);
        if (answer(an->l, an->ids[i], json) != IPD_LIVE_CALL_OK)
            an->refused++; /* only this thread writes it */
    }
    return NULL;
}

/* The producer side of the threads test: open what it may, wait for the
 * fd, take what is over; false when the fd stayed quiet 10 s (an answer
 * lost). */
static bool open_and_take(struct ipd_live *l, struct answerer *an, unsigned n,
                          unsigned *opened, bool *seen, unsigned *taken)
{
    struct ipd_buf text;
    ipd_buf_init(&text, IPD_BUF_UNLIMITED);
    char want[64];
    bool ok = true;
    while (*opened < n && ok) {
        unsigned i = *opened;
        enum ipd_live_call rc = ipd_live_call_open(l, i, an->ids[i]);
        if (rc == IPD_LIVE_CALL_BUSY)
            break;
        CHECK_INT(rc, IPD_LIVE_CALL_OK);
        ok = rc == IPD_LIVE_CALL_OK;
        CHECK(ipd_live_calls_waiting(l) <= call_lim.max_in_flight);
        an->seqs[i] = i;
        pthread_mutex_lock(&an->lock);
        an->tail = ++*opened;
        pthread_cond_signal(&an->more);
        pthread_mutex_unlock(&an->lock);
    }
    struct pollfd pf = {ipd_live_fd(l), POLLIN, 0};
    ok = ok && poll(&pf, 1, 10000) == 1;
    ipd_live_fd_clear(l);
    long long seq;
    while (ok && (seq = take_call(l, ipd_mono_ms(), &text)) >= 0) {
        CHECKF(seq < n && !seen[seq], "seq %lld taken twice", seq);
        ok = seq < n && !seen[seq];
        snprintf(want, sizeof want, "{\"result\":%lld}", seq);
        CHECK_STR(text.buf, want);
        if (ok) {
            seen[seq] = true;
            ++*taken;
        }
    }
    ipd_buf_release(&text);
    return ok;
}

/* One thread answers 200 calls while this one opens them (4 at most in
 * flight) and takes the answers as the fd says: each answer once, none
 * lost, each with its own seq. */
static void calls_from_another_thread(void)
{
    enum { N = 200 };
    struct hooks h = {0};
    struct ipd_live_call_limits lim = call_lim;
    lim.max_calls = N;
    struct ipd_live *l = calling(&h, &lim);
    REQUIRE(l);
    static char ids[N][IPD_LIVE_CALL_ID_MAX];
    static uint64_t seqs[N];
    struct answerer an = {.l = l, .ids = ids, .seqs = seqs};
    pthread_mutex_init(&an.lock, NULL);
    pthread_cond_init(&an.more, NULL);
    pthread_t t;
    REQUIRE(pthread_create(&t, NULL, answer_calls, &an) == 0);
    bool seen[N] = {false};
    unsigned opened = 0, taken = 0;
    bool ok = true;
    while (taken < N && ok)
        ok = open_and_take(l, &an, N, &opened, seen, &taken);
    CHECKF(ok, "stopped at %u taken of %u opened", taken, opened);
    pthread_mutex_lock(&an.lock);
    an.done = true;
    pthread_cond_signal(&an.more);
    pthread_mutex_unlock(&an.lock);
    pthread_join(t, NULL);
    CHECK_INT(an.refused, 0);
    CHECK_INT(taken, N);
    CHECK_INT(ipd_live_calls_waiting(l), 0);
    char id[IPD_LIVE_CALL_ID_MAX];
    CHECK_INT(ipd_live_call_open(l, N, id), IPD_LIVE_CALL_LIMIT);
    pthread_cond_destroy(&an.more);
    pthread_mutex_destroy(&an.lock);
    ipd_live_unref(l);
}

TEST_MAIN(T(split_characters_stay_whole), T(bounded_and_coalesced),
          T(unstreamed_keeps_nothing), T(result_last), T(hooks_in_pairs),
          T(cancel_wakes_producer), T(events_count_toward_bound), T(calls_off),
          T(call_ids), T(call_limits), T(answer_outcomes),
          T(answers_taken_in_answer_order),
          T(same_ms_answers_taken_in_answer_order), T(call_times_out),
          T(client_gone), T(calls_from_another_thread))
