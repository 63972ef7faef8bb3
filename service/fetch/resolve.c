/*
 * resolve.c - the resolver of service/fetch/ (fetch_internal.h): a host
 * name resolved within a timeout, for fetch_curl.c's hops and for the
 * egress proxy (egress.c).  No libcurl.
 */
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "../common/buf.h"
#include "../common/ipd.h"
#include "../common/util.h"
#include "fetch_internal.h"

#define fail ipd_buf_fail /* append why to err, return the code */

/*
 * getaddrinfo has no timeout, and a slow authoritative server is as good
 * as a slow-drip body for holding a request.  So it runs on a detached
 * thread; on timeout the caller leaves, and whoever drops the last
 * reference frees the job.
 */
struct resolve_job {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int refs;
    bool done;
    int rc;              /* getaddrinfo's result */
    struct addrinfo *ai; /* owned until taken */
    char *host;          /* owned */
    char port[16];
};

static void job_free(struct resolve_job *j)
{
    if (j->ai)
        freeaddrinfo(j->ai);
    pthread_mutex_destroy(&j->mu);
    pthread_cond_destroy(&j->cv);
    free(j->host);
    free(j);
}

static void job_unref(struct resolve_job *j)
{
    pthread_mutex_lock(&j->mu);
    bool last = --j->refs == 0;
    pthread_mutex_unlock(&j->mu);
    if (last)
        job_free(j);
}

static int gai(const char *host, const char *port, int flags,
               struct addrinfo **ai)
{
    struct addrinfo hints;
    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_protocol = IPPROTO_TCP;
    hints.ai_flags = AI_NUMERICSERV | flags;
    return getaddrinfo(host, port, &hints, ai);
}

static void *resolve_thread(void *arg)
{
    struct resolve_job *j = arg;
    struct addrinfo *ai = NULL;
    int rc = gai(j->host, j->port, 0, &ai);
    pthread_mutex_lock(&j->mu);
    j->rc = rc;
    j->ai = rc ? NULL : ai;
    j->done = true;
    pthread_cond_signal(&j->cv);
    pthread_mutex_unlock(&j->mu);
    job_unref(j);
    return NULL;
}

enum ipd_err ipd__fetch_resolve(const char *host, const char *port,
                                bool literal, int64_t timeout_ms,
                                struct addrinfo **ai, struct ipd_buf *err)
{
    struct resolve_job *j = NULL;
    pthread_condattr_t ca;
    pthread_attr_t ta;
    pthread_t th;
    struct timespec until;
    int rc;

    *ai = NULL;
    if (literal) {
        rc = gai(host, port, AI_NUMERICHOST, ai);
        goto done;
    }
    j = ipd_xcalloc(1, sizeof(*j));
    j->host = ipd_xstrdup(host);
    snprintf(j->port, sizeof(j->port), "%s", port);
    j->refs = 2;
    pthread_mutex_init(&j->mu, NULL);
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&j->cv, &ca);
    pthread_condattr_destroy(&ca);
    pthread_attr_init(&ta);
    pthread_attr_setdetachstate(&ta, PTHREAD_CREATE_DETACHED);
    rc = pthread_create(&th, &ta, resolve_thread, j);
    pthread_attr_destroy(&ta);
    if (rc) {
        job_free(j);
        return fail(err, IPD_ERR_INTERNAL,
                    "could not fetch: no thread to resolve %s", host);
    }

    until = ipd_deadline_after(CLOCK_MONOTONIC, timeout_ms);
    pthread_mutex_lock(&j->mu);
    while (!j->done)
        if (pthread_cond_timedwait(&j->cv, &j->mu, &until) == ETIMEDOUT)
            break;
    bool done = j->done;
    rc = j->rc;
    *ai = j->ai;
    j->ai = NULL;
    pthread_mutex_unlock(&j->mu);
    job_unref(j);
    if (!done)
        return fail(err, IPD_ERR_UPSTREAM_TIMEOUT,
                    "could not fetch: resolving %s timed out (limit %lld ms)",
                    host, (long long)timeout_ms);
done:
    if (rc == EAI_MEMORY)
        return fail(err, IPD_ERR_NOMEM, "could not fetch: out of memory");
    if (rc)
        return fail(err, IPD_ERR_UPSTREAM,
                    "could not fetch: could not resolve host %s (%s)", host,
                    gai_strerror(rc));
    return IPD_OK;
}
