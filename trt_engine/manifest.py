"""The engine's sidecar manifest, ``model.engine`` -> ``model.engine.json``, typed from read to use: what is needed to
load the engine safely and to rebuild it (docs/engines.md, "2. Build"). No TensorRT here."""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trt_engine.profiles import Profile
from wtconv_core.errors import EngineError
from wtconv_core.files import atomic_write_json
from wtconv_core.version import __version__

FORMAT = "wtconv-trt-engine-manifest"
FORMAT_VERSION = 1


def manifest_path(engine_path: str | os.PathLike) -> Path:
    """ENGINE -> ENGINE.json, beside it."""
    engine_path = Path(engine_path)
    return engine_path.with_name(engine_path.name + ".json")


def sha256_file(path: str | os.PathLike, chunk: int = 1 << 20) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def sha256_bytes(data: bytes | bytearray | memoryview) -> str:
    return hashlib.sha256(memoryview(data)).hexdigest()


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


@dataclass(frozen=True)
class TensorIO:
    """One input or output tensor of the engine, as TensorRT reports it (-1 for a dynamic dimension)."""

    name: str
    mode: str  # "input" | "output"
    shape: tuple[int, ...]
    dtype: str  # NumPy name: "float32", "float16", ...

    def to_json(self) -> dict:
        return {"name": self.name, "mode": self.mode, "shape": list(self.shape), "dtype": self.dtype}

    @staticmethod
    def from_json(obj: Any) -> TensorIO:
        if not isinstance(obj, dict) or obj.get("mode") not in ("input", "output"):
            raise ValueError(f"an io entry must be {{name, mode: input|output, shape, dtype}}, got {obj!r}")
        return TensorIO(str(obj["name"]), obj["mode"], tuple(int(d) for d in obj["shape"]), str(obj["dtype"]))


@dataclass
class PluginRecord:
    """The plugin library an engine was built with (tensorrt_api.load_plugin), as the manifest records it."""

    name: str
    version: str
    namespace: str
    library: str  # the dynamic library's absolute path where the engine was built
    kind: str = "dynamic"
    tensorrt_major: int | None = None
    abi: str | None = None  # "trt10" / "trt11": the library's ABI record
    library_sha256: str | None = None
    extra: dict = field(default_factory=dict)  # entries this version does not know, kept as read

    _KEYS = ("name", "version", "namespace", "library", "kind", "tensorrt_major", "abi", "library_sha256")

    def to_json(self) -> dict:
        obj = {key: getattr(self, key) for key in self._KEYS if getattr(self, key) is not None}
        return obj | self.extra

    @staticmethod
    def from_json(obj: Any) -> PluginRecord:
        if not isinstance(obj, dict):
            raise ValueError(f"the plugin entry must be an object, got {obj!r}")
        known = {key: obj[key] for key in PluginRecord._KEYS if key in obj}
        for key in ("name", "version", "namespace", "library"):
            known[key] = str(obj[key])
        if known.get("tensorrt_major") is not None:
            known["tensorrt_major"] = int(known["tensorrt_major"])
        return PluginRecord(**known, extra={k: v for k, v in obj.items() if k not in PluginRecord._KEYS})


@dataclass
class EngineManifest:
    """Everything the manifest records, typed. ``to_json`` gives the file's format (FORMAT, FORMAT_VERSION);
    ``from_json`` reads it back, including manifests written before the ``wtconv_trt`` and ``backend`` entries."""

    engine_file: str
    engine_sha256: str
    engine_bytes: int
    onnx_file: str
    onnx_sha256: str
    wtconv_nodes: int
    onnx_input_dtype: str
    source_model: dict | None
    tensorrt_version: str
    plugin: PluginRecord | None  # None: no plugin layer
    precision: str  # "fp32" | "fp16"
    strongly_typed: bool
    fp16_flag: bool
    tf32: bool
    profiles: list[Profile]
    io: list[TensorIO]
    build: dict = field(default_factory=dict)
    backend: str = "tensorrt"  # "tensorrt" | "tensorrt-rtx"
    wtconv_trt_version: str | None = __version__  # None: written before the version was recorded

    @property
    def tensorrt_major(self) -> int:
        return parse_version(self.tensorrt_version)[0]

    @property
    def compute_capabilities(self) -> list[str] | None:
        """The TensorRT-RTX targets the engine was built for (None: TensorRT, or all the builder has)."""
        return self.build.get("compute_capabilities")

    @property
    def inputs(self) -> list[TensorIO]:
        return [t for t in self.io if t.mode == "input"]

    @property
    def outputs(self) -> list[TensorIO]:
        return [t for t in self.io if t.mode == "output"]

    def to_json(self) -> dict:
        obj: dict[str, Any] = {"format": FORMAT, "format_version": FORMAT_VERSION}
        if self.wtconv_trt_version is not None:
            obj["wtconv_trt"] = {"version": self.wtconv_trt_version}
        obj.update(
            {
                "engine": {"file": self.engine_file, "sha256": self.engine_sha256, "bytes": int(self.engine_bytes)},
                "model": {
                    "onnx": self.onnx_file,
                    "sha256": self.onnx_sha256,
                    "wtconv_nodes": int(self.wtconv_nodes),
                    "input_dtype": self.onnx_input_dtype,
                    "source": self.source_model,
                },
                "tensorrt": {"version": self.tensorrt_version, "major": self.tensorrt_major, "backend": self.backend},
                "plugin": None if self.plugin is None else self.plugin.to_json(),
                "precision": self.precision,
                "strongly_typed": bool(self.strongly_typed),
                "fp16_flag": bool(self.fp16_flag),
                "tf32": bool(self.tf32),
                "profiles": [p.to_json() for p in self.profiles],
                "io": [t.to_json() for t in self.io],
                "build": dict(self.build),
            }
        )
        return obj

    @staticmethod
    def from_json(obj: dict, where: str = "manifest") -> EngineManifest:
        """The manifest ``obj`` (already checked for FORMAT and FORMAT_VERSION); EngineError naming the entry that
        is missing or malformed."""
        try:
            engine, model, trt = obj["engine"], obj.get("model") or {}, obj["tensorrt"]
            return EngineManifest(
                engine_file=str(engine["file"]),
                engine_sha256=str(engine["sha256"]),
                engine_bytes=int(engine["bytes"]),
                onnx_file=str(model.get("onnx", "")),
                onnx_sha256=str(model.get("sha256", "")),
                wtconv_nodes=int(model.get("wtconv_nodes", 0)),
                onnx_input_dtype=str(model.get("input_dtype", "")),
                source_model=model.get("source"),
                tensorrt_version=str(trt["version"]),
                plugin=None if obj.get("plugin") is None else PluginRecord.from_json(obj["plugin"]),
                precision=str(obj["precision"]),
                strongly_typed=bool(obj.get("strongly_typed", True)),
                fp16_flag=bool(obj.get("fp16_flag", False)),
                tf32=bool(obj.get("tf32", True)),
                profiles=[Profile.from_json(p) for p in obj["profiles"]],
                io=[TensorIO.from_json(t) for t in obj["io"]],
                build=dict(obj.get("build") or {}),
                backend=str(trt.get("backend", "tensorrt")),
                wtconv_trt_version=(obj.get("wtconv_trt") or {}).get("version"),
            )
        except (KeyError, TypeError, ValueError, AttributeError) as error:
            raise EngineError(
                f"{where}: malformed entry ({type(error).__name__}: {error}); rebuild the engine with wtconv-trt build"
            ) from None


def write_manifest(engine_path: str | os.PathLike, manifest: EngineManifest) -> Path:
    """Write ``manifest`` beside the engine, atomically; returns its path."""
    path = manifest_path(engine_path)
    atomic_write_json(path, manifest.to_json())
    return path


def read_manifest(engine_path: str | os.PathLike) -> EngineManifest:
    """The manifest beside ``engine_path``, read and checked once (format, version, every entry); EngineError with
    the fix."""
    path = manifest_path(engine_path)
    if not path.is_file():
        raise EngineError(
            f"no manifest {path.name} beside the engine {Path(engine_path).name}: the engine was "
            f"not built by 'wtconv-trt build' or the manifest was not copied with it; rebuild "
            f"with wtconv-trt build, or copy {path.name} next to the engine"
        )
    try:
        with open(path, encoding="utf-8") as f:
            obj = json.load(f)
    except json.JSONDecodeError as error:
        raise EngineError(
            f"manifest {path}: not valid JSON ({error}); rebuild the engine with wtconv-trt build"
        ) from None
    except UnicodeDecodeError as error:  # a manifest is UTF-8 JSON (write_manifest); this file is something else
        raise EngineError(
            f"manifest {path}: not UTF-8 text (byte {error.start}: {error.reason}), so not a manifest wtconv-trt "
            "wrote; rebuild the engine with wtconv-trt build"
        ) from None
    if not isinstance(obj, dict) or obj.get("format") != FORMAT:
        raise EngineError(f'{path}: not a wtconv-trt engine manifest (expected "format": "{FORMAT}")')
    if obj.get("format_version") != FORMAT_VERSION:
        raise EngineError(
            f"{path}: manifest format version {obj.get('format_version')!r}, this wtconv-trt reads "
            f"version {FORMAT_VERSION}; rebuild the engine with this wtconv-trt"
        )
    for key in ("engine", "tensorrt", "precision", "profiles", "io"):
        if key not in obj:
            raise EngineError(f"{path}: manifest has no {key!r} entry; rebuild the engine with wtconv-trt build")
    return EngineManifest.from_json(obj, str(path))


def check_engine_file(engine_path: str | os.PathLike, manifest: EngineManifest) -> None:
    """The engine must exist and match the manifest's size and sha256 (a truncated copy, a partial download or
    an engine rebuilt without its manifest are caught here, before TensorRT sees the bytes)."""
    engine_path = Path(engine_path)
    if not engine_path.is_file():
        raise EngineError(f"engine {engine_path} does not exist; build it with wtconv-trt build")
    size = engine_path.stat().st_size
    if size != manifest.engine_bytes:
        raise EngineError(
            f"engine {engine_path.name} is {size} bytes, its manifest says {manifest.engine_bytes}: the file "
            f"is truncated, corrupt or was replaced; rebuild it with wtconv-trt build"
        )
    digest = sha256_file(engine_path)
    if digest != manifest.engine_sha256:
        raise EngineError(
            f"engine {engine_path.name} has sha256 {digest[:16]}…, its manifest says "
            f"{manifest.engine_sha256[:16]}…: the file is corrupt or was replaced; rebuild it with "
            f"wtconv-trt build"
        )


RUNTIME_NAMES = {"tensorrt": "TensorRT", "tensorrt-rtx": "TensorRT-RTX"}


def check_tensorrt_version(
    manifest: EngineManifest, installed_version: str, installed_backend: str = "tensorrt"
) -> None:
    """TensorRT engines are not portable across TensorRT versions (unless built version-compatible, which we do
    not do: the plugin is native code compiled for one TensorRT). Fail before deserialization, naming both."""
    built = manifest.tensorrt_version
    if manifest.backend != installed_backend:
        raise EngineError(
            f"the engine was built with {RUNTIME_NAMES.get(manifest.backend, manifest.backend)} {built}, but "
            f"{RUNTIME_NAMES.get(installed_backend, installed_backend)} {installed_version} is in use: pass "
            f"backend={manifest.backend}, or rebuild the engine with 'wtconv-trt build --backend {installed_backend}'"
        )
    if parse_version(built) != parse_version(installed_version):
        raise EngineError(
            f"the engine was built with TensorRT {built}, this machine has TensorRT {installed_version}: "
            f"engines only load in the TensorRT version that built them. Rebuild it here: wtconv-trt "
            f"build {manifest.onnx_file or 'MODEL.onnx'} --precision {manifest.precision} --plugin <plugin library "
            f"built for TensorRT {parse_version(installed_version)[0]}>"
        )
