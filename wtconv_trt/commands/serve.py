"""``wtconv-trt serve MODEL.onnx``: write a Triton Python-backend repository and serve it (docs/serving.md); the
job is wtconv_trt.api.serving (plan_serving, then the repository, then the server)."""

from wtconv_trt import arguments

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
        "through onnxruntime-gpu's CUDA execution provider with libwtconv_ort.so's CUDA op, TF32 off; cpu; auto "
        "(default): cuda where both exist here, else cpu",
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
        help="Triton's max_batch_size (default: the engine's profiles, else 32)",
    )
    parser.add_argument("--instances", type=arguments.integer, default=1, help="model instances, 1 to 64 (default 1)")
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
    parser.add_argument("--force", action="store_true", help="overwrite the model's folder in the repository")
    parser.add_argument("--write-only", action="store_true", help="write the repository and exit")
    parser.add_argument(
        "--host",
        default="127.0.0.1",
        help="address the server listens on (default 127.0.0.1, this machine only). Another address "
        "exposes the server to the network: engines and plugin libraries are native code, "
        "trust them like any program you run",
    )
    parser.add_argument(
        "--http-port", type=arguments.integer, default=8000, help="HTTP port (default 8000; 0 picks a free one)"
    )
    parser.add_argument(
        "--grpc-port", type=arguments.integer, default=8001, help="gRPC port (default 8001; 0 picks a free one)"
    )
    parser.add_argument(
        "--metrics-port", type=arguments.integer, default=0, help="Prometheus metrics port (default: off)"
    )
    parser.add_argument("--log", metavar="FILE", help="server log file (default: a temporary file)")
    parser.add_argument(
        "--timeout",
        type=arguments.number,
        default=300.0,
        help="seconds to wait for the server to be ready, 1 to 86400 (default 300)",
    )
    parser.add_argument(
        "--load-test",
        type=arguments.integer,
        metavar="N",
        help="once ready, send N requests (distinct inputs, each response checked against the same "
        "runtime run directly), print latency and throughput, stop the server and exit",
    )
    parser.add_argument(
        "--concurrency",
        type=arguments.integer,
        default=16,
        help="load test: concurrent clients, 1 to 4096 (default 16)",
    )
    parser.add_argument(
        "--batch-sizes",
        type=arguments.integer_list,
        default=[1, 2, 4, 8],
        metavar="1,2,4,8",
        help="load test: request batch sizes, cycled (default 1,2,4,8)",
    )
    parser.add_argument("--protocol", default="grpc", choices=["grpc", "http", "both"], help="load test protocol")
    parser.add_argument("--json", metavar="FILE", help="load test: write the results as JSON")


def run(args) -> int:
    import signal
    import threading

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
        serving=not args.write_only,
        host=args.host,
        http_port=args.http_port,
        grpc_port=args.grpc_port,
        metrics_port=args.metrics_port,
        log=args.log,
        timeout=args.timeout,
        load_test=args.load_test,
        concurrency=args.concurrency,
        batch_sizes=args.batch_sizes,
        protocol=args.protocol,
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
    with plan.start() as served:
        if served.network_note:
            print(f"note: {served.network_note}")
        print(
            f"serving '{served.name}': HTTP {served.http_url}, gRPC {served.grpc_url} (log: {served.log_file})",
            flush=True,
        )
        if args.load_test:
            result = served.load_test(
                args.load_test,
                concurrency=args.concurrency,
                batch_sizes=args.batch_sizes,
                protocol=args.protocol,
                json_path=args.json,
            )
            for report in result.reports:
                print(report.line())
            print("\n" + result.table())
            print("OK: every request answered and matched" if result.passed else "FAILED: see the counts above")
            return 0 if result.passed else 1
        print(f"client: {served.client_command()}   (Ctrl-C stops the server)", flush=True)
        stop = threading.Event()
        signal.signal(signal.SIGTERM, lambda *_: stop.set())
        status = served.wait(stop)
        if status is not None:
            print(f"tritonserver exited with status {status} (log: {served.log_file})")
            return 1
        return 0
