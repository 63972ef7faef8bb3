/*
 * venv.c - venv generations, serialised installs, rebuilds.  See venv.h
 * for the layout and the guarantees.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include "../service/common/json_out.h"
#include "../service/common/log.h"
#include "../service/common/metrics.h"
#include "../service/common/util.h"
#include "pip_diag.h"
#include "requirement.h"
#include "venv.h"

#define GEN_PREFIX "gen-"
#define TRASH_PREFIX "trash-"
#define RECORD ".interpd.json"
#define INUSE ".inuse"
#define CMD_OUT_MAX (4 * 1024 * 1024) /* venv_check's JSON */
#define CMD_ERR_MAX (64 * 1024)
#define MESSAGE_MAX 480 /* a result's message */
#define CREATE_TIMEOUT_MS (5 * 60 * 1000)
#define CHECK_TIMEOUT_MS (2 * 60 * 1000)
#define NAME_MAX_GEN 64

struct ipd_venv {
    char *root;
    int root_fd;
    char *base_python;
    bool system_site;
    char *index_url;
    char *find_links;
    bool no_index;         /* pip --no-index: the wheel folder only */
    char retries[16];      /* pip --retries */
    int64_t auto_retry_ms; /* how long a failed auto-install is kept */
    char *tools_dir;
    int64_t pip_timeout_ms;
    int64_t max_age_ms;
    bool link_clone;
    bool allow_sdist;
    uid_t owner_uid;
    gid_t owner_gid;
    const struct ipd_allowlist *allow;
    struct ipd_venv_runner runner;
    pthread_mutex_t lock;       /* one install in this process at a time */
    pthread_mutex_t state_lock; /* the fields below */
    char *last_rebuild_error;   /* NULL: none (or it succeeded since) */
    int64_t last_rebuild_ms;
    json_t *base_status;         /* check of the base interpreter, cached */
    int64_t base_failed_ms;      /* last failed base check (mono), or 0 */
    struct ipd_metrics *metrics; /* borrowed, may be NULL */
    /* Failed automatic installs, {dist: {"gen", "until" (mono ms),
     * "result"}}: under state_lock. */
    json_t *auto_failed;
};

struct ipd_venv_gen {
    char *dir;
    int inuse_fd;
};

/* One requirement of an install request. */
struct want {
    char canon[IPD_REQ_FORMAT_MAX];  /* what pip is given */
    char name[IPD_REQ_NAME_MAX + 1]; /* normalized distribution name */
    json_t *result;                  /* borrowed from the results array */
};

/* ---- small helpers ----------------------------------------------------- */

static void set_result(json_t *res, const char *status, const char *version,
                       const char *fmt, ...) IPD_PRINTF(4, 5);

static void set_result(json_t *res, const char *status, const char *version,
                       const char *fmt, ...)
{
    json_object_set_new(res, "status", json_string(status));
    json_object_set_new(res, "version",
                        version ? json_string(version) : json_null());
    if (fmt) {
        char msg[MESSAGE_MAX + 1];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof(msg), fmt, ap);
        va_end(ap);
        /* pip's messages are ASCII, but never let a stray byte make the
         * result unserialisable. */
        json_t *s = json_string(msg);
        json_object_set_new(res, "message",
                            s ? s
                              : json_string("(message "
                                            "not UTF-8)"));
    } else {
        json_object_set_new(res, "message", json_null());
    }
}

static bool has_prefix(const char *s, const char *p)
{
    return strncmp(s, p, strlen(p)) == 0;
}

/* The deadline of the calling thread's install (monotonic ms; 0: none),
 * and whether it cut a step short.  ipd_venv_install_auto sets them for
 * its call: an automatic install runs inside an execution's time budget,
 * so every command, and the wait for the install lock, ends by then. */
static _Thread_local int64_t tls_deadline_ms;
static _Thread_local bool tls_out_of_time;

/* ms, or what is left before the thread's deadline when that is less. */
static int64_t within_deadline(int64_t ms, bool *cut)
{
    int64_t left = tls_deadline_ms ? tls_deadline_ms - ipd_mono_ms() : ms;
    *cut = left < ms;
    if (!*cut)
        return ms;
    return left > 1 ? left : 1;
}

static enum ipd_err run_cmd(struct ipd_venv *v, struct ipd_venv_cmd *c)
{
    bool cut;
    ipd_buf_reset(&c->out);
    ipd_buf_reset(&c->err);
    c->exit_code = -1;
    c->timed_out = false;
    c->timeout_ms = within_deadline(c->timeout_ms, &cut);
    enum ipd_err rc = v->runner.run(v->runner.ctx, c);
    if (!rc && c->timed_out && cut)
        tls_out_of_time = true;
    return rc;
}

static void cmd_init(struct ipd_venv_cmd *c)
{
    memset(c, 0, sizeof(*c));
    ipd_buf_init(&c->out, CMD_OUT_MAX);
    ipd_buf_init(&c->err, CMD_ERR_MAX);
}

static void cmd_release(struct ipd_venv_cmd *c)
{
    ipd_buf_release(&c->out);
    ipd_buf_release(&c->err);
}

/* ---- trees --------------------------------------------------------------- */

static int copy_file_at(int sfd, const char *name, int dfd, mode_t mode)
{
    int in = openat(sfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    int out = -1, rc = -1;
    if (in < 0)
        return -1;
    out = openat(dfd, name, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC,
                 mode & 07777);
    if (out < 0)
        goto done;
    int64_t copied = 0;
    if (ipd_copy_fd(in, out, &copied))
        goto done;
    rc = 0;
done:
    close(in);
    if (out >= 0 && close(out))
        rc = -1;
    return rc;
}

static int clone_tree(struct ipd_venv *v, int sfd, int dfd, int depth);

/* Clone the directory sname under sfd into dname under dfd, an existing
 * empty directory (clone_tree).  -1 with errno when it fails. */
static int clone_at(struct ipd_venv *v, int sfd, const char *sname, int dfd,
                    const char *dname, int depth)
{
    int s2 =
        openat(sfd, sname, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    int d2 =
        openat(dfd, dname, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    int r = (s2 >= 0 && d2 >= 0) ? clone_tree(v, s2, d2, depth) : -1;
    if (s2 >= 0)
        close(s2);
    if (d2 >= 0)
        close(d2);
    return r;
}

/*
 * Clone the tree src into dst (an existing empty dir): directories made
 * afresh and given to the owner, regular files hard-linked (or copied),
 * symlinks recreated.  The generation's bookkeeping files are not cloned.
 */
static int clone_tree(struct ipd_venv *v, int sfd, int dfd, int depth)
{
    DIR *d = NULL;
    struct dirent *e;
    int rc = -1;
    int dup_fd = depth > 64 ? -1 : dup(sfd);
    if (dup_fd < 0)
        goto out;
    d = fdopendir(dup_fd);
    if (!d) {
        close(dup_fd);
        goto out;
    }
    rewinddir(d);
    while ((e = ipd_readdir(d)) != NULL) {
        struct stat st;
        if (depth == 0 &&
            (!strcmp(e->d_name, RECORD) || !strcmp(e->d_name, INUSE)))
            continue;
        if (fstatat(sfd, e->d_name, &st, AT_SYMLINK_NOFOLLOW))
            goto out;
        if (S_ISDIR(st.st_mode)) {
            if (mkdirat(dfd, e->d_name, st.st_mode & 07777))
                goto out;
            if (v->owner_uid != (uid_t)-1)
                (void)fchownat(dfd, e->d_name, v->owner_uid, v->owner_gid,
                               AT_SYMLINK_NOFOLLOW);
            if (clone_at(v, sfd, e->d_name, dfd, e->d_name, depth + 1))
                goto out;
        } else if (S_ISLNK(st.st_mode)) {
            char target[PATH_MAX];
            ssize_t n = readlinkat(sfd, e->d_name, target, sizeof(target) - 1);
            if (n < 0)
                goto out;
            target[n] = '\0';
            if (symlinkat(target, dfd, e->d_name))
                goto out;
            if (v->owner_uid != (uid_t)-1)
                (void)fchownat(dfd, e->d_name, v->owner_uid, v->owner_gid,
                               AT_SYMLINK_NOFOLLOW);
        } else if (S_ISREG(st.st_mode)) {
            /* Hard links share the inode with current: only while nothing
             * but pip writes in the sandbox (wheels); sdist builds run
             * code there, which could write through a link. */
            if (v->link_clone && !v->allow_sdist) {
                if (linkat(sfd, e->d_name, dfd, e->d_name, 0))
                    goto out;
            } else {
                if (copy_file_at(sfd, e->d_name, dfd, st.st_mode))
                    goto out;
                if (v->owner_uid != (uid_t)-1)
                    (void)fchownat(dfd, e->d_name, v->owner_uid, v->owner_gid,
                                   AT_SYMLINK_NOFOLLOW);
            }
        }
        /* Sockets, fifos, devices: nothing a venv needs. */
    }
    rc = 0;
out:
    if (d)
        closedir(d);
    return rc;
}

/* ---- generations ------------------------------------------------------- */

/* current's target ("gen-..."), or false when there is none. */
static bool read_current(struct ipd_venv *v, char *name, size_t size)
{
    ssize_t n = readlinkat(v->root_fd, "current", name, size - 1);
    if (n <= 0 || (size_t)n >= size - 1)
        return false;
    name[n] = '\0';
    return has_prefix(name, GEN_PREFIX) && !strchr(name, '/');
}

static char *gen_path(struct ipd_venv *v, const char *gen)
{
    struct ipd_buf b;
    ipd_buf_init(&b, IPD_BUF_UNLIMITED);
    ipd_buf_addf(&b, "%s/%s", v->root, gen);
    return ipd_buf_detach(&b, NULL);
}

static json_t *read_record(struct ipd_venv *v, const char *gen)
{
    char path[PATH_MAX];
    json_error_t jerr;
    snprintf(path, sizeof(path), "%s/%s/%s", v->root, gen, RECORD);
    json_t *j = json_load_file(path, 0, &jerr);
    if (j && !json_is_object(j)) {
        json_decref(j);
        j = NULL;
    }
    return j;
}

static enum ipd_err write_record(struct ipd_venv *v, const char *gen,
                                 json_t *rec)
{
    char tmp[PATH_MAX], path[PATH_MAX];
    snprintf(tmp, sizeof(tmp), "%s/%s/%s.tmp", v->root, gen, RECORD);
    snprintf(path, sizeof(path), "%s/%s/%s", v->root, gen, RECORD);
    /* The sandbox could write in the generation (pip ran there): never
     * follow a name it may have planted. */
    (void)unlink(tmp);
    int fd =
        open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0)
        return IPD_ERR_IO;
    if (json_dumpfd(rec, fd, JSON_COMPACT | JSON_SORT_KEYS) || fsync(fd)) {
        close(fd);
        (void)unlink(tmp);
        return IPD_ERR_IO;
    }
    close(fd);
    return rename(tmp, path) ? IPD_ERR_IO : IPD_OK;
}

/* (Re)make gen's .inuse as a fresh regular file of ours.  Called again
 * after the sandbox steps and before the switch: pip and the import check
 * run with the generation writable and could have replaced it (a symlink
 * to a fifo would hang acquire; a missing one would refuse every run). */
static enum ipd_err make_inuse(struct ipd_venv *v, const char *gen)
{
    char inuse[NAME_MAX_GEN + 16];
    snprintf(inuse, sizeof(inuse), "%s/" INUSE, gen);
    if (unlinkat(v->root_fd, inuse, 0) && errno != ENOENT &&
        unlinkat(v->root_fd, inuse, AT_REMOVEDIR))
        return IPD_ERR_IO;
    int fd = openat(v->root_fd, inuse,
                    O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0)
        return IPD_ERR_IO;
    close(fd);
    return IPD_OK;
}

/* Open gen's .inuse for a flock: never a symlink or anything but a regular
 * file, never blocking.  -1 with errno. */
static int open_inuse(struct ipd_venv *v, const char *gen)
{
    char inuse[NAME_MAX_GEN + 16];
    struct stat st;
    snprintf(inuse, sizeof(inuse), "%s/" INUSE, gen);
    int fd = openat(v->root_fd, inuse,
                    O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd >= 0 && (fstat(fd, &st) || !S_ISREG(st.st_mode))) {
        close(fd);
        errno = EINVAL;
        fd = -1;
    }
    return fd;
}

/* Make an empty generation dir with its .inuse file; name filled. */
static enum ipd_err gen_create(struct ipd_venv *v, char *name, size_t size)
{
    unsigned char rnd[4];
    char hex[9];
    ipd_random_bytes(rnd, sizeof(rnd));
    for (size_t i = 0; i < sizeof(rnd); i++)
        snprintf(hex + 2 * i, 3, "%02x", rnd[i]);
    snprintf(name, size, GEN_PREFIX "%lld-%s", (long long)ipd_now_ms(), hex);
    if (mkdirat(v->root_fd, name, 0755))
        return IPD_ERR_IO;
    if (v->owner_uid != (uid_t)-1 &&
        fchownat(v->root_fd, name, v->owner_uid, v->owner_gid, 0))
        return IPD_ERR_IO;
    return make_inuse(v, name);
}

static void gen_discard(struct ipd_venv *v, const char *name)
{
    if (name[0] && ipd_remove_tree_at(v->root_fd, name))
        ipd_warn("venv: could not remove %s/%s: %s", v->root, name,
                 strerror(errno));
}

static enum ipd_err switch_current(struct ipd_venv *v, const char *gen)
{
    char tmp[NAME_MAX_GEN + 32];
    snprintf(tmp, sizeof(tmp), "current.tmp-%s", gen);
    (void)unlinkat(v->root_fd, tmp, 0);
    if (symlinkat(gen, v->root_fd, tmp))
        return IPD_ERR_IO;
    if (renameat(v->root_fd, tmp, v->root_fd, "current")) {
        (void)unlinkat(v->root_fd, tmp, 0);
        return IPD_ERR_IO;
    }
    (void)fsync(v->root_fd);
    ipd_info("venv: current is now %s", gen);
    if (v->runner.activated) {
        char *dir = gen_path(v, gen);
        v->runner.activated(v->runner.ctx, dir);
        free(dir);
    }
    return IPD_OK;
}

/* Make gen current with rec as its record.  The sandbox steps ran with gen
 * writable, so its .inuse is made afresh first (make_inuse).  On failure
 * errno is as the failing call left it. */
static enum ipd_err gen_promote(struct ipd_venv *v, const char *gen,
                                json_t *rec)
{
    enum ipd_err rc = make_inuse(v, gen);
    if (!rc)
        rc = write_record(v, gen, rec);
    if (!rc)
        rc = switch_current(v, gen);
    return rc;
}

/*
 * Remove generations nobody uses: not current, and no execution holding
 * .inuse (shared flock).  Called with the install lock held, so no
 * generation is being built meanwhile.  A generation is renamed to
 * trash-* before its tree goes, so an acquirer that raced us fails to open
 * its .inuse and looks at current again.
 */
static void gc(struct ipd_venv *v)
{
    char cur[NAME_MAX_GEN] = "";
    int fd = dup(v->root_fd);
    DIR *d = ipd_fdopendir(fd);
    struct dirent *e;
    if (!d)
        return;
    (void)read_current(v, cur, sizeof(cur));
    rewinddir(d);
    while ((e = readdir(d)) != NULL) {
        char trash[NAME_MAX_GEN + 16];
        if (has_prefix(e->d_name, "current.tmp-")) {
            (void)unlinkat(v->root_fd, e->d_name, 0);
            continue;
        }
        if (has_prefix(e->d_name, TRASH_PREFIX)) {
            gen_discard(v, e->d_name);
            continue;
        }
        if (!has_prefix(e->d_name, GEN_PREFIX) || !strcmp(e->d_name, cur) ||
            strlen(e->d_name) >= NAME_MAX_GEN)
            continue;
        int ifd = open_inuse(v, e->d_name);
        if (ifd < 0 && errno != ENOENT)
            continue; /* cannot tell whether an execution holds it */
        if (ifd >= 0 && flock(ifd, LOCK_EX | LOCK_NB)) {
            close(ifd); /* an execution still runs on it */
            continue;
        }
        snprintf(trash, sizeof(trash), TRASH_PREFIX "%s",
                 e->d_name + strlen(GEN_PREFIX));
        if (!renameat(v->root_fd, e->d_name, v->root_fd, trash))
            gen_discard(v, trash);
        if (ifd >= 0)
            close(ifd);
    }
    closedir(d);
}

enum ipd_err ipd_venv_acquire(struct ipd_venv *v, struct ipd_venv_gen **out)
{
    *out = NULL;
    for (int attempt = 0; attempt < 20; attempt++) {
        char cur[NAME_MAX_GEN], inuse[NAME_MAX_GEN + 16];
        struct stat a, b;
        if (!read_current(v, cur, sizeof(cur)))
            return IPD_OK; /* no venv yet: the base interpreter */
        snprintf(inuse, sizeof(inuse), "%s/" INUSE, cur);
        int fd = open_inuse(v, cur);
        if (fd < 0)
            continue; /* switched and collected meanwhile */
        /* Non-blocking: the collector holds it exclusively only for the
         * moment of the rename, and only for a generation that is no
         * longer current. */
        if (flock(fd, LOCK_SH | LOCK_NB) || fstat(fd, &a) ||
            fstatat(v->root_fd, inuse, &b, 0) || a.st_ino != b.st_ino ||
            a.st_dev != b.st_dev) {
            close(fd);
            continue;
        }
        struct ipd_venv_gen *g = ipd_xcalloc(1, sizeof(*g));
        g->dir = gen_path(v, cur);
        g->inuse_fd = fd;
        *out = g;
        return IPD_OK;
    }
    return IPD_ERR_UNAVAILABLE;
}

const char *ipd_venv_gen_dir(const struct ipd_venv_gen *g)
{
    return g ? g->dir : NULL;
}

void ipd_venv_release(struct ipd_venv *v, struct ipd_venv_gen *g)
{
    (void)v;
    if (!g)
        return;
    close(g->inuse_fd);
    free(g->dir);
    free(g);
}

/* ---- the install lock ---------------------------------------------------- */

/* flock fd, by the thread's deadline if it has one (polled: flock has
 * no timeout).  0, or -1 with errno (ETIMEDOUT past the deadline). */
static int flock_by_deadline(int fd)
{
    for (;;) {
        if (!flock(fd, tls_deadline_ms ? LOCK_EX | LOCK_NB : LOCK_EX))
            return 0;
        if (errno == EINTR)
            continue;
        if (errno != EWOULDBLOCK)
            return -1;
        if (ipd_mono_ms() >= tls_deadline_ms) {
            tls_out_of_time = true;
            errno = ETIMEDOUT;
            return -1;
        }
        struct timespec ts = {.tv_nsec = 20 * 1000000L};
        nanosleep(&ts, NULL);
    }
}

/* The process's mutex, by the thread's deadline if it has one. */
static int mutex_by_deadline(pthread_mutex_t *m)
{
    if (!tls_deadline_ms)
        return pthread_mutex_lock(m);
    struct timespec until = {.tv_sec = (time_t)(tls_deadline_ms / 1000),
                             .tv_nsec =
                                 (long)(tls_deadline_ms % 1000) * 1000000L};
    int e = pthread_mutex_clocklock(m, CLOCK_MONOTONIC, &until);
    if (e == ETIMEDOUT)
        tls_out_of_time = true;
    return e;
}

static int lock_take(struct ipd_venv *v)
{
    int e = mutex_by_deadline(&v->lock);
    if (e) {
        errno = e;
        return -1;
    }
    int fd = openat(v->root_fd, "lock", O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd >= 0 && flock_by_deadline(fd)) {
        int saved = errno;
        close(fd);
        fd = -1;
        errno = saved;
    }
    if (fd < 0)
        pthread_mutex_unlock(&v->lock);
    return fd;
}

static void lock_drop(struct ipd_venv *v, int fd)
{
    close(fd); /* releases the flock */
    pthread_mutex_unlock(&v->lock);
}

/* ---- site-packages ---------------------------------------------------------
 */

/* {normalized name: version} of the distributions in a generation's own
 * site-packages (lib/python3.X/site-packages/<name>-<version>.dist-info). */
static json_t *scan_dists(struct ipd_venv *v, const char *gen)
{
    json_t *m = json_object();
    char lib[PATH_MAX];
    snprintf(lib, sizeof(lib), "%s/%s/lib", v->root, gen);
    DIR *ld = opendir(lib);
    struct dirent *e;
    if (!ld)
        return m;
    while ((e = readdir(ld)) != NULL) {
        if (!has_prefix(e->d_name, "python"))
            continue;
        char sp[PATH_MAX + 300];
        snprintf(sp, sizeof(sp), "%s/%s/site-packages", lib, e->d_name);
        DIR *sd = opendir(sp);
        struct dirent *f;
        if (!sd)
            continue;
        while ((f = readdir(sd)) != NULL) {
            size_t len = strlen(f->d_name);
            const char *suffix = ".dist-info";
            size_t sl = strlen(suffix);
            if (len <= sl || strcmp(f->d_name + len - sl, suffix))
                continue;
            const char *dash = strchr(f->d_name, '-');
            if (!dash || (size_t)(dash - f->d_name) > IPD_REQ_NAME_MAX)
                continue;
            char raw[IPD_REQ_NAME_MAX + 1], name[IPD_REQ_NAME_MAX + 1];
            memcpy(raw, f->d_name, (size_t)(dash - f->d_name));
            raw[dash - f->d_name] = '\0';
            ipd_package_name_normalize(raw, name, sizeof(name));
            json_object_set_new(
                m, name,
                json_stringn(dash + 1,
                             len - sl - (size_t)(dash + 1 - f->d_name)));
        }
        closedir(sd);
    }
    closedir(ld);
    return m;
}

/* ---- sandboxed steps ----------------------------------------------------- */

static enum ipd_err create_venv(struct ipd_venv *v, const char *gen,
                                struct ipd_buf *why)
{
    char *dir = gen_path(v, gen);
    const char *argv[6] = {v->base_python, "-m", "venv"};
    size_t k = 3;
    if (v->system_site)
        argv[k++] = "--system-site-packages";
    argv[k++] = IPD_VENV_MOUNT;
    argv[k] = NULL;
    struct ipd_venv_cmd c;
    cmd_init(&c);
    c.argv = argv;
    c.gen_dir = dir;
    c.gen_writable = true;
    c.timeout_ms = CREATE_TIMEOUT_MS;
    enum ipd_err rc = run_cmd(v, &c);
    if (!rc && c.timed_out) {
        ipd_buf_adds(why, tls_out_of_time
                              ? "creating the venv did not finish within "
                                "the execution's timeout"
                              : "creating the venv timed out");
        rc = IPD_ERR_TIMEOUT;
    } else if (!rc && c.exit_code != 0) {
        ipd_buf_addf(why, "creating the venv failed (exit %d): %.300s",
                     c.exit_code, c.err.buf);
        rc = IPD_ERR_INTERNAL;
    } else if (rc) {
        ipd_buf_addf(why, "the sandbox could not run venv: %.300s", c.err.buf);
    }
    cmd_release(&c);
    free(dir);
    return rc;
}

/* Where pip looks for distributions: appended to argv at *k. */
static void pip_source_args(const struct ipd_venv *v, const char **argv,
                            size_t *k)
{
    /* pip's default of 5 retries with backoff makes an unreachable index
     * cost about 8 s; at least one retry is kept because pip says why the
     * index failed only in its retry warning (pip_diag.h). */
    argv[(*k)++] = "--retries";
    argv[(*k)++] = v->retries;
    if (v->no_index) {
        argv[(*k)++] = "--no-index";
    } else if (v->index_url) {
        argv[(*k)++] = "--index-url";
        argv[(*k)++] = v->index_url;
    }
    if (v->find_links) {
        argv[(*k)++] = "--find-links";
        argv[(*k)++] = IPD_VENV_LINKS_MOUNT;
    }
}

/* A pip command in gen with the cache, the wheel folder and (unless
 * --no-index) the network. */
static void pip_cmd_init(struct ipd_venv *v, struct ipd_venv_cmd *c,
                         const char **argv, char *dir, char *cache,
                         size_t cache_size)
{
    snprintf(cache, cache_size, "%s/pip-cache", v->root);
    cmd_init(c);
    c->argv = argv;
    c->gen_dir = dir;
    c->gen_writable = true;
    c->network = !v->no_index;
    c->cache_dir = cache;
    c->links_dir = v->find_links;
    c->timeout_ms = v->pip_timeout_ms;
}

/* pip said it found nothing installable for d->project while wheels only
 * are allowed: ask the index ("pip index versions", which lists sdists
 * too, and builds nothing) whether the project is there.  If it is, the
 * cause is the refused build. */
static void probe_sdist_only(struct ipd_venv *v, const char *gen,
                             struct ipd_pip_diag *d)
{
    const char *argv[16] = {IPD_VENV_MOUNT "/bin/python",
                            "-m",
                            "pip",
                            "index",
                            "versions",
                            "--no-input",
                            "--disable-pip-version-check",
                            "--timeout",
                            "30"};
    size_t k = 9;
    char *dir = gen_path(v, gen), cache[PATH_MAX];
    struct ipd_venv_cmd c;
    char versions[IPD_PIP_DIAG_TEXT];
    pip_source_args(v, argv, &k);
    argv[k++] = d->project;
    argv[k] = NULL;
    pip_cmd_init(v, &c, argv, dir, cache, sizeof(cache));
    c.gen_writable = false;
    if (!run_cmd(v, &c) && !c.timed_out && c.exit_code == 0 &&
        ipd_pip_index_versions(c.out.buf, c.out.len, versions,
                               sizeof(versions))) {
        d->kind = IPD_PIP_BUILD_REFUSED;
        memcpy(d->detail, versions, sizeof(d->detail));
    }
    cmd_release(&c);
    free(dir);
}

/* Why pip failed (exit != 0), for a result's message, into why. */
static void pip_failure(struct ipd_venv *v, const char *gen,
                        const struct ipd_venv_cmd *c, struct ipd_buf *why)
{
    struct ipd_pip_diag d;
    struct ipd_pip_where w = {.index_url = v->index_url,
                              .no_index = v->no_index,
                              .find_links = v->find_links != NULL,
                              .allow_sdist = v->allow_sdist};
    char msg[MESSAGE_MAX - 40];
    ipd_pip_diagnose(c->err.buf, c->err.len, &d);
    if (d.kind == IPD_PIP_NOT_FOUND && !v->allow_sdist && d.project[0])
        probe_sdist_only(v, gen, &d);
    ipd_pip_describe(&d, &w, msg, sizeof(msg));
    ipd_buf_adds(why, msg);
}

/* pip install reqs into gen.  IPD_OK when pip exited 0; else why says. */
static enum ipd_err pip_install(struct ipd_venv *v, const char *gen,
                                const char *const *reqs, size_t n,
                                struct ipd_buf *why)
{
    const char *fixed[] = {IPD_VENV_MOUNT "/bin/python",
                           "-m",
                           "pip",
                           "install",
                           "--no-input",
                           "--disable-pip-version-check",
                           "--no-warn-script-location",
                           "--progress-bar",
                           "off",
                           "--cache-dir",
                           IPD_VENV_PIP_CACHE_MOUNT,
                           "--timeout",
                           "30"};
    size_t k = 0, cap = IPD_ARRAY_LEN(fixed) + 8 + n + 1;
    const char **argv = ipd_xcalloc(cap, sizeof(*argv));
    char *dir = gen_path(v, gen), cache[PATH_MAX];
    enum ipd_err rc;
    for (size_t i = 0; i < IPD_ARRAY_LEN(fixed); i++)
        argv[k++] = fixed[i];
    /* Wheels only unless the operator allows sdists: building one runs
     * its setup code (still inside the sandbox, as the sandbox uid). */
    if (!v->allow_sdist)
        argv[k++] = "--only-binary=:all:";
    pip_source_args(v, argv, &k);
    for (size_t i = 0; i < n; i++)
        argv[k++] = reqs[i];
    argv[k] = NULL;

    struct ipd_venv_cmd c;
    pip_cmd_init(v, &c, argv, dir, cache, sizeof(cache));
    rc = run_cmd(v, &c);
    if (rc) {
        ipd_buf_addf(why, "the sandbox could not run pip: %.300s", c.err.buf);
    } else if (c.timed_out && tls_out_of_time) {
        ipd_buf_adds(why, "pip did not finish within the execution's "
                          "timeout");
        rc = IPD_ERR_TIMEOUT;
    } else if (c.timed_out) {
        ipd_buf_addf(why, "pip did not finish within %lld s",
                     (long long)(v->pip_timeout_ms / 1000));
        rc = IPD_ERR_TIMEOUT;
    } else if (c.exit_code != 0) {
        pip_failure(v, gen, &c, why);
        rc = IPD_ERR_INVALID;
    }
    if (rc) {
        /* A warning, with pip's stderr one log line per line of it. */
        ipd_warn("venv: pip install failed: %s%s", why->buf,
                 c.err.len ? "; pip said:" : " (pip said nothing)");
        ipd_log_lines(IPD_LOG_WARN, "venv: pip: ", c.err.buf, c.err.len, 60);
    }
    cmd_release(&c);
    free(dir);
    free((void *)argv);
    return rc;
}

/* "DIST=MOD[,MOD...]" of each allowlisted distribution for venv_check.py's
 * --provided: its import names from the import map, then its own name
 * with '_' for '-' and '.' (what ipd_allowlist_dist_for_import maps back
 * to it).
 * venv_check.py counts one without metadata whose module imports as
 * installed (Debian's python3-opencv: cv2 and no .dist-info).  A new
 * array of *n new strings: free each, then the array. */
static char **provided_specs(const struct ipd_venv *v, size_t *n)
{
    size_t count = ipd_allowlist_count(v->allow);
    char **specs = ipd_xcalloc(count ? count : 1, sizeof(*specs));
    struct ipd_buf b;
    ipd_buf_init(&b, IPD_BUF_UNLIMITED);
    for (size_t i = 0; i < count; i++) {
        const char *name = ipd_allowlist_name(v->allow, i), *dist;
        bool mapped = false;
        ipd_buf_addf(&b, "%s=", name);
        for (size_t j = 0; j < ipd_allowlist_import_count(v->allow); j++) {
            const char *mod = ipd_allowlist_import_at(v->allow, j, &dist);
            if (strcmp(dist, name))
                continue;
            ipd_buf_addf(&b, "%s%s", mapped ? "," : "", mod);
            mapped = true;
        }
        if (mapped)
            ipd_buf_addch(&b, ',');
        for (const char *c = name; *c; c++)
            ipd_buf_addch(&b, *c == '-' || *c == '.' ? '_' : *c);
        specs[i] = ipd_buf_detach(&b, NULL);
    }
    ipd_buf_release(&b);
    *n = count;
    return specs;
}

/* Run venv_check.py on gen (NULL: the base interpreter) for dists, the
 * allowlist's distributions as --provided (provided_specs).  New
 * reference to its JSON, or NULL with why set. */
static json_t *import_check(struct ipd_venv *v, const char *gen,
                            const char *const *dists, size_t n,
                            struct ipd_buf *why)
{
    size_t k = 0, np = 0;
    char **specs = provided_specs(v, &np);
    const char **argv = ipd_xcalloc(n + 2 * np + 4, sizeof(*argv));
    char *dir = gen ? gen_path(v, gen) : NULL;
    json_t *out = NULL;
    argv[k++] = gen ? IPD_VENV_MOUNT "/bin/python" : v->base_python;
    argv[k++] = "-I";
    argv[k++] = IPD_VENV_TOOLS_MOUNT "/venv_check.py";
    for (size_t i = 0; i < np; i++) {
        argv[k++] = "--provided";
        argv[k++] = specs[i];
    }
    for (size_t i = 0; i < n; i++)
        argv[k++] = dists[i];
    argv[k] = NULL;

    struct ipd_venv_cmd c;
    cmd_init(&c);
    c.argv = argv;
    c.gen_dir = dir;
    c.tools_dir = v->tools_dir;
    c.timeout_ms = CHECK_TIMEOUT_MS;
    enum ipd_err rc = run_cmd(v, &c);
    if (!rc && c.exit_code == 0) {
        json_error_t jerr;
        out = json_loadb(c.out.buf, c.out.len, 0, &jerr);
        if (out && !json_is_object(json_object_get(out, "checked"))) {
            json_decref(out);
            out = NULL;
        }
    }
    if (!out)
        ipd_buf_addf(why, "the import check did not run (exit %d): %.300s",
                     c.exit_code, c.err.buf);
    cmd_release(&c);
    free(dir);
    free((void *)argv);
    for (size_t i = 0; i < np; i++)
        free(specs[i]);
    free(specs);
    return out;
}

/* ---- installs ------------------------------------------------------------ */

/*
 * The first install finds no generation: make the base one (the venv
 * alone, pip included), record it and make it current, so every install
 * after that, including the retries of a split request, clones it instead
 * of running venv again.  Called with the install lock held.
 */
static enum ipd_err ensure_base(struct ipd_venv *v, struct ipd_buf *why)
{
    char cur[NAME_MAX_GEN], gen[NAME_MAX_GEN] = "";
    const char *none[] = {NULL};
    json_t *check = NULL, *rec = NULL;
    enum ipd_err rc;
    if (read_current(v, cur, sizeof(cur)))
        return IPD_OK;
    rc = gen_create(v, gen, sizeof(gen));
    if (rc) {
        ipd_buf_addf(why, "cannot create a generation in %s: %s", v->root,
                     strerror(errno));
        goto out;
    }
    rc = create_venv(v, gen, why);
    if (rc)
        goto out;
    check = import_check(v, gen, none, 0, why);
    if (!check) {
        rc = IPD_ERR_INTERNAL;
        goto out;
    }
    int64_t now = ipd_now_ms();
    rec = json_pack("{s:[], s:I, s:I, s:O, s:O}", "requirements", "created_at",
                    (json_int_t)now, "venv_created_at", (json_int_t)now,
                    "python_version", json_object_get(check, "python_version"),
                    "installed", json_object_get(check, "installed"));
    rc = rec ? write_record(v, gen, rec) : IPD_ERR_INTERNAL;
    if (!rc)
        rc = switch_current(v, gen);
    if (rc)
        ipd_buf_addf(why, "cannot switch to the new venv: %s", strerror(errno));
    else
        gen[0] = '\0';
out:
    if (gen[0])
        gen_discard(v, gen);
    json_decref(check);
    json_decref(rec);
    return rc;
}

/* The recorded requirements of rec with each of w's replacing the entry of
 * the same distribution.  New reference. */
static json_t *merge_requirements(const json_t *rec, struct want *const *w,
                                  size_t n)
{
    json_t *out = json_array(), *old = json_object_get(rec, "requirements");
    size_t i;
    json_t *item;
    json_array_foreach(old, i, item)
    {
        struct ipd_requirement r;
        const char *s = json_string_value(item);
        bool replaced = false;
        if (!s || ipd_requirement_parse(s, strlen(s), &r, NULL))
            continue;
        for (size_t k = 0; k < n && !replaced; k++)
            replaced = !strcmp(r.normalized, w[k]->name);
        if (!replaced)
            json_array_append(out, item);
    }
    for (size_t k = 0; k < n; k++)
        json_array_append_new(out, json_string(w[k]->canon));
    return out;
}

/* Fill rec, the record of a generation about to become current: its
 * requirements (stolen), created_at, when its venv was created, and the
 * python version and distributions its import check found. */
static void record_fill(json_t *rec, json_t *requirements, int64_t now,
                        int64_t venv_created, const json_t *check)
{
    json_object_set_new(rec, "requirements", requirements);
    json_object_set_new(rec, "created_at", json_integer(now));
    json_object_set_new(rec, "venv_created_at", json_integer(venv_created));
    json_object_set(rec, "python_version",
                    json_object_get(check, "python_version"));
    json_object_set(rec, "installed", json_object_get(check, "installed"));
}

/* The first of names[0..n) that the import check did not pass, or NULL;
 * *entry is its entry in check's "checked" (borrowed, may be NULL). */
static const char *import_failed(const json_t *check, const char *const *names,
                                 size_t n, json_t **entry)
{
    json_t *checked = json_object_get(check, "checked");
    for (size_t i = 0; i < n; i++) {
        *entry = json_object_get(checked, names[i]);
        if (!json_is_true(json_object_get(*entry, "ok")))
            return names[i];
    }
    *entry = NULL;
    return NULL;
}

/* What install_step carries from one step to the next. */
struct step {
    struct want *const *w; /* the requirements, n of them */
    size_t n;
    char gen[NAME_MAX_GEN]; /* the new generation; "" once it is current */
    json_t *rec;            /* its record, current's until the switch */
    int64_t venv_created;   /* when current's venv was created */
    json_t *before, *after; /* {name: version} before and after pip */
    json_t *changed;        /* names pip added or changed */
    json_t *check;          /* the import check's answer */
    struct ipd_buf why;     /* what went wrong, for the results */
    bool may_change;        /* may change what is installed (admin) */
    bool refused;           /* OUT: a version change was refused */
};

/* How a step of install_step ends. */
enum step_end {
    STEP_NEXT,     /* go on with the next step */
    STEP_DONE,     /* the results are set */
    STEP_FAIL_ALL, /* every requirement failed, for the reason in why */
    STEP_SPLIT,    /* one of several failed: retry them one by one */
};

/* A new generation, a clone of current, with current's record. */
static enum step_end step_clone(struct ipd_venv *v, struct step *s)
{
    char cur[NAME_MAX_GEN] = "";
    bool have_cur = read_current(v, cur, sizeof(cur));
    s->venv_created = ipd_now_ms();
    if (gen_create(v, s->gen, sizeof(s->gen))) {
        ipd_buf_addf(&s->why, "cannot create a generation in %s: %s", v->root,
                     strerror(errno));
        return STEP_FAIL_ALL;
    }
    if (!have_cur) {
        ipd_buf_adds(&s->why, "no venv to install into");
        return STEP_FAIL_ALL;
    }
    if (clone_at(v, v->root_fd, cur, v->root_fd, s->gen, 0)) {
        ipd_buf_addf(&s->why, "cannot clone %s: %s", cur, strerror(errno));
        return STEP_FAIL_ALL;
    }
    s->rec = read_record(v, cur);
    if (!s->rec) {
        /* Going on would drop every recorded requirement. */
        ipd_buf_addf(&s->why, "cannot read the record of %s/%s: %s", v->root,
                     cur, strerror(errno));
        return STEP_FAIL_ALL;
    }
    json_t *vc = json_object_get(s->rec, "venv_created_at");
    if (json_is_integer(vc))
        s->venv_created = json_integer_value(vc);
    return STEP_NEXT;
}

/* pip install the requirements into the clone. */
static enum step_end step_pip(struct ipd_venv *v, struct step *s)
{
    const char **reqs = ipd_xcalloc(s->n, sizeof(*reqs));
    enum ipd_err rc;
    for (size_t i = 0; i < s->n; i++)
        reqs[i] = s->w[i]->canon;
    s->before = scan_dists(v, s->gen);
    rc = pip_install(v, s->gen, reqs, s->n, &s->why);
    free((void *)reqs);
    if (!rc)
        return STEP_NEXT;
    if (s->n > 1)
        return STEP_SPLIT;
    set_result(s->w[0]->result, "failed", NULL, "%s", s->why.buf);
    return STEP_DONE;
}

/* The dependency check: every distribution pip added or changed must be
 * on the allowlist or an allowed dependency. */
static enum step_end step_deps(struct ipd_venv *v, struct step *s)
{
    const char *key;
    json_t *ver;
    s->after = scan_dists(v, s->gen);
    json_object_foreach(s->after, key, ver)
    {
        json_t *old = json_object_get(s->before, key);
        if (old && json_equal(old, ver))
            continue;
        if (!ipd_allowlist_allows_dep(v->allow, key)) {
            if (s->n > 1)
                return STEP_SPLIT;
            set_result(s->w[0]->result, "not_allowed", NULL,
                       "dependency %s is not on the allowlist (nor an allowed "
                       "dependency); nothing was installed",
                       key);
            return STEP_DONE;
        }
        json_array_append_new(s->changed, json_string(key));
    }
    return STEP_NEXT;
}

/* The import check of what changed and what was asked for. */
static enum step_end step_imports(struct ipd_venv *v, struct step *s)
{
    size_t nc = json_array_size(s->changed), k = 0;
    const char **names = ipd_xcalloc(nc + s->n, sizeof(*names));
    const char *bad = NULL;
    json_t *c = NULL;
    enum step_end e = STEP_NEXT;
    for (size_t i = 0; i < nc; i++)
        names[k++] = json_string_value(json_array_get(s->changed, i));
    for (size_t i = 0; i < s->n; i++)
        names[k++] = s->w[i]->name;
    s->check = import_check(v, s->gen, names, k, &s->why);
    if (!s->check)
        e = STEP_FAIL_ALL; /* the check itself failed: no package to blame */
    else
        bad = import_failed(s->check, names, k, &c);
    if (bad && s->n > 1) {
        e = STEP_SPLIT;
    } else if (bad) {
        const char *err = json_string_value(json_object_get(c, "error"));
        set_result(s->w[0]->result, "failed", NULL,
                   "installed, but importing %s failed (%s); the venv was "
                   "left unchanged",
                   bad, err ? err : "no result");
        e = STEP_DONE;
    }
    free((void *)names);
    return e;
}

/* The version of name in pairs ([[name, version], ...], what an
 * interpreter imports), or NULL.  Borrowed from pairs. */
static const char *pair_version(const json_t *pairs, const char *name)
{
    size_t i;
    json_t *pair;
    json_array_foreach(pairs, i, pair)
    {
        const char *n = json_string_value(json_array_get(pair, 0));
        if (n && !strcmp(n, name))
            return json_string_value(json_array_get(pair, 1));
    }
    return NULL;
}

/* The version of name in an import check's "installed", or NULL. */
static const char *installed_version(const json_t *check, const char *name)
{
    return pair_version(json_object_get(check, "installed"), name);
}

/* A version some of Debian's builds carry in place of one they could not
 * know (mpmath's egg-info: 0.0.0).  venv_check.py now reports the
 * module's own version instead, so a record written before that may hold
 * the placeholder where the check finds the real one: no change. */
static bool placeholder_version(const char *v)
{
    return !strcmp(v, "0") || !strcmp(v, "0.0") || !strcmp(v, "0.0.0");
}

/* Every tenant imports the one venv: unless the caller may (an admin
 * key), nothing the interpreter already imports may change version, be
 * it asked for ("numpy==1.26") or pulled in as a dependency, and a venv
 * copy must not shadow the base interpreter's version either. */
static enum step_end step_versions(struct step *s)
{
    size_t i;
    json_t *pair;
    if (s->may_change)
        return STEP_NEXT;
    json_array_foreach(json_object_get(s->check, "installed"), i, pair)
    {
        const char *name = json_string_value(json_array_get(pair, 0));
        const char *now = json_string_value(json_array_get(pair, 1));
        const char *was = name ? installed_version(s->rec, name) : NULL;
        if (!was || !now || !strcmp(was, now) || placeholder_version(was))
            continue;
        ipd_buf_reset(&s->why);
        ipd_buf_addf(&s->why,
                     "this would change the installed version of %s (%s to "
                     "%s), which every tenant's code imports: that needs an "
                     "admin key; nothing was installed",
                     name, was, now);
        s->refused = true;
        return STEP_FAIL_ALL;
    }
    return STEP_NEXT;
}

/* Record the clone's requirements and make it current; or keep current
 * when pip changed nothing.  Sets every result. */
static enum step_end step_switch(struct ipd_venv *v, struct step *s)
{
    json_t *checked = json_object_get(s->check, "checked");
    size_t nc = json_array_size(s->changed);
    if (nc == 0) {
        /* Everything was there already: keep current, drop the clone. */
        for (size_t i = 0; i < s->n; i++)
            set_result(s->w[i]->result, "already_installed",
                       json_string_value(json_object_get(
                           json_object_get(checked, s->w[i]->name), "version")),
                       NULL);
        return STEP_DONE;
    }
    record_fill(s->rec, merge_requirements(s->rec, s->w, s->n), ipd_now_ms(),
                s->venv_created, s->check);
    if (gen_promote(v, s->gen, s->rec)) {
        ipd_buf_reset(&s->why);
        ipd_buf_addf(&s->why, "could not switch the venv: %s", strerror(errno));
        return STEP_FAIL_ALL;
    }
    for (size_t i = 0; i < s->n; i++) {
        json_t *c = json_object_get(checked, s->w[i]->name);
        bool fresh = false;
        for (size_t j = 0; j < nc && !fresh; j++)
            fresh = !strcmp(json_string_value(json_array_get(s->changed, j)),
                            s->w[i]->name);
        set_result(s->w[i]->result, fresh ? "installed" : "already_installed",
                   json_string_value(json_object_get(c, "version")), NULL);
    }
    s->gen[0] = '\0'; /* it is current now */
    return STEP_DONE;
}

/*
 * Install w[0..n) as one step: clone current, pip, allowlist check of what
 * changed, import check, switch.  On a failure that may belong to only
 * some of several requirements, false is returned with no result set, and
 * the caller retries them one by one.
 */
static bool install_step(struct ipd_venv *v, struct want *const *w, size_t n,
                         bool may_change, bool *refused)
{
    struct step s = {
        .w = w, .n = n, .changed = json_array(), .may_change = may_change};
    enum step_end e;
    ipd_buf_init(&s.why, 4096);
    e = step_clone(v, &s);
    if (e == STEP_NEXT)
        e = step_pip(v, &s);
    if (e == STEP_NEXT)
        e = step_deps(v, &s);
    if (e == STEP_NEXT)
        e = step_imports(v, &s);
    if (e == STEP_NEXT)
        e = step_versions(&s);
    if (e == STEP_NEXT)
        e = step_switch(v, &s);
    *refused = *refused || s.refused;
    if (e == STEP_FAIL_ALL)
        for (size_t i = 0; i < n; i++)
            set_result(w[i]->result, "failed", NULL, "%s", s.why.buf);
    if (s.gen[0])
        gen_discard(v, s.gen);
    json_decref(s.before);
    json_decref(s.after);
    json_decref(s.check);
    json_decref(s.rec);
    json_decref(s.changed);
    ipd_buf_release(&s.why);
    return e != STEP_SPLIT;
}

/* Parse and check reqs[0..n): each gets its result in results and w[i];
 * the ones left to install go to pending.  Their number. */
static size_t want_parse(struct ipd_venv *v, const char *const *reqs, size_t n,
                         struct want *w, struct want **pending, json_t *results)
{
    size_t np = 0;
    struct ipd_buf why;
    ipd_buf_init(&why, 1024);
    for (size_t i = 0; i < n; i++) {
        struct ipd_requirement r;
        json_t *res = json_object();
        /* Invalid UTF-8 can't be echoed as a JSON string: say so. */
        json_t *pkg = json_string(reqs[i]);
        json_object_set_new(res, "package",
                            pkg ? pkg : json_string("(not UTF-8)"));
        json_array_append_new(results, res);
        w[i].result = res;
        ipd_buf_reset(&why);
        if (ipd_requirement_parse(reqs[i], strlen(reqs[i]), &r, &why)) {
            set_result(res, "invalid", NULL, "%s", why.buf);
            continue;
        }
        if (!ipd_allowlist_allows(v->allow, r.normalized)) {
            set_result(res, "not_allowed", NULL,
                       "%s is not on this service's allowlist", r.normalized);
            continue;
        }
        if (ipd_requirement_format(&r, w[i].canon, sizeof(w[i].canon))) {
            set_result(res, "invalid", NULL, "requirement too long");
            continue;
        }
        memcpy(w[i].name, r.normalized, sizeof(w[i].name));
        /* The same distribution twice in one request: one install. */
        bool dup = false;
        for (size_t k = 0; k < np && !dup; k++)
            dup = !strcmp(pending[k]->name, w[i].name);
        if (dup) {
            set_result(res, "invalid", NULL,
                       "%s is named twice in this request", w[i].name);
            continue;
        }
        pending[np++] = &w[i];
    }
    ipd_buf_release(&why);
    return np;
}

/* Install pending[0..np) under the install lock: the base venv first if
 * there is none yet, then all of them in one step, or one by one when
 * that step failed for one of them. */
static void install_pending(struct ipd_venv *v, struct want **pending,
                            size_t np, bool may_change, bool *refused)
{
    struct ipd_buf bwhy;
    int lfd = lock_take(v);
    if (lfd < 0 && tls_out_of_time) {
        for (size_t i = 0; i < np; i++)
            set_result(pending[i]->result, "failed", NULL,
                       "another install held the install lock past the "
                       "execution's timeout");
        return;
    }
    if (lfd < 0) {
        for (size_t i = 0; i < np; i++)
            set_result(pending[i]->result, "failed", NULL,
                       "cannot take the install lock in %s: %s", v->root,
                       strerror(errno));
        return;
    }
    ipd_buf_init(&bwhy, 4096);
    if (ensure_base(v, &bwhy)) {
        for (size_t i = 0; i < np; i++)
            set_result(pending[i]->result, "failed", NULL,
                       "could not create the venv: %s", bwhy.buf);
    } else if (!install_step(v, pending, np, may_change, refused)) {
        for (size_t i = 0; i < np; i++)
            install_step(v, &pending[i], 1, may_change, refused);
    }
    ipd_buf_release(&bwhy);
    gc(v);
    lock_drop(v, lfd);
}

/* The metrics' outcome of an install result. */
static enum ipd_metrics_install_outcome install_outcome(const json_t *res)
{
    const char *st = json_string_value(json_object_get(res, "status"));
    if (st && !strcmp(st, "installed"))
        return IPD_METRICS_INSTALL_INSTALLED;
    if (st && !strcmp(st, "already_installed"))
        return IPD_METRICS_INSTALL_ALREADY_INSTALLED;
    if (st && !strcmp(st, "not_allowed"))
        return IPD_METRICS_INSTALL_NOT_ALLOWED;
    if (st && !strcmp(st, "invalid"))
        return IPD_METRICS_INSTALL_INVALID;
    return IPD_METRICS_INSTALL_FAILED;
}

/* ---- requests that install nothing --------------------------------------- */

static json_t *base_status(struct ipd_venv *v);

/* [[name, version], ...]: what the interpreter of the current generation
 * imports (its record, written when it became current), or before the
 * first install the base interpreter's (cached), which the first
 * generation sees too when it has the system site packages.  New
 * reference or NULL (unknown).  Unless may_list_base, the base
 * interpreter is never run: unknown until it has been listed. */
static json_t *installed_now(struct ipd_venv *v, bool may_list_base)
{
    char cur[NAME_MAX_GEN];
    json_t *rec = NULL, *out;
    if (read_current(v, cur, sizeof(cur))) {
        rec = read_record(v, cur);
    } else if (v->system_site && may_list_base) {
        rec = base_status(v);
    } else if (v->system_site) { /* only if listed already: no run */
        pthread_mutex_lock(&v->state_lock);
        rec = json_copy(v->base_status);
        pthread_mutex_unlock(&v->state_lock);
    }
    out = json_incref(json_object_get(rec, "installed"));
    json_decref(rec);
    return json_is_array(out) ? out : (json_decref(out), NULL);
}

/*
 * The requirements of pending[0..*np) that what is installed meets
 * already are answered already_installed from it and taken out of
 * pending (the rest keep their order), so a request whose every
 * requirement is met installs nothing: no install lock, clone, pip, new
 * generation or (so) recycled zygote; and pip is asked only for the rest.
 * That also keeps pip away from a distribution the system provides
 * without metadata (Debian's python3-opencv; venv_check.py --provided),
 * which pip does not see and would fetch.  Nothing changes when what is
 * installed is not known.
 */
static void take_present(struct ipd_venv *v, struct want **pending, size_t *np,
                         bool may_list_base)
{
    json_t *inst = installed_now(v, may_list_base);
    size_t keep = 0;
    if (!inst)
        return;
    for (size_t i = 0; i < *np; i++) {
        const char *ver = pair_version(inst, pending[i]->name);
        if (ver && ipd_requirement_met(pending[i]->canon, ver))
            set_result(pending[i]->result, "already_installed", ver, NULL);
        else
            pending[keep++] = pending[i];
    }
    *np = keep;
    json_decref(inst);
}

enum ipd_err ipd_venv_install(struct ipd_venv *v, const char *const *reqs,
                              size_t n, bool may_change, json_t **results)
{
    struct want *w = ipd_xcalloc(n ? n : 1, sizeof(*w));
    struct want **pending = ipd_xcalloc(n ? n : 1, sizeof(*pending));
    size_t np;
    bool refused = false;
    *results = json_array();
    np = want_parse(v, reqs, n, w, pending, *results);
    if (np)
        take_present(v, pending, &np, true);
    if (np)
        install_pending(v, pending, np, may_change, &refused);
    for (size_t i = 0; i < n; i++)
        ipd_metrics_install_observe(v->metrics, install_outcome(w[i].result));
    free(pending);
    free(w);
    return refused ? IPD_ERR_FORBIDDEN : IPD_OK;
}

bool ipd_venv_install_nothing(struct ipd_venv *v, const char *const *reqs,
                              size_t n, json_t **results)
{
    struct want *w = ipd_xcalloc(n ? n : 1, sizeof(*w));
    struct want **pending = ipd_xcalloc(n ? n : 1, sizeof(*pending));
    json_t *res = json_array();
    size_t np = want_parse(v, reqs, n, w, pending, res);
    bool nothing;
    if (np)
        take_present(v, pending, &np, false);
    nothing = !np;
    for (size_t i = 0; nothing && i < n; i++)
        ipd_metrics_install_observe(v->metrics, install_outcome(w[i].result));
    *results = nothing ? res : NULL;
    if (!nothing)
        json_decref(res);
    free(pending);
    free(w);
    return nothing;
}

/* The remembered failure of dist on generation cur: a new reference to
 * its result, or NULL (none, another generation, or expired). */
static json_t *auto_failure_get(struct ipd_venv *v, const char *dist,
                                const char *cur)
{
    json_t *res = NULL;
    pthread_mutex_lock(&v->state_lock);
    json_t *e = json_object_get(v->auto_failed, dist);
    const char *gen = json_string_value(json_object_get(e, "gen"));
    json_int_t until = json_integer_value(json_object_get(e, "until"));
    if (e && (!gen || strcmp(gen, cur) || ipd_mono_ms() >= until))
        json_object_del(v->auto_failed, dist);
    else if (e)
        res = json_deep_copy(json_object_get(e, "result"));
    pthread_mutex_unlock(&v->state_lock);
    return res;
}

static void auto_failure_put(struct ipd_venv *v, const char *dist,
                             const json_t *result)
{
    char cur[NAME_MAX_GEN] = "";
    if (v->auto_retry_ms <= 0)
        return;
    (void)read_current(v, cur, sizeof(cur));
    pthread_mutex_lock(&v->state_lock);
    json_object_set_new(
        v->auto_failed, dist,
        json_pack("{s:s, s:I, s:O}", "gen", cur, "until",
                  (json_int_t)(ipd_mono_ms() + v->auto_retry_ms), "result",
                  result));
    pthread_mutex_unlock(&v->state_lock);
}

/* Least time left for an automatic install to be tried at all. */
#define AUTO_MIN_LEFT_MS 1000

enum ipd_err ipd_venv_install_auto(struct ipd_venv *v, const char *dist,
                                   bool may_change, int64_t deadline_ms,
                                   json_t **results, bool *remembered)
{
    char cur[NAME_MAX_GEN] = "";
    const char *reqs[] = {dist};
    (void)read_current(v, cur, sizeof(cur));
    json_t *res = auto_failure_get(v, dist, cur);
    *remembered = res != NULL;
    if (res) {
        ipd_info("venv: not installing %s again: it failed on %s less than "
                 "%lld s ago",
                 dist, cur[0] ? cur : "the base interpreter",
                 (long long)(v->auto_retry_ms / 1000));
        *results = json_pack("[o]", res);
        ipd_metrics_install_observe(v->metrics, IPD_METRICS_INSTALL_FAILED);
        return IPD_OK;
    }
    if (deadline_ms && deadline_ms - ipd_mono_ms() < AUTO_MIN_LEFT_MS) {
        *results = json_pack("[{s:s, s:s, s:n, s:s}]", "requirement", dist,
                             "status", "failed", "version", "message",
                             "no time left within the execution's timeout "
                             "for an automatic install");
        return IPD_OK;
    }
    tls_deadline_ms = deadline_ms;
    tls_out_of_time = false;
    enum ipd_err rc = ipd_venv_install(v, reqs, 1, may_change, results);
    bool out_of_time = tls_out_of_time;
    tls_deadline_ms = 0;
    tls_out_of_time = false;
    json_t *one = json_array_get(*results, 0);
    const char *st = json_string_value(json_object_get(one, "status"));
    /* A refusal is the caller's, not the package's, and running out of
     * the execution's time is the execution's: neither is remembered. */
    if (!rc && !out_of_time && st && strcmp(st, "installed") &&
        strcmp(st, "already_installed"))
        auto_failure_put(v, dist, one);
    return rc;
}

void ipd_venv_set_metrics(struct ipd_venv *v, struct ipd_metrics *metrics)
{
    v->metrics = metrics;
}

enum ipd_err ipd_venv_ping(struct ipd_venv *v)
{
    char cur[NAME_MAX_GEN], py[PATH_MAX];
    if (!read_current(v, cur, sizeof(cur)))
        return access(v->base_python, X_OK) ? IPD_ERR_UNAVAILABLE : IPD_OK;
    snprintf(py, sizeof(py), "%s/%s/bin/python", v->root, cur);
    return access(py, X_OK) ? IPD_ERR_UNAVAILABLE : IPD_OK;
}

bool ipd_venv_allows(const struct ipd_venv *v, const char *name)
{
    return ipd_allowlist_allows(v->allow, name);
}

bool ipd_venv_dist_for_missing_module(struct ipd_venv *v, const char *module,
                                      char dist[IPD_REQ_NAME_MAX + 1])
{
    char cur[NAME_MAX_GEN];
    if (!ipd_allowlist_dist_for_import(v->allow, module, dist) ||
        !ipd_allowlist_allows(v->allow, dist))
        return false;
    /* Installed already (the module name lies, or the import fails for
     * another reason): installing again would not help. */
    if (read_current(v, cur, sizeof(cur))) {
        json_t *d = scan_dists(v, cur);
        bool have = json_object_get(d, dist) != NULL;
        json_decref(d);
        if (have)
            return false;
    }
    return true;
}

/* ---- rebuild ----------------------------------------------------------- */

static void set_rebuild_error(struct ipd_venv *v, const char *msg)
{
    pthread_mutex_lock(&v->state_lock);
    free(v->last_rebuild_error);
    v->last_rebuild_error = msg ? ipd_xstrdup(msg) : NULL;
    v->last_rebuild_ms = ipd_now_ms();
    pthread_mutex_unlock(&v->state_lock);
}

/* A new generation (named in gen even when this fails, for the caller to
 * discard) with a fresh venv and the requirements rq installed by pip. */
static enum ipd_err rebuild_install(struct ipd_venv *v, const json_t *rq,
                                    char *gen, size_t size, struct ipd_buf *why)
{
    size_t n = json_array_size(rq);
    const char **reqs = ipd_xcalloc(n + 1, sizeof(*reqs));
    enum ipd_err rc;
    for (size_t i = 0; i < n; i++)
        reqs[i] = json_string_value(json_array_get(rq, i));
    rc = gen_create(v, gen, size);
    if (rc)
        ipd_buf_addf(why, "cannot create a generation: %s", strerror(errno));
    if (!rc)
        rc = create_venv(v, gen, why);
    if (!rc && n)
        rc = pip_install(v, gen, reqs, n, why);
    free((void *)reqs);
    return rc;
}

/* The dependency and import checks of everything pip put in gen.  *check
 * is a new reference to the import check's answer (NULL when it did not
 * run). */
static enum ipd_err rebuild_check(struct ipd_venv *v, const char *gen,
                                  json_t **check, struct ipd_buf *why)
{
    json_t *after = scan_dists(v, gen), *ver, *c;
    size_t k = 0;
    const char **names =
        ipd_xcalloc(json_object_size(after) + 1, sizeof(*names));
    const char *key, *bad;
    enum ipd_err rc = IPD_OK;
    *check = NULL;
    json_object_foreach(after, key, ver)
    {
        /* pip and its own tools come with the venv itself. */
        if (!strcmp(key, "pip") || !strcmp(key, "setuptools"))
            continue;
        if (!ipd_allowlist_allows_dep(v->allow, key)) {
            ipd_buf_addf(why, "dependency %s is no longer allowed", key);
            rc = IPD_ERR_FORBIDDEN;
            goto out;
        }
        names[k++] = key;
    }
    *check = import_check(v, gen, names, k, why);
    if (!*check) {
        rc = IPD_ERR_INTERNAL;
        goto out;
    }
    bad = import_failed(*check, names, k, &c);
    if (bad) {
        ipd_buf_addf(why, "importing %s failed: %s", bad,
                     json_string_value(json_object_get(c, "error")));
        rc = IPD_ERR_INTERNAL;
    }
out:
    json_decref(after);
    free((void *)names);
    return rc;
}

static enum ipd_err rebuild_locked(struct ipd_venv *v)
{
    char cur[NAME_MAX_GEN], gen[NAME_MAX_GEN] = "";
    json_t *rec = NULL, *check = NULL, *nrec = NULL, *rq;
    struct ipd_buf why;
    enum ipd_err rc = IPD_OK;
    ipd_buf_init(&why, 4096);
    if (!read_current(v, cur, sizeof(cur)))
        goto out; /* nothing installed: the base interpreter is current */
    rec = read_record(v, cur);
    if (!rec) {
        /* A rebuild from nothing would drop every installed package. */
        ipd_buf_addf(&why, "cannot read the record of %s: %s", cur,
                     strerror(errno));
        rc = IPD_ERR_INTERNAL;
        goto out;
    }
    rq = json_object_get(rec, "requirements");
    rc = rebuild_install(v, rq, gen, sizeof(gen), &why);
    if (!rc)
        rc = rebuild_check(v, gen, &check, &why);
    if (rc)
        goto out;
    int64_t now = ipd_now_ms();
    nrec = json_object();
    record_fill(nrec, rq ? json_incref(rq) : json_array(), now, now, check);
    rc = gen_promote(v, gen, nrec);
    if (rc) {
        ipd_buf_addf(&why, "could not switch: %s", strerror(errno));
        goto out;
    }
    gen[0] = '\0';
out:
    if (gen[0])
        gen_discard(v, gen);
    if (rc) {
        ipd_warn("venv: rebuild failed, keeping %s: %s", cur, why.buf);
        set_rebuild_error(v, why.buf);
    } else {
        set_rebuild_error(v, NULL);
    }
    json_decref(rec);
    json_decref(check);
    json_decref(nrec);
    ipd_buf_release(&why);
    return rc;
}

enum ipd_err ipd_venv_rebuild(struct ipd_venv *v)
{
    int lfd = lock_take(v);
    if (lfd < 0)
        return IPD_ERR_IO;
    enum ipd_err rc = rebuild_locked(v);
    gc(v);
    lock_drop(v, lfd);
    return rc;
}

/* What the base interpreter sees (before the first install), listed once
 * in the sandbox and cached: a new reference to a copy, or NULL. */
static json_t *base_status(struct ipd_venv *v)
{
    json_t *rec;
    pthread_mutex_lock(&v->state_lock);
    /* A failure is retried at most once a minute, so status requests do
     * not queue up behind repeated sandbox runs. */
    if (!v->base_status &&
        (!v->base_failed_ms || ipd_mono_ms() - v->base_failed_ms >= 60000)) {
        struct ipd_buf why;
        ipd_buf_init(&why, 1024);
        v->base_status = import_check(v, NULL, NULL, 0, &why);
        if (!v->base_status) {
            v->base_failed_ms = ipd_mono_ms();
            ipd_warn("venv: cannot list the base interpreter's "
                     "packages: %s",
                     why.buf);
        }
        ipd_buf_release(&why);
    }
    rec = json_copy(v->base_status);
    pthread_mutex_unlock(&v->state_lock);
    return rec;
}

enum ipd_err ipd_venv_maintain(struct ipd_venv *v)
{
    char cur[NAME_MAX_GEN];
    enum ipd_err rc = IPD_OK;
    bool list_base = false;
    int lfd = lock_take(v);
    if (lfd < 0)
        return IPD_ERR_IO;
    if (read_current(v, cur, sizeof(cur))) {
        json_t *rec = read_record(v, cur);
        json_t *vc = json_object_get(rec, "venv_created_at");
        int64_t born = json_is_integer(vc) ? json_integer_value(vc) : 0;
        if (!rec) {
            /* Rebuilding from an unreadable record would drop every
             * installed package: say so and leave it. */
            ipd_warn("venv: cannot read the record of %s: %s; not "
                     "rebuilding",
                     cur, strerror(errno));
            rc = IPD_ERR_INTERNAL;
        } else if (ipd_now_ms() - born >= v->max_age_ms) {
            ipd_info("venv: %s is older than %lld s; rebuilding", cur,
                     (long long)(v->max_age_ms / 1000));
            rc = rebuild_locked(v);
        }
        json_decref(rec);
    } else {
        list_base = true;
    }
    gc(v);
    lock_drop(v, lfd);
    /* No venv yet: list the base interpreter now, on the scheduler's
     * thread (outside the install lock), rather than in the first GET
     * /v1/packages or admin status on an HTTP thread. */
    if (list_base)
        json_decref(base_status(v));
    return rc;
}

/* ---- status -------------------------------------------------------------- */

json_t *ipd_venv_status(struct ipd_venv *v)
{
    char cur[NAME_MAX_GEN];
    json_t *out = json_object(), *allowed = json_array(), *installed;
    json_t *venv = json_object(), *rec = NULL;
    bool have = read_current(v, cur, sizeof(cur));
    for (size_t i = 0; i < ipd_allowlist_count(v->allow); i++)
        json_array_append_new(allowed,
                              json_string(ipd_allowlist_name(v->allow, i)));
    if (have)
        rec = read_record(v, cur);
    if (!rec)
        rec = base_status(v);
    installed = json_array();
    size_t i;
    json_t *item;
    json_array_foreach(json_object_get(rec, "installed"), i, item)
        json_array_append_new(
            installed, json_pack("{s:O, s:O}", "name", json_array_get(item, 0),
                                 "version", json_array_get(item, 1)));
    json_t *pv = json_object_get(rec, "python_version");
    json_object_set_new(venv, "python_version",
                        pv ? json_copy(pv) : json_null());
    json_t *vc = json_object_get(rec, "venv_created_at");
    if (have && json_is_integer(vc)) {
        int64_t at = json_integer_value(vc);
        json_object_set_new(venv, "created_at", ipd_json_time(at));
        json_object_set_new(venv, "rebuild_at",
                            ipd_json_time(v->max_age_ms == IPD_TIME_NEVER
                                              ? IPD_TIME_NEVER
                                              : at + v->max_age_ms));
    } else {
        json_object_set_new(venv, "created_at", json_null());
        json_object_set_new(venv, "rebuild_at", json_null());
    }
    json_object_set_new(venv, "exists", json_boolean(have));
    json_object_set_new(venv, "generation",
                        have ? json_string(cur) : json_null());
    if (have) {
        char *p = gen_path(v, cur);
        struct ipd_buf py;
        ipd_buf_init(&py, IPD_BUF_UNLIMITED);
        ipd_buf_addf(&py, "%s/bin/python", p);
        json_object_set_new(venv, "path", json_string(p));
        json_object_set_new(venv, "python_path", json_string(py.buf));
        ipd_buf_release(&py);
        free(p);
    } else {
        json_object_set_new(venv, "path", json_null());
        json_object_set_new(venv, "python_path", json_string(v->base_python));
    }
    pthread_mutex_lock(&v->state_lock);
    json_object_set_new(venv, "last_rebuild_error",
                        v->last_rebuild_error
                            ? json_string(v->last_rebuild_error)
                            : json_null());
    pthread_mutex_unlock(&v->state_lock);
    json_object_set_new(out, "allowed", allowed);
    json_object_set_new(out, "installed", installed);
    json_object_set_new(out, "venv", venv);
    json_decref(rec);
    return out;
}

/* ---- lifecycle ----------------------------------------------------------- */

enum ipd_err ipd_venv_new(const struct ipd_venv_options *opt,
                          const struct ipd_venv_runner *runner,
                          struct ipd_venv **out, struct ipd_buf *err)
{
    struct ipd_venv *v = NULL;
    enum ipd_err rc = IPD_ERR_INVALID;
    *out = NULL;
    if (!opt->root || !opt->base_python || opt->base_python[0] != '/' ||
        !opt->allow || !runner || !runner->run || !opt->tools_dir) {
        ipd_buf_adds(err, "venv: root, an absolute base python, the "
                          "allowlist and the tools dir are required");
        goto out;
    }
    if (opt->no_index && !(opt->find_links && *opt->find_links)) {
        ipd_buf_adds(err, "venv: --no-index needs a wheel folder "
                          "(find_links)");
        goto out;
    }
    v = ipd_xcalloc(1, sizeof(*v));
    v->root_fd = -1;
    v->root = ipd_xstrdup(opt->root);
    v->base_python = ipd_xstrdup(opt->base_python);
    v->system_site = opt->system_site_packages;
    v->index_url =
        opt->index_url && *opt->index_url ? ipd_xstrdup(opt->index_url) : NULL;
    v->find_links = opt->find_links && *opt->find_links
                        ? ipd_xstrdup(opt->find_links)
                        : NULL;
    v->no_index = opt->no_index;
    snprintf(v->retries, sizeof(v->retries), "%d",
             opt->pip_retries > 0 ? opt->pip_retries : 1);
    v->auto_retry_ms = opt->auto_retry_after_ms;
    v->auto_failed = json_object();
    v->tools_dir = ipd_xstrdup(opt->tools_dir);
    v->pip_timeout_ms =
        opt->pip_timeout_ms > 0 ? opt->pip_timeout_ms : 10 * 60 * 1000;
    v->max_age_ms =
        opt->max_age_ms > 0 ? opt->max_age_ms : 7LL * 24 * 3600 * 1000;
    v->link_clone = opt->link_clone;
    v->allow_sdist = opt->allow_sdist;
    v->owner_uid = opt->owner_uid;
    v->owner_gid = opt->owner_gid;
    v->allow = opt->allow;
    v->runner = *runner;
    pthread_mutex_init(&v->lock, NULL);
    pthread_mutex_init(&v->state_lock, NULL);
    if (mkdir(v->root, 0700) && errno != EEXIST) {
        ipd_buf_addf(err, "venv: cannot create %s: %s", v->root,
                     strerror(errno));
        rc = IPD_ERR_IO;
        goto out;
    }
    v->root_fd = open(v->root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (v->root_fd < 0) {
        ipd_buf_addf(err, "venv: cannot open %s: %s", v->root, strerror(errno));
        rc = IPD_ERR_IO;
        goto out;
    }
    /* The service's alone: the sandbox never searches it (generations
     * and pip's cache are handed to it as trees the service opened). */
    (void)fchmod(v->root_fd, 0700);
    if (mkdirat(v->root_fd, "pip-cache", 0700) && errno != EEXIST) {
        ipd_buf_addf(err, "venv: cannot create %s/pip-cache: %s", v->root,
                     strerror(errno));
        rc = IPD_ERR_IO;
        goto out;
    }
    if (v->owner_uid != (uid_t)-1)
        (void)fchownat(v->root_fd, "pip-cache", v->owner_uid, v->owner_gid, 0);
    /* Leftovers of installs killed half-way. */
    int lfd = lock_take(v);
    if (lfd >= 0) {
        gc(v);
        lock_drop(v, lfd);
    }
    *out = v;
    v = NULL;
    rc = IPD_OK;
out:
    ipd_venv_free(v);
    return rc;
}

void ipd_venv_free(struct ipd_venv *v)
{
    if (!v)
        return;
    if (v->root_fd >= 0)
        close(v->root_fd);
    free(v->root);
    free(v->base_python);
    free(v->index_url);
    free(v->find_links);
    free(v->tools_dir);
    free(v->last_rebuild_error);
    json_decref(v->base_status);
    json_decref(v->auto_failed);
    pthread_mutex_destroy(&v->lock);
    pthread_mutex_destroy(&v->state_lock);
    free(v);
}
