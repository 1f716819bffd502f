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
    from trt_engine.validate import add_engine_arguments  # --plugin, --iterations, --atol/--rtol, --save-*
    add_engine_arguments(parser)


def load_inputs(path: str) -> list:
    """Arrays from a .npy (one input) or .npz (each array an input); ValueError when unreadable."""
    import os

    import numpy as np
    if not os.path.isfile(path):
        raise ValueError(f"--inputs {path} does not exist")
    try:
        loaded = np.load(path, allow_pickle=False)
    except Exception as error:
        raise ValueError(f"cannot read --inputs {path} as .npy/.npz: {error}") from error
    arrays = [loaded[k] for k in loaded.files] if hasattr(loaded, "files") else [loaded]
    for a in arrays:
        if a.ndim != 4 or not np.issubdtype(a.dtype, np.floating):
            raise ValueError(f"--inputs {path}: each array must be a float (B, C, H, W) array, got "
                             f"{a.dtype} {a.shape}")
    return arrays


def default_inputs(description: dict, shape_text: str | None) -> list:
    """The shipped held-out digits for the default model, else two seeded random batches (B and max(B, 3))."""
    import numpy as np

    from .export import parse_shape
    if shape_text is None and description.get("source") == "default":
        from ..models import load_heldout_digits   # the shipped held-out digits, preprocessed
        images, _ = load_heldout_digits(count=9)
        images = images.numpy()
        return [images[:1], images[1:]]            # batch 1 and batch 8
    shape = parse_shape(shape_text or description.get("input_shape", "1,3,224,224"))
    rng = np.random.default_rng(0)
    batch3 = (max(shape[0], 3),) + shape[1:]
    return [rng.standard_normal(shape, dtype=np.float32), rng.standard_normal(batch3, dtype=np.float32)]


def run(args) -> int:
    if args.engine:
        from trt_engine import validate as engine_validate  # the TensorRT path lives with the engines
        return int(engine_validate.run_engine_validation(args) or 0)

    import os

    import onnx

    from ..onnx_export import read_metadata
    from ..onnx_models import build_model_from_metadata
    from ..onnx_validate import validate_onnx
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
