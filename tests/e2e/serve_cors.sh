#!/usr/bin/env bash
# lares serve --cors (curl, loopback): the preflight of an allowed origin is
# answered 204 with the method and the headers it asked for, without the API
# key; replies (JSON, errors, streams) carry Access-Control-Allow-Origin for
# it and nothing for other origins; a preflight from another origin is 403;
# '*' allows any; without --cors, OPTIONS is 405 and no CORS header is sent;
# a malformed --cors is refused at start.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/serve_lib.sh"
M=$(model stories260K.gguf)
KEY=sk-cors-test
ORIGIN=http://localhost:5173
start_server c -m "$M" -t 1 --api-key "$KEY" --cors "http://example.test,$ORIGIN"
C=$URL_c
hdr() { # hdr FILE NAME: the header's value (case-insensitive name), trailing CR removed
  awk -v n="$(echo "$2" | tr 'A-Z' 'a-z')" -F': ' 'tolower($1) == n { sub(/\r$/, "", $2); print $2 }' "$1"
}

# ---- the preflight ----
code=$(curl -sS -o /dev/null -D "$TMP/h" -w '%{http_code}' -X OPTIONS -H "Origin: $ORIGIN" \
  -H 'Access-Control-Request-Method: POST' -H 'Access-Control-Request-Headers: authorization,content-type' \
  "$C/v1/chat/completions")
[ "$code" = 204 ] && ok || fail "preflight: $code"
[ "$(hdr "$TMP/h" Access-Control-Allow-Origin)" = "$ORIGIN" ] && ok || fail "preflight origin: $(cat "$TMP/h")"
hdr "$TMP/h" Access-Control-Allow-Methods | grep -q POST && ok || fail "preflight methods: $(cat "$TMP/h")"
[ "$(hdr "$TMP/h" Access-Control-Allow-Headers)" = authorization,content-type ] && ok ||
  fail "preflight headers: $(cat "$TMP/h")"
[ -n "$(hdr "$TMP/h" Access-Control-Max-Age)" ] && ok || fail "preflight max-age"
code=$(curl -sS -o "$TMP/body" -w '%{http_code}' -X OPTIONS -H 'Origin: http://evil.test' \
  -H 'Access-Control-Request-Method: POST' "$C/v1/chat/completions")
[ "$code" = 403 ] && [ "$(jq -r .error.code "$TMP/body")" = cors_origin_not_allowed ] &&
  jq -r .error.message "$TMP/body" | grep -q "http://evil.test" && ok || fail "preflight from another origin: $code $(cat "$TMP/body")"

# ---- replies carry the header for the allowed origin, and only for it ----
code=$(post "$C" /v1/chat/completions \
  '{"model":"lares","messages":[{"role":"user","content":"Hi"}],"max_tokens":4}' \
  -H "Authorization: Bearer $KEY" -H "Origin: $ORIGIN" -D "$TMP/h")
[ "$code" = 200 ] && [ "$(hdr "$TMP/h" Access-Control-Allow-Origin)" = "$ORIGIN" ] &&
  hdr "$TMP/h" Vary | grep -q Origin && ok || fail "chat from the allowed origin: $code $(cat "$TMP/h")"
code=$(post "$C" /v1/completions '{"model":"lares","prompt":"Hi","max_tokens":4,"stream":true}' \
  -H "Authorization: Bearer $KEY" -H "Origin: http://example.test" -D "$TMP/h")
[ "$code" = 200 ] && [ "$(hdr "$TMP/h" Access-Control-Allow-Origin)" = http://example.test ] &&
  grep -q 'data: \[DONE\]' "$TMP/body" && ok || fail "stream from the allowed origin: $code $(cat "$TMP/h")"
code=$(curl -sS -o "$TMP/body" -D "$TMP/h" -w '%{http_code}' -H "Origin: $ORIGIN" "$C/v1/models")
[ "$code" = 401 ] && [ "$(hdr "$TMP/h" Access-Control-Allow-Origin)" = "$ORIGIN" ] &&
  hdr "$TMP/h" Access-Control-Expose-Headers | grep -q WWW-Authenticate && ok ||
  fail "an error to the allowed origin carries the header: $code $(cat "$TMP/h")"
code=$(curl -sS -o /dev/null -D "$TMP/h" -w '%{http_code}' -H "Origin: http://evil.test" \
  -H "Authorization: Bearer $KEY" "$C/v1/models")
[ "$code" = 200 ] && [ -z "$(hdr "$TMP/h" Access-Control-Allow-Origin)" ] && ok ||
  fail "another origin gets no CORS header: $(cat "$TMP/h")"
stop_server c TERM

# ---- '*' ----
start_server s -m "$M" -t 1 --cors '*'
curl -sS -o /dev/null -D "$TMP/h" -H "Origin: http://anything.test:8000" "$URL_s/health"
[ "$(hdr "$TMP/h" Access-Control-Allow-Origin)" = '*' ] && ok || fail "'*': $(cat "$TMP/h")"
code=$(curl -sS -o /dev/null -w '%{http_code}' -X OPTIONS -H 'Origin: http://anything.test' \
  -H 'Access-Control-Request-Method: GET' "$URL_s/v1/models")
[ "$code" = 204 ] && ok || fail "'*' preflight: $code"
stop_server s TERM

# ---- without --cors ----
start_server n -m "$M" -t 1
code=$(curl -sS -o "$TMP/body" -D "$TMP/h" -w '%{http_code}' -X OPTIONS -H "Origin: $ORIGIN" \
  -H 'Access-Control-Request-Method: POST' "$URL_n/v1/chat/completions")
[ "$code" = 405 ] && [ -z "$(hdr "$TMP/h" Access-Control-Allow-Origin)" ] && ok ||
  fail "OPTIONS without --cors: $code $(cat "$TMP/h")"
curl -sS -o /dev/null -D "$TMP/h" -H "Origin: $ORIGIN" "$URL_n/health"
[ -z "$(hdr "$TMP/h" Access-Control-Allow-Origin)" ] && ok || fail "a CORS header without --cors"
stop_server n TERM

# ---- a malformed --cors ----
for bad in 'localhost:3000' 'http://a.test/' 'http://a.test,,http://b.test' 'http://*.test'; do
  "$LARES" serve -m "$M" --port 0 --cors "$bad" 2>"$TMP/err"
  [ $? -eq 1 ] && grep -q "is not an origin" "$TMP/err" && ok || fail "--cors '$bad': $(cat "$TMP/err")"
done
finish
