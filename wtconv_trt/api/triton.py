"""``write_triton_repository``: a model repository for Triton Inference Server's TensorRT backend
(``wtconv-trt triton-repo``; docs/engines.md, "Triton")."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from trt_engine.triton import MAX_INSTANCES

__all__ = ["MAX_INSTANCES", "TritonRepository", "write_triton_repository"]


@dataclass
class TritonRepository:
    """A written repository: the model's name and folder, its config.pbtxt (path and text), the serve.sh that
    starts tritonserver with the plugin preloaded, Triton's max_batch_size and a note on profiles left unused."""

    name: str
    repository: Path
    model_dir: Path
    config: Path
    config_text: str
    serve_script: Path
    max_batch_size: int
    note: str = ""


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
    written (trt_engine.triton.write_repository)."""
    from trt_engine.triton import write_repository

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
