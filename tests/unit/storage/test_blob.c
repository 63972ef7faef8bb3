/*
 * test_blob.c - the local blob store: streaming writes, the size limit,
 * commit, abort, stale temporary files.
 */
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "service/crypto.h"
#include "service/util.h"
#include "storage/blob.h"
#include "test.h"

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

static void write_commit_read_delete(void)
{
    struct ipd_blobs *b = NULL;
    struct ipd_blob_writer *w = NULL;
    char hex[IPD_SHA256_HEX], id[IPD_ID_MAX], buf[16];
    int64_t size = 0, ntmp = -1;
    int fd = -1;

    fresh_dir();
    REQUIRE(ipd_blobs_open(dir, &b) == IPD_OK);
    CHECK_STR(ipd_blobs_backend(b), "local");
    CHECK_INT(ipd_blobs_ping(b), IPD_OK);
    REQUIRE(ipd_blob_writer_new(b, 100, &w) == IPD_OK);
    CHECK_INT(ipd_blob_writer_write(w, "ab", 2), IPD_OK);
    CHECK_INT(ipd_blob_writer_write(w, "c", 1), IPD_OK);
    CHECK_INT(ipd_blob_writer_size(w), 3);
    CHECK_INT(pread(ipd_blob_writer_fd(w), buf, sizeof(buf), 0), 3);
    CHECK_INT(ipd_blobs_count_tmp(b, &ntmp), IPD_OK);
    CHECK_INT(ntmp, 1);
    ipd_blob_writer_sha256(w, hex);
    CHECK_STR(hex,
              "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    ipd_id_new("file", id);
    CHECK_INT(ipd_blob_writer_commit(w, id), IPD_OK);
    CHECK_INT(ipd_blobs_count_tmp(b, &ntmp), IPD_OK);
    CHECK_INT(ntmp, 0);

    REQUIRE(ipd_blob_open(b, id, &fd, &size) == IPD_OK);
    CHECK_INT(size, 3);
    CHECK_INT(read(fd, buf, sizeof(buf)), 3);
    CHECK(memcmp(buf, "abc", 3) == 0);
    close(fd);

    /* The path comes from the id only: <2 chars>/<id>. */
    char path[256];
    struct stat st;
    snprintf(path, sizeof(path), "%s/blobs/%.2s/%s", dir, id + 5, id);
    CHECK(stat(path, &st) == 0);
    CHECK_INT(st.st_mode & 0777, 0600);

    CHECK_INT(ipd_blob_delete(b, id), IPD_OK);
    CHECK_INT(ipd_blob_delete(b, id), IPD_ERR_NOT_FOUND);
    CHECK_INT(ipd_blob_open(b, id, &fd, &size), IPD_ERR_NOT_FOUND);
    CHECK_INT(ipd_blob_open(b, "../../etc/passwd", &fd, &size),
              IPD_ERR_NOT_FOUND);
    ipd_blobs_free(b);
}

static void size_limit_and_abort(void)
{
    struct ipd_blobs *b = NULL;
    struct ipd_blob_writer *w = NULL;
    int64_t ntmp = -1;
    fresh_dir();
    REQUIRE(ipd_blobs_open(dir, &b) == IPD_OK);
    REQUIRE(ipd_blob_writer_new(b, 4, &w) == IPD_OK);
    CHECK_INT(ipd_blob_writer_write(w, "abcd", 4), IPD_OK);
    CHECK_INT(ipd_blob_writer_write(w, "e", 1), IPD_ERR_TOO_LARGE);
    CHECK_INT(ipd_blob_writer_size(w), 4);
    ipd_blob_writer_abort(w);
    CHECK_INT(ipd_blobs_count_tmp(b, &ntmp), IPD_OK);
    CHECK_INT(ntmp, 0);
    ipd_blob_writer_abort(NULL);
    ipd_blobs_free(b);
}

static void stale_tmp_removed_at_open(void)
{
    struct ipd_blobs *b = NULL, *restarted = NULL;
    struct ipd_blob_writer *w = NULL;
    int64_t ntmp = -1;
    fresh_dir();
    REQUIRE(ipd_blobs_open(dir, &b) == IPD_OK);
    REQUIRE(ipd_blob_writer_new(b, 100, &w) == IPD_OK);
    CHECK_INT(ipd_blob_writer_write(w, "x", 1), IPD_OK);
    /* A restart after a crash: the new process finds the unfinished
     * upload and removes it. */
    REQUIRE(ipd_blobs_open(dir, &restarted) == IPD_OK);
    CHECK_INT(ipd_blobs_count_tmp(restarted, &ntmp), IPD_OK);
    CHECK_INT(ntmp, 0);
    ipd_blobs_free(restarted);
    ipd_blob_writer_abort(w);
    ipd_blobs_free(b);
}

static void cleanup(void)
{
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    CHECK(system(cmd) == 0);
}

TEST_MAIN(T(write_commit_read_delete), T(size_limit_and_abort),
          T(stale_tmp_removed_at_open), T(cleanup))
