#!/usr/bin/env bash
# lares perplexity (issue 14): perplexity over a text made here (stories260K
# generates it with fixed seeds), the running estimate and final line of the
# human output, the --json fields, the KL-divergence base saved from the F16
# TinyStories-656K and compared with its Q8_0 file and with itself, and bad
# requests refused in one line with a non-zero exit. Parsed, never timed.
. "$(dirname "$0")/lib.sh"
need jq
S260=$(model stories260K.gguf)
F16=$(model TinyStories-656K.f16.gguf)
Q8=$(model TinyStories-656K-Q8_0.raincandy.gguf)

one_line_error() { # $1: what must be in the message; the rest: the command
  local want=$1
  shift
  if "$@" >"$TMP/out" 2>"$TMP/err"; then
    fail "accepted: $*"
    return
  fi
  [ "$(wc -l <"$TMP/err")" -eq 1 ] && grep -q "^lares: error: .*$want" "$TMP/err" && ok \
    || fail "'$want' expected in one line for: $* ; got: $(cat "$TMP/err")"
}

# ---- the text: three seeded stories (deterministic) ----
for seed in 1 2 3; do
  "$LARES" run -m "$S260" -p "Once upon a time" -n 400 --temp 0.9 --seed "$seed" -c 512 -t 2 \
    2>>"$TMP/gen.err" || fail "generating the text: $(cat "$TMP/gen.err")"
  echo
done >"$TMP/text.txt"
n_tok=$("$LARES" tokenize -m "$S260" --ids <"$TMP/text.txt" | wc -w)
[ "$n_tok" -ge 1024 ] && ok || fail "the text has $n_tok tokens, 1024 wanted"

# ---- stories260K, default chunk (512: its trained context) ----
"$LARES" perplexity -m "$S260" -f "$TMP/text.txt" -t 2 --json >"$TMP/p.json" 2>"$TMP/err" && ok \
  || fail "perplexity --json: $(cat "$TMP/err")"
chunks=$((n_tok / 512))
jq -e --argjson c "$chunks" --argjson n "$n_tok" \
  '.n_ctx == 512 and .n_chunks == $c and .n_tokens == $n and .n_scored == $c * 255' \
  "$TMP/p.json" >/dev/null && ok || fail "chunking: $(jq -c '{n_ctx, n_chunks, n_tokens, n_scored}' "$TMP/p.json") for $n_tok tokens"
jq -e '(.ppl | isinfinite | not) and .ppl > 1 and .ppl < 100 and .ppl_err > 0
       and ((.nll | exp) - .ppl | fabs) < 1e-9 * .ppl' "$TMP/p.json" >/dev/null && ok \
  || fail "ppl: $(jq -c '{ppl, ppl_err, nll}' "$TMP/p.json")"
jq -e '(.isa | length) > 0 and has("cpu_flags") and has("ms") and (has("kld") | not)' \
  "$TMP/p.json" >/dev/null && ok || fail "json fields: $(cat "$TMP/p.json")"
ppl=$(jq -r '.ppl' "$TMP/p.json")

# the human output: a running estimate per chunk on stderr, the final line on stdout
"$LARES" perplexity -m "$S260" -f "$TMP/text.txt" -t 2 >"$TMP/p.txt" 2>"$TMP/err" && ok \
  || fail "perplexity: $(cat "$TMP/err")"
running=$(grep -Eo '\[[0-9]+\][0-9]+\.[0-9]+,' "$TMP/err" | wc -l)
[ "$running" -eq "$chunks" ] && ok || fail "$running running estimates for $chunks chunks: $(cat "$TMP/err")"
grep -Eq "^\[1\][0-9.]+,\[$chunks\][0-9.]+,$" "$TMP/err" && ok || fail "running line: $(cat "$TMP/err")"
final=$(sed -nE 's/^Final estimate: PPL = ([0-9.]+) \+\/- ([0-9.]+)$/\1/p' "$TMP/p.txt")
[ -n "$final" ] && awk -v a="$final" -v b="$ppl" 'BEGIN { exit !(a - b < 1e-4 && b - a < 1e-4) }' \
  && ok || fail "final line '$(cat "$TMP/p.txt")' against the json's $ppl"

# smaller chunks, fewer of them
"$LARES" perplexity -m "$S260" -f "$TMP/text.txt" -c 128 --chunks 3 -b 50 -t 2 --json \
  >"$TMP/p128.json" 2>"$TMP/err" || fail "perplexity -c 128: $(cat "$TMP/err")"
jq -e '.n_ctx == 128 and .n_chunks == 3 and .n_scored == 189 and .ppl > 1' "$TMP/p128.json" \
  >/dev/null && ok || fail "-c 128 --chunks 3: $(cat "$TMP/p128.json")"

# the batch is speed only: F32 weights give the same figure with any -b
"$LARES" perplexity -m "$S260" -f "$TMP/text.txt" -c 128 --chunks 3 -b 7 -t 2 --json \
  >"$TMP/p128b7.json" 2>"$TMP/err" || fail "perplexity -b 7: $(cat "$TMP/err")"
jq -e --slurpfile a "$TMP/p128.json" '((.ppl - $a[0].ppl) | fabs) <= 1e-6 * .ppl' "$TMP/p128b7.json" \
  >/dev/null && ok || fail "-b 7 gives $(jq .ppl "$TMP/p128b7.json"), -b 50 $(jq .ppl "$TMP/p128.json")"

# ---- KL divergence: base from the F16 656K model, compared with its Q8_0 file ----
"$LARES" perplexity -m "$F16" -f "$TMP/text.txt" -c 128 -t 2 --kl-divergence-base "$TMP/base.kld" \
  --json >"$TMP/base.json" 2>"$TMP/err" && ok || fail "saving the base: $(cat "$TMP/err")"
nch=$(jq -r '.n_chunks' "$TMP/base.json")
[ "$nch" -ge 2 ] && ok || fail "base chunks: $nch"
want=$((40 + 4 * 128 * nch + 8 + nch * (63 * 2048 * 4 + 8)))
[ "$(stat -c %s "$TMP/base.kld")" -eq "$want" ] && ok \
  || fail "base file of $(stat -c %s "$TMP/base.kld") bytes, $want expected"
[ ! -e "$TMP/base.kld.part" ] && ok || fail "a .part file was left"

"$LARES" perplexity -m "$Q8" -f "$TMP/text.txt" -t 2 --kl-divergence-base "$TMP/base.kld" \
  --kl-divergence --json >"$TMP/q8.json" 2>"$TMP/err" && ok || fail "compare q8_0: $(cat "$TMP/err")"
jq -e --slurpfile b "$TMP/base.json" '.n_ctx == 128 and .n_chunks == $b[0].n_chunks
       and .n_scored == $b[0].n_scored and .kld.base_ppl == $b[0].ppl' "$TMP/q8.json" >/dev/null \
  && ok || fail "q8_0 against the base's figures: $(jq -c 'del(.kld)' "$TMP/q8.json") / $(cat "$TMP/base.json")"
jq -e '.kld.mean >= 0 and .kld.mean < 0.05 and .kld.err >= 0 and .kld.min >= 0
       and .kld.min <= .kld.median and .kld.median <= .kld.p99 and .kld.p99 <= .kld.max
       and .kld.same_top_pct >= 0 and .kld.same_top_pct <= 100 and .kld.same_top_pct > 50
       and (.kld.ppl_ratio - .ppl / .kld.base_ppl | fabs) < 1e-6 and (.kld.dp_mean_pct | fabs) < 5' \
  "$TMP/q8.json" >/dev/null && ok || fail "q8_0 kld: $(jq -c .kld "$TMP/q8.json")"
# the human report of a comparison
"$LARES" perplexity -m "$Q8" -t 2 --kl-divergence-base "$TMP/base.kld" --kl-divergence \
  >"$TMP/q8.txt" 2>"$TMP/err" && ok || fail "compare q8_0 without -f: $(cat "$TMP/err")"
for line in '^Final estimate: PPL = ' '^Mean PPL\(Q\)/PPL\(base\) *: ' '^Mean    KLD: ' \
  '^Median  KLD: ' '^Maximum KLD: ' '^Same top p: ' '^Mean    Δp: '; do
  grep -Eq "$line" "$TMP/q8.txt" && ok || fail "no '$line' in: $(cat "$TMP/q8.txt")"
done

# a model against its own base: nothing differs
"$LARES" perplexity -m "$F16" -t 2 --kl-divergence-base "$TMP/base.kld" --kl-divergence --json \
  >"$TMP/self.json" 2>"$TMP/err" && ok || fail "self compare: $(cat "$TMP/err")"
jq -e '.kld.mean <= 1e-6 and .kld.max <= 1e-6 and .kld.same_top_pct == 100
       and (.kld.ppl_ratio - 1 | fabs) < 1e-6 and (.kld.dp_rms_pct | fabs) < 1e-4' \
  "$TMP/self.json" >/dev/null && ok || fail "self kld: $(jq -c .kld "$TMP/self.json")"

# ---- refusals: one line, non-zero exit ----
head -c 5000 "$TMP/base.kld" >"$TMP/trunc.kld"
one_line_error "truncated" "$LARES" perplexity -m "$Q8" --kl-divergence-base "$TMP/trunc.kld" --kl-divergence
cp "$TMP/base.kld" "$TMP/bad.kld"
printf '\x07' | dd of="$TMP/bad.kld" bs=1 seek=$((want - 100)) conv=notrunc status=none
one_line_error "checksum" "$LARES" perplexity -m "$Q8" --kl-divergence-base "$TMP/bad.kld" --kl-divergence
one_line_error "another vocabulary" "$LARES" perplexity -m "$S260" --kl-divergence-base "$TMP/base.kld" --kl-divergence
sed 's/a/e/g' "$TMP/text.txt" >"$TMP/other.txt"
one_line_error "another text" "$LARES" perplexity -m "$Q8" -f "$TMP/other.txt" --kl-divergence-base "$TMP/base.kld" --kl-divergence
one_line_error "not a lares KL-divergence base" "$LARES" perplexity -m "$Q8" --kl-divergence-base "$F16" --kl-divergence
one_line_error "missing.kld" "$LARES" perplexity -m "$Q8" --kl-divergence-base "$TMP/missing.kld" --kl-divergence
one_line_error "differs from the 128" "$LARES" perplexity -m "$Q8" -c 64 --kl-divergence-base "$TMP/base.kld" --kl-divergence
head -c 300 "$TMP/text.txt" >"$TMP/short.txt"
one_line_error "needed for 2 chunks of 512" "$LARES" perplexity -m "$S260" -f "$TMP/short.txt"
one_line_error "missing.txt" "$LARES" perplexity -m "$S260" -f "$TMP/missing.txt"
one_line_error "-c" "$LARES" perplexity -m "$S260" -f "$TMP/text.txt" -c 2
one_line_error "-c" "$LARES" perplexity -m "$S260" -f "$TMP/text.txt" -c many
one_line_error "no model" "$LARES" perplexity -f "$TMP/text.txt"
one_line_error "no text" "$LARES" perplexity -m "$S260"
one_line_error "needs the base file" "$LARES" perplexity -m "$S260" -f "$TMP/text.txt" --kl-divergence
one_line_error "needs a value" "$LARES" perplexity -m "$S260" -f
one_line_error "unknown option" "$LARES" perplexity -m "$S260" -f "$TMP/text.txt" --bogus
one_line_error "cannot create" "$LARES" perplexity -m "$S260" -f "$TMP/text.txt" -c 128 \
  --kl-divergence-base "$TMP/no/such/dir/base.kld"
"$LARES" perplexity --help >"$TMP/help" 2>&1 && grep -q "kl-divergence-base" "$TMP/help" && ok \
  || fail "--help: $(cat "$TMP/help")"
finish
