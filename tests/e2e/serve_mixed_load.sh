#!/usr/bin/env bash
# The mixed load test (bench/serve_mixed_load.py): 200 requests from 16
# clients over every API lares serves (OpenAI chat and completions streamed
# and not, embeddings, json_schema, a forced tool call, Anthropic messages,
# Ollama chat and generate), a third of the streams cancelled by the client:
# every reply well-formed, the server alive and exiting 0, lares's own heap
# (/metrics lares_heap_bytes) and the resident memory of the last quarter each
# within 5 % of the first. Under ASan the quarantine is off (it keeps freed
# memory on purpose, which would read as growth), and the resident memory is
# reported but not judged: it is then the sanitizer allocator's, which grows
# 2.5-4 % over this run as the server's per-connection threads come and go
# while lares's heap stays within 0.1 % (measured on a loaded machine; the
# optimised build's RSS grows 0.7-1.5 %), and it failed the 5 % bound once
# under CI-like load. The heap bound holds in both builds.
. "$(dirname "$0")/lib.sh"
need python3
M=$(model stories260K.gguf)
RSS_BOUND=0.05
grep -q __asan_init "$LARES" 2>/dev/null && RSS_BOUND=0
ASAN_OPTIONS=quarantine_size_mb=0 SERVE_LOAD_DEADLINE_S=900 \
  python3 "$LARES_SRC/bench/serve_mixed_load.py" "$LARES" "$M" --requests 200 --clients 16 \
  --rss-bound "$RSS_BOUND" >"$TMP/load.json" 2>"$TMP/load.err"
rc=$?
jq -c 'del(.by_kind)' "$TMP/load.json" 2>/dev/null || cat "$TMP/load.json"
[ $rc -eq 0 ] && ok || fail "mixed load: exit $rc: $(cat "$TMP/load.json" "$TMP/load.err" | tail -30)"
jq -e '.finished == 200 and .bad == 0 and .cancelled > 10 and .ok > 100' "$TMP/load.json" >/dev/null &&
  ok || fail "replies: $(jq -c 'del(.by_kind)' "$TMP/load.json")"
jq -e '.heap_growth != null and (.heap_growth | fabs) <= 0.05 and .heap_bytes_first_quarter_median > 0' \
  "$TMP/load.json" >/dev/null && ok || fail "lares's heap: $(jq -c 'del(.by_kind)' "$TMP/load.json")"
finish
