/*
 * test_seccomp_filter.c - service/sandbox/seccomp.c: the compiled filter,
 * run call by call.
 *
 * The three programs the probe compiles (cold without and with network,
 * a zygote's) go through a small classic-BPF interpreter over struct
 * seccomp_data, the way the kernel runs them, and every answer is
 * compared with the tables they were compiled from (ipd__seccomp_tables):
 * every number from 0 past the last unreviewed one, the foreign ABIs,
 * and the calls whose arguments are checked (clone, clone3, personality,
 * ioctl, fcntl, socket, socketpair).  The tables being the spec, the
 * test also holds an independent list, with the numbers of
 * <sys/syscall.h>, of calls no cold filter may allow whatever the tables
 * say, and of what a zygote's filter must still refuse.
 *
 * A measuring build (-DIPD_SECCOMP_MEASURE: refusals become LOG) fails
 * here, as it should: it must never serve.
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <signal.h>
#include <stddef.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/ioctl.h>
#include <sys/personality.h>
#include <sys/socket.h>
#include <sys/syscall.h>

#include "service/sandbox/sandbox_internal.h"
#include "test.h"

/* What eval answers when the program is not one it can run (an unknown
 * opcode, a load or jump out of bounds): no action has this value. */
#define EVAL_FAILED 0xfffffffeu
#define ALLOW SECCOMP_RET_ALLOW
#define ERRNO(e) (SECCOMP_RET_ERRNO | ((uint32_t)(e)&SECCOMP_RET_DATA))
#define KILL SECCOMP_RET_KILL_PROCESS

struct variant {
    const char *name;
    bool network, zygote;
    struct ipd__sandbox_bpf bpf;
};

/* As probe.c compiles them; filled by main. */
static struct variant variants[] = {
    {"cold", false, false, {NULL, 0}},
    {"cold+network", true, false, {NULL, 0}},
    {"zygote", false, true, {NULL, 0}},
};

/* Set while the interpreter's own check runs programs meant to fail. */
static bool bpf_quiet;

static bool bad_insn(size_t pc, const struct sock_filter *in, const char *why)
{
    if (!bpf_quiet)
        fprintf(stderr, "bpf: insn %zu (code 0x%04x k 0x%x): %s\n", pc,
                (unsigned)in->code, (unsigned)in->k, why);
    return false;
}

/* One step of instruction pc; false (with a message) for anything outside
 * what libseccomp emits.  *ret is set when the instruction returns. */
static bool step(const struct sock_filter *in, size_t pc, size_t len,
                 const struct seccomp_data *d, uint32_t *a, size_t *next,
                 bool *done, uint32_t *ret)
{
    bool cond;

    *next = pc + 1;
    switch (in->code) {
    case BPF_LD | BPF_W | BPF_ABS:
        if (in->k % 4 || in->k > sizeof *d - 4)
            return bad_insn(pc, in, "load outside struct seccomp_data");
        memcpy(a, (const char *)d + in->k, 4);
        return true;
    case BPF_ALU | BPF_AND | BPF_K: *a &= in->k; return true;
    case BPF_JMP | BPF_JA:
        if (in->k >= len - *next)
            return bad_insn(pc, in, "jump past the end");
        *next += in->k;
        return true;
    case BPF_RET | BPF_K:
        *done = true;
        *ret = in->k;
        return true;
    case BPF_JMP | BPF_JEQ | BPF_K: cond = *a == in->k; break;
    case BPF_JMP | BPF_JGT | BPF_K: cond = *a > in->k; break;
    case BPF_JMP | BPF_JGE | BPF_K: cond = *a >= in->k; break;
    case BPF_JMP | BPF_JSET | BPF_K: cond = (*a & in->k) != 0; break;
    default: return bad_insn(pc, in, "opcode this interpreter does not know");
    }
    *next += cond ? in->jt : in->jf;
    return true;
}

/* The answer of program f (len instructions) for d, or EVAL_FAILED. */
static uint32_t run(const struct sock_filter *f, size_t len,
                    const struct seccomp_data *d)
{
    uint32_t a = 0, ret = EVAL_FAILED;
    size_t pc = 0;
    bool done = false;

    while (pc < len && !done) {
        if (!step(&f[pc], pc, len, d, &a, &pc, &done, &ret))
            return EVAL_FAILED;
    }
    if (!done && !bpf_quiet)
        fprintf(stderr, "bpf: fell off the end of the program\n");
    return done ? ret : EVAL_FAILED;
}

static uint32_t eval(const struct variant *v, uint32_t arch, int nr,
                     const uint64_t args[6])
{
    struct seccomp_data d;

    memset(&d, 0, sizeof d);
    d.nr = nr;
    d.arch = arch;
    d.instruction_pointer = 0x7f0000001000u;
    if (args)
        memcpy(d.args, args, sizeof d.args);
    return run(v->bpf.filter, v->bpf.len, &d);
}

/* The interpreter itself, on hand-written programs: each opcode it knows
 * (JSET, which libseccomp 2.5 does not emit, included), and a failure
 * for an opcode it does not know, a load outside seccomp_data, a jump
 * past the end and a program without a final return. */
#define RUN(prog, d) run((prog), IPD_ARRAY_LEN(prog), (d))

static void interpreter_self_check(void)
{
    static const struct sock_filter jumps[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JSET | BPF_K, 0x100, 0, 5),
        BPF_STMT(BPF_ALU | BPF_AND | BPF_K, 0xff),
        BPF_JUMP(BPF_JMP | BPF_JGE | BPF_K, 0x10, 1, 0),
        BPF_STMT(BPF_RET | BPF_K, 1),
        BPF_JUMP(BPF_JMP | BPF_JGT | BPF_K, 0x10, 1, 2),
        BPF_STMT(BPF_RET | BPF_K, 2),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 0x11, 1, 0),
        BPF_STMT(BPF_JMP | BPF_JA, 1),
        BPF_STMT(BPF_RET | BPF_K, 3),
        BPF_STMT(BPF_RET | BPF_K, 4),
    };
    static const struct sock_filter unknown[] = {BPF_STMT(BPF_LD | BPF_MEM, 0),
                                                 BPF_STMT(BPF_RET | BPF_K, 0)};
    static const struct sock_filter far_load[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, 64), BPF_STMT(BPF_RET | BPF_K, 0)};
    static const struct sock_filter far_jump[] = {BPF_STMT(BPF_JMP | BPF_JA, 1),
                                                  BPF_STMT(BPF_RET | BPF_K, 0)};
    static const struct sock_filter no_ret[] = {
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 0, 0, 0)};
    struct seccomp_data d;

    memset(&d, 0, sizeof d);
    d.nr = 0x0f; /* bit 8 clear */
    CHECK_INT(RUN(jumps, &d), 4);
    d.nr = 0x10f; /* below 0x10 */
    CHECK_INT(RUN(jumps, &d), 1);
    d.nr = 0x110; /* 0x10: not above */
    CHECK_INT(RUN(jumps, &d), 4);
    d.nr = 0x111;
    CHECK_INT(RUN(jumps, &d), 3);
    d.nr = 0x112;
    CHECK_INT(RUN(jumps, &d), 4);
    bpf_quiet = true;
    CHECK_INT(RUN(unknown, &d), EVAL_FAILED);
    CHECK_INT(RUN(far_load, &d), EVAL_FAILED);
    CHECK_INT(RUN(far_jump, &d), EVAL_FAILED);
    CHECK_INT(RUN(no_ret, &d), EVAL_FAILED);
    bpf_quiet = false;
}

/* The x86_64 call nr with arg0 and arg1 (the others 0). */
static uint32_t call2(const struct variant *v, int nr, uint64_t a0, uint64_t a1)
{
    const uint64_t args[6] = {a0, a1, 0, 0, 0, 0};
    return eval(v, AUDIT_ARCH_X86_64, nr, args);
}

/* CHECK_INT with the variant, call and arguments named. */
static void expect(const struct variant *v, const char *what, int nr,
                   uint64_t a0, uint64_t a1, uint32_t got, uint32_t want)
{
    if (got != want)
        fprintf(stderr,
                "%s: %s: nr %d (0x%x) args 0x%llx 0x%llx: got 0x%08x, "
                "want 0x%08x\n",
                v->name, what, nr, (unsigned)nr, (unsigned long long)a0,
                (unsigned long long)a1, got, want);
    CHECK_INT(got, want);
}

/* Refused: an errno or a kill; never ALLOW, and neither LOG, TRACE nor
 * USER_NOTIF, which let the call happen or someone else decide. */
static bool refused(uint32_t ret)
{
    uint32_t action = ret & SECCOMP_RET_ACTION_FULL;
    return action == SECCOMP_RET_ERRNO || action == SECCOMP_RET_KILL_PROCESS ||
           action == SECCOMP_RET_KILL_THREAD || action == SECCOMP_RET_TRAP;
}

static bool in_sc(const struct ipd__seccomp_sc *t, size_t n, int nr)
{
    for (size_t i = 0; i < n; i++) {
        if (t[i].nr == nr)
            return true;
    }
    return false;
}

static bool in_ul(const unsigned long *t, size_t n, uint64_t x)
{
    for (size_t i = 0; i < n; i++) {
        if (t[i] == x)
            return true;
    }
    return false;
}

/* Allowed whatever the arguments, by the tables, in variant v. */
static bool table_allows(const struct variant *v, int nr)
{
    const struct ipd__seccomp_tables *t = ipd__seccomp_tables();
    return in_sc(t->allow, t->n_allow, nr) ||
           (v->zygote && in_sc(t->zygote_allow, t->n_zygote_allow, nr));
}

/* The calls with rules on their arguments: never in an allow table (an
 * unconditional rule would void the argument checks). */
static const int arg_checked[] = {SYS_clone,     SYS_clone3, SYS_personality,
                                  SYS_ioctl,     SYS_fcntl,  SYS_socket,
                                  SYS_socketpair};

static bool is_arg_checked(int nr)
{
    for (size_t i = 0; i < IPD_ARRAY_LEN(arg_checked); i++) {
        if (arg_checked[i] == nr)
            return true;
    }
    return false;
}

/* The tables' shape, and what docs/SANDBOX.md states independently of
 * them: the socket families per policy, the namespace flags. */
static void tables_sane(void)
{
    const struct ipd__seccomp_tables *t = ipd__seccomp_tables();
    static const int net[] = {AF_UNIX, AF_INET, AF_INET6, AF_NETLINK};
    static const uint64_t ns = CLONE_NEWNS | CLONE_NEWUTS | CLONE_NEWIPC |
                               CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNET |
                               CLONE_NEWCGROUP;

    REQUIRE(t->n_allow > 100 && t->n_zygote_allow > 0);
    CHECK(t->last_reviewed >= SYS_mount_setattr);
    CHECK(t->newer_last > t->last_reviewed);
    for (size_t i = 0; i < t->n_allow; i++) {
        CHECK(t->allow[i].nr >= 0 && t->allow[i].nr <= t->newer_last);
        CHECK(!is_arg_checked(t->allow[i].nr));
    }
    for (size_t i = 0; i < t->n_zygote_allow; i++)
        CHECK(!is_arg_checked(t->zygote_allow[i].nr));
    CHECK_INT(t->n_families_nonet, 1);
    CHECK_INT(t->families[0], AF_UNIX);
    REQUIRE(t->n_families_net == IPD_ARRAY_LEN(net));
    for (size_t i = 0; i < IPD_ARRAY_LEN(net); i++)
        CHECK_INT(t->families[i], net[i]);
    CHECK_INT(t->ns_clone_flags & ns, ns);
    CHECK(t->ioctl_ok && t->n_ioctl_ok > 0);
    CHECK(t->fcntl_ok && t->n_fcntl_ok > 0);
}

/* What a call without argument rules gets in variant v, by the tables. */
static uint32_t want_plain(const struct variant *v, int nr)
{
    const struct ipd__seccomp_tables *t = ipd__seccomp_tables();

    if (table_allows(v, nr))
        return ALLOW;
    if (nr > t->last_reviewed && nr <= t->newer_last)
        return ERRNO(ENOSYS);
    return ERRNO(EPERM);
}

/* Every number 0 .. newer_last + 64, each with arguments all clear, all
 * set and mixed: allowed iff in the tables, ENOSYS for the unreviewed
 * ones, EPERM for the rest. */
static void every_number(void)
{
    const struct ipd__seccomp_tables *t = ipd__seccomp_tables();
    static const uint64_t argsets[3][6] = {
        {0, 0, 0, 0, 0, 0},
        {~0ull, ~0ull, ~0ull, ~0ull, ~0ull, ~0ull},
        {1, 0xffffffffull, 1ull << 32, 0x40000000, 64, 0x7fffffffull},
    };

    for (size_t vi = 0; vi < IPD_ARRAY_LEN(variants); vi++) {
        const struct variant *v = &variants[vi];
        for (int nr = 0; nr <= t->newer_last + 64; nr++) {
            if (is_arg_checked(nr))
                continue;
            for (size_t s = 0; s < IPD_ARRAY_LEN(argsets); s++) {
                uint32_t got = eval(v, AUDIT_ARCH_X86_64, nr, argsets[s]);
                expect(v, "plain call", nr, argsets[s][0], argsets[s][1], got,
                       want_plain(v, nr));
            }
        }
        /* Far past the numbers reviewed or refused with ENOSYS. */
        expect(v, "large number", 100000, 0, 0,
               eval(v, AUDIT_ARCH_X86_64, 100000, NULL), ERRNO(EPERM));
        expect(v, "largest x86_64 number", 0x3fffffff, 0, 0,
               eval(v, AUDIT_ARCH_X86_64, 0x3fffffff, NULL), ERRNO(EPERM));
    }
}

/* i386 (int 0x80), another architecture, and x32 numbers (bit 30) kill;
 * -1 (what a tracer uses to skip a call) is at least not allowed. */
static void foreign_abis_killed(void)
{
    static const int nrs[] = {0, 1, 11, 59, 102, 120, 435};
    static const uint32_t arches[] = {AUDIT_ARCH_I386, AUDIT_ARCH_AARCH64,
                                      AUDIT_ARCH_ARM};

    for (size_t vi = 0; vi < IPD_ARRAY_LEN(variants); vi++) {
        const struct variant *v = &variants[vi];
        for (size_t i = 0; i < IPD_ARRAY_LEN(nrs); i++) {
            int x32 = (int)(0x40000000u | (unsigned)nrs[i]);
            for (size_t a = 0; a < IPD_ARRAY_LEN(arches); a++)
                expect(v, "foreign arch", nrs[i], 0, 0,
                       eval(v, arches[a], nrs[i], NULL), KILL);
            expect(v, "x32 number", x32, 0, 0,
                   eval(v, AUDIT_ARCH_X86_64, x32, NULL), KILL);
        }
        expect(v, "x32 top number", 0x7fffffff, 0, 0,
               eval(v, AUDIT_ARCH_X86_64, 0x7fffffff, NULL), KILL);
        CHECK(refused(eval(v, AUDIT_ARCH_X86_64, -1, NULL)));
    }
}

/* clone: allowed for fork, vfork and thread flags, EPERM with any
 * namespace flag (the list here is <sched.h>'s, not the table's); and
 * bit by bit, allowed iff the bit is outside the table's mask.  clone3:
 * ENOSYS, whatever it is given. */
static void clone_flags(void)
{
    const struct ipd__seccomp_tables *t = ipd__seccomp_tables();
    static const uint64_t ok[] = {
        0,
        SIGCHLD,
        CLONE_VM | CLONE_VFORK | SIGCHLD,
        CLONE_CHILD_SETTID | CLONE_CHILD_CLEARTID | SIGCHLD,
        CLONE_VM | CLONE_FS | CLONE_FILES | CLONE_SIGHAND | CLONE_THREAD |
            CLONE_SYSVSEM | CLONE_SETTLS | CLONE_PARENT_SETTID |
            CLONE_CHILD_CLEARTID,
        CLONE_PIDFD | CLONE_VM | CLONE_VFORK | SIGCHLD,
    };
    static const uint64_t ns[] = {CLONE_NEWNS,    CLONE_NEWUTS, CLONE_NEWIPC,
                                  CLONE_NEWUSER,  CLONE_NEWPID, CLONE_NEWNET,
                                  CLONE_NEWCGROUP};

    for (size_t vi = 0; vi < IPD_ARRAY_LEN(variants); vi++) {
        const struct variant *v = &variants[vi];
        for (size_t i = 0; i < IPD_ARRAY_LEN(ok); i++)
            expect(v, "clone", SYS_clone, ok[i], 0,
                   call2(v, SYS_clone, ok[i], 0), ALLOW);
        for (size_t i = 0; i < IPD_ARRAY_LEN(ns); i++) {
            const uint64_t with[] = {ns[i], ns[i] | SIGCHLD,
                                     ns[i] | CLONE_VM | CLONE_VFORK,
                                     ns[i] | (1ull << 32)};
            for (size_t w = 0; w < IPD_ARRAY_LEN(with); w++)
                expect(v, "clone with a namespace flag", SYS_clone, with[w], 0,
                       call2(v, SYS_clone, with[w], 0), ERRNO(EPERM));
        }
        for (unsigned bit = 0; bit < 64; bit++) {
            uint64_t f = 1ull << bit;
            expect(v, "clone, one bit", SYS_clone, f, 0,
                   call2(v, SYS_clone, f, 0),
                   (t->ns_clone_flags & f) ? ERRNO(EPERM) : ALLOW);
        }
        expect(v, "clone3", SYS_clone3, 0, 0, call2(v, SYS_clone3, 0, 0),
               ERRNO(ENOSYS));
        expect(v, "clone3", SYS_clone3, 0x7ffd0000, 88,
               call2(v, SYS_clone3, 0x7ffd0000, 88), ERRNO(ENOSYS));
    }
}

/* personality: PER_LINUX (0) only; other personas, the query and high
 * bits get EPERM. */
static void personality_only_linux(void)
{
    static const uint64_t no[] = {PER_LINUX32,       ADDR_NO_RANDOMIZE,
                                  READ_IMPLIES_EXEC, PER_BSD,
                                  0xffffffffu,       1ull << 32};

    for (size_t vi = 0; vi < IPD_ARRAY_LEN(variants); vi++) {
        const struct variant *v = &variants[vi];
        expect(v, "personality", SYS_personality, 0, 0,
               call2(v, SYS_personality, 0, 0), ALLOW);
        for (size_t i = 0; i < IPD_ARRAY_LEN(no); i++)
            expect(v, "personality", SYS_personality, no[i], 0,
                   call2(v, SYS_personality, no[i], 0), ERRNO(EPERM));
    }
}

/* Command cmd of call nr (ioctl or fcntl) in v: allowed iff listed,
 * compared on the low 32 bits (as the kernel reads an int), whatever
 * the descriptor. */
static void check_cmd(const struct variant *v, const char *what, int nr,
                      const unsigned long *list, size_t n, uint64_t cmd)
{
    static const uint64_t high[] = {0, 1ull << 32, 0xdeadbeefull << 32,
                                    0xffffffffull << 32};
    uint32_t want = in_ul(list, n, cmd & 0xffffffffu) ? ALLOW : ERRNO(EPERM);

    for (size_t h = 0; h < IPD_ARRAY_LEN(high); h++) {
        uint64_t c = cmd | high[h];
        expect(v, what, nr, 3, c, call2(v, nr, 3, c), want);
    }
    expect(v, what, nr, ~0ull, cmd, call2(v, nr, ~0ull, cmd), want);
}

/* ioctl: each listed command allowed; every command of the tty (0x54xx)
 * and socket (0x89xx) ranges allowed iff listed; TIOCSTI, TIOCLINUX and
 * other tty commands refused whatever the table says. */
static void ioctl_commands(void)
{
    const struct ipd__seccomp_tables *t = ipd__seccomp_tables();
    static const uint64_t never[] = {TIOCSTI,   TIOCLINUX, TIOCCONS,
                                     TIOCSCTTY, TIOCSETD,  TCSETS};

    for (size_t vi = 0; vi < IPD_ARRAY_LEN(variants); vi++) {
        const struct variant *v = &variants[vi];
        for (size_t i = 0; i < t->n_ioctl_ok; i++) {
            CHECK(t->ioctl_ok[i] <= 0xffffffffu);
            expect(v, "listed ioctl", SYS_ioctl, 3, t->ioctl_ok[i],
                   call2(v, SYS_ioctl, 3, t->ioctl_ok[i]), ALLOW);
            check_cmd(v, "listed ioctl", SYS_ioctl, t->ioctl_ok, t->n_ioctl_ok,
                      t->ioctl_ok[i]);
        }
        for (uint64_t c = 0; c < 0x100; c++) {
            check_cmd(v, "ioctl", SYS_ioctl, t->ioctl_ok, t->n_ioctl_ok,
                      0x5400 | c);
            check_cmd(v, "ioctl", SYS_ioctl, t->ioctl_ok, t->n_ioctl_ok,
                      0x8900 | c);
        }
        for (size_t i = 0; i < IPD_ARRAY_LEN(never); i++) {
            expect(v, "refused ioctl", SYS_ioctl, 0, never[i],
                   call2(v, SYS_ioctl, 0, never[i]), ERRNO(EPERM));
            expect(v, "refused ioctl", SYS_ioctl, 0, never[i] | (1ull << 32),
                   call2(v, SYS_ioctl, 0, never[i] | (1ull << 32)),
                   ERRNO(EPERM));
        }
    }
}

/* fcntl: each listed command allowed, every command 0 .. 1100 (past
 * F_LINUX_SPECIFIC_BASE's) allowed iff listed, and F_NOTIFY (watching a
 * shared directory), leases, F_SETOWN* and F_SETSIG refused whatever the
 * table says. */
static void fcntl_commands(void)
{
    const struct ipd__seccomp_tables *t = ipd__seccomp_tables();
    static const uint64_t never[] = {F_NOTIFY, F_SETLEASE, F_SETOWN,
                                     F_SETOWN_EX, F_SETSIG};

    for (size_t vi = 0; vi < IPD_ARRAY_LEN(variants); vi++) {
        const struct variant *v = &variants[vi];
        for (size_t i = 0; i < t->n_fcntl_ok; i++)
            expect(v, "listed fcntl", SYS_fcntl, 3, t->fcntl_ok[i],
                   call2(v, SYS_fcntl, 3, t->fcntl_ok[i]), ALLOW);
        for (uint64_t c = 0; c <= 1100; c++)
            check_cmd(v, "fcntl", SYS_fcntl, t->fcntl_ok, t->n_fcntl_ok, c);
        for (size_t i = 0; i < IPD_ARRAY_LEN(never); i++)
            expect(v, "refused fcntl", SYS_fcntl, 3, never[i],
                   call2(v, SYS_fcntl, 3, never[i]), ERRNO(EPERM));
    }
}

/* socket and socketpair: families 0..63 allowed iff in the policy's
 * list, EAFNOSUPPORT otherwise, and for 64 and up or high bits set. */
static void socket_families(void)
{
    const struct ipd__seccomp_tables *t = ipd__seccomp_tables();
    static const int nrs[] = {SYS_socket, SYS_socketpair};
    static const uint64_t past[] = {
        64,   255, 0xffffffffu, (1ull << 32) | AF_UNIX, (1ull << 63) | AF_INET,
        ~0ull};

    for (size_t vi = 0; vi < IPD_ARRAY_LEN(variants); vi++) {
        const struct variant *v = &variants[vi];
        size_t n_ok = v->network ? t->n_families_net : t->n_families_nonet;
        for (size_t s = 0; s < IPD_ARRAY_LEN(nrs); s++) {
            for (int fam = 0; fam < 64; fam++) {
                bool ok = false;
                for (size_t i = 0; i < n_ok; i++)
                    ok = ok || t->families[i] == fam;
                expect(
                    v, "socket family", nrs[s], (uint64_t)fam,
                    SOCK_STREAM | SOCK_CLOEXEC,
                    call2(v, nrs[s], (uint64_t)fam, SOCK_STREAM | SOCK_CLOEXEC),
                    ok ? ALLOW : ERRNO(EAFNOSUPPORT));
            }
            for (size_t i = 0; i < IPD_ARRAY_LEN(past); i++)
                expect(v, "socket family", nrs[s], past[i], SOCK_DGRAM,
                       call2(v, nrs[s], past[i], SOCK_DGRAM),
                       ERRNO(EAFNOSUPPORT));
        }
    }
}

/* Calls no cold filter may allow, whatever the tables say (the kernel's
 * log, tracing, mounts and namespaces, BPF and perf, kexec and modules,
 * keys, userfaultfd, other processes' memory, file handles, the swap,
 * accounting and quota, I/O ports, io_uring, watching shared files);
 * zygote: those its filter must still refuse (its documented extras,
 * the namespace and mount calls its children need, aside). */
static const struct {
    int nr;
    const char *name;
    bool zygote_may; /* one of a zygote's documented extras */
} never_list[] = {
    {SYS_syslog, "syslog", false},
    {SYS_ptrace, "ptrace", false},
    {SYS_mount, "mount", true},
    {SYS_umount2, "umount2", true},
    {SYS_unshare, "unshare", true},
    {SYS_setns, "setns", false},
    {SYS_pivot_root, "pivot_root", false},
    {SYS_chroot, "chroot", false},
    {SYS_bpf, "bpf", false},
    {SYS_perf_event_open, "perf_event_open", false},
    {SYS_kexec_load, "kexec_load", false},
    {SYS_kexec_file_load, "kexec_file_load", false},
    {SYS_init_module, "init_module", false},
    {SYS_finit_module, "finit_module", false},
    {SYS_delete_module, "delete_module", false},
    {SYS_keyctl, "keyctl", false},
    {SYS_add_key, "add_key", false},
    {SYS_request_key, "request_key", false},
    {SYS_userfaultfd, "userfaultfd", false},
    {SYS_process_vm_readv, "process_vm_readv", false},
    {SYS_process_vm_writev, "process_vm_writev", false},
    {SYS_pidfd_getfd, "pidfd_getfd", false},
    {SYS_open_by_handle_at, "open_by_handle_at", false},
    {SYS_name_to_handle_at, "name_to_handle_at", false},
    {SYS_fsopen, "fsopen", false},
    {SYS_fsmount, "fsmount", false},
    {SYS_fsconfig, "fsconfig", false},
    {SYS_fspick, "fspick", false},
    {SYS_move_mount, "move_mount", true},
    {SYS_open_tree, "open_tree", true},
    {SYS_mount_setattr, "mount_setattr", true},
    {SYS_reboot, "reboot", false},
    {SYS_swapon, "swapon", false},
    {SYS_swapoff, "swapoff", false},
    {SYS_acct, "acct", false},
    {SYS_quotactl, "quotactl", false},
    {SYS_quotactl_fd, "quotactl_fd", false},
    {SYS_iopl, "iopl", false},
    {SYS_ioperm, "ioperm", false},
    {SYS_modify_ldt, "modify_ldt", false},
    {SYS_lookup_dcookie, "lookup_dcookie", false},
    {SYS_kcmp, "kcmp", false},
    {SYS_io_uring_setup, "io_uring_setup", false},
    {SYS_io_uring_enter, "io_uring_enter", false},
    {SYS_io_uring_register, "io_uring_register", false},
    {SYS_inotify_init, "inotify_init", false},
    {SYS_inotify_init1, "inotify_init1", false},
    {SYS_fanotify_init, "fanotify_init", false},
    {SYS_memfd_secret, "memfd_secret", false},
};

/* A zygote's extras as docs/SANDBOX.md and sandbox.h give them. */
static const int zygote_extras[] = {
    SYS_unshare,    SYS_mount,         SYS_umount2, SYS_open_tree,
    SYS_move_mount, SYS_mount_setattr, SYS_capget,  SYS_capset};

static void never_allowed(void)
{
    static const uint64_t args[] = {0, 1, ~0ull};

    for (size_t vi = 0; vi < IPD_ARRAY_LEN(variants); vi++) {
        const struct variant *v = &variants[vi];
        for (size_t i = 0; i < IPD_ARRAY_LEN(never_list); i++) {
            if (v->zygote && never_list[i].zygote_may)
                continue;
            for (size_t a = 0; a < IPD_ARRAY_LEN(args); a++) {
                int nr = never_list[i].nr;
                uint32_t got = call2(v, nr, args[a], args[a]);
                if (!refused(got))
                    fprintf(stderr, "%s: %s (%d) is not refused: 0x%08x\n",
                            v->name, never_list[i].name, nr, got);
                CHECK(refused(got));
            }
        }
    }
}

/* The zygote's table holds only its documented extras, and they are
 * what it allows beyond the cold filter. */
static void zygote_extras_only(void)
{
    const struct ipd__seccomp_tables *t = ipd__seccomp_tables();
    const struct variant *cold = &variants[0], *zygote = &variants[2];

    for (size_t i = 0; i < t->n_zygote_allow; i++) {
        int nr = t->zygote_allow[i].nr;
        bool documented = false;
        for (size_t j = 0; j < IPD_ARRAY_LEN(zygote_extras); j++)
            documented = documented || zygote_extras[j] == nr;
        if (!documented)
            fprintf(stderr, "zygote extra %s (%d) is not documented\n",
                    t->zygote_allow[i].name, nr);
        CHECK(documented);
    }
    for (size_t j = 0; j < IPD_ARRAY_LEN(zygote_extras); j++) {
        int nr = zygote_extras[j];
        expect(zygote, "zygote extra", nr, 0, 0, call2(zygote, nr, 0, 0),
               ALLOW);
        expect(cold, "zygote extra in the cold filter", nr, 0, 0,
               call2(cold, nr, 0, 0), ERRNO(EPERM));
    }
}

int main(void)
{
    static const struct test_case cases[] = {
        T(interpreter_self_check),
        T(tables_sane),
        T(every_number),
        T(foreign_abis_killed),
        T(clone_flags),
        T(personality_only_linux),
        T(ioctl_commands),
        T(fcntl_commands),
        T(socket_families),
        T(never_allowed),
        T(zygote_extras_only),
    };
    int rc = 1;

    for (size_t i = 0; i < IPD_ARRAY_LEN(variants); i++) {
        char err[256];
        struct variant *v = &variants[i];
        if (ipd__sandbox_seccomp_compile(v->network, v->zygote, &v->bpf, err,
                                         sizeof err)) {
            fprintf(stderr, "compiling the %s filter: %s\n", v->name, err);
            goto out;
        }
    }
    rc = test_run(cases, IPD_ARRAY_LEN(cases));
out:
    for (size_t i = 0; i < IPD_ARRAY_LEN(variants); i++)
        ipd__sandbox_bpf_release(&variants[i].bpf);
    return rc;
}
