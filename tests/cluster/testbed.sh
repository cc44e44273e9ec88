# The emulated home cluster on one Linux machine (../shared/docs/testbed.md):
# each device is a network namespace on a private bridge (link bandwidth by
# tc tbf on both ends of its veth) and a set of cgroup v1 groups (CPU quota,
# memory limit that counts the page cache, disk read throttle). Link latency
# comes from the ring's own emulation option (ring.json "link_delay_ms"),
# since this kernel has no netem.
#
#   . tests/cluster/testbed.sh     (needs root; after tests/e2e/lib.sh or with TMP and LARES set)
#   tb_check || exit 77            prints why it cannot run
#   tb_init                        the bridge; the head's address is $TB_HEAD_IP
#   tb_device I QUOTA MEM DISK RATE    device I (1..): cores (0.5), memory limit (800M, 0: none),
#                                  disk read bytes/s (100M, 0: none), link rate (100mbit, 0: none)
#   tb_head QUOTA MEM DISK         cgroups for the head (device 0, on the bridge in the host
#                                  namespace)
#   tb_launcher I                  path of a launcher that runs lares inside device I
#   tb_cleanup                     (installed on EXIT by tb_init) removes everything made here
#
# Every name carries this shell's pid, so runs side by side do not collide.

TB_ID=lt$(( $$ % 100000 ))
TB_BR=${TB_ID}br
TB_CG=lares-tb-$$
TB_DEVS=()
TB_SUB=""
TB_HEAD_IP=""

tb_check() {
  [ "$(id -u)" -eq 0 ] || { echo "testbed: needs root (namespaces, cgroups, tc)" >&2; return 1; }
  local c
  for c in cpu memory blkio; do
    [ -d /sys/fs/cgroup/$c ] || { echo "testbed: no cgroup v1 '$c' at /sys/fs/cgroup/$c" >&2; return 1; }
  done
  command -v ip >/dev/null && command -v tc >/dev/null || { echo "testbed: needs ip and tc (iproute2)" >&2; return 1; }
  ip netns add "${TB_ID}probe" 2>/dev/null || { echo "testbed: cannot make network namespaces" >&2; return 1; }
  ip netns del "${TB_ID}probe"
  ip link add "${TB_ID}pb" type bridge 2>/dev/null || { echo "testbed: cannot make a bridge" >&2; return 1; }
  ip link del "${TB_ID}pb"
}

tb_cleanup() {
  declare -F ring_cleanup >/dev/null && ring_cleanup
  local i c
  for i in "${TB_DEVS[@]}"; do
    ip netns del "${TB_ID}n$i" 2>/dev/null # takes its end of the veth, and so the pair
  done
  ip link del "$TB_BR" 2>/dev/null
  for c in cpu memory blkio; do
    for i in 0 "${TB_DEVS[@]}"; do
      [ -d "/sys/fs/cgroup/$c/$TB_CG-$i" ] && rmdir "/sys/fs/cgroup/$c/$TB_CG-$i" 2>/dev/null
    done
  done
  TB_DEVS=()
  [ -n "${TMP:-}" ] && rm -rf "$TMP"
}

# a private /24 that no route uses yet
tb_pick_subnet() {
  local a b
  for a in $(seq 201 250); do
    b=$(( ($$ + a) % 250 ))
    ip route | grep -q "^10\.$a\.$b\." || { TB_SUB=10.$a.$b; return 0; }
  done
  return 1
}

tb_init() {
  trap tb_cleanup EXIT
  tb_pick_subnet || { echo "testbed: no free 10.x.y.0/24" >&2; return 1; }
  ip link add "$TB_BR" type bridge && ip link set "$TB_BR" up &&
    ip addr add "$TB_SUB.1/24" dev "$TB_BR" || return 1
  TB_HEAD_IP=$TB_SUB.1
}

# cgroups of device I: cpu quota (cores), memory limit, disk read throttle
tb_cgroups() {
  local i=$1 quota=$2 mem=$3 disk=$4 c
  for c in cpu memory blkio; do mkdir -p "/sys/fs/cgroup/$c/$TB_CG-$i" || return 1; done
  echo 100000 >"/sys/fs/cgroup/cpu/$TB_CG-$i/cpu.cfs_period_us"
  awk -v q="$quota" 'BEGIN { printf "%d\n", q * 100000 }' >"/sys/fs/cgroup/cpu/$TB_CG-$i/cpu.cfs_quota_us" || return 1
  if [ "$mem" != 0 ]; then
    numfmt --from=iec "$mem" >"/sys/fs/cgroup/memory/$TB_CG-$i/memory.limit_in_bytes" || return 1
  fi
  if [ "$disk" != 0 ]; then
    local dev majmin
    dev=$(df --output=source "${TB_DISK_PATH:-$TMP}" | tail -1)
    majmin=$(lsblk -no MAJ:MIN "$dev" 2>/dev/null | head -1 | tr -d ' ')
    [ -n "$majmin" ] && echo "$majmin $(numfmt --from=iec "$disk")" \
      >"/sys/fs/cgroup/blkio/$TB_CG-$i/blkio.throttle.read_bps_device"
  fi
  return 0
}

tb_device() {
  local i=$1 quota=$2 mem=$3 disk=$4 rate=$5
  local ns=${TB_ID}n$i host=${TB_ID}h$i peer=${TB_ID}p$i
  TB_DEVS+=("$i")
  ip netns add "$ns" &&
    ip link add "$host" type veth peer name "$peer" &&
    ip link set "$peer" netns "$ns" &&
    ip link set "$host" master "$TB_BR" up &&
    ip netns exec "$ns" ip addr add "$TB_SUB.$((10 + i))/24" dev "$peer" &&
    ip netns exec "$ns" ip link set "$peer" up &&
    ip netns exec "$ns" ip link set lo up || return 1
  if [ "$rate" != 0 ]; then # both directions: into the device, and out of it
    tc qdisc add dev "$host" root tbf rate "$rate" burst 32kbit latency 50ms &&
      ip netns exec "$ns" tc qdisc add dev "$peer" root tbf rate "$rate" burst 32kbit latency 50ms || return 1
  fi
  tb_cgroups "$i" "$quota" "$mem" "$disk" || return 1
  # nsenter, not `ip netns exec`: that one also gives the program a mount
  # namespace with a fresh /sys, where no cgroup is mounted, so a device
  # could not read its own memory limit (and never streamed)
  cat >"$TMP/tb-in-$i" <<EOS
#!/bin/sh
for c in cpu memory blkio; do echo \$\$ > /sys/fs/cgroup/\$c/$TB_CG-$i/cgroup.procs || exit 1; done
exec nsenter --net=/run/netns/$ns "${TB_LARES:-$LARES}" "\$@"
EOS
  chmod +x "$TMP/tb-in-$i"
}

tb_head() {
  tb_cgroups 0 "$1" "$2" "$3" || return 1
  cat >"$TMP/tb-in-0" <<EOS
#!/bin/sh
for c in cpu memory blkio; do echo \$\$ > /sys/fs/cgroup/\$c/$TB_CG-0/cgroup.procs || exit 1; done
exec "${TB_LARES:-$LARES}" "\$@"
EOS
  chmod +x "$TMP/tb-in-0"
}

# The four-device home of the ring benchmarks: options --quota C, --mem M,
# --disk B/s, --rate R, --delay MS into QUOTA, MEM, DISK, RATE, DELAY (the
# caller's defaults; unset: 0.5, 700M, 300M, 100mbit, 5). tb_home_opt NAME
# VALUE sets one and fails for other names; tb_home_up makes the head
# (device 0) and three devices with them.
tb_home_opt() {
  case $1 in
    --quota) QUOTA=$2 ;;
    --mem) MEM=$2 ;;
    --disk) DISK=$2 ;;
    --rate) RATE=$2 ;;
    --delay) DELAY=$2 ;;
    *) return 1 ;;
  esac
}

tb_home_up() {
  : "${QUOTA:=0.5}" "${MEM:=700M}" "${DISK:=300M}" "${RATE:=100mbit}" "${DELAY:=5}"
  tb_head "$QUOTA" "$MEM" "$DISK" || return 1
  local i
  for i in 1 2 3; do
    tb_device "$i" "$QUOTA" "$MEM" "$DISK" "$RATE" || return 1
  done
}

tb_launcher() {
  echo "$TMP/tb-in-$1"
}

tb_ip() {
  echo "$TB_SUB.$((10 + $1))"
}

# tb_layers MODEL: the model's layer count (its GGUF header's *.block_count)
tb_layers() {
  python3 - "$1" <<'EOF'
import struct, sys
f = open(sys.argv[1], "rb")
magic, ver, n_t, n_kv = struct.unpack("<IIQQ", f.read(24))
def s():
    (n,) = struct.unpack("<Q", f.read(8)); return f.read(n).decode()
size = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
def val(t):
    if t == 8: return s()
    if t == 9:
        (et, n) = struct.unpack("<IQ", f.read(12)); return [val(et) for _ in range(n)]
    return int.from_bytes(f.read(size[t]), "little")
for _ in range(n_kv):
    k = s(); (t,) = struct.unpack("<I", f.read(4)); v = val(t)
    if k.endswith(".block_count"): print(v); break
EOF
}

# tb_bench_model LARES ROOT [--copy]: the benchmarks' default model, llama-7b
# Q4_K_M in $LARES_BENCH_DIR (/tmp/lares-bench), made by lares synth on first
# use (with --copy: its copying variant, lares synth --copy); its path
tb_bench_model() {
  local dir=${LARES_BENCH_DIR:-/tmp/lares-bench} m
  mkdir -p "$dir" || return 1
  m=$dir/llama-7b-q4_k_m${3:+-copy}.gguf
  [ -f "$m" ] || "$1" synth --preset llama-7b --type q4_k_m ${3:+--copy} -o "$m" \
    --vocab-from "$2/../shared/models/vocab/ggml-vocab-llama-spm.gguf" >&2 || return 1
  readlink -f "$m"
}
