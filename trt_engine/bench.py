"""``wtconv-trt bench --engine ENGINE``: trtexec-style latency and throughput for each profile shape.

For every optimisation profile and each of its min / opt / max input shapes, two modes:
- ``enqueue``: IExecutionContext.execute_async_v3 on a CUDA stream per inference;
- ``cuda-graph``: the same enqueue captured once into a CUDA graph and replayed (trtexec --useCudaGraph). As
  trtexec does (samples/common/sampleDevice.h v11.1: cudaStreamBeginCapture(stream,
  cudaStreamCaptureModeThreadLocal)), one enqueue runs before capture so shape-dependent setup is not captured.

Latency of one inference = GPU time between CUDA events recorded around it (device buffers already in place, no
host copies: trtexec's "GPU Compute Time"). Percentiles follow trtexec's definition
(samples/common/sampleReporting.cpp findPercentile: sorted times, index max(n - 1 - floor((1 - p/100) n), 0);
median: middle element or mean of the two middle ones). Throughput = inferences and images per second of wall
time over a back-to-back run of the same iterations.

The statistics are plain Python (tested on the CPU); the GPU part uses torch.cuda for streams, events, buffers and
graph capture and tensorrt_api.ExecutionSession for TensorRT.
"""

from __future__ import annotations

import json
import logging
import math
import os
import time
from collections.abc import Iterable, Sequence
from typing import Any

from trt_engine.profiles import Profile, format_shape
from wtconv_core.errors import EngineError
from wtconv_core.inputs import check_choice, check_int, check_number, shape_of
from wtconv_core.progress import Progress
from wtconv_core.stats import median, percentile

logger = logging.getLogger(__name__)

PERCENTILES = (90.0, 95.0, 99.0)
MAX_ITERATIONS = 10**7  # timed inferences per case
MAX_WARMUP_MS = 600_000.0  # warm-up per case: ten minutes
# --cuda-graph: which modes are timed, in this order.
CUDA_GRAPH_MODES = {"both": ("off", "on"), "on": ("on",), "off": ("off",)}


def latency_stats(times_ms: Iterable[float]) -> dict[str, float]:
    """min / mean / median / p90 / p95 / p99 / max / coefficient of variation (ms)."""
    t = sorted(float(x) for x in times_ms)
    if not t:
        raise ValueError("no timings")
    mean = sum(t) / len(t)
    var = sum((x - mean) ** 2 for x in t) / len(t)
    stats = {"min": t[0], "mean": mean, "median": median(t)}
    for p in PERCENTILES:
        stats[f"p{p:g}"] = percentile(t, p)
    stats["max"] = t[-1]
    stats["cv_percent"] = 100.0 * math.sqrt(var) / mean if mean > 0 else 0.0
    return stats


def bench_shapes(
    profiles: Sequence[Profile], input_name: str, which: Sequence[str] = ("min", "opt", "max")
) -> list[tuple[int, str, tuple[int, ...]]]:
    """[(profile index, label, shape)] without duplicates (min == opt happens)."""
    out, seen = [], set()
    for index, profile in enumerate(profiles):
        r = profile.inputs[input_name]
        for label in which:
            shape = tuple(getattr(r, label))
            if (index, shape) in seen:
                continue
            seen.add((index, shape))
            out.append((index, label, shape))
    return out


def run_benchmark(
    engine: str | os.PathLike,
    *,
    plugin: str | os.PathLike | None = None,
    shapes: Sequence[str | Sequence[int]] | None = None,
    iterations: int = 200,
    warmup_ms: float = 200.0,
    cuda_graph: str | Sequence[str] = "both",
    json_path: str | os.PathLike | None = None,
    force: bool = False,
) -> dict[str, Any]:
    """Benchmark every shape; returns the JSON-able result, also written to ``json_path`` when given (atomically;
    an existing file is replaced only with ``force``). ``shapes``: 'BxCxHxW' texts or tuples (default: each
    profile's min/opt/max). ``cuda_graph``: "both", "on", "off" (or a sequence of "off"/"on"). Each finished case
    is logged at INFO (median, p99, images/s). Every option, the engine and its manifest are checked before
    TensorRT is imported."""
    import torch

    from trt_engine.engine_file import load_engine_for_run, open_engine
    from trt_engine.profiles import find_profile
    from trt_engine.tensorrt_api import ExecutionSession
    from wtconv_core.paths import check_output_file

    iterations = check_int(iterations, "iterations", 1, MAX_ITERATIONS)
    warmup_ms = check_number(warmup_ms, "warmup_ms", 0.0, MAX_WARMUP_MS, what=" ms")
    if isinstance(cuda_graph, str):
        cuda_graph = CUDA_GRAPH_MODES[check_choice(cuda_graph, "cuda_graph", tuple(CUDA_GRAPH_MODES))]
    for mode in cuda_graph:
        check_choice(mode, "cuda_graph", ("off", "on"))
    user_shapes = [shape_of(s, "shapes") for s in shapes or []]
    opened = open_engine(engine)
    if json_path:
        check_output_file(json_path, option="json_path", force=force)
    info = opened.manifest
    input_name = opened.input.name
    if user_shapes:
        cases = [(find_profile(info.profiles, {input_name: s}), "user", s) for s in user_shapes]
    else:
        cases = bench_shapes(info.profiles, input_name)
    loaded = load_engine_for_run(opened, plugin)
    if not torch.cuda.is_available():
        raise EngineError(
            "bench needs PyTorch with CUDA (it uses torch.cuda streams, events and graphs); this "
            "PyTorch has no CUDA device"
        )
    results = []
    stream = torch.cuda.Stream()
    progress = Progress(logger, "bench", len(cases) * len(cuda_graph))
    for profile_index, label, shape in cases:
        session = ExecutionSession(loaded, {input_name: shape}, profile_index, stream)
        for mode in cuda_graph:
            launch = _graph_launcher(session, stream) if mode == "on" else session.enqueue
            r = _time(launch, stream, iterations, warmup_ms)
            batch = shape[0]
            r.update(
                {
                    "profile": profile_index,
                    "shape_label": label,
                    "shape": list(shape),
                    "batch": batch,
                    "cuda_graph": mode == "on",
                    "throughput_qps": r["inferences"] / r["wall_s"],
                    "throughput_images_per_s": batch * r["inferences"] / r["wall_s"],
                }
            )
            results.append(r)
            lat = r["latency_ms"]
            progress.step(
                f"profile {profile_index} {label:>4} {format_shape(shape):>14} graph {mode:>3}: "
                f"median {lat['median']:.4f} ms, p99 {lat['p99']:.4f} ms, "
                f"{r['throughput_images_per_s']:.0f} img/s"
            )
        del session
    report = {
        "engine": str(engine),
        "tensorrt": info.tensorrt_version,
        "precision": info.precision,
        "gpu": torch.cuda.get_device_name(),
        "iterations": iterations,
        "warmup_ms": warmup_ms,
        "latency": "GPU compute time per inference (CUDA events), ms",
        "results": results,
    }
    if json_path:
        write_json(report, json_path)
    return report


def _graph_launcher(session, stream):
    import torch

    with torch.cuda.stream(stream):
        session.enqueue()  # setup outside the capture, as trtexec
    stream.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream, capture_error_mode="thread_local"):
        session.enqueue()
    session._graph = graph  # keep it alive with the buffers it uses
    return graph.replay


def _time(launch, stream, iterations: int, warmup_ms: float) -> dict:
    import torch

    with torch.cuda.stream(stream):
        start = time.perf_counter()
        while (time.perf_counter() - start) * 1e3 < warmup_ms:
            launch()
            stream.synchronize()
        events = [
            (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(iterations)
        ]
        for begin, end in events:
            begin.record(stream)
            launch()
            end.record(stream)
        stream.synchronize()
        times = [b.elapsed_time(e) for b, e in events]
        wall = time.perf_counter()
        for _ in range(iterations):
            launch()
        stream.synchronize()
        wall = time.perf_counter() - wall
    return {"latency_ms": latency_stats(times), "inferences": iterations, "wall_s": wall}


def write_json(result: dict, path: str | os.PathLike) -> None:
    """Write the result as JSON, atomically."""
    from wtconv_core.files import atomic_write_json

    atomic_write_json(path, result)


def dumps(result: dict) -> str:
    """The result as indented JSON text."""
    return json.dumps(result, indent=2)
