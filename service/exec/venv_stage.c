/*
 * venv_stage.c - venv generations copied into private tmpfs stages, so a
 * run's /proc/self/mountinfo shows "/venv" on a tmpfs for /opt/venv, not
 * the generation's host path (docs/SANDBOX.md, "What a run sees of the
 * host").
 *
 * A generation never changes once it is current (venv.h), so one copy
 * serves every run on it.  It is made when the venv activates a
 * generation (the install lock is held: the install pays for the copy),
 * for the current generation when the executor is handed the venv (at
 * start), and otherwise by the first run that needs it (a generation
 * another process activated, or one whose copy was freed).
 *
 * Each copy is an entry of ex->vstages: runs hold it (refs) for their
 * whole run; the newest generation seen is kept while no run holds it,
 * an older one is freed when its last run ends.  So at most the newest
 * generation plus those older ones that runs still use are in memory,
 * each at most --venv-stage-max bytes (the tmpfs's size), charged to the
 * service's cgroup.
 *
 * No copy (the generation is bound by its host path): venv-stage-max 0,
 * the venv dir is the root of its own filesystem (runs see only
 * /gen-...), no detached tmpfs (not root), a generation over
 * venv-stage-max or any failure of the copy.  All but the first two are
 * logged once per entry as a warning.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/log.h"
#include "../common/util.h"
#include "exec_internal.h"

#define STAGE_NAME "venv" /* the copy's dir: "/venv" in mountinfo */

struct ipd__vstage {
    char *gen_dir;                   /* owned; the key */
    struct ipd_sandbox_stage *stage; /* owned; NULL: bind the host path */
    unsigned refs;                   /* runs holding it */
    bool ready;                      /* made (or given up on) */
    bool kept;                       /* the newest generation seen */
    struct ipd__vstage *next;
};

/* The ms of "<dir>/gen-<ms>-<hex>", or -1. */
static long long gen_ms(const char *gen_dir)
{
    const char *base = strrchr(gen_dir, '/');
    base = base ? base + 1 : gen_dir;
    return strncmp(base, "gen-", 4) ? -1 : strtoll(base + 4, NULL, 10);
}

static void vstage_free(struct ipd__vstage *e)
{
    ipd_sandbox_stage_free(e->stage);
    free(e->gen_dir);
    free(e);
}

/* Unlink the entries no run holds that are not kept (under vstage_lock);
 * the list of them, to free outside the lock. */
static struct ipd__vstage *vstage_unlink_idle(struct ipd_executor *ex)
{
    struct ipd__vstage *gone = NULL, **pp = &ex->vstages;
    while (*pp) {
        struct ipd__vstage *e = *pp;
        if (e->ready && !e->refs && !e->kept) {
            *pp = e->next;
            e->next = gone;
            gone = e;
        } else {
            pp = &e->next;
        }
    }
    return gone;
}

static void vstage_free_list(struct ipd__vstage *e)
{
    while (e) {
        struct ipd__vstage *next = e->next;
        vstage_free(e);
        e = next;
    }
}

/* The copy of e->gen_dir, or NULL (the host path; logged when that is
 * not the operator's choice). */
static struct ipd_sandbox_stage *vstage_make(struct ipd_executor *ex,
                                             const char *gen_dir)
{
    struct ipd_sandbox_stage *st = NULL;
    char err[512], parent[PATH_MAX];
    enum ipd_err rc;
    int64_t t0 = ipd_mono_ms();

    snprintf(parent, sizeof parent, "%s", gen_dir);
    char *slash = strrchr(parent, '/');
    if (slash && slash != parent)
        *slash = '\0';
    if (ex->venv_stage_max <= 0 || ipd_sandbox_is_fs_root(parent))
        return NULL;
    rc = ipd_sandbox_stage_new(ex->venv_stage_max, 1 << 20, NULL, &st, err,
                               sizeof err);
    if (!rc && !ipd_sandbox_stage_detached(st)) {
        snprintf(err, sizeof err, "no detached tmpfs (no CAP_SYS_ADMIN)");
        rc = IPD_ERR_UNAVAILABLE;
    }
    if (!rc)
        rc = ipd_sandbox_stage_copy(st, STAGE_NAME, gen_dir, err, sizeof err);
    if (rc == IPD_ERR_TOO_LARGE)
        snprintf(err, sizeof err, "larger than venv-stage-max (%lld bytes)",
                 (long long)ex->venv_stage_max);
    if (rc) {
        ipd_warn("venv: runs on %s bind it by its host path, which they "
                 "see in /proc/self/mountinfo (docs/SANDBOX.md): no copy "
                 "in a private tmpfs: %s",
                 gen_dir, err);
        ipd_sandbox_stage_free(st);
        return NULL;
    }
    ipd_info("venv: %s copied into a private tmpfs for runs in %lld ms",
             gen_dir, (long long)(ipd_mono_ms() - t0));
    return st;
}

/* The entry of gen_dir, held (refs + 1), made ready by this thread when
 * it is new.  kept_too: make it the kept one even if not the newest. */
static struct ipd__vstage *vstage_hold(struct ipd_executor *ex,
                                       const char *gen_dir, bool kept_too)
{
    struct ipd__vstage *e, *gone;
    bool mine = false;

    pthread_mutex_lock(&ex->vstage_lock);
    for (e = ex->vstages; e && strcmp(e->gen_dir, gen_dir); e = e->next)
        ;
    if (!e) {
        e = ipd_xcalloc(1, sizeof *e);
        e->gen_dir = ipd_xstrdup(gen_dir);
        e->next = ex->vstages;
        ex->vstages = e;
        mine = true;
    }
    e->refs++;
    if (mine) {
        pthread_mutex_unlock(&ex->vstage_lock);
        struct ipd_sandbox_stage *st = vstage_make(ex, gen_dir);
        pthread_mutex_lock(&ex->vstage_lock);
        e->stage = st;
        e->ready = true;
        pthread_cond_broadcast(&ex->vstage_cond);
    }
    while (!e->ready)
        pthread_cond_wait(&ex->vstage_cond, &ex->vstage_lock);
    bool newest = true;
    for (struct ipd__vstage *o = ex->vstages; o; o = o->next)
        if (o != e && o->kept && gen_ms(o->gen_dir) > gen_ms(gen_dir))
            newest = false;
    if (newest || kept_too) {
        for (struct ipd__vstage *o = ex->vstages; o; o = o->next)
            o->kept = o == e;
    }
    gone = vstage_unlink_idle(ex);
    pthread_mutex_unlock(&ex->vstage_lock);
    vstage_free_list(gone);
    return e;
}

const struct ipd_sandbox_stage *ipd__vstage_hold(struct ipd_executor *ex,
                                                 const char *gen_dir,
                                                 struct ipd__vstage **hold)
{
    *hold = gen_dir ? vstage_hold(ex, gen_dir, false) : NULL;
    return *hold ? (*hold)->stage : NULL;
}

void ipd__vstage_drop(struct ipd_executor *ex, struct ipd__vstage *hold)
{
    if (!hold)
        return;
    pthread_mutex_lock(&ex->vstage_lock);
    hold->refs--;
    struct ipd__vstage *gone = vstage_unlink_idle(ex);
    pthread_mutex_unlock(&ex->vstage_lock);
    vstage_free_list(gone);
}

void ipd__vstage_activate(struct ipd_executor *ex, const char *gen_dir)
{
    ipd__vstage_drop(ex, vstage_hold(ex, gen_dir, true));
}

void ipd__vstage_free_all(struct ipd_executor *ex)
{
    vstage_free_list(ex->vstages);
    ex->vstages = NULL;
}
