#!/usr/bin/env bash
# tools/device_serving.sh — Triton serving on a GPU machine (docs/serving.md, "Measured on a GPU"): WTConvNeXt-T fp16
# (random weights) and the shipped digits model, each served by `wtconv-trt serve` with both GPU runtimes, torch-cuda
# (PyTorch on our CUDA kernels) and onnxruntime (the exported file in onnxruntime-gpu's CUDA EP, WTConv2d nodes on
# libwtconv_ort.so), with the tuning's defaults (wtconv_serving/tuning.py: buckets, CUDA graphs, instances per GPU).
#
#   tools/device_serving.sh pack   # where pip reaches PyPI: fills .whl/serving/ (about 30 MB): the tritonclient,
#                                  # python-rapidjson, polygraphy, cuda-bindings and pyelftools (a dependency of
#                                  # ours the GPU machine lacks) wheels for Python 3.12, and
#                                  # tritonserver-py3.12.tar.xz, the server binary, Python backend, 3.12 stub and the
#                                  # libraries they load, cut from the nvidia-pytriton wheel
#   tools/device_serving.sh        # on a GPU machine (no network needed), repository root, .whl/serving present;
#                                  # onnxruntime-gpu importable (e.g. unpacked in /tmp/site, on PYTHONPATH below)
#
# For each runtime and model, one `serve --load-test` run: the answer check (every response compared with the same
# file run eagerly in the client; digits: the backend killed a quarter of the way through, the clients retry), the
# served runner timed directly per bucket, then the sweep: 16 / 64 / 256 requests in flight from several client
# processes (asynchronous gRPC), request sizes 1/2/4/8 and 1..64, the busiest point again with one more process;
# Triton's statistics give the batch sizes executed, and the direct rate on those batches the "x direct" column.
# Then the alternatives the defaults were chosen against, direct (benchmarks/serving_alternatives.py: CUDA graphs, cuDNN
# search, a session per bucket, no buckets, denser buckets) and served (other instance counts than the default 2:
# INSTANCES: "1" unless given, when ALTERNATIVES=1 and not QUICK=1).
# Results: $OUT/serving_results.{json,md} and $OUT/logs.tgz; a table last. Stages past the time budget are skipped.
#
# The measurements of docs/serving.md, "Measuring on a GPU", one command each (BUDGET raised to fit):
#   client modes, requests 1-8 and 1-64:   MODELS=tiny ALTERNATIVES=0 SHARED_MEMORY="none system cuda" BUDGET=1500
#   full-length rounds (the 7,500 img/s):  MODELS=tiny ALTERNATIVES=0 ROUNDS=3 BUDGET=1500 (QUICK unset: 3 s points)
#   --gpus 0 against the default:          MODELS=tiny ALTERNATIVES=0 GPUS=0 SWEEP=256
#   the soak (10 min, backend killed):      MAIN=0 MODELS=tiny SOAK=600 SOAK_RUNTIMES=torch-cuda BUDGET=900
#   all but the soak in one short call:    tools/device_session.sh rounds (rounds inside one server per runtime,
#                                          POINT_ROUNDS; the soak: tools/device_session.sh soak-start / soak-wait)
#
# Knobs: QUICK=1 (shorter windows, main alternatives only; about half the time), RUNTIMES ("torch-cuda onnxruntime";
# RUNTIME=X alone also works), MODELS ("tiny digits"), SWEEP (16,64,256; the digits model: SWEEP_DIGITS, 16,256),
# WINDOW (3 s per point), PROCESSES (4), INSTANCES ("1": served instance counts beside the default), INSTANCES_SWEEP
# (256), ALTERNATIVES (1: 0 skips the direct alternatives), CHECK (requests of the check,
# 1024), BUDGET (seconds, 400: later stages are skipped past it), SKIP_BUILD (1: use the built libraries), CUDA_ARCHS
# (90), DEVICE (onnxruntime's device: cuda), PYV (3.12), WHEELS (.whl/serving); MAIN (1: 0 skips the main served
# runs), ROUNDS (1: each main run repeated, tags _round2...), SHARED_MEMORY ("none": the clients' modes, each a run
# of its own, tag _shm-<mode>; cuda needs the cuda-bindings wheel pack gathers), GPUS (none: a further run with
# --gpus GPUS, tag _gpus<GPUS>), SOAK (seconds, 0: no soak; soak_<runtime>_<model>.json), SOAK_RUNTIMES ($RUNTIMES),
# SOAK_SHARED_MEMORY (none), SOAK_SAMPLE (60 s between memory samples); SHARED_MEMORY_FALLBACK (none: the mode a
# run with cuda shared memory whose check failed is run again in, and the later runs take); POINT_ROUNDS (1:
# each sweep point repeated that many times inside one served run, rounds that share one server start),
# EXTRA_PROCESS (1: 0 leaves out the busiest point again with one more client process), GPUS_SWEEP ($SWEEP: the
# --gpus run's sweep), ONNX_DIR (the exports' folder, default the run's own; an export already there is reused),
# BEFORE (the committed figures the summary compares Triton's split of an execution with:
# docs/bench/serving_gpu_4instances.json), SERVE_ARGS (more `serve` options for the main, the --gpus and the soak
# runs, several words, e.g. "--buckets 1,2,4,8,16,32,64,96,128" to measure another bucket set, or "--mps"). WTCONV_KERNELS_LIB and WTCONV_ORT_LIB name prebuilt libraries (with
# SKIP_BUILD=1), e.g. an installed binary wheel's <site>/wtconv_libs/lib/libwtconv_{kernels_capi,ort}.so.
# With PYV=3.11 RUNTIME=onnxruntime
# DEVICE=cpu the same script runs on a CPU machine (the digits model, small settings, WTCONV_ORT_LIB to a built
# libwtconv_ort.so and SKIP_BUILD=1), which is how its shell logic was checked.
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/device_lib.sh"
PYTRITON=0.7.0
TRITONCLIENT=2.73.0
POLYGRAPHY=0.53.6
PYV=${PYV:-3.12}
WHEELS=${WHEELS:-.whl/serving}
DEVICE=${DEVICE:-cuda}
QUICK=${QUICK:-0}
RUNTIMES=${RUNTIMES:-${RUNTIME:-torch-cuda onnxruntime}}
if [ "$DEVICE" = cpu ]; then
    MODELS=${MODELS:-digits}; SWEEP=${SWEEP:-4}; WINDOW=${WINDOW:-1}; PROCESSES=${PROCESSES:-1}; CHECK=${CHECK:-64}
fi
MODELS=${MODELS:-tiny digits}
SWEEP=${SWEEP:-16,64,256}
if [ "$QUICK" = 1 ]; then WINDOW=${WINDOW:-2}; else WINDOW=${WINDOW:-3}; fi
PROCESSES=${PROCESSES:-4}
CHECK=${CHECK:-1024}
BUDGET=${BUDGET:-400}
ALTERNATIVES=${ALTERNATIVES:-1}
INSTANCES=${INSTANCES:-}
INSTANCES_SWEEP=${INSTANCES_SWEEP:-256}
MAIN=${MAIN:-1}
ROUNDS=${ROUNDS:-1}
SHARED_MEMORY=${SHARED_MEMORY:-none}
SHARED_MEMORY_FALLBACK=${SHARED_MEMORY_FALLBACK:-}
GPUS=${GPUS:-}
SOAK=${SOAK:-0}
SOAK_RUNTIMES=${SOAK_RUNTIMES:-$RUNTIMES}
POINT_ROUNDS=${POINT_ROUNDS:-1}
EXTRA_PROCESS=${EXTRA_PROCESS:-1}
read -r -a serve_args <<< "${SERVE_ARGS:-}"
GPUS_SWEEP=${GPUS_SWEEP:-$SWEEP}
BEFORE=${BEFORE:-docs/bench/serving_gpu_4instances.json}

if [ "${1:-}" = pack ]; then
    set -e
    mkdir -p "$WHEELS"
    tmp=$(mktemp -d)
    python3 -m pip download -q --no-deps -d "$tmp" "nvidia-pytriton==$PYTRITON"
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version "$PYV" --implementation cp \
        --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
        -d "$WHEELS" "tritonclient==$TRITONCLIENT" python-rapidjson "polygraphy==$POLYGRAPHY" \
        cuda-bindings cuda-pathfinder \
        pyelftools  # cuda-*: tritonclient's CUDA shared memory (--shared-memory cuda); pyelftools: doctor's ELF reader
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

final_out=${OUT:=device_serving_out}     # kept small: serving_results.{json,md} and logs.tgz
work=$(mktemp -d)
logs=$work/logs
mkdir -p "$final_out"
device_start "$logs"
export STAGE_TAIL=12
longest=0  # the longest served stage so far (s)
took=0      # the last one's
within_budget() {  # NAME [ESTIMATE]: true while a stage of ESTIMATE s (default the longest so far) fits the budget,
    local estimate=${2:-$longest}  # else the stage is noted as skipped
    if [ $((SECONDS + estimate)) -le "$BUDGET" ]; then return 0; fi
    note "$1: skipped (time budget of $BUDGET s: $SECONDS s spent, about $estimate s needed)"
    return 1
}
timed_stage() {  # stage NAME COMMAND..., its time kept in took and longest
    local start=$SECONDS rc
    stage "$@"
    rc=$?
    took=$((SECONDS - start))
    [ "$took" -gt "$longest" ] && longest=$took
    return "$rc"
}
after_summary() {
    echo "===== results ($SECONDS s)"
    cat "$logs/summary.txt"
}
finish() {
    before=(); [ -f "$BEFORE" ] && before=(--before "$BEFORE")
    python3 -m benchmarks.serving_summary "$work" "$final_out" "${before[@]}" > "$logs/summary.txt" 2>&1 || status=1
    # shellcheck disable=SC2046  # the results' file names, one word each
    pack_logs "$final_out/logs.tgz" "$work" logs $(cd "$work" && ls ./*.json 2>/dev/null)
    device_finish /dev/null
}

if [ "${DRY_RUN:-0}" != 1 ]; then  # DRY_RUN=1: nothing installed or exported, the stages' commands recorded
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
        "$WHEELS"/*.whl || { echo "wheel install failed"; exit 1; }
    # unpacked once per archive: a later run of the same session finds it (the stamp is newer than the archive)
    if [ ! /tmp/triton/unpacked.stamp -nt "$WHEELS/tritonserver-py$PYV.tar.xz" ]; then
        mkdir -p /tmp/triton && tar -C /tmp/triton -xJf "$WHEELS/tritonserver-py$PYV.tar.xz" || { echo "untar failed"; exit 1; }
        touch /tmp/triton/unpacked.stamp
    fi
fi
export PYTHONPATH=$PWD:/tmp/site${PYTHONPATH:+:$PYTHONPATH}
export WTCONV_TRITON_HOME=/tmp/triton/pytriton/tritonserver WTCONV_TRT_CACHE=${WTCONV_TRT_CACHE:-/tmp/wtconv-cache}
export WTCONV_KERNELS_LIB=${WTCONV_KERNELS_LIB:-$PWD/build/plugin/libwtconv_kernels_capi.so}
export WTCONV_ORT_LIB=${WTCONV_ORT_LIB:-$PWD/build/plugin/onnxruntime/libwtconv_ort.so}
# A binary wheel's libwtconv_ort.so loads libwtconv_kernels.so from its own folder ($ORIGIN). serve copies the op
# library into the model's folder, where that file is not: its folder on LD_LIBRARY_PATH (which tritonserver and the
# backend stubs inherit) lets the copy find it.
ort_dir=$(dirname "$WTCONV_ORT_LIB")
if compgen -G "$ort_dir/libwtconv_kernels.so*" > /dev/null; then
    export LD_LIBRARY_PATH=$ort_dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
fi
gpu_info > "$logs/environment.log"
echo "libraries: $WTCONV_KERNELS_LIB $WTCONV_ORT_LIB; LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}" >> "$logs/environment.log"
python3 - <<'PY' 2>&1 | tee -a "$logs/environment.log"
import os, sys, sysconfig, torch
print("python", sys.version.split()[0], "shared libpython:", sysconfig.get_config_var("Py_ENABLE_SHARED"),
      sysconfig.get_config_var("LIBDIR"), sysconfig.get_config_var("INSTSONAME"), "cores", os.cpu_count())
print("torch", torch.__version__, "cuda", torch.cuda.is_available(), torch.cuda.get_device_name() if torch.cuda.is_available() else "")
try:
    import onnxruntime
    print("onnxruntime", onnxruntime.__version__, onnxruntime.__file__, onnxruntime.get_available_providers())
except ImportError as error:
    print("onnxruntime: not importable:", error)
PY
if [[ " $RUNTIMES " == *" onnxruntime "* ]] && [ "$DEVICE" = cuda ] && ! grep -q "CUDAExecutionProvider" "$logs/environment.log"; then
    echo "onnxruntime: this onnxruntime has no CUDAExecutionProvider; install onnxruntime-gpu (e.g. into /tmp/site)"
    echo "first, or run with RUNTIMES=torch-cuda (or DEVICE=cpu)"
    exit 1
fi
# The backend stub loads this Python's shared libpython; the launcher finds it through sysconfig. Where sysconfig
# names none that exists, look for one and put its folder on LD_LIBRARY_PATH (the launcher keeps it).
libpython=$(python3 -c 'from wtconv_serving.server.launcher import python_library_dir as d; print(d() or "")')
if [ -z "$libpython" ]; then
    found=$(find / -xdev -name "libpython$PYV.so.1.0" 2>/dev/null | head -1)
    echo "sysconfig names no shared libpython; found: ${found:-none}" | tee -a "$logs/environment.log"
    [ -n "$found" ] && export LD_LIBRARY_PATH=$(dirname "$found")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
fi

# --- build: the kernel library (torch-cuda) and libwtconv_ort.so with its CUDA op (onnxruntime), one configure
targets=()
build_args=(-DWTCONV_BUILD_PLUGIN_HARNESS=OFF)
[[ " $RUNTIMES " == *" torch-cuda "* ]] && targets+=(--target wtconv_kernels_capi)
if [[ " $RUNTIMES " == *" onnxruntime "* ]]; then
    targets+=(--target wtconv_ort)
    ONNXRUNTIME_INCLUDE_DIR=${ONNXRUNTIME_INCLUDE_DIR:-$(ort_headers)}
    if [ "${SKIP_BUILD:-0}" != 1 ] && [ ! -f "${ONNXRUNTIME_INCLUDE_DIR:-}/onnxruntime_c_api.h" ]; then
        echo "onnxruntime: onnxruntime_c_api.h not found: set ONNXRUNTIME_INCLUDE_DIR or carry"
        echo "third_party/onnxruntime-headers/<version>/include"
        exit 1
    fi
    [ -n "${ONNXRUNTIME_INCLUDE_DIR:-}" ] && build_args+=(-DONNXRUNTIME_INCLUDE_DIR="$(cd "$ONNXRUNTIME_INCLUDE_DIR" && pwd)")
fi
if [ "${SKIP_BUILD:-0}" != 1 ]; then
    stage build build_plugin build/plugin "${build_args[@]}" "${targets[@]}" || finish
fi
[[ " $RUNTIMES " == *" onnxruntime "* ]] &&
    python3 -c "from wtconv_libs.lookup import ort_library_info as i; print('$WTCONV_ORT_LIB', i('$WTCONV_ORT_LIB'))" \
        >> "$logs/environment.log" 2>&1

# --- exports, side by side
ONNX_DIR=${ONNX_DIR:-$work}
mkdir -p "$ONNX_DIR"
onnx_tiny=$ONNX_DIR/tiny_fp16.onnx
onnx_digits=$ONNX_DIR/digits_fp16.onnx
pids=()
if [[ " $MODELS " == *" tiny "* ]] && [ "${DRY_RUN:-0}" != 1 ] && [ ! -s "$onnx_tiny" ]; then
    python3 -m wtconv_trt export -o "$onnx_tiny" --precision fp16 --arch wtconvnext_tiny --random-weights --force \
        > "$logs/export_tiny.log" 2>&1 & pids+=($!)
fi
if [[ " $MODELS " == *" digits "* ]] && [ "${DRY_RUN:-0}" != 1 ] && [ ! -s "$onnx_digits" ]; then
    python3 -m wtconv_trt export -o "$onnx_digits" --precision fp16 --force > "$logs/export_digits.log" 2>&1 & pids+=($!)
fi
for pid in "${pids[@]}"; do wait "$pid" || { status=1; note "export: FAILED (see logs)"; }; done
note "exports: done ($SECONDS s in all)"

# --- served runs: serve TAG RUNTIME MODEL [serve's options]: the check of $CHECK requests at 64 in flight, the direct
# timing, and the options' sweep; the digits model's check kills its backend a quarter of the way through.
serve() {
    local tag=$1 runtime=$2 model=$3; shift 3
    local onnx=$onnx_tiny
    [ "$model" = digits ] && onnx=$onnx_digits
    local extra=()
    [ "$runtime" = onnxruntime ] && extra+=(--device "$DEVICE" --ort-library "$WTCONV_ORT_LIB")
    python3 -m wtconv_trt serve "$onnx" --repo "$work/repo_$tag" --name "$model" --runtime "$runtime" --force \
        --http-port 0 --grpc-port 0 --metrics-port 0 --log "$logs/server_$tag.log" --timeout 300 \
        --load-test "$CHECK" --concurrency 64 --batch-sizes 1,2,4,8 --processes "$PROCESSES" --window "$WINDOW" \
        --json "$work/load_$tag.json" "${extra[@]}" "$@"
}
repeated() {  # LIST COUNT: the comma-separated LIST COUNT times over (a sweep whose points come round again)
    local out=$1 n
    for n in $(seq 2 "$2"); do out=$out,$1; done
    echo "$out"
}
# where each instance of a run was placed, from its server's log ("instance NAME on GPU N")
placement() { grep -ho "instance [^ ]* on [A-Za-z]* [0-9]*" "$logs/server_$1.log" 2> /dev/null | sort | tr '\n' ' '; }
extra=(); [ "$EXTRA_PROCESS" = 1 ] || extra=(--no-extra-process)
fallen_back=""  # the mode cuda runs take once the check of one of them failed (SHARED_MEMORY_FALLBACK)
answered() {  # TAG: the run's report exists and its check answered every request, and right
    python3 -c 'import json, sys; c = json.load(open(sys.argv[1]))["check"]
sys.exit(not c or any(x["failed"] or x["lost"] or x["mismatched"] for x in c))' "$work/load_$1.json" 2> /dev/null
}
main_run() {  # TAG RUNTIME MODEL MODE: one main served run; a cuda run whose check failed again in the fallback mode
    local tag=$1 runtime=$2 model=$3 memory=$4
    within_budget "serve_$tag" || return 1
    timed_stage "serve_$tag" serve "$tag" "$runtime" "$model" "${options[@]}" "${extra[@]}" --shared-memory "$memory" &&
        return 0
    if [ "$memory" = cuda ] && [ -n "$SHARED_MEMORY_FALLBACK" ] && ! answered "$tag"; then
        fallen_back=$SHARED_MEMORY_FALLBACK
        note "serve_$tag: the check failed with cuda shared memory; this and the later cuda runs in $fallen_back mode"
        main_run "${tag/_shm-cuda/_shm-$fallen_back}" "$runtime" "$model" "$fallen_back"
    fi
}
for model in $MODELS; do
    [ "$MAIN" = 1 ] || break
    options=(--sweep "$(repeated "$SWEEP" "$POINT_ROUNDS")" --mix 1,2,4,8,16,32,64)  # WTConvNeXt-T: the targets
    [ "$model" = digits ] && options=(--sweep "${SWEEP_DIGITS:-16,256}" --mix 1,2,4,8,16,32,64 --kill-backend)
    options+=("${serve_args[@]}")
    for runtime in $RUNTIMES; do
        for mode in $SHARED_MEMORY; do
            for round in $(seq 1 "$ROUNDS"); do
                memory=$mode; [ "$memory" = cuda ] && [ -n "$fallen_back" ] && memory=$fallen_back
                variant=""; [ "$memory" != none ] && variant=_shm-$memory
                tag=${runtime}_$model$variant; [ "$round" -gt 1 ] && tag=${tag}_round$round
                main_run "$tag" "$runtime" "$model" "$memory"
            done
        done
    done
done
# --gpus GPUS after every runtime's main runs (on one GPU, --gpus 0 and the default must agree), with the first
# client mode (or its fallback); the instances' placement of both read from the servers' logs
memory=${SHARED_MEMORY%% *}
[ "$memory" = cuda ] && [ -n "$fallen_back" ] && memory=$fallen_back
variant=""; [ "$memory" != none ] && variant=_shm-$memory
gpus_took=""
for model in $MODELS; do
    [ "$MAIN" = 1 ] && [ -n "$GPUS" ] || break
    options=(--sweep "$GPUS_SWEEP" --mix 1,2,4,8,16,32,64)
    [ "$model" = digits ] && options=(--sweep "${SWEEP_DIGITS:-16,256}" --mix 1,2,4,8,16,32,64)
    options+=("${serve_args[@]}")
    for runtime in $RUNTIMES; do
        tag=${runtime}_$model${variant}_gpus${GPUS//,/-}
        # the first one's time guessed at half the longest: the same load and check, a sweep of a few points
        within_budget "serve_$tag" "${gpus_took:-$((longest / 2))}" || continue
        timed_stage "serve_$tag" serve "$tag" "$runtime" "$model" "${options[@]}" --gpus "$GPUS" --no-extra-process \
            --shared-memory "$memory" &&
            note "placement: default $(placement "${runtime}_$model$variant"); --gpus $GPUS $(placement "$tag")"
        gpus_took=$took
    done
done

# --- the soak: SOAK seconds at 256 in flight, requests of 1-64 images, every answer checked against the ONNX file,
# the backend killed halfway, the server's memory sampled every SOAK_SAMPLE seconds (no check, no sweep)
if [ "$SOAK" != 0 ]; then
    soak_model=tiny; [[ " $MODELS " == *" tiny "* ]] || soak_model=digits
    for runtime in $SOAK_RUNTIMES; do
        tag=${runtime}_$soak_model
        onnx=$onnx_tiny; [ "$soak_model" = digits ] && onnx=$onnx_digits
        extra=(); [ "$runtime" = onnxruntime ] && extra+=(--device "$DEVICE" --ort-library "$WTCONV_ORT_LIB")
        within_budget "soak_$tag" && stage "soak_$tag" python3 -m wtconv_trt serve "$onnx" --repo "$work/repo_soak_$tag" \
            --name "$soak_model" --runtime "$runtime" --force --http-port 0 --grpc-port 0 --metrics-port 0 \
            --log "$logs/server_soak_$tag.log" --timeout 300 --soak "$SOAK" --concurrency 256 \
            --batch-sizes 1,2,4,8,16,32,64 --kill-backend --sample-every "${SOAK_SAMPLE:-60}" \
            --shared-memory "${SOAK_SHARED_MEMORY:-none}" --json "$work/soak_$tag.json" "${extra[@]}" "${serve_args[@]}"
    done
fi

# --- alternatives: direct (tiny, else digits), then served with other instance counts than the default
alt_model=$onnx_tiny
model=tiny; [[ " $MODELS " == *" tiny "* ]] || { alt_model=$onnx_digits; model=digits; }
if [ "$ALTERNATIVES" = 1 ]; then
    for runtime in $RUNTIMES; do
        quick=(); [ "$QUICK" = 1 ] && quick=(--quick)
        within_budget "alternatives_$runtime" && stage "alternatives_$runtime" python3 -m benchmarks.serving_alternatives \
            --onnx "$alt_model" --runtime "$runtime" --ort-library "$WTCONV_ORT_LIB" --device "$DEVICE" --dense \
            --json "$work/alternatives_$runtime.json" "${quick[@]}"
    done
    [ "$QUICK" != 1 ] && INSTANCES=${INSTANCES:-1}
fi
for count in $INSTANCES; do
    for runtime in $RUNTIMES; do
        tag=${runtime}_${model}_${count}instance
        within_budget "serve_$tag" && stage "serve_$tag" serve "$tag" "$runtime" "$model" \
            --instances "$count" --sweep "$INSTANCES_SWEEP" --no-extra-process --load-test 64
    done
done
finish
