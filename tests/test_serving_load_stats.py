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


def soak_report(
    host_mib, gpu_mib, *, error_times=(), errors=None, killed=None, back=None, duration=600.0, first_sent=()
):
    """A soak of ``duration`` s whose memory was sampled every minute (host, GPU), with errors seen at
    ``error_times`` (their messages ``errors``; their requests first sent at ``first_sent``, when given) and the
    backend killed and back at the times given."""
    from wtconv_serving.traffic.check import LoadReport
    from wtconv_serving.traffic.soak import SoakReport

    load = LoadReport("grpc", 100, 4, [1, 2], completed=100, images=150)
    load.error_times = list(error_times)
    load.error_first_sent = list(first_sent)
    load.errors = list(errors) if errors is not None else [f"error at {t}" for t in error_times]
    samples = [
        {"t_s": 60.0 * minute, "host_rss_mib": host, "gpu_memory_mib": gpu}
        for minute, (host, gpu) in enumerate(zip(host_mib, gpu_mib, strict=True))
    ]
    return SoakReport(load, duration, samples, killed is not None, killed, back)


def test_the_soak_judges_memory_from_minute_two():
    """Growth is measured from the first sample at minute 2 to the last: the warm-up before it does not count, up to 2 %
    passes, more does not, host and GPU each (the GPU sampled as the sum of its GPUs)."""
    host = [500, 900, 1000, 1010, 1019]  # minute 0 and 1: the warm-up
    gpu = [[100, 100], [400, 400], [500, 500], [500, 505], [505, 505]]
    report = soak_report(host, gpu, duration=240.0)
    assert report.settle_s == 48.0  # a fifth of a soak shorter than ten minutes
    report = soak_report(host, gpu)
    assert report.settle_s == 120.0
    growth = report.memory_growth()
    assert growth["host"] == pytest.approx(1019 / 1000 - 1) and growth["gpu"] == pytest.approx(1010 / 1000 - 1)
    assert report.passed
    assert not soak_report([500, 900, 1000, 1010, 1021], gpu).passed
    assert not soak_report(host, [*gpu[:-1], [520, 505]]).passed
    assert soak_report(host, [None] * 5).memory_growth()["gpu"] is None  # no GPU: the host alone judged


def test_the_soak_tells_the_killed_backends_errors_from_others():
    """Errors between the kill and a few seconds after the reload are the killed backend's own (retried); any other
    error fails the soak, and so does a backend that never came back."""
    host, gpu = [1000] * 5, [None] * 5
    report = soak_report(host, gpu, error_times=[300.1, 300.5, 309.0], killed=300.0, back=305.0)
    assert report.kill_errors() == (3, 0) and report.passed
    report = soak_report(host, gpu, error_times=[300.1, 200.0, 320.0], killed=300.0, back=305.0)
    assert report.kill_errors() == (1, 2) and not report.passed
    assert not soak_report(host, gpu, killed=300.0, back=None).passed
    assert soak_report(host, gpu).kill_errors() == (0, 0) and soak_report(host, gpu).passed


def test_a_request_of_the_kill_refused_after_the_window_is_still_the_kills():
    """The killed backend's own requests are those in flight at the kill or sent while it was down: one of them
    refused after the kill's window (its client slow to reconnect) is still the kill's, retried; a request first sent
    after the model was back is another's. The summary and its line say when the kill's requests were last refused,
    against when the model was back."""
    host, gpu = [1000] * 5, [None] * 5
    seen = [300.5, 340.0, 341.0]  # back at 330: the window ends at 335
    sent = [299.0, 299.5, 336.0]  # in flight at the kill, in flight at the kill, sent after the recovery
    report = soak_report(host, gpu, error_times=seen, first_sent=sent, killed=300.0, back=330.0)
    assert report.kill_errors() == (2, 1) and not report.passed
    s = report.summary()
    assert s["last_error_of_the_killed_backend_s"] == 340.0 and s["other_errors_after_recovery"] == 1
    assert s["first_other_errors"] == [{"t_s": 341.0, "error": "error at 341.0"}]
    assert "errors of its requests (retried; the last 10.0 s after it was back)" in report.line()
    report = soak_report(host, gpu, error_times=seen[:2], first_sent=sent[:2], killed=300.0, back=330.0)
    assert report.kill_errors() == (2, 0) and report.passed
    # Without the first sends (an older report) the window alone decides, as before.
    assert soak_report(host, gpu, error_times=seen[:2], killed=300.0, back=330.0).kill_errors() == (1, 1)


def test_the_soak_says_what_the_other_errors_were():
    """The errors outside the kill's window are told apart from the killed backend's: counted before the kill and
    after the reload's grace (5 s), the first 20 kept with their times and messages, and counted by kind (the
    message without its request number); the summary line names the first of them."""
    host, gpu = [1000] * 5, [None] * 5
    unhealthy = "[StatusCode.INTERNAL] Stub process 'tiny_0_1' is not healthy."
    refused = "[StatusCode.UNAVAILABLE] failed to connect to all addresses"
    before = [(12.5 + i, f"request {i}: {refused}") for i in range(3)]
    own = [(300.2, f"request 50: {unhealthy}"), (309.9, f"request 51: {unhealthy}")]  # back at 305: own until 310
    after = [(310.5 + i, f"request {100 + i}: {unhealthy}") for i in range(25)]
    seen = before + own + after
    report = soak_report(
        host, gpu, error_times=[t for t, _ in seen], errors=[e for _, e in seen], killed=300.0, back=305.0
    )
    assert report.kill_errors() == (2, 28) and not report.passed
    s = report.summary()
    assert s["errors_of_the_killed_backend"] == 2 and s["other_errors"] == 28
    assert s["other_errors_before_kill"] == 3 and s["other_errors_after_recovery"] == 25
    kept = before + after[:17]  # the first 20 of the others, in the order seen
    assert s["first_other_errors"] == [{"t_s": t, "error": e} for t, e in kept]
    assert s["other_error_kinds"] == {unhealthy: 25, refused: 3}
    assert (
        "28 other errors (3 before the kill, 25 after the reload + 5 s) (the first at 12.5 s: request 0: "
        "[StatusCode.UNAVAILABLE] failed to connect to all addresses)" in report.line()
    )
    # Without a kill every error is another's, all before it; the line has no split to tell.
    report = soak_report(host, gpu, error_times=[7.0], errors=[f"request 3: {refused}"])
    s = report.summary()
    assert (s["other_errors"], s["other_errors_before_kill"], s["other_errors_after_recovery"]) == (1, 1, 0)
    assert f"1 other errors (the first at 7.0 s: request 3: {refused})" in report.line()
    s = soak_report(host, gpu, killed=300.0, back=305.0).summary()
    assert s["other_errors"] == 0 and s["first_other_errors"] == [] and s["other_error_kinds"] == {}


def test_the_soak_says_whether_the_old_version_was_unloaded():
    """The reload's record (whether Triton unloaded the old version, how long after) reaches the summary and its
    line: unloaded, not unloaded within the wait (its memory stays), or not known when the soak ended first."""
    host, gpu = [1000] * 5, [None] * 5
    report = soak_report(host, gpu, killed=300.0, back=305.0)
    report.old_version_unloaded, report.old_version_unloaded_after_s, report.unload_wait_s = True, 1.2, 60.0
    s = report.summary()
    assert (s["old_version_unloaded"], s["old_version_unloaded_after_s"], s["old_version_unload_wait_s"]) == (
        True,
        1.2,
        60.0,
    )
    assert "(retried); the old version unloaded 1.2 s after the reload;" in report.line()
    report.old_version_unloaded, report.old_version_unloaded_after_s = False, None
    assert report.summary()["old_version_unloaded"] is False
    assert "the old version NOT unloaded within 60 s of the reload (its memory stays)" in report.line()
    report.old_version_unloaded = None
    assert "whether the old version was unloaded is not known (the soak ended first)" in report.line()
    assert "old version" not in soak_report(host, gpu).line()  # no kill, no reload


def test_the_soak_says_the_server_was_restarted():
    """A recovery by restart: the summary says so with the server's pids before and after, and the line says the old
    version's memory went with the old process (no unload to wait for). Errors in the restart's window, from the
    kill to 5 s after the restarted server was ready, are the killed backend's."""
    host, gpu = [1000] * 5, [None] * 5
    report = soak_report(host, gpu, error_times=[300.1, 329.0, 336.0], killed=300.0, back=330.0)
    report.recovered_by, report.server_pids, report.old_version_unloaded = "restart", (4321, 5678), True
    s = report.summary()
    assert (s["recovered_by"], s["server_pids"], s["old_version_unloaded"]) == ("restart", [4321, 5678], True)
    assert report.kill_errors() == (2, 1) and s["other_errors_after_recovery"] == 1
    line = report.line()
    assert "; the server restarted (pid 4321 to 5678): the old version's memory went with the old process" in line
    assert "after the reload" not in line and "unloaded" not in line


def test_the_soak_says_where_the_restart_went_and_each_processs_own_growth():
    """The restart's phases (launcher.RestartTimes) reach the soak's line beside the pids, and the host memory is
    also given within each server process: the target's figure compares the old process at minute 2 with the new
    one at the end, two processes that share nothing. Here the old grew 1 % (1000 to 1010), the new 0.5 % (900 to
    904.5) while the target's figure reads 904.5 / 1000 - 1 = -9.55 %."""
    from wtconv_serving.server.launcher import RestartTimes

    host = [500, 900, 1000, 1010, 1010, 900, 904.5]
    report = soak_report(host, [None] * 7, killed=300.0, back=330.0)
    for sample, pid in zip(report.samples, [4321] * 5 + [5678] * 2, strict=True):
        sample["server_pid"] = pid
    times = RestartTimes(drain_s=10.0, kill_s=0.2, gone_s=5.0, still_ending=("99 (D)",), ports_s=0.1)
    times.launched_at, times.first_line_s, times.ready_s = 1_000_000.0, 265.0, 300.0
    report.recovered_by, report.server_pids, report.old_version_unloaded = "restart", (4321, 5678), True
    report.restart_times = times.as_dict()
    s = report.summary()
    assert s["memory_growth"]["host"] == pytest.approx(904.5 / 1000 - 1, abs=1e-4)
    assert s["memory_growth_by_process"] == [
        {"server_pid": 4321, "from_s": 120.0, "to_s": 240.0, "host": 0.01},
        {"server_pid": 5678, "from_s": 300.0, "to_s": 360.0, "host": 0.005},
    ]
    line = report.line()
    assert (
        "the server restarted (pid 4321 to 5678; drain 10.0 s, kill 0.2 s, group gone 5.0 s, still ending then: "
        "99 (D), ports 0.1 s, the new process's first log line 265.0 s after its launch, ready 300.0 s after its "
        "launch): the old version's memory went" in line
    )
    assert line.endswith("(host within each server process: pid 4321 +1.0% (120-240 s), pid 5678 +0.5% (300-360 s))")


def test_a_restarts_first_line_is_read_against_the_launchs_local_time():
    """RestartTimes.note_first_line: the first line of the new process's output that has a time of day (Triton's
    glog lines), less the launch's local time of day; lines without a time before it are passed over, and a line
    written after midnight of a launch before it counts across the turn of the day."""
    import time

    from wtconv_serving.server.launcher import RestartTimes

    launched = time.mktime((2026, 12, 6, 18, 5, 57, 0, 0, -1)) + 0.25  # 18:05:57.25 local
    times = RestartTimes(launched_at=launched)
    times.note_first_line("a line of the stub\nI1206 18:10:12.389189 4620 pinned_memory_manager.cc:277] pool\n")
    assert times.first_line_s == pytest.approx(255.14, abs=0.01)  # 18:10:12.389 - 18:05:57.25
    late = RestartTimes(launched_at=time.mktime((2026, 12, 6, 23, 59, 58, 0, 0, -1)))
    late.note_first_line("I1207 00:00:03.000000 1 server.cc:1] first\n")
    assert late.first_line_s == pytest.approx(5.0)
    none = RestartTimes(launched_at=launched)
    none.note_first_line("no time here\n")
    assert none.first_line_s is None


def test_a_restarts_wait_for_the_old_group_names_a_read_that_held_it(monkeypatch):
    """The wait for the old process group (launcher._wait_gone) checks its timeout between scans of /proc, so one
    read that blocks (a process the kernel is tearing down) holds it past the timeout: the scan notes the slowest read
    and whose it was, and a restart's times name it once it took a second or more. Here a live process of a group of
    its own (a sleep), whose stat read is made 0.3 s slow, against a 0.05 s timeout."""
    import subprocess
    import time

    from wtconv_serving.server import launcher

    child = subprocess.Popen(["sleep", "30"], start_new_session=True)
    read = launcher._read_stat

    def slow_for_the_child(pid):
        if int(pid) == child.pid:
            time.sleep(0.3)
        return read(pid)

    monkeypatch.setattr(launcher, "_read_stat", slow_for_the_child)
    try:
        slowest = launcher.SlowRead()
        began = time.monotonic()
        left = launcher._wait_gone(child.pid, timeout=0.05, slowest=slowest)
        waited = time.monotonic() - began
    finally:
        child.kill()
        child.wait()
    assert left == {child.pid: "S"} and waited >= 0.3
    assert (slowest.pid, slowest.name, slowest.state) == (child.pid, "sleep", "S") and slowest.seconds >= 0.3
    times = launcher.RestartTimes(gone_s=waited, slowest_read=slowest)
    assert "the slowest read" not in times.words()  # under a second: a scan's ordinary cost is not named
    slowest.seconds = 77.04
    assert (
        f"group gone {waited:.1f} s, the slowest read of /proc: pid {child.pid} (sleep, state S)'s stat, 77.0 s, "
        in (times.words())
    )
    assert times.as_dict()["slowest_read"] == {"seconds": 77.04, "pid": child.pid, "name": "sleep", "state": "S"}


def test_the_loads_error_times_count_from_the_callers_clock():
    """The soak reads the load's error times against the moment it killed the backend, on its own clock: a load
    started later must not shift them (the requests failing at the kill would count as other errors). Two requests
    to a port nothing listens on fail at once; their times count from the origin given."""
    import socket
    import time

    import numpy as np

    from wtconv_serving.traffic.check import run_load

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # free once closed: nothing listens there
    pool = np.zeros((2, 1, 2, 2), np.float32)
    origin = time.monotonic() - 100.0
    report = run_load(
        f"127.0.0.1:{port}",
        "m",
        pool,
        pool,
        requests=2,
        concurrency=1,
        batch_sizes=(1,),
        request_timeout_s=5.0,
        clock_origin=origin,
    )
    assert report.failed == 2 and len(report.error_times) == 2, report.errors
    assert all(100.0 <= t < 100.0 + 30.0 for t in report.error_times), report.error_times
    # each error's request was first sent on the same clock, no later than the error was seen
    assert len(report.error_first_sent) == 2, report.error_first_sent
    assert all(100.0 <= f <= t for f, t in zip(report.error_first_sent, report.error_times, strict=True))


def test_a_retried_requests_errors_keep_its_first_send():
    """A request retried against a port nothing listens on: each of its errors keeps the time it was first sent,
    before all of them (the soak tells the kill's requests by it)."""
    import socket

    import numpy as np

    from wtconv_serving.traffic.check import run_load

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    pool = np.zeros((1, 1, 2, 2), np.float32)
    report = run_load(
        f"127.0.0.1:{port}", "m", pool, pool, requests=1, concurrency=1, batch_sizes=(1,), retries=3, retry_wait_s=0.1
    )
    assert report.failed == 1 and report.retried == 3 and len(report.error_times) == 4, report.errors
    assert len(set(report.error_first_sent)) == 1, report.error_first_sent
    assert report.error_first_sent[0] <= report.error_times[0] < report.error_times[-1]
    assert report.error_times[-1] - report.error_first_sent[0] >= 0.3  # three waits of 0.1 s between the four tries
