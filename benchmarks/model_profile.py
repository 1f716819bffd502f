"""Where the GPU time of WTConvNeXt-T on our kernels goes against timm's ConvNeXt-T, kernel by kernel: graph breaks,
a per-kernel profile, throughput and CUDA-graph latency (docs/bench/README.md, "Per-kernel profile of the whole
models")."""

from __future__ import annotations

import json
import logging
import re
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

logger = logging.getLogger(__name__)

PARTS = ("compile", "profile", "throughput", "latency")
OURS = "wtconvnext_t_ours"
CONVNEXT = "convnext_t_timm"
MODELS = (OURS, CONVNEXT)
LAYOUTS = ("nchw", "channels_last")
MODES = ("eager", "compiled")
JSON_NAME, MD_NAME = "profile_models.json", "profile_models.md"
OUR_OPERATOR = "wtconv::fused_wtconv2d"  # wtconv_torch/ops.py, OPERATOR (the profiler names the op so)
TOP_KERNELS = 15

# Categories, in report order.
WTCONV = "wtconv (ours)"
DEPTHWISE = "depthwise conv"
OTHER_CONV = "other conv"
GEMM = "gemm"
COPY = "layout copy"
NORM = "normalization"
ELEMENTWISE = "elementwise/reduce"
TRITON = "fused (triton)"
MEMCPY = "memcpy/memset"
OTHER = "other"
CATEGORIES = (WTCONV, DEPTHWISE, OTHER_CONV, GEMM, COPY, NORM, ELEMENTWISE, TRITON, MEMCPY, OTHER)

# Our kernels are the __global__ functions of plugin/kernels, in namespace wtconv::detail (demangled, or mangled
# as 6wtconv6detail<length><name>); not anything named "wtconv": inductor names a Triton kernel derived from our
# operator's node after the operator.
_OUR_KERNELS = "smallPlaneKernel|tinyPlaneKernel|groupPlaneKernel|levelKernel|poolKernel|transposeKernel"
_OURS_RE = re.compile(rf"wtconv::detail::(?:{_OUR_KERNELS})\b|6wtconv6detail\d+(?:{_OUR_KERNELS})")
# Layout changes: cuDNN's own transposes around a convolution, PyTorch's copy kernels (aten::copy_ runs
# direct_copy_kernel_cuda through the elementwise kernel templates), any other transpose or permute kernel.
_COPY_NAME_RE = re.compile(r"nchwToNhwc|nhwcToNchw|nchw2nhwc|nhwc2nchw|copy|transpose|permute", re.IGNORECASE)
_COPY_OPS = {"aten::copy_", "aten::clone", "aten::contiguous", "aten::_to_copy", "aten::to"}
_CONV_OPS = {
    "aten::conv2d",
    "aten::convolution",
    "aten::_convolution",
    "aten::cudnn_convolution",
    "aten::_conv_depthwise2d",
    "aten::conv_depthwise2d",
    "aten::cudnn_convolution_relu",
    "aten::cudnn_convolution_add_relu",
}
_DEPTHWISE_NAME_RE = re.compile(r"depthwise|dwconv|dw_conv|conv2d_c1_k1", re.IGNORECASE)
_CONV_NAME_RE = re.compile(r"conv|fprop|implicit_gemm|winograd|cudnn", re.IGNORECASE)
_GEMM_OPS = {"aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::matmul", "aten::linear"}
_GEMM_NAME_RE = re.compile(r"gemm|gemv|nvjet|cutlass|cublas|xmma|Kernel2|s16816|wgmma", re.IGNORECASE)
_NORM_OPS = {"aten::native_layer_norm", "aten::layer_norm", "aten::native_batch_norm", "aten::native_group_norm"}
_NORM_NAME_RE = re.compile(r"layer_?norm|batch_?norm|group_?norm|rms_?norm|welford|RowwiseMoments", re.IGNORECASE)
_ELEMENTWISE_NAME_RE = re.compile(r"elementwise|reduce_kernel|gelu|softmax", re.IGNORECASE)
# Inductor names a Triton kernel triton_<poi|per|red|tem>_fused_<the aten ops it computes>_<n>.
_TRITON_RE = re.compile(r"^triton_(?:[a-z]+_)?fused_(?P<ops>.*?)(?:_\d+)?$")
_TRITON_COPY_OPS_RE = re.compile(r"^(?:_?(?:clone|copy|contiguous|permute|transpose|view|fused_wtconv2d))+$")


def is_depthwise(op_dims) -> bool | None:
    """Whether a convolution operator's "Input Dims" (input, weight, ...) are a depthwise convolution: a 4-D
    weight of one input channel per group over an input of more than one channel, each channel its own group.
    None when the dimensions are not those of a 2-D convolution (not recorded)."""
    try:
        (_, c, _, _), (o, per_group, _, _) = op_dims[0], op_dims[1]
    except (TypeError, ValueError, IndexError):
        return None
    return c > 1 and per_group == 1 and o % c == 0


def classify_kernel(name: str, op: str | None = None, op_dims=None) -> str:
    """The category of a CUDA kernel from its (demangled) name and, when known, the innermost operator that launched
    it and that operator's input dimensions (the profiler's record_shapes). Order matters: our kernels first, then
    Triton kernels by the operators in their names, cuDNN / PyTorch copies and transposes by name (even inside a
    convolution: cuDNN's layout conversion is a layout copy), then by operator, then by name."""
    if _OURS_RE.search(name):
        return WTCONV
    triton = _TRITON_RE.match(name)
    if triton:
        # A kernel of nothing but copies (or a copy inductor made for our operator's input or output) is a layout
        # copy; anything else it computes makes it a fused kernel (the copy then costs no extra pass).
        return COPY if _TRITON_COPY_OPS_RE.match(triton["ops"]) else TRITON
    if name.startswith("triton_"):
        return TRITON
    if _COPY_NAME_RE.search(name) or op in _COPY_OPS:
        return COPY
    if op in _CONV_OPS:
        depthwise = is_depthwise(op_dims)  # the shapes decide when recorded, else the name
        if depthwise is None:
            depthwise = bool(_DEPTHWISE_NAME_RE.search(name))
        return DEPTHWISE if depthwise else OTHER_CONV
    if op in _GEMM_OPS:
        return GEMM
    if op in _NORM_OPS:
        return NORM
    if _DEPTHWISE_NAME_RE.search(name):
        return DEPTHWISE
    if _CONV_NAME_RE.search(name):
        return OTHER_CONV
    if _GEMM_NAME_RE.search(name):
        return GEMM
    if _NORM_NAME_RE.search(name):
        return NORM
    if _ELEMENTWISE_NAME_RE.search(name):
        return ELEMENTWISE
    return OTHER


# ----------------------------------------------------------------------------------------------------------
# the trace: kernels with their operator, per-category sums


@dataclass
class DeviceEvent:
    """One kernel, memcpy or memset of a profiler trace."""

    name: str
    us: float
    category: str
    op: str | None = None  # the innermost operator that launched it (None: none recorded, e.g. our eager path)
    stream: int | None = None
    ts: float = 0.0
    kind: str = "kernel"  # "kernel", "memcpy" or "memset"


_DEVICE_KINDS = {"kernel": "kernel", "gpu_memcpy": "memcpy", "gpu_memset": "memset"}


def trace_events(trace) -> list[dict]:
    """The complete events ("ph": "X") of a Chrome trace (torch.profiler's export_chrome_trace)."""
    events = trace.get("traceEvents", []) if isinstance(trace, dict) else trace
    return [e for e in events if isinstance(e, dict) and e.get("ph") == "X"]


def device_events(trace) -> list[DeviceEvent]:
    """The kernels, memcpys and memsets of a trace in start order, each with its launching operator (the cpu_op
    whose "External id" the kernel carries) and category."""
    events = trace_events(trace)
    ops = {
        e["args"]["External id"]: e for e in events if e.get("cat") == "cpu_op" and "External id" in e.get("args", {})
    }
    found = []
    for e in events:
        kind = _DEVICE_KINDS.get(str(e.get("cat", "")).lower())
        if kind is None:
            continue
        args = e.get("args", {})
        op = ops.get(args.get("External id"))
        op_name = op["name"] if op else None
        op_dims = op.get("args", {}).get("Input Dims") if op else None
        category = classify_kernel(e["name"], op_name, op_dims) if kind == "kernel" else MEMCPY
        found.append(
            DeviceEvent(
                e["name"],
                float(e.get("dur", 0.0)),
                category,
                op_name,
                args.get("stream"),
                float(e.get("ts", 0.0)),
                kind,
            )
        )
    found.sort(key=lambda d: d.ts)
    return found


def operator_calls(trace, name: str) -> int:
    """How many times the operator ``name`` appears as a cpu_op in the trace."""
    return sum(1 for e in trace_events(trace) if e.get("cat") == "cpu_op" and e.get("name") == name)


def short_name(name: str, width: int = 80) -> str:
    """A kernel name for a table: without "void ", cut to ``width`` characters."""
    name = name[5:] if name.startswith("void ") else name
    return name if len(name) <= width else name[: width - 1] + "…"


def summarize(records: list[DeviceEvent], images: int, forwards: int, top: int = TOP_KERNELS) -> dict:
    """CUDA time per image (µs) per category and in total, kernel launches per forward (memcpy / memset not
    counted), and every kernel name with its time per image, launches per forward, category and most frequent
    operator, sorted by time (``top`` of them again as "top")."""
    us = dict.fromkeys(CATEGORIES, 0.0)
    launches = dict.fromkeys(CATEGORIES, 0)
    by_name: dict[str, dict] = {}
    for r in records:
        us[r.category] += r.us
        entry = by_name.setdefault(r.name, dict(name=r.name, category=r.category, us=0.0, launches=0, ops=Counter()))
        entry["us"] += r.us
        if r.kind == "kernel":
            launches[r.category] += 1
            entry["launches"] += 1
        entry["ops"][r.op or "-"] += 1
    kernels = [
        dict(
            name=e["name"],
            category=e["category"],
            op=e["ops"].most_common(1)[0][0],
            us_per_image=e["us"] / images,
            launches_per_forward=e["launches"] / forwards,
        )
        for e in sorted(by_name.values(), key=lambda e: -e["us"])
    ]
    return dict(
        images=images,
        forwards=forwards,
        total_us_per_image=sum(us.values()) / images,
        us_per_image={c: v / images for c, v in us.items()},
        launches_per_forward=sum(launches.values()) / forwards,
        category_launches_per_forward={c: v / forwards for c, v in launches.items()},
        top=kernels[:top],
        kernels=kernels,
    )


def around_ours(records: list[DeviceEvent], forwards: int, top: int = 5) -> dict:
    """What runs right before and after our kernels on their stream. A call is a run of consecutive kernels of
    ours (one layer: a WTConvNeXt block puts a LayerNorm between two layers); per forward: calls, our kernels, calls
    with a layout copy just before or just after, and the most frequent neighbours (short name and category)."""
    streams: dict = {}
    for r in records:
        streams.setdefault(r.stream, []).append(r)
    calls = kernels = copy_before = copy_after = 0
    before: Counter = Counter()
    after: Counter = Counter()
    for seq in streams.values():
        i = 0
        while i < len(seq):
            if seq[i].category != WTCONV:
                i += 1
                continue
            j = i
            while j + 1 < len(seq) and seq[j + 1].category == WTCONV:
                j += 1
            calls += 1
            kernels += j - i + 1
            if i > 0:
                copy_before += seq[i - 1].category == COPY
                before[(short_name(seq[i - 1].name, 60), seq[i - 1].category)] += 1
            if j + 1 < len(seq):
                copy_after += seq[j + 1].category == COPY
                after[(short_name(seq[j + 1].name, 60), seq[j + 1].category)] += 1
            i = j + 1

    def most(counter):
        return [dict(kernel=k, category=c, per_forward=n / forwards) for (k, c), n in counter.most_common(top)]

    return dict(
        calls_per_forward=calls / forwards,
        kernels_per_forward=kernels / forwards,
        copy_before_per_forward=copy_before / forwards,
        copy_after_per_forward=copy_after / forwards,
        before=most(before),
        after=most(after),
    )


# ----------------------------------------------------------------------------------------------------------
# options and settings


@dataclass
class Options:
    """What to measure and where to write it. ``quick``: small batches and few repeats (a smoke run; the
    compilations still take their time)."""

    out: Path
    parts: tuple[str, ...] = PARTS
    batch: int = 256
    quick: bool = False
    command: str = "python -m benchmarks.profile_models"
    extra: dict = field(default_factory=dict)


def settings(opts: Options) -> dict:
    """The repeat counts and batches of a run (the ``quick`` ones for a smoke run)."""
    if opts.quick:
        return dict(
            batch=min(opts.batch, 8),
            fp32_batch=8,
            forwards=1,
            warmup=2,
            repeats=3,
            latency_batches=(1, 8),
            replays=20,
            layer_calls=5,
            compiled_fp32_layouts=(),
        )
    return dict(
        batch=opts.batch,
        fp32_batch=64,
        forwards=3,
        warmup=3,
        repeats=10,
        latency_batches=(1, 8, 64),
        replays=100,
        layer_calls=20,
        compiled_fp32_layouts=("channels_last",),
    )


def check_options(opts: Options) -> None:
    from wtconv_core.errors import InputError

    unknown = [p for p in opts.parts if p not in PARTS]
    if unknown or not opts.parts:
        raise InputError(
            f"parts must be one or more of {', '.join(PARTS)}; got {' '.join(opts.parts) or 'none'}", parameter="parts"
        )
    if isinstance(opts.batch, bool) or not isinstance(opts.batch, int) or opts.batch < 1:
        raise InputError(f"batch must be a whole number >= 1, got {opts.batch!r}", parameter="batch")


# ----------------------------------------------------------------------------------------------------------
# models, inputs, measurements (CUDA)


def _dtype(torch, name: str):
    return {"fp32": torch.float32, "fp16": torch.float16}[name]


def make_input(torch, batch: int, dtype_name: str, layout: str):
    x = torch.randn(batch, 3, 224, 224, device="cuda", dtype=_dtype(torch, dtype_name))
    return x.contiguous(memory_format=torch.channels_last) if layout == "channels_last" else x


class Models:
    """The eager models (one instance per model, dtype and layout: converting to channels-last changes the
    instance) and their compiled forms, each built on first use and kept."""

    def __init__(self, torch):
        self.torch = torch
        self.eager: dict = {}
        self.compiled: dict = {}
        self.compile_info: dict = {}

    def get(self, name: str, dtype_name: str, layout: str):
        key = (name, dtype_name, layout)
        if key not in self.eager:
            torch = self.torch
            dev, dt = torch.device("cuda"), _dtype(torch, dtype_name)
            if name == OURS:
                from wtconv_torch.fused_module import fuse_wtconv_layers
                from wtconv_torch.wtconvnext import wtconvnext_tiny

                model = fuse_wtconv_layers(wtconvnext_tiny().eval().to(dev, dt))  # the folded weights stay fp32
            else:
                import timm

                model = timm.create_model("convnext_tiny", pretrained=False).eval().to(dev, dt)
            if layout == "channels_last":
                model = model.to(memory_format=torch.channels_last)
            self.eager[key] = model
        return self.eager[key]

    def get_compiled(self, name: str, dtype_name: str, layout: str, x):
        """The compiled model, compiled now (under no_grad, on ``x``) when it is new; the first call's time and
        dynamo's graph and graph-break counters go into ``compile_info``."""
        key = (name, dtype_name, layout)
        if key not in self.compiled:
            torch = self.torch
            from torch._dynamo.utils import counters

            counters.clear()
            compiled = torch.compile(self.get(name, dtype_name, layout), dynamic=False)
            start = time.perf_counter()
            with torch.no_grad():
                compiled(x)
            torch.cuda.synchronize()
            self.compile_info[key] = dict(
                model=name,
                dtype=dtype_name,
                layout=layout,
                batch=x.shape[0],
                first_call_s=time.perf_counter() - start,
                graphs=int(counters["stats"].get("unique_graphs", 0)),
                graph_breaks=int(sum(counters["graph_break"].values())),
                graph_break_reasons=[str(r).splitlines()[0][:200] for r in list(counters["graph_break"])[:5]],
            )
            logger.info("compiled %s %s %s in %.1f s", name, dtype_name, layout, self.compile_info[key]["first_call_s"])
            self.compiled[key] = compiled
        return self.compiled[key]


def profile_trace(torch, fn, x, forwards: int, cuda: bool = True) -> dict:
    """The Chrome trace (as a dict) of ``forwards`` calls of fn(x) under torch.profiler, CPU and (``cuda``) CUDA
    activity, input shapes recorded (they tell a depthwise convolution from the others)."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with torch.no_grad():
        with profile(activities=activities, record_shapes=True) as prof:
            for _ in range(forwards):
                fn(x)
            if cuda:
                torch.cuda.synchronize()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "trace.json"
        prof.export_chrome_trace(str(path))
        return json.loads(path.read_text())


def _warm(torch, fn, x, calls: int) -> None:
    with torch.no_grad():
        for _ in range(calls):
            fn(x)
    torch.cuda.synchronize()


def _error(error: BaseException) -> str:
    return f"{type(error).__name__}: {(str(error).splitlines() or [''])[0][:200]}"


def part_compile(torch, models: Models, s: dict) -> list[dict]:
    rows = []
    for layout in LAYOUTS:
        row = dict(model=OURS, layout=layout, batch=s["batch"])
        try:
            x = make_input(torch, s["batch"], "fp16", layout)
            with torch.no_grad():
                row.update(graph_summary(torch._dynamo.explain(models.get(OURS, "fp16", layout))(x)))
        except Exception as error:  # noqa: BLE001 - recorded, not fatal
            logger.warning("explain %s failed: %s", layout, error)
            row["error"] = _error(error)
        rows.append(row)
    return rows


def graph_summary(explained) -> dict:
    """The numbers of a ``torch._dynamo.explain`` result: graphs, breaks and their reasons (with the user frame),
    our operator's calls in the graphs, how many of them get a channels-last input (a block's MLP runs channels-last
    and permutes back, so even the NCHW model hands most layers channels-last strides) and how many return their
    input's layout (the fake implementation's output as the compiler sees it, wtconv_torch/ops.py:
    channels-last for a channels-last input, else NCHW-contiguous)."""
    import torch

    calls = inputs_channels_last = keeps = 0
    for graph in explained.graphs:
        for node in graph.graph.nodes:
            if node.op != "call_function" or not str(node.target).startswith(OUR_OPERATOR.replace("::", ".")):
                continue
            calls += 1
            x, y = node.args[0].meta.get("example_value"), node.meta.get("example_value")
            if x is None or y is None:
                continue
            channels_last = not x.is_contiguous() and x.is_contiguous(memory_format=torch.channels_last)
            inputs_channels_last += channels_last
            keeps += y.is_contiguous(memory_format=torch.channels_last if channels_last else torch.contiguous_format)
    reasons = []
    for reason in explained.break_reasons:
        frame = reason.user_stack[-1] if reason.user_stack else None
        where = f" ({Path(frame.filename).name}:{frame.lineno})" if frame is not None else ""
        reasons.append(str(reason.reason).splitlines()[0][:200] + where)
    return dict(
        graph_count=explained.graph_count,
        graph_break_count=explained.graph_break_count,
        op_count=explained.op_count,
        break_reasons=reasons,
        our_op_calls=calls,
        our_op_inputs_channels_last=inputs_channels_last,
        our_op_outputs_in_input_layout=keeps,
    )


def part_profile(torch, models: Models, s: dict) -> list[dict]:
    rows = []
    batch, forwards = s["batch"], s["forwards"]
    for mode in MODES:
        for layout in LAYOUTS:
            for name in MODELS:
                row = dict(model=name, mode=mode, layout=layout, dtype="fp16", batch=batch, forwards=forwards)
                try:
                    x = make_input(torch, batch, "fp16", layout)
                    if mode == "eager":
                        fn = models.get(name, "fp16", layout)
                    else:
                        fn = models.get_compiled(name, "fp16", layout, x)
                    _warm(torch, fn, x, s["warmup"])
                    trace = profile_trace(torch, fn, x, forwards)
                    records = device_events(trace)
                    row.update(summarize(records, batch * forwards, forwards))
                    row["our_op_calls_per_forward"] = operator_calls(trace, OUR_OPERATOR) / forwards
                    if name == OURS:
                        row["around_ours"] = around_ours(records, forwards)
                    logger.info(
                        "profile %s %s %s: %.1f µs/image, %.0f launches/forward",
                        name,
                        mode,
                        layout,
                        row["total_us_per_image"],
                        row["launches_per_forward"],
                    )
                except Exception as error:  # noqa: BLE001 - recorded, not fatal
                    logger.warning("profile %s %s %s failed: %s", name, mode, layout, error)
                    row["error"] = _error(error)
                rows.append(row)
                torch.cuda.empty_cache()
    return rows


def part_throughput(torch, models: Models, s: dict) -> list[dict]:
    from wtconv_bench.layers import model_forward_ms

    cases = [("fp16", s["batch"], mode, layout) for mode in MODES for layout in LAYOUTS]
    cases += [("fp32", s["fp32_batch"], "eager", layout) for layout in LAYOUTS]
    cases += [("fp32", s["fp32_batch"], "compiled", layout) for layout in s["compiled_fp32_layouts"]]
    rows = []
    for dtype_name, batch, mode, layout in cases:
        for name in MODELS:
            row = dict(model=name, mode=mode, layout=layout, dtype=dtype_name, batch=batch)
            try:
                if mode == "eager":
                    model = models.get(name, dtype_name, layout)
                else:
                    model = models.get_compiled(name, dtype_name, layout, make_input(torch, batch, dtype_name, layout))
                ms = model_forward_ms(
                    torch,
                    model,
                    batch,
                    _dtype(torch, dtype_name),
                    channels_last=layout == "channels_last",
                    warmup=s["warmup"],
                    repeats=s["repeats"],
                )
                row.update(ms=ms, img_per_s=batch / (ms * 1e-3))
                logger.info(
                    "throughput %s %s %s %s B=%d: %.0f img/s", name, mode, layout, dtype_name, batch, row["img_per_s"]
                )
            except Exception as error:  # noqa: BLE001 - recorded, not fatal
                logger.warning("throughput %s %s %s %s failed: %s", name, mode, layout, dtype_name, error)
                row["error"] = _error(error)
            rows.append(row)
            torch.cuda.empty_cache()
    return rows


def depthwise_layers(model) -> list[tuple[int, object]]:
    """(stage, layer) for every block's spatial convolution: ``stages[i].blocks[j].conv_dw`` in both models (our
    FusedWTConv2d in WTConvNeXt, timm's depthwise nn.Conv2d in ConvNeXt)."""
    return [(i, block.conv_dw) for i, stage in enumerate(model.stages) for block in stage.blocks]


def layer_inputs(torch, model, layers, x) -> list:
    """The input each layer gets in one forward of ``model`` on ``x`` (copies, same strides)."""
    seen: dict[int, object] = {}
    hooks = [
        layer.register_forward_pre_hook(partial(lambda k, _module, args: seen.setdefault(k, args[0].clone()), k))
        for k, (_, layer) in enumerate(layers)
    ]
    try:
        with torch.no_grad():
            model(x)
    finally:
        for hook in hooks:
            hook.remove()
    return [seen[k] for k in range(len(layers))]


def part_latency(torch, models: Models, s: dict) -> dict:
    from wtconv_bench.layers import time_graph

    graphs, layers_out = [], []
    for layout in LAYOUTS:
        for name in MODELS:
            model = models.get(name, "fp16", layout)
            for batch in s["latency_batches"]:
                row = dict(model=name, layout=layout, dtype="fp16", batch=batch)
                try:
                    x = make_input(torch, batch, "fp16", layout)
                    _warm(torch, model, x, s["warmup"])
                    summary = summarize(device_events(profile_trace(torch, model, x, 1)), batch, 1)
                    row["launches_per_forward"] = summary["launches_per_forward"]
                    row["us_per_image"] = summary["us_per_image"]
                    with torch.no_grad():
                        row["ms"] = time_graph(torch, [partial(model, x)], s["replays"])
                    logger.info("latency %s %s B=%d: %.3f ms", name, layout, batch, row["ms"])
                except Exception as error:  # noqa: BLE001 - recorded, not fatal
                    logger.warning("latency %s %s B=%d failed: %s", name, layout, batch, error)
                    row["error"] = _error(error)
                graphs.append(row)
                torch.cuda.empty_cache()
            try:
                layers = depthwise_layers(model)
                inputs = layer_inputs(torch, model, layers, make_input(torch, 1, "fp16", layout))
                for index, ((stage, layer), x) in enumerate(zip(layers, inputs, strict=True)):
                    with torch.no_grad():
                        ms = time_graph(torch, [partial(layer, x)] * s["layer_calls"], s["replays"])
                    layers_out.append(
                        dict(model=name, layout=layout, stage=stage, index=index, shape=list(x.shape), us=ms * 1e3)
                    )
            except Exception as error:  # noqa: BLE001 - recorded, not fatal
                logger.warning("per-layer %s %s failed: %s", name, layout, error)
                layers_out.append(dict(model=name, layout=layout, error=_error(error)))
    return dict(graphs=graphs, layers=layers_out)


# ----------------------------------------------------------------------------------------------------------
# the report


def _num(v, fmt=".1f") -> str:
    return "–" if v is None else format(v, fmt)


def _ratio(a, b, fmt=".2f") -> str:
    return "–" if a is None or not b else format(a / b, fmt) + "×"


def _find(rows, **key):
    return next((r for r in rows if all(r.get(k) == v for k, v in key.items())), None)


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def markdown(result: dict) -> str:
    """The tables of a result (whatever parts it holds)."""
    meta = result.get("meta", {})
    lines = [
        f"# WTConvNeXt-T (our kernels) against ConvNeXt-T (timm): per-kernel profile — {meta.get('gpu', '?')}",
        "",
        f"Command: `{meta.get('command', '?')}`  ",
        f"torch {meta.get('torch', '?')}, CUDA {meta.get('cuda', '?')}, cuDNN {meta.get('cudnn', '?')}, "
        f"{meta.get('date', '?')}. Inputs 224², random weights; inference under torch.no_grad.",
        "",
    ]
    for part, stamp in meta.get("parts", {}).items():
        lines.append(
            f"- {part}: `{stamp.get('command', '?')}`, {stamp.get('date', '?')}, {stamp.get('seconds', 0):.0f} s"
        )
    if meta.get("parts"):
        lines.append("")
    if result.get("failures"):
        lines += ["## Failures", ""] + [f"- {f}" for f in result["failures"]] + [""]
    lines += _compile_tables(result.get("compile", []), result.get("compile_info", []))
    lines += _profile_tables(result.get("profile", []))
    lines += _throughput_table(result.get("throughput", []))
    lines += _latency_tables(result.get("latency", {}))
    return "\n".join(lines) + "\n"


def _compile_tables(rows: list[dict], info: list[dict]) -> list[str]:
    out = []
    if rows:
        out += [
            "## Graph breaks (torch._dynamo.explain, WTConvNeXt-T fp16)",
            "",
            "| layout | graphs | graph breaks | our op calls in the graphs | of them with a channels-last input | "
            "outputs in the input's layout | break reasons |",
            "|---|---|---|---|---|---|---|",
        ]
        for r in rows:
            if "error" in r:
                out.append(f"| {r['layout']} | failed: {_cell(r['error'])} | | | | | |")
                continue
            reasons = "; ".join(_cell(x) for x in r["break_reasons"]) or "none"
            out.append(
                f"| {r['layout']} | {r['graph_count']} | {r['graph_break_count']} | {r['our_op_calls']} | "
                f"{r['our_op_inputs_channels_last']} | {r['our_op_outputs_in_input_layout']} | {reasons} |"
            )
        out.append("")
    if info:
        out += [
            "Compilations (torch.compile, default mode; first call, dynamo's counters):",
            "",
            "| model | dtype | layout | batch | first call s | graphs | graph breaks |",
            "|---|---|---|---|---|---|---|",
        ]
        out += [
            f"| {i['model']} | {i['dtype']} | {i['layout']} | {i['batch']} | {i['first_call_s']:.1f} | {i['graphs']} | "
            f"{i['graph_breaks']} |"
            for i in info
        ]
        out.append("")
    return out


def _profile_tables(rows: list[dict]) -> list[str]:
    if not rows:
        return []
    batch = rows[0].get("batch")
    out = [
        f"## CUDA time per image by category (fp16, B={batch}, torch.profiler)",
        "",
        "µs of kernel time per image; ratio = WTConvNeXt-T ÷ ConvNeXt-T (> 1: ours takes longer). Launches are "
        "kernels per forward.",
        "",
    ]
    for mode in MODES:
        for layout in LAYOUTS:
            ours, conv = (
                _find(rows, model=OURS, mode=mode, layout=layout),
                _find(rows, model=CONVNEXT, mode=mode, layout=layout),
            )
            if ours is None and conv is None:
                continue
            out += [f"### {mode}, {layout}", ""]
            failed = [f"{r['model']}: {r['error']}" for r in (ours, conv) if r and "error" in r]
            out += [f"Failed: {_cell(f)}" for f in failed] + ([""] if failed else [])
            o = ours if ours and "error" not in ours else {}
            c = conv if conv and "error" not in conv else {}
            out += [
                "| category | WTConvNeXt-T µs | launches | ConvNeXt-T µs | launches | ratio |",
                "|---|---|---|---|---|---|",
            ]
            for cat in CATEGORIES:
                a, b = o.get("us_per_image", {}).get(cat), c.get("us_per_image", {}).get(cat)
                if not a and not b:
                    continue
                la = o.get("category_launches_per_forward", {}).get(cat)
                lb = c.get("category_launches_per_forward", {}).get(cat)
                out.append(
                    f"| {cat} | {_num(a, '.2f')} | {_num(la, '.0f')} | {_num(b, '.2f')} | {_num(lb, '.0f')} | "
                    f"{_ratio(a, b)} |"
                )
            a, b = o.get("total_us_per_image"), c.get("total_us_per_image")
            out.append(
                f"| **total** | **{_num(a, '.2f')}** | {_num(o.get('launches_per_forward'), '.0f')} | "
                f"**{_num(b, '.2f')}** | {_num(c.get('launches_per_forward'), '.0f')} | **{_ratio(a, b)}** |"
            )
            out.append("")
            around = o.get("around_ours")
            if around:
                out.append(
                    f"Around our kernels, per forward: {around['calls_per_forward']:.0f} calls "
                    f"({around['kernels_per_forward']:.0f} kernels), {o.get('our_op_calls_per_forward', 0):.0f} of "
                    f"them through the custom operator (eager FusedWTConv2d launches without it), a layout copy right "
                    f"before {around['copy_before_per_forward']:.0f} and right after "
                    f"{around['copy_after_per_forward']:.0f} of them. "
                    "Before: "
                    + ", ".join(
                        f"`{_cell(n['kernel'])}` ({n['category']}) {n['per_forward']:.0f}" for n in around["before"]
                    )
                    + ". After: "
                    + ", ".join(
                        f"`{_cell(n['kernel'])}` ({n['category']}) {n['per_forward']:.0f}" for n in around["after"]
                    )
                    + "."
                )
                out.append("")
    out += [f"## Top {TOP_KERNELS} kernels (fp16, B={batch}, µs per image)", ""]
    for r in rows:
        if "error" in r:
            continue
        out += [
            f"### {r['model']}, {r['mode']}, {r['layout']}",
            "",
            "| kernel | category | operator | µs/image | launches/forward |",
            "|---|---|---|---|---|",
        ]
        out += [
            f"| `{_cell(short_name(k['name']))}` | {k['category']} | {_cell(k['op'])} | {k['us_per_image']:.2f} | "
            f"{k['launches_per_forward']:.0f} |"
            for k in r["top"]
        ]
        out.append("")
    return out


def _throughput_table(rows: list[dict]) -> list[str]:
    if not rows:
        return []
    out = [
        "## Throughput (img/s, median of 10 forward passes after warm-up)",
        "",
        "| mode | dtype | batch | layout | WTConvNeXt-T | ConvNeXt-T | ratio (ours ÷ ConvNeXt) |",
        "|---|---|---|---|---|---|---|",
    ]
    seen = []
    for r in rows:
        key = (r["mode"], r["dtype"], r["batch"], r["layout"])
        if key in seen:
            continue
        seen.append(key)
        pair = [_find(rows, model=m, mode=key[0], dtype=key[1], batch=key[2], layout=key[3]) for m in MODELS]
        cells = [_num(p.get("img_per_s"), ",.0f") if p and "error" not in p else "failed" for p in pair]
        ratio = _ratio(*(p.get("img_per_s") if p else None for p in pair))
        out.append(f"| {key[0]} | {key[1]} | {key[2]} | {key[3]} | {cells[0]} | {cells[1]} | {ratio} |")
    errors = [f"{r['model']} {r['mode']} {r['dtype']} {r['layout']}: {r['error']}" for r in rows if "error" in r]
    return out + [""] + [f"- failed: {_cell(e)}" for e in errors] + ([""] if errors else [])


def _latency_tables(latency: dict) -> list[str]:
    out = []
    graphs = latency.get("graphs", [])
    if graphs:
        out += [
            "## Latency (fp16, one forward captured in a CUDA graph, median replay, ms)",
            "",
            "| layout | batch | WTConvNeXt-T ms | launches | ConvNeXt-T ms | launches | ratio (ours ÷ ConvNeXt) |",
            "|---|---|---|---|---|---|---|",
        ]
        keys = []
        for r in graphs:
            if (r["layout"], r["batch"]) not in keys:
                keys.append((r["layout"], r["batch"]))
        for layout, batch in keys:
            o, c = (_find(graphs, model=m, layout=layout, batch=batch) or {} for m in MODELS)
            out.append(
                f"| {layout} | {batch} | {_num(o.get('ms'), '.3f')} | {_num(o.get('launches_per_forward'), '.0f')} | "
                f"{_num(c.get('ms'), '.3f')} | {_num(c.get('launches_per_forward'), '.0f')} | "
                f"{_ratio(o.get('ms'), c.get('ms'))} |"
            )
        errors = [f"{r['model']} {r['layout']} B={r['batch']}: {r['error']}" for r in graphs if "error" in r]
        out += [""] + [f"- failed: {_cell(e)}" for e in errors] + ([""] if errors else [])
    layers = [r for r in latency.get("layers", []) if "error" not in r]
    if layers:
        out += [
            "### B = 1: the 18 WTConv layers against ConvNeXt's 18 depthwise convolutions (µs, each layer alone in a "
            "CUDA graph, on its input from the model)",
            "",
            "| layout | stage | shape | layers | WTConv µs (sum) | depthwise µs (sum) | ratio |",
            "|---|---|---|---|---|---|---|",
        ]
        for layout in LAYOUTS:
            stages = sorted({r["stage"] for r in layers if r["layout"] == layout})
            for stage in [*stages, None]:
                sums = []
                for model in MODELS:
                    sel = [
                        r
                        for r in layers
                        if r["layout"] == layout and r["model"] == model and stage in (None, r["stage"])
                    ]
                    sums.append((sum(r["us"] for r in sel), len(sel), sel[0]["shape"] if sel else None))
                shape = "all" if stage is None else "×".join(map(str, sums[0][2] or sums[1][2] or []))
                out.append(
                    f"| {layout} | {'total' if stage is None else stage} | {shape} | {sums[0][1]} / {sums[1][1]} | "
                    f"{sums[0][0]:.1f} | {sums[1][0]:.1f} | {_ratio(sums[0][0], sums[1][0])} |"
                )
        out.append("")
    out += [
        f"- per-layer failed: {r['model']} {r['layout']}: {_cell(r['error'])}"
        for r in latency.get("layers", [])
        if "error" in r
    ]
    return out


# ----------------------------------------------------------------------------------------------------------
# the run


def load_previous(path: Path) -> dict:
    """An earlier result in the output folder (its other parts are kept), or {} when there is none or it is not
    readable JSON."""
    try:
        previous = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return previous if isinstance(previous, dict) else {}


def run(opts: Options) -> dict:
    """Measure ``opts.parts`` (in the order of PARTS) and write profile_models.json and .md into ``opts.out`` after
    each part; return the result. ConfigurationError without a CUDA GPU, timm or our kernel library; InputError
    for bad options."""
    import torch

    from wtconv_core.errors import ConfigurationError

    check_options(opts)
    if not torch.cuda.is_available():
        raise ConfigurationError("profiling the models needs a CUDA GPU (torch.cuda.is_available() is False)")
    if set(opts.parts) - {"compile"}:
        try:
            import timm  # noqa: F401 - ConvNeXt-T comes from timm
        except ImportError as error:
            raise ConfigurationError(f"profiling ConvNeXt-T needs timm ({error}): pip install timm") from error
    from wtconv_torch import cuda_kernels

    try:
        cuda_kernels.register()
    except FileNotFoundError as error:
        raise ConfigurationError(str(error)) from error
    torch.backends.cudnn.benchmark = False  # as the layer benchmark: cuDNN's heuristics, no autotuning
    s = settings(opts)
    opts.out.mkdir(parents=True, exist_ok=True)
    json_path = opts.out / JSON_NAME
    result = load_previous(json_path)
    meta = dict(
        result.get("meta", {}),
        gpu=torch.cuda.get_device_name(),
        torch=torch.__version__,
        cuda=torch.version.cuda,
        cudnn=torch.backends.cudnn.version(),
        date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        command=opts.command,
        settings={k: list(v) if isinstance(v, tuple) else v for k, v in s.items()},
        **opts.extra,
    )
    meta.setdefault("parts", {})
    result["meta"] = meta
    result["failures"] = [f for f in result.get("failures", []) if f.split(":")[0] not in opts.parts]
    models = Models(torch)

    def save():
        result["compile_info"] = list(models.compile_info.values()) or result.get("compile_info", [])
        json_path.write_text(json.dumps(result, indent=1))
        (opts.out / MD_NAME).write_text(markdown(result))

    measure = dict(compile=part_compile, profile=part_profile, throughput=part_throughput, latency=part_latency)
    for part in PARTS:
        if part not in opts.parts:
            continue
        start = time.perf_counter()
        logger.info("part %s", part)
        try:
            result[part] = measure[part](torch, models, s)
        except Exception as error:  # noqa: BLE001 - one part's failure is recorded, the others still run
            logger.warning("part %s failed: %s", part, error)
            result[part] = {} if part == "latency" else []
            result["failures"].append(f"{part}: {_error(error)}")
        meta["parts"][part] = dict(
            command=opts.command,
            date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            seconds=time.perf_counter() - start,
        )
        save()
        torch.cuda.empty_cache()
    return result
