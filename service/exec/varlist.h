/*
 * varlist.h - a session's variables listing, read as the untrusted input
 * it is (docs/STYLE 5c; docs/API.md, "GET /v1/sessions/{id}/variables").
 *
 * The prelude of a session (service/exec/python/prelude.py,
 * _write_variables) writes /mnt/output/.interpd/variables.json when the
 * service asks ("V").  It runs in the same interpreter as the session's
 * code, which can replace anything it uses (json.dumps, os.replace, the
 * prelude's own functions) or write the file itself: what the service
 * reads there is whatever that code chose.  So the service reads at most
 * IPD_VARLIST_FILE_MAX bytes and keeps only what has the listing's shape:
 *
 *   {"variables": [{"name": str, "type": str, "repr": str}, ...],
 *    "truncated": bool}
 *
 * exactly those keys, no duplicate key.  An entry is kept when it is an
 * object of exactly name, type and repr, all strings, its name a Python
 * identifier of the ASCII kind or any non-ASCII letters (1 to
 * IPD_VARLIST_NAME_MAX bytes: no space, quote, angle bracket, control
 * character) and the names strictly ascending (sorted, no duplicate);
 * type and repr are cut to IPD_VARLIST_TYPE_MAX and IPD_VARLIST_REPR_MAX
 * characters (the last 3 of them "..."); at most IPD_VARLIST_COUNT_MAX
 * entries.  Any entry left out, and more entries than the count, make
 * "truncated" true; the document's own "truncated" can only add to that.
 */
#ifndef IPD_EXEC_VARLIST_H
#define IPD_EXEC_VARLIST_H

#include <stddef.h>

#include <jansson.h>

#include "../common/ipd.h"

#define IPD_VARLIST_FILE_MAX (1 << 20) /* bytes of the listing read */
#define IPD_VARLIST_COUNT_MAX 1000     /* entries returned */
#define IPD_VARLIST_NAME_MAX 256       /* bytes of a name (never cut) */
#define IPD_VARLIST_TYPE_MAX 256       /* characters of a type name */
#define IPD_VARLIST_REPR_MAX 500       /* characters of a repr */

/*
 * Parse len bytes of a listing (text need not be NUL-terminated; len over
 * IPD_VARLIST_FILE_MAX is refused).  IPD_OK: *out is a new reference to
 * the listing as above, every string a copy.  IPD_ERR_INVALID: the
 * document is not a listing (not JSON, not an object, other keys,
 * "variables" not an array, "truncated" not a boolean), *out NULL.
 * Pure: no I/O, thread-safe.
 */
enum ipd_err ipd_varlist_parse(const char *text, size_t len, json_t **out);

#endif
