#!/usr/bin/env bash
# `make test`: builds and runs every test twice, optimised (gcc) and with
# AddressSanitizer + UndefinedBehaviorSanitizer (clang, plus the fuzz targets and
# a short fuzz run). Warnings are errors. The last line counts both runs.
set -uo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"
JOBS=${JOBS:-$(nproc)}
export CTEST_OUTPUT_ON_FAILURE=1
summary=()
status=0

run_suite() { # name builddir cmake-args...
  local name=$1 dir=$2
  shift 2
  echo "== lares tests: $name build ($dir)"
  if ! cmake -S . -B "$dir" -G Ninja -DLARES_WERROR=ON "$@" >"$dir.configure.log" 2>&1; then
    cat "$dir.configure.log"
    summary+=("$name: configure failed")
    status=1
    return
  fi
  if ! cmake --build "$dir" -j "$JOBS"; then
    summary+=("$name: build failed")
    status=1
    return
  fi
  local log="$dir/ctest.log"
  (cd "$dir" && ctest -j "$JOBS" --timeout 900) 2>&1 | tee "$log"
  local rc=${PIPESTATUS[0]}
  local line
  line=$(grep -E "tests passed, [0-9]+ tests? failed out of [0-9]+" "$log" | tail -1)
  summary+=("$name: ${line:-no result}")
  [ "$rc" -eq 0 ] || status=1
}

mkdir -p build build-asan
run_suite optimised build -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_COMPILER=gcc
run_suite asan+ubsan build-asan -DCMAKE_BUILD_TYPE=Debug -DLARES_SANITIZE=ON \
  -DLARES_FUZZ=ON -DCMAKE_C_COMPILER=clang

echo
for s in "${summary[@]}"; do echo "lares tests: $s"; done
exit $status
