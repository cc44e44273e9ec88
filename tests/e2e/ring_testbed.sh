#!/usr/bin/env bash
# A ring over the emulated home cluster: three workers, each in its own
# network namespace (100/50/20 Mbit links) and cgroups (CPU quota, memory
# limit, disk throttle), the head in the host namespace in its own cgroups,
# link latency from ring.json. Greedy output must equal one device's, and
# everything the testbed made must be gone afterwards. Skips (77) without
# root, cgroup v1 or network namespaces.
. "$(dirname "$0")/lib.sh"
. "$LARES_SRC/tests/cluster/ring_lib.sh"
. "$LARES_SRC/tests/cluster/testbed.sh"
need jq
tb_check || exit 77
export TB_LARES=$LARES
tb_init || { fail "testbed: cannot make the bridge"; finish; }
tb_head 0.5 0 0 || fail "head cgroups"
tb_device 1 0.4 600M 0 100mbit || fail "device 1"
tb_device 2 0.3 400M 200M 50mbit || fail "device 2"
tb_device 3 0.3 400M 100M 20mbit || fail "device 3"
export RING_MODEL RING_DEV_EXTRA
RING_MODEL=$(model stories260K.gguf)
RING_DEV_EXTRA=', "link_delay_ms": 3'
for i in 1 2 3; do
  RING_LISTEN="$(tb_ip $i):0" LARES=$(tb_launcher $i) ring_worker "w$i" || { fail "worker $i did not start"; finish; }
  eval "A$i=\$WORKER_ADDR"
  [[ "$WORKER_ADDR" == "$(tb_ip $i)":* ]] && ok || fail "worker $i listens on $WORKER_ADDR, not in its namespace"
done
ring_json "$TMP/ring.json" '"heartbeat_ms": 200, "timeout_ms": 4000,' 1 w1 "$A1" 2 w2 "$A2" 1 w3 "$A3" 1
"$LARES" run -m "$RING_MODEL" -p "Once upon a time" -n 32 --temp 0 -t 1 --json >"$TMP/local.json" 2>"$TMP/local.err" \
  || fail "local run: $(cat "$TMP/local.err")"
"$(tb_launcher 0)" run -m "$RING_MODEL" -p "Once upon a time" -n 32 --temp 0 -t 1 --json --ring "$TMP/ring.json" --rebalance off \
  >"$TMP/ring.out" 2>"$TMP/ring.err" || fail "ring over the testbed: $(cat "$TMP/ring.err")"
[ "$(jq -c .generated_ids "$TMP/ring.out")" = "$(jq -c .generated_ids "$TMP/local.json")" ] && ok \
  || fail "ring over the testbed differs from one device"
# the workers really ran inside their cgroups
for i in 1 2 3; do
  pid=${RING_PIDS[$((i - 1))]}
  grep -q "$TB_CG-$i" "/proc/$pid/cgroup" && ok || fail "worker $i is not in its cgroup: $(cat /proc/$pid/cgroup)"
done
# everything goes away
ns_list="${TB_ID}n1 ${TB_ID}n2 ${TB_ID}n3"
cg="$TB_CG"
br="$TB_BR"
tb_cleanup
trap 'rm -rf "$TMP"' EXIT
mkdir -p "$TMP"
for n in $ns_list; do
  ip netns list | grep -qw "$n" && fail "namespace $n left behind" || ok
done
ip link show "$br" >/dev/null 2>&1 && fail "bridge $br left behind" || ok
ls -d /sys/fs/cgroup/cpu/"$cg"-* >/dev/null 2>&1 && fail "cgroups $cg-* left behind" || ok
finish
