"""``wtconv-trt triton-repo --out DIR (--engine ENGINE | --onnx MODEL.onnx)``: a Triton Inference Server model
repository, for its TensorRT backend (an engine; the job: wtconv_trt.api.triton.write_triton_repository) or its
onnxruntime backend (the export itself with libwtconv_ort.so; wtconv_trt.api.triton.write_onnxruntime_repository)."""

from wtconv_trt import arguments
from wtconv_trt.api import serving_defaults as defaults

HELP = (
    "write a Triton Inference Server model repository (config.pbtxt, model, libraries, serve.sh): for an engine "
    "(TensorRT backend) or an ONNX export (onnxruntime backend)"
)

# Options of one backend only (argparse destinations).
ENGINE_ONLY = ("plugin_static", "no_cuda_graphs")
ONNX_ONLY = ("ort_library", "max_batch_size", "instance_kind", "server_path", "cudnn_search")


def add_arguments(parser):
    model = parser.add_mutually_exclusive_group(required=True)
    model.add_argument(
        "--engine", help="engine built by 'wtconv-trt build' (with ENGINE.json), for Triton's TensorRT backend"
    )
    model.add_argument(
        "--onnx",
        metavar="MODEL.onnx",
        help="an export, served as it is by Triton's onnxruntime backend (its WTConv2d nodes on libwtconv_ort.so)",
    )
    parser.add_argument("--out", required=True, metavar="DIR", help="model repository directory (created)")
    parser.add_argument(
        "--name",
        help="model name in the repository (default: the engine file's stem; for --onnx 'digits' for the "
        "shipped model, else the file's stem)",
    )
    parser.add_argument(
        "--instances",
        type=arguments.integer,
        help=f"model instances per GPU, 1 to 64 (instance_group count; default {defaults.GPU_INSTANCES} on GPUs, 1 on "
        "the CPU)",
    )
    parser.add_argument(
        "--gpus", metavar="0,1", type=arguments.gpu_list, help="GPUs for the instances (default: every visible GPU)"
    )
    parser.add_argument(
        "--preferred-batch",
        type=arguments.integer,
        action="append",
        metavar="N",
        help="dynamic batching preferred batch size (repeatable; default: the buckets)",
    )
    parser.add_argument(
        "--buckets",
        type=arguments.integer_list,
        metavar="1,2,4,...",
        help="batch sizes the dynamic batcher prefers and the model is warmed up at (default: powers of two up to "
        "max_batch_size, which must be the largest; docs/serving.md, 'Tuning')",
    )
    parser.add_argument(
        "--max-queue-size",
        type=arguments.integer,
        default=defaults.MAX_QUEUE_SIZE,
        help="requests waiting beyond which the next is refused at once "
        f"(default {defaults.MAX_QUEUE_SIZE}; 0: no limit, which keeps Triton's batcher prefetching; docs/serving.md)",
    )
    parser.add_argument(
        "--queue-timeout-ms",
        type=arguments.integer,
        default=defaults.QUEUE_TIMEOUT_MS,
        help=f"a request waiting longer in the queue is refused (default {defaults.QUEUE_TIMEOUT_MS} ms; 0: no limit)",
    )
    parser.add_argument("--no-warmup", action="store_true", help="no model_warmup in the config")
    parser.add_argument(
        "--max-queue-delay-us",
        type=arguments.integer,
        default=100,
        help="dynamic batching: longest wait to fill a batch, 0 to 10^8 us (default 100 us)",
    )
    parser.add_argument(
        "--labels",
        metavar="FILE",
        help="class labels, one per line (default: digits 0-9 for the shipped default model)",
    )
    parser.add_argument("--force", action="store_true", help="overwrite an existing model directory")
    g = parser.add_argument_group("TensorRT backend (with --engine)")
    g.add_argument(
        "--plugin-static",
        metavar="LIB",
        help="the static-registration plugin library libwtconv_trt_plugin.so (default: beside the "
        "dynamic library recorded in the manifest); copied into the repository",
    )
    g.add_argument(
        "--no-cuda-graphs",
        action="store_true",
        default=None,
        help="no CUDA graphs (default: the backend captures one per bucket)",
    )
    g = parser.add_argument_group("onnxruntime backend (with --onnx)")
    g.add_argument(
        "--ort-library",
        metavar="LIB",
        help="libwtconv_ort.so for the WTConv2d nodes, copied into the repository (default: the one 'wtconv-trt "
        "doctor' finds)",
    )
    g.add_argument(
        "--max-batch-size",
        type=arguments.integer,
        help="Triton's max_batch_size for the export's dynamic batch axis (default 32)",
    )
    g.add_argument(
        "--instance-kind",
        choices=["auto", "gpu", "cpu"],
        help="instance_group kind (default auto: gpu, or cpu when libwtconv_ort.so has no CUDA op)",
    )
    g.add_argument(
        "--cudnn-search",
        choices=defaults.CUDNN_SEARCHES,
        help="the CUDA execution provider's cudnn_conv_algo_search (default auto: HEURISTIC, which re-plans a "
        "convolution for a new batch size in milliseconds where EXHAUSTIVE takes about 100)",
    )
    g.add_argument(
        "--server-path",
        metavar="DIR",
        help="the repository's absolute path as the server sees it (e.g. /models in a container): config.pbtxt names "
        "the library there (default: its absolute path here)",
    )


def run(args) -> int:
    from wtconv_trt.api.triton import write_onnxruntime_repository, write_triton_repository

    common = dict(
        name=args.name,
        instances=args.instances,
        gpus=args.gpus,
        preferred_batch_sizes=args.preferred_batch,
        max_queue_delay_us=args.max_queue_delay_us,
        labels=args.labels,
        force=args.force,
        buckets=args.buckets,
        max_queue_size=args.max_queue_size,
        queue_timeout_ms=args.queue_timeout_ms,
        warmup=not args.no_warmup,
    )
    if args.onnx:
        arguments.only_with(args, "engine", ENGINE_ONLY, "it is the TensorRT backend's plugin")
        repo = write_onnxruntime_repository(
            args.onnx,
            args.out,
            ort_library=args.ort_library,
            max_batch_size=args.max_batch_size,
            instance_kind=args.instance_kind or "auto",
            server_path=args.server_path,
            cudnn_search=args.cudnn_search or "auto",
            **common,
        )
        backend = "onnxruntime backend"
    else:
        arguments.only_with(args, "onnx", ONNX_ONLY, "options of the onnxruntime backend's repository")
        repo = write_triton_repository(
            args.engine, args.out, plugin_static=args.plugin_static, cuda_graphs=not args.no_cuda_graphs, **common
        )
        backend = "TensorRT backend"
    print(f"model repository: {args.out} (model '{repo.name}', {backend}, max_batch_size {repo.max_batch_size})")
    if repo.note:
        print(f"note: {repo.note}")
    print(f"config: {repo.config}")
    print(repo.config_text, end="")
    if args.onnx:
        loads = f"; its onnxruntime backend loads {repo.library_in_server}" if repo.library_in_server else ""
        print(f"serve:  {repo.serve_script}   (tritonserver{loads})")
        print(f"client: python samples/triton_client.py --model {repo.name} --url localhost:8001 --onnx {args.onnx}")
    else:
        print(f"serve:  {repo.serve_script}   (tritonserver with the WTConv2d plugin preloaded)")
        print(f"client: python samples/triton_client.py --model {repo.name} --url localhost:8001")
    return 0
