/*
 * mongo.h - the MongoDB connection shared by the MongoDB metadata store and
 * the GridFS blob store.  No mongo-c-driver type appears here; the adapters
 * (mongo.c, meta_mongo.c, blob_gridfs.c) share storage/mongo_internal.h.
 */
#ifndef IPD_MONGO_H
#define IPD_MONGO_H

#include <stdbool.h>
#include <stdint.h>

#include "../service/common/ipd.h"
#include "meta.h"

struct ipd_mongo;

/*
 * Connect to uri (database from the URI path, default "interpd") with a
 * client pool shared by all threads.  Calls mongoc_init once per process.
 * Retries the first ping until connect_timeout_ms has passed; then fails
 * with IPD_ERR_UNAVAILABLE and a log line naming the URI (credentials
 * redacted).  IPD_ERR_INVALID for a malformed URI.
 * mongoc_cleanup is never called (the driver can't be initialised again
 * after it); what mongoc_init allocates lives as long as the process.
 * Unless the URI sets them: serverSelectionTimeoutMS, connectTimeoutMS
 * and socketTimeoutMS of 5000, appname "interpd", w:majority with that
 * wtimeout, retryWrites=true.
 * *out is new; free with ipd_mongo_free (after every store using it).
 */
enum ipd_err ipd_mongo_new(const char *uri, int64_t connect_timeout_ms,
                           struct ipd_mongo **out);
void ipd_mongo_free(struct ipd_mongo *mg); /* NULL is fine */
/* IPD_OK when the server answers a ping now. */
enum ipd_err ipd_mongo_ping(struct ipd_mongo *mg);
/* The database name in use. */
const char *ipd_mongo_database(const struct ipd_mongo *mg);
/* Drop the whole database (tests only). */
enum ipd_err ipd_mongo_drop_database(struct ipd_mongo *mg);

/*
 * The MongoDB metadata store on mg (borrowed: mg must outlive it).
 * Creates its collections' indexes idempotently.  *out is new; free with
 * ipd_meta_free.
 */
enum ipd_err ipd_meta_mongo_open(struct ipd_mongo *mg, struct ipd_meta **out);

/*
 * Whether mg's database holds a store, without creating anything: its
 * api_keys collection, which ipd_meta_mongo_open creates (and `interpd
 * serve` fills with the first admin key).  The CLI refuses a database
 * without one.  [out] exists; IPD_ERR_UNAVAILABLE when MongoDB can't be
 * asked.
 */
enum ipd_err ipd_meta_mongo_exists(struct ipd_mongo *mg, bool *exists);

#endif
