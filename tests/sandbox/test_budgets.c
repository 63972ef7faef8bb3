/*
 * test_budgets.c - the host's and other runs' kernel budgets (issue 13,
 * items 1, 2 and 6): a run that exhausts a per-user budget exhausts its
 * own, never root's or another slot's, and its CPU share is bounded.
 *
 * A run that holds a budget while the test looks: the program fills it,
 * creates /mnt/sync/full on a writable stage mount and waits (bounded)
 * for /mnt/sync/done, which the test creates once it has checked; the
 * run itself goes on a thread (a run blocks).
 *
 * Registered three times: cold, warm and session (sandbox_test.h).  Warm
 * and session, each host uid (slot) has its zygote, whose parked
 * children (session children) are the runs; the case that checks
 * ipd_sandbox_run's refusal of a bad uid stays cold.
 */
#define SBX_HOST_UID 200500 /* own range: suites run concurrently */
#include <mqueue.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/resource.h>
#include <time.h>

#include "sandbox_test.h"
#include "service/common/util.h"

#define SLOT_A (sbx_uid_base() + 1)
#define SLOT_B (sbx_uid_base() + 2)

/* Appended to a holding program: announce, then wait for the test. */
#define HOLD                                                                   \
    "open('/mnt/sync/full', 'w').close()\n"                                    \
    "import time\n"                                                            \
    "end = time.monotonic() + 30\n"                                            \
    "while not os.path.exists('/mnt/sync/done') and time.monotonic() < end:\n" \
    "    time.sleep(0.01)\n"

struct held {
    pthread_t th;
    struct ipd_sandbox_policy p;
    const char *code;
    uid_t uid;
    struct ipd_sandbox_stage *sync; /* sync/ at /mnt/sync, writable */
    struct ipd_sandbox_result r;
    enum ipd_err rc;
    atomic_bool over;
};

/* Run code as host uid (0: the config's) with extra mounts, in the
 * suite's mode. */
static enum ipd_err run_as(const struct ipd_sandbox_policy *p, uid_t uid,
                           const char *code,
                           const struct ipd_sandbox_mount *extra,
                           size_t n_extra, struct ipd_sandbox_result *res)
{
    return sbx_run_as(p, uid, code, NULL, extra, n_extra, res);
}

static void *held_main(void *arg)
{
    struct held *h = arg;
    struct ipd_sandbox_mount sync = {"sync", "/mnt/sync", true, h->sync};

    h->rc = run_as(&h->p, h->uid, h->code, &sync, 1, &h->r);
    atomic_store(&h->over, true);
    return NULL;
}

/* Start the holding run; true once it announced it is full (30 s at
 * most: the machine is shared and loaded).  Call held_finish after it
 * whatever it returned. */
static bool held_start(struct held *h, const char *code, uid_t uid)
{
    int64_t deadline = ipd_mono_ms() + 30000;

    memset(h, 0, sizeof *h);
    sbx_policy(&h->p);
    h->p.wall_timeout_ms = 60000;
    h->code = code;
    h->uid = uid;
    h->sync = sbx_stage_dir("sync", 0777);
    if (!h->sync || pthread_create(&h->th, NULL, held_main, h) != 0) {
        ipd_sandbox_stage_free(h->sync);
        h->sync = NULL;
        return false;
    }
    while (!sbx_stage_exists(h->sync, "sync/full") && !atomic_load(&h->over) &&
           ipd_mono_ms() < deadline)
        usleep(5000);
    return sbx_stage_exists(h->sync, "sync/full");
}

/* Let the run end and join it; the result stays in h->r. */
static void held_finish(struct held *h)
{
    if (!h->sync)
        return;
    if (sbx_stage_write(h->sync, "sync/done", "", 0644))
        fprintf(stderr, "  sync/done: %s\n", strerror(errno));
    pthread_join(h->th, NULL);
    fprintf(stderr, "  the holding run printed: %s", h->r.out.buf);
    ipd_sandbox_stage_free(h->sync);
    h->sync = NULL;
}

/* Item 1: pending signals.  The run makes POSIX timers (each one holds a
 * queued signal of RLIMIT_SIGPENDING) until EAGAIN and keeps them.  The
 * sandbox used to create its user namespace as root, so every timer was
 * charged to root too: root's own timer_create then failed with EAGAIN
 * (the test lowers its own soft RLIMIT_SIGPENDING to 4096 so "all of root's
 * budget" is reached in a moment instead of at 96k timers). */
static void test_pending_signals_are_not_roots(void)
{
    static const char code[] =
        "import ctypes, os\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "t = ctypes.c_void_p()\n"
        "n = 0\n"
        "while n < 100000 and libc.timer_create(1, None, ctypes.byref(t)) "
        "== 0:\n"
        "    n += 1\n"
        "print(n, ctypes.get_errno(), flush=True)\n" HOLD;
    struct rlimit saved, low;
    struct held h;
    timer_t mine;
    long n = -1, err = -1;

    REQUIRE(sbx_setup());
    REQUIRE(getrlimit(RLIMIT_SIGPENDING, &saved) == 0);
    low = (struct rlimit){4096, saved.rlim_max}; /* the soft limit counts */
    REQUIRE(setrlimit(RLIMIT_SIGPENDING, &low) == 0);
    CHECK(held_start(&h, code, SLOT_A));
    /* Root (this process) still gets a timer while the run holds all it
     * could get. */
    errno = 0;
    bool ok = timer_create(CLOCK_MONOTONIC, NULL, &mine) == 0;
    int root_errno = errno;
    if (ok)
        timer_delete(mine);
    held_finish(&h);
    CHECK(setrlimit(RLIMIT_SIGPENDING, &saved) == 0);
    if (!ok)
        fprintf(stderr, "  root's timer_create: %s\n", strerror(root_errno));
    CHECK(ok);
    CHECK_INT(h.rc, IPD_OK);
    CHECK(sscanf(h.r.out.buf, "%ld %ld", &n, &err) == 2);
    /* It did exhaust a budget: its own, the sandbox's default (256). */
    CHECK_INT(err, EAGAIN);
    CHECK(n > 0 && n <= 256);
    ipd_sandbox_result_release(&h.r);
}

/* Item 1: POSIX message-queue bytes (the IPC namespace is the run's, the
 * byte budget is per user).  The run opens 80 KiB queues until its
 * RLIMIT_MSGQUEUE says no; root can still open one of its own. */
static void test_mqueue_bytes_are_not_roots(void)
{
    static const char code[] =
        "import ctypes, os\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "class A(ctypes.Structure):\n"
        "    _fields_ = [('f', ctypes.c_long), ('m', ctypes.c_long),\n"
        "                ('s', ctypes.c_long), ('c', ctypes.c_long),\n"
        "                ('pad', ctypes.c_long * 4)]\n"
        "a = A(0, 10, 8192, 0)\n"
        "n = 0\n"
        "while n < 200 and libc.mq_open(b'/q%d' % n, os.O_CREAT | os.O_RDWR,"
        " 0o600, ctypes.byref(a)) >= 0:\n"
        "    n += 1\n"
        "print(n, ctypes.get_errno(), flush=True)\n" HOLD;
    struct mq_attr attr = {0, 10, 8192, 0, {0}};
    struct held h;
    char name[64];
    long n = -1, err = -1;
    mqd_t q;

    REQUIRE(sbx_setup());
    snprintf(name, sizeof name, "/ipd-budgets-%ld", (long)getpid());
    CHECK(held_start(&h, code, SLOT_A));
    errno = 0;
    q = mq_open(name, O_CREAT | O_RDWR | O_EXCL, 0600, &attr);
    int root_errno = errno;
    if (q != (mqd_t)-1) {
        mq_close(q);
        mq_unlink(name);
    }
    held_finish(&h);
    if (q == (mqd_t)-1)
        fprintf(stderr, "  root's mq_open: %s\n", strerror(root_errno));
    CHECK(q != (mqd_t)-1);
    CHECK_INT(h.rc, IPD_OK);
    CHECK(sscanf(h.r.out.buf, "%ld %ld", &n, &err) == 2);
    CHECK_INT(err, EMFILE); /* over RLIMIT_MSGQUEUE */
    CHECK(n > 0 && n < 10);
    ipd_sandbox_result_release(&h.r);
}

/* What a run in another slot gets: a new pipe's size. */
static long fresh_pipe_size(uid_t uid)
{
    struct ipd_sandbox_policy p;
    struct ipd_sandbox_result r;
    long size = -1;

    sbx_policy(&p);
    if (run_as(&p, uid,
               "import fcntl, os\n"
               "r, w = os.pipe()\n"
               "print(fcntl.fcntl(w, fcntl.F_GETPIPE_SZ))\n",
               NULL, 0, &r) == IPD_OK &&
        r.exit_code == 0)
        size = strtol(r.out.buf, NULL, 10);
    ipd_sandbox_result_release(&r);
    return size;
}

/* Item 2: the per-user pipe budget (fs.pipe-user-pages-soft).  Run A
 * grows pipes to 1 MiB until the kernel refuses (EPERM: its user is past
 * the soft limit) and holds them.  A run of another slot still gets
 * 64 KiB pipes; a run of the same uid gets 8 KiB ones (the control: it is
 * what every run got when all runs shared one uid). */
static void test_pipe_budget_is_per_slot(void)
{
    static const char code[] =
        "import fcntl, os\n"
        "held = []\n"
        "err = 0\n"
        "while len(held) < 100 and not err:\n"
        "    r, w = os.pipe()\n"
        "    held.append((r, w))\n"
        "    try:\n"
        "        fcntl.fcntl(w, fcntl.F_SETPIPE_SZ, 1 << 20)\n"
        "    except OSError as e:\n"
        "        err = e.errno\n"
        "print(len(held), err, flush=True)\n" HOLD;
    struct held h;
    long n = -1, err = -1, other, same;

    REQUIRE(sbx_setup());
    CHECK(held_start(&h, code, SLOT_A));
    other = fresh_pipe_size(SLOT_B);
    same = fresh_pipe_size(SLOT_A);
    held_finish(&h);
    CHECK_INT(h.rc, IPD_OK);
    CHECK(sscanf(h.r.out.buf, "%ld %ld", &n, &err) == 2);
    CHECK_INT(err, EPERM);
    CHECK_INT(same, 8192);
    CHECK_INT(other, 65536);
    ipd_sandbox_result_release(&h.r);
}

/* Item 6: two processes burning CPU for 2 s of wall time get one core
 * between them (the default share), not both.  Loose: the machine is
 * loaded, so this proves a bound, not a speed. */
static void test_cpu_share_is_one_core(void)
{
    static const char code[] = "import os, time\n"
                               "def burn():\n"
                               "    end = time.monotonic() + 2\n"
                               "    while time.monotonic() < end:\n"
                               "        pass\n"
                               "t0 = time.monotonic()\n"
                               "pid = os.fork()\n"
                               "burn()\n"
                               "if pid == 0:\n"
                               "    os._exit(0)\n"
                               "os.waitpid(pid, 0)\n"
                               "print('%.3f' % (time.monotonic() - t0))\n";
    struct ipd_sandbox_policy p;
    struct ipd_sandbox_result r;
    double inside = 0;

    REQUIRE(sbx_setup());
    CHECK(sbx_cfg.mechanisms & (IPD_SANDBOX_CG2_CPU | IPD_SANDBOX_CG1_CPU));
    sbx_policy(&p);
    CHECK_INT(run_as(&p, SLOT_A, code, NULL, 0, &r), IPD_OK);
    CHECK_INT(r.exit_code, 0);
    inside = strtod(r.out.buf, NULL);
    fprintf(stderr, "  cpu %.3f s in %.3f s of wall (%.3f s burning)\n",
            r.cpu_seconds, r.wall_seconds, inside);
    CHECK(inside >= 2.0);
    CHECK(r.cpu_seconds > 0.2);
    CHECK(r.cpu_seconds <= 1.2 * r.wall_seconds);
    ipd_sandbox_result_release(&r);

    /* A tenth of a core: a bound even a loaded machine (which gives the
     * two processes less than their two cores) would exceed without it. */
    p.cpu_millis = 100;
    CHECK_INT(run_as(&p, SLOT_A, code, NULL, 0, &r), IPD_OK);
    fprintf(stderr, "  cpu %.3f s in %.3f s of wall at 0.1 cores\n",
            r.cpu_seconds, r.wall_seconds);
    CHECK(r.cpu_seconds > 0.05);
    CHECK(r.cpu_seconds <= 0.2 * r.wall_seconds);
    ipd_sandbox_result_release(&r);
}

/* The status names the CPU share's mechanism (no run: the same in both
 * modes). */
static void test_status_names_cpu_share(void)
{
    REQUIRE(sbx_setup());
    CHECK(strstr(sbx_cfg.status, "cpu share: cgroup v") != NULL);
}

/* Item 2: a run's own ids are refused where they can't be right.
 * ipd_sandbox_run's refusal of a bad spec: cold in every mode (a zygote
 * is started with the uid once, ipd_sandbox_zygote_run refuses it
 * alike). */
static void test_run_ids_checked(void)
{
    struct ipd_sandbox_policy p;
    struct ipd_sandbox_result r;
    char why[256] = "";

    REQUIRE(sbx_setup());
    sbx_policy(&p);
    CHECK_INT(sbx_run_cold_as(&p, (uid_t)-1, "pass", NULL, NULL, 0, &r),
              IPD_ERR_INVALID);
    ipd_sandbox_result_release(&r);
    /* root has a passwd entry; the suite's range has none */
    CHECK_INT(ipd_sandbox_check_ids(0, 1, why, sizeof why),
              IPD_ERR_UNAVAILABLE);
    CHECK(strstr(why, "root") != NULL);
    CHECK_INT(ipd_sandbox_check_ids(sbx_uid_base(), 8, why, sizeof why),
              IPD_OK);
}

static void test_teardown(void)
{
    sbx_teardown();
}

SBX_TEST_MAIN(T(test_pending_signals_are_not_roots),
              T(test_mqueue_bytes_are_not_roots),
              T(test_pipe_budget_is_per_slot), T(test_cpu_share_is_one_core),
              T(test_status_names_cpu_share), T(test_run_ids_checked),
              T(test_teardown))
