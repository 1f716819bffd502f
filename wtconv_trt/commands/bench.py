"""``wtconv-trt bench --engine ENGINE``: latency percentiles and throughput, with and without CUDA graphs; the job
is wtconv_trt.api.engine.benchmark_engine."""

from wtconv_trt import arguments

HELP = "benchmark a TensorRT engine: trtexec-style latency percentiles and throughput per profile shape (JSON)"


def add_arguments(parser):
    parser.add_argument("--engine", required=True, help="engine built by 'wtconv-trt build' (with ENGINE.json)")
    parser.add_argument("--plugin", metavar="LIB", help="WTConv2d plugin library (default: from the manifest)")
    parser.add_argument(
        "--shape",
        action="append",
        default=[],
        metavar="BxCxHxW",
        type=arguments.dims,
        help="input shape to time (repeatable; default: every profile's min, opt and max)",
    )
    parser.add_argument(
        "--iterations", type=arguments.integer, default=200, help="timed inferences per case, 1 to 10^7 (default 200)"
    )
    parser.add_argument(
        "--warmup",
        type=arguments.number,
        default=200.0,
        metavar="MS",
        help="warm-up time per case, 0 to 600000 ms (default 200 ms)",
    )
    parser.add_argument(
        "--cuda-graph",
        choices=("both", "on", "off"),
        default="both",
        help="time with CUDA graphs, without, or both (default both)",
    )
    parser.add_argument("--json", metavar="FILE", help="write the results as JSON to FILE (default: print them)")
    parser.add_argument("--force", action="store_true", help="overwrite an existing --json file")


def run(args) -> int:
    from wtconv_trt.api.engine import benchmark_engine

    result = benchmark_engine(
        args.engine,
        plugin=args.plugin,
        shapes=args.shape or None,
        iterations=args.iterations,
        warmup_ms=args.warmup,
        cuda_graph=args.cuda_graph,
        json_path=args.json,
        force=args.force,
    )
    print(f"results: {result.json_path}" if result.json_path else result.to_json())
    return 0
