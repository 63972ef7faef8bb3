/*
 * test_zygote.c - warm runs: a parked child of a zygote is as isolated
 * as a cold run, gets its limits, and leaves nothing for the next one.
 */
/* Its own host uid: other suites' and services' processes never count. */
#define SBX_HOST_UID 201500
#include "zygote_test.h"

static struct zt zt;
static bool zt_ok;

static void test_start(void)
{
    REQUIRE(sbx_setup());
    zt_ok = zt_start(&zt, "numpy");
    CHECK(zt_ok);
}

static void test_hello(void)
{
    struct ipd_sandbox_policy p;
    struct ipd_sandbox_result r;

    REQUIRE(zt_ok);
    sbx_policy(&p);
    CHECK_INT(zt_run(&zt, &p, "print(1)\n", &r), IPD_OK);
    CHECK_INT(r.exit_code, 0);
    CHECK_STR(r.out.buf, "1\n");
    CHECK(r.output_dirfd >= 0);
    /* the prelude's result */
    int fd = ipd_sandbox_output_open(&r, ".interpd/result.json", O_RDONLY);
    CHECK(fd >= 0);
    if (fd >= 0)
        close(fd);
    ipd_sandbox_result_release(&r);
}

/* What a cold run's program sees of itself, the warm child sees too. */
static void test_locked_down(void)
{
    static const char code[] =
        "import os, sys\n"
        "st = dict(l.split(':\\t', 1) for l in open('/proc/self/status')"
        ".read().splitlines() if ':\\t' in l)\n"
        "print(os.getpid(), os.getuid(), os.getgid(), st['CapEff'], "
        "st['CapBnd'], st['NoNewPrivs'], st['Seccomp'])\n"
        "print('numpy' in sys.modules)\n"
        "print(os.listdir('/tmp'), os.listdir('/mnt/output') == ['.interpd'])\n"
        "for args in [(0x10000000,), (0x20000,)]:\n"
        "    import ctypes\n"
        "    libc = ctypes.CDLL(None, use_errno=True)\n"
        "    print(libc.unshare(*args), ctypes.get_errno())\n"
        "mi = open('/proc/self/mountinfo').read()\n"
        "print('oldroot' in mi, mi.count('\\n') < 30)\n"
        "print(sorted(os.listdir('/proc'))[:0], "
        "[p for p in os.listdir('/proc') if p.isdigit()])\n";
    struct ipd_sandbox_policy p;
    struct ipd_sandbox_result r;

    REQUIRE(zt_ok);
    sbx_policy(&p);
    CHECK_INT(zt_run(&zt, &p, code, &r), IPD_OK);
    CHECK_INT(r.exit_code, 0);
    CHECK_STR(r.out.buf, "2 1000 1000 0000000000000000 0000000000000000 1 2\n"
                         "True\n"
                         "[] True\n"
                         "-1 1\n"
                         "-1 1\n"
                         "False True\n"
                         "[] ['1', '2']\n");
    ipd_sandbox_result_release(&r);
}

/* A file in /tmp, a module patched, a global, a child left behind: the
 * next child of the same zygote sees none of it. */
static void test_no_leak_between_children(void)
{
    static const char first[] =
        "import os, subprocess, numpy\n"
        "open('/tmp/left', 'w').write('x')\n"
        "os.environ['LEFT'] = '1'\n"
        "numpy.LEFT = 1\n"
        "open('/mnt/output/out.txt', 'w').write('x')\n"
        "subprocess.Popen(['/usr/bin/sleep', '60'], start_new_session=True)\n"
        "print('done')\n";
    static const char second[] =
        "import os, numpy\n"
        "print(os.path.exists('/tmp/left'), 'LEFT' in os.environ, "
        "hasattr(numpy, 'LEFT'), sorted(os.listdir('/mnt/output')))\n";
    struct ipd_sandbox_policy p;
    struct ipd_sandbox_result r;

    REQUIRE(zt_ok);
    sbx_policy(&p);
    CHECK_INT(zt_run(&zt, &p, first, &r), IPD_OK);
    CHECK_STR(r.out.buf, "done\n");
    ipd_sandbox_result_release(&r);
    /* only the zygote and its init: the child's sleep is gone */
    CHECK_INT(test_count_uids(sbx_uid_base(), sbx_uid_base()), 2);
    CHECK_INT(zt_run(&zt, &p, second, &r), IPD_OK);
    CHECK_STR(r.out.buf, "False False False ['.interpd']\n");
    ipd_sandbox_result_release(&r);
}

static void test_timeout_then_next(void)
{
    struct ipd_sandbox_policy p;
    struct ipd_sandbox_result r;

    REQUIRE(zt_ok);
    sbx_policy(&p);
    p.wall_timeout_ms = 300;
    CHECK_INT(zt_run(&zt, &p, "print('a', flush=True)\nwhile True: pass\n", &r),
              IPD_OK);
    CHECK(r.timed_out);
    CHECK_STR(r.out.buf, "a\n");
    ipd_sandbox_result_release(&r);
    sbx_policy(&p);
    CHECK_INT(zt_run(&zt, &p, "print(2)\n", &r), IPD_OK);
    CHECK_STR(r.out.buf, "2\n");
    ipd_sandbox_result_release(&r);
}

static void test_memory_limit(void)
{
    struct ipd_sandbox_policy p;
    struct ipd_sandbox_result r;

    REQUIRE(zt_ok);
    sbx_policy(&p);
    p.memory_bytes = 96LL << 20;
    CHECK_INT(zt_run(&zt, &p, "x = bytearray(400 << 20)\nprint(len(x))\n", &r),
              IPD_OK);
    CHECK(r.oom_killed || r.exit_code != 0);
    CHECK(r.oom_killed);
    ipd_sandbox_result_release(&r);
}

static void test_process_limit(void)
{
    static const char code[] =
        "import os\n"
        "n = 0\n"
        "try:\n"
        "    for i in range(100):\n"
        "        if os.fork() == 0:\n"
        "            import time; time.sleep(30); os._exit(0)\n"
        "        n += 1\n"
        "except OSError as e:\n"
        "    print('stopped', n < 20)\n";
    struct ipd_sandbox_policy p;
    struct ipd_sandbox_result r;

    REQUIRE(zt_ok);
    sbx_policy(&p);
    p.max_processes = 8;
    p.wall_timeout_ms = 5000;
    CHECK_INT(zt_run(&zt, &p, code, &r), IPD_OK);
    CHECK_STR(r.out.buf, "stopped True\n");
    ipd_sandbox_result_release(&r);
}

static int write_code(struct ipd_sandbox_stage *st, const char *code)
{
    int fd = openat(ipd_sandbox_stage_fd(st), "job/code.py",
                    O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    int rc = fd >= 0 && write(fd, code, strlen(code)) == (ssize_t)strlen(code)
                 ? 0
                 : -1;
    if (fd >= 0)
        close(fd);
    return rc;
}

/* A session's child keeps its interpreter between calls; a timeout ends
 * it. */
static void test_session(void)
{
    struct ipd_sandbox_policy p;
    struct ipd_sandbox_result r;
    struct ipd_sandbox_stage *st = NULL;
    struct ipd_sandbox_parked *pk = NULL;
    char err[256], buf[4096];
    bool ended = false;
    int fd;

    REQUIRE(zt_ok);
    sbx_policy(&p);
    REQUIRE(!ipd_sandbox_stage_new(16 << 20, 64, NULL, &st, err, sizeof err));
    REQUIRE(!zt_mkdirs(st));
    struct ipd_sandbox_mount m[] = {{"job", "/mnt/job", false, st},
                                    {"data", "/mnt/data", false, st}};
    REQUIRE(!ipd_sandbox_park(zt.z, &p, m, 2, IPD_SANDBOX_PARK_SESSION, NULL,
                              30000, &pk, err, sizeof err));
    CHECK(!write_code(st, "x = 41\nprint('one')\nopen('a.txt', 'w')\n"));
    CHECK_INT(
        ipd_sandbox_parked_call(pk, IPD_ZPROTO_GO, 5000, NULL, &r, &ended),
        IPD_OK);
    CHECK(!ended);
    CHECK_INT(r.exit_code, 0);
    CHECK_STR(r.out.buf, "one\n");
    ipd_sandbox_result_release(&r);
    CHECK(!write_code(st, "x += 1\nprint(x)\nimport sys; sys.exit(3)\n"));
    CHECK_INT(
        ipd_sandbox_parked_call(pk, IPD_ZPROTO_GO, 5000, NULL, &r, &ended),
        IPD_OK);
    CHECK(!ended);
    CHECK_INT(r.exit_code, 3);
    CHECK_STR(r.out.buf, "42\n");
    ipd_sandbox_result_release(&r);
    CHECK_INT(ipd_sandbox_parked_call(pk, IPD_ZPROTO_VARIABLES, 5000, NULL, &r,
                                      &ended),
              IPD_OK);
    fd = ipd_sandbox_output_open(&r, ".interpd/variables.json", O_RDONLY);
    CHECK(fd >= 0);
    ssize_t n = fd >= 0 ? read(fd, buf, sizeof buf - 1) : -1;
    buf[n > 0 ? n : 0] = '\0';
    CHECK(strstr(buf, "{\"name\": \"x\", \"type\": \"int\", "
                      "\"repr\": \"42\"}") != NULL);
    if (fd >= 0)
        close(fd);
    ipd_sandbox_result_release(&r);
    CHECK(!write_code(st, "print('loop', flush=True)\nwhile True: pass\n"));
    CHECK_INT(ipd_sandbox_parked_call(pk, IPD_ZPROTO_GO, 300, NULL, &r, &ended),
              IPD_OK);
    CHECK(ended);
    CHECK(r.timed_out);
    CHECK_STR(r.out.buf, "loop\n");
    ipd_sandbox_result_release(&r);
    ipd_sandbox_parked_free(pk);
    ipd_sandbox_stage_free(st);
}

static void test_stop(void)
{
    REQUIRE(zt_ok);
    zt_stop(&zt);
    CHECK_INT(zt.rc, IPD_OK);
    CHECK_INT(zt.res.exit_code, 0);
    CHECK_INT(test_count_uids(sbx_uid_base(), sbx_uid_base()), 0);
    sbx_teardown();
}

SBX_TEST_MAIN(T(test_start), T(test_hello), T(test_locked_down),
              T(test_no_leak_between_children), T(test_timeout_then_next),
              T(test_memory_limit), T(test_process_limit), T(test_session),
              T(test_stop))
