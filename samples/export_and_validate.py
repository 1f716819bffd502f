#!/usr/bin/env python3
"""Export a WTConv model to ONNX and check it against PyTorch on the CPU -- no GPU, no TensorRT needed.

    python samples/export_and_validate.py                      # the shipped default model, into ./onnx_out
    python samples/export_and_validate.py --arch wtconvnext_tiny --checkpoint WTConvNeXt_tiny_5_300e_ema.pth
    python samples/export_and_validate.py --arch wtconvnext_tiny --random-weights --input-shape 1,3,64,64
    python samples/export_and_validate.py --arch wtconvnext_tiny --checkpoint ckpt10.pth   # fine-tuned (10 classes)

For each variant -- plugin nodes fp32 (what TensorRT with our plugin takes), plugin nodes fp16 (TensorRT 11's
strongly typed fp16 engine), standard ops fp32 (any runtime; TensorRT without the plugin) -- it calls the Python
API: ``wtconv_trt.export_onnx`` and then ``wtconv_trt.validate_onnx`` (Polygraphy: PyTorch vs ONNX Runtime, the
WTConv2d nodes run by the operator's custom-op library or its executable spec). The PyTorch model is loaded once
(``wtconv_trt.load_model``) and handed to both. Exit status 1 if any validation fails, 2 with one line for a
mistake in the arguments (as the ``wtconv-trt`` command line).
"""

import argparse
import sys
from pathlib import Path

import wtconv_trt

VARIANTS = [("plugin", "fp32"), ("plugin", "fp16"), ("standard", "fp32")]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="onnx_out", help="output directory (default ./onnx_out)")
    parser.add_argument("--arch", help="wtconvnext_tiny / _small / _base (default: the shipped default model)")
    weights = parser.add_mutually_exclusive_group()
    weights.add_argument("--checkpoint", help="published-format .pth or .safetensors weights for --arch")
    weights.add_argument("--random-weights", action="store_true", help="random weights for --arch")
    parser.add_argument("--num-classes", type=int, help="classes of --arch's head (default: the checkpoint's, or 1000)")
    parser.add_argument("--in-chans", type=int, help="input channels of --arch (default: the checkpoint's, or 3)")
    parser.add_argument("--input-shape", help="B,C,H,W example for the export and the validation inputs")
    args = parser.parse_args()
    source = wtconv_trt.ModelSource(
        arch=args.arch,
        checkpoint=args.checkpoint,
        random_weights=args.random_weights,
        num_classes=args.num_classes,
        in_chans=args.in_chans,
    )

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    try:
        model, _ = wtconv_trt.load_model(source)
        failed = []
        for ops, precision in VARIANTS:
            path = out / f"{args.arch or 'default'}_{ops}_{precision}.onnx"
            print(f"\n== export {path} (ops {ops}, precision {precision})", flush=True)
            exported = wtconv_trt.export_onnx(
                path,
                source,
                ops=ops,
                precision=precision,
                input_shape=args.input_shape,
                force=True,
            )
            print(exported.summary())
            # The export records its source model in its metadata; the model loaded above saves rebuilding it.
            result = wtconv_trt.validate_onnx(path, model, input_shape=args.input_shape)
            print(result.summary())
            if not result.passed:
                failed.append(path.name)
    except wtconv_trt.WtconvTrtError as error:
        print(f"{parser.prog}: error: {error}", file=sys.stderr)
        return 2
    print()
    if failed:
        print(f"validation FAILED for: {', '.join(failed)}")
        return 1
    print(f"all {len(VARIANTS)} exports match PyTorch in ONNX Runtime; models in {out}/")
    return 0


if __name__ == "__main__":
    sys.exit(main())
