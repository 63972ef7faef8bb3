#!/usr/bin/env bash
# bench/fork_probe/profile.sh - issue 24 experiment: profile back-to-back
# warm print(1) runs of one server (one keep-alive connection).
#
#   bench/fork_probe/profile.sh perf [N=300]    perf record -a -g over N runs;
#                                               prints the top self symbols
#   bench/fork_probe/profile.sh strace [N=3]    strace -f -tt -T of the whole
#                                               server over N runs (after 20
#                                               untraced ones); prints a
#                                               summary, keeps the log
#   bench/fork_probe/profile.sh tput [SECONDS=10] print(1) executions/s at 2
#                                               and 8 clients (exec_client.py),
#                                               with the client's own CPU
#   INTERPD=..., SERVER_OPTS=... as bench/cpu_per_run.sh.  Output files go to
#   $(dirname $INTERPD)/profile-*.
source "$(dirname "$0")/../lib.sh"

MODE=${1:-perf}
N=${2:-300}
OUTDIR=$(dirname "$INTERPD")
read -ra extra <<<"${SERVER_OPTS:-}"
bench_setup prof
chmod 711 "$WORK"
start_server --exec-mode warm --exec-queue 64 --warm-recycle-runs 0 \
    --policy.standard.tenant-running 100% --sandbox-uid 320000 "${extra[@]}"
wait_modes "interpd warm=$PORT:$KEY"
printf 'print(1)\n' >"$WORK/code.py"
client() {
    "$PY" -B "$BENCH_ROOT/bench/exec_client.py" latency 127.0.0.1 "$PORT" "$KEY" \
        prof "$1" 5 "$WORK/code.py"
}
case $MODE in
tput)
    client 20 >/dev/null
    for c in 2 8; do
        "$PY" - "$BENCH_ROOT" "$PORT" "$KEY" "$c" "$N" "$WORK/code.py" <<'PYEOF'
import os, sys, time
sys.path.insert(0, os.path.join(sys.argv[1], "bench"))
import exec_client as ec
port, key, clients, secs, code = sys.argv[2], sys.argv[3], int(sys.argv[4]), float(sys.argv[5]), sys.argv[6]
c0 = time.process_time()
el, ok, codes = ec.run_clients(clients, secs, ec.http_op("127.0.0.1", port, key, "prof", ec.body_of(code)))
cpu = (time.process_time() - c0) * 1000 / max(1, len(ok))
print(f"clients {clients}: {len(ok) / el:.1f}/s, outcomes {codes}, latency p50 {ec.pct(ok, 50):.1f} p90 {ec.pct(ok, 90):.1f} ms, client CPU {cpu:.2f} ms/request")
PYEOF
    done
    ;;
perf)
    client 20 >/dev/null
    perf record -a -g -o "$OUTDIR/profile-perf.data" -- bash -c "$(declare -f client); PY=$PY BENCH_ROOT=$BENCH_ROOT PORT=$PORT KEY=$KEY WORK=$WORK; client $N" 2>&1 | tail -3
    perf report -i "$OUTDIR/profile-perf.data" --no-children --sort symbol --stdio 2>/dev/null |
        grep -E '^ +[0-9]' | head -40
    perf report -i "$OUTDIR/profile-perf.data" --no-children --sort comm --stdio 2>/dev/null |
        grep -E '^ +[0-9]' | head -12
    ;;
strace)
    client 20 >/dev/null
    # the server and every process under it (its threads with -f)
    pids=("$SERVER_PID")
    todo=("$SERVER_PID")
    while [ ${#todo[@]} -gt 0 ]; do
        p=${todo[0]}
        todo=("${todo[@]:1}")
        for c in $(ps -o pid= --ppid "$p"); do
            pids+=("$c")
            todo+=("$c")
        done
    done
    args=()
    for p in "${pids[@]}"; do args+=(-p "$p"); done
    echo "# tracing ${pids[*]}"
    strace -f -tt -T -qq -o "$OUTDIR/profile-strace.log" "${args[@]}" &
    spid=$!
    "$PY" -c 'import time; time.sleep(1)'
    client "$N"
    kill -INT $spid
    wait $spid || true
    echo "# strace log: $OUTDIR/profile-strace.log ($(wc -l <"$OUTDIR/profile-strace.log") lines)"
    ;;
esac
