#!/usr/bin/env bash
# lares convert --from-llama2c: the converted stories260K generates exactly what
# the published stories260K.gguf generates, greedy and sampled.
. "$(dirname "$0")/lib.sh"
need jq
CK=$(model llama2c/stories260K.bin)
TK=$(model llama2c/tok512.bin)
G=$(model stories260K.gguf)
"$LARES" convert --from-llama2c "$CK" "$TK" "$TMP/out.gguf" 2>"$TMP/err" && ok || fail "convert: $(cat "$TMP/err")"
for args in "--temp 0 -n 60" "--temp 0.9 --seed 11 -n 60"; do
  for p in "Once upon a time" "The cat"; do
    a=$("$LARES" run -m "$TMP/out.gguf" -p "$p" $args --json | jq -c '[.prompt_ids, .generated_ids]')
    b=$("$LARES" run -m "$G" -p "$p" $args --json | jq -c '[.prompt_ids, .generated_ids]')
    [ -n "$a" ] && [ "$a" = "$b" ] && ok || fail "'$p' $args: converted $a vs gguf $b"
  done
done
# bad checkpoints
head -c 1000 "$CK" >"$TMP/short.bin"
"$LARES" convert --from-llama2c "$TMP/short.bin" "$TK" "$TMP/x.gguf" 2>"$TMP/err" \
  && fail "truncated checkpoint accepted" || { grep -q "bytes, but a checkpoint of this shape has" "$TMP/err" && ok || fail "message: $(cat "$TMP/err")"; }
"$LARES" convert --from-llama2c "$CK" "$CK" "$TMP/x.gguf" 2>"$TMP/err" \
  && fail "checkpoint as tokenizer accepted" || ok
[ ! -e "$TMP/x.gguf" ] && [ ! -e "$TMP/x.gguf.tmp" ] && ok || fail "a failed conversion left a file"
finish
