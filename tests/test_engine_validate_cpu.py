"""Validation logic without TensorRT: Polygraphy comparison of two runners, saved inputs/outputs in Polygraphy's
formats (what 'polygraphy run --load-inputs/--load-outputs' reads), tolerances, engine/shape checks."""

import copy
import shutil
import subprocess

import numpy as np
import pytest
import torch
import torch.nn as nn
from engine_helpers import fake_engine

from trt_engine.engine_file import open_engine
from wtconv_core.errors import EngineError
from wtconv_validate.core import Tolerance, compare_runners, torch_runner_class
from wtconv_validate.engine import MIN_TOP1_AGREEMENT, TOLERANCES, engine_tolerance, make_inputs, tolerances_for


def make_runner_class():
    return torch_runner_class()


def elementwise(atol, rtol):
    """An engine validation's criteria: element-wise atol/rtol and the top-1 agreement bound."""
    return Tolerance(atol=atol, rtol=rtol, min_top1=MIN_TOP1_AGREEMENT)


def small_classifier(seed=0):
    torch.manual_seed(seed)
    return nn.Sequential(
        nn.Conv2d(1, 4, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4, 10)
    ).eval()


def feeds_for(shape, n=2, dtype="float32"):
    return make_inputs({"source": "wtconvnext_tiny", "weights": "random:0"}, "input", shape, dtype, n, seed=0)


def test_comparison_passes_and_saves_polygraphy_files(tmp_path):
    from polygraphy.comparator import RunResults
    from polygraphy.json import load_json

    TorchRunner = make_runner_class()
    model = small_classifier()
    shape = (4, 1, 8, 8)
    engine_like = TorchRunner(copy.deepcopy(model), {"input": shape}, ["output"], name="engine")
    reference = TorchRunner(model, {"input": shape}, ["output"], name="reference")
    report = compare_runners(
        engine_like,
        reference,
        feeds_for(shape, dtype="float16"),
        elementwise(1e-5, 1e-5),
        save_inputs=tmp_path / "inputs.json",
        save_outputs=tmp_path / "outputs.json",
    )
    assert report.passed and report.top1_agreement == 1.0
    assert len(report.rows) == 2 and report.rows[0].max_abs == 0.0
    assert "PASSED" in report.format("TensorRT", "PyTorch")

    inputs = load_json(str(tmp_path / "inputs.json"))
    assert len(inputs) == 2 and inputs[0]["input"].dtype == np.float16 and inputs[0]["input"].shape == shape
    saved = RunResults.load(str(tmp_path / "outputs.json"))
    assert len(saved) == 1  # only the reference: the replay compares TensorRT against it
    name, iterations = saved[0]
    assert name == reference.name and len(iterations) == 2
    expected = model(torch.from_numpy(inputs[0]["input"].astype(np.float32))).detach().numpy()
    np.testing.assert_allclose(iterations[0]["output"], expected, rtol=1e-6, atol=1e-6)


def test_comparison_fails_on_mismatch():
    TorchRunner = make_runner_class()
    model = small_classifier()
    other = copy.deepcopy(model)
    with torch.no_grad():
        other[-1].bias.add_(0.5)
    shape = (4, 1, 8, 8)
    report = compare_runners(
        TorchRunner(other, {"input": shape}, ["output"]),
        TorchRunner(model, {"input": shape}, ["output"]),
        feeds_for(shape),
        elementwise(1e-3, 1e-3),
    )
    assert not report.passed
    assert report.rows[0].max_abs == pytest.approx(0.5, rel=1e-5)
    assert "FAILED" in report.format("TensorRT", "PyTorch")


def test_top1_disagreement_fails_even_within_tolerance():
    TorchRunner = make_runner_class()
    model = small_classifier()
    flipped = copy.deepcopy(model)
    with torch.no_grad():
        flipped[-1].weight.neg_()
        flipped[-1].bias.neg_()
    shape = (8, 1, 8, 8)
    report = compare_runners(
        TorchRunner(flipped, {"input": shape}, ["output"]),
        TorchRunner(model, {"input": shape}, ["output"]),
        feeds_for(shape),
        elementwise(1e3, 1e3),
    )
    assert report.top1_agreement < 0.99 and not report.passed


def test_polygraphy_cli_has_the_replay_flags():
    polygraphy = shutil.which("polygraphy")
    if polygraphy is None:
        pytest.skip("polygraphy command not on PATH")
    help_text = subprocess.run([polygraphy, "run", "--help"], capture_output=True, text=True, check=True).stdout
    for flag in ("--load-inputs", "--load-outputs", "--plugins", "--model-type", "--atol", "--rtol", "--trt"):
        assert flag in help_text


def test_tolerances():
    assert tolerances_for("fp16") == TOLERANCES["fp16"]
    assert tolerances_for("fp32", atol=1e-2) == (1e-2, TOLERANCES["fp32"][1])
    assert TOLERANCES["fp16"][0] > TOLERANCES["fp32"][0]
    with pytest.raises(EngineError):
        tolerances_for("int8")
    criteria = engine_tolerance("fp16", rtol=0.1, scale=0.02)
    assert (criteria.atol, criteria.rtol, criteria.scale, criteria.min_top1) == (
        TOLERANCES["fp16"][0],
        0.1,
        0.02,
        MIN_TOP1_AGREEMENT,
    )


def test_default_model_inputs_are_real_digits():
    feeds = make_inputs({"source": "default"}, "input", (2, 1, 32, 32), "float16", 2, seed=0)
    from wtconv_torch.models import load_heldout_digits

    images, _ = load_heldout_digits(count=4)
    np.testing.assert_array_equal(feeds[1]["input"], images[2:4].numpy().astype(np.float16))
    random = make_inputs({"source": "default"}, "input", (2, 1, 64, 64), "float32", 1, seed=0)
    assert random[0]["input"].shape == (2, 1, 64, 64)


def test_engine_request_checks(tmp_path):
    engine, _ = fake_engine(tmp_path)
    opened = open_engine(engine)
    assert opened.place(None) == (0, (8, 1, 32, 32)) and opened.input.dtype == "float16"
    assert opened.place((32, 1, 32, 32)) == (0, (32, 1, 32, 32))
    with pytest.raises(ValueError, match="outside every optimisation profile"):
        opened.place((64, 1, 32, 32))
    with pytest.raises(ValueError, match="outside every optimisation profile"):
        opened.place((8, 1, 64, 64))


@pytest.mark.parametrize("offset, expected_status", [(0.0, 0), (0.5, 1)])
def test_saved_files_replay_with_the_polygraphy_command_line(tmp_path, offset, expected_status):
    """The documented replay, 'polygraphy run MODEL --load-inputs inputs.json --load-outputs outputs.json', run
    here with ONNX Runtime on a standard-operator model instead of TensorRT on an engine: the files we write are
    what Polygraphy's command line reads, and a mismatch makes it fail."""
    pytest.importorskip("onnxruntime")
    polygraphy = shutil.which("polygraphy")
    if polygraphy is None:
        pytest.skip("polygraphy command not on PATH")
    from engine_helpers import tiny_onnx

    model_path = tiny_onnx(tmp_path / "relu.onnx")  # output = relu(input), input (batch, 1, 8, 8)

    class Shifted(nn.Module):
        def forward(self, x):
            return torch.relu(x) + offset

    TorchRunner = make_runner_class()
    shape = (2, 1, 8, 8)
    reference = TorchRunner(Shifted(), {"input": shape}, ["output"], name="pytorch")
    compare_runners(
        TorchRunner(Shifted(), {"input": shape}, ["output"]),
        reference,
        feeds_for(shape),
        elementwise(1e-6, 1e-6),
        save_inputs=tmp_path / "inputs.json",
        save_outputs=tmp_path / "outputs.json",
    )
    done = subprocess.run(
        [
            polygraphy,
            "run",
            model_path,
            "--onnxrt",
            "--load-inputs",
            str(tmp_path / "inputs.json"),
            "--load-outputs",
            str(tmp_path / "outputs.json"),
            "--atol",
            "1e-6",
            "--rtol",
            "1e-6",
        ],
        capture_output=True,
        text=True,
    )
    assert (done.returncode == 0) == (expected_status == 0), done.stdout[-2000:] + done.stderr[-2000:]
