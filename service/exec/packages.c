/*
 * packages.c - an execution's packages: checked before anything runs
 * (a bad requirement is a 400), installed before the code runs (not
 * counted in its timeout), and the automatic install after a
 * ModuleNotFoundError for an allowlisted distribution.
 */
#include <stdio.h>
#include <string.h>

#include "../../storage/space.h"
#include "../../venv/venv.h"
#include "../common/log.h"
#include "../common/util.h"
#include "exec_internal.h"

/* A request's packages are checked before anything runs: a malformed or
 * not-allowed requirement is the client's mistake (400), not a result. */
enum ipd_err ipd__packages_check(const struct ipd_executor *ex,
                                 const struct ipd_exec_request *rq,
                                 struct ipd_buf *detail)
{
    if (!rq->n_packages)
        return IPD_OK;
    if (!ex->venv) {
        if (detail)
            ipd_buf_adds(detail, "package installs are not enabled on this "
                                 "server");
        return IPD_ERR_INVALID;
    }
    if (rq->n_packages > 32) {
        if (detail)
            ipd_buf_adds(detail, "too many packages (at most 32)");
        return IPD_ERR_INVALID;
    }
    for (size_t i = 0; i < rq->n_packages; i++) {
        struct ipd_requirement req;
        struct ipd_buf why;
        ipd_buf_init(&why, 512);
        enum ipd_err rc = ipd_requirement_parse(
            rq->packages[i], strlen(rq->packages[i]), &req, &why);
        if (rc) {
            if (detail)
                ipd_buf_addf(detail, "packages[%zu]: %s", i, why.buf);
        } else if (!ipd_venv_allows(ex->venv, req.normalized)) {
            if (detail)
                ipd_buf_addf(detail,
                             "packages[%zu]: %s is not on this "
                             "service's allowlist",
                             i, req.normalized);
            rc = IPD_ERR_INVALID;
        }
        ipd_buf_release(&why);
        if (rc)
            return IPD_ERR_INVALID;
    }
    return IPD_OK;
}

/* rq's packages, each failed for want of space: a new array of the
 * results ipd_venv_install gives.  While the data dir's delete reserve
 * is out (storage/space.h) nothing is installed: the venv usually lives
 * beside the data dir, and an install is a write that adds data. */
static json_t *out_of_space_results(const struct ipd_exec_request *rq)
{
    json_t *a = json_array();
    for (size_t i = 0; i < rq->n_packages; i++)
        json_array_append_new(
            a, json_pack("{s:s,s:s,s:n,s:s}", "package", rq->packages[i],
                         "status", "failed", "version", "message",
                         "not installed: the server is out of storage "
                         "space"));
    return a;
}

/* The request's packages, before the code runs.  Not counted in the
 * timeout: reported as install_time. */
void ipd__packages_install(struct ipd_executor *ex,
                           const struct ipd_exec_request *rq,
                           struct ipd__installs *ins)
{
    if (!rq->n_packages)
        return;
    int64_t t0 = ipd_now_ms();
    json_decref(ins->results);
    ins->results = NULL;
    /* ipd_venv_install answers a request that installs nothing itself;
     * only while the reserve is out is that asked first, here. */
    if (ipd_space_check_write(ex->space) &&
        !ipd_venv_install_nothing(ex->venv, rq->packages, rq->n_packages,
                                  &ins->results))
        ins->results = out_of_space_results(rq);
    else if (!ins->results)
        ipd_venv_install(ex->venv, rq->packages, rq->n_packages, rq->admin,
                         &ins->results);
    ins->seconds = (double)(ipd_now_ms() - t0) / 1000.0;
    /* A stream gets each package's result once the install is over (pip
     * installs them together). */
    size_t i;
    json_t *one;
    json_array_foreach(ins->results, i, one) ipd__live_emit(rq, "install", one);
}

/* After a run that failed with "ModuleNotFoundError: No module named 'x'"
 * where x comes from an allowlisted distribution that is not installed:
 * install it.  True when it was installed and the code should run again. */
bool ipd__packages_auto_install(struct ipd_executor *ex,
                                const struct ipd_exec_request *rq,
                                const struct ipd_sandbox_result *r,
                                int64_t deadline_ms, struct ipd__installs *ins)
{
    char module[IPD_REQ_NAME_MAX + 1], dist[IPD_REQ_NAME_MAX + 1];
    const char *pre = "No module named '";
    bool again = false;
    if (!ex->venv || !ex->auto_install || r->timed_out || r->oom_killed ||
        ipd_space_check_write(ex->space))
        return false; /* out of space: see out_of_space_results */
    json_t *prelude = ipd__read_prelude_result(r);
    json_t *e = json_object_get(prelude, "error");
    const char *type = json_string_value(json_object_get(e, "type"));
    const char *msg = json_string_value(json_object_get(e, "message"));
    if (!type || strcmp(type, "ModuleNotFoundError") || !msg ||
        strncmp(msg, pre, strlen(pre)))
        goto out;
    msg += strlen(pre);
    size_t len = strcspn(msg, "'.");
    if (!len || len > IPD_REQ_NAME_MAX)
        goto out;
    memcpy(module, msg, len);
    module[len] = '\0';
    if (!ipd_venv_dist_for_missing_module(ex->venv, module, dist))
        goto out;
    ipd_info("executor: installing %s for the missing module %s", dist, module);
    json_t *res = NULL;
    bool remembered = false;
    int64_t t0 = ipd_now_ms();
    /* A failure is remembered (--auto-install-retry-after): every
     * execution importing the module would otherwise run pip again, each
     * holding the install lock. */
    ipd_venv_install_auto(ex->venv, dist, rq->admin, deadline_ms, &res,
                          &remembered);
    ins->seconds += (double)(ipd_now_ms() - t0) / 1000.0;
    json_t *one = json_array_get(res, 0);
    json_array_append(ins->results, one);
    ipd__live_emit(rq, "install", one);
    again =
        !strcmp(json_string_value(json_object_get(one, "status")), "installed");
    if (again)
        snprintf(ins->auto_dist, sizeof(ins->auto_dist), "%s", dist);
    json_decref(res);
out:
    json_decref(prelude);
    return again;
}
