"""``wtconv-trt bench-layer``: the fused WTConv kernels against the official kernels, cuDNN depthwise and
x.clone(), per layer shape and in whole models (the library: wtconv_export/benchmark.py)."""

from pathlib import Path

from wtconv_trt import arguments

HELP = "benchmark the fused WTConv CUDA kernels (layer shapes, per-call overhead, whole models)"


def add_arguments(parser):
    parser.add_argument("--out", type=Path, default=Path("bench_out"), help="directory for JSON, markdown and PNG")
    parser.add_argument(
        "--dtypes", type=_dtypes, default=("fp32", "fp16"), help="comma-separated: fp32,fp16,bf16 (default fp32,fp16)"
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
        type=arguments.int_range(1, 100000),
        default=20,
        help="timed graph replays per method, 1 to 100000 (median; default 20)",
    )
    parser.add_argument("--force", action="store_true", help="overwrite earlier results in --out")
    parser.add_argument("--command-line", default="", help="the command to record in the outputs")


# The files the benchmark writes into --out (wtconv_export.benchmark.run_benchmark).
OUTPUT_FILES = ("bench_layer.json", "bench_layer.md", "bench_layer.png")


def _dtypes(text: str) -> tuple:
    """Comma-separated dtypes from fp32, fp16, bf16 (at least one)."""
    import argparse

    dtypes = tuple(d.strip() for d in text.split(",") if d.strip())
    unknown = [d for d in dtypes if d not in ("fp32", "fp16", "bf16")]
    if not dtypes or unknown:
        raise argparse.ArgumentTypeError(f"expected comma-separated dtypes from fp32, fp16, bf16, got {text!r}")
    return dtypes


def run(args) -> int:
    import logging

    from wtconv_export.benchmark import Options, run_benchmark
    from wtconv_export.paths import check_output_dir

    check_output_dir(args.out, option="--out", force=args.force, will_write=OUTPUT_FILES)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    dtypes = args.dtypes
    opts = Options(
        out=args.out,
        dtypes=dtypes,
        quick=args.quick,
        layers=not args.no_layers,
        models=not args.no_models,
        reference=not args.no_reference,
        official=args.official,
        replays=args.replays,
        command=args.command_line or "wtconv-trt bench-layer",
    )
    run_benchmark(opts)
    print((args.out / "bench_layer.md").read_text())
    return 0
