/*
 * calls.c - the service's end of a run's call socket (see calls.h).
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "calls.h"
#include "util.h"

/* A frame from the code: its args and kwargs within max_bytes, and the
 * rest (keys, seq, a name of IPD_CALLS_NAME_MAX bytes, each escaped as
 * \uXXXX at worst). */
#define FRAME_EXTRA (6 * IPD_CALLS_NAME_MAX + 256)

struct ipd_calls {
    struct ipd_live *live; /* borrowed */
    int fd;                /* -1 once closed */
    size_t frame_max, call_frame_max;
    int64_t max_wait_ms;
    void (*display)(void *ctx, json_t *bundle);
    void *display_ctx;
    /* in: the length, then the frame */
    unsigned char head[4];
    size_t head_got;
    char *frame; /* NULL until the length is known */
    size_t frame_len, frame_got;
    uint64_t last_seq;
    /* out: answers not yet written */
    struct ipd_buf out;
    size_t out_off;
    short asked; /* the events the last ipd_calls_pollfd asked for */
    /* the paused clock */
    bool waiting;
    int64_t last_tick, paused_ms;
};

struct ipd_calls *ipd_calls_new(struct ipd_live *l, int fd)
{
    struct ipd_live_call_limits lim;
    struct ipd_calls *c = ipd_xcalloc(1, sizeof(*c));
    int fl = fcntl(fd, F_GETFL);

    c->live = l;
    c->fd = fd;
    if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0 ||
        !ipd_live_calls_begin(l, &lim))
        ipd_close_fd(&c->fd);
    else {
        c->call_frame_max = lim.max_bytes + FRAME_EXTRA;
        c->frame_max = c->call_frame_max;
        if (lim.display && lim.display_bytes + FRAME_EXTRA > c->frame_max)
            c->frame_max = lim.display_bytes + FRAME_EXTRA;
        c->max_wait_ms = lim.max_wait_ms;
        c->display = lim.display;
        c->display_ctx = lim.display_ctx;
    }
    ipd_buf_init(&c->out, IPD_BUF_UNLIMITED);
    c->last_tick = ipd_mono_ms();
    return c;
}

int ipd_calls_fd(const struct ipd_calls *c)
{
    return c ? c->fd : -1;
}

/* Answers wait for the code to read them: write what it takes. */
static bool out_pending(const struct ipd_calls *c)
{
    return c->out.len > c->out_off;
}

void ipd_calls_pollfd(struct ipd_calls *c, struct pollfd *p)
{
    short ev = 0;
    p->fd = -1;
    p->events = p->revents = 0;
    if (!c)
        return;
    if (c->fd >= 0 && out_pending(c))
        ev |= POLLOUT;
    /* Read only with room for what a frame makes: its event, and
     * answers beyond one. */
    if (c->fd >= 0 && c->out.len - c->out_off < IPD_CALLS_OUT_MAX &&
        ipd_live_room(c->live))
        ev |= POLLIN;
    c->asked = ev;
    p->fd = ev ? c->fd : -1;
    p->events = ev;
}

/* The socket is broken, or the code broke the protocol: no more calls
 * (the code sees EOF: ConnectionError). */
static void shut(struct ipd_calls *c)
{
    ipd_close_fd(&c->fd);
    free(c->frame);
    c->frame = NULL;
}

/* One answer frame: seq, then the members of answer (an object's text,
 * "{...}"). */
static void queue_answer(struct ipd_calls *c, uint64_t seq, const char *answer,
                         size_t len)
{
    char pre[32];
    int n =
        snprintf(pre, sizeof pre, "{\"seq\":%llu,", (unsigned long long)seq);
    size_t body = (size_t)n + len - 1;
    unsigned char head[4] = {(unsigned char)(body >> 24),
                             (unsigned char)(body >> 16),
                             (unsigned char)(body >> 8), (unsigned char)body};

    IPD_ASSERT(len >= 2 && answer[0] == '{');
    if (c->out_off == c->out.len) {
        c->out.len = c->out_off = 0;
    }
    IPD_ASSERT(ipd_buf_add(&c->out, head, sizeof head) == IPD_OK);
    IPD_ASSERT(ipd_buf_add(&c->out, pre, (size_t)n) == IPD_OK);
    IPD_ASSERT(ipd_buf_add(&c->out, answer + 1, len - 1) == IPD_OK);
}

static void refuse(struct ipd_calls *c, uint64_t seq, const char *type,
                   const char *msg)
{
    char text[512];
    int n =
        snprintf(text, sizeof text,
                 "{\"error\":{\"type\":\"%s\",\"message\":\"%s\"}}", type, msg);
    IPD_ASSERT(n > 0 && (size_t)n < sizeof text);
    queue_answer(c, seq, text, (size_t)n);
}

/* A display frame, exactly {"op": "display", "bundle": {...}}. */
static bool display_ok(const json_t *doc)
{
    const json_t *op = json_object_get(doc, "op");
    return json_is_object(doc) && json_object_size(doc) == 2 &&
           json_is_string(op) && !strcmp(json_string_value(op), "display") &&
           json_is_object(json_object_get(doc, "bundle"));
}

/* The call's checked frame, exactly {"op": "call", "seq", "name", "args",
 * "kwargs"}: false for anything else. */
static bool frame_ok(const json_t *doc, uint64_t want_seq)
{
    const json_t *op = json_object_get(doc, "op");
    const json_t *seq = json_object_get(doc, "seq");
    const json_t *name = json_object_get(doc, "name");

    return json_is_object(doc) && json_object_size(doc) == 5 &&
           json_is_string(op) && !strcmp(json_string_value(op), "call") &&
           json_is_integer(seq) &&
           (uint64_t)json_integer_value(seq) == want_seq &&
           json_is_string(name) && json_string_length(name) > 0 &&
           json_string_length(name) <= IPD_CALLS_NAME_MAX &&
           !memchr(json_string_value(name), '\0', json_string_length(name)) &&
           json_is_array(json_object_get(doc, "args")) &&
           json_is_object(json_object_get(doc, "kwargs"));
}

/* A whole frame: open the call and send its event, or refuse it. */
static void take_frame(struct ipd_calls *c)
{
    json_error_t jerr;
    json_t *doc =
        json_loadb(c->frame, c->frame_len, JSON_REJECT_DUPLICATES, &jerr);
    char id[IPD_LIVE_CALL_ID_MAX];

    free(c->frame);
    c->frame = NULL;
    if (c->display && display_ok(doc)) {
        c->display(c->display_ctx, json_object_get(doc, "bundle"));
        json_decref(doc);
        return;
    }
    if (!doc || c->frame_len > c->call_frame_max ||
        !frame_ok(doc, c->last_seq + 1)) {
        json_decref(doc);
        shut(c);
        return;
    }
    uint64_t seq = ++c->last_seq;
    switch (ipd_live_call_open(c->live, seq, id)) {
    case IPD_LIVE_CALL_OK: {
        json_t *ev = json_pack("{s:s, s:O, s:O, s:O}", "call_id", id, "name",
                               json_object_get(doc, "name"), "args",
                               json_object_get(doc, "args"), "kwargs",
                               json_object_get(doc, "kwargs"));
        /* Numbers as the code sent them (not a reply's 12 digits). */
        char *text = json_dumps(ev, JSON_COMPACT | JSON_ENSURE_ASCII);
        IPD_ASSERT(text);
        ipd_live_event(c->live, "call", text, strlen(text));
        free(text);
        json_decref(ev);
        break;
    }
    case IPD_LIVE_CALL_LIMIT:
        refuse(c, seq, "RuntimeError",
               "interpd: this run made as many calls as its policy allows "
               "(calls)");
        break;
    case IPD_LIVE_CALL_BUSY:
        refuse(c, seq, "RuntimeError",
               "interpd: too many calls wait for their answers at once "
               "(the policy's calls-in-flight)");
        break;
    default:
        refuse(c, seq, "ConnectionError",
               "interpd: no client is there to answer (the client went "
               "away, or detached)");
        break;
    }
    json_decref(doc);
}

/* Read what is there, at most one frame (the next read comes after the
 * poll that checks the room again).  False when nothing more can be read
 * now. */
static bool read_some(struct ipd_calls *c)
{
    ssize_t n;
    if (!c->frame) {
        n = read(c->fd, c->head + c->head_got, sizeof c->head - c->head_got);
        if (n > 0 && (c->head_got += (size_t)n) == sizeof c->head) {
            c->frame_len = (size_t)c->head[0] << 24 | (size_t)c->head[1] << 16 |
                           (size_t)c->head[2] << 8 | c->head[3];
            c->head_got = c->frame_got = 0;
            if (!c->frame_len || c->frame_len > c->frame_max) {
                shut(c);
                return false;
            }
            c->frame = ipd_xmalloc(c->frame_len);
        }
    } else {
        n = read(c->fd, c->frame + c->frame_got, c->frame_len - c->frame_got);
        if (n > 0 && (c->frame_got += (size_t)n) == c->frame_len) {
            take_frame(c);
            return false;
        }
    }
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
        shut(c); /* the code closed its end */
        return false;
    }
    return n > 0;
}

static void write_some(struct ipd_calls *c)
{
    while (out_pending(c)) {
        ssize_t n =
            write(c->fd, c->out.buf + c->out_off, c->out.len - c->out_off);
        if (n > 0) {
            c->out_off += (size_t)n;
        } else {
            if (n < 0 && errno != EAGAIN && errno != EINTR)
                shut(c);
            return;
        }
    }
    c->out.len = c->out_off = 0;
}

void ipd_calls_io(struct ipd_calls *c, short revents)
{
    if (!c || c->fd < 0 || !revents)
        return;
    if (revents & POLLOUT)
        write_some(c);
    /* POLLHUP comes whatever was asked: read only when there was room. */
    if (c->fd >= 0 && (c->asked & POLLIN) &&
        (revents & (POLLIN | POLLHUP | POLLERR)))
        while (c->fd >= 0 && read_some(c))
            ;
}

void ipd_calls_tick(struct ipd_calls *c, int64_t now_ms)
{
    struct ipd_buf ans;
    uint64_t seq;

    if (!c)
        return;
    if (c->waiting) {
        c->paused_ms += now_ms - c->last_tick;
        if (c->paused_ms > c->max_wait_ms)
            c->paused_ms = c->max_wait_ms;
    }
    c->last_tick = now_ms;
    ipd_buf_init(&ans, IPD_BUF_UNLIMITED);
    while (ipd_live_call_take(c->live, now_ms, &seq, &ans)) {
        if (c->fd >= 0)
            queue_answer(c, seq, ans.buf, ans.len);
        ans.len = 0;
    }
    ipd_buf_release(&ans);
    c->waiting = ipd_live_calls_waiting(c->live) > 0;
    if (c->fd >= 0 && out_pending(c))
        write_some(c);
}

int64_t ipd_calls_paused_ms(const struct ipd_calls *c)
{
    return c ? c->paused_ms : 0;
}

bool ipd_calls_waiting(const struct ipd_calls *c)
{
    return c && c->waiting;
}

int64_t ipd_calls_due(struct ipd_calls *c, int64_t now_ms)
{
    return c ? ipd_live_call_due(c->live, now_ms) : -1;
}

void ipd_calls_free(struct ipd_calls *c)
{
    if (!c)
        return;
    ipd_live_calls_close(c->live);
    shut(c);
    ipd_buf_release(&c->out);
    free(c);
}
