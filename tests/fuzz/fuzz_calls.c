/*
 * fuzz_calls.c - the service's end of a run's call socket
 * (service/common/calls.h) on whatever the run's code could write to it.
 * The harness is the code (the other end of a socketpair: it writes the
 * input, reads the answers) and the client (a consumer of the live
 * channel: it takes the call events and answers them), and drives the
 * service's end the way the run's supervisor does (poll, ipd_calls_io,
 * ipd_calls_tick), on a clock of its own.
 *
 * What must hold: no crash, no leak; at most max_in_flight calls wait, at
 * most max_calls are opened, the paused clock stays within max_wait_ms;
 * every answer the code reads is one well-formed frame, for a call it
 * made, once; and what the service accepts is what calls.h allows: the
 * harness reads the input's frames itself (expect()), by calls.h's rules,
 * and the service accepts no more than those before the first bad frame,
 * and once the input is all there and the client stayed, exactly those;
 * each result reaches the call it answers; a bad frame closes the socket;
 * the code's EOF does.
 *
 * Input: 4 bytes of settings, then the code's bytes.
 *   [0] the client: bits 0-1, how it answers: 0 at once with a result,
 *       1 at once with an error, 2 not before the second part, 3 never;
 *       bit 2, each answer twice; bit 3, an answer to an unknown call
 *       too; bit 4, it goes away before the second part; bit 5, the clock
 *       jumps past every call's timeout before the second part; bit 6, it
 *       takes no event before the second part (a slow client); bit 7,
 *       the code reads no answer before the second part (it floods)
 *   [1] the clock's step per turn, ms
 *   [2] bits 0-6, the code's writes: at most that + 1 bytes each, one per
 *       turn; bit 7, the code ends by exiting (its end closed) rather than
 *       by shutting its writes down
 *   [3] the first part: [3] * n / 255 of the n bytes; the rest is written
 *       after the service has done what it could with the first
 */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <jansson.h>

#include "service/common/calls.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

enum {
    ANSWER_RESULT = 0,
    ANSWER_ERROR = 1,
    ANSWER_LATER = 2,
    ANSWER_NEVER = 3,
    TWICE = 1 << 2,
    UNKNOWN = 1 << 3,
    CLIENT_GOES = 1 << 4,
    CLOCK_JUMPS = 1 << 5,
    SLOW_CLIENT = 1 << 6,
    CODE_FLOODS = 1 << 7,
};

#define MAX_BYTES 4096
#define MAX_CALLS 8
#define IN_FLIGHT 2
#define DISPLAY_BYTES 8192
#define MAX_WAIT_MS 1000
/* Far beyond any run: calls time out only when the clock jumps. */
#define TIMEOUT_MS (INT64_C(1) << 40)
#define JUMP_MS (INT64_C(1) << 42)
/* As calls.c bounds a frame: what max_bytes (or display_bytes) allows,
 * plus room for the keys and a name escaped at worst. */
#define FRAME_EXTRA (6 * IPD_CALLS_NAME_MAX + 256)
#define CALL_FRAME_MAX (MAX_BYTES + FRAME_EXTRA)
#define FRAME_MAX (DISPLAY_BYTES + FRAME_EXTRA)
#define TURNS_MAX 100000 /* a drive that never settles is a bug */

/* What the input's frames are, by calls.h's rules. */
struct expect {
    unsigned calls, displays; /* valid, before the first bad frame */
    bool bad;                 /* a bad frame (the socket must close) */
    size_t *call_end;         /* where each call's frame ends (seq - 1) */
};

/* The run as the harness sees it. */
struct run {
    struct ipd_live *live;
    struct ipd_calls *calls;
    int code; /* the code's end */
    unsigned *displays;
    unsigned mode;
    const uint8_t *in;
    size_t in_len, in_off, part_end, piece;
    int64_t now, step, paused;
    bool streaming, jumped, taking, reading;
    /* the client: events taken, calls held for later */
    unsigned events;
    char held[MAX_CALLS][IPD_LIVE_CALL_ID_MAX];
    unsigned n_held;
    /* the code: answer bytes read, and per seq (1..) what came */
    struct ipd_buf got;
    size_t seqs;    /* the calls the input has (struct expect) */
    char *answered; /* per seq: 0 none, 'r' result, 'R' refusal, 'o' other */
    long long *result;
    size_t *size; /* its answer frame's bytes */
    unsigned refusals;
    /* a flood: input bytes the service had read, answer bytes waiting in
     * the socket, when the first part settled (-1: not measured) */
    ssize_t flood_read, flood_queued;
};

static void display_count(void *ctx, json_t *bundle)
{
    IPD_ASSERT(json_is_object(bundle));
    (*(unsigned *)ctx)++;
}

static bool is_display(const json_t *doc)
{
    const json_t *op = json_object_get(doc, "op");
    return json_object_size(doc) == 2 && json_is_string(op) &&
           !strcmp(json_string_value(op), "display") &&
           json_is_object(json_object_get(doc, "bundle"));
}

static bool is_call(const json_t *doc, size_t len, unsigned seq)
{
    const json_t *op = json_object_get(doc, "op");
    const json_t *s = json_object_get(doc, "seq");
    const json_t *name = json_object_get(doc, "name");
    size_t nl = json_string_length(name);
    return len <= CALL_FRAME_MAX && json_object_size(doc) == 5 &&
           json_is_string(op) && !strcmp(json_string_value(op), "call") &&
           json_is_integer(s) && json_integer_value(s) == (json_int_t)seq &&
           json_is_string(name) && nl > 0 && nl <= IPD_CALLS_NAME_MAX &&
           !memchr(json_string_value(name), '\0', nl) &&
           json_is_array(json_object_get(doc, "args")) &&
           json_is_object(json_object_get(doc, "kwargs"));
}

/* The frames of p, as calls.h defines them, up to the first bad one (or
 * a frame cut short at the end: the rest may never come). */
static void expect(const uint8_t *p, size_t n, struct expect *e)
{
    size_t off = 0;
    memset(e, 0, sizeof(*e));
    while (n - off >= 4) {
        size_t len = (size_t)p[off] << 24 | (size_t)p[off + 1] << 16 |
                     (size_t)p[off + 2] << 8 | p[off + 3];
        if (!len || len > FRAME_MAX) {
            e->bad = true;
            return;
        }
        if (n - off - 4 < len)
            return;
        json_t *doc = json_loadb((const char *)p + off + 4, len,
                                 JSON_REJECT_DUPLICATES, NULL);
        bool display = is_display(doc);
        bool call = !display && is_call(doc, len, e->calls + 1);
        json_decref(doc);
        if (!display && !call) {
            e->bad = true;
            return;
        }
        off += 4 + len;
        e->displays += display;
        if (call) {
            e->call_end = ipd_xrealloc(e->call_end,
                                       (e->calls + 1) * sizeof(*e->call_end));
            e->call_end[e->calls++] = off;
        }
    }
}

/* One answer frame the code read: {"seq": N, "result": X} or {"seq": N,
 * "error": {"type": T, "message": M}}, for a call it made, once. */
static void answer_frame(struct run *r, const char *text, size_t len)
{
    json_t *doc = json_loadb(text, len, JSON_REJECT_DUPLICATES, NULL);
    json_t *seq = json_object_get(doc, "seq");
    json_t *res = json_object_get(doc, "result");
    json_t *err = json_object_get(doc, "error");
    const char *type = json_string_value(json_object_get(err, "type"));

    IPD_ASSERT(json_object_size(doc) == 2 && json_is_integer(seq));
    IPD_ASSERT(res || (json_object_size(err) == 2 && type &&
                       json_is_string(json_object_get(err, "message"))));
    json_int_t s = json_integer_value(seq);
    IPD_ASSERT(s >= 1 && (size_t)s <= r->seqs && !r->answered[s]);
    r->size[s] = 4 + len;
    if (res) {
        IPD_ASSERT(json_is_integer(res));
        r->answered[s] = 'r';
        r->result[s] = (long long)json_integer_value(res);
    } else if (!strcmp(type, "RuntimeError")) {
        r->answered[s] = 'R'; /* refused: too many calls, or in flight */
        r->refusals++;
    } else {
        /* Ours, a time-out (only once the clock jumped), or the client
         * gone (only once it went: then refusals are ConnectionErrors). */
        IPD_ASSERT(!strcmp(type, "ValueError") ||
                   (!strcmp(type, "TimeoutError") && r->jumped) ||
                   (!strcmp(type, "ConnectionError") && !r->streaming));
        r->answered[s] = 'o';
    }
    json_decref(doc);
}

/* The code reads what answers came.  True when some did. */
static bool code_reads(struct run *r)
{
    char b[4096];
    if (!r->reading)
        return false;
    ssize_t n = read(r->code, b, sizeof b);
    if (n <= 0) {
        IPD_ASSERT(n == 0 || errno == EAGAIN || errno == ECONNRESET);
        return false;
    }
    IPD_ASSERT(ipd_buf_add(&r->got, b, (size_t)n) == IPD_OK);
    size_t off = 0;
    while (r->got.len - off >= 4) {
        const unsigned char *h = (const unsigned char *)r->got.buf + off;
        size_t len =
            (size_t)h[0] << 24 | (size_t)h[1] << 16 | (size_t)h[2] << 8 | h[3];
        IPD_ASSERT(len > 0 && len < IPD_CALLS_OUT_MAX);
        if (r->got.len - off - 4 < len)
            break;
        answer_frame(r, r->got.buf + off + 4, len);
        off += 4 + len;
    }
    memmove(r->got.buf, r->got.buf + off, r->got.len - off);
    r->got.len -= off;
    return true;
}

/* The client answers call id (the k-th it saw). */
static void client_answers(struct run *r, const char *id, unsigned k)
{
    char text[64];
    int n = (r->mode & 3) == ANSWER_ERROR
                ? snprintf(text, sizeof text,
                           "{\"error\":{\"type\":\"ValueError\","
                           "\"message\":\"no\"}}")
                : snprintf(text, sizeof text, "{\"result\":%u}", k);
    enum ipd_live_call rc = ipd_live_call_answer(r->live, id, text, (size_t)n);
    /* Only a call over already (timed out, or its client gone) is GONE. */
    IPD_ASSERT(rc == IPD_LIVE_CALL_OK ||
               (rc == IPD_LIVE_CALL_GONE && (r->jumped || !r->streaming)));
    if (r->mode & TWICE) {
        enum ipd_live_call again =
            ipd_live_call_answer(r->live, id, text, (size_t)n);
        IPD_ASSERT(again == (rc == IPD_LIVE_CALL_OK ? IPD_LIVE_CALL_TWICE
                                                    : IPD_LIVE_CALL_GONE));
    }
    if (r->mode & UNKNOWN)
        IPD_ASSERT(ipd_live_call_answer(r->live,
                                        "call_aaaaaaaaaaaaaaaaaaaaaaaaaa", text,
                                        (size_t)n) == IPD_LIVE_CALL_UNKNOWN);
}

/* One call event: exactly {"call_id", "name", "args", "kwargs"}. */
static void call_event(struct run *r, const struct ipd_buf *data)
{
    json_t *ev = json_loadb(data->buf, data->len, JSON_REJECT_DUPLICATES, NULL);
    const char *id = json_string_value(json_object_get(ev, "call_id"));

    IPD_ASSERT(json_object_size(ev) == 4 && id && ipd_id_valid("call", id));
    IPD_ASSERT(json_is_string(json_object_get(ev, "name")) &&
               json_is_array(json_object_get(ev, "args")) &&
               json_is_object(json_object_get(ev, "kwargs")));
    unsigned k = r->events++;
    IPD_ASSERT(r->events <= MAX_CALLS);
    switch (r->mode & 3) {
    case ANSWER_RESULT:
    case ANSWER_ERROR: client_answers(r, id, k); break;
    case ANSWER_LATER:
        IPD_ASSERT(r->n_held < MAX_CALLS);
        snprintf(r->held[r->n_held++], IPD_LIVE_CALL_ID_MAX, "%s", id);
        break;
    default: break;
    }
    json_decref(ev);
}

/* The client takes what events wait.  True when it took some. */
static bool client_takes(struct run *r)
{
    char kind[IPD_LIVE_KIND_MAX];
    uint64_t id;
    struct ipd_buf data;
    bool took = false;

    if (!r->streaming || !r->taking)
        return false;
    ipd_buf_init(&data, IPD_BUF_UNLIMITED);
    while (ipd_live_take(r->live, &id, kind, &data) == IPD_LIVE_EVENT) {
        IPD_ASSERT(!strcmp(kind, "call"));
        call_event(r, &data);
        ipd_buf_reset(&data);
        took = true;
    }
    ipd_buf_release(&data);
    return took;
}

/* The invariants that hold after every turn. */
static void check(struct run *r)
{
    int64_t paused = ipd_calls_paused_ms(r->calls);
    IPD_ASSERT(ipd_live_calls_waiting(r->live) <= IN_FLIGHT);
    IPD_ASSERT(paused >= r->paused && paused <= MAX_WAIT_MS);
    IPD_ASSERT(ipd_calls_waiting(r->calls) ==
               (ipd_live_calls_waiting(r->live) > 0));
    /* A time-out is due exactly while a call waits for its client. */
    IPD_ASSERT((ipd_calls_due(r->calls, r->now) >= 0) ==
               (ipd_live_calls_waiting(r->live) > 0));
    r->paused = paused;
}

/* One turn of the supervisor's loop, with the code's and the client's
 * share.  True when anything moved. */
static bool turn(struct run *r)
{
    bool moved = false;
    if (r->code >= 0 && r->in_off < r->part_end) {
        size_t n = r->part_end - r->in_off;
        ssize_t w =
            write(r->code, r->in + r->in_off, n < r->piece ? n : r->piece);
        IPD_ASSERT(w > 0 || errno == EAGAIN || errno == EPIPE ||
                   errno == ECONNRESET);
        if (w > 0) {
            r->in_off += (size_t)w;
            moved = true;
        }
    }
    struct pollfd p;
    ipd_calls_pollfd(r->calls, &p);
    if (p.fd >= 0 && p.events)
        IPD_ASSERT(poll(&p, 1, 0) >= 0);
    moved |= p.revents != 0;
    ipd_calls_io(r->calls, p.revents);
    ipd_live_fd_clear(r->live);
    r->now += r->step;
    ipd_calls_tick(r->calls, r->now);
    check(r);
    moved |= code_reads(r);
    moved |= client_takes(r);
    return moved;
}

static void drive(struct run *r)
{
    int turns = 0;
    while (turn(r))
        IPD_ASSERT(++turns < TURNS_MAX);
}

/* Between the parts: the client goes, the clock jumps, a slow client
 * takes what waited, held calls are answered. */
static void between(struct run *r)
{
    if (r->mode & CLIENT_GOES) {
        ipd_live_unstream(r->live);
        r->streaming = false;
    }
    if (r->mode & CLOCK_JUMPS) {
        r->now += JUMP_MS;
        r->jumped = true;
        ipd_calls_tick(r->calls, r->now);
        check(r);
    }
    r->taking = r->reading = true;
    client_takes(r);
    for (unsigned i = 0; i < r->n_held; i++)
        client_answers(r, r->held[i], i);
    r->n_held = 0;
}

/* With the input all written and the client there throughout: exactly
 * the frames calls.h allows were taken, the socket is open unless a
 * frame was bad; each call was opened or refused (a bad frame drops the
 * answers not yet written: then only the opened are known), each result
 * reached the call it answered (the k-th call opened, refusals aside). */
static void check_exact(struct run *r, const struct expect *e)
{
    IPD_ASSERT(r->in_off == r->in_len || ipd_calls_fd(r->calls) < 0);
    IPD_ASSERT(*r->displays == e->displays);
    IPD_ASSERT((ipd_calls_fd(r->calls) < 0) == e->bad);
    IPD_ASSERT(e->bad || r->events + r->refusals == e->calls);
    unsigned k = 0;
    for (size_t s = 1; s <= e->calls && !e->bad; s++) {
        if (r->answered[s] == 'R')
            continue;
        IPD_ASSERT(r->answered[s] != 'r' || r->result[s] == k);
        k++;
    }
}

static size_t queued(int fd)
{
    int n = 0;
    IPD_ASSERT(ioctl(fd, FIONREAD, &n) == 0 && n >= 0);
    return (size_t)n;
}

/* A code that floods the socket, reads nothing, and whose calls wait:
 * when the first part settled, the input the service had read and the
 * answers in the socket. */
static void flood_measure(struct run *r)
{
    int fd = ipd_calls_fd(r->calls);
    if (!(r->mode & CODE_FLOODS) || (r->mode & 3) != ANSWER_NEVER || fd < 0)
        return;
    r->flood_read = (ssize_t)(r->in_off - queued(fd));
    r->flood_queued = (ssize_t)queued(r->code);
}

/* The answers the service held then (the refusals of the calls it had
 * read, less what was in the socket) were within IPD_CALLS_OUT_MAX, but
 * for the one frame read past it (calls.h "Bounded memory"). */
static void flood_check(struct run *r, const struct expect *e)
{
    size_t made = 0;
    if (r->flood_read < 0)
        return;
    for (unsigned i = 0;
         i < e->calls && e->call_end[i] <= (size_t)r->flood_read; i++)
        if (r->answered[i + 1] == 'R')
            made += r->size[i + 1];
    IPD_ASSERT(made <= (size_t)r->flood_queued + IPD_CALLS_OUT_MAX + 512);
}

static void run_init(struct run *r, const uint8_t *data, size_t size,
                     const struct expect *e)
{
    struct ipd_live_consumer none = {NULL, NULL, NULL};
    int sv[2];

    memset(r, 0, sizeof(*r));
    r->mode = data[0];
    r->step = data[1];
    r->piece = (size_t)(data[2] & 0x7f) + 1;
    r->in = data + 4;
    r->in_len = size - 4;
    r->part_end = r->in_len * data[3] / 255;
    r->streaming = true;
    r->taking = !(r->mode & SLOW_CLIENT);
    r->reading = !(r->mode & CODE_FLOODS);
    r->flood_read = r->flood_queued = -1;
    r->displays = ipd_xcalloc(1, sizeof(*r->displays));
    struct ipd_live_call_limits lim = {
        .max_bytes = MAX_BYTES,
        .max_calls = MAX_CALLS,
        .max_in_flight = IN_FLIGHT,
        .call_timeout_ms = TIMEOUT_MS,
        .max_wait_ms = MAX_WAIT_MS,
        .display = display_count,
        .display_ctx = r->displays, /* the channel's: freed with it */
        .display_bytes = DISPLAY_BYTES,
    };
    r->live = ipd_live_new();
    IPD_ASSERT(r->live);
    ipd_live_stream(r->live, &none);
    ipd_live_calls_enable(r->live, &lim);
    IPD_ASSERT(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC,
                          0, sv) == 0);
    r->code = sv[1];
    r->calls = ipd_calls_new(r->live, sv[0]);
    IPD_ASSERT(ipd_calls_fd(r->calls) == sv[0]);
    ipd_buf_init(&r->got, IPD_BUF_UNLIMITED);
    /* Only the input's calls can be answered. */
    r->seqs = e->calls;
    r->answered = ipd_xcalloc(r->seqs + 1, 1);
    r->result = ipd_xcalloc(r->seqs + 1, sizeof(*r->result));
    r->size = ipd_xcalloc(r->seqs + 1, sizeof(*r->size));
}

static void run_release(struct run *r)
{
    ipd_calls_free(r->calls);
    if (r->streaming)
        ipd_live_unstream(r->live);
    ipd_live_unref(r->live);
    if (r->code >= 0)
        close(r->code);
    ipd_buf_release(&r->got);
    free(r->answered);
    free(r->result);
    free(r->size);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static bool once;
    struct expect e;
    struct run r;

    if (!once) {
        signal(SIGPIPE, SIG_IGN); /* as the service (service/serve.c) */
        once = true;
    }
    if (size < 4)
        return 0;
    expect(data + 4, size - 4, &e);
    run_init(&r, data, size, &e);
    drive(&r);
    flood_measure(&r);
    between(&r);
    r.part_end = r.in_len;
    drive(&r);
    /* At most what calls.h allows; exactly that when nothing got in the
     * way. */
    IPD_ASSERT(*r.displays <= e.displays);
    IPD_ASSERT(r.events + r.refusals <= e.calls);
    if (r.streaming)
        check_exact(&r, &e);
    /* The code's EOF closes the service's end, whether it exits (the
     * answers it did not read are written to nobody) or only stops
     * writing. */
    if (data[2] & 0x80) {
        close(r.code);
        r.code = -1;
        r.reading = false;
    } else {
        IPD_ASSERT(shutdown(r.code, SHUT_WR) == 0);
    }
    drive(&r);
    IPD_ASSERT(ipd_calls_fd(r.calls) < 0);
    flood_check(&r, &e);
    run_release(&r);
    free(e.call_end);
    return 0;
}
