#!/usr/bin/env python3
"""The results of tools/device_serving.sh in one JSON document and one markdown file, and a short table printed.

    python -m benchmarks.serving_summary WORK_DIR OUT_DIR

Reads WORK_DIR/load_<runtime>_<model>[_<variant>].json (``wtconv-trt serve --load-test --json``) and
WORK_DIR/alternatives_<runtime>.json (benchmarks/serving_alternatives.py); writes OUT_DIR/serving_results.json and
OUT_DIR/serving_results.md. For every sweep point it adds the padding the buckets cost on the batches Triton
executed (images computed but dropped, as a share of all computed), and checks the targets of docs/serving.md.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from wtconv_serving.tuning import bucket_for

# docs/serving.md, "Targets": WTConvNeXt-T fp16 at 256 in flight, served over direct, p99 over p50 at 16 in flight.
TARGET_IMAGES_PER_S = {"onnxruntime": 5000, "torch-cuda": 6000}
TARGET_RATIO = 0.8
TARGET_TAIL = 3.0


def _parts(by_part) -> str:
    """Triton's compute time of one execution by part, "input / infer / output" in ms."""
    if not by_part:
        return "-"
    return " / ".join(f"{by_part[part]:.2f}" for part in ("input", "infer", "output"))


def padding_share(executed: dict, buckets) -> float | None:
    """Images computed but dropped (a batch padded up to its bucket) over all images computed."""
    if not executed or not buckets:
        return None
    real = sum(int(b) * n for b, n in executed.items())
    computed = sum(bucket_for(int(b), buckets) * n for b, n in executed.items())
    return round(1 - real / computed, 3) if computed else None


def summarize(work: Path) -> dict:
    runs, alternatives = [], []
    for path in sorted(work.glob("load_*.json")):
        report = json.loads(path.read_text())
        tag = path.stem[len("load_") :]
        buckets = [int(b) for b in report["tuning"]["buckets"].split(",") if b]
        for point in report["sweep"]:
            point["padding_share"] = padding_share(point["executed_batches"], buckets)
        runs.append({"tag": tag, **report})
    for path in sorted(work.glob("alternatives_*.json")):
        alternatives.append(json.loads(path.read_text()))
    return {"runs": runs, "alternatives": alternatives, "targets": targets(runs)}


def targets(runs) -> list:
    """One line per target of docs/serving.md, met or not, from the runs of WTConvNeXt-T ("tiny")."""
    lines = []
    for run in runs:
        if not run["tag"].endswith("_tiny"):
            continue
        runtime = run["runtime"]
        top = [p for p in run["sweep"] if p["concurrency"] == 256 and p["batch_sizes"] == [1, 2, 4, 8]]
        low = [p for p in run["sweep"] if p["concurrency"] == 16 and p["batch_sizes"] == [1, 2, 4, 8]]
        if top:
            rate, ratio = top[0]["images_per_s"], top[0]["served_over_direct"]
            goal = TARGET_IMAGES_PER_S.get(runtime)
            verdict = "met" if goal and rate >= goal else "NOT met"
            lines.append(f"{runtime}: {rate:.0f} images/s at 256 in flight (target {goal}): {verdict}")
            if ratio is not None:
                met = "met" if ratio >= TARGET_RATIO else "NOT met"
                lines.append(f"{runtime}: served / direct at the executed batches {ratio:.2f} (target 0.8): {met}")
        if low and low[0]["latency_ms"]["p99_over_p50"] is not None:
            tail = low[0]["latency_ms"]["p99_over_p50"]
            met = "met" if tail <= TARGET_TAIL else "NOT met"
            lines.append(f"{runtime}: p99 / p50 at 16 in flight {tail:.2f} (target <= 3): {met}")
    for run in runs:
        for check in run["check"]:
            bad = check["failed"] + check["lost"] + check["mismatched"]
            killed = " (backend killed mid-run)" if check.get("backend_killed") else ""
            lines.append(
                f"{run['tag']}: check {check['completed']} ok, {check['lost']} lost, {check['mismatched']} "
                f"mismatched{killed}: {'met' if bad == 0 else 'NOT met'}"
            )
    return lines


def markdown(summary: dict) -> str:
    out = ["# Serving on a GPU (tools/device_serving.sh)", ""]
    for run in summary["runs"]:
        out += [
            f"## {run['tag']}: {run['runtime']}, {run['input_dtype']} ({run.get('gpu') or run['machine']})",
            "",
            f"Execution: {run['execution']}. Tuning: {run['tuning']}.",
            "",
            "| direct batch | images/s | ms p50 | ms p99 |",
            "|---|---|---|---|",
        ]
        out += [
            f"| {d['batch']} | {d['images_per_s']} | {d['latency_ms']['p50']} | {d['latency_ms']['p99']} |"
            for d in run["direct"]
        ]
        out += [
            "",
            "| in flight | processes | sizes | images/s | p50 ms | p99 ms | x direct | mean batch | padding "
            "| queue ms | ms per execution: input / infer / output | failed |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for p in run["sweep"]:
            lat = p["latency_ms"]
            out.append(
                f"| {p['concurrency']} | {p['processes']} | {p['batch_sizes'][0]}-{p['batch_sizes'][-1]} | "
                f"{p['images_per_s']} | {lat['p50']} | {lat['p99']} | {p['served_over_direct']} | "
                f"{p['mean_executed_batch']} | {p['padding_share']} | {p['queue_ms']} | "
                f"{_parts(p.get('compute_ms_by_part'))} | {p['failed']} |"
            )
        for check in run["check"]:
            out.append(
                f"\nCheck ({check['protocol']}): {check['completed']} ok / {check['failed']} failed / {check['lost']} "
                f"lost / {check['mismatched']} mismatched of {check['requests']}"
                + (" with the backend killed mid-run" if check.get("backend_killed") else "")
            )
        for recovery in run.get("recoveries", []):
            out.append(f"Recovery: {recovery}")
        out.append("")
    for alt in summary["alternatives"]:
        out += [
            f"## Alternatives: {alt['runtime']} ({alt.get('gpu')}), direct, {Path(alt['model']).name}",
            "",
            "| variant | load s | sizes 1..max img/s | sizes 25..32 img/s | ms per bucket |",
            "|---|---|---|---|---|",
        ]
        for v in alt["variants"]:
            if "error" in v:
                out.append(f"| {v['variant']} | error: {v['error']} | | | |")
                continue
            per = ", ".join(f"{b}: {x['ms_p50']}" for b, x in v["buckets"].items())
            out.append(
                f"| {v['variant']} | {v['load_s']} | {v['sequence_sizes_1_to_max']['images_per_s']} | "
                f"{v['sequence_sizes_25_to_32']['images_per_s']} | {per} |"
            )
        out.append("")
    out += ["## Targets", ""] + [f"- {line}" for line in summary["targets"]] + [""]
    return "\n".join(out)


def table(summary: dict) -> str:
    lines = [f"{'run':28} {'in flight':>9} {'sizes':>6} {'img/s':>9} {'p50':>8} {'p99':>8} {'x direct':>8} {'pad':>5}"]
    for run in summary["runs"]:
        for p in run["sweep"]:
            lat = p["latency_ms"]
            lines.append(
                f"{run['tag']:28} {str(p['concurrency']) + 'x' + str(p['processes']):>9} "
                f"{str(p['batch_sizes'][-1]):>6} {p['images_per_s']:>9.0f} "
                f"{lat['p50'] or 0:>8.2f} {lat['p99'] or 0:>8.2f} "
                f"{p['served_over_direct'] or 0:>8.2f} {p['padding_share'] or 0:>5.2f}"
            )
    for alt in summary["alternatives"]:
        for v in alt["variants"]:
            if "error" not in v:
                full, narrow = v["sequence_sizes_1_to_max"], v["sequence_sizes_25_to_32"]
                lines.append(
                    f"direct {alt['runtime']} {v['variant']:18} sizes 1..max {full['images_per_s']:>9} "
                    f"img/s, 25..32 {narrow['images_per_s']:>9} img/s, load {v['load_s']} s"
                )
            else:
                lines.append(f"direct {alt['runtime']} {v['variant']:18} {v['error']}")
    lines += summary["targets"]
    return "\n".join(lines)


def main() -> int:
    work, out = Path(sys.argv[1]), Path(sys.argv[2])
    summary = summarize(work)
    out.mkdir(parents=True, exist_ok=True)
    (out / "serving_results.json").write_text(json.dumps(summary, indent=1))
    (out / "serving_results.md").write_text(markdown(summary))
    print(table(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
