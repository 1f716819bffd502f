"""``wtconv-trt validate``: compare an exported ONNX model (or, with --engine, a TensorRT engine) with the
PyTorch reference through Polygraphy; exit status 1 on mismatch."""

from wtconv_trt import arguments

HELP = "compare an exported ONNX model (ONNX Runtime, CPU) or a TensorRT engine with PyTorch via Polygraphy"


def add_arguments(parser) -> None:
    from .export import add_model_arguments

    target = parser.add_mutually_exclusive_group(required=True)
    target.add_argument("model", nargs="?", metavar="MODEL.onnx", help="the exported ONNX model to check")
    target.add_argument(
        "--engine", metavar="ENGINE", help="a TensorRT engine to check instead (needs TensorRT; see trt_engine)"
    )
    add_model_arguments(parser)
    parser.add_argument(
        "--inputs",
        metavar="FILE",
        type=arguments.existing_file,
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
        type=arguments.tolerance,
        default=None,
        help="max |onnx - torch| / max |torch| allowed, > 0 (default: 1e-4 fp32, 2e-2 fp16)",
    )
    parser.add_argument(
        "-v", "--verbose", action="store_true", help="also print Polygraphy's own report (default: one verdict line)"
    )
    add_engine_arguments(parser)  # --plugin, --iterations, --atol/--rtol, --save-*, --force


ENGINE_ONLY = ("plugin", "iterations", "atol", "rtol", "save_inputs", "save_outputs")


def run(args) -> int:
    if args.engine:
        return run_engine_validation(args)

    import contextlib
    import io

    import onnx

    from wtconv_export.errors import InputError, ModelError
    from wtconv_export.inputs import default_inputs, format_dims, load_inputs
    from wtconv_export.model_checks import (
        check_arrays_fit_onnx,
        check_input_arrays,
        check_input_shape,
        check_onnx_matches_model,
        fit_batches,
        onnx_input,
    )
    from wtconv_export.onnx_export import read_metadata
    from wtconv_export.onnx_models import build_model_from_metadata
    from wtconv_export.onnx_validate import validate_onnx
    from wtconv_export.paths import check_input_file

    from .export import model_from_args

    given = [name for name in ENGINE_ONLY if getattr(args, name) is not None]
    if given:
        raise InputError(
            f"--{given[0].replace('_', '-')} applies only with --engine (an ONNX model is checked on "
            f"--inputs or --input-shape)"
        )
    check_input_file(args.model, what="ONNX model", made_by="export one with 'wtconv-trt export -o MODEL.onnx'")
    try:
        proto = onnx.load(args.model, load_external_data=False)
    except Exception as error:  # onnx raises DecodeError and other protobuf errors for a file that is not ONNX
        raise ModelError(
            f"cannot read {args.model} as an ONNX model ({type(error).__name__}); give the .onnx file "
            f"written by 'wtconv-trt export'"
        ) from error
    metadata = read_metadata(proto)
    if args.arch or args.checkpoint or args.random_weights:
        model, description = model_from_args(args)
        what = f"--arch {args.arch}" if args.arch else "the default model"
    else:
        model, description = build_model_from_metadata(metadata)
        what = "the PyTorch model recorded in its metadata"
    check_onnx_matches_model(proto, model, what)
    _, dims = onnx_input(proto)
    del proto
    description = {**metadata, **description}
    if args.inputs:
        inputs = load_inputs(args.inputs)
        check_input_arrays(model, inputs, f"--inputs {args.inputs}")
        check_arrays_fit_onnx(inputs, dims, f"--inputs {args.inputs}")
    elif args.input_shape:
        check_input_shape(model, args.input_shape, "--input-shape")
        check_arrays_fit_onnx([_zeros(args.input_shape)], dims, "--input-shape")
        inputs = default_inputs(description, format_dims(args.input_shape))
        if dims[0] is not None:  # a fixed batch: only the batch asked for (default_inputs adds a larger one)
            inputs = inputs[:1]
    else:
        inputs = fit_batches(default_inputs(description, None), dims)
        check_arrays_fit_onnx(inputs, dims, "the default inputs (give --inputs or --input-shape)")
    quiet = contextlib.nullcontext() if args.verbose else contextlib.redirect_stdout(io.StringIO())
    with quiet:  # Polygraphy's log (and its note about the 'colored' package) only with -v
        result = validate_onnx(args.model, model, inputs, tolerance=args.tolerance, polygraphy_report=args.verbose)
    print(result.summary())
    return 0 if result.passed else 1


def _zeros(shape):
    import numpy as np

    return np.broadcast_to(np.float32(0), tuple(shape))


def add_engine_arguments(parser) -> None:
    """Options of ``wtconv-trt validate`` that only apply with --engine (the validate command adds them; its own
    --arch/--checkpoint/--random-weights, --inputs, --input-shape and --tolerance apply to engines too)."""
    from trt_engine.validate import TOLERANCES

    g = parser.add_argument_group("TensorRT engine (with --engine)")
    g.add_argument(
        "--plugin",
        metavar="LIB",
        help="WTConv2d plugin library (default: the one recorded in the engine's manifest, else "
        "build/plugin/trt/libwtconv_trt_plugin_dynamic.so)",
    )
    g.add_argument(
        "--iterations",
        type=arguments.int_range(1, 10000),
        default=None,
        help="number of generated input batches, 1 to 10000 (default 4); the batch shape is "
        "--input-shape, default the first optimisation profile's opt shape",
    )
    g.add_argument(
        "--atol",
        type=arguments.non_negative_float,
        help="absolute tolerance (default per precision: "
        + ", ".join(f"{p} {a:g}" for p, (a, _) in TOLERANCES.items())
        + ")",
    )
    g.add_argument(
        "--rtol",
        type=arguments.non_negative_float,
        help="relative tolerance (default per precision: "
        + ", ".join(f"{p} {r:g}" for p, (_, r) in TOLERANCES.items())
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


def check_engine_exists(engine: str) -> None:
    """The engine file itself must exist before its manifest is looked for (bench, validate, triton-repo)."""
    from wtconv_export.paths import check_input_file

    check_input_file(engine, what="engine", made_by="build one with 'wtconv-trt build MODEL.onnx'")


def run_engine_validation(args) -> int:
    """``wtconv-trt validate --engine``: the engine options above plus, where given, the reference-model options
    (--arch/--checkpoint/--random-weights), --inputs, --input-shape and --tolerance. Exit status: 0 pass, 1 mismatch."""
    from trt_engine.manifest import read_manifest
    from trt_engine.validate import validate_engine
    from wtconv_export.errors import ModelError
    from wtconv_export.inputs import load_inputs
    from wtconv_export.model_checks import check_arrays_fit_onnx, check_input_arrays, check_input_shape, input_channels
    from wtconv_export.paths import check_output_file

    from .export import model_from_args

    check_engine_exists(args.engine)
    engine_inputs = [t for t in read_manifest(args.engine)["io"] if t["mode"] == "input"]
    # The engine's input dimensions as the manifest records them (-1: dynamic).
    dims = [None if int(d) < 0 else int(d) for d in engine_inputs[0]["shape"]] if len(engine_inputs) == 1 else None
    for option, path in (("--save-inputs", args.save_inputs), ("--save-outputs", args.save_outputs)):
        if path:
            check_output_file(path, option=option, force=args.force)
    shape = "x".join(map(str, args.input_shape)) if args.input_shape else None
    model = source = None
    if args.arch or args.checkpoint or args.random_weights:
        model, source = model_from_args(args)
    if model is not None and dims is not None and len(dims) == 4:
        channels = input_channels(model)
        if channels is not None and dims[1] is not None and dims[1] != channels:
            raise ModelError(
                f"the engine takes {dims[1]} input channels but the PyTorch model given (--arch/--checkpoint) takes "
                f"{channels}: is this the engine built from it? Give the matching model, or leave the options out to "
                f"use the one recorded in the engine's manifest"
            )
    inputs = load_inputs(args.inputs) if args.inputs else None
    if model is not None and inputs is not None:
        check_input_arrays(model, inputs, f"--inputs {args.inputs}")
    if model is not None and args.input_shape:
        check_input_shape(model, args.input_shape, "--input-shape")
    if dims is not None and inputs is not None:
        check_arrays_fit_onnx(inputs, dims, f"--inputs {args.inputs}", "the engine", "rebuild it for that shape")
    report = validate_engine(
        args.engine,
        plugin=args.plugin,
        shape=shape,
        iterations=args.iterations or 4,
        atol=args.atol,
        rtol=args.rtol,
        tolerance=args.tolerance,
        source_model=source,
        model=model,
        inputs=inputs,
        save_inputs=args.save_inputs,
        save_outputs=args.save_outputs,
    )
    print(report.format())
    return 0 if report.passed else 1
