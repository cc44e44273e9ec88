#!/usr/bin/env bash
# bench/mem_stream.sh: models larger than memory (issue 5). lares and the
# reference engine (llama.cpp's llama-completion: memory-mapped weights, no
# repacking) generate from the same file inside memory cgroups that count the
# page cache (v1 memory.limit_in_bytes, v2 memory.max), each run from a cold
# page cache (sync; drop_caches), alternating engines. Prints one line per run
# and a markdown table of medians, with the disk bound: the bytes that must be
# re-read per token (file bytes minus what fits in the limit next to the KV
# cache and buffers lares reports) over the measured sequential read speed
#
# (dd, 4 MiB blocks, cold; and with iflag=direct: the bound takes the faster).
#
# usage: sudo bench/mem_stream.sh [-m MODEL] [-l "none 3.0G 2.0G"] [-n TOKENS] [-r REPS]
#                                 [-e "lares ref"] [-c CTX] [-t REF_THREADS] [-T LARES_THREADS]
#                                 [-P PROMPT_TOKENS] [-- LARES_ARGS...]
# -P N: a prompt of about N tokens (a sentence repeated; each engine's own
# count is printed) and a second table of prompt speeds, as pp128 is judged.
# engines: lares (its default way of streaming), lares-mmap and lares-direct
# (lares --stream-io mmap / direct), lares-guess-auto, -on and -off (MoE: lares
# --expert-guess auto / on / off), ref.
# lares picks its thread count unless -T is given (streaming through the page
# cache it leaves a core to its prefetch thread; reading directly it computes
# on every core); the reference engine runs with -t (default 2).
# env: LARES (default build/lares); LLAMA_CPP_BUILD, the reference engine's build
#      directory (bin/llama-completion; or REF, the binary itself), needed when
#      the engines include ref; BENCH_MODELS (where the synthesized llama-7b
#      Q4_K_M is kept, default bench-models/)
set -uo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
LARES=${LARES:-$here/build/lares}
REF=${REF:-${LLAMA_CPP_BUILD:+$LLAMA_CPP_BUILD/bin/llama-completion}}
BENCH_MODELS=${BENCH_MODELS:-bench-models}
MODEL=""
LIMITS="none 3.0G 2.0G"
N=16
REPS=1
ENGINES="lares ref"
CTX=512
THREADS=2        # the reference engine's; lares chooses its own unless -T is given
LTHREADS=""
PROMPT="Once upon a time"
PP=""
while [ $# -gt 0 ]; do
  case $1 in
    -m) MODEL=$2; shift 2 ;;
    -l) LIMITS=$2; shift 2 ;;
    -n) N=$2; shift 2 ;;
    -r) REPS=$2; shift 2 ;;
    -e) ENGINES=$2; shift 2 ;;
    -c) CTX=$2; shift 2 ;;
    -t) THREADS=$2; shift 2 ;;
    -T) LTHREADS=$2; shift 2 ;;
    -P) PP=$2; shift 2 ;;
    --) shift; break ;;
    *) echo "usage: $0 [-m MODEL] [-l LIMITS] [-n N] [-r REPS] [-e ENGINES] [-c CTX] [-t T] [-T T] [-P TOKENS] [-- LARES_ARGS]" >&2; exit 2 ;;
  esac
done
EXTRA=("$@")
SHOWN="'$PROMPT'"
if [ -n "$PP" ]; then # 10 tokens a sentence with the llama vocabularies
  PROMPT=$(for _ in $(seq 1 $(( (PP + 9) / 10 ))); do printf ' Once upon a time there was a little girl.'; done)
  PROMPT=${PROMPT# }
  SHOWN="'Once upon a time there was a little girl.' x $(( (PP + 9) / 10 ))"
fi
[ -n "$LTHREADS" ] && EXTRA=(-t "$LTHREADS" "${EXTRA[@]}")
[ "$(id -u)" -eq 0 ] || { echo "needs root (cgroups, drop_caches)" >&2; exit 1; }
command -v jq >/dev/null || { echo "needs jq" >&2; exit 1; }
case " $ENGINES " in
  *" ref "*)
    [ -n "$REF" ] || { echo "set LLAMA_CPP_BUILD to the reference engine's build directory (the one with bin/llama-completion), or REF to the binary" >&2; exit 1; }
    [ -x "$REF" ] || { echo "reference engine not found at $REF (LLAMA_CPP_BUILD / REF)" >&2; exit 1; } ;;
esac
if [ -z "$MODEL" ]; then
  MODEL=$BENCH_MODELS/llama-7b-q4_k_m.gguf
  if [ ! -f "$MODEL" ]; then
    mkdir -p "$BENCH_MODELS"
    "$LARES" synth --preset llama-7b --type q4_k_m -o "$MODEL" \
      --vocab-from "$here/../shared/models/vocab/ggml-vocab-llama-spm.gguf" || exit 1
  fi
elif [ ! -f "$MODEL" ] && [ -f "$BENCH_MODELS/$MODEL" ]; then
  MODEL=$BENCH_MODELS/$MODEL # -m NAME: a file of BENCH_MODELS
fi
[ -f "$MODEL" ] || { echo "no model file $MODEL (-m takes a path, or a name in BENCH_MODELS=$BENCH_MODELS)" >&2; exit 1; }

# our memory cgroup hierarchy: v1's memory controller, else v2
rel=$(awk -F: '$2 ~ /(^|,)memory(,|$)/ {print $3}' /proc/self/cgroup)
if [ -n "$rel" ] && [ -d /sys/fs/cgroup/memory ]; then
  CG_PARENT=/sys/fs/cgroup/memory${rel%/}
  LIMIT_FILE=memory.limit_in_bytes
  PEAK_FILE=memory.max_usage_in_bytes
else
  rel=$(awk -F: '$1 == "0" {print $3}' /proc/self/cgroup)
  CG_PARENT=/sys/fs/cgroup${rel%/}
  LIMIT_FILE=memory.max
  PEAK_FILE=memory.peak
fi
CG=""
cleanup() {
  if [ -n "$CG" ] && [ -d "$CG" ]; then
    while read -r p; do echo "$p" >"$CG_PARENT/cgroup.procs" 2>/dev/null; done <"$CG/cgroup.procs"
    rmdir "$CG"
  fi
  rm -f "$OUT" "$ERR"
}
OUT=$(mktemp)
ERR=$(mktemp)
trap cleanup EXIT

bytes_of() { # 3.0G -> 3000000000 (decimal: the issue's "GB")
  awk -v s="$1" 'BEGIN { n = s + 0; u = substr(s, length(s));
    if (u == "G") n *= 1e9; else if (u == "M") n *= 1e6; printf "%.0f", n }'
}

cold() {
  sync
  echo 3 >/proc/sys/vm/drop_caches
}

# runs "$@" inside a fresh cgroup with the limit (none: no cgroup)
in_limit() { # limit cmd...
  local limit=$1
  shift
  if [ "$limit" = none ]; then
    "$@"
    return
  fi
  CG="$CG_PARENT/lares-bench-$$"
  mkdir "$CG" && bytes_of "$limit" >"$CG/$LIMIT_FILE" || return 1
  sh -c 'echo $$ > "$1/cgroup.procs" && shift && exec "$@"' sh "$CG" "$@"
  local rc=$?
  PEAK=$(cat "$CG/$PEAK_FILE" 2>/dev/null || echo 0)
  rmdir "$CG"
  CG=""
  return $rc
}

median() { sort -g | awk '{ a[NR] = $1 } END { if (NR == 0) print "nan"; else if (NR % 2) print a[(NR + 1) / 2]; else print (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }

cold
seq_gbs=$(dd if="$MODEL" of=/dev/null bs=4M 2>&1 | awk '/copied/ { for (i = 1; i <= NF; i++) if ($i ~ /^[0-9.]+$/ && $(i+1) ~ /^s,/) s = $i; b = $1 } END { printf "%.2f", b / s / 1e9 }')
cold
direct_gbs=$(dd if="$MODEL" of=/dev/null bs=4M iflag=direct 2>&1 | awk '/copied/ { for (i = 1; i <= NF; i++) if ($i ~ /^[0-9.]+$/ && $(i+1) ~ /^s,/) s = $i; b = $1 } END { if (s > 0) printf "%.2f", b / s / 1e9; else print 0 }')
size=$(stat -c %s "$MODEL")
# the fastest way this machine reads the file cold: the kernel's own read-ahead
# through MADV_POPULATE_READ (bench_mem_read, if built: ninja bench_mem_read)
MEMREAD=${MEMREAD:-$(dirname "$LARES")/bench/bench_mem_read}
pop_gbs=""
dio_gbs=""
if [ -x "$MEMREAD" ]; then
  pop_gbs=$("$MEMREAD" "$MODEL" --unit 128M --release --repeat 1 --method populate | awk '$1 == "populate" { print $2 }')
  cold
  dio_gbs=$("$MEMREAD" "$MODEL" --unit 128M --repeat 1 --method direct-io_uring | awk '$1 == "direct-io_uring" { print $2 }')
fi
# the bound takes the fastest of these reads
best_gbs=$(printf '%s\n' "$seq_gbs" "$direct_gbs" "${pop_gbs:-0}" "${dio_gbs:-0}" | sort -g | tail -1)
echo "# $(date -u +%FT%TZ) $(uname -r), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# model $MODEL ($size bytes), sequential cold read $seq_gbs GB/s (dd bs=4M), $direct_gbs GB/s (dd bs=4M iflag=direct), ${pop_gbs:-?} GB/s (populate, 128 MiB units), ${dio_gbs:-?} GB/s (direct reads, io_uring, 128 MiB units)"
echo "# lares: $LARES run -m MODEL -p $SHOWN -n $N --temp 0 -c $CTX --json ${EXTRA[*]}"
echo "# ref:   $REF -m MODEL -p $SHOWN -n $N --temp 0 -t $THREADS -c $CTX --no-repack --no-warmup -no-cnv"
declare -A RES
for limit in $LIMITS; do
  for rep in $(seq 1 "$REPS"); do
    for engine in $ENGINES; do
      cold
      PEAK=0
      if [ "${engine%%-*}" = lares ]; then
        IO=()
        case $engine in
          lares) ;;
          lares-guess-*) IO=(--expert-guess "${engine#lares-guess-}") ;;
          *) IO=(--stream-io "${engine#lares-}") ;;
        esac
        in_limit "$limit" "$LARES" run -m "$MODEL" -p "$PROMPT" -n "$N" --temp 0 -c "$CTX" \
          --json "${IO[@]}" "${EXTRA[@]}" >"$OUT" 2>"$ERR"
        rc=$?
        if [ $rc -ne 0 ]; then
          echo "$limit lares rep $rep: failed (rc $rc): $(tail -2 "$ERR")"
          continue
        fi
        tps=$(jq .timings.gen_tok_s "$OUT")
        pps=$(jq .timings.prompt_tok_s "$OUT")
        ppn=$(jq .timings.prompt_tokens "$OUT")
        line=$(jq -r '"\(.memory.stream_io) stream \(.memory.stream_bytes / 1e9 * 100 | floor / 100) GB/token, pinned \(.memory.pinned_bytes / 1e9 * 100 | floor / 100) GB, wait \(.timings.gen_wait_ms / ((.timings.token_ms | length) + 0.001) | floor) ms/token of \(.timings.gen_ms / ((.timings.token_ms | length) + 0.001) | floor), token max/median \((.timings.token_ms | max) / ((.timings.token_ms | sort | .[length / 2 | floor]) + 0.001) * 100 | floor / 100), disk read \(.memory.disk_read_bytes / 1e9 * 10 | floor / 10) GB, peak RSS \(.memory.peak_rss_bytes / 1e6 | floor) MB"' "$OUT")
        line="$line$(jq -r 'if .memory.expert_misses == null then "" else " | experts: \(.memory.expert_misses) read on demand, \(.memory.expert_guesses_made) guesses made (\(.memory.expert_guesses_picked) picked), \(.memory.expert_guesses) read ahead (\(.memory.expert_guess_hits) used)" end' "$OUT")"
        RES[$limit,$engine,stream]=$(jq .memory.stream_bytes "$OUT")
      else
        in_limit "$limit" "$REF" -m "$MODEL" -p "$PROMPT" -n "$N" --temp 0 -t "$THREADS" -c "$CTX" \
          --no-repack --no-warmup -no-cnv >"$OUT" 2>"$ERR" </dev/null
        rc=$?
        if [ $rc -ne 0 ]; then
          echo "$limit ref rep $rep: failed (rc $rc): $(tail -2 "$ERR")"
          continue
        fi
        tps=$(awk '/ eval time =/ && !/prompt/ { for (i = 1; i <= NF; i++) if ($i == "tokens" && $(i+1) ~ /per/) print $(i-1) }' "$ERR" | tail -1)
        pps=$(awk '/prompt eval time =/ { for (i = 1; i <= NF; i++) if ($i == "tokens" && $(i+1) ~ /per/) print $(i-1) }' "$ERR" | tail -1)
        ppn=$(awk '/prompt eval time =/ { for (i = 1; i <= NF; i++) if ($i ~ /^tokens/ && $(i-2) == "/") print $(i-1) }' "$ERR" | tail -1)
        line=$(grep -E "^.*(prompt eval|  eval) time" "$ERR" | sed 's/.*common_perf_print: *//' | tr '\n' ' ')
      fi
      echo "$limit $engine rep $rep: $tps tok/s | prompt $ppn tokens at $pps tok/s | cgroup peak $((PEAK / 1000000)) MB | $line"
      RES[$limit,$engine]="${RES[$limit,$engine]:-} $tps"
      RES[$limit,$engine,pp]="${RES[$limit,$engine,pp]:-} $pps"
    done
  done
done

med_of() { echo "${RES[$1]:-}" | tr ' ' '\n' | grep . | median; } # a RES key's median
ratio_to() { # a b: a / b as "N.Nx", "-" without b
  awk -v a="$1" -v b="$2" 'BEGIN { if (b + 0 > 0) printf "%.1fx", a / b; else print "-" }'
}

echo
echo "| limit | engine | tok/s (median of $REPS) | vs reference | reads per token | disk bound (must re-read / $best_gbs GB/s) | engine / bound |"
echo "|---|---|---|---|---|---|---|"
for limit in $LIMITS; do
  r=$(med_of "$limit,ref")
  for engine in $ENGINES; do
    l=$(med_of "$limit,$engine")
    stream=${RES[$limit,$engine,stream]:-0}
    if [ "$limit" = none ]; then
      bound="-"
      vs="-"
    else
      # must re-read: the file's bytes beyond what the limit holds (an
      # optimistic bound: the KV cache and buffers take part of the limit too)
      lb=$(bytes_of "$limit")
      must=$(awk -v s="$size" -v l="$lb" 'BEGIN { m = s - l; if (m < 0) m = 0; print m }')
      bound=$(awk -v m="$must" -v g="$best_gbs" 'BEGIN { printf "%.2f GB -> %.2f tok/s", m / 1e9, g * 1e9 / m }')
      vs=$(awk -v m="$must" -v g="$best_gbs" -v t="$l" 'BEGIN { if (t > 0) printf "%.2fx slower", (g * 1e9 / m) / t; else print "-" }')
    fi
    ratio="-"
    [ "$engine" != ref ] && ratio=$(ratio_to "$l" "$r")
    echo "| $limit | $engine | $l | $ratio | $(awk -v s="$stream" 'BEGIN { printf "%.2f GB", s / 1e9 }') | $bound | $vs |"
  done
done

if [ -n "$PP" ]; then
  echo
  echo "| limit | engine | prompt tok/s, about $PP tokens (median of $REPS) | vs reference |"
  echo "|---|---|---|---|"
  for limit in $LIMITS; do
    r=$(med_of "$limit,ref,pp")
    for engine in $ENGINES; do
      l=$(med_of "$limit,$engine,pp")
      ratio="-"
      [ "$engine" != ref ] && ratio=$(ratio_to "$l" "$r")
      echo "| $limit | $engine | $l | $ratio |"
    done
  done
fi
