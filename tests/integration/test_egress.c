/*
 * test_egress.c - a networked run's way out, through the real daemon
 * (issue 13, item 7; docs/SANDBOX.md, "Network"): the run has its own
 * network namespace, so the service's own port and a loopback listener
 * of the host are out of reach; its HTTP clients go through the egress
 * proxy (HTTP_PROXY/HTTPS_PROXY), which refuses loopback, private,
 * link-local and metadata addresses with 403 unless --fetch-allow names
 * them, and relays to an allowlisted server, plain HTTP and CONNECT.
 *
 * The test's own HTTP server listens on 127.0.0.2 (loopback, like every
 * address here: no traffic leaves the machine), which the server's
 * --fetch-allow names; 127.0.0.1 (the service's port, the listener) is
 * not allowlisted.  The refused private and link-local URLs are refused
 * by the proxy before any connection is tried; the code checks first that
 * the proxy is there and tries none of them without it.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <sys/socket.h>
#include <unistd.h>

#include "harness.h"

static struct itest_server *srv;
static char *net_key; /* a key of the networked policy */

/* ---- the test's own origin server on 127.0.0.2 -------------------------- */

static struct {
    int lfd, stop[2];
    int port;
    pthread_t th;
    pthread_mutex_t mu;
    char last_head[2048]; /* the last request head it got */
    int requests;
} origin = {.lfd = -1, .stop = {-1, -1}, .mu = PTHREAD_MUTEX_INITIALIZER};

/* Read a request head (bounded by 5 s), answer it, close. */
static void origin_serve(int fd)
{
    static const char body[] = "hello from the allowlisted origin\n";
    char head[2048] = "", out[256];
    size_t have = 0;
    double until = itest_now() + 5.0;

    while (have < sizeof head - 1 && itest_now() < until &&
           !strstr(head, "\r\n\r\n")) {
        struct pollfd p = {fd, POLLIN, 0};
        if (poll(&p, 1, 500) <= 0)
            continue;
        ssize_t n = read(fd, head + have, sizeof head - 1 - have);
        if (n <= 0)
            break;
        have += (size_t)n;
        head[have] = '\0';
    }
    head[have] = '\0';
    pthread_mutex_lock(&origin.mu);
    snprintf(origin.last_head, sizeof origin.last_head, "%s", head);
    origin.requests++;
    pthread_mutex_unlock(&origin.mu);
    int n = snprintf(out, sizeof out,
                     "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n"
                     "Content-Length: %zu\r\nConnection: close\r\n\r\n%s",
                     sizeof body - 1, body);
    (void)itest_send_all(fd, out, (size_t)n);
    close(fd);
}

static void *origin_main(void *arg)
{
    (void)arg;
    for (;;) {
        struct pollfd p[2] = {{origin.lfd, POLLIN, 0},
                              {origin.stop[0], POLLIN, 0}};
        if (poll(p, 2, -1) < 0 && errno != EINTR)
            break;
        if (p[1].revents)
            break;
        if (!p[0].revents)
            continue;
        int fd = accept4(origin.lfd, NULL, NULL, SOCK_CLOEXEC);
        if (fd >= 0)
            origin_serve(fd);
    }
    return NULL;
}

/* A listening socket on addr (network order), its port in *port. */
static int listen_on(in_addr_t addr, int *port)
{
    struct sockaddr_in sa;
    socklen_t len = sizeof sa;
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

    if (fd < 0)
        return -1;
    memset(&sa, 0, sizeof sa);
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = addr;
    if (bind(fd, (struct sockaddr *)&sa, sizeof sa) || listen(fd, 16) ||
        getsockname(fd, (struct sockaddr *)&sa, &len)) {
        close(fd);
        return -1;
    }
    *port = ntohs(sa.sin_port);
    return fd;
}

static void start(void)
{
    origin.lfd = listen_on(inet_addr("127.0.0.2"), &origin.port);
    REQUIRE(origin.lfd >= 0);
    REQUIRE(pipe2(origin.stop, O_CLOEXEC) == 0);
    REQUIRE(pthread_create(&origin.th, NULL, origin_main, NULL) == 0);

    const char *args[] = {"--fetch-allow", "127.0.0.2/32",
                          "--ready-check-interval", "never", NULL};
    struct itest_opts o = {.args = args};
    srv = itest_start(&o);
    REQUIRE(srv);
    net_key = itest_create_policy_key(srv, "t", "networked");
    REQUIRE(net_key);
}

/* Run code under the networked key; the result in *r. */
static void run_net(const char *code, struct itest_resp *r)
{
    itest_exec(srv, net_key, "u1",
               json_pack("{s:s, s:i}", "code", code, "timeout", 60), 90000, r);
}

#define OUT(r) itest_exec_stdout(r)
#define CHECK_OUT(r, needle)                                                   \
    CHECKF(strstr(OUT(r), (needle)) != NULL,                                   \
           "want \"%s\" in stdout:\n%s\nstderr:\n%s", (needle), OUT(r),        \
           itest_exec_stderr(r))

/* The prelude every case starts with: stop before any address is tried
 * when the run has no proxy (the code before issue 13's item 7). */
#define SAY_PROXY                                                              \
    "import os, sys, socket, errno, urllib.request, urllib.error, "            \
    "http.client\n"                                                            \
    "print('proxy', os.environ.get('HTTP_PROXY'), "                            \
    "os.environ.get('HTTPS_PROXY'), os.environ.get('NO_PROXY'))\n"
#define NEED_PROXY                                                             \
    SAY_PROXY "if not os.environ.get('HTTP_PROXY'): sys.exit(3)\n"

/* (a) No plain connection reaches the host's loopback: the service's own
 * port and a listener of the test's. */
static void loopback_unreachable(void)
{
    struct itest_resp r;
    int lport = 0, lfd = listen_on(htonl(INADDR_LOOPBACK), &lport);

    REQUIRE(srv && lfd >= 0);
    char *code = itest_fmt(
        SAY_PROXY
        "def conn(host, port):\n"
        "    try:\n"
        "        socket.create_connection((host, port), timeout=3)\n"
        "        return 'CONNECTED'\n"
        "    except OSError as e:\n"
        "        return errno.errorcode.get(e.errno, str(e))\n"
        "print('service', conn('127.0.0.1', %d))\n"
        "print('listener', conn('127.0.0.1', %d))\n"
        "print('origin', conn('127.0.0.2', %d))\n"
        "print('interfaces', [n for _, n in socket.if_nameindex()])\n",
        srv->port, lport, origin.port);
    run_net(code, &r);
    free(code);
    CHECK_STATUS(&r, 200);
    CHECK_OUT(&r, "proxy http://127.0.0.1:3128 http://127.0.0.1:3128 None\n");
    CHECK_OUT(&r, "service ECONNREFUSED\n");
    CHECK_OUT(&r, "listener ECONNREFUSED\n");
    /* Even the allowlisted origin: only through the proxy. */
    CHECK_OUT(&r, "origin ECONNREFUSED\n");
    CHECK_OUT(&r, "interfaces ['lo']\n");
    itest_resp_release(&r);
    struct pollfd p = {lfd, POLLIN, 0};
    CHECK_INT(poll(&p, 1, 0), 0); /* nothing reached the listener */
    close(lfd);
}

/* (b) Through the proxy, what the SSRF guard refuses is refused: 403
 * with the guard's reason, for plain HTTP and CONNECT. */
static void proxy_refuses_guarded_addresses(void)
{
    struct itest_resp r;

    REQUIRE(srv);
    int before = origin.requests;
    char *code = itest_fmt(
        NEED_PROXY
        "def get(url):\n"
        "    try:\n"
        "        urllib.request.urlopen(url, timeout=20).read()\n"
        "        return 'FETCHED'\n"
        "    except urllib.error.HTTPError as e:\n"
        "        return '%%d %%s' %% (e.code, e.read().decode().strip())\n"
        "    except OSError as e:\n"
        "        return 'OSError %%s' %% e\n"
        "for url in ('http://127.0.0.1:%d/healthz', 'http://localhost:%d/',\n"
        "            'http://10.1.2.3/', 'http://192.168.0.1/',\n"
        "            'http://169.254.169.254/latest/meta-data/',\n"
        "            'http://[fe80::1]/', 'http://[::1]:%d/',\n"
        "            'http://127.0.0.3:%d/ok'):\n"
        "    print(url, get(url))\n"
        "try:\n"
        "    socket.create_connection(('192.0.2.1', 80), timeout=3)\n"
        "except OSError as e:\n"
        "    print('raw', errno.errorcode.get(e.errno, str(e)))\n"
        "c = http.client.HTTPConnection('127.0.0.1', 3128, timeout=20)\n"
        "c.set_tunnel('127.0.0.1', %d)\n"
        "try:\n"
        "    c.request('GET', '/healthz'); print('tunnel', "
        "c.getresponse().status)\n"
        "except OSError as e:\n"
        "    print('tunnel refused:', e)\n",
        srv->port, srv->port, srv->port, origin.port, srv->port);
    run_net(code, &r);
    free(code);
    CHECK_STATUS(&r, 200);
    char want[256];
    snprintf(want, sizeof want,
             "http://127.0.0.1:%d/healthz 403 interpd egress: address "
             "127.0.0.1 of host 127.0.0.1 is not allowed (loopback)\n",
             srv->port);
    CHECK_OUT(&r, want);
    snprintf(want, sizeof want,
             "http://localhost:%d/ 403 interpd egress: ", srv->port);
    CHECK_OUT(&r, want);
    CHECK_OUT(&r, "http://10.1.2.3/ 403 interpd egress: address 10.1.2.3 of "
                  "host 10.1.2.3 is not allowed (private");
    CHECK_OUT(&r, "http://192.168.0.1/ 403 ");
    CHECK_OUT(&r, "http://169.254.169.254/latest/meta-data/ 403 interpd "
                  "egress: address 169.254.169.254 of host 169.254.169.254 "
                  "is not allowed (link-local");
    CHECK_OUT(&r, "http://[fe80::1]/ 403 ");
    snprintf(want, sizeof want, "http://[::1]:%d/ 403 ", srv->port);
    CHECK_OUT(&r, want);
    /* 127.0.0.3: loopback too, not the allowlisted /32 */
    snprintf(want, sizeof want, "http://127.0.0.3:%d/ok 403 ", origin.port);
    CHECK_OUT(&r, want);
    CHECK_OUT(&r, "tunnel refused: Tunnel connection failed: 403 Forbidden\n");
    /* No route but the proxy (TEST-NET-1: no packet leaves). */
    CHECK_OUT(&r, "raw ENETUNREACH\n");
    CHECKF(strstr(OUT(&r), "FETCHED") == NULL, "%s", OUT(&r));
    itest_resp_release(&r);
    CHECK_INT(origin.requests, before);
}

/* (c) The allowlisted origin answers through the proxy: plain HTTP (in
 * origin form, without the proxy's headers) and a CONNECT tunnel. */
static void proxy_reaches_allowlisted(void)
{
    struct itest_resp r;

    REQUIRE(srv);
    char *code = itest_fmt(
        NEED_PROXY
        "rq = urllib.request.Request('http://127.0.0.2:%d/plain?x=1',\n"
        "    headers={'Proxy-Authorization': 'Basic c2VjcmV0'})\n"
        "print('plain', urllib.request.urlopen(rq, timeout=20).read()"
        ".decode().strip())\n"
        "c = http.client.HTTPConnection('127.0.0.1', 3128, timeout=20)\n"
        "c.set_tunnel('127.0.0.2', %d)\n"
        "c.request('GET', '/tunnel')\n"
        "resp = c.getresponse()\n"
        "print('tunnel', resp.status, resp.read().decode().strip())\n",
        origin.port, origin.port);
    run_net(code, &r);
    free(code);
    CHECK_STATUS(&r, 200);
    CHECK_OUT(&r, "plain hello from the allowlisted origin\n");
    CHECK_OUT(&r, "tunnel 200 hello from the allowlisted origin\n");
    pthread_mutex_lock(&origin.mu);
    /* The tunnel's request came last, as the client wrote it. */
    CHECKF(!strncmp(origin.last_head, "GET /tunnel HTTP/1.1\r\n", 22), "%s",
           origin.last_head);
    pthread_mutex_unlock(&origin.mu);
    itest_resp_release(&r);
}

/* The plain request reached the origin rewritten: origin form, no
 * Proxy-Authorization, Connection: close. */
static void plain_request_rewritten(void)
{
    struct itest_resp r;

    REQUIRE(srv);
    char *code = itest_fmt(
        NEED_PROXY "rq = urllib.request.Request('http://127.0.0.2:%d/again',\n"
                   "    headers={'Proxy-Authorization': 'Basic c2VjcmV0'})\n"
                   "print(urllib.request.urlopen(rq, timeout=20).status)\n",
        origin.port);
    run_net(code, &r);
    free(code);
    CHECK_OUT(&r, "200\n");
    itest_resp_release(&r);
    pthread_mutex_lock(&origin.mu);
    CHECKF(!strncmp(origin.last_head, "GET /again HTTP/1.1\r\n", 21), "%s",
           origin.last_head);
    CHECKF(!strstr(origin.last_head, "Proxy-Authorization") &&
               !strstr(origin.last_head, "c2VjcmV0") &&
               strstr(origin.last_head, "Connection: close\r\n"),
           "%s", origin.last_head);
    pthread_mutex_unlock(&origin.mu);
}

/* A standard-policy run has no proxy and no sockets but AF_UNIX. */
static void standard_has_no_way_out(void)
{
    struct itest_resp r;

    REQUIRE(srv);
    itest_exec(srv, srv->admin_key, "u2",
               json_pack("{s:s}", "code",
                         "import os\n"
                         "print('proxy', os.environ.get('HTTP_PROXY'))\n"),
               60000, &r);
    CHECK_STATUS(&r, 200);
    CHECK_OUT(&r, "proxy None\n");
    itest_resp_release(&r);
}

static void stop(void)
{
    itest_stop(srv);
    free(net_key);
    if (origin.stop[1] >= 0) {
        (void)write(origin.stop[1], "x", 1);
        pthread_join(origin.th, NULL);
        close(origin.stop[0]);
        close(origin.stop[1]);
    }
    if (origin.lfd >= 0)
        close(origin.lfd);
}

TEST_MAIN(T(start), T(loopback_unreachable), T(proxy_refuses_guarded_addresses),
          T(proxy_reaches_allowlisted), T(plain_request_rewritten),
          T(standard_has_no_way_out), T(stop))
