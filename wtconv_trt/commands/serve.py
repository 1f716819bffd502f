"""``wtconv-trt serve MODEL.onnx``: write a Triton Python-backend repository and serve it (docs/serving.md)."""

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
        "on our CUDA kernels, else ONNX Runtime on the CPU, the first that can run there)",
    )
    parser.add_argument(
        "--max-batch-size",
        type=arguments.positive_int,
        help="Triton's max_batch_size (default: the engine's profiles, else 32)",
    )
    parser.add_argument("--instances", type=arguments.int_range(1, 64), default=1, help="model instances (default 1)")
    parser.add_argument(
        "--instance-kind",
        default="auto",
        choices=["auto", "cpu", "gpu", "model"],
        help="instance_group kind (default: cpu for onnxruntime, gpu for a GPU runtime, model for auto)",
    )
    parser.add_argument(
        "--max-queue-delay-us",
        type=arguments.int_range(0, 10**8),
        default=500,
        help="dynamic batching: longest wait to gather a batch (default 500 us)",
    )
    parser.add_argument(
        "--threads",
        type=arguments.int_range(0, 1024),
        default=0,
        help="ONNX Runtime intra-op threads (default: its own)",
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
        "--http-port", type=arguments.port_or_zero, default=8000, help="HTTP port (default 8000; 0 picks a free one)"
    )
    parser.add_argument(
        "--grpc-port", type=arguments.port_or_zero, default=8001, help="gRPC port (default 8001; 0 picks a free one)"
    )
    parser.add_argument(
        "--metrics-port", type=arguments.port_or_zero, default=0, help="Prometheus metrics port (default: off)"
    )
    parser.add_argument("--log", metavar="FILE", help="server log file (default: a temporary file)")
    parser.add_argument(
        "--timeout",
        type=arguments.float_range(1, 86_400, " s"),
        default=300.0,
        help="seconds to wait for the server to be ready",
    )
    parser.add_argument(
        "--load-test",
        type=arguments.int_range(1, 10**7),
        metavar="N",
        help="once ready, send N requests (distinct inputs, each response checked against the same "
        "runtime run directly), print latency and throughput, stop the server and exit",
    )
    parser.add_argument(
        "--concurrency",
        type=arguments.int_range(1, 4096),
        default=16,
        help="load test: concurrent clients (default 16)",
    )
    parser.add_argument("--batch-sizes", default="1,2,4,8", help="load test: request batch sizes, cycled")
    parser.add_argument("--protocol", default="grpc", choices=["grpc", "http", "both"], help="load test protocol")
    parser.add_argument("--json", metavar="FILE", help="load test: write the results as JSON")


def _default_name(onnx_path, metadata) -> str:
    import re
    from pathlib import Path

    if metadata.get("source") == "default":
        return "digits"
    return re.sub(r"[^A-Za-z0-9_.-]", "_", Path(onnx_path).name.split(".")[0]) or "model"


def run(args) -> int:
    import logging
    import signal
    import threading

    from trt_engine.serving.repository import describe_onnx, write_python_repository
    from trt_engine.serving.server import TritonServer, is_loopback
    from wtconv_export.errors import InputError
    from wtconv_export.paths import check_output_dir

    check_output_dir(args.repo, option="--repo", force=True)  # an existing model folder: --force, below
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    description = describe_onnx(args.model) if args.model.endswith(".onnx") else None
    if description is None:
        raise InputError(f"{args.model}: give the exported ONNX model (MODEL.onnx); an engine goes with --engine")
    name = args.name or _default_name(args.model, description["metadata"])
    result = write_python_repository(
        args.model,
        args.repo,
        name=name,
        engine=args.engine,
        plugin=args.plugin,
        runtime=args.runtime,
        max_batch_size=args.max_batch_size,
        instances=args.instances,
        instance_kind=args.instance_kind,
        max_queue_delay_us=args.max_queue_delay_us,
        warmup=not args.no_warmup,
        threads=args.threads,
        force=args.force,
    )
    print(
        f"model repository: {args.repo} (model '{name}', max_batch_size {result['max_batch_size']}, runtime "
        f"{args.runtime}); config: {result['config']}"
    )
    if args.write_only:
        print(result["config_text"], end="")
        return 0
    if args.runtime != "auto":
        # The server runs on this machine: a runtime that cannot run here is refused now, in one line, rather
        # than as a model that fails to load inside the server.
        from trt_engine.serving.runtimes import select_runtime

        select_runtime(args.runtime, onnx_path=args.model, engine_path=args.engine)
    if not is_loopback(args.host):
        print(
            f"note: listening on {args.host}, reachable from the network; the server runs the repository's "
            f"model code, engines and plugin libraries as native code: serve only files you trust"
        )
    server = TritonServer(
        args.repo,
        host=args.host,
        http_port=args.http_port,
        grpc_port=args.grpc_port,
        metrics_port=args.metrics_port,
        log_file=args.log,
        model_control="explicit",
        load_models=[name],
    )
    server.start(timeout=args.timeout)
    try:
        server.watch()
        print(f"serving '{name}': HTTP {server.http_url}, gRPC {server.grpc_url} (log: {server.log_file})")
        if args.load_test:
            return _load_test(args, server, name, description)
        print(f"client: python samples/triton_client.py --url {server.grpc_url} --model {name}   (Ctrl-C stops)")
        stop = threading.Event()
        signal.signal(signal.SIGTERM, lambda *_: stop.set())
        try:
            while not stop.wait(1.0):
                if server.process.poll() is not None:
                    print(f"tritonserver exited with status {server.process.returncode} (log: {server.log_file})")
                    return 1
        except KeyboardInterrupt:
            pass
        return 0
    finally:
        server.stop()


def _load_test(args, server, name, description) -> int:
    import platform

    import numpy as np

    from trt_engine.manifest import atomic_write_json
    from trt_engine.serving.load import direct_throughput, expected_outputs, input_pool, run_load
    from trt_engine.serving.repository import plan_from_onnx
    from trt_engine.serving.runtimes import make_runner
    from wtconv_export.errors import InputError

    try:
        batch_sizes = [int(b) for b in args.batch_sizes.split(",")]
    except ValueError:
        raise InputError(
            f"--batch-sizes {args.batch_sizes!r}: expected comma-separated integers, e.g. 1,2,4,8"
        ) from None
    runner = make_runner(
        args.runtime, onnx_path=args.model, engine_path=args.engine, plugin=args.plugin, threads=args.threads
    )
    _, input_dims, _ = plan_from_onnx(description, args.max_batch_size)
    pool = input_pool(
        description["metadata"],
        input_dims,
        runner.input_dtype,
        size=max(256, -(-args.load_test // len(set(batch_sizes))) + 1),
    )
    expected = expected_outputs(runner, pool)
    fp16 = runner.input_dtype == np.float16
    atol = rtol = 1e-2 if fp16 else 1e-5
    results = {
        "machine": platform.platform(),
        "runtime": runner.name,
        "model": args.model,
        "input_dtype": str(runner.input_dtype),
        "load": [],
        "direct": [],
    }
    ok = True
    for protocol in ["grpc", "http"] if args.protocol == "both" else [args.protocol]:
        report = run_load(
            server.grpc_url if protocol == "grpc" else server.http_url,
            name,
            pool,
            expected,
            protocol=protocol,
            requests=args.load_test,
            concurrency=args.concurrency,
            batch_sizes=batch_sizes,
            input_name=description["input"]["name"],
            output_name=description["output"]["name"],
            atol=atol,
            rtol=rtol,
        )
        print(report.line())
        results["load"].append(report.summary())
        ok &= report.failed == 0 and report.lost == 0 and report.mismatched == 0
    for batch in sorted(set(batch_sizes)):
        direct = direct_throughput(runner, pool, batch)
        results["direct"].append(direct)
    print(f"\n{'':10} {'batch':>5} {'images/s':>10} {'p50 ms':>8} {'p99 ms':>8}")
    for d in results["direct"]:
        print(
            f"{'direct':10} {d['batch']:>5} {d['images_per_s']:>10.1f} {d['latency_ms']['p50']:>8.3f} "
            f"{d['latency_ms']['p99']:>8.3f}"
        )
    for r in results["load"]:
        print(
            f"{'served ' + r['protocol']:10} {'mixed':>5} {r['throughput_images_per_s']:>10.1f} "
            f"{r['latency_ms']['p50']:>8.3f} {r['latency_ms']['p99']:>8.3f}"
        )
    if args.json:
        atomic_write_json(args.json, results)  # an interrupted run leaves no half-written file
    print("OK: every request answered and matched" if ok else "FAILED: see the counts above")
    return 0 if ok else 1
