"""``wtconv-trt bench-layer``: the fused WTConv kernels against the official kernels, cuDNN depthwise and
x.clone(), per layer shape and in whole models (the job: wtconv_trt.api.bench_layer.benchmark_layers)."""

from pathlib import Path

from wtconv_trt import arguments

HELP = "benchmark the fused WTConv CUDA kernels (layer shapes, per-call overhead, whole models)"


def add_arguments(parser):
    parser.add_argument("--out", type=Path, default=Path("bench_out"), help="directory for JSON, markdown and PNG")
    parser.add_argument(
        "--dtypes",
        type=arguments.word_list,
        default=("fp32", "fp16"),
        help="comma-separated: fp32,fp16,bf16 (default fp32,fp16)",
    )
    parser.add_argument("--quick", action="store_true", help="a small subset of the paper-sweep shapes")
    parser.add_argument("--no-layers", action="store_true", help="skip the layer shapes")
    parser.add_argument("--no-models", action="store_true", help="skip the whole-model throughput (needs timm)")
    parser.add_argument("--no-reference", action="store_true", help="skip the (slow) PyTorch reference module")
    parser.add_argument(
        "--official",
        type=Path,
        metavar="PATH",
        help="checkout of BGU-CS-VIL/WTConv: also time its fused CUDA kernels (fast_wtconv; they "
        "compile on first use, about a minute)",
    )
    parser.add_argument(
        "--replays",
        type=arguments.integer,
        default=20,
        help="timed graph replays per method, 1 to 100000 (median; default 20)",
    )
    parser.add_argument("--force", action="store_true", help="overwrite earlier results in --out")
    parser.add_argument("--command-line", default="", help="the command to record in the outputs")


def run(args) -> int:
    import logging

    from wtconv_trt.api.bench_layer import benchmark_layers

    logging.basicConfig(level=logging.INFO, format="%(message)s")
    result = benchmark_layers(
        args.out,
        dtypes=args.dtypes,
        quick=args.quick,
        layers=not args.no_layers,
        models=not args.no_models,
        reference=not args.no_reference,
        official=args.official,
        replays=args.replays,
        force=args.force,
        command_line=args.command_line,
    )
    print(result.markdown())
    return 0
