#!/usr/bin/env python3
"""Several serving runners on one GPU, as Triton's instances are: their aggregate rate when their CUDA-graph replays
overlap (each on its own stream, as served), and when one replays at a time (a lock across the processes), beside one
runner alone. The input stays on the GPU, so only the GPU's work is timed (docs/serving.md, "Sharing a GPU between
instances: MPS").

    python -m benchmarks.gpu_sharing --onnx tiny_fp16.onnx --runners 4 --batch 128 --json sharing.json

Each mode starts its runners in fresh processes (spawned), waits until every one has loaded, then lets each replay
the graph of --batch for --seconds; the rate is the images of all runners over the window. The replays call the
runner's own bucket step (BatchRunner._run_bucket) on the input its buffers already hold: no staging, no copies. The
lock is a plain multiprocessing lock, which is not fair: one runner may take most of the replays, so that mode gives
the GPU's rate with one replay at a time, not a share per runner.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing as mp
import platform
import sys
import time
from pathlib import Path

from wtconv_serving.server.mps import mps_of

# one runner alone; --runners replaying at once; --runners one replay at a time (a lock across the processes)
MODES = ("alone", "overlapping", "locked")


def _runner(onnx: str, batch: int):
    from wtconv_export.exported import ExportedModel
    from wtconv_serving.repositories.repository import describe_export, onnx_batching
    from wtconv_serving.runners.runtimes import load_runtime, make_runner
    from wtconv_serving.tuning import Tuning

    exported = ExportedModel.read(onnx)
    max_batch, input_dims, _ = onnx_batching(describe_export(exported), None)
    model = load_runtime("torch-cuda", onnx_path=exported)
    runner = make_runner(model, input_dims=input_dims, tuning=Tuning().with_max_batch(max_batch))
    if batch not in runner.graphs:
        raise SystemExit(f"--batch {batch}: no CUDA graph of that size (graphs: {sorted(runner.graphs)})")
    return runner


def _work(onnx, batch, seconds, lock, ready, results):
    runner = _runner(onnx, batch)
    runner.stream.synchronize()
    ready.wait()
    turn = contextlib.nullcontext() if lock is None else lock
    count, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        with turn:
            runner._run_bucket(batch)
            runner.stream.synchronize()
        count += 1
    results.put((count, time.perf_counter() - start))


def measure(onnx: str, runners: int, batch: int, seconds: float, serialized: bool) -> dict:
    ctx = mp.get_context("spawn")
    lock = ctx.Lock() if serialized else None
    ready = ctx.Barrier(runners)
    results = ctx.Queue()
    procs = [ctx.Process(target=_work, args=(onnx, batch, seconds, lock, ready, results)) for _ in range(runners)]
    for p in procs:
        p.start()
    got = [results.get(timeout=600) for _ in procs]
    for p in procs:
        p.join()
    wall = max(w for _, w in got)
    replays = sum(c for c, _ in got)
    return {
        "runners": runners,
        "serialized": serialized,
        "batch": batch,
        "replays": replays,
        "images_per_s": round(replays * batch / wall, 1),
        "ms_per_replay_each": [round(w / c * 1e3, 3) for c, w in got],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--onnx", required=True)
    parser.add_argument("--runners", type=int, default=4)
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument(
        "--modes",
        default=",".join(MODES),
        help=f"which of {', '.join(MODES)} to measure, in that order (default: all)",
    )
    parser.add_argument("--json", required=True)
    args = parser.parse_args()
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    unknown = [m for m in modes if m not in MODES]
    if unknown or not modes:
        parser.error(f"--modes {args.modes!r}: expected a comma-separated list of {', '.join(MODES)}")
    import torch

    report = {
        "command": " ".join(sys.argv),
        "machine": platform.platform(),
        "gpu": torch.cuda.get_device_name(),
        "mps": mps_of({}),  # whose MPS daemon, if any, the runners are clients of (the load test's wording)
        "modes": [],
    }
    for mode in modes:
        runners, serialized = (1, False) if mode == "alone" else (args.runners, mode == "locked")
        entry = measure(args.onnx, runners, args.batch, args.seconds, serialized)
        entry["mode"] = mode
        report["modes"].append(entry)
        print(json.dumps(entry), flush=True)
    Path(args.json).write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
