"""A bounded load test against a served model: every response matched to its request.

Request ``i`` carries ``batch_sizes[i % len]`` consecutive images of a pool of distinct inputs, starting at a
position unique to ``i`` (request_plan), so no two requests carry the same input and the expected output of each
one is known: the rows of ``expected`` (the same runtime run directly on the pool). A response counts as matched
when its rows equal those rows within the tolerance and give the same top-1 class; a request is failed when the
server answers with an error (after ``retries``), lost when it never got an answer before the time limit.
Latency is measured per request on the client, from send to complete answer.
"""

from __future__ import annotations

import itertools
import threading
import time
from dataclasses import dataclass, field

import numpy as np

from wtconv_core.interrupt import deferred_interrupt
from wtconv_core.stats import percentile
from wtconv_serving.traffic.shared_memory import NOT_REGISTERED

WIRE_TYPES = {np.dtype(np.float32): "FP32", np.dtype(np.float16): "FP16"}


def request_plan(count: int, pool_size: int, batch_sizes) -> list:
    """[(start, batch)] for ``count`` requests, no two alike (so no two requests carry the same input)."""
    batch_sizes = [int(b) for b in batch_sizes]
    if count > pool_size * len(set(batch_sizes)):
        raise ValueError(
            f"{count} distinct requests need a pool of at least {count // len(set(batch_sizes)) + 1} "
            f"inputs, got {pool_size}"
        )
    stride = next(s for s in range(pool_size // 2 + 1, pool_size * 2) if np.gcd(s, pool_size) == 1)
    plan, seen = [], set()
    for i in range(count):
        b = batch_sizes[i % len(batch_sizes)]
        start = (i // len(batch_sizes) * stride) % pool_size
        while (start, b) in seen:
            start = (start + 1) % pool_size
        seen.add((start, b))
        plan.append((start, b))
    return plan


def matches(got: np.ndarray, want: np.ndarray, atol: float, rtol: float) -> bool:
    """Within tolerance elementwise, and the same top-1 class wherever the expected top-1 is ahead of the
    runner-up by more than the tolerance (a near-tie may flip within rounding)."""
    got64, want64 = got.astype(np.float64), want.astype(np.float64)
    if not np.allclose(got64, want64, atol=atol, rtol=rtol):
        return False
    top2 = np.sort(want64, axis=-1)[..., -2:]
    clear = (top2[..., 1] - top2[..., 0]) > 2 * (atol + rtol * np.abs(top2[..., 1]))
    return bool((got64.argmax(-1) == want64.argmax(-1))[clear].all())


def rows(pool: np.ndarray, start: int, batch: int) -> np.ndarray:
    index = (start + np.arange(batch)) % len(pool)
    return pool[index]


@dataclass
class LoadReport:
    protocol: str
    requests: int
    concurrency: int
    batch_sizes: list
    completed: int = 0
    failed: int = 0
    lost: int = 0
    mismatched: int = 0
    bit_identical: int = 0
    retried: int = 0
    images: int = 0
    wall_s: float = 0.0
    latencies_ms: list = field(default_factory=list)
    errors: list = field(default_factory=list)
    error_times: list = field(default_factory=list)  # seconds from the clock origin (run_load), one per entry of errors
    # when the request of each entry of errors was first sent, on the same clock: a retry keeps its request's first
    error_first_sent: list = field(default_factory=list)

    def summary(self) -> dict:
        lat = sorted(self.latencies_ms)
        return {
            "protocol": self.protocol,
            "requests": self.requests,
            "concurrency": self.concurrency,
            "batch_sizes": self.batch_sizes,
            "completed": self.completed,
            "failed": self.failed,
            "lost": self.lost,
            "mismatched": self.mismatched,
            "bit_identical": self.bit_identical,
            "retried": self.retried,
            "images": self.images,
            "wall_s": round(self.wall_s, 3),
            "latency_ms": {
                "p50": round(percentile(lat, 50), 3),
                "p90": round(percentile(lat, 90), 3),
                "p99": round(percentile(lat, 99), 3),
                "max": round(lat[-1], 3) if lat else None,
            },
            "throughput_requests_per_s": round(self.completed / self.wall_s, 1) if self.wall_s else None,
            "throughput_images_per_s": round(self.images / self.wall_s, 1) if self.wall_s else None,
            "first_errors": self.errors[:5],
        }

    def line(self) -> str:
        s = self.summary()
        return (
            f"{s['protocol']:>4}: {s['requests']} requests x batch {'/'.join(map(str, self.batch_sizes))} from "
            f"{self.concurrency} clients in {s['wall_s']:.1f} s: {s['completed']} ok, {s['failed']} failed, "
            f"{s['lost']} lost, {s['mismatched']} mismatched ({s['bit_identical']} bit-identical); latency p50 "
            f"{s['latency_ms']['p50']:.2f} ms, p99 {s['latency_ms']['p99']:.2f} ms; "
            f"{s['throughput_requests_per_s']} req/s, {s['throughput_images_per_s']} images/s"
        )


# The longest a gRPC client waits between attempts to reconnect to a server that went away (gRPC's own backoff grows to
# 120 s): a server the watch restarts is back once ready (docs/serving.md, "The soak"), and its clients reconnect
# within a second of that rather than after a backoff grown while it loaded.
RECONNECT_BACKOFF_MS = 1000
# Not every gRPC release keeps to that cap: in the 10-minute GPU soak a few clients were still refused 9-13 s after
# the restarted server had started listening (docs/serving.md, "The soak"). So a load client that meets UNAVAILABLE
# also replaces its client, at most once per this many seconds, with one on a connection of its own (a local
# subchannel pool: gRPC otherwise shares one connection, and its backoff, among a process's channels to one address),
# whose first attempt to connect is immediate.
FRESH_CLIENT_EVERY_S = 1.0
# A gRPC channel option: the channel's connection its own (a local subchannel pool), not shared with the process's
# other channels of equal arguments to the same address, as gRPC does by default.
OWN_CONNECTION = ("grpc.use_local_subchannel_pool", 1)
# tritonclient's status of a gRPC call that found no server listening (or a full queue)
UNAVAILABLE = "StatusCode.UNAVAILABLE"


def _client(protocol: str, url: str, timeout_s: float, own_connection: bool = False):
    """A tritonclient module and client for ``url``; ``own_connection`` (gRPC): on a connection no other client of
    this process shares, so that it connects at once (FRESH_CLIENT_EVERY_S)."""
    if protocol == "grpc":
        import tritonclient.grpc as module

        keepalive = module.KeepAliveOptions()
        channel_args = [  # tritonclient's defaults, which channel_args replace, and the reconnect backoff
            ("grpc.max_send_message_length", module.MAX_GRPC_MESSAGE_SIZE),
            ("grpc.max_receive_message_length", module.MAX_GRPC_MESSAGE_SIZE),
            ("grpc.keepalive_time_ms", keepalive.keepalive_time_ms),
            ("grpc.keepalive_timeout_ms", keepalive.keepalive_timeout_ms),
            ("grpc.keepalive_permit_without_calls", keepalive.keepalive_permit_without_calls),
            ("grpc.http2.max_pings_without_data", keepalive.http2_max_pings_without_data),
            ("grpc.max_reconnect_backoff_ms", RECONNECT_BACKOFF_MS),
            *([OWN_CONNECTION] if own_connection else []),
        ]
        return module, module.InferenceServerClient(url=url, channel_args=channel_args)
    import tritonclient.http as module

    return module, module.InferenceServerClient(url=url, connection_timeout=timeout_s, network_timeout=timeout_s)


def run_load(
    url: str,
    model: str,
    pool: np.ndarray,
    expected: np.ndarray,
    *,
    protocol: str = "grpc",
    requests: int = 2000,
    concurrency: int = 16,
    batch_sizes=(1, 2, 4, 8),
    input_name: str = "input",
    output_name: str = "output",
    atol: float = 1e-5,
    rtol: float = 1e-5,
    time_limit_s: float = 300.0,
    request_timeout_s: float = 60.0,
    retries: int = 0,
    retry_wait_s: float = 0.5,
    on_progress=None,
    shared_memory: str = "none",
    duration_s: float | None = None,
    clock_origin: float | None = None,
    own_connections: bool = False,
) -> LoadReport:
    """Send ``requests`` requests from ``concurrency`` threads (one client each); see the module docstring. With
    ``duration_s``, send for that long instead, the distinct requests of one pass over the pool repeated (the soak);
    ``requests`` is then what was sent. ``shared_memory`` "system" or "cuda": the inputs are read by the server from
    one region holding the pool (shared_memory.PoolRegion) and each client's outputs written into a region of its
    own; the regions are removed on every exit. ``clock_origin`` (a time.monotonic() value, default the load's start)
    is what the report's error times count from, so that a caller watching the load (the soak's kill) reads them on
    its own clock. ``own_connections`` (gRPC): each client on a connection of its own from the start, as independent
    clients are, instead of this process's clients sharing one (the soak: its server then meets the same connections
    before the kill and after the restart; docs/serving.md, "The soak")."""
    from tritonclient.utils import InferenceServerException

    if duration_s is not None:
        requests = len(pool)  # one pass of distinct requests, cycled until the time is up
    plan = request_plan(requests, len(pool), batch_sizes)
    datatype = WIRE_TYPES[np.dtype(pool.dtype)]
    report = LoadReport(protocol, requests, concurrency, [int(b) for b in batch_sizes])
    indices = itertools.count() if duration_s is not None else iter(range(requests))
    lock = threading.Lock()
    answered: set = set()
    sent = [0]
    stop = threading.Event()
    t0 = time.monotonic()
    origin = t0 if clock_origin is None else clock_origin
    deadline = t0 + (time_limit_s if duration_s is None else duration_s)
    memory = _Memory(shared_memory, protocol, url, pool, expected, max(batch_sizes), concurrency, request_timeout_s)

    def worker(slot):
        module, client = _client(protocol, url, request_timeout_s, own_connection=own_connections)
        replaced_at = time.monotonic()
        try:
            while time.monotonic() < deadline and not stop.is_set():
                with lock:
                    i = next(indices, None)
                    if i is None:
                        return
                    sent[0] += 1
                start, batch = plan[i % len(plan)]
                want = rows(expected, start, batch)
                error = None
                first_sent = time.monotonic() - origin
                for attempt in range(retries + 1):
                    t_send = time.perf_counter()
                    try:
                        memory.renew(error)
                        got = memory.infer(module, client, slot, model, input_name, output_name, datatype, start, batch)
                        error = None
                    except InferenceServerException as failure:
                        error = str(failure)
                        if failure.status() == UNAVAILABLE and time.monotonic() - replaced_at >= FRESH_CLIENT_EVERY_S:
                            client.close()
                            module, client = _client(protocol, url, request_timeout_s, own_connection=True)
                            replaced_at = time.monotonic()
                    elapsed = (time.perf_counter() - t_send) * 1e3
                    if error is None:
                        break
                    with lock:
                        report.errors.append(f"request {i}: {error}")
                        report.error_times.append(time.monotonic() - origin)
                        report.error_first_sent.append(first_sent)
                        if attempt < retries:
                            report.retried += 1
                    if stop.is_set():
                        break
                    if attempt < retries:
                        time.sleep(retry_wait_s)
                with lock:
                    answered.add(i)
                    if error is not None:
                        report.failed += 1
                        continue
                    report.completed += 1
                    report.images += batch
                    report.latencies_ms.append(elapsed)
                    same = got is not None and got.shape == want.shape
                    if same and np.array_equal(got, want):
                        report.bit_identical += 1
                    elif not (same and matches(got, want, atol, rtol)):
                        report.mismatched += 1
                        report.errors.append(f"request {i}: response does not match its input's expected output")
                        report.error_times.append(time.monotonic() - origin)
                        report.error_first_sent.append(first_sent)
                if on_progress is not None:
                    on_progress(i)
        except Exception:
            if not stop.is_set():  # after a stop (Ctrl-C, an error) the regions may be gone under a request
                raise
        finally:
            client.close()

    threads = [threading.Thread(target=worker, args=(k,), name=f"load-{k}", daemon=True) for k in range(concurrency)]
    t_start = time.perf_counter()
    try:
        memory.open()
        for t in threads:
            t.start()
        for t in threads:
            t.join(max(0.0, deadline - time.monotonic()) + request_timeout_s + 5)
    finally:
        stop.set()  # an interrupted or failed load stops its clients before their regions go
        settled = time.monotonic() + 5.0  # time for the requests in flight to be answered
        for t in threads:
            if t.ident is not None:
                t.join(max(0.0, settled - time.monotonic()))
        memory.close()
    report.wall_s = time.perf_counter() - t_start
    if duration_s is not None:
        report.requests = sent[0]
    report.lost = report.requests - len(answered)
    return report


class _Memory:
    """How run_load's requests carry their tensors: in the request (``mode`` "none"), or through shared memory (the
    pool in one region, each client slot's outputs in a region of its own)."""

    def __init__(self, mode, protocol, url, pool, expected, largest, slots, timeout_s):
        self.mode, self.protocol, self.url, self.pool, self.expected = mode, protocol, url, pool, expected
        self.largest, self.slots, self.timeout_s = int(largest), int(slots), timeout_s
        self.memory = self.admin = self.inputs = None
        self.outputs: list = []
        self.output_row_bytes = int(np.prod(expected.shape[1:])) * expected.dtype.itemsize

    def open(self) -> None:
        if self.mode == "none":
            return
        from wtconv_serving.traffic.shared_memory import ClientMemory, PoolRegion

        _, self.admin = _client(self.protocol, self.url, self.timeout_s)
        self.memory = ClientMemory(self.mode, self.admin, url=self.url)
        self.inputs = PoolRegion(self.memory, self.pool, self.largest)
        self.outputs = [self.memory.region(self.largest * self.output_row_bytes, "outputs") for _ in range(self.slots)]

    def renew(self, error: str | None) -> None:
        """Before a request is sent again after ``error``: when the server no longer knew a region (a restarted server
        forgets them: docs/serving.md, "The soak"), register again those it does not have."""
        if self.memory is not None and error is not None and NOT_REGISTERED in error:
            self.memory.register_again()

    def infer(self, module, client, slot, model, input_name, output_name, datatype, start, batch):
        """The answer to request (start, batch), sent through ``client`` of ``module`` from client slot ``slot``."""
        shape = [batch, *self.pool.shape[1:]]
        tensor = module.InferInput(input_name, shape, datatype)
        kwargs = {"client_timeout": self.timeout_s} if self.protocol == "grpc" else {}
        if self.memory is None:
            tensor.set_data_from_numpy(np.ascontiguousarray(rows(self.pool, start, batch)))
            return client.infer(model, [tensor], **kwargs).as_numpy(output_name)
        tensor.set_shared_memory(self.inputs.name, self.inputs.nbytes(batch), self.inputs.offset(start))
        output = self.outputs[slot]
        requested = module.InferRequestedOutput(output_name)
        requested.set_shared_memory(output.name, batch * self.output_row_bytes)
        result = client.infer(model, [tensor], outputs=[requested], **kwargs)
        described = result.get_output(output_name)
        dims = described["shape"] if isinstance(described, dict) else described.shape
        return output.read(self.expected.dtype, dims)

    def close(self) -> None:
        if self.memory is not None:
            self.memory.close()
            self.admin.close()
            self.memory = None


def direct_throughput(runner, pool: np.ndarray, batch: int, seconds: float = 2.0) -> dict:
    """Images per second and milliseconds per call (p50, p99, mean) of calling the runner directly on batches of
    ``batch`` (no server), after one warm-up call (Ctrl-C taken at the end: deferred_interrupt)."""
    x = np.ascontiguousarray(pool[np.arange(batch) % len(pool)])
    with deferred_interrupt():
        runner(x)
        count, t0 = 0, time.perf_counter()
        latencies = []
        while time.perf_counter() - t0 < seconds or count < 3:
            t = time.perf_counter()
            runner(x)
            latencies.append((time.perf_counter() - t) * 1e3)
            count += 1
        wall = time.perf_counter() - t0
    latencies.sort()
    return {
        "batch": batch,
        "calls": count,
        "images_per_s": round(count * batch / wall, 1),
        "latency_ms": {
            "p50": round(percentile(latencies, 50), 3),
            "p99": round(percentile(latencies, 99), 3),
            "mean": round(sum(latencies) / len(latencies), 3),
        },
    }


def input_pool(metadata: dict, input_dims, dtype, size: int = 1024, seed: int = 0) -> np.ndarray:
    """``size`` distinct inputs of shape (size, *input_dims): for the shipped default model its held-out digits
    and copies shifted by 1, 2, ... pixels; for other models seeded normal noise."""
    dims = [int(d) for d in input_dims]
    if metadata.get("source") == "default":
        from wtconv_torch.models import load_default_model, load_heldout_digits

        _, config = load_default_model()
        digits = load_heldout_digits(config)[0].numpy()
        copies = [np.roll(digits, shift, axis=-1) for shift in range(-(-size // len(digits)))]
        pool = np.concatenate(copies)[:size]
    else:
        pool = np.random.default_rng(seed).standard_normal((size, *dims), dtype=np.float32)
    return np.ascontiguousarray(pool.astype(dtype))


def expected_outputs(runner, pool: np.ndarray, batch: int = 64) -> np.ndarray:
    """The runner's outputs for every pool row, computed directly in batches of ``batch`` (Ctrl-C taken between
    batches: deferred_interrupt)."""
    outputs = []
    for i in range(0, len(pool), batch):
        with deferred_interrupt():
            outputs.append(runner(np.ascontiguousarray(pool[i : i + batch])))
    return np.concatenate(outputs)


__all__ = [
    "run_load",
    "request_plan",
    "direct_throughput",
    "input_pool",
    "expected_outputs",
    "LoadReport",
    "rows",
    "matches",
]
