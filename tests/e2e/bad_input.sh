#!/usr/bin/env bash
# Bad input gets one line of error on stderr and a non-zero exit: a truncated
# GGUF, a tensor offset past the end, an unknown architecture, an unknown tensor
# type, a missing tensor, -n beyond the context, bad options.
. "$(dirname "$0")/lib.sh"
MKBAD=${MAKE_BAD_GGUF:?MAKE_BAD_GGUF must point at the helper}
SRC=$(model stories260K.gguf)

expect_error() { # name expected-substring command...
  local name=$1 want=$2
  shift 2
  "$@" >"$TMP/out" 2>"$TMP/err"
  local rc=$?
  local lines
  lines=$(grep -c . "$TMP/err")
  if [ "$rc" -eq 0 ]; then
    fail "$name: exit code 0"
  elif [ "$lines" -ne 1 ]; then
    fail "$name: $lines lines on stderr: $(cat "$TMP/err")"
  elif ! grep -qF -- "$want" "$TMP/err"; then
    fail "$name: stderr lacks '$want': $(cat "$TMP/err")"
  else
    ok
  fi
}

for kind in truncated offset-past-end unknown-arch unknown-type missing-tensor; do
  "$MKBAD" "$kind" "$SRC" "$TMP/$kind.gguf" || fail "could not make $kind"
done
expect_error truncated "overruns" "$LARES" run -m "$TMP/truncated.gguf" -p hi -n 4
expect_error offset-past-end "overruns" "$LARES" run -m "$TMP/offset-past-end.gguf" -p hi -n 4
expect_error unknown-arch "unknown architecture 'gpt-j-9000'" "$LARES" run -m "$TMP/unknown-arch.gguf" -p hi -n 4
expect_error unknown-type "unknown tensor type 99" "$LARES" run -m "$TMP/unknown-type.gguf" -p hi -n 4
expect_error missing-tensor "missing tensor 'blk.1.ffn_up.weight'" "$LARES" run -m "$TMP/missing-tensor.gguf" -p hi -n 4
expect_error context "the context holds 64" "$LARES" run -m "$SRC" -p "Once upon a time" -n 100 -c 64
expect_error no-file "No such file" "$LARES" run -m "$TMP/nope.gguf" -p hi
expect_error not-gguf "not a GGUF file" "$LARES" run -m "$MODELS/llama2c/tok512.bin" -p hi
expect_error bad-n "-n: 'x' is not a whole number" "$LARES" run -m "$SRC" -p hi -n x
expect_error bad-opt "unknown option '--frobnicate'" "$LARES" run -m "$SRC" -p hi --frobnicate
expect_error no-model "no model given" "$LARES" run -p hi
expect_error bad-cmd "unknown command 'fly'" "$LARES" fly
expect_error bad-isa "unknown instruction set 'sse9'" "$LARES" run -m "$SRC" -p hi --isa sse9
finish
