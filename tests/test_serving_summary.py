"""The device serving script's summary (benchmarks/serving_summary.py) on reports written the way ``serve --load-test
--json`` and ``serve --soak --json`` write them: the targets judged on the median of the rounds of each runtime and
client mode, their spread said, the 1-64 request rate as a share of the 1-8 one, and the soak's counts and memory.
The expected verdicts are worked out by hand below."""

from __future__ import annotations

import json

from benchmarks import serving_summary


def point(concurrency, sizes, rate, tail=2.0, window=3.0, processes=4, split=(1.0, 20.0, 0.5)):
    return {
        "concurrency": concurrency,
        "processes": processes,
        "batch_sizes": sizes,
        "window_s": window,
        "images_per_s": rate,
        "executed_images_per_s": rate,  # the server's count over the window, which agrees
        "served_over_direct": 1.1,
        "latency_ms": {"p50": 10.0, "p99": 10.0 * tail, "p99_over_p50": tail},
        "executed_batches": {"128": 10},
        "mean_executed_batch": 128.0,
        "queue_ms": 1.0,
        "compute_ms_by_part": dict(zip(("input", "infer", "output"), split, strict=True)),
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
            point(256, [1, 2, 4, 8], 1.0, processes=5),  # the extra client process: not the point judged
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
    system_report = load_report(7000, 6800, 3.0, "system")
    system_report["sweep"][1]["executed_images_per_s"] = 7012.3  # the server's own count over the same window
    system_report["sweep"][2]["executed_images_per_s"] = 6802.0
    (tmp_path / "load_torch-cuda_tiny_shm-system.json").write_text(json.dumps(system_report))
    (tmp_path / "soak_torch-cuda_tiny.json").write_text(json.dumps(soak_report(0.015)))
    (tmp_path / "soak_onnxruntime_tiny.json").write_text(json.dumps(soak_report(0.03)))
    lines = serving_summary.summarize(tmp_path)["targets"]
    plain = [line for line in lines if line.startswith("torch-cuda (client: none shared memory)")]
    assert plain[0] == (
        "torch-cuda (client: none shared memory): 7600 images/s at 256 in flight, requests of 1-8 (7400-7700 over 3 "
        "round(s), windows of 3 s; Triton's statistics, the clients counted 7600; target 7500): met"
    )
    assert plain[1].startswith("torch-cuda (client: none shared memory): requests of 1-64 at 0.91x the rate of")
    assert plain[1].endswith(": met") and plain[2].endswith(": met")  # served / direct 1.1
    assert plain[3].startswith("torch-cuda (client: none shared memory): p99 / p50 at 16 in flight 2.40 (2.2-2.6")
    assert plain[3].endswith(": met")
    system = [line for line in lines if line.startswith("torch-cuda (client: system shared memory, shm-system)")]
    assert system[0].endswith("windows of 3 s; Triton's statistics, the clients counted 7000; target 7500): NOT met")
    assert "7012 images/s" in system[0]  # judged on the server's count
    assert "over 1 round(s)" in system[0]
    assert system[1].startswith("torch-cuda (client: system shared memory, shm-system): requests of 1-64 at 0.97x")
    assert system[3].endswith("(3-3 over 1 round(s); target <= 2.5): NOT met")
    soaks = [line for line in lines if "soak of 600 s" in line]
    assert soaks[0].startswith("onnxruntime_tiny: soak of 600 s at 256 in flight")
    assert soaks[0].endswith("host +3.00%, gpu +0.10% (target <= 2%): NOT met (memory growth above 2%)")
    assert soaks[1].startswith("torch-cuda_tiny: soak") and "host +1.50%" in soaks[1] and soaks[1].endswith(": met")
    markdown = serving_summary.markdown(serving_summary.summarize(tmp_path))
    assert "## Soak torch-cuda_tiny" in markdown and "Client: system shared memory." in markdown


def test_a_run_whose_clients_each_held_a_connection_says_so(tmp_path):
    """The sweep's connections are part of the client mode a figure is of: a run with one per request in flight
    (serve --connections client) says so in its targets and its section; a run of the default says nothing more."""
    own = load_report(7600, 6900, 2.4)
    own["connections"] = "client"
    (tmp_path / "load_torch-cuda_tiny.json").write_text(json.dumps(own))
    (tmp_path / "load_onnxruntime_tiny.json").write_text(
        json.dumps({**load_report(7600, 6900, 2.4), "connections": "process"})
    )
    summary = serving_summary.summarize(tmp_path)
    labels = {line.split("): ")[0] + ")" for line in summary["targets"] if "in flight" in line}
    assert "torch-cuda (client: none shared memory, a connection per request in flight)" in labels, labels
    assert "onnxruntime (client: none shared memory)" in labels, labels
    assert "Client: none shared memory, a connection per request in flight." in serving_summary.markdown(summary)


def test_rounds_inside_one_run_the_gpus_run_and_the_split_before(tmp_path):
    """A sweep that comes back to its points (--sweep 16,256,16,256,16,256 with the 1-64 mix after) is three rounds
    of one run; the --gpus 0 run is set against it; the split of an execution against an earlier results file."""
    small, big = [1, 2, 4, 8], [1, 2, 4, 8, 16, 32, 64]
    rates, bigs, tails = (7400, 7800, 7600), (7000, 7100, 6500), (2.0, 2.6, 2.4)
    splits = ((1.0, 20.0, 0.4), (3.0, 22.0, 0.6), (2.0, 21.0, 0.5))  # medians 2.0 / 21.0 / 0.5
    sweep = []
    for rate, tail, split in zip(rates, tails, splits, strict=True):
        sweep += [point(16, small, 4000, tail), point(256, small, rate, split=split)]
    sweep += [point(16, big, 5000), *[point(256, big, b) for b in bigs], point(256, small, 1.0, processes=5)]
    report = {**load_report(0, 0, 0, "cuda"), "sweep": sweep}
    (tmp_path / "load_onnxruntime_tiny_shm-cuda.json").write_text(json.dumps(report))
    gpus = {**report, "sweep": [point(256, small, 7000), point(256, big, 6000)]}
    (tmp_path / "load_onnxruntime_tiny_shm-cuda_gpus0.json").write_text(json.dumps(gpus))
    earlier = tmp_path / "before.json"
    then = {"tag": "onnxruntime_tiny", "sweep": [point(256, small, 6682, split=(10.41, 56.06, 2.61))]}
    earlier.write_text(json.dumps({"runs": [then, {**then, "tag": "torch-cuda_tiny"}]}))
    lines = serving_summary.summarize(tmp_path, earlier)["targets"]
    label = "onnxruntime (client: cuda shared memory, shm-cuda)"
    mine = [line for line in lines if line.startswith(label + ":")]
    assert mine[0] == (
        f"{label}: 7600 images/s at 256 in flight, requests of 1-8 (7400-7800 over 3 round(s), windows of 3 s; "
        "Triton's statistics, the clients counted 7600; target 7500): met"
    )
    # round by round: 7000/7400, 7100/7800, 6500/7600; the median 0.9103
    assert mine[1].startswith(f"{label}: requests of 1-64 at 0.91x the rate of requests of 1-8 (0.8553-0.9459 over 3")
    assert mine[3] == f"{label}: p99 / p50 at 16 in flight 2.40 (2-2.6 over 3 round(s); target <= 2.5): met"
    [agree] = [line for line in lines if "--gpus 0" in line]
    # 7000 against 7600: 0.92x, within 10 %
    assert agree.startswith("onnxruntime_tiny_shm-cuda_gpus0: --gpus 0 7000 images/s at 256 in flight")
    assert agree.endswith("the default placement 7600 (7400-7800 over 3 round(s)): 0.92x, agree (within 10%)")
    split = [line for line in lines if "input / infer / output" in line and line.startswith(label)]
    assert split[0].endswith(
        "2.00 / 21.00 / 0.50 ms (mean batch 128.0), median of 3 round(s); before: 10.41 / 56.06 / 2.61 ms "
        "(mean batch 128.0) (before.json)"
    )
    # a --gpus run off by more than a tenth disagrees
    gpus["sweep"] = [point(256, small, 6000)]
    (tmp_path / "load_onnxruntime_tiny_shm-cuda_gpus0.json").write_text(json.dumps(gpus))
    [line] = [line for line in serving_summary.summarize(tmp_path)["targets"] if "--gpus 0" in line]
    assert line.endswith("0.79x, DISAGREE (within 10%)")


def test_the_soak_says_what_its_other_errors_were_and_whether_the_old_version_went(tmp_path):
    """A soak with errors outside the kill's window and an old version never unloaded after the reload: the target's
    line splits the other errors (before the kill, after the reload) and says the old version stayed; the markdown
    lists the errors kept, with their times, and their kinds. A soak written before these were recorded reads as
    before."""
    report = soak_report(0.317, other_errors=3)
    first = [
        {"t_s": 120.5, "error": "request 7: [StatusCode.UNAVAILABLE] failed to connect"},
        {"t_s": 400.25, "error": "request 9001: [StatusCode.INTERNAL] Stub process 'tiny_0_2' is not healthy."},
        {"t_s": 401.0, "error": "request 9002: [StatusCode.INTERNAL] Stub process 'tiny_0_2' is not healthy."},
    ]
    report["soak"].update(
        other_errors_before_kill=1,
        other_errors_after_recovery=2,
        first_other_errors=first,
        other_error_kinds={
            "[StatusCode.INTERNAL] Stub process 'tiny_0_2' is not healthy.": 2,
            "[StatusCode.UNAVAILABLE] failed to connect": 1,
        },
        old_version_unloaded=False,
        old_version_unloaded_after_s=None,
        old_version_unload_wait_s=60.0,
    )
    (tmp_path / "soak_torch-cuda_tiny.json").write_text(json.dumps(report))
    (tmp_path / "soak_onnxruntime_tiny.json").write_text(json.dumps(soak_report(0.001, other_errors=2)))
    summary = serving_summary.summarize(tmp_path)
    lines = {line.split(":")[0]: line for line in summary["targets"] if "soak of" in line}
    assert (
        "3 other errors (1 before the kill, 2 after the reload + 5 s) (300 of the killed backend, retried); the old "
        "version NOT unloaded within 60 s of the reload (its memory stays); memory growth" in lines["torch-cuda_tiny"]
    )
    assert lines["torch-cuda_tiny"].endswith("NOT met (3 other errors, memory growth above 2%)")
    assert "2 other errors (300 of the killed backend, retried); memory growth" in lines["onnxruntime_tiny"]
    markdown = serving_summary.markdown(summary)
    assert "- 400.25 s: request 9001: [StatusCode.INTERNAL] Stub process 'tiny_0_2' is not healthy.\n" in markdown
    assert "By kind: 2 x [StatusCode.INTERNAL] Stub process 'tiny_0_2' is not healthy.; 1 x [StatusCode" in markdown
    assert (
        "300 errors of its requests, 3 others (1 before the kill, 2 after the reload + 5 s); the old version NOT"
        in markdown
    )


def test_the_soak_says_the_server_was_restarted(tmp_path):
    """A soak whose killed backend came back by a restart of the server: the target's line and the markdown say so,
    with the server's pids, and that the old version went with the old process; its other errors are split at the
    restart."""
    report = soak_report(0.001, other_errors=1)
    report["soak"].update(
        other_errors_before_kill=0,
        other_errors_after_recovery=1,
        first_other_errors=[{"t_s": 500.0, "error": "request 5: [StatusCode.UNAVAILABLE] failed to connect"}],
        other_error_kinds={"[StatusCode.UNAVAILABLE] failed to connect": 1},
        recovered_by="restart",
        server_pids=[4321, 5678],
        old_version_unloaded=True,
        old_version_unloaded_after_s=None,
        old_version_unload_wait_s=60.0,
    )
    (tmp_path / "soak_torch-cuda_tiny.json").write_text(json.dumps(report))
    summary = serving_summary.summarize(tmp_path)
    [line] = [line for line in summary["targets"] if "soak of" in line]
    said = "(0 before the kill, 1 after the restart + 5 s) (300 of the killed backend, retried); the server restarted "
    assert said + "(pid 4321 to 5678): the old version's memory went with the old process; memory growth" in line
    assert "after the restart + 5 s); the server restarted (pid 4321 to 5678)" in serving_summary.markdown(summary)


def test_the_padding_is_that_of_the_bucket_plan_the_server_logged(tmp_path):
    """Batches of 100 images on buckets up to 128: padded up to 128 (no plan logged, a run before batches were split)
    they compute 28 images only to drop them, 0.219 of all computed; under the plan of the times an instance logged
    (shaped like WTConvNeXt-T's on an H100) they run as 64 + 32 + 4 and nothing is dropped."""
    report = load_report(6000, 5000, 2.0)
    for p in report["sweep"]:
        p["executed_batches"] = {"100": 10}
    (tmp_path / "load_torch-cuda_tiny.json").write_text(json.dumps(report))
    padded = serving_summary.summarize(tmp_path)
    assert {p["padding_share"] for p in padded["runs"][0]["sweep"]} == {0.219}
    assert padded["runs"][0]["bucket_times_logged"] is False
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "server_torch-cuda_tiny.log").write_text(
        'I1206 python_model.py:79] "tiny: instance tiny_0_0: bucket times ms {1: 0.74, 2: 0.80, 4: 0.97, 8: 1.39, '
        '16: 2.22, 32: 3.91, 64: 6.90, 128: 13.15}; batch sizes split: 9, 17-24, 33-48, 65-112"\n'
    )
    split = serving_summary.summarize(tmp_path)
    assert {p["padding_share"] for p in split["runs"][0]["sweep"]} == {0.0}
    assert split["runs"][0]["bucket_times_logged"] is True


def test_results_written_before_the_servers_count_are_judged_on_triton_statistics(tmp_path):
    """Results written before ``executed_images_per_s`` existed (their clients counted only requests both sent and
    answered inside the window, low by about latency / window) are judged on Triton's statistics of the same window:
    the images of the batches executed. 1-8: 50 batches of 120 and 25 of 128 in 1 s = 9200 images/s (the clients
    counted 8900); 1-64: 60 batches of 100 and 20 of 128 = 8560 (the clients counted 7000): 0.93x, met, where the
    clients' counts give 0.79x."""
    old_small = {**point(256, [1, 2, 4, 8], 8900, window=1.0), "executed_batches": {"120": 50, "128": 25}}
    old_big = {**point(256, [1, 2, 4, 8, 16, 32, 64], 7000, window=1.0), "executed_batches": {"100": 60, "128": 20}}
    for old in (old_small, old_big):
        del old["executed_images_per_s"]
    report = {**load_report(0, 0, 0), "sweep": [point(16, [1, 2, 4, 8], 4000), old_small, old_big]}
    (tmp_path / "load_torch-cuda_tiny.json").write_text(json.dumps(report))
    lines = serving_summary.summarize(tmp_path)["targets"]
    assert lines[0] == (
        "torch-cuda (client: none shared memory): 9200 images/s at 256 in flight, requests of 1-8 (9200-9200 over 1 "
        "round(s), windows of 1 s; Triton's statistics, the clients counted 8900; target 7500): met"
    )
    assert lines[1].startswith("torch-cuda (client: none shared memory): requests of 1-64 at 0.93x the rate of")
    assert lines[1].endswith(": met")
    assert serving_summary.executed_rate({"images_per_s": 5.0, "window_s": 3.0}) is None  # no statistics


def test_the_recount_sets_the_clients_count_beside_tritons():
    """benchmarks/serving_recount.py on a results file of the old count: per round at 256 in flight the clients' rate,
    Triton's (the images of the batches executed in the 1 s window) and their share, then the 1-64 / 1-8 ratio both
    ways (the extra client process's point left out). 1-8: 9200 executed, 8900 counted; 1-64: 8560 and 7000."""
    from benchmarks import serving_recount

    small = {**point(256, [1, 2, 4, 8], 8900, window=1.0), "executed_batches": {"120": 50, "128": 25}}
    big = {**point(256, [1, 2, 4, 8, 16, 32, 64], 7000, window=1.0), "executed_batches": {"100": 60, "128": 20}}
    for old in (small, big):
        del old["executed_images_per_s"]
    extra = point(256, [1, 2, 4, 8], 1.0, processes=5)
    run = {"tag": "torch-cuda_tiny", "gpu": "NVIDIA H200", "sweep": [point(16, [1, 2, 4, 8], 4000), small, big, extra]}
    rows = serving_recount.recount({"runs": [run]})
    assert rows == [
        "| torch-cuda_tiny | 1-8 | 8900 | 9200 | 0.967 | 10 |",
        "| torch-cuda_tiny | 1-64 | 7000 | 8560 | 0.818 | 10 |",
        "| torch-cuda_tiny | 1-64 ÷ 1-8 | 0.79 | 0.93 | | |",
    ]
    named = serving_recount.recount({"runs": {"with MPS": {"results": {"runs": [run]}}}})
    assert named[0].startswith("| with MPS: torch-cuda_tiny | 1-8 | 8900 |")
