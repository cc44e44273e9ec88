# Shared helpers of the end-to-end tests: each test sources this, runs the
# lares binary ($LARES) on the real models ($LARES_MODELS_DIR) and fails with a
# message naming what differed. Temporary files go under $LARES_TEST_TMP and
# are removed on exit, also when the test fails.
set -uo pipefail

: "${LARES:?LARES must point at the lares binary}"
: "${LARES_MODELS_DIR:?LARES_MODELS_DIR must point at ../shared/models}"
MODELS=$LARES_MODELS_DIR
TEST_NAME=$(basename "$0" .sh)
mkdir -p "${LARES_TEST_TMP:-/tmp}"
TMP=$(mktemp -d "${LARES_TEST_TMP:-/tmp}/$TEST_NAME.XXXXXX")
# profiles are cached under $XDG_CACHE_HOME (lares profile, workers, ring
# heads): a test never writes into the user's home
export XDG_CACHE_HOME="$TMP/xdg"
# keys and paired devices of zero-setup rings live under $XDG_CONFIG_HOME (issue 19): the same
export XDG_CONFIG_HOME="$TMP/xdg-config"
trap 'rm -rf "$TMP"' EXIT
FAILURES=0
CHECKS=0

fail() {
  echo "$TEST_NAME: FAIL: $*" >&2
  FAILURES=$((FAILURES + 1))
}

ok() {
  CHECKS=$((CHECKS + 1))
}

model() { # a fixture path; a missing fixture fails loudly
  local p="$MODELS/$1"
  if [ ! -f "$p" ]; then
    echo "$TEST_NAME: fixture missing: $p (set LARES_MODELS_DIR)" >&2
    exit 1
  fi
  echo "$p"
}

ids_agree() { # a b (JSON arrays of ids): how many leading ids are equal
  jq -n --argjson a "$1" --argjson b "$2" \
    '[range(0; [($a|length), ($b|length)] | min) as $i | if $a[$i] == $b[$i] then 1 else 0 end]
     | (index(0) // length)'
}

# Speculative decoding keeps greedy ids: the ids of a run with drafts ($3)
# equal plain decoding's ($2). TinyStories-656K Q5_1 ($1 the file's base name)
# is held to its first 30: its activations are Q8_1 rows whose tile kernel (a
# batch) and single dot (one token) sum in other orders, and it meets a
# near-tie (in e2e_run_greedy it agrees with the reference for 30 tokens).
same_greedy_ids() { # base plain-ids draft-ids label
  if [ "$1" = TinyStories-656K.llamacpp-Q5_1.gguf ]; then
    local agree
    agree=$(ids_agree "$2" "$3")
    [ "$agree" -ge 30 ] && ok || fail "$4 agrees for $agree tokens: $3, plain $2"
  else
    [ -n "$2" ] && [ "$2" = "$3" ] && ok || fail "$4 gave $3, plain decoding $2"
  fi
}

# lares run on a fixture (model FILE) with the caller's prompt $P, 64 tokens,
# 2 threads, --json into OUT and any further arguments; a failed run fails the
# test with lares's own message. (The speculative tests compare such runs.)
run_json() { # file out extra-args...
  local file=$1 out=$2
  shift 2
  "$LARES" run -m "$(model "$file")" -p "$P" -n 64 -t 2 --json "$@" >"$out" 2>"$TMP/err" ||
    fail "$file $*: lares run failed: $(cat "$TMP/err")"
}

need() {
  command -v "$1" >/dev/null 2>&1 || { echo "$TEST_NAME: needs $1" >&2; exit 1; }
}

finish() {
  if [ "$FAILURES" -gt 0 ]; then
    echo "$TEST_NAME: $FAILURES failure(s), $CHECKS checks passed" >&2
    exit 1
  fi
  echo "$TEST_NAME: $CHECKS checks passed"
  exit 0
}
