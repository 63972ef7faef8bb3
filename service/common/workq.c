/*
 * workq.c - worker threads over one FIFO (see workq.h).
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "workq.h"

struct wq_job {
    struct wq_job *next;
    ipd_workq_fn fn;
    ipd_workq_done_fn done;
    void *arg;
    char *group;          /* owned, or NULL */
    unsigned running_max; /* the group's running bound; 0: none */
};

struct ipd_workq {
    pthread_t *threads;
    unsigned n, started, queue_max;
    pthread_mutex_t lock;
    pthread_cond_t work;
    struct wq_job *head, *tail; /* under lock */
    struct wq_job **run;        /* the n jobs running (NULL: free); lock */
    unsigned queued, running;   /* under lock */
    bool stop;                  /* under lock */
    bool joined;                /* workers joined (by ipd_workq_stop) */
};

/* The jobs of group running (under lock; at most n of them). */
static unsigned group_running(const struct ipd_workq *q, const char *group)
{
    unsigned k = 0;
    for (unsigned i = 0; i < q->n; i++)
        k += q->run[i] && q->run[i]->group && !strcmp(q->run[i]->group, group);
    return k;
}

/* Take *pp (prev: the job before it, or NULL) off the queue. */
static struct wq_job *unlink_job(struct ipd_workq *q, struct wq_job **pp,
                                 struct wq_job *prev)
{
    struct wq_job *j = *pp;
    *pp = j->next;
    if (q->tail == j)
        q->tail = prev;
    j->next = NULL;
    return j;
}

/* The oldest waiting job whose group is under its running bound, taken
 * off the queue (under lock); when stopping, simply the oldest.  NULL:
 * none may start now. */
static struct wq_job *take_job(struct ipd_workq *q)
{
    struct wq_job **pp = &q->head, *prev = NULL;
    for (; *pp; prev = *pp, pp = &(*pp)->next) {
        struct wq_job *j = *pp;
        if (!q->stop && j->group && j->running_max &&
            group_running(q, j->group) >= j->running_max)
            continue;
        return unlink_job(q, pp, prev);
    }
    return NULL;
}

static void job_free(struct wq_job *j)
{
    free(j->group);
    free(j);
}

static void *worker(void *arg)
{
    struct ipd_workq *q = arg;
    pthread_mutex_lock(&q->lock);
    for (;;) {
        struct wq_job *j;
        while (!(j = take_job(q)) && !q->stop)
            pthread_cond_wait(&q->work, &q->lock);
        if (!j)
            break; /* stopping, and nothing left */
        unsigned slot = 0;
        while (q->run[slot])
            slot++; /* a free one: at most n run at once */
        q->run[slot] = j;
        q->queued--;
        q->running++;
        bool stopping = q->stop;
        pthread_mutex_unlock(&q->lock);
        j->fn(j->arg, stopping);
        pthread_mutex_lock(&q->lock);
        q->running--;
        q->run[slot] = NULL;
        /* A job its group's bound held back may start now. */
        if (j->group && q->head)
            pthread_cond_broadcast(&q->work);
        pthread_mutex_unlock(&q->lock);
        if (j->done)
            j->done(j->arg);
        job_free(j);
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
    q->run = ipd_xcalloc(q->n, sizeof(*q->run));
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
        job_free(j);
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
    free(q->run);
    free(q);
}

void *ipd_workq_withdraw(struct ipd_workq *q,
                         bool (*match)(void *arg, void *ctx), void *ctx)
{
    void *arg = NULL;
    pthread_mutex_lock(&q->lock);
    struct wq_job **pp = &q->head, *prev = NULL;
    for (; *pp; prev = *pp, pp = &(*pp)->next) {
        struct wq_job *j = *pp;
        if (!match(j->arg, ctx))
            continue;
        unlink_job(q, pp, prev);
        q->queued--;
        arg = j->arg;
        job_free(j);
        break;
    }
    pthread_mutex_unlock(&q->lock);
    return arg;
}

/* The jobs of group running or waiting (under lock). */
static unsigned group_held(const struct ipd_workq *q, const char *group,
                           unsigned *queued)
{
    unsigned k = 0;
    for (const struct wq_job *j = q->head; j; j = j->next)
        k += j->group && !strcmp(j->group, group);
    if (queued)
        *queued = k;
    return k + group_running(q, group);
}

/* Whether a job of group (NULL: none) with running bound running_max
 * would start at once: a worker is free once the waiting jobs that may
 * start have theirs, and the group is under its bound (under lock). */
static bool starts_now(const struct ipd_workq *q, const char *group,
                       unsigned running_max)
{
    unsigned startable = 0;
    for (const struct wq_job *j = q->head; j; j = j->next)
        startable += !j->group || !j->running_max ||
                     group_running(q, j->group) < j->running_max;
    if (q->running + startable >= q->n)
        return false;
    return !group || !running_max || group_running(q, group) < running_max;
}

/* The queue's capacity: n running and queue_max waiting.  A job that
 * starts at once needs no waiting place, so jobs held back by their
 * group's running bound never leave a free worker idle while others are
 * refused (under lock). */
static bool over_capacity(const struct ipd_workq *q, const struct wq_job *j)
{
    /* (running never exceeds n, so a full queue is the whole test) */
    return !starts_now(q, j->group, j->running_max) &&
           q->queued >= q->queue_max;
}

enum ipd_err ipd_workq_submit_shared(struct ipd_workq *q, ipd_workq_fn fn,
                                     ipd_workq_done_fn done, void *arg,
                                     ipd_workq_admit_fn admit,
                                     const struct ipd_workq_share *share,
                                     bool *share_full)
{
    enum ipd_err rc = IPD_OK;
    struct wq_job *j = ipd_xcalloc(1, sizeof(*j));
    j->fn = fn;
    j->done = done;
    j->arg = arg;
    if (share && share->group) {
        j->group = ipd_xstrdup(share->group);
        j->running_max = share->running_max;
    }
    if (share_full)
        *share_full = false;
    pthread_mutex_lock(&q->lock);
    if (q->stop) {
        rc = IPD_ERR_UNAVAILABLE;
    } else if (j->group && share->held_max &&
               group_held(q, j->group, NULL) >= share->held_max) {
        rc = IPD_ERR_BUSY;
        if (share_full)
            *share_full = true;
    } else if (over_capacity(q, j)) {
        rc = IPD_ERR_BUSY;
    } else if (admit) {
        rc = admit(arg);
    }
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
    if (j)
        job_free(j);
    return rc;
}

enum ipd_err ipd_workq_submit(struct ipd_workq *q, ipd_workq_fn fn,
                              ipd_workq_done_fn done, void *arg,
                              ipd_workq_admit_fn admit)
{
    return ipd_workq_submit_shared(q, fn, done, arg, admit, NULL, NULL);
}

void ipd_workq_group_counts(struct ipd_workq *q, const char *group,
                            unsigned *running, unsigned *queued)
{
    *running = *queued = 0;
    if (!q || !group)
        return;
    pthread_mutex_lock(&q->lock);
    *running = group_held(q, group, queued) - *queued;
    pthread_mutex_unlock(&q->lock);
}

void ipd_workq_counts(struct ipd_workq *q, unsigned *running, unsigned *queued)
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
