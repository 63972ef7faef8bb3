/*
 * fuzz_varlist.c - a session's variables listing (service/exec/varlist.h),
 * the bytes a session's code controls: no crash, and whatever is accepted
 * has the listing's shape within its caps.
 */
#include <stdint.h>
#include <string.h>

#include "service/exec/varlist.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static size_t chars(const char *s)
{
    size_t n = 0;
    for (; *s; s++)
        n += ((unsigned char)*s & 0xc0) != 0x80;
    return n;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    json_t *out = NULL, *e;
    size_t i;
    const char *prev = "";

    if (ipd_varlist_parse((const char *)data, size, &out)) {
        IPD_ASSERT(out == NULL);
        return 0;
    }
    json_t *vars = json_object_get(out, "variables");
    IPD_ASSERT(json_object_size(out) == 2 && json_is_array(vars) &&
               json_is_boolean(json_object_get(out, "truncated")));
    IPD_ASSERT(json_array_size(vars) <= IPD_VARLIST_COUNT_MAX);
    json_array_foreach(vars, i, e)
    {
        const char *n = json_string_value(json_object_get(e, "name"));
        const char *t = json_string_value(json_object_get(e, "type"));
        const char *r = json_string_value(json_object_get(e, "repr"));
        IPD_ASSERT(json_object_size(e) == 3 && n && t && r);
        IPD_ASSERT(n[0] && strlen(n) <= IPD_VARLIST_NAME_MAX &&
                   !strpbrk(n, " <>&\"'\n\t") && strcmp(n, prev) > 0);
        IPD_ASSERT(chars(t) <= IPD_VARLIST_TYPE_MAX);
        IPD_ASSERT(chars(r) <= IPD_VARLIST_REPR_MAX);
        prev = n;
    }
    json_decref(out);
    return 0;
}
