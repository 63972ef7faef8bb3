/*
 * fuzz_filename.c - filename sanitising and Content-Disposition: whatever
 * the input, the stored name has no '/', no control characters, is valid
 * UTF-8 within 255 bytes, and the header value is printable ASCII.
 */
#include <stdint.h>

#include "service/common/util.h"
#include "storage/filetype.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char out[IPD_FILENAME_MAX];
    if (ipd_filename_sanitize((const char *)data, size, out) != IPD_OK)
        return 0;
    size_t n = strlen(out);
    IPD_ASSERT(n > 0 && n <= 255);
    IPD_ASSERT(!strchr(out, '/') && !strchr(out, '\\'));
    IPD_ASSERT(strcmp(out, ".") != 0 && strcmp(out, "..") != 0);
    IPD_ASSERT(ipd_utf8_valid(out, n));
    for (size_t i = 0; i < n; i++)
        IPD_ASSERT((unsigned char)out[i] >= 0x20 && out[i] != 0x7f);
    char *cd = ipd_content_disposition(out);
    for (const char *p = cd; *p; p++)
        IPD_ASSERT((unsigned char)*p >= 0x20 && (unsigned char)*p < 0x7f);
    free(cd);
    char mime[IPD_MIME_MAX], type[IPD_FILE_TYPE_MAX];
    ipd_filetype_classify("text/plain", out, mime, type);
    IPD_ASSERT(type[0]);
    return 0;
}
