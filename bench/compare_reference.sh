#!/usr/bin/env bash
# Issues 3 and 14's benchmark: lares bench and the reference engine's llama-bench
# on the same synthesized llama-1b files (Q4_K_M, Q8_0, Q4_0, IQ4_XS), same
# threads, runs alternating, median of R runs each; prints a markdown table with
# the ratios, the memory bandwidth measured in the same session, and the CPU's
# feature flags with the kernel family each engine used.
#
#   bench/compare_reference.sh [-r RUNS] [-t THREADS] [-p 128[,512...]] [-n 32] [-d DEPTH]
#                              [-i ISA] [TYPE...]
#
#   -p   prompt sizes, comma-separated (pp128 and pp512: -p 128,512)
#   -d   tokens already in the KV cache before each test (llama-bench -d)
#   -i   lares's kernel family (lares bench --isa), e.g. avx2 against a reference
#        built for AVX2 only
#
# Env: LLAMA_CPP_BUILD, the reference engine's build directory (bin/llama-bench
# under it; built outside this repository), or LLAMA_BENCH, llama-bench itself;
# LARES (default build/lares), BENCH_MODELS (default bench-models/), VOCAB
# (default ../shared/models/vocab/ggml-vocab-llama-spm.gguf), PRESET (llama-1b).
set -euo pipefail
cd "$(dirname "$0")/.."
LARES=${LARES:-build/lares}
LLAMA_BENCH=${LLAMA_BENCH:-${LLAMA_CPP_BUILD:+$LLAMA_CPP_BUILD/bin/llama-bench}}
BENCH_MODELS=${BENCH_MODELS:-bench-models}
VOCAB=${VOCAB:-../shared/models/vocab/ggml-vocab-llama-spm.gguf}
PRESET=${PRESET:-llama-1b}
RUNS=5 THREADS=2 NPS=128 NG=32 DEPTH=0 ISA=""
while getopts "r:t:p:n:d:i:" o; do
  case $o in
    r) RUNS=$OPTARG ;; t) THREADS=$OPTARG ;; p) NPS=$OPTARG ;; n) NG=$OPTARG ;;
    d) DEPTH=$OPTARG ;; i) ISA=$OPTARG ;; *) exit 2 ;;
  esac
done
shift $((OPTIND - 1))
TYPES=("$@")
[ ${#TYPES[@]} -gt 0 ] || TYPES=(q4_k_m q8_0 q4_0 iq4_xs)
IFS=, read -r -a PP <<<"$NPS"
for np in "${PP[@]}"; do
  [[ $np =~ ^[1-9][0-9]*$ ]] || { echo "-p: '$np' is not a prompt size (e.g. -p 128,512)" >&2; exit 2; }
done
[[ $DEPTH =~ ^[0-9]+$ ]] || { echo "-d: '$DEPTH' is not a token count" >&2; exit 2; }
command -v jq >/dev/null || { echo "needs jq" >&2; exit 1; }
if [ -z "$LLAMA_BENCH" ]; then
  echo "set LLAMA_CPP_BUILD to the reference engine's build directory (the one with bin/llama-bench)," \
       "or LLAMA_BENCH to llama-bench itself" >&2
  exit 1
fi
[ -x "$LLAMA_BENCH" ] || { echo "reference engine not found at $LLAMA_BENCH (LLAMA_CPP_BUILD / LLAMA_BENCH)" >&2; exit 1; }
mkdir -p "$BENCH_MODELS"
ninja -C build bench_membw >/dev/null
ISA_ARG=()
[ -z "$ISA" ] || ISA_ARG=(--isa "$ISA")
AT=""
[ "$DEPTH" -eq 0 ] || AT=" @ d$DEPTH"

. bench/lib.sh

echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), load $(cut -d' ' -f1-3 /proc/loadavg)"
bw=$(build/bench/bench_membw --threads "$THREADS" --mib 1024 --reps 5 | jq .read_gb_s)
echo "memory read bandwidth ($THREADS threads): $bw GB/s"
REF_CPU=""
TABLE=$(mktemp)
trap 'rm -f "$TABLE"' EXIT
for type in "${TYPES[@]}"; do
  f="$BENCH_MODELS/$PRESET-$type.gguf"
  [ -f "$f" ] || "$LARES" synth --preset "$PRESET" --type "$type" -o "$f" --vocab-from "$VOCAB" >&2
  bytes=$(stat -c %s "$f")
  for np in "${PP[@]}"; do : >"$BENCH_MODELS/.lp$np"; : >"$BENCH_MODELS/.rp$np"; done
  : >"$BENCH_MODELS/.lg" ; : >"$BENCH_MODELS/.rg"
  for ((i = 0; i < RUNS; i++)); do
    for np in "${PP[@]}"; do
      # tg once per run, with the first prompt size
      ng=0
      [ "$np" != "${PP[0]}" ] || ng=$NG
      "$LARES" bench -m "$f" -p "$np" -n "$ng" -d "$DEPTH" -t "$THREADS" -r 1 "${ISA_ARG[@]}" --json \
        >"$BENCH_MODELS/.l.json"
      jq '.tests[] | select(.test | startswith("pp")) | .tok_s_mean' "$BENCH_MODELS/.l.json" >>"$BENCH_MODELS/.lp$np"
      jq '.tests[] | select(.test | startswith("tg")) | .tok_s_mean' "$BENCH_MODELS/.l.json" >>"$BENCH_MODELS/.lg"
      L_ISA=$(jq -r .isa "$BENCH_MODELS/.l.json")
      L_FLAGS=$(jq -r .cpu_flags "$BENCH_MODELS/.l.json")
    done
    "$LLAMA_BENCH" -m "$f" -p "$NPS" -n "$NG" -d "$DEPTH" -t "$THREADS" -r 1 -o json 2>/dev/null \
      >"$BENCH_MODELS/.r.json"
    for np in "${PP[@]}"; do
      jq --argjson np "$np" '.[] | select(.n_prompt == $np and .n_gen == 0) | .avg_ts' \
        "$BENCH_MODELS/.r.json" >>"$BENCH_MODELS/.rp$np"
    done
    jq '.[] | select(.n_gen > 0) | .avg_ts' "$BENCH_MODELS/.r.json" >>"$BENCH_MODELS/.rg"
    REF_CPU=$(jq -r '.[0] | "\(.cpu_info // "?") (backends \(.backends // "?"))"' "$BENCH_MODELS/.r.json")
  done
  size=$(awk -v b="$bytes" 'BEGIN {printf "%.0f MiB", b / 1048576}')
  for np in "${PP[@]}"; do
    lp=$(median <"$BENCH_MODELS/.lp$np"); rp=$(median <"$BENCH_MODELS/.rp$np")
    awk -v p="$PRESET $type" -v s="$size" -v t="pp$np$AT" -v l="$lp" -v r="$rp" 'BEGIN {
      printf "| %s | %s | %s | %.2f | %.2f | %.2fx | |\n", p, s, t, l, r, l / r }' >>"$TABLE"
  done
  if [ "$NG" -gt 0 ]; then
    lg=$(median <"$BENCH_MODELS/.lg"); rg=$(median <"$BENCH_MODELS/.rg")
    awk -v p="$PRESET $type" -v s="$size" -v t="tg$NG$AT" -v l="$lg" -v r="$rg" -v b="$bytes" 'BEGIN {
      printf "| %s | %s | %s | %.2f | %.2f | %.2fx | %.1f |\n", p, s, t, l, r, l / r, l * b / 1e9 }' >>"$TABLE"
  fi
done
echo "lares: kernel family ${L_ISA:-?}; cpu flags (lares_cpu_flags): ${L_FLAGS:-?}"
echo "reference: $LLAMA_BENCH; cpu: $REF_CPU"
echo
echo "| model | size | test | lares t/s | reference t/s | ratio | lares GB/s (tg) |"
echo "| --- | ---: | --- | ---: | ---: | ---: | ---: |"
cat "$TABLE"
echo
echo "median of $RUNS alternating runs each, $THREADS threads; lares GB/s = tg tok/s x file size" \
     "(every weight read once per token)"
