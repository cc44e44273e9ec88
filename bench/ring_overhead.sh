#!/usr/bin/env bash
# What a ring costs on loopback, for a model that fits everywhere (issue 6):
# generation through rings of 2, 3 and 4 workers (plus the head, layers split
# evenly, k = 1) against the same model on one device, alternating runs, each
# figure a median. The overhead per hop beyond the compute is
#
#   (ring ms/token - one device ms/token) / hops per token
#
# where hops per token = workers + 1 (head -> w1 -> ... -> wN -> head), shown
# as a share of one device's ms/token (the issue asks for under 10 %), and,
# from the head's own figures, (time waiting for the ring - the workers'
# compute) / hops. The devices share the machine's cores, but only one
# computes at a time (one token is a sequence), so compute adds up to about
# one device's.
#
#   bench/ring_overhead.sh [-m MODEL] [-n TOKENS] [-t THREADS] [-r REPEATS] [-w "2 3 4"]
#
# MODEL defaults to llama-1b Q4_K_M, made with lares synth on first use in
# $LARES_BENCH_DIR (/tmp/lares-bench).
set -uo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
LARES=${LARES:-$here/build/lares}
MODEL=""
NTOK=64
THREADS=2
REPEATS=3
WORKERS="2 3 4"
while [ $# -gt 0 ]; do
  case $1 in
    -m) MODEL=$2; shift 2 ;;
    -n) NTOK=$2; shift 2 ;;
    -t) THREADS=$2; shift 2 ;;
    -r) REPEATS=$2; shift 2 ;;
    -w) WORKERS=$2; shift 2 ;;
    *) echo "usage: $0 [-m MODEL] [-n TOKENS] [-t THREADS] [-r REPEATS] [-w \"2 3 4\"]" >&2; exit 2 ;;
  esac
done
command -v jq >/dev/null || { echo "needs jq" >&2; exit 1; }
[ -x "$LARES" ] || { echo "no lares binary at $LARES (set LARES)" >&2; exit 1; }
BENCH=${LARES_BENCH_DIR:-/tmp/lares-bench}
mkdir -p "$BENCH"
if [ -z "$MODEL" ]; then
  MODEL=$BENCH/llama-1b-q4_k_m.gguf
  [ -f "$MODEL" ] || "$LARES" synth --preset llama-1b --type q4_k_m -o "$MODEL" \
    --vocab-from "$here/../shared/models/vocab/ggml-vocab-llama-spm.gguf" >&2 || exit 1
fi
TMP=$(mktemp -d "${TMPDIR:-/tmp}/ring-overhead.XXXXXX")
. "$here/tests/cluster/ring_lib.sh"
ring_trap
export RING_MODEL=$MODEL
PROMPT="Once upon a time"

. "$here/bench/lib.sh"
per_token() { jq '.timings.gen_ms / (.timings.generated_tokens - 1)' "$1"; }

echo "model $MODEL: $NTOK tokens, $THREADS threads per device, $REPEATS repeats" >&2
for w in $WORKERS; do
  for i in $(seq 1 "$w"); do
    [ -n "$(eval echo \${ADDR_$i:-})" ] && continue
    ring_worker "w$i" -t "$THREADS" -q || exit 1
    eval "ADDR_$i=$WORKER_ADDR"
  done
done

rows=()
for w in $WORKERS; do
  # "auto" windows: the even split over the head and w workers, k = 1
  {
    printf '{"windows": "auto", "devices": [{"name": "head", "key": "%s"}' "$TMP/head.key"
    for i in $(seq 1 "$w"); do
      printf ', {"name": "w%d", "address": "%s", "public_key": "%s", "model": "%s", "threads": %d}' \
        "$i" "$(eval echo \$ADDR_$i)" "$TMP/w$i.key.pub" "$MODEL" "$THREADS"
    done
    printf ']}\n'
  } >"$TMP/ring$w.json"
  single=() ring=() net=()
  for r in $(seq 1 "$REPEATS"); do
    "$LARES" run -m "$MODEL" -p "$PROMPT" -n "$NTOK" --temp 0 -t "$THREADS" --json >"$TMP/s.json" 2>/dev/null || exit 1
    single+=("$(per_token "$TMP/s.json")")
    "$LARES" run -m "$MODEL" -p "$PROMPT" -n "$NTOK" --temp 0 -t "$THREADS" --json --ring "$TMP/ring$w.json" \
      >"$TMP/r.json" 2>"$TMP/r.err" || { cat "$TMP/r.err" >&2; exit 1; }
    ring+=("$(per_token "$TMP/r.json")")
    net+=("$(jq '(.ring.wait_ms - .ring.remote_compute_ms) / .ring.hops' "$TMP/r.json")")
    [ "$(jq -c .generated_ids "$TMP/s.json")" = "$(jq -c .generated_ids "$TMP/r.json")" ] \
      || echo "warning: ring output differs from one device ($w workers)" >&2
  done
  s=$(printf '%s\n' "${single[@]}" | median)
  rr=$(printf '%s\n' "${ring[@]}" | median)
  nh=$(printf '%s\n' "${net[@]}" | median)
  hops=$((w + 1))
  per_hop=$(awk -v a="$rr" -v b="$s" -v h="$hops" 'BEGIN { printf "%.3f", (a - b) / h }')
  share=$(awk -v p="$per_hop" -v b="$s" 'BEGIN { printf "%.1f", 100 * p / b }')
  rows+=("| $w | $hops | $(printf %.2f "$s") | $(printf %.2f "$rr") | $per_hop | $share % | $(printf %.3f "$nh") |")
done
echo "| workers | hops/token | one device ms/token | ring ms/token | overhead per hop ms | per hop / one device | head-measured network+queue ms per hop |"
echo "|---|---|---|---|---|---|---|"
printf '%s\n' "${rows[@]}"
