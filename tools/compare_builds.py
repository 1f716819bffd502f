"""Time our kernels (the library in WTCONV_KERNELS_LIB) at the WTConvNeXt-T stage shapes, B = 64, fp16 and fp32,
NCHW and channels-last; print one JSON line {label: {case: ms}}. tools/device_kernels.sh runs it once per
build variant and keeps the faster build."""

import json
import math
import sys
from functools import partial

import torch

from wtconv_export import cuda_kernels
from wtconv_export.benchmark import L2_BYTES, STAGES_T, time_graph
from wtconv_export.folding import fold_wtconv
from wtconv_export.wtconv2d import WTConv2d

label = sys.argv[1] if len(sys.argv) > 1 else "build"
cuda_kernels.register()
result = {}
for dtype in (torch.float16, torch.float32):
    for c, hw, levels in STAGES_T:
        bw, bb, ww = fold_wtconv(WTConv2d(c, c, 5, wt_levels=levels)).tensors(device="cuda")
        weights = (bw.data_ptr(), bb.data_ptr(), ww.data_ptr())
        nbuf = max(1, math.ceil(3 * L2_BYTES / (64 * c * hw * hw * dtype.itemsize)))
        for layout, fmt in ((cuda_kernels.NCHW, torch.contiguous_format), (cuda_kernels.NHWC, torch.channels_last)):
            xs = [
                torch.randn(64, c, hw, hw, device="cuda", dtype=dtype).contiguous(memory_format=fmt)
                for _ in range(nbuf)
            ]
            outs = [torch.empty_like(x) for x in xs]
            calls = [
                partial(cuda_kernels.launch, o, x, layout, weights, 5, levels, 1) for x, o in zip(xs, outs, strict=True)
            ]
            key = f"{str(dtype)[6:]} {c}x{hw}^2 {'nhwc' if layout else 'nchw'}"
            result[key] = time_graph(torch, calls, 20)
print(json.dumps({label: result}))
