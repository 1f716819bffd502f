"""``wtconv-trt build MODEL.onnx --precision fp32|fp16 --plugin LIB --shapes MIN/OPT/MAX``."""

HELP = "build a TensorRT engine (fp32 / fp16) from an exported ONNX model, with the WTConv2d plugin"


def add_arguments(parser):
    parser.add_argument("onnx", metavar="MODEL.onnx", help="ONNX model from 'wtconv-trt export'")
    parser.add_argument("--precision", choices=("fp32", "fp16"), default="fp16",
                        help="engine precision (default fp16). TensorRT 11 needs an fp16 export for fp16; "
                             "TensorRT 10 also accepts an fp32 export (BuilderFlag.FP16)")
    parser.add_argument("--plugin", metavar="LIB",
                        help="the dynamic WTConv2d plugin library (plugin/trt, exports getCreators); required "
                             "when the model has WTConv2d nodes")
    parser.add_argument("--shapes", action="append", default=[], metavar="[NAME:]MIN/OPT/MAX",
                        help="one optimisation profile, e.g. input:1x3x224x224/8x3x224x224/32x3x224x224; "
                             "repeat for several profiles; several inputs: comma-separated. Default: batch 1/8/32 "
                             "at the model's fixed size")
    parser.add_argument("-o", "--engine", metavar="ENGINE",
                        help="output engine file (default MODEL.<precision>.engine beside the ONNX model); the "
                             "manifest is ENGINE.json")
    parser.add_argument("--timing-cache", metavar="FILE",
                        help="TensorRT timing cache: read if it exists, written after the build (speeds up rebuilds)")
    parser.add_argument("--workspace", type=int, metavar="MiB", help="builder workspace limit in MiB")
    parser.add_argument("--optimization-level", type=int, choices=range(0, 6), metavar="0-5",
                        help="builder optimisation level (TensorRT default 3)")
    parser.add_argument("--no-tf32", action="store_true",
                        help="disallow TF32 for fp32 convolutions and matrix products (TensorRT allows it by default)")
    parser.add_argument("--source-model", metavar="SPEC",
                        help="the PyTorch model the ONNX model came from, recorded for 'validate': 'default' or "
                             "ARCH:CHECKPOINT (default: what the exporter recorded in the ONNX metadata)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bars")
    parser.add_argument("--verbose", action="store_true", help="print TensorRT's verbose log")


def run(args) -> int:
    import sys
    import warnings

    from trt_engine.build import BuildOptions, NoPluginNodesWarning, build_engine

    opts = BuildOptions(onnx=args.onnx, precision=args.precision, plugin=args.plugin, shapes=list(args.shapes),
                        engine=args.engine, timing_cache=args.timing_cache, workspace_mib=args.workspace,
                        optimization_level=args.optimization_level, tf32=not args.no_tf32,
                        source_model=args.source_model, progress=not args.no_progress, verbose=args.verbose)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", NoPluginNodesWarning)
        try:
            result = build_engine(opts)
        finally:
            for w in caught:
                print(f"warning: {w.message}", file=sys.stderr)
    m = result.manifest
    print(f"engine:   {result.engine_path} ({m['engine']['bytes'] / 2**20:.1f} MiB, "
          f"TensorRT {m['tensorrt']['version']}, "
          f"{m['precision']}, built in {result.seconds:.1f} s)")
    print(f"manifest: {result.manifest_path}")
    for t in m["io"]:
        print(f"  {t['mode']:6} {t['name']}: {t['dtype']} {t['shape']}")
    return 0
