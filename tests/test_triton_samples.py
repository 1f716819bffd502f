"""The Triton samples on a machine without TensorRT or Triton: they must fail clearly, never half-way."""

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


def test_end_to_end_script_syntax_and_no_tensorrt_message(tmp_path):
    script = ROOT / "samples" / "end_to_end.sh"
    subprocess.run(["bash", "-n", str(script)], check=True)
    from trt_engine.tensorrt_api import tensorrt_available

    if tensorrt_available():
        pytest.skip("TensorRT is installed: the script would run for real")
    done = subprocess.run(["bash", str(script), str(tmp_path / "out")], capture_output=True, text=True, env=_env())
    assert done.returncode == 2
    assert "TensorRT is not installed" in done.stderr
    assert not (tmp_path / "out").exists()


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
