#!/usr/bin/env bash
# Failures mid-generation (issues 6 and 9): a worker killed (SIGKILL) or frozen
# (SIGSTOP, a hang or an unreachable device) is noticed by the head within the
# heartbeat timeout. With --failover off the head names it and exits with an
# error instead of hanging; with failover (the default) it warns, re-plans over
# the survivors and completes the generation with the text of an undisturbed
# run; when the survivors cannot run the model it fails with a clear error,
# never hangs. When the head dies, the workers go back to waiting and serve
# the next head.
# Link latency (ring.json "link_delay_ms") stretches the generation so the
# failure lands mid-way.
. "$(dirname "$0")/lib.sh"
. "$LARES_SRC/tests/cluster/ring_lib.sh"
ring_trap
export RING_MODEL RING_DEV_EXTRA
RING_MODEL=$(model stories260K.gguf)
RING_DEV_EXTRA=', "link_delay_ms": 10'
TIMEOUT_MS=1500

start_head() { # ring.json [options]: runs a long generation in the background (HEAD_PID)
  local ring=$1
  shift
  # empty now: wait_tokens must not read the last run's text before the
  # background shell truncates the file
  : >"$TMP/head.out"
  : >"$TMP/head.err"
  "$LARES" run -m "$RING_MODEL" -p "Once upon a time" -n 400 --temp 0 -t 1 --ring "$ring" "$@" \
    >"$TMP/head.out" 2>"$TMP/head.err" &
  HEAD_PID=$!
}
wait_tokens() { # until the head has streamed some text (at most 10 s)
  local i
  for i in $(seq 1 200); do
    [ "$(wc -c <"$TMP/head.out")" -gt 40 ] && return 0
    sleep 0.05
  done
  return 1
}
head_result() { # waits at most 30 s for the head; sets RC and SECS (from the fault)
  local t0 i
  t0=$(date +%s.%N)
  for i in $(seq 1 300); do
    kill -0 "$HEAD_PID" 2>/dev/null || break
    sleep 0.1
  done
  if kill -0 "$HEAD_PID" 2>/dev/null; then
    kill -9 "$HEAD_PID"
    RC=hang
  else
    wait "$HEAD_PID"
    RC=$?
  fi
  SECS=$(echo "$(date +%s.%N) - $t0" | bc)
}

for sig in KILL STOP; do
  ring_worker a || exit 1; AA=$WORKER_ADDR
  ring_worker b || exit 1; BB=$WORKER_ADDR; BPID=$WORKER_PID
  ring_json "$TMP/ring.json" "\"heartbeat_ms\": 100, \"timeout_ms\": $TIMEOUT_MS," 1 a "$AA" 2 b "$BB" 2
  start_head "$TMP/ring.json" --failover off --rebalance off
  wait_tokens || fail "$sig: no tokens before the fault: $(cat "$TMP/head.err")"
  kill -"$sig" "$BPID"
  head_result
  [ "$RC" != hang ] && [ "$RC" -ne 0 ] && ok || fail "$sig: the head ended with '$RC' after a dead worker"
  grep -q "error: b ($BB): " "$TMP/head.err" && ok || fail "$sig: the head does not name worker b: $(cat "$TMP/head.err")"
  if [ "$sig" = STOP ]; then
    grep -q "no heartbeat for" "$TMP/head.err" && ok || fail "STOP: not reported as silent: $(cat "$TMP/head.err")"
  fi
  # the fault is reported within the timeout plus a margin for a loaded machine
  [ "$(echo "$SECS < 10" | bc)" = 1 ] && ok || fail "$sig: the head took $SECS s after the fault"
  ring_cleanup
done

# failover: the same faults, the generation completes over the survivors with
# the text of an undisturbed run (greedy), and the head warns naming the device
"$LARES" run -m "$RING_MODEL" -p "Once upon a time" -n 400 --temp 0 -t 1 >"$TMP/local.out" 2>/dev/null
for sig in KILL STOP; do
  ring_worker a || exit 1; AA=$WORKER_ADDR
  ring_worker b || exit 1; BB=$WORKER_ADDR; BPID=$WORKER_PID
  ring_worker c || exit 1; CC=$WORKER_ADDR
  ring_json "$TMP/ring.json" "\"heartbeat_ms\": 100, \"timeout_ms\": $TIMEOUT_MS," 1 a "$AA" 2 b "$BB" 1 c "$CC" 1
  start_head "$TMP/ring.json" --rebalance off
  wait_tokens || fail "failover $sig: no tokens before the fault: $(cat "$TMP/head.err")"
  kill -"$sig" "$BPID"
  head_result
  [ "$RC" = 0 ] && ok || fail "failover $sig: the head ended with '$RC': $(cat "$TMP/head.err")"
  cmp -s "$TMP/head.out" "$TMP/local.out" && ok \
    || fail "failover $sig: the text differs from the undisturbed run: $(diff "$TMP/head.out" "$TMP/local.out" | head -5)"
  grep -q "warning: cluster: lost b ($BB)" "$TMP/head.err" && ok \
    || fail "failover $sig: no warning naming b: $(cat "$TMP/head.err")"
  grep -q "1 failover(s)" "$TMP/head.err" && ok || fail "failover $sig: no failover counted: $(cat "$TMP/head.err")"
  ring_cleanup
done

# unrecoverable: the head may not hold a layer ("memory" below one layer) and
# its only worker dies: a clear error naming the device and the reason, no hang
ring_worker a || exit 1; AA=$WORKER_ADDR; APID=$WORKER_PID
ring_json "$TMP/ring.json" "\"heartbeat_ms\": 100, \"timeout_ms\": $TIMEOUT_MS," 0 a "$AA" 5
sed -i 's/"w": 0}/"w": 0, "memory": 1024}/' "$TMP/ring.json"
start_head "$TMP/ring.json"
wait_tokens || fail "unrecoverable: no tokens before the fault: $(cat "$TMP/head.err")"
kill -KILL "$APID"
head_result
[ "$RC" != hang ] && [ "$RC" -ne 0 ] && ok || fail "unrecoverable: the head ended with '$RC'"
grep -q "lost a ($AA).*cannot run the model" "$TMP/head.err" && ok \
  || fail "unrecoverable: the error does not say why: $(cat "$TMP/head.err")"
[ "$(echo "$SECS < 10" | bc)" = 1 ] && ok || fail "unrecoverable: the head took $SECS s after the fault"
ring_cleanup

# the head dies: the workers notice and serve the next head
ring_worker a || exit 1; AA=$WORKER_ADDR
ring_worker b || exit 1; BB=$WORKER_ADDR
ring_json "$TMP/ring.json" "\"heartbeat_ms\": 100, \"timeout_ms\": $TIMEOUT_MS," 1 a "$AA" 2 b "$BB" 2
start_head "$TMP/ring.json" --rebalance off
wait_tokens || fail "no tokens before killing the head"
kill -9 "$HEAD_PID"; wait "$HEAD_PID" 2>/dev/null
for w in a b; do
  for i in $(seq 1 100); do
    grep -q "worker head lost" "$TMP/$w.log" && break
    sleep 0.1
  done
  grep -q "worker head lost: .*waiting for a head" "$TMP/$w.log" && ok || fail "worker $w did not notice the head died: $(cat "$TMP/$w.log")"
done
RING_DEV_EXTRA=""
ring_json "$TMP/ring2.json" "" 1 a "$AA" 2 b "$BB" 2
"$LARES" run -m "$RING_MODEL" -p "Once upon a time" -n 20 --temp 0 --json -t 1 >"$TMP/local.json" 2>/dev/null
"$LARES" run -m "$RING_MODEL" -p "Once upon a time" -n 20 --temp 0 --json -t 1 --ring "$TMP/ring2.json" \
  >"$TMP/again.json" 2>"$TMP/again.err" || fail "the next head after a dead one: $(cat "$TMP/again.err")"
[ "$(jq -c .generated_ids "$TMP/again.json")" = "$(jq -c .generated_ids "$TMP/local.json")" ] && ok \
  || fail "the next head's output differs"
finish
