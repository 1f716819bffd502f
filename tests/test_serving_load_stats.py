"""The load sweep's reading of Triton's statistics (wtconv_serving.traffic.sweep.stats_delta), on readings written the
way Triton's statistics extension reports them: per-model inference_stats count each request (a batch of 3
requests adds its compute time 3 times), batch_stats count executions. The expected values are worked out by hand
below, not by the code under test."""

import pytest

from wtconv_serving.traffic.sweep import stats_delta


def timing(count, ns):
    return {"count": count, "ns": ns}


def reading(batches, requests, queue_ns):
    """A model_stats entry: ``batches`` {size: (executions, input ns, infer ns, output ns)}; every execution of size
    s served s // 2 requests of 2 images, each request counted with its execution's whole compute time."""
    batch_stats = [
        {
            "batch_size": size,
            "compute_input": timing(n, i),
            "compute_infer": timing(n, f),
            "compute_output": timing(n, o),
        }
        for size, (n, i, f, o) in batches.items()
    ]
    per_request = {part: sum(v[k] * (s // 2) for s, v in batches.items()) for part, k in (("i", 1), ("f", 2))}
    return {
        "execution_count": sum(v[0] for v in batches.values()),
        "inference_stats": {
            "success": timing(requests, 0),
            "queue": timing(requests, queue_ns),
            "compute_input": timing(requests, per_request["i"]),
            "compute_infer": timing(requests, per_request["f"]),
        },
        "batch_stats": batch_stats,
    }


def test_compute_time_is_per_execution_and_split_by_part():
    before = reading({4: (10, 10_000_000, 50_000_000, 1_000_000)}, requests=20, queue_ns=40_000_000)
    after = reading(
        {4: (20, 20_000_000, 100_000_000, 2_000_000), 8: (5, 25_000_000, 75_000_000, 5_000_000)},
        requests=60,
        queue_ns=200_000_000,
    )
    executed, queue_ms, compute_ms = stats_delta(before, after)
    # Between the readings: 10 executions of 4 and 5 of 8 (15 executions), 40 requests.
    assert executed == {4: 10, 8: 5}
    assert queue_ms == pytest.approx(160 / 40)  # 160 ms queued over 40 requests
    # input: (10 + 25) ms over 15 executions; infer: (50 + 75) ms; output: (1 + 5) ms
    assert compute_ms == pytest.approx({"input": 35 / 15, "infer": 125 / 15, "output": 6 / 15})


def test_nothing_executed_gives_no_compute_time():
    same = reading({4: (10, 10_000_000, 50_000_000, 1_000_000)}, requests=20, queue_ns=40_000_000)
    assert stats_delta(same, same) == ({}, None, {})
