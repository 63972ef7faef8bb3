/*
 * test_cost.c - forty sandboxed runs in a row all succeed (no state leaks
 * from one run into the next), and what they cost over starting the
 * program directly is printed for information.  Nothing here asserts a
 * time: timings drift; the benchmark proper lives in bench/.
 */
#include <spawn.h>
#include <sys/wait.h>

#include "sandbox_test.h"
#include "service/common/util.h"

#define ROUNDS 40

extern char **environ;

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static void test_overhead(void)
{
    struct ipd_sandbox_policy p;
    struct ipd_sandbox_spec spec;
    const char *argv[] = {"/usr/bin/true", NULL};
    double direct[ROUNDS], sandboxed[ROUNDS];
    int ok = 0;

    REQUIRE(sbx_setup());
    sbx_policy(&p);
    memset(&spec, 0, sizeof spec);
    spec.argv = argv;
    spec.mounts = sbx_mounts;
    spec.n_mounts = IPD_ARRAY_LEN(sbx_mounts);
    for (int i = 0; i < ROUNDS; i++) {
        struct ipd_sandbox_result r;
        pid_t pid;
        int st;
        double t0 = now_us();
        if (posix_spawn(&pid, argv[0], NULL, NULL,
                        (char *const *)(uintptr_t)argv, environ) == 0)
            waitpid(pid, &st, 0);
        direct[i] = now_us() - t0;
        t0 = now_us();
        if (ipd_sandbox_run(&sbx_cfg, &p, &spec, &r) == IPD_OK &&
            r.exit_code == 0)
            ok++;
        sandboxed[i] = now_us() - t0;
        ipd_sandbox_result_release(&r);
    }
    CHECK_INT(ok, ROUNDS);
    qsort(direct, ROUNDS, sizeof direct[0], cmp_double);
    qsort(sandboxed, ROUNDS, sizeof sandboxed[0], cmp_double);
    printf("  /usr/bin/true direct p50 %.2f ms, sandboxed p50 %.2f ms "
           "p90 %.2f ms (overhead p50 %.2f ms)\n",
           direct[ROUNDS / 2] / 1e3, sandboxed[ROUNDS / 2] / 1e3,
           sandboxed[ROUNDS * 9 / 10] / 1e3,
           (sandboxed[ROUNDS / 2] - direct[ROUNDS / 2]) / 1e3);
}

static void test_teardown(void)
{
    sbx_teardown();
}

SBX_TEST_MAIN(T(test_overhead), T(test_teardown))
