/*
 * meta_conformance.h - the behaviour every meta.h backend must show.
 *
 * Backend-agnostic: it speaks only the ipd_meta_* API.  A backend's test
 * program includes this header once and calls
 *
 *     meta_conformance_run(open_store);
 *
 * from a test function, where open_store() returns a new, empty store
 * (owned by the suite, which frees it with ipd_meta_free) or NULL on
 * failure.  Each check prints "ok   conformance/<name>" or "FAIL ..." and
 * failures count in test.h's totals.
 *
 * Times are fixed (MC_NOW), not the wall clock, so results never depend
 * on when or how fast the suite runs.  The concurrency checks need a
 * store whose busy timeout comfortably covers 8 threads queueing (a few
 * seconds).
 */
#ifndef IPD_META_CONFORMANCE_H
#define IPD_META_CONFORMANCE_H

/* System headers and test.h before meta.h: ipd.h ends with banned.h. */
#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test.h"

#include "storage/meta.h"

#define MC_NOW INT64_C(1800000000000)
#define MC_HOUR INT64_C(3600000)

static struct ipd_meta *(*mc__open_store)(void);

/* A new empty store from the backend's factory; NULL fails the check. */
static struct ipd_meta *mc_open(void)
{
    struct ipd_meta *m = mc__open_store();
    CHECK(m != NULL);
    return m;
}

/* A deterministic id "<prefix>_" + 26 letters from a..p: n in base 16,
 * zero-padded with 'a', so ids compare (strcmp) in the order of n. */
static void mc_id(char out[IPD_ID_MAX], const char *prefix, unsigned n)
{
    char tail[IPD_ID_RANDOM_CHARS + 1];
    for (int i = IPD_ID_RANDOM_CHARS - 1; i >= 0; i--) {
        tail[i] = (char)('a' + (n & 15u));
        n >>= 4;
    }
    tail[IPD_ID_RANDOM_CHARS] = '\0';
    snprintf(out, IPD_ID_MAX, "%s_%s", prefix, tail);
}

/* A complete file record, id from n. */
static struct ipd_file_meta mc_file(const char *tenant, const char *user,
                                    unsigned n, int64_t created,
                                    int64_t expires, int64_t size)
{
    struct ipd_file_meta f;
    memset(&f, 0, sizeof(f));
    mc_id(f.file_id, "file", n);
    snprintf(f.tenant, sizeof(f.tenant), "%s", tenant);
    snprintf(f.user_id, sizeof(f.user_id), "%s", user);
    snprintf(f.filename, sizeof(f.filename), "data-%u.csv", n);
    f.size = size;
    snprintf(f.mime_type, sizeof(f.mime_type), "text/csv");
    snprintf(f.file_type, sizeof(f.file_type), "csv");
    ipd_sha256_hex(f.filename, strlen(f.filename), f.sha256);
    snprintf(f.source, sizeof(f.source), "upload");
    snprintf(f.blob, sizeof(f.blob), "local");
    f.created_at_ms = created;
    f.expires_at_ms = expires;
    return f;
}

static struct ipd_key mc_key(unsigned n, const char *tenant, bool admin,
                             int64_t created)
{
    struct ipd_key k;
    char plain[32];
    memset(&k, 0, sizeof(k));
    mc_id(k.key_id, "key", n);
    snprintf(k.tenant, sizeof(k.tenant), "%s", tenant);
    snprintf(plain, sizeof(plain), "plain-key-%u", n);
    ipd_sha256_hex(plain, strlen(plain), k.hash);
    snprintf(plain, sizeof(plain), "secret-%u", n);
    ipd_sha256_hex(plain, strlen(plain), k.secret);
    k.admin = admin;
    k.created_at_ms = created;
    /* Every other key names its policy; the rest get the default. */
    if (n % 2)
        snprintf(k.policy, sizeof(k.policy), "strict");
    return k;
}

static void mc_check_file_eq(const struct ipd_file_meta *a,
                             const struct ipd_file_meta *b)
{
    CHECK_STR(a->file_id, b->file_id);
    CHECK_STR(a->tenant, b->tenant);
    CHECK_STR(a->user_id, b->user_id);
    CHECK_STR(a->filename, b->filename);
    CHECK_INT(a->size, b->size);
    CHECK_STR(a->mime_type, b->mime_type);
    CHECK_STR(a->file_type, b->file_type);
    CHECK_STR(a->sha256, b->sha256);
    CHECK_STR(a->source, b->source);
    CHECK_STR(a->blob, b->blob);
    CHECK_INT(a->created_at_ms, b->created_at_ms);
    CHECK_INT(a->expires_at_ms, b->expires_at_ms);
}

static void mc_check_key_eq(const struct ipd_key *a, const struct ipd_key *b)
{
    CHECK_STR(a->key_id, b->key_id);
    CHECK_STR(a->tenant, b->tenant);
    CHECK_STR(a->hash, b->hash);
    CHECK_INT(a->admin, b->admin);
    CHECK_INT(a->created_at_ms, b->created_at_ms);
    CHECK_INT(a->revoked_at_ms, b->revoked_at_ms);
    CHECK_STR(a->secret, b->secret);
    CHECK_STR(a->policy, b->policy[0] ? b->policy : "standard");
    CHECK_STR(a->prev_secret, b->prev_secret);
    CHECK_INT(a->secret_rotated_at_ms, b->secret_rotated_at_ms);
}

/* After a backend-specific test has corrupted the stored file file_id of
 * (t, u) and a key with hash "h": reads of them fail with
 * IPD_ERR_INTERNAL and leave no half-filled list; the store still works. */
static void mc_check_corrupt(struct ipd_meta *m, const char *file_id)
{
    struct ipd_file_meta got;
    struct ipd_file_list l = {0};
    struct ipd_key_list kl = {0};
    struct ipd_key k;
    CHECK_INT(ipd_meta_file_get(m, "t", "u", file_id, MC_NOW, &got),
              IPD_ERR_INTERNAL);
    CHECK_INT(ipd_meta_file_list(m, "t", "u", MC_NOW, NULL, 10, &l),
              IPD_ERR_INTERNAL);
    CHECK_INT(l.n, 0);
    CHECK(l.items == NULL);
    CHECK_INT(ipd_meta_key_find_by_hash(m, "h", &k), IPD_ERR_INTERNAL);
    CHECK_INT(ipd_meta_key_list(m, &kl), IPD_ERR_INTERNAL);
    CHECK(kl.items == NULL);
    CHECK_INT(ipd_meta_file_delete_by_id(m, file_id), IPD_OK);
    CHECK_INT(ipd_meta_ping(m), IPD_OK);
}

/* Insert without quota; the check fails on anything but IPD_OK. */
static void mc_put(struct ipd_meta *m, const struct ipd_file_meta *f)
{
    CHECK_INT(ipd_meta_file_insert(m, f, NULL, MC_NOW), IPD_OK);
}

/* Page through a scope with the given page size and return how many
 * files were seen; each page but the last must be full and flagged
 * `more`, and the whole walk must be strictly newest first. */
static size_t mc_walk(struct ipd_meta *m, const char *tenant, const char *user,
                      int64_t now, size_t page)
{
    struct ipd_cursor cur;
    bool have_cur = false;
    size_t total = 0;

    for (int pages = 0;; pages++) {
        struct ipd_file_list l = {0};
        enum ipd_err rc = ipd_meta_file_list(m, tenant, user, now,
                                             have_cur ? &cur : NULL, page, &l);
        CHECK_INT(rc, IPD_OK);
        if (rc)
            return total;
        CHECK(l.n <= page);
        if (l.more)
            CHECK_INT(l.n, page);
        for (size_t i = 0; i < l.n; i++) {
            const struct ipd_file_meta *f = &l.items[i];
            if (have_cur) {
                bool older = f->created_at_ms < cur.created_at_ms ||
                             (f->created_at_ms == cur.created_at_ms &&
                              strcmp(f->file_id, cur.id) < 0);
                CHECK(older);
            }
            cur.created_at_ms = f->created_at_ms;
            snprintf(cur.id, sizeof(cur.id), "%s", f->file_id);
            have_cur = true;
        }
        total += l.n;
        bool more = l.more;
        ipd_file_list_release(&l);
        if (!more)
            return total;
        /* A cursor that never advances would loop forever. */
        CHECK(pages < 10000);
        if (pages >= 10000)
            return total;
    }
}

static void mc_ping(void)
{
    struct ipd_meta *m = mc_open();
    REQUIRE(m);
    CHECK_INT(ipd_meta_ping(m), IPD_OK);
    CHECK(ipd_meta_backend(m) != NULL);
    ipd_meta_free(m);
}

static void mc_roundtrip(void)
{
    struct ipd_meta *m = mc_open();
    REQUIRE(m);
    struct ipd_file_meta f, got;

    /* Every field at its longest, and text that would break string-built
     * SQL or a naive encoding. */
    f = mc_file("t", "u", 1, MC_NOW - 5, MC_NOW + MC_HOUR, 123456789012);
    memset(f.tenant, 'T', IPD_TENANT_MAX - 1);
    f.tenant[IPD_TENANT_MAX - 1] = '\0';
    memset(f.user_id, 'U', IPD_USER_ID_MAX - 1);
    f.user_id[IPD_USER_ID_MAX - 1] = '\0';
    memset(f.filename, 'n', IPD_FILENAME_MAX - 1);
    f.filename[IPD_FILENAME_MAX - 1] = '\0';
    memset(f.mime_type, 'm', IPD_MIME_MAX - 1);
    f.mime_type[IPD_MIME_MAX - 1] = '\0';
    memset(f.file_type, 'y', IPD_FILE_TYPE_MAX - 1);
    f.file_type[IPD_FILE_TYPE_MAX - 1] = '\0';
    snprintf(f.source, sizeof(f.source), "generated");
    memset(f.blob, 'b', IPD_BLOB_MAX - 1);
    f.blob[IPD_BLOB_MAX - 1] = '\0';
    mc_put(m, &f);
    struct ipd_file_meta first = f;
    memset(&got, 0x5a, sizeof(got));
    CHECK_INT(
        ipd_meta_file_get(m, f.tenant, f.user_id, f.file_id, MC_NOW, &got),
        IPD_OK);
    mc_check_file_eq(&got, &f);

    f = mc_file("t", "u", 2, MC_NOW, IPD_TIME_NEVER, 0);
    snprintf(f.filename, sizeof(f.filename),
             "x'); DROP TABLE files; -- \"%%s\" \xc3\xa9t\xc3\xa9.csv");
    snprintf(f.source, sizeof(f.source), "url");
    mc_put(m, &f);
    memset(&got, 0, sizeof(got));
    CHECK_INT(ipd_meta_file_get(m, "t", "u", f.file_id, MC_NOW, &got), IPD_OK);
    mc_check_file_eq(&got, &f);
    CHECK_INT(got.expires_at_ms, IPD_TIME_NEVER);

    /* The first record survived the hostile filename. */
    memset(&got, 0, sizeof(got));
    CHECK_INT(ipd_meta_file_get(m, first.tenant, first.user_id, first.file_id,
                                MC_NOW, &got),
              IPD_OK);
    mc_check_file_eq(&got, &first);
    int64_t count = -1, bytes = -1;
    CHECK_INT(ipd_meta_file_totals(m, MC_NOW, &count, &bytes), IPD_OK);
    CHECK_INT(count, 2);
    CHECK_INT(bytes, 123456789012);
    ipd_meta_free(m);
}

static void mc_scoping(void)
{
    struct ipd_meta *m = mc_open();
    REQUIRE(m);
    struct ipd_file_meta f =
        mc_file("acme", "alice", 1, MC_NOW, MC_NOW + MC_HOUR, 10);
    struct ipd_file_meta got;
    struct ipd_file_list l = {0};
    int64_t count = -1, bytes = -1;

    mc_put(m, &f);
    CHECK_INT(ipd_meta_file_get(m, "acme", "bob", f.file_id, MC_NOW, &got),
              IPD_ERR_NOT_FOUND);
    CHECK_INT(ipd_meta_file_get(m, "other", "alice", f.file_id, MC_NOW, &got),
              IPD_ERR_NOT_FOUND);
    CHECK_INT(
        ipd_meta_file_get(m, "acme", "alice", "file_nonexistent", MC_NOW, &got),
        IPD_ERR_NOT_FOUND);
    /* Prefixes and case are different scopes, not near matches. */
    CHECK_INT(ipd_meta_file_get(m, "acme", "Alice", f.file_id, MC_NOW, &got),
              IPD_ERR_NOT_FOUND);
    CHECK_INT(ipd_meta_file_get(m, "acm", "alice", f.file_id, MC_NOW, &got),
              IPD_ERR_NOT_FOUND);

    CHECK_INT(ipd_meta_file_list(m, "acme", "bob", MC_NOW, NULL, 10, &l),
              IPD_OK);
    CHECK_INT(l.n, 0);
    CHECK(!l.more);
    ipd_file_list_release(&l);
    CHECK_INT(ipd_meta_file_list(m, "other", "alice", MC_NOW, NULL, 10, &l),
              IPD_OK);
    CHECK_INT(l.n, 0);
    ipd_file_list_release(&l);

    CHECK_INT(ipd_meta_file_usage(m, "acme", "bob", MC_NOW, &count, &bytes),
              IPD_OK);
    CHECK_INT(count, 0);
    CHECK_INT(bytes, 0);

    CHECK_INT(ipd_meta_file_delete(m, "acme", "bob", f.file_id, MC_NOW, &got),
              IPD_ERR_NOT_FOUND);
    CHECK_INT(
        ipd_meta_file_delete(m, "other", "alice", f.file_id, MC_NOW, NULL),
        IPD_ERR_NOT_FOUND);
    /* Still there for its owner. */
    CHECK_INT(ipd_meta_file_get(m, "acme", "alice", f.file_id, MC_NOW, &got),
              IPD_OK);
    CHECK_INT(ipd_meta_file_list(m, "acme", "alice", MC_NOW, NULL, 10, &l),
              IPD_OK);
    CHECK_INT(l.n, 1);
    ipd_file_list_release(&l);
    ipd_meta_free(m);
}

static void mc_expiry(void)
{
    struct ipd_meta *m = mc_open();
    REQUIRE(m);
    /* 1: expired a millisecond ago; 2: expires exactly now (expired);
     * 3: a millisecond left; 4: never. */
    struct ipd_file_meta f1 = mc_file("t", "u", 1, MC_NOW - 10, MC_NOW - 1, 1);
    struct ipd_file_meta f2 = mc_file("t", "u", 2, MC_NOW - 9, MC_NOW, 2);
    struct ipd_file_meta f3 = mc_file("t", "u", 3, MC_NOW - 8, MC_NOW + 1, 4);
    struct ipd_file_meta f4 =
        mc_file("t", "u", 4, MC_NOW - 7, IPD_TIME_NEVER, 8);
    struct ipd_file_meta got;
    struct ipd_file_list l = {0};
    int64_t count = -1, bytes = -1;

    mc_put(m, &f1);
    mc_put(m, &f2);
    mc_put(m, &f3);
    mc_put(m, &f4);

    CHECK_INT(ipd_meta_file_get(m, "t", "u", f1.file_id, MC_NOW, &got),
              IPD_ERR_NOT_FOUND);
    CHECK_INT(ipd_meta_file_get(m, "t", "u", f2.file_id, MC_NOW, &got),
              IPD_ERR_NOT_FOUND);
    CHECK_INT(ipd_meta_file_get(m, "t", "u", f3.file_id, MC_NOW, &got), IPD_OK);
    CHECK_INT(ipd_meta_file_get(m, "t", "u", f4.file_id, MC_NOW, &got), IPD_OK);
    /* Earlier, f1 was still alive. */
    CHECK_INT(ipd_meta_file_get(m, "t", "u", f1.file_id, MC_NOW - 2, &got),
              IPD_OK);
    /* Never means never, even at the end of time. */
    CHECK_INT(ipd_meta_file_get(m, "t", "u", f4.file_id, INT64_MAX - 1, &got),
              IPD_OK);

    CHECK_INT(ipd_meta_file_list(m, "t", "u", MC_NOW, NULL, 10, &l), IPD_OK);
    REQUIRE(l.n == 2);
    CHECK_STR(l.items[0].file_id, f4.file_id);
    CHECK_STR(l.items[1].file_id, f3.file_id);
    CHECK(!l.more);
    ipd_file_list_release(&l);

    CHECK_INT(ipd_meta_file_usage(m, "t", "u", MC_NOW, &count, &bytes), IPD_OK);
    CHECK_INT(count, 2);
    CHECK_INT(bytes, 12);
    CHECK_INT(ipd_meta_file_totals(m, MC_NOW, &count, &bytes), IPD_OK);
    CHECK_INT(count, 2);
    CHECK_INT(bytes, 12);

    CHECK_INT(ipd_meta_file_delete(m, "t", "u", f1.file_id, MC_NOW, &got),
              IPD_ERR_NOT_FOUND);

    /* The sweep sees exactly the expired ones, oldest expiry first; the
     * refused delete above did not remove f1. */
    CHECK_INT(ipd_meta_file_list_expired(m, MC_NOW, 10, &l), IPD_OK);
    REQUIRE(l.n == 2);
    mc_check_file_eq(&l.items[0], &f1);
    mc_check_file_eq(&l.items[1], &f2);
    ipd_file_list_release(&l);

    /* At the end of time everything but the never-expiring file is due. */
    CHECK_INT(ipd_meta_file_list_expired(m, INT64_MAX, 10, &l), IPD_OK);
    CHECK_INT(l.n, 3);
    for (size_t i = 0; i < l.n; i++)
        CHECK(strcmp(l.items[i].file_id, f4.file_id) != 0);
    ipd_file_list_release(&l);

    /* Before anything expired the sweep is empty. */
    CHECK_INT(ipd_meta_file_list_expired(m, MC_NOW - 100, 10, &l), IPD_OK);
    CHECK_INT(l.n, 0);
    ipd_file_list_release(&l);
    ipd_meta_free(m);
}

static void mc_list_expired_limit(void)
{
    struct ipd_meta *m = mc_open();
    REQUIRE(m);
    struct ipd_file_list l = {0};

    /* Expiry order is not insertion order, and scopes mix. */
    static const int64_t ago[5] = {30, 10, 50, 20, 40};
    for (unsigned i = 0; i < 5; i++) {
        struct ipd_file_meta f = mc_file(i % 2 ? "t1" : "t2", i % 3 ? "a" : "b",
                                         i, MC_NOW - 1000, MC_NOW - ago[i], 1);
        mc_put(m, &f);
    }
    CHECK_INT(ipd_meta_file_list_expired(m, MC_NOW, 2, &l), IPD_OK);
    REQUIRE(l.n == 2);
    CHECK_INT(l.items[0].expires_at_ms, MC_NOW - 50);
    CHECK_INT(l.items[1].expires_at_ms, MC_NOW - 40);
    ipd_file_list_release(&l);
    CHECK_INT(ipd_meta_file_list_expired(m, MC_NOW, 100, &l), IPD_OK);
    REQUIRE(l.n == 5);
    for (size_t i = 1; i < l.n; i++)
        CHECK(l.items[i - 1].expires_at_ms <= l.items[i].expires_at_ms);
    ipd_file_list_release(&l);
    ipd_meta_free(m);
}

static void mc_list_order(void)
{
    struct ipd_meta *m = mc_open();
    REQUIRE(m);
    struct ipd_file_list l = {0};

    /* Inserted out of order; 2, 3 and 4 share a creation time, so file_id
     * (descending) decides among them. */
    struct ipd_file_meta f[5] = {
        mc_file("t", "u", 3, MC_NOW - 200, IPD_TIME_NEVER, 1),
        mc_file("t", "u", 0, MC_NOW - 300, IPD_TIME_NEVER, 1),
        mc_file("t", "u", 4, MC_NOW - 200, IPD_TIME_NEVER, 1),
        mc_file("t", "u", 1, MC_NOW - 100, IPD_TIME_NEVER, 1),
        mc_file("t", "u", 2, MC_NOW - 200, IPD_TIME_NEVER, 1),
    };
    for (size_t i = 0; i < 5; i++)
        mc_put(m, &f[i]);
    char want[5][IPD_ID_MAX];
    mc_id(want[0], "file", 1);
    mc_id(want[1], "file", 4);
    mc_id(want[2], "file", 3);
    mc_id(want[3], "file", 2);
    mc_id(want[4], "file", 0);

    CHECK_INT(ipd_meta_file_list(m, "t", "u", MC_NOW, NULL, 10, &l), IPD_OK);
    REQUIRE(l.n == 5);
    for (size_t i = 0; i < 5; i++)
        CHECK_STR(l.items[i].file_id, want[i]);
    CHECK(!l.more);
    ipd_file_list_release(&l);

    /* A page that ends inside the tie continues inside it. */
    CHECK_INT(ipd_meta_file_list(m, "t", "u", MC_NOW, NULL, 2, &l), IPD_OK);
    REQUIRE(l.n == 2);
    CHECK(l.more);
    struct ipd_cursor cur = {.created_at_ms = l.items[1].created_at_ms};
    snprintf(cur.id, sizeof(cur.id), "%s", l.items[1].file_id);
    ipd_file_list_release(&l);
    CHECK_INT(ipd_meta_file_list(m, "t", "u", MC_NOW, &cur, 2, &l), IPD_OK);
    REQUIRE(l.n == 2);
    CHECK_STR(l.items[0].file_id, want[2]);
    CHECK_STR(l.items[1].file_id, want[3]);
    CHECK(l.more);
    ipd_file_list_release(&l);

    /* Exactly limit rows left: no further page. */
    CHECK_INT(ipd_meta_file_list(m, "t", "u", MC_NOW, NULL, 5, &l), IPD_OK);
    CHECK_INT(l.n, 5);
    CHECK(!l.more);
    ipd_file_list_release(&l);
    ipd_meta_free(m);
}

static void mc_paging(void)
{
    struct ipd_meta *m = mc_open();
    REQUIRE(m);
    struct ipd_cursor cur;
    bool seen[25] = {false};
    size_t pages = 0, total = 0;

    /* Creation times in groups of three (ties across page edges),
     * inserted in a scrambled order.  Newest first is then 24, 23, ..., 0. */
    for (unsigned k = 0; k < 25; k++) {
        unsigned i = (k * 7) % 25;
        struct ipd_file_meta f =
            mc_file("t", "u", i, MC_NOW - 1000 + i / 3, MC_NOW + MC_HOUR, i);
        mc_put(m, &f);
    }
    /* Another user's files must not show up in the pages. */
    for (unsigned i = 100; i < 105; i++) {
        struct ipd_file_meta f =
            mc_file("t", "v", i, MC_NOW - 999, MC_NOW + MC_HOUR, 1);
        mc_put(m, &f);
    }
    static const size_t want_n[3] = {10, 10, 5};
    for (;;) {
        struct ipd_file_list l = {0};
        CHECK_INT(ipd_meta_file_list(m, "t", "u", MC_NOW, pages ? &cur : NULL,
                                     10, &l),
                  IPD_OK);
        REQUIRE(pages < 3);
        CHECK_INT(l.n, want_n[pages]);
        CHECK_INT(l.more, pages < 2);
        for (size_t j = 0; j < l.n; j++) {
            char want[IPD_ID_MAX];
            unsigned i = 24 - (unsigned)(total + j);
            mc_id(want, "file", i);
            CHECK_STR(l.items[j].file_id, want);
            CHECK_INT(l.items[j].size, (int64_t)i);
            if (i < 25) {
                CHECK(!seen[i]);
                seen[i] = true;
            }
        }
        total += l.n;
        pages++;
        bool more = l.more;
        size_t n = l.n;
        if (n) {
            cur.created_at_ms = l.items[n - 1].created_at_ms;
            snprintf(cur.id, sizeof(cur.id), "%s", l.items[n - 1].file_id);
        }
        ipd_file_list_release(&l);
        if (!more || !n)
            break;
    }
    CHECK_INT(pages, 3);
    CHECK_INT(total, 25);
    for (size_t i = 0; i < 25; i++)
        CHECK(seen[i]);
    CHECK_INT(mc_walk(m, "t", "u", MC_NOW, 1), 25);
    CHECK_INT(mc_walk(m, "t", "u", MC_NOW, 7), 25);
    CHECK_INT(mc_walk(m, "t", "u", MC_NOW, 25), 25);
    CHECK_INT(mc_walk(m, "t", "u", MC_NOW, 1000), 25);
    ipd_meta_free(m);
}

static void mc_cursor_stable(void)
{
    struct ipd_meta *m = mc_open();
    REQUIRE(m);
    struct ipd_file_list l = {0};
    struct ipd_cursor cur;
    char want[IPD_ID_MAX];

    for (unsigned i = 1; i <= 5; i++) {
        struct ipd_file_meta f =
            mc_file("t", "u", i, MC_NOW - 100 + i, IPD_TIME_NEVER, 1);
        mc_put(m, &f);
    }
    CHECK_INT(ipd_meta_file_list(m, "t", "u", MC_NOW, NULL, 2, &l), IPD_OK);
    REQUIRE(l.n == 2);
    CHECK(l.more);
    cur.created_at_ms = l.items[1].created_at_ms;
    snprintf(cur.id, sizeof(cur.id), "%s", l.items[1].file_id);
    mc_id(want, "file", 4);
    CHECK_STR(cur.id, want);
    ipd_file_list_release(&l);

    /* Between pages: a newer upload arrives and the cursor's own record
     * is deleted.  Neither moves the next page. */
    struct ipd_file_meta newer =
        mc_file("t", "u", 6, MC_NOW - 1, IPD_TIME_NEVER, 1);
    mc_put(m, &newer);
    CHECK_INT(ipd_meta_file_delete(m, "t", "u", want, MC_NOW, NULL), IPD_OK);

    CHECK_INT(ipd_meta_file_list(m, "t", "u", MC_NOW, &cur, 2, &l), IPD_OK);
    REQUIRE(l.n == 2);
    mc_id(want, "file", 3);
    CHECK_STR(l.items[0].file_id, want);
    mc_id(want, "file", 2);
    CHECK_STR(l.items[1].file_id, want);
    CHECK(l.more);
    cur.created_at_ms = l.items[1].created_at_ms;
    snprintf(cur.id, sizeof(cur.id), "%s", l.items[1].file_id);
    ipd_file_list_release(&l);

    CHECK_INT(ipd_meta_file_list(m, "t", "u", MC_NOW, &cur, 2, &l), IPD_OK);
    REQUIRE(l.n == 1);
    mc_id(want, "file", 1);
    CHECK_STR(l.items[0].file_id, want);
    CHECK(!l.more);
    ipd_file_list_release(&l);

    /* A cursor past the oldest record: an empty last page. */
    cur.created_at_ms = 0;
    CHECK_INT(ipd_meta_file_list(m, "t", "u", MC_NOW, &cur, 2, &l), IPD_OK);
    CHECK_INT(l.n, 0);
    CHECK(!l.more);
    ipd_file_list_release(&l);
    ipd_meta_free(m);
}

static void mc_quota(void)
{
    struct ipd_meta *m = mc_open();
    REQUIRE(m);
    int64_t count = -1, bytes = -1;
    unsigned n = 0;

    /* Count: 3 files.  Expired files don't count against it. */
    struct ipd_quota q = {.max_files = 3, .max_bytes = -1};
    for (int i = 0; i < 5; i++) {
        struct ipd_file_meta f =
            mc_file("t", "count", n++, MC_NOW - 50, MC_NOW - 1, 1000);
        mc_put(m, &f);
    }
    for (int i = 0; i < 3; i++) {
        struct ipd_file_meta f =
            mc_file("t", "count", n++, MC_NOW, MC_NOW + MC_HOUR, 1000);
        CHECK_INT(ipd_meta_file_insert(m, &f, &q, MC_NOW), IPD_OK);
    }
    struct ipd_file_meta over =
        mc_file("t", "count", n++, MC_NOW, MC_NOW + MC_HOUR, 0);
    CHECK_INT(ipd_meta_file_insert(m, &over, &q, MC_NOW), IPD_ERR_QUOTA);
    struct ipd_file_meta got;
    CHECK_INT(ipd_meta_file_get(m, "t", "count", over.file_id, MC_NOW, &got),
              IPD_ERR_NOT_FOUND);
    CHECK_INT(ipd_meta_file_usage(m, "t", "count", MC_NOW, &count, &bytes),
              IPD_OK);
    CHECK_INT(count, 3);
    CHECK_INT(bytes, 3000);
    /* Another user (or tenant) has a quota of their own. */
    struct ipd_file_meta other =
        mc_file("t", "count2", n++, MC_NOW, MC_NOW + MC_HOUR, 1);
    CHECK_INT(ipd_meta_file_insert(m, &other, &q, MC_NOW), IPD_OK);
    other = mc_file("t2", "count", n++, MC_NOW, MC_NOW + MC_HOUR, 1);
    CHECK_INT(ipd_meta_file_insert(m, &other, &q, MC_NOW), IPD_OK);
    /* Once the three expire there is room again. */
    CHECK_INT(ipd_meta_file_insert(m, &over, &q, MC_NOW + MC_HOUR), IPD_OK);

    /* Bytes: 100 in all; landing exactly on the limit is allowed. */
    struct ipd_quota qb = {.max_files = -1, .max_bytes = 100};
    struct ipd_file_meta b1 =
        mc_file("t", "bytes", n++, MC_NOW, IPD_TIME_NEVER, 60);
    struct ipd_file_meta b2 =
        mc_file("t", "bytes", n++, MC_NOW, IPD_TIME_NEVER, 40);
    struct ipd_file_meta b3 =
        mc_file("t", "bytes", n++, MC_NOW, IPD_TIME_NEVER, 1);
    struct ipd_file_meta b4 =
        mc_file("t", "bytes", n++, MC_NOW, IPD_TIME_NEVER, 0);
    struct ipd_file_meta huge =
        mc_file("t", "bytes2", n++, MC_NOW, IPD_TIME_NEVER, INT64_MAX);
    CHECK_INT(ipd_meta_file_insert(m, &b1, &qb, MC_NOW), IPD_OK);
    CHECK_INT(ipd_meta_file_insert(m, &b3, &qb, MC_NOW), IPD_OK);
    CHECK_INT(ipd_meta_file_insert(m, &b2, &qb, MC_NOW), IPD_ERR_QUOTA);
    CHECK_INT(ipd_meta_file_delete(m, "t", "bytes", b3.file_id, MC_NOW, NULL),
              IPD_OK);
    CHECK_INT(ipd_meta_file_insert(m, &b2, &qb, MC_NOW), IPD_OK);
    CHECK_INT(ipd_meta_file_insert(m, &b3, &qb, MC_NOW), IPD_ERR_QUOTA);
    CHECK_INT(ipd_meta_file_insert(m, &b4, &qb, MC_NOW), IPD_OK);
    CHECK_INT(ipd_meta_file_insert(m, &huge, &qb, MC_NOW), IPD_ERR_QUOTA);
    CHECK_INT(ipd_meta_file_usage(m, "t", "bytes", MC_NOW, &count, &bytes),
              IPD_OK);
    CHECK_INT(count, 3);
    CHECK_INT(bytes, 100);

    /* A zero quota admits nothing. */
    struct ipd_quota zero = {.max_files = 0, .max_bytes = -1};
    struct ipd_file_meta z =
        mc_file("t", "zero", n++, MC_NOW, IPD_TIME_NEVER, 0);
    CHECK_INT(ipd_meta_file_insert(m, &z, &zero, MC_NOW), IPD_ERR_QUOTA);

    /* Unlimited: both limits negative, or no quota at all. */
    struct ipd_quota unl = {.max_files = -1, .max_bytes = -1};
    for (int i = 0; i < 20; i++) {
        struct ipd_file_meta f =
            mc_file("t", "unl", n++, MC_NOW, IPD_TIME_NEVER, INT64_C(1) << 40);
        CHECK_INT(ipd_meta_file_insert(m, &f, i % 2 ? &unl : NULL, MC_NOW),
                  IPD_OK);
    }
    CHECK_INT(ipd_meta_file_usage(m, "t", "unl", MC_NOW, &count, &bytes),
              IPD_OK);
    CHECK_INT(count, 20);
    CHECK_INT(bytes, INT64_C(20) << 40);
    ipd_meta_free(m);
}

/* The tenant's quota counts all its users together; other tenants and
 * expired files are not counted; the user's quota still applies. */
static void mc_tenant_quota(void)
{
    struct ipd_meta *m = mc_open();
    REQUIRE(m);
    int64_t count = -1, bytes = -1;
    unsigned n = 0;
    struct ipd_quota tq = {.max_files = 4, .max_bytes = 1000};
    struct ipd_quota q = {.max_files = 2, .max_bytes = -1, .tenant = &tq};

    /* Expired files and another tenant's don't count. */
    for (int i = 0; i < 3; i++) {
        struct ipd_file_meta f =
            mc_file("acme", "old", n++, MC_NOW - 50, MC_NOW - 1, 100);
        mc_put(m, &f);
        f = mc_file("other", "u1", n++, MC_NOW, IPD_TIME_NEVER, 100);
        mc_put(m, &f);
    }
    /* Two users of two files each fill the tenant's four. */
    const char *users[] = {"u1", "u1", "u2", "u2"};
    for (int i = 0; i < 4; i++) {
        struct ipd_file_meta f =
            mc_file("acme", users[i], n++, MC_NOW, MC_NOW + MC_HOUR, 100);
        CHECK_INT(ipd_meta_file_insert(m, &f, &q, MC_NOW), IPD_OK);
    }
    /* A third user id has room of its own but the tenant has none. */
    struct ipd_file_meta u3 =
        mc_file("acme", "u3", n++, MC_NOW, MC_NOW + MC_HOUR, 1);
    CHECK_INT(ipd_meta_file_insert(m, &u3, &q, MC_NOW), IPD_ERR_QUOTA);
    struct ipd_file_meta got;
    CHECK_INT(ipd_meta_file_get(m, "acme", "u3", u3.file_id, MC_NOW, &got),
              IPD_ERR_NOT_FOUND);
    /* Without the tenant limit the same insert passes the user's. */
    struct ipd_quota user_only = {.max_files = 2, .max_bytes = -1};
    struct ipd_file_meta u4 =
        mc_file("acme", "u4", n++, MC_NOW, MC_NOW + MC_HOUR, 1);
    CHECK_INT(ipd_meta_file_insert(m, &u4, &user_only, MC_NOW), IPD_OK);
    CHECK_INT(ipd_meta_file_usage(m, "acme", NULL, MC_NOW, &count, &bytes),
              IPD_OK);
    CHECK_INT(count, 5);
    CHECK_INT(bytes, 401);
    /* Another tenant is not held up. */
    struct ipd_file_meta o =
        mc_file("other", "u9", n++, MC_NOW, IPD_TIME_NEVER, 1);
    CHECK_INT(ipd_meta_file_insert(m, &o, &q, MC_NOW), IPD_OK);
    /* The user's own quota still holds under a roomy tenant's. */
    struct ipd_quota roomy = {.max_files = -1, .max_bytes = -1};
    struct ipd_quota q2 = {.max_files = 2, .max_bytes = -1, .tenant = &roomy};
    struct ipd_file_meta u1 =
        mc_file("acme", "u1", n++, MC_NOW, MC_NOW + MC_HOUR, 1);
    CHECK_INT(ipd_meta_file_insert(m, &u1, &q2, MC_NOW), IPD_ERR_QUOTA);

    /* Bytes: 1000 for the tenant; exactly on the limit is allowed. */
    struct ipd_quota tb = {.max_files = -1, .max_bytes = 1000};
    struct ipd_quota qb = {.max_files = -1, .max_bytes = -1, .tenant = &tb};
    struct ipd_file_meta b1 =
        mc_file("acme", "b1", n++, MC_NOW, MC_NOW + MC_HOUR, 599);
    struct ipd_file_meta b2 =
        mc_file("acme", "b2", n++, MC_NOW, MC_NOW + MC_HOUR, 1);
    CHECK_INT(ipd_meta_file_insert(m, &b1, &qb, MC_NOW), IPD_OK);
    CHECK_INT(ipd_meta_file_insert(m, &b2, &qb, MC_NOW), IPD_ERR_QUOTA);

    /* The early check says which quota is full. */
    const char *full = "x";
    CHECK_INT(ipd_meta_quota_full(m, &q, "acme", "u9", 0, MC_NOW, &full),
              IPD_OK);
    CHECK_STR(full ? full : "(null)", "tenant");
    CHECK_INT(ipd_meta_quota_full(m, &q2, "acme", "u1", 0, MC_NOW, &full),
              IPD_OK);
    CHECK_STR(full ? full : "(null)", "user");
    CHECK_INT(ipd_meta_quota_full(m, &q2, "other", "fresh", 0, MC_NOW, &full),
              IPD_OK);
    CHECK(full == NULL);

    /* The admin list: most bytes first, expired files left out. */
    struct ipd_tenant_usage list[3];
    size_t k = 0;
    bool more = true;
    CHECK_INT(ipd_meta_tenant_usage(m, MC_NOW, 3, list, &k, &more), IPD_OK);
    CHECK_INT(k, 2);
    CHECK(!more);
    CHECK_STR(list[0].tenant, "acme");
    CHECK_INT(list[0].files, 6);
    CHECK_INT(list[0].bytes, 1000);
    CHECK_STR(list[1].tenant, "other");
    CHECK_INT(list[1].files, 4);
    CHECK_INT(list[1].bytes, 301);
    CHECK_INT(ipd_meta_tenant_usage(m, MC_NOW, 1, list, &k, &more), IPD_OK);
    CHECK_INT(k, 1);
    CHECK(more);
    CHECK_STR(list[0].tenant, "acme");
    ipd_meta_free(m);
}

static void mc_conflict(void)
{
    struct ipd_meta *m = mc_open();
    REQUIRE(m);
    struct ipd_file_meta f = mc_file("t", "u", 1, MC_NOW, IPD_TIME_NEVER, 5);
    struct ipd_file_meta dup =
        mc_file("t", "u", 1, MC_NOW + 1, IPD_TIME_NEVER, 6);
    struct ipd_file_meta other =
        mc_file("t2", "v", 1, MC_NOW, IPD_TIME_NEVER, 7);
    struct ipd_file_meta expired =
        mc_file("t", "u", 2, MC_NOW - 10, MC_NOW - 5, 1);
    struct ipd_file_meta got;
    struct ipd_quota q = {.max_files = 100, .max_bytes = 1000};

    mc_put(m, &f);
    CHECK_INT(ipd_meta_file_insert(m, &dup, NULL, MC_NOW), IPD_ERR_CONFLICT);
    CHECK_INT(ipd_meta_file_insert(m, &dup, &q, MC_NOW), IPD_ERR_CONFLICT);
    /* Ids are unique across scopes, and an expired record still holds its
     * id until it is swept. */
    CHECK_INT(ipd_meta_file_insert(m, &other, NULL, MC_NOW), IPD_ERR_CONFLICT);
    mc_put(m, &expired);
    expired.expires_at_ms = IPD_TIME_NEVER;
    CHECK_INT(ipd_meta_file_insert(m, &expired, NULL, MC_NOW),
              IPD_ERR_CONFLICT);

    CHECK_INT(ipd_meta_file_get(m, "t", "u", f.file_id, MC_NOW, &got), IPD_OK);
    mc_check_file_eq(&got, &f);
    int64_t count = -1, bytes = -1;
    CHECK_INT(ipd_meta_file_usage(m, "t", "u", MC_NOW, &count, &bytes), IPD_OK);
    CHECK_INT(count, 1);
    CHECK_INT(bytes, 5);
    ipd_meta_free(m);
}

static void mc_delete(void)
{
    struct ipd_meta *m = mc_open();
    REQUIRE(m);
    struct ipd_file_meta f = mc_file("t", "u", 1, MC_NOW, MC_NOW + MC_HOUR, 5);
    struct ipd_file_meta g = mc_file("t", "u", 2, MC_NOW, IPD_TIME_NEVER, 6);
    struct ipd_file_meta got;
    int64_t count = -1, bytes = -1;

    mc_put(m, &f);
    mc_put(m, &g);
    memset(&got, 0, sizeof(got));
    CHECK_INT(ipd_meta_file_delete(m, "t", "u", f.file_id, MC_NOW, &got),
              IPD_OK);
    mc_check_file_eq(&got, &f);
    CHECK_INT(ipd_meta_file_delete(m, "t", "u", f.file_id, MC_NOW, &got),
              IPD_ERR_NOT_FOUND);
    CHECK_INT(ipd_meta_file_get(m, "t", "u", f.file_id, MC_NOW, &got),
              IPD_ERR_NOT_FOUND);
    /* out may be NULL. */
    CHECK_INT(ipd_meta_file_delete(m, "t", "u", g.file_id, MC_NOW, NULL),
              IPD_OK);
    CHECK_INT(ipd_meta_file_usage(m, "t", "u", MC_NOW, &count, &bytes), IPD_OK);
    CHECK_INT(count, 0);
    CHECK_INT(bytes, 0);
    /* The id is free again. */
    mc_put(m, &f);
    ipd_meta_free(m);
}

static void mc_delete_by_id(void)
{
    struct ipd_meta *m = mc_open();
    REQUIRE(m);
    struct ipd_file_meta live = mc_file("t", "u", 1, MC_NOW, IPD_TIME_NEVER, 5);
    struct ipd_file_meta dead =
        mc_file("t2", "v", 2, MC_NOW - 10, MC_NOW - 1, 6);
    struct ipd_file_list l = {0};
    struct ipd_file_meta got;

    mc_put(m, &live);
    mc_put(m, &dead);
    /* Whatever the scope or expiry. */
    CHECK_INT(ipd_meta_file_delete_by_id(m, dead.file_id), IPD_OK);
    CHECK_INT(ipd_meta_file_delete_by_id(m, dead.file_id), IPD_ERR_NOT_FOUND);
    CHECK_INT(ipd_meta_file_delete_by_id(m, live.file_id), IPD_OK);
    CHECK_INT(ipd_meta_file_get(m, "t", "u", live.file_id, MC_NOW, &got),
              IPD_ERR_NOT_FOUND);
    CHECK_INT(ipd_meta_file_delete_by_id(m, "file_unknown"), IPD_ERR_NOT_FOUND);
    CHECK_INT(ipd_meta_file_list_expired(m, INT64_MAX, 10, &l), IPD_OK);
    CHECK_INT(l.n, 0);
    ipd_file_list_release(&l);
    ipd_meta_free(m);
}

static void mc_totals(void)
{
    struct ipd_meta *m = mc_open();
    REQUIRE(m);
    int64_t count = -1, bytes = -1;

    CHECK_INT(ipd_meta_file_totals(m, MC_NOW, &count, &bytes), IPD_OK);
    CHECK_INT(count, 0);
    CHECK_INT(bytes, 0);
    struct ipd_file_meta f[4] = {
        mc_file("t1", "a", 1, MC_NOW, IPD_TIME_NEVER, 10),
        mc_file("t1", "b", 2, MC_NOW, MC_NOW + 1, 20),
        mc_file("t2", "a", 3, MC_NOW, MC_NOW + MC_HOUR, 40),
        mc_file("t2", "a", 4, MC_NOW - 5, MC_NOW - 1, 80),
    };
    for (size_t i = 0; i < 4; i++)
        mc_put(m, &f[i]);
    CHECK_INT(ipd_meta_file_totals(m, MC_NOW, &count, &bytes), IPD_OK);
    CHECK_INT(count, 3);
    CHECK_INT(bytes, 70);
    CHECK_INT(ipd_meta_file_totals(m, MC_NOW + 1, &count, &bytes), IPD_OK);
    CHECK_INT(count, 2);
    CHECK_INT(bytes, 50);
    CHECK_INT(ipd_meta_file_totals(m, MC_NOW - 2, &count, &bytes), IPD_OK);
    CHECK_INT(count, 4);
    CHECK_INT(bytes, 150);
    ipd_meta_free(m);
}

#define MC_THREADS 8

struct mc_worker {
    pthread_t tid;
    struct ipd_meta *m;
    unsigned index;
    unsigned id_base; /* ids base + index * 1000 + i */
    unsigned inserts;
    const struct ipd_quota *quota;
    const char *user;
    bool user_per_thread;           /* user is "<user><index>" */
    unsigned ok, quota_hits, other; /* OUT: results by kind */
};

static void *mc_worker_run(void *arg)
{
    struct mc_worker *w = arg;
    char user[64];
    snprintf(user, sizeof(user), "%s", w->user);
    if (w->user_per_thread)
        snprintf(user, sizeof(user), "%s%u", w->user, w->index);
    for (unsigned i = 0; i < w->inserts; i++) {
        unsigned n = w->id_base + w->index * 1000 + i;
        struct ipd_file_meta f =
            mc_file("t", user, n, MC_NOW - (int64_t)n, MC_NOW + MC_HOUR, 10);
        enum ipd_err rc = ipd_meta_file_insert(w->m, &f, w->quota, MC_NOW);
        if (rc == IPD_OK)
            w->ok++;
        else if (rc == IPD_ERR_QUOTA)
            w->quota_hits++;
        else
            w->other++;
        /* Readers run alongside the writers. */
        if (i % 10 == 0) {
            int64_t c, b;
            if (ipd_meta_file_usage(w->m, "t", user, MC_NOW, &c, &b))
                w->other++;
        }
    }
    return NULL;
}

/* Run MC_THREADS workers of `inserts` inserts each into (t, user); the
 * result counts go to *ok, *quota_hits and *other. */
static void mc_run_workers_as(struct ipd_meta *m, const char *user,
                              bool user_per_thread, unsigned id_base,
                              unsigned inserts, const struct ipd_quota *q,
                              unsigned *ok, unsigned *quota_hits,
                              unsigned *other)
{
    struct mc_worker w[MC_THREADS];
    *ok = *quota_hits = *other = 0;
    for (unsigned t = 0; t < MC_THREADS; t++) {
        w[t] = (struct mc_worker){.m = m,
                                  .index = t,
                                  .id_base = id_base,
                                  .inserts = inserts,
                                  .quota = q,
                                  .user = user,
                                  .user_per_thread = user_per_thread};
        CHECK_INT(pthread_create(&w[t].tid, NULL, mc_worker_run, &w[t]), 0);
    }
    for (unsigned t = 0; t < MC_THREADS; t++) {
        pthread_join(w[t].tid, NULL);
        *ok += w[t].ok;
        *quota_hits += w[t].quota_hits;
        *other += w[t].other;
    }
}

static void mc_run_workers(struct ipd_meta *m, const char *user,
                           unsigned id_base, unsigned inserts,
                           const struct ipd_quota *q, unsigned *ok,
                           unsigned *quota_hits, unsigned *other)
{
    mc_run_workers_as(m, user, false, id_base, inserts, q, ok, quota_hits,
                      other);
}

static void mc_concurrent_inserts(void)
{
    struct ipd_meta *m = mc_open();
    REQUIRE(m);
    unsigned ok, quota_hits, other;
    int64_t count = -1, bytes = -1;

    mc_run_workers(m, "u", 0, 50, NULL, &ok, &quota_hits, &other);
    CHECK_INT(ok, MC_THREADS * 50);
    CHECK_INT(quota_hits, 0);
    CHECK_INT(other, 0);
    CHECK_INT(mc_walk(m, "t", "u", MC_NOW, 100), MC_THREADS * 50);
    CHECK_INT(ipd_meta_file_usage(m, "t", "u", MC_NOW, &count, &bytes), IPD_OK);
    CHECK_INT(count, MC_THREADS * 50);
    CHECK_INT(bytes, MC_THREADS * 50 * 10);
    for (unsigned t = 0; t < MC_THREADS; t++) {
        for (unsigned i = 0; i < 50; i++) {
            unsigned n = t * 1000 + i;
            struct ipd_file_meta want =
                mc_file("t", "u", n, MC_NOW - (int64_t)n, MC_NOW + MC_HOUR, 10);
            struct ipd_file_meta got;
            CHECK_INT(
                ipd_meta_file_get(m, "t", "u", want.file_id, MC_NOW, &got),
                IPD_OK);
            mc_check_file_eq(&got, &want);
        }
    }
    ipd_meta_free(m);
}

static void mc_concurrent_quota(void)
{
    struct ipd_meta *m = mc_open();
    REQUIRE(m);
    unsigned ok, quota_hits, other;
    int64_t count = -1, bytes = -1;

    struct ipd_quota q = {.max_files = 25, .max_bytes = -1};
    mc_run_workers(m, "files", 0, 10, &q, &ok, &quota_hits, &other);
    CHECK_INT(ok, 25);
    CHECK_INT(quota_hits, MC_THREADS * 10 - 25);
    CHECK_INT(other, 0);
    CHECK_INT(ipd_meta_file_usage(m, "t", "files", MC_NOW, &count, &bytes),
              IPD_OK);
    CHECK_INT(count, 25);

    /* Each file is 10 bytes: 17 fit in 175. */
    struct ipd_quota qb = {.max_files = -1, .max_bytes = 175};
    mc_run_workers(m, "bytes", 100000, 10, &qb, &ok, &quota_hits, &other);
    CHECK_INT(ok, 17);
    CHECK_INT(other, 0);
    CHECK_INT(ipd_meta_file_usage(m, "t", "bytes", MC_NOW, &count, &bytes),
              IPD_OK);
    CHECK_INT(count, 17);
    CHECK_INT(bytes, 170);
    ipd_meta_free(m);
}

/* Many users of one tenant inserting at once never pass the tenant's
 * quota together, and each stays within its own. */
static void mc_concurrent_tenant_quota(void)
{
    struct ipd_meta *m = mc_open();
    REQUIRE(m);
    unsigned ok, quota_hits, other;
    int64_t count = -1, bytes = -1;

    struct ipd_quota tq = {.max_files = 30, .max_bytes = -1};
    struct ipd_quota q = {.max_files = 5, .max_bytes = -1, .tenant = &tq};
    mc_run_workers_as(m, "tu", true, 0, 10, &q, &ok, &quota_hits, &other);
    CHECK_INT(ok, 30);
    CHECK_INT(quota_hits, MC_THREADS * 10 - 30);
    CHECK_INT(other, 0);
    CHECK_INT(ipd_meta_file_usage(m, "t", NULL, MC_NOW, &count, &bytes),
              IPD_OK);
    CHECK_INT(count, 30);
    for (unsigned t = 0; t < MC_THREADS; t++) {
        char user[16];
        snprintf(user, sizeof(user), "tu%u", t);
        CHECK_INT(ipd_meta_file_usage(m, "t", user, MC_NOW, &count, &bytes),
                  IPD_OK);
        CHECK(count <= 5);
    }

    /* Bytes: 10 per file, 175 for the tenant: 17 files. */
    struct ipd_quota tb = {.max_files = -1, .max_bytes = 175};
    struct ipd_quota qb = {.max_files = -1, .max_bytes = -1, .tenant = &tb};
    ipd_meta_free(m);
    m = mc_open();
    REQUIRE(m);
    mc_run_workers_as(m, "bu", true, 100000, 10, &qb, &ok, &quota_hits, &other);
    CHECK_INT(ok, 17);
    CHECK_INT(other, 0);
    CHECK_INT(ipd_meta_file_usage(m, "t", NULL, MC_NOW, &count, &bytes),
              IPD_OK);
    CHECK_INT(count, 17);
    CHECK_INT(bytes, 170);
    ipd_meta_free(m);
}

static void mc_keys(void)
{
    struct ipd_meta *m = mc_open();
    REQUIRE(m);
    struct ipd_key k1 = mc_key(1, "acme", false, MC_NOW - 20);
    struct ipd_key k2 = mc_key(2, "acme", true, MC_NOW - 10);
    struct ipd_key k3 = mc_key(3, "other", false, MC_NOW - 30);
    struct ipd_key got;
    struct ipd_key_list l = {0};

    CHECK_INT(ipd_meta_key_list(m, &l), IPD_OK);
    CHECK_INT(l.n, 0);
    ipd_key_list_release(&l);

    CHECK_INT(ipd_meta_key_insert(m, &k1), IPD_OK);
    CHECK_INT(ipd_meta_key_insert(m, &k2), IPD_OK);
    CHECK_INT(ipd_meta_key_insert(m, &k3), IPD_OK);

    memset(&got, 0x5a, sizeof(got));
    CHECK_INT(ipd_meta_key_find_by_hash(m, k2.hash, &got), IPD_OK);
    mc_check_key_eq(&got, &k2);
    CHECK_INT(ipd_meta_key_find_by_hash(m, k1.hash, &got), IPD_OK);
    mc_check_key_eq(&got, &k1);
    CHECK(!got.admin);
    char unknown[IPD_SHA256_HEX];
    ipd_sha256_hex("nope", 4, unknown);
    CHECK_INT(ipd_meta_key_find_by_hash(m, unknown, &got), IPD_ERR_NOT_FOUND);

    /* Oldest first. */
    CHECK_INT(ipd_meta_key_list(m, &l), IPD_OK);
    REQUIRE(l.n == 3);
    mc_check_key_eq(&l.items[0], &k3);
    mc_check_key_eq(&l.items[1], &k1);
    mc_check_key_eq(&l.items[2], &k2);
    ipd_key_list_release(&l);

    /* Duplicate hash under a new id, and duplicate id with a new hash. */
    struct ipd_key dup = mc_key(4, "acme", false, MC_NOW);
    snprintf(dup.hash, sizeof(dup.hash), "%s", k1.hash);
    CHECK_INT(ipd_meta_key_insert(m, &dup), IPD_ERR_CONFLICT);
    dup = mc_key(5, "acme", false, MC_NOW);
    snprintf(dup.key_id, sizeof(dup.key_id), "%s", k2.key_id);
    CHECK_INT(ipd_meta_key_insert(m, &dup), IPD_ERR_CONFLICT);
    CHECK_INT(ipd_meta_key_list(m, &l), IPD_OK);
    CHECK_INT(l.n, 3);
    ipd_key_list_release(&l);

    /* Revoke: found afterwards (the caller checks revoked_at_ms), and the
     * first revocation time sticks. */
    CHECK_INT(ipd_meta_key_revoke(m, k1.key_id, MC_NOW), IPD_OK);
    CHECK_INT(ipd_meta_key_find_by_hash(m, k1.hash, &got), IPD_OK);
    CHECK_INT(got.revoked_at_ms, MC_NOW);
    CHECK_INT(ipd_meta_key_revoke(m, k1.key_id, MC_NOW + 500), IPD_OK);
    CHECK_INT(ipd_meta_key_find_by_hash(m, k1.hash, &got), IPD_OK);
    CHECK_INT(got.revoked_at_ms, MC_NOW);
    CHECK_INT(ipd_meta_key_revoke(m, "key_unknown", MC_NOW), IPD_ERR_NOT_FOUND);
    /* The others are untouched. */
    CHECK_INT(ipd_meta_key_find_by_hash(m, k2.hash, &got), IPD_OK);
    CHECK_INT(got.revoked_at_ms, 0);

    /* A key inserted already revoked keeps its time. */
    struct ipd_key k6 = mc_key(6, "acme", false, MC_NOW);
    k6.revoked_at_ms = MC_NOW + 7;
    CHECK_INT(ipd_meta_key_insert(m, &k6), IPD_OK);
    CHECK_INT(ipd_meta_key_find_by_hash(m, k6.hash, &got), IPD_OK);
    mc_check_key_eq(&got, &k6);
    ipd_meta_free(m);
}

/* Rotating a tenant's callback secret: every key of the tenant that holds
 * the current secret, revoked or not, gets the new one and keeps the old
 * as prev_secret; other tenants and stale secrets are untouched. */
static void mc_key_rotate_secret(void)
{
    struct ipd_meta *m = mc_open();
    REQUIRE(m);
    struct ipd_key a1 = mc_key(1, "acme", false, MC_NOW - 20);
    struct ipd_key a2 = mc_key(2, "acme", false, MC_NOW - 10);
    struct ipd_key o = mc_key(3, "other", false, MC_NOW - 5);
    struct ipd_key got;
    char next[IPD_SHA256_HEX], again[IPD_SHA256_HEX];
    memcpy(a2.secret, a1.secret, sizeof(a2.secret));
    memcpy(o.secret, a1.secret, sizeof(o.secret)); /* same text, not ours */
    a2.revoked_at_ms = MC_NOW - 1;
    CHECK_INT(ipd_meta_key_insert(m, &a1), IPD_OK);
    CHECK_INT(ipd_meta_key_insert(m, &a2), IPD_OK);
    CHECK_INT(ipd_meta_key_insert(m, &o), IPD_OK);
    CHECK_INT(ipd_meta_key_find_by_hash(m, a1.hash, &got), IPD_OK);
    CHECK_STR(got.prev_secret, "");
    CHECK_INT(got.secret_rotated_at_ms, 0);

    ipd_sha256_hex("next", 4, next);
    CHECK_INT(ipd_meta_key_rotate_secret(m, "acme", a1.secret, next, MC_NOW),
              IPD_OK);
    const struct ipd_key *acme[] = {&a1, &a2};
    for (size_t i = 0; i < 2; i++) {
        CHECK_INT(ipd_meta_key_find_by_hash(m, acme[i]->hash, &got), IPD_OK);
        CHECK_STR(got.secret, next);
        CHECK_STR(got.prev_secret, a1.secret);
        CHECK_INT(got.secret_rotated_at_ms, MC_NOW);
        CHECK_INT(got.revoked_at_ms, acme[i]->revoked_at_ms);
    }
    CHECK_INT(ipd_meta_key_find_by_hash(m, o.hash, &got), IPD_OK);
    mc_check_key_eq(&got, &o);
    /* The tenant's secrets, from its newest key (revoked or not). */
    CHECK_INT(ipd_meta_key_find_tenant(m, "acme", &got), IPD_OK);
    CHECK_STR(got.key_id, a2.key_id);
    CHECK_STR(got.secret, next);
    CHECK_STR(got.prev_secret, a1.secret);
    CHECK_INT(got.secret_rotated_at_ms, MC_NOW);
    CHECK_INT(ipd_meta_key_find_tenant(m, "other", &got), IPD_OK);
    mc_check_key_eq(&got, &o);
    CHECK_INT(ipd_meta_key_find_tenant(m, "nobody", &got), IPD_ERR_NOT_FOUND);

    /* A rotation that lost a race (its "current" is stale) changes
     * nothing; so does an unknown tenant. */
    ipd_sha256_hex("again", 5, again);
    CHECK_INT(
        ipd_meta_key_rotate_secret(m, "acme", a1.secret, again, MC_NOW + 1),
        IPD_ERR_NOT_FOUND);
    CHECK_INT(ipd_meta_key_rotate_secret(m, "nobody", next, again, MC_NOW),
              IPD_ERR_NOT_FOUND);
    CHECK_INT(ipd_meta_key_rotate_secret(m, "acme", "", again, MC_NOW),
              IPD_ERR_INVALID);
    CHECK_INT(ipd_meta_key_find_by_hash(m, a1.hash, &got), IPD_OK);
    CHECK_STR(got.secret, next);
    CHECK_INT(got.secret_rotated_at_ms, MC_NOW);

    /* A second rotation: the previous one is the one before. */
    CHECK_INT(ipd_meta_key_rotate_secret(m, "acme", next, again, MC_NOW + 2),
              IPD_OK);
    CHECK_INT(ipd_meta_key_find_by_hash(m, a2.hash, &got), IPD_OK);
    CHECK_STR(got.secret, again);
    CHECK_STR(got.prev_secret, next);
    CHECK_INT(got.secret_rotated_at_ms, MC_NOW + 2);

    /* A key inserted with rotation fields keeps them. */
    struct ipd_key k4 = mc_key(4, "acme", false, MC_NOW);
    memcpy(k4.secret, again, sizeof(k4.secret));
    memcpy(k4.prev_secret, next, sizeof(k4.prev_secret));
    k4.secret_rotated_at_ms = MC_NOW + 2;
    CHECK_INT(ipd_meta_key_insert(m, &k4), IPD_OK);
    CHECK_INT(ipd_meta_key_find_by_hash(m, k4.hash, &got), IPD_OK);
    mc_check_key_eq(&got, &k4);
    /* The newest key is the tenant's; one without a secret never is. */
    CHECK_INT(ipd_meta_key_find_tenant(m, "acme", &got), IPD_OK);
    mc_check_key_eq(&got, &k4);
    struct ipd_key k5 = mc_key(5, "acme", false, MC_NOW + 10);
    k5.secret[0] = '\0';
    CHECK_INT(ipd_meta_key_insert(m, &k5), IPD_OK);
    CHECK_INT(ipd_meta_key_find_tenant(m, "acme", &got), IPD_OK);
    mc_check_key_eq(&got, &k4);
    ipd_meta_free(m);
}

/* ---- reconcile lookups ------------------------------------------------ */

/* By id alone: any scope, expired or not. */
static void mc_get_by_id(void)
{
    struct ipd_meta *m = mc_open();
    REQUIRE(m);
    struct ipd_file_meta a = mc_file("t", "u", 1, MC_NOW, IPD_TIME_NEVER, 5);
    struct ipd_file_meta b = mc_file("t2", "v", 2, MC_NOW - 10, MC_NOW - 1, 6);
    struct ipd_file_meta got;
    char unknown[IPD_ID_MAX];

    mc_put(m, &a);
    mc_put(m, &b);
    memset(&got, 0x5a, sizeof(got));
    CHECK_INT(ipd_meta_file_get_by_id(m, a.file_id, &got), IPD_OK);
    mc_check_file_eq(&got, &a);
    CHECK_INT(ipd_meta_file_get_by_id(m, b.file_id, &got), IPD_OK);
    mc_check_file_eq(&got, &b);
    mc_id(unknown, "file", 3);
    CHECK_INT(ipd_meta_file_get_by_id(m, unknown, &got), IPD_ERR_NOT_FOUND);
    CHECK_INT(ipd_meta_file_get_by_id(m, "", &got), IPD_ERR_NOT_FOUND);
    CHECK_INT(ipd_meta_file_delete_by_id(m, b.file_id), IPD_OK);
    CHECK_INT(ipd_meta_file_get_by_id(m, b.file_id, &got), IPD_ERR_NOT_FOUND);
    ipd_meta_free(m);
}

/* Walk every record with scan pages of `page`; returns how many, and
 * checks the order (strictly increasing ids) and the `more` flags. */
static size_t mc_scan_all(struct ipd_meta *m, const char *from, size_t page)
{
    char after[IPD_ID_MAX];
    size_t total = 0;

    snprintf(after, sizeof(after), "%s", from ? from : "");
    for (int pages = 0; pages < 10000; pages++) {
        struct ipd_file_list l = {0};
        enum ipd_err rc = ipd_meta_file_scan(m, after, page, &l);
        CHECK_INT(rc, IPD_OK);
        if (rc)
            return total;
        CHECK(l.n <= page);
        if (l.more)
            CHECK_INT(l.n, page);
        for (size_t i = 0; i < l.n; i++) {
            CHECK(strcmp(l.items[i].file_id, after) > 0);
            snprintf(after, sizeof(after), "%s", l.items[i].file_id);
        }
        total += l.n;
        bool more = l.more;
        ipd_file_list_release(&l);
        if (!more)
            return total;
    }
    CHECK(false); /* a scan that never ends */
    return total;
}

/* Every record of every scope, expired or not, in id order, page by
 * page; deletes during the walk don't disturb it. */
static void mc_scan(void)
{
    struct ipd_meta *m = mc_open();
    REQUIRE(m);
    struct ipd_file_list l = {0};
    char mid[IPD_ID_MAX];

    CHECK_INT(mc_scan_all(m, NULL, 10), 0);
    /* Inserted out of id order, across scopes and expiries. */
    for (unsigned i = 0; i < 25; i++) {
        unsigned n = (i * 7) % 25;
        struct ipd_file_meta f =
            mc_file(n % 2 ? "t" : "t2", n % 3 ? "u" : "v", n, MC_NOW - n,
                    n % 4 ? IPD_TIME_NEVER : MC_NOW - 1, n);
        mc_put(m, &f);
    }
    CHECK_INT(mc_scan_all(m, NULL, 10), 25);
    CHECK_INT(mc_scan_all(m, "", 1), 25);
    CHECK_INT(mc_scan_all(m, NULL, 25), 25);
    CHECK_INT(mc_scan_all(m, NULL, 1000), 25);
    mc_id(mid, "file", 9);
    CHECK_INT(mc_scan_all(m, mid, 4), 15);

    /* The first page is the smallest ids, in order. */
    CHECK_INT(ipd_meta_file_scan(m, NULL, 3, &l), IPD_OK);
    REQUIRE(l.n == 3);
    for (unsigned i = 0; i < 3; i++) {
        char want[IPD_ID_MAX];
        mc_id(want, "file", i);
        CHECK_STR(l.items[i].file_id, want);
    }
    CHECK(l.more);
    ipd_file_list_release(&l);

    /* Deleting records already walked past keeps the position valid. */
    CHECK_INT(ipd_meta_file_scan(m, mid, 5, &l), IPD_OK);
    REQUIRE(l.n == 5);
    char last[IPD_ID_MAX];
    snprintf(last, sizeof(last), "%s", l.items[4].file_id);
    for (size_t i = 0; i < l.n; i++)
        CHECK_INT(ipd_meta_file_delete_by_id(m, l.items[i].file_id), IPD_OK);
    ipd_file_list_release(&l);
    CHECK_INT(mc_scan_all(m, last, 4), 10);
    CHECK_INT(mc_scan_all(m, NULL, 7), 20);
    ipd_meta_free(m);
}

/* ---- leases ------------------------------------------------------------ */

static bool mc_acquire(struct ipd_meta *m, const char *name, const char *owner,
                       int64_t now, int64_t ttl)
{
    bool got = true;
    CHECK_INT(ipd_meta_lease_acquire(m, name, owner, now, ttl, &got), IPD_OK);
    return got;
}

static bool mc_renew(struct ipd_meta *m, const char *name, const char *owner,
                     int64_t now, int64_t ttl)
{
    bool held = true;
    CHECK_INT(ipd_meta_lease_renew(m, name, owner, now, ttl, &held), IPD_OK);
    return held;
}

/* Acquire, contention, renew extends, expiry takeover, renew after the
 * loss fails, release; names are independent. */
static void mc_lease(void)
{
    struct ipd_meta *m = mc_open();
    REQUIRE(m);
    const int64_t T = MC_NOW;

    CHECK(mc_acquire(m, "sweep", "node-a", T, 1000));
    /* Ours already: taken again (and extended). */
    CHECK(mc_acquire(m, "sweep", "node-a", T + 10, 1000));
    /* Contention: B is refused while A's lease runs. */
    CHECK(!mc_acquire(m, "sweep", "node-b", T + 20, 1000));
    CHECK(!mc_renew(m, "sweep", "node-b", T + 20, 1000));
    /* Another name is another lease. */
    CHECK(mc_acquire(m, "reconcile", "node-b", T + 20, 1000));
    CHECK(!mc_acquire(m, "reconcile", "node-a", T + 20, 1000));
    /* Renew extends: A's lease now runs to T + 500 + 1000. */
    CHECK(mc_renew(m, "sweep", "node-a", T + 500, 1000));
    CHECK(!mc_acquire(m, "sweep", "node-b", T + 1200, 1000));
    CHECK(!mc_acquire(m, "sweep", "node-b", T + 1499, 1000));
    /* Expiry: at expires_at the lease is free for anyone. */
    CHECK(mc_acquire(m, "sweep", "node-b", T + 1500, 1000));
    /* A lost it: its renew fails and changes nothing. */
    CHECK(!mc_renew(m, "sweep", "node-a", T + 1600, 5000));
    CHECK(!mc_acquire(m, "sweep", "node-c", T + 2499, 1000));
    /* A's release leaves B's lease alone. */
    CHECK_INT(ipd_meta_lease_release(m, "sweep", "node-a"), IPD_OK);
    CHECK(!mc_acquire(m, "sweep", "node-c", T + 1700, 1000));
    /* B's release frees it at once, well before its expiry. */
    CHECK_INT(ipd_meta_lease_release(m, "sweep", "node-b"), IPD_OK);
    CHECK_INT(ipd_meta_lease_release(m, "sweep", "node-b"), IPD_OK);
    CHECK(!mc_renew(m, "sweep", "node-b", T + 1700, 1000));
    CHECK(mc_acquire(m, "sweep", "node-c", T + 1700, 1000));
    /* An expired lease nobody took is still renewable by its owner. */
    CHECK(mc_renew(m, "sweep", "node-c", T + 9000, 1000));
    CHECK(!mc_acquire(m, "sweep", "node-a", T + 9999, 1000));
    CHECK(mc_acquire(m, "sweep", "node-a", T + 10000, 1000));

    /* Bad arguments are refused the same way on every backend. */
    bool got = true;
    CHECK_INT(ipd_meta_lease_acquire(m, "", "x", T, 1000, &got),
              IPD_ERR_INVALID);
    CHECK(!got);
    CHECK_INT(ipd_meta_lease_acquire(m, "n", "", T, 1000, &got),
              IPD_ERR_INVALID);
    CHECK_INT(ipd_meta_lease_acquire(m, "n", "x", T, 0, &got), IPD_ERR_INVALID);
    CHECK_INT(ipd_meta_lease_renew(m, "n", "x", T, -1, &got), IPD_ERR_INVALID);
    char longname[IPD_LEASE_NAME_MAX + 1];
    memset(longname, 'n', IPD_LEASE_NAME_MAX);
    longname[IPD_LEASE_NAME_MAX] = '\0';
    CHECK_INT(ipd_meta_lease_acquire(m, longname, "x", T, 1000, &got),
              IPD_ERR_INVALID);
    CHECK_INT(ipd_meta_lease_release(m, longname, "x"), IPD_ERR_INVALID);
    ipd_meta_free(m);
}

struct mc_leaser {
    pthread_t tid;
    struct ipd_meta *m;
    char owner[32];
    int64_t now;
    bool got;        /* OUT */
    enum ipd_err rc; /* OUT */
};

static void *mc_leaser_run(void *arg)
{
    struct mc_leaser *l = arg;
    l->rc =
        ipd_meta_lease_acquire(l->m, "race", l->owner, l->now, 60000, &l->got);
    return NULL;
}

/* MC_THREADS owners go for the same free lease at once: exactly one gets
 * it, and losing the race is "not acquired", never an error.  Then the
 * same after a release, and (odd rounds) for a lease whose holder died:
 * of several nodes taking over an expired lease, one wins. */
static void mc_lease_race(void)
{
    struct ipd_meta *m = mc_open();
    REQUIRE(m);
    for (int round = 0; round < 6; round++) {
        struct mc_leaser l[MC_THREADS];
        int winners = 0, winner = -1;
        int64_t now = MC_NOW + round * MC_HOUR;
        if (round % 2) {
            /* A holder that died: its lease expires at now. */
            CHECK(mc_acquire(m, "race", "dead", now - 1000, 1000));
        }
        for (int t = 0; t < MC_THREADS; t++) {
            l[t] = (struct mc_leaser){.m = m, .now = now};
            snprintf(l[t].owner, sizeof(l[t].owner), "owner-%d-%d", round, t);
            CHECK_INT(pthread_create(&l[t].tid, NULL, mc_leaser_run, &l[t]), 0);
        }
        for (int t = 0; t < MC_THREADS; t++) {
            pthread_join(l[t].tid, NULL);
            CHECK_INT(l[t].rc, IPD_OK);
            if (l[t].got) {
                winners++;
                winner = t;
            }
        }
        CHECK_INT(winners, 1);
        if (winner >= 0)
            CHECK_INT(ipd_meta_lease_release(m, "race", l[winner].owner),
                      IPD_OK);
    }
    ipd_meta_free(m);
}

struct mc_case {
    const char *name;
    void (*fn)(void);
};

/* Run every check against stores from open_store (see the top). */
static void meta_conformance_run(struct ipd_meta *(*open_store)(void))
{
    static const struct mc_case cases[] = {
        {"ping", mc_ping},
        {"roundtrip", mc_roundtrip},
        {"scoping", mc_scoping},
        {"expiry", mc_expiry},
        {"list_expired_limit", mc_list_expired_limit},
        {"list_order", mc_list_order},
        {"paging", mc_paging},
        {"cursor_stable", mc_cursor_stable},
        {"quota", mc_quota},
        {"conflict", mc_conflict},
        {"delete", mc_delete},
        {"delete_by_id", mc_delete_by_id},
        {"totals", mc_totals},
        {"concurrent_inserts", mc_concurrent_inserts},
        {"concurrent_quota", mc_concurrent_quota},
        {"tenant_quota", mc_tenant_quota},
        {"concurrent_tenant_quota", mc_concurrent_tenant_quota},
        {"keys", mc_keys},
        {"key_rotate_secret", mc_key_rotate_secret},
        {"get_by_id", mc_get_by_id},
        {"scan", mc_scan},
        {"lease", mc_lease},
        {"lease_race", mc_lease_race},
    };

    mc__open_store = open_store;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        int before = test__failed_checks;
        cases[i].fn();
        printf("%s conformance/%s\n",
               test__failed_checks == before ? "ok  " : "FAIL", cases[i].name);
    }
}

#endif
