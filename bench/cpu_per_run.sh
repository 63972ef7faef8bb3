#!/usr/bin/env bash
# bench/cpu_per_run.sh - issue 24's CPU per run: a warm print(1) on one
# keep-alive connection against a fresh /usr/bin/python3 -c 'print(1)',
# system CPU (/proc/stat, net of an idle control interval) and the
# server's process tree's CPU, each per run, total and kernel, with the
# zygotes' and the parked children's share (driver: bench/cpu_per_run.py).
#
# Usage: bench/cpu_per_run.sh [N=200] [BLOCKS=5] [CODE='print(1)']
#   BLOCKS blocks of N runs of each contestant and an idle control as long
#   as the warm phase, the order alternating from block to block.
#   INTERPD=path/to/interpd picks the build (default build-bench/interpd);
#   SERVER_OPTS adds interpd serve options (e.g. --exec-slots 1); SESSION=1
#   adds N calls of `pass` in one live session per block.
# Output also goes to $(dirname $INTERPD)/cpu-per-run-results.txt.
source "$(dirname "$0")/lib.sh"

N=${1:-200}
BLOCKS=${2:-5}
CODE=${3:-print(1)}
OUT=$(dirname "$INTERPD")/cpu-per-run-results.txt
read -ra extra <<<"${SERVER_OPTS:-}"

bench_setup cpu
chmod 711 "$WORK"
exec > >(tee "$OUT") 2>&1
echo "# interpd issue 24 CPU per run, $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
echo "# $INTERPD, commit $(git -C "$BENCH_ROOT" rev-parse --short HEAD 2>/dev/null)$(git -C "$BENCH_ROOT" diff --quiet HEAD 2>/dev/null || echo ' (dirty tree)')"
echo "# nproc $(nproc); kernel $(uname -r); load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
# No recycling during the measurement: a zygote's replacement would be
# counted in the runs of the block it falls in.
start_server --exec-mode warm --exec-queue 64 --warm-recycle-runs 0 \
    --policy.standard.tenant-running 100% --sandbox-uid 310000 "${extra[@]}"
wait_modes "interpd warm=$PORT:$KEY"
"$PY" -B "$BENCH_ROOT/bench/cpu_per_run.py" 127.0.0.1 "$PORT" "$KEY" \
    "$SERVER_PID" "$N" "$BLOCKS" "$CODE"
echo "# load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
