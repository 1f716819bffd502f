"""``wtconv-trt build MODEL.onnx --precision fp32|fp16 --plugin LIB --shapes MIN/OPT/MAX``; the job is
wtconv_trt.api.engine.build_engine (trt_engine.build: every check and default)."""

from wtconv_trt import arguments

HELP = "build a TensorRT engine (fp32 / fp16) from an exported ONNX model, with the WTConv2d plugin"


def add_arguments(parser):
    parser.add_argument("onnx", metavar="MODEL.onnx", help="ONNX model from 'wtconv-trt export'")
    parser.add_argument(
        "--precision",
        choices=("fp32", "fp16"),
        default=None,
        help="engine precision (default: the export's, read from the ONNX model). TensorRT 11 needs "
        "an fp16 export for fp16; TensorRT 10 also accepts an fp32 export (BuilderFlag.FP16)",
    )
    parser.add_argument(
        "--backend",
        choices=("auto", "tensorrt", "tensorrt-rtx"),
        default="auto",
        help="TensorRT 10/11 or TensorRT-RTX (default auto: the one installed; TensorRT when both "
        "are). Recorded in the engine's manifest",
    )
    parser.add_argument(
        "--compute-capability",
        action="append",
        metavar="M.m",
        dest="compute_capabilities",
        help="TensorRT-RTX only: a GPU architecture to compile for (e.g. 8.9, 12.0, or 'current'); "
        "repeat for several. Default: every one from 8.0 up (7.5 builds fp16 models only)",
    )
    parser.add_argument(
        "--plugin",
        metavar="LIB",
        help="the dynamic WTConv2d plugin library (plugin/trt, exports getCreators); required "
        "when the model has WTConv2d nodes",
    )
    parser.add_argument(
        "--shapes",
        action="append",
        default=[],
        metavar="[NAME:]MIN/OPT/MAX",
        help="one optimisation profile, e.g. input:1x3x224x224/8x3x224x224/32x3x224x224; "
        "repeat for several profiles; several inputs: comma-separated. Default: batch 1/8/32 "
        "at the model's fixed size, or at the export's example size when H and W are dynamic",
    )
    parser.add_argument(
        "-o",
        "--engine",
        metavar="ENGINE",
        help="output engine file (default MODEL.<precision>.engine beside the ONNX model); the manifest is ENGINE.json",
    )
    parser.add_argument(
        "--timing-cache",
        metavar="FILE",
        help="TensorRT timing cache: read if it exists, written after the build (speeds up rebuilds)",
    )
    parser.add_argument(
        "--workspace",
        type=arguments.integer,
        metavar="MiB",
        help="builder workspace limit in MiB (1 to 16 Ti)",
    )
    parser.add_argument(
        "--optimization-level",
        type=arguments.integer,
        metavar="0-5",
        help="builder optimisation level, 0 to 5 (TensorRT default 3)",
    )
    parser.add_argument(
        "--no-tf32",
        action="store_true",
        help="disallow TF32 for fp32 convolutions and matrix products (TensorRT allows it by default)",
    )
    parser.add_argument(
        "--source-model",
        metavar="SPEC",
        help="the PyTorch model the ONNX model came from, recorded for 'validate': 'default' or "
        "ARCH:CHECKPOINT (default: what the exporter recorded in the ONNX metadata)",
    )
    parser.add_argument("--force", action="store_true", help="overwrite an existing engine and manifest")
    parser.add_argument("--no-progress", action="store_true", help="no progress bars")
    parser.add_argument("--verbose", action="store_true", help="print TensorRT's verbose log")


def run(args) -> int:
    import logging
    import sys
    import warnings

    from wtconv_trt.api.engine import NoPluginNodesWarning, build_engine

    if args.verbose:  # TensorRT's info and verbose messages (the trt_engine.tensorrt logger) on stderr too
        logging.getLogger("trt_engine.tensorrt").setLevel(logging.DEBUG)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", NoPluginNodesWarning)
        try:
            result = build_engine(
                args.onnx,
                precision=args.precision,
                plugin=args.plugin,
                shapes=args.shapes,
                engine=args.engine,
                backend=args.backend,
                compute_capabilities=args.compute_capabilities,
                timing_cache=args.timing_cache,
                workspace_mib=args.workspace,
                optimization_level=args.optimization_level,
                tf32=not args.no_tf32,
                source_model=args.source_model,
                progress=not args.no_progress,
                verbose=args.verbose,
                force=args.force,
            )
        finally:
            for w in caught:
                print(f"warning: {w.message}", file=sys.stderr)
    print(result.summary())
    return 0
