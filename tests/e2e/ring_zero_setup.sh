#!/usr/bin/env bash
# Zero-setup rings (issue 19), on loopback with discovery allowed on lo: a
# worker with a fresh config directory and no key files, seen by lares
# devices; a forged beacon (seen, never trusted: its key cannot answer); a
# wrong pairing code (refused on both sides, nothing stored) and the right one
# (read from the worker's stderr, as a user reads the screen); a second worker
# on another address found only by a seed with broadcast and multicast off;
# --ring auto with the greedy ids of one device; an unpaired worker seen and
# never used; unpair: the device is no longer used; a paired worker refuses
# a second head's pairing.
. "$(dirname "$0")/lib.sh"
. "$LARES_SRC/tests/cluster/ring_lib.sh"
ring_trap
trap "" PIPE # a pairing that ended before its code was typed: the write fails, no signal
need jq
need python3
MODEL=$(model stories260K.gguf)
PROMPT="Once upon a time"
export HOME="$TMP/home" # nothing of the user's config is read or written
unset XDG_CONFIG_HOME
mkdir -p "$HOME"

free_udp() { python3 -c 'import socket; s=socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
export LARES_DISCOVERY_PORT
LARES_DISCOVERY_PORT=$(free_udp)
export LARES_DISCOVERY_LOOPBACK=1
P2=$(free_udp)   # w2's discovery port, on 127.0.0.2: reached by a seed only
PF=$(free_udp)   # the forger's
H="$TMP/cfg-head"

# zs_worker NAME [options]: lares worker with a fresh config directory and no key files
zs_worker() {
  local name=$1
  shift
  rm -f "$TMP/$name.log"
  LARES_CONFIG_DIR="$TMP/cfg-$name" "$LARES" worker --name "$name" -m "$MODEL" -t 1 "$@" \
    >"$TMP/$name.out" 2>"$TMP/$name.log" &
  WORKER_PID=$!
  RING_PIDS+=("$WORKER_PID")
  local i
  for i in $(seq 1 200); do
    grep -q 'waiting for a head' "$TMP/$name.log" 2>/dev/null && return 0
    kill -0 "$WORKER_PID" 2>/dev/null || break
    sleep 0.05
  done
  echo "zs_worker $name did not start: $(cat "$TMP/$name.log")" >&2
  return 1
}

# pair_with_code CFG NAME [options]: lares pair, the code typed from the worker's stderr
pair_with_code() {
  local cfg=$1 name=$2
  shift 2
  local before
  before=$(grep -c 'pairing code' "$TMP/$name.log")
  rm -f "$TMP/code.fifo"
  mkfifo "$TMP/code.fifo"
  LARES_CONFIG_DIR="$cfg" "$LARES" pair "$name" "$@" <"$TMP/code.fifo" >"$TMP/pair.out" 2>"$TMP/pair.err" &
  local pid=$! code="" i
  exec 7>"$TMP/code.fifo"
  for i in $(seq 1 300); do
    if [ "$(grep -c 'pairing code' "$TMP/$name.log")" -gt "$before" ]; then
      code=$(grep -o 'pairing code [0-9]\{6\}' "$TMP/$name.log" | tail -1 | cut -d' ' -f3)
      break
    fi
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.05
  done
  echo "$code" >&7
  exec 7>&-
  wait "$pid"
}

# ---- a worker with no arguments at all: makes its key, waits to be paired
# (the default ports may be taken on a shared machine: then only its message is checked) ----
LARES_CONFIG_DIR="$TMP/cfg-bare" "$LARES" worker 2>"$TMP/bare.log" >/dev/null &
BARE=$!
RING_PIDS+=("$BARE")
for i in $(seq 1 400); do # up to 20 s on a loaded machine (sanitizers)
  grep -q 'waiting for a head\|already in use\|cannot' "$TMP/bare.log" 2>/dev/null && break
  kill -0 "$BARE" 2>/dev/null || break
  sleep 0.05
done
kill "$BARE" 2>/dev/null
if grep -q 'waiting to be paired' "$TMP/bare.log"; then
  [ "$(stat -c %a "$TMP/cfg-bare/device.key")" = 600 ] && ok || fail "bare worker: key mode"
  grep -q 'ring on port 9100, pairing on port 9101' "$TMP/bare.log" && ok \
    || fail "bare worker: default ports: $(cat "$TMP/bare.log")"
else
  grep -qi 'address already in use\|cannot listen\|cannot bind' "$TMP/bare.log" && ok \
    || fail "bare worker: $(cat "$TMP/bare.log")"
fi

zs_worker w1 --listen 127.0.0.1:0 || exit 1
W1PID=$WORKER_PID
[ -f "$TMP/cfg-w1/device.key" ] && ok || fail "w1 made no key"
grep -q 'waiting to be paired: on the head, lares pair w1' "$TMP/w1.log" && ok \
  || fail "w1 does not say it waits: $(cat "$TMP/w1.log")"

# ---- lares devices: seen, unpaired ----
LARES_CONFIG_DIR="$H" "$LARES" devices --json >"$TMP/dev.json" 2>"$TMP/dev.err" \
  || fail "devices: $(cat "$TMP/dev.err")"
jq -e '.devices | map(select(.name == "w1" and .state == "unpaired" and (.address|startswith("127.0.0.1:"))
       and (.fingerprint|length) == 19 and (.version|length) > 0)) | length == 1' "$TMP/dev.json" >/dev/null \
  && ok || fail "devices: w1 unpaired: $(cat "$TMP/dev.json")"
W1FP=$(jq -r '.devices[] | select(.name == "w1") | .fingerprint' "$TMP/dev.json")
LARES_CONFIG_DIR="$H" "$LARES" devices >"$TMP/dev.txt" 2>&1
grep -q "^w1 .*$W1FP *unpaired" "$TMP/dev.txt" && ok || fail "devices table: $(cat "$TMP/dev.txt")"
# one route at a time: broadcast alone, multicast alone; peers alone without a peer is an error
for r in broadcast multicast; do
  LARES_CONFIG_DIR="$H" "$LARES" devices --json --discovery "$r" >"$TMP/dev-$r.json" 2>&1
  jq -e '[.devices[] | select(.name == "w1")] | length == 1' "$TMP/dev-$r.json" >/dev/null \
    && ok || fail "devices --discovery $r: $(cat "$TMP/dev-$r.json")"
done
if LARES_CONFIG_DIR="$H" "$LARES" devices --discovery peers >"$TMP/dev-p.txt" 2>&1; then
  fail "devices with no route succeeded"
else
  grep -q 'no route to ask on' "$TMP/dev-p.txt" && ok || fail "no route: $(cat "$TMP/dev-p.txt")"
fi
LARES_CONFIG_DIR="$H" "$LARES" devices --discovery pigeons >"$TMP/bad.txt" 2>&1
[ $? -eq 2 ] && grep -q "'pigeons' is not a discovery route" "$TMP/bad.txt" && ok \
  || fail "bad route: $(cat "$TMP/bad.txt")"

# ---- a forged beacon: garbage and a valid-looking announcement named w1 with a key nobody holds ----
python3 - "$PF" "$TMP/forger.ready" <<'PY' &
import os, socket, struct, sys, time
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind(("127.0.0.3", int(sys.argv[1])))
open(sys.argv[2], "w").close()
s.settimeout(60)
key = os.urandom(32)
ann = b"LRDB" + struct.pack("<HHHH", 1, 2, 1, 1) + key + bytes([2]) + b"w1" + bytes([5]) + b"0.1.0"
end = time.time() + 60
while time.time() < end:
    try:
        q, a = s.recvfrom(64)
    except socket.timeout:
        break
    s.sendto(b"LRDB\x01\x00\x02\x00garbage", a)
    s.sendto(ann, a)
PY
RING_PIDS+=($!)
for i in $(seq 1 200); do [ -f "$TMP/forger.ready" ] && break; sleep 0.05; done
LARES_CONFIG_DIR="$H" "$LARES" devices --json --peer "127.0.0.3:$PF" >"$TMP/forged.json" 2>"$TMP/forged.err"
jq -e '.malformed_answers >= 1 and ([.devices[] | select(.name == "w1")] | length == 2)' "$TMP/forged.json" >/dev/null \
  && ok || fail "forged beacons: $(cat "$TMP/forged.json" "$TMP/forged.err")"
FORGED_FP=$(jq -r --arg fp "$W1FP" '.devices[] | select(.name == "w1" and .fingerprint != $fp) | .fingerprint' "$TMP/forged.json")
if LARES_CONFIG_DIR="$H" "$LARES" pair w1 --code 123456 --peer "127.0.0.3:$PF" >"$TMP/amb.out" 2>&1; then
  fail "pair with two devices named w1 succeeded"
else
  grep -q "2 devices answer to 'w1': give the fingerprint" "$TMP/amb.out" && ok || fail "ambiguous: $(cat "$TMP/amb.out")"
fi
if LARES_CONFIG_DIR="$H" "$LARES" pair "$FORGED_FP" --code 123456 --peer "127.0.0.3:$PF" >"$TMP/forge.out" 2>&1; then
  fail "pairing with a forged beacon succeeded"
else
  grep -q 'no answer from 127.0.0.3:1' "$TMP/forge.out" && ok || fail "forged pairing: $(cat "$TMP/forge.out")"
fi
[ ! -s "$H/paired" ] || ! grep -q w1 "$H/paired" && ok || fail "forged pairing stored something: $(cat "$H/paired")"

# ---- a wrong code: refused, nothing stored anywhere ----
before=$(grep -c 'pairing code' "$TMP/w1.log")
echo 000000 >"$TMP/wrong.txt"
if LARES_CONFIG_DIR="$H" "$LARES" pair w1 <"$TMP/wrong.txt" >"$TMP/wrong.out" 2>&1; then
  # the code is 000000 once in a million: then this run says nothing
  grep -q 'pairing code 000000' "$TMP/w1.log" || fail "a wrong code was accepted"
else
  grep -q 'does not match this pairing.*nothing was stored' "$TMP/wrong.out" && ok \
    || fail "wrong code: $(cat "$TMP/wrong.out")"
  grep -q 'refused, nothing stored: the head gave up: the code typed on the head was wrong' "$TMP/w1.log" \
    && ok || fail "worker on a wrong code: $(cat "$TMP/w1.log")"
  { [ ! -f "$H/paired" ] || ! grep -q '^worker' "$H/paired"; } && ok || fail "head stored a wrong pairing"
  [ ! -f "$TMP/cfg-w1/paired" ] && ok || fail "worker stored a wrong pairing: $(cat "$TMP/cfg-w1/paired")"
fi
[ "$(grep -c 'pairing code' "$TMP/w1.log")" -gt "$before" ] && ok || fail "w1 showed no code"

# ---- the right code ----
pair_with_code "$H" w1 && ok || fail "pair w1: $(cat "$TMP/pair.err")"
grep -q "^worker w1 " "$H/paired" && ok || fail "head store: $(cat "$H/paired" 2>&1)"
HEADKEY=$(grep -o 'public key [^ )]*' "$TMP/pair.err" | head -1 | cut -d' ' -f3)
grep -q "^head " "$TMP/cfg-w1/paired" && ok || fail "worker store: $(cat "$TMP/cfg-w1/paired" 2>&1)"
grep -q 'paired with head' "$TMP/w1.log" && ok || fail "w1 log: $(cat "$TMP/w1.log")"
LARES_CONFIG_DIR="$H" "$LARES" devices --json >"$TMP/dev2.json" 2>/dev/null
jq -e '[.devices[] | select(.name == "w1" and .state == "paired")] | length == 1' "$TMP/dev2.json" >/dev/null \
  && ok || fail "devices after pairing: $(cat "$TMP/dev2.json")"

# a paired worker takes no more pairings (without --pair): a second head is refused
if LARES_CONFIG_DIR="$TMP/cfg-head2" "$LARES" pair w1 --code 000000 >"$TMP/h2.out" 2>&1; then
  fail "a second head paired with a paired worker"
else
  grep -q 'not waiting to be paired' "$TMP/h2.out" && ok || fail "second head: $(cat "$TMP/h2.out")"
fi

# ---- w2 on another address, discovery port only known to a seed; multicast and broadcast off ----
zs_worker w2 --listen 127.0.0.2:0 --discovery-port "$P2" || exit 1
SEED=(--discovery peers --peer "127.0.0.2:$P2")
LARES_CONFIG_DIR="$H" "$LARES" devices --json "${SEED[@]}" >"$TMP/dev3.json" 2>&1
jq -e '([.devices[] | select(.name == "w2" and .route == "peer" and (.address|startswith("127.0.0.2:")))] | length == 1)
       and ([.devices[] | select(.name == "w1" and .state == "paired, no answer")] | length == 1)' \
  "$TMP/dev3.json" >/dev/null && ok || fail "seed only: $(cat "$TMP/dev3.json")"
pair_with_code "$H" w2 "${SEED[@]}" && ok || fail "pair w2: $(cat "$TMP/pair.err")"

# ---- an unpaired worker: seen, never used ----
zs_worker w3 --listen 127.0.0.1:0 || exit 1
W3PID=$WORKER_PID

# ---- --ring auto: the greedy ids of one device ----
"$LARES" run -m "$MODEL" -p "$PROMPT" -n 24 --temp 0 -t 1 --json >"$TMP/local.json" 2>"$TMP/local.err" \
  || fail "local run: $(cat "$TMP/local.err")"
want=$(jq -c .generated_ids "$TMP/local.json")
ALL=(--peer "127.0.0.2:$P2") # every route, plus the seed
for placement in even halda; do
  if LARES_CONFIG_DIR="$H" "$LARES" run -m "$MODEL" -p "$PROMPT" -n 24 --temp 0 -t 1 --json \
      --ring auto --placement "$placement" --rebalance off "${ALL[@]}" >"$TMP/auto-$placement.json" 2>"$TMP/auto-$placement.err"; then
    got=$(jq -c .generated_ids "$TMP/auto-$placement.json")
    [ "$got" = "$want" ] && ok || fail "--ring auto ($placement): $got, one device: $want"
    jq -e '[.ring.device[].name] | index("w1") != null and index("w2") != null and index("w3") == null and length == 3' \
      "$TMP/auto-$placement.json" >/dev/null && ok || fail "--ring auto devices: $(jq -c '[.ring.device[].name]' "$TMP/auto-$placement.json")"
    grep -q '2 paired device(s) answered, 1 unpaired seen and not used' "$TMP/auto-$placement.err" && ok \
      || fail "--ring auto message: $(cat "$TMP/auto-$placement.err")"
  else
    fail "--ring auto ($placement): $(cat "$TMP/auto-$placement.err")"
  fi
done
jq -e '[.ring.device[] | select(.name == "w1" or .name == "w2") | .layers > 0 and .windows_run > 0] | all and length == 2' \
  "$TMP/auto-even.json" >/dev/null && ok || fail "even: workers without layers: $(jq -c .ring.device "$TMP/auto-even.json")"
grep -q 'connected' "$TMP/w3.log" && fail "the unpaired w3 was used: $(cat "$TMP/w3.log")" || ok

# ---- unpair: the device is no longer used ----
LARES_CONFIG_DIR="$H" "$LARES" unpair w1 >"$TMP/unpair.out" 2>&1 && ok || fail "unpair: $(cat "$TMP/unpair.out")"
grep -q '^worker w1 ' "$H/paired" && fail "w1 still paired: $(cat "$H/paired")" || ok
if LARES_CONFIG_DIR="$H" "$LARES" unpair w1 >"$TMP/unpair2.out" 2>&1; then
  fail "unpairing twice succeeded"
else
  grep -q "no paired device 'w1'" "$TMP/unpair2.out" && ok || fail "unpair twice: $(cat "$TMP/unpair2.out")"
fi
n_conn=$(grep -c 'connected' "$TMP/w1.log")
if LARES_CONFIG_DIR="$H" "$LARES" run -m "$MODEL" -p "$PROMPT" -n 24 --temp 0 -t 1 --json \
    --ring auto --placement even "${ALL[@]}" >"$TMP/auto-unpaired.json" 2>"$TMP/auto-unpaired.err"; then
  got=$(jq -c .generated_ids "$TMP/auto-unpaired.json")
  [ "$got" = "$want" ] && ok || fail "--ring auto after unpair: $got, one device: $want"
  jq -e '[.ring.device[].name] | index("w1") == null and index("w2") != null' "$TMP/auto-unpaired.json" >/dev/null \
    && ok || fail "after unpair: $(jq -c '[.ring.device[].name]' "$TMP/auto-unpaired.json")"
else
  fail "--ring auto after unpair: $(cat "$TMP/auto-unpaired.err")"
fi
[ "$(grep -c 'connected' "$TMP/w1.log")" = "$n_conn" ] && ok || fail "the unpaired w1 was connected to"
# corrupt store: a clear error naming the line
echo "worker broken" >>"$H/paired"
if LARES_CONFIG_DIR="$H" "$LARES" devices >"$TMP/corrupt.out" 2>&1; then
  fail "a corrupt store was read"
else
  grep -q 'paired:[0-9]*: not a paired device' "$TMP/corrupt.out" && ok || fail "corrupt store: $(cat "$TMP/corrupt.out")"
fi
kill "$W1PID" "$W3PID" 2>/dev/null
finish
