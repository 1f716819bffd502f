"""``wtconv-trt demo``: the shipped default model, reference WTConv2d vs the fused operator, layer by layer.

Loads the default model (a small WTConvNeXt trained on digits), folds every WTConv2d, and runs the published
reference and the fused operator (the executable spec behind ``wtconv::fused_wtconv2d``) on the shipped
held-out images; prints per-layer and logits agreement and the accuracy; then exports the model to ONNX
(one WTConv2d plugin node per layer in fp32 and fp16, and the standard-op fallback) and validates each export
against PyTorch with Polygraphy in ONNX Runtime. Exits 1 when any relative error (max |fused - reference| /
max |reference|) exceeds the tolerance or any ONNX validation fails. The job is wtconv_trt.api.demo.run_demo.
"""

from wtconv_trt import arguments

HELP = "run the shipped default model through the reference and the fused WTConv operator and compare them"


def add_arguments(parser) -> None:
    parser.add_argument(
        "--count",
        type=arguments.integer,
        default=64,
        help="number of shipped held-out images to run (default 64, at most the split size)",
    )
    parser.add_argument(
        "--tolerance",
        type=arguments.number,
        default=1e-5,
        help="largest accepted fp32 relative error, per layer and for the logits (default 1e-5)",
    )
    parser.add_argument(
        "--onnx-dir",
        default="wtconv_trt_out",
        help="where the ONNX exports of the default model are written (default ./wtconv_trt_out)",
    )
    parser.add_argument("--skip-onnx", action="store_true", help="only the PyTorch comparison, no ONNX export")
    parser.add_argument("--force", action="store_true", help="overwrite earlier exports in --onnx-dir")


def run(args) -> int:
    from wtconv_trt.api.demo import run_demo

    def show(comparison) -> None:  # at once: the exports that follow take tens of seconds
        print(comparison.text())
        if comparison.passed and not args.skip_onnx:
            print(
                f"\nONNX: export the default model (plugin fp32 / fp16, standard ops fp32) to {args.onnx_dir} "
                f"and validate each against PyTorch with Polygraphy (ONNX Runtime)"
            )

    result = run_demo(
        count=args.count,
        tolerance=args.tolerance,
        onnx_dir=args.onnx_dir,
        skip_onnx=args.skip_onnx,
        force=args.force,
        on_comparison=show,
    )
    if not result.comparison.passed:
        return 1
    if args.skip_onnx:
        return 0
    for exported, outcome in result.exports:
        print(exported.summary())
        print("  " + outcome.summary())
    if not result.passed:
        print("\nFAIL: an ONNX export does not match PyTorch (see above)")
        return 1
    print(f"\nOK: every export matches PyTorch ({result.seconds:.1f} s). {result.next_step}")
    return 0
