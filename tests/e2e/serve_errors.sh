#!/usr/bin/env bash
# lares serve and bad input: malformed JSON, wrong types, unknown model,
# prompt longer than the context, body over the limit, missing or wrong API
# key, unknown endpoints and methods get OpenAI-style error objects with
# 400/401/404/405/413, and the request after each one works. Bad options
# stop the program with a clear message.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/serve_lib.sh"
M=$(model stories260K.gguf)
KEY=sk-test-0123456789
start_server e -m "$M" -t 1 -c 64 --max-body 4K --api-key "$KEY"
E=$URL_e
AUTH=(-H "Authorization: Bearer $KEY")
GOOD='{"model":"lares","messages":[{"role":"user","content":"Hi"}],"max_tokens":4,"temperature":0}'

# expect STATUS CODE-OR-EMPTY PARAM-OR-EMPTY WORDS: checks $TMP/body, then that a good request works
expect() {
  local want=$1 code=$2 param=$3 words=$4 got=$5 what=$6
  if [ "$got" = "$want" ] && jq -e --arg c "$code" --arg p "$param" --arg w "$words" \
    '(.error.message | type == "string" and contains($w)) and (.error.type | type == "string")
     and (if $c == "" then .error.code == null else .error.code == $c end)
     and (if $p == "" then .error.param == null else .error.param == $p end)' "$TMP/body" >/dev/null; then
    ok
  else
    fail "$what: status $got (want $want): $(cat "$TMP/body")"
  fi
  local after
  after=$(post "$E" /v1/chat/completions "$GOOD" "${AUTH[@]}")
  [ "$after" = 200 ] && ok || fail "the request after '$what' got $after: $(cat "$TMP/body")"
}

s=$(post "$E" /v1/chat/completions '{"model":"lares","messages":[' "${AUTH[@]}")
expect 400 "" "" "not valid JSON" "$s" "malformed JSON"
s=$(post "$E" /v1/chat/completions 'not json at all' "${AUTH[@]}")
expect 400 "" "" "not valid JSON" "$s" "not JSON"
s=$(post "$E" /v1/chat/completions '' "${AUTH[@]}")
expect 400 "" "" "not valid JSON" "$s" "empty body"
s=$(post "$E" /v1/chat/completions '{"model":"lares","messages":"Hi"}' "${AUTH[@]}")
expect 400 "" messages "must be a list" "$s" "messages as a string"
s=$(post "$E" /v1/chat/completions '{"model":"lares","messages":[{"role":"user","content":"Hi"}],"max_tokens":"4"}' "${AUTH[@]}")
expect 400 "" max_tokens "must be an integer" "$s" "max_tokens as a string"
s=$(post "$E" /v1/chat/completions '{"model":"lares","messages":[{"role":"user","content":"Hi"}],"temperature":-1}' "${AUTH[@]}")
expect 400 "" temperature "from 0 to 2" "$s" "temperature out of range"
s=$(post "$E" /v1/completions '{"model":"lares","prompt":[1,99999]}' "${AUTH[@]}")
expect 400 "" prompt "outside the vocabulary of 512" "$s" "token id out of range"
s=$(post "$E" /v1/chat/completions '{"model":"gpt-4","messages":[{"role":"user","content":"Hi"}]}' "${AUTH[@]}")
expect 404 model_not_found model "'gpt-4' does not exist" "$s" "unknown model"
s=$(curl -sS -o "$TMP/body" -w '%{http_code}' "${AUTH[@]}" "$E/v1/models/gpt-4")
expect 404 model_not_found model "'gpt-4' does not exist" "$s" "unknown model id"
long=$(printf 'Once upon a time there was a dog. %.0s' $(seq 1 20))
s=$(post "$E" /v1/chat/completions "{\"model\":\"lares\",\"messages\":[{\"role\":\"user\",\"content\":\"$long\"}]}" "${AUTH[@]}")
expect 400 context_length_exceeded messages "maximum context length is 64 tokens" "$s" "prompt over the context"
s=$(post "$E" /v1/completions '{"model":"lares","prompt":"Once upon a time","max_tokens":100}' "${AUTH[@]}")
expect 400 context_length_exceeded prompt "asks for 100 more" "$s" "max_tokens over the context"
big=$(head -c 6000 /dev/zero | tr '\0' 'a')
s=$(post "$E" /v1/completions "{\"model\":\"lares\",\"prompt\":\"$big\"}" "${AUTH[@]}")
expect 413 request_too_large "" "the limit is 4096" "$s" "body over the limit"
# a body over the limit without Content-Length (chunked upload) is read and refused too
s=$(curl -sS -o "$TMP/body" -w '%{http_code}' "${AUTH[@]}" -H 'Transfer-Encoding: chunked' \
  -H 'Content-Type: application/json' --data-binary "{\"model\":\"lares\",\"prompt\":\"$big\"}" "$E/v1/completions")
expect 413 request_too_large "" "larger than the limit of 4096" "$s" "chunked body over the limit"
s=$(post "$E" /v1/chat/completions "$GOOD")
expect 401 invalid_api_key "" "API key" "$s" "no API key"
s=$(post "$E" /v1/chat/completions "$GOOD" -H "Authorization: Bearer sk-wrong-0123456789")
expect 401 invalid_api_key "" "API key" "$s" "wrong API key"
s=$(post "$E" /v1/chat/completions "$GOOD" -H "Authorization: Bearer ${KEY}x")
expect 401 invalid_api_key "" "API key" "$s" "API key with a suffix"
s=$(curl -sS -o "$TMP/body" -w '%{http_code}' "$E/v1/models")
expect 401 invalid_api_key "" "API key" "$s" "models without a key"
# the scheme is case-insensitive, then one or more spaces (RFC 7235)
for scheme in bearer BEARER 'Bearer  '; do
  s=$(curl -sS -o "$TMP/body" -w '%{http_code}' -H "Authorization: $scheme $KEY" "$E/v1/models")
  [ "$s" = 200 ] && ok || fail "scheme '$scheme': $s $(cat "$TMP/body")"
done
for h in "Bearer$KEY" "Basic $KEY" "$KEY" "Bearer"; do
  s=$(curl -sS -o "$TMP/body" -w '%{http_code}' -H "Authorization: $h" "$E/v1/models")
  expect 401 invalid_api_key "" "API key" "$s" "Authorization: $h"
done
grep -qi '^www-authenticate: Bearer' <(curl -sS -D - -o /dev/null "$E/metrics") && ok || fail "401 without WWW-Authenticate"
[ "$(curl -sS "$E/health" | jq -r .status)" = ok ] && ok || fail "health needs no key"
s=$(curl -sS -o "$TMP/body" -w '%{http_code}' "${AUTH[@]}" "$E/v2/anything")
expect 404 unknown_url "" "unknown endpoint GET /v2/anything" "$s" "unknown path"
s=$(curl -sS -o "$TMP/body" -w '%{http_code}' "${AUTH[@]}" "$E/v1/chat/completions")
expect 405 method_not_allowed "" "takes POST, not GET" "$s" "GET on a POST endpoint"
s=$(curl -sS -o "$TMP/body" -w '%{http_code}' -X DELETE "${AUTH[@]}" "$E/v1/models")
expect 405 method_not_allowed "" "takes GET, not DELETE" "$s" "DELETE"
# a request that disconnects before its body arrives disturbs nothing
printf 'POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 500\r\n\r\n{"model":' \
  | timeout 2 bash -c "cat >/dev/tcp/127.0.0.1/${E##*:}" 2>/dev/null
s=$(post "$E" /v1/chat/completions "$GOOD" "${AUTH[@]}")
[ "$s" = 200 ] && ok || fail "after a half-sent request: $s"
# every refusal was counted
curl -sS "${AUTH[@]}" "$E/metrics" >"$TMP/metrics"
for c in 400 401 404 405 413; do
  grep -q "^lares_http_responses_total{code=\"$c\"} [1-9]" "$TMP/metrics" && ok || fail "no $c counted"
done
stop_server e INT

# ---- bad options ----
"$LARES" serve -m "$M" --host not-an-address --port 0 2>"$TMP/err"
[ $? -eq 1 ] && grep -q "'not-an-address' is not a numeric IPv4 or IPv6 address" "$TMP/err" && ok || fail "bad host: $(cat "$TMP/err")"
start_server p -m "$M" -t 1 -c 64
port=${URL_p##*:}
"$LARES" serve -m "$M" --port "$port" -t 1 -c 64 2>"$TMP/err"
[ $? -eq 1 ] && grep -q "cannot listen on 127.0.0.1 port $port" "$TMP/err" && ok || fail "port in use: $(cat "$TMP/err")"
stop_server p TERM
"$LARES" serve --port 0 2>"$TMP/err"
[ $? -eq 2 ] && grep -q "no model given" "$TMP/err" && ok || fail "no model: $(cat "$TMP/err")"
"$LARES" serve -m "$M" --port 70000 2>"$TMP/err"
[ $? -eq 2 ] && ok || fail "port 70000 accepted"
"$LARES" serve -m "$M" --port 0 --header-timeout 0 2>"$TMP/err"
[ $? -eq 2 ] && grep -q "header-timeout" "$TMP/err" && ok || fail "header timeout 0: $(cat "$TMP/err")"
"$LARES" serve -m "$M" --port 0 --max-connections 8 --max-connections-per-ip 9 2>"$TMP/err"
[ $? -eq 1 ] && grep -q "connections per address 9: 1 to 8" "$TMP/err" && ok ||
  fail "per-address limit over the limit: $(cat "$TMP/err")"
"$LARES" serve -m "$M" --template nope --port 0 2>"$TMP/err"
[ $? -eq 1 ] && grep -q "unknown chat template 'nope'" "$TMP/err" && ok || fail "bad template: $(cat "$TMP/err")"
finish
