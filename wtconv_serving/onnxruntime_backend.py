"""A Triton Inference Server model repository for the **onnxruntime backend** (``wtconv-trt triton-repo --onnx``):
the exported file itself served by Triton's own ONNX Runtime, its WTConv2d nodes on libwtconv_ort.so.

Layout written under ``--out DIR`` (DIR is the model repository)::

    DIR/<name>/config.pbtxt        backend "onnxruntime", max_batch_size (a dynamic batch axis: Triton batches),
                                   the export's input and output names, types and dims, dynamic batching, the
                                   instance group, the custom-op library in model_operations, and for an fp32
                                   export on GPU instances the CUDA execution provider with TF32 off
    DIR/<name>/1/model.onnx        the export, unchanged
    DIR/<name>/libwtconv_ort.so    the ONNX Runtime op library for its WTConv2d nodes (when it has any)
    DIR/<name>/labels.txt          class labels when known (label_filename: classification results)
    DIR/serve.sh                   the tritonserver command

What the backend does with the config (triton-inference-server/onnxruntime_backend, src/onnxruntime.cc; our words
in docs/onnx_runtime.md, "From Triton"):

- each instance's session registers every ``model_operations.op_library_filename`` with ONNX Runtime's
  ``RegisterCustomOpsLibrary``, the path used as written: it must be absolute, as the server sees it (a container
  mounts the repository elsewhere: ``server_path``);
- KIND_GPU instances run on the CUDA execution provider on their GPU; since release 24.06 the parameters of a
  ``gpu_execution_accelerator`` named "cuda" are passed to it as provider options (``use_tf32``: "0" keeps fp32 fp32;
  an older release refuses the accelerator: leave the block out there);
- the library asks ONNX Runtime for C API version 17: the backend's ONNX Runtime must be 1.17 or newer.

The config is parsed into Triton's ModelConfig protobuf (tritonclient's model_config_pb2, Triton's
model_config.proto) before anything is written.
"""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path

from wtconv_core.errors import ConfigurationError, InputError
from wtconv_core.files import atomic_write_bytes
from wtconv_core.inputs import MAX_INT32, check_choice, check_int
from wtconv_serving.python_backend import (
    default_model_name,
    describe_onnx,
    parse_config,
    pbtxt_dims,
    pbtxt_string,
    plan_from_onnx,
)
from wtconv_serving.tensorrt_backend import MAX_INSTANCES, MAX_QUEUE_DELAY_US, MODEL_NAME, TRITON_DTYPES, check_gpus

INSTANCE_KINDS = {"auto": None, "gpu": "KIND_GPU", "cpu": "KIND_CPU"}
MODEL_FILE = "model.onnx"


def make_onnxruntime_config(
    *,
    name: str,
    description: dict,
    max_batch_size: int | None = None,
    library_path: str | None = None,
    instances: int = 1,
    kind: str = "KIND_GPU",
    gpus=None,
    preferred_batch_sizes=None,
    max_queue_delay_us: int = 100,
    labels: bool = False,
) -> str:
    """config.pbtxt text for the export described by ``description`` (wtconv_serving.python_backend.describe_onnx),
    parsed with parse_config before it is returned. ``library_path``: op_library_filename (absolute)."""
    batch, input_dims, output_dims = plan_from_onnx(description, max_batch_size)
    inp, out = description["input"], description["output"]
    lines = [
        f"name: {pbtxt_string(name)}",
        'backend: "onnxruntime"',
        f"max_batch_size: {int(batch)}",
        f"default_model_filename: {pbtxt_string(MODEL_FILE)}",
        "input [",
        "  {",
        f"    name: {pbtxt_string(inp['name'])}",
        f"    data_type: {TRITON_DTYPES[inp['dtype']]}",
        f"    dims: {pbtxt_dims(input_dims)}",
        "  }",
        "]",
        "output [",
        "  {",
        f"    name: {pbtxt_string(out['name'])}",
        f"    data_type: {TRITON_DTYPES[out['dtype']]}",
        f"    dims: {pbtxt_dims(output_dims)}",
    ]
    if labels:
        lines.append('    label_filename: "labels.txt"')
    lines += ["  }", "]"]
    if batch > 0:
        preferred = sorted({int(b) for b in preferred_batch_sizes or []})
        outside = [b for b in preferred if not 1 <= b <= batch]
        if outside:
            raise InputError(f"--preferred-batch {outside}: outside 1..{batch} (max_batch_size)")
        lines.append("dynamic_batching {")
        if preferred:
            lines.append(f"  preferred_batch_size: {pbtxt_dims(preferred)}")
        lines += [f"  max_queue_delay_microseconds: {int(max_queue_delay_us)}", "}"]
    group = ["instance_group [", "  {", f"    count: {int(instances)}", f"    kind: {kind}"]
    if gpus and kind == "KIND_GPU":
        group.append(f"    gpus: {pbtxt_dims(gpus)}")
    lines += group + ["  }", "]"]
    if library_path:
        lines.append(f"model_operations {{ op_library_filename: {pbtxt_string(library_path)} }}")
    if kind == "KIND_GPU" and inp["dtype"] == "float32":
        # The CUDA EP computes fp32 convolutions and matrix products in TF32 unless told not to (docs/onnx_runtime.md).
        lines += [
            "optimization { execution_accelerators {",
            '  gpu_execution_accelerator [ { name: "cuda" parameters { key: "use_tf32" value: "0" } } ]',
            "} }",
        ]
    text = "\n".join(lines) + "\n"
    parse_config(text, f"the generated config of {name}")
    return text


def serve_script(name: str, library_in_server: str | None) -> str:
    """serve.sh: the tritonserver command for the repository (beside it), with how to run it in Triton's container
    and, when the model has WTConv2d nodes, where the config loads libwtconv_ort.so from (``library_in_server``)."""
    lines = [
        "#!/usr/bin/env bash",
        f"# Serve the '{name}' model repository with Triton Inference Server's onnxruntime backend, e.g. inside its",
        "# NGC container (the repository mounted where config.pbtxt says, see the library path below):",
        '#   docker run --gpus all --rm -p8000:8000 -p8001:8001 -p8002:8002 -v "$PWD":/models \\',
        "#     nvcr.io/nvidia/tritonserver:<release>-py3 /models/serve.sh",
        "# The backend's ONNX Runtime must be 1.17 or newer (libwtconv_ort.so asks for its C API version 17).",
    ]
    if library_in_server:
        lines.append(f"# config.pbtxt loads the WTConv2d op from {library_in_server} (the server's view of it).")
    lines += [
        "# Extra tritonserver options may follow, e.g. ./serve.sh --http-port 8010",
        "set -euo pipefail",
        'HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"',
        'exec tritonserver --model-repository="$HERE" "$@"',
    ]
    return "\n".join(lines) + "\n"


def write_onnxruntime_repository(
    onnx,
    out,
    *,
    name: str | None = None,
    ort_library=None,
    max_batch_size: int | None = None,
    instances: int = 1,
    instance_kind: str = "auto",
    gpus=None,
    preferred_batch_sizes=None,
    max_queue_delay_us: int = 100,
    labels=None,
    server_path=None,
    force: bool = False,
) -> dict:
    """Write the repository; returns {"config", "model_dir", "serve", "config_text", "name", "max_batch_size",
    "kind", "library", "note"}.

    Every option and file is checked before anything is written, with the messages of ``wtconv-trt triton-repo
    --onnx``: the counts and GPU indices, the ONNX file, the library (``ort_library``, else the one found in lookup
    order; needed when the export has WTConv2d nodes), the labels, the repository folder (a model folder that holds
    files is replaced only with ``force``), ``server_path`` (absolute). ``instance_kind`` "auto": KIND_GPU, or
    KIND_CPU when the library has no CUDA op (said in ``note``)."""
    from wtconv_core.paths import check_input_file, check_output_dir
    from wtconv_libs import lookup
    from wtconv_ort.execution import check_ort_library

    instances = check_int(instances, "--instances", 1, MAX_INSTANCES)
    gpus = check_gpus(gpus)
    if max_batch_size is not None:
        check_int(max_batch_size, "--max-batch-size", 1, MAX_INT32)
    preferred_batch_sizes = [check_int(b, "--preferred-batch", 1, MAX_INT32) for b in preferred_batch_sizes or []]
    max_queue_delay_us = check_int(max_queue_delay_us, "--max-queue-delay-us", 0, MAX_QUEUE_DELAY_US)
    check_choice(instance_kind, "--instance-kind", tuple(INSTANCE_KINDS))
    if server_path is not None and not os.path.isabs(os.fspath(server_path)):
        raise InputError(
            f"--server-path {os.fspath(server_path)}: give the repository's absolute path as the server sees it "
            "(e.g. /models inside a container)"
        )
    if ort_library is not None:
        check_ort_library(ort_library)
    if labels:
        check_input_file(labels, what="--labels", made_by="give a text file with one class name per line")
    check_input_file(onnx, what="--onnx", made_by="export one with 'wtconv-trt export -o MODEL.onnx'")
    if not os.fspath(onnx).endswith(".onnx"):
        raise InputError(
            f"--onnx {os.fspath(onnx)}: give the exported ONNX model (MODEL.onnx); an engine goes with --engine"
        )
    check_output_dir(out, option="--out", force=force)
    description = describe_onnx(onnx)
    nodes = description["wtconv_nodes"]
    library = None
    if nodes:
        library = Path(ort_library) if ort_library is not None else lookup.ort_library()
        if library is None:
            raise ConfigurationError(
                f"--onnx {os.fspath(onnx)} has {nodes} WTConv2d nodes, which Triton's onnxruntime backend runs with "
                "libwtconv_ort.so, and none is built: wtconv-trt build-libs, or --ort-library LIB"
            )
    note = ""
    kind = INSTANCE_KINDS[instance_kind]
    if kind is None:
        kind = "KIND_GPU"
        if library is not None and lookup.ort_library_info(library).get("cuda") != "yes":
            kind = "KIND_CPU"
            note = (
                f"{library} has no CUDA op (built without nvcc): instances on the CPU (KIND_CPU); a library built "
                "with nvcc serves on the GPU"
            )
    name = name or default_model_name(onnx, description["metadata"])
    if not MODEL_NAME.fullmatch(name):
        raise InputError(f"--name {name!r}: use letters, digits, '_', '-', '.' only")
    out = Path(out)
    model_dir = out / name
    if model_dir.exists() and any(model_dir.iterdir()) and not force:
        raise InputError(f"{model_dir} already exists and is not empty; pass --force to overwrite it")
    library_in_server = None
    if library is not None:
        root = Path(server_path) if server_path is not None else out.resolve()
        library_in_server = str(root / name / library.name)
    label_lines = None
    if labels:
        label_lines = Path(labels).read_text(encoding="utf-8").splitlines()
    elif description["metadata"].get("source") == "default":
        label_lines = [str(d) for d in range(10)]  # the shipped default model classifies the digits 0-9
    config = make_onnxruntime_config(
        name=name,
        description=description,
        max_batch_size=max_batch_size,
        library_path=library_in_server,
        instances=instances,
        kind=kind,
        gpus=gpus,
        preferred_batch_sizes=preferred_batch_sizes,
        max_queue_delay_us=max_queue_delay_us,
        labels=label_lines is not None,
    )
    if model_dir.exists() and force:
        shutil.rmtree(model_dir)
    (model_dir / "1").mkdir(parents=True, exist_ok=True)
    shutil.copyfile(onnx, model_dir / "1" / MODEL_FILE)
    if library is not None:
        shutil.copyfile(library, model_dir / library.name)
    if label_lines is not None:
        atomic_write_bytes(model_dir / "labels.txt", ("\n".join(label_lines) + "\n").encode())
    atomic_write_bytes(model_dir / "config.pbtxt", config.encode())
    serve = out / "serve.sh"
    atomic_write_bytes(serve, serve_script(name, library_in_server).encode())
    serve.chmod(serve.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return {
        "config": model_dir / "config.pbtxt",
        "model_dir": model_dir,
        "serve": serve,
        "config_text": config,
        "name": name,
        "max_batch_size": plan_from_onnx(description, max_batch_size)[0],
        "kind": kind,
        "library": model_dir / library.name if library is not None else None,
        "library_in_server": library_in_server,
        "note": note,
    }


__all__ = ["INSTANCE_KINDS", "make_onnxruntime_config", "serve_script", "write_onnxruntime_repository"]
