"""The CUDA kernels compile (plugin/CMakeLists.txt): configure + build of the kernel libraries, in the tree the plugin
harness links too (tests/kernels_tree.py).

Runs wherever ``nvcc`` and ``cmake`` are found (a compile error fails the test even without a GPU); skips with
the reason otherwise. Architectures: WTCONV_TEST_CUDA_ARCHS if set; else all four of a release build
("80;86;89;90") when WTCONV_TEST_ALL_ARCHS=1; else sm_80 alone (kernels_tree.ARCHS).
"""

import shutil
import subprocess

import pytest
from kernels_tree import kernels_tree


def _tools_missing():
    for tool in ("nvcc", "cmake"):
        if shutil.which(tool) is None:
            return f"{tool} not found on PATH"
    return None


@pytest.mark.slow
@pytest.mark.skipif(_tools_missing() is not None, reason=str(_tools_missing()))
def test_kernels_compile():
    ok, output, build = kernels_tree()
    assert ok, output
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
