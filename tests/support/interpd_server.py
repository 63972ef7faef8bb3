"""A real interpd for the Python-driven tests (tests/clients/*.py,
clients/python/tests/*.py): ``interpd serve`` on 127.0.0.1:0, its port
from --ready-fd, then GET /readyz polled until 200.  Nothing sleeps to
synchronise but that poll.  INTERPD_* variables of the environment are
not passed on, so the flags given are the whole configuration.
"""
import json
import os
import select
import subprocess
import time
import urllib.error
import urllib.request

START_TIMEOUT = 60


def npm_pinned(folder, package):
    """(the version folder/package.json pins for package, the version
    installed in folder/node_modules or None)."""
    with open(os.path.join(folder, "package.json")) as f:
        want = json.load(f)["devDependencies"][package]
    try:
        with open(os.path.join(folder, "node_modules", package,
                               "package.json")) as f:
            return want, json.load(f)["version"]
    except OSError:
        return want, None


class Server:
    """interpd serve in data_dir, its log in log_path; ``extra_args`` are
    more flags."""

    def __init__(self, binary, data_dir, log_path, extra_args=()):
        self.binary = binary
        self.data_dir = data_dir
        self.log_path = log_path
        self.log = open(log_path, "wb")
        r, w = os.pipe()
        env = {k: v for k, v in os.environ.items()
               if not k.startswith("INTERPD_")}
        self.proc = subprocess.Popen(
            [binary, "serve", "--listen", "127.0.0.1:0", "--data-dir",
             data_dir, "--ready-fd", str(w)] + list(extra_args),
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
                raise RuntimeError("no port from interpd in %d s"
                                   % START_TIMEOUT)
            chunk = os.read(r, 64)
            if not chunk:
                raise RuntimeError("interpd exited at start (status %s):\n%s"
                                   % (self.proc.poll(), self.log_tail()))
            got += chunk
        return int(got.strip())

    def _wait_ready(self):
        deadline = time.monotonic() + START_TIMEOUT
        status = None
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(self.base + "/readyz",
                                            timeout=5) as resp:
                    status = resp.status
            except urllib.error.HTTPError as e:
                status = e.code
            except OSError as e:
                status = str(e)
            if status == 200:
                return
            time.sleep(0.1)  # polling /readyz
        raise RuntimeError("GET /readyz: %s after %d s:\n%s"
                           % (status, START_TIMEOUT, self.log_tail()))

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
        """SIGTERM and wait; the exit status (killed after 30 s: None)."""
        status = self.proc.poll()
        if status is None:
            self.proc.terminate()
            try:
                status = self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                status = None
        self.log.close()
        return status

    def stop_failure(self):
        """Stop; None when interpd exited 0 after SIGTERM, else what
        happened, with the log's last lines."""
        status = self.stop()
        if status == 0:
            return None
        return "interpd exited %s after SIGTERM:\n%s" % (status,
                                                          self.log_tail())

    def finish(self, failed):
        """Stop at the end of a test (failed: whether it has failed so
        far).  A non-zero exit is printed as a failure; a failed test
        prints the log's last lines.  True when the test failed."""
        why = self.stop_failure()
        if why:
            print("FAIL " + why, flush=True)
        elif failed:
            print("---- interpd log (last lines) ----\n" + self.log_tail(),
                  flush=True)
        return bool(failed or why)

    def log_tail(self, n=40):
        with open(self.log_path, "rb") as f:
            return b"".join(f.readlines()[-n:]).decode("utf-8", "replace")
