#!/usr/bin/env bash
# Load test of lares serve, loopback only, bounded in count and time:
#   bench/serve_load.sh LARES_BINARY MODEL [REQUESTS=200] [CLIENTS=8] [QUEUE=4]
# starts `lares serve` on a free loopback port, sends REQUESTS requests from
# CLIENTS concurrent clients (a mix of chat, streamed chat and completions,
# 32 tokens each), samples the server's resident memory every 0.1 s, and
# prints one JSON object: status counts, wall time, requests/s, tokens/s,
# RSS after the first quarter of the requests and at the end. Every request
# must end 200 or a clean 503 (with Retry-After); the exit status is 1
# otherwise, or when the server died.
set -uo pipefail
LARES=${1:?usage: serve_load.sh LARES_BINARY MODEL [REQUESTS] [CLIENTS] [QUEUE]}
MODEL=${2:?model}
N=${3:-200}
CLIENTS=${4:-8}
QUEUE=${5:-4}
DEADLINE_S=${SERVE_LOAD_DEADLINE_S:-300}
tmp=$(mktemp -d)
server=""
sampler=""
cleanup() {
  [ -n "$sampler" ] && kill "$sampler" 2>/dev/null
  [ -n "$server" ] && kill -KILL "$server" 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT

"$LARES" serve -m "$MODEL" --port 0 -t 1 -c 1024 --queue "$QUEUE" --max-connections 64 -q \
  2>"$tmp/server.log" &
server=$!
port=""
for _ in $(seq 1 600); do
  port=$(sed -n 's|.* on http://127\.0\.0\.1:\([0-9]*\).*|\1|p' "$tmp/server.log" 2>/dev/null)
  [ -n "$port" ] && break
  kill -0 "$server" 2>/dev/null || break
  sleep 0.05
done
[ -n "$port" ] || { echo "serve_load: the server did not start: $(cat "$tmp/server.log")" >&2; exit 1; }
url=http://127.0.0.1:$port

# resident memory of the server, one line per sample: "<requests done> <rss kB>"
(
  while kill -0 "$server" 2>/dev/null; do
    done_n=$(cat "$tmp"/codes.* 2>/dev/null | wc -l)
    rss=$(awk '/^VmRSS:/ {print $2}' "/proc/$server/status" 2>/dev/null)
    [ -n "$rss" ] && echo "$done_n $rss"
    sleep 0.1
  done
) >"$tmp/rss" &
sampler=$!

# one request: kind by number, status (and Retry-After presence) to codes.<client>
one() {
  local i=$1 client=$2 body path extra=()
  case $((i % 3)) in
    0) path=/v1/chat/completions
       body="{\"model\":\"lares\",\"messages\":[{\"role\":\"user\",\"content\":\"Tell me about a cat number $i.\"}],\"max_tokens\":32}" ;;
    1) path=/v1/chat/completions
       body="{\"model\":\"lares\",\"messages\":[{\"role\":\"user\",\"content\":\"Hello $i\"}],\"max_tokens\":32,\"stream\":true}"
       extra=(-N) ;;
    2) path=/v1/completions
       body="{\"model\":\"lares\",\"prompt\":\"Once upon a time, number $i\",\"max_tokens\":32,\"seed\":$i}" ;;
  esac
  local code
  code=$(curl -sS --max-time 120 "${extra[@]}" -o "$tmp/out.$client" -D "$tmp/hdr.$client" \
    -w '%{http_code}' -H 'Content-Type: application/json' -d "$body" "$url$path" 2>>"$tmp/curl.err")
  if [ "$code" = 503 ] && ! grep -qi '^retry-after:' "$tmp/hdr.$client"; then
    code=503-no-retry-after
  fi
  if [ "$code" = 200 ] && [ $((i % 3)) = 1 ] && [ "$(tail -n 2 "$tmp/out.$client" | head -1)" != "data: [DONE]" ]; then
    code=200-stream-cut
  fi
  echo "$code" >>"$tmp/codes.$client"
}
export -f one
export tmp url

start=$(date +%s.%N)
client_pids=()
for c in $(seq 1 "$CLIENTS"); do
  (
    for i in $(seq "$c" "$CLIENTS" "$N"); do
      one "$i" "$c"
    done
  ) &
  client_pids+=($!)
done
timeout "$DEADLINE_S" bash -c "while kill -0 ${client_pids[*]} 2>/dev/null; do sleep 0.2; done"
end=$(date +%s.%N)
alive=true
kill -0 "$server" 2>/dev/null || alive=false
metrics=$(curl -sS "$url/metrics")
kill -TERM "$server"
wait "$server"
server_rc=$?
server=""
kill "$sampler" 2>/dev/null
wait "$sampler" 2>/dev/null
sampler=""

cat "$tmp"/codes.* >"$tmp/codes"
total=$(wc -l <"$tmp/codes")
ok=$(grep -cx 200 "$tmp/codes")
busy=$(grep -cx 503 "$tmp/codes")
other=$((total - ok - busy))
gen_tokens=$(awk '/^lares_completion_tokens_total/ {print $2}' <<<"$metrics")
q1=$((N / 4))
rss_q1=$(awk -v q="$q1" '$1 >= q {print $2; exit}' "$tmp/rss")
rss_end=$(tail -1 "$tmp/rss" | awk '{print $2}')
rss_max=$(awk 'BEGIN {m = 0} $2 > m {m = $2} END {print m}' "$tmp/rss")
wall=$(awk -v a="$start" -v b="$end" 'BEGIN {printf "%.3f", b - a}')
jq -n --argjson total "$total" --argjson ok "$ok" --argjson busy "$busy" --argjson other "$other" \
  --argjson requests "$N" --argjson clients "$CLIENTS" --argjson queue "$QUEUE" \
  --argjson wall "$wall" --argjson tokens "${gen_tokens:-0}" \
  --argjson rss_q1 "${rss_q1:-0}" --argjson rss_end "${rss_end:-0}" --argjson rss_max "${rss_max:-0}" \
  --argjson server_rc "$server_rc" --argjson alive "$alive" \
  '{requests: $requests, clients: $clients, queue: $queue, completed: $total, ok_200: $ok,
    busy_503: $busy, other: $other, wall_s: ($wall * 100 | round / 100),
    requests_per_s: ($total / $wall * 10 | round / 10), generated_tokens: $tokens,
    tokens_per_s: ($tokens / $wall | round), rss_kib_after_first_quarter: $rss_q1,
    rss_kib_end: $rss_end, rss_kib_max: $rss_max, server_alive_at_end: $alive,
    server_exit: $server_rc}'
[ "$total" -eq "$N" ] && [ "$other" -eq 0 ] && $alive && [ "$server_rc" -eq 0 ]
