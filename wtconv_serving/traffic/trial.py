"""``serve --load-test``: the answer check, the runner called directly, and the timed sweep, against a running server.

1. The check (untimed): ``requests`` requests with distinct inputs from ``concurrency`` clients, every response
   compared with the same model run here eagerly (no buckets, no graphs: an independent run of the same file), none
   lost; optionally the model's backend is killed a quarter of the way through, and the clients retry.
2. Direct: the served runner itself (same buckets, graphs and buffers), called here on one batch per bucket, timed.
3. The sweep: for each mix of request sizes and each number of requests in flight, a window of load from several
   client processes (wtconv_serving.traffic.sweep), Triton's statistics for the batches it executed, and the served
   rate over the direct rate on those same batches; then the busiest point again with one more client process, to
   show the client is not what limits the rate.
4. The soak (wtconv_serving.traffic.soak), when asked for: a timed load with every answer checked against the ONNX
   file run directly in ONNX Runtime, the backend killed halfway with ``kill_backend``, the server's memory sampled.

With ``shared_memory`` "system" or "cuda" every phase's requests name rows of the pool laid out once in a region
(wtconv_serving.traffic.shared_memory) instead of carrying them; the regions are removed on every exit.
"""

from __future__ import annotations

import logging
import os
import platform
import threading
import time
from dataclasses import dataclass

import numpy as np

from wtconv_serving.server.mps import mps_of

log = logging.getLogger(__name__)

__all__ = ["LoadTestResult", "default_processes", "run_load_test"]

CHECK_RETRY_WAIT_S = 0.25  # between a check request's retries while a killed backend comes back


@dataclass
class LoadTestResult:
    """A load test: one wtconv_serving.traffic.check.LoadReport per protocol of the check, and the JSON document
    (``report``: check, direct, sweep) ``wtconv-trt serve --load-test --json`` writes. ``passed``: every request of
    the check answered and matched, and no request of the sweep failed."""

    reports: list
    report: dict
    passed: bool
    soak: object = None  # the soak's wtconv_serving.traffic.soak.SoakReport, when one ran

    @property
    def direct(self) -> list:
        """The runner's direct throughput and latency per batch size (the report's "direct" entries)."""
        return self.report["direct"]

    def table(self) -> str:
        """Direct and served throughput and latency, as ``wtconv-trt serve --load-test`` prints them."""
        lines = [f"{'':16} {'batch':>7} {'images/s':>10} {'p50 ms':>8} {'p99 ms':>8} {'x direct':>8}"]
        for d in self.direct:
            lines.append(
                f"{'direct':16} {d['batch']:>7} {d['images_per_s']:>10.1f} {d['latency_ms']['p50']:>8.3f} "
                f"{d['latency_ms']['p99']:>8.3f} {'':>8}"
            )
        for r in self.report["check"]:
            lines.append(
                f"{'check ' + r['protocol']:16} {'mixed':>7} {r['throughput_images_per_s'] or 0:>10.1f} "
                f"{r['latency_ms']['p50']:>8.3f} {r['latency_ms']['p99']:>8.3f} {'':>8}"
            )
        for s in self.report["sweep"]:
            ratio = "" if s["served_over_direct"] is None else f"{s['served_over_direct']:.2f}"
            label = f"{s['concurrency']} in flight x{s['processes']}"
            sizes = f"{s['batch_sizes'][0]}-{s['batch_sizes'][-1]}"
            lat = s["latency_ms"]
            lines.append(
                f"{label:16} {sizes:>7} {s['images_per_s']:>10.1f} {_ms(lat['p50']):>8} {_ms(lat['p99']):>8} {ratio:>8}"
            )
        return "\n".join(lines)


def _ms(value) -> str:
    return "-" if value is None else f"{value:.3f}"


def default_processes() -> int:
    """Client processes for the sweep: a quarter of this machine's cores, 1 to 4."""
    return max(1, min(4, (os.cpu_count() or 1) // 4))


def run_load_test(
    repo,
    server,
    requests: int | None,
    *,
    concurrency: int = 16,
    batch_sizes=(1, 2, 4, 8),
    protocol: str = "grpc",
    sweep=(),
    mixes=(),
    processes: int | None = None,
    window_s: float = 3.0,
    connections: str = "process",
    extra_process: bool = True,
    kill_backend: bool = False,
    shared_memory: str = "none",
    soak_s: float | None = None,
    sample_every_s: float = 60.0,
) -> LoadTestResult:
    """The load test of the module docstring against ``server`` (a started wtconv_serving.server.launcher.TritonServer)
    serving ``repo`` (a wtconv_serving.repositories.python_backend.ServingRepository). ``requests``: the check's (None:
    no check); ``sweep``: requests in flight per point (empty: no sweep); ``mixes``: further request-size mixes for
    the sweep besides ``batch_sizes``; ``connections``: the sweep's gRPC connections, one per client process or one per
    request in flight (sweep.LoadWorkers); ``soak_s``: the soak's seconds (None: no soak), at ``concurrency`` in flight,
    request sizes ``batch_sizes``, memory sampled every ``sample_every_s``; ``kill_backend``: kill the backend halfway
    through the soak, or without one a quarter of the way through the check."""
    from wtconv_serving.repositories.repository import onnx_batching
    from wtconv_serving.runners.runtimes import load_runtime, make_runner
    from wtconv_serving.traffic.check import direct_throughput, expected_outputs, input_pool, run_load
    from wtconv_serving.traffic.sweep import LoadWorkers, direct_rate, model_stats
    from wtconv_serving.tuning import Tuning

    _, input_dims, _ = onnx_batching(repo.description, repo.max_batch_size or None)
    model = load_runtime(
        repo.runtime,
        onnx_path=repo.onnx,
        engine_path=repo.engine,
        plugin=repo.plugin,
        threads=repo.threads,
        ort_device=repo.ort_device or "cpu",
        ort_library=repo.ort_library,
    )
    batching = repo.max_batch_size > 0
    runner = make_runner(model, tuning=repo.tuning, input_dims=input_dims if batching else None)
    # The reference the answers are checked against: the same model run eagerly, batch by batch, without the buckets,
    # graphs and buffers of the served runner (on the CPU, where there are none, the runner itself).
    reference = runner
    if runner.buckets:
        reference = make_runner(model, tuning=Tuning(cuda_graphs=False), input_dims=None)
    mixes = [list(batch_sizes), *[list(m) for m in mixes if list(m) != list(batch_sizes)]]
    pool = input_pool(
        repo.description["metadata"],
        input_dims,
        runner.input_dtype,
        size=max(256, max(max(m) for m in mixes) * 2, -(-(requests or 0) // len(set(batch_sizes))) + 1),
    )
    expected = expected_outputs(reference, pool)
    tolerance = 1e-2 if runner.input_dtype == np.float16 else 1e-5
    report = {
        "machine": platform.platform(),
        "gpu": _gpu_name(),
        "runtime": runner.name,
        "execution": runner.description,
        "model": str(repo.onnx),
        "input_dtype": str(runner.input_dtype),
        "tuning": {**repo.tuning.parameters(), "instances": repo.instances},
        "shared_memory": shared_memory,
        "connections": connections,  # the sweep's
        "mps": mps_of(server.environment),  # the server's processes MPS clients (docs/serving.md)
        "check": [],
        "direct": [],
        "sweep": [],
        "recoveries": [],
        "soak": None,
    }
    reports, passed = [], True
    check_recoveries = []  # the server's Recovery of the check's kill
    protocols = ["grpc", "http"] if protocol == "both" else [protocol]
    for each in protocols if requests else []:
        killing = kill_backend and not soak_s and each == protocols[0]
        killer = _Killer(server, repo.name, requests // 4) if killing else None
        load = run_load(
            server.grpc_url if each == "grpc" else server.http_url,
            repo.name,
            pool,
            expected,
            protocol=each,
            requests=requests,
            concurrency=concurrency,
            batch_sizes=batch_sizes,
            input_name=repo.description["input"]["name"],
            output_name=repo.description["output"]["name"],
            atol=tolerance,
            rtol=tolerance,
            # Retried for as long as the watch may take to bring the model back (a restart of the server included).
            retries=int(server.recovery_wait_s / CHECK_RETRY_WAIT_S) if killer else 0,
            retry_wait_s=CHECK_RETRY_WAIT_S,
            on_progress=killer,
            shared_memory=shared_memory,
        )
        if killer is not None:
            killer.wait_recovered()
            check_recoveries = list(server.recoveries)
            passed &= killer.killed and bool(check_recoveries) and all(r.error is None for r in check_recoveries)
        reports.append(load)
        report["check"].append({**load.summary(), "backend_killed": bool(killer and killer.killed)})
        passed &= load.failed == 0 and load.lost == 0 and load.mismatched == 0
    sizes = runner.buckets or sorted({b for m in mixes for b in m})
    direct_ms = {}
    for size in sizes if requests or sweep else []:
        entry = direct_throughput(runner, pool, size, seconds=0.5 if runner.buckets else 1.0)
        direct_ms[size] = entry["latency_ms"]["mean"]
        report["direct"].append(entry)
    if sweep:
        output_bytes = int(np.prod(expected.shape[1:])) * expected.dtype.itemsize
        count = processes or default_processes()

        def stats():
            return model_stats(server.http_url, repo.name)

        with LoadWorkers(
            server.grpc_url,
            repo.name,
            pool,
            repo.description["input"]["name"],
            output_bytes,
            count,
            shared_memory=shared_memory,
            largest=max(max(m) for m in mixes),
            connections=connections,
        ) as workers:
            points = [(mix, c) for mix in mixes for c in sweep]
            if extra_process:
                points.append((mixes[0], max(sweep), "extra"))
            for entry in points:
                if len(entry) == 3:
                    workers.add()
                mix, inflight = entry[0], entry[1]
                point = workers.point(inflight, mix, window_s, stats=stats)
                point.direct_images_per_s = direct_rate(point.executed, direct_ms, runner.buckets)
                summary = point.summary()
                report["sweep"].append(summary)
                passed &= point.failed == 0
                log.info(
                    "load: %d in flight x %d processes, sizes %s: %.1f images/s, p50 %s ms, p99 %s ms, %s x direct",
                    inflight,
                    point.processes,
                    mix,
                    point.images_per_s,
                    summary["latency_ms"]["p50"],
                    summary["latency_ms"]["p99"],
                    summary["served_over_direct"],
                )
    if check_recoveries:  # now, after the direct runs and the sweep: Triton has had time to unload the old version
        server.follow_unloads()
        report["recoveries"] = [r.as_dict() for r in check_recoveries]
    soak = None
    if soak_s:
        soak = _soak(
            repo,
            server,
            runner,
            pool,
            expected,
            duration_s=soak_s,
            concurrency=concurrency,
            batch_sizes=batch_sizes,
            protocol="http" if protocol == "http" else "grpc",
            shared_memory=shared_memory,
            kill=kill_backend,
            sample_every_s=sample_every_s,
        )
        report["soak"] = soak.summary()
        passed &= soak.passed
    return LoadTestResult(reports, report, passed, soak)


def _soak(repo, server, runner, pool, expected, **options):
    """The soak (wtconv_serving.traffic.soak.run_soak with ``options``), checked against the ONNX file run directly
    in ONNX Runtime: ``expected`` when ONNX Runtime serves the model, else computed here (on the GPU where this ONNX
    Runtime has one), with the tolerance of ONNX Runtime against another runtime (the validation's)."""
    from wtconv_serving.runners.runtimes import load_runtime, make_runner
    from wtconv_serving.traffic.check import expected_outputs
    from wtconv_serving.traffic.soak import run_soak

    fp16 = runner.input_dtype == np.float16
    tolerance = 1e-2 if fp16 else 1e-5
    if runner.name != "onnxruntime":
        onnx_file = load_runtime(
            "onnxruntime", onnx_path=repo.onnx, ort_device="auto", ort_library=repo.ort_library, threads=repo.threads
        )
        expected = expected_outputs(make_runner(onnx_file), pool)
        tolerance = 2e-2 if fp16 else 1e-4
    return run_soak(
        server,
        repo.name,
        pool,
        expected,
        input_name=repo.description["input"]["name"],
        output_name=repo.description["output"]["name"],
        atol=tolerance,
        rtol=tolerance,
        **options,
    )


class _Killer:
    """on_progress of the check: after ``after`` answers, SIGKILL the backend stubs of ``model`` once."""

    def __init__(self, server, model: str, after: int):
        self.server, self.model, self.after = server, model, max(1, after)
        self.answered = 0
        self.killed = False
        self.lock = threading.Lock()

    def __call__(self, _index) -> None:
        with self.lock:
            self.answered += 1
            if self.killed or self.answered < self.after:
                return
            self.killed = True
        from wtconv_serving.traffic.soak import kill_backend

        kill_backend(self.server, self.model)

    def wait_recovered(self, timeout: float | None = None) -> None:
        """Wait until the watch has brought the model back, by a restart of the server or a reload (the check's
        clients may have finished first); ``timeout`` default: the server's recovery_wait_s."""
        timeout = self.server.recovery_wait_s if timeout is None else timeout
        deadline = time.monotonic() + timeout
        while self.killed and not self.server.recoveries and time.monotonic() < deadline:
            time.sleep(0.2)


def _gpu_name() -> str | None:
    try:
        import torch

        return torch.cuda.get_device_name() if torch.cuda.is_available() else None
    except ImportError:
        return None
