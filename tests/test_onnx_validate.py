"""``wtconv-trt validate`` (Polygraphy: PyTorch runner vs ONNX Runtime runner) on the shipped default model:
passes on the exports, fails (exit 1) on a deliberately perturbed model, takes user inputs."""

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
pytest.importorskip("onnxruntime_extensions")
pytest.importorskip("polygraphy")

from wtconv_libs import contract  # noqa: E402
from wtconv_trt.cli import build_parser  # noqa: E402
from wtconv_trt.cli import main as cli_main  # noqa: E402


@pytest.fixture(scope="module")
def default_exports(tmp_path_factory):
    out = tmp_path_factory.mktemp("default_onnx")
    paths = {}
    for ops, precision in [("plugin", "fp32"), ("plugin", "fp16"), ("standard", "fp32")]:
        path = out / f"default_{ops}_{precision}.onnx"
        assert cli_main(["export", "-o", str(path), "--ops", ops, "--precision", precision]) == 0
        paths[(ops, precision)] = path
    return paths


def test_export_prints_summary(default_exports, capsys, tmp_path):
    path = tmp_path / "m.onnx"
    assert cli_main(["export", "-o", str(path)]) == 0
    out = capsys.readouterr().out
    assert f"wrote {path}: 5 {contract.OP_TYPE} nodes" in out and "onnx.checker passed" in out
    assert [p.name for p in tmp_path.iterdir()] == ["m.onnx"]  # no temporary file left


@pytest.mark.parametrize("key", [("plugin", "fp32"), ("plugin", "fp16"), ("standard", "fp32")])
def test_validate_passes_on_export(key, default_exports, capsys, error_report):
    assert cli_main(["validate", str(default_exports[key]), "-v"]) == 0  # -v: Polygraphy's report too
    out = capsys.readouterr().out
    assert "PASSED: ONNX Runtime vs PyTorch" in out
    assert "Accuracy Summary | onnxruntime vs. pytorch" in out  # Polygraphy's own report is printed
    error = float(out.split("max |onnx - torch| / max |torch| = ")[1].split()[0])
    error_report.add(f"validate default model {key[0]} {key[1]} (held-out digits)", error)


def test_validate_fails_on_perturbed_model(default_exports, tmp_path, capsys):
    proto = onnx.load(str(default_exports[("plugin", "fp32")]))
    node = next(n for n in proto.graph.node if n.op_type == contract.OP_TYPE)
    attr = next(a for a in node.attribute if a.name == contract.FIELD_WAVELET_WEIGHT)
    attr.floats[0] += 5.0  # one folded weight of the first layer
    bad = tmp_path / "perturbed.onnx"
    onnx.save(proto, str(bad))
    assert cli_main(["validate", str(bad)]) == 1
    out = capsys.readouterr().out
    assert "FAILED: ONNX Runtime vs PyTorch" in out


def test_validate_user_inputs(default_exports, tmp_path, capsys):
    rng = np.random.default_rng(3)
    npz = tmp_path / "inputs.npz"
    np.savez(
        npz,
        a=rng.standard_normal((2, 1, 32, 32), dtype=np.float32),
        b=rng.standard_normal((1, 1, 40, 24), dtype=np.float32),
    )
    assert cli_main(["validate", str(default_exports[("plugin", "fp32")]), "--inputs", str(npz)]) == 0
    assert "(1, 1, 40, 24)" in capsys.readouterr().out
    bad = tmp_path / "bad.npy"
    np.save(bad, np.zeros((1, 32, 32), np.float32))
    assert cli_main(["validate", str(default_exports[("plugin", "fp32")]), "--inputs", str(bad)]) == 2
    assert "(B, C, H, W)" in capsys.readouterr().err


def test_validate_model_and_engine_are_exclusive(capsys):
    parser = build_parser()
    with pytest.raises(SystemExit) as exit_info:
        parser.parse_args(["validate", "m.onnx", "--engine", "m.engine"])
    assert exit_info.value.code == 2
    with pytest.raises(SystemExit):
        parser.parse_args(["validate"])
    assert parser.parse_args(["validate", "--engine", "m.engine"]).engine == "m.engine"


def test_validate_missing_model_is_a_clean_error(tmp_path, capsys):
    assert cli_main(["validate", str(tmp_path / "nope.onnx")]) == 2
    assert "does not exist" in capsys.readouterr().err
