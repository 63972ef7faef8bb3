/*
 * sandbox_test.h - shared helpers of the sandbox escape suite: probe once
 * (a probe failure fails every test, never skips), run a Python snippet
 * with /usr/bin/python3 under a real policy.
 */
#ifndef IPD_SANDBOX_TEST_H
#define IPD_SANDBOX_TEST_H

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include "service/sandbox/sandbox.h"
#include "test.h"

static struct ipd_sandbox_config sbx_cfg;
static bool sbx_probed, sbx_ok;

/* The suite's host uid: its own, so counting survivors is not disturbed
 * by other suites running at the same time. */
#ifndef SBX_HOST_UID
#define SBX_HOST_UID 200000
#endif

static bool sbx_setup(void)
{
    if (!sbx_probed) {
        sbx_probed = true;
        memset(&sbx_cfg, 0, sizeof sbx_cfg);
        if (geteuid() == 0) {
            sbx_cfg.host_uid = SBX_HOST_UID;
            sbx_cfg.host_gid = SBX_HOST_UID;
        }
        sbx_ok = ipd_sandbox_probe(&sbx_cfg) == IPD_OK;
        fprintf(stderr, "%s\n", sbx_cfg.status);
    }
    return sbx_ok;
}

static void sbx_teardown(void)
{
    ipd_sandbox_config_release(&sbx_cfg);
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

/* Run code with python3 -I -c; extra mounts appended to the system ones. */
static enum ipd_err sbx_run_mounts(const struct ipd_sandbox_policy *p,
                                   const char *code, const char *stdin_data,
                                   const struct ipd_sandbox_mount *extra,
                                   size_t n_extra,
                                   struct ipd_sandbox_result *res)
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
    if (stdin_data) {
        spec.stdin_data = stdin_data;
        spec.stdin_len = strlen(stdin_data);
    }
    rc = ipd_sandbox_run(&sbx_cfg, p, &spec, res);
    if (rc || res->exit_code != 0)
        fprintf(stderr,
                "  run: rc=%d exit=%d sig=%d timeout=%d oom=%d error=%s\n"
                "  stdout: %.2000s\n  stderr: %.2000s\n",
                rc, res->exit_code, res->term_signal, res->timed_out,
                res->oom_killed, res->error, res->out.buf, res->err.buf);
    return rc;
}

IPD_UNUSED static enum ipd_err sbx_run(const struct ipd_sandbox_policy *p,
                            const char *code, struct ipd_sandbox_result *res)
{
    return sbx_run_mounts(p, code, NULL, NULL, 0, res);
}

/* Processes on the host whose real uid is uid (from /proc/<pid>/status). */
IPD_UNUSED static int sbx_count_uid(uid_t uid)
{
    DIR *d = opendir("/proc");
    struct dirent *e;
    int count = 0;

    if (!d)
        return -1;
    while ((e = readdir(d)) != NULL) {
        char path[300], buf[4096];
        FILE *f;
        if (e->d_name[0] < '0' || e->d_name[0] > '9')
            continue;
        snprintf(path, sizeof path, "/proc/%s/status", e->d_name);
        f = fopen(path, "r");
        if (!f)
            continue;
        while (fgets(buf, sizeof buf, f)) {
            unsigned r;
            if (sscanf(buf, "Uid:\t%u", &r) == 1) {
                if (r == (unsigned)uid)
                    count++;
                break;
            }
        }
        fclose(f);
    }
    closedir(d);
    return count;
}

#endif
