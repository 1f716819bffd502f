"""CUDA shared memory through a real tritonserver on a GPU (skips without one: conftest's require_cuda_shared_memory
decides, as for every GPU test): the shipped digits model exported in fp16 and served by ``torch-cuda`` (PyTorch on
our CUDA kernels) in GPU instances, whose config lets inputs through where they are.

- samples/triton_client.py with ``--shared-memory cuda``: the images written into GPU memory the server opens through
  CUDA IPC, the answers read from a second region; every answer within the fp16 tolerance of the ONNX file run in
  ONNX Runtime in the client; the backend says its inputs arrived on the GPU (no host copy); nothing stays registered.
- the load generator's check through CUDA shared memory (the pool in one GPU region): every answer matched.
- the same model through system shared memory: its inputs arrive on the host.

Oracles: ONNX Runtime on the exported file (the sample's and the load's reference), the server's own log, Triton's
list of registered CUDA regions.
"""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("tritonclient.grpc")

import tritonclient.grpc as grpcclient  # noqa: E402

import wtconv_trt  # noqa: E402
from wtconv_serving.server.launcher import TritonServer  # noqa: E402
from wtconv_serving.traffic import check as load  # noqa: E402
from wtconv_serving.traffic.shared_memory import registered_regions  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.gpu]


@pytest.fixture(scope="module")
def served(require_cuda_shared_memory, install, tmp_path_factory):
    onnx = tmp_path_factory.mktemp("onnx") / "digits_fp16.onnx"
    wtconv_trt.export_onnx(onnx, precision="fp16")
    repo = tmp_path_factory.mktemp("repo")
    wtconv_trt.write_serving_repository(onnx, repo, name="digits", runtime="torch-cuda", instances=1)
    server = TritonServer(
        repo,
        http_port=0,
        grpc_port=0,
        model_control="poll",
        load_models=["digits"],
        log_file=repo.parent / "server.log",
        install=install,
    )
    try:
        server.start(timeout=300)
        yield server, onnx
    finally:
        server.stop()


def test_the_client_sample_through_cuda_shared_memory(served):
    from test_serving_server import run_client

    server, onnx = served
    status, out, err = run_client(
        "--url", server.grpc_url, "--model", "digits", "--onnx", onnx, "--count", 64, "--shared-memory", "cuda"
    )
    assert status == 0 and out.rstrip().endswith("PASSED"), out + err
    assert "tensors in cuda shared memory" in out
    assert "inputs arrive on cuda:0 (DLPack into the runner, no host copy)" in server.log_text()
    assert registered_regions(grpcclient.InferenceServerClient(server.grpc_url), "cuda") == []


@pytest.mark.parametrize("memory", ["cuda", "system"])
def test_the_check_through_shared_memory(served, memory):
    from wtconv_serving.runners.ort_runner import OnnxRuntimeRunner

    server, onnx = served
    pool = load.input_pool({"source": "default"}, (1, 32, 32), np.float16, size=256)
    expected = load.expected_outputs(OnnxRuntimeRunner(onnx), pool)
    report = load.run_load(
        server.grpc_url,
        "digits",
        pool,
        expected,
        requests=400,
        concurrency=8,
        batch_sizes=(1, 2, 4, 8),
        atol=2e-2,
        rtol=2e-2,
        shared_memory=memory,
    )
    assert report.completed == 400 and report.failed == report.lost == report.mismatched == 0, report.summary()
    where = "cuda:0 (DLPack" if memory == "cuda" else "the host (one copy"
    assert f"inputs arrive on {where}" in server.log_text()
    client = grpcclient.InferenceServerClient(server.grpc_url)
    assert registered_regions(client, "cuda") == [] and registered_regions(client, "system") == []
