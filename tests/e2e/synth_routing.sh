#!/usr/bin/env bash
# Realistic MoE routing (issue 18) from the command line: lares synth makes a
# tiny Qwen3-MoE whose routers keep most experts from token to token, lares
# bench measures that overlap and the expert cache's hit rate when a budget
# makes the experts stream, and the same text comes out streamed or not.
# Both eviction orders of the expert cache (lru, heat) keep the text.
# Bad figures get one-line errors and leave no file.
. "$(dirname "$0")/lib.sh"
need jq
V=$(model vocab/ggml-vocab-llama-spm.gguf)

"$LARES" synth --preset qwen3moe-tiny --type q8_0 -o "$TMP/moe.gguf" --vocab-from "$V" \
  2>"$TMP/err" && ok || fail "synth: $(cat "$TMP/err")"
"$LARES" synth --preset qwen3moe-tiny --type q8_0 --routing random -o "$TMP/rand.gguf" \
  --vocab-from "$V" 2>"$TMP/err" && ok || fail "synth --routing random: $(cat "$TMP/err")"
cmp -s "$TMP/moe.gguf" "$TMP/rand.gguf" && fail "routing made no difference to the file" || ok

# figures over 200 sampled tokens; everything resident: no cache figures
bench() { "$LARES" bench -m "$1" -p 0 -n 200 -r 1 -t 1 --temp 1 --seed 3 --json "${@:2}"; }
bench "$TMP/moe.gguf" >"$TMP/b.json" 2>"$TMP/err" && ok || fail "bench: $(cat "$TMP/err")"
jq -e '.tests[0] | .route_overlap > 0.75 and .route_overlap < 0.97
       and .route_top_share > 0.25 and .route_top_share <= 1 and .expert_hit_rate == null' \
  "$TMP/b.json" >/dev/null && ok || fail "realistic routing figures: $(jq -c '.tests[0]' "$TMP/b.json")"
bench "$TMP/rand.gguf" >"$TMP/r.json" 2>"$TMP/err" && ok || fail "bench random: $(cat "$TMP/err")"
real=$(jq '.tests[0].route_overlap' "$TMP/b.json")
rand=$(jq '.tests[0].route_overlap' "$TMP/r.json")
awk -v a="$real" -v b="$rand" 'BEGIN { exit !(b < a - 0.1) }' && ok \
  || fail "random routers overlap $rand, realistic $real"

# streamed: the smallest budget each command accepts (from its own refusal), plus 1 MiB
least() {
  "$@" --mem-budget 1M >/dev/null 2>"$TMP/err" && { fail "a 1 MiB budget was accepted: $*"; return; }
  local n
  n=$(grep -o '([0-9]* bytes)' "$TMP/err" | tr -dc 0-9)
  [ -n "$n" ] && echo $((n + 1048576)) || fail "no least budget in: $(cat "$TMP/err")"
}
budget=$(least bench "$TMP/moe.gguf")
bench "$TMP/moe.gguf" --mem-budget "$budget" >"$TMP/s.json" 2>"$TMP/err" && ok \
  || fail "bench streamed: $(cat "$TMP/err")"
jq -e '.tests[0] | .expert_hits + .expert_misses > 0 and .expert_hit_rate > 0
       and .expert_hit_rate < 1' "$TMP/s.json" >/dev/null && ok \
  || fail "streamed cache figures: $(jq -c '.tests[0]' "$TMP/s.json")"
# routing does not depend on residency: the same choices, the same overlap
jq -e --slurpfile a "$TMP/b.json" '.tests[0].route_overlap == $a[0].tests[0].route_overlap' \
  "$TMP/s.json" >/dev/null && ok || fail "overlap streamed $(jq .tests[0].route_overlap "$TMP/s.json") vs $real"
# the table's line
"$LARES" bench -m "$TMP/moe.gguf" -p 0 -n 200 -r 1 -t 1 --temp 1 --mem-budget "$budget" \
  >/dev/null 2>"$TMP/err" && grep -Eq '^lares: experts \(tg\): cache hit rate [0-9.]+ %' "$TMP/err" \
  && ok || fail "bench experts line: $(cat "$TMP/err")"
# the same greedy text with and without streaming
ids() { "$LARES" run -m "$TMP/moe.gguf" -p "Once upon a time" -n 24 --temp 0 -t 1 --json "$@"; }
a=$(ids | jq -c .generated_ids)
budget=$(least ids)
ids --mem-budget "$budget" >"$TMP/run.json"
b=$(jq -c .generated_ids "$TMP/run.json")
jq -e '.memory.streaming == true' "$TMP/run.json" >/dev/null && ok || fail "run did not stream: $(jq -c .memory "$TMP/run.json")"
[ -n "$a" ] && [ "$a" = "$b" ] && ok || fail "streamed ids $b differ from resident $a"
# expert slices read directly or through the page cache: the same text, and
# the report says which (auto follows its probe: direct when as fast; these
# slices round out to blocks by more than 2 %, so no probe and the page cache)
for io in mmap direct auto; do
  ids --mem-budget "$budget" --stream-io $io >"$TMP/io.json" 2>"$TMP/err" \
    && [ "$(jq -c .generated_ids "$TMP/io.json")" = "$a" ] && ok \
    || fail "streamed ids with --stream-io $io differ: $(cat "$TMP/err")"
  x=$(jq -c .memory.experts "$TMP/io.json")
  case $io in
    mmap) want='.io == "mmap" and .probe == null' ;;
    direct) want='.io == "direct" and .probe == null' ;;
    auto) want='(.probe == null and .io == "mmap") or (.probe.direct_Bps > 0
                and .probe.mmap_Bps > 0 and (.io == "direct") == (.probe.mmap_Bps <= .probe.direct_Bps))' ;;
  esac
  if [ "$io" = mmap ] || grep -q "direct reads" "$TMP/err"; then # (a file system without O_DIRECT)
    jq -e ".io == \"mmap\"" <<<"$x" >/dev/null && ok || fail "--stream-io $io on no direct reads: $x"
  else
    jq -e "$want" <<<"$x" >/dev/null && ok || fail "--stream-io $io: experts $x"
  fi
done
jq -e '.memory.experts == null' <(ids) >/dev/null && ok || fail "experts figures without streaming"
c=$(ids --mem-budget "$budget" --expert-cache heat | jq -c .generated_ids)
[ "$a" = "$c" ] && ok || fail "streamed ids with --expert-cache heat $c differ from resident $a"
# guessing the next layer's experts: each way the same text; always reading
# the guesses reads some and says how many were picked; never guessing makes
# none; auto reports its guesses, read or not
for g in on off auto; do
  d=$(ids --mem-budget "$budget" --expert-guess $g | jq -c .generated_ids)
  [ "$a" = "$d" ] && ok || fail "streamed ids with --expert-guess $g $d differ from resident $a"
done
# (this file's plan gives its expert cache one layer at every budget, all used
# by the last token, so a guess finds no room to read into: test_expert_guess
# checks the reads)
bench "$TMP/moe.gguf" --mem-budget "$(least bench "$TMP/moe.gguf")" --expert-guess on >"$TMP/g.json" \
  2>"$TMP/err" && jq -e '.tests[0] | .expert_guesses_made > 0 and .expert_guesses <= .expert_guesses_made
    and .expert_guess_hits <= .expert_guesses and .expert_guesses_picked <= .expert_guesses_made' \
  "$TMP/g.json" >/dev/null && ok || fail "guess figures: $(cat "$TMP/err") $(jq -c .tests[0] "$TMP/g.json")"
"$LARES" bench -m "$TMP/moe.gguf" -p 0 -n 200 -r 1 -t 1 --temp 1 \
  --mem-budget "$(least bench "$TMP/moe.gguf")" --expert-guess on >/dev/null 2>"$TMP/err" \
  && grep -Eq '^lares: experts \(tg\): next layer guessed [1-9][0-9]* times, [0-9.]+ % picked \| [0-9]+ read ahead' \
  "$TMP/err" && ok || fail "bench guess line: $(cat "$TMP/err")"
bench "$TMP/moe.gguf" --mem-budget "$(least bench "$TMP/moe.gguf")" --expert-guess off >"$TMP/g.json" \
  2>/dev/null && jq -e '.tests[0] | .expert_guesses == 0 and .expert_guesses_made == 0' "$TMP/g.json" \
  >/dev/null && ok || fail "guess off figures: $(jq -c .tests[0] "$TMP/g.json")"
"$LARES" run -m "$TMP/moe.gguf" -p "Once" -n 2 --expert-guess maybe 2>"$TMP/err" && fail "--expert-guess maybe accepted" \
  || { [ "$(wc -l <"$TMP/err")" -eq 1 ] && grep -q "auto, on or off" "$TMP/err" && ok || fail "--expert-guess message: $(cat "$TMP/err")"; }
# both eviction orders count hits and misses
bench "$TMP/moe.gguf" --mem-budget "$(least bench "$TMP/moe.gguf")" --expert-cache heat >"$TMP/h.json" \
  2>"$TMP/err" && jq -e '.tests[0].expert_hit_rate > 0 and .tests[0].expert_hit_rate < 1' "$TMP/h.json" \
  >/dev/null && ok || fail "heat cache figures: $(cat "$TMP/err" "$TMP/h.json")"
"$LARES" run -m "$TMP/moe.gguf" -p "Once" -n 2 --expert-cache warm 2>"$TMP/err" && fail "--expert-cache warm accepted" \
  || { [ "$(wc -l <"$TMP/err")" -eq 1 ] && grep -q "warm" "$TMP/err" && ok || fail "--expert-cache message: $(cat "$TMP/err")"; }

# bad figures
for bad in "--route-overlap 1.5" "--route-overlap x" "--route-skew -1" "--routing sometimes"; do
  # shellcheck disable=SC2086
  "$LARES" synth --preset qwen3moe-tiny --type q8_0 $bad -o "$TMP/bad.gguf" --vocab-from "$V" \
    2>"$TMP/err" && fail "synth $bad accepted" \
    || { [ "$(wc -l <"$TMP/err")" -eq 1 ] && grep -q -- "${bad%% *}" "$TMP/err" && ok \
      || fail "synth $bad message: $(cat "$TMP/err")"; }
done
"$LARES" synth --preset qwen3moe-tiny --type q8_0 --layers 200 -o "$TMP/bad.gguf" --vocab-from "$V" \
  2>"$TMP/err" && fail "200 layers of width 256 accepted" \
  || { grep -q "routing random" "$TMP/err" && ok || fail "no room message: $(cat "$TMP/err")"; }
[ ! -e "$TMP/bad.gguf" ] && ok || fail "a refused synth left a file"
"$LARES" bench -m "$TMP/moe.gguf" --temp hot 2>"$TMP/err" && fail "--temp hot accepted" \
  || { grep -q -- "--temp" "$TMP/err" && ok || fail "--temp message: $(cat "$TMP/err")"; }
finish
