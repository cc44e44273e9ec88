#!/usr/bin/env bash
# lares serve --draft MODEL (speculative decoding, issue 20): greedy
# completions equal a plain server's, the second turn of a chat too (the
# draft's cache follows the session's prefix reuse), seeded sampling is
# reproducible, /metrics counts drafted and accepted tokens; with --parallel
# three requests at once, each drafting with its own draft cache, give the
# plain server's texts; another vocabulary, --draft-n alone and --spec-always
# without drafts are refused.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/serve_lib.sh"

T=$(model TinyStories-656K.f16.gguf)
D=$(model derived/TinyStories-656K.llamacpp-Q4_0.gguf)
start_server plain -m "$T" -t 1 -c 512
start_server draft -m "$T" -t 1 -c 512 --draft "$D" --draft-n 5
A=$URL_plain
B=$URL_draft

same() { # what path json: both servers give the same text
  local what=$1 path=$2 body=$3 field=$4
  [ "$(post "$A" "$path" "$body")" = 200 ] || fail "$what: plain server: $(cat "$TMP/body")"
  jq -r "$field" "$TMP/body" >"$TMP/want"
  [ "$(post "$B" "$path" "$body")" = 200 ] || fail "$what: draft server: $(cat "$TMP/body")"
  jq -r "$field" "$TMP/body" >"$TMP/got"
  [ -s "$TMP/want" ] && cmp -s "$TMP/want" "$TMP/got" && ok ||
    fail "$what: with a draft [$(cat "$TMP/got")], plain [$(cat "$TMP/want")]"
}
same "greedy completion" /v1/completions \
  '{"model":"lares","prompt":"Once upon a time","max_tokens":64,"temperature":0}' '.choices[0].text'
same "greedy chat" /v1/chat/completions \
  '{"model":"lares","messages":[{"role":"user","content":"Tell me a story."}],"max_tokens":40,"temperature":0}' \
  '.choices[0].message.content'
ans=$(jq -c '.choices[0].message.content' "$TMP/body")
same "second turn" /v1/chat/completions "{\"model\":\"lares\",\"messages\":[{\"role\":\"user\",
  \"content\":\"Tell me a story.\"},{\"role\":\"assistant\",\"content\":$ans},{\"role\":\"user\",
  \"content\":\"And then?\"}],\"max_tokens\":30,\"temperature\":0}" '.choices[0].message.content'

# sampling with a seed: the same text twice from the draft server
S='{"model":"lares","prompt":"Once upon a time","max_tokens":48,"temperature":0.8,"seed":5}'
post "$B" /v1/completions "$S" >/dev/null
jq -r '.choices[0].text' "$TMP/body" >"$TMP/s1"
post "$B" /v1/completions "$S" >/dev/null
jq -r '.choices[0].text' "$TMP/body" >"$TMP/s2"
[ -s "$TMP/s1" ] && cmp -s "$TMP/s1" "$TMP/s2" && ok || fail "seeded sampling with a draft differs"

curl -sS "$B/metrics" >"$TMP/mb"
curl -sS "$A/metrics" >"$TMP/ma"
drafted=$(awk '/^lares_drafted_tokens_total/ {print $2}' "$TMP/mb")
accepted=$(awk '/^lares_accepted_tokens_total/ {print $2}' "$TMP/mb")
[ -n "$drafted" ] && [ "$drafted" -gt 0 ] && [ "$accepted" -gt 0 ] && [ "$accepted" -le "$drafted" ] &&
  ok || fail "draft metrics: drafted '$drafted', accepted '$accepted'"
grep -q '^lares_drafted_tokens_total 0$' "$TMP/ma" && ok ||
  fail "the plain server counts drafts: $(grep drafted "$TMP/ma")"
stop_server draft

# --parallel 3 with the draft: three requests decode together, each with its
# drafts verified in the shared step, and give the texts they get alone
start_server pardraft -m "$T" -t 1 -c 512 --parallel 3 --draft "$D" --draft-n 4
prompts=("Once upon a time" "The little dog" "Lily and Tom went to the")
for i in 0 1 2; do
  [ "$(post "$A" /v1/completions "{\"model\":\"lares\",\"prompt\":\"${prompts[$i]}\",\"max_tokens\":40,\"temperature\":0}")" = 200 ] ||
    fail "alone $i: $(cat "$TMP/body")"
  jq -j '.choices[0].text' "$TMP/body" >"$TMP/alone$i"
done
PIDS=()
for i in 0 1 2; do
  curl -sS -o "$TMP/pd$i" -H 'Content-Type: application/json' \
    --data-binary "{\"model\":\"lares\",\"prompt\":\"${prompts[$i]}\",\"max_tokens\":40,\"temperature\":0}" \
    "$URL_pardraft/v1/completions" &
  PIDS+=($!)
done
wait "${PIDS[@]}"
for i in 0 1 2; do
  [ -s "$TMP/alone$i" ] && cmp -s <(jq -j '.choices[0].text' "$TMP/pd$i") "$TMP/alone$i" && ok ||
    fail "--parallel with a draft, $i: [$(jq -j '.choices[0].text' "$TMP/pd$i")] alone [$(cat "$TMP/alone$i")]"
done
curl -sS "$URL_pardraft/metrics" >"$TMP/mp"
drafted=$(awk '/^lares_drafted_tokens_total/ {print $2}' "$TMP/mp")
accepted=$(awk '/^lares_accepted_tokens_total/ {print $2}' "$TMP/mp")
[ -n "$drafted" ] && [ "$drafted" -gt 0 ] && [ "$accepted" -gt 0 ] && ok ||
  fail "--parallel with a draft: drafted '$drafted', accepted '$accepted'"
stop_server pardraft
stop_server plain

refused() { # what pattern args...
  local what=$1 pat=$2
  shift 2
  if timeout 60 "$LARES" serve --port 0 "$@" >/dev/null 2>"$TMP/e"; then
    fail "$what accepted"
  else
    grep -q -- "$pat" "$TMP/e" && ok || fail "$what: $(cat "$TMP/e")"
  fi
}
refused "another vocabulary" "different vocabularies" -m "$T" --draft "$(model stories260K.gguf)"
refused "--draft-n alone" "--draft" -m "$T" --draft-n 3
refused "--spec-always alone" "--spec-always needs drafts" -m "$T" --spec-always
refused "a missing draft" "draft model: $TMP/none.gguf" -m "$T" --draft "$TMP/none.gguf"
finish
