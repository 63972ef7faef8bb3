/*
 * callbacks.h - deliver asynchronous execution results to the caller's
 * callback_url (CONTRACT.md, Asynchronous executions).
 *
 * IPD_CALLBACK_THREADS delivery threads, so one slow receiver does not
 * hold up the others' callbacks; each attempt ends after at most
 * IPD_CALLBACK_TIMEOUT_MS (or the fetch timeout when shorter).  At most
 * IPD_CALLBACK_QUEUE_MAX callbacks and IPD_CALLBACK_QUEUE_BYTES of bodies
 * held in memory wait; beyond, a callback is dropped ("failed", and
 * logged; the result stays readable by polling).  A body sent from a file
 * (ipd_callbacks_send_file: the asynchronous result's own, results.h) is
 * read at each attempt and released after it, so waiting callbacks hold
 * none of it in memory.
 *
 * Each callback is a POST of the result JSON through the SSRF guard of
 * fetch.h (no redirects) with
 *   X-Interpd-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<body>">
 *   X-Interpd-Delivery: <id>
 * keyed by the tenant's callback secret; during the grace period after a
 * rotation the previous secret signs too, as a second v1= (the new one
 * first).  t is the time of the attempt, so every attempt is signed
 * afresh; the delivery id is the same for every attempt of one callback.
 * The secrets are read from the key store (ipd_meta_key_find_tenant) at
 * each attempt: no job or request carries them, and a callback queued
 * before a rotation is signed as the rotation left them (the new secret,
 * and the previous one during the grace).  A store that cannot answer
 * fails the attempt (retried like any other); a tenant without any key
 * fails the callback.
 *
 * A failed attempt (no answer, a non-2xx answer) is retried after
 * retry_delay, then twice that: IPD_CALLBACK_ATTEMPTS in all.  A refusal
 * that cannot change (the guard refuses the address the name resolves
 * to, the URL is unusable) is not retried.  The outcome is kept in an
 * ipd_callback_status the caller shows (the async result's "callback").
 * Undelivered callbacks are dropped at shutdown (logged): results stay
 * readable with GET /v1/executions/{id} for their ttl.
 *
 * Fairness between tenants: each delivery belongs to a tenant, and one
 * tenant's deliveries take at most IPD_CALLBACK_TENANT_THREADS of the
 * threads at once (a thread takes the earliest due delivery whose tenant
 * is under that), so a tenant whose receivers hang does not hold up
 * another's callbacks.  How many of a tenant's callbacks are pending is
 * counted here (ipd_callbacks_tenant_pending) for its share, which the
 * pool enforces when an asynchronous execution is submitted.
 *
 * Thread-safety: every function may be called from any thread.
 */
#ifndef IPD_CALLBACKS_H
#define IPD_CALLBACKS_H

#include <stdint.h>

#include <jansson.h>

#include "../../storage/meta.h"
#include "../common/crypto.h"
#include "../common/ipd.h"
#include "../fetch/fetch.h"

#define IPD_CALLBACK_ATTEMPTS 3
#define IPD_CALLBACK_QUEUE_MAX 10000 /* beyond: dropped and logged */
#define IPD_CALLBACK_QUEUE_BYTES ((size_t)256 << 20)
#define IPD_CALLBACK_THREADS 4
#define IPD_CALLBACK_TIMEOUT_MS 15000
#define IPD_CALLBACK_TENANT_THREADS (IPD_CALLBACK_THREADS / 2)

/* What a callback is signed with: the tenant's secret and the one it
 * replaced (struct ipd_key's fields, read at each attempt). */
struct ipd_callback_keys {
    char secret[IPD_SHA256_HEX];
    char prev_secret[IPD_SHA256_HEX]; /* "" when never rotated */
    int64_t rotated_at_ms;            /* wall clock; 0: never */
};

/* One callback's delivery outcome, shared by the delivery and whoever
 * shows it (the async result table): reference counted, so either may
 * go first. */
struct ipd_callback_status;

/* A new status, "pending" with 0 attempts; the caller holds the one
 * reference: ipd_callback_status_unref. */
struct ipd_callback_status *ipd_callback_status_new(void);
/* Take another reference (s returned). */
struct ipd_callback_status *
ipd_callback_status_ref(struct ipd_callback_status *s);
void ipd_callback_status_unref(struct ipd_callback_status *s); /* NULL ok */
/* Mark s failed without an attempt (no delivery threads). */
void ipd_callback_status_fail(struct ipd_callback_status *s, const char *error);
/* {"status": "pending"|"delivered"|"failed", "attempts": N,
 *  "error": "..."|null, "delivery_id": "dlv_..."|null}: a new reference.
 * While pending after a failed attempt, error is that attempt's. */
json_t *ipd_callback_status_json(struct ipd_callback_status *s);

struct ipd_callbacks;

/* opts is copied (its allowlist borrowed: it must outlive cb).  meta
 * (borrowed: it must outlive cb; NULL: no callback can be signed, each
 * fails) holds the tenants' secrets.  The previous secret signs for
 * secret_grace_ms after a rotation. */
enum ipd_err ipd_callbacks_new(const struct ipd_fetch_opts *opts,
                               struct ipd_meta *meta, int64_t retry_delay_ms,
                               int64_t secret_grace_ms,
                               struct ipd_callbacks **out);
/* Stop the threads (attempts in progress finish) and free. */
void ipd_callbacks_free(struct ipd_callbacks *cb); /* NULL is fine */

/* Queue one callback of tenant (signed with its secrets; its share of
 * the threads) under a new delivery id; url, body and tenant are copied;
 * status (may be NULL) is referenced, and updated after each attempt. */
void ipd_callbacks_send(struct ipd_callbacks *cb, const char *url,
                        const char *body, size_t len, const char *tenant,
                        struct ipd_callback_status *status);

/* Queue one callback whose body is the file at path (len bytes when
 * queued), read at each attempt: a file gone by then (the result expired
 * first) fails the callback without a retry.  url, path and tenant are
 * copied; status as for ipd_callbacks_send. */
void ipd_callbacks_send_file(struct ipd_callbacks *cb, const char *url,
                             const char *path, size_t len, const char *tenant,
                             struct ipd_callback_status *status);

/* The tenant's deliveries waiting or being tried (0 for a NULL cb). */
size_t ipd_callbacks_tenant_pending(struct ipd_callbacks *cb,
                                    const char *tenant);

/* The X-Interpd-Signature value for body sent at now_ms:
 * "t=<now_ms / 1000>,v1=<hex>" with the secret, then ",v1=<hex>" with
 * the previous secret while now_ms < rotated_at_ms + grace_ms. */
#define IPD_SIGNATURE_MAX (2 + 20 + 2 * (4 + 64) + 1)
void ipd_callback_signature(const struct ipd_callback_keys *keys,
                            int64_t grace_ms, int64_t now_ms, const void *body,
                            size_t len, char out[IPD_SIGNATURE_MAX]);

#endif
