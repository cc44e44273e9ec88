#!/usr/bin/env bash
# Shipping weights to a worker without the model file (issue 19): the head on
# the testbed's bridge, one worker in its own network namespace behind a veth
# limited by tc tbf (both directions) to each RATE, a fresh weight cache each
# time. The worker's windows are WORKER_W layers of a llama-7b-shaped Q4_K_M
# model; the transfer time is the worker's own figure ("fetched X MiB ... in
# Y s"), compared with X / rate. A second run on the warm cache ships nothing.
#
#   sudo bench/ring_ship.sh [-m MODEL] [--rates "none 1gbit 100mbit"] [--worker-w 4] [--layers 6]
#
# MODEL defaults to llama-7b Q4_K_M cut to --layers layers (lares synth, in
# $LARES_BENCH_DIR, /tmp/lares-bench). Goal: within 1.2x of bytes / rate.
set -uo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
LARES=${LARES:-$here/build/lares}
MODEL=""
RATES="none 1gbit 100mbit"
WORKER_W=4
LAYERS=6
while [ $# -gt 0 ]; do
  case $1 in
    -m) MODEL=$2; shift 2 ;;
    --rates) RATES=$2; shift 2 ;;
    --worker-w) WORKER_W=$2; shift 2 ;;
    --layers) LAYERS=$2; shift 2 ;;
    *) echo "usage: $0 [-m MODEL] [--rates \"1gbit 100mbit\"] [--worker-w N] [--layers N]" >&2; exit 2 ;;
  esac
done
command -v jq >/dev/null || { echo "needs jq" >&2; exit 1; }
[ -x "$LARES" ] || { echo "no lares binary at $LARES (set LARES)" >&2; exit 1; }
BENCH=${LARES_BENCH_DIR:-/tmp/lares-bench}
mkdir -p "$BENCH"
if [ -z "$MODEL" ]; then
  MODEL=$BENCH/llama-7b-${LAYERS}l-q4_k_m.gguf
  [ -f "$MODEL" ] || "$LARES" synth --preset llama-7b --type q4_k_m --layers "$LAYERS" -o "$MODEL" \
    --vocab-from "$here/../shared/models/vocab/ggml-vocab-llama-spm.gguf" >&2 || exit 1
fi
MODEL=$(readlink -f "$MODEL")
TMP=$(mktemp -d "${TMPDIR:-/tmp}/ring-ship.XXXXXX")
. "$here/tests/cluster/ring_lib.sh"
. "$here/tests/cluster/testbed.sh"
tb_check || exit 77
export TB_LARES=$LARES
tb_init || exit 1
tb_head 2 0 0 || exit 1
n_layer=$("$LARES" info -m "$MODEL" --json 2>/dev/null | jq -r '.n_layer // .hparams.n_layer // empty')
[ -n "$n_layer" ] || n_layer=$LAYERS
HEAD_W=$((n_layer - WORKER_W))
echo "model $MODEL ($(stat -c %s "$MODEL") bytes, $n_layer layers); worker window $WORKER_W layers"
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg); CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-)"
i=0
for rate in $RATES; do
  i=$((i + 1))
  tb_device "$i" 2 0 0 0 || exit 1
  ns=${TB_ID}n$i
  bits=0
  if [ "$rate" != none ]; then # "none": the veth unlimited, the CPU's ceiling
    # tbf: the burst must hold a timer tick's worth of bytes at this rate
    bits=$(numfmt --from=si "$(echo "${rate%bit}" | tr a-z A-Z)")
    burst=$((bits / 8 / 100))
    [ "$burst" -lt 16384 ] && burst=16384
    tc qdisc add dev "${TB_ID}h$i" root tbf rate "$rate" burst "$burst" latency 50ms || exit 1
    ip netns exec "$ns" tc qdisc add dev "${TB_ID}p$i" root tbf rate "$rate" burst "$burst" latency 50ms || exit 1
  fi
  rm -rf "$TMP/cache$i"
  LARES=$(tb_launcher "$i") RING_LISTEN="$(tb_ip "$i"):9100" ring_worker "w$i" --cache "$TMP/cache$i" || exit 1
  ADDR=$WORKER_ADDR
  ring_key head
  printf '{"connect_timeout_ms": 60000, "timeout_ms": 10000, "devices": [\n {"name": "head", "key": "%s", "w": %d},\n {"name": "w%d", "address": "%s", "public_key": "%s", "w": %d}]}\n' \
    "$TMP/head.key" "$HEAD_W" "$i" "$ADDR" "$TMP/w$i.key.pub" "$WORKER_W" >"$TMP/ring$i.json"
  for run in cold warm; do
    "$(tb_launcher 0)" run -m "$MODEL" -p "Once upon a time" -n 2 --temp 0 --json --ring "$TMP/ring$i.json" \
      --rebalance off >"$TMP/run-$i-$run.json" 2>"$TMP/run-$i-$run.err" || { echo "run failed: $(tail -3 "$TMP/run-$i-$run.err")"; exit 1; }
    shipped=$(jq -r '.ring.device[1].shipped_bytes' "$TMP/run-$i-$run.json")
    line=$(grep "worker fetch: fetched" "$TMP/w$i.log" | tail -1)
    if [ "$run" = cold ]; then
      secs=$(echo "$line" | sed -n 's/.* in \([0-9.]*\) s .*/\1/p')
      if [ "$bits" -gt 0 ]; then
        ideal=$(echo "scale=3; $shipped * 8 / $bits" | bc)
        ratio=$(echo "scale=3; $secs / $ideal" | bc)
        echo "rate $rate: shipped $shipped bytes in $secs s; bytes / rate = $ideal s; ratio $ratio"
      else
        echo "rate $rate: shipped $shipped bytes in $secs s ($(echo "scale=1; $shipped * 8 / $secs / 1000000" | bc) Mbit/s)"
      fi
      echo "  worker: $line"
    else
      echo "rate $rate, second run on the warm cache: shipped $shipped bytes; first token after $(jq '.timings.load_ms + .timings.ttft_ms' "$TMP/run-$i-$run.json") ms"
    fi
  done
  ring_cleanup
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
