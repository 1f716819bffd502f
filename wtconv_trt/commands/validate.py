"""``wtconv-trt validate``: compare an exported ONNX model (or, with --engine, a TensorRT engine) with the
PyTorch reference through Polygraphy; exit status 1 on mismatch."""

HELP = "compare an exported ONNX model (ONNX Runtime, CPU) or a TensorRT engine with PyTorch via Polygraphy"


def add_arguments(parser) -> None:
    from .export import add_model_arguments
    target = parser.add_mutually_exclusive_group(required=True)
    target.add_argument("model", nargs="?", metavar="MODEL.onnx", help="the exported ONNX model to check")
    target.add_argument("--engine", metavar="ENGINE",
                        help="a TensorRT engine to check instead (needs TensorRT; see trt_engine)")
    add_model_arguments(parser)
    parser.add_argument("--inputs", metavar="FILE",
                        help="inputs: a .npy array (B,C,H,W) or a .npz of such arrays (one comparison each); "
                             "default: the shipped held-out digits for the default model, else seeded random images")
    parser.add_argument("--input-shape", metavar="B,C,H,W",
                        help="shape of the generated inputs when there are no shipped or given inputs")
    parser.add_argument("--tolerance", type=float, default=None,
                        help="max |onnx - torch| / max |torch| allowed (default: 1e-4 fp32, 2e-2 fp16)")
    add_engine_arguments(parser)  # --plugin, --iterations, --atol/--rtol, --save-*


def run(args) -> int:
    if args.engine:
        return run_engine_validation(args)

    import os

    import onnx

    from wtconv_export.inputs import default_inputs, load_inputs
    from wtconv_export.onnx_export import read_metadata
    from wtconv_export.onnx_models import build_model_from_metadata
    from wtconv_export.onnx_validate import validate_onnx

    from .export import model_from_args

    if not os.path.isfile(args.model):
        raise ValueError(f"{args.model} does not exist")
    try:
        proto = onnx.load(args.model, load_external_data=False)
    except Exception as error:
        raise ValueError(f"cannot read {args.model} as an ONNX model: {error}") from error
    metadata = read_metadata(proto)
    del proto
    if args.arch or args.checkpoint or args.random_weights:
        model, description = model_from_args(args)
    else:
        model, description = build_model_from_metadata(metadata)
    description = {**metadata, **description}
    inputs = load_inputs(args.inputs) if args.inputs else default_inputs(description, args.input_shape)
    result = validate_onnx(args.model, model, inputs, tolerance=args.tolerance)
    print(result.summary())
    return 0 if result.passed else 1



def add_engine_arguments(parser) -> None:
    """Options of ``wtconv-trt validate`` that only apply with --engine (the validate command adds them; its own
    --arch/--checkpoint/--random-weights, --inputs, --input-shape and --tolerance apply to engines too)."""
    from trt_engine.validate import TOLERANCES

    g = parser.add_argument_group("TensorRT engine (with --engine)")
    g.add_argument("--plugin", metavar="LIB",
                   help="WTConv2d plugin library (default: the one recorded in the engine's manifest, else "
                        "build/plugin/trt/libwtconv_trt_plugin_dynamic.so)")
    g.add_argument("--iterations", type=int, default=4,
                   help="number of generated input batches (default 4); the batch shape is --input-shape, "
                        "default the first optimisation profile's opt shape")
    g.add_argument("--atol", type=float, help="absolute tolerance (default per precision: "
                   + ", ".join(f"{p} {a:g}" for p, (a, _) in TOLERANCES.items()) + "; else --tolerance)")
    g.add_argument("--rtol", type=float, help="relative tolerance (default per precision: "
                   + ", ".join(f"{p} {r:g}" for p, (_, r) in TOLERANCES.items()) + "; else --tolerance)")
    g.add_argument("--save-inputs", metavar="FILE.json",
                   help="save the inputs in Polygraphy's JSON format (polygraphy run --load-inputs)")
    g.add_argument("--save-outputs", metavar="FILE.json",
                   help="save the PyTorch outputs as a Polygraphy RunResults (polygraphy run --load-outputs)")


def run_engine_validation(args) -> int:
    """``wtconv-trt validate --engine``: the engine options above plus, where given, the reference-model options
    (--arch/--checkpoint/--random-weights), --inputs, --input-shape and --tolerance. Exit status: 0 pass, 1 mismatch."""
    from trt_engine.validate import validate_engine
    from wtconv_export.inputs import load_inputs

    from .export import model_from_args

    shape = args.input_shape.replace(",", "x") if args.input_shape else None
    model = source = None
    if args.arch or args.checkpoint or args.random_weights:
        model, source = model_from_args(args)
    inputs = load_inputs(args.inputs) if args.inputs else None
    atol = args.atol if args.atol is not None else args.tolerance
    rtol = args.rtol if args.rtol is not None else args.tolerance
    report = validate_engine(
        args.engine, plugin=args.plugin, shape=shape, iterations=args.iterations, atol=atol, rtol=rtol,
        source_model=source, model=model, inputs=inputs, save_inputs=args.save_inputs,
        save_outputs=args.save_outputs)
    return 0 if report.passed else 1
