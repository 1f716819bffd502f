"""Export error paths: no WTConv2d, layers beyond the plugin's limits, checkpoints that do
not fit, unwritable outputs, and nothing half-written left behind."""

from collections import OrderedDict

import numpy as np
import pytest
import torch
import torch.nn as nn

onnx = pytest.importorskip("onnx")

from wtconv_core.errors import ModelError  # noqa: E402
from wtconv_export.onnx_export import NoWTConvWarning, export_onnx  # noqa: E402
from wtconv_export.onnx_models import build_model, randomize_weights  # noqa: E402
from wtconv_libs import contract  # noqa: E402
from wtconv_libs.contract import count_wtconv_nodes  # noqa: E402
from wtconv_torch.wtconv2d import WTConv2d  # noqa: E402
from wtconv_torch.wtconvnext import create_wtconvnext  # noqa: E402
from wtconv_trt.cli import main as cli_main  # noqa: E402


def small_model(**wtconv):
    model = nn.Sequential(
        OrderedDict(stem=nn.Conv2d(3, 4, 3, padding=1), body=nn.Sequential(nn.GELU(), WTConv2d(4, 4, **wtconv)))
    )
    return randomize_weights(model, 0).eval()


def test_model_without_wtconv_warns_and_exports(tmp_path):
    model = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.ReLU()).eval()
    path = tmp_path / "plain.onnx"
    with pytest.warns(NoWTConvWarning, match="no WTConv2d layer"):
        result = export_onnx(model, path, input_shape=(1, 3, 16, 16))
    assert result.num_wtconv_nodes == 0 and path.is_file()
    assert count_wtconv_nodes(onnx.load(str(path))) == 0


@pytest.mark.parametrize(
    "config, limit",
    [
        (dict(kernel_size=17), f"limit of {contract.MAX_KERNEL_SIZE}"),
        (dict(kernel_size=3, wt_levels=9), f"limit of {contract.MAX_WT_LEVELS}"),
    ],
)
def test_layer_beyond_plugin_limits_names_layer_and_limit(config, limit, tmp_path):
    path = tmp_path / "big.onnx"
    with pytest.raises(ValueError, match=r"layer 'body\.1'") as error:
        export_onnx(small_model(**config), path, input_shape=(1, 3, 16, 16))
    assert limit in str(error.value) and "--ops standard" in str(error.value)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("ops", ["plugin", "standard"])
@pytest.mark.parametrize("which", ["wt_filter", "iwt_filter"])
def test_changed_haar_filters_are_refused_naming_the_layer(which, ops, tmp_path):
    """An ordinary loop over model.parameters() reaches the fixed Haar filters (parameters, as published): the layer
    then computes something else, which no WTConv2d node computes. The export refuses it in one line naming the layer
    and the filter, and writes nothing; the unchanged model exports."""
    model = small_model(kernel_size=3, wt_levels=2)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if name.endswith(which):
                parameter.mul_(1.01)
    path = tmp_path / "changed.onnx"
    with pytest.raises(
        ModelError, match=rf"^layer 'body\.1' \(wtconv_torch\.wtconv2d\.WTConv2d\): its {which} is no"
    ) as caught:
        export_onnx(model, path, ops=ops, input_shape=(1, 3, 16, 16))
    assert list(tmp_path.iterdir()) == []
    assert "\n" not in str(caught.value) and "create_2d_haar_filters(4)" in str(caught.value)
    export_onnx(small_model(kernel_size=3, wt_levels=2), path, ops=ops, input_shape=(1, 3, 16, 16))
    assert path.is_file()


def test_standard_export_runs_what_the_plugin_cannot(tmp_path):
    pytest.importorskip("onnxruntime")
    from wtconv_ort.session import make_ort_session

    model = small_model(kernel_size=17, wt_levels=2, stride=2)
    path = tmp_path / "big_standard.onnx"
    export_onnx(model, path, ops="standard", input_shape=(1, 3, 16, 16))
    x = torch.randn(2, 3, 21, 19)
    with torch.no_grad():
        ref = model(x).numpy()
    y = make_ort_session(path).run(None, {"input": x.numpy()})[0]
    assert y.shape == ref.shape
    assert np.abs(y - ref).max() / np.abs(ref).max() <= 1e-5


def test_unwritable_output_paths(tmp_path, capsys):
    model = small_model(kernel_size=3)
    with pytest.raises(ValueError, match="does not exist"):
        export_onnx(model, tmp_path / "missing_dir" / "m.onnx")
    with pytest.raises(ValueError, match="is a directory"):
        export_onnx(model, tmp_path)
    # The command line checks before building the model, exit status 2 with one clear line.
    assert (
        cli_main(
            ["export", "-o", str(tmp_path / "missing_dir" / "m.onnx"), "--arch", "wtconvnext_tiny", "--random-weights"]
        )
        == 2
    )
    err = capsys.readouterr().err
    assert err.startswith("wtconv-trt export: error: -o ") and "does not exist" in err and err.count("\n") == 1


def test_failed_write_leaves_nothing_and_keeps_old_file(tmp_path, monkeypatch):
    model = small_model(kernel_size=3)
    path = tmp_path / "m.onnx"
    path.write_bytes(b"previous model")

    def broken_save(proto, target, *args, **kwargs):
        with open(target, "wb") as f:
            f.write(b"half")
        raise OSError("disk full")

    monkeypatch.setattr(onnx, "save_model", broken_save)
    with pytest.raises(OSError, match="disk full"):
        export_onnx(model, path, input_shape=(1, 3, 16, 16))
    assert [p.name for p in tmp_path.iterdir()] == ["m.onnx"]
    assert path.read_bytes() == b"previous model"


def test_checkpoint_that_does_not_fit_names_keys(tmp_path, capsys):
    other = create_wtconvnext("wtconvnext_tiny", depths=(1, 1, 1, 1), num_classes=10)
    state = other.state_dict()
    state["extra.weight"] = torch.zeros(1)
    bad = tmp_path / "bad.pth"
    torch.save(state, bad)
    with pytest.raises(ValueError) as error:
        build_model("wtconvnext_tiny", checkpoint=str(bad))
    message = str(error.value)
    assert "missing key" in message and "stages.0.blocks.1." in message
    assert "unexpected key" in message and "extra.weight" in message
    assert "head.fc" not in message  # num_classes (10) is read from the checkpoint's head, not assumed 1000
    assert (
        cli_main(["export", "-o", str(tmp_path / "m.onnx"), "--arch", "wtconvnext_tiny", "--checkpoint", str(bad)]) == 2
    )
    assert "stages.0.blocks.1." in capsys.readouterr().err
    assert not (tmp_path / "m.onnx").exists()


def test_safetensors_checkpoint_loads_strictly(tmp_path):
    safetensors_torch = pytest.importorskip("safetensors.torch")
    source, _ = build_model("wtconvnext_tiny", random_weights=True, seed=5)
    path = tmp_path / "tiny.safetensors"
    safetensors_torch.save_file({k: v.contiguous() for k, v in source.state_dict().items()}, str(path))
    model, description = build_model("wtconvnext_tiny", checkpoint=str(path))
    assert description["weights"].startswith("checkpoint:")
    for (name, a), b in zip(source.state_dict().items(), model.state_dict().values(), strict=True):
        assert torch.equal(a, b), name


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--checkpoint", "x.pth"], "need --arch"),
        (["--arch", "wtconvnext_tiny"], "exactly one of --checkpoint FILE or --random-weights"),
        (["--arch", "wtconvnext_tiny", "--checkpoint", "nope.pth"], "does not exist"),
        (["--input-shape", "1,3,64"], "B,C,H,W"),
    ],
)
def test_command_line_errors(argv, message, tmp_path, capsys):
    assert cli_main(["export", "-o", str(tmp_path / "m.onnx"), *argv]) == 2
    assert message in capsys.readouterr().err
