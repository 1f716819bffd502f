#!/usr/bin/env bash
# tools/device_all.sh — one call on the GPU machine (repository root, .trt carried): kernel build + GPU
# tests + compute-sanitizer, the TensorRT plugin's interface harness against TensorRT 10.16 and 11.1
# headers, the GPU tests of the custom op, and the layout benchmark. Logs are packed into $OUT/logs.tgz
# (the device returns at most 8 files); a summary is printed last.
set -uo pipefail
final_out=${OUT:-device_out}
logs=$(mktemp -d)
status=0
summary=()
run_stage() {  # name, command...
    local name=$1; shift
    local start=$SECONDS
    "$@" > "$logs/$name.txt" 2>&1
    local rc=$?
    [ $rc -ne 0 ] && status=1
    summary+=("$name: rc=$rc ($((SECONDS - start)) s)")
    echo "===== $name rc=$rc"; tail -25 "$logs/$name.txt"
}
export PYTHONUNBUFFERED=1
run_stage kernels env OUT="$logs/kernels" STAGES="build test sanitize" tools/device_kernels.sh
export WTCONV_KERNELS_LIB=$PWD/build/plugin/libwtconv_kernels_capi.so PYTHONPATH=$PWD
run_stage plugin env OUT="$logs/plugin" plugin/trt/harness/run_device.sh
run_stage pytest_gpu python3 -m pytest -q -p no:cacheprovider -rs tests/test_model_gpu.py
run_stage layouts python3 -m benchmarks.bench_layouts --out "$final_out"
tar czf "$final_out/logs.tgz" -C "$logs" .
printf '%s\n' "${summary[@]}"
exit $status
