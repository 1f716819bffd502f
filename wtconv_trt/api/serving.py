"""Serving with Triton Inference Server's Python backend (``wtconv-trt serve``; docs/serving.md).

``plan_serving`` checks every option, file and port before anything is written or started and returns a ServingPlan;
``ServingPlan.write_repository`` writes the model repository and ``ServingPlan.start`` starts the server on it
(Served, a context manager that drains and stops it and leaves nothing behind). ``write_serving_repository`` and
``serve`` do those steps in one call. ``Served.load_test`` checks every answer against the model run directly, times
the runner directly, and sweeps the load from several client processes (wtconv_serving.load_test).
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from wtconv_core.errors import InputError
from wtconv_core.inputs import check_choice, check_int, check_number
from wtconv_serving.load_test import LoadTestResult
from wtconv_serving.python_backend import PythonRepositoryPlan, ServingRepository
from wtconv_serving.tuning import DEFAULT_TUNING, check_tuning

log = logging.getLogger(__name__)

__all__ = [
    "LoadTest",
    "LoadTestResult",
    "Served",
    "ServingPlan",
    "ServingRepository",
    "check_load_test",
    "plan_serving",
    "runtime_choice",
    "serve",
    "write_serving_repository",
]

DEFAULT_REPOSITORY = "triton_models"
MAX_TIMEOUT_S = 86_400.0
MAX_LOAD_REQUESTS = 10**7
MAX_CONCURRENCY = 4096
MAX_PROCESSES = 64
MAX_WINDOW_S = 3600.0
PROTOCOLS = ("grpc", "http", "both")
MAX_PORT = 65535


@dataclass(frozen=True)
class LoadTest:
    """A load test whose options check_load_test has checked: what Served.run_load_test runs (Served.load_test
    documents each option)."""

    requests: int
    concurrency: int = 16
    batch_sizes: tuple[int, ...] = (1, 2, 4, 8)
    protocol: str = "grpc"
    sweep: tuple[int, ...] = ()
    mixes: tuple[tuple[int, ...], ...] = ()
    processes: int | None = None
    window_s: float = 3.0
    extra_process: bool = True
    kill_backend: bool = False
    json_path: Path | None = None


def check_load_test(
    requests: int | None,
    *,
    concurrency: int = 16,
    batch_sizes: Sequence[int] = (1, 2, 4, 8),
    protocol: str = "grpc",
    sweep: Sequence[int] = (),
    mixes: Sequence[Sequence[int]] = (),
    processes: int | None = None,
    window_s: float = 3.0,
    extra_process: bool = True,
    kill_backend: bool = False,
    json_path: str | os.PathLike | None = None,
) -> LoadTest | None:
    """The load-test options checked (requests 1 to 10**7 when given, concurrency and each sweep value 1 to 4096,
    batch sizes >= 1 in every mix, protocol grpc / http / both, processes 1 to 64, window 0.1 to 3600 s; json_path
    is checked by the caller, with the other files); returns the LoadTest, None without ``requests``."""
    if requests is not None:
        check_int(requests, "requests", 1, MAX_LOAD_REQUESTS)
    check_int(concurrency, "concurrency", 1, MAX_CONCURRENCY)
    for value in sweep:
        check_int(value, "sweep", 1, MAX_CONCURRENCY)
    sizes = tuple(check_int(b, "batch_sizes", 1, 2**31 - 1) for b in batch_sizes)
    if not sizes:
        raise InputError("batch_sizes: expected at least one batch size, e.g. 1,2,4,8", parameter="batch_sizes")
    for mix in mixes:
        if not list(mix):
            raise InputError("mixes: expected at least one batch size in each mix, e.g. 1,2,4,8", parameter="mixes")
        for b in mix:
            check_int(b, "mixes", 1, 2**31 - 1)
    if processes is not None:
        check_int(processes, "processes", 1, MAX_PROCESSES)
    window_s = check_number(window_s, "window_s", 0.1, MAX_WINDOW_S, what=" s")
    check_choice(protocol, "protocol", PROTOCOLS)
    if requests is None:
        return None
    return LoadTest(
        requests=requests,
        concurrency=concurrency,
        batch_sizes=sizes,
        protocol=protocol,
        sweep=tuple(sweep),
        mixes=tuple(tuple(m) for m in mixes),
        processes=processes,
        window_s=window_s,
        extra_process=bool(extra_process),
        kill_backend=bool(kill_backend),
        json_path=None if json_path is None else Path(json_path),
    )


@dataclass
class ServingPlan:
    """Checked options of a Python-backend repository and of the server that serves it (plan_serving)."""

    repository_plan: PythonRepositoryPlan
    host: str
    ports: dict  # {"http", "grpc", "metrics"}: a port, 0 for any free one; metrics None when off
    log: Path | None
    timeout: float
    written: ServingRepository | None = field(default=None, repr=False)
    # The runtime the server will choose on this machine and why (serving only): one line said before the wait.
    runtime_here: str | None = None
    runtime_note: str | None = None
    json_path: Path | None = None  # where the load test's report goes (checked writable)
    load_test: LoadTest | None = None  # the load test to run once the server is ready (checked)

    @property
    def onnx(self) -> Path:
        """The ONNX model served."""
        return self.repository_plan.onnx

    @property
    def repository(self) -> Path:
        """The model repository written into."""
        return self.repository_plan.repository

    def write_repository(self) -> ServingRepository:
        """Write the model's folder into the repository (wtconv_serving.python_backend.write_python_repository);
        interrupted, it leaves the repository as it was."""
        from wtconv_serving.python_backend import write_python_repository

        self.written = write_python_repository(self.repository_plan)
        return self.written

    def start(self) -> Served:
        """Start tritonserver on the written repository, wait until the model is ready (warmed up at every bucket),
        and watch its backend stubs (a crashed one is reloaded); returns the running Served. ServingError in one line
        when it cannot (the server's log is then kept and named); interrupted, nothing is left running."""
        from wtconv_serving.server import TritonServer, is_loopback

        repository = self.written or self.write_repository()
        network_note = None
        if not is_loopback(self.host):
            network_note = (
                f"listening on {self.host}, reachable from the network: inference, metadata and statistics answer "
                f"anyone who reaches the ports (the repository API answers nobody); serve only files you trust and "
                f"put an authenticating proxy in front for clients you do not"
            )
        server = TritonServer(
            self.repository,
            host=self.host,
            http_port=self.ports["http"],
            grpc_port=self.ports["grpc"],
            metrics_port=self.ports["metrics"],
            log_file=self.log,
            model_control="poll",
            load_models=[repository.name],
        )
        log.info(
            "starting tritonserver: loading '%s' (runtime %s)%s",
            repository.name,
            self.runtime_here or repository.runtime,
            ", then warming it up" if self.repository_plan.warmup else "",
        )
        server.start(timeout=self.timeout)
        try:
            server.watch()
        except BaseException:
            server.stop()
            raise
        return Served(repository, server, network_note)


def plan_serving(
    onnx: str | os.PathLike,
    repository: str | os.PathLike = DEFAULT_REPOSITORY,
    *,
    name: str | None = None,
    engine: str | os.PathLike | None = None,
    plugin: str | os.PathLike | None = None,
    runtime: str = "auto",
    max_batch_size: int | None = None,
    instances: int | None = None,
    instance_kind: str = "auto",
    max_queue_delay_us: int = 500,
    threads: int = 0,
    warmup: bool = True,
    force: bool = False,
    device: str = "auto",
    ort_library: str | os.PathLike | None = None,
    buckets: Sequence[int] | None = None,
    cuda_graphs: bool = DEFAULT_TUNING.cuda_graphs,
    cudnn_search: str = DEFAULT_TUNING.cudnn_search,
    session_per_bucket: bool = DEFAULT_TUNING.session_per_bucket,
    max_queue_size: int = DEFAULT_TUNING.max_queue_size,
    queue_timeout_ms: int = DEFAULT_TUNING.queue_timeout_ms,
    serving: bool = True,
    host: str = "127.0.0.1",
    http_port: int = 8000,
    grpc_port: int = 8001,
    metrics_port: int = 8002,
    metrics: bool = True,
    log: str | os.PathLike | None = None,
    timeout: float = 300.0,
    load_test: int | None = None,
    concurrency: int = 16,
    batch_sizes: Sequence[int] = (1, 2, 4, 8),
    protocol: str = "grpc",
    sweep: Sequence[int] = (),
    mixes: Sequence[Sequence[int]] = (),
    processes: int | None = None,
    window_s: float = 3.0,
    extra_process: bool = True,
    kill_backend: bool = False,
    json_path: str | os.PathLike | None = None,
) -> ServingPlan:
    """Check everything a ``wtconv-trt serve`` run needs before anything is written or started; returns the
    ServingPlan that writes the repository and starts the server.

    The repository options are those of write_serving_repository. serving: also check what serving here needs:
    the server options (ports 0 to 65535, 0 picks a free one, given ones distinct and free; metrics off with
    metrics=False; timeout 1 to 86400 s), that a runtime named with ``runtime`` can run on this machine, that no
    output (``log``, ``json_path``, the repository) is one of the inputs, and that ``log`` and ``json_path`` can be
    written (both are replaced when they exist). load_test, concurrency, batch_sizes, protocol, sweep, mixes,
    processes, window_s, extra_process, kill_backend: a load test to run once the server is ready (checked by
    check_load_test; ServingPlan.load_test, run by Served.run_load_test)."""
    from wtconv_core.paths import check_not_an_input, check_output_file
    from wtconv_serving.python_backend import check_python_repository

    check_not_an_input(
        [("ONNX model", onnx), ("engine", engine), ("plugin", plugin), ("library", ort_library)],
        files=[("log", log), ("json_path", json_path)],
        folders=[("repository", repository)],
    )
    ports = {
        "http": check_int(http_port, "http_port", 0, MAX_PORT, " (a TCP port; 0: any free port)"),
        "grpc": check_int(grpc_port, "grpc_port", 0, MAX_PORT, " (a TCP port; 0: any free port)"),
        "metrics": check_int(metrics_port, "metrics_port", 0, MAX_PORT, " (a TCP port; 0: any free port)"),
    }
    if not metrics:
        ports["metrics"] = None
    timeout = check_number(timeout, "timeout", 1.0, MAX_TIMEOUT_S, what=" s")
    planned_load_test = check_load_test(
        load_test,
        concurrency=concurrency,
        batch_sizes=batch_sizes,
        protocol=protocol,
        sweep=sweep,
        mixes=mixes,
        processes=processes,
        window_s=window_s,
        extra_process=extra_process,
        kill_backend=kill_backend,
        json_path=json_path,
    )
    tuning = check_tuning(
        buckets=buckets,
        cuda_graphs=cuda_graphs,
        cudnn_search=cudnn_search,
        session_per_bucket=session_per_bucket,
        max_queue_size=max_queue_size,
        queue_timeout_ms=queue_timeout_ms,
    )
    repository_plan = check_python_repository(
        onnx,
        repository,
        name=name,
        engine=engine,
        plugin=plugin,
        runtime=runtime,
        max_batch_size=max_batch_size,
        instances=instances,
        instance_kind=instance_kind,
        max_queue_delay_us=max_queue_delay_us,
        warmup=warmup,
        threads=threads,
        force=force,
        device=device,
        ort_library=ort_library,
        tuning=tuning,
    )
    runtime_here = runtime_note = None
    if serving:
        from wtconv_serving.server import check_ports

        if log is not None:
            check_output_file(log, option="log", force=True)
        if json_path is not None:
            check_output_file(json_path, option="json_path", force=True)
        # The server runs on this machine: a runtime that cannot run here is refused now, in one line, rather than
        # as a model that fails to load inside the server; "auto" is resolved as the server will resolve it.
        runtime_here, runtime_note = runtime_choice(
            runtime,
            os.fspath(onnx),
            None if engine is None else os.fspath(engine),
            device=device,
            ort_library=None if ort_library is None else os.fspath(ort_library),
        )
        check_ports(host, ports)
    return ServingPlan(
        repository_plan=repository_plan,
        host=host,
        ports=ports,
        log=None if log is None else Path(log),
        timeout=timeout,
        runtime_here=runtime_here,
        runtime_note=runtime_note,
        json_path=None if json_path is None else Path(json_path),
        load_test=planned_load_test,
    )


def runtime_choice(
    runtime: str, onnx: str, engine: str | None, *, device: str = "auto", ort_library: str | None = None
) -> tuple[str, str]:
    """(runtime, note): the runtime a server started here runs the model on, and one line saying it and why: for
    "auto", each better runtime that cannot run here with its reason, and whether an --engine given goes unused
    (a machine without a GPU serves the ONNX model instead); for onnxruntime, where ONNX Runtime runs it
    (``device``) and what runs the WTConv2d nodes. ConfigurationError when a runtime asked for cannot run here (for
    onnxruntime with device "cuda": no CUDA execution provider, or no CUDA op in libwtconv_ort.so), or none can."""
    from wtconv_serving.runtimes import RUNTIMES, select_runtime, unavailable_reason

    chosen = select_runtime(runtime, onnx_path=onnx, engine_path=engine, ort_device=device, ort_library=ort_library)
    if runtime != "auto":
        note = f"runtime {chosen} (--runtime {runtime})"
    else:
        skipped = []
        for better in RUNTIMES[: RUNTIMES.index(chosen)]:
            if better == "tensorrt" and not engine:
                continue  # no engine given: TensorRT was never a candidate, nothing to explain
            why = unavailable_reason(better, onnx_path=onnx, engine_path=engine)
            skipped.append(f"{better} cannot run here: {why}")
        note = f"runtime {chosen} (--runtime auto" + "".join(f"; {why}" for why in skipped) + ")"
    if chosen == "onnxruntime":
        note += ": " + _onnxruntime_note(onnx, device, ort_library)
    if engine and chosen != "tensorrt":
        note += f"; the engine {engine} goes into the repository but does not run on this machine"
    return chosen, note


def _onnxruntime_note(onnx: str, device: str, ort_library: str | None) -> str:
    """Where the onnxruntime runtime runs the model here and what runs its WTConv2d nodes, with why not on the GPU
    when ``device`` is "auto" and the GPU cannot be used."""
    from wtconv_libs import lookup
    from wtconv_ort.execution import plan_ort_execution
    from wtconv_serving.runtimes import resolve_ort_device

    library = ort_library or lookup.ort_library()  # what write_python_repository copies
    where, why = resolve_ort_device(device, onnx, library)
    note = plan_ort_execution(onnx, "cpu" if where == "cpu" else "cuda", library).describe()
    if where == "cpu" and device == "auto":
        note += f" (not on a GPU: {why})"
    return note


def write_serving_repository(
    onnx: str | os.PathLike,
    repository: str | os.PathLike = DEFAULT_REPOSITORY,
    *,
    name: str | None = None,
    engine: str | os.PathLike | None = None,
    plugin: str | os.PathLike | None = None,
    runtime: str = "auto",
    max_batch_size: int | None = None,
    instances: int | None = None,
    instance_kind: str = "auto",
    max_queue_delay_us: int = 500,
    threads: int = 0,
    warmup: bool = True,
    force: bool = False,
    device: str = "auto",
    ort_library: str | os.PathLike | None = None,
    buckets: Sequence[int] | None = None,
    cuda_graphs: bool = DEFAULT_TUNING.cuda_graphs,
    cudnn_search: str = DEFAULT_TUNING.cudnn_search,
    session_per_bucket: bool = DEFAULT_TUNING.session_per_bucket,
    max_queue_size: int = DEFAULT_TUNING.max_queue_size,
    queue_timeout_ms: int = DEFAULT_TUNING.queue_timeout_ms,
) -> ServingRepository:
    """Write a Triton Python-backend model repository for an exported ONNX model (``wtconv-trt serve
    --write-only``); returns ServingRepository.

    name: default 'digits' for the shipped model, else the file's stem. engine / plugin: a TensorRT engine built from
    the model and its plugin library, served where TensorRT and a GPU exist. runtime: "auto" (the first of TensorRT
    engine, PyTorch on our CUDA kernels, ONNX Runtime that can run where the server runs), "tensorrt", "torch-cuda" or
    "onnxruntime". max_batch_size: Triton's (default: the engine's profiles, else 128 images, fewer for large inputs:
    wtconv_serving.tuning.default_max_batch). instances: 1 to 64 (default: serving_defaults.GPU_INSTANCES per GPU for
    GPU instances, else 1); instance_kind: "auto", "cpu", "gpu", "model". max_queue_delay_us: 0 to 10**8. threads: ONNX
    Runtime intra-op threads, 0 to 1024 (0: its own). warmup: add model_warmup (one request per bucket) to the config.
    force: replace the model's folder when it holds files. device: where the onnxruntime runtime runs the model: "auto"
    (on the GPU where this machine's onnxruntime has the CUDA execution provider and, for WTConv2d nodes,
    libwtconv_ort.so has its CUDA op; else the CPU), "cpu", or "cuda" (each KIND_GPU instance on its GPU); only with
    runtime onnxruntime or auto. ort_library: libwtconv_ort.so for the WTConv2d nodes (default: the one ``wtconv-trt
    doctor`` finds), copied into the model's folder; without one the Python op runs them (CPU).

    Tuning (docs/serving.md, "Tuning"; defaults in wtconv_serving.tuning): buckets: the batch sizes a batch is
    padded up to on a GPU, Triton's preferred sizes and the warm-up sizes (default powers of two up to
    max_batch_size, which must be the largest). cuda_graphs: one CUDA graph per bucket. cudnn_search: ONNX Runtime's
    cudnn_conv_algo_search, "auto", "EXHAUSTIVE", "HEURISTIC" or "DEFAULT". session_per_bucket: ONNX Runtime without
    graphs, one session per bucket. max_queue_size: 0 to 10**6 waiting requests before the next is refused at once
    (0: no limit). queue_timeout_ms: 0 to 3,600,000, a request waiting longer is refused (0: no limit)."""
    return plan_serving(
        onnx,
        repository,
        name=name,
        engine=engine,
        plugin=plugin,
        runtime=runtime,
        max_batch_size=max_batch_size,
        instances=instances,
        instance_kind=instance_kind,
        max_queue_delay_us=max_queue_delay_us,
        threads=threads,
        warmup=warmup,
        force=force,
        device=device,
        ort_library=ort_library,
        buckets=buckets,
        cuda_graphs=cuda_graphs,
        cudnn_search=cudnn_search,
        session_per_bucket=session_per_bucket,
        max_queue_size=max_queue_size,
        queue_timeout_ms=queue_timeout_ms,
        serving=False,
    ).write_repository()


def serve(onnx: str | os.PathLike, repository: str | os.PathLike = DEFAULT_REPOSITORY, **options: Any) -> Served:
    """Write the repository and start tritonserver on it (``wtconv-trt serve``); returns the running Served, a
    context manager that drains and stops the server::

        with wtconv_trt.serve("digits.onnx", http_port=0, grpc_port=0, metrics_port=0) as served:
            print(served.grpc_url, served.metrics_url)
            print(served.load_test(1000).passed)

    ``options``: those of plan_serving (the repository's and its tuning, host, http_port, grpc_port, metrics_port,
    metrics, log, timeout), all checked before anything is written."""
    return plan_serving(onnx, repository, **options).start()


class Served:
    """A running tritonserver serving one model (ServingPlan.start / serve). ``with served:`` drains and stops it at
    the end; ``stop()`` does too."""

    def __init__(self, repository: ServingRepository, server: Any, network_note: str | None = None) -> None:
        self.repository = repository
        self.server = server
        self.network_note = network_note  # said when the server listens beyond this machine
        self.failed = False  # a load test that did not pass, or a server that exited by itself: its log is kept

    @property
    def name(self) -> str:
        """The model's name in the repository."""
        return self.repository.name

    @property
    def http_url(self) -> str:
        """The server's HTTP endpoint, host:port."""
        return self.server.http_url

    @property
    def grpc_url(self) -> str:
        """The server's gRPC endpoint, host:port."""
        return self.server.grpc_url

    @property
    def metrics_url(self) -> str | None:
        """The server's Prometheus metrics endpoint (None when off)."""
        return self.server.metrics_url

    @property
    def log_file(self) -> Path:
        """The server's log file."""
        return self.server.log_file

    def client_command(self) -> str:
        """The command that queries this model with samples/triton_client.py and checks every answer against the
        served ONNX file run here in ONNX Runtime (docs/serving.md, "A client for any served model")."""
        import shlex

        sample = Path(__file__).resolve().parents[2] / "samples" / "triton_client.py"
        shown = os.path.relpath(sample) if sample.is_file() else "samples/triton_client.py"
        if shown.startswith(".."):
            shown = str(sample)
        onnx = shlex.quote(os.fspath(self.repository.onnx))
        return f"python {shlex.quote(shown)} --url {self.grpc_url} --model {shlex.quote(self.name)} --onnx {onnx}"

    def stop(self, keep_log: bool = False) -> int | None:
        """Drain and stop the server and its backend stubs, removing what they leave (shared memory, the temporary
        log folder unless ``keep_log``); returns its exit status."""
        return self.server.stop(keep_log=keep_log)

    def __enter__(self) -> Served:
        return self

    def __exit__(self, kind, value, traceback) -> None:
        """Drain and stop; the temporary log is kept, and named in a warning, after a failure (``failed``, or an
        error other than Ctrl-C or SystemExit leaving the block)."""
        keep = self.failed or (kind is not None and not issubclass(kind, (KeyboardInterrupt, SystemExit)))
        keep = keep and self.server.log_dir is not None
        self.stop(keep_log=keep)
        if keep:
            log.warning("the server's log is kept: %s", self.log_file)

    def wait(self, stop: threading.Event | None = None, poll_s: float = 1.0) -> int | None:
        """Block until ``stop`` is set (None returned) or the server exits by itself (its exit status returned).
        Ctrl-C raises KeyboardInterrupt as usual."""
        stop = stop or threading.Event()
        while not stop.wait(poll_s):
            code = self.server.process.poll()
            if code is not None:
                self.failed = True
                return code
        return None

    def load_test(
        self,
        requests: int,
        *,
        concurrency: int = 16,
        batch_sizes: Sequence[int] = (1, 2, 4, 8),
        protocol: str = "grpc",
        sweep: Sequence[int] = (),
        mixes: Sequence[Sequence[int]] = (),
        processes: int | None = None,
        window_s: float = 3.0,
        extra_process: bool = True,
        kill_backend: bool = False,
        json_path: str | os.PathLike | None = None,
    ) -> LoadTestResult:
        """Check ``requests`` requests (distinct inputs, batch sizes cycled) from ``concurrency`` clients over
        ``protocol`` ("grpc", "http" or "both") against the served model run here directly (atol = rtol = 1e-5,
        fp16 1e-2), with ``kill_backend`` killing the model's backend a quarter of the way through; time the served
        runner directly per bucket; then, with ``sweep`` (requests in flight per point), sweep the load from
        ``processes`` client processes over ``batch_sizes`` and each of ``mixes``, ``window_s`` seconds a point,
        and once more with one more process (``extra_process``). json_path: write the report there (atomically).
        ``passed``: every request of the check answered and matched, none of the sweep failed
        (wtconv_serving.load_test)."""
        from wtconv_core.paths import check_output_file

        planned = check_load_test(
            requests,
            concurrency=concurrency,
            batch_sizes=batch_sizes,
            protocol=protocol,
            sweep=sweep,
            mixes=mixes,
            processes=processes,
            window_s=window_s,
            extra_process=extra_process,
            kill_backend=kill_backend,
            json_path=json_path,
        )
        if json_path:
            check_output_file(json_path, option="json_path", force=True)
        return self.run_load_test(planned)

    def run_load_test(self, planned: LoadTest) -> LoadTestResult:
        """Run a load test already checked (check_load_test, e.g. ServingPlan.load_test), as load_test does."""
        from wtconv_core.files import atomic_write_json
        from wtconv_serving.load_test import run_load_test

        result = run_load_test(
            self.repository,
            self.server,
            planned.requests,
            concurrency=planned.concurrency,
            batch_sizes=list(planned.batch_sizes),
            protocol=planned.protocol,
            sweep=list(planned.sweep),
            mixes=[list(m) for m in planned.mixes],
            processes=planned.processes,
            window_s=planned.window_s,
            extra_process=planned.extra_process,
            kill_backend=planned.kill_backend,
        )
        if planned.json_path:
            atomic_write_json(planned.json_path, result.report)  # an interrupted run leaves no half-written file
        self.failed |= not result.passed
        return result
