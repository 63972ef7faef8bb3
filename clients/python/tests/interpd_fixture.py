"""What the tests of clients/python share: the package pip-installed from
a copy of the folder, and a real interpd on 127.0.0.1:0.

Used by test_client.py (ctest clients/python) and test_compat.py (ctest
clients/compat).  Nothing here sleeps to synchronise: the port comes from
--ready-fd, readiness from polling GET /readyz.
"""
import os
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
PKG_DIR = os.path.dirname(HERE)
ROOT = os.path.dirname(os.path.dirname(PKG_DIR))
SUPPORT = os.path.join(ROOT, "tests", "support")
PY = "/usr/bin/python3"
sys.path.insert(0, SUPPORT)
import interpd_server  # noqa: E402
from interpd_server import START_TIMEOUT  # noqa: E402,F401


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


class Server(interpd_server.Server):
    """tests/support/interpd_server.py's server with its data dir in
    tmp/data and its log in tmp/interpd.log; ``extra`` are more flags."""

    def __init__(self, binary, tmp, extra):
        super().__init__(binary, os.path.join(tmp, "data"),
                         os.path.join(tmp, "interpd.log"), extra)


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
