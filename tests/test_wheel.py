"""The binary wheel (README, "Install the binary wheel"; docs/design.md, "The binary wheel"), reduced to one CUDA
architecture with both TensorRT ABIs and the ONNX Runtime op (tests/wheel_build.py), installed into a fresh virtual
environment and used on a machine without compilers: nvcc, g++, cc and cmake are not on PATH, and the per-user cache
is empty.

- What the wheel holds, read from its files: every library, each plugin's ABI record, the ONNX Runtime op's record,
  the kernels linked once (the others load libwtconv_kernels.so through their RUNPATH and hold no GPU code), nothing
  needed at load beyond glibc, and the manylinux tag in its name confirmed by ``auditwheel show``.
- What the installed package does with them: ``doctor`` lists each bundled library with its ABI and ops; ``validate``
  runs a plugin export on the bundled libwtconv_ort.so; TensorRT-RTX builds an engine with the bundled plugin;
  ``serve --runtime onnxruntime`` serves through the bundled op (a real tritonserver, a load test); ``triton-repo``
  points Triton's onnxruntime backend at the bundled op and its TensorRT backend at the bundled static plugin; that
  plugin, loaded where TensorRT is not, finds libnvinfer.so.<major> by itself.

The environment's dependencies (torch, onnxruntime, TensorRT-RTX, tritonserver) are those of the test run's own
environment, reached through a folder of links (a .pth file), so nothing is downloaded; our own packages come from
the wheel alone (the test checks where they are imported from).
"""

import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest
import wheel_build
from kernels_tree import ARCHS

pytestmark = pytest.mark.slow

LIBS = "wtconv_libs/lib"
EXPECTED_LIBRARIES = {
    f"{LIBS}/libwtconv_kernels.so",
    f"{LIBS}/libwtconv_kernels_capi.so",
    f"{LIBS}/libwtconv_ort.so",
    *(
        f"{LIBS}/{abi}/{name}"
        for abi in ("trt10", "trt11")
        for name in ("libwtconv_trt_plugin_dynamic.so", "libwtconv_trt_plugin.so")
    ),
}
# What the libraries may need at load (auditwheel's manylinux policies list them): glibc's libraries and the loader,
# the C++ runtime, and the kernels linked once. The CUDA runtime is linked in and opens the driver's libcuda itself.
SYSTEM = {"libc.so.6", "libm.so.6", "libdl.so.2", "libpthread.so.0", "librt.so.1", "ld-linux-x86-64.so.2"}
SYSTEM |= {"libstdc++.so.6", "libgcc_s.so.1"}
SHELL = ("bash", "sh")
COMPILERS = ("nvcc", "gcc", "g++", "cc", "c++", "cmake", "clang", "clang++")


def test_a_plain_build_is_pure_python_and_needs_no_compiler(tmp_path):
    """`pip install .` from a checkout (WTCONV_WHEEL unset) runs no CMake: built here with nothing but Python on PATH,
    the wheel is py3-none-any, holds every package with its data files and no compiled file."""
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+

    env = {k: v for k, v in os.environ.items() if not k.startswith("WTCONV_WHEEL")}
    env.update(PATH=str(tmp_path / "empty"), PIP_NO_CACHE_DIR="1", PIP_DISABLE_PIP_VERSION_CHECK="1")
    command = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-w", str(tmp_path)]
    done = subprocess.run([*command, str(wheel_build.ROOT)], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    version = (wheel_build.ROOT / "VERSION").read_text().strip()
    [wheel] = tmp_path.glob("*.whl")
    assert wheel.name == f"wtconv_trt-{version}-py3-none-any.whl"
    names = zipfile.ZipFile(wheel).namelist()
    assert not [n for n in names if n.endswith((".so", ".a", ".o", ".cubin", ".fatbin"))], names
    packages = tomllib.loads((wheel_build.ROOT / "pyproject.toml").read_text())["tool"]["scikit-build"]["wheel"]
    assert {f"{p}/__init__.py" for p in packages["packages"]} <= set(names)
    assert "wtconv_torch/data/default_model.safetensors" in names
    assert not [n for n in names if n.split("/")[0] in ("tests", "benchmarks", "plugin", "tools", "samples")]


@pytest.fixture(scope="module")
def built():
    reason = wheel_build.skip_reason()
    if reason:
        pytest.skip(reason)
    return wheel_build.reduced_wheel()


@pytest.fixture(scope="module")
def unpacked(built, tmp_path_factory):
    folder = tmp_path_factory.mktemp("wheel_files")
    with zipfile.ZipFile(built.wheel) as wheel:
        wheel.extractall(folder)
    return folder


def test_the_wheel_holds_every_library_linked_once(built, unpacked):
    from elftools.elf.elffile import ELFFile

    from wtconv_libs.lookup import ort_library_info
    from wtconv_libs.plugin_elf import fatbin_entries, inspect_library

    names = {n for n in zipfile.ZipFile(built.wheel).namelist() if n.endswith(".so")}
    assert names == EXPECTED_LIBRARIES
    kernels = inspect_library(unpacked / LIBS / "libwtconv_kernels.so")
    capability = int(ARCHS)
    assert kernels.cuda_code.cubins == {capability} and kernels.cuda_code.ptx == {capability}
    # One cubin and one PTX entry per translation unit of plugin/kernels/, as benchmarks/wheel_size.py counts them.
    with open(unpacked / LIBS / "libwtconv_kernels.so", "rb") as f:
        entries = fatbin_entries(ELFFile(f).get_section_by_name(".nv_fatbin").data())
    units = len(list((wheel_build.ROOT / "plugin" / "kernels").glob("*.cu")))
    assert sorted((e.kind, e.arch) for e in entries) == sorted([("cubin", capability), ("ptx", capability)] * units)
    # Its exports: the functions of wtconvKernel.h, under the package's symbol version (whose own definition is
    # listed too).
    exported = subprocess.run(
        ["readelf", "--dyn-syms", "-W", str(unpacked / LIBS / "libwtconv_kernels.so")], capture_output=True, text=True
    ).stdout
    defined = {line.split()[-1] for line in exported.splitlines() if " GLOBAL " in line and " UND " not in line}
    version = {name for name in defined if name.startswith("WTCONV_KERNELS_")}
    functions = {re.sub(r"^_ZN6wtconv\d+(\w+?)E.*", r"\1", name) for name in defined - version}
    assert len(version) == 1 and all(name.endswith("@@" + next(iter(version))) for name in defined - version), defined
    assert functions == {
        "wtconvWorkspaceBytes",
        "checkShape",
        "wtconvForward",
        "wtconvLaunchInfo",
        "setSharedMemoryLimitForTesting",
    }, defined
    for name in EXPECTED_LIBRARIES - {f"{LIBS}/libwtconv_kernels.so"}:
        info = inspect_library(unpacked / name)
        assert "libwtconv_kernels.so" in info.needed, name
        assert info.runpath == (["$ORIGIN/..", "$ORIGIN"] if "/trt1" in name else ["$ORIGIN"]), (name, info.runpath)
        assert info.kernels_library and info.cuda_code == kernels.cuda_code, name  # no GPU code of its own
        assert set(info.needed) - {"libwtconv_kernels.so"} <= SYSTEM, (name, info.needed)
        if "/trt1" in name:
            abi = name.split("/")[2]
            record = info.abi_record
            assert record["abi"] == abi and record["library"] == ("dynamic" if "dynamic" in name else "static")
            if record["library"] == "static":
                assert record["libnvinfer"] == "load" and info.nvinfer_major is None
    assert ort_library_info(unpacked / LIBS / "libwtconv_ort.so")["cuda"] == "yes"
    assert set(inspect_library(unpacked / LIBS / "libwtconv_kernels.so").needed) <= SYSTEM


def test_auditwheel_confirms_the_tag_of_its_name(built):
    """The manylinux tag the wheel's name claims is the one auditwheel finds for its libraries, which need no
    library outside the policy's (TensorRT, ONNX Runtime and the CUDA runtime included)."""
    tag = built.wheel.name.removesuffix(".whl").split("-")[-1]
    assert built.wheel.name.startswith("wtconv_trt-") and "-py3-none-" in built.wheel.name, built.wheel.name
    assert tag.startswith("manylinux_"), tag
    show = [sys.executable, "-m", "auditwheel", "show"]
    shown = subprocess.run([*show, str(built.wheel)], capture_output=True, text=True, timeout=300)
    text = " ".join(shown.stdout.split())
    assert shown.returncode == 0 and f'is consistent with the following platform tag: "{tag}"' in text, text
    report = json.loads(subprocess.check_output([*show, "--json", str(built.wheel)], text=True, timeout=300))
    assert report["overall_tag"] == tag and report["external_libs"] == {} and not report["unsupported_isa"], report


class Machine:
    """A fresh virtual environment with the wheel installed, and the environment of a machine without compilers."""

    def __init__(self, root: Path, wheel: Path):
        self.root = root
        venv = root / "venv"
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
        self.python = venv / "bin" / "python"
        installed = subprocess.run(
            [sys.executable, "-m", "pip", "--python", str(self.python), "install", "--no-deps", "--no-index"]
            + ["--disable-pip-version-check", str(wheel)],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert installed.returncode == 0, installed.stdout + installed.stderr
        site = Path(
            subprocess.check_output(
                [self.python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], text=True
            ).strip()
        )
        self.site = site
        # The dependencies: links to this run's own site-packages, without our packages or their editable hooks.
        deps = root / "dependencies"
        deps.mkdir()
        ours = re.compile(r"(?i)(wtconv|__editable__|_wtconv_trt_editable|\.pth$|^__pycache__$)")
        for entry in Path(sysconfig.get_paths()["purelib"]).iterdir():
            if not ours.search(entry.name):
                (deps / entry.name).symlink_to(entry)
        (site / "test_dependencies.pth").write_text(str(deps) + "\n")
        home = root / "home"
        home.mkdir()
        # PATH: the environment's scripts and a shell (Triton's Python backend starts its stub through bash).
        shell = root / "shell"
        shell.mkdir()
        for name in SHELL:
            (shell / name).symlink_to(shutil.which(name))
        path = f"{venv / 'bin'}{os.pathsep}{shell}"
        self.env = {"PATH": path, "HOME": str(home), "LANG": "C.UTF-8", "TMPDIR": str(root)}
        self.work = root / "work"
        self.work.mkdir()

    def run(self, *argv, timeout=600, extra_env=None):
        env = dict(self.env, **(extra_env or {}))
        return subprocess.run(
            [str(self.python), "-m", *argv], capture_output=True, text=True, env=env, cwd=self.work, timeout=timeout
        )

    def python_code(self, code, timeout=60, extra_env=None):
        env = dict(self.env, **(extra_env or {}))
        return subprocess.run(
            [str(self.python), "-c", code], capture_output=True, text=True, env=env, cwd=self.work, timeout=timeout
        )

    def wtconv(self, *argv, timeout=600):
        done = self.run("wtconv_trt", *argv, timeout=timeout)
        return done, done.stdout + done.stderr


@pytest.fixture(scope="module")
def machine(built, tmp_path_factory):
    return Machine(tmp_path_factory.mktemp("compiler_free"), built.wheel)


def test_the_machine_has_no_compilers_and_imports_the_wheel(machine):
    for tool in COMPILERS:
        assert shutil.which(tool, path=machine.env["PATH"]) is None, tool
    where = machine.python_code("import wtconv_libs, wtconv_trt; print(wtconv_libs.__file__, wtconv_trt.__file__)")
    where = where.stdout.split()
    assert where and all(Path(p).is_relative_to(machine.site) for p in where), where


def test_doctor_lists_every_bundled_library(machine):
    done, out = machine.wtconv("doctor")
    assert done.returncode == 0, out
    lib = machine.site / LIBS
    assert f"[found] package                {lib / 'libwtconv_kernels_capi.so'}" in out, out
    assert f"GPU code in libwtconv_kernels.so beside it: sm_{ARCHS} (+ PTX compute_{ARCHS})" in out, out
    for abi, major in (("trt10", "10"), ("trt11", "11")):
        assert re.search(
            rf"\[found\] package \({abi}\) +{re.escape(str(lib / abi / 'libwtconv_trt_plugin_dynamic.so'))}"
            rf"  \(dynamic, ABI {abi} \(TensorRT {major}\.\d+\.\d+ headers\)",
            out,
        ), out
        assert re.search(
            rf"{re.escape(str(lib / abi / 'libwtconv_trt_plugin.so'))}  \(static-registration, ABI {abi} "
            rf"\(TensorRT {major}\.\d+\.\d+ headers\), finds libnvinfer\.so\.{major} when loaded",
            out,
        ), out
    assert re.search(
        rf"{re.escape(str(lib / 'libwtconv_ort.so'))}  \(CPU and CUDA ops, version [^,]+, ONNX Runtime "
        r"C API \d+\+; GPU code in libwtconv_kernels\.so beside it",
        out,
    ), out


@pytest.fixture(scope="module")
def plugin_exports(shipped_export):
    return {"onnxruntime": shipped_export("plugin", "fp32"), "tensorrt": shipped_export("plugin", "fp16", "tensorrt")}


def test_validate_runs_on_the_bundled_op(machine, plugin_exports):
    done, out = machine.wtconv("validate", str(plugin_exports["onnxruntime"]))
    assert done.returncode == 0, out
    assert "5 WTConv2d nodes on libwtconv_ort.so" in out and "Python op" not in out, out
    where, _ = machine.wtconv("doctor", "--ort-library")
    assert where.stdout.strip() == str(machine.site / LIBS / "libwtconv_ort.so")


def test_tensorrt_rtx_builds_an_engine_with_the_bundled_plugin(machine, plugin_exports):
    pytest.importorskip("tensorrt_rtx_libs", reason="TensorRT-RTX is not installed (the test extra installs it)")
    engine = machine.work / "digits.engine"
    done, out = machine.wtconv(
        "build", str(plugin_exports["tensorrt"]), "--backend", "tensorrt-rtx", "-o", str(engine), "--no-progress"
    )
    assert done.returncode == 0, out
    manifest = json.loads(engine.with_name(engine.name + ".json").read_text())
    assert manifest["plugin"]["library"] == str(machine.site / LIBS / "trt11" / "libwtconv_trt_plugin_dynamic.so")
    assert manifest["plugin"]["abi"] == "trt11"


def test_serve_runs_the_bundled_op_in_triton(machine, plugin_exports, install):
    argv = ["serve", str(plugin_exports["onnxruntime"]), "--repo", str(machine.work / "served"), "--runtime"]
    argv += ["onnxruntime", "--device", "cpu", "--threads", "1", "--http-port", "0", "--grpc-port", "0"]
    argv += ["--metrics-port", "0", "--load-test", "40", "--concurrency", "4", "--processes", "1", "--no-extra-process"]
    done, out = machine.wtconv(*argv)
    assert done.returncode == 0, out
    assert (
        "runtime onnxruntime (--runtime onnxruntime): ONNX Runtime CPU EP, 5 WTConv2d nodes on libwtconv_ort.so" in out
    )
    assert "40 ok, 0 failed, 0 lost, 0 mismatched" in out, out


def test_triton_repositories_carry_the_bundled_libraries(machine, plugin_exports, tmp_path):
    """Each repository copies the library Triton loads from the wheel into the model's folder, with the kernel
    library it loads beside it, and names the copy; the copy loads there (its RUNPATH looks beside it too)."""
    from engine_helpers import fake_engine

    from wtconv_libs.plugin_elf import inspect_library

    lib = machine.site / LIBS
    out = machine.work / "ort_repo"
    done, text = machine.wtconv("triton-repo", "--onnx", str(plugin_exports["onnxruntime"]), "--out", str(out))
    assert done.returncode == 0, text
    [model] = [p.parent for p in out.glob("*/config.pbtxt")]
    assert f'op_library_filename: "{model / "libwtconv_ort.so"}"' in (model / "config.pbtxt").read_text()
    for name in ("libwtconv_ort.so", "libwtconv_kernels.so"):
        assert (model / name).read_bytes() == (lib / name).read_bytes(), name
    assert inspect_library(model / "libwtconv_ort.so").kernels_library == str(model / "libwtconv_kernels.so")
    # Triton's TensorRT backend, for a TensorRT 10 engine (its manifest; TensorRT 10 cannot run here): the wheel's
    # static-registration plugin of that ABI is the one Triton preloads.
    engine, _ = fake_engine(tmp_path)
    out = machine.work / "trt_repo"
    done, text = machine.wtconv("triton-repo", "--engine", str(engine), "--out", str(out))
    assert done.returncode == 0, text
    [model] = [p.parent for p in out.glob("*/config.pbtxt")]
    assert (model / "libwtconv_trt_plugin.so").read_bytes() == (lib / "trt10" / "libwtconv_trt_plugin.so").read_bytes()
    assert (model / "libwtconv_kernels.so").read_bytes() == (lib / "libwtconv_kernels.so").read_bytes()
    assert "libwtconv_trt_plugin.so" in (out / "serve.sh").read_text()
    loaded = machine.python_code(f"import ctypes; ctypes.CDLL({str(model / 'libwtconv_trt_plugin.so')!r}); print('ok')")
    assert loaded.returncode == 0 and loaded.stdout.strip() == "ok", loaded.stderr


def test_the_static_plugin_finds_libnvinfer_when_loaded(machine, tmp_path):
    """Loaded where no TensorRT is: it says so and the process goes on; with a libnvinfer.so.10 on the library path
    (a stand-in whose getPluginRegistry has no registry to give) it calls that library's function."""
    plugin = machine.site / LIBS / "trt10" / "libwtconv_trt_plugin.so"
    load = f"import ctypes; ctypes.CDLL({str(plugin)!r}); print('still running')"
    done = machine.python_code(load)
    assert done.returncode == 0 and "still running" in done.stdout, done.stderr
    assert "not registered: no TensorRT in this process and libnvinfer.so.10 could not be used" in done.stderr
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler to build the stand-in libnvinfer.so.10")
    source = tmp_path / "nvinfer.c"
    source.write_text(
        '#include <stdio.h>\nvoid* getPluginRegistry(void) { puts("stand-in getPluginRegistry"); return 0; }\n'
    )
    subprocess.run([cc, "-shared", "-fPIC", "-o", str(tmp_path / "libnvinfer.so.10"), str(source)], check=True)
    done = machine.python_code(load, extra_env={"LD_LIBRARY_PATH": str(tmp_path)})
    assert done.returncode == 0 and "stand-in getPluginRegistry" in done.stdout, done.stdout + done.stderr
    assert "getPluginRegistry() returned no registry" in done.stderr
