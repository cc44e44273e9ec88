#!/usr/bin/env bash
# The stall after a loss at a long context (issue 15): the head and three
# workers on loopback (windows 1 | 1 | 1 | 1 of a 4-layer model, or MODEL's
# layers shared evenly), a greedy generation, and worker b killed (SIGKILL) once
# it has run position AT. Reported per run: the positions the context held, the
# positions re-run, the switch as the head timed it (re-plan, KV moves, re-run)
# and the longest token gap of the run (the token in which the loss came:
# detection, switch, that token again), with KV mirroring on and off.
#
#   bench/ring_failover_stall.sh [-m MODEL -L LAYERS] [--at "500 2000"] [--prompt-tokens N]
#        [--mirror "true false"] [-o RESULTS.md]
#
# MODEL defaults to a llama-tiny in Q8_0 (lares synth, 4 layers, 3.5 MiB);
# the context is AT + 64 positions. With --prompt-tokens N the context is
# filled by a prompt of about N tokens (batched) instead of generated tokens,
# which makes long contexts reachable with larger models; the kill then comes
# once b has run position N + 4 (AT is ignored).
set -uo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
LARES=${LARES:-$here/build/lares}
MODEL=""
n_layer=4
ATS="500 2000"
MIRRORS="true false"
PROMPT_TOKENS=0
OUT=""
while [ $# -gt 0 ]; do
  case $1 in
    -m) MODEL=$2; shift 2 ;;
    -L) n_layer=$2; shift 2 ;;
    --at) ATS=$2; shift 2 ;;
    --mirror) MIRRORS=$2; shift 2 ;;
    --prompt-tokens) PROMPT_TOKENS=$2; shift 2 ;;
    -o) OUT=$2; shift 2 ;;
    *) echo "usage: $0 [-m MODEL -L LAYERS] [--at \"500 2000\"] [--prompt-tokens N] [--mirror \"true false\"] [-o OUT]" >&2; exit 2 ;;
  esac
done
TMP=$(mktemp -d)
export TMP LARES
. "$here/tests/cluster/ring_lib.sh"
trap 'ring_cleanup; rm -rf "$TMP"' EXIT
MODELS=${LARES_MODELS_DIR:-$here/../shared/models}
if [ -z "$MODEL" ]; then
  MODEL="$TMP/tiny.gguf"
  "$LARES" synth --preset llama-tiny --type q8_0 -o "$MODEL" --vocab-from "$MODELS/stories260K.gguf" \
    2>/dev/null || { echo "synth failed" >&2; exit 1; }
fi
export RING_MODEL=$MODEL
w=$((n_layer / 4))
w0=$((n_layer - 3 * w))
PROMPT=(-p "Once upon a time")
if [ "$PROMPT_TOKENS" -gt 0 ]; then
  # about 1.3 tokens a word for this vocabulary's pieces: cut once the tokenizer says enough
  yes "The little dog ran to the park and played with a red ball until the sun went down." \
    | head -n $((PROMPT_TOKENS / 12)) | tr '\n' ' ' >"$TMP/prompt.txt"
  PROMPT=(-f "$TMP/prompt.txt")
  ATS=$PROMPT_TOKENS
fi
rows=()
for at in $ATS; do
  for mirror in $MIRRORS; do
    ring_worker a || exit 1; AA=$WORKER_ADDR
    ring_worker b || exit 1; BB=$WORKER_ADDR; BPID=$WORKER_PID
    ring_worker c || exit 1; CC=$WORKER_ADDR
    ring_json "$TMP/ring.json" "\"heartbeat_ms\": 100, \"timeout_ms\": 3000, \"kv_mirror\": $mirror," \
      "$w0" a "$AA" "$w" b "$BB" "$w" c "$CC" "$w"
    if [ "$PROMPT_TOKENS" -gt 0 ]; then
      n=24; ctx=$((PROMPT_TOKENS * 4 + 64)); kill_pat=" 1 token at "
    else
      n=$((at + 48)); ctx=$((at + 64)); kill_pat=" token at $at:"
    fi
    "$LARES" run -m "$MODEL" "${PROMPT[@]}" -n $n -c $ctx --temp 0 -t 1 ${HEAD_VERBOSE:--v} --rebalance off \
      --ring "$TMP/ring.json" --json >"$TMP/head.json" 2>"$TMP/head.err" &
    hp=$!
    for i in $(seq 1 36000); do
      if [ "$PROMPT_TOKENS" -gt 0 ]; then
        [ "$(grep -c "$kill_pat" "$TMP/b.log")" -ge 4 ] && break
      else
        grep -q "$kill_pat" "$TMP/b.log" && break
      fi
      kill -0 $hp 2>/dev/null || break
      sleep 0.02
    done
    kill -9 "$BPID"
    wait $hp || echo "head failed: $(tail -3 "$TMP/head.err")" >&2
    [ -n "${KEEP_LOGS:-}" ] && cp "$TMP/head.err" "$KEEP_LOGS.$at.$mirror.err"
    line=$(grep "cluster: failover:" "$TMP/head.err" | head -1)
    context=$(echo "$line" | grep -o 'a context of [0-9]*' | grep -o '[0-9]*$')
    rerun=$(echo "$line" | grep -o '[0-9]* positions re-run' | cut -d' ' -f1)
    sw=$(echo "$line" | grep -o '[0-9.]* ms$' | cut -d' ' -f1)
    gap=$(jq '.timings.token_ms | max' "$TMP/head.json")
    tok=$(jq '.timings.token_ms | sort | .[length/2|floor]' "$TMP/head.json")
    rows+=("| $mirror | ${context:-?} | ${rerun:-?} | ${sw:-?} | $(printf '%.0f' "$gap") | $(printf '%.1f' "$tok") |")
    echo "${rows[-1]}" >&2
    ring_cleanup
  done
done
{
  echo "Model: $(basename "$MODEL") ($n_layer layers), windows $w0 | $w | $w | $w, worker b killed; load average $(cut -d' ' -f1-3 /proc/loadavg)"
  echo
  echo "| kv_mirror | context (positions) | positions re-run | switch (ms) | longest token gap (ms) | median token (ms) |"
  echo "|---|---|---|---|---|---|"
  printf '%s\n' "${rows[@]}"
} | tee ${OUT:+"$OUT"}
