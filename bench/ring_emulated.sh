#!/usr/bin/env bash
# Piped ring against plain pipeline on the emulated 4-device home cluster
# (issue 6): four devices (the head and three workers), each in its own
# network namespace and cgroups (tests/cluster/testbed.sh) with a CPU quota,
# a memory limit below its share of the model, a disk read throttle and a
# link with limited bandwidth plus latency. The same devices run the model
# with k = 1 (plain pipeline: one window of L/4 layers each) and with
# k = 2, 4 (piped ring: windows of L/8, L/16 layers, each device prefetching
# its next window while the others compute), each with the executor's
# streaming on ("prefetch on": read ahead within the memory budget, release
# after use) and off (--no-stream: plain mmap, the kernel evicts and faults
# pages back in blindly). Caches are dropped before every run. With
# streaming, the table also gives issue 18's bound for the head (the device
# with the most to read: its layers, the embedding and the output): the bytes
# it streams a token at its disk's rate, plus its compute a token without the
# waits, plus 4k hops of the link's delay; and the measured time over it.
#
#   sudo bench/ring_emulated.sh [-m MODEL] [-n TOKENS] [-k "1 2 4"] [-o RESULTS.md]
#        [-c CTX] [--stream "on off"]
#        [--quota 0.5] [--mem 700M] [--disk 300M] [--rate 100mbit] [--delay 5]
#
# -c sets the run's context (default 256): every device's KV cache is made
# for it, and a worker's weight budget counts the positions in use (issue 20).
# --stream "on" leaves out the runs with streaming off.
#
# MODEL defaults to llama-7b Q4_K_M (3.8 GiB, lares synth on first use in
# $LARES_BENCH_DIR, /tmp/lares-bench). The issue's bar: k >= 2 with prefetch
# at least 1.5x faster than k = 1.
set -uo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
LARES=${LARES:-$here/build/lares}
MODEL=""
NTOK=8
CTX=256
STREAMS="on off"
KS="1 2 4"
OUT=""
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
    -k) KS=$2; shift 2 ;;
    -c) CTX=$2; shift 2 ;;
    --stream) STREAMS=$2; shift 2 ;;
    -o) OUT=$2; shift 2 ;;
    --quota|--mem|--disk|--rate|--delay) tb_home_opt "$1" "$2"; shift 2 ;;
    *) echo "usage: $0 [-m MODEL] [-n TOKENS] [-k \"1 2 4\"] [-o OUT] [-c CTX] [--stream \"on off\"] [--quota C] [--mem M] [--disk B/s] [--rate R] [--delay MS]" >&2; exit 2 ;;
  esac
done
command -v jq >/dev/null || { echo "needs jq" >&2; exit 1; }
[ -x "$LARES" ] || { echo "no lares binary at $LARES (set LARES)" >&2; exit 1; }
if [ -z "$MODEL" ]; then
  MODEL=$(tb_bench_model "$LARES" "$here") || exit 1
fi
MODEL=$(readlink -f "$MODEL")
TMP=$(mktemp -d "${TMPDIR:-/tmp}/ring-emulated.XXXXXX")
. "$here/tests/cluster/ring_lib.sh"
tb_check || exit 77
export TB_LARES=$LARES TB_DISK_PATH=$MODEL
tb_init || exit 1
tb_home_up || exit 1
cold() { sync; echo 3 >/proc/sys/vm/drop_caches; }

L=$(tb_layers "$MODEL")
[ -n "$L" ] || { echo "cannot read the layer count of $MODEL" >&2; exit 1; }
echo "model $MODEL ($L layers, context $CTX); 4 devices: $QUOTA cores, memory $MEM, disk $DISK/s, link $RATE + $DELAY ms each; $NTOK tokens" >&2

export RING_MODEL=$MODEL RING_DEV_EXTRA=", \"link_delay_ms\": $DELAY"
rows=()
for stream in $STREAMS; do
  flags=()
  [ "$stream" = off ] && flags=(--no-stream)
  declare -A ADDR=()
  for i in 1 2 3; do
    RING_LISTEN="$(tb_ip $i):0" LARES=$(tb_launcher $i) ring_worker "w$i-$stream" -t 1 -q "${flags[@]}" || exit 1
    ADDR[$i]=$WORKER_ADDR
  done
  for k in $KS; do
    w=$((L / (4 * k)))
    [ $((w * 4 * k)) -eq "$L" ] || { echo "k = $k does not divide $L layers over 4 devices; skipped" >&2; continue; }
    ring_json "$TMP/ring.json" "\"heartbeat_ms\": 500, \"timeout_ms\": 60000, \"connect_timeout_ms\": 60000," \
      "$w" "w1-$stream" "${ADDR[1]}" "$w" "w2-$stream" "${ADDR[2]}" "$w" "w3-$stream" "${ADDR[3]}" "$w"
    headflags=()
    [ "$stream" = off ] && headflags=(--mem-budget 64T) # plain mmap on the head as well
    cold
    if ! "$(tb_launcher 0)" run -m "$MODEL" -p "Once upon a time" -n "$NTOK" --temp 0 -t 1 -c "$CTX" \
        "${headflags[@]}" --ring "$TMP/ring.json" --json >"$TMP/run.json" 2>"$TMP/run.err"; then
      rows+=("| $k | $w | $stream | failed: $(tail -1 "$TMP/run.err") | | | | |")
      continue
    fi
    ms=$(jq '.timings.gen_ms / (.timings.generated_tokens - 1)' "$TMP/run.json")
    faults=$(jq '[.ring.device[].major_faults] | add' "$TMP/run.json")
    toks=$(jq '.timings.generated_tokens' "$TMP/run.json")
    against="- (plain mmap: nothing streamed)"
    if [ "$stream" = on ]; then
      # issue 18's bound for the head (the device that reads the most: its
      # layers plus the embedding and output): the bytes it re-reads a token
      # at its disk's rate, plus its compute a token without the waits, plus
      # 4k hops of at least the link's delay
      bound=$(jq --argjson rate "$(numfmt --from=iec "$DISK")" --argjson k "$k" --argjson delay "$DELAY" \
        '(.memory.stream_bytes / $rate * 1000) + ((.ring.device[0].compute_ms - .ring.device[0].disk_wait_ms)
          / .timings.generated_tokens) + 4 * $k * $delay' "$TMP/run.json")
      head_mib=$(jq '.memory.stream_bytes / 1048576 | floor' "$TMP/run.json")
      against="$head_mib MiB, $(printf %.0f "$bound") ms, $(printf %.2f "$(echo "$ms / $bound" | bc -l)")x"
    fi
    rows+=("| $k | $w | $stream | $(printf %.0f "$ms") | $(printf %.3f "$(echo "1000 / $ms" | bc -l)") | $faults | $against | $(jq -r '.ring.device | map("\(.name) \(.compute_ms | floor) ms (\(.disk_wait_ms | floor) waiting)") | join(", ")' "$TMP/run.json") |")
    echo "k=$k stream=$stream: $ms ms/token ($toks tokens)" >&2
  done
  ring_cleanup
done
{
  echo "| k | layers per window | prefetch (streaming) | ms/token | tok/s | major faults (all devices) | head: streamed a token, bound, measured / bound | compute per device, disk waits included (whole run) |"
  echo "|---|---|---|---|---|---|---|---|"
  printf '%s\n' "${rows[@]}"
} | tee "${OUT:-/dev/null}"
