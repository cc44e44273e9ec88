#!/usr/bin/env bash
# lares serve --parallel (continuous batching, issue 20): requests sent at once
# decode together and each gets exactly the greedy text it gets alone (from a
# server without --parallel), streamed and not, completions and chat, with n
# choices; a client that leaves mid-answer frees its slot and the others go
# on; embeddings still answer; more requests than slots queue and then run;
# the server stops cleanly. The server's log says it batches. Under a memory
# budget too small for the weights beside the caches they stream, and the
# texts stay the same; so do they with prompt lookup (--lookup) in the batch.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/serve_lib.sh"
M=$(model derived/TinyStories-656K.f32.llama.gguf)
start_server one -m "$M" -t 1 -c 512 --model-name m
start_server par -m "$M" -t 1 -c 512 --parallel 3 --queue 16 --model-name m
grep -q "requests decoding together: 3" "$TMP/par.log" && ok || fail "log: $(cat "$TMP/par.log")"

prompts=("Once upon a time" "The little dog" "Lily and Tom went to the" "One day, a bird" "The sun was")
body() { # PROMPT MAX [extra json]
  printf '{"model":"m","prompt":"%s","max_tokens":%d,"temperature":0%s}' "$1" "$2" "${3:-}"
}
# three_at_once LABEL URL: the first three prompts sent together give the
# texts they get alone (from the server without --parallel, $TMP/alone*)
three_at_once() {
  local label=$1 url=$2 i
  PIDS=()
  for i in 0 1 2; do
    curl -sS -o "$TMP/$label$i" -H 'Content-Type: application/json' \
      --data-binary "$(body "${prompts[$i]}" 40)" "$url/v1/completions" &
    PIDS+=($!)
  done
  wait "${PIDS[@]}"
  for i in 0 1 2; do
    cmp -s <(jq -j '.choices[0].text' "$TMP/$label$i") "$TMP/alone$i" && ok ||
      fail "$label $i [$(jq -j '.choices[0].text' "$TMP/$label$i")] alone [$(cat "$TMP/alone$i")]"
  done
}
# alone, one after the other
for i in "${!prompts[@]}"; do
  code=$(post "$URL_one" /v1/completions "$(body "${prompts[$i]}" 40)")
  [ "$code" = 200 ] || fail "alone $i: $code"
  jq -j '.choices[0].text' "$TMP/body" >"$TMP/alone$i"
done
# (`wait` alone would wait for the servers too: the clients' pids)
PIDS=()
# together: 5 requests on 3 slots (two wait, then join), two of them streamed
for i in "${!prompts[@]}"; do
  if [ $((i % 2)) -eq 1 ]; then
    curl -sS -N -H 'Content-Type: application/json' \
      --data-binary "$(body "${prompts[$i]}" 40 ',"stream":true')" "$URL_par/v1/completions" \
      >"$TMP/sse$i" &
  else
    curl -sS -o "$TMP/par$i" -H 'Content-Type: application/json' \
      --data-binary "$(body "${prompts[$i]}" 40)" "$URL_par/v1/completions" &
  fi
  PIDS+=($!)
done
wait "${PIDS[@]}"
for i in "${!prompts[@]}"; do
  if [ $((i % 2)) -eq 1 ]; then
    sed -n 's/^data: //p' "$TMP/sse$i" | grep -v '^\[DONE\]' | jq -j '.choices[0].text // ""' >"$TMP/got$i"
    grep -q '^data: \[DONE\]' "$TMP/sse$i" && ok || fail "stream $i did not end: $(tail -2 "$TMP/sse$i")"
  else
    jq -j '.choices[0].text' "$TMP/par$i" >"$TMP/got$i"
  fi
  cmp -s "$TMP/got$i" "$TMP/alone$i" && ok ||
    fail "request $i together [$(cat "$TMP/got$i")] alone [$(cat "$TMP/alone$i")]"
done
# chat with two choices and a seed, alongside a completion
chat='{"model":"m","messages":[{"role":"user","content":"Tell me a story"}],"max_tokens":24,"n":2,"seed":7}'
code=$(post "$URL_one" /v1/chat/completions "$chat")
[ "$code" = 200 ] && ok || fail "chat alone: $code"
jq -c '[.choices[].message.content]' "$TMP/body" >"$TMP/chat_alone"
curl -sS -o "$TMP/chat_par" -H 'Content-Type: application/json' --data-binary "$chat" \
  "$URL_par/v1/chat/completions" &
PIDS=($!)
curl -sS -o "$TMP/side" -H 'Content-Type: application/json' \
  --data-binary "$(body "${prompts[0]}" 40)" "$URL_par/v1/completions" &
PIDS+=($!)
wait "${PIDS[@]}"
[ "$(jq -c '[.choices[].message.content]' "$TMP/chat_par")" = "$(cat "$TMP/chat_alone")" ] && ok ||
  fail "chat n=2 together $(cat "$TMP/chat_par") alone $(cat "$TMP/chat_alone")"
[ "$(jq -j '.choices[0].text' "$TMP/side")" = "$(cat "$TMP/alone0")" ] && ok || fail "side request"
[ "$(jq '.usage.completion_tokens' "$TMP/chat_par")" = 48 ] && ok || fail "usage: $(cat "$TMP/chat_par")"
# a client that leaves mid-answer: its slot frees, the other request finishes
curl -sS -N -m 1 -H 'Content-Type: application/json' \
  --data-binary "$(body "${prompts[1]}" 400 ',"stream":true')" "$URL_par/v1/completions" >/dev/null 2>&1 &
PIDS=($!)
code=$(post "$URL_par" /v1/completions "$(body "${prompts[2]}" 40)")
wait "${PIDS[@]}"
[ "$code" = 200 ] && cmp -s <(jq -j '.choices[0].text' "$TMP/body") "$TMP/alone2" && ok ||
  fail "beside a client that left: $code $(cat "$TMP/body")"
# embeddings on the batch's own session
code=$(post "$URL_par" /v1/embeddings '{"model":"m","input":"a cat"}')
[ "$code" = 200 ] && [ "$(jq '.data[0].embedding | length' "$TMP/body")" -gt 0 ] && ok ||
  fail "embeddings: $code $(head -c 300 "$TMP/body")"
# the slots are free again: all three at once still agree
three_at_once again "$URL_par"
# bad value
if "$LARES" serve -m "$M" --parallel 0 2>"$TMP/bad.err"; then
  fail "--parallel 0 accepted"
else
  grep -q -- "--parallel" "$TMP/bad.err" && ok || fail "--parallel 0: $(cat "$TMP/bad.err")"
fi
if "$LARES" serve -m "$M" --parallel 2 --prompt-share -1 2>"$TMP/bad.err"; then
  fail "--prompt-share -1 accepted"
else
  grep -q -- "--prompt-share" "$TMP/bad.err" && ok || fail "--prompt-share -1: $(cat "$TMP/bad.err")"
fi
stop_server par TERM

# prompt lookup in the batch: drafts verified in each step, the texts those
# alone, the drafts counted in /metrics; refused beside a draft model
start_server look -m "$M" -t 1 -c 512 --parallel 3 --lookup 4 --model-name m
three_at_once lookup "$URL_look"
curl -sS "$URL_look/metrics" >"$TMP/look.metrics"
drafted=$(sed -n 's/^lares_drafted_tokens_total \([0-9]*\)$/\1/p' "$TMP/look.metrics")
accepted=$(sed -n 's/^lares_accepted_tokens_total \([0-9]*\)$/\1/p' "$TMP/look.metrics")
[ "${drafted:-0}" -gt 0 ] && [ "${accepted:-0}" -le "$drafted" ] && ok ||
  fail "lookup drafts: drafted ${drafted:-none}, accepted ${accepted:-none}"
stop_server look TERM
if "$LARES" serve -m "$M" --draft "$M" --lookup 4 2>"$TMP/bad.err"; then
  fail "--draft with --lookup accepted"
else
  grep -q -- "--lookup" "$TMP/bad.err" && ok || fail "--draft --lookup: $(cat "$TMP/bad.err")"
fi

# under a memory budget the weights do not fit beside three caches: they
# stream from disk, read once a step for every request, and the texts stay
# those alone. The least budget that serves three comes from the least one
# session needs (a budget of 1 KiB is refused naming it), raised in steps
# smaller than the weights
"$LARES" run -m "$M" -p x -c 512 --mem-budget 1K >/dev/null 2>"$TMP/least.err"
least=$(sed -n 's/.*(\([0-9]*\) bytes) this session needs.*/\1/p' "$TMP/least.err")
[ -n "$least" ] && ok || fail "no least budget in: $(cat "$TMP/least.err")"
URL_lean=""
for k in $(seq 4 4 512); do
  [ -n "$least" ] || break
  b=$((least + least * k / 512))
  try_server lean -m "$M" -t 1 -c 512 --parallel 3 --mem-budget "$b" --model-name m && break
  grep -q "KV caches" "$TMP/lean.log" || { fail "budget $b: $(cat "$TMP/lean.log")"; break; }
done
if [ -z "$URL_lean" ]; then
  fail "no budget up to twice the least served three requests"
else
  grep -q "stream from disk each step" "$TMP/lean.log" && ok || fail "lean log: $(cat "$TMP/lean.log")"
  three_at_once streamed "$URL_lean"
  stop_server lean TERM
fi
stop_server one TERM
finish
