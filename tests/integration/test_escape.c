/*
 * test_escape.c - the escape suite through the HTTP API: each case sends one
 * Python snippet to POST /v1/executions and asserts on the JSON result
 * (docs/SANDBOX.md, "What is protected").  tests/sandbox/test_escape.c does
 * the same against the sandbox's C API; this one checks what a client of
 * the service can reach, with the server's real data dir, keys, stores and
 * environment around it.
 *
 * One server for the whole program (started by the first case, stopped by
 * the last), with a secret in its environment and its own sandbox host uid
 * (so processes of its runs can be counted in the host's /proc without
 * counting those of other test programs running at the same time).  Each
 * case uses its own user id, so quotas and files don't mix.
 */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"

#define EXEC_TIMEOUT_MS 90000 /* a request's transfer; runs ask for less */

static struct itest_server *srv;
static unsigned sbx_uid; /* the server's --sandbox-uid */
/* Host uids after it: one per execution slot (2), then one per session
 * (--max-sessions, 8): sessions (ITEST_EXEC_MODE=session runs every
 * execution in one) run as sandbox-uid + 1 + slots + i. */
#define SLOTS 2
#define MAX_SESSIONS 8
#define SBX_UIDS (1 + SLOTS + MAX_SESSIONS)
#define STR_(x) #x
#define STR(x) STR_(x)
static char secret_env[96];  /* INTERPD_TEST_SECRET=... */
static char secret_env2[96]; /* DB_PASSWORD=... */
static char secret1[64], secret2[64];

/* POST /v1/executions as user with body (taken). */
static long exec_body(const char *user, json_t *body, struct itest_resp *out)
{
    return itest_exec(srv, srv->admin_key, user, body, EXEC_TIMEOUT_MS, out);
}

/* Run code with a wall timeout (seconds) as user. */
static long run_py(const char *user, const char *code, int timeout,
                   struct itest_resp *out)
{
    return exec_body(
        user, json_pack("{s:s, s:i}", "code", code, "timeout", timeout), out);
}

/* run_py under a stricter policy the server defines. */
static long run_py_policy(const char *user, const char *code, int timeout,
                          const char *policy, struct itest_resp *out)
{
    return exec_body(user,
                     json_pack("{s:s, s:i, s:s}", "code", code, "timeout",
                               timeout, "policy", policy),
                     out);
}

#define out_of(r) itest_exec_stdout(r)
#define err_of(r) itest_exec_stderr(r)

/* stdout contains needle; else print stdout and stderr. */
#define CHECK_OUT(r, needle)                                                   \
    CHECKF(strstr(out_of(r), (needle)) != NULL,                                \
           "want \"%s\" in stdout:\n%s\nstderr:\n%s", (needle), out_of(r),     \
           err_of(r))
#define CHECK_NOT_OUT(r, needle)                                               \
    CHECKF(strstr(out_of(r), (needle)) == NULL,                                \
           "unwanted \"%s\" in stdout:\n%s\nstderr:\n%s", (needle), out_of(r), \
           err_of(r))

/* A uid of the server's sandbox: --sandbox-uid itself (internal runs),
 * a slot's or a session's. */
static bool sbx_uid_of(unsigned uid)
{
    return uid - sbx_uid < SBX_UIDS;
}

/* A uid of an execution slot (not a session's). */
static bool slot_uid_of(unsigned uid)
{
    return uid - sbx_uid >= 1 && uid - sbx_uid <= SLOTS;
}

/* Processes of the server's sandbox uids (sbx_uid_of, real or effective
 * uid). */
static int count_uid(void)
{
    return test_count_uids(sbx_uid, sbx_uid + SBX_UIDS - 1);
}

/* ---- warm runs (ITEST_EXEC_MODE=warm) ----
 *
 * With warm executions the slots' uids are never idle: each slot's zygote
 * (a sandbox init, local pid 1, and python running zygote.py, local pid
 * 2, in a pid namespace of their own) and the child it keeps parked (a pid
 * namespace one level deeper holding the child's init, local pid 1, and
 * its program child, local pid 2, both still zygote.py, waiting for a
 * request) live as long as the server does.  So there "no process of the
 * sandbox uids" is checked as:
 *  - idle (no run in flight, idle_procs): every process of the sandbox
 *    uids is one of those (polled, bounded: after a run the slot parks a
 *    new child, after a timeout it starts a new zygote);
 *  - after a run (run_left): nothing is left in the run's own pid
 *    namespace.  The run writes that namespace and the start time of its
 *    init to stderr (RUN_NS_CODE).  While that init lives the namespace is
 *    the run's (its inode number may be reused by a later one once it is
 *    gone); once the init is gone, so is everything else in it (the kernel
 *    ends a pid namespace with its init, and a run's processes cannot
 *    leave it).  The init of a warm run is not the service's child but
 *    the zygote's (cold: the service reaps its run's init before it
 *    answers), so it may be a zombie a moment after the response, for the
 *    zygote's init to reap: not counted at once, but it must be gone
 *    within check_no_survivors' 5 s.
 * Cold runs keep the plain count of every process of the sandbox uids. */
#define RUN_NS_CODE                                                            \
    "import os as _o\n"                                                        \
    "_o.write(2, ('pidns %s %s\\n' % (_o.readlink('/proc/self/ns/pid'),"       \
    " open('/proc/1/stat').read().rsplit(')', 1)[1].split()[19]))"             \
    ".encode())\n"

struct run_ns {
    unsigned long long ino;   /* the run's pid namespace */
    unsigned long long start; /* its init's start time (clock ticks) */
};

struct sbx_proc {
    int pid;
    int depth;                /* NSpid entries (1: the test's namespace) */
    int local;                /* its pid in its own namespace */
    unsigned uid;             /* real uid */
    unsigned long long ns;    /* inode of /proc/PID/ns/pid */
    unsigned long long start; /* field 22 of /proc/PID/stat */
    bool zygote;              /* cmdline: python ... zygote.py */
    char state;               /* 'Z': a zombie */
};

/* What /proc/pid says of one process; false when it is gone or (unless
 * any_uid) not of the sandbox uids. */
static bool read_proc(const char *pid, bool any_uid, struct sbx_proc *p)
{
    char path[300], line[256], buf[512];
    bool uid_ok = false;
    memset(p, 0, sizeof(*p));
    p->pid = atoi(pid);
    snprintf(path, sizeof(path), "/proc/%s/status", pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return false;
    while (fgets(line, sizeof(line), f)) {
        unsigned ruid, euid;
        if (sscanf(line, "Uid:\t%u\t%u", &ruid, &euid) == 2) {
            uid_ok = sbx_uid_of(ruid) || sbx_uid_of(euid);
            p->uid = ruid;
        } else if (sscanf(line, "State:\t%c", &p->state) == 1) {
            continue;
        } else if (!strncmp(line, "NSpid:", 6)) {
            for (char *t = strtok(line + 6, " \t\n"); t;
                 t = strtok(NULL, " \t\n")) {
                p->depth++;
                p->local = atoi(t);
            }
        }
    }
    fclose(f);
    snprintf(path, sizeof(path), "/proc/%s/ns/pid", pid);
    ssize_t n = readlink(path, buf, sizeof(buf) - 1);
    if (!(uid_ok || any_uid) || n <= 0)
        return false;
    buf[n] = 0;
    if (sscanf(buf, "pid:[%llu]", &p->ns) != 1)
        return false;
    snprintf(path, sizeof(path), "/proc/%s/stat", pid);
    char *stat = itest_read_file(path, NULL);
    char *rp = stat ? strrchr(stat, ')') : NULL;
    for (int field = 2; rp && field < 22; field++)
        rp = strchr(rp + 1, ' ');
    p->start = rp ? strtoull(rp + 1, NULL, 10) : 0;
    free(stat);
    snprintf(path, sizeof(path), "/proc/%s/cmdline", pid);
    size_t len = 0;
    char *cmd = itest_read_file(path, &len);
    for (size_t i = 0; cmd && i < len; i += strlen(cmd + i) + 1) {
        size_t l = strlen(cmd + i);
        if (l >= 10 && !strcmp(cmd + i + l - 10, "/zygote.py"))
            p->zygote = true;
    }
    free(cmd);
    return true;
}

/* Every process of the sandbox uids (as count_uid sees them), at most
 * max, into out; how many. */
static size_t list_sbx_procs(struct sbx_proc *out, size_t max)
{
    DIR *d = opendir("/proc");
    struct dirent *e;
    size_t n = 0;
    while (d && (e = readdir(d)) != NULL && n < max) {
        if (e->d_name[0] >= '0' && e->d_name[0] <= '9' &&
            read_proc(e->d_name, false, &out[n]))
            n++;
    }
    if (d)
        closedir(d);
    return n;
}

#define MAX_SBX_PROCS 4096

/* The depth (NSpid entries) of the server's own processes. */
static int server_depth(void)
{
    char pid[32];
    struct sbx_proc p;
    snprintf(pid, sizeof(pid), "%d", (int)srv->pid);
    return read_proc(pid, true, &p) ? p.depth : 1;
}

/* Processes of the sandbox uids that are not a zygote's or a parked
 * child's (see above). */
static int warm_extra(void)
{
    struct sbx_proc *v = calloc(MAX_SBX_PROCS, sizeof(*v));
    int zd = server_depth() + 1, extra = 0;
    size_t n = v ? list_sbx_procs(v, MAX_SBX_PROCS) : 0;
    if (!v)
        return -1;
    for (size_t i = 0; i < n; i++) {
        /* Who else shares its namespace, and is it a zygote's? */
        size_t peers = 0;
        bool zyg_ns = false, pair = true;
        for (size_t j = 0; j < n; j++) {
            if (v[j].ns != v[i].ns)
                continue;
            peers++;
            zyg_ns |= v[j].local == 2 && v[j].zygote;
            pair &= (v[j].local == 1 || v[j].local == 2) && v[j].zygote;
        }
        /* A slot's only: a session's processes (its zygote and child
         * look the same) are gone once the session is (the session
         * mode's harness deletes each session after its call). */
        bool mine =
            slot_uid_of(v[i].uid) &&
            ((v[i].depth == zd && zyg_ns && (v[i].local == 1 || v[i].zygote)) ||
             (v[i].depth == zd + 1 && pair && peers == 2));
        extra += !mine;
    }
    free(v);
    return extra;
}

/* The processes of the sandbox uids that no run should leave: all of
 * them on cold runs; on warm ones, all but the zygotes' and parked
 * children's, polled (20 s at most) until there are want. */
static int idle_procs(int want)
{
    if (!itest_exec_warm())
        return count_uid();
    double deadline = itest_now() + 20;
    int n = warm_extra();
    while (n != want && itest_now() < deadline) {
        usleep(50 * 1000);
        n = warm_extra();
    }
    return n;
}

/* The run's namespace from what RUN_NS_CODE wrote to r's stderr. */
static struct run_ns run_ns_of(const struct itest_resp *r)
{
    struct run_ns ns = {0, 0};
    const char *l = strstr(err_of(r), "pidns pid:[");
    if (!l || sscanf(l, "pidns pid:[%llu] %llu", &ns.ino, &ns.start) != 2)
        fprintf(stderr, "no \"pidns\" line in the run's stderr:\n%s\n",
                err_of(r));
    return ns;
}

/* Processes a run left behind: on cold runs every process of the sandbox
 * uids; on warm ones those of its pid namespace while its init exists,
 * zombies only when asked (-1: the run did not say which). */
static int run_left(struct run_ns ns, bool zombies)
{
    if (!itest_exec_warm())
        return count_uid();
    if (!ns.ino)
        return -1;
    struct sbx_proc *v = calloc(MAX_SBX_PROCS, sizeof(*v));
    size_t n = v ? list_sbx_procs(v, MAX_SBX_PROCS) : 0;
    int in_ns = 0;
    bool init_alive = false;
    if (!v)
        return -1;
    for (size_t i = 0; i < n; i++) {
        if (v[i].ns != ns.ino)
            continue;
        in_ns += zombies || v[i].state != 'Z';
        init_alive |= v[i].local == 1 && v[i].start == ns.start;
    }
    free(v);
    return init_alive ? in_ns : 0;
}

/* GET /healthz is 200 and print(1) runs. */
static void check_service_healthy(const char *user)
{
    struct itest_resp r;
    itest_request(srv, "GET", "/healthz", NULL, NULL, NULL, NULL, 0, NULL, &r);
    CHECK_STATUS(&r, 200);
    itest_resp_release(&r);
    run_py(user, "print(1)", 20, &r);
    CHECK_STATUS(&r, 200);
    CHECK(json_is_true(itest_json_get(r.json, "success")));
    CHECK_STR(out_of(&r), "1\n");
    itest_resp_release(&r);
}

/* host and port of a mongodb://[user@]host:port/... URI (first host). */
static bool mongo_host_port(const char *uri, char host[128], int *port)
{
    const char *p = strstr(uri, "://"), *end, *at, *colon;
    if (!p)
        return false;
    p += 3;
    end = p + strcspn(p, "/?,");
    at = memchr(p, '@', (size_t)(end - p));
    if (at)
        p = at + 1;
    colon = memchr(p, ':', (size_t)(end - p));
    if (!colon || (size_t)(colon - p) >= 128)
        return false;
    memcpy(host, p, (size_t)(colon - p));
    host[colon - p] = '\0';
    *port = atoi(colon + 1);
    return *port > 0;
}

/* ---- cases ---- */

static void start_server(void)
{
    /* An own range of sandbox uids (SBX_UIDS of them): runs of other
     * servers (other test programs running alongside) don't show up in
     * count_uid. */
    char uid[16];
    /* A range of 12 per process (the sandbox uid, 2 slots, 8 sessions'
     * uids), so variants running at once (cold, warm, session) never
     * share a uid; below test_sessions' 400000. */
    sbx_uid = 300000u + 12u * ((unsigned)getpid() % 8300u);
    snprintf(uid, sizeof(uid), "%u", sbx_uid);
    snprintf(secret1, sizeof(secret1), "s3cr3t-%ld-esc", (long)getpid());
    snprintf(secret2, sizeof(secret2), "dbpw-%ld-hunter2", (long)getpid());
    snprintf(secret_env, sizeof(secret_env), "INTERPD_TEST_SECRET=%s", secret1);
    snprintf(secret_env2, sizeof(secret_env2), "DB_PASSWORD=%s", secret2);
    /* The readiness check runs one execution as the sandbox uid every
     * --ready-check-interval: off here (it still runs once before the
     * server listens), so the counts below see only the cases' runs. */
    /* bomb: the fork bomb's policy, 16 processes, so it meets its limit
     * within its 5 s even where each fork is slow (a warm run forks a
     * copy of the zygote's 300 MiB image; on a loaded machine 128 were
     * not reached). */
    const char *args[] = {"--sandbox-uid",
                          uid,
                          "--exec-slots",
                          STR(SLOTS),
                          "--max-sessions",
                          STR(MAX_SESSIONS),
                          "--ready-check-interval",
                          "never",
                          "--policy.bomb.processes",
                          "16",
                          NULL};
    const char *env[] = {secret_env, secret_env2, NULL};
    struct itest_opts o = {.args = args, .env = env};
    srv = itest_start(&o);
    REQUIRE(srv);
    /* The venv job lists the base interpreter in the sandbox at start:
     * once it is done, nothing runs as the sandbox uid (warm: nothing but
     * the zygotes and their parked children, see idle_procs). */
    CHECK(itest_wait_job_ran(srv, "venv", 60000));
    CHECK_INT(idle_procs(0), 0);
}

static void network_refused(void)
{
    struct itest_resp r;
    int lport = 0, lfd;
    char mhost[128] = "127.0.0.1";
    int mport = 0;
    REQUIRE(srv);
    lfd = itest_listen_local(&lport, 8);
    REQUIRE(lfd >= 0);
    if (srv->mongo_uri && !mongo_host_port(srv->mongo_uri, mhost, &mport))
        mport = 0;
    char *code =
        itest_fmt("import socket, errno\n"
                  "def probe(name, host, port):\n"
                  "    if not port:\n"
                  "        print(name, 'OSError skipped'); return\n"
                  "    try:\n"
                  "        socket.create_connection((host, port), timeout=2)\n"
                  "        print(name, 'CONNECTED')\n"
                  "    except OSError as e:\n"
                  "        print(name, 'OSError',"
                  " errno.errorcode.get(e.errno, e.errno))\n"
                  "probe('server', '127.0.0.1', %d)\n"
                  "probe('listener', '127.0.0.1', %d)\n"
                  "probe('mongo', '%s', %d)\n"
                  "for fam in (socket.AF_INET, socket.AF_INET6):\n"
                  "    try:\n"
                  "        socket.socket(fam, socket.SOCK_DGRAM)\n"
                  "        print('udp', 'OPENED')\n"
                  "    except OSError as e:\n"
                  "        print('udp OSError')\n",
                  srv->port, lport, mhost, mport);
    run_py("net", code, 20, &r);
    free(code);
    CHECK_STATUS(&r, 200);
    CHECK_OUT(&r, "server OSError");
    CHECK_OUT(&r, "listener OSError");
    CHECK_OUT(&r, "mongo OSError");
    CHECK_NOT_OUT(&r, "CONNECTED");
    CHECK_NOT_OUT(&r, "OPENED");
    CHECK(json_is_true(itest_json_get(r.json, "success")));
    itest_resp_release(&r);
    /* Nothing reached the listener. */
    struct timeval tv = {0, 0};
    fd_set fds;
    FD_ZERO(&fds);
    FD_SET(lfd, &fds);
    CHECK_INT(select(lfd + 1, &fds, NULL, NULL, &tv), 0);
    close(lfd);
}

/* Walk the sandbox's whole tree (but /proc) for needles in names and
 * contents, bounded in time (BUDGET seconds): everything outside /usr
 * first, then /usr as far as the budget goes, then a recursive glob of /.
 * Prints "FOUND <i> <path>" for hits and "walked True" when everything outside
 * /usr was seen.  The needles come reversed in NEEDLES_R: the job's own
 * variables.json (readable at /mnt/job) must not contain them. */
static const char walk_code[] =
    "import os, time\n"
    "needles = [n[::-1].encode() for n in NEEDLES_R]\n"
    "deadline = time.monotonic() + BUDGET\n"
    "def look(path):\n"
    "    for i, n in enumerate(needles):\n"
    "        if n in os.fsencode(path): print('FOUND', i, repr(path))\n"
    "    try:\n"
    "        with open(path, 'rb') as f: data = f.read(1 << 20)\n"
    "    except OSError:\n"
    "        return\n"
    "    for i, n in enumerate(needles):\n"
    "        if n in data: print('FOUND', i, repr(path))\n"
    "def walk(top, skip):\n"
    "    for d, dirs, files in os.walk(top, followlinks=False):\n"
    "        dirs[:] = [x for x in dirs if os.path.join(d, x) not in skip]\n"
    "        for x in files + [x for x in dirs]:\n"
    "            if time.monotonic() > deadline: return False\n"
    "            p = os.path.join(d, x)\n"
    "            if os.path.isfile(p) and not os.path.islink(p): look(p)\n"
    "            else:\n"
    "                for i, n in enumerate(needles):\n"
    "                    if n in os.fsencode(p): print('FOUND', i, repr(p))\n"
    "    return True\n"
    "done = walk('/', {'/proc', '/usr', '/sys'})\n"
    "print('walked', done)\n"
    "walk('/usr', set())\n"
    "import glob\n"
    "n = 0\n"
    "gend = time.monotonic() + 3\n"
    "tops = [t for t in os.listdir('/') if t not in ('proc', 'usr', 'sys')\n"
    "        and not os.path.islink('/' + t)]\n"
    "for t in tops:\n"
    "    for p in glob.iglob('/%s/**' % t, recursive=True):\n"
    "        if time.monotonic() > gend: break\n"
    "        n += 1\n"
    "        for i, x in enumerate(needles):\n"
    "            if x in os.fsencode(p): print('FOUND', i, repr(p))\n"
    "print('globbed', n > 10)\n";

static json_t *reversed_str(const char *s)
{
    size_t n = strlen(s);
    char *r = malloc(n + 1);
    for (size_t i = 0; i < n; i++)
        r[i] = s[n - 1 - i];
    r[n] = '\0';
    json_t *j = json_string(r);
    free(r);
    return j;
}

static void host_files_unreachable(void)
{
    struct itest_resp up, r;
    char blob_content[96], secret_name[64];
    REQUIRE(srv);
    snprintf(blob_content, sizeof(blob_content),
             "user-a-private-%ld-content-do-not-leak", (long)getpid());
    snprintf(secret_name, sizeof(secret_name), "privname%ld.txt",
             (long)getpid());
    itest_upload_raw(srv, srv->admin_key, "esc_a", secret_name, "text/plain",
                     blob_content, strlen(blob_content), NULL, &up);
    REQUIRE_STATUS(&up, 201);
    const char *fid = itest_json_str(up.json, "file_id");
    REQUIRE(fid && strlen(fid) > 2);

    /* Needles: user A's content, the admin key, A's file name. */
    json_t *needles = json_array();
    json_array_append_new(needles, reversed_str(blob_content));
    json_array_append_new(needles, reversed_str(srv->admin_key));
    json_array_append_new(needles, reversed_str(secret_name));

    /* Control: user A, given the file, finds its content in /mnt/data (so
     * the walk below does look into files). */
    exec_body("esc_a",
              json_pack("{s:s, s:i, s:[s], s:{s:O, s:i}}", "code", walk_code,
                        "timeout", 30, "files", fid, "variables", "NEEDLES_R",
                        needles, "BUDGET", 2),
              &r);
    CHECK_STATUS(&r, 200);
    CHECK_OUT(&r, "FOUND 0 '/mnt/data/");
    CHECK_NOT_OUT(&r, "FOUND 1");
    itest_resp_release(&r);

    /* User B: every path of the data dir the test can see (the blob,
     * meta.db, admin.key, exec/...), plus guesses. */
    json_t *paths = json_array();
    char **files = NULL;
    size_t n = itest_list_files(srv->data_dir, &files);
    CHECK(n >= 1);
    for (size_t i = 0; i < n; i++) {
        char *p = itest_fmt("%s/%s", srv->data_dir, files[i]);
        json_array_append_new(paths, json_string(p));
        free(p);
    }
    itest_strv_free(files);
    const char *guesses[] = {"",       "/admin.key", "/token.key", "/meta.db",
                             "/blobs", "/exec",      "/mplcache",  "/.."};
    for (size_t i = 0; i < sizeof(guesses) / sizeof(*guesses); i++) {
        char *p = itest_fmt("%s%s", srv->data_dir, guesses[i]);
        json_array_append_new(paths, json_string(p));
        free(p);
    }
    char *p = itest_fmt("%s/blobs/%.2s/%s", srv->data_dir, fid, fid);
    json_array_append_new(paths, json_string(p));
    free(p);
    p = itest_fmt("%s/blobs/%s", srv->data_dir, fid);
    json_array_append_new(paths, json_string(p));
    free(p);
    json_array_append_new(paths, json_string(srv->log_path));
    json_array_append_new(paths, json_string(srv->tmp_dir));
    json_array_append_new(paths, json_string("/etc/shadow"));
    json_array_append_new(paths, json_string("/etc/gshadow"));
    json_array_append_new(paths, json_string("/root"));
    json_array_append_new(paths, json_string("/sys"));
    json_array_append_new(paths, json_string("/proc/1/root/etc/shadow"));

    char *code =
        itest_fmt("import os, errno\n"
                  "for p in PATHS:\n"
                  "    if os.path.lexists(p): print('EXISTS', repr(p))\n"
                  "    try:\n"
                  "        open(p, 'rb').read(1); print('OPENED', repr(p))\n"
                  "    except OSError as e:\n"
                  "        pass\n"
                  "    try:\n"
                  "        os.listdir(p); print('LISTED', repr(p))\n"
                  "    except OSError as e:\n"
                  "        pass\n"
                  "print('shadow', os.path.exists('/etc/shadow'))\n"
                  "pids = [d for d in os.listdir('/proc') if d.isdigit()]\n"
                  "print('npids', len(pids), 'few', len(pids) <= 4)\n"
                  "print('server pid visible', '%ld' in pids)\n"
                  "for d in pids:\n"
                  "    try: cmd = open('/proc/%%s/cmdline' %% d, 'rb').read()\n"
                  "    except OSError: continue\n"
                  "    if b'serve\\0' in cmd or b'--data-dir' in cmd:\n"
                  "        print('SERVER PROCESS', d, cmd)\n"
                  "%s",
                  (long)srv->pid, walk_code);
    exec_body("esc_b",
              json_pack("{s:s, s:i, s:{s:o, s:O, s:i}}", "code", code,
                        "timeout", 40, "variables", "PATHS", paths, "NEEDLES_R",
                        needles, "BUDGET", 6),
              &r);
    free(code);
    CHECK_STATUS(&r, 200);
    CHECKF(json_is_true(itest_json_get(r.json, "success")), "%s", r.body);
    CHECK_NOT_OUT(&r, "EXISTS");
    CHECK_NOT_OUT(&r, "OPENED");
    CHECK_NOT_OUT(&r, "LISTED");
    CHECK_NOT_OUT(&r, "FOUND");
    CHECK_NOT_OUT(&r, "SERVER PROCESS");
    CHECK_OUT(&r, "shadow False\n");
    CHECK_OUT(&r, "few True\n");
    CHECK_OUT(&r, "server pid visible False\n");
    CHECK_OUT(&r, "walked True\n");
    CHECK_OUT(&r, "globbed True\n");
    itest_resp_release(&r);
    json_decref(needles);
    itest_resp_release(&up);
}

static void environment_has_no_secrets(void)
{
    struct itest_resp r;
    REQUIRE(srv);
    json_t *needles = json_array();
    json_array_append_new(needles, reversed_str(secret1));
    json_array_append_new(needles, reversed_str(secret2));
    json_array_append_new(needles, reversed_str(srv->admin_key));
    if (srv->mongo_uri)
        json_array_append_new(needles, reversed_str(srv->mongo_uri));
    exec_body(
        "esc_env",
        json_pack("{s:s, s:i, s:{s:o}}", "code",
                  "import os\n"
                  "needles = [n[::-1] for n in NEEDLES_R]\n"
                  "hit = [k for k, v in os.environ.items()\n"
                  "       if any(n in k or n in v for n in needles)]\n"
                  "print('env hits', hit)\n"
                  "print('names', 'INTERPD_TEST_SECRET' in os.environ,"
                  " 'DB_PASSWORD' in os.environ,"
                  " any(k.startswith('INTERPD_') for k in os.environ))\n"
                  "bneedles = [n.encode() for n in needles]\n"
                  "for d in ['self', '1'] + [d for d in os.listdir('/proc')"
                  " if d.isdigit()]:\n"
                  "    try:\n"
                  "        data = open('/proc/%s/environ' % d, 'rb').read()\n"
                  "    except OSError as e:\n"
                  "        print('environ', d, 'unreadable'); continue\n"
                  "    print('environ', d,"
                  " 'HIT' if any(n in data for n in bneedles) else 'clean')\n",
                  "timeout", 20, "variables", "NEEDLES_R", needles),
        &r);
    CHECK_STATUS(&r, 200);
    CHECK(json_is_true(itest_json_get(r.json, "success")));
    CHECK_OUT(&r, "env hits []\n");
    CHECK_OUT(&r, "names False False False\n");
    CHECK_OUT(&r, "environ self clean\n");
    CHECKF(strstr(out_of(&r), "environ 1 clean\n") ||
               strstr(out_of(&r), "environ 1 unreadable\n"),
           "stdout: %s", out_of(&r));
    CHECK_NOT_OUT(&r, "HIT");
    itest_resp_release(&r);
}

static void writes_outside_fail(void)
{
    struct itest_resp up, r, dl;
    const char content[] = "x,y\n1,2\n";
    REQUIRE(srv);
    itest_upload_raw(srv, srv->admin_key, "esc_w", "in.csv", "text/csv",
                     content, sizeof(content) - 1, NULL, &up);
    REQUIRE_STATUS(&up, 201);
    const char *fid = itest_json_str(up.json, "file_id");
    REQUIRE(fid);
    exec_body(
        "esc_w",
        json_pack(
            "{s:s, s:i, s:[s]}", "code",
            "import os, errno\n"
            "paths = ['/x', '/usr/x', '/usr/bin/python3', '/usr/lib/x',"
            " '/etc/x', '/etc/passwd', '/etc/hosts', '/bin/x', '/lib/x',"
            " '/mnt/x', '/mnt/data/x', '/mnt/job/x', '/mnt/job/code.py',"
            " '/opt/x', '/dev/x', '/proc/x', '/proc/sys/kernel/hostname',"
            " FILES['in.csv']]\n"
            "for p in paths:\n"
            "    try:\n"
            "        with open(p, 'a') as f: f.write('x')\n"
            "        print('WROTE', p)\n"
            "    except OSError as e:\n"
            "        print('refused', p, errno.errorcode.get(e.errno))\n"
            "for d in ('/newdir', '/usr/newdir', '/etc/newdir',"
            " '/mnt/data/newdir'):\n"
            "    try:\n"
            "        os.mkdir(d); print('MKDIR', d)\n"
            "    except OSError as e:\n"
            "        print('refused', d, errno.errorcode.get(e.errno))\n"
            "try:\n"
            "    os.chmod(FILES['in.csv'], 0o666); print('CHMOD')\n"
            "except OSError as e:\n"
            "    print('refused chmod', errno.errorcode.get(e.errno))\n"
            "open('/tmp/ok', 'w').write('1'); print('tmp ok')\n"
            "open('/mnt/output/ok.txt', 'w').write('1'); print('out ok')\n",
            "timeout", 20, "files", fid),
        &r);
    CHECK_STATUS(&r, 200);
    CHECK_NOT_OUT(&r, "WROTE");
    CHECK_NOT_OUT(&r, "MKDIR");
    CHECK_NOT_OUT(&r, "CHMOD");
    CHECK_OUT(&r, "refused /usr/x ");
    CHECK_OUT(&r, "refused /etc/passwd ");
    CHECK_OUT(&r, "refused /mnt/data/x ");
    CHECK_OUT(&r, "tmp ok\nout ok\n");
    CHECK(json_is_true(itest_json_get(r.json, "success")));
    itest_resp_release(&r);
    /* Nothing changed on the host or in the store. */
    CHECK(access("/usr/x", F_OK) != 0);
    CHECK(access("/newdir", F_OK) != 0);
    char *path = itest_fmt("/v1/files/%s/content", fid);
    itest_request(srv, "GET", path, srv->admin_key, "esc_w", NULL, NULL, 0,
                  NULL, &dl);
    free(path);
    CHECK_STATUS(&dl, 200);
    CHECK(dl.len == sizeof(content) - 1 && !memcmp(dl.body, content, dl.len));
    itest_resp_release(&dl);
    itest_resp_release(&up);
}

/* The code of read_only_mounts_refuse_writes: every mount the run sees
 * with the "ro" option (its own or its superblock's, in
 * /proc/self/mountinfo; at each mount point the one visible there, on
 * top of the others: the one no other there has as its parent, as
 * mountinfo's order is not the stacking order) must
 * refuse creating a file, a directory and a symlink in it (directories)
 * and chmod and utime on it with EROFS: the mount refuses, whatever the
 * permissions would say (the run's uid may not write there either,
 * which is why "refused" alone proved nothing).  Remounting it
 * read-write (mount MS_REMOUNT, with and without MS_BIND;
 * mount_setattr clearing MOUNT_ATTR_RDONLY) must fail and leave it
 * read-only.  Anything else is a "BAD" line.  It also names, for every
 * mount, "mount ro|rw PATH", and the mounts of the interpreter, its
 * stdlib and its prefix (the venv, when there is one). */
static const char ro_mounts_code[] =
    "import ctypes, errno, os, re, sys, sysconfig\n"
    "libc = ctypes.CDLL(None, use_errno=True)\n"
    "libc.syscall.restype = ctypes.c_long\n"
    "def mounts():\n"
    "    at = {}\n"
    "    for line in open('/proc/self/mountinfo'):\n"
    "        f = line.split()\n"
    "        sup = f[f.index('-') + 3].split(',')\n"
    "        mp = re.sub(r'\\\\([0-7]{3})', lambda m: chr(int(m[1], 8)),"
    " f[4])\n"
    "        ro = 'ro' in f[5].split(',') or 'ro' in sup\n"
    "        at.setdefault(mp, []).append((f[0], f[1], ro))\n"
    "    seen = {}\n"
    "    for mp, ms in at.items():\n"
    "        under = {parent for _, parent, _ in ms}\n"
    "        seen[mp] = [ro for i, _, ro in ms if i not in under][0]\n"
    "    return seen\n"
    "def err(fn):\n"
    "    try:\n"
    "        fn()\n"
    "    except OSError as e:\n"
    "        return errno.errorcode.get(e.errno, str(e.errno))\n"
    "    return 'DONE'\n"
    "def sys_err(rc):\n"
    "    e = ctypes.get_errno()\n"
    "    return 'DONE' if rc >= 0 else errno.errorcode.get(e, str(e))\n"
    "class Attr(ctypes.Structure):\n"
    "    _fields_ = [(n, ctypes.c_uint64) for n in"
    " ('set', 'clr', 'prop', 'userns')]\n"
    "def remounts(m):\n"
    "    b = m.encode()\n"
    "    yield 'remount', libc.mount(None, b, None, ctypes.c_ulong(32), None)\n"
    "    yield 'remount_bind', libc.mount(None, b, None,"
    " ctypes.c_ulong(32 | 4096), None)\n"
    "    a = Attr(0, 1, 0, 0)\n"
    "    yield 'setattr_rw', libc.syscall(ctypes.c_long(442),"
    " ctypes.c_int(-100), b, ctypes.c_uint(0), ctypes.byref(a),"
    " ctypes.c_size_t(ctypes.sizeof(a)))\n"
    "seen = mounts()\n"
    "ro = sorted(m for m in seen if seen[m])\n"
    "for m in sorted(seen):\n"
    "    print('mount', 'ro' if seen[m] else 'rw', m)\n"
    "bad, n = [], 0\n"
    "for m in ro:\n"
    "    p = os.path.join(m, '.ipd-ro-probe')\n"
    "    st = os.stat(m)\n"
    "    ops = [('chmod', lambda: os.chmod(m, st.st_mode & 0o7777)),\n"
    "           ('utime', lambda: os.utime(m, ns=(st.st_atime_ns,"
    " st.st_mtime_ns)))]\n"
    "    if os.path.isdir(m):\n"
    "        ops += [('create', lambda: os.close(os.open(p, os.O_WRONLY |"
    " os.O_CREAT | os.O_EXCL, 0o644))),\n"
    "                ('mkdir', lambda: os.mkdir(p)),\n"
    "                ('symlink', lambda: os.symlink('x', p))]\n"
    "    for op, fn in ops:\n"
    "        e = err(fn)\n"
    "        n += 1\n"
    "        if e != 'EROFS':\n"
    "            bad.append('%s %s %s' % (m, op, e))\n"
    "        if e == 'DONE' and op != 'chmod' and op != 'utime':\n"
    "            (os.rmdir if op == 'mkdir' else os.unlink)(p)\n"
    "    for op, rc in remounts(m):\n"
    "        e = sys_err(rc)\n"
    "        n += 1\n"
    "        if e == 'DONE':\n"
    "            bad.append('%s %s %s' % (m, op, e))\n"
    "after = mounts()\n"
    "bad += ['%s not read-only after the remounts' % m for m in ro"
    " if not after.get(m)]\n"
    "def mount_of(path):\n"
    "    path = os.path.realpath(path)\n"
    "    return max((m for m in seen if path == m or"
    " path.startswith(m.rstrip('/') + '/')), key=len)\n"
    "for what, path in (('interpreter', sys.executable),"
    " ('stdlib', sysconfig.get_paths()['stdlib']), ('prefix', sys.prefix)):\n"
    "    m = mount_of(path)\n"
    "    print(what, path, 'on', 'ro' if seen[m] else 'rw', m)\n"
    "for b in bad:\n"
    "    print('BAD', b)\n"
    "print('read-only mounts %d, refusals checked %d' % (len(ro), n))\n";

/* The read-only mounts of a run (the system binds, the prelude, the
 * job and data stages, the venv, the root) refuse writes with EROFS
 * from inside a real execution, and cannot be made writable again: on
 * a mount made writable by mistake, the run's unprivileged uid still
 * gets EACCES/EPERM from the permissions, so writes_outside_fail's
 * "refused" does not see it. */
static void read_only_mounts_refuse_writes(void)
{
    /* (/lib and /bin are binds too where they are not symlinks into
     * /usr; the interpreter's lines cover what they hold) */
    static const char *const expect[] = {"/", "/usr", "/opt/interpd",
                                         "/mnt/job", "/mnt/data"};
    static const char *const host[] = {
        "/usr/.ipd-ro-probe", "/lib/.ipd-ro-probe", "/bin/.ipd-ro-probe"};
    size_t n_expect = sizeof(expect) / sizeof(expect[0]);
    struct itest_resp r;
    const char *sum;
    int n_ro = 0, n_ops = 0;
    REQUIRE(srv);
    run_py("esc_ro", ro_mounts_code, 30, &r);
    CHECK_STATUS(&r, 200);
    CHECK(json_is_true(itest_json_get(r.json, "success")));
    CHECK_NOT_OUT(&r, "BAD");
    sum = strstr(out_of(&r), "read-only mounts ");
    CHECKF(sum &&
               sscanf(sum, "read-only mounts %d, refusals checked %d", &n_ro,
                      &n_ops) == 2 &&
               n_ro >= (int)n_expect && n_ops >= 5 * n_ro,
           "stdout:\n%s\nstderr:\n%s", out_of(&r), err_of(&r));
    for (size_t i = 0; i < n_expect; i++) {
        char *line = itest_fmt("mount ro %s\n", expect[i]);
        CHECK_OUT(&r, line);
        free(line);
    }
    /* what the run writes must stay writable (and the parse sees rw) */
    CHECK_OUT(&r, "mount rw /tmp\n");
    CHECK_OUT(&r, "mount rw /mnt/output\n");
    CHECK_OUT(&r, "\ninterpreter ");
    CHECK_OUT(&r, "\nstdlib ");
    CHECK_OUT(&r, "\nprefix ");
    CHECK_NOT_OUT(&r, " on rw ");
    for (size_t i = 0; i < sizeof(host) / sizeof(host[0]); i++)
        CHECKF(access(host[i], F_OK) != 0, "%s exists on the host", host[i]);
    itest_resp_release(&r);
}

static void fork_bomb_contained(void)
{
    struct itest_resp r;
    REQUIRE(srv);
    double t0 = itest_now();
    /* Every process forks as fast as it can, for 5 s at most. */
    run_py_policy("esc_fork",
                  RUN_NS_CODE
                  "import os, time\n"
                  "top = os.getpid()\n"
                  "end = time.monotonic() + 5\n"
                  "n = fails = 0\n"
                  "while time.monotonic() < end:\n"
                  "    try:\n"
                  "        pid = os.fork()\n"
                  "    except OSError:\n"
                  "        fails += 1; time.sleep(0.001); continue\n"
                  "    if pid == 0:\n"
                  "        n = fails = 0\n"
                  "    else:\n"
                  "        n += 1\n"
                  "if os.getpid() != top:\n"
                  "    os._exit(0)\n"
                  "msg = 'top forked %d limited %s\\n' % (n, fails > 0)\n"
                  "os.write(1, msg.encode())\n",
                  15, "bomb", &r);
    double took = itest_now() - t0;
    CHECK_STATUS(&r, 200);
    CHECKF(took < 30, "the fork bomb's request took %.1f s", took);
    CHECK_OUT(&r, " limited True\n");
    CHECK(json_is_object(itest_json_get(r.json, "resources")));
    struct run_ns ns = run_ns_of(&r);
    itest_resp_release(&r);
    /* Session mode: forks still alive when the call answered were the
     * session's, and it has been deleted (see check_no_survivors). */
    CHECK_INT(run_left(ns, false), 0);
    check_service_healthy("esc_fork");
}

static void big_allocation_oom_killed(void)
{
    struct itest_resp r;
    REQUIRE(srv);
    run_py("esc_oom",
           "print('start', flush=True)\n"
           "b = bytearray(4 << 30)\n"
           "b[::4096] = b'\\1' * len(range(0, len(b), 4096))\n"
           "print('survived')\n",
           30, &r);
    CHECK_STATUS(&r, 200);
    CHECK(json_is_true(itest_json_get(r.json, "resources.oom_killed")));
    CHECK_STR(itest_json_str(r.json, "error.type"), "MemoryLimit");
    CHECK(json_is_false(itest_json_get(r.json, "success")));
    CHECK(json_is_false(itest_json_get(r.json, "timed_out")));
    CHECK_STR(out_of(&r), "start\n");
    itest_resp_release(&r);
    check_service_healthy("esc_oom");
}

static void disk_fill_stops(void)
{
    struct itest_resp r;
    REQUIRE(srv);
    /* Files of 16 MiB at most (under RLIMIT_FSIZE), so the only way to
     * stop is the tmpfs size: ENOSPC.  The "standard" policy (the admin
     * key's) has 256 MiB for /tmp and for /mnt/output (docs/SANDBOX.md). */
    run_py("esc_disk",
           "import os, errno\n"
           "def fill(d):\n"
           "    n = i = 0\n"
           "    chunk = b'x' * (1 << 20)\n"
           "    try:\n"
           "        while n < (1 << 30):\n"
           "            with open('%s/fill%d.bin' % (d, i), 'wb') as f:\n"
           "                for _ in range(16):\n"
           "                    f.write(chunk); f.flush(); n += len(chunk)\n"
           "            i += 1\n"
           "    except OSError as e:\n"
           "        return errno.errorcode.get(e.errno), e.errno, n\n"
           "    return 'NO LIMIT', 0, n\n"
           "for d in ('/tmp', '/mnt/output'):\n"
           "    name, code, n = fill(d)\n"
           "    print(d, name, code, (16 << 20) <= n <= (256 << 20),"
           " n >> 20, flush=True)\n"
           "for x in os.listdir('/mnt/output'):\n"
           "    if x.startswith('fill') and x != 'fill0.bin':\n"
           "        os.unlink(x)\n"
           "open('after.txt', 'w').write('space again')\n"
           "print('recovered')\n",
           30, &r);
    CHECK_STATUS(&r, 200);
    CHECK_OUT(&r, "/tmp ENOSPC 28 True ");
    CHECK_OUT(&r, "/mnt/output ENOSPC 28 True ");
    CHECK_OUT(&r, "recovered\n");
    CHECK(json_is_true(itest_json_get(r.json, "success")));
    /* What was left in /mnt/output is stored: a full 16 MiB file and the
     * one written after space was freed. */
    json_t *gen = itest_json_get(r.json, "generated_files");
    CHECKF(json_array_size(gen) == 2, "%s", r.body);
    CHECK_STR(itest_json_str(json_array_get(gen, 0), "filename"), "after.txt");
    CHECK_STR(itest_json_str(json_array_get(gen, 1), "filename"), "fill0.bin");
    CHECK_INT(
        json_integer_value(itest_json_get(json_array_get(gen, 1), "size")),
        16 << 20);
    itest_resp_release(&r);
    check_service_healthy("esc_disk");
}

static void print_flood_truncated(void)
{
    struct itest_resp r;
    REQUIRE(srv);
    double t0 = itest_now();
    run_py("esc_print",
           "import sys\n"
           "s = 'x' * (1 << 20)\n"
           "for i in range(1024): sys.stdout.write(s)\n"
           "sys.stdout.flush()\n"
           "print('end', file=sys.stderr)\n",
           60, &r);
    double took = itest_now() - t0;
    CHECK_STATUS(&r, 200);
    CHECKF(took < 60, "printing 1 GiB took %.1f s", took);
    CHECK(json_is_true(itest_json_get(r.json, "stdout_truncated")));
    CHECK(json_is_false(itest_json_get(r.json, "stderr_truncated")));
    CHECK(json_is_false(itest_json_get(r.json, "timed_out")));
    CHECK(json_is_true(itest_json_get(r.json, "success")));
    CHECK_INT(strlen(out_of(&r)), 100 * 1024);
    CHECK_STR(err_of(&r), "end\n");
    itest_resp_release(&r);
}

static const char daemon_code[] =
    RUN_NS_CODE "import os, time\n"
                "if os.fork() == 0:\n"
                "    os.setsid()\n"
                "    if os.fork() == 0:\n"
                "        os.execv('/bin/sleep', ['sleep', '1000'])\n"
                "    os._exit(0)\n"
                "time.sleep(0.3)\n"
                "print('daemonized', flush=True)\n";

/* After a response, no process of the run exists: counted at once (the
 * teardown is synchronous); also polled 5 s to tell "late" from "never".
 * ns: the run's namespace (warm runs count there, see run_left).
 * Session mode (ITEST_EXEC_MODE=session): what a call leaves running is
 * the session's until the session ends, and the harness has ended it
 * (DELETE) before the test sees the response: DELETE "ends the session at
 * once: its interpreter and everything it runs are killed" (docs/API.md),
 * so the same holds there. */
static void check_no_survivors(const char *what, struct run_ns ns)
{
    int now = run_left(ns, false), later = run_left(ns, true);
    double deadline = itest_now() + 5;
    while (later > 0 && itest_now() < deadline) {
        usleep(100 * 1000);
        later = run_left(ns, true);
    }
    CHECKF(now == 0,
           "%s: %d processes of uid %u right after the response "
           "(%d after 5 s)",
           what, now, sbx_uid, later);
    CHECKF(later == 0,
           "%s: %d processes of uid %u survive 5 s after the "
           "response",
           what, later, sbx_uid);
}

static void daemon_killed_no_survivors(void)
{
    struct itest_resp r;
    REQUIRE(srv);
    char *code = itest_fmt("%stime.sleep(1000)\n", daemon_code);
    double t0 = itest_now();
    run_py("esc_daemon", code, 2, &r);
    double took = itest_now() - t0;
    free(code);
    CHECK_STATUS(&r, 200);
    CHECK(json_is_true(itest_json_get(r.json, "timed_out")));
    CHECK_STR(itest_json_str(r.json, "error.type"), "Timeout");
    CHECK_STR(out_of(&r), "daemonized\n");
    CHECKF(took < 10, "a 2 s timeout took %.1f s", took);
    struct run_ns ns = run_ns_of(&r);
    itest_resp_release(&r);
    check_no_survivors("after the timeout", ns);

    /* The parent exits at once, leaving the daemon: the run ends without
     * waiting for it, and it dies with the run. */
    t0 = itest_now();
    run_py("esc_daemon", daemon_code, 20, &r);
    took = itest_now() - t0;
    CHECK_STATUS(&r, 200);
    CHECK(json_is_false(itest_json_get(r.json, "timed_out")));
    CHECK(json_is_true(itest_json_get(r.json, "success")));
    CHECKF(took < 10, "the run waited %.1f s for its daemon", took);
    ns = run_ns_of(&r);
    itest_resp_release(&r);
    check_no_survivors("after the parent exited", ns);
}

static void kill_all_hurts_nothing_outside(void)
{
    struct itest_resp r;
    pid_t victim = -1;
    int status = 0;
    REQUIRE(srv);
    /* A host process with a slot's host uid: the only kind a kill(-1)
     * could reach without capabilities. */
    if (geteuid() == 0) {
        unsigned slot_uid = sbx_uid + 1;
        victim = fork();
        REQUIRE(victim >= 0);
        if (victim == 0) {
            if (setresgid(slot_uid, slot_uid, slot_uid) ||
                setresuid(slot_uid, slot_uid, slot_uid))
                _exit(3);
            sleep(60);
            _exit(0);
        }
        usleep(50 * 1000);
        /* Also shows count_uid sees such a process (the survivor counts
         * of the other cases are not vacuous; warm: besides the zygotes'
         * and parked children's, see idle_procs). */
        CHECK_INT(idle_procs(1), 1);
    }
    run_py("esc_kill",
           "import os, signal, time\n"
           "pid = os.fork()\n"
           "if pid == 0:\n"
           "    time.sleep(30); os._exit(0)\n"
           "try:\n"
           "    os.kill(-1, signal.SIGKILL)\n"
           "except OSError as e:\n"
           "    print('kill failed', e.errno)\n"
           "_, st = os.waitpid(pid, 0)\n"
           "print('still here',"
           " os.WTERMSIG(st) if os.WIFSIGNALED(st) else -1)\n",
           20, &r);
    CHECK_STATUS(&r, 200);
    CHECK(json_is_true(itest_json_get(r.json, "success")));
    CHECK_STR(out_of(&r), "still here 9\n");
    itest_resp_release(&r);
    if (victim > 0) {
        CHECKF(waitpid(victim, &status, WNOHANG) == 0,
               "the host process of uid %u died (status 0x%x)", sbx_uid,
               status);
        kill(victim, SIGKILL);
        waitpid(victim, &status, 0);
        CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
    }
    CHECK(srv->pid > 0 && kill(srv->pid, 0) == 0);
    check_service_healthy("esc_kill");
}

static void dangerous_syscalls_eperm(void)
{
    struct itest_resp r;
    REQUIRE(srv);
    run_py("esc_sys",
           "import ctypes, errno, os\n"
           "libc = ctypes.CDLL(None, use_errno=True)\n"
           "libc.syscall.restype = ctypes.c_long\n"
           "libc.ptrace.restype = ctypes.c_long\n"
           "def show(name, call):\n"
           "    ctypes.set_errno(0)\n"
           "    rc = call()\n"
           "    e = ctypes.get_errno()\n"
           "    print(name, 'ALLOWED' if rc >= 0 else"
           " errno.errorcode.get(e, e), e if rc < 0 else '')\n"
           "L = ctypes.c_long\n"
           "show('ptrace_attach', lambda: libc.ptrace(L(16), L(1), None,"
           " None))\n"
           "show('ptrace_traceme', lambda: libc.ptrace(L(0), L(0), None,"
           " None))\n"
           "show('mount', lambda: libc.mount(b'none', b'/tmp', b'tmpfs',"
           " L(0), None))\n"
           "show('unshare_user', lambda: libc.unshare(0x10000000))\n"
           "show('unshare_ns', lambda: libc.unshare(0x00020000))\n"
           "print('os.unshare', hasattr(os, 'unshare'))\n"
           "if hasattr(os, 'unshare'):\n"
           "    try:\n"
           "        os.unshare(os.CLONE_NEWUSER); print('OS UNSHARE ALLOWED')\n"
           "    except OSError as e:\n"
           "        print('os.unshare errno', e.errno)\n"
           "show('bpf', lambda: libc.syscall(L(321), L(0), L(0), L(0)))\n"
           "show('keyctl', lambda: libc.syscall(L(250), L(0), L(0), L(0),"
           " L(0), L(0)))\n"
           "show('add_key', lambda: libc.syscall(L(248), b'user', b'k',"
           " b'v', L(1), L(-2)))\n",
           20, &r);
    CHECK_STATUS(&r, 200);
    CHECK_OUT(&r, "ptrace_attach EPERM 1\n");
    CHECK_OUT(&r, "ptrace_traceme EPERM 1\n");
    CHECK_OUT(&r, "mount EPERM 1\n");
    CHECK_OUT(&r, "unshare_user EPERM 1\n");
    CHECK_OUT(&r, "unshare_ns EPERM 1\n");
    CHECK_OUT(&r, "bpf EPERM 1\n");
    CHECK_OUT(&r, "keyctl EPERM 1\n");
    CHECK_OUT(&r, "add_key EPERM 1\n");
    CHECK_NOT_OUT(&r, "ALLOWED");
    if (strstr(out_of(&r), "os.unshare True"))
        CHECK_OUT(&r, "os.unshare errno 1\n");
    CHECK(json_is_true(itest_json_get(r.json, "success")));
    itest_resp_release(&r);
}

/* The user's files, from GET /v1/files (new reference). */
static json_t *list_files(const char *user)
{
    struct itest_resp r;
    itest_request(srv, "GET", "/v1/files?limit=100", srv->admin_key, user, NULL,
                  NULL, 0, NULL, &r);
    CHECK_STATUS(&r, 200);
    json_t *files = json_incref(itest_json_get(r.json, "files"));
    itest_resp_release(&r);
    return files ? files : json_array();
}

static bool skipped_has(const json_t *result, const char *name,
                        const char *reason)
{
    json_t *sk = itest_json_get(result, "generated_files_skipped");
    size_t i;
    json_t *e;
    json_array_foreach(sk, i, e)
    {
        const char *n = itest_json_str(e, "filename");
        const char *why = itest_json_str(e, "reason");
        if (n && !strcmp(n, name) && why && !strcmp(why, reason))
            return true;
    }
    return false;
}

static void symlink_in_output_not_followed(void)
{
    struct itest_resp r;
    REQUIRE(srv);
    run_py("esc_link",
           "import os\n"
           "os.symlink('/etc/passwd', 'passwd_link')\n"
           "os.symlink('/etc', 'etc_link')\n"
           "os.symlink('/proc/self/root/etc/passwd', 'root_link')\n"
           "open('real.txt', 'w').write('real')\n"
           "print('planted')\n",
           20, &r);
    CHECK_STATUS(&r, 200);
    CHECK_STR(out_of(&r), "planted\n");
    json_t *gen = itest_json_get(r.json, "generated_files");
    CHECKF(json_array_size(gen) == 1 &&
               !strcmp(itest_json_str(json_array_get(gen, 0), "filename")
                           ? itest_json_str(json_array_get(gen, 0), "filename")
                           : "",
                       "real.txt"),
           "generated_files: %s", r.body);
    CHECK_INT(
        json_integer_value(itest_json_get(json_array_get(gen, 0), "size")), 4);
    CHECKF(skipped_has(r.json, "passwd_link", "symlink"), "%s", r.body);
    CHECKF(skipped_has(r.json, "etc_link", "symlink"), "%s", r.body);
    CHECKF(skipped_has(r.json, "root_link", "symlink"), "%s", r.body);
    CHECKF(!strstr(r.body, "root:"), "passwd content in %s", r.body);
    itest_resp_release(&r);
    json_t *files = list_files("esc_link");
    CHECK_INT(json_array_size(files), 1);
    json_decref(files);
}

static void thousand_files_capped(void)
{
    struct itest_resp r;
    REQUIRE(srv);
    run_py("esc_many",
           "for i in range(1000):\n"
           "    open('f%04d.txt' % i, 'w').write(str(i))\n"
           "print('made')\n",
           30, &r);
    CHECK_STATUS(&r, 200);
    CHECK_STR(out_of(&r), "made\n");
    json_t *gen = itest_json_get(r.json, "generated_files");
    CHECKF(json_is_array(gen) && json_array_size(gen) <= 20 &&
               json_array_size(gen) >= 1,
           "%zu generated files", json_array_size(gen));
    CHECK(json_is_true(itest_json_get(r.json, "generated_files_truncated")));
    CHECK_INT(
        json_integer_value(itest_json_get(r.json, "generated_files_dropped")),
        1000 - (long long)json_array_size(gen));
    itest_resp_release(&r);
    json_t *files = list_files("esc_many");
    CHECKF(json_array_size(files) <= 20, "%zu files stored",
           json_array_size(files));
    json_decref(files);
}

static void newline_names_handled(void)
{
    struct itest_resp r, dl;
    REQUIRE(srv);
    run_py("esc_nl",
           "open('a\\nb.txt', 'w').write('one')\n"
           "open('\\n', 'w').write('two')\n"
           "open('c\\r\\nd\\t.csv', 'w').write('x\\n1\\n')\n"
           "print('made')\n",
           20, &r);
    CHECK_STATUS(&r, 200);
    CHECK_STR(out_of(&r), "made\n");
    json_t *gen = itest_json_get(r.json, "generated_files");
    size_t i, found = 0;
    json_t *f;
    CHECKF(json_array_size(gen) == 3, "generated_files: %s", r.body);
    json_array_foreach(gen, i, f)
    {
        const char *name = itest_json_str(f, "filename");
        const char *id = itest_json_str(f, "file_id");
        if (!name || !id)
            continue;
        CHECKF(!strpbrk(name, "\n\r\t") && name[0], "stored name \"%s\"", name);
        char *path = itest_fmt("/v1/files/%s/content", id);
        itest_request(srv, "GET", path, srv->admin_key, "esc_nl", NULL, NULL, 0,
                      NULL, &dl);
        free(path);
        CHECK_STATUS(&dl, 200);
        if ((dl.len == 3 &&
             (!memcmp(dl.body, "one", 3) || !memcmp(dl.body, "two", 3))) ||
            (dl.len == 4 && !memcmp(dl.body, "x\n1\n", 4)))
            found++;
        const char *cd = itest_header(&dl, "Content-Disposition");
        CHECKF(!cd || !strpbrk(cd, "\r\n"), "Content-Disposition: %s", cd);
        itest_resp_release(&dl);
    }
    CHECK_INT(found, 3);
    itest_resp_release(&r);
    json_t *files = list_files("esc_nl");
    CHECK_INT(json_array_size(files), 3);
    json_decref(files);
}

/* A zygote's user namespace maps uid 1000 to its own host uid, alone
 * (seen from the host). */
static void check_map_own_uid(const struct sbx_proc *p, const char *what)
{
    char *path = itest_fmt("/proc/%d/uid_map", p->pid);
    char *map = itest_read_file(path, NULL);
    unsigned in = 1, out = 0, count = 0;
    CHECKF(map && sscanf(map, "%u %u %u", &in, &out, &count) == 3 &&
               in == 1000 && out == p->uid && count == 1,
           "%s pid %d (uid %u): uid_map %s", what, p->pid, p->uid,
           map ? map : "(unreadable)");
    free(map);
    free(path);
}

/* Warm: each slot's zygote maps uid 1000 of its user namespace to the
 * slot's host uid, alone (seen from the host).  (A session's zygote, of a
 * session's uid, is check_session_uid's.) */
static void check_zygote_maps(void)
{
    struct sbx_proc *v = calloc(MAX_SBX_PROCS, sizeof(*v));
    size_t n = v ? list_sbx_procs(v, MAX_SBX_PROCS) : 0, zygotes = 0;
    int zd = server_depth() + 1;
    for (size_t i = 0; i < n; i++) {
        if (v[i].depth != zd || v[i].local != 2 || !v[i].zygote ||
            !slot_uid_of(v[i].uid))
            continue;
        zygotes++;
        check_map_own_uid(&v[i], "slot zygote"); /* a slot's: filtered */
    }
    /* Both, unless one is being replaced (after the timeout above). */
    CHECKF(zygotes >= 1 && zygotes <= 2, "%zu zygotes of the 2 slots' uids",
           zygotes);
    free(v);
}

/* Session mode: a session's processes (its zygote, its child's init and
 * program child) run as a host uid of the session's own, sandbox-uid + 1
 * + slots + i, never a slot's, and its zygote maps uid 1000 to it alone.
 * The hook deletes each of its sessions before the test sees the answer,
 * so this one is made here (the hook passes a request naming a session
 * through), looked at while it lives, then deleted. */
static void check_session_uid(void)
{
    struct itest_resp r;
    itest_request(srv, "POST", "/v1/sessions", srv->admin_key, "esc_sess",
                  "application/json", "{}", 2, NULL, &r);
    REQUIRE_STATUS(&r, 201);
    char *sid = itest_json_dup(r.json, "session_id");
    itest_resp_release(&r);
    exec_body("esc_sess",
              json_pack("{s:s, s:i, s:s}", "code", RUN_NS_CODE "print('in')",
                        "timeout", 20, "session_id", sid),
              &r);
    CHECK_STATUS(&r, 200);
    CHECK_STR(out_of(&r), "in\n");
    CHECK_STR(itest_json_str(r.json, "session_id"), sid);
    struct run_ns ns = run_ns_of(&r);
    itest_resp_release(&r);
    struct sbx_proc *v = calloc(MAX_SBX_PROCS, sizeof(*v));
    size_t n = v ? list_sbx_procs(v, MAX_SBX_PROCS) : 0, in_ns = 0;
    size_t zygotes = 0;
    unsigned uid = 0;
    int zd = server_depth() + 1;
    for (size_t i = 0; i < n; i++) {
        if (v[i].ns != ns.ino)
            continue;
        in_ns++;
        uid = uid ? uid : v[i].uid;
        CHECKF(v[i].uid == uid && v[i].uid - sbx_uid >= 1 + SLOTS &&
                   v[i].uid - sbx_uid < SBX_UIDS,
               "pid %d of the session's child: uid %u (sandbox-uid %u, "
               "want a session's, after the %d slots', the same for all)",
               v[i].pid, v[i].uid, sbx_uid, SLOTS);
    }
    CHECKF(in_ns >= 2,
           "%zu processes in the session child's namespace "
           "(want its init and its program)",
           in_ns);
    for (size_t i = 0; uid && i < n; i++) {
        if (v[i].depth != zd || v[i].local != 2 || !v[i].zygote ||
            v[i].uid != uid)
            continue;
        zygotes++;
        check_map_own_uid(&v[i], "session zygote"); /* its uid is uid */
    }
    CHECKF(zygotes == 1, "%zu zygotes of the session's uid %u", zygotes, uid);
    free(v);
    char *path = itest_fmt("/v1/sessions/%s", sid);
    itest_request(srv, "DELETE", path, srv->admin_key, "esc_sess", NULL, NULL,
                  0, NULL, &r);
    CHECK_STATUS(&r, 204);
    itest_resp_release(&r);
    free(path);
    free(sid);
    /* Gone with the session. */
    CHECK_INT(idle_procs(0), 0);
}

static void status_locked_down(void)
{
    struct itest_resp r;
    REQUIRE(srv);
    run_py("esc_status",
           "import os\n"
           "for line in open('/proc/self/status'):\n"
           "    k = line.split(':')[0]\n"
           "    if k in ('NoNewPrivs', 'Seccomp', 'CapInh', 'CapPrm',"
           " 'CapEff', 'CapBnd', 'CapAmb'):\n"
           "        print(line.strip().replace('\\t', ' '))\n"
           "print('uid', os.getuid(), os.geteuid())\n"
           "print('map', open('/proc/self/uid_map').read().split())\n",
           20, &r);
    CHECK_STATUS(&r, 200);
    CHECK_OUT(&r, "NoNewPrivs: 1\n");
    CHECK_OUT(&r, "Seccomp: 2\n");
    CHECK_OUT(&r, "CapEff: 0000000000000000\n");
    CHECK_OUT(&r, "CapPrm: 0000000000000000\n");
    CHECK_OUT(&r, "CapInh: 0000000000000000\n");
    CHECK_OUT(&r, "CapBnd: 0000000000000000\n");
    CHECK_OUT(&r, "CapAmb: 0000000000000000\n");
    const char *mode = itest_json_str(r.json, "resources.mode");
    if (geteuid() == 0 && mode && !strcmp(mode, "warm")) {
        /* A warm run's user namespace is made by its zygote, whose own
         * namespace maps 1000 to the slot's uid: the run sees 1000 mapped
         * to itself one level up, and the zygotes' maps say the rest.  (A
         * server started warm still runs cold while a slot's zygote
         * restarts, as after the timeout above: then the cold map.)  A
         * session's call (always "warm") is its zygote's child the same
         * way, with a session's uid: check_session_uid. */
        CHECKF(strstr(out_of(&r), "map ['1000', '1000', '1']\n"),
               "want the zygote's uid mapped to itself in stdout:\n%s",
               out_of(&r));
        check_zygote_maps();
        if (itest_exec_session())
            check_session_uid();
    } else if (geteuid() == 0) {
        /* a slot's uid, after --sandbox-uid (2 slots) */
        char want[96], want2[96];
        snprintf(want, sizeof(want), "map ['1000', '%u', '1']\n", sbx_uid + 1);
        snprintf(want2, sizeof(want2), "map ['1000', '%u', '1']\n",
                 sbx_uid + 2);
        CHECKF(strstr(out_of(&r), want) || strstr(out_of(&r), want2),
               "want a slot's uid map in stdout:\n%s", out_of(&r));
    }
    CHECK_NOT_OUT(&r, "uid 0 ");
    itest_resp_release(&r);
}

static void stop_server(void)
{
    REQUIRE(srv);
    CHECK_INT(idle_procs(0), 0);
    itest_stop(srv);
    srv = NULL;
    /* Whatever ran as the sandbox uids (warm: the zygotes too) ended with
     * the server. */
    CHECK_INT(count_uid(), 0);
}

TEST_MAIN(T(start_server), T(network_refused), T(host_files_unreachable),
          T(environment_has_no_secrets), T(writes_outside_fail),
          T(read_only_mounts_refuse_writes), T(fork_bomb_contained),
          T(big_allocation_oom_killed), T(disk_fill_stops),
          T(print_flood_truncated), T(daemon_killed_no_survivors),
          T(kill_all_hurts_nothing_outside), T(dangerous_syscalls_eperm),
          T(symlink_in_output_not_followed), T(thousand_files_capped),
          T(newline_names_handled), T(status_locked_down), T(stop_server))
