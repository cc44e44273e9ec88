# Helpers for ring tests and benchmarks: keys, workers on loopback (each a
# background `lares worker` whose address is read from its log), ring.json.
# Source after tests/e2e/lib.sh (or set LARES, TMP first). Every worker
# started here is killed by ring_cleanup, which ring_trap installs on EXIT
# together with the removal of $TMP.

RING_PIDS=()

ring_cleanup() { # TERM, and KILL whatever has not left after 5 s: a test never hangs here
  local p i
  for p in "${RING_PIDS[@]}"; do
    kill -CONT "$p" 2>/dev/null
    kill "$p" 2>/dev/null
  done
  for p in "${RING_PIDS[@]}"; do
    for i in $(seq 1 50); do
      kill -0 "$p" 2>/dev/null || break
      sleep 0.1
    done
    if kill -0 "$p" 2>/dev/null; then
      echo "ring_cleanup: worker $p ignored SIGTERM for 5 s; killed" >&2
      declare -F fail >/dev/null && fail "worker $p ignored SIGTERM for 5 s"
      kill -9 "$p" 2>/dev/null
    fi
    wait "$p" 2>/dev/null
  done
  RING_PIDS=()
}

ring_trap() {
  trap 'ring_cleanup; rm -rf "$TMP"' EXIT
}

# ring_key NAME: makes $TMP/NAME.key (+ .pub) once
ring_key() {
  [ -f "$TMP/$1.key" ] || "$LARES" keygen -o "$TMP/$1.key" >/dev/null 2>"$TMP/$1.keygen.err" || {
    echo "ring_key $1: $(cat "$TMP/$1.keygen.err")" >&2
    return 1
  }
}

# ring_worker NAME [worker options...]: starts a worker on 127.0.0.1 (or
# $RING_LISTEN; port 0: a free one) with key $TMP/NAME.key allowing the head's
# key, unless the options say otherwise; sets WORKER_ADDR and WORKER_PID; its
# log is $TMP/NAME.log. $LARES may be a launcher that execs lares (in a
# cgroup or a network namespace: tests/cluster/testbed.sh).
ring_worker() {
  local name=$1
  shift
  ring_key "$name" || return 1
  ring_key head || return 1
  local args=(--listen "${RING_LISTEN:-127.0.0.1:0}")
  if [[ " $* " != *" --insecure "* ]]; then
    args+=(--key "$TMP/$name.key")
    [[ " $* " == *" --allow "* ]] || args+=(--allow "$TMP/head.key.pub")
  fi
  # a log of an earlier worker of this name must not be read before the new one truncates it
  rm -f "$TMP/$name.out" "$TMP/$name.log"
  "$LARES" worker "${args[@]}" "$@" >"$TMP/$name.out" 2>"$TMP/$name.log" &
  WORKER_PID=$!
  RING_PIDS+=("$WORKER_PID")
  local i
  for i in $(seq 1 100); do
    WORKER_ADDR=$(grep -o 'listening on [0-9.]*:[0-9]*' "$TMP/$name.log" 2>/dev/null | head -1 | cut -d' ' -f3)
    [ -n "$WORKER_ADDR" ] && return 0
    kill -0 "$WORKER_PID" 2>/dev/null || break
    sleep 0.05
  done
  echo "ring_worker $name did not start: $(cat "$TMP/$name.log")" >&2
  return 1
}

# ring_json FILE "TOP-LEVEL EXTRAS" HEAD_W [NAME ADDR W]...: a ring.json with
# the head (key $TMP/head.key) and the workers; EXTRAS is spliced into the top
# object ("" for none), e.g. '"link_delay_ms": 5,' is per device (see RING_DEV_EXTRA)
ring_json() {
  local file=$1 extra=$2 head_w=$3
  shift 3
  {
    printf '{%s "devices": [\n  {"name": "head", "key": "%s", "w": %s}' "$extra" "$TMP/head.key" "$head_w"
    while [ $# -ge 3 ]; do
      printf ',\n  {"name": "%s", "address": "%s", "public_key": "%s", "model": "%s", "threads": 1, "w": %s%s}' \
        "$1" "$2" "$TMP/$1.key.pub" "${RING_MODEL:?RING_MODEL must name the model}" "$3" "${RING_DEV_EXTRA:-}"
      shift 3
    done
    printf '\n]}\n'
  } >"$file"
}
