#!/usr/bin/env bash
# Install what interpd needs to build, run and test, from Debian 12's
# packages.  Idempotent; uses sudo when not root.
set -euo pipefail

packages=(
  build-essential cmake pkg-config clang libclang-rt-14-dev
  libmicrohttpd-dev libjansson-dev libmagic-dev libmagic-mgc libsqlite3-dev
  libcurl4-openssl-dev libssl-dev libseccomp-dev libmongoc-dev libbson-dev
  python3 python3-venv python3-numpy python3-pandas python3-matplotlib
  python3-scipy python3-openpyxl python3-pil python3-yaml
  curl wrk
)

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ "${#missing[@]}" -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages present"
  exit 0
fi
echo "install-deps: installing ${missing[*]}"
$SUDO apt-get update -q
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
