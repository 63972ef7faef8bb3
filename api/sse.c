/*
 * sse.c - an execution's events as Server-Sent Events (see http.h).
 *
 * The connection is never a thread's: the response's content reader
 * takes one event at a time from the live channel
 * (service/common/live.h) and, when there is none, suspends the
 * connection from inside the reader (the channel's sleep hook), which
 * libmicrohttpd allows; the producer's next event, or the daemon
 * sweeper's keep-alive poke, resumes it (the wake hook).  Both hooks run
 * under the channel's lock, so a resume never precedes its suspend.
 *
 * Each event is `id: N`, `event: KIND`, `data: JSON` (one line: compact
 * JSON holds no raw newline) and a blank line; a keep-alive is the
 * comment `: keep-alive`.
 */
#include <stdlib.h>
#include <string.h>

#include "http.h"

struct sse {
    struct ipd_live *live; /* a reference */
    struct ipd_buf text;   /* formatted, not yet handed over */
    size_t off;
    bool over; /* the result went out */
};

static void conn_sleep(void *ctx)
{
    MHD_suspend_connection(ctx);
}

static void conn_wake(void *ctx)
{
    MHD_resume_connection(ctx);
}

void ipd_sse_consumer(struct ipd_req *r, struct ipd_live_consumer *c)
{
    c->sleep = conn_sleep;
    c->wake = conn_wake;
    c->ctx = r->conn;
}

/* The next event, or keep-alive, formatted into s->text; false when
 * there is none now (the connection was suspended) or no more. */
static bool next_text(struct sse *s)
{
    char kind[IPD_LIVE_KIND_MAX];
    uint64_t id = 0;
    struct ipd_buf data;
    ipd_buf_init(&data, IPD_BUF_UNLIMITED);
    enum ipd_live_take t = ipd_live_take(s->live, &id, kind, &data);
    if (t == IPD_LIVE_EVENT) {
        IPD_ASSERT(ipd_buf_addf(&s->text, "id: %llu\nevent: %s\ndata: ",
                                (unsigned long long)id, kind) == IPD_OK);
        IPD_ASSERT(ipd_buf_add(&s->text, data.buf, data.len) == IPD_OK);
        IPD_ASSERT(ipd_buf_adds(&s->text, "\n\n") == IPD_OK);
        s->over = ipd_live_took_last(s->live);
    } else if (t == IPD_LIVE_PING) {
        IPD_ASSERT(ipd_buf_adds(&s->text, ": keep-alive\n\n") == IPD_OK);
    } else if (t == IPD_LIVE_OVER) {
        s->over = true;
    }
    ipd_buf_release(&data);
    return t == IPD_LIVE_EVENT || t == IPD_LIVE_PING;
}

static ssize_t sse_read(void *cls, uint64_t pos, char *buf, size_t max)
{
    struct sse *s = cls;
    (void)pos;
    if (s->off == s->text.len) {
        ipd_buf_reset(&s->text);
        s->off = 0;
        if (s->over)
            return MHD_CONTENT_READER_END_OF_STREAM;
        if (!next_text(s))
            return s->over ? MHD_CONTENT_READER_END_OF_STREAM : 0;
    }
    size_t n = s->text.len - s->off < max ? s->text.len - s->off : max;
    memcpy(buf, s->text.buf + s->off, n);
    s->off += n;
    return (ssize_t)n;
}

static void sse_free(void *cls)
{
    struct sse *s = cls;
    ipd_buf_release(&s->text);
    ipd_live_unref(s->live);
    free(s);
}

void ipd_sse_reply(struct ipd_req *r, struct ipd_live *live)
{
    struct sse *s = ipd_xcalloc(1, sizeof(*s));
    s->live = ipd_live_ref(live);
    ipd_buf_init(&s->text, IPD_BUF_UNLIMITED);
    struct MHD_Response *resp = MHD_create_response_from_callback(
        MHD_SIZE_UNKNOWN, 16 * 1024, sse_read, s, sse_free);
    IPD_ASSERT(resp);
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE,
                            "text/event-stream; charset=utf-8");
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
    /* Proxies (nginx) must not buffer the stream. */
    MHD_add_response_header(resp, "X-Accel-Buffering", "no");
    ipd_req_stream(r, live);
    ipd_reply_response(r, MHD_HTTP_OK, resp, 0);
}
