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
npm_package ollama "$OLLAMA_VERSION"
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
