# Helpers of the lares serve tests (source after lib.sh): start a server on a
# free loopback port, wait until it listens, stop it and check how it ended.
# Every server started here is killed when the test exits, also on failure.
SERVER_PIDS=()
trap 'for p in "${SERVER_PIDS[@]}"; do kill -KILL "$p" 2>/dev/null; done; rm -rf "$TMP"' EXIT
need curl
need jq

# try_server NAME [lares serve options...]: sets URL_<NAME> and PID_<NAME>
# when the server listens; else returns 1 once it has exited (its messages in
# $TMP/NAME.log)
try_server() {
  local name=$1 port="" pid i
  shift
  "$LARES" serve --port 0 "$@" 2>"$TMP/$name.log" &
  pid=$!
  SERVER_PIDS+=("$pid")
  for i in $(seq 1 600); do
    port=$(sed -n 's|.* on http://127\.0\.0\.1:\([0-9]*\).*|\1|p' "$TMP/$name.log")
    [ -n "$port" ] && break
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.05
  done
  if [ -z "$port" ]; then
    wait "$pid" 2>/dev/null
    return 1
  fi
  printf -v "URL_$name" '%s' "http://127.0.0.1:$port"
  printf -v "PID_$name" '%s' "$pid"
}

# start_server NAME [lares serve options...]: try_server, and the test ends
# when the server does not start
start_server() {
  if ! try_server "$@"; then
    echo "$TEST_NAME: server $1 did not start: $(cat "$TMP/$1.log")" >&2
    exit 1
  fi
}

# stop_server NAME [SIGNAL]: the server must exit 0 within 30 s
stop_server() {
  local name=$1 sig=${2:-INT} pidvar="PID_$1" rc i
  local pid=${!pidvar}
  kill -"$sig" "$pid"
  for i in $(seq 1 600); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.05
  done
  if kill -0 "$pid" 2>/dev/null; then
    fail "server $name did not stop on SIG$sig"
    kill -KILL "$pid"
  fi
  wait "$pid"
  rc=$?
  [ "$rc" -eq 0 ] && ok || fail "server $name exited $rc on SIG$sig: $(tail -5 "$TMP/$name.log")"
}

# post URL PATH JSON [curl options...]: body to $TMP/body, prints the status
post() {
  local url=$1 path=$2 body=$3
  shift 3
  curl -sS -o "$TMP/body" -w '%{http_code}' -H 'Content-Type: application/json' \
    --data-binary "$body" "$@" "$url$path"
}

# npm_package NAME VERSION: installs NAME@VERSION into $LARES_NODE_DIR (npm cache
# in $LARES_NPM_CACHE, both set by CMake) unless that version is there already
npm_package() {
  local name=$1 version=$2
  : "${LARES_NODE_DIR:?set by CMake}" "${LARES_NPM_CACHE:?set by CMake}"
  if [ "$(jq -r .version "$LARES_NODE_DIR/node_modules/$name/package.json" 2>/dev/null)" != "$version" ]; then
    mkdir -p "$LARES_NODE_DIR" "$LARES_NPM_CACHE"
    if ! npm install --prefix "$LARES_NODE_DIR" --cache "$LARES_NPM_CACHE" --no-audit --no-fund \
      --no-save "$name@$version" >"$TMP/npm.log" 2>&1; then
      echo "$TEST_NAME: npm install $name@$version failed: $(tail -5 "$TMP/npm.log")" >&2
      exit 1
    fi
  fi
}
