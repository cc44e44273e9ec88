#!/usr/bin/env bash
# lares run --mem-budget: sizes without a unit and budgets below the least that
# works are refused with messages that say so (the latter naming the minimum,
# which then works); under budgets from that minimum up, with several window
# sizes, a model that does not fit streams and generates exactly the tokens
# of the unbudgeted run, and --json reports the streaming figures. Streamed
# layers read directly (--stream-io direct, the default auto where the file
# system allows it) or through the page cache (mmap) give the same tokens, and
# the report says which way they came and counts the buffers of direct reads.
. "$(dirname "$0")/lib.sh"
need jq
VOCAB=$(model vocab/ggml-vocab-llama-spm.gguf)
M="$TMP/tiny16.gguf"
# 16 small layers and a 32000-row output: the output is the largest unit
if ! "$LARES" synth --preset llama-tiny --type q8_0 --layers 16 -o "$M" --vocab-from "$VOCAB" \
    >/dev/null 2>"$TMP/err"; then
  fail "synth: $(cat "$TMP/err")"
  finish
fi

run_json() { # out-file args...
  local out=$1
  shift
  "$LARES" run -m "$M" -p "Once upon a time" -n 12 --temp 0 -t 2 -c 128 --json "$@" >"$out" 2>"$TMP/err"
}

# --- parsing ---
"$LARES" run -m "$M" -p x --mem-budget 10 >/dev/null 2>"$TMP/err"
rc=$?
[ $rc -eq 2 ] && grep -q "give a unit" "$TMP/err" && ok || fail "--mem-budget 10: rc $rc, $(cat "$TMP/err")"
"$LARES" run -m "$M" -p x --mem-budget 0M >/dev/null 2>"$TMP/err"
rc=$?
[ $rc -eq 2 ] && grep -q "0 bytes" "$TMP/err" && ok || fail "--mem-budget 0M: rc $rc, $(cat "$TMP/err")"
"$LARES" run -m "$M" -p x --mem-budget 12Q >/dev/null 2>"$TMP/err"
rc=$?
[ $rc -eq 2 ] && grep -q "unknown unit" "$TMP/err" && ok || fail "--mem-budget 12Q: rc $rc, $(cat "$TMP/err")"
"$LARES" run -m "$M" -p x --mem-window 0 >/dev/null 2>"$TMP/err"
rc=$?
[ $rc -eq 2 ] && ok || fail "--mem-window 0: rc $rc, $(cat "$TMP/err")"
for cmd in run bench; do
  "$LARES" $cmd -m "$M" -p 1 -n 1 --stream-io odirect >/dev/null 2>"$TMP/err"
  rc=$?
  [ $rc -eq 2 ] && grep -q "'odirect' is not auto, mmap or direct" "$TMP/err" && ok \
    || fail "$cmd --stream-io odirect: rc $rc, $(cat "$TMP/err")"
done

# --- a budget below the least that works names that least ---
run_json "$TMP/small.json" --mem-budget 1M
rc=$?
if [ $rc -eq 1 ] && grep -q "needs at" "$TMP/err" && grep -q "the largest layer" "$TMP/err"; then
  ok
else
  fail "--mem-budget 1M: rc $rc, $(cat "$TMP/err")"
fi
least=$(sed -n 's/.*(\([0-9]*\) bytes) this session needs.*/\1/p' "$TMP/err")
[ -n "$least" ] && ok || fail "no minimum in: $(cat "$TMP/err")"

# --- the reference: no budget, nothing streams ---
if run_json "$TMP/ref.json"; then
  jq -e '.memory.streaming == false and .memory.prefetch_bytes == 0
        and .memory.stream_io == "none" and .memory.buffer_bytes == 0' "$TMP/ref.json" >/dev/null \
    && ok || fail "unbudgeted run streams: $(jq -c .memory "$TMP/ref.json")"
else
  fail "unbudgeted run: $(cat "$TMP/err")"
fi
want=$(jq -c .generated_ids "$TMP/ref.json")
wbytes=$(stat -c %s "$M")

# --- from the minimum up, several windows: same tokens, streaming reported ---
check_budget() { # budget [more args]
  local b=$1
  shift
  if ! run_json "$TMP/b.json" --mem-budget "$b" "$@"; then
    fail "budget $b $*: $(cat "$TMP/err")"
    return
  fi
  local got
  got=$(jq -c .generated_ids "$TMP/b.json")
  [ "$got" = "$want" ] && ok || fail "budget $b $*: tokens $got, want $want"
  # streamed every pass: 11 forward passes after the prompt read stream_bytes each
  jq -e --argjson b "$b" '.memory.streaming == true and .memory.budget_bytes == $b
        and .memory.stream_bytes > 0 and .memory.window_bytes > 0
        and .memory.prefetch_bytes >= 11 * .memory.stream_bytes
        and (.timings.gen_wait_ms | type == "number")
        and (.timings.gen_compute_ms > 0)
        and (.timings.token_ms | length) == 11' "$TMP/b.json" >/dev/null \
    && ok || fail "budget $b $*: figures $(jq -c '{memory, timings}' "$TMP/b.json")"
}
check_budget "$least"
check_budget "$least" --mem-window 1
mid=$((least + (wbytes - (least - 16 * 1048576)) / 3))
check_budget "$mid"
check_budget "$mid" --mem-window 2
check_budget "$mid" --mem-window 5
check_budget "$mid" --mem-lock

# direct reads where this file system allows them (the test directory is on
# a real disk; a file system that refuses them falls back to mmap)
direct_ok=1
"$LARES" run -m "$M" -p x -n 1 -c 128 --mem-budget "$least" --stream-io direct >/dev/null \
  2>"$TMP/err" || fail "probe: $(cat "$TMP/err")"
grep -q "no direct reads" "$TMP/err" && direct_ok=0
for io in mmap direct auto; do
  if ! run_json "$TMP/io.json" --mem-budget "$least" --stream-io $io; then
    fail "--stream-io $io: $(cat "$TMP/err")"
    continue
  fi
  got=$(jq -c .generated_ids "$TMP/io.json")
  [ "$got" = "$want" ] && ok || fail "--stream-io $io: tokens $got, want $want"
  used=$([ $io = mmap ] || [ $direct_ok = 0 ] && echo mmap || echo direct)
  # auto probes the file (reads both ways) and keeps direct reads unless the
  # page cache was more than 1.25x faster; the explicit choices never probe
  probe=$(jq -c .memory.probe "$TMP/io.json")
  if [ $io = auto ] && [ $direct_ok = 1 ]; then
    used=$(jq -r 'if .memory.probe == null or .memory.probe.mmap_Bps <= 1.25 * .memory.probe.direct_Bps
                  then "direct" else "mmap" end' "$TMP/io.json")
    jq -e '.memory.probe == null or (.memory.probe.direct_Bps > 0 and .memory.probe.mmap_Bps > 0)' \
      "$TMP/io.json" >/dev/null && ok || fail "--stream-io auto: probe $probe"
  else
    [ "$probe" = null ] && ok || fail "--stream-io $io: a probe $probe"
  fi
  if [ "$used" = direct ]; then
    # every byte prefetched came directly, into buffers within the budget
    jq -e --argjson b "$least" '.memory.stream_io == "direct"
          and .memory.direct_bytes == .memory.prefetch_bytes
          and .memory.direct_bytes >= 11 * .memory.stream_bytes
          and .memory.buffer_bytes >= .memory.window_bytes / 2
          and .memory.buffer_bytes + .memory.pinned_bytes <= $b' "$TMP/io.json" >/dev/null \
      && ok || fail "--stream-io $io: $(jq -c .memory "$TMP/io.json")"
  else
    jq -e '.memory.stream_io == "mmap" and .memory.direct_bytes == 0
          and .memory.buffer_bytes == 0' "$TMP/io.json" >/dev/null \
      && ok || fail "--stream-io $io: $(jq -c .memory "$TMP/io.json")"
  fi
done
# lares bench takes the option too and says which way each test read
for io in mmap auto; do
  want_io=$([ $io = mmap ] || [ $direct_ok = 0 ] && echo mmap || echo direct)
  if "$LARES" bench -m "$M" -p 0 -n 2 -r 1 -c 128 --mem-budget "$least" --stream-io $io --json \
      >"$TMP/bench.json" 2>"$TMP/err"; then
    if [ $io = auto ] && [ $direct_ok = 1 ]; then
      want_io=$(jq -r '.tests[0].stream_probe as $p
                       | if $p == null or $p.mmap_Bps <= 1.25 * $p.direct_Bps then "direct" else "mmap" end' \
                "$TMP/bench.json")
    fi
    jq -e --arg w "$want_io" '.tests[0].stream_io == $w' "$TMP/bench.json" >/dev/null && ok \
      || fail "bench --stream-io $io: $(cat "$TMP/bench.json")"
  else
    fail "bench --stream-io $io: $(cat "$TMP/err")"
  fi
done
if [ $direct_ok = 1 ]; then
  "$LARES" run -m "$M" -p "Once upon a time" -n 4 --temp 0 -c 128 --mem-budget "$least" \
    --stream-io direct >/dev/null 2>"$TMP/err" && grep -q "read directly (O_DIRECT)" "$TMP/err" \
    && ok || fail "human run, direct: $(cat "$TMP/err")"
else
  grep -q "go through the page cache" "$TMP/err" && ok || fail "no warning: $(cat "$TMP/err")"
fi

# the human figures name the split of a token's time
if "$LARES" run -m "$M" -p "Once upon a time" -n 4 --temp 0 -c 128 --mem-budget "$least" \
    >/dev/null 2>"$TMP/err"; then
  grep -q "ms computing + .* ms waiting for disk" "$TMP/err" && ok \
    || fail "no time split in: $(cat "$TMP/err")"
else
  fail "human run: $(cat "$TMP/err")"
fi
finish
