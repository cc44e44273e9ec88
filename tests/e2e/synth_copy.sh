#!/usr/bin/env bash
# lares synth --copy (issue 20): a model of a real shape whose weights copy
# their context (an induction circuit), so that speculative decoding can be
# measured on benchmark-size files. Greedy decoding after a text that repeats
# a span continues the span as it went on before; prompt lookup drafts that
# continuation and keeps most of its drafts, with the ids of plain decoding;
# shapes that cannot hold the circuit are refused with one line.
. "$(dirname "$0")/lib.sh"
need jq
V=$(model vocab/ggml-vocab-llama-spm.gguf)

# two layers of the TinyLlama shape (heads of 64): about 130 MB
"$LARES" synth --preset llama-1b --layers 2 --type q4_0 --copy -o "$TMP/copy.gguf" \
  --vocab-from "$V" 2>"$TMP/err" && ok || fail "synth --copy: $(cat "$TMP/err")"

P="The old lighthouse keeper walked down to the harbour every morning to count the boats. The old lighthouse keeper"
gen() { "$LARES" run -m "$TMP/copy.gguf" -p "$P" -n 40 --temp 0 -t 2 --json "$@"; }
gen >"$TMP/plain.json" 2>"$TMP/err" || fail "run: $(cat "$TMP/err")"
# after "keeper" came " walked down to": the copy must go on with it (what
# follows "to", which came twice, may be either continuation)
jq -r .text "$TMP/plain.json" | grep -q "^ walked down to " && ok ||
  fail "the copy model did not continue the span: $(jq -r .text "$TMP/plain.json")"
gen --lookup 8 --spec-always >"$TMP/lookup.json" 2>"$TMP/err" || fail "run --lookup: $(cat "$TMP/err")"
[ "$(jq -c .generated_ids "$TMP/lookup.json")" = "$(jq -c .generated_ids "$TMP/plain.json")" ] && ok ||
  fail "--lookup changed the greedy ids"
jq -e '.timings.drafted_tokens >= 16 and .timings.accepted_tokens * 2 >= .timings.drafted_tokens' \
  "$TMP/lookup.json" >/dev/null && ok ||
  fail "few drafts taken on a copying model: $(jq -c .timings "$TMP/lookup.json")"

# shapes without room for the circuit
refused() { # what-it-must-say args...
  local want=$1
  shift
  if "$LARES" synth "$@" --copy -o "$TMP/bad.gguf" --vocab-from "$V" 2>"$TMP/err"; then
    fail "synth --copy $* was accepted"
  else
    [ "$(wc -l <"$TMP/err")" -eq 1 ] && grep -q "$want" "$TMP/err" && [ ! -e "$TMP/bad.gguf" ] && ok ||
      fail "synth --copy $*: $(cat "$TMP/err")"
  fi
}
refused "heads of 64 dimensions or more" --preset llama-tiny --type q8_0
refused "2 layers or more" --preset llama-1b --layers 1 --type q8_0
refused "mixture of experts" --preset qwen3moe-tiny --type q8_0
finish
