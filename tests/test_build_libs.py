"""``wtconv-trt build-libs`` as a new user meets it: what it will not build is said before the compiling starts, and
every source tree (a second clone, a checkout that moved) builds in its own CMake folder of the per-user cache.

The two-clone build configures and builds the ONNX Runtime custom-op library with CUDA off (a C++ compiler and
ONNX Runtime's C API headers are all it needs), from two copies of plugin/ with one cache folder: CMake refuses a
build folder configured from another source folder, which is what a shared folder gave the second clone.
"""

from __future__ import annotations

import logging
import shutil

import pytest
from conftest import REPO, ort_library_skip_reason

import wtconv_trt
from wtconv_core.errors import ConfigurationError
from wtconv_libs import build
from wtconv_trt import cli


def test_missing_headers_are_said_before_compiling(tmp_path, monkeypatch, caplog, capsys):
    """Without --tensorrt-headers: one warning naming what is not built and where the headers come from, logged
    before CMake runs (the stand-in records what was said when it was called), and the same note at the end."""
    said_before = []

    def cmake_stand_in(**options):
        said_before.extend(r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING)
        return {"kernels": tmp_path / "libwtconv_kernels_capi.so"}

    monkeypatch.setattr(build, "build_libraries", cmake_stand_in)
    monkeypatch.setattr(build, "cuda_gpu_count", lambda: 1)  # a GPU machine: the CUDA code is wanted
    with caplog.at_level(logging.INFO):
        built = wtconv_trt.build_libraries()
    assert len(said_before) == 1 and said_before[0].startswith("no TensorRT headers given: building the kernel library")
    assert "github.com/NVIDIA/TensorRT" in said_before[0] and "--tensorrt-headers DIR" in said_before[0]
    assert built.note.startswith("no TensorRT plugin built: ") and "11.x for TensorRT 11 and TensorRT-RTX" in built.note

    capsys.readouterr()
    assert cli.main(["build-libs"]) == 0
    out, err = capsys.readouterr()
    assert out.split() == ["kernels", str(tmp_path / "libwtconv_kernels_capi.so")]
    lines = err.strip().splitlines()
    assert lines[0].startswith("no TensorRT headers given") and lines[-1].startswith("(no TensorRT plugin built: ")


def test_a_build_the_lookup_would_not_take_is_said(tmp_path, monkeypatch, capsys):
    """With the binary wheel's libwtconv_ort.so in the package's lib/ (first in the lookup after the environment
    variable), a build-libs build in the per-user cache would never be used: the command says which one is taken and
    how to use the new one."""
    from wtconv_libs import lookup

    package = tmp_path / "package_lib"
    package.mkdir()
    (package / "libwtconv_ort.so").write_bytes(b"the wheel's")
    built = tmp_path / "cache" / "lib" / "libwtconv_ort.so"
    monkeypatch.setattr(lookup, "package_lib_dir", lambda: package)
    monkeypatch.setattr(build, "build_libraries", lambda **options: {"ort": built})
    monkeypatch.setattr(build, "nvcc_path", lambda: None)
    built.parent.mkdir(parents=True)
    built.write_bytes(b"just built")
    assert cli.main(["build-libs", "--no-cuda"]) == 0
    err = capsys.readouterr().err
    assert (
        f"(libwtconv_ort.so: the lookup takes {package / 'libwtconv_ort.so'} first, not this build; use this one with "
        f"WTCONV_ORT_LIB={built}, or build with --into-package to replace that one)" in err
    ), err
    (package / "libwtconv_ort.so").unlink()
    assert cli.main(["build-libs", "--no-cuda"]) == 0
    assert "the lookup takes" not in capsys.readouterr().err


def test_each_source_tree_has_its_own_build_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("WTCONV_TRT_CACHE", str(tmp_path / "cache"))
    first = build.default_build_dir(tmp_path / "clone1" / "plugin", "trt11")
    assert first.parent == tmp_path / "cache" / "build" and first.name.startswith("trt11-")
    assert first == build.default_build_dir(tmp_path / "clone1" / "plugin", "trt11")
    assert first != build.default_build_dir(tmp_path / "clone2" / "plugin", "trt11")
    assert first != build.default_build_dir(tmp_path / "clone1" / "plugin", None)


def test_without_a_gpu_the_hints_name_no_cuda(tmp_path, monkeypatch, caplog):
    """Where no CUDA GPU is visible, a plain build-libs says before compiling that --no-cuda is what this machine
    needs, and every hint that sends the user to build libwtconv_ort.so names it, doctor included; with a GPU they
    name plain build-libs."""
    from trt_engine import environment

    said_before = []

    def cmake_stand_in(**options):
        said_before.extend(r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING)
        return {"kernels": tmp_path / "libwtconv_kernels_capi.so"}

    monkeypatch.setattr(build, "build_libraries", cmake_stand_in)
    monkeypatch.setattr(build, "nvcc_path", lambda: tmp_path / "nvcc")
    monkeypatch.setenv("WTCONV_TRT_CACHE", str(tmp_path / "empty-cache"))
    monkeypatch.delenv("WTCONV_ORT_LIB", raising=False)
    for gpus, command in ((0, "wtconv-trt build-libs --no-cuda"), (1, "wtconv-trt build-libs")):
        monkeypatch.setattr(build, "cuda_gpu_count", lambda gpus=gpus: gpus)
        monkeypatch.setattr(environment, "cuda_gpu_count", lambda gpus=gpus: gpus)
        said_before.clear()
        caplog.clear()
        with caplog.at_level(logging.INFO):
            wtconv_trt.build_libraries(tensorrt_headers=None)
        no_gpu_warning = [m for m in said_before if m.startswith("no CUDA GPU here")]
        assert len(no_gpu_warning) == (0 if gpus else 1) and all("--no-cuda" in m for m in no_gpu_warning)
        with pytest.raises(ConfigurationError) as caught:
            wtconv_trt.ort_library()
        assert f"'{command}' builds and installs it" in str(caught.value)
        findings = {f.what: f.detail for f in environment.survey().can}
        assert f"this machine needs '{command}'" in findings["build the libraries (wtconv-trt build-libs)"]
        ort_cpu = next(detail for name, detail in findings.items() if name.startswith("run plugin exports in ONNX"))
        assert f"({command})" in ort_cpu


def test_doctor_stops_asking_for_the_library_once_it_is_built(ort_library, tmp_path, monkeypatch):
    """Without a GPU, doctor asks for 'build-libs --no-cuda' until libwtconv_ort.so is in the per-user cache, where
    build-libs --no-cuda installs it; then it says it is built, and asks only for what is still missing."""
    from trt_engine import environment
    from wtconv_libs import lookup

    monkeypatch.setenv("WTCONV_TRT_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("WTCONV_ORT_LIB", raising=False)
    monkeypatch.setattr(lookup, "package_lib_dir", lambda: tmp_path / "no-package-lib")
    monkeypatch.setattr(lookup, "build_tree_dir", lambda: tmp_path / "no-build-tree")
    monkeypatch.setattr(build, "cuda_gpu_count", lambda: 0)
    monkeypatch.setattr(environment, "cuda_gpu_count", lambda: 0)
    what = "build the libraries (wtconv-trt build-libs)"

    before = {f.what: f.detail for f in environment.survey().can}[what]
    assert "this machine needs 'wtconv-trt build-libs --no-cuda' for libwtconv_ort.so" in before
    installed = lookup.install_dir("ort") / lookup.FILE_NAMES["ort"]
    installed.parent.mkdir(parents=True)
    shutil.copy(ort_library, installed)
    after = {f.what: f.detail for f in environment.survey().can}[what]
    assert "needs 'wtconv-trt build-libs --no-cuda'" not in after and "libwtconv_ort.so is built" in after, after


def test_the_gpu_count_is_pytorchs():
    """The CUDA driver's count of visible GPUs (no PyTorch) against PyTorch's own."""
    torch = pytest.importorskip("torch")
    assert build.cuda_gpu_count() == torch.cuda.device_count()


@pytest.mark.slow
def test_two_clones_build_with_one_cache(tmp_path, monkeypatch, caplog):
    reason = ort_library_skip_reason()
    headers = build.onnxruntime_headers(source=REPO / "plugin")
    if reason or headers is None:
        pytest.skip(reason or "ONNX Runtime C API headers not found: libwtconv_ort.so cannot be built")
    monkeypatch.setenv("WTCONV_TRT_CACHE", str(tmp_path / "cache"))
    built = []
    for clone in ("clone1", "clone2"):
        source = tmp_path / clone / "plugin"
        shutil.copytree(REPO / "plugin", source, ignore=shutil.ignore_patterns("build*", "__pycache__"))
        shutil.copy(REPO / "VERSION", source.parent / "VERSION")  # the libraries' version (plugin/CMakeLists.txt)
        caplog.clear()
        with caplog.at_level(logging.INFO):
            installed = build.build_libraries(
                source=source,
                kinds=["ort"],
                with_cuda=False,
                onnxruntime_include=headers,
                install_root=tmp_path / clone / "lib",
            )
        assert installed["ort"].is_file()
        # CMake's progress is shown as it builds (one record per line it prints: "[ 41%] Building CXX object ..."),
        # and all its output is in the log file.
        progress = [r.getMessage() for r in caplog.records if r.getMessage().startswith("[")]
        assert progress and progress[-1] == "[100%] Built target wtconv_ort", progress
        log_text = (build.default_build_dir(source, None) / "build-libs.log").read_text()
        assert all(line in log_text for line in progress)
        built.append(build.default_build_dir(source, None))
    assert built[0] != built[1] and all((b / "CMakeCache.txt").is_file() for b in built)
    for folder, clone in zip(built, ("clone1", "clone2"), strict=True):
        cache = (folder / "CMakeCache.txt").read_text()
        assert f"{tmp_path / clone / 'plugin'}" in cache
    # What one shared folder gave the second clone (the earlier default): CMake refuses it.
    with pytest.raises(ConfigurationError, match="does not match the source"):
        build.build_libraries(
            source=tmp_path / "clone2" / "plugin",
            build_dir=built[0],
            kinds=["ort"],
            with_cuda=False,
            onnxruntime_include=headers,
            install_root=tmp_path / "clone2" / "lib",
        )
