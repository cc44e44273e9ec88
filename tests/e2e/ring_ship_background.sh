#!/usr/bin/env bash
# Workers without the model file fetch the layers a re-plan gives them in the
# background (issue 19): the head sends the coming plan (PREPARE), the ring
# keeps generating with the plan in force while the worker fetches (its
# chunks slowed by the test-only --test-fetch-delay-ms, so the fetch takes
# seconds), and the head switches when it answers PREPARED. Checked from the
# head's log and --json: tokens were generated during the fetch, the switch
# was prepared (not waited for), the greedy ids are those of one device.
#  - a rejoin: b is down at the start and joins with a fresh cache;
#  - a failover: a is killed; the head switches at once to an interim plan
#    (a's window to the head, which has the file), then to the plan that gives
#    the survivor b new layers once b has fetched them;
#  - a failover with no interim plan (the lost window's neighbour is a
#    worker without the file): the switch waits for the fetch, and says so;
#  - a prepare that fails (a cache too small for the new layers): the plan in
#    force stays, logged, the text is still one device's.
. "$(dirname "$0")/lib.sh"
. "$LARES_SRC/tests/cluster/ring_lib.sh"
ring_trap
need jq

M=$(model stories260K.gguf)
PROMPT="Once upon a time"
N=500
LIVE='"heartbeat_ms": 100, "timeout_ms": 3000, "connect_timeout_ms": 1500,'

ship_json() { # FILE HEAD_W [NAME ADDR W]...: ring.json with no "model" for any worker
  local file=$1 head_w=$2
  shift 2
  {
    printf '{%s "devices": [\n  {"name": "head", "key": "%s", "w": %s, "link_delay_ms": 10}' "$LIVE" "$TMP/head.key" "$head_w"
    while [ $# -ge 3 ]; do
      printf ',\n  {"name": "%s", "address": "%s", "public_key": "%s", "threads": 1, "w": %s, "link_delay_ms": 10}' \
        "$1" "$2" "$TMP/$1.key.pub" "$3"
      shift 3
    done
    printf '\n]}\n'
  } >"$file"
}

"$LARES" run -m "$M" -p "$PROMPT" -n $N --temp 0 --json -t 1 >"$TMP/local.json" 2>"$TMP/local.err" \
  || fail "local run: $(cat "$TMP/local.err")"
want=$(jq -c .generated_ids "$TMP/local.json")

head_run() { # NAME: a greedy ring run in the background; HPID, $TMP/NAME.{json,err}
  "$LARES" run -m "$M" -p "$PROMPT" -n $N --temp 0 --json -t 1 -v --rebalance off \
    --ring "$TMP/ring.json" >"$TMP/$1.json" 2>"$TMP/$1.err" &
  HPID=$!
}

head_wait() { # NAME: waits (at most 120 s) for the head; its ids against one device's
  local i
  for i in $(seq 1 1200); do
    kill -0 "$HPID" 2>/dev/null || break
    sleep 0.1
  done
  if kill -0 "$HPID" 2>/dev/null; then
    kill -9 "$HPID"
    fail "$1: the head hangs: $(tail -5 "$TMP/$1.err")"
    return 1
  fi
  wait "$HPID" || { fail "$1: the head failed: $(tail -5 "$TMP/$1.err")"; return 1; }
  [ "$(jq -c .generated_ids "$TMP/$1.json")" = "$want" ] && ok || fail "$1: ids differ from one device"
}

wait_for() { # FILE PATTERN: up to 30 s
  local i
  for i in $(seq 1 300); do
    grep -q "$2" "$1" 2>/dev/null && return 0
    sleep 0.1
  done
  return 1
}

# tokens the head generated while a background fetch ran, from its log line
tokens_during() { # FILE
  grep -o "fetched while [0-9]* token(s) were generated" "$1" | head -1 | grep -o '[0-9]*'
}

# ---- a rejoin: b joins with a fresh cache and fetches in the background ----
ring_worker b || exit 1; BB=$WORKER_ADDR
kill -KILL "$WORKER_PID"; wait "$WORKER_PID" 2>/dev/null
ring_worker a --cache "$TMP/ca" -t 1 || exit 1; AA=$WORKER_ADDR
ship_json "$TMP/ring.json" 1 a "$AA" 2 b "$BB" 2
head_run rejoin
wait_for "$TMP/rejoin.err" "lost" || fail "rejoin: b not reported down: $(tail -3 "$TMP/rejoin.err")"
RING_LISTEN=$BB ring_worker b --cache "$TMP/cb" -t 1 --test-fetch-delay-ms 150 || exit 1
head_wait rejoin
grep -q "cluster: rejoin: plan .* waits for .*b to fetch new layers in the background" "$TMP/rejoin.err" && ok \
  || fail "rejoin: no prepare: $(grep cluster "$TMP/rejoin.err" | tail -5)"
line=$(grep "cluster: rejoin: .*weights prepared in the background" "$TMP/rejoin.err" | head -1)
[ -n "$line" ] && ok || fail "rejoin: the switch was not prepared: $(grep cluster "$TMP/rejoin.err" | tail -5)"
t=$(tokens_during "$TMP/rejoin.err")
[ "${t:-0}" -ge 3 ] && ok || fail "rejoin: ${t:-no} tokens generated during the fetch: $line"
jq -e '.ring.prepared_switches == 1 and .ring.waited_switches == 0 and .ring.fetch_tokens >= 3
       and .ring.replans == 1 and ([.ring.device[] | select(.name == "b") | .shipped_bytes > 0] | all)' \
  "$TMP/rejoin.json" >/dev/null && ok || fail "rejoin: json: $(jq -c .ring "$TMP/rejoin.json")"
grep -q "worker fetch: fetching .* MiB of weights from the head" "$TMP/b.log" && ok \
  || fail "rejoin: b fetched nothing: $(grep fetch "$TMP/b.log")"
ring_cleanup

# ---- a failover: the interim plan at once, the planner's when b has fetched ----
rm -rf "$TMP/ca" "$TMP/cb"
ring_worker a --cache "$TMP/ca" -t 1 || exit 1; AA=$WORKER_ADDR; APID=$WORKER_PID
ring_worker b --cache "$TMP/cb" -t 1 --test-fetch-delay-ms 150 || exit 1; BB=$WORKER_ADDR
# the head holds no layer, so it has no figure of its own: the planner counts
# it as fast as b and shares a's two layers between them, one to b
ship_json "$TMP/ring.json" 0 a "$AA" 2 b "$BB" 3
head_run failover
wait_for "$TMP/a.log" "round 0 layers .* 1 token at 20:" || fail "failover: a ran no token"
kill -9 "$APID"
head_wait failover
grep -q "cluster: failover: lost a .*plan head 0 | a 2 | b 3 (k=1) -> head 2 | b 3 (k=1); an interim plan" \
  "$TMP/failover.err" && ok || fail "failover: no interim plan: $(grep cluster "$TMP/failover.err" | tail -5)"
line=$(grep "cluster: failover: .*head 2 | b 3 (k=1) -> head [01] | b [45] (k=1); weights prepared in the background" "$TMP/failover.err" | head -1)
[ -n "$line" ] && ok || fail "failover: the planner's plan was not prepared: $(grep cluster "$TMP/failover.err" | tail -5)"
t=$(tokens_during "$TMP/failover.err")
[ "${t:-0}" -ge 3 ] && ok || fail "failover: ${t:-no} tokens generated during the fetch: $line"
jq -e '.ring.failovers == 1 and .ring.prepared_switches == 1 and .ring.waited_switches == 0' \
  "$TMP/failover.json" >/dev/null && ok || fail "failover: json: $(jq -c .ring "$TMP/failover.json")"
ring_cleanup

# ---- a failover without an interim plan: the last worker lost, its
# predecessor has no copy of its layers: the switch waits, and says so ----
rm -rf "$TMP/ca" "$TMP/cb"
ring_worker a --cache "$TMP/ca" -t 1 || exit 1; AA=$WORKER_ADDR
ring_worker b --cache "$TMP/cb" -t 1 || exit 1; BB=$WORKER_ADDR; BPID=$WORKER_PID
ship_json "$TMP/ring.json" 1 a "$AA" 2 b "$BB" 2
head_run waited
wait_for "$TMP/b.log" "round 0 layers .* 1 token at 20:" || fail "waited: b ran no token"
kill -9 "$BPID"
head_wait waited
grep -q "cluster: failover: no interim plan (the neighbours of b's windows have no copy" "$TMP/waited.err" && ok \
  || fail "waited: no reason given: $(grep cluster "$TMP/waited.err" | tail -5)"
grep -q "cluster: failover: .*the switch waited for a fetch of .* MiB of weights" "$TMP/waited.err" && ok \
  || fail "waited: the switch does not say it waited: $(grep cluster "$TMP/waited.err" | tail -5)"
jq -e '.ring.waited_switches == 1 and .ring.prepared_switches == 0' "$TMP/waited.json" >/dev/null && ok \
  || fail "waited: json: $(jq -c .ring "$TMP/waited.json")"
ring_cleanup

# ---- a prepare that fails: b's cache cannot hold more than its first windows ----
rm -rf "$TMP/ca" "$TMP/cb"
ring_worker b || exit 1; BB=$WORKER_ADDR
kill -KILL "$WORKER_PID"; wait "$WORKER_PID" 2>/dev/null
ring_worker a --cache "$TMP/ca" -t 1 || exit 1; AA=$WORKER_ADDR
ship_json "$TMP/ring.json" 1 a "$AA" 2 b "$BB" 2
head_run refused
wait_for "$TMP/refused.err" "lost" || fail "refused: b not reported down"
RING_LISTEN=$BB ring_worker b --cache "$TMP/cb" --cache-size 40K -t 1 || exit 1
head_wait refused
grep -q "cluster: rejoin not put in force: b (.*) could not fetch its new layers in the background (.*do not fit its size limit" \
  "$TMP/refused.err" && ok || fail "refused: no reason: $(grep cluster "$TMP/refused.err" | tail -5)"
jq -e '.ring.prepare_failures == 1 and .ring.prepared_switches == 0 and .ring.replans == 0' \
  "$TMP/refused.json" >/dev/null && ok || fail "refused: json: $(jq -c .ring "$TMP/refused.json")"
ring_cleanup
finish
