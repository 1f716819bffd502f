"""Launch our kernels on a few benchmark shapes, for ncu (tools/device_kernels.sh, STAGES=profile)."""
import torch

from wtconv_export import cuda_kernels
from wtconv_export.folding import fold_wtconv
from wtconv_export.wtconv2d import WTConv2d

SHAPES = [(8, 64, 512, 512, 1, torch.float16), (8, 64, 512, 512, 3, torch.float16), (64, 768, 7, 7, 2, torch.float16)]
for b, c, h, w, lv, dt in SHAPES:
    x = torch.randn(b, c, h, w, device="cuda", dtype=dt)
    bw, bb, ww = fold_wtconv(WTConv2d(c, c, 5, wt_levels=lv)).tensors(device="cuda")
    out = torch.empty_like(x)
    for _ in range(2):
        cuda_kernels.forward_into(out, x, bw, bb, ww, 5, lv, 1)
    torch.cuda.synchronize()
