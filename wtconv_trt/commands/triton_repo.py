"""``wtconv-trt triton-repo --out DIR (--engine ENGINE | --onnx MODEL.onnx)``: a Triton Inference Server model
repository, for its TensorRT backend (an engine; the job: wtconv_trt.api.triton.write_triton_repository) or its
onnxruntime backend (the export itself with libwtconv_ort.so; wtconv_trt.api.triton.write_onnxruntime_repository)."""

from wtconv_core import options
from wtconv_trt import arguments

HELP = (
    "write a Triton Inference Server model repository (config.pbtxt, model, libraries, serve.sh): for an engine "
    "(TensorRT backend) or an ONNX export (onnxruntime backend)"
)

# Options of one backend only (argparse destinations; each backend's writer refuses the other's).
ENGINE_ONLY = ("plugin_static", "no_cuda_graphs")
ONNX_ONLY = ("ort_library", "max_batch_size", "instance_kind", "server_path", "cudnn_search")


_GRPC = f"localhost:{options.ServerOptions.grpc_port}"  # serve.sh leaves Triton's own ports as they are


def add_arguments(parser):
    repository = options.RepositoryOptions
    model = parser.add_mutually_exclusive_group(required=True)
    model.add_argument("--engine", help=options.help_of(repository, "engine"))
    model.add_argument(
        "--onnx",
        metavar="MODEL.onnx",
        help="an export, served as it is by Triton's onnxruntime backend (its WTConv2d nodes on libwtconv_ort.so)",
    )
    parser.add_argument("--out", required=True, metavar="DIR", help="model repository directory (created)")
    # Every option declared once, with serve's (wtconv_core.options): the groups below are built from the dataclasses.
    shared = ("name", "instances", "gpus", "preferred_batch_sizes", "max_queue_delay_us", "labels", "warmup", "force")
    options.add_group(parser, repository, types=arguments, only=shared)
    tuning = parser.add_argument_group("tuning (docs/serving.md, 'Tuning')")
    options.add_group(
        tuning, options.TuningOptions, types=arguments, only=("buckets", "max_queue_size", "queue_timeout_ms")
    )
    engine = parser.add_argument_group("TensorRT backend (with --engine)")
    options.add_group(engine, repository, types=arguments, only=("plugin_static",))
    options.add_group(engine, options.TuningOptions, types=arguments, only=("cuda_graphs",))
    onnx = parser.add_argument_group("onnxruntime backend (with --onnx)")
    only = ("ort_library", "max_batch_size", "instance_kind", "server_path")
    options.add_group(onnx, repository, types=arguments, only=only)
    options.add_group(onnx, options.TuningOptions, types=arguments, only=("cudnn_search",))


def run(args) -> int:
    from wtconv_trt.api.triton import write_onnxruntime_repository, write_triton_repository

    chosen = dict(  # --engine is the model served here, the writer's first argument
        options=options.from_args(options.RepositoryOptions, args, engine=None),
        tuning=options.from_args(options.TuningOptions, args),
    )
    if args.onnx:
        arguments.only_with(args, "engine", ENGINE_ONLY, "it is the TensorRT backend's plugin")
        repo = write_onnxruntime_repository(args.onnx, args.out, **chosen)
        backend = "onnxruntime backend"
    else:
        arguments.only_with(args, "onnx", ONNX_ONLY, "options of the onnxruntime backend's repository")
        repo = write_triton_repository(args.engine, args.out, **chosen)
        backend = "TensorRT backend"
    print(f"model repository: {args.out} (model '{repo.name}', {backend}, max_batch_size {repo.max_batch_size})")
    if repo.note:
        print(f"note: {repo.note}")
    print(f"config: {repo.config}")
    print(repo.config_text, end="")
    if args.onnx:
        loads = f"; its onnxruntime backend loads {repo.library_in_server}" if repo.library_in_server else ""
        print(f"serve:  {repo.serve_script}   (tritonserver{loads})")
        print(f"client: python samples/triton_client.py --model {repo.name} --url {_GRPC} --onnx {args.onnx}")
    else:
        print(f"serve:  {repo.serve_script}   (tritonserver with the WTConv2d plugin preloaded)")
        print(f"client: python samples/triton_client.py --model {repo.name} --url {_GRPC}")
    return 0
