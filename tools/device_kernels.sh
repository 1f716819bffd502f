#!/usr/bin/env bash
# tools/device_kernels.sh — on a GPU machine, from the repository root: build the kernels (sm_90 unless CUDA_ARCHS
# says otherwise), run the GPU tests (kernels, custom op, models), compute-sanitizer memcheck + racecheck on the
# standalone runner, ncu profiles, the A/B of builds and the layer / model benchmark. Logs go to LOGS (default a
# fresh temporary folder), packed into ${OUT:-device_out}/logs.tgz; results to ${OUT}: bench_layer.{json,md,png},
# ab.{json,md}; a short summary is printed last. Stages run in the order given:
#   STAGES="build test sanitize bench" BENCH_ARGS="--quick" tools/device_kernels.sh
#
#   build                   build/plugin, every target (PREBUILT=<dir> with libwtconv_kernels_capi.so and
#                           wtconv_sanitize_runner built elsewhere, same CUDA major, skips it when the library loads)
#   build:<name>[:<flags>]  a named build of this tree with CUDA compiler flags (one word, commas between several
#                           flags, e.g. -DWTCONV_FIXED_PLANES=1,-DWTCONV_GROUP_ITEMS=1) in
#                           ${AB_BUILDS:-build/ab}/<name>: the library and the sanitizer's runner. Named builds may
#                           also come from elsewhere (same CUDA major), put in AB_BUILDS and listed in LIBS
#   test                    the GPU tests (TEST_FILES, PYTEST_K for pytest -k, PYTEST_ARGS)
#   sanitize                compute-sanitizer memcheck and racecheck over the runner's cases
#   profile                 ncu of the kernels at the benchmark shapes (benchmarks/profile_kernels.py)
#   profile:<name>          ncu of named build <name>'s whole-plane kernels at the stage shapes, with per-SASS counts
#                           exported as CSV in the logs (details_<name>.log, source_<name>.log) for
#                           benchmarks/ncu_summary.py and benchmarks/sass_phases.py --counts
#   ab                      builds timed interleaved in one process (benchmarks/ab_kernels.py; AB_GROUPS, AB_ARGS)
#   bench                   the layer benchmark (wtconv-trt bench-layer; BENCH_ARGS)
#
# With named builds (LIBS: their names, by default those of the build:<name> stages in order) the first is the
# baseline and the second the build under test: test, sanitize and profile run on it and ab times them all. Without
# them, test, sanitize and profile run on build/plugin and ab times it against AB_REF_LIB (a library built from the
# code before the change) or, with AB_FLAGS, against a second build of this code with those CUDA flags (later stages
# then use the faster one, geometric mean over the set). A kernel change, with its profiles (docs/bench/README.md):
#   STAGES="build:ref:-DWTCONV_FIXED_PLANES=0 build:new:-DWTCONV_FIXED_PLANES=1 test sanitize profile:ref
#     profile:new ab" PYTEST_K="fixed or stage_shapes or padded" tools/device_kernels.sh
# Time limits in seconds (none unless set): TEST_S, SANITIZE_S, PROFILE_S, AB_S, so that a call ends in time.
# The official fused kernels join the benchmark when a checkout of BGU-CS-VIL/WTConv is at
# ${OFFICIAL:-third_party/WTConv} (never committed: /third_party/ is ignored).
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/device_lib.sh"
device_start "${LOGS:-}"
STAGES=${STAGES:-"build test sanitize bench"}
BENCH_ARGS=${BENCH_ARGS:-""}
OFFICIAL=${OFFICIAL:-third_party/WTConv}
AB_BUILDS=${AB_BUILDS:-build/ab}
TEST_FILES=${TEST_FILES:-"tests/test_kernels_gpu.py tests/test_model_gpu.py"}
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
export MAX_JOBS=${MAX_JOBS:-16}
gpu_info | tee "$LOGS/gpu.txt"
finish() {
  device_finish "$OUT/logs.tgz"
}

# The named builds, and the build the tests, the sanitizer and the profile run on.
if [[ -z "${LIBS:-}" ]]; then
  LIBS=""
  for s in $STAGES; do
    if [[ "$s" == build:* ]]; then
      s=${s#build:}
      LIBS="$LIBS ${s%%:*}"
    fi
  done
fi
read -r -a names <<< "$LIBS"
named_dir() { echo "$PWD/$AB_BUILDS/$1"; }
BUILD=$PWD/build/plugin
if [[ ${#names[@]} -gt 0 ]]; then
  BUILD=$(named_dir "${names[$((${#names[@]} > 1 ? 1 : 0))]}")
fi
limit() { # limit SECONDS COMMAND...: COMMAND under `timeout` when SECONDS is set
  local seconds=$1
  shift
  if [[ -n "$seconds" ]]; then
    timeout "$seconds" "$@"
  else
    "$@"
  fi
}

if [[ -n "${PREBUILT:-}" ]] && python3 -c "import ctypes, sys; ctypes.CDLL(sys.argv[1])" "$PREBUILT/libwtconv_kernels_capi.so" 2>/dev/null; then
  mkdir -p build && rm -rf build/plugin && cp -r "$PREBUILT" build/plugin && STAGES=$(sed -E 's/(^| )build( |$)/ /' <<< "$STAGES")
  note "build: the prebuilt library of $PREBUILT"
fi

stage_build() {
  STAGE_TAIL=40 stage build build_plugin build/plugin -DWTCONV_PTXAS_VERBOSE=ON || { echo "BUILD FAILED"; finish; }
  note "build: spills: $(grep -c '[1-9][0-9]* bytes spill' "$LOGS/build.log" || true)"
}

stage_named_build() { # <name>[:<CUDA flags>]
  local name=${1%%:*} flags=""
  [[ "$1" == *:* ]] && flags=${1#*:}
  flags=${flags//,/ }
  STAGE_TAIL=20 stage "build_$name" build_plugin "$AB_BUILDS/$name" -DWTCONV_PTXAS_VERBOSE=ON \
    ${flags:+"-DCMAKE_CUDA_FLAGS=$flags"} --target wtconv_kernels_capi --target wtconv_sanitize_runner
  note "build $name (${flags:-no flags}): spills: $(grep -c '[1-9][0-9]* bytes spill' "$LOGS/build_$name.log" || true)"
}

stage_test() {
  # shellcheck disable=SC2086  # TEST_FILES, PYTEST_ARGS: several words
  STAGE_TAIL=1 stage pytest limit "${TEST_S:-}" env "WTCONV_KERNELS_LIB=$BUILD/libwtconv_kernels_capi.so" \
    python3 -m pytest -q -rs -p no:cacheprovider $TEST_FILES ${PYTEST_K:+-k "$PYTEST_K"} ${PYTEST_ARGS:-}
  note "pytest: $(tail -1 "$LOGS/pytest.log")"
  grep -E "^(FAILED|ERROR)" "$LOGS/pytest.log" | cut -c1-300 | head -30
  sed -n '/error report\|measured agreement\|Worst\|worst/,$p' "$LOGS/pytest.log" | head -20
}

stage_sanitize() {
  local tool
  for tool in memcheck racecheck; do
    STAGE_TAIL=0 stage "sanitize_$tool" limit "${SANITIZE_S:-}" compute-sanitizer --tool $tool --error-exitcode 3 \
      "$BUILD/wtconv_sanitize_runner"
    note "compute-sanitizer $tool: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$LOGS/sanitize_$tool.log" | tail -1) / $(grep -c '^ok' "$LOGS/sanitize_$tool.log") ok, $(tail -1 "$LOGS/sanitize_$tool.log" | grep failures)"
  done
}

stage_profile() {
  STAGE_TAIL=0 stage ncu limit "${PROFILE_S:-}" env "WTCONV_KERNELS_LIB=$BUILD/libwtconv_kernels_capi.so" \
    ncu --clock-control none --section SpeedOfLight --section Occupancy --section WarpStateStats --section LaunchStats \
    --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis --section InstructionStats \
    -k regex:"levelKernel|poolKernel|smallPlaneKernel|tinyPlaneKernel|groupPlaneKernel" \
    --launch-skip 0 --launch-count "${NCU_COUNT:-12}" python3 -m benchmarks.profile_kernels
  grep -E "PlaneKernel|levelKernel|poolKernel|Duration|Compute \(SM\) Throughput|DRAM Throughput|Achieved Occupancy|Registers Per|Block Limit|Memory Throughput|Issue Slots Busy|L1/TEX Hit|Shared" "$LOGS/ncu.log" | head -"${NCU_LINES:-80}"
}

# Named build <name>'s whole-plane kernels at the stage shapes (benchmarks/profile_kernels.py), with per-SASS
# instruction counts and stall samples (SourceCounters); the report's details and source pages stay in the logs as
# CSV (details_<name>.log, source_<name>.log).
stage_named_profile() { # <name>
  local name=$1 rep="$LOGS/prof_$1"
  STAGE_TAIL=0 stage ncu_version ncu --version
  # shellcheck disable=SC2086  # PROFILE_ARGS: several words
  STAGE_TAIL=0 stage "ncu_$name" limit "${PROFILE_S:-}" env "WTCONV_KERNELS_LIB=$(named_dir "$name")/libwtconv_kernels_capi.so" \
    ncu --clock-control none --section SpeedOfLight --section Occupancy --section LaunchStats \
    --section WarpStateStats --section ComputeWorkloadAnalysis --section InstructionStats --section SchedulerStats \
    --section MemoryWorkloadAnalysis --section SourceCounters \
    -k regex:"smallPlaneKernel|tinyPlaneKernel|groupPlaneKernel" --launch-count "${NCU_COUNT:-8}" \
    -o "$rep" python3 -m benchmarks.profile_kernels ${PROFILE_ARGS:---stages}
  STAGE_TAIL=0 stage "details_$name" ncu -i "$rep.ncu-rep" --page details --csv
  STAGE_TAIL=0 stage "source_$name" ncu -i "$rep.ncu-rep" --page source --csv --print-source sass \
    || STAGE_TAIL=0 stage "source_$name" ncu -i "$rep.ncu-rep" --page source --csv
  rm -f "$rep.ncu-rep"
  STAGE_TAIL=20 stage "profile_$name" python3 -m benchmarks.ncu_summary "$LOGS/details_$name.log"
}

stage_ab() {
  if [[ ${#names[@]} -gt 0 ]]; then
    local args=() name
    for name in "${names[@]}"; do args+=(--lib "$name=$(named_dir "$name")/libwtconv_kernels_capi.so"); done
    # shellcheck disable=SC2086  # AB_ARGS: several words
    STAGE_TAIL=0 stage ab limit "${AB_S:-}" python3 -m benchmarks.ab_kernels "${args[@]}" \
      ${AB_GROUPS:+--groups "$AB_GROUPS"} --json "$OUT/ab.json" --markdown "$OUT/ab.md" ${AB_ARGS:-}
    grep -E "^- " "$OUT/ab.md" 2>/dev/null
    note "ab: $OUT/ab.md (${names[*]})"
    return
  fi
  local before=${AB_REF_LIB:-} after=$BUILD/libwtconv_kernels_capi.so
  if [[ -z "$before" && -z "${AB_FLAGS:-}" ]]; then
    note "ab: not run: it needs named builds (build:<name> stages or LIBS), AB_REF_LIB or AB_FLAGS"
    status=1
    return
  fi
  if [[ -z "$before" ]]; then
    local flags=$AB_FLAGS
    STAGE_TAIL=20 stage build_b build_plugin build/plugin_b -DWTCONV_PTXAS_VERBOSE=ON "-DCMAKE_CUDA_FLAGS=$flags" ||
      echo "BUILD B FAILED"
    before=$after
    after=$PWD/build/plugin_b/libwtconv_kernels_capi.so
  fi
  # shellcheck disable=SC2086  # AB_ARGS: several words
  stage ab limit "${AB_S:-}" python3 -m benchmarks.ab_kernels --lib "before=$before" --lib "after=$after" \
    ${AB_GROUPS:+--groups "$AB_GROUPS"} --json "$OUT/ab.json" --markdown "$OUT/ab.md" ${AB_ARGS:-}
  grep -E "^- " "$OUT/ab.md" 2>/dev/null
  if [[ -n "${AB_FLAGS:-}" && -z "${AB_REF_LIB:-}" ]] && python3 -c "
import json, math, sys
rows = json.load(open(sys.argv[1]))['rows']
sys.exit(0 if sum(math.log(r['ratio']) for r in rows) < 0 else 1)" "$OUT/ab.json" 2>/dev/null; then
    BUILD=$PWD/build/plugin_b
  fi
  note "ab: $OUT/ab.md; later stages use $BUILD"
}

stage_bench() {
  local official_arg="" cmdline
  [[ -f "$OFFICIAL/fast_wtconv/wtconv_cuda.py" ]] && official_arg="--official $OFFICIAL"
  cmdline="STAGES=bench BENCH_ARGS='$BENCH_ARGS' tools/device_kernels.sh (python3 -m wtconv_trt bench-layer --out OUT $official_arg $BENCH_ARGS)"
  # shellcheck disable=SC2086  # official_arg, BENCH_ARGS: several words
  STAGE_TAIL=0 stage bench env "WTCONV_KERNELS_LIB=$BUILD/libwtconv_kernels_capi.so" \
    python3 -m wtconv_trt bench-layer --out "$OUT" --force $official_arg $BENCH_ARGS --command-line "$cmdline"
  grep -E "Traceback|Error|failed" "$LOGS/bench.log" | head -10
  sed -n '/^## Targets/,/^## Layers/p' "$OUT/bench_layer.md" 2>/dev/null
  sed -n '/^## Per-call/,$p' "$OUT/bench_layer.md" 2>/dev/null
}

for s in $STAGES; do
  case $s in
  build) stage_build ;;
  build:*) stage_named_build "${s#build:}" ;;
  test) stage_test ;;
  sanitize) stage_sanitize ;;
  profile) stage_profile ;;
  profile:*) stage_named_profile "${s#profile:}" ;;
  ab) stage_ab ;;
  bench) stage_bench ;;
  *) note "unknown stage $s (build, build:<name>[:<flags>], test, sanitize, profile, profile:<name>, ab, bench)"; status=1 ;;
  esac
done
finish
