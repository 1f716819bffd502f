"""``wtconv-trt serve MODEL.onnx``: write a Triton Python-backend repository and serve it (docs/serving.md); the
job is wtconv_trt.api.serving (plan_serving checks everything first, then the repository, then the server). Every
exit leaves nothing running and nothing temporary behind; a failure keeps the server's log and names it."""

import signal
import sys
import threading

from wtconv_trt import arguments
from wtconv_trt.api import serving_defaults as defaults

HELP = "serve an exported model with Triton Inference Server (Python backend; --write-only writes the repository)"


def add_arguments(parser):
    parser.add_argument("model", metavar="MODEL.onnx", help="ONNX model exported by 'wtconv-trt export'")
    parser.add_argument(
        "--engine", help="TensorRT engine built from MODEL.onnx (served where TensorRT and a GPU exist)"
    )
    parser.add_argument(
        "--plugin", metavar="LIB", help="WTConv2d plugin library for --engine (copied into the repository)"
    )
    parser.add_argument(
        "--repo", default="triton_models", metavar="DIR", help="model repository to write (default ./triton_models)"
    )
    parser.add_argument("--name", help="model name (default: 'digits' for the shipped model, else the file's stem)")
    parser.add_argument(
        "--runtime",
        default="auto",
        choices=["auto", "tensorrt", "torch-cuda", "onnxruntime"],
        help="what runs the model inside the server (default auto: TensorRT engine, else PyTorch "
        "on our CUDA kernels, else ONNX Runtime, the first that can run there)",
    )
    parser.add_argument(
        "--device",
        default="auto",
        choices=["auto", "cpu", "cuda"],
        help="where ONNX Runtime runs the model (runtime onnxruntime or auto): cuda, each GPU instance on its GPU "
        "through onnxruntime-gpu's CUDA execution provider with libwtconv_ort.so's CUDA op; cpu; auto (default): "
        "cuda where both exist here, else cpu",
    )
    parser.add_argument(
        "--ort-library",
        metavar="LIB",
        help="libwtconv_ort.so for the WTConv2d nodes, copied into the repository (default: the one 'wtconv-trt "
        "doctor' finds; without one, the onnxruntime-extensions Python op runs them on the CPU)",
    )
    parser.add_argument(
        "--max-batch-size",
        type=arguments.integer,
        help="Triton's max_batch_size (default: the engine's profiles, else 128, fewer for large inputs)",
    )
    parser.add_argument(
        "--instances",
        type=arguments.integer,
        help=f"model instances, 1 to 64 (default: {defaults.GPU_INSTANCES} per GPU for GPU instances, else 1)",
    )
    parser.add_argument(
        "--instance-kind",
        default="auto",
        choices=["auto", "cpu", "gpu", "model"],
        help="instance_group kind (default: for onnxruntime gpu or cpu as --device, gpu for a GPU runtime, model "
        "for auto)",
    )
    parser.add_argument(
        "--max-queue-delay-us",
        type=arguments.integer,
        default=500,
        help="dynamic batching: longest wait to gather a batch, 0 to 10^8 us (default 500 us)",
    )
    parser.add_argument(
        "--threads",
        type=arguments.integer,
        default=0,
        help="ONNX Runtime intra-op threads, 0 to 1024 (default 0: its own)",
    )
    parser.add_argument("--no-warmup", action="store_true", help="no model_warmup in the config")
    tuning = parser.add_argument_group("tuning (docs/serving.md, 'Tuning')")
    tuning.add_argument(
        "--buckets",
        type=arguments.integer_list,
        metavar="1,2,4,...",
        help="batch sizes a batch is padded up to on a GPU, Triton's preferred sizes and the warm-up sizes "
        "(default: powers of two up to max_batch_size, which must be the largest)",
    )
    tuning.add_argument(
        "--no-cuda-graphs", action="store_true", help="run every batch eagerly (default: one CUDA graph per bucket)"
    )
    tuning.add_argument(
        "--cudnn-search",
        default=defaults.CUDNN_SEARCH,
        choices=defaults.CUDNN_SEARCHES,
        help="ONNX Runtime's cudnn_conv_algo_search (default auto: EXHAUSTIVE with CUDA graphs or a session per "
        "bucket, HEURISTIC otherwise)",
    )
    tuning.add_argument(
        "--session-per-bucket",
        action="store_true",
        help="ONNX Runtime on a GPU without CUDA graphs: one session per bucket",
    )
    tuning.add_argument(
        "--max-queue-size",
        type=arguments.integer,
        default=defaults.MAX_QUEUE_SIZE,
        help="requests waiting in Triton's queue beyond which the next is refused at once "
        f"(default {defaults.MAX_QUEUE_SIZE}; 0: no limit, which keeps Triton's batcher prefetching; docs/serving.md)",
    )
    tuning.add_argument(
        "--queue-timeout-ms",
        type=arguments.integer,
        default=defaults.QUEUE_TIMEOUT_MS,
        help=f"a request waiting longer in the queue is refused (default {defaults.QUEUE_TIMEOUT_MS} ms; 0: no limit)",
    )
    parser.add_argument("--force", action="store_true", help="overwrite the model's folder in the repository")
    parser.add_argument("--write-only", action="store_true", help="write the repository and exit")
    parser.add_argument(
        "--host",
        default="127.0.0.1",
        help="address the server listens on (default 127.0.0.1, this machine only). Another address "
        "exposes inference to the network (the repository API stays closed to everyone); engines and plugin "
        "libraries are native code, trust them like any program you run",
    )
    parser.add_argument(
        "--http-port", type=arguments.integer, default=8000, help="HTTP port (default 8000; 0 picks a free one)"
    )
    parser.add_argument(
        "--grpc-port", type=arguments.integer, default=8001, help="gRPC port (default 8001; 0 picks a free one)"
    )
    parser.add_argument(
        "--metrics-port",
        type=arguments.integer,
        default=8002,
        help="Prometheus metrics port (default 8002; 0 picks a free one)",
    )
    parser.add_argument("--no-metrics", action="store_true", help="no metrics endpoint")
    parser.add_argument("--log", metavar="FILE", help="server log file, kept (default: a temporary file, removed)")
    parser.add_argument(
        "--timeout",
        type=arguments.number,
        default=300.0,
        help="seconds to wait for the server to be ready, 1 to 86400 (default 300)",
    )
    load = parser.add_argument_group("load test (docs/serving.md, 'Load test')")
    load.add_argument(
        "--load-test",
        type=arguments.integer,
        metavar="N",
        help="once ready, check N requests (distinct inputs, each response compared with the model run here), time "
        "the runner directly, run the --sweep if given, print the table, stop the server and exit",
    )
    load.add_argument(
        "--concurrency",
        type=arguments.integer,
        default=16,
        help="the check's concurrent clients, 1 to 4096 (default 16)",
    )
    load.add_argument(
        "--batch-sizes",
        type=arguments.integer_list,
        default=[1, 2, 4, 8],
        metavar="1,2,4,8",
        help="request batch sizes, cycled, of the check and the sweep's first mix (default 1,2,4,8)",
    )
    load.add_argument("--protocol", default="grpc", choices=["grpc", "http", "both"], help="the check's protocol")
    load.add_argument(
        "--kill-backend", action="store_true", help="kill the model's backend a quarter of the way through the check"
    )
    load.add_argument(
        "--sweep",
        type=arguments.integer_list,
        default=[],
        metavar="16,64,256",
        help="timed load: requests in flight per point, from several client processes over gRPC (default: none)",
    )
    load.add_argument(
        "--mix",
        type=arguments.integer_list,
        action="append",
        default=[],
        metavar="1,2,...,64",
        help="a further mix of request sizes for the sweep (repeatable)",
    )
    load.add_argument(
        "--processes",
        type=arguments.integer,
        help="client processes of the sweep, 1 to 64 (default: a quarter of the cores, 1 to 4)",
    )
    load.add_argument(
        "--window", type=arguments.number, default=3.0, help="seconds measured per point of the sweep (default 3)"
    )
    load.add_argument(
        "--no-extra-process",
        action="store_true",
        help="skip the sweep's last point: the busiest one again with one more client process",
    )
    load.add_argument("--json", metavar="FILE", help="load test: write the results as JSON")


def run(args) -> int:
    from wtconv_trt.api.serving import plan_serving

    plan = plan_serving(
        args.model,
        args.repo,
        name=args.name,
        engine=args.engine,
        plugin=args.plugin,
        runtime=args.runtime,
        max_batch_size=args.max_batch_size,
        instances=args.instances,
        instance_kind=args.instance_kind,
        max_queue_delay_us=args.max_queue_delay_us,
        threads=args.threads,
        warmup=not args.no_warmup,
        force=args.force,
        device=args.device,
        ort_library=args.ort_library,
        buckets=args.buckets,
        cuda_graphs=not args.no_cuda_graphs,
        cudnn_search=args.cudnn_search,
        session_per_bucket=args.session_per_bucket,
        max_queue_size=args.max_queue_size,
        queue_timeout_ms=args.queue_timeout_ms,
        serving=not args.write_only,
        host=args.host,
        http_port=args.http_port,
        grpc_port=args.grpc_port,
        metrics_port=args.metrics_port,
        metrics=not args.no_metrics,
        log=args.log,
        timeout=args.timeout,
        load_test=args.load_test,
        concurrency=args.concurrency,
        batch_sizes=args.batch_sizes,
        protocol=args.protocol,
        sweep=args.sweep,
        mixes=args.mix,
        processes=args.processes,
        window_s=args.window,
        extra_process=not args.no_extra_process,
        kill_backend=args.kill_backend,
        json_path=args.json,
    )
    repo = plan.write_repository()
    print(
        f"model repository: {args.repo} (model '{repo.name}', max_batch_size {repo.max_batch_size}, runtime "
        f"{repo.runtime}{f', ONNX Runtime on {repo.ort_device}' if repo.ort_device else ''}); config: {repo.config}"
    )
    if args.write_only:
        print(repo.config_text, end="")
        return 0
    print(f"serving on this machine: {plan.runtime_note}", flush=True)  # before the load and warm-up wait
    previous = signal.signal(signal.SIGTERM, _terminated)  # SIGTERM cleans up as Ctrl-C does (exit status 143)
    try:
        with plan.start() as served:  # drained and stopped on every exit; a failure's log kept and named
            return _serving(args, served, plan.load_test)
    finally:
        signal.signal(signal.SIGTERM, previous)


_STOP: list = []  # the event SIGTERM sets while serving until stopped (empty: SIGTERM ends the command)


def _terminated(signum, frame):
    if _STOP:
        _STOP[-1].set()
        return
    sys.exit(128 + signal.SIGTERM)


def _serving(args, served, load_test) -> int:
    """What the command does with the running server: the load test planned (checked with the other options), or
    serve until Ctrl-C / SIGTERM."""
    if load_test is not None:
        return _load_test(served, load_test)
    # Stopped by SIGTERM from here on: a client may send it as soon as the serving line is out.
    stop = threading.Event()
    _STOP.append(stop)
    try:
        _print_serving(served)
        print(f"client: {served.client_command()}   (Ctrl-C stops the server)", flush=True)
        status = served.wait(stop)
    finally:
        _STOP.remove(stop)
    if status is not None:
        print(f"tritonserver exited with status {status} (log: {served.log_file})")
        return 1
    return 0


def _print_serving(served) -> None:
    """The lines that say where the server answers (clients and tests read the 'serving' line)."""
    if served.network_note:
        print(f"note: {served.network_note}")
    metrics = f", metrics {served.metrics_url}" if served.metrics_url else ""
    print(
        f"serving '{served.name}': HTTP {served.http_url}, gRPC {served.grpc_url}{metrics} (log: {served.log_file})",
        flush=True,
    )


def _load_test(served, load_test) -> int:
    """--load-test: the answer check, the runner timed directly, and the sweep (with --sweep) against the running
    server; 0 when every request was answered and matched."""
    _print_serving(served)
    after = f", then the sweep of {','.join(map(str, load_test.sweep))} in flight" if load_test.sweep else ""
    print(f"load test: checking {load_test.requests} requests, then the runner directly{after}", flush=True)
    result = served.run_load_test(load_test)
    for report in result.reports:
        print(report.line())
    print("\n" + result.table())
    print("OK: every request answered and matched" if result.passed else "FAILED: see the counts above")
    return 0 if result.passed else 1
