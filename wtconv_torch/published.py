"""The published WTConv2d inside any model: recognised by its class name and parameters (never imported), checked
against its conversion on one input, and converted to ``wtconv_torch.WTConv2d`` by a strict load_state_dict
(docs/onnx_export.md, "Your own model"). Both published versions are taken: today's, whose stride > 1 is an
AvgPool2d(1, stride), and the one before its stride fix, whose ``stride_filter`` computes the same
(wtconv2d.check_stride_filter)."""

from __future__ import annotations

import copy
import dataclasses

import torch
import torch.nn as nn
import torch.nn.functional as F

from wtconv_core.errors import ModelError
from wtconv_torch import haar
from wtconv_torch.fused_module import FusedWTConv2d
from wtconv_torch.wtconv2d import STRIDE_FILTER, WTConv2d, check_stride_filter

__all__ = [
    "PUBLISHED_CLASS_NAME",
    "check_haar_filters",
    "LayerConfig",
    "convert_published_wtconv",
    "find_wtconv_layers",
    "is_published_wtconv",
    "published_wtconv_config",
    "published_to_wtconv2d",
    "wtconv_layer_config",
]

PUBLISHED_CLASS_NAME = "WTConv2d"
PUBLISHED_ATTRIBUTES = ("base_conv", "base_scale", "wavelet_convs", "wavelet_scale", "wt_filter", "iwt_filter")
PUBLISHED_SETTINGS = ("wt_levels", "stride")

# The conversion check: one seeded input whose odd height and width make every wavelet level pad (the published
# pad-to-even path), compared in fp32 relative to the output's scale. The same arithmetic agrees to ~1e-7; a
# different computation misses by orders of magnitude more.
CHECK_INPUT_HW = (7, 5)
CHECK_TOLERANCE = 1e-4


@dataclasses.dataclass(frozen=True)
class LayerConfig:
    """The configuration of one WTConv2d layer, whatever its class."""

    channels: int
    kernel_size: int
    wt_levels: int
    stride: int
    bias: bool = True


def is_published_wtconv(module: nn.Module) -> bool:
    """True for a module whose class, or one of its base classes, is named ``WTConv2d`` and that is not
    ``wtconv_torch.WTConv2d`` (ours is exported as it is). Whether it is an exportable published layer is
    published_wtconv_config's question."""
    if isinstance(module, (WTConv2d, FusedWTConv2d)):
        return False
    return any(cls.__name__ == PUBLISHED_CLASS_NAME for cls in type(module).__mro__)


def _who(module: nn.Module, path: str) -> str:
    cls = type(module)
    name = f"{cls.__module__}.{cls.__qualname__}"
    return f"layer '{path}' ({name})" if path else f"the model ({name})"


def _conv_problem(conv, channels: int, kernel_size: int | None, bias_allowed: bool) -> str | None:
    """Why ``conv`` is not a depthwise, stride-1, dilation-1, zero-'same'-padded ``channels``-channel convolution
    with an odd square kernel (of ``kernel_size`` when given), or None."""
    if not isinstance(conv, nn.Conv2d):
        return f"is a {type(conv).__name__}, not a Conv2d"
    if conv.in_channels != channels or conv.out_channels != channels:
        return (
            f"has in_channels {conv.in_channels} and out_channels {conv.out_channels}; the WTConv2d operator is "
            f"depthwise (in_channels == out_channels == {channels}), as the published layer requires"
        )
    if conv.groups != channels:
        return f"has groups {conv.groups}; the published layer's is depthwise (groups == channels == {channels})"
    kh, kw = conv.kernel_size
    if kh != kw:
        return f"has a {kh}x{kw} kernel; the WTConv2d operator needs a square one"
    if kh % 2 == 0:
        return (
            f"has an even kernel_size {kh}; the WTConv2d operator needs an odd one (its 'same' padding is "
            f"symmetric only for odd kernels)"
        )
    if kernel_size is not None and kh != kernel_size:
        return f"has kernel_size {kh}, the base convolution's is {kernel_size}; the WTConv2d operator needs one size"
    padding = conv.padding if isinstance(conv.padding, str) else tuple(conv.padding)
    if (
        tuple(conv.stride) != (1, 1)
        or tuple(conv.dilation) != (1, 1)
        or padding not in ("same", (kh // 2, kh // 2))
        or conv.padding_mode != "zeros"
    ):
        return (
            f"is not the published stride-1, dilation-1, zero 'same'-padded convolution (stride {tuple(conv.stride)}, "
            f"dilation {tuple(conv.dilation)}, padding {padding!r}, padding_mode {conv.padding_mode!r})"
        )
    if conv.bias is not None and not bias_allowed:
        return "has a bias; the published wavelet convolutions have none"
    return None


def _scale_problem(scale, channels: int) -> str | None:
    weight = getattr(scale, "weight", None)
    if not isinstance(weight, torch.Tensor) or tuple(weight.shape) != (1, channels, 1, 1):
        shape = tuple(weight.shape) if isinstance(weight, torch.Tensor) else None
        return f"must hold a weight of shape (1, {channels}, 1, 1), got {shape}"
    return None


def _wavelet_problem(module: nn.Module, channels: int) -> str | None:
    """Why the layer's wavelet filters are not the published Haar (db1) ones, or None."""
    expected = haar.create_2d_haar_filters(channels, torch.float32)
    for name, want in zip(("wt_filter", "iwt_filter"), expected, strict=True):
        got = getattr(module, name)
        if not isinstance(got, torch.Tensor):
            return f"its {name} is a {type(got).__name__}, not a tensor"
        if got.dim() == 4 and tuple(got.shape[1:]) != (1, 2, 2):
            taps = "x".join(map(str, got.shape[2:]))
            return f"its {name} has {taps} taps (Haar, db1, has 2x2)"
        if tuple(got.shape) != tuple(want.shape):
            return f"its {name} has shape {tuple(got.shape)}, not ({4 * channels}, 1, 2, 2) ({channels} channels)"
        if not torch.allclose(got.detach().float().cpu(), want, rtol=0, atol=1e-6):
            return f"its {name} taps are not the Haar (db1) filters (a 2-tap wavelet other than db1?)"
    return None


def check_haar_filters(module: WTConv2d, path: str = "") -> None:
    """ModelError naming the layer when its wt_filter or iwt_filter is no longer the Haar filter it was built with.
    The filters never train (requires_grad=False) but are parameters, as published, so that checkpoints load: a loop
    over model.parameters() reaches them, and the layer then computes something the WTConv2d operator (every
    runtime's node, the standard-op export) does not."""
    expected = haar.create_2d_haar_filters(module.in_channels, torch.float32)
    for name, want in zip(("wt_filter", "iwt_filter"), expected, strict=True):
        got = getattr(module, name).detach().float().cpu()
        if tuple(got.shape) == tuple(want.shape) and torch.allclose(got, want, rtol=0, atol=1e-6):
            continue
        change = f"max |change| {float((got - want).abs().max()):.1e}" if got.shape == want.shape else "reshaped"
        raise ModelError(
            f"{_who(module, path)}: its {name} is no longer the Haar filter the layer is built with ({change}), "
            f"so the layer computes something the WTConv2d operator does not; the filters are fixed parameters "
            f"(requires_grad=False) that a loop over model.parameters() reaches: leave those that do not require "
            f"grad alone, or restore them with wtconv_torch.haar.create_2d_haar_filters({module.in_channels})"
        )


def published_wtconv_config(module: nn.Module, path: str = "") -> LayerConfig:
    """The configuration of a published WTConv2d layer; ModelError naming the layer (``path``, its module path in
    the model) and what the WTConv2d operator cannot compute when it is not exportable."""
    who = _who(module, path)
    missing = [a for a in PUBLISHED_ATTRIBUTES + PUBLISHED_SETTINGS if not hasattr(module, a)]
    if missing:
        raise ModelError(
            f"{who} is named {PUBLISHED_CLASS_NAME} but lacks the published WTConv2d's {', '.join(missing)} "
            f"(BGU-CS-VIL/WTConv wtconv/wtconv2d.py), so it cannot be exported as a WTConv2d node: rebuild it as "
            f"wtconv_torch.WTConv2d and load its weights with wtconv_torch.models.load_checkpoint (which also "
            f"reads fast_wtconv's parameter names)"
        )
    base = module.base_conv
    channels = base.in_channels if isinstance(base, nn.Conv2d) else 0
    problem = _conv_problem(base, channels, None, bias_allowed=True)
    if problem:
        raise ModelError(f"{who} cannot be exported as a WTConv2d node: its base_conv {problem}")
    kernel_size = base.kernel_size[0]
    levels, stride = module.wt_levels, module.stride
    for name, value in (("wt_levels", levels), ("stride", stride)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ModelError(
                f"{who} cannot be exported as a WTConv2d node: its {name} must be an int >= 1, got {value!r}"
            )
    if len(module.wavelet_convs) != levels or len(module.wavelet_scale) != levels:
        raise ModelError(
            f"{who} cannot be exported as a WTConv2d node: wt_levels is {levels} but it has "
            f"{len(module.wavelet_convs)} wavelet_convs and {len(module.wavelet_scale)} wavelet_scale entries"
        )
    problems = [f"base_scale {p}" for p in [_scale_problem(module.base_scale, channels)] if p]
    for i in range(levels):
        conv_problem = _conv_problem(module.wavelet_convs[i], 4 * channels, kernel_size, bias_allowed=False)
        scale_problem = _scale_problem(module.wavelet_scale[i], 4 * channels)
        problems += [f"wavelet_convs[{i}] {conv_problem}"] if conv_problem else []
        problems += [f"wavelet_scale[{i}] {scale_problem}"] if scale_problem else []
    if problems:
        raise ModelError(f"{who} cannot be exported as a WTConv2d node: its {problems[0]}")
    wavelet = _wavelet_problem(module, channels)
    if wavelet:
        raise ModelError(
            f"{who} uses a wavelet other than Haar: {wavelet}; the WTConv2d operator (plugin, kernels, standard-op "
            f"export) computes only the Haar transform, the published default wt_type='db1'"
        )
    if hasattr(module, STRIDE_FILTER):
        check_stride_filter(
            getattr(module, STRIDE_FILTER), channels, stride, f"{who} cannot be exported as a WTConv2d node"
        )
    return LayerConfig(channels, kernel_size, levels, stride, base.bias is not None)


def wtconv_layer_config(module: nn.Module, path: str = "") -> LayerConfig:
    """The configuration of any WTConv2d layer find_wtconv_layers returns (ours, fused or published)."""
    if isinstance(module, WTConv2d):
        return LayerConfig(
            module.in_channels, module.kernel_size, module.wt_levels, module.stride, module.base_conv.bias is not None
        )
    if isinstance(module, FusedWTConv2d):
        return LayerConfig(module.in_channels, module.kernel_size, module.wt_levels, module.stride)
    return published_wtconv_config(module, path)


@torch.no_grad()
def published_to_wtconv2d(module: nn.Module, path: str = "") -> WTConv2d:
    """``wtconv_torch.WTConv2d`` holding a published layer's parameters (on its device, in its dtype and training
    mode), checked to compute the same output. ModelError naming the layer when it is not exportable, has
    parameters the published layer does not, or computes something else."""
    config = published_wtconv_config(module, path)
    who = _who(module, path)
    ours = WTConv2d(
        config.channels,
        config.channels,
        kernel_size=config.kernel_size,
        stride=config.stride,
        bias=config.bias,
        wt_levels=config.wt_levels,
    )
    state, own = module.state_dict(), ours.state_dict()
    extra, missing = sorted(set(state) - set(own) - {STRIDE_FILTER}), sorted(set(own) - set(state))
    if extra or missing:
        keys = ", ".join([f"+{k}" for k in extra] + [f"-{k}" for k in missing])
        raise ModelError(
            f"{who}: its state_dict keys are not the published WTConv2d's ({keys}; +: extra, -: missing), so it "
            f"cannot be exported as one WTConv2d node"
        )
    ours.load_state_dict(state, strict=True)
    _check_same_output(module, ours, config, who)
    reference = module.base_conv.weight
    return ours.to(device=reference.device, dtype=reference.dtype).train(module.training)


def _check_same_output(module: nn.Module, ours: WTConv2d, config: LayerConfig, who: str) -> None:
    theirs = copy.deepcopy(module).cpu().float().eval()
    if hasattr(theirs, STRIDE_FILTER) and not isinstance(getattr(theirs, "do_stride", None), nn.Module):
        # Before its stride fix the published layer binds do_stride to a lambda over the original module, which a
        # copy shares: give the copy the same expression over its own filter (BGU-CS-VIL/WTConv f867135).
        theirs.do_stride = lambda y: F.conv2d(
            y, theirs.stride_filter, bias=None, stride=theirs.stride, groups=y.shape[1]
        )
    mine = copy.deepcopy(ours).cpu().float().eval()
    x = torch.randn((1, config.channels) + CHECK_INPUT_HW, generator=torch.Generator().manual_seed(0))
    expected, got = theirs(x), mine(x)
    if not isinstance(expected, torch.Tensor) or tuple(expected.shape) != tuple(got.shape):
        shape = tuple(expected.shape) if isinstance(expected, torch.Tensor) else type(expected).__name__
        raise ModelError(
            f"{who} has the published WTConv2d's parameters but its output on a {tuple(x.shape)} input is {shape}, "
            f"the published computation's is {tuple(got.shape)}: it cannot be exported as a WTConv2d node"
        )
    scale = float(expected.abs().max())
    error = float((expected - got).abs().max()) / max(scale, 1e-30)
    if error > CHECK_TOLERANCE:
        raise ModelError(
            f"{who} has the published WTConv2d's parameters but computes something else (on a {tuple(x.shape)} "
            f"input, max |difference| / max |output| = {error:.1e}, more than {CHECK_TOLERANCE:g}): it cannot be "
            f"exported as a WTConv2d node"
        )


def find_wtconv_layers(model: nn.Module) -> list[tuple[str, nn.Module]]:
    """(module path, module) of every WTConv2d layer in ``model``, outermost first, in module order (= the ONNX
    node order): ``wtconv_torch.WTConv2d``, ``FusedWTConv2d`` and the published WTConv2d (found by its class name
    and checked: ModelError naming a published layer the WTConv2d operator cannot compute). The model itself, when
    it is a layer, has the path ''."""
    found = []

    def visit(prefix: str, module: nn.Module) -> None:
        if isinstance(module, WTConv2d):
            check_haar_filters(module, prefix)
        if isinstance(module, (WTConv2d, FusedWTConv2d)):
            found.append((prefix, module))
            return
        if is_published_wtconv(module):
            published_wtconv_config(module, prefix)
            found.append((prefix, module))
            return
        for name, child in module.named_children():
            visit(f"{prefix}.{name}" if prefix else name, child)

    visit("", model)
    return found


def replace_submodule(model: nn.Module, path: str, new: nn.Module) -> nn.Module:
    """Put ``new`` at ``path`` in ``model`` (in place); returns the model, which is ``new`` itself when ``path`` is
    '' (the model's root)."""
    if not path:
        return new
    parent_path, _, name = path.rpartition(".")
    parent = model.get_submodule(parent_path) if parent_path else model
    setattr(parent, name, new)
    return model


def convert_published_wtconv(model: nn.Module, *, inplace: bool = False) -> nn.Module:
    """``model`` with every published WTConv2d replaced by ``wtconv_torch.WTConv2d`` holding the same parameters
    (each checked to compute the same output); a copy unless ``inplace``. Returns the converted model (the new
    layer itself when ``model`` is a published layer). Nothing else changes, so the state_dict keys stay the same
    (less the fixed ``stride_filter`` of the version before the stride fix, which ours computes without).

    Exporting needs no conversion (export_onnx finds published layers itself); this is for everything else that
    looks for ``wtconv_torch.WTConv2d``: ``fuse_wtconv_layers`` (our CUDA kernels in PyTorch), the benchmarks.
    """
    if not inplace:
        model = copy.deepcopy(model)
    for path, module in find_wtconv_layers(model):
        if is_published_wtconv(module):
            model = replace_submodule(model, path, published_to_wtconv2d(module, path))
    return model
