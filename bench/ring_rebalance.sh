#!/usr/bin/env bash
# Re-balancing under a slowdown (issue 9): an emulated 4-device ring on this
# machine (the head and three workers on loopback, each process in its own
# cgroup v1 with a CPU quota of QUOTA cores and one thread; ring.json's
# "memory" lets each device hold only CAP layers, as a home device that
# cannot take the whole model). Partway through a long generation, worker b's
# CPU quota is cut to a third (another app starts). The same run with
# --rebalance on and off; reported: tokens/s before the disturbance and after
# it (from TAIL tokens after the disturbance to the end), their ratio, and the
# cost of the switch (the plan change, with the KV re-run, as the head timed
# it, and the longest token gap).
#
#   sudo bench/ring_rebalance.sh [-m MODEL] [-n TOKENS] [--at SECONDS] [--quota 0.5]
#        [--cap 5] [-o RESULTS.md]
#
# MODEL defaults to a 12-layer llama-1b shape in Q4_0 (285 MiB; lares synth on
# first use in $LARES_BENCH_DIR, /tmp/lares-bench-ring). The issue's bar: the
# speed after the disturbance with re-balancing on is at least 1.25x the speed
# with it off, and the switch costs less than 5 s.
set -uo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
LARES=${LARES:-$here/build/lares}
MODEL=""
NTOK=240
AT=""
QUOTA=0.5
CAP=5
OUT=""
TAIL=30
while [ $# -gt 0 ]; do
  case $1 in
    -m) MODEL=$2; shift 2 ;;
    -n) NTOK=$2; shift 2 ;;
    --at) AT=$2; shift 2 ;;
    --quota) QUOTA=$2; shift 2 ;;
    --cap) CAP=$2; shift 2 ;;
    -o) OUT=$2; shift 2 ;;
    *) echo "usage: $0 [-m MODEL] [-n TOKENS] [--at S] [--quota C] [--cap LAYERS] [-o OUT]" >&2; exit 2 ;;
  esac
done
command -v jq >/dev/null || { echo "needs jq" >&2; exit 1; }
[ "$(id -u)" -eq 0 ] || { echo "needs root (cgroups)" >&2; exit 1; }
[ -d /sys/fs/cgroup/cpu ] || { echo "needs the cgroup v1 cpu controller" >&2; exit 1; }
[ -x "$LARES" ] || { echo "no lares binary at $LARES (set LARES)" >&2; exit 1; }
BENCH=${LARES_BENCH_DIR:-/tmp/lares-bench-ring}
mkdir -p "$BENCH"
if [ -z "$MODEL" ]; then
  MODEL=$BENCH/llama1b-12L-q4_0.gguf
  [ -f "$MODEL" ] || "$LARES" synth --preset llama-1b --type q4_0 --layers 12 -o "$MODEL" \
    --vocab-from "$here/../shared/models/stories260K.gguf" || exit 1
fi
TMP=$(mktemp -d /tmp/lares-rebalance.XXXXXX)
export LARES TMP
. "$here/tests/cluster/ring_lib.sh"
CG=lares-rebal-$$
PERIOD=10000 # 10 ms: a fine grain, so a throttled window is not lumpy
cleanup() {
  ring_cleanup
  for d in head a b c; do rmdir "/sys/fs/cgroup/cpu/$CG-$d" 2>/dev/null; done
  rm -rf "$TMP"
}
trap cleanup EXIT
quota() { # DEVICE CORES
  awk -v q="$2" -v p=$PERIOD 'BEGIN { printf "%d\n", q * p }' >"/sys/fs/cgroup/cpu/$CG-$1/cpu.cfs_quota_us"
}
for d in head a b c; do
  mkdir -p "/sys/fs/cgroup/cpu/$CG-$d" || exit 1
  echo $PERIOD >"/sys/fs/cgroup/cpu/$CG-$d/cpu.cfs_period_us"
  quota "$d" "$QUOTA"
done
# the launcher puts each process in its device's cgroup, then runs lares
cat >"$TMP/in_cg" <<EOF
#!/bin/sh
echo \$\$ > /sys/fs/cgroup/cpu/$CG-\$LARES_DEV/cgroup.procs || exit 1
exec "$LARES" "\$@"
EOF
chmod +x "$TMP/in_cg"

layers=${LAYERS:-12} # the default model's; set LAYERS for another
bytes=$(stat -c %s "$MODEL")
mem=$(awk -v b="$bytes" -v l="$layers" -v c="$CAP" 'BEGIN { printf "%.0f\n", b / l * (c + 0.5) }')
w=$((layers / 4))
export RING_MODEL=$MODEL RING_DEV_EXTRA=", \"memory\": $mem"
ring_key head || exit 1
for d in a b c; do
  export LARES_DEV=$d
  LARES="$TMP/in_cg" ring_worker $d -t 1 || exit 1
  printf -v "ADDR_$d" '%s' "$WORKER_ADDR"
  printf -v "PID_$d" '%s' "$WORKER_PID"
done
AA=$ADDR_a BB=$ADDR_b CC=$ADDR_c
ring_json "$TMP/ring.json" "" "$w" a "$AA" "$w" b "$BB" "$w" c "$CC" "$w"
sed -i "s|\"w\": $w}|\"w\": $w, \"memory\": $mem}|" "$TMP/ring.json" # the head's line
[ "$(grep -c '"memory"' "$TMP/ring.json")" = 4 ] || { echo "ring.json: memory not on every device" >&2; cat "$TMP/ring.json"; exit 1; }

run() { # on|off|kill: one generation, b cut to a third at $AT s (kill: c killed); sets the figures
  local mode=$1 t0 pid
  quota b "$QUOTA"
  t0=$(date +%s.%N)
  LARES_DEV=head "$TMP/in_cg" run -m "$MODEL" -p "Once upon a time" -n "$NTOK" --temp 0 -t 1 \
    -c 1024 --ring "$TMP/ring.json" --rebalance "${mode/kill/off}" --json -v >"$TMP/$mode.json" 2>"$TMP/$mode.err" &
  pid=$!
  sleep "$AT"
  local t_cut
  t_cut=$(echo "$(date +%s.%N) - $t0" | bc)
  if [ "$mode" = kill ]; then
    kill -KILL "$PID_c"
  else
    quota b "$(echo "$QUOTA / 3" | bc -l)"
  fi
  wait $pid || { echo "$mode: the head failed: $(tail -5 "$TMP/$mode.err")" >&2; exit 1; }
  echo "$t_cut" >"$TMP/$mode.cut"
}

# the disturbance lands at a third of an undisturbed run, unless --at says when
if [ -z "$AT" ]; then
  LARES_DEV=head "$TMP/in_cg" run -m "$MODEL" -p "Once upon a time" -n 40 --temp 0 -t 1 -c 1024 \
    --ring "$TMP/ring.json" --rebalance off --json >"$TMP/probe.json" 2>/dev/null || exit 1
  AT=$(jq -r --argjson n "$NTOK" '(.timings.load_ms + .timings.prompt_ms) / 1000 + .timings.gen_ms / 1000 / 40 * $n / 3' "$TMP/probe.json")
fi

figures() { # mode: prints "before after switch_ms max_gap replans text_md5"
  local mode=$1
  jq -r --argjson cut "$(cat "$TMP/$mode.cut")" --argjson tail "$TAIL" '
    .timings as $t
    | ($t.token_ms) as $g
    | (($cut * 1000 - $t.load_ms - $t.prompt_ms)) as $rel
    | ([foreach $g[] as $x (0; . + $x)]) as $cum
    | ([range(0; $g | length) | select($cum[.] < $rel)] | length) as $k
    | ($g[0:$k] | add) as $b_ms
    | ($g[($k + $tail):] ) as $after
    | [ ($k / ($b_ms / 1000)),
        (($after | length) / (($after | add) / 1000)),
        (.ring.switch_ms // 0),
        ($g | max),
        (.ring.replans),
        $k ] | @tsv' "$TMP/$mode.json"
}

run off
run on
run kill
read -r off_before off_after _ off_gap off_replans off_k < <(figures off)
read -r on_before on_after on_switch on_gap on_replans on_k < <(figures on)
same=no
[ "$(jq -c .generated_ids "$TMP/on.json")" = "$(jq -c .generated_ids "$TMP/off.json")" ] && same=yes
kill_same=no
[ "$(jq -c .generated_ids "$TMP/kill.json")" = "$(jq -c .generated_ids "$TMP/off.json")" ] && kill_same=yes
kill_n=$(jq '.generated_ids | length' "$TMP/kill.json")
kill_sw=$(jq '.ring.switch_ms' "$TMP/kill.json")
kill_re=$(jq '.ring.rebuilt_tokens' "$TMP/kill.json")
kill_gap=$(jq '.timings.token_ms | max' "$TMP/kill.json")
kill_line=$(grep -o 'warning: cluster: lost.*' "$TMP/kill.err" | head -1)
ratio=$(echo "$on_after / $off_after" | bc -l)
switch_lines=$(grep -o 'cluster: re-balance.*' "$TMP/on.err" | sed 's/^/    /')
{
  echo "### Re-balancing: one device's CPU cut to a third (\`bench/ring_rebalance.sh\`)"
  echo
  echo "Command: \`sudo bench/ring_rebalance.sh -n $NTOK --quota $QUOTA --cap $CAP\` on $(nproc) cores"
  echo "($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')), $(date -u +%Y-%m-%d)."
  echo "Model: $(basename "$MODEL") ($layers layers, $((bytes >> 20)) MiB); head + 3 workers on"
  echo "loopback, each its own process in a cgroup of $QUOTA core(s), 1 thread, \"memory\" for $CAP"
  echo "layers; windows $w | $w | $w | $w (k = 1); worker b cut to $QUOTA/3 core at ${AT%.*}-odd s"
  echo "(token $off_k of the run off, $on_k of the run on); \"after\" starts $TAIL tokens later."
  echo
  echo "| re-balancing | tok/s before | tok/s after | re-plans | switching, all re-plans (ms) | longest token gap (ms) |"
  echo "|---|---|---|---|---|---|"
  printf '| off | %.2f | %.2f | %s | - | %.0f |\n' "$off_before" "$off_after" "$off_replans" "$off_gap"
  printf '| on | %.2f | %.2f | %s | %.0f | %.0f |\n' "$on_before" "$on_after" "$on_replans" "$on_switch" "$on_gap"
  echo
  printf 'After the disturbance, on / off = **%.2fx** (bar: 1.25x); switching took %.0f ms in all (bar: 5 s).\n' \
    "$ratio" "$on_switch"
  echo "Greedy text identical between the two runs: $same. The head's log of the re-plans (-v):"
  echo
  echo "$switch_lines"
  echo
  echo "Failover: the same generation with worker c killed (SIGKILL) at the same moment instead:"
  printf '%s of %s tokens generated, text identical to the undisturbed greedy text: %s; the\n' "$kill_n" "$NTOK" "$kill_same"
  printf 'switch (re-running %s positions, "rebuild": "exact") took %.0f ms, the longest token gap %.0f ms.\n' \
    "$kill_re" "$kill_sw" "$kill_gap"
  echo "The head's warning: \`$kill_line\`"
} | tee "$TMP/result.md"
[ -n "$OUT" ] && cp "$TMP/result.md" "$OUT"
exit 0
