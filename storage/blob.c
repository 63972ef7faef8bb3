/*
 * blob.c - the backend-independent half of blob.h: the size limit, the
 * SHA-256 and the sample for content sniffing are computed here, once,
 * whatever stores the bytes.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../service/common/log.h"
#include "../service/common/util.h"
#include "blob_internal.h"
#include "meta.h"

/* At most this many deletes wait for a retry; past it the orphan
 * reconcile job is the safety net. */
#define RETRY_MAX 10000
#define RETRY_MIN_MS 500
#define RETRY_MAX_MS 5000

struct pending {
    struct pending *next;
    char file_id[IPD_ID_MAX];
    enum ipd_err (*pre)(void *cls, const char *file_id); /* or NULL */
    void *pre_cls;
};

/* A backend that knows it is down answers at once (mongo.h, the
 * breaker) instead of making an HTTP event thread wait out its timeout. */
static enum ipd_err gate(struct ipd_blobs *b)
{
    return b->ops->gate ? b->ops->gate(b) : IPD_OK;
}

/* pre (if any), then the bytes; IPD_OK when both are done. */
static enum ipd_err delete_steps(struct ipd_blobs *b, const struct pending *p)
{
    if (p->pre) {
        enum ipd_err rc = p->pre(p->pre_cls, p->file_id);
        if (rc && rc != IPD_ERR_NOT_FOUND)
            return rc;
    }
    enum ipd_err rc = gate(b);
    if (!rc)
        rc = b->ops->del(b, p->file_id);
    return rc == IPD_ERR_NOT_FOUND ? IPD_OK : rc;
}

struct ipd__blob_retry {
    pthread_mutex_t lock;
    pthread_cond_t wake;
    pthread_t thread;
    bool started, stop;
    struct pending *head;
    size_t n;
};

void ipd__blobs_init(struct ipd_blobs *b, const struct ipd_blobs_ops *ops)
{
    b->ops = ops;
    b->retry = ipd_xcalloc(1, sizeof(*b->retry));
    pthread_mutex_init(&b->retry->lock, NULL);
    pthread_cond_init(&b->retry->wake, NULL);
}

/* Retry the queued deletes, oldest failure first, with a backoff while
 * they keep failing; sleeps while the queue is empty; ends with the
 * store. */
static void *retry_thread(void *arg)
{
    struct ipd_blobs *b = arg;
    struct ipd__blob_retry *q = b->retry;
    int64_t delay = RETRY_MIN_MS;

    pthread_mutex_lock(&q->lock);
    while (!q->stop) {
        if (!q->head) {
            pthread_cond_wait(&q->wake, &q->lock);
            continue;
        }
        struct timespec until = ipd_deadline_after(CLOCK_REALTIME, delay);
        while (!q->stop &&
               pthread_cond_timedwait(&q->wake, &q->lock, &until) != ETIMEDOUT)
            ;
        if (q->stop)
            break;
        struct pending *p = q->head;
        q->head = p->next;
        q->n--;
        pthread_mutex_unlock(&q->lock);
        enum ipd_err rc = delete_steps(b, p);
        pthread_mutex_lock(&q->lock);
        if (rc) {
            p->next = q->head; /* still failing: back to the front */
            q->head = p;
            q->n++;
            delay = delay * 2 > RETRY_MAX_MS ? RETRY_MAX_MS : delay * 2;
        } else {
            ipd_info("removed orphan blob %s on retry", p->file_id);
            free(p);
            delay = RETRY_MIN_MS;
        }
    }
    pthread_mutex_unlock(&q->lock);
    return NULL;
}

void ipd_blob_delete_later_after(struct ipd_blobs *b, const char *file_id,
                                 enum ipd_err (*pre)(void *cls,
                                                     const char *file_id),
                                 void *cls)
{
    struct ipd__blob_retry *q = b->retry;
    struct pending now = {.pre = pre, .pre_cls = cls};
    memcpy(now.file_id, file_id, strnlen(file_id, IPD_ID_MAX - 1));
    enum ipd_err rc = delete_steps(b, &now);
    if (!rc)
        return;
    pthread_mutex_lock(&q->lock);
    if (q->n >= RETRY_MAX) {
        ipd_error("orphan blob %s: delete failed (%s) and the retry queue is "
                  "full; the reconcile job will remove it",
                  file_id, ipd_err_name(rc));
        goto out;
    }
    struct pending *p = ipd_xcalloc(1, sizeof(*p));
    *p = now;
    p->next = q->head;
    q->head = p;
    q->n++;
    ipd_warn("orphan blob %s: delete failed (%s); retrying in the background",
             file_id, ipd_err_name(rc));
    if (!q->started)
        q->started = pthread_create(&q->thread, NULL, retry_thread, b) == 0;
    pthread_cond_broadcast(&q->wake);
out:
    pthread_mutex_unlock(&q->lock);
}

void ipd_blob_delete_later(struct ipd_blobs *b, const char *file_id)
{
    ipd_blob_delete_later_after(b, file_id, NULL, NULL);
}

static enum ipd_err delete_record(void *meta, const char *file_id)
{
    return ipd_meta_file_delete_by_id(meta, file_id);
}

void ipd_blob_undo_insert(struct ipd_blobs *b, struct ipd_meta *m,
                          const char *file_id, enum ipd_err insert_rc)
{
    /* A lost connection can't tell whether the insert landed: then the
     * record goes too, so a failed upload means nothing was stored. */
    if (insert_rc == IPD_ERR_UNAVAILABLE || insert_rc == IPD_ERR_INTERNAL ||
        insert_rc == IPD_ERR_TIMEOUT)
        ipd_blob_delete_later_after(b, file_id, delete_record, m);
    else
        ipd_blob_delete_later(b, file_id);
}

size_t ipd_blobs_pending_deletes(struct ipd_blobs *b)
{
    pthread_mutex_lock(&b->retry->lock);
    size_t n = b->retry->n;
    pthread_mutex_unlock(&b->retry->lock);
    return n;
}

void ipd_blobs_free(struct ipd_blobs *b)
{
    if (!b)
        return;
    struct ipd__blob_retry *q = b->retry;
    pthread_mutex_lock(&q->lock);
    q->stop = true;
    pthread_cond_broadcast(&q->wake);
    pthread_mutex_unlock(&q->lock);
    if (q->started)
        pthread_join(q->thread, NULL);
    while (q->head) {
        struct pending *p = q->head;
        q->head = p->next;
        ipd_warn("orphan blob %s left for the reconcile job", p->file_id);
        free(p);
    }
    pthread_mutex_destroy(&q->lock);
    pthread_cond_destroy(&q->wake);
    free(q);
    b->ops->free(b);
}

const char *ipd_blobs_backend(const struct ipd_blobs *b)
{
    return b->ops->name;
}

enum ipd_err ipd_blobs_ping(struct ipd_blobs *b)
{
    return b->ops->ping(b);
}

enum ipd_err ipd_blob_writer_new(struct ipd_blobs *b, const char *file_id,
                                 int64_t max_size, struct ipd_blob_writer **out)
{
    struct ipd_blob_writer *w = NULL;
    *out = NULL;
    if (strlen(file_id) >= IPD_ID_MAX)
        return IPD_ERR_INVALID;
    enum ipd_err rc = gate(b);
    if (!rc)
        rc = b->ops->writer_new(b, file_id, &w);
    if (rc)
        return rc;
    w->blobs = b;
    memcpy(w->file_id, file_id, strlen(file_id) + 1);
    w->max = max_size;
    w->sha = ipd_sha256_new();
    *out = w;
    return IPD_OK;
}

enum ipd_err ipd_blob_writer_write(struct ipd_blob_writer *w, const void *data,
                                   size_t len)
{
    const unsigned char *p = data;
    if ((int64_t)len > w->max - w->size)
        return IPD_ERR_TOO_LARGE;
    if (!len)
        return IPD_OK;
    enum ipd_err rc = gate(w->blobs);
    if (!rc)
        rc = w->blobs->ops->write(w, data, len);
    if (rc)
        return rc;
    if (!w->own_sha256)
        ipd_sha256_update(w->sha, data, len);
    if (w->head_len < IPD_BLOB_HEAD_MAX) {
        size_t n = IPD_BLOB_HEAD_MAX - w->head_len;
        if (n > len)
            n = len;
        if (!w->head)
            w->head = ipd_xmalloc(IPD_BLOB_HEAD_MAX);
        memcpy(w->head + w->head_len, p, n);
        w->head_len += n;
    }
    /* Keep the last four bytes across chunk boundaries. */
    if (len >= 4) {
        memcpy(w->tail, p + len - 4, 4);
    } else {
        memmove(w->tail, w->tail + len, 4 - len);
        memcpy(w->tail + 4 - len, p, len);
    }
    w->size += (int64_t)len;
    return IPD_OK;
}

int64_t ipd_blob_writer_size(const struct ipd_blob_writer *w)
{
    return w->size;
}

void ipd_blob_writer_sample(const struct ipd_blob_writer *w, const void **head,
                            size_t *head_len, const void **tail)
{
    *head = w->head ? (const void *)w->head : (const void *)"";
    *head_len = w->head_len;
    *tail = w->size >= 4 ? (const void *)w->tail : NULL;
}

enum ipd_err ipd_blob_writer_sha256(struct ipd_blob_writer *w,
                                    char hex[IPD_SHA256_HEX])
{
    if (w->own_sha256)
        return w->own_sha256(w, hex);
    ipd_sha256_final(w->sha, hex);
    return IPD_OK;
}

enum ipd_err ipd_blob_writer_commit(struct ipd_blob_writer *w)
{
    enum ipd_err rc = gate(w->blobs);
    if (rc) {
        /* commit consumes the writer, whatever it answers. */
        w->blobs->ops->abort(w);
        return rc;
    }
    return w->blobs->ops->commit(w);
}

void ipd_blob_writer_abort(struct ipd_blob_writer *w)
{
    if (w)
        w->blobs->ops->abort(w);
}

void ipd__blob_writer_release(struct ipd_blob_writer *w)
{
    ipd_sha256_free(w->sha);
    free(w->head);
    w->sha = NULL;
    w->head = NULL;
}

enum ipd_err ipd_blob_open(struct ipd_blobs *b, const char *file_id,
                           struct ipd_blob_reader **out)
{
    *out = NULL;
    enum ipd_err rc = gate(b);
    if (!rc)
        rc = b->ops->open(b, file_id, out);
    if (!rc)
        (*out)->blobs = b;
    return rc;
}

int ipd_blob_reader_take_fd(struct ipd_blob_reader *r)
{
    return r->blobs->ops->take_fd(r);
}

ssize_t ipd_blob_reader_read(struct ipd_blob_reader *r, void *buf, size_t n)
{
    return r->blobs->ops->read(r, buf, n);
}

void ipd_blob_reader_free(struct ipd_blob_reader *r)
{
    if (r)
        r->blobs->ops->reader_free(r);
}

enum ipd_err ipd_blob_delete(struct ipd_blobs *b, const char *file_id)
{
    enum ipd_err rc = gate(b);
    return rc ? rc : b->ops->del(b, file_id);
}

enum ipd_err ipd_blob_list(struct ipd_blobs *b,
                           int (*fn)(void *cls, const char *file_id,
                                     int64_t size),
                           void *cls)
{
    return b->ops->list(b, fn, cls);
}

enum ipd_err ipd_blobs_count_incomplete(struct ipd_blobs *b, int64_t *n)
{
    return b->ops->count_incomplete(b, n);
}

enum ipd_err ipd_blob_stat(struct ipd_blobs *b, const char *file_id,
                           struct ipd_blob_info *out)
{
    memset(out, 0, sizeof(*out));
    if (!b->ops->stat)
        return IPD_ERR_INTERNAL;
    return b->ops->stat(b, file_id, out);
}

enum ipd_err ipd_blob_iter_new(struct ipd_blobs *b, struct ipd_blob_iter **out)
{
    *out = NULL;
    if (!b->ops->iter_new)
        return IPD_ERR_INTERNAL;
    enum ipd_err rc = b->ops->iter_new(b, out);
    if (!rc)
        (*out)->blobs = b;
    return rc;
}

enum ipd_err ipd_blob_iter_next(struct ipd_blob_iter *it,
                                struct ipd_blob_info *out, size_t cap,
                                size_t *n)
{
    *n = 0;
    if (!cap)
        return IPD_ERR_INVALID;
    return it->blobs->ops->iter_next(it, out, cap, n);
}

void ipd_blob_iter_free(struct ipd_blob_iter *it)
{
    if (it)
        it->blobs->ops->iter_free(it);
}

enum ipd_err ipd_blobs_reap_incomplete(struct ipd_blobs *b,
                                       int64_t older_than_ms, int64_t *removed)
{
    *removed = 0;
    if (!b->ops->reap_incomplete)
        return IPD_ERR_INTERNAL;
    return b->ops->reap_incomplete(b, older_than_ms, removed);
}

enum ipd_err ipd_blobs_prune_dirs(struct ipd_blobs *b, int64_t *removed)
{
    *removed = 0;
    if (!b->ops->prune_dirs)
        return IPD_OK;
    return b->ops->prune_dirs(b, removed);
}
