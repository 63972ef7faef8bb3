/*
 * mongo_internal.h - what the mongo-c-driver adapters share (mongo.c,
 * meta_mongo.c, blob_gridfs.c).  Include only from those files.
 */
#ifndef IPD_MONGO_INTERNAL_H
#define IPD_MONGO_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>

#include <mongoc/mongoc.h>

#include "mongo.h"

struct ipd_mongo {
    mongoc_uri_t *uri;
    mongoc_client_pool_t *pool;
    char *db;              /* database name */
    char *redacted;        /* the URI for log lines, password hidden */
    int64_t op_timeout_ms; /* socket/server-selection bound per operation */

    /* The breaker (mongo.c): set when an operation found the server
     * unreachable; while set, gated operations fail at once and the
     * monitor thread pings until the server answers. */
    atomic_bool down;
    pthread_mutex_t brk_lock; /* guards stop; with brk_cond */
    pthread_cond_t brk_cond;  /* wakes the monitor: tripped or stopping */
    pthread_t monitor;
    bool monitor_started, stop;
};

/* A client from the pool (blocks while all are in use); give it back with
 * ipd__mongo_push.  Never NULL. */
mongoc_client_t *ipd__mongo_pop(struct ipd_mongo *mg);
void ipd__mongo_push(struct ipd_mongo *mg, mongoc_client_t *c);

/* Map a driver or server error: server selection and stream errors to
 * IPD_ERR_UNAVAILABLE (and trip the breaker of the connection whose
 * client this thread holds: ipd__mongo_pop), duplicate key (11000) to
 * IPD_ERR_CONFLICT, timeouts to IPD_ERR_UNAVAILABLE, a full disk
 * (OutOfDiskSpace) to IPD_ERR_NO_SPACE, the rest to IPD_ERR_INTERNAL (and
 * log it with what). */
enum ipd_err ipd__mongo_err(const bson_error_t *e, const char *what);

#endif
