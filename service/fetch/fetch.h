/*
 * fetch.h - outbound HTTP(S) with an SSRF guard: URL ingest
 * (POST /v1/files {"url": ...}) and execution callbacks.  libcurl sits
 * behind it in service/fetch/fetch_curl.c; its types never appear here.
 * The verdict on an address and the allowlist are guard.h's (included).
 *
 * The guard, for every hop (the first URL and each redirect):
 *   - only http and https URLs;
 *   - the host is resolved here (getaddrinfo, bounded by the timeouts) and
 *     EVERY address it resolves to must be allowed (ipd_fetch_address_allowed):
 *     one refused address refuses the hop, we never just pick a good one;
 *   - the checked addresses are pinned for the connection (curl gets them,
 *     it does not resolve again), and the socket curl opens is checked once
 *     more against them, so DNS rebinding can't swap the address;
 *   - proxies, including the *_proxy environment variables, are disabled;
 *   - redirects are followed here, not by curl, up to max_redirects, each
 *     one checked like the first URL.  POST never follows a redirect.
 *
 * Errors.  Every function appends a one-line message for the client to err
 * (when err is not NULL); the code says whose fault it is, and the caller
 * picks the HTTP status from it (URL ingest: 400, 400, 502, 504, 413).
 *   IPD_ERR_INVALID      malformed URL or scheme other than http/https
 *   IPD_ERR_FORBIDDEN    the guard refused an address ("address 127.0.0.1
 *                        of host example is not allowed (loopback)"),
 *                        for the first URL or a redirect; never retried
 *   IPD_ERR_UPSTREAM     the remote side failed: could not resolve,
 *                        connect or finish the transfer (refused, reset,
 *                        closed early, TLS failure, garbage reply), too
 *                        many redirects, a redirect answered to a POST, or
 *                        a final status that is not 2xx ("the URL answered
 *                        404"; then status is non-zero and not 2xx)
 *   IPD_ERR_UPSTREAM_TIMEOUT  connect timeout, or the total timeout (which
 *                        covers DNS, every hop, and slow-drip bodies)
 *   IPD_ERR_TOO_LARGE    the body is over max_bytes (by Content-Length, or
 *                        while receiving: the transfer is aborted)
 *   IPD_ERR_NOMEM        libcurl ran out of memory
 *   IPD_ERR_INTERNAL     libcurl could not be set up (a bug)
 *   anything else        returned by the sink's write, passed through
 *
 * Thread-safety: every function may be called from any thread at once;
 * each call uses its own curl handles.  An allowlist is immutable after
 * parsing and can be shared by any number of threads.
 *
 * Failure injection: IPD_FAIL_FETCH_AT=N makes the Nth ipd_fetch_get or
 * ipd_fetch_post of the process fail with IPD_ERR_UNAVAILABLE (our own
 * failure, not the remote's) before any
 * connection ("could not fetch: injected failure").
 */
#ifndef IPD_FETCH_H
#define IPD_FETCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../common/buf.h"
#include "../common/ipd.h"
#include "filename.h" /* the Content-Disposition parser */
#include "guard.h"    /* the address verdicts and the allowlist */

struct ipd_fetch_opts {
    int64_t connect_timeout_ms; /* per connection, DNS included; > 0 */
    int64_t total_timeout_ms;   /* the whole call, all hops; > 0 */
    int max_redirects;          /* redirects followed by a GET; >= 0 */
    int64_t max_bytes;          /* body limit, enforced while receiving */
    const struct ipd_fetch_allowlist *allow; /* borrowed; NULL: none */
    const char *user_agent;     /* borrowed; NULL: "interpd/<version>" */
    const char *const *headers; /* borrowed; a GET's extra "Name: value"
                                   request headers (NULL-terminated), or
                                   NULL; CR or LF in one is
                                   IPD_ERR_INVALID */
};

#define IPD_FETCH_CONNECT_TIMEOUT_MS 10000
#define IPD_FETCH_TOTAL_TIMEOUT_MS 60000
#define IPD_FETCH_MAX_REDIRECTS 3
#define IPD_FETCH_MAX_BYTES (50LL * 1024 * 1024)
#define IPD_FETCH_URL_MAX 8192 /* longer URLs are refused */

/* Fill o with the defaults above; a NULL opts means the same. */
void ipd_fetch_opts_init(struct ipd_fetch_opts *o);

/*
 * Where a GET's body goes, chunk by chunk, as it arrives.  Only the body of
 * a final 2xx answer is written (never a redirect's or an error page's).
 * write returns IPD_OK to go on; anything else aborts the transfer and
 * becomes the fetch's result.  When the fetch fails for any reason,
 * discard (if not NULL) is called exactly once before ipd_fetch_get
 * returns, so the sink can drop what it was given; on success it is not
 * called.  The callbacks run on the calling thread.
 */
struct ipd_fetch_sink {
    enum ipd_err (*write)(void *ctx, const void *data, size_t len);
    void (*discard)(void *ctx);
    void *ctx;
};

/* What a GET found.  Filled as far as the fetch got, on failure too. */
struct ipd_fetch_result {
    int status;         /* OUT: last HTTP status; 0 when none arrived */
    char *url;          /* OUT: URL of the last hop, normalised; or NULL */
    char *content_type; /* OUT: final answer's Content-Type, or NULL */
    char *filename;     /* OUT: from Content-Disposition (filename* first),
                           else the final URL's last path segment,
                           percent-decoded; NULL when neither gives one.
                           Raw bytes from the server: sanitise it. */
    int64_t bytes;      /* OUT: body bytes written to the sink */
    int redirects;      /* OUT: redirects followed */
};

/* Initialise r empty.  Release frees the strings (owned by r) and
 * re-initialises; both accept a released r again. */
void ipd_fetch_result_init(struct ipd_fetch_result *r);
void ipd_fetch_result_release(struct ipd_fetch_result *r);

/*
 * Call curl_global_init once per process (pthread_once); later calls return
 * the first one's result.  The fetch functions call it themselves; call it
 * early from main to have it happen before threads start.
 */
enum ipd_err ipd_fetch_global_init(void);

/*
 * GET url under the guard, following redirects, streaming the body into
 * sink.
 * @param opts  limits and allowlist (borrowed); NULL: defaults
 * @param url   absolute http or https URL
 * @param sink  receives the body (borrowed)
 * @param res   [out] initialised by the caller; filled (see above); the
 *              caller releases it with ipd_fetch_result_release
 * @param err   [out] gets a message on failure; may be NULL
 * @return IPD_OK when a 2xx body was written whole, else see the top.
 */
enum ipd_err ipd_fetch_get(const struct ipd_fetch_opts *opts, const char *url,
                           const struct ipd_fetch_sink *sink,
                           struct ipd_fetch_result *res, struct ipd_buf *err);

/*
 * The guard's verdict on url "on its face", without DNS: what can be
 * refused before anything is sent (a callback_url at submit).  The same
 * URL parser and checks as a fetch's first hop: http or https, a usable
 * host; an IP literal is checked like a resolved address; "localhost",
 * names under it and their final-dot forms (RFC 6761: always loopback)
 * are checked as 127.0.0.1 and ::1 (both must be allowed).  Any other
 * name passes here and is checked when it is fetched.
 * @param opts  its allowlist counts (borrowed); NULL: none
 * @return IPD_OK; IPD_ERR_INVALID (malformed URL, other scheme, bad
 *         host) or IPD_ERR_FORBIDDEN (refused address, the reason in
 *         err, as a fetch would say it).
 */
enum ipd_err ipd_fetch_url_check(const struct ipd_fetch_opts *opts,
                                 const char *url, struct ipd_buf *err);

/*
 * POST body (len bytes, borrowed, may be NULL when len is 0) to url under
 * the same guard, for callbacks.  Redirects are not followed: a 3xx answer
 * is IPD_ERR_UPSTREAM.  Only the answer's status counts: its body is not
 * read (the transfer stops at its first byte).
 * @param content_type   the Content-Type header value (NULL:
 *                       application/octet-stream)
 * @param extra_headers  NULL-terminated list of "Name: value" (borrowed),
 *                       or NULL; CR or LF in one is IPD_ERR_INVALID
 * @param status         [out] the HTTP status, 0 when none; may be NULL
 * @return IPD_OK on a 2xx answer, else see the top.
 */
enum ipd_err ipd_fetch_post(const struct ipd_fetch_opts *opts, const char *url,
                            const char *content_type, const void *body,
                            size_t len, const char *const *extra_headers,
                            int *status, struct ipd_buf *err);

#endif
