"""How a GPU runner runs a batch on its buckets (wtconv_serving.runners.bucket_plan): padded up to one bucket, or
split into the cheapest set of buckets by their measured times.

Oracle: every multiset of buckets that covers the batch, enumerated here by explicit loops, and its cost summed here
(the buckets' times and an overhead per piece after the first); the pieces' rows checked by index arithmetic. Where
the runner moves a piece's rows and gathers its output is tests/test_serving_backend_path.py; with real CUDA graphs,
tests/test_serving_runners_gpu.py."""

from __future__ import annotations

import itertools
import os

import numpy as np
import pytest

from wtconv_serving.runners.bucket_plan import BucketPlan
from wtconv_serving.tuning import bucket_for

BUCKETS = (1, 2, 4, 8, 16)
OVERHEAD = 0.05


def brute_force_cost(rows, times, overhead=OVERHEAD):
    """The least cost of any multiset of BUCKETS whose sizes sum to at least ``rows`` (at most ``rows`` pieces)."""
    best = float("inf")
    for pieces in range(1, rows + 1):
        for combo in itertools.combinations_with_replacement(BUCKETS, pieces):
            if sum(combo) >= rows:
                best = min(best, sum(times[b] for b in combo) + overhead * (pieces - 1))
    return best


def plan_cost(plan, times, overhead=OVERHEAD):
    return sum(times[b] for b in plan) + overhead * (len(plan) - 1)


@pytest.mark.parametrize("seed", range(6))
def test_every_batch_runs_on_the_cheapest_covering_of_its_rows(seed):
    rng = np.random.default_rng(seed)
    times = dict(zip(BUCKETS, np.cumsum(rng.uniform(0.1, 3.0, len(BUCKETS))), strict=True))
    plan = BucketPlan(BUCKETS, times, overhead_s=OVERHEAD)
    times = plan.seconds  # as bounded (plausible_times, tested below)
    for rows in range(1, BUCKETS[-1] + 1):
        chosen = plan.buckets_for(rows)
        assert sum(chosen) >= rows and list(chosen) == sorted(chosen, reverse=True)
        assert plan_cost(chosen, times) == pytest.approx(brute_force_cost(rows, times)), f"{rows} rows: {chosen}"


@pytest.mark.parametrize("seed", range(3))
def test_the_pieces_cover_the_batch_in_order_all_full_but_the_last(seed):
    rng = np.random.default_rng(100 + seed)
    times = dict(zip(BUCKETS, np.cumsum(rng.uniform(0.1, 3.0, len(BUCKETS))), strict=True))
    plan = BucketPlan(BUCKETS, times, overhead_s=OVERHEAD)
    for rows in range(1, BUCKETS[-1] + 1):
        pieces = plan.pieces(rows)
        start = 0
        for index, (first, count, bucket) in enumerate(pieces):
            assert first == start and 0 < count <= bucket
            if index < len(pieces) - 1:
                assert count == bucket, f"{rows} rows: {pieces}: only the last piece may be padded"
            if index > 0:
                # the piece's rows are moved to the front of the buffer: they must not overlap the front
                assert first >= count
            start += count
        assert start == rows


def test_without_times_every_batch_is_padded_up_to_its_bucket():
    plan = BucketPlan(BUCKETS)
    for rows in range(1, BUCKETS[-1] + 1):
        assert plan.pieces(rows) == [(0, rows, bucket_for(rows, BUCKETS))]
    assert "padded" in plan.describe()


def test_a_gpu_bound_model_splits_a_badly_padded_batch_and_pads_a_nearly_full_one():
    # times shaped like WTConvNeXt-T's on one GPU: a latency floor of 1.2 ms, then 0.157 ms per image
    buckets = (1, 2, 4, 8, 16, 32, 64, 128)
    times = {b: max(1.2e-3, 0.157e-3 * b) for b in buckets}
    plan = BucketPlan(buckets, times)
    assert plan.buckets_for(100) == (64, 32, 4)  # 16.3 ms against 20.1 padded to 128
    assert plan.buckets_for(126) == (128,)  # 2 rows of padding cost less than a piece more
    assert plan.buckets_for(3) == (4,)  # at the floor, padding is free
    assert "128: 20.10" in plan.describe() and not plan.describe().endswith("split: none")


def test_a_model_at_its_latency_floor_never_splits():
    plan = BucketPlan(BUCKETS, {b: 1e-3 for b in BUCKETS})
    assert all(plan.buckets_for(rows) == (bucket_for(rows, BUCKETS),) for rows in range(1, 17))
    assert plan.describe().endswith("batch sizes split: none")


def test_a_larger_bucket_timed_faster_than_a_smaller_one_is_taken_as_noise():
    plan = BucketPlan((1, 2, 4), {1: 2e-3, 2: 1e-3, 4: 3e-3})
    assert plan.seconds == {1: 2e-3, 2: 2e-3, 4: 3e-3}
    assert plan.buckets_for(2) == (2,)


def test_a_larger_bucket_timed_slower_per_image_is_taken_as_noise():
    # times measured on an H100 while three other instances loaded beside the timing one: 16 images took 9.21 ms
    # against 1.33 for 8, which would have cut every batch of 9 or more into pieces of 8
    measured = {1: 0.67, 2: 0.73, 4: 0.91, 8: 1.33, 16: 9.21, 32: 10.80, 64: 26.06, 128: 26.06}
    buckets = tuple(measured)
    plan = BucketPlan(buckets, {b: t * 1e-3 for b, t in measured.items()})
    want = {1: 0.67, 2: 0.73, 4: 0.91, 8: 1.33, 16: 2.66, 32: 5.32, 64: 10.64, 128: 21.28}
    assert {b: round(t * 1e3, 2) for b, t in plan.seconds.items()} == want
    assert plan.buckets_for(16) == (16,) and plan.buckets_for(128) == (128,)


@pytest.mark.parametrize("rows", [0, 17, -1])
def test_a_batch_outside_the_buckets_is_refused(rows):
    with pytest.raises(ValueError, match="outside 1..16"):
        BucketPlan(BUCKETS).buckets_for(rows)


def test_one_runner_at_a_time_has_a_gpu_and_a_killed_one_holds_nothing():
    """gpu_alone: a second holder of the same GPU waits until the first lets go; another GPU does not wait; a process
    killed while holding it frees it at once (the kernel frees the abstract socket's name) and leaves no file."""
    import multiprocessing
    import threading
    import time

    from wtconv_serving.runners.bucket_plan import gpu_alone

    index = 9000 + os.getpid() % 1000  # a GPU index no other test holds
    released = []
    entered = threading.Event()

    def hold():
        with gpu_alone(index):
            entered.set()
            time.sleep(0.5)
            released.append(time.monotonic())

    holder = threading.Thread(target=hold)
    holder.start()
    entered.wait(5)
    start = time.monotonic()
    with gpu_alone(index + 1):
        assert time.monotonic() - start < 0.3  # another GPU is free
    with gpu_alone(index):
        assert released and time.monotonic() >= released[0]
    holder.join()

    ctx = multiprocessing.get_context("spawn")
    ready = ctx.Event()
    child = ctx.Process(target=_hold_forever, args=(index, ready))
    child.start()
    assert ready.wait(30)
    child.kill()
    child.join()
    start = time.monotonic()
    with gpu_alone(index, wait_s=5):
        assert time.monotonic() - start < 1.0


def _hold_forever(index, ready):
    import time

    from wtconv_serving.runners.bucket_plan import gpu_alone

    with gpu_alone(index):
        ready.set()
        time.sleep(600)
