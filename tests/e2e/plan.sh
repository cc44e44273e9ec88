#!/usr/bin/env bash
# lares plan: a plan over hand-written devices and over real profiles, checked
# with jq (every layer exactly once, the baselines priced beside it), the
# paper's 70B shape, and bad device files refused with a message naming the
# fault.
. "$(dirname "$0")/lib.sh"
need jq
M=$(model stories260K.gguf) # 5 layers

cat > "$TMP/devices.json" <<'EOF'
{
  "network": {"latency_ms": 2, "bandwidth": "300Mbit/s"},
  "devices": [
    {"name": "laptop", "os": "linux", "head": true,
     "cpu": {"cores": 8, "flops": {"*": 2e11}, "mem_bw": "40GB/s"},
     "memory": {"available": "4GiB"}, "disk": {"seq_read": "2GB/s"}},
    {"name": "phone", "os": "android",
     "cpu": {"cores": 8, "flops": {"*": 5e10}, "mem_bw": "20GB/s"},
     "memory": {"available": "1.9GiB", "swap_available": "512MiB"},
     "disk": {"seq_read": "1.37GB/s"}},
    {"name": "mac", "os": "macos",
     "cpu": {"cores": 8, "flops": {"*": 2e11}, "mem_bw": "60GB/s"},
     "memory": {"available": "2.4GiB"},
     "disk": {"seq_read": "0.72GB/s", "rand_read": "0.2GB/s"},
     "gpu": {"backend": "metal", "vram_available": "2.4GiB", "flops": {"*": 1.3e12},
             "mem_bw": "60GB/s"}}
  ]
}
EOF

# every layer exactly once, over all devices and rounds
layers_once() { # plan.json n_layer
  jq -e --argjson L "$2" '[.devices[].windows[][] ] as $w
    | [range(0; $w | length; 2) as $i | range($w[$i]; $w[$i + 1])] | sort == [range(0; $L)]' \
    "$1" >/dev/null
}

for P in halda even memory single; do
  if "$LARES" plan -m "$M" --devices "$TMP/devices.json" --placement $P --json \
      >"$TMP/$P.json" 2>"$TMP/$P.err"; then ok; else fail "$P: $(cat "$TMP/$P.err")"; continue; fi
  layers_once "$TMP/$P.json" 5 && ok || fail "$P: layers not covered exactly once"
  jq -e --arg p $P '.placement == $p and .t_token_ms > 0 and (.devices | length) >= 1
      and .devices[0].name == .head and .model.n_layer == 5' "$TMP/$P.json" >/dev/null \
    && ok || fail "$P: plan fields"
  # the other three placements are priced beside it
  jq -e --arg p $P '.baselines | (keys | length == 3) and (has($p) | not)' "$TMP/$P.json" \
    >/dev/null && ok || fail "$P: baselines $(jq -c '.baselines | keys' "$TMP/$P.json")"
done
# the head is the device marked head; Halda is never predicted slower than the
# splits with the same head (the single-device baseline may pick another device)
jq -e '.head == "laptop"' "$TMP/halda.json" >/dev/null && ok || fail "head"
jq -e '.t_token_ms as $t | [.baselines.even, .baselines.memory | .t_token_ms >= $t] | all' \
  "$TMP/halda.json" >/dev/null && ok || fail "halda slower than a baseline"
jq -e '.baselines.even.devices | length == 3' "$TMP/halda.json" >/dev/null && ok \
  || fail "even split over three devices"

# the human table
"$LARES" plan -m "$M" --devices "$TMP/devices.json" >"$TMP/human.txt" 2>&1 \
  && grep -q "predicted token latency" "$TMP/human.txt" && grep -q "baselines" "$TMP/human.txt" \
  && ok || fail "human output: $(cat "$TMP/human.txt")"

# the paper's 70B shape over six devices written by hand (the unit test has the figures)
cat > "$TMP/paper.json" <<'EOF'
[
 {"name": "mac-m1", "os": "macos", "cpu": {"cores": 8, "flops": {"*": 2.05e11}, "mem_bw": 4.78e10},
  "memory": {"available": "2.4GiB"}, "disk": {"seq_read": "0.72GB/s", "rand_read": "0.72GB/s"},
  "gpu": {"backend": "metal", "vram_available": "2.4GiB", "flops": {"*": 1.3e12}, "mem_bw": 4.78e10}},
 {"name": "laptop", "os": "linux", "cpu": {"cores": 8, "flops": {"*": 5.1e11}, "mem_bw": 3.58e10},
  "memory": {"available": "4.1GiB"}, "disk": {"seq_read": "2.98GB/s"},
  "gpu": {"backend": "cuda", "vram_available": "8GiB", "flops": {"*": 8e12}, "mem_bw": 3.14e11}},
 {"name": "desktop", "os": "linux", "cpu": {"cores": 16, "flops": {"*": 8.65e11}, "mem_bw": 3.58e10},
  "memory": {"available": "9.7GiB"}, "disk": {"seq_read": "3.17GB/s"},
  "gpu": {"backend": "cuda", "vram_available": "11GiB", "flops": {"*": 6.7e12}, "mem_bw": 4.31e11}},
 {"name": "mate40pro", "os": "android", "cpu": {"cores": 8, "flops": {"*": 8.6e10}, "mem_bw": 3.08e10},
  "memory": {"available": "1.9GiB"}, "disk": {"seq_read": "1.37GB/s"}},
 {"name": "honor-pad", "os": "android", "cpu": {"cores": 8, "flops": {"*": 9.1e10}, "mem_bw": 3.58e10},
  "memory": {"available": "5.1GiB"}, "disk": {"seq_read": "2.00GB/s"}},
 {"name": "mac-air", "os": "macos", "cpu": {"cores": 4, "flops": {"*": 2.24e11}, "mem_bw": 4.18e10},
  "memory": {"available": "6.8GiB"}, "disk": {"seq_read": "0.39GB/s", "rand_read": "0.39GB/s"}}
]
EOF
if "$LARES" plan --shape llama3-70b:q4_k_m -c 1024 --devices "$TMP/paper.json" --latency 3 \
    --bandwidth 300Mbit/s --json >"$TMP/70b.json" 2>"$TMP/70b.err"; then ok; else
  fail "70b: $(cat "$TMP/70b.err")"; fi
layers_once "$TMP/70b.json" 80 && ok || fail "70b: layers not covered exactly once"
# solve_ms guards against a solver gone exponential, not a speed claim: ASan builds on a
# loaded 2-core machine took 4 s
jq -e '.t_token_ms < 1348 and .solve_ms < 10000' "$TMP/70b.json" >/dev/null && ok \
  || fail "70b: $(jq -c '{t_token_ms, solve_ms}' "$TMP/70b.json")"

# real profiles (short measurements) as the devices
for n in a b; do
  "$LARES" profile --json --time 200 --name "dev-$n" --cache-dir "$TMP/cache" -m "$M" \
    >"$TMP/prof-$n.json" 2>"$TMP/prof.err" && ok || fail "profile $n: $(cat "$TMP/prof.err")"
done
jq -s '.' "$TMP/prof-a.json" "$TMP/prof-b.json" >"$TMP/profiles.json"
"$LARES" plan -m "$M" --devices "$TMP/profiles.json" --latency 1 --bandwidth 1Gbit/s --json \
  >"$TMP/prof-plan.json" 2>"$TMP/prof-plan.err" && layers_once "$TMP/prof-plan.json" 5 \
  && ok || fail "plan over profiles: $(cat "$TMP/prof-plan.err")"
# profiles carry no network figures: without --latency the hop cannot be priced
"$LARES" plan -m "$M" --devices "$TMP/profiles.json" >/dev/null 2>"$TMP/nonet.err"
[ $? -eq 1 ] && grep -q "no network figures for the hop" "$TMP/nonet.err" && ok \
  || fail "missing network: $(cat "$TMP/nonet.err")"

# bad device files: exit 1, the message names the place
bad() { # name json expected-substring
  printf '%s' "$2" >"$TMP/bad-$1.json"
  "$LARES" plan -m "$M" --devices "$TMP/bad-$1.json" >/dev/null 2>"$TMP/bad-$1.err"
  local rc=$?
  [ $rc -eq 1 ] && grep -qF -- "$3" "$TMP/bad-$1.err" && ok \
    || fail "bad $1: rc $rc, $(cat "$TMP/bad-$1.err")"
}
DEV='"os": "linux", "cpu": {"cores": 2, "flops": {"*": 1e10}, "mem_bw": 1e10}, "disk": {"seq_read": 1e9}'
bad negative "{\"name\": \"x\", $DEV, \"memory\": {\"available\": -5}}" \
  "device.memory.available: must be a non-negative size"
bad missing "{\"name\": \"x\", $DEV, \"memory\": {}}" "device.memory.available: missing (required)"
bad unknown "{\"name\": \"x\", $DEV, \"memory\": {\"available\": 1e9, \"avail\": 1}}" \
  "device.memory.avail: unknown field"
bad type "{\"name\": \"x\", $DEV, \"memory\": {\"available\": true}}" \
  "device.memory.available: must be a non-negative size"
bad syntax "{\"name\": \"x\"," "line 1"
bad tiny "{\"name\": \"x\", \"os\": \"linux\", \"cpu\": {\"cores\": 2, \"flops\": {\"*\": 1e10}, \"mem_bw\": 1e10}, \"memory\": {\"available\": \"1MiB\"}, \"disk\": {\"seq_read\": 1e9, \"free\": 1000}}" \
  "these devices cannot hold this model even from disk: need "
# bad command lines: exit 2
"$LARES" plan -m "$M" >/dev/null 2>&1; [ $? -eq 2 ] && ok || fail "no --devices"
"$LARES" plan --devices "$TMP/devices.json" >/dev/null 2>&1; [ $? -eq 2 ] && ok || fail "no model"
"$LARES" plan -m "$M" --devices "$TMP/devices.json" --latency 3 >/dev/null 2>&1
[ $? -eq 2 ] && ok || fail "latency without bandwidth"
"$LARES" plan -m "$M" --devices "$TMP/devices.json" --placement best >/dev/null 2>"$TMP/pl.err"
[ $? -eq 1 ] && grep -q "unknown placement 'best'" "$TMP/pl.err" && ok || fail "bad placement"
"$LARES" plan --shape llama3-9b:q4_k_m --devices "$TMP/devices.json" >/dev/null 2>"$TMP/sh.err"
[ $? -eq 1 ] && grep -q "unknown shape 'llama3-9b'" "$TMP/sh.err" && ok || fail "bad shape"
finish
