"""What a plugin library can run on, and which library a registered creator came from (trt_engine.plugins).

- GPU code: the architectures are read from the library's ``.nv_fatbin`` section (oracle: libraries nvcc builds
  here for known ``-gencode`` lists). A TensorRT-RTX build refuses a requested compute capability the library has
  no code for (it would build, then fail at the first enqueue on that GPU), and leaves such targets out of its
  defaults with a warning; with real TensorRT-RTX the refusal comes before anything is built.
- Creator source: a WTConv2d creator already registered in the process by another library (an LD_PRELOADed one,
  another build) is refused by name instead of silently used; the same file, or an identical copy, is fine. Real
  TensorRT-RTX in a subprocess (the plugin registry is process-wide).
"""

import logging
import shutil
import subprocess
import sys
import textwrap

import pytest

from trt_engine.plugins import check_creator_source, runnable_targets
from wtconv_core.errors import PluginError
from wtconv_libs.plugin_elf import inspect_library, parse_fatbin

NVCC = shutil.which("nvcc")
needs_nvcc = pytest.mark.skipif(NVCC is None, reason="nvcc not found on PATH: no CUDA library can be built here")

KERNEL = '__global__ void k(float* x) { x[threadIdx.x] = 1.f; }\nextern "C" void run(float* x) { k<<<1, 32>>>(x); }\n'


@pytest.fixture(scope="module")
def cuda_libs(tmp_path_factory):
    if NVCC is None:
        pytest.skip("nvcc not found on PATH: no CUDA library can be built here")
    d = tmp_path_factory.mktemp("cuda_libs")
    (d / "k.cu").write_text(KERNEL)

    def build(name, *gencode):
        args = [NVCC, "-shared", "-Xcompiler", "-fPIC", "-o", str(d / name), str(d / "k.cu")]
        for g in gencode:
            args += ["-gencode", g]
        subprocess.run(args, check=True, capture_output=True)
        return d / name

    return {
        # machine code for 8.0 and 8.6, PTX for 8.6
        "ampere": build("libampere.so", "arch=compute_80,code=sm_80", "arch=compute_86,code=[sm_86,compute_86]"),
        # machine code for 9.0 only, no PTX
        "hopper_only": build("libhopper.so", "arch=compute_90,code=sm_90"),
        # what plugin/CMakeLists.txt makes of CMAKE_CUDA_ARCHITECTURES=80: sm_80 + compute_80
        "cmake80": build("libcmake80.so", "arch=compute_80,code=[sm_80,compute_80]"),
    }


@needs_nvcc
def test_architectures_are_read_from_the_fat_binary(cuda_libs):
    ampere = inspect_library(cuda_libs["ampere"]).cuda_code
    assert ampere.cubins == {80, 86} and ampere.ptx == {86}
    assert ampere.describe() == "sm_80, sm_86 (+ PTX compute_86)"
    # machine code runs on its major's later minors; PTX on anything not older than it
    assert [cc for cc in (75, 80, 86, 87, 89, 90, 100, 120) if ampere.runs_on(cc)] == [80, 86, 87, 89, 90, 100, 120]
    hopper = inspect_library(cuda_libs["hopper_only"]).cuda_code
    assert hopper.cubins == {90} and not hopper.ptx
    assert [cc for cc in (80, 89, 90, 100, 120) if hopper.runs_on(cc)] == [90]


def test_a_library_without_gpu_code_has_none(tmp_path):
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler")
    (tmp_path / "a.c").write_text("int f(void) { return 1; }\n")
    subprocess.run([cc, "-shared", "-fPIC", "-o", str(tmp_path / "liba.so"), str(tmp_path / "a.c")], check=True)
    assert inspect_library(tmp_path / "liba.so").cuda_code is None
    assert runnable_targets(tmp_path / "liba.so", ["7.5", "8.0"], requested=True) == ["7.5", "8.0"]


def test_a_damaged_fat_binary_is_an_error_not_a_guess():
    header = (0xBA55ED50).to_bytes(4, "little") + (1).to_bytes(2, "little") + (16).to_bytes(2, "little")
    with pytest.raises(ValueError, match="overruns"):
        parse_fatbin(header + (1 << 20).to_bytes(8, "little") + bytes(64))


@needs_nvcc
def test_requested_targets_the_library_cannot_run_are_refused(cuda_libs):
    with pytest.raises(PluginError, match=r"compute_capabilities 7\.5: .*sm_80, sm_86 \(\+ PTX compute_86\).*drop it"):
        runnable_targets(cuda_libs["ampere"], ["7.5", "8.6"], requested=True)
    assert runnable_targets(cuda_libs["ampere"], ["8.9", "12.0", "current"], requested=True) == [
        "8.9",
        "12.0",
        "current",
    ]
    with pytest.raises(PluginError, match=r"8\.0, 8\.9, 12\.0: .*sm_90\b"):
        runnable_targets(cuda_libs["hopper_only"], ["8.0", "8.9", "12.0"], requested=True)


@needs_nvcc
def test_default_targets_are_narrowed_with_a_warning(cuda_libs, caplog):
    defaults = ["7.5", "8.0", "8.6", "8.9", "12.0"]
    with caplog.at_level(logging.WARNING, logger="trt_engine.plugins"):
        kept = runnable_targets(cuda_libs["cmake80"], defaults, requested=False)
    assert kept == ["8.0", "8.6", "8.9", "12.0"]
    assert "not for 7.5" in caplog.text
    with pytest.raises(PluginError, match="none of the default TensorRT-RTX targets"):
        runnable_targets(cuda_libs["hopper_only"], ["8.0", "8.6", "12.0"], requested=False)


def test_tensorrt_rtx_build_refuses_a_target_before_building(rtx_plugin, tmp_path, monkeypatch):
    """build_engine with real TensorRT-RTX: --compute-capability 7.5 with our plugin (no code below 8.0: the kernels
    need 99 KB of shared memory per block) is refused naming the library's code, before the builder runs."""
    from trt_engine import tensorrt_api
    from trt_engine.build import BuildOptions, build_engine
    from wtconv_export.onnx_export import export_onnx
    from wtconv_torch.models import load_default_model

    model, _ = load_default_model()
    onnx_path = tmp_path / "digits.onnx"
    export_onnx(model, onnx_path, ops="plugin", precision="fp16", input_shape=(1, 1, 32, 32))
    monkeypatch.setattr(tensorrt_api, "NetworkBuilder", None)  # reaching the builder would fail differently
    with pytest.raises(PluginError, match=r"compute_capabilities 7\.5: plugin library .* has code for sm_"):
        build_engine(
            BuildOptions(
                onnx=str(onnx_path),
                precision="fp16",
                plugin=str(rtx_plugin["plugin"]),
                engine=str(tmp_path / "m.engine"),
                progress=False,
                backend="tensorrt-rtx",
                compute_capabilities=["7.5"],
            )
        )


# ---- which library registered the creator ----


@pytest.fixture(scope="module")
def record_libs(tmp_path_factory):
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler to build test shared libraries")
    d = tmp_path_factory.mktemp("record_libs")
    record = (
        "wtconv_trt_plugin format=1 library=static abi=trt11 tensorrt=11.1.0 tensorrt_rtx_abi=yes plugin=WTConv2d "
        "plugin_version=1 package_version=0.1.0"
    )

    def build(name, extra=""):
        source = f'__attribute__((section(".wtconv_trt_abi"), used)) const char r[] = "{record}";\n{extra}'
        (d / f"{name}.c").write_text(source)
        subprocess.run([cc, "-shared", "-fPIC", "-o", str(d / name), str(d / f"{name}.c")], check=True)
        return d / name

    libs = {"first": build("libfirst.so"), "other": build("libother.so", "int other_build(void) { return 2; }\n")}
    libs["copy"] = d / "copy" / "libfirst.so"
    libs["copy"].parent.mkdir()
    shutil.copy(libs["first"], libs["copy"])
    plain = d / "libplain.so"
    (d / "plain.c").write_text("int plain(void) { return 0; }\n")
    subprocess.run([cc, "-shared", "-fPIC", "-o", str(plain), str(d / "plain.c")], check=True)
    libs["plain"] = plain
    return libs


def _maps(*paths):
    return "".join(f"7f00000{i}000-7f00000{i}fff r-xp 00000000 08:01 {100 + i} {p}\n" for i, p in enumerate(paths))


def test_creator_from_the_same_file_or_an_identical_copy_is_accepted(record_libs):
    maps = _maps("/usr/lib/libc.so.6", record_libs["plain"], record_libs["first"])
    check_creator_source(record_libs["first"], maps_text=maps)
    check_creator_source(record_libs["copy"], maps_text=maps)  # same bytes elsewhere (package copy, cache)
    check_creator_source(record_libs["first"], loaded_here=[record_libs["copy"]], maps_text="")


def test_creator_from_another_library_is_refused_naming_both(record_libs):
    maps = _maps(record_libs["plain"], record_libs["first"])
    with pytest.raises(PluginError, match=r"already registered in this process, by \S*libfirst\.so;.*libother\.so"):
        check_creator_source(record_libs["other"], maps_text=maps)
    with pytest.raises(PluginError, match="not found among this process's mapped files"):
        check_creator_source(record_libs["other"], maps_text=_maps(record_libs["plain"]))


def test_tensorrt_rtx_load_plugin_refuses_a_creator_registered_by_another_library(rtx_plugin, tmp_path):
    """In one process: load our plugin, then ask for a different build of it (here: the same library with one byte
    appended, which changes its sha256 and nothing else). TensorRT's registry keeps the first creator, so the second
    request must be refused naming the first; a byte-identical copy is accepted."""
    first = rtx_plugin["plugin"]
    other = tmp_path / "other" / first.name
    other.parent.mkdir()
    other.write_bytes(first.read_bytes() + b"\0")
    same = tmp_path / "same" / first.name
    same.parent.mkdir()
    shutil.copy(first, same)
    script = textwrap.dedent(
        f"""
        from trt_engine import tensorrt_api
        from wtconv_core.errors import PluginError
        tensorrt_api.use_backend("tensorrt-rtx")
        tensorrt_api.load_plugin({str(first)!r})
        tensorrt_api.load_plugin({str(same)!r})
        try:
            tensorrt_api.load_plugin({str(other)!r})
        except PluginError as error:
            print("REFUSED", error)
        else:
            print("ACCEPTED")
        """
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "REFUSED" in result.stdout, result.stdout
    assert str(first) in result.stdout and str(other) in result.stdout
