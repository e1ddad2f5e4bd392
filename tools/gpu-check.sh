#!/usr/bin/env bash
# gpu-check.sh: the one prepared check of the CUDA backend on a lent GPU
# (issue 11). Builds for the device's own architecture, then:
#   1. device and driver                         -> $OUT/device.txt
#   2. test-backend-ops, cuda vs cpu, PASS/FAIL per op x type x shape
#                                                -> $OUT/backend-ops.txt (table: $OUT/cuda-table.txt)
#   3. compute-sanitizer memcheck on a short decode -> $OUT/memcheck.txt
#   4. microbenchmarks (mat-vec GB/s per type vs copy bandwidth, sparse rows /
#      down_t / fused FFN at 5..100% active, pinned copy latency, event round trip)
#                                                -> $OUT/micro.txt
#   5. end to end on a 7B-shaped file (scripts/make_bench_model.py): tok/s and
#      greedy-output equality for cpu, gpu (all layers), hybrid at budgets holding
#      25 / 50 / 75% of the FFN, and plain layer offload (-ngl, no neuron split) at
#      the same budgets; CPU threads pinned and capped (PC emulation), the CPU read
#      bandwidth measured                      -> $OUT/e2e.txt
#   6. Nsight Compute, where it runs: each kernel's time in a short dense decode on the
#      device (where a token's time goes), and the Q4_0 mat-vec's throughput,
#      occupancy and stall reasons                 -> $OUT/kernels.txt
# Every step has its own time limit, so the whole run stays within ~7 minutes;
# a failed step is reported and the next one runs. Summary: $OUT/summary.txt.
#
#   OUT=/tmp/gpu-out tools/gpu-check.sh        (GPU_CHECK_THREADS=8 GPU_CHECK_LAYERS=8)
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/gpu-check-out}
mkdir -p "$OUT"
THREADS=${GPU_CHECK_THREADS:-8}
LAYERS=${GPU_CHECK_LAYERS:-8}
JOBS=$(nproc)
B=build-gpu-check
SUMMARY="$OUT/summary.txt"
: > "$SUMMARY"
step() { echo "== $*" | tee -a "$SUMMARY"; }
note() { echo "$*" | tee -a "$SUMMARY"; }
t_start=$(date +%s)

NVCC=$(command -v nvcc || true)
[ -z "$NVCC" ] && [ -x /usr/local/cuda/bin/nvcc ] && NVCC=/usr/local/cuda/bin/nvcc
if [ -z "$NVCC" ]; then note "no nvcc: cannot build the CUDA backend"; exit 1; fi

step "build (PINFER_CUDA=ON, this device's architecture)"
ARCH=native
if command -v nvidia-smi >/dev/null; then
  cc=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d '. ')
  [ -n "$cc" ] && ARCH=$cc
fi
# the Python extension too where nanobind is there: make_bench_model.py writes the e2e file with it
PY=OFF
python3 -m nanobind --cmake_dir >/dev/null 2>&1 && PY=ON
if ! timeout 240 bash -c "cmake -S . -B $B -DPINFER_CUDA=ON -DPINFER_PYTHON=$PY -DCMAKE_CUDA_COMPILER=$NVCC \
      -DCMAKE_CUDA_ARCHITECTURES=$ARCH -DCMAKE_BUILD_TYPE=Release > '$OUT/build.txt' 2>&1 && cmake --build $B -j$JOBS >> '$OUT/build.txt' 2>&1"; then
  note "build FAILED (see build.txt)"; tail -30 "$OUT/build.txt"; exit 1
fi
note "built for sm_$ARCH in $(( $(date +%s) - t_start )) s"

step "device"
{ nvidia-smi 2>&1 | head -20; "$B/pinfer-gpu-bench" info; } > "$OUT/device.txt" 2>&1
cat "$OUT/device.txt" | tee -a "$SUMMARY" | tail -3

step "test-backend-ops: cuda vs cpu"
timeout 150 "$B/test-backend-ops" > "$OUT/backend-ops.txt" 2>&1
rc=$?
grep -E '^cuda ' "$OUT/backend-ops.txt" > "$OUT/cuda-table.txt"
grep -E '^cuda FAIL' "$OUT/cuda-table.txt" | head -40 | tee -a "$SUMMARY"
note "$(grep -E '^cuda vs cpu:' "$OUT/backend-ops.txt" || echo 'no cuda summary line (crashed or timed out)') (exit $rc)"

step "compute-sanitizer memcheck: short decode on the device"
SAN=$(command -v compute-sanitizer || true)
[ -z "$SAN" ] && [ -x /usr/local/cuda/bin/compute-sanitizer ] && SAN=/usr/local/cuda/bin/compute-sanitizer
if [ -n "$SAN" ]; then
  timeout 120 "$SAN" --tool memcheck --error-exitcode 9 "$B/pinfer-cli" -m models/pinfer-default.gguf --device cuda \
    -p "Once upon a time" -n 8 --temp 0 -t 2 > "$OUT/memcheck.txt" 2>&1
  rc=$?
  note "memcheck exit $rc ($(grep -c 'Invalid\|ERROR' "$OUT/memcheck.txt") error lines); $(grep 'ERROR SUMMARY' "$OUT/memcheck.txt" | tail -1)"
else
  note "skip: no compute-sanitizer"
fi

step "microbenchmarks"
timeout 100 "$B/pinfer-gpu-bench" micro --reps 50 > "$OUT/micro.txt" 2>&1 || note "micro exit $?"
cat "$OUT/micro.txt" >> "$SUMMARY"

step "end to end on a 7B-shaped file ($LAYERS layers, Q4_0, 90% sparse)"
E2E="$OUT/e2e.txt"
: > "$E2E"
MODEL=${GPU_CHECK_MODEL:-/tmp/pinfer-gpu-check-7b-L$LAYERS}
if [ ! -f "$MODEL.ext.gguf" ]; then
  PINFER_BUILD_DIR=$B timeout 200 python3 scripts/make_bench_model.py --layers "$LAYERS" --out "$MODEL" > "$OUT/make_model.txt" 2>&1 ||
    { note "skip e2e: make_bench_model.py failed (python $PY; see make_model.txt)"; MODEL=""; }
fi
if [ -n "$MODEL" ] && [ -f "$MODEL.ext.gguf" ]; then
  F="$MODEL.ext.gguf"  # with ffn_down_t and the predictor
  CPUS="0-$((THREADS - 1))"
  echo "CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2), pinned to cores $CPUS, $THREADS threads" | tee -a "$E2E"
  taskset -c "$CPUS" timeout 40 "$B/pinfer-bench" matvec --types q4_0 --threads "$THREADS" --gib 1 --reps 2 2>&1 | tail -4 >> "$E2E"
  read -r FFN OTHER < <("$B/pinfer-gpu-bench" budgets -m "$F" | awk '{v[$1]=$2} END {print v["ffn_bytes"], v["other_bytes"]}')
  run() {  # name, then pinfer-cli arguments; prints tok/s and keeps the text
    local name=$1; shift
    if [ $(( $(date +%s) - t_start )) -gt 400 ]; then  # keep the whole check within ~7 minutes
      printf '%-26s skipped: out of time\n' "$name" | tee -a "$E2E"; return
    fi
    taskset -c "$CPUS" timeout 60 "$B/pinfer-cli" -m "$F" -t "$THREADS" -c 256 -p "The history of" -n 32 --temp 0 \
      --no-display-prompt "$@" > "$OUT/e2e-$name.out" 2> "$OUT/e2e-$name.err"
    local rc=$? tps
    tps=$(grep 'eval time' "$OUT/e2e-$name.err" | grep -v prompt | sed -E 's/.*, *([0-9.]+) tokens per second.*/\1/')
    printf '%-26s rc %-3s %8s tok/s  %s\n' "$name" "$rc" "${tps:--}" "$*" | tee -a "$E2E"
  }
  same() { cmp -s "$OUT/e2e-$1.out" "$OUT/e2e-$2.out" && echo "greedy output $1 == $2" || echo "greedy output $1 != $2"; }
  run cpu-dense --sparse off --device cpu
  run gpu-dense --sparse off --device cuda --verbose
  run cpu-pred --sparse predictor --device cpu
  run gpu-pred --sparse predictor --device cuda --verbose
  { same cpu-dense gpu-dense; same cpu-pred gpu-pred; } | tee -a "$E2E"
  for pct in 25 50 75; do
    # the dense part, pct of the FFN, and 256 MiB for KV cache and compute
    gib=$(awk -v o="$OTHER" -v f="$FFN" -v p="$pct" 'BEGIN {printf "%.3f", (o + f * p / 100 + 268435456) / 1073741824}')
    run "hybrid-$pct%" --sparse predictor --device cuda --vram-budget "$gib" --verbose
    run "layer-offload-$pct%" --sparse off --device cuda --offload layers --vram-budget "$gib" --verbose  # whole layers in that budget
    same cpu-pred "hybrid-$pct%" | tee -a "$E2E"
  done
  cat "$E2E" >> "$SUMMARY"
fi
step "kernels (Nsight Compute)"
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1 || true)
if [ -z "$NCU" ]; then
  note "skip: no ncu"
elif [ -z "${F:-}" ]; then
  note "skip: no e2e file"
else
  K="$OUT/kernels.txt"
  # decode steps only (the prompt's kernels skipped); --clock-control none leaves the clocks alone
  timeout 60 "$NCU" --clock-control none --launch-skip 150 --launch-count 120 --print-summary per-kernel \
    "$B/pinfer-cli" -m "$F" --device cuda -p "The history of" -n 6 --temp 0 --sparse off -t "$THREADS" > "$K" 2>&1 ||
    note "ncu per-kernel exit $?"
  # the micro's Q4_0 mat-vec (the fourth type: 3 graphs x 16 products of each type before it)
  timeout 40 "$NCU" --clock-control none -k regex:mat_vec_kernel --launch-skip 146 --launch-count 1 --section SpeedOfLight \
    --section Occupancy --section WarpStateStats "$B/pinfer-gpu-bench" micro --reps 2 >> "$K" 2>&1 || note "ncu mat-vec exit $?"
  grep -E "Invocations|^ +Duration" "$K" | sed -E 's/ +/ /g' | cut -c1-160 >> "$SUMMARY"
fi
note "total $(( $(date +%s) - t_start )) s; results in $OUT"
