"""Serving with Triton Inference Server's Python backend (``wtconv-trt serve``; docs/serving.md).

``plan_serving`` checks every option, file and port before anything is written or started and returns a ServingPlan;
``ServingPlan.write_repository`` writes the model repository and ``ServingPlan.start`` starts the server on it
(Served, a context manager that drains and stops it and leaves nothing behind). ``write_serving_repository`` and
``serve`` do those steps in one call. ``Served.load_test`` checks every answer against the model run directly, times
the runner directly, and sweeps the load from several client processes (wtconv_serving.traffic.trial).
"""

from __future__ import annotations

import logging
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from wtconv_core.errors import InputError
from wtconv_core.inputs import check_choice, check_int, check_number
from wtconv_core.options import (
    CLIENT_CONNECTIONS,
    DEFAULT_REPOSITORY,
    PROTOCOLS,
    RECOVERIES,
    SHARED_MEMORY_MODES,
    LoadTestOptions,
    ServingOptions,
)
from wtconv_serving.repositories.python_backend import PythonRepositoryPlan, ServingRepository
from wtconv_serving.traffic.trial import LoadTestResult
from wtconv_serving.tuning import check_tuning

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

MAX_TIMEOUT_S = 86_400.0
MAX_LOAD_REQUESTS = 10**7
MAX_CONCURRENCY = 4096
MAX_PROCESSES = 64
MAX_WINDOW_S = 3600.0
MAX_SOAK_S = 7 * 86_400.0
MAX_PORT = 65535


@dataclass(frozen=True)
class LoadTest:
    """A load test whose options check_load_test has checked: what Served.run_load_test runs (Served.load_test
    documents each option)."""

    requests: int | None  # the check's; None: no check (a soak alone)
    concurrency: int = 16
    batch_sizes: tuple[int, ...] = (1, 2, 4, 8)
    protocol: str = "grpc"
    sweep: tuple[int, ...] = ()
    mixes: tuple[tuple[int, ...], ...] = ()
    processes: int | None = None
    window_s: float = 3.0
    connections: str = "process"
    extra_process: bool = True
    kill_backend: bool = False
    shared_memory: str = "none"
    soak_s: float | None = None
    sample_every_s: float = 60.0
    json_path: Path | None = None


def check_load_test(options: LoadTestOptions | None = None, **keywords: Any) -> LoadTest | None:
    """The load-test options (a LoadTestOptions, or its fields as keywords; ``requests`` is its ``load_test``)
    checked: requests 1 to 10**7 when given, concurrency and each sweep value 1 to 4096, batch sizes >= 1 in every
    mix, protocol grpc / http / both, processes 1 to 64, window 0.1 to 3600 s, connections process / client,
    shared_memory none / system / cuda,
    soak 1 s to a week, its samples every 0.1 s to an hour; json_path is checked by the caller, with the other files.
    Returns the LoadTest, None without requests or a soak."""
    if "requests" in keywords:
        keywords["load_test"] = keywords.pop("requests")
    o = options or LoadTestOptions(**keywords)
    requests = o.load_test
    if requests is not None:
        check_int(requests, "requests", 1, MAX_LOAD_REQUESTS)
    check_int(o.concurrency, "concurrency", 1, MAX_CONCURRENCY)
    for value in o.sweep:
        check_int(value, "sweep", 1, MAX_CONCURRENCY)
    sizes = tuple(check_int(b, "batch_sizes", 1, 2**31 - 1) for b in o.batch_sizes)
    if not sizes:
        raise InputError("batch_sizes: expected at least one batch size, e.g. 1,2,4,8", parameter="batch_sizes")
    for mix in o.mixes:
        if not list(mix):
            raise InputError("mixes: expected at least one batch size in each mix, e.g. 1,2,4,8", parameter="mixes")
        for b in mix:
            check_int(b, "mixes", 1, 2**31 - 1)
    if o.processes is not None:
        check_int(o.processes, "processes", 1, MAX_PROCESSES)
    window_s = check_number(o.window_s, "window_s", 0.1, MAX_WINDOW_S, what=" s")
    check_choice(o.protocol, "protocol", PROTOCOLS)
    check_choice(o.shared_memory, "shared_memory", SHARED_MEMORY_MODES)
    check_choice(o.connections, "connections", CLIENT_CONNECTIONS)
    soak_s = None if o.soak_s is None else check_number(o.soak_s, "soak_s", 1.0, MAX_SOAK_S, what=" s")
    sample_every_s = check_number(o.sample_every_s, "sample_every_s", 0.1, MAX_WINDOW_S, what=" s")
    if requests is None and soak_s is None:
        return None
    return LoadTest(
        requests=requests,
        concurrency=o.concurrency,
        batch_sizes=sizes,
        protocol=o.protocol,
        sweep=tuple(o.sweep),
        mixes=tuple(tuple(m) for m in o.mixes),
        processes=o.processes,
        window_s=window_s,
        connections=o.connections,
        extra_process=bool(o.extra_process),
        kill_backend=bool(o.kill_backend),
        shared_memory=o.shared_memory,
        soak_s=soak_s,
        sample_every_s=sample_every_s,
        json_path=None if o.json_path is None else Path(o.json_path),
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
    visible_gpus: int | None = None  # the GPUs a server started here sees (serving only)
    recover: str = "restart"  # how the watch brings back a model whose backend died (wtconv_core.options.RECOVERIES)
    mps: bool = False  # the server's processes clients of an MPS daemon of their own (wtconv_serving.server.mps)

    @property
    def onnx(self) -> Path:
        """The ONNX model served."""
        return self.repository_plan.onnx

    @property
    def repository(self) -> Path:
        """The model repository written into."""
        return self.repository_plan.repository

    def write_repository(self) -> ServingRepository:
        """Write the model's folder into the repository
        (wtconv_serving.repositories.python_backend.write_python_repository);
        interrupted, it leaves the repository as it was."""
        from wtconv_serving.repositories.python_backend import write_python_repository

        self.written = write_python_repository(self.repository_plan)
        return self.written

    def start(self) -> Served:
        """Start tritonserver on the written repository, wait until the model is ready (warmed up at every bucket),
        and watch its backend stubs (after a crashed one, the server is restarted, or the model reloaded: ``recover``);
        returns the running Served. ServingError in one line
        when it cannot (the server's log is then kept and named); interrupted, nothing is left running."""
        from wtconv_serving.server.launcher import TritonServer, is_loopback
        from wtconv_serving.server.mps import MpsDaemon

        repository = self.written or self.write_repository()
        network_note = None
        if not is_loopback(self.host):
            network_note = (
                f"listening on {self.host}, reachable from the network: inference, metadata and statistics answer "
                f"anyone who reaches the ports (the repository API answers nobody); serve only files you trust and "
                f"put an authenticating proxy in front for clients you do not"
            )
        daemon = MpsDaemon().start() if self.mps else None
        try:
            server = TritonServer(
                self.repository,
                host=self.host,
                http_port=self.ports["http"],
                grpc_port=self.ports["grpc"],
                metrics_port=self.ports["metrics"],
                log_file=self.log,
                model_control="poll",
                load_models=[repository.name],
                environment=daemon.environment() if daemon else None,
            )
            log.info(
                "starting tritonserver: loading '%s' (runtime %s)%s",
                repository.name,
                self.runtime_here or repository.runtime,
                ", then warming it up" if self.repository_plan.warmup else "",
            )
            server.start(timeout=self.timeout)  # a failed start cleans up after itself, its log kept
        except BaseException:
            if daemon:
                daemon.stop()
            raise
        try:
            mps_note = _check_mps_clients(server, daemon) if daemon else None
            server.watch(recover=self.recover)
        except BaseException:
            server.stop()
            if daemon:
                daemon.stop()
            raise
        return Served(repository, server, network_note, mps=daemon, mps_note=mps_note)


def plan_serving(
    onnx: str | os.PathLike,
    repository: str | os.PathLike = DEFAULT_REPOSITORY,
    *,
    options: ServingOptions | None = None,
    serving: bool = True,
    **keywords: Any,
) -> ServingPlan:
    """Check everything a ``wtconv-trt serve`` run needs before anything is written or started; returns the
    ServingPlan that writes the repository and starts the server.

    ``options``: a ServingOptions (wtconv_core.options: the repository's, the tuning's, the server's and the load
    test's options, each with its default and meaning there), or its fields as flat ``keywords``. serving: also
    check what serving here needs: the server options (ports 0 to 65535, 0 picks a free one, given ones distinct and
    free; metrics off with metrics=False; timeout 1 to 86400 s), that a runtime named with ``runtime`` can run on
    this machine, that no output (``log``, ``json_path``, the repository) is one of the inputs, and that ``log`` and
    ``json_path`` can be written (both are replaced when they exist). A load test (``load_test`` requests) is
    checked by check_load_test and kept as ServingPlan.load_test, run by Served.run_load_test."""
    from wtconv_core.paths import check_not_an_input, check_output_file
    from wtconv_serving.repositories.python_backend import check_python_repository

    options = options or ServingOptions.from_keywords(**keywords)
    repo, server = options.repository, options.server
    check_not_an_input(
        [("ONNX model", onnx), ("engine", repo.engine), ("plugin", repo.plugin), ("library", repo.ort_library)],
        files=[("log", server.log), ("json_path", options.load_test.json_path)],
        folders=[("repository", repository)],
    )
    ports = {
        kind: check_int(getattr(server, f"{kind}_port"), f"{kind}_port", 0, MAX_PORT, " (a TCP port; 0: any free port)")
        for kind in ("http", "grpc", "metrics")
    }
    if not server.metrics:
        ports["metrics"] = None
    timeout = check_number(server.timeout, "timeout", 1.0, MAX_TIMEOUT_S, what=" s")
    check_choice(server.recover, "recover", RECOVERIES)
    planned_load_test = check_load_test(options.load_test)
    tuning = check_tuning(options.tuning)
    repository_plan = check_python_repository(onnx, repository, repo, tuning=tuning)
    runtime_here = runtime_note = visible = None
    json_path = options.load_test.json_path
    if serving:
        from wtconv_serving.server.launcher import check_ports, check_visible_gpus

        if server.log is not None:
            check_output_file(server.log, option="log", force=True)
        if json_path is not None:
            check_output_file(json_path, option="json_path", force=True)
        # The server runs on this machine: a runtime that cannot run here is refused now, in one line, rather than
        # as a model that fails to load inside the server; "auto" is resolved as the server will resolve it.
        runtime_here, runtime_note = runtime_choice(
            repo.runtime,
            repository_plan.exported,
            None if repo.engine is None else os.fspath(repo.engine),
            device=repo.device,
            ort_library=None if repo.ort_library is None else os.fspath(repo.ort_library),
        )
        check_ports(server.host, ports)
        visible = check_visible_gpus(repo.gpus)
        if repo.runtime == "auto" and repo.instance_kind == "auto":
            # The server resolves "auto" as runtime_choice did: its instances go where that runtime runs, GPU
            # instances on every GPU (or those of gpus) rather than KIND_MODEL's one device (--write-only keeps it).
            on_cpu = _instances_on_cpu_here(repository_plan, repo, runtime_here, "auto")
            repository_plan.instance_kind = "gpu" if visible and not on_cpu else "cpu"
        if server.mps:
            _check_mps(repository_plan, repo, runtime_here, visible)
    return ServingPlan(
        repository_plan=repository_plan,
        host=server.host,
        ports=ports,
        log=None if server.log is None else Path(server.log),
        timeout=timeout,
        runtime_here=runtime_here,
        runtime_note=runtime_note,
        json_path=None if json_path is None else Path(json_path),
        load_test=planned_load_test,
        visible_gpus=visible,
        recover=server.recover,
        mps=bool(server.mps and serving),
    )


def _check_mps(plan, repo, runtime_here: str, visible: int) -> None:
    """mps asks for GPU instances on this machine and nvidia-cuda-mps-control (wtconv_serving.server.mps): an
    InputError when the instances would run on the CPU, a ConfigurationError when the control program is missing."""
    from wtconv_serving.server.mps import find_control

    on_cpu = _instances_on_cpu_here(plan, repo, runtime_here, plan.instance_kind)
    if not visible or on_cpu:
        why = "no GPU is visible here" if not visible else "the instances run on the CPU"
        raise InputError(
            f"mps: {why}, and MPS shares a GPU between processes; leave out mps=True, or serve on a GPU",
            parameter="mps",
        )
    find_control()


def _check_mps_clients(server: Any, daemon: Any) -> str:
    """ServingError when a backend stub of the ready ``server`` is not a client of ``daemon``'s MPS server (a CUDA
    program that cannot reach the daemon runs without it, silently); else one line saying how many are."""
    from wtconv_core.errors import ServingError

    stubs = set(server.stub_pids())
    clients = daemon.clients()
    missing = sorted(stubs - clients)
    if missing:
        raise ServingError(
            f"mps: backend stub(s) {', '.join(map(str, missing))} did not connect to the MPS server (clients: "
            f"{', '.join(map(str, sorted(clients))) or 'none'}; the daemon's {daemon.log_tail()}); serve without "
            "mps=True"
        )
    return f"MPS: the {len(stubs)} backend stub(s) share each GPU through an MPS server of their own"


def _instances_on_cpu_here(plan, repo, runtime_here: str, instance_kind: str) -> bool:
    """Whether the planned model's instances of ``instance_kind`` run on this machine's CPU, with ``runtime_here``
    running it (python_backend.instances_on_cpu; ONNX Runtime's device resolved here)."""
    from wtconv_serving.repositories.python_backend import instances_on_cpu

    ort_device = _ort_device_here(plan, repo) if runtime_here == "onnxruntime" else None
    return instances_on_cpu(instance_kind, runtime_here, ort_device)


def _ort_device_here(plan, repo) -> str:
    """Where the onnxruntime runtime runs the planned model on this machine ("cpu" or "cuda")."""
    from wtconv_libs import lookup
    from wtconv_serving.runners.runtimes import resolve_ort_device

    library = repo.ort_library or lookup.ort_library()  # what write_python_repository copies
    return resolve_ort_device(repo.device, plan.exported, library)[0]


def runtime_choice(
    runtime: str, onnx: Any, engine: str | None, *, device: str = "auto", ort_library: str | None = None
) -> tuple[str, str]:
    """(runtime, note): the runtime a server started here runs the model on, and one line saying it and why: for
    "auto", each better runtime that cannot run here with its reason, and whether an --engine given goes unused
    (a machine without a GPU serves the ONNX model instead); for onnxruntime, where ONNX Runtime runs it
    (``device``) and what runs the WTConv2d nodes. ConfigurationError when a runtime asked for cannot run here (for
    onnxruntime with device "cuda": no CUDA execution provider, or no CUDA op in libwtconv_ort.so), or none can."""
    from wtconv_serving.runners.runtimes import RUNTIMES, exported_model, select_runtime, unavailable_reason

    onnx = exported_model(onnx)  # read once, whatever the choice asks of it
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


def _onnxruntime_note(onnx: Any, device: str, ort_library: str | None) -> str:
    """Where the onnxruntime runtime runs the model here and what runs its WTConv2d nodes, with why not on the GPU
    when ``device`` is "auto" and the GPU cannot be used."""
    from wtconv_libs import lookup
    from wtconv_ort.execution import plan_ort_execution
    from wtconv_serving.runners.runtimes import resolve_ort_device

    library = ort_library or lookup.ort_library()  # what write_python_repository copies
    where, why = resolve_ort_device(device, onnx, library)
    note = plan_ort_execution(onnx, "cpu" if where == "cpu" else "cuda", library).describe()
    if where == "cpu" and device == "auto":
        note += f" (not on a GPU: {why})"
    return note


def write_serving_repository(
    onnx: str | os.PathLike, repository: str | os.PathLike = DEFAULT_REPOSITORY, **options: Any
) -> ServingRepository:
    """Write a Triton Python-backend model repository for an exported ONNX model (``wtconv-trt serve
    --write-only``); returns ServingRepository.

    ``options``: the fields of wtconv_core.options.RepositoryOptions and TuningOptions as keywords (each declared
    there once, with its default and meaning): name, engine, plugin, runtime, device, ort_library, max_batch_size,
    instances, instance_kind, max_queue_delay_us, threads, warmup, force; buckets, cuda_graphs, cudnn_search,
    session_per_bucket, max_queue_size, queue_timeout_ms (docs/serving.md, "Tuning")."""
    return plan_serving(onnx, repository, serving=False, **options).write_repository()


def serve(onnx: str | os.PathLike, repository: str | os.PathLike = DEFAULT_REPOSITORY, **options: Any) -> Served:
    """Write the repository and start tritonserver on it (``wtconv-trt serve``); returns the running Served, a
    context manager that drains and stops the server::

        with wtconv_trt.serve("digits.onnx", http_port=0, grpc_port=0, metrics_port=0) as served:
            print(served.grpc_url, served.metrics_url)
            print(served.load_test(1000).passed)

    ``options``: those of plan_serving (the fields of wtconv_core.options.ServingOptions' groups: the repository's
    and its tuning, host, http_port, grpc_port, metrics_port, metrics, log, timeout, a load test), all checked before
    anything is written."""
    return plan_serving(onnx, repository, **options).start()


class Served:
    """A running tritonserver serving one model (ServingPlan.start / serve). ``with served:`` drains and stops it at
    the end; ``stop()`` does too."""

    def __init__(
        self,
        repository: ServingRepository,
        server: Any,
        network_note: str | None = None,
        *,
        mps: Any = None,
        mps_note: str | None = None,
    ) -> None:
        self.repository = repository
        self.server = server
        self.network_note = network_note  # said when the server listens beyond this machine
        self.mps = mps  # the MPS daemon of the server's processes (wtconv_serving.server.mps), stopped after it
        self.mps_note = mps_note  # said once the server is ready, with mps
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
        log folder unless ``keep_log``), then the MPS daemon of its processes if any; returns its exit status."""
        try:
            return self.server.stop(keep_log=keep_log)
        finally:
            if self.mps is not None:
                self.mps.stop()

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
            code = self.server.exit_status()  # None while the watch restarts it
            if code is not None:
                self.failed = True
                return code
        return None

    def load_test(self, requests: int | None, **options: Any) -> LoadTestResult:
        """Check ``requests`` requests (distinct inputs, batch sizes cycled) from ``concurrency`` clients over
        ``protocol`` ("grpc", "http" or "both") against the served model run here directly (atol = rtol = 1e-5,
        fp16 1e-2), with ``kill_backend`` killing the model's backend a quarter of the way through; time the served
        runner directly per bucket; then, with ``sweep`` (requests in flight per point), sweep the load from
        ``processes`` client processes over ``batch_sizes`` and each of ``mixes``, ``window_s`` seconds a point,
        their requests in flight on one gRPC connection per process or one each (``connections`` "process" or
        "client"), and once more with one more process (``extra_process``); with ``soak_s``, a soak of that many
        seconds at ``concurrency`` in flight, every answer checked against the ONNX file run directly, the backend
        killed halfway with ``kill_backend``, the memory sampled every ``sample_every_s`` (``requests`` None: the
        soak alone). ``shared_memory``: "system" or "cuda" to send the inputs through shared memory (docs/serving.md).
        json_path: write the report there (atomically). ``options``: the fields of wtconv_core.options.LoadTestOptions.
        ``passed``: every request of the check answered and matched, none of the sweep failed, the soak passed
        (wtconv_serving.traffic.trial)."""
        from wtconv_core.paths import check_output_file

        planned = check_load_test(LoadTestOptions(load_test=requests, **options))
        if planned is None:
            raise InputError("requests: expected a number of requests to check, or soak_s", parameter="requests")
        if planned.json_path:
            check_output_file(planned.json_path, option="json_path", force=True)
        return self.run_load_test(planned)

    def run_load_test(self, planned: LoadTest) -> LoadTestResult:
        """Run a load test already checked (check_load_test, e.g. ServingPlan.load_test), as load_test does."""
        from wtconv_core.files import atomic_write_json
        from wtconv_serving.traffic.trial import run_load_test

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
            connections=planned.connections,
            extra_process=planned.extra_process,
            kill_backend=planned.kill_backend,
            shared_memory=planned.shared_memory,
            soak_s=planned.soak_s,
            sample_every_s=planned.sample_every_s,
        )
        if planned.json_path:
            atomic_write_json(planned.json_path, result.report)  # an interrupted run leaves no half-written file
        self.failed |= not result.passed
        return result
