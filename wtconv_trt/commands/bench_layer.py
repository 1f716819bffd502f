"""``wtconv-trt bench-layer``: the fused WTConv kernels against the official kernels, cuDNN depthwise and
x.clone(), per layer shape and in whole models (the library: wtconv_export/benchmark.py)."""

from pathlib import Path

HELP = "benchmark the fused WTConv CUDA kernels (layer shapes, per-call overhead, whole models)"


def add_arguments(parser):
    parser.add_argument("--out", type=Path, default=Path("bench_out"), help="directory for JSON, markdown and PNG")
    parser.add_argument("--dtypes", default="fp32,fp16", help="comma-separated: fp32,fp16,bf16 (default fp32,fp16)")
    parser.add_argument("--quick", action="store_true", help="a small subset of the paper-sweep shapes")
    parser.add_argument("--no-layers", action="store_true", help="skip the layer shapes")
    parser.add_argument("--no-models", action="store_true", help="skip the whole-model throughput (needs timm)")
    parser.add_argument("--no-reference", action="store_true", help="skip the (slow) PyTorch reference module")
    parser.add_argument("--official", type=Path, metavar="PATH",
                        help="checkout of BGU-CS-VIL/WTConv: also time its fused CUDA kernels (fast_wtconv; they "
                             "compile on first use, about a minute)")
    parser.add_argument("--replays", type=int, default=20, help="timed graph replays per method (median)")
    parser.add_argument("--command-line", default="", help="the command to record in the outputs")


def run(args) -> int:
    import logging

    from wtconv_export.benchmark import Options, run_benchmark

    logging.basicConfig(level=logging.INFO, format="%(message)s")
    dtypes = tuple(d.strip() for d in args.dtypes.split(",") if d.strip())
    opts = Options(out=args.out, dtypes=dtypes, quick=args.quick, layers=not args.no_layers,
                   models=not args.no_models, reference=not args.no_reference, official=args.official,
                   replays=args.replays, command=args.command_line or "wtconv-trt bench-layer")
    run_benchmark(opts)
    print((args.out / "bench_layer.md").read_text())
    return 0
