"""Every exit of ``wtconv-trt serve`` leaves nothing behind, and Ctrl-C drains: a real ``serve`` with the real
``tritonserver`` on loopback, interrupted while it starts the server, while the model warms up, during its load test,
and while it serves a request; then one that ends by itself.

The model: the shipped digits model exported with WTConv2d nodes and served without libwtconv_ort.so (each test
gives serve an empty cache), so the onnxruntime-extensions Python op runs them: a slow model, whose warm-up at every
bucket up to 128 and whose batches of 128 take long enough to be interrupted in the middle.

Oracles: /proc (no process naming the repository, or the view of it the server reads, is left; the backend stubs'
shared-memory regions, read from their command lines while they run, and the load test's, named by serve's pid, are
gone from /dev/shm), the private temporary
folder serve is given (no tritonserver-* log folder or repository view), the exit status and the last line on
stderr, and the answers of ONNX Runtime on the same file.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("tritonclient.grpc")

import tritonclient.grpc as grpcclient  # noqa: E402
from test_cli_bad_input import interruptible  # noqa: E402

import wtconv_trt  # noqa: E402
from wtconv_serving.server.launcher import SHM_PREFIX  # noqa: E402
from wtconv_serving.traffic.shared_memory import PREFIX as CLIENT_PREFIX  # noqa: E402

pytestmark = pytest.mark.slow  # real serve and tritonserver processes


@pytest.fixture(scope="module")
def slow_model(tmp_path_factory):
    path = tmp_path_factory.mktemp("onnx") / "digits.onnx"
    wtconv_trt.export_onnx(path)
    return path


class Serve:
    """``wtconv-trt serve`` in a child process with its own temporary folder and an empty cache; its stdout read
    line by line in a thread."""

    def __init__(self, tmp_path: Path, model: Path, *argv: str):
        self.tmp = tmp_path / "tmp"
        self.tmp.mkdir()
        self.repo = tmp_path / "repo"
        env = dict(os.environ, TMPDIR=str(self.tmp), WTCONV_TRT_CACHE=str(tmp_path / "cache"), PYTHONUNBUFFERED="1")
        env.pop("WTCONV_ORT_LIB", None)
        command = [sys.executable, "-m", "wtconv_trt", "serve", str(model), "--repo", str(self.repo), "--runtime"]
        command += ["onnxruntime", "--device", "cpu", "--threads", "1", "--http-port", "0", "--grpc-port", "0"]
        command += ["--metrics-port", "0", *argv]
        self.process = subprocess.Popen(
            command,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            cwd=tmp_path,
            preexec_fn=interruptible,
        )
        self.lines: list[str] = []
        self.changed = threading.Condition()
        threading.Thread(target=self._read, daemon=True).start()
        self.regions: set = set()

    def _read(self) -> None:
        for line in self.process.stdout:
            with self.changed:
                self.lines.append(line.rstrip("\n"))
                self.changed.notify_all()

    def wait_line(self, prefix: str, timeout: float = 240.0) -> str:
        deadline = time.monotonic() + timeout
        with self.changed:
            while True:
                found = [line for line in self.lines if line.startswith(prefix)]
                if found:
                    return found[0]
                if self.process.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(f"no line {prefix!r}: {self.lines} {self.process.stderr.read()}")
                self.changed.wait(0.2)

    def server_log(self) -> Path | None:
        logs = list(self.tmp.glob("tritonserver-*/server.log"))
        return logs[0] if logs else None

    def processes(self) -> dict:
        """{pid: argv} of the processes serving our repository: they name it, or the private view of it that the
        server reads, in the run's temporary folder."""
        return {**processes_naming(self.repo), **processes_naming(self.tmp)}

    def note_regions(self) -> None:
        """The shared-memory regions of the backend stubs serving our repository (argv[2] of each stub)."""
        for argv in self.processes().values():
            if argv[0].endswith("triton_python_backend_stub"):
                self.regions |= {a for a in argv[2:3] if a.startswith(SHM_PREFIX)}

    def interrupt(self) -> tuple[int, list[str]]:
        self.process.send_signal(signal.SIGINT)
        status = self.process.wait(120)
        err = [line for line in self.process.stderr.read().splitlines() if line.strip()]
        return status, err

    def client_regions(self) -> list[str]:
        """The shared-memory regions serve's load test made, in /dev/shm (named by serve's pid)."""
        return sorted(p.name for p in Path("/dev/shm").glob(f"{CLIENT_PREFIX}{self.process.pid}_*"))

    def assert_nothing_left(self) -> None:
        assert self.processes() == {}, self.processes()
        assert [name for name in self.regions if Path("/dev/shm", name).exists()] == []
        assert self.client_regions() == []
        ours = [p.name for p in self.tmp.iterdir() if p.name.startswith(("tritonserver-", "wtconv-load-", "tmp"))]
        assert ours == [], "temporary folders left"

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def processes_naming(path: Path) -> dict:
    """{pid: argv} of the processes whose command line names ``path``."""
    found = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                argv = (entry / "cmdline").read_bytes().decode(errors="replace").split("\0")
            except OSError:
                continue
            if any(str(path) in a for a in argv):
                found[int(entry.name)] = argv
    return found


@pytest.fixture
def serve(tmp_path, slow_model):
    runs = []

    def start(*argv):
        runs.append(Serve(tmp_path, slow_model, *argv))
        return runs[-1]

    yield start
    for run in runs:
        run.close()


def test_ctrl_c_while_the_server_starts(serve):
    run = serve()
    run.wait_line("serving on this machine:")
    status, err = run.interrupt()
    assert status == 130 and err[-1] == "wtconv-trt serve: interrupted", err
    run.assert_nothing_left()


def test_ctrl_c_while_the_model_warms_up(serve):
    """Interrupted once our backend has loaded the model and Triton runs the warm-up requests (every bucket up to
    128: seconds with the Python op): the stubs' shared memory (which a killed server used to leave, 19.9 MB and
    1 MB) and the log folder go with the processes."""
    run = serve()
    deadline = time.monotonic() + 240
    while not (run.server_log() and '"digits: runtime onnxruntime' in run.server_log().read_text(errors="replace")):
        assert time.monotonic() < deadline and run.process.poll() is None, run.lines
        time.sleep(0.05)
    run.note_regions()
    assert run.regions, "no backend stub found while the model warms up"
    status, err = run.interrupt()
    assert status == 130 and err[-1] == "wtconv-trt serve: interrupted", err
    assert not run.lines or not any(line.startswith("serving 'digits'") for line in run.lines), run.lines
    run.assert_nothing_left()


def test_ctrl_c_during_the_load_test(serve, tmp_path):
    """Interrupted while the check's requests go through system shared memory: the load test's regions (the pool's,
    and one per client for the answers) go with the rest."""
    argv = ["--load-test", "400", "--json", str(tmp_path / "load.json"), "--max-batch-size", "8", "--no-warmup"]
    run = serve(*argv, "--shared-memory", "system")
    # No --sweep: the line promises no sweep.
    assert run.wait_line("load test:") == (
        "load test: checking 400 requests, then the runner directly (inputs in system shared memory)"
    )
    run.note_regions()
    deadline = time.monotonic() + 240
    while not run.client_regions():
        assert time.monotonic() < deadline and run.process.poll() is None, run.lines
        time.sleep(0.05)
    time.sleep(0.3)  # requests under way
    status, err = run.interrupt()
    assert status == 130 and err[-1] == "wtconv-trt serve: interrupted", err
    assert not (tmp_path / "load.json").exists()
    run.assert_nothing_left()


def test_ctrl_c_drains_the_requests_in_flight(serve, slow_model):
    """Three requests of 16 images sent at once (the model runs at most 32 images a batch, so one of them at least
    is still queued or running when the first answer comes): Ctrl-C right after that first answer lets the others
    finish, answered as ONNX Runtime answers them, then serve exits with 130 and leaves nothing.

    The direct run is the server's: the same file on the same op (the Python op: neither process finds a library in
    its cache), one request at a time. The server may have run two requests as one batch of 32, whose convolutions
    may round differently from a batch of 16, so the answers are compared within fp32 rounding of the logits'
    scale, not bit for bit."""
    from wtconv_serving.runners.ort_runner import OnnxRuntimeRunner

    run = serve("--max-batch-size", "32", "--no-warmup")
    line = run.wait_line("serving 'digits':")
    grpc_url = line.split("gRPC ")[1].split(",")[0]
    run.wait_line("client:")
    run.note_regions()
    x = np.random.default_rng(5).standard_normal((3, 16, 1, 32, 32)).astype(np.float32)
    answers = [None] * 3
    answered = threading.Condition()

    def client(i):
        tensor = grpcclient.InferInput("input", list(x[i].shape), "FP32")
        tensor.set_data_from_numpy(x[i])
        try:
            answer = grpcclient.InferenceServerClient(grpc_url).infer("digits", [tensor]).as_numpy("output")
        except Exception as error:  # noqa: BLE001 - the failure is what the assertion reports
            answer = error
        with answered:
            answers[i] = answer
            answered.notify_all()

    threads = [threading.Thread(target=client, args=(i,)) for i in range(3)]
    for thread in threads:
        thread.start()
    with answered:
        assert answered.wait_for(lambda: any(a is not None for a in answers), 120)
        in_flight = sum(a is None for a in answers)
    status, err = run.interrupt()
    for thread in threads:
        thread.join(60)
    assert in_flight >= 1
    direct = OnnxRuntimeRunner(slow_model)
    assert direct.execution.op == "python", direct.execution.describe()
    for i in range(3):
        assert isinstance(answers[i], np.ndarray), str(answers[i])
        expected = direct(x[i])
        assert np.abs(answers[i] - expected).max() <= 1e-5 * np.abs(expected).max()
    assert status == 130 and err[-1] == "wtconv-trt serve: interrupted", err
    run.assert_nothing_left()
