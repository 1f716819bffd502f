"""The device serving script's summary (benchmarks/serving_summary.py) on reports written the way ``serve --load-test
--json`` and ``serve --soak --json`` write them: the targets judged on the median of the rounds of each runtime and
client mode, their spread said, the 1-64 request rate as a share of the 1-8 one, and the soak's counts and memory.
The expected verdicts are worked out by hand below."""

from __future__ import annotations

import json

from benchmarks import serving_summary


def point(concurrency, sizes, rate, tail=2.0, window=3.0):
    return {
        "concurrency": concurrency,
        "processes": 4,
        "batch_sizes": sizes,
        "window_s": window,
        "images_per_s": rate,
        "served_over_direct": 1.1,
        "latency_ms": {"p50": 10.0, "p99": 10.0 * tail, "p99_over_p50": tail},
        "executed_batches": {"128": 10},
        "mean_executed_batch": 128.0,
        "queue_ms": 1.0,
        "compute_ms_by_part": {"input": 1.0, "infer": 20.0, "output": 0.5},
        "failed": 0,
    }


def load_report(rate_small, rate_big, tail, memory="none"):
    return {
        "runtime": "torch-cuda",
        "machine": "x",
        "gpu": "NVIDIA H200",
        "input_dtype": "float16",
        "execution": "e",
        "tuning": {"buckets": "1,2,4,8,16,32,64,128"},
        "shared_memory": memory,
        "direct": [],
        "check": [{"protocol": "grpc", "completed": 1024, "failed": 0, "lost": 0, "mismatched": 0, "requests": 1024}],
        "sweep": [
            point(16, [1, 2, 4, 8], 4000, tail),
            point(256, [1, 2, 4, 8], rate_small),
            point(256, [1, 2, 4, 8, 16, 32, 64], rate_big),
            point(256, [1, 2, 4, 8], 1.0),  # the extra client process: not the point judged
        ],
    }


def soak_report(growth_host, other_errors=0):
    soak = {
        "duration_s": 600.0,
        "concurrency": 256,
        "batch_sizes": [1, 2, 4, 8, 16, 32, 64],
        "requests": 50000,
        "completed": 50000,
        "failed": 0,
        "lost": 0,
        "mismatched": 0,
        "retried": 300,
        "other_errors": other_errors,
        "errors_of_the_killed_backend": 300,
        "backend_killed_at_s": 300.0,
        "backend_back_at_s": 320.0,
        "memory_settle_s": 120.0,
        "memory_growth": {"host": growth_host, "gpu": 0.001},
        "memory_samples": [{"t_s": 0.0, "host_rss_mib": 900.0, "gpu_memory_mib": [9000.0]}],
    }
    return {"runtime": "torch-cuda", "machine": "x", "gpu": "NVIDIA H200", "soak": soak}


def test_targets_are_the_median_of_the_rounds_per_client_mode(tmp_path):
    rounds = [(7600, 6900, 2.4), (7400, 6600, 2.6), (7700, 7000, 2.2)]  # medians: 7600, 0.9067, 2.4
    for k, (small, big, tail) in enumerate(rounds, start=1):
        name = "load_torch-cuda_tiny.json" if k == 1 else f"load_torch-cuda_tiny_round{k}.json"
        (tmp_path / name).write_text(json.dumps(load_report(small, big, tail)))
    (tmp_path / "load_torch-cuda_tiny_shm-system.json").write_text(json.dumps(load_report(7000, 6800, 3.0, "system")))
    (tmp_path / "soak_torch-cuda_tiny.json").write_text(json.dumps(soak_report(0.015)))
    (tmp_path / "soak_onnxruntime_tiny.json").write_text(json.dumps(soak_report(0.03)))
    lines = serving_summary.summarize(tmp_path)["targets"]
    plain = [line for line in lines if line.startswith("torch-cuda (client: none shared memory)")]
    assert plain[0] == (
        "torch-cuda (client: none shared memory): 7600 images/s at 256 in flight, requests of 1-8 (7400-7700 over 3 "
        "round(s), windows of 3 s; target 7500): met"
    )
    assert plain[1].startswith("torch-cuda (client: none shared memory): requests of 1-64 at 0.91x the rate of")
    assert plain[1].endswith(": met") and plain[2].endswith(": met")  # served / direct 1.1
    assert plain[3].startswith("torch-cuda (client: none shared memory): p99 / p50 at 16 in flight 2.40 (2.2-2.6")
    assert plain[3].endswith(": met")
    system = [line for line in lines if line.startswith("torch-cuda (client: system shared memory, shm-system)")]
    assert system[0].endswith("target 7500): NOT met") and "over 1 round(s)" in system[0]
    assert system[1].startswith("torch-cuda (client: system shared memory, shm-system): requests of 1-64 at 0.97x")
    assert system[3].endswith("(3-3 over 1 round(s); target <= 2.5): NOT met")
    soaks = [line for line in lines if "soak of 600 s" in line]
    assert soaks[0].startswith("onnxruntime_tiny: soak of 600 s at 256 in flight") and soaks[0].endswith("NOT met")
    assert soaks[1].startswith("torch-cuda_tiny: soak") and "host +1.50%" in soaks[1] and soaks[1].endswith(": met")
    markdown = serving_summary.markdown(serving_summary.summarize(tmp_path))
    assert "## Soak torch-cuda_tiny" in markdown and "Client: system shared memory." in markdown
