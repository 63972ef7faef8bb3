/*
 * nodes.h - two interpd nodes on one MongoDB database (the fixture's) and
 * its GridFS bucket, for the tests about several nodes.  Include after
 * harness.h.
 */
#ifndef IPD_ITEST_NODES_H
#define IPD_ITEST_NODES_H

#include "harness.h"

struct nodes {
    char *uri; /* the shared database */
    struct itest_server *a, *b;
};

static inline bool nodes_start(struct nodes *n)
{
    memset(n, 0, sizeof(*n));
    n->uri = itest_mongo_fixture_uri(NULL, NULL);
    if (!n->uri)
        return false;
    struct itest_opts oa = {.mongo_uri = n->uri};
    n->a = itest_start(&oa);
    if (!n->a)
        return false;
    /* The database has keys now (A's admin key): B writes no admin.key. */
    struct itest_opts ob = {.mongo_uri = n->uri, .no_admin_key = true};
    n->b = itest_start(&ob);
    return n->b != NULL;
}

/* Stop both; drop the database when no check failed since fail_mark. */
static inline void nodes_stop(struct nodes *n, int fail_mark)
{
    itest_stop(n->a);
    itest_stop(n->b);
    if (n->uri && test__failed_checks == fail_mark)
        CHECK(itest_mongo_drop(n->uri));
    else if (n->uri)
        fprintf(stderr, "keeping the shared database of %s\n", n->uri);
    free(n->uri);
}

#endif
