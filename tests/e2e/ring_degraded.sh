#!/usr/bin/env bash
# A ring in a real home (issue 15): devices sleep, leave and come back.
# - start with one of four devices down: the head starts with the others
#   (explicit windows and an automatic ring), says who is missing, and the
#   greedy ids are one device's;
# - every worker down: the head runs alone;
# - the model cannot be placed on those present: one error line naming the
#   missing device and the memory still needed;
# - a device down at the start answers mid-generation: it joins at a re-plan
#   between tokens and the explicit windows come back, the text unchanged;
# - a worker killed mid-generation and started again: failover over every
#   live device (not all on one, none beyond its "memory"), then the user's
#   windows once it is back;
# - a worker frozen for less than the timeout: suspect, then serving again;
# - a worker dying while it profiles itself for an automatic ring: the start
#   goes on without it;
# - lares ring status: ready, down (silent) and down (refusing) devices.
# Loopback only; every wait is bounded.
. "$(dirname "$0")/lib.sh"
. "$LARES_SRC/tests/cluster/ring_lib.sh"
need jq
need python3
HOLD_PID=""
trap 'release_port; ring_cleanup; rm -rf "$TMP"' EXIT
export RING_MODEL RING_DEV_EXTRA
RING_MODEL=$(model stories260K.gguf)
PROMPT="Once upon a time"
LIVE='"heartbeat_ms": 100, "timeout_ms": 1500, "connect_timeout_ms": 1500,'

"$LARES" run -m "$RING_MODEL" -p "$PROMPT" -n 48 --temp 0 -t 1 --json >"$TMP/local.json" 2>"$TMP/local.err" \
  || fail "local run: $(cat "$TMP/local.err")"
want=$(jq -c .generated_ids "$TMP/local.json")

# hold_port ADDR: ADDR bound but not listening until release_port (a
# connection is refused, as by a device that is down), so that no process
# beside this test takes the port before b comes back on it: a test running
# in parallel once did, and the head's handshake with it failed
hold_port() {
  release_port
  python3 -c 'import socket, sys, time
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
h, p = sys.argv[1].rsplit(":", 1)
s.bind((h, int(p)))
print("held", flush=True)
time.sleep(3600)' "$1" >"$TMP/hold.out" 2>&1 &
  HOLD_PID=$!
  local i
  for i in $(seq 1 100); do
    grep -q held "$TMP/hold.out" 2>/dev/null && return 0
    kill -0 "$HOLD_PID" 2>/dev/null || break
    sleep 0.02
  done
  fail "hold_port $1: $(cat "$TMP/hold.out")"
}
release_port() {
  [ -n "$HOLD_PID" ] || return 0
  kill "$HOLD_PID" 2>/dev/null
  wait "$HOLD_PID" 2>/dev/null
  HOLD_PID=""
}

# down_addr NAME: an address where worker NAME will listen later, nothing now
down_addr() {
  ring_worker "$1" || exit 1
  DOWN=$WORKER_ADDR
  kill -KILL "$WORKER_PID"
  wait "$WORKER_PID" 2>/dev/null
  hold_port "$DOWN"
}

ring_run() { # NAME ring.json [options]: a 48-token greedy run; RC, $TMP/NAME.{out,err}
  local name=$1 ring=$2
  shift 2
  timeout 60 "$LARES" run -m "$RING_MODEL" -p "$PROMPT" -n 48 --temp 0 -t 1 --json -v --ring "$ring" "$@" \
    >"$TMP/$name.out" 2>"$TMP/$name.err"
  RC=$?
}

# ---- one of four devices down at the start: explicit windows ----
down_addr b; BB=$DOWN
ring_worker a || exit 1; AA=$WORKER_ADDR
ring_worker c || exit 1; CC=$WORKER_ADDR
ring_json "$TMP/one_down.json" "$LIVE" 1 a "$AA" 2 b "$BB" 1 c "$CC" 1
t0=$(date +%s.%N)
ring_run one_down "$TMP/one_down.json" --rebalance off
secs=$(echo "$(date +%s.%N) - $t0" | bc)
[ "$RC" = 0 ] && ok || fail "one down: rc $RC: $(cat "$TMP/one_down.err")"
[ "$(jq -c .generated_ids "$TMP/one_down.out" 2>/dev/null)" = "$want" ] && ok \
  || fail "one down: ids differ from one device: $(jq -c .generated_ids "$TMP/one_down.out" 2>/dev/null)"
grep -q "warning: cluster: starting with 3 of 4 devices; missing: b ($BB)" "$TMP/one_down.err" && ok \
  || fail "one down: no warning naming b: $(cat "$TMP/one_down.err")"
# the state of each device, and every live worker has layers (none piled up)
# (b is asked again between tokens: lost, or rejoining while asked)
jq -e '[.ring.device[] | .state] as $s | $s[0:2] == ["serving", "serving"] and $s[3] == "serving"
       and ($s[2] == "lost" or $s[2] == "rejoining")
       and ([.ring.device[] | select(.state == "serving") | .layers > 0] | all)' \
  "$TMP/one_down.out" >/dev/null && ok \
  || fail "one down: device states and layers: $(jq -c '[.ring.device[] | {name, state, layers}]' "$TMP/one_down.out")"
# the verbose ready line names the devices as ring.json does
grep -q "cluster: ring of 3 devices ready: head [0-9]* | a [0-9]* | c [0-9]* (k=1)" "$TMP/one_down.err" && ok \
  || fail "one down: ready line: $(grep 'ready' "$TMP/one_down.err")"
grep -q "cluster: b ($BB): joining -> lost" "$TMP/one_down.err" && ok \
  || fail "one down: no state change logged for b: $(grep 'cluster: b' "$TMP/one_down.err")"
# the start waits for the hello deadline (1.5 s), not much more
[ "$(echo "$secs < 15" | bc)" = 1 ] && ok || fail "one down: the run took $secs s"

# ---- every worker down: the head alone ----
ring_cleanup
ring_json "$TMP/all_down.json" "$LIVE" 1 a "$AA" 2 b "$BB" 1 c "$CC" 1
ring_run all_down "$TMP/all_down.json"
[ "$RC" = 0 ] && ok || fail "all down: rc $RC: $(cat "$TMP/all_down.err")"
[ "$(jq -c .generated_ids "$TMP/all_down.out" 2>/dev/null)" = "$want" ] && ok \
  || fail "all down: ids differ from one device"
jq -e '.ring.devices == 1 and ([.ring.device[1:][] | .state == "lost" or .state == "rejoining"] | all)' "$TMP/all_down.out" >/dev/null && ok \
  || fail "all down: $(jq -c .ring "$TMP/all_down.out")"

# ---- the model cannot be placed on the head alone: one error line ----
ring_json "$TMP/no_room.json" "$LIVE" 0 a "$AA" 5
sed -i 's/"w": 0}/"w": 0, "memory": 1024}/' "$TMP/no_room.json"
ring_run no_room "$TMP/no_room.json"
[ "$RC" != 0 ] && [ "$RC" != 124 ] && ok || fail "no room: rc $RC"
[ "$(grep -c 'error:' "$TMP/no_room.err")" = 1 ] \
  && grep -q "error: .*no_room.json: started with 1 of 2 devices (missing a ($AA)): the 1 device left cannot run the model, even from disk: .* more memory needed" "$TMP/no_room.err" \
  && ok || fail "no room: the error: $(cat "$TMP/no_room.err")"
# the unit of capacity the error names: one layer's weights and KV cache
LAYER_BYTES=$(sed -n 's/.*layer(s) of \([0-9.]*\) \([KMG]*i*B\)).*/\1 \2/p' "$TMP/no_room.err" \
  | awk '{m = ($2 == "KiB") ? 1024 : ($2 == "MiB") ? 1048576 : ($2 == "GiB") ? 1073741824 : 1; printf "%.0f", $1 * m}')
[ -n "$LAYER_BYTES" ] && [ "$LAYER_BYTES" -gt 0 ] && ok || fail "no room: no layer size in: $(cat "$TMP/no_room.err")"

# ---- a device down at the start joins mid-generation; the explicit windows
# come back, the text is one device's ----
RING_DEV_EXTRA=', "link_delay_ms": 10'
"$LARES" run -m "$RING_MODEL" -p "$PROMPT" -n 200 --temp 0 -t 1 >"$TMP/long.out" 2>/dev/null
ring_worker a || exit 1; AA=$WORKER_ADDR
ring_worker c || exit 1; CC=$WORKER_ADDR
ring_json "$TMP/join.json" "$LIVE" 1 a "$AA" 2 b "$BB" 1 c "$CC" 1
: >"$TMP/join.out"
"$LARES" run -m "$RING_MODEL" -p "$PROMPT" -n 200 --temp 0 -t 1 -v --rebalance off --ring "$TMP/join.json" \
  >"$TMP/join.out" 2>"$TMP/join.err" &
HEAD_PID=$!
for i in $(seq 1 200); do
  [ "$(wc -c <"$TMP/join.out")" -gt 40 ] && break
  sleep 0.05
done
[ "$(wc -c <"$TMP/join.out")" -gt 40 ] && ok || fail "join: no tokens before b starts: $(cat "$TMP/join.err")"
release_port
RING_LISTEN=$BB ring_worker b || exit 1
for i in $(seq 1 400); do
  kill -0 "$HEAD_PID" 2>/dev/null || break
  sleep 0.1
done
if kill -0 "$HEAD_PID" 2>/dev/null; then
  kill -9 "$HEAD_PID"
  fail "join: the head hangs"
else
  wait "$HEAD_PID" && ok || fail "join: the head failed: $(cat "$TMP/join.err")"
fi
cmp -s "$TMP/join.out" "$TMP/long.out" && ok || fail "join: the text differs from one device's"
grep -q "cluster: rejoin: b ($BB) answered; new plan by ring.json (explicit windows); plan head [0-9]* | a [0-9]* | c [0-9]* (k=1) -> head 1 | a 2 | b 1 | c 1 (k=1)" "$TMP/join.err" && ok \
  || fail "join: b did not join with the user's windows: $(grep 'cluster' "$TMP/join.err" | tail -5)"
grep -q "worker plan:" "$TMP/b.log" && ok || fail "join: b got no plan: $(cat "$TMP/b.log")"

# ---- a worker killed mid-generation and started again: failover over every
# live device, then the explicit windows again ----
ring_cleanup
ring_worker a || exit 1; AA=$WORKER_ADDR
ring_worker b || exit 1; BB=$WORKER_ADDR; BPID=$WORKER_PID
ring_worker c || exit 1; CC=$WORKER_ADDR
ring_json "$TMP/back.json" "$LIVE" 1 a "$AA" 2 b "$BB" 1 c "$CC" 1
# a may give one and a half layers: a re-plan never gives it two
sed -i "s|\"address\": \"$AA\"|\"address\": \"$AA\", \"memory\": $((LAYER_BYTES * 3 / 2))|" "$TMP/back.json"
: >"$TMP/back.out"
"$LARES" run -m "$RING_MODEL" -p "$PROMPT" -n 200 --temp 0 -t 1 -v --rebalance off --ring "$TMP/back.json" \
  >"$TMP/back.out" 2>"$TMP/back.err" &
HEAD_PID=$!
for i in $(seq 1 200); do
  [ "$(wc -c <"$TMP/back.out")" -gt 40 ] && break
  sleep 0.05
done
kill -KILL "$BPID"
wait "$BPID" 2>/dev/null
for i in $(seq 1 100); do
  grep -q "failover: lost b" "$TMP/back.err" && break
  sleep 0.05
done
RING_LISTEN=$BB ring_worker b || exit 1
for i in $(seq 1 400); do
  kill -0 "$HEAD_PID" 2>/dev/null || break
  sleep 0.1
done
if kill -0 "$HEAD_PID" 2>/dev/null; then
  kill -9 "$HEAD_PID"
  fail "back: the head hangs"
else
  wait "$HEAD_PID" && ok || fail "back: the head failed: $(cat "$TMP/back.err")"
fi
cmp -s "$TMP/back.out" "$TMP/long.out" && ok || fail "back: the text differs from one device's"
# the failover keeps a and c (every live device), the head does not take all
# (and a, whose "memory" holds one layer, gets one)
grep -q "cluster: failover: lost b ($BB); new plan by cluster_plan_balance; plan head 1 | a 2 | b 1 | c 1 (k=1) -> head [0-9]* | a 1 | c [0-9]* (k=1)" "$TMP/back.err" && ok \
  || fail "back: the failover did not keep every live device within its memory: $(grep 'cluster' "$TMP/back.err" | tail -5)"
grep -q "cluster: rejoin: b ($BB) answered; new plan by ring.json (explicit windows); .* -> head 1 | a 2 | b 1 | c 1 (k=1)" "$TMP/back.err" && ok \
  || fail "back: the explicit windows did not come back: $(grep 'cluster' "$TMP/back.err" | tail -5)"
ring_cleanup
hold_port "$BB" # b stays down until the automatic rings

# ---- a worker frozen for less than the timeout: suspect, then serving again;
# no failover, the text unchanged ----
ring_worker a || exit 1; AA=$WORKER_ADDR
ring_worker c || exit 1; CC=$WORKER_ADDR; CPID=$WORKER_PID
ring_json "$TMP/freeze.json" "$LIVE" 1 a "$AA" 2 c "$CC" 2
: >"$TMP/freeze.out"
"$LARES" run -m "$RING_MODEL" -p "$PROMPT" -n 200 --temp 0 -t 1 -v --rebalance off --ring "$TMP/freeze.json" \
  >"$TMP/freeze.out" 2>"$TMP/freeze.err" &
HEAD_PID=$!
for i in $(seq 1 200); do
  [ "$(wc -c <"$TMP/freeze.out")" -gt 40 ] && break
  sleep 0.05
done
kill -STOP "$CPID"
sleep 1
kill -CONT "$CPID"
for i in $(seq 1 400); do
  kill -0 "$HEAD_PID" 2>/dev/null || break
  sleep 0.1
done
if kill -0 "$HEAD_PID" 2>/dev/null; then
  kill -9 "$HEAD_PID"
  fail "freeze: the head hangs"
else
  wait "$HEAD_PID" && ok || fail "freeze: the head failed: $(cat "$TMP/freeze.err")"
fi
cmp -s "$TMP/freeze.out" "$TMP/long.out" && ok || fail "freeze: the text differs from one device's"
grep -q "cluster: c ($CC): serving -> suspect: no heartbeat for [0-9]* ms (timeout 1500 ms)" "$TMP/freeze.err" \
  && grep -q "cluster: c ($CC): suspect -> serving: heard again" "$TMP/freeze.err" \
  && ! grep -q "cluster: failover:" "$TMP/freeze.err" && ok \
  || fail "freeze: not suspect then serving again: $(grep 'cluster' "$TMP/freeze.err" | tail -5)"
RING_DEV_EXTRA=""
ring_cleanup

# ---- automatic rings: one worker down at the start, and one dying while it
# profiles itself ----
auto_json() { # FILE "TOP-LEVEL EXTRAS" [NAME ADDR]...
  local file=$1 extra=$2
  shift 2
  {
    # a worker's first profile under a sanitizer takes seconds: a longer deadline
    printf '{"heartbeat_ms": 100, "timeout_ms": 3000, "connect_timeout_ms": 6000, %s "devices": [\n' "$extra"
    printf '  {"name": "head", "key": "%s", "memory": "49MiB"}' "$TMP/head.key"
    while [ $# -ge 2 ]; do
      printf ',\n  {"name": "%s", "address": "%s", "public_key": "%s", "model": "%s", "threads": 1}' \
        "$1" "$2" "$TMP/$1.key.pub" "$RING_MODEL"
      shift 2
    done
    printf '\n]}\n'
  } >"$file"
}
ring_worker a --profile-cache "$TMP/cache-a" || exit 1; AA=$WORKER_ADDR
auto_json "$TMP/auto_down.json" '"profile_ms": 200,' a "$AA" b "$BB"
ring_run auto_down "$TMP/auto_down.json" --rebalance off
[ "$RC" = 0 ] && ok || fail "auto, one down: rc $RC: $(cat "$TMP/auto_down.err")"
[ "$(jq -c .generated_ids "$TMP/auto_down.out" 2>/dev/null)" = "$want" ] && ok \
  || fail "auto, one down: ids differ from one device"
grep -q "warning: cluster: starting with 2 of 3 devices; missing: b ($BB)" "$TMP/auto_down.err" \
  && jq -e '.ring.placement == "halda" and (.ring.device[2].state | . == "lost" or . == "rejoining") and .ring.device[1].layers > 0' "$TMP/auto_down.out" >/dev/null \
  && ok || fail "auto, one down: $(grep cluster "$TMP/auto_down.err"; jq -c .ring "$TMP/auto_down.out")"

# b measures itself for 4 s (no cache); it is killed once it has the hello
release_port
RING_LISTEN=$BB ring_worker b || exit 1; BPID=$WORKER_PID
auto_json "$TMP/auto_die.json" '"profile_ms": 4000,' a "$AA" b "$BB"
ring_run auto_die "$TMP/auto_die.json" --rebalance off &
RUN_PID=$!
for i in $(seq 1 200); do
  grep -q "connected" "$TMP/b.log" && break
  sleep 0.05
done
grep -q "connected" "$TMP/b.log" && ok || fail "auto, dying: b never got the hello: $(cat "$TMP/b.log")"
kill -KILL "$BPID"
wait "$BPID" 2>/dev/null
hold_port "$BB" # down for the rest
wait "$RUN_PID"
[ "$(jq -c .generated_ids "$TMP/auto_die.out" 2>/dev/null)" = "$want" ] && ok \
  || fail "auto, dying: $(cat "$TMP/auto_die.err")"
grep -q "missing: b ($BB): connection lost before its answer to hello" "$TMP/auto_die.err" && ok \
  || fail "auto, dying: the start does not say b died: $(grep cluster "$TMP/auto_die.err")"
# the second automatic run: the head's profile comes from its cache
grep -q "cluster: the head's profile: measured" "$TMP/auto_down.err" \
  && grep -q "cluster: the head's profile: cached" "$TMP/auto_die.err" && ok \
  || fail "the head's profile is not cached: $(grep "head's profile" "$TMP/auto_down.err" "$TMP/auto_die.err")"

# ---- lares ring status: a ready, b down (killed above), c refusing the head ----
ring_worker c --allow "$TMP/c.key.pub" || exit 1; CC=$WORKER_ADDR
ring_json "$TMP/status.json" '"connect_timeout_ms": 1000,' 1 a "$AA" 2 b "$BB" 1 c "$CC" 1
timeout 30 "$LARES" ring status --ring "$TMP/status.json" -m "$RING_MODEL" >"$TMP/status.out" 2>"$TMP/status.err" \
  && ok || fail "ring status: $(cat "$TMP/status.err")"
grep -Eq "^head +\(head\) +ready" "$TMP/status.out" \
  && grep -Eq "^a +$AA +ready +2 +2 +1 +[0-9]+ +[0-9.]+ [KMG]iB +[0-9]+\.[0-9]{3}( |$)" "$TMP/status.out" \
  && grep -Eq "^b +$BB +down +1 +1 +1 +- +- +- " "$TMP/status.out" \
  && grep -Eq "^b +$BB +down .*no answer to hello" "$TMP/status.out" \
  && grep -Eq "^c +$CC +down .*does not allow this key" "$TMP/status.out" \
  && grep -q "^2 of 4 devices ready " "$TMP/status.out" \
  && grep -q "^no head on this machine runs this ring now" "$TMP/status.out" && ok || fail "ring status: $(cat "$TMP/status.out")"
# a let go: the next head gets it
ring_json "$TMP/after.json" "$LIVE" 1 a "$AA" 4
ring_run after "$TMP/after.json"
[ "$RC" = 0 ] && [ "$(jq -c .generated_ids "$TMP/after.out" 2>/dev/null)" = "$want" ] && ok \
  || fail "a head after ring status: $(cat "$TMP/after.err")"
finish
