"""Serving with Triton Inference Server's Python backend (``wtconv-trt serve``; docs/serving.md).

``plan_serving`` checks every option and file before anything is written or started and returns a ServingPlan;
``ServingPlan.write_repository`` writes the model repository and ``ServingPlan.start`` starts the server on it
(Served, a context manager that stops it). ``write_serving_repository`` and ``serve`` do those steps in one
call. ``Served.load_test`` sends a bounded load and checks every answer against the same runtime run directly.
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
from wtconv_serving.python_backend import PythonRepositoryPlan, ServingRepository

log = logging.getLogger(__name__)

__all__ = [
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
PROTOCOLS = ("grpc", "http", "both")
MAX_PORT = 65535


def check_load_test(
    requests: int | None,
    *,
    concurrency: int = 16,
    batch_sizes: Sequence[int] = (1, 2, 4, 8),
    protocol: str = "grpc",
) -> list[int]:
    """The load-test options checked (requests 1 to 10**7 when given, concurrency 1 to 4096, batch sizes >= 1,
    protocol grpc / http / both); returns the batch sizes as a list."""
    if requests is not None:
        check_int(requests, "requests", 1, MAX_LOAD_REQUESTS)
    check_int(concurrency, "concurrency", 1, MAX_CONCURRENCY)
    sizes = [check_int(b, "batch_sizes", 1, 2**31 - 1) for b in batch_sizes]
    if not sizes:
        raise InputError("batch_sizes: expected at least one batch size, e.g. 1,2,4,8", parameter="batch_sizes")
    check_choice(protocol, "protocol", PROTOCOLS)
    return sizes


@dataclass
class ServingPlan:
    """Checked options of a Python-backend repository and of the server that serves it (plan_serving)."""

    repository_plan: PythonRepositoryPlan
    host: str
    ports: dict
    log: Path | None
    timeout: float
    written: ServingRepository | None = field(default=None, repr=False)
    # The runtime the server will choose on this machine and why (serving only): one line said before the wait.
    runtime_here: str | None = None
    runtime_note: str | None = None

    @property
    def onnx(self) -> Path:
        """The ONNX model served."""
        return self.repository_plan.onnx

    @property
    def repository(self) -> Path:
        """The model repository written into."""
        return self.repository_plan.repository

    def write_repository(self) -> ServingRepository:
        """Write the model's folder into the repository (wtconv_serving.python_backend.write_python_repository)."""
        from wtconv_serving.python_backend import write_python_repository

        self.written = write_python_repository(self.repository_plan)
        return self.written

    def start(self) -> Served:
        """Start tritonserver on the written repository, wait until the model is ready, and watch its backend
        stubs (a crashed one is reloaded); returns the running Served. ServingError in one line when it cannot."""
        from wtconv_serving.server import TritonServer, is_loopback

        repository = self.written or self.write_repository()
        network_note = None
        if not is_loopback(self.host):
            network_note = (
                f"listening on {self.host}, reachable from the network; the server runs the repository's model "
                f"code, engines and plugin libraries as native code: serve only files you trust"
            )
        server = TritonServer(
            self.repository,
            host=self.host,
            http_port=self.ports["http"],
            grpc_port=self.ports["grpc"],
            metrics_port=self.ports["metrics"],
            log_file=self.log,
            model_control="explicit",
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
    instances: int = 1,
    instance_kind: str = "auto",
    max_queue_delay_us: int = 500,
    threads: int = 0,
    warmup: bool = True,
    force: bool = False,
    device: str = "auto",
    ort_library: str | os.PathLike | None = None,
    serving: bool = True,
    host: str = "127.0.0.1",
    http_port: int = 8000,
    grpc_port: int = 8001,
    metrics_port: int = 0,
    log: str | os.PathLike | None = None,
    timeout: float = 300.0,
    load_test: int | None = None,
    concurrency: int = 16,
    batch_sizes: Sequence[int] = (1, 2, 4, 8),
    protocol: str = "grpc",
) -> ServingPlan:
    """Check everything a ``wtconv-trt serve`` run needs before anything is written or started; returns the
    ServingPlan that writes the repository and starts the server.

    The repository options are those of write_serving_repository. serving: also check what serving here needs:
    the server options (ports 0 to 65535, 0 picks a free one; timeout 1 to 86400 s), that a runtime named with
    ``runtime`` can run on this machine, and the ports given are free. load_test, concurrency, batch_sizes,
    protocol: a load test to run once the server is ready (checked by check_load_test)."""
    from wtconv_core.paths import check_not_an_input
    from wtconv_serving.python_backend import check_python_repository

    check_not_an_input(
        [("ONNX model", onnx), ("engine", engine), ("plugin", plugin), ("library", ort_library)],
        files=[("log", log)],
        folders=[("repository", repository)],
    )
    ports = {
        "http": check_int(http_port, "http_port", 0, MAX_PORT, " (a TCP port; 0: any free port)"),
        "grpc": check_int(grpc_port, "grpc_port", 0, MAX_PORT, " (a TCP port; 0: any free port)"),
        "metrics": check_int(metrics_port, "metrics_port", 0, MAX_PORT, " (a TCP port; 0: any free port)"),
    }
    timeout = check_number(timeout, "timeout", 1.0, MAX_TIMEOUT_S, what=" s")
    check_load_test(load_test, concurrency=concurrency, batch_sizes=batch_sizes, protocol=protocol)
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
    )
    runtime_here = runtime_note = None
    if serving:
        from wtconv_serving.server import check_ports

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
    instances: int = 1,
    instance_kind: str = "auto",
    max_queue_delay_us: int = 500,
    threads: int = 0,
    warmup: bool = True,
    force: bool = False,
    device: str = "auto",
    ort_library: str | os.PathLike | None = None,
) -> ServingRepository:
    """Write a Triton Python-backend model repository for an exported ONNX model (``wtconv-trt serve
    --write-only``); returns ServingRepository.

    name: default 'digits' for the shipped model, else the file's stem. engine / plugin: a TensorRT engine built
    from the model and its plugin library, served where TensorRT and a GPU exist. runtime: "auto" (the first of
    TensorRT engine, PyTorch on our CUDA kernels, ONNX Runtime that can run where the server runs), "tensorrt",
    "torch-cuda" or "onnxruntime". max_batch_size: Triton's (default: the engine's profiles, else 32).
    instances: 1 to 64; instance_kind: "auto", "cpu", "gpu", "model". max_queue_delay_us: 0 to 10**8.
    threads: ONNX Runtime intra-op threads, 0 to 1024 (0: its own). warmup: add model_warmup to the config.
    force: replace the model's folder when it holds files. device: where the onnxruntime runtime runs the model:
    "auto" (on the GPU where this machine's onnxruntime has the CUDA execution provider and, for WTConv2d nodes,
    libwtconv_ort.so has its CUDA op; else the CPU), "cpu", or "cuda" (each KIND_GPU instance on its GPU, TF32 off);
    only with runtime onnxruntime or auto. ort_library: libwtconv_ort.so for the WTConv2d nodes (default: the one
    ``wtconv-trt doctor`` finds), copied into the model's folder; without one the Python op runs them (CPU)."""
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
        serving=False,
    ).write_repository()


def serve(onnx: str | os.PathLike, repository: str | os.PathLike = DEFAULT_REPOSITORY, **options: Any) -> Served:
    """Write the repository and start tritonserver on it (``wtconv-trt serve``); returns the running Served, a
    context manager that stops the server::

        with wtconv_trt.serve("digits.onnx", http_port=0, grpc_port=0) as served:
            print(served.grpc_url)
            print(served.load_test(1000).passed)

    ``options``: those of plan_serving (the repository's, host, http_port, grpc_port, metrics_port, log,
    timeout), all checked before anything is written."""
    return plan_serving(onnx, repository, **options).start()


@dataclass
class LoadTestResult:
    """A load test: one wtconv_serving.load.LoadReport per protocol, the runtime's direct throughput per
    batch size, and the JSON document (``report``) ``wtconv-trt serve --load-test --json`` writes."""

    reports: list
    report: dict
    passed: bool

    @property
    def direct(self) -> list:
        """The runtime's direct throughput and latency per batch size (the report's "direct" entries)."""
        return self.report["direct"]

    def table(self) -> str:
        """Throughput and latency, direct and served, as ``wtconv-trt serve --load-test`` prints them."""
        lines = [f"{'':10} {'batch':>5} {'images/s':>10} {'p50 ms':>8} {'p99 ms':>8}"]
        for d in self.direct:
            lines.append(
                f"{'direct':10} {d['batch']:>5} {d['images_per_s']:>10.1f} {d['latency_ms']['p50']:>8.3f} "
                f"{d['latency_ms']['p99']:>8.3f}"
            )
        for r in self.report["load"]:
            lines.append(
                f"{'served ' + r['protocol']:10} {'mixed':>5} {r['throughput_images_per_s']:>10.1f} "
                f"{r['latency_ms']['p50']:>8.3f} {r['latency_ms']['p99']:>8.3f}"
            )
        return "\n".join(lines)


class Served:
    """A running tritonserver serving one model (ServingPlan.start / serve). ``with served:`` stops it at the end;
    ``stop()`` does too."""

    def __init__(self, repository: ServingRepository, server: Any, network_note: str | None = None) -> None:
        self.repository = repository
        self.server = server
        self.network_note = network_note  # said when the server listens beyond this machine

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

    def stop(self) -> int | None:
        """Stop the server and its backend stubs; returns its exit status."""
        return self.server.stop()

    def __enter__(self) -> Served:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def wait(self, stop: threading.Event | None = None, poll_s: float = 1.0) -> int | None:
        """Block until ``stop`` is set (None returned) or the server exits by itself (its exit status returned).
        Ctrl-C raises KeyboardInterrupt as usual."""
        stop = stop or threading.Event()
        while not stop.wait(poll_s):
            code = self.server.process.poll()
            if code is not None:
                return code
        return None

    def load_test(
        self,
        requests: int,
        *,
        concurrency: int = 16,
        batch_sizes: Sequence[int] = (1, 2, 4, 8),
        protocol: str = "grpc",
        json_path: str | os.PathLike | None = None,
    ) -> LoadTestResult:
        """Send ``requests`` requests (distinct inputs, batch sizes cycled) from ``concurrency`` clients over
        ``protocol`` ("grpc", "http" or "both"), check every answer against the served runtime run here directly
        (atol = rtol = 1e-5, fp16 1e-2), and measure the direct throughput per batch size. json_path: write the
        report there (atomically). ``passed``: every request answered and matched."""
        import platform

        import numpy as np

        from wtconv_core.files import atomic_write_json
        from wtconv_core.paths import check_output_file
        from wtconv_serving.load import direct_throughput, expected_outputs, input_pool, run_load
        from wtconv_serving.repository import onnx_batching
        from wtconv_serving.runtimes import make_runner

        sizes = check_load_test(requests, concurrency=concurrency, batch_sizes=batch_sizes, protocol=protocol)
        if json_path:
            check_output_file(json_path, option="json_path", force=True)
        repo = self.repository
        runner = make_runner(
            repo.runtime,
            onnx_path=repo.onnx,
            engine_path=repo.engine,
            plugin=repo.plugin,
            threads=repo.threads,
            ort_device=repo.ort_device or "cpu",
            ort_library=repo.ort_library,
        )
        _, input_dims, _ = onnx_batching(repo.description, repo.max_batch_size or None)
        pool = input_pool(
            repo.description["metadata"],
            input_dims,
            runner.input_dtype,
            size=max(256, -(-requests // len(set(sizes))) + 1),
        )
        expected = expected_outputs(runner, pool)
        tolerance = 1e-2 if runner.input_dtype == np.float16 else 1e-5
        report = {
            "machine": platform.platform(),
            "runtime": runner.name,
            "execution": getattr(runner, "description", None),  # where ONNX Runtime ran it, for onnxruntime
            "model": str(repo.onnx),
            "input_dtype": str(runner.input_dtype),
            "load": [],
            "direct": [],
        }
        reports, passed = [], True
        for each in ["grpc", "http"] if protocol == "both" else [protocol]:
            load = run_load(
                self.grpc_url if each == "grpc" else self.http_url,
                repo.name,
                pool,
                expected,
                protocol=each,
                requests=requests,
                concurrency=concurrency,
                batch_sizes=sizes,
                input_name=repo.description["input"]["name"],
                output_name=repo.description["output"]["name"],
                atol=tolerance,
                rtol=tolerance,
            )
            reports.append(load)
            report["load"].append(load.summary())
            passed &= load.failed == 0 and load.lost == 0 and load.mismatched == 0
        report["direct"] = [direct_throughput(runner, pool, batch) for batch in sorted(set(sizes))]
        if json_path:
            atomic_write_json(json_path, report)  # an interrupted run leaves no half-written file
        return LoadTestResult(reports, report, passed)
