/*
 * pip_diag.c - classify pip's failures (see pip_diag.h).  The phrases
 * matched here are pip 23's own; tests/unit/venv/pip-output/ holds real
 * captured outputs, one per case.
 */
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "pip_diag.h"

#define NOT_SATISFIED "Could not find a version that satisfies the requirement "
#define FROM_VERSIONS " (from versions: "

/* Copy s[0..n) to out as printable ASCII (others become '?'), cut to fit. */
static void copy_clean(const char *s, size_t n, char *out, size_t size)
{
    if (!size)
        return;
    if (n >= size)
        n = size - 1;
    for (size_t i = 0; i < n; i++)
        out[i] = (s[i] >= 0x20 && s[i] < 0x7f) ? s[i] : '?';
    out[n] = '\0';
}

static const char *find_in(const char *s, size_t n, const char *needle)
{
    size_t k = strlen(needle);
    for (size_t i = 0; k <= n && i <= n - k; i++)
        if (!strncasecmp(s + i, needle, k))
            return s + i;
    return NULL;
}

/* The network cause a line of pip's names, or NULL when it names none.
 * urllib3 words its errors after the OS's (errno strings, getaddrinfo). */
static const char *net_cause(const char *s, size_t n)
{
    static const struct {
        const char *phrase, *cause;
    } map[] = {
        /* the executor's note of its egress proxy's 403 */
        {"is not allowed (", "its address is refused by the SSRF guard: "
                             "allow it with --fetch-allow"},
        {"name resolution", "name resolution failed"},
        {"Name or service not known", "name resolution failed"},
        {"No address associated", "name resolution failed"},
        {"Connection refused", "connection refused"},
        {"Network is unreachable", "network is unreachable"},
        {"No route to host", "no route to host"},
        {"timed out", "timed out"},
        {"SSLError", "TLS error"},
        {"CERTIFICATE_VERIFY_FAILED", "TLS certificate not trusted"},
        {"ProxyError", "proxy error"},
        {"Failed to establish a new connection", "connection failed"},
        {"Could not fetch URL", "could not fetch the index page"},
        {"Max retries exceeded", "connection failed"},
    };
    for (size_t i = 0; i < sizeof(map) / sizeof(map[0]); i++)
        if (find_in(s, n, map[i].phrase))
            return map[i].cause;
    return NULL;
}

/* "X (from P)" or "X" from the text after NOT_SATISFIED. */
static void parse_requirement(const char *s, size_t n, struct ipd_pip_diag *d)
{
    const char *from = find_in(s, n, " (from ");
    size_t rlen = from ? (size_t)(from - s) : n;
    size_t nlen = 0;
    copy_clean(s, rlen, d->requirement, sizeof(d->requirement));
    while (nlen < rlen &&
           (s[nlen] == '-' || s[nlen] == '_' || s[nlen] == '.' ||
            (s[nlen] >= '0' && s[nlen] <= '9') ||
            ((s[nlen] | 0x20) >= 'a' && (s[nlen] | 0x20) <= 'z')))
        nlen++;
    copy_clean(s, nlen, d->project, sizeof(d->project));
    if (from) {
        const char *p = from + strlen(" (from ");
        const char *close = memchr(p, ')', (size_t)(s + n - p));
        if (close)
            copy_clean(p, (size_t)(close - p), d->parent, sizeof(d->parent));
    }
}

/* The list "1.0, 2.0" into d->detail; when too long, its newest end (pip
 * lists oldest first). */
static void set_versions(const char *v, size_t n, struct ipd_pip_diag *d)
{
    size_t room = sizeof(d->detail) - 1;
    if (n > room) {
        const char *cut = v + n - (room - 4);
        const char *comma = memchr(cut, ',', (size_t)(v + n - cut));
        if (comma)
            cut = comma + 2 <= v + n ? comma + 2 : comma + 1;
        memcpy(d->detail, "..., ", 5);
        copy_clean(cut, (size_t)(v + n - cut), d->detail + 5,
                   sizeof(d->detail) - 5);
        return;
    }
    copy_clean(v, n, d->detail, sizeof(d->detail));
}

/* What the lines of pip's stderr showed. */
struct scan {
    const char *cause; /* a network cause seen in any line */
    const char *unsat; /* text after NOT_SATISFIED, up to the line end */
    size_t unsat_len;
    const char *last_error; /* the last "ERROR:" line, else last line */
    size_t last_error_len;
    bool last_is_error;
    const char *build; /* first line of a failed build's output */
    size_t build_len;
    bool build_failed;
};

static void scan_line(const char *p, size_t len, bool *in_output,
                      struct scan *sc)
{
    const char *t = p, *e = p + len;
    const char *c = net_cause(p, len);
    while (t < e && (*t == ' ' || (unsigned char)*t >= 0x80))
        t++; /* indentation and pip's box-drawing characters */
    if (c && !sc->cause)
        sc->cause = c;
    if (len && (!strncmp(p, "ERROR:", 6) || !sc->last_is_error)) {
        sc->last_error = p;
        sc->last_error_len = len;
        sc->last_is_error = !strncmp(p, "ERROR:", 6);
    }
    const char *u = find_in(p, len, NOT_SATISFIED);
    if (u && !sc->unsat) {
        sc->unsat = u + strlen(NOT_SATISFIED);
        sc->unsat_len = (size_t)(e - sc->unsat);
    }
    if (find_in(p, len, "subprocess-exited-with-error") ||
        find_in(p, len, "metadata-generation-failed") ||
        find_in(p, len, "Failed building wheel"))
        sc->build_failed = true;
    /* A failed build: the first line inside pip's "[N lines of output]"
     * block says why. */
    if (*in_output && !sc->build && t < e) {
        sc->build = t;
        sc->build_len = (size_t)(e - t);
    }
    *in_output = find_in(p, len, "lines of output]") != NULL;
}

/* NOT_SATISFIED's "X (from P) (from versions: a, b)" into d. */
static void diagnose_unsat(const struct scan *sc, struct ipd_pip_diag *d)
{
    const char *s = sc->unsat;
    size_t n = sc->unsat_len;
    /* The versions note is the last parenthesis of the line. */
    const char *fv = NULL;
    for (const char *q = find_in(s, n, FROM_VERSIONS); q;
         q = find_in(q + 1, (size_t)(s + n - q - 1), FROM_VERSIONS))
        fv = q;
    if (!fv) {
        parse_requirement(s, n, d);
        d->kind = IPD_PIP_NOT_FOUND;
        return;
    }
    parse_requirement(s, (size_t)(fv - s), d);
    const char *v = fv + strlen(FROM_VERSIONS);
    const char *close = memchr(v, ')', (size_t)(s + n - v));
    size_t vlen = close ? (size_t)(close - v) : (size_t)(s + n - v);
    if (vlen == 4 && !strncmp(v, "none", 4)) {
        /* No file at all: from an unreachable index, or from one that
         * has nothing for us; only pip's retry warnings tell. */
        d->kind = sc->cause ? IPD_PIP_UNREACHABLE : IPD_PIP_NOT_FOUND;
        if (sc->cause)
            copy_clean(sc->cause, strlen(sc->cause), d->detail,
                       sizeof(d->detail));
        return;
    }
    d->kind = IPD_PIP_NO_VERSION;
    set_versions(v, vlen, d);
}

void ipd_pip_diagnose(const char *err, size_t len, struct ipd_pip_diag *d)
{
    struct scan sc;
    bool in_output = false;
    const char *p = err, *end = err + len;
    memset(d, 0, sizeof(*d));
    memset(&sc, 0, sizeof(sc));
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        const char *e = nl ? nl : end;
        scan_line(p, (size_t)(e - p), &in_output, &sc);
        p = nl ? nl + 1 : end;
    }
    if (sc.unsat) {
        diagnose_unsat(&sc, d);
        return;
    }
    if (sc.build_failed) {
        d->kind = IPD_PIP_BUILD_FAILED;
        if (sc.build)
            copy_clean(sc.build, sc.build_len, d->detail, sizeof(d->detail));
        else if (sc.last_error)
            copy_clean(sc.last_error, sc.last_error_len, d->detail,
                       sizeof(d->detail));
        return;
    }
    /* A download that failed after the index answered ("ERROR: Could not
     * install packages due to an OSError: ... Max retries exceeded"). */
    const char *c =
        sc.last_is_error ? net_cause(sc.last_error, sc.last_error_len) : NULL;
    if (c) {
        d->kind = IPD_PIP_UNREACHABLE;
        copy_clean(c, strlen(c), d->detail, sizeof(d->detail));
        return;
    }
    d->kind = IPD_PIP_OTHER;
    if (sc.last_error)
        copy_clean(sc.last_error, sc.last_error_len, d->detail,
                   sizeof(d->detail));
    else
        snprintf(d->detail, sizeof(d->detail), "pip failed without a message");
}

bool ipd_pip_index_versions(const char *out, size_t len, char *versions,
                            size_t size)
{
    static const char tag[] = "Available versions: ";
    const char *v = find_in(out, len, tag);
    if (!v || !size)
        return false;
    v += strlen(tag);
    const char *nl = memchr(v, '\n', (size_t)(out + len - v));
    size_t n = nl ? (size_t)(nl - v) : (size_t)(out + len - v);
    copy_clean(v, n, versions, size);
    return n > 0;
}

/* The index for a message: the URL without user:password@, or PyPI. */
static void index_name(const char *url, char *out, size_t size)
{
    if (!url) {
        snprintf(out, size, "pypi.org (pip's default index)");
        return;
    }
    const char *host = strstr(url, "://");
    host = host ? host + 3 : url;
    const char *slash = strchr(host, '/');
    const char *at = strchr(host, '@');
    size_t scheme = (size_t)(host - url);
    if (at && (!slash || at < slash) && scheme < size) {
        copy_clean(url, scheme, out, size);
        copy_clean(at + 1, strlen(at + 1), out + scheme, size - scheme);
        return;
    }
    copy_clean(url, strlen(url), out, size);
}

void ipd_pip_describe(const struct ipd_pip_diag *d,
                      const struct ipd_pip_where *w, char *out, size_t size)
{
    char where[300], dep[IPD_REQ_NAME_MAX + 40] = "";
    if (w->no_index)
        snprintf(where, sizeof(where), "the wheel folder (--pip-find-links)");
    else
        index_name(w->index_url, where, sizeof(where));
    if (d->parent[0])
        snprintf(dep, sizeof(dep), " (a dependency of %s)", d->parent);
    switch (d->kind) {
    case IPD_PIP_UNREACHABLE:
        snprintf(out, size,
                 "the package index is unreachable: %s (%s); nothing was "
                 "installed",
                 where, d->detail);
        break;
    case IPD_PIP_NO_VERSION:
        snprintf(out, size, "no such version: %s%s; %s has %s", d->requirement,
                 dep, where, d->detail);
        break;
    case IPD_PIP_NOT_FOUND:
        snprintf(out, size,
                 "%s%s: %s has no such project, or no wheel of it for this "
                 "Python%s",
                 d->requirement, dep, where,
                 w->allow_sdist ? ""
                                : " (source distributions are not built"
                                  " here)");
        break;
    case IPD_PIP_BUILD_REFUSED:
        snprintf(out, size,
                 "build refused: %s%s has only source distributions on %s "
                 "(versions %s), and this server installs wheels only "
                 "(--pip-allow-sdist 0)",
                 d->project, dep, where, d->detail);
        break;
    case IPD_PIP_BUILD_FAILED:
        snprintf(out, size, "building from source failed: %s", d->detail);
        break;
    case IPD_PIP_OTHER:
    default: copy_clean(d->detail, strlen(d->detail), out, size); break;
    }
}
