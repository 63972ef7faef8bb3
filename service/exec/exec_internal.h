/*
 * exec_internal.h - what the files of service/exec/ share: the executor
 * (executor.c), a run's stage (stage.c) and mounts (mounts.c), a cold run
 * (cold.c), packages (packages.c), the zygote hosting (zygote_host.c),
 * warm slots (warm.c), sessions (session.c) and the result (result.c).
 * Not for use outside service/exec/.
 */
#ifndef IPD_EXEC_INTERNAL_H
#define IPD_EXEC_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include <jansson.h>

#include "../../venv/requirement.h"
#include "../fetch/egress.h"
#include "../sandbox/sandbox.h"
#include "executor.h"
#include "warmset.h"

#define IPD__COPY_CHUNK (64 * 1024) /* read and write unit for file bytes */

struct ipd_executor {
    struct ipd_meta *meta;         /* borrowed */
    struct ipd_blobs *blobs;       /* borrowed */
    struct ipd_filetype *ft;       /* borrowed */
    struct ipd_sandbox_config sbx; /* probed once, shared by every run */
    char *python;                  /* owned; absolute path inside the sandbox */
    char *prelude_dir;             /* owned; host dir holding prelude.py */
    struct ipd_sandbox_stage *mpl_stage; /* owned; its "mplcache" holds
                                  matplotlib's prepared font cache, or
                                  NULL (set under mpl_lock, then read-only
                                  until the executor is freed) */
    pthread_mutex_t mpl_lock;
    bool mpl_tried; /* the cache was built or tried (mpl_lock) */
    bool have_lib64;
    bool have_alternatives;
    bool have_matplotlibrc;
    int64_t max_file_size;
    int64_t file_ttl_ms;
    struct ipd_quota quota; /* the user's; .tenant points at
                               tenant_quota */
    struct ipd_quota tenant_quota;
    size_t max_generated;
    int64_t inline_max;
    struct ipd_space *space;       /* borrowed; NULL: no delete reserve */
    unsigned slots;                /* execution slots: uids host_uid+1.. */
    struct ipd_egress_opts egress; /* networked runs' proxy (allowlist
                                      borrowed from the options) */
    struct ipd_exec_policy policies[IPD_EXEC_POLICIES_MAX]; /* copied */
    size_t n_policies;
    struct ipd_venv *venv; /* borrowed; NULL: the base interpreter */
    bool auto_install;     /* install a missing allowlisted module and
                              run once more */
    /* venv_stage.c: generations copied into private tmpfs stages */
    int64_t venv_stage_max; /* a copy's size limit; 0: never copy */
    pthread_mutex_t vstage_lock;
    pthread_cond_t vstage_cond;
    struct ipd__vstage *vstages; /* owned list (vstage_lock) */
    /* session.c: sessions (always made; max 0: none allowed) */
    struct ipd__sessions *sessions;
    struct ipd__executor_sessions_cfg {
        unsigned max;        /* live sessions on this node */
        unsigned per_user;   /* live sessions of one (tenant, user) */
        int64_t memory;      /* their charges summed (0: no bound) */
        int64_t idle_ms;     /* ended after this long unused */
        int64_t max_life_ms; /* ended after this long anyway */
    } sess_cfg;
    /* warm.c: zygotes per slot (NULL: every run is cold) */
    struct ipd__warm *warm;
    bool warm_wanted;            /* the options' warm */
    char warm_modules[256];      /* IPD_WARM_MODULES */
    struct ipd_warmset *warmset; /* owned; the adaptive set (warmset.h) */
    int64_t warm_recycle_runs;   /* a zygote ends after so many (0: never) */
    int64_t warm_recycle_ms;     /* ... or after so long */
    pthread_mutex_t check_lock;
    struct { /* the last end-to-end check (check_lock) */
        bool ok;
        int64_t runs;
        int64_t at_ms; /* wall clock of its end */
        int64_t duration_ms;
        char error[256]; /* why it failed, or "" */
    } check;
};

/* venv_stage.c (see there): the copy of the venv generation gen_dir (a
 * host path) for one run, bound from the returned stage's "venv" dir; or
 * NULL: bind gen_dir itself.  *hold is the run's hold of it (NULL when
 * gen_dir is NULL): give it back with ipd__vstage_drop after the run. */
struct ipd__vstage;
const struct ipd_sandbox_stage *ipd__vstage_hold(struct ipd_executor *ex,
                                                 const char *gen_dir,
                                                 struct ipd__vstage **hold);
void ipd__vstage_drop(struct ipd_executor *ex, struct ipd__vstage *hold);
/* gen_dir became current: copy it now, keep it (older copies go when
 * their last run ends). */
void ipd__vstage_activate(struct ipd_executor *ex, const char *gen_dir);
/* At the executor's end, no run left. */
void ipd__vstage_free_all(struct ipd_executor *ex);

/* executor.c --------------------------------------------------------- */

const struct ipd_exec_policy *ipd__policy_find(const struct ipd_executor *ex,
                                               const char *name);
/* The sandbox policy of ep with the wall timeout timeout_ms. */
void ipd__policy_to_sandbox(const struct ipd_exec_policy *ep,
                            int64_t timeout_ms, struct ipd_sandbox_policy *p);
/* The host uid of a slot's runs (0: the sandbox's default). */
uid_t ipd__slot_uid(const struct ipd_executor *ex, unsigned slot);
/* The host uid of session index i's processes (0: the sandbox's). */
uid_t ipd__session_uid(const struct ipd_executor *ex, unsigned i);
/* An execution's id into out: wanted when it is a valid execution id
 * (the async pool chose it), else a new one.  The one place ids of runs
 * are chosen. */
void ipd__exec_id(const char *wanted, char out[IPD_ID_MAX]);

/* mounts.c ----------------------------------------------------------- */

/* The read-only system binds every run gets; returns how many. */
size_t ipd__system_mounts(const struct ipd_executor *ex,
                          struct ipd_sandbox_mount *m);

#define IPD__RUN_ENV_MAX 14
#define IPD__RUN_MOUNTS_MAX 16
/* A prelude run's environment into env[IPD__RUN_ENV_MAX] (mpl_env when
 * not NULL, then extra: NULL, or up to 3 entries ending with NULL). */
void ipd__run_env(const char **env, const char *mpl_env,
                  const char *const *extra);
/* A prelude run's mounts into mounts[IPD__RUN_MOUNTS_MAX]: the system's,
 * the font cache (its environment entry in *mpl_env, else NULL; the first
 * caller with build_mpl builds it), st's interpd/, job/ and data/, the
 * venv generation (its copy vst, else gen_dir; none without gen_dir). */
size_t ipd__run_mounts(struct ipd_executor *ex,
                       const struct ipd_sandbox_stage *st, const char *gen_dir,
                       const struct ipd_sandbox_stage *vst, bool build_mpl,
                       struct ipd_sandbox_mount *mounts, const char **mpl_env);
/* The interpreter inside the sandbox: the generation's, else the base. */
const char *ipd__run_python(const struct ipd_executor *ex, const char *gen_dir);

/* stage.c ------------------------------------------------------------ */

/* One run's stage: job/, data/ and interpd/ (the prelude's files). */
struct ipd__run_stage {
    char id[IPD_ID_MAX];             /* the execution's */
    struct ipd_sandbox_stage *stage; /* owned */
    int job_fd, data_fd;             /* owned */
    uid_t host_uid;        /* the run's (its slot's); 0: the sandbox's own */
    struct ipd_live *live; /* the execution's (borrowed), or NULL */
};
/* Make *wk (its fds and stage are the caller's until
 * ipd__run_stage_remove).  id: the execution's (NULL or invalid: a new
 * one); why gets the reason of a failure (IPD_ERR_INTERNAL). */
enum ipd_err ipd__run_stage_create(struct ipd_executor *ex,
                                   struct ipd__run_stage *wk, const char *id,
                                   uid_t host_uid, struct ipd_buf *why);
/* Close and free what *wk holds (a zeroed one with fds -1 is fine). */
void ipd__run_stage_remove(struct ipd__run_stage *wk);
/* Write rq's job into wk: code.py, variables.json, calls.json (a
 * streamed run's, under ep's limits for its calls), the files (looked up
 * in the caller's scope, at most files_max bytes in all, 0: no limit;
 * over it IPD_ERR_TOO_LARGE) and files.json.  detail says why. */
enum ipd_err ipd__stage_job(struct ipd_executor *ex,
                            const struct ipd_exec_request *rq,
                            const struct ipd_exec_policy *ep,
                            struct ipd__run_stage *wk, int64_t files_max,
                            struct ipd_buf *detail);
/* A streamed run's display events as each bundle is shown (result.c):
 * lim's display hook and its context, within ex's and ep's budgets. */
struct ipd_live_call_limits;
void ipd__live_display(const struct ipd_executor *ex,
                       const struct ipd_exec_policy *ep, struct ipd_live *live,
                       struct ipd_live_call_limits *lim);
/* obj as an event of kind on rq's stream (nothing when none listens). */
void ipd__live_emit(const struct ipd_exec_request *rq, const char *kind,
                    const json_t *obj);
/* Only look rq's files up (the staging's first step): IPD_ERR_NOT_FOUND
 * with detail when one is not the caller's. */
enum ipd_err ipd__stage_check_files(struct ipd_executor *ex,
                                    const struct ipd_exec_request *rq,
                                    struct ipd_buf *detail);
/* Create name in dirfd (must not exist), mode 0644 whatever the umask. */
enum ipd_err ipd__write_file_at(int dirfd, const char *name, const void *data,
                                size_t len);
/* mkdirat + open, with an exact mode.  Returns the dir fd (the caller's)
 * or -1. */
int ipd__mkdir_open_at(int dirfd, const char *name, mode_t mode);

/* cold.c ------------------------------------------------------------- */

/* Run spec under p, with the egress proxy when p has network: its
 * environment appended to spec->env (at most 16 entries there); what the
 * proxy did in *st.  *r is the caller's to release. */
enum ipd_err ipd__run_sandboxed(struct ipd_executor *ex,
                                const struct ipd_sandbox_policy *p,
                                struct ipd_sandbox_spec *spec,
                                struct ipd_sandbox_result *r,
                                struct ipd_egress_stats *st);
/* The prelude on wk's job in a fresh sandbox under ep for timeout_ms, on
 * the generation gen_dir (NULL: the base interpreter; the caller holds
 * it); build_mpl: this run may build the font cache.  *r is the caller's
 * to release. */
enum ipd_err ipd__cold_run(struct ipd_executor *ex, struct ipd__run_stage *wk,
                           const struct ipd_exec_policy *ep, int64_t timeout_ms,
                           const char *gen_dir, bool build_mpl,
                           struct ipd_sandbox_result *r);

/* warm.c (see there) ------------------------------------------------ */

/* Wait on c (m held) for at most ms, or until a signal (warm.c; the
 * sessions' waits too). */
void ipd__cond_wait_ms(pthread_cond_t *c, pthread_mutex_t *m, int64_t ms);

struct ipd__warm;
/* A parked child with its staging (the stage its mounts show). */
struct ipd__parked_job {
    struct ipd_sandbox_parked *pk;
    struct ipd__run_stage wk;
    char policy[IPD_EXEC_POLICY_NAME_MAX]; /* what it was parked for */
};
/* Start the slots' zygotes (threads); ex->warm is set. */
enum ipd_err ipd__warm_start(struct ipd_executor *ex);
/* End them all and wait (no run may be in a parked child any more). */
void ipd__warm_stop(struct ipd_executor *ex);
/* A new venv generation is current: every zygote is recycled. */
void ipd__warm_generation(struct ipd_executor *ex);
/* The slot's parked child for policy ep on generation gen_dir (NULL:
 * base), parked on the spot when the slot's zygote serves but holds none
 * for ep; NULL when the slot cannot run it warm.  The caller adopts its
 * staging (->wk) and runs it with ipd__warm_run, then frees it. */
struct ipd__parked_job *ipd__warm_take(struct ipd_executor *ex, unsigned slot,
                                       const struct ipd_exec_policy *ep,
                                       const char *gen_dir);
/* Run pj's child (its parked handle is consumed) for at most
 * timeout_ms; decides whether the slot's zygote is recycled. */
enum ipd_err ipd__warm_run(struct ipd_executor *ex, unsigned slot,
                           struct ipd__parked_job *pj, int64_t timeout_ms,
                           struct ipd_live *live, struct ipd_sandbox_result *r);
void ipd__parked_job_free(struct ipd__parked_job *pj); /* NULL is fine */
/* The warm set's plan changed (ipd_warmset_note said so): replace the
 * zygotes given an older one, a slot at a time. */
void ipd__warm_adapt(struct ipd_executor *ex);
/* "warm", "mixed", "starting" or "cold" (no warm workers, or none up). */
const char *ipd__warm_mode(struct ipd_executor *ex);
/* The admin status's "execution_mode" object.  New reference. */
json_t *ipd__warm_json(struct ipd_executor *ex);

/* zygote_host.c ------------------------------------------------------ */

/* Run zygote z on the venv's current generation as host uid (0: the
 * sandbox's) for at most life_ms, blocking until it ends; plan: the
 * adaptive warm set's two environment entries (ipd_warmset_plan; NULL or
 * empty: the floor only, as a session's zygote); started(ctx,
 * generation dir or "") is called just before it starts (NULL: not
 * called).  *r is its run's (release it); why[] says why it could not
 * start. */
enum ipd_err ipd__zygote_serve(struct ipd_executor *ex,
                               struct ipd_sandbox_zygote *z, uid_t uid,
                               int64_t life_ms, const char *const *plan,
                               void (*started)(void *ctx, const char *gen),
                               void *ctx, struct ipd_sandbox_result *r,
                               char *why, size_t whylen);
/* session.c (see there) ---------------------------------------------- */

enum ipd_err ipd__sessions_new(struct ipd_executor *ex,
                               const struct ipd_executor_options *opt);
void ipd__sessions_free(struct ipd_executor *ex);
/* rq in its session (rq->session_id): the session's interpreter and
 * stage, its policy's limits (timeout_ms: the request's, checked against
 * its own policy).  *result is new on IPD_OK; else NOT_FOUND, GONE,
 * IN_USE, TOO_LARGE, UNAVAILABLE or INTERNAL with detail. */
enum ipd_err ipd__session_call(struct ipd_executor *ex,
                               const struct ipd_exec_request *rq,
                               int64_t timeout_ms, json_t **result,
                               struct ipd_buf *detail);

/* What the run installed first: the request's packages and, after a
 * missing module, the automatic install. */
struct ipd__installs {
    json_t *results; /* array of CONTRACT.md package results */
    double seconds;  /* install_time */
    char auto_dist[IPD_REQ_NAME_MAX + 1]; /* installed after a
                                             ModuleNotFoundError, or "" */
};

/* packages.c --------------------------------------------------------- */

/* rq's packages before anything runs: a malformed or not-allowed
 * requirement is the client's mistake (IPD_ERR_INVALID, detail). */
enum ipd_err ipd__packages_check(const struct ipd_executor *ex,
                                 const struct ipd_exec_request *rq,
                                 struct ipd_buf *detail);
/* Install rq's packages before its code runs (ins->results replaced,
 * ins->seconds its install_time); none while the delete reserve is out. */
void ipd__packages_install(struct ipd_executor *ex,
                           const struct ipd_exec_request *rq,
                           struct ipd__installs *ins);
/* After a run r that failed with "No module named 'x'" where x comes
 * from an allowlisted distribution that is not installed: install it by
 * deadline_ms (ins gets its result).  True when the code should run
 * again. */
bool ipd__packages_auto_install(struct ipd_executor *ex,
                                const struct ipd_exec_request *rq,
                                const struct ipd_sandbox_result *r,
                                int64_t deadline_ms, struct ipd__installs *ins);

/* result.c: the prelude's result.json, read through the output dir
 * handle (the code could have replaced it with anything: a symlink, a
 * fifo, a huge file; it only ever fools its own result).  New reference,
 * or NULL when there is none or it is not an object. */
json_t *ipd__read_prelude_result(const struct ipd_sandbox_result *r);

/* result.c: the result object of CONTRACT.md for the run r of rq under
 * the policy ep (executor.h, ipd_executor_run), with the files the code
 * wrote stored as the user's generated files.  New reference. */
json_t *ipd__build_result(struct ipd_executor *ex,
                          const struct ipd_exec_request *rq,
                          const char *exec_id, const struct ipd_exec_policy *ep,
                          int64_t timeout_ms,
                          const struct ipd_sandbox_result *r,
                          const struct ipd__installs *ins, json_t *snapshot);
/* snapshot (NULL: none): a session's /mnt/output files after its last
 * call; only files new or changed since are generated_files, and it is
 * updated to what this call left. */

/* result.c: a JSON object file of the run's output dir, read through its
 * handle, at most max bytes; NULL when absent, larger or not an object. */
json_t *ipd__read_output_json(const struct ipd_sandbox_result *r,
                              const char *rel, size_t max);

#endif
