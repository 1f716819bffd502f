#!/usr/bin/env python3
"""The results of tools/device_serving.sh in one JSON document and one markdown file, and a short table printed.

    python -m benchmarks.serving_summary WORK_DIR OUT_DIR [--before RESULTS.json]

Reads WORK_DIR/load_<runtime>_<model>[_<variant>][_round<k>].json (``wtconv-trt serve --load-test --json``; the
variant: shm-<mode> for a client on shared memory, gpus<list> for instances on the GPUs named; round 2, 3, ... of the
same run), WORK_DIR/soak_<runtime>_<model>.json (``serve --soak --json``) and WORK_DIR/alternatives_<runtime>.json
(benchmarks/serving_alternatives.py); writes OUT_DIR/serving_results.json and OUT_DIR/serving_results.md. For every
sweep point it adds the padding the buckets cost on the batches Triton executed (images computed but dropped, as a
share of all computed), under the plan of the bucket times the server's first instance logged at load
(WORK_DIR/logs/server_<tag>.log; wtconv_serving.runners.bucket_plan: a batch padded up to one bucket or split), or
padded up to one bucket where none was logged; and checks the targets of docs/serving.md on the median of the
rounds of each run, saying their spread and which client mode each figure is of. A round is a run of its own
(``_round<k>``) or a point the sweep came back to in the same run (``--sweep 16,256,16,256``: rounds that share one
server start). A run on ``--gpus`` is compared with the same run on the default placement. ``--before``: an earlier
serving_results.json (docs/bench/serving_gpu_*.json), whose split of an execution (Triton's input / infer /
output) is set beside this one's.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
from pathlib import Path

from wtconv_serving.runners.bucket_plan import BucketPlan
from wtconv_serving.traffic.soak import (
    growth_by_process_words,
    kill_errors_end_words,
    other_errors_split,
    recovery_words,
)
from wtconv_serving.traffic.sweep import images_executed

# docs/serving.md, "Targets": WTConvNeXt-T fp16, requests of 1-8 images at 256 in flight (the median of the rounds),
# requests of 1-64 at least TARGET_BIG of that, served over direct, p99 over p50 at 16 in flight; the soak.
TARGET_IMAGES_PER_S = {"onnxruntime": 7500, "torch-cuda": 7500}
TARGET_BIG = 0.9
TARGET_RATIO = 0.8
TARGET_TAIL = 2.5
TARGET_MEMORY_GROWTH = 0.02
AGREE = 0.1  # --gpus on one GPU and the default placement agree when their rates differ by at most this share
SMALL, BIG = [1, 2, 4, 8], 64  # the request sizes of the targets: 1-8, and a mix up to 64


def _parts(by_part) -> str:
    """Triton's compute time of one execution by part, "input / infer / output" in ms."""
    if not by_part:
        return "-"
    return " / ".join(f"{by_part[part]:.2f}" for part in ("input", "infer", "output"))


LOGGED_TIMES = re.compile(r"bucket times ms \{([^}]*)\}")  # python_model's line of an instance's BucketPlan


def logged_bucket_times(log: Path) -> dict | None:
    """The bucket times (s) the server's first instance logged at load, or None (no log, or no line: a run before
    batches were split, or a runtime without buckets)."""
    found = LOGGED_TIMES.search(log.read_text(errors="replace")) if log.is_file() else None
    if not found:
        return None
    pairs = (pair.split(":") for pair in found.group(1).split(","))
    return {int(bucket): float(ms) * 1e-3 for bucket, ms in pairs}


def padding_share(executed: dict, plan: BucketPlan) -> float | None:
    """Images computed but dropped over all images computed, the batches run as ``plan`` says (without measured
    times: each padded up to one bucket)."""
    if not executed or not plan.buckets:
        return None
    real = images_executed(executed)
    computed = sum(sum(plan.buckets_for(int(b))) * n for b, n in executed.items())
    return round(1 - real / computed, 3) if computed else None


def summarize(work: Path, before: Path | None = None) -> dict:
    """The reports in ``work`` and the targets' lines (with ``before``, an earlier serving_results.json, the split of
    an execution set beside its own)."""
    runs, alternatives, soaks = [], [], []
    for path in sorted(work.glob("load_*.json")):
        report = json.loads(path.read_text())
        tag = path.stem[len("load_") :]
        buckets = [int(b) for b in report["tuning"]["buckets"].split(",") if b]
        seconds = logged_bucket_times(work / "logs" / f"server_{tag}.log")
        report["bucket_times_logged"] = seconds is not None
        plan = BucketPlan(buckets, seconds)
        for point in report["sweep"]:
            point["padding_share"] = padding_share(point["executed_batches"], plan)
        runs.append({"tag": tag, **report})
    for path in sorted(work.glob("soak_*.json")):
        soaks.append({"tag": path.stem[len("soak_") :], **json.loads(path.read_text())})
    for path in sorted(work.glob("alternatives_*.json")):
        alternatives.append(json.loads(path.read_text()))
    lines = targets(runs, soaks) + placement_lines(runs)
    if before is not None:
        lines += split_lines(runs, json.loads(before.read_text()).get("runs", []), before.name)
    return {"runs": runs, "soaks": soaks, "alternatives": alternatives, "targets": lines}


def rounds_of(runs) -> dict:
    """{the run's tag without its round: [its rounds' reports]}."""
    groups: dict = {}
    for run in runs:
        groups.setdefault(re.sub(r"_round\d+$", "", run["tag"]), []).append(run)
    return groups


def sweep_points(run, concurrency: int, largest: int | None = None) -> list:
    """The sweep points at ``concurrency`` in flight with requests of 1-8 images (``largest`` None) or of up to
    ``largest``, one per round of the sweep; not the busiest point again with an extra client process."""
    processes = run["sweep"][0]["processes"] if run["sweep"] else None
    found = []
    for p in run["sweep"]:
        small = p["batch_sizes"] == SMALL
        if p["concurrency"] == concurrency and (small if largest is None else p["batch_sizes"][-1] == largest):
            if p["processes"] == processes:
                found.append(p)
    return found


def _over(rounds, concurrency: int, largest: int | None = None) -> list:
    """sweep_points over every run of ``rounds``, in order."""
    return [p for run in rounds for p in sweep_points(run, concurrency, largest)]


def executed_rate(point) -> float | None:
    """A sweep point's rate from Triton's statistics, the figure the targets are judged on: the images of the batches
    the server executed in the point's window, per second (``executed_images_per_s``; for results written before that
    key, from ``executed_batches`` and the window). None without them (or without the point)."""
    if not point:
        return None
    rate = point.get("executed_images_per_s")
    if rate is None and point.get("executed_batches") and point.get("window_s"):
        rate = images_executed(point["executed_batches"]) / point["window_s"]
    return rate


def _rate(point) -> float | None:
    """executed_rate, else (no statistics) the clients' count of the answers in the window."""
    if not point:
        return None
    executed = executed_rate(point)
    return point["images_per_s"] if executed is None else executed


def _over_rounds(values) -> tuple[float, str] | None:
    """(median, "spread lo-hi over n rounds") of the values found, or None."""
    values = [v for v in values if v is not None]
    if not values:
        return None
    return statistics.median(values), f"{min(values):.4g}-{max(values):.4g} over {len(values)} round(s)"


def _split(points) -> dict:
    """The median over ``points`` of Triton's ms per execution, by part, and of the mean executed batch."""
    found = [p for p in points if p.get("compute_ms_by_part")]
    if not found:
        return {}
    split = {
        part: statistics.median(p["compute_ms_by_part"][part] for p in found) for part in ("input", "infer", "output")
    }
    batches = [p["mean_executed_batch"] for p in found if p.get("mean_executed_batch")]
    return {**split, "mean_batch": statistics.median(batches) if batches else None, "rounds": len(found)}


def client_mode(run: dict) -> str:
    """How a run's clients sent: their shared memory, and their gRPC connections where each had its own."""
    own = ", a connection per request in flight" if run.get("connections") == "client" else ""
    return f"{run.get('shared_memory', 'none')} shared memory{own}"


def split_lines(runs, before_runs, source: str) -> list:
    """Per runtime of WTConvNeXt-T: Triton's split of an execution at 256 in flight, requests of 1-8, in the runs of
    ``before_runs`` (an earlier summary's, from ``source``) beside this summary's, per client mode."""
    lines = []
    for base, rounds in rounds_of(runs).items():
        runtime, model, *variant = base.split("_")
        before = [r for r in before_runs if r["tag"] == f"{runtime}_{model}"]
        now, then = _split(_over(rounds, 256)), _split(_over(before, 256))
        if model != "tiny" or not now or not then:
            continue

        def said(split):
            return " / ".join(f"{split[part]:.2f}" for part in ("input", "infer", "output")) + (
                f" ms (mean batch {split['mean_batch']:.1f})" if split["mean_batch"] else " ms"
            )

        lines.append(
            f"{runtime} (client: {client_mode(rounds[0])}"
            f"{''.join(', ' + v for v in variant)}): Triton's input / infer / output of an execution at 256 in "
            f"flight, requests of 1-8: {said(now)}, median of {now['rounds']} round(s); before: {said(then)} ({source})"
        )
    return lines


def placement_lines(runs) -> list:
    """Each run on ``--gpus`` against the same runtime, model and client mode on the default placement: the rate at
    256 in flight, requests of 1-8, agreeing within AGREE (the spread of windows of a few seconds)."""
    lines = []
    groups = rounds_of(runs)
    for base, rounds in groups.items():
        named = re.search(r"_gpus([\d-]+)$", base)
        default = groups.get(base[: named.start()]) if named else None
        if not default:
            continue
        rate = _over_rounds([_rate(p) for p in _over(rounds, 256)])
        reference = _over_rounds([_rate(p) for p in _over(default, 256)])
        if rate is None or reference is None:
            continue
        ratio = rate[0] / reference[0] if reference[0] else 0.0
        verdict = "agree" if abs(ratio - 1) <= AGREE else "DISAGREE"
        lines.append(
            f"{base}: --gpus {named.group(1).replace('-', ',')} {rate[0]:.0f} images/s at 256 in flight, requests of "
            f"1-8 ({rate[1]}), the default placement {reference[0]:.0f} ({reference[1]}): {ratio:.2f}x, {verdict} "
            f"(within {AGREE:.0%})"
        )
    return lines


def targets(runs, soaks=()) -> list:
    """One line per target of docs/serving.md, met or not: the runs of WTConvNeXt-T ("tiny") per runtime and client
    mode, the median of their rounds; every run's check; every soak."""
    lines = []
    for base, rounds in rounds_of(runs).items():
        runtime, model, *variant = base.split("_")
        if model != "tiny":
            continue
        label = f"{runtime} (client: {client_mode(rounds[0])}{''.join(', ' + v for v in variant)})"
        points = _over(rounds, 256)
        window = min((p["window_s"] for p in points if p), default=None)
        rate = _over_rounds([_rate(p) for p in points])
        if rate is not None:
            goal = TARGET_IMAGES_PER_S.get(runtime)
            verdict = "met" if goal and rate[0] >= goal else "NOT met"
            clients = _over_rounds([p and p["images_per_s"] for p in points])
            counted = (
                f"; Triton's statistics, the clients counted {clients[0]:.0f}"
                if any(executed_rate(p) is not None for p in points)
                else "; the clients' count"
            )
            lines.append(
                f"{label}: {rate[0]:.0f} images/s at 256 in flight, requests of 1-8 ({rate[1]}, windows of "
                f"{window:g} s{counted}; target {goal}): {verdict}"
            )
            big = _over_rounds(
                [
                    _rate(b) / _rate(p) if _rate(p) else None
                    for run in rounds
                    for b, p in zip(sweep_points(run, 256, BIG), sweep_points(run, 256), strict=False)  # round by round
                ]
            )
            if big is not None:
                met = "met" if big[0] >= TARGET_BIG else "NOT met"
                lines.append(
                    f"{label}: requests of 1-64 at {big[0]:.2f}x the rate of requests of 1-8 ({big[1]}; target "
                    f">= {TARGET_BIG}): {met}"
                )
            ratio = _over_rounds([p and p["served_over_direct"] for p in points])
            if ratio is not None:
                met = "met" if ratio[0] >= TARGET_RATIO else "NOT met"
                lines.append(f"{label}: served / direct at the executed batches {ratio[0]:.2f} (target 0.8): {met}")
        tail = _over_rounds([p["latency_ms"]["p99_over_p50"] for p in _over(rounds, 16)])
        if tail is not None:
            met = "met" if tail[0] <= TARGET_TAIL else "NOT met"
            lines.append(
                f"{label}: p99 / p50 at 16 in flight {tail[0]:.2f} ({tail[1]}; target <= {TARGET_TAIL}): {met}"
            )
    for run in runs:
        for check in run["check"]:
            bad = check["failed"] + check["lost"] + check["mismatched"]
            killed = " (backend killed mid-run)" if check.get("backend_killed") else ""
            lines.append(
                f"{run['tag']}: check {check['completed']} ok, {check['lost']} lost, {check['mismatched']} "
                f"mismatched{killed}: {'met' if bad == 0 else 'NOT met'}"
            )
    for soak in soaks:
        s = soak.get("soak")
        if not s:
            continue
        growth = s["memory_growth"]
        grown = ", ".join(f"{k} {v:+.2%}" for k, v in growth.items() if v is not None) or "not sampled"
        memory_ok = all(v is None or v <= TARGET_MEMORY_GROWTH for v in growth.values())
        # what fails it, named: the verdict ends the line after the memory, but covers every count before it too
        counts = ("lost", "mismatched", "failed", "other_errors")
        short = [f"{s[key]} {key.replace('_', ' ')}" for key in counts if s[key]]
        short += [] if memory_ok else [f"memory growth above {TARGET_MEMORY_GROWTH:.0%}"]
        lines.append(
            f"{soak['tag']}: soak of {s['duration_s']:g} s at {s['concurrency']} in flight: {s['completed']} ok, "
            f"{s['lost']} lost, {s['mismatched']} mismatched, {s['other_errors']} other errors{other_errors_split(s)} "
            f"({s['errors_of_the_killed_backend']} of the killed backend, retried{kill_errors_end_words(s)})"
            f"{recovery_words(s)}; "
            f"memory growth from {s['memory_settle_s']:g} s: {grown} (target <= {TARGET_MEMORY_GROWTH:.0%}): "
            f"{'NOT met (' + ', '.join(short) + ')' if short else 'met'}{growth_by_process_words(s)}"
        )
    return lines


def markdown(summary: dict) -> str:
    out = ["# Serving on a GPU (tools/device_serving.sh)", ""]
    for run in summary["runs"]:
        out += [
            f"## {run['tag']}: {run['runtime']}, {run['input_dtype']} ({run.get('gpu') or run['machine']})",
            "",
            f"Execution: {run['execution']}. Tuning: {run['tuning']}. Client: {client_mode(run)}. "
            f"MPS: {run.get('mps') or 'none'}.",
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
    for soak in summary.get("soaks", []):
        s = soak.get("soak") or {}
        if not s:
            continue
        out += [
            f"## Soak {soak['tag']}: {soak['runtime']} ({soak.get('gpu') or soak['machine']}), {s['duration_s']:g} s",
            "",
            f"{s['requests']} requests of {s['batch_sizes']} images from {s['concurrency']} clients: {s['completed']} "
            f"ok, {s['failed']} failed, {s['lost']} lost, {s['mismatched']} mismatched, {s['retried']} retries; "
            f"backend killed at {s['backend_killed_at_s']} s, back at {s['backend_back_at_s']} s; "
            f"{s['errors_of_the_killed_backend']} errors of its requests, {s['other_errors']} others"
            f"{other_errors_split(s)}{recovery_words(s)}. MPS: {soak.get('mps') or 'none'}.",
            "",
            "| s | host RSS MiB (server and stubs) | host PSS MiB (shared regions once) | of it the server | the "
            "server's allocated (anon) | the server's shared regions (shmem) | of it the stubs | client connections | "
            "GPU memory MiB |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        out += [
            f"| {m['t_s']} | {m['host_rss_mib']} | {m.get('host_pss_mib', '–')} | {m.get('server_rss_mib', '–')} | "
            f"{m.get('server_anon_mib', '–')} | "
            f"{m.get('server_shmem_mib', '–')} | {m.get('stubs_rss_mib', '–')} | {m.get('server_connections', '–')} | "
            f"{m['gpu_memory_mib']} |"
            for m in s["memory_samples"]
        ]
        out += ["", f"Memory growth from {s['memory_settle_s']:g} s: {s['memory_growth']}.", ""]
        if s.get("first_other_errors"):
            out += ["The first errors not of the killed backend (s on the soak's clock):", ""]
            out += [f"- {e['t_s']} s: {e['error']}" for e in s["first_other_errors"]]
            out += ["", "By kind: " + "; ".join(f"{n} x {kind}" for kind, n in s["other_error_kinds"].items()), ""]
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
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("work", type=Path, help="the device script's work folder (load_*.json, soak_*.json)")
    parser.add_argument("out", type=Path, help="where serving_results.{json,md} go")
    parser.add_argument("--before", type=Path, help="an earlier serving_results.json to compare the split with")
    args = parser.parse_args()
    work, out = args.work, args.out
    summary = summarize(work, args.before)
    out.mkdir(parents=True, exist_ok=True)
    (out / "serving_results.json").write_text(json.dumps(summary, indent=1))
    (out / "serving_results.md").write_text(markdown(summary))
    print(table(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
