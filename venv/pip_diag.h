/*
 * pip_diag.h - why a pip install failed, read from pip's stderr, and the
 * one-line message an install result gives for it.
 *
 * pip (23.x) ends nearly every failure with the same two lines, "Could not
 * find a version that satisfies the requirement X (from versions: ...)"
 * and "No matching distribution found for X", whatever happened: the index
 * was unreachable, the project has no such version, it has only source
 * distributions and --only-binary refused them.  The real cause is in the
 * lines before (a "WARNING: Retrying ... Failed to establish a new
 * connection" per retry; so pip must run with at least one retry for an
 * unreachable index to be told from an empty one) or nowhere (a refused
 * sdist: the caller has to ask the index, see IPD_PIP_NOT_FOUND).
 *
 * Pure functions: no I/O, no allocation.  Thread-safe.
 */
#ifndef IPD_PIP_DIAG_H
#define IPD_PIP_DIAG_H

#include <stdbool.h>
#include <stddef.h>

#include "requirement.h"

enum ipd_pip_failure {
    IPD_PIP_OTHER = 0,     /* none of the below: pip's last error line */
    IPD_PIP_UNREACHABLE,   /* the index (or a download) could not be
                              reached: refused, no DNS, timed out, TLS */
    IPD_PIP_NO_VERSION,    /* the project exists, no version matches; the
                              versions that do exist are in versions */
    IPD_PIP_NOT_FOUND,     /* reachable, but no installable file at all:
                              no such project, or only files pip may not
                              use (sdists under --only-binary) */
    IPD_PIP_BUILD_FAILED,  /* building a source distribution failed */
    IPD_PIP_BUILD_REFUSED, /* never from ipd_pip_diagnose: the caller's
                              verdict on a NOT_FOUND whose project the
                              index does list (ipd_pip_index_versions):
                              it has only sdists, and they are refused;
                              detail holds the versions */
};

#define IPD_PIP_DIAG_TEXT 320

struct ipd_pip_diag {
    enum ipd_pip_failure kind;
    /* The requirement pip could not satisfy, as pip wrote it
     * ("ipdtest-alpha==9.9"), without pip's "(from parent)" note. */
    char requirement[IPD_REQ_FORMAT_MAX];
    /* Its project name (the requirement's leading name), or "". */
    char project[IPD_REQ_NAME_MAX + 1];
    /* The parent that pulled it in ("ipdtest-withdep"), or "". */
    char parent[IPD_REQ_NAME_MAX + 1];
    /* NO_VERSION: "1.0, 2.0" (the newest end when too long);
     * UNREACHABLE: the network cause ("connection refused");
     * BUILD_FAILED and OTHER: the line of pip's output that says why. */
    char detail[IPD_PIP_DIAG_TEXT];
};

/*
 * Classify pip's stderr err[0..len) (need not be NUL-terminated) into *d.
 * Never fails: unknown output is IPD_PIP_OTHER with its best line.
 */
void ipd_pip_diagnose(const char *err, size_t len, struct ipd_pip_diag *d);

/*
 * The versions in the output of "pip index versions X" (stdout; the line
 * "Available versions: 2.0, 1.0") into versions; false when there is no
 * such line (pip found no version at all).
 */
bool ipd_pip_index_versions(const char *out, size_t len, char *versions,
                            size_t size);

/* Where pip looked, for the message. */
struct ipd_pip_where {
    const char *index_url; /* NULL: pip's default index (PyPI) */
    bool no_index;         /* --no-index: only the wheel folder */
    bool find_links;       /* a wheel folder was given */
    bool allow_sdist;      /* sdists may be built */
};

/*
 * The install result's message for d into out (always NUL-terminated,
 * printable ASCII).  An index URL appears without any user:password part.
 */
void ipd_pip_describe(const struct ipd_pip_diag *d,
                      const struct ipd_pip_where *w, char *out, size_t size);

#endif
