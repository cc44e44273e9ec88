#!/usr/bin/env bash
# bench/serve_parallel.py, the throughput benchmark of `lares serve --parallel`
# (issue 20), runs and reads the streams right with both of its clients: one
# thread's event loop (the default, which parses the chunked SSE replies
# itself) and a thread each (Python's http.client). Greedy streams of the same
# prompts get the same number of tokens from either; the JSON carries the
# fields docs/performance.md quotes. A model that does not exist stops the
# script with the server's message. Not timed: the figures are only > 0.
. "$(dirname "$0")/lib.sh"
need jq
need python3
M=$(model derived/TinyStories-656K.f32.llama.gguf)
B="${LARES_SRC:-$(dirname "$0")/../..}/bench/serve_parallel.py"

for c in evented threads; do
  python3 "$B" "$LARES" "$M" --streams "1 3" --tokens 12 --reps 1 --threads 1 --no-ttft \
    --client "$c" >"$TMP/$c.json" 2>"$TMP/$c.err" && ok || fail "$c: $(tail -3 "$TMP/$c.err")"
  jq -e --arg c "$c" '.client == $c and .alternated == true' "$TMP/$c.json" >/dev/null && ok \
    || fail "$c header: $(head -c 300 "$TMP/$c.json")"
  jq -e '[.streams["1"], .streams["3"]] | all(.aggregate_tps > 0 and (.runs | length) == 1)' \
    "$TMP/$c.json" >/dev/null && ok || fail "$c figures: $(head -c 400 "$TMP/$c.json")"
  jq -e '.streams["3"].over_one_paired > 0' "$TMP/$c.json" >/dev/null && ok \
    || fail "$c ratio: $(head -c 400 "$TMP/$c.json")"
  jq -e '.streams["3"].last_tokens | length == 3 and all(. >= 1 and . <= 12)' "$TMP/$c.json" \
    >/dev/null && ok || fail "$c tokens: $(jq -c '.streams["3"].last_tokens' "$TMP/$c.json")"
done
# the same greedy prompts: the same tokens, however the replies were read
for s in 1 3; do
  a=$(jq -c ".streams[\"$s\"].last_tokens" "$TMP/evented.json")
  b=$(jq -c ".streams[\"$s\"].last_tokens" "$TMP/threads.json")
  [ -n "$a" ] && [ "$a" = "$b" ] && ok || fail "$s streams: evented read $a tokens, threads $b"
done

# a file that is not there: the script stops and says why
python3 "$B" "$LARES" "$TMP/missing.gguf" --streams "1" --tokens 4 --reps 1 --no-ttft \
  >"$TMP/out" 2>"$TMP/err" && fail "a missing model ran: $(cat "$TMP/out")" || ok
grep -q "did not start" "$TMP/err" && grep -q "missing.gguf" "$TMP/err" && ok \
  || fail "missing model: $(cat "$TMP/err")"

finish
