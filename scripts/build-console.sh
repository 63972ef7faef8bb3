#!/usr/bin/env bash
# Bundle the web console's script (clients/console/src/main.js and
# CodeMirror 6) with esbuild into clients/console/dist/console.js, which is
# committed and compiled into the binary with the page and styles of src/
# (CMakeLists.txt, IPD_CONSOLE_C).  The page then needs no network beyond
# interpd.
#   scripts/build-console.sh          rebuild dist/ (after editing src/)
#   scripts/build-console.sh --check  rebuild into a temporary folder and
#                                     fail when dist/ differs (ctest
#                                     unit/console_bundle)
# Needs the pinned npm packages: npm ci --prefix clients/console
# (scripts/install-deps.sh runs it).
set -euo pipefail
dir="$(cd "$(dirname "$0")/../clients/console" && pwd)"
esbuild="$dir/node_modules/.bin/esbuild"
if [ ! -x "$esbuild" ]; then
  echo "build-console: $esbuild is missing: run scripts/install-deps.sh" >&2
  exit 1
fi
out="$dir/dist"
if [ "${1:-}" = "--check" ]; then
  out="$(mktemp -d)"
  trap 'rm -rf "$out"' EXIT
fi
mkdir -p "$out"
"$esbuild" "$dir/src/main.js" --bundle --minify --format=iife \
  --target=chrome100,firefox100,safari15 --legal-comments=eof \
  --log-level=warning --outfile="$out/console.js"
if [ "${1:-}" = "--check" ]; then
  if ! diff -r -q "$dir/dist" "$out"; then
    echo "build-console: clients/console/dist is stale: run scripts/build-console.sh and commit dist/" >&2
    exit 1
  fi
  echo "build-console: dist/console.js matches src/"
fi
