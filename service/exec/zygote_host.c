/*
 * zygote_host.c - hosting one zygote (sandbox.h, "Warm runs";
 * service/exec/python/zygote.py) on the venv's current generation: its
 * stage, mounts, environment and limits, and its run, which blocks for
 * the zygote's life.  Warm slots (warm.c) and sessions (session.c) each
 * run theirs from a thread of their own through ipd__zygote_serve.
 */
#include <stdio.h>
#include <string.h>

#include "../../venv/venv.h"
#include "../common/util.h"
#include "exec_internal.h"

#define ZYGOTE_MEMORY_MIN (1LL << 30)

static int64_t zygote_memory(const struct ipd_executor *ex)
{
    int64_t m = ZYGOTE_MEMORY_MIN;
    for (size_t i = 0; i < ex->n_policies; i++)
        if (ex->policies[i].memory_bytes > m)
            m = ex->policies[i].memory_bytes;
    return m;
}

/* The zygote's own limits: the standard policy's, with room for the
 * imports and for every policy's children (their rlimits can only be
 * lowered below the zygote's). */
static void zygote_policy(const struct ipd_executor *ex, int64_t life_ms,
                          struct ipd_sandbox_policy *p)
{
    int64_t max_to = 0;

    ipd__policy_to_sandbox(ipd__policy_find(ex, "standard"), life_ms, p);
    for (size_t i = 0; i < ex->n_policies; i++) {
        const struct ipd_exec_policy *ep = &ex->policies[i];
        if (ep->max_timeout_ms > max_to)
            max_to = ep->max_timeout_ms;
        if (ep->tmp_bytes > p->fsize_bytes)
            p->fsize_bytes = ep->tmp_bytes;
        if (ep->output_dir_bytes > p->fsize_bytes)
            p->fsize_bytes = ep->output_dir_bytes;
    }
    p->name = "zygote";
    p->memory_bytes = zygote_memory(ex);
    p->cpu_seconds = (life_ms + max_to) / 1000 + 60;
    p->network = false;
}

/* The zygote's program: the prelude's mounts and environment with the
 * warm modules (modules[] holds that entry) and the adaptive set's plan
 * (plan: its two entries, or NULL), cwd /tmp. */
static void zygote_spec(struct ipd_executor *ex,
                        const struct ipd__run_stage *zw, const char *gen_dir,
                        const struct ipd_sandbox_stage *vst, const char **argv,
                        const char **env, char *modules, size_t modlen,
                        const char *const *plan,
                        struct ipd_sandbox_mount *mounts,
                        struct ipd_sandbox_spec *spec)
{
    const char *mpl_env;
    const char *extra[4] = {modules, NULL};

    snprintf(modules, modlen, "IPD_WARM_MODULES=%s", ex->warm_modules);
    if (plan && plan[0][0] && plan[1][0]) {
        extra[1] = plan[0];
        extra[2] = plan[1];
    }
    memset(spec, 0, sizeof(*spec));
    spec->mounts = mounts;
    spec->n_mounts =
        ipd__run_mounts(ex, zw->stage, gen_dir, vst, true, mounts, &mpl_env);
    ipd__run_env(env, mpl_env, extra);
    spec->argv = argv;
    spec->env = env;
    spec->cwd = "/tmp";
    spec->host_uid = zw->host_uid;
}

enum ipd_err ipd__zygote_serve(struct ipd_executor *ex,
                               struct ipd_sandbox_zygote *z, uid_t uid,
                               int64_t life_ms, const char *const *plan,
                               void (*started)(void *ctx, const char *gen),
                               void *ctx, struct ipd_sandbox_result *r,
                               char *why, size_t whylen)
{
    struct ipd__run_stage zw;
    struct ipd_venv_gen *gen = NULL;
    struct ipd__vstage *vhold = NULL;
    struct ipd_buf err;
    enum ipd_err rc = IPD_ERR_UNAVAILABLE;
    char modules[300];

    ipd_buf_init(&err, 512);
    memset(&zw, 0, sizeof(zw));
    zw.job_fd = zw.data_fd = -1;
    memset(r, 0, sizeof(*r));
    r->output_dirfd = -1;
    if (ex->venv && ipd_venv_acquire(ex->venv, &gen)) {
        snprintf(why, whylen, "the venv is busy");
        goto out;
    }
    const char *gen_dir = ipd_venv_gen_dir(gen);
    const struct ipd_sandbox_stage *vst = ipd__vstage_hold(ex, gen_dir, &vhold);
    if (ipd__run_stage_create(ex, &zw, NULL, uid, &err)) {
        snprintf(why, whylen, "staging: %s", err.buf);
        goto out;
    }
    const char *argv[] = {ipd__run_python(ex, gen_dir), "-u", "-I", "-B",
                          "/opt/interpd/zygote.py",     NULL};
    const char *env[IPD__RUN_ENV_MAX];
    struct ipd_sandbox_mount mounts[IPD__RUN_MOUNTS_MAX];
    struct ipd_sandbox_spec spec;
    struct ipd_sandbox_policy p;

    zygote_spec(ex, &zw, gen_dir, vst, argv, env, modules, sizeof(modules),
                plan, mounts, &spec);
    zygote_policy(ex, life_ms, &p);
    if (started)
        started(ctx, gen_dir ? gen_dir : "");
    rc = ipd_sandbox_zygote_run(z, &p, &spec, r);
out:
    ipd__run_stage_remove(&zw);
    ipd__vstage_drop(ex, vhold);
    ipd_venv_release(ex->venv, gen);
    ipd_buf_release(&err);
    return rc;
}
