/*
 * test_blob.c - the local blob store: the shared blob conformance suite,
 * plus what is local-only (paths, modes, stale temporary files).
 */
#include <fcntl.h>
#include <sys/stat.h>
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
    fresh_dir();
    REQUIRE(ipd_blobs_open_local(dir, &b) == IPD_OK);
    ipd_id_new("file", id);
    REQUIRE(ipd_blob_writer_new(b, id, 100, &w) == IPD_OK);
    CHECK_INT(ipd_blob_writer_write(w, "x", 1), IPD_OK);
    /* A restart after a crash: the new process finds the unfinished
     * upload and removes it. */
    REQUIRE(ipd_blobs_open_local(dir, &restarted) == IPD_OK);
    CHECK_INT(ipd_blobs_count_incomplete(restarted, &n), IPD_OK);
    CHECK_INT(n, 0);
    ipd_blobs_free(restarted);
    ipd_blob_writer_abort(w);
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
          T(stale_tmp_removed_at_open), T(missing_dir_fails), T(cleanup))
