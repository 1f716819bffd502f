"""What every Triton model repository we write shares: the exported model's description, the model folder (replaced
only with ``force``), config.pbtxt with labels.txt beside it, serve.sh, and the check of a repository before a server
loads it (docs/serving.md)."""

from __future__ import annotations

import os
import re
import shutil
import stat
from dataclasses import dataclass
from pathlib import Path

from wtconv_core.errors import InputError, ModelError, ServingError
from wtconv_core.files import atomic_write_bytes
from wtconv_serving.triton_config import LABELS_FILE, ModelConfig, parse_config

__all__ = [
    "DEFAULT_MAX_BATCH",
    "TritonRepository",
    "check_repository",
    "default_model_name",
    "describe_onnx",
    "onnx_batching",
    "prepare_model_dir",
    "serve_script",
    "write_model_config",
]

DEFAULT_MAX_BATCH = 32  # Triton's max_batch_size for an export with a dynamic batch axis, unless given
ONNX_TYPES = {1: "float32", 10: "float16"}  # onnx.TensorProto.FLOAT, FLOAT16


@dataclass
class TritonRepository:
    """A written repository for Triton's TensorRT or onnxruntime backend: the model's name and folder, its
    config.pbtxt (path and text), the serve.sh that starts tritonserver, Triton's max_batch_size and a note (profiles
    left unused, instances on the CPU); for the onnxruntime backend, the libwtconv_ort.so copied into the model's
    folder, the path the config gives the server, and the instances' kind."""

    name: str
    repository: Path
    model_dir: Path
    config: Path
    config_text: str
    serve_script: Path
    max_batch_size: int
    note: str = ""
    ort_library: Path | None = None
    library_in_server: str | None = None
    kind: str = "KIND_GPU"


def describe_onnx(onnx_path) -> dict:
    """Input/output names, element types and dims of an exported model, its metadata and its number of WTConv2d
    nodes."""
    import onnx

    from wtconv_export.contract import count_wtconv_nodes
    from wtconv_export.onnx_export import read_metadata

    if not Path(onnx_path).is_file():
        raise ModelError(f"{onnx_path} does not exist; export one with: wtconv-trt export -o {onnx_path}")
    try:
        proto = onnx.load(str(onnx_path), load_external_data=False)
    except Exception as error:
        raise ModelError(f"{onnx_path} is not a readable ONNX model: {error}") from None
    if len(proto.graph.input) != 1 or not proto.graph.output:
        raise ModelError(f"{onnx_path} has {len(proto.graph.input)} inputs; serving handles single-input models")

    def tensor(value):
        kind = value.type.tensor_type
        if kind.elem_type not in ONNX_TYPES:
            raise ModelError(
                f"{onnx_path}: tensor {value.name!r} has element type {kind.elem_type}; serving takes "
                f"float32 or float16 models"
            )
        dims = [int(d.dim_value) if d.HasField("dim_value") else -1 for d in kind.shape.dim]
        return {"name": value.name, "dtype": ONNX_TYPES[kind.elem_type], "shape": dims}

    return {
        "input": tensor(proto.graph.input[0]),
        "output": tensor(proto.graph.output[0]),
        "metadata": read_metadata(proto),
        "wtconv_nodes": count_wtconv_nodes(proto),
    }


def onnx_batching(description: dict, max_batch_size: int | None) -> tuple[int, list[int], list[int]]:
    """(max_batch_size, input dims, output dims) for an export: a dynamic batch axis gets Triton batching up to
    ``max_batch_size`` (default DEFAULT_MAX_BATCH); other dims come from the export's native input shape in its
    metadata where the graph leaves them dynamic (so Triton refuses other sizes before the model sees them)."""
    shape = description["input"]["shape"]
    native = description["metadata"].get("input_shape")
    native = [int(d) for d in native.split(",")] if native else None
    dims = [d if d != -1 or native is None else native[i] for i, d in enumerate(shape)]
    out_dims = description["output"]["shape"]
    if shape[0] == -1:
        return (DEFAULT_MAX_BATCH if max_batch_size is None else int(max_batch_size)), dims[1:], out_dims[1:]
    return 0, dims, out_dims


def default_model_name(onnx_path, metadata: dict) -> str:
    """The model's name in the repository when none is given: 'digits' for the shipped default model, else the
    ONNX file's name up to its first dot, with characters Triton does not take in a name replaced by '_'."""
    if metadata.get("source") == "default":
        return "digits"
    return re.sub(r"[^A-Za-z0-9_.-]", "_", Path(onnx_path).name.split(".")[0]) or "model"


def check_model_dir(out, name: str, force: bool) -> Path:
    """The model's folder in repository ``out``; InputError when it holds files and ``force`` is off."""
    model_dir = Path(out) / name
    if model_dir.exists() and any(model_dir.iterdir()) and not force:
        raise InputError(
            f"{model_dir} already exists and is not empty; pass force=True to overwrite it", parameter="force"
        )
    return model_dir


def prepare_model_dir(model_dir: Path) -> Path:
    """A fresh model folder with its version folder 1/ (a previous one removed); returns the version folder."""
    if model_dir.exists():
        shutil.rmtree(model_dir)
    (model_dir / "1").mkdir(parents=True)
    return model_dir / "1"


def write_model_config(model_dir: Path, config: ModelConfig) -> str:
    """config.pbtxt (checked against Triton's schema) and, when the config has labels, labels.txt beside it;
    returns the config's text."""
    text = config.render()
    if config.labels is not None:
        atomic_write_bytes(model_dir / LABELS_FILE, ("\n".join(config.labels) + "\n").encode())
    atomic_write_bytes(model_dir / "config.pbtxt", text.encode())
    return text


def serve_script(out, name: str, comments: list[str], setup: list[str], command: str) -> Path:
    """Write ``out/serve.sh``, the tritonserver command for the repository beside it (``comments``: how to run it,
    ``setup``: lines before the command), executable; returns its path."""
    lines = [
        "#!/usr/bin/env bash",
        f"# Serve the '{name}' model repository with Triton Inference Server.",
        *(f"# {line}" for line in comments),
        '#   docker run --gpus all --rm -p8000:8000 -p8001:8001 -p8002:8002 -v "$PWD":/models \\',
        "#     nvcr.io/nvidia/tritonserver:<release>-py3 /models/serve.sh",
        "# Extra tritonserver options may follow, e.g. ./serve.sh --http-port 8010",
        "set -euo pipefail",
        'HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"',
        *setup,
        command,
    ]
    path = Path(out) / "serve.sh"
    atomic_write_bytes(path, ("\n".join(lines) + "\n").encode())
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


def check_repository(repo) -> list:
    """Every model folder of ``repo`` has a config.pbtxt that parses and a version folder; returns the model
    names. ServingError (one line) otherwise."""
    repo = Path(repo)
    if not repo.is_dir():
        raise ServingError(
            f"model repository {repo} does not exist; write one with: wtconv-trt serve MODEL.onnx "
            f"--repo {repo} --write-only"
        )
    names = []
    for model_dir in sorted(p for p in repo.iterdir() if p.is_dir()):
        config = model_dir / "config.pbtxt"
        if not config.is_file():
            raise ServingError(f"{model_dir} has no config.pbtxt: not a Triton model folder")
        parsed = parse_config(config.read_text(encoding="utf-8"), str(config))
        if parsed.name and parsed.name != model_dir.name:
            raise ServingError(f"{config} names the model {parsed.name!r} but its folder is {model_dir.name!r}")
        if not any(p.is_dir() and p.name.isdigit() for p in model_dir.iterdir()):
            raise ServingError(f"{model_dir} has no version folder (e.g. {model_dir}/1)")
        names.append(model_dir.name)
    if not names:
        raise ServingError(f"model repository {repo} holds no model folder")
    return names


def relative_to(path: str | os.PathLike, out) -> str:
    """``path`` as written in serve.sh: relative to the repository ``out``."""
    return os.path.relpath(path, out)
