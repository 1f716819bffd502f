"""Inputs, float64 expected outputs and error bounds for the plugin harness's GPU part.

    python plugin/trt/harness/make_cases.py --out <dir>

For each layer: a randomly initialised published WTConv2d (scales randomised too), folded with
wtconv_torch.folding.fold_wtconv into the fp32 plugin fields; for each run: an input x in the run's dtype
and the fused spec (wtconv_torch.fused_spec, docs/design.md §2.4) evaluated in float64 on exactly that
input and those fp32 weights. Error metric everywhere: max |y - ref| / max |ref|.

Bounds: fp32 1e-5. fp16 / bf16: 2x the error of PyTorch running the published module in that dtype
(module.half() / module.bfloat16() on the same input), measured here against the same float64 reference.

Writes <dir>/manifest.txt:
    layer <name> <C> <k> <L> <stride>          + <name>.{base_weight,base_bias,wavelet_weight}.f32
    run <layer> <dtype> <N> <H> <W> <bound> <prefix>   + <prefix>.x.bin (raw dtype), <prefix>.y.f64
"""

import argparse
import copy
import pathlib

import torch

from wtconv_torch.folding import fold_wtconv
from wtconv_torch.fused_spec import fused_wtconv2d_spec
from wtconv_torch.wtconv2d import WTConv2d

FP32_BOUND = 1e-5
DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}

# name, C, k, L, stride, runs (dtype, N, H, W): odd, non-square, below 2^L, 1x1, WTConvNeXt stage shapes, planes
# above 64x64 in each dtype (the tiled path, with a workspace).
LAYERS = [
    (
        "a",
        8,
        5,
        3,
        1,
        [
            ("float32", 2, 17, 23),
            ("float32", 1, 64, 48),
            ("float32", 3, 5, 7),
            ("float32", 1, 1, 1),
            ("float16", 2, 33, 31),
            ("float16", 1, 64, 64),
            ("bfloat16", 2, 20, 19),
            ("bfloat16", 1, 9, 40),
        ],
    ),
    # b and e: an fp16 plane above 64x64 too (the tiled path, which needs a workspace: captured by gpuTests.cpp).
    (
        "b",
        16,
        3,
        2,
        2,
        [
            ("float32", 2, 31, 30),
            ("float32", 1, 8, 9),
            ("float16", 1, 40, 41),
            ("float16", 2, 16, 16),
            ("float16", 1, 80, 70),
        ],
    ),
    ("c", 4, 7, 5, 3, [("float32", 1, 50, 47), ("float32", 2, 97, 33)]),
    ("d", 3, 1, 1, 1, [("float32", 2, 9, 10), ("float32", 1, 4, 4), ("float16", 1, 7, 6), ("float16", 2, 3, 3)]),
    (
        "e",
        96,
        5,
        5,
        1,
        [
            ("float16", 2, 56, 56),
            ("float16", 1, 28, 28),
            ("float32", 1, 56, 56),
            ("float32", 2, 28, 28),
            ("float16", 1, 70, 66),
        ],
    ),
    ("f", 2, 15, 8, 2, [("float32", 1, 300, 257), ("float32", 1, 31, 29)]),
]


def random_module(c, k, levels, stride, generator):
    m = WTConv2d(c, c, kernel_size=k, stride=stride, wt_levels=levels)
    with torch.no_grad():
        for p in m.parameters():
            if p.requires_grad:
                p.copy_(torch.randn(p.shape, generator=generator) * 0.5)
    return m.eval()


def rel_error(y, ref):
    return ((y.double() - ref).abs().max() / ref.abs().max().clamp_min(1e-300)).item()


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True, type=pathlib.Path)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    g = torch.Generator().manual_seed(20261130)
    lines = []
    for name, c, k, levels, stride, runs in LAYERS:
        module = random_module(c, k, levels, stride, g)
        folded = fold_wtconv(module)
        for field, tensor in zip(
            ("base_weight", "base_bias", "wavelet_weight"), folded.tensors(dtype=torch.float32), strict=False
        ):
            (args.out / f"{name}.{field}.f32").write_bytes(tensor.numpy().tobytes())
        lines.append(f"layer {name} {c} {k} {levels} {stride}")
        weights64 = folded.tensors(dtype=torch.float64)
        for i, (dtype, n, h, w) in enumerate(runs):
            x = torch.randn(n, c, h, w, generator=g).to(DTYPES[dtype])
            ref = fused_wtconv2d_spec(x.double(), *weights64, k, levels, stride)
            if dtype == "float32":
                bound = FP32_BOUND
            else:
                with torch.no_grad():
                    y_torch = copy.deepcopy(module).to(DTYPES[dtype])(x)
                bound = 2.0 * rel_error(y_torch, ref)
            prefix = f"{name}{i}_{dtype}"
            raw = x.view(torch.int16) if dtype != "float32" else x
            (args.out / f"{prefix}.x.bin").write_bytes(raw.contiguous().numpy().tobytes())
            (args.out / f"{prefix}.y.f64").write_bytes(ref.contiguous().numpy().tobytes())
            lines.append(f"run {name} {dtype} {n} {h} {w} {bound:.6e} {prefix}")
    (args.out / "manifest.txt").write_text("\n".join(lines) + "\n")
    print(f"wrote {len(lines)} manifest lines to {args.out / 'manifest.txt'}")


if __name__ == "__main__":
    main()
