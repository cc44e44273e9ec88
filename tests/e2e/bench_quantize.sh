#!/usr/bin/env bash
# lares synth, lares quantize and lares bench from the command line: a tiny
# synthesized model in F32 is quantized to Q8_0 and Q4_K_M; the quantized files
# load, keep the F32 file's first greedy tokens (Q8_0), and lares bench's JSON
# and table carry the fields scripts read (parsed here, not timed). Bad
# requests get one-line errors and leave no file behind.
. "$(dirname "$0")/lib.sh"
need jq
V=$(model vocab/ggml-vocab-llama-spm.gguf)

"$LARES" synth --preset llama-tiny --type f32 -o "$TMP/f32.gguf" --vocab-from "$V" 2>"$TMP/err" \
  && ok || fail "synth: $(cat "$TMP/err")"
grep -q "synth:" "$TMP/err" && ok || fail "synth shows no progress: $(cat "$TMP/err")"
for t in q8_0 q4_k_m; do
  "$LARES" quantize "$TMP/f32.gguf" "$TMP/$t.gguf" "$t" 2>"$TMP/err" && ok \
    || fail "quantize $t: $(cat "$TMP/err")"
  [ -s "$TMP/$t.gguf" ] && ok || fail "quantize $t wrote nothing"
done
f32_bytes=$(stat -c %s "$TMP/f32.gguf")
q8_bytes=$(stat -c %s "$TMP/q8_0.gguf")
q4_bytes=$(stat -c %s "$TMP/q4_k_m.gguf")
[ "$q8_bytes" -lt "$f32_bytes" ] && [ "$q4_bytes" -lt "$q8_bytes" ] && ok \
  || fail "sizes f32 $f32_bytes, q8_0 $q8_bytes, q4_k_m $q4_bytes: not decreasing"

# the quantized files run; Q8_0 keeps the F32 file's first three greedy tokens (random
# synthetic weights leave small logit margins, so later tokens may part)
ids() { "$LARES" run -m "$1" -p "Once upon a time" -n 8 --temp 0 --json | jq -c '.generated_ids[:3]'; }
a=$(ids "$TMP/f32.gguf")
b=$(ids "$TMP/q8_0.gguf")
c=$(ids "$TMP/q4_k_m.gguf")
[ -n "$a" ] && [ "$a" = "$b" ] && ok || fail "q8_0 first tokens $b differ from f32 $a"
[ -n "$c" ] && [ "$c" != null ] && ok || fail "q4_k_m did not generate: $c"

# bench --json: the fields the comparison scripts read
"$LARES" bench -m "$TMP/q4_k_m.gguf" -p 16 -n 4 -t 1 -r 2 --json >"$TMP/b.json" 2>"$TMP/err" \
  && ok || fail "bench: $(cat "$TMP/err")"
jq -e '.type == "q4_k_m"' "$TMP/b.json" >/dev/null && ok \
  || fail "bench type: $(jq -c .type "$TMP/b.json")"
jq -e '.threads == 1 and .repeat == 2 and (.tests | length) == 2' "$TMP/b.json" >/dev/null && ok \
  || fail "bench header: $(jq -c '{threads, repeat, n: (.tests | length)}' "$TMP/b.json")"
jq -e '.tests[0].test == "pp16" and .tests[1].test == "tg4"' "$TMP/b.json" >/dev/null && ok \
  || fail "bench tests: $(jq -c '[.tests[].test]' "$TMP/b.json")"
jq -e 'all(.tests[]; (.samples | length) == 2 and .tok_s_mean > 0 and .peak_rss_bytes > 0
                    and has("major_faults") and has("disk_read_bytes") and has("mem_pressure"))' \
  "$TMP/b.json" >/dev/null && ok || fail "bench figures: $(jq -c '.tests' "$TMP/b.json")"
# --parallel: S sequences together, more of them than the measured prompt's 8 tokens they start from
"$LARES" bench -m "$TMP/q8_0.gguf" -p 0 -n 4 -t 1 -r 1 --parallel 10 --json >"$TMP/bp.json" \
  2>"$TMP/err" && ok || fail "bench --parallel: $(cat "$TMP/err")"
jq -e '.tests[1].test == "tg4x10" and .tests[1].n_seq == 10 and .tests[1].tok_s_mean > 0' \
  "$TMP/bp.json" >/dev/null && ok || fail "bench --parallel json: $(jq -c '.tests' "$TMP/bp.json")"
# the table: header and one row per test
"$LARES" bench -m "$TMP/q8_0.gguf" -p 8 -n 2 -r 1 >"$TMP/b.txt" 2>"$TMP/err" && ok || fail "bench table: $(cat "$TMP/err")"
grep -q '^| model | size | arch | type | isa | threads | test | t/s |' "$TMP/b.txt" && ok || fail "table header: $(cat "$TMP/b.txt")"
grep -Eq '^\| q8_0.gguf .*\| auto \| pp8 \| [0-9.]+ ± [0-9.]+ \|$' "$TMP/b.txt" && ok || fail "pp row: $(cat "$TMP/b.txt")"
grep -Eq '^\| q8_0.gguf .*\| auto \| tg2 \| [0-9.]+ ± [0-9.]+ \|$' "$TMP/b.txt" && ok || fail "tg row: $(cat "$TMP/b.txt")"

# the CPU's flags beside the kernel family, in bench and run
jq -e '(.isa | length) > 0 and (.cpu_flags | type) == "string" and .depth == 0
       and all(.tests[]; .n_depth == 0)' "$TMP/b.json" >/dev/null && ok \
  || fail "bench isa/cpu_flags/depth: $(jq -c '{isa, cpu_flags, depth}' "$TMP/b.json")"
grep -q '^cpu flags: ' "$TMP/b.txt" && ok || fail "no cpu flags line: $(cat "$TMP/b.txt")"
"$LARES" run -m "$TMP/q8_0.gguf" -p "Once" -n 2 --temp 0 --json >"$TMP/r.json" 2>"$TMP/err" \
  && jq -e '(.isa | length) > 0 and (.cpu_flags | type) == "string"' "$TMP/r.json" >/dev/null \
  && ok || fail "run --json isa/cpu_flags: $(cat "$TMP/r.json" "$TMP/err")"
# -d: the tests run on top of a filled KV cache; parsed, not timed
"$LARES" bench -m "$TMP/q8_0.gguf" -p 8 -n 2 -d 24 -r 1 -t 1 --json >"$TMP/bd.json" 2>"$TMP/err" \
  && ok || fail "bench -d: $(cat "$TMP/err")"
jq -e '.depth == 24 and (.tests | length) == 2 and all(.tests[]; .n_depth == 24 and .tok_s_mean > 0)
       and .tests[0].test == "pp8" and .tests[1].test == "tg2"' "$TMP/bd.json" >/dev/null && ok \
  || fail "bench -d json: $(cat "$TMP/bd.json")"
"$LARES" bench -m "$TMP/q8_0.gguf" -p 8 -n 2 --depth 24 -r 1 >"$TMP/bd.txt" 2>"$TMP/err" \
  && ok || fail "bench --depth: $(cat "$TMP/err")"
grep -Eq '^\| q8_0.gguf .*\| pp8 @ d24 \| [0-9.]+ ± [0-9.]+ \|$' "$TMP/bd.txt" && grep -Eq '\| tg2 @ d24 \|' "$TMP/bd.txt" \
  && ok || fail "bench -d rows: $(cat "$TMP/bd.txt")"
# a depth past the context given is refused before any work
"$LARES" bench -m "$TMP/q8_0.gguf" -p 8 -n 2 -d 100 -c 64 -r 1 2>"$TMP/err" && fail "depth past -c accepted" \
  || { [ "$(wc -l <"$TMP/err")" -eq 1 ] && grep -q "depth 100" "$TMP/err" && ok || fail "depth past -c message: $(cat "$TMP/err")"; }
"$LARES" bench -m "$TMP/q8_0.gguf" -d -5 2>"$TMP/err" && fail "negative depth accepted" \
  || { grep -q -- "-d" "$TMP/err" && ok || fail "negative depth message: $(cat "$TMP/err")"; }

# bad requests: one line, non-zero exit, no output file
"$LARES" quantize "$TMP/f32.gguf" "$TMP/bad.gguf" q9_9 2>"$TMP/err" && fail "unknown type accepted" \
  || { [ "$(wc -l <"$TMP/err")" -eq 1 ] && grep -q "q9_9" "$TMP/err" && ok || fail "unknown type message: $(cat "$TMP/err")"; }
[ ! -e "$TMP/bad.gguf" ] && ok || fail "a refused quantize left a file"
head -c 4096 "$TMP/f32.gguf" >"$TMP/trunc.gguf"
"$LARES" quantize "$TMP/trunc.gguf" "$TMP/bad.gguf" q8_0 2>"$TMP/err" && fail "truncated input accepted" \
  || { grep -q "error" "$TMP/err" && ok || fail "truncated input message: $(cat "$TMP/err")"; }
[ ! -e "$TMP/bad.gguf" ] && ok || fail "a failed quantize left a file"
"$LARES" synth --preset llama-99b --type q8_0 -o "$TMP/bad.gguf" --vocab-from "$V" 2>"$TMP/err" \
  && fail "unknown preset accepted" || { grep -q "llama-99b" "$TMP/err" && ok || fail "preset message: $(cat "$TMP/err")"; }
"$LARES" bench -m "$TMP/missing.gguf" 2>"$TMP/err" && fail "missing model accepted" \
  || { grep -q "missing.gguf" "$TMP/err" && ok || fail "missing model message: $(cat "$TMP/err")"; }
"$LARES" bench -m "$TMP/q8_0.gguf" -p 0 -n 0 2>"$TMP/err" && fail "bench with nothing to measure accepted" || ok
finish
