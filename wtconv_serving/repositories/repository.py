"""What every Triton model repository we write shares: the exported model's description, the model folder (planned
whole by each backend's writer, then written at once and replaced only with ``force``), config.pbtxt with labels.txt
beside it, serve.sh, and the check of a repository before a server loads it (docs/serving.md)."""

from __future__ import annotations

import importlib.util
import os
import py_compile
import re
import shutil
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from wtconv_core.errors import ConfigurationError, InputError, ModelError, ServingError
from wtconv_core.files import atomic_copy, atomic_write_bytes, atomic_write_json, user_file_mode, writing_error
from wtconv_core.options import ServerOptions
from wtconv_core.paths import check_not_an_input
from wtconv_export.exported import ExportedModel
from wtconv_libs.plugin_elf import library_bundle
from wtconv_serving.repositories.triton_config import LABELS_FILE, ModelConfig, parse_config
from wtconv_serving.tuning import DEFAULT_MAX_BATCH, default_max_batch

__all__ = [
    "ModelFolder",
    "TritonRepository",
    "check_repository",
    "default_model_name",
    "describe_export",
    "onnx_batching",
    "serve_script",
    "write_model_folder",
]

ONNX_TYPES = {1: "float32", 10: "float16"}  # onnx.TensorProto.FLOAT, FLOAT16
# Triton's own ports (its defaults, which serve.sh leaves as they are), published by a container.
_PORTS = " ".join(f"-p{p}:{p}" for p in (ServerOptions.http_port, ServerOptions.grpc_port, ServerOptions.metrics_port))


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


def describe_export(exported: ExportedModel) -> dict:
    """What serving takes from an exported model (wtconv_export.exported.ExportedModel, read once by the caller):
    its single input's and first output's names, element types and dims, its metadata and its number of WTConv2d
    nodes; ModelError for a model serving cannot take (several inputs, an element type other than float32 or
    float16)."""
    onnx_path = exported.path
    if len(exported.inputs) != 1 or not exported.outputs:
        raise ModelError(f"{onnx_path} has {len(exported.inputs)} inputs; serving handles single-input models")

    def tensor(value):
        if value.elem_type not in ONNX_TYPES:
            raise ModelError(
                f"{onnx_path}: tensor {value.name!r} has element type {value.elem_type}; serving takes "
                f"float32 or float16 models"
            )
        return {"name": value.name, "dtype": ONNX_TYPES[value.elem_type], "shape": list(value.dims)}

    return {
        "input": tensor(exported.inputs[0]),
        "output": tensor(exported.outputs[0]),
        "metadata": exported.metadata,
        "wtconv_nodes": exported.wtconv_nodes,
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


@dataclass(frozen=True)
class ModelFolder:
    """One model's folder in a repository, planned whole by its backend's writer before anything is written, and
    written by write_model_folder: its configuration (config.pbtxt, and labels.txt when it has labels), the model's
    files copied into the version folder 1/ (source, name there), the libraries copied beside config.pbtxt under
    their own names, JSON files written there (name, object), the Python files among the model's whose bytecode is
    written beside them, and the serve.sh beside the folder (None: none).
    ``inputs``: (what, path) of every file the folder is made from; ``option``: the parameter that named the
    repository; ``note``: what the writer tells the user about it (profiles left unused, instances on the CPU)."""

    model_dir: Path
    config: ModelConfig
    model_files: tuple[tuple[Path, str], ...] = ()
    libraries: tuple[Path, ...] = ()
    json_files: tuple[tuple[str, Any], ...] = ()
    bytecode: tuple[str, ...] = ()
    serve_script: str | None = None
    inputs: tuple[tuple[str, Any], ...] = ()
    option: str = "out"
    note: str = ""

    @property
    def repository(self) -> Path:
        return self.model_dir.parent

    @property
    def library_files(self) -> tuple[Path, ...]:
        """The files copied beside config.pbtxt: each library, with the kernel library it loads when it is one of
        the binary wheel's (libwtconv_kernels.so; wtconv_libs.plugin_elf.library_bundle), so the copies load there."""
        files = []
        for library in self.libraries:
            files += [f for f in library_bundle(library) if f not in files]
        return tuple(files)


def write_model_folder(folder: ModelFolder) -> str:
    """Write a planned model folder; returns config.pbtxt's text. The configuration is rendered (and checked against
    Triton's schema) first, then the repository is refused when it holds one of the folder's inputs (a job never
    writes over what it reads; wtconv_core.paths.check_not_an_input), then the folder is written beside its place
    and takes it only when complete, a previous one removed: a failed or interrupted write (Ctrl-C) leaves the
    repository as it was, the staging folder removed, and so is a repository folder this write created. serve.sh
    comes last, executable."""
    text = folder.config.render()
    check_not_an_input(folder.inputs, folders=[(folder.option, folder.repository)])
    repository, model_dir = folder.repository, folder.model_dir
    created = [p for p in (repository, *repository.parents) if not p.exists()]
    staging = repository / f".{model_dir.name}.partial"
    old = repository / f".{model_dir.name}.old"
    try:
        for path in (staging, old):
            if path.exists():
                shutil.rmtree(path)
        (staging / "1").mkdir(parents=True)
        for source, name in folder.model_files:
            atomic_copy(source, staging / "1" / name, mode=user_file_mode())
        for library in folder.library_files:
            atomic_copy(library, staging / Path(library).name)  # its own mode: a library stays executable
        for name, obj in folder.json_files:
            atomic_write_json(staging / name, obj)
        for name in folder.bytecode:
            # The bytecode now (``__pycache__``, checked by the source's hash): the backend stub would otherwise write
            # it into the model's folder when it first imports the file, a change that a server polling its
            # repository (wtconv_serving.server.launcher, model control "poll") takes for a new version of the model
            # and loads again. Tracebacks name the file at its place in the repository.
            source = str(staging / "1" / name)
            py_compile.compile(
                source,
                cfile=importlib.util.cache_from_source(source),
                dfile=str(model_dir / "1" / name),
                doraise=True,
                invalidation_mode=py_compile.PycInvalidationMode.CHECKED_HASH,
            )
        if folder.config.labels is not None:
            atomic_write_bytes(staging / LABELS_FILE, ("\n".join(folder.config.labels) + "\n").encode())
        atomic_write_bytes(staging / "config.pbtxt", text.encode())
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
    if folder.serve_script is not None:
        path = repository / "serve.sh"
        atomic_write_bytes(path, folder.serve_script.encode())
        path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return text


def serve_script(name: str, comments: list[str], setup: list[str], command: str) -> str:
    """The text of serve.sh, the tritonserver command for the repository beside it (``comments``: how to run it,
    ``setup``: lines before the command)."""
    lines = [
        "#!/usr/bin/env bash",
        f"# Serve the '{name}' model repository with Triton Inference Server.",
        *(f"# {line}" for line in comments),
        f'#   docker run --gpus all --rm {_PORTS} -v "$PWD":/models \\',
        "#     nvcr.io/nvidia/tritonserver:<release>-py3 /models/serve.sh",
        "# Extra tritonserver options may follow, e.g. ./serve.sh --http-port 8010",
        "set -euo pipefail",
        'HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"',
        *setup,
        command,
    ]
    return "\n".join(lines) + "\n"


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
