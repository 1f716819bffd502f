"""Bad input raises ValueError naming the parameter, what was expected and what was given."""

import pytest
import torch

from wtconv_torch import ops
from wtconv_torch.folding import fold_wtconv
from wtconv_torch.fused_module import FusedWTConv2d
from wtconv_torch.models import load_checkpoint
from wtconv_torch.wtconv2d import WTConv2d
from wtconv_torch.wtconvnext import WTConvNeXt, create_wtconvnext


@pytest.mark.parametrize(
    "kwargs,match",
    [
        (dict(in_channels=4, out_channels=4, kernel_size=4), r"kernel_size must be odd.*got 4"),
        (dict(in_channels=4, out_channels=4, kernel_size=0), r"kernel_size must be an integer >= 1, got 0"),
        (dict(in_channels=4, out_channels=4, wt_levels=0), r"wt_levels must be an integer >= 1, got 0"),
        (dict(in_channels=4, out_channels=4, wt_levels=-2), r"wt_levels .* got -2"),
        (dict(in_channels=4, out_channels=8), r"in_channels and out_channels must be equal.*out_channels=8"),
        (dict(in_channels=0, out_channels=0), r"in_channels must be an integer >= 1, got 0"),
        (dict(in_channels=4, out_channels=4, stride=0), r"stride must be an integer >= 1, got 0"),
        (dict(in_channels=4, out_channels=4, wt_type="db2"), r"wt_type must be 'db1'.*'db2'"),
    ],
)
def test_wtconv2d_constructor(kwargs, match):
    with pytest.raises(ValueError, match=match):
        WTConv2d(**kwargs)


@pytest.mark.parametrize(
    "shape,match",
    [
        ((4, 8, 8), r"input must be 4-D \(B, C, H, W\), got shape \(4, 8, 8\)"),
        ((1, 1, 4, 8, 8), r"4-D"),
        ((1, 3, 8, 8), r"must have 4 channels \(dim 1\), got shape \(1, 3, 8, 8\)"),
    ],
)
def test_wtconv2d_input(shape, match):
    with pytest.raises(ValueError, match=match):
        WTConv2d(4, 4, 3)(torch.randn(shape))
    with pytest.raises(ValueError, match=r"FusedWTConv2d: input must be \(B, 4, H, W\)"):
        FusedWTConv2d.from_wtconv(WTConv2d(4, 4, 3))(torch.randn(shape))


@pytest.mark.parametrize(
    "key,shape",
    [
        ("wavelet_convs.0.weight", (16, 1, 3, 3)),  # kernel 3 checkpoint into kernel 5 module
        ("base_conv.weight", (5, 1, 5, 5)),  # wrong channel count
        ("wavelet_scale.1.weight", (1, 12, 1, 1)),
        ("wt_filter", (20, 1, 2, 2)),
    ],
)
def test_wtconv2d_checkpoint_shape(key, shape):
    m = WTConv2d(4, 4, kernel_size=5, wt_levels=2)
    sd = m.state_dict()
    sd[key] = torch.zeros(shape)
    expected = tuple(m.state_dict()[key].shape)
    with pytest.raises(
        ValueError,
        match=rf"parameter '{key}' must have shape {expected!r}.*got {shape!r}".replace("(", r"\(").replace(")", r"\)"),
    ):
        m.load_state_dict(sd)


def _tiny_model(**kw):
    return WTConvNeXt(**{**dict(in_chans=1, num_classes=3, depths=(1, 1), dims=(4, 8), wt_levels=(2, 1)), **kw})


def test_model_checkpoint_mismatch_names_every_key():
    model = _tiny_model()
    sd = _tiny_model(num_classes=5).state_dict()  # wrong head size
    sd["stages.1.blocks.0.conv_dw.wavelet_convs.0.weight"] = torch.zeros(32, 1, 3, 3)
    sd.pop("stem.0.bias")
    sd["extra.weight"] = torch.zeros(1)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(ValueError) as info:
        load_checkpoint(model, sd)
    msg = str(info.value)
    assert "head.fc.weight: expected (3, 8), got (5, 8)" in msg
    assert "head.fc.bias: expected (3,), got (5,)" in msg
    assert "stages.1.blocks.0.conv_dw.wavelet_convs.0.weight: expected (32, 1, 5, 5), got (32, 1, 3, 3)" in msg
    assert "missing key(s): stem.0.bias" in msg
    assert "unexpected key(s): extra.weight" in msg
    assert all(torch.equal(v, model.state_dict()[k]) for k, v in before.items()), "nothing may be loaded"


def test_model_checkpoint_non_strict_still_rejects_shapes():
    model = _tiny_model()
    sd = {"head.fc.weight": torch.zeros(5, 8)}
    with pytest.raises(ValueError, match=r"head\.fc\.weight: expected \(3, 8\), got \(5, 8\)"):
        load_checkpoint(model, sd, strict=False)
    load_checkpoint(model, {"head.fc.bias": torch.ones(3)}, strict=False)
    assert torch.equal(model.head.fc.bias, torch.ones(3))


@pytest.mark.parametrize(
    "kwargs,match",
    [
        (dict(depths=(1, 1), dims=(4,)), r"dims must be 2 integers >= 1"),
        (dict(depths=(), dims=()), r"depths must be a non-empty sequence"),
        (dict(depths=(1, 0), dims=(4, 8)), r"depths must be 2 integers >= 1"),
        (dict(depths=(1, 1), dims=(4, 8), wt_levels=(2, 0)), r"wt_levels must be 2 integers >= 1"),
        (dict(depths=(1, 1), dims=(4, 8), wt_levels=(1, 1), kernel_sizes=4), r"kernel_size must be odd"),
        (dict(depths=(1,), dims=(4,), wt_levels=(1,), num_classes=-1), r"num_classes must be an integer >= 0, got -1"),
        (dict(depths=(1,), dims=(4,), wt_levels=(1,), in_chans=0), r"in_chans must be an integer >= 1, got 0"),
        (dict(depths=(1,), dims=(4,), wt_levels=(1,), patch_size=2.5), r"patch_size must be an integer >= 1, got 2.5"),
    ],
)
def test_wtconvnext_config(kwargs, match):
    with pytest.raises(ValueError, match=match):
        WTConvNeXt(**kwargs)


def test_unknown_model_and_pretrained():
    with pytest.raises(ValueError, match=r"unknown model 'wtconvnext_huge'.*wtconvnext_tiny"):
        create_wtconvnext("wtconvnext_huge")
    from wtconv_torch.wtconvnext import wtconvnext_small

    with pytest.raises(ValueError, match=r"pretrained=True is not supported"):
        wtconvnext_small(pretrained=True)


def test_custom_op_arguments():
    folded = fold_wtconv(WTConv2d(3, 3, kernel_size=5, wt_levels=2))
    bw, bb, ww = folded.tensors()
    x = torch.randn(1, 3, 8, 8)
    cases = [
        ((x, bw, bb, ww, 4, 2, 1), r"kernel_size must be odd and >= 1, got 4"),
        ((x, bw, bb, ww, 5, 0, 1), r"wt_levels must be >= 1, got 0"),
        ((x, bw, bb, ww, 5, 2, 0), r"stride must be >= 1, got 0"),
        ((x[0], bw, bb, ww, 5, 2, 1), r"x must be 4-D"),
        ((x, bw[:2], bb, ww, 5, 2, 1), r"base_weight must have shape \(3, 5, 5\).*got \(2, 5, 5\)"),
        ((x, bw, bb[:1], ww, 5, 2, 1), r"base_bias must have shape \(3,\)"),
        ((x, bw, bb, ww[:1], 5, 2, 1), r"wavelet_weight must have shape \(2, 12, 5, 5\).*got \(1, 12, 5, 5\)"),
        ((torch.randn(1, 4, 8, 8), bw, bb, ww, 5, 2, 1), r"base_weight must have shape \(4, 5, 5\)"),
    ]
    for args, match in cases:
        with pytest.raises(ValueError, match=match):
            ops.check_arguments(*args)
        with pytest.raises(ValueError, match=match):
            torch.ops.wtconv.fused_wtconv2d(*args)


def test_fold_rejects_other_modules():
    with pytest.raises(ValueError, match=r"expected a WTConv2d, got Conv2d"):
        fold_wtconv(torch.nn.Conv2d(3, 3, 3))


def test_command_line_catches_only_project_errors(monkeypatch, capsys):
    """wtconv_trt.cli.main turns a WtconvTrtError into one line and exit status 2 (a multi-line message too), and
    lets every other exception through with its traceback: a bug that raises ValueError is not a user error."""
    from wtconv_core.errors import InputError, ModelError
    from wtconv_trt import cli
    from wtconv_trt.commands import export

    def raise_(error):
        def run(args):
            raise error

        return run

    monkeypatch.setattr(export, "run", raise_(InputError("--thing: expected\n  a better value")))
    assert cli.main(["export", "-o", "x.onnx"]) == 2
    assert capsys.readouterr().err == "wtconv-trt export: error: --thing: expected a better value\n"
    monkeypatch.setattr(export, "run", raise_(ModelError("does not fit")))
    assert cli.main(["export", "-o", "x.onnx"]) == 2
    assert capsys.readouterr().err == "wtconv-trt export: error: does not fit\n"
    for bug in (ValueError("a bug"), FileNotFoundError("a bug"), PermissionError("a bug"), KeyError("a bug")):
        monkeypatch.setattr(export, "run", raise_(bug))
        with pytest.raises(type(bug)):
            cli.main(["export", "-o", "x.onnx"])
    monkeypatch.setattr(export, "run", raise_(KeyboardInterrupt()))
    assert cli.main(["export", "-o", "x.onnx"]) == 130
    assert capsys.readouterr().err.strip() == "wtconv-trt export: interrupted"
