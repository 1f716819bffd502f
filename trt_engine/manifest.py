"""The engine's sidecar manifest: ``model.engine`` -> ``model.engine.json``.

A TensorRT engine is opaque and tied to the TensorRT version (and GPU) that built it, and to the plugin
library it was built with. The manifest records what is needed to use it safely and to rebuild it:
TensorRT version, plugin identity and library, precision and typing mode, optimisation profiles, I/O
tensors, the source PyTorch model, and sha256 of the ONNX model and of the engine (so a truncated or
replaced engine is caught before TensorRT is asked to deserialize it).

Written atomically (temporary file in the same folder, fsync, os.replace), like the engine itself.
No TensorRT here: this module runs and is tested on the CPU.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path

from trt_engine.profiles import Profile
from wtconv_export._version import __version__
from wtconv_export.errors import EngineError

FORMAT = "wtconv-trt-engine-manifest"
FORMAT_VERSION = 1


def manifest_path(engine_path) -> Path:
    engine_path = Path(engine_path)
    return engine_path.with_name(engine_path.name + ".json")


def sha256_file(path, chunk: int = 1 << 20) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def sha256_bytes(data) -> str:
    return hashlib.sha256(memoryview(data)).hexdigest()


def atomic_write_bytes(path, data) -> None:
    """Write ``data`` to ``path`` so that readers see the old file or the whole new one, never a part."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(memoryview(data))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def atomic_write_json(path, obj) -> None:
    atomic_write_bytes(path, (json.dumps(obj, indent=2, sort_keys=False) + "\n").encode("utf-8"))


def parse_version(text: str) -> tuple[int, ...]:
    """'10.16.0.72' -> (10, 16, 0, 72); ignores a non-numeric tail ('11.1.0.post1' -> (11, 1, 0))."""
    parts = []
    for piece in str(text).split("."):
        digits = "".join(ch for ch in piece if ch.isdigit()) if piece[:1].isdigit() else ""
        if not digits:
            break
        parts.append(int(digits))
    if not parts:
        raise EngineError(f"not a version number: {text!r}")
    return tuple(parts)


def make_manifest(*, engine_file: str, engine_sha256: str, engine_bytes: int, onnx_file: str, onnx_sha256: str,
                  wtconv_nodes: int, onnx_input_dtype: str, source_model: dict | None, tensorrt_version: str,
                  plugin: dict | None, precision: str, strongly_typed: bool, fp16_flag: bool, tf32: bool,
                  profiles: list, io: list, build: dict | None = None, backend: str = "tensorrt") -> dict:
    """The manifest as a JSON-able dict. ``profiles``: list of Profile; ``io``: list of
    {"name", "mode": "input"|"output", "shape": [..., -1 for dynamic], "dtype": "float16"|...}."""
    return {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "wtconv_trt": {"version": __version__},
        "engine": {"file": engine_file, "sha256": engine_sha256, "bytes": int(engine_bytes)},
        "model": {"onnx": onnx_file, "sha256": onnx_sha256, "wtconv_nodes": int(wtconv_nodes),
                  "input_dtype": onnx_input_dtype, "source": source_model},
        "tensorrt": {"version": tensorrt_version, "major": parse_version(tensorrt_version)[0], "backend": backend},
        "plugin": plugin,
        "precision": precision,
        "strongly_typed": bool(strongly_typed),
        "fp16_flag": bool(fp16_flag),
        "tf32": bool(tf32),
        "profiles": [p.to_json() if isinstance(p, Profile) else p for p in profiles],
        "io": io,
        "build": build or {},
    }


def write_manifest(engine_path, manifest: dict) -> Path:
    path = manifest_path(engine_path)
    atomic_write_json(path, manifest)
    return path


def read_manifest(engine_path) -> dict:
    """Read and check the manifest beside ``engine_path``; ValueError / FileNotFoundError with the fix."""
    path = manifest_path(engine_path)
    if not path.is_file():
        raise EngineError(f"no manifest {path.name} beside the engine {Path(engine_path).name}: the engine was "
                                f"not built by 'wtconv-trt build' or the manifest was not copied with it; rebuild "
                                f"with wtconv-trt build, or copy {path.name} next to the engine")
    try:
        with open(path, encoding="utf-8") as f:
            manifest = json.load(f)
    except json.JSONDecodeError as error:
        raise EngineError(f"manifest {path}: not valid JSON ({error}); rebuild the engine with wtconv-trt build") \
            from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise EngineError(f"{path}: not a wtconv-trt engine manifest (expected \"format\": \"{FORMAT}\")")
    if manifest.get("format_version") != FORMAT_VERSION:
        raise EngineError(f"{path}: manifest format version {manifest.get('format_version')!r}, this wtconv-trt reads "
                         f"version {FORMAT_VERSION}; rebuild the engine with this wtconv-trt")
    for key in ("engine", "tensorrt", "precision", "profiles", "io"):
        if key not in manifest:
            raise EngineError(f"{path}: manifest has no {key!r} entry; rebuild the engine with wtconv-trt build")
    return manifest


def profiles_of(manifest: dict) -> list[Profile]:
    return [Profile.from_json(p) for p in manifest["profiles"]]


def check_engine_file(engine_path, manifest: dict) -> None:
    """The engine must exist and match the manifest's size and sha256 (a truncated copy, a partial download or
    an engine rebuilt without its manifest are caught here, before TensorRT sees the bytes)."""
    engine_path = Path(engine_path)
    if not engine_path.is_file():
        raise EngineError(f"engine {engine_path} does not exist; build it with wtconv-trt build")
    size = engine_path.stat().st_size
    want = manifest["engine"]
    if size != want.get("bytes"):
        raise EngineError(f"engine {engine_path.name} is {size} bytes, its manifest says {want.get('bytes')}: the file "
                         f"is truncated, corrupt or was replaced; rebuild it with wtconv-trt build")
    digest = sha256_file(engine_path)
    if digest != want.get("sha256"):
        raise EngineError(f"engine {engine_path.name} has sha256 {digest[:16]}…, its manifest says "
                         f"{str(want.get('sha256'))[:16]}…: the file is corrupt or was replaced; rebuild it with "
                         f"wtconv-trt build")


def backend_of(manifest: dict) -> str:
    """'tensorrt' or 'tensorrt-rtx': which TensorRT built the engine (manifests without the key: TensorRT)."""
    return manifest["tensorrt"].get("backend", "tensorrt")


def check_tensorrt_version(manifest: dict, installed_version: str, installed_backend: str = "tensorrt") -> None:
    """TensorRT engines are not portable across TensorRT versions (unless built version-compatible, which we do
    not do: the plugin is native code compiled for one TensorRT). Fail before deserialization, naming both."""
    built = manifest["tensorrt"]["version"]
    built_backend = backend_of(manifest)
    if built_backend != installed_backend:
        names = {"tensorrt": "TensorRT", "tensorrt-rtx": "TensorRT-RTX"}
        raise EngineError(f"the engine was built with {names.get(built_backend, built_backend)} {built}, but "
                          f"{names.get(installed_backend, installed_backend)} {installed_version} is in use: pass "
                          f"--backend {built_backend}, or rebuild the engine with --backend {installed_backend}")
    if parse_version(built) != parse_version(installed_version):
        raise EngineError(f"the engine was built with TensorRT {built}, this machine has TensorRT {installed_version}: "
                         f"engines only load in the TensorRT version that built them. Rebuild it here: wtconv-trt "
                         f"build {manifest.get('model', {}).get('onnx', 'MODEL.onnx')} --precision "
                         f"{manifest.get('precision', 'fp16')} --plugin <plugin library built for TensorRT "
                         f"{parse_version(installed_version)[0]}>")
