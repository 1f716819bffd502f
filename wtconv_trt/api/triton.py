"""``write_triton_repository``: a model repository for Triton Inference Server's TensorRT backend
(``wtconv-trt triton-repo --engine``; docs/engines.md, "Triton"); ``write_onnxruntime_repository``: one for its
onnxruntime backend, the export itself with libwtconv_ort.so (``wtconv-trt triton-repo --onnx``;
docs/onnx_runtime.md, "From Triton")."""

from __future__ import annotations

import os
from collections.abc import Sequence

from wtconv_core.options import TritonBackendOptions
from wtconv_serving.repositories.repository import TritonRepository
from wtconv_serving.repositories.triton_config import MAX_INSTANCES
from wtconv_serving.tuning import DEFAULT_TUNING, check_tuning

__all__ = ["MAX_INSTANCES", "TritonRepository", "write_onnxruntime_repository", "write_triton_repository"]


def write_triton_repository(
    engine: str | os.PathLike,
    out: str | os.PathLike,
    *,
    name: str | None = None,
    plugin_static: str | os.PathLike | None = None,
    instances: int | None = None,
    gpus: Sequence[int] | None = None,
    preferred_batch_sizes: Sequence[int] | None = None,
    max_queue_delay_us: int = TritonBackendOptions.max_queue_delay_us,
    labels: str | os.PathLike | None = None,
    force: bool = False,
    buckets: Sequence[int] | None = None,
    cuda_graphs: bool = DEFAULT_TUNING.cuda_graphs,
    max_queue_size: int = DEFAULT_TUNING.max_queue_size,
    queue_timeout_ms: int = DEFAULT_TUNING.queue_timeout_ms,
    warmup: bool = True,
) -> TritonRepository:
    """Write ``out/<name>/`` (config.pbtxt, 1/model.plan, the manifest, labels, the static-registration plugin)
    and ``out/serve.sh`` for an engine built with TensorRT (not TensorRT-RTX, which Triton's TensorRT backend
    cannot load).

    name: default the engine file's stem. plugin_static: libwtconv_trt_plugin.so (default: beside the dynamic
    library the manifest records, else the one ``doctor`` finds). instances: per GPU, 1 to 64 (default 2).
    gpus: GPU indices (default every visible GPU). preferred_batch_sizes: dynamic batching's (default the buckets).
    max_queue_delay_us: 0 to 10**8. labels: class names, one per line (default digits 0-9 for the shipped model).
    force: replace a model folder that holds files. buckets, cuda_graphs, max_queue_size, queue_timeout_ms: as for
    write_serving_repository (docs/serving.md, "Tuning"): the buckets are the preferred and warm-up sizes, and with
    cuda_graphs the backend captures one CUDA graph per bucket. warmup: a warm-up request per bucket. Everything is
    checked before anything is written (wtconv_serving.repositories.tensorrt_backend.write_tensorrt_repository)."""
    from wtconv_core.paths import check_not_an_input
    from wtconv_serving.repositories.tensorrt_backend import write_tensorrt_repository

    check_not_an_input([("engine", engine), ("plugin", plugin_static), ("labels", labels)], folders=[("out", out)])
    tuning = check_tuning(
        buckets=buckets, cuda_graphs=cuda_graphs, max_queue_size=max_queue_size, queue_timeout_ms=queue_timeout_ms
    )
    return write_tensorrt_repository(
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
        tuning=tuning,
        warmup=warmup,
    )


def write_onnxruntime_repository(
    onnx: str | os.PathLike,
    out: str | os.PathLike,
    *,
    name: str | None = None,
    ort_library: str | os.PathLike | None = None,
    max_batch_size: int | None = None,
    instances: int | None = None,
    instance_kind: str = "auto",
    gpus: Sequence[int] | None = None,
    preferred_batch_sizes: Sequence[int] | None = None,
    max_queue_delay_us: int = TritonBackendOptions.max_queue_delay_us,
    labels: str | os.PathLike | None = None,
    server_path: str | os.PathLike | None = None,
    force: bool = False,
    buckets: Sequence[int] | None = None,
    cudnn_search: str = DEFAULT_TUNING.cudnn_search,
    max_queue_size: int = DEFAULT_TUNING.max_queue_size,
    queue_timeout_ms: int = DEFAULT_TUNING.queue_timeout_ms,
    warmup: bool = True,
) -> TritonRepository:
    """Write ``out/<name>/`` (config.pbtxt with ``backend: "onnxruntime"``, 1/model.onnx: the export itself, the
    libwtconv_ort.so its WTConv2d nodes run on, labels) and ``out/serve.sh`` for Triton's onnxruntime backend.

    name: default 'digits' for the shipped model, else the file's stem. ort_library: libwtconv_ort.so (default:
    the one ``doctor`` finds; required when the export has WTConv2d nodes). max_batch_size: Triton's for a dynamic
    batch axis, 1 to 2**31-1 (default 128, fewer for large inputs). instances: per GPU, 1 to 64 (default 2 on GPUs,
    1 on the CPU). instance_kind: "gpu", "cpu" or "auto" (gpu, or cpu when the library has no CUDA op). gpus: GPU
    indices (default every visible GPU). preferred_batch_sizes: dynamic batching's (default the buckets).
    max_queue_delay_us: 0 to 10**8. labels: class names, one per line (default digits 0-9 for the shipped model).
    server_path: the repository's absolute path as the server sees it, where the config's op_library_filename
    points (default: its absolute path here). force: replace a model folder that holds files. buckets,
    cudnn_search, max_queue_size, queue_timeout_ms: as for write_serving_repository (docs/serving.md, "Tuning"); the
    backend runs ONNX Runtime without CUDA graphs, so "auto" search is HEURISTIC. warmup: a warm-up request per
    bucket. Everything is checked before anything is written
    (wtconv_serving.repositories.onnxruntime_backend.write_onnxruntime_repository)."""
    from wtconv_core.paths import check_not_an_input
    from wtconv_serving.repositories.onnxruntime_backend import write_onnxruntime_repository as write

    check_not_an_input([("ONNX model", onnx), ("library", ort_library), ("labels", labels)], folders=[("out", out)])
    tuning = check_tuning(
        buckets=buckets, cudnn_search=cudnn_search, max_queue_size=max_queue_size, queue_timeout_ms=queue_timeout_ms
    )
    return write(
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
        tuning=tuning,
        warmup=warmup,
    )
