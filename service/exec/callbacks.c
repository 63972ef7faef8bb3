/*
 * callbacks.c - the delivery threads of callbacks.h.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "callbacks.h"
#include "../common/crypto.h"
#include "../common/log.h"
#include "../common/util.h"

struct ipd_callback_status {
    int refs;          /* under status_lock, like the rest */
    const char *state; /* "pending", "delivered", "failed" */
    int attempts;
    char error[512];              /* "" : none */
    char delivery_id[IPD_ID_MAX]; /* "" until queued */
};

/* One lock for every status: held for a few copies at a time. */
static pthread_mutex_t status_lock = PTHREAD_MUTEX_INITIALIZER;

struct delivery {
    struct delivery *next;
    char *url;
    char *body; /* owned, or NULL: the body is the file at path */
    char *path; /* owned, or NULL */
    size_t len;
    size_t mem;                  /* len when body is held in memory, else 0 */
    char tenant[IPD_TENANT_MAX]; /* whose callback ("": nobody's, no
                                    share, no key to sign with) */
    char id[IPD_ID_MAX];         /* X-Interpd-Delivery: every attempt */
    struct ipd_callback_status *status; /* a reference, or NULL */
    int attempts;                       /* made so far */
    int64_t due_ms;                     /* monotonic */
};

struct ipd_callbacks {
    struct ipd_fetch_opts opts;
    struct ipd_meta *meta; /* the tenants' secrets (borrowed), or NULL */
    int64_t retry_delay_ms;
    int64_t secret_grace_ms;
    pthread_t threads[IPD_CALLBACK_THREADS];
    unsigned started;
    pthread_mutex_t lock;
    pthread_cond_t wake;                           /* CLOCK_MONOTONIC */
    struct delivery *queue;                        /* unordered; small */
    struct delivery *trying[IPD_CALLBACK_THREADS]; /* in an attempt */
    size_t queued;
    size_t queued_bytes; /* bodies waiting or being tried */
    bool stop;
};

/* ---- statuses ----------------------------------------------------------- */

struct ipd_callback_status *ipd_callback_status_new(void)
{
    struct ipd_callback_status *s = ipd_xcalloc(1, sizeof(*s));
    s->refs = 1;
    s->state = "pending";
    return s;
}

struct ipd_callback_status *
ipd_callback_status_ref(struct ipd_callback_status *s)
{
    pthread_mutex_lock(&status_lock);
    s->refs++;
    pthread_mutex_unlock(&status_lock);
    return s;
}

void ipd_callback_status_unref(struct ipd_callback_status *s)
{
    if (!s)
        return;
    pthread_mutex_lock(&status_lock);
    bool last = --s->refs == 0;
    pthread_mutex_unlock(&status_lock);
    if (last)
        free(s);
}

/* Record an attempt's outcome (state a static string; error may be
 * NULL). */
static void status_set(struct ipd_callback_status *s, const char *state,
                       int attempts, const char *error)
{
    if (!s)
        return;
    pthread_mutex_lock(&status_lock);
    s->state = state;
    s->attempts = attempts;
    snprintf(s->error, sizeof(s->error), "%s", error ? error : "");
    pthread_mutex_unlock(&status_lock);
}

void ipd_callback_status_fail(struct ipd_callback_status *s, const char *error)
{
    status_set(s, "failed", 0, error);
}

json_t *ipd_callback_status_json(struct ipd_callback_status *s)
{
    pthread_mutex_lock(&status_lock);
    json_t *j =
        json_pack("{s:s, s:i, s:s?, s:s?}", "status", s->state, "attempts",
                  s->attempts, "error", s->error[0] ? s->error : NULL,
                  "delivery_id", s->delivery_id[0] ? s->delivery_id : NULL);
    pthread_mutex_unlock(&status_lock);
    return j;
}

/* ---- signing and one attempt -------------------------------------------- */

/* ",v1=<hex HMAC-SHA256 of signed under secret>" appended at out. */
static void add_v1(char *out, size_t cap, const char *secret,
                   const struct ipd_buf *signed_text)
{
    char hex[IPD_SHA256_HEX];
    size_t n = strlen(out);
    ipd_hmac_sha256_hex(secret, strlen(secret), signed_text->buf,
                        signed_text->len, hex);
    snprintf(out + n, cap - n, ",v1=%s", hex);
}

void ipd_callback_signature(const struct ipd_callback_keys *keys,
                            int64_t grace_ms, int64_t now_ms, const void *body,
                            size_t len, char out[IPD_SIGNATURE_MAX])
{
    struct ipd_buf text;
    long long t = (long long)(now_ms / 1000);
    /* "<t>.<body>": the timestamp is signed with the body, so a receiver
     * that checks t against its replay window can trust it. */
    ipd_buf_init(&text, IPD_BUF_UNLIMITED);
    ipd_buf_addf(&text, "%lld.", t);
    ipd_buf_add(&text, body, len);
    snprintf(out, IPD_SIGNATURE_MAX, "t=%lld", t);
    add_v1(out, IPD_SIGNATURE_MAX, keys->secret, &text);
    if (keys->prev_secret[0] && keys->rotated_at_ms > 0 &&
        now_ms < keys->rotated_at_ms + grace_ms)
        add_v1(out, IPD_SIGNATURE_MAX, keys->prev_secret, &text);
    ipd_buf_release(&text);
}

static void delivery_free(struct delivery *d)
{
    if (!d)
        return;
    ipd_callback_status_unref(d->status);
    free(d->url);
    free(d->body);
    free(d->path);
    free(d);
}

/* The body of a file delivery, read now: a new buffer in *body (free())
 * of *len bytes.  IPD_ERR_NOT_FOUND (a final refusal) when the file is
 * gone. */
static enum ipd_err load_body(const struct delivery *d, char **body,
                              size_t *len, struct ipd_buf *err)
{
    struct stat st;
    enum ipd_err rc = IPD_OK;
    size_t got = 0;
    int fd = open(d->path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);

    *body = NULL;
    if (fd < 0 || fstat(fd, &st)) {
        rc = fd < 0 && errno == ENOENT ? IPD_ERR_NOT_FOUND : IPD_ERR_IO;
        ipd_buf_adds(err, rc == IPD_ERR_NOT_FOUND
                              ? "the result expired before the callback "
                                "was delivered"
                              : "the result could not be read");
        goto out;
    }
    *body = ipd_xmalloc((size_t)st.st_size + 1);
    while (got < (size_t)st.st_size) {
        ssize_t n = read(fd, *body + got, (size_t)st.st_size - got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            rc = IPD_ERR_IO;
            ipd_buf_adds(err, "the result could not be read");
            goto out;
        }
        got += (size_t)n;
    }
    *len = got;
out:
    if (fd >= 0)
        close(fd);
    if (rc) {
        free(*body);
        *body = NULL;
    }
    return rc;
}

/* The tenant's secrets as the key store has them now, so a rotation
 * signs every attempt after it: IPD_ERR_NOT_FOUND (the tenant has no key
 * left: not retried) or the store's error (retried), with a message in
 * err. */
static enum ipd_err sign_with(struct ipd_callbacks *cb, const char *tenant,
                              struct ipd_callback_keys *keys,
                              struct ipd_buf *err)
{
    struct ipd_key k;
    enum ipd_err rc = IPD_ERR_NOT_FOUND;
    if (cb->meta && tenant[0])
        rc = ipd_meta_key_find_tenant(cb->meta, tenant, &k);
    if (rc) {
        ipd_buf_addf(err, "no callback secret to sign with: %s",
                     rc == IPD_ERR_NOT_FOUND ? "the tenant has no API key"
                                             : ipd_err_name(rc));
        return rc;
    }
    memcpy(keys->secret, k.secret, sizeof(keys->secret));
    memcpy(keys->prev_secret, k.prev_secret, sizeof(keys->prev_secret));
    keys->rotated_at_ms = k.secret_rotated_at_ms;
    memset(&k, 0, sizeof(k));
    return IPD_OK;
}

/* One attempt, signed now: IPD_OK when the callback was accepted (2xx);
 * the fetch's message in err otherwise, and the receiver's status in
 * *status (0: none). */
static enum ipd_err attempt(struct ipd_callbacks *cb, struct delivery *d,
                            struct ipd_buf *err, int *status)
{
    char sig[32 + IPD_SIGNATURE_MAX], id[32 + IPD_ID_MAX];
    char value[IPD_SIGNATURE_MAX];
    struct ipd_callback_keys keys;
    const char *headers[] = {sig, id, NULL};
    char *loaded = NULL;
    const char *body = d->body;
    size_t len = d->len;
    enum ipd_err rc = d->path ? load_body(d, &loaded, &len, err) : IPD_OK;
    if (loaded)
        body = loaded;
    if (rc) {
        d->attempts++;
        return rc;
    }
    rc = sign_with(cb, d->tenant, &keys, err);
    if (rc) {
        free(loaded);
        d->attempts++;
        return rc;
    }
    ipd_callback_signature(&keys, cb->secret_grace_ms, ipd_now_ms(), body, len,
                           value);
    memset(&keys, 0, sizeof(keys));
    snprintf(sig, sizeof(sig), "X-Interpd-Signature: %s", value);
    snprintf(id, sizeof(id), "X-Interpd-Delivery: %s", d->id);
    rc = ipd_fetch_post(&cb->opts, d->url, "application/json", body, len,
                        headers, status, err);
    free(loaded);
    d->attempts++;
    if (rc && !err->len)
        ipd_buf_adds(err, ipd_err_name(rc));
    return rc;
}

/* Refusals another attempt cannot change: the guard's verdict on the
 * address, an unusable URL, a result that expired first. */
static bool final_refusal(enum ipd_err rc)
{
    return rc == IPD_ERR_FORBIDDEN || rc == IPD_ERR_INVALID ||
           rc == IPD_ERR_NOT_FOUND;
}

/* After an attempt (cb->lock held): done with d, or queued again after
 * the backoff.  A failed attempt is logged once its record says so (what
 * the log says, GET /v1/executions/{id} already shows). */
static void after_attempt(struct ipd_callbacks *cb, struct delivery *d,
                          enum ipd_err rc, const char *error, int status)
{
    if (rc == IPD_OK) {
        status_set(d->status, "delivered", d->attempts, NULL);
    } else {
        bool final = final_refusal(rc) ||
                     d->attempts >= IPD_CALLBACK_ATTEMPTS || cb->stop;
        status_set(d->status, final ? "failed" : "pending", d->attempts, error);
        ipd_warn("callback %s to %.200s, attempt %d of %d: %s (status %d)",
                 d->id, d->url, d->attempts, IPD_CALLBACK_ATTEMPTS, error,
                 status);
        if (!final) {
            /* Backoff: delay, then twice the delay. */
            d->due_ms =
                ipd_mono_ms() + (cb->retry_delay_ms << (d->attempts - 1));
            d->next = cb->queue;
            cb->queue = d;
            cb->queued++;
            return;
        }
        ipd_error("callback %s to %.200s failed after %d attempt%s%s", d->id,
                  d->url, d->attempts, d->attempts == 1 ? "" : "s",
                  final_refusal(rc) ? " (a refusal: not retried)" : "");
    }
    cb->queued_bytes -= d->mem;
    delivery_free(d);
}

/* The tenant's deliveries in an attempt now (under cb->lock). */
static unsigned tenant_trying(const struct ipd_callbacks *cb,
                              const char *tenant)
{
    unsigned k = 0;
    for (unsigned i = 0; i < IPD_CALLBACK_THREADS; i++)
        k += cb->trying[i] && !strcmp(cb->trying[i]->tenant, tenant);
    return k;
}

/* The earliest due delivery whose tenant is under its share of the
 * threads (the link to it), or NULL (under cb->lock). */
static struct delivery **next_due(struct ipd_callbacks *cb)
{
    struct delivery **pp, **next = NULL;
    for (pp = &cb->queue; *pp; pp = &(*pp)->next) {
        if (next && (*pp)->due_ms >= (*next)->due_ms)
            continue;
        if ((*pp)->tenant[0] &&
            tenant_trying(cb, (*pp)->tenant) >= IPD_CALLBACK_TENANT_THREADS)
            continue;
        next = pp;
    }
    return next;
}

/* One attempt of d on this thread (cb->lock held, released meanwhile). */
static void try_one(struct ipd_callbacks *cb, struct delivery *d)
{
    unsigned slot = 0;
    while (cb->trying[slot])
        slot++; /* one per thread: there is a free one */
    cb->trying[slot] = d;
    pthread_mutex_unlock(&cb->lock);
    struct ipd_buf err;
    int status = 0;
    ipd_buf_init(&err, 1024);
    enum ipd_err rc = attempt(cb, d, &err, &status);
    pthread_mutex_lock(&cb->lock);
    cb->trying[slot] = NULL;
    /* A delivery its tenant's share held back may go now. */
    pthread_cond_broadcast(&cb->wake);
    after_attempt(cb, d, rc, err.buf, status);
    ipd_buf_release(&err);
}

static void *deliver(void *arg)
{
    struct ipd_callbacks *cb = arg;
    pthread_mutex_lock(&cb->lock);
    while (!cb->stop) {
        int64_t now = ipd_mono_ms();
        struct delivery **next = next_due(cb);
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
        try_one(cb, d);
    }
    pthread_mutex_unlock(&cb->lock);
    return NULL;
}

size_t ipd_callbacks_tenant_pending(struct ipd_callbacks *cb,
                                    const char *tenant)
{
    size_t k = 0;
    if (!cb)
        return 0;
    pthread_mutex_lock(&cb->lock);
    for (const struct delivery *d = cb->queue; d; d = d->next)
        k += !strcmp(d->tenant, tenant);
    k += tenant_trying(cb, tenant);
    pthread_mutex_unlock(&cb->lock);
    return k;
}

enum ipd_err ipd_callbacks_new(const struct ipd_fetch_opts *opts,
                               struct ipd_meta *meta, int64_t retry_delay_ms,
                               int64_t secret_grace_ms,
                               struct ipd_callbacks **out)
{
    struct ipd_callbacks *cb = ipd_xcalloc(1, sizeof(*cb));
    pthread_condattr_t ca;
    if (opts)
        cb->opts = *opts;
    else
        ipd_fetch_opts_init(&cb->opts);
    cb->meta = meta;
    cb->retry_delay_ms = retry_delay_ms;
    cb->secret_grace_ms = secret_grace_ms;
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

/* Queue d (its url, body or path and len set). */
static void enqueue(struct ipd_callbacks *cb, struct delivery *d,
                    const char *url, const char *tenant,
                    struct ipd_callback_status *status)
{
    size_t len = d->mem;
    snprintf(d->tenant, sizeof(d->tenant), "%s", tenant ? tenant : "");
    ipd_id_new("dlv", d->id);
    d->status = status ? ipd_callback_status_ref(status) : NULL;
    if (status) {
        pthread_mutex_lock(&status_lock);
        memcpy(status->delivery_id, d->id, sizeof(d->id));
        pthread_mutex_unlock(&status_lock);
    }
    d->due_ms = ipd_mono_ms();
    pthread_mutex_lock(&cb->lock);
    if (cb->stop || cb->queued >= IPD_CALLBACK_QUEUE_MAX ||
        len > IPD_CALLBACK_QUEUE_BYTES - cb->queued_bytes) {
        bool stopping = cb->stop;
        pthread_mutex_unlock(&cb->lock);
        ipd_error("callback %s to %.200s dropped: %s", d->id, url,
                  stopping ? "shutting down" : "the queue is full");
        ipd_callback_status_fail(status, stopping
                                             ? "the service was shutting down"
                                             : "the callback queue was full");
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

/* A delivery to url, or NULL after failing status when there are no
 * delivery threads. */
static struct delivery *delivery_new(struct ipd_callbacks *cb, const char *url,
                                     struct ipd_callback_status *status)
{
    if (!cb) {
        ipd_callback_status_fail(status, "callbacks are unavailable on this "
                                         "server");
        return NULL;
    }
    struct delivery *d = ipd_xcalloc(1, sizeof(*d));
    d->url = ipd_xstrdup(url);
    return d;
}

void ipd_callbacks_send(struct ipd_callbacks *cb, const char *url,
                        const char *body, size_t len, const char *tenant,
                        struct ipd_callback_status *status)
{
    struct delivery *d = delivery_new(cb, url, status);
    if (!d)
        return;
    d->body = ipd_xmalloc(len + 1);
    memcpy(d->body, body, len);
    d->body[len] = '\0';
    d->len = len;
    d->mem = len;
    enqueue(cb, d, url, tenant, status);
}

void ipd_callbacks_send_file(struct ipd_callbacks *cb, const char *url,
                             const char *path, size_t len, const char *tenant,
                             struct ipd_callback_status *status)
{
    struct delivery *d = delivery_new(cb, url, status);
    if (!d)
        return;
    d->path = ipd_xstrdup(path);
    d->len = len;
    enqueue(cb, d, url, tenant, status);
}
