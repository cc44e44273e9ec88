#!/usr/bin/env bash
# Automatic rings (issue 7): ring.json without windows, the workers profile
# themselves, the head measures the hops and plans with Halda. On loopback
# with a head that may give the model little memory (ring.json "memory"), the
# plan puts layers on a worker; the greedy text is the one-device text, and
# --json shows the placement with the predicted figure beside the measured
# one for every device in the ring. A worker lost mid-way: the re-plan goes
# through the planner and the text still matches. Bad input: a placement with
# explicit windows, devices that cannot hold the model.
. "$(dirname "$0")/lib.sh"
. "$LARES_SRC/tests/cluster/ring_lib.sh"
ring_trap
need jq
export RING_MODEL
RING_MODEL=$(model stories260K.gguf)
PROMPT="Once upon a time"

# auto_json FILE HEAD_MEMORY "TOP-LEVEL EXTRAS" "PER-WORKER EXTRAS" [NAME ADDR]...
auto_json() {
  local file=$1 mem=$2 extra=$3 dev_extra=$4
  shift 4
  {
    printf '{"profile_ms": 200, "timeout_ms": 10000, "connect_timeout_ms": 10000, %s "devices": [\n' "$extra"
    printf '  {"name": "head", "key": "%s", "memory": "%s"}' "$TMP/head.key" "$mem"
    while [ $# -ge 2 ]; do
      printf ',\n  {"name": "%s", "address": "%s", "public_key": "%s", "model": "%s", "threads": 1%s}' \
        "$1" "$2" "$TMP/$1.key.pub" "$RING_MODEL" "$dev_extra"
      shift 2
    done
    printf '\n]}\n'
  } >"$file"
}

# cached profiles: a worker asked back (rejoin) answers at once
ring_worker a --profile-cache "$TMP/cache-a" || exit 1; AA=$WORKER_ADDR; APID=$WORKER_PID
ring_worker b --profile-cache "$TMP/cache-b" || exit 1; BB=$WORKER_ADDR; BPID=$WORKER_PID

"$LARES" run -m "$RING_MODEL" -p "$PROMPT" -n 32 --temp 0 -t 1 --json >"$TMP/local.json" 2>"$TMP/local.err" \
  || fail "local run: $(cat "$TMP/local.err")"
want=$(jq -c .generated_ids "$TMP/local.json")

# ---- halda: 49 MiB for the head leaves it about one layer besides the
# executor's 48 MiB reserve, so the planner must use a worker ----
auto_json "$TMP/auto.json" 49MiB "" "" a "$AA" b "$BB"
if "$LARES" run -m "$RING_MODEL" -p "$PROMPT" -n 32 --temp 0 -t 1 --json --rebalance off \
    --ring "$TMP/auto.json" >"$TMP/auto.out" 2>"$TMP/auto.err"; then
  got=$(jq -c .generated_ids "$TMP/auto.out")
  [ "$got" = "$want" ] && ok || fail "automatic ring: $got, one device: $want"
  jq -e '.ring.placement == "halda" and .ring.predicted_token_ms > 0' "$TMP/auto.out" >/dev/null \
    && ok || fail "automatic ring: placement and prediction: $(jq -c .ring "$TMP/auto.out")"
  # every device with layers: predicted beside measured; a worker among them
  jq -e '[.ring.device[] | select(.in_ring and .w > 0)] as $r
         | ($r | length) >= 2 and ([$r[] | .predicted_ms > 0 and .measured_ms > 0
             and .predicted_token_ms > 0 and .measured_token_ms > 0] | all)
         and ([$r[] | select(.address != "") | .windows_run > 0] | any)
         and ([.ring.device[] | select(.in_ring | not) | .w == 0 and .predicted_ms == null] | all)' \
    "$TMP/auto.out" >/dev/null \
    && ok || fail "automatic ring: per-device figures: $(jq -c .ring.device "$TMP/auto.out")"
else
  fail "automatic ring: $(cat "$TMP/auto.err")"
fi
# the human report: predicted beside measured per device
"$LARES" run -m "$RING_MODEL" -p "$PROMPT" -n 8 --temp 0 -t 1 --rebalance off \
  --ring "$TMP/auto.json" >/dev/null 2>"$TMP/human.err" || fail "human report run: $(cat "$TMP/human.err")"
grep -q "placement halda" "$TMP/human.err" && grep -Eq "predicted [0-9.]+ ms/token .*measured [0-9.]+ ms/token" "$TMP/human.err" \
  && ok || fail "human report lacks predicted/measured: $(cat "$TMP/human.err")"

# ---- a baseline by name: "even" is the plain split (no planner, no prediction) ----
auto_json "$TMP/even.json" 49MiB '"placement": "even",' "" a "$AA" b "$BB"
"$LARES" run -m "$RING_MODEL" -p "$PROMPT" -n 32 --temp 0 -t 1 --json --rebalance off \
  --ring "$TMP/even.json" >"$TMP/even.out" 2>"$TMP/even.err" || fail "even ring: $(cat "$TMP/even.err")"
[ "$(jq -c .generated_ids "$TMP/even.out")" = "$want" ] \
  && jq -e '.ring.placement == "even" and .ring.devices == 3 and (.ring | has("predicted_token_ms") | not)' "$TMP/even.out" >/dev/null \
  && ok || fail "even ring: $(jq -c .ring "$TMP/even.out")"

# ---- --placement overrides ring.json's: the "single" baseline ----
"$LARES" run -m "$RING_MODEL" -p "$PROMPT" -n 32 --temp 0 -t 1 --json --rebalance off --placement single \
  --ring "$TMP/auto.json" >"$TMP/single.out" 2>"$TMP/single.err" || fail "--placement single: $(cat "$TMP/single.err")"
[ "$(jq -c .generated_ids "$TMP/single.out")" = "$want" ] \
  && jq -e '.ring.placement == "single" and .ring.predicted_token_ms > 0
           and ([.ring.device[] | select(.w > 0)] | length) == 1' "$TMP/single.out" >/dev/null \
  && ok || fail "--placement single: $(jq -c .ring "$TMP/single.out")"

# ---- failover in an automatic ring: the re-plan comes from the planner ----
"$LARES" run -m "$RING_MODEL" -p "$PROMPT" -n 300 --temp 0 -t 1 >"$TMP/long.out" 2>/dev/null
auto_json "$TMP/fail.json" 49MiB "" ', "link_delay_ms": 10' a "$AA" b "$BB"
na=$(wc -l <"$TMP/a.log"); nb=$(wc -l <"$TMP/b.log")
"$LARES" run -m "$RING_MODEL" -p "$PROMPT" -n 300 --temp 0 -t 1 -v --rebalance off --ring "$TMP/fail.json" \
  >"$TMP/fail.out" 2>"$TMP/fail.err" &
HEAD_PID=$!
for i in $(seq 1 400); do
  [ "$(wc -c <"$TMP/fail.out")" -gt 40 ] && break
  kill -0 "$HEAD_PID" 2>/dev/null || break
  sleep 0.05
done
# the worker the plan used is lost: both got the probe plan; the one left
# out was stopped after it
holds() { tail -n +$(($2 + 1)) "$TMP/$1.log" | grep -E "worker (plan|stopped):" | tail -1 | grep -q "worker plan:"; }
victim=
holds a "$na" && victim=$APID
holds b "$nb" && victim=$BPID
[ -n "$victim" ] && ok || fail "failover: no worker got layers: $(cat "$TMP/fail.err")"
kill -KILL "$victim" 2>/dev/null
for i in $(seq 1 300); do
  kill -0 "$HEAD_PID" 2>/dev/null || break
  sleep 0.1
done
if kill -0 "$HEAD_PID" 2>/dev/null; then
  kill -9 "$HEAD_PID"
  fail "failover: the head hangs ($victim)"
elif wait "$HEAD_PID"; then
  cmp -s "$TMP/fail.out" "$TMP/long.out" && ok || fail "failover: text differs from one device"
  # the survivors are the head and the worker the plan left out, which the
  # head kept watching (issue 15): the planner plans over both (the head alone
  # cannot hold the model)
  grep -q "failover: lost .*; new plan by planner (halda); plan head [0-9]* | [ab] [0-9]* (k=1) -> head [0-9]* | [ab] [0-9]*" "$TMP/fail.err" \
    && ok || fail "failover: the re-plan did not come from the planner over the left-out worker: $(grep -i 'cluster' "$TMP/fail.err")"
  # and from the rates the monitor measured under the plan before (issue 16)
  grep -Eq "cluster: measured rates: [a-z]+ computes at [0-9.]+x its profile's time" "$TMP/fail.err" \
    && ok || fail "failover: no rates learned from the monitor: $(grep -i 'cluster' "$TMP/fail.err")"
else
  fail "failover: $(cat "$TMP/fail.err")"
fi
ring_cleanup

# ---- bad input ----
ring_worker a || exit 1; AA=$WORKER_ADDR
# a placement asks the planner for windows the devices already give
ring_json "$TMP/explicit.json" '"placement": "halda",' 1 a "$AA" 4
if "$LARES" run -m "$RING_MODEL" -p "$PROMPT" -n 4 --temp 0 -t 1 --ring "$TMP/explicit.json" >/dev/null 2>"$TMP/explicit.err"; then
  fail "a placement with explicit windows was accepted"
else
  grep -q '"placement": "halda" chooses the windows, but every device gives "w"' "$TMP/explicit.err" && ok \
    || fail "explicit windows with a placement: $(cat "$TMP/explicit.err")"
fi
if "$LARES" run -m "$RING_MODEL" -p "$PROMPT" -n 4 -t 1 --placement fastest --ring "$TMP/auto.json" >/dev/null 2>"$TMP/pl.err"; then
  fail "--placement fastest was accepted"
else
  grep -q 'placement "fastest": halda, memory, single or even' "$TMP/pl.err" && ok || fail "--placement fastest: $(cat "$TMP/pl.err")"
fi
# no device can hold the model: a clear error from the planner, no hang
auto_json "$TMP/small.json" 1MiB "" ', "memory": "1MiB"' a "$AA"
if timeout 60 "$LARES" run -m "$RING_MODEL" -p "$PROMPT" -n 4 --temp 0 -t 1 --ring "$TMP/small.json" >/dev/null 2>"$TMP/small.err"; then
  fail "a ring that cannot hold the model ran"
else
  grep -q "small.json: automatic placement (halda) over 2 devices: .*cannot hold" "$TMP/small.err" && ok \
    || fail "devices too small: $(cat "$TMP/small.err")"
fi
finish
