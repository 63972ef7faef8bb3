/*
 * fuzz_duration.c - durations, sizes, integers and times from config and
 * query strings: no crash, no overflow, results in range.
 */
#include <stdint.h>

#include "service/common/util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char in[128];
    int64_t v = 0;
    if (size >= sizeof(in))
        return 0;
    memcpy(in, data, size);
    in[size] = '\0';
    if (ipd_duration_parse(in, &v) == IPD_OK)
        IPD_ASSERT(v >= 0);
    if (ipd_size_parse(in, &v) == IPD_OK)
        IPD_ASSERT(v >= 0);
    if (ipd_int_parse(in, 1, 1000, &v) == IPD_OK)
        IPD_ASSERT(v >= 1 && v <= 1000);
    if (ipd_time_parse(in, &v) == IPD_OK) {
        char s[IPD_TIME_STR];
        ipd_time_format(v, s);
    }
    (void)ipd_user_id_valid(in);
    return 0;
}
