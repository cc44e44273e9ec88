#!/usr/bin/env bash
# The quant kernels on AArch64, from an x86-64 machine: builds the library, test_quant and test_gemm with
# Debian's cross compiler (cmake/aarch64-linux-gnu.cmake, LARES_MINIMAL_DEPS: no jansson or pcre2
# for the target) and runs test_quant under qemu-user:
#   1. qemu's "max" CPU (has dotprod), --isa neon: NEON kernels with SDOT;
#   2. the same CPU, --isa neon-nodot: the plain NEON kernels;
#   3. the same CPU, --isa neon-i8mm: the family whose prompt GEMM uses SMMLA (i8mm);
#   4. a Cortex-A72 (no dotprod, no i8mm), every family: dispatch must pick plain NEON, and a stray
#      SDOT or SMMLA in the plain kernels would stop the run with SIGILL.
# test_gemm runs on "max" for every family with a packed GEMM (dotprod and i8mm) and must find
# nothing to test on the Cortex-A72 (77); test_rows (the few-row product of every family, SDOT's walk
# against the plain one, ops_matmul's groups of it) runs on both: the plain walk on the Cortex-A72.
# It also checks the objects: SDOT/UDOT may appear only in functions named *dotprod*, since every
# *_neon.c file is compiled with +dotprod, and SMMLA only in functions named *i8mm*; and that clang
# (Apple's and Android's compiler) compiles the AArch64 kernel files without a warning.
#
# Usage: tests/cross/run_aarch64.sh [build-dir]   (default: build-aarch64 in the source tree)
# Exit status 77 (skip) when the cross compiler, its libc or qemu-aarch64 is missing.
set -euo pipefail
src=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$src/build-aarch64}
sysroot=${LARES_CROSS_SYSROOT:-/usr/aarch64-linux-gnu}

skip() {
  echo "quant_aarch64: skipped: $*"
  exit 77
}
command -v aarch64-linux-gnu-gcc >/dev/null || skip "aarch64-linux-gnu-gcc not found (apt install gcc-aarch64-linux-gnu)"
command -v qemu-aarch64 >/dev/null || skip "qemu-aarch64 not found (apt install qemu-user)"
[ -e "$sysroot/lib/ld-linux-aarch64.so.1" ] || skip "no aarch64 C library in $sysroot (apt install libc6-dev-arm64-cross)"

generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
if [ ! -f "$build/CMakeCache.txt" ]; then
  cmake -S "$src" -B "$build" "${generator[@]}" \
    -DCMAKE_TOOLCHAIN_FILE="$src/cmake/aarch64-linux-gnu.cmake" -DCMAKE_BUILD_TYPE=Release \
    -DLARES_MINIMAL_DEPS=ON -DLARES_WERROR=ON -DLARES_CROSS_SYSROOT="$sysroot" >/dev/null
fi
cmake --build "$build" --target test_quant test_gemm test_rows

status=0
# Apple's and Android's toolchains are clang: the AArch64 kernels must compile there too, warnings
# as errors, with each file's -march (not linked or run; the tests below run GCC's build)
if command -v clang >/dev/null; then
  for f in "$src"/src/quant/*_neon.c "$src"/src/quant/*_i8mm.c; do
    march=armv8.2-a+dotprod+fp16
    case "$f" in *_i8mm.c) march=$march+i8mm ;; esac
    if ! clang --target=aarch64-linux-gnu --sysroot="$sysroot" -isystem "$sysroot/include" \
      -march="$march" -O2 -std=c11 -Wall -Wextra -Wshadow -Wvla -Werror -D_DEFAULT_SOURCE \
      -DLARES_HAVE_ARM64=1 -DLARES_BUILD_LIBRARY -I"$src/src" -I"$src/include" \
      -c "$f" -o /dev/null; then
      echo "quant_aarch64: clang does not compile $(basename "$f") for aarch64"
      status=1
    fi
  done
fi
objdir="$build/CMakeFiles/lares.dir/src/quant"
if command -v aarch64-linux-gnu-objdump >/dev/null; then
  for o in "$objdir"/*_neon.c.o; do
    stray=$(aarch64-linux-gnu-objdump -d "$o" |
      awk '/^[0-9a-f]+ <.*>:$/ { fn = $2 } /\t(sdot|udot)\t/ && fn !~ /dotprod/ { print fn }' | sort -u)
    if [ -n "$stray" ]; then
      echo "quant_aarch64: SDOT/UDOT outside a dotprod kernel in $(basename "$o"): $stray"
      status=1
    fi
  done
  for o in "$objdir"/*.c.o; do
    stray=$(aarch64-linux-gnu-objdump -d "$o" |
      awk '/^[0-9a-f]+ <.*>:$/ { fn = $2 } /\t(smmla|ummla|usmmla)\t/ && fn !~ /i8mm/ { print fn }' | sort -u)
    if [ -n "$stray" ]; then
      echo "quant_aarch64: SMMLA outside an i8mm kernel in $(basename "$o"): $stray"
      status=1
    fi
  done
  n_mmla=$(aarch64-linux-gnu-objdump -d "$objdir/gemm_neon_i8mm.c.o" | grep -c $'\tsmmla\t' || true)
  if [ "$n_mmla" -eq 0 ]; then
    echo "quant_aarch64: no SMMLA in gemm_neon_i8mm.c.o"
    status=1
  fi
fi

run() { # cpu args...
  local cpu=$1
  shift
  echo "== qemu-aarch64 -cpu $cpu test_quant $*"
  if ! qemu-aarch64 -L "$sysroot" -cpu "$cpu" "$build/tests/test_quant" "$@"; then
    echo "quant_aarch64: test_quant failed on $cpu $*"
    status=1
  fi
}
run max --isa neon
run max --isa neon-nodot
run max --isa neon-i8mm
run cortex-a72
# the packed GEMM: by-lane SDOT on "max"; none on the Cortex-A72 (no dotprod: the test must skip, 77)
for cpu in max cortex-a72; do
  echo "== qemu-aarch64 -cpu $cpu test_gemm"
  rc=0
  qemu-aarch64 -L "$sysroot" -cpu "$cpu" "$build/tests/test_gemm" || rc=$?
  if [ "$cpu" = cortex-a72 ] && [ "$rc" -ne 77 ]; then
    echo "quant_aarch64: test_gemm on $cpu did not skip ($rc): a GEMM that needs dotprod was installed"
    status=1
  elif [ "$cpu" = max ] && [ "$rc" -ne 0 ]; then
    echo "quant_aarch64: test_gemm failed on $cpu ($rc)"
    status=1
  fi
done
# the few-row product: SDOT's walk and the plain one on "max", the plain one on the Cortex-A72
for cpu in max cortex-a72; do
  echo "== qemu-aarch64 -cpu $cpu test_rows"
  if ! qemu-aarch64 -L "$sysroot" -cpu "$cpu" "$build/tests/test_rows"; then
    echo "quant_aarch64: test_rows failed on $cpu"
    status=1
  fi
done
exit $status
