#!/usr/bin/env bash
# lares run --mem-budget: sizes without a unit and budgets below the least that
# works are refused with messages that say so (the latter naming the minimum,
# which then works); under budgets from that minimum up, with several window
# sizes, a model that does not fit streams and generates exactly the tokens
# of the unbudgeted run, and --json reports the streaming figures.
. "$(dirname "$0")/lib.sh"
need jq
VOCAB=$(model vocab/ggml-vocab-llama-spm.gguf)
M="$TMP/tiny16.gguf"
# 16 small layers and a 32000-row output: the output is the largest unit
if ! "$LARES" synth --preset llama-tiny --type q8_0 --layers 16 -o "$M" --vocab-from "$VOCAB" \
    >/dev/null 2>"$TMP/err"; then
  fail "synth: $(cat "$TMP/err")"
  finish
fi

run_json() { # out-file args...
  local out=$1
  shift
  "$LARES" run -m "$M" -p "Once upon a time" -n 12 --temp 0 -t 2 -c 128 --json "$@" >"$out" 2>"$TMP/err"
}

# --- parsing ---
"$LARES" run -m "$M" -p x --mem-budget 10 >/dev/null 2>"$TMP/err"
rc=$?
[ $rc -eq 2 ] && grep -q "give a unit" "$TMP/err" && ok || fail "--mem-budget 10: rc $rc, $(cat "$TMP/err")"
"$LARES" run -m "$M" -p x --mem-budget 0M >/dev/null 2>"$TMP/err"
rc=$?
[ $rc -eq 2 ] && grep -q "0 bytes" "$TMP/err" && ok || fail "--mem-budget 0M: rc $rc, $(cat "$TMP/err")"
"$LARES" run -m "$M" -p x --mem-budget 12Q >/dev/null 2>"$TMP/err"
rc=$?
[ $rc -eq 2 ] && grep -q "unknown unit" "$TMP/err" && ok || fail "--mem-budget 12Q: rc $rc, $(cat "$TMP/err")"
"$LARES" run -m "$M" -p x --mem-window 0 >/dev/null 2>"$TMP/err"
rc=$?
[ $rc -eq 2 ] && ok || fail "--mem-window 0: rc $rc, $(cat "$TMP/err")"

# --- a budget below the least that works names that least ---
run_json "$TMP/small.json" --mem-budget 1M
rc=$?
if [ $rc -eq 1 ] && grep -q "needs at" "$TMP/err" && grep -q "the largest layer" "$TMP/err"; then
  ok
else
  fail "--mem-budget 1M: rc $rc, $(cat "$TMP/err")"
fi
least=$(sed -n 's/.*(\([0-9]*\) bytes) this session needs.*/\1/p' "$TMP/err")
[ -n "$least" ] && ok || fail "no minimum in: $(cat "$TMP/err")"

# --- the reference: no budget, nothing streams ---
if run_json "$TMP/ref.json"; then
  jq -e '.memory.streaming == false and .memory.prefetch_bytes == 0' "$TMP/ref.json" >/dev/null \
    && ok || fail "unbudgeted run streams: $(jq -c .memory "$TMP/ref.json")"
else
  fail "unbudgeted run: $(cat "$TMP/err")"
fi
want=$(jq -c .generated_ids "$TMP/ref.json")
wbytes=$(stat -c %s "$M")

# --- from the minimum up, several windows: same tokens, streaming reported ---
check_budget() { # budget [more args]
  local b=$1
  shift
  if ! run_json "$TMP/b.json" --mem-budget "$b" "$@"; then
    fail "budget $b $*: $(cat "$TMP/err")"
    return
  fi
  local got
  got=$(jq -c .generated_ids "$TMP/b.json")
  [ "$got" = "$want" ] && ok || fail "budget $b $*: tokens $got, want $want"
  # streamed every pass: 11 forward passes after the prompt read stream_bytes each
  jq -e --argjson b "$b" '.memory.streaming == true and .memory.budget_bytes == $b
        and .memory.stream_bytes > 0 and .memory.window_bytes > 0
        and .memory.prefetch_bytes >= 11 * .memory.stream_bytes
        and (.timings.gen_wait_ms | type == "number")
        and (.timings.gen_compute_ms > 0)
        and (.timings.token_ms | length) == 11' "$TMP/b.json" >/dev/null \
    && ok || fail "budget $b $*: figures $(jq -c '{memory, timings}' "$TMP/b.json")"
}
check_budget "$least"
check_budget "$least" --mem-window 1
mid=$((least + (wbytes - (least - 16 * 1048576)) / 3))
check_budget "$mid"
check_budget "$mid" --mem-window 2
check_budget "$mid" --mem-window 5
check_budget "$mid" --mem-lock

# the human figures name the split of a token's time
if "$LARES" run -m "$M" -p "Once upon a time" -n 4 --temp 0 -c 128 --mem-budget "$least" \
    >/dev/null 2>"$TMP/err"; then
  grep -q "ms computing + .* ms waiting for disk" "$TMP/err" && ok \
    || fail "no time split in: $(cat "$TMP/err")"
else
  fail "human run: $(cat "$TMP/err")"
fi
finish
