/*
 * blob_local.c - blob.h on local disk: write to a temporary file, fsync,
 * rename into place, fsync the directory.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../service/log.h"
#include "../service/util.h"
#include "blob.h"

struct ipd_blobs {
    int dirfd; /* <data-dir>/blobs */
    int tmpfd; /* <data-dir>/blobs/tmp */
};

struct ipd_blob_writer {
    struct ipd_blobs *blobs;
    int fd;
    char tmpname[64];
    int64_t size, max;
    struct ipd_sha256 *sha;
};

static enum ipd_err mkdir_at(int dirfd, const char *name)
{
    if (mkdirat(dirfd, name, 0700) && errno != EEXIST)
        return IPD_ERR_IO;
    return IPD_OK;
}

/* Temporary files left by a crash or kill belong to no request now. */
static void remove_stale_tmp(struct ipd_blobs *b)
{
    int fd = dup(b->tmpfd);
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    struct dirent *e;
    if (!d) {
        if (fd >= 0)
            close(fd);
        return;
    }
    rewinddir(d);
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        if (unlinkat(b->tmpfd, e->d_name, 0) == 0)
            ipd_info("removed stale temporary upload %s", e->d_name);
    }
    closedir(d);
}

enum ipd_err ipd_blobs_open(const char *data_dir, struct ipd_blobs **out)
{
    enum ipd_err rc = IPD_OK;
    struct ipd_blobs *b = ipd_xcalloc(1, sizeof(*b));
    int root = -1;
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
    remove_stale_tmp(b);
out:
    if (root >= 0)
        close(root);
    if (rc) {
        ipd_error("cannot open blob store under %s/blobs: %s", data_dir,
                  strerror(errno));
        ipd_blobs_free(b);
        b = NULL;
    }
    *out = b;
    return rc;
}

void ipd_blobs_free(struct ipd_blobs *b)
{
    if (!b)
        return;
    if (b->tmpfd >= 0)
        close(b->tmpfd);
    if (b->dirfd >= 0)
        close(b->dirfd);
    free(b);
}

const char *ipd_blobs_backend(const struct ipd_blobs *b)
{
    (void)b;
    return "local";
}

enum ipd_err ipd_blobs_ping(struct ipd_blobs *b)
{
    /* Writable and not full: the checks an upload would fail on. */
    struct stat st;
    if (fstat(b->dirfd, &st) || faccessat(b->tmpfd, ".", W_OK, 0))
        return IPD_ERR_IO;
    return IPD_OK;
}

enum ipd_err ipd_blob_writer_new(struct ipd_blobs *b, int64_t max_size,
                                 struct ipd_blob_writer **out)
{
    struct ipd_blob_writer *w = ipd_xcalloc(1, sizeof(*w));
    char id[IPD_ID_MAX];
    ipd_id_new("up", id);
    snprintf(w->tmpname, sizeof(w->tmpname), "%s.part", id);
    w->fd = openat(b->tmpfd, w->tmpname,
                   O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (w->fd < 0) {
        ipd_error("cannot create temporary upload: %s", strerror(errno));
        free(w);
        *out = NULL;
        return IPD_ERR_IO;
    }
    w->blobs = b;
    w->max = max_size;
    w->sha = ipd_sha256_new();
    *out = w;
    return IPD_OK;
}

enum ipd_err ipd_blob_writer_write(struct ipd_blob_writer *w,
                                   const void *data, size_t len)
{
    const char *p = data;
    if ((int64_t)len > w->max - w->size)
        return IPD_ERR_TOO_LARGE;
    ipd_sha256_update(w->sha, data, len);
    while (len) {
        ssize_t n = write(w->fd, p, len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            ipd_error("writing temporary upload: %s", strerror(errno));
            return IPD_ERR_IO;
        }
        p += n;
        len -= (size_t)n;
        w->size += n;
    }
    return IPD_OK;
}

int64_t ipd_blob_writer_size(const struct ipd_blob_writer *w)
{
    return w->size;
}

int ipd_blob_writer_fd(const struct ipd_blob_writer *w)
{
    return w->fd;
}

void ipd_blob_writer_sha256(struct ipd_blob_writer *w,
                            char hex[IPD_SHA256_HEX])
{
    ipd_sha256_final(w->sha, hex);
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

enum ipd_err ipd_blob_writer_commit(struct ipd_blob_writer *w,
                                    const char *file_id)
{
    enum ipd_err rc = IPD_OK;
    char dir[3], path[IPD_ID_MAX + 4];
    struct ipd_blobs *b = w->blobs;

    rc = blob_path(file_id, dir, path);
    if (rc)
        goto out;
    rc = mkdir_at(b->dirfd, dir);
    if (rc)
        goto out;
    if (fsync(w->fd)) {
        rc = IPD_ERR_IO;
        goto out;
    }
    if (renameat(b->tmpfd, w->tmpname, b->dirfd, path)) {
        rc = IPD_ERR_IO;
        goto out;
    }
    w->tmpname[0] = '\0';
    /* The rename is durable only once the directory entry is. */
    rc = fsync_dir_at(b->dirfd, dir);
out:
    if (rc)
        ipd_error("committing blob %s: %s", file_id, strerror(errno));
    ipd_blob_writer_abort(w);
    return rc;
}

void ipd_blob_writer_abort(struct ipd_blob_writer *w)
{
    if (!w)
        return;
    if (w->fd >= 0)
        close(w->fd);
    if (w->tmpname[0] && unlinkat(w->blobs->tmpfd, w->tmpname, 0))
        ipd_error("removing temporary upload %s: %s", w->tmpname,
                  strerror(errno));
    ipd_sha256_free(w->sha);
    free(w);
}

enum ipd_err ipd_blob_open(struct ipd_blobs *b, const char *file_id, int *fd,
                           int64_t *size)
{
    char dir[3], path[IPD_ID_MAX + 4];
    struct stat st;
    *fd = -1;
    if (blob_path(file_id, dir, path))
        return IPD_ERR_NOT_FOUND;
    int f = openat(b->dirfd, path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (f < 0)
        return errno == ENOENT ? IPD_ERR_NOT_FOUND : IPD_ERR_IO;
    if (fstat(f, &st) || !S_ISREG(st.st_mode)) {
        close(f);
        return IPD_ERR_IO;
    }
    *fd = f;
    *size = st.st_size;
    return IPD_OK;
}

enum ipd_err ipd_blob_delete(struct ipd_blobs *b, const char *file_id)
{
    char dir[3], path[IPD_ID_MAX + 4];
    if (blob_path(file_id, dir, path))
        return IPD_ERR_NOT_FOUND;
    if (unlinkat(b->dirfd, path, 0))
        return errno == ENOENT ? IPD_ERR_NOT_FOUND : IPD_ERR_IO;
    return IPD_OK;
}

enum ipd_err ipd_blobs_count_tmp(struct ipd_blobs *b, int64_t *n)
{
    int fd = dup(b->tmpfd);
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    struct dirent *e;
    *n = 0;
    if (!d) {
        if (fd >= 0)
            close(fd);
        return IPD_ERR_IO;
    }
    rewinddir(d);
    while ((e = readdir(d)))
        if (e->d_name[0] != '.')
            (*n)++;
    closedir(d);
    return IPD_OK;
}
