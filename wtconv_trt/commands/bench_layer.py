"""Benchmark the fused WTConv CUDA kernels against the reference module, cuDNN depthwise 7x7 / 5x5 and x.clone().

One process, one GPU, the same inputs for every method. Each method is captured in a CUDA graph that calls
it once per input buffer (buffers rotate so that one replay touches > 3x the L2 cache: no method runs from
L2), and the median over replays of (replay time / calls) is reported: launch overhead is excluded for
every method alike, as it is in TensorRT. Optionally whole-model throughput (WTConvNeXt-T with our kernels
vs the reference vs timm's ConvNeXt-T, eager, torch.no_grad).
"""

import json
import math
import statistics
import time
from pathlib import Path

HELP = "benchmark the fused WTConv CUDA kernels (layer shapes and whole-model throughput)"

L2_BYTES = 50 * 2 ** 20          # H100/H200 L2 (50 MiB); buffers rotate over > 3x this
STAGES_T = [(96, 56, 5), (192, 28, 4), (384, 14, 3), (768, 7, 2)]   # WTConvNeXt-T (C, H=W, levels)


def add_arguments(parser):
    parser.add_argument("--out", type=Path, default=Path("bench_out"), help="directory for JSON, markdown and PNG")
    parser.add_argument("--dtypes", default="fp32,fp16", help="comma-separated: fp32,fp16,bf16")
    parser.add_argument("--quick", action="store_true", help="a small subset of the layer shapes")
    parser.add_argument("--no-layers", action="store_true", help="skip the layer sweep")
    parser.add_argument("--model", action="store_true", help="also whole-model throughput (fp16, needs timm)")
    parser.add_argument("--model-batches", default="64,256")
    parser.add_argument("--no-reference", action="store_true", help="skip the (slow) PyTorch reference module")
    parser.add_argument("--replays", type=int, default=10)
    parser.add_argument("--command-line", default="", help="the command, recorded in the outputs")


def _shapes(quick):
    shapes = []
    sweep_c = (64,) if quick else (32, 64, 128)
    sweep_hw = (128, 512) if quick else (128, 256, 512)
    sweep_l = (1, 3, 5) if quick else (1, 2, 3, 4, 5)
    for c in sweep_c:
        for hw in sweep_hw:
            for lv in sweep_l:
                shapes.append(dict(group="sweep", b=8, c=c, h=hw, w=hw, levels=lv, k=5))
    for c, hw, lv in STAGES_T:
        shapes.append(dict(group="wtconvnext_t", b=64, c=c, h=hw, w=hw, levels=lv, k=5))
    return shapes


def _time_graph(torch, calls, replays):
    """Median ms per call of a CUDA graph replaying ``calls`` (a list of thunks)."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for fn in calls:
            fn()
    torch.cuda.current_stream().wait_stream(stream)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for fn in calls:
            fn()
    for _ in range(2):
        graph.replay()
    times = []
    for _ in range(replays):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / len(calls))
    del graph
    torch.cuda.empty_cache()
    return statistics.median(times)


def _traffic_bytes(shape, elem):
    """Our design's modelled DRAM traffic (wtconvKernel.cu banner), bytes."""
    n = shape["b"] * shape["c"] * shape["h"] * shape["w"]
    if shape["levels"] == 1:
        return 2 * n * elem
    return 3 * n * elem + 5.33 * n


def bench_layers(torch, args, dtypes):
    import torch.nn as nn
    from wtconv_export import cuda_kernels
    from wtconv_export.folding import fold_wtconv
    from wtconv_export.wtconv2d import WTConv2d
    rows = []
    dev = torch.device("cuda")
    for dtype_name in dtypes:
        dtype = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}[dtype_name]
        elem = torch.finfo(dtype).bits // 8
        for shape in _shapes(args.quick):
            b, c, h, w, lv, k = (shape[key] for key in ("b", "c", "h", "w", "levels", "k"))
            nbytes = b * c * h * w * elem
            nbuf = max(1, math.ceil(3 * L2_BYTES / nbytes))
            torch.manual_seed(0)
            xs = [torch.randn(b, c, h, w, device=dev, dtype=dtype) for _ in range(nbuf)]
            layer = WTConv2d(c, c, kernel_size=k, wt_levels=lv)
            with torch.no_grad():
                for p in layer.wavelet_scale:
                    p.weight.fill_(0.1)
            folded = fold_wtconv(layer)
            bw, bb, ww = folded.tensors(device=dev, dtype=torch.float32)
            outs = [torch.empty_like(x) for x in xs]
            ws = torch.empty(max(cuda_kernels.workspace_bytes(xs[0], k, lv, 1), 1), dtype=torch.uint8, device=dev)
            layer = layer.to(dev, dtype).eval()
            dw7 = nn.Conv2d(c, c, 7, padding=3, groups=c).to(dev, dtype).eval()
            dw5 = nn.Conv2d(c, c, 5, padding=2, groups=c).to(dev, dtype).eval()
            methods = {
                "ours": [lambda x=x, o=o: cuda_kernels.forward_into(o, x, bw, bb, ww, k, lv, 1, workspace=ws)
                         for x, o in zip(xs, outs)],
                "dw7": [lambda x=x: dw7(x) for x in xs],
                "dw5": [lambda x=x: dw5(x) for x in xs],
                "clone": [lambda x=x: x.clone() for x in xs],
            }
            if not args.no_reference:
                methods["reference"] = [lambda x=x: layer(x) for x in xs]
            row = dict(shape, dtype=dtype_name, buffers=nbuf)
            with torch.no_grad():
                for name, calls in methods.items():
                    row[f"{name}_ms"] = _time_graph(torch, calls, args.replays)
            row["ours_over_clone"] = row["ours_ms"] / row["clone_ms"]
            row["ours_over_dw7"] = row["ours_ms"] / row["dw7_ms"]
            row["ours_gbps_model"] = _traffic_bytes(shape, elem) / (row["ours_ms"] * 1e-3) / 1e9
            row["clone_gbps"] = 2 * nbytes / (row["clone_ms"] * 1e-3) / 1e9
            rows.append(row)
            print(f"{dtype_name} {b}x{c}x{h}x{w} L{lv}: ours {row['ours_ms']:.4f} ms  clone {row['clone_ms']:.4f}  "
                  f"dw7 {row['dw7_ms']:.4f}  dw5 {row['dw5_ms']:.4f}  ref {row.get('reference_ms', float('nan')):.4f}  "
                  f"ours/clone {row['ours_over_clone']:.2f}  ours/dw7 {row['ours_over_dw7']:.3f}", flush=True)
            del xs, outs, ws, layer, dw7, dw5, methods
            torch.cuda.empty_cache()
    return rows


def model_forward_ms(torch, model, batch, warmup=3, repeats=10):
    """Median ms of an eager fp16 forward pass on a (batch, 3, 224, 224) input, CUDA events, after warm-up."""
    x = torch.randn(batch, 3, 224, 224, device="cuda", dtype=torch.float16)
    with torch.no_grad():
        for _ in range(warmup):
            model(x)
        torch.cuda.synchronize()
        times = []
        for _ in range(repeats):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            model(x)
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
    return statistics.median(times)


def bench_models(torch, args):
    import timm
    from wtconv_export import cuda_kernels
    from wtconv_export.fused_module import fuse_wtconv_layers
    from wtconv_export.wtconvnext import wtconvnext_tiny
    cuda_kernels.register()
    dev = torch.device("cuda")
    results = []

    models = {
        # fuse after the cast: the folded weights stay fp32 buffers (DESIGN.md §2)
        "wtconvnext_t_ours": lambda: fuse_wtconv_layers(wtconvnext_tiny().eval().to(dev, torch.float16)),
        "wtconvnext_t_reference": lambda: wtconvnext_tiny().eval().to(dev, torch.float16),
        "convnext_t_timm": lambda: timm.create_model("convnext_tiny", pretrained=False).eval().to(dev, torch.float16),
    }
    for batch in [int(v) for v in args.model_batches.split(",")]:
        for name, make in models.items():
            model = make()
            ms = model_forward_ms(torch, model, batch)
            ips = batch / (ms * 1e-3)
            results.append(dict(model=name, batch=batch, dtype="fp16", ms=ms, img_per_s=ips))
            print(f"model {name} B={batch}: {ms:.2f} ms  {ips:.0f} img/s", flush=True)
            del model
            torch.cuda.empty_cache()
    # cost of making a channels-last-strided activation NCHW contiguous (what our op does on such inputs)
    for c, hw, _ in STAGES_T:
        xs = [torch.randn(256, hw, hw, c, device=dev, dtype=torch.float16).permute(0, 3, 1, 2) for _ in range(4)]
        with torch.no_grad():
            ms = _time_graph(torch, [lambda x=x: x.contiguous() for x in xs], args.replays)
        results.append(dict(model="contiguous_copy", batch=256, c=c, h=hw, w=hw, dtype="fp16", ms=ms))
        print(f"contiguous() of a channels-last (256,{c},{hw},{hw}) fp16: {ms:.4f} ms", flush=True)
    return results


def _markdown(rows, models, meta):
    lines = [f"# WTConv layer benchmark — {meta['gpu']}", "",
             f"Command: `{meta['command']}`  ", f"torch {meta['torch']}, CUDA {meta['cuda']}, {meta['date']}", "",
             "Median ms per call (CUDA-graph replay, buffers rotated over > 3x L2). ours/clone: target <= 4; "
             "ours/dw7: target < 1.", ""]
    if rows:
        lines += ["| dtype | B×C×H×W | L | ours | reference | dw7 | dw5 | clone | ours/clone | ours/dw7 | model GB/s |",
                  "|---|---|---|---|---|---|---|---|---|---|---|"]
        for r in rows:
            lines.append(f"| {r['dtype']} | {r['b']}×{r['c']}×{r['h']}×{r['w']} | {r['levels']} | {r['ours_ms']:.4f} | "
                         f"{r.get('reference_ms', float('nan')):.3f} | {r['dw7_ms']:.4f} | {r['dw5_ms']:.4f} | "
                         f"{r['clone_ms']:.4f} | {r['ours_over_clone']:.2f} | {r['ours_over_dw7']:.3f} | "
                         f"{r['ours_gbps_model']:.0f} |")
        worst_clone = max(rows, key=lambda r: r["ours_over_clone"])
        worst_dw7 = max(rows, key=lambda r: r["ours_over_dw7"])
        lines += ["", f"Worst ours/clone: {worst_clone['ours_over_clone']:.2f} ({worst_clone['dtype']} "
                  f"{worst_clone['b']}×{worst_clone['c']}×{worst_clone['h']}² L{worst_clone['levels']}); "
                  f"worst ours/dw7: {worst_dw7['ours_over_dw7']:.3f} ({worst_dw7['dtype']} {worst_dw7['b']}×"
                  f"{worst_dw7['c']}×{worst_dw7['h']}² L{worst_dw7['levels']})."]
    if models:
        lines += ["", "## Whole model (fp16, 224², eager, torch.no_grad)", "", "| model | batch | ms | img/s |",
                  "|---|---|---|---|"]
        for m in models:
            if m["model"] != "contiguous_copy":
                lines.append(f"| {m['model']} | {m['batch']} | {m['ms']:.2f} | {m['img_per_s']:.0f} |")
        lines += ["", "Channels-last-strided → NCHW `.contiguous()` copy at B=256 fp16 (paid per block when the "
                  "activation arrives channels-last):", ""]
        for m in models:
            if m["model"] == "contiguous_copy":
                lines.append(f"- {m['c']}×{m['h']}²: {m['ms']:.4f} ms")
    return "\n".join(lines) + "\n"


def _plot(rows, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, 2, figsize=(14, 5))
    for dtype, marker in (("fp32", "o"), ("fp16", "s"), ("bf16", "^")):
        sel = [r for r in rows if r["dtype"] == dtype]
        if not sel:
            continue
        xs = list(range(len(sel)))
        axes[0].plot(xs, [r["ours_over_clone"] for r in sel], marker, label=dtype)
        axes[1].plot(xs, [r["ours_over_dw7"] for r in sel], marker, label=dtype)
    axes[0].axhline(4, color="r", ls="--", label="target 4")
    axes[1].axhline(1, color="r", ls="--", label="target 1")
    axes[0].set_title("ours / x.clone() (time ratio)")
    axes[1].set_title("ours / cuDNN depthwise 7x7 (time ratio)")
    for ax in axes:
        ax.set_xlabel("shape index (sweep B=8 C,H,L, then WTConvNeXt-T stages B=64)")
        ax.legend()
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def run(args):
    import torch
    if not torch.cuda.is_available():
        raise ValueError("bench-layer needs a CUDA GPU")
    args.out.mkdir(parents=True, exist_ok=True)
    dtypes = [d.strip() for d in args.dtypes.split(",") if d.strip()]
    meta = dict(gpu=torch.cuda.get_device_name(), torch=torch.__version__, cuda=torch.version.cuda,
                date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                command=args.command_line or "wtconv-trt bench-layer")
    rows = [] if args.no_layers else bench_layers(torch, args, dtypes)
    models = bench_models(torch, args) if args.model else []
    (args.out / "bench_layer.json").write_text(json.dumps(dict(meta=meta, layers=rows, models=models), indent=1))
    (args.out / "bench_layer.md").write_text(_markdown(rows, models, meta))
    if rows:
        _plot(rows, args.out / "bench_layer.png")
    print(_markdown(rows, models, meta))
    return 0


if __name__ == "__main__":
    import argparse
    import sys
    _parser = argparse.ArgumentParser(prog="wtconv-trt bench-layer", description=HELP)
    add_arguments(_parser)
    sys.exit(run(_parser.parse_args()))
