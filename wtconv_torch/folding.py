"""Weight folding (docs/design.md §2.4, Eq. 2): the exact payload of the ONNX node and the plugin fields.

    W~b = sb * Wb,   b~b = sb * bb,   W~l = sl * Wl          (sb: base_scale, sl: wavelet_scale[l-1])

so the fused operator needs no separate scale. The folded weights are kept in fp32 everywhere
(ONNX attributes, plugin fields, kernels); ``dtype=torch.float64`` is for float64 oracle tests only.
"""

from dataclasses import dataclass

import torch

from wtconv_core.errors import ModelError
from wtconv_libs import contract
from wtconv_torch.wtconv2d import WTConv2d


@dataclass(frozen=True)
class FoldedWTConv:
    """Folded weights of one WTConv2d layer.

    kernel_size, wt_levels, stride: the layer configuration (k odd).
    base_weight:    (C, k, k)       W~b, channel c's k x k taps row-major.
    base_bias:      (C,)            b~b (zeros when the layer has no bias).
    wavelet_weight: (L, 4C, k, k)   W~l for level l = 1..L at index l-1; channel 4c+s is subband s
                                    (LL, LH, HL, HH) of input channel c.
    Flattened in C order these are exactly the FLOATS attributes base_weight, base_bias, wavelet_weight.
    """

    kernel_size: int
    wt_levels: int
    stride: int
    base_weight: torch.Tensor
    base_bias: torch.Tensor
    wavelet_weight: torch.Tensor

    @property
    def channels(self) -> int:
        return self.base_weight.shape[0]

    def tensors(
        self, device: torch.device | str | None = None, dtype: torch.dtype | None = None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(base_weight, base_bias, wavelet_weight) contiguous on ``device``, optionally cast."""
        return tuple(
            t.to(device=device, dtype=dtype or t.dtype).contiguous()
            for t in (self.base_weight, self.base_bias, self.wavelet_weight)
        )

    def attributes(self) -> dict:
        """The ONNX node attributes / TensorRT plugin fields (names from contract.py), plain Python values."""
        return {
            contract.FIELD_KERNEL_SIZE: int(self.kernel_size),
            contract.FIELD_WT_LEVELS: int(self.wt_levels),
            contract.FIELD_STRIDE: int(self.stride),
            contract.FIELD_BASE_WEIGHT: self.base_weight.to(torch.float32).flatten().tolist(),
            contract.FIELD_BASE_BIAS: self.base_bias.to(torch.float32).flatten().tolist(),
            contract.FIELD_WAVELET_WEIGHT: self.wavelet_weight.to(torch.float32).flatten().tolist(),
        }


@torch.no_grad()
def fold_wtconv(module: WTConv2d, dtype: torch.dtype = torch.float32) -> FoldedWTConv:
    """Fold a WTConv2d's scales into its convolution weights; products taken in float64, stored in ``dtype``."""
    if not isinstance(module, WTConv2d):
        raise ModelError(f"fold_wtconv: expected a WTConv2d, got {type(module).__name__}")
    c, k, levels = module.in_channels, module.kernel_size, module.wt_levels
    f64 = torch.float64
    sb = module.base_scale.weight.detach().to(f64).reshape(c)
    base_weight = module.base_conv.weight.detach().to(f64).reshape(c, k, k) * sb[:, None, None]
    bias = module.base_conv.bias
    base_bias = (bias.detach().to(f64) * sb) if bias is not None else torch.zeros(c, dtype=f64)
    wavelet_weight = torch.stack(
        [
            module.wavelet_convs[i].weight.detach().to(f64).reshape(4 * c, k, k)
            * module.wavelet_scale[i].weight.detach().to(f64).reshape(4 * c)[:, None, None]
            for i in range(levels)
        ]
    )
    return FoldedWTConv(
        kernel_size=k,
        wt_levels=levels,
        stride=module.stride,
        base_weight=base_weight.to(dtype).cpu(),
        base_bias=base_bias.to(dtype).cpu(),
        wavelet_weight=wavelet_weight.to(dtype).cpu(),
    )
