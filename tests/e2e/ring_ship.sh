#!/usr/bin/env bash
# Workers without the model file (issue 19): `lares worker` started without -m,
# with a fresh --cache directory, and a ring.json naming no model for it. The
# head ships each worker the tensors of its windows; the greedy ids are those
# of one device. A second run starts from the caches: nothing shipped, first
# token within 2 s. A cached tensor changed on disk, and chunks damaged on their
# way, are detected (SHA-256) and fetched again, never used. A worker killed
# mid-transfer resumes from what it had. A cache too small for the windows, and
# a full disk, fail with a clear message. A re-plan that gives a survivor
# layers it lacks (failover) fetches them. `--cache-list` lists the cache. The
# qwen2 and qwen3 MoE test models go through one worker's cache as well.
. "$(dirname "$0")/lib.sh"
. "$LARES_SRC/tests/cluster/ring_lib.sh"
ring_trap
need jq
need bc

ship_json() { # FILE "TOP-LEVEL EXTRAS" HEAD_W [NAME ADDR W]...: ring.json with no "model" for any worker
  local file=$1 extra=$2 head_w=$3
  shift 3
  {
    printf '{%s "devices": [\n  {"name": "head", "key": "%s", "w": %s%s}' "$extra" "$TMP/head.key" "$head_w" "${HEAD_EXTRA:-}"
    while [ $# -ge 3 ]; do
      printf ',\n  {"name": "%s", "address": "%s", "public_key": "%s", "threads": 1, "w": %s}' \
        "$1" "$2" "$TMP/$1.key.pub" "$3"
      shift 3
    done
    printf '\n]}\n'
  } >"$file"
}

shipped() { # JSON NAME: bytes shipped to that device
  jq -r --arg n "$2" '.ring.device[] | select(.name == $n) | .shipped_bytes' "$1"
}

run_ring() { # MODEL OUT [options]: a greedy ring run, ids compared with one device's
  local m=$1 out=$2
  shift 2
  if ! "$LARES" run -m "$m" -p "Once upon a time" -n 40 --temp 0 --json -t 1 --ring "$TMP/ring.json" \
      --rebalance off "$@" >"$out" 2>"$out.err"; then
    fail "ring run ($out): $(tail -3 "$out.err")"
    return 1
  fi
  local want got
  want=$(jq -c .generated_ids "$TMP/local.json")
  got=$(jq -c .generated_ids "$out")
  [ "$got" = "$want" ] && ok || fail "ring ids ($out): $got, one device: $want"
}

# ---- the head's report in words: what it shipped to each worker ----
M=$(model stories260K.gguf)
ring_worker a --cache "$TMP/wa" -t 1 || exit 1; AA=$WORKER_ADDR
ship_json "$TMP/ring.json" "" 1 a "$AA" 4
"$LARES" run -m "$M" -p "Once upon a time" -n 4 --temp 0 -t 1 --ring "$TMP/ring.json" --rebalance off \
  >/dev/null 2>"$TMP/words.err" || fail "ring run in words: $(tail -3 "$TMP/words.err")"
grep -q "shipped 0\.[0-9] MiB of the model to it" "$TMP/words.err" && ok || fail "head report: $(cat "$TMP/words.err")"
ring_cleanup

for case in "stories260K.gguf 1 2 2" "TinyStories-656K.f16.gguf 0 1 1"; do
  read -r rel HW AW BW <<<"$case"
  M=$(model "$rel")
  "$LARES" run -m "$M" -p "Once upon a time" -n 40 --temp 0 --json -t 1 >"$TMP/local.json" 2>"$TMP/local.err" \
    || fail "$rel local run: $(cat "$TMP/local.err")"
  rm -rf "$TMP/ca" "$TMP/cb"
  ring_worker a --cache "$TMP/ca" -t 1 || exit 1; AA=$WORKER_ADDR
  ring_worker b --cache "$TMP/cb" -t 1 || exit 1; BB=$WORKER_ADDR
  ship_json "$TMP/ring.json" "" "$HW" a "$AA" "$AW" b "$BB" "$BW"

  # ---- first run: everything shipped ----
  run_ring "$M" "$TMP/r1.json"
  sa=$(shipped "$TMP/r1.json" a); sb=$(shipped "$TMP/r1.json" b)
  [ "${sa:-0}" -gt 0 ] && [ "${sb:-0}" -gt 0 ] && ok || fail "$rel: shipped a=$sa b=$sb"
  # only the windows' tensors: less than the file
  size=$(stat -c %s "$M")
  [ "$sa" -lt "$size" ] && [ "$sb" -lt "$size" ] && ok || fail "$rel: shipped more than the file ($sa, $sb of $size)"
  grep -q "worker fetch: fetched .* MiB of weights from the head in .* MiB/s" "$TMP/a.log" \
    && ok || fail "$rel: worker a shows no progress: $(grep fetch "$TMP/a.log")"

  # ---- second run: from the caches, nothing shipped, first token within 2 s ----
  run_ring "$M" "$TMP/r2.json"
  [ "$(shipped "$TMP/r2.json" a)" = 0 ] && [ "$(shipped "$TMP/r2.json" b)" = 0 ] && ok \
    || fail "$rel: second run shipped $(shipped "$TMP/r2.json" a) / $(shipped "$TMP/r2.json" b)"
  first=$(jq '.timings.load_ms + .timings.ttft_ms' "$TMP/r2.json")
  [ "$(echo "$first < 2000" | bc)" = 1 ] && ok || fail "$rel: second start to first token $first ms"

  # ---- workers restarted on their caches: the same, only hashes checked ----
  ring_cleanup
  ring_worker a --cache "$TMP/ca" -t 1 || exit 1; AA=$WORKER_ADDR
  ring_worker b --cache "$TMP/cb" -t 1 || exit 1; BB=$WORKER_ADDR
  ship_json "$TMP/ring.json" "" "$HW" a "$AA" "$AW" b "$BB" "$BW"
  run_ring "$M" "$TMP/r3.json"
  [ "$(shipped "$TMP/r3.json" a)" = 0 ] && [ "$(shipped "$TMP/r3.json" b)" = 0 ] && ok \
    || fail "$rel: restarted workers were shipped $(shipped "$TMP/r3.json" a) / $(shipped "$TMP/r3.json" b)"
  first=$(jq '.timings.load_ms + .timings.ttft_ms' "$TMP/r3.json")
  [ "$(echo "$first < 2000" | bc)" = 1 ] && ok || fail "$rel: restarted workers: first token after $first ms"

  # ---- a cached tensor changed on disk: detected, fetched again, the same ids ----
  ring_cleanup
  man=$(ls "$TMP"/ca/*/manifest)
  # the first tensor held whole (an "i" line with a hash, item > 0): flip a byte in its middle
  read -r off bytes < <(awk '$1 == "i" && $2 > 0 && $7 != "-" {print $3, $4; exit}' "$man")
  [ -n "$off" ] || fail "$rel: no tensor held in $man"
  printf '\x55' | dd of="$(dirname "$man")/model.gguf" bs=1 seek=$((off + bytes / 2)) conv=notrunc status=none
  ring_worker a --cache "$TMP/ca" -t 1 || exit 1; AA=$WORKER_ADDR
  ring_worker b --cache "$TMP/cb" -t 1 || exit 1; BB=$WORKER_ADDR
  ship_json "$TMP/ring.json" "" "$HW" a "$AA" "$AW" b "$BB" "$BW"
  run_ring "$M" "$TMP/r4.json"
  s4=$(shipped "$TMP/r4.json" a)
  [ "$s4" = "$bytes" ] && [ "$(shipped "$TMP/r4.json" b)" = 0 ] && ok \
    || fail "$rel: after tampering, shipped a=$s4 (the tensor: $bytes), b=$(shipped "$TMP/r4.json" b)"
  grep -q "hash mismatch\|damaged or tampered" "$TMP/a.log" && ok || fail "$rel: no word of the damaged tensor: $(grep -i warn "$TMP/a.log")"
  ring_cleanup
done

# ---- other architectures through one worker and one cache: qwen2 (biases), qwen3 MoE (experts) ----
rm -rf "$TMP/cq"
ring_worker q --cache "$TMP/cq" -t 1 || exit 1; QQ=$WORKER_ADDR
for rel in derived/TinyStories-656K.f32.qwen2-arch.gguf derived/TinyStories-656K-qwen3moe-4x2-qknorm1.gguf; do
  M=$(model "$rel")
  "$LARES" run -m "$M" -p "Once upon a time" -n 40 --temp 0 --json -t 1 >"$TMP/local.json" 2>"$TMP/local.err" \
    || fail "$rel local run: $(cat "$TMP/local.err")"
  ship_json "$TMP/ring.json" "" 1 q "$QQ" 1
  run_ring "$M" "$TMP/arch.json" && [ "$(shipped "$TMP/arch.json" q)" -gt 0 ] && ok || fail "$rel: nothing shipped"
done
"$LARES" worker --cache-list --cache "$TMP/cq" >"$TMP/listq.out" 2>&1 && grep -q "2 model(s)" "$TMP/listq.out" \
  && ok || fail "two models in one cache: $(cat "$TMP/listq.out")"
ring_cleanup

M=$(model stories260K.gguf)
"$LARES" run -m "$M" -p "Once upon a time" -n 40 --temp 0 --json -t 1 >"$TMP/local.json" 2>"$TMP/local.err"

# ---- chunks damaged on their way: refetched, never used ----
rm -rf "$TMP/ct"
ring_worker a --cache "$TMP/ct" -t 1 --test-tamper-chunks 2 || exit 1; AA=$WORKER_ADDR
ship_json "$TMP/ring.json" "" 2 a "$AA" 3
run_ring "$M" "$TMP/t.json"
[ "$(grep -c "hash mismatch, the chunks received are dropped" "$TMP/a.log")" -ge 2 ] && ok \
  || fail "damaged chunks not reported: $(grep fetch "$TMP/a.log")"
ring_cleanup

# ---- killed mid-transfer: the restarted worker resumes from its cache ----
# the head's sends delayed by 1 s make the transfer take seconds
rm -rf "$TMP/ck" "$TMP/cf"
ring_worker f --cache "$TMP/cf" -t 1 || exit 1; FF=$WORKER_ADDR
ship_json "$TMP/ring.json" "" 2 f "$FF" 3
run_ring "$M" "$TMP/full.json"
full=$(shipped "$TMP/full.json" f)
ring_cleanup
ring_worker k --cache "$TMP/ck" -t 1 || exit 1; KK=$WORKER_ADDR; KPID=$WORKER_PID
HEAD_EXTRA=', "link_delay_ms": 1000' ship_json "$TMP/ring.json" '"timeout_ms": 6000, "connect_timeout_ms": 20000,' 2 k "$KK" 3
"$LARES" run -m "$M" -p "Once upon a time" -n 4 --temp 0 -t 1 --ring "$TMP/ring.json" --rebalance off --failover off \
  >"$TMP/kh.out" 2>"$TMP/kh.err" &
HPID=$!
for i in $(seq 1 200); do
  grep -q "fetching .* MiB of weights" "$TMP/k.log" && break
  sleep 0.05
done
sleep 1.8
kill -9 "$KPID"
wait "$HPID" 2>/dev/null
man=$(ls "$TMP"/ck/*/manifest)
held=$(awk '$1 == "i" && $2 > 0 && $7 != "-"' "$man" | wc -l)
[ "$held" -ge 1 ] && ok || fail "killed worker held no whole tensor: $(cat "$man")"
ring_worker k --cache "$TMP/ck" -t 1 || exit 1; KK=$WORKER_ADDR
ship_json "$TMP/ring.json" "" 2 k "$KK" 3
run_ring "$M" "$TMP/resume.json"
sr=$(shipped "$TMP/resume.json" k)
[ "$sr" -gt 0 ] && [ "$sr" -lt "$full" ] && ok || fail "resume shipped $sr bytes (a fresh worker: $full)"
ring_cleanup

# ---- a cache limit below the windows' tensors: a clear error ----
rm -rf "$TMP/cs"
ring_worker s --cache "$TMP/cs" --cache-size 50K -t 1 || exit 1; SS=$WORKER_ADDR
ship_json "$TMP/ring.json" "" 1 s "$SS" 4
if "$LARES" run -m "$M" -p "Once upon a time" -n 4 --temp 0 -t 1 --ring "$TMP/ring.json" --rebalance off >"$TMP/s.out" 2>"$TMP/s.err"; then
  grep -q "do not fit its size limit" "$TMP/s.log" && ok || fail "no word of the cache limit: $(tail -3 "$TMP/s.log")"
else
  grep -q "do not fit its size limit" "$TMP/s.err" && ok || fail "cache limit error: $(tail -3 "$TMP/s.err")"
fi
ring_cleanup

# ---- a full disk (a 64 KiB tmpfs; root in a mount namespace only) ----
if [ "$(id -u)" = 0 ] && unshare -m true 2>/dev/null; then
  mkdir -p "$TMP/full"
  ring_key d
  unshare -m sh -c "mount -t tmpfs -o size=64k tmpfs '$TMP/full' && exec '$LARES' worker --listen 127.0.0.1:0 \
    --key '$TMP/d.key' --allow '$TMP/head.key.pub' --cache '$TMP/full/c' -t 1" >"$TMP/d.out" 2>"$TMP/d.log" &
  RING_PIDS+=("$!")
  for i in $(seq 1 100); do
    DD=$(grep -o 'listening on [0-9.]*:[0-9]*' "$TMP/d.log" 2>/dev/null | head -1 | cut -d' ' -f3)
    [ -n "$DD" ] && break
    sleep 0.05
  done
  ship_json "$TMP/ring.json" "" 1 d "$DD" 4
  "$LARES" run -m "$M" -p "Once upon a time" -n 4 --temp 0 -t 1 --ring "$TMP/ring.json" --rebalance off >"$TMP/d.run" 2>"$TMP/d.err"
  grep -q "No space left on device (the cache's disk is full" "$TMP/d.log" && ok \
    || fail "full disk not reported: $(tail -3 "$TMP/d.log")"
  ring_cleanup
fi

# ---- failover: a survivor gets layers it never had and fetches them ----
rm -rf "$TMP/c1" "$TMP/c2"
ring_worker a --cache "$TMP/c1" -t 1 || exit 1; AA=$WORKER_ADDR
ring_worker b --cache "$TMP/c2" -t 1 || exit 1; BB=$WORKER_ADDR; BPID=$WORKER_PID
HEAD_EXTRA=', "link_delay_ms": 5' ship_json "$TMP/ring.json" '"heartbeat_ms": 100, "timeout_ms": 1500,' 1 a "$AA" 2 b "$BB" 2
"$LARES" run -m "$M" -p "Once upon a time" -n 300 --temp 0 --json -t 1 >"$TMP/local300.json" 2>/dev/null
"$LARES" run -m "$M" -p "Once upon a time" -n 300 --temp 0 --json -t 1 --ring "$TMP/ring.json" --rebalance off \
  >"$TMP/fo.json" 2>"$TMP/fo.err" &
HPID=$!
for i in $(seq 1 200); do
  grep -q "round 0 layers .* 1 token at 20:" "$TMP/b.log" && break
  sleep 0.05
done
kill -9 "$BPID"
wait "$HPID" && ok || fail "failover run: $(tail -3 "$TMP/fo.err")"
[ "$(jq -c .generated_ids "$TMP/fo.json")" = "$(jq -c .generated_ids "$TMP/local300.json")" ] && ok \
  || fail "failover ids differ from one device"
grep -c "worker fetch: fetching" "$TMP/a.log" | grep -q '^[2-9]' && ok || fail "survivor a did not fetch twice: $(grep fetch "$TMP/a.log")"
ring_cleanup

# ---- --cache-list ----
"$LARES" worker --cache-list --cache "$TMP/c1" >"$TMP/list.out" 2>"$TMP/list.err" || fail "cache-list: $(cat "$TMP/list.err")"
grep -q "1 model(s)" "$TMP/list.out" && grep -q "llama" "$TMP/list.out" && ok || fail "cache-list: $(cat "$TMP/list.out")"
"$LARES" worker --cache-list --cache "$TMP/none" >"$TMP/list2.out" 2>&1 && grep -q "0 model(s)" "$TMP/list2.out" \
  && ok || fail "cache-list of a missing dir: $(cat "$TMP/list2.out")"
# a damaged manifest: listed as such, and a worker starts that entry over
echo "garbage" >"$(ls "$TMP"/c1/*/manifest)"
"$LARES" worker --cache-list --cache "$TMP/c1" >"$TMP/list3.out" 2>&1 && grep -q "(damaged)" "$TMP/list3.out" \
  && ok || fail "damaged manifest: $(cat "$TMP/list3.out")"
ring_worker a --cache "$TMP/c1" -t 1 || exit 1; AA=$WORKER_ADDR
ship_json "$TMP/ring.json" "" 1 a "$AA" 4
run_ring "$M" "$TMP/dm.json" && [ "$(shipped "$TMP/dm.json" a)" -gt 0 ] && ok || fail "damaged manifest: nothing fetched again"
grep -q "not a lares weight cache manifest" "$TMP/a.log" && ok || fail "damaged manifest not named: $(grep -i warn "$TMP/a.log")"
ring_cleanup
finish
