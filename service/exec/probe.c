/*
 * probe.c - the readiness check (ipd_executor_check): one execution end
 * to end, staged and run cold as a request's (a job that reads its input
 * file back), and what /readyz and the admin status show of it.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "../../venv/venv.h"
#include "../common/json_out.h"
#include "../common/log.h"
#include "../common/util.h"
#include "exec_internal.h"

#define PROBE_TEXT "interpd ready"
#define PROBE_TIMEOUT_MS 10000

/* The probe's limits: the sandbox's defaults, not a configured policy (a
 * tight policy is the operator's choice, not a broken service). */
static void probe_policy(struct ipd_exec_policy *ep)
{
    memset(ep, 0, sizeof(*ep));
    snprintf(ep->name, sizeof(ep->name), "readiness");
    ep->timeout_ms = ep->max_timeout_ms = PROBE_TIMEOUT_MS;
    ep->memory_bytes = 512LL << 20;
    ep->max_processes = 64;
    ep->output_bytes = 64 << 10;
    ep->tmp_bytes = 16LL << 20;
    ep->output_dir_bytes = 16LL << 20;
}

/* Stage a job that reads its input back: code.py, files.json and
 * data/probe/probe.txt, as a request's staging writes them. */
static enum ipd_err probe_stage(struct ipd__run_stage *wk)
{
    static const char code[] =
        "print(open('/mnt/data/probe/probe.txt').read(), end='')\n";
    int dfd = -1;
    enum ipd_err rc =
        ipd__write_file_at(wk->job_fd, "code.py", code, sizeof(code) - 1);
    if (!rc)
        rc = ipd__write_file_at(wk->job_fd, "files.json", "[]", 2);
    if (rc)
        return rc;
    dfd = ipd__mkdir_open_at(wk->data_fd, "probe", 0755);
    if (dfd < 0)
        return IPD_ERR_IO;
    rc = ipd__write_file_at(dfd, "probe.txt", PROBE_TEXT, strlen(PROBE_TEXT));
    close(dfd);
    return rc;
}

/* What the run did, as a reason when it is not what a working service
 * does. */
static enum ipd_err probe_judge(const struct ipd_sandbox_result *r, char *why,
                                size_t len)
{
    if (r->timed_out || r->exit_code != 0) {
        size_t n = r->err.len > 160 ? r->err.len - 160 : 0;
        snprintf(why, len, "the check run %s%d: %s",
                 r->timed_out ? "timed out, exit " : "exited ", r->exit_code,
                 r->err.buf + n);
        return IPD_ERR_INTERNAL;
    }
    if (strcmp(r->out.buf, PROBE_TEXT)) {
        snprintf(why, len, "the check run printed \"%.64s\", not its input",
                 r->out.buf);
        return IPD_ERR_INTERNAL;
    }
    return IPD_OK;
}

/* One check: stage, hold the venv's generation, run the prelude in the
 * sandbox with a request's binds, judge, remove the work dir. */
static enum ipd_err probe_once(struct ipd_executor *ex, char *why, size_t len)
{
    struct ipd_exec_policy ep;
    struct ipd_sandbox_result r;
    struct ipd_venv_gen *gen = NULL;
    struct ipd__run_stage wk;
    enum ipd_err rc;

    memset(&r, 0, sizeof(r));
    r.output_dirfd = -1;
    memset(&wk, 0, sizeof(wk));
    wk.job_fd = wk.data_fd = -1;
    probe_policy(&ep);
    struct ipd_buf werr;
    ipd_buf_init(&werr, 256);
    rc = ipd__run_stage_create(ex, &wk, NULL, 0, &werr);
    if (!rc && probe_stage(&wk))
        ipd_buf_addf(&werr, "writing the job: %s", strerror(errno));
    rc = werr.len ? IPD_ERR_INTERNAL : rc;
    if (rc)
        snprintf(why, len, "cannot stage a job: %s", werr.buf);
    ipd_buf_release(&werr);
    if (rc)
        goto out;
    if (ex->venv && ipd_venv_acquire(ex->venv, &gen)) {
        snprintf(why, len, "the Python environment is busy");
        rc = IPD_ERR_UNAVAILABLE;
        goto out;
    }
    rc = ipd__cold_run(ex, &wk, &ep, PROBE_TIMEOUT_MS, ipd_venv_gen_dir(gen),
                       false, &r);
    ipd_venv_release(ex->venv, gen);
    if (rc)
        snprintf(why, len, "%s", r.error);
    else
        rc = probe_judge(&r, why, len);
out:
    ipd_sandbox_result_release(&r);
    ipd__run_stage_remove(&wk);
    return rc;
}

enum ipd_err ipd_executor_check(struct ipd_executor *ex)
{
    char why[sizeof(ex->check.error)] = "";
    int64_t t0 = ipd_mono_ms();
    enum ipd_err rc = probe_once(ex, why, sizeof(why));
    int64_t ms = ipd_mono_ms() - t0;

    pthread_mutex_lock(&ex->check_lock);
    bool was_ok = ex->check.runs == 0 || ex->check.ok;
    ex->check.ok = rc == IPD_OK;
    ex->check.runs++;
    ex->check.at_ms = ipd_now_ms();
    ex->check.duration_ms = ms;
    snprintf(ex->check.error, sizeof(ex->check.error), "%s", rc ? why : "");
    pthread_mutex_unlock(&ex->check_lock);
    if (rc)
        ipd_error("executor: the end-to-end check failed after %lld ms: %s",
                  (long long)ms, why);
    else if (!was_ok)
        ipd_info("executor: the end-to-end check passes again (%lld ms)",
                 (long long)ms);
    return rc;
}

bool ipd_executor_ready(struct ipd_executor *ex, char *why, size_t len)
{
    pthread_mutex_lock(&ex->check_lock);
    bool ok = ex->check.runs > 0 && ex->check.ok;
    if (!ok)
        snprintf(why, len, "%s",
                 ex->check.runs ? ex->check.error : "not checked yet");
    pthread_mutex_unlock(&ex->check_lock);
    return ok;
}

json_t *ipd_executor_check_json(struct ipd_executor *ex)
{
    json_t *j;

    pthread_mutex_lock(&ex->check_lock);
    j = json_pack(
        "{s:b, s:I, s:o, s:I, s:s?}", "ok", ex->check.ok, "runs",
        (json_int_t)ex->check.runs, "checked_at",
        ipd_json_time(ex->check.runs ? ex->check.at_ms : IPD_TIME_NEVER),
        "duration_ms", (json_int_t)ex->check.duration_ms, "error",
        ex->check.ok ? NULL : ex->check.error);
    pthread_mutex_unlock(&ex->check_lock);
    return j;
}
