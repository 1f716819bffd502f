#!/usr/bin/env bash
# tools/device_serving.sh — Triton serving on a GPU machine, fp16, PyTorch on our CUDA kernels inside the server
# (RUNTIME=onnxruntime: the exported file itself in onnxruntime-gpu's CUDA EP with libwtconv_ort.so), a bounded load
# test beside the throughput of calling the same model directly (docs/serving.md).
#
#   tools/device_serving.sh pack   # where pip reaches PyPI: fills .whl/serving/ (about 30 MB): the tritonclient,
#                                  # python-rapidjson and polygraphy (for validate) wheels for Python 3.12, and
#                                  # tritonserver-py3.12.tar.xz, the server binary, Python backend, 3.12 stub and the
#                                  # libraries they load, cut from the nvidia-pytriton wheel
#   tools/device_serving.sh        # on a GPU machine (no network needed), repository root, .whl/serving present
#
# Stages (each logged under $OUT; a table and one result line per model are printed last): build the kernel
# library (sm_90), export the shipped digits model and WTConvNeXt-T (random weights) to fp16 ONNX (plugin
# exports: one WTConv2d node per layer), then for each: `wtconv-trt serve --runtime torch-cuda --load-test N` (starts
# tritonserver on loopback ports, checks every response against the same runtime run directly, measures direct
# throughput per batch size, stops the server).
#
# RUNTIME=onnxruntime: the build stage builds libwtconv_ort.so with its CUDA op (sm_90) instead, from ONNX Runtime's
# C API headers ($ONNXRUNTIME_INCLUDE_DIR, else third_party/onnxruntime-headers/<version>/include: carry it), and
# each model is served with `--runtime onnxruntime --device cuda --ort-library` that library: onnxruntime-gpu's CUDA
# EP inside the server, TF32 off. onnxruntime-gpu must be importable with its CUDAExecutionProvider (e.g. unpacked in
# /tmp/site, which is on PYTHONPATH below and which the served model's Python sees too); the script stops at once
# when it is not.
#
# Knobs (defaults for the GPU machine): PYV (Python of the stub and wheels, 3.12), WHEELS (.whl/serving),
# RUNTIME (torch-cuda), SKIP_BUILD (1: use the built library as it is), DIGITS_REQUESTS (2000),
# TINY_REQUESTS (1000; 0 skips WTConvNeXt-T), CUDA_ARCHS (90), DEVICE (serve's and validate's --device for
# onnxruntime, default cuda), VALIDATE (1: with RUNTIME=onnxruntime, also `wtconv-trt validate --device` of the
# exports, WTConvNeXt-T in fp16 and fp32, and the integration's GPU tests). With PYV=3.11 RUNTIME=onnxruntime
# DEVICE=cpu the same script runs on a CPU machine, which is how its shell logic was checked.
set -uo pipefail
PYTRITON=0.7.0
TRITONCLIENT=2.73.0
POLYGRAPHY=0.53.6
PYV=${PYV:-3.12}
WHEELS=${WHEELS:-.whl/serving}
RUNTIME=${RUNTIME:-torch-cuda}
DEVICE=${DEVICE:-cuda}
ARCHS=${CUDA_ARCHS:-90}

if [ "${1:-}" = pack ]; then
    set -e
    mkdir -p "$WHEELS"
    tmp=$(mktemp -d)
    python3 -m pip download -q --no-deps -d "$tmp" "nvidia-pytriton==$PYTRITON"
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version "$PYV" --implementation cp \
        --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
        -d "$WHEELS" "tritonclient==$TRITONCLIENT" python-rapidjson "polygraphy==$POLYGRAPHY"
    (cd "$tmp" && python3 -m zipfile -e nvidia_pytriton-*.whl unpacked)
    u=$tmp/unpacked
    t=pytriton/tritonserver
    needed=$( (cd "$u" && for f in $t/bin/tritonserver $t/backends/python/libtriton_python.so \
                   $t/python_backend_stubs/$PYV/triton_python_backend_stub; do readelf -d "$f"; done) |
              sed -n 's/.*NEEDED.*\[\(.*\)\]/\1/p' | sort -u)
    libs=()
    for lib in $needed; do [ -f "$u/nvidia_pytriton.libs/$lib" ] && libs+=("nvidia_pytriton.libs/$lib"); done
    # the bundled libraries' own dependencies, until no new one appears
    while :; do
        count=${#libs[@]}
        more=$( (cd "$u" && for f in "${libs[@]}"; do readelf -d "$f"; done) | sed -n 's/.*NEEDED.*\[\(.*\)\]/\1/p' | sort -u)
        for lib in $more; do
            if [ -f "$u/nvidia_pytriton.libs/$lib" ] && [[ ! " ${libs[*]} " == *" nvidia_pytriton.libs/$lib "* ]]; then
                libs+=("nvidia_pytriton.libs/$lib")
            fi
        done
        [ "${#libs[@]}" -eq "$count" ] && break
    done
    # every bundled library the server, backend and stub load must be in the archive
    missing=$(cd "$u" && LD_LIBRARY_PATH= ldd "$t/bin/tritonserver" "$t/backends/python/libtriton_python.so" |
              grep -o 'nvidia_pytriton.libs/[^ ]*' | sort -u | while read -r f; do
                  [[ " ${libs[*]} " == *" $f "* ]] || echo "$f"; done)
    [ -z "$missing" ] || { echo "pack: missing $missing"; exit 1; }
    chmod +x "$u/$t/bin/tritonserver"
    tar -C "$u" -cf - "$t/bin/tritonserver" "$t/backends/python" "$t/python_backend_stubs/$PYV" "${libs[@]}" |
        xz -T0 -6 > "$WHEELS/tritonserver-py$PYV.tar.xz"
    rm -rf "$tmp"
    du -sh "$WHEELS"/*
    exit 0
fi

final_out=${OUT:-device_serving_out}     # kept small: logs.tgz and the JSON results
out=$(mktemp -d)
mkdir -p "$final_out"
export PYTHONUNBUFFERED=1
summary=()
status=0
stage() {  # name, command...
    local name=$1; shift
    local start=$SECONDS
    "$@" > "$out/$name.log" 2>&1
    local rc=$?
    [ $rc -ne 0 ] && status=1
    summary+=("$name: rc=$rc ($((SECONDS - start)) s)")
    echo "===== $name rc=$rc ($((SECONDS - start)) s)"; tail -15 "$out/$name.log"
    return $rc
}

python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
    "$WHEELS"/*.whl || { echo "wheel install failed"; exit 1; }
mkdir -p /tmp/triton && tar -C /tmp/triton -xJf "$WHEELS/tritonserver-py$PYV.tar.xz" || { echo "untar failed"; exit 1; }
export PYTHONPATH=$PWD:/tmp/site
export WTCONV_TRITON_HOME=/tmp/triton/pytriton/tritonserver WTCONV_TRITON_CACHE=/tmp/triton-cache
export WTCONV_KERNELS_LIB=$PWD/build/plugin/libwtconv_kernels_capi.so
python3 - <<'PY' 2>&1 | tee "$out/environment.log"
import sys, sysconfig, torch
print("python", sys.version.split()[0], "shared libpython:", sysconfig.get_config_var("Py_ENABLE_SHARED"),
      sysconfig.get_config_var("LIBDIR"), sysconfig.get_config_var("INSTSONAME"))
print("torch", torch.__version__, "cuda", torch.cuda.is_available(), torch.cuda.get_device_name() if torch.cuda.is_available() else "")
try:
    import onnxruntime
    print("onnxruntime", onnxruntime.__version__, onnxruntime.__file__, onnxruntime.get_available_providers())
except ImportError as error:
    print("onnxruntime: not importable:", error)
PY
ORT_ARGS=()
if [ "$RUNTIME" = onnxruntime ]; then
    if [ "$DEVICE" = cuda ] && ! grep -q "CUDAExecutionProvider" "$out/environment.log"; then
        echo "RUNTIME=onnxruntime: this onnxruntime has no CUDAExecutionProvider; install onnxruntime-gpu (e.g. into"
        echo "/tmp/site) first, or run with DEVICE=cpu"
        exit 1
    fi
    if [ -z "${ONNXRUNTIME_INCLUDE_DIR:-}" ]; then
        ONNXRUNTIME_INCLUDE_DIR=$(ls -d third_party/onnxruntime-headers/*/include 2>/dev/null | sort -V | tail -1)
    fi
    if [ "${SKIP_BUILD:-0}" != 1 ] && [ ! -f "${ONNXRUNTIME_INCLUDE_DIR:-}/onnxruntime_c_api.h" ]; then
        echo "RUNTIME=onnxruntime: onnxruntime_c_api.h not found: set ONNXRUNTIME_INCLUDE_DIR or carry"
        echo "third_party/onnxruntime-headers/<version>/include"
        exit 1
    fi
    [ -n "${ONNXRUNTIME_INCLUDE_DIR:-}" ] && ONNXRUNTIME_INCLUDE_DIR=$(cd "$ONNXRUNTIME_INCLUDE_DIR" && pwd)
    export WTCONV_ORT_LIB=${WTCONV_ORT_LIB:-$PWD/build/plugin/onnxruntime/libwtconv_ort.so}
    ORT_ARGS=(--device "$DEVICE" --ort-library "$WTCONV_ORT_LIB")
fi
# The backend stub loads this Python's shared libpython; the launcher finds it through sysconfig. Where sysconfig
# names none that exists, look for one and put its folder on LD_LIBRARY_PATH (the launcher keeps it).
libpython=$(python3 -c 'from wtconv_serving.server import python_library_dir as d; print(d() or "")')
if [ -z "$libpython" ]; then
    found=$(find / -xdev -name "libpython$PYV.so.1.0" 2>/dev/null | head -1)
    echo "sysconfig names no shared libpython; found: ${found:-none}" | tee -a "$out/environment.log"
    [ -n "$found" ] && export LD_LIBRARY_PATH=$(dirname "$found")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
fi
LD_LIBRARY_PATH=${libpython:+$libpython:}${LD_LIBRARY_PATH:-} \
    ldd "/tmp/triton/pytriton/tritonserver/python_backend_stubs/$PYV/triton_python_backend_stub" |
    grep -E "python|not found" | tee -a "$out/environment.log"

if [ "$RUNTIME" = onnxruntime ]; then
    build_args=(-DONNXRUNTIME_INCLUDE_DIR="${ONNXRUNTIME_INCLUDE_DIR:-}" -DWTCONV_BUILD_PLUGIN_HARNESS=OFF)
    target=wtconv_ort
else
    build_args=()
    target=wtconv_kernels_capi
fi
[ "${SKIP_BUILD:-0}" = 1 ] || stage build bash -c "cmake -S plugin -B build/plugin -G Ninja -DCMAKE_CUDA_ARCHITECTURES=$ARCHS \
                     ${build_args[*]} >/dev/null && cmake --build build/plugin -j --target $target" ||
    { tar czf "$final_out/logs.tgz" -C "$out" .; printf '%s\n' "${summary[@]}"; exit 1; }
if [ "$RUNTIME" = onnxruntime ]; then
    python3 -c "from wtconv_libs.lookup import ort_library_info as i; print('$WTCONV_ORT_LIB', i('$WTCONV_ORT_LIB'))" \
        2>&1 | tee -a "$out/environment.log"
fi
stage export_digits python3 -m wtconv_trt export -o /tmp/digits_fp16.onnx --precision fp16 --force
[ "${TINY_REQUESTS:-1000}" != 0 ] && stage export_tiny python3 -m wtconv_trt export -o /tmp/tiny_fp16.onnx --precision fp16 --arch wtconvnext_tiny \
    --random-weights --force

serve() {  # name, onnx, requests, batch sizes, extra options...
    python3 -m wtconv_trt serve "$2" --repo "/tmp/repo_$1" --name "$1" --runtime "$RUNTIME" --force \
        --http-port 0 --grpc-port 0 --log "$out/server_$1.log" --timeout 180 \
        --load-test "$3" --concurrency 16 --batch-sizes "$4" --protocol grpc --json "$final_out/load_$1.json" \
        "${ORT_ARGS[@]}" "${@:5}"
}
serve_kinds() {  # as serve; KIND_GPU instances first, KIND_CPU instances (model still on cuda:0) if that fails
    serve "$@" || { echo "--- retrying with --instance-kind cpu"; serve "$@" --instance-kind cpu; }
}
stage serve_digits serve_kinds digits /tmp/digits_fp16.onnx "${DIGITS_REQUESTS:-2000}" 1,2,4,8
[ "${TINY_REQUESTS:-1000}" != 0 ] && stage serve_tiny serve_kinds tiny /tmp/tiny_fp16.onnx "${TINY_REQUESTS:-1000}" 1,2,4,8
if [ "$RUNTIME" = onnxruntime ] && [ "${VALIDATE:-1}" = 1 ]; then
    # The same library on the same EP against PyTorch: validate --device (fp32 compared with TF32 off), and the
    # GPU tests of the integration (tests/test_onnxruntime_integration.py: validate --device cuda on the CUDA op).
    valid=(--device "$DEVICE" --ort-library "$WTCONV_ORT_LIB")
    stage validate_digits python3 -m wtconv_trt validate /tmp/digits_fp16.onnx "${valid[@]}"
    if [ "${TINY_REQUESTS:-1000}" != 0 ]; then
        stage validate_tiny_fp16 python3 -m wtconv_trt validate /tmp/tiny_fp16.onnx "${valid[@]}"
        stage export_tiny_fp32 python3 -m wtconv_trt export -o /tmp/tiny_fp32.onnx --arch wtconvnext_tiny \
            --random-weights --force
        stage validate_tiny_fp32 python3 -m wtconv_trt validate /tmp/tiny_fp32.onnx "${valid[@]}"
    fi
    stage test_gpu python3 -m pytest -q -rs -p no:cacheprovider tests/test_onnxruntime_integration.py -k "gpu or device"
fi
tar czf "$final_out/logs.tgz" -C "$out" .

echo
echo "===== summary"
printf '%s\n' "${summary[@]}"
for name in digits tiny; do
    [ -f "$out/serve_$name.log" ] || continue
    echo "--- $name (fp16, runtime $RUNTIME inside Triton's Python backend, loopback gRPC, 16 clients)"
    sed -n '/^ *batch *images/,/^OK\|^FAILED/p' "$out/serve_$name.log"
done
for name in validate_digits validate_tiny_fp16 validate_tiny_fp32 test_gpu; do
    [ -f "$out/$name.log" ] && echo "$name: $(grep -E '^(PASSED|FAILED)|passed|failed|error:' "$out/$name.log" | tail -1)"
done
echo
for name in digits tiny; do  # one result line per model, from the load test's JSON
    [ -f "$final_out/load_$name.json" ] || continue
    python3 - "$final_out/load_$name.json" "$name" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
g = r["load"][0]
direct = max(r["direct"], key=lambda d: d["batch"])
print(f"RESULT {sys.argv[2]}: {r['runtime']} ({r.get('execution') or 'n/a'}), {r['input_dtype']}: {g['completed']} ok / "
      f"{g['failed']} failed / {g['lost']} lost / {g['mismatched']} mismatched of {g['requests']} "
      f"({g['bit_identical']} bit-identical); served {g['throughput_images_per_s']} images/s, p50 "
      f"{g['latency_ms']['p50']} ms, p99 {g['latency_ms']['p99']} ms; direct batch {direct['batch']}: "
      f"{direct['images_per_s']} images/s")
PY
done
exit $status
