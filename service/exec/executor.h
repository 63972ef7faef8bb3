/*
 * executor.h - run a user's Python code in the sandbox and turn what it did
 * into the contract's execution result (CONTRACT.md, Executions).
 *
 * One execution: a stage of its own (a private tmpfs, stage.c); the
 * user's files (already in their scope) copied read-only under data/
 * (GridFS blobs are checked against their sha256); the Python prelude
 * (service/exec/python/prelude.py, installed with the binary) runs the
 * code in the sandbox with the policy's limits, in a slot's parked child
 * (warm) or a fresh interpreter (cold), or in its session's child (a
 * request with a session_id); afterwards the files the code wrote
 * to /mnt/output are collected through the sandbox's output directory
 * handle (never by following a path), typed, stored as the user's files
 * (source "generated", normal TTL) and returned; images up to the inline
 * limit also as data_base64.  A file that is not stored (the quota, the
 * size limit, outputs_inline_only) is still returned, inline when within
 * the limit whatever its type.
 *
 * Blocking: ipd_executor_run takes as long as the code runs.  Call it from
 * long-lived worker threads (the sandbox ties the run's lifetime to the
 * calling thread), never from an HTTP event thread.  Thread-safe.
 */
#ifndef IPD_EXECUTOR_H
#define IPD_EXECUTOR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <jansson.h>

#include "policy.h"
#include "../../storage/blob.h"
#include "../../storage/filetype.h"
#include "../../storage/meta.h"
#include "../common/buf.h"
#include "../common/ipd.h"

struct ipd_executor;
struct ipd_fetch_allowlist;

struct ipd_exec_request {
    const char *tenant;
    const char *user_id;
    const char *code; /* UTF-8 Python source */
    size_t code_len;
    const char *const *file_ids; /* the caller's own files, n_files of them */
    size_t n_files;
    int64_t timeout_ms;          /* requested wall timeout; 0: the default;
                                    only tightens: min(this, policy cap) */
    const char *policy;          /* policy name (from the config the
                                    executor was made with); NULL:
                                    "standard" */
    const json_t *variables;     /* borrowed; NULL or an object of Python
                                    variables to define (variables.json) */
    const char *const *packages; /* requirements installed before the run
                                    (needs a venv); n_packages of them */
    size_t n_packages;
    const json_t *functions;  /* borrowed; NULL or an array of names the
                                 code may call its client by (a streamed
                                 run's: calls.json) */
    const char *execution_id; /* an id made with ipd_id_new("exec") when
                                 the caller announced it already (async
                                 executions); NULL: a new one */
    bool outputs_inline_only; /* "store_outputs": false: generated files
                                 are returned (inline within the limit)
                                 and never stored */
    bool admin;               /* an admin key: its installs may change
                                 the version of what is installed */
    const char *session_id;   /* run in this session of the caller's
                                 (NULL: none); its policy and
                                 interpreter, not the request's */
    struct ipd_live *live;    /* its live channel (cancel, stream), or
                                 NULL; borrowed (service/common/live.h) */
    unsigned slot;            /* the execution slot running it (0 ..
                                 slots-1; the pool's): as root the code
                                 runs as host uid/gid sandbox_uid + 1 +
                                 slot, so concurrent runs never share
                                 per-user kernel budgets */
};

/*
 * Settings the service fills from its config (data-dir, max-file-size,
 * file-ttl, the quotas, the policies, python, prelude-dir,
 * max-generated-files, inline-image-max, sandbox-uid:
 * ipd_serve_executor_options in serve.c); tests do the same and change
 * what they need.
 */
/* --warm-memory-budget's default (docs/BENCHMARKS.md, issue 26: what a
 * bigger zygote costs each fork, against what it saves a run). */
#define IPD_WARM_MEMORY_BUDGET_DEFAULT (256LL << 20)

struct ipd_executor_options {
    const char *data_dir;          /* borrowed (required); only for
                                      removing what older versions staged
                                      there (exec/, mplcache/): runs are
                                      staged in private tmpfs (sandbox.h
                                      ipd_sandbox_stage), never in it */
    int64_t max_file_size;         /* a generated file's size limit */
    int64_t file_ttl_ms;           /* generated files' ttl (IPD_TIME_NEVER) */
    struct ipd_quota quota;        /* per user, for generated files (its
                                      tenant pointer is ignored) */
    struct ipd_quota tenant_quota; /* per tenant, all its users together
                                      (its tenant pointer ignored) */
    struct ipd_exec_policy policies[IPD_EXEC_POLICIES_MAX];
    size_t n_policies;           /* a request names one of these */
    const char *python;          /* borrowed; absolute path of the
                                    interpreter (default /usr/bin/python3) */
    const char *prelude_dir;     /* borrowed; host dir holding prelude.py
                                    (NULL: IPD_PRELUDE_DIR, else the source
                                    tree's service/exec/python) */
    int64_t max_generated_files; /* returned per execution (default 20) */
    int64_t inline_image_max;    /* data_base64 for images up to this many
                                    bytes (default 1 MiB; 0: never) */
    uid_t sandbox_uid;           /* as root: the first host uid/gid of the
                                    sandbox's range (0: the sandbox default,
                                    200000), that of service-internal runs
                                    (pip, the font cache, the readiness
                                    check) and owner of the venv and the
                                    caches; slot i runs as sandbox_uid+1+i.
                                    No id of the range may have a passwd or
                                    group entry */
    unsigned slots;              /* execution slots (0: 1) */
    /* Networked runs (the policy's network, pip with an index) reach out
     * only through an HTTP proxy on their egress socket
     * (service/fetch/egress.h) that applies the SSRF guard with this
     * allowlist (borrowed, must outlive the executor; NULL: none, so
     * loopback and private addresses are refused).  The run gets
     * HTTP_PROXY/HTTPS_PROXY (both cases) pointing at it. */
    const struct ipd_fetch_allowlist *egress_allow;
    int64_t egress_connect_timeout_ms; /* resolve + connect (0: 10 s) */
    /* Warm executions (docs/SANDBOX.md): with warm, each slot keeps a
     * zygote with these modules imported (comma-separated; NULL:
     * "numpy,pandas,matplotlib") and two children of it parked; it is
     * recycled after warm_recycle_runs runs (0: never) or
     * warm_recycle_ms (0: never).  Started by ipd_executor_start_warm. */
    bool warm;
    const char *warm_modules;
    int64_t warm_recycle_runs;
    int64_t warm_recycle_ms;
    /* The adaptive warm set (service/exec/warmset.h): beyond
     * warm_modules, each new zygote imports the modules runs import most
     * that fit warm_memory_budget bytes (0: none), looked at again every
     * warm_adapt_runs runs (0: 100). */
    int64_t warm_memory_budget;
    unsigned warm_adapt_runs;
    /* Sessions (CONTRACT.md; session.c): at most max_sessions live on
     * this node (0: none), sessions_per_user per (tenant, user), ended
     * after session_idle_ms unused or session_max_life_ms; each is
     * charged its policy's memory limit, the live ones' sum at most
     * sessions_memory (0: no bound).  A tenant holds at most its key's
     * policy's tenant_sessions and tenant_session_memory shares of
     * those.  As root, session i runs as sandbox_uid + 1 + slots + i. */
    unsigned max_sessions;
    unsigned sessions_per_user;
    int64_t sessions_memory;
    int64_t session_idle_ms;
    int64_t session_max_life_ms;
    int64_t venv_stage_max; /* runs get a copy of the venv generation
                               in a private tmpfs of at most this
                               many bytes, so they see no host path
                               for it (0: bind it by its host path;
                               default 1 GiB; see venv_stage.c) */
};

/* Fill o with the defaults above; besides: no data dir and no policies
 * (both the caller's to give), max_file_size 50 MiB, file_ttl_ms
 * IPD_TIME_NEVER, no quota (-1), user's or tenant's. */
void ipd_executor_options_default(struct ipd_executor_options *o);

/*
 * Probe the sandbox (fails when isolation isn't available: the service must
 * not run code less isolated), find the Python interpreter and the prelude,
 * remove what older versions staged in the data dir.  Borrows meta, blobs
 * and ft (they must outlive the executor); opt is borrowed during the call
 * only (its strings and policies are copied).  *out is new:
 * ipd_executor_free.  Fails with IPD_ERR_INVALID when prelude.py is
 * missing or opt has no data dir, IPD_ERR_UNAVAILABLE when the sandbox
 * probe fails or its uids are somebody's (reasons are logged).  The
 * sandbox never walks a host path as its own uid (the service hands it
 * detached mounts, see sandbox.h), so the data dir may stay 0700 under a
 * 0700 parent such as /root.
 */
enum ipd_err ipd_executor_new(struct ipd_meta *meta, struct ipd_blobs *blobs,
                              struct ipd_filetype *ft,
                              const struct ipd_executor_options *opt,
                              struct ipd_executor **out);
void ipd_executor_free(struct ipd_executor *ex); /* NULL is fine */

struct ipd_venv;
struct ipd_venv_runner;

/* The runner the venv module uses for venv creation, pip and its import
 * check: this executor's sandbox (out filled; ex must outlive its use). */
void ipd_executor_venv_runner(struct ipd_executor *ex,
                              struct ipd_venv_runner *out);
/* Run executions on venv's current generation (borrowed; NULL: the base
 * interpreter), install a request's packages there and, with
 * auto_install, the distribution of a missing allowlisted module.  Call
 * before the first run. */
void ipd_executor_set_venv(struct ipd_executor *ex, struct ipd_venv *venv,
                           bool auto_install);

struct ipd_space;

/* The data dir's delete reserve (borrowed, must outlive the executor;
 * NULL, the default: none): while it is out, generated files are not
 * stored (not_stored_reason "no_space"), as uploads are refused.  Call
 * before the first run. */
void ipd_executor_set_space(struct ipd_executor *ex, struct ipd_space *space);

/*
 * The end-to-end check behind readiness: one execution through the same
 * staging (a work dir with job/ and data/), the venv's current generation,
 * the prelude and every bind a request gets, in the sandbox with its
 * default limits (10 s at most; a few tens of ms here), reading back the
 * input it staged.  The outcome is kept for ipd_executor_ready and
 * _check_json; a failure is logged with its reason.  IPD_OK when it
 * worked.  Blocking like ipd_executor_run (call from a long-lived
 * thread); thread-safe.
 */
enum ipd_err ipd_executor_check(struct ipd_executor *ex);
/* True when the last check passed; else why[] says why (or that none
 * ran yet).  Never blocks on a run. */
bool ipd_executor_ready(struct ipd_executor *ex, char *why, size_t len);
/* The last check for the admin status: {"ok", "runs", "checked_at",
 * "duration_ms", "error"}.  New reference. */
json_t *ipd_executor_check_json(struct ipd_executor *ex);

/* Start the warm workers when the options asked for them (after
 * ipd_executor_set_venv: the zygotes run on the venv's generation).
 * Runs are cold until a slot's zygote is ready, and whenever it cannot
 * serve.  IPD_ERR_INTERNAL when its threads cannot start. */
enum ipd_err ipd_executor_start_warm(struct ipd_executor *ex);
/* Which mode serves: "warm", "mixed" (some slots), "starting", "cold". */
const char *ipd_executor_mode(struct ipd_executor *ex);
/* For the admin status: {"configured", "serving", "modules", "slots":
 * [{"slot", "mode", "runs", "restarts", "generation", "started_at",
 * "why"}]}.  New reference. */
json_t *ipd_executor_warm_json(struct ipd_executor *ex);

/*
 * Sessions (CONTRACT.md, Sessions; service/exec/session.c).  A session
 * belongs to its (tenant, user): any other caller gets IPD_ERR_NOT_FOUND.
 * An ended one answers IPD_ERR_GONE (410 session_expired) for an hour.
 * Create: *out {"session_id", "created_at", "expires_at", "last_used_at",
 * "status", "policy"}; IPD_ERR_BUSY at a bound (the user's, the
 * tenant's share of sessions or of their memory, the node's), with
 * *retry_after_s the seconds until the earliest session that holds that
 * bound can end (1..3600); IPD_ERR_UNAVAILABLE when the policy's memory
 * alone is over a budget; IPD_ERR_INVALID for a networked policy; never
 * blocks on the
 * interpreter's start (the first call waits for it).  Variables blocks
 * up to 10 s (call from a worker): {"variables": [{"name", "type",
 * "repr"}], "truncated"}, IPD_ERR_IN_USE (409 session_busy) while the
 * session runs an execution.  Details for the client in detail.
 */
enum ipd_err ipd_executor_session_create(struct ipd_executor *ex,
                                         const char *tenant, const char *user,
                                         const char *policy, json_t **out,
                                         int *retry_after_s,
                                         struct ipd_buf *detail);
enum ipd_err ipd_executor_session_get(struct ipd_executor *ex,
                                      const char *tenant, const char *user,
                                      const char *id, json_t **out);
/* {"sessions": [...]}: the caller's live ones.  New reference. */
json_t *ipd_executor_session_list(struct ipd_executor *ex, const char *tenant,
                                  const char *user);
enum ipd_err ipd_executor_session_delete(struct ipd_executor *ex,
                                         const char *tenant, const char *user,
                                         const char *id);
enum ipd_err ipd_executor_session_variables(struct ipd_executor *ex,
                                            const char *tenant,
                                            const char *user, const char *id,
                                            json_t **out,
                                            struct ipd_buf *detail);
/* What ipd_executor_run checks before it runs rq (its fields, policy and
 * timeout, its packages against the allowlist) and its files in the
 * caller's scope (metadata lookups): IPD_OK, or ipd_executor_run's answer
 * with detail.  A streamed request is checked so before it is queued,
 * so that its stream can begin at once (api/h_executions.c). */
enum ipd_err ipd_executor_precheck(struct ipd_executor *ex,
                                   const struct ipd_exec_request *rq,
                                   struct ipd_buf *detail);
/* Whether the caller's session could take a call now: IPD_OK,
 * NOT_FOUND, GONE (ended, also when it was ended while a call still runs
 * in it) or IN_USE (a call runs in a live session), with detail; a call
 * taking the session answers the same way. */
enum ipd_err ipd_executor_session_check(struct ipd_executor *ex,
                                        const char *tenant, const char *user,
                                        const char *id, struct ipd_buf *detail);
/* The adaptive warm set's size: the newest warm zygote's modules beyond
 * warm-modules and the memory they add (0 and 0 before any report). */
void ipd_executor_warm_set_gauges(struct ipd_executor *ex, int64_t *modules,
                                  int64_t *bytes);
/* End idle and too old sessions; drop old tombstones (the scheduler). */
void ipd_executor_sessions_reap(struct ipd_executor *ex);
/* {"live", "max", "per_user", "memory_bytes", "memory_charged_bytes",
 * "memory_budget_bytes", "tenants": [{"tenant", "live",
 * "memory_charged_bytes"}]} for the admin status.  New reference. */
json_t *ipd_executor_sessions_json(struct ipd_executor *ex);
/* Live sessions, their memory (bytes, at their last call's end) and
 * what they are charged against the budget (their policies' memory
 * limits). */
void ipd_executor_sessions_gauges(struct ipd_executor *ex, int64_t *live,
                                  int64_t *memory, int64_t *charged);

/* What isolation is active, for the admin status and the start-up log. */
const char *ipd_executor_sandbox_status(const struct ipd_executor *ex);

/*
 * Run one execution.  On IPD_OK *result is a new reference to the result
 * object of CONTRACT.md (execution_id, success, exit_code, timed_out,
 * stdout, stderr, *_truncated, execution_time, install_time, error,
 * generated_files, installed_packages, resources{cpu_time, max_rss_kb,
 * oom_killed, policy}), whatever the code did.  Each generated_files entry
 * has "stored": true (a File object; images within the inline limit with
 * data_base64) or false: not stored (over the quota, over the file size
 * limit, outputs_inline_only, a store failure), then without file_id and
 * expires_at, with not_stored_reason (quota_exceeded, too_large,
 * store_outputs_false, storage_error), message, and data_base64 when it
 * fits the inline limit (whatever its type), else not_inline_reason
 * (over_inline_limit).  Beyond the contract: generated_files_truncated
 * (more files than the cap), _dropped (how many), _skipped ([{filename,
 * reason}], at most 20: symlink, not_a_regular_file, unreadable).
 * IPD_ERR_TOO_LARGE for code over 1 MiB.
 * Errors (nothing ran): IPD_ERR_NOT_FOUND for a file id not in the caller's
 * scope (the message names it in *detail), IPD_ERR_INVALID for a bad
 * request (unknown policy), IPD_ERR_UNAVAILABLE when a store is down,
 * IPD_ERR_INTERNAL when the sandbox could not be set up.  A message for
 * the error reply is appended to detail (may be NULL).
 */
enum ipd_err ipd_executor_run(struct ipd_executor *ex,
                              const struct ipd_exec_request *rq,
                              json_t **result, struct ipd_buf *detail);

#endif
