"""Where WTConvNeXt-T's time goes on the GPU, and cuDNN's depthwise convolution in both memory layouts.

Complements `wtconv-trt bench-layer` (docs/bench/bench_layer.md), whose dw7 baseline is cuDNN on NCHW
input, the layout our kernels take. Inside timm's ConvNeXt the depthwise convolution receives a
channels-last-strided tensor (the residual after the MLP's permute), so cuDNN runs its NHWC kernels there.
This script measures, at the WTConvNeXt-T stage shapes (fp16 and fp32):
  ours (NCHW input), ours on a channels-last input (.contiguous() + kernel, what the model pays),
  cuDNN dw7 on NCHW, cuDNN dw7 on channels-last,
and whole-model fp16 time of WTConvNeXt-T (ours), ConvNeXt-T (timm), and ConvNeXt-T with its depthwise
convolutions removed (the rest of the network), at B=256.

Usage (GPU machine, repository root, kernels built): python3 -m benchmarks.bench_layouts --out DIR
"""

import argparse
import json
import math
import time
from pathlib import Path

import torch
import torch.nn as nn

from wtconv_bench.layers import L2_BYTES, STAGES_T, model_forward_ms
from wtconv_bench.layers import time_graph as _time_graph
from wtconv_torch import cuda_kernels
from wtconv_torch.folding import fold_wtconv
from wtconv_torch.wtconv2d import WTConv2d


def layer_rows(batch, replays):
    rows = []
    dev = torch.device("cuda")
    for dtype in (torch.float16, torch.float32):
        for c, hw, levels in STAGES_T:
            nbytes = batch * c * hw * hw * dtype.itemsize
            nbuf = max(1, math.ceil(3 * L2_BYTES / nbytes))
            xs = [torch.randn(batch, c, hw, hw, device=dev, dtype=dtype) for _ in range(nbuf)]
            xs_cl = [x.contiguous(memory_format=torch.channels_last) for x in xs]
            folded = fold_wtconv(WTConv2d(c, c, kernel_size=5, wt_levels=levels))
            bw, bb, ww = folded.tensors(device=dev, dtype=torch.float32)
            outs = [torch.empty_like(x) for x in xs]
            dw7 = nn.Conv2d(c, c, 7, padding=3, groups=c).to(dev, dtype).eval()
            dw7_cl = nn.Conv2d(c, c, 7, padding=3, groups=c).to(dev, dtype).eval().to(memory_format=torch.channels_last)
            methods = {
                "ours_nchw": [
                    lambda x=x, o=o, w=(bw, bb, ww), lv=levels: cuda_kernels.forward_into(o, x, *w, 5, lv, 1)
                    for x, o in zip(xs, outs, strict=True)
                ],
                "ours_from_channels_last": [
                    lambda x=x, o=o, w=(bw, bb, ww), lv=levels: cuda_kernels.forward_into(
                        o, x.contiguous(), *w, 5, lv, 1
                    )
                    for x, o in zip(xs_cl, outs, strict=True)
                ],
                "dw7_nchw": [lambda x=x, conv=dw7: conv(x) for x in xs],
                "dw7_channels_last": [lambda x=x, conv=dw7_cl: conv(x) for x in xs_cl],
                "clone": [lambda x=x: x.clone() for x in xs],
            }
            row = dict(batch=batch, c=c, h=hw, w=hw, levels=levels, dtype=str(dtype).replace("torch.", ""))
            with torch.no_grad():
                for name, calls in methods.items():
                    row[f"{name}_ms"] = _time_graph(torch, calls, replays)
            rows.append(row)
            print(" ".join(f"{k}={v:.4f}" if isinstance(v, float) else f"{k}={v}" for k, v in row.items()), flush=True)
            del xs, xs_cl, outs, methods
            torch.cuda.empty_cache()
    return rows


def model_rows(batch):
    import timm

    from wtconv_torch.fused_module import fuse_wtconv_layers
    from wtconv_torch.wtconvnext import wtconvnext_tiny

    cuda_kernels.register()
    dev = torch.device("cuda")

    def no_dw(model):
        for module in model.modules():
            if hasattr(module, "conv_dw"):
                module.conv_dw = nn.Identity()
        return model

    models = {
        "wtconvnext_t_ours": lambda: fuse_wtconv_layers(wtconvnext_tiny().eval().to(dev, torch.float16)),
        "convnext_t_timm": lambda: timm.create_model("convnext_tiny").eval().to(dev, torch.float16),
        "convnext_t_without_depthwise": lambda: no_dw(timm.create_model("convnext_tiny").eval().to(dev, torch.float16)),
    }
    rows = []
    for name, make in models.items():
        model = make()
        ms = model_forward_ms(torch, model, batch)
        rows.append(dict(model=name, batch=batch, dtype="float16", ms=ms, img_per_s=batch / (ms * 1e-3)))
        print(f"model {name} B={batch}: {ms:.2f} ms {batch / (ms * 1e-3):.0f} img/s", flush=True)
        del model
        torch.cuda.empty_cache()
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--replays", type=int, default=7)
    parser.add_argument("--batch", type=int, default=256)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    meta = dict(
        gpu=torch.cuda.get_device_name(),
        torch=torch.__version__,
        date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        command=f"python3 -m benchmarks.bench_layouts --out OUT --replays {args.replays} --batch {args.batch}",
    )
    result = dict(meta=meta, layers=layer_rows(args.batch, args.replays), models=model_rows(args.batch))
    (args.out / "bench_layouts.json").write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
