"""``wtconv-trt export``: export a model with WTConv2d layers to ONNX (plugin nodes or standard ops)."""

HELP = "export the default model or a WTConvNeXt to ONNX (one WTConv2d plugin node per layer, or standard ops)"


def add_model_arguments(parser, *, required_default: bool = True) -> None:
    """The model-source options shared by export and validate."""
    group = parser.add_argument_group("model (default: the shipped default model)")
    group.add_argument("--arch", choices=("wtconvnext_tiny", "wtconvnext_small", "wtconvnext_base"),
                       help="a published WTConvNeXt architecture instead of the shipped default model")
    weights = group.add_mutually_exclusive_group()
    weights.add_argument("--checkpoint", metavar="FILE",
                         help="published-format weights for --arch: a .pth/.pt state_dict or a .safetensors file")
    weights.add_argument("--random-weights", action="store_true",
                         help="random weights for --arch (seeded by --seed; every layer contributes)")
    group.add_argument("--seed", type=int, default=0, help="seed of --random-weights (default 0)")


def model_from_args(args):
    """(model, description) from the model-source options; ValueError on inconsistent options."""
    from wtconv_export.onnx_models import model_from_source

    return model_from_source(args.arch, checkpoint=args.checkpoint, random_weights=args.random_weights,
                             seed=args.seed)




def add_arguments(parser) -> None:
    parser.add_argument("-o", "--output", required=True, metavar="MODEL.onnx", help="the ONNX file to write")
    add_model_arguments(parser)
    parser.add_argument("--ops", choices=("plugin", "standard"), default="plugin",
                        help="plugin: one wtconv::WTConv2d node per layer (TensorRT plugin, default); "
                             "standard: only standard ONNX ops (any runtime, no plugin)")
    parser.add_argument("--precision", choices=("fp32", "fp16"), default="fp32",
                        help="fp16: fp16 activations and WTConv2d nodes (folded weights stay fp32, "
                             "LayerNorms run in fp32), for TensorRT's strongly typed networks")
    parser.add_argument("--input-shape", metavar="B,C,H,W",
                        help="example input for tracing (default: the model's native resolution, batch 1)")
    parser.add_argument("--static", action="store_true",
                        help="fixed input shape (default: batch, height and width are dynamic)")
    parser.add_argument("--opset", type=int, default=None, help="ONNX opset of the default domain (default 18)")


def run(args) -> int:
    import warnings

    from wtconv_export.inputs import parse_shape
    from wtconv_export.onnx_export import DEFAULT_OPSET, NoWTConvWarning, check_output_path, export_onnx

    check_output_path(args.output)   # fail before loading or tracing anything
    model, description = model_from_args(args)
    if args.input_shape:
        shape = parse_shape(args.input_shape)
    else:
        shape = parse_shape(description.get("input_shape", "1,3,224,224"))
    description["input_shape"] = ",".join(map(str, shape))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", NoWTConvWarning)
        result = export_onnx(model, args.output, ops=args.ops, precision=args.precision, input_shape=shape,
                             dynamic=not args.static, opset=args.opset or DEFAULT_OPSET, metadata=description)
    for warning in caught:
        if issubclass(warning.category, NoWTConvWarning):
            print(f"wtconv-trt export: warning: {warning.message}")
    print(result.summary())
    if result.layers:
        configs = sorted({(layer.channels, layer.kernel_size, layer.wt_levels, layer.stride)
                          for layer in result.layers})
        print(f"  {len(result.layers)} WTConv2d layers; (channels, kernel_size, wt_levels, stride): "
              + ", ".join(f"{c}" for c in configs))
    return 0
