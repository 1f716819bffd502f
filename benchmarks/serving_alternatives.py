#!/usr/bin/env python3
"""The serving runner's alternatives, measured directly (no server) in one process, on one model: the choices
wtconv_serving.tuning makes by default, each beside what it replaces (docs/serving.md, "Tuning").

    python -m benchmarks.serving_alternatives --onnx tiny_fp16.onnx --runtime onnxruntime --ort-library LIB \
        --json alt.json

Variants (onnxruntime on the GPU; torch-cuda: graphs, eager, unbucketed):
  graphs            buckets, one CUDA graph per bucket (cudnn_conv_algo_search EXHAUSTIVE, searched at capture), each
                    batch run as the buckets' times measured at load say: padded up to one, or split into several
  graphs-padded     the same, every batch padded up to one bucket (before batches were split)
  eager-heuristic   buckets, one eager session, HEURISTIC
  eager-default     buckets, one eager session, DEFAULT
  eager-exhaustive  buckets, one eager session, EXHAUSTIVE (re-plans whenever the bucket changes)
  per-bucket        buckets, one eager session per bucket, EXHAUSTIVE (no Conv sees a second shape)
  unbucketed        no buckets, every batch at its own size, EXHAUSTIVE (before buckets)
  dense-graphs      graphs on a denser bucket set, for the padding it saves (--dense)
  NAME              graphs on the bucket set that --bucket-set NAME=1,2,... gives (each one more variant)

For each: load time (sessions, warm-up, capture), the GPU memory its runner holds after loading (the device's free
memory before and after, so ONNX Runtime's allocations count), milliseconds per batch at each bucket (the same size
repeated), and the rate over a dynamic batcher's kind of sequence of batch sizes (seeded: sizes 1 to the largest
bucket; 25 to 32, as in the measurement that motivated buckets; and above half the largest bucket, what a batcher
under load makes of requests of up to half of it, docs/serving.md "Padded or split") with one copy in and out per
batch, as served: the median of SEQUENCE_PASSES passes. --only names the variants to run. Writes --json; prints a table.
"""

from __future__ import annotations

import argparse
import gc
import json
import platform
import sys
import time
from pathlib import Path

import numpy as np

from wtconv_core.errors import InputError
from wtconv_core.stats import percentile
from wtconv_export.exported import ExportedModel
from wtconv_serving.repositories.repository import describe_export, onnx_batching
from wtconv_serving.runners.runtimes import load_runtime, make_runner
from wtconv_serving.tuning import Tuning, default_buckets

DENSE = (1, 2, 4, 8, 12, 16, 24, 32, 48, 64, 96, 128)
PADDED = "graphs-padded"  # the default runner with its plan dropped: every batch padded up to one bucket
SEQUENCE_PASSES = 5


def variants(runtime: str, quick: bool, dense: bool, bucket_sets: dict) -> list:
    if runtime == "torch-cuda":
        chosen = [("graphs", Tuning()), (PADDED, Tuning()), ("eager", Tuning(cuda_graphs=False)), ("unbucketed", None)]
    else:
        chosen = [
            ("graphs", Tuning()),
            (PADDED, Tuning()),
            ("eager-heuristic", Tuning(cuda_graphs=False, cudnn_search="HEURISTIC")),
            ("eager-default", Tuning(cuda_graphs=False, cudnn_search="DEFAULT")),
            ("eager-exhaustive", Tuning(cuda_graphs=False, cudnn_search="EXHAUSTIVE")),
            ("per-bucket", Tuning(cuda_graphs=False, session_per_bucket=True, cudnn_search="EXHAUSTIVE")),
            ("unbucketed", None),
        ]
        if quick:
            chosen = [c for c in chosen if c[0] in ("graphs", PADDED, "eager-heuristic", "unbucketed")]
    if dense and not quick:
        chosen.append(("dense-graphs", Tuning(buckets=DENSE)))
    chosen += [(name, Tuning(buckets=buckets)) for name, buckets in bucket_sets.items()]
    return chosen


def bucket_set(text: str) -> tuple:
    """``NAME=1,2,4,...`` (a --bucket-set) as (NAME, its buckets ascending)."""
    name, _, sizes = text.partition("=")
    try:
        buckets = tuple(sorted({int(size) for size in sizes.split(",")}))
    except ValueError:
        buckets = ()
    if not name or "," in name or not buckets or buckets[0] < 1:
        raise argparse.ArgumentTypeError(f"expected NAME=1,2,4,... (positive batch sizes), got {text!r}")
    return name, buckets


def gpu_free_bytes():
    """The GPU's free memory in bytes (cudaMemGetInfo), None without a CUDA device."""
    try:
        import torch
    except ImportError:
        return None
    return torch.cuda.mem_get_info()[0] if torch.cuda.is_available() else None


def timed(fn, seconds: float, least: int = 5) -> list:
    """Milliseconds of each call of ``fn`` for about ``seconds`` (at least ``least`` calls)."""
    times, start = [], time.perf_counter()
    while time.perf_counter() - start < seconds or len(times) < least:
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return sorted(times)


def measure(name, tuning, args, input_dims, max_batch, pool, sequences) -> dict:
    """One variant: its runner made, each bucket timed, each sequence run."""
    try:
        import torch

        torch.backends.cudnn.benchmark = False  # a bucketed torch-cuda runner turns it on for the process
    except ImportError:
        pass
    free_before = gpu_free_bytes()
    t0 = time.perf_counter()
    if tuning is None:
        runner = make_runner(args.model, input_dims=None, tuning=Tuning(cudnn_search="EXHAUSTIVE"))
        buckets = default_buckets(max_batch)
    else:
        tuning = tuning.with_max_batch(max_batch)
        runner = make_runner(args.model, input_dims=input_dims, tuning=tuning)
        buckets = tuning.buckets
    load_s = time.perf_counter() - t0
    entry = {"variant": name, "load_s": round(load_s, 2), "description": runner.description, "buckets": {}}
    if free_before is not None:  # the whole device's, so ONNX Runtime's own allocations count too
        entry["gpu_memory_mib"] = round((free_before - gpu_free_bytes()) / 2**20)
    if runner.plan is not None:
        entry["plan"] = runner.plan.describe()
        if name == PADDED:
            runner.plan = None
    for size in buckets:
        x = np.ascontiguousarray(pool[:size])
        runner(x)
        ms = timed(lambda x=x: runner(x), args.seconds)
        entry["buckets"][str(size)] = {
            "ms_p50": round(percentile(ms, 50), 3),
            "images_per_s": round(size / percentile(ms, 50) * 1e3, 1),
        }
    for label, sizes in sequences.items():
        runner(np.ascontiguousarray(pool[: sizes[0]]))
        walls = []
        for _ in range(SEQUENCE_PASSES):
            start = time.perf_counter()
            for size in sizes:
                runner(np.ascontiguousarray(pool[:size]))
            walls.append(time.perf_counter() - start)
        wall = percentile(walls, 50)
        entry[f"sequence_{label}"] = {
            "batches": len(sizes),
            "images_per_s": round(sum(sizes) / wall, 1),
            "images_per_s_spread": [round(sum(sizes) / w, 1) for w in (max(walls), min(walls))],
            "ms_per_batch": round(wall / len(sizes) * 1e3, 3),
        }
    runner = None  # its sessions and buffers freed before the next variant is made
    gc.collect()
    try:
        import torch

        torch.cuda.empty_cache()
    except ImportError:
        pass
    return entry


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--onnx", required=True)
    parser.add_argument("--runtime", choices=["onnxruntime", "torch-cuda"], required=True)
    parser.add_argument("--ort-library")
    parser.add_argument("--device", default="cuda", choices=["cuda", "cpu"], help="onnxruntime's device")
    parser.add_argument("--max-batch-size", type=int)
    parser.add_argument("--seconds", type=float, default=0.3, help="time per bucket")
    parser.add_argument("--quick", action="store_true", help="the main variants only")
    parser.add_argument("--dense", action="store_true", help="also graphs on a denser bucket set")
    parser.add_argument(
        "--bucket-set",
        type=bucket_set,
        action="append",
        default=[],
        metavar="NAME=1,2,...",
        help="one more variant, NAME: CUDA graphs on these buckets (repeatable)",
    )
    parser.add_argument("--only", help="comma-separated variants to run (default: all of --quick/--dense)")
    parser.add_argument("--json", required=True)
    args = parser.parse_args()
    exported = ExportedModel.read(args.onnx)
    description = describe_export(exported)
    max_batch, input_dims, _ = onnx_batching(description, args.max_batch_size)
    # Loaded once (the export read, the engine deserialized, ONNX Runtime's execution planned); every variant's runner
    # is made on it, so a variant's load time is its sessions, buffers, warm-up and graphs.
    args.model = load_runtime(args.runtime, onnx_path=exported, ort_device=args.device, ort_library=args.ort_library)
    rng = np.random.default_rng(0)
    dtype = np.float16 if description["input"]["dtype"] == "float16" else np.float32
    pool = rng.standard_normal((max_batch, *input_dims)).astype(dtype)
    sequences = {
        "sizes_1_to_max": [int(s) for s in rng.integers(1, max_batch + 1, 48)],
        "sizes_25_to_32": [int(s) for s in rng.integers(25, 33, 48)],
        "sizes_above_half": [int(s) for s in rng.integers(max_batch // 2 + 1, max_batch + 1, 48)],
    }
    report = {
        "machine": platform.platform(),
        "command": " ".join(sys.argv),
        "model": args.onnx,
        "runtime": args.runtime,
        "max_batch_size": max_batch,
        "sequences": sequences,
        "variants": [],
    }
    try:
        import torch

        report["gpu"] = torch.cuda.get_device_name() if torch.cuda.is_available() else None
    except ImportError:
        report["gpu"] = None
    bucket_sets = dict(args.bucket_set)
    for name, buckets in bucket_sets.items():
        try:  # the runner's own check of a bucket set against the model, before anything is loaded
            Tuning(buckets=buckets).with_max_batch(max_batch)
        except InputError as error:
            parser.error(f"--bucket-set {name}: {error}")
    chosen = variants(args.runtime, args.quick, args.dense, bucket_sets)
    if args.only:
        wanted = args.only.split(",")
        unknown = sorted(set(wanted) - {name for name, _ in chosen})
        if unknown:
            parser.error(f"--only: no variant {', '.join(unknown)} here; choose from {', '.join(n for n, _ in chosen)}")
        chosen = [c for c in chosen if c[0] in wanted]
    for name, tuning in chosen:
        try:
            entry = measure(name, tuning, args, input_dims, max_batch, pool, sequences)
        except Exception as error:  # noqa: BLE001 - a variant that cannot run here is reported, not fatal
            entry = {"variant": name, "error": f"{type(error).__name__}: {' '.join(str(error).split())[:300]}"}
        report["variants"].append(entry)
        print(json.dumps({k: v for k, v in entry.items() if k != "buckets"}), flush=True)
    Path(args.json).write_text(json.dumps(report, indent=1))
    columns = f"{'1..max img/s':>13} {'25..32 img/s':>13} {'>max/2 img/s':>13} {'GPU MiB':>8}"
    print(f"\n{'variant':18} {'load s':>7} {columns}  ms per bucket")
    for entry in report["variants"]:
        if "error" in entry:
            print(f"{entry['variant']:18} error: {entry['error']}")
            continue
        per = " ".join(f"{b}:{v['ms_p50']}" for b, v in entry["buckets"].items())
        print(
            f"{entry['variant']:18} {entry['load_s']:>7} {entry['sequence_sizes_1_to_max']['images_per_s']:>13} "
            f"{entry['sequence_sizes_25_to_32']['images_per_s']:>13} "
            f"{entry['sequence_sizes_above_half']['images_per_s']:>13} {entry.get('gpu_memory_mib', '-'):>8}  {per}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
