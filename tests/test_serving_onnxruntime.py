"""``serve --runtime onnxruntime`` with libwtconv_ort.so through a real Triton Inference Server (the nvidia-pytriton
wheel's tritonserver, Python backend): the served model is the exported file itself in ONNX Runtime, its WTConv2d
nodes on the native library the repository carries.

Oracles: the server's own log (the backend stub says what runs the nodes), ONNX Runtime on the same file with the
same library called directly in this process (bit-identical answers), the PyTorch model within the precision's
tolerance, the held-out labels; the load test checks every answer against the same runtime run directly.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

tritonclient = pytest.importorskip("tritonclient.grpc")

import tritonclient.grpc as grpcclient  # noqa: E402

import wtconv_trt  # noqa: E402
from wtconv_serving.runners.ort_runner import OnnxRuntimeRunner  # noqa: E402
from wtconv_serving.server.launcher import TritonServer  # noqa: E402
from wtconv_torch.models import load_default_model, load_heldout_digits  # noqa: E402
from wtconv_trt import cli  # noqa: E402

pytestmark = pytest.mark.slow  # real tritonserver processes: about a minute; CI runs them

MODELS = {"digits": "fp32", "digits_fp16": "fp16"}
TOLERANCE = {"digits": 1e-5, "digits_fp16": 2e-2}
NATIVE = "ONNX Runtime CPU EP, 5 WTConv2d nodes on libwtconv_ort.so"


@pytest.fixture(scope="module")
def exports(tmp_path_factory):
    out = tmp_path_factory.mktemp("onnx")
    for name, precision in MODELS.items():
        wtconv_trt.export_onnx(out / f"{name}.onnx", precision=precision)
    return {name: out / f"{name}.onnx" for name in MODELS}


@pytest.fixture(scope="module")
def served(install, exports, ort_library, tmp_path_factory):
    repo = tmp_path_factory.mktemp("repo")
    for name, path in exports.items():
        written = wtconv_trt.write_serving_repository(
            path, repo, name=name, runtime="onnxruntime", device="cpu", ort_library=ort_library, threads=1
        )
        assert (written.model_dir / "libwtconv_ort.so").read_bytes() == ort_library.read_bytes()
    server = TritonServer(
        repo,
        http_port=0,
        grpc_port=0,
        model_control="poll",
        load_models=list(MODELS),
        log_file=repo.parent / "server.log",
        install=install,
    )
    try:
        server.start(timeout=240)
        yield server
    finally:
        server.stop()


def test_the_backend_runs_the_native_library(served):
    """Each model's backend stub loaded the library the repository carries (its log line), never the Python op."""
    log = served.log_text()
    for name in MODELS:
        assert f"{name}: runtime onnxruntime, {NATIVE}, input input" in log, log[-3000:]
    assert "onnxruntime-extensions Python op" not in log and "libwtconv_ort.so not found" not in log


@pytest.mark.parametrize("name", list(MODELS))
def test_heldout_digits_match_the_export_run_directly(served, exports, ort_library, name):
    model, config = load_default_model()
    x, labels = load_heldout_digits(config)
    with torch.no_grad():
        reference = model(x).numpy()
    direct = OnnxRuntimeRunner(exports[name], library=ort_library)
    assert direct.description == NATIVE
    client = grpcclient.InferenceServerClient(served.grpc_url)
    got, expected = [], []
    for start in range(0, len(x), 32):
        batch = x[start : start + 32].numpy().astype(direct.input_dtype)
        tensor = grpcclient.InferInput("input", list(batch.shape), "FP16" if batch.dtype == np.float16 else "FP32")
        tensor.set_data_from_numpy(batch)
        got.append(client.infer(name, [tensor]).as_numpy("output"))
        expected.append(direct(batch))
    got, expected = np.concatenate(got), np.concatenate(expected)
    assert np.array_equal(got, expected), "the served answers are not ONNX Runtime's on the same file and library"
    assert np.abs(got.astype(np.float64) - reference).max() <= TOLERANCE[name] * np.abs(reference).max()
    assert (got.argmax(1) == labels.numpy()).mean() == pytest.approx(config["heldout_accuracy"], abs=1e-9)


def test_serve_with_a_load_test(install, exports, ort_library, tmp_path, capsys, monkeypatch):
    """``wtconv-trt serve --runtime onnxruntime --load-test --sweep``: the runtime line says the library runs the
    nodes; every request of the check is answered and matched (none lost); the sweep's point, from a client process,
    its clients on a connection each (--connections client), has no failure and reads from Triton's statistics the
    batches it executed, each within max_batch_size; a point the sweep names twice is measured twice, each window with
    its own statistics (rounds in one server); and the run, ending by itself, leaves no server process and no
    temporary folder behind."""
    import json
    import tempfile

    from test_serving_cleanup import processes_naming

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    argv = ["serve", str(exports["digits_fp16"]), "--repo", str(tmp_path / "repo"), "--runtime", "onnxruntime"]
    argv += ["--ort-library", str(ort_library), "--device", "cpu", "--threads", "1", "--http-port", "0"]
    argv += ["--grpc-port", "0", "--metrics-port", "0", "--load-test", "400", "--concurrency", "8"]
    argv += ["--max-batch-size", "16", "--sweep", "8,8", "--window", "1", "--processes", "1", "--no-extra-process"]
    argv += ["--connections", "client", "--json", str(tmp_path / "load.json")]
    capsys.readouterr()
    assert cli.main(argv) == 0
    out = capsys.readouterr().out
    assert f"serving on this machine: runtime onnxruntime (--runtime onnxruntime): {NATIVE}\n" in out
    assert "400 ok, 0 failed, 0 lost, 0 mismatched" in out and "OK: every request answered and matched" in out
    report = json.loads((tmp_path / "load.json").read_text())
    points = report["sweep"]
    assert len(points) == 2 and report["connections"] == "client"  # --connections reached the sweep's clients
    assert all(point["connections"] == "client" for point in points)
    for point in points:
        assert point["failed"] == 0 and point["completed"] > 0 and point["concurrency"] == 8
        executed = {int(b): n for b, n in point["executed_batches"].items()}
        assert executed and all(1 <= b <= 16 and n > 0 for b, n in executed.items()), executed
        # the executions Triton counted in this window alone: each holds 1 to 8 requests (8 in flight), of those
        # answered in the window or in flight at one of its ends (8 each)
        assert point["completed"] / 8 <= sum(executed.values()) <= point["completed"] + 16
        assert point["direct_images_per_s_at_executed"] > 0 and point["served_over_direct"] > 0
    assert [d["batch"] for d in report["direct"]] == [1, 2, 4, 8]  # no buckets on the CPU: the request sizes
    assert processes_naming(tmp_path / "repo") == {}
    assert (
        list((tmp_path / "tmp").glob("tritonserver-*")) == [] and list((tmp_path / "tmp").glob("wtconv-load-*")) == []
    )
