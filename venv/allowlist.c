/*
 * allowlist.c - the package allow list, dependency list and import map
 * (see allowlist.h for the file formats).
 *
 * Each file is read whole, then split in place: the names point into the
 * file's bytes, which the allowlist owns.  Lookups are bsearch over sorted
 * arrays, so nothing changes after loading and readers need no lock.
 */
#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "allowlist.h"

struct name_list {
    char *text;         /* the file's bytes, split in place */
    const char **names; /* into text; normalized, sorted, unique */
    size_t n;
};

struct import_entry {
    const char *import; /* into text; as written */
    const char *dist;   /* into text; normalized */
    unsigned line;      /* for the duplicate message */
};

struct ipd_allowlist {
    struct name_list allow;
    struct name_list deps;
    char *import_text;
    struct import_entry *imports; /* sorted by import */
    size_t nimports;
};

/* Read the whole file at path into a new NUL-terminated string (*text;
 * the caller frees it with free()), refusing files over the cap. */
static enum ipd_err read_file(const char *path, char **text, size_t *len,
                              struct ipd_buf *err)
{
    enum ipd_err rc = IPD_OK;
    struct ipd_buf b;
    char chunk[4096];
    FILE *f = NULL;
    ipd_buf_init(&b, IPD_ALLOWLIST_FILE_MAX);
    *text = NULL;
    f = fopen(path, "re");
    if (!f) {
        ipd_buf_addf(err, "cannot open %s: %s", path, strerror(errno));
        rc = IPD_ERR_IO;
        goto out;
    }
    for (;;) {
        size_t n = fread(chunk, 1, sizeof(chunk), f);
        rc = ipd_buf_add(&b, chunk, n);
        if (rc == IPD_ERR_TOO_LARGE)
            ipd_buf_addf(err, "%s is larger than %d bytes", path,
                         IPD_ALLOWLIST_FILE_MAX);
        if (rc)
            goto out;
        if (n < sizeof(chunk))
            break;
    }
    if (ferror(f)) {
        ipd_buf_addf(err, "cannot read %s: %s", path, strerror(errno));
        rc = IPD_ERR_IO;
        goto out;
    }
    if (memchr(b.buf, '\0', b.len)) {
        ipd_buf_addf(err, "%s contains a NUL byte", path);
        rc = IPD_ERR_INVALID;
        goto out;
    }
    *text = ipd_buf_detach(&b, len);
out:
    if (f)
        fclose(f);
    ipd_buf_release(&b);
    return rc;
}

static bool is_blank(char c)
{
    return c == ' ' || c == '\t' || c == '\r';
}

/*
 * Cut the next line out of *p (NUL-terminating it in place), drop its
 * comment and surrounding blanks, and advance *p past it.  Returns the
 * line's content, "" for blank lines, or NULL at the end of the text.
 */
static char *next_line(char **p, char *end)
{
    char *s = *p, *nl, *hash;
    if (s >= end)
        return NULL;
    nl = memchr(s, '\n', (size_t)(end - s));
    if (nl) {
        *nl = '\0';
        *p = nl + 1;
    } else {
        *p = end;
    }
    hash = strchr(s, '#');
    if (hash)
        *hash = '\0';
    while (is_blank(*s))
        s++;
    char *e = s + strlen(s);
    while (e > s && is_blank(e[-1]))
        *--e = '\0';
    return s;
}

/* Split s at its first run of blanks: NUL-terminate the first word and
 * return the rest (NULL when s is one word). */
static char *split_word(char *s)
{
    while (*s && !is_blank(*s))
        s++;
    if (!*s)
        return NULL;
    *s++ = '\0';
    while (is_blank(*s))
        s++;
    return s;
}

/* Check and normalize one package name in place. */
static enum ipd_err take_name(char *s, const char *path, unsigned line,
                              struct ipd_buf *err)
{
    char norm[IPD_REQ_NAME_MAX + 1];
    if (!ipd_package_name_valid(s)) {
        ipd_buf_addf(err,
                     "%s:%u: '%.*s' is not a valid package name (letters, "
                     "digits, '-', '_' and '.', starting and ending with a "
                     "letter or digit, at most %d characters)",
                     path, line, 120, s, IPD_REQ_NAME_MAX);
        return IPD_ERR_INVALID;
    }
    ipd_package_name_normalize(s, norm, sizeof(norm));
    memcpy(s, norm, strlen(norm) + 1);
    return IPD_OK;
}

static int cmp_names(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static void push_name(struct name_list *l, size_t *cap, const char *name)
{
    if (l->n == *cap) {
        *cap = *cap ? *cap * 2 : 64;
        l->names = ipd_xrealloc(l->names, *cap * sizeof(*l->names));
    }
    l->names[l->n++] = name;
}

static void sort_unique(struct name_list *l)
{
    size_t k = 0;
    if (!l->n)
        return;
    qsort(l->names, l->n, sizeof(*l->names), cmp_names);
    for (size_t i = 1; i < l->n; i++)
        if (strcmp(l->names[i], l->names[k]))
            l->names[++k] = l->names[i];
    l->n = k + 1;
}

static enum ipd_err load_names(const char *path, struct name_list *l,
                               struct ipd_buf *err)
{
    size_t len = 0, cap = 0;
    unsigned lineno = 0;
    char *p, *s;
    enum ipd_err rc = read_file(path, &l->text, &len, err);
    if (rc)
        return rc;
    p = l->text;
    for (;;) {
        s = next_line(&p, l->text + len);
        if (!s)
            break;
        lineno++;
        if (!*s)
            continue;
        if (split_word(s)) {
            ipd_buf_addf(err, "%s:%u: expected one package name per line", path,
                         lineno);
            return IPD_ERR_INVALID;
        }
        rc = take_name(s, path, lineno, err);
        if (rc)
            return rc;
        push_name(l, &cap, s);
    }
    sort_unique(l);
    return IPD_OK;
}

/* An ASCII Python identifier of at most IPD_REQ_NAME_MAX characters. */
static bool identifier_valid(const char *s, size_t n)
{
    if (n == 0 || n > IPD_REQ_NAME_MAX || (s[0] >= '0' && s[0] <= '9'))
        return false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                  (c >= '0' && c <= '9') || c == '_';
        if (!ok)
            return false;
    }
    return true;
}

static int cmp_imports(const void *a, const void *b)
{
    const struct import_entry *x = a, *y = b;
    return strcmp(x->import, y->import);
}

static enum ipd_err parse_import_line(char *s, const char *path,
                                      unsigned lineno, struct import_entry *e,
                                      struct ipd_buf *err)
{
    char *dist = split_word(s);
    if (!dist || !*dist || split_word(dist)) {
        ipd_buf_addf(err, "%s:%u: expected `import_name distribution`", path,
                     lineno);
        return IPD_ERR_INVALID;
    }
    if (!identifier_valid(s, strlen(s))) {
        ipd_buf_addf(err, "%s:%u: '%.*s' is not a Python identifier", path,
                     lineno, 120, s);
        return IPD_ERR_INVALID;
    }
    enum ipd_err rc = take_name(dist, path, lineno, err);
    if (rc)
        return rc;
    e->import = s;
    e->dist = dist;
    e->line = lineno;
    return IPD_OK;
}

/* Sort, drop exact repeats, refuse an import name with two answers. */
static enum ipd_err sort_imports(struct ipd_allowlist *al, const char *path,
                                 struct ipd_buf *err)
{
    size_t k = 0;
    if (!al->nimports)
        return IPD_OK;
    qsort(al->imports, al->nimports, sizeof(*al->imports), cmp_imports);
    for (size_t i = 1; i < al->nimports; i++) {
        struct import_entry *prev = &al->imports[k], *e = &al->imports[i];
        if (strcmp(prev->import, e->import)) {
            al->imports[++k] = *e;
            continue;
        }
        if (strcmp(prev->dist, e->dist)) {
            unsigned a = prev->line < e->line ? prev->line : e->line;
            unsigned b = prev->line < e->line ? e->line : prev->line;
            ipd_buf_addf(err,
                         "%s:%u: import name '%s' is already mapped on "
                         "line %u",
                         path, b, e->import, a);
            return IPD_ERR_INVALID;
        }
    }
    al->nimports = k + 1;
    return IPD_OK;
}

static enum ipd_err load_imports(const char *path, struct ipd_allowlist *al,
                                 struct ipd_buf *err)
{
    size_t len = 0, cap = 0;
    unsigned lineno = 0;
    char *p, *s;
    enum ipd_err rc = read_file(path, &al->import_text, &len, err);
    if (rc)
        return rc;
    p = al->import_text;
    for (;;) {
        s = next_line(&p, al->import_text + len);
        if (!s)
            break;
        lineno++;
        if (!*s)
            continue;
        if (al->nimports == cap) {
            cap = cap ? cap * 2 : 64;
            al->imports = ipd_xrealloc(al->imports, cap * sizeof(*al->imports));
        }
        rc =
            parse_import_line(s, path, lineno, &al->imports[al->nimports], err);
        if (rc)
            return rc;
        al->nimports++;
    }
    return sort_imports(al, path, err);
}

enum ipd_err ipd_allowlist_load(const char *allow_path, const char *deps_path,
                                const char *import_map_path,
                                struct ipd_allowlist **out, struct ipd_buf *err)
{
    enum ipd_err rc = IPD_OK;
    struct ipd_allowlist *al = ipd_xcalloc(1, sizeof(*al));
    struct ipd_buf sink;
    ipd_buf_init(&sink, 1024);
    if (!err)
        err = &sink;
    *out = NULL;
    rc = load_names(allow_path, &al->allow, err);
    if (rc)
        goto out;
    if (deps_path) {
        rc = load_names(deps_path, &al->deps, err);
        if (rc)
            goto out;
    }
    if (import_map_path) {
        rc = load_imports(import_map_path, al, err);
        if (rc)
            goto out;
    }
    *out = al;
    al = NULL;
out:
    ipd_allowlist_free(al);
    ipd_buf_release(&sink);
    return rc;
}

void ipd_allowlist_free(struct ipd_allowlist *al)
{
    if (!al)
        return;
    free(al->allow.text);
    free(al->allow.names);
    free(al->deps.text);
    free(al->deps.names);
    free(al->import_text);
    free(al->imports);
    free(al);
}

static bool list_has(const struct name_list *l, const char *normalized)
{
    if (!l->n)
        return false;
    return bsearch(&normalized, l->names, l->n, sizeof(*l->names), cmp_names) !=
           NULL;
}

/* Normalize a queried name into norm; false when it can't be a package. */
static bool query_name(const char *name, char norm[IPD_REQ_NAME_MAX + 1])
{
    if (!ipd_package_name_valid(name))
        return false;
    ipd_package_name_normalize(name, norm, IPD_REQ_NAME_MAX + 1);
    return true;
}

bool ipd_allowlist_allows(const struct ipd_allowlist *al, const char *name)
{
    char norm[IPD_REQ_NAME_MAX + 1];
    return query_name(name, norm) && list_has(&al->allow, norm);
}

bool ipd_allowlist_allows_dep(const struct ipd_allowlist *al, const char *name)
{
    char norm[IPD_REQ_NAME_MAX + 1];
    if (!query_name(name, norm))
        return false;
    return list_has(&al->allow, norm) || list_has(&al->deps, norm);
}

size_t ipd_allowlist_count(const struct ipd_allowlist *al)
{
    return al->allow.n;
}

const char *ipd_allowlist_name(const struct ipd_allowlist *al, size_t i)
{
    return i < al->allow.n ? al->allow.names[i] : NULL;
}

size_t ipd_allowlist_import_count(const struct ipd_allowlist *al)
{
    return al->nimports;
}

const char *ipd_allowlist_import_at(const struct ipd_allowlist *al, size_t i,
                                    const char **dist)
{
    *dist = i < al->nimports ? al->imports[i].dist : NULL;
    return i < al->nimports ? al->imports[i].import : NULL;
}

const char *ipd_allowlist_dist_for_import(const struct ipd_allowlist *al,
                                          const char *import_name,
                                          char out[IPD_REQ_NAME_MAX + 1])
{
    char top[IPD_REQ_NAME_MAX + 1];
    struct import_entry key = {.import = top};
    const struct import_entry *hit = NULL;
    size_t n = 0;
    if (!import_name)
        return NULL;
    n = strcspn(import_name, ".");
    if (!identifier_valid(import_name, n))
        return NULL;
    memcpy(top, import_name, n);
    top[n] = '\0';
    if (al->nimports)
        hit = bsearch(&key, al->imports, al->nimports, sizeof(*al->imports),
                      cmp_imports);
    if (hit) {
        memcpy(out, hit->dist, strlen(hit->dist) + 1);
        return out;
    }
    if (!ipd_package_name_valid(top))
        return NULL;
    ipd_package_name_normalize(top, out, IPD_REQ_NAME_MAX + 1);
    return out;
}
