/*
 * test.h - a minimal unit-test harness.  Each test program defines test
 * functions, lists them in TEST_MAIN, and prints "N passed, N failed".
 * A failed CHECK marks the current test failed and goes on; REQUIRE returns
 * from the test function.
 */
#ifndef IPD_TEST_H
#define IPD_TEST_H

#include <stdbool.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int test__failed_checks;

#define CHECK(cond)                                                            \
    do {                                                                       \
        if (!(cond)) {                                                         \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__,   \
                    #cond);                                                    \
            test__failed_checks++;                                             \
        }                                                                      \
    } while (0)

/* A CHECK with a printf-style explanation. */
#define CHECKF(cond, ...)                                                      \
    do {                                                                       \
        if (!(cond)) {                                                         \
            fprintf(stderr, "%s:%d: CHECK failed: %s: ", __FILE__, __LINE__,   \
                    #cond);                                                    \
            fprintf(stderr, __VA_ARGS__);                                      \
            fputc('\n', stderr);                                               \
            test__failed_checks++;                                             \
        }                                                                      \
    } while (0)

#define REQUIRE(cond)                                                          \
    do {                                                                       \
        if (!(cond)) {                                                         \
            fprintf(stderr, "%s:%d: REQUIRE failed: %s\n", __FILE__, __LINE__, \
                    #cond);                                                    \
            test__failed_checks++;                                             \
            return;                                                            \
        }                                                                      \
    } while (0)

#define CHECK_INT(a, b)                                                        \
    do {                                                                       \
        long long test__a = (long long)(a), test__b = (long long)(b);          \
        if (test__a != test__b) {                                              \
            fprintf(stderr,                                                    \
                    "%s:%d: CHECK_INT failed: %s == %lld, want %lld\n",        \
                    __FILE__, __LINE__, #a, test__a, test__b);                 \
            test__failed_checks++;                                             \
        }                                                                      \
    } while (0)

#define CHECK_STR(a, b)                                                        \
    do {                                                                       \
        const char *test__a = (a), *test__b = (b);                             \
        if (!test__a || !test__b || strcmp(test__a, test__b) != 0) {           \
            fprintf(stderr,                                                    \
                    "%s:%d: CHECK_STR failed: %s == \"%s\", want \"%s\"\n",    \
                    __FILE__, __LINE__, #a, test__a ? test__a : "(null)",      \
                    test__b ? test__b : "(null)");                             \
            test__failed_checks++;                                             \
        }                                                                      \
    } while (0)

struct test_case {
    const char *name;
    void (*fn)(void);
};

/* Called with each case's name just before it runs, when set: a suite's
 * per-case set-up (tests/sandbox/sandbox_test.h arms its wall-clock
 * guard there). */
static void (*test__case_start)(const char *name);

/* name is one of the comma-separated names of list. */
static inline bool test__listed(const char *list, const char *name)
{
    size_t len = strlen(name);
    for (const char *p = list; *p;) {
        size_t n = strcspn(p, ",");
        if (n == len && !strncmp(p, name, len))
            return true;
        p += n + (p[n] == ',');
    }
    return false;
}

/* Run the cases in order, print ok/FAIL for each and a total; the exit
 * status for main.  For a main that does more first (TEST_MAIN below is
 * the usual way). */
static inline int test_run(const struct test_case *cases, size_t n)
{
    int passed = 0, failed = 0;
    /* IPD_TEST_CASES=a,b runs only those cases (by hand, while working
     * on one; never set by the suite), each left out named as such. */
    const char *only = getenv("IPD_TEST_CASES");
    for (size_t i = 0; i < n; i++) {
        int before = test__failed_checks;
        if (only && !test__listed(only, cases[i].name)) {
            printf("left out %s (IPD_TEST_CASES)\n", cases[i].name);
            continue;
        }
        if (test__case_start)
            test__case_start(cases[i].name);
        cases[i].fn();
        if (test__failed_checks == before) {
            passed++;
            printf("ok   %s\n", cases[i].name);
        } else {
            failed++;
            printf("FAIL %s\n", cases[i].name);
            /* The mutation check (tests/mutants/run.sh) needs only to
             * know that a program fails, not every case that would. */
            if (getenv("IPD_TEST_STOP_ON_FAIL")) {
                printf("stopping at the first failed case "
                       "(IPD_TEST_STOP_ON_FAIL)\n");
                break;
            }
        }
    }
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}

#define TEST_MAIN(...)                                                         \
    int main(void)                                                             \
    {                                                                          \
        static const struct test_case cases[] = {__VA_ARGS__};                 \
        return test_run(cases, sizeof(cases) / sizeof(cases[0]));              \
    }

#define T(fn)                                                                  \
    {                                                                          \
#fn, fn                                                                \
    }

#endif
