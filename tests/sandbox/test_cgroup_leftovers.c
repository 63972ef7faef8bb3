/*
 * test_cgroup_leftovers.c - run cgroups left behind by a killed service.
 *
 * A service killed with SIGKILL leaves its "run-<pid>-<n>" dirs, and pids
 * are reused (pid_max 32768 here), so a later service can meet a dir with
 * exactly the name it is about to create.  CI once failed on that
 * ("cgroup: mkdir .../run-12031-14: File exists").  These tests make the
 * leftovers on purpose, under a parent cgroup of their own.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define SBX_HOST_UID 201300 /* its own, like the other suites that run code */
#include "sandbox_test.h"
#include "service/sandbox/sandbox_internal.h" /* ipd__cgroup_* */

static char cg_name[64];
static const struct ipd__cgroup_limits lim = {64 << 20, 16, 1000};

/* parent dirs of a run, from its run dirs (the dirname of each) */
static size_t run_parents(const struct ipd__cgroup_run *run,
                          char parents[5][512])
{
    const char *dirs[5] = {run->v2, run->mem_is_v2 ? "" : run->mem,
                           run->pids_is_v2 ? "" : run->pids, run->cpuacct,
                           run->cpu_is_v2 || run->cpu_is_cpuacct ? ""
                                                                 : run->cpu};
    size_t n = 0;

    for (size_t i = 0; i < 5; i++) {
        char tmp[512];
        if (!dirs[i][0])
            continue;
        snprintf(tmp, sizeof tmp, "%s", dirs[i]);
        snprintf(parents[n++], 512, "%s", dirname(tmp));
    }
    return n;
}

/* <n> of a run dir ".../run-<pid>-<n>" */
static unsigned run_n(const struct ipd__cgroup_run *run)
{
    const char *dash = strrchr(run->mem, '-');
    return dash ? (unsigned)strtoul(dash + 1, NULL, 10) : 0;
}

/* Probe cg_name and make one run: the parents it lives in, and the <n>
 * the next run will take.  Returns how many parents (0 on failure). */
static size_t find_parents(char parents[5][512], unsigned *next_n)
{
    struct ipd__cgroups *cg = NULL;
    struct ipd__cgroup_run a;
    char err[256] = "";
    unsigned mech = 0;
    size_t n;

    if (ipd__cgroups_probe(cg_name, &cg, &mech, err, sizeof err) != IPD_OK)
        return 0;
    if (ipd__cgroup_run_create(cg, &lim, &a, err, sizeof err) != IPD_OK) {
        ipd__cgroups_free(cg);
        return 0;
    }
    n = run_parents(&a, parents);
    *next_n = run_n(&a) + 1;
    CHECK_INT(ipd__cgroup_run_destroy(&a), IPD_OK);
    ipd__cgroups_free(cg);
    return n;
}

static bool ends_with(const char *s, const char *suffix)
{
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0;
}

static void make_dirs(char parents[5][512], size_t n, const char *leaf)
{
    for (size_t i = 0; i < n; i++) {
        char p[600];
        snprintf(p, sizeof p, "%s/%s", parents[i], leaf);
        CHECK(mkdir(p, 0755) == 0 || errno == EEXIST);
    }
}

static bool dir_exists(const char *parent, const char *leaf)
{
    char p[600];
    struct stat st;
    snprintf(p, sizeof p, "%s/%s", parent, leaf);
    return stat(p, &st) == 0;
}

static void remove_dirs(char parents[5][512], size_t n, const char *leaf)
{
    for (size_t i = 0; i < n; i++) {
        char p[600];
        snprintf(p, sizeof p, "%s/%s", parents[i], leaf);
        /* a task that just left keeps a cgroup busy for a moment */
        for (int k = 0; k < 2000 && rmdir(p) != 0 && errno == EBUSY; k++)
            usleep(1000);
    }
}

/* a child that sleeps until killed, placed into leaf in every parent */
static pid_t park_child(char parents[5][512], size_t n, const char *leaf)
{
    pid_t pid = fork();
    char num[32];

    if (pid == 0) {
        pause();
        _exit(0);
    }
    CHECK(pid > 0);
    if (pid <= 0)
        return pid;
    snprintf(num, sizeof num, "%ld", (long)pid);
    for (size_t i = 0; i < n; i++) {
        char p[600];
        int fd;
        snprintf(p, sizeof p, "%s/%s/cgroup.procs", parents[i], leaf);
        fd = open(p, O_WRONLY | O_CLOEXEC);
        CHECK(fd >= 0);
        if (fd >= 0) {
            CHECK(write(fd, num, strlen(num)) == (ssize_t)strlen(num));
            close(fd);
        }
    }
    return pid;
}

static void test_run_takes_over_or_skips_leftovers(void)
{
    struct ipd__cgroups *cg = NULL;
    struct ipd__cgroup_run a, b, c;
    char parents[5][512], leaf[64], busy_leaf[64], err[256] = "";
    unsigned mech = 0;
    size_t n;
    long me = (long)getpid();
    pid_t child;
    int status;

    snprintf(cg_name, sizeof cg_name, "ipd-cgtest-%ld", me);
    REQUIRE(ipd__cgroups_probe(cg_name, &cg, &mech, err, sizeof err) == IPD_OK);
    /* A first run tells where the parents are and which <n> is next (the
     * counter is per process; this test is its only user meanwhile). */
    REQUIRE(ipd__cgroup_run_create(cg, &lim, &a, err, sizeof err) == IPD_OK);
    unsigned k = run_n(&a);
    snprintf(leaf, sizeof leaf, "/run-%ld-%u", me, k);
    CHECK(ends_with(a.mem, leaf));
    n = run_parents(&a, parents);
    REQUIRE(n > 0);
    CHECK_INT(ipd__cgroup_run_destroy(&a), IPD_OK);

    /* run-<pid>-<k+1> left empty by "an earlier process": taken over */
    snprintf(leaf, sizeof leaf, "run-%ld-%u", me, k + 1);
    make_dirs(parents, n, leaf);
    /* run-<pid>-<k+2> with a live process in it: not touched, skipped */
    snprintf(busy_leaf, sizeof busy_leaf, "run-%ld-%u", me, k + 2);
    make_dirs(parents, n, busy_leaf);
    child = park_child(parents, n, busy_leaf);
    REQUIRE(child > 0);

    err[0] = '\0';
    CHECK_INT(ipd__cgroup_run_create(cg, &lim, &b, err, sizeof err), IPD_OK);
    CHECK_STR(err, "");
    snprintf(leaf, sizeof leaf, "/run-%ld-%u", me, k + 1);
    CHECK(ends_with(b.mem, leaf));
    CHECK_INT(ipd__cgroup_run_create(cg, &lim, &c, err, sizeof err), IPD_OK);
    snprintf(leaf, sizeof leaf, "/run-%ld-%u", me, k + 3);
    CHECK(ends_with(c.mem, leaf));
    CHECK(kill(child, 0) == 0);
    CHECK(waitpid(child, &status, WNOHANG) == 0);
    CHECK_INT(ipd__cgroup_run_destroy(&b), IPD_OK);
    CHECK_INT(ipd__cgroup_run_destroy(&c), IPD_OK);
    for (size_t i = 0; i < n; i++)
        CHECK(dir_exists(parents[i], busy_leaf));

    kill(child, SIGKILL);
    CHECK(waitpid(child, &status, 0) == child);
    remove_dirs(parents, n, busy_leaf);
    ipd__cgroups_free(cg);
}

static void test_probe_reaps_dead_pids_only(void)
{
    struct ipd__cgroups *cg = NULL;
    char parents[5][512], dead_leaf[64], live_leaf[64], err[256] = "";
    unsigned mech = 0, next;
    size_t n;
    pid_t dead, live;
    int status;

    REQUIRE(cg_name[0]);
    n = find_parents(parents, &next);
    REQUIRE(n > 0);

    dead = fork();
    if (dead == 0)
        _exit(0);
    REQUIRE(dead > 0);
    REQUIRE(waitpid(dead, &status, 0) == dead);
    live = fork();
    if (live == 0) {
        pause();
        _exit(0);
    }
    REQUIRE(live > 0);
    snprintf(dead_leaf, sizeof dead_leaf, "run-%ld-7", (long)dead);
    snprintf(live_leaf, sizeof live_leaf, "run-%ld-7", (long)live);
    make_dirs(parents, n, dead_leaf);
    make_dirs(parents, n, live_leaf);

    REQUIRE(ipd__cgroups_probe(cg_name, &cg, &mech, err, sizeof err) == IPD_OK);
    for (size_t i = 0; i < n; i++) {
        CHECK(!dir_exists(parents[i], dead_leaf));
        CHECK(dir_exists(parents[i], live_leaf));
    }
    ipd__cgroups_free(cg);
    kill(live, SIGKILL);
    CHECK(waitpid(live, &status, 0) == live);
    remove_dirs(parents, n, live_leaf);
    remove_dirs(parents, n, dead_leaf);
}

/* End to end: leftovers with the very names the probe's dry run and the
 * next runs will pick; every run still succeeds. */
static void test_sandbox_runs_through_leftovers(void)
{
    struct ipd_sandbox_config c;
    struct ipd_sandbox_policy p;
    struct ipd_sandbox_result r;
    char parents[5][512], leaf[64];
    unsigned first;
    size_t n;

    REQUIRE(cg_name[0]);
    n = find_parents(parents, &first);
    REQUIRE(n > 0);
    /* The very names the probe's dry runs and the runs below will take. */
    for (unsigned k = first; k < first + 6; k++) {
        snprintf(leaf, sizeof leaf, "run-%ld-%u", (long)getpid(), k);
        make_dirs(parents, n, leaf);
    }

    memset(&c, 0, sizeof c);
    if (geteuid() == 0) {
        c.host_uid = SBX_HOST_UID;
        c.host_gid = SBX_HOST_UID;
    }
    c.cgroup_name = cg_name;
    REQUIRE(ipd_sandbox_probe(&c) == IPD_OK);
    sbx_policy(&p);
    for (int k = 0; k < 3; k++) {
        const char *argv[] = {"/usr/bin/python3", "-I", "-c", "print(6*7)",
                              NULL};
        struct ipd_sandbox_spec spec;
        memset(&spec, 0, sizeof spec);
        spec.argv = argv;
        spec.mounts = sbx_mounts;
        spec.n_mounts = IPD_ARRAY_LEN(sbx_mounts);
        CHECK_INT(ipd_sandbox_run(&c, &p, &spec, &r), IPD_OK);
        CHECK_STR(r.error, "");
        CHECK_STR(r.out.buf, "42\n");
        ipd_sandbox_result_release(&r);
    }
    ipd_sandbox_config_release(&c);
    for (unsigned k = 0; k < first + 12; k++) {
        snprintf(leaf, sizeof leaf, "run-%ld-%u", (long)getpid(), k);
        remove_dirs(parents, n, leaf);
        for (size_t i = 0; i < n; i++)
            CHECK(!dir_exists(parents[i], leaf));
    }
    for (size_t i = 0; i < n; i++)
        CHECK(rmdir(parents[i]) == 0);
}

/* The sandbox itself must be there: a probe failure fails, never skips. */
static void test_sandbox_probes(void)
{
    CHECK(sbx_setup());
}

static void test_teardown(void)
{
    sbx_teardown();
}

SBX_TEST_MAIN(T(test_sandbox_probes), T(test_run_takes_over_or_skips_leftovers),
              T(test_probe_reaps_dead_pids_only),
              T(test_sandbox_runs_through_leftovers), T(test_teardown))
