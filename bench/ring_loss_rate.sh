#!/usr/bin/env bash
# The ring's speed after a loss (issue 15): the emulated four-device home of
# bench/ring_emulated.sh (the head and three workers, each in its own network
# namespace and cgroups: CPU quota, memory limit, disk read throttle, a link of
# limited rate plus latency), an even split of a llama-7b Q4_K_M, failover on,
# a greedy generation of N tokens in which worker w2 is killed (SIGKILL) once
# it has run token AT. From the head's per-token times (`--json`
# timings.token_ms): the four-device rate (the median token before the loss,
# the first token left out), the three-device rate (the median token from the
# third after the loss on: the loss's own token, with detection, re-plan and
# re-run, is the stall bench/ring_failover_stall.sh measures), and their ratio.
# The issue's bar: after losing one, at least 0.6x the four-device rate.
#
#   sudo bench/ring_loss_rate.sh [-m MODEL] [-n TOKENS] [--at AT] [--mem "700M 1400M"]
#        [--quota 0.5] [--disk 300M] [--rate 100mbit] [--delay 5] [-o RESULTS.md]
#
# Each memory limit in --mem is one run (the devices alike); caches are
# dropped before each. MODEL defaults to llama-7b Q4_K_M (lares synth on
# first use in $LARES_BENCH_DIR, /tmp/lares-bench).
set -uo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
LARES=${LARES:-$here/build/lares}
MODEL=""
NTOK=24
AT=8
MEMS="700M 1400M"
QUOTA=0.5
DISK=300M
RATE=100mbit
DELAY=5
OUT=""
while [ $# -gt 0 ]; do
  case $1 in
    -m) MODEL=$2; shift 2 ;;
    -n) NTOK=$2; shift 2 ;;
    --at) AT=$2; shift 2 ;;
    --mem) MEMS=$2; shift 2 ;;
    --quota) QUOTA=$2; shift 2 ;;
    --disk) DISK=$2; shift 2 ;;
    --rate) RATE=$2; shift 2 ;;
    --delay) DELAY=$2; shift 2 ;;
    -o) OUT=$2; shift 2 ;;
    *) echo "usage: $0 [-m MODEL] [-n TOKENS] [--at AT] [--mem \"700M 1400M\"] [--quota C] [--disk B/s] [--rate R] [--delay MS] [-o OUT]" >&2; exit 2 ;;
  esac
done
command -v jq >/dev/null || { echo "needs jq" >&2; exit 1; }
[ -x "$LARES" ] || { echo "no lares binary at $LARES (set LARES)" >&2; exit 1; }
[ "$NTOK" -ge $((AT + 8)) ] || { echo "-n must leave at least 8 tokens after --at" >&2; exit 2; }
. "$here/tests/cluster/testbed.sh"
if [ -z "$MODEL" ]; then
  MODEL=$(tb_bench_model "$LARES" "$here") || exit 1
fi
MODEL=$(readlink -f "$MODEL")
TMP=$(mktemp -d "${TMPDIR:-/tmp}/ring-loss.XXXXXX")
. "$here/tests/cluster/ring_lib.sh"
tb_check || exit 77
export TB_LARES=$LARES TB_DISK_PATH=$MODEL
L=$(tb_layers "$MODEL")
[ -n "$L" ] || { echo "cannot read the layer count of $MODEL" >&2; exit 1; }
w=$((L / 4))
w0=$((L - 3 * w))
echo "model $MODEL ($L layers, windows $w0 | $w | $w | $w); devices: $QUOTA cores, disk $DISK/s, link $RATE + $DELAY ms; $NTOK tokens, w2 killed after token $AT" >&2
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg); CPU:$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-)" >&2
cold() { sync; echo 3 >/proc/sys/vm/drop_caches; }
rows=()
export RING_MODEL=$MODEL RING_DEV_EXTRA=", \"link_delay_ms\": $DELAY"
first=${MEMS%% *}
tb_init || exit 1
tb_head "$QUOTA" "$first" "$DISK" || exit 1
for i in 1 2 3; do
  tb_device "$i" "$QUOTA" "$first" "$DISK" "$RATE" || exit 1
done
for mem in $MEMS; do
  for i in 0 1 2 3; do # this run's memory limit
    tb_cgroups "$i" "$QUOTA" "$mem" "$DISK" || exit 1
  done
  declare -A ADDR=() PID=()
  for i in 1 2 3; do
    RING_LISTEN="$(tb_ip $i):0" LARES=$(tb_launcher $i) ring_worker "w$i" -t 1 || exit 1
    ADDR[$i]=$WORKER_ADDR
    PID[$i]=$WORKER_PID
  done
  ring_json "$TMP/ring.json" "\"heartbeat_ms\": 500, \"timeout_ms\": 3000, \"connect_timeout_ms\": 60000, \"failover\": true," \
    "$w0" w1 "${ADDR[1]}" "$w" w2 "${ADDR[2]}" "$w" w3 "${ADDR[3]}" "$w"
  cold
  "$(tb_launcher 0)" run -m "$MODEL" -p "Once upon a time" -n "$NTOK" --temp 0 -t 1 -c 256 -v \
    --rebalance off --ring "$TMP/ring.json" --json >"$TMP/run.json" 2>"$TMP/run.err" &
  hp=$!
  # w2's pid is the launcher's: the lares it execs keeps it. One window a
  # token (k = 1): its AT-th one-token round is the AT-th generated token.
  for i in $(seq 1 360000); do
    [ "$(grep -c " 1 token at " "$TMP/w2.log" 2>/dev/null)" -ge "$AT" ] && break
    kill -0 $hp 2>/dev/null || break
    sleep 0.01
  done
  kill -9 "${PID[2]}" 2>/dev/null
  if ! wait $hp; then
    rows+=("| $mem | failed: $(tail -1 "$TMP/run.err") | | | | |")
    ring_cleanup
    continue
  fi
  n=$(jq '.timings.token_ms | length' "$TMP/run.json")
  # the loss's token: the longest after the kill
  loss=$(jq --argjson at "$AT" '.timings.token_ms | to_entries | map(select(.key >= $at)) | max_by(.value) | .key' "$TMP/run.json")
  t4=$(jq --argjson at "$AT" '.timings.token_ms[1:$at] | sort | .[length/2|floor]' "$TMP/run.json")
  t3=$(jq --argjson l "$loss" '.timings.token_ms[$l+3:] | sort | .[length/2|floor]' "$TMP/run.json")
  stall=$(jq --argjson l "$loss" '.timings.token_ms[$l]' "$TMP/run.json")
  plan=$(grep -o 'plan [^;]* -> [^;]*' "$TMP/run.err" | head -1)
  ratio=$(echo "scale=3; $t4 / $t3" | bc)
  rows+=("| $mem | $(printf %.0f "$t4") | $(printf %.0f "$t3") | **$(printf %.2f "$ratio")x** | $(printf %.0f "$stall") (token $loss of $n) | ${plan:-no failover logged} |")
  echo "${rows[-1]}" >&2
  [ -n "${KEEP_LOGS:-}" ] && cp "$TMP/run.err" "$KEEP_LOGS.$mem.err" && cp "$TMP/run.json" "$KEEP_LOGS.$mem.json"
  ring_cleanup
done
{
  echo "Model: $(basename "$MODEL") ($L layers), windows $w0 | $w | $w | $w, w2 killed after token $AT of $NTOK; each device $QUOTA cores, disk $DISK/s, link $RATE + $DELAY ms; load average $(cut -d' ' -f1-3 /proc/loadavg)"
  echo
  echo "| memory per device | ms/token, four devices (median) | ms/token after the loss (median) | after / before (tok/s) | the loss's token (ms) | plan change |"
  echo "|---|---|---|---|---|---|"
  printf '%s\n' "${rows[@]}"
} | tee ${OUT:+"$OUT"}
