"""Opening an engine file: the checks made before TensorRT is asked (the file, its manifest, the sha256 of its bytes,
each once), then loading it (docs/engines.md, "2. Build")."""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trt_engine import manifest as mf
from trt_engine.profiles import find_profile
from wtconv_core.errors import ConfigurationError, EngineError, InputError, PluginError

logger = logging.getLogger(__name__)

__all__ = ["OpenedEngine", "check_engine_path", "load_engine_for_run", "open_engine"]


@dataclass(frozen=True)
class OpenedEngine:
    """An engine file whose manifest has been read and whose bytes match it (open_engine)."""

    path: Path
    manifest: mf.EngineManifest

    @property
    def input(self) -> mf.TensorIO:
        """The engine's one input; EngineError when it has several (validate, bench and serving take one)."""
        inputs = self.manifest.inputs
        if len(inputs) != 1:
            raise EngineError(f"the engine has {len(inputs)} inputs; wtconv-trt handles single-input models")
        return inputs[0]

    def place(self, shape) -> tuple[int, tuple[int, ...]]:
        """(profile index, shape) for an input ``shape`` (default: the first profile's opt shape); InputError when no
        profile takes it."""
        name = self.input.name
        shape = tuple(int(d) for d in shape) if shape is not None else tuple(self.manifest.profiles[0].inputs[name].opt)
        return find_profile(self.manifest.profiles, {name: shape}), shape


def open_engine(engine: str | os.PathLike) -> OpenedEngine:
    """The engine file checked once before anything uses it, each fact in the order a user fixes them: the file
    itself (check_engine_path), its manifest present and well-formed, its bytes matching the manifest's size and
    sha256. Raises with cause and fix (InputError, EngineError)."""
    path = check_engine_path(engine)
    manifest = mf.read_manifest(path)
    mf.check_engine_file(path, manifest)
    return OpenedEngine(path, manifest)


def check_engine_path(engine: str | os.PathLike) -> Path:
    """The engine must be a non-empty file before its manifest is read, so that a wrong path is named as such and not
    as a missing manifest; InputError saying how to make one."""
    path = Path(engine)
    problem = None
    if not path.exists():
        problem = "does not exist"
    elif path.is_dir():
        problem = "is a directory; give the engine file itself"
    elif not path.is_file() or path.stat().st_size == 0:
        problem = "is not a regular file" if not path.is_file() else "is empty (0 bytes)"
    if problem:
        made_by = "build one with 'wtconv-trt build MODEL.onnx'"
        raise InputError(f"engine {os.fspath(engine)} {problem}; {made_by}", parameter="engine")
    return path


def load_engine_for_run(engine: OpenedEngine, plugin: str | os.PathLike | None = None) -> Any:
    """TensorRT side of loading an opened engine: version check (before deserialization), plugin library, GPU,
    deserialize. ``plugin``: the plugin library to load (default: the manifest's, else the one found for this
    TensorRT). Returns tensorrt_api's loaded engine."""
    from trt_engine import tensorrt_api

    manifest = engine.manifest
    tensorrt_api.prefer_backend(manifest.backend)
    trt = tensorrt_api.import_tensorrt()
    mf.check_tensorrt_version(manifest, trt.__version__, tensorrt_api.backend_of(trt))
    library = plugin or (manifest.plugin.library if manifest.plugin else None)
    if manifest.plugin and not plugin and not (library and Path(library).is_file()):
        from wtconv_libs.lookup import default_plugin

        library = default_plugin() or library
    if manifest.plugin:
        if not library or not Path(library).is_file():
            raise PluginError(
                f"the engine uses the {manifest.plugin.name} plugin and its library {library!r} is not there; "
                f"pass plugin=PATH/TO/libwtconv_trt_plugin_dynamic.so built for TensorRT {manifest.tensorrt_major}"
            )
        logger.debug("loading plugin library %s", library)
        tensorrt_api.load_plugin(library)
    elif plugin:
        tensorrt_api.load_plugin(plugin)
    # The GPU last, once the engine's TensorRT and plugin are known to fit: without one that can run it,
    # deserialization fails with a list of possible causes; this says the one that holds (as doctor does).
    from trt_engine.environment import engine_gpu_problem

    problem = engine_gpu_problem(manifest)
    if problem:
        raise ConfigurationError(
            f"{problem}: run the engine on a machine whose GPU can ('wtconv-trt doctor' says what runs here); "
            f"here, validate the ONNX model instead: wtconv-trt validate MODEL.onnx"
        )
    return tensorrt_api.deserialize_engine(engine.path.read_bytes(), f"engine {engine.path}")
