#!/usr/bin/env bash
# GPU offload options (issue 10): bad combinations are one-line errors; without
# a usable CUDA device --offload fails with the reason (built without CUDA, or
# no device) and never silently runs on the CPU; `lares plan --offload` prints
# both placements without a GPU when given --gpu-mem; --offload none runs as
# before (same tokens as no option at all).
. "$(dirname "$0")/lib.sh"
need python3
SRC=$(model stories260K.gguf)

expect_error() { # name expected-substring command...
  local name=$1 want=$2
  shift 2
  "$@" >"$TMP/out" 2>"$TMP/err"
  local rc=$?
  if [ "$rc" -eq 0 ]; then
    fail "$name: exit code 0"
  elif [ "$(grep -c . "$TMP/err")" -ne 1 ]; then
    fail "$name: not one line on stderr: $(cat "$TMP/err")"
  elif ! grep -qF -- "$want" "$TMP/err"; then
    fail "$name: stderr lacks '$want': $(cat "$TMP/err")"
  else
    ok
  fi
}

expect_error bad-method "'fast' is not none, layers or affinity" \
  "$LARES" run -m "$SRC" -p hi -n 2 --offload fast
expect_error mem-alone "need --offload" "$LARES" run -m "$SRC" -p hi -n 2 --gpu-mem 1G
expect_error layers-affinity "--gpu-layers goes with --offload layers" \
  "$LARES" run -m "$SRC" -p hi -n 2 --offload affinity --gpu-layers 2
expect_error bad-size "--gpu-mem" "$LARES" run -m "$SRC" -p hi -n 2 --offload layers --gpu-mem lots

# no usable device here (this test also runs in CUDA builds on machines without one)
if "$LARES" run -m "$SRC" -p hi -n 2 --offload affinity >"$TMP/out" 2>"$TMP/err"; then
  echo "$TEST_NAME: a CUDA device is present: the refusal is not checked" >&2
else
  if grep -qE "built without CUDA|cuda: no device|cuda: device 0 unusable" "$TMP/err"; then
    ok
  else
    fail "offload without a device: $(cat "$TMP/err")"
  fi
fi

# --offload none changes nothing
"$LARES" run -m "$SRC" -p "Once upon a time" -n 12 --temp 0 --json >"$TMP/a.json" 2>/dev/null ||
  fail "run without offload"
"$LARES" run -m "$SRC" -p "Once upon a time" -n 12 --temp 0 --json --offload none \
  >"$TMP/b.json" 2>/dev/null || fail "run with --offload none"
python3 - "$TMP/a.json" "$TMP/b.json" <<'PY' && ok || fail "--offload none changed the tokens"
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
ids = lambda j: j.get("generated_ids")
sys.exit(0 if ids(a) and ids(a) == ids(b) else 1)
PY

# the plan: both methods at one budget, JSON that parses, bytes within the budget
"$LARES" plan -m "$(model TinyStories-656K.f16.gguf)" --offload layers --gpu-mem 600K --json \
  >"$TMP/plan.json" 2>"$TMP/err" || fail "plan --offload: $(cat "$TMP/err")"
python3 - "$TMP/plan.json" <<'PY' && ok || fail "plan JSON: $(cat "$TMP/plan.json")"
import json, sys
p = json.load(open(sys.argv[1]))
assert p["chosen"] == "layers" and p["budget_bytes"] == 600 * 1024
for m in ("layers", "affinity"):
    assert p[m]["weight_bytes"] <= p["budget_bytes"]
    assert len(p[m]["tensors"]) == p[m]["n_tensors"]
assert p["layers"]["tensors"][0].startswith("blk.")
PY
expect_error plan-no-mem "no --gpu-mem and no device" \
  "$LARES" plan -m "$SRC" --offload affinity
expect_error plan-shape "--offload needs a model file" \
  "$LARES" plan --shape llama3-8b:q4_k_m --offload affinity --gpu-mem 4G
finish
