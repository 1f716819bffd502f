"""The compiled libraries and this machine: ``build_libraries`` (``wtconv-trt build-libs``) and ``doctor``
(``wtconv-trt doctor``); docs/engines.md, "Libraries"."""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path

from wtconv_export.inputs import check_int

__all__ = ["DoctorReport", "LibrariesBuilt", "MAX_JOBS", "build_libraries", "doctor"]

log = logging.getLogger(__name__)

MAX_JOBS = 1024  # parallel compile jobs
NO_HEADERS = (
    "the TensorRT plugin is built only with TensorRT's C++ headers, 11.x for TensorRT 11 and TensorRT-RTX (whose "
    "wheels ship none: take the include/ folder of github.com/NVIDIA/TensorRT at its v11 release tag), 10.x for "
    "TensorRT 10: wtconv-trt build-libs --tensorrt-headers DIR"
)


@dataclass
class LibrariesBuilt:
    """What build_libraries installed: {kind: path} for "kernels", "plugin", "plugin-static"."""

    installed: dict

    @property
    def note(self) -> str | None:
        """Why no plugin was built, when none was."""
        return None if "plugin" in self.installed else f"no TensorRT plugin built: {NO_HEADERS}"


def build_libraries(
    tensorrt_headers: str | os.PathLike | None = None,
    *,
    cuda_arch: str | None = None,
    into_package: bool = False,
    source: str | os.PathLike | None = None,
    build_dir: str | os.PathLike | None = None,
    jobs: int | None = None,
) -> LibrariesBuilt:
    """Build the CUDA kernel library and, with TensorRT headers, the two plugin libraries with CMake, and install
    them where wtconv-trt looks for them (doctor shows the order).

    tensorrt_headers: a TensorRT install or its include/ folder (10.x for TensorRT 10, 11.x for TensorRT 11 and
    TensorRT-RTX); without it only the kernel library is built. cuda_arch: CMAKE_CUDA_ARCHITECTURES ("90",
    "80;86;89;90", "native"; default plugin/'s list). into_package: install into the package's lib/ folder instead
    of the per-user cache. source: the plugin/ folder of a checkout. build_dir: CMake's build folder (default in
    the per-user cache). jobs: 1 to 1024 (default: CPU count). The headers, the build folder and the values are
    checked before the (long) build starts."""
    from wtconv_export import libraries
    from wtconv_export.library_build import build_libraries as build
    from wtconv_export.library_build import headers_abi, tensorrt_root
    from wtconv_export.paths import check_output_dir

    if jobs is not None:
        check_int(jobs, "--jobs", 1, MAX_JOBS)
    if tensorrt_headers:
        headers_abi(tensorrt_root(tensorrt_headers))
    if build_dir:
        check_output_dir(build_dir, option="--build-dir", force=True)
    root = libraries.package_lib_dir() if into_package else None
    if not tensorrt_headers:  # said before the minutes of compiling, not only after them
        log.warning(
            "no --tensorrt-headers: building the kernel library (and libwtconv_ort.so where ONNX Runtime's headers "
            "are found) only; %s",
            NO_HEADERS,
        )
    log.info("building with CMake (a few minutes for several GPU architectures) ...")
    installed = build(
        tensorrt_headers=tensorrt_headers,
        source=source,
        build_dir=build_dir,
        install_root=root,
        cuda_architectures=cuda_arch,
        jobs=jobs,
    )
    return LibrariesBuilt(dict(installed))


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
        from trt_engine.build import inspect_onnx
        from wtconv_export.errors import ConfigurationError

        try:
            backend = choose_backend(backend)
        except ConfigurationError as error:
            return str(error)
        found = self.survey.backends.get(backend)
        nodes = inspect_onnx(getattr(onnx, "path", onnx)).wtconv_nodes
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

        manifest = mf.read_manifest(getattr(engine, "engine_path", engine))
        backend = mf.backend_of(manifest)
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
    from wtconv_export import libraries

    return DoctorReport(survey(), libraries.ENV_CACHE, libraries.user_cache_dir(), dict(libraries.FILE_NAMES))
