/*
 * bg.c - a small pool of threads for request work that blocks on the
 * network (URL ingest), so it never runs on the HTTP event threads.
 *
 * The handler suspends the connection and submits; a worker runs fn(r)
 * (which must not reply: libmicrohttpd answers only from its own
 * callbacks), then resumes the connection, and the handler's finish runs
 * again and replies from what fn left in r->state.
 */
#include <pthread.h>
#include <stdlib.h>

#include "../service/log.h"
#include "http.h"

struct bg_job {
    struct bg_job *next;
    struct ipd_req *r;
    void (*fn)(struct ipd_req *r, bool stopping);
};

struct ipd_bg_pool {
    pthread_t *threads;
    unsigned n, started, queue_max, queued, running;
    pthread_mutex_t lock;
    pthread_cond_t work;
    struct bg_job *head, *tail;
    bool stop;
};

static void *bg_worker(void *arg)
{
    struct ipd_bg_pool *p = arg;
    pthread_mutex_lock(&p->lock);
    for (;;) {
        while (!p->head && !p->stop)
            pthread_cond_wait(&p->work, &p->lock);
        if (!p->head)
            break;
        struct bg_job *j = p->head;
        p->head = j->next;
        if (!p->head)
            p->tail = NULL;
        p->queued--;
        p->running++;
        bool stopping = p->stop;
        pthread_mutex_unlock(&p->lock);
        /* Work that had not started when shutdown began is only told so
         * (it records a 503 for its handler); the connection is resumed
         * either way.  Work already running finishes: it is bounded by its
         * own timeouts. */
        j->fn(j->r, stopping);
        MHD_resume_connection(j->r->conn);
        free(j);
        pthread_mutex_lock(&p->lock);
        p->running--;
    }
    pthread_mutex_unlock(&p->lock);
    return NULL;
}

enum ipd_err ipd_bg_pool_new(unsigned threads, unsigned queue,
                             struct ipd_bg_pool **out)
{
    struct ipd_bg_pool *p = ipd_xcalloc(1, sizeof(*p));
    p->n = threads ? threads : 1;
    p->queue_max = queue;
    pthread_mutex_init(&p->lock, NULL);
    pthread_cond_init(&p->work, NULL);
    p->threads = ipd_xcalloc(p->n, sizeof(*p->threads));
    for (unsigned i = 0; i < p->n; i++) {
        if (pthread_create(&p->threads[i], NULL, bg_worker, p)) {
            ipd_bg_pool_free(p);
            *out = NULL;
            return IPD_ERR_INTERNAL;
        }
        p->started++;
    }
    *out = p;
    return IPD_OK;
}

void ipd_bg_pool_free(struct ipd_bg_pool *p)
{
    if (!p)
        return;
    pthread_mutex_lock(&p->lock);
    p->stop = true;
    pthread_cond_broadcast(&p->work);
    pthread_mutex_unlock(&p->lock);
    for (unsigned i = 0; i < p->started; i++)
        pthread_join(p->threads[i], NULL);
    pthread_mutex_destroy(&p->lock);
    pthread_cond_destroy(&p->work);
    free(p->threads);
    free(p);
}

bool ipd_bg_submit(struct ipd_bg_pool *p, struct ipd_req *r,
                   void (*fn)(struct ipd_req *r, bool stopping))
{
    if (!p)
        return false;
    struct bg_job *j = ipd_xcalloc(1, sizeof(*j));
    j->r = r;
    j->fn = fn;
    pthread_mutex_lock(&p->lock);
    if (p->stop || p->queued >= p->queue_max) {
        pthread_mutex_unlock(&p->lock);
        free(j);
        return false;
    }
    /* Suspend before a worker can see the job: its resume must never come
     * first. */
    r->suspended = true;
    MHD_suspend_connection(r->conn);
    if (p->tail)
        p->tail->next = j;
    else
        p->head = j;
    p->tail = j;
    p->queued++;
    pthread_cond_signal(&p->work);
    pthread_mutex_unlock(&p->lock);
    return true;
}

void ipd_bg_pool_counts(struct ipd_bg_pool *p, unsigned *running,
                        unsigned *queued)
{
    *running = *queued = 0;
    if (!p)
        return;
    pthread_mutex_lock(&p->lock);
    *running = p->running;
    *queued = p->queued;
    pthread_mutex_unlock(&p->lock);
}
