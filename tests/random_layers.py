"""Random WTConv2d layers for the CPU tests (one helper shared by the test modules)."""

import torch

from wtconv_torch.wtconv2d import WTConv2d


def random_wtconv(channels, kernel_size, levels, stride=1, bias=True, seed=0, dtype=torch.float64):
    """A WTConv2d with every parameter random (scales too), so no term can hide behind a zero or a one."""
    torch.manual_seed(seed)
    m = WTConv2d(channels, channels, kernel_size=kernel_size, stride=stride, bias=bias, wt_levels=levels)
    with torch.no_grad():
        for name, p in m.named_parameters():
            if name not in ("wt_filter", "iwt_filter"):
                p.copy_(torch.randn_like(p))
    return m.to(dtype)
