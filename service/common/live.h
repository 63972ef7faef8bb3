/*
 * live.h - one execution's live channel: its cancel flag and, while a
 * client streams it, its events on their way to that client.
 *
 * Three parties hold a reference each:
 *   - the execution pool's entry (service/exec/pool.c): ipd_live_cancel;
 *   - the thread that supervises the run (service/sandbox/run.c), the
 *     producer: it polls ipd_live_fd, kills the run once
 *     ipd_live_cancelled, reads the run's pipes only while ipd_live_room
 *     allows and hands what it read to ipd_live_output; the pool ends the
 *     stream with the result (ipd_live_end);
 *   - a streaming connection (api/sse.c), the consumer: ipd_live_take.
 *
 * Bounded: the output waiting for the consumer never exceeds
 * IPD_LIVE_PENDING_MAX bytes (other events count too: a producer that
 * asks ipd_live_room before each goes past it by one event at most).
 * When it is full the producer stops reading
 * (the run's pipes fill and the run blocks in write, its wall clock still
 * running), so a client that reads slowly costs the service that much
 * memory and no more.  Coalesced: output that arrives while the last
 * event is still waiting joins it (up to IPD_LIVE_EVENT_MAX bytes), so a
 * flood of tiny writes is a few events, not one per write.  Chunks end on
 * UTF-8 character boundaries (a character split across two reads waits
 * for its rest).
 *
 * Thread-safety: every function may be called from any thread; the
 * consumer's hooks run under the channel's lock (they may call
 * libmicrohttpd's suspend and resume, nothing that takes this lock).
 */
#ifndef IPD_LIVE_H
#define IPD_LIVE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "buf.h"
#include "ipd.h"
#include "util.h"

#define IPD_LIVE_PENDING_MAX (256 * 1024) /* output waiting, bytes */
#define IPD_LIVE_EVENT_MAX (64 * 1024)    /* one coalesced chunk, bytes */
#define IPD_LIVE_COALESCE_MS 10           /* at most one output wake-up per */
#define IPD_LIVE_KIND_MAX 16              /* an event's kind, with its NUL */

struct ipd_live;

/* A new channel (one reference), or NULL when no eventfd could be had. */
struct ipd_live *ipd_live_new(void);
struct ipd_live *ipd_live_ref(struct ipd_live *l); /* NULL is fine */
void ipd_live_unref(struct ipd_live *l);           /* NULL is fine */

/* ---- cancel ------------------------------------------------------------ */

/* Ask for the run to stop and wake the producer.  False when it had
 * been asked already. */
bool ipd_live_cancel(struct ipd_live *l);
bool ipd_live_cancelled(struct ipd_live *l); /* false for NULL */

/* ---- the producer ------------------------------------------------------ */

/* Readable (POLLIN) when the producer should look again: a cancel, or
 * room after the consumer took output.  ipd_live_fd_clear reads it. */
int ipd_live_fd(const struct ipd_live *l);
void ipd_live_fd_clear(struct ipd_live *l);
/* How many more bytes of output may be read now: 0 while the waiting
 * output is at IPD_LIVE_PENDING_MAX; SIZE_MAX when nobody streams (NULL
 * too).  After an answer of 0, ipd_live_fd turns readable when there is
 * room again. */
size_t ipd_live_room(struct ipd_live *l);
/* Bytes the run wrote to its stdout (stream 1) or stderr (2), in the
 * order they were read; nothing happens when nobody streams. */
void ipd_live_output(struct ipd_live *l, int stream, const char *data,
                     size_t len);
/* Another event (kind: fewer than IPD_LIVE_KIND_MAX characters), its
 * data JSON text (one line: no raw newline). */
void ipd_live_event(struct ipd_live *l, const char *kind, const char *json,
                    size_t len);
/* A flood of output wakes the consumer at most once per
 * IPD_LIVE_COALESCE_MS: ipd_live_due says in how many ms the producer
 * must call ipd_live_flush (-1: nothing due), which wakes it then. */
int64_t ipd_live_due(struct ipd_live *l);
void ipd_live_flush(struct ipd_live *l);
/* The last event, "result": json (owned, JSON text on one line; freed
 * here).  The waiting output goes first; nothing comes after it. */
void ipd_live_end(struct ipd_live *l, char *json, size_t len);
/* ipd_live_end with the last event of another kind than "result" (an
 * MCP stream's JSON-RPC response, "message": api/h_mcp.c). */
void ipd_live_end_as(struct ipd_live *l, const char *kind, char *json,
                     size_t len);
/* The consumer took the last event (ipd_live_end's). */
bool ipd_live_took_last(struct ipd_live *l);
/* A consumer is attached (false for NULL). */
bool ipd_live_streamed(struct ipd_live *l);
/* True once ipd_live_end ran. */
bool ipd_live_ended(struct ipd_live *l);

/* ---- the consumer ------------------------------------------------------ */

/* The consumer's hooks, called under the lock: sleep(ctx) when a take
 * found nothing (suspend the connection), wake(ctx) once when something
 * arrives after that, or on ipd_live_poke (resume it). */
struct ipd_live_consumer {
    void (*sleep)(void *ctx);
    void (*wake)(void *ctx);
    void *ctx;
};

/* Attach the consumer (before the run starts: output before that is not
 * kept).  At most one. */
void ipd_live_stream(struct ipd_live *l, const struct ipd_live_consumer *c);
/* The consumer is gone: its hooks are never called again; waiting output
 * is dropped and later output is not kept. */
void ipd_live_unstream(struct ipd_live *l);

enum ipd_live_take {
    IPD_LIVE_NONE,  /* nothing yet: sleep was called */
    IPD_LIVE_EVENT, /* *id, *kind and data filled */
    IPD_LIVE_PING,  /* nothing yet, but poked: send a keep-alive */
    IPD_LIVE_OVER,  /* the result was taken: nothing more will come */
};
/* The next event: its id (1, 2, ...), kind ("stdout", "stderr", or one
 * given to ipd_live_event; "result" last) and data (JSON text, appended
 * to data).  IPD_LIVE_NONE calls sleep(ctx) before it returns. */
enum ipd_live_take ipd_live_take(struct ipd_live *l, uint64_t *id,
                                 char kind[IPD_LIVE_KIND_MAX],
                                 struct ipd_buf *data);
/* Wake the consumer if it has slept since idle_ms (monotonic) or longer:
 * its next take answers IPD_LIVE_PING (a keep-alive), and the idle time
 * starts again.  True when it was woken. */
bool ipd_live_poke(struct ipd_live *l, int64_t idle_ms);
/* Since when an event (or a poke's keep-alive) has waited for the
 * consumer to take it, monotonic ms; 0 when nothing waits.  Lock-free:
 * for a watchdog that must not take the channel's lock (a client that
 * reads nothing lets it grow). */
int64_t ipd_live_waiting_since(struct ipd_live *l);

/* ---- calls from the code to its client ---------------------------------
 *
 * A streamed run's code may call its client (call_client, docs/API.md
 * "Calls"): the run's supervisor reads the call from the run's call
 * socket (service/common/calls.c), opens it here (ipd_live_call_open),
 * which gives it a call id, and sends a "call" event; the client's answer
 * comes through the API (ipd_live_call_answer, any thread) and wakes the
 * producer, which takes it (ipd_live_call_take) and writes it to the
 * code.  Bounded: at most max_calls calls in a run, max_in_flight waiting
 * at once, each answer at most max_bytes.
 */
struct json_t;
struct ipd_live_call_limits {
    size_t max_bytes;        /* a call's arguments, an answer's JSON */
    unsigned max_calls;      /* calls in one run */
    unsigned max_in_flight;  /* calls waiting for their answer at once */
    int64_t call_timeout_ms; /* one call's wait: then TimeoutError */
    int64_t max_wait_ms;     /* a run's wall clock is paused while a call
                                waits, at most this long in all */
    /* The same socket carries each display bundle as the code shows it
     * (calls.h): display(display_ctx, bundle) checks it (the bundle
     * parsed, borrowed) and sends its event; NULL: such frames are
     * dropped.  display_ctx is freed (free) with the channel. */
    void (*display)(void *ctx, struct json_t *bundle);
    void *display_ctx;
    size_t display_bytes; /* a display frame's bound */
};
#define IPD_LIVE_CALL_ID_MAX IPD_ID_MAX /* "call_" + 26 characters */

/* Calls are possible in this run, within lim (before the run starts;
 * NULL l: nothing; its display_ctx is the channel's from now on, or
 * freed here for NULL l; once). */
void ipd_live_calls_enable(struct ipd_live *l,
                           const struct ipd_live_call_limits *lim);
/* False when calls were never enabled (NULL too); else *lim. */
bool ipd_live_calls_limits(struct ipd_live *l,
                           struct ipd_live_call_limits *lim);
/* A run of the execution begins (the producer): calls may be opened
 * until ipd_live_calls_close (a second run, after an automatic install,
 * begins again: the calls of the first stay over).  As
 * ipd_live_calls_limits otherwise. */
bool ipd_live_calls_begin(struct ipd_live *l, struct ipd_live_call_limits *lim);

enum ipd_live_call {
    IPD_LIVE_CALL_OK,
    IPD_LIVE_CALL_UNKNOWN, /* no such call (another run's, or none) */
    IPD_LIVE_CALL_TWICE,   /* answered already */
    IPD_LIVE_CALL_GONE,    /* over: timed out, or the run ended */
    IPD_LIVE_CALL_LIMIT,   /* open: the run made max_calls calls */
    IPD_LIVE_CALL_BUSY,    /* open: max_in_flight calls wait already */
    IPD_LIVE_CALL_NOBODY,  /* open: no client streams (gone, or detached)
                              or the run ended */
};

/* The producer: a new call, tagged seq by the code, waiting from now;
 * its id into id.  Send its "call" event after this (an answer may come
 * as soon as the client sees it). */
enum ipd_live_call ipd_live_call_open(struct ipd_live *l, uint64_t seq,
                                      char id[IPD_LIVE_CALL_ID_MAX]);
/* Any thread (the API): the client's answer to call id, JSON text of
 * {"result": ...} or {"error": {"type", "message"}} (checked by the
 * caller, at most max_bytes; copied).  Wakes the producer. */
enum ipd_live_call ipd_live_call_answer(struct ipd_live *l, const char *id,
                                        const char *json, size_t len);
/* The producer: the next call that is over for the code, the oldest
 * answered first, then any that waited longer than call_timeout_ms
 * (answered {"error": {"type": "TimeoutError", ...}}) or whose client
 * went away (ConnectionError): its seq and answer (appended to answer).
 * False when there is none. */
bool ipd_live_call_take(struct ipd_live *l, int64_t now_ms, uint64_t *seq,
                        struct ipd_buf *answer);
/* Calls waiting for their client now. */
unsigned ipd_live_calls_waiting(struct ipd_live *l);
/* In how many ms the oldest waiting call times out (-1: none waits). */
int64_t ipd_live_call_due(struct ipd_live *l, int64_t now_ms);
/* The run is over: calls are gone (later answers: IPD_LIVE_CALL_GONE). */
void ipd_live_calls_close(struct ipd_live *l);

#endif
