"""``wtconv-trt validate``: compare an exported ONNX model (or, with --engine, a TensorRT engine) with the
PyTorch reference through Polygraphy; exit status 1 on mismatch. The jobs: wtconv_trt.api.onnx_validation.
validate_onnx and wtconv_trt.api.engine.validate_engine."""

from wtconv_core import options
from wtconv_trt import arguments

HELP = "compare an exported ONNX model (ONNX Runtime, CPU or GPU) or a TensorRT engine with PyTorch via Polygraphy"


def add_arguments(parser) -> None:
    target = parser.add_mutually_exclusive_group(required=True)
    target.add_argument("model", nargs="?", metavar="MODEL.onnx", help="the exported ONNX model to check")
    target.add_argument(
        "--engine", metavar="ENGINE", help="a TensorRT engine to check instead (needs TensorRT; see trt_engine)"
    )
    options.add_group(
        parser,
        options.ModelSource,
        "model (default: the one the ONNX metadata or the engine's manifest records)",
        types=arguments,
    )
    parser.add_argument(
        "--inputs",
        metavar="FILE",
        help="inputs: a .npy array (B,C,H,W) or a .npz of such arrays (one comparison each); "
        "default: the shipped held-out digits for the default model, else seeded random images",
    )
    parser.add_argument(
        "--input-shape",
        metavar="B,C,H,W",
        type=arguments.shape,
        help="shape of the generated inputs when there are no shipped or given inputs (B,C,H,W or BxCxHxW)",
    )
    parser.add_argument(
        "--tolerance",
        type=arguments.number,
        default=None,
        help="max |onnx - torch| / max |torch| allowed, > 0 (default: 1e-4 fp32, 2e-2 fp16)",
    )
    parser.add_argument(
        "-v", "--verbose", action="store_true", help="also print Polygraphy's own report (default: one verdict line)"
    )
    g = parser.add_argument_group("ONNX Runtime (MODEL.onnx)")
    g.add_argument(
        "--device",
        default=None,
        metavar="cpu|cuda|cuda:N",
        help="where ONNX Runtime runs the export: cpu (default), or cuda[:N], its CUDA execution provider on GPU N "
        "with TF32 off (needs onnxruntime-gpu, and libwtconv_ort.so built with its CUDA op for WTConv2d nodes)",
    )
    g.add_argument(
        "--ort-library",
        metavar="LIB",
        help="libwtconv_ort.so for the WTConv2d nodes (default: the one 'wtconv-trt doctor' finds; without one, on "
        "the CPU, the slower onnxruntime-extensions Python op runs them)",
    )
    add_engine_arguments(parser)  # --plugin, --iterations, --atol/--rtol, --save-*, --force


# Options of the engine validation only (argparse destinations).
ENGINE_ONLY = ("plugin", "iterations", "atol", "rtol", "save_inputs", "save_outputs")
ONNX_ONLY = ("device", "ort_library")  # where ONNX Runtime runs MODEL.onnx


def add_engine_arguments(parser) -> None:
    """Options of ``wtconv-trt validate`` that only apply with --engine (the validate command adds them; its own
    --arch/--checkpoint/--random-weights, --inputs, --input-shape and --tolerance apply to engines too)."""
    from wtconv_trt.api.engine import ENGINE_TOLERANCES

    g = parser.add_argument_group("TensorRT engine (with --engine)")
    g.add_argument(
        "--plugin",
        metavar="LIB",
        help="WTConv2d plugin library (default: the one recorded in the engine's manifest, else the one "
        "'wtconv-trt doctor' finds)",
    )
    g.add_argument(
        "--iterations",
        type=arguments.integer,
        default=None,
        help="number of generated input batches, 1 to 10000 (default 4); the batch shape is "
        "--input-shape, default the first optimisation profile's opt shape",
    )
    g.add_argument(
        "--atol",
        type=arguments.number,
        help="absolute tolerance, >= 0 (default per precision: "
        + ", ".join(f"{p} {a:g}" for p, (a, _) in ENGINE_TOLERANCES.items())
        + ")",
    )
    g.add_argument(
        "--rtol",
        type=arguments.number,
        help="relative tolerance, >= 0 (default per precision: "
        + ", ".join(f"{p} {r:g}" for p, (_, r) in ENGINE_TOLERANCES.items())
        + ")",
    )
    g.add_argument(
        "--save-inputs",
        metavar="FILE.json",
        help="save the inputs in Polygraphy's JSON format (polygraphy run --load-inputs)",
    )
    g.add_argument(
        "--save-outputs",
        metavar="FILE.json",
        help="save the PyTorch outputs as a Polygraphy RunResults (polygraphy run --load-outputs)",
    )
    g.add_argument("--force", action="store_true", help="overwrite existing --save-inputs / --save-outputs files")


def run(args) -> int:
    source = options.from_args(options.ModelSource, args)  # the PyTorch model compared with
    if args.engine:
        from wtconv_trt.api.engine import validate_engine

        arguments.only_with(args, "model", ONNX_ONLY, "an engine runs in TensorRT", shown="MODEL.onnx")

        report = validate_engine(
            args.engine,
            source,
            plugin=args.plugin,
            inputs=args.inputs,
            input_shape=args.input_shape,
            iterations=args.iterations,
            atol=args.atol,
            rtol=args.rtol,
            tolerance=args.tolerance,
            save_inputs=args.save_inputs,
            save_outputs=args.save_outputs,
            force=args.force,
        )
        print(report.format())
        return 0 if report.passed else 1

    from wtconv_trt.api.engine import check_validation_options
    from wtconv_trt.api.onnx_validation import validate_onnx

    check_validation_options(args.iterations, args.atol, args.rtol)  # a value out of range first, as for --engine
    arguments.only_with(args, "engine", ENGINE_ONLY, "an ONNX model is checked on --inputs or --input-shape")
    result = validate_onnx(
        args.model,
        source,
        inputs=args.inputs,
        input_shape=args.input_shape,
        tolerance=args.tolerance,
        verbose=args.verbose,
        device=args.device or "cpu",
        ort_library=args.ort_library,
    )
    print(result.summary())
    return 0 if result.passed else 1
