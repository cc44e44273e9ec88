#!/usr/bin/env bash
# lares serve's web page at / in headless Chromium (Debian's `chromium`,
# driven by the `playwright-core` npm package, installed by the test into the
# build directory): the page and its files come from the program itself with
# no API key, a real exchange streams the greedy answer `lares run` gives, the
# stop button cancels a long answer (the server counts the cancellation), the
# ring panel stays hidden without a ring. A screenshot goes to $LARES_TEST_OUT.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/serve_lib.sh"
need node
need npm
CHROMIUM=$(command -v chromium || command -v chromium-browser || true)
[ -n "$CHROMIUM" ] || { echo "$TEST_NAME: needs chromium (scripts/deps.sh installs it)" >&2; exit 1; }
PLAYWRIGHT_VERSION=1.65.1
: "${LARES_TEST_OUT:?set by CMake}"
npm_package playwright-core "$PLAYWRIGHT_VERSION"
M=$(model stories260K.gguf)
KEY=sk-web-test
start_server w -m "$M" -t 1 -c 2048 --api-key "$KEY"
# the files need no key; the API does
[ "$(curl -s -o "$TMP/index" -w '%{http_code} %{content_type}' "$URL_w/")" = "200 text/html; charset=utf-8" ] &&
  grep -q '<script src="/app.js">' "$TMP/index" && ok || fail "GET / is not the page"
[ "$(curl -s -o /dev/null -w '%{http_code}' "$URL_w/app.js")" = 200 ] && ok || fail "GET /app.js"
[ "$(curl -s -o /dev/null -w '%{http_code}' "$URL_w/v1/models")" = 401 ] && ok || fail "the API without the key"
grep -Eq 'src="https?:|href="https?:' "$TMP/index" && fail "the page loads external assets" || ok
printf 'user: Hi\nassistant:' >"$TMP/p"
"$LARES" run -m "$M" -f "$TMP/p" --temp 0 -n 20 -t 1 --no-echo -q | head -c -1 >"$TMP/want_chat"
mkdir -p "$LARES_TEST_OUT"
SERVER_URL=$URL_w API_KEY=$KEY NODE_DIR=$LARES_NODE_DIR CHROMIUM=$CHROMIUM WANT_CHAT=$TMP/want_chat \
  SHOT=$LARES_TEST_OUT/serve_web.png node "$(dirname "$0")/serve_web.js" && ok || fail "serve_web.js failed"
[ -s "$LARES_TEST_OUT/serve_web.png" ] && ok || fail "no screenshot"
stop_server w TERM
finish
