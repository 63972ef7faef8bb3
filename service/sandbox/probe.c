/*
 * probe.c - the start-up probe: complete the config, compile the seccomp
 * filters, find the parent cgroups, and prove the whole setup with a dry
 * run before the first request needs it.
 */
#include <dirent.h>
#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
#include <unistd.h>

#include "../common/log.h"
#include "../common/util.h"
#include "sandbox_internal.h"

#define DEFAULT_HOST_ID 200000
#define DEFAULT_INNER_ID 1000

static int read_cap_last(void)
{
    char buf[16] = {0};
    int fd = open("/proc/sys/kernel/cap_last_cap", O_RDONLY | O_CLOEXEC);
    ssize_t n;
    int64_t v = -1;

    if (fd < 0)
        return 63; /* drop everything the field can hold */
    n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return 63;
    buf[strcspn(buf, "\n")] = '\0';
    if (ipd_int_parse(buf, 0, 63, &v))
        return 63;
    return (int)v;
}

/* arg_start, arg_end, env_start, env_end: fields 48-51 of
 * /proc/self/stat (counted after the parenthesised comm). */
static void read_mm_areas(struct ipd_sandbox_state *st)
{
    char buf[2048];
    const char *p;
    ssize_t n;
    int fd = open("/proc/self/stat", O_RDONLY | O_CLOEXEC);
    uintptr_t v[4] = {0, 0, 0, 0};

    if (fd < 0)
        return;
    n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return;
    buf[n] = '\0';
    p = strrchr(buf, ')');
    if (!p)
        return;
    p++;
    for (int field = 3; field <= 51 && *p; field++) {
        char *end;
        unsigned long long x;
        while (*p == ' ')
            p++;
        x = strtoull(p, &end, 10);
        if (field >= 48)
            v[field - 48] = (uintptr_t)x;
        p = end;
        while (*p && *p != ' ')
            p++;
    }
    st->arg_start = v[0];
    st->arg_end = v[1];
    st->env_start = v[2];
    st->env_end = v[3];
}

static void describe(struct ipd_sandbox_config *cfg)
{
    unsigned m = cfg->mechanisms;
    const struct ipd_sandbox_state *st = cfg->state;

    snprintf(cfg->status, sizeof cfg->status,
             "user namespace (uid %u->%u, gid %u->%u, setgroups "
             "denied), pid/mount/ipc/uts%s namespaces, own network "
             "namespace (networked runs: loopback, egress through the "
             "proxy only), seccomp %s (%u/%u "
             "instructions), memory: %s, pids: %s, kill: %s, cpu: %s, "
             "cpu share: %s, rlimits: sigpending/msgqueue per run",
             (unsigned)cfg->inner_uid, (unsigned)cfg->host_uid,
             (unsigned)cfg->inner_gid, (unsigned)cfg->host_gid,
             (m & IPD_SANDBOX_CGROUPNS) ? "/cgroup" : "",
             (m & IPD_SANDBOX_SECCOMP) ? "on" : "OFF",
             st ? (unsigned)st->bpf_nonet.len : 0,
             st ? (unsigned)st->bpf_net.len : 0,
             (m & IPD_SANDBOX_CG2_MEMORY)   ? "cgroup v2"
             : (m & IPD_SANDBOX_CG1_MEMORY) ? "cgroup v1"
                                            : "NONE",
             (m & IPD_SANDBOX_CG2_PIDS)   ? "cgroup v2"
             : (m & IPD_SANDBOX_CG1_PIDS) ? "cgroup v1"
                                          : "NONE",
             (m & IPD_SANDBOX_CG2_KILL) ? "cgroup.kill + pid-namespace init"
                                        : "pid-namespace init + v1 pid list",
             (m & (IPD_SANDBOX_CG2_KILL))    ? "cgroup v2 cpu.stat"
             : (m & IPD_SANDBOX_CG1_CPUACCT) ? "cgroup v1 cpuacct"
                                             : "rusage",
             (m & IPD_SANDBOX_CG2_CPU)   ? "cgroup v2 cpu.max"
             : (m & IPD_SANDBOX_CG1_CPU) ? "cgroup v1 cpu.cfs_quota_us"
                                         : "NONE");
}

/* A full setup whose C2 exits instead of exec: proves every mechanism
 * works here before the first request does. */
static enum ipd_err dry_run(struct ipd_sandbox_config *cfg, char *err,
                            size_t errlen)
{
    struct ipd_sandbox_policy p;
    struct ipd_sandbox_spec spec;
    struct ipd_sandbox_result res;
    static const char *const argv[] = {"/nonexistent", NULL};
    enum ipd_err rc;

    ipd_sandbox_policy_default(&p);
    p.wall_timeout_ms = 10000;
    memset(&spec, 0, sizeof spec);
    spec.argv = argv;
    spec.cwd = "/";
    rc = ipd__sandbox_run(cfg, &p, &spec, true, NULL, &res);
    if (!rc && (res.exit_code != 0 || res.output_dirfd < 0)) {
        snprintf(res.error, sizeof res.error, "dry run exited %d (signal %d)",
                 res.exit_code, res.term_signal);
        rc = IPD_ERR_UNAVAILABLE;
    }
    if (rc)
        snprintf(err, errlen, "%s", res.error);
    ipd_sandbox_result_release(&res);
    return rc;
}

/* Fill the config's zero fields with the defaults and refuse host ids
 * that cannot (not root: only the own ones) or must not (root) be
 * mapped.  IPD_ERR_UNAVAILABLE with the reason in err. */
static enum ipd_err config_complete(struct ipd_sandbox_config *cfg, char *err,
                                    size_t errlen)
{
    uid_t euid = geteuid();

    if (!cfg->inner_uid)
        cfg->inner_uid = DEFAULT_INNER_ID;
    if (!cfg->inner_gid)
        cfg->inner_gid = DEFAULT_INNER_ID;
    if (!cfg->cgroup_name)
        cfg->cgroup_name = "interpd-sandbox";
    if (euid == 0) {
        if (!cfg->host_uid)
            cfg->host_uid = DEFAULT_HOST_ID;
        if (!cfg->host_gid)
            cfg->host_gid = (gid_t)cfg->host_uid;
    } else {
        /* Without newuidmap only the own ids can be mapped. */
        if (!cfg->host_uid)
            cfg->host_uid = euid;
        if (!cfg->host_gid)
            cfg->host_gid = getegid();
        if (cfg->host_uid != euid || cfg->host_gid != getegid()) {
            snprintf(err, errlen,
                     "host uid/gid %u/%u: only the own ids %u/%u can be "
                     "mapped when not running as root",
                     (unsigned)cfg->host_uid, (unsigned)cfg->host_gid,
                     (unsigned)euid, (unsigned)getegid());
            return IPD_ERR_UNAVAILABLE;
        }
    }
    if (cfg->host_uid == 0 || cfg->host_gid == 0) {
        snprintf(err, errlen, "refusing to map the sandbox to host root");
        return IPD_ERR_UNAVAILABLE;
    }
    if (strchr(cfg->cgroup_name, '/') || cfg->cgroup_name[0] == '.' ||
        !cfg->cgroup_name[0]) {
        snprintf(err, errlen, "bad cgroup name");
        return IPD_ERR_UNAVAILABLE;
    }
    return IPD_OK;
}

/* Accepts NULL. */
static void state_free(struct ipd_sandbox_state *st)
{
    if (!st)
        return;
    ipd__sandbox_bpf_release(&st->bpf_nonet);
    ipd__sandbox_bpf_release(&st->bpf_net);
    ipd__sandbox_bpf_release(&st->bpf_zygote);
    ipd__cgroups_free(st->cg);
    free(st);
}

/* What every run shares: the capability count, P's argv and environment
 * areas, both filters and the parent cgroups (their mechanisms are added
 * to *mech).  *out is new (state_free), or NULL on failure. */
static enum ipd_err state_new(const char *cgroup_name, unsigned *mech,
                              struct ipd_sandbox_state **out, char *err,
                              size_t errlen)
{
    enum ipd_err rc;
    struct ipd_sandbox_state *st = ipd_xcalloc(1, sizeof *st);

    st->cap_last = read_cap_last();
    read_mm_areas(st);
    st->cgroupns = true;
    rc =
        ipd__sandbox_seccomp_compile(false, false, &st->bpf_nonet, err, errlen);
    if (rc)
        goto out;
    rc = ipd__sandbox_seccomp_compile(true, false, &st->bpf_net, err, errlen);
    if (rc)
        goto out;
    rc =
        ipd__sandbox_seccomp_compile(false, true, &st->bpf_zygote, err, errlen);
    if (rc)
        goto out;
    rc = ipd__cgroups_probe(cgroup_name, &st->cg, mech, err, errlen);
out:
    if (rc) {
        state_free(st);
        st = NULL;
    }
    *out = st;
    return rc;
}

enum ipd_err ipd_sandbox_probe(struct ipd_sandbox_config *cfg)
{
    enum ipd_err rc;
    char err[400] = "";

    cfg->mechanisms = 0;
    cfg->state = NULL;
    rc = config_complete(cfg, err, sizeof err);
    if (rc)
        goto out;
    rc = state_new(cfg->cgroup_name, &cfg->mechanisms, &cfg->state, err,
                   sizeof err);
    if (rc)
        goto out;
    rc = dry_run(cfg, err, sizeof err);
    if (rc) {
        /* NEWCGROUP is optional: retry without it. */
        cfg->state->cgroupns = false;
        rc = dry_run(cfg, err, sizeof err);
    }
    if (rc) {
        rc = IPD_ERR_UNAVAILABLE;
        goto out;
    }
    cfg->mechanisms |= IPD_SANDBOX_USERNS | IPD_SANDBOX_SECCOMP;
    if (cfg->state->cgroupns)
        cfg->mechanisms |= IPD_SANDBOX_CGROUPNS;
    describe(cfg);
out:
    if (rc) {
        snprintf(cfg->status, sizeof cfg->status, "unavailable: %s", err);
        ipd_warn("sandbox: %s", cfg->status);
    }
    return rc;
}

void ipd_sandbox_config_release(struct ipd_sandbox_config *cfg)
{
    if (!cfg || !cfg->state)
        return;
    state_free(cfg->state);
    cfg->state = NULL;
}

/* The first process found whose real or effective uid is in
 * [first, first+count), or 0. */
static long process_in_range(uid_t first, unsigned count, unsigned *uid)
{
    DIR *d = opendir("/proc");
    struct dirent *e;
    long found = 0;

    if (!d)
        return 0;
    while (!found && (e = ipd_readdir(d)) != NULL) {
        char path[300], buf[2048];
        unsigned r = 0, eu = 0;
        const char *p;
        ssize_t n;
        int fd;
        if (e->d_name[0] < '1' || e->d_name[0] > '9')
            continue;
        snprintf(path, sizeof path, "/proc/%s/status", e->d_name);
        fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
            continue;
        n = read(fd, buf, sizeof buf - 1);
        close(fd);
        buf[n > 0 ? n : 0] = '\0';
        p = strstr(buf, "\nUid:");
        if (!p || sscanf(p + 5, "%u %u", &r, &eu) != 2)
            continue;
        if (r - first < count || eu - first < count) {
            *uid = r - first < count ? r : eu;
            found = strtol(e->d_name, NULL, 10);
        }
    }
    closedir(d);
    return found;
}

enum ipd_err ipd_sandbox_check_ids(uid_t first, unsigned count, char *why,
                                   size_t whylen)
{
    char buf[4096];
    unsigned uid = 0;
    long pid;

    if (count == 0 || first + count - 1 < first) {
        snprintf(why, whylen, "host id range %u+%u is empty or wraps",
                 (unsigned)first, count);
        return IPD_ERR_UNAVAILABLE;
    }
    for (unsigned i = 0; i < count; i++) {
        struct passwd pw, *pwp = NULL;
        struct group gr, *grp = NULL;
        if (getpwuid_r(first + i, &pw, buf, sizeof buf, &pwp) == 0 && pwp) {
            snprintf(why, whylen, "host uid %u belongs to user %s",
                     (unsigned)(first + i), pwp->pw_name);
            return IPD_ERR_UNAVAILABLE;
        }
        if (getgrgid_r(first + i, &gr, buf, sizeof buf, &grp) == 0 && grp) {
            snprintf(why, whylen, "host gid %u belongs to group %s",
                     (unsigned)(first + i), grp->gr_name);
            return IPD_ERR_UNAVAILABLE;
        }
    }
    pid = process_in_range(first, count, &uid);
    if (pid)
        ipd_warn("sandbox: process %ld already runs as host uid %u of the "
                 "sandbox's range %u-%u (another interpd with the same "
                 "range shares its per-user budgets)",
                 pid, uid, (unsigned)first, (unsigned)(first + count - 1));
    why[0] = '\0';
    return IPD_OK;
}
