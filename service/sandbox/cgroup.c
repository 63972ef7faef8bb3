/*
 * cgroup.c - per-run cgroups for the sandbox: memory and process
 * limits, OOM and CPU counters, and killing a whole tree.
 *
 * Layout: at probe time a parent cgroup "<name>" is created (once, and
 * reused across restarts) under the process's own cgroup in every
 * hierarchy used, so the sandboxes stay inside whatever limits the
 * service itself runs under.  Each run gets "<name>/run-<pid>-<n>" in
 * each hierarchy, removed when the run is over and empty.
 *
 * Leftovers: a service killed with SIGKILL never removes its run dirs
 * (PDEATHSIG empties them), and pids are reused (pid_max is often 32768),
 * so a later process may be handed the same pid and meet its
 * predecessor's "run-<pid>-<n>".  Creation therefore takes over such a
 * dir when it holds no process, and skips to the next <n> when it does;
 * and the probe removes the empty run dirs of pids that are gone.
 *
 * Choice of mechanism, per resource:
 *   memory  v2 memory.max (+ memory.swap.max 0) if the controller is
 *           delegated to the parent, else v1 memory.limit_in_bytes (+
 *           memory.memsw.limit_in_bytes when swap accounting exists);
 *   pids    v2 pids.max if delegated, else v1 pids.max;
 *   kill    v2 cgroup.kill when present (even without controllers:
 *           hybrid hosts have it), else SIGKILL to each listed pid (the
 *           caller also kills the pid namespace's init);
 *   cpu     v2 cpu.stat usage_usec (always present), else v1 cpuacct;
 *   share   v2 cpu.max if the cpu controller is delegated, else the v1
 *           cpu controller's cpu.cfs_quota_us (period 100 ms).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include "../common/log.h"
#include "sandbox_internal.h"

#define CG_PATH 512

struct ipd__cgroups {
    char v2[CG_PATH]; /* parent under cgroup2, or "" */
    bool v2_kill, v2_mem, v2_pids, v2_cpu;
    char mem[CG_PATH];     /* v1 memory parent, or "" */
    bool memsw;            /* v1 memory.memsw.* exists */
    char pids[CG_PATH];    /* v1 pids parent, or "" */
    char cpuacct[CG_PATH]; /* v1 cpuacct parent, or "" */
    char cpu[CG_PATH];     /* v1 cpu parent, or "" */
    bool cpu_is_cpuacct;   /* one v1 hierarchy "cpu,cpuacct" */
};

/* <n> of the next run-<pid>-<n>: one counter per process, whatever the
 * number of probes, so a name repeats only for another process that got
 * our pid after us (Leftovers). */
static atomic_uint run_counter;

static enum ipd_err write_file(const char *path, const char *s)
{
    enum ipd_err ret = IPD_ERR_IO;
    size_t len = strlen(s);
    int fd = open(path, O_WRONLY | O_CLOEXEC);

    if (fd < 0)
        goto out;
    if (write(fd, s, len) != (ssize_t)len)
        goto out;
    ret = IPD_OK;
out:
    if (fd >= 0) {
        int saved = errno;
        close(fd);
        errno = saved;
    }
    return ret;
}

/* Read up to size-1 bytes, NUL-terminated; -1 on error. */
static ssize_t read_file(const char *path, char *buf, size_t size)
{
    ssize_t n = -1, total = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);

    if (fd < 0)
        goto out;
    for (;;) {
        n = read(fd, buf + total, size - 1 - (size_t)total);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        total += n;
        if ((size_t)total >= size - 1)
            break;
    }
    n = n < 0 ? -1 : total;
out:
    buf[n < 0 ? 0 : n] = '\0';
    if (fd >= 0)
        close(fd);
    return n;
}

static bool path_join(char *out, const char *a, const char *b, const char *c)
{
    int n = snprintf(out, CG_PATH, "%s%s%s", a, b, c);
    return n > 0 && n < CG_PATH;
}

static bool exists(const char *dir, const char *file)
{
    char p[CG_PATH];
    return path_join(p, dir, "/", file) && access(p, F_OK) == 0;
}

/* Value of "key N" in a flat-keyed file, or -1. */
static int64_t keyed_value(const char *path, const char *key)
{
    char buf[4096];
    size_t klen = strlen(key);
    const char *p = buf;

    if (read_file(path, buf, sizeof buf) < 0)
        return -1;
    while (*p) {
        if (strncmp(p, key, klen) == 0 && p[klen] == ' ')
            return strtoll(p + klen + 1, NULL, 10);
        p = strchr(p, '\n');
        if (!p)
            break;
        p++;
    }
    return -1;
}

/* True when the comma-separated list contains item. */
static bool list_has(const char *list, size_t len, const char *item)
{
    size_t ilen = strlen(item);
    const char *p = list, *end = list + len;

    while (p < end) {
        const char *comma = memchr(p, ',', (size_t)(end - p));
        size_t n = comma ? (size_t)(comma - p) : (size_t)(end - p);
        if (n == ilen && memcmp(p, item, n) == 0)
            return true;
        p += n + 1;
    }
    return false;
}

/* Mount point of the cgroup2 hierarchy (controller NULL) or of the v1
 * hierarchy carrying controller, from /proc/self/mountinfo. */
static bool find_mount(const char *controller, char *out)
{
    FILE *f = fopen("/proc/self/mountinfo", "re");
    char line[4096];
    bool found = false;

    if (!f)
        return false;
    while (!found && fgets(line, sizeof line, f)) {
        /* id parent maj:min root mountpoint opts [optional...] - type
         * source superopts */
        char *sep = strstr(line, " - ");
        char *fields[5] = {0};
        char *p = line, *type, *source, *superopts;
        size_t i = 0;
        if (!sep)
            continue;
        *sep = '\0';
        while (i < 5 && p) {
            fields[i++] = p;
            p = strchr(p, ' ');
            if (p)
                *p++ = '\0';
        }
        if (i < 5)
            continue;
        type = sep + 3;
        source = strchr(type, ' ');
        if (!source)
            continue;
        *source++ = '\0';
        superopts = strchr(source, ' ');
        if (!superopts)
            continue;
        superopts++;
        superopts[strcspn(superopts, "\n")] = '\0';
        if (!controller && strcmp(type, "cgroup2") == 0)
            found = true;
        else if (controller && strcmp(type, "cgroup") == 0 &&
                 list_has(superopts, strlen(superopts), controller))
            found = true;
        if (found && snprintf(out, CG_PATH, "%s", fields[4]) >= CG_PATH)
            found = false;
    }
    fclose(f);
    return found;
}

/* Own cgroup path in the v2 hierarchy (controller NULL) or in the v1
 * hierarchy of controller, from /proc/self/cgroup. */
static bool own_path(const char *controller, char *out)
{
    FILE *f = fopen("/proc/self/cgroup", "re");
    char line[4096];
    bool found = false;

    if (!f)
        return false;
    while (!found && fgets(line, sizeof line, f)) {
        char *c1 = strchr(line, ':'), *c2;
        if (!c1)
            continue;
        c2 = strchr(c1 + 1, ':');
        if (!c2)
            continue;
        if (!controller)
            found = c2 == c1 + 1 && strncmp(line, "0:", 2) == 0;
        else
            found = list_has(c1 + 1, (size_t)(c2 - c1 - 1), controller);
        if (found) {
            char *path = c2 + 1;
            path[strcspn(path, "\n")] = '\0';
            if (strcmp(path, "/") == 0)
                path[0] = '\0';
            if (snprintf(out, CG_PATH, "%s", path) >= CG_PATH)
                found = false;
        }
    }
    fclose(f);
    return found;
}

/* Create (or reuse) the parent cgroup "<mount><own>/<name>". */
static bool make_parent(const char *controller, const char *name, char *out)
{
    char mnt[CG_PATH], own[CG_PATH];

    if (!find_mount(controller, mnt) || !own_path(controller, own))
        return false;
    if (snprintf(out, CG_PATH, "%s%s/%s", mnt, own, name) >= CG_PATH)
        return false;
    if (mkdir(out, 0755) != 0 && errno != EEXIST) {
        out[0] = '\0';
        return false;
    }
    return true;
}

static bool has_word(const char *s, const char *word)
{
    size_t n = strlen(word);
    const char *p = s;

    for (;;) {
        p = strstr(p, word);
        if (!p)
            return false;
        if ((p == s || p[-1] == ' ') &&
            (p[n] == ' ' || p[n] == '\n' || p[n] == '\0'))
            return true;
        p += n;
    }
}

/*
 * cgroup v2's "no internal processes" rule: a cgroup that holds processes
 * (ours holds interpd, and in a container also its init) cannot enable
 * controllers for its children: writing +memory to its subtree_control
 * fails with EBUSY.  So, when our own cgroup has memory or pids delegated
 * (cgroup.controllers lists them) but cannot pass them on, move every
 * process of it into a leaf "<own>/service" (as systemd does for
 * Delegate=yes units) and try again.  Returns true when it moved them.
 */
static bool move_to_leaf(const char *own_dir)
{
    char leaf[CG_PATH], procs[CG_PATH], dst[CG_PATH], list[16384];
    ssize_t n;
    bool moved = false;

    if (!path_join(leaf, own_dir, "/service", "") ||
        !path_join(procs, own_dir, "/cgroup.procs", "") ||
        !path_join(dst, leaf, "/cgroup.procs", ""))
        return false;
    if (mkdir(leaf, 0755) != 0 && errno != EEXIST)
        return false;
    n = read_file(procs, list, sizeof list);
    if (n <= 0)
        return false;
    for (char *p = list, *nl; *p; p = nl + 1) {
        nl = strchr(p, '\n');
        if (!nl)
            break;
        *nl = '\0';
        /* One pid per write; a process that exited meanwhile is fine. */
        if (write_file(dst, p) == IPD_OK)
            moved = true;
    }
    return moved;
}

/* Enable the controllers of names[] that own_dir has (cgroup.controllers)
 * in its subtree_control; EBUSY from any moves the service into a leaf
 * (move_to_leaf) and tries again. */
static void delegate_own(const char *own_dir, const char *const *names,
                         size_t n)
{
    char path[CG_PATH], ctl_path[CG_PATH], own_ctl[256];
    bool want[4] = {false}, busy = false;

    if (n > IPD_ARRAY_LEN(want) ||
        !path_join(path, own_dir, "/cgroup.subtree_control", "") ||
        !path_join(ctl_path, own_dir, "/cgroup.controllers", "") ||
        read_file(ctl_path, own_ctl, sizeof own_ctl) < 0)
        return;
    for (size_t i = 0; i < n; i++) {
        char plus[32];
        want[i] = has_word(own_ctl, names[i]);
        snprintf(plus, sizeof plus, "+%s", names[i]);
        if (want[i] && write_file(path, plus) && errno == EBUSY)
            busy = true;
    }
    if (!busy || !move_to_leaf(own_dir))
        return;
    ipd_info("sandbox: moved the service into %s/service so its cgroup can "
             "delegate memory, pids and cpu (cgroup v2 \"no internal "
             "processes\")",
             own_dir);
    for (size_t i = 0; i < n; i++) {
        char plus[32];
        snprintf(plus, sizeof plus, "+%s", names[i]);
        if (want[i])
            (void)write_file(path, plus);
    }
}

static void probe_v2(struct ipd__cgroups *cg, const char *name)
{
    static const char *const names[] = {"memory", "pids", "cpu"};
    bool *got[] = {&cg->v2_mem, &cg->v2_pids, &cg->v2_cpu};
    char mnt[CG_PATH], own[CG_PATH], own_dir[CG_PATH], path[CG_PATH];
    char ctl[256];

    if (!make_parent(NULL, name, cg->v2)) {
        cg->v2[0] = '\0';
        return;
    }
    cg->v2_kill = exists(cg->v2, "cgroup.kill");
    /* Delegate from our own cgroup to the parent, then from the parent
     * to the runs. */
    if (find_mount(NULL, mnt) && own_path(NULL, own) &&
        path_join(own_dir, mnt, own, ""))
        delegate_own(own_dir, names, IPD_ARRAY_LEN(names));
    if (!path_join(path, cg->v2, "/cgroup.controllers", "") ||
        read_file(path, ctl, sizeof ctl) < 0 ||
        !path_join(path, cg->v2, "/cgroup.subtree_control", ""))
        return;
    for (size_t i = 0; i < IPD_ARRAY_LEN(names); i++) {
        char plus[32];
        snprintf(plus, sizeof plus, "+%s", names[i]);
        if (has_word(ctl, names[i]))
            *got[i] = write_file(path, plus) == IPD_OK;
    }
}

static bool dir_empty(const char *dir)
{
    char path[CG_PATH], buf[64];

    if (!dir[0] || !path_join(path, dir, "/cgroup.procs", ""))
        return true;
    if (read_file(path, buf, sizeof buf) < 0)
        return errno == ENOENT;
    return buf[0] == '\0';
}

/* Remove parent's empty run dirs whose pid is gone (see Leftovers); a
 * dir of a live pid may be another service's run and is left alone. */
static void reap_leftovers(const char *parent)
{
    DIR *d = parent[0] ? opendir(parent) : NULL;
    struct dirent *e;
    int reaped = 0;

    if (!d)
        return;
    while ((e = readdir(d))) {
        char path[CG_PATH];
        long pid;
        unsigned n;
        int end = 0;
        if (sscanf(e->d_name, "run-%ld-%u%n", &pid, &n, &end) != 2 ||
            e->d_name[end] != '\0' || pid <= 0 || pid == (long)getpid())
            continue;
        if (kill((pid_t)pid, 0) == 0 || errno != ESRCH)
            continue;
        if (path_join(path, parent, "/", e->d_name) && dir_empty(path) &&
            rmdir(path) == 0)
            reaped++;
    }
    closedir(d);
    if (reaped)
        ipd_info("sandbox: removed %d leftover run cgroup(s) of ended "
                 "processes under %s",
                 reaped, parent);
}

enum ipd_err ipd__cgroups_probe(const char *name, struct ipd__cgroups **out,
                                unsigned *mech, char *err, size_t errlen)
{
    enum ipd_err ret = IPD_ERR_UNAVAILABLE;
    struct ipd__cgroups *cg = ipd_xcalloc(1, sizeof *cg);

    probe_v2(cg, name);
    if (cg->v2_kill)
        *mech |= IPD_SANDBOX_CG2_KILL;
    if (cg->v2_mem)
        *mech |= IPD_SANDBOX_CG2_MEMORY;
    if (cg->v2_pids)
        *mech |= IPD_SANDBOX_CG2_PIDS;
    if (!cg->v2_mem && make_parent("memory", name, cg->mem)) {
        *mech |= IPD_SANDBOX_CG1_MEMORY;
        cg->memsw = exists(cg->mem, "memory.memsw.limit_in_bytes");
    }
    if (!cg->v2_pids && make_parent("pids", name, cg->pids))
        *mech |= IPD_SANDBOX_CG1_PIDS;
    if (!cg->v2[0] && make_parent("cpuacct", name, cg->cpuacct))
        *mech |= IPD_SANDBOX_CG1_CPUACCT;
    if (cg->v2_cpu) {
        *mech |= IPD_SANDBOX_CG2_CPU;
    } else if (make_parent("cpu", name, cg->cpu) &&
               exists(cg->cpu, "cpu.cfs_quota_us")) {
        *mech |= IPD_SANDBOX_CG1_CPU;
        cg->cpu_is_cpuacct = strcmp(cg->cpu, cg->cpuacct) == 0;
    } else {
        cg->cpu[0] = '\0';
    }
    if (!cg->v2_mem && !cg->mem[0]) {
        snprintf(err, errlen,
                 "no memory cgroup (v2 memory not delegated, "
                 "v1 memory not writable)");
        goto out;
    }
    if (!cg->v2_pids && !cg->pids[0]) {
        snprintf(err, errlen,
                 "no pids cgroup (v2 pids not delegated, "
                 "v1 pids not writable)");
        goto out;
    }
    if (!cg->v2_cpu && !cg->cpu[0]) {
        snprintf(err, errlen,
                 "no cpu cgroup (v2 cpu not delegated, v1 cpu "
                 "controller not writable)");
        goto out;
    }
    reap_leftovers(cg->v2);
    reap_leftovers(cg->mem);
    reap_leftovers(cg->pids);
    reap_leftovers(cg->cpuacct);
    if (!cg->cpu_is_cpuacct)
        reap_leftovers(cg->cpu);
    ret = IPD_OK;
out:
    if (ret) {
        ipd__cgroups_free(cg);
        cg = NULL;
    }
    *out = cg;
    return ret;
}

void ipd__cgroups_free(struct ipd__cgroups *cg)
{
    free(cg);
}

static enum ipd_err set_value(const char *dir, const char *file, int64_t v,
                              char *err, size_t errlen)
{
    char path[CG_PATH], num[32];

    snprintf(num, sizeof num, "%lld", (long long)v);
    if (!path_join(path, dir, "/", file) || write_file(path, num)) {
        snprintf(err, errlen, "cgroup: writing %s to %s/%s: %s", num, dir, file,
                 strerror(errno));
        return IPD_ERR_INTERNAL;
    }
    return IPD_OK;
}

/*
 * mkdir parent/leaf.  A dir already there is a leftover of a dead process
 * that had our pid (our own <n> never repeats): taken over when no
 * process is in it; IPD_ERR_CONFLICT when one is, so the caller moves on
 * to another name.
 */
static enum ipd_err make_run_dir(const char *parent, const char *leaf,
                                 char *out, char *err, size_t errlen)
{
    if (!path_join(out, parent, "/", leaf)) {
        snprintf(err, errlen, "cgroup: path too long: %s/%s", parent, leaf);
        out[0] = '\0';
        return IPD_ERR_INTERNAL;
    }
    if (mkdir(out, 0755) == 0)
        return IPD_OK;
    if (errno == EEXIST) {
        if (dir_empty(out) && rmdir(out) == 0 && mkdir(out, 0755) == 0) {
            ipd_info("sandbox: took over the leftover cgroup %s", out);
            return IPD_OK;
        }
        snprintf(err, errlen, "cgroup: %s exists and is in use", out);
        out[0] = '\0';
        return IPD_ERR_CONFLICT;
    }
    snprintf(err, errlen, "cgroup: mkdir %s: %s", out, strerror(errno));
    out[0] = '\0';
    return IPD_ERR_INTERNAL;
}

static enum ipd_err open_procs(const char *dir, int *fd, char *err,
                               size_t errlen)
{
    char path[CG_PATH];

    if (!path_join(path, dir, "/cgroup.procs", ""))
        return IPD_ERR_INTERNAL;
    *fd = open(path, O_WRONLY | O_CLOEXEC);
    if (*fd < 0) {
        snprintf(err, errlen, "cgroup: open %s: %s", path, strerror(errno));
        return IPD_ERR_INTERNAL;
    }
    return IPD_OK;
}

/* "quota period" of cpu.max, or the v1 CFS quota, for millis/1000
 * cores per 100 ms period. */
static enum ipd_err set_cpu_share(const struct ipd__cgroup_run *run,
                                  int64_t millis, char *err, size_t errlen)
{
    int64_t quota = millis * 100; /* usec per 100000 usec period */
    char path[CG_PATH], val[64];

    if (quota < 1000)
        quota = 1000; /* the kernel's minimum quota: 1 ms */
    if (!run->cpu_is_v2) {
        enum ipd_err rc =
            set_value(run->cpu, "cpu.cfs_period_us", 100000, err, errlen);
        return rc ? rc
                  : set_value(run->cpu, "cpu.cfs_quota_us", quota, err, errlen);
    }
    snprintf(val, sizeof val, "%lld 100000", (long long)quota);
    if (!path_join(path, run->cpu, "/cpu.max", "") || write_file(path, val)) {
        snprintf(err, errlen, "cgroup: writing %s to %s/cpu.max: %s", val,
                 run->cpu, strerror(errno));
        return IPD_ERR_INTERNAL;
    }
    return IPD_OK;
}

/* The CPU share: the v2 run dir, the v1 cpuacct run dir when cpu shares
 * its hierarchy, else a v1 cpu run dir joined through procs_fd[*nfd]. */
static enum ipd_err create_cpu(const struct ipd__cgroups *cg, const char *leaf,
                               int64_t millis, struct ipd__cgroup_run *run,
                               size_t *nfd, char *err, size_t errlen)
{
    enum ipd_err rc;

    if (cg->v2_cpu) {
        run->cpu_is_v2 = true;
        memcpy(run->cpu, run->v2, sizeof run->cpu);
    } else if (cg->cpu_is_cpuacct && run->cpuacct[0]) {
        run->cpu_is_cpuacct = true;
        memcpy(run->cpu, run->cpuacct, sizeof run->cpu);
    } else if (cg->cpu[0]) {
        rc = make_run_dir(cg->cpu, leaf, run->cpu, err, errlen);
        if (!rc)
            rc = open_procs(run->cpu, &run->procs_fd[(*nfd)++], err, errlen);
        if (rc)
            return rc;
    } else {
        snprintf(err, errlen, "cgroup: no cpu controller");
        return IPD_ERR_INTERNAL;
    }
    return set_cpu_share(run, millis, err, errlen);
}

static enum ipd_err try_create(const struct ipd__cgroups *cg, const char *leaf,
                               const struct ipd__cgroup_limits *lim,
                               struct ipd__cgroup_run *run, char *err,
                               size_t errlen)
{
    int64_t memory_bytes = lim->memory_bytes, pids = lim->pids;
    enum ipd_err rc = IPD_OK;
    size_t nfd = 0;

    memset(run, 0, sizeof *run);
    run->v2_fd = -1;
    for (size_t i = 0; i < IPD_ARRAY_LEN(run->procs_fd); i++)
        run->procs_fd[i] = -1;

    if (cg->v2[0]) {
        rc = make_run_dir(cg->v2, leaf, run->v2, err, errlen);
        if (rc)
            goto out;
        run->v2_fd = open(run->v2, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (run->v2_fd < 0) {
            snprintf(err, errlen, "cgroup: open %s: %s", run->v2,
                     strerror(errno));
            rc = IPD_ERR_INTERNAL;
            goto out;
        }
    }
    if (cg->v2_mem) {
        run->mem_is_v2 = true;
        memcpy(run->mem, run->v2, sizeof run->mem);
        rc = set_value(run->mem, "memory.max", memory_bytes, err, errlen);
        if (rc)
            goto out;
        if (exists(run->mem, "memory.swap.max")) {
            rc = set_value(run->mem, "memory.swap.max", 0, err, errlen);
            if (rc)
                goto out;
        }
    } else {
        rc = make_run_dir(cg->mem, leaf, run->mem, err, errlen);
        if (rc)
            goto out;
        rc = set_value(run->mem, "memory.limit_in_bytes", memory_bytes, err,
                       errlen);
        if (rc)
            goto out;
        if (cg->memsw) {
            rc = set_value(run->mem, "memory.memsw.limit_in_bytes",
                           memory_bytes, err, errlen);
            if (rc)
                goto out;
        }
        rc = open_procs(run->mem, &run->procs_fd[nfd++], err, errlen);
        if (rc)
            goto out;
    }
    if (cg->v2_pids) {
        run->pids_is_v2 = true;
        memcpy(run->pids, run->v2, sizeof run->pids);
        rc = set_value(run->pids, "pids.max", pids, err, errlen);
        if (rc)
            goto out;
    } else {
        rc = make_run_dir(cg->pids, leaf, run->pids, err, errlen);
        if (rc)
            goto out;
        rc = set_value(run->pids, "pids.max", pids, err, errlen);
        if (rc)
            goto out;
        rc = open_procs(run->pids, &run->procs_fd[nfd++], err, errlen);
        if (rc)
            goto out;
    }
    if (!cg->v2[0] && cg->cpuacct[0]) {
        rc = make_run_dir(cg->cpuacct, leaf, run->cpuacct, err, errlen);
        if (rc)
            goto out;
        rc = open_procs(run->cpuacct, &run->procs_fd[nfd++], err, errlen);
        if (rc)
            goto out;
    }
    rc = create_cpu(cg, leaf, lim->cpu_millis, run, &nfd, err, errlen);
out:
    if (rc)
        (void)ipd__cgroup_run_destroy(run);
    return rc;
}

enum ipd_err ipd__cgroup_run_create(const struct ipd__cgroups *cg,
                                    const struct ipd__cgroup_limits *lim,
                                    struct ipd__cgroup_run *run, char *err,
                                    size_t errlen)
{
    enum ipd_err rc = IPD_ERR_CONFLICT;

    /* Each name in use (by a live process of a reused pid) costs one
     * more try; eight in a row would mean something else is wrong. */
    for (int i = 0; i < 8 && rc == IPD_ERR_CONFLICT; i++) {
        char leaf[64];
        snprintf(leaf, sizeof leaf, "run-%ld-%u", (long)getpid(),
                 atomic_fetch_add(&run_counter, 1));
        rc = try_create(cg, leaf, lim, run, err, errlen);
    }
    return rc == IPD_ERR_CONFLICT ? IPD_ERR_INTERNAL : rc;
}

/* VmHWM of /proc/<pid>/status in KiB, 0 when unreadable. */
static long pid_hwm_kib(long pid)
{
    char path[64], buf[4096];
    snprintf(path, sizeof path, "/proc/%ld/status", pid);
    if (read_file(path, buf, sizeof buf) < 0)
        return 0;
    const char *p = strstr(buf, "\nVmHWM:");
    return p ? strtol(p + 8, NULL, 10) : 0;
}

long ipd__cgroup_run_hwm_kib(const struct ipd__cgroup_run *run)
{
    char path[CG_PATH], buf[16384];
    const char *dir = run->v2[0]     ? run->v2
                      : run->pids[0] ? run->pids
                                     : run->mem;
    const char *p = buf;
    long max = 0;

    if (!dir[0] || !path_join(path, dir, "/cgroup.procs", "") ||
        read_file(path, buf, sizeof buf) < 0)
        return 0;
    while (*p) {
        char *end;
        long pid = strtol(p, &end, 10), kib;
        if (end == p)
            break;
        kib = pid > 0 ? pid_hwm_kib(pid) : 0;
        if (kib > max)
            max = kib;
        p = end;
        while (*p == '\n')
            p++;
    }
    return max;
}

/* Signal every pid listed in dir/cgroup.procs; returns how many. */
static int signal_listed(const char *dir, int sig)
{
    char path[CG_PATH], buf[16384];
    const char *p = buf;
    int n = 0;

    if (!dir[0] || !path_join(path, dir, "/cgroup.procs", "") ||
        read_file(path, buf, sizeof buf) < 0)
        return 0;
    while (*p) {
        char *end;
        long pid = strtol(p, &end, 10);
        if (end == p)
            break;
        if (pid > 1) {
            kill((pid_t)pid, sig);
            n++;
        }
        p = end;
        while (*p == '\n')
            p++;
    }
    return n;
}

void ipd__cgroup_run_kill(const struct ipd__cgroup_run *run)
{
    char path[CG_PATH];

    if (run->v2[0] && path_join(path, run->v2, "/cgroup.kill", "") &&
        access(path, F_OK) == 0) {
        (void)write_file(path, "1");
        return;
    }
    /* v1 has no atomic kill: a forking tree can outrun one pass, so the
     * caller also kills the pid namespace's init, which takes the whole
     * namespace with it; this pass is the second line. */
    if (!signal_listed(run->pids[0] ? run->pids : run->mem, SIGKILL))
        signal_listed(run->cpuacct, SIGKILL);
}

void ipd__cgroup_run_signal(const struct ipd__cgroup_run *run, int sig)
{
    const char *dirs[] = {run->v2, run->pids, run->mem, run->cpuacct};
    for (size_t i = 0; i < IPD_ARRAY_LEN(dirs); i++)
        if (dirs[i][0] && signal_listed(dirs[i], sig))
            return;
}

/* True when no process is left in any of the run's cgroups. */
static bool run_empty(const struct ipd__cgroup_run *run)
{
    return dir_empty(run->v2) && dir_empty(run->mem) && dir_empty(run->pids) &&
           dir_empty(run->cpuacct) && dir_empty(run->cpu);
}

void ipd__cgroup_run_stats(const struct ipd__cgroup_run *run,
                           int64_t *oom_kills, int64_t *cpu_usec,
                           int64_t *mem_peak)
{
    char path[CG_PATH], buf[64];

    *oom_kills = -1;
    *cpu_usec = -1;
    *mem_peak = -1;
    if (run->mem[0]) {
        if (run->mem_is_v2) {
            if (path_join(path, run->mem, "/memory.events", ""))
                *oom_kills = keyed_value(path, "oom_kill");
            if (path_join(path, run->mem, "/memory.peak", "") &&
                read_file(path, buf, sizeof buf) > 0)
                *mem_peak = strtoll(buf, NULL, 10);
        } else {
            if (path_join(path, run->mem, "/memory.oom_control", ""))
                *oom_kills = keyed_value(path, "oom_kill");
            if (path_join(path, run->mem, "/memory.max_usage_in_bytes", "") &&
                read_file(path, buf, sizeof buf) > 0)
                *mem_peak = strtoll(buf, NULL, 10);
        }
    }
    if (run->v2[0] && path_join(path, run->v2, "/cpu.stat", ""))
        *cpu_usec = keyed_value(path, "usage_usec");
    else if (run->cpuacct[0] &&
             path_join(path, run->cpuacct, "/cpuacct.usage", "") &&
             read_file(path, buf, sizeof buf) > 0)
        *cpu_usec = strtoll(buf, NULL, 10) / 1000;
}

int64_t ipd__cgroup_run_memory(const struct ipd__cgroup_run *run)
{
    char path[CG_PATH], buf[64];

    if (!run->mem[0] ||
        !path_join(path, run->mem,
                   run->mem_is_v2 ? "/memory.current"
                                  : "/memory.usage_in_bytes",
                   "") ||
        read_file(path, buf, sizeof buf) <= 0)
        return -1;
    return strtoll(buf, NULL, 10);
}

enum ipd_err ipd__cgroup_run_destroy(struct ipd__cgroup_run *run)
{
    enum ipd_err ret = IPD_OK;
    char *dirs[5] = {run->v2, run->mem_is_v2 ? NULL : run->mem,
                     run->pids_is_v2 ? NULL : run->pids, run->cpuacct,
                     run->cpu_is_v2 || run->cpu_is_cpuacct ? NULL : run->cpu};

    /* Bounded: about 2 s, killing again each round. */
    for (int i = 0; i < 400 && !run_empty(run); i++) {
        ipd__cgroup_run_kill(run);
        usleep(i < 20 ? 500 : 5000);
    }
    if (!run_empty(run))
        ret = IPD_ERR_INTERNAL;
    for (size_t i = 0; i < IPD_ARRAY_LEN(dirs); i++) {
        if (!dirs[i] || !dirs[i][0])
            continue;
        /* A dying task can keep the cgroup busy a little after it left
         * cgroup.procs. */
        for (int k = 0; k < 200; k++) {
            if (rmdir(dirs[i]) == 0 || errno != EBUSY)
                break;
            usleep(1000);
        }
        dirs[i][0] = '\0';
    }
    run->mem[0] = '\0';
    run->pids[0] = '\0';
    run->cpu[0] = '\0';
    if (run->v2_fd >= 0)
        close(run->v2_fd);
    run->v2_fd = -1;
    for (size_t i = 0; i < IPD_ARRAY_LEN(run->procs_fd); i++) {
        if (run->procs_fd[i] >= 0)
            close(run->procs_fd[i]);
        run->procs_fd[i] = -1;
    }
    return ret;
}
