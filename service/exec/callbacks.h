/*
 * callbacks.h - deliver asynchronous execution results to the caller's
 * callback_url (CONTRACT.md, Asynchronous executions).
 *
 * IPD_CALLBACK_THREADS delivery threads, so one slow receiver does not
 * hold up the others' callbacks; each attempt ends after at most
 * IPD_CALLBACK_TIMEOUT_MS (or the fetch timeout when shorter).  At most
 * IPD_CALLBACK_QUEUE_MAX callbacks and IPD_CALLBACK_QUEUE_BYTES of bodies
 * wait; beyond, a callback is dropped and logged (the result stays
 * readable by polling).  Each callback is a POST of the result JSON with
 * `X-Interpd-Signature: sha256=<hex HMAC-SHA256 of the body>` keyed by the
 * tenant's callback secret, through the SSRF guard of fetch.h (no
 * redirects).  A failed attempt (no answer, a non-2xx answer, a refused
 * address) is retried after retry_delay, then twice that: 3 attempts in
 * all, then the callback is dropped and logged.  Undelivered callbacks
 * are dropped at shutdown (logged): results stay readable with
 * GET /v1/executions/{id} for their ttl.
 *
 * Thread-safety: ipd_callbacks_send may be called from any thread.
 */
#ifndef IPD_CALLBACKS_H
#define IPD_CALLBACKS_H

#include <stdint.h>

#include "../fetch/fetch.h"
#include "../common/ipd.h"

#define IPD_CALLBACK_ATTEMPTS 3
#define IPD_CALLBACK_QUEUE_MAX 10000 /* beyond: dropped and logged */
#define IPD_CALLBACK_QUEUE_BYTES ((size_t)256 << 20)
#define IPD_CALLBACK_THREADS 4
#define IPD_CALLBACK_TIMEOUT_MS 15000

struct ipd_callbacks;

/* opts is copied (its allowlist borrowed: it must outlive cb). */
enum ipd_err ipd_callbacks_new(const struct ipd_fetch_opts *opts,
                               int64_t retry_delay_ms,
                               struct ipd_callbacks **out);
/* Stop the threads (attempts in progress finish) and free. */
void ipd_callbacks_free(struct ipd_callbacks *cb); /* NULL is fine */

/* Queue one callback; url, body and secret are copied. */
void ipd_callbacks_send(struct ipd_callbacks *cb, const char *url,
                        const char *body, size_t len, const char *secret);

/* The signature header's value for body under secret:
 * "sha256=<64 hex>" (out must hold 7 + 64 + 1 bytes). */
#define IPD_SIGNATURE_MAX (7 + 64 + 1)
void ipd_callback_signature(const char *secret, const void *body, size_t len,
                            char out[IPD_SIGNATURE_MAX]);

#endif
