/*
 * h_packages.c - GET and POST /v1/packages (CONTRACT.md, Packages).
 *
 * The venv is shared by every tenant, so any valid key may list and
 * install; only allowlisted names get in.  Installs take seconds to
 * minutes (pip in the sandbox), so they never run on the HTTP event
 * threads: the handler suspends the connection and queues the request for
 * one installer thread (bg.c; installs are serialised by the venv
 * anyway); beyond IPD_INSTALL_QUEUE_MAX waiting requests, or beyond the
 * tenant's share (its key's policy's tenant-installs), the answer is 429.
 * A request that would install nothing (every requirement refused or
 * already met) is answered on the event thread without queueing
 * (ipd_venv_install_nothing: a small file read, no lock, no sandbox).
 * One that would install is refused with 507 while the data dir's delete
 * reserve is out (storage/space.h), as every write that adds data is.
 */
#include <stdlib.h>
#include <string.h>

#include "../service/common/log.h"
#include "../venv/requirement.h"
#include "../venv/venv.h"
#include "http.h"

#define BODY_MAX (64 * 1024)
#define PACKAGES_MAX 32 /* requirements per request */

struct pkg_job {
    char **reqs; /* owned */
    size_t n;
    json_t *results; /* new reference once done */
    bool admin;      /* an admin key may change installed versions */
    enum ipd_err rc; /* IPD_ERR_FORBIDDEN: a version change refused */
    bool submitted;
};

static void job_free(struct pkg_job *j)
{
    if (!j)
        return;
    for (size_t i = 0; i < j->n; i++)
        free(j->reqs[i]);
    free(j->reqs);
    json_decref(j->results);
    free(j);
}

/* On the installer thread (a bg pool of one: installs are serialised by
 * the venv anyway). */
static void install_run(struct ipd_req *r, bool stopping)
{
    struct pkg_job *j = r->state;
    if (stopping)
        return; /* no results: answered 503 */
    j->rc = ipd_venv_install(r->app->venv, (const char *const *)j->reqs, j->n,
                             j->admin, &j->results);
}

/* ---- GET ------------------------------------------------------------- */

static void packages_list(struct ipd_req *r)
{
    if (!r->app->venv) {
        ipd_reply_code(r, IPD_HE_UNAVAILABLE,
                       "packages are unavailable on this server (see the "
                       "server log)");
        return;
    }
    json_t *st = ipd_venv_status(r->app->venv);
    /* The contract's venv object; the operator's details are admin
     * status's business. */
    json_t *venv = json_object_get(st, "venv");
    json_object_del(venv, "path");
    json_object_del(venv, "generation");
    json_object_del(venv, "last_rebuild_error");
    json_object_del(venv, "exists");
    json_object_del(venv, "python_path");
    ipd_reply_json(r, MHD_HTTP_OK, st);
}

const struct ipd_handler ipd_h_packages_list = {
    .flags = IPD_H_AUTH,
    .finish = packages_list,
};

/* ---- POST ------------------------------------------------------------ */

static struct pkg_job *parse_job(struct ipd_req *r)
{
    struct pkg_job *j = NULL;
    char why[128];
    json_t *doc = ipd_req_json_body(r);
    if (!doc)
        return NULL;
    json_t *pk = json_object_get(doc, "packages");
    size_t n = json_array_size(pk);
    if (!json_is_object(doc) || !json_is_array(pk) || n == 0 ||
        n > PACKAGES_MAX) {
        ipd_reply_code(r, IPD_HE_INVALID_REQUEST,
                       "the body must be {\"packages\": [...]} with 1 to "
                       "%d requirement strings",
                       PACKAGES_MAX);
        goto out;
    }
    if (!ipd_requirement_list_ok(pk, why, sizeof(why))) {
        ipd_reply_code(r, IPD_HE_INVALID_REQUEST, "%s", why);
        goto out;
    }
    j = ipd_xcalloc(1, sizeof(*j));
    j->admin = r->principal.admin;
    j->reqs = ipd_xcalloc(n, sizeof(*j->reqs));
    for (size_t i = 0; i < n; i++)
        j->reqs[j->n++] = ipd_xstrdup(json_string_value(json_array_get(pk, i)));
out:
    json_decref(doc);
    return j;
}

/* The message of the first failed result: why an install was refused. */
static const char *refusal(const json_t *results)
{
    size_t i;
    json_t *res;
    json_array_foreach(results, i, res)
    {
        const char *st = json_string_value(json_object_get(res, "status"));
        if (st && !strcmp(st, "failed"))
            return json_string_value(json_object_get(res, "message"));
    }
    return NULL;
}

static void packages_install(struct ipd_req *r)
{
    struct pkg_job *j = r->state;
    if (j && j->submitted) {
        if (!j->results)
            ipd_reply_code(r, IPD_HE_UNAVAILABLE,
                           "the service is shutting down; nothing was "
                           "installed");
        else if (j->rc)
            ipd_reply_failure(r, j->rc, refusal(j->results),
                              "installing packages");
        else
            ipd_reply_json(r, MHD_HTTP_OK,
                           json_pack("{s:O}", "results", j->results));
        return;
    }
    IPD_ASSERT(!j);
    if (!r->app->pkgs || !r->app->venv) {
        ipd_reply_code(r, IPD_HE_UNAVAILABLE,
                       "package installs are unavailable on this server "
                       "(see the server log)");
        return;
    }
    j = parse_job(r);
    if (!j)
        return;
    r->state = j;
    /* Nothing to install (all refused, or all there already): answered
     * here, in milliseconds, without queueing behind an install. */
    if (ipd_venv_install_nothing(r->app->venv, (const char *const *)j->reqs,
                                 j->n, &j->results)) {
        ipd_reply_json(r, MHD_HTTP_OK,
                       json_pack("{s:O}", "results", j->results));
        return;
    }
    /* The venv usually lives beside the data dir (DATA-DIR-venv): while
     * the delete reserve is out the server is out of storage, and an
     * install is a write that adds data like any other (507). */
    enum ipd_err rc = ipd_space_check_write(r->app->space);
    if (rc) {
        ipd_reply_failure(r, rc, NULL, "installing packages");
        return;
    }
    const struct ipd_exec_policy *kp = ipd_req_key_policy(r);
    j->submitted = ipd_bg_submit_shared(r->app->pkgs, r, install_run,
                                        kp ? kp->tenant_installs : -25,
                                        "package installs", "tenant-installs");
}

static void packages_cleanup(struct ipd_req *r)
{
    job_free(r->state);
    r->state = NULL;
}

const struct ipd_handler ipd_h_packages_install = {
    .flags = IPD_H_AUTH,
    .body_max = BODY_MAX,
    .finish = packages_install,
    .cleanup = packages_cleanup,
};
