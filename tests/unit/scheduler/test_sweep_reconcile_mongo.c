/*
 * test_sweep_reconcile_mongo.c - the orphan reconcile on MongoDB and GridFS
 * (the test's server, a fresh database per case): the shared cases of
 * reconcile_cases.h.
 */
#include <mongoc/mongoc.h>

#include "mongo_env.h"
#include "reconcile_cases.h"
#include "storage/mongo.h"

static struct ipd_mongo *mg;
static char uri[640];
static unsigned seq;

static void mongo_open(struct ipd_meta **m, struct ipd_blobs **b)
{
    char db[64];
    snprintf(db, sizeof(db), "itest_%s_rc%u", mongo_env_tag, seq++);
    mongo_env_uri(uri, sizeof(uri), db);
    *m = NULL;
    *b = NULL;
    IPD_ASSERT(ipd_mongo_new(uri, 10000, &mg) == IPD_OK);
    IPD_ASSERT(ipd_meta_mongo_open(mg, m) == IPD_OK);
    IPD_ASSERT(ipd_blobs_open_gridfs(mg, b) == IPD_OK);
}

static void mongo_close(struct ipd_meta *m, struct ipd_blobs *b)
{
    ipd_blobs_free(b);
    ipd_meta_free(m);
    CHECK_INT(ipd_mongo_drop_database(mg), IPD_OK);
    ipd_mongo_free(mg);
    mg = NULL;
}

/* uploadDate of fs.files {_id: id} := ms, behind the store's back. */
static void mongo_backdate(struct ipd_blobs *b, const char *id, int64_t ms)
{
    bson_error_t err;
    mongoc_uri_t *u = mongoc_uri_new_with_error(uri, &err);
    mongoc_client_t *c = u ? mongoc_client_new_from_uri(u) : NULL;
    (void)b;
    REQUIRE(c);
    mongoc_collection_t *files =
        mongoc_client_get_collection(c, mongoc_uri_get_database(u), "fs.files");
    bson_t *filter = BCON_NEW("_id", BCON_UTF8(id));
    bson_t *update =
        BCON_NEW("$set", "{", "uploadDate", BCON_DATE_TIME(ms), "}");
    bson_t reply;
    CHECK(mongoc_collection_update_one(files, filter, update, NULL, &reply,
                                       &err));
    bson_iter_t it;
    CHECK(bson_iter_init_find(&it, &reply, "matchedCount") &&
          bson_iter_as_int64(&it) == 1);
    bson_destroy(&reply);
    bson_destroy(filter);
    bson_destroy(update);
    mongoc_collection_destroy(files);
    mongoc_client_destroy(c);
    mongoc_uri_destroy(u);
}

static const struct rc_backend mongo_backend = {
    .open = mongo_open,
    .close = mongo_close,
    .backdate = mongo_backdate,
};

static void shared_cases(void)
{
    reconcile_cases_run(&mongo_backend);
}

int main(void)
{
    mongo_env_load("test_sweep_reconcile_mongo");
    static const struct test_case cases[] = {T(shared_cases)};
    return test_run(cases, sizeof(cases) / sizeof(cases[0]));
}
