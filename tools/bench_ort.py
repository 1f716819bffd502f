#!/usr/bin/env python3
"""Benchmark of WTConvNeXt-T in ONNX Runtime with the native WTConv2d op (libwtconv_ort.so), beside the standard-op
export and the references, on the CPU or on the GPU (onnxruntime-gpu's CUDA execution provider).

    python tools/bench_ort.py --device cpu --out docs/bench                 # B=1 224^2, fp32
    python tools/bench_ort.py --device cuda --out $OUT                      # fp16 and fp32, B=1 and B=64

Models (WTConvNeXt-T with random weights, seed 0, 224x224, exported in this process with dynamic batch):
  plugin      the plugin export (one wtconv::WTConv2d node per layer) on libwtconv_ort.so
  rest        the plugin export with every WTConv2d node replaced by Identity: not a network, a probe of the time
              of everything but the WTConv2d layers (plugin - rest = the layers' share)
  standard    the standard-op export (`--ops standard`: the layers as Conv / ConvTranspose / Pad / Slice ...)
  python-op   CPU only: the plugin export on the onnxruntime-extensions Python op (the old fallback; few runs)
  eager       CPU only: PyTorch eager, the published WTConv2d layers (torch.no_grad)
  convnext    CUDA only: timm's ConvNeXt-T, exported to ONNX here (TorchScript exporter)
Every ONNX model runs in the same execution provider with the same options, in one process. On the GPU the input
and the output are bound in device memory (I/O binding), so no host copy is timed.

Method: after warm-up runs of each, the models take turns, one run each per round, for `--runs` rounds; the median
(and the 10th / 90th percentiles) of each model's wall-clock times is reported. Taking turns spreads any drift of a
shared machine over all models alike; PyTorch eager is timed after them, in its own phase, so that ONNX Runtime's
spinning pool threads do not compete with it. With --profile (CPU), a separate session per ONNX model records ONNX
Runtime's profile: where the time goes, per operator type (on the GPU the profile times launches, not kernels:
"rest" is the measurement there).

Writes OUT/bench_ort_<device>.json (every number, the machine, the versions and the command) and
OUT/bench_ort_<device>.md (tables and the targets); prints a short table last.
"""

from __future__ import annotations

import argparse
import collections
import datetime
import functools
import json
import os
import platform
import shlex
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ARCH = "wtconvnext_tiny"
SHAPE = (3, 224, 224)


def log(message: str) -> None:
    print(f"[bench_ort {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def export_models(folder: Path, precisions, device: str, models, reuse: bool = False) -> dict:
    """{(model, precision): path}: the WTConvNeXt-T exports and, for CUDA, timm's ConvNeXt-T. `reuse`: keep files
    already in `folder` from an earlier run of this script (so a timing can start at once)."""
    import torch

    from wtconv_export.onnx_export import export_onnx
    from wtconv_export.onnx_models import build_model

    model, description = build_model(ARCH, random_weights=True, seed=0)
    paths = {}
    for precision in precisions:
        for ops in ("plugin", "standard"):
            if ops not in models and not (ops == "plugin" and {"python-op", "rest"} & set(models)):
                continue
            path = folder / f"{ARCH}_{ops}_{precision}.onnx"
            if not (reuse and path.is_file()):
                log(f"exporting {path.name}")
                export_onnx(model, path, ops=ops, precision=precision, input_shape=(1, *SHAPE), metadata=description)
            paths[(ops, precision)] = path
        if "rest" in models:
            rest = folder / paths[("plugin", precision)].name.replace("plugin", "rest")
            paths[("rest", precision)] = (
                rest if reuse and rest.is_file() else without_wtconv(paths[("plugin", precision)], folder)
            )
    if "convnext" in models and device == "cuda":
        try:
            import timm
        except ImportError as error:
            log(f"ConvNeXt-T left out: timm is not importable ({error})")
            return paths
        for precision in precisions:
            dtype = torch.float16 if precision == "fp16" else torch.float32
            net = timm.create_model("convnext_tiny", pretrained=False).eval().to("cuda", dtype)
            path = folder / f"convnext_tiny_{precision}.onnx"
            x = torch.randn((1, *SHAPE), device="cuda", dtype=dtype)
            for dynamo in (False, True):  # the TorchScript exporter where this torch still has it
                log(f"exporting {path.name} (timm, {'dynamo' if dynamo else 'TorchScript'} exporter)")
                try:
                    torch.onnx.export(
                        net,
                        (x,),
                        str(path),
                        input_names=["input"],
                        output_names=["output"],
                        dynamic_axes={"input": {0: "batch"}, "output": {0: "batch"}},
                        opset_version=18,
                        dynamo=dynamo,
                    )
                    paths[("convnext", precision)] = path
                    break
                except Exception as error:  # noqa: BLE001 -- try the other exporter, then leave the model out
                    log(f"{path.name}: export failed ({type(error).__name__}: {error})")
    return paths


def without_wtconv(path: Path, folder: Path) -> Path:
    """The model at `path` with each WTConv2d node replaced by Identity (WTConvNeXt-T's layers keep their shape)."""
    import onnx

    from wtconv_export import contract

    proto = onnx.load(str(path))
    for i, node in enumerate(proto.graph.node):
        if node.op_type == contract.OP_TYPE and node.domain == contract.ONNX_DOMAIN:
            if any(a.name == contract.FIELD_STRIDE and a.i != 1 for a in node.attribute):
                raise ValueError(f"{path.name}: a strided WTConv2d node cannot become Identity")
            proto.graph.node[i].CopyFrom(onnx.helper.make_node("Identity", node.input, node.output, name=node.name))
    out = folder / path.name.replace("plugin", "rest")
    onnx.save(proto, str(out))
    return out


def providers_for(device: str, tf32: str):
    if device == "cpu":
        return ["CPUExecutionProvider"]
    options = {"device_id": "0", "cudnn_conv_algo_search": "EXHAUSTIVE"}
    if tf32 != "default":
        options["use_tf32"] = "1" if tf32 == "on" else "0"
    return [("CUDAExecutionProvider", options), "CPUExecutionProvider"]


class OrtRunner:
    """One ONNX model in one session; on CUDA its input and output live on the GPU (I/O binding)."""

    def __init__(self, path, device, providers, library, x, op, profile_prefix=None):
        import onnxruntime as ort

        from wtconv_ort.session import make_ort_session

        options = ort.SessionOptions()
        if profile_prefix:
            options.enable_profiling = True
            options.profile_file_prefix = profile_prefix
        self.session = make_ort_session(path, providers, options, op=op, library=library)
        self.input = self.session.get_inputs()[0].name
        self.output = self.session.get_outputs()[0].name
        self.device = device
        if device == "cuda":
            self.binding = self.session.io_binding()
            self.binding.bind_ortvalue_input(self.input, ort.OrtValue.ortvalue_from_numpy(x, "cuda", 0))
            self.binding.bind_output(self.output, "cuda")
        self.x = x

    def __call__(self):
        if self.device == "cuda":
            self.session.run_with_iobinding(self.binding)
            self.binding.synchronize_outputs()
        else:
            self.session.run([self.output], {self.input: self.x})

    def output_value(self):
        if self.device == "cuda":
            return self.binding.copy_outputs_to_cpu()[0]
        return self.session.run([self.output], {self.input: self.x})[0]


class EagerRunner:
    """PyTorch eager, the published layers, fp32 on the CPU."""

    def __init__(self, x, threads):
        import torch

        from wtconv_export.onnx_models import build_model

        torch.set_num_threads(threads)
        self.torch = torch
        self.model, _ = build_model(ARCH, random_weights=True, seed=0)
        self.x = torch.from_numpy(x)

    def __call__(self):
        with self.torch.no_grad():
            self.model(self.x)


def time_rounds(runners: dict, warmup: int, runs: dict) -> dict:
    """{name: [seconds]}; warm-up runs of each, then rounds in which every runner runs once while it has runs left."""
    if not runners:
        return {}
    for name, run in runners.items():
        log(f"warm-up {name}")
        for _ in range(warmup):
            run()
    times = {name: [] for name in runners}
    for _ in range(max(runs.values())):
        for name, run in runners.items():
            if len(times[name]) < runs[name]:
                start = time.perf_counter()
                run()
                times[name].append(time.perf_counter() - start)
    return times


def summarise(name, precision, batch, seconds) -> dict:
    ms = sorted(t * 1e3 for t in seconds)
    median = statistics.median(ms)
    return {
        "model": name,
        "precision": precision,
        "batch": batch,
        "runs": len(ms),
        "ms_median": round(median, 4),
        "ms_p10": round(ms[int(0.1 * (len(ms) - 1))], 4),
        "ms_p90": round(ms[int(0.9 * (len(ms) - 1))], 4),
        "img_per_s": round(batch * 1e3 / median, 1),
    }


def profile_breakdowns(runners: dict, runs: int) -> dict:
    """ONNX Runtime's profiles of `runs` runs of each runner after one warm-up, the runners taking turns (so a busy
    spell of the machine falls on all alike): {name: {operator type: [ms per run, % of the run]}}, each figure the
    median over the runs (one slow run does not skew it); "(model_run)" is the run itself."""
    for run in runners.values():
        run()
    for _ in range(runs):
        for run in runners.values():
            run()
    out = {}
    for name, runner in runners.items():
        with open(runner.session.end_profiling()) as f:
            events = json.load(f)
        model_runs = sorted((e for e in events if e.get("name") == "model_run"), key=lambda e: e["ts"])[-runs:]
        per_run = [collections.Counter() for _ in model_runs]
        for e in events:
            if e.get("cat") != "Node" or not e.get("name", "").endswith("_kernel_time"):
                continue
            for i, r in enumerate(model_runs):
                if r["ts"] <= e["ts"] <= r["ts"] + r["dur"]:
                    per_run[i][e["args"]["op_name"]] += e["dur"] / 1e3
                    break
        total = statistics.median(r["dur"] / 1e3 for r in model_runs)
        ops = {op: statistics.median(c[op] for c in per_run) for op in set().union(*per_run)}
        out[name] = {
            op: [round(ms, 3), round(100 * ms / total, 1)] for op, ms in sorted(ops.items(), key=lambda x: -x[1])
        }
        out[name]["(model_run)"] = [round(total, 3), 100.0]
    return out


REPOSITORY = Path(__file__).resolve().parent.parent


def portable(arg) -> str:
    """An argument as the committed results show it: paths inside the repository relative to its root, any other
    absolute path by its last component (the results travel; the machine's folders do not)."""
    text = str(arg)
    if not text.startswith("/"):
        return text
    path = Path(text)
    try:
        return str(path.resolve().relative_to(REPOSITORY))
    except ValueError:
        return path.name


def machine(device: str, library) -> dict:
    import onnxruntime as ort

    from wtconv_libs import lookup

    info = {
        "date": datetime.date.today().isoformat(),
        "command": "python " + " ".join(shlex.quote(portable(a)) for a in sys.argv),
        "python": platform.python_version(),
        "onnxruntime": ort.__version__,
        "providers": ort.get_available_providers(),
        "cpu": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
        # Other processes on a shared machine slow every model: the load before and after the timing is recorded.
        "load_average_1min": round(os.getloadavg()[0], 2),
        "library": portable(library) if library else None,
        "library_info": lookup.ort_library_info(library) if library else {},
    }
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                info["cpu"] = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        import torch

        info["torch"] = torch.__version__
        if device == "cuda" and torch.cuda.is_available():
            info["gpu"] = torch.cuda.get_device_name()
    except ImportError:
        pass
    return info


def find_row(rows: list[dict], model: str, precision: str, batch: int) -> dict | None:
    """The summarised row of (model, precision, batch), or None when that model was not timed."""
    return next((r for r in rows if (r["model"], r["precision"], r["batch"]) == (model, precision, batch)), None)


def evaluate_targets(device: str, rows: list[dict]) -> list[tuple[str, str, bool | None]]:
    """(target, measured value, met) for each target whose models were timed: CPU, plugin against the standard-op
    export and PyTorch eager at B=1; CUDA, plugin against the standard-op export and ConvNeXt-T (fp16)."""
    find = functools.partial(find_row, rows)
    out = []
    if device == "cpu":
        plugin, standard, eager = find("plugin", "fp32", 1), find("standard", "fp32", 1), find("eager", "fp32", 1)
        if plugin and standard:
            ratio = plugin["ms_median"] / standard["ms_median"]
            out.append(("plugin <= 0.5x standard-op export (B=1)", f"{ratio:.2f}x", ratio <= 0.5))
        if plugin and eager:
            ratio = plugin["ms_median"] / eager["ms_median"]
            out.append(("plugin faster than PyTorch eager (B=1)", f"{ratio:.2f}x eager's time", ratio < 1.0))
        return out
    plugin, standard, convnext = find("plugin", "fp16", 64), find("standard", "fp16", 64), find("convnext", "fp16", 64)
    if plugin and standard:
        ratio = plugin["img_per_s"] / standard["img_per_s"]
        out.append(("plugin >= 3.5x standard-op export (fp16, B=64, img/s)", f"{ratio:.2f}x", ratio >= 3.5))
    if plugin and convnext:
        ratio = plugin["img_per_s"] / convnext["img_per_s"]
        out.append(("plugin >= ConvNeXt-T ONNX (fp16, B=64, img/s)", f"{ratio:.2f}x", ratio >= 1.0))
    plugin1, convnext1 = find("plugin", "fp16", 1), find("convnext", "fp16", 1)
    if plugin1 and convnext1:
        ratio = plugin1["ms_median"] / convnext1["ms_median"]
        out.append(("plugin B=1 latency <= ConvNeXt-T's (fp16)", f"{ratio:.2f}x ConvNeXt-T's time", ratio <= 1.0))
    return out


def layer_shares(rows: list[dict]) -> list[str]:
    """For each (precision, batch): the WTConv2d layers' time (plugin - rest) beside the rest of the network."""
    out = []
    for r in rows:
        if r["model"] != "plugin":
            continue
        rest = find_row(rows, "rest", r["precision"], r["batch"])
        if rest:
            layers = r["ms_median"] - rest["ms_median"]
            out.append(
                f"{r['precision']} B={r['batch']}: the 18 WTConv2d layers {layers:.2f} ms of the plugin export's "
                f"{r['ms_median']:.2f} ms; everything else {rest['ms_median']:.2f} ms"
            )
    return out


def markdown(result: dict) -> str:
    meta = result["meta"]
    where = meta.get("gpu") or meta["cpu"]
    lines = [
        f"# WTConvNeXt-T in ONNX Runtime — {result['device'].upper()} ({where})",
        "",
        f"- {meta['date']}; ONNX Runtime {meta['onnxruntime']}, Python {meta['python']}, "
        f"torch {meta.get('torch', '-')}; {meta['cpu_count']} CPU threads visible (load average "
        f"{meta['load_average_1min_before']} before, {meta['load_average_1min']} after); "
        f"provider options: {result['provider_options']}",
        f"- library: {meta['library_info']} ",
        f"- command (repository root): `{meta['command']}`",
        f"- method: {result['method']}",
        "",
        "| model | precision | batch | median ms | p10 ms | p90 ms | img/s | runs |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in result["rows"]:
        lines.append(
            f"| {r['model']} | {r['precision']} | {r['batch']} | {r['ms_median']:.2f} | {r['ms_p10']:.2f} | "
            f"{r['ms_p90']:.2f} | {r['img_per_s']:.1f} | {r['runs']} |"
        )
    lines += ["", "## Targets", "", "| target | result | met |", "|---|---|---|"]
    for what, value, met in result["targets"]:
        lines.append(f"| {what} | {value} | {'yes' if met else '**no**'} |")
    shares = layer_shares(result["rows"])
    if shares:
        lines += ["", "## Where the time goes: the WTConv2d layers against the rest (plugin - rest)", ""]
        lines += [f"- {s}" for s in shares]
    for key, breakdown in result.get("profiles", {}).items():
        lines += ["", f"## Where the time goes: {key} (ONNX Runtime profile, by operator type)", ""]
        lines += ["| operator | ms per run | % of the run |", "|---|---|---|"]
        lines += [f"| {op} | {ms:.2f} | {share:.1f} |" for op, (ms, share) in breakdown.items()]
    return "\n".join(lines) + "\n"


MODELS = ("plugin", "rest", "standard", "python-op", "eager", "convnext")


def at_least(minimum: int):
    """An argparse type: an integer >= ``minimum`` (a count below it would end in a traceback after the exports)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = None
        if value is None or value < minimum:
            raise argparse.ArgumentTypeError(f"expected an integer >= {minimum}, got {text!r}")
        return value

    return parse


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", choices=("cpu", "cuda"), required=True)
    parser.add_argument("--out", type=Path, required=True, help="folder for bench_ort_<device>.{json,md}")
    parser.add_argument("--library", type=Path, help="libwtconv_ort.so (default: wtconv_libs.lookup lookup)")
    parser.add_argument("--batches", type=at_least(1), nargs="+", help="default: 1 (cpu), 1 64 (cuda)")
    parser.add_argument("--precisions", nargs="+", choices=("fp32", "fp16"), help="default: fp32 (cpu), fp16 fp32")
    parser.add_argument(
        "--models",
        nargs="+",
        choices=MODELS,
        help="default: plugin standard rest python-op eager (cpu), plugin standard rest convnext",
    )
    parser.add_argument(
        "--runs", type=at_least(0), default=0, help="timed runs per model (default 30 on cpu, 200 on cuda)"
    )
    parser.add_argument("--warmup", type=at_least(0), default=5)
    parser.add_argument(
        "--threads", type=at_least(0), default=0, help="CPU: intra-op / torch threads (default: all cores)"
    )
    parser.add_argument("--tf32", choices=("default", "on", "off"), default="default", help="CUDA EP use_tf32")
    parser.add_argument("--profile", action="store_true", help="CPU: add ONNX Runtime's per-operator profile")
    parser.add_argument("--onnx-dir", type=Path, help="keep the exported models here (default: a temporary folder)")
    parser.add_argument("--reuse-onnx", action="store_true", help="with --onnx-dir: use the models already there")
    args = parser.parse_args(argv)

    import onnxruntime as ort

    from wtconv_ort.session import resolve_wtconv_op

    device = args.device
    if device == "cuda" and "CUDAExecutionProvider" not in ort.get_available_providers():
        print(f"bench_ort: onnxruntime {ort.__version__} has no CUDAExecutionProvider (install onnxruntime-gpu)")
        return 2
    batches = args.batches or ([1] if device == "cpu" else [1, 64])
    precisions = args.precisions or (["fp32"] if device == "cpu" else ["fp16", "fp32"])
    models = args.models or (
        ["plugin", "standard", "rest", "python-op", "eager"]
        if device == "cpu"
        else ["plugin", "standard", "rest", "convnext"]
    )
    runs = args.runs or (30 if device == "cpu" else 200)
    threads = args.threads or (os.cpu_count() or 1)
    _, library = resolve_wtconv_op("native", args.library) if "plugin" in models else (None, None)
    providers = providers_for(device, args.tf32)
    args.out.mkdir(parents=True, exist_ok=True)

    def ort_runner(name, key, x, profile_prefix=None):
        # "plugin" on the native op; the others on the Python op ("python-op") or with no WTConv2d node at all.
        op = "native" if name == "plugin" else "python"
        return OrtRunner(paths[key], device, providers, library, x, op, profile_prefix=profile_prefix)

    with tempfile.TemporaryDirectory() as tmp:
        folder = args.onnx_dir or Path(tmp)
        folder.mkdir(parents=True, exist_ok=True)
        paths = export_models(folder, precisions, device, models, reuse=args.reuse_onnx and args.onnx_dir is not None)
        rows, profiles = [], {}
        load_before = round(os.getloadavg()[0], 2)
        for precision in precisions:
            for batch in batches:
                x = np.random.default_rng(0).standard_normal((batch, *SHAPE)).astype(np.float32)
                xp = x.astype(np.float16) if precision == "fp16" else x
                runners, counts = {}, {}
                for name in models:
                    if name == "eager":
                        if precision == "fp32":
                            runners[name], counts[name] = EagerRunner(x, threads), runs
                        continue
                    key = ("plugin", precision) if name == "python-op" else (name, precision)
                    if key not in paths:
                        continue
                    runners[name] = ort_runner(name, key, xp)
                    counts[name] = 3 if name == "python-op" else runs
                eager = {n: runners.pop(n) for n in list(runners) if n == "eager"}
                log(f"timing {precision} B={batch}: {', '.join(runners)}")
                times = time_rounds(runners, args.warmup, counts)
                if eager:
                    time.sleep(2.0)  # ONNX Runtime's intra-op threads stop spinning and sleep
                    log("timing PyTorch eager")
                    times.update(time_rounds(eager, args.warmup, counts))
                    runners.update(eager)
                rows += [summarise(name, precision, batch, times[name]) for name in runners]
                if args.profile and device == "cpu":
                    profiled = {
                        name: ort_runner(
                            name, (name, precision), xp, str(Path(tmp) / f"profile_{name}_{precision}_b{batch}")
                        )
                        for name in ("plugin", "standard")
                        if name in runners
                    }
                    for name, breakdown in profile_breakdowns(profiled, 10).items():
                        profiles[f"{name} {precision} B={batch}"] = breakdown
                del runners
    result = {
        "device": device,
        "meta": {**machine(device, library), "load_average_1min_before": load_before},
        "provider_options": providers[0][1] if device == "cuda" else "CPUExecutionProvider, default options",
        "method": (
            f"{args.warmup} warm-up runs each, then {runs} rounds taking turns (python-op: 3); median wall time "
            "per run; "
            + ("input and output bound on the GPU (I/O binding)" if device == "cuda" else f"{threads} threads")
        ),
        "rows": rows,
        "profiles": profiles,
    }
    result["targets"] = evaluate_targets(device, rows)
    (args.out / f"bench_ort_{device}.json").write_text(json.dumps(result, indent=2) + "\n")
    (args.out / f"bench_ort_{device}.md").write_text(markdown(result))
    print(f"\nWTConvNeXt-T in ONNX Runtime ({device}; {result['meta'].get('gpu') or result['meta']['cpu']})")
    print(f"{'model':10} {'prec':5} {'B':>3} {'median ms':>10} {'img/s':>9}")
    for r in rows:
        print(f"{r['model']:10} {r['precision']:5} {r['batch']:>3} {r['ms_median']:>10.2f} {r['img_per_s']:>9.1f}")
    for what, value, met in result["targets"]:
        print(f"target {'met   ' if met else 'MISSED'} {what}: {value}")
    for share in layer_shares(rows):
        print(share)
    return 0


if __name__ == "__main__":
    sys.exit(main())
