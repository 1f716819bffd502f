"""How a GPU runner runs a batch on its buckets: padded up to one bucket, or split into several, whichever its
buckets' measured times say is cheaper (docs/serving.md, "Tuning").

A batch of 100 images on buckets 1, 2, 4, ..., 128 padded up to 128 computes 28 images only to drop them; run as
64 + 32 + 4 it computes none, at the price of two more replays. Whether that pays depends on the model and the GPU:
a batch of 126 is cheaper padded to 128 than split six ways, and a model that is latency-bound at every batch size
should never split. So the runner times each bucket once at load (``time_buckets``: the least of a few runs between
CUDA events, on its own stream, the buckets taken in turn) and ``BucketPlan`` picks, for every batch size up to the
largest bucket, the set of buckets covering it at the least measured cost (a covering knapsack over at most a few
hundred sizes, solved once).

The times must be the GPU's own. Triton loads a model's instances in parallel, and times taken while another
instance captures its graphs came out 2 to 7 times too long, unevenly (on an H100: 16 images 5-9 ms against 2.2,
128 images 26-52 against 13.2), which made a plan that cut every batch into pieces of 8. Hence ``gpu_alone``: the
runners of one host prepare and time their buckets one at a time per GPU. And what is left of such noise is bounded
(``plausible_times``): a larger bucket takes at least as long as a smaller one and at most as long per image.

The pieces run largest first and only the last one is padded, so each piece after the first is moved to the front of
the device buffer from rows the earlier pieces have already read (``pieces``: its start is at least the first
piece's size, which is at least its own), and its output rows are gathered into one batch output.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import socket
import time
from collections.abc import Callable, Sequence

from wtconv_serving.tuning import bucket_for

log = logging.getLogger(__name__)

__all__ = ["PIECE_OVERHEAD_S", "BucketPlan", "gpu_alone", "plausible_times", "time_buckets"]

# What one more piece costs beyond its bucket's GPU time: the host's launch of a replay and the two copies on the
# GPU (the piece's input moved to the front, its output rows gathered), a few tens of microseconds. It also keeps a
# split that saves less than that (timing noise) from being chosen.
PIECE_OVERHEAD_S = 50e-6


class BucketPlan:
    """For each batch size from 1 to the largest of ``buckets``, the buckets that run it: the cheapest covering by
    ``seconds`` (bucket -> measured time of one run, bounded by plausible_times), each extra piece costing
    ``overhead_s``. Without times, every batch runs padded up to its one bucket."""

    def __init__(self, buckets: Sequence[int], seconds: dict[int, float] | None = None, overhead_s=PIECE_OVERHEAD_S):
        self.buckets = tuple(sorted(int(b) for b in buckets))
        self.seconds = plausible_times(self.buckets, seconds) if seconds else {}
        self._plans: list[tuple[int, ...]] = [()]  # rows -> its buckets, largest first
        for rows in range(1, (self.buckets[-1] if self.buckets else 0) + 1):
            self._plans.append(self._cheapest(rows, overhead_s) if self.seconds else (bucket_for(rows, self.buckets),))

    def _cheapest(self, rows: int, overhead_s: float) -> tuple[int, ...]:
        """The covering of ``rows`` at the least cost, from the plans of the smaller sizes already made (the cost of
        a plan: its buckets' times and an overhead per piece after the first)."""
        best, best_cost = None, float("inf")
        for bucket in self.buckets:
            rest = self._plans[rows - bucket] if rows > bucket else ()
            plan = tuple(sorted((bucket, *rest), reverse=True))
            cost = self.cost(plan, overhead_s)
            if cost < best_cost or (cost == best_cost and len(plan) < len(best)):
                best, best_cost = plan, cost
        return best

    def cost(self, plan: Sequence[int], overhead_s: float = PIECE_OVERHEAD_S) -> float:
        """The measured seconds of running ``plan`` (its buckets), with ``overhead_s`` per piece after the first."""
        return sum(self.seconds[b] for b in plan) + overhead_s * (len(plan) - 1)

    def buckets_for(self, rows: int) -> tuple[int, ...]:
        """The buckets a batch of ``rows`` runs on, largest first; ValueError above the largest bucket."""
        if not 1 <= rows < len(self._plans):
            raise ValueError(f"a batch of {rows} is outside 1..{len(self._plans) - 1}, the sizes these buckets hold")
        return self._plans[rows]

    def pieces(self, rows: int) -> list[tuple[int, int, int]]:
        """(first row, rows, bucket) of each piece of a batch of ``rows``, largest first; every piece full but the
        last, which holds the rest (and is padded up to its bucket)."""
        out, start = [], 0
        for bucket in self.buckets_for(rows):
            count = min(bucket, rows - start)
            if count > 0:  # (a plan never holds an empty piece while pieces cost time; kept safe if one did)
                out.append((start, count, bucket))
            start += count
        return out

    def describe(self) -> str:
        """The measured times and the batch sizes that are split, in one line."""
        if not self.seconds:
            return "every batch padded up to its bucket (no times measured)"
        times = ", ".join(f"{b}: {self.seconds[b] * 1e3:.2f}" for b in self.buckets)
        split = [rows for rows in range(1, len(self._plans)) if len(self._plans[rows]) > 1]
        return f"bucket times ms {{{times}}}; batch sizes split: {_ranges(split) or 'none'}"


def plausible_times(buckets: Sequence[int], seconds: dict[int, float]) -> dict[int, float]:
    """The measured times bounded, from the smallest bucket up, by what a GPU does: a larger batch takes at least as
    long as the next smaller one (a faster time is noise) and at most as long per image (a slower one is noise too:
    another process's work on the GPU while it was timed)."""
    out: dict[int, float] = {}
    previous = None
    for bucket in sorted(buckets):
        t = float(seconds[bucket])
        if previous is not None:
            t = min(max(t, out[previous]), out[previous] * bucket / previous)
        out[bucket], previous = t, bucket
    return out


def _ranges(values: Sequence[int]) -> str:
    """1, 2, 3, 5 -> '1-3, 5'."""
    spans: list[list[int]] = []
    for v in values:
        if spans and v == spans[-1][1] + 1:
            spans[-1][1] = v
        else:
            spans.append([v, v])
    return ", ".join(f"{a}" if a == b else f"{a}-{b}" for a, b in spans)


def time_buckets(torch, stream, buckets: Sequence[int], run_bucket: Callable[[int], object], repeats=5) -> dict:
    """Seconds of one ``run_bucket(bucket)`` on ``stream`` (the work it queues there), for each bucket: the least
    of ``repeats`` runs, each between two CUDA events, the buckets taken in turn (the least, since other work on the
    GPU can only add time, and in turn, so that a burst of it does not fall on all the runs of one bucket). The
    runner's buffers hold whatever values they hold: the time does not depend on them."""
    seconds = {bucket: float("inf") for bucket in buckets}
    for _ in range(repeats):
        for bucket in buckets:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record(stream)
            with torch.cuda.stream(stream):
                run_bucket(bucket)
            end.record(stream)
            end.synchronize()
            seconds[bucket] = min(seconds[bucket], start.elapsed_time(end) / 1e3)
    return seconds


GPU_ALONE_WAIT_S = 600.0  # the longest a runner waits for the others of its GPU (then it goes on, and says so)


@contextlib.contextmanager
def gpu_alone(device_index: int, wait_s: float = GPU_ALONE_WAIT_S):
    """Held by one process at a time per GPU index on this host (module docstring): an abstract Unix socket's name
    bound (Linux), which the kernel frees when the socket closes or its process ends, so that nothing is left behind
    and a crashed instance holds nothing. Waited for up to ``wait_s`` seconds; then the work goes on unserialised
    (its times may be noisy; plausible_times bounds them), with a warning."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    deadline = time.monotonic() + wait_s
    try:
        while True:
            try:
                sock.bind(f"\0wtconv-serving-gpu-{int(device_index)}")
                break
            except OSError as error:
                if error.errno != errno.EADDRINUSE:  # no abstract sockets here (not Linux): nothing to wait for
                    log.warning(
                        "GPU %d: cannot serialise the runners' timing (%s); timing beside them", device_index, error
                    )
                    break
                if time.monotonic() > deadline:
                    log.warning(
                        "GPU %d: another runner kept it for %.0f s; timing the buckets beside it", device_index, wait_s
                    )
                    break
                time.sleep(0.05)
        yield
    finally:
        sock.close()
