"""WTConvNeXt (Finder et al., ECCV 2024) in plain PyTorch with the published state_dict keys, so a published
checkpoint loads with ``strict=True`` without timm; registered in timm's model registry when timm is importable
(docs/onnx_export.md, "The WTConvNeXt models")."""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn as nn
import torch.nn.functional as F

from wtconv_core.errors import InputError, ModelError
from wtconv_torch.wtconv2d import WTConv2d

__all__ = [
    "WTConvNeXt",
    "WTCONVNEXT_CONFIGS",
    "create_wtconvnext",
    "wtconvnext_tiny",
    "wtconvnext_small",
    "wtconvnext_base",
]

# The published sizes (BGU-CS-VIL/WTConv README: 30M / 54M / 93M parameters at 1000 classes).
WTCONVNEXT_CONFIGS = {
    "wtconvnext_tiny": dict(depths=(3, 3, 9, 3), dims=(96, 192, 384, 768)),
    "wtconvnext_small": dict(depths=(3, 3, 27, 3), dims=(96, 192, 384, 768)),
    "wtconvnext_base": dict(depths=(3, 3, 27, 3), dims=(128, 256, 512, 1024)),
}
LAYER_NORM_EPS = 1e-6  # timm's LayerNorm / LayerNorm2d default


class LayerNorm2d(nn.LayerNorm):
    """LayerNorm over the channel dimension of an NCHW tensor (timm's LayerNorm2d)."""

    def __init__(self, num_channels: int, eps: float = LAYER_NORM_EPS):
        super().__init__(num_channels, eps=eps)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.permute(0, 2, 3, 1)
        x = F.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)
        return x.permute(0, 3, 1, 2)


class DropPath(nn.Module):
    """Stochastic depth per sample (training only); identity in eval mode."""

    def __init__(self, drop_prob: float):
        super().__init__()
        self.drop_prob = drop_prob

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training or self.drop_prob == 0.0:
            return x
        keep = 1.0 - self.drop_prob
        mask = x.new_empty((x.shape[0],) + (1,) * (x.dim() - 1)).bernoulli_(keep)
        return x * mask / keep


class Mlp(nn.Module):
    """fc1 -> GELU -> fc2 on channels-last input (timm's Mlp with use_conv=False; keys mlp.fc1, mlp.fc2)."""

    def __init__(self, dim: int, hidden: int):
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(hidden, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.act(self.fc1(x)))


class WTConvNeXtBlock(nn.Module):
    """x + gamma * MLP(LayerNorm(WTConv2d(x))), the MLP and norm channels-last."""

    def __init__(
        self,
        dim: int,
        kernel_size: int,
        wt_levels: int,
        mlp_ratio: float = 4.0,
        ls_init_value: float | None = 1e-6,
        conv_bias: bool = True,
        drop_path: float = 0.0,
    ):
        super().__init__()
        self.conv_dw = WTConv2d(dim, dim, kernel_size=kernel_size, stride=1, bias=conv_bias, wt_levels=wt_levels)
        self.norm = nn.LayerNorm(dim, eps=LAYER_NORM_EPS)
        self.mlp = Mlp(dim, int(mlp_ratio * dim))
        self.gamma = nn.Parameter(ls_init_value * torch.ones(dim)) if ls_init_value is not None else None
        self.shortcut = nn.Identity()
        self.drop_path = DropPath(drop_path) if drop_path > 0.0 else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shortcut = x
        x = self.conv_dw(x)
        x = x.permute(0, 2, 3, 1)
        # One statement per step, as timm's ConvNeXt block: rebinding x frees the convolution's output before the
        # MLP, whose hidden layer (4x the channels, twice: fc1 and GELU outputs) is the model's memory peak.
        x = self.norm(x)
        x = self.mlp(x)
        x = x.permute(0, 3, 1, 2)
        if self.gamma is not None:
            x = x.mul(self.gamma.reshape(1, -1, 1, 1))
        return self.drop_path(x) + self.shortcut(shortcut)


class WTConvNeXtStage(nn.Module):
    """Optional 2x2 stride-2 downsampling (LayerNorm2d + Conv2d), then ``depth`` blocks."""

    def __init__(
        self,
        in_chs: int,
        out_chs: int,
        depth: int,
        downsample: bool,
        kernel_size: int,
        wt_levels: int,
        ls_init_value: float | None,
        conv_bias: bool,
        drop_path_rates: Sequence[float],
    ) -> None:
        super().__init__()
        if downsample:
            self.downsample = nn.Sequential(
                LayerNorm2d(in_chs), nn.Conv2d(in_chs, out_chs, kernel_size=2, stride=2, bias=conv_bias)
            )
        else:
            self.downsample = nn.Identity()
        self.blocks = nn.Sequential(
            *[
                WTConvNeXtBlock(
                    out_chs,
                    kernel_size,
                    wt_levels,
                    ls_init_value=ls_init_value,
                    conv_bias=conv_bias,
                    drop_path=drop_path_rates[j],
                )
                for j in range(depth)
            ]
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.blocks(self.downsample(x))


class NormClassifierHead(nn.Module):
    """Global average pool -> LayerNorm2d -> flatten -> dropout -> Linear (timm's NormMlpClassifierHead
    with hidden_size=None; keys head.norm.*, head.fc.*)."""

    def __init__(self, in_features: int, num_classes: int, drop_rate: float = 0.0):
        super().__init__()
        self.norm = LayerNorm2d(in_features)
        self.flatten = nn.Flatten(1)
        self.drop = nn.Dropout(drop_rate)
        self.fc = nn.Linear(in_features, num_classes) if num_classes > 0 else nn.Identity()

    def forward(self, x: torch.Tensor, pre_logits: bool = False) -> torch.Tensor:
        x = x.mean((2, 3), keepdim=True)
        x = self.drop(self.flatten(self.norm(x)))
        return x if pre_logits else self.fc(x)


def _check_per_stage(name: str, value, num_stages: int, minimum: int) -> tuple:
    values = tuple(value) if isinstance(value, (tuple, list)) else (value,) * num_stages
    if len(values) != num_stages or any(isinstance(v, bool) or not isinstance(v, int) or v < minimum for v in values):
        raise ModelError(
            f"WTConvNeXt: {name} must be {num_stages} integers >= {minimum} (one per stage), got {value!r}"
        )
    return values


class WTConvNeXt(nn.Module):
    """WTConvNeXt classifier (timm 1.0.7 ConvNeXt layout with WTConv2d depthwise convolutions).

    Args:
        in_chans: input image channels.
        num_classes: classifier outputs (0: no classifier, ``forward`` returns pooled features).
        depths: blocks per stage (any number of stages >= 1; the published models have 4).
        dims: channels per stage.
        kernel_sizes: WTConv2d kernel size, one int or one per stage (odd).
        wt_levels: WTConv2d wavelet levels per stage.
        patch_size: stem patch size (the stem is a patch_size x patch_size, stride patch_size conv).
        ls_init_value: layer-scale init (gamma); None disables layer scale (and the ``gamma`` keys).
        conv_bias: biases in stem, downsampling and WTConv2d base convolutions.
        drop_rate: dropout before the classifier; drop_path_rate: stochastic depth, linear over blocks. Both are
            training settings: they add no parameters (a checkpoint loads whatever rates it was trained with) and
            are the identity in eval mode, which export and validation always use.
    """

    def __init__(
        self,
        in_chans: int = 3,
        num_classes: int = 1000,
        depths: Sequence[int] = (3, 3, 9, 3),
        dims: Sequence[int] = (96, 192, 384, 768),
        kernel_sizes: int | Sequence[int] = 5,
        wt_levels: int | Sequence[int] = (5, 4, 3, 2),
        patch_size: int = 4,
        ls_init_value: float | None = 1e-6,
        conv_bias: bool = True,
        drop_rate: float = 0.0,
        drop_path_rate: float = 0.0,
        head_init_scale: float = 1.0,
    ) -> None:
        super().__init__()
        depths = tuple(depths) if isinstance(depths, (tuple, list)) else depths
        if not isinstance(depths, tuple) or not depths:
            raise ModelError(f"WTConvNeXt: depths must be a non-empty sequence, got {depths!r}")
        n = len(depths)
        depths = _check_per_stage("depths", depths, n, 1)
        dims = _check_per_stage("dims", dims, n, 1)
        kernel_sizes = _check_per_stage("kernel_sizes", kernel_sizes, n, 1)
        wt_levels = _check_per_stage("wt_levels", wt_levels, n, 1)
        for name, value, minimum in (
            ("in_chans", in_chans, 1),
            ("patch_size", patch_size, 1),
            ("num_classes", num_classes, 0),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
                raise ModelError(f"WTConvNeXt: {name} must be an integer >= {minimum}, got {value!r}")

        self.num_classes, self.in_chans = num_classes, in_chans
        self.depths, self.dims, self.kernel_sizes, self.wt_levels = depths, dims, kernel_sizes, wt_levels
        self.num_features = dims[-1]
        self.stem = nn.Sequential(
            nn.Conv2d(in_chans, dims[0], kernel_size=patch_size, stride=patch_size, bias=conv_bias),
            LayerNorm2d(dims[0]),
        )
        # Stochastic depth rises linearly from 0 to drop_path_rate over all blocks (plain Python, so the
        # model can be built on the meta device).
        total = sum(depths)
        flat = [drop_path_rate * j / (total - 1) if total > 1 else 0.0 for j in range(total)]
        rates = [flat[sum(depths[:i]) : sum(depths[: i + 1])] for i in range(n)]
        stages, prev = [], dims[0]
        for i in range(n):
            # Stage 0 keeps the stem's resolution; every later stage halves it (timm: stride 2 for i > 0).
            stages.append(
                WTConvNeXtStage(
                    prev,
                    dims[i],
                    depths[i],
                    downsample=i > 0,
                    kernel_size=kernel_sizes[i],
                    wt_levels=wt_levels[i],
                    ls_init_value=ls_init_value,
                    conv_bias=conv_bias,
                    drop_path_rates=rates[i],
                )
            )
            prev = dims[i]
        self.stages = nn.Sequential(*stages)
        self.norm_pre = nn.Identity()
        self.head = NormClassifierHead(self.num_features, num_classes, drop_rate=drop_rate)
        self._init_weights(head_init_scale)

    @torch.no_grad()
    def _init_weights(self, head_init_scale: float) -> None:
        # timm's convnext _init_weights: truncated normal (std .02) for every Conv2d and Linear (the WTConv2d
        # base and wavelet convolutions included), zero biases; head scaled by head_init_scale.
        for name, module in self.named_modules():
            if isinstance(module, (nn.Conv2d, nn.Linear)):
                nn.init.trunc_normal_(module.weight, std=0.02, a=-2.0, b=2.0)
                if module.bias is not None:
                    nn.init.zeros_(module.bias)
                if isinstance(module, nn.Linear) and name.startswith("head."):
                    module.weight.mul_(head_init_scale)
                    module.bias.mul_(head_init_scale)

    def no_weight_decay(self) -> set:
        return {k for k, _ in self.named_parameters() if "wavelet_scale" in k or "base_scale" in k}

    def forward_features(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm_pre(self.stages(self.stem(x)))

    def forward_head(self, x: torch.Tensor, pre_logits: bool = False) -> torch.Tensor:
        return self.head(x, pre_logits=pre_logits)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.forward_head(self.forward_features(x))


def create_wtconvnext(name: str, **kwargs) -> WTConvNeXt:
    """Build a published WTConvNeXt by name (wtconvnext_tiny / _small / _base); kwargs override the config."""
    if name not in WTCONVNEXT_CONFIGS:
        raise InputError(f"unknown model {name!r}; expected one of {', '.join(WTCONVNEXT_CONFIGS)}")
    return WTConvNeXt(**{**WTCONVNEXT_CONFIGS[name], **kwargs})


def _entrypoint(name: str, pretrained: bool, kwargs: dict) -> WTConvNeXt:
    # timm.create_model passes these; we have no download URLs (load weights with models.load_checkpoint).
    for key in ("pretrained_cfg", "pretrained_cfg_overlay", "cache_dir"):
        kwargs.pop(key, None)
    if pretrained:
        raise InputError(
            f"{name}: pretrained=True is not supported (no download); build the model, then "
            f"wtconv_torch.models.load_checkpoint(model, 'WTConvNeXt_....pth')"
        )
    return create_wtconvnext(name, **kwargs)


def wtconvnext_tiny(pretrained: bool = False, **kwargs) -> WTConvNeXt:
    return _entrypoint("wtconvnext_tiny", pretrained, kwargs)


def wtconvnext_small(pretrained: bool = False, **kwargs) -> WTConvNeXt:
    return _entrypoint("wtconvnext_small", pretrained, kwargs)


def wtconvnext_base(pretrained: bool = False, **kwargs) -> WTConvNeXt:
    return _entrypoint("wtconvnext_base", pretrained, kwargs)


def _register_with_timm() -> bool:
    """Register the three entrypoints in timm's registry when timm imports; True if registered."""
    try:
        from timm.models import list_models, register_model
    except Exception:  # timm absent, or present but broken (e.g. no torchvision): nothing to register
        return False
    if "wtconvnext_tiny" in list_models("wtconvnext_*"):
        return True  # already registered (the official package, or an earlier import)
    for fn in (wtconvnext_tiny, wtconvnext_small, wtconvnext_base):
        register_model(fn)
    return True


TIMM_REGISTERED = _register_with_timm()
