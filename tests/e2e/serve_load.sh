#!/usr/bin/env bash
# The load test (bench/serve_load.sh), bounded: 200 requests from 8 clients on
# loopback; each ends 200 or a clean 503, the server stays up and exits 0 on
# SIGTERM, and its resident memory after the first quarter of the requests
# does not grow by more than 16 MiB to the end (a leak of a few KiB per
# request would show; the slack is the allocator's caches). Under ASan the
# quarantine is turned off here: it holds freed memory on purpose, which is
# growth this test would read as a leak (use after free is the other tests'
# business; LeakSanitizer still checks the server's exit).
. "$(dirname "$0")/lib.sh"
need curl
need jq
M=$(model stories260K.gguf)
ASAN_OPTIONS=quarantine_size_mb=0 SERVE_LOAD_DEADLINE_S=600 \
  bash "$LARES_SRC/bench/serve_load.sh" "$LARES" "$M" 200 8 4 >"$TMP/load.json" 2>"$TMP/load.err"
rc=$?
cat "$TMP/load.json"
[ $rc -eq 0 ] && ok || fail "load run: exit $rc: $(cat "$TMP/load.err")"
jq -e '.completed == 200 and .other == 0 and .ok_200 > 0 and .ok_200 + .busy_503 == 200' "$TMP/load.json" \
  >/dev/null && ok || fail "statuses: $(cat "$TMP/load.json")"
jq -e '.rss_kib_after_first_quarter > 0 and .rss_kib_end - .rss_kib_after_first_quarter < 16384' \
  "$TMP/load.json" >/dev/null && ok || fail "memory grew: $(cat "$TMP/load.json")"
finish
