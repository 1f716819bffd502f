"""``wtconv-trt export``: export a model with WTConv2d layers to ONNX (plugin nodes or standard ops)."""

from wtconv_trt import arguments

HELP = "export the default model or a WTConvNeXt to ONNX (one WTConv2d plugin node per layer, or standard ops)"


def add_model_arguments(parser, *, required_default: bool = True) -> None:
    """The model-source options shared by export and validate."""
    group = parser.add_argument_group("model (default: the shipped default model)")
    group.add_argument(
        "--arch",
        choices=("wtconvnext_tiny", "wtconvnext_small", "wtconvnext_base"),
        help="a published WTConvNeXt architecture instead of the shipped default model",
    )
    weights = group.add_mutually_exclusive_group()
    weights.add_argument(
        "--checkpoint",
        metavar="FILE",
        help="published-format weights for --arch: a .pth/.pt state_dict or a .safetensors file",
    )
    weights.add_argument(
        "--random-weights",
        action="store_true",
        help="random weights for --arch (seeded by --seed; every layer contributes)",
    )
    group.add_argument(
        "--seed",
        type=arguments.seed,
        default=0,
        help=f"seed of --random-weights, 0 to {arguments.MAX_SEED} (default 0)",
    )


def model_from_args(args):
    """(model, description) from the model-source options; WtconvTrtError on inconsistent options or a file that
    is not a checkpoint."""
    from wtconv_export.model_checks import check_checkpoint_file
    from wtconv_export.onnx_models import model_from_source

    if args.checkpoint and args.arch:  # without --arch, model_from_source says --arch is needed
        check_checkpoint_file(args.checkpoint)
    return model_from_source(args.arch, checkpoint=args.checkpoint, random_weights=args.random_weights, seed=args.seed)


def add_arguments(parser) -> None:
    parser.add_argument("-o", "--output", required=True, metavar="MODEL.onnx", help="the ONNX file to write")
    add_model_arguments(parser)
    parser.add_argument(
        "--ops",
        choices=("plugin", "standard"),
        default="plugin",
        help="plugin: one wtconv::WTConv2d node per layer (TensorRT plugin, default); "
        "standard: only standard ONNX ops (any runtime, no plugin)",
    )
    parser.add_argument(
        "--precision",
        choices=("fp32", "fp16"),
        default="fp32",
        help="fp16: fp16 activations and WTConv2d nodes (folded weights stay fp32, "
        "LayerNorms run in fp32), for TensorRT's strongly typed networks",
    )
    parser.add_argument(
        "--input-shape",
        metavar="B,C,H,W",
        type=arguments.shape,
        help="example input for tracing, B,C,H,W or BxCxHxW (default: the model's native resolution, batch 1)",
    )
    parser.add_argument(
        "--static", action="store_true", help="fixed input shape (default: batch, height and width are dynamic)"
    )
    parser.add_argument(
        "--opset", type=arguments.opset, default=None, help="ONNX opset of the default domain, >= 18 (default 18)"
    )
    parser.add_argument("--force", action="store_true", help="overwrite the output file if it exists")


def run(args) -> int:
    import logging
    import warnings

    import onnx

    from wtconv_export.errors import ExportError
    from wtconv_export.inputs import parse_shape
    from wtconv_export.model_checks import check_input_shape
    from wtconv_export.onnx_export import DEFAULT_OPSET, NoWTConvWarning, export_onnx
    from wtconv_export.paths import check_output_file

    # Everything the user gave is checked before the model is loaded or traced.
    output = check_output_file(args.output, option="-o", force=args.force)
    model, description = model_from_args(args)
    shape = args.input_shape or parse_shape(description.get("input_shape", "1,3,224,224"))
    check_input_shape(model, shape, "--input-shape", dynamic=not args.static)
    description["input_shape"] = ",".join(map(str, shape))
    opset = args.opset or DEFAULT_OPSET
    # onnxscript's version converter logs its failures with a traceback (lastResort handler); the command says
    # what failed in one line below instead.
    logging.getLogger("onnxscript").setLevel(logging.ERROR)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", NoWTConvWarning)
        try:
            result = export_onnx(
                model,
                output,
                ops=args.ops,
                precision=args.precision,
                input_shape=shape,
                dynamic=not args.static,
                opset=opset,
                metadata=description,
            )
        except (RuntimeError, onnx.checker.ValidationError) as error:
            if opset == DEFAULT_OPSET:
                raise  # the default opset always converts: anything else is a bug, keep its traceback
            first = str(error).strip().splitlines()[-1][:200] if str(error).strip() else type(error).__name__
            raise ExportError(
                f"--opset {opset}: PyTorch's exporter could not write the model in this opset "
                f"({first}); use the default ({DEFAULT_OPSET}) or an opset it supports"
            ) from error
    for warning in caught:
        if issubclass(warning.category, NoWTConvWarning):
            print(f"wtconv-trt export: warning: {warning.message}")
    print(result.summary())
    if result.layers:
        configs = sorted(
            {(layer.channels, layer.kernel_size, layer.wt_levels, layer.stride) for layer in result.layers}
        )
        print(
            f"  {len(result.layers)} WTConv2d layers; (channels, kernel_size, wt_levels, stride): "
            + ", ".join(f"{c}" for c in configs)
        )
    return 0
