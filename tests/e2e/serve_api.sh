#!/usr/bin/env bash
# lares serve with curl: health and models, chat and completions (greedy text
# against `lares run` and the reference continuation), streaming with
# server-sent events, usage counts and KV prefix reuse, stop strings, seeds,
# log-probabilities, a client that disconnects, a full queue, and a graceful
# stop with a request in flight.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/serve_lib.sh"
M=$(model stories260K.gguf)
EXP=$(model expected/greedy_once_upon_a_time.json)
start_server a -m "$M" -t 1 -c 2048 -v
A=$URL_a

# ---- health, models ----
[ "$(curl -sS "$A/health" | jq -r .status)" = ok ] && ok || fail "health"
curl -sS "$A/v1/models" >"$TMP/models"
[ "$(jq -r '.object + " " + .data[0].id + " " + .data[0].object' "$TMP/models")" = "list stories260K model" ] \
  && ok || fail "models: $(cat "$TMP/models")"
[ "$(curl -sS "$A/v1/models/stories260K" | jq -r .id)" = stories260K ] && ok || fail "models/id"

# ---- chat, not streamed: the greedy answer is lares run's continuation of the plain format ----
code=$(post "$A" /v1/chat/completions \
  '{"model":"stories260K","messages":[{"role":"user","content":"Hi"}],"max_tokens":20,"temperature":0}')
cp "$TMP/body" "$TMP/chat1"
[ "$code" = 200 ] && ok || fail "chat: $code $(cat "$TMP/body")"
printf 'user: Hi\nassistant:' >"$TMP/p"
"$LARES" run -m "$M" -f "$TMP/p" --temp 0 -n 20 -t 1 --no-echo -q | head -c -1 >"$TMP/want"
jq -j '.choices[0].message.content' "$TMP/chat1" >"$TMP/got"
cmp -s "$TMP/got" "$TMP/want" && ok || fail "chat text [$(cat "$TMP/got")] want [$(cat "$TMP/want")]"
n_prompt=$("$LARES" tokenize -m "$M" --ids <"$TMP/p" | jq length)
jq -e --argjson np "$n_prompt" '.object == "chat.completion" and (.id | startswith("chatcmpl-"))
  and .choices[0].message.role == "assistant" and .choices[0].finish_reason == "length"
  and .usage.prompt_tokens == $np and .usage.completion_tokens == 20
  and .usage.total_tokens == $np + 20' "$TMP/chat1" >/dev/null && ok || fail "chat shape/usage: $(cat "$TMP/chat1")"

# ---- the same, streamed: deltas add up to the same text; [DONE] ends it; usage last ----
curl -sSN -H 'Content-Type: application/json' "$A/v1/chat/completions" -D "$TMP/hdr" -d \
  '{"model":"lares","messages":[{"role":"user","content":"Hi"}],"max_tokens":20,"temperature":0,"stream":true,"stream_options":{"include_usage":true}}' \
  >"$TMP/sse"
grep -qi '^content-type: text/event-stream' "$TMP/hdr" && ok || fail "stream content type: $(cat "$TMP/hdr")"
[ "$(tail -n 2 "$TMP/sse" | head -1)" = "data: [DONE]" ] && ok || fail "stream does not end with [DONE]"
grep '^data: {' "$TMP/sse" | sed 's/^data: //' >"$TMP/chunks"
jq -j '.choices[0].delta.content // empty' "$TMP/chunks" >"$TMP/got"
cmp -s "$TMP/got" "$TMP/want" && ok || fail "streamed text [$(cat "$TMP/got")]"
[ "$(jq -s 'map(select(.choices | length > 0)) | length' "$TMP/chunks")" -gt 5 ] && ok || fail "too few chunks"
jq -s -e 'all(.[]; .object == "chat.completion.chunk") and (.[0].choices[0].delta.role == "assistant")
  and (.[-1].choices == []) and (.[-1].usage.completion_tokens == 20)
  and ([.[] | select(.choices | length > 0) | .choices[0].finish_reason] | last == "length")' \
  "$TMP/chunks" >/dev/null && ok || fail "chunk shapes: $(tail -3 "$TMP/chunks")"
# the second identical prompt reused the cache: all but its last token
jq -e --argjson np "$n_prompt" '.[-1].usage.prompt_tokens_details.cached_tokens == $np - 1' \
  -s "$TMP/chunks" >/dev/null && ok || fail "cached tokens: $(tail -1 "$TMP/chunks")"

# ---- a follow-up turn reuses the conversation in the KV cache ----
ans=$(jq -c '.choices[0].message.content' "$TMP/chat1")
post "$A" /v1/chat/completions "{\"model\":\"lares\",\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"},
  {\"role\":\"assistant\",\"content\":$ans},{\"role\":\"user\",\"content\":\"And then?\"}],
  \"max_tokens\":10,\"temperature\":0}" >/dev/null
# the cache held the streamed request: its prompt and 19 of its 20 tokens (the
# last one needs no forward pass), which this conversation starts with
jq -e --argjson np "$n_prompt" '.usage.prompt_tokens_details.cached_tokens == $np + 19' "$TMP/body" >/dev/null \
  && ok || fail "follow-up reuse: $(jq -c .usage "$TMP/body")"

# ---- completions: the reference greedy continuation, and stop strings ----
ref=$(jq -r '.results[] | select(.model=="stories260K.gguf") | .reference_text' "$EXP")
post "$A" /v1/completions '{"model":"lares","prompt":"Once upon a time","max_tokens":48,"temperature":0}' >/dev/null
[ "$(jq -r '.choices[0].text' "$TMP/body")" = "$ref" ] && ok || fail "completion: $(cat "$TMP/body")"
jq -e '.object == "text_completion" and .choices[0].finish_reason == "length" and .usage.completion_tokens == 48' \
  "$TMP/body" >/dev/null && ok || fail "completion shape: $(cat "$TMP/body")"
# a stop string cuts before itself; "Lily. She" spans several tokens
for stop in '" girl"' '["xyz","Lily. She"]' '"park"'; do
  s=$(jq -rn "$stop | if type == \"array\" then .[1] else . end")
  want=${ref%%"$s"*}
  post "$A" /v1/completions "{\"model\":\"lares\",\"prompt\":\"Once upon a time\",\"max_tokens\":48,\"temperature\":0,\"stop\":$stop}" >/dev/null
  [ "$(jq -r '.choices[0].text' "$TMP/body")" = "$want" ] && [ "$(jq -r '.choices[0].finish_reason' "$TMP/body")" = stop ] \
    && ok || fail "stop $stop: $(cat "$TMP/body")"
  # streamed, the held-back tail never leaks past the stop string
  curl -sSN "$A/v1/completions" -H 'Content-Type: application/json' -d \
    "{\"model\":\"lares\",\"prompt\":\"Once upon a time\",\"max_tokens\":48,\"temperature\":0,\"stream\":true,\"stop\":$stop}" \
    | grep '^data: {' | sed 's/^data: //' | jq -j '.choices[0].text' >"$TMP/got"
  [ "$(cat "$TMP/got")" = "$want" ] && ok || fail "streamed stop $stop: [$(cat "$TMP/got")]"
done

# ---- seeds reproduce; sampling samples ----
body='{"model":"lares","messages":[{"role":"user","content":"Tell me a story"}],"max_tokens":40,"temperature":1,"seed":SEED}'
s7a=$(post "$A" /v1/chat/completions "${body/SEED/7}" >/dev/null; jq -r '.choices[0].message.content' "$TMP/body")
post "$A" /v1/completions '{"model":"lares","prompt":"Something else entirely","max_tokens":5}' >/dev/null
s7b=$(post "$A" /v1/chat/completions "${body/SEED/7}" >/dev/null; jq -r '.choices[0].message.content' "$TMP/body")
s8=$(post "$A" /v1/chat/completions "${body/SEED/8}" >/dev/null; jq -r '.choices[0].message.content' "$TMP/body")
[ -n "$s7a" ] && [ "$s7a" = "$s7b" ] && ok || fail "seed 7: [$s7a] then [$s7b]"
[ "$s7a" != "$s8" ] && ok || fail "seeds 7 and 8 gave the same text"

# ---- log-probabilities ----
post "$A" /v1/chat/completions '{"model":"lares","messages":[{"role":"user","content":"Hi"}],"max_tokens":12,"temperature":0,"logprobs":true,"top_logprobs":2}' >/dev/null
jq -e '.choices[0].logprobs.content as $c | ($c | length) == 12
  and all($c[]; .logprob <= 0 and (.top_logprobs | length) == 2 and .top_logprobs[0].logprob >= .top_logprobs[1].logprob
          and .top_logprobs[0].token == .token and (.bytes | length) > 0)
  and ([$c[].token] | join("")) == .choices[0].message.content' "$TMP/body" >/dev/null \
  && ok || fail "chat logprobs: $(head -c 800 "$TMP/body")"
post "$A" /v1/completions '{"model":"lares","prompt":"Once upon a time","max_tokens":6,"temperature":0,"logprobs":3}' >/dev/null
jq -e '.choices[0].logprobs as $l | ($l.tokens | length) == 6 and ($l.top_logprobs[0] | length) == 3
  and ($l.tokens | join("")) == .choices[0].text and $l.text_offset[0] == 0
  and $l.text_offset[1] == ($l.tokens[0] | length)' "$TMP/body" >/dev/null \
  && ok || fail "completion logprobs: $(head -c 800 "$TMP/body")"

# ---- a client that disconnects stops its generation; the next request works ----
before=$(curl -sS "$A/metrics" | awk '/^lares_completion_tokens_total/ {print $2}')
timeout 10 curl -sSN "$A/v1/completions" -H 'Content-Type: application/json' -d \
  '{"model":"lares","prompt":"Once upon a time","max_tokens":2000,"temperature":0,"stream":true}' \
  2>/dev/null | head -c 2000 >/dev/null
for i in $(seq 1 100); do
  curl -sS "$A/metrics" >"$TMP/metrics"
  grep -q '^lares_requests_canceled_total 1$' "$TMP/metrics" && break
  sleep 0.1
done
grep -q '^lares_requests_canceled_total 1$' "$TMP/metrics" && ok || fail "no cancel counted: $(grep canceled "$TMP/metrics")"
after=$(awk '/^lares_completion_tokens_total/ {print $2}' "$TMP/metrics")
[ $((after - before)) -lt 2000 ] && ok || fail "the disconnected generation ran on: $((after - before)) tokens"
code=$(post "$A" /v1/completions '{"model":"lares","prompt":"Once upon a time","max_tokens":5,"temperature":0}')
[ "$code" = 200 ] && ok || fail "request after a disconnect: $code"
for name in lares_http_responses_total lares_queue_length lares_prompt_tokens_per_second \
  lares_generation_tokens_per_second lares_resident_memory_bytes lares_peak_resident_memory_bytes \
  lares_prompt_tokens_cached_total; do
  grep -q "^# TYPE $name " "$TMP/metrics" && ok || fail "metric $name missing"
done
awk '$1 == "lares_resident_memory_bytes" { r = $2 } $1 == "lares_peak_resident_memory_bytes" { p = $2 }
     END { exit !(r > 0 && p >= r) }' "$TMP/metrics" && ok ||
  fail "peak below resident: $(grep resident_memory_bytes "$TMP/metrics")"
stop_server a INT
# the verbose log has no libmicrohttpd notice (it warned about the order of its options)
grep -q 'libmicrohttpd' "$TMP/a.log" && fail "libmicrohttpd in the log: $(grep libmicrohttpd "$TMP/a.log")" || ok

# ---- a full queue answers 503 with Retry-After; everything else completes ----
start_server q -m "$M" -t 1 -c 2048 --queue 1
seen503=0
for burst in 1 2 3 4 5; do
  cpids=()
  for i in $(seq 1 10); do
    curl -sS -o "$TMP/q$i.body" -D "$TMP/q$i.hdr" -w '%{http_code}' -H 'Content-Type: application/json' \
      -d '{"model":"lares","prompt":"Once upon a time","max_tokens":600,"temperature":0}' \
      "$URL_q/v1/completions" >"$TMP/q$i.code" &
    cpids+=($!)
  done
  wait "${cpids[@]}"
  for i in $(seq 1 10); do
    c=$(cat "$TMP/q$i.code")
    if [ "$c" = 503 ]; then
      seen503=$((seen503 + 1))
      grep -qi '^retry-after: 1' "$TMP/q$i.hdr" && jq -e '.error.code == "queue_full"' "$TMP/q$i.body" >/dev/null \
        || fail "503 without Retry-After or queue_full: $(cat "$TMP/q$i.hdr" "$TMP/q$i.body")"
    elif [ "$c" != 200 ]; then
      fail "queue burst: status $c: $(cat "$TMP/q$i.body")"
    fi
  done
  [ "$seen503" -gt 0 ] && break
done
[ "$seen503" -gt 0 ] && ok || fail "no 503 from a queue of 1 under 10 concurrent requests"
code=$(post "$URL_q" /v1/completions '{"model":"lares","prompt":"Hi","max_tokens":3}')
[ "$code" = 200 ] && ok || fail "request after the burst: $code"
grep -q "^lares_requests_rejected_total [1-9]" <(curl -sS "$URL_q/metrics") && ok || fail "rejections not counted"

# ---- graceful stop: the request in flight ends cleanly, then the server exits 0 ----
curl -sSN "$URL_q/v1/completions" -H 'Content-Type: application/json' -d \
  '{"model":"lares","prompt":"Once upon a time","max_tokens":2000,"temperature":0,"stream":true}' \
  >"$TMP/inflight" 2>&1 &
cpid=$!
for i in $(seq 1 100); do [ -s "$TMP/inflight" ] && break; sleep 0.05; done
stop_server q TERM
wait $cpid
[ "$(tail -n 2 "$TMP/inflight" | head -1)" = "data: [DONE]" ] && ok || fail "in-flight stream on SIGTERM: $(tail -c 300 "$TMP/inflight")"
grep -q "SIGTERM: stopping" "$TMP/q.log" && ok || fail "no stop message"
finish
