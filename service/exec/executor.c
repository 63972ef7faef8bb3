/*
 * executor.c - the executor: its construction and options, and one
 * execution (ipd_executor_run): check the request, then a session's call
 * goes to session.c (ipd__session_call); any other run installs its
 * packages (packages.c), stages its job (stage.c), runs in the slot's
 * parked child (warm.c) or else cold (cold.c), once more after an
 * automatic install, and result.c builds its result.  The readiness
 * check is probe.c's, the venv's command runner venv_cmd.c's.
 */
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include "../../venv/venv.h"
#include "../common/live.h"
#include "../common/log.h"
#include "../common/util.h"
#include "exec_internal.h"

#include "request.h" /* IPD_EXEC_CODE_MAX, IPD_EXEC_FILES_MAX */

/* ---- policy ---------------------------------------------------------- */

const struct ipd_exec_policy *ipd__policy_find(const struct ipd_executor *ex,
                                               const char *name)
{
    if (!name)
        name = "standard";
    for (size_t i = 0; i < ex->n_policies; i++)
        if (!strcmp(ex->policies[i].name, name))
            return &ex->policies[i];
    return NULL;
}

void ipd__policy_to_sandbox(const struct ipd_exec_policy *ep,
                            int64_t timeout_ms, struct ipd_sandbox_policy *p)
{
    ipd_sandbox_policy_default(p);
    p->name = ep->name;
    p->wall_timeout_ms = timeout_ms;
    p->cpu_seconds = ipd_sandbox_cpu_seconds(timeout_ms);
    p->memory_bytes = ep->memory_bytes;
    p->max_processes = ep->max_processes;
    p->output_cap_bytes = (size_t)ep->output_bytes;
    p->tmp_bytes = ep->tmp_bytes;
    p->output_dir_bytes = ep->output_dir_bytes;
    p->cpu_millis = ep->cpu_millis;
    p->fsize_bytes = ep->tmp_bytes > ep->output_dir_bytes
                         ? ep->tmp_bytes
                         : ep->output_dir_bytes;
    p->network = ep->network;
}

/* ---- construction ---------------------------------------------------- */

void ipd_executor_options_default(struct ipd_executor_options *o)
{
    memset(o, 0, sizeof(*o));
    o->max_file_size = 50 * 1024 * 1024;
    o->file_ttl_ms = IPD_TIME_NEVER;
    o->quota.max_files = -1;
    o->quota.max_bytes = -1;
    o->tenant_quota.max_files = -1;
    o->tenant_quota.max_bytes = -1;
    o->python = "/usr/bin/python3";
    o->prelude_dir = NULL;
    o->max_generated_files = 20;
    o->inline_image_max = 1024 * 1024;
    o->sandbox_uid = 0;
    o->venv_stage_max = 1LL << 30;
    o->warm = true;
    o->warm_modules = NULL;
    o->warm_recycle_runs = 1000;
    o->warm_recycle_ms = 60LL * 60 * 1000;
    o->warm_memory_budget = IPD_WARM_MEMORY_BUDGET_DEFAULT;
    o->warm_adapt_runs = 100;
    o->max_sessions = 8;
    o->sessions_per_user = 3;
    o->sessions_memory = 8LL << 30;
    o->session_idle_ms = 20LL * 60 * 1000;
    o->session_max_life_ms = 8LL * 3600 * 1000;
}

/*
 * Where prelude.py lives when the options don't say: CMake should pass
 * -DIPD_PRELUDE_DIR="${CMAKE_SOURCE_DIR}/service/python" (an installed
 * build, the install location).  Without it: <dir of this source
 * file>/python, or NULL when __FILE__ is relative.  New string, free().
 */
static char *default_prelude_dir(void)
{
#ifdef IPD_PRELUDE_DIR
    return ipd_xstrdup(IPD_PRELUDE_DIR);
#else
    const char *file = __FILE__;
    const char *slash = strrchr(file, '/');
    struct ipd_buf b;
    if (file[0] != '/' || !slash)
        return NULL;
    ipd_buf_init(&b, PATH_MAX);
    if (ipd_buf_add(&b, file, (size_t)(slash - file)) ||
        ipd_buf_adds(&b, "/python")) {
        ipd_buf_release(&b);
        return NULL;
    }
    return ipd_buf_detach(&b, NULL);
#endif
}

/* What older versions staged in the data dir: <data-dir>/exec (work
 * dirs) and <data-dir>/mplcache (the font cache, owned by the sandbox's
 * uid).  Nothing uses them now; removing them keeps the data dir the
 * service's alone. */
static void remove_legacy_dirs(const char *data_dir)
{
    static const char *const names[] = {"exec", "mplcache"};
    int dd = open(data_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);

    if (dd < 0)
        return;
    for (size_t i = 0; i < IPD_ARRAY_LEN(names); i++) {
        struct stat st;
        if (fstatat(dd, names[i], &st, AT_SYMLINK_NOFOLLOW) == 0) {
            ipd_info("executor: removing %s/%s (older versions staged runs "
                     "there)",
                     data_dir, names[i]);
            (void)ipd_remove_tree_at(dd, names[i]);
        }
    }
    close(dd);
}

/* As root, the sandbox's uid (internal runs) and one per slot after it:
 * none may be anybody's (a passwd or group entry). */
static enum ipd_err check_uid_range(struct ipd_executor *ex)
{
    char why[256];

    if (geteuid() != 0)
        return IPD_OK;
    if (ipd_sandbox_check_ids(ex->sbx.host_uid,
                              ex->slots + 1 + ex->sess_cfg.max, why,
                              sizeof(why))) {
        ipd_error("executor: the sandbox's host ids %u-%u (--sandbox-uid, "
                  "one per execution slot and one per session) must "
                  "belong to nobody: %s",
                  (unsigned)ex->sbx.host_uid,
                  (unsigned)(ex->sbx.host_uid + ex->slots + ex->sess_cfg.max),
                  why);
        return IPD_ERR_UNAVAILABLE;
    }
    return IPD_OK;
}

/* A run's limits, policies, quotas and slots from opt. */
static void run_options(struct ipd_executor *ex,
                        const struct ipd_executor_options *opt)
{
    ex->max_file_size = opt->max_file_size;
    ex->n_policies = opt->n_policies < IPD_EXEC_POLICIES_MAX
                         ? opt->n_policies
                         : IPD_EXEC_POLICIES_MAX;
    memcpy(ex->policies, opt->policies,
           ex->n_policies * sizeof(ex->policies[0]));
    ex->file_ttl_ms = opt->file_ttl_ms;
    ex->tenant_quota = opt->tenant_quota;
    ex->tenant_quota.tenant = NULL;
    ex->quota = opt->quota;
    ex->quota.tenant = &ex->tenant_quota;
    ex->max_generated =
        opt->max_generated_files > 0 ? (size_t)opt->max_generated_files : 20;
    ex->inline_max = opt->inline_image_max >= 0 ? opt->inline_image_max : 0;
    ex->slots = opt->slots ? opt->slots : 1;
    ex->egress.allow = opt->egress_allow;
    ex->egress.connect_timeout_ms = opt->egress_connect_timeout_ms;
    ex->venv_stage_max = opt->venv_stage_max > 0 ? opt->venv_stage_max : 0;
}

/* The warm slots' options (sessions: ipd__sessions_new). */
static void warm_options(struct ipd_executor *ex,
                         const struct ipd_executor_options *opt)
{
    ex->warm_wanted = opt->warm;
    snprintf(ex->warm_modules, sizeof(ex->warm_modules), "%s",
             opt->warm_modules ? opt->warm_modules : "numpy,pandas,matplotlib");
    ex->warm_recycle_runs = opt->warm_recycle_runs;
    ex->warm_recycle_ms = opt->warm_recycle_ms;
    ex->warmset = ipd_warmset_new(ex->warm_modules,
                                  opt->warm ? opt->warm_memory_budget : 0,
                                  opt->warm_adapt_runs);
}

void ipd__exec_id(const char *wanted, char out[IPD_ID_MAX])
{
    if (wanted && ipd_id_valid("exec", wanted))
        snprintf(out, IPD_ID_MAX, "%s", wanted);
    else
        ipd_id_new("exec", out);
}

uid_t ipd__session_uid(const struct ipd_executor *ex, unsigned i)
{
    return geteuid() == 0 ? ex->sbx.host_uid + 1 + ex->slots + i : 0;
}

enum ipd_err ipd_executor_new(struct ipd_meta *meta, struct ipd_blobs *blobs,
                              struct ipd_filetype *ft,
                              const struct ipd_executor_options *opt,
                              struct ipd_executor **out)
{
    struct ipd_executor *ex = ipd_xcalloc(1, sizeof(*ex));
    pthread_mutex_init(&ex->mpl_lock, NULL);
    pthread_mutex_init(&ex->check_lock, NULL);
    pthread_mutex_init(&ex->vstage_lock, NULL);
    pthread_cond_init(&ex->vstage_cond, NULL);
    enum ipd_err rc;
    struct stat st;
    char prelude[PATH_MAX];

    *out = NULL;
    ex->meta = meta;
    ex->blobs = blobs;
    ex->ft = ft;
    run_options(ex, opt);
    warm_options(ex, opt);
    (void)ipd__sessions_new(ex, opt);
    ex->python = ipd_xstrdup(opt->python ? opt->python : "/usr/bin/python3");
    ex->prelude_dir = opt->prelude_dir ? ipd_xstrdup(opt->prelude_dir)
                                       : default_prelude_dir();
    ex->have_lib64 = lstat("/lib64", &st) == 0;
    ex->have_alternatives =
        stat("/etc/alternatives", &st) == 0 && S_ISDIR(st.st_mode);
    ex->have_matplotlibrc =
        stat("/etc/matplotlibrc", &st) == 0 && S_ISREG(st.st_mode);

    rc = IPD_ERR_INVALID;
    if (!opt->data_dir) {
        ipd_error("executor: no data dir");
        goto out;
    }
    if (ex->python[0] != '/') {
        ipd_error("executor: python path %s is not absolute", ex->python);
        goto out;
    }
    if (!ex->prelude_dir ||
        (size_t)snprintf(prelude, sizeof(prelude), "%s/prelude.py",
                         ex->prelude_dir) >= sizeof(prelude) ||
        stat(prelude, &st) || !S_ISREG(st.st_mode)) {
        ipd_error("executor: no prelude.py in %s",
                  ex->prelude_dir ? ex->prelude_dir : "(unknown)");
        goto out;
    }
    if (geteuid() == 0 && opt->sandbox_uid) {
        ex->sbx.host_uid = opt->sandbox_uid;
        ex->sbx.host_gid = opt->sandbox_uid;
    }
    rc = ipd_sandbox_probe(&ex->sbx);
    if (rc) {
        /* Never run code less isolated: no sandbox, no executor. */
        ipd_error("executor: %s", ex->sbx.status);
        rc = IPD_ERR_UNAVAILABLE;
        goto out;
    }
    rc = check_uid_range(ex);
    if (rc)
        goto out;
    remove_legacy_dirs(opt->data_dir);
    /* The font cache is built on the first execution, not here: a server
     * that never runs code shouldn't pay a second of start-up for it. */
    *out = ex;
    ex = NULL;
out:
    ipd_executor_free(ex);
    return rc;
}

void ipd_executor_free(struct ipd_executor *ex)
{
    if (!ex)
        return;
    ipd__warm_stop(ex);
    ipd_warmset_free(ex->warmset);
    ipd__sessions_free(ex);
    ipd_sandbox_config_release(&ex->sbx);
    free(ex->python);
    free(ex->prelude_dir);
    ipd_sandbox_stage_free(ex->mpl_stage);
    pthread_mutex_destroy(&ex->mpl_lock);
    pthread_mutex_destroy(&ex->check_lock);
    ipd__vstage_free_all(ex);
    pthread_mutex_destroy(&ex->vstage_lock);
    pthread_cond_destroy(&ex->vstage_cond);
    free(ex);
}

enum ipd_err ipd_executor_start_warm(struct ipd_executor *ex)
{
    return ex->warm_wanted && !ex->warm ? ipd__warm_start(ex) : IPD_OK;
}

const char *ipd_executor_mode(struct ipd_executor *ex)
{
    return ipd__warm_mode(ex);
}

json_t *ipd_executor_warm_json(struct ipd_executor *ex)
{
    return ipd__warm_json(ex);
}

const char *ipd_executor_sandbox_status(const struct ipd_executor *ex)
{
    return ex->sbx.status;
}

void ipd_executor_set_venv(struct ipd_executor *ex, struct ipd_venv *venv,
                           bool auto_install)
{
    struct ipd_venv_gen *gen = NULL;

    ex->venv = venv;
    ex->auto_install = auto_install;
    /* The current generation's copy, before the first run needs it. */
    if (venv && !ipd_venv_acquire(venv, &gen) && gen)
        ipd__vstage_activate(ex, ipd_venv_gen_dir(gen));
    ipd_venv_release(venv, gen);
}

void ipd_executor_set_space(struct ipd_executor *ex, struct ipd_space *space)
{
    ex->space = space;
}

/* ---- run ------------------------------------------------------------- */

static enum ipd_err check_request(const struct ipd_executor *ex,
                                  const struct ipd_exec_request *rq,
                                  const struct ipd_exec_policy **ep,
                                  int64_t *timeout_ms, struct ipd_buf *detail)
{
    enum ipd_err rc = IPD_ERR_INVALID;
    const char *msg = NULL;

    *ep = ipd__policy_find(ex, rq->policy);
    if (!rq->tenant || !rq->user_id || (!rq->code && rq->code_len))
        msg = "tenant, user and code are required";
    else if (!*ep)
        msg = "unknown policy";
    else if (rq->timeout_ms < 0)
        msg = "timeout must be positive";
    else if (rq->n_files > IPD_EXEC_FILES_MAX)
        msg = "too many files (at most 100)";
    else if (rq->variables && !json_is_object(rq->variables))
        msg = "variables must be an object";
    else if (rq->slot >= ex->slots)
        msg = "no such execution slot";
    if (!msg && rq->code_len > IPD_EXEC_CODE_MAX) {
        msg = "code is over 1 MiB";
        rc = IPD_ERR_TOO_LARGE;
    }
    if (msg) {
        if (detail)
            ipd_buf_adds(detail, msg);
        return rc;
    }
    *timeout_ms = rq->timeout_ms ? rq->timeout_ms : (*ep)->timeout_ms;
    if (*timeout_ms > (*ep)->max_timeout_ms)
        *timeout_ms = (*ep)->max_timeout_ms;
    return IPD_OK;
}

/* The host uid of a slot's runs: its own as root; not root, the sandbox
 * can map only the service's uid (0: the sandbox's default). */
uid_t ipd__slot_uid(const struct ipd_executor *ex, unsigned slot)
{
    return geteuid() == 0 ? ex->sbx.host_uid + 1 + slot : 0;
}

/* ipd__run_stage_create for a request; a failure is logged (the client only
 * gets a 500). */
static enum ipd_err stage_create_logged(struct ipd_executor *ex,
                                        struct ipd__run_stage *wk,
                                        const struct ipd_exec_request *rq)
{
    struct ipd_buf why;
    enum ipd_err rc;

    ipd_buf_init(&why, 512);
    rc = ipd__run_stage_create(ex, wk, rq->execution_id,
                               ipd__slot_uid(ex, rq->slot), &why);
    if (rc)
        ipd_error("executor: cannot stage %s: %s", wk->id, why.buf);
    ipd_buf_release(&why);
    return rc;
}

/* A warm child for rq (ex->warm, a policy without network), taken for
 * the current generation, which *wgen then holds; else NULL. */
static struct ipd__parked_job *take_warm(struct ipd_executor *ex,
                                         const struct ipd_exec_request *rq,
                                         const struct ipd_exec_policy *ep,
                                         struct ipd_venv_gen **wgen)
{
    struct ipd__parked_job *pj;

    *wgen = NULL;
    if (!ex->warm || ep->network)
        return NULL;
    if (ex->venv && ipd_venv_acquire(ex->venv, wgen))
        return NULL;
    pj = ipd__warm_take(ex, rq->slot, ep, ipd_venv_gen_dir(*wgen));
    if (!pj) {
        ipd_venv_release(ex->venv, *wgen);
        *wgen = NULL;
    }
    return pj;
}

/* The parked child's staging becomes the run's (the stage its mounts
 * show). */
static void adopt_stage(struct ipd__run_stage *wk, struct ipd__parked_job *pj,
                        const struct ipd_exec_request *rq)
{
    *wk = pj->wk;
    pj->wk.stage = NULL;
    pj->wk.job_fd = pj->wk.data_fd = -1;
    ipd__exec_id(rq->execution_id, wk->id);
}

/* One run of the staged job: in the parked child *pj when there is one
 * (consumed, with the generation *wgen it was taken for), else cold on
 * the current generation; a warm run that fails to start runs cold.
 * *ran: r holds a run's result (release it). */
static enum ipd_err
run_once(struct ipd_executor *ex, const struct ipd_exec_request *rq,
         const struct ipd_exec_policy *ep, struct ipd__run_stage *wk,
         struct ipd__parked_job **pj, struct ipd_venv_gen **wgen,
         int64_t budget_ms, struct ipd_sandbox_result *r, bool *ran,
         struct ipd_buf *detail)
{
    struct ipd_venv_gen *gen = NULL;
    enum ipd_err rc;

    *ran = false;
    if (*pj) {
        rc = ipd__warm_run(ex, rq->slot, *pj, budget_ms, rq->live, r);
        ipd__parked_job_free(*pj);
        *pj = NULL;
        ipd_venv_release(ex->venv, *wgen);
        *wgen = NULL;
        *ran = true;
        if (!rc)
            return IPD_OK;
        ipd_warn("executor: %s: the warm run failed (%s); running it cold",
                 wk->id, r->error);
        ipd_sandbox_result_release(r);
        memset(r, 0, sizeof(*r));
        r->output_dirfd = -1;
        *ran = false;
    }
    if (ex->venv && ipd_venv_acquire(ex->venv, &gen)) {
        if (detail)
            ipd_buf_adds(detail, "the Python environment is busy; retry");
        return IPD_ERR_UNAVAILABLE;
    }
    rc = ipd__cold_run(ex, wk, ep, budget_ms, ipd_venv_gen_dir(gen), true, r);
    ipd_venv_release(ex->venv, gen);
    *ran = true;
    return rc;
}

/* rq outside a session: its packages, its stage (a parked child's when
 * the slot has one), one run, warm or cold (once more after an automatic
 * install), and its result. */
static enum ipd_err run_job(struct ipd_executor *ex,
                            const struct ipd_exec_request *rq,
                            const struct ipd_exec_policy *ep,
                            int64_t timeout_ms, json_t **result,
                            struct ipd_buf *detail)
{
    struct ipd__run_stage wk;
    struct ipd_sandbox_result r;
    struct ipd__installs ins;
    struct ipd__parked_job *pj = NULL;
    struct ipd_venv_gen *wgen = NULL;
    bool ran = false;
    enum ipd_err rc = IPD_OK;

    memset(&wk, 0, sizeof(wk));
    wk.job_fd = wk.data_fd = -1;
    memset(&r, 0, sizeof(r));
    r.output_dirfd = -1;
    memset(&ins, 0, sizeof(ins));
    ins.results = json_array();
    ipd__packages_install(ex, rq, &ins);
    pj = take_warm(ex, rq, ep, &wgen);
    if (pj)
        adopt_stage(&wk, pj, rq);
    else
        rc = stage_create_logged(ex, &wk, rq);
    if (!rc)
        rc = ipd__stage_job(ex, rq, ep, &wk, 0, detail);
    if (rc)
        goto out;
    wk.live = rq->live;
    int64_t run_t0 = ipd_mono_ms(), budget_ms = timeout_ms;
    for (int attempt = 0;; attempt++) {
        /* The run after an automatic install gets what is left of the
         * request's timeout: the first run and the install count. */
        if (attempt > 0)
            budget_ms = timeout_ms - (ipd_mono_ms() - run_t0);
        if (budget_ms < 1)
            budget_ms = 1;
        rc = run_once(ex, rq, ep, &wk, &pj, &wgen, budget_ms, &r, &ran, detail);
        if (rc == IPD_ERR_UNAVAILABLE && !ran)
            goto out;
        /* The install itself ends by the request's deadline too. */
        if (rc || attempt > 0 ||
            !ipd__packages_auto_install(ex, rq, &r, run_t0 + timeout_ms, &ins))
            break;
        /* The module is there now: the same job once more, from scratch
         * (a fresh sandbox and output tmpfs, nothing collected yet). */
        ipd_sandbox_result_release(&r);
        memset(&r, 0, sizeof(r));
        r.output_dirfd = -1;
        ran = false;
    }
    if (rc) {
        ipd_error("executor: %s: %s", wk.id, r.error);
        if (detail)
            ipd_buf_adds(detail, "the sandbox could not be set up");
        rc = IPD_ERR_INTERNAL;
        goto out;
    }
    *result = ipd__build_result(ex, rq, wk.id, ep, timeout_ms, &r, &ins, NULL);
out:
    if (ran)
        ipd_sandbox_result_release(&r);
    json_decref(ins.results);
    ipd__parked_job_free(pj);
    ipd_venv_release(ex->venv, wgen);
    ipd__run_stage_remove(&wk);
    return rc;
}

enum ipd_err ipd_executor_precheck(struct ipd_executor *ex,
                                   const struct ipd_exec_request *rq,
                                   struct ipd_buf *detail)
{
    const struct ipd_exec_policy *ep = NULL;
    int64_t timeout_ms = 0;
    enum ipd_err rc = check_request(ex, rq, &ep, &timeout_ms, detail);
    if (!rc)
        rc = ipd__packages_check(ex, rq, detail);
    if (!rc && rq->n_files)
        rc = ipd__stage_check_files(ex, rq, detail);
    return rc;
}

enum ipd_err ipd_executor_run(struct ipd_executor *ex,
                              const struct ipd_exec_request *rq,
                              json_t **result, struct ipd_buf *detail)
{
    const struct ipd_exec_policy *ep = NULL;
    int64_t timeout_ms = 0;
    enum ipd_err rc;

    *result = NULL;
    rc = check_request(ex, rq, &ep, &timeout_ms, detail);
    if (!rc)
        rc = ipd__packages_check(ex, rq, detail);
    if (rc)
        return rc;
    if (rq->session_id)
        return ipd__session_call(ex, rq, timeout_ms, result, detail);
    return run_job(ex, rq, ep, timeout_ms, result, detail);
}
