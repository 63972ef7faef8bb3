/*
 * warmset.h - the adaptive warm set (docs/SANDBOX.md, "The warm set").
 *
 * Each warm zygote imports the fixed floor (--warm-modules) and then, within
 * a memory budget (--warm-memory-budget), the modules this node's runs
 * import most.  This module keeps the counts and decides what the next
 * zygote is given; warm.c asks it for a plan when a zygote starts, hands it
 * the zygote's report when the zygote is ready, and recycles its slots one
 * at a time when the plan changes.
 *
 * What is counted: after each run, the prelude lists the modules the code's
 * import statements named (dotted, "scipy.stats"; "from scipy import stats"
 * gives "scipy" and "scipy.stats"), the standard library left out (.imports
 * of result.json).  Only a count per module name is kept: nothing about the
 * code, the run, its user or tenant.  Counts decay (halved every
 * WARMSET_HALF_LIFE runs), so the set follows what runs import now.
 *
 * Both inputs come from sandboxed processes (the prelude runs beside the
 * user's code; the zygote imports third-party modules): they are hostile
 * input, read bounded, with exact keys and types, names checked
 * (ipd_warmset_name_ok), at most IPD_WARMSET_NAMES_PER_RUN per run.  A
 * tenant's runs can push their own modules into the set, as real imports
 * would; the budget bounds what that costs.
 *
 * Thread-safety: every function may be called from any thread.
 */
#ifndef IPD_EXEC_WARMSET_H
#define IPD_EXEC_WARMSET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#define IPD_WARMSET_NAME_MAX 100     /* bytes in a module name */
#define IPD_WARMSET_NAMES_PER_RUN 32 /* names counted per run */
#define IPD_WARMSET_REPORT_MAX 4096  /* bytes of a zygote's report */
#define IPD_WARMSET_PLAN_MAX 16      /* candidates given to a zygote */
#define IPD_WARMSET_ENV_MAX                                                    \
    (40 + IPD_WARMSET_PLAN_MAX * (IPD_WARMSET_NAME_MAX + 12))

struct ipd_warmset;

/*
 * A warm set.  floor: the --warm-modules list (copied; never part of the
 * plan); budget_bytes: what the modules beyond the floor may add to a
 * zygote's resident memory (0: adaptation off, the zygote imports the
 * floor only); adapt_runs: runs between two looks at the plan (0: 100).
 * Free with ipd_warmset_free (NULL is fine).
 */
struct ipd_warmset *ipd_warmset_new(const char *floor, int64_t budget_bytes,
                                    unsigned adapt_runs);
void ipd_warmset_free(struct ipd_warmset *ws);

/* A module name as counted: [A-Za-z_][A-Za-z0-9_]* parts joined by ".",
 * at most IPD_WARMSET_NAME_MAX bytes. */
bool ipd_warmset_name_ok(const char *name, size_t len);

/*
 * One run's imports: imports is result.json's "imports" (borrowed; NULL,
 * or anything but an array of strings, counts the run with no imports;
 * entries that are not valid names are ignored, and any past the first
 * IPD_WARMSET_NAMES_PER_RUN).  True when this run ended a look that
 * changed the plan: the caller recycles its zygotes (warm.c).
 */
bool ipd_warmset_note(struct ipd_warmset *ws, const json_t *imports);

/*
 * The plan for a zygote starting now, as its environment entries:
 * cand_env "IPD_WARM_CANDIDATES=name[=KiB],..." (the most imported names
 * first; a measured cost when one is known) and budget_env
 * "IPD_WARM_BUDGET_KB=N", into buffers of IPD_WARMSET_ENV_MAX and 64
 * bytes.  Returns the plan's generation (see ipd_warmset_plan_gen).  With
 * adaptation off, both entries are "" and the generation 0.
 */
uint64_t ipd_warmset_plan(struct ipd_warmset *ws, char *cand_env,
                          char *budget_env);
/* The current plan's generation (a zygote with an older one is recycled
 * when its turn comes). */
uint64_t ipd_warmset_plan_gen(struct ipd_warmset *ws);

/*
 * A ready zygote's report (its READY message's text, len bytes, not
 * NUL-terminated): what it imported beyond the floor, at what cost, and
 * why it left out the rest.  Malformed reports are ignored (false).  The
 * names it imported go to set (a comma-separated list, setlen bytes, for
 * the slot's status; may be NULL) and their cost to *set_bytes.
 */
bool ipd_warmset_report(struct ipd_warmset *ws, const char *text, size_t len,
                        char *set, size_t setlen, int64_t *set_bytes);

/* A comma-separated list ("a,b") as a JSON array of strings (new
 * reference). */
json_t *ipd_warmset_list_json(const char *list);

/* The venv changed: what was measured or refused is not known any more
 * (a name that did not import may now; a cost may differ): the next
 * zygotes probe every candidate again. */
void ipd_warmset_venv_changed(struct ipd_warmset *ws);

/*
 * What a child parked now rehearses (zygote.py, _rehearse), as its
 * rehearsal groups, comma-separated into out (cap bytes, at least
 * IPD_WARMSET_REHEARSE_MAX): "pandas" and "chart" (the floor's modules)
 * when at least one in IPD_WARMSET_REHEARSE_ONE_IN of the recent runs
 * imported pandas, or matplotlib or seaborn (the same decayed counts as
 * the plan's; every one until IPD_WARMSET_REHEARSE_MIN_RUNS runs are
 * counted), and always the adaptive set's groups ("scipy", "sympy",
 * "seaborn", "sklearn", "statsmodels"; a zygote has their modules only
 * when runs import them).  A rehearsal is CPU a parked child spends
 * before its run to save that run's page faults: a node whose runs use
 * neither pandas nor charts stops paying for it, while a chat bot's mix
 * keeps every group it uses (issue 26's cell set).
 */
#define IPD_WARMSET_REHEARSE_MAX 64
#define IPD_WARMSET_REHEARSE_MIN_RUNS 20
#define IPD_WARMSET_REHEARSE_ONE_IN 32
void ipd_warmset_rehearsal(struct ipd_warmset *ws, char *out, size_t cap);

/* The admin status' "adaptive" object (new reference). */
json_t *ipd_warmset_json(struct ipd_warmset *ws);

/* For the metrics: the newest report's module count and bytes. */
void ipd_warmset_gauges(struct ipd_warmset *ws, int64_t *modules,
                        int64_t *bytes);

#endif
