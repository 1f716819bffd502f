"""How an export renders the network around the WTConv2d layers for the runtime that will run it
(docs/onnx_export.md, "Rendering for the runtime"): where an fp16 LayerNorm keeps its statistics, and WTConvNeXt's
blocks kept channels-last from one WTConv2d node to the next."""

from __future__ import annotations

import torch
import torch.nn as nn

from wtconv_core.errors import InputError
from wtconv_torch.wtconvnext import WTConvNeXt

RUNTIMES = ("onnxruntime", "tensorrt")
LAYOUTS = ("nchw", "channels_last")
DEFAULT_RUNTIME = "onnxruntime"
# The layout the H200 benchmark measured faster (docs/onnx_runtime.md, "Speed"); the one line to change.
DEFAULT_LAYOUT = "nchw"


class Fp32Norm(nn.Module):
    """Runs a normalisation layer in fp32 inside an fp16 model: Cast up, normalise, Cast back (the rendering for
    TensorRT, whose strongly typed networks compute a LayerNormalization in its input's type: docs/onnx_export.md)."""

    def __init__(self, norm: nn.Module):
        super().__init__()
        self.norm = norm

    def _apply(self, fn, recurse=True):
        super()._apply(fn, recurse)
        self.norm.float()
        return self

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(x.float()).to(x.dtype)


def norms_in_fp32(model: nn.Module) -> nn.Module:
    """Wrap every LayerNorm / GroupNorm of ``model`` (in place) in Fp32Norm; returns the model."""
    from wtconv_torch.published import replace_submodule

    norms = [(path, m) for path, m in model.named_modules() if isinstance(m, (nn.LayerNorm, nn.GroupNorm)) and path]
    for path, norm in norms:
        replace_submodule(model, path, Fp32Norm(norm))
    return model


def check_layout(layout: str, ops: str, model: nn.Module) -> None:
    """InputError (parameter "layout") unless ``layout`` can render ``model`` with ``ops``."""
    if layout not in LAYOUTS:
        raise InputError(f"layout: expected one of {', '.join(LAYOUTS)}, got {layout!r}", parameter="layout")
    if layout == "nchw":
        return
    if ops != "plugin":
        raise InputError(
            "layout: channels_last needs ops=plugin (its blocks read and write the WTConv2d node's channels-last "
            "form; the standard-op WTConv2d is NCHW); export with layout=nchw",
            parameter="layout",
        )
    if type(model) is not WTConvNeXt or not isinstance(model.norm_pre, nn.Identity):
        raise InputError(
            f"layout: channels_last renders WTConvNeXt's blocks, and this model is a {type(model).__name__}; "
            "export it with layout=nchw",
            parameter="layout",
        )


def _last_dim_norm(norm: nn.LayerNorm) -> nn.LayerNorm:
    """A plain LayerNorm over the last dimension with ``norm``'s parameters (LayerNorm2d's permutes left out)."""
    plain = nn.LayerNorm(norm.normalized_shape, eps=norm.eps, elementwise_affine=norm.elementwise_affine)
    plain.load_state_dict(norm.state_dict())
    return plain


class ChannelsLastBlock(nn.Module):
    """A WTConvNeXt block on (N, H, W, C): x + gamma * MLP(LayerNorm(WTConv2d(x))), no layout change inside."""

    def __init__(self, block: nn.Module):
        super().__init__()
        self.conv_dw, self.norm, self.mlp, self.gamma = block.conv_dw, block.norm, block.mlp, block.gamma
        self.conv_dw.channels_last = True

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.mlp(self.norm(self.conv_dw(x)))
        if self.gamma is not None:
            y = y * self.gamma
        return y + x


class ChannelsLastStage(nn.Module):
    """A WTConvNeXt stage on (N, H, W, C): the downsampling LayerNorm channels-last, its 2x2 convolution in NCHW
    between the only two transposes of the stage, then the blocks."""

    def __init__(self, stage: nn.Module):
        super().__init__()
        self.down_norm = self.down_conv = None
        if not isinstance(stage.downsample, nn.Identity):
            norm, conv = stage.downsample
            self.down_norm, self.down_conv = _last_dim_norm(norm), conv
        self.blocks = nn.Sequential(*(ChannelsLastBlock(b) for b in stage.blocks))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.down_conv is not None:
            x = self.down_conv(self.down_norm(x).permute(0, 3, 1, 2)).permute(0, 2, 3, 1)
        return self.blocks(x)


class ChannelsLastWTConvNeXt(nn.Module):
    """WTConvNeXt's function with every block channels-last: NCHW in, only the stem and downsampling convolutions
    transposed around, the head pooling channels-last (docs/onnx_export.md, "Channels-last blocks").

    Built from a WTConvNeXt whose WTConv2d layers are already export nodes (``channels_last`` is set on each); it
    shares their modules, so it runs in eager mode and computes the model's output."""

    def __init__(self, model: WTConvNeXt):
        super().__init__()
        self.stem_conv, self.stem_norm = model.stem[0], _last_dim_norm(model.stem[1])
        self.stages = nn.Sequential(*(ChannelsLastStage(s) for s in model.stages))
        self.head_norm, self.head_fc = _last_dim_norm(model.head.norm), model.head.fc

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stages(self.stem_norm(self.stem_conv(x).permute(0, 2, 3, 1)))
        return self.head_fc(self.head_norm(x.mean((1, 2))))


def render(model: nn.Module, precision: str, runtime: str, layout: str) -> nn.Module:
    """``model`` (its WTConv2d layers already export nodes) rendered for ``runtime`` and ``layout``, cast to
    ``precision``: fp16 LayerNorms read and write fp16 for ONNX Runtime (ONNX's LayerNormalization keeps its
    statistics in fp32, stash_type=1) and run in fp32 between Casts for TensorRT."""
    if layout == "channels_last":
        model = ChannelsLastWTConvNeXt(model)
    if precision == "fp16":
        if runtime == "tensorrt":
            model = norms_in_fp32(model)
        model = model.half()
    return model.eval()
