/*
 * filetype.h - what a file is: libmagic's MIME type checked against the
 * extension, reduced to the category a bot shows a person (CONTRACT.md
 * "file_type").  libmagic's types stay in storage/filetype_magic.c.
 */
#ifndef IPD_FILETYPE_H
#define IPD_FILETYPE_H

#include <stddef.h>

#include "../service/common/ipd.h"
#include "meta.h"

struct ipd_filetype;

/* Load the magic database.  *out is new; free with ipd_filetype_free.
 * Thread-safe to use from many threads after this: a pool of libmagic
 * handles, one per online CPU (2 to 8), all made here and sharing one
 * mapping of the database, so the pool's memory is spent at start and does
 * not grow with the number of detections at once (filetype_magic.c). */
enum ipd_err ipd_filetype_new(struct ipd_filetype **out);
void ipd_filetype_free(struct ipd_filetype *ft); /* NULL is fine */

/* How many libmagic handles the pool holds (each costs about 2-3 MiB of
 * libmagic's caches; the database is shared).  Thread-safe. */
size_t ipd_filetype_handles(struct ipd_filetype *ft);

/*
 * Classify the file open at fd (read from offset 0 with pread; the offset is
 * not changed) whose user-facing name is filename.
 * [out] mime: libmagic's MIME type, possibly refined by the extension where
 *       libmagic only says text/plain (a .csv is text/csv);
 * [out] file_type: the category ("csv", "image", "binary", ...).
 * Rules: libmagic decides the family (text, zip, OLE2, other); the
 * extension only picks a member inside it (any text answer + .csv = csv;
 * application/zip + .xlsx = excel), and never upgrades incompatible content
 * (an ELF binary named .png is "binary", not "image").  An empty file is
 * "text" (text/plain), still refined by a text extension.
 * Must not run concurrently with ipd_filetype_free.
 */
enum ipd_err ipd_filetype_detect(struct ipd_filetype *ft, int fd,
                                 const char *filename, char mime[IPD_MIME_MAX],
                                 char file_type[IPD_FILE_TYPE_MAX]);

/* The same from bytes in memory: head is the first n bytes of the file
 * (libmagic looks at these; 1 MiB is plenty), tail its last 4 bytes or
 * NULL, size its total length.  For stores that can't pread (GridFS). */
enum ipd_err ipd_filetype_detect_buf(struct ipd_filetype *ft, const void *head,
                                     size_t n, const void *tail, int64_t size,
                                     const char *filename,
                                     char mime[IPD_MIME_MAX],
                                     char file_type[IPD_FILE_TYPE_MAX]);

/* The pure mapping (unit-tested without libmagic): the category and
 * refined MIME type for libmagic's answer `magic_mime` and the filename. */
void ipd_filetype_classify(const char *magic_mime, const char *filename,
                           char mime[IPD_MIME_MAX],
                           char file_type[IPD_FILE_TYPE_MAX]);

/*
 * Sanitise a user-supplied filename (name_len bytes; may contain NUL).
 * In this order: checks UTF-8, keeps only the last path component ('/' and
 * '\\' separate), strips leading and trailing ASCII whitespace, replaces
 * control characters (C0 including NUL, DEL, C1) with '_'.  Bidirectional and
 * other format characters are kept: they are stored as given and made harmless
 * where rendered (Content-Disposition). Fails with IPD_ERR_INVALID when the
 * name is not UTF-8, is empty, "." or
 * ".." after that, and IPD_ERR_TOO_LARGE when over 255 bytes.
 */
enum ipd_err ipd_filename_sanitize(const char *name, size_t name_len,
                                   char out[IPD_FILENAME_MAX]);

/*
 * The Content-Disposition value for a download:
 *   attachment; filename="<ASCII fallback>"; filename*=UTF-8''<pct-encoded>
 * The fallback replaces each non-ASCII character, quotes, backslashes,
 * '%' and controls with one '_'; the filename* form percent-encodes everything
 * outside RFC 5987's attr-char, so bidi marks and newlines can't change how it
 * reads. Returns a new string the caller frees with free().
 */
char *ipd_content_disposition(const char *filename);

#endif
