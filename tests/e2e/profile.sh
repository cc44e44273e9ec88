#!/usr/bin/env bash
# lares profile: a short measurement (--time) parsed with jq, the calibration
# on real windows of the model (-m; --no-calibrate keeps the micro-benchmarks),
# the cache (the second call answers from it, --refresh measures again; the
# kernel family and the model are part of its key), the human summary, and
# bad options.
. "$(dirname "$0")/lib.sh"
need jq
M=$(model stories260K.gguf)
export XDG_CACHE_HOME="$TMP/xdg"

start=$(date +%s)
"$LARES" profile --json --time 250 -m "$M" >"$TMP/p1.json" 2>"$TMP/p1.err" && ok \
  || fail "profile: $(cat "$TMP/p1.err")"
jq -e '.name != "" and (.os | IN("linux", "android", "macos")) and .cpu.cores >= 1
    and .cpu.mem_bw > 0 and .cpu.flops.q4_k > 0 and .cpu.flops.q8_0 > 0
    and .cpu.flops_mem.q4_k > 0 and .memory.available > 0
    and .memory.available <= .memory.total and .disk.seq_read > 0 and .disk.rand_read > 0
    and (.fingerprint | test("^[0-9a-f]{16}$")) and .cached == false' "$TMP/p1.json" >/dev/null \
  && ok || fail "profile fields: $(jq -c '{cpu, memory, disk}' "$TMP/p1.json")"
# the disk's direct-read bound, or a note saying why there is none (issue 16)
jq -e '(.disk.direct_read > 0) or (.disk.note | test("direct reads"))' "$TMP/p1.json" >/dev/null \
  && ok || fail "direct reads: $(jq -c .disk "$TMP/p1.json")"
# a profile made before the bound (no direct_read, cached_share, note) still plans
jq 'del(.disk.direct_read, .disk.cached_share, .disk.note)' "$TMP/p1.json" >"$TMP/old.json" \
  && "$LARES" plan -m "$M" --devices "$TMP/old.json" --json >"$TMP/old-plan.json" 2>"$TMP/old.err" \
  && jq -e '.devices | length == 1' "$TMP/old-plan.json" >/dev/null \
  && ok || fail "an old profile as a device: $(cat "$TMP/old.err")"
# calibrated on the model's windows: full-speed times per layer, the factor the
# micro-benchmark rates were divided by, and the CPU flags it was made with
jq -e '.calibration.model != "" and .calibration.model_bytes > 0 and .calibration.scale > 0
    and .calibration.decode_layer_ms > 0 and .calibration.prompt_row_layer_ms > 0
    and .calibration.prompt_rows > 1 and (.cpu.flags | length > 0)' "$TMP/p1.json" >/dev/null \
  && ok || fail "calibration: $(jq -c '{calibration, flags: .cpu.flags}' "$TMP/p1.json")"
"$LARES" profile --json --time 250 -m "$M" --no-calibrate >"$TMP/nc.json" 2>"$TMP/nc.err" \
  && jq -e --arg fp "$(jq -r .fingerprint "$TMP/p1.json")" \
    '(has("calibration") | not) and .fingerprint != $fp' "$TMP/nc.json" >/dev/null \
  && ok || fail "--no-calibrate: $(cat "$TMP/nc.err") $(jq -c '{calibration, fingerprint}' "$TMP/nc.json")"
# another kernel family is another profile (measured, under its own key)
"$LARES" profile --json --time 250 -m "$M" --isa scalar >"$TMP/sc.json" 2>"$TMP/sc.err" \
  && jq -e --arg fp "$(jq -r .fingerprint "$TMP/p1.json")" \
    '.cpu.isa == "scalar" and .cached == false and .fingerprint != $fp and .calibration.scale > 0' \
    "$TMP/sc.json" >/dev/null && ok || fail "--isa scalar: $(cat "$TMP/sc.err")"
"$LARES" profile --json --time 250 --isa z80 >/dev/null 2>"$TMP/isa.err"
[ $? -eq 1 ] && grep -q "z80" "$TMP/isa.err" && ok || fail "--isa z80: $(cat "$TMP/isa.err")"
# cached per fingerprint under $XDG_CACHE_HOME/lares
fp=$(jq -r .fingerprint "$TMP/p1.json")
[ -f "$XDG_CACHE_HOME/lares/profile-$fp.json" ] && ok || fail "no cache file for $fp"
"$LARES" profile --json --time 250 -m "$M" >"$TMP/p2.json" && ok || fail "second profile"
jq -e '.cached == true' "$TMP/p2.json" >/dev/null && ok || fail "second call not cached"
[ "$(jq -c .cpu.flops "$TMP/p1.json")" = "$(jq -c .cpu.flops "$TMP/p2.json")" ] && ok \
  || fail "cached figures differ"
"$LARES" profile --json --time 250 -m "$M" --refresh >"$TMP/p3.json" \
  && jq -e '.cached == false' "$TMP/p3.json" >/dev/null && ok || fail "--refresh"
# a cached profile older than 7 days is measured again (issue 15)
touch -d "8 days ago" "$XDG_CACHE_HOME/lares/profile-$fp.json"
"$LARES" profile --json --time 250 -m "$M" >"$TMP/p5.json" \
  && jq -e '.cached == false' "$TMP/p5.json" >/dev/null && ok || fail "a cache 8 days old was used"
"$LARES" profile --json --time 250 --no-cache --name box >"$TMP/p4.json" \
  && jq -e '.cached == false and .name == "box" and .disk.free > 0' "$TMP/p4.json" >/dev/null \
  && ok || fail "--no-cache"
elapsed=$(($(date +%s) - start))
# six short profiles: seconds, not minutes (a loose bound for a shared machine)
[ "$elapsed" -lt 90 ] && ok || fail "six 250 ms profiles took ${elapsed} s"

"$LARES" profile --time 250 -m "$M" >"$TMP/human.txt" 2>&1 \
  && grep -q "^memory " "$TMP/human.txt" && grep -q "^disk " "$TMP/human.txt" \
  && grep -q "q4_k" "$TMP/human.txt" && grep -q "^calibrated " "$TMP/human.txt" && ok || fail "human output: $(cat "$TMP/human.txt")"

"$LARES" profile --time 5 >/dev/null 2>&1; [ $? -eq 2 ] && ok || fail "--time 5 accepted"
"$LARES" profile --frobnicate >/dev/null 2>&1; [ $? -eq 2 ] && ok || fail "unknown option"
"$LARES" profile --time 250 -m "$TMP/none.gguf" >/dev/null 2>"$TMP/none.err"
[ $? -eq 1 ] && grep -q "none.gguf" "$TMP/none.err" && ok || fail "missing model file"
finish
