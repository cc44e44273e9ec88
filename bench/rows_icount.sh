#!/usr/bin/env bash
# Instructions an AArch64 product executes, counted under qemu-user (no ARM machine needed; says
# nothing about speed): per 256 elements per weight row per activation row, the few-row product
# against what took those rows before it (the type's dot at one row, its 4 x 4 row tiles at 2-8)
# and the packed GEMM (SDOT, SMMLA) at 8; then the same without SDOT (a Cortex-A72's family).
# docs/kernels.md, "The few-row product on AArch64".
#
# Usage: bench/rows_icount.sh [cross-build-dir]   (default: build/cross-aarch64, made by
#        tests/cross/run_aarch64.sh or `make test`)
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$src/build/cross-aarch64}
sysroot=${LARES_CROSS_SYSROOT:-/usr/aarch64-linux-gnu}
command -v aarch64-linux-gnu-gcc >/dev/null || { echo "rows_icount: needs aarch64-linux-gnu-gcc" >&2; exit 1; }
command -v qemu-aarch64 >/dev/null || { echo "rows_icount: needs qemu-aarch64 (qemu-user)" >&2; exit 1; }
[ -f "$build/liblares.a" ] || cmake --build "$build" --target lares
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
aarch64-linux-gnu-gcc -O2 -std=c11 -static -no-pie -D_DEFAULT_SOURCE -DLARES_HAVE_ARM64=1 \
  -I"$src/src" -I"$src/include" "$src/bench/rows_icount.c" "$build/liblares.a" -lm -lpthread \
  -o "$work/rows_icount"

count() { # args of rows_icount: instructions executed
  qemu-aarch64 -L "$sysroot" -cpu max -singlestep -d nochain,exec -D "$work/log" \
    "$work/rows_icount" "$@" >/dev/null
  grep -c '^Trace' "$work/log"
}
per() { # how type rows: the product's instructions per 256 elements, weight row and activation row
  local all setup
  all=$(count "$1" "$2" "$3")
  setup=$(count "$1" "$2" "$3" setup)
  awk -v a="$all" -v s="$setup" -v n="$3" 'BEGIN { printf "%.0f", (a - s) / (4 * n * 8) }'
}
table() { # suffix ("" or -nodot), with the GEMM at 8 rows or not (gemm / -)
  local suffix=$1 gemm=$2 t name id line n
  for t in "Q4_0 2" "Q8_0 8" "Q4_K 12" "Q5_K 13" "Q6_K 14" "IQ4_XS 23"; do
    read -r name id <<<"$t"
    line="$name | $(per "dots$suffix" "$id" 1) / $(per "rows$suffix" "$id" 1)"
    for n in 2 4 8; do
      line="$line | $(per "tiles$suffix" "$id" $n) / $(per "rows$suffix" "$id" $n)"
    done
    if [ "$gemm" = gemm ]; then
      line="$line | $(per gemm-sdot "$id" 8) / $(per gemm-i8mm "$id" 8)"
    fi
    echo "$line"
  done
}
echo "type | 1 row: dots / rows | 2 rows: tiles / rows | 4 rows | 8 rows | 8 rows, GEMM sdot / i8mm"
table "" gemm
echo "without SDOT: type | 1 row: dots / rows | 2 rows: tiles / rows | 4 rows | 8 rows"
table -nodot -
