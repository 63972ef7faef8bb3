/*
 * requirement.c - the strict requirement grammar (see requirement.h).
 *
 * The input comes from a client and ends up as an argument to pip, which
 * understands far more than we want to offer: URLs, local paths, options
 * hidden in a name, environment markers.  So we accept a small canonical
 * language and say precisely what was wrong with anything else, cheapest
 * and most telling checks first.
 */
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "requirement.h"

#define HINT "give a package name and optional version, like pandas>=2.0"
#define NAME_RULE                                                              \
    "names are letters, digits, '-', '_' and '.', starting and ending with "   \
    "a letter or digit"
#define VERSION_RULE                                                           \
    "use digits and dots with optional aN, bN or rcN, .postN and .devN "       \
    "parts, like 2.0, 1.2.3rc1 or 2.0.post1"

/* Say why in why (when not NULL) and answer IPD_ERR_INVALID. */
#define fail(why, ...) ipd_buf_fail((why), IPD_ERR_INVALID, __VA_ARGS__)

/* ASCII only on purpose: <ctype.h> would follow the locale. */
static bool is_digit(char c)
{
    return c >= '0' && c <= '9';
}

static bool is_alnum(char c)
{
    return is_digit(c) || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

static bool is_name_char(char c)
{
    return is_alnum(c) || c == '-' || c == '_' || c == '.';
}

static bool is_op_char(char c)
{
    return c == '=' || c == '!' || c == '<' || c == '>' || c == '~';
}

static char to_lower(char c)
{
    return c >= 'A' && c <= 'Z' ? (char)(c - 'A' + 'a') : c;
}

/* PEP 503 on in[0..n), truncated to outsz - 1 bytes. */
static void normalize_n(const char *in, size_t n, char *out, size_t outsz)
{
    size_t k = 0;
    bool in_sep = false;
    IPD_ASSERT(outsz > 0);
    for (size_t i = 0; i < n && in[i] && k < outsz - 1; i++) {
        char c = in[i];
        if (c == '-' || c == '_' || c == '.') {
            if (!in_sep)
                out[k++] = '-';
            in_sep = true;
            continue;
        }
        in_sep = false;
        out[k++] = to_lower(c);
    }
    out[k] = '\0';
}

void ipd_package_name_normalize(const char *in, char *out, size_t outsz)
{
    normalize_n(in, strlen(in), out, outsz);
}

static bool name_valid_n(const char *s, size_t n)
{
    if (n == 0 || n > IPD_REQ_NAME_MAX)
        return false;
    if (!is_alnum(s[0]) || !is_alnum(s[n - 1]))
        return false;
    for (size_t i = 0; i < n; i++)
        if (!is_name_char(s[i]))
            return false;
    return true;
}

bool ipd_package_name_valid(const char *s)
{
    return s && name_valid_n(s, strnlen(s, IPD_REQ_NAME_MAX + 1));
}

/* Append src[0..n) to the NUL-terminated dst.  The input limit makes every
 * field big enough, so running out of room is a bug. */
static void append(char *dst, size_t dstsz, const char *src, size_t n)
{
    size_t k = strlen(dst);
    IPD_ASSERT(n < dstsz - k);
    memcpy(dst + k, src, n);
    dst[k + n] = '\0';
}

static bool ends_with_ci(const char *s, size_t n, const char *suffix)
{
    size_t m = strlen(suffix);
    if (m > n)
        return false;
    for (size_t i = 0; i < m; i++)
        if (to_lower(s[n - m + i]) != suffix[i])
            return false;
    return true;
}

/* Archives pip would install from disk rather than from the index. */
static const char *const archive_suffixes[] = {
    ".whl", ".zip",    ".tar.gz", ".tgz", ".tar.bz2",
    ".tbz", ".tar.xz", ".txz",    ".tar", ".egg",
};

static bool looks_like_archive(const char *s, size_t len)
{
    size_t n = 0;
    while (n < len && is_name_char(s[n]))
        n++;
    for (size_t i = 0; i < IPD_ARRAY_LEN(archive_suffixes); i++)
        if (ends_with_ci(s, n, archive_suffixes[i]))
            return true;
    return false;
}

/* Byte-level checks that need no grammar.  Their order decides which of
 * several problems is reported: the one a person most likely meant. */
static enum ipd_err check_bytes(const char *s, size_t len, struct ipd_buf *why)
{
    for (size_t i = 0; i < len; i++)
        if ((unsigned char)s[i] >= 0x80)
            return fail(why, "the requirement contains non-ASCII bytes; "
                             "package names and versions are plain ASCII");
    for (size_t i = 0; i < len; i++)
        if ((unsigned char)s[i] < 0x20 || s[i] == 0x7f)
            return fail(why,
                        "the requirement contains a control character "
                        "(tab, newline, NUL, ...) at position %zu; " HINT,
                        i + 1);
    if (s[0] == ' ' || s[len - 1] == ' ')
        return fail(why,
                    "leading or trailing whitespace is not allowed; " HINT);
    return IPD_OK;
}

static enum ipd_err check_forms(const char *s, size_t len, struct ipd_buf *why)
{
    if (s[0] == '-')
        return fail(
            why, "options like -e, -r or --index-url are not allowed; " HINT);
    if (memchr(s, ':', len) || memchr(s, '@', len))
        return fail(why,
                    "URLs and direct references (name @ url) are not "
                    "allowed; packages come from the configured index; " HINT);
    if (memchr(s, ';', len))
        return fail(why,
                    "environment markers (after ';') are not allowed; " HINT);
    if (memchr(s, '/', len) || s[0] == '.' || s[0] == '~' ||
        looks_like_archive(s, len))
        return fail(why, "paths and archive files are not allowed; "
                         "packages come from the configured index; " HINT);
    for (size_t i = 0; i < len; i++) {
        bool bad_star = s[i] == '*' && (i == 0 || s[i - 1] != '.');
        if (bad_star || strchr("$`|&(){}'\"\\?", s[i]))
            return fail(why,
                        "shell metacharacters like '%c' are not allowed; " HINT,
                        s[i]);
    }
    for (size_t i = 0; i + 1 < len; i++)
        if (s[i] == ' ' && s[i + 1] == ' ')
            return fail(why, "use at most one space between the parts of a "
                             "requirement, like pandas >= 2.0, < 3");
    return IPD_OK;
}

struct parser {
    const char *s;
    size_t len;
    size_t i; /* next byte */
    struct ipd_requirement *out;
    struct ipd_buf *why;
};

static char peek(const struct parser *p)
{
    return p->i < p->len ? p->s[p->i] : '\0';
}

static size_t name_end(const struct parser *p)
{
    size_t j = p->i;
    while (j < p->len && is_name_char(p->s[j]))
        j++;
    return j;
}

static enum ipd_err parse_name(struct parser *p)
{
    size_t start = p->i, end = name_end(p);
    size_t n = end - start;
    if (n == 0)
        return fail(p->why, "the package name is missing; " HINT);
    if (n > IPD_REQ_NAME_MAX)
        return fail(p->why, "the package name is longer than %d characters",
                    IPD_REQ_NAME_MAX);
    if (!name_valid_n(p->s + start, n))
        return fail(p->why, "the package name '%.*s' is not valid; " NAME_RULE,
                    (int)n, p->s + start);
    memcpy(p->out->name, p->s + start, n);
    p->out->name[n] = '\0';
    normalize_n(p->s + start, n, p->out->normalized,
                sizeof(p->out->normalized));
    p->i = end;
    return IPD_OK;
}

static enum ipd_err parse_extra(struct parser *p)
{
    size_t start = p->i, end = name_end(p);
    size_t n = end - start;
    char norm[IPD_REQ_MAX + 1];
    if (peek(p) == ' ')
        return fail(p->why, "spaces are only allowed around version "
                            "operators and commas, not inside [extras]");
    if (!name_valid_n(p->s + start, n))
        return fail(p->why,
                    "extras must be names separated by commas inside [], "
                    "like pandas[excel,plot]; " NAME_RULE);
    normalize_n(p->s + start, n, norm, sizeof(norm));
    if (p->out->extras[0])
        append(p->out->extras, sizeof(p->out->extras), ",", 1);
    append(p->out->extras, sizeof(p->out->extras), norm, strlen(norm));
    p->i = end;
    return IPD_OK;
}

static enum ipd_err parse_extras(struct parser *p)
{
    p->i++; /* '[' */
    for (;;) {
        enum ipd_err rc = parse_extra(p);
        if (rc)
            return rc;
        char c = peek(p);
        p->i++;
        if (c == ']')
            return IPD_OK;
        if (c == ' ')
            return fail(p->why, "spaces are only allowed around version "
                                "operators and commas, not inside [extras]");
        if (c != ',')
            return fail(p->why, "extras must be names separated by commas "
                                "inside [], like pandas[excel,plot]");
    }
}

static size_t skip_digits(const char *v, size_t i, size_t n)
{
    while (i < n && is_digit(v[i]))
        i++;
    return i;
}

/* A PEP 440 suffix part: the literal tag then one or more digits. */
static bool take_part(const char *v, size_t *i, size_t n, const char *tag)
{
    size_t m = strlen(tag);
    if (n - *i <= m || memcmp(v + *i, tag, m) != 0 || !is_digit(v[*i + m]))
        return false;
    *i = skip_digits(v, *i + m, n);
    return true;
}

/* Check v[0..n) against the version grammar; report whether it ends in
 * the ".*" wildcard and how many release parts it has. */
static bool version_valid(const char *v, size_t n, bool *wildcard,
                          size_t *parts)
{
    size_t i = 0;
    *wildcard = false;
    *parts = 0;
    for (;;) {
        size_t d = skip_digits(v, i, n);
        if (d == i)
            return false;
        i = d;
        (*parts)++;
        if (i + 1 < n && v[i] == '.' && is_digit(v[i + 1]))
            i++;
        else
            break;
    }
    if (i + 2 == n && v[i] == '.' && v[i + 1] == '*') {
        *wildcard = true;
        return true;
    }
    if (!take_part(v, &i, n, "a") && !take_part(v, &i, n, "b"))
        take_part(v, &i, n, "rc");
    take_part(v, &i, n, ".post");
    take_part(v, &i, n, ".dev");
    return i == n;
}

static const char *const operators[] = {"==", "!=", "<=", ">=", "<", ">", "~="};

static enum ipd_err parse_operator(struct parser *p, const char **op)
{
    size_t start = p->i;
    while (p->i < p->len && is_op_char(p->s[p->i]))
        p->i++;
    size_t n = p->i - start;
    if (n == 0)
        return fail(p->why,
                    "missing version operator before '%c'; use ==, !=, <=, "
                    ">=, <, > or ~=, like pandas>=2.0",
                    peek(p));
    for (size_t k = 0; k < IPD_ARRAY_LEN(operators); k++) {
        const char *o = operators[k];
        if (strlen(o) == n && !memcmp(o, p->s + start, n)) {
            *op = o;
            return IPD_OK;
        }
    }
    return fail(p->why,
                "unknown version operator '%.*s'; use ==, !=, <=, >=, <, > "
                "or ~=",
                (int)n, p->s + start);
}

static enum ipd_err bad_version(struct parser *p, const char *v, size_t n)
{
    /* "pandas>=1.0<2": the person meant two specifiers. */
    for (size_t i = 0; i < n; i++)
        if (v[i] == '<' || v[i] == '>' || v[i] == '=' || v[i] == '~')
            return fail(p->why, "separate version specifiers with commas, "
                                "like pandas>=1.0,<2");
    return fail(p->why, "version '%.*s' is not valid; " VERSION_RULE, (int)n,
                v);
}

static enum ipd_err parse_spec(struct parser *p)
{
    const char *op = NULL;
    enum ipd_err rc = parse_operator(p, &op);
    if (rc)
        return rc;
    if (peek(p) == ' ')
        p->i++;
    if (is_op_char(peek(p)))
        return fail(p->why,
                    "unknown version operator '%s %c'; write operators "
                    "without spaces, like >=",
                    op, peek(p));
    size_t start = p->i;
    while (p->i < p->len && p->s[p->i] != ',' && p->s[p->i] != ' ')
        p->i++;
    const char *v = p->s + start;
    size_t n = p->i - start;
    bool wildcard = false;
    size_t parts = 0;
    if (n == 0)
        return fail(p->why, "missing version after '%s', like pandas%s2.0", op,
                    op);
    if (!version_valid(v, n, &wildcard, &parts))
        return bad_version(p, v, n);
    if (wildcard && strcmp(op, "==") && strcmp(op, "!="))
        return fail(p->why, "wildcard versions like 1.2.* are only allowed "
                            "with == and !=");
    /* PEP 440: ~=1 would mean ">=1, ==*", which is not a thing. */
    if (!strcmp(op, "~=") && parts < 2)
        return fail(p->why, "~= needs a version with at least two parts, "
                            "like ~=1.4");
    char *spec = p->out->specifier;
    if (spec[0])
        append(spec, sizeof(p->out->specifier), ",", 1);
    append(spec, sizeof(p->out->specifier), op, strlen(op));
    append(spec, sizeof(p->out->specifier), v, n);
    return IPD_OK;
}

static enum ipd_err parse_specs(struct parser *p)
{
    for (;;) {
        enum ipd_err rc = parse_spec(p);
        if (rc)
            return rc;
        if (p->i == p->len)
            return IPD_OK;
        if (peek(p) == ' ')
            p->i++;
        if (peek(p) != ',')
            return fail(p->why, "separate version specifiers with commas, "
                                "like pandas>=1.0,<2");
        p->i++;
        if (peek(p) == ' ')
            p->i++;
        if (p->i == p->len)
            return fail(p->why, "missing version specifier after ','");
    }
}

/* What may follow the name and extras: nothing, or the specifiers. */
static enum ipd_err parse_tail(struct parser *p)
{
    char c = peek(p);
    if (p->i == p->len)
        return IPD_OK;
    if (c == ' ') {
        p->i++;
        /* "pandas 2.0" lacks an operator; "pandas numpy" is two names. */
        if (!is_op_char(peek(p)) && !is_digit(peek(p)))
            return fail(p->why,
                        "spaces are only allowed around version operators "
                        "and commas, not inside names or extras; install "
                        "one package per requirement");
        return parse_specs(p);
    }
    if (is_op_char(c))
        return parse_specs(p);
    if (c == ',')
        return fail(p->why, "unexpected ',' after the package name; give one "
                            "package per requirement");
    return fail(p->why,
                "unexpected character '%c' after the package name; " HINT, c);
}

static enum ipd_err parse(const char *s, size_t len,
                          struct ipd_requirement *out, struct ipd_buf *why)
{
    struct parser p = {.s = s, .len = len, .i = 0, .out = out, .why = why};
    enum ipd_err rc = parse_name(&p);
    if (rc)
        return rc;
    if (peek(&p) == '[') {
        rc = parse_extras(&p);
        if (rc)
            return rc;
    }
    return parse_tail(&p);
}

enum ipd_err ipd_requirement_parse(const char *s, size_t len,
                                   struct ipd_requirement *out,
                                   struct ipd_buf *why)
{
    enum ipd_err rc = IPD_OK;
    memset(out, 0, sizeof(*out));
    if (!s || len == 0) {
        rc = fail(why, "the requirement is empty; " HINT);
        goto out;
    }
    if (len > IPD_REQ_MAX) {
        rc = fail(why, "the requirement is longer than %d bytes", IPD_REQ_MAX);
        goto out;
    }
    rc = check_bytes(s, len, why);
    if (rc)
        goto out;
    rc = check_forms(s, len, why);
    if (rc)
        goto out;
    rc = parse(s, len, out, why);
out:
    if (rc)
        memset(out, 0, sizeof(*out));
    return rc;
}

enum ipd_err ipd_requirement_format(const struct ipd_requirement *r, char *out,
                                    size_t outsz)
{
    bool ex = r->extras[0] != '\0';
    int n = snprintf(out, outsz, "%s%s%s%s%s", r->normalized, ex ? "[" : "",
                     r->extras, ex ? "]" : "", r->specifier);
    if (n < 0 || (size_t)n >= outsz) {
        if (outsz)
            out[0] = '\0';
        return IPD_ERR_TOO_LARGE;
    }
    return IPD_OK;
}

bool ipd_requirement_list_ok(const json_t *list, char *why, size_t whysz)
{
    for (size_t i = 0; i < json_array_size(list); i++) {
        const json_t *s = json_array_get(list, i);
        /* Length is the requirement parser's business (an "invalid"
         * result), but nothing absurd gets queued. */
        if (!json_is_string(s) || json_string_length(s) > 4096 ||
            strlen(json_string_value(s)) != json_string_length(s)) {
            snprintf(why, whysz,
                     "packages[%zu] must be a string without NUL of at most "
                     "4096 bytes",
                     i);
            return false;
        }
    }
    return true;
}

/* ---- is an installed version enough? ------------------------------------ */

#define REL_MAX 8 /* release segments compared (1.24.2 is 3) */

/* A plain release version ("1.24.2": digits and dots, at most REL_MAX
 * segments) into rel, zero-padded; its segment count, or 0 when v is
 * anything else (pre, post, dev, local, epoch: pip decides those). */
static size_t release_parse(const char *v, size_t len, long rel[REL_MAX])
{
    size_t n = 0, i = 0;
    memset(rel, 0, REL_MAX * sizeof(*rel));
    while (i < len) {
        long x = 0;
        size_t d = 0;
        for (; i < len && v[i] >= '0' && v[i] <= '9' && d < 9; i++, d++)
            x = x * 10 + (v[i] - '0');
        if (!d || n == REL_MAX || (i < len && v[i] != '.') ||
            (i < len && i + 1 == len))
            return 0;
        rel[n++] = x;
        i += i < len; /* the dot */
    }
    return n;
}

static int release_cmp(const long a[REL_MAX], const long b[REL_MAX],
                       size_t upto)
{
    for (size_t i = 0; i < upto; i++)
        if (a[i] != b[i])
            return a[i] < b[i] ? -1 : 1;
    return 0;
}

/* One specifier (">=1.20", "==1.*", "~=1.4.2") against the release have;
 * -1 when it is outside this subset. */
static int spec_holds(const long have[REL_MAX], const char *sp, size_t len)
{
    size_t op = strspn(sp, "=!<>~");
    long want[REL_MAX];
    bool star = len > op + 2 && !strncmp(sp + len - 2, ".*", 2);
    size_t nw = release_parse(sp + op, len - op - (star ? 2 : 0), want);
    int c = release_cmp(have, want, REL_MAX);
    if (!nw || op < 1 || op > 2)
        return -1;
    if (star && (!strncmp(sp, "==", op) || !strncmp(sp, "!=", op)))
        return (release_cmp(have, want, nw) == 0) == (sp[0] == '=');
    if (star)
        return -1;
    if (op == 2 && !strncmp(sp, "==", 2))
        return c == 0;
    if (op == 2 && !strncmp(sp, "!=", 2))
        return c != 0;
    if (op == 2 && !strncmp(sp, ">=", 2))
        return c >= 0;
    if (op == 2 && !strncmp(sp, "<=", 2))
        return c <= 0;
    if (op == 2 && !strncmp(sp, "~=", 2)) /* >= V and == V[:-1].* */
        return nw >= 2 && c >= 0 && release_cmp(have, want, nw - 1) == 0;
    if (op == 1 && sp[0] == '>')
        return c > 0;
    if (op == 1 && sp[0] == '<')
        return c < 0;
    return -1;
}

bool ipd_requirement_met(const char *canon, const char *ver)
{
    struct ipd_requirement r;
    long have[REL_MAX];
    if (ipd_requirement_parse(canon, strlen(canon), &r, NULL) || r.extras[0] ||
        !release_parse(ver, strlen(ver), have))
        return false;
    for (const char *sp = r.specifier; *sp;) {
        size_t len = strcspn(sp, ",");
        if (spec_holds(have, sp, len) != 1)
            return false;
        sp += len + (sp[len] == ',');
    }
    return true;
}
