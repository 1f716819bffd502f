"""Benchmark of the fused WTConv CUDA kernels (the library behind ``wtconv-trt bench-layer``).

One process, one GPU, the same inputs and weights for every method at a shape:

  ours (NCHW and channels-last), the paper's official fused CUDA kernels (``fast_wtconv``, when the path of
  the published code is given), cuDNN 7x7 and 5x5 depthwise convolutions in NCHW and channels-last, the
  PyTorch reference WTConv2d and ``x.clone()`` (the floor: read N elements, write N).

Timing: each method is captured in a CUDA graph that calls it once per input buffer; the buffers rotate so
that one replay touches more than 3x the L2 cache, so no method runs from L2. The median over replays (after
warm-up replays) of replay time / calls is reported: launch overhead is excluded for every method alike,
as in TensorRT. No autotuner runs (cuDNN's benchmark mode stays off).

Separately: the per-call overhead of the PyTorch module (eager ``FusedWTConv2d(x)`` calls back to back
against the CUDA-graph replay of the same calls) and whole-model throughput (WTConvNeXt-T on our kernels,
on the official kernels, and timm's ConvNeXt-T; NCHW and channels-last; eager, ``torch.no_grad``).
"""

from __future__ import annotations

import json
import logging
import math
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

logger = logging.getLogger(__name__)

L2_BYTES = 50 * 2**20  # H100/H200 L2 (50 MiB); buffers rotate over > 3x this
STAGES_T = [(96, 56, 5), (192, 28, 4), (384, 14, 3), (768, 7, 2)]  # WTConvNeXt-T (C, H=W, levels)
FP32_LANES_PER_SM = 128  # Hopper / Ampere: FP32 FMA lanes per SM
DTYPE_NAMES = ("fp32", "fp16", "bf16")


@dataclass
class Options:
    out: Path
    dtypes: tuple[str, ...] = ("fp32", "fp16")
    quick: bool = False
    layers: bool = True
    models: bool = True
    reference: bool = True
    official: Path | None = None  # a checkout of BGU-CS-VIL/WTConv (its fast_wtconv package)
    replays: int = 20
    command: str = "wtconv-trt bench-layer"
    model_configs: tuple[tuple[str, int], ...] = (("fp16", 64), ("fp16", 256), ("fp32", 64))
    extra: dict = field(default_factory=dict)


def _torch_dtype(torch, name):
    return {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}[name]


def layer_shapes(quick: bool) -> list[dict]:
    """The paper's sweep 8 x {32, 64, 128} x {128, 256, 512}^2 x L{1, 3, 5}, the WTConvNeXt-T stages at
    B = 64, B = 1 at stage 1, and stride 2 (k = 5 throughout)."""
    shapes = []
    for c in (64,) if quick else (32, 64, 128):
        for hw in (128, 512) if quick else (128, 256, 512):
            for lv in (1, 3, 5):
                shapes.append(dict(group="sweep", b=8, c=c, h=hw, w=hw, levels=lv, k=5, stride=1))
    for c, hw, lv in STAGES_T:
        shapes.append(dict(group="wtconvnext_t", b=64, c=c, h=hw, w=hw, levels=lv, k=5, stride=1))
    shapes.append(dict(group="batch1", b=1, c=96, h=56, w=56, levels=5, k=5, stride=1))
    shapes.append(dict(group="stride2", b=8, c=64, h=256, w=256, levels=3, k=5, stride=2))
    shapes.append(dict(group="stride2", b=64, c=96, h=56, w=56, levels=5, k=5, stride=2))
    return shapes


def fma_count(shape: dict) -> int:
    """FMAs the layer needs: the base k x k conv at the kept outputs, 4 k x k convs per cell of every level."""
    b, c, h, w, k, lv, s = (shape[key] for key in ("b", "c", "h", "w", "k", "levels", "stride"))
    total = b * c * (-(-h // s)) * (-(-w // s)) * k * k
    for _ in range(lv):
        h, w = (h + 1) // 2, (w + 1) // 2
        total += b * c * h * w * 4 * k * k
    return total


def modelled_traffic_bytes(shape: dict, elem: int, workspace: int, channels_last: bool = False) -> float:
    """Our design's DRAM traffic (plugin/kernels/wtconvKernel.cu, banner): read x and write y once when no
    workspace is used (whole-plane path); else ~3N*e + 5.33N bytes for the tiled path, where channels-last adds
    two transposes (x into a planar copy and the planar y back: another read and write of each)."""
    n = shape["b"] * shape["c"] * shape["h"] * shape["w"]
    n_out = shape["b"] * shape["c"] * (-(-shape["h"] // shape["stride"])) * (-(-shape["w"] // shape["stride"]))
    if workspace == 0:
        return (n + n_out) * elem
    transposes = 2 * (n + n_out) * elem if channels_last else 0
    if shape["levels"] == 1:
        return (n + n_out) * elem + transposes
    return 2 * n * elem + n_out * elem + 5.33 * n + transposes


def gpu_info(torch) -> dict:
    props = torch.cuda.get_device_properties(0)
    info = dict(
        gpu=torch.cuda.get_device_name(),
        sms=props.multi_processor_count,
        torch=torch.__version__,
        cuda=torch.version.cuda,
        cudnn=torch.backends.cudnn.version(),
    )
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=clocks.max.sm,clocks.sm,driver_version", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout
        max_sm, sm, driver = (v.strip() for v in out.splitlines()[0].split(","))
        info.update(max_sm_clock_mhz=float(max_sm), sm_clock_mhz=float(sm), driver=driver)
    except Exception as error:  # noqa: BLE001 - informational only
        logger.warning("nvidia-smi query failed: %s", error)
        info.update(max_sm_clock_mhz=1980.0)
    info["fp32_fma_per_s"] = info["sms"] * FP32_LANES_PER_SM * info["max_sm_clock_mhz"] * 1e6
    return info


def time_graph(torch, calls, replays: int) -> float:
    """Median ms per call of a CUDA graph replaying ``calls`` (thunks), after a warm-up pass outside the
    graph (allocations, handles, JIT) and two warm-up replays."""
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


def time_eager(torch, fn, calls: int = 200, repeats: int = 9) -> float:
    """Median ms per call of ``calls`` back-to-back eager calls (CUDA events around the loop): when the
    host cannot keep up with the GPU, this measures the host-side cost per call."""
    for _ in range(20):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(calls):
            fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / calls)
    return statistics.median(times)


def model_forward_ms(
    torch, model, batch: int, dtype=None, channels_last: bool = False, warmup: int = 3, repeats: int = 10
) -> float:
    """Median ms of an eager forward pass on a (batch, 3, 224, 224) input, CUDA events, after warm-up."""
    dtype = dtype or torch.float16
    x = torch.randn(batch, 3, 224, 224, device="cuda", dtype=dtype)
    if channels_last:
        x = x.contiguous(memory_format=torch.channels_last)
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


# ----------------------------------------------------------------------------------------------------------
# the official fused kernels (fast_wtconv, BGU-CS-VIL/WTConv)


def load_official(path: Path | None):
    """The official ``fast_wtconv.wtconv_cuda.WTConv2d`` class from a checkout of the published code, or
    None when no path is given. Its CUDA extension compiles on first use (about a minute)."""
    if path is None:
        return None
    root = Path(path)
    if not (root / "fast_wtconv" / "wtconv_cuda.py").is_file():
        from wtconv_core.errors import ConfigurationError

        raise ConfigurationError(
            f"official must be a checkout of BGU-CS-VIL/WTConv (with fast_wtconv/wtconv_cuda.py), got {root}",
            parameter="official",
        )
    sys.path.insert(0, str(root))
    from fast_wtconv.wtconv_cuda import WTConv2d as OfficialWTConv2d  # noqa: E402 - path set just above

    return OfficialWTConv2d


def official_layer(official_cls, c: int, k: int, levels: int, stride: int):
    return official_cls(c, c, kernel_size=k, stride=stride, wt_levels=levels, bias=True)


def replace_with_official(model, official_cls):
    """Every reference WTConv2d in ``model`` replaced (in place) by the official fused module of the same
    configuration (random weights: for timing)."""
    from wtconv_torch.wtconv2d import WTConv2d

    for name, child in list(model.named_children()):
        if isinstance(child, WTConv2d):
            setattr(
                model,
                name,
                official_layer(official_cls, child.in_channels, child.kernel_size, child.wt_levels, child.stride),
            )
        else:
            replace_with_official(child, official_cls)
    return model


# ----------------------------------------------------------------------------------------------------------
# layers


def bench_layers(torch, opts: Options, info: dict, official_cls, on_row=None) -> list[dict]:
    import torch.nn as nn

    from wtconv_torch import cuda_kernels
    from wtconv_torch.folding import fold_wtconv
    from wtconv_torch.wtconv2d import WTConv2d

    cuda_kernels.register()
    rows = []
    dev = torch.device("cuda")
    for dtype_name in opts.dtypes:
        dtype = _torch_dtype(torch, dtype_name)
        elem = torch.finfo(dtype).bits // 8
        for shape in layer_shapes(opts.quick):
            b, c, h, w, lv, k, s = (shape[key] for key in ("b", "c", "h", "w", "levels", "k", "stride"))
            nbytes = b * c * h * w * elem
            nbuf = max(1, math.ceil(3 * L2_BYTES / nbytes))
            torch.manual_seed(0)
            xs = [torch.randn(b, c, h, w, device=dev, dtype=dtype) for _ in range(nbuf)]
            xs_cl = [x.contiguous(memory_format=torch.channels_last) for x in xs]
            layer = WTConv2d(c, c, kernel_size=k, stride=s, wt_levels=lv)
            with torch.no_grad():
                for p in layer.wavelet_scale:
                    p.weight.fill_(0.1)
            bw, bb, ww = fold_wtconv(layer).tensors(device=dev, dtype=torch.float32)
            weights = (bw.data_ptr(), bb.data_ptr(), ww.data_ptr())
            oshape = cuda_kernels.output_shape(xs[0], s)
            outs = [torch.empty(oshape, device=dev, dtype=dtype) for _ in xs]
            outs_cl = [torch.empty(oshape, device=dev, dtype=dtype, memory_format=torch.channels_last) for _ in xs]
            ws_bytes = cuda_kernels.workspace_bytes(xs[0], k, lv, s)
            ws_bytes_cl = cuda_kernels.workspace_bytes(xs_cl[0], k, lv, s)  # channels-last may need more
            ws = torch.empty(max(ws_bytes, ws_bytes_cl, 1), dtype=torch.uint8, device=dev)
            ref = layer.to(dev, dtype).eval()
            convs = {}
            for kk in (7, 5):
                conv = nn.Conv2d(c, c, kk, stride=s, padding=kk // 2, groups=c).to(dev, dtype).eval()
                convs[f"dw{kk}_nchw"] = conv
                convs[f"dw{kk}_cl"] = (
                    nn.Conv2d(c, c, kk, stride=s, padding=kk // 2, groups=c)
                    .to(dev, dtype)
                    .eval()
                    .to(memory_format=torch.channels_last)
                )
            launch = cuda_kernels.launch
            methods = {
                "ours_nchw": [
                    partial(launch, o, x, cuda_kernels.NCHW, weights, k, lv, s, ws)
                    for x, o in zip(xs, outs, strict=True)
                ],
                "ours_cl": [
                    partial(launch, o, x, cuda_kernels.NHWC, weights, k, lv, s, ws)
                    for x, o in zip(xs_cl, outs_cl, strict=True)
                ],
            }
            if official_cls is not None:
                off = official_layer(official_cls, c, k, lv, s).to(dev, dtype).eval()
                methods["official"] = [partial(off, x) for x in xs]
            for name, conv in convs.items():
                methods[name] = [partial(conv, x) for x in (xs_cl if name.endswith("_cl") else xs)]
            if opts.reference:
                methods["reference"] = [partial(ref, x) for x in xs]
            methods["clone"] = [x.clone for x in xs]
            row = dict(shape, dtype=dtype_name, buffers=nbuf, workspace_bytes=ws_bytes, workspace_bytes_cl=ws_bytes_cl)
            with torch.no_grad():
                for name, calls in methods.items():
                    try:
                        row[f"{name}_ms"] = time_graph(torch, calls, opts.replays)
                    except Exception as error:  # noqa: BLE001 - a failing baseline is recorded, not fatal
                        logger.warning("%s failed at %s: %s", name, shape, error)
                        row[f"{name}_error"] = str(error).splitlines()[0][:200]
            fmas = fma_count(shape)
            for ours in ("ours_nchw", "ours_cl"):
                t = row.get(f"{ours}_ms")
                if t is None:
                    continue
                for other in ("clone", "dw7_nchw", "dw7_cl", "dw5_nchw", "dw5_cl", "official", "reference"):
                    if f"{other}_ms" in row:
                        row[f"{ours}_over_{other}"] = t / row[f"{other}_ms"]
                cl = ours == "ours_cl"
                traffic = modelled_traffic_bytes(shape, elem, ws_bytes_cl if cl else ws_bytes, channels_last=cl)
                row[f"{ours}_gbps_modelled"] = traffic / (t * 1e-3) / 1e9
                row[f"{ours}_fma_peak_pct"] = 100 * fmas / (t * 1e-3) / info["fp32_fma_per_s"]
            row["clone_gbps"] = 2 * nbytes / (row["clone_ms"] * 1e-3) / 1e9
            rows.append(row)
            if on_row is not None:
                on_row(rows)
            logger.info(
                "%s %dx%dx%dx%d L%d s%d: %s",
                dtype_name,
                b,
                c,
                h,
                w,
                lv,
                s,
                "  ".join(f"{key[:-3]} {val:.4f}" for key, val in row.items() if key.endswith("_ms")),
            )
            del xs, xs_cl, outs, outs_cl, ws, ref, convs, methods
            torch.cuda.empty_cache()
    return rows


def bench_overhead(torch, opts: Options) -> list[dict]:
    """FusedWTConv2d(x) called eagerly back to back vs the CUDA-graph replay of the same calls, B = 1,
    96 x 56^2, L5 (input and output stay in L2 either way: the difference is the host's per-call cost)."""
    from wtconv_torch import cuda_kernels
    from wtconv_torch.fused_module import FusedWTConv2d
    from wtconv_torch.ops import fused_wtconv2d
    from wtconv_torch.wtconv2d import WTConv2d

    cuda_kernels.register()
    rows = []
    dev = torch.device("cuda")
    module = FusedWTConv2d.from_wtconv(WTConv2d(96, 96, kernel_size=5, wt_levels=5)).to(dev)
    w = (module.base_weight, module.base_bias, module.wavelet_weight)
    cases = []
    for dtype_name in opts.dtypes:
        for layout in ("nchw", "channels_last"):
            x = torch.randn(1, 96, 56, 56, device=dev, dtype=_torch_dtype(torch, dtype_name))
            if layout == "channels_last":
                x = x.contiguous(memory_format=torch.channels_last)
            cases.append((dtype_name, layout, x))
    # One untimed pass over every case first, so that the case measured first does not also pay for warming
    # the host (allocator, plan caches, clocks).
    with torch.no_grad():
        for _, _, x in cases:
            time_eager(torch, partial(module, x), calls=200, repeats=3)
        for dtype_name, layout, x in cases:
            eager = time_eager(torch, partial(module, x))
            op = time_eager(torch, partial(fused_wtconv2d, x, *w, 5, 5, 1))
            graph = time_graph(torch, [partial(module, x)] * 50, opts.replays)
            rows.append(
                dict(
                    dtype=dtype_name,
                    layout=layout,
                    shape="1x96x56x56 L5",
                    module_eager_ms=eager,
                    custom_op_eager_ms=op,
                    graph_ms=graph,
                    module_over_graph=eager / graph,
                    custom_op_over_graph=op / graph,
                )
            )
            logger.info(
                "overhead %s %s: module %.4f ms, custom op %.4f ms, graph %.4f ms (%.2fx)",
                dtype_name,
                layout,
                eager,
                op,
                graph,
                eager / graph,
            )
    return rows


def bench_models(torch, opts: Options, official_cls) -> list[dict]:
    import timm

    from wtconv_torch import cuda_kernels
    from wtconv_torch.fused_module import fuse_wtconv_layers
    from wtconv_torch.wtconvnext import wtconvnext_tiny

    cuda_kernels.register()
    dev = torch.device("cuda")
    makers = {
        # fuse after the cast: the folded weights stay fp32 buffers
        "wtconvnext_t_ours": lambda dt: fuse_wtconv_layers(wtconvnext_tiny().eval().to(dev, dt)),
        "convnext_t_timm": lambda dt: timm.create_model("convnext_tiny", pretrained=False).eval().to(dev, dt),
    }
    if official_cls is not None:
        makers["wtconvnext_t_official"] = lambda dt: replace_with_official(wtconvnext_tiny().eval(), official_cls).to(
            dev, dt
        )
    results = []
    for dtype_name, batch in opts.model_configs:
        dtype = _torch_dtype(torch, dtype_name)
        for name, make in makers.items():
            for layout in ("nchw", "channels_last"):
                model = make(dtype)
                if layout == "channels_last":
                    model = model.to(memory_format=torch.channels_last)
                entry = dict(model=name, layout=layout, batch=batch, dtype=dtype_name)
                try:
                    ms = model_forward_ms(torch, model, batch, dtype, channels_last=layout == "channels_last")
                    entry.update(ms=ms, img_per_s=batch / (ms * 1e-3))
                    logger.info(
                        "model %s %s %s B=%d: %.2f ms %.0f img/s",
                        name,
                        layout,
                        dtype_name,
                        batch,
                        ms,
                        entry["img_per_s"],
                    )
                except Exception as error:  # noqa: BLE001 - recorded, not fatal
                    logger.warning("model %s %s failed: %s", name, layout, error)
                    entry.update(error=str(error).splitlines()[0][:200])
                results.append(entry)
                del model
                torch.cuda.empty_cache()
    return results


# ----------------------------------------------------------------------------------------------------------
# report


def _fmt(v, digits=4):
    return "–" if v is None else f"{v:.{digits}f}"


def _shape_label(r):
    label = f"{r['b']}×{r['c']}×{r['h']}² L{r['levels']}"
    return label + (f" s{r['stride']}" if r["stride"] != 1 else "")


def targets(rows: list[dict], models: list[dict], overhead: list[dict]) -> list[tuple[str, str, str]]:
    """(target, met / missed / not measured, measured figures) for the targets of the kernels."""
    out = []
    fp16_256 = [m for m in models if m.get("dtype") == "fp16" and m.get("batch") == 256 and "img_per_s" in m]
    ours = max((m["img_per_s"] for m in fp16_256 if m["model"] == "wtconvnext_t_ours"), default=None)
    conv = max((m["img_per_s"] for m in fp16_256 if m["model"] == "convnext_t_timm"), default=None)
    if ours and conv:
        out.append(
            (
                "WTConvNeXt-T fp16 B=256 ≥ ConvNeXt-T (faster layouts)",
                "met" if ours >= conv else "missed",
                f"{ours:,.0f} vs {conv:,.0f} img/s ({ours / conv:.2f}×)",
            )
        )
    stage = [r for r in rows if r["group"] == "wtconvnext_t"]
    if stage:
        for lay in ("ours_nchw", "ours_cl"):
            worst = max(
                (r for r in stage if f"{lay}_over_clone" in r), key=lambda r: r[f"{lay}_over_clone"], default=None
            )
            if worst is not None:
                vals = ", ".join(
                    f"{r['dtype']} {r['c']}×{r['h']}² {r[f'{lay}_over_clone']:.1f}"
                    for r in stage
                    if f"{lay}_over_clone" in r
                )
                out.append(
                    (
                        f"stage shapes B=64 ≤ 4× x.clone() ({lay})",
                        "met" if worst[f"{lay}_over_clone"] <= 4 else "missed",
                        vals,
                    )
                )
    sweep = [r for r in rows if r["group"] == "sweep" and "official_ms" in r]
    if sweep:
        for lay in ("ours_nchw", "ours_cl"):
            speedups = [r["official_ms"] / r[f"{lay}_ms"] for r in sweep if f"{lay}_ms" in r]
            out.append(
                (
                    f"≥ 3× faster than the official kernels, every sweep shape ({lay})",
                    "met" if min(speedups) >= 3 else "missed",
                    f"{min(speedups):.2f}× … {max(speedups):.2f}× ({sum(v >= 3 for v in speedups)} of "
                    f"{len(speedups)} ≥ 3)",
                )
            )
    elif rows:
        out.append(("≥ 3× faster than the official kernels", "not measured", "no --official path given"))
    if rows:
        pairs = [("ours_nchw", "dw7_nchw"), ("ours_cl", "dw7_cl")]
        ratios = [
            (r[f"{a}_ms"] / r[f"{b}_ms"], r, a, b) for r in rows for a, b in pairs if f"{a}_ms" in r and f"{b}_ms" in r
        ]
        worst = max(ratios, key=lambda t: t[0])
        n_ok = sum(t[0] < 1 for t in ratios)
        out.append(
            (
                "faster than cuDNN dw7 at every shape, dtype, layout",
                "met" if n_ok == len(ratios) else "missed",
                f"{n_ok} of {len(ratios)} faster; worst {worst[0]:.2f}× ({worst[1]['dtype']} "
                f"{_shape_label(worst[1])}, {worst[2]} vs {worst[3]})",
            )
        )
    if overhead:
        worst = max(overhead, key=lambda r: r["module_over_graph"])
        out.append(
            (
                "module call ≤ 1.2× CUDA-graph replay (B=1 96×56² L5)",
                "met" if worst["module_over_graph"] <= 1.2 else "missed",
                ", ".join(f"{r['dtype']} {r['layout']} {r['module_over_graph']:.2f}×" for r in overhead),
            )
        )
    return out


def markdown(rows: list[dict], models: list[dict], overhead: list[dict], meta: dict) -> str:
    lines = [
        f"# WTConv layer benchmark — {meta['gpu']}",
        "",
        f"Command: `{meta['command']}`  ",
        f"torch {meta['torch']}, CUDA {meta['cuda']}, cuDNN {meta['cudnn']}, driver {meta.get('driver', '?')}, "
        f"{meta['date']}. FMA peak used for %: {meta['fp32_fma_per_s'] / 1e12:.1f} TFMA/s "
        f"({meta['sms']} SMs × {FP32_LANES_PER_SM} lanes × {meta.get('max_sm_clock_mhz', 0):.0f} MHz).",
        "",
        "Median ms per call (CUDA-graph replay, buffers rotated over > 3× L2). `cl` = channels-last. "
        "Ratios are ours ÷ other (< 1: ours faster). GB/s: our modelled DRAM traffic ÷ time.",
        "",
    ]
    t = targets(rows, models, overhead)
    if t:
        lines += ["## Targets", "", "| target | result | measured |", "|---|---|---|"]
        lines += [f"| {a} | **{b}** | {c} |" for a, b, c in t]
        lines.append("")
    if rows:
        lines += [
            "## Layers",
            "",
            "| dtype | shape | ours NCHW | ours cl | official | dw7 NCHW | dw7 cl | dw5 NCHW | dw5 cl | reference | "
            "clone | ours/clone | ours cl/clone | ours/dw7 | ours cl/dw7 cl | official/ours | GB/s | % FMA |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for r in rows:
            g = r.get
            off = g("official_ms")
            lines.append(
                f"| {r['dtype']} | {_shape_label(r)} | {_fmt(g('ours_nchw_ms'))} | {_fmt(g('ours_cl_ms'))} | "
                f"{_fmt(off)} | {_fmt(g('dw7_nchw_ms'))} | {_fmt(g('dw7_cl_ms'))} | {_fmt(g('dw5_nchw_ms'))} | "
                f"{_fmt(g('dw5_cl_ms'))} | {_fmt(g('reference_ms'), 3)} | {_fmt(g('clone_ms'))} | "
                f"{_fmt(g('ours_nchw_over_clone'), 1)} | {_fmt(g('ours_cl_over_clone'), 1)} | "
                f"{_fmt(g('ours_nchw_over_dw7_nchw'), 2)} | {_fmt(g('ours_cl_over_dw7_cl'), 2)} | "
                f"{_fmt(off / g('ours_nchw_ms') if off and g('ours_nchw_ms') else None, 2)} | "
                f"{_fmt(g('ours_nchw_gbps_modelled'), 0)} | {_fmt(g('ours_nchw_fma_peak_pct'), 0)} |"
            )
        lines.append("")
    if overhead:
        lines += [
            "## Per-call overhead (B=1, 96×56², L5)",
            "",
            "| dtype | layout | FusedWTConv2d(x) eager | custom op eager | CUDA-graph replay | module ÷ graph | "
            "custom op ÷ graph |",
            "|---|---|---|---|---|---|---|",
        ]
        for r in overhead:
            lines.append(
                f"| {r['dtype']} | {r['layout']} | {r['module_eager_ms']:.4f} | {r['custom_op_eager_ms']:.4f} | "
                f"{r['graph_ms']:.4f} | {r['module_over_graph']:.2f} | {r['custom_op_over_graph']:.2f} |"
            )
        lines.append("")
    if models:
        lines += [
            "## Whole models (224², eager, torch.no_grad, median of 10 after 3 warm-up)",
            "",
            "| model | layout | dtype | batch | ms | img/s |",
            "|---|---|---|---|---|---|",
        ]
        for m in models:
            if "ms" in m:
                lines.append(
                    f"| {m['model']} | {m['layout']} | {m['dtype']} | {m['batch']} | {m['ms']:.2f} | "
                    f"{m['img_per_s']:,.0f} |"
                )
            else:
                lines.append(f"| {m['model']} | {m['layout']} | {m['dtype']} | {m['batch']} | failed: {m['error']} | |")
        lines.append("")
    return "\n".join(lines) + "\n"


def plot(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(18, 5))
    panels = [
        ("ours ÷ x.clone()", [("ours_nchw_over_clone", "NCHW"), ("ours_cl_over_clone", "channels-last")], 4),
        (
            "ours ÷ cuDNN dw7 (same layout)",
            [("ours_nchw_over_dw7_nchw", "NCHW"), ("ours_cl_over_dw7_cl", "channels-last")],
            1,
        ),
        (
            "ours ÷ official fused kernels",
            [("ours_nchw_over_official", "NCHW"), ("ours_cl_over_official", "channels-last")],
            1 / 3,
        ),
    ]
    for ax, (title, series, target) in zip(axes, panels, strict=True):
        for dtype, marker in (("fp32", "o"), ("fp16", "s"), ("bf16", "^")):
            sel = [r for r in rows if r["dtype"] == dtype]
            for key, label in series:
                pts = [(i, r[key]) for i, r in enumerate(sel) if key in r]
                if pts:
                    ax.plot(
                        *zip(*pts, strict=True),
                        marker,
                        fillstyle="none" if label == "NCHW" else "full",
                        label=f"{dtype} {label}",
                    )
        ax.axhline(target, color="r", ls="--", label=f"target {target:.2g}")
        ax.set_yscale("log")
        ax.set_title(title)
        ax.set_xlabel("shape index (sweep, stages B=64, B=1, stride 2)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def run_benchmark(opts: Options) -> dict:
    """Run everything ``opts`` asks for; write bench_layer.json / .md / .png into opts.out; return the results."""
    import torch

    if not torch.cuda.is_available():
        from wtconv_core.errors import ConfigurationError

        raise ConfigurationError("bench-layer needs a CUDA GPU (torch.cuda.is_available() is False)")
    torch.backends.cudnn.benchmark = False
    opts.out.mkdir(parents=True, exist_ok=True)
    info = gpu_info(torch)
    meta = dict(
        info,
        date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        command=opts.command,
        cudnn_allow_tf32=torch.backends.cudnn.allow_tf32,
        matmul_allow_tf32=torch.backends.cuda.matmul.allow_tf32,
        **opts.extra,
    )
    official_cls = load_official(opts.official)
    result = dict(meta=meta, layers=[], overhead=[], models=[])

    def save():  # after each part, so an interrupted run leaves what it measured
        (opts.out / "bench_layer.json").write_text(json.dumps(result, indent=1))
        (opts.out / "bench_layer.md").write_text(markdown(result["layers"], result["models"], result["overhead"], meta))

    result["overhead"] = bench_overhead(torch, opts)
    save()
    if opts.models:
        result["models"] = bench_models(torch, opts, official_cls)
        save()
    if opts.layers:

        def on_row(rows):
            result["layers"] = rows
            save()

        result["layers"] = bench_layers(torch, opts, info, official_cls, on_row)
        save()
    rows = result["layers"]
    if rows:
        try:
            plot(rows, opts.out / "bench_layer.png")
        except ImportError as error:
            logger.warning("no plot (%s); pip install matplotlib", error)
    return result
