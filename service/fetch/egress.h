/*
 * egress.h - the way out of a networked run: an HTTP proxy on the run's
 * egress socket (sandbox.h: a socket listening on 127.0.0.1 inside the
 * run's own network namespace) that applies the SSRF guard of URL ingest
 * (guard.h) to every connection the run asks for.
 *
 * The run has no other route: its network namespace holds only its
 * loopback.  Its HTTP clients find the proxy through HTTP_PROXY and
 * HTTPS_PROXY (the executor sets them), so names are resolved here, not
 * in the run.  Two request forms, one per connection:
 *   CONNECT host:port HTTP/1.1   a tunnel (HTTPS: TLS runs end to end
 *                                through it, the proxy sees no plaintext)
 *   GET http://host[:port]/path HTTP/1.1   (any method) plain HTTP: the
 *                                request goes on in origin form, with
 *                                Proxy-* and Connection headers dropped
 *                                and "Connection: close" added
 * host is a name, an IPv4 literal or a bracketed IPv6 literal.  It is
 * resolved here (bounded by connect_timeout_ms) and EVERY address it
 * resolves to must pass ipd_fetch_addresses_check with the operator's
 * allowlist; the connection goes to one of exactly those addresses, so
 * DNS rebinding cannot slip a refused one in.  Answers of the proxy
 * itself, each with a one-line text/plain reason and "Connection: close":
 *   400  a request it does not understand (origin form, https:// in
 *        absolute form: use CONNECT; userinfo; a bad header)
 *   403  the guard refused an address ("address 127.0.0.1 of host
 *        localhost is not allowed (loopback)")
 *   431  a request head over 8 KiB
 *   502  could not resolve or connect
 *   503  too many connections of this run at once
 *   504  resolving or connecting timed out
 * Then bytes are relayed both ways until both sides are done, an error,
 * or idle_timeout_ms without a byte either way.
 *
 * Thread-safety: a proxy is one accepting thread plus one thread per
 * connection (at most max_conns); ipd_egress_stop may be called from any
 * thread, once.  The parser is a pure function.
 */
#ifndef IPD_FETCH_EGRESS_H
#define IPD_FETCH_EGRESS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../common/buf.h"
#include "../common/ipd.h"
#include "guard.h"

#define IPD_EGRESS_HEAD_MAX 8192 /* a request head, blank line included */

struct ipd_egress_opts {
    const struct ipd_fetch_allowlist *allow; /* borrowed; NULL: none */
    int64_t connect_timeout_ms; /* resolving + connecting; 0: 10 s */
    int64_t head_timeout_ms;    /* the request head must arrive; 0: 10 s */
    int64_t idle_timeout_ms;    /* a tunnel with no byte either way;
                                   0: 300 s (the longest built-in run) */
    unsigned max_conns;         /* at once, per proxy; 0: 16 */
};

struct ipd_egress;

/*
 * Serve listen_fd (a listening TCP socket; stolen: closed by
 * ipd_egress_stop, or here on failure) until ipd_egress_stop.  opts is
 * copied; its allowlist is borrowed and must outlive the proxy.  *out is
 * new: end it with ipd_egress_stop.  IPD_ERR_INTERNAL when no thread or
 * eventfd could be made (then *out is NULL).
 */
enum ipd_err ipd_egress_start(const struct ipd_egress_opts *opts, int listen_fd,
                              struct ipd_egress **out);

/* What a proxy did, for logs, tests and pip's diagnosis (a 502 from the
 * proxy leaves pip with nothing but "from versions: none"). */
struct ipd_egress_stats {
    unsigned accepted; /* connections */
    unsigned refused;  /* answered 403 (the guard) */
    unsigned failed;   /* answered 502 or 504 (resolve, connect) */
    char last[256];    /* the reason of the last 403/502/504, or "" */
};

/*
 * Stop accepting, end every connection (each thread sees the stop at its
 * next poll; one resolving a name finishes that first, bounded by
 * connect_timeout_ms), join every thread, close every descriptor and
 * free eg.  NULL is fine (st then all zero).  st may be NULL.
 */
void ipd_egress_stop(struct ipd_egress *eg, struct ipd_egress_stats *st);

/* One parsed request head. */
struct ipd_egress_request {
    bool tunnel;        /* CONNECT, else plain HTTP in absolute form */
    char host[256];     /* a name or an address literal, no brackets */
    char port[8];       /* decimal, 1..65535 */
    struct ipd_buf out; /* plain HTTP: the head to send to the origin
                           (initialised by the parser, released by the
                           caller with ipd_buf_release); empty for
                           CONNECT */
};

/*
 * Parse the request head head[0..len) (request line and header lines,
 * each ending in CRLF or LF, up to and including the empty line) into
 * *req, which this initialises (release req->out whatever the result).
 * @return IPD_OK, or IPD_ERR_INVALID with a one-line reason in why
 *         (NUL-terminated, at most whysz bytes).
 */
enum ipd_err ipd_egress_parse(const char *head, size_t len,
                              struct ipd_egress_request *req, char *why,
                              size_t whysz);

/* The length of the request head at the start of buf[0..len) (through
 * the first empty line: "\r\n\r\n" or "\n\n"), or 0 when it is not
 * complete yet. */
size_t ipd_egress_head_len(const char *buf, size_t len);

#endif
