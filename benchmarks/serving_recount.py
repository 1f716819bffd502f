#!/usr/bin/env python3
"""Committed serving results recounted from Triton's statistics: a markdown table.

    python -m benchmarks.serving_recount docs/bench/serving_gpu_4instances.json [...] [--out FILE.md]

Until the load test counted the answers arriving inside a window whenever they were sent (docs/serving.md, "Reading
the load test"), a sweep point counted only the requests both sent and answered inside it, which reads the rate low by
about one latency over the window. The same results hold Triton's own count of each window: the batches it executed
(``executed_batches``). For every run of each file (a serving_results.json of tools/device_serving.sh, or a file of
such results by name, as docs/bench/serving_gpu_mps.json), this prints, at 256 requests in flight (the busiest point
again with one more client process left out): per round, the rate the clients counted and Triton's, and the p50
latency; then per run the median ratio of requests of 1-64 to requests of 1-8, both ways.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

from benchmarks.serving_summary import BIG, executed_rate, sweep_points


def runs_of(results: dict) -> list:
    """[(name, run)] of a serving_results.json, or of a file holding several under names ({name: {"results": ...}})."""
    runs = results.get("runs", [])
    if isinstance(runs, list):
        return [(run["tag"], run) for run in runs]
    return [(f"{name}: {run['tag']}", run) for name, entry in runs.items() for run in entry["results"]["runs"]]


def recount(results: dict) -> list:
    """Markdown rows: one per round at 256 in flight, then the 1-64 / 1-8 ratio of each run with both mixes."""
    rows = []
    for name, run in runs_of(results):
        small, big = sweep_points(run, 256), sweep_points(run, 256, BIG)
        for label, points in (("1-8", small), ("1-64", big)):
            for p in points:
                executed = executed_rate(p)
                share = f"{p['images_per_s'] / executed:.3f}" if executed else "–"
                rows.append(
                    f"| {name} | {label} | {p['images_per_s']:.0f} | "
                    f"{'–' if executed is None else f'{executed:.0f}'} | {share} | {p['latency_ms']['p50']:.0f} |"
                )
        pairs = list(zip(big, small, strict=False))
        clients = [b["images_per_s"] / s["images_per_s"] for b, s in pairs if s["images_per_s"]]
        triton = [executed_rate(b) / executed_rate(s) for b, s in pairs if executed_rate(b) and executed_rate(s)]
        if clients and triton:
            rows.append(
                f"| {name} | 1-64 ÷ 1-8 | {statistics.median(clients):.2f} | {statistics.median(triton):.2f} | | |"
            )
    return rows


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("results", nargs="+", help="serving results files (docs/bench/serving_gpu_*.json)")
    parser.add_argument("--out", help="write the table here too")
    args = parser.parse_args(argv)
    lines = []
    for path in args.results:
        results = json.loads(Path(path).read_text())
        gpus = sorted({run.get("gpu") or "?" for _, run in runs_of(results)})
        lines += [
            f"## {Path(path).name} ({', '.join(gpus)})",
            "",
            "| run | requests | images/s, clients' count | images/s, Triton's statistics | clients ÷ Triton | p50 ms |",
            "|---|---|---|---|---|---|",
            *recount(results),
            "",
        ]
    text = "\n".join(lines)
    print(text)
    if args.out:
        Path(args.out).write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
