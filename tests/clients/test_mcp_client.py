#!/usr/bin/python3
"""POST /mcp driven by the official MCP client (ctest: clients/mcp).

Starts $INTERPD_BIN serve on 127.0.0.1 (port 0, SQLite and local blobs in
a temporary data dir, allowed to fetch from 127.0.0.1 for URL ingest) and
runs tests/support/mcp/mcp_check.mjs BASE KEY, which drives it with the
MCP TypeScript SDK's Client over StreamableHTTPClientTransport (pinned in
tests/support/mcp/package.json): initialize and its session, tools/list,
a CSV ingested by URL and read, summed and charted by run_python (the
text and a PNG image come back), a variable kept across two calls in a
session, list_variables, end_session, error results, protocol errors,
ping, another user's session refused, and a terminated session gone.

Never skips: a missing INTERPD_BIN, node or SDK package fails the test
(scripts/install-deps.sh installs the package).
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests", "support"))
from interpd_server import Server, npm_pinned  # noqa: E402

MCP_DIR = os.path.join(ROOT, "tests", "support", "mcp")
NODE_TIMEOUT = 300


def main():
    binary = os.environ.get("INTERPD_BIN")
    if not binary or not os.access(binary, os.X_OK):
        print("clients/mcp: INTERPD_BIN is not set to the interpd binary "
              "(ctest sets it)", file=sys.stderr)
        return 1
    node = shutil.which("node")
    want, have = npm_pinned(MCP_DIR, "@modelcontextprotocol/sdk")
    if not node or have != want:
        print("clients/mcp: FAIL node (%s) and @modelcontextprotocol/sdk %s "
              "in tests/support/mcp (have %s): run scripts/install-deps.sh"
              % (node, want, have), file=sys.stderr)
        return 1
    tmp = tempfile.mkdtemp(prefix="ipd-mcp-client-")
    os.chmod(tmp, 0o711)
    server = None
    rc = 1
    try:
        server = Server(binary, os.path.join(tmp, "data"),
                        os.path.join(tmp, "interpd.log"),
                        ("--fetch-allow", "127.0.0.1/32",
                         "--exec-mode", "cold"))
        with open(os.path.join(tmp, "data", "admin.key")) as f:
            key = f.read().strip()
        # A second tenant's key, for the session table's per-tenant share.
        made = subprocess.run([binary, "keys", "create", "--tenant", "other",
                               "--data-dir", os.path.join(tmp, "data")],
                              capture_output=True, text=True, timeout=60)
        other = json.loads(made.stdout)["key"]
        p = subprocess.run([node, "mcp_check.mjs", server.base, key, other],
                           timeout=NODE_TIMEOUT, cwd=MCP_DIR)
        rc = p.returncode
    except subprocess.TimeoutExpired:
        print("FAIL mcp_check.mjs: no verdict in %d s" % NODE_TIMEOUT)
    finally:
        if server and server.finish(rc):
            rc = 1
        shutil.rmtree(tmp, ignore_errors=True)
    print("clients/mcp: %s" % ("passed" if rc == 0 else "FAILED"))
    return 1 if rc else 0


if __name__ == "__main__":
    sys.exit(main())
