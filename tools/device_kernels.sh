#!/usr/bin/env bash
# tools/device_kernels.sh — on a GPU machine, from the repository root: build the kernels (sm_90 unless
# CUDA_ARCHS says otherwise), run the GPU tests, compute-sanitizer memcheck + racecheck on the standalone
# runner, and the layer / model benchmark. Logs and results go to ${OUT:-device_out}.
#   STAGES="build test sanitize bench" BENCH_ARGS="--quick" tools/device_kernels.sh
set -uo pipefail
OUT=${OUT:-device_out}
mkdir -p "$OUT"
STAGES=${STAGES:-"build test sanitize bench"}
ARCHS=${CUDA_ARCHS:-90}
BENCH_ARGS=${BENCH_ARGS:-"--model"}
export WTCONV_KERNELS_LIB=$PWD/build/plugin/libwtconv_kernels_capi.so
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
export PYTHONUNBUFFERED=1
status=0
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee "$OUT/gpu.txt"

if [[ " $STAGES " == *" build "* ]]; then
  start=$SECONDS
  { cmake -S plugin -B build/plugin -G Ninja -DCMAKE_CUDA_ARCHITECTURES="$ARCHS" -DWTCONV_PTXAS_VERBOSE=ON \
    && cmake --build build/plugin -j; } > "$OUT/build.log" 2>&1 || { echo "BUILD FAILED"; tail -40 "$OUT/build.log"; exit 1; }
  echo "build: ok ($((SECONDS - start)) s); spills: $(grep -c '[1-9][0-9]* bytes spill' "$OUT/build.log" || true)"
fi

if [[ " $STAGES " == *" test "* ]]; then
  start=$SECONDS
  python3 -m pytest -q -p no:cacheprovider tests/test_kernels_gpu.py ${PYTEST_ARGS:-} > "$OUT/pytest.log" 2>&1 || status=1
  echo "pytest ($((SECONDS - start)) s): $(tail -1 "$OUT/pytest.log")"
  grep -E "^(FAILED|ERROR)" "$OUT/pytest.log" | head -20
fi

if [[ " $STAGES " == *" sanitize "* ]]; then
  for tool in memcheck racecheck; do
    start=$SECONDS
    compute-sanitizer --tool $tool --error-exitcode 3 build/plugin/wtconv_sanitize_runner > "$OUT/sanitize_$tool.log" 2>&1
    rc=$?
    [[ $rc -ne 0 ]] && status=1
    echo "compute-sanitizer $tool: rc=$rc ($((SECONDS - start)) s): $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$OUT/sanitize_$tool.log" | tail -1) / $(tail -1 "$OUT/sanitize_$tool.log" | grep failures)"
  done
fi

if [[ " $STAGES " == *" profile "* ]]; then
  ncu --clock-control none --section SpeedOfLight --section Occupancy --section WarpStateStats --section LaunchStats \
    --section MemoryWorkloadAnalysis -k regex:"levelKernel|poolKernel" --launch-skip 0 --launch-count ${NCU_COUNT:-12} \
    python3 tools/profile_kernels.py > "$OUT/ncu.log" 2>&1
  grep -E "levelKernel|poolKernel|Duration|Compute \(SM\) Throughput|DRAM Throughput|Achieved Occupancy|Stall|Registers|Block Limit|Memory Throughput" "$OUT/ncu.log" | head -${NCU_LINES:-80}
fi

if [[ " $STAGES " == *" bench "* ]]; then
  start=$SECONDS
  python3 -m wtconv_trt.commands.bench_layer --out "$OUT" $BENCH_ARGS \
    --command-line "STAGES=bench BENCH_ARGS='$BENCH_ARGS' tools/device_kernels.sh" > "$OUT/bench.log" 2>&1 || status=1
  echo "bench ($((SECONDS - start)) s)"
  grep -E "^(model|contiguous|Worst)|Error|error" "$OUT/bench.log" | head -30
fi
exit $status
