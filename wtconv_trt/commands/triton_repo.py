"""``wtconv-trt triton-repo --engine ENGINE --out DIR``: a Triton Inference Server model repository; the job is
wtconv_trt.api.triton.write_triton_repository."""

from wtconv_trt import arguments

HELP = "write a Triton Inference Server model repository (config.pbtxt, engine, plugin, serve.sh) for an engine"


def add_arguments(parser):
    parser.add_argument("--engine", required=True, help="engine built by 'wtconv-trt build' (with ENGINE.json)")
    parser.add_argument("--out", required=True, metavar="DIR", help="model repository directory (created)")
    parser.add_argument("--name", help="model name in the repository (default: the engine file's stem)")
    parser.add_argument(
        "--plugin-static",
        metavar="LIB",
        help="the static-registration plugin library libwtconv_trt_plugin.so (default: beside the "
        "dynamic library recorded in the manifest); copied into the repository",
    )
    parser.add_argument(
        "--instances",
        type=arguments.integer,
        default=1,
        help="model instances per GPU, 1 to 64 (instance_group count; default 1; 2-4 overlap copies and compute)",
    )
    parser.add_argument(
        "--gpus", metavar="0,1", type=arguments.gpu_list, help="GPUs for the instances (default: every visible GPU)"
    )
    parser.add_argument(
        "--preferred-batch",
        type=arguments.integer,
        action="append",
        metavar="N",
        help="dynamic batching preferred batch size (repeatable; default: the profiles' opt batch and max batch)",
    )
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


def run(args) -> int:
    from wtconv_trt.api.triton import write_triton_repository

    repo = write_triton_repository(
        args.engine,
        args.out,
        name=args.name,
        plugin_static=args.plugin_static,
        instances=args.instances,
        gpus=args.gpus,
        preferred_batch_sizes=args.preferred_batch,
        max_queue_delay_us=args.max_queue_delay_us,
        labels=args.labels,
        force=args.force,
    )
    print(f"model repository: {args.out} (model '{repo.name}', max_batch_size {repo.max_batch_size})")
    if repo.note:
        print(f"note: {repo.note}")
    print(f"config: {repo.config}")
    print(repo.config_text, end="")
    print(f"serve:  {repo.serve_script}   (tritonserver with the WTConv2d plugin preloaded)")
    print(f"client: python samples/triton_client.py --model {repo.name} --url localhost:8001")
    return 0
