/*
 * zproto_dump.c - prints the zygote protocol's numbers as
 * service/sandbox/zproto.h defines them, for tests/python/test_zproto.py,
 * which compares them with zygote.py's copies.  One line each:
 * "<C name> <zygote.py name> <value>"; the layout lines name no C
 * constant ("-").
 */
#include <stddef.h>
#include <stdio.h>

#include "service/sandbox/zproto.h"

#define SAME(c, py) printf("%s %s %lld\n", #c, py, (long long)(c))
#define LAYOUT(what, value) printf("- %s %lld\n", what, (long long)(value))

int main(void)
{
    SAME(IPD_ZPROTO_CMD_INIT, "CMD_INIT");
    SAME(IPD_ZPROTO_CMD_READY, "CMD_READY");
    SAME(IPD_ZPROTO_CMD_FAILED, "CMD_FAILED");
    SAME(IPD_ZPROTO_CMD_PARK, "CMD_PARK");
    SAME(IPD_ZPROTO_PARK_FDS_MAX, "PARK_FDS_MAX");
    SAME(IPD_ZPROTO_REPORT_MAX, "REPORT_MAX");
    SAME(IPD_ZPROTO_CTL_ERROR, "CTL_ERROR");
    SAME(IPD_ZPROTO_CTL_OUTDIR, "CTL_OUTDIR");
    SAME(IPD_ZPROTO_CTL_STATUS, "CTL_STATUS");
    SAME(IPD_ZPROTO_CTL_INIT, "CTL_INIT");
    SAME(IPD_ZPROTO_CTL_EGRESS, "CTL_EGRESS");
    SAME(IPD_ZPROTO_CTL_HELLO, "CTL_HELLO");
    SAME(IPD_ZPROTO_CTL_READY, "CTL_READY");
    SAME(IPD_ZPROTO_CTL_TEXT, "CTL_TEXT");
    SAME(IPD_ZPROTO_ATTACHED, "VERB_ATTACHED");
    SAME(IPD_ZPROTO_GO, "VERB_GO");
    SAME(IPD_ZPROTO_VARIABLES, "VERB_VARIABLES");
    SAME(IPD_ZPROTO_DONE, "VERB_DONE");
    SAME(IPD_ZPROTO_DONE_LEN, "_DONE.size");
    LAYOUT("_CTL.size", sizeof(struct ipd_zproto_ctl));
    LAYOUT("ctl.kind", offsetof(struct ipd_zproto_ctl, kind));
    LAYOUT("ctl.status", offsetof(struct ipd_zproto_ctl, status));
    LAYOUT("ctl.ru_all", offsetof(struct ipd_zproto_ctl, ru_all));
    LAYOUT("ctl.text", offsetof(struct ipd_zproto_ctl, text));
    LAYOUT("rusage.size", sizeof(struct rusage));
    return 0;
}
