"""TensorRT engines: ``build_engine``, ``validate_engine``, ``benchmark_engine`` (``wtconv-trt build``,
``validate --engine``, ``bench``; docs/engines.md).

Each hands its options to the trt_engine function that does the job and makes its checks (trt_engine/build.py,
validate.py, bench.py); what is added here is the keyword form, the model-source options and the result types.
Nothing imports TensorRT before the options, files and shapes have been checked: without TensorRT a job ends
in one ConfigurationError saying how to install it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trt_engine.build import BuildResult, NoPluginNodesWarning
from wtconv_validate.engine import TOLERANCES as ENGINE_TOLERANCES
from wtconv_validate.engine import check_validation_options

__all__ = [
    "ENGINE_TOLERANCES",
    "BenchmarkResult",
    "BuildResult",
    "NoPluginNodesWarning",
    "benchmark_engine",
    "build_engine",
    "check_validation_options",
    "validate_engine",
]


def build_engine(
    onnx: str | os.PathLike,
    *,
    precision: str | None = None,
    plugin: str | os.PathLike | None = None,
    shapes: str | Sequence[str] = (),
    engine: str | os.PathLike | None = None,
    backend: str = "auto",
    compute_capabilities: Sequence[str] | None = None,
    timing_cache: str | os.PathLike | None = None,
    workspace_mib: int | None = None,
    optimization_level: int | None = None,
    tf32: bool = True,
    source_model: str | None = None,
    progress: bool = True,
    verbose: bool = False,
    force: bool = False,
) -> BuildResult:
    """Build a TensorRT engine from an exported ONNX model and write it with its manifest (ENGINE.json); returns
    trt_engine.build.BuildResult (``engine_path``, ``manifest_path``, ``manifest``, ``notes``: the defaults taken,
    ``summary()``: what ``wtconv-trt build`` prints).

    precision: "fp32" / "fp16" (default: the export's). plugin: the dynamic plugin library (default: the one
    ``doctor`` finds for this TensorRT's ABI; needed only when the model has WTConv2d nodes). shapes: one
    optimisation profile per string, "input:1x1x32x32/8x1x32x32/32x1x32x32" (default: batch 1/8/32 at the
    model's or the export's size). engine: output path (default MODEL.<precision>.engine beside the ONNX file).
    backend: "auto", "tensorrt" or "tensorrt-rtx". compute_capabilities: TensorRT-RTX targets ("8.9", "current";
    default every one it has). workspace_mib: 1 to 2**24; optimization_level: 0 to 5. source_model: "default",
    "ARCH:CHECKPOINT" (default: the ONNX metadata's). force: replace an existing engine and manifest.

    Checked before TensorRT is imported (trt_engine.build.plan_build): the values, the ONNX file, the profiles
    against the model (channels, smallest size, 2^31 elements per tensor), the plugin library, the outputs. Warns
    (NoPluginNodesWarning) when the model has no WTConv2d node."""
    from trt_engine.build import BuildOptions
    from trt_engine.build import build_engine as build

    shapes = [shapes] if isinstance(shapes, str) else list(shapes)
    options = BuildOptions(
        onnx=os.fspath(onnx),
        precision=precision,
        plugin=None if plugin is None else os.fspath(plugin),
        shapes=shapes,
        engine=None if engine is None else os.fspath(engine),
        timing_cache=None if timing_cache is None else os.fspath(timing_cache),
        workspace_mib=workspace_mib,
        optimization_level=optimization_level,
        tf32=tf32,
        source_model=source_model,
        backend=backend,
        compute_capabilities=None if compute_capabilities is None else list(compute_capabilities),
        progress=progress,
        verbose=verbose,
        force=force,
    )
    return build(options)


def validate_engine(
    engine: str | os.PathLike,
    model: Any = None,
    *,
    plugin: str | os.PathLike | None = None,
    inputs: str | os.PathLike | Sequence[Any] | None = None,
    input_shape: str | Sequence[int] | None = None,
    iterations: int | None = None,
    atol: float | None = None,
    rtol: float | None = None,
    tolerance: float | None = None,
    save_inputs: str | os.PathLike | None = None,
    save_outputs: str | os.PathLike | None = None,
    force: bool = False,
):
    """Run the engine and its PyTorch model on the same inputs and compare them with Polygraphy; returns
    wtconv_validate.core.ComparisonReport (``.passed``; ``.format()`` is what ``wtconv-trt validate --engine``
    prints: every measure, the verdict, the Polygraphy command that replays saved files).

    The PyTorch model: ``model``, a torch.nn.Module, or a ModelSource naming one of ours (wtconv_core.options;
    load_model); without one, or with a ModelSource that names none, the one recorded in the engine's manifest. plugin:
    default the manifest's. inputs: a .npy / .npz file or (B, C, H, W) arrays, one comparison each; else ``iterations``
    (1 to 10000, default 4) generated batches of ``input_shape`` (default: the first profile's opt shape). atol / rtol:
    element-wise tolerances (default per precision); tolerance: bound on max |engine - torch| / max |torch|. save_inputs
    / save_outputs: Polygraphy JSON files (replaced only with ``force``).

    Checked before TensorRT is imported (wtconv_validate.engine.validate_engine): the values, the engine and its
    manifest, the files to save, the model's channels against the engine's, the inputs or shape against the
    model and the engine's profiles."""
    from trt_engine.engine_file import open_engine
    from trt_engine.manifest import manifest_path
    from wtconv_core.paths import check_not_an_input
    from wtconv_trt.api.models import checkpoint_of, resolve_model
    from wtconv_validate.engine import DEFAULT_ITERATIONS
    from wtconv_validate.engine import validate_engine as validate

    sources = [("engine", engine), ("engine manifest", manifest_path(engine)), ("checkpoint", checkpoint_of(model))]
    sources += [("plugin library", plugin), ("inputs file", inputs)]
    check_not_an_input(sources, files=[("save_inputs", save_inputs), ("save_outputs", save_outputs)])
    opened = open_engine(engine)  # the file, its manifest and its sha256, checked once for the whole job
    model, source = resolve_model(model)
    return validate(
        opened,
        plugin=plugin,
        shape=input_shape,
        iterations=DEFAULT_ITERATIONS if iterations is None else iterations,
        atol=atol,
        rtol=rtol,
        tolerance=tolerance,
        source_model=source,
        model=model,
        inputs=inputs,
        save_inputs=save_inputs,
        save_outputs=save_outputs,
        force=force,
    )


@dataclass
class BenchmarkResult:
    """What benchmark_engine measured: ``report`` is the JSON document (engine, TensorRT version, precision, GPU,
    and one entry per profile shape and CUDA-graph mode with its latency percentiles and throughput)."""

    report: dict
    json_path: Path | None = None  # where the report was written, when asked

    @property
    def results(self) -> list[dict]:
        """One entry per case: profile, shape, batch, cuda_graph, latency_ms {min, mean, median, p90, p95, p99,
        max, cv_percent}, throughput_qps, throughput_images_per_s."""
        return self.report["results"]

    def to_json(self) -> str:
        """The report as indented JSON text (what ``wtconv-trt bench`` prints without --json)."""
        return json.dumps(self.report, indent=2)


def benchmark_engine(
    engine: str | os.PathLike,
    *,
    plugin: str | os.PathLike | None = None,
    shapes: Sequence[str | Sequence[int]] | None = None,
    iterations: int = 200,
    warmup_ms: float = 200.0,
    cuda_graph: str = "both",
    json_path: str | os.PathLike | None = None,
    force: bool = False,
) -> BenchmarkResult:
    """trtexec-style latency percentiles and throughput of an engine on the GPU (``wtconv-trt bench``).

    shapes: input shapes to time, 'BxCxHxW' or tuples (default: every profile's min, opt and max). iterations:
    timed inferences per case, 1 to 10**7. warmup_ms: 0 to 600000. cuda_graph: "both", "on" or "off". json_path:
    also write the report there (replaced only with ``force``). Checked before TensorRT is imported
    (trt_engine.bench.run_benchmark): the values, the engine and its manifest, each shape against the profiles."""
    from trt_engine.bench import run_benchmark
    from trt_engine.manifest import manifest_path
    from wtconv_core.paths import check_not_an_input

    sources = [("engine", engine), ("engine manifest", manifest_path(engine)), ("plugin library", plugin)]
    check_not_an_input(sources, files=[("json_path", json_path)])
    report = run_benchmark(
        engine,
        plugin=plugin,
        shapes=shapes,
        iterations=iterations,
        warmup_ms=warmup_ms,
        cuda_graph=cuda_graph,
        json_path=json_path,
        force=force,
    )
    return BenchmarkResult(report, None if json_path is None else Path(json_path))
