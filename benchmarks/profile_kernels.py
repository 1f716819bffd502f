"""Launch our kernels once per benchmark shape and layout, for ncu (tools/device_kernels.sh, stages profile and
profile:<name>): the WTConvNeXt-T stage shapes (fp16, B = 64, k = 5), then one tiled-path shape unless --stages."""

import argparse

import torch

from wtconv_torch import cuda_kernels
from wtconv_torch.folding import fold_wtconv
from wtconv_torch.wtconv2d import WTConv2d

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--stages", action="store_true", help="the four stage shapes only")
parser.add_argument("--batch", type=int, default=64)
args = parser.parse_args()
SHAPES = [
    (args.batch, c, hw, hw, lv, torch.float16) for c, hw, lv in ((96, 56, 5), (192, 28, 4), (384, 14, 3), (768, 7, 2))
]
if not args.stages:
    SHAPES.append((8, 64, 512, 512, 3, torch.float16))
for b, c, h, w, lv, dt in SHAPES:
    bw, bb, ww = fold_wtconv(WTConv2d(c, c, 5, wt_levels=lv)).tensors(device="cuda")
    for fmt in (torch.contiguous_format, torch.channels_last):
        x = torch.randn(b, c, h, w, device="cuda", dtype=dt).contiguous(memory_format=fmt)
        out = torch.empty_like(x)
        cuda_kernels.forward_into(out, x, bw, bb, ww, 5, lv, 1)
torch.cuda.synchronize()
