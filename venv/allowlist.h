/*
 * allowlist.h - which packages clients may install, which may only come
 * along as dependencies, and which distribution provides an import name.
 *
 * Three plain-text files, all capped at IPD_ALLOWLIST_FILE_MAX bytes:
 *
 *   allow list   one package name per line; clients may install these
 *   deps list    same format; allowed only as dependencies of the above
 *   import map   "import_name distribution" per line, separated by spaces
 *                or tabs ("sklearn scikit-learn", "PIL pillow")
 *
 * In every file '#' starts a comment that runs to the end of the line,
 * blank lines are ignored, and surrounding spaces, tabs and a CR (CRLF
 * files) are trimmed.  Package names must be PEP 508 names (see
 * ipd_package_name_valid) and are stored PEP 503-normalized, so lookups
 * match the way package indexes do ("Scikit_Learn" finds scikit-learn).
 * Repeated names are harmless.  Import names are case-sensitive Python
 * identifiers (PIL is not pil); one import name may map to only one
 * distribution.  Any other line is an error naming the file and line.
 *
 * The default files are venv/data/allowlist.txt and
 * venv/data/import-names.txt.
 *
 * Thread-safety: loading builds an immutable object; every query may run
 * concurrently from any thread until ipd_allowlist_free.
 */
#ifndef IPD_ALLOWLIST_H
#define IPD_ALLOWLIST_H

#include <stdbool.h>
#include <stddef.h>

#include "../service/common/buf.h"
#include "../service/common/ipd.h"
#include "requirement.h"

#define IPD_ALLOWLIST_FILE_MAX (1024 * 1024) /* bytes per file */

struct ipd_allowlist;

/*
 * Load the lists.  deps_path and import_map_path may be NULL (no
 * dependency-only names; no import mappings).
 * @param out [out] a new allowlist on success, NULL on failure; free it
 *            with ipd_allowlist_free.
 * @param err [out] on failure, a message naming the file (and line) is
 *            appended; may be NULL.
 * @return IPD_OK; IPD_ERR_IO when a file can't be opened or read;
 *         IPD_ERR_TOO_LARGE when one is over IPD_ALLOWLIST_FILE_MAX;
 *         IPD_ERR_INVALID for a bad line or a NUL byte.
 */
enum ipd_err ipd_allowlist_load(const char *allow_path, const char *deps_path,
                                const char *import_map_path,
                                struct ipd_allowlist **out,
                                struct ipd_buf *err);

/* Free everything, including the strings handed out.  NULL is fine. */
void ipd_allowlist_free(struct ipd_allowlist *al);

/* True when name (any spelling; normalized here) is on the allow list,
 * i.e. a client may ask to install it.  False for invalid names. */
bool ipd_allowlist_allows(const struct ipd_allowlist *al, const char *name);

/* True when name may be installed as a dependency: on the allow list or
 * on the deps list. */
bool ipd_allowlist_allows_dep(const struct ipd_allowlist *al, const char *name);

/* Number of names on the allow list (deps-only names not counted). */
size_t ipd_allowlist_count(const struct ipd_allowlist *al);

/* The i-th allowed name, normalized, in ascending strcmp order and
 * without repeats (for GET /v1/packages).  Borrowed: valid until
 * ipd_allowlist_free.  NULL when i >= ipd_allowlist_count(al). */
const char *ipd_allowlist_name(const struct ipd_allowlist *al, size_t i);

/* Number of entries of the import map. */
size_t ipd_allowlist_import_count(const struct ipd_allowlist *al);

/* The i-th entry of the import map, in ascending strcmp order of import
 * names: the import name, and in *dist the distribution (normalized).
 * Both borrowed: valid until ipd_allowlist_free.  NULL (and *dist NULL)
 * when i >= ipd_allowlist_import_count(al). */
const char *ipd_allowlist_import_at(const struct ipd_allowlist *al, size_t i,
                                    const char **dist);

/*
 * The distribution that provides the top-level module import_name, for
 * turning "ModuleNotFoundError: sklearn" into "install scikit-learn".  A
 * dotted name counts by its first part ("PIL.Image" is PIL).  The import
 * map decides when it has the name; otherwise the answer is the name
 * itself, normalized ("tqdm" -> "tqdm", "Foo_bar" -> "foo-bar").  The
 * result is NOT checked against the lists: ask ipd_allowlist_allows next.
 * @param out [out] receives the distribution name.
 * @return out, or NULL when import_name's first part is not an ASCII
 *         Python identifier of at most IPD_REQ_NAME_MAX characters or its
 *         default would not be a valid package name ("_ctypes").
 */
const char *ipd_allowlist_dist_for_import(const struct ipd_allowlist *al,
                                          const char *import_name,
                                          char out[IPD_REQ_NAME_MAX + 1]);

#endif
