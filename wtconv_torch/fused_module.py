"""FusedWTConv2d: an inference module holding folded weights and calling the custom operator."""

import torch
import torch.nn as nn

from wtconv_torch import cuda_kernels
from wtconv_torch.folding import FoldedWTConv, fold_wtconv
from wtconv_torch.ops import fused_wtconv2d

_FOLDED = ("base_weight", "base_bias", "wavelet_weight")


class FusedWTConv2d(nn.Module):
    """Drop-in inference replacement of a WTConv2d: y = fused_wtconv2d(x, folded weights).

    The folded weights are fp32 buffers (docs/design.md, "The operator"), kept fp32 and contiguous when the model is
    cast or converted to channels-last (only device moves apply to them); the input may be fp32, fp16 or bf16, NCHW
    or channels-last (the output keeps the input's layout on the CUDA kernels). A call allocates its output and, on
    the tiled path (planes above 64 x 64), a workspace freed when it returns: nothing is kept per module.
    """

    def __init__(self, folded: FoldedWTConv):
        super().__init__()
        self.kernel_size, self.wt_levels, self.stride = folded.kernel_size, folded.wt_levels, folded.stride
        self.in_channels = folded.channels
        bw, bb, ww = folded.tensors()
        self.register_buffer("base_weight", bw)
        self.register_buffer("base_bias", bb)
        self.register_buffer("wavelet_weight", ww)
        self._launch_cache = cuda_kernels.CallCache()  # the eager CUDA path's last plan (not state: not saved)

    def _apply(self, fn, recurse=True):
        # The folded weights follow device moves only: they stay the contiguous fp32 tensors they were folded into
        # through model.half(), .to(dtype) and .to(memory_format=torch.channels_last) (which would otherwise round
        # them to fp16, or give the 4-D wavelet weights channels-last strides), so the eager CUDA path keeps
        # launching on them directly: no conversion, copy or allocation per call (docs/design.md, "The operator").
        folded = {name: self._buffers[name] for name in _FOLDED}
        super()._apply(fn, recurse)
        for name, tensor in folded.items():
            moved = self._buffers[name]
            if moved is not tensor:
                self._buffers[name] = tensor.to(device=moved.device).contiguous()
        return self

    @classmethod
    def from_wtconv(cls, module) -> "FusedWTConv2d":
        return cls(fold_wtconv(module))

    def folded(self) -> FoldedWTConv:
        return FoldedWTConv(
            self.kernel_size,
            self.wt_levels,
            self.stride,
            self.base_weight.cpu(),
            self.base_bias.cpu(),
            self.wavelet_weight.cpu(),
        )

    def extra_repr(self) -> str:
        return f"{self.in_channels}, kernel_size={self.kernel_size}, wt_levels={self.wt_levels}, stride={self.stride}"

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dim() != 4 or x.shape[1] != self.in_channels:
            raise ValueError(f"FusedWTConv2d: input must be (B, {self.in_channels}, H, W), got {tuple(x.shape)}")
        # Eager CUDA calls launch the kernels directly (cuda_kernels.module_call: same kernels, without the
        # custom op's dispatch cost); tracing, export, compile and CPU go through the custom operator.
        # The buffers straight from _buffers: nn.Module's attribute lookup of a buffer costs 0.25-0.6 us, three
        # times per call, beside a ~4 us kernel launch (docs/bench/README.md, "Per-call overhead").
        buffers = self._buffers
        y = cuda_kernels.module_call(
            x,
            buffers["base_weight"],
            buffers["base_bias"],
            buffers["wavelet_weight"],
            self.kernel_size,
            self.wt_levels,
            self.stride,
            self._launch_cache,
        )
        if y is not None:
            return y
        return fused_wtconv2d(
            x, self.base_weight, self.base_bias, self.wavelet_weight, self.kernel_size, self.wt_levels, self.stride
        )


def fuse_wtconv_layers(model: nn.Module) -> nn.Module:
    """Replace every WTConv2d in ``model`` (in place) by a FusedWTConv2d; returns the model. A layer of the published
    code (a class named WTConv2d that is not ours) is refused, naming the conversion to call first, rather than left
    unfused without a word (published.py imports this module, so it cannot convert here)."""
    from wtconv_core.errors import ModelError
    from wtconv_torch.wtconv2d import WTConv2d

    for name, child in list(model.named_children()):
        if not isinstance(child, (WTConv2d, FusedWTConv2d)) and "WTConv2d" in (c.__name__ for c in type(child).__mro__):
            raise ModelError(
                f"layer {name!r} is a {type(child).__module__}.{type(child).__qualname__}, not wtconv_torch's: fuse "
                f"the model returned by wtconv_torch.convert_published_wtconv(model)"
            )
        if isinstance(child, WTConv2d):
            setattr(model, name, FusedWTConv2d.from_wtconv(child).to(child.base_conv.weight.device))
        else:
            fuse_wtconv_layers(child)
    return model
