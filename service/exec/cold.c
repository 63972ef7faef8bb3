/*
 * cold.c - a program run in a fresh sandbox, with the egress proxy when
 * its policy has network (ipd__run_sandboxed; the venv's commands use it
 * too), and a cold run of the prelude on a staged job (ipd__cold_run: a
 * fresh interpreter, what a run is without a parked child).
 */
#include <string.h>

#include "../common/log.h"
#include "exec_internal.h"

/* The proxy environment of a networked run: its HTTP clients (urllib,
 * requests, pip) send everything to the egress proxy, which resolves
 * names and applies the SSRF guard.  No NO_PROXY: loopback URLs go
 * through the proxy too (the run's own loopback holds nothing else). */
#define STR_(x) #x
#define STR(x) STR_(x)
#define EGRESS_URL "http://127.0.0.1:" STR(IPD_SANDBOX_EGRESS_PORT)
static const char *const egress_env[] = {
    "HTTP_PROXY=" EGRESS_URL,
    "HTTPS_PROXY=" EGRESS_URL,
    "http_proxy=" EGRESS_URL,
    "https_proxy=" EGRESS_URL,
};

/* One run's proxy: started when the sandbox hands over the egress
 * socket, stopped (every thread joined) after the run. */
struct egress_run {
    const struct ipd_egress_opts *opts;
    struct ipd_egress *eg;
};

static void egress_begin(void *ctx, int listen_fd)
{
    struct egress_run *er = ctx;

    if (ipd_egress_start(er->opts, listen_fd, &er->eg))
        ipd_log(IPD_LOG_WARN, "executor: a networked run has no way out: "
                              "its proxy could not start");
}

static void egress_end(struct egress_run *er, struct ipd_egress_stats *st)
{
    ipd_egress_stop(er->eg, st);
    if (st->accepted)
        ipd_log(IPD_LOG_DEBUG,
                "executor: the run's proxy took %u "
                "connections, refused %u, failed %u",
                st->accepted, st->refused, st->failed);
    er->eg = NULL;
}

/* Run spec under p, with the proxy when p has network: its environment
 * appended to spec->env (at most 16 entries there); what the proxy did
 * in *st. */
enum ipd_err ipd__run_sandboxed(struct ipd_executor *ex,
                                const struct ipd_sandbox_policy *p,
                                struct ipd_sandbox_spec *spec,
                                struct ipd_sandbox_result *r,
                                struct ipd_egress_stats *st)
{
    struct egress_run er = {&ex->egress, NULL};
    const char *env[16 + IPD_ARRAY_LEN(egress_env) + 1];
    const char *const *caller_env = spec->env;
    size_t n = 0;
    enum ipd_err rc;

    for (; spec->env && spec->env[n] && n < 16; n++)
        env[n] = spec->env[n];
    IPD_ASSERT(!spec->env || !spec->env[n]);
    for (size_t i = 0; p->network && i < IPD_ARRAY_LEN(egress_env); i++)
        env[n++] = egress_env[i];
    env[n] = NULL;
    spec->env = env;
    if (p->network) {
        spec->egress = egress_begin;
        spec->egress_ctx = &er;
    }
    rc = ipd_sandbox_run(&ex->sbx, p, spec, r);
    egress_end(&er, st);
    spec->env = caller_env; /* env[] ends here */
    spec->egress = NULL;
    return rc;
}

enum ipd_err ipd__cold_run(struct ipd_executor *ex, struct ipd__run_stage *wk,
                           const struct ipd_exec_policy *ep, int64_t timeout_ms,
                           const char *gen_dir, bool build_mpl,
                           struct ipd_sandbox_result *r)
{
    /* With a venv generation: its interpreter, bound read-only for the
     * whole run (the caller holds the generation until we return). */
    const char *argv[] = {ipd__run_python(ex, gen_dir), "-u", "-I", "-B",
                          "/opt/interpd/prelude.py",    NULL};
    const char *env[IPD__RUN_ENV_MAX], *mpl_env;
    struct ipd_sandbox_mount mounts[IPD__RUN_MOUNTS_MAX];
    struct ipd_sandbox_spec spec;
    struct ipd_sandbox_policy p;
    struct ipd__vstage *vhold = NULL;
    const struct ipd_sandbox_stage *vst = ipd__vstage_hold(ex, gen_dir, &vhold);
    size_t n = ipd__run_mounts(ex, wk->stage, gen_dir, vst, build_mpl, mounts,
                               &mpl_env);

    ipd__run_env(env, mpl_env, NULL);
    memset(&spec, 0, sizeof(spec));
    spec.argv = argv;
    spec.env = env;
    spec.mounts = mounts;
    spec.n_mounts = n;
    spec.cwd = "/mnt/output";
    spec.host_uid = wk->host_uid;
    spec.live = wk->live;
    ipd__policy_to_sandbox(ep, timeout_ms, &p);
    struct ipd_egress_stats st;
    enum ipd_err rc = ipd__run_sandboxed(ex, &p, &spec, r, &st);
    ipd__vstage_drop(ex, vhold);
    return rc;
}
