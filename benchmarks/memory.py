"""Memory benchmark of the fused WTConv layer and the WTConvNeXt models (the library behind benchmarks/bench_memory.py).

What is measured (one process, one GPU, inference mode, PyTorch's caching-allocator statistics, which count every
tensor of the call and nothing else of the process):

- per layer, at the WTConvNeXt-T stage shapes and the paper's sweep (the speed benchmark's shapes,
  benchmark.layer_shapes), fp16 and fp32, NCHW and channels-last input: the peak memory a call allocates *above its
  input and its output* (``torch.cuda.max_memory_allocated`` during the call minus what was allocated before it,
  minus the output's own allocation), for our FusedWTConv2d, the published WTConv2d (BGU-CS-VIL/WTConv
  ``wtconv.WTConv2d``) and the paper's fused kernels (``fast_wtconv``); besides, what an engine or session reserves
  for our layer: the TensorRT plugin's getWorkspaceSize (wtconvWorkspaceBytes for the layout TensorRT picks: kLINEAR,
  or kHWC8 / kHWC for channels-last) — the ONNX Runtime CUDA op calls the same kernels with the same workspace;
- per model, WTConvNeXt-T/S/B on our kernels (NCHW and channels-last input), the published WTConvNeXt (its timm-based
  code with the published WTConv2d), the same with the paper's kernels, and timm's ConvNeXt-T/S/B, fp16, 224 x 224,
  B = 1, 32, 128: the peak a forward call allocates above what was allocated before it.

A second call is measured after a first (plans, cuDNN and cuBLAS handles and workspaces are made on first use).
"""

from __future__ import annotations

import importlib.util
import logging
import sys
import time
import types
from pathlib import Path

logger = logging.getLogger(__name__)

MIB = 2**20
MODEL_SIZES = {"t": ("wtconvnext_tiny", "convnext_tiny"), "s": ("wtconvnext_small", "convnext_small"),
               "b": ("wtconvnext_base", "convnext_base")}  # fmt: skip
MODEL_BATCHES = (1, 32, 128)


def call_memory(torch, fn) -> dict:
    """Bytes one call of ``fn`` allocates: ``peak`` above what was allocated before it, its ``output``'s allocation
    (what is freed when the result is dropped), ``extra`` = peak - output, and ``left`` (still allocated after the
    result is dropped: a leak or a cache)."""
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    y = fn()
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() - before
    with_output = torch.cuda.memory_allocated() - before
    del y
    torch.cuda.synchronize()
    left = torch.cuda.memory_allocated() - before
    return dict(peak=peak, output=with_output - left, extra=peak - (with_output - left), left=left)


def measured(torch, fn) -> dict:
    """call_memory of a second call (the first makes plans, handles and library workspaces)."""
    fn()
    torch.cuda.synchronize()
    return call_memory(torch, fn)


# ----------------------------------------------------------------------------------------------------------
# the published code (BGU-CS-VIL/WTConv checkout): its WTConv2d, WTConvNeXt and the paper's fused kernels


def _haar_only_pywt() -> types.ModuleType:
    """A stand-in for PyWavelets with the one wavelet the published models use (db1 = Haar; PyWavelets' own
    coefficients), for a GPU machine without PyWavelets: the published wtconv package imports it for its filters."""
    s = 0.7071067811865476
    bank = dict(dec_lo=(s, s), dec_hi=(-s, s), rec_lo=(s, s), rec_hi=(s, -s))
    module = types.ModuleType("pywt")

    def wavelet(name):
        if name not in ("db1", "haar"):
            raise ValueError(f"the benchmark's PyWavelets stand-in has db1 only, asked for {name!r}")
        return types.SimpleNamespace(**bank)

    module.Wavelet = wavelet
    return module


def load_published(root: Path | None):
    """(published WTConv2d class, published WTConvNeXt module, paper's fused WTConv2d class) from a checkout of
    BGU-CS-VIL/WTConv; None for what cannot be imported (logged)."""
    if root is None:
        return None, None, None
    root = Path(root)
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    if importlib.util.find_spec("pywt") is None:
        sys.modules["pywt"] = _haar_only_pywt()
        logger.info("PyWavelets is not installed: the published WTConv2d gets Haar filters from a stand-in")
    published = convnext = fused = None
    try:
        from wtconv import WTConv2d as published  # noqa: N813 - the published class
    except Exception as error:  # noqa: BLE001 - recorded, the rest still runs
        logger.warning("published wtconv.WTConv2d not importable: %s", error)
    try:
        spec = importlib.util.spec_from_file_location("published_wtconvnext", root / "wtconvnext" / "wtconvnext.py")
        convnext = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = convnext  # timm's model registry looks the module up by name
        spec.loader.exec_module(convnext)
    except Exception as error:  # noqa: BLE001
        logger.warning("published WTConvNeXt not importable: %r", error)
        sys.modules.pop("published_wtconvnext", None)
        convnext = None
    try:
        from fast_wtconv.wtconv_cuda import WTConv2d as fused  # noqa: N813 - the paper's class
    except Exception as error:  # noqa: BLE001
        logger.warning("the paper's fast_wtconv not importable: %s", error)
    return published, convnext, fused


def with_layers_replaced(model, make):
    """Every WTConv2d layer in ``model`` (ours or the published class: published.find_wtconv_layers) replaced in
    place by ``make(channels, k, levels, stride)``; returns the model."""
    from wtconv_torch.published import find_wtconv_layers, replace_submodule, wtconv_layer_config

    for path, layer in find_wtconv_layers(model):
        config = wtconv_layer_config(layer, path)
        model = replace_submodule(
            model, path, make(config.channels, config.kernel_size, config.wt_levels, config.stride)
        )
    return model


# ----------------------------------------------------------------------------------------------------------
# layers


def plugin_workspace_bytes(lib, dtype: str, shape: dict, channels_last: bool) -> int:
    """The TensorRT plugin's getWorkspaceSize for a profile whose largest shape is ``shape``: wtconvWorkspaceBytes
    for the format TensorRT gives the layer (kLINEAR; channels-last: kHWC8 for fp16 with C rounded up to 8, kHWC for
    fp32)."""
    from wtconv_torch import cuda_kernels

    code = {"fp32": 0, "fp16": 1, "bf16": 2}[dtype]
    c = shape["c"]
    pitch = 0 if not channels_last else (c if dtype == "fp32" else (c + 7) // 8 * 8)
    layout = cuda_kernels.NHWC if channels_last else cuda_kernels.NCHW
    args = (code, shape["b"], c, shape["h"], shape["w"], shape["k"], shape["levels"], shape["stride"], layout, pitch)
    return int(lib.wtconv_workspace_bytes(*args))


def bench_layers(torch, dtypes, shapes, published_cls, fused_cls, device="cuda", on_row=None) -> list[dict]:
    """One row per (dtype, shape): the input's bytes, the plugin's workspace per layout, and for each layer
    available (ours; the published and the paper's classes when given) ``<name>_<layout>_extra`` (the call's peak
    above input and output) and ``_left`` (still allocated after it), or ``_error``. ``on_row(rows)`` is called after
    each row (the caller saves as it goes)."""
    from wtconv_torch import cuda_kernels
    from wtconv_torch.fused_module import FusedWTConv2d
    from wtconv_torch.wtconv2d import WTConv2d

    cuda_kernels.register()
    lib = cuda_kernels.load_library()
    dev = torch.device(device)
    rows = []
    for dtype_name in dtypes:
        dtype = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}[dtype_name]
        for shape in shapes:
            b, c, h, w, lv, k, s = (shape[key] for key in ("b", "c", "h", "w", "levels", "k", "stride"))
            torch.manual_seed(0)
            x = torch.randn(b, c, h, w, device=dev, dtype=dtype)
            methods = {"ours": FusedWTConv2d.from_wtconv(WTConv2d(c, c, kernel_size=k, stride=s, wt_levels=lv))}
            if published_cls is not None:
                methods["published"] = published_cls(c, c, kernel_size=k, stride=s, wt_levels=lv)
            if fused_cls is not None:
                methods["paper"] = fused_cls(c, c, kernel_size=k, stride=s, wt_levels=lv, bias=True)
            row = dict(shape, dtype=dtype_name, input_bytes=x.numel() * x.element_size())
            for layout in ("nchw", "cl"):
                xl = x.contiguous(memory_format=torch.channels_last) if layout == "cl" else x
                row[f"plugin_workspace_{layout}"] = plugin_workspace_bytes(lib, dtype_name, shape, layout == "cl")
                for name, module in methods.items():
                    module = module.to(dev) if name == "ours" else module.to(dev, dtype)
                    module.eval()
                    try:
                        with torch.inference_mode():
                            m = measured(torch, lambda module=module, xl=xl: module(xl))
                        row[f"{name}_{layout}_extra"] = m["extra"]
                        row[f"{name}_{layout}_left"] = m["left"]
                    except Exception as error:  # noqa: BLE001 - recorded, not fatal
                        logger.warning("%s %s failed at %s: %s", name, layout, shape, error)
                        row[f"{name}_{layout}_error"] = str(error).splitlines()[0][:200]
                    torch.cuda.empty_cache()
            rows.append(row)
            if on_row is not None:
                on_row(rows)
            extras = " ".join(f"{key}={val / MIB:.1f}" for key, val in row.items() if key.endswith("_extra"))
            logger.info("%s %s: %s MiB", dtype_name, shape, extras)
            del x, methods
            torch.cuda.empty_cache()
    return rows


# ----------------------------------------------------------------------------------------------------------
# models


def model_makers(torch, published_convnext, fused_cls) -> dict:
    """name -> (size, device, dtype -> model in eval mode there), for the models compared."""
    from wtconv_torch import cuda_kernels
    from wtconv_torch.fused_module import fuse_wtconv_layers
    from wtconv_torch.wtconvnext import WTCONVNEXT_CONFIGS, create_wtconvnext

    cuda_kernels.register()

    def ours(size, dev, dtype):
        # fused after the cast, as a user would: the folded weights are computed from the weights that run
        return fuse_wtconv_layers(create_wtconvnext(MODEL_SIZES[size][0]).eval().to(dev, dtype))

    makers = {"ours": ours}
    if published_convnext is not None:

        def published(size, dev, dtype):
            config = WTCONVNEXT_CONFIGS[MODEL_SIZES[size][0]]
            return published_convnext.WTConvNeXt(**config).eval().to(dev, dtype)

        makers["published"] = published
        if fused_cls is not None:

            def paper(size, dev, dtype):
                model = published_convnext.WTConvNeXt(**WTCONVNEXT_CONFIGS[MODEL_SIZES[size][0]])
                with_layers_replaced(model, lambda c, k, lv, s: fused_cls(c, c, kernel_size=k, stride=s, wt_levels=lv))
                return model.eval().to(dev, dtype)

            makers["paper"] = paper
    try:
        import timm
    except Exception as error:  # noqa: BLE001 - timm absent or broken: no ConvNeXt column
        logger.warning("timm not importable (%s): ConvNeXt is not measured", error)
    else:
        makers["convnext"] = lambda size, dev, dtype: timm.create_model(MODEL_SIZES[size][1]).eval().to(dev, dtype)
    return makers


def bench_models(
    torch, makers: dict, sizes=("t", "s", "b"), batches=MODEL_BATCHES, dtype_name="fp16", device="cuda"
) -> list[dict]:
    """One row per (size, model, layout, batch) of model_makers' models at 224 x 224: the forward call's ``peak``
    above what was allocated before it and what it ``left``, or ``error`` (a model that cannot be built or run is
    recorded, not fatal). Channels-last is measured for our model only."""
    dtype = {"fp32": torch.float32, "fp16": torch.float16}[dtype_name]
    dev = torch.device(device)
    rows = []
    for size in sizes:
        for name, make in makers.items():
            layouts = ("nchw", "cl") if name == "ours" else ("nchw",)
            try:
                model = make(size, dev, dtype)
            except Exception as error:  # noqa: BLE001
                logger.warning("model %s-%s could not be built: %s", name, size, error)
                rows.append(dict(size=size, model=name, error=str(error).splitlines()[0][:200]))
                continue
            for layout in layouts:
                if layout == "cl":
                    model = model.to(memory_format=torch.channels_last)
                for batch in batches:
                    x = torch.randn(batch, 3, 224, 224, device=dev, dtype=dtype)
                    if layout == "cl":
                        x = x.contiguous(memory_format=torch.channels_last)
                    row = dict(size=size, model=name, layout=layout, batch=batch, dtype=dtype_name)
                    try:
                        with torch.inference_mode():
                            m = measured(torch, lambda model=model, x=x: model(x))
                        row.update(peak=m["peak"], left=m["left"])
                    except Exception as error:  # noqa: BLE001
                        logger.warning("model %s-%s %s B=%d failed: %s", name, size, layout, batch, error)
                        row["error"] = str(error).splitlines()[0][:200]
                    rows.append(row)
                    logger.info("model %s-%s %s B=%d: %s", name, size, layout, batch, row.get("peak", row.get("error")))
                    del x
                    torch.cuda.empty_cache()
            del model
            torch.cuda.empty_cache()
    return rows


def stage1_activation_bytes(size: str, batch: int, element_bytes: int = 2) -> int:
    """One stage-1 activation of the model (B x C1 x 56 x 56 at 224 x 224 input)."""
    from wtconv_torch.wtconvnext import WTCONVNEXT_CONFIGS

    return batch * WTCONVNEXT_CONFIGS[MODEL_SIZES[size][0]]["dims"][0] * 56 * 56 * element_bytes


# ----------------------------------------------------------------------------------------------------------
# report


def _mib(v) -> str:
    return "–" if v is None else f"{v / MIB:.1f}"


def _ratio(a, b) -> str:
    if a is None or b is None or b == 0:
        return "–"
    return f"{a / b:.2f}"


def markdown(result: dict) -> str:
    """The report (bench_memory.md) of run's result: the whole-model table, the per-layer table, and the
    ``snapshots`` (benchmarks/memory_snapshot.py's alive-at-the-peak lists) the result holds."""
    meta, layers, models = result["meta"], result["layers"], result["models"]
    out = [
        "# Memory: the fused WTConv layer and WTConvNeXt",
        "",
        f"{meta.get('gpu', '?')}, torch {meta.get('torch', '?')}, {meta.get('date', '')}. Command: "
        f"`{meta.get('command', '')}`. How it is measured: benchmarks/memory.py (PyTorch's allocator "
        "statistics, inference mode, the second call).",
        "",
        "## Whole model: peak above what was allocated before the call (MiB), fp16, 224 × 224",
        "",
        "Ours = our WTConvNeXt on our kernels (NCHW / channels-last input); published = the published WTConvNeXt code "
        "with the published WTConv2d; paper = the same with the paper's fused kernels (fast_wtconv); ConvNeXt = timm. "
        "A = one stage-1 activation (B × C1 × 56² × 2 bytes).",
        "",
        "| model | B | ours NCHW | ours cl | published | paper | ConvNeXt | ours ÷ published | ours in A | "
        "published in A |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    index = {(r["size"], r["model"], r.get("layout"), r.get("batch")): r for r in models}
    for size in MODEL_SIZES:
        for batch in MODEL_BATCHES:

            def get(name, layout="nchw", size=size, batch=batch):
                return index.get((size, name, layout, batch), {}).get("peak")

            ours, ours_cl, pub = get("ours"), get("ours", "cl"), get("published")
            if ours is None and pub is None:
                continue
            a = stage1_activation_bytes(size, batch)
            worst = max(v for v in (ours, ours_cl) if v is not None) if (ours or ours_cl) else None
            out.append(
                f"| WTConvNeXt-{size.upper()} | {batch} | {_mib(ours)} | {_mib(ours_cl)} | {_mib(pub)} | "
                f"{_mib(get('paper'))} | {_mib(get('convnext'))} | {_ratio(worst, pub)} | {_ratio(worst, a)} | "
                f"{_ratio(pub, a)} |"
            )
    out += [
        "",
        "## Per layer: peak above input and output (MiB)",
        "",
        "Ours = FusedWTConv2d (what it allocates is its workspace: none on the whole-plane path, planes up to 64 × 64; "
        "the tiled path's LL / D planes, plus planar copies of x and y for channels-last); published = "
        "wtconv.WTConv2d; paper = fast_wtconv.WTConv2d. TRT = the TensorRT plugin's getWorkspaceSize for this shape "
        "as the profile's largest (kLINEAR / kHWC8 fp16, kHWC fp32): the ONNX Runtime CUDA op runs the same kernels "
        "with the same workspace (kept per node, grown when a larger shape comes).",
        "",
        "| dtype | shape | input | ours NCHW | ours cl | published NCHW | published cl | paper NCHW | paper cl | "
        "ours ÷ published (worst layout) | ours ÷ paper (worst) | TRT kLINEAR | TRT channels-last |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in layers:
        shape = f"{r['b']}×{r['c']}×{r['h']}² L{r['levels']}" + (f" s{r['stride']}" if r["stride"] > 1 else "")
        g = r.get
        worst = [
            (g(f"ours_{lay}_extra"), g(f"published_{lay}_extra"), g(f"paper_{lay}_extra")) for lay in ("nchw", "cl")
        ]
        vs_pub = max((o / p for o, p, _ in worst if o is not None and p), default=None)
        vs_paper = max((o / q for o, _, q in worst if o is not None and q), default=None)
        out.append(
            f"| {r['dtype']} | {shape} | {_mib(r['input_bytes'])} | {_mib(g('ours_nchw_extra'))} | "
            f"{_mib(g('ours_cl_extra'))} | {_mib(g('published_nchw_extra'))} | {_mib(g('published_cl_extra'))} | "
            f"{_mib(g('paper_nchw_extra'))} | {_mib(g('paper_cl_extra'))} | "
            f"{'–' if vs_pub is None else f'{vs_pub:.2f}'} | {'–' if vs_paper is None else f'{vs_paper:.2f}'} | "
            f"{_mib(g('plugin_workspace_nchw'))} | {_mib(g('plugin_workspace_cl'))} |"
        )
    leaks = [r for r in layers + models if any(k.endswith("left") and v for k, v in r.items())]
    out += ["", f"Allocations left after a call once its result is dropped: {len(leaks)} of the rows above."]
    for snap in result.get("snapshots", []):
        out += [
            "",
            f"## Alive at the peak: {snap['label']}",
            "",
            f"Peak {snap['peak'] / MIB:.1f} MiB = {snap['peak'] / snap['activation']:.2f} A "
            f"(benchmarks/memory_snapshot.py: the allocator's trace replayed to its highest point).",
            "",
            "| MiB | A | allocated by |",
            "|---|---|---|",
        ]
        out += [f"| {row['mib']:.1f} | {row['activations']:.2f} | {row['made_by']} |" for row in snap["alive"]]
    return "\n".join(out) + "\n"


def run(
    out: Path, official: Path | None, quick: bool = False, command: str = "", parts=("models", "layers"), paper=True
) -> dict:
    """Measure ``parts`` ("models", "layers") and write bench_memory.json and bench_memory.md into ``out``, saved
    after each part (and each layer row); returns the result. ``official``: a BGU-CS-VIL/WTConv checkout for the
    published and the paper's columns; ``paper=False`` leaves the paper's kernels out; ``quick``: WTConvNeXt-T and
    fp16 layers only. ConfigurationError without a CUDA GPU."""
    import json

    import torch

    from wtconv_bench.layers import layer_shapes

    if not torch.cuda.is_available():
        from wtconv_core.errors import ConfigurationError

        raise ConfigurationError("the memory benchmark needs a CUDA GPU (torch.cuda.is_available() is False)")
    torch.backends.cudnn.benchmark = False
    out.mkdir(parents=True, exist_ok=True)
    published_cls, published_convnext, fused_cls = load_published(official)
    if not paper:
        fused_cls = None  # the paper's kernels compile on first use (about a minute)
    meta = dict(
        gpu=torch.cuda.get_device_name(),
        torch=torch.__version__,
        date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        command=command,
        published=published_cls is not None,
        paper=fused_cls is not None,
    )
    result = dict(meta=meta, models=[], layers=[])

    def save():
        (out / "bench_memory.json").write_text(json.dumps(result, indent=1))
        (out / "bench_memory.md").write_text(markdown(result))

    if "models" in parts:
        makers = model_makers(torch, published_convnext, fused_cls)
        result["models"] = bench_models(torch, makers, sizes=("t",) if quick else ("t", "s", "b"))
        save()
    if "layers" not in parts:
        return result

    def on_row(rows):  # saved as it goes: an interrupted run keeps what it measured
        result["layers"] = rows
        save()

    dtypes = ("fp16",) if quick else ("fp16", "fp32")
    result["layers"] = bench_layers(torch, dtypes, layer_shapes(quick), published_cls, fused_cls, on_row=on_row)
    save()
    return result
