/*
 * test_blob.c - the local blob store: the shared blob conformance suite,
 * plus what is local-only (paths, modes, stale temporary files).
 */
#include <fcntl.h>
#include <pthread.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "blob_conformance.h"

static char dir[64];

static void fresh_dir(void)
{
    char cmd[128];
    if (dir[0]) {
        snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
        CHECK(system(cmd) == 0);
    }
    snprintf(dir, sizeof(dir), "/tmp/ipd-blob-XXXXXX");
    IPD_ASSERT(mkdtemp(dir));
}

static void conformance(void)
{
    struct ipd_blobs *b = NULL;
    fresh_dir();
    REQUIRE(ipd_blobs_open_local(dir, &b) == IPD_OK);
    CHECK_STR(ipd_blobs_backend(b), "local");
    blob_conformance_run(b);
    ipd_blobs_free(b);
}

static void path_and_mode_from_id(void)
{
    struct ipd_blobs *b = NULL;
    struct ipd_blob_writer *w = NULL;
    char id[IPD_ID_MAX], path[256];
    struct stat st;
    fresh_dir();
    REQUIRE(ipd_blobs_open_local(dir, &b) == IPD_OK);
    ipd_id_new("file", id);
    REQUIRE(ipd_blob_writer_new(b, id, 10, &w) == IPD_OK);
    CHECK_INT(ipd_blob_writer_write(w, "x", 1), IPD_OK);
    CHECK_INT(ipd_blob_writer_commit(w), IPD_OK);
    /* The path comes from the id only: <2 chars>/<id>, mode 0600. */
    snprintf(path, sizeof(path), "%s/blobs/%.2s/%s", dir, id + 5, id);
    CHECK(stat(path, &st) == 0);
    CHECK_INT(st.st_mode & 0777, 0600);
    ipd_blobs_free(b);
}

static void stale_tmp_removed_at_open(void)
{
    struct ipd_blobs *b = NULL, *restarted = NULL;
    struct ipd_blob_writer *w = NULL;
    char id[IPD_ID_MAX];
    int64_t n = -1;
    int status;
    fresh_dir();
    /* A process that dies in the middle of an upload. */
    pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
        struct ipd_blobs *cb = NULL;
        struct ipd_blob_writer *cw = NULL;
        if (ipd_blobs_open_local(dir, &cb) ||
            ipd_blob_writer_new(cb, "x", 100, &cw) ||
            ipd_blob_writer_write(cw, "x", 1))
            _exit(1);
        _exit(0);
    }
    REQUIRE(waitpid(pid, &status, 0) == pid);
    REQUIRE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    REQUIRE(ipd_blobs_open_local(dir, &b) == IPD_OK);
    CHECK_INT(ipd_blobs_count_incomplete(b, &n), IPD_OK);
    CHECK_INT(n, 0);

    /* A live upload survives another process opening the store (`interpd
     * cleanup` from cron), and commits.  Regression: opening the store
     * removed every temporary file. */
    ipd_id_new("file", id);
    REQUIRE(ipd_blob_writer_new(b, id, 100, &w) == IPD_OK);
    CHECK_INT(ipd_blob_writer_write(w, "x", 1), IPD_OK);
    REQUIRE(ipd_blobs_open_local(dir, &restarted) == IPD_OK);
    CHECK_INT(ipd_blobs_count_incomplete(restarted, &n), IPD_OK);
    CHECK_INT(n, 1);
    ipd_blobs_free(restarted);
    CHECK_INT(ipd_blob_writer_commit(w), IPD_OK);
    CHECK_INT(ipd_blob_stat(b, id, &(struct ipd_blob_info){0}), IPD_OK);
    CHECK_INT(ipd_blob_delete(b, id), IPD_OK);
    ipd_blobs_free(b);
}

/* Empty directories go; a directory holding a blob stays. */
static void prune_removes_empty_dirs(void)
{
    struct ipd_blobs *b = NULL;
    char a[IPD_ID_MAX], keep[IPD_ID_MAX], path[256];
    struct stat st;
    int64_t removed = -1;
    fresh_dir();
    REQUIRE(ipd_blobs_open_local(dir, &b) == IPD_OK);
    bc_put(b, keep, 1, 'k');
    do
        bc_put(b, a, 1, 'a');
    while (!strncmp(a + 5, keep + 5, 2)); /* another directory */
    CHECK_INT(ipd_blob_delete(b, a), IPD_OK);
    CHECK_INT(ipd_blobs_prune_dirs(b, &removed), IPD_OK);
    CHECK_INT(removed, 1);
    snprintf(path, sizeof(path), "%s/blobs/%.2s", dir, a + 5);
    CHECK(stat(path, &st) != 0);
    snprintf(path, sizeof(path), "%s/blobs/%.2s/%s", dir, keep + 5, keep);
    CHECK(stat(path, &st) == 0);
    snprintf(path, sizeof(path), "%s/blobs/tmp", dir);
    CHECK(stat(path, &st) == 0 && S_ISDIR(st.st_mode));
    CHECK_INT(ipd_blobs_prune_dirs(b, &removed), IPD_OK);
    CHECK_INT(removed, 0);
    ipd_blobs_free(b);
}

struct pruner {
    struct ipd_blobs *b;
    volatile int done;
    long prunes;
};

static void *prune_loop(void *arg)
{
    struct pruner *p = arg;
    int64_t n;
    while (!__atomic_load_n(&p->done, __ATOMIC_ACQUIRE)) {
        CHECK_INT(ipd_blobs_prune_dirs(p->b, &n), IPD_OK);
        p->prunes++;
    }
    return NULL;
}

/* Commits racing a pruner that removes every empty directory as fast as
 * it can: every commit lands.  (Regression: with four mkdir-and-rename
 * retries instead of the shard lock, a loaded CI machine lost a commit
 * to ENOENT.) */
static void commit_races_prune(void)
{
    struct ipd_blobs *b = NULL;
    struct pruner p = {0};
    pthread_t t;
    char id[IPD_ID_MAX];
    fresh_dir();
    REQUIRE(ipd_blobs_open_local(dir, &b) == IPD_OK);
    p.b = b;
    REQUIRE(pthread_create(&t, NULL, prune_loop, &p) == 0);
    for (int i = 0; i < 400; i++) {
        struct ipd_blob_writer *w = NULL;
        ipd_id_new("file", id);
        REQUIRE(ipd_blob_writer_new(b, id, 10, &w) == IPD_OK);
        CHECK_INT(ipd_blob_writer_write(w, "x", 1), IPD_OK);
        CHECK_INT(ipd_blob_writer_commit(w), IPD_OK);
        CHECK_INT(ipd_blob_delete(b, id), IPD_OK);
    }
    __atomic_store_n(&p.done, 1, __ATOMIC_RELEASE);
    pthread_join(t, NULL);
    CHECK(p.prunes > 0);
    ipd_blobs_free(b);
}

static void missing_dir_fails(void)
{
    struct ipd_blobs *b = NULL;
    CHECK_INT(ipd_blobs_open_local("/nonexistent/ipd", &b), IPD_ERR_IO);
    CHECK(b == NULL);
}

static void cleanup(void)
{
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    CHECK(system(cmd) == 0);
}

TEST_MAIN(T(conformance), T(path_and_mode_from_id),
          T(stale_tmp_removed_at_open), T(prune_removes_empty_dirs),
          T(commit_races_prune), T(missing_dir_fails), T(cleanup))
