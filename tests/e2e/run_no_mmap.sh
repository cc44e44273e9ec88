#!/usr/bin/env bash
# --no-mmap: the model read into memory instead of mapped generates exactly
# the tokens of the mapped run, for a float and a
# quantized file, through lares run and lares serve; lares bench takes it too.
# A memory budget that would make the weights stream is refused with a
# message that says why (the copy cannot give pages back) and what to do.
. "$(dirname "$0")/lib.sh"
need jq

for f in stories260K.gguf derived/TinyStories-656K.llamacpp-Q4_K_M.gguf; do
  M=$(model "$f")
  for how in map copy; do
    extra=()
    [ "$how" = copy ] && extra=(--no-mmap)
    if ! "$LARES" run -m "$M" -p "Once upon a time" -n 24 --temp 0 -t 2 --json "${extra[@]}" \
        >"$TMP/$how.json" 2>"$TMP/err"; then
      fail "$f $how: $(cat "$TMP/err")"
    fi
  done
  a=$(jq -c .generated_ids "$TMP/map.json")
  b=$(jq -c .generated_ids "$TMP/copy.json")
  [ -n "$a" ] && [ "$a" != null ] && [ "$a" = "$b" ] && ok || fail "$f: mapped $a, read in $b"
  jq -e '.memory.streaming == false and .memory.no_mmap == true' "$TMP/copy.json" >/dev/null \
    && ok || fail "$f --no-mmap: $(jq -c .memory "$TMP/copy.json")"
  jq -e '.memory.no_mmap == false' "$TMP/map.json" >/dev/null && ok \
    || fail "$f mapped: $(jq -c .memory "$TMP/map.json")"
done

M=$(model stories260K.gguf)
# a budget that streams the mapped file: from its least (named by the refusal
# of 1M) up in steps of 256 KiB until the mapped run plans to stream
"$LARES" run -m "$M" -p x -n 2 --mem-budget 1M >/dev/null 2>"$TMP/err"
least=$(grep -o '([0-9]* bytes)' "$TMP/err" | tr -dc 0-9)
budget=""
for i in $(seq 0 16); do
  [ -n "$least" ] || break
  b=$((least + i * 262144))
  # (-v: the plan made for the whole context; the run's own report may find
  # everything fitting the few positions it used)
  "$LARES" run -m "$M" -p "Once upon a time" -n 8 --temp 0 -v --mem-budget "$b" \
    >/dev/null 2>"$TMP/err"
  if grep -q "exec: streaming" "$TMP/err"; then
    budget=$b
    break
  fi
done
if [ -z "$budget" ]; then
  fail "no budget from ${least:-?} streams the mapped file: $(cat "$TMP/err")"
else
  ok
  "$LARES" run -m "$M" -p "Once upon a time" -n 8 --temp 0 --no-mmap --mem-budget "$budget" \
    >/dev/null 2>"$TMP/err"
  rc=$?
  [ $rc -ne 0 ] && grep -q "read into memory (no mmap)" "$TMP/err" \
    && grep -q "cannot stream" "$TMP/err" && ok \
    || fail "--no-mmap under a streaming budget: rc $rc, $(cat "$TMP/err")"
fi

# lares bench --no-mmap runs its tests
"$LARES" bench -m "$M" -p 8 -n 4 -r 1 -t 2 --no-mmap --json >"$TMP/bench.json" 2>"$TMP/err"
jq -e '.tests | length == 2 and all(.[]; .tok_s_mean > 0)' "$TMP/bench.json" \
  >/dev/null && ok || fail "bench --no-mmap: $(cat "$TMP/err") $(head -c 300 "$TMP/bench.json")"

# lares serve --no-mmap answers as the mapped server does
. "$(dirname "$0")/serve_lib.sh"
start_server map -m "$M" -t 2
start_server copy -m "$M" -t 2 --no-mmap
req='{"model": "lares", "prompt": "Once upon a time", "max_tokens": 16, "temperature": 0}'
for how in map copy; do
  url="URL_$how"
  code=$(post "${!url}" /v1/completions "$req")
  [ "$code" = 200 ] && ok || fail "serve $how: HTTP $code $(cat "$TMP/body")"
  jq -r '.choices[0].text' "$TMP/body" >"$TMP/text_$how"
  stop_server "$how"
done
a=$(cat "$TMP/text_map")
[ -n "$a" ] && [ "$a" = "$(cat "$TMP/text_copy")" ] && ok \
  || fail "serve: mapped '$a', read in '$(cat "$TMP/text_copy")'"

finish
