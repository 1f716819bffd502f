#!/usr/bin/env python3
"""Benchmark of WTConvNeXt-T in ONNX Runtime with the native WTConv2d op (libwtconv_ort.so), beside timm's
ConvNeXt-T exported both ways and the standard-op export, on the CPU or on the GPU (onnxruntime-gpu's CUDA EP).

    python -m benchmarks.bench_ort --device cpu --out docs/bench         # B=1 224^2, fp32, 2 threads
    python -m benchmarks.bench_ort --device cuda --out $OUT              # fp16 and fp32, B=1 and B=64, CUDA graphs
    python -m benchmarks.bench_ort --device cuda --out $OUT --quick      # fewer runs (a first look, a smoke test)

Models (224x224, dynamic batch, exported in this process's children at its start; WTConvNeXt-T with random
weights, seed 0, rendered for ONNX Runtime: opset 20, fp16 LayerNorms without Casts; docs/onnx_export.md):
  plugin                the plugin export (one wtconv::WTConv2d node per layer), NCHW blocks, on libwtconv_ort.so
  plugin-cl             the plugin export with channels-last blocks (--layout channels_last)
  standard              the standard-op export (--ops standard)
  rest                  the plugin export with every WTConv2d node replaced by Identity: not a network, a probe of
                        the time of everything but the layers (plugin - rest = the layers' share)
  convnext-dynamo       timm's ConvNeXt-T, torch.onnx's dynamo exporter (its default opset, 20)
  convnext-torchscript  timm's ConvNeXt-T, torch.onnx's TorchScript exporter (opset 18)
Every model runs in the same execution provider with the same options, in one process, on the same input. On the
GPU the input and the output are bound in device memory (I/O binding); `+graph` rows run a second session with
ONNX Runtime's CUDA graph (enable_cuda_graph: captured at the first run, replayed after; input and output bound to
fixed buffers), one per batch size.

Method: after warm-up runs of each, the models take turns, one run each per round, for `--runs` rounds; the median
(and the 10th / 90th percentiles) of each model's wall-clock times is reported, with each model's output compared
with the plugin export's (or, for a `+graph` row, with its own session's without the graph). The op types of the
graph ONNX Runtime runs (its optimized model, saved) are counted for every model. With --profile, ONNX Runtime's
profile by operator type: of every WTConvNeXt model on the CPU; on the GPU of the plugin exports and ConvNeXt-T at
fp16 and the largest batch, in a child process with CUDA_LAUNCH_BLOCKING=1 (a node's time then covers its kernels,
not only their launches; the sum is slower than a pipelined run).

Writes OUT/bench_ort_<device>.json (every number, the machine, the versions and the command) and
OUT/bench_ort_<device>.md (tables and the targets); prints a short table last.
"""

from __future__ import annotations

import argparse
import collections
import concurrent.futures
import datetime
import json
import multiprocessing
import os
import platform
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ARCH = "wtconvnext_tiny"
SHAPE = (3, 224, 224)
MODELS = ("plugin", "plugin-cl", "standard", "rest", "convnext-dynamo", "convnext-torchscript")
CONVNEXT = ("convnext-dynamo", "convnext-torchscript")
GRAPHED = ("plugin", "plugin-cl", *CONVNEXT)  # the models timed with CUDA graphs too (--graph-models)
PROFILED_CUDA = ("plugin", "plugin-cl", *CONVNEXT)
REPOSITORY = Path(__file__).resolve().parent.parent


def log(message: str) -> None:
    print(f"[bench_ort {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------------------------------
# Models
# ---------------------------------------------------------------------------------------------------------------


def export_one(name: str, precision: str, path: str, device: str) -> str:
    """Export model `name` in `precision` to `path` (run in a child process: exports are single-threaded Python,
    so the models are exported side by side)."""
    import torch

    if name in CONVNEXT:
        import timm

        on = "cuda" if device == "cuda" and torch.cuda.is_available() else "cpu"
        dtype = torch.float16 if precision == "fp16" else torch.float32
        net = timm.create_model("convnext_tiny", pretrained=False).eval().to(on, dtype)
        x = torch.randn((1, *SHAPE), device=on, dtype=dtype)
        dynamo = name == "convnext-dynamo"
        torch.onnx.export(
            net,
            (x,),
            path,
            input_names=["input"],
            output_names=["output"],
            dynamo=dynamo,
            **(
                {"dynamic_shapes": ({0: torch.export.Dim.DYNAMIC},), "external_data": False}
                if dynamo
                else {"dynamic_axes": {"input": {0: "batch"}, "output": {0: "batch"}}, "opset_version": 18}
            ),
        )
        return path
    from wtconv_export.onnx_export import export_onnx
    from wtconv_export.onnx_models import build_model

    model, description = build_model(ARCH, random_weights=True, seed=0)
    export_onnx(
        model,
        path,
        ops="standard" if name == "standard" else "plugin",
        precision=precision,
        runtime="onnxruntime",
        layout="channels_last" if name == "plugin-cl" else "nchw",
        input_shape=(1, *SHAPE),
        metadata=description,
    )
    return path


def without_wtconv(path: Path, out: Path) -> Path:
    """The model at `path` with each WTConv2d node replaced by Identity (WTConvNeXt-T's layers keep their shape)."""
    import onnx

    from wtconv_libs import contract

    proto = onnx.load(str(path))
    for i, node in enumerate(proto.graph.node):
        if node.op_type == contract.OP_TYPE and node.domain == contract.ONNX_DOMAIN:
            if any(a.name == contract.FIELD_STRIDE and a.i != 1 for a in node.attribute):
                raise ValueError(f"{path.name}: a strided WTConv2d node cannot become Identity")
            proto.graph.node[i].CopyFrom(onnx.helper.make_node("Identity", node.input, node.output, name=node.name))
    onnx.save(proto, str(out))
    return out


def export_models(folder: Path, precisions, device: str, models, reuse: bool) -> tuple[dict, dict]:
    """({(model, precision): path}, {(model, precision): why it is left out}). `reuse`: keep files already in
    `folder` from an earlier run (so a timing can start at once)."""
    wanted = {"plugin" if m == "rest" else m for m in models}
    missing = {}
    if wanted & set(CONVNEXT):
        try:
            import timm  # noqa: F401
        except Exception as error:  # noqa: BLE001 -- timm absent or broken: ConvNeXt-T is left out, said why
            for name in CONVNEXT:
                for precision in precisions:
                    missing[(name, precision)] = f"timm is not importable ({type(error).__name__}: {error})"
            wanted -= set(CONVNEXT)
    jobs = {(name, p): folder / f"{name}_{p}.onnx" for name in sorted(wanted) for p in precisions}
    todo = {key: path for key, path in jobs.items() if not (reuse and path.is_file())}
    paths = {key: path for key, path in jobs.items() if key not in todo}
    if todo:
        workers = max(1, min(len(todo), (os.cpu_count() or 2) // 2, 8))
        log(f"exporting {len(todo)} models, {workers} at a time: {', '.join(f'{n} {p}' for n, p in todo)}")
        context = multiprocessing.get_context("spawn")
        with concurrent.futures.ProcessPoolExecutor(workers, mp_context=context) as pool:
            futures = {pool.submit(export_one, n, p, str(path), device): (n, p) for (n, p), path in todo.items()}
            for future in concurrent.futures.as_completed(futures):
                key = futures[future]
                try:
                    paths[key] = Path(future.result())
                    log(f"exported {key[0]} {key[1]}")
                except Exception as error:  # noqa: BLE001 -- one model's export failing leaves it out, said why
                    missing[key] = f"export failed ({type(error).__name__}: {str(error).splitlines()[0][:300]})"
                    log(f"{key[0]} {key[1]}: {missing[key]}")
    if "rest" in models:
        for precision in precisions:
            if ("plugin", precision) in paths:
                paths[("rest", precision)] = without_wtconv(
                    paths["plugin", precision], folder / f"rest_{precision}.onnx"
                )
    return paths, missing


def op_type_counts(path: Path) -> dict:
    """{op type (domain::type for other domains): count} of a saved ONNX model, and "(nodes)"."""
    import onnx

    proto = onnx.load(str(path), load_external_data=False)
    counts = collections.Counter(f"{n.domain}::{n.op_type}" if n.domain else n.op_type for n in proto.graph.node)
    return {"(nodes)": len(proto.graph.node), **dict(sorted(counts.items()))}


# ---------------------------------------------------------------------------------------------------------------
# Sessions and runners
# ---------------------------------------------------------------------------------------------------------------


def provider_options(device: str, graph: bool = False) -> dict | None:
    """The CUDA EP's options, the same for every model: an exhaustive cuDNN algorithm search, TF32 off (fp32 rows
    are fp32), ONNX Runtime's CUDA graph for `+graph` rows."""
    if device == "cpu":
        return None
    options = {"device_id": "0", "cudnn_conv_algo_search": "EXHAUSTIVE", "use_tf32": "0"}
    if graph:
        options["enable_cuda_graph"] = "1"
    return options


def make_session(path, device, library, threads, graph=False, optimized=None, profile_prefix=None):
    import onnxruntime as ort

    from wtconv_ort.session import make_ort_session

    options = ort.SessionOptions()
    if device == "cpu":
        options.intra_op_num_threads = threads
    if optimized:
        options.optimized_model_filepath = str(optimized)
    if profile_prefix:
        options.enable_profiling = True
        options.profile_file_prefix = profile_prefix
    options.log_severity_level = 3  # ONNX Runtime's notes (an optimized model holding NCHWc nodes, ...)
    providers = (
        ["CPUExecutionProvider"]
        if device == "cpu"
        else [("CUDAExecutionProvider", provider_options(device, graph)), "CPUExecutionProvider"]
    )
    return make_ort_session(path, providers, options, op="native", library=library)


class Runner:
    """One session at one input. CPU: plain runs. CUDA: input and output bound on the GPU (I/O binding); with
    `graph`, bound to fixed buffers, as ONNX Runtime's CUDA graph needs (the first run captures)."""

    def __init__(self, session, device, x, graph=False):
        import onnxruntime as ort

        self.session, self.device, self.x = session, device, x
        self.input = session.get_inputs()[0].name
        self.output = session.get_outputs()[0].name
        if device == "cuda":
            self.binding = session.io_binding()
            self.binding.bind_ortvalue_input(self.input, ort.OrtValue.ortvalue_from_numpy(x, "cuda", 0))
            if graph:
                shape = (x.shape[0], *session.get_outputs()[0].shape[1:])
                self.y = ort.OrtValue.ortvalue_from_shape_and_type(shape, x.dtype, "cuda", 0)
                self.binding.bind_ortvalue_output(self.output, self.y)
            else:
                self.binding.bind_output(self.output, "cuda")

    def __call__(self):
        if self.device == "cuda":
            self.session.run_with_iobinding(self.binding)
            self.binding.synchronize_outputs()
        else:
            self.session.run([self.output], {self.input: self.x})

    def output_value(self) -> np.ndarray:
        if self.device == "cuda":
            self.__call__()
            return self.binding.copy_outputs_to_cpu()[0]
        return self.session.run([self.output], {self.input: self.x})[0]


def time_rounds(runners: dict, warmup: int, runs: int) -> dict:
    """{name: [seconds]}; warm-up runs of each, then `runs` rounds in which every runner runs once."""
    for run in runners.values():
        for _ in range(warmup):
            run()
    times = {name: [] for name in runners}
    for _ in range(runs):
        for name, run in runners.items():
            start = time.perf_counter()
            run()
            times[name].append(time.perf_counter() - start)
    return times


def summarise(name, precision, batch, seconds, agreement) -> dict:
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
        "rel_diff": agreement,
    }


def reference_of(name: str) -> str | None:
    """The model whose output `name`'s is compared with: the same model without the CUDA graph, the plugin export
    for the other renderings of the same WTConvNeXt-T; none for "rest" (not the network) and ConvNeXt-T."""
    if name.endswith("+graph"):
        return name[: -len("+graph")]
    return "plugin" if name in ("plugin-cl", "standard") else None


def rel_diff(a, ref) -> float:
    a, ref = np.asarray(a, np.float64), np.asarray(ref, np.float64)
    return float(np.abs(a - ref).max() / max(np.abs(ref).max(), 1e-30))


# ---------------------------------------------------------------------------------------------------------------
# Profiles
# ---------------------------------------------------------------------------------------------------------------


def profile_breakdowns(runners: dict, runs: int) -> dict:
    """ONNX Runtime's profiles of `runs` runs of each runner after one warm-up, the runners taking turns: {name:
    {operator type: [ms per run, % of the run]}}, each figure the median over the runs; "(model_run)" is the run."""
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


def profile_in_process(spec: dict) -> dict:
    """The profiles `spec` asks for ({"paths": {name: path}, "device", "library", "threads", "batch",
    "precision", "runs", "folder"}), in this process."""
    x = np.random.default_rng(0).standard_normal((spec["batch"], *SHAPE)).astype(np.float32)
    x = x.astype(np.float16) if spec["precision"] == "fp16" else x
    runners = {
        name: Runner(
            make_session(
                path,
                spec["device"],
                spec["library"],
                spec["threads"],
                profile_prefix=str(Path(spec["folder"]) / f"profile_{name}"),
            ),
            spec["device"],
            x,
        )
        for name, path in spec["paths"].items()
    }
    return profile_breakdowns(runners, spec["runs"])


def profile_in_child(spec: dict) -> dict:
    """profile_in_process in a child process with CUDA_LAUNCH_BLOCKING=1: each launch waits for its kernels, so a
    node's profiled time is its GPU time (this process's CUDA context cannot be switched to that)."""
    spec_file = Path(spec["folder"]) / "profile_spec.json"
    out_file = Path(spec["folder"]) / "profile_result.json"
    spec_file.write_text(json.dumps(spec))
    env = {**os.environ, "CUDA_LAUNCH_BLOCKING": "1"}
    done = subprocess.run(
        [sys.executable, __file__, "--profile-child", str(spec_file), str(out_file)], env=env, timeout=600
    )
    if done.returncode != 0:
        raise RuntimeError(f"the profiling child process failed (exit status {done.returncode})")
    return json.loads(out_file.read_text())


# ---------------------------------------------------------------------------------------------------------------
# Results
# ---------------------------------------------------------------------------------------------------------------


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
    try:
        import timm

        info["timm"] = timm.__version__
    except Exception:  # noqa: BLE001 -- recorded only when importable
        pass
    return info


def find_row(rows: list[dict], model: str, precision: str, batch: int) -> dict | None:
    """The summarised row of (model, precision, batch), or None when that model was not timed."""
    return next((r for r in rows if (r["model"], r["precision"], r["batch"]) == (model, precision, batch)), None)


def fastest(rows, models, precision, batch) -> dict | None:
    """Of `models`' rows at (precision, batch), the fastest (the baseline a target is measured against)."""
    found = [r for r in (find_row(rows, m, precision, batch) for m in models) if r]
    return min(found, key=lambda r: r["ms_median"]) if found else None


def evaluate_targets(device: str, rows: list[dict]) -> list[tuple[str, str, bool]]:
    """(target, measured value, met) for each target whose models were timed, for each plugin export (NCHW and
    channels-last blocks). ConvNeXt-T is the faster of its two exports in each case."""
    out = []
    for plugin in ("plugin", "plugin-cl"):
        if device == "cpu":
            ours, standard = find_row(rows, plugin, "fp32", 1), find_row(rows, "standard", "fp32", 1)
            if ours and standard:
                ratio = ours["ms_median"] / standard["ms_median"]
                out.append(
                    (f"{plugin} <= 0.65x the standard-op export's time (fp32, B=1)", f"{ratio:.2f}x", ratio <= 0.65)
                )
            continue
        for precision, batch, graph, bound, what in (
            ("fp16", 64, "", 1.1, "img/s"),
            ("fp32", 64, "", 1.35, "img/s"),
            ("fp16", 1, "", 0.9, "time"),
            ("fp16", 1, "+graph", 1.0, "time"),
        ):
            ours = find_row(rows, plugin + graph, precision, batch)
            base = fastest(rows, [c + graph for c in CONVNEXT], precision, batch)
            if not (ours and base):
                continue
            label = f"{precision} B={batch}{' with CUDA graphs' if graph else ''}"
            if what == "img/s":
                ratio = ours["img_per_s"] / base["img_per_s"]
                out.append(
                    (
                        f"{plugin} >= {bound}x ConvNeXt-T's img/s ({label}; {base['model']})",
                        f"{ratio:.2f}x",
                        ratio >= bound,
                    )
                )
            else:
                ratio = ours["ms_median"] / base["ms_median"]
                out.append(
                    (
                        f"{plugin} <= {bound}x ConvNeXt-T's time ({label}; {base['model']})",
                        f"{ratio:.2f}x",
                        ratio <= bound,
                    )
                )
        ours, standard = find_row(rows, plugin, "fp16", 64), find_row(rows, "standard", "fp16", 64)
        if ours and standard:
            ratio = ours["img_per_s"] / standard["img_per_s"]
            out.append((f"{plugin} >= 4x the standard-op export's img/s (fp16, B=64)", f"{ratio:.2f}x", ratio >= 4.0))
    return out


def layout_verdict(rows: list[dict]) -> list[str]:
    """Which plugin export ran faster, per (precision, batch, CUDA graph or not): the layout decision's evidence."""
    out = []
    for r in rows:
        model = r["model"]
        if model.split("+")[0] != "plugin":
            continue
        other = find_row(rows, model.replace("plugin", "plugin-cl", 1), r["precision"], r["batch"])
        if other:
            ratio = other["ms_median"] / r["ms_median"]
            out.append(
                f"{r['precision']} B={r['batch']}{' CUDA graph' if '+graph' in model else ''}: channels-last blocks "
                f"take {ratio:.3f}x the NCHW blocks' time ({other['ms_median']:.3f} vs {r['ms_median']:.3f} ms)"
            )
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
        *([] if result["complete"] else ["**Partial: the run stopped before its end.**", ""]),
        f"- {meta['date']}; ONNX Runtime {meta['onnxruntime']}, Python {meta['python']}, "
        f"torch {meta.get('torch', '-')}, timm {meta.get('timm', '-')}; {meta['cpu_count']} CPU threads visible "
        f"(load average "
        f"{meta['load_average_1min_before']} before, {meta['load_average_1min']} after); provider options: "
        f"{result['provider_options']}",
        f"- library: {meta['library_info']}",
        f"- command (repository root): `{meta['command']}`",
        f"- method: {result['method']}",
        "",
        "| model | precision | batch | median ms | p10 ms | p90 ms | img/s | runs | max rel. diff |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in result["rows"]:
        diff = "-" if r["rel_diff"] is None else f"{r['rel_diff']:.1e}"
        lines.append(
            f"| {r['model']} | {r['precision']} | {r['batch']} | {r['ms_median']:.3f} | {r['ms_p10']:.3f} | "
            f"{r['ms_p90']:.3f} | {r['img_per_s']:.1f} | {r['runs']} | {diff} |"
        )
    lines += [
        "",
        "max rel. diff: max |y - y_ref| / max |y_ref| against the plugin export's output (a `+graph` row: against the "
        "same model without the graph); ConvNeXt-T has weights of its own.",
    ]
    if result["left_out"]:
        lines += ["", "## Left out", ""] + [f"- {what}: {why}" for what, why in result["left_out"].items()]
    lines += ["", "## Targets", "", "| target | result | met |", "|---|---|---|"]
    for what, value, met in result["targets"]:
        lines.append(f"| {what} | {value} | {'yes' if met else '**no**'} |")
    for title, items in (
        ("Layout: channels-last blocks against NCHW blocks", layout_verdict(result["rows"])),
        ("Where the time goes: the WTConv2d layers against the rest (plugin - rest)", layer_shares(result["rows"])),
    ):
        if items:
            lines += ["", f"## {title}", ""] + [f"- {s}" for s in items]
    counts = result.get("op_types", {})
    if counts:
        names = list(counts)
        types = sorted({t for c in counts.values() for t in c}, key=lambda t: (t != "(nodes)", t))
        lines += ["", "## The graph ONNX Runtime runs (its optimized model), by op type", ""]
        lines += ["| op type | " + " | ".join(names) + " |", "|---" * (len(names) + 1) + "|"]
        for t in types:
            lines.append(f"| {t} | " + " | ".join(str(counts[n].get(t, "")) for n in names) + " |")
    for key, breakdown in result.get("profiles", {}).items():
        lines += ["", f"## Where the time goes: {key} (ONNX Runtime profile, by operator type)", ""]
        lines += ["| operator | ms per run | % of the run |", "|---|---|---|"]
        lines += [f"| {op} | {ms:.3f} | {share:.1f} |" for op, (ms, share) in breakdown.items()]
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------------------------------------------
# Main
# ---------------------------------------------------------------------------------------------------------------


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


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", choices=("cpu", "cuda"), required=True)
    parser.add_argument("--out", type=Path, required=True, help="folder for bench_ort_<device>.{json,md}")
    parser.add_argument("--library", type=Path, help="libwtconv_ort.so (default: wtconv_libs.lookup lookup)")
    parser.add_argument("--batches", type=at_least(1), nargs="+", help="default: 1 (cpu), 64 1 (cuda)")
    parser.add_argument("--precisions", nargs="+", choices=("fp32", "fp16"), help="default: fp32 (cpu), fp16 fp32")
    parser.add_argument("--models", nargs="+", choices=MODELS, help="default: all (ConvNeXt-T where timm imports)")
    parser.add_argument(
        "--graph-models",
        nargs="*",
        choices=MODELS,
        help="CUDA: the models also timed with ONNX Runtime's CUDA graph (default: " + " ".join(GRAPHED) + ")",
    )
    parser.add_argument("--runs", type=at_least(1), help="timed rounds (default 30 on cpu, 100 on cuda; --quick 10)")
    parser.add_argument("--warmup", type=at_least(0), default=5, help="warm-up runs of each model (default 5)")
    parser.add_argument("--threads", type=at_least(1), default=2, help="CPU: intra-op threads (default 2)")
    parser.add_argument("--quick", action="store_true", help="10 rounds, 2 warm-up runs, 3 profiled runs")
    parser.add_argument("--profile", action="store_true", help="add ONNX Runtime's profile by operator type")
    parser.add_argument("--onnx-dir", type=Path, help="keep the exported models here (default: a temporary folder)")
    parser.add_argument("--reuse-onnx", action="store_true", help="with --onnx-dir: use the models already there")
    return parser.parse_args(argv)


def save(args, device, library, load_before, warmup, runs, rows, left_out, op_types, profiles, done) -> dict:
    """Write OUT/bench_ort_<device>.{json,md} with what is measured so far (written after every timing phase, so a
    run stopped early still leaves its results; `done` False marks them partial). Returns the result."""
    result = {
        "device": device,
        "complete": done,
        "meta": {**machine(device, library), "load_average_1min_before": load_before},
        "provider_options": provider_options(device) or f"CPUExecutionProvider, {args.threads} intra-op threads",
        "method": (
            f"{warmup} warm-up runs each, then {runs} rounds taking turns; median wall time per run; "
            + (
                "input and output bound on the GPU (I/O binding); +graph: ONNX Runtime's CUDA graph, fixed buffers"
                if device == "cuda"
                else f"{args.threads} intra-op threads"
            )
            + (
                " (profile: CUDA_LAUNCH_BLOCKING=1, a node's time covers its kernels)"
                if args.profile and device == "cuda"
                else ""
            )
        ),
        "rows": rows,
        "left_out": left_out,
        "op_types": op_types,
        "profiles": profiles,
    }
    result["targets"] = evaluate_targets(device, rows)
    (args.out / f"bench_ort_{device}.json").write_text(json.dumps(result, indent=2) + "\n")
    (args.out / f"bench_ort_{device}.md").write_text(markdown(result))
    return result


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--profile-child"]:  # profile_in_child's process
        Path(argv[2]).write_text(json.dumps(profile_in_process(json.loads(Path(argv[1]).read_text()))))
        return 0
    args = parse_args(argv)

    import onnxruntime as ort

    from wtconv_ort.session import resolve_wtconv_op

    device = args.device
    if device == "cuda" and "CUDAExecutionProvider" not in ort.get_available_providers():
        print(f"bench_ort: onnxruntime {ort.__version__} has no CUDAExecutionProvider (install onnxruntime-gpu)")
        return 2
    batches = args.batches or ([1] if device == "cpu" else [64, 1])
    precisions = args.precisions or (["fp32"] if device == "cpu" else ["fp16", "fp32"])
    models = args.models or list(MODELS)
    graphed = [] if device == "cpu" else [m for m in (GRAPHED if args.graph_models is None else args.graph_models)]
    runs = args.runs or (10 if args.quick else 30 if device == "cpu" else 100)
    warmup = 2 if args.quick else args.warmup
    profile_runs = 3 if args.quick else 10
    _, library = resolve_wtconv_op("native", args.library)
    args.out.mkdir(parents=True, exist_ok=True)

    with tempfile.TemporaryDirectory() as tmp:
        folder = args.onnx_dir or Path(tmp)
        folder.mkdir(parents=True, exist_ok=True)
        paths, left_out = export_models(folder, precisions, device, models, args.reuse_onnx and bool(args.onnx_dir))
        left_out = {f"{m} {p}": why for (m, p), why in left_out.items()}
        rows, op_types, profiles = [], {}, {}
        load_before = round(os.getloadavg()[0], 2)
        for precision in precisions:
            names = [m for m in models if (m, precision) in paths]
            sessions = {}
            for name in list(names):  # one session per model and precision, shared by the batch sizes
                optimized = folder / f"{name}_{precision}.optimized.onnx"
                try:
                    sessions[name] = make_session(
                        paths[name, precision], device, library, args.threads, optimized=optimized
                    )
                except Exception as error:  # noqa: BLE001 -- a model ONNX Runtime refuses is left out, said why
                    names.remove(name)
                    left_out[f"{name} {precision}"] = str(error).strip().splitlines()[-1][:300]
                    log(f"{name} {precision}: {left_out[f'{name} {precision}']}")
                    continue
                op_types[f"{name} {precision}"] = op_type_counts(optimized)
            for batch in batches:
                x = np.random.default_rng(0).standard_normal((batch, *SHAPE)).astype(np.float32)
                x = x.astype(np.float16) if precision == "fp16" else x
                runners = {name: Runner(sessions[name], device, x) for name in names}
                for name in (n for n in names if n in graphed):  # a CUDA graph captures one shape: a session each
                    try:
                        session = make_session(paths[name, precision], device, library, args.threads, graph=True)
                        runners[f"{name}+graph"] = Runner(session, device, x, graph=True)
                    except Exception as error:  # noqa: BLE001 -- recorded below as any first run's failure
                        left_out[f"{name}+graph {precision} B={batch}"] = str(error).strip().splitlines()[-1][:300]
                for name, runner in list(runners.items()):  # the first run (a graph's capture): a failure leaves
                    try:  # the model out, with its reason, and the others are timed
                        runner()
                    except Exception as error:  # noqa: BLE001 -- e.g. a node ONNX Runtime cannot capture
                        runners.pop(name)
                        left_out[f"{name} {precision} B={batch}"] = str(error).strip().splitlines()[-1][:300]
                        log(f"{name} {precision} B={batch}: {left_out[f'{name} {precision} B={batch}']}")
                log(f"timing {precision} B={batch}: {', '.join(runners)}")
                times = time_rounds(runners, warmup, runs)
                outputs = {name: runner.output_value() for name, runner in runners.items()}
                for name in runners:
                    ref = reference_of(name)
                    agreement = rel_diff(outputs[name], outputs[ref]) if ref in outputs else None
                    rows.append(summarise(name, precision, batch, times[name], agreement))
                del runners
                save(args, device, library, load_before, warmup, runs, rows, left_out, op_types, profiles, done=False)
            del sessions
        if args.profile:
            precision, batch = ("fp16", max(batches)) if device == "cuda" else (precisions[0], max(batches))
            names = [
                m
                for m in (PROFILED_CUDA if device == "cuda" else ("plugin", "plugin-cl", "standard", "rest"))
                if (m, precision) in paths
            ]
            spec = {
                "paths": {name: str(paths[name, precision]) for name in names},
                "device": device,
                "library": str(library),
                "threads": args.threads,
                "batch": batch,
                "precision": precision,
                "runs": profile_runs,
                "folder": str(folder),
            }
            log(f"profiling {precision} B={batch}: {', '.join(names)}")
            try:
                found = profile_in_child(spec) if device == "cuda" else profile_in_process(spec)
                profiles = {f"{name} {precision} B={batch}": breakdown for name, breakdown in found.items()}
            except Exception as error:  # noqa: BLE001 -- the timings stand without the profile
                left_out["profile"] = f"{type(error).__name__}: {error}"
    result = save(args, device, library, load_before, warmup, runs, rows, left_out, op_types, profiles, done=True)
    print(f"\nWTConvNeXt-T in ONNX Runtime ({device}; {result['meta'].get('gpu') or result['meta']['cpu']})")
    print(f"{'model':28} {'prec':5} {'B':>3} {'median ms':>10} {'img/s':>9}")
    for r in rows:
        print(f"{r['model']:28} {r['precision']:5} {r['batch']:>3} {r['ms_median']:>10.3f} {r['img_per_s']:>9.1f}")
    for what, value, met in result["targets"]:
        print(f"target {'met   ' if met else 'MISSED'} {what}: {value}")
    for line in layout_verdict(rows) + layer_shares(rows):
        print(line)
    for what, why in left_out.items():
        print(f"left out: {what}: {why}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
