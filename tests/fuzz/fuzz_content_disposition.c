/*
 * fuzz_content_disposition.c - the Content-Disposition filename parser
 * that URL ingest runs on a remote server's header.  The first byte picks
 * the output size (1..256), the rest is the header value.  Whatever the
 * input: the result is one of the documented errors, the output is
 * NUL-terminated inside its buffer, empty on failure and non-empty on
 * success, and the same when asked again.
 */
#include <stdint.h>

#include "service/fetch/filename.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char out[257];
    if (!size)
        return 0;
    size_t outsz = (size_t)data[0] + 1;
    char *header = ipd_xstrndup((const char *)data + 1, size - 1);

    memset(out, 0x5a, sizeof(out));
    enum ipd_err rc = ipd_content_disposition_filename(header, out, outsz);
    IPD_ASSERT(rc == IPD_OK || rc == IPD_ERR_NOT_FOUND ||
               rc == IPD_ERR_INVALID || rc == IPD_ERR_TOO_LARGE);
    IPD_ASSERT(memchr(out, 0, outsz) != NULL);
    IPD_ASSERT(out[outsz] == 0x5a); /* nothing written past outsz */
    size_t n = strlen(out);
    if (rc == IPD_OK) {
        IPD_ASSERT(n > 0 && n < outsz);
        /* Deterministic: no state carried between calls. */
        char again[257];
        IPD_ASSERT(ipd_content_disposition_filename(header, again, outsz) ==
                   IPD_OK);
        IPD_ASSERT(strcmp(out, again) == 0);
    } else {
        IPD_ASSERT(n == 0);
    }
    free(header);
    return 0;
}
