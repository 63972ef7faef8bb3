/*
 * fuzz_requirement.c - the requirement grammar: whatever the input, parsing
 * never crashes; a refusal always explains itself; anything accepted
 * formats to a short string of safe characters that parses back to the
 * same requirement and formats to itself again.
 */
#include <stdint.h>

#include "service/common/buf.h"
#include "venv/requirement.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_safe(const char *s)
{
    size_t n = strlen(s);
    IPD_ASSERT(n > 0 && n <= IPD_REQ_MAX);
    IPD_ASSERT((s[0] >= 'a' && s[0] <= 'z') || (s[0] >= '0' && s[0] <= '9'));
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                  (c >= '0' && c <= '9') || strchr("-.[],=!<>~*", c);
        IPD_ASSERT(ok && c != '\0');
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct ipd_requirement r, again;
    struct ipd_buf why;
    char out[IPD_REQ_FORMAT_MAX], out2[IPD_REQ_FORMAT_MAX];
    ipd_buf_init(&why, 4096);
    enum ipd_err rc = ipd_requirement_parse((const char *)data, size, &r, &why);
    if (rc) {
        IPD_ASSERT(rc == IPD_ERR_INVALID);
        IPD_ASSERT(why.len > 0);
        IPD_ASSERT(!r.name[0] && !r.normalized[0] && !r.extras[0] &&
                   !r.specifier[0]);
        goto out;
    }
    IPD_ASSERT(why.len == 0);
    IPD_ASSERT(size <= IPD_REQ_MAX);
    IPD_ASSERT(ipd_package_name_valid(r.name));
    IPD_ASSERT(ipd_package_name_valid(r.normalized));
    IPD_ASSERT(ipd_requirement_format(&r, out, sizeof(out)) == IPD_OK);
    check_safe(out);
    IPD_ASSERT(ipd_requirement_parse(out, strlen(out), &again, NULL) == IPD_OK);
    IPD_ASSERT(!strcmp(again.name, r.normalized));
    IPD_ASSERT(!strcmp(again.normalized, r.normalized));
    IPD_ASSERT(!strcmp(again.extras, r.extras));
    IPD_ASSERT(!strcmp(again.specifier, r.specifier));
    IPD_ASSERT(ipd_requirement_format(&again, out2, sizeof(out2)) == IPD_OK);
    IPD_ASSERT(!strcmp(out, out2));
out : {
    /* Normalization takes any NUL-terminated bytes. */
    char copy[IPD_REQ_MAX + 1], norm[IPD_REQ_NAME_MAX + 1];
    size_t n = size < IPD_REQ_MAX ? size : IPD_REQ_MAX;
    memcpy(copy, data, n);
    copy[n] = '\0';
    ipd_package_name_normalize(copy, norm, sizeof(norm));
    IPD_ASSERT(strlen(norm) <= IPD_REQ_NAME_MAX);
    (void)ipd_package_name_valid(copy);
}
    ipd_buf_release(&why);
    return 0;
}
