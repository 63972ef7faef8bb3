/*
 * workq.c - worker threads over one FIFO (see workq.h).
 */
#include <pthread.h>
#include <stdlib.h>

#include "log.h"
#include "workq.h"

struct wq_job {
    struct wq_job *next;
    ipd_workq_fn fn;
    ipd_workq_done_fn done;
    void *arg;
};

struct ipd_workq {
    pthread_t *threads;
    unsigned n, started, queue_max;
    pthread_mutex_t lock;
    pthread_cond_t work;
    struct wq_job *head, *tail; /* under lock */
    unsigned queued, running;   /* under lock */
    bool stop;                  /* under lock */
    bool joined;                /* workers joined (by ipd_workq_stop) */
};

static void *worker(void *arg)
{
    struct ipd_workq *q = arg;
    pthread_mutex_lock(&q->lock);
    for (;;) {
        while (!q->head && !q->stop)
            pthread_cond_wait(&q->work, &q->lock);
        if (!q->head)
            break; /* stopping, and nothing left */
        struct wq_job *j = q->head;
        q->head = j->next;
        if (!q->head)
            q->tail = NULL;
        q->queued--;
        q->running++;
        bool stopping = q->stop;
        pthread_mutex_unlock(&q->lock);
        j->fn(j->arg, stopping);
        pthread_mutex_lock(&q->lock);
        q->running--;
        pthread_mutex_unlock(&q->lock);
        if (j->done)
            j->done(j->arg);
        free(j);
        pthread_mutex_lock(&q->lock);
    }
    pthread_mutex_unlock(&q->lock);
    return NULL;
}

enum ipd_err ipd_workq_new(unsigned threads, unsigned queue_max,
                           struct ipd_workq **out)
{
    struct ipd_workq *q = ipd_xcalloc(1, sizeof(*q));
    q->n = threads ? threads : 1;
    q->queue_max = queue_max;
    pthread_mutex_init(&q->lock, NULL);
    pthread_cond_init(&q->work, NULL);
    q->threads = ipd_xcalloc(q->n, sizeof(*q->threads));
    for (unsigned i = 0; i < q->n; i++) {
        if (pthread_create(&q->threads[i], NULL, worker, q)) {
            ipd_error("cannot start worker thread %u of %u", i, q->n);
            ipd_workq_free(q);
            *out = NULL;
            return IPD_ERR_INTERNAL;
        }
        q->started++;
    }
    *out = q;
    return IPD_OK;
}

void ipd_workq_stop(struct ipd_workq *q)
{
    if (!q)
        return;
    pthread_mutex_lock(&q->lock);
    bool joined = q->joined;
    q->stop = true;
    q->joined = true;
    pthread_cond_broadcast(&q->work);
    pthread_mutex_unlock(&q->lock);
    if (joined)
        return;
    for (unsigned i = 0; i < q->started; i++)
        pthread_join(q->threads[i], NULL);
    /* Only if no worker ever started: nobody else will run these. */
    pthread_mutex_lock(&q->lock);
    while (q->head) {
        struct wq_job *j = q->head;
        q->head = j->next;
        q->queued--;
        pthread_mutex_unlock(&q->lock);
        j->fn(j->arg, true);
        if (j->done)
            j->done(j->arg);
        free(j);
        pthread_mutex_lock(&q->lock);
    }
    q->tail = NULL;
    pthread_mutex_unlock(&q->lock);
}

void ipd_workq_free(struct ipd_workq *q)
{
    if (!q)
        return;
    ipd_workq_stop(q);
    pthread_mutex_destroy(&q->lock);
    pthread_cond_destroy(&q->work);
    free(q->threads);
    free(q);
}

enum ipd_err ipd_workq_submit(struct ipd_workq *q, ipd_workq_fn fn,
                              ipd_workq_done_fn done, void *arg,
                              ipd_workq_admit_fn admit)
{
    enum ipd_err rc = IPD_OK;
    struct wq_job *j = ipd_xcalloc(1, sizeof(*j));
    j->fn = fn;
    j->done = done;
    j->arg = arg;
    pthread_mutex_lock(&q->lock);
    if (q->stop)
        rc = IPD_ERR_UNAVAILABLE;
    else if (q->queued + q->running >= q->n + q->queue_max)
        rc = IPD_ERR_BUSY;
    else if (admit)
        rc = admit(arg);
    if (!rc) {
        if (q->tail)
            q->tail->next = j;
        else
            q->head = j;
        q->tail = j;
        q->queued++;
        pthread_cond_signal(&q->work);
        j = NULL;
    }
    pthread_mutex_unlock(&q->lock);
    free(j);
    return rc;
}

void ipd_workq_counts(struct ipd_workq *q, unsigned *running,
                      unsigned *queued)
{
    *running = *queued = 0;
    if (!q)
        return;
    pthread_mutex_lock(&q->lock);
    *running = q->running;
    *queued = q->queued;
    pthread_mutex_unlock(&q->lock);
}

unsigned ipd_workq_threads(const struct ipd_workq *q)
{
    return q ? q->n : 0;
}

unsigned ipd_workq_queue_max(const struct ipd_workq *q)
{
    return q ? q->queue_max : 0;
}
