#!/usr/bin/env bash
# Several requests at once through the emulated 4-device ring (issue 20): the
# head (lares serve --ring, device 0) and three workers, each in its own
# network namespace and cgroups (tests/cluster/testbed.sh: a CPU quota, a
# memory limit, a disk read throttle, a link of limited bandwidth plus
# latency), windows of about L/4 layers each (k = 1), or L/(4k) with -k K
# (k rounds a token; L must divide by 4k). bench/serve_parallel.py
# sends S streamed completions at once, each its own prompt and -n tokens,
# and takes the aggregate tokens/s after every stream's first token (the
# median of --reps): S = 1 (lares serve --ring, one request at a time)
# against S = 4 (lares serve --parallel 4 --ring), with the groups pipelined
# (the default: one group per device) and in one group (--ring-groups 1).
#
#   sudo bench/ring_parallel.sh [-m MODEL] [-n TOKENS] [--reps R] [--groups "0 1"] [-k K]
#        [--quota 0.5] [--mem 700M] [--disk 300M] [--rate 100mbit] [--delay 5]
#
# MODEL defaults to llama-7b Q4_K_M (3.8 GiB, tb_bench_model). The issue's bar:
# 4 requests at >= 3x the aggregate tokens/s of one.
set -uo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
LARES=${LARES:-$here/build/lares}
MODEL=""
NTOK=12
REPS=3
GROUPS_LIST="0 1"
K=1
QUOTA=0.5
MEM=700M
DISK=300M
RATE=100mbit
DELAY=5
. "$here/tests/cluster/testbed.sh"
while [ $# -gt 0 ]; do
  case $1 in
    -m) MODEL=$2; shift 2 ;;
    -n) NTOK=$2; shift 2 ;;
    --reps) REPS=$2; shift 2 ;;
    --groups) GROUPS_LIST=$2; shift 2 ;;
    -k) K=$2; shift 2 ;;
    --quota|--mem|--disk|--rate|--delay) tb_home_opt "$1" "$2"; shift 2 ;;
    *) echo "usage: $0 [-m MODEL] [-n TOKENS] [--reps R] [--groups \"0 1\"] [-k K] [--quota C] [--mem M] [--disk B/s] [--rate R] [--delay MS]" >&2; exit 2 ;;
  esac
done
command -v jq >/dev/null || { echo "needs jq" >&2; exit 1; }
[ -x "$LARES" ] || { echo "no lares binary at $LARES (set LARES)" >&2; exit 1; }
if [ -z "$MODEL" ]; then
  MODEL=$(tb_bench_model "$LARES" "$here") || exit 1
fi
MODEL=$(readlink -f "$MODEL")
TMP=$(mktemp -d "${TMPDIR:-/tmp}/ring-parallel.XXXXXX")
. "$here/tests/cluster/ring_lib.sh"
tb_check || exit 77
export TB_LARES=$LARES TB_DISK_PATH=$MODEL
tb_init || exit 1
tb_home_up || exit 1
L=$(tb_layers "$MODEL")
[ -n "$L" ] && [ "$L" -ge 4 ] || { echo "$MODEL: cannot read its layer count" >&2; exit 1; }
if [ "$K" -eq 1 ]; then
  # L / 4 layers a device, the remainder to the first workers (the head reads the embedding and output)
  w=$((L / 4))
  w1=$((w + (L % 4 >= 1))) w2=$((w + (L % 4 >= 2))) w3=$((w + (L % 4 >= 3)))
else
  w=$((L / (4 * K)))
  [ "$K" -ge 1 ] && [ $((w * 4 * K)) -eq "$L" ] || { echo "-k $K does not divide $L layers over 4 devices" >&2; exit 2; }
  w1=$w w2=$w w3=$w
fi
echo "model $MODEL ($L layers, k = $K: windows of head $w, workers $w1 $w2 $w3); 4 devices: $QUOTA cores, memory $MEM, disk $DISK/s, link $RATE + $DELAY ms each; $NTOK tokens a stream, $REPS reps" >&2
export RING_MODEL=$MODEL RING_DEV_EXTRA=", \"link_delay_ms\": $DELAY"
for i in 1 2 3; do
  RING_LISTEN="$(tb_ip $i):0" LARES=$(tb_launcher $i) ring_worker "w$i" -t 1 -q || exit 1
  eval "A$i=\$WORKER_ADDR"
done
ring_json "$TMP/ring.json" "\"heartbeat_ms\": 500, \"timeout_ms\": 60000, \"connect_timeout_ms\": 60000," \
  "$w" w1 "$A1" "$w1" w2 "$A2" "$w2" w3 "$A3" "$w3"
sync
echo 3 >/proc/sys/vm/drop_caches
bench() { # LABEL STREAMS EXTRA
  echo "$1: streams $2 ..." >&2
  python3 "$here/bench/serve_parallel.py" "$LARES" "$MODEL" --streams "$2" --tokens "$NTOK" \
    --reps "$REPS" --threads 1 --ctx 64 --no-ttft --launcher "$(tb_launcher 0)" \
    --extra "--ring $TMP/ring.json --rebalance off $3" >"$TMP/$1.json" || {
    echo "$1 failed" >&2
    return 1
  }
  cat "$TMP/$1.json" >&2
}
bench one 1 "" || exit 1
one=$(jq '.streams["1"].aggregate_tps' "$TMP/one.json")
rows=("| 1 | - | $one | $(jq -c '.streams["1"].runs' "$TMP/one.json") | 1.00 |")
for g in $GROUPS_LIST; do
  bench "four-g$g" 4 "--ring-groups $g" || continue
  t=$(jq '.streams["4"].aggregate_tps' "$TMP/four-g$g.json")
  rows+=("| 4 | ${g/#0/auto} | $t | $(jq -c '.streams["4"].runs' "$TMP/four-g$g.json") | $(echo "$t / $one" | bc -l | xargs printf %.2f) |")
done
{
  echo "| requests | groups in flight | aggregate tok/s (median) | runs | over one |"
  echo "|---|---|---|---|---|"
  printf '%s\n' "${rows[@]}"
}
