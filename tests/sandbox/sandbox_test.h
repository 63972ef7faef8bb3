/*
 * sandbox_test.h - shared helpers of the sandbox escape suite: probe once
 * (a probe failure fails every test, never skips), run a Python snippet
 * with /usr/bin/python3 under a real policy.
 *
 * Three modes, chosen by the environment (tests/sandbox/CMakeLists.txt
 * registers the escape, functional and budget suites once in each):
 *
 *   cold (IPD_SANDBOX_TEST_MODE unset or "cold"): sbx_run* run the code
 *     with ipd_sandbox_run, `python3 -I -c CODE`;
 *   warm (IPD_SANDBOX_TEST_MODE=warm): sbx_run* run it in a parked child
 *     of a zygote (sandbox.h, "Warm runs"), through the prelude (the code
 *     is job/code.py of a detached stage at /mnt/job);
 *   session (IPD_SANDBOX_TEST_MODE=session): sbx_run* run it as the one
 *     call (IPD_ZPROTO_GO) of a session child of a zygote (parked with
 *     IPD_SANDBOX_PARK_SESSION, ipd_sandbox_parked_call): a fresh session
 *     per run, so each case starts clean, freed once the call answered.
 *     The program is then the session's interpreter, which outlives the
 *     call: exit_code is the call's status (SystemExit ends the call, not
 *     the process), and sbx_session_ended checks whether the call ended
 *     the session (the program exited, was killed, or timed out).
 *     sbx_run_seq runs codes as the calls of one session (as runs in a
 *     row in the other modes).
 *
 * A session's child is a warm run's parked child that keeps its
 * interpreter, so what the cases say of a warm run holds for it too.
 * Warm and session mode (sbx_parked) have one zygote per host uid,
 * started on first need with IPD_WARM_MODULES=numpy and stopped by
 * sbx_teardown.  While one lives its uid has 2 processes more on the
 * host (the zygote and its init): sbx_resident.
 *
 * A parked child takes no stdin and no host-path mounts (stage mounts
 * only), so a case that needs them says so and calls sbx_run_cold, which
 * is ipd_sandbox_run in every mode.
 *
 * The zygote of test_zygote.c (zt_*) is the same machinery: see
 * zygote_test.h.
 */
#ifndef IPD_SANDBOX_TEST_H
#define IPD_SANDBOX_TEST_H

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#include "proc_count.h" /* test_count_uids */
#include "service/sandbox/sandbox.h"
#include "test.h"

static struct ipd_sandbox_config sbx_cfg;
static bool sbx_probed, sbx_ok;

/* ---- the wall-clock guard ----------------------------------------------
 *
 * A hang (a run the sandbox never ends, a wait that never returns) must
 * fail the suite within seconds, naming the case, instead of sitting
 * until ctest's TIMEOUT.  A thread watches one deadline.  Each case
 * starts with sbx_guard_case_ms; a step with a bound of its own (a run's
 * wall timeout, parking a child, a zygote's start) re-arms it to
 * SBX_GUARD_FACTOR times that bound plus SBX_GUARD_SLACK_MS
 * (sbx_guard_step), and to sbx_guard_case_ms again once the step
 * returned (sbx_guard_done).  A run with a 1.5 s timeout that is never
 * killed fails the process 14.5 s after it started.  Every arm is
 * progress, whichever thread makes it (test_budgets holds runs in
 * threads of its own): only a stretch with none fails.
 *
 * When the deadline passes the guard prints "FAIL <case>" and the step
 * it waited for, and ends the process with status SBX_GUARD_EXIT; the
 * runs die with it (their inits have PDEATHSIG).  The suites' main is
 * SBX_TEST_MAIN (below), which arms it for each case.
 */
#define SBX_GUARD_FACTOR 3
#define SBX_GUARD_SLACK_MS 10000
#define SBX_GUARD_EXIT 3

static int64_t sbx_guard_case_ms = 60000; /* a case, between steps */

static struct {
    pthread_mutex_t lock;
    bool started;
    int64_t deadline; /* sbx_now_ms */
    int64_t since;    /* when the step began */
    const char *name; /* the case (static) */
    char step[160];   /* what it waits for */
} sbx_guard = {PTHREAD_MUTEX_INITIALIZER, false, 0, 0, "(no case yet)", ""};

static int64_t sbx_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

IPD_NORETURN static void sbx_guard_fire(void)
{
    double held = (double)(sbx_now_ms() - sbx_guard.since) / 1000.0;

    /* The cases' "ok" lines first (stdout is a pipe under ctest), then
     * our own with write(2): never wait on a FILE lock a hung thread
     * may hold. */
    fflush(stdout);
    dprintf(STDERR_FILENO,
            "wall-clock guard: case %s hung in %s for %.1f s; failing the "
            "process\n",
            sbx_guard.name, sbx_guard.step, held);
    dprintf(STDOUT_FILENO, "FAIL %s (wall-clock guard: %s, %.1f s)\n",
            sbx_guard.name, sbx_guard.step, held);
    _exit(SBX_GUARD_EXIT);
}

/* The guard's thread: a look at the deadline every 100 ms (a deadline
 * is seconds away, so that is precise enough and needs no wake-up). */
static void *sbx_guard_main(void *arg)
{
    const struct timespec tick = {0, 100 * 1000000};
    bool passed = false;

    (void)arg;
    while (!passed) {
        (void)nanosleep(&tick, NULL);
        pthread_mutex_lock(&sbx_guard.lock);
        passed = sbx_now_ms() >= sbx_guard.deadline;
        pthread_mutex_unlock(&sbx_guard.lock);
    }
    pthread_mutex_lock(&sbx_guard.lock); /* held: the step is final */
    sbx_guard_fire();
}

/* Re-arm the guard: what is waited for, for how long from now.  Starts
 * the guard's thread on first use (a failure to start it fails the
 * process: a suite without its guard could hang again). */
IPD_UNUSED static void sbx_guard_arm(const char *step, int64_t ms)
{
    pthread_mutex_lock(&sbx_guard.lock);
    sbx_guard.since = sbx_now_ms();
    sbx_guard.deadline = sbx_guard.since + ms;
    snprintf(sbx_guard.step, sizeof sbx_guard.step, "%s", step);
    if (!sbx_guard.started) {
        pthread_t th;
        if (pthread_create(&th, NULL, sbx_guard_main, NULL)) {
            fprintf(stderr, "wall-clock guard: cannot start\n");
            _exit(SBX_GUARD_EXIT);
        }
        pthread_detach(th);
        sbx_guard.started = true;
    }
    pthread_mutex_unlock(&sbx_guard.lock);
}

/* A step bounded by bound_ms of its own (<= 0: the case's allowance)
 * begins: what (with the bound) says which on failure. */
IPD_UNUSED static void sbx_guard_step(const char *what, int64_t bound_ms)
{
    char step[160];

    if (bound_ms <= 0)
        bound_ms = sbx_guard_case_ms;
    snprintf(step, sizeof step, "%s (its own bound %.1f s)", what,
             (double)bound_ms / 1000.0);
    sbx_guard_arm(step, SBX_GUARD_FACTOR * bound_ms + SBX_GUARD_SLACK_MS);
}

/* The step returned: the case's allowance again. */
IPD_UNUSED static void sbx_guard_done(void)
{
    sbx_guard_arm("the case's own code", sbx_guard_case_ms);
}

/* test.h's test__case_start: a case begins. */
IPD_UNUSED static void sbx_guard_case(const char *name)
{
    pthread_mutex_lock(&sbx_guard.lock);
    sbx_guard.name = name;
    pthread_mutex_unlock(&sbx_guard.lock);
    sbx_guard_done();
}

/* The suite's host uid: its own, so counting survivors is not disturbed
 * by other suites running at the same time. */
#ifndef SBX_HOST_UID
#define SBX_HOST_UID 200000
#endif

/* The mode's name from the environment: "cold" when unset or empty. */
static inline const char *sbx_mode(void)
{
    const char *m = getenv("IPD_SANDBOX_TEST_MODE");
    return m && *m ? m : "cold";
}

/* True in session mode (see the top). */
static inline bool sbx_session(void)
{
    return !strcmp(sbx_mode(), "session");
}

/* True when the suite's runs are parked children of a zygote: warm and
 * session mode (see the top). */
static inline bool sbx_parked(void)
{
    return !strcmp(sbx_mode(), "warm") || sbx_session();
}

/* The suite's host uid: SBX_HOST_UID, or 20000 above it for a suite's
 * warm variant and 40000 for its session variant, which ctest may run
 * at the same time as the cold one (all count the processes of their
 * uids). */
static inline uid_t sbx_uid_base(void)
{
    if (sbx_session())
        return (uid_t)(SBX_HOST_UID + 40000);
    return (uid_t)(SBX_HOST_UID + (sbx_parked() ? 20000 : 0));
}

static bool sbx_setup(void)
{
    const char *m = sbx_mode();

    if (!sbx_probed) {
        sbx_probed = true;
        memset(&sbx_cfg, 0, sizeof sbx_cfg);
        if (geteuid() == 0) {
            sbx_cfg.host_uid = sbx_uid_base();
            sbx_cfg.host_gid = sbx_uid_base();
        }
        sbx_ok = ipd_sandbox_probe(&sbx_cfg) == IPD_OK;
        fprintf(stderr, "%s\n", sbx_cfg.status);
        if (strcmp(m, "cold") && !sbx_parked()) {
            fprintf(stderr,
                    "IPD_SANDBOX_TEST_MODE=%s: not cold, warm or "
                    "session\n",
                    m);
            sbx_ok = false;
        }
        if (sbx_parked() && geteuid() != 0) {
            fprintf(stderr, "%s mode needs root (detached stages)\n", m);
            sbx_ok = false;
        }
        fprintf(stderr, "mode: %s\n", m);
    }
    return sbx_ok;
}

static const struct ipd_sandbox_mount sbx_mounts[] = {
    {"/usr", "/usr", false, NULL},
    {"/lib", "/lib", false, NULL},
    {"/lib64", "/lib64", false, NULL},
    {"/bin", "/bin", false, NULL},
};

static void sbx_policy(struct ipd_sandbox_policy *p)
{
    ipd_sandbox_policy_default(p);
    p->name = "test";
    p->wall_timeout_ms = 20000;
    p->memory_bytes = 256LL << 20;
    p->max_processes = 32;
}

static void sbx_report(const char *what, enum ipd_err rc,
                       const struct ipd_sandbox_result *res)
{
    if (rc || res->exit_code != 0)
        fprintf(stderr,
                "  %s: rc=%d exit=%d sig=%d timeout=%d oom=%d error=%s\n"
                "  stdout: %.2000s\n  stderr: %.2000s\n",
                what, rc, res->exit_code, res->term_signal, res->timed_out,
                res->oom_killed, res->error, res->out.buf, res->err.buf);
}

/* An empty result, as a run that failed to start leaves it (checks may
 * read its buffers). */
static void sbx_result_init(struct ipd_sandbox_result *res)
{
    memset(res, 0, sizeof *res);
    res->output_dirfd = -1;
    res->exit_code = -1;
    ipd_buf_init(&res->out, IPD_BUF_UNLIMITED);
    ipd_buf_init(&res->err, IPD_BUF_UNLIMITED);
}

/* A detached stage (as root) holding one directory name of mode (set
 * with fchmodat: no umask), for a case's stage mount; NULL (said on
 * stderr) on failure.  Free it with ipd_sandbox_stage_free after the
 * run. */
IPD_UNUSED static struct ipd_sandbox_stage *sbx_stage_dir(const char *name,
                                                          mode_t mode)
{
    struct ipd_sandbox_stage *st = NULL;
    char err[256] = "";

    if (ipd_sandbox_stage_new(4 << 20, 64, NULL, &st, err, sizeof err) ||
        !ipd_sandbox_stage_detached(st) ||
        mkdirat(ipd_sandbox_stage_fd(st), name, 0700) ||
        fchmodat(ipd_sandbox_stage_fd(st), name, mode, 0)) {
        fprintf(stderr, "stage %s: %s %s\n", name, err, strerror(errno));
        ipd_sandbox_stage_free(st);
        return NULL;
    }
    return st;
}

/* Create relpath in the stage with text and mode.  0 or -1. */
IPD_UNUSED static int sbx_stage_write(const struct ipd_sandbox_stage *st,
                                      const char *relpath, const char *text,
                                      mode_t mode)
{
    size_t len = strlen(text);
    int fd = openat(ipd_sandbox_stage_fd(st), relpath,
                    O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    bool ok = fd >= 0 && write(fd, text, len) == (ssize_t)len &&
              fchmod(fd, mode) == 0;

    if (fd >= 0)
        close(fd);
    return ok ? 0 : -1;
}

/* True when relpath exists in the stage (not followed if a symlink). */
IPD_UNUSED static bool sbx_stage_exists(const struct ipd_sandbox_stage *st,
                                        const char *relpath)
{
    struct stat sb;
    return fstatat(ipd_sandbox_stage_fd(st), relpath, &sb,
                   AT_SYMLINK_NOFOLLOW) == 0;
}

/* ---- zygotes ---------------------------------------------------------- */

struct zt {
    struct ipd_sandbox_zygote *z;
    struct ipd_sandbox_stage *st; /* the zygote's job/, data/, sync/
                                     (empty mount points) */
    pthread_t th;
    bool th_started;
    struct ipd_sandbox_result res;
    enum ipd_err rc;
    const char *modules; /* IPD_WARM_MODULES */
    uid_t uid;           /* host uid (0: the config's) */
};

static void *zt_thread(void *arg)
{
    struct zt *t = arg;
    const char *argv[] = {"/usr/bin/python3",       "-u", "-I", "-B",
                          "/opt/interpd/zygote.py", NULL};
    char modules[256];
    const char *env[] = {modules, NULL};
    struct ipd_sandbox_mount mounts[16];
    struct ipd_sandbox_spec spec;
    struct ipd_sandbox_policy p;
    size_t n = 0;

    snprintf(modules, sizeof modules, "IPD_WARM_MODULES=%s", t->modules);
    for (size_t i = 0; i < IPD_ARRAY_LEN(sbx_mounts); i++)
        mounts[n++] = sbx_mounts[i];
    mounts[n++] = (struct ipd_sandbox_mount){IPD_PRELUDE_DIR, "/opt/interpd",
                                             false, NULL};
    /* numpy's libblas.so.3 is a symlink through it (Debian) */
    mounts[n++] = (struct ipd_sandbox_mount){"/etc/alternatives",
                                             "/etc/alternatives", false, NULL};
    /* where a parked child's stage mounts go */
    mounts[n++] = (struct ipd_sandbox_mount){"job", "/mnt/job", false, t->st};
    mounts[n++] = (struct ipd_sandbox_mount){"data", "/mnt/data", false, t->st};
    mounts[n++] = (struct ipd_sandbox_mount){"sync", "/mnt/sync", false, t->st};
    memset(&spec, 0, sizeof spec);
    spec.argv = argv;
    spec.env = env;
    spec.mounts = mounts;
    spec.n_mounts = n;
    spec.host_uid = t->uid;
    ipd_sandbox_policy_default(&p);
    p.name = "zygote";
    p.wall_timeout_ms = 600000;
    p.cpu_seconds = 600;
    p.memory_bytes = 1LL << 30;
    t->rc = ipd_sandbox_zygote_run(t->z, &p, &spec, &t->res);
    return NULL;
}

static int zt_mkdirs(const struct ipd_sandbox_stage *st)
{
    int fd = ipd_sandbox_stage_fd(st);
    return mkdirat(fd, "job", 0755) || mkdirat(fd, "data", 0755) ||
                   mkdirat(fd, "sync", 0755)
               ? -1
               : 0;
}

/* Start a zygote importing modules as host uid (0: the config's) and
 * wait until it is ready.  Stop it with zt_stop whatever this returned. */
IPD_UNUSED static bool zt_start_as(struct zt *t, const char *modules, uid_t uid)
{
    char err[256] = "", why[256];

    memset(t, 0, sizeof *t);
    t->modules = modules;
    t->uid = uid;
    if (ipd_sandbox_stage_new(1 << 20, 64, NULL, &t->st, err, sizeof err) ||
        zt_mkdirs(t->st) || ipd_sandbox_zygote_new(&sbx_cfg, &t->z)) {
        fprintf(stderr, "zygote setup: %s\n", err);
        return false;
    }
    if (pthread_create(&t->th, NULL, zt_thread, t))
        return false;
    t->th_started = true;
    sbx_guard_step("a zygote's start", 120000);
    if (ipd_sandbox_zygote_wait_ready(t->z, 120000, why, sizeof why)) {
        fprintf(stderr, "zygote not ready: %s\n", why);
        return false;
    }
    sbx_guard_done();
    return true;
}

/* Start a zygote of the config's host uid (see zt_start_as). */
IPD_UNUSED static bool zt_start(struct zt *t, const char *modules)
{
    return zt_start_as(t, modules, 0);
}

IPD_UNUSED static void zt_stop(struct zt *t)
{
    if (t->z)
        ipd_sandbox_zygote_stop(t->z);
    if (t->th_started) {
        pthread_join(t->th, NULL);
        if (t->rc || t->res.exit_code != 0)
            fprintf(stderr,
                    "zygote ended: rc=%d exit=%d sig=%d %s\n"
                    "%.4000s\n",
                    t->rc, t->res.exit_code, t->res.term_signal, t->res.error,
                    t->res.err.buf);
    }
    t->th_started = false;
    ipd_sandbox_result_release(&t->res);
    ipd_sandbox_zygote_free(t->z);
    t->z = NULL;
    ipd_sandbox_stage_free(t->st);
    t->st = NULL;
}

/* Write code into the run stage's job/code.py (anew: a session's next
 * call rewrites it).  0 or -1. */
static int zt_write_code(const struct ipd_sandbox_stage *st, const char *code)
{
    size_t len = strlen(code);
    int fd =
        openat(ipd_sandbox_stage_fd(st), "job/code.py",
               O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0644);
    bool ok = fd >= 0 && write(fd, code, len) == (ssize_t)len;

    if (fd >= 0)
        close(fd);
    return ok ? 0 : -1;
}

/*
 * Park a child of t under p for a job (flags: ipd_sandbox_park's) with
 * a stage of its own, *st: job/ at /mnt/job and an empty data/ at
 * /mnt/data; extra: further stage mounts (an extra at /mnt/data takes
 * the empty one's place); their places must exist in the zygote's root
 * (/mnt/job, /mnt/data, /mnt/sync).  On success *st and *pk are the
 * caller's (ipd_sandbox_stage_free; pk as ipd_sandbox_park's); on
 * failure (said on stderr) both are NULL.
 */
static enum ipd_err zt_park_job(struct zt *t,
                                const struct ipd_sandbox_policy *p,
                                const struct ipd_sandbox_mount *extra,
                                size_t n_extra, unsigned flags,
                                struct ipd_sandbox_stage **st,
                                struct ipd_sandbox_parked **pk)
{
    struct ipd_sandbox_mount m[8];
    size_t n = 0;
    bool own_data = true;
    char err[256] = "";
    enum ipd_err rc = IPD_ERR_INTERNAL;

    *st = NULL;
    *pk = NULL;
    if (n_extra > IPD_ARRAY_LEN(m) - 2) {
        fprintf(stderr, "zt_park_job: %zu mounts are too many\n", n_extra);
        goto out;
    }
    if (ipd_sandbox_stage_new(16 << 20, 64, NULL, st, err, sizeof err) ||
        zt_mkdirs(*st)) {
        fprintf(stderr, "stage: %s\n", err);
        goto out;
    }
    for (size_t i = 0; i < n_extra; i++)
        own_data = own_data && strcmp(extra[i].sandbox_path, "/mnt/data");
    m[n++] = (struct ipd_sandbox_mount){"job", "/mnt/job", false, *st};
    if (own_data)
        m[n++] = (struct ipd_sandbox_mount){"data", "/mnt/data", false, *st};
    for (size_t i = 0; i < n_extra; i++)
        m[n++] = extra[i];
    sbx_guard_step("parking a child", 30000);
    rc = ipd_sandbox_park(t->z, p, m, n, flags, NULL, 30000, pk, err,
                          sizeof err);
    sbx_guard_done();
    if (rc)
        fprintf(stderr, "park: %s\n", err);
out:
    if (rc) {
        ipd_sandbox_stage_free(*st);
        *st = NULL;
    }
    return rc;
}

/*
 * Run code in a parked child of t under p (the prelude's job: code.py in
 * /mnt/job of a stage of its own, written once the child is parked, as
 * the service does; extra as zt_park_job's).
 */
IPD_UNUSED static enum ipd_err
zt_run_mounts(struct zt *t, const struct ipd_sandbox_policy *p,
              const char *code, const struct ipd_sandbox_mount *extra,
              size_t n_extra, struct ipd_sandbox_result *res)
{
    struct ipd_sandbox_stage *st = NULL;
    struct ipd_sandbox_parked *pk = NULL;
    enum ipd_err rc;

    sbx_result_init(res);
    rc = zt_park_job(t, p, extra, n_extra, 0, &st, &pk);
    if (rc)
        goto out;
    if (zt_write_code(st, code)) {
        fprintf(stderr, "job/code.py: %s\n", strerror(errno));
        ipd_sandbox_parked_free(pk);
        rc = IPD_ERR_INTERNAL;
        goto out;
    }
    sbx_guard_step("a warm run", p->wall_timeout_ms);
    rc = ipd_sandbox_parked_run(pk, 0, NULL, res);
    sbx_guard_done();
    sbx_report("warm run", rc, res);
out:
    ipd_sandbox_stage_free(st);
    return rc;
}

/*
 * Run codes[0..n-1] as the calls, in order, of one fresh session of t
 * under p: a child parked with IPD_SANDBOX_PARK_SESSION (stage and extra
 * as zt_park_job's), job/code.py rewritten for each call, one IPD_ZPROTO_GO
 * call each with the policy's wall timeout.  res[i] is call i's result
 * (ipd_sandbox_parked_call's; each the caller's to release); a call
 * after one that ended the session is not made (its result as a run's
 * that never started, IPD_ERR_UNAVAILABLE).  Then the session is freed
 * (its child killed and reaped, its cgroup removed; the results'
 * output_dirfd stay the caller's).  *ended: the last call made ended
 * the session (false when none was).  The first rc that is not IPD_OK,
 * else IPD_OK.
 */
IPD_UNUSED static enum ipd_err
zt_calls_mounts(struct zt *t, const struct ipd_sandbox_policy *p,
                const char *const *codes, size_t n,
                const struct ipd_sandbox_mount *extra, size_t n_extra,
                struct ipd_sandbox_result *res, bool *ended)
{
    struct ipd_sandbox_stage *st = NULL;
    struct ipd_sandbox_parked *pk = NULL;
    enum ipd_err rc, first = IPD_OK;
    size_t i = 0;

    *ended = false;
    for (size_t k = 0; k < n; k++)
        sbx_result_init(&res[k]);
    rc = zt_park_job(t, p, extra, n_extra, IPD_SANDBOX_PARK_SESSION, &st, &pk);
    for (; !rc && i < n && !*ended; i++) {
        if (zt_write_code(st, codes[i])) {
            fprintf(stderr, "job/code.py: %s\n", strerror(errno));
            rc = IPD_ERR_INTERNAL;
            break;
        }
        sbx_guard_step("a session call", p->wall_timeout_ms);
        rc =
            ipd_sandbox_parked_call(pk, IPD_ZPROTO_GO, 0, NULL, &res[i], ended);
        sbx_guard_done();
        sbx_report(*ended ? "session call (ended it)" : "session call", rc,
                   &res[i]);
        first = first ? first : rc;
    }
    if (i < n)
        first = first ? first : rc ? rc : IPD_ERR_UNAVAILABLE;
    ipd_sandbox_parked_free(pk);
    ipd_sandbox_stage_free(st);
    return first;
}

/* Run code in a parked child of t under p (see zt_run_mounts). */
IPD_UNUSED static enum ipd_err zt_run(struct zt *t,
                                      const struct ipd_sandbox_policy *p,
                                      const char *code,
                                      struct ipd_sandbox_result *res)
{
    return zt_run_mounts(t, p, code, NULL, 0, res);
}

/* ---- the suite's runs ------------------------------------------------- */

/* Warm and session mode's zygotes, one per host uid, in start order. */
static struct zt sbx_zt[4];
static bool sbx_zt_ready[IPD_ARRAY_LEN(sbx_zt)];
static size_t sbx_n_zt;

static uid_t sbx_uid_of(uid_t uid)
{
    return uid ? uid : sbx_cfg.host_uid;
}

/* The zygote of host uid (0: the config's), started on first need;
 * NULL (said on stderr) when it could not start. */
static struct zt *sbx_zygote(uid_t uid)
{
    struct zt *t;
    bool ok;

    uid = sbx_uid_of(uid);
    for (size_t i = 0; i < sbx_n_zt; i++)
        if (sbx_zt[i].uid == uid)
            return sbx_zt_ready[i] ? &sbx_zt[i] : NULL;
    if (sbx_n_zt == IPD_ARRAY_LEN(sbx_zt)) {
        fprintf(stderr, "sbx_zygote: more than %zu host uids\n", sbx_n_zt);
        return NULL;
    }
    t = &sbx_zt[sbx_n_zt];
    ok = zt_start_as(t, "numpy", uid);
    sbx_zt_ready[sbx_n_zt++] = ok; /* stopped by sbx_teardown either way */
    return ok ? t : NULL;
}

/* Host processes of uid (0: the config's) that live between runs: in
 * warm and session mode, its zygote and the zygote's init while they
 * are up.  A parked run's child, and a session's, is gone (reaped by
 * the zygote's init) when sbx_run* returns: ipd_sandbox_parked_run and
 * ipd_sandbox_parked_free wait for it. */
IPD_UNUSED static int sbx_resident(uid_t uid)
{
    uid = sbx_uid_of(uid);
    for (size_t i = 0; i < sbx_n_zt; i++)
        if (sbx_zt[i].uid == uid && sbx_zt_ready[i])
            return 2;
    return 0;
}

/* Run code cold in every mode, with python3 -I -c as host uid (0: the
 * config's); extra mounts (host paths or stages) appended to the system
 * ones; stdin_data NULL: stdin is /dev/null. */
IPD_UNUSED static enum ipd_err
sbx_run_cold_as(const struct ipd_sandbox_policy *p, uid_t uid, const char *code,
                const char *stdin_data, const struct ipd_sandbox_mount *extra,
                size_t n_extra, struct ipd_sandbox_result *res)
{
    const char *argv[] = {"/usr/bin/python3", "-I", "-c", code, NULL};
    struct ipd_sandbox_mount mounts[16];
    struct ipd_sandbox_spec spec;
    size_t n = 0;
    enum ipd_err rc;

    for (size_t i = 0; i < IPD_ARRAY_LEN(sbx_mounts); i++)
        mounts[n++] = sbx_mounts[i];
    for (size_t i = 0; i < n_extra && n < IPD_ARRAY_LEN(mounts); i++)
        mounts[n++] = extra[i];
    memset(&spec, 0, sizeof spec);
    spec.argv = argv;
    spec.mounts = mounts;
    spec.n_mounts = n;
    spec.host_uid = uid;
    if (stdin_data) {
        spec.stdin_data = stdin_data;
        spec.stdin_len = strlen(stdin_data);
    }
    sbx_guard_step("a cold run", p->wall_timeout_ms);
    rc = ipd_sandbox_run(&sbx_cfg, p, &spec, res);
    sbx_guard_done();
    sbx_report("run", rc, res);
    return rc;
}

/* sbx_run_cold_as as the config's host uid. */
IPD_UNUSED static enum ipd_err
sbx_run_cold(const struct ipd_sandbox_policy *p, const char *code,
             const char *stdin_data, const struct ipd_sandbox_mount *extra,
             size_t n_extra, struct ipd_sandbox_result *res)
{
    return sbx_run_cold_as(p, 0, code, stdin_data, extra, n_extra, res);
}

/* Session mode: whether the calling thread's last sbx_run* call ended
 * its session (sbx_session_ended). */
static _Thread_local bool sbx_last_ended;

/* In session mode, whether the calling thread's last sbx_run* call
 * ended its session (the program exited, was killed or timed out) as
 * want says (said on stderr when not); true in the other modes, which
 * have no session. */
IPD_UNUSED static bool sbx_session_ended(bool want)
{
    if (!sbx_session() || sbx_last_ended == want)
        return true;
    fprintf(stderr, "  the session call %s the session\n",
            sbx_last_ended ? "ended" : "did not end");
    return false;
}

/* Run code in the suite's mode as host uid (0: the config's): cold as
 * sbx_run_cold_as; warm in a parked child of uid's zygote, session as
 * the call of a fresh session of it (zt_run_mounts, zt_calls_mounts),
 * where extra must be stage mounts and stdin_data NULL: a case that
 * needs either calls sbx_run_cold_as. */
IPD_UNUSED static enum ipd_err
sbx_run_as(const struct ipd_sandbox_policy *p, uid_t uid, const char *code,
           const char *stdin_data, const struct ipd_sandbox_mount *extra,
           size_t n_extra, struct ipd_sandbox_result *res)
{
    struct zt *t;
    bool host_path = false;

    sbx_last_ended = false;
    if (!sbx_parked())
        return sbx_run_cold_as(p, uid, code, stdin_data, extra, n_extra, res);
    for (size_t i = 0; i < n_extra; i++)
        host_path = host_path || !extra[i].stage;
    sbx_result_init(res);
    if (stdin_data || host_path) {
        /* the case is wrong, not the sandbox: fail it loudly */
        fprintf(stderr,
                "  %s run: a parked child takes no %s; run this "
                "case with sbx_run_cold\n",
                sbx_mode(), stdin_data ? "stdin" : "host-path mount");
        return IPD_ERR_INVALID;
    }
    t = sbx_zygote(uid);
    if (!t)
        return IPD_ERR_UNAVAILABLE;
    if (sbx_session())
        return zt_calls_mounts(t, p, &code, 1, extra, n_extra, res,
                               &sbx_last_ended);
    return zt_run_mounts(t, p, code, extra, n_extra, res);
}

/* sbx_run_as as the config's host uid. */
IPD_UNUSED static enum ipd_err
sbx_run_mounts(const struct ipd_sandbox_policy *p, const char *code,
               const char *stdin_data, const struct ipd_sandbox_mount *extra,
               size_t n_extra, struct ipd_sandbox_result *res)
{
    return sbx_run_as(p, 0, code, stdin_data, extra, n_extra, res);
}

IPD_UNUSED static enum ipd_err sbx_run(const struct ipd_sandbox_policy *p,
                                       const char *code,
                                       struct ipd_sandbox_result *res)
{
    return sbx_run_mounts(p, code, NULL, NULL, 0, res);
}

/* Run codes[0..n-1] one after the other in the suite's mode as the
 * config's host uid, res[i] the result of codes[i] (each the caller's to
 * release): cold and warm as n runs (sbx_run), session as the n calls of
 * one fresh session (zt_calls_mounts: what a call leaves, the next one
 * has).  The first rc that is not IPD_OK, else IPD_OK. */
IPD_UNUSED static enum ipd_err sbx_run_seq(const struct ipd_sandbox_policy *p,
                                           const char *const *codes, size_t n,
                                           struct ipd_sandbox_result *res)
{
    enum ipd_err rc, first = IPD_OK;
    struct zt *t;

    sbx_last_ended = false;
    if (sbx_session()) {
        t = sbx_zygote(0);
        for (size_t i = 0; !t && i < n; i++)
            sbx_result_init(&res[i]);
        return t ? zt_calls_mounts(t, p, codes, n, NULL, 0, res,
                                   &sbx_last_ended)
                 : IPD_ERR_UNAVAILABLE;
    }
    for (size_t i = 0; i < n; i++) {
        rc = sbx_run(p, codes[i], &res[i]);
        first = first ? first : rc;
    }
    return first;
}

/* Stop warm and session mode's zygotes (each must end cleanly: exit 0,
 * nothing left over) and release the config. */
static void sbx_teardown(void)
{
    for (size_t i = 0; i < sbx_n_zt; i++) {
        zt_stop(&sbx_zt[i]);
        CHECK(sbx_zt_ready[i]);
        CHECK_INT(sbx_zt[i].rc, IPD_OK);
        CHECK_INT(sbx_zt[i].res.exit_code, 0);
        sbx_zt_ready[i] = false;
    }
    sbx_n_zt = 0;
    ipd_sandbox_config_release(&sbx_cfg);
}

/* ---- main ------------------------------------------------------------- */

/* The guard's own check (test_functional test_guard_names_a_hung_case):
 * with IPD_SANDBOX_GUARD_SELFTEST=<ms> in its environment a suite runs
 * only this case, which hangs, under a case allowance of ms. */
static void sbx_guard_selftest_hang(void)
{
    for (;;)
        pause();
}

/* The suites' main (SBX_TEST_MAIN): test.h's test_run over cases, with
 * the wall-clock guard armed for each. */
IPD_UNUSED static int sbx_main(const struct test_case *cases, size_t n)
{
    static const struct test_case hang[] = {
        {"sbx_guard_selftest_hang", sbx_guard_selftest_hang}};
    const char *selftest = getenv("IPD_SANDBOX_GUARD_SELFTEST");

    test__case_start = sbx_guard_case;
    if (selftest && *selftest) {
        sbx_guard_case_ms = strtoll(selftest, NULL, 10);
        return test_run(hang, 1);
    }
    return test_run(cases, n);
}

/* TEST_MAIN for the sandbox suites: each case under the guard. */
#define SBX_TEST_MAIN(...)                                                     \
    int main(void)                                                             \
    {                                                                          \
        static const struct test_case cases[] = {__VA_ARGS__};                 \
        return sbx_main(cases, IPD_ARRAY_LEN(cases));                          \
    }

#endif
