#!/usr/bin/env bash
# bench/calls.sh - issue 22's benchmark of calls from the code to its
# client: a call round trip through the service (the issue's target: at
# most 2 ms p50 on this machine, measured against a local echo client), on
# one warm interpd, one run, contestants interleaved (driver:
# bench/calls.py):
#
#   ROUNDS rounds, shuffled per round, of: one streamed run whose code
#   makes N sequential llm_query(i) calls and times each (the client
#   answers every call at once, echoing its argument, on a keep-alive
#   connection of its own); N answer POSTs of the same client to a finished
#   execution's call (410: the HTTP hop an answer costs); N round trips of
#   the code's framing to a forked Python echo process over a socketpair
#   (the floor of a call between two processes). p50/p90/p99 of each, the
#   server's CPU per call, a call's three legs (to the client, the answer
#   POST, back to the code), the ratios against the target and the
#   baselines.
#
# The server is started as bench/stream.sh starts its one: --exec-mode
# warm, --exec-queue 64 and --policy.standard.tenant-running 100%; its own
# --sandbox-uid range, from 304000, apart from the other benches'.
#
# Usage: bench/calls.sh [ROUNDS=50] [N=200]
#   INTERPD=path/to/interpd picks the build (default build-bench/interpd).
#   PERF=FILE also records the server with `perf record -g` during the
#   rounds into FILE (then: perf report -i FILE --no-children).
# Output also goes to $(dirname $INTERPD)/calls-results.txt.
source "$(dirname "$0")/lib.sh"

ROUNDS=${1:-50}
N=${2:-200}
OUT=$(dirname "$INTERPD")/calls-results.txt
PERF=${PERF:-}

bench_setup calls
chmod 711 "$WORK"   # mktemp -d makes it 0700; the sandbox uid must search it
exec > >(tee "$OUT") 2>&1
echo "# interpd issue 22 benchmark (calls), $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
echo "# $INTERPD, commit $(git -C "$BENCH_ROOT" rev-parse --short HEAD 2>/dev/null)$(git -C "$BENCH_ROOT" diff --quiet HEAD 2>/dev/null || echo ' (dirty tree)')"
echo "# nproc $(nproc); $(lscpu | awk -F: '/Model name/ {gsub(/^ +/, "", $2); print $2}'); kernel $(uname -r); $(free -g | awk '/Mem:/ {print $2 " GiB RAM"}')"
echo "# load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
SERVER_NAME=warm start_server --exec-queue 64 \
    --policy.standard.tenant-running 100% --sandbox-uid 304000 \
    --exec-mode warm
# A warm server answers cold until its zygotes are ready: wait for them.
wait_modes "interpd warm=$PORT:$KEY"
PERF_PID=
if [ -n "$PERF" ]; then
    perf record -g -F 999 -o "$PERF" -p "$SERVER_PID" 2>"$WORK/perf.log" &
    PERF_PID=$!
fi
"$PY" -B "$BENCH_ROOT/bench/calls.py" "$ROUNDS" "$N" "$PORT" "$KEY" \
    "$SERVER_PID"
if [ -n "$PERF_PID" ]; then
    kill -INT "$PERF_PID"
    wait "$PERF_PID" || true
    echo "# perf record of the server (warm-up included): $PERF"
fi
echo "# load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
