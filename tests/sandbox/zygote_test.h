/*
 * zygote_test.h - a zygote for sandbox tests (sandbox.h, "Warm runs"):
 * service/exec/python/zygote.py run in its own thread from the source
 * tree's prelude directory, and parked children with a job/ and data/
 * stage.  Needs root (detached stages).
 */
#ifndef IPD_ZYGOTE_TEST_H
#define IPD_ZYGOTE_TEST_H

#include <pthread.h>

#include "sandbox_test.h"

struct zt {
    struct ipd_sandbox_zygote *z;
    struct ipd_sandbox_stage *st; /* the zygote's job/, data/ (empty) */
    pthread_t th;
    struct ipd_sandbox_result res;
    enum ipd_err rc;
    const char *modules; /* IPD_WARM_MODULES */
};

static void *zt_thread(void *arg)
{
    struct zt *t = arg;
    const char *argv[] = {"/usr/bin/python3", "-u", "-I", "-B",
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
    mounts[n++] = (struct ipd_sandbox_mount){"job", "/mnt/job", false, t->st};
    mounts[n++] = (struct ipd_sandbox_mount){"data", "/mnt/data", false,
                                             t->st};
    memset(&spec, 0, sizeof spec);
    spec.argv = argv;
    spec.env = env;
    spec.mounts = mounts;
    spec.n_mounts = n;
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
    return mkdirat(fd, "job", 0755) || mkdirat(fd, "data", 0755) ? -1 : 0;
}

/* Start a zygote importing modules and wait until it is ready. */
IPD_UNUSED static bool zt_start(struct zt *t, const char *modules)
{
    char err[256], why[256];

    memset(t, 0, sizeof *t);
    t->modules = modules;
    if (ipd_sandbox_stage_new(1 << 20, 64, NULL, &t->st, err, sizeof err) ||
        zt_mkdirs(t->st) || ipd_sandbox_zygote_new(&sbx_cfg, &t->z)) {
        fprintf(stderr, "zygote setup: %s\n", err);
        return false;
    }
    if (pthread_create(&t->th, NULL, zt_thread, t))
        return false;
    if (ipd_sandbox_zygote_wait_ready(t->z, 120000, why, sizeof why)) {
        fprintf(stderr, "zygote not ready: %s\n", why);
        return false;
    }
    return true;
}

IPD_UNUSED static void zt_stop(struct zt *t)
{
    ipd_sandbox_zygote_stop(t->z);
    pthread_join(t->th, NULL);
    if (t->rc || t->res.exit_code != 0)
        fprintf(stderr, "zygote ended: rc=%d exit=%d sig=%d %s\n%.4000s\n",
                t->rc, t->res.exit_code, t->res.term_signal, t->res.error,
                t->res.err.buf);
    ipd_sandbox_result_release(&t->res);
    ipd_sandbox_zygote_free(t->z);
    ipd_sandbox_stage_free(t->st);
}

/* Run code in a parked child of t under p (the prelude's job: code.py
 * in /mnt/job). */
IPD_UNUSED static enum ipd_err zt_run(struct zt *t,
                                      const struct ipd_sandbox_policy *p,
                                      const char *code,
                                      struct ipd_sandbox_result *res)
{
    struct ipd_sandbox_stage *st = NULL;
    struct ipd_sandbox_parked *pk = NULL;
    char err[256];
    enum ipd_err rc;
    int fd;

    memset(res, 0, sizeof *res);
    res->output_dirfd = -1;
    if (ipd_sandbox_stage_new(16 << 20, 64, NULL, &st, err, sizeof err) ||
        zt_mkdirs(st)) {
        fprintf(stderr, "stage: %s\n", err);
        ipd_sandbox_stage_free(st);
        return IPD_ERR_INTERNAL;
    }
    struct ipd_sandbox_mount m[] = {{"job", "/mnt/job", false, st},
                                    {"data", "/mnt/data", false, st}};
    rc = ipd_sandbox_park(t->z, p, m, 2, 0, 30000, &pk, err, sizeof err);
    if (rc) {
        fprintf(stderr, "park: %s\n", err);
        ipd_sandbox_stage_free(st);
        return rc;
    }
    fd = openat(ipd_sandbox_stage_fd(st), "job/code.py",
                O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0 || write(fd, code, strlen(code)) != (ssize_t)strlen(code)) {
        ipd_sandbox_parked_free(pk);
        ipd_sandbox_stage_free(st);
        if (fd >= 0)
            close(fd);
        return IPD_ERR_IO;
    }
    close(fd);
    rc = ipd_sandbox_parked_run(pk, 0, res);
    if (rc || res->exit_code != 0)
        fprintf(stderr,
                "  warm run: rc=%d exit=%d sig=%d timeout=%d oom=%d error=%s\n"
                "  stdout: %.2000s\n  stderr: %.2000s\n",
                rc, res->exit_code, res->term_signal, res->timed_out,
                res->oom_killed, res->error, res->out.buf, res->err.buf);
    ipd_sandbox_stage_free(st);
    return rc;
}

#endif
