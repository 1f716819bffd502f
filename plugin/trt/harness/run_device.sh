#!/usr/bin/env bash
# Builds the plugin and its interface harness against each TensorRT header tree and runs the CTest
# harness (host part, export checks, case generation, GPU part). One command for a GPU machine:
#
#   plugin/trt/harness/run_device.sh [TENSORRT_ROOT ...]      (default: every .trt/*/ holding include/NvInferRuntime.h)
#
# Each TENSORRT_ROOT holds include/NvInferRuntime.h (a TensorRT install or the public repository's headers).
# Environment: CMAKE_CUDA_ARCHITECTURES (default 90), OUT (if set, full logs are copied there), HARNESS_CMAKE_ARGS
# (further -D options for every tree, e.g. -DWTCONV_KERNELS_PREBUILT=<build>/libwtconv_kernels.a to link kernels
# compiled once instead of compiling them in each tree).
# Prints per header version: warnings in plugin/trt, the CTest summary, the harness's pass counts and any
# FAIL/SKIP line. Exits non-zero if any build or test failed, or if a GPU was found but the GPU part skipped.
set -uo pipefail
cd "$(dirname "$0")/../../.." || exit 1
repo=$(pwd)
# shellcheck source=tools/device_lib.sh
source tools/device_lib.sh
roots=("$@")
if [ ${#roots[@]} -eq 0 ]; then
    for dir in .trt/*/; do
        [ -f "${dir}include/NvInferRuntime.h" ] && roots+=("${dir%/}")
    done
fi
if [ ${#roots[@]} -eq 0 ]; then
    echo "FAIL no TensorRT header tree given and none under .trt/*/include/NvInferRuntime.h"
    exit 1
fi
export CUDA_ARCHS=${CMAKE_CUDA_ARCHITECTURES:-90}
jobs=$(nproc 2>/dev/null || echo 4)
status=0
have_gpu=0
if gpus=$(gpu_info) && [ -n "$gpus" ]; then
    have_gpu=1
    echo "$gpus"
fi

for root in "${roots[@]}"; do
    name=$(basename "$root")
    build="$repo/build/plugin-harness-$name"
    log="$build.log"
    echo "=== TensorRT headers: $root (build $build)"
    if [ ! -f "$root/include/NvInferRuntime.h" ]; then
        echo "FAIL $root/include/NvInferRuntime.h not found"
        status=1
        continue
    fi
    # shellcheck disable=SC2086 # HARNESS_CMAKE_ARGS is a list of options
    if ! configure_plugin "$build" -DTensorRT_ROOT="$(cd "$root" && pwd)" -DPython3_EXECUTABLE="$(command -v python3)" \
        ${HARNESS_CMAKE_ARGS:-} >"$log" 2>&1; then
        tail -30 "$log"
        echo "FAIL configure ($root)"
        status=1
        continue
    fi
    # Rebuild the plugin/trt targets from scratch so every warning is counted.
    cmake --build "$build" --target clean >>"$log" 2>&1
    if ! cmake --build "$build" -j"$jobs" >>"$log" 2>&1; then
        grep -E "error|Error" "$log" | head -30
        echo "FAIL build ($root)"
        status=1
        continue
    fi
    warnings=$(grep -E "plugin/trt/.*warning:" "$log" | sort -u | wc -l)
    echo "warnings in plugin/trt (-Wall -Wextra): $warnings"
    grep -E "plugin/trt/.*warning:" "$log" | sort -u | head -20
    [ "$warnings" -eq 0 ] || status=1
    ctest --test-dir "$build/trt" --output-on-failure -V >"$build.ctest.log" 2>&1
    ctest_rc=$?
    sed -E 's/^[0-9]+: //' "$build.ctest.log" \
        | grep -E "^(host|gpu): [0-9]+ passed|^FAIL|^SKIP|^INFO (device|TensorRT)|channels-last I/O|PASS exports|PASS ABI record|tests passed|Skipped|\*\*\*" \
        | awk '!seen[$0]++'
    [ $ctest_rc -eq 0 ] || status=1
    if [ $have_gpu -eq 1 ] && ! grep -qE "gpu: [0-9]+ passed, 0 failed" "$build.ctest.log"; then
        echo "FAIL a GPU is present but the GPU part did not pass"
        status=1
    fi
    if [ -n "${OUT:-}" ] && [ -d "${OUT}" ]; then
        cp "$log" "$OUT/build-$name.log"
        cp "$build.ctest.log" "$OUT/ctest-$name.log"
    fi
done
echo "run_device.sh: $([ $status -eq 0 ] && echo OK || echo FAILED)"
exit $status
