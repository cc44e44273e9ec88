#!/usr/bin/env bash
# lares run/chat --ring through worker processes on loopback: greedy output
# identical to one device (uneven windows, k = 1, 2 and 3 rounds, the head's
# own window included), the figures of the ring in --json, the workers' own
# lines (who connected, their layers, per-round timings), keygen's files.
. "$(dirname "$0")/lib.sh"
. "$LARES_SRC/tests/cluster/ring_lib.sh"
ring_trap
need jq

# ---- keygen: a 0600 pair, a public file, the key printed ----
"$LARES" keygen -o "$TMP/k.key" >"$TMP/k.out" 2>"$TMP/k.err" || fail "keygen: $(cat "$TMP/k.err")"
[ "$(stat -c %a "$TMP/k.key")" = 600 ] && ok || fail "key pair mode $(stat -c %a "$TMP/k.key")"
pub=$(cat "$TMP/k.out")
[ ${#pub} -eq 40 ] && grep -qF "public-key = $pub" "$TMP/k.key.pub" && grep -qF "public-key = $pub" "$TMP/k.key" \
  && grep -q "secret-key = " "$TMP/k.key" && ! grep -q secret "$TMP/k.key.pub" && ok \
  || fail "keygen files: $(cat "$TMP/k.out") / $(cat "$TMP/k.key.pub")"
if "$LARES" keygen -o "$TMP/k.key" >/dev/null 2>"$TMP/k2.err"; then
  fail "keygen overwrote a key"
else
  grep -q "never overwritten" "$TMP/k2.err" && ok || fail "keygen overwrite message: $(cat "$TMP/k2.err")"
fi

ring_worker w1 || exit 1; A1=$WORKER_ADDR
ring_worker w2 || exit 1; A2=$WORKER_ADDR
ring_worker w3 || exit 1; A3=$WORKER_ADDR

check_ring() { # model head_w [name addr w]...: ring ids == local ids
  local rel=$1
  shift
  export RING_MODEL
  RING_MODEL=$(model "$rel")
  ring_json "$TMP/ring.json" "" "$@"
  "$LARES" run -m "$RING_MODEL" -p "Once upon a time" -n 40 --temp 0 --json -t 1 >"$TMP/local.json" 2>"$TMP/local.err" \
    || { fail "$rel local run: $(cat "$TMP/local.err")"; return; }
  if ! "$LARES" run -m "$RING_MODEL" -p "Once upon a time" -n 40 --temp 0 --json -t 1 --ring "$TMP/ring.json" --rebalance off \
      >"$TMP/ring.out" 2>"$TMP/ring.err"; then
    fail "$rel ring ($*): $(cat "$TMP/ring.err")"
    return
  fi
  local want got
  want=$(jq -c .generated_ids "$TMP/local.json")
  got=$(jq -c .generated_ids "$TMP/ring.out")
  [ "$got" = "$want" ] && ok || fail "$rel ring ($*): $got, one device: $want"
  jq -e '.ring.devices >= 2 and .ring.hops > 0 and (.ring.device | length) == .ring.devices
         and ([.ring.device[1:][] | .windows_run > 0] | all)
         and ([.ring.device[] | .disk_wait_ms >= 0 and .disk_wait_ms <= .compute_ms] | all)' "$TMP/ring.out" >/dev/null \
    && ok || fail "$rel ring figures: $(jq -c .ring "$TMP/ring.out")"
}

check_ring stories260K.gguf 1 w1 "$A1" 3 w2 "$A2" 1                  # k=1, uneven
check_ring stories260K.gguf 1 w1 "$A1" 1 w2 "$A2" 1 w3 "$A3" 1       # W=4: k=2
check_ring stories260K.gguf 0 w1 "$A1" 1 w2 "$A2" 1                  # W=2: k=3, no head layers
check_ring TinyStories-656K.f16.gguf 1 w1 "$A1" 1                    # k=1
check_ring derived/TinyStories-656K.llamacpp-Q8_0.gguf 0 w2 "$A2" 1  # W=1: k=2

# a draft model on the head (issue 20), every verification one pass of the
# ring: the ids of one device, in fewer hops than plain decoding
RING_MODEL=$(model TinyStories-656K.f16.gguf)
ring_json "$TMP/ring.json" "" 1 w1 "$A1" 1
for how in plain draft; do
  extra=()
  [ "$how" = draft ] && extra=(--draft "$(model derived/TinyStories-656K.llamacpp-Q4_0.gguf)"
    --spec-always)
  "$LARES" run -m "$RING_MODEL" -p "Once upon a time" -n 40 --temp 0 --json -t 1 \
    --ring "$TMP/ring.json" --rebalance off "${extra[@]}" >"$TMP/spec_$how.json" 2>"$TMP/spec.err" ||
    fail "ring with $how: $(cat "$TMP/spec.err")"
done
"$LARES" run -m "$RING_MODEL" -p "Once upon a time" -n 40 --temp 0 --json -t 1 >"$TMP/local.json" ||
  fail "TinyStories local run"
want=$(jq -c .generated_ids "$TMP/local.json")
for how in plain draft; do
  [ "$(jq -c .generated_ids "$TMP/spec_$how.json")" = "$want" ] && ok ||
    fail "ring with $how: $(jq -c .generated_ids "$TMP/spec_$how.json"), one device: $want"
done
jq -e '.timings.accepted_tokens > 0' "$TMP/spec_draft.json" >/dev/null && ok ||
  fail "ring with a draft: nothing accepted: $(jq -c .timings "$TMP/spec_draft.json")"
[ "$(jq .ring.hops "$TMP/spec_draft.json")" -lt "$(jq .ring.hops "$TMP/spec_plain.json")" ] && ok ||
  fail "ring with a draft: $(jq .ring.hops "$TMP/spec_draft.json") hops, plain $(jq .ring.hops "$TMP/spec_plain.json")"

# the workers said who connected, their layers and per-round timings
grep -q "worker head: head '.*' at 127.0.0.1 .* connected" "$TMP/w1.log" && ok || fail "w1 log lacks the head: $(cat "$TMP/w1.log")"
grep -q "worker plan: device 1 of 3: layers \[1, 4) of 5" "$TMP/w1.log" && ok || fail "w1 log lacks its layers: $(cat "$TMP/w1.log")"
grep -Eq "worker round: round [0-9] layers \[[0-9]+, [0-9]+\) [0-9]+ tokens? at [0-9]+: compute [0-9.]+ ms" "$TMP/w1.log" \
  && ok || fail "w1 log lacks per-round timings"
grep -q "worker stopped: .* ended the session; waiting for a head" "$TMP/w1.log" && ok || fail "w1 did not go back to waiting"

# human output: the per-device table on stderr
RING_MODEL=$(model stories260K.gguf)
ring_json "$TMP/ring.json" "" 2 w1 "$A1" 2 w2 "$A2" 1
"$LARES" run -m "$RING_MODEL" -p "Once upon a time" -n 8 --temp 0 -t 1 --ring "$TMP/ring.json" --rebalance off >"$TMP/h.out" 2>"$TMP/h.err" \
  || fail "ring run: $(cat "$TMP/h.err")"
grep -q "ring of 3 devices, 5 layers per round, k = 1" "$TMP/h.err" && grep -q "w1 .*$A1" "$TMP/h.err" \
  && grep -q "per hop" "$TMP/h.err" && ok || fail "ring figures on stderr: $(cat "$TMP/h.err")"

# prompt lookup through the ring (issue 20): the token and its drafts go round
# in one pass, rejected rows are truncated on the workers; the ids are those
# of plain decoding on one device, and drafts were taken
P="Once upon a time, there was a little girl named Lily. She loved to play with her toys. Once upon a time, there was a little girl named Lily. She loved to"
ring_json "$TMP/ring.json" "" 1 w1 "$A1" 2 w2 "$A2" 2
"$LARES" run -m "$RING_MODEL" -p "$P" -n 64 --temp 0 --json -t 1 >"$TMP/lk0.json" 2>"$TMP/lk0.err" \
  || fail "lookup baseline: $(cat "$TMP/lk0.err")"
if "$LARES" run -m "$RING_MODEL" -p "$P" -n 64 --temp 0 --json -t 1 --lookup 6 --spec-always \
    --ring "$TMP/ring.json" --rebalance off >"$TMP/lk1.json" 2>"$TMP/lk1.err"; then
  want=$(jq -c .generated_ids "$TMP/lk0.json")
  got=$(jq -c .generated_ids "$TMP/lk1.json")
  [ -n "$want" ] && [ "$got" = "$want" ] && ok || fail "--lookup 6 through the ring: $got, plain on one device: $want"
  jq -e '.timings.accepted_tokens > 0 and .timings.drafted_tokens >= .timings.accepted_tokens
         and .ring.devices == 3' "$TMP/lk1.json" >/dev/null \
    && ok || fail "ring lookup figures: $(jq -c '{t: .timings, d: .ring.devices}' "$TMP/lk1.json")"
else
  fail "--lookup through the ring: $(cat "$TMP/lk1.err")"
fi
ring_json "$TMP/ring.json" "" 2 w1 "$A1" 2 w2 "$A2" 1

# chat through the ring: two turns, the same answers as on one device
printf 'Once upon a time, there was a dog named Max.\nWhat did Max do?\n' >"$TMP/turns"
"$LARES" chat -m "$RING_MODEL" --temp 0 -n 24 -t 1 -q <"$TMP/turns" >"$TMP/chat1" 2>"$TMP/chat1.err" \
  || fail "chat: $(cat "$TMP/chat1.err")"
"$LARES" chat -m "$RING_MODEL" --temp 0 -n 24 -t 1 -q --ring "$TMP/ring.json" --rebalance off <"$TMP/turns" >"$TMP/chat2" 2>"$TMP/chat2.err" \
  || fail "chat --ring: $(cat "$TMP/chat2.err")"
[ -s "$TMP/chat1" ] && cmp -s "$TMP/chat1" "$TMP/chat2" && ok || fail "chat through the ring differs: $(diff "$TMP/chat1" "$TMP/chat2" | head -5)"
finish
