/*
 * filename.h - the name a fetched body suggests for itself: the parser of
 * a Content-Disposition header value.  Pure: no libcurl, no network.  Its
 * twin, the writer of the header for downloads, is ipd_content_disposition
 * in storage/filetype.h.
 *
 * Thread-safety: no state; call from any thread.
 */
#ifndef IPD_FETCH_FILENAME_H
#define IPD_FETCH_FILENAME_H

#include <stddef.h>

#include "../common/ipd.h"

/*
 * The filename of a Content-Disposition header value (RFC 6266): the
 * RFC 5987 filename*= (UTF-8 or ISO-8859-1, percent-decoded, converted to
 * UTF-8) when present and valid, else filename= (token or quoted-string,
 * backslash escapes undone).  The result is raw: sanitise it.
 * @param out  [out] NUL-terminated name, outsz bytes at most
 * @return IPD_OK; IPD_ERR_NOT_FOUND when there is no (non-empty)
 *         filename; IPD_ERR_INVALID when it is malformed (unterminated
 *         quote, NUL); IPD_ERR_TOO_LARGE when it (or the header, over
 *         16 KiB) doesn't fit.
 */
enum ipd_err ipd_content_disposition_filename(const char *header, char *out,
                                              size_t outsz);

#endif
