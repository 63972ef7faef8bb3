"""What the tests of clients/python share: the package pip-installed from
a copy of the folder, and a real interpd on 127.0.0.1:0.

Used by test_client.py (ctest clients/python) and test_compat.py (ctest
clients/compat).  Nothing here sleeps to synchronise: the port comes from
--ready-fd, readiness from polling GET /readyz.
"""
import json
import os
import select
import shutil
import subprocess
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
PKG_DIR = os.path.dirname(HERE)
ROOT = os.path.dirname(os.path.dirname(PKG_DIR))
SUPPORT = os.path.join(ROOT, "tests", "support")
PY = "/usr/bin/python3"
START_TIMEOUT = 60


def interpd_binary():
    """$INTERPD_BIN, which ctest sets; a RuntimeError when it is missing
    (the tests never skip)."""
    binary = os.environ.get("INTERPD_BIN")
    if not binary or not os.access(binary, os.X_OK):
        raise RuntimeError("INTERPD_BIN is not set to the interpd binary "
                           "(ctest sets it)")
    return binary


def pip_install(tmp):
    """clients/python copied to tmp, pip-installed into tmp/site with
    Debian's pip, offline (--no-index --no-build-isolation); returns the
    site folder, to put first on sys.path."""
    src = os.path.join(tmp, "src")
    shutil.copytree(PKG_DIR, src, ignore=shutil.ignore_patterns(
        "build", "*.egg-info", "__pycache__", "tests"))
    site = os.path.join(tmp, "site")
    p = subprocess.run(
        [PY, "-m", "pip", "install", "--no-input", "--no-index",
         "--no-build-isolation", "--disable-pip-version-check",
         "--no-cache-dir", "--target", site, src],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=300)
    if p.returncode != 0:
        raise RuntimeError("pip install clients/python failed (%d):\n%s" % (
            p.returncode, p.stdout.decode("utf-8", "replace")))
    return site


def check_installed(module, site):
    """RuntimeError unless ``module`` was imported from ``site`` (the
    tests exercise the installed package, not the source folder)."""
    if not module.__file__.startswith(site):
        raise RuntimeError("imported %s, not the installed copy" %
                           module.__file__)


class Server:
    """interpd serve on 127.0.0.1:0; its port from --ready-fd, then
    GET /readyz until 200.  The data dir is tmp/data; ``extra`` are more
    flags.  INTERPD_* variables of the environment are not passed on."""

    def __init__(self, binary, tmp, extra):
        self.binary = binary
        self.data_dir = os.path.join(tmp, "data")
        self.log_path = os.path.join(tmp, "interpd.log")
        self.log = open(self.log_path, "wb")
        r, w = os.pipe()
        env = {k: v for k, v in os.environ.items()
               if not k.startswith("INTERPD_")}
        self.proc = subprocess.Popen(
            [binary, "serve", "--listen", "127.0.0.1:0", "--data-dir",
             self.data_dir, "--ready-fd", str(w)] + extra,
            stdout=self.log, stderr=subprocess.STDOUT, pass_fds=(w,),
            env=env)
        os.close(w)
        try:
            self.port = self._read_port(r)
        finally:
            os.close(r)
        self.base = "http://127.0.0.1:%d" % self.port
        self._wait_ready()

    def _read_port(self, r):
        got = b""
        deadline = time.monotonic() + START_TIMEOUT
        while b"\n" not in got:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([r], [], [], left)[0]:
                raise RuntimeError("no port from interpd")
            chunk = os.read(r, 64)
            if not chunk:
                raise RuntimeError("interpd exited at start (%s):\n%s" % (
                    self.proc.poll(), self.log_tail()))
            got += chunk
        return int(got.strip())

    def _wait_ready(self):
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(self.base + "/readyz",
                                            timeout=5) as resp:
                    if resp.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.1)  # polling /readyz
        raise RuntimeError("interpd not ready:\n" + self.log_tail())

    def cli(self, *args):
        """``interpd ARGS --data-dir DATA``: its JSON output."""
        p = subprocess.run([self.binary] + list(args) +
                           ["--data-dir", self.data_dir],
                           stdout=subprocess.PIPE, check=True, timeout=60)
        return json.loads(p.stdout)

    def admin_key(self):
        """The admin key the first start wrote to DATA/admin.key."""
        with open(os.path.join(self.data_dir, "admin.key")) as f:
            return f.read().strip()

    def stop(self):
        """SIGTERM, then SIGKILL after 30 s; returns the exit status."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        return self.proc.returncode

    def log_tail(self, n=40):
        with open(self.log_path, "rb") as f:
            return b"".join(f.readlines()[-n:]).decode("utf-8", "replace")


def poll_until(what, fn, timeout=60):
    """fn() until it is true (polling a server state); its value."""
    deadline = time.monotonic() + timeout
    while True:
        v = fn()
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError("timed out waiting for " + what)
        time.sleep(0.05)
