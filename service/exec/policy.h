/*
 * policy.h - an execution policy's limits (CONTRACT.md Executions: the API
 * key names one, default "standard"; a request may only tighten it).
 * Built in: strict, standard, networked.  The config file and flags change
 * them or add more with `policy.<name>.<field> = value` (fields: timeout,
 * max-timeout, memory, processes, output-limit, tmp-size, output-dir-size,
 * network, cpus; service/config.c); a new policy starts from standard's
 * values.  One definition for the config that reads them and the executor
 * that applies them.
 */
#ifndef IPD_EXEC_POLICY_H
#define IPD_EXEC_POLICY_H

#include <stdbool.h>
#include <stdint.h>

#define IPD_EXEC_POLICY_NAME_MAX 32 /* with the NUL; [a-z0-9_-]{1,31} */
#define IPD_EXEC_POLICIES_MAX 16

struct ipd_exec_policy {
    char name[IPD_EXEC_POLICY_NAME_MAX];
    int64_t timeout_ms;         /* wall timeout when the request gives none */
    int64_t max_timeout_ms;     /* a request can only ask for less */
    int64_t memory_bytes;       /* cgroup memory limit of the tree */
    int64_t max_processes;      /* cgroup pids limit of the tree */
    int64_t output_bytes;       /* stdout and stderr, each */
    int64_t tmp_bytes;          /* /tmp tmpfs */
    int64_t output_dir_bytes;   /* /mnt/output tmpfs */
    bool network;               /* host network and sockets */
    int64_t cpu_millis;         /* CPU share, 1000 = one core (0: one) */
};

#endif
