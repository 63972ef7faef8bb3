/*
 * policy.h - an execution policy's limits (CONTRACT.md Executions: the API
 * key names one, default "standard"; a request may only tighten it).
 * Built in: strict, standard, networked.  The config file and flags change
 * them or add more with `policy.<name>.<field> = value` (fields: timeout,
 * max-timeout, memory, processes, output-limit, tmp-size, output-dir-size,
 * network, cpus, call-size, calls, calls-in-flight, call-timeout,
 * max-call-wait, and the tenant's shares of the shared pools below;
 * service/config.c); a new policy starts from standard's values.  One
 * definition for the config that reads them and the executor that
 * applies them.
 *
 * Shares (issue 13, fairness between tenants): what one tenant may hold
 * of a pool every tenant shares, taken from the policy of the key that
 * asks; beyond it that tenant gets 429 with Retry-After while others go
 * on.  A share is a count ("8"), a percentage of the pool's capacity
 * ("50%", stored negated: -50; at least 1), or 0 for no bound but the
 * pool's own.  The sessions' memory share is a size ("4G") or a
 * percentage of sessions-memory, the node's budget (issue 20).
 */
#ifndef IPD_EXEC_POLICY_H
#define IPD_EXEC_POLICY_H

#include <stdbool.h>
#include <stdint.h>

#define IPD_EXEC_POLICY_NAME_MAX 32 /* with the NUL; [a-z0-9_-]{1,31} */
#define IPD_EXEC_POLICIES_MAX 16
/* The largest answer to a call (POST /v1/executions/{id}/calls/{call_id})
 * the API reads, bytes of its body: a policy's call-size (an answer's
 * bound) is at most this (service/config.c). */
#define IPD_EXEC_ANSWER_BODY_MAX (8 * 1024 * 1024)

struct ipd_exec_policy {
    char name[IPD_EXEC_POLICY_NAME_MAX];
    int64_t timeout_ms;       /* wall timeout when the request gives none */
    int64_t max_timeout_ms;   /* a request can only ask for less */
    int64_t memory_bytes;     /* cgroup memory limit of the tree */
    int64_t max_processes;    /* cgroup pids limit of the tree */
    int64_t output_bytes;     /* stdout and stderr, each */
    int64_t tmp_bytes;        /* /tmp tmpfs */
    int64_t output_dir_bytes; /* /mnt/output tmpfs */
    bool network;             /* host network and sockets */
    int64_t cpu_millis;       /* CPU share, 1000 = one core (0: one) */
    /* Calls from a streamed run's code to its client (docs/API.md). */
    int64_t call_bytes;       /* a call's arguments, an answer */
    int64_t calls;            /* calls in one run */
    int64_t calls_in_flight;  /* calls waiting for answers at once */
    int64_t call_timeout_ms;  /* one call's wait: then TimeoutError */
    int64_t max_call_wait_ms; /* the run's clock is paused while calls
                                 wait, this long at most in all */
    /* The tenant's shares (see above; ipd_policy_share). */
    int64_t tenant_running;        /* executions running: of exec-slots */
    int64_t tenant_queued;         /* executions waiting: of exec-queue */
    int64_t tenant_results;        /* asynchronous results held (queued,
                                      running or done): of the table */
    int64_t tenant_fetches;        /* URL ingests running or waiting */
    int64_t tenant_callbacks;      /* callbacks not yet delivered or failed */
    int64_t tenant_installs;       /* package installs running or waiting */
    int64_t tenant_sessions;       /* live sessions: of max-sessions */
    int64_t tenant_session_memory; /* bytes the tenant's live sessions are
                                      charged (each its policy's memory):
                                      of sessions-memory */
};

/* A share v of a pool of capacity: a count, capacity * percent / 100
 * (at least 1), or 0 (no bound). */
static inline unsigned ipd_policy_share(int64_t v, unsigned capacity)
{
    if (v >= 0)
        return v > 0xFFFFFF ? 0xFFFFFF : (unsigned)v;
    unsigned n = (unsigned)(((uint64_t)capacity * (uint64_t)-v) / 100);
    return n ? n : 1;
}

/* A byte share v of a budget: bytes, budget * percent / 100 (at least
 * 1), or 0 (no bound); a percentage of no budget (0) is no bound. */
static inline int64_t ipd_policy_share_bytes(int64_t v, int64_t budget)
{
    if (v >= 0)
        return v;
    if (budget <= 0)
        return 0;
    int64_t n = budget / 100 * -v + budget % 100 * -v / 100;
    return n ? n : 1;
}

/* True when a is nowhere more permissive than b (a request may only
 * tighten the policy of its key); false when either is NULL. */
static inline bool ipd_policy_within(const struct ipd_exec_policy *a,
                                     const struct ipd_exec_policy *b)
{
    return a && b && a->max_timeout_ms <= b->max_timeout_ms &&
           a->timeout_ms <= b->timeout_ms &&
           a->memory_bytes <= b->memory_bytes &&
           a->max_processes <= b->max_processes &&
           a->output_bytes <= b->output_bytes && a->tmp_bytes <= b->tmp_bytes &&
           a->output_dir_bytes <= b->output_dir_bytes &&
           a->cpu_millis <= b->cpu_millis && a->call_bytes <= b->call_bytes &&
           a->calls <= b->calls && a->calls_in_flight <= b->calls_in_flight &&
           a->call_timeout_ms <= b->call_timeout_ms &&
           a->max_call_wait_ms <= b->max_call_wait_ms &&
           (!a->network || b->network);
}

#endif
