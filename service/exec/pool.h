/*
 * pool.h - the execution workers, the asynchronous results and their
 * callbacks.
 *
 * Executions never run on the HTTP event threads: `slots` long-lived
 * worker threads (service/common/workq.h) run them through the executor,
 * and at most `queue` more wait; beyond that submit refuses with
 * IPD_ERR_BUSY.  The pool knows nothing of HTTP: whoever waits for a
 * synchronous job (a suspended connection) is told through its admit and
 * done hooks, the way workq's own hooks work.
 *
 * Every job has its execution id from submit on and an entry in the
 * pool's execution table, looked up by that id: "queued", "running",
 * then "done", kept result_ttl after it is done and removed when that
 * passes (ipd_exec_pool_list lists a caller's; in memory, per node).  An
 * asynchronous job's entry holds its result (at most IPD_EXEC_ASYNC_MAX
 * such entries at once); a synchronous job's result goes to its caller
 * and its entry holds none: when the table is full, the oldest done
 * synchronous entry makes room, and no tenant bound below counts them.
 * An asynchronous result is a file (result_store.h), never held in
 * memory: an entry is a few hundred bytes whatever its result's inline
 * files weigh.  A tenant's done results count against
 * tenant_results_max_bytes; once they reach it, that tenant's
 * asynchronous submits are refused
 * (IPD_ERR_BUSY, 429) until some expire, while other tenants go on; the
 * same for the number of its entries (the job's share_results) and of
 * its callbacks not yet delivered (share_callbacks).  Each tenant also
 * has a share of the slots and of the queue (share_running,
 * share_queued: workq.h's shares), so one tenant's backlog never keeps
 * another's executions waiting for all of it.  The
 * result is stored before the callback to its callback_url is sent
 * (service/exec/callbacks.h, which reads the body from the file), so a
 * client that polls as soon as it is called back finds it.
 *
 * Thread-safety: every function may be called from any thread.
 */
#ifndef IPD_EXEC_POOL_H
#define IPD_EXEC_POOL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "../../storage/meta.h"
#include "../common/buf.h"
#include "../common/crypto.h"
#include "../common/ipd.h"
#include "../common/util.h"
#include "policy.h"

#define IPD_EXEC_ASYNC_MAX 10000 /* asynchronous results held at once */

struct ipd_exec_pool;
struct ipd_executor;
struct ipd_metrics;
struct ipd_callbacks;
struct ipd_space;
struct ipd_live;

struct ipd_exec_pool_options {
    unsigned slots;                   /* worker threads (0: 1) */
    unsigned queue;                   /* waiting jobs beyond the slots */
    struct ipd_metrics *metrics;      /* borrowed, may be NULL */
    int64_t result_ttl_ms;            /* async results kept (0: 1 h) */
    struct ipd_callbacks *callbacks;  /* borrowed; NULL: no callbacks sent */
    const char *data_dir;             /* borrowed; results live in
                                         <data_dir>/results (required) */
    int64_t tenant_results_max_bytes; /* done async results' bytes per
                                         tenant; < 0: no bound */
    struct ipd_space *space;          /* borrowed; NULL: no delete reserve.
                                         While it is out, asynchronous
                                         submissions are refused
                                         (IPD_ERR_NO_SPACE): their results
                                         are kept on the data dir's disk */
};

/* One execution: what to run (ipd_executor_run's request, owned here)
 * and, for a synchronous job, what came of it. */
struct ipd_exec_job {
    char tenant[IPD_TENANT_MAX];
    char user_id[IPD_USER_ID_MAX];
    char *code; /* owned */
    size_t code_len;
    char **file_ids; /* owned array of owned strings */
    size_t n_files;
    int64_t timeout_ms; /* 0: the policy's */
    char policy[IPD_POLICY_MAX];
    json_t *variables; /* new reference or NULL */
    char **packages;   /* owned array of owned strings */
    size_t n_packages;
    json_t *functions; /* new reference or NULL: "functions", the names
                          the code may call its client by (strings) */
    size_t n_functions;
    bool admin;                  /* the caller's key is an admin key */
    bool store_outputs;          /* false: generated files come back
                                    inline only (ipd_exec_job_new:
                                    true) */
    char session_id[IPD_ID_MAX]; /* run in this session, or "" */
    bool stream;                 /* "stream": true (the handler also
                                    streams for Accept:
                                    text/event-stream) */
    bool detach;                 /* "detach": true: a streamed run goes on
                                    without its client */
    char *callback_url;          /* owned, or NULL (async only); the
                                    callback sender signs with the
                                    tenant's secrets: no job holds
                                    them */
    /* The tenant's shares from its key's policy (policy.h: a count, -N
     * for N percent of the pool, 0 for no bound): ipd_exec_job_new
     * leaves them 0. */
    int64_t share_running, share_queued, share_results, share_callbacks;
    struct ipd_live *live;    /* owned reference, or NULL (the pool
                                 makes one): its cancel; a streamed
                                 job's caller attaches its consumer
                                 first (ipd_exec_pool_submit_live) */
    char exec_id[IPD_ID_MAX]; /* OUT: set by either submit */
    enum ipd_err rc;          /* OUT: the executor's answer */
    json_t *result;           /* OUT: new reference when rc == OK */
    struct ipd_buf detail;    /* OUT: a message for rc, or empty */
    bool finished;            /* OUT: set before done runs */
    int retry_after_s;        /* OUT: with a refusal (BUSY), when
                                 to ask again */
};

/* j as the executor's request (its strings borrowed from j; slot 0). */
struct ipd_exec_request;
void ipd_exec_job_request(const struct ipd_exec_job *j,
                          struct ipd_exec_request *out);
/* A new empty job (detail initialised): ipd_exec_job_free. */
struct ipd_exec_job *ipd_exec_job_new(void);
void ipd_exec_job_free(struct ipd_exec_job *j); /* NULL is fine */

/* Start the workers.  Borrows ex (it must outlive the pool).  *out is
 * new: ipd_exec_pool_free. */
enum ipd_err ipd_exec_pool_new(struct ipd_executor *ex,
                               const struct ipd_exec_pool_options *o,
                               struct ipd_exec_pool **out);
/* Stop taking work (later submits: IPD_ERR_UNAVAILABLE), hand every
 * queued job over at once as refused (rc IPD_ERR_UNAVAILABLE, "the
 * service is shutting down"; a synchronous one's done runs), wait for the
 * running ones, join the workers.  Call while the HTTP daemon still runs
 * (the done hooks resume suspended connections); the pool stays valid for
 * handlers until ipd_exec_pool_free, after the daemon stopped.
 * Idempotent; NULL is fine. */
void ipd_exec_pool_stop(struct ipd_exec_pool *p);
void ipd_exec_pool_free(struct ipd_exec_pool *p); /* stops first; NULL ok */

/* Called under the queue's lock once the job has room, before any worker
 * can see it (suspend the connection): done can never come first. */
typedef void (*ipd_exec_admit_fn)(void *ctx);
/* Called on the worker once the job no longer counts as running (so whoever
 * then asks for the counts does not see it), after j->finished was set:
 * j's rc, result and detail are final (resume the connection). */
typedef void (*ipd_exec_done_fn)(void *ctx);

/*
 * Queue a synchronous job under a new execution id (j->exec_id, set
 * whatever the answer), with its entry in the table ("queued"); the
 * executor runs it under that id.  IPD_OK: queued; j stays the caller's
 * but the pool uses it until done(ctx) has run (admit(ctx) first, exactly once
 * each; admit may be NULL).  Otherwise nothing was queued, neither hook
 * runs, and why says why: IPD_ERR_BUSY (every slot busy and the queue
 * full, or j's tenant holds its share of them; j->retry_after_s set),
 * IPD_ERR_UNAVAILABLE (stopping).
 */
enum ipd_err ipd_exec_pool_submit(struct ipd_exec_pool *p,
                                  struct ipd_exec_job *j,
                                  ipd_exec_admit_fn admit,
                                  ipd_exec_done_fn done, void *ctx,
                                  struct ipd_buf *why);
/*
 * Queue an asynchronous job under a new execution id (copied to id and
 * j->exec_id), with its entry in the result table ("queued").  IPD_OK:
 * the job is the pool's (it may be over and freed before this returns).
 * Otherwise j is still the caller's and why says why: IPD_ERR_BUSY (the
 * queue is full, IPD_EXEC_ASYNC_MAX results are held, or j's tenant holds
 * its share of the queue, tenant_results_max_bytes of results, its share
 * of results or of callbacks; j->retry_after_s set), IPD_ERR_UNAVAILABLE
 * (stopping), IPD_ERR_NO_SPACE (the delete reserve is out: why empty).
 */
enum ipd_err ipd_exec_pool_submit_async(struct ipd_exec_pool *p,
                                        struct ipd_exec_job *j,
                                        char id[IPD_ID_MAX],
                                        struct ipd_buf *why);
/*
 * Queue a streamed job (j->live made by the caller, its consumer
 * attached: service/common/live.h) under a new execution id (copied to
 * id).  IPD_OK: the job is the pool's; what comes of it reaches the
 * caller through j->live only: its output and other events, then the
 * result event (a failure result when it failed; the caller checked it
 * first: ipd_executor_precheck).  detach: admitted and kept as an
 * asynchronous job is
 * (ipd_exec_pool_submit_async: its bounds, its result stored, its
 * callback), so it goes on when the client leaves; else as a synchronous
 * one.  Otherwise j is still the caller's; the answers are submit's and
 * submit_async's.
 */
enum ipd_err ipd_exec_pool_submit_live(struct ipd_exec_pool *p,
                                       struct ipd_exec_job *j, bool detach,
                                       char id[IPD_ID_MAX],
                                       struct ipd_buf *why);
/*
 * Cancel the execution id of tenant's user: a queued one is taken off the
 * queue and over at once; a running one is killed by its supervisor (a
 * session call interrupted first), its result written once its processes
 * are gone.  Its result has "cancelled": true, error.type "Cancelled";
 * its status turns "cancelled".  IPD_ERR_NOT_FOUND when there is none
 * (never was, someone else's, expired) or it is over already.
 */
enum ipd_err ipd_exec_pool_cancel(struct ipd_exec_pool *p, const char *id,
                                  const char *tenant, const char *user_id);

/* IPD_EXEC_ANSWER_BODY_MAX: policy.h. */

/* What came of handing a client's answer to a call of its execution. */
enum ipd_exec_answer {
    IPD_EXEC_ANSWER_OK,        /* handed to the run */
    IPD_EXEC_ANSWER_NO_EXEC,   /* no such execution of tenant's user (never
                                  was, someone else's, expired) */
    IPD_EXEC_ANSWER_OVER,      /* the execution is over (done, cancelled):
                                  its calls are over too */
    IPD_EXEC_ANSWER_NO_CALL,   /* the execution has no such call (none yet,
                                  another run's, or calls are off) */
    IPD_EXEC_ANSWER_TWICE,     /* the call was answered already */
    IPD_EXEC_ANSWER_GONE,      /* the call is over unanswered: it timed out,
                                  or its client went away */
    IPD_EXEC_ANSWER_TOO_LARGE, /* json is over the run's max_bytes */
};

/*
 * Hand the answer json (JSON text of len bytes, checked by the caller:
 * {"result": ...} or {"error": {"type", "message"}}, on one line;
 * copied) to the call call_id of the execution id of tenant's user, which
 * wakes the run (live.h: ipd_live_call_answer).  Scoped as
 * ipd_exec_pool_cancel is: another user's or tenant's execution is
 * IPD_EXEC_ANSWER_NO_EXEC.  [out] *max_bytes (may be NULL): the run's
 * bound on an answer, set with IPD_EXEC_ANSWER_TOO_LARGE.
 */
enum ipd_exec_answer ipd_exec_pool_answer(struct ipd_exec_pool *p,
                                          const char *id, const char *tenant,
                                          const char *user_id,
                                          const char *call_id, const char *json,
                                          size_t len, size_t *max_bytes);

/* A lookup's answer, JSON text in three parts: head, then the len bytes
 * of the result file fd (when fd >= 0), then tail.  Streamed to the
 * client from the file, so a large result is never copied into memory. */
struct ipd_exec_reply {
    struct ipd_buf head;
    int fd;      /* owned: the result file, or -1 */
    int64_t len; /* its size */
    struct ipd_buf tail;
};
void ipd_exec_reply_init(struct ipd_exec_reply *r);
void ipd_exec_reply_release(struct ipd_exec_reply *r); /* closes fd */

/* The execution id of tenant's user: {execution_id, status, result
 * (when an asynchronous one is done, else null: a synchronous result went
 * to its caller), callback (with a callback_url: the delivery's outcome,
 * callbacks.h)} into out (initialised by the caller).  IPD_ERR_NOT_FOUND
 * when there is none (never was, someone else's, or it expired);
 * IPD_ERR_IO when its file cannot be read. */
enum ipd_err ipd_exec_pool_lookup(struct ipd_exec_pool *p, const char *id,
                                  const char *tenant, const char *user_id,
                                  struct ipd_exec_reply *out);

/* One execution of a list (ipd_exec_pool_list). */
struct ipd_exec_summary {
    char id[IPD_ID_MAX];
    const char *status;          /* static: "queued", "running", "done",
                                    "cancelled" */
    int64_t created_at_ms;       /* wall clock, at admission */
    char session_id[IPD_ID_MAX]; /* its session, or "" */
    int64_t duration_ms;         /* from its start to its end once done
                                    (0: it never started); -1 before */
};

/* A page of executions.  ipd_exec_list_release frees items. */
struct ipd_exec_list {
    struct ipd_exec_summary *items; /* owned array of n */
    size_t n;
    bool more; /* another page follows the last item */
};
void ipd_exec_list_release(struct ipd_exec_list *l);

/* Up to limit executions of tenant's user in the table (queued, running,
 * or done within result_ttl; this node's only), newest first
 * (created_at_ms, then id, descending), strictly older than *after
 * (storage/meta.h's cursor with an execution id; NULL: from the newest),
 * into out (release it). */
void ipd_exec_pool_list(struct ipd_exec_pool *p, const char *tenant,
                        const char *user_id, const struct ipd_cursor *after,
                        size_t limit, struct ipd_exec_list *out);

/* Running and queued executions (status, metrics). */
void ipd_exec_pool_counts(struct ipd_exec_pool *p, unsigned *running,
                          unsigned *queued);
/* {slots, queue, running, queued, total, success, error, timeout, oom,
 * failed_to_start, async_results: {held, bytes, tenant_max_bytes}}: the
 * admin status's execution counters.  New reference (null for NULL). */
json_t *ipd_exec_pool_stats(struct ipd_exec_pool *p);

/* The error.type of an asynchronous result whose execution did not run
 * (the executor's or the pool's err): "NotFound", "InvalidRequest" or
 * "ServiceError" (CONTRACT.md, Asynchronous executions).  Static. */
const char *ipd_exec_error_type(enum ipd_err err);

#endif
