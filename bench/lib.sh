# bench/lib.sh - shared helpers for the benchmark scripts (sourced, not run).
#
# Every benchmark starts its own interpd with a throw-away data dir under
# $BENCH_TMP (default: build-bench/bench-tmp, i.e. the same disk as /work),
# and removes it on exit.

set -euo pipefail

BENCH_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
INTERPD=${INTERPD:-$BENCH_ROOT/build-bench/interpd}
PY=/usr/bin/python3          # Debian's python, never the pyenv shim
BENCH_TMP=${BENCH_TMP:-$BENCH_ROOT/build-bench/bench-tmp}

SERVER_PID=
SERVER_PIDS=()   # every server start_server started (bench_cleanup stops them)
PORT=
KEY=
WORK=

die() { echo "error: $*" >&2; exit 1; }

[ -x "$INTERPD" ] || die "$INTERPD not built; run: cmake -S . -B build-bench -DCMAKE_BUILD_TYPE=Release && cmake --build build-bench -j2 --target interpd"

# bench_setup NAME: make the per-run work dir and the cleanup trap.
bench_setup() {
    mkdir -p "$BENCH_TMP"
    WORK=$(mktemp -d "$BENCH_TMP/$1.XXXXXX")
    trap bench_cleanup EXIT
    trap 'exit 130' INT TERM
    echo "# work dir: $WORK (disk: $(df --output=source "$WORK" | tail -1), fs: $(df --output=fstype "$WORK" | tail -1))"
}

bench_cleanup() {
    local rc=$?
    stop_servers || true
    if [ -n "${WORK:-}" ] && [ -d "$WORK" ]; then
        local log
        for log in "$WORK"/server*.log; do
            [ -s "$log" ] || continue
            # Surface anything the server complained about.
            if grep -v "^.*config " "$log" | grep -qiE "error|warn|abort|assert|fatal"; then
                echo "# $(basename "$log") lines mentioning error/warn (first 20):"
                grep -v "^.*config " "$log" | grep -iE "error|warn|abort|assert|fatal" | head -20 | sed 's/^/#   /'
            fi
            if [ -n "${KEEP_LOGS:-}" ]; then
                cp "$log" "$BENCH_TMP/$(basename "$WORK").$(basename "$log")"
            fi
        done
        rm -rf "$WORK"
    fi
    exit $rc
}

# start_server [extra interpd options...]: start interpd on a free port,
# wait (blocking read on a fifo) for it to report the port, read the admin key.
# With SERVER_NAME=NAME set, its data dir is $WORK/data-NAME and its log
# $WORK/server-NAME.log, so that several servers can run side by side.
start_server() {
    local sfx=${SERVER_NAME:+-$SERVER_NAME}
    local fifo="$WORK/ready$sfx.fifo" data="$WORK/data$sfx"
    mkfifo "$fifo"
    "$INTERPD" serve --listen 127.0.0.1:0 --data-dir "$data" \
        --ready-fd 3 --log-level warn "$@" \
        3>"$fifo" 2>"$WORK/server$sfx.log" >/dev/null &
    SERVER_PID=$!
    SERVER_PIDS+=("$SERVER_PID")
    # Blocks until the server writes its port and closes fd 3 (or dies,
    # which also closes the write end).
    PORT=$(head -n1 <"$fifo" || true)
    rm -f "$fifo"
    if [ -z "$PORT" ]; then
        cat "$WORK/server$sfx.log" >&2
        die "server did not report a port"
    fi
    [ -s "$data/admin.key" ] || die "no admin.key in $data"
    KEY=$(tr -d '\n' <"$data/admin.key")
    BASE="http://127.0.0.1:$PORT"
    echo "# server pid $SERVER_PID, port $PORT, options: $*"
}

stop_server() {
    [ -n "${SERVER_PID:-}" ] || return 0
    if kill -0 "$SERVER_PID" 2>/dev/null; then
        kill -TERM "$SERVER_PID"
        local rc=0
        wait "$SERVER_PID" || rc=$?
        [ "$rc" = 0 ] || echo "# WARNING: server exited with status $rc on SIGTERM"
    else
        local rc=0
        wait "$SERVER_PID" 2>/dev/null || rc=$?
        echo "# WARNING: server had already exited (status $rc) before stop"
    fi
    local pid left=()
    for pid in "${SERVER_PIDS[@]}"; do
        [ "$pid" = "$SERVER_PID" ] || left+=("$pid")
    done
    SERVER_PIDS=("${left[@]}")
    SERVER_PID=
}

# stop_servers: stop_server for every server start_server started.
stop_servers() {
    while [ "${#SERVER_PIDS[@]}" -gt 0 ]; do
        SERVER_PID=${SERVER_PIDS[0]}
        stop_server
    done
}

# Field from /proc/PID/status in KiB (VmRSS, VmHWM, ...).
proc_kib() { awk -v f="$2:" '$1 == f {print $2}' "/proc/$1/status"; }

# median of the numbers on stdin (one per line)
median() { sort -g | awk '{a[NR]=$1} END {if (NR%2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}'; }

# wait_modes "interpd LABEL=PORT:KEY"...: wait until each server's
# /readyz names its execution mode as warm or cold (a warm server answers
# cold until its zygotes are ready), at most a minute each, and print it.
wait_modes() {
    local s port mode
    for s in "$@"; do
        port=${s#*=}
        port=${port%%:*}
        for _ in $(seq 600); do
            mode=$(curl -s "http://127.0.0.1:$port/readyz" |
                "$PY" -c 'import json,sys; print(json.load(sys.stdin).get("execution_mode", "cold"))' 2>/dev/null || true)
            case $mode in warm | cold) break ;; esac
            "$PY" -c 'import select; select.select([], [], [], 0.1)'
        done
        echo "# ${s%%=*}: execution_mode ${mode:-unknown}"
    done
}
