#!/usr/bin/python3
"""Run every example of docs/API.md against the real server (ctest:
integration/api_examples).

The scheme, which docs/API.md states for its readers under "Examples":

- A fenced block whose info string is `sh` is an example.  It runs with
  `bash -e -o pipefail`, in a scratch directory holding `sales.csv` (a,b /
  1,2) and `report.pdf`, against a server this script starts (INTERPD_BIN serve on
  127.0.0.1, SQLite and local blobs in a temporary data dir, with
  --fetch-allow 127.0.0.1/32 so URL ingest and callbacks can reach this
  script's own HTTP server).  Each block starts in a fresh directory.  It sees these variables:
    BASE        the server's base URL
    KEY         a key of the tenant "docs" (not admin)
    ADMIN_KEY   the admin key the server wrote to DATA_DIR/admin.key
    DATA_DIR    the server's --data-dir (for the `interpd` commands)
    FILE_ID     the file_id of a sales.csv uploaded for user u42 just
                before the block (only when the block mentions $FILE_ID)
    EXECUTION_ID  the id of an asynchronous execution of user u42 submitted
                just before the block (only when it mentions $EXECUTION_ID)
    FILE_URL    an http URL answering sales.csv
    CALLBACK_URL  an http URL that records the callbacks it receives
  and `interpd` on PATH.  `curl` is wrapped to record the response headers
  of its last call; the block fails when it exits non-zero or when that last
  response's status is not the expected one.  `# ` lines after a block's
  last command show its output: the real output must be exactly that.
- A `json` block right after an `sh` block (blank lines between are fine)
  is that example's response.  The block's output must be one JSON
  document of the same shape: the same keys in every object (both ways,
  recursively; the first element of an array stands for every element) and
  the same kind of value (string, number, boolean, object, array; a
  documented null accepts anything, and any value may really be null).
  Values are not compared: ids, times and sizes change.  Its info string may
  say the expected status, e.g. `json status=404`; without it (and without
  a response block) the expected status is any 2xx.
- Any other `json` block must parse as JSON.
- A `python` block is run with /usr/bin/python3.  A block that defines
  verify_interpd_signature(secret, header, body) must accept the callback
  the examples caused (secret from `interpd keys list`) and refuse it with
  one byte of the body changed.
- An `ini` block is a config file: `interpd keys list --config FILE
  --data-dir DIR` must accept it (every name and value is checked).
- A block right after `<!-- not-run: REASON -->` is not run; the reason is
  printed and must not be empty.  Fenced blocks of other languages are not
  examples (they show formats, not commands).
"""
import http.server
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
DOC = os.path.join(ROOT, "docs", "API.md")
SALES = b"a,b\n1,2\n"
PDF = (b"%PDF-1.4\n1 0 obj<</Type/Catalog/Pages 2 0 R>>endobj\n"
       b"2 0 obj<</Type/Pages/Kids[]/Count 0>>endobj\ntrailer<</Root 1 0 R>>\n"
       b"%%EOF\n")
BLOCK_TIMEOUT = 120

failures = []


def fail(msg):
    failures.append(msg)
    print("FAIL " + msg, flush=True)


# ---- the document -----------------------------------------------------------

class Block:
    def __init__(self, lang, info, text, line, not_run):
        self.lang, self.info, self.text = lang, info, text
        self.line, self.not_run = line, not_run
        self.response = None  # the json block that follows an sh block

    def where(self):
        return "docs/API.md:%d" % self.line


def parse_blocks(text):
    """The fenced blocks of text, with their not-run markers, and each sh
    block's response block."""
    lines = text.split("\n")
    blocks, i, marker = [], 0, None
    last_nonblank = None  # the previous non-blank thing: a Block or a line
    while i < len(lines):
        line = lines[i]
        m = re.match(r"^(\s*)```(.*)$", line)
        if not m:
            mm = re.match(r"^<!--\s*not-run:(.*?)-->\s*$", line.strip())
            if mm:
                marker = mm.group(1).strip() or ""
                last_nonblank = "marker"
            elif line.strip():
                marker = None
                last_nonblank = line
            i += 1
            continue
        info = m.group(2).strip()
        start = i + 1
        i += 1
        body = []
        while i < len(lines) and not re.match(r"^\s*```\s*$", lines[i]):
            body.append(lines[i][len(m.group(1)):])
            i += 1
        i += 1
        lang = info.split()[0] if info else ""
        b = Block(lang, info, "\n".join(body) + "\n", start, marker)
        if (lang == "json" and isinstance(last_nonblank, Block) and
                last_nonblank.lang == "sh" and
                last_nonblank.response is None):
            last_nonblank.response = b
        else:
            blocks.append(b)
        marker = None
        last_nonblank = b
    return blocks


# ---- shapes -----------------------------------------------------------------

def kind(v):
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "boolean"
    if isinstance(v, (int, float)):
        return "number"
    if isinstance(v, str):
        return "string"
    if isinstance(v, list):
        return "array"
    return "object"


def same_shape(doc, real, path, out):
    if doc is None or real is None:
        return
    if kind(doc) != kind(real):
        out.append("%s: documented %s, got %s" % (path or "$", kind(doc),
                                                  kind(real)))
        return
    if isinstance(doc, dict):
        for k in sorted(set(doc) - set(real)):
            out.append("%s.%s: documented, not in the response" % (path, k))
        for k in sorted(set(real) - set(doc)):
            out.append("%s.%s: in the response, not documented" % (path, k))
        for k in sorted(set(doc) & set(real)):
            same_shape(doc[k], real[k], "%s.%s" % (path, k), out)
    elif isinstance(doc, list) and doc and real:
        for n, r in enumerate(real):
            same_shape(doc[0], r, "%s[%d]" % (path, n), out)


# ---- this script's HTTP server: FILE_URL and CALLBACK_URL ---------------------

class Receiver(http.server.BaseHTTPRequestHandler):
    callbacks = []
    lock = threading.Lock()

    def do_GET(self):
        if self.path != "/attachments/123":
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/csv")
        self.send_header("Content-Length", str(len(SALES)))
        self.end_headers()
        self.wfile.write(SALES)

    def do_POST(self):
        n = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(n)
        with Receiver.lock:
            Receiver.callbacks.append((dict(self.headers.items()), body))
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args):
        pass


# ---- the interpd server -------------------------------------------------------

def clean_env():
    return {k: v for k, v in os.environ.items()
            if not k.startswith("INTERPD_")}


class Server:
    def __init__(self, binary, data_dir, log_path, extra):
        r, w = os.pipe()
        self.log = open(log_path, "wb")
        self.proc = subprocess.Popen(
            [binary, "serve", "--listen", "127.0.0.1:0", "--data-dir",
             data_dir, "--ready-fd", str(w)] + extra,
            stdout=self.log, stderr=subprocess.STDOUT, pass_fds=(w,),
            env=clean_env())
        os.close(w)
        port = b""
        deadline = time.time() + 30
        while time.time() < deadline:
            chunk = os.read(r, 64)
            if not chunk:
                break
            port += chunk
            if b"\n" in port:
                break
        os.close(r)
        if not port.strip().isdigit():
            self.stop()
            raise RuntimeError("interpd did not report its port (see %s)"
                               % log_path)
        self.base = "http://127.0.0.1:%d" % int(port)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


def call(method, url, key, body=None, ctype=None, user="u42"):
    req = urllib.request.Request(url, data=body, method=method)
    req.add_header("Authorization", "Bearer " + key)
    req.add_header("X-User-Id", user)
    if ctype:
        req.add_header("Content-Type", ctype)
    with urllib.request.urlopen(req, timeout=60) as resp:
        return json.loads(resp.read())


# ---- running the blocks -------------------------------------------------------

def fixtures(b, env, base, key):
    """env with a fresh $FILE_ID / $EXECUTION_ID when the block uses them."""
    benv = dict(env)
    if "$FILE_ID" in b.text or "${FILE_ID}" in b.text:
        benv["FILE_ID"] = call(
            "POST", base + "/v1/files?filename=sales.csv", key, SALES,
            "application/octet-stream")["file_id"]
    if "$EXECUTION_ID" in b.text or "${EXECUTION_ID}" in b.text:
        benv["EXECUTION_ID"] = call(
            "POST", base + "/v1/executions", key,
            json.dumps({"code": "print(6*7)", "async": True}).encode(),
            "application/json")["execution_id"]
    return benv


PRELUDE = r'''
curl() { command curl -D "$IPD_EXAMPLE_HEADERS" "$@"; }
'''


def last_status(path):
    try:
        with open(path, "rb") as f:
            text = f.read().decode("latin-1")
    except FileNotFoundError:
        return None
    codes = re.findall(r"^HTTP/[0-9.]+ ([0-9]{3})", text, re.M)
    return int(codes[-1]) if codes else None


def trailing_comment(text):
    """The output an sh block shows in `# ` lines after its last command,
    or None."""
    lines = text.rstrip("\n").split("\n")
    shown = []
    while lines and lines[-1].startswith("# "):
        shown.insert(0, lines.pop()[2:])
    return "\n".join(shown) if shown and lines else None


def run_sh(b, env, inputs):
    # A fresh directory each: `curl -OJ` refuses to overwrite a file.
    work = tempfile.mkdtemp(dir=os.path.dirname(inputs))
    for name in os.listdir(inputs):
        shutil.copy(os.path.join(inputs, name), work)
    hdr = os.path.join(work, ".headers")
    env = dict(env, IPD_EXAMPLE_HEADERS=hdr)
    try:
        p = subprocess.run(["bash", "-e", "-o", "pipefail", "-c",
                            PRELUDE + b.text], cwd=work, env=env,
                           capture_output=True, timeout=BLOCK_TIMEOUT)
    except subprocess.TimeoutExpired:
        fail("%s: the example ran over %d s" % (b.where(), BLOCK_TIMEOUT))
        return
    out = p.stdout.decode("utf-8", "replace")
    if p.returncode != 0:
        fail("%s: the example exited %d\n--- stdout\n%s--- stderr\n%s" % (
            b.where(), p.returncode, out, p.stderr.decode("utf-8", "replace")))
        return
    status = last_status(hdr)
    want = None
    if b.response:
        m = re.search(r"\bstatus=([0-9]{3})\b", b.response.info)
        want = int(m.group(1)) if m else None
    if status is not None:
        ok = status == want if want else 200 <= status < 300
        if not ok:
            fail("%s: status %d, documented %s\n%s" % (
                b.where(), status, want or "2xx", out))
            return
    elif want:
        fail("%s: documented status %d but the example made no HTTP call"
             % (b.where(), want))
        return
    if not b.response:
        want_out = trailing_comment(b.text)
        if want_out is not None and out.rstrip("\n") != want_out:
            fail("%s: the output differs from the comment that shows it:\n"
                 "--- documented\n%s\n--- real\n%s" % (b.where(), want_out,
                                                         out))
            return
        print("ok   %s (sh%s%s)" % (
            b.where(), ", status %d" % status if status else "",
            ", output as shown" if want_out is not None else ""), flush=True)
        return
    try:
        doc = json.loads(b.response.text)
    except ValueError as e:
        fail("%s: the response block is not JSON: %s" % (b.response.where(),
                                                         e))
        return
    try:
        real = json.loads(out)
    except ValueError as e:
        fail("%s: the output is not one JSON document (%s):\n%s" % (
            b.where(), e, out))
        return
    problems = []
    same_shape(doc, real, "$", problems)
    if problems:
        fail("%s: the response differs from docs/API.md:%d:\n  %s\n"
             "real response: %s" % (b.where(), b.response.line,
                                    "\n  ".join(problems), out.strip()))
        return
    print("ok   %s (sh%s, shape of line %d)" % (
        b.where(), ", status %d" % status if status else "",
        b.response.line), flush=True)


def run_python(b, ctx):
    defines_verify = re.search(r"^def verify_interpd_signature\(", b.text,
                               re.M)
    script = b.text
    if defines_verify:
        deadline = time.time() + 60
        while time.time() < deadline and not Receiver.callbacks:
            time.sleep(0.2)
        if not Receiver.callbacks:
            fail("%s: no callback arrived to check the verifier with"
                 % b.where())
            return
        headers, body = Receiver.callbacks[0]
        sig = {k.lower(): v for k, v in headers.items()}.get(
            "x-interpd-signature", "")
        script += ("\nimport sys\n"
                   "secret, body, sig = sys.argv[1], bytes.fromhex(sys.argv[2]), sys.argv[3]\n"
                   "assert verify_interpd_signature(secret, sig, body), "
                   "'the verifier refused a real callback'\n"
                   "assert not verify_interpd_signature(secret, sig, "
                   "body[:-1] + bytes([body[-1] ^ 1])), "
                   "'the verifier accepted a changed body'\n")
        args = [ctx["secret"], body.hex(), sig]
    else:
        args = []
    p = subprocess.run(["/usr/bin/python3", "-c", script] + args,
                       cwd=ctx["work"], capture_output=True,
                       timeout=BLOCK_TIMEOUT)
    if p.returncode:
        fail("%s: python exited %d\n%s" % (
            b.where(), p.returncode, p.stderr.decode("utf-8", "replace")))
        return
    print("ok   %s (python%s)" % (b.where(), ", the verifier checked against "
                                  "a real callback" if defines_verify else ""),
          flush=True)


def run_ini(b, ctx):
    scratch = tempfile.mkdtemp(dir=ctx["tmp"])
    path = os.path.join(scratch, "example.conf")
    with open(path, "w") as f:
        f.write(b.text)
    p = subprocess.run([ctx["bin"], "keys", "list", "--config", path,
                        "--data-dir", ctx["data_dir"]], capture_output=True,
                       env=clean_env(), timeout=BLOCK_TIMEOUT)
    if p.returncode:
        fail("%s: interpd refused the config file (exit %d):\n%s" % (
            b.where(), p.returncode, p.stderr.decode("utf-8", "replace")))
        return
    print("ok   %s (ini, accepted by interpd --config)" % b.where(),
          flush=True)


def main():
    binary = os.environ.get("INTERPD_BIN")
    if not binary or not os.access(binary, os.X_OK):
        print("api_examples: INTERPD_BIN is not set to the interpd binary "
              "(ctest sets it)", file=sys.stderr)
        return 1
    with open(DOC, encoding="utf-8") as f:
        blocks = parse_blocks(f.read())
    tmp = tempfile.mkdtemp(prefix="ipd-api-examples-")
    # The sandbox user must reach the data dir inside (as with any data dir).
    os.chmod(tmp, 0o711)
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    own = "http://127.0.0.1:%d" % httpd.server_address[1]
    data = os.path.join(tmp, "data")
    work = os.path.join(tmp, "work")
    os.makedirs(work)
    with open(os.path.join(work, "sales.csv"), "wb") as f:
        f.write(SALES)
    with open(os.path.join(work, "report.pdf"), "wb") as f:
        f.write(PDF)
    server = None
    try:
        server = Server(binary, data, os.path.join(tmp, "interpd.log"),
                        ["--fetch-allow", "127.0.0.1/32"])
        with open(os.path.join(data, "admin.key")) as f:
            admin_key = f.read().strip()
        created = json.loads(subprocess.run(
            [binary, "keys", "create", "--tenant", "docs", "--data-dir",
             data], capture_output=True, check=True, env=clean_env()).stdout)
        key = created["key"]
        keys = json.loads(subprocess.run(
            [binary, "keys", "list", "--data-dir", data],
            capture_output=True, check=True, env=clean_env()).stdout)
        secret = [k["secret"] for k in keys if k["key_id"] ==
                  created["key_id"]][0]
        env = dict(clean_env(), BASE=server.base, KEY=key,
                   ADMIN_KEY=admin_key, DATA_DIR=data,
                   FILE_URL=own + "/attachments/123",
                   CALLBACK_URL=own + "/callback",
                   PATH=os.path.dirname(os.path.abspath(binary)) + ":" +
                   os.environ.get("PATH", "/usr/bin:/bin"))
        ctx = {"work": work, "tmp": tmp, "secret": secret, "bin": binary,
               "data_dir": data}
        counts = {"run": 0, "not run": 0}
        for b in blocks:
            if b.lang not in ("sh", "python", "ini", "json"):
                continue
            if b.not_run is not None:
                if not b.not_run:
                    fail("%s: not-run marker without a reason" % b.where())
                else:
                    print("skip %s (%s): not run: %s" % (b.where(), b.lang,
                                                         b.not_run),
                          flush=True)
                counts["not run"] += 1
                continue
            if b.lang == "json":
                try:
                    json.loads(b.text)
                except ValueError as e:
                    fail("%s: not JSON: %s" % (b.where(), e))
                continue
            counts["run"] += 1
            if b.lang == "sh":
                try:
                    benv = fixtures(b, env, server.base, key)
                except (OSError, ValueError, KeyError) as e:
                    fail("%s: preparing $FILE_ID / $EXECUTION_ID: %s"
                         % (b.where(), e))
                    continue
                run_sh(b, benv, work)
            elif b.lang == "python":
                run_python(b, ctx)
            else:
                run_ini(b, ctx)
        if counts["run"] == 0:
            fail("no example found in docs/API.md")
        print("%d examples run, %d not run, %d failures" % (
            counts["run"], counts["not run"], len(failures)))
    finally:
        if server:
            server.stop()
        httpd.shutdown()
        if failures and server:
            with open(os.path.join(tmp, "interpd.log"), "rb") as f:
                tail = f.read().decode("utf-8", "replace").splitlines()[-40:]
            print("---- interpd log, last lines\n" + "\n".join(tail))
        shutil.rmtree(tmp, ignore_errors=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
