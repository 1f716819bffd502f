"""Haar (db1) filters and transforms with the published module's numerics, without PyWavelets.

The published WTConv2d (BGU-CS-VIL/WTConv, ``wtconv/util/wavelet.py``) builds its filters from
``pywt.Wavelet('db1')``: dec_lo = rec_lo = (1/sqrt2, 1/sqrt2), dec_hi = (-1/sqrt2, 1/sqrt2),
rec_hi = (1/sqrt2, -1/sqrt2), then takes outer products in float32, so every tap is
+-0.49999997 (0.5 rounded through float32), not exactly 1/2. We reproduce that bit for bit so
published checkpoints (which store these filters) load strictly and give identical outputs.
"""

import math

import torch
import torch.nn.functional as F

_INV_SQRT2 = 1.0 / math.sqrt(2.0)
_DEC_LO = (_INV_SQRT2, _INV_SQRT2)
_DEC_HI = (-_INV_SQRT2, _INV_SQRT2)
_REC_LO = (_INV_SQRT2, _INV_SQRT2)
_REC_HI = (_INV_SQRT2, -_INV_SQRT2)

SUBBANDS = ("LL", "LH", "HL", "HH")


def _outer_products(lo: torch.Tensor, hi: torch.Tensor) -> torch.Tensor:
    # Subband order LL, LH, HL, HH; rows of LH vary with `hi`, columns of HL vary with `hi`.
    return torch.stack(
        [
            lo.unsqueeze(0) * lo.unsqueeze(1),
            lo.unsqueeze(0) * hi.unsqueeze(1),
            hi.unsqueeze(0) * lo.unsqueeze(1),
            hi.unsqueeze(0) * hi.unsqueeze(1),
        ],
        dim=0,
    )


def create_2d_haar_filters(channels: int, dtype: torch.dtype = torch.float32) -> tuple[torch.Tensor, torch.Tensor]:
    """Return (wt_filter, iwt_filter), each (4*channels, 1, 2, 2), as the published module makes them."""
    dec_lo = torch.tensor(_DEC_LO[::-1], dtype=dtype)
    dec_hi = torch.tensor(_DEC_HI[::-1], dtype=dtype)
    rec_lo = torch.tensor(_REC_LO, dtype=dtype)
    rec_hi = torch.tensor(_REC_HI, dtype=dtype)
    dec = _outer_products(dec_lo, dec_hi)[:, None].repeat(channels, 1, 1, 1)
    rec = _outer_products(rec_lo, rec_hi)[:, None].repeat(channels, 1, 1, 1)
    return dec, rec


def wavelet_2d_transform(x: torch.Tensor, filters: torch.Tensor) -> torch.Tensor:
    """(B, C, H, W) with H, W even -> (B, C, 4, H/2, W/2) by a stride-2 grouped convolution."""
    b, c, h, w = x.shape
    y = F.conv2d(x, filters.to(x.dtype), stride=2, groups=c)
    return y.reshape(b, c, 4, h // 2, w // 2)


def inverse_2d_wavelet_transform(x: torch.Tensor, filters: torch.Tensor) -> torch.Tensor:
    """(B, C, 4, h, w) -> (B, C, 2h, 2w) by a stride-2 grouped transposed convolution."""
    b, c, _, h, w = x.shape
    return F.conv_transpose2d(x.reshape(b, c * 4, h, w), filters.to(x.dtype), stride=2, groups=c)
