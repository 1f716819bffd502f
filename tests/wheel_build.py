"""The reduced binary wheel of a test run: what `WTCONV_WHEEL=1 pip wheel .` builds (README, "Install the binary
wheel"), for one CUDA architecture, with both TensorRT ABIs and the ONNX Runtime op. Its kernels are not compiled
again: the wheel's libwtconv_kernels.so is linked from the compile test's static kernels (tests/kernels_tree.py,
WTCONV_WHEEL_KERNELS_PREBUILT), so what this adds to a run is the plugins, the ONNX Runtime op and the packaging.

CMake's build folder is kept per source hash in the tests' build folder (conftest.test_builds_dir), so a second run
rebuilds only what changed; the wheel itself is made anew each run (its Python files may have changed)."""

from __future__ import annotations

import fcntl
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from kernels_tree import ARCHS, kernels_tree

ROOT = Path(__file__).resolve().parent.parent
# The TensorRT header trees beside the checkout, as for the plugin harness (tests/test_plugin_harness.py).
HEADER_TREES = ROOT.parent / "shared" / "tensorrt-headers"
_BUILT: dict = {}


@dataclass
class WheelBuild:
    wheel: Path  # the .whl file
    build: Path  # CMake's build folder
    seconds: float  # the `pip wheel` step (the kernels tree's compile not included)
    output: str  # what pip and CMake printed


def tensorrt_roots() -> dict:
    """{"trt10": root, "trt11": root}: the newest header tree of each major beside the checkout (WTCONV_TRT_HEADERS,
    os.pathsep-separated roots, overrides the search)."""
    env = os.environ.get("WTCONV_TRT_HEADERS")
    candidates = [Path(p) for p in env.split(os.pathsep) if p] if env else sorted(HEADER_TREES.glob("*"))
    roots = {}
    for root in candidates:
        version = root / "include" / "NvInferVersion.h"
        if not version.is_file():
            continue
        match = re.search(r"#define\s+(?:TRT_MAJOR_ENTERPRISE|NV_TENSORRT_MAJOR)\s+(\d+)", version.read_text())
        if match:
            roots[f"trt{match.group(1)}"] = root.resolve()
    return roots


def skip_reason() -> str | None:
    from wtconv_libs.build import onnxruntime_headers

    roots = tensorrt_roots()
    missing = [abi for abi in ("trt10", "trt11") if abi not in roots]
    if missing:
        return (
            f"TensorRT headers for {', '.join(missing)} not found ({HEADER_TREES}, or WTCONV_TRT_HEADERS): the wheel "
            "holds a plugin for each of TensorRT 10 and 11"
        )
    for tool in ("cmake", "nvcc", "c++"):
        if shutil.which(tool) is None:
            return f"{tool} not found on PATH: the binary wheel cannot be built"
    if onnxruntime_headers(source=ROOT / "plugin") is None:
        return "ONNX Runtime C API headers not found: the wheel's libwtconv_ort.so cannot be built"
    for module, package in (("scikit_build_core", "scikit-build-core"), ("auditwheel", "auditwheel")):
        if importlib.util.find_spec(module) is None:  # the build backend (no build isolation); the tag's check
            return f"{package} is not installed (the test extra installs it)"
    return None


def reduced_wheel() -> WheelBuild:
    """The wheel for this checkout, built once per process under a lock (test workers of one run share the build
    folder). AssertionError with the output when a step fails."""
    if "wheel" not in _BUILT:
        from conftest import test_builds_dir

        from wtconv_libs.build import sources_digest

        ok, output, kernels = kernels_tree(ARCHS)
        assert ok, f"the kernels do not compile:\n{output[-4000:]}"
        roots = tensorrt_roots()
        digest = sources_digest(ROOT / "plugin", "wheel", ARCHS, *(str(roots[a]) for a in ("trt10", "trt11")))[:16]
        folder = test_builds_dir() / f"wheel-{digest}"
        folder.mkdir(parents=True, exist_ok=True)
        with open(folder / ".lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            _BUILT["wheel"] = _build(folder, kernels / "libwtconv_kernels.a", roots)
    return _BUILT["wheel"]


def _build(folder: Path, kernels: Path, roots: dict) -> WheelBuild:
    from wtconv_libs.build import onnxruntime_headers

    dist = folder / "dist"
    shutil.rmtree(dist, ignore_errors=True)
    env = dict(os.environ)
    env.update(
        WTCONV_WHEEL="1",
        WTCONV_WHEEL_CUDA_ARCHITECTURES=ARCHS,
        WTCONV_WHEEL_KERNELS_PREBUILT=str(kernels),
        WTCONV_WHEEL_TENSORRT_ROOTS=f"{roots['trt10']};{roots['trt11']}",
        ONNXRUNTIME_INCLUDE_DIR=str(onnxruntime_headers(source=ROOT / "plugin")),
        CMAKE_BUILD_PARALLEL_LEVEL=str(os.cpu_count() or 2),
    )
    command = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-w", str(dist)]
    # Warnings are errors in the plugin and the ONNX Runtime op here, as in the harness build (not for users, whose
    # newer compilers may warn about more).
    command += ["-C", f"build-dir={folder / 'build'}", "-C", "cmake.define.WTCONV_PLUGIN_WERROR=ON"]
    command += ["-C", "cmake.define.WTCONV_ORT_WERROR=ON", str(ROOT)]
    start = time.monotonic()
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=1800)
    seconds = time.monotonic() - start
    output = done.stdout + done.stderr
    wheels = sorted(dist.glob("*.whl"))
    assert done.returncode == 0 and len(wheels) == 1, f"pip wheel failed ({done.returncode}):\n{output[-6000:]}"
    return WheelBuild(wheels[0], folder / "build", seconds, output)
