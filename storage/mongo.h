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
/*
 * ipd_mongo_new with op_timeout_ms (> 0) as the bound of one operation
 * instead of 5000 (`--mongo-timeout`); the URI's own options still win.
 *
 * The breaker: when an operation finds the server unreachable (server
 * selection or a broken connection), the connection is marked down, and
 * until a background ping (every 250 ms, each bounded by op_timeout_ms)
 * gets an answer, ipd_mongo_gate fails at once instead of every request
 * waiting out the driver's timeouts on an HTTP event thread.
 */
enum ipd_err ipd_mongo_new_with(const char *uri, int64_t connect_timeout_ms,
                                int64_t op_timeout_ms, struct ipd_mongo **out);
/* IPD_ERR_UNAVAILABLE while the breaker is open, else IPD_OK.  Never
 * waits; any thread. */
enum ipd_err ipd_mongo_gate(struct ipd_mongo *mg);
void ipd_mongo_free(struct ipd_mongo *mg); /* NULL is fine */
/* IPD_OK when the server answers a ping now; IPD_ERR_UNAVAILABLE at once
 * while the breaker is open. */
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
