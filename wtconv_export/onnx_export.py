"""ONNX export of models containing WTConv2d layers: one ``wtconv::WTConv2d`` node per layer (the plugin's fields as
attributes) or the standard-op subgraph, in fp32 or fp16, rendered for the runtime that runs it (onnx_render.py;
docs/onnx_export.md; docs/design.md §4, §5)."""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import logging
import os
import warnings
from collections.abc import Sequence

import torch
import torch.nn as nn
import torch.nn.functional as F

from wtconv_core.errors import InputError, ModelError
from wtconv_core.files import atomic_path
from wtconv_core.progress import Progress
from wtconv_export.onnx_models import module_description
from wtconv_export.onnx_render import DEFAULT_LAYOUT, DEFAULT_RUNTIME, RUNTIMES, check_layout, render
from wtconv_libs import contract
from wtconv_libs.contract import METADATA_PREFIX
from wtconv_torch.folding import FoldedWTConv, fold_wtconv
from wtconv_torch.fused_module import FusedWTConv2d
from wtconv_torch.ops import plugin_can_run
from wtconv_torch.published import (
    find_wtconv_layers,
    is_published_wtconv,
    published_to_wtconv2d,
    replace_submodule,
    wtconv_layer_config,
)

OPS_CHOICES = ("plugin", "standard")
PRECISION_CHOICES = ("fp32", "fp16")
# Opset 20 is the first with ONNX Gelu, which ONNX Runtime fuses (with the bias before it: BiasGelu); at 18 the
# exporter spells GELU as Div, Erf, Add, Mul, Mul, which it does not. TensorRT 10 and 11 parse 20 (docs/onnx_export.md).
DEFAULT_OPSET = 20
MIN_OPSET = 18  # the standard-op WTConv2d's Pad and Slice forms; LayerNormalization needs 17
INPUT_NAME = "input"
OUTPUT_NAME = "output"
DYNAMIC_AXES = ("batch", "height", "width")

logger = logging.getLogger(__name__)

_TORCH_DTYPES = {"fp32": torch.float32, "fp16": torch.float16}


class NoWTConvWarning(UserWarning):
    """The exported model has no WTConv2d layer (it is exported anyway)."""


# ---------------------------------------------------------------------------------------------------
# Export-time modules
# ---------------------------------------------------------------------------------------------------


# One small custom operator per layer, carrying only its index, that the translation table turns into the layer's
# ONNX: seconds, where attributes in the FX graph take minutes (docs/onnx_export.md, "What the graph contains").
@torch.library.custom_op("wtconv_export::onnx_wtconv2d_node", mutates_args=())
def _onnx_node_op(x: torch.Tensor, layer: int, stride: int, channels_last: bool) -> torch.Tensor:
    raise RuntimeError("wtconv_export::onnx_wtconv2d_node only exists while exporting to ONNX")


@_onnx_node_op.register_fake
def _(x, layer, stride, channels_last):
    if channels_last:  # (N, H, W, C) -> (N, ceil(H/s), ceil(W/s), C) (docs/design.md §4)
        b, h, w, c = x.shape
        return x.new_empty((b, (h + stride - 1) // stride, (w + stride - 1) // stride, c))
    b, c, h, w = x.shape
    return x.new_empty((b, c, (h + stride - 1) // stride, (w + stride - 1) // stride))


def _wtconv2d_op_schema():
    """The ONNX OpSchema of our node (needed by onnxscript to record a custom-domain op)."""
    from onnx.defs import OpSchema

    kinds = {
        **{f: OpSchema.AttrType.INT for f in contract.INT_FIELDS},
        **{f: OpSchema.AttrType.FLOATS for f in contract.FLOAT_FIELDS},
        contract.FIELD_CHANNELS_LAST: OpSchema.AttrType.INT,
        contract.FIELD_PLUGIN_VERSION: OpSchema.AttrType.STRING,
        contract.FIELD_PLUGIN_NAMESPACE: OpSchema.AttrType.STRING,
    }
    return OpSchema(
        contract.OP_TYPE,
        contract.ONNX_DOMAIN,
        1,
        doc="Fused wavelet convolution (wtconv-trt, docs/design.md §2, §4); folded fp32 weights as attributes.",
        inputs=[OpSchema.FormalParameter("x", "T")],
        outputs=[OpSchema.FormalParameter("y", "T")],
        type_constraints=[("T", ["tensor(float)", "tensor(float16)"], "activations, fp32 or fp16")],
        attributes=[OpSchema.Attribute(name, kind, name) for name, kind in kinds.items()],
    )


def _standard_subgraph(op, x, module: StandardWTConv2d, np_dtype):
    """StandardWTConv2d.forward written in ONNX ops (onnxscript), shapes computed at run time.

    Synthesis uses linearity instead of the published concatenation: IWT([F_LL + R, F_LH, F_HL, F_HH])
    = IWT(F) + IWT([R, 0, 0, 0]), and the LL-only synthesis is R upsampled 2x times 1/2 (a stride-2
    grouped ConvTranspose with 1/2 taps), which needs no reshapes of dynamic shapes.
    """
    import numpy as np
    import onnx_ir as ir

    def const(array, dtype=None):
        return op.Constant(value=ir.tensor(np.ascontiguousarray(np.asarray(array, dtype=dtype or np_dtype))))

    c, k, levels = module.channels, module.kernel_size, module.wt_levels
    pad = k // 2
    m = 2**levels
    haar = const(module.haar.float().numpy())
    half = const(np.full((c, 1, 2, 2), 0.5))
    i64 = np.int64
    out = op.Conv(
        x,
        const(module.base_weight.float().numpy()),
        const(module.base_bias.float().numpy()),
        group=c,
        pads=[pad] * 4,
        kernel_shape=[k, k],
    )
    hw = op.Slice(op.Shape(x), const([2], i64), const([4], i64))  # [H, W]
    extra = op.Mod(op.Sub(const([m, m], i64), op.Mod(hw, const([m, m], i64))), const([m, m], i64))
    pads = op.Concat(const([0, 0, 0, 0, 0, 0], i64), extra, axis=0)  # [begins (4), ends (4)]: bottom/right zeros
    ll = op.Pad(x, pads)
    filtered = []
    for level in range(levels):
        bands = op.Conv(ll, haar, group=c, strides=[2, 2], kernel_shape=[2, 2])
        filtered.append(
            op.Conv(
                bands,
                const(module.wavelet_weight[level].float().numpy()),
                group=4 * c,
                pads=[pad] * 4,
                kernel_shape=[k, k],
            )
        )
        ll = op.Slice(bands, const([0], i64), const([4 * c], i64), const([1], i64), const([4], i64))
    rec = None
    for level in range(levels - 1, -1, -1):
        up = op.ConvTranspose(filtered[level], haar, group=c, strides=[2, 2], kernel_shape=[2, 2])
        rec = (
            up if rec is None else op.Add(up, op.ConvTranspose(rec, half, group=c, strides=[2, 2], kernel_shape=[2, 2]))
        )
    rec = op.Slice(rec, const([0, 0], i64), hw, const([2, 3], i64))  # crop to (H, W)
    out = op.Add(out, rec)
    if module.stride > 1:
        s = module.stride
        big = np.iinfo(np.int64).max
        out = op.Slice(out, const([0, 0], i64), const([big, big], i64), const([2, 3], i64), const([s, s], i64))
    return out


def _translation_table(modules: list, precision: str, opset: int):
    """custom_translation_table for one export: layer i -> modules[i]'s ONNX (a WTConv2d node, or the
    standard-op subgraph written in the export's opset)."""
    import numpy as np
    import onnxscript
    from onnxscript import values

    node_op = values.Op(values.Opset(contract.ONNX_DOMAIN, 1), contract.OP_TYPE, _wtconv2d_op_schema())
    np_dtype = np.float16 if precision == "fp16" else np.float32
    # The newest onnxscript opset module not above the export's (Pad, Slice, Conv ... mean the same from 18 on).
    standard_ops = next(
        getattr(onnxscript, f"opset{v}") for v in range(opset, 0, -1) if hasattr(onnxscript, f"opset{v}")
    )

    def translate(x, layer: int, stride: int, channels_last: bool):
        module = modules[layer]
        if isinstance(module, WTConv2dPluginNode):
            # channels_last on every node, 0 or 1: TensorRT's parser warns about a listed plugin field left out.
            return node_op(x, **module.onnx_attributes, **{contract.FIELD_CHANNELS_LAST: int(channels_last)})
        return _standard_subgraph(standard_ops, x, module, np_dtype)

    return {torch.ops.wtconv_export.onnx_wtconv2d_node.default: translate}


class NodeAttributes(dict):
    """A node's attributes. A dict subclass is one leaf to torch.export, which walks every module attribute before
    and after tracing: a plain dict's lists of weights were millions of leaves (a third of a WTConvNeXt-T export)."""


class WTConv2dPluginNode(FusedWTConv2d):
    """A FusedWTConv2d that exports as one ``wtconv::WTConv2d`` node carrying the plugin fields.

    The attributes are plain Python values computed here, at construction, outside the traced region
    (docs/design.md §5). In eager mode the module runs the custom operator (the executable spec on the
    CPU), so the prepared model is still runnable and comparable. ``channels_last``: x and y are (N, H, W, C)
    (set by the channels-last rendering, onnx_render.py).
    """

    def __init__(self, folded: FoldedWTConv, layer: int = 0):
        super().__init__(folded)
        self.layer = layer
        self.channels_last = False
        self.onnx_attributes = NodeAttributes(folded.attributes())
        self.onnx_attributes[contract.FIELD_PLUGIN_VERSION] = contract.PLUGIN_VERSION
        self.onnx_attributes[contract.FIELD_PLUGIN_NAMESPACE] = contract.PLUGIN_NAMESPACE

    def _apply(self, fn, recurse=True):
        # Folded weights stay fp32 whatever ``model.half()`` does to the rest (docs/design.md §2.4).
        super()._apply(fn, recurse)
        for name in ("base_weight", "base_bias", "wavelet_weight"):
            buf = getattr(self, name)
            if buf.is_floating_point() and buf.dtype != torch.float32:
                setattr(self, name, buf.float())
        return self

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if torch.compiler.is_exporting():
            return torch.ops.wtconv_export.onnx_wtconv2d_node(x, self.layer, self.stride, self.channels_last)
        if self.channels_last:
            return super().forward(x.permute(0, 3, 1, 2)).permute(0, 2, 3, 1)
        return super().forward(x)


def _haar_filters(channels: int) -> torch.Tensor:
    """(4C, 1, 2, 2) exact ±1/2 Haar taps, subband order LL, LH, HL, HH (docs/design.md §2.2)."""
    taps = (
        torch.tensor(
            [
                [[1.0, 1.0], [1.0, 1.0]],
                [[1.0, 1.0], [-1.0, -1.0]],
                [[1.0, -1.0], [1.0, -1.0]],
                [[1.0, -1.0], [-1.0, 1.0]],
            ]
        )
        * 0.5
    )
    return taps[:, None].repeat(channels, 1, 1, 1)


class StandardWTConv2d(nn.Module):
    """The published WTConv2d computation from folded weights, in operators every runtime has.

    Same algorithm as WTConv2d.forward (docs/design.md §2.3); the only differences are the
    folded scales and exact 1/2 taps (both below fp32 rounding) and a shape-generic odd-size pad.
    """

    def __init__(self, folded: FoldedWTConv, layer: int = 0):
        super().__init__()
        self.layer = layer
        c, k, levels = folded.channels, folded.kernel_size, folded.wt_levels
        self.channels, self.kernel_size, self.wt_levels, self.stride = c, k, levels, folded.stride
        bw, bb, ww = folded.tensors()
        self.register_buffer("base_weight", bw.reshape(c, 1, k, k))
        self.register_buffer("base_bias", bb)
        self.register_buffer("wavelet_weight", ww.reshape(levels, 4 * c, 1, k, k))
        self.register_buffer("haar", _haar_filters(c).to(bw.dtype))

    def extra_repr(self) -> str:
        return f"{self.channels}, kernel_size={self.kernel_size}, wt_levels={self.wt_levels}, stride={self.stride}"

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if torch.compiler.is_exporting():  # emitted by _standard_subgraph, the same computation in ONNX ops
            return torch.ops.wtconv_export.onnx_wtconv2d_node(x, self.layer, self.stride, False)
        c, pad, levels = self.channels, self.kernel_size // 2, self.wt_levels
        h, w = x.shape[-2], x.shape[-1]
        out = F.conv2d(x, self.base_weight, self.base_bias, padding=pad, groups=c)
        # One zero pad to a multiple of 2^L instead of a pad-to-even per level: the same values, since no output
        # pixel reads the extra coefficients (docs/design.md §2.4), and small symbolic shapes for torch.export.
        m = 2**levels
        ll = F.pad(x, (0, (m - w % m) % m, 0, (m - h % m) % m))
        filtered = []
        for level in range(levels):
            bands = F.conv2d(ll, self.haar, stride=2, groups=c)  # (B, 4C, h/2, w/2)
            filtered.append(F.conv2d(bands, self.wavelet_weight[level], padding=pad, groups=4 * c))
            ll = bands[:, 0::4]  # unfiltered LL
        rec = None
        for level in range(levels - 1, -1, -1):
            f = filtered[level]
            if rec is not None:
                b, _, hh, ww = f.shape
                f = f.reshape(b, c, 4, hh, ww)
                f = torch.cat([f[:, :, :1] + rec.unsqueeze(2), f[:, :, 1:]], dim=2).reshape(b, 4 * c, hh, ww)
            rec = F.conv_transpose2d(f, self.haar, stride=2, groups=c)
        out = out + rec[:, :, :h, :w]
        if self.stride > 1:
            out = out[:, :, :: self.stride, :: self.stride]
        return out


# ---------------------------------------------------------------------------------------------------
# Preparing a model
# ---------------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class LayerInfo:
    """One WTConv2d layer of an exported model, in module order (= ONNX node order)."""

    name: str  # module path, e.g. "stages.0.blocks.1.conv_dw"
    channels: int
    kernel_size: int
    wt_levels: int
    stride: int


def _folded_of(module: nn.Module, path: str) -> FoldedWTConv:
    """The folded weights of a layer find_wtconv_layers returned (a published layer through its conversion,
    published.py, which checks it computes the published output)."""
    if isinstance(module, FusedWTConv2d):
        return module.folded()
    if is_published_wtconv(module):
        module = published_to_wtconv2d(module, path)
    return fold_wtconv(module)


def check_plugin_limits(model: nn.Module) -> None:
    """ModelError naming the layers the TensorRT plugin cannot run, and the limit."""
    problems = []
    for path, module in find_wtconv_layers(model):
        config = wtconv_layer_config(module, path)
        reason = plugin_can_run(config.kernel_size, config.wt_levels, config.stride)
        if reason is not None:
            problems.append(f"layer '{path}': {reason}")
    if problems:
        raise ModelError(
            "the WTConv2d plugin cannot run "
            + "; ".join(problems)
            + f" (limits: kernel_size <= {contract.MAX_KERNEL_SIZE}, wt_levels <= "
            f"{contract.MAX_WT_LEVELS}); export with ops='standard' (--ops standard) instead"
        )


def prepare_for_export(
    model: nn.Module,
    ops: str = "plugin",
    precision: str = "fp32",
    runtime: str = DEFAULT_RUNTIME,
    layout: str = DEFAULT_LAYOUT,
) -> tuple[nn.Module, list[LayerInfo]]:
    """A copy of ``model`` ready for torch.onnx.export, and the WTConv2d layers it holds.

    WTConv2d layers (ours, FusedWTConv2d, the published class: find_wtconv_layers) become WTConv2dPluginNode
    (ops="plugin") or StandardWTConv2d (ops="standard"); then onnx_render.render renders the copy for ``runtime``
    ("onnxruntime" or "tensorrt": where fp16 LayerNorms compute) and ``layout`` ("nchw", or "channels_last" for a
    WTConvNeXt's blocks) and casts it to ``precision`` (the folded plugin weights stay fp32). ModelError for a layer
    the plugin cannot run (ops="plugin") or a published layer the WTConv2d operator cannot compute; InputError for
    an option that does not fit.
    """
    if ops not in OPS_CHOICES:
        raise InputError(f"ops must be one of {OPS_CHOICES}, got {ops!r}")
    if precision not in PRECISION_CHOICES:
        raise InputError(f"precision must be one of {PRECISION_CHOICES}, got {precision!r}")
    if runtime not in RUNTIMES:
        raise InputError(f"runtime must be one of {RUNTIMES}, got {runtime!r}")
    check_layout(layout, ops, model)
    if ops == "plugin":
        check_plugin_limits(model)
    model = copy.deepcopy(model).cpu().float().eval()
    layers = []
    for index, (path, module) in enumerate(find_wtconv_layers(model)):
        folded = _folded_of(module, path)
        layers.append(LayerInfo(path, folded.channels, folded.kernel_size, folded.wt_levels, folded.stride))
        node = WTConv2dPluginNode(folded, index) if ops == "plugin" else StandardWTConv2d(folded, index)
        model = replace_submodule(model, path, node)
    return render(model, precision, runtime, layout), layers  # render ends in eval(): the nodes are new modules


# ---------------------------------------------------------------------------------------------------
# Export
# ---------------------------------------------------------------------------------------------------


@dataclasses.dataclass
class ExportResult:
    path: str
    ops: str
    precision: str
    opset: int
    runtime: str  # the runtime the graph is rendered for (onnx_render.RUNTIMES)
    layout: str  # "nchw", or "channels_last" blocks (onnx_render.LAYOUTS)
    layers: list  # LayerInfo per WTConv2d layer (ONNX node order)
    num_wtconv_nodes: int  # WTConv2d nodes in the written graph (0 for ops="standard")
    input_shape: tuple  # the example input shape the graph was traced with
    dynamic: bool
    size_bytes: int

    def summary(self) -> str:
        dims = (
            f"[batch, {self.input_shape[1]}, height, width] (dynamic)"
            if self.dynamic
            else f"{list(self.input_shape)} (static)"
        )
        if self.ops == "plugin":
            what = (
                f"{self.num_wtconv_nodes} {contract.OP_TYPE} nodes (domain '{contract.ONNX_DOMAIN}', "
                f"plugin_version '{contract.PLUGIN_VERSION}')"
            )
        else:
            what = f"standard ONNX ops only ({len(self.layers)} WTConv2d layers as Conv/ConvTranspose)"
        layout = ", channels-last blocks" if self.layout == "channels_last" else ""
        return (
            f"wrote {self.path}: {what}, precision {self.precision}, opset {self.opset}, rendered for {self.runtime}"
            f"{layout}, input '{INPUT_NAME}' {dims}, {self.size_bytes / 1e6:.1f} MB, onnx.checker passed"
        )


@contextlib.contextmanager
def _quiet_exporter_logs():
    registration = logging.getLogger("torch.onnx._internal.exporter._registration")
    level = registration.level
    registration.setLevel(logging.ERROR)
    try:
        yield
    finally:
        registration.setLevel(level)


def check_output_path(path: str) -> str:
    """The absolute output path; InputError when it cannot be written (checked before the slow export)."""
    path = os.path.abspath(os.fspath(path))
    directory = os.path.dirname(path)
    if os.path.isdir(path):
        raise InputError(f"output path {path} is a directory; give a file name such as model.onnx")
    if not os.path.isdir(directory):
        raise InputError(f"cannot write {path}: directory {directory} does not exist")
    if not os.access(directory, os.W_OK | os.X_OK):
        raise InputError(f"cannot write {path}: directory {directory} is not writable")
    if os.path.exists(path) and not os.access(path, os.W_OK):
        raise InputError(f"cannot write {path}: the existing file is not writable")
    return path


def _dynamic_shapes(rank: int):
    from torch.export import Dim

    dims = {0: Dim.DYNAMIC, 2: Dim.DYNAMIC, 3: Dim.DYNAMIC}
    return ({i: d for i, d in dims.items() if i < rank},)


def _name_dynamic_axes(model_proto, dynamic: bool) -> None:
    """Name the graph input's and output's dynamic dims batch / height / width (the exporter's names
    are symbols like s77). The output's batch dim is the input's; other output dims keep their formula."""
    if not dynamic:
        return
    inp = model_proto.graph.input[0].type.tensor_type.shape.dim
    renames = {}
    for index, label in zip((0, 2, 3), DYNAMIC_AXES, strict=True):
        if index < len(inp) and inp[index].dim_param:
            renames[inp[index].dim_param] = label
    for value in list(model_proto.graph.input) + list(model_proto.graph.output):
        for dim in value.type.tensor_type.shape.dim:
            if dim.dim_param in renames:
                dim.dim_param = renames[dim.dim_param]


def export_onnx(
    model: nn.Module,
    path: str | os.PathLike,
    *,
    ops: str = "plugin",
    precision: str = "fp32",
    input_shape: Sequence[int] = (1, 3, 224, 224),
    dynamic: bool = True,
    opset: int = DEFAULT_OPSET,
    runtime: str = DEFAULT_RUNTIME,
    layout: str = DEFAULT_LAYOUT,
    metadata: dict | None = None,
) -> ExportResult:
    """Export ``model`` (any nn.Module containing WTConv2d layers) to ONNX at ``path``.

    Args:
        ops: "plugin" (one wtconv::WTConv2d node per layer) or "standard" (standard ONNX ops only).
        precision: "fp32" or "fp16" (see the module docstring for what stays fp32).
        input_shape: (B, C, H, W) of the example input used for tracing (and the shape when not dynamic).
        dynamic: batch, height and width dynamic (named batch / height / width in the graph).
        opset: the default-domain opset (default 20, the first with ONNX Gelu).
        runtime: "onnxruntime" or "tensorrt", the runtime the graph is rendered for: an fp16 LayerNorm reads and
            writes fp16 for ONNX Runtime (its statistics in fp32, ONNX's stash_type) and runs in fp32 between two
            Casts for TensorRT (whose strongly typed networks compute it in its input's type). fp32 exports are
            the same for both.
        layout: "nchw", or "channels_last" (a WTConvNeXt, ops="plugin"): every block stays (N, H, W, C) around
            WTConv2d nodes with channels_last=1; only the stem and downsampling convolutions are transposed.
        metadata: extra metadata_props (keys are prefixed with "wtconv_trt."), e.g. the model's source
            (onnx_models.build_model's description). Without a "source", the file records source "module" and the
            model's class (onnx_models.module_description): validate it from Python with the module in hand.

    The file is written atomically (a temporary file in the same directory, renamed when complete).
    Warns (NoWTConvWarning) if the model has no WTConv2d; ModelError for a layer the plugin cannot run,
    InputError for an unwritable path or bad arguments. Each of the four steps (fold, trace and convert, check,
    write) is logged at INFO as it finishes: WTConvNeXt-T takes tens of seconds.
    """
    import onnx

    path = check_output_path(path)
    input_shape = tuple(int(d) for d in input_shape)
    if len(input_shape) != 4 or min(input_shape) < 1:
        raise InputError(f"input_shape must be (B, C, H, W) with positive sizes, got {input_shape}")
    if not isinstance(opset, int) or opset < MIN_OPSET:
        raise InputError(
            f"opset must be an integer >= {MIN_OPSET} (the standard-op WTConv2d uses opset-18 Pad/Slice "
            f"forms; TensorRT 10 and 11 parse 18 to 20 and later), got {opset!r}"
        )
    with warnings.catch_warnings(), _quiet_exporter_logs():
        # torch.export's own deprecation chatter (FutureWarning from its pytree, "torchvision is not
        # installed" from the exporter's registry) says nothing about the user's model.
        warnings.filterwarnings("ignore", category=FutureWarning)
        warnings.filterwarnings("ignore", category=DeprecationWarning)
        warnings.filterwarnings("ignore", module=r"torch\.onnx.*")
        progress = Progress(logger, f"export {os.path.basename(path)}", 4, estimate=False)
        prepared, layers = prepare_for_export(model, ops, precision, runtime, layout)
        progress.step(f"{len(layers)} WTConv2d layers folded ({ops}, {precision}, for {runtime}, {layout})")
        layer_modules = sorted(
            (m for m in prepared.modules() if isinstance(m, (WTConv2dPluginNode, StandardWTConv2d))),
            key=lambda m: m.layer,
        )
        # Sizes 0 and 1 are specialised by torch.export; trace dynamic dims with at least 2.
        trace_shape = tuple(max(d, 2) if dynamic and i != 1 else d for i, d in enumerate(input_shape))
        example = torch.randn(trace_shape, generator=torch.Generator().manual_seed(0)).to(_TORCH_DTYPES[precision])
        program = torch.onnx.export(
            prepared,
            (example,),
            dynamo=True,
            opset_version=opset,
            input_names=[INPUT_NAME],
            output_names=[OUTPUT_NAME],
            dynamic_shapes=_dynamic_shapes(len(trace_shape)) if dynamic else None,
            external_data=False,
            verbose=False,
            report=False,
            custom_translation_table=_translation_table(layer_modules, precision, opset),
        )
        progress.step("traced and converted (torch.onnx, dynamo)")
    if not layers:
        warnings.warn(
            f"the model ({type(model).__name__}) has no WTConv2d layer: the ONNX model will "
            f"contain no {contract.OP_TYPE} node; exporting anyway",
            NoWTConvWarning,
            stacklevel=2,
        )
    proto = program.model_proto
    _name_dynamic_axes(proto, dynamic)
    if any(f.name == contract.OP_TYPE for f in proto.functions):
        raise RuntimeError(
            f"the exporter emitted an ONNX local function named {contract.OP_TYPE}; "
            "TensorRT would import it instead of the plugin (docs/design.md §4)"
        )
    num_nodes = contract.count_wtconv_nodes(proto)
    expected = len(layers) if ops == "plugin" else 0
    if num_nodes != expected:
        raise RuntimeError(f"expected {expected} {contract.OP_TYPE} nodes in the exported graph, found {num_nodes}")
    meta = {
        "ops": ops,
        "precision": precision,
        "runtime": runtime,
        "layout": layout,
        "input_shape": ",".join(map(str, input_shape)),
    }
    if "source" not in (metadata or {}):
        meta.update(module_description(model))
    meta.update({k: str(v) for k, v in (metadata or {}).items()})
    for key, value in meta.items():
        entry = proto.metadata_props.add()
        entry.key, entry.value = METADATA_PREFIX + key, value
    onnx.checker.check_model(proto)
    progress.step("onnx.checker passed")

    with atomic_path(path) as tmp:
        onnx.save_model(proto, str(tmp))
    progress.step(f"written to {path}")
    return ExportResult(
        path=path,
        ops=ops,
        precision=precision,
        opset=opset,
        runtime=runtime,
        layout=layout,
        layers=layers,
        num_wtconv_nodes=num_nodes,
        input_shape=input_shape,
        dynamic=dynamic,
        size_bytes=os.path.getsize(path),
    )
