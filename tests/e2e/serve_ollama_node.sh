#!/usr/bin/env bash
# lares serve's Ollama API used through the official `ollama` npm package
# (Node.js): the package is installed by the test into the build directory
# (npm cache there too), then serve_ollama.js runs list, show, generate (raw
# and templated, streamed and not), chat, seeds, errors and an aborted stream.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/serve_lib.sh"
need node
need npm
OLLAMA_VERSION=0.6.4
: "${LARES_NODE_DIR:?set by CMake}" "${LARES_NPM_CACHE:?set by CMake}"
if [ "$(jq -r .version "$LARES_NODE_DIR/node_modules/ollama/package.json" 2>/dev/null)" != "$OLLAMA_VERSION" ]; then
  mkdir -p "$LARES_NODE_DIR" "$LARES_NPM_CACHE"
  if ! npm install --prefix "$LARES_NODE_DIR" --cache "$LARES_NPM_CACHE" --no-audit --no-fund \
    --no-save "ollama@$OLLAMA_VERSION" >"$TMP/npm.log" 2>&1; then
    echo "$TEST_NAME: npm install ollama@$OLLAMA_VERSION failed: $(tail -5 "$TMP/npm.log")" >&2
    exit 1
  fi
fi
M=$(model stories260K.gguf)
EXP=$(model expected/greedy_once_upon_a_time.json)
start_server o -m "$M" -t 1 -c 2048
printf 'user: Hi\nassistant:' >"$TMP/p"
"$LARES" run -m "$M" -f "$TMP/p" --temp 0 -n 20 -t 1 --no-echo -q | head -c -1 >"$TMP/want_chat"
SERVER_URL=$URL_o OLLAMA_DIR=$LARES_NODE_DIR WANT_CHAT=$TMP/want_chat \
  WANT_COMPLETION=$(jq -r '.results[] | select(.model=="stories260K.gguf") | .reference_text' "$EXP") \
  node "$(dirname "$0")/serve_ollama.js" && ok || fail "serve_ollama.js failed"
stop_server o TERM
finish
