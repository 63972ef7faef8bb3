/*
 * principal.h - who a request acts for: what authentication produces
 * (api/auth.c: from an API key and the X-User-Id header, or from a
 * scoped token, token.h) and what every handler, execution request and
 * job sees.
 *
 * A principal holds no secret: the tenant's callback secrets stay in the
 * key store (storage/meta.h) and are read by the callback sender when it
 * signs (service/exec/callbacks.h).  A plain value: copy it freely.
 */
#ifndef IPD_PRINCIPAL_H
#define IPD_PRINCIPAL_H

#include <stdbool.h>
#include <stdint.h>

#include "util.h"

#define IPD_TENANT_MAX 65   /* 64 characters and the NUL */
#define IPD_USER_ID_MAX 129 /* 128 characters and the NUL */
#define IPD_POLICY_MAX 32   /* execution policy names, NUL included */

/* What a principal may do, as flags.  An API key may do everything
 * (ALL: every flag there is and will be, within an int for ISO C); a
 * scoped token (token.h) some of TOKEN_ALL.  A route names the scope it
 * needs (api/http.h); one that names none is for API keys only. */
enum ipd_scope {
    IPD_SCOPE_FILES_READ = 1 << 0,  /* "files:read": list, get, download */
    IPD_SCOPE_FILES_WRITE = 1 << 1, /* "files:write": upload, delete */
    IPD_SCOPE_EXECUTIONS = 1 << 2,  /* "executions": run, list, cancel,
                                       answer calls */
    IPD_SCOPE_SESSIONS = 1 << 3,    /* "sessions": create, use, end */
    IPD_SCOPE_TOKEN_ALL = 0xf,
    IPD_SCOPE_ALL = 0x7fffffff,
};

struct ipd_principal {
    char tenant[IPD_TENANT_MAX];
    char user_id[IPD_USER_ID_MAX]; /* the end user, "" until known (the
                                      routes without IPD_H_USER) */
    char key_id[IPD_ID_MAX];       /* the credential, for logs only */
    char policy[IPD_POLICY_MAX];   /* execution policy, never "" */
    bool admin;
    bool token;            /* a scoped token's (never admin) */
    uint32_t scopes;       /* enum ipd_scope flags */
    int64_t expires_at_ms; /* wall clock; 0: never */
};

#endif
