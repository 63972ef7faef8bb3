/*
 * executor.c - one execution: stage the job, install its packages, run
 * the prelude in the sandbox (once more after an automatic install); the
 * result object and the generated files are result.c's.
 *
 * Staging: each run gets its own stage (sandbox.h ipd_sandbox_stage: as
 * root a tmpfs that is never attached on the host) holding job/ (code.py,
 * files.json, variables.json), data/<file_id>/<filename> (copies of the
 * user's files) and interpd/ (a copy of the prelude dir's files), bound
 * read-only at /mnt/job, /mnt/data and /opt/interpd.  Nothing is written
 * to the data dir or any other host dir for a run, so the data dir stays
 * 0700 with 0600 files, and the run's /proc/self/mountinfo shows "/job",
 * "/data", "/interpd" rather than host paths or the execution id.
 * Directories are 0755 and files 0644, owned by the service: the run's
 * unprivileged host uid reads them.  The input files' bytes are in memory
 * (the service's, swappable) while the run lasts; the stage goes with it.
 * The readiness check (ipd_executor_check, at the end) stages and runs a
 * job the same way.
 *
 * GridFS blobs (no fd) are copied through the reader and checked against
 * the metadata's sha256.
 */
#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include "../../storage/space.h"
#include "../../venv/venv.h"
#include "../common/json_out.h"
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
                              int64_t timeout_ms,
                              struct ipd_sandbox_policy *p)
{
    ipd_sandbox_policy_default(p);
    p->name = ep->name;
    p->wall_timeout_ms = timeout_ms;
    /* RLIMIT_CPU is per process: never let it fire before the wall. */
    p->cpu_seconds = (timeout_ms + 999) / 1000 + 1;
    p->memory_bytes = ep->memory_bytes;
    p->max_processes = ep->max_processes;
    p->output_cap_bytes = (size_t)ep->output_bytes;
    p->tmp_bytes = ep->tmp_bytes;
    p->output_dir_bytes = ep->output_dir_bytes;
    p->cpu_millis = ep->cpu_millis;
    p->fsize_bytes =
        ep->tmp_bytes > ep->output_dir_bytes ? ep->tmp_bytes
                                             : ep->output_dir_bytes;
    p->network = ep->network;
}

/* ---- small file helpers ---------------------------------------------- */

static void close_fd(int *fd)
{
    if (*fd >= 0)
        close(*fd);
    *fd = -1;
}

/* Create name in dirfd (must not exist), mode 0644 whatever the umask. */
static enum ipd_err write_file_at(int dirfd, const char *name,
                                  const void *data, size_t len)
{
    enum ipd_err rc = IPD_ERR_IO;
    int fd = openat(dirfd, name,
                    O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                    0644);
    if (fd < 0)
        goto out;
    if (fchmod(fd, 0644))
        goto out;
    rc = ipd_write_all(fd, data, len);
out:
    if (fd >= 0)
        close(fd);
    return rc;
}

/* mkdirat + open, with an exact mode.  Returns the dir fd or -1. */
static int mkdir_open_at(int dirfd, const char *name, mode_t mode)
{
    int fd;
    if (mkdirat(dirfd, name, mode) && errno != EEXIST)
        return -1;
    fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd >= 0 && fchmod(fd, mode)) {
        close(fd);
        fd = -1;
    }
    return fd;
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
                     "there)", data_dir, names[i]);
            (void)ipd_remove_tree_at(dd, names[i]);
        }
    }
    close(dd);
}

/* The read-only system binds every run gets; returns how many. */
size_t ipd__system_mounts(const struct ipd_executor *ex,
                            struct ipd_sandbox_mount *m)
{
    size_t n = 0;
    m[n++] = (struct ipd_sandbox_mount){"/usr", "/usr", false, NULL};
    m[n++] = (struct ipd_sandbox_mount){"/lib", "/lib", false, NULL};
    if (ex->have_lib64)
        m[n++] =
            (struct ipd_sandbox_mount){"/lib64", "/lib64", false, NULL};
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
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    struct dirent *e;
    bool found = false;
    if (!d) {
        if (fd >= 0)
            close(fd);
        return false;
    }
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

    if (ipd_sandbox_stage_new(64LL << 20, 4096, NULL, &st, err,
                              sizeof(err))) {
        ipd_warn("executor: no stage for the font cache: %s", err);
        return NULL;
    }
    fd = ipd_sandbox_stage_fd(st);
    if (mkdirat(fd, "mplcache", 0755) ||
        fchmodat(fd, "mplcache", 0755, 0) ||
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
    mounts[n++] = (struct ipd_sandbox_mount){"mplcache", "/opt/mplcache",
                                             true, st};
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
                  (unsigned)(ex->sbx.host_uid + ex->slots +
                             ex->sess_cfg.max),
                  why);
        return IPD_ERR_UNAVAILABLE;
    }
    return IPD_OK;
}

static void warm_options(struct ipd_executor *ex,
                         const struct ipd_executor_options *opt)
{
    ex->warm_wanted = opt->warm;
    snprintf(ex->warm_modules, sizeof(ex->warm_modules), "%s",
             opt->warm_modules ? opt->warm_modules
                               : "numpy,pandas,matplotlib");
    ex->warm_recycle_runs = opt->warm_recycle_runs;
    ex->warm_recycle_ms = opt->warm_recycle_ms;
    ex->sess_cfg.max = opt->max_sessions;
    ex->sess_cfg.per_user = opt->sessions_per_user;
    ex->sess_cfg.memory = opt->sessions_memory;
    ex->sess_cfg.idle_ms = opt->session_idle_ms;
    ex->sess_cfg.max_life_ms = opt->session_max_life_ms;
    (void)ipd__sessions_new(ex);
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
    warm_options(ex, opt);
    ex->python = ipd_xstrdup(opt->python ? opt->python : "/usr/bin/python3");
    ex->prelude_dir = opt->prelude_dir ? ipd_xstrdup(opt->prelude_dir)
                                       : default_prelude_dir();
    ex->have_lib64 = lstat("/lib64", &st) == 0;
    ex->have_alternatives = stat("/etc/alternatives", &st) == 0 &&
                            S_ISDIR(st.st_mode);
    ex->have_matplotlibrc = stat("/etc/matplotlibrc", &st) == 0 &&
                            S_ISREG(st.st_mode);

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

/* ---- staging --------------------------------------------------------- */

/* A blob without an fd (GridFS): copy through the reader, hash it. */
static enum ipd_err copy_reader(struct ipd_blob_reader *rd, int ofd,
                                int64_t limit, int64_t *copied,
                                char hex[IPD_SHA256_HEX])
{
    char buf[IPD__COPY_CHUNK];
    struct ipd_sha256 *h = ipd_sha256_new();
    enum ipd_err rc = IPD_ERR_IO;
    *copied = 0;
    for (;;) {
        ssize_t n = ipd_blob_reader_read(rd, buf, sizeof(buf));
        if (n < 0)
            goto out;
        if (n == 0)
            break;
        *copied += n;
        if (*copied > limit)
            goto out;
        ipd_sha256_update(h, buf, (size_t)n);
        if (ipd_write_all(ofd, buf, (size_t)n))
            goto out;
    }
    ipd_sha256_final(h, hex);
    rc = IPD_OK;
out:
    ipd_sha256_free(h);
    return rc;
}

/* data/<file_id>/<filename> in the run's stage, a 0644 copy of the
 * blob owned by the service. */
static enum ipd_err stage_file(struct ipd_executor *ex, int data_fd,
                               const struct ipd_file_meta *f,
                               struct ipd_buf *detail)
{
    struct ipd_blob_reader *rd = NULL;
    int dfd = -1, ofd = -1, in = -1;
    int64_t copied = 0;
    char hex[IPD_SHA256_HEX] = "";
    enum ipd_err rc = IPD_ERR_INTERNAL;

    /* Sanitised names never hold '/', but this is a host path. */
    if (strchr(f->filename, '/') || !strcmp(f->filename, ".") ||
        !strcmp(f->filename, "..") || !f->filename[0])
        goto out;
    dfd = mkdir_open_at(data_fd, f->file_id, 0755);
    if (dfd < 0 && errno == EEXIST) {
        rc = IPD_OK; /* already staged */
        goto out;
    }
    if (dfd < 0)
        goto out;
    ofd = openat(dfd, f->filename,
                 O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (ofd < 0 || fchmod(ofd, 0644))
        goto out;
    rc = ipd_blob_open(ex->blobs, f->file_id, &rd);
    if (rc == IPD_ERR_NOT_FOUND)
        rc = IPD_ERR_INTERNAL; /* metadata without bytes */
    if (rc) {
        if (detail)
            ipd_buf_addf(detail, "the bytes of file %s can't be read",
                         f->file_id);
        goto out;
    }
    in = ipd_blob_reader_take_fd(rd);
    if (in >= 0) {
        rc = ipd_copy_fd(in, ofd, &copied);
    } else {
        rc = copy_reader(rd, ofd, f->size, &copied, hex);
        if (!rc && strcmp(hex, f->sha256)) {
            ipd_error("executor: blob %s does not match its sha256",
                      f->file_id);
            rc = IPD_ERR_INTERNAL;
        }
    }
    if (!rc && copied != f->size) {
        ipd_error("executor: blob %s has %lld bytes, metadata says %lld",
                  f->file_id, (long long)copied, (long long)f->size);
        rc = IPD_ERR_INTERNAL;
    }
    if (rc && detail && !detail->len)
        ipd_buf_addf(detail, "file %s could not be prepared", f->file_id);
out:
    if (in >= 0)
        close(in);
    close_fd(&ofd);
    close_fd(&dfd);
    ipd_blob_reader_free(rd);
    return rc;
}

static json_t *file_entry(const struct ipd_file_meta *f)
{
    char path[IPD_FILENAME_MAX + IPD_ID_MAX + 16];
    snprintf(path, sizeof(path), "/mnt/data/%s/%s", f->file_id, f->filename);
    return json_pack("{s:s, s:s, s:s, s:s, s:s, s:I}", "file_id", f->file_id,
                     "filename", f->filename, "path", path, "file_type",
                     f->file_type, "mime_type", f->mime_type, "size",
                     (json_int_t)f->size);
}

static enum ipd_err write_json_at(int dirfd, const char *name,
                                  const json_t *doc)
{
    char *text = json_dumps(doc, JSON_COMPACT | JSON_ENSURE_ASCII);
    enum ipd_err rc = IPD_ERR_INTERNAL;
    if (text)
        rc = write_file_at(dirfd, name, text, strlen(text));
    free(text);
    return rc;
}

/* Look up every file of rq in the caller's scope into fs (rq->n_files
 * of them at most; duplicates once): *n of them, *total bytes. */
static enum ipd_err lookup_files(struct ipd_executor *ex,
                                 const struct ipd_exec_request *rq,
                                 struct ipd_file_meta *fs, size_t *n,
                                 int64_t *total, struct ipd_buf *detail)
{
    int64_t now = ipd_now_ms();

    *n = 0;
    *total = 0;
    for (size_t i = 0; i < rq->n_files; i++) {
        bool dup = false;
        const char *id = rq->file_ids[i];
        for (size_t j = 0; j < i; j++)
            dup = dup || !strcmp(rq->file_ids[j], id);
        if (dup)
            continue;
        enum ipd_err rc = ipd_id_valid("file", id)
                              ? ipd_meta_file_get(ex->meta, rq->tenant,
                                                  rq->user_id, id, now,
                                                  &fs[*n])
                              : IPD_ERR_NOT_FOUND;
        if (rc == IPD_ERR_NOT_FOUND && detail)
            ipd_buf_addf(detail, "file %.64s not found", id);
        if (rc)
            return rc;
        *total += fs[(*n)++].size;
    }
    return IPD_OK;
}

/* Look up every file in the caller's scope; when they total at most limit
 * bytes (0: no limit), copy them and write files.json.  Over the limit
 * nothing is copied: IPD_ERR_TOO_LARGE. */
static enum ipd_err stage_files(struct ipd_executor *ex,
                                const struct ipd_exec_request *rq,
                                int job_fd, int data_fd, int64_t limit,
                                struct ipd_buf *detail)
{
    struct ipd_file_meta *fs =
        ipd_xcalloc(rq->n_files ? rq->n_files : 1, sizeof(*fs));
    json_t *list = json_array();
    size_t n = 0;
    int64_t total = 0;
    enum ipd_err rc = lookup_files(ex, rq, fs, &n, &total, detail);

    if (!rc && limit > 0 && total > limit) {
        if (detail)
            ipd_buf_addf(detail, "the files of this call total %lld bytes; "
                                 "a session's call may stage at most its "
                                 "policy's memory (%lld bytes)",
                         (long long)total, (long long)limit);
        rc = IPD_ERR_TOO_LARGE;
    }
    for (size_t i = 0; !rc && i < n; i++) {
        rc = stage_file(ex, data_fd, &fs[i], detail);
        if (!rc)
            json_array_append_new(list, file_entry(&fs[i]));
    }
    if (!rc)
        rc = write_json_at(job_fd, "files.json", list);
    json_decref(list);
    free(fs);
    return rc;
}

/* ---- packages ---------------------------------------------------------- */

/* A request's packages are checked before anything runs: a malformed or
 * not-allowed requirement is the client's mistake (400), not a result. */
static enum ipd_err check_packages(const struct ipd_executor *ex,
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
                ipd_buf_addf(detail, "packages[%zu]: %s is not on this "
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

/* After a run that failed with "ModuleNotFoundError: No module named 'x'"
 * where x comes from an allowlisted distribution that is not installed:
 * install it.  True when it was installed and the code should run again. */
static bool auto_install_once(struct ipd_executor *ex,
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
    ipd_info("executor: installing %s for the missing module %s", dist,
             module);
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
    again = !strcmp(json_string_value(json_object_get(one, "status")),
                    "installed");
    if (again)
        snprintf(ins->auto_dist, sizeof(ins->auto_dist), "%s", dist);
    json_decref(res);
out:
    json_decref(prelude);
    return again;
}

/* ---- a networked run's way out -------------------------------------------- */

/* The proxy environment of a networked run: its HTTP clients (urllib,
 * requests, pip) send everything to the egress proxy, which resolves
 * names and applies the SSRF guard.  No NO_PROXY: loopback URLs go
 * through the proxy too (the run's own loopback holds nothing else). */
#define STR_(x) #x
#define STR(x) STR_(x)
#define EGRESS_URL "http://127.0.0.1:" STR(IPD_SANDBOX_EGRESS_PORT)
static const char *const egress_env[] = {
    "HTTP_PROXY=" EGRESS_URL, "HTTPS_PROXY=" EGRESS_URL,
    "http_proxy=" EGRESS_URL, "https_proxy=" EGRESS_URL,
};

/* One run's proxy: started when the sandbox hands over the egress
 * socket, stopped (every thread joined) after the run. */
struct egress_run {
    const struct ipd_egress_opts *opts;
    struct ipd_egress *eg;
};

static void egress_begin(void *ctx, int listen_fd)
{
    struct egress_run *er = ctx;

    if (ipd_egress_start(er->opts, listen_fd, &er->eg))
        ipd_log(IPD_LOG_WARN, "executor: a networked run has no way out: "
                              "its proxy could not start");
}

static void egress_end(struct egress_run *er, struct ipd_egress_stats *st)
{
    ipd_egress_stop(er->eg, st);
    if (st->accepted)
        ipd_log(IPD_LOG_DEBUG, "executor: the run's proxy took %u "
                               "connections, refused %u, failed %u",
                st->accepted, st->refused, st->failed);
    er->eg = NULL;
}

/* Run spec under p, with the proxy when p has network: its environment
 * appended to spec->env (at most 16 entries there); what the proxy did
 * in *st. */
static enum ipd_err run_sandboxed(struct ipd_executor *ex,
                                  const struct ipd_sandbox_policy *p,
                                  struct ipd_sandbox_spec *spec,
                                  struct ipd_sandbox_result *r,
                                  struct ipd_egress_stats *st)
{
    struct egress_run er = {&ex->egress, NULL};
    const char *env[16 + IPD_ARRAY_LEN(egress_env) + 1];
    const char *const *caller_env = spec->env;
    size_t n = 0;
    enum ipd_err rc;

    for (; spec->env && spec->env[n] && n < 16; n++)
        env[n] = spec->env[n];
    IPD_ASSERT(!spec->env || !spec->env[n]);
    for (size_t i = 0; p->network && i < IPD_ARRAY_LEN(egress_env); i++)
        env[n++] = egress_env[i];
    env[n] = NULL;
    spec->env = env;
    if (p->network) {
        spec->egress = egress_begin;
        spec->egress_ctx = &er;
    }
    rc = ipd_sandbox_run(&ex->sbx, p, spec, r);
    egress_end(&er, st);
    spec->env = caller_env; /* env[] ends here */
    spec->egress = NULL;
    return rc;
}

/* ---- the venv's commands ----------------------------------------------- */

/* Run one of the venv's commands (venv creation, pip, the import check)
 * in the sandbox: the generation bound at /opt/venv (writable for pip),
 * network only for pip, the resolver and CA certificates then too. */
static enum ipd_err venv_cmd_run(void *ctx, struct ipd_venv_cmd *cmd)
{
    struct ipd_executor *ex = ctx;
    struct ipd_sandbox_mount mounts[16];
    struct ipd_sandbox_spec spec;
    struct ipd_sandbox_policy p;
    struct ipd_sandbox_result r;
    size_t n = ipd__system_mounts(ex, mounts);
    /* (the sandbox writes its own nsswitch.conf and hosts) */
    static const char *const net_files[] = {"/etc/resolv.conf",
                                            "/etc/ssl/certs"};
    if (cmd->gen_dir)
        mounts[n++] = (struct ipd_sandbox_mount){
            cmd->gen_dir, IPD_VENV_MOUNT, cmd->gen_writable, NULL};
    if (cmd->cache_dir)
        mounts[n++] = (struct ipd_sandbox_mount){
            cmd->cache_dir, IPD_VENV_PIP_CACHE_MOUNT, true, NULL};
    if (cmd->links_dir)
        mounts[n++] = (struct ipd_sandbox_mount){
            cmd->links_dir, IPD_VENV_LINKS_MOUNT, false, NULL};
    if (cmd->tools_dir)
        mounts[n++] = (struct ipd_sandbox_mount){
            cmd->tools_dir, IPD_VENV_TOOLS_MOUNT, false, NULL};
    for (size_t i = 0; cmd->network && i < IPD_ARRAY_LEN(net_files); i++)
        if (!access(net_files[i], R_OK))
            mounts[n++] = (struct ipd_sandbox_mount){net_files[i],
                                                     net_files[i], false, NULL};
    memset(&spec, 0, sizeof(spec));
    spec.argv = cmd->argv;
    spec.mounts = mounts;
    spec.n_mounts = n;
    spec.cwd = "/tmp";
    ipd_sandbox_policy_default(&p);
    p.name = "venv";
    p.wall_timeout_ms = cmd->timeout_ms;
    p.cpu_seconds = (cmd->timeout_ms + 999) / 1000 + 1;
    p.memory_bytes = 2LL << 30;
    p.max_processes = 256;
    p.output_cap_bytes = cmd->out.max ? cmd->out.max : 4 << 20;
    /* pip unpacks wheels under /tmp before moving them into place. */
    p.tmp_bytes = 2LL << 30;
    p.tmp_inodes = 1 << 20;
    p.fsize_bytes = 2LL << 30;
    p.nofile = 1024;
    p.network = cmd->network;
    memset(&r, 0, sizeof(r));
    r.output_dirfd = -1;
    struct ipd_egress_stats st;
    enum ipd_err rc = run_sandboxed(ex, &p, &spec, &r, &st);
    if (rc) {
        ipd_buf_adds(&cmd->err, r.error);
    } else {
        /* pip says only "from versions: none" when the proxy answered
         * 403 or 502: its reason first, for venv/pip_diag.c. */
        if (st.last[0])
            ipd_buf_addf(&cmd->err, "interpd egress: %s\n", st.last);
        cmd->exit_code = r.exit_code;
        cmd->timed_out = r.timed_out;
        ipd_buf_add(&cmd->out, r.out.buf, r.out.len);
        /* Past the cap, the end of stderr: pip's ERROR line is there. */
        size_t skip = cmd->err.max && r.err.len > cmd->err.max - cmd->err.len
                          ? r.err.len - (cmd->err.max - cmd->err.len)
                          : 0;
        ipd_buf_add(&cmd->err, r.err.buf + skip, r.err.len - skip);
    }
    ipd_sandbox_result_release(&r);
    return rc;
}

static void venv_activated(void *ctx, const char *gen_dir)
{
    ipd__vstage_activate(ctx, gen_dir);
    ipd__warm_generation(ctx);
}

void ipd_executor_venv_runner(struct ipd_executor *ex,
                              struct ipd_venv_runner *out)
{
    out->run = venv_cmd_run;
    out->activated = venv_activated;
    out->ctx = ex;
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


/* Copy the regular files of the prelude dir into the stage's interpd/
 * (each run gets the prelude as it is on disk now, as a bind did). */
static enum ipd_err copy_prelude(const struct ipd_executor *ex, int to)
{
    int from = open(ex->prelude_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    DIR *d = from >= 0 ? fdopendir(from) : NULL;
    struct dirent *e;
    enum ipd_err rc = d ? IPD_OK : IPD_ERR_IO;

    while (!rc && (e = ipd_readdir(d)) != NULL) {
        struct stat st;
        int64_t copied;
        int in, out;
        if (fstatat(dirfd(d), e->d_name, &st, 0) || !S_ISREG(st.st_mode))
            continue;
        in = openat(dirfd(d), e->d_name, O_RDONLY | O_CLOEXEC);
        out = openat(to, e->d_name,
                     O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                     0644);
        rc = in < 0 || out < 0 || fchmod(out, 0644) ? IPD_ERR_IO
                                                    : ipd_copy_fd(in, out,
                                                                  &copied);
        if (in >= 0)
            close(in);
        if (out >= 0)
            close(out);
    }
    if (d)
        closedir(d);
    else if (from >= 0)
        close(from);
    return rc;
}

/* The run's stage with job/, data/ and interpd/ (the prelude).  Its
 * size is a limit, not a reservation: every input file at the largest
 * size, and room for the job. */
enum ipd_err ipd__work_create(struct ipd_executor *ex, struct ipd__work *wk,
                                const char *id, uid_t host_uid,
                                struct ipd_buf *why)
{
    char err[256];
    int fd, dir = -1;
    int64_t bytes = (IPD_EXEC_FILES_MAX + 1) * (ex->max_file_size > (16LL << 20)
                                           ? ex->max_file_size
                                           : (16LL << 20));

    wk->job_fd = wk->data_fd = -1;
    wk->host_uid = host_uid;
    if (id && ipd_id_valid("exec", id))
        snprintf(wk->id, sizeof(wk->id), "%s", id);
    else
        ipd_id_new("exec", wk->id);
    if (ipd_sandbox_stage_new(bytes, 4 * IPD_EXEC_FILES_MAX + 64, NULL, &wk->stage,
                              err, sizeof(err))) {
        ipd_buf_addf(why, "%s", err);
        return IPD_ERR_INTERNAL;
    }
    fd = ipd_sandbox_stage_fd(wk->stage);
    wk->job_fd = mkdir_open_at(fd, "job", 0755);
    wk->data_fd = mkdir_open_at(fd, "data", 0755);
    dir = mkdir_open_at(fd, "interpd", 0755);
    if (wk->job_fd < 0 || wk->data_fd < 0 || dir < 0) {
        ipd_buf_addf(why, "mkdir: %s", strerror(errno));
        close_fd(&dir);
        return IPD_ERR_INTERNAL;
    }
    if (copy_prelude(ex, dir)) {
        ipd_buf_addf(why, "copying the prelude from %s: %s", ex->prelude_dir,
                     strerror(errno));
        close_fd(&dir);
        return IPD_ERR_INTERNAL;
    }
    close_fd(&dir);
    return IPD_OK;
}

/* work_create for a request; a failure is logged (the client only
 * gets a 500). */
static enum ipd_err work_create_logged(struct ipd_executor *ex,
                                       struct ipd__work *wk,
                                       const struct ipd_exec_request *rq)
{
    struct ipd_buf why;
    enum ipd_err rc;

    ipd_buf_init(&why, 512);
    rc = ipd__work_create(ex, wk, rq->execution_id, ipd__slot_uid(ex, rq->slot), &why);
    if (rc)
        ipd_error("executor: cannot stage %s: %s", wk->id, why.buf);
    ipd_buf_release(&why);
    return rc;
}

void ipd__work_remove(struct ipd__work *wk)
{
    close_fd(&wk->job_fd);
    close_fd(&wk->data_fd);
    ipd_sandbox_stage_free(wk->stage);
    wk->stage = NULL;
}

/* The environment every run of the prelude gets (the sandbox already
 * sets HOME, LANG, the thread counts and MPLBACKEND; these are the
 * prelude's contract), then mpl_env and extra when not NULL. */
void ipd__run_env(const char **env, const char *mpl_env, const char *extra)
{
    static const char *const base[] = {
        "PYTHONUNBUFFERED=1",     "PYTHONDONTWRITEBYTECODE=1",
        "MPLBACKEND=Agg",         "MPLCONFIGDIR=/tmp/mpl",
        "OPENBLAS_NUM_THREADS=1", "OMP_NUM_THREADS=1",
        "HOME=/tmp",              "LANG=C.UTF-8"};
    size_t n = 0;

    for (size_t i = 0; i < IPD_ARRAY_LEN(base); i++)
        env[n++] = base[i];
    if (mpl_env)
        env[n++] = mpl_env;
    if (extra)
        env[n++] = extra;
    env[n] = NULL;
}

size_t ipd__run_mounts(struct ipd_executor *ex,
                       const struct ipd_sandbox_stage *st,
                       const char *gen_dir,
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
        mounts[n++] = (struct ipd_sandbox_mount){"mplcache", "/opt/mplcache",
                                                 false, mpl};
        *mpl_env = "IPD_PRELUDE_MPLCACHE=/opt/mplcache";
    }
    mounts[n++] = (struct ipd_sandbox_mount){"interpd", "/opt/interpd", false,
                                             st};
    mounts[n++] = (struct ipd_sandbox_mount){"job", "/mnt/job", false, st};
    mounts[n++] = (struct ipd_sandbox_mount){"data", "/mnt/data", false, st};
    /* The generation's copy in a private tmpfs (no host path), else the
     * generation itself. */
    if (gen_dir)
        mounts[n++] = (struct ipd_sandbox_mount){
            vst ? "venv" : gen_dir, IPD_VENV_MOUNT, false, vst};
    return n;
}

const char *ipd__run_python(const struct ipd_executor *ex, const char *gen_dir)
{
    return gen_dir ? IPD_VENV_MOUNT "/bin/python" : ex->python;
}

static enum ipd_err sandbox_run(struct ipd_executor *ex, struct ipd__work *wk,
                                const struct ipd_exec_policy *ep,
                                int64_t timeout_ms, const char *gen_dir,
                                bool build_mpl, struct ipd_sandbox_result *r)
{
    /* With a venv generation: its interpreter, bound read-only for the
     * whole run (the caller holds the generation until we return). */
    const char *argv[] = {ipd__run_python(ex, gen_dir), "-u", "-I", "-B",
                          "/opt/interpd/prelude.py", NULL};
    const char *env[IPD__RUN_ENV_MAX], *mpl_env;
    struct ipd_sandbox_mount mounts[IPD__RUN_MOUNTS_MAX];
    struct ipd_sandbox_spec spec;
    struct ipd_sandbox_policy p;
    struct ipd__vstage *vhold = NULL;
    const struct ipd_sandbox_stage *vst = ipd__vstage_hold(ex, gen_dir,
                                                           &vhold);
    size_t n = ipd__run_mounts(ex, wk->stage, gen_dir, vst, build_mpl, mounts,
                               &mpl_env);

    ipd__run_env(env, mpl_env, NULL);
    memset(&spec, 0, sizeof(spec));
    spec.argv = argv;
    spec.env = env;
    spec.mounts = mounts;
    spec.n_mounts = n;
    spec.cwd = "/mnt/output";
    spec.host_uid = wk->host_uid;
    ipd__policy_to_sandbox(ep, timeout_ms, &p);
    struct ipd_egress_stats st;
    enum ipd_err rc = run_sandboxed(ex, &p, &spec, r, &st);
    ipd__vstage_drop(ex, vhold);
    return rc;
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
static void install_requested(struct ipd_executor *ex,
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
static void adopt_work(struct ipd__work *wk, struct ipd__parked_job *pj,
                       const struct ipd_exec_request *rq)
{
    *wk = pj->wk;
    pj->wk.stage = NULL;
    pj->wk.job_fd = pj->wk.data_fd = -1;
    if (rq->execution_id && ipd_id_valid("exec", rq->execution_id))
        snprintf(wk->id, sizeof(wk->id), "%s", rq->execution_id);
    else
        ipd_id_new("exec", wk->id);
}

/* One run of the staged job: in the parked child *pj when there is one
 * (consumed, with the generation *wgen it was taken for), else cold on
 * the current generation; a warm run that fails to start runs cold.
 * *ran: r holds a run's result (release it). */
static enum ipd_err run_once(struct ipd_executor *ex,
                             const struct ipd_exec_request *rq,
                             const struct ipd_exec_policy *ep,
                             struct ipd__work *wk,
                             struct ipd__parked_job **pj,
                             struct ipd_venv_gen **wgen, int64_t budget_ms,
                             struct ipd_sandbox_result *r, bool *ran,
                             struct ipd_buf *detail)
{
    struct ipd_venv_gen *gen = NULL;
    enum ipd_err rc;

    *ran = false;
    if (*pj) {
        rc = ipd__warm_run(ex, rq->slot, *pj, budget_ms, r);
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
    rc = sandbox_run(ex, wk, ep, budget_ms, ipd_venv_gen_dir(gen), true, r);
    ipd_venv_release(ex->venv, gen);
    *ran = true;
    return rc;
}

/* Write the request's job into the staging; its files total at most
 * files_max bytes (0: no limit). */
static enum ipd_err stage_job(struct ipd_executor *ex,
                              const struct ipd_exec_request *rq,
                              struct ipd__work *wk, int64_t files_max,
                              struct ipd_buf *detail)
{
    enum ipd_err rc = write_file_at(wk->job_fd, "code.py",
                                    rq->code ? rq->code : "", rq->code_len);
    if (!rc && rq->variables)
        rc = write_json_at(wk->job_fd, "variables.json", rq->variables);
    if (!rc)
        rc = stage_files(ex, rq, wk->job_fd, wk->data_fd, files_max, detail);
    return rc;
}

/* Cut dirfd/name to 0 bytes, then unlink it: a descriptor or mapping the
 * session's code kept reads nothing and holds no page of the stage (the
 * service's memory).  The session cannot write to the stage (a read-only
 * mount), so every name in it is one the service made. */
static void empty_and_unlink(int dirfd, const char *name)
{
    int w = openat(dirfd, name,
                   O_WRONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (w >= 0 && ftruncate(w, 0))
        ipd_warn("executor: a staged file could not be emptied: %s",
                 strerror(errno));
    close_fd(&w);
    (void)unlinkat(dirfd, name, 0);
}

/* Empty data/: every data/<file_id>/<filename> staged, then its dir. */
static void clear_inputs(int data_fd)
{
    int fd = data_fd >= 0 ? dup(data_fd) : -1;
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    struct dirent *e;

    if (!d) {
        close_fd(&fd);
        return;
    }
    rewinddir(d); /* the offset is data_fd's, shared by the dup */
    while ((e = ipd_readdir(d)) != NULL) {
        int sub = openat(data_fd, e->d_name,
                         O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        DIR *sd = sub >= 0 ? fdopendir(sub) : NULL;
        struct dirent *f;
        if (!sd) {
            close_fd(&sub);
            empty_and_unlink(data_fd, e->d_name);
            continue;
        }
        while ((f = ipd_readdir(sd)) != NULL)
            empty_and_unlink(sub, f->d_name);
        closedir(sd);
        (void)unlinkat(data_fd, e->d_name, AT_REMOVEDIR);
    }
    closedir(d);
}

/* A session's call is over (or about to start): nothing of a job stays
 * in the session's stage, neither its code, files.json and variables.json
 * (up to the request's 8 MiB) nor its input files.  What the call's code
 * copied is its own (/tmp, /mnt/output, memory), within the session's
 * limits. */
static void clear_call(struct ipd__work *wk)
{
    static const char *const names[] = {"code.py", "files.json",
                                        "variables.json"};
    for (size_t i = 0; i < IPD_ARRAY_LEN(names); i++)
        empty_and_unlink(wk->job_fd, names[i]);
    clear_inputs(wk->data_fd);
}

/* Why a call ended its session, or NULL. */
static const char *session_end_why(const struct ipd_sandbox_result *r,
                                   bool ended)
{
    if (!ended)
        return NULL;
    if (r->timed_out)
        return "an execution timed out";
    if (r->oom_killed)
        return "an execution used more memory than its policy allows";
    return "its interpreter exited";
}

/* rq in its session (rq->session_id): the session's interpreter and
 * staging, its policy's limits. */
static enum ipd_err session_run(struct ipd_executor *ex,
                                const struct ipd_exec_request *rq,
                                int64_t timeout_ms, json_t **result,
                                struct ipd_buf *detail)
{
    struct ipd__session *s = NULL;
    struct ipd_sandbox_result r;
    struct ipd__installs ins;
    char id[IPD_ID_MAX];
    bool ended = false;
    enum ipd_err rc = ipd__session_begin(ex, rq->tenant, rq->user_id,
                                         rq->session_id, &s, detail);
    if (rc)
        return rc;
    const struct ipd_exec_policy *ep =
        ipd__policy_find(ex, ipd__session_policy(s));
    struct ipd__work *wk = ipd__session_work(s);
    /* The session's policy sets the limits, so its default timeout too
     * (not the one of a policy the request names). */
    if (!rq->timeout_ms)
        timeout_ms = ep->timeout_ms;
    if (timeout_ms > ep->max_timeout_ms)
        timeout_ms = ep->max_timeout_ms;
    memset(&ins, 0, sizeof(ins));
    ins.results = json_array();
    if (rq->execution_id && ipd_id_valid("exec", rq->execution_id))
        snprintf(id, sizeof(id), "%s", rq->execution_id);
    else
        ipd_id_new("exec", id);
    clear_call(wk);
    /* A call's inputs are in the service's memory (the stage's tmpfs)
     * while it runs: at most what the session may hold itself. */
    rc = stage_job(ex, rq, wk, ep->memory_bytes, detail);
    if (!rc) {
        rc = ipd_sandbox_parked_call(ipd__session_parked(s), 'G', timeout_ms,
                                     &r, &ended);
        clear_call(wk);
        if (!rc) {
            *result = ipd__build_result(ex, rq, id, ep, timeout_ms, &r, &ins,
                                        ipd__session_snapshot(s));
            json_object_set_new(*result, "session_id",
                                json_string(rq->session_id));
        } else if (ipd__session_ended(s, detail)) {
            /* Ended under the call (DELETE, shutdown): its zygote, and
             * the child with it, were stopped.  Not an internal error. */
            rc = IPD_ERR_GONE;
            ended = true;
        } else {
            ipd_error("executor: session %s: %s", rq->session_id, r.error);
            ipd_buf_adds(detail, "the session's interpreter failed");
            ended = true;
        }
        ipd__session_end(ex, s, session_end_why(&r, ended), &r);
        ipd__session_result(s, *result); /* session_ended, and why */
        ipd_sandbox_result_release(&r);
    } else {
        clear_call(wk);
        ipd__session_end(ex, s, NULL, NULL);
    }
    json_decref(ins.results);
    return rc;
}

enum ipd_err ipd_executor_run(struct ipd_executor *ex,
                              const struct ipd_exec_request *rq,
                              json_t **result, struct ipd_buf *detail)
{
    const struct ipd_exec_policy *ep = NULL;
    int64_t timeout_ms = 0;
    struct ipd__work wk;
    struct ipd_sandbox_result r;
    struct ipd__installs ins;
    struct ipd__parked_job *pj = NULL;
    struct ipd_venv_gen *wgen = NULL;
    bool ran = false;
    enum ipd_err rc;

    *result = NULL;
    memset(&wk, 0, sizeof(wk));
    wk.job_fd = wk.data_fd = -1;
    memset(&r, 0, sizeof(r));
    r.output_dirfd = -1;
    memset(&ins, 0, sizeof(ins));
    ins.results = json_array();
    rc = check_request(ex, rq, &ep, &timeout_ms, detail);
    if (!rc)
        rc = check_packages(ex, rq, detail);
    if (rc)
        goto out;
    if (rq->session_id) {
        rc = session_run(ex, rq, timeout_ms, result, detail);
        goto out;
    }
    install_requested(ex, rq, &ins);
    pj = take_warm(ex, rq, ep, &wgen);
    if (pj)
        adopt_work(&wk, pj, rq);
    else
        rc = work_create_logged(ex, &wk, rq);
    if (!rc)
        rc = stage_job(ex, rq, &wk, 0, detail);
    if (rc)
        goto out;
    int64_t run_t0 = ipd_mono_ms(), budget_ms = timeout_ms;
    for (int attempt = 0;; attempt++) {
        /* The run after an automatic install gets what is left of the
         * request's timeout: the first run and the install count. */
        if (attempt > 0)
            budget_ms = timeout_ms - (ipd_mono_ms() - run_t0);
        if (budget_ms < 1)
            budget_ms = 1;
        rc = run_once(ex, rq, ep, &wk, &pj, &wgen, budget_ms, &r, &ran,
                      detail);
        if (rc == IPD_ERR_UNAVAILABLE && !ran)
            goto out;
        /* The install itself ends by the request's deadline too. */
        if (rc || attempt > 0 ||
            !auto_install_once(ex, rq, &r, run_t0 + timeout_ms, &ins))
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
    *result = ipd__build_result(ex, rq, wk.id, ep, timeout_ms, &r, &ins,
                                NULL);
out:
    if (ran)
        ipd_sandbox_result_release(&r);
    json_decref(ins.results);
    ipd__parked_job_free(pj);
    ipd_venv_release(ex->venv, wgen);
    ipd__work_remove(&wk);
    return rc;
}

/* ---- readiness: one execution end to end ------------------------------ */

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
static enum ipd_err probe_stage(struct ipd__work *wk)
{
    static const char code[] =
        "print(open('/mnt/data/probe/probe.txt').read(), end='')\n";
    int dfd = -1;
    enum ipd_err rc = write_file_at(wk->job_fd, "code.py", code,
                                    sizeof(code) - 1);
    if (!rc)
        rc = write_file_at(wk->job_fd, "files.json", "[]", 2);
    if (rc)
        return rc;
    dfd = mkdir_open_at(wk->data_fd, "probe", 0755);
    if (dfd < 0)
        return IPD_ERR_IO;
    rc = write_file_at(dfd, "probe.txt", PROBE_TEXT, strlen(PROBE_TEXT));
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
    struct ipd__work wk;
    enum ipd_err rc;

    memset(&r, 0, sizeof(r));
    r.output_dirfd = -1;
    memset(&wk, 0, sizeof(wk));
    wk.job_fd = wk.data_fd = -1;
    probe_policy(&ep);
    struct ipd_buf werr;
    ipd_buf_init(&werr, 256);
    rc = ipd__work_create(ex, &wk, NULL, 0, &werr);
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
    rc = sandbox_run(ex, &wk, &ep, PROBE_TIMEOUT_MS, ipd_venv_gen_dir(gen),
                     false, &r);
    ipd_venv_release(ex->venv, gen);
    if (rc)
        snprintf(why, len, "%s", r.error);
    else
        rc = probe_judge(&r, why, len);
out:
    ipd_sandbox_result_release(&r);
    ipd__work_remove(&wk);
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
    j = json_pack("{s:b, s:I, s:o, s:I, s:s?}", "ok", ex->check.ok,
                  "runs", (json_int_t)ex->check.runs, "checked_at",
                  ipd_json_time(ex->check.runs ? ex->check.at_ms
                                               : IPD_TIME_NEVER),
                  "duration_ms", (json_int_t)ex->check.duration_ms, "error",
                  ex->check.ok ? NULL : ex->check.error);
    pthread_mutex_unlock(&ex->check_lock);
    return j;
}
