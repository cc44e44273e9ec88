#!/usr/bin/env bash
# Installs the Debian packages lares needs to build and test, if any is missing.
# As root it runs apt-get itself (apt-get update first); otherwise it uses sudo
# when available, or prints the command to run and fails.
set -euo pipefail

PKGS=(
  build-essential cmake ninja-build pkg-config git curl ca-certificates jq
  libjansson-dev libpcre2-dev libzmq3-dev libsodium-dev libglpk-dev libmicrohttpd-dev
  libssl-dev liburing-dev
  clang libclang-rt-dev
  qemu-user gcc-aarch64-linux-gnu libc6-dev-arm64-cross
  python3
  chromium
)
# chromium: the headless browser of the ring page's and the web page's tests
# (tests/e2e/serve_ring_page.sh, tests/e2e/serve_web.sh)
# lares serve's test with the official openai npm client needs node and npm: Debian's
# packages, unless a node with npm is there already (NodeSource's nodejs carries its own
# npm and conflicts with Debian's npm package)
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  PKGS+=(nodejs npm)
fi

missing=()
for p in "${PKGS[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

echo "lares: installing missing Debian packages: ${missing[*]}" >&2
if [ "$(id -u)" -eq 0 ]; then
  SUDO=()
elif command -v sudo >/dev/null 2>&1; then
  SUDO=(sudo)
else
  echo "lares: not root and no sudo: run as root: apt-get update && apt-get install -y ${missing[*]}" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
"${SUDO[@]}" apt-get update -q
"${SUDO[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}"
