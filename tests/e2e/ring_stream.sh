#!/usr/bin/env bash
# Workers whose layers do not fit their memory budget stream them (the
# executor reads each window ahead in round order and releases it after use):
# through a ring of two such workers and k = 3 rounds the greedy output is
# still identical to one device. The budget is the least the worker accepts
# (its refusal names it) plus a little, so the weights cannot all stay: with
# a context of 128 positions, what a worker counts every KV cache for at
# first. With a longer context the same least budget holds the weights while
# the caches are short, and the worker streams once a sequence goes past
# what its budget counted (issue 20: caches count the positions in use).
. "$(dirname "$0")/lib.sh"
. "$LARES_SRC/tests/cluster/ring_lib.sh"
ring_trap
need jq
export RING_MODEL
RING_MODEL=$(model stories260K.gguf)

# the least budget each worker accepts with its windows, from its refusal: the
# head hands out the plan from the last worker back, so b refuses first; then a
least_of() { # file: the figure in the refusal
  sed -n 's/.*below the \([0-9.]*\) MiB this worker needs at least.*/\1/p' "$1"
}
CTX=128 N=40 # the run's context and tokens
probe() { # budget_a budget_b [worker args]: one ring run, its stderr in $TMP/probe.err
  ring_cleanup
  ring_worker a -t 1 -v --mem-budget "$1" "${@:3}" || exit 1; AA=$WORKER_ADDR
  ring_worker b -t 1 -v --mem-budget "$2" "${@:3}" || exit 1; BB=$WORKER_ADDR
  ring_json "$TMP/ring.json" "" 0 a "$AA" 1 b "$BB" 1 # W = 2: k = 3, three windows on a
  "$LARES" run -m "$RING_MODEL" -p "Once upon a time" -n $N -c $CTX --temp 0 -t 1 --json --ring "$TMP/ring.json" --rebalance off \
    >"$TMP/ring.out" 2>"$TMP/probe.err"
}
least_budgets() { # sets budget_a and budget_b: each worker's least plus 0.1 MiB
  probe 1M 1M && fail "workers ran with a budget of 1 MiB"
  least_b=$(least_of "$TMP/probe.err")
  [ -n "$least_b" ] && grep -q "error: b (" "$TMP/probe.err" && ok || { fail "no least budget for b: $(cat "$TMP/probe.err")"; finish; }
  budget_b=$(echo "$least_b + 0.1" | bc)M
  probe 1M "$budget_b" && fail "worker a ran with a budget of 1 MiB"
  least_a=$(least_of "$TMP/probe.err")
  [ -n "$least_a" ] && grep -q "error: a (" "$TMP/probe.err" && ok || { fail "no least budget for a: $(cat "$TMP/probe.err")"; finish; }
  budget_a=$(echo "$least_a + 0.1" | bc)M
}
least_budgets
probe "$budget_a" "$budget_b" || fail "ring of streaming workers: $(cat "$TMP/probe.err")"
"$LARES" run -m "$RING_MODEL" -p "Once upon a time" -n $N -c $CTX --temp 0 -t 1 --json >"$TMP/local.json" 2>/dev/null
[ "$(jq -c .generated_ids "$TMP/ring.out")" = "$(jq -c .generated_ids "$TMP/local.json")" ] && ok \
  || fail "streaming workers change the output"
for w in a b; do
  grep -q "exec: streaming" "$TMP/$w.log" && ok || fail "worker $w did not stream: $(cat "$TMP/$w.log")"
done
grep -q "layers \[0, 1) \[2, 3) \[4, 5) of 5 (3 rounds)" "$TMP/a.log" && ok \
  || fail "worker a does not hold three windows: $(grep plan "$TMP/a.log")"
# by default (auto) the workers read their streamed layers directly where the
# file system allows it; with --stream-io mmap through the page cache, and the
# output is the same either way
for w in a b; do
  grep -qE "are read directly|go through the page cache" "$TMP/$w.log" && ok \
    || fail "worker $w does not say how it reads: $(cat "$TMP/$w.log")"
done
probe "$budget_a" "$budget_b" --stream-io mmap || fail "workers with --stream-io mmap: $(cat "$TMP/probe.err")"
[ "$(jq -c .generated_ids "$TMP/ring.out")" = "$(jq -c .generated_ids "$TMP/local.json")" ] && ok \
  || fail "streaming workers through the page cache change the output"
for w in a b; do
  grep -q "exec: streaming" "$TMP/$w.log" && ! grep -q "are read directly" "$TMP/$w.log" && ok \
    || fail "worker $w with --stream-io mmap: $(cat "$TMP/$w.log")"
done

# a context of 2048: the least budgets hold every full cache beside the
# largest layer, so the weights stay while the caches are short
CTX=2048
least_budgets
probe "$budget_a" "$budget_b" || fail "ring with long contexts: $(cat "$TMP/probe.err")"
if grep -q "exec: streaming" "$TMP/a.log"; then fail "worker a streams with short caches: $(cat "$TMP/a.log")"; else ok; fi
# past 1024 positions a's budget counts every cache whole: then it streams,
# and the output is still one device's
N=1100
probe "$budget_a" "$budget_b" || fail "ring past 1024 positions: $(cat "$TMP/probe.err")"
grep -q "exec: streaming" "$TMP/a.log" && ok || fail "worker a did not stream as its cache filled: $(cat "$TMP/a.log")"
"$LARES" run -m "$RING_MODEL" -p "Once upon a time" -n $N -c $CTX --temp 0 -t 1 --json >"$TMP/local.json" 2>/dev/null
[ "$(jq -c .generated_ids "$TMP/ring.out")" = "$(jq -c .generated_ids "$TMP/local.json")" ] && ok \
  || fail "a worker that starts streaming mid-run changes the output"
finish
