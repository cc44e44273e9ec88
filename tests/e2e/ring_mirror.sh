#!/usr/bin/env bash
# A loss after a long conversation (issue 15): a worker killed (SIGKILL) after
# 600 positions costs no re-run with KV mirroring (the default: each worker
# sends the head a copy of the KV entries it writes, and the head hands the
# lost layers' entries to their new owners), and the generation ends with the
# text of one device. With "kv_mirror": false the same loss re-runs the whole
# conversation through the moved layers, and the text is the same too.
# The model is a llama-tiny synthesized here (4 layers, 1024 positions of
# context), b holding a window of 2 layers (the copy of every layer of a
# window is kept, not only its first).
. "$(dirname "$0")/lib.sh"
. "$LARES_SRC/tests/cluster/ring_lib.sh"
ring_trap
export RING_MODEL RING_DEV_EXTRA
RING_MODEL="$TMP/tiny.gguf"
RING_DEV_EXTRA=', "link_delay_ms": 2'
KILL_AT=600
N=900

"$LARES" synth --preset llama-tiny --type q8_0 -o "$RING_MODEL" \
  --vocab-from "$(model stories260K.gguf)" 2>"$TMP/synth.err" || {
  fail "synth: $(cat "$TMP/synth.err")"
  exit 1
}
"$LARES" run -m "$RING_MODEL" -p "Once upon a time" -n $N -c 1024 --temp 0 -t 1 \
  >"$TMP/local.out" 2>"$TMP/local.err" || fail "one device: $(cat "$TMP/local.err")"

for mirror in true false; do
  ring_worker a || exit 1; AA=$WORKER_ADDR
  ring_worker b || exit 1; BB=$WORKER_ADDR; BPID=$WORKER_PID
  ring_worker c || exit 1; CC=$WORKER_ADDR
  ring_json "$TMP/ring.json" "\"heartbeat_ms\": 100, \"timeout_ms\": 3000, \"kv_mirror\": $mirror," \
    0 a "$AA" 1 b "$BB" 2 c "$CC" 1
  "$LARES" run -m "$RING_MODEL" -p "Once upon a time" -n $N -c 1024 --temp 0 -t 1 -v \
    --rebalance off --ring "$TMP/ring.json" >"$TMP/head.out" 2>"$TMP/head.err" &
  HEAD_PID=$!
  # b logs every window it runs ("... token at P: ..."): killed once it ran position KILL_AT
  killed=no
  for i in $(seq 1 1200); do
    if grep -q " token at $KILL_AT:" "$TMP/b.log"; then
      kill -9 "$BPID"
      killed=yes
      break
    fi
    kill -0 "$HEAD_PID" 2>/dev/null || break
    sleep 0.05
  done
  [ $killed = yes ] && ok || fail "mirror $mirror: b never ran position $KILL_AT: $(tail -3 "$TMP/b.log")"
  for i in $(seq 1 1200); do
    kill -0 "$HEAD_PID" 2>/dev/null || break
    sleep 0.05
  done
  if kill -0 "$HEAD_PID" 2>/dev/null; then
    kill -9 "$HEAD_PID"
    fail "mirror $mirror: the head still runs 60 s after the kill"
  fi
  wait "$HEAD_PID" && ok || fail "mirror $mirror: the head failed: $(tail -5 "$TMP/head.err")"
  cmp -s "$TMP/head.out" "$TMP/local.out" && ok \
    || fail "mirror $mirror: the text differs from one device's: $(diff "$TMP/head.out" "$TMP/local.out" | head -5)"
  line=$(grep "cluster: failover: lost b ($BB)" "$TMP/head.err" | head -1)
  [ -n "$line" ] && ok || fail "mirror $mirror: no failover logged: $(tail -5 "$TMP/head.err")"
  rerun=$(echo "$line" | grep -o '[0-9]* positions re-run' | cut -d' ' -f1)
  context=$(echo "$line" | grep -o 'a context of [0-9]*' | grep -o '[0-9]*$')
  [ "${context:-0}" -ge $KILL_AT ] && ok || fail "mirror $mirror: the loss came at ${context:-?} positions: $line"
  if [ $mirror = true ]; then
    # at most the last token's position, whose copy may have gone down with b
    [ -n "$rerun" ] && [ "$rerun" -le 1 ] && ok || fail "mirror on: $rerun positions re-run: $line"
  else
    [ -n "$rerun" ] && [ "$rerun" -ge $KILL_AT ] && ok || fail "mirror off: $rerun positions re-run: $line"
  fi
  echo "kv_mirror $mirror: ${line#*cluster: }"
  ring_cleanup
done
finish
