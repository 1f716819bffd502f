# shellcheck shell=bash
# tools/device_lib.sh — what every GPU-machine script shares; sourced, never run:
#
#   source "$(dirname "${BASH_SOURCE[0]}")/device_lib.sh"
#
#   device_start [LOGS]          LOGS: a folder for the logs (default: a fresh temporary one); status 0, no notes yet;
#                                OUT (the results' folder, default device_out) made
#   stage NAME COMMAND...        runs COMMAND with its output in $LOGS/NAME.log and "rc seconds" in $LOGS/NAME.rc;
#                                notes NAME, its exit status and time; prints a header and the log's last
#                                STAGE_TAIL lines (25); returns the command's status (a failure also sets status 1)
#   note TEXT                    one more line for the summary
#   configure_plugin BUILD ARGS  the one CMake configure of plugin/: Release, CUDA_ARCHS (90), Ninja where it is
#                                installed and BUILD is new; ARGS are further -D options
#   build_plugin BUILD ARGS      configure_plugin, then the build: ARGS of the form --target NAME go to the build
#                                (default: every target), the others to the configure
#   gpu_info                     the GPU's name, driver, memory and clock, one line per GPU (status 1 without one)
#   ort_headers                  the newest ONNX Runtime C API header folder beside the checkout (../shared or
#                                third_party/onnxruntime-headers/<version>/include), or nothing
#   pack_logs ARCHIVE [DIR ENTRY...]   the logs (default: all of $LOGS) into ARCHIVE (.tgz)
#   device_finish ARCHIVE        packs the logs, prints "===== summary" and the notes, runs after_summary if the
#                                script defines it, and exits with status
#
# DRY_RUN=1: stage writes the command it would run into its log instead of running it (status 0), so a script's
# shell logic can be followed on a machine without a GPU (tests/test_device_scripts.py does); the stages whose names
# match the pattern DRY_RUN_FAIL (a glob) fail there instead, to follow a script's way round a failure.
# Scripts that use it: device_kernels.sh, device_ort.sh, device_serving.sh, device_session.sh, device_wheel.sh, and
# plugin/trt/harness/run_device.sh.

device_start() {
    OUT=${OUT:-device_out}
    mkdir -p "$OUT"
    LOGS=${1:-$(mktemp -d)}
    mkdir -p "$LOGS"
    status=0
    summary=()
    export PYTHONUNBUFFERED=1
}

note() {
    summary+=("$*")
}

stage() {
    local name=$1
    shift
    local start=$SECONDS rc
    if [ "${DRY_RUN:-0}" = 1 ]; then
        echo "DRY_RUN: $*" > "$LOGS/$name.log"
        rc=0
        # shellcheck disable=SC2053  # a pattern on purpose
        [[ -n "${DRY_RUN_FAIL:-}" && $name == $DRY_RUN_FAIL ]] && rc=1
    else
        "$@" > "$LOGS/$name.log" 2>&1
        rc=$?
    fi
    local seconds=$((SECONDS - start))
    echo "$rc $seconds" > "$LOGS/$name.rc"
    [ "$rc" -ne 0 ] && status=1
    summary+=("$name: rc=$rc ($seconds s)")
    echo "===== $name rc=$rc ($seconds s, $SECONDS s in all)"
    tail -"${STAGE_TAIL:-25}" "$LOGS/$name.log"
    return "$rc"
}

configure_plugin() {
    local build=$1
    shift
    local generator=()
    if [ ! -f "$build/CMakeCache.txt" ] && command -v ninja > /dev/null 2>&1; then
        generator=(-G Ninja)
    fi
    cmake -S plugin -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release \
        -DCMAKE_CUDA_ARCHITECTURES="${CUDA_ARCHS:-90}" "$@"
}

build_plugin() {
    local build=$1
    shift
    local configure=() targets=()
    while [ $# -gt 0 ]; do
        if [ "$1" = --target ]; then
            targets+=(--target "$2")
            shift 2
        else
            configure+=("$1")
            shift
        fi
    done
    configure_plugin "$build" "${configure[@]}" && cmake --build "$build" -j "${targets[@]}"
}

gpu_info() {
    command -v nvidia-smi > /dev/null 2>&1 || return 1
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader 2>&1
}

ort_headers() {
    # shellcheck disable=SC2012  # the folder names are versions, sorted as versions
    ls -d "$PWD"/../shared/onnxruntime-headers/*/include "$PWD"/third_party/onnxruntime-headers/*/include \
        2> /dev/null | sort -V | tail -1
}

pack_logs() {
    local archive=$1
    shift
    if [ $# -eq 0 ]; then
        tar czf "$archive" -C "$LOGS" . 2> /dev/null
    else
        tar czf "$archive" -C "$@" 2> /dev/null
    fi
}

device_finish() {
    pack_logs "$1"
    echo "===== summary"
    printf '%s\n' "${summary[@]}"
    if declare -F after_summary > /dev/null; then
        after_summary
    fi
    exit "$status"
}
