"""``wtconv-trt triton-repo --engine ENGINE --out DIR``: a Triton Inference Server model repository."""

from wtconv_trt import arguments

HELP = "write a Triton Inference Server model repository (config.pbtxt, engine, plugin, serve.sh) for an engine"


# Each instance holds its own execution context and activation memory on every GPU it runs on; beyond a few the
# instances only queue behind each other, and a large count exhausts GPU memory when Triton loads the model.
MAX_INSTANCES = 64


def add_arguments(parser):
    parser.add_argument("--engine", required=True, help="engine built by 'wtconv-trt build' (with ENGINE.json)")
    parser.add_argument("--out", required=True, metavar="DIR", help="model repository directory (created)")
    parser.add_argument("--name", help="model name in the repository (default: the engine file's stem)")
    parser.add_argument(
        "--plugin-static",
        metavar="LIB",
        type=arguments.existing_file,
        help="the static-registration plugin library libwtconv_trt_plugin.so (default: beside the "
        "dynamic library recorded in the manifest); copied into the repository",
    )
    parser.add_argument(
        "--instances",
        type=arguments.int_range(1, MAX_INSTANCES),
        default=1,
        help=f"model instances per GPU, 1 to {MAX_INSTANCES} (instance_group count; default 1; 2-4 "
        f"overlap copies and compute)",
    )
    parser.add_argument(
        "--gpus", metavar="0,1", type=arguments.gpu_list, help="GPUs for the instances (default: every visible GPU)"
    )
    parser.add_argument(
        "--preferred-batch",
        type=arguments.positive_int,
        action="append",
        metavar="N",
        help="dynamic batching preferred batch size (repeatable; default: the profiles' opt batch and max batch)",
    )
    parser.add_argument(
        "--max-queue-delay-us",
        type=arguments.int_range(0, 10**8),
        default=100,
        help="dynamic batching: longest wait to fill a batch, 0 to 10^8 us (default 100 us)",
    )
    parser.add_argument(
        "--labels",
        metavar="FILE",
        type=arguments.existing_file,
        help="class labels, one per line (default: digits 0-9 for the shipped default model)",
    )
    parser.add_argument("--force", action="store_true", help="overwrite an existing model directory")


def run(args) -> int:
    from trt_engine.triton import write_repository
    from wtconv_export.paths import check_output_dir

    from .validate import check_engine_exists

    check_engine_exists(args.engine)
    check_output_dir(args.out, option="--out", force=args.force)

    result = write_repository(
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
    plan = result["plan"]
    print(f"model repository: {args.out} (model '{result['name']}', max_batch_size {plan.max_batch_size})")
    if plan.note:
        print(f"note: {plan.note}")
    print(f"config: {result['config']}")
    print(result["config_text"], end="")
    print(f"serve:  {result['serve']}   (tritonserver with the WTConv2d plugin preloaded)")
    print(f"client: python samples/triton_client.py --model {result['name']} --url localhost:8001")
    return 0
