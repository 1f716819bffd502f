"""``benchmark_layers``: the fused WTConv CUDA kernels against the official kernels, cuDNN depthwise and
x.clone(), per layer shape and in whole models (``wtconv-trt bench-layer``; wtconv_bench/layers.py,
docs/bench/README.md). Needs a CUDA GPU."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from wtconv_core.errors import InputError
from wtconv_core.inputs import check_int

__all__ = ["DTYPES", "OUTPUT_FILES", "LayerBenchmark", "benchmark_layers"]

DTYPES = ("fp32", "fp16", "bf16")
# The files the benchmark writes into its output folder (wtconv_bench.layers.run_benchmark).
OUTPUT_FILES = ("bench_layer.json", "bench_layer.md", "bench_layer.png")
MAX_REPLAYS = 100_000


@dataclass
class LayerBenchmark:
    """The results (``report``, as bench_layer.json) and the folder holding bench_layer.json / .md / .png."""

    out: Path
    report: dict

    def markdown(self) -> str:
        """bench_layer.md: the tables ``wtconv-trt bench-layer`` prints."""
        return (self.out / "bench_layer.md").read_text()


def benchmark_layers(
    out: str | os.PathLike = "bench_out",
    *,
    dtypes: Sequence[str] = ("fp32", "fp16"),
    quick: bool = False,
    layers: bool = True,
    models: bool = True,
    reference: bool = True,
    official: str | os.PathLike | None = None,
    replays: int = 20,
    force: bool = False,
    command_line: str = "",
) -> LayerBenchmark:
    """Time the kernels on the GPU and write bench_layer.json / .md / .png into ``out`` (earlier results are
    replaced only with ``force``).

    dtypes: from fp32, fp16, bf16. quick: a small subset of the paper-sweep shapes. layers / models / reference:
    time the layer shapes, the whole models, the PyTorch reference module. official: a checkout of
    BGU-CS-VIL/WTConv whose fused kernels are timed too. replays: timed graph replays per method, 1 to 100000.
    command_line: the command recorded in the outputs."""
    from wtconv_bench.layers import Options, run_benchmark
    from wtconv_core.paths import check_output_dir

    dtypes = tuple(dtypes)
    if not dtypes or any(d not in DTYPES for d in dtypes):
        raise InputError(
            f"dtypes: expected dtypes from {', '.join(DTYPES)}, got {','.join(dtypes)!r}", parameter="dtypes"
        )
    replays = check_int(replays, "replays", 1, MAX_REPLAYS)
    check_output_dir(out, option="out", force=force, will_write=OUTPUT_FILES)
    opts = Options(
        out=Path(out),
        dtypes=dtypes,
        quick=quick,
        layers=layers,
        models=models,
        reference=reference,
        official=None if official is None else Path(official),
        replays=replays,
        command=command_line or "wtconv-trt bench-layer",
    )
    return LayerBenchmark(Path(out), run_benchmark(opts))
