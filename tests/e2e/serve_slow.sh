#!/usr/bin/env bash
# lares serve against slow and hostile clients (issue 21), on loopback only,
# bounded in count and time (about 25 s): serve_slow.py opens the stalled
# connections from addresses of 127.0.0.0/8 other than 127.0.0.1, so the
# normal client (curl from 127.0.0.1) is another client address.
#
# 1. 200 connections from 10 addresses send half a request head and stall;
#    while they are held, /health, /metrics and a completion (the reference
#    text) are answered, connections waiting longest are evicted for new
#    ones, and every stalled connection is closed by the server by the
#    header deadline (10 s, the default).
# 2. The deadlines count from the start, not from the last byte: a head
#    dribbled one byte per 0.25 s, and a body after a prompt head, are cut
#    at 2 s (--header-timeout 2, --body-timeout 2), far before the idle
#    timeout (30 s).
# 3. --max-connections-per-ip 4: of 10 connections from one address, 6 are
#    refused at once; other addresses are served.
# 4. The reserve: with --max-connections 2 taken by two bodies in progress,
#    /health and /metrics are still answered and other endpoints get 503
#    too_many_connections; once they are gone, everything is served again.
# 5. --idle-timeout 1 closes no reply that took longer to generate, nor a
#    stream that waited in the queue longer.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/serve_lib.sh"
need python3
SLOW="python3 $(dirname "$0")/serve_slow.py"
M=$(model stories260K.gguf)
EXP=$(model expected/greedy_once_upon_a_time.json)
WANT=$(jq -r '.results[] | select(.model=="stories260K.gguf") | .reference_text' "$EXP")
HALF='POST /v1/chat/completions HTTP/1.1\r\nHost: lares\r\nContent-Type: appl'

metric() { # metric URL NAME: the value, or "none"
  curl -sS --max-time 5 "$1/metrics" | awk -v n="$2" '$1 == n { print $2; f = 1 } END { if (!f) print "none" }'
}
port_of() { echo "${1##*:}"; }

# ---- 1. 200 stalled connections while a normal client is served ----
start_server a -m "$M" -t 1 -c 2048
$SLOW hold "$(port_of "$URL_a")" --sources "$(echo 127.0.0.{10..19} | tr ' ' ,)" --per-source 20 \
  --data "$HALF" --ready "$TMP/ready" --max-s 20 >"$TMP/hold.json" 2>"$TMP/hold.err" &
HOLD=$!
for _ in $(seq 1 200); do [ -s "$TMP/ready" ] && break; sleep 0.05; done
[ -s "$TMP/ready" ] && ok || fail "the stalled clients did not get going: $(cat "$TMP/hold.err")"
OPEN=$(metric "$URL_a" lares_connections_open)
[ "$OPEN" != none ] && [ "$OPEN" -ge 60 ] && ok || fail "stalled connections held: $OPEN open, want >= 60"
for i in 1 2 3; do
  code=$(curl -sS -o "$TMP/health" -w '%{http_code}' --max-time 5 "$URL_a/health")
  [ "$code" = 200 ] && [ "$(jq -r .status "$TMP/health")" = ok ] && ok ||
    fail "/health $i under 200 stalled connections: $code $(cat "$TMP/health")"
done
code=$(post "$URL_a" /v1/completions '{"model":"lares","prompt":"Once upon a time","max_tokens":48,"temperature":0}' --max-time 60)
[ "$code" = 200 ] && [ "$(jq -r '.choices[0].text' "$TMP/body")" = "$WANT" ] && ok ||
  fail "completion under 200 stalled connections: $code $(head -c 300 "$TMP/body")"
EVICTED=$(metric "$URL_a" 'lares_connections_closed_total{reason="evicted"}')
[ "$EVICTED" != none ] && [ "$EVICTED" -ge 1 ] && ok || fail "no connection was evicted: $EVICTED"
wait "$HOLD"
cat "$TMP/hold.json"
# every stalled connection the server took was closed by it: evicted, refused at the limit,
# or cut at the header deadline of 10 s (plus the reaper's period and a loaded machine's slack)
jq -e '.opened == 200 and .closed == 200 and .open_at_end == 0 and .close_s[-1] <= 14' \
  "$TMP/hold.json" >/dev/null && ok || fail "stalled connections not closed by 14 s: $(cat "$TMP/hold.json")"
jq -e '[.close_s[] | select(. >= 9.5)] | length >= 1' "$TMP/hold.json" >/dev/null && ok ||
  fail "no connection lasted to the header deadline: $(cat "$TMP/hold.json")"
TIMED=$(metric "$URL_a" 'lares_connections_closed_total{reason="header_timeout"}')
[ "$TIMED" != none ] && [ "$TIMED" -ge 1 ] && ok || fail "no header timeout counted: $TIMED"
[ "$(metric "$URL_a" lares_connections_open)" = 1 ] && ok || fail "connections left open"
stop_server a TERM

# ---- 2. deadlines from the start of the head and of the body ----
start_server b -m "$M" -t 1 --header-timeout 2 --body-timeout 2 --max-connections-per-ip 4
P=$(port_of "$URL_b")
$SLOW dribble "$P" --data 'GET /health HTTP/1.1\r\nHost: lares\r\nX-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n\r\n' \
  --interval 0.25 --max-s 10 >"$TMP/dribble.json"
jq -e '.closed_after_s != null and .closed_after_s >= 1.8 and .closed_after_s <= 4.5' \
  "$TMP/dribble.json" >/dev/null && ok || fail "dribbled head not cut at 2 s: $(cat "$TMP/dribble.json")"
$SLOW dribble "$P" --prefix 'POST /v1/completions HTTP/1.1\r\nHost: lares\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n' \
  --data "$(printf '%0200d' 0)" --interval 0.25 --max-s 10 >"$TMP/body.json"
jq -e '.closed_after_s != null and .closed_after_s >= 1.8 and .closed_after_s <= 4.5' \
  "$TMP/body.json" >/dev/null && ok || fail "dribbled body not cut at 2 s: $(cat "$TMP/body.json")"
[ "$(metric "$URL_b" 'lares_connections_closed_total{reason="body_timeout"}')" = 1 ] && ok ||
  fail "body timeout not counted"

# ---- 3. connections per client address ----
$SLOW hold "$P" --sources 127.0.0.20 --per-source 10 --data "$HALF" --settle 0.5 --max-s 1 \
  >"$TMP/perip.json"
jq -e '.opened + .connect_failed == 10 and ([.close_s[] | select(. < 0.5)] | length) + .connect_failed == 6 and .open_at_end == 4' \
  "$TMP/perip.json" >/dev/null && ok || fail "per-address limit of 4: $(cat "$TMP/perip.json")"
code=$(curl -sS -o /dev/null -w '%{http_code}' --max-time 5 "$URL_b/v1/models")
[ "$code" = 200 ] && ok || fail "another address after the per-address limit: $code"
stop_server b TERM

# ---- 4. the reserve beyond --max-connections ----
start_server c -m "$M" -t 1 --max-connections 2 --max-connections-per-ip 2
P=$(port_of "$URL_c")
$SLOW hold "$P" --sources 127.0.0.30 --per-source 2 --settle 0.3 --max-s 20 --stop "$TMP/stop_c" \
  --data 'POST /v1/completions HTTP/1.1\r\nHost: lares\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{"mod' \
  --ready "$TMP/ready_c" >"$TMP/reserve.json" &
HOLD=$!
for _ in $(seq 1 200); do [ -s "$TMP/ready_c" ] && break; sleep 0.05; done
code=$(curl -sS -o "$TMP/health" -w '%{http_code}' --max-time 5 "$URL_c/health")
[ "$code" = 200 ] && ok || fail "/health from the reserve: $code"
[ "$(metric "$URL_c" lares_connections_open)" = 3 ] && ok || fail "/metrics from the reserve"
code=$(curl -sS -o "$TMP/models" -w '%{http_code}' -D "$TMP/hdr" --max-time 5 "$URL_c/v1/models")
[ "$code" = 503 ] && [ "$(jq -r .error.code "$TMP/models")" = too_many_connections ] &&
  grep -qi '^retry-after: 1' "$TMP/hdr" && ok || fail "over the limit: $code $(cat "$TMP/models")"
touch "$TMP/stop_c"
wait "$HOLD"
for _ in $(seq 1 100); do [ "$(metric "$URL_c" lares_connections_open)" = 1 ] && break; sleep 0.05; done
code=$(curl -sS -o /dev/null -w '%{http_code}' --max-time 5 "$URL_c/v1/models")
[ "$code" = 200 ] && ok || fail "after the slow bodies left: $code"
stop_server c TERM

# ---- 5. a reply that takes longer than --idle-timeout still arrives ----
# (libmicrohttpd's idle clock does not run while the server prepares a reply; this guards it)
start_server d -m "$M" -t 1 -c 2048 --idle-timeout 1
LONG='{"model":"lares","prompt":"Once upon a time","max_tokens":1900,"temperature":0}'
post "$URL_d" /v1/completions "$LONG" --max-time 600 >"$TMP/code_long" &
LONGPID=$!
sleep 0.2
code=$(curl -sS -N -o "$TMP/stream" -w '%{http_code}' --max-time 600 -H 'Content-Type: application/json' \
  --data-binary '{"model":"lares","prompt":"Once upon a time","max_tokens":1900,"temperature":0,"stream":true}' \
  "$URL_d/v1/completions")
wait "$LONGPID"
[ "$(cat "$TMP/code_long")" = 200 ] && [ "$(jq -r .usage.completion_tokens "$TMP/body")" = 1900 ] && ok ||
  fail "long reply with --idle-timeout 1: $(cat "$TMP/code_long") $(head -c 200 "$TMP/body")"
[ "$code" = 200 ] && tail -c 20 "$TMP/stream" | grep -q 'data: \[DONE\]' && ok ||
  fail "queued stream with --idle-timeout 1: $code $(tail -c 200 "$TMP/stream")"
stop_server d TERM
finish
