"""Reference WTConv2d: the published module (Finder et al., ECCV 2024), same numerics and parameter names.

Parameter names and shapes match BGU-CS-VIL/WTConv ``wtconv/wtconv2d.py`` so its checkpoints load with
``strict=True``: base_conv.{weight,bias}, base_scale.weight, wavelet_convs.{i}.weight,
wavelet_scale.{i}.weight, wt_filter, iwt_filter, and for stride > 1 the ``stride_filter`` of the version before its
stride fix (check_stride_filter). The algorithm is docs/design.md §2.3 "Reference algorithm"; the fused formulation
lives in ``fused_spec.py`` and is tested against this module.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F

from wtconv_core.errors import InputError, ModelError
from wtconv_torch import haar

STRIDE_FILTER = "stride_filter"


def check_stride_filter(value, channels: int, stride: int, who: str) -> None:
    """ModelError (naming ``who``) unless ``value`` is the published layer's ``stride_filter`` before its stride fix
    (BGU-CS-VIL/WTConv f867135 and earlier): ones of shape (C, 1, 1, 1), created so and never trained, applied at
    stride > 1 as ``F.conv2d(y, stride_filter, stride=stride, groups=C)``. A 1x1 depthwise filter of ones computes
    ``1 * y[..., ::stride, ::stride]``, exactly what AvgPool2d(1, stride) of the later version and this module
    compute (docs/onnx_export.md, "Your own model")."""
    if stride == 1:
        raise ModelError(
            f"{who}: {STRIDE_FILTER} is the subsampling of a stride > 1 layer (the published WTConv2d before its "
            f"stride fix), but this layer has stride 1; build the layer with the stride the checkpoint was trained with"
        )
    if not isinstance(value, torch.Tensor) or tuple(value.shape) != (channels, 1, 1, 1):
        shape = tuple(value.shape) if isinstance(value, torch.Tensor) else type(value).__name__
        raise ModelError(f"{who}: {STRIDE_FILTER} must have shape ({channels}, 1, 1, 1), got {shape}")
    if not bool((value.detach() == 1).all()):
        low, high = float(value.detach().min()), float(value.detach().max())
        raise ModelError(
            f"{who}: {STRIDE_FILTER} holds values from {low:g} to {high:g}, not the ones the published layer creates "
            f"and never trains; only ones make it the plain stride-{stride} subsampling the WTConv2d operator computes"
        )


def _check_positive_int(name: str, value, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ModelError(f"WTConv2d: {name} must be an integer >= {minimum}, got {value!r}")
    return value


class _ScaleModule(nn.Module):
    """Per-channel scale, parameter ``weight`` of shape ``dims`` (the published _ScaleModule)."""

    def __init__(self, dims, init_scale=1.0):
        super().__init__()
        self.dims = dims
        self.weight = nn.Parameter(torch.ones(*dims) * init_scale)
        self.bias = None

    def forward(self, x):
        return torch.mul(self.weight, x)


class WTConv2d(nn.Module):
    """Wavelet convolution: y = sb*(Wb*x + bb) + multi-level Haar reconstruction of filtered subbands.

    Args:
        in_channels, out_channels: must be equal (depthwise layer).
        kernel_size: odd, >= 1 ('same' zero padding).
        stride: >= 1; the output is x-resolution output subsampled [::stride, ::stride].
        bias: base convolution bias.
        wt_levels: >= 1 wavelet decomposition levels.
        wt_type: only 'db1' (Haar) is supported, as in every published model.
    """

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: int = 5,
        stride: int = 1,
        bias: bool = True,
        wt_levels: int = 1,
        wt_type: str = "db1",
    ) -> None:
        super().__init__()
        _check_positive_int("in_channels", in_channels, 1)
        if in_channels != out_channels:
            raise ModelError(
                f"WTConv2d: in_channels and out_channels must be equal (depthwise layer), "
                f"got in_channels={in_channels}, out_channels={out_channels}"
            )
        _check_positive_int("kernel_size", kernel_size, 1)
        if kernel_size % 2 == 0:
            raise ModelError(
                f"WTConv2d: kernel_size must be odd ('same' padding is symmetric only for odd "
                f"kernels), got {kernel_size}; use {kernel_size - 1} or {kernel_size + 1}"
            )
        _check_positive_int("wt_levels", wt_levels, 1)
        _check_positive_int("stride", stride, 1)
        if wt_type != "db1":
            raise ModelError(f"WTConv2d: wt_type must be 'db1' (Haar), got {wt_type!r}")

        self.in_channels = in_channels
        self.kernel_size = kernel_size
        self.wt_levels = wt_levels
        self.stride = stride
        self.dilation = 1

        wt_filter, iwt_filter = haar.create_2d_haar_filters(in_channels, torch.float)
        # Parameters (not buffers) with requires_grad=False, as published, so state_dict keys match.
        self.wt_filter = nn.Parameter(wt_filter, requires_grad=False)
        self.iwt_filter = nn.Parameter(iwt_filter, requires_grad=False)

        self.base_conv = nn.Conv2d(
            in_channels, in_channels, kernel_size, padding="same", stride=1, dilation=1, groups=in_channels, bias=bias
        )
        self.base_scale = _ScaleModule([1, in_channels, 1, 1])
        self.wavelet_convs = nn.ModuleList(
            [
                nn.Conv2d(
                    in_channels * 4,
                    in_channels * 4,
                    kernel_size,
                    padding="same",
                    stride=1,
                    dilation=1,
                    groups=in_channels * 4,
                    bias=False,
                )
                for _ in range(wt_levels)
            ]
        )
        self.wavelet_scale = nn.ModuleList(
            [_ScaleModule([1, in_channels * 4, 1, 1], init_scale=0.1) for _ in range(wt_levels)]
        )
        self.do_stride = nn.AvgPool2d(kernel_size=1, stride=stride) if stride > 1 else None

    def extra_repr(self) -> str:
        return (
            f"{self.in_channels}, kernel_size={self.kernel_size}, wt_levels={self.wt_levels}, "
            f"stride={self.stride}, bias={self.base_conv.bias is not None}"
        )

    def check_input(self, x: torch.Tensor) -> None:
        if x.dim() != 4:
            raise InputError(f"WTConv2d: input must be 4-D (B, C, H, W), got shape {tuple(x.shape)}")
        if x.shape[1] != self.in_channels:
            raise InputError(
                f"WTConv2d: input must have {self.in_channels} channels (dim 1), got shape {tuple(x.shape)}"
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.check_input(x)
        x_ll_in_levels, x_h_in_levels, shapes_in_levels = [], [], []
        curr_x_ll = x
        for i in range(self.wt_levels):
            curr_shape = curr_x_ll.shape
            shapes_in_levels.append(curr_shape)
            if (curr_shape[2] % 2 > 0) or (curr_shape[3] % 2 > 0):
                curr_x_ll = F.pad(curr_x_ll, (0, curr_shape[3] % 2, 0, curr_shape[2] % 2))
            curr_x = haar.wavelet_2d_transform(curr_x_ll, self.wt_filter)
            curr_x_ll = curr_x[:, :, 0, :, :]
            shape_x = curr_x.shape
            curr_x_tag = curr_x.reshape(shape_x[0], shape_x[1] * 4, shape_x[3], shape_x[4])
            curr_x_tag = self.wavelet_scale[i](self.wavelet_convs[i](curr_x_tag)).reshape(shape_x)
            x_ll_in_levels.append(curr_x_tag[:, :, 0, :, :])
            x_h_in_levels.append(curr_x_tag[:, :, 1:4, :, :])

        next_x_ll = 0
        for _ in range(self.wt_levels):  # deepest level first: the lists are popped
            curr_x_ll = x_ll_in_levels.pop() + next_x_ll
            curr_x_h = x_h_in_levels.pop()
            curr_shape = shapes_in_levels.pop()
            curr_x = torch.cat([curr_x_ll.unsqueeze(2), curr_x_h], dim=2)
            next_x_ll = haar.inverse_2d_wavelet_transform(curr_x, self.iwt_filter)
            next_x_ll = next_x_ll[:, :, : curr_shape[2], : curr_shape[3]]

        x = self.base_scale(self.base_conv(x)) + next_x_ll
        if self.do_stride is not None:
            x = self.do_stride(x)
        return x

    # Checkpoints whose shapes do not fit get a ValueError naming the parameter (not torch's RuntimeError). The
    # stride_filter of the published version before its stride fix is checked and then needs no parameter here.
    def _load_from_state_dict(
        self, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs
    ):
        stride_filter = prefix + STRIDE_FILTER
        if stride_filter in state_dict:
            who = f"WTConv2d checkpoint: parameter '{stride_filter}'"
            check_stride_filter(state_dict[stride_filter], self.in_channels, self.stride, who)
        own = dict(self.named_parameters(recurse=True))
        for name, param in own.items():
            key = prefix + name
            if key in state_dict and tuple(state_dict[key].shape) != tuple(param.shape):
                raise ModelError(
                    f"WTConv2d checkpoint: parameter '{key}' must have shape {tuple(param.shape)} "
                    f"(channels={self.in_channels}, kernel_size={self.kernel_size}, "
                    f"wt_levels={self.wt_levels}), got {tuple(state_dict[key].shape)}"
                )
        super()._load_from_state_dict(
            state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs
        )
        if stride_filter in unexpected_keys:
            unexpected_keys.remove(stride_filter)


def random_wtconv2d(channels: int, kernel_size: int, wt_levels: int, stride: int, seed: int) -> WTConv2d:
    """A WTConv2d whose learnable parameters are drawn from N(0, 1) (seeded), the convolution weights divided by
    k and the scales halved, so that every level contributes to the output at a similar magnitude. The kernels'
    accuracy tests and the half-arithmetic study draw their layers with it (one distribution for both)."""
    generator = torch.Generator().manual_seed(seed)
    layer = WTConv2d(channels, channels, kernel_size=kernel_size, stride=stride, bias=True, wt_levels=wt_levels)
    with torch.no_grad():
        for name, param in layer.named_parameters():
            if name in ("wt_filter", "iwt_filter"):
                continue  # the fixed Haar filters
            param.copy_(
                torch.randn(param.shape, generator=generator)
                * (0.5 if "scale" in name else 1.0)
                / (kernel_size if "conv" in name else 1)
            )
    return layer
