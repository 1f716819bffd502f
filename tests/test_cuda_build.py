"""The CUDA kernels compile (plugin/CMakeLists.txt): configure + build into a temporary directory.

Runs wherever ``nvcc`` and ``cmake`` are found (a compile error fails the test even without a GPU); skips with
the reason otherwise. Architectures: WTCONV_TEST_CUDA_ARCHS if set; else all four of a release build
("80;86;89;90") when WTCONV_TEST_ALL_ARCHS=1; else sm_90 alone, which keeps a development run short (each
architecture is a full device compile of every kernel instantiation).
"""

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
RELEASE_ARCHS = "80;86;89;90"
ARCHS = os.environ.get("WTCONV_TEST_CUDA_ARCHS") or (
    RELEASE_ARCHS if os.environ.get("WTCONV_TEST_ALL_ARCHS") == "1" else "90"
)


def _tools_missing():
    for tool in ("nvcc", "cmake"):
        if shutil.which(tool) is None:
            return f"{tool} not found on PATH"
    return None


@pytest.mark.slow
@pytest.mark.skipif(_tools_missing() is not None, reason=str(_tools_missing()))
def test_kernels_compile(tmp_path):
    build = tmp_path / "build"
    configure = [
        "cmake",
        "-S",
        str(ROOT / "plugin"),
        "-B",
        str(build),
        f"-DCMAKE_CUDA_ARCHITECTURES={ARCHS}",
        "-DCMAKE_BUILD_TYPE=Release",
    ]
    if shutil.which("ninja"):
        configure += ["-G", "Ninja"]
    result = subprocess.run(configure, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, f"cmake configure failed:\n{result.stdout[-4000:]}\n{result.stderr[-4000:]}"
    jobs = str(max(1, os.cpu_count() or 1))
    targets = ["--target", "wtconv_kernels", "wtconv_kernels_capi", "wtconv_sanitize_runner"]
    result = subprocess.run(
        ["cmake", "--build", str(build), "-j", jobs, *targets], capture_output=True, text=True, timeout=3600
    )
    assert result.returncode == 0, f"build failed:\n{result.stdout[-6000:]}\n{result.stderr[-4000:]}"
    assert (build / "libwtconv_kernels_capi.so").is_file()
    assert (build / "libwtconv_kernels.a").is_file()
    # Only the C API leaves the shared library (plugin/kernels/exports/wtconv_kernels_capi.map): exported C++
    # template statics are merged across libraries by the loader (STB_GNU_UNIQUE), so a second copy of the
    # kernels in the process would share, and trust, the first one's per-kernel shared-memory records.
    if shutil.which("nm"):
        listing = subprocess.run(
            ["nm", "-D", "--defined-only", str(build / "libwtconv_kernels_capi.so")],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        exported = [line.split()[-1] for line in listing.splitlines() if line.strip()]
        assert exported and all(name.startswith("wtconv_") for name in exported), exported
        assert "wtconv_plan_forward" in exported
