/*
 * test_sweep_reconcile.c - the orphan reconcile on SQLite and the local disk:
 * the shared cases (reconcile_cases.h), plus what only the local store
 * has: empty directories removed, temporary files of dead uploads.
 */
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "reconcile_cases.h"

static char dir[64];

static void local_open(struct ipd_meta **m, struct ipd_blobs **b)
{
    char path[128];
    snprintf(dir, sizeof(dir), "/tmp/ipd-reconcile-XXXXXX");
    IPD_ASSERT(mkdtemp(dir));
    snprintf(path, sizeof(path), "%s/meta.db", dir);
    IPD_ASSERT(ipd_meta_sqlite_open(path, 5000, m) == IPD_OK);
    IPD_ASSERT(ipd_blobs_open_local(dir, b) == IPD_OK);
}

static void local_close(struct ipd_meta *m, struct ipd_blobs *b)
{
    char cmd[128];
    ipd_blobs_free(b);
    ipd_meta_free(m);
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    CHECK(system(cmd) == 0);
}

/* The layout of blob_local.c: blobs/<2 chars after '_'>/<id>. */
static void blob_path(const char *id, char *out, size_t cap)
{
    snprintf(out, cap, "%s/blobs/%.2s/%s", dir, strchr(id, '_') + 1, id);
}

static void local_backdate(struct ipd_blobs *b, const char *id, int64_t ms)
{
    char path[256];
    struct timespec ts[2];
    (void)b;
    blob_path(id, path, sizeof(path));
    ts[0].tv_sec = ts[1].tv_sec = (time_t)(ms / 1000);
    ts[0].tv_nsec = ts[1].tv_nsec = (long)(ms % 1000) * 1000000L;
    CHECK_INT(utimensat(AT_FDCWD, path, ts, 0), 0);
}

static const struct rc_backend local_backend = {
    .open = local_open,
    .close = local_close,
    .backdate = local_backdate,
};

static void shared_cases(void)
{
    reconcile_cases_run(&local_backend);
}

/* Directories emptied by the reconcile go; those still holding a blob
 * stay. */
static void empty_dirs_removed(void)
{
    struct ipd_meta *m = NULL;
    struct ipd_blobs *b = NULL;
    struct ipd_reconcile_result res;
    struct ipd_reconcile_opts o = {.min_age_ms = RC_HOUR};
    char keep[IPD_ID_MAX], gone[IPD_ID_MAX], path[256];
    struct stat st;
    int64_t now = ipd_now_ms(), old = now - 2 * RC_HOUR;

    local_open(&m, &b);
    rc_file(m, b, keep, old, IPD_TIME_NEVER);
    do
        rc_blob(b, gone, 1);
    while (!strncmp(gone + 5, keep + 5, 2)); /* another directory */
    local_backdate(b, gone, old);
    CHECK_INT(ipd_reconcile(m, b, now, &o, &res), IPD_OK);
    CHECK_INT(res.orphan_blobs, 1);
    CHECK_INT(res.empty_dirs, 1);
    snprintf(path, sizeof(path), "%s/blobs/%.2s", dir, gone + 5);
    CHECK(stat(path, &st) != 0);
    blob_path(keep, path, sizeof(path));
    CHECK(stat(path, &st) == 0);
    /* A new upload into the pruned directory works. */
    char again[IPD_ID_MAX];
    rc_blob(b, again, 2);
    CHECK(rc_has_blob(b, again));
    local_close(m, b);
}

/* A temporary file left by a dead uploader (written two hours ago) goes;
 * a fresh one stays. */
static void dead_temporary_file(void)
{
    struct ipd_meta *m = NULL;
    struct ipd_blobs *b = NULL;
    struct ipd_reconcile_result res;
    char path[256], fresh[256];
    struct timespec ts[2];
    int64_t old = ipd_now_ms() - 2 * RC_HOUR;

    local_open(&m, &b);
    snprintf(path, sizeof(path), "%s/blobs/tmp/up_dead.part", dir);
    snprintf(fresh, sizeof(fresh), "%s/blobs/tmp/up_live.part", dir);
    int fd = open(path, O_CREAT | O_WRONLY, 0600);
    CHECK(fd >= 0);
    close(fd);
    fd = open(fresh, O_CREAT | O_WRONLY, 0600);
    CHECK(fd >= 0);
    close(fd);
    ts[0].tv_sec = ts[1].tv_sec = (time_t)(old / 1000);
    ts[0].tv_nsec = ts[1].tv_nsec = 0;
    CHECK_INT(utimensat(AT_FDCWD, path, ts, 0), 0);
    CHECK_INT(ipd_reconcile(m, b, ipd_now_ms(), NULL, &res), IPD_OK);
    CHECK_INT(res.incomplete, 1);
    CHECK(access(path, F_OK) != 0);
    CHECK(access(fresh, F_OK) == 0);
    local_close(m, b);
}

TEST_MAIN(T(shared_cases), T(empty_dirs_removed), T(dead_temporary_file))
