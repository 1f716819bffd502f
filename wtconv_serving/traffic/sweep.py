"""A timed load that is not the limit: several client processes, asynchronous gRPC, a sweep of requests in flight.

The answer check is a separate, untimed pass (wtconv_serving.traffic.check.run_load). Here each worker process keeps
its share of the requests in flight on one asyncio gRPC channel and sends requests serialized once in advance (Triton's
ModelInfer protobuf, raw tensor bytes; with shared memory only the region, offset and size of rows laid out once in a
region the parent registered), so a request costs the client little more than gRPC's own work; a response counts
when it carries the expected number of output bytes. Completions are counted by when they arrive, inside a measured
window that starts after a warm-up (the requests keep coming until it ends); Triton's statistics API
(``/v2/models/<m>/stats``) is read at both ends of the window, for the server's own count of the images it executed,
the batch sizes it executed and the time requests spent queued and computing. ``direct_rate`` turns the same runner's
direct time per batch into the rate it would reach on those very batches.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from wtconv_core.options import CLIENT_CONNECTIONS
from wtconv_core.stats import percentile

__all__ = ["LoadWorkers", "SweepPoint", "direct_rate", "images_executed", "model_stats", "stats_delta"]

WIRE_TYPES = {np.dtype(np.float32): "FP32", np.dtype(np.float16): "FP16"}
VARIANTS = 4  # distinct serialized requests per batch size


@dataclass
class SweepPoint:
    """One point of the sweep: what was asked, what came back in the window, what the server executed."""

    concurrency: int
    processes: int
    batch_sizes: list
    window_s: float
    connections: str = "process"  # CLIENT_CONNECTIONS
    completed: int = 0
    failed: int = 0
    images: int = 0
    latencies_ms: list = field(default_factory=list, repr=False)
    errors: list = field(default_factory=list)
    executed: dict = field(default_factory=dict)  # batch size -> executions in the window (Triton's statistics)
    queue_ms: float | None = None  # mean time a request waited in Triton's queue
    compute_ms: dict = field(default_factory=dict)  # mean ms of one execution by part (stats_delta's COMPUTE_PARTS)
    direct_images_per_s: float | None = None  # the same runner, directly, on the executed batches
    stats_window_s: float | None = None  # between the two readings of Triton's statistics (each timed at its middle)

    @property
    def images_per_s(self) -> float:
        return self.images / self.window_s if self.window_s else 0.0

    @property
    def executed_images_per_s(self) -> float | None:
        """The server's own count over the window: the images of the batches Triton executed in it (its statistics),
        per second of the time between the two readings (the window, where they were not timed); None without them.
        It agrees with images_per_s, the answers that arrived in the window."""
        seconds = self.stats_window_s or self.window_s
        if not self.executed or not seconds:
            return None
        return images_executed(self.executed) / seconds

    def summary(self) -> dict:
        lat = sorted(self.latencies_ms)
        p50, p90, p99 = (percentile(lat, p) if lat else None for p in (50, 90, 99))
        return {
            "concurrency": self.concurrency,
            "processes": self.processes,
            "connections": self.connections,
            "batch_sizes": self.batch_sizes,
            "window_s": round(self.window_s, 3),
            "stats_window_s": None if self.stats_window_s is None else round(self.stats_window_s, 3),
            "completed": self.completed,
            "failed": self.failed,
            "images": self.images,
            "images_per_s": round(self.images_per_s, 1),
            "executed_images_per_s": (
                None if self.executed_images_per_s is None else round(self.executed_images_per_s, 1)
            ),
            "requests_per_s": round(self.completed / self.window_s, 1) if self.window_s else None,
            "latency_ms": {
                "p50": None if p50 is None else round(p50, 3),
                "p90": None if p90 is None else round(p90, 3),
                "p99": None if p99 is None else round(p99, 3),
                "p99_over_p50": round(p99 / p50, 2) if p50 else None,
            },
            "executed_batches": {str(k): v for k, v in sorted(self.executed.items())},
            "mean_executed_batch": round(_mean_batch(self.executed), 2) if self.executed else None,
            "queue_ms": None if self.queue_ms is None else round(self.queue_ms, 3),
            "compute_ms_per_execution": round(sum(self.compute_ms.values()), 3) if self.compute_ms else None,
            "compute_ms_by_part": {part: round(ms, 3) for part, ms in self.compute_ms.items()},
            "direct_images_per_s_at_executed": (
                None if self.direct_images_per_s is None else round(self.direct_images_per_s, 1)
            ),
            "served_over_direct": (
                round(self.images_per_s / self.direct_images_per_s, 3) if self.direct_images_per_s else None
            ),
            "first_errors": self.errors[:3],
        }


def images_executed(executed: dict) -> int:
    """The images of the batches ``executed`` ({batch size: executions}, the sizes as numbers or, read back from a
    report's JSON, as strings)."""
    return sum(int(size) * count for size, count in executed.items())


def _mean_batch(executed: dict) -> float:
    executions = sum(executed.values())
    return images_executed(executed) / executions if executions else 0.0


def direct_rate(executed: dict, direct_ms: dict, buckets=()) -> float | None:
    """Images per second the runner reaches called directly on the batches Triton executed: ``executed`` {batch size:
    count}, ``direct_ms`` {batch size: ms per call}. With ``buckets`` a batch costs its bucket's time (measured at
    every bucket); without, the time at its own size, interpolated linearly between the sizes measured (and
    proportionally beyond the largest). None when nothing was executed or measured."""
    from wtconv_serving.tuning import bucket_for

    if not executed or not direct_ms:
        return None
    sizes = sorted(direct_ms)
    images = seconds = 0.0
    for size, count in executed.items():
        size = int(size)
        if buckets:
            ms = direct_ms[bucket_for(size, buckets)]
        elif size > sizes[-1]:
            ms = direct_ms[sizes[-1]] * size / sizes[-1]
        else:
            ms = float(np.interp(size, sizes, [direct_ms[s] for s in sizes]))
        images += size * count
        seconds += count * ms / 1e3
    return images / seconds if seconds else None


def model_stats(http_url: str, model: str) -> dict:
    """Triton's statistics of ``model`` (its first version), as JSON."""
    with urllib.request.urlopen(f"http://{http_url}/v2/models/{model}/stats", timeout=10) as response:
        stats = json.loads(response.read())
    return stats["model_stats"][0]


COMPUTE_PARTS = ("input", "infer", "output")


def stats_delta(before: dict, after: dict) -> tuple[dict, float | None, dict]:
    """({batch size: executions}, mean queue ms per request, {part: mean ms per execution}) between two readings.

    Triton's per-model ``inference_stats`` count every request of a batch with the batch's whole compute time, so
    the compute time of one execution comes from ``batch_stats``, which count executions (docs/serving.md, "Reading
    Triton's statistics"). The parts: ``input`` (the request's tensors handed to the backend), ``infer`` (the
    backend's execute: for our Python models the runner, copies included), ``output``."""

    def per_batch(stats, part, key):
        return {int(b["batch_size"]): int(b[f"compute_{part}"][key]) for b in stats.get("batch_stats", [])}

    def delta(part, key):
        after_values, before_values = per_batch(after, part, key), per_batch(before, part, key)
        return {b: v - before_values.get(b, 0) for b, v in after_values.items()}

    executed = {b: n for b, n in delta("infer", "count").items() if n > 0}
    executions = sum(executed.values())
    compute_ms = {}
    if executions:
        compute_ms = {part: sum(delta(part, "ns").values()) / executions / 1e6 for part in COMPUTE_PARTS}

    def total(stats, what, key):
        return int(stats.get("inference_stats", {}).get(what, {}).get(key, 0))

    requests = total(after, "success", "count") - total(before, "success", "count")
    queue_ns = total(after, "queue", "ns") - total(before, "queue", "ns")
    queue_ms = queue_ns / requests / 1e6 if requests > 0 else None
    return executed, queue_ms, compute_ms


def _requests(pool_file: str, model: str, input_name: str, batch_sizes, variants: int, pool_region=None) -> dict:
    """{batch size: [serialized ModelInferRequest]} from the pool's rows (distinct rows per variant): the rows in the
    request, or with ``pool_region`` ((name, row bytes, rows) of a shared_memory.PoolRegion of the same pool) the
    region, offset and size of the same rows there."""
    from tritonclient.grpc import service_pb2

    from wtconv_serving.traffic.check import rows

    pool = np.load(pool_file, mmap_mode="r")
    datatype = WIRE_TYPES[np.dtype(pool.dtype)]
    out = {}
    for size in sorted(set(batch_sizes)):
        out[size] = []
        for variant in range(variants):
            start = (variant * 7919) % len(pool)
            request = service_pb2.ModelInferRequest(model_name=model)
            tensor = request.inputs.add()
            tensor.name, tensor.datatype = input_name, datatype
            tensor.shape.extend([size, *pool.shape[1:]])
            if pool_region is None:
                request.raw_input_contents.append(np.ascontiguousarray(rows(pool, start, size)).tobytes())
            else:  # as tritonclient's InferInput.set_shared_memory writes them
                name, row_bytes, count = pool_region
                tensor.parameters["shared_memory_region"].string_param = name
                tensor.parameters["shared_memory_byte_size"].int64_param = size * row_bytes
                tensor.parameters["shared_memory_offset"].int64_param = (start % count) * row_bytes
            out[size].append(request.SerializeToString())
    return out


def _worker(
    connection,
    url: str,
    pool_file: str,
    model: str,
    input_name: str,
    output_bytes: int,
    pool_region=None,
    connections: str = "process",
) -> None:
    """A client process: waits for (concurrency, batch sizes, start, warm-up s, window s) and answers with its
    counts, until it receives None. ``connections``: one gRPC connection for all its requests in flight ("process")
    or one for each ("client"; CLIENT_CONNECTIONS)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle; it stops the workers
    import asyncio

    import grpc
    from tritonclient.grpc import service_pb2

    from wtconv_serving.traffic.check import OWN_CONNECTION

    cache: dict = {}

    async def run(concurrency, batch_sizes, start, warmup_s, window_s):
        for size in set(batch_sizes) - set(cache):
            cache.update(_requests(pool_file, model, input_name, [size], VARIANTS, pool_region))
        options = [("grpc.max_send_message_length", -1), ("grpc.max_receive_message_length", -1)]
        result = {"completed": 0, "failed": 0, "images": 0, "latencies": [], "errors": []}
        begin, end = start + warmup_s, start + warmup_s + window_s
        if connections == "client":
            channels = [grpc.aio.insecure_channel(url, options=[*options, OWN_CONNECTION]) for _ in range(concurrency)]
        else:
            channels = [grpc.aio.insecure_channel(url, options=options)]
        try:
            infers = [
                channel.unary_unary(
                    "/inference.GRPCInferenceService/ModelInfer",
                    request_serializer=None,
                    response_deserializer=service_pb2.ModelInferResponse.FromString,
                )
                for channel in channels
            ]

            async def client(index):
                infer = infers[index % len(infers)]
                sent = index
                while True:
                    size = batch_sizes[sent % len(batch_sizes)]
                    payload = cache[size][(sent // len(batch_sizes)) % VARIANTS]
                    sent += concurrency
                    t0 = time.time()
                    if t0 >= end:
                        return
                    try:
                        response = await infer(payload, timeout=60)
                        ok = len(response.raw_output_contents[0]) == size * output_bytes
                        error = None if ok else "response of the wrong size"
                    except grpc.aio.AioRpcError as failure:
                        error = f"{failure.code().name}: {failure.details()}"
                    t1 = time.time()
                    # an answer counts when it arrives inside the window, whenever it was sent: the rate in steady
                    # state (also asking that it be sent inside would leave out one latency's worth of answers,
                    # docs/serving.md, "Reading the load test")
                    if begin <= t1 <= end:
                        if error is None:
                            result["completed"] += 1
                            result["images"] += size
                            result["latencies"].append((t1 - t0) * 1e3)
                        else:
                            result["failed"] += 1
                            if len(result["errors"]) < 3:
                                result["errors"].append(error)

            await asyncio.sleep(max(0.0, start - time.time()))
            await asyncio.gather(*(client(i) for i in range(concurrency)))
        finally:
            await asyncio.gather(*(channel.close() for channel in channels))
        return result

    while True:
        task = connection.recv()
        if task is None:
            return
        connection.send(asyncio.run(run(*task)))


def _timed(read) -> tuple:
    """(read(), the time.time() halfway through the call): a reading of the statistics may take a while on a busy
    machine, and the server counted on meanwhile."""
    began = time.time()
    value = read()
    return value, (began + time.time()) / 2


class LoadWorkers:
    """``processes`` client processes for ``model`` at the gRPC ``url`` (started once, reused by every point of the
    sweep; ``add`` starts one more). ``pool``: the inputs requests are cut from; ``output_bytes``: one image's output
    size. ``shared_memory`` "system" or "cuda": the requests name rows of the pool laid out once in a region this
    process registers (shared_memory.PoolRegion, requests of up to ``largest`` images) instead of carrying them; the
    answers come back in the response (a few KB an image). ``connections`` (CLIENT_CONNECTIONS): a process's requests in
    flight on one gRPC connection ("process") or on one each ("client"). A context manager: leaving it stops the
    processes and removes the pool's temporary copy and its region."""

    def __init__(
        self,
        url: str,
        model: str,
        pool: np.ndarray,
        input_name: str,
        output_bytes: int,
        processes: int,
        *,
        shared_memory: str = "none",
        largest: int = 64,
        connections: str = "process",
    ):
        if connections not in CLIENT_CONNECTIONS:
            raise ValueError(f"connections: expected one of {', '.join(CLIENT_CONNECTIONS)}, got {connections!r}")
        self.connections = connections
        self.folder = tempfile.mkdtemp(prefix="wtconv-load-")
        self.memory = self.admin = None
        self.workers: list = []
        try:
            region = None
            if shared_memory != "none":
                import tritonclient.grpc as grpcclient

                from wtconv_serving.traffic.shared_memory import ClientMemory, PoolRegion

                self.admin = grpcclient.InferenceServerClient(url=url)
                self.memory = ClientMemory(shared_memory, self.admin, url=url)
                laid_out = PoolRegion(self.memory, pool, largest)
                region = (laid_out.name, laid_out.row_bytes, laid_out.rows)
            pool_file = os.path.join(self.folder, "pool.npy")
            self.args = (url, pool_file, model, input_name, int(output_bytes), region, connections)
            np.save(pool_file, np.ascontiguousarray(pool))
            self.context = multiprocessing.get_context("spawn")  # no fork of a process holding CUDA and gRPC state
            for _ in range(processes):
                self.add()
        except BaseException:
            self.close()
            raise

    def add(self) -> None:
        parent, child = self.context.Pipe()
        process = self.context.Process(target=_worker, args=(child, *self.args), daemon=True)
        process.start()
        child.close()
        self.workers.append((process, parent))

    def point(self, concurrency: int, batch_sizes, window_s: float, warmup_s: float = 1.0, stats=None) -> SweepPoint:
        """Run one point: ``concurrency`` requests in flight, shared by the processes, request sizes cycling through
        ``batch_sizes``; ``stats``: a function returning Triton's statistics, read at the window's two ends."""
        count = len(self.workers)
        shares = [concurrency // count + (1 if i < concurrency % count else 0) for i in range(count)]
        start = time.time() + 1.0  # time for every worker to get the task and prepare its requests
        for (_, connection), share in zip(self.workers, shares, strict=True):
            connection.send((max(share, 0), list(batch_sizes), start, warmup_s, window_s))
        point = SweepPoint(concurrency, count, list(batch_sizes), window_s, self.connections)
        before = after = None
        if stats is not None:
            time.sleep(max(0.0, start + warmup_s - time.time()))
            before, read_before = _timed(stats)
            time.sleep(max(0.0, start + warmup_s + window_s - time.time()))
            after, read_after = _timed(stats)
            point.stats_window_s = read_after - read_before
        for process, connection in self.workers:
            if not connection.poll(window_s + warmup_s + 120):
                raise RuntimeError(f"load worker {process.pid} did not answer")
            result = connection.recv()
            point.completed += result["completed"]
            point.failed += result["failed"]
            point.images += result["images"]
            point.latencies_ms += result["latencies"]
            point.errors += result["errors"]
        if before is not None:
            point.executed, point.queue_ms, point.compute_ms = stats_delta(before, after)
        return point

    def close(self) -> None:
        for _, connection in self.workers:
            try:
                connection.send(None)
            except (OSError, ValueError):
                pass
        for process, _ in self.workers:
            process.join(5)
            if process.is_alive():
                process.kill()
                process.join()
        self.workers = []
        if self.memory is not None:
            self.memory.close()
            self.admin.close()
            self.memory = None
        for name in ("pool.npy",):
            Path(self.folder, name).unlink(missing_ok=True)
        try:
            os.rmdir(self.folder)
        except OSError:
            pass

    def __enter__(self) -> LoadWorkers:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
