#!/usr/bin/env bash
# The emulated 4-device testbed of issue 7: measured token latency of each
# placement (halda, even, memory, single) beside its prediction.
#
#   sudo bench/sched_testbed.sh [-m MODEL] [-n TOKENS] [-l RUN_LIMIT_S] [-k KEEP_DIR] [-o RESULTS.md]
#
# Four devices share this machine (../shared/docs/testbed.md): each is a set of
# cgroups (memory limit counting the page cache, CPU quota, disk read
# throttle) that its process joins before exec; a device's hop to the next
# gets the ring's emulated link delay. Each device profiles itself inside its
# cgroups (lares profile), `lares plan` plans every placement over those
# profiles, and each plan runs as a ring on loopback, cold (caches dropped),
# with the head inside device 0. The table printed at the end goes to
# docs/performance.md with the machine and the command.
#
# Status: first runs on the shared build machine are in docs/performance.md;
# the device figures below are a first guess at "different CPU quotas, memory
# limits, disk throttles, link speeds", not tuned on a quiet machine. A
# placement that overflows a device's memory can take minutes per token:
# -l bounds each run.
set -uo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
LARES=${LARES:-$here/build/lares}
MODEL=""
NTOK=16
OUT=""
LIMIT=600 # seconds one placement's run may take (a thrashing device can take hours)
KEEP=""
while [ $# -gt 0 ]; do
  case $1 in
    -m) MODEL=$2; shift 2 ;;
    -n) NTOK=$2; shift 2 ;;
    -o) OUT=$2; shift 2 ;;
    -l) LIMIT=$2; shift 2 ;;
    -k) KEEP=$2; shift 2 ;;
    *) echo "usage: $0 [-m MODEL] [-n TOKENS] [-l RUN_LIMIT_S] [-k KEEP_DIR] [-o RESULTS.md]" >&2
       exit 2 ;;
  esac
done

skip() { echo "sched_testbed: skipped: $*" >&2; exit 77; }
[ "$(id -u)" -eq 0 ] || skip "needs root (cgroups, drop_caches)"
for c in memory cpu blkio; do
  [ -d /sys/fs/cgroup/$c ] || skip "no cgroup v1 $c controller at /sys/fs/cgroup/$c"
done
command -v jq >/dev/null || skip "needs jq"
[ -x "$LARES" ] || { echo "no lares binary at $LARES (set LARES)" >&2; exit 1; }

TMP=$(mktemp -d "${TMPDIR:-/tmp}/sched-testbed.XXXXXX")
. "$here/tests/cluster/ring_lib.sh"
REAL_LARES=$LARES

# ---- the devices: name, CPU quota (cores), memory limit, disk read limit, link delay ----
# The quotas sum to 2 cores at most (the machine's), so devices do not fight for cores.
DEVS=(dev0 dev1 dev2 dev3)
QUOTA=(0.8 0.5 0.4 0.3)
MEM=(3000M 1800M 1200M 800M)
DISK=(0 400M 200M 100M) # bytes/s, 0: unthrottled
DELAY=(2 5 5 10)        # ms added to each device's sends (ring.json link_delay_ms)

CG=lares-testbed
stop_workers() { # SIGTERM, then SIGKILL: a worker inside a thrashing window may not listen
  local p
  for p in "${RING_PIDS[@]}"; do kill "$p" 2>/dev/null; done
  sleep 2
  for p in "${RING_PIDS[@]}"; do kill -9 "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
  RING_PIDS=()
}
cleanup() {
  stop_workers
  [ -n "$KEEP" ] && mkdir -p "$KEEP" && cp "$TMP"/*.json "$KEEP"/ 2>/dev/null
  for d in "${DEVS[@]}"; do
    for c in memory cpu blkio; do
      rmdir "/sys/fs/cgroup/$c/$CG-$d" 2>/dev/null
    done
  done
  rm -rf "$TMP"
}
trap cleanup EXIT

to_bytes() { numfmt --from=iec "$1"; }

if [ -z "$MODEL" ]; then
  MODEL=$TMP/llama-7b-q4_k_m.gguf
  echo "synthesizing $MODEL (llama-7b, q4_k_m)" >&2
  "$LARES" synth --preset llama-7b --type q4_k_m -o "$MODEL" \
    --vocab-from "$here/../shared/models/vocab/ggml-vocab-llama-spm.gguf" >&2 || exit 1
fi
majmin=$(lsblk -no MAJ:MIN "$(df --output=source "$MODEL" | tail -1)" 2>/dev/null | head -1 | tr -d ' ')

for i in "${!DEVS[@]}"; do
  d=${DEVS[$i]}
  for c in memory cpu blkio; do mkdir -p "/sys/fs/cgroup/$c/$CG-$d"; done
  to_bytes "${MEM[$i]}" >"/sys/fs/cgroup/memory/$CG-$d/memory.limit_in_bytes"
  echo 100000 >"/sys/fs/cgroup/cpu/$CG-$d/cpu.cfs_period_us"
  awk -v q="${QUOTA[$i]}" 'BEGIN { printf "%d\n", q * 100000 }' \
    >"/sys/fs/cgroup/cpu/$CG-$d/cpu.cfs_quota_us"
  if [ "${DISK[$i]}" != 0 ] && [ -n "$majmin" ]; then
    echo "$majmin $(to_bytes "${DISK[$i]}")" \
      >"/sys/fs/cgroup/blkio/$CG-$d/blkio.throttle.read_bps_device"
  fi
  # a launcher that joins the device's cgroups, then runs lares
  cat >"$TMP/in-$d" <<EOF
#!/bin/sh
for c in memory cpu blkio; do echo \$\$ > /sys/fs/cgroup/\$c/$CG-$d/cgroup.procs; done
exec "$REAL_LARES" "\$@"
EOF
  chmod +x "$TMP/in-$d"
done

cold() { sync; echo 3 >/proc/sys/vm/drop_caches; }

# ---- each device profiles itself inside its cgroups ----
for i in "${!DEVS[@]}"; do
  d=${DEVS[$i]}
  cold
  "$TMP/in-$d" profile --json --refresh --name "$d" -t 1 -m "$MODEL" --cache-dir "$TMP/cache" \
    >"$TMP/$d.profile.json" || exit 1
  jq --argjson ms "${DELAY[$i]}" --argjson head "$([ "$i" = 0 ] && echo true || echo false)" \
    '. + {head: $head, net: {latency_ms: $ms, bandwidth: "1GB/s"}}' \
    "$TMP/$d.profile.json" >"$TMP/$d.device.json"
done
jq -s '.' "$TMP"/dev?.device.json >"$TMP/devices.json"

REAL_LARES=$LARES
results=()
for P in halda memory single even; do
  "$LARES" plan -m "$MODEL" --devices "$TMP/devices.json" --placement $P -c 512 --json \
    >"$TMP/plan-$P.json" 2>"$TMP/plan-$P.err" || {
    results+=("| $P | - | - | $(cat "$TMP/plan-$P.err") |"); continue; }
  pred=$(jq .t_token_ms "$TMP/plan-$P.json")
  ring=($(jq -r '.devices[].name' "$TMP/plan-$P.json"))
  # fresh workers for each placement, each inside its device
  declare -A ADDR=()
  for d in "${ring[@]:1}"; do
    LARES="$TMP/in-$d" ring_worker "$d" || exit 1
    ADDR[$d]=$WORKER_ADDR
  done
  LARES=$REAL_LARES
  cold
  if [ ${#ring[@]} -eq 1 ]; then # one device: no ring, run inside it
    timeout -s KILL "$LIMIT" "$TMP/in-${ring[0]}" run -m "$MODEL" -p "Once upon a time" -n "$NTOK" --temp 0 -t 1 -c 512 \
      --json >"$TMP/run-$P.json" 2>"$TMP/run-$P.err"
  else
    [ "${ring[0]}" = dev0 ] || { results+=("| $P | $pred | - | head is not dev0 |"); continue; }
    export RING_MODEL=$MODEL
    args=()
    for d in "${ring[@]:1}"; do
      args+=("$d" "${ADDR[$d]}" "$(jq --arg d "$d" '.devices[] | select(.name == $d) | .w' "$TMP/plan-$P.json")")
    done
    ring_json "$TMP/ring-$P.json" "" "$(jq '.devices[0].w' "$TMP/plan-$P.json")" "${args[@]}"
    # the link delays of the devices file, per ring device
    for i in "${!DEVS[@]}"; do
      jq --arg d "${DEVS[$i]}" --argjson ms "${DELAY[$i]}" \
        '(.devices[] | select(.name == $d or (.name == "head" and $d == "dev0"))) += {link_delay_ms: $ms}' \
        "$TMP/ring-$P.json" >"$TMP/ring.tmp" && mv "$TMP/ring.tmp" "$TMP/ring-$P.json"
    done
    timeout -s KILL "$LIMIT" "$TMP/in-dev0" run -m "$MODEL" -p "Once upon a time" -n "$NTOK" --temp 0 -t 1 -c 512 \
      --ring "$TMP/ring-$P.json" --json >"$TMP/run-$P.json" 2>"$TMP/run-$P.err"
  fi
  stop_workers
  # per generated token: the mean gap between tokens (the first token's gap holds the prompt)
  meas=$(jq '.timings.token_ms | add / length' "$TMP/run-$P.json" 2>/dev/null)
  [ -n "$meas" ] || meas="no result in ${LIMIT} s $(tail -1 "$TMP/run-$P.err")"
  results+=("| $P | $pred | $meas | $(jq -c '[.devices[] | "\(.name):\(.layers)"]' "$TMP/plan-$P.json") |")
done

{
  echo "| placement | predicted ms/token | measured ms/token | ring |"
  echo "|---|---|---|---|"
  printf '%s\n' "${results[@]}"
} | tee "${OUT:-/dev/null}"
