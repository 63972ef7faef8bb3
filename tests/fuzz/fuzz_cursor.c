/*
 * fuzz_cursor.c - list cursors (files' and executions'): anything
 * accepted formats back to itself.
 */
#include <stdint.h>

#include "storage/meta.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* s parsed as a cursor of kind, formatted again, parses to the same. */
static void round_trip(const char *s, const char *kind)
{
    char again[IPD_CURSOR_MAX];
    struct ipd_cursor c, c2;
    if (!ipd_cursor_parse_kind(s, kind, &c))
        return;
    ipd_cursor_format_id(c.created_at_ms, c.id, again);
    IPD_ASSERT(ipd_cursor_parse_kind(again, kind, &c2));
    IPD_ASSERT(c2.created_at_ms == c.created_at_ms);
    IPD_ASSERT(!strcmp(c2.id, c.id));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char in[256], again[IPD_CURSOR_MAX];
    struct ipd_cursor c;
    struct ipd_file_meta f;
    if (size >= sizeof(in))
        return 0;
    memcpy(in, data, size);
    in[size] = '\0';
    round_trip(in, "exec");
    if (!ipd_cursor_parse(in, &c))
        return 0;
    memset(&f, 0, sizeof(f));
    f.created_at_ms = c.created_at_ms;
    memcpy(f.file_id, c.id, sizeof(f.file_id));
    ipd_cursor_format(&f, again);
    struct ipd_cursor c2;
    IPD_ASSERT(ipd_cursor_parse(again, &c2));
    IPD_ASSERT(c2.created_at_ms == c.created_at_ms);
    IPD_ASSERT(!strcmp(c2.id, c.id));
    return 0;
}
