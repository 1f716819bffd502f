"""``wtconv-trt build MODEL.onnx --precision fp32|fp16 --plugin LIB --shapes MIN/OPT/MAX``."""

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
        type=arguments.int_range(1, 1 << 24, " MiB"),
        metavar="MiB",
        help="builder workspace limit in MiB (1 to 16 Ti)",
    )
    parser.add_argument(
        "--optimization-level",
        type=arguments.int_range(0, 5),
        metavar="0-5",
        help="builder optimisation level (TensorRT default 3)",
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


# TensorRT indexes most tensors with 32-bit offsets: a profile whose largest input has more elements cannot build.
MAX_INPUT_ELEMENTS = 2**31 - 1


def _precision(args, info, notes: list) -> str:
    """--precision, else the export's: fp16 for an fp16 export, fp32 otherwise (a line added to ``notes``)."""
    if args.precision:
        return args.precision
    precision = "fp16" if info.input_dtype == "float16" else "fp32"
    notes.append(
        f"precision: {precision} (the export's; an fp16 engine needs 'wtconv-trt export --precision fp16', "
        f"or --precision fp16 with TensorRT 10)"
    )
    return precision


def _default_shapes(args, info, notes: list) -> list:
    """--shapes, else, when H and W are dynamic, batch 1/8/32 at the export's example size (its metadata; a line
    added to ``notes``)."""
    from wtconv_export.inputs import parse_shape

    if args.shapes or len(info.inputs) != 1:
        return list(args.shapes)
    name, dims = next(iter(info.inputs.items()))
    dynamic = [i for i, d in enumerate(dims) if not (isinstance(d, int) and d >= 0)]
    example = info.metadata.get("input_shape")
    if not example or len(dims) != 4 or not set(dynamic) - {0}:
        return []  # fixed H and W: trt_engine's default profile (batch 1/8/32 at that size)
    _, channels, height, width = parse_shape(example, "the export's input_shape metadata")
    shapes = "/".join(f"{b}x{channels}x{height}x{width}" for b in (1, 8, 32))
    notes.append(
        f"profile: {name}:{shapes} (batch 1/8/32 at the export's {height}x{width}; give --shapes for other sizes)"
    )
    return [f"{name}:{shapes}"]


def _check_profiles_fit_model(info, profiles) -> None:
    """Every profile's min, opt and max shape must fit the exported model (its channels, its smallest height and
    width), read from the architecture the ONNX metadata names: TensorRT would otherwise fail late or build an
    engine that cannot run those shapes."""
    from wtconv_export.model_checks import architecture_of, check_input_shape

    model = architecture_of(info.metadata) if len(info.inputs) == 1 else None
    if model is None:
        return
    for profile in profiles:
        for name, r in profile.inputs.items():
            if len(r.min) != 4:
                continue
            for which, shape in (("min", r.min), ("opt", r.opt), ("max", r.max)):
                check_input_shape(model, shape, f"--shapes {name} {which}", limit_memory=False, suggest=False)


def _check_before_tensorrt(args, info, precision: str, shapes: list) -> None:
    """Everything the user gave, checked before TensorRT is imported: profiles and their size, the plugin
    library, where the engine, its manifest and the timing cache go."""
    from trt_engine.build import default_engine_path, plan_profiles
    from wtconv_export.errors import InputError, PluginError
    from wtconv_export.paths import check_output_file

    profiles = plan_profiles(shapes, info.inputs)
    for profile in profiles:
        for name, r in profile.inputs.items():
            elements = 1
            for d in r.max:
                elements *= d
            if elements > MAX_INPUT_ELEMENTS:
                raise InputError(
                    f"--shapes {name}: the max shape {'x'.join(map(str, r.max))} has {elements} "
                    f"elements, more than TensorRT's {MAX_INPUT_ELEMENTS} per tensor; give a smaller "
                    f"max batch or size"
                )
    if args.plugin:
        from trt_engine.plugin_library import inspect_library

        library = inspect_library(args.plugin)
        if not library.exports_get_creators:
            raise PluginError(
                f"--plugin {args.plugin} is a shared library but not the dynamic WTConv2d plugin (it "
                f"exports no getCreators); pass build/plugin/trt/libwtconv_trt_plugin_dynamic.so"
            )
    _check_profiles_fit_model(info, profiles)
    engine = args.engine or str(default_engine_path(args.onnx, precision))
    check_output_file(engine, option="-o", force=args.force)
    check_output_file(engine + ".json", option="-o (its manifest)", force=args.force)
    if args.timing_cache:
        check_output_file(args.timing_cache, option="--timing-cache", force=True)


def run(args) -> int:
    import sys
    import warnings

    from trt_engine.build import BuildOptions, NoPluginNodesWarning, build_engine, inspect_onnx
    from wtconv_export.paths import check_input_file

    check_input_file(args.onnx, what="ONNX model", made_by="export one with 'wtconv-trt export -o MODEL.onnx'")
    info = inspect_onnx(args.onnx)
    notes: list = []
    precision = _precision(args, info, notes)
    shapes = _default_shapes(args, info, notes)
    _check_before_tensorrt(args, info, precision, shapes)
    for note in notes:  # the defaults chosen, said once everything given is known to be usable
        print(note, file=sys.stderr)

    opts = BuildOptions(
        onnx=args.onnx,
        precision=precision,
        plugin=args.plugin,
        shapes=shapes,
        engine=args.engine,
        timing_cache=args.timing_cache,
        workspace_mib=args.workspace,
        optimization_level=args.optimization_level,
        tf32=not args.no_tf32,
        source_model=args.source_model,
        progress=not args.no_progress,
        verbose=args.verbose,
        backend=args.backend,
        compute_capabilities=args.compute_capabilities,
    )
    if args.verbose:  # TensorRT's info and verbose messages (the trt_engine.tensorrt logger) on stderr too
        import logging

        logging.getLogger("trt_engine.tensorrt").setLevel(logging.DEBUG)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", NoPluginNodesWarning)
        try:
            result = build_engine(opts)
        finally:
            for w in caught:
                print(f"warning: {w.message}", file=sys.stderr)
    m = result.manifest
    print(
        f"engine:   {result.engine_path} ({m['engine']['bytes'] / 2**20:.1f} MiB, "
        f"{'TensorRT-RTX' if m['tensorrt'].get('backend') == 'tensorrt-rtx' else 'TensorRT'} "
        f"{m['tensorrt']['version']}, "
        f"{m['precision']}, built in {result.seconds:.1f} s)"
    )
    print(f"manifest: {result.manifest_path}")
    for t in m["io"]:
        print(f"  {t['mode']:6} {t['name']}: {t['dtype']} {t['shape']}")
    return 0
