#!/usr/bin/env bash
# lares serve and a model file that shrinks while the server has it mapped
# (issue 17): the request that reads the missing pages gets an error object
# naming the file instead of the process dying of SIGBUS, /health still
# answers, later requests keep failing the same clean way, and the server
# stops normally.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/serve_lib.sh"
need truncate
cp "$(model stories260K.gguf)" "$TMP/shrinks.gguf"
M=$TMP/shrinks.gguf
start_server t -m "$M" -t 1 -c 64
T=$URL_t
GOOD='{"model":"shrinks","messages":[{"role":"user","content":"Hi"}],"max_tokens":4,"temperature":0}'
got=$(post "$T" /v1/chat/completions "$GOOD")
[ "$got" = 200 ] && ok || fail "before the file shrank: status $got: $(cat "$TMP/body")"

# keep 64 KiB: the header and vocabulary stay, the weights go
truncate -s 65536 "$M"
for i in 1 2; do
  got=$(post "$T" /v1/chat/completions "$GOOD")
  if [ "$got" = 500 ] && jq -e '.error.message | contains("shrank")' "$TMP/body" >/dev/null; then
    ok
  else
    fail "request $i after the file shrank: status $got: $(cat "$TMP/body")"
  fi
done
kill -0 "$PID_t" 2>/dev/null && ok || fail "the server died: $(tail -5 "$TMP/t.log")"
h=$(curl -sS -o "$TMP/health" -w '%{http_code}' "$T/health")
[ "$h" = 200 ] || [ "$h" = 503 ] && ok || fail "/health after the file shrank: $h"
stop_server t
finish
