#!/usr/bin/env bash
# Build FerretDB v1.24.2 (a MongoDB wire-protocol server) from the Go module
# proxy, once, into a cache directory, and print the binary's path.
#
#   tests/support/install-ferretdb.sh            # prints /path/to/ferretdb
#
# Why not `go install ...@v1.24.2`: the proxy refuses the module's version
# list (403), which `go install` reads for its deprecation check; and the
# module's build/version/version.txt is empty, so a plain build panics at
# start.  We download the exact version, write version.txt, and build with
# FerretDB as the main module.
set -euo pipefail

version=v1.24.2
cache="${IPD_TOOLS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/interpd}"
bin="$cache/ferretdb-$version"
if [ -x "$bin" ]; then
  echo "$bin"
  exit 0
fi

# FerretDB 1.24 needs Go 1.24; any Go from 1.21 on fetches that toolchain
# itself through the module proxy (GOTOOLCHAIN=auto).  Debian 12's own
# golang-go is 1.19, too old: prefer the official install in /usr/local/go.
if [ -z "${GO:-}" ]; then
  for g in /usr/local/go/bin/go "$(command -v go || true)"; do
    if [ -n "$g" ] && [ -x "$g" ]; then GO=$g; break; fi
  done
fi
if [ -z "${GO:-}" ]; then
  echo "install-ferretdb: no Go toolchain: install Go >= 1.21 (https://go.dev/dl/ into /usr/local/go," >&2
  echo "  or Debian's bookworm-backports golang-1.21+), or set MONGODB_URI to a MongoDB server" >&2
  exit 1
fi
minor=$("$GO" env GOVERSION | sed -n 's/^go1\.\([0-9]*\).*/\1/p')
if [ -z "$minor" ] || [ "$minor" -lt 21 ]; then
  echo "install-ferretdb: $GO is $("$GO" env GOVERSION); need Go >= 1.21 (or set MONGODB_URI)" >&2
  exit 1
fi
export GOTOOLCHAIN=auto

mkdir -p "$cache"
work=$(mktemp -d)
trap 'chmod -R u+w "$work" 2>/dev/null; rm -rf "$work"' EXIT
export GOFLAGS="-mod=mod -buildvcs=false"
echo "install-ferretdb: downloading FerretDB $version" >&2
json=$(cd "$work" && "$GO" mod download -json "github.com/FerretDB/FerretDB@$version")
dir=$(printf '%s\n' "$json" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
if [ -z "$dir" ] || [ ! -d "$dir" ]; then
  echo "install-ferretdb: go mod download gave no module directory:" >&2
  printf '%s\n' "$json" >&2
  exit 1
fi
cp -r "$dir" "$work/src"
chmod -R u+w "$work/src"
echo "$version" > "$work/src/build/version/version.txt"
echo "install-ferretdb: building (a few minutes the first time)" >&2
(cd "$work/src" && "$GO" build -o "$bin.tmp" ./cmd/ferretdb)
mv "$bin.tmp" "$bin"
"$bin" --version >&2
echo "$bin"
