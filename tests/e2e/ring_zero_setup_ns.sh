#!/usr/bin/env bash
# Zero-setup rings (issue 19) over real networks between namespaces, with no
# loopback discovery: subnet A (a bridge: the head and workers w1, w2) and
# subnet B (worker w3) joined by a router namespace, so broadcast and
# multicast stay on A and w3 is reachable only by a seed. Every worker runs
# with the default ports and a fresh config directory; w1 and w3 have no
# model file, only an empty weight cache. Broadcast alone and multicast
# alone find w1 and w2; only a seed finds w3; pairing w1 and w3 with the
# codes they show; --ring auto ships w1 and w3 their windows' weights, gives
# the greedy ids of one device and never connects to the unpaired w2; a
# second run ships nothing and reaches its first token in under 2 s; lares
# devices then shows each paired worker's cached model (and nothing of the
# unpaired w2's). Everything made here is removed.
# Skips (77) without root or network namespaces.
. "$(dirname "$0")/lib.sh"
. "$LARES_SRC/tests/cluster/ring_lib.sh"
need jq
trap "" PIPE
[ "$(id -u)" -eq 0 ] || { echo "ring_zero_setup_ns: needs root (network namespaces)" >&2; exit 77; }
command -v ip >/dev/null || { echo "ring_zero_setup_ns: needs ip (iproute2)" >&2; exit 77; }
ID=zs$(( $$ % 100000 ))
NS=("${ID}h" "${ID}w1" "${ID}w2" "${ID}w3" "${ID}r")
cleanup() {
  ring_cleanup
  local n
  for n in "${NS[@]}"; do ip netns del "$n" 2>/dev/null; done
  rm -rf "$TMP"
}
trap cleanup EXIT
ip netns add "${ID}probe" 2>/dev/null || { echo "ring_zero_setup_ns: cannot make network namespaces" >&2; exit 77; }
ip netns del "${ID}probe"
# a private 10.x.y/24 pair no route uses
A="" B=""
for a in $(seq 151 200); do
  b=$(( ($$ + a) % 250 ))
  if ! ip route | grep -q "^10\.$a\.$b\.\|^10\.$a\.$((b + 1))\."; then A=10.$a.$b; B=10.$a.$((b + 1)); break; fi
done
[ -n "$A" ] || { echo "ring_zero_setup_ns: no free subnet" >&2; exit 77; }
R=${ID}r
for n in "${NS[@]}"; do ip netns add "$n" && ip -n "$n" link set lo up || { fail "namespace $n"; finish; }; done
ip -n "$R" link add brA type bridge && ip -n "$R" link set brA up && ip -n "$R" addr add "$A.1/24" dev brA \
  || { fail "bridge"; finish; }
ip netns exec "$R" sysctl -qw net.ipv4.ip_forward=1 || { fail "forwarding in the router namespace"; finish; }
# attach NS HOSTNUM: namespace NS on subnet A at $A.HOSTNUM, default route via the router
attach() {
  local ns=$1 host=$2
  ip link add "${ns}a" type veth peer name "${ns}b" &&
    ip link set "${ns}a" netns "$R" && ip -n "$R" link set "${ns}a" master brA up &&
    ip link set "${ns}b" netns "$ns" && ip -n "$ns" link set "${ns}b" name eth0 &&
    ip -n "$ns" addr add "$A.$host/24" dev eth0 && ip -n "$ns" link set eth0 up &&
    ip -n "$ns" route add default via "$A.1"
}
attach "${ID}h" 10 && attach "${ID}w1" 11 && attach "${ID}w2" 12 || { fail "subnet A"; finish; }
ip link add "${ID}w3a" type veth peer name "${ID}w3b" &&
  ip link set "${ID}w3a" netns "$R" && ip -n "$R" addr add "$B.1/24" dev "${ID}w3a" && ip -n "$R" link set "${ID}w3a" up &&
  ip link set "${ID}w3b" netns "${ID}w3" && ip -n "${ID}w3" link set "${ID}w3b" name eth0 &&
  ip -n "${ID}w3" addr add "$B.13/24" dev eth0 && ip -n "${ID}w3" link set eth0 up &&
  ip -n "${ID}w3" route add default via "$B.1" || { fail "subnet B"; finish; }

MODEL=$(model stories260K.gguf)
PROMPT="Once upon a time"
unset LARES_DISCOVERY_PORT LARES_DISCOVERY_LOOPBACK XDG_CONFIG_HOME
export HOME="$TMP/home"
mkdir -p "$HOME"
H="$TMP/cfg-head"
head_lares() { LARES_CONFIG_DIR="$H" ip netns exec "${ID}h" "$LARES" "$@"; }

# ns_worker NAME [options]: lares worker in its namespace, default ports, a fresh config directory
ns_worker() {
  local name=$1
  shift
  LARES_CONFIG_DIR="$TMP/cfg-$name" ip netns exec "${ID}$name" "$LARES" worker --name "$name" -t 1 "$@" \
    >"$TMP/$name.out" 2>"$TMP/$name.log" &
  RING_PIDS+=($!)
  local i
  for i in $(seq 1 400); do
    grep -q 'waiting for a head' "$TMP/$name.log" 2>/dev/null && return 0
    sleep 0.05
  done
  echo "worker $name did not start: $(cat "$TMP/$name.log")" >&2
  return 1
}
# w1 and w3 without the model file: their weights come from the head
ns_worker w1 --cache "$TMP/cache-w1" || { fail "worker w1"; finish; }
ns_worker w2 -m "$MODEL" --cache "$TMP/cache-w2" || { fail "worker w2"; finish; }
ns_worker w3 --cache "$TMP/cache-w3" || { fail "worker w3"; finish; }
grep -q 'ring on port 9100, pairing on port 9101, discovery on UDP 9102' "$TMP/w1.log" && ok \
  || fail "default ports: $(cat "$TMP/w1.log")"

names() { jq -c '[.devices[] | select(.address != null) | .name] | sort' "$1"; }
for r in all broadcast multicast; do
  head_lares devices --json --discovery "$r" >"$TMP/dev-$r.json" 2>"$TMP/dev-$r.err" || fail "devices $r: $(cat "$TMP/dev-$r.err")"
  [ "$(names "$TMP/dev-$r.json")" = '["w1","w2"]' ] && ok || fail "devices --discovery $r: $(cat "$TMP/dev-$r.json")"
done
jq -e --arg a "$A.11:9100" '.devices[] | select(.name == "w1") | .address == $a' "$TMP/dev-all.json" >/dev/null \
  && ok || fail "w1's address: $(cat "$TMP/dev-all.json")"
SEED=(--peer "$B.13:9102")
head_lares devices --json "${SEED[@]}" >"$TMP/dev-seed.json" 2>&1
[ "$(names "$TMP/dev-seed.json")" = '["w1","w2","w3"]' ] && ok || fail "with a seed: $(cat "$TMP/dev-seed.json")"
jq -e --arg a "$B.13:9100" '.devices[] | select(.name == "w3") | .address == $a and .route == "peer"' "$TMP/dev-seed.json" \
  >/dev/null && ok || fail "w3 by the seed: $(cat "$TMP/dev-seed.json")"

# pair_ns NAME [options]: lares pair on the head, the code typed from the worker's stderr
pair_ns() {
  local name=$1
  shift
  rm -f "$TMP/code.fifo"
  mkfifo "$TMP/code.fifo"
  head_lares pair "$name" "$@" <"$TMP/code.fifo" >"$TMP/pair.out" 2>"$TMP/pair.err" &
  local pid=$! code="" i
  exec 7>"$TMP/code.fifo"
  for i in $(seq 1 300); do
    code=$(grep -o 'pairing code [0-9]\{6\}' "$TMP/$name.log" | tail -1 | cut -d' ' -f3)
    [ -n "$code" ] && break
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.05
  done
  echo "$code" >&7
  exec 7>&-
  wait "$pid"
}
pair_ns w1 && ok || fail "pair w1: $(cat "$TMP/pair.err")"
pair_ns w3 "${SEED[@]}" && ok || fail "pair w3: $(cat "$TMP/pair.err")"
grep -q '^worker w1 ' "$H/paired" && grep -q '^worker w3 ' "$H/paired" && ok || fail "head store: $(cat "$H/paired")"

"$LARES" run -m "$MODEL" -p "$PROMPT" -n 24 --temp 0 -t 1 --json >"$TMP/local.json" 2>"$TMP/local.err" \
  || fail "local run: $(cat "$TMP/local.err")"
want=$(jq -c .generated_ids "$TMP/local.json")
for run in first second; do
  if head_lares run -m "$MODEL" -p "$PROMPT" -n 24 --temp 0 -t 1 --json --ring auto --placement even --rebalance off \
      "${SEED[@]}" >"$TMP/auto-$run.json" 2>"$TMP/auto-$run.err"; then
    [ "$(jq -c .generated_ids "$TMP/auto-$run.json")" = "$want" ] && ok \
      || fail "--ring auto ($run run): $(jq -c .generated_ids "$TMP/auto-$run.json"), one device: $want"
    jq -e '[.ring.device[] | select(.name == "w1" or .name == "w3") | .layers > 0 and .windows_run > 0] | (length == 2 and all)' \
      "$TMP/auto-$run.json" >/dev/null && ok || fail "--ring auto devices: $(jq -c .ring.device "$TMP/auto-$run.json")"
  else
    fail "--ring auto ($run run): $(cat "$TMP/auto-$run.err")"
  fi
done
# the first run shipped each worker its windows; the second only checked the caches
jq -e '[.ring.device[] | select(.name == "w1" or .name == "w3") | .shipped_bytes > 0] | (length == 2 and all)' \
  "$TMP/auto-first.json" >/dev/null && ok || fail "first run shipped: $(jq -c '[.ring.device[] | {name, shipped_bytes}]' "$TMP/auto-first.json")"
grep -q 'worker fetch: fetched' "$TMP/w1.log" && grep -q 'worker fetch: fetched' "$TMP/w3.log" && ok \
  || fail "no fetch progress on the workers: $(tail -3 "$TMP/w1.log")"
jq -e '[.ring.device[] | .shipped_bytes // 0] | add == 0' "$TMP/auto-second.json" >/dev/null && ok \
  || fail "second run shipped: $(jq -c '[.ring.device[] | {name, shipped_bytes}]' "$TMP/auto-second.json")"
# the whole command to its first token from the warm caches (-n 1: the wall
# clock of the command is at least its time to first token)
t0=$(date +%s%N)
head_lares run -m "$MODEL" -p "$PROMPT" -n 1 --temp 0 -t 1 --json --ring auto --placement even --rebalance off \
  "${SEED[@]}" >"$TMP/auto-warm.json" 2>"$TMP/auto-warm.err" || fail "warm run: $(cat "$TMP/auto-warm.err")"
ms=$(( ($(date +%s%N) - t0) / 1000000 ))
echo "a run from the caches: the whole command (discovery, connection, one token) took $ms ms"
[ "$ms" -lt 2000 ] && ok || fail "a run from the caches took $ms ms to its first token (bound 2000)"
grep -q 'connected' "$TMP/w2.log" && fail "the unpaired w2 was used" || ok

# ---- lares devices: the paired workers' caches, sealed for this head ----
# A worker refreshes its summary at most once a second, before an
# announcement or an answer goes out, and at once after a fetch ends (the
# first run's scan refreshed it before any weights arrived, and with this
# tiny model the runs and this scan could all fall within that second: a
# clean-clone run once saw w1's summary empty here). So the first scan must
# agree; the check asks up to four times, 0.7 s apart, only to tell a late
# summary (the refresh after the fetch missed) from a wrong one.
cache_ok() { # WORKER: the scan's summary of WORKER agrees with its own listing
  local held
  held=$("$LARES" worker --cache "$TMP/cache-$1" --cache-list 2>/dev/null | sed -n 3p | awk '{print $(NF-2)}')
  jq -e --arg w "$1" --arg h "$held" '.devices[] | select(.name == $w) | .cached_models
      | length == 1 and .[0].bytes > 0 and .[0].bytes <= .[0].file_bytes and .[0].tensors_held > 0
        and "\(.[0].tensors_held)/\(.[0].tensors)" == $h' "$TMP/dev-cache.json" >/dev/null
}
for try in 1 2 3 4; do
  head_lares devices --json "${SEED[@]}" >"$TMP/dev-cache.json" 2>"$TMP/dev-cache.err" || fail "devices: $(cat "$TMP/dev-cache.err")"
  cache_ok w1 && cache_ok w3 && break
  sleep 0.7
done
[ "$try" -eq 1 ] && ok || fail "devices: the cache summaries agreed only at scan $try (the summary was not refreshed after the fetch)"
for w in w1 w3; do
  cache_ok "$w" && ok || fail "devices: $w's cache (its own listing: $("$LARES" worker --cache "$TMP/cache-$w" --cache-list 2>/dev/null | sed -n 3p)): $(cat "$TMP/dev-cache.json")"
done
jq -e '.devices[] | select(.name == "w2") | has("cached_models") | not' "$TMP/dev-cache.json" >/dev/null \
  && ok || fail "devices: the unpaired w2's cache was readable: $(cat "$TMP/dev-cache.json")"
head_lares devices "${SEED[@]}" >"$TMP/dev-cache.txt" 2>&1
grep -A1 '^w1 ' "$TMP/dev-cache.txt" | grep -q '^    cache: .* of .* tensors)' && ok \
  || fail "devices table: $(cat "$TMP/dev-cache.txt")"
finish
