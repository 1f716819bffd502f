"""Executable spec of the fused WTConv operator (docs/design.md §2.4), pure PyTorch.

Given folded weights (folding.py), for input x (B, C, H, W):

    analysis (on the fly):  LL_0 = x;  for l = 1..L: pad LL_{l-1} to even size (bottom/right zeros),
                            [LL, LH, HL, HH]_l = Haar of each 2x2 patch [[a, b], [c, d]]:
                            LL = (a+b+c+d)/2, LH = (a+b-c-d)/2, HL = (a-b+c-d)/2, HH = (a-b-c+d)/2
                            F_l = W~l * [LL, LH, HL, HH]_l   (depthwise k x k, 'same' zero padding)
                            LL_l = the unfiltered LL band
    synthesis (closed form, docs/design.md §2.4, Eq. 3), for output pixel (y, x):
        R(y, x) = sum_l 2^-l [F_l^LL + s_y F_l^LH + s_x F_l^HL + s_y s_x F_l^HH](y >> l, x >> l),
        s_y = (-1)^((y >> (l-1)) & 1),  s_x = (-1)^((x >> (l-1)) & 1)
    output:                 y = W~b * x + b~b + R, evaluated only at the kept pixels (s*i, s*j).

Exact 1/2 is used for the Haar taps (the published module's float32 0.49999997 differs by ~3e-8
relative, below fp32 rounding of the layer). Computation runs in float64 for float64 inputs and in
float32 otherwise (fp16/bf16 inputs are upcast, the result cast back), as the CUDA kernels do.
"""

import torch
import torch.nn.functional as F


def _compute_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.float64 if dtype == torch.float64 else torch.float32


def haar_analysis(ll: torch.Tensor) -> torch.Tensor:
    """(B, C, h, w) -> (B, 4C, ceil(h/2), ceil(w/2)); channel 4c+s is subband s of channel c."""
    b, c, h, w = ll.shape
    if h % 2 or w % 2:
        ll = F.pad(ll, (0, w % 2, 0, h % 2))
    a, bb = ll[..., 0::2, 0::2], ll[..., 0::2, 1::2]
    cc, d = ll[..., 1::2, 0::2], ll[..., 1::2, 1::2]
    bands = torch.stack([a + bb + cc + d, a + bb - cc - d, a - bb + cc - d, a - bb - cc + d], dim=2) * 0.5
    return bands.reshape(b, 4 * c, bands.shape[-2], bands.shape[-1])


def fused_wtconv2d_spec(
    x: torch.Tensor,
    base_weight: torch.Tensor,
    base_bias: torch.Tensor,
    wavelet_weight: torch.Tensor,
    kernel_size: int,
    wt_levels: int,
    stride: int,
) -> torch.Tensor:
    """The fused operator. Weights as in FoldedWTConv: (C,k,k), (C,), (L,4C,k,k)."""
    cdt = _compute_dtype(x.dtype)
    xc = x.to(cdt)
    _, c, h, w = xc.shape
    k, pad = kernel_size, kernel_size // 2
    ys = torch.arange(0, h, stride, device=x.device)  # kept output rows
    xs = torch.arange(0, w, stride, device=x.device)  # kept output columns

    out = F.conv2d(xc, base_weight.to(cdt).reshape(c, 1, k, k), base_bias.to(cdt), stride=stride, padding=pad, groups=c)
    ll = xc
    for level in range(1, wt_levels + 1):
        bands = haar_analysis(ll)
        filtered = F.conv2d(bands, wavelet_weight[level - 1].to(cdt).reshape(4 * c, 1, k, k), padding=pad, groups=4 * c)
        filtered = filtered.reshape(filtered.shape[0], c, 4, filtered.shape[-2], filtered.shape[-1])
        ll = bands.reshape_as(filtered)[:, :, 0]
        # Closed-form synthesis: gather level-l coefficients at (y >> l, x >> l) with the subband signs.
        iy, ix = ys >> level, xs >> level
        sy = (1 - 2 * ((ys >> (level - 1)) & 1)).to(cdt)[:, None]
        sx = (1 - 2 * ((xs >> (level - 1)) & 1)).to(cdt)[None, :]
        g = filtered[:, :, :, iy][:, :, :, :, ix]  # (B, C, 4, Ho, Wo)
        out = out + (g[:, :, 0] + sy * g[:, :, 1] + sx * g[:, :, 2] + (sy * sx) * g[:, :, 3]) * (0.5**level)
    return out.to(x.dtype)
