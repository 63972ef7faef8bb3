#!/usr/bin/env bash
# bench/blob_throughput.sh - issue 3: upload and download throughput of a
# 50 MiB file through the HTTP API, local disk vs GridFS (MongoDB from
# tests/support/mongo-server.sh), medians of N, in the same run, with the
# GridFS/local ratios.
#
# Usage: bench/blob_throughput.sh [N]   (default N=5)
source "$(dirname "$0")/lib.sh"
N=${1:-5}
bench_setup blob_throughput
MSTATE="$WORK/mongo"
"$BENCH_ROOT/tests/support/mongo-server.sh" start "$MSTATE" >&2
trap 'stop_server; "$BENCH_ROOT/tests/support/mongo-server.sh" stop "$MSTATE" >/dev/null 2>&1; bench_cleanup' EXIT
echo "# mongodb: $(cat "$MSTATE/kind") at $(cat "$MSTATE/uri")"
SRC="$WORK/src.bin"
head -c $((50 * 1024 * 1024)) /dev/urandom >"$SRC"
cat "$SRC" >/dev/null
BYTES=$(stat -c %s "$SRC")
mbps() { awk -v b="$BYTES" -v s="$1" 'BEGIN {printf "%.1f", b / 1e6 / s}'; }

# measure LABEL: N uploads then N downloads of the file; prints medians (s)
measure() {
    local up=() down=() i out id
    for i in $(seq 1 "$N"); do
        sync
        out=$(curl -sS -w '\n%{http_code} %{time_total}' -H "Authorization: Bearer $KEY" \
            -H "X-User-Id: bench" -H "Expect:" -X POST -T "$SRC" \
            "$BASE/v1/files?filename=big$i.bin")
        [ "$(tail -1 <<<"$out" | cut -d' ' -f1)" = 201 ] || die "$1 upload: $out"
        up+=("$(tail -1 <<<"$out" | cut -d' ' -f2)")
        id=$(head -1 <<<"$out" | $PY -c 'import json,sys; print(json.load(sys.stdin)["file_id"])')
        down+=("$(curl -sS -o /dev/null -w '%{time_total}' -H "Authorization: Bearer $KEY" \
            -H "X-User-Id: bench" "$BASE/v1/files/$id/content")")
        curl -sS -o /dev/null -X DELETE -H "Authorization: Bearer $KEY" -H "X-User-Id: bench" "$BASE/v1/files/$id"
    done
    echo "$(printf '%s\n' "${up[@]}" | median) $(printf '%s\n' "${down[@]}" | median)"
}

start_server --quota-files -1 --quota-bytes -1
read -r LU LD <<<"$(measure local)"
stop_server
rm -rf "$WORK/data"
start_server --quota-files -1 --quota-bytes -1 --mongo-uri "$(cat "$MSTATE/uri")bench_blobs" --blob-store gridfs
read -r GU GD <<<"$(measure gridfs)"
echo "blob_throughput: 50 MiB, median of $N"
echo "blob_throughput: local  upload $(mbps "$LU") MB/s  download $(mbps "$LD") MB/s"
echo "blob_throughput: gridfs upload $(mbps "$GU") MB/s  download $(mbps "$GD") MB/s"
echo "blob_throughput: ratio gridfs/local throughput: upload $(awk -v a="$LU" -v b="$GU" 'BEGIN{printf "%.2f", a/b}')  download $(awk -v a="$LD" -v b="$GD" 'BEGIN{printf "%.2f", a/b}')"
