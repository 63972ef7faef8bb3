/*
 * stage.c - staging areas (sandbox.h): a tmpfs made with the mount API
 * and never attached on the host, or a private directory without root.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mount.h>
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
        mnt = fsmount(fs, FSMOUNT_CLOEXEC,
                      MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV);
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
                         fallback_dir ? fallback_dir : "/tmp") >=
            sizeof path ||
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
