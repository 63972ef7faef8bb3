/*
 * venv.h - the persistent Python environment: generations, allowlisted
 * installs, rebuilds (CONTRACT.md, Packages).
 *
 * Layout under the venv root (<data-dir>/venv):
 *   gen-<ms>-<rand>/     one generation: a venv made by the base interpreter
 *                        (with system site packages by default), plus
 *     .interpd.json      its record: created_at, venv_created_at (the age
 *                        the weekly rebuild looks at), python_version, the
 *                        requirements asked for so far, what is installed
 *     .inuse             executions hold a shared flock on it while they run
 *   current -> gen-...   the generation new executions get; switched with
 *                        rename(2) of a fresh symlink, so readers see the
 *                        old or the new one, never neither
 *   lock                 exclusive flock: one install/rebuild at a time,
 *                        across processes on this host
 *   pip-cache/           pip's download cache, kept across generations
 *
 * No generation exists until the first install: executions then run the
 * base interpreter itself, which sees exactly what an empty
 * system-site-packages venv would.
 *
 * An install never touches current: it clones current into a new
 * generation (hard links by default; pip unlinks files before rewriting
 * them, so the clone never writes through to the original), runs pip in
 * the sandbox with write access to that generation only, checks what
 * changed against the allowlist, imports every new distribution's
 * modules, and only then switches current.  Anything failing, a SIGKILL
 * included, leaves current as it was; stray generations are removed later.
 * A generation is deleted only when no execution holds it.
 *
 * pip and the import check run through a runner the caller provides (the
 * executor's sandbox), so this module never starts processes itself.
 *
 * Thread-safety: every function may be called from any thread.
 */
#ifndef IPD_VENV_H
#define IPD_VENV_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include <jansson.h>

#include "../service/common/buf.h"
#include "../service/common/ipd.h"
#include "allowlist.h"

/* Where a generation appears inside the sandbox. */
#define IPD_VENV_MOUNT "/opt/venv"
#define IPD_VENV_PIP_CACHE_MOUNT "/opt/pip-cache"
#define IPD_VENV_LINKS_MOUNT "/opt/find-links"
#define IPD_VENV_TOOLS_MOUNT "/opt/interpd" /* holds venv_check.py */

/* One command the venv needs run in the sandbox. */
struct ipd_venv_cmd {
    const char *const *argv; /* NULL-terminated, paths inside the sandbox */
    const char *gen_dir;     /* host dir bound at IPD_VENV_MOUNT, or NULL */
    bool gen_writable;       /* bind it writable (pip, venv creation) */
    bool network;            /* pip: reach the package index */
    const char *cache_dir;   /* host dir bound writable at
                                IPD_VENV_PIP_CACHE_MOUNT, or NULL */
    const char *links_dir;   /* host dir bound read-only at
                                IPD_VENV_LINKS_MOUNT, or NULL */
    const char *tools_dir;   /* host dir bound read-only at
                                IPD_VENV_TOOLS_MOUNT, or NULL */
    int64_t timeout_ms;
    /* OUT: */
    int exit_code; /* -1 when killed */
    bool timed_out;
    struct ipd_buf out; /* initialised by the caller of run */
    struct ipd_buf err;
};

struct ipd_venv_runner {
    /* Run cmd; IPD_OK when it ran (whatever its exit code), else the
     * sandbox could not be set up (a message in cmd->err). */
    enum ipd_err (*run)(void *ctx, struct ipd_venv_cmd *cmd);
    /* Optional: gen_dir (a host path, borrowed for the call) has just
     * become current, built and checked; it changes no more.  Called
     * with the install lock held, so it stays until the call returns. */
    void (*activated)(void *ctx, const char *gen_dir);
    void *ctx;
};

struct ipd_venv_options {
    const char *root;            /* the venv root (created if missing) */
    const char *base_python;     /* absolute, e.g. /usr/bin/python3 */
    bool system_site_packages;   /* venv --system-site-packages */
    const char *index_url;       /* pip --index-url, NULL: pip's default */
    const char *find_links;      /* pip --find-links dir on the host, or NULL */
    bool no_index;               /* pip --no-index: find_links only (required),
                                    and pip runs without network */
    int pip_retries;             /* pip --retries (<= 0: 1) */
    int64_t auto_retry_after_ms; /* how long ipd_venv_install_auto remembers
                                    a failure; <= 0: not at all */
    int64_t pip_timeout_ms;      /* one pip run */
    bool allow_sdist;            /* let pip build sdists (in the sandbox);
                                    default false: --only-binary=:all: */
    int64_t max_age_ms;          /* rebuild a venv older than this */
    bool link_clone;             /* clone by hard links (else copies) */
    const char *tools_dir;       /* host dir holding venv_check.py */
    uid_t owner_uid;             /* generations belong to the sandbox's */
    gid_t owner_gid;             /* host uid/gid (-1: leave as is) */
    const struct ipd_allowlist *allow; /* borrowed; outlives the venv */
};

struct ipd_venv;
struct ipd_venv_gen; /* a generation held by an execution */

/* Open (or create) the venv root; *out is new: ipd_venv_free.  Leftovers
 * of killed installs are removed.  runner is copied. */
enum ipd_err ipd_venv_new(const struct ipd_venv_options *opt,
                          const struct ipd_venv_runner *runner,
                          struct ipd_venv **out, struct ipd_buf *err);
void ipd_venv_free(struct ipd_venv *v); /* NULL is fine */

/*
 * Hold the current generation for one execution: *out is NULL when there
 * is none yet (run the base interpreter), else a handle whose directory
 * stays valid until ipd_venv_release.  Never blocks on an install.
 */
enum ipd_err ipd_venv_acquire(struct ipd_venv *v, struct ipd_venv_gen **out);
const char *ipd_venv_gen_dir(const struct ipd_venv_gen *g); /* borrowed */
void ipd_venv_release(struct ipd_venv *v, struct ipd_venv_gen *g);

/*
 * Install requirements (strings as clients wrote them).  *results is a new
 * array of CONTRACT.md result objects, one per requirement in order:
 * {"package", "status": installed|already_installed|not_allowed|invalid|
 * failed, "version", "message"}.  The statuses say what happened.
 * Serialised with every other install, except a request that installs
 * nothing (see ipd_venv_install_nothing), answered without the install
 * lock, pip or a new generation.  A requirement that what is installed
 * meets already is answered already_installed from that listing and not
 * handed to pip with the others, so a distribution the system provides
 * without metadata (see "installed" in ipd_venv_status) never goes to
 * pip.  Unless may_change (an admin key),
 * nothing the interpreter already imports may change version, asked for
 * or pulled in as a dependency: then every requirement is "failed" with
 * the reason, nothing is installed, and the answer is IPD_ERR_FORBIDDEN
 * (the results are made all the same); else IPD_OK.
 */
enum ipd_err ipd_venv_install(struct ipd_venv *v, const char *const *reqs,
                              size_t n, bool may_change, json_t **results);

/*
 * Answer a request that would install nothing, at once: every requirement
 * refused (not allowlisted, invalid, named twice), or the ones left all
 * met by what the current generation (before the first install: the base
 * interpreter, once listed) already has, by plain release versions and
 * without extras ("numpy>=1.20" with numpy 1.24.2).  Then *results is a
 * new array, as ipd_venv_install's, with already_installed and the
 * refusals, and true: no install lock, sandbox run, clone, pip or new
 * generation (so no zygote is recycled).  Never blocks on an install in
 * progress; reads the current generation's record.  false, *results
 * NULL, when something may need pip: call ipd_venv_install, which takes
 * the same shortcut when it can.  Thread-safe.
 */
bool ipd_venv_install_nothing(struct ipd_venv *v, const char *const *reqs,
                              size_t n, json_t **results);

/*
 * An automatic install of dist (a normalized, allowlisted name): as
 * ipd_venv_install of that one requirement, except that a failure is
 * remembered for auto_retry_after_ms on the current generation.  While it
 * is, the same call answers the same result at once, without pip and
 * without the install lock (*remembered true); a generation switch (any
 * successful install or rebuild) or the expiry ends it.  *results is new.
 * deadline_ms (ipd_mono_ms clock; 0: none) is the caller's: the wait for
 * the install lock and every command of the install end by then (the
 * install then "failed", saying so, and is not remembered), and with
 * less than a second left nothing is tried.
 */
enum ipd_err ipd_venv_install_auto(struct ipd_venv *v, const char *dist,
                                   bool may_change, int64_t deadline_ms,
                                   json_t **results, bool *remembered);

/* Count every install result in metrics (borrowed; NULL: none).  Call
 * before the first install. */
struct ipd_metrics;
void ipd_venv_set_metrics(struct ipd_venv *v, struct ipd_metrics *metrics);

/* True when a client may ask to install name (normalized or not). */
bool ipd_venv_allows(const struct ipd_venv *v, const char *name);

/* The distribution to install for a missing top-level module, when it is
 * allowlisted and not installed (dist filled), else false. */
bool ipd_venv_dist_for_missing_module(struct ipd_venv *v, const char *module,
                                      char dist[IPD_REQ_NAME_MAX + 1]);

/* Build a fresh generation from the base interpreter and the recorded
 * requirements, check it, switch.  A failure keeps the old one and is
 * remembered for ipd_venv_status. */
enum ipd_err ipd_venv_rebuild(struct ipd_venv *v);
/* Rebuild when the current venv is older than max_age (the scheduler's
 * venv age check); removes unused generations either way; with no venv
 * yet, lists (and caches) what the base interpreter sees. */
enum ipd_err ipd_venv_maintain(struct ipd_venv *v);

/* IPD_OK when executions can start an interpreter: the current
 * generation's, or the base one before the first install (readyz). */
enum ipd_err ipd_venv_ping(struct ipd_venv *v);

/* GET /v1/packages: {"allowed", "installed", "venv": {python_version,
 * created_at, rebuild_at}} plus for admin status {"exists", "path",
 * "generation", "last_rebuild_error"}.  New reference.  "installed" is
 * what venv_check.py listed when the current generation was made (before
 * the first install: the base interpreter's): every distribution with
 * metadata, and each allowlisted one the system provides without it
 * whose import name imports (its module's __version__), which the
 * installs' "already installed?" decision reads too. */
json_t *ipd_venv_status(struct ipd_venv *v);

#endif
