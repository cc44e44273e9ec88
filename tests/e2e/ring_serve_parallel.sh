#!/usr/bin/env bash
# lares serve --parallel N --ring (issue 20): requests sent at once decode
# together through a ring of worker processes, pipelined (several batches in
# the ring at once, /v1/ring "max_in_flight"), and each gets exactly the
# greedy text it gets alone on one device; with one group (--ring-groups 1)
# too. A worker killed while three requests generate fails none of them: the
# same texts, HTTP 200, one failover in /metrics. Embeddings answer between
# batches. --ring-groups without --ring or --parallel is refused.
. "$(dirname "$0")/lib.sh"
. "$LARES_SRC/tests/cluster/ring_lib.sh"
. "$(dirname "$0")/serve_lib.sh"
trap 'for p in "${SERVER_PIDS[@]}"; do kill -KILL "$p" 2>/dev/null; done; ring_cleanup; rm -rf "$TMP"' EXIT
export RING_MODEL RING_DEV_EXTRA
RING_MODEL=$(model stories260K.gguf)
RING_DEV_EXTRA=', "link_delay_ms": 2'

prompts=("Once upon a time" "The little dog" "Lily and Tom went to the")
body() { # PROMPT MAX
  printf '{"model":"m","prompt":"%s","max_tokens":%d,"temperature":0}' "$1" "$2"
}
# each prompt alone on one device
start_server one -m "$RING_MODEL" -t 1 -c 512 --model-name m
for i in 0 1 2; do
  for n in 40 200; do
    [ "$(post "$URL_one" /v1/completions "$(body "${prompts[$i]}" $n)")" = 200 ] ||
      fail "alone $i: $(cat "$TMP/body")"
    jq -j '.choices[0].text' "$TMP/body" >"$TMP/alone$i.$n"
  done
done
stop_server one

# at_once LABEL URL MAX: the three prompts sent together give their texts alone
at_once() {
  local label=$1 url=$2 max=$3 i
  PIDS=()
  for i in 0 1 2; do
    curl -sS -o "$TMP/$label$i" -w '%{http_code}' -H 'Content-Type: application/json' \
      --data-binary "$(body "${prompts[$i]}" "$max")" "$url/v1/completions" >"$TMP/$label$i.code" &
    PIDS+=($!)
  done
  wait "${PIDS[@]}"
  for i in 0 1 2; do
    [ "$(cat "$TMP/$label$i.code")" = 200 ] && ok || fail "$label $i: HTTP $(cat "$TMP/$label$i.code")"
    cmp -s <(jq -j '.choices[0].text' "$TMP/$label$i") "$TMP/alone$i.$max" && ok ||
      fail "$label $i [$(jq -j '.choices[0].text' "$TMP/$label$i" | head -c 200)] alone [$(head -c 200 "$TMP/alone$i.$max")]"
  done
}

ring_worker a || exit 1; AA=$WORKER_ADDR
ring_worker b || exit 1; BB=$WORKER_ADDR; BPID=$WORKER_PID
ring_json "$TMP/ring.json" '"heartbeat_ms": 100, "timeout_ms": 1500,' 1 a "$AA" 2 b "$BB" 2

start_server par -m "$RING_MODEL" -t 1 -c 512 --model-name m --parallel 3 \
  --ring "$TMP/ring.json" --rebalance off
grep -q "requests decoding together: 3" "$TMP/par.log" && ok || fail "log: $(cat "$TMP/par.log")"
at_once together "$URL_par" 40
curl -sS "$URL_par/v1/ring" >"$TMP/ring0.json"
[ "$(jq '.kv_slots' "$TMP/ring0.json")" = 4 ] && [ "$(jq '.max_in_flight' "$TMP/ring0.json")" -ge 2 ] &&
  ok || fail "not pipelined: $(jq -c '{kv_slots, max_in_flight}' "$TMP/ring0.json")"
# embeddings between batches, on the batch's own session through the ring
code=$(post "$URL_par" /v1/embeddings '{"model":"m","input":"a cat"}')
[ "$code" = 200 ] && [ "$(jq '.data[0].embedding | length' "$TMP/body")" -gt 0 ] && ok ||
  fail "embeddings: $code $(head -c 300 "$TMP/body")"
at_once again "$URL_par" 40

# a worker killed while the three generate: every request still gets its text
PIDS=()
for i in 0 1 2; do
  curl -sS -o "$TMP/kill$i" -w '%{http_code}' -H 'Content-Type: application/json' \
    --data-binary "$(body "${prompts[$i]}" 200)" "$URL_par/v1/completions" >"$TMP/kill$i.code" &
  PIDS+=($!)
done
sleep 1
kill -KILL "$BPID"
wait "${PIDS[@]}"
for i in 0 1 2; do
  [ "$(cat "$TMP/kill$i.code")" = 200 ] && ok || fail "killed worker: request $i HTTP $(cat "$TMP/kill$i.code")"
  cmp -s <(jq -j '.choices[0].text' "$TMP/kill$i") "$TMP/alone$i.200" && ok ||
    fail "killed worker: request $i [$(jq -j '.choices[0].text' "$TMP/kill$i" | head -c 200)] alone [$(head -c 200 "$TMP/alone$i.200")]"
done
curl -sS "$URL_par/metrics" >"$TMP/m1"
grep -q '^lares_ring_failovers_total 1$' "$TMP/m1" && ok || fail "metrics after the fault: $(grep lares_ring "$TMP/m1")"
grep -q "warning: cluster: lost b ($BB)" "$TMP/par.log" && ok || fail "no warning naming b: $(tail -5 "$TMP/par.log")"
at_once after "$URL_par" 40 # the survivors serve on
stop_server par TERM

# one group: every request in one pass, one batch in the ring at a time
ring_worker b2 || exit 1; B2=$WORKER_ADDR
ring_json "$TMP/ring2.json" '"heartbeat_ms": 100, "timeout_ms": 1500,' 1 a "$AA" 2 b2 "$B2" 2
start_server one_group -m "$RING_MODEL" -t 1 -c 512 --model-name m --parallel 3 \
  --ring "$TMP/ring2.json" --rebalance off --ring-groups 1
at_once one_group "$URL_one_group" 40
curl -sS "$URL_one_group/v1/ring" >"$TMP/ring2.out"
[ "$(jq '.max_in_flight' "$TMP/ring2.out")" = 1 ] && ok ||
  fail "--ring-groups 1: $(jq -c '{max_in_flight}' "$TMP/ring2.out")"
stop_server one_group TERM

# bad input
if "$LARES" serve -m "$RING_MODEL" --parallel 2 --ring-groups 2 2>"$TMP/bad.err"; then
  fail "--ring-groups without --ring accepted"
else
  grep -q -- "--ring-groups" "$TMP/bad.err" && ok || fail "--ring-groups: $(cat "$TMP/bad.err")"
fi
if "$LARES" serve -m "$RING_MODEL" --parallel 2 --ring "$TMP/ring2.json" --ring-groups 99 2>"$TMP/bad.err"; then
  fail "--ring-groups 99 accepted"
else
  grep -q -- "--ring-groups" "$TMP/bad.err" && ok || fail "--ring-groups 99: $(cat "$TMP/bad.err")"
fi
finish
