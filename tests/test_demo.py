"""``wtconv-trt demo`` (the README's main job): passes on the shipped model, fails when agreement is too loose; its
plugin exports run on libwtconv_ort.so when it is found, else on the onnxruntime-extensions Python op, said once."""

import pytest
from test_onnxruntime_integration import FALLBACK, NATIVE_CPU, PYTHON_OP, no_library_anywhere

from wtconv_libs import lookup
from wtconv_trt.cli import main


@pytest.mark.slow  # the whole demo, three ONNX exports and validations included
def test_demo_passes(capsys, tmp_path, monkeypatch):
    """On a machine without libwtconv_ort.so (a fresh clone before build-libs): the Python op runs the plugin
    exports' nodes, and the log says so once for the two exports that have them."""
    no_library_anywhere(monkeypatch, tmp_path / "lookup")
    out_dir = tmp_path / "out"
    assert main(["demo", "--count", "16", "--onnx-dir", str(out_dir)]) == 0
    out, err = capsys.readouterr()
    assert err.count(FALLBACK) == 1, err
    assert out.count(PYTHON_OP) == 2 and out.count("; ONNX Runtime CPU EP\n") == 1, out
    assert "OK: reference and fused operator agree" in out
    assert out.count("conv_dw") == 5 and "logits (fp32, 5 fused layers)" in out
    # the ONNX step: three exports, each validated against PyTorch
    assert sorted(p.name for p in out_dir.iterdir()) == [
        "default_plugin_fp16.onnx",
        "default_plugin_fp32.onnx",
        "default_standard_fp32.onnx",
    ]
    assert out.count("PASSED: ONNX Runtime vs PyTorch") == 3 and "OK: every export matches PyTorch" in out
    # Each summary once: printed on stdout, not logged on stderr as well (a terminal showed every line twice).
    assert "PASSED" not in err and "wrote " not in err, err
    assert "export default_plugin_fp32.onnx 4/4" in err  # the progress lines stay
    # The element-wise figure is not the verdict's (fp16 shows 1e-2 and more where logits are near zero): said so.
    assert out.count("max element-wise relative error") == out.count("(not bounded: large where torch is near 0)") == 3


@pytest.mark.slow  # the whole demo's ONNX step
def test_demo_runs_on_the_native_library(ort_library, capsys, tmp_path, monkeypatch):
    monkeypatch.setenv(lookup.ENV_VARS["ort"], str(ort_library))
    assert main(["demo", "--count", "8", "--onnx-dir", str(tmp_path)]) == 0
    out, err = capsys.readouterr()
    assert out.count("PASSED: ONNX Runtime vs PyTorch") == 3 and out.count(NATIVE_CPU + "\n") == 2, out
    assert FALLBACK not in err


def test_demo_fails_on_an_impossible_tolerance(capsys):
    # fp32 cannot agree to 1e-12: the demo must say so and exit non-zero.
    assert main(["demo", "--count", "8", "--tolerance", "1e-12", "--skip-onnx"]) == 1
    assert "FAIL: relative error above 1e-12" in capsys.readouterr().out


def test_demo_rejects_bad_arguments(capsys):
    assert main(["demo", "--count", "0"]) == 2
    assert "argument --count: expected an integer from 1 to" in capsys.readouterr().err
