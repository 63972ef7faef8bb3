#!/usr/bin/env bash
# bench/warm.sh - issue 14's benchmark: interpd against its baselines, one
# run, contestants interleaved (driver: bench/warm.py; the job all of them
# run: bench/png_job.py).
#
#   A  /usr/bin/python3 -c 'print(1)', a fresh process each time
#   B  a fresh /usr/bin/python3 running the pandas + matplotlib PNG job
#   C  a Jupyter kernel (Debian's python3-ipykernel, jupyter_client; no
#      sandbox, no HTTP): print(1), and the job with its imports done
#   one interpd per mode of MODES, each on its own data dir, all started
#   before the first round and measured over HTTP with keep-alive:
#   print(1) and the job (p50/p90), a session call when the server has
#   sessions, and print(1) executions/s at 2 and 8 clients.
#
# MODES is a ';'-separated list of LABEL=OPTIONS (interpd serve options
# added to the common ones below); default
#   MODES='cold=--exec-mode cold;warm=--exec-mode warm'
# (a session mode is one more entry when sessions land).
# Every server runs with --policy.standard.tenant-running 100%: the driver
# is one tenant (the admin key) whose users are the bot's users, the usual
# deployment, so its executions may use every slot (the default, 50%, would
# measure half the pool); and --exec-queue 64, so 8 clients never see 429.
# Each server gets its own --sandbox-uid range, from 300000 (its slots' uids and their
# RLIMIT_NPROC counts are not shared with the other servers').
#
# Usage: bench/warm.sh [ROUNDS=20] [PER_ROUND=5] [DURATION=5] [REPS=3]
#   ROUNDS rounds of PER_ROUND print(1)s of each contestant then one job of
#   each; then executions/s, DURATION seconds per point, REPS times.
#   INTERPD=path/to/interpd picks the build (default build-bench/interpd).
# Output also goes to $(dirname $INTERPD)/warm-results.txt.
source "$(dirname "$0")/lib.sh"

ROUNDS=${1:-20}
PER_ROUND=${2:-5}
DURATION=${3:-5}
REPS=${4:-3}
MODES=${MODES:-cold=--exec-mode cold;warm=--exec-mode warm}
OUT=$(dirname "$INTERPD")/warm-results.txt

"$PY" -c 'import jupyter_client, ipykernel, pandas, matplotlib' 2>/dev/null ||
    die "needs python3-jupyter-client, python3-ipykernel, python3-pandas and python3-matplotlib (scripts/install-deps.sh)"

bench_setup warm
chmod 711 "$WORK"   # mktemp -d makes it 0700; the sandbox uid must search it
exec > >(tee "$OUT") 2>&1
echo "# interpd issue 14 benchmark, $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
echo "# $INTERPD, commit $(git -C "$BENCH_ROOT" rev-parse --short HEAD 2>/dev/null)$(git -C "$BENCH_ROOT" diff --quiet HEAD 2>/dev/null || echo ' (dirty tree)')"
echo "# nproc $(nproc); $(lscpu | awk -F: '/Model name/ {gsub(/^ +/, "", $2); print $2}'); kernel $(uname -r); $(free -g | awk '/Mem:/ {print $2 " GiB RAM"}')"
echo "# load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
servers=()
i=0
IFS=';' read -ra modes <<<"$MODES"
for m in "${modes[@]}"; do
    label=${m%%=*}
    read -ra opts <<<"${m#*=}"
    SERVER_NAME=$label start_server --exec-queue 64 \
        --policy.standard.tenant-running 100% \
        --sandbox-uid $((300000 + 1000 * i)) "${opts[@]}"
    servers+=("interpd $label=$PORT:$KEY")
    i=$((i + 1))
done
# A warm server answers cold until its zygotes are ready: wait for them.
wait_modes "${servers[@]}"
# PATH: the kernel and anything the driver starts by name get Debian's
# python, not the pyenv shim first on PATH.
PATH=/usr/bin:/bin:$PATH "$PY" -B "$BENCH_ROOT/bench/warm.py" "$WORK" \
    "$ROUNDS" "$PER_ROUND" "$DURATION" "$REPS" "${servers[@]}"
echo "# load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
