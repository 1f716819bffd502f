"""The Triton samples on a machine without TensorRT or Triton: they must fail clearly, never half-way."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _env():
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    return env


def test_end_to_end_script_syntax():
    subprocess.run(["bash", "-n", str(ROOT / "samples" / "end_to_end.sh")], check=True)


@pytest.mark.slow
def test_end_to_end_script_with_tensorrt_rtx(rtx_plugin, tmp_path):
    """samples/end_to_end.sh where TensorRT-RTX and its plugin are installed but no GPU runs its engines: it exports,
    checks, builds and writes the Python-backend repository with the engine, and names each step it skips with
    the reason (the engine runs: no GPU; triton-repo: Triton cannot load TensorRT-RTX engines); exit status 0."""
    env = _env()
    env.update(
        WTCONV_TRT_CACHE=str(tmp_path / "cache"),  # only the plugin named here, whatever this machine has installed
        WTCONV_TRT_PLUGIN=str(rtx_plugin["plugin"]),
        WTCONV_TRT_PLUGIN_STATIC=str(rtx_plugin["plugin-static"]),
    )
    out = tmp_path / "e2e"
    done = subprocess.run(
        ["bash", str(ROOT / "samples" / "end_to_end.sh"), str(out)],
        capture_output=True,
        text=True,
        env=env,
        timeout=900,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    skipped = [line.strip() for line in done.stderr.splitlines() if line.strip().startswith("skipped:")]
    from trt_engine.environment import engine_gpu_problem
    from trt_engine.manifest import read_manifest

    runs_here = engine_gpu_problem(read_manifest(out / "digits_fp16.engine")) is None
    assert len(skipped) == (1 if runs_here else 2), done.stderr
    if not runs_here:
        assert skipped[0].startswith("skipped: 4-6, engine validation") and "GPU" in skipped[0]
    assert skipped[-1].startswith("skipped: triton-repo: Triton's TensorRT backend cannot load TensorRT-RTX")
    assert "PASSED: ONNX Runtime vs PyTorch" in done.stdout
    manifest = json.loads((out / "digits_fp16.engine.json").read_text())
    assert manifest["tensorrt"]["backend"] == "tensorrt-rtx" and manifest["build"]["plugin_layers"] == 5
    assert (out / "served" / "digits" / "1" / "model.plan").is_file()
    assert (out / "served" / "digits" / "1" / "model.onnx").is_file()
    assert f"python samples/triton_client.py --model digits --onnx {out}/digits_fp16.onnx" in done.stdout


def test_triton_client_without_a_server():
    pytest.importorskip("tritonclient.grpc", reason="tritonclient[grpc] is not installed")
    done = subprocess.run(
        [sys.executable, str(ROOT / "samples" / "triton_client.py"), "--url", "127.0.0.1:1"],
        capture_output=True,
        text=True,
        env=_env(),
        timeout=120,
    )
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "triton_client: error: cannot reach Triton at 127.0.0.1:1" in lines[0], done.stderr


def load_client_module():
    """samples/triton_client.py as a module (it is a script, not part of the package)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("triton_client", ROOT / "samples" / "triton_client.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_triton_client_sizes_a_dynamic_input():
    """A served input with dynamic height and width (a TensorRT repository of a dynamic engine: dims -1) takes its
    size from --shape (C,H,W or CxHxW), else from the ONNX file's export size; a fixed dimension must be given as
    it is served, and a dynamic one without either source is refused naming both."""
    client = load_client_module()
    fill = client.fill_dynamic
    assert fill([3, -1, -1], "3,40,48", {}, "m") == [3, 40, 48]
    assert fill([3, -1, -1], "3x41x17", {}, "m") == [3, 41, 17]
    assert fill([-1, 64, -1], "5,64,9", {}, "m") == [5, 64, 9]
    assert fill([3, -1, -1], None, {"input_shape": "1,3,224,192"}, "m") == [3, 224, 192]
    assert fill([1, 32, 32], None, {}, "m") == [1, 32, 32]
    for sample, shape in (
        ([3, -1, -1], "1,40,48"),
        ([3, -1, -1], "3,40"),
        ([3, -1, -1], "3,40,0x"),
        ([3, -1, -1], "3,0,48"),
        ([1, 8, 8], "1,8,9"),
    ):
        with pytest.raises(client.Stop, match=f"--shape {shape}: expected C,H,W fitting the served input"):
            fill(sample, shape, {}, "m")
    with pytest.raises(client.Stop, match=r"dynamic dimensions \[3, -1, -1\].*give --shape C,H,W, or --onnx"):
        fill([3, -1, -1], None, {}, "m")
