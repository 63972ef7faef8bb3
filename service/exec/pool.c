/*
 * pool.c - the execution workers, the execution table, the
 * outcome counters and the callbacks (see pool.h).
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../../storage/space.h"
#include "../common/json_out.h"
#include "../common/live.h"
#include "../common/log.h"
#include "../common/metrics.h"
#include "../common/workq.h"
#include "callbacks.h"
#include "executor.h"
#include "pool.h"
#include "exec_internal.h"
#include "result_store.h"

/* A power of two above IPD_EXEC_ASYNC_MAX: chains stay short. */
#define ASYNC_BUCKETS 16384

/* An execution's state from its admission, kept result_ttl after it is
 * done.  Small: an asynchronous result is a file (result_store.h); a
 * synchronous one went to its caller and is not kept.  Its live channel
 * (live.h) is how a cancel reaches it, queued (pj: withdrawn from the
 * queue) or running (the supervisor kills the run). */
struct exec_entry {
    struct exec_entry *next;      /* in its bucket */
    struct exec_entry *done_next; /* its done list, oldest first */
    struct exec_entry *all_prev;  /* every entry, in admission order */
    struct exec_entry *all_next;
    char id[IPD_ID_MAX];
    char tenant[IPD_TENANT_MAX];
    char user_id[IPD_USER_ID_MAX];
    char session_id[IPD_ID_MAX];          /* the job's session, or "" */
    bool sync;                            /* a synchronous job's: no result,
                                             not charged to its tenant */
    const char *status;                   /* "queued", "running", "done",
                                             "cancelled" */
    bool over;                            /* done or cancelled */
    struct ipd_live *live;                /* a reference until it is over */
    struct pool_job *pj;                  /* while queued, else NULL */
    int64_t created_ms;                   /* wall clock, at admission */
    int64_t started_ms;                   /* monotonic, when it started
                                             running (0: it never did) */
    int64_t bytes;                        /* the result's size once done */
    char *fallback;                       /* owned: once done, a short failure
                                             result when its file could not be
                                             written; NULL: the file holds it */
    int64_t done_ms;                      /* monotonic */
    struct ipd_callback_status *callback; /* a reference with a
                                             callback_url, else NULL */
};

/* What one tenant holds of the table (its bounds): its asynchronous
 * entries, the done ones and their bytes, and the callbacks of its jobs
 * not yet done (their delivery is callbacks.c's to count).  Synchronous
 * entries are not counted. */
struct tenant_held {
    char tenant[IPD_TENANT_MAX];
    int64_t bytes;
    size_t results;           /* done entries */
    size_t entries;           /* every entry: queued, running, done */
    size_t callbacks_waiting; /* entries with a callback, not done */
};

/* Done entries in the order they finished: the first expires first. */
struct done_list {
    struct exec_entry *head;
    struct exec_entry **tail;
};

/* By id; expiry walks the done lists from their oldest ends, never the
 * whole table.  At most IPD_EXEC_ASYNC_MAX asynchronous entries (a
 * submit beyond is refused).  Synchronous jobs' done entries have a list
 * of their own: when the table holds IPD_EXEC_ASYNC_MAX entries, the
 * oldest of them makes room for a new one, so they never make it refuse
 * work; beyond IPD_EXEC_ASYNC_MAX entries the table only grows by
 * synchronous jobs still queued or running, which the queue bounds. */
struct exec_table {
    struct exec_entry **buckets; /* owned, ASYNC_BUCKETS of them */
    size_t n;                    /* entries, done or not */
    struct exec_entry *all_head; /* oldest admitted */
    struct exec_entry *all_tail; /* newest admitted */
    struct done_list done;       /* asynchronous jobs' */
    struct done_list sync_done;  /* synchronous jobs' */
    struct tenant_held *held;    /* owned array: tenants holding
                                    entries (few; unordered) */
    size_t n_held, cap_held;
    size_t n_sync;      /* synchronous entries, done or not */
    size_t n_done;      /* done asynchronous entries */
    size_t n_sync_done; /* done synchronous entries */
    int64_t bytes;      /* the asynchronous results' bytes, every tenant's */
};

struct ipd_exec_pool {
    struct ipd_executor *ex;
    struct ipd_metrics *metrics; /* borrowed, may be NULL */
    struct ipd_workq *q;         /* the slots and the queue */
    pthread_mutex_t lock;
    /* Outcomes since start (under lock): the admin status. */
    uint64_t n_total, n_success, n_error, n_timeout, n_oom, n_failed;
    struct exec_table table; /* under lock */
    int64_t result_ttl_ms;
    int64_t tenant_max_bytes;         /* done results' bytes per tenant */
    struct ipd_space *space;          /* borrowed; NULL: no delete reserve */
    struct ipd_results *results;      /* owned: the results' files */
    struct ipd_callbacks *callbacks;  /* borrowed, may be NULL */
    unsigned slots_claimed;           /* worker threads that took a slot
                                         (under lock) */
    pthread_t pruner;                 /* removes results as they expire */
    bool pruner_started, pruner_stop; /* pruner_stop under lock */
    pthread_cond_t prune_wake;        /* CLOCK_MONOTONIC; under lock */
};

/* The execution slot of this worker thread, claimed by its first job
 * (1-based; 0: none yet).  A thread serves one pool, so each of its
 * `slots` threads ends up with its own 0..slots-1: its own host uid. */
static _Thread_local unsigned worker_slot;

static unsigned my_slot(struct ipd_exec_pool *p)
{
    if (!worker_slot) {
        pthread_mutex_lock(&p->lock);
        worker_slot = ++p->slots_claimed;
        pthread_mutex_unlock(&p->lock);
    }
    return worker_slot - 1;
}

/* A job on the queue: the caller's job and how to tell the caller. */
struct pool_job;
struct pool_job {
    struct ipd_exec_pool *pool;
    struct ipd_exec_job *job; /* a synchronous job's is borrowed, an
                                 asynchronous job's owned */
    bool async;
    bool owned;              /* a streamed job: the pool's, freed when over */
    ipd_exec_admit_fn admit; /* synchronous jobs' hooks */
    ipd_exec_done_fn done;
    void *ctx;
    bool table_full;        /* admission refused: the result table */
    bool tenant_full;       /* admission refused: the tenant's bound */
    int64_t tenant_held;    /* the bytes of results it holds */
    const char *share_full; /* admission refused: which share of the
                               tenant's is full ("slots", "results",
                               "callbacks"), or NULL */
    unsigned share_max;     /* that share */
    int64_t oldest_due_ms;  /* when the tenant's oldest done result
                               expires (monotonic; 0: none done) */
};

struct ipd_exec_job *ipd_exec_job_new(void)
{
    struct ipd_exec_job *j = ipd_xcalloc(1, sizeof(*j));
    ipd_buf_init(&j->detail, 1024);
    j->store_outputs = true;
    return j;
}

void ipd_exec_job_free(struct ipd_exec_job *j)
{
    if (!j)
        return;
    free(j->code);
    for (size_t i = 0; i < j->n_files; i++)
        free(j->file_ids[i]);
    free(j->file_ids);
    json_decref(j->result);
    json_decref(j->variables);
    ipd_live_unref(j->live);
    for (size_t i = 0; i < j->n_packages; i++)
        free(j->packages[i]);
    free(j->packages);
    json_decref(j->functions);
    free(j->callback_url);
    ipd_buf_release(&j->detail);
    free(j);
}

const char *ipd_exec_error_type(enum ipd_err err)
{
    switch (err) {
    case IPD_ERR_NOT_FOUND: return "NotFound";
    case IPD_ERR_INVALID:
    case IPD_ERR_TOO_LARGE: return "InvalidRequest";
    default: return "ServiceError";
    }
}

/* ---- the execution table (every function under the lock) -------------- */

/* FNV-1a: ids are random already, this only spreads them. */
static struct exec_entry **table_bucket(struct exec_table *t, const char *id)
{
    uint64_t h = 1469598103934665603ULL;
    for (const unsigned char *s = (const unsigned char *)id; *s; s++)
        h = (h ^ *s) * 1099511628211ULL;
    return &t->buckets[h & (ASYNC_BUCKETS - 1)];
}

static struct exec_entry *table_find(struct exec_table *t, const char *id)
{
    for (struct exec_entry *e = *table_bucket(t, id); e; e = e->next)
        if (!strcmp(e->id, id))
            return e;
    return NULL;
}

static void table_add(struct exec_table *t, struct exec_entry *e)
{
    struct exec_entry **b = table_bucket(t, e->id);
    e->next = *b;
    *b = e;
    e->all_prev = t->all_tail;
    e->all_next = NULL;
    if (t->all_tail)
        t->all_tail->all_next = e;
    else
        t->all_head = e;
    t->all_tail = e;
    t->n++;
}

/* The tenant's entry in t->held; NULL when it holds nothing (and create
 * is false). */
static struct tenant_held *held_find(struct exec_table *t, const char *tenant,
                                     bool create)
{
    for (size_t i = 0; i < t->n_held; i++)
        if (!strcmp(t->held[i].tenant, tenant))
            return &t->held[i];
    if (!create)
        return NULL;
    if (t->n_held == t->cap_held) {
        t->cap_held = t->cap_held ? t->cap_held * 2 : 16;
        t->held = ipd_xrealloc(t->held, t->cap_held * sizeof(*t->held));
    }
    struct tenant_held *h = &t->held[t->n_held++];
    memset(h, 0, sizeof(*h));
    snprintf(h->tenant, sizeof(h->tenant), "%s", tenant);
    return h;
}

static void done_push(struct done_list *l, struct exec_entry *e)
{
    e->done_next = NULL;
    *l->tail = e;
    l->tail = &e->done_next;
}

/* e is done: it joins its done list, where it expires in turn, and an
 * asynchronous one counts against its tenant's bound. */
static void table_done_add(struct exec_table *t, struct exec_entry *e)
{
    if (e->sync) {
        t->n_sync_done++;
        done_push(&t->sync_done, e);
        return;
    }
    struct tenant_held *h = held_find(t, e->tenant, true);
    h->bytes += e->bytes;
    h->results++;
    if (e->callback)
        h->callbacks_waiting--;
    t->bytes += e->bytes;
    t->n_done++;
    done_push(&t->done, e);
}

static void entry_free(struct exec_entry *e)
{
    ipd_live_unref(e->live);
    free(e->fallback);
    ipd_callback_status_unref(e->callback);
    free(e);
}

/* Remove the oldest entry of l (done, and l not empty) and its file. */
static void table_drop_oldest(struct ipd_exec_pool *p, struct done_list *l)
{
    struct exec_table *t = &p->table;
    struct exec_entry *e = l->head;
    l->head = e->done_next;
    if (!l->head)
        l->tail = &l->head;
    struct exec_entry **pp = table_bucket(t, e->id);
    while (*pp != e)
        pp = &(*pp)->next;
    *pp = e->next;
    if (e->all_prev)
        e->all_prev->all_next = e->all_next;
    else
        t->all_head = e->all_next;
    if (e->all_next)
        e->all_next->all_prev = e->all_prev;
    else
        t->all_tail = e->all_prev;
    if (e->sync) {
        t->n_sync--;
        t->n_sync_done--;
    } else {
        struct tenant_held *h = held_find(t, e->tenant, false);
        IPD_ASSERT(h);
        h->bytes -= e->bytes;
        h->results--;
        if (--h->entries == 0)
            *h = t->held[--t->n_held];
        t->bytes -= e->bytes;
        t->n_done--;
        if (!e->fallback)
            ipd_results_remove(p->results, e->id);
    }
    entry_free(e);
    t->n--;
}

/* Drop the entries done longer than the ttl ago (each done list's oldest
 * ones) and their files. */
static void table_prune(struct ipd_exec_pool *p, int64_t now)
{
    struct exec_table *t = &p->table;
    while (t->done.head && now - t->done.head->done_ms >= p->result_ttl_ms)
        table_drop_oldest(p, &t->done);
    while (t->sync_done.head &&
           now - t->sync_done.head->done_ms >= p->result_ttl_ms)
        table_drop_oldest(p, &t->sync_done);
}

/* A new entry is coming: when the table is full, the oldest done
 * synchronous entry makes room (it holds nothing anyone waits for). */
static void table_make_room(struct ipd_exec_pool *p)
{
    if (p->table.n >= IPD_EXEC_ASYNC_MAX && p->table.sync_done.head)
        table_drop_oldest(p, &p->table.sync_done);
}

/* When the next entry expires (monotonic ms), 0 when none is done. */
static int64_t table_next_due(const struct ipd_exec_pool *p)
{
    const struct exec_entry *a = p->table.done.head;
    const struct exec_entry *s = p->table.sync_done.head;
    if (!a && !s)
        return 0;
    if (!a || (s && s->done_ms < a->done_ms))
        a = s;
    return a->done_ms + p->result_ttl_ms;
}

/* A thread that removes each entry when its ttl passes, so an idle
 * server keeps none past it. */
static void *pruner_main(void *arg)
{
    struct ipd_exec_pool *p = arg;
    pthread_mutex_lock(&p->lock);
    while (!p->pruner_stop) {
        table_prune(p, ipd_mono_ms());
        int64_t due = table_next_due(p);
        if (!due) {
            pthread_cond_wait(&p->prune_wake, &p->lock);
            continue;
        }
        struct timespec ts = {.tv_sec = (time_t)(due / 1000),
                              .tv_nsec = (long)(due % 1000) * 1000000L};
        (void)pthread_cond_timedwait(&p->prune_wake, &p->lock, &ts);
    }
    pthread_mutex_unlock(&p->lock);
    return NULL;
}

static void table_init(struct exec_table *t)
{
    t->buckets = ipd_xcalloc(ASYNC_BUCKETS, sizeof(*t->buckets));
    t->n = 0;
    t->done.head = NULL;
    t->done.tail = &t->done.head;
    t->sync_done.head = NULL;
    t->sync_done.tail = &t->sync_done.head;
}

static void table_release(struct exec_table *t)
{
    for (size_t i = 0; t->buckets && i < ASYNC_BUCKETS; i++) {
        while (t->buckets[i]) {
            struct exec_entry *e = t->buckets[i];
            t->buckets[i] = e->next;
            entry_free(e);
        }
    }
    free(t->buckets);
    t->buckets = NULL;
    free(t->held);
    t->held = NULL;
}

/* A new entry for pj's job (status "queued"), in the table. */
static struct exec_entry *table_admit(struct ipd_exec_pool *p,
                                      struct pool_job *pj, bool sync)
{
    const struct ipd_exec_job *j = pj->job;
    struct exec_entry *e = ipd_xcalloc(1, sizeof(*e));
    memcpy(e->id, j->exec_id, sizeof(e->id));
    snprintf(e->tenant, sizeof(e->tenant), "%s", j->tenant);
    snprintf(e->user_id, sizeof(e->user_id), "%s", j->user_id);
    snprintf(e->session_id, sizeof(e->session_id), "%s", j->session_id);
    e->sync = sync;
    e->status = "queued";
    e->live = ipd_live_ref(j->live);
    e->pj = pj;
    e->created_ms = ipd_now_ms();
    table_make_room(p);
    table_add(&p->table, e);
    p->table.n_sync += sync;
    return e;
}

/* The result of an asynchronous job that did not produce one: the same
 * object shape, success false, error {type, message}. */
static json_t *failure_result(const struct ipd_exec_job *j, const char *type,
                              const char *message)
{
    return json_pack("{s:s, s:b, s:n, s:b, s:b, s:s, s:s, s:{s:s, s:s, s:s}}",
                     "execution_id", j->exec_id, "success", 0, "exit_code",
                     "timed_out", 0, "cancelled", 0, "stdout", "", "stderr", "",
                     "error", "type", type, "message", message, "traceback",
                     "");
}

/* The result of a job cancelled before it started. */
static json_t *cancelled_result(const struct ipd_exec_job *j)
{
    json_t *r = failure_result(j, "Cancelled",
                               "the execution was cancelled before it started");
    json_object_set_new(r, "cancelled", json_true());
    return r;
}

/* Keep j's result as its file (result_store.h); when the disk refuses, a
 * short failure result instead, returned as text (new) to keep in
 * memory.  *bytes: the size kept either way. */
static char *keep_result(struct ipd_exec_pool *p, struct ipd_exec_job *j,
                         int64_t *bytes)
{
    json_t *result = j->result;
    char *text = NULL;
    j->result = NULL; /* ours now: freed as soon as it is written */
    if (j->rc != IPD_OK) {
        json_decref(result);
        result =
            failure_result(j, ipd_exec_error_type(j->rc),
                           j->detail.len ? j->detail.buf : ipd_err_name(j->rc));
    }
    enum ipd_err rc = ipd_results_write(p->results, j->exec_id, result, bytes);
    json_decref(result);
    if (rc) {
        result = failure_result(j, "ServiceError",
                                "the result could not be kept: the server "
                                "could not write it (see its log)");
        text = json_dumps(result, JSON_COMPACT | JSON_ENSURE_ASCII);
        IPD_ASSERT(text);
        json_decref(result);
        *bytes = (int64_t)strlen(text);
    }
    return text;
}

/* e's job is over (under the lock): it is done (or cancelled) from now
 * on and expires result_ttl later. */
static void entry_done(struct ipd_exec_pool *p, struct exec_entry *e,
                       bool cancelled)
{
    e->status = cancelled ? "cancelled" : "done";
    e->over = true;
    e->pj = NULL;
    ipd_live_unref(e->live);
    e->live = NULL;
    e->done_ms = ipd_mono_ms();
    table_done_add(&p->table, e);
    pthread_cond_signal(&p->prune_wake);
}

/* An asynchronous job ended: keep its result, send the callback (its
 * body read from the result's file at each attempt). */
static void async_finish(struct ipd_exec_pool *p, struct ipd_exec_job *j,
                         bool cancelled)
{
    int64_t bytes = 0;
    char *fallback = keep_result(p, j, &bytes);
    char *body = fallback ? ipd_xstrdup(fallback) : NULL;
    struct ipd_callback_status *status = NULL;
    /* Stored before the callback goes out: a bot that polls as soon as
     * it is called back finds the result. */
    pthread_mutex_lock(&p->lock);
    struct exec_entry *e = table_find(&p->table, j->exec_id);
    if (e) {
        e->bytes = bytes;
        e->fallback = fallback;
        entry_done(p, e, cancelled);
        fallback = NULL;
        if (e->callback)
            status = ipd_callback_status_ref(e->callback);
    } else if (!fallback) {
        ipd_results_remove(p->results, j->exec_id);
    }
    /* Counted by the delivery from here on (callbacks_pending). */
    pthread_mutex_unlock(&p->lock);
    free(fallback);
    if (j->callback_url && !p->callbacks)
        ipd_callback_status_fail(status, "callbacks are unavailable on this "
                                         "server (see the server log)");
    if (j->callback_url && p->callbacks) {
        /* Signed by the sender with the tenant's secrets of the time. */
        char *path = body ? NULL : ipd_results_path(p->results, j->exec_id);
        if (body)
            ipd_callbacks_send(p->callbacks, j->callback_url, body,
                               strlen(body), j->tenant, status);
        else
            ipd_callbacks_send_file(p->callbacks, j->callback_url, path,
                                    (size_t)bytes, j->tenant, status);
        free(path);
    }
    ipd_callback_status_unref(status);
    free(body);
}

/* ---- running a job ---------------------------------------------------- */

/* Outcomes of code that ran, plus runs the service failed to start; a
 * client's bad request (unknown file, bad package) is neither (false). */
static bool outcome_of(const struct ipd_exec_job *j,
                       enum ipd_metrics_exec_outcome *o, double *secs)
{
    if (j->rc == IPD_OK) {
        json_t *res = json_object_get(j->result, "resources");
        json_t *et = json_object_get(j->result, "execution_time");
        if (json_is_number(et))
            *secs = json_number_value(et);
        if (json_is_true(json_object_get(j->result, "timed_out")))
            *o = IPD_METRICS_EXEC_TIMEOUT;
        else if (json_is_true(json_object_get(res, "oom_killed")))
            *o = IPD_METRICS_EXEC_OOM;
        else if (json_is_true(json_object_get(j->result, "success")))
            *o = IPD_METRICS_EXEC_SUCCESS;
        else
            *o = IPD_METRICS_EXEC_ERROR;
        return true;
    }
    *o = IPD_METRICS_EXEC_FAILED_TO_START;
    return j->rc == IPD_ERR_INTERNAL || j->rc == IPD_ERR_UNAVAILABLE;
}

void ipd_exec_job_request(const struct ipd_exec_job *j,
                          struct ipd_exec_request *out)
{
    *out = (struct ipd_exec_request){
        .tenant = j->tenant,
        .user_id = j->user_id,
        .code = j->code,
        .code_len = j->code_len,
        .file_ids = (const char *const *)j->file_ids,
        .n_files = j->n_files,
        .timeout_ms = j->timeout_ms,
        .variables = j->variables,
        .policy = j->policy,
        .packages = (const char *const *)j->packages,
        .n_packages = j->n_packages,
        .functions = j->functions,
        .execution_id = j->exec_id[0] ? j->exec_id : NULL,
        .session_id = j->session_id[0] ? j->session_id : NULL,
        .live = j->live,
        .outputs_inline_only = !j->store_outputs,
        .admin = j->admin,
    };
}

static void run_job(struct ipd_exec_pool *p, struct ipd_exec_job *j)
{
    struct ipd_exec_request rq;
    ipd_exec_job_request(j, &rq);
    rq.slot = my_slot(p);
    enum ipd_metrics_exec_outcome o;
    int64_t t0 = ipd_now_ms();
    j->rc = ipd_executor_run(p->ex, &rq, &j->result, &j->detail);
    double secs = (double)(ipd_now_ms() - t0) / 1000.0;
    if (!outcome_of(j, &o, &secs))
        return;
    ipd_metrics_exec_observe(p->metrics, o, secs);
    pthread_mutex_lock(&p->lock);
    p->n_total++;
    switch (o) {
    case IPD_METRICS_EXEC_SUCCESS: p->n_success++; break;
    case IPD_METRICS_EXEC_ERROR: p->n_error++; break;
    case IPD_METRICS_EXEC_TIMEOUT: p->n_timeout++; break;
    case IPD_METRICS_EXEC_OOM: p->n_oom++; break;
    default: p->n_failed++; break;
    }
    pthread_mutex_unlock(&p->lock);
}

/* A worker runs one job; jobs that had not started at shutdown are
 * refused (503). */
static void exec_work(void *arg, bool stopping)
{
    struct pool_job *pj = arg;
    struct ipd_exec_pool *p = pj->pool;
    if (stopping) {
        pj->job->rc = IPD_ERR_UNAVAILABLE;
        ipd_buf_adds(&pj->job->detail, "the service is shutting down");
        return;
    }
    pthread_mutex_lock(&p->lock);
    struct exec_entry *e = table_find(&p->table, pj->job->exec_id);
    if (e) {
        e->status = "running";
        e->started_ms = ipd_mono_ms();
        e->pj = NULL; /* a cancel reaches it through its live channel */
    }
    pthread_mutex_unlock(&p->lock);
    if (ipd_live_cancelled(pj->job->live)) {
        pj->job->result = cancelled_result(pj->job);
        return;
    }
    run_job(p, pj->job);
}

/* A streamed job's end on its live channel: the result event (a failure
 * result, shaped as an asynchronous one's, when the job failed: its
 * stream began when it was queued). */
static void live_finish(struct ipd_exec_job *j)
{
    if (!ipd_live_streamed(j->live)) {
        ipd_live_end(j->live, NULL, 0);
        return;
    }
    json_t *failed = NULL;
    if (j->rc != IPD_OK)
        failed =
            failure_result(j, ipd_exec_error_type(j->rc),
                           j->detail.len ? j->detail.buf : ipd_err_name(j->rc));
    char *text = json_dumps(failed ? failed : j->result, IPD_JSON_REPLY_FLAGS);
    IPD_ASSERT(text);
    json_decref(failed);
    ipd_live_end(j->live, text, strlen(text));
}

/* Once the job no longer counts as running: the stored result and the
 * callback, or the caller's done hook, so a client that then asks for the
 * status does not see it running. */
static void exec_done(void *arg)
{
    struct pool_job *pj = arg;
    struct ipd_exec_pool *p = pj->pool;
    struct ipd_exec_job *j = pj->job;
    bool cancelled = j->rc == IPD_OK &&
                     json_is_true(json_object_get(j->result, "cancelled"));
    /* The stream's result event goes out once the entry is over: a
     * client that has it finds the execution done, its calls 410. */
    if (pj->async) {
        async_finish(p, j, cancelled);
        live_finish(j);
        ipd_exec_job_free(j);
    } else {
        /* Its result went to its caller (or its stream); the entry only
         * says it is over. */
        pthread_mutex_lock(&p->lock);
        struct exec_entry *e = table_find(&p->table, j->exec_id);
        if (e)
            entry_done(p, e, cancelled);
        j->finished = true;
        pthread_mutex_unlock(&p->lock);
        live_finish(j);
        /* The job is the caller's again from here on (a streamed one's
         * caller has its live channel only). */
        if (pj->owned)
            ipd_exec_job_free(j);
        else
            pj->done(pj->ctx);
    }
    free(pj);
}

/* ---- submitting ------------------------------------------------------- */

/* Under the queue's lock, before a worker can see the job: its entry
 * ("queued"), which never makes the table refuse it (table_make_room). */
static enum ipd_err admit_sync(void *arg)
{
    struct pool_job *pj = arg;
    struct ipd_exec_pool *p = pj->pool;
    pthread_mutex_lock(&p->lock);
    table_prune(p, ipd_mono_ms());
    (void)table_admit(p, pj, true);
    pthread_mutex_unlock(&p->lock);
    if (pj->admit)
        pj->admit(pj->ctx);
    return IPD_OK;
}

/* When the tenant's oldest done result expires (monotonic ms), 0 when it
 * has none done (under the lock). */
static int64_t oldest_due(struct ipd_exec_pool *p, const char *tenant)
{
    for (struct exec_entry *e = p->table.done.head; e; e = e->done_next)
        if (!strcmp(e->tenant, tenant))
            return e->done_ms + p->result_ttl_ms;
    return 0;
}

/* The tenant's callbacks not yet over: its jobs with a callback_url not
 * yet done, and its deliveries waiting or being tried (under the lock). */
static size_t callbacks_pending(struct ipd_exec_pool *p,
                                const struct tenant_held *h, const char *tenant)
{
    return (h ? h->callbacks_waiting : 0) +
           ipd_callbacks_tenant_pending(p->callbacks, tenant);
}

/* Why the tenant may not add pj's entry (under the lock): the result
 * table, its bytes, its share of entries or of callbacks; IPD_OK when it
 * may. */
static enum ipd_err async_refusal(struct ipd_exec_pool *p, struct pool_job *pj,
                                  const struct tenant_held *h)
{
    const struct ipd_exec_job *j = pj->job;
    unsigned max_results =
        ipd_policy_share(j->share_results, IPD_EXEC_ASYNC_MAX);
    unsigned max_cb =
        ipd_policy_share(j->share_callbacks, IPD_CALLBACK_QUEUE_MAX);
    /* Synchronous entries do not count: done ones make room
     * (table_make_room), the queue bounds the others. */
    if (p->table.n - p->table.n_sync >= IPD_EXEC_ASYNC_MAX) {
        pj->table_full = true;
    } else if (p->tenant_max_bytes >= 0 && h &&
               h->bytes >= p->tenant_max_bytes) {
        pj->tenant_full = true;
        pj->tenant_held = h->bytes;
    } else if (max_results && h && h->entries >= max_results) {
        pj->share_full = "results";
        pj->share_max = max_results;
    } else if (j->callback_url && max_cb &&
               callbacks_pending(p, h, j->tenant) >= max_cb) {
        pj->share_full = "callbacks";
        pj->share_max = max_cb;
    } else {
        return IPD_OK;
    }
    pj->oldest_due_ms = oldest_due(p, j->tenant);
    return IPD_ERR_BUSY;
}

/* An asynchronous job gets its entry (status "queued"); at most
 * IPD_EXEC_ASYNC_MAX results are held, and a tenant over its bytes, its
 * share of entries or of callbacks waits until some are over. */
static enum ipd_err admit_async(void *arg)
{
    struct pool_job *pj = arg;
    struct ipd_exec_pool *p = pj->pool;
    pthread_mutex_lock(&p->lock);
    table_prune(p, ipd_mono_ms());
    struct tenant_held *h = held_find(&p->table, pj->job->tenant, false);
    enum ipd_err rc = async_refusal(p, pj, h);
    if (!rc) {
        struct exec_entry *e = table_admit(p, pj, false);
        if (pj->job->callback_url)
            e->callback = ipd_callback_status_new();
        h = held_find(&p->table, e->tenant, true);
        h->entries++;
        h->callbacks_waiting += e->callback != NULL;
    }
    pthread_mutex_unlock(&p->lock);
    return rc;
}

/* Seconds until the tenant's oldest done result expires (its share of
 * results frees then), bounded to 1 s .. 1 h; the ttl when none is done
 * yet. */
static int results_retry_after(const struct ipd_exec_pool *p,
                               const struct pool_job *pj)
{
    int64_t wait = pj->oldest_due_ms ? pj->oldest_due_ms - ipd_mono_ms()
                                     : p->result_ttl_ms;
    int64_t s = (wait + 999) / 1000;
    return s < 1 ? 1 : s > 3600 ? 3600 : (int)s;
}

/* Why a refused async job (its table or share) was refused, into why. */
static void async_why(struct ipd_exec_pool *p, struct pool_job *pj,
                      struct ipd_buf *why)
{
    if (pj->table_full) {
        ipd_buf_addf(why, "%d asynchronous results are held; retry later",
                     IPD_EXEC_ASYNC_MAX);
        pj->job->retry_after_s = results_retry_after(p, pj);
    } else if (pj->tenant_full) {
        ipd_buf_addf(why,
                     "this tenant's asynchronous results held on the server "
                     "take %lld bytes, its limit is %lld; retry when older "
                     "ones expire (after %lld s) or ask for a synchronous "
                     "execution",
                     (long long)pj->tenant_held, (long long)p->tenant_max_bytes,
                     (long long)(p->result_ttl_ms / 1000));
        pj->job->retry_after_s = results_retry_after(p, pj);
    } else if (!strcmp(pj->share_full, "results")) {
        ipd_buf_addf(why,
                     "this tenant holds %u asynchronous executions and "
                     "results, its share (policy tenant-async-results); "
                     "retry when older results expire (after %lld s) or "
                     "ask for a synchronous execution",
                     pj->share_max, (long long)(p->result_ttl_ms / 1000));
        pj->job->retry_after_s = results_retry_after(p, pj);
    } else {
        ipd_buf_addf(why,
                     "this tenant has %u callbacks not yet delivered, its "
                     "share (policy tenant-callbacks); retry later",
                     pj->share_max);
        pj->job->retry_after_s = IPD_CALLBACK_TIMEOUT_MS / 1000;
    }
}

/* Queue pj under its tenant's share of the slots and the queue; on a
 * refusal free it and say why. */
static enum ipd_err submit(struct ipd_exec_pool *p, struct pool_job *pj,
                           struct ipd_buf *why)
{
    /* Every job has its live channel: how a cancel reaches it. */
    if (!pj->job->live && !(pj->job->live = ipd_live_new())) {
        ipd_buf_adds(why, "the server is out of file descriptors; retry");
        pj->job->retry_after_s = 1;
        free(pj);
        return IPD_ERR_UNAVAILABLE;
    }
    unsigned slots = ipd_workq_threads(p->q);
    unsigned queue = ipd_workq_queue_max(p->q);
    unsigned run = ipd_policy_share(pj->job->share_running, slots);
    unsigned wait = ipd_policy_share(pj->job->share_queued, queue);
    struct ipd_workq_share share = {
        .group = pj->job->tenant,
        .running_max = run,
        .held_max = wait ? (run ? run : slots) + wait : 0,
    };
    bool share_full = false;
    enum ipd_err rc = ipd_workq_submit_shared(
        p->q, exec_work, exec_done, pj, pj->async ? admit_async : admit_sync,
        &share, &share_full);
    if (rc == IPD_OK)
        return rc;
    pj->job->retry_after_s = 1;
    if (rc == IPD_ERR_UNAVAILABLE) {
        ipd_buf_adds(why, "the service is shutting down");
    } else if (share_full) {
        ipd_buf_addf(why,
                     "this tenant has %u executions running or waiting, "
                     "its share of the %u slots and %u queue places "
                     "(policy tenant-running %u, tenant-queued %u); retry "
                     "later",
                     share.held_max, slots, queue, run, wait);
    } else if (pj->table_full || pj->tenant_full || pj->share_full) {
        async_why(p, pj, why);
    } else {
        unsigned running, queued;
        ipd_workq_counts(p->q, &running, &queued);
        ipd_buf_addf(why,
                     "all %u execution slots are busy and %u requests are "
                     "waiting; retry later",
                     slots, queued);
    }
    free(pj);
    return rc;
}

enum ipd_err ipd_exec_pool_submit(struct ipd_exec_pool *p,
                                  struct ipd_exec_job *j,
                                  ipd_exec_admit_fn admit,
                                  ipd_exec_done_fn done, void *ctx,
                                  struct ipd_buf *why)
{
    struct pool_job *pj = ipd_xcalloc(1, sizeof(*pj));
    IPD_ASSERT(done);
    pj->pool = p;
    pj->job = j;
    pj->admit = admit;
    pj->done = done;
    pj->ctx = ctx;
    /* Its id from the start, in the table and in the caller's answer;
     * the executor runs it under that id. */
    ipd__exec_id(NULL, j->exec_id);
    return submit(p, pj, why);
}

enum ipd_err ipd_exec_pool_submit_async(struct ipd_exec_pool *p,
                                        struct ipd_exec_job *j,
                                        char id[IPD_ID_MAX],
                                        struct ipd_buf *why)
{
    /* Its result is kept on the data dir's disk: not while the delete
     * reserve is out (storage/space.h), so results cannot eat the room
     * deletes need.  The caller still owns j. */
    if (ipd_space_check_write(p->space))
        return IPD_ERR_NO_SPACE;
    struct pool_job *pj = ipd_xcalloc(1, sizeof(*pj));
    pj->pool = p;
    pj->job = j;
    pj->async = true;
    /* The job is the worker's once queued (it may be over and freed
     * before submit returns): its id is copied out first. */
    ipd__exec_id(NULL, j->exec_id);
    memcpy(id, j->exec_id, IPD_ID_MAX);
    return submit(p, pj, why);
}

enum ipd_err ipd_exec_pool_submit_live(struct ipd_exec_pool *p,
                                       struct ipd_exec_job *j, bool detach,
                                       char id[IPD_ID_MAX], struct ipd_buf *why)
{
    if (detach && ipd_space_check_write(p->space))
        return IPD_ERR_NO_SPACE;
    struct pool_job *pj = ipd_xcalloc(1, sizeof(*pj));
    pj->pool = p;
    pj->job = j;
    pj->async = detach;
    pj->owned = !detach;
    ipd__exec_id(NULL, j->exec_id);
    memcpy(id, j->exec_id, IPD_ID_MAX);
    return submit(p, pj, why);
}

/* workq's match: the waiting job whose live channel is ctx. */
static bool job_of_live(void *arg, void *ctx)
{
    return ((struct pool_job *)arg)->job->live == ctx;
}

enum ipd_err ipd_exec_pool_cancel(struct ipd_exec_pool *p, const char *id,
                                  const char *tenant, const char *user_id)
{
    pthread_mutex_lock(&p->lock);
    table_prune(p, ipd_mono_ms());
    struct exec_entry *e = table_find(&p->table, id);
    if (!e || e->over || strcmp(e->tenant, tenant) ||
        strcmp(e->user_id, user_id)) {
        pthread_mutex_unlock(&p->lock);
        return IPD_ERR_NOT_FOUND;
    }
    /* The reference keeps the channel (the identity withdraw matches)
     * alive whatever the job does meanwhile. */
    struct ipd_live *live = ipd_live_ref(e->live);
    bool queued = e->pj != NULL;
    pthread_mutex_unlock(&p->lock);
    /* First the flag: a worker that takes the job from here on does not
     * run it (exec_work), and a running one is killed by its
     * supervisor. */
    ipd_live_cancel(live);
    struct pool_job *pj =
        queued ? ipd_workq_withdraw(p->q, job_of_live, live) : NULL;
    if (pj) {
        pj->job->result = cancelled_result(pj->job);
        exec_done(pj);
    }
    ipd_live_unref(live);
    return IPD_OK;
}

/* The live channel's answer, as the pool tells it. */
static enum ipd_exec_answer answer_of(enum ipd_live_call rc)
{
    switch (rc) {
    case IPD_LIVE_CALL_OK: return IPD_EXEC_ANSWER_OK;
    case IPD_LIVE_CALL_TWICE: return IPD_EXEC_ANSWER_TWICE;
    case IPD_LIVE_CALL_GONE: return IPD_EXEC_ANSWER_GONE;
    default: /* unknown; the others are open's answers */
        return IPD_EXEC_ANSWER_NO_CALL;
    }
}

enum ipd_exec_answer ipd_exec_pool_answer(struct ipd_exec_pool *p,
                                          const char *id, const char *tenant,
                                          const char *user_id,
                                          const char *call_id, const char *json,
                                          size_t len, size_t *max_bytes)
{
    struct ipd_live_call_limits lim;
    enum ipd_exec_answer rc = IPD_EXEC_ANSWER_OK;
    pthread_mutex_lock(&p->lock);
    table_prune(p, ipd_mono_ms());
    struct exec_entry *e = table_find(&p->table, id);
    if (!e || strcmp(e->tenant, tenant) || strcmp(e->user_id, user_id)) {
        pthread_mutex_unlock(&p->lock);
        return IPD_EXEC_ANSWER_NO_EXEC;
    }
    /* Once over, the entry holds no channel (entry_done dropped it): its
     * calls were closed with the run. */
    if (e->over) {
        pthread_mutex_unlock(&p->lock);
        return IPD_EXEC_ANSWER_OVER;
    }
    /* As for a cancel: the reference keeps the channel whatever the job
     * does meanwhile; a run that ends from here on has closed its calls
     * (the answer: GONE). */
    struct ipd_live *live = ipd_live_ref(e->live);
    pthread_mutex_unlock(&p->lock);
    if (!ipd_live_calls_limits(live, &lim))
        rc = IPD_EXEC_ANSWER_NO_CALL; /* calls are off: there is none */
    else if (len > lim.max_bytes)
        rc = IPD_EXEC_ANSWER_TOO_LARGE;
    else
        rc = answer_of(ipd_live_call_answer(live, call_id, json, len));
    if (rc == IPD_EXEC_ANSWER_TOO_LARGE && max_bytes)
        *max_bytes = lim.max_bytes;
    ipd_live_unref(live);
    return rc;
}

void ipd_exec_reply_init(struct ipd_exec_reply *r)
{
    ipd_buf_init(&r->head, IPD_BUF_UNLIMITED);
    ipd_buf_init(&r->tail, IPD_BUF_UNLIMITED);
    r->fd = -1;
    r->len = 0;
}

void ipd_exec_reply_release(struct ipd_exec_reply *r)
{
    ipd_buf_release(&r->head);
    ipd_buf_release(&r->tail);
    if (r->fd >= 0)
        close(r->fd);
    r->fd = -1;
}

/* {"execution_id": .., "status": .., "result": into b. */
static void reply_head(struct ipd_buf *b, const struct exec_entry *e)
{
    ipd_buf_adds(b, "{\"execution_id\":");
    ipd_jw_str(b, e->id);
    ipd_buf_adds(b, ",\"status\":");
    ipd_jw_str(b, e->status);
    ipd_buf_adds(b, ",\"result\":");
}

enum ipd_err ipd_exec_pool_lookup(struct ipd_exec_pool *p, const char *id,
                                  const char *tenant, const char *user_id,
                                  struct ipd_exec_reply *out)
{
    enum ipd_err rc = IPD_OK;
    json_t *cb = NULL;
    pthread_mutex_lock(&p->lock);
    table_prune(p, ipd_mono_ms());
    struct exec_entry *e = table_find(&p->table, id);
    if (!e || strcmp(e->tenant, tenant) || strcmp(e->user_id, user_id)) {
        rc = IPD_ERR_NOT_FOUND;
        goto out;
    }
    reply_head(&out->head, e);
    /* Opened under the lock, so the pruner cannot remove it between
     * here and there; the reply reads the open file after.  A
     * synchronous result went to its caller: none is kept. */
    if (!e->over || e->sync)
        ipd_buf_adds(&out->head, "null");
    else if (e->fallback)
        ipd_buf_adds(&out->head, e->fallback);
    else
        rc = ipd_results_open_file(p->results, e->id, &out->fd, &out->len);
    if (e->callback)
        cb = ipd_callback_status_json(e->callback);
out:
    pthread_mutex_unlock(&p->lock);
    if (!rc && cb) {
        char *text = json_dumps(cb, JSON_COMPACT | JSON_ENSURE_ASCII);
        IPD_ASSERT(text);
        ipd_buf_adds(&out->tail, ",\"callback\":");
        ipd_buf_adds(&out->tail, text);
        free(text);
    }
    if (!rc)
        ipd_buf_adds(&out->tail, "}");
    json_decref(cb);
    return rc;
}

void ipd_exec_list_release(struct ipd_exec_list *l)
{
    free(l->items);
    l->items = NULL;
    l->n = 0;
    l->more = false;
}

/* Newest first: created_at_ms, then id, both descending. */
static int summary_cmp(const void *a, const void *b)
{
    const struct ipd_exec_summary *x = a, *y = b;
    if (x->created_at_ms != y->created_at_ms)
        return x->created_at_ms < y->created_at_ms ? 1 : -1;
    return -strcmp(x->id, y->id);
}

/* e is strictly older than the cursor c in the newest-first order. */
static bool after_cursor(const struct exec_entry *e, const struct ipd_cursor *c)
{
    return !c || e->created_ms < c->created_at_ms ||
           (e->created_ms == c->created_at_ms && strcmp(e->id, c->id) < 0);
}

static void summary_of(const struct exec_entry *e, struct ipd_exec_summary *s)
{
    memcpy(s->id, e->id, sizeof(s->id));
    memcpy(s->session_id, e->session_id, sizeof(s->session_id));
    s->status = e->status;
    s->created_at_ms = e->created_ms;
    s->duration_ms = -1;
    if (e->over)
        s->duration_ms = e->started_ms ? e->done_ms - e->started_ms : 0;
}

void ipd_exec_pool_list(struct ipd_exec_pool *p, const char *tenant,
                        const char *user_id, const struct ipd_cursor *after,
                        size_t limit, struct ipd_exec_list *out)
{
    size_t cap = 0;
    memset(out, 0, sizeof(*out));
    pthread_mutex_lock(&p->lock);
    table_prune(p, ipd_mono_ms());
    /* Every entry of the node is looked at (IPD_EXEC_ASYNC_MAX and the
     * queue bound them); the caller's are copied and sorted outside the
     * lock: the admission order is not the wall clock's if it stepped. */
    for (struct exec_entry *e = p->table.all_head; e; e = e->all_next) {
        if (strcmp(e->tenant, tenant) || strcmp(e->user_id, user_id) ||
            !after_cursor(e, after))
            continue;
        if (out->n == cap) {
            cap = cap ? cap * 2 : 16;
            out->items = ipd_xrealloc(out->items, cap * sizeof(*out->items));
        }
        summary_of(e, &out->items[out->n++]);
    }
    pthread_mutex_unlock(&p->lock);
    if (out->n)
        qsort(out->items, out->n, sizeof(*out->items), summary_cmp);
    out->more = out->n > limit;
    if (out->more)
        out->n = limit;
}

/* ---- the pool ---------------------------------------------------------- */

enum ipd_err ipd_exec_pool_new(struct ipd_executor *ex,
                               const struct ipd_exec_pool_options *o,
                               struct ipd_exec_pool **out)
{
    struct ipd_exec_pool *p = ipd_xcalloc(1, sizeof(*p));
    pthread_condattr_t ca;
    p->ex = ex;
    p->metrics = o->metrics;
    p->callbacks = o->callbacks;
    p->result_ttl_ms = o->result_ttl_ms > 0 ? o->result_ttl_ms : 3600000;
    p->tenant_max_bytes = o->tenant_results_max_bytes;
    p->space = o->space;
    pthread_mutex_init(&p->lock, NULL);
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&p->prune_wake, &ca);
    pthread_condattr_destroy(&ca);
    table_init(&p->table);
    if (ipd_results_open(o->data_dir, &p->results) ||
        pthread_create(&p->pruner, NULL, pruner_main, p)) {
        ipd_exec_pool_free(p);
        *out = NULL;
        return IPD_ERR_INTERNAL;
    }
    p->pruner_started = true;
    if (ipd_workq_new(o->slots, o->queue, &p->q)) {
        ipd_exec_pool_free(p);
        *out = NULL;
        return IPD_ERR_INTERNAL;
    }
    *out = p;
    return IPD_OK;
}

void ipd_exec_pool_stop(struct ipd_exec_pool *p)
{
    if (p)
        ipd_workq_stop(p->q);
}

void ipd_exec_pool_free(struct ipd_exec_pool *p)
{
    if (!p)
        return;
    /* Queued jobs are refused (the queue hands them over stopping),
     * running ones finish: their time is bounded by the policy's
     * timeout. */
    ipd_workq_free(p->q);
    if (p->pruner_started) {
        pthread_mutex_lock(&p->lock);
        p->pruner_stop = true;
        pthread_cond_broadcast(&p->prune_wake);
        pthread_mutex_unlock(&p->lock);
        pthread_join(p->pruner, NULL);
    }
    table_release(&p->table);
    ipd_results_free(p->results);
    pthread_cond_destroy(&p->prune_wake);
    pthread_mutex_destroy(&p->lock);
    free(p);
}

json_t *ipd_exec_pool_stats(struct ipd_exec_pool *p)
{
    unsigned running, queued;
    if (!p)
        return json_null();
    ipd_workq_counts(p->q, &running, &queued);
    pthread_mutex_lock(&p->lock);
    json_t *j = json_pack(
        "{s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:{s:I, s:I, "
        "s:I}}",
        "slots", (json_int_t)ipd_workq_threads(p->q), "queue",
        (json_int_t)ipd_workq_queue_max(p->q), "running", (json_int_t)running,
        "queued", (json_int_t)queued, "total", (json_int_t)p->n_total,
        "success", (json_int_t)p->n_success, "error", (json_int_t)p->n_error,
        "timeout", (json_int_t)p->n_timeout, "oom", (json_int_t)p->n_oom,
        "failed_to_start", (json_int_t)p->n_failed, "async_results", "held",
        (json_int_t)p->table.n_done, "bytes", (json_int_t)p->table.bytes,
        "tenant_max_bytes", (json_int_t)p->tenant_max_bytes);
    pthread_mutex_unlock(&p->lock);
    return j;
}

void ipd_exec_pool_counts(struct ipd_exec_pool *p, unsigned *running,
                          unsigned *queued)
{
    ipd_workq_counts(p->q, running, queued);
}
