#!/usr/bin/env bash
# The ring's state for people (issue 15): lares serve --ring answers GET
# /v1/ring with the plan, each device's state, windows and figures, and the
# re-plans and failovers; GET /ring is a page (no external assets) that draws
# it. Checked in headless Chromium: the page's DOM names every device with its
# state (a worker killed with SIGKILL shows as lost or rejoining, the others
# serving) and
# the failover; its screenshot is left in the test output folder
# (e2e-out/serve_ring_page.png beside e2e-tmp). A server on one device answers
# /v1/ring with 404; with --api-key /v1/ring needs the key, the page does not.
. "$(dirname "$0")/lib.sh"
. "$LARES_SRC/tests/cluster/ring_lib.sh"
. "$(dirname "$0")/serve_lib.sh"
trap 'for p in "${SERVER_PIDS[@]}"; do kill -KILL "$p" 2>/dev/null; done; ring_cleanup; rm -rf "$TMP"' EXIT
need chromium
OUT_DIR=${LARES_TEST_OUT:-$(dirname "${LARES_TEST_TMP:-/tmp/x}")/e2e-out}
mkdir -p "$OUT_DIR"
export RING_MODEL
RING_MODEL=$(model stories260K.gguf)
BODY='{"model":"lares","prompt":"Once upon a time","max_tokens":40,"temperature":0}'

browse() { # URL OUT.html [screenshot.png]: the DOM after the page's script ran
  local shot=()
  [ -n "${3:-}" ] && shot=(--screenshot="$3" --window-size=1100,900)
  timeout 120 chromium --headless --no-sandbox --disable-gpu --disable-dev-shm-usage \
    --user-data-dir="$TMP/chromium" --virtual-time-budget=8000 "${shot[@]}" --dump-dom "$1" \
    >"$2" 2>"$TMP/chromium.err"
}

ring_worker a || exit 1; AA=$WORKER_ADDR
ring_worker b || exit 1; BB=$WORKER_ADDR; BPID=$WORKER_PID
ring_worker c || exit 1; CC=$WORKER_ADDR
ring_json "$TMP/ring.json" '"heartbeat_ms": 100, "timeout_ms": 1500,' 1 a "$AA" 2 b "$BB" 1 c "$CC" 1
start_server ring -m "$RING_MODEL" -t 1 -c 512 --ring "$TMP/ring.json" --rebalance off

curl -sS -o "$TMP/r0" -w '%{http_code}' "$URL_ring/v1/ring" >"$TMP/code" 2>&1
[ "$(cat "$TMP/code")" = 200 ] && ok || fail "/v1/ring: $(cat "$TMP/code") $(cat "$TMP/r0")"
jq -e '.n_config == 4 and .devices_in_plan == 4 and .n_layer == 5 and .failovers == 0
       and ([.devices[].state] == ["serving","serving","serving","serving"])
       and ([.devices[].name] == ["head","a","b","c"])
       and ([.devices[].layers] == [1,2,1,1]) and (.devices[2].windows == [[3,4]])
       and .kv_mirror == true and .placement == "explicit" and .hop_ms == null' "$TMP/r0" >/dev/null && ok \
  || fail "/v1/ring before any request: $(cat "$TMP/r0")"

[ "$(post "$URL_ring" /v1/completions "$BODY")" = 200 ] && ok || fail "completion: $(cat "$TMP/body")"
curl -sS "$URL_ring/v1/ring" >"$TMP/r1"
jq -e '.positions > 10 and ([.devices[] | select(.windows_run > 0)] | length) == 4
       and ([.devices[1:][] | select(.compute_ms > 0)] | length) == 3
       and (.hop_ms | type) == "number" and .hop_ms >= 0 and .hop_ms < 2000' "$TMP/r1" >/dev/null && ok \
  || fail "/v1/ring after a request: $(cat "$TMP/r1")"

# b dies; the next request fails over; the picture says so
kill -KILL "$BPID"
[ "$(post "$URL_ring" /v1/completions "$BODY")" = 200 ] && ok || fail "completion after the loss: $(cat "$TMP/body")"
curl -sS "$URL_ring/v1/ring" >"$TMP/r2"
jq -e '.failovers == 1 and (.devices[2].state | IN("lost", "rejoining")) and .devices[2].in_ring == false
       and .devices[2].layers == 0 and (.devices[2].why | length) > 0
       and ([.devices[] | .layers] | add) == 5 and (.last_switch | startswith("failover: lost b"))' \
  "$TMP/r2" >/dev/null && ok || fail "/v1/ring after the loss: $(cat "$TMP/r2")"

# the page, in a browser
curl -sS -D "$TMP/ph" -o "$TMP/page.html" "$URL_ring/ring"
grep -qi '^content-type: text/html' "$TMP/ph" && ok || fail "/ring content type: $(cat "$TMP/ph")"
grep -Eq '(src|href)="?(https?:)?//' "$TMP/page.html" && fail "the page loads external assets" || ok
rm -f "$OUT_DIR/serve_ring_page.png"
browse "$URL_ring/ring" "$TMP/dom.html" "$OUT_DIR/serve_ring_page.png" \
  || fail "chromium: $(tail -5 "$TMP/chromium.err")"
for want in 'data-name="head" data-state="serving"' 'data-name="a" data-state="serving"' \
  'data-name="b" data-state="(lost|rejoining)"' 'data-name="c" data-state="serving"' \
  'failovers 1' 'last plan change: failover: lost b'; do
  grep -Eq "$want" "$TMP/dom.html" && ok || fail "the page's DOM lacks '$want': $(head -c 3000 "$TMP/dom.html")"
done
# the table: a row per device, b's address and state (lost, or asked back: rejoining)
grep -Eq "$BB</td><td class=\"t\">(lost|rejoining)</td>" "$TMP/dom.html" && ok \
  || fail "the table lacks b as lost: $(grep -o "<tr class=\"device\".\{0,300\}" "$TMP/dom.html" | head -4)"
[ "$(head -c 8 "$OUT_DIR/serve_ring_page.png" | od -An -tx1 | tr -d ' \n')" = 89504e470d0a1a0a ] && \
  [ "$(stat -c %s "$OUT_DIR/serve_ring_page.png")" -gt 10000 ] && ok \
  || fail "no screenshot in $OUT_DIR: $(tail -3 "$TMP/chromium.err")"
stop_server ring
ring_cleanup

# one device: /v1/ring is 404; with a key, /v1/ring needs it and the page does not
start_server local -m "$RING_MODEL" -t 1 -c 512 --api-key sekrit
[ "$(curl -sS -o "$TMP/b" -w '%{http_code}' "$URL_local/v1/ring")" = 401 ] && ok || fail "/v1/ring without the key: $(cat "$TMP/b")"
[ "$(curl -sS -o "$TMP/b" -w '%{http_code}' -H 'Authorization: Bearer sekrit' "$URL_local/v1/ring")" = 404 ] \
  && jq -e '.error.code == "not_a_ring"' "$TMP/b" >/dev/null && ok || fail "/v1/ring on one device: $(cat "$TMP/b")"
[ "$(curl -sS -o /dev/null -w '%{http_code}' "$URL_local/ring")" = 200 ] && ok || fail "/ring without the key"
[ "$(curl -sS -o /dev/null -w '%{http_code}' -X POST "$URL_local/v1/ring")" = 405 ] && ok || fail "POST /v1/ring"
browse "$URL_local/ring#key=sekrit" "$TMP/dom1.html" || fail "chromium: $(tail -5 "$TMP/chromium.err")"
grep -q 'not as the head of a ring' "$TMP/dom1.html" && ok || fail "the page on one device: $(head -c 2000 "$TMP/dom1.html")"
stop_server local
finish
