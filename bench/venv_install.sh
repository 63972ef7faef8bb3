#!/usr/bin/env bash
# bench/venv_install.sh - issue 5: the cost of a safe install.
#
# In one run, against the test package index (tests/support/pkg-index.py
# over the wheels of tests/support/make-wheels.py, on 127.0.0.1):
#  1. interpd, POST /v1/packages alternating ipdtest-alpha==1.0 and ==2.0
#     (each one a real install: clone of the current generation + pip in the
#     sandbox + import check + switch), N times, with --venv-clone link and
#     then with --venv-clone copy;
#  2. baseline: plain `pip install` of the same alternating wheels into an
#     existing venv (made once with python3 -m venv --system-site-packages),
#     same pip flags, no sandbox, interleaved with the interpd installs.
#  3. creating a fresh generation: the first install on an empty data dir
#     (python -m venv with pip, in the sandbox, + the first install) and, for
#     comparison, python3 -m venv alone outside the sandbox.
# Target: (1) at most 2x (2) at p50.
#
# Usage: bench/venv_install.sh [N=10]
source "$(dirname "$0")/lib.sh"

N=${1:-10}
bench_setup venv_install
chmod 711 "$WORK"
WHEELS=$WORK/wheels
$PY "$BENCH_ROOT/tests/support/make-wheels.py" "$WHEELS" >/dev/null
$PY "$BENCH_ROOT/tests/support/pkg-index.py" --dir "$WHEELS" --port 0 \
    --port-file "$WORK/index.port" >/dev/null 2>"$WORK/index.log" &
INDEX_PID=$!
trap 'kill $INDEX_PID 2>/dev/null || true; bench_cleanup' EXIT
for _ in $(seq 100); do [ -s "$WORK/index.port" ] && break; sleep 0.05; done
[ -s "$WORK/index.port" ] || die "the package index did not start"
INDEX=http://127.0.0.1:$(cat "$WORK/index.port")/simple/
printf 'ipdtest-alpha\n' >"$WORK/allow.txt"
echo "# load average before: $(cut -d' ' -f1-3 /proc/loadavg)"

ms() { echo $(( $(date +%s%N) / 1000000 )); }
post() { # post REQ -> prints status
    curl -s -H "Authorization: Bearer $KEY" -H 'Content-Type: application/json' \
        -d "{\"packages\": [\"$1\"]}" "$BASE/v1/packages" |
        $PY -c 'import json,sys; print(json.load(sys.stdin)["results"][0]["status"])'
}
pct() { sort -n | awk -v p="$1" '{a[NR]=$1} END {i=int((NR-1)*p/100)+1; print a[i]}'; }

# Baseline venv, with the same pip flags as interpd (minus the sandbox).
t0=$(ms); /usr/bin/python3 -m venv --system-site-packages "$WORK/plain" ; t_plain_venv=$(( $(ms) - t0 ))
PIP=(env -i PATH=/usr/bin:/bin HOME="$WORK" PIP_CONFIG_FILE=/dev/null "$WORK/plain/bin/python" -m pip
     install --no-input --disable-pip-version-check --no-warn-script-location
     --progress-bar off --only-binary=:all: --cache-dir "$WORK/plain-cache" --timeout 30
     --index-url "$INDEX")
"${PIP[@]}" -q ipdtest-alpha==2.0 >/dev/null

for mode in link copy; do
    start_server --allowlist "$WORK/allow.txt" --pip-index-url "$INDEX" --venv-clone "$mode"
    t0=$(ms); s=$(post ipdtest-alpha==2.0); t_first=$(( $(ms) - t0 ))
    [ "$s" = installed ] || die "first install: $s"
    : >"$WORK/$mode.ms"; : >"$WORK/base-$mode.ms"
    for i in $(seq "$N"); do
        v=$(( i % 2 ? 1 : 2 )).0
        t0=$(ms); s=$(post "ipdtest-alpha==$v"); t=$(( $(ms) - t0 ))
        [ "$s" = installed ] || die "install $v: $s"
        echo "$t" >>"$WORK/$mode.ms"
        t0=$(ms); "${PIP[@]}" -q "ipdtest-alpha==$v" >/dev/null; echo $(( $(ms) - t0 )) >>"$WORK/base-$mode.ms"
    done
    gens=$(ls -d "$WORK"/data/venv/gen-* | wc -l)
    p50=$(pct 50 <"$WORK/$mode.ms"); p90=$(pct 90 <"$WORK/$mode.ms")
    b50=$(pct 50 <"$WORK/base-$mode.ms"); b90=$(pct 90 <"$WORK/base-$mode.ms")
    echo "clone=$mode first_install_ms=$t_first install_p50_ms=$p50 install_p90_ms=$p90 plain_pip_p50_ms=$b50 plain_pip_p90_ms=$b90 ratio_p50=$(awk -v a="$p50" -v b="$b50" 'BEGIN {printf "%.2f", a/b}') generations_left=$gens"
    stop_server
    rm -rf "$WORK/data"
done
echo "plain_python_m_venv_ms=$t_plain_venv"
echo "# load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
