"""Launch our kernels once per benchmark shape and layout, for ncu (tools/device_kernels.sh, STAGES=profile)."""

import torch

from wtconv_export import cuda_kernels
from wtconv_export.folding import fold_wtconv
from wtconv_export.wtconv2d import WTConv2d

SHAPES = [(64, 96, 56, 56, 5, torch.float16), (8, 64, 512, 512, 3, torch.float16), (64, 768, 7, 7, 2, torch.float16)]
for b, c, h, w, lv, dt in SHAPES:
    bw, bb, ww = fold_wtconv(WTConv2d(c, c, 5, wt_levels=lv)).tensors(device="cuda")
    for fmt in (torch.contiguous_format, torch.channels_last):
        x = torch.randn(b, c, h, w, device="cuda", dtype=dt).contiguous(memory_format=fmt)
        out = torch.empty_like(x)
        cuda_kernels.forward_into(out, x, bw, bb, ww, 5, lv, 1)
torch.cuda.synchronize()
