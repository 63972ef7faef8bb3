/*
 * venv_cmd.c - the venv's runner (venv/venv.h): its commands (venv
 * creation, pip, the import check) run in the sandbox, and what a new
 * current generation changes here (its private copy, the warm zygotes).
 */
#include <string.h>
#include <unistd.h>

#include "../../venv/venv.h"
#include "exec_internal.h"

/* Run one of the venv's commands (venv creation, pip, the import check)
 * in the sandbox: the generation bound at /opt/venv (writable for pip),
 * network only for pip, the resolver and CA certificates then too. */
static enum ipd_err venv_cmd_run(void *ctx, struct ipd_venv_cmd *cmd)
{
    struct ipd_executor *ex = ctx;
    struct ipd_sandbox_mount mounts[16];
    struct ipd_sandbox_spec spec;
    struct ipd_sandbox_policy p;
    struct ipd_sandbox_result r;
    size_t n = ipd__system_mounts(ex, mounts);
    /* (the sandbox writes its own nsswitch.conf and hosts) */
    static const char *const net_files[] = {"/etc/resolv.conf",
                                            "/etc/ssl/certs"};
    if (cmd->gen_dir)
        mounts[n++] = (struct ipd_sandbox_mount){cmd->gen_dir, IPD_VENV_MOUNT,
                                                 cmd->gen_writable, NULL};
    if (cmd->cache_dir)
        mounts[n++] = (struct ipd_sandbox_mount){
            cmd->cache_dir, IPD_VENV_PIP_CACHE_MOUNT, true, NULL};
    if (cmd->links_dir)
        mounts[n++] = (struct ipd_sandbox_mount){
            cmd->links_dir, IPD_VENV_LINKS_MOUNT, false, NULL};
    if (cmd->tools_dir)
        mounts[n++] = (struct ipd_sandbox_mount){
            cmd->tools_dir, IPD_VENV_TOOLS_MOUNT, false, NULL};
    for (size_t i = 0; cmd->network && i < IPD_ARRAY_LEN(net_files); i++)
        if (!access(net_files[i], R_OK))
            mounts[n++] = (struct ipd_sandbox_mount){net_files[i], net_files[i],
                                                     false, NULL};
    memset(&spec, 0, sizeof(spec));
    spec.argv = cmd->argv;
    spec.mounts = mounts;
    spec.n_mounts = n;
    spec.cwd = "/tmp";
    ipd_sandbox_policy_default(&p);
    p.name = "venv";
    p.wall_timeout_ms = cmd->timeout_ms;
    p.cpu_seconds = ipd_sandbox_cpu_seconds(cmd->timeout_ms);
    p.memory_bytes = 2LL << 30;
    p.max_processes = 256;
    p.output_cap_bytes = cmd->out.max ? cmd->out.max : 4 << 20;
    /* pip unpacks wheels under /tmp before moving them into place. */
    p.tmp_bytes = 2LL << 30;
    p.tmp_inodes = 1 << 20;
    p.fsize_bytes = 2LL << 30;
    p.nofile = 1024;
    p.network = cmd->network;
    memset(&r, 0, sizeof(r));
    r.output_dirfd = -1;
    struct ipd_egress_stats st;
    enum ipd_err rc = ipd__run_sandboxed(ex, &p, &spec, &r, &st);
    if (rc) {
        ipd_buf_adds(&cmd->err, r.error);
    } else {
        /* pip says only "from versions: none" when the proxy answered
         * 403 or 502: its reason first, for venv/pip_diag.c. */
        if (st.last[0])
            ipd_buf_addf(&cmd->err, "interpd egress: %s\n", st.last);
        cmd->exit_code = r.exit_code;
        cmd->timed_out = r.timed_out;
        ipd_buf_add(&cmd->out, r.out.buf, r.out.len);
        /* Past the cap, the end of stderr: pip's ERROR line is there. */
        size_t skip = cmd->err.max && r.err.len > cmd->err.max - cmd->err.len
                          ? r.err.len - (cmd->err.max - cmd->err.len)
                          : 0;
        ipd_buf_add(&cmd->err, r.err.buf + skip, r.err.len - skip);
    }
    ipd_sandbox_result_release(&r);
    return rc;
}

static void venv_activated(void *ctx, const char *gen_dir)
{
    ipd__vstage_activate(ctx, gen_dir);
    ipd__warm_generation(ctx);
}

void ipd_executor_venv_runner(struct ipd_executor *ex,
                              struct ipd_venv_runner *out)
{
    out->run = venv_cmd_run;
    out->activated = venv_activated;
    out->ctx = ex;
}
