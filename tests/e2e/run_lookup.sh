#!/usr/bin/env bash
# lares run --lookup N (speculative decoding by prompt lookup): greedy ids are
# the ids of plain decoding for every model (all 15), drafting on every pass
# (--spec-always) and where drafts measure faster (the default), with drafts
# proposed and some accepted on a prompt that repeats itself; sampling with a seed is
# reproducible; bad values are refused with a message.
. "$(dirname "$0")/lib.sh"
need jq
P="Once upon a time, there was a little girl named Lily. She loved to play with her toys. Once upon a time, there was a little girl named Lily. She loved to"

# every model of ../shared/models (the vocabulary-only and test-vector files have no weights)
for f in stories260K.gguf TinyStories-656K.f16.gguf TinyStories-656K-Q8_0.raincandy.gguf \
         derived/TinyStories-656K.f32.llama.gguf derived/TinyStories-656K.f32.qwen2-arch.gguf \
         derived/TinyStories-656K.llamacpp-Q4_0.gguf derived/TinyStories-656K.llamacpp-Q4_1.gguf \
         derived/TinyStories-656K.llamacpp-Q4_K_M.gguf derived/TinyStories-656K.llamacpp-Q5_0.gguf \
         derived/TinyStories-656K.llamacpp-Q5_1.gguf derived/TinyStories-656K.llamacpp-Q8_0.gguf \
         derived/stories260K-moe4top2-identical-experts.gguf \
         derived/stories260K-moe4top2-perturbed-experts.gguf \
         derived/TinyStories-656K-qwen2moe-4x2-shared.gguf \
         derived/TinyStories-656K-qwen3moe-4x2-qknorm1.gguf; do
  base=$(basename "$f")
  run_json "$f" "$TMP/$base.plain" --temp 0
  run_json "$f" "$TMP/$base.lookup" --temp 0 --lookup 6 --spec-always
  a=$(jq -c .generated_ids "$TMP/$base.plain")
  b=$(jq -c .generated_ids "$TMP/$base.lookup")
  same_greedy_ids "$base" "$a" "$b" "$f: --lookup 6"
  # drafting only while it measures faster (the default): the same ids
  run_json "$f" "$TMP/$base.paced" --temp 0 --lookup 6
  same_greedy_ids "$base" "$a" "$(jq -c .generated_ids "$TMP/$base.paced")" "$f: paced --lookup 6"
  jq -e '.timings.drafted_tokens >= .timings.accepted_tokens and .timings.accepted_tokens >= 0' \
    "$TMP/$base.lookup" >/dev/null && ok || fail "$f: draft figures $(jq -c .timings "$TMP/$base.lookup")"
done
# the repeated prompt makes stories260K copy: drafts are proposed and taken
jq -e '.timings.drafted_tokens > 0 and .timings.accepted_tokens > 0' "$TMP/stories260K.gguf.lookup" \
  >/dev/null && ok || fail "stories260K: no draft taken: $(jq -c .timings "$TMP/stories260K.gguf.lookup")"
jq -e '.timings.drafted_tokens == 0' "$TMP/stories260K.gguf.plain" >/dev/null && ok ||
  fail "plain decoding reports drafts"
# the smallest batch that verifies a draft (one token and one draft): same ids
run_json stories260K.gguf "$TMP/b1" --temp 0 --lookup 1 -b 2 --spec-always
[ "$(jq -c .generated_ids "$TMP/b1")" = "$(jq -c .generated_ids "$TMP/stories260K.gguf.plain")" ] &&
  ok || fail "--lookup 1 -b 2 changed the greedy ids"

# sampling: the same seed gives the same text with drafts
run_json stories260K.gguf "$TMP/s1" --temp 0.8 --seed 7 --lookup 6
run_json stories260K.gguf "$TMP/s2" --temp 0.8 --seed 7 --lookup 6
[ "$(jq -c .generated_ids "$TMP/s1")" = "$(jq -c .generated_ids "$TMP/s2")" ] && ok ||
  fail "sampling with --lookup and a seed is not reproducible"

# bad values
if "$LARES" run -m "$(model stories260K.gguf)" -p hi -n 4 --lookup 99 >/dev/null 2>"$TMP/e1"; then
  fail "--lookup 99 accepted"
else
  grep -q -- "--lookup" "$TMP/e1" && ok || fail "--lookup 99: $(cat "$TMP/e1")"
fi
if "$LARES" run -m "$(model stories260K.gguf)" -p hi -n 4 --lookup 8 -b 4 >/dev/null 2>"$TMP/e2"; then
  fail "--lookup 8 with a batch of 4 accepted"
else
  grep -q "batch" "$TMP/e2" && ok || fail "--lookup 8 -b 4: $(cat "$TMP/e2")"
fi
finish
