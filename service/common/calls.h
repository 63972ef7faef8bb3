/*
 * calls.h - the service's end of a run's call socket: the code's calls to
 * its client in, their answers out (docs/API.md "Calls"; the code's side
 * is call_client in service/exec/python/prelude_lib.py).
 *
 * One connected AF_UNIX stream socket per streamed run (a session's: per
 * call), made by the sandbox (service/sandbox/run.c), whose other end the
 * program holds (fd 3 of a cold run; passed with a warm run's or session
 * call's GO).  It reaches nothing but this: the code can only ask.
 *
 * Framing, both ways: a 4-byte big-endian length, then that many bytes of
 * JSON text, one object.
 *   code -> service: {"op": "call", "seq": N, "name": S, "args": [...],
 *                     "kwargs": {...}}   (exactly these keys; seq 1, 2, ...
 *                     in order; name 1..IPD_CALLS_NAME_MAX bytes; the
 *                     frame at most the run's max_bytes plus a fixed part
 *                     for the rest: the code's library keeps args and
 *                     kwargs within max_bytes)
 *                    {"op": "display", "bundle": {...}}  (a display
 *                     bundle as it is shown, at most display_bytes)
 *   service -> code: {"seq": N, "result": X} or
 *                    {"seq": N, "error": {"type": T, "message": M}}
 * Untrusted: a frame is read only up to its bound and parsed once whole;
 * anything else (a longer frame, another key, a seq out of order, bytes
 * that are not that JSON) closes the socket, and the code's calls fail
 * from then on (ConnectionError).  Descriptors the code sends along are
 * dropped by the kernel (plain reads take no SCM_RIGHTS).
 *
 * Each call is opened on the execution's live channel
 * (ipd_live_call_open), sent to the client as a "call" event
 * {"call_id", "name", "args", "kwargs"}, and answered by what the live
 * channel gives back (ipd_live_call_take).  A call the live channel
 * refuses is answered at once: RuntimeError for too many calls or too
 * many in flight, ConnectionError when no client streams.
 *
 * Bounded memory: frames are read only while the live channel has room
 * (ipd_live_room) and fewer than IPD_CALLS_OUT_MAX bytes of answers wait
 * for the code to read them, so a code that floods the socket, or a
 * client that reads slowly, blocks the code in write.
 *
 * Time: while a call waits, the run's wall clock stops (at most
 * max_wait_ms in all): ipd_calls_paused_ms.
 *
 * Thread-safety: one thread (the run's supervisor) uses it.
 */
#ifndef IPD_CALLS_H
#define IPD_CALLS_H

#include <stdbool.h>
#include <stdint.h>

#include "live.h"

#define IPD_CALLS_NAME_MAX 256        /* a call's name, bytes */
#define IPD_CALLS_OUT_MAX (64 * 1024) /* answers waiting beyond one */

struct ipd_calls;

/* The service's end fd (owned from now on; made non-blocking here) of a
 * run whose live channel l has calls enabled (l borrowed, outlives it). */
struct ipd_calls *ipd_calls_new(struct ipd_live *l, int fd);
/* The socket's fd, -1 once closed. */
int ipd_calls_fd(const struct ipd_calls *c);
/* What to poll now, into *p: the fd and its events, or fd -1 when
 * nothing is wanted (a socket the code closed reports POLLHUP whatever
 * is asked, so it is left out of the poll while there is no room).  NULL
 * c: fd -1. */
struct pollfd;
void ipd_calls_pollfd(struct ipd_calls *c, struct pollfd *p);
/* After poll: revents of that pollfd.  Reads only when the last
 * ipd_calls_pollfd asked for POLLIN. */
void ipd_calls_io(struct ipd_calls *c, short revents);
/* On every turn of the supervisor's loop: answers (and timed-out calls)
 * go out to the code; the paused time is counted. */
void ipd_calls_tick(struct ipd_calls *c, int64_t now_ms);
/* The wall clock's pause so far, ms. */
int64_t ipd_calls_paused_ms(const struct ipd_calls *c);
/* A call is waiting for its client (the clock is paused). */
bool ipd_calls_waiting(const struct ipd_calls *c);
/* In how many ms ipd_calls_tick must run again (-1: no need). */
int64_t ipd_calls_due(struct ipd_calls *c, int64_t now_ms);
/* Close the socket and end the run's calls (ipd_live_calls_close).
 * NULL is fine. */
void ipd_calls_free(struct ipd_calls *c);

#endif
