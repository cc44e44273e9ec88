#!/usr/bin/env bash
# GPU offload options (issue 10): bad combinations are one-line errors; without
# a usable CUDA device --offload fails with the reason (built without CUDA, or
# no device) and never silently runs on the CPU; `lares plan --offload` prints
# both placements without a GPU when given --gpu-mem; --offload none runs as
# before (same tokens as no option at all); on the emulated device (issue 22)
# whole layers, affinity and product-by-product runs give the CPU's tokens.
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

# the whole GPU path on the emulated device (host memory, the CPU's own code):
# whole layers, the last layer alone (layers at half the file), affinity at half
# the file (whatever its measured figures make it place) and product by
# product each give the CPU's tokens, and --json says what ran where
F16=$(model TinyStories-656K.f16.gguf)
"$LARES" run -m "$F16" -p "Once upon a time" -n 24 --temp 0 --json >"$TMP/cpu.json" 2>/dev/null ||
  fail "cpu run"
half=$(( $(wc -c <"$F16") / 2 ))
for v in whole half affinity products; do
  case $v in
  whole) LARES_GPU_BACKEND=emulated "$LARES" run -m "$F16" -p "Once upon a time" -n 24 --temp 0 \
    --json --offload layers >"$TMP/$v.json" 2>"$TMP/err" ;;
  half) LARES_GPU_BACKEND=emulated "$LARES" run -m "$F16" -p "Once upon a time" -n 24 --temp 0 \
    --json --offload layers --gpu-mem "$half" >"$TMP/$v.json" 2>"$TMP/err" ;;
  affinity) LARES_GPU_BACKEND=emulated "$LARES" run -m "$F16" -p "Once upon a time" -n 24 \
    --temp 0 --json --offload affinity --gpu-mem "$half" >"$TMP/$v.json" 2>"$TMP/err" ;;
  products) LARES_GPU_BACKEND=emulated LARES_GPU_LAYERS=products "$LARES" run -m "$F16" \
    -p "Once upon a time" -n 24 --temp 0 --json --offload layers >"$TMP/$v.json" 2>"$TMP/err" ;;
  esac
  python3 - "$TMP/cpu.json" "$TMP/$v.json" "$v" <<'PY' && ok || fail "emulated $v: $(cat "$TMP/err")"
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
g = b["gpu"]
assert a["generated_ids"] == b["generated_ids"], (a["generated_ids"], b["generated_ids"])
assert g["backend"] == "emulated" and g["matrices"] == 15
if sys.argv[3] == "whole":
    assert g["layers_device"] == 2 and g["layer_runs"] >= 2 * 24, g
    assert g["matrices_gpu"] == 15 and g["weight_bytes"] == g["model_weight_bytes"], g
elif sys.argv[3] == "half":
    assert 0 < g["weight_bytes"] <= g["budget_bytes"] < g["model_weight_bytes"], g
    assert g["layers_device"] == 1 and g["layer_runs"] >= 24, g
elif sys.argv[3] == "affinity":
    assert g["method"] == "affinity" and g["weight_bytes"] <= g["budget_bytes"], g
else:
    assert g["layers_device"] == 0 and g["layer_runs"] == 0 and g["products"] > 0, g
PY
done
LARES_GPU_BACKEND=emulated "$LARES" bench -m "$F16" -p 8 -n 4 -r 1 --offload layers --json \
  >"$TMP/bench.json" 2>"$TMP/err" && python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
assert [t["test"] for t in d["tests"]] == ["pp8", "tg4"] and all(t["tok_s_mean"] > 0 for t in d["tests"])
' "$TMP/bench.json" && ok || fail "bench --offload on the emulated device: $(cat "$TMP/err")"
expect_error bench-mem-alone "need --offload" "$LARES" bench -m "$F16" -p 8 -n 0 --gpu-mem 1G

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
