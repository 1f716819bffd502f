#!/usr/bin/env bash
# tools/device_wheel.sh — on a GPU machine, from the repository root: the binary wheel's libraries on a GPU
# (README, "Install the binary wheel"). Installs the wheel into a folder of its own ($OUT/wheel_site), lists the
# machine code inside (cuobjdump --list-elf on its libwtconv_kernels.so) and what `wtconv-trt doctor` reads from each
# library, then runs, on the bundled libraries and not on any built here (the tests' Python is the checkout's):
#   - the ONNX Runtime GPU tests on its libwtconv_ort.so (WTCONV_TEST_ORT_LIB; its CUDA op loads the wheel's kernels);
#   - the PyTorch op's GPU tests, the WTConvNeXt GPU tests and the PyTorch runner of serving on its
#     libwtconv_kernels_capi.so (WTCONV_KERNELS_LIB).
# The four test files run side by side on PYTEST_N workers (default 4, where pytest-xdist is installed; 1: one
# process); the summary counts each file's tests, and a file with none passed (e.g. no CUDA execution provider, every
# test skipped) fails the run.
# WHEEL: the wheel to test, e.g. one built on the CPU machine with the README's command and carried here; without it
# the wheel is built here first with that command, without build isolation (needs scikit-build-core installed and
# WTCONV_WHEEL_TENSORRT_ROOTS, the TensorRT 10.x and 11.x header roots). onnxruntime-gpu must be importable for the
# ONNX Runtime tests (PYTHONPATH, as for device_ort.sh).
#   WHEEL=dist/wtconv_trt-0.1.0-py3-none-manylinux_2_34_x86_64.whl PYTHONPATH=/tmp/site OUT=... [PYTEST_N=4] \
#     tools/device_wheel.sh
# Results: the summary (the wheel, its architectures, each test file's counts); logs in LOGS (default a fresh
# temporary folder), packed into $OUT/wheel_logs.tgz.
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/device_lib.sh"
device_start "${LOGS:-}"
SITE=$(cd "$OUT" && pwd)/wheel_site
finish() {
  device_finish "$OUT/wheel_logs.tgz"
}

gpu_info | tee "$LOGS/gpu.txt"
if [[ -z "${WHEEL:-}" ]]; then
  stage wheel env WTCONV_WHEEL=1 python3 -m pip wheel --no-deps --no-build-isolation -w "$OUT/dist" . || finish
  WHEEL=$(ls "$OUT"/dist/wtconv_trt-*.whl 2> /dev/null | head -1)
fi
if [[ ! -f "${WHEEL:-}" ]]; then
  note "wheel: none (give WHEEL=path, or WTCONV_WHEEL_TENSORRT_ROOTS to build one here)"
  status=1
  finish
fi
note "wheel: $WHEEL ($(du -h "$WHEEL" | cut -f1))"
rm -rf "$SITE"
stage install python3 -m pip install --no-deps --no-index --target "$SITE" "$WHEEL" || finish
LIB=$SITE/wtconv_libs/lib

# The machine code and PTX inside, as the CUDA toolkit reads them.
stage architectures cuobjdump --list-elf --list-ptx "$LIB/libwtconv_kernels.so"
# cuobjdump names each entry by its file: "ELF file 1: wtconvKernel.sm_80.cubin", "PTX file 1: wtconvKernel.sm_121.ptx".
note "machine code: $(grep '^ELF file' "$LOGS/architectures.log" | grep -o 'sm_[0-9]*[a-z]*' | sort -uV | xargs)"
note "PTX: $(grep '^PTX file' "$LOGS/architectures.log" | grep -o 'sm_[0-9]*[a-z]*' | sort -uV | xargs)"
# doctor from the installed package (run from its folder, so the checkout's packages are not imported instead).
stage doctor bash -c "cd '$SITE' && PYTHONPATH=.${PYTHONPATH:+:$PYTHONPATH} python3 -m wtconv_trt doctor"

# The GPU tests, side by side (PYTEST_N workers, pytest-xdist, each file whole on one worker; 1: one process):
#   - the ONNX Runtime GPU tests on the wheel's libwtconv_ort.so (its CUDA op, which loads the wheel's kernels);
#   - the PyTorch op's GPU tests, the WTConvNeXt GPU tests and the PyTorch runner of serving on its
#     libwtconv_kernels_capi.so.
GPU_TESTS=(tests/test_ort_gpu.py tests/test_kernels_gpu.py tests/test_model_gpu.py tests/test_serving_runners_gpu.py)
workers=()
if [[ "${PYTEST_N:-4}" -gt 1 ]] && python3 -c "import xdist" 2> /dev/null; then
  workers=(-n "${PYTEST_N:-4}")
fi
STAGE_TAIL=1 stage pytest env -u WTCONV_ORT_LIB WTCONV_TEST_ORT_LIB="$LIB/libwtconv_ort.so" \
  WTCONV_KERNELS_LIB="$LIB/libwtconv_kernels_capi.so" python3 -m pytest -q -rs -p no:cacheprovider "${workers[@]}" \
  --junitxml="$LOGS/pytest.xml" "${GPU_TESTS[@]}"
note "GPU tests on the wheel's libraries: $(tail -1 "$LOGS/pytest.log")"
# Per file, so that a file whose tests all skipped (no CUDA execution provider, no GPU) fails the run.
if [[ -f "$LOGS/pytest.xml" ]]; then
  while read -r line; do
    note "  $line"
    [[ "$line" == *": 0 passed"* ]] && status=1
  done < <(python3 - "$LOGS/pytest.xml" "${GPU_TESTS[@]}" <<'PY'
import sys
import xml.etree.ElementTree as ET

cases = list(ET.parse(sys.argv[1]).getroot().iter("testcase"))
for path in sys.argv[2:]:
    module = path.removesuffix(".py").replace("/", ".")  # a test's classname: tests.test_x[.TestClass]
    mine = [c for c in cases if ((c.get("classname") or "") + ".").startswith(module + ".")]
    failed = sum(c.find("failure") is not None or c.find("error") is not None for c in mine)
    skipped = sum(c.find("skipped") is not None for c in mine)
    print(f"{path}: {len(mine) - failed - skipped} passed, {failed} failed, {skipped} skipped")
PY
  )
fi
grep -hE "^(FAILED|ERROR)" "$LOGS/pytest.log" | head -20
finish
