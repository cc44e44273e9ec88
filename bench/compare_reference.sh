#!/usr/bin/env bash
# Issue 3's benchmark: lares bench and the reference engine's llama-bench on the
# same synthesized llama-1b files (Q4_K_M, Q8_0, Q4_0), same threads, runs
# alternating, median of R runs each; prints a markdown table with the ratios
# and the memory bandwidth measured in the same session.
#
#   bench/compare_reference.sh [-r RUNS] [-t THREADS] [-p 128] [-n 32] [TYPE...]
#
# Env: LARES (default build/lares), LLAMA_BENCH (path to llama-bench; default
# /work/ref/llama.cpp/build/bin/llama-bench), BENCH_MODELS (default bench-models/),
# VOCAB (default ../shared/models/vocab/ggml-vocab-llama-spm.gguf), PRESET (llama-1b).
set -euo pipefail
cd "$(dirname "$0")/.."
LARES=${LARES:-build/lares}
LLAMA_BENCH=${LLAMA_BENCH:-/work/ref/llama.cpp/build/bin/llama-bench}
BENCH_MODELS=${BENCH_MODELS:-bench-models}
VOCAB=${VOCAB:-../shared/models/vocab/ggml-vocab-llama-spm.gguf}
PRESET=${PRESET:-llama-1b}
RUNS=5 THREADS=2 NP=128 NG=32
while getopts "r:t:p:n:" o; do
  case $o in r) RUNS=$OPTARG ;; t) THREADS=$OPTARG ;; p) NP=$OPTARG ;; n) NG=$OPTARG ;; *) exit 2 ;; esac
done
shift $((OPTIND - 1))
TYPES=("$@")
[ ${#TYPES[@]} -gt 0 ] || TYPES=(q4_k_m q8_0 q4_0)
command -v jq >/dev/null || { echo "needs jq" >&2; exit 1; }
[ -x "$LLAMA_BENCH" ] || { echo "reference engine not found at $LLAMA_BENCH (set LLAMA_BENCH)" >&2; exit 1; }
mkdir -p "$BENCH_MODELS"
ninja -C build bench_membw >/dev/null

median() { sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }

echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), load $(cut -d' ' -f1-3 /proc/loadavg)"
bw=$(build/bench/bench_membw --threads "$THREADS" --mib 1024 --reps 5 | jq .read_gb_s)
echo "memory read bandwidth ($THREADS threads): $bw GB/s"
echo
echo "| model | size | test | lares t/s | reference t/s | ratio | lares GB/s (tg) |"
echo "| --- | ---: | --- | ---: | ---: | ---: | ---: |"
for type in "${TYPES[@]}"; do
  f="$BENCH_MODELS/$PRESET-$type.gguf"
  [ -f "$f" ] || "$LARES" synth --preset "$PRESET" --type "$type" -o "$f" --vocab-from "$VOCAB" >&2
  bytes=$(stat -c %s "$f")
  : >"$BENCH_MODELS/.lp" ; : >"$BENCH_MODELS/.lg" ; : >"$BENCH_MODELS/.rp" ; : >"$BENCH_MODELS/.rg"
  for ((i = 0; i < RUNS; i++)); do
    "$LARES" bench -m "$f" -p "$NP" -n "$NG" -t "$THREADS" -r 1 --json >"$BENCH_MODELS/.l.json"
    jq '.tests[] | select(.test | startswith("pp")) | .tok_s_mean' "$BENCH_MODELS/.l.json" >>"$BENCH_MODELS/.lp"
    jq '.tests[] | select(.test | startswith("tg")) | .tok_s_mean' "$BENCH_MODELS/.l.json" >>"$BENCH_MODELS/.lg"
    "$LLAMA_BENCH" -m "$f" -p "$NP" -n "$NG" -t "$THREADS" -r 1 -o json 2>/dev/null >"$BENCH_MODELS/.r.json"
    jq '.[] | select(.n_prompt > 0) | .avg_ts' "$BENCH_MODELS/.r.json" >>"$BENCH_MODELS/.rp"
    jq '.[] | select(.n_gen > 0) | .avg_ts' "$BENCH_MODELS/.r.json" >>"$BENCH_MODELS/.rg"
  done
  lp=$(median <"$BENCH_MODELS/.lp"); lg=$(median <"$BENCH_MODELS/.lg")
  rp=$(median <"$BENCH_MODELS/.rp"); rg=$(median <"$BENCH_MODELS/.rg")
  size=$(awk -v b="$bytes" 'BEGIN {printf "%.0f MiB", b / 1048576}')
  awk -v p="$PRESET $type" -v s="$size" -v np="$NP" -v ng="$NG" -v lp="$lp" -v rp="$rp" \
      -v lg="$lg" -v rg="$rg" -v b="$bytes" 'BEGIN {
    printf "| %s | %s | pp%d | %.2f | %.2f | %.2fx | |\n", p, s, np, lp, rp, lp / rp
    printf "| %s | %s | tg%d | %.2f | %.2f | %.2fx | %.1f |\n", p, s, ng, lg, rg, lg / rg, lg * b / 1e9
  }'
done
echo
echo "median of $RUNS alternating runs each; lares GB/s = tg tok/s x file size (every weight read once per token)"
