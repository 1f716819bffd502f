"""What every Triton model repository we write shares: the exported model's description, the model folder (replaced
only with ``force``), config.pbtxt with labels.txt beside it, serve.sh, and the check of a repository before a server
loads it (docs/serving.md)."""

from __future__ import annotations

import os
import re
import shutil
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from wtconv_core.errors import ConfigurationError, InputError, ModelError, ServingError
from wtconv_core.files import atomic_write_bytes, writing_error
from wtconv_serving.triton_config import LABELS_FILE, ModelConfig, parse_config
from wtconv_serving.tuning import DEFAULT_MAX_BATCH, default_max_batch

__all__ = [
    "TritonRepository",
    "check_repository",
    "default_model_name",
    "describe_onnx",
    "onnx_batching",
    "writing_model_dir",
    "serve_script",
    "write_model_config",
]

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
    ``max_batch_size`` (default: tuning.default_max_batch of one input image's bytes); other dims come from the
    export's native input shape in its metadata where the graph leaves them dynamic (so Triton refuses other sizes
    before the model sees them)."""
    shape = description["input"]["shape"]
    native = description["metadata"].get("input_shape")
    native = [int(d) for d in native.split(",")] if native else None
    dims = [d if d != -1 or native is None else native[i] for i, d in enumerate(shape)]
    out_dims = description["output"]["shape"]
    if shape[0] == -1:
        if max_batch_size is None:
            image = int(np.prod([max(int(d), 1) for d in dims[1:]])) * np.dtype(description["input"]["dtype"]).itemsize
            max_batch_size = default_max_batch(image) if all(int(d) > 0 for d in dims[1:]) else DEFAULT_MAX_BATCH
        return int(max_batch_size), dims[1:], out_dims[1:]
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


@contextmanager
def writing_model_dir(model_dir: Path) -> Iterator[Path]:
    """A fresh folder, with its version folder 1/, to write the model into; it takes the place of ``model_dir`` (a
    previous one removed) only when the block ends without an error, so a failed or interrupted write (Ctrl-C) leaves
    the repository as it was: the staging folder is removed, and so is a repository folder this write created."""
    repository = model_dir.parent
    created = [p for p in (repository, *repository.parents) if not p.exists()]
    staging = repository / f".{model_dir.name}.partial"
    old = repository / f".{model_dir.name}.old"
    try:
        for path in (staging, old):
            if path.exists():
                shutil.rmtree(path)
        (staging / "1").mkdir(parents=True)
        yield staging
        if model_dir.exists():
            model_dir.rename(old)
        staging.rename(model_dir)
    except BaseException as error:
        shutil.rmtree(staging, ignore_errors=True)
        if old.exists() and not model_dir.exists():
            old.rename(model_dir)
        for path in created:  # deepest first
            try:
                path.rmdir()
            except OSError:
                break
        # A full disk (writing_error), whether met making the folders or by a file's writer, is said of the model's
        # folder: it is written as a whole, and the staging folder's name would only puzzle.
        cause = (
            error if isinstance(error, OSError) else error.__cause__ if isinstance(error, ConfigurationError) else None
        )
        user_error = writing_error(cause, model_dir) if isinstance(cause, OSError) else None
        if user_error is not None:
            raise user_error from cause
        raise
    shutil.rmtree(old, ignore_errors=True)


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
