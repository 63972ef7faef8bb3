#!/usr/bin/env bash
# bench/filetype_rss.sh - issue 20, item 11: what more detections at once
# cost the server's RSS (the step bench/soak.sh saw).
#
# Starts interpd (cold executions: no zygotes; URL ingest of loopback
# allowed) and, for P = 1 2 3 4 6 8 12 16, three rounds of P raw uploads and
# P URL ingests of the same 1 MiB text file at once (uploads detect on the
# HTTP threads, ingests on the fetch threads, so up to 2 + 4 detections run
# together), then prints VmRSS, RssAnon, RssFile and the mappings of
# libmagic's compiled database (magic.mgc) with their RSS.
#
# Usage: bench/filetype_rss.sh    (INTERPD=path/to/interpd picks the build)
source "$(dirname "$0")/lib.sh"

bench_setup filetype_rss
chmod 711 "$WORK"
"$PY" -c "
import random; r = random.Random(1)
s = ''.join(r.choice('abcdefgh,\n') for _ in range(256)) * 4096
open('$WORK/t.txt', 'w').write(s[:1 << 20])"
# The file server for the ingests: port on a fifo, as start_server does.
mkfifo "$WORK/http.fifo"
"$PY" -c "
import functools, http.server, os, sys
h = functools.partial(http.server.SimpleHTTPRequestHandler, directory='$WORK')
h.func.log_message = lambda *a: None
s = http.server.ThreadingHTTPServer(('127.0.0.1', 0), h)
with open('$WORK/http.fifo', 'w') as f: f.write('%d\n' % s.server_address[1])
s.serve_forever()" &
HTTP_PID=$!
HTTP_PORT=$(head -n1 <"$WORK/http.fifo")
trap 'kill $HTTP_PID 2>/dev/null; bench_cleanup' EXIT
start_server --exec-mode cold --sandbox-uid 320000 --fetch-allow 127.0.0.1/32 \
    --quota-files -1 --quota-bytes -1 "$@"

state() {
    "$PY" - "$SERVER_PID" <<'PY'
import re, sys
pid = sys.argv[1]
st = {l.split(':')[0]: int(l.split()[1]) for l in open(f'/proc/{pid}/status')
      if l.startswith(('VmRSS', 'RssAnon', 'RssFile'))}
maps = rss = 0
cur = False
for l in open(f'/proc/{pid}/smaps'):
    if re.match(r'^[0-9a-f]+-', l):
        cur = l.rstrip().endswith('.mgc')
        maps += cur
    elif cur and l.startswith('Rss:'):
        rss += int(l.split()[1])
print(f"VmRSS {st['VmRSS'] / 1024:5.1f} MiB (anon {st['RssAnon'] / 1024:5.1f}, "
      f"file {st['RssFile'] / 1024:5.1f}); magic.mgc mappings {maps}, "
      f"their RSS {rss / 1024:4.1f} MiB")
PY
}
echo "filetype_rss: start:  $(state)"
for P in 1 2 3 4 6 8 12 16; do
    for _ in 1 2 3; do
        pids=()
        for i in $(seq "$P"); do
            curl -s -o /dev/null -H "Authorization: Bearer $KEY" -H "X-User-Id: u$i" \
                --data-binary @"$WORK/t.txt" "$BASE/v1/files?filename=t.txt" &
            pids+=($!)
            curl -s -o /dev/null -H "Authorization: Bearer $KEY" -H "X-User-Id: v$i" \
                -H "Content-Type: application/json" \
                -d "{\"url\": \"http://127.0.0.1:$HTTP_PORT/t.txt\"}" "$BASE/v1/files" &
            pids+=($!)
        done
        wait "${pids[@]}"
    done
    printf 'filetype_rss: P=%-3s  %s\n' "$P" "$(state)"
done
