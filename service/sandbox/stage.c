/*
 * stage.c - staging areas (sandbox.h): a tmpfs made with the mount API
 * and never attached on the host, or a private directory without root.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <search.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../common/util.h"
#include "sandbox_internal.h"

/* A detached tmpfs: fsopen, its limits, fsmount.  -1 with errno. */
static int tmpfs_detached(int64_t bytes, int64_t inodes)
{
    char size[32], nr[32];
    int fs = fsopen("tmpfs", FSOPEN_CLOEXEC), mnt = -1;

    if (fs < 0)
        return -1;
    snprintf(size, sizeof size, "%lld", (long long)bytes);
    snprintf(nr, sizeof nr, "%lld", (long long)inodes);
    if (fsconfig(fs, FSCONFIG_SET_STRING, "source", "tmpfs", 0) == 0 &&
        fsconfig(fs, FSCONFIG_SET_STRING, "size", size, 0) == 0 &&
        fsconfig(fs, FSCONFIG_SET_STRING, "nr_inodes", nr, 0) == 0 &&
        fsconfig(fs, FSCONFIG_SET_STRING, "mode", "0755", 0) == 0 &&
        fsconfig(fs, FSCONFIG_CMD_CREATE, NULL, NULL, 0) == 0)
        mnt =
            fsmount(fs, FSMOUNT_CLOEXEC, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV);
    int saved = errno;
    close(fs);
    errno = saved;
    return mnt;
}

/* Not root: mkdtemp("<dir>/interpd-stage-XXXXXX"), 0700. */
static enum ipd_err stage_dir(struct ipd_sandbox_stage *st,
                              const char *fallback_dir, char *err,
                              size_t errlen)
{
    char path[PATH_MAX];

    if ((size_t)snprintf(path, sizeof path, "%s/interpd-stage-XXXXXX",
                         fallback_dir ? fallback_dir : "/tmp") >= sizeof path ||
        !mkdtemp(path)) {
        snprintf(err, errlen, "staging dir under %s: %s",
                 fallback_dir ? fallback_dir : "/tmp", strerror(errno));
        return IPD_ERR_INTERNAL;
    }
    st->fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (st->fd < 0) {
        snprintf(err, errlen, "staging dir %s: %s", path, strerror(errno));
        (void)rmdir(path);
        return IPD_ERR_INTERNAL;
    }
    st->dir = ipd_xstrdup(path);
    return IPD_OK;
}

enum ipd_err ipd_sandbox_stage_new(int64_t bytes, int64_t inodes,
                                   const char *fallback_dir,
                                   struct ipd_sandbox_stage **out, char *err,
                                   size_t errlen)
{
    struct ipd_sandbox_stage *st = ipd_xcalloc(1, sizeof *st);
    enum ipd_err rc = IPD_OK;

    *out = NULL;
    st->fd = tmpfs_detached(bytes, inodes);
    if (st->fd >= 0) {
        st->detached = true;
    } else if (errno == EPERM || errno == ENOSYS) {
        rc = stage_dir(st, fallback_dir, err, errlen);
    } else {
        snprintf(err, errlen, "staging tmpfs: %s", strerror(errno));
        rc = IPD_ERR_INTERNAL;
    }
    if (rc) {
        free(st);
        return rc;
    }
    *out = st;
    return IPD_OK;
}

int ipd_sandbox_stage_fd(const struct ipd_sandbox_stage *st)
{
    return st->fd;
}

void ipd_sandbox_stage_free(struct ipd_sandbox_stage *st)
{
    if (!st)
        return;
    if (st->dir) {
        char *slash = strrchr(st->dir, '/');
        *slash = '\0';
        int parent = open(slash == st->dir ? "/" : st->dir,
                          O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (parent >= 0) {
            (void)ipd_remove_tree_at(parent, slash + 1);
            close(parent);
        }
        free(st->dir);
    }
    if (st->fd >= 0)
        close(st->fd);
    free(st);
}

bool ipd_sandbox_stage_detached(const struct ipd_sandbox_stage *st)
{
    return st && st->detached;
}

/* ---- a copy of a host tree ---------------------------------------------- */

/* A file with more than one link, once copied: where its first copy is. */
struct copied_link {
    dev_t dev;
    ino_t ino;
    char *rel; /* owned; path inside the stage */
};

struct copy_ctx {
    int root;           /* the stage's root */
    void *links;        /* tsearch tree of struct copied_link */
    char rel[PATH_MAX]; /* the entry's path inside the stage */
    int errnum;         /* errno of the first failure */
    char *err;
    size_t errlen;
};

static int cmp_link(const void *a, const void *b)
{
    const struct copied_link *x = a, *y = b;
    if (x->dev != y->dev)
        return x->dev < y->dev ? -1 : 1;
    return x->ino < y->ino ? -1 : x->ino > y->ino;
}

static void free_link(void *p)
{
    struct copied_link *l = p;
    free(l->rel);
    free(l);
}

/* Owner, mode (not for a symlink) and times of sb on name in dfd. */
static int copy_meta(int dfd, const char *name, const struct stat *sb)
{
    struct timespec ts[2] = {sb->st_atim, sb->st_mtim};

    if (fchownat(dfd, name, sb->st_uid, sb->st_gid, AT_SYMLINK_NOFOLLOW))
        return -1;
    if (!S_ISLNK(sb->st_mode) && fchmodat(dfd, name, sb->st_mode & 07777, 0))
        return -1;
    return utimensat(dfd, name, ts, AT_SYMLINK_NOFOLLOW);
}

/* A regular file's bytes, or a hard link to its first copy. */
static int copy_file(struct copy_ctx *c, int sfd, int dfd, const char *name,
                     const struct stat *sb)
{
    struct copied_link key = {sb->st_dev, sb->st_ino, NULL}, **found;

    if (sb->st_nlink > 1 && (found = tfind(&key, &c->links, cmp_link)))
        return linkat(c->root, (*found)->rel, dfd, name, 0);
    /* O_NONBLOCK: a FIFO swapped in since the stat must not block the
     * copy (and the install lock behind it); what was opened must be the
     * regular file that was stat'ed. */
    int in = openat(sfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    struct stat now;
    if (in >= 0 && (fstat(in, &now) || !S_ISREG(now.st_mode) ||
                    now.st_dev != sb->st_dev || now.st_ino != sb->st_ino)) {
        close(in);
        in = -1;
        errno = ESTALE;
    }
    int out = in < 0 ? -1
                     : openat(dfd, name,
                              O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    off_t left = sb->st_size;
    int rc = out < 0 ? -1 : 0;
    while (!rc && left > 0) {
        ssize_t n = sendfile(out, in, NULL, (size_t)left);
        if (n > 0)
            left -= n;
        else if (n == 0 || errno != EINTR)
            rc = n == 0 ? (errno = EIO, -1) : -1;
    }
    int saved = errno;
    if (out >= 0 && close(out) && !rc)
        rc = -1, saved = errno;
    if (in >= 0)
        close(in);
    errno = saved;
    if (!rc && sb->st_nlink > 1) {
        struct copied_link *l = ipd_xcalloc(1, sizeof *l);
        *l = key;
        l->rel = ipd_xstrdup(c->rel);
        if (!tsearch(l, &c->links, cmp_link))
            free_link(l);
    }
    return rc;
}

static int copy_dir(struct copy_ctx *c, int sfd, int dfd, int depth);

/* One entry of a directory being copied (c->rel names it). */
static int copy_entry(struct copy_ctx *c, int sfd, int dfd, const char *name,
                      int depth)
{
    struct stat sb;
    char target[PATH_MAX];
    int rc = -1;

    if (fstatat(sfd, name, &sb, AT_SYMLINK_NOFOLLOW))
        return -1;
    if (S_ISDIR(sb.st_mode)) {
        int s =
            openat(sfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        int d = s < 0 || mkdirat(dfd, name, 0700)
                    ? -1
                    : openat(dfd, name,
                             O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        rc = d < 0 ? -1 : copy_dir(c, s, d, depth + 1);
        if (d >= 0)
            close(d);
        if (s >= 0)
            close(s);
    } else if (S_ISLNK(sb.st_mode)) {
        ssize_t n = readlinkat(sfd, name, target, sizeof target - 1);
        if (n >= 0) {
            target[n] = '\0';
            rc = symlinkat(target, dfd, name);
        }
    } else if (S_ISREG(sb.st_mode)) {
        rc = copy_file(c, sfd, dfd, name, &sb);
    } else {
        return 0; /* no device, fifo or socket belongs in a venv */
    }
    return rc ? rc : copy_meta(dfd, name, &sb);
}

static int copy_dir(struct copy_ctx *c, int sfd, int dfd, int depth)
{
    int fd = depth < IPD_REMOVE_TREE_DEPTH ? dup(sfd) : (errno = ELOOP, -1);
    DIR *d = ipd_fdopendir(fd);
    size_t len = strlen(c->rel);
    struct dirent *e;
    int rc = 0;

    if (!d)
        return -1;
    while (!rc && (e = ipd_readdir(d)) != NULL) {
        if ((size_t)snprintf(c->rel + len, sizeof c->rel - len, "%s%s",
                             len ? "/" : "",
                             e->d_name) >= sizeof c->rel - len) {
            errno = ENAMETOOLONG;
            rc = -1;
            break;
        }
        rc = copy_entry(c, sfd, dfd, e->d_name, depth);
        if (rc && !c->errnum) {
            c->errnum = errno;
            snprintf(c->err, c->errlen, "%s: %s", c->rel, strerror(errno));
        }
        c->rel[len] = '\0';
    }
    closedir(d);
    return rc;
}

enum ipd_err ipd_sandbox_stage_copy(struct ipd_sandbox_stage *st,
                                    const char *name, const char *host_dir,
                                    char *err, size_t errlen)
{
    struct copy_ctx c = {.root = st->fd, .err = err, .errlen = errlen};
    struct stat sb;
    int src = open(host_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC), dst = -1;
    enum ipd_err rc = IPD_ERR_IO;

    err[0] = '\0';
    if (src < 0 || fstat(src, &sb) || strchr(name, '/') ||
        mkdirat(st->fd, name, 0700) ||
        (dst = openat(st->fd, name,
                      O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) < 0) {
        snprintf(err, errlen, "%s: %s", host_dir, strerror(errno));
        goto out;
    }
    snprintf(c.rel, sizeof c.rel, "%s", name);
    if (copy_dir(&c, src, dst, 0) == 0 && copy_meta(st->fd, name, &sb) == 0)
        rc = IPD_OK;
    else if (!c.errnum)
        c.errnum = errno;
    if (rc && !err[0])
        snprintf(err, errlen, "%s: %s", name, strerror(c.errnum));
    if (rc && c.errnum == ENOSPC)
        rc = IPD_ERR_TOO_LARGE;
out:
    tdestroy(c.links, free_link);
    if (dst >= 0)
        close(dst);
    if (src >= 0)
        close(src);
    return rc;
}

bool ipd_sandbox_is_fs_root(const char *dir)
{
    char real[PATH_MAX], line[4096], root[PATH_MAX], point[PATH_MAX];
    FILE *f;
    bool own = false;

    if (!realpath(dir, real) || !(f = fopen("/proc/self/mountinfo", "re")))
        return false;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "%*d %*d %*s %4095s %4095s", root, point) == 2 &&
            !strcmp(point, real))
            own = !strcmp(root, "/"); /* the last mount there wins */
    fclose(f);
    return own;
}
