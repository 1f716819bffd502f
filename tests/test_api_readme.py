"""The README's "Python API" example, run as it stands in a fresh folder (a subprocess, so nothing of this test
process leaks into it): export -> validate in ONNX Runtime -> build -> validate the engine -> benchmark, each step
done or skipped with the reason.

What must happen is decided here, independently of the example: the export and its validation always run and
pass; with the plugin built for TensorRT-RTX handed to it (WTCONV_TRT_PLUGIN) the build must run and write an
engine and its manifest; engine validation and benchmark run only on a GPU TensorRT-RTX engines run on, so on any
other machine they must be skipped with the reason.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.slow  # an export and a validation, and with the plugin a TensorRT-RTX build: tens of seconds


def readme_example() -> str:
    """The first python block of the README's "## Python API" section."""
    text = (REPO / "README.md").read_text(encoding="utf-8")
    section = text.split("\n## Python API\n", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", section, flags=re.S)
    assert blocks, "the README's Python API section has no python block"
    return blocks[0]


def run_example(folder: Path, env: dict) -> subprocess.CompletedProcess:
    script = folder / "example.py"
    script.write_text(readme_example(), encoding="utf-8")
    environment = {**os.environ, **env, "PYTHONPATH": str(REPO)}
    return subprocess.run(
        [sys.executable, str(script)], cwd=folder, capture_output=True, text=True, timeout=1200, env=environment
    )


def test_the_section_holds_the_whole_workflow():
    code = readme_example()
    for call in ("export_onnx", "validate_onnx", "build_engine", "validate_engine", "benchmark_engine"):
        assert f"wtconv_trt.{call}(" in code, call


def test_the_readmes_error_example_is_the_apis_message(tmp_path):
    """The README quotes the API's refusal of a shape the model cannot take: the quote is that message's start, in
    the API's words (input_shape, not the command line's --input-shape)."""
    import wtconv_trt

    text = (REPO / "README.md").read_text(encoding="utf-8")
    quoted = re.search(r"`InputError: ([^`]*?) \.\.\.`", text)
    assert quoted, "the README quotes no InputError"
    with pytest.raises(wtconv_trt.InputError) as caught:
        wtconv_trt.export_onnx(tmp_path / "m.onnx", input_shape=(1, 3, 32, 32))
    assert str(caught.value).startswith(quoted.group(1)), (quoted.group(1), str(caught.value))


def test_example_runs_and_says_what_it_skips(tmp_path):
    done = run_example(tmp_path, {})
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    out = done.stdout
    assert re.search(r"^wrote \S*digits\.onnx: 5 WTConv2d nodes .*precision fp16", out, flags=re.M), out
    assert "PASSED: ONNX Runtime vs PyTorch" in out
    built = "engine:   digits.fp16.engine" in out
    assert built or re.search(r"^build skipped: \S", out, flags=re.M), out
    if built:
        assert (tmp_path / "digits.fp16.engine").is_file() and (tmp_path / "digits.fp16.engine.json").is_file()
        assert "validation and benchmark skipped: " in out or "PASSED" in out.split("engine:", 1)[1]


def test_example_builds_with_the_plugin_and_skips_what_needs_a_gpu(tmp_path, rtx_plugin):
    import importlib.util

    if importlib.util.find_spec("tensorrt") is not None:
        pytest.skip("TensorRT is installed: the example's automatic backend would be TensorRT, not TensorRT-RTX")
    done = run_example(tmp_path, {"WTCONV_TRT_PLUGIN": str(rtx_plugin["plugin"])})
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    out = done.stdout
    assert "PASSED: ONNX Runtime vs PyTorch" in out
    assert "engine:   digits.fp16.engine" in out and "TensorRT-RTX" in out, out
    assert (tmp_path / "digits.fp16.engine").stat().st_size > 0
    manifest = json.loads((tmp_path / "digits.fp16.engine.json").read_text())
    # The defaults taken from the export: its precision, and batch 1/8/32 at the size it was exported with.
    assert manifest["precision"] == "fp16"
    assert manifest["profiles"] == [{"input": {"min": [1, 1, 32, 32], "opt": [8, 1, 32, 32], "max": [32, 1, 32, 32]}}]
    import torch

    capability = torch.cuda.get_device_capability() if torch.cuda.is_available() else None
    # TensorRT-RTX 1.7 runs engines on these GPU generations only (docs/engines.md).
    if capability not in {(7, 5), (8, 0), (8, 6), (8, 9), (12, 0), (12, 1)}:
        line = next(line for line in out.splitlines() if line.startswith("validation and benchmark skipped: "))
        assert "needs a GPU of compute capability" in line, line
    else:
        assert "TensorRT" in out and "CUDA graph" in out


def test_export_and_validate_sample(tmp_path):
    """samples/export_and_validate.py, a script a user copies, on the API: three exports, each validated; a mistake
    in its arguments is one line and exit status 2, with nothing written."""

    def sample(*argv) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, str(REPO / "samples" / "export_and_validate.py"), *argv],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=900,
            env={**os.environ, "PYTHONPATH": str(REPO)},
        )

    done = sample("--out", "out")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert done.stdout.count("PASSED: ONNX Runtime vs PyTorch") == 3
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [
        "default_plugin_fp16.onnx",
        "default_plugin_fp32.onnx",
        "default_standard_fp32.onnx",
    ]
    # The sample prints the API's errors as they are, in the API's words (docs/api.md, "Conventions").
    for argv, expected in [
        (
            ["--arch", "wtconvnext_tiny"],
            "arch wtconvnext_tiny needs exactly one of checkpoint=FILE or random_weights=True",
        ),
        (
            ["--arch", "wtconvnext_tiny", "--random-weights", "--in-chans", "0"],
            "in_chans: expected an integer from 1 to 1024, got 0",
        ),
    ]:
        bad = sample("--out", "bad", *argv)
        assert bad.returncode == 2 and bad.stderr.strip().splitlines() == [f"export_and_validate.py: error: {expected}"]
        assert list((tmp_path / "bad").iterdir()) == []
