/*
 * fuzz_display.c - the display channel's parser (service/exec/display.h)
 * on whatever a run's code could write into .interpd/display.jsonl: no
 * crash, no leak, and what comes out holds the parser's promises: only
 * the three MIME keys, strings only, text/plain in every bundle, texts
 * within the text budget (with each bundle's cost), images whole PNGs
 * within the image budget, at most IPD_DISPLAY_ENTRIES_MAX bundles.
 *
 * The first three bytes set the run: bit 0 of the first, the file was cut
 * at the read bound; the next two, the budgets.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "service/common/ipd.h"
#include "service/exec/display.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int b64v(unsigned char c)
{
    static const char a[] =
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    const char *p = c ? strchr(a, c) : NULL;
    return p ? (int)(p - a) : -1;
}

/* The bytes of an image/png the parser let through (it must decode). */
static int64_t check_png(const char *s, size_t len)
{
    size_t pad = len && s[len - 1] == '=' ? (s[len - 2] == '=' ? 2 : 1) : 0;
    size_t n = len / 4 * 3 - pad, j = 0;
    unsigned char *d = ipd_xmalloc(n + 3);
    IPD_ASSERT(len && len % 4 == 0);
    for (size_t i = 0; i < len; i += 4) {
        uint32_t v = 0;
        for (size_t k = 0; k < 4; k++) {
            int x = i + k >= len - pad ? 0 : b64v((unsigned char)s[i + k]);
            IPD_ASSERT(x >= 0);
            v = v << 6 | (uint32_t)x;
        }
        d[j++] = (unsigned char)(v >> 16);
        d[j++] = (unsigned char)(v >> 8);
        d[j++] = (unsigned char)v;
    }
    IPD_ASSERT(ipd_display_png_ok(d, n));
    free(d);
    return (int64_t)n;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    bool truncated = false;
    if (size < 3)
        return 0;
    bool over = data[0] & 1;
    int64_t text_max = (int64_t)data[1] * 64;
    int64_t png_max = (int64_t)data[2] * 256;
    json_t *list = ipd_display_parse((const char *)data + 3, size - 3, over,
                                     text_max, png_max, &truncated);
    int64_t text = 0, png = 0;
    size_t i;
    json_t *b;

    IPD_ASSERT(json_is_array(list));
    IPD_ASSERT(json_array_size(list) <= IPD_DISPLAY_ENTRIES_MAX);
    IPD_ASSERT(!over || truncated);
    json_array_foreach(list, i, b)
    {
        const char *key;
        json_t *v;
        IPD_ASSERT(json_is_string(json_object_get(b, "text/plain")));
        text += IPD_DISPLAY_ENTRY_COST;
        json_object_foreach(b, key, v)
        {
            IPD_ASSERT(json_is_string(v));
            if (!strcmp(key, "image/png"))
                png += check_png(json_string_value(v), json_string_length(v));
            else
                IPD_ASSERT(!strcmp(key, "text/plain") ||
                           !strcmp(key, "text/html"));
            if (strcmp(key, "image/png"))
                text += (int64_t)json_string_length(v);
        }
    }
    IPD_ASSERT(text <= text_max);
    IPD_ASSERT(png <= png_max);
    json_decref(list);
    return 0;
}
