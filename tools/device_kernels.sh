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
source "$(dirname "${BASH_SOURCE[0]}")/device_lib.sh"
device_start
STAGES=${STAGES:-"build test sanitize bench"}
BENCH_ARGS=${BENCH_ARGS:-""}
OFFICIAL=${OFFICIAL:-third_party/WTConv}
export WTCONV_KERNELS_LIB=$PWD/build/plugin/libwtconv_kernels_capi.so
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
export MAX_JOBS=${MAX_JOBS:-16}
gpu_info | tee "$LOGS/gpu.txt"
finish() {
  device_finish "$OUT/logs.tgz"
}

BUILD=build/plugin
if [[ -n "${PREBUILT:-}" ]] && python3 -c "import ctypes, sys; ctypes.CDLL(sys.argv[1])" "$PREBUILT/libwtconv_kernels_capi.so"; then
  mkdir -p build && rm -rf build/plugin && cp -r "$PREBUILT" build/plugin && STAGES=${STAGES/build/}
  note "build: the prebuilt library of $PREBUILT"
fi
if [[ " $STAGES " == *" build "* ]]; then
  STAGE_TAIL=40 stage build build_plugin build/plugin -DWTCONV_PTXAS_VERBOSE=ON || { echo "BUILD FAILED"; finish; }
  note "build: spills: $(grep -c '[1-9][0-9]* bytes spill' "$LOGS/build.log" || true)"
fi

# ab: our build against another, both timed interleaved in one process on the held A/B set (benchmarks/ab_kernels.py:
# stage shapes, tiled shapes, small batches; docs/bench/README.md). The other build is AB_REF_LIB (a library built
# from the code before the change) or, with AB_FLAGS (CUDA compiler flags, e.g. a -D of a compile-time knob), a
# second build of this code; with AB_FLAGS the later stages use the faster build (geometric mean over the set).
if [[ " $STAGES " == *" ab "* ]]; then
  before=${AB_REF_LIB:-}
  after=$PWD/build/plugin/libwtconv_kernels_capi.so
  if [[ -z "$before" ]]; then
    flags=${AB_FLAGS:?ab needs AB_REF_LIB or AB_FLAGS}
    STAGE_TAIL=20 stage build_b build_plugin build/plugin_b -DWTCONV_PTXAS_VERBOSE=ON -DCMAKE_CUDA_FLAGS="$flags" ||
      echo "BUILD B FAILED"
    before=$after
    after=$PWD/build/plugin_b/libwtconv_kernels_capi.so
  fi
  # shellcheck disable=SC2086  # AB_ARGS: several words
  stage ab python3 -m benchmarks.ab_kernels --lib "before=$before" --lib "after=$after" --json "$OUT/ab.json" \
    --markdown "$OUT/ab.md" ${AB_ARGS:-}
  grep -E "^- " "$OUT/ab.md" 2>/dev/null
  if [[ -n "${AB_FLAGS:-}" && -z "${AB_REF_LIB:-}" ]] && python3 -c "
import json, math, sys
rows = json.load(open(sys.argv[1]))['rows']
sys.exit(0 if sum(math.log(r['ratio']) for r in rows) < 0 else 1)" "$OUT/ab.json"; then
    BUILD=build/plugin_b
  fi
  note "ab: $OUT/ab.md; later stages use $BUILD"
fi
export WTCONV_KERNELS_LIB=$PWD/$BUILD/libwtconv_kernels_capi.so

if [[ " $STAGES " == *" test "* ]]; then
  # shellcheck disable=SC2086  # PYTEST_ARGS: several words
  STAGE_TAIL=1 stage pytest python3 -m pytest -q -rs -p no:cacheprovider tests/test_kernels_gpu.py tests/test_model_gpu.py \
    ${PYTEST_ARGS:-}
  note "pytest: $(tail -1 "$LOGS/pytest.log")"
  grep -E "^(FAILED|ERROR)|worst|Worst" "$LOGS/pytest.log" | head -30
  sed -n '/error report\|measured agreement\|Worst/,$p' "$LOGS/pytest.log" | head -20
fi

if [[ " $STAGES " == *" sanitize "* ]]; then
  for tool in memcheck racecheck; do
    STAGE_TAIL=0 stage "sanitize_$tool" compute-sanitizer --tool $tool --error-exitcode 3 $BUILD/wtconv_sanitize_runner
    note "compute-sanitizer $tool: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$LOGS/sanitize_$tool.log" | tail -1) / $(tail -1 "$LOGS/sanitize_$tool.log" | grep failures)"
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
  official_arg=""
  [[ -f "$OFFICIAL/fast_wtconv/wtconv_cuda.py" ]] && official_arg="--official $OFFICIAL"
  cmdline="STAGES=bench BENCH_ARGS='$BENCH_ARGS' tools/device_kernels.sh (python3 -m wtconv_trt bench-layer --out OUT $official_arg $BENCH_ARGS)"
  # shellcheck disable=SC2086  # official_arg, BENCH_ARGS: several words
  STAGE_TAIL=0 stage bench python3 -m wtconv_trt bench-layer --out "$OUT" --force $official_arg $BENCH_ARGS \
    --command-line "$cmdline"
  grep -E "Traceback|Error|failed" "$LOGS/bench.log" | head -10
  sed -n '/^## Targets/,/^## Layers/p' "$OUT/bench_layer.md" 2>/dev/null
  sed -n '/^## Per-call/,$p' "$OUT/bench_layer.md" 2>/dev/null
fi
finish
