#!/bin/sh
# The GPU checks of docs/gpu.md in one go, for a machine with a CUDA device
# (issue 22): the kernel tests, greedy ids on the device against the CPU for
# every model under the models folder, and the offload figures on a
# llama-7b-shaped Q4_K_M file at device-memory caps of 25, 50 and 75 % of the
# model and with no cap.
#
#   bench/gpu_device.sh BUILD MODELS OUT
#
# BUILD: a build configured with -DLARES_CUDA=ON (lares, tests/); MODELS: the
# shared models folder; OUT: where the logs and the JSON of every run go.
# Environment: LLAMA_CPP_BUILD (optional) a llama.cpp build with CUDA, whose
# llama-bench runs on the same file with -ngl 8, 16, 24 and 99; N_GEN (32)
# tokens of the tg test; REPEAT (1) repetitions; SKIP_BENCH=1 to stop after
# the checks.
set -u
B=${1:?usage: gpu_device.sh BUILD MODELS OUT}
M=${2:?usage: gpu_device.sh BUILD MODELS OUT}
O=${3:?usage: gpu_device.sh BUILD MODELS OUT}
N_GEN=${N_GEN:-32}
R=${REPEAT:-1}
mkdir -p "$O"
L=$B/lares
say() { printf '%s\n' "$*" | tee -a "$O/summary.txt"; }

say "== machine"
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv,noheader \
    2>&1 | tee -a "$O/summary.txt"
say "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2) x $(nproc)"
say "flags: $(grep -m1 '^flags' /proc/cpuinfo | tr ' ' '\n' |
    grep -E '^(avx2|fma|f16c|avx512f|avx512bw|avx512vl|avx512_vnni|avx_vnni|avx512_bf16)$' |
    tr '\n' ' ')"

say "== kernel tests"
for t in gpu_kernels gpu_session gpu_place; do
    start=$(date +%s)
    LARES_MODELS_DIR=$M "$B/tests/test_$t" > "$O/test_$t.log" 2>&1
    rc=$?
    say "test_$t: rc $rc, $(tail -1 "$O/test_$t.log") ($(( $(date +%s) - start )) s)"
done

# prints "same N ids" or "DIFFER at I of N" for two `lares run --json` outputs
compare() {
    python3 -c '
import json, sys
try:
    a = json.load(open(sys.argv[1]))["generated_ids"]
    b = json.load(open(sys.argv[2]))["generated_ids"]
except Exception as e:
    print("no output (%s)" % e.__class__.__name__); sys.exit()
if a == b:
    print("same %d ids" % len(a))
else:
    i = next((i for i in range(min(len(a), len(b))) if a[i] != b[i]), min(len(a), len(b)))
    print("DIFFER at %d of %d" % (i, len(a)))
' "$1" "$2"
}

# the placement line of a run's log, without the device's name
placed() {
    grep -o 'gpu: [^m].*' "$1" | head -1 | sed 's/.*(sm_[0-9]*), //' | cut -c1-150
}

say "== greedy ids, device against CPU"
# all layers whole on the device, half the model by affinity, and all layers
# product by product (the path before whole layers)
find "$M" -name '*.gguf' ! -path '*/vocab/*' ! -name 'ggml-*' | sort > "$O/models.txt"
while read -r f; do
    n=$(basename "$f")
    "$L" run -m "$f" -p "Once upon a time" -n 48 --temp 0 --json > "$O/g-$n-none.json" \
        2> "$O/g-$n-none.err" || { say "$n: cpu run failed: $(tail -1 "$O/g-$n-none.err")"; continue; }
    for v in layers-all affinity-half products-all; do
        case $v in
        layers-all) set -- --offload layers; env=LARES_GPU_LAYERS=whole ;;
        affinity-half) set -- --offload affinity --gpu-mem $(( $(stat -c %s "$f") / 2 ))
            env=LARES_GPU_LAYERS=whole ;;
        *) set -- --offload layers; env=LARES_GPU_LAYERS=products ;;
        esac
        env "$env" "$L" run -m "$f" -p "Once upon a time" -n 48 --temp 0 --json -v "$@" \
            > "$O/g-$n-$v.json" 2> "$O/g-$n-$v.err"
        rc=$?
        say "$n $v: rc $rc, $(compare "$O/g-$n-none.json" "$O/g-$n-$v.json"); $(placed "$O/g-$n-$v.err")"
    done
done < "$O/models.txt"
grep -h -m1 'gpu: measured' "$O"/g-*layers-all.err | head -1 | tee -a "$O/summary.txt"
if command -v compute-sanitizer > /dev/null; then
    compute-sanitizer --tool memcheck --error-exitcode 9 "$L" run -m "$M/TinyStories-656K.f16.gguf" \
        -p "Once upon a time" -n 16 --temp 0 --offload layers > "$O/memcheck.log" 2>&1
    say "memcheck, whole layers: rc $? $(grep -m1 'ERROR SUMMARY' "$O/memcheck.log")"
fi

[ "${SKIP_BENCH:-0}" = 1 ] && exit 0

say "== offload figures: llama-7b-shaped Q4_K_M, lares bench -p 128 -n $N_GEN -r $R"
start=$(date +%s)
"$L" synth --preset llama-7b --type q4_k_m -o /tmp/l7.gguf -t "$(nproc)" \
    --vocab-from "$M/vocab/ggml-vocab-llama-spm.gguf" > "$O/synth.log" 2>&1 ||
    { say "synth failed: $(tail -2 "$O/synth.log")"; exit 1; }
S=$(stat -c %s /tmp/l7.gguf)
say "synth: $S bytes in $(( $(date +%s) - start )) s"
bench() { # name, LARES_GPU_LAYERS value, lares bench arguments...
    name=$1; env=LARES_GPU_LAYERS=$2; shift 2
    env "$env" "$L" bench -m /tmp/l7.gguf -p 128 -n "$N_GEN" -r "$R" --json -v "$@" \
        > "$O/b-$name.json" 2> "$O/b-$name.err"
    rc=$?
    python3 -c '
import json, sys
try:
    d = json.load(open(sys.argv[1]))
    rows = d["tests"]
    print("%-14s %s" % (sys.argv[2], "  ".join("%s %.2f t/s" % (t["test"], t["tok_s_mean"]) for t in rows)))
except Exception as e:
    print("%-14s rc %s, no result (%s)" % (sys.argv[2], sys.argv[3], e.__class__.__name__))
' "$O/b-$name.json" "$name" "$rc" | tee -a "$O/summary.txt"
    placed "$O/b-$name.err" | tee -a "$O/summary.txt"
    if [ "$rc" -ge 128 ] && command -v cuda-gdb > /dev/null; then
        env "$env" cuda-gdb -batch -ex run -ex bt --args "$L" bench -m /tmp/l7.gguf -p 128 \
            -n 8 -r 1 "$@" > "$O/b-$name.gdb" 2>&1
        say "crash: $(grep -m8 '^#' "$O/b-$name.gdb" | tr '\n' '|' | cut -c1-700)"
    fi
}
bench cpu whole
for pct in 25 50 75; do
    cap=$((S * pct / 100))
    for off in layers affinity; do
        bench "$off-$pct" whole --offload $off --gpu-mem $cap
    done
done
bench layers-all whole --offload layers
bench affinity-all whole --offload affinity
bench products-all products --offload layers
if [ -n "${LLAMA_CPP_BUILD:-}" ]; then
    say "== reference: llama-bench -p 128 -n $N_GEN -r $R"
    for ngl in 8 16 24 99; do
        "$LLAMA_CPP_BUILD/bin/llama-bench" -m /tmp/l7.gguf -p 128 -n "$N_GEN" -ngl $ngl -r "$R" \
            -o csv > "$O/ref-ngl$ngl.csv" 2> "$O/ref-ngl$ngl.err"
        say "ngl $ngl: rc $? $(python3 -c '
import csv, sys
print("  ".join("%s/%s %s t/s" % (r["n_prompt"], r["n_gen"], r["avg_ts"]) for r in csv.DictReader(open(sys.argv[1]))))
' "$O/ref-ngl$ngl.csv" 2>&1 | tail -1)"
    done
fi
