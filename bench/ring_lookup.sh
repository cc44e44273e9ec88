#!/usr/bin/env bash
# Prompt lookup through the memory-short emulated ring (issue 20): the
# four-device testbed of bench/ring_emulated.sh (each device a CPU quota, a
# memory limit below its share of the model, a disk read throttle, a link
# with limited rate plus latency), one ring of k rounds with streaming on,
# and a copy-heavy task: a model made by `lares synth --copy` (it continues a
# text by repeating what followed the current token before) after a prompt
# whose second half repeats its first. Plain decoding and `--lookup N` run
# alternately, caches dropped before each; the table gives ms per token of
# each run, drafts taken, and whether the ids were the same.
#
#   sudo bench/ring_lookup.sh [-m COPY_MODEL] [-n TOKENS] [-k 4] [-l 8] [-r 2] [-o RESULTS.md]
#        [--quota 0.5] [--mem 700M] [--disk 300M] [--rate 100mbit] [--delay 5]
#
# COPY_MODEL defaults to llama-7b Q4_K_M --copy, made on first use in
# $LARES_BENCH_DIR (/tmp/lares-bench). The issue's bar: lookup >= 1.5x the
# tokens/s of plain decoding with identical output.
set -uo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
LARES=${LARES:-$here/build/lares}
MODEL="" NTOK=24 K=4 LOOKUP=8 REPS=2 OUT=""
QUOTA=0.5 MEM=700M DISK=300M RATE=100mbit DELAY=5
. "$here/tests/cluster/testbed.sh"
while [ $# -gt 0 ]; do
  case $1 in
    -m) MODEL=$2; shift 2 ;;
    -n) NTOK=$2; shift 2 ;;
    -k) K=$2; shift 2 ;;
    -l) LOOKUP=$2; shift 2 ;;
    -r) REPS=$2; shift 2 ;;
    -o) OUT=$2; shift 2 ;;
    --quota|--mem|--disk|--rate|--delay) tb_home_opt "$1" "$2"; shift 2 ;;
    *) echo "usage: $0 [-m COPY_MODEL] [-n TOKENS] [-k K] [-l N] [-r REPS] [-o OUT] [--quota C] [--mem M] [--disk B/s] [--rate R] [--delay MS]" >&2; exit 2 ;;
  esac
done
command -v jq >/dev/null || { echo "needs jq" >&2; exit 1; }
[ -x "$LARES" ] || { echo "no lares binary at $LARES (set LARES)" >&2; exit 1; }
if [ -z "$MODEL" ]; then
  MODEL=$(tb_bench_model "$LARES" "$here" --copy) || exit 1
fi
MODEL=$(readlink -f "$MODEL")
TMP=$(mktemp -d "${TMPDIR:-/tmp}/ring-lookup.XXXXXX")
. "$here/tests/cluster/ring_lib.sh"
tb_check || exit 77
export TB_LARES=$LARES TB_DISK_PATH=$MODEL
tb_init || exit 1
tb_home_up || exit 1
L=$(tb_layers "$MODEL")
w=$((L / (4 * K)))
[ $((w * 4 * K)) -eq "$L" ] || { echo "k = $K does not divide $L layers over 4 devices" >&2; exit 2; }
echo "model $MODEL ($L layers), k = $K; 4 devices: $QUOTA cores, memory $MEM, disk $DISK/s, link $RATE + $DELAY ms; $NTOK tokens, --lookup $LOOKUP" >&2

export RING_MODEL=$MODEL RING_DEV_EXTRA=", \"link_delay_ms\": $DELAY"
declare -A ADDR=()
for i in 1 2 3; do
  RING_LISTEN="$(tb_ip $i):0" LARES=$(tb_launcher $i) ring_worker "w$i" -t 1 -q || exit 1
  ADDR[$i]=$WORKER_ADDR
done
ring_json "$TMP/ring.json" "\"heartbeat_ms\": 500, \"timeout_ms\": 60000, \"connect_timeout_ms\": 60000," \
  "$w" w1 "${ADDR[1]}" "$w" w2 "${ADDR[2]}" "$w" w3 "${ADDR[3]}" "$w"
# a copy-heavy task: the answer repeats spans of the prompt
P="The old lighthouse keeper walked down to the harbour every morning to count the boats that had come back in the night, and he wrote their names in a blue book. The old lighthouse keeper"
rows=() plain_ms=() lookup_ms=() same=yes
for r in $(seq 1 "$REPS"); do
  for mode in plain lookup; do
    extra=()
    [ "$mode" = lookup ] && extra=(--lookup "$LOOKUP")
    sync; echo 3 >/proc/sys/vm/drop_caches
    if ! "$(tb_launcher 0)" run -m "$MODEL" -p "$P" -n "$NTOK" --temp 0 -t 1 -c 256 "${extra[@]}" \
        --ring "$TMP/ring.json" --rebalance off --json >"$TMP/$mode.$r.json" 2>"$TMP/run.err"; then
      echo "$mode run $r failed: $(tail -1 "$TMP/run.err")" >&2
      ring_cleanup
      exit 1
    fi
    ms=$(jq '.timings.gen_ms / .timings.generated_tokens' "$TMP/$mode.$r.json")
    [ "$mode" = plain ] && plain_ms+=("$ms") || lookup_ms+=("$ms")
    rows+=("| $r | $mode | $(printf %.0f "$ms") | $(printf %.3f "$(echo "1000 / $ms" | bc -l)") | $(jq -r '"\(.timings.drafted_tokens) / \(.timings.accepted_tokens)"' "$TMP/$mode.$r.json") | $(jq -r '.ring.device | map("\(.name) \(.compute_ms | floor) ms (disk \(.disk_wait_ms | floor))") | join(", ")' "$TMP/$mode.$r.json") |")
    echo "run $r $mode: $ms ms/token" >&2
  done
  [ "$(jq -c .generated_ids "$TMP/plain.$r.json")" = "$(jq -c .generated_ids "$TMP/lookup.$r.json")" ] || same=no
done
ring_cleanup
. "$here/bench/lib.sh"
mp=$(printf '%s\n' "${plain_ms[@]}" | median)
ml=$(printf '%s\n' "${lookup_ms[@]}" | median)
{
  echo "| rep | decoding | ms/token | tok/s | drafted / accepted | compute per device, of which disk wait (whole run) |"
  echo "|---|---|---|---|---|---|"
  printf '%s\n' "${rows[@]}"
  echo
  echo "median ms/token: plain $(printf %.0f "$mp"), lookup $(printf %.0f "$ml"): $(printf %.2f "$(echo "$mp / $ml" | bc -l)")x; ids identical: $same"
  echo "text: $(jq -r .text "$TMP/lookup.1.json" | head -c 200)"
} | tee "${OUT:-/dev/null}"
rm -rf "$TMP"
