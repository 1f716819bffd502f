#!/usr/bin/env bash
# tools/device_ort.sh — on a GPU machine, from the repository root: build libwtconv_ort.so with its CUDA op, run the
# ONNX Runtime tests (the CUDA op's GPU tests, CUDA graphs included, and the CPU, channels-last, shape-inference and
# malformed-node tests on the same library) and the GPU benchmark (benchmarks/bench_ort.py --device cuda: WTConvNeXt-T's
# plugin export, NCHW and channels-last blocks, beside timm's ConvNeXt-T exported both ways and the standard-op
# export, fp16 and fp32, B=64 and B=1, with and without ONNX Runtime's CUDA graphs, the optimized graphs' op types,
# a profile by operator). ONNX Runtime with the CUDA execution provider must be importable: point PYTHONPATH at an
# unpacked onnxruntime-gpu (1.17 or newer), e.g.
#   PYTHONPATH=/tmp/site OUT=... tools/device_ort.sh
# ONNX Runtime's C API headers: $ONNXRUNTIME_INCLUDE_DIR, else ../shared/onnxruntime-headers/<version>/include or
# third_party/onnxruntime-headers/<version>/include (an ignored folder: carry it). Results:
# $OUT/bench_ort_cuda.{json,md} (rewritten after every timing phase: a run stopped early leaves what it measured),
# $OUT/bench.log; logs: $OUT/ort_logs.tgz; a short table last. About 5 minutes on one H200 (QUICK=1: about 3).
#   STAGES="build test bench" CUDA_ARCHS=90 QUICK=1 BENCH_ARGS="--runs 100" PYTEST_ARGS="-k graph" tools/device_ort.sh
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/device_lib.sh"
device_start
STAGES=${STAGES:-"build test bench"}
BUILD=build/ort_gpu
export PYTHONPATH=${PYTHONPATH:+$PYTHONPATH:}$PWD
after_summary() {
  [[ -f "$OUT/bench_ort_cuda.md" ]] && sed -n '/^## Targets/,/^$/p' "$OUT/bench_ort_cuda.md" | head -30
}
finish() {
  device_finish "$OUT/ort_logs.tgz"
}

gpu_info | tee "$LOGS/gpu.txt"
python3 - > "$LOGS/onnxruntime.txt" 2>&1 <<'PY'
import onnxruntime as ort
print(ort.__version__, ort.__file__, ort.get_available_providers())
assert "CUDAExecutionProvider" in ort.get_available_providers(), "no CUDAExecutionProvider: put onnxruntime-gpu on PYTHONPATH"
PY
if [[ $? -ne 0 ]]; then
  cat "$LOGS/onnxruntime.txt"; note "onnxruntime-gpu: NOT USABLE (see above)"; status=1; finish
fi
note "onnxruntime: $(head -1 "$LOGS/onnxruntime.txt")"

ONNXRUNTIME_INCLUDE_DIR=${ONNXRUNTIME_INCLUDE_DIR:-$(ort_headers)}
if [[ ! -f "${ONNXRUNTIME_INCLUDE_DIR:-}/onnxruntime_c_api.h" ]]; then
  note "headers: onnxruntime_c_api.h not found (set ONNXRUNTIME_INCLUDE_DIR or carry third_party/onnxruntime-headers)"
  status=1; finish
fi
ONNXRUNTIME_INCLUDE_DIR=$(cd "$ONNXRUNTIME_INCLUDE_DIR" && pwd)
export ONNXRUNTIME_INCLUDE_DIR

if [[ " $STAGES " == *" build "* ]]; then
  STAGE_TAIL=40 stage build build_plugin $BUILD -DWTCONV_BUILD_PLUGIN_HARNESS=OFF -DWTCONV_ORT_WERROR=ON \
    -DONNXRUNTIME_INCLUDE_DIR="$ONNXRUNTIME_INCLUDE_DIR" --target wtconv_ort || { echo "BUILD FAILED"; finish; }
  note "build: $(python3 -c "from wtconv_libs import lookup; print(lookup.ort_library_info('$BUILD/onnxruntime/libwtconv_ort.so'))")"
fi
export WTCONV_ORT_LIB=$PWD/$BUILD/onnxruntime/libwtconv_ort.so

if [[ " $STAGES " == *" test "* ]]; then
  # shellcheck disable=SC2086  # PYTEST_ARGS: several words
  STAGE_TAIL=1 stage pytest python3 -m pytest -q -rs -p no:cacheprovider tests/test_ort_gpu.py tests/test_ort_cpu.py \
    tests/test_ort_errors.py tests/test_ort_channels_last.py tests/test_ort_shape.py ${PYTEST_ARGS:-}
  note "pytest: $(tail -1 "$LOGS/pytest.log")"
  grep -E "^(FAILED|ERROR)|^SKIPPED" "$LOGS/pytest.log" | head -20
  sed -n '/worst measured errors/,$p' "$LOGS/pytest.log" | head -12
fi

if [[ " $STAGES " == *" bench "* ]]; then
  start=$SECONDS
  # QUICK=1: 10 timed rounds and 3 profiled runs instead of 40 and 10 (a first look, or a budget running out).
  quick=$([[ "${QUICK:-0}" == 1 ]] && echo "--quick" || echo "--runs 40")
  # shellcheck disable=SC2034,SC2086  # status: read by device_finish; quick, BENCH_ARGS: several words
  python3 -m benchmarks.bench_ort --device cuda --out "$OUT" --library "$WTCONV_ORT_LIB" --profile $quick \
    ${BENCH_ARGS:-} > "$OUT/bench.log" 2>&1 || status=1
  note "bench ($((SECONDS - start)) s): $(grep -c '^target' "$OUT/bench.log") targets evaluated"
  sed -n '/^WTConvNeXt-T in ONNX Runtime/,$p' "$OUT/bench.log"
  [[ -f "$OUT/bench_ort_cuda.md" ]] || tail -30 "$OUT/bench.log"
fi
finish
