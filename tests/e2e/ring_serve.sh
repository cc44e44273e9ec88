#!/usr/bin/env bash
# lares serve as the head of a ring (issues 8 and 9): completions through the
# ring give the text of the same request on one device; a worker killed while
# a request generates does not fail it (failover: the same text, HTTP 200), and
# /metrics counts the failover; the next request works over the survivors.
# With every worker down the server starts with the head alone, /health says
# who serves, and a worker started later joins during a request.
# An embedding through the ring equals one device's (cosine >= 0.999: the
# hidden states cross the ring in F16).
. "$(dirname "$0")/lib.sh"
. "$LARES_SRC/tests/cluster/ring_lib.sh"
. "$(dirname "$0")/serve_lib.sh"
trap 'for p in "${SERVER_PIDS[@]}"; do kill -KILL "$p" 2>/dev/null; done; ring_cleanup; rm -rf "$TMP"' EXIT
export RING_MODEL RING_DEV_EXTRA
RING_MODEL=$(model stories260K.gguf)
RING_DEV_EXTRA=', "link_delay_ms": 5'

BODY='{"model":"lares","prompt":"Once upon a time","max_tokens":200,"temperature":0}'

start_server local -m "$RING_MODEL" -t 1 -c 512
[ "$(post "$URL_local" /v1/completions "$BODY")" = 200 ] && ok || fail "local completion: $(cat "$TMP/body")"
jq -r '.choices[0].text' "$TMP/body" >"$TMP/local.txt"
EMB='{"model":"lares","input":"Once upon a time there was a dog"}'
[ "$(post "$URL_local" /v1/embeddings "$EMB")" = 200 ] && ok || fail "local embedding: $(cat "$TMP/body")"
jq '.data[0].embedding' "$TMP/body" >"$TMP/local_emb.json"
stop_server local

ring_worker a || exit 1; AA=$WORKER_ADDR
ring_worker b || exit 1; BB=$WORKER_ADDR; BPID=$WORKER_PID
ring_worker c || exit 1; CC=$WORKER_ADDR
ring_json "$TMP/ring.json" '"heartbeat_ms": 100, "timeout_ms": 1500,' 1 a "$AA" 2 b "$BB" 1 c "$CC" 1
start_server ring -m "$RING_MODEL" -t 1 -c 512 --ring "$TMP/ring.json" --rebalance off
[ "$(post "$URL_ring" /v1/completions "$BODY")" = 200 ] && ok || fail "ring completion: $(cat "$TMP/body")"
jq -r '.choices[0].text' "$TMP/body" | cmp -s - "$TMP/local.txt" && ok \
  || fail "the ring's text differs from one device's"
[ "$(post "$URL_ring" /v1/embeddings "$EMB")" = 200 ] && ok || fail "ring embedding: $(cat "$TMP/body")"
jq '.data[0].embedding' "$TMP/body" >"$TMP/ring_emb.json"
jq -s '[transpose[] | .[0] * .[1]] | add | "ring_serve: embedding cosine ring vs one device: \(.)"' -r "$TMP/local_emb.json" "$TMP/ring_emb.json"
jq -s -e '(.[0] | length) > 0 and ([transpose[] | .[0] * .[1]] | add) >= 0.999' "$TMP/local_emb.json" \
  "$TMP/ring_emb.json" >/dev/null && ok || fail "the ring's embedding differs from one device's: \
$(jq -s '[transpose[] | .[0] * .[1]] | add' "$TMP/local_emb.json" "$TMP/ring_emb.json")"
curl -sS "$URL_ring/metrics" >"$TMP/m0"
grep -q '^lares_ring_failovers_total 0$' "$TMP/m0" && grep -q '^lares_ring_replans_total 0$' "$TMP/m0" && ok \
  || fail "metrics before the fault: $(grep lares_ring "$TMP/m0")"

# a different prompt (no cached prefix), killed mid-way: 200 and the local text
BODY2='{"model":"lares","prompt":"The little dog","max_tokens":200,"temperature":0}'
"$LARES" run -m "$RING_MODEL" -p "The little dog" -n 200 --temp 0 -t 1 --json -c 512 2>/dev/null \
  | jq -r .text >"$TMP/local2.txt"
post "$URL_ring" /v1/completions "$BODY2" >"$TMP/status2" &
REQ=$!
sleep 1
kill -KILL "$BPID"
wait "$REQ"
[ "$(cat "$TMP/status2")" = 200 ] && ok || fail "the request during the fault: $(cat "$TMP/status2") $(cat "$TMP/body")"
jq -r '.choices[0].text' "$TMP/body" | cmp -s - "$TMP/local2.txt" && ok \
  || fail "the text after a failover differs: $(jq -r '.choices[0].text' "$TMP/body" | head -c 200) vs $(head -c 200 "$TMP/local2.txt")"
curl -sS "$URL_ring/metrics" >"$TMP/m1"
grep -q '^lares_ring_failovers_total 1$' "$TMP/m1" && ok || fail "metrics after the fault: $(grep lares_ring "$TMP/m1")"
grep -q "warning: cluster: lost b ($BB)" "$TMP/ring.log" && ok || fail "no warning naming b: $(tail -5 "$TMP/ring.log")"
# the next request works over the survivors
[ "$(post "$URL_ring" /v1/completions "$BODY")" = 200 ] && ok || fail "after the failover: $(cat "$TMP/body")"
jq -r '.choices[0].text' "$TMP/body" | cmp -s - "$TMP/local.txt" && ok || fail "the text after the failover differs"
# lares ring status while the server runs the ring: the survey (a and c busy
# with this head, b gone) and the running head's figures from its state file
timeout 60 "$LARES" ring status --ring "$TMP/ring.json" -m "$RING_MODEL" >"$TMP/rs.out" 2>"$TMP/rs.err" \
  && ok || fail "ring status: $(cat "$TMP/rs.err")"
grep -Eq "^running: head pid [0-9]*, placement explicit, 3 of 4 devices in the plan.*; hop [0-9]+\.[0-9]+ ms" "$TMP/rs.out" \
  && grep -q "^failovers 1, re-plans 0, .*last plan change: failover: lost b" "$TMP/rs.out" \
  && grep -Eq "^a +serving +[0-9]+ +1 +[0-9]+\.[0-9] " "$TMP/rs.out" \
  && grep -Eq "^b +(lost|rejoining) +0 +0 " "$TMP/rs.out" && ok || fail "ring status of the running ring: $(cat "$TMP/rs.out")"
# the survey did not take the serving head's workers: the next request still runs over them
[ "$(post "$URL_ring" /v1/completions "$BODY")" = 200 ] && ok || fail "after ring status: $(cat "$TMP/body")"
jq -r '.choices[0].text' "$TMP/body" | cmp -s - "$TMP/local.txt" && ok || fail "the text after ring status differs"
curl -sS "$URL_ring/metrics" >"$TMP/m2"
grep -q '^lares_ring_failovers_total 1$' "$TMP/m2" && ok || fail "ring status disturbed the ring: $(grep lares_ring "$TMP/m2")"
stop_server ring
timeout 60 "$LARES" ring status --ring "$TMP/ring.json" -m "$RING_MODEL" >"$TMP/rs2.out" 2>&1
grep -q "^no head on this machine runs this ring now" "$TMP/rs2.out" && ok \
  || fail "ring status after the server stopped: $(cat "$TMP/rs2.out")"
ring_cleanup

# every worker down (issue 15): the server starts and serves with the head
# alone, /health says who serves; a worker started later joins during the
# next request, whose text stays one device's
for w in a b c; do
  ring_worker "$w" || exit 1
  kill -KILL "$WORKER_PID"; wait "$WORKER_PID" 2>/dev/null
  printf -v "DOWN_$w" '%s' "$WORKER_ADDR"
done
ring_json "$TMP/down.json" '"heartbeat_ms": 100, "timeout_ms": 1500, "connect_timeout_ms": 1000,' \
  1 a "$DOWN_a" 2 b "$DOWN_b" 1 c "$DOWN_c" 1
start_server down -m "$RING_MODEL" -t 1 -c 512 -v --ring "$TMP/down.json" --rebalance off
curl -sS "$URL_down/health" >"$TMP/h0"
jq -e '.status == "ok" and .ring.devices == 4 and .ring.serving == ["head"] and .ring.not_serving == ["a", "b", "c"]' \
  "$TMP/h0" >/dev/null && ok || fail "/health with every worker down: $(cat "$TMP/h0")"
[ "$(post "$URL_down" /v1/completions "$BODY")" = 200 ] && ok || fail "head alone: $(cat "$TMP/body")"
jq -r '.choices[0].text' "$TMP/body" | cmp -s - "$TMP/local.txt" && ok || fail "head alone: the text differs"
RING_LISTEN=$DOWN_a ring_worker a || exit 1
sleep 1
[ "$(post "$URL_down" /v1/completions "$BODY")" = 200 ] && ok || fail "a joining: $(cat "$TMP/body")"
jq -r '.choices[0].text' "$TMP/body" | cmp -s - "$TMP/local.txt" && ok || fail "a joining: the text differs"
curl -sS "$URL_down/health" >"$TMP/h1"
jq -e '.ring.serving == ["head", "a"]' "$TMP/h1" >/dev/null && ok \
  || fail "/health after a joined: $(cat "$TMP/h1"); $(grep cluster "$TMP/down.log" | tail -5)"
stop_server down
finish
