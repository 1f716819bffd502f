"""The CUDA kernels compiled once per checkout for a test run: the compile test (test_cuda_build.py) checks them,
and the plugin harness (test_plugin_harness.py), the TensorRT-RTX tests' plugin (conftest.rtx_plugin) and the reduced
binary wheel (test_wheel.py) link them (WTCONV_KERNELS_PREBUILT, plugin/README.md), since the kernels do not depend
on TensorRT's headers. One compile of every kernel instantiation
is the longest single step of the suite.

The tree is build/kernels-<architectures> in the checkout, built under a file lock (test workers in other processes
wait for it, then reuse it); a later run rebuilds only what changed."""

import fcntl
import os
import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# One architecture keeps a run short (each architecture is a full device compile of every kernel instantiation):
# sm_80, whose machine code runs on 8.x and whose PTX on every newer GPU, so the libraries linked from this tree (the
# TensorRT-RTX tests' plugin, conftest.TEST_CUDA_ARCHITECTURES; the reduced binary wheel, tests/wheel_build.py) can
# run on every default TensorRT-RTX target. All four of a release build with WTCONV_TEST_ALL_ARCHS=1, or
# WTCONV_TEST_CUDA_ARCHS.
RELEASE_ARCHS = "80;86;89;90"
ARCHS = os.environ.get("WTCONV_TEST_CUDA_ARCHS") or (
    RELEASE_ARCHS if os.environ.get("WTCONV_TEST_ALL_ARCHS") == "1" else "80"
)
TARGETS = ("wtconv_kernels", "wtconv_kernels_capi", "wtconv_sanitize_runner")
_BUILT = {}  # archs -> (ok, output, build folder), in this process


def kernels_tree(archs: str = ARCHS):
    """(ok, cmake's output, build folder) of plugin/ configured for ``archs`` with TARGETS built."""
    if archs not in _BUILT:
        build = ROOT / "build" / ("kernels-" + archs.replace(";", "_"))
        build.parent.mkdir(parents=True, exist_ok=True)
        with open(build.parent / f"{build.name}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            _BUILT[archs] = _configure_and_build(archs, build)
    return _BUILT[archs]


def _configure_and_build(archs: str, build: Path):
    configure = ["cmake", "-S", str(ROOT / "plugin"), "-B", str(build), f"-DCMAKE_CUDA_ARCHITECTURES={archs}"]
    configure += ["-DCMAKE_BUILD_TYPE=Release"]
    if not (build / "CMakeCache.txt").is_file() and shutil.which("ninja"):
        configure += ["-G", "Ninja"]
    result = subprocess.run(configure, capture_output=True, text=True, timeout=600)
    if result.returncode != 0:
        return False, f"cmake configure failed:\n{result.stdout[-4000:]}\n{result.stderr[-4000:]}", build
    jobs = str(max(1, os.cpu_count() or 1))
    result = subprocess.run(
        ["cmake", "--build", str(build), "-j", jobs, "--target", *TARGETS], capture_output=True, text=True, timeout=3600
    )
    if result.returncode != 0:
        return False, f"build failed:\n{result.stdout[-6000:]}\n{result.stderr[-4000:]}", build
    return True, result.stdout, build
