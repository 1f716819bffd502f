"""PyTorch custom operator ``wtconv::fused_wtconv2d`` — the fused operator as one graph node.

CPU (and any device without a faster kernel) runs the executable spec (fused_spec.py). The CUDA
implementation is registered by ``wtconv_torch.cuda_kernels.register()`` from our CUDA library
(plugin/kernels); the ONNX exporter (onnx_export.py) translates calls of this operator into one
WTConv2d node. Arguments are the FoldedWTConv tensors plus the layer configuration.
"""

import torch

from wtconv_libs import contract
from wtconv_torch.fused_spec import fused_wtconv2d_spec

OPERATOR = "wtconv::fused_wtconv2d"


def check_arguments(
    x: torch.Tensor,
    base_weight: torch.Tensor,
    base_bias: torch.Tensor,
    wavelet_weight: torch.Tensor,
    kernel_size: int,
    wt_levels: int,
    stride: int,
) -> None:
    """ValueError naming the argument, what was expected and what was given."""
    if kernel_size < 1 or kernel_size % 2 == 0:
        raise ValueError(f"{OPERATOR}: kernel_size must be odd and >= 1, got {kernel_size}")
    if wt_levels < 1:
        raise ValueError(f"{OPERATOR}: wt_levels must be >= 1, got {wt_levels}")
    if stride < 1:
        raise ValueError(f"{OPERATOR}: stride must be >= 1, got {stride}")
    if x.dim() != 4:
        raise ValueError(f"{OPERATOR}: x must be 4-D (B, C, H, W), got shape {tuple(x.shape)}")
    c, k, n = x.shape[1], kernel_size, wt_levels
    expected = {
        "base_weight": (base_weight, (c, k, k)),
        "base_bias": (base_bias, (c,)),
        "wavelet_weight": (wavelet_weight, (n, 4 * c, k, k)),
    }
    for name, (tensor, shape) in expected.items():
        if tuple(tensor.shape) != shape:
            raise ValueError(
                f"{OPERATOR}: {name} must have shape {shape} for x of shape {tuple(x.shape)}, "
                f"kernel_size={k}, wt_levels={n}; got {tuple(tensor.shape)}"
            )


def output_memory_format(x: torch.Tensor) -> torch.memory_format:
    """The output keeps a channels-last input's layout (the CUDA kernels read and write it in place);
    anything else gives an NCHW-contiguous output."""
    if not x.is_contiguous() and x.is_contiguous(memory_format=torch.channels_last):
        return torch.channels_last
    return torch.contiguous_format


@torch.library.custom_op(OPERATOR, mutates_args=())
def fused_wtconv2d(
    x: torch.Tensor,
    base_weight: torch.Tensor,
    base_bias: torch.Tensor,
    wavelet_weight: torch.Tensor,
    kernel_size: int,
    wt_levels: int,
    stride: int,
) -> torch.Tensor:
    check_arguments(x, base_weight, base_bias, wavelet_weight, kernel_size, wt_levels, stride)
    y = fused_wtconv2d_spec(x, base_weight, base_bias, wavelet_weight, kernel_size, wt_levels, stride)
    return y.contiguous(memory_format=output_memory_format(x))


@fused_wtconv2d.register_fake
def _(x, base_weight, base_bias, wavelet_weight, kernel_size, wt_levels, stride):
    b, c, h, w = x.shape
    return torch.empty(
        (b, c, (h + stride - 1) // stride, (w + stride - 1) // stride),
        dtype=x.dtype,
        device=x.device,
        memory_format=output_memory_format(x),
    )


def plugin_can_run(kernel_size: int, wt_levels: int, stride: int) -> str | None:
    """None if the CUDA kernels / TensorRT plugin support this layer configuration, else the reason."""
    if kernel_size > contract.MAX_KERNEL_SIZE:
        return f"kernel_size {kernel_size} exceeds the plugin's limit of {contract.MAX_KERNEL_SIZE}"
    if wt_levels > contract.MAX_WT_LEVELS:
        return f"wt_levels {wt_levels} exceeds the plugin's limit of {contract.MAX_WT_LEVELS}"
    return None
