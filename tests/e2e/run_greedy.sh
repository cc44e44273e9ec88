#!/usr/bin/env bash
# lares run --temp 0 reproduces the reference greedy continuation of
# "Once upon a time" for every llama-architecture model (48 tokens; the first
# 30 for the Q4_K_M mix and 9 for Q5_1, whose 10th is a near-tie: see
# tests/greedy_cases.h), and the BOS-only continuation.
. "$(dirname "$0")/lib.sh"
need jq
EXP=$(model expected/greedy_once_upon_a_time.json)
BOS=$(model expected/greedy_bos_only_reference.json)

check_model() { # file min_agree
  local file=$1 min=$2 base
  base=$(basename "$file")
  local out="$TMP/$base.json"
  if ! "$LARES" run -m "$(model "$file")" -p "Once upon a time" -n 48 --temp 0 --json -t 2 \
      >"$out" 2>"$TMP/err"; then
    fail "$file: lares run failed: $(cat "$TMP/err")"
    return
  fi
  local want_prompt want got_prompt got
  want_prompt=$(jq -c --arg m "$base" '.results[] | select(.model==$m) | .prompt_token_ids_with_bos' "$EXP")
  want=$(jq -c --arg m "$base" '.results[] | select(.model==$m) | .reference_greedy_token_ids' "$EXP")
  got_prompt=$(jq -c '.prompt_ids' "$out")
  got=$(jq -c '.generated_ids' "$out")
  [ -n "$want" ] || { fail "$base missing from $EXP"; return; }
  if [ "$got_prompt" = "$want_prompt" ]; then ok; else fail "$file: prompt ids $got_prompt, want $want_prompt"; fi
  local agree
  agree=$(ids_agree "$got" "$want")
  if [ "$agree" -ge "$min" ]; then ok; else fail "$file: $agree tokens agree, want $min"; fi
  # the text is the detokenized ids and the figures are present
  jq -e '.timings.prompt_tok_s > 0 and .timings.gen_tok_s > 0 and .timings.ttft_ms > 0
         and .memory.peak_rss_bytes > 0 and (.memory.major_faults | type == "number")
         and (.memory.mem_pressure | type == "number") and (.text | length) > 0' "$out" >/dev/null \
    && ok || fail "$file: figures missing in $(cat "$out")"
}

for f in stories260K.gguf TinyStories-656K.f16.gguf TinyStories-656K-Q8_0.raincandy.gguf \
         derived/TinyStories-656K.f32.llama.gguf derived/TinyStories-656K.llamacpp-Q4_0.gguf \
         derived/TinyStories-656K.llamacpp-Q4_1.gguf derived/TinyStories-656K.llamacpp-Q5_0.gguf \
         derived/TinyStories-656K.llamacpp-Q8_0.gguf; do
  check_model "$f" 48
done
# other architectures and mixtures of experts (identical experts equal the dense model)
for f in derived/TinyStories-656K.f32.qwen2-arch.gguf \
         derived/stories260K-moe4top2-identical-experts.gguf \
         derived/stories260K-moe4top2-perturbed-experts.gguf \
         derived/TinyStories-656K-qwen2moe-4x2-shared.gguf \
         derived/TinyStories-656K-qwen3moe-4x2-qknorm1.gguf; do
  check_model "$f" 48
done
a=$(jq -c .generated_ids "$TMP/stories260K-moe4top2-identical-experts.gguf.json")
b=$(jq -c .generated_ids "$TMP/stories260K.gguf.json")
[ "$a" = "$b" ] && ok || fail "identical experts $a differ from the dense model $b"
check_model derived/TinyStories-656K.llamacpp-Q5_1.gguf 9
check_model derived/TinyStories-656K.llamacpp-Q4_K_M.gguf 30

# BOS alone: an empty prompt with the BOS token
for f in stories260K.gguf TinyStories-656K.f16.gguf derived/TinyStories-656K.f32.llama.gguf; do
  base=$(basename "$f")
  n=$(jq --arg m "$base" '.results[] | select(.model==$m) | .greedy_tokens | length' "$BOS")
  want=$(jq -c --arg m "$base" '.results[] | select(.model==$m) | .greedy_tokens' "$BOS")
  if "$LARES" run -m "$(model "$f")" -p "" -n "$n" --temp 0 --json >"$TMP/bos.json" 2>"$TMP/err"; then
    got=$(jq -c '.generated_ids' "$TMP/bos.json")
    [ "$got" = "$want" ] && ok || fail "$f BOS-only: got $got want $want"
  else
    fail "$f BOS-only: $(cat "$TMP/err")"
  fi
done
finish
