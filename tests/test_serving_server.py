"""A real Triton Inference Server (the nvidia-pytriton wheel's tritonserver, Python backend) serving the shipped
model exported to ONNX: end to end over HTTP and gRPC, the client sample, a bounded load, bad requests, the soak with
a backend process killed under load, a repository that does not load; the client sample, the load and the soak also
through system shared memory, whose regions no exit leaves behind (Ctrl-C, errors).

Oracles: the same runtime (ONNX Runtime on the same exported file) called directly in this process, which must
give bit-identical outputs; the PyTorch model, within the ONNX tolerance of the precision; the held-out labels;
Triton's own answers to repository requests (closed to everyone) and to requests beyond its queue limit; Triton's
list of registered shared-memory regions and /dev/shm itself.
One server (module fixture) serves four models: the plugin export in fp32 and fp16 (WTConv2d nodes run in ONNX
Runtime through onnxruntime-extensions), the standard-op export, which the load test uses because it is about
twenty times faster on a CPU, and the plugin export again behind a queue of two requests with a 100 ms timeout. The
server is stopped by the fixture's finalizer, whatever the tests did.
"""

import http.client
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest
import torch

tritonclient = pytest.importorskip("tritonclient.grpc")
pytest.importorskip("tritonclient.http")

import tritonclient.grpc as grpcclient  # noqa: E402
import tritonclient.http as httpclient  # noqa: E402
from test_cli_bad_input import interruptible  # noqa: E402
from tritonclient.utils import InferenceServerException  # noqa: E402

from wtconv_core.errors import ServingError  # noqa: E402
from wtconv_serving.repositories.python_backend import check_python_repository, write_python_repository  # noqa: E402
from wtconv_serving.runners.ort_runner import OnnxRuntimeRunner  # noqa: E402
from wtconv_serving.server.launcher import POLL_S, RESTART_LINE, TritonServer, loading_phase  # noqa: E402
from wtconv_serving.traffic import check as load  # noqa: E402
from wtconv_serving.traffic.shared_memory import PREFIX, registered_regions  # noqa: E402
from wtconv_serving.traffic.sweep import LoadWorkers  # noqa: E402
from wtconv_serving.tuning import Tuning  # noqa: E402
from wtconv_torch.models import load_default_model, load_heldout_digits  # noqa: E402

pytestmark = pytest.mark.slow  # a real tritonserver per module: about a minute; CI runs them

ROOT = Path(__file__).resolve().parent.parent
MODELS = {"digits": ("plugin", "fp32"), "digits_fp16": ("plugin", "fp16"), "digits_std": ("standard", "fp32")}
BATCH = 32
QUEUED = "digits_queue"  # the plugin export behind a queue of QUEUE requests, each refused after 100 ms of waiting
QUEUE = 2


@pytest.fixture(scope="module")
def exports(tmp_path_factory):
    from wtconv_export.onnx_export import export_onnx
    from wtconv_export.onnx_models import DEFAULT_SOURCE, build_model

    out = tmp_path_factory.mktemp("onnx")
    model, description = build_model(DEFAULT_SOURCE)
    paths = {}
    for name, (ops, precision) in MODELS.items():
        paths[name] = out / f"{name}.onnx"
        export_onnx(model, paths[name], ops=ops, precision=precision, input_shape=(1, 1, 32, 32), metadata=description)
    return paths


ENV_MARK = "WTCONV_TEST_SERVER_ENVIRONMENT"


@pytest.fixture(scope="module")
def served(install, exports, tmp_path_factory):
    repo = tmp_path_factory.mktemp("repo")
    for name, path in exports.items():
        # On the CPU, as the direct runs it is compared with (a GPU with onnxruntime-gpu would take the CUDA EP).
        plan = check_python_repository(
            path, repo, name=name, runtime="onnxruntime", device="cpu", max_batch_size=BATCH, threads=1
        )
        write_python_repository(plan)
    queue = Tuning(buckets=(BATCH,), max_queue_size=QUEUE, queue_timeout_ms=100)
    plan = check_python_repository(
        exports["digits"],
        repo,
        name=QUEUED,
        runtime="onnxruntime",
        device="cpu",
        max_batch_size=BATCH,
        threads=1,
        tuning=queue,
    )
    write_python_repository(plan)
    server = TritonServer(
        repo,
        http_port=0,
        grpc_port=0,
        model_control="poll",
        load_models=[*MODELS, QUEUED],
        log_file=repo.parent / "server.log",
        environment={ENV_MARK: "given"},  # test_the_server_and_its_stubs_run_with_the_environment_given
        install=install,
    )
    try:
        server.start(timeout=240)
        server.watch(interval=0.25)
        yield server
    finally:
        status = server.stop()
        assert server.process is None or status is not None
        assert not server.stub_pids()


@pytest.fixture(scope="module")
def digits():
    model, config = load_default_model()
    x, labels = load_heldout_digits(config)
    with torch.no_grad():
        reference = model(x).numpy()
    return x.numpy(), labels.numpy(), reference, config


def infer(client, module, name, x, output="output"):
    tensor = module.InferInput("input", list(x.shape), "FP16" if x.dtype == np.float16 else "FP32")
    tensor.set_data_from_numpy(np.ascontiguousarray(x))
    return client.infer(name, [tensor]).as_numpy(output)


def batches(x):
    return [x[i : i + BATCH] for i in range(0, len(x), BATCH)]


@pytest.mark.parametrize("name, dtype, rel_tol", [("digits", np.float32, 1e-5), ("digits_fp16", np.float16, 2e-2)])
def test_heldout_digits_over_http_and_grpc(served, exports, digits, name, dtype, rel_tol):
    """Every held-out digit through both protocols: bit-identical to ONNX Runtime on the same file in this
    process, within the precision's tolerance of PyTorch, same predictions, the recorded accuracy."""
    x, labels, reference, config = digits
    direct = OnnxRuntimeRunner(exports[name])
    assert direct.input_dtype == dtype
    expected = np.concatenate([direct(b.astype(dtype)) for b in batches(x)])
    http = httpclient.InferenceServerClient(served.http_url)
    grpc = grpcclient.InferenceServerClient(served.grpc_url)
    assert http.is_server_ready() and grpc.is_model_ready(name)
    meta = grpc.get_model_metadata(name)
    assert meta.inputs[0].datatype == ("FP16" if dtype == np.float16 else "FP32")
    for client, module in ((http, httpclient), (grpc, grpcclient)):
        got = np.concatenate([infer(client, module, name, b.astype(dtype)) for b in batches(x)])
        assert got.dtype == dtype and got.shape == (len(x), 10)
        assert np.array_equal(got, expected), f"{module.__name__}: not bit-identical to direct ONNX Runtime"
        assert np.abs(got.astype(np.float64) - reference).max() / np.abs(reference).max() <= rel_tol
        assert (got.argmax(1) == reference.argmax(1)).all()
        assert (got.argmax(1) == labels).mean() == pytest.approx(config["heldout_accuracy"], abs=1e-9)


def run_client(*argv, timeout=240):
    """samples/triton_client.py as a user runs it: (exit status, stdout, stderr)."""
    done = subprocess.run(
        [sys.executable, str(ROOT / "samples" / "triton_client.py"), *map(str, argv)],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    return done.returncode, done.stdout, done.stderr


@pytest.mark.parametrize("name, memory", [("digits", "none"), ("digits_fp16", "none"), ("digits_fp16", "system")])
def test_client_sample_checks_against_the_onnx_file(served, exports, name, memory):
    """samples/triton_client.py against each served digits model, with the ONNX file it serves: the input's name,
    shape and datatype read from the server, the held-out digits sent (in the requests, or through system shared
    memory: each request's images in a region of /dev/shm, its answer in another), every answer bit-identical to
    ONNX Runtime run in the client, the held-out accuracy of both, and no region left behind."""
    argv = ("--url", served.grpc_url, "--model", name, "--onnx", exports[name], "--count", 64)
    status, out, err = run_client(*argv, "--shared-memory", memory)
    assert status == 0, out + err
    datatype = "FP16" if name.endswith("fp16") else "FP32"
    assert f"64 images through Triton model '{name}'" in out and f"input 'input' {datatype} [1, 32, 32]" in out
    assert ("; tensors in system shared memory" in out) == (memory == "system")
    assert "bit-identical; top-1 agreement 1.0000" in out and "accuracy on the held-out digits: served" in out
    assert out.rstrip().endswith("PASSED")
    assert client_regions(served) == ([], [])  # no process's: the sample's is gone


def client_regions(served, pid=None) -> tuple[list, list]:
    """(the client regions the server has registered, those in /dev/shm): of process ``pid``, or of any."""
    prefix = PREFIX + ("" if pid is None else f"{pid}_")
    registered = registered_regions(grpcclient.InferenceServerClient(served.grpc_url), "system")
    files = sorted(p.name for p in Path("/dev/shm").glob(prefix + "*"))
    return [name for name in registered if name.startswith(prefix)], files


def test_client_sample_ctrl_c_leaves_no_shared_memory(served):
    """Ctrl-C while the sample sends its requests through system shared memory: one line, exit status 130, its two
    regions unregistered from the server and gone from /dev/shm."""
    command = [sys.executable, str(ROOT / "samples" / "triton_client.py"), "--url", served.grpc_url]
    command += ["--model", "digits_std", "--count", "30000", "--batch", "8", "--shared-memory", "system"]
    client = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=interruptible
    )
    try:
        deadline = time.monotonic() + 120
        while len(client_regions(served, client.pid)[0]) < 2:
            assert client.poll() is None and time.monotonic() < deadline, client.communicate()
            time.sleep(0.05)
        time.sleep(0.2)  # requests under way
        client.send_signal(signal.SIGINT)
        out, err = client.communicate(timeout=60)
    finally:
        if client.poll() is None:
            client.kill()
    assert client.returncode == 130 and err.strip().splitlines() == ["triton_client: interrupted"], (out, err)
    assert client_regions(served, client.pid) == ([], [])


def test_client_sample_says_what_does_not_fit(served, exports, tmp_path):
    """Arrays of the user's (--inputs) with a --batch above the served max_batch_size (said, and sent in requests
    of the maximum), another export of the same model (not bit-identical, within the tolerance; beyond a zero one:
    exit 1), and every way the check cannot run: exit 2, one line (an unreadable picture, the server's HTTP port
    given to this gRPC client, named as such)."""
    arrays = tmp_path / "arrays.npz"
    rng = np.random.default_rng(3)
    np.savez(
        arrays,
        a=rng.standard_normal((BATCH + 2, 1, 32, 32), np.float32),
        b=rng.standard_normal((3, 1, 32, 32), np.float32),
    )
    status, out, err = run_client(
        "--url",
        served.grpc_url,
        "--model",
        "digits",
        "--onnx",
        exports["digits_std"],
        "--inputs",
        arrays,
        "--batch",
        10**5,
    )
    assert status == 0 and f"{BATCH + 5} images" in out and "bit-identical" not in out and "PASSED" in out, out + err
    said = f"--batch 100000: model 'digits' is served with max_batch_size {BATCH}; sending requests of {BATCH}"
    assert said in out and f"batches of {BATCH};" in out, out
    zero = ("--atol", 0, "--rtol", 0)
    status, out, err = run_client("--url", served.grpc_url, "--model", "digits", "--onnx", exports["digits_std"], *zero)
    assert status == 1 and "FAILED: the served answers differ" in out, out + err
    wrong = np.zeros((2, 3, 32, 32), np.float32)
    np.save(tmp_path / "rgb.npy", wrong)
    (tmp_path / "notapicture.jpg").write_text("a text file with a picture's name\n")
    cases = [
        (
            ("--model", "digits", "--onnx", exports["digits"], "--images", tmp_path / "notapicture.jpg"),
            f"--images {tmp_path / 'notapicture.jpg'}: cannot read it as a picture",
        ),
        (("--model", "no_such_model"), "model 'no_such_model' is not ready on"),
        (("--model", "digits", "--onnx", exports["digits_fp16"]), "takes input 'input' FP16"),
        (("--model", "digits", "--onnx", tmp_path / "missing.onnx"), "does not exist"),
        (("--model", "digits", "--inputs", tmp_path / "rgb.npy"), "takes [B, 1, 32, 32]"),
        (("--model", "digits", "--shape", "3,32,32"), "--shape 3,32,32: expected C,H,W fitting the served input"),
    ]
    for argv, phrase in cases:
        status, out, err = run_client("--url", served.grpc_url, *argv)
        lines = err.strip().splitlines()
        assert status == 2 and lines and phrase in lines[-1] and "Traceback" not in err, (argv, out, err)
    status, out, err = run_client("--url", served.http_url, "--model", "digits")
    assert status == 2 and len(err.strip().splitlines()) == 1, (out, err)
    assert f"{served.http_url} is Triton's HTTP endpoint" in err and "--url HOST:PORT" in err, err


def test_bounded_load(served, exports):
    """2,000 requests from 16 concurrent gRPC clients, batches of 1/2/4/8, distinct inputs: none failed or lost,
    each response equal to its own request's expected output; latency and throughput printed."""
    runner = OnnxRuntimeRunner(exports["digits_std"])
    pool = load.input_pool({"source": "default"}, (1, 32, 32), np.float32, size=600)
    expected = load.expected_outputs(runner, pool)
    report = load.run_load(
        served.grpc_url,
        "digits_std",
        pool,
        expected,
        protocol="grpc",
        requests=2000,
        concurrency=16,
        batch_sizes=(1, 2, 4, 8),
        time_limit_s=150,
    )
    print("\n" + report.line())
    assert report.completed == 2000, report.summary()
    assert report.failed == report.lost == report.mismatched == 0, report.summary()
    summary = report.summary()
    assert 0 < summary["latency_ms"]["p50"] <= summary["latency_ms"]["p99"]
    for protocol, url in (("http", served.http_url), ("grpc", served.grpc_url)):  # through system shared memory
        shared = load.run_load(
            url,
            "digits_std",
            pool,
            expected,
            protocol=protocol,
            requests=400,
            concurrency=16,
            batch_sizes=(1, 2, 4, 8),
            time_limit_s=60,
            shared_memory="system",
        )
        print(shared.line())
        assert shared.completed == 400 and shared.mismatched == 0 and shared.bit_identical == 400, shared.summary()
        assert client_regions(served, os.getpid()) == ([], [])


def test_the_load_generator_leaves_no_shared_memory_after_errors(served):
    """Requests that all fail (a model the server does not have) through system shared memory: every one counted as
    failed, and the regions (the pool's, and one per client for the answers) unregistered and removed."""
    pool = load.input_pool({"source": "default"}, (1, 32, 32), np.float32, size=64)
    report = load.run_load(
        served.grpc_url,
        "no_such_model",
        pool,
        np.zeros((64, 10), np.float32),
        requests=20,
        concurrency=4,
        batch_sizes=(1, 2),
        shared_memory="system",
    )
    assert report.failed == 20 and report.completed == 0 and "unknown model" in report.errors[0], report.summary()
    assert client_regions(served, os.getpid()) == ([], [])


@pytest.mark.parametrize("memory", ["none", "system"])
def test_the_sweeps_client_processes_send_from_either_place(served, memory):
    """A point of the timed sweep from a client process, its requests carrying their images or naming rows of the
    pool laid out once in a region: answered, none failed, and the region gone with the workers."""
    pool = load.input_pool({"source": "default"}, (1, 32, 32), np.float32, size=64)
    with LoadWorkers(served.grpc_url, "digits_std", pool, "input", 40, 1, shared_memory=memory, largest=8) as workers:
        point = workers.point(8, [1, 2, 4, 8], 1.0, warmup_s=2.0)
    assert point.completed > 0 and point.failed == 0, point.summary()
    assert client_regions(served, os.getpid()) == ([], [])


@pytest.mark.parametrize("connections", ["process", "client"])
def test_the_sweeps_clients_hold_a_connection_per_process_or_each_their_own(served, connections):
    """The server's established connections on its gRPC port, read from its own sockets (/proc) while a point of 12
    requests in flight from 2 client processes runs: 2 with a connection per process (at most one more, another
    client of this test session's), at least 12 with one per request in flight; every request answered either way."""
    from wtconv_serving.traffic.soak import client_connections

    pool = load.input_pool({"source": "default"}, (1, 32, 32), np.float32, size=64)
    port, seen, done = served.ports["grpc"], [], threading.Event()

    def look():
        while not done.wait(0.1):
            seen.append(client_connections(served.process.pid, port))

    watcher = threading.Thread(target=look)
    with LoadWorkers(served.grpc_url, "digits_std", pool, "input", 40, 2, largest=4, connections=connections) as w:
        watcher.start()
        try:
            point = w.point(12, [1, 2, 4], 2.0, warmup_s=1.0)
        finally:
            done.set()
            watcher.join()
    assert point.completed > 0 and point.failed == 0, point.summary()
    assert point.summary()["connections"] == connections
    if connections == "process":
        assert 2 <= max(seen) <= 3, seen
    else:
        assert max(seen) >= 12, seen


def test_the_sweeps_rate_is_the_servers_over_the_same_window(served):
    """A point's images per second count the answers that arrive inside its window, whenever their requests were sent,
    so that it is the rate in steady state at any latency; the server's own rate over the same window (Triton's
    statistics: the images of the batches it executed, over the time between the two readings) is the oracle. Here 256
    requests of 8 images are in flight, so a request's latency is a good part of the 2 s window: counting only the
    requests both sent and answered inside it leaves out about one latency's worth of answers (the rate read low by
    latency / window, more than the tolerance)."""
    from wtconv_serving.traffic.sweep import model_stats

    pool = load.input_pool({"source": "default"}, (1, 32, 32), np.float32, size=64)
    with LoadWorkers(served.grpc_url, "digits_std", pool, "input", 40, 2, largest=8) as workers:
        point = workers.point(256, [8], 2.0, warmup_s=2.0, stats=lambda: model_stats(served.http_url, "digits_std"))
    summary = point.summary()
    latency_share = summary["latency_ms"]["p50"] / 1e3 / point.window_s
    assert point.failed == 0 and point.executed, summary
    assert latency_share > 0.1, summary  # the case: without it both counts agree either way
    assert point.images_per_s == pytest.approx(point.executed_images_per_s, rel=0.05), (latency_share, summary)


def post(url, path, body: bytes, headers=None):
    host, port = url.split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    conn.request("POST", path, body=body, headers=headers or {})
    response = conn.getresponse()
    data = response.read()
    conn.close()
    return response.status, data.decode(errors="replace")


def test_the_server_and_its_stubs_run_with_the_environment_given(served):
    """TritonServer's ``environment`` reaches the server process and every backend stub it starts (how serve --mps
    makes them clients of its MPS daemon), on top of the launcher's own (LD_LIBRARY_PATH)."""
    pids = [served.process.pid, *served.stub_pids()]
    assert len(pids) > 1
    for pid in pids:
        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        assert f"{ENV_MARK}=given".encode() in environ, pid
        assert any(v.startswith(b"LD_LIBRARY_PATH=") for v in environ), pid


def test_bad_requests_get_clear_errors_and_the_server_keeps_serving(served, digits):
    x = digits[0][:4]
    good = infer(grpcclient.InferenceServerClient(served.grpc_url), grpcclient, "digits_std", x)
    client = grpcclient.InferenceServerClient(served.grpc_url)
    cases = [
        ("wrong shape", "digits_std", np.zeros((2, 1, 16, 16), np.float32), "FP32", "unexpected shape"),
        ("wrong dtype", "digits_std", np.zeros((2, 1, 32, 32), np.float64), "FP64", "FP64"),
        ("batch over max", "digits_std", np.zeros((BATCH + 1, 1, 32, 32), np.float32), "FP32", f"must be <= {BATCH}"),
        ("unknown model", "no_such_model", x, "FP32", "unknown model"),
    ]
    for what, name, array, datatype, message in cases:
        tensor = grpcclient.InferInput("input", list(array.shape), datatype)
        tensor.set_data_from_numpy(array)
        with pytest.raises(InferenceServerException, match=message):
            client.infer(name, [tensor])
        assert np.array_equal(infer(client, grpcclient, "digits_std", x), good), f"after {what}"
    header = json.dumps(
        {
            "inputs": [
                {
                    "name": "input",
                    "shape": [4, 1, 32, 32],
                    "datatype": "FP32",
                    "parameters": {"binary_data_size": x.nbytes},
                }
            ]
        }
    ).encode()
    path = "/v2/models/digits_std/infer"
    status, text = post(served.http_url, path, b"", {"Content-Type": "application/json"})
    assert status == 400 and "error" in text
    truncated = header + x.tobytes()[:1000]
    status, text = post(served.http_url, path, truncated, {"Inference-Header-Content-Length": str(len(header))})
    assert status == 400 and "error" in text, text
    status, _ = post(served.http_url, path, header + x.tobytes(), {"Inference-Header-Content-Length": str(len(header))})
    assert status == 200
    assert np.array_equal(infer(client, grpcclient, "digits_std", x), good)


def test_the_watch_reloads_the_model_when_asked(served, digits):
    """The watch's other recovery, recover="reload": a stub killed with nothing in flight, the model loaded again in
    the same server process by new stubs, and Triton's log then says the old version was unloaded (with no request
    in flight nothing holds it: docs/serving.md, "The soak")."""
    x = digits[0][:BATCH]
    client = grpcclient.InferenceServerClient(served.grpc_url)
    good = infer(client, grpcclient, "digits_std", x)
    pid, count = served.process.pid, len(served.recoveries)
    before = {p for p, model in served.stubs().items() if model == "digits_std"}
    served.recover = "reload"
    try:
        for p in before:
            os.kill(p, signal.SIGKILL)
        deadline = time.monotonic() + 120
        while len(served.recoveries) == count and time.monotonic() < deadline:
            time.sleep(0.2)
    finally:
        served.recover = "restart"
    recovery = served.recoveries[-1]
    assert recovery.way == "reload" and recovery.error is None and recovery.server_pid == pid == served.process.pid
    after = {p for p, model in served.stubs().items() if model == "digits_std"}
    assert after and not after & before
    assert np.array_equal(infer(client, grpcclient, "digits_std", x), good)
    deadline = time.monotonic() + 30
    while recovery.old_version_unloaded is None and time.monotonic() < deadline:
        served.follow_unloads()
        time.sleep(0.2)
    assert recovery.old_version_unloaded is True, served.log_text(recovery.log_offset)


def test_soak_with_the_backend_killed_midway(served, exports):
    """The soak's CPU version: seconds of load at 8 in flight through system shared memory, the model's backend stub
    killed halfway. The failure reaches the clients in flight, the watch restarts the server (the default recovery:
    a stub that dies with requests in flight leaves the old version in the server for good, docs/serving.md, "The
    soak"), the clients register their regions again with the new process, every request is retried until answered
    and matched (none lost, failed or wrong, no error outside the kill and the restart), the memory of the server and
    its stubs and the server's client connections are sampled every second (but not from the kill until the server
    is back), and the regions are gone at
    the end. The old server process is gone, with whatever the old version held, and the new one loaded the model
    once. The tests after this one run on the restarted server."""
    from wtconv_serving.traffic.soak import run_soak

    runner = OnnxRuntimeRunner(exports["digits_std"])
    pool = load.input_pool({"source": "default"}, (1, 32, 32), np.float32, size=400)
    expected = load.expected_outputs(runner, pool)
    before = {pid for pid, model in served.stubs().items() if model == "digits_std"}
    assert before
    old_server = served.process.pid
    old_regions = {region for _, region in served._stub_processes().values() if region}
    report = run_soak(
        served,
        "digits_std",
        pool,
        expected,
        duration_s=6.0,
        concurrency=8,
        batch_sizes=(1, 2, 4),
        shared_memory="system",
        sample_every_s=1.0,
    )
    print("\n" + report.line())
    load_report = report.load
    assert report.killed_at_s is not None and report.recovered_at_s is not None and report.recovery_error is None
    own, others = report.kill_errors()
    assert own > 0 and others == 0, load_report.errors[:5]  # a client saw the backend die, nothing else failed
    assert load_report.completed == load_report.requests > 0 and load_report.retried > 0
    assert load_report.failed == load_report.lost == load_report.mismatched == 0, report.summary()
    # every sample is of a whole server, stubs included: some before the kill (every second from the start), at least
    # the last one after the recovery, none in between
    assert all(s["host_rss_mib"] > 0 and s["stubs_rss_mib"] > 0 for s in report.samples), report.samples
    # the server's resident memory split into what it allocated and the regions it maps (with its files, proc(5))
    assert all(0 < s["server_anon_mib"] and 0 < s["server_shmem_mib"] for s in report.samples), report.samples
    assert all(s["server_anon_mib"] + s["server_shmem_mib"] <= s["server_rss_mib"] + 0.1 for s in report.samples)
    assert len([s for s in report.samples if s["t_s"] < report.killed_at_s]) >= 2, report.samples
    assert [s for s in report.samples if s["t_s"] >= report.recovered_at_s], report.samples
    assert not [s for s in report.samples if report.killed_at_s <= s["t_s"] < report.recovered_at_s], report.samples
    assert report.summary()["memory_growth"]["host"] is not None
    # The clients hold a connection each from the start (as independent clients do), so the restarted server meets
    # the connections the first one met: at least 8 while the load ran before the kill (the regions' own client may
    # hold one more), never more than then.
    connections = [s["server_connections"] for s in report.samples]
    running = [s["server_connections"] for s in report.samples if 0.5 < s["t_s"] < report.killed_at_s]
    assert running and min(running) >= 8 and max(connections) <= max(running), report.samples
    after = {pid for pid, model in served.stubs().items() if model == "digits_std"}
    assert after and not after & before
    assert client_regions(served, os.getpid()) == ([], [])
    # Restarted: a new server process, the old one and its stubs gone, their regions kept for stop to remove.
    assert report.recovered_by == "restart" and report.server_pids == (old_server, served.process.pid)
    assert served.process.pid != old_server and not Path(f"/proc/{old_server}").exists()
    assert old_regions and old_regions <= served.shm_regions
    assert report.old_version_unloaded is True and served.recoveries[-1].server_restarted
    assert served.log_text(served.log_start).count("successfully loaded 'digits_std'") == 1
    assert "the server restarted" in report.line()
    # Where the restart's time went: the old group gone within the wait, Triton's first line (its CUDA or CPU start)
    # before its readiness, and the phases written on the restart line between the two processes' output.
    times = report.restart_times
    assert times["still_ending"] == [] and min(times["drain_s"], times["kill_s"], times["ports_s"]) >= 0, times
    assert times["first_line_s"] is not None and 0 <= times["first_line_s"] <= times["ready_s"], times
    restart_line = served.log_text(0, served.log_start).splitlines()[-1]
    assert restart_line.startswith(f"{RESTART_LINE} at {times['launched_at']} (pid {old_server} ended: ")
    assert re.search(r"; drain [\d.]+ s, kill [\d.]+ s, group gone [\d.]+ s, ports [\d.]+ s\)$", restart_line)


def test_grpc_clients_are_answered_at_once_when_a_long_restart_ends(served, exports, monkeypatch):
    """A restart that keeps the ports closed for about 20 s (the model loading), under gRPC's own reconnect backoff
    (120 s at most, where a client's next attempt may come many seconds after the server is back): the load's clients
    replace a client that meets UNAVAILABLE with one on a connection of its own, so that none is refused later than
    about a second after the restarted server is ready (docs/serving.md, "The soak")."""
    from wtconv_serving.server import launcher
    from wtconv_serving.traffic.soak import run_soak

    monkeypatch.setattr(load, "RECONNECT_BACKOFF_MS", 120_000)  # gRPC's default: the clients' own cap is no help here
    launch = launcher.TritonServer._launch

    def slow_launch(server, backends, mode):
        if mode == "ab":  # the restart's: the old process is gone, its ports closed
            time.sleep(12.0)
        return launch(server, backends, mode)

    monkeypatch.setattr(launcher.TritonServer, "_launch", slow_launch)
    runner = OnnxRuntimeRunner(exports["digits_std"])
    pool = load.input_pool({"source": "default"}, (1, 32, 32), np.float32, size=200)
    expected = load.expected_outputs(runner, pool)
    report = run_soak(
        served, "digits_std", pool, expected, duration_s=30.0, concurrency=16, batch_sizes=(1, 2), sample_every_s=10.0
    )
    print("\n" + report.line())
    assert report.recovered_by == "restart" and report.recovery_error is None
    assert report.recovered_at_s - report.killed_at_s > 12.0
    late = [t - report.recovered_at_s for t in report.load.error_times if t > report.recovered_at_s]
    assert max(late, default=0.0) < load.FRESH_CLIENT_EVERY_S + 1.0, (late, report.load.errors[-3:])
    assert report.load.failed == report.load.lost == report.load.mismatched == 0 and report.passed


def test_repository_that_does_not_load_is_refused_in_one_line(install, tmp_path):
    repo = tmp_path / "repo"
    (repo / "broken" / "1").mkdir(parents=True)
    (repo / "broken" / "config.pbtxt").write_text(
        'name: "broken"\nbackend: "python"\nmax_batch_size: 4\n'
        'input [ { name: "input" data_type: TYPE_FP32 dims: [ 2 ] } ]\n'
        'output [ { name: "output" data_type: TYPE_FP32 dims: [ 2 ] } ]\n'
    )
    (repo / "broken" / "1" / "model.py").write_text("raise ImportError('this model cannot load')\n")
    server = TritonServer(repo, http_port=0, grpc_port=0, install=install, log_file=tmp_path / "log.txt")
    start = time.monotonic()
    with pytest.raises(
        ServingError, match="stopped before it was ready: failed to load 'broken'.*this model cannot load"
    ) as error:
        server.start(timeout=120)
    assert "\n" not in str(error.value)
    assert time.monotonic() - start < 120
    assert server.process.poll() is not None


def test_cli_serves_until_sigterm(install, tmp_path):
    """`wtconv-trt serve` on a one-node model with the engine built from it, bound to every interface (--host
    0.0.0.0): ready, answers, keeps the repository API closed with nothing secret on the server's command line, and
    on SIGTERM stops the server and its stub. Given an engine of another model instead, it refuses in one line and
    starts no server. (The engines are stand-ins, a manifest and bytes, which travel in the repository: on this
    machine ONNX Runtime serves the ONNX file.)"""
    from engine_helpers import fake_engine, fake_engine_of_tiny_onnx
    from test_serving_repository import tiny_onnx

    onnx_path = tiny_onnx(tmp_path / "relu.onnx")
    ours, _ = fake_engine_of_tiny_onnx(tmp_path, onnx_path, name="relu.fp32.engine")
    (tmp_path / "other").mkdir()
    theirs, _ = fake_engine(tmp_path / "other", name="digits.fp16.engine")  # the digits model's, fp16
    serve = [sys.executable, "-m", "wtconv_trt", "serve", str(onnx_path), "--repo", str(tmp_path / "repo")]
    serve += ["--runtime", "onnxruntime", "--http-port", "0", "--grpc-port", "0", "--metrics-port", "0"]
    refused = subprocess.run([*serve, "--engine", str(theirs)], capture_output=True, text=True, timeout=120)
    assert refused.returncode == 2 and "was built from model.onnx, not from relu.onnx" in refused.stderr, refused
    assert len(refused.stderr.strip().splitlines()) == 1 and not (tmp_path / "repo").exists()
    process = subprocess.Popen(
        [*serve, "--engine", str(ours), "--log", str(tmp_path / "server.log"), "--host", "0.0.0.0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        lines = []
        for line in process.stdout:
            lines.append(line)
            if line.startswith("serving 'relu'"):
                break
        assert lines and lines[-1].startswith("serving 'relu'"), "".join(lines)
        assert any("reachable from the network" in line for line in lines), "".join(lines)
        grpc_url = lines[-1].split("gRPC ")[1].split(",")[0].split(" ")[0]
        http_url = lines[-1].split("HTTP ")[1].split(",")[0].split(" ")[0]
        x = np.linspace(-1, 1, 2 * 64, dtype=np.float32).reshape(2, 1, 8, 8)
        got = infer(grpcclient.InferenceServerClient(grpc_url), grpcclient, "relu", x)
        assert np.array_equal(got, np.maximum(x, 0))
        [server] = [pid for pid in children_of(process.pid) if server_argv(pid)[0].endswith("bin/tritonserver")]
        argv = server_argv(server)
        assert "--http-address=0.0.0.0" in argv and not [a for a in argv if "restricted" in a], argv
        check_repository_api_closed(http_url, grpc_url, "relu")
        # The server polls its repository every POLL_S: nothing of the model's may change while it serves (the
        # stub's bytecode was written with the repository), so no poll reloads it and the watch sees no dead stub.
        time.sleep(3 * POLL_S)
        process.send_signal(signal.SIGTERM)
        assert process.wait(60) == 0
        rest = process.stdout.read()
        assert "died" not in "".join(lines) + rest, rest
        server_log = (tmp_path / "server.log").read_text()
        assert "Waiting for in-flight requests to complete" in server_log or "successfully unloaded" in server_log
    finally:
        if process.poll() is None:  # SIGTERM first: serve stops its server (a killed serve would leave it running)
            process.terminate()
            try:
                process.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()


def children_of(parent: int) -> list[int]:
    """The processes whose parent is ``parent``."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1]) == parent:
                found.append(int(entry.name))
        except (OSError, IndexError, ValueError):
            continue
    return found


def check_client_shape_and_images(command: list[str], tmp_path: Path) -> None:
    """The printed client line's other inputs against the served U-Net (its repository fixes the export's size,
    3x32x32): --shape of that size runs, another size is refused in one line before any request; two pictures
    (--images, one resized to the export's size) are answered as ONNX Runtime answers them."""
    from PIL import Image

    client = [sys.executable, *command[1:]]
    done = subprocess.run([*client, "--shape", "3,40,48"], capture_output=True, text=True, cwd=tmp_path, timeout=240)
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr.splitlines()[-1] == (
        "triton_client: error: --shape 3,40,48: expected C,H,W fitting the served input [3, 32, 32] (-1: any size)"
    ), done.stderr
    done = subprocess.run(
        [*client, "--shape", "3x32x32", "--count", "5", "--batch", "2"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=240,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "5 images through" in done.stdout and "batches of 2" in done.stdout, done.stdout
    assert done.stdout.rstrip().endswith("PASSED"), done.stdout

    rng = np.random.default_rng(7)
    pictures = []
    for i, size in enumerate(((50, 30), (32, 32))):  # (width, height): one resized, one as exported
        pictures.append(tmp_path / f"picture{i}.png")
        Image.fromarray(rng.integers(0, 256, (size[1], size[0], 3), dtype=np.uint8), "RGB").save(pictures[-1])
    done = subprocess.run(
        [*client, "--images", *map(str, pictures)], capture_output=True, text=True, cwd=tmp_path, timeout=240
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "2 images through" in done.stdout and "input 'input' FP32 [3, 32, 32]" in done.stdout, done.stdout
    assert done.stdout.rstrip().endswith("PASSED"), done.stdout


def check_loading_phases(log_text: str, model: str) -> None:
    """loading_phase, which serve prints while it waits, read on a real server's log cut at each step: before the
    model's loading line, after it, after our backend's 'runtime ... loaded' line (the config's warm-up requests
    then run), and the whole log."""
    lines = log_text.splitlines(keepends=True)

    def upto(marker: str) -> str:
        index = next(i for i, line in enumerate(lines) if marker in line)
        return "".join(lines[: index + 1])

    loading = upto(f'"loading: {model}:')
    assert loading_phase(loading[: loading.rindex("\n", 0, len(loading) - 1) + 1]) == "starting"
    assert loading_phase(loading) == f"loading '{model}' (its runtime and model files)"
    warming = loading_phase(upto(f'"{model}: runtime '))
    assert warming.startswith(f"warming up '{model}' (runtime onnxruntime, loaded in "), warming
    assert f"successfully loaded '{model}'" in log_text
    assert loading_phase(log_text) == "models loaded, starting the endpoints"


def test_serve_of_a_model_of_ones_own_client_line_and_ctrl_c(install, tmp_path):
    """``wtconv-trt serve unet.onnx`` for a network built on the published WTConv2d (three channels, an image-shaped
    output): the runtime it serves on is said before the wait; the client line it prints runs as printed and
    checks every answer against the ONNX file; Ctrl-C ends it with status 130 and one line, the server stopped."""
    import shlex
    import socket

    from test_own_model import make_unet

    from wtconv_export.onnx_export import export_onnx

    onnx_path = tmp_path / "unet.onnx"
    unet = make_unet(seed=3)
    export_onnx(unet, onnx_path, input_shape=(1, 3, 32, 32))
    with torch.no_grad():
        per_image = list(unet(torch.zeros(1, 3, 32, 32)).shape[1:])
    argv = [sys.executable, "-m", "wtconv_trt", "serve", str(onnx_path), "--repo", str(tmp_path / "repo")]
    argv += ["--http-port", "0", "--grpc-port", "0", "--metrics-port", "0", "--log", str(tmp_path / "server.log")]
    process = subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path, preexec_fn=interruptible
    )
    try:
        lines = []
        for line in process.stdout:
            lines.append(line.rstrip("\n"))
            if line.startswith("client: "):
                break
        text = "\n".join(lines)
        assert lines and lines[-1].startswith("client: "), text + process.stderr.read()
        runtime = next(i for i, line in enumerate(lines) if line.startswith("serving on this machine: runtime"))
        assert runtime < next(i for i, line in enumerate(lines) if line.startswith("serving 'unet'")), text
        command = shlex.split(lines[-1][len("client: ") :].split("   (")[0])
        assert command[0] == "python" and command[1].endswith("samples/triton_client.py"), command
        done = subprocess.run([sys.executable, *command[1:]], capture_output=True, text=True, cwd=tmp_path, timeout=240)
        assert done.returncode == 0, done.stdout + done.stderr
        assert "input 'input' FP32 [3, 32, 32]" in done.stdout and f"output 'output' {[32, *per_image]}" in done.stdout
        assert "bit-identical" in done.stdout and done.stdout.rstrip().endswith("PASSED"), done.stdout
        grpc_port = int(command[command.index("--url") + 1].rsplit(":", 1)[1])
        check_client_shape_and_images(command, tmp_path)

        process.send_signal(signal.SIGINT)
        assert process.wait(60) == 130
        err = [line for line in process.stderr.read().splitlines() if line.strip()]
        assert err[-1] == "wtconv-trt serve: interrupted", err
        with socket.socket() as probe:  # the server went with it
            assert probe.connect_ex(("127.0.0.1", grpc_port)) != 0
        check_loading_phases((tmp_path / "server.log").read_text(), "unet")
    finally:
        if process.poll() is None:  # SIGTERM first: serve stops its server (a killed serve would leave it running)
            process.terminate()
            try:
                process.wait(60)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


# Triton 2.51's answer to a load or unload request under model control "none" or "poll".
CLOSED = "explicit model load / unload is not allowed if polling is enabled"


def server_argv(server_pid: int) -> list[str]:
    return Path(f"/proc/{server_pid}/cmdline").read_bytes().decode().split("\0")


def check_repository_api_closed(http_url: str, grpc_url: str, model: str) -> None:
    """Unload, load, and load with a model file of the caller's (the way foreign code would get in) are refused over
    HTTP and gRPC, whatever headers the request carries; the model keeps serving."""
    import base64

    json_type = {"Content-Type": "application/json"}
    for action in ("unload", "load"):
        status, text = post(http_url, f"/v2/repository/models/{model}/{action}", b"{}", json_type)
        assert status == 503 and CLOSED in text, (action, status, text)
    intruder = json.dumps(
        {
            "parameters": {
                "config": '{"backend": "python"}',
                "file:1/model.py": base64.b64encode(b"raise SystemExit").decode(),
            }
        }
    ).encode()
    status, text = post(http_url, "/v2/repository/models/intruder/load", intruder, json_type)
    assert status == 503 and CLOSED in text, (status, text)
    grpc = grpcclient.InferenceServerClient(grpc_url)
    with pytest.raises(InferenceServerException, match=CLOSED):
        grpc.unload_model(model)
    with pytest.raises(InferenceServerException, match=CLOSED):
        grpc.load_model("intruder", config='{"backend": "python"}', files={"file:1/model.py": b"raise SystemExit"})
    assert grpc.is_model_ready(model) and not grpc.is_model_ready("intruder")
    # Triton itself refuses a new log file over the network (what the logging API could write).
    status, text = post(http_url, "/v2/logging", b'{"log_file": "/tmp/x"}', json_type)
    assert status == 501 and "can not be updated through network protocol" in text, (status, text)


def test_the_repository_api_is_closed_to_everyone_and_needs_no_secret(served, digits):
    """The server's command line holds no key (every local user can read it) and no restricted-API option: the
    repository API is closed by the model control mode itself ("poll"), to everyone; the repository Triton reads is a
    private view (only this user can open it) of the models served. Inference, statistics and the repository index
    answer anyone."""
    argv = server_argv(served.process.pid)
    assert not [a for a in argv if "restricted" in a], argv
    assert "--model-control-mode=poll" in argv, argv
    view = Path(next(a for a in argv if a.startswith("--model-repository=")).split("=", 1)[1])
    assert view == served.view and view.stat().st_mode & 0o077 == 0, oct(view.stat().st_mode)
    assert sorted(p.name for p in view.iterdir()) == sorted([*MODELS, QUEUED])
    x = digits[0][:4]
    grpc = grpcclient.InferenceServerClient(served.grpc_url)
    good = infer(grpc, grpcclient, "digits_std", x)
    check_repository_api_closed(served.http_url, served.grpc_url, "digits_std")
    assert np.array_equal(infer(grpc, grpcclient, "digits_std", x), good)
    with urllib.request.urlopen(f"http://{served.http_url}/v2/models/digits_std/stats") as response:
        assert json.loads(response.read())["model_stats"][0]["name"] == "digits_std"
    assert {m.name for m in grpc.get_model_repository_index().models} == {*MODELS, QUEUED}


def test_overload_is_refused_at_once_not_queued(served, exports):
    """Sixteen clients send a batch of 32 at once to a model whose queue holds two requests and drops a request
    after 100 ms of waiting: every request is answered (none lost); those beyond the queue are refused at once,
    sooner than one execution of the model takes by the server's own statistics (not after a growing wait); those
    that waited too long are refused as timed out; those run are answered as ONNX Runtime answers them directly."""
    runner = OnnxRuntimeRunner(exports["digits"])
    pool = load.input_pool({"source": "default"}, (1, 32, 32), np.float32, size=16 * BATCH)
    expected = load.expected_outputs(runner, pool)
    results = [None] * 16
    start = threading.Barrier(16)

    def client(i):
        grpc = grpcclient.InferenceServerClient(served.grpc_url)
        x = pool[i * BATCH : (i + 1) * BATCH]
        start.wait()
        t0 = time.perf_counter()
        try:
            got, error = infer(grpc, grpcclient, QUEUED, x), None
        except InferenceServerException as failure:
            got, error = None, str(failure)
        results[i] = (got, error, time.perf_counter() - t0)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert all(r is not None for r in results), "a request got no answer"
    stats = load_stats(served, QUEUED)
    execution_s = (
        stats["inference_stats"]["compute_infer"]["ns"] / stats["inference_stats"]["compute_infer"]["count"] / 1e9
    )
    full = [r for r in results if r[1] and "Exceeds maximum queue size" in r[1]]
    timed_out = [r for r in results if r[1] and "timeout" in r[1].lower()]
    done = [(i, r) for i, r in enumerate(results) if r[1] is None]
    assert full and done, [r[1] for r in results]
    assert len(full) + len(timed_out) + len(done) == 16, [r[1] for r in results]
    assert max(r[2] for r in full) < execution_s, (max(r[2] for r in full), execution_s)
    for i, (got, _, _) in done:
        assert np.array_equal(got, expected[i * BATCH : (i + 1) * BATCH])


def load_stats(served, model):
    with urllib.request.urlopen(f"http://{served.http_url}/v2/models/{model}/stats") as response:
        return json.loads(response.read())["model_stats"][0]
