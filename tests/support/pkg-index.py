#!/usr/bin/python3
"""A PEP 503 "simple" package index for the test suite, on 127.0.0.1 only.

    /usr/bin/python3 tests/support/pkg-index.py --dir DIR [--port 0]
        [--port-file FILE] [--log FILE] [--gate-dir DIR] [--pep658] [--verbose]

Serves the wheels (*.whl) and sdists (*.tar.gz, *.zip) found in DIR; DIR is
rescanned on every request, so files may be added or removed while it runs.

  GET /simple/                 links to every project (normalised names)
  GET /simple/<name>/          links to that project's files, each with a
                               #sha256=<hex> fragment.  <name> is normalised
                               (PEP 503) before lookup; no redirects are sent.
                               Unknown project: 404, which pip reads as "no
                               versions".
  GET /files/<filename>        the file's bytes
  GET /files/<wheel>.metadata  the wheel's METADATA (only with --pep658; the
                               links then carry data-dist-info-metadata).  Off
                               by default: pip 23.0.1 then downloads every
                               wheel TWICE (pypa/pip#11847, fixed in 23.2) and
                               a --dry-run still downloads the wheels, so it
                               gains nothing and would trip a gate twice.
HEAD works on all of these.  Responses carry "Cache-Control: no-store" so pip's
HTTP cache never replays a download the test expects to reach the server.

--port 0 picks a free port.  Once the socket is listening the first line on
stdout is "PORT <n>" (flushed), and with --port-file the number is also
written to FILE atomically (temporary file + rename), so a reader never sees a
partial number.

--log FILE appends one line per response, "<METHOD> <path> <status>", flushed
as it is written (for a gated download, the line is written when the headers
go out).

Gate (pausing a download mid-way, without sleeps in the test):
--gate-dir GDIR: when GDIR/<filename>.hold exists as a GET of
/files/<filename> starts, the server sends the headers (full Content-Length)
and the first half of the body, creates GDIR/<filename>.reached, then waits
until the .hold file is removed (polled every 20 ms) and sends the rest.  Every
concurrent download of that file is held the same way.  Remove .reached
yourself before re-arming the gate for a second download.  Note the client's
own read timeout (pip: --timeout, 15 s by default) still runs while held.

SIGTERM or SIGINT: stop accepting, drop held downloads, exit 0.
"""

import argparse
import hashlib
import html
import os
import re
import signal
import sys
import threading
import time
import urllib.parse
import zipfile
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

GATE_POLL_SECONDS = 0.02
CHUNK = 64 * 1024
stopping = threading.Event()


def normalize(name):
    """PEP 503 normalised project name."""
    return re.sub(r"[-_.]+", "-", name).lower()


def project_of(filename):
    """Project name of a distribution file, or None for anything else."""
    if filename.endswith(".whl"):
        parts = filename[:-4].split("-")
        return parts[0] if len(parts) in (5, 6) else None
    for ext in (".tar.gz", ".zip"):
        if filename.endswith(ext):
            stem = filename[: -len(ext)]
            if "-" in stem:
                return stem.rsplit("-", 1)[0]
    return None


class Catalog:
    """Directory scan with a hash cache keyed by (size, mtime)."""

    def __init__(self, root):
        self.root = root
        self.lock = threading.Lock()
        self.cache = {}  # filename -> ((size, mtime_ns), sha256 hex, metadata bytes or None)

    def _info(self, filename):
        path = os.path.join(self.root, filename)
        st = os.stat(path)
        key = (st.st_size, st.st_mtime_ns)
        with self.lock:
            hit = self.cache.get(filename)
            if hit and hit[0] == key:
                return hit
        h = hashlib.sha256()
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
        meta = None
        if filename.endswith(".whl"):
            try:
                with zipfile.ZipFile(path) as zf:
                    names = [n for n in zf.namelist()
                             if n.count("/") == 1 and n.endswith(".dist-info/METADATA")]
                    if len(names) == 1:
                        meta = zf.read(names[0])
            except (zipfile.BadZipFile, OSError):
                meta = None
        entry = (key, h.hexdigest(), meta)
        with self.lock:
            self.cache[filename] = entry
        return entry

    def files(self):
        """{normalised project: [filename, ...]} for the current directory."""
        projects = {}
        try:
            names = sorted(os.listdir(self.root))
        except OSError:
            names = []
        for fn in names:
            if ".tmp" in fn or not os.path.isfile(os.path.join(self.root, fn)):
                continue
            proj = project_of(fn)
            if proj:
                projects.setdefault(normalize(proj), []).append(fn)
        return projects

    def sha256(self, filename):
        return self._info(filename)[1]

    def metadata(self, filename):
        return self._info(filename)[2]

    def path(self, filename):
        if "/" in filename or filename in ("", ".", "..") or project_of(filename) is None:
            return None
        p = os.path.join(self.root, filename)
        return p if os.path.isfile(p) else None


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "ipdtest-pkg-index/1"

    # -- logging -----------------------------------------------------------
    def log_request(self, code="-", size="-"):
        srv = self.server
        if srv.log_path:
            line = "%s %s %s\n" % (self.command, self.path, getattr(code, "value", code))
            with srv.log_lock:
                with open(srv.log_path, "a") as f:
                    f.write(line)
                    f.flush()
        if srv.verbose:
            super().log_request(code, size)

    def log_message(self, fmt, *args):
        if self.server.verbose:
            super().log_message(fmt, *args)

    # -- helpers -----------------------------------------------------------
    def _send(self, status, body, ctype="text/html; charset=utf-8"):
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _not_found(self):
        self._send(404, b"<!DOCTYPE html><html><body>Not Found</body></html>\n")

    def _page(self, title, links):
        rows = "".join("    %s<br/>\n" % a for a in links)
        return ("<!DOCTYPE html>\n<html>\n  <head>\n"
                "    <meta name=\"pypi:repository-version\" content=\"1.0\">\n"
                "    <title>%s</title>\n  </head>\n  <body>\n    <h1>%s</h1>\n%s"
                "  </body>\n</html>\n" % (html.escape(title), html.escape(title), rows)
                ).encode("utf-8")

    # -- routes ------------------------------------------------------------
    def do_HEAD(self):
        self.do_GET()

    def do_GET(self):
        try:
            self._route()
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    def _route(self):
        path = urllib.parse.urlsplit(self.path).path
        cat = self.server.catalog
        if path in ("/simple", "/simple/"):
            links = ['<a href="/simple/%s/">%s</a>' % (p, html.escape(p))
                     for p in sorted(cat.files())]
            return self._send(200, self._page("Simple index", links))
        m = re.fullmatch(r"/simple/([^/]+)/?", path)
        if m:
            proj = normalize(urllib.parse.unquote(m.group(1)))
            files = cat.files().get(proj)
            if not files:
                return self._not_found()
            links = []
            for fn in files:
                try:
                    digest = cat.sha256(fn)
                except OSError:
                    continue
                extra = ""
                if self.server.pep658 and fn.endswith(".whl"):
                    meta = cat.metadata(fn)
                    if meta is not None:
                        extra = ' data-dist-info-metadata="sha256=%s"' % (
                            hashlib.sha256(meta).hexdigest())
                links.append('<a href="/files/%s#sha256=%s"%s>%s</a>' % (
                    urllib.parse.quote(fn), digest, extra, html.escape(fn)))
            return self._send(200, self._page("Links for " + proj, links))
        m = re.fullmatch(r"/files/([^/]+)", path)
        if m:
            fn = urllib.parse.unquote(m.group(1))
            if self.server.pep658 and fn.endswith(".whl.metadata"):
                wheel = fn[: -len(".metadata")]
                if cat.path(wheel):
                    meta = cat.metadata(wheel)
                    if meta is not None:
                        return self._send(200, meta, "application/octet-stream")
                return self._not_found()
            p = cat.path(fn)
            if not p:
                return self._not_found()
            return self._send_file(fn, p)
        return self._not_found()

    def _send_file(self, fn, path):
        with open(path, "rb") as f:
            data = f.read()
        self.send_response(200)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        if self.command == "HEAD":
            return
        gate = self.server.gate_dir
        hold = os.path.join(gate, fn + ".hold") if gate else None
        if hold and os.path.exists(hold):
            half = len(data) // 2
            self._write(data[:half])
            reached = os.path.join(gate, fn + ".reached")
            tmp = "%s.tmp%d.%d" % (reached, os.getpid(), threading.get_ident())
            with open(tmp, "w") as f:
                f.write("%d of %d bytes sent\n" % (half, len(data)))
            os.replace(tmp, reached)
            while os.path.exists(hold):
                if stopping.wait(GATE_POLL_SECONDS):
                    self.close_connection = True
                    return
            self._write(data[half:])
        else:
            self._write(data)

    def _write(self, data):
        view = memoryview(data)
        for i in range(0, len(view), CHUNK):
            self.wfile.write(view[i:i + CHUNK])
        self.wfile.flush()


class Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True


def main():
    ap = argparse.ArgumentParser(description="PEP 503 test package index")
    ap.add_argument("--dir", required=True, help="directory of wheels and sdists")
    ap.add_argument("--port", type=int, default=0, help="TCP port (0: any free one)")
    ap.add_argument("--port-file", help="write the chosen port here (atomically)")
    ap.add_argument("--log", help="append '<METHOD> <path> <status>' per request")
    ap.add_argument("--gate-dir", help="directory holding <filename>.hold gates")
    ap.add_argument("--pep658", action="store_true",
                    help="also serve <wheel>.metadata and advertise it (PEP 658)")
    ap.add_argument("--verbose", action="store_true", help="access log on stderr")
    args = ap.parse_args()
    if not os.path.isdir(args.dir):
        ap.error("--dir %s is not a directory" % args.dir)
    if args.gate_dir:
        os.makedirs(args.gate_dir, exist_ok=True)

    srv = Server(("127.0.0.1", args.port), Handler)
    srv.catalog = Catalog(os.path.abspath(args.dir))
    srv.log_path = os.path.abspath(args.log) if args.log else None
    srv.log_lock = threading.Lock()
    srv.gate_dir = os.path.abspath(args.gate_dir) if args.gate_dir else None
    srv.pep658 = args.pep658
    srv.verbose = args.verbose
    port = srv.server_address[1]

    def on_signal(signum, frame):
        stopping.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    worker = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.1},
                              daemon=True)
    worker.start()
    if args.port_file:
        tmp = "%s.tmp%d" % (args.port_file, os.getpid())
        with open(tmp, "w") as f:
            f.write("%d\n" % port)
        os.replace(tmp, args.port_file)
    sys.stdout.write("PORT %d\n" % port)
    sys.stdout.flush()

    while not stopping.wait(1.0):
        pass
    srv.shutdown()
    srv.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
