#!/usr/bin/env bash
# tools/device_kernels.sh — on a GPU machine, from the repository root: build the kernels (sm_90 unless
# CUDA_ARCHS says otherwise), run the GPU tests (kernels, custom op, models), compute-sanitizer memcheck +
# racecheck on the standalone runner, and the layer / model benchmark. Logs go to ${OUT:-device_out}/logs.tgz,
# benchmark results to ${OUT}/bench_layer.{json,md,png}; a short summary is printed last.
#   STAGES="build test sanitize bench" BENCH_ARGS="--quick" tools/device_kernels.sh
# Optional stages: ab (our build against AB_REF_LIB or an AB_FLAGS build, benchmarks/ab_kernels.py), profile (ncu).
# PREBUILT=<dir> with libwtconv_kernels_capi.so and wtconv_sanitize_runner built elsewhere (same CUDA major) skips
# the build stage when the library loads here.
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
if [[ -n "${PREBUILT:-}" ]] && python3 -c "import ctypes, sys; ctypes.CDLL(sys.argv[1])" "$PREBUILT/libwtconv_kernels_capi.so"; then
  mkdir -p build && rm -rf build/plugin && cp -r "$PREBUILT" build/plugin && STAGES=${STAGES/build/}
  summary+=("build: the prebuilt library of $PREBUILT")
fi
if [[ " $STAGES " == *" build "* ]]; then
  start=$SECONDS
  { cmake -S plugin -B build/plugin -G Ninja -DCMAKE_CUDA_ARCHITECTURES="$ARCHS" -DWTCONV_PTXAS_VERBOSE=ON \
    && cmake --build build/plugin -j; } > "$LOGS/build.log" 2>&1 || { echo "BUILD FAILED"; tail -40 "$LOGS/build.log"; status=1; finish; }
  summary+=("build: ok ($((SECONDS - start)) s); spills: $(grep -c '[1-9][0-9]* bytes spill' "$LOGS/build.log" || true)")
fi

# ab: our build against another, both timed interleaved in one process on the held A/B set (benchmarks/ab_kernels.py:
# stage shapes, tiled shapes, small batches; docs/bench/README.md). The other build is AB_REF_LIB (a library built
# from the code before the change) or, with AB_FLAGS (CUDA compiler flags, e.g. a -D of a compile-time knob), a
# second build of this code; with AB_FLAGS the later stages use the faster build (geometric mean over the set).
if [[ " $STAGES " == *" ab "* ]]; then
  start=$SECONDS
  before=${AB_REF_LIB:-}
  after=$PWD/build/plugin/libwtconv_kernels_capi.so
  if [[ -z "$before" ]]; then
    { cmake -S plugin -B build/plugin_b -G Ninja -DCMAKE_CUDA_ARCHITECTURES="$ARCHS" -DWTCONV_PTXAS_VERBOSE=ON \
        -DCMAKE_CUDA_FLAGS="${AB_FLAGS:?ab needs AB_REF_LIB or AB_FLAGS}" && cmake --build build/plugin_b -j; } \
      > "$LOGS/build_b.log" 2>&1 || { echo "BUILD B FAILED"; tail -20 "$LOGS/build_b.log"; }
    before=$after
    after=$PWD/build/plugin_b/libwtconv_kernels_capi.so
  fi
  python3 -m benchmarks.ab_kernels --lib "before=$before" --lib "after=$after" --json "$OUT/ab.json" \
    --markdown "$OUT/ab.md" ${AB_ARGS:-} > "$LOGS/ab.log" 2>&1 || status=1
  grep -E "^- " "$OUT/ab.md" 2>/dev/null
  if [[ -n "${AB_FLAGS:-}" && -z "${AB_REF_LIB:-}" ]] && python3 -c "
import json, math, sys
rows = json.load(open(sys.argv[1]))['rows']
sys.exit(0 if sum(math.log(r['ratio']) for r in rows) < 0 else 1)" "$OUT/ab.json"; then
    BUILD=build/plugin_b
  fi
  summary+=("ab ($((SECONDS - start)) s): $OUT/ab.md; later stages use $BUILD")
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
    -k regex:"levelKernel|poolKernel|smallPlaneKernel|tcPlaneKernel" --launch-skip 0 --launch-count ${NCU_COUNT:-12} \
    python3 -m benchmarks.profile_kernels > "$LOGS/ncu.log" 2>&1
  grep -E "levelKernel|poolKernel|smallPlaneKernel|tcPlaneKernel|Duration|Compute \(SM\) Throughput|DRAM Throughput|Achieved Occupancy|Registers Per|Block Limit|Memory Throughput|Issue Slots Busy|L1/TEX Hit|Shared" "$LOGS/ncu.log" | head -${NCU_LINES:-80}
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
