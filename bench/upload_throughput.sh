#!/usr/bin/env bash
# bench/upload_throughput.sh - issue 2, benchmark 1.
#
# Upload throughput of one 50 MiB file over loopback (raw body sent with
# sendfile by bench/upload_client.py; curl -T is measured too, as a
# diagnostic, since curl's own CPU is most of its time on 2 cores),
# median of N runs, as a ratio to `dd ... bs=1M conv=fsync` of the same
# source onto the same disk (median of N, interleaved with the uploads).
# Target: ratio >= 0.7.
#
# Usage: bench/upload_throughput.sh [N]    (default N=5)
source "$(dirname "$0")/lib.sh"

N=${1:-5}
SIZE_MIB=50
bench_setup upload_throughput

SRC="$WORK/src.bin"
head -c $((SIZE_MIB * 1024 * 1024)) /dev/urandom >"$SRC"
# Same page-cache state for both: the source is read once, so every run
# (dd and upload alike) reads it from the page cache.
cat "$SRC" >/dev/null

start_server --quota-files -1 --quota-bytes -1 --max-file-size 50M
BYTES=$(stat -c %s "$SRC")

dd_run() {
    local out="$WORK/dd.out" t0 t1
    rm -f "$out"; sync
    t0=$(date +%s%N)
    dd if="$SRC" of="$out" bs=1M conv=fsync status=none
    t1=$(date +%s%N)
    rm -f "$out"
    echo $(( t1 - t0 ))
}

upload_run() {
    local i=$1 out c0 c1
    sync
    c0=$(cpu_ticks)
    out=$($PY "$(dirname "$0")/upload_client.py" "$PORT" "$KEY" "$SRC" "big$i.bin") ||
        die "upload $i failed"
    c1=$(cpu_ticks)
    echo $(( c1 - c0 )) >"$WORK/cpu.$i"
    # Delete it again so every upload sees the same (empty) store.
    local id
    id=$(cut -d' ' -f2- <<<"$out" | $PY -c 'import json,sys; print(json.load(sys.stdin)["file_id"])')
    curl -sS -o /dev/null -X DELETE -H "Authorization: Bearer $KEY" -H "X-User-Id: bench" "$BASE/v1/files/$id"
    awk -v s="$(cut -d' ' -f1 <<<"$out")" 'BEGIN {printf "%d\n", s * 1e9}'
}

# The same upload with curl (diagnostic: curl's own cost is most of it).
curl_run() {
    local i=$1 out
    sync
    out=$(curl -sS -o "$WORK/curl.$i.json" -w '%{http_code} %{time_total}' \
        -H "Authorization: Bearer $KEY" -H "X-User-Id: bench" -H "Expect:" \
        -H "Content-Type: application/octet-stream" -X POST -T "$SRC" \
        "$BASE/v1/files?filename=curl$i.bin")
    [ "${out%% *}" = 201 ] || die "curl upload $i answered $out"
    local id
    id=$($PY -c 'import json,sys; print(json.load(open(sys.argv[1]))["file_id"])' "$WORK/curl.$i.json")
    curl -sS -o /dev/null -X DELETE -H "Authorization: Bearer $KEY" -H "X-User-Id: bench" "$BASE/v1/files/$id"
    awk -v s="${out#* }" 'BEGIN {printf "%d\n", s * 1e9}'
}

# server user+system CPU time so far, in clock ticks
cpu_ticks() { awk '{print $14 + $15}' "/proc/$SERVER_PID/stat"; }
TCK=$(getconf CLK_TCK)

mbps() { awk -v b="$BYTES" -v ns="$1" 'BEGIN {printf "%.1f", b / 1e6 / (ns / 1e9)}'; }

DD_NS=(); UP_NS=(); CURL_NS=()
# Warm-up (not counted): first write of the blob dir, first connection, ...
upload_run 0 >/dev/null
for i in $(seq 1 "$N"); do
    d=$(dd_run);        DD_NS+=("$d")
    u=$(upload_run "$i"); UP_NS+=("$u")
    printf '# run %d: dd %6s MB/s (%.3f s)   upload %6s MB/s (%.3f s, server CPU %.2f s)\n' "$i" \
        "$(mbps "$d")" "$(awk -v n="$d" 'BEGIN{print n/1e9}')" \
        "$(mbps "$u")" "$(awk -v n="$u" 'BEGIN{print n/1e9}')" \
        "$(awk -v c="$(cat "$WORK/cpu.$i")" -v t="$TCK" 'BEGIN{print c/t}')"
done

# curl -T (diagnostic), in a loop of its own so the dd/upload pairs above
# each start from the same state.
for i in $(seq 1 "$N"); do
    c=$(curl_run "$i"); CURL_NS+=("$c")
done

# Loopback floor (diagnostic, not part of the ratio): the same curl command
# against a do-nothing HTTP sink that discards the body.
SINK_FIFO="$WORK/sink.fifo"; mkfifo "$SINK_FIFO"
$PY "$(dirname "$0")/http_sink.py" 3 3>"$SINK_FIFO" &
SINK_PID=$!
SINK_PORT=$(head -n1 <"$SINK_FIFO")
SINK_NS=()
for i in $(seq 1 "$N"); do
    t0=$(date +%s%N)
    curl -sS -o /dev/null -X POST -T "$SRC" -H "Expect:" -H "Content-Type: application/octet-stream" \
        "http://127.0.0.1:$SINK_PORT/v1/files?filename=x.bin"
    t1=$(date +%s%N)
    SINK_NS+=($(( t1 - t0 )))
done
kill "$SINK_PID"; wait "$SINK_PID" 2>/dev/null || true
SINK_MED=$(printf '%s\n' "${SINK_NS[@]}" | median)
CPU_MED=$(for i in $(seq 1 "$N"); do cat "$WORK/cpu.$i"; done | median)

DD_MED=$(printf '%s\n' "${DD_NS[@]}" | median)
UP_MED=$(printf '%s\n' "${UP_NS[@]}" | median)
DD_MBPS=$(mbps "$DD_MED"); UP_MBPS=$(mbps "$UP_MED")
RATIO=$(awk -v d="$DD_MED" -v u="$UP_MED" 'BEGIN {printf "%.2f", d / u}')
MET=$(awk -v r="$RATIO" 'BEGIN {print (r >= 0.7) ? "met" : "NOT met"}')

echo "upload_throughput: size=${SIZE_MIB}MiB runs=$N"
echo "upload_throughput: dd (conv=fsync) median ${DD_MBPS} MB/s"
echo "upload_throughput: upload median ${UP_MBPS} MB/s"
echo "upload_throughput: dd min/max $(mbps "$(printf '%s\n' "${DD_NS[@]}" | sort -g | tail -1)")/$(mbps "$(printf '%s\n' "${DD_NS[@]}" | sort -g | head -1)") MB/s; upload min/max $(mbps "$(printf '%s\n' "${UP_NS[@]}" | sort -g | tail -1)")/$(mbps "$(printf '%s\n' "${UP_NS[@]}" | sort -g | head -1)") MB/s"
echo "upload_throughput: diagnostic: curl -T upload median $(mbps "$(printf '%s\n' "${CURL_NS[@]}" | median)") MB/s"
echo "upload_throughput: diagnostic: curl -> null sink (loopback floor) median $(mbps "$SINK_MED") MB/s; server CPU per upload median $(awk -v c="$CPU_MED" -v t="$TCK" 'BEGIN{print c/t}') s"
echo "upload_throughput: ratio upload/dd ${RATIO} (target >= 0.7: $MET)"
