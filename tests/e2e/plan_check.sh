#!/usr/bin/env bash
# lares plan --check (issue 16): on a loopback ring of the head and two
# workers (an automatic ring.json), every placement runs for a few tokens and
# is reported with its prediction beside its measurement, per device and per
# token, as text and as JSON; the figures are checked for presence and
# consistency (not for accuracy: the machine is shared). Then bad input.
. "$(dirname "$0")/lib.sh"
. "$LARES_SRC/tests/cluster/ring_lib.sh"
ring_trap
need jq
export RING_MODEL
RING_MODEL=$(model stories260K.gguf)

ring_worker a || exit 1; AA=$WORKER_ADDR
ring_worker b || exit 1; BB=$WORKER_ADDR
{
  printf '{"profile_ms": 200, "timeout_ms": 10000, "connect_timeout_ms": 10000, "devices": [\n'
  printf '  {"name": "head", "key": "%s"},\n' "$TMP/head.key"
  printf '  {"name": "a", "address": "%s", "public_key": "%s", "model": "%s", "threads": 1},\n' \
    "$AA" "$TMP/a.key.pub" "$RING_MODEL"
  printf '  {"name": "b", "address": "%s", "public_key": "%s", "model": "%s", "threads": 1}\n' \
    "$BB" "$TMP/b.key.pub" "$RING_MODEL"
  printf ']}\n'
} >"$TMP/auto.json"

"$LARES" plan --check -m "$RING_MODEL" --ring "$TMP/auto.json" -n 8 -t 1 -c 64 --json \
  >"$TMP/check.json" 2>"$TMP/check.err" && ok || fail "plan --check: $(cat "$TMP/check.err")"
# the four placements in order, each run with its prediction and measurement
jq -e '[.placements[].placement] == ["halda", "memory", "single", "even"]
    and (.cpu_flags | length > 0) and (.isa | length > 0)' "$TMP/check.json" >/dev/null \
  && ok || fail "placements: $(jq -c '[.placements[] | {placement, error}]' "$TMP/check.json")"
jq -e '[.placements[] | .made_by == .placement and .tokens == 8 and .k >= 1
        and .predicted_token_ms > 0 and .measured_token_ms > 0
        and (.ratio - .measured_token_ms / .predicted_token_ms | fabs) < 1e-6
        and (.devices | length) >= 1
        and ([.devices[] | .layers >= 1 and .predicted_layer_ms > 0 and .measured_layer_ms > 0
              and .predicted_token_ms > 0
              and (.measured_compute_ms - .measured_layer_ms * .layers | fabs) < 1e-6] | all)]
     | all' "$TMP/check.json" >/dev/null \
  && ok || fail "figures: $(jq -c '.placements' "$TMP/check.json")"
# single runs everything on one device; even spreads over all three
jq -e '(.placements[] | select(.placement == "single") | .devices | length) == 1
    and (.placements[] | select(.placement == "even") | .devices | length) == 3
    and ([.placements[] | [.devices[].layers] | add] | unique | length) == 1' "$TMP/check.json" >/dev/null \
  && ok || fail "layers: $(jq -c '[.placements[] | {placement, devices: [.devices[] | {name, layers}]}]' "$TMP/check.json")"

# text: a row per placement, a line per device
"$LARES" plan --check -m "$RING_MODEL" --ring "$TMP/auto.json" -n 8 -t 1 -c 64 \
  --placements "halda,even" >"$TMP/check.txt" 2>"$TMP/check.err" \
  && grep -Eq "^halda +[0-9]+ +[0-9.]+ +[0-9.]+ +[0-9.]+$" "$TMP/check.txt" \
  && grep -Eq "^even +[0-9]+ +[0-9.]+ +[0-9.]+ +[0-9.]+$" "$TMP/check.txt" \
  && grep -Eq "^  a +layers [0-9]+ +ms/layer [0-9.]+ predicted, [0-9.]+ measured" "$TMP/check.txt" \
  && ! grep -q "^memory" "$TMP/check.txt" \
  && ok || fail "text: $(cat "$TMP/check.txt" "$TMP/check.err")"

# bad input: no ring, a ring with a shape, a placement that does not exist
"$LARES" plan --check -m "$RING_MODEL" >/dev/null 2>"$TMP/e1.err"
[ $? -eq 2 ] && grep -q "lares plan --check -m MODEL --ring RING.json" "$TMP/e1.err" && ok \
  || fail "--check without --ring: $(cat "$TMP/e1.err")"
"$LARES" plan --check --shape llama2-7b:q4_k_m --ring "$TMP/auto.json" >/dev/null 2>"$TMP/e2.err"
[ $? -eq 2 ] && ok || fail "--check with --shape: $(cat "$TMP/e2.err")"
"$LARES" plan --check -m "$RING_MODEL" --ring "$TMP/auto.json" -n 2 -t 1 -c 64 \
  --placements fastest --json >"$TMP/e3.json" 2>"$TMP/e3.err"
[ $? -eq 1 ] && jq -e '.placements[0].error | test("fastest")' "$TMP/e3.json" >/dev/null \
  && grep -q "no placement could run" "$TMP/e3.err" && ok \
  || fail "--placements fastest: $(cat "$TMP/e3.json" "$TMP/e3.err")"
"$LARES" plan --check -m "$RING_MODEL" --ring "$TMP/auto.json" -n 1 >/dev/null 2>&1
[ $? -eq 2 ] && ok || fail "-n 1 accepted"
# the workers take --isa like the rest (a bad family is refused before listening)
"$LARES" worker --listen 127.0.0.1:0 --insecure --isa z80 >/dev/null 2>"$TMP/wisa.err"
[ $? -eq 1 ] && grep -q "z80" "$TMP/wisa.err" && ok || fail "worker --isa z80: $(cat "$TMP/wisa.err")"
ring_cleanup
finish
