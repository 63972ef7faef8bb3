/*
 * display.c - display.h: the display channel's parser.  Everything here
 * reads bytes the run's code could have written: every length is checked
 * before it is used, every bundle is rebuilt from the keys it may have,
 * and an image is decoded whole and checked chunk by chunk, never judged
 * by its first bytes.
 */
#include <stdlib.h>
#include <string.h>

#include "../common/ipd.h"
#include "display.h"

/* What is left for the rest of the list. */

/* ---- strict base64 and PNG -------------------------------------------- */

static int b64_value(unsigned char c)
{
    if (c >= 'A' && c <= 'Z')
        return c - 'A';
    if (c >= 'a' && c <= 'z')
        return c - 'a' + 26;
    if (c >= '0' && c <= '9')
        return c - '0' + 52;
    if (c == '+')
        return 62;
    return c == '/' ? 63 : -1;
}

/* s[0..len) decoded when it is strict base64: a multiple of 4, padded
 * with at most two '=' at the end only, no whitespace, the unused bits of
 * the last character zero (one encoding per byte string).  malloc'd (the
 * caller frees), its length in *n; NULL otherwise. */
static unsigned char *b64_decode(const char *s, size_t len, size_t *n)
{
    size_t pad, j = 0;
    unsigned char *o;
    if (!len || len % 4)
        return NULL;
    pad = s[len - 1] != '=' ? 0 : s[len - 2] != '=' ? 1 : 2;
    *n = len / 4 * 3 - pad;
    o = ipd_xmalloc(*n + 3);
    for (size_t i = 0; i < len; i += 4) {
        uint32_t v = 0;
        for (size_t k = 0; k < 4; k++) {
            int d = i + k >= len - pad ? 0 : b64_value((unsigned char)s[i + k]);
            if (d < 0)
                goto bad;
            v = v << 6 | (uint32_t)d;
        }
        o[j++] = (unsigned char)(v >> 16);
        o[j++] = (unsigned char)(v >> 8);
        o[j++] = (unsigned char)v;
    }
    /* The padded group's unused bits: zero, or the text is not the one
     * encoding of these bytes. */
    if ((pad == 1 && b64_value((unsigned char)s[len - 2]) & 0x3) ||
        (pad == 2 && b64_value((unsigned char)s[len - 3]) & 0xf))
        goto bad;
    return o;
bad:
    free(o);
    return NULL;
}

static uint32_t get32(const unsigned char *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 |
           (uint32_t)p[3];
}

/* The CRC-32 of PNG chunks (ISO 3309, as zlib's crc32). */
static uint32_t crc32_of(const unsigned char *p, size_t n)
{
    uint32_t c = 0xffffffffu;
    for (size_t i = 0; i < n; i++) {
        c ^= p[i];
        for (int k = 0; k < 8; k++)
            c = c & 1 ? 0xedb88320u ^ (c >> 1) : c >> 1;
    }
    return c ^ 0xffffffffu;
}

static bool chunk_type_ok(const unsigned char *t)
{
    for (int k = 0; k < 4; k++)
        if (!((t[k] >= 'A' && t[k] <= 'Z') || (t[k] >= 'a' && t[k] <= 'z')))
            return false;
    return true;
}

bool ipd_display_png_ok(const unsigned char *d, size_t len)
{
    static const unsigned char sig[8] = {0x89, 'P',  'N',  'G',
                                         '\r', '\n', 0x1a, '\n'};
    size_t at = sizeof(sig);
    if (len < sizeof(sig) || memcmp(d, sig, sizeof(sig)))
        return false;
    /* Each chunk: length, type, data, CRC of type and data. */
    while (len - at >= 12) {
        uint32_t n = get32(d + at);
        const unsigned char *type = d + at + 4;
        if (n > 0x7fffffffu || n > len - at - 12 || !chunk_type_ok(type) ||
            get32(type + 4 + n) != crc32_of(type, 4 + (size_t)n))
            return false;
        if (at == sizeof(sig) && (memcmp(type, "IHDR", 4) || n != 13))
            return false;
        at += 12 + (size_t)n;
        if (!memcmp(type, "IEND", 4))
            return n == 0 && at == len;
    }
    return false; /* no IEND, or bytes that are no chunk */
}

/* ---- bundles ---------------------------------------------------------- */

/* Whether png (a JSON string) is a whole PNG within what is left of the
 * image budget; it is charged when it is. */
static bool png_fits(const json_t *png, struct ipd_display_budget *b)
{
    size_t len = json_string_length(png), n = 0;
    unsigned char *d = NULL;
    bool ok = false;
    /* Over the budget on its face: not even decoded. */
    if (len / 4 * 3 <= (size_t)b->png_left + 2)
        d = b64_decode(json_string_value(png), len, &n);
    ok = d && (int64_t)n <= b->png_left && ipd_display_png_ok(d, n);
    free(d);
    if (ok)
        b->png_left -= (int64_t)n;
    return ok;
}

/* Charge len bytes of text: false (and truncated) when they do not fit. */
static bool text_fits(struct ipd_display_budget *b, int64_t len)
{
    if (len > b->text_left) {
        b->truncated = true;
        return false;
    }
    b->text_left -= len;
    return true;
}

/* Keys the prelude never writes, and its "truncated": true, mark the
 * list truncated (what the line had is not all shown). */
static void check_keys(json_t *line, struct ipd_display_budget *b)
{
    static const char *const known[] = {"text/plain", "text/html", "image/png"};
    const char *key;
    json_t *v;
    json_object_foreach(line, key, v)
    {
        bool ok = !strcmp(key, "truncated") && json_is_false(v);
        for (size_t i = 0; i < IPD_ARRAY_LEN(known) && !ok; i++)
            ok = !strcmp(key, known[i]);
        if (!ok)
            b->truncated = true;
    }
}

/* text/plain cut to what is left of the budget (at a character
 * boundary), charged.  New ref. */
static json_t *plain_cut(const json_t *plain, struct ipd_display_budget *b)
{
    const char *s = json_string_value(plain);
    size_t n = json_string_length(plain);
    if ((int64_t)n > b->text_left) {
        b->truncated = true;
        n = (size_t)b->text_left;
        while (n && ((unsigned char)s[n] & 0xc0) == 0x80)
            n--;
    }
    b->text_left -= (int64_t)n;
    return json_pack("{s:s%}", "text/plain", s, n);
}

/* The bundle of one line (a JSON object), or NULL to leave it out: a
 * line that is no bundle (the prelude's {"truncated": true}, or whatever
 * the code wrote) or one over the budget.  New ref. */
static json_t *bundle(json_t *line, struct ipd_display_budget *b)
{
    json_t *plain = json_object_get(line, "text/plain");
    json_t *html = json_object_get(line, "text/html");
    json_t *png = json_object_get(line, "image/png");
    json_t *out;

    check_keys(line, b);
    if (!json_is_string(plain)) {
        b->truncated = true;
        return NULL;
    }
    if (b->entries >= IPD_DISPLAY_ENTRIES_MAX ||
        b->text_left <= IPD_DISPLAY_ENTRY_COST) {
        b->truncated = true;
        b->text_left = 0;
        return NULL;
    }
    b->text_left -= IPD_DISPLAY_ENTRY_COST;
    out = plain_cut(plain, b);
    if (json_is_string(html) && text_fits(b, (int64_t)json_string_length(html)))
        json_object_set(out, "text/html", html);
    else if (html)
        b->truncated = true;
    if (json_is_string(png) && png_fits(png, b))
        json_object_set(out, "image/png", png);
    else if (png)
        b->truncated = true;
    b->entries++;
    return out;
}

void ipd_display_budget_init(struct ipd_display_budget *b, int64_t text_max,
                             int64_t png_max)
{
    *b = (struct ipd_display_budget){
        .text_left = text_max > 0 ? text_max : 0,
        .png_left = png_max > 0 ? png_max : 0,
    };
}

json_t *ipd_display_bundle(json_t *line, struct ipd_display_budget *b)
{
    if (!json_is_object(line)) {
        b->truncated = true;
        return NULL;
    }
    return bundle(line, b);
}

json_t *ipd_display_parse(const char *text, size_t len, bool over,
                          int64_t text_max, int64_t png_max, bool *truncated)
{
    struct ipd_display_budget b;
    ipd_display_budget_init(&b, text_max, png_max);
    b.truncated = over;
    json_t *list = json_array();
    size_t at = 0;

    while (at < len) {
        const char *nl = memchr(text + at, '\n', len - at);
        size_t end = nl ? (size_t)(nl - text) : len;
        json_t *line, *one = NULL;
        if (!nl && over)
            break; /* the cut's partial line */
        line = end > at ? json_loadb(text + at, end - at, 0, NULL) : NULL;
        if (end > at && !json_is_object(line))
            b.truncated = true;
        else if (line)
            one = bundle(line, &b);
        if (one)
            json_array_append_new(list, one);
        json_decref(line);
        at = end + 1;
    }
    *truncated = b.truncated;
    return list;
}
