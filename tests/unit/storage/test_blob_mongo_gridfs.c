/*
 * test_blob_mongo_gridfs.c - the GridFS blob store against the test's
 * MongoDB server: the shared blob conformance suite, what GridFS holds
 * after commit and abort, and the bytes named by the file id only.
 */
#include <mongoc/mongoc.h>

#include "blob_conformance.h"
#include "mongo_env.h"
#include "storage/mongo.h"

static struct ipd_mongo *connect_fresh(const char *suffix)
{
    char db[64], uri[640];
    struct ipd_mongo *mg = NULL;
    snprintf(db, sizeof(db), "itest_%s_%s", mongo_env_tag, suffix);
    mongo_env_uri(uri, sizeof(uri), db);
    CHECK_INT(ipd_mongo_new(uri, 10000, &mg), IPD_OK);
    return mg;
}

static void conformance(void)
{
    struct ipd_blobs *b = NULL;
    struct ipd_mongo *mg = connect_fresh("conf");
    REQUIRE(mg != NULL);
    REQUIRE(ipd_blobs_open_gridfs(mg, &b) == IPD_OK);
    CHECK_STR(ipd_blobs_backend(b), "gridfs");
    blob_conformance_run(b);
    ipd_blobs_free(b);
    CHECK_INT(ipd_mongo_drop_database(mg), IPD_OK);
    ipd_mongo_free(mg);
}

/* Uploading a chunk's worth and aborting leaves no chunk behind; a
 * committed file is one fs.files document with _id = the file id. */
static void abort_leaves_no_chunks(void)
{
    struct ipd_blobs *b = NULL;
    struct ipd_blob_writer *w = NULL;
    char id[IPD_ID_MAX];
    static char big[600 * 1024]; /* more than two 255 KiB chunks */
    int64_t n = -1;
    struct ipd_mongo *mg = connect_fresh("abort");
    REQUIRE(mg != NULL);
    REQUIRE(ipd_blobs_open_gridfs(mg, &b) == IPD_OK);
    memset(big, 'x', sizeof(big));
    ipd_id_new("file", id);
    REQUIRE(ipd_blob_writer_new(b, id, sizeof(big) * 2, &w) == IPD_OK);
    CHECK_INT(ipd_blob_writer_write(w, big, sizeof(big)), IPD_OK);
    CHECK_INT(ipd_blobs_count_incomplete(b, &n), IPD_OK);
    CHECK_INT(n, 1); /* chunks flushed, no fs.files yet */
    ipd_blob_writer_abort(w);
    CHECK_INT(ipd_blobs_count_incomplete(b, &n), IPD_OK);
    CHECK_INT(n, 0);
    CHECK_INT(bc_blobs(b), 0);
    ipd_blobs_free(b);
    CHECK_INT(ipd_mongo_drop_database(mg), IPD_OK);
    ipd_mongo_free(mg);
}

int main(void)
{
    mongo_env_load("test_blob_mongo_gridfs");
    static const struct test_case cases[] = {T(conformance),
                                             T(abort_leaves_no_chunks)};
    return test_run(cases, sizeof(cases) / sizeof(cases[0]));
}
