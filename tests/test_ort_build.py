"""Building libwtconv_ort.so (plugin/onnxruntime): from a clean clone with a C++ compiler alone, warning-free, and
clean under AddressSanitizer and UndefinedBehaviorSanitizer; its CUDA op compiles wherever nvcc is found; and
build_libraries decides what a machine can build.

The clean-clone build is `git archive HEAD` of the repository (so it is the committed state, as CI's fresh clone
is), configured with CUDA off and the sanitizers on; the ONNX Runtime tests (tests/test_ort_cpu.py and
tests/test_ort_errors.py) then run in a child process on that library (WTCONV_ORT_LIB) with the sanitizer runtime
preloaded: any out-of-bounds access, use after free or undefined behaviour stops the child with a report.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from conftest import REPO, ort_library_skip_reason

from wtconv_core.errors import ConfigurationError
from wtconv_libs import lookup
from wtconv_libs.build import build_libraries, onnxruntime_headers

SANITIZERS = "-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined"


def _configure_and_build(source: Path, build: Path, *options: str, target: str = "wtconv_ort") -> str:
    generator = ["-G", "Ninja"] if shutil.which("ninja") else []
    configure = ["cmake", "-S", str(source), "-B", str(build), *generator, *options]
    done = subprocess.run(configure, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, f"configure failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    jobs = str(max(1, os.cpu_count() or 1))
    built = subprocess.run(
        ["cmake", "--build", str(build), "-j", jobs, "--target", target], capture_output=True, text=True, timeout=1800
    )
    assert built.returncode == 0, f"build failed:\n{built.stdout[-5000:]}\n{built.stderr[-3000:]}"
    return done.stdout + built.stdout


def _sanitizer_runtime(name: str) -> str | None:
    compiler = shutil.which("g++")
    if compiler is None:
        return None
    path = subprocess.run([compiler, f"-print-file-name={name}"], capture_output=True, text=True).stdout.strip()
    return path if os.path.isabs(path) and os.path.isfile(path) else None


@pytest.mark.slow
def test_clean_clone_builds_with_a_cxx_compiler_alone_and_runs_clean_under_sanitizers(tmp_path):
    reason = ort_library_skip_reason()
    if reason:
        pytest.skip(reason)
    if shutil.which("git") is None or not (REPO / ".git").exists():
        pytest.skip("not a git checkout: no clean clone to build")
    asan, cxx_runtime = _sanitizer_runtime("libasan.so"), _sanitizer_runtime("libstdc++.so")
    if asan is None or cxx_runtime is None:
        pytest.skip("g++ with its AddressSanitizer runtime (libasan) is needed")
    clone = tmp_path / "clone"
    clone.mkdir()
    archive = subprocess.run(
        ["git", "-C", str(REPO), "archive", "--format=tar", "HEAD", "plugin", "VERSION", "pyproject.toml"],
        capture_output=True,
        check=True,
    ).stdout
    (tmp_path / "clone.tar").write_bytes(archive)
    with tarfile.open(tmp_path / "clone.tar") as tar:
        tar.extractall(clone, filter="data")
    headers = onnxruntime_headers(source=REPO / "plugin")
    build = tmp_path / "build"
    log = _configure_and_build(
        clone / "plugin",
        build,
        "-DCMAKE_BUILD_TYPE=RelWithDebInfo",
        "-DWTCONV_WITH_CUDA=OFF",  # a machine with g++ alone, whatever this one has
        "-DWTCONV_ORT_WERROR=ON",
        f"-DONNXRUNTIME_INCLUDE_DIR={headers}",
        f"-DCMAKE_CXX_FLAGS={SANITIZERS}",
    )
    assert "CUDA op OFF" in log
    library = build / "onnxruntime" / lookup.FILE_NAMES["ort"]
    assert lookup.ort_library_info(library)["cuda"] == "no"

    env = dict(os.environ)
    env.update(
        {
            "WTCONV_ORT_LIB": str(library),
            # The runtime first (Python itself is not instrumented), then libstdc++ so that ASan finds the real
            # __cxa_throw when a library throws.
            "LD_PRELOAD": f"{asan} {cxx_runtime}",
            "ASAN_OPTIONS": "detect_leaks=0:exitcode=23",
            "UBSAN_OPTIONS": "print_stacktrace=1:halt_on_error=1",
        }
    )
    child = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "tests/test_ort_errors.py",
            "tests/test_ort_cpu.py",
            "-k",
            "not export and not default_model and not prefers",
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=env,
        timeout=1800,
    )
    report = child.stdout[-4000:] + child.stderr[-4000:]
    assert "AddressSanitizer" not in report and "runtime error" not in report, report
    assert child.returncode == 0, report
    assert " passed" in child.stdout.splitlines()[-1], report


@pytest.mark.slow
def test_cuda_op_compiles(tmp_path):
    """The CUDA op (wtconvOrtCudaOp.cpp, on the kernels' header) compiles warning-free wherever nvcc is found; only
    its object is built (the kernels themselves are tests/test_cuda_build.py's)."""
    reason = ort_library_skip_reason()
    if reason:
        pytest.skip(reason)
    if shutil.which("nvcc") is None or shutil.which("ninja") is None:
        pytest.skip("nvcc and ninja are needed to compile the CUDA op alone")
    build = tmp_path / "build"
    log = _configure_and_build(
        REPO / "plugin",
        build,
        "-DCMAKE_CUDA_ARCHITECTURES=90",
        "-DWTCONV_ORT_WERROR=ON",
        f"-DONNXRUNTIME_INCLUDE_DIR={onnxruntime_headers(source=REPO / 'plugin')}",
        target="onnxruntime/CMakeFiles/wtconv_ort.dir/wtconvOrtCudaOp.cpp.o",
    )
    assert "CUDA op ON" in log
    assert (build / "onnxruntime" / "CMakeFiles" / "wtconv_ort.dir" / "wtconvOrtCudaOp.cpp.o").is_file()


def test_build_libraries_says_what_cannot_be_built(monkeypatch, tmp_path):
    """Without nvcc the kernels and plugins are refused by name while the ONNX Runtime library stays buildable;
    without nvcc and without ONNX Runtime headers there is nothing to build, and the message says what is missing."""
    from wtconv_libs import build

    if shutil.which("cmake") is None:
        pytest.skip("cmake is not on PATH")
    monkeypatch.setattr(build, "nvcc_path", lambda: None)
    with pytest.raises(ConfigurationError, match="the kernels libraries need the CUDA toolkit"):
        build_libraries(source=REPO / "plugin", build_dir=tmp_path, kinds=["kernels"])
    monkeypatch.setattr(build, "onnxruntime_headers", lambda given=None, source=None: None)
    with pytest.raises(ConfigurationError, match="nothing to build here: no CUDA toolkit"):
        build_libraries(source=REPO / "plugin", build_dir=tmp_path)
    with pytest.raises(ConfigurationError, match="ONNXRUNTIME_INCLUDE_DIR"):
        build_libraries(source=REPO / "plugin", build_dir=tmp_path, kinds=["ort"])
    assert not any(tmp_path.iterdir())  # refused before configuring


def test_onnxruntime_headers_option_is_checked(tmp_path):
    from wtconv_core.errors import InputError

    with pytest.raises(InputError, match="no onnxruntime_c_api.h there"):
        onnxruntime_headers(tmp_path)
    (tmp_path / "include").mkdir()
    (tmp_path / "include" / "onnxruntime_c_api.h").write_text("#define ORT_API_VERSION 17\n")
    assert onnxruntime_headers(tmp_path) == (tmp_path / "include").resolve()
