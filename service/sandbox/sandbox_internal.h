/*
 * sandbox_internal.h - what the files of service/sandbox/ share.
 *
 * Private to the sandbox library: nothing outside service/sandbox/
 * includes it (tests aside); the rest of the program uses sandbox.h.
 */
#ifndef IPD_SANDBOX_INTERNAL_H
#define IPD_SANDBOX_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sandbox.h"

/* The seccomp filter as raw BPF (seccomp.c). */
struct ipd__sandbox_bpf {
    void *filter; /* struct sock_filter[len], owned */
    unsigned short len;
};
/* Compile the filter for network on/off once; IPD_ERR_INTERNAL on
 * failure with a reason in err. */
enum ipd_err ipd__sandbox_seccomp_compile(bool network,
                                          struct ipd__sandbox_bpf *out,
                                          char *err, size_t errlen);
void ipd__sandbox_bpf_release(struct ipd__sandbox_bpf *b);

/* cgroups (cgroup.c) */
struct ipd__cgroups;       /* parents found at probe */
struct ipd__cgroup_run {   /* one run's cgroups */
    char v2[512];          /* run dir under cgroup2 or "" */
    char mem[512];         /* run dir holding the memory limit or "" */
    char pids[512];        /* run dir holding the pids limit or "" */
    char cpuacct[512];     /* v1 cpuacct run dir or "" */
    int v2_fd;             /* O_DIRECTORY fd of v2 (CLONE_INTO_CGROUP) */
    int procs_fd[3];       /* v1 cgroup.procs fds to join, -1 unused */
    bool mem_is_v2, pids_is_v2;
};
enum ipd_err ipd__cgroups_probe(const char *name, struct ipd__cgroups **out,
                                unsigned *mech, char *err, size_t errlen);
void ipd__cgroups_free(struct ipd__cgroups *cg);
/* Create the run's cgroups "run-<pid>-<n>" (n counts per process) and
 * set limits; fds are O_CLOEXEC.  A leftover dir of that name (a dead
 * process's with our pid) is taken over when empty, else the next n is
 * tried. */
enum ipd_err ipd__cgroup_run_create(const struct ipd__cgroups *cg,
                                    int64_t memory_bytes, int64_t pids,
                                    struct ipd__cgroup_run *run, char *err,
                                    size_t errlen);
/* Kill everything in the run's cgroups (cgroup.kill; v1: signal each
 * listed pid).  Safe to call repeatedly. */
void ipd__cgroup_run_kill(const struct ipd__cgroup_run *run);
/* True when no process is left in any of the run's cgroups. */
bool ipd__cgroup_run_empty(const struct ipd__cgroup_run *run);
/* Read counters: OOM kills, cpu usec, memory peak (-1 when unknown). */
void ipd__cgroup_run_stats(const struct ipd__cgroup_run *run,
                           int64_t *oom_kills, int64_t *cpu_usec,
                           int64_t *mem_peak);
/* Remove the run's cgroups (waiting, bounded, for them to empty) and
 * close the fds.  IPD_ERR_INTERNAL if a process survived. */
enum ipd_err ipd__cgroup_run_destroy(struct ipd__cgroup_run *run);

#endif
