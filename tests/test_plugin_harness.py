"""The TensorRT plugin driven through its IPluginV3 interface by the CTest harness.

For each TensorRT header tree found, builds plugin/ with -Werror on plugin/trt (so "builds" means "no
warnings"), runs plugin/trt's CTest tests and checks their results:

- host part (no CUDA call; runs wherever the headers, CMake and nvcc are): dlopen, getCreators, every
  build-time method, serialization round trip, attachToContext, every bad input, static registration;
- the export lists of both libraries;
- GPU part (enqueue against the float64 spec, shape changes, two contexts, CUDA graphs): needs a CUDA device,
  else skipped with the reason (decided by tests/conftest.py).

TensorRT headers are never in the repository: they are looked for in the roots listed in the environment
variable WTCONV_TRT_HEADERS (os.pathsep-separated, each holding include/NvInferRuntime.h), else TensorRT_ROOT,
else the git-ignored folders .trt/*/ of the checkout, else ../shared/tensorrt-headers/*/ beside it.
Without headers, CMake or nvcc the tests skip, saying so.
"""

import fcntl
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import TENSORRT_HEADERS, cuda_device_skip_reason
from kernels_tree import ARCHS as KERNELS_ARCHS
from kernels_tree import kernels_tree

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.slow  # builds plugin/ once per TensorRT header tree


def header_roots():
    env = os.environ.get("WTCONV_TRT_HEADERS") or os.environ.get("TensorRT_ROOT")
    if env:
        candidates = [Path(p) for p in env.split(os.pathsep) if p]
    else:  # the checkout's ignored .trt/*/, else the header trees beside the checkout (conftest.TENSORRT_HEADERS)
        candidates = sorted((ROOT / ".trt").glob("*")) or sorted(TENSORRT_HEADERS.glob("*"))
    return [p.resolve() for p in candidates if (p / "include" / "NvInferRuntime.h").is_file()]


def toolchain_skip_reason():
    if not header_roots():
        return (
            "TensorRT headers not found: set WTCONV_TRT_HEADERS or TensorRT_ROOT to a directory with "
            "include/NvInferRuntime.h (e.g. the public NVIDIA/TensorRT repository at tag v10.16 or v11.1)"
        )
    for tool in ("cmake", "ctest", "nvcc"):
        if shutil.which(tool) is None and not (tool == "nvcc" and Path("/usr/local/cuda/bin/nvcc").is_file()):
            return f"{tool} not found (needed to build the plugin harness)"
    return None


ROOTS = header_roots()
PARAMS = [pytest.param(r, id=r.name) for r in ROOTS] or [pytest.param(None, id="no-headers")]
_RESULTS = {}
_KERNELS = {}  # CUDA architectures -> libwtconv_kernels.a of a tree built here: the next tree links it


def _run(cmd, log):
    proc = subprocess.run(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    log.write_text(proc.stdout)
    return proc


def harness(root):
    """Builds and runs the CTest harness once per header root; returns (build_ok, build_output, ctest_output)."""
    reason = toolchain_skip_reason()
    if reason:
        pytest.skip(reason)
    if root in _RESULTS:
        return _RESULTS[root]
    build = ROOT / "build" / f"plugin-harness-{root.name}"
    build.parent.mkdir(parents=True, exist_ok=True)
    # One build of a tree at a time, should two test runs share the checkout.
    with open(build.parent / f"{build.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        _RESULTS[root] = _build_and_run(root, build)
    return _RESULTS[root]


def _build_and_run(root, build):
    """Configure, build (the harness target) and run CTest in ``build``; (build_ok, build_output, ctest_output)."""

    def log(kind):
        return build.parent / f"{build.name}.{kind}.log"

    # With a GPU, the kernels for it (the GPU part launches them); without one only the host part runs, which
    # launches no kernel, and the trees link the kernels the compile test builds (tests/kernels_tree.py). Otherwise
    # the kernels do not depend on TensorRT's headers: compiled in the first tree, linked by the others.
    arch = os.environ.get("WTCONV_CUDA_ARCHITECTURES") or ("native" if cuda_device_skip_reason() is None else None)
    if arch is None:
        arch = KERNELS_ARCHS
        if arch not in _KERNELS:
            ok, output, tree = kernels_tree(arch)
            if not ok:
                return False, output, ""
            _KERNELS[arch] = tree / "libwtconv_kernels.a"
    prebuilt = _KERNELS.get(arch)
    configure = _run(
        [
            "cmake",
            "-S",
            "plugin",
            "-B",
            str(build),
            f"-DCMAKE_CUDA_ARCHITECTURES={arch}",
            f"-DTensorRT_ROOT={root}",
            "-DWTCONV_PLUGIN_WERROR=ON",
            f"-DPython3_EXECUTABLE={sys.executable}",
            f"-DWTCONV_KERNELS_PREBUILT={prebuilt or ''}",
        ],
        log("configure"),
    )
    if configure.returncode != 0:
        return False, configure.stdout, ""
    # The harness and what it loads (both plugin libraries, the kernels they link); the rest of plugin/ (the kernel
    # C API, the ONNX Runtime library) is built by the tests that check it.
    compiled = _run(
        ["cmake", "--build", str(build), "-j", str(os.cpu_count() or 2), "--target", "wtconv_plugin_harness"],
        log("build"),
    )
    if compiled.returncode != 0:
        return False, compiled.stdout, ""
    if prebuilt is None and (build / "libwtconv_kernels.a").is_file():
        _KERNELS[arch] = build / "libwtconv_kernels.a"
    ctest = _run(["ctest", "--test-dir", str(build / "trt"), "-V"], log("ctest"))
    output = re.sub(r"(?m)^\d+: ", "", ctest.stdout)
    return True, compiled.stdout, output


def _failures(output):
    return [line for line in output.splitlines() if line.startswith("FAIL")]


@pytest.mark.parametrize("root", PARAMS)
def test_plugin_builds_without_warnings(root):
    ok, build_output, _ = harness(root)
    assert ok, f"configure/build failed (-Wall -Wextra -Werror on plugin/trt):\n{build_output[-4000:]}"


@pytest.mark.parametrize("root", PARAMS)
def test_plugin_host_interface(root):
    ok, _, output = harness(root)
    assert ok, "build failed"
    summary = re.search(r"^host: (\d+) passed, (\d+) failed$", output, re.M)
    assert summary, f"no host summary in the harness output:\n{output[-4000:]}"
    assert int(summary.group(2)) == 0, "\n".join(_failures(output))
    assert int(summary.group(1)) > 100


@pytest.mark.parametrize("root", PARAMS)
def test_plugin_library_exports(root):
    ok, _, output = harness(root)
    assert ok, "build failed"
    assert re.search(r"PASS exports of \S*libwtconv_trt_plugin_dynamic\.so: \[getCreators;setLoggerFinder\]", output)
    assert re.search(r"PASS exports of \S*libwtconv_trt_plugin\.so: \[\]", output)


@pytest.mark.parametrize("root", PARAMS)
def test_plugin_gpu_enqueue(root):
    ok, _, output = harness(root)
    assert ok, "build failed"
    reason = cuda_device_skip_reason()
    if reason:
        pytest.skip(f"GPU part of the plugin harness: {reason}")
    summary = re.search(r"^gpu: (\d+) passed, (\d+) failed$", output, re.M)
    assert summary, f"no gpu summary in the harness output:\n{output[-4000:]}"
    assert int(summary.group(2)) == 0, "\n".join(_failures(output))
    assert int(summary.group(1)) > 0
