#!/usr/bin/env bash
# tools/device_kernels.sh — on a GPU machine, from the repository root: build the kernels (sm_90 unless
# CUDA_ARCHS says otherwise), run the GPU tests (kernels, custom op, models), compute-sanitizer memcheck +
# racecheck on the standalone runner, and the layer / model benchmark. Logs go to ${OUT:-device_out}/logs.tgz,
# benchmark results to ${OUT}/bench_layer.{json,md,png}; a short summary is printed last.
#   STAGES="build test sanitize bench" BENCH_ARGS="--quick" tools/device_kernels.sh
# Optional stages: ab (a second build with AB_FLAGS, the faster one is used after), profile (ncu).
# The official fused kernels join the benchmark when a checkout of BGU-CS-VIL/WTConv is at
# ${OFFICIAL:-third_party/WTConv} (never committed: /third_party/ is ignored).
set -uo pipefail
OUT=${OUT:-device_out}
mkdir -p "$OUT"
LOGS=$(mktemp -d)
STAGES=${STAGES:-"build test sanitize bench"}
ARCHS=${CUDA_ARCHS:-90}
BENCH_ARGS=${BENCH_ARGS:-""}
OFFICIAL=${OFFICIAL:-third_party/WTConv}
export WTCONV_KERNELS_LIB=$PWD/build/plugin/libwtconv_kernels_capi.so
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
export PYTHONUNBUFFERED=1
export MAX_JOBS=${MAX_JOBS:-16}
status=0
summary=()
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee "$LOGS/gpu.txt"
finish() {
  tar czf "$OUT/logs.tgz" -C "$LOGS" . 2>/dev/null
  echo "===== summary"
  printf '%s\n' "${summary[@]}"
  exit $status
}

BUILD=build/plugin
if [[ " $STAGES " == *" build "* ]]; then
  start=$SECONDS
  { cmake -S plugin -B build/plugin -G Ninja -DCMAKE_CUDA_ARCHITECTURES="$ARCHS" -DWTCONV_PTXAS_VERBOSE=ON \
    && cmake --build build/plugin -j; } > "$LOGS/build.log" 2>&1 || { echo "BUILD FAILED"; tail -40 "$LOGS/build.log"; status=1; finish; }
  summary+=("build: ok ($((SECONDS - start)) s); spills: $(grep -c '[1-9][0-9]* bytes spill' "$LOGS/build.log" || true)")
fi

# ab: a second build with AB_FLAGS (CUDA compiler flags, e.g. a -D of a compile-time knob you are trying),
# both timed at the WTConvNeXt-T stage shapes (tools/compare_builds.py); the later stages use the faster build.
if [[ " $STAGES " == *" ab "* ]]; then
  start=$SECONDS
  { cmake -S plugin -B build/plugin_b -G Ninja -DCMAKE_CUDA_ARCHITECTURES="$ARCHS" -DWTCONV_PTXAS_VERBOSE=ON \
      -DCMAKE_CUDA_FLAGS="${AB_FLAGS:?ab needs AB_FLAGS}" && cmake --build build/plugin_b -j; } > "$LOGS/build_b.log" 2>&1 \
    || { echo "BUILD B FAILED"; tail -20 "$LOGS/build_b.log"; }
  WTCONV_KERNELS_LIB=$PWD/build/plugin/libwtconv_kernels_capi.so python3 tools/compare_builds.py default > "$LOGS/ab.jsonl" 2>"$LOGS/ab.err"
  WTCONV_KERNELS_LIB=$PWD/build/plugin_b/libwtconv_kernels_capi.so python3 tools/compare_builds.py "b:${AB_FLAGS}" >> "$LOGS/ab.jsonl" 2>>"$LOGS/ab.err"
  winner=$(python3 - "$LOGS/ab.jsonl" <<'PY'
import json, sys
runs = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]
total = {}
for run in runs:
    for label, cases in run.items():
        total[label] = sum(cases.values())
        print(label, " ".join(f"{k}={v:.4f}" for k, v in cases.items()), f"total={total[label]:.4f}", file=sys.stderr)
print("b" if len(total) == 2 and min(total, key=total.get).startswith("b:") else "default")
PY
  )
  cat "$LOGS/ab.err" | tail -4
  if [[ "$winner" == "b" ]]; then BUILD=build/plugin_b; fi
  summary+=("ab ($((SECONDS - start)) s): using $BUILD")
fi
export WTCONV_KERNELS_LIB=$PWD/$BUILD/libwtconv_kernels_capi.so

if [[ " $STAGES " == *" test "* ]]; then
  start=$SECONDS
  python3 -m pytest -q -rs -p no:cacheprovider tests/test_kernels_gpu.py tests/test_model_gpu.py ${PYTEST_ARGS:-} \
    > "$LOGS/pytest.log" 2>&1 || status=1
  summary+=("pytest ($((SECONDS - start)) s): $(tail -1 "$LOGS/pytest.log")")
  grep -E "^(FAILED|ERROR)|worst|Worst" "$LOGS/pytest.log" | head -30
  sed -n '/error report\|measured agreement\|Worst/,$p' "$LOGS/pytest.log" | head -20
fi

if [[ " $STAGES " == *" sanitize "* ]]; then
  for tool in memcheck racecheck; do
    start=$SECONDS
    compute-sanitizer --tool $tool --error-exitcode 3 $BUILD/wtconv_sanitize_runner > "$LOGS/sanitize_$tool.log" 2>&1
    rc=$?
    [[ $rc -ne 0 ]] && status=1
    summary+=("compute-sanitizer $tool: rc=$rc ($((SECONDS - start)) s): $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$LOGS/sanitize_$tool.log" | tail -1) / $(tail -1 "$LOGS/sanitize_$tool.log" | grep failures)")
  done
fi

if [[ " $STAGES " == *" profile "* ]]; then
  ncu --clock-control none --section SpeedOfLight --section Occupancy --section WarpStateStats --section LaunchStats \
    --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis --section InstructionStats \
    -k regex:"levelKernel|poolKernel|smallPlaneKernel" --launch-skip 0 --launch-count ${NCU_COUNT:-12} \
    python3 tools/profile_kernels.py > "$LOGS/ncu.log" 2>&1
  grep -E "levelKernel|poolKernel|smallPlaneKernel|Duration|Compute \(SM\) Throughput|DRAM Throughput|Achieved Occupancy|Registers Per|Block Limit|Memory Throughput|Issue Slots Busy|L1/TEX Hit|Shared" "$LOGS/ncu.log" | head -${NCU_LINES:-80}
fi

if [[ " $STAGES " == *" bench "* ]]; then
  start=$SECONDS
  official_arg=""
  [[ -f "$OFFICIAL/fast_wtconv/wtconv_cuda.py" ]] && official_arg="--official $OFFICIAL"
  cmdline="STAGES=bench BENCH_ARGS='$BENCH_ARGS' tools/device_kernels.sh (python3 -m wtconv_trt bench-layer --out OUT $official_arg $BENCH_ARGS)"
  python3 -m wtconv_trt bench-layer --out "$OUT" --force $official_arg $BENCH_ARGS --command-line "$cmdline" \
    > "$LOGS/bench.log" 2>&1 || status=1
  summary+=("bench ($((SECONDS - start)) s): rc=$?")
  grep -E "Traceback|Error|failed" "$LOGS/bench.log" | head -10
  sed -n '/^## Targets/,/^## Layers/p' "$OUT/bench_layer.md" 2>/dev/null
  sed -n '/^## Per-call/,$p' "$OUT/bench_layer.md" 2>/dev/null
fi
finish
