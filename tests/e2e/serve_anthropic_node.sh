#!/usr/bin/env bash
# lares serve's Messages API (/v1/messages) used through the official
# `@anthropic-ai/sdk` npm package (Node.js): the package is installed by the
# test into the build directory (npm cache there too), then serve_anthropic.js
# runs messages (text, text blocks, system), the stream helper and the raw
# events, stop sequences, errors and a wrong key (the SDK sends x-api-key).
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/serve_lib.sh"
need node
need npm
ANTHROPIC_VERSION=1.13.0
npm_package @anthropic-ai/sdk "$ANTHROPIC_VERSION"
M=$(model stories260K.gguf)
KEY=sk-anthropic-test
start_server a -m "$M" -t 1 -c 2048 --api-key "$KEY"
printf 'user: Hi\nassistant:' >"$TMP/p"
"$LARES" run -m "$M" -f "$TMP/p" --temp 0 -n 20 -t 1 --no-echo -q | head -c -1 >"$TMP/want_chat"
SERVER_URL=$URL_a API_KEY=$KEY ANTHROPIC_DIR=$LARES_NODE_DIR WANT_CHAT=$TMP/want_chat \
  node "$(dirname "$0")/serve_anthropic.js" && ok || fail "serve_anthropic.js failed"
stop_server a TERM
finish
