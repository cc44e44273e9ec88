#!/usr/bin/env bash
# lares tokenize on vocabulary-only files and on models, from -p and stdin,
# against the reference vectors (.inp/.out: tokenized without BOS/EOS).
. "$(dirname "$0")/lib.sh"
need jq
for v in ggml-vocab-llama-spm.gguf ggml-vocab-phi-3.gguf; do
  V=$(model "vocab/$v")
  inp="$V.inp"
  out="$V.out"
  # the .inp strings are separated by a line __ggml_vocab_test__; check the first eight
  n=0
  while IFS= read -r -d $'\x1e' text && [ $n -lt 8 ]; do
    n=$((n + 1))
    want="[$(sed -n "${n}p" "$out" | sed 's/^ *//; s/ *$//; s/ \+/, /g')]"
    got=$(printf '%s' "$text" | "$LARES" tokenize -m "$V" --ids --no-bos)
    [ "$got" = "$want" ] && ok || fail "$v string $n: got $got want $want"
  done < <(awk 'BEGIN{RS="\n__ggml_vocab_test__\n"; ORS="\x1e"} {print}' "$inp")
done
M=$(model stories260K.gguf)
got=$("$LARES" tokenize -m "$M" --ids -p "Once upon a time")
[ "$got" = "[1, 403, 407, 261, 378]" ] && ok || fail "stories260K: $got"
"$LARES" tokenize -m "$M" -p "Once upon" | grep -q "403 -> '" && ok || fail "piece listing"
finish
