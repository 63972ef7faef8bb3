/*
 * mounts.c - what every run of the prelude (and every zygote) sees: the
 * read-only system binds, matplotlib's font cache (built by the first run
 * that needs it), the run's stage, the venv generation (or its private
 * copy, venv_stage.c); its environment and its interpreter.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../../venv/venv.h"
#include "../common/log.h"
#include "../common/util.h"
#include "exec_internal.h"

/* The read-only system binds every run gets; returns how many. */
size_t ipd__system_mounts(const struct ipd_executor *ex,
                          struct ipd_sandbox_mount *m)
{
    size_t n = 0;
    m[n++] = (struct ipd_sandbox_mount){"/usr", "/usr", false, NULL};
    m[n++] = (struct ipd_sandbox_mount){"/lib", "/lib", false, NULL};
    if (ex->have_lib64)
        m[n++] = (struct ipd_sandbox_mount){"/lib64", "/lib64", false, NULL};
    m[n++] = (struct ipd_sandbox_mount){"/bin", "/bin", false, NULL};
    /* Debian's update-alternatives: libblas.so.3 (numpy) is a symlink
     * through /etc/alternatives.  Only symlinks live there, no secrets. */
    if (ex->have_alternatives)
        m[n++] = (struct ipd_sandbox_mount){"/etc/alternatives",
                                            "/etc/alternatives", false, NULL};
    /* Debian's matplotlib reads its defaults from there. */
    if (ex->have_matplotlibrc)
        m[n++] = (struct ipd_sandbox_mount){"/etc/matplotlibrc",
                                            "/etc/matplotlibrc", false, NULL};
    return n;
}

static bool has_fontlist(const struct ipd_sandbox_stage *st)
{
    int fd = openat(ipd_sandbox_stage_fd(st), "mplcache",
                    O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    DIR *d = ipd_fdopendir(fd);
    struct dirent *e;
    bool found = false;
    if (!d)
        return false;
    while (!found && (e = readdir(d)) != NULL)
        found = !strncmp(e->d_name, "fontlist-", 9);
    closedir(d);
    return found;
}

/* The stage of the font cache: its "mplcache" dir, 0755, owned by the
 * sandbox's own host uid (the build run writes it).  NULL on failure. */
static struct ipd_sandbox_stage *mpl_stage_new(struct ipd_executor *ex)
{
    struct ipd_sandbox_stage *st = NULL;
    char err[256];
    int fd;

    if (ipd_sandbox_stage_new(64LL << 20, 4096, NULL, &st, err, sizeof(err))) {
        ipd_warn("executor: no stage for the font cache: %s", err);
        return NULL;
    }
    fd = ipd_sandbox_stage_fd(st);
    if (mkdirat(fd, "mplcache", 0755) || fchmodat(fd, "mplcache", 0755, 0) ||
        (geteuid() != ex->sbx.host_uid &&
         fchownat(fd, "mplcache", ex->sbx.host_uid, ex->sbx.host_gid,
                  AT_SYMLINK_NOFOLLOW))) {
        ipd_warn("executor: font cache stage: %s", strerror(errno));
        ipd_sandbox_stage_free(st);
        return NULL;
    }
    return st;
}

/*
 * matplotlib's font cache, built once per start (it costs ~1 s per run
 * otherwise): the "mplcache" dir of a stage of its own (no host path),
 * owned by the sandbox's host uid, filled by `import matplotlib.pyplot`
 * run IN the sandbox with the dir bound writable, then bound read-only at
 * /opt/mplcache in every run; the prelude copies it into its writable
 * MPLCONFIGDIR (IPD_PRELUDE_MPLCACHE).  Failure is not fatal: runs just
 * build their own cache.
 */
static void prepare_mpl_cache(struct ipd_executor *ex)
{
    const char *argv[] = {ex->python, "-I", "-c", "import matplotlib.pyplot",
                          NULL};
    const char *env[] = {"MPLCONFIGDIR=/opt/mplcache", NULL};
    struct ipd_sandbox_mount mounts[12];
    struct ipd_sandbox_spec spec;
    struct ipd_sandbox_policy p;
    struct ipd_sandbox_result r;
    struct ipd_sandbox_stage *st = mpl_stage_new(ex);
    size_t n;
    enum ipd_err rc;

    if (!st)
        return;
    n = ipd__system_mounts(ex, mounts);
    mounts[n++] =
        (struct ipd_sandbox_mount){"mplcache", "/opt/mplcache", true, st};
    memset(&spec, 0, sizeof(spec));
    spec.argv = argv;
    spec.env = env;
    spec.mounts = mounts;
    spec.n_mounts = n;
    ipd__policy_to_sandbox(ipd__policy_find(ex, "standard"), 120000, &p);
    rc = ipd_sandbox_run(&ex->sbx, &p, &spec, &r);
    if (!rc && r.exit_code == 0 && has_fontlist(st)) {
        ex->mpl_stage = st;
        st = NULL;
        ipd_info("executor: matplotlib font cache prepared in %.1f s",
                 r.wall_seconds);
    } else {
        ipd_warn("executor: no matplotlib font cache (%s%.200s); each run "
                 "builds its own",
                 rc ? r.error : "", rc ? "" : r.err.buf);
    }
    ipd_sandbox_result_release(&r);
    ipd_sandbox_stage_free(st);
}

/* The environment every run of the prelude gets (the sandbox already
 * sets HOME, LANG, the thread counts and MPLBACKEND; these are the
 * prelude's contract), then mpl_env and extra when not NULL. */
void ipd__run_env(const char **env, const char *mpl_env,
                  const char *const *extra)
{
    static const char *const base[] = {"PYTHONUNBUFFERED=1",
                                       "PYTHONDONTWRITEBYTECODE=1",
                                       "MPLBACKEND=Agg",
                                       "MPLCONFIGDIR=/tmp/mpl",
                                       "OPENBLAS_NUM_THREADS=1",
                                       "OMP_NUM_THREADS=1",
                                       "HOME=/tmp",
                                       "LANG=C.UTF-8"};
    size_t n = 0;

    for (size_t i = 0; i < IPD_ARRAY_LEN(base); i++)
        env[n++] = base[i];
    if (mpl_env)
        env[n++] = mpl_env;
    for (size_t i = 0; extra && extra[i] && i < 3; i++)
        env[n++] = extra[i];
    env[n] = NULL;
}

size_t ipd__run_mounts(struct ipd_executor *ex,
                       const struct ipd_sandbox_stage *st, const char *gen_dir,
                       const struct ipd_sandbox_stage *vst, bool build_mpl,
                       struct ipd_sandbox_mount *mounts, const char **mpl_env)
{
    size_t n = ipd__system_mounts(ex, mounts);

    /* The first run builds the font cache; runs meanwhile wait for it.
     * The readiness check only binds it when it is there. */
    pthread_mutex_lock(&ex->mpl_lock);
    if (!ex->mpl_tried && build_mpl) {
        ex->mpl_tried = true;
        prepare_mpl_cache(ex);
    }
    const struct ipd_sandbox_stage *mpl = ex->mpl_stage;
    pthread_mutex_unlock(&ex->mpl_lock);
    *mpl_env = NULL;
    if (mpl) {
        mounts[n++] =
            (struct ipd_sandbox_mount){"mplcache", "/opt/mplcache", false, mpl};
        *mpl_env = "IPD_PRELUDE_MPLCACHE=/opt/mplcache";
    }
    mounts[n++] =
        (struct ipd_sandbox_mount){"interpd", "/opt/interpd", false, st};
    mounts[n++] = (struct ipd_sandbox_mount){"job", "/mnt/job", false, st};
    mounts[n++] = (struct ipd_sandbox_mount){"data", "/mnt/data", false, st};
    /* The generation's copy in a private tmpfs (no host path), else the
     * generation itself. */
    if (gen_dir)
        mounts[n++] = (struct ipd_sandbox_mount){vst ? "venv" : gen_dir,
                                                 IPD_VENV_MOUNT, false, vst};
    return n;
}

const char *ipd__run_python(const struct ipd_executor *ex, const char *gen_dir)
{
    return gen_dir ? IPD_VENV_MOUNT "/bin/python" : ex->python;
}
