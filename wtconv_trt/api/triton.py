"""``write_triton_repository``: a model repository for Triton Inference Server's TensorRT backend
(``wtconv-trt triton-repo --engine``; docs/engines.md, "Triton"); ``write_onnxruntime_repository``: one for its
onnxruntime backend, the export itself with libwtconv_ort.so (``wtconv-trt triton-repo --onnx``;
docs/onnx_runtime.md, "From Triton")."""

from __future__ import annotations

import os
from typing import Any

from wtconv_core.options import RepositoryOptions, TuningOptions, split_keywords
from wtconv_serving.repositories.repository import TritonRepository
from wtconv_serving.repositories.triton_config import MAX_INSTANCES

__all__ = ["MAX_INSTANCES", "TritonRepository", "write_onnxruntime_repository", "write_triton_repository"]


def write_triton_repository(
    engine: str | os.PathLike,
    out: str | os.PathLike,
    *,
    options: RepositoryOptions | None = None,
    tuning: TuningOptions | None = None,
    **keywords: Any,
) -> TritonRepository:
    """Write ``out/<name>/`` (config.pbtxt, 1/model.plan, the manifest, labels, the static-registration plugin)
    and ``out/serve.sh`` for an engine built with TensorRT (not TensorRT-RTX, which Triton's TensorRT backend
    cannot load).

    ``options``: a wtconv_core.options.RepositoryOptions (each field's default and meaning there), of which this
    repository takes name (default the engine file's stem), plugin_static (libwtconv_trt_plugin.so; default: beside
    the dynamic library the manifest records, else the one ``doctor`` finds), instances (per GPU, 1 to 64), gpus,
    preferred_batch_sizes (default the buckets), max_queue_delay_us (0 to 10**8, default 100), labels (one class
    name per line; default digits 0-9 for the shipped model), warmup and force; ``tuning``: a TuningOptions, of
    which it takes buckets (the preferred and warm-up sizes, and with cuda_graphs one CUDA graph each),
    cuda_graphs, max_queue_size and queue_timeout_ms (docs/serving.md, "Tuning"). Either may be given as its
    fields, flat ``keywords``. Everything is checked before anything is written
    (wtconv_serving.repositories.tensorrt_backend.write_tensorrt_repository)."""
    from wtconv_serving.repositories.tensorrt_backend import write_tensorrt_repository

    return write_tensorrt_repository(engine, out, *_options(options, tuning, keywords))


def write_onnxruntime_repository(
    onnx: str | os.PathLike,
    out: str | os.PathLike,
    *,
    options: RepositoryOptions | None = None,
    tuning: TuningOptions | None = None,
    **keywords: Any,
) -> TritonRepository:
    """Write ``out/<name>/`` (config.pbtxt with ``backend: "onnxruntime"``, 1/model.onnx: the export itself, the
    libwtconv_ort.so its WTConv2d nodes run on, labels) and ``out/serve.sh`` for Triton's onnxruntime backend.

    ``options``: a wtconv_core.options.RepositoryOptions, of which this repository takes name (default 'digits' for
    the shipped model, else the file's stem), ort_library (default: the one ``doctor`` finds; required when the
    export has WTConv2d nodes), max_batch_size (for a dynamic batch axis, 1 to 2**31-1; default 128, fewer for
    large inputs), instances (per GPU, 1 to 64; 1 on the CPU), instance_kind ("gpu", "cpu" or "auto": gpu, or cpu
    when the library has no CUDA op), gpus, preferred_batch_sizes, max_queue_delay_us (default 100), labels,
    server_path (the repository's absolute path as the server sees it, where the config's op_library_filename
    points; default its absolute path here), warmup and force; ``tuning``: a TuningOptions, of which it takes
    buckets, cudnn_search (the backend runs ONNX Runtime without CUDA graphs, so "auto" is HEURISTIC),
    max_queue_size and queue_timeout_ms (docs/serving.md, "Tuning"). Either may be given as its fields, flat
    ``keywords``. Everything is checked before anything is written
    (wtconv_serving.repositories.onnxruntime_backend.write_onnxruntime_repository)."""
    from wtconv_serving.repositories.onnxruntime_backend import write_onnxruntime_repository as write

    return write(onnx, out, *_options(options, tuning, keywords))


def _options(options, tuning, keywords) -> tuple[RepositoryOptions, TuningOptions]:
    """The repository's and the tuning's options: the dataclasses given, or their fields as flat keywords."""
    if not keywords:
        return options or RepositoryOptions(), tuning or TuningOptions()
    if options is not None or tuning is not None:
        raise TypeError("give options= and tuning=, or their fields as keywords, not both")
    repository, tuning = split_keywords(keywords, RepositoryOptions, TuningOptions)
    return repository, tuning
