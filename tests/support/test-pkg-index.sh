#!/usr/bin/env bash
# Self-test of the test suite's own Python package index: builds the ipdtest-*
# packages (make-wheels.py), serves them (pkg-index.py) on a free loopback
# port, and drives the real pip of a fresh venv of Debian's /usr/bin/python3
# against them, with the same flags the venv installer uses.
#
#   tests/support/test-pkg-index.sh
#
# Needs no network beyond 127.0.0.1.  Ends with "N passed, M failed"; exits
# non-zero at the first failure, saying what failed.
set -euo pipefail

PY=/usr/bin/python3            # Debian's; never the pyenv shim first on PATH
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/ipd-pkgindex.XXXXXX")
server_pid=""
bg_pid=""
passed=0

cleanup() {
  local rc=$?
  if [ -n "$bg_pid" ]; then kill "$bg_pid" 2>/dev/null || true; wait "$bg_pid" 2>/dev/null || true; fi
  if [ -n "$server_pid" ]; then
    kill -TERM "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
  fi
  rm -rf "$work"
  if [ "$rc" -ne 0 ]; then echo "$passed passed, 1 failed"; fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

fail() {
  echo "test-pkg-index: FAIL: $*" >&2
  for f in "$work"/*.out; do
    [ -s "$f" ] && { echo "--- $f" >&2; tail -n 30 "$f" >&2; }
  done
  [ -s "$work/index.log" ] && { echo "--- index log" >&2; tail -n 30 "$work/index.log" >&2; }
  exit 1
}
ok() { passed=$((passed + 1)); echo "ok $passed - $*"; }
ms_since() { echo $(( ($(date +%s%N) - $1) / 1000000 )); }

# pip must see only what this script gives it: this machine exports PIP_*
# variables (PIP_FIND_LINKS, PIP_DEFAULT_TIMEOUT, ...) and has /etc/pip.conf.
# PIP_CONFIG_FILE=/dev/null makes pip skip every config file, global included.
while IFS= read -r v; do unset "$v"; done < <(compgen -e | grep -E '^PIP_' || true)
export PIP_CONFIG_FILE=/dev/null
export PYTHONNOUSERSITE=1
unset http_proxy https_proxy HTTP_PROXY HTTPS_PROXY all_proxy ALL_PROXY
export no_proxy=127.0.0.1,localhost NO_PROXY=127.0.0.1,localhost
export IPDTEST_SDIST_MARKER="$work/sdist-ran"

# --- 1. wheels: built, deterministic, valid RECORDs ----------------------
dist="$work/dist"
"$PY" "$here/make-wheels.py" "$dist" >"$work/make.out" 2>&1 || fail "make-wheels.py failed"
"$PY" "$here/make-wheels.py" "$work/dist2" >/dev/null 2>&1 || fail "make-wheels.py (second run) failed"
for f in "$dist"/*; do
  cmp -s "$f" "$work/dist2/$(basename "$f")" || fail "rebuild of $(basename "$f") is not byte-identical"
done
[ "$(ls "$dist" | wc -l)" -eq 12 ] || fail "expected 12 files in $dist, got: $(ls "$dist" | tr '\n' ' ')"
rm -rf "$work/dist2"
ok "make-wheels.py built 9 wheels + 1 sdist, byte-identical on rebuild"

"$PY" - "$dist" <<'EOF' || fail "wheel contents check failed"
import base64, hashlib, os, sys, zipfile
d = sys.argv[1]
for fn in sorted(os.listdir(d)):
    if not fn.endswith(".whl"):
        continue
    name, ver, py, abi, plat = fn[:-4].split("-")
    assert (py, abi, plat) == ("py3", "none", "any"), fn
    di = "%s-%s.dist-info/" % (name, ver)
    with zipfile.ZipFile(os.path.join(d, fn)) as z:
        names = z.namelist()
        for need in ("METADATA", "WHEEL", "RECORD"):
            assert di + need in names, (fn, need)
        assert "Tag: py3-none-any" in z.read(di + "WHEEL").decode(), fn
        rows = [l.rsplit(",", 2) for l in z.read(di + "RECORD").decode().splitlines()]
        listed = {r[0] for r in rows}
        assert listed == set(names), (fn, listed ^ set(names))
        for path, h, size in rows:
            if path == di + "RECORD":
                assert (h, size) == ("", ""), fn
                continue
            data = z.read(path)
            want = "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            assert h == want and int(size) == len(data), (fn, path)
EOF
ok "every wheel has METADATA/WHEEL/RECORD, py3-none-any, RECORD hashes and sizes match"

# --- 2. the index ---------------------------------------------------------
gate="$work/gate"
"$PY" "$here/pkg-index.py" --dir "$dist" --port 0 --port-file "$work/port" \
  --log "$work/index.log" --gate-dir "$gate" >"$work/index.stdout" 2>"$work/index.out" &
server_pid=$!
deadline=$((SECONDS + 20))
until [ -s "$work/port" ]; do
  kill -0 "$server_pid" 2>/dev/null || fail "pkg-index.py exited at start"
  [ "$SECONDS" -lt "$deadline" ] || fail "pkg-index.py wrote no port file within 20 s"
  sleep 0.05
done
port=$(cat "$work/port")
[ "$(head -n 1 "$work/index.stdout")" = "PORT $port" ] || fail "first stdout line is not 'PORT $port'"
index="http://127.0.0.1:$port/simple/"
ok "pkg-index.py listening on 127.0.0.1:$port"

"$PY" - "$index" "$dist" <<'EOF' || fail "PEP 503 pages check failed"
import hashlib, os, re, sys, urllib.error, urllib.request
index, d = sys.argv[1], sys.argv[2]
get = lambda u: urllib.request.urlopen(u, timeout=10).read().decode()
root = get(index)
projects = set(re.findall(r'href="/simple/([^/"]+)/"', root))
assert projects == {"ipdtest-" + p for p in "alpha baddep big broken dep evil forbidden mapped sdistonly tamper withdep".split()}, projects
page = get(index + "IPDTest_.Alpha/")   # any spelling normalises, no redirect
links = dict(re.findall(r'href="/files/([^"#]+)#sha256=([0-9a-f]{64})"', page))
assert set(links) == {"ipdtest_alpha-1.0-py3-none-any.whl", "ipdtest_alpha-2.0-py3-none-any.whl"}, links
for fn, h in links.items():
    body = urllib.request.urlopen(index.replace("/simple/", "/files/") + fn, timeout=10).read()
    assert hashlib.sha256(body).hexdigest() == h == hashlib.sha256(open(os.path.join(d, fn), "rb").read()).hexdigest()
try:
    get(index + "no-such-project/")
    raise SystemExit("unknown project did not 404")
except urllib.error.HTTPError as e:
    assert e.code == 404
EOF
ok "PEP 503 /simple/, /simple/<name>/ (#sha256 fragments), /files/, 404 for unknown"

# --- 3. venv + real pip -----------------------------------------------------
t0=$(date +%s%N)
"$PY" -m venv --system-site-packages "$work/venv" >"$work/venv.out" 2>&1 || fail "venv creation failed"
venv_ms=$(ms_since "$t0")
vpy="$work/venv/bin/python"
"$vpy" -m pip --version | grep -q '^pip ' || fail "venv has no pip"
ok "venv created in ${venv_ms} ms ($("$vpy" -m pip --version | cut -d' ' -f1-2))"

pip_install() {  # the installer's flags; extra arguments follow
  "$vpy" -m pip install --no-input --disable-pip-version-check --no-cache-dir \
    --progress-bar off --timeout 60 --only-binary=:all: --index-url "$index" "$@"
}
installed_version() {  # prints the version of distribution $1, or nothing
  "$vpy" -c 'import importlib.metadata as m, sys
try: print(m.version(sys.argv[1]))
except m.PackageNotFoundError: pass' "$1"
}

t0=$(date +%s%N)
pip_install ipdtest-alpha==1.0 >"$work/alpha1.out" 2>&1 || fail "pip install ipdtest-alpha==1.0 failed"
install_ms=$(ms_since "$t0")
[ "$("$vpy" -c 'import ipdtest_alpha; print(ipdtest_alpha.hello())')" = "alpha 1.0" ] \
  || fail "ipdtest_alpha.hello() is not 'alpha 1.0'"
ok "pip install ipdtest-alpha==1.0 in ${install_ms} ms; hello() == 'alpha 1.0'"

pip_install ipdtest-withdep >"$work/withdep.out" 2>&1 || fail "pip install ipdtest-withdep failed"
[ "$(installed_version ipdtest-dep)" = "1.0" ] || fail "ipdtest-dep was not pulled in by ipdtest-withdep"
"$vpy" -c 'import ipdtest_withdep as w; assert w.hello() == "withdep 1.0 + dep 1.0"' \
  || fail "ipdtest_withdep does not import"
ok "pip install ipdtest-withdep pulled in ipdtest-dep 1.0"

pip_install --upgrade ipdtest-alpha >"$work/alpha2.out" 2>&1 || fail "pip install --upgrade ipdtest-alpha failed"
[ "$("$vpy" -c 'import ipdtest_alpha; print(ipdtest_alpha.hello())')" = "alpha 2.0" ] \
  || fail "after upgrade hello() is not 'alpha 2.0'"
[ "$(installed_version ipdtest-alpha)" = "2.0" ] || fail "ipdtest-alpha metadata is not 2.0 after upgrade"
ok "pip install --upgrade ipdtest-alpha: 1.0 -> 2.0"

pip_install ipdtest-mapped ipdtest-broken >"$work/mapped.out" 2>&1 || fail "pip install ipdtest-mapped ipdtest-broken failed"
"$vpy" -c '
import importlib.metadata as m, ipdmapped
assert ipdmapped.hello() == "mapped 1.0"
assert m.packages_distributions()["ipdmapped"] == ["ipdtest-mapped"], m.packages_distributions().get("ipdmapped")
' || fail "ipdmapped does not import or does not map to ipdtest-mapped"
if "$vpy" -c 'import ipdtest_broken' >"$work/broken.out" 2>&1; then fail "ipdtest_broken imported"; fi
grep -q 'ImportError: deliberately broken' "$work/broken.out" || fail "ipdtest_broken failed for another reason"
ok "ipdtest-mapped imports as ipdmapped (mapped back by importlib.metadata); ipdtest-broken installs but its import fails"

# --- 4. sdist refused under --only-binary=:all: ------------------------------
if pip_install ipdtest-sdistonly >"$work/sdist.out" 2>&1; then fail "ipdtest-sdistonly was installed despite --only-binary=:all:"; fi
grep -q 'No matching distribution found for ipdtest-sdistonly' "$work/sdist.out" \
  || fail "ipdtest-sdistonly refused for an unexpected reason"
[ ! -e "$IPDTEST_SDIST_MARKER" ] || fail "setup.py of ipdtest-sdistonly ran under --only-binary=:all:"
if grep -q ' /files/ipdtest_sdistonly' "$work/index.log"; then fail "the sdist was downloaded under --only-binary=:all:"; fi
ok "ipdtest-sdistonly refused by --only-binary=:all: (not downloaded, setup.py not run)"
# Positive control: without --only-binary the marker does appear, so its
# absence above means something.  (pip download runs setup.py to get metadata.)
"$vpy" -m pip download --no-input --disable-pip-version-check --no-cache-dir --no-deps \
  --no-build-isolation --index-url "$index" -d "$work/dl" ipdtest-sdistonly >"$work/sdist-control.out" 2>&1 || true
[ -e "$IPDTEST_SDIST_MARKER" ] || fail "control: setup.py marker not created without --only-binary"
rm -f "$IPDTEST_SDIST_MARKER"
ok "control: without --only-binary, pip download runs setup.py (marker created)"

# --- 5. gate: a download held mid-way ------------------------------------------
big=ipdtest_big-1.0-py3-none-any.whl
touch "$gate/$big.hold"
pip_install ipdtest-big >"$work/big.out" 2>&1 &
bg_pid=$!
deadline=$((SECONDS + 60))
until [ -e "$gate/$big.reached" ]; do
  kill -0 "$bg_pid" 2>/dev/null || fail "pip exited before the download reached the gate"
  [ "$SECONDS" -lt "$deadline" ] || fail "download did not reach the gate within 60 s"
  sleep 0.05
done
kill -0 "$bg_pid" 2>/dev/null || fail "pip is not running while the download is held"
[ -z "$(installed_version ipdtest-big)" ] || fail "ipdtest-big installed while its download was held"
grep -q "GET /files/$big 200" "$work/index.log" || fail "held download not in the index log"
ok "gate: ipdtest-big download held at half ($(cat "$gate/$big.reached" | tr -d '\n')), pip still running"
rm -f "$gate/$big.hold"
deadline=$((SECONDS + 120))
while kill -0 "$bg_pid" 2>/dev/null; do
  [ "$SECONDS" -lt "$deadline" ] || fail "pip did not finish within 120 s of the gate opening"
  sleep 0.05
done
big_rc=0; wait "$bg_pid" || big_rc=$?
bg_pid=""
[ "$big_rc" -eq 0 ] || fail "pip install ipdtest-big failed after the gate opened (exit $big_rc)"
"$vpy" -c '
import os, ipdtest_big
assert os.path.getsize(ipdtest_big.PAYLOAD) == ipdtest_big.PAYLOAD_SIZE == 5 * 1024 * 1024
' || fail "ipdtest_big payload missing or wrong size"
ok "gate opened: ipdtest-big installed, 5 MiB payload intact"

# --- 6. dependencies before installing: --dry-run --report - --------------------
before=$(wc -l <"$work/index.log")
pip_install --dry-run --ignore-installed --quiet --report - ipdtest-baddep \
  >"$work/report.json" 2>"$work/report.out" || fail "pip install --dry-run --report - failed"
"$PY" - "$work/report.json" "$dist" <<'EOF' || fail "dry-run report check failed"
import hashlib, json, os, sys
rep = json.load(open(sys.argv[1]))        # stdout must be nothing but the JSON
assert rep["version"] == "1", rep["version"]
items = {i["metadata"]["name"]: i for i in rep["install"]}
assert set(items) == {"ipdtest-baddep", "ipdtest-forbidden"}, set(items)
bad, forb = items["ipdtest-baddep"], items["ipdtest-forbidden"]
assert bad["requested"] is True and forb["requested"] is False
assert bad["metadata"]["version"] == "1.0" and forb["metadata"]["version"] == "1.0"
assert bad["metadata"]["requires_dist"] == ["ipdtest-forbidden"], bad["metadata"]
for i in (bad, forb):
    url = i["download_info"]["url"]
    fn = url.rsplit("/", 1)[1]
    want = hashlib.sha256(open(os.path.join(sys.argv[2], fn), "rb").read()).hexdigest()
    assert i["download_info"]["archive_info"]["hashes"]["sha256"] == want, fn
EOF
[ -z "$(installed_version ipdtest-baddep)$(installed_version ipdtest-forbidden)" ] \
  || fail "--dry-run installed something"
ok "--dry-run --report - lists ipdtest-baddep (requested) and ipdtest-forbidden (dependency), installs nothing"
# pip 23.0.1 downloads (never installs or runs) each wheel it resolves, even
# in a dry run: the index has no PEP 658 metadata by default.
echo "# dry run fetched: $(tail -n +"$((before + 1))" "$work/index.log" | grep ' /files/' | awk '{print $2}' | tr '\n' ' ')"

# The index was asked for nothing it should not have been.
if grep -qvE '^(GET|HEAD) /(simple/([A-Za-z0-9_.-]+/)?|files/[A-Za-z0-9_.-]+) (200|404)$' "$work/index.log"; then
  fail "unexpected request in the index log: $(grep -vE '^(GET|HEAD) /(simple/([A-Za-z0-9_.-]+/)?|files/[A-Za-z0-9_.-]+) (200|404)$' "$work/index.log" | head -n 3)"
fi

# --- 7. clean shutdown on SIGTERM -------------------------------------------------
kill -TERM "$server_pid"
deadline=$((SECONDS + 10))
while kill -0 "$server_pid" 2>/dev/null; do
  [ "$SECONDS" -lt "$deadline" ] || fail "pkg-index.py still running 10 s after SIGTERM"
  sleep 0.05
done
srv_rc=0; wait "$server_pid" || srv_rc=$?
server_pid=""
[ "$srv_rc" -eq 0 ] || fail "pkg-index.py exited $srv_rc on SIGTERM"
ok "pkg-index.py exits 0 on SIGTERM"

echo "timings: venv ${venv_ms} ms, small wheel install ${install_ms} ms"
echo "$passed passed, 0 failed"
