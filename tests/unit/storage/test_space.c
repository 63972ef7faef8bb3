/*
 * test_space.c - storage/space.h, the delete reserve, on a real small
 * filesystem: a 16 MiB tmpfs mounted in a child with a mount namespace of
 * its own (root; it dies with the child).  The gate both ways: a write is
 * refused while the reserve is out and the filesystem has less than twice
 * its size free (measured, byte by byte of free space as the kernel
 * reports it), and accepted, with the reserve laid again, from exactly
 * twice its size; with the reserve in place a write is accepted even on a
 * full disk (deletes have it); a store with no reserve never refuses.
 */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdlib.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include "storage/space.h"
#include "test.h"

#define RESERVE (INT64_C(1) << 20)

static char dir[] = "/tmp/ipd-space-XXXXXX";

static int64_t free_bytes(void)
{
    struct statvfs v;
    IPD_ASSERT(statvfs(dir, &v) == 0);
    return (int64_t)v.f_bavail * (int64_t)v.f_frsize;
}

/* Fill the filesystem to its last byte with filler; its size. */
static int64_t fill(const char *filler)
{
    static char block[64 * 1024];
    int fd = open(filler, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    size_t len = sizeof(block);
    struct stat st;
    IPD_ASSERT(fd >= 0);
    while (len) {
        ssize_t n = write(fd, block, len);
        if (n < 0 && errno == ENOSPC)
            len /= 2; /* down to the last bytes */
        else
            IPD_ASSERT(n >= 0 || errno == EINTR);
    }
    IPD_ASSERT(fstat(fd, &st) == 0);
    close(fd);
    return st.st_size;
}

/* Shrink filler a page at a time until the free space is at least want;
 * filler's size is *size. */
static void free_until(const char *filler, int64_t *size, int64_t want)
{
    while (free_bytes() < want) {
        IPD_ASSERT(*size >= 4096);
        *size -= 4096;
        IPD_ASSERT(truncate(filler, *size) == 0);
    }
}

static bool reserve_file_holds(void)
{
    char p[64];
    struct stat st;
    snprintf(p, sizeof(p), "%s/.space-reserve", dir);
    return stat(p, &st) == 0 && st.st_size == RESERVE &&
           (int64_t)st.st_blocks * 512 >= RESERVE;
}

/* The checks, in the child; the number of failed ones. */
static int gate_child(void)
{
    struct ipd_space *s = NULL, *none = NULL;
    char filler[64];
    int64_t size;

    if (unshare(CLONE_NEWNS) ||
        mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) ||
        mount("tmpfs", dir, "tmpfs", 0, "size=16m,mode=0700")) {
        perror("a tmpfs in a mount namespace of the test's own");
        return 1;
    }
    snprintf(filler, sizeof(filler), "%s/filler", dir);
    CHECK_INT(ipd_space_open(dir, RESERVE, &s), IPD_OK);
    CHECK_INT(ipd_space_open(dir, 0, &none), IPD_OK);
    CHECK(ipd_space_reserved(s));
    CHECK(reserve_file_holds());
    CHECK_INT(ipd_space_check_write(s), IPD_OK);

    /* Full to the last byte: the reserve is still in place, so writes
     * are let through (they fail on the disk, not on the gate). */
    size = fill(filler);
    CHECK_INT(free_bytes(), 0);
    CHECK_INT(ipd_space_check_write(s), IPD_OK);
    CHECK_INT(ipd_space_check_write(none), IPD_OK);
    CHECK_INT(ipd_space_check_write(NULL), IPD_OK);

    /* A delete needed the reserve: out.  Its room alone is free now. */
    CHECK(ipd_space_release(s));
    CHECK(!ipd_space_release(s));
    CHECK(!ipd_space_reserved(s));
    CHECKF(free_bytes() >= RESERVE && free_bytes() < 2 * RESERVE,
           "free %lld after the release", (long long)free_bytes());
    CHECK_INT(ipd_space_check_write(s), IPD_ERR_NO_SPACE);
    CHECK(!ipd_space_refill(s));
    CHECK_INT(ipd_space_check_write(none), IPD_OK);

    /* Up to one page short of twice the reserve: still refused. */
    free_until(filler, &size, 2 * RESERVE - 4096);
    CHECKF(free_bytes() < 2 * RESERVE, "free %lld", (long long)free_bytes());
    CHECK_INT(ipd_space_check_write(s), IPD_ERR_NO_SPACE);
    CHECK(!ipd_space_reserved(s));

    /* Twice the reserve: laid again, writes accepted, and the free space
     * is what is left beside it. */
    free_until(filler, &size, 2 * RESERVE);
    CHECK_INT(ipd_space_check_write(s), IPD_OK);
    CHECK(ipd_space_reserved(s));
    CHECK(reserve_file_holds());
    CHECKF(free_bytes() < 2 * RESERVE - RESERVE / 2, "free %lld",
           (long long)free_bytes());
    ipd_space_free(s);
    ipd_space_free(none);

    /* A store opened on a full disk has no reserve yet: writes refused
     * until there is room for it. */
    unlink(filler);
    CHECK(fill(filler) > 0);
    unlink(filler); /* the file is gone, the reserve of the last one too */
    char old[64];
    snprintf(old, sizeof(old), "%s/.space-reserve", dir);
    unlink(old);
    size = fill(filler);
    CHECK_INT(ipd_space_open(dir, RESERVE, &s), IPD_OK);
    CHECK(!ipd_space_reserved(s));
    CHECK_INT(ipd_space_check_write(s), IPD_ERR_NO_SPACE);
    free_until(filler, &size, 2 * RESERVE);
    CHECK_INT(ipd_space_check_write(s), IPD_OK);
    CHECK(ipd_space_reserved(s));
    ipd_space_free(s);
    return test__failed_checks;
}

static void reserve_gate(void)
{
    int st = 0;
    REQUIRE(mkdtemp(dir));
    fflush(NULL);
    pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0)
        _exit(gate_child() ? 1 : 0);
    REQUIRE(waitpid(pid, &st, 0) == pid);
    rmdir(dir);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0); /* its checks said why */
}

TEST_MAIN(T(reserve_gate))
