#!/usr/bin/env bash
# lares serve used through the official `openai` npm package (Node.js): the
# package is installed by the test into the build directory (npm cache there
# too), then serve_openai.js runs chat, streaming, completions, stop strings,
# seeds, log-probabilities, errors, an aborted stream and a full queue.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/serve_lib.sh"
need node
need npm
OPENAI_VERSION=6.30.1 # 7.x needs Node 22; Debian and the test machines have 20
npm_package openai "$OPENAI_VERSION"
M=$(model stories260K.gguf)
EXP=$(model expected/greedy_once_upon_a_time.json)
KEY=sk-node-test
start_server n -m "$M" -t 1 -c 2048 --queue 1 --api-key "$KEY"
printf 'user: Hi\nassistant:' >"$TMP/p"
"$LARES" run -m "$M" -f "$TMP/p" --temp 0 -n 20 -t 1 --no-echo -q | head -c -1 >"$TMP/want_chat"
# embeddings: the width from the fixture's card (../shared/models/README.md: stories260K has
# n_embd 64), the inputs' token counts from lares tokenize (not the server)
N_EMBD=64
STORY_IDS=$("$LARES" tokenize -m "$M" --ids -p 'Once upon a time')
n1=$(echo "$STORY_IDS" | jq length)
n2=$("$LARES" tokenize -m "$M" --ids -p 'The dog ran to the park.' | jq length)
SERVER_URL=$URL_n API_KEY=$KEY N_EMBD=$N_EMBD STORY_IDS=$STORY_IDS EMBED_TOKENS=$((2 * n1 + n2)) OPENAI_DIR=$LARES_NODE_DIR WANT_CHAT=$TMP/want_chat \
  WANT_COMPLETION=$(jq -r '.results[] | select(.model=="stories260K.gguf") | .reference_text' "$EXP") \
  node "$(dirname "$0")/serve_openai.js" && ok || fail "serve_openai.js failed"
stop_server n TERM
finish
