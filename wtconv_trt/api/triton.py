"""``write_triton_repository``: a model repository for Triton Inference Server's TensorRT backend
(``wtconv-trt triton-repo --engine``; docs/engines.md, "Triton"); ``write_onnxruntime_repository``: one for its
onnxruntime backend, the export itself with libwtconv_ort.so (``wtconv-trt triton-repo --onnx``;
docs/onnx_runtime.md, "From Triton")."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from wtconv_serving.tensorrt_backend import MAX_INSTANCES

__all__ = ["MAX_INSTANCES", "TritonRepository", "write_onnxruntime_repository", "write_triton_repository"]


@dataclass
class TritonRepository:
    """A written repository: the model's name and folder, its config.pbtxt (path and text), the serve.sh that
    starts tritonserver (with the plugin preloaded, for an engine), Triton's max_batch_size and a note (profiles
    left unused; instances on the CPU); for the onnxruntime backend, the libwtconv_ort.so copied into the model's
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


def write_triton_repository(
    engine: str | os.PathLike,
    out: str | os.PathLike,
    *,
    name: str | None = None,
    plugin_static: str | os.PathLike | None = None,
    instances: int = 1,
    gpus: Sequence[int] | None = None,
    preferred_batch_sizes: Sequence[int] | None = None,
    max_queue_delay_us: int = 100,
    labels: str | os.PathLike | None = None,
    force: bool = False,
) -> TritonRepository:
    """Write ``out/<name>/`` (config.pbtxt, 1/model.plan, the manifest, labels, the static-registration plugin)
    and ``out/serve.sh`` for an engine built with TensorRT (not TensorRT-RTX, which Triton's TensorRT backend
    cannot load).

    name: default the engine file's stem. plugin_static: libwtconv_trt_plugin.so (default: beside the dynamic
    library the manifest records, else the one ``doctor`` finds). instances: per GPU, 1 to 64. gpus: GPU indices
    (default every visible GPU). preferred_batch_sizes: dynamic batching's (default the profiles' opt and max
    batch). max_queue_delay_us: 0 to 10**8. labels: class names, one per line (default digits 0-9 for the
    shipped model). force: replace a model folder that holds files. Everything is checked before anything is
    written (wtconv_serving.tensorrt_backend.write_repository)."""
    from wtconv_serving.tensorrt_backend import write_repository

    written = write_repository(
        engine,
        out,
        name=name,
        plugin_static=plugin_static,
        instances=instances,
        gpus=None if gpus is None else list(gpus),
        preferred_batch_sizes=None if preferred_batch_sizes is None else list(preferred_batch_sizes),
        max_queue_delay_us=max_queue_delay_us,
        labels=labels,
        force=force,
    )
    plan = written["plan"]
    return TritonRepository(
        name=written["name"],
        repository=Path(out),
        model_dir=Path(written["model_dir"]),
        config=Path(written["config"]),
        config_text=written["config_text"],
        serve_script=Path(written["serve"]),
        max_batch_size=plan.max_batch_size,
        note=plan.note,
    )


def write_onnxruntime_repository(
    onnx: str | os.PathLike,
    out: str | os.PathLike,
    *,
    name: str | None = None,
    ort_library: str | os.PathLike | None = None,
    max_batch_size: int | None = None,
    instances: int = 1,
    instance_kind: str = "auto",
    gpus: Sequence[int] | None = None,
    preferred_batch_sizes: Sequence[int] | None = None,
    max_queue_delay_us: int = 100,
    labels: str | os.PathLike | None = None,
    server_path: str | os.PathLike | None = None,
    force: bool = False,
) -> TritonRepository:
    """Write ``out/<name>/`` (config.pbtxt with ``backend: "onnxruntime"``, 1/model.onnx: the export itself, the
    libwtconv_ort.so its WTConv2d nodes run on, labels) and ``out/serve.sh`` for Triton's onnxruntime backend.

    name: default 'digits' for the shipped model, else the file's stem. ort_library: libwtconv_ort.so (default:
    the one ``doctor`` finds; required when the export has WTConv2d nodes). max_batch_size: Triton's for a dynamic
    batch axis, 1 to 2**31-1 (default 32). instances: per GPU, 1 to 64. instance_kind: "gpu", "cpu" or "auto" (gpu,
    or cpu when the library has no CUDA op). gpus: GPU indices (default every visible GPU). preferred_batch_sizes:
    dynamic batching's (default none). max_queue_delay_us: 0 to 10**8. labels: class names, one per line (default
    digits 0-9 for the shipped model). server_path: the repository's absolute path as the server sees it, where the
    config's op_library_filename points (default: its absolute path here). force: replace a model folder that
    holds files. Everything is checked before anything is written
    (wtconv_serving.onnxruntime_backend.write_onnxruntime_repository)."""
    from wtconv_serving.onnxruntime_backend import write_onnxruntime_repository as write

    written = write(
        onnx,
        out,
        name=name,
        ort_library=ort_library,
        max_batch_size=max_batch_size,
        instances=instances,
        instance_kind=instance_kind,
        gpus=None if gpus is None else list(gpus),
        preferred_batch_sizes=None if preferred_batch_sizes is None else list(preferred_batch_sizes),
        max_queue_delay_us=max_queue_delay_us,
        labels=labels,
        server_path=server_path,
        force=force,
    )
    return TritonRepository(
        name=written["name"],
        repository=Path(out),
        model_dir=Path(written["model_dir"]),
        config=Path(written["config"]),
        config_text=written["config_text"],
        serve_script=Path(written["serve"]),
        max_batch_size=written["max_batch_size"],
        note=written["note"],
        ort_library=written["library"],
        library_in_server=written["library_in_server"],
        kind=written["kind"],
    )
