/*
 * zproto.h - the zygote protocol, defined once: every message kind and
 * verb between the service (P), a zygote (Z, service/exec/python/zygote.py)
 * and a child of either (the control socket), with the wire layout.
 *
 * The Python side (zygote.py) keeps its own copies of these numbers and
 * of struct ipd_zproto_ctl's layout; tests/python/test_zproto.py
 * compares them with this header (through tests/python/zproto_dump.c)
 * and fails when either side changes.  Change both, in one commit.
 *
 * Every socket here is SOCK_SEQPACKET: one message per datagram, read
 * whole or refused.  Descriptors travel as SCM_RIGHTS with a message
 * (fdpass.c); a receiver takes at most the number it expects and closes
 * any other.
 *
 * 1. The command socket, P <-> Z (the zygote's fd 3; zygote.c).  The
 *    first byte is an enum ipd_zproto_cmd:
 *
 *   P -> Z  INIT + the no-network seccomp filter (raw struct sock_filter
 *           array, 8 bytes each), queued before the zygote starts: what
 *           its children load on top of the zygote's own filter;
 *   Z -> P  READY when its imports are done, + optionally its warm set's
 *           report (JSON, at most IPD_ZPROTO_REPORT_MAX bytes; read by
 *           service/exec/warmset.c), or FAILED + why (text);
 *   P -> Z  PARK + JSON parameters, with the child's descriptors: its end
 *           of a new control socket, the stdout and stderr pipes' write
 *           ends, one tree per stage mount (at most
 *           IPD_ZPROTO_PARK_FDS_MAX in all).
 *           JSON: {"tmp", "out": tmpfs options, "mounts": [[path,
 *           writable], ...] (the trees' places, in order), "uid", "gid"
 *           (inside), "cap_last", "rlimits": {"cpu", "fsize", "nofile",
 *           "sigpending", "msgqueue": [soft, hard]}, "session": a
 *           session's child: its program child loops over calls}.
 *
 * 2. The control socket, child -> P: a struct ipd_zproto_ctl, always
 *    sizeof(struct ipd_zproto_ctl) bytes, its kind an enum
 *    ipd_zproto_ctl_kind.  Cold runs (child.c, read in run.c) send
 *    ERROR, OUTDIR (+ fd), INIT, EGRESS (+ fd) and STATUS; a parked
 *    child (zygote.py, read in zygote.c and run.c) sends OUTDIR, HELLO,
 *    READY, STATUS and ERROR.
 *
 * 3. The control socket, P -> a parked child: a verb (enum
 *    ipd_zproto_verb) as its first byte:
 *
 *   child -> P  OUTDIR + its /mnt/output's fd;
 *   child -> P  HELLO + a pidfd of itself (the new pid namespace's
 *               init): P reads its host pid and moves it into the run's
 *               cgroups (v1 cgroup.procs writes, the slow part: off the
 *               request's path), then
 *   P -> child  ATTACHED (the byte alone);
 *   child -> P  READY: capabilities dropped, the cold filter loaded, the
 *               program child forked and waiting for
 *   P -> child  GO + the run's CPU seconds in decimal (its RLIMIT_CPU;
 *               ipd_sandbox_parked_run), with a streamed run's call
 *               socket (1 fd: the program's fd 3, service/common/calls.h),
 *               after which the init reports STATUS like a cold run's;
 *   child -> P  ERROR + why, whenever a step fails.
 *
 *    A session's child (IPD_SANDBOX_PARK_SESSION) takes calls instead of
 *    one GO (ipd_sandbox_parked_call; zygote.py, _session_loop):
 *
 *   P -> child  GO + the call's CPU seconds in decimal, with the call's
 *               stdout and stderr write ends (2 fds) and, when it is
 *               streamed, its call socket (a third): run the job now;
 *   P -> child  VARIABLES + the call's CPU seconds: write
 *               .interpd/variables.json;
 *   child -> P  DONE + the call's status (int32, host order), 5 bytes;
 *               a struct ipd_zproto_ctl STATUS (the program ended) or
 *               EOF instead says the child is gone.
 */
#ifndef IPD_SANDBOX_ZPROTO_H
#define IPD_SANDBOX_ZPROTO_H

#include <stdint.h>
#include <sys/resource.h>

/* 1. The command socket's first byte. */
enum ipd_zproto_cmd {
    IPD_ZPROTO_CMD_INIT = 'I',   /* P -> Z: + the children's filter */
    IPD_ZPROTO_CMD_READY = 'R',  /* Z -> P: imports done */
    IPD_ZPROTO_CMD_FAILED = 'E', /* Z -> P: + why; it ends */
    IPD_ZPROTO_CMD_PARK = 'P',   /* P -> Z: + JSON, with fds */
};

/* A park command's descriptors: control socket, stdout, stderr, and one
 * per stage tree. */
#define IPD_ZPROTO_PARK_FDS_MAX (3 + 8)
#define IPD_ZPROTO_REPORT_MAX 4096 /* READY's text */

/* 2. The control message from the children to P. */
enum ipd_zproto_ctl_kind {
    IPD_ZPROTO_CTL_ERROR = 1,  /* text: why a setup step failed */
    IPD_ZPROTO_CTL_OUTDIR = 2, /* + the fd of the child's /mnt/output */
    IPD_ZPROTO_CTL_STATUS = 3, /* status: C2's wait status; ru_all */
    IPD_ZPROTO_CTL_INIT = 4,   /* status: C1's host pid (cold runs) */
    IPD_ZPROTO_CTL_EGRESS = 5, /* + a networked run's egress socket */
    IPD_ZPROTO_CTL_HELLO = 6,  /* + a parked child's init's pidfd */
    IPD_ZPROTO_CTL_READY = 7,  /* a parked child waits for GO */
};

#define IPD_ZPROTO_CTL_TEXT 200

struct ipd_zproto_ctl {
    uint32_t kind;                  /* enum ipd_zproto_ctl_kind */
    int32_t status;                 /* STATUS: C2's wait status; INIT: C1's host
                                       pid */
    struct rusage ru_all;           /* STATUS: C1's RUSAGE_CHILDREN */
    char text[IPD_ZPROTO_CTL_TEXT]; /* ERROR, NUL-terminated when it fits;
                                       the reader terminates it */
};

/* 3. P -> a parked child, and a session child's answer. */
enum ipd_zproto_verb {
    IPD_ZPROTO_ATTACHED = 'A',  /* P -> child: in its cgroups now */
    IPD_ZPROTO_GO = 'G',        /* + CPU seconds; a session's: + 2 fds;
                                   + a streamed run's call socket */
    IPD_ZPROTO_VARIABLES = 'V', /* + CPU seconds: list the variables */
    IPD_ZPROTO_DONE = 'D',      /* child -> P: + int32 status */
};

/* A session call's answer: DONE and the status. */
#define IPD_ZPROTO_DONE_LEN (1 + sizeof(int32_t))

#endif
