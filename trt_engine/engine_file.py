"""Opening an engine file for a run: the checks made before TensorRT is asked, then loading it.

Shared by validation (validate.py), benchmarking (bench.py) and the Triton repository writer (triton.py):
the manifest beside the engine is read and checked (format, sha256 of the engine bytes), the requested input
shape is placed in an optimisation profile, and only then is TensorRT imported, its version checked against the
manifest's (engines load only in the TensorRT that built them), the plugin library loaded and the engine
deserialized.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trt_engine import manifest as mf
from trt_engine.profiles import Profile, find_profile, parse_dims
from wtconv_core.errors import ConfigurationError, EngineError, PluginError

logger = logging.getLogger(__name__)

__all__ = ["EngineCheck", "check_engine_request", "load_engine_for_run"]


@dataclass
class EngineCheck:
    """What validate and bench need before running: manifest (its JSON form and the typed ``info``), profiles,
    chosen shape and profile."""

    manifest: dict
    info: mf.EngineManifest
    profiles: list[Profile]
    input_name: str
    input_dtype: str
    shape: tuple[int, ...]
    profile_index: int


def check_engine_request(engine: str | os.PathLike, shape_text: str | None = None) -> EngineCheck:
    """CPU-side checks of an engine and a requested input shape: manifest present and well-formed, engine bytes
    match its sha256, the shape inside a profile (default: the first profile's opt shape). Raises with cause and
    fix (EngineError, InputError)."""
    manifest = mf.read_manifest(engine)
    mf.check_engine_file(engine, manifest)
    info = mf.EngineManifest.from_json(manifest, str(mf.manifest_path(engine)))
    if len(info.inputs) != 1:
        raise EngineError(f"the engine has {len(info.inputs)} inputs; validate and bench handle single-input models")
    name = info.inputs[0].name
    shape = parse_dims(shape_text, "--shape") if shape_text else tuple(info.profiles[0].inputs[name].opt)
    index = find_profile(info.profiles, {name: shape})
    return EngineCheck(manifest, info, info.profiles, name, info.inputs[0].dtype, tuple(shape), index)


def load_engine_for_run(engine: str | os.PathLike, manifest: dict, plugin: str | os.PathLike | None = None) -> Any:
    """TensorRT side of loading: version check (before deserialization), plugin library, deserialize.

    ``plugin``: the plugin library to load (default: the one recorded in the manifest, else the one built in this
    checkout). Returns tensorrt_api's loaded engine."""
    from trt_engine import tensorrt_api

    tensorrt_api.prefer_backend(mf.backend_of(manifest))
    trt = tensorrt_api.import_tensorrt()
    mf.check_tensorrt_version(manifest, trt.__version__, tensorrt_api.backend_of(trt))
    library = plugin or (manifest.get("plugin") or {}).get("library")
    if manifest.get("plugin") and not plugin and not (library and Path(library).is_file()):
        from wtconv_libs.lookup import default_plugin

        library = default_plugin() or library
    if manifest.get("plugin"):
        if not library or not Path(library).is_file():
            raise PluginError(
                f"the engine uses the {manifest['plugin']['name']} plugin and its library {library!r} is not there; "
                f"pass --plugin PATH/TO/libwtconv_trt_plugin_dynamic.so built for TensorRT "
                f"{manifest['tensorrt']['major']}"
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
    return tensorrt_api.deserialize_engine(Path(engine).read_bytes(), f"engine {engine}")
