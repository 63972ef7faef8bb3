/*
 * space.c - free space and the delete reserve (space.h).
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "../service/common/log.h"
#include "space.h"

#define RESERVE_NAME ".space-reserve"

struct ipd_space {
    pthread_mutex_t lock; /* guards reserved and the reserve file */
    int dirfd;
    int64_t reserve_bytes;
    bool reserved; /* the reserve file holds reserve_bytes now */
};

/* Allocate the reserve file; the caller holds s->lock. */
static bool lay_reserve(struct ipd_space *s)
{
    int fd = openat(s->dirfd, RESERVE_NAME,
                    O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0)
        return false;
    /* posix_fallocate reserves real blocks (a sparse file would not);
     * on a filesystem without fallocate glibc writes zeros instead. */
    int err = posix_fallocate(fd, 0, (off_t)s->reserve_bytes);
    close(fd);
    if (err) {
        unlinkat(s->dirfd, RESERVE_NAME, 0);
        return false;
    }
    return true;
}

enum ipd_err ipd_space_open(const char *dir, int64_t reserve_bytes,
                            struct ipd_space **out)
{
    *out = NULL;
    int dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dirfd < 0) {
        ipd_error("space: cannot open %s: %s", dir, strerror(errno));
        return IPD_ERR_IO;
    }
    struct ipd_space *s = ipd_xcalloc(1, sizeof(*s));
    pthread_mutex_init(&s->lock, NULL);
    s->dirfd = dirfd;
    s->reserve_bytes = reserve_bytes > 0 ? reserve_bytes : 0;
    if (s->reserve_bytes) {
        s->reserved = lay_reserve(s);
        if (!s->reserved)
            ipd_warn("space: no room for the %lld-byte delete reserve in "
                     "%s yet: uploads are refused until there is",
                     (long long)s->reserve_bytes, dir);
    }
    *out = s;
    return IPD_OK;
}

void ipd_space_free(struct ipd_space *s)
{
    if (!s)
        return;
    close(s->dirfd);
    pthread_mutex_destroy(&s->lock);
    free(s);
}

enum ipd_err ipd_space_stat(struct ipd_space *s, int64_t *free_bytes,
                            int64_t *total_bytes)
{
    struct statvfs v;
    if (fstatvfs(s->dirfd, &v))
        return IPD_ERR_IO;
    *free_bytes = (int64_t)v.f_bavail * (int64_t)v.f_frsize;
    *total_bytes = (int64_t)v.f_blocks * (int64_t)v.f_frsize;
    return IPD_OK;
}

bool ipd_space_release(struct ipd_space *s)
{
    bool had;
    pthread_mutex_lock(&s->lock);
    had = s->reserved;
    if (had) {
        unlinkat(s->dirfd, RESERVE_NAME, 0);
        s->reserved = false;
        ipd_warn("space: the disk is full: released the %lld-byte delete "
                 "reserve",
                 (long long)s->reserve_bytes);
    }
    pthread_mutex_unlock(&s->lock);
    return had;
}

bool ipd_space_refill(struct ipd_space *s)
{
    bool in_place;
    int64_t avail = 0, total = 0;
    pthread_mutex_lock(&s->lock);
    if (!s->reserved && s->reserve_bytes &&
        !ipd_space_stat(s, &avail, &total) && avail >= 2 * s->reserve_bytes) {
        s->reserved = lay_reserve(s);
        if (s->reserved)
            ipd_info("space: the delete reserve is in place again");
    }
    in_place = s->reserved || !s->reserve_bytes;
    pthread_mutex_unlock(&s->lock);
    return in_place;
}

enum ipd_err ipd_space_check_write(struct ipd_space *s)
{
    if (!s)
        return IPD_OK;
    return ipd_space_refill(s) ? IPD_OK : IPD_ERR_NO_SPACE;
}

int64_t ipd_space_reserve_size(const struct ipd_space *s)
{
    return s->reserve_bytes;
}

bool ipd_space_reserved(struct ipd_space *s)
{
    pthread_mutex_lock(&s->lock);
    bool r = s->reserved;
    pthread_mutex_unlock(&s->lock);
    return r;
}
