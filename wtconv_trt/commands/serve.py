"""``wtconv-trt serve MODEL.onnx``: write a Triton Python-backend repository and serve it (docs/serving.md); the
job is wtconv_trt.api.serving (plan_serving checks everything first, then the repository, then the server). Every
exit leaves nothing running and nothing temporary behind; a failure keeps the server's log and names it."""

import signal
import sys
import threading

from wtconv_core import options
from wtconv_trt import arguments

HELP = "serve an exported model with Triton Inference Server (Python backend; --write-only writes the repository)"


def add_arguments(parser):
    parser.add_argument("model", metavar="MODEL.onnx", help="ONNX model exported by 'wtconv-trt export'")
    parser.add_argument(
        "--repo",
        default=options.DEFAULT_REPOSITORY,
        metavar="DIR",
        help=f"model repository to write (default ./{options.DEFAULT_REPOSITORY})",
    )
    # Those of Triton's own backends are triton-repo's (wtconv_core.options.RepositoryOptions says which).
    triton_only = ("plugin_static", "server_path", "preferred_batch_sizes", "labels")
    options.add_group(parser, options.RepositoryOptions, types=arguments, skip=triton_only)
    options.add_group(parser, options.TuningOptions, "tuning (docs/serving.md, 'Tuning')", types=arguments)
    parser.add_argument("--write-only", action="store_true", help="write the repository and exit")
    options.add_group(parser, options.ServerOptions, "server", types=arguments)
    options.add_group(parser, options.LoadTestOptions, "load test (docs/serving.md, 'Load test')", types=arguments)


def run(args) -> int:
    from wtconv_trt.api.serving import plan_serving

    chosen = options.ServingOptions.from_args(args)
    plan = plan_serving(args.model, args.repo, options=chosen, serving=not args.write_only)
    repo = plan.write_repository()
    print(
        f"model repository: {args.repo} (model '{repo.name}', max_batch_size {repo.max_batch_size}, runtime "
        f"{repo.runtime}{f', ONNX Runtime on {repo.ort_device}' if repo.ort_device else ''}, instances "
        f"{repo.placement(plan.visible_gpus)}); config: {repo.config}"
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
    if served.mps_note:
        print(served.mps_note)
    metrics = f", metrics {served.metrics_url}" if served.metrics_url else ""
    print(
        f"serving '{served.name}': HTTP {served.http_url}, gRPC {served.grpc_url}{metrics} (log: {served.log_file})",
        flush=True,
    )


def _load_test(served, load_test) -> int:
    """--load-test / --soak: the answer check, the runner timed directly, the sweep (with --sweep) and the soak (with
    --soak) against the running server; 0 when every request was answered and matched and the soak passed."""
    _print_serving(served)
    steps = []
    if load_test.requests:
        steps += [f"checking {load_test.requests} requests", "the runner directly"]
    if load_test.sweep:
        steps.append(f"the sweep of {','.join(map(str, load_test.sweep))} in flight")
    if load_test.soak_s:
        steps.append(f"a soak of {load_test.soak_s:g} s at {load_test.concurrency} in flight")
    memory = f" (inputs in {load_test.shared_memory} shared memory)" if load_test.shared_memory != "none" else ""
    print(f"load test: {', then '.join(steps)}{memory}", flush=True)
    result = served.run_load_test(load_test)
    for report in result.reports:
        print(report.line())
    table = result.table()
    if len(table.splitlines()) > 1:  # more than its header: the check, the direct timing or the sweep ran
        print("\n" + table)
    if result.soak is not None:
        print(result.soak.line())
    print("OK: every request answered and matched" if result.passed else "FAILED: see the counts above")
    return 0 if result.passed else 1
