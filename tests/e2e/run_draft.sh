#!/usr/bin/env bash
# lares run --draft MODEL [--draft-n N] (speculative decoding with a draft
# model, issue 20): greedy ids are the ids of plain decoding for every model of
# ../shared/models as the target, drafted by a model with the same vocabulary
# (the other block types, another architecture, a MoE), on every pass
# (--spec-always) and where drafts measure faster (the default); --json counts the
# drafts; sampling with a seed is reproducible; a draft with another
# vocabulary, --lookup beside it and bad values are refused with a message.
. "$(dirname "$0")/lib.sh"
need jq
P="Once upon a time, there was a little girl named Lily. She loved to"

TS=derived/TinyStories-656K.llamacpp
# target:draft, the draft sharing the target's vocabulary (2048 or 512 tokens)
for pair in TinyStories-656K.f16.gguf:TinyStories-656K-Q8_0.raincandy.gguf \
            TinyStories-656K.f16.gguf:$TS-Q4_0.gguf \
            derived/TinyStories-656K.f32.llama.gguf:$TS-Q4_K_M.gguf \
            TinyStories-656K-Q8_0.raincandy.gguf:$TS-Q4_0.gguf \
            derived/TinyStories-656K.f32.qwen2-arch.gguf:$TS-Q8_0.gguf \
            $TS-Q4_0.gguf:TinyStories-656K-Q8_0.raincandy.gguf \
            $TS-Q4_1.gguf:$TS-Q4_0.gguf \
            $TS-Q4_K_M.gguf:$TS-Q4_0.gguf \
            $TS-Q5_0.gguf:$TS-Q4_0.gguf \
            $TS-Q5_1.gguf:$TS-Q4_0.gguf \
            $TS-Q8_0.gguf:$TS-Q4_0.gguf \
            derived/TinyStories-656K-qwen2moe-4x2-shared.gguf:$TS-Q4_0.gguf \
            derived/TinyStories-656K-qwen3moe-4x2-qknorm1.gguf:$TS-Q4_0.gguf \
            stories260K.gguf:derived/stories260K-moe4top2-perturbed-experts.gguf \
            derived/stories260K-moe4top2-identical-experts.gguf:stories260K.gguf \
            derived/stories260K-moe4top2-perturbed-experts.gguf:stories260K.gguf; do
  target=${pair%%:*}
  draft=${pair#*:}
  base=$(basename "$target")
  [ -f "$TMP/$base.plain" ] || run_json "$target" "$TMP/$base.plain" --temp 0
  run_json "$target" "$TMP/$base.draft" --temp 0 --draft "$(model "$draft")" --draft-n 5 \
    --spec-always
  a=$(jq -c .generated_ids "$TMP/$base.plain")
  b=$(jq -c .generated_ids "$TMP/$base.draft")
  same_greedy_ids "$base" "$a" "$b" "$pair: --draft"
  # drafts only while they measure faster (the default): the same ids
  run_json "$target" "$TMP/$base.paced" --temp 0 --draft "$(model "$draft")" --draft-n 5
  same_greedy_ids "$base" "$a" "$(jq -c .generated_ids "$TMP/$base.paced")" "$pair: paced --draft"
  jq -e '.timings.drafted_tokens > 0 and .spec_always == false' "$TMP/$base.paced" >/dev/null &&
    ok || fail "$pair: paced drafts never tried: $(jq -c .timings "$TMP/$base.paced")"
  # every pass drafts (--spec-always; the draft always proposes): drafts counted, some taken
  jq -e '.timings.drafted_tokens > 0 and .timings.accepted_tokens > 0 and
         .timings.drafted_tokens >= .timings.accepted_tokens and .timings.draft_ms > 0 and
         .draft_n == 5 and .spec_always and (.draft_model | length > 0)' "$TMP/$base.draft" \
    >/dev/null && ok ||
    fail "$pair: draft figures $(jq -c '[.timings.drafted_tokens, .timings.accepted_tokens,
      .timings.draft_ms, .draft_n]' "$TMP/$base.draft")"
done
# a draft with the target's own weights proposes what the target decides: all taken
run_json TinyStories-656K.f16.gguf "$TMP/self" --temp 0 --draft "$(model TinyStories-656K.f16.gguf)" \
  --spec-always
jq -e '.timings.drafted_tokens == .timings.accepted_tokens and .timings.accepted_tokens > 0' \
  "$TMP/self" >/dev/null && ok || fail "the target as its own draft: $(jq -c .timings "$TMP/self")"
jq -e '.timings.drafted_tokens == 0 and .timings.draft_ms == 0' \
  "$TMP/TinyStories-656K.f16.gguf.plain" >/dev/null && ok || fail "plain decoding reports drafts"
# the smallest batch that verifies a draft (one token and one draft): same ids
run_json stories260K.gguf "$TMP/b1" --temp 0 --draft "$(model stories260K.gguf)" --draft-n 1 -b 2 \
  --spec-always
[ "$(jq -c .generated_ids "$TMP/b1")" = "$(jq -c .generated_ids "$TMP/stories260K.gguf.plain")" ] &&
  ok || fail "--draft-n 1 -b 2 changed the greedy ids"

# sampling: the same seed gives the same text with a draft, the draft's
# figures included (its draws come from its own seeded stream)
DQ=$(model "$TS-Q4_0.gguf")
run_json TinyStories-656K.f16.gguf "$TMP/s1" --temp 0.8 --seed 7 --draft "$DQ"
run_json TinyStories-656K.f16.gguf "$TMP/s2" --temp 0.8 --seed 7 --draft "$DQ"
[ "$(jq -c '[.generated_ids, .timings.drafted_tokens, .timings.accepted_tokens]' "$TMP/s1")" = \
  "$(jq -c '[.generated_ids, .timings.drafted_tokens, .timings.accepted_tokens]' "$TMP/s2")" ] &&
  ok || fail "sampling with --draft and a seed is not reproducible"
jq -e '.timings.drafted_tokens > 0 and .timings.accepted_tokens > 0' "$TMP/s1" >/dev/null && ok ||
  fail "sampling with --draft: $(jq -c .timings "$TMP/s1")"
# top-k, top-p, min-p and a repeat penalty on both models: reproducible too
run_json TinyStories-656K.f16.gguf "$TMP/k1" --temp 1.1 --top-k 5 --top-p 0.9 --min-p 0.1 \
  --repeat-penalty 1.3 --seed 11 --draft "$DQ" --draft-n 3
run_json TinyStories-656K.f16.gguf "$TMP/k2" --temp 1.1 --top-k 5 --top-p 0.9 --min-p 0.1 \
  --repeat-penalty 1.3 --seed 11 --draft "$DQ" --draft-n 3
[ -n "$(jq -c .generated_ids "$TMP/k1")" ] &&
  [ "$(jq -c .generated_ids "$TMP/k1")" = "$(jq -c .generated_ids "$TMP/k2")" ] && ok ||
  fail "sampling with penalties and --draft is not reproducible"

# the verbose figures name the draft model's acceptance
"$LARES" run -m "$(model TinyStories-656K.f16.gguf)" -p "$P" -n 32 -t 2 --temp 0 \
  --draft "$DQ" -v >/dev/null 2>"$TMP/verbose" || fail "--draft -v failed: $(cat "$TMP/verbose")"
grep -Eq "draft model drafted [0-9]+ tokens, [0-9]+ accepted \([0-9]+ %\)" "$TMP/verbose" && ok ||
  fail "no acceptance in the verbose figures: $(cat "$TMP/verbose")"

refused() { # what grep-pattern args...: the run must fail and say pattern
  local what=$1 pat=$2
  shift 2
  if "$LARES" run -p hi -n 4 -t 2 "$@" >/dev/null 2>"$TMP/e"; then
    fail "$what accepted"
  elif [ "$(wc -l <"$TMP/e")" -eq 1 ] && grep -q -- "$pat" "$TMP/e"; then
    ok
  else
    fail "$what: $(cat "$TMP/e")"
  fi
}
S=$(model stories260K.gguf)
T=$(model TinyStories-656K.f16.gguf)
refused "another vocabulary" "different vocabularies" -m "$S" --draft "$T"
grep -q "stories260K.gguf" "$TMP/e" && grep -q "TinyStories-656K.f16.gguf" "$TMP/e" && ok ||
  fail "the vocabulary error does not name both files: $(cat "$TMP/e")"
refused "the reverse pair" "different vocabularies" -m "$T" --draft "$S"
refused "--draft-n 0" "--draft-n" -m "$S" --draft "$S" --draft-n 0
refused "--draft-n 99" "--draft-n" -m "$S" --draft "$S" --draft-n 99
refused "--draft-n without --draft" "--draft" -m "$S" --draft-n 4
refused "--draft-n 8 with a batch of 4" "batch" -m "$S" --draft "$S" --draft-n 8 -b 4
refused "--draft with --lookup" "--lookup" -m "$S" --draft "$S" --lookup 4
refused "--spec-always without drafts" "--spec-always needs drafts" -m "$S" --spec-always
refused "a missing draft file" "draft model: $TMP/none.gguf" -m "$S" --draft "$TMP/none.gguf"
refused "a draft that is not a model" "draft model: .*token_embd" -m "$S" --draft "$(model vocab/ggml-vocab-llama-spm.gguf)"
finish
