#!/usr/bin/env bash
# tools/device_session.sh — the whole GPU verification of a change over one warm session of short calls on the GPU
# machine, for when onnxruntime-gpu's wheel must arrive in parts (it is larger than one call may carry). Each call
# runs one step from the repository root; the state lives in /tmp/wtconv-session, which lasts while the machine stays
# warm, so the calls follow each other at once. The work that is not timed (builds, GPU tests, compute-sanitizer, the
# plugin harness) runs in a background process session started by `start`, beside the calls that carry the wheel;
# the timed steps (`bench`, `serve`) wait for it, so nothing else runs on the GPU while they measure.
#
#   tools/device_session.sh start      # first call: takes the carried wheel parts, starts the background stage
#   tools/device_session.sh part       # later calls: takes the carried wheel parts (.devwheels/*.partNN)
#   tools/device_session.sh install    # joins each wheel's parts (none yet: the serving wheels alone; call it again
#                                      # once the parts are here), checks its md5 (.devwheels/*.md5), installs
#                                      # onnxruntime-gpu and the serving wheels (.whl/serving) into /tmp/site,
#                                      # unpacks tritonserver; a binary wheel of ours (wtconv_trt-*.whl) is kept
#                                      # for the `wheel` step
#   tools/device_session.sh wheel      # the binary wheel's GPU run (tools/device_wheel.sh), once the background
#                                      # stage is done; later steps then use the wheel's libraries
#   tools/device_session.sh ort-test   # ONNX Runtime GPU tests (tools/device_ort.sh STAGES=test) and the serving
#                                      # runners' GPU tests, once the background stage is done
#   tools/device_session.sh wait [S]   # waits up to S seconds (default 540) for the background stage; its summary
#   tools/device_session.sh bench      # timed: tools/device_ort.sh STAGES=bench (QUICK=1 unless QUICK=0; BENCH_ARGS
#                                      # passed on)
#   tools/device_session.sh serve      # timed: tools/device_serving.sh, both GPU runtimes (RUNTIMES), QUICK=1 and a
#                                      # BUDGET of 360 s unless given
#   tools/device_session.sh rounds     # timed, one call of about 400 s (BUDGET): WTConvNeXt-T on both GPU runtimes,
#                                      # full-length windows (3 s), each runtime in one server whose sweep comes
#                                      # round POINT_ROUNDS (3) times to requests of 1-8 and 1-64 at 16 and 256 in
#                                      # flight, the clients on SHARED_MEMORY (cuda; a run whose check failed again in
#                                      # system), then --gpus GPUS (0) at 256 against the default; Triton's split of
#                                      # an execution beside docs/bench/serving_gpu_4instances.json; $OUT/rounds
#   tools/device_session.sh soak-start [S]   # the soak (SOAK s, 600; SOAK_RUNTIMES, torch-cuda; 256 in flight, 1-64
#                                      # images, the backend killed halfway, memory per minute, every answer checked
#                                      # against the ONNX file in ONNX Runtime) started detached, once the libraries
#                                      # are there (waiting for the background build), then waits as soak-wait
#   tools/device_session.sh soak-wait [S]    # waits up to S seconds (default 540) for the soak; once it is done, its
#                                      # results into $OUT/soak (serving_results.{json,md}, logs.tgz)
#   tools/device_session.sh collect    # every log so far, packed into $OUT/session_logs.tgz
#   tools/device_session.sh pack-libs  # here, where nvcc is (no GPU needed): the two libraries the steps load
#                                      # (libwtconv_kernels_capi.so, libwtconv_ort.so), built for CUDA_ARCHS with
#                                      # $ORIGIN as their run path, packed into .devlibs/libs.tar.xz (about 6 MB for
#                                      # sm_90); carried, the calls use them instead of a build on the GPU machine
#                                      # (start with BACKGROUND="": no build there)
#
# Carried paths: .devwheels (the parts and the md5 file written by ../shared/device/split-wheel or `split -b`),
# .trt/<version> (TensorRT header trees for the harness), third_party/onnxruntime-headers/<version>,
# .whl/serving (tools/device_serving.sh pack), .devlibs (pack-libs; CARRIED_LIBS, default .devlibs/libs.tar.xz,
# unpacked into the session's state by any call that carries it). Build for sm_90 unless CUDA_ARCHS says otherwise.
# BACKGROUND names what the background stage runs after the build (default "harness kernel_tests sanitize"; e.g. ""
# when only the ONNX Runtime op changed: the kernels' GPU tests and the harness take most of a session; "" also with
# carried libraries). "ab" first times the kernels'
# default build against the one before the fixed-geometry kernels (tools/device_kernels.sh, build:ref with
# -DWTCONV_FIXED_PLANES=0 and build:default, or the named builds AB_BUILD_STAGES lists, e.g. a third with
# -DWTCONV_FIXED_PLANES=1; AB_GROUPS, AB_S), alone on the GPU, before anything else of the stage starts. "models"
# (benchmarks/profile_models.py, MODELS_ARGS; $OUT/models once collected) and "profile" (ncu of build/plugin's
# whole-plane kernels at the stage shapes, PROFILE_ARGS) run alone on the GPU after the build, before the harness,
# the tests and the soak (soak-start waits for them). KERNEL_TEST_ARGS: more pytest arguments of the kernel tests
# (e.g. "-n 8" where nothing else shares the card). The kernel
# tests and the sanitizer run on build/plugin, and also on each named build of the A/B that ALSO_TEST names (e.g.
# "all": the kernels that build compiles in, dispatched or not); "build" builds build/plugin even when nothing else
# of the stage needs it (ort-test and serve without a
# binary wheel do). The libraries the steps use: WTCONV_KERNELS_LIB and WTCONV_ORT_LIB when given (e.g. an installed
# binary wheel's <site>/wtconv_libs/lib/libwtconv_kernels_capi.so and libwtconv_ort.so), else the wheel's that the
# `wheel` step installed, else the background build's. SESSION_STATE: the folder the calls share (default
# /tmp/wtconv-session; it must outlive each call).
set -uo pipefail
# shellcheck source=tools/device_lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/device_lib.sh"
STATE=${SESSION_STATE:-/tmp/wtconv-session}
LOGS=$STATE/logs
ARCHS=${CUDA_ARCHS:-90}
SANITIZE_S=${SANITIZE_S:-300}
BACKGROUND=${BACKGROUND-harness kernel_tests sanitize}
# Every step runs in a copy of the checkout made by `start`: each call of the GPU machine syncs the working tree
# again, which would take files from under a build still running from an earlier call.
REPO=$STATE/repo
mkdir -p "$STATE/parts" "${OUT:=device_out}"
OUT=$(cd "$OUT" && pwd)
device_start "$LOGS"
export PYTHONPATH=$REPO:/tmp/site
WHEEL_SITE=$STATE/wheel/wheel_site
LIB_DIR=$REPO/build/plugin
ORT_LIB=$LIB_DIR/onnxruntime/libwtconv_ort.so
# Libraries built elsewhere and carried (pack-libs): used instead of the background build's (a binary wheel's, once
# the `wheel` step has installed one, before both).
CARRIED_LIBS=${CARRIED_LIBS:-.devlibs/libs.tar.xz}
if [ "${1:-}" != pack-libs ] && [ -f "$CARRIED_LIBS" ] && [ ! "$STATE/libs/unpacked.stamp" -nt "$CARRIED_LIBS" ]; then
    mkdir -p "$STATE/libs" && tar -C "$STATE/libs" -xJf "$CARRIED_LIBS" && touch "$STATE/libs/unpacked.stamp"
fi
if [ -f "$STATE/libs/libwtconv_kernels_capi.so" ]; then
    LIB_DIR=$STATE/libs
    ORT_LIB=$LIB_DIR/libwtconv_ort.so
fi
if [ -d "$WHEEL_SITE/wtconv_libs/lib" ]; then
    LIB_DIR=$WHEEL_SITE/wtconv_libs/lib
    ORT_LIB=$LIB_DIR/libwtconv_ort.so
fi
export WTCONV_KERNELS_LIB=${WTCONV_KERNELS_LIB:-$LIB_DIR/libwtconv_kernels_capi.so}
export WTCONV_ORT_LIB=${WTCONV_ORT_LIB:-$ORT_LIB}
# Waits up to $1 seconds for the background stage; status 0 once it is done.
background_done() {
    local start=$SECONDS
    while [ ! -f "$STATE/background.done" ] && [ $((SECONDS - start)) -lt "$1" ]; do sleep 5; done
    [ -f "$STATE/background.done" ]
}
in_repo() { cd "$REPO" 2>/dev/null || { echo "no copy of the checkout in $REPO: call start first"; exit 1; }; }
copy_checkout() {  # DIR: this checkout copied, without the wheel parts and builds (a later call syncs this one again)
    mkdir -p "$1" && tar --exclude=./.devwheels --exclude=./build -cf - . | tar -C "$1" -xf -
}
# The soak, detached: its own copy of the checkout, its state in $SOAK_STATE (run.log, out/, rc once done).
SOAK_STATE=$STATE/soak
soak_results() {
    if [ -f "$SOAK_STATE/rc" ]; then
        echo "the soak is done (exit status $(cat "$SOAK_STATE/rc")):"
        tail -40 "$SOAK_STATE/run.log"
        mkdir -p "$OUT/soak" && cp -r "$SOAK_STATE/out/." "$OUT/soak/"
        return 0
    fi
    echo "the soak is still running ($(($(date +%s) - $(stat -c %Y "$SOAK_STATE/started"))) s since it started):"
    tail -5 "$SOAK_STATE/run.log"
    return 1
}

take_parts() {
    local n=0
    for part in .devwheels/*.part[0-9]*; do
        [ -f "$part" ] || continue
        cp "$part" "$STATE/parts/" && n=$((n + 1))
    done
    cp .devwheels/*.md5 "$STATE/parts/" 2>/dev/null
    echo "parts here: $(ls "$STATE/parts" | grep -c part) (this call brought $n)"
}

# The background stage: each step a stage of tools/device_lib.sh (its output in $LOGS/NAME.log, "rc seconds" in
# $LOGS/NAME.rc, which `results` reads in later calls).
background() {
    source tools/device_lib.sh
    OUT=$STATE device_start "$LOGS"
    export STAGE_TAIL=0
    gpu_info > "$LOGS/gpu.log"
    wants() { [[ " $BACKGROUND " == *" $1 "* ]]; }
    start_harness() {
        stage harness env CMAKE_CUDA_ARCHITECTURES="$ARCHS" OUT="$LOGS" plugin/trt/harness/run_device.sh .trt/*/ &
    }
    # Timed: the A/B runs before anything else of the stage is started.
    if wants ab; then
        stage kernels_ab env OUT="$STATE/ab" LOGS="$LOGS/ab" \
            STAGES="${AB_BUILD_STAGES:-build:ref:-DWTCONV_FIXED_PLANES=0 build:default} ab" \
            AB_GROUPS="${AB_GROUPS:-}" AB_S="${AB_S:-}" tools/device_kernels.sh
    fi
    # The harness builds its own trees (one per TensorRT header set) and needs no other build: it starts at once,
    # unless timed steps (models, profile) follow the build: then after them.
    local timed=0
    { wants models || wants profile; } && timed=1
    if wants harness && [ $timed = 0 ]; then
        start_harness
    fi
    if ! wants build && ! wants kernel_tests && ! wants sanitize && [ $timed = 0 ]; then
        wait
        touch "$STATE/timed.done" "$STATE/background.done"
        return 0
    fi
    stage build build_plugin build/plugin -DWTCONV_BUILD_PLUGIN_HARNESS=OFF -DWTCONV_ORT_WERROR=ON \
        -DONNXRUNTIME_INCLUDE_DIR="$ORT_HEADERS" || { wait; touch "$STATE/timed.done" "$STATE/background.done"; return 1; }
    # tools/device_ort.sh reads its library from build/ort_gpu.
    mkdir -p build && ln -sfn plugin build/ort_gpu
    # Timed, alone on the GPU before the tests and the harness start: the whole models beside timm's ConvNeXt
    # (benchmarks/profile_models.py), then ncu of the dispatched whole-plane kernels at the stage shapes (its counts
    # for docs/bench/README.md; the profile:<name> stage of tools/device_kernels.sh on build/plugin).
    if wants models; then
        stage models python3 -m benchmarks.profile_models --out "$STATE/models" ${MODELS_ARGS:-}
    fi
    if wants profile; then
        stage kernels_profile env AB_BUILDS=build LIBS=plugin STAGES=profile:plugin OUT="$STATE/profile" \
            LOGS="$LOGS/profile" PROFILE_ARGS="${PROFILE_ARGS:---stages}" tools/device_kernels.sh
    fi
    touch "$STATE/timed.done"
    if wants harness && [ $timed = 1 ]; then
        start_harness
    fi
    if wants kernel_tests; then
        # shellcheck disable=SC2086  # KERNEL_TEST_ARGS: several words (e.g. "-n 8")
        stage kernel_tests python3 -m pytest -q -rs -p no:cacheprovider ${KERNEL_TEST_ARGS:-} tests/test_kernels_gpu.py \
            tests/test_model_gpu.py &
        for name in ${ALSO_TEST:-}; do
            stage "kernel_tests_$name" env WTCONV_KERNELS_LIB="build/ab/$name/libwtconv_kernels_capi.so" \
                python3 -m pytest -q -rs -p no:cacheprovider tests/test_kernels_gpu.py &
        done
    fi
    # compute-sanitizer over the runner's launches, each cut at SANITIZE_S seconds (racecheck of every case takes
    # longer than a session can give it; the log says how far it got).
    if wants sanitize; then
        stage memcheck timeout "$SANITIZE_S" compute-sanitizer --tool memcheck --error-exitcode 3 build/plugin/wtconv_sanitize_runner &
        stage racecheck timeout "$SANITIZE_S" compute-sanitizer --tool racecheck --error-exitcode 3 build/plugin/wtconv_sanitize_runner &
        for name in ${ALSO_TEST:-}; do
            for tool in memcheck racecheck; do
                stage "${tool}_$name" timeout "$SANITIZE_S" compute-sanitizer --tool $tool --error-exitcode 3 \
                    "build/ab/$name/wtconv_sanitize_runner" &
            done
        done
    fi
    wait
    touch "$STATE/background.done"
}

# What the stages so far did, from their .rc files: one line each.
results() {
    for rc in "$LOGS"/*.rc; do
        [ -f "$rc" ] || continue
        local name
        name=$(basename "$rc" .rc)
        read -r code seconds < "$rc"
        printf '%-14s rc=%s (%s s): ' "$name" "$code" "$seconds"
        case $name in
            kernel_tests*|ort_tests|runner_tests) tail -1 "$LOGS/$name.log" ;;
            memcheck*|racecheck*) { grep -E "ERROR SUMMARY|RACECHECK SUMMARY" "$LOGS/$name.log" || tail -1 "$LOGS/$name.log"; } | tail -1 ;;
            harness) grep -E "^(host|gpu): [0-9]+ passed|run_device.sh|warnings in" "$LOGS/$name.log" | tr '\n' ' '; echo ;;
            *) tail -1 "$LOGS/$name.log" ;;
        esac
    done
}

case ${1:-} in
    start)
        take_parts
        [ -f "$STATE/background.pid" ] && { echo "the background stage was already started"; exit 0; }
        copy_checkout "$REPO" || exit 1
        in_repo
        mkdir -p build
        export -f background
        export LOGS STATE ARCHS ORT_HEADERS SANITIZE_S BACKGROUND CUDA_ARCHS=$ARCHS AB_BUILD_STAGES ALSO_TEST MODELS_ARGS \
            PROFILE_ARGS KERNEL_TEST_ARGS
        ORT_HEADERS=$(ort_headers)
        setsid nohup bash -c background > "$LOGS/background.log" 2>&1 < /dev/null &
        echo $! > "$STATE/background.pid"
        echo "background stage started (pid $(cat "$STATE/background.pid"))"
        ;;
    part)
        take_parts
        [ -f "$STATE/background.pid" ] && results
        ;;
    install)
        take_parts
        wheels=()
        for first in "$STATE"/parts/*.part00; do
            [ -f "$first" ] || continue  # no wheel in parts (yet): the serving wheels alone, e.g. for a soak first
            whl=$(basename "$first" .part00)
            cat "$STATE/parts/$whl".part* > "$STATE/$whl" || exit 1
            (cd "$STATE" && md5sum -c "parts/$whl.md5") || { echo "md5 mismatch: a part of $whl is missing"; exit 1; }
            # our binary wheel waits for the `wheel` step; the others (onnxruntime-gpu) go into /tmp/site
            [[ "$whl" == wtconv_trt-* ]] || wheels+=("$STATE/$whl")
        done
        python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
            "${wheels[@]}" .whl/serving/*.whl || exit 1
        mkdir -p /tmp/triton && tar -C /tmp/triton -xJf .whl/serving/tritonserver-py3.12.tar.xz || exit 1
        python3 -c "import onnxruntime as o; print(o.__version__, o.__file__, o.get_available_providers())"
        results
        ;;
    wheel)
        in_repo
        background_done "${WAIT_S:-540}" || { echo "the background stage is still running: call wheel again"; results; exit 1; }
        whl=$(ls "$STATE"/wtconv_trt-*.whl 2> /dev/null | head -1)
        [ -n "$whl" ] || { echo "no wtconv_trt wheel: carry its parts (.devwheels) and call install first"; exit 1; }
        STAGE_TAIL=30 stage wheel env WHEEL="$whl" OUT="$STATE/wheel" tools/device_wheel.sh
        cp "$STATE"/wheel/*.tgz "$OUT/" 2> /dev/null
        results
        ;;
    ort-test)
        in_repo
        # Not beside the background stage: its kernel tests and harness cases take every core, and the ORT tests
        # starve (measured: a quarter of them in 500 s). Wait for it first (WAIT_S, default 540 s).
        background_done "${WAIT_S:-540}" || { echo "the background stage is still running: call ort-test again"; results; exit 1; }
        [ -f "$WTCONV_ORT_LIB" ] || { echo "no $WTCONV_ORT_LIB: the background build failed"; results; exit 1; }
        STAGE_TAIL=30 stage ort_tests env ONNXRUNTIME_INCLUDE_DIR="$(ort_headers)" STAGES=test OUT="$LOGS/ort" \
            tools/device_ort.sh
        # the serving runners on the GPU (CUDA graphs per bucket, torch-cuda and ONNX Runtime)
        STAGE_TAIL=15 stage runner_tests python3 -m pytest -q -rs -p no:cacheprovider tests/test_serving_runners_gpu.py
        results
        ;;
    wait)
        background_done "${2:-540}" && echo "background stage done" || echo "background stage still running"
        results
        ;;
    bench)
        in_repo
        [ -f "$STATE/background.done" ] || echo "WARNING: the background stage is still running: timings are shared"
        ONNXRUNTIME_INCLUDE_DIR=$(ort_headers) STAGES=bench QUICK=${QUICK:-1} OUT="$OUT" tools/device_ort.sh
        ;;
    serve)
        wheels=$PWD/.whl/serving  # carried into the synced tree, not the copy
        in_repo
        [ -f "$STATE/background.done" ] || echo "WARNING: the background stage is still running: timings are shared"
        RUNTIMES=${RUNTIMES:-torch-cuda onnxruntime} QUICK=${QUICK:-1} BUDGET=${BUDGET:-360} SKIP_BUILD=1 \
            WHEELS="$wheels" OUT="$OUT/serving" tools/device_serving.sh
        ;;
    rounds)
        # in this checkout (no copy needed: nothing of it runs after the call)
        [ -f "$STATE/background.pid" ] && [ ! -f "$STATE/background.done" ] &&
            echo "WARNING: the background stage is still running: timings are shared"
        RUNTIMES=${RUNTIMES:-torch-cuda onnxruntime} MODELS=tiny ALTERNATIVES=0 QUICK=0 WINDOW=${WINDOW:-3} \
            SWEEP=${SWEEP:-16,256} POINT_ROUNDS=${POINT_ROUNDS:-3} EXTRA_PROCESS=0 CHECK=${CHECK:-256} \
            SHARED_MEMORY=${SHARED_MEMORY:-cuda} SHARED_MEMORY_FALLBACK=${SHARED_MEMORY_FALLBACK:-system} \
            GPUS=${GPUS:-0} GPUS_SWEEP=${GPUS_SWEEP:-256} BUDGET=${BUDGET:-400} SKIP_BUILD=1 ONNX_DIR=$STATE/onnx \
            OUT="$OUT/rounds" tools/device_serving.sh
        ;;
    soak-start)
        [ -f "$SOAK_STATE/started" ] && { echo "the soak was already started"; soak_results; exit 0; }
        # the libraries of a background build still under way (a timed A/B before it, say) and the timed steps
        # after it (models, profile): waited for, as long as this call may wait
        start=$SECONDS
        # (timed.done: the build and the timed steps after it are over, whatever came of them)
        while [ ! -f "$STATE/timed.done" ] && [ -f "$STATE/background.pid" ] && [ ! -f "$STATE/background.done" ] \
            && [ $((SECONDS - start)) -lt "${2:-540}" ]; do
            sleep 5
        done
        [ -f "$WTCONV_KERNELS_LIB" ] && [ -f "$WTCONV_ORT_LIB" ] \
            || { echo "no $WTCONV_KERNELS_LIB or $WTCONV_ORT_LIB yet: call soak-start again"; results; exit 1; }
        rm -rf "$SOAK_STATE" && copy_checkout "$SOAK_STATE/repo" || exit 1
        touch "$SOAK_STATE/started"
        # in its copy, detached (setsid): it outlives this call; rc written when it ends. --fork: without it the
        # subshell waits for the soak, holding this call's output open (a caller piping it waits the whole soak).
        # RUNTIMES: only the soak's runtimes need to run here (device_serving.sh checks each one it is given).
        soak_runtimes=${SOAK_RUNTIMES:-torch-cuda}
        (cd "$SOAK_STATE/repo" && MAIN=0 MODELS=tiny ALTERNATIVES=0 SOAK=${SOAK:-600} RUNTIMES="$soak_runtimes" \
            SOAK_RUNTIMES="$soak_runtimes" SOAK_SAMPLE=${SOAK_SAMPLE:-60} BUDGET=100000 SKIP_BUILD=1 \
            ONNX_DIR=$STATE/onnx OUT="$SOAK_STATE/out" TMPDIR="$SOAK_STATE" \
            setsid --fork nohup bash -c 'tools/device_serving.sh; echo $? > "$0/rc"' "$SOAK_STATE" \
            > "$SOAK_STATE/run.log" 2>&1 < /dev/null &)
        echo "soak started: ${SOAK:-600} s of ${SOAK_RUNTIMES:-torch-cuda} (log $SOAK_STATE/run.log)"
        ;&  # and wait, as soak-wait does
    soak-wait)
        [ -f "$SOAK_STATE/started" ] || { echo "no soak started: call soak-start first"; exit 1; }
        limit=${2:-540}
        start=$SECONDS
        while [ ! -f "$SOAK_STATE/rc" ] && [ $((SECONDS - start)) -lt "$limit" ]; do sleep 5; done
        soak_results
        ;;
    collect)
        results | tee "$LOGS/summary.txt"
        cp "$STATE"/ab/ab.json "$STATE"/ab/ab.md "$OUT/" 2>/dev/null
        [ -d "$STATE/models" ] && mkdir -p "$OUT/models" && cp -r "$STATE/models/." "$OUT/models/"
        pack_logs "$OUT/session_logs.tgz" "$STATE" logs
        ;;
    pack-libs)
        build=${PACK_BUILD:-.devbuild}
        headers=$(ort_headers)
        [ -n "$headers" ] || { echo "no ONNX Runtime headers: carry third_party/onnxruntime-headers/<version>"; exit 1; }
        build_plugin "$build" -DWTCONV_BUILD_PLUGIN_HARNESS=OFF -DCMAKE_BUILD_WITH_INSTALL_RPATH=ON \
            -DONNXRUNTIME_INCLUDE_DIR="$headers" --target wtconv_kernels_capi --target wtconv_ort || exit 1
        libs=(libwtconv_kernels_capi.so onnxruntime/libwtconv_ort.so)
        [ -f "$build/libwtconv_kernels.so" ] && libs+=(libwtconv_kernels.so)  # kernels built as a library of their own
        mkdir -p "$(dirname "$CARRIED_LIBS")" &&
            tar -C "$build" --transform 's,.*/,,' -cJf "$CARRIED_LIBS" "${libs[@]}" || exit 1
        echo "packed for sm_$ARCHS: $(du -h "$CARRIED_LIBS" | cut -f1) $CARRIED_LIBS (${libs[*]})"
        ;;
    *)
        sed -n '2,/^set -uo/p' "$0" | sed '$d'  # the header
        exit 2
        ;;
esac
