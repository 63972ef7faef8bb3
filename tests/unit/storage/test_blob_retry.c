/*
 * test_blob_retry.c - ipd_blob_delete_later: a delete that fails (the
 * store is down) is retried in the background until it succeeds, and
 * freeing the store stops the retries cleanly.  A scripted backend stands
 * in for a store that fails the first deletes.
 */
#include <pthread.h>
#include <time.h>
#include <unistd.h>

#include "storage/blob_internal.h"
#include "test.h"

struct fake {
    struct ipd_blobs base;
    pthread_mutex_t lock;
    int fail_left; /* deletes that fail before they succeed */
    int deleted;
    int calls;
};

static enum ipd_err fake_del(struct ipd_blobs *b, const char *id)
{
    struct fake *f = (struct fake *)b;
    (void)id;
    pthread_mutex_lock(&f->lock);
    f->calls++;
    enum ipd_err rc = IPD_OK;
    if (f->fail_left > 0) {
        f->fail_left--;
        rc = IPD_ERR_UNAVAILABLE;
    } else {
        f->deleted++;
    }
    pthread_mutex_unlock(&f->lock);
    return rc;
}

static void fake_free(struct ipd_blobs *b)
{
    struct fake *f = (struct fake *)b;
    pthread_mutex_destroy(&f->lock);
    free(f);
}

static const struct ipd_blobs_ops fake_ops = {
    .name = "fake", .free = fake_free, .del = fake_del};

static struct fake *fake_new(int fail)
{
    struct fake *f = ipd_xcalloc(1, sizeof(*f));
    ipd__blobs_init(&f->base, &fake_ops);
    pthread_mutex_init(&f->lock, NULL);
    f->fail_left = fail;
    return f;
}

static int deleted(struct fake *f)
{
    pthread_mutex_lock(&f->lock);
    int n = f->deleted;
    pthread_mutex_unlock(&f->lock);
    return n;
}

static void immediate_success_queues_nothing(void)
{
    struct fake *f = fake_new(0);
    ipd_blob_delete_later(&f->base, "file_a");
    CHECK_INT(deleted(f), 1);
    CHECK_INT(ipd_blobs_pending_deletes(&f->base), 0);
    ipd_blobs_free(&f->base);
}

static void failures_are_retried_until_done(void)
{
    struct fake *f = fake_new(3); /* now, then twice more in the background */
    ipd_blob_delete_later(&f->base, "file_a");
    CHECK_INT(deleted(f), 0);
    CHECK_INT(ipd_blobs_pending_deletes(&f->base), 1);
    /* Backoff 0.5 s, 1 s, then success: poll with a bound, since the
     * retry thread has no event for us to wait on. */
    for (int i = 0; i < 100 && deleted(f) < 1; i++)
        usleep(50 * 1000);
    CHECK_INT(deleted(f), 1);
    CHECK_INT(ipd_blobs_pending_deletes(&f->base), 0);
    ipd_blobs_free(&f->base);
}

static void free_stops_retries(void)
{
    struct fake *f = fake_new(1000000);
    ipd_blob_delete_later(&f->base, "file_a");
    ipd_blob_delete_later(&f->base, "file_b");
    CHECK_INT(ipd_blobs_pending_deletes(&f->base), 2);
    /* Must return promptly and free everything (LeakSanitizer checks). */
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    ipd_blobs_free(&f->base);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    CHECK(t1.tv_sec - t0.tv_sec < 5);
}

struct pre_state {
    pthread_mutex_t lock;
    int fail_left;
    int done;
    int deleted_before; /* blob deletes seen when pre first succeeded */
    struct fake *f;
};

static enum ipd_err pre_step(void *cls, const char *id)
{
    struct pre_state *p = cls;
    (void)id;
    pthread_mutex_lock(&p->lock);
    enum ipd_err rc = IPD_OK;
    if (p->fail_left > 0) {
        p->fail_left--;
        rc = IPD_ERR_UNAVAILABLE;
    } else if (!p->done++) {
        p->deleted_before = deleted(p->f);
    }
    pthread_mutex_unlock(&p->lock);
    return rc;
}

/* The first step (a record delete) must succeed before the bytes go, and
 * both are retried together. */
static void first_step_before_bytes(void)
{
    struct fake *f = fake_new(0);
    struct pre_state p = {.fail_left = 2, .f = f};
    pthread_mutex_init(&p.lock, NULL);
    ipd_blob_delete_later_after(&f->base, "file_a", pre_step, &p);
    CHECK_INT(deleted(f), 0); /* the first step failed: nothing deleted */
    for (int i = 0; i < 100 && deleted(f) < 1; i++)
        usleep(50 * 1000);
    CHECK_INT(deleted(f), 1);
    pthread_mutex_lock(&p.lock);
    CHECK_INT(p.done, 1);
    CHECK_INT(p.deleted_before, 0);
    pthread_mutex_unlock(&p.lock);
    ipd_blobs_free(&f->base);
    pthread_mutex_destroy(&p.lock);
}

TEST_MAIN(T(immediate_success_queues_nothing), T(first_step_before_bytes),
          T(failures_are_retried_until_done), T(free_stops_retries))
