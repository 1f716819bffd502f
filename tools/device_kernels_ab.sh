#!/usr/bin/env bash
# tools/device_kernels_ab.sh — one GPU call for a kernel change, from libraries built elsewhere (same CUDA major):
# correctness first (GPU tests on the new build), compute-sanitizer on its runner, ncu profiles of the whole-plane
# kernels of each build (instructions per source line, stalls, pipes), and the A/B of the builds in one process
# (tools/ab_kernels.py). Run from the repository root on the GPU machine:
#   PREBUILT=<dir> STAGES="test sanitize profile:ref profile:new ab" tools/device_kernels_ab.sh
# <dir>/<name>/libwtconv_kernels_capi.so for each name in LIBS (default "ref new"; the first is the baseline, the
# second the build under test, further ones are timed beside them), and <dir>/<second>/wtconv_sanitize_runner.
# The stage build:<name>[:<CUDA flags>] builds one of them here from this tree (sm_90 unless CUDA_ARCHS), e.g.
# the fixed-geometry kernels against the kernels they would replace (docs/bench/README.md):
#   PREBUILT=build/ab STAGES="build:ref build:new:-DWTCONV_FIXED_PLANES=1 test sanitize profile:ref profile:new ab"
# Stages run in the order given; profile:<name> profiles build <name>. Each stage has a time limit (seconds:
# TEST_S, SANITIZE_S, PROFILE_S, AB_S) so the call ends in time. PYTEST_K selects tests (pytest -k), AB_GROUPS
# the A/B groups (tools/ab_kernels.py --groups), AB_ARGS further A/B options. Results go to ${OUT}: ab.{json,md}
# and logs.tgz (logs, ncu CSV exports); a short summary is printed last.
set -uo pipefail
OUT=${OUT:-device_out}
mkdir -p "$OUT"
LOGS=$(mktemp -d)
STAGES=${STAGES:-"test profile ab"}
LIBS=${LIBS:-"ref new"}
PREBUILT=${PREBUILT:?PREBUILT=<dir with one folder of libraries per build>}
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
export PYTHONUNBUFFERED=1
read -r -a names <<< "$LIBS"
lib() { echo "$PWD/$PREBUILT/$1/libwtconv_kernels_capi.so"; }
export WTCONV_KERNELS_LIB=$(lib "${names[1]}")
summary=()
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee "$LOGS/gpu.txt"
summary+=("gpu: $(cat "$LOGS/gpu.txt")")
finish() {
  tar czf "$OUT/logs.tgz" -C "$LOGS" . 2>/dev/null
  echo "===== summary"
  printf '%s\n' "${summary[@]}"
}
trap finish EXIT


stage_test() {
  local start=$SECONDS
  timeout "${TEST_S:-240}" python3 -m pytest -q -rs -p no:cacheprovider tests/test_kernels_gpu.py ${TEST_FILES:-} \
    ${PYTEST_K:+-k "$PYTEST_K"} > "$LOGS/pytest.log" 2>&1
  summary+=("pytest rc=$? ($((SECONDS - start)) s): $(tail -1 "$LOGS/pytest.log")")
  grep -E "^(FAILED|ERROR)" "$LOGS/pytest.log" | cut -c1-300 | head -20
  sed -n '/error report\|Worst\|worst/,$p' "$LOGS/pytest.log" | head -30
}

stage_sanitize() {
  local tool start rc
  for tool in memcheck racecheck; do
    start=$SECONDS
    timeout "${SANITIZE_S:-150}" compute-sanitizer --tool $tool --error-exitcode 3 \
      "$PREBUILT/${names[1]}/wtconv_sanitize_runner" > "$LOGS/sanitize_$tool.log" 2>&1
    rc=$?
    summary+=("compute-sanitizer $tool rc=$rc ($((SECONDS - start)) s): $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' \
      "$LOGS/sanitize_$tool.log" | tail -1) / $(grep -c '^ok' "$LOGS/sanitize_$tool.log") ok, $(tail -1 "$LOGS/sanitize_$tool.log")")
  done
}

# The whole-plane kernels of one build at the stage shapes (tools/profile_kernels.py), with per-SASS instruction
# counts (SourceCounters) exported as CSV for the per-phase split (tools/sass_phases.py).
stage_profile() {
  local name=$1 start=$SECONDS rep="$LOGS/prof_$1"
  ncu --version | tail -1 > "$LOGS/ncu_version.txt"
  WTCONV_KERNELS_LIB=$(lib "$name") timeout "${PROFILE_S:-120}" ncu --clock-control none \
    --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats \
    --section ComputeWorkloadAnalysis --section InstructionStats --section SchedulerStats \
    --section MemoryWorkloadAnalysis --section SourceCounters \
    -k regex:"smallPlaneKernel|tinyPlaneKernel|groupPlaneKernel" --launch-count "${NCU_COUNT:-8}" \
    -o "$rep" python3 -m benchmarks.profile_kernels ${PROFILE_ARGS:---stages} > "$LOGS/ncu_$name.log" 2>&1
  summary+=("ncu $name rc=$? ($((SECONDS - start)) s)")
  ncu -i "$rep.ncu-rep" --page details --csv > "$LOGS/details_$name.csv" 2>> "$LOGS/ncu_$name.log"
  ncu -i "$rep.ncu-rep" --page source --csv --print-source sass > "$LOGS/source_$name.csv" 2>> "$LOGS/ncu_$name.log" \
    || ncu -i "$rep.ncu-rep" --page source --csv > "$LOGS/source_$name.csv" 2>> "$LOGS/ncu_$name.log"
  rm -f "$rep.ncu-rep"
  python3 - "$LOGS/details_$name.csv" <<'PY' | tee -a "$LOGS/profile_summary.txt"
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
keys = ("Duration", "Executed Instructions", "Issue Slots Busy", "Achieved Occupancy", "Registers Per Thread",
        "Dynamic Shared Memory Per Block", "Block Size", "Grid Size")
seen = {}
for r in rows:
    if r.get("Metric Name") in keys:
        seen.setdefault((r["ID"], r["Kernel Name"][:60]), {})[r["Metric Name"]] = f'{r["Metric Value"]} {r["Metric Unit"]}'
for (i, k), m in seen.items():
    print(i, k, "|", "; ".join(f"{n}={m.get(n, '')}" for n in keys))
PY
}

stage_ab() {
  local start=$SECONDS args=() name
  for name in "${names[@]}"; do args+=(--lib "$name=$(lib "$name")"); done
  timeout "${AB_S:-240}" python3 -m benchmarks.ab_kernels "${args[@]}" ${AB_GROUPS:+--groups "$AB_GROUPS"} ${AB_ARGS:-} \
    --json "$OUT/ab.json" --markdown "$OUT/ab.md" > "$LOGS/ab.log" 2>&1
  summary+=("ab rc=$? ($((SECONDS - start)) s): $(grep -c ratio= "$LOGS/ab.log") cases")
  cut -c1-240 "$LOGS/ab.log" | grep "ratio=" | tail -60
}

stage_build() {
  local name=${1%%:*} flags="" start=$SECONDS
  [[ "$1" == *:* ]] && flags=${1#*:}
  { cmake -S plugin -B "$PREBUILT/$name" -G Ninja -DCMAKE_CUDA_ARCHITECTURES="${CUDA_ARCHS:-90}" \
      -DWTCONV_PTXAS_VERBOSE=ON ${flags:+-DCMAKE_CUDA_FLAGS="$flags"} \
      && cmake --build "$PREBUILT/$name" -j --target wtconv_kernels_capi wtconv_sanitize_runner; } \
    > "$LOGS/build_$name.log" 2>&1
  summary+=("build $name ($flags) rc=$? ($((SECONDS - start)) s); spills: $(grep -c '[1-9][0-9]* bytes spill' "$LOGS/build_$name.log")")
}

for stage in $STAGES; do
  case $stage in
  build:*) stage_build "${stage#build:}" ;;
  test) stage_test ;;
  sanitize) stage_sanitize ;;
  profile:*) stage_profile "${stage#profile:}" ;;
  ab) stage_ab ;;
  *) echo "unknown stage $stage" ;;
  esac
done
