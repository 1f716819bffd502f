"""The compiled libraries and this machine: ``build_libraries`` (``wtconv-trt build-libs``), ``doctor``
(``wtconv-trt doctor``) and ``ort_library`` (``wtconv-trt doctor --ort-library``); docs/engines.md, "Libraries";
docs/onnx_runtime.md."""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path

from wtconv_core.errors import InputError
from wtconv_core.inputs import check_int

__all__ = ["DoctorReport", "LibrariesBuilt", "MAX_JOBS", "build_libraries", "doctor", "ort_library"]

log = logging.getLogger(__name__)

MAX_JOBS = 1024  # parallel compile jobs
NO_HEADERS = (
    "the TensorRT plugin is built only with TensorRT's C++ headers, 11.x for TensorRT 11 and TensorRT-RTX (whose "
    "wheels ship none: take the include/ folder of github.com/NVIDIA/TensorRT at its v11 release tag), 10.x for "
    "TensorRT 10: wtconv-trt build-libs --tensorrt-headers DIR"
)


NO_ORT_HEADERS = (
    "ONNX Runtime's C API headers (onnxruntime_c_api.h, 1.17 or newer; the onnxruntime wheels ship none) were not "
    "found: wtconv-trt build-libs --onnxruntime-headers DIR, or set ONNXRUNTIME_INCLUDE_DIR (docs/onnx_runtime.md)"
)


@dataclass
class LibrariesBuilt:
    """What build_libraries installed: {kind: path} for "kernels", "plugin", "plugin-static", "ort"
    (libwtconv_ort.so, the ONNX Runtime custom-op library)."""

    installed: dict
    ort_note: str | None = None  # why no libwtconv_ort.so was built, when none was
    cuda: bool = True  # False: built with --no-cuda (no plugin was asked for)
    # A library the lookup finds before one just installed (the binary wheel's, in the package's lib/), per library.
    shadowed: tuple = ()

    @property
    def note(self) -> str | None:
        """Why no plugin was built, when none was (and could have been)."""
        return None if "plugin" in self.installed or not self.cuda else f"no TensorRT plugin built: {NO_HEADERS}"

    def describe(self, kind: str) -> str:
        """What the installed library of ``kind`` is, in a few words ("" when nothing is to be said): for the ONNX
        Runtime library, its ops (its record, wtconv_libs.lookup.ort_library_info)."""
        if kind != "ort" or kind not in self.installed:
            return ""
        from wtconv_libs.lookup import ort_library_info

        info = ort_library_info(self.installed[kind])
        ops = "CPU and CUDA ops" if info.get("cuda") == "yes" else "CPU op only, built without nvcc"
        return f"{ops}; ONNX Runtime C API {info.get('ort_api', '?')}+"


def build_libraries(
    tensorrt_headers: str | os.PathLike | None = None,
    *,
    cuda_arch: str | None = None,
    into_package: bool = False,
    source: str | os.PathLike | None = None,
    build_dir: str | os.PathLike | None = None,
    jobs: int | None = None,
    onnxruntime_headers: str | os.PathLike | None = None,
    cuda: bool = True,
) -> LibrariesBuilt:
    """Build with CMake what this machine can, and install it where wtconv-trt looks for it (doctor shows the
    order): the CUDA kernel library (where nvcc is found), with TensorRT headers the two plugin lookup, and with
    ONNX Runtime's C API headers the ONNX Runtime custom-op library libwtconv_ort.so (its CPU op needs only a C++
    compiler; its CUDA op is built where nvcc is found).

    tensorrt_headers: a TensorRT install or its include/ folder (10.x for TensorRT 10, 11.x for TensorRT 11 and
    TensorRT-RTX); without it no plugin is built. onnxruntime_headers: the folder holding onnxruntime_c_api.h (default:
    ONNXRUNTIME_INCLUDE_DIR, else a header set beside the checkout). cuda: False builds without nvcc even where it
    is found (libwtconv_ort.so with its CPU op alone, no kernel library; not with tensorrt_headers). cuda_arch:
    CMAKE_CUDA_ARCHITECTURES ("90", "80;86;89;90", "native"; default plugin/'s list). into_package: install into the
    package's lib/ folder instead of the per-user cache. source: the plugin/ folder of a checkout. build_dir:
    CMake's build folder (default in the per-user cache). jobs: 1 to 1024 (default: CPU count). The headers, the
    build folder and the values are checked before the (long) build starts."""
    from wtconv_core.paths import check_not_an_input, check_output_dir
    from wtconv_libs import lookup
    from wtconv_libs.build import build_libraries as build
    from wtconv_libs.build import cuda_gpu_count, default_source_dir, headers_abi, nvcc_path, tensorrt_root
    from wtconv_libs.build import onnxruntime_headers as find_ort_headers

    if jobs is not None:
        check_int(jobs, "jobs", 1, MAX_JOBS)
    sources = [("sources", source or default_source_dir()), ("TensorRT headers", tensorrt_headers)]
    check_not_an_input(sources + [("ONNX Runtime headers", onnxruntime_headers)], folders=[("build_dir", build_dir)])
    if not cuda and tensorrt_headers:
        raise InputError(
            "cuda=False: the TensorRT plugin libraries are CUDA code and need nvcc; leave out tensorrt_headers=DIR "
            "(to build libwtconv_ort.so's CPU op alone) or cuda=False",
            parameter="cuda",
        )
    if tensorrt_headers:
        headers_abi(tensorrt_root(tensorrt_headers))
    if onnxruntime_headers is not None:
        find_ort_headers(onnxruntime_headers)  # InputError when onnxruntime_c_api.h is not there
    if build_dir:
        check_output_dir(build_dir, option="build_dir", force=True)
    root = lookup.package_lib_dir() if into_package else None
    ort_note = None
    if onnxruntime_headers is None and find_ort_headers(None, source) is None:  # given ones were checked above
        ort_note = f"no libwtconv_ort.so built: {NO_ORT_HEADERS}"
    # What will not be built is said before the minutes of compiling, not only after them.
    if cuda and not tensorrt_headers and nvcc_path() is not None and not cuda_gpu_count():
        log.warning(
            "no CUDA GPU here: the CUDA kernels and ops compile (minutes) but cannot run on this machine; "
            "'wtconv-trt build-libs --no-cuda' builds libwtconv_ort.so's CPU op alone, in seconds"
        )
    if not cuda:
        log.info("without CUDA: building libwtconv_ort.so with its CPU op alone")
    elif not tensorrt_headers:
        log.warning(
            "no TensorRT headers given: building the kernel library%s only; %s%s",
            "" if ort_note else " and libwtconv_ort.so",
            NO_HEADERS,
            f"; {ort_note}" if ort_note else "",
        )
    elif ort_note:
        log.warning("%s", ort_note)
    log.info("building with CMake%s ...", " (a few minutes for several GPU architectures)" if cuda else "")
    installed = build(
        tensorrt_headers=tensorrt_headers,
        source=source,
        build_dir=build_dir,
        install_root=root,
        cuda_architectures=cuda_arch,
        jobs=jobs,
        onnxruntime_include=onnxruntime_headers,
        with_cuda=cuda,
    )
    return LibrariesBuilt(dict(installed), ort_note if "ort" not in installed else None, cuda, _shadowed(installed))


def _shadowed(installed: dict) -> tuple:
    """For each library just installed that the lookup would not take (another comes first in its order: the binary
    wheel's, in the package's lib/, before the per-user cache), a line naming the one taken and how to use the new
    one instead (docs/engines.md, "Compiled libraries: one lookup order")."""
    from wtconv_libs import lookup
    from wtconv_libs.plugin_elf import read_abi_record

    lines = []
    for kind, path in installed.items():
        if kind.startswith("plugin"):
            abi = (read_abi_record(path) or {}).get("abi")
            first = lookup.default_plugin(static=kind == "plugin-static", abi=abi)
        else:
            first = lookup.find(kind)
        if first is not None and Path(first).resolve() != Path(path).resolve():
            lines.append(
                f"{Path(path).name}: the lookup takes {first} first, not this build; use this one with "
                f"{lookup.ENV_VARS[kind]}={path}, or build with --into-package to replace that one"
            )
    return tuple(lines)


@dataclass
class DoctorReport:
    """What this machine has for wtconv-trt (trt_engine.environment.Survey: the libraries found in lookup order,
    TensorRT / TensorRT-RTX / CUDA / GPU, what works here), and where the per-user cache is."""

    survey: object
    cache_variable: str  # the environment variable that moves the per-user cache
    cache_dir: Path
    file_names: dict  # kind -> library file name

    def cannot_build(self, onnx, backend: str = "auto") -> str | None:
        """Why an engine of the ONNX model ``onnx`` (a path, or export_onnx's result) cannot be built here with
        ``backend`` ("auto": the one build_engine would take), or None when it can: no TensorRT, or WTConv2d nodes
        and no plugin library built for that TensorRT's ABI."""
        from trt_engine.backends import choose_backend
        from wtconv_core.errors import ConfigurationError
        from wtconv_export.exported import ExportedModel

        try:
            backend = choose_backend(backend)
        except ConfigurationError as error:
            return str(error)
        found = self.survey.backends.get(backend)
        nodes = ExportedModel.read(getattr(onnx, "path", onnx)).wtconv_nodes
        if nodes and (found is None or found.plugin is None):
            abi = found.abi if found else None
            return (
                f"the model has {nodes} WTConv2d nodes and no plugin library is built for {backend} (ABI {abi}): "
                f"wtconv-trt build-libs --tensorrt-headers <TensorRT {str(abi)[3:]}.x include dir>"
            )
        return None

    def cannot_run(self, engine) -> str | None:
        """Why the engine ``engine`` (a path, or build_engine's result) cannot run here (validate_engine,
        benchmark_engine), or None when it can: its TensorRT backend is missing, or no GPU it runs on."""
        from trt_engine import manifest as mf

        backend = mf.read_manifest(getattr(engine, "engine_path", engine)).backend
        found = self.survey.backends.get(backend)
        if found is None:
            return f"{backend} is not installed here (the engine was built with it)"
        if found.cannot_run:
            return f"{backend} engines {found.cannot_run}; this machine has {self.survey.gpu or 'no CUDA GPU'}"
        return None

    def rtx_environment_words(self) -> str | None:
        """The environment another process (polygraphy) needs to load plugins into TensorRT-RTX, as NAME=VALUE
        words for ``env`` (the current LD_LIBRARY_PATH expanded); None when TensorRT-RTX needs none here."""
        line = self.survey.rtx_environment
        if not line:
            return None
        current = os.environ.get("LD_LIBRARY_PATH")
        return line.replace("${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}", f":{current}" if current else "")


def doctor() -> DoctorReport:
    """Survey this machine: the compiled libraries looked for (in lookup order) and found, TensorRT, TensorRT-RTX,
    CUDA and the GPU, and what can and cannot be done with them. Loads neither TensorRT nor a plugin."""
    from trt_engine.environment import survey
    from wtconv_libs import lookup

    return DoctorReport(survey(), lookup.ENV_CACHE, lookup.user_cache_dir(), dict(lookup.FILE_NAMES))


def ort_library() -> Path:
    """The path of libwtconv_ort.so, the ONNX Runtime custom-op library for the WTConv2d nodes, in the lookup order
    ``wtconv-trt doctor`` shows (``wtconv-trt doctor --ort-library`` prints it), for any ONNX Runtime session::

        options = onnxruntime.SessionOptions()
        options.register_custom_ops_library(str(wtconv_trt.ort_library()))

    ConfigurationError in one line when none is built, or when the environment variable WTCONV_ORT_LIB names a
    file that does not exist (a path the user named is never passed over for another)."""
    from wtconv_core.errors import ConfigurationError
    from wtconv_libs import lookup
    from wtconv_libs.build import build_libs_command

    variable = lookup.ENV_VARS["ort"]
    named = os.environ.get(variable)
    if named and not Path(named).expanduser().is_file():
        raise ConfigurationError(
            f"{variable}={named}: no such file; point it at libwtconv_ort.so or unset it to use the one "
            f"'{build_libs_command()}' installs"
        )
    found = lookup.ort_library()
    if found is None:
        raise ConfigurationError(
            f"libwtconv_ort.so is not built: '{build_libs_command()}' builds and installs it (CMake, a C++ compiler "
            f"and ONNX Runtime's C API headers; docs/onnx_runtime.md), or set {variable} to its path"
        )
    return found
