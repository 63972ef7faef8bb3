#!/usr/bin/python3
"""The web console and CORS in a real browser (ctest: clients/console).

Serves tests/support/console/cors on 127.0.0.1:0 (the page of another
origin), starts $INTERPD_BIN serve --console with --cors-origins naming that
page's origin (not "localhost", the denied one), mints two scoped tokens
(all four scopes; files:read alone) and runs tests/support/console/
console_check.mjs, which drives Debian's /usr/bin/chromium with the pinned
playwright-core: the console's CSP and editor, upload (input and drop) with
progress, download, delete, a streamed run whose first line shows before
it ends, a call answered and raised by hand, the chart and an HTML table,
a traceback, cancel, a session's variables, HTML isolation, an operator's
key, a token without executions; then the cross-origin page with only a
token, allowed and denied.  Checked here too: a 404 for /console without
--console, and a fresh CSP nonce per page, the one its meta tag carries.

CONSOLE_SHOTS=DIR keeps the screenshots (docs/console-*.png were made so).
Never skips: a missing INTERPD_BIN, node, chromium or package fails.
"""
import functools
import http.client
import http.server
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests", "support"))
from interpd_server import Server, npm_pinned  # noqa: E402

HERE = os.path.join(ROOT, "tests", "support", "console")
NODE_TIMEOUT = 400
USER = "console-user"
CSV = "month,sales\njan,10\nfeb,14\nmar,9\n"


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


def request(base, method, path, body=None, headers=None):
    host, port = base.split("//")[1].split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        r = conn.getresponse()
        return r.status, dict(r.getheaders()), r.read()
    finally:
        conn.close()


def mint(base, key, scopes):
    status, _, body = request(
        base, "POST", "/v1/tokens",
        json.dumps({"user_id": USER, "scopes": scopes, "ttl": "30m"}),
        {"Authorization": "Bearer " + key,
         "Content-Type": "application/json"})
    if status != 201:
        raise RuntimeError("POST /v1/tokens: %s %s" % (status, body))
    return json.loads(body)["token"]


def missing_tools():
    node = shutil.which("node")
    want, have = npm_pinned(HERE, "playwright-core")
    if node and have == want and os.access("/usr/bin/chromium", os.X_OK):
        return None
    return ("node (%s), playwright-core %s in tests/support/console (have "
            "%s) and /usr/bin/chromium: run scripts/install-deps.sh"
            % (node, want, have))


def console_off(binary, tmp):
    """Without --console, /console is a 404 like any unknown route."""
    server = Server(binary, os.path.join(tmp, "off"),
                    os.path.join(tmp, "off.log"), ("--exec-mode", "cold"))
    try:
        bad = []
        for path in ("/console", "/console/console.js"):
            status, _, body = request(server.base, "GET", path)
            if status != 404 or json.loads(body)["error"]["code"] != \
                    "not_found":
                bad.append("%s: %s" % (path, status))
        return bad
    finally:
        server.stop()


def nonce_checks(base):
    """Each page has its own CSP nonce, the one its meta tag gives
    CodeMirror; assets come tagged with their bytes' hash."""
    seen, bad = set(), []
    for _ in range(3):
        status, headers, body = request(base, "GET", "/console")
        csp = headers.get("Content-Security-Policy", "")
        m = re.search(r"'nonce-([0-9a-f]{32})'", csp)
        meta = re.search(rb'name="style-nonce" content="([^"]*)"', body)
        if status != 200 or not m or not meta or \
                meta.group(1).decode() != m.group(1):
            bad.append("GET /console: %s, CSP %r, meta %r"
                       % (status, csp, meta and meta.group(1)))
            continue
        seen.add(m.group(1))
        if "frame-ancestors 'none'" not in csp or \
                headers.get("X-Frame-Options") != "DENY":
            bad.append("GET /console may be framed: CSP %r, X-Frame-Options "
                       "%r" % (csp, headers.get("X-Frame-Options")))
        tag = re.search(rb'console\.js\?v=([0-9a-f]{16})"', body)
        if not tag:
            bad.append("the page names no tagged console.js")
    if len(seen) != 3:
        bad.append("nonces repeat across pages: %s" % sorted(seen))
    return bad


def main():
    binary = os.environ.get("INTERPD_BIN")
    if not binary or not os.access(binary, os.X_OK):
        print("clients/console: INTERPD_BIN is not set to the interpd "
              "binary (ctest sets it)", file=sys.stderr)
        return 1
    why = missing_tools()
    if why:
        print("clients/console: FAIL " + why, file=sys.stderr)
        return 1
    tmp = tempfile.mkdtemp(prefix="ipd-console-")
    os.chmod(tmp, 0o711)
    handler = functools.partial(QuietHandler,
                                directory=os.path.join(HERE, "cors"))
    pages = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=pages.serve_forever, daemon=True).start()
    page_port = pages.server_address[1]
    server = None
    rc = 1
    try:
        off = console_off(binary, tmp)
        off = ["without --console, %s (want 404 not_found)" % b
               for b in off]
        server = Server(binary, os.path.join(tmp, "data"),
                        os.path.join(tmp, "interpd.log"),
                        ("--console", "--exec-mode", "cold",
                         "--cors-origins", "http://127.0.0.1:%d" % page_port))
        with open(os.path.join(tmp, "data", "admin.key")) as f:
            key = f.read().strip()
        token = mint(server.base, key, ["files:read", "files:write",
                                        "executions", "sessions"])
        files_only = mint(server.base, key, ["files:read"])
        off += nonce_checks(server.base)
        query = "?base=%s&token=%s" % (server.base, token)
        cfg = {
            "base": server.base, "token": token,
            "filesOnlyToken": files_only, "key": key, "user": USER,
            "csv": CSV,
            "corsAllowed": "http://127.0.0.1:%d/cors.html%s"
                           % (page_port, query),
            "corsDenied": "http://localhost:%d/cors.html%s"
                          % (page_port, query),
            "shots": os.environ.get("CONSOLE_SHOTS") or
            os.path.join(tmp, "shots"),
        }
        p = subprocess.run(["node", "console_check.mjs", json.dumps(cfg)],
                           timeout=NODE_TIMEOUT, cwd=HERE)
        for b in off:
            print("FAIL " + b)
        rc = 1 if p.returncode or off else 0
    except subprocess.TimeoutExpired:
        print("FAIL console_check.mjs: no verdict in %d s" % NODE_TIMEOUT)
    finally:
        pages.shutdown()
        if server and server.finish(rc):
            rc = 1
        shutil.rmtree(tmp, ignore_errors=True)
    print("clients/console: %s" % ("passed" if rc == 0 else "FAILED"))
    return rc


if __name__ == "__main__":
    sys.exit(main())
