"""``wtconv-trt export``: export a model with WTConv2d layers to ONNX (plugin nodes or standard ops); the job is
wtconv_trt.api.export.export_onnx."""

from wtconv_core import options
from wtconv_trt import arguments

HELP = "export the default model or a WTConvNeXt to ONNX (one WTConv2d plugin node per layer, or standard ops)"


def add_arguments(parser) -> None:
    parser.add_argument("-o", "--output", required=True, metavar="MODEL.onnx", help="the ONNX file to write")
    options.add_group(parser, options.ModelSource, "model (default: the shipped default model)", types=arguments)
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
        help="fp16: fp16 activations and WTConv2d nodes (folded weights stay fp32), for TensorRT's strongly "
        "typed networks and ONNX Runtime's fp16 kernels",
    )
    parser.add_argument(
        "--runtime",
        choices=("onnxruntime", "tensorrt"),
        default=None,
        help="the runtime the graph is rendered for (default onnxruntime): with --precision fp16, onnxruntime "
        "writes fp16 LayerNorms (statistics in fp32, as ONNX Runtime computes them), tensorrt runs them in fp32 "
        "between Casts (TensorRT computes a LayerNorm in its input's type); fp32 exports are the same",
    )
    parser.add_argument(
        "--layout",
        choices=("nchw", "channels_last"),
        default=None,
        help="channels_last: a WTConvNeXt's blocks stay (N, H, W, C) around channels_last WTConv2d nodes, only "
        "the stem and downsampling convolutions are transposed (--ops plugin); default nchw",
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
        "--opset",
        type=arguments.integer,
        default=None,
        help="ONNX opset of the default domain, from 18 to the newest the installed onnx knows (default 20, the "
        "first with ONNX Gelu)",
    )
    parser.add_argument("--force", action="store_true", help="overwrite the output file if it exists")


def run(args) -> int:
    import warnings

    from wtconv_trt.api.export import NoWTConvWarning, export_onnx

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", NoWTConvWarning)
        result = export_onnx(
            args.output,
            options.from_args(options.ModelSource, args),
            ops=args.ops,
            precision=args.precision,
            input_shape=args.input_shape,
            static=args.static,
            opset=args.opset,
            runtime=args.runtime,
            layout=args.layout,
            force=args.force,
        )
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
