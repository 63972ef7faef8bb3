#!/usr/bin/python3
"""README command 1 and the "Try it" block, exactly as written.

    test-readme.py SRC_ROOT PARENT

Copies the tree (what git tracks, and untracked files it does not ignore)
into a new directory under PARENT (/root: a 0700 home; /tmp: world
readable), then, in that copy, with the PATH of a fresh Debian shell:
  1. starts README command 1 (install, build, serve) in the background and
     waits for its /healthz (bounded: it builds first);
  2. runs the "Try it" block with bash -e, each command echoed;
  3. checks what the block printed: a File, a list, an execution's stdout,
     the bot flow's chart (a real PNG), a new key.
A change to README.md that breaks either block fails this test.  The
server listens on 127.0.0.1:8080 as written, so the two instances of this
test share a ctest RESOURCE_LOCK.
"""
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request

PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
START_DEADLINE_S = 900   # install-deps (no-op when installed) + a build
BLOCK_DEADLINE_S = 300


def fail(msg):
    print("test-readme: FAIL: " + msg, flush=True)
    sys.exit(1)


def blocks(readme):
    """The sh blocks of README.md, in order."""
    return re.findall(r"```sh\n(.*?)```", readme, re.S)


def command_1(readme):
    for block in blocks(readme):
        lines = block.splitlines()
        for i, line in enumerate(lines):
            if line.startswith("# 1.") and i + 1 < len(lines):
                return lines[i + 1]
    fail("README.md has no '# 1.' command in an sh block")


def try_it(readme):
    at = readme.find("Try it")
    if at < 0:
        fail("README.md has no 'Try it' paragraph")
    rest = blocks(readme[at:])
    if not rest:
        fail("README.md has no sh block after 'Try it'")
    return rest[0]


def copy_tree(src, dst):
    files = subprocess.run(
        ["git", "-C", src, "ls-files", "-z", "--cached", "--others",
         "--exclude-standard"], check=True, capture_output=True).stdout
    for rel in files.decode().split("\0"):
        if not rel or not os.path.lexists(os.path.join(src, rel)):
            continue
        os.makedirs(os.path.join(dst, os.path.dirname(rel)), exist_ok=True)
        shutil.copy2(os.path.join(src, rel), os.path.join(dst, rel),
                     follow_symlinks=False)


def healthy():
    try:
        with urllib.request.urlopen("http://127.0.0.1:8080/healthz",
                                    timeout=2) as r:
            return r.status == 200
    except OSError:
        return False


def main():
    if len(sys.argv) != 3:
        fail("usage: test-readme.py SRC_ROOT PARENT")
    src, parent = sys.argv[1], sys.argv[2]
    with open(os.path.join(src, "README.md")) as f:
        readme = f.read()
    cmd1, block = command_1(readme), try_it(readme)
    if healthy():
        fail("something already answers on 127.0.0.1:8080")
    work = tempfile.mkdtemp(prefix="ipd-readme-", dir=parent)
    server = None
    try:
        copy_tree(src, work)
        print("test-readme: copy in %s (parent mode %o)"
              % (work, os.stat(parent).st_mode & 0o777), flush=True)
        env = {"PATH": PATH, "HOME": os.environ.get("HOME", "/root"),
               "LANG": "C.UTF-8", "TERM": "dumb"}
        log = open(os.path.join(work, "server.log"), "w")
        print("test-readme: $ " + cmd1, flush=True)
        server = subprocess.Popen(["bash", "-c", cmd1], cwd=work, env=env,
                                  stdout=log, stderr=subprocess.STDOUT,
                                  start_new_session=True)
        deadline = time.monotonic() + START_DEADLINE_S
        while not healthy():
            if server.poll() is not None:
                fail("command 1 ended with %d before serving:\n%s"
                     % (server.returncode, open(log.name).read()[-4000:]))
            if time.monotonic() > deadline:
                fail("command 1 did not serve within %d s" % START_DEADLINE_S)
            time.sleep(0.5)  # polling a server that is building itself
        print("test-readme: the server answers /healthz", flush=True)
        r = subprocess.run(["bash", "-e", "-x", "-c", block], cwd=work,
                           env=env, capture_output=True, text=True,
                           timeout=BLOCK_DEADLINE_S)
        print(r.stderr[-6000:], r.stdout[-6000:], sep="\n", flush=True)
        if r.returncode != 0:
            fail("the Try it block exited %d" % r.returncode)
        check_output(r.stdout, work)
        print("test-readme: ok", flush=True)
    finally:
        if server and server.poll() is None:
            os.killpg(server.pid, signal.SIGTERM)
            try:
                server.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(server.pid, signal.SIGKILL)
                server.wait()
        shutil.rmtree(work, ignore_errors=True)


def check_output(out, work):
    """The block's curls print JSON documents one after another, then the
    bot flow's lines, then the key."""
    dec = json.JSONDecoder()
    docs, i = [], 0
    while True:
        i = out.find("{", i)
        if i < 0:
            break
        try:
            doc, end = dec.raw_decode(out, i)
        except ValueError:
            i += 1
            continue
        docs.append(doc)
        i = end
    uploads = [d for d in docs if d.get("filename") == "sales.csv"]
    if not uploads or uploads[0].get("file_type") != "csv":
        fail("no File for sales.csv in the output")
    lists = [d for d in docs if "files" in d]
    if not lists or not any(f.get("filename") == "sales.csv"
                            for f in lists[0]["files"]):
        fail("the list does not show sales.csv")
    runs = [d for d in docs if "execution_id" in d]
    if not runs or runs[0].get("stdout") != "45\n" or not runs[0]["success"]:
        fail("the execution did not print 45: %s" % (runs[:1],))
    if "chart saved to chart.png" not in out:
        fail("the bot flow saved no chart")
    with open(os.path.join(work, "chart.png"), "rb") as f:
        if f.read(8) != b"\x89PNG\r\n\x1a\n":
            fail("chart.png is not a PNG")
    keys = [d for d in docs if d.get("tenant") == "my-bot"]
    if not keys or not keys[0].get("key"):
        fail("keys create printed no key for my-bot")


if __name__ == "__main__":
    main()
