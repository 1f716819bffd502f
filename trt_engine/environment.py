"""What this machine has for wtconv-trt: libraries found (in lookup order), TensorRT / TensorRT-RTX, ONNX Runtime and
its execution providers, CUDA, GPU, and what the user can and cannot do with them. Read by ``wtconv-trt doctor``;
nothing here loads TensorRT, a plugin or the ONNX Runtime custom-op library (its record is read from the file).
"""

from __future__ import annotations

import ctypes.util
import importlib.metadata
import importlib.util
import os
import re
import shutil
import subprocess
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from trt_engine import backends
from wtconv_libs import lookup
from wtconv_libs.build import build_libs_command, cuda_gpu_count

if TYPE_CHECKING:
    from trt_engine.manifest import EngineManifest

# GPUs TensorRT-RTX 1.7 runs engines on (its trt.ComputeCapability targets; docs/engines.md).
RTX_RUNTIME_CAPABILITIES = {(7, 5), (8, 0), (8, 6), (8, 9), (12, 0), (12, 1)}


@dataclass
class Finding:
    """One line of the survey: ``ok`` True (present), False (absent) or None (neutral information)."""

    what: str
    detail: str
    ok: bool | None = None


@dataclass
class BackendFinding:
    """One installed TensorRT backend: the plugin library found for its ABI, and whether its engines run here
    (``cannot_run``: why not, None when they do)."""

    abi: str | None
    plugin: object  # Path | None
    cannot_run: str | None


@dataclass
class Survey:
    libraries: dict = field(default_factory=dict)  # kind -> list of (Candidate, note)
    software: list = field(default_factory=list)  # [Finding]
    can: list = field(default_factory=list)  # [Finding]: what the user can / cannot do
    rtx_environment: str | None = None  # the loader line for another process (polygraphy)
    backends: dict = field(default_factory=dict)  # installed backend -> BackendFinding, in backends' order
    gpu: str | None = None  # the CUDA GPU PyTorch sees, None when there is none
    onnxruntime: str | None = None  # the version of the onnxruntime Python package, None when absent
    ort_providers: list = field(default_factory=list)  # its execution providers
    ort_library: object = None  # Path of libwtconv_ort.so found in lookup order, or None
    ort_cuda_problem: str | None = None  # why ONNX Runtime cannot run exports on the GPU here (None: it can)


def _distribution_versions(prefix: str) -> dict:
    out = {}
    for dist in importlib.metadata.distributions():
        name = (dist.metadata.get("Name") or "").lower().replace("_", "-")
        if name == prefix or name.startswith(prefix + "-"):
            out[name] = dist.version
    return out


def _gpu_code_note(path, info=None) -> str:
    """The GPU code a library runs (``info``: its wtconv_libs.plugin_elf.LibraryInfo, read when not given), and where
    it is when the library loads the kernels linked once (libwtconv_kernels.so of the binary wheel); empty for a
    library without GPU code."""
    from wtconv_core.errors import PluginError
    from wtconv_libs.plugin_elf import KERNELS_LIBRARY, inspect_library

    if info is None:
        try:
            info = inspect_library(path)
        except PluginError:
            return ""
    if info.cuda_code is None:
        if KERNELS_LIBRARY in info.needed:
            return f"; needs {KERNELS_LIBRARY}, not found through its RUNPATH {':'.join(info.runpath) or '(none)'}"
        return ""
    where = f" in {KERNELS_LIBRARY} beside it" if info.kernels_library else ""
    return f"; GPU code{where}: {info.cuda_code.describe()}"


def _kernels_note(path) -> str:
    return "found" + _gpu_code_note(path)


def _ort_library_note(path) -> str:
    """What a libwtconv_ort.so found is: its ops and versions (its record, wtconv_libs.lookup.ort_library_info)."""
    info = lookup.ort_library_info(path)
    if not info:
        return "unusable: no wtconv_ort_info record (not built from plugin/onnxruntime)"
    ops = "CPU and CUDA ops" if info.get("cuda") == "yes" else "CPU op only"
    return (
        f"{ops}, version {info.get('package_version', '?')}, ONNX Runtime C API {info.get('ort_api', '?')}+"
        + _gpu_code_note(path)
    )


def _onnxruntime() -> tuple[str | None, list]:
    """(version, execution providers) of the onnxruntime package, or (None, [])."""
    try:
        import onnxruntime
    except ImportError:
        return None, []
    return onnxruntime.__version__, list(onnxruntime.get_available_providers())


def ort_cuda_problem(providers: list, library) -> str | None:
    """Why ONNX Runtime cannot run plugin exports on a GPU here (None: it can): no CUDA execution provider (the
    CPU-only onnxruntime), or no libwtconv_ort.so with its CUDA op."""
    if "CUDAExecutionProvider" not in providers:
        return "this onnxruntime has no CUDAExecutionProvider (install onnxruntime-gpu in its place)"
    if library is None:
        return "no libwtconv_ort.so for the WTConv2d nodes (wtconv-trt build-libs, with nvcc present)"
    if lookup.ort_library_info(library).get("cuda") != "yes":
        return f"{library} has no CUDA op (rebuild it with nvcc present: wtconv-trt build-libs)"
    return None


def _plugin_note(path) -> str:
    from wtconv_core.errors import PluginError
    from wtconv_libs.plugin_elf import inspect_library

    try:
        info = inspect_library(path)
    except PluginError as error:
        return f"unusable: {error}"
    links = f", links libnvinfer.so.{info.nvinfer_major}" if info.nvinfer_major else ""
    if info.finds_nvinfer_at_load:
        links = f", finds libnvinfer.so.{str(info.abi)[3:]} when loaded"
    return f"{info.kind}, {info.describe_abi()}{links}" + _gpu_code_note(path, info)


def _gpu() -> tuple[str | None, tuple | None]:
    """(name, compute capability) of GPU 0 as PyTorch sees it, or (None, None)."""
    try:
        import torch
    except ImportError:
        return None, None
    if not torch.cuda.is_available():
        return None, None
    return torch.cuda.get_device_name(0), tuple(torch.cuda.get_device_capability(0))


def engine_gpu_problem(manifest: EngineManifest) -> str | None:
    """Why no GPU here can run the engine of ``manifest`` (None: GPU 0 can), for validate --engine and bench to say
    at once instead of a failed deserialization: no CUDA GPU at all, a GPU TensorRT-RTX does not run engines on, or
    one outside the compute capabilities a TensorRT-RTX engine was built for."""
    gpu, capability = _gpu()
    if gpu is None:
        return "this machine has no GPU that can run engines (no CUDA GPU visible to PyTorch)"
    if manifest.backend != backends.TENSORRT_RTX:
        return None
    here = f"{capability[0]}.{capability[1]}"
    if capability not in RTX_RUNTIME_CAPABILITIES:
        return (
            f"this machine has no GPU that can run TensorRT-RTX engines: its {gpu} has compute capability {here}, "
            f"and TensorRT-RTX runs engines on 7.5, 8.0, 8.6, 8.9 and 12.x only"
        )
    targets = manifest.compute_capabilities
    if targets and "current" not in targets and here not in targets:
        return (
            f"the engine was built for compute capability {', '.join(targets)} and this {gpu} has {here}: rebuild it "
            f"here with wtconv-trt build --compute-capability current"
        )
    return None


def _nvcc_version() -> str | None:
    nvcc = shutil.which("nvcc") or ("/usr/local/cuda/bin/nvcc" if os.path.isfile("/usr/local/cuda/bin/nvcc") else None)
    if not nvcc:
        return None
    try:
        text = subprocess.run([nvcc, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    match = re.search(r"release ([\d.]+)", text)
    return f"{match.group(1) if match else '?'} ({nvcc})"


def survey() -> Survey:
    s = Survey()
    for kind in lookup.KINDS:
        rows = []
        for candidate in lookup.candidates(kind):
            note = ""
            if candidate.exists:
                note = (
                    _plugin_note(candidate.path)
                    if kind.startswith("plugin")
                    else _ort_library_note(candidate.path)
                    if kind == "ort"
                    else _kernels_note(candidate.path)
                )
            rows.append((candidate, note))
        s.libraries[kind] = rows

    installed = backends.installed_backends()
    trt_versions = _distribution_versions("tensorrt")
    plain = {k: v for k, v in trt_versions.items() if not k.startswith("tensorrt-rtx")}
    rtx = {k: v for k, v in trt_versions.items() if k.startswith("tensorrt-rtx")}
    s.software.append(
        Finding(
            "TensorRT",
            ", ".join(f"{k} {v}" for k, v in plain.items()) or "not installed",
            backends.TENSORRT in installed,
        )
    )
    s.software.append(
        Finding(
            "TensorRT-RTX",
            ", ".join(f"{k} {v}" for k, v in rtx.items()) or "not installed",
            backends.TENSORRT_RTX in installed,
        )
    )
    if backends.TENSORRT_RTX in installed:
        from trt_engine import rtx_libraries

        try:
            s.rtx_environment = rtx_libraries.shell_environment()
        except Exception as error:  # noqa: BLE001 -- a survey reports, it does not stop
            s.rtx_environment = f"(cannot prepare: {error})"
    s.onnxruntime, s.ort_providers = _onnxruntime()
    ort_dists = _distribution_versions("onnxruntime")
    s.software.append(
        Finding(
            "ONNX Runtime",
            (
                ", ".join(f"{k} {v}" for k, v in sorted(ort_dists.items()))
                + f"; imports as onnxruntime {s.onnxruntime}, providers: {', '.join(s.ort_providers)}"
            )
            if s.onnxruntime
            else "not installed (pip install onnxruntime, or onnxruntime-gpu for its CUDA execution provider)",
            s.onnxruntime is not None,
        )
    )
    from wtconv_libs.build import onnxruntime_headers

    ort_headers = onnxruntime_headers()
    s.software.append(
        Finding(
            "ORT C headers",
            str(ort_headers)
            if ort_headers
            else "not found (set ONNXRUNTIME_INCLUDE_DIR; needed to build libwtconv_ort.so)",
            ort_headers is not None,
        )
    )
    nvcc = _nvcc_version()
    s.software.append(Finding("CUDA compiler", nvcc or "nvcc not found", nvcc is not None))
    cudart = ctypes.util.find_library("cudart")
    s.software.append(
        Finding(
            "CUDA runtime",
            cudart
            or "libcudart not on the library path (the plugin links it statically; TensorRT needs it to run engines)",
            cudart is not None,
        )
    )
    s.software.append(Finding("CMake", shutil.which("cmake") or "not found", shutil.which("cmake") is not None))
    gpu, capability = _gpu()
    s.gpu = gpu
    s.software.append(
        Finding(
            "GPU",
            f"{gpu} (compute capability {capability[0]}.{capability[1]})" if gpu else "no CUDA GPU visible to PyTorch",
            gpu is not None,
        )
    )

    kernels = lookup.find("kernels")
    s.can.append(Finding("export to ONNX and validate in ONNX Runtime", "always (CPU)", True))
    s.ort_library = lookup.find("ort")
    s.can.append(
        Finding(
            "run plugin exports in ONNX Runtime on the CPU (validate, serve, demo)",
            f"WTConv2d nodes on the native op {s.ort_library}"
            if s.ort_library
            else "WTConv2d nodes through the onnxruntime-extensions Python op, several times slower: build "
            f"libwtconv_ort.so ({build_libs_command()})",
            s.ort_library is not None,
        )
    )
    s.ort_cuda_problem = ort_cuda_problem(s.ort_providers, s.ort_library)
    s.can.append(
        Finding(
            "run plugin exports in ONNX Runtime on a GPU (validate --device cuda, serve --runtime onnxruntime)",
            s.ort_cuda_problem or "yes: CUDA execution provider and libwtconv_ort.so's CUDA op",
            s.ort_cuda_problem is None,
        )
    )
    s.can.append(
        Finding(
            "run the fused CUDA kernels from PyTorch",
            "yes" if gpu and kernels else "needs a GPU and the kernel library (wtconv-trt build-libs)",
            bool(gpu and kernels),
        )
    )
    for backend in installed:
        abi = "trt11" if backend == backends.TENSORRT_RTX else None
        if abi is None:
            major = next((int(v.split(".")[0]) for v in plain.values() if v[:1].isdigit()), None)
            abi = f"trt{major}" if major in (10, 11) else None
        from wtconv_libs.lookup import default_plugin

        plugin = default_plugin(abi=abi) if abi else None
        name = backends.display_name(backend)
        where = "no GPU needed" if backend == backends.TENSORRT_RTX else "on this GPU"
        s.can.append(
            Finding(
                f"build engines with {name} ({where})",
                f"with the plugin {plugin}"
                if plugin
                else f"standard-op exports only: no plugin library for ABI {abi} (wtconv-trt build-libs "
                f"--tensorrt-headers <TensorRT {str(abi)[3:]}.x include dir>)",
                plugin is not None,
            )
        )
        if backend == backends.TENSORRT_RTX:
            runs = capability in RTX_RUNTIME_CAPABILITIES
            why = None if runs else "needs a GPU of compute capability 7.5, 8.0, 8.6, 8.9 or 12.x"
            s.can.append(Finding("run TensorRT-RTX engines", why or "yes", runs))
        else:
            why = None if gpu else "needs a GPU"
            s.can.append(
                Finding(
                    "run TensorRT engines (validate --engine, bench) and serve them with Triton", why or "yes", not why
                )
            )
        s.backends[backend] = BackendFinding(abi, plugin, why)
    if not installed:
        s.can.append(
            Finding(
                "build or run engines",
                "install TensorRT (pip install tensorrt, with a GPU) or "
                "TensorRT-RTX (pip install tensorrt-rtx-cu13, builds without a GPU)",
                False,
            )
        )
    cmake = shutil.which("cmake") is not None
    compiler = any(shutil.which(c) for c in ("c++", "g++", "clang++"))
    buildable = []
    if cmake and nvcc is not None:
        buildable.append("the kernel library, and the TensorRT plugin with --tensorrt-headers")
    if cmake and compiler and ort_headers is not None:
        buildable.append("libwtconv_ort.so" + (" with its CUDA op" if nvcc else " (CPU op; its CUDA op needs nvcc)"))
    needs = _libraries_needed(kernels, s.ort_library, lookup.default_plugin())
    s.can.append(
        Finding(
            "build the libraries (wtconv-trt build-libs)",
            "; ".join(buildable) + f"; {needs}"
            if buildable
            else "needs CMake with the CUDA toolkit (nvcc) for the kernels and plugin, or with a C++ compiler and ONNX "
            "Runtime's C API headers for libwtconv_ort.so",
            bool(buildable),
        )
    )
    return s


def _libraries_needed(kernels, ort_library, plugin) -> str:
    """Which build-libs command this machine still needs, for the libraries not found: the CUDA code compiles
    without a GPU (for minutes) but cannot run here, so without one the command is the ONNX Runtime op's alone."""
    if cuda_gpu_count():
        if kernels is None or ort_library is None:
            return f"this machine needs '{build_libs_command()}' (with --tensorrt-headers DIR for the TensorRT plugin)"
        if plugin is None:
            return "the kernels and libwtconv_ort.so are built; the TensorRT plugin needs --tensorrt-headers DIR"
        return "every library is built"
    if ort_library is None:
        plugin_part = ", and '--tensorrt-headers DIR' instead only for the TensorRT plugin" if plugin is None else ""
        return (
            f"this machine needs '{build_libs_command()}' for libwtconv_ort.so (no CUDA GPU: its CPU op alone, in "
            f"seconds){plugin_part}"
        )
    if plugin is None:
        return "libwtconv_ort.so is built; 'wtconv-trt build-libs --tensorrt-headers DIR' builds the TensorRT plugin"
    return "libwtconv_ort.so and the TensorRT plugin are built (the kernels need a CUDA GPU to run)"


__all__ = ["BackendFinding", "Finding", "Survey", "engine_gpu_problem", "ort_cuda_problem", "survey"]
