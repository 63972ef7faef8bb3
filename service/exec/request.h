/*
 * request.h - an execution request parsed apart from any transport.
 *
 * A JSON document (the body of POST /v1/executions, later an MCP tool
 * call's arguments or a streamed request) and the principal it acts for
 * become a job for the pool (pool.h), or a refusal: the contract's error
 * code (CONTRACT.md, "invalid_request", "not_found", ...) and its
 * message.  Nothing here replies: the transport carries the refusal out
 * (api/reply.c's ipd_reply_refusal for HTTP).
 *
 * Thread-safety: the parser keeps no state; every call may run on any
 * thread.
 */
#ifndef IPD_EXEC_REQUEST_H
#define IPD_EXEC_REQUEST_H

#include <stdbool.h>
#include <stddef.h>

#include <jansson.h>

#include "../common/principal.h"
#include "../fetch/fetch.h"
#include "policy.h"
#include "pool.h"

#define IPD_EXEC_CODE_MAX (1024 * 1024) /* CONTRACT.md: code at most 1 MiB */
#define IPD_EXEC_FILES_MAX 100          /* input files per execution */
#define IPD_EXEC_CALLBACK_URL_MAX 2048  /* callback_url bytes */
#define IPD_EXEC_TIMEOUT_MAX_S 86400    /* a request's timeout, seconds */
#define IPD_EXEC_FUNCTIONS_MAX 64       /* "functions" names */
#define IPD_EXEC_FUNCTION_NAME_MAX 64   /* one name's characters */
#define IPD_REFUSAL_MESSAGE_MAX 1024

/* Why a request is refused: the contract's error code and a message for
 * the client (request bytes in it are cut at the buffer's end, not
 * cleaned: the transport makes it valid UTF-8). */
struct ipd_refusal {
    const char *code; /* static: "invalid_request", "forbidden",
                         "not_found", "payload_too_large" */
    char message[IPD_REFUSAL_MESSAGE_MAX];
};

/* What the parser checks a request against (all borrowed). */
struct ipd_exec_request_env {
    const struct ipd_exec_policy *policies; /* the configured policies */
    size_t n_policies;
    const struct ipd_fetch_opts *fetch; /* the guard a callback_url passes
                                           (its allowlist); NULL: none */
};

/*
 * Parse doc (borrowed; any JSON value) for who.  IPD_OK: *out is a new
 * job (ipd_exec_job_free) carrying who's tenant, user and admin flag, the
 * policy it runs under (who's, or a stricter one the request names) and
 * the shares of who's policy; [out] *async says the caller does not wait
 * for it ("async": true, or a callback_url).  IPD_ERR_INVALID: *out NULL
 * and refusal says why (the only error).
 * Checks, in order: the body's shape and code (at most
 * IPD_EXEC_CODE_MAX bytes: payload_too_large), files (an array of at most
 * IPD_EXEC_FILES_MAX), timeout, packages, async, callback_url (through
 * env->fetch's guard on its face), session_id (a malformed one:
 * not_found), store_outputs, variables, functions (at most
 * IPD_EXEC_FUNCTIONS_MAX distinct identifiers), the policy (who's must be
 * configured: forbidden), then each file id (a malformed one: not_found).
 */
enum ipd_err ipd_exec_request_parse(const struct ipd_exec_request_env *env,
                                    const struct ipd_principal *who,
                                    const json_t *doc,
                                    struct ipd_exec_job **out, bool *async,
                                    struct ipd_refusal *refusal);

#endif
