/*
 * callbacks.c - the delivery threads of callbacks.h.
 */
#include <errno.h>
#include <pthread.h>
#include <time.h>

#include "callbacks.h"
#include "../common/crypto.h"
#include "../common/log.h"
#include "../common/util.h"

struct delivery {
    struct delivery *next;
    char *url;
    char *body;
    size_t len;
    char signature[IPD_SIGNATURE_MAX];
    int attempts;     /* made so far */
    int64_t due_ms;   /* monotonic */
};

struct ipd_callbacks {
    struct ipd_fetch_opts opts;
    int64_t retry_delay_ms;
    pthread_t threads[IPD_CALLBACK_THREADS];
    unsigned started;
    pthread_mutex_t lock;
    pthread_cond_t wake;  /* CLOCK_MONOTONIC */
    struct delivery *queue; /* unordered; small */
    size_t queued;
    size_t queued_bytes;    /* bodies waiting or being tried */
    bool stop;
};

void ipd_callback_signature(const char *secret, const void *body, size_t len,
                            char out[IPD_SIGNATURE_MAX])
{
    char hex[IPD_SHA256_HEX];
    ipd_hmac_sha256_hex(secret, strlen(secret), body, len, hex);
    snprintf(out, IPD_SIGNATURE_MAX, "sha256=%s", hex);
}

static void delivery_free(struct delivery *d)
{
    if (!d)
        return;
    free(d->url);
    free(d->body);
    free(d);
}

/* One attempt; true when the callback was accepted (2xx). */
static bool attempt(struct ipd_callbacks *cb, struct delivery *d)
{
    char header[32 + IPD_SIGNATURE_MAX];
    const char *headers[] = {header, NULL};
    struct ipd_buf err;
    int status = 0;
    snprintf(header, sizeof(header), "X-Interpd-Signature: %s", d->signature);
    ipd_buf_init(&err, 1024);
    enum ipd_err rc = ipd_fetch_post(&cb->opts, d->url, "application/json",
                                     d->body, d->len, headers, &status, &err);
    d->attempts++;
    if (rc)
        ipd_warn("callback to %.200s, attempt %d of %d: %s (status %d)",
                 d->url, d->attempts, IPD_CALLBACK_ATTEMPTS,
                 err.len ? err.buf : ipd_err_name(rc), status);
    ipd_buf_release(&err);
    return rc == IPD_OK;
}

static void *deliver(void *arg)
{
    struct ipd_callbacks *cb = arg;
    pthread_mutex_lock(&cb->lock);
    while (!cb->stop) {
        struct delivery **pp, **next = NULL;
        int64_t now = ipd_mono_ms();
        for (pp = &cb->queue; *pp; pp = &(*pp)->next)
            if (!next || (*pp)->due_ms < (*next)->due_ms)
                next = pp;
        if (!next) {
            pthread_cond_wait(&cb->wake, &cb->lock);
            continue;
        }
        if ((*next)->due_ms > now) {
            struct timespec ts;
            int64_t due = (*next)->due_ms;
            ts.tv_sec = due / 1000;
            ts.tv_nsec = (due % 1000) * 1000000;
            (void)pthread_cond_timedwait(&cb->wake, &cb->lock, &ts);
            continue;
        }
        struct delivery *d = *next;
        *next = d->next;
        cb->queued--;
        pthread_mutex_unlock(&cb->lock);
        bool ok = attempt(cb, d);
        pthread_mutex_lock(&cb->lock);
        if (ok || d->attempts >= IPD_CALLBACK_ATTEMPTS || cb->stop) {
            if (!ok)
                ipd_error("callback to %.200s dropped after %d attempts",
                          d->url, d->attempts);
            cb->queued_bytes -= d->len;
            delivery_free(d);
            continue;
        }
        /* Backoff: delay, then twice the delay. */
        d->due_ms = ipd_mono_ms() + (cb->retry_delay_ms << (d->attempts - 1));
        d->next = cb->queue;
        cb->queue = d;
        cb->queued++;
    }
    pthread_mutex_unlock(&cb->lock);
    return NULL;
}

enum ipd_err ipd_callbacks_new(const struct ipd_fetch_opts *opts,
                               int64_t retry_delay_ms,
                               struct ipd_callbacks **out)
{
    struct ipd_callbacks *cb = ipd_xcalloc(1, sizeof(*cb));
    pthread_condattr_t ca;
    if (opts)
        cb->opts = *opts;
    else
        ipd_fetch_opts_init(&cb->opts);
    cb->retry_delay_ms = retry_delay_ms;
    pthread_mutex_init(&cb->lock, NULL);
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&cb->wake, &ca);
    pthread_condattr_destroy(&ca);
    /* Its own short total timeout: a receiver that accepts and never
     * answers holds a delivery thread this long per attempt. */
    if (cb->opts.total_timeout_ms <= 0 ||
        cb->opts.total_timeout_ms > IPD_CALLBACK_TIMEOUT_MS)
        cb->opts.total_timeout_ms = IPD_CALLBACK_TIMEOUT_MS;
    if (ipd_fetch_global_init()) {
        ipd_callbacks_free(cb);
        *out = NULL;
        return IPD_ERR_INTERNAL;
    }
    for (unsigned i = 0; i < IPD_CALLBACK_THREADS; i++) {
        if (pthread_create(&cb->threads[i], NULL, deliver, cb)) {
            ipd_callbacks_free(cb);
            *out = NULL;
            return IPD_ERR_INTERNAL;
        }
        cb->started++;
    }
    *out = cb;
    return IPD_OK;
}

void ipd_callbacks_free(struct ipd_callbacks *cb)
{
    if (!cb)
        return;
    pthread_mutex_lock(&cb->lock);
    cb->stop = true;
    pthread_cond_broadcast(&cb->wake);
    pthread_mutex_unlock(&cb->lock);
    for (unsigned i = 0; i < cb->started; i++)
        pthread_join(cb->threads[i], NULL);
    if (cb->queued)
        ipd_warn("shutdown: %zu callbacks not delivered", cb->queued);
    while (cb->queue) {
        struct delivery *d = cb->queue;
        cb->queue = d->next;
        delivery_free(d);
    }
    pthread_mutex_destroy(&cb->lock);
    pthread_cond_destroy(&cb->wake);
    free(cb);
}

void ipd_callbacks_send(struct ipd_callbacks *cb, const char *url,
                        const char *body, size_t len, const char *secret)
{
    if (!cb)
        return;
    struct delivery *d = ipd_xcalloc(1, sizeof(*d));
    d->url = ipd_xstrdup(url);
    d->body = ipd_xmalloc(len + 1);
    memcpy(d->body, body, len);
    d->body[len] = '\0';
    d->len = len;
    ipd_callback_signature(secret, body, len, d->signature);
    d->due_ms = ipd_mono_ms();
    pthread_mutex_lock(&cb->lock);
    if (cb->stop || cb->queued >= IPD_CALLBACK_QUEUE_MAX ||
        len > IPD_CALLBACK_QUEUE_BYTES - cb->queued_bytes) {
        pthread_mutex_unlock(&cb->lock);
        ipd_error("callback to %.200s dropped: the queue is full (%zu "
                  "callbacks, %zu bytes)",
                  url, cb->queued, cb->queued_bytes);
        delivery_free(d);
        return;
    }
    d->next = cb->queue;
    cb->queue = d;
    cb->queued++;
    cb->queued_bytes += len;
    pthread_cond_signal(&cb->wake);
    pthread_mutex_unlock(&cb->lock);
}
