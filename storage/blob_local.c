/*
 * blob_local.c - blob.h on local disk: write to a temporary file, fsync,
 * rename into place, fsync the directory.  The reconcile job lists the
 * two-character directories, removes abandoned temporary files and empty
 * directories (blob.h).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../service/common/log.h"
#include "../service/common/util.h"
#include "blob_internal.h"

/* Start writeback every this many bytes, so the final fsync of a large
 * upload has little left to do (the disk works while the network does). */
#define WRITEBACK_CHUNK (8 * 1024 * 1024)

struct local_blobs {
    struct ipd_blobs base;
    int dirfd; /* <data-dir>/blobs */
    int tmpfd; /* <data-dir>/blobs/tmp */
};

/* Uploads past this size are hashed by a thread of their own, reading the
 * file back from the page cache while the request thread receives and
 * writes: SHA-256 is a third of the CPU an upload costs. */
#define HASH_THREAD_MIN (1024 * 1024)
#define HASH_READ (256 * 1024)

struct local_writer {
    struct ipd_blob_writer base;
    int fd;
    char tmpname[64];
    int64_t synced; /* bytes handed to writeback so far */

    /* The hashing thread, once started (base.sha is then its own). */
    bool hashing;
    pthread_t hasher;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int64_t written;  /* bytes in the file (published to the hasher) */
    int64_t hashed;   /* bytes hashed */
    bool finished;    /* no more writes are coming */
    bool hash_failed; /* a read-back failed */
};

struct local_reader {
    struct ipd_blob_reader base;
    int fd;
};

static const struct ipd_blobs_ops local_ops;

static struct local_blobs *local(struct ipd_blobs *b)
{
    return (struct local_blobs *)b;
}

static enum ipd_err mkdir_at(int dirfd, const char *name)
{
    if (mkdirat(dirfd, name, 0700) && errno != EEXIST)
        return IPD_ERR_IO;
    return IPD_OK;
}

/*
 * Directory locks: an flock on a directory of the store, opened anew each
 * time (flock belongs to the open file, so threads of one process exclude
 * each other too), and holding across processes, such as `interpd
 * cleanup` run from cron against a serving node.  Returns the fd to
 * close, or -1.
 *
 *   blobs/      commits hold it shared from making their shard directory
 *               to renaming the blob into it; pruning empty shard
 *               directories holds it exclusive, so it never removes one
 *               a commit has just made or found.
 *   blobs/tmp/  writers hold it shared while they create their temporary
 *               file and lock it (LOCK_EX, for as long as the writer
 *               lives); opening the store removes stale temporary files
 *               holding it exclusive, and only files nobody has locked:
 *               those of a process that died, never a live upload of
 *               another process.  The age-based reaper also removes
 *               only unlocked files (it needs no directory lock: a file
 *               being created is new).
 */
static int dir_lock(int dirfd, int op)
{
    int fd = openat(dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    while (flock(fd, op)) {
        if (errno != EINTR) {
            int saved = errno;
            close(fd);
            errno = saved;
            return -1;
        }
    }
    return fd;
}

/* errno after a failed write, fsync, create or rename: a full disk (or
 * an exhausted disk quota) is its own error, answered 507, not 500. */
static enum ipd_err errno_err(void)
{
    return errno == ENOSPC || errno == EDQUOT ? IPD_ERR_NO_SPACE : IPD_ERR_IO;
}

static void close_keep_errno(int fd)
{
    int saved = errno;
    close(fd);
    errno = saved;
}

/* Remove the temporary file name when no live writer holds it (see the
 * directory locks; the caller holds blobs/tmp exclusive). */
static bool remove_if_unlocked(int tmpfd, const char *name)
{
    int fd =
        openat(tmpfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    bool removed = false;
    if (fd < 0)
        return false;
    if (flock(fd, LOCK_EX | LOCK_NB) == 0)
        removed = unlinkat(tmpfd, name, 0) == 0;
    close(fd);
    return removed;
}

/* Call fn for each entry of the directory at dirfd (not . or ..). */
static enum ipd_err
each_entry(int dirfd, int (*fn)(void *cls, const char *name), void *cls)
{
    int fd = openat(dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    DIR *d = ipd_fdopendir(fd);
    struct dirent *e;
    if (!d)
        return IPD_ERR_IO;
    while ((e = ipd_readdir(d))) {
        if (fn(cls, e->d_name))
            break;
    }
    closedir(d);
    return IPD_OK;
}

static int remove_stale(void *cls, const char *name)
{
    struct local_blobs *b = cls;
    /* Temporary files left by a crash or kill belong to no request now;
     * one still locked is another live process's upload. */
    if (remove_if_unlocked(b->tmpfd, name))
        ipd_info("removed stale temporary upload %s", name);
    return 0;
}

enum ipd_err ipd_blobs_open_local(const char *data_dir, struct ipd_blobs **out)
{
    enum ipd_err rc = IPD_OK;
    struct local_blobs *b = ipd_xcalloc(1, sizeof(*b));
    int root = -1;
    ipd__blobs_init(&b->base, &local_ops);
    b->dirfd = b->tmpfd = -1;

    root = open(data_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (root < 0 || mkdir_at(root, "blobs")) {
        rc = IPD_ERR_IO;
        goto out;
    }
    b->dirfd = openat(root, "blobs", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (b->dirfd < 0 || mkdir_at(b->dirfd, "tmp")) {
        rc = IPD_ERR_IO;
        goto out;
    }
    b->tmpfd = openat(b->dirfd, "tmp", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (b->tmpfd < 0) {
        rc = IPD_ERR_IO;
        goto out;
    }
    int lfd = dir_lock(b->tmpfd, LOCK_EX);
    if (lfd >= 0) {
        each_entry(b->tmpfd, remove_stale, b);
        close(lfd);
    }
out:
    if (root >= 0)
        close(root);
    if (rc) {
        ipd_error("cannot open blob store under %s/blobs: %s", data_dir,
                  strerror(errno));
        ipd_blobs_free(&b->base);
        b = NULL;
    }
    *out = b ? &b->base : NULL;
    return rc;
}

static void local_free(struct ipd_blobs *base)
{
    struct local_blobs *b = local(base);
    if (b->tmpfd >= 0)
        close(b->tmpfd);
    if (b->dirfd >= 0)
        close(b->dirfd);
    free(b);
}

static enum ipd_err local_ping(struct ipd_blobs *base)
{
    /* Writable: the check an upload would fail on first. */
    if (faccessat(local(base)->tmpfd, ".", W_OK, 0))
        return IPD_ERR_IO;
    return IPD_OK;
}

static enum ipd_err local_writer_new(struct ipd_blobs *base,
                                     const char *file_id,
                                     struct ipd_blob_writer **out)
{
    struct local_writer *w = ipd_xcalloc(1, sizeof(*w));
    char id[IPD_ID_MAX];
    (void)file_id;
    ipd_id_new("up", id);
    snprintf(w->tmpname, sizeof(w->tmpname), "%s.part", id);
    int tmpfd = local(base)->tmpfd, lfd = dir_lock(tmpfd, LOCK_SH);
    w->fd = lfd < 0 ? -1
                    : openat(tmpfd, w->tmpname,
                             O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW,
                             0600);
    if (w->fd >= 0 && flock(w->fd, LOCK_EX | LOCK_NB)) {
        close_keep_errno(w->fd);
        unlinkat(tmpfd, w->tmpname, 0);
        w->fd = -1;
    }
    if (lfd >= 0)
        close_keep_errno(lfd);
    if (w->fd < 0) {
        enum ipd_err rc = errno_err();
        ipd_error("cannot create temporary upload: %s", strerror(errno));
        free(w);
        *out = NULL;
        return rc;
    }
    *out = &w->base;
    return IPD_OK;
}

static void *hash_thread(void *arg)
{
    struct local_writer *w = arg;
    unsigned char *buf = ipd_xmalloc(HASH_READ);
    pthread_mutex_lock(&w->lock);
    for (;;) {
        while (w->hashed == w->written && !w->finished)
            pthread_cond_wait(&w->cond, &w->lock);
        if (w->hashed == w->written)
            break;
        int64_t end = w->written, off = w->hashed;
        pthread_mutex_unlock(&w->lock);
        while (off < end && !w->hash_failed) {
            size_t want =
                (size_t)(end - off < HASH_READ ? end - off : HASH_READ);
            ssize_t n = pread(w->fd, buf, want, off);
            if (n < 0 && errno == EINTR)
                continue;
            if (n <= 0) {
                w->hash_failed = true;
                break;
            }
            ipd_sha256_update(w->base.sha, buf, (size_t)n);
            off += n;
        }
        pthread_mutex_lock(&w->lock);
        w->hashed = w->hash_failed ? w->written : off;
    }
    pthread_mutex_unlock(&w->lock);
    free(buf);
    return NULL;
}

/* Tell the hasher no more bytes come, and wait for it. */
static void hash_stop(struct local_writer *w)
{
    if (!w->hashing)
        return;
    pthread_mutex_lock(&w->lock);
    w->finished = true;
    pthread_cond_signal(&w->cond);
    pthread_mutex_unlock(&w->lock);
    pthread_join(w->hasher, NULL);
    pthread_mutex_destroy(&w->lock);
    pthread_cond_destroy(&w->cond);
    w->hashing = false;
}

static enum ipd_err local_sha256(struct ipd_blob_writer *base,
                                 char hex[IPD_SHA256_HEX])
{
    struct local_writer *w = (struct local_writer *)base;
    hash_stop(w);
    if (w->hash_failed)
        return IPD_ERR_IO;
    ipd_sha256_final(base->sha, hex);
    return IPD_OK;
}

/* Past HASH_THREAD_MIN, hand hashing to a thread.  blob.c has hashed the
 * bytes before this chunk; the thread goes on from there. */
static void hash_start(struct local_writer *w)
{
    w->hashed = w->written = w->base.size;
    pthread_mutex_init(&w->lock, NULL);
    pthread_cond_init(&w->cond, NULL);
    if (pthread_create(&w->hasher, NULL, hash_thread, w)) {
        pthread_mutex_destroy(&w->lock);
        pthread_cond_destroy(&w->cond);
        return; /* no thread: blob.c keeps hashing inline */
    }
    w->hashing = true;
    w->base.own_sha256 = local_sha256;
}

static enum ipd_err local_write(struct ipd_blob_writer *base, const void *data,
                                size_t len)
{
    struct local_writer *w = (struct local_writer *)base;
    if (!w->hashing && !base->own_sha256 &&
        base->size + (int64_t)len >= HASH_THREAD_MIN)
        hash_start(w);
    if (ipd_write_all(w->fd, data, len)) {
        /* errno says which: a full disk or quota is NO_SPACE (507). */
        enum ipd_err rc = errno_err();
        ipd_error("writing temporary upload: %s", strerror(errno));
        return rc;
    }
    int64_t end = base->size + (int64_t)len;
    if (w->hashing) {
        pthread_mutex_lock(&w->lock);
        w->written = end;
        pthread_cond_signal(&w->cond);
        pthread_mutex_unlock(&w->lock);
    }
    if (end - w->synced >= WRITEBACK_CHUNK) {
        /* Best effort: only starts writeback, never waits for it. */
        sync_file_range(w->fd, w->synced, end - w->synced,
                        SYNC_FILE_RANGE_WRITE);
        w->synced = end;
    }
    return IPD_OK;
}

/* "ab/file_ab..." from the id's random part: spreads blobs over 1024
 * directories so none grows huge. */
static enum ipd_err blob_path(const char *file_id, char dir[3],
                              char path[IPD_ID_MAX + 4])
{
    const char *r = strchr(file_id, '_');
    if (!r || strlen(r) < 3 || strlen(file_id) >= IPD_ID_MAX ||
        strchr(file_id, '/') || file_id[0] == '.')
        return IPD_ERR_INVALID;
    dir[0] = r[1];
    dir[1] = r[2];
    dir[2] = '\0';
    if (dir[0] == '.' || dir[1] == '.' || dir[1] == '/')
        return IPD_ERR_INVALID;
    snprintf(path, IPD_ID_MAX + 4, "%s/%s", dir, file_id);
    return IPD_OK;
}

static enum ipd_err fsync_dir_at(int dirfd, const char *name)
{
    int fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return IPD_ERR_IO;
    int r = fsync(fd);
    close(fd);
    return r ? IPD_ERR_IO : IPD_OK;
}

static void local_abort(struct ipd_blob_writer *base)
{
    struct local_writer *w = (struct local_writer *)base;
    struct local_blobs *b = local(base->blobs);
    hash_stop(w); /* it reads w->fd */
    if (w->fd >= 0)
        close(w->fd);
    /* ENOENT: already gone (removed as stale at a restart, or reaped). */
    if (w->tmpname[0] && unlinkat(b->tmpfd, w->tmpname, 0) && errno != ENOENT)
        ipd_error("removing temporary upload %s: %s", w->tmpname,
                  strerror(errno));
    ipd__blob_writer_release(base);
    free(w);
}

static enum ipd_err local_commit(struct ipd_blob_writer *base)
{
    struct local_writer *w = (struct local_writer *)base;
    struct local_blobs *b = local(base->blobs);
    enum ipd_err rc = IPD_OK;
    char dir[3], path[IPD_ID_MAX + 4];
    int lfd;

    rc = blob_path(base->file_id, dir, path);
    if (rc)
        goto out;
    if (fsync(w->fd)) {
        rc = errno_err();
        goto out;
    }
    lfd = dir_lock(b->dirfd, LOCK_SH);
    if (lfd < 0) {
        rc = IPD_ERR_IO;
        goto out;
    }
    bool made = mkdirat(b->dirfd, dir, 0700) == 0;
    if (!made && errno != EEXIST)
        rc = errno_err();
    if (!rc && renameat(b->tmpfd, w->tmpname, b->dirfd, path))
        rc = errno_err();
    close_keep_errno(lfd);
    if (rc)
        goto out;
    w->tmpname[0] = '\0';
    /* The rename is durable only once the directory entry is, and a shard
     * directory made just now only once blobs/ has its entry. */
    rc = fsync_dir_at(b->dirfd, dir);
    if (!rc && made && fsync(b->dirfd))
        rc = IPD_ERR_IO;
    if (rc)
        unlinkat(b->dirfd, path, 0);
out:
    if (rc)
        ipd_error("committing blob %s: %s", base->file_id, strerror(errno));
    local_abort(base);
    return rc;
}

static enum ipd_err local_open(struct ipd_blobs *base, const char *file_id,
                               struct ipd_blob_reader **out)
{
    char dir[3], path[IPD_ID_MAX + 4];
    struct stat st;
    if (blob_path(file_id, dir, path))
        return IPD_ERR_NOT_FOUND;
    int f = openat(local(base)->dirfd, path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (f < 0)
        return errno == ENOENT ? IPD_ERR_NOT_FOUND : IPD_ERR_IO;
    if (fstat(f, &st) || !S_ISREG(st.st_mode)) {
        close(f);
        return IPD_ERR_IO;
    }
    struct local_reader *r = ipd_xcalloc(1, sizeof(*r));
    r->fd = f;
    *out = &r->base;
    return IPD_OK;
}

static int local_take_fd(struct ipd_blob_reader *base)
{
    struct local_reader *r = (struct local_reader *)base;
    int fd = r->fd;
    r->fd = -1;
    return fd;
}

static ssize_t local_read(struct ipd_blob_reader *base, void *buf, size_t n)
{
    struct local_reader *r = (struct local_reader *)base;
    ssize_t got;
    if (r->fd < 0)
        return -1;
    do {
        got = read(r->fd, buf, n);
    } while (got < 0 && errno == EINTR);
    return got;
}

static void local_reader_free(struct ipd_blob_reader *base)
{
    struct local_reader *r = (struct local_reader *)base;
    if (r->fd >= 0)
        close(r->fd);
    free(r);
}

static enum ipd_err local_del(struct ipd_blobs *base, const char *file_id)
{
    char dir[3], path[IPD_ID_MAX + 4];
    if (blob_path(file_id, dir, path))
        return IPD_ERR_NOT_FOUND;
    if (unlinkat(local(base)->dirfd, path, 0))
        return errno == ENOENT ? IPD_ERR_NOT_FOUND : IPD_ERR_IO;
    return IPD_OK;
}

struct list_ctx {
    struct local_blobs *b;
    int (*fn)(void *cls, const char *file_id, int64_t size);
    void *cls;
    int subdir;
    int stop;
};

static int list_file(void *cls, const char *name)
{
    struct list_ctx *c = cls;
    struct stat st;
    if (fstatat(c->subdir, name, &st, AT_SYMLINK_NOFOLLOW) ||
        !S_ISREG(st.st_mode))
        return 0;
    c->stop = c->fn(c->cls, name, st.st_size);
    return c->stop;
}

static int list_dir(void *cls, const char *name)
{
    struct list_ctx *c = cls;
    if (!strcmp(name, "tmp") || strlen(name) != 2)
        return 0;
    c->subdir = openat(c->b->dirfd, name,
                       O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
    if (c->subdir < 0)
        return 0;
    each_entry(c->subdir, list_file, c);
    close(c->subdir);
    return c->stop;
}

static enum ipd_err
local_list(struct ipd_blobs *base,
           int (*fn)(void *cls, const char *file_id, int64_t size), void *cls)
{
    struct list_ctx c = {local(base), fn, cls, -1, 0};
    return each_entry(c.b->dirfd, list_dir, &c);
}

static int64_t mtime_ms(const struct stat *st)
{
    return (int64_t)st->st_mtim.tv_sec * 1000 + st->st_mtim.tv_nsec / 1000000;
}

/* The shard directories hold only blobs named by their id. */
static bool shard_name(const char *name)
{
    return strlen(name) == 2 && name[0] != '.';
}

static enum ipd_err local_stat(struct ipd_blobs *base, const char *file_id,
                               struct ipd_blob_info *out)
{
    char dir[3], path[IPD_ID_MAX + 4];
    struct stat st;
    if (blob_path(file_id, dir, path))
        return IPD_ERR_NOT_FOUND;
    if (fstatat(local(base)->dirfd, path, &st, AT_SYMLINK_NOFOLLOW))
        return errno == ENOENT || errno == ENOTDIR ? IPD_ERR_NOT_FOUND
                                                   : IPD_ERR_IO;
    if (!S_ISREG(st.st_mode))
        return IPD_ERR_NOT_FOUND;
    memcpy(out->file_id, file_id, strlen(file_id) + 1);
    out->size = st.st_size;
    out->mtime_ms = mtime_ms(&st);
    return IPD_OK;
}

struct local_iter {
    struct ipd_blob_iter base;
    DIR *root;  /* blobs/: the shard directories */
    DIR *shard; /* the shard being read, or NULL */
    bool done;
};

static enum ipd_err local_iter_new(struct ipd_blobs *base,
                                   struct ipd_blob_iter **out)
{
    struct local_iter *it = ipd_xcalloc(1, sizeof(*it));
    int fd =
        openat(local(base)->dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    it->root = fd >= 0 ? fdopendir(fd) : NULL;
    if (!it->root) {
        ipd_error("listing the blob store: %s", strerror(errno));
        if (fd >= 0)
            close(fd);
        free(it);
        return IPD_ERR_IO;
    }
    *out = &it->base;
    return IPD_OK;
}

/* Open the next shard directory into it->shard; it->done at the end. */
static enum ipd_err iter_next_shard(struct local_iter *it, int root_fd)
{
    for (;;) {
        errno = 0;
        struct dirent *e = readdir(it->root);
        if (!e) {
            it->done = true;
            return errno ? IPD_ERR_IO : IPD_OK;
        }
        if (!shard_name(e->d_name))
            continue;
        int fd = openat(root_fd, e->d_name,
                        O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
        if (fd < 0)
            continue; /* pruned meanwhile, or not a directory */
        it->shard = fdopendir(fd);
        if (!it->shard) {
            close(fd);
            return IPD_ERR_IO;
        }
        return IPD_OK;
    }
}

static enum ipd_err local_iter_next(struct ipd_blob_iter *base,
                                    struct ipd_blob_info *out, size_t cap,
                                    size_t *n)
{
    struct local_iter *it = (struct local_iter *)base;
    int root_fd = local(base->blobs)->dirfd;
    enum ipd_err rc = IPD_OK;
    struct stat st;

    while (*n < cap && !it->done && !rc) {
        if (!it->shard) {
            rc = iter_next_shard(it, root_fd);
            continue;
        }
        errno = 0;
        struct dirent *e = readdir(it->shard);
        if (!e) {
            if (errno)
                rc = IPD_ERR_IO;
            closedir(it->shard);
            it->shard = NULL;
            continue;
        }
        /* Regular files only; a name deleted since readdir saw it is
         * simply gone. */
        if (e->d_name[0] == '.' || strlen(e->d_name) >= IPD_ID_MAX ||
            fstatat(dirfd(it->shard), e->d_name, &st, AT_SYMLINK_NOFOLLOW) ||
            !S_ISREG(st.st_mode))
            continue;
        struct ipd_blob_info *i = &out[(*n)++];
        memcpy(i->file_id, e->d_name, strlen(e->d_name) + 1);
        i->size = st.st_size;
        i->mtime_ms = mtime_ms(&st);
    }
    if (rc)
        ipd_error("listing the blob store: %s", strerror(errno));
    return rc;
}

static void local_iter_free(struct ipd_blob_iter *base)
{
    struct local_iter *it = (struct local_iter *)base;
    if (it->shard)
        closedir(it->shard);
    closedir(it->root);
    free(it);
}

struct reap_ctx {
    int tmpfd;
    int64_t older_than_ms;
    int64_t removed;
};

static int reap_one(void *cls, const char *name)
{
    struct reap_ctx *c = cls;
    struct stat st;
    if (fstatat(c->tmpfd, name, &st, AT_SYMLINK_NOFOLLOW) ||
        mtime_ms(&st) >= c->older_than_ms)
        return 0;
    /* Old is not enough: a live writer (a slow URL ingest) holds its
     * flock and keeps its file. */
    if (remove_if_unlocked(c->tmpfd, name)) {
        ipd_info("removed abandoned temporary upload %s", name);
        c->removed++;
    }
    return 0;
}

static enum ipd_err local_reap_incomplete(struct ipd_blobs *base,
                                          int64_t older_than_ms,
                                          int64_t *removed)
{
    struct reap_ctx c = {local(base)->tmpfd, older_than_ms, 0};
    enum ipd_err rc = each_entry(c.tmpfd, reap_one, &c);
    *removed = c.removed;
    return rc;
}

struct prune_ctx {
    int dirfd;
    int64_t removed;
};

static int prune_one(void *cls, const char *name)
{
    struct prune_ctx *c = cls;
    /* Under blobs/ exclusive (dir_lock): no commit is between its mkdir
     * and its rename; rmdir removes only an empty directory. */
    if (shard_name(name) && unlinkat(c->dirfd, name, AT_REMOVEDIR) == 0)
        c->removed++;
    return 0;
}

static enum ipd_err local_prune_dirs(struct ipd_blobs *base, int64_t *removed)
{
    struct prune_ctx c = {local(base)->dirfd, 0};
    int lfd = dir_lock(c.dirfd, LOCK_EX);
    enum ipd_err rc = IPD_ERR_IO;

    *removed = 0;
    if (lfd < 0)
        return rc;
    rc = each_entry(c.dirfd, prune_one, &c);
    close(lfd);
    *removed = c.removed;
    return rc;
}

static int count_one(void *cls, const char *name)
{
    (void)name;
    (*(int64_t *)cls)++;
    return 0;
}

static enum ipd_err local_count_incomplete(struct ipd_blobs *base, int64_t *n)
{
    *n = 0;
    return each_entry(local(base)->tmpfd, count_one, n);
}

static const struct ipd_blobs_ops local_ops = {
    .name = "local",
    .free = local_free,
    .ping = local_ping,
    .writer_new = local_writer_new,
    .write = local_write,
    .commit = local_commit,
    .abort = local_abort,
    .open = local_open,
    .take_fd = local_take_fd,
    .read = local_read,
    .reader_free = local_reader_free,
    .del = local_del,
    .list = local_list,
    .count_incomplete = local_count_incomplete,
    .stat = local_stat,
    .iter_new = local_iter_new,
    .iter_next = local_iter_next,
    .iter_free = local_iter_free,
    .reap_incomplete = local_reap_incomplete,
    .prune_dirs = local_prune_dirs,
};
