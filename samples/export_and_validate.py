#!/usr/bin/env python3
"""Export a WTConv model to ONNX and check it against PyTorch on the CPU -- no GPU, no TensorRT needed.

    python samples/export_and_validate.py                      # the shipped default model, into ./onnx_out
    python samples/export_and_validate.py --arch wtconvnext_tiny --checkpoint WTConvNeXt_tiny_5_300e_ema.pth
    python samples/export_and_validate.py --arch wtconvnext_tiny --random-weights --input-shape 1,3,64,64

For each variant -- plugin nodes fp32 (what TensorRT with our plugin takes), plugin nodes fp16 (TensorRT 11's
strongly typed fp16 engine), standard ops fp32 (any runtime; TensorRT without the plugin) -- it runs
``wtconv-trt export`` and then ``wtconv-trt validate`` (Polygraphy: PyTorch vs ONNX Runtime, WTConv2d nodes run
by the executable spec through onnxruntime-extensions). Exit status 1 if any validation fails.
"""

import argparse
import sys
from pathlib import Path

from wtconv_trt.cli import main as wtconv_trt

VARIANTS = [("plugin", "fp32"), ("plugin", "fp16"), ("standard", "fp32")]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="onnx_out", help="output directory (default ./onnx_out)")
    parser.add_argument("--arch", help="wtconvnext_tiny / _small / _base (default: the shipped default model)")
    weights = parser.add_mutually_exclusive_group()
    weights.add_argument("--checkpoint", help="published-format .pth or .safetensors weights for --arch")
    weights.add_argument("--random-weights", action="store_true", help="random weights for --arch")
    parser.add_argument("--input-shape", help="B,C,H,W example for the export and the validation inputs")
    args = parser.parse_args()

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    model_args = []
    if args.arch:
        model_args += ["--arch", args.arch]
    if args.checkpoint:
        model_args += ["--checkpoint", args.checkpoint]
    if args.random_weights:
        model_args += ["--random-weights"]
    shape_args = ["--input-shape", args.input_shape] if args.input_shape else []

    failed = []
    for ops, precision in VARIANTS:
        path = out / f"{args.arch or 'default'}_{ops}_{precision}.onnx"
        print(f"\n== wtconv-trt export -o {path} --ops {ops} --precision {precision}", flush=True)
        status = wtconv_trt(
            ["export", "-o", str(path), "--ops", ops, "--precision", precision, "--force", *model_args, *shape_args]
        )
        if status != 0:
            return status
        print(f"== wtconv-trt validate {path}", flush=True)
        # validate rebuilds the PyTorch model from the source recorded in the ONNX metadata.
        if wtconv_trt(["validate", str(path), *shape_args]) != 0:
            failed.append(path.name)
    print()
    if failed:
        print(f"validation FAILED for: {', '.join(failed)}")
        return 1
    print(f"all {len(VARIANTS)} exports match PyTorch in ONNX Runtime; models in {out}/")
    return 0


if __name__ == "__main__":
    sys.exit(main())
