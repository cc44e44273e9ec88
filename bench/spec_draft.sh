#!/usr/bin/env bash
# Issue 20's draft-model benchmark: lares run with and without --draft on the
# same prompt, runs alternating (plain, draft, plain, draft, ...), medians of R
# runs each, greedy and sampled; prints a markdown table: generation tokens/s,
# drafted and accepted tokens, the share of generation spent drafting, the
# speed-up; then the CPU's flags and the load average before and after.
#
#   bench/spec_draft.sh [-r RUNS] [-t THREADS] [-n TOKENS] [-k DRAFT_N] [-p PROMPT]
#                       [-T "0 0.8"] TARGET.gguf DRAFT.gguf
#
# Env: LARES (default build/lares).
set -euo pipefail
cd "$(dirname "$0")/.."
LARES=${LARES:-build/lares}
RUNS=5 THREADS=2 NG=128 K=8 TEMPS="0 0.8"
PROMPT="Once upon a time, there was a little girl named Lily. She loved to"
while getopts "r:t:n:k:p:T:" o; do
  case $o in
    r) RUNS=$OPTARG ;; t) THREADS=$OPTARG ;; n) NG=$OPTARG ;; k) K=$OPTARG ;;
    p) PROMPT=$OPTARG ;; T) TEMPS=$OPTARG ;; *) exit 2 ;;
  esac
done
shift $((OPTIND - 1))
[ $# -eq 2 ] || { echo "usage: bench/spec_draft.sh [options] TARGET.gguf DRAFT.gguf" >&2; exit 2; }
TARGET=$1 DRAFT=$2
command -v jq >/dev/null || { echo "needs jq" >&2; exit 2; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

. bench/lib.sh

load0=$(cut -d' ' -f1-3 /proc/loadavg)
echo "| temp | mode | gen tok/s (median of $RUNS) | drafted | accepted | rate | drafting / gen | speed-up |"
echo "|---|---|---|---|---|---|---|---|"
for temp in $TEMPS; do
  for r in $(seq "$RUNS"); do
    for mode in plain draft; do
      extra=()
      [ "$mode" = draft ] && extra=(--draft "$DRAFT" --draft-n "$K")
      "$LARES" run -m "$TARGET" -p "$PROMPT" -n "$NG" -t "$THREADS" --temp "$temp" --seed "$r" \
        --json "${extra[@]}" >"$out/$temp.$mode.$r.json"
    done
  done
  plain=$(for r in $(seq "$RUNS"); do jq .timings.gen_tok_s "$out/$temp.plain.$r.json"; done | median)
  for mode in plain draft; do
    tps=$(for r in $(seq "$RUNS"); do jq .timings.gen_tok_s "$out/$temp.$mode.$r.json"; done | median)
    dr=$(for r in $(seq "$RUNS"); do jq .timings.drafted_tokens "$out/$temp.$mode.$r.json"; done | median)
    ac=$(for r in $(seq "$RUNS"); do jq .timings.accepted_tokens "$out/$temp.$mode.$r.json"; done | median)
    share=$(for r in $(seq "$RUNS"); do jq '.timings.draft_ms / .timings.gen_ms' "$out/$temp.$mode.$r.json"; done | median)
    awk -v t="$temp" -v m="$mode" -v tps="$tps" -v dr="$dr" -v ac="$ac" -v sh="$share" -v p="$plain" \
      'BEGIN {
        rate = "-"
        if (dr > 0) rate = sprintf("%.0f %%", 100 * ac / dr)
        printf "| %s | %s | %.1f | %s | %s | %s | %.0f %% | %.2fx |\n", t, m, tps, dr, ac, rate,
               100 * sh, tps / p
      }'
  done
done
echo
echo "target $TARGET, draft $DRAFT (--draft-n $K), $NG tokens, $THREADS threads, $RUNS runs alternating"
first=${TEMPS%% *}
echo "cpu flags: $(jq -r .cpu_flags "$out/$first.plain.1.json" 2>/dev/null || true)"
echo "load average before: $load0, after: $(cut -d' ' -f1-3 /proc/loadavg)"
