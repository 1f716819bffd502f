"""Both published versions of WTConv2d export, convert and load: today's (stride > 1 as AvgPool2d(1, stride)) and
the one before its stride fix (BGU-CS-VIL/WTConv f867135 and earlier: a ``stride_filter`` parameter of ones applied by
a strided 1x1 depthwise convolution), whose checkpoints carry the ``stride_filter`` key.

The published code itself is used where a git checkout of BGU-CS-VIL/WTConv is in third_party/WTConv (both commits
are read from its history); the stand-ins (tests/published_wtconv.py, tests/published_wtconv_f867135.py) always.
The oracles: the published layer's own forward run by PyTorch, and explicit slicing ``y[..., ::s, ::s]`` for what
the stride filter computes.
"""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import published_wtconv
import published_wtconv_f867135
import pytest
import torch
import torch.nn as nn

from wtconv_core.errors import ModelError
from wtconv_torch.models import load_checkpoint
from wtconv_torch.published import convert_published_wtconv
from wtconv_torch.wtconv2d import WTConv2d as OurWTConv2d

CHECKOUT = Path(__file__).resolve().parent.parent / "third_party" / "WTConv"
BEFORE_FIX = "f867135"  # the last commit whose WTConv2d has stride_filter (386cb3a replaced it)


def published_at(commit: str, tmp_path_factory):
    """The published ``wtconv`` package as it was at ``commit``, extracted from the checkout's history and imported
    under its own name; skip with the reason where it cannot be."""
    if not (CHECKOUT / ".git").exists() or shutil.which("git") is None:
        pytest.skip(
            "no git checkout of the published code: git clone https://github.com/BGU-CS-VIL/WTConv third_party/WTConv "
            "(ignored by git) to test against it at both commits"
        )
    pytest.importorskip("pywt", reason="the published wtconv package imports PyWavelets")
    name = f"wtconv_{commit}"
    if name not in sys.modules:
        folder = tmp_path_factory.mktemp(name)
        archive = subprocess.run(
            ["git", "-C", str(CHECKOUT), "archive", "--format=tar", commit, "wtconv"], capture_output=True
        )
        if archive.returncode != 0:
            pytest.skip(f"the checkout in third_party/WTConv has no commit {commit}: {archive.stderr.decode()[:200]}")
        subprocess.run(["tar", "-x", "-C", str(folder)], input=archive.stdout, check=True)
        init = folder / "wtconv" / "__init__.py"
        spec = importlib.util.spec_from_file_location(name, init, submodule_search_locations=[str(init.parent)])
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


# (id, where the class comes from): today's and the version before the stride fix, stand-in and published.
VERSIONS = {
    "today-stand-in": lambda factory: published_wtconv,
    "before-fix-stand-in": lambda factory: published_wtconv_f867135,
    "today-published": lambda factory: published_at("HEAD", factory),
    "before-fix-published": lambda factory: published_at(BEFORE_FIX, factory),
}


@pytest.fixture(scope="module", params=list(VERSIONS))
def layer_class(request, tmp_path_factory):
    return VERSIONS[request.param](tmp_path_factory).WTConv2d


@torch.no_grad()
def randomized(model: nn.Module, seed: int) -> nn.Module:
    """Every trained parameter random (seeded); the fixed Haar filters and the stride filter left as created."""
    generator = torch.Generator().manual_seed(seed)
    for name, param in model.named_parameters():
        if param.requires_grad:
            noise = torch.randn(param.shape, generator=generator)
            param.copy_(0.1 + 0.05 * noise if "wavelet_scale" in name else noise / max(param[0].numel(), 1) ** 0.5)
    return model.eval()


class Net(nn.Module):
    """A stem, a stride-2 WTConv2d with two levels and a stride-1 WTConv2d without bias: the stride-2 layer is the
    one whose two published versions differ."""

    def __init__(self, layer_class):
        super().__init__()
        self.stem = nn.Conv2d(3, 8, 3, padding=1)
        self.down = layer_class(8, 8, kernel_size=3, stride=2, wt_levels=2)
        self.body = layer_class(8, 8, kernel_size=5, wt_levels=1, bias=False)

    def forward(self, x):
        return self.body(torch.relu(self.down(self.stem(x))))


def make_net(layer_class, seed=0) -> Net:
    torch.manual_seed(seed)
    return randomized(Net(layer_class), seed)


def relative_error(got: torch.Tensor, expected: torch.Tensor) -> float:
    return float((got - expected).abs().max() / expected.abs().max())


def test_ours_is_a_drop_in_for_both_versions(layer_class):
    """docs/onnx_export.md, "Without the published package": the same constructor (names, order, defaults) and the
    same state_dict keys and shapes as the published class (less the fixed stride_filter before the fix)."""
    import inspect

    def parameters(cls):
        return [(p.name, p.default) for p in inspect.signature(cls.__init__).parameters.values()]

    assert parameters(OurWTConv2d) == parameters(layer_class)
    for stride in (1, 2):
        theirs = layer_class(8, 8, kernel_size=3, stride=stride, wt_levels=3, bias=False).state_dict()
        ours = OurWTConv2d(8, 8, kernel_size=3, stride=stride, wt_levels=3, bias=False).state_dict()
        theirs.pop("stride_filter", None)
        assert [(k, v.shape) for k, v in ours.items()] == [(k, v.shape) for k, v in theirs.items()]


def test_the_stride_filter_is_the_stride_subsampling():
    """F.conv2d with the ones filter at stride s is y[..., ::s, ::s] exactly (a product by 1.0), which is what
    AvgPool2d(1, s) computes; so a layer before the fix and today's give identical outputs for the same weights."""
    y = torch.randn(2, 6, 13, 10, generator=torch.Generator().manual_seed(0))
    for s in (2, 3):
        old = published_wtconv_f867135.WTConv2d(6, 6, kernel_size=3, stride=s, wt_levels=2)
        assert torch.equal(old.stride_filter, torch.ones(6, 1, 1, 1)) and not old.stride_filter.requires_grad
        with torch.no_grad():
            strided = old.do_stride(y)
            assert torch.equal(strided, y[..., ::s, ::s])
            assert torch.equal(nn.AvgPool2d(kernel_size=1, stride=s)(y), y[..., ::s, ::s])
            randomized(old, s)
            today = published_wtconv.WTConv2d(6, 6, kernel_size=3, stride=s, wt_levels=2)
            state = {k: v for k, v in old.state_dict().items() if k != "stride_filter"}
            today.load_state_dict(state, strict=True)
            assert torch.equal(old(y), today(y))


def test_stand_in_matches_the_published_code_before_the_fix(tmp_path_factory):
    """Same attributes, state_dict keys and output, bit for bit, as BGU-CS-VIL/WTConv at f867135."""
    real_class = published_at(BEFORE_FIX, tmp_path_factory).WTConv2d
    for stride in (1, 2):
        real = real_class(6, 6, kernel_size=3, stride=stride, wt_levels=2)
        stand_in = randomized(published_wtconv_f867135.WTConv2d(6, 6, kernel_size=3, stride=stride, wt_levels=2), 1)
        assert set(vars(real)) == set(vars(stand_in))
        assert {k: v.shape for k, v in real.state_dict().items()} == {
            k: v.shape for k, v in stand_in.state_dict().items()
        }
        real.load_state_dict(stand_in.state_dict(), strict=True)
        x = torch.randn(2, 6, 13, 10, generator=torch.Generator().manual_seed(stride))
        with torch.no_grad():
            assert torch.equal(real(x), stand_in(x))
    assert "stride_filter" in real_class(6, 6, stride=2).state_dict()


def test_converted_and_loaded_like_the_published_module(layer_class, tmp_path):
    """convert_published_wtconv gives our WTConv2d with the same output; a checkpoint (torch.save of the state_dict)
    loads into the same network built on our WTConv2d, with load_state_dict(strict=True) and load_checkpoint."""
    theirs = make_net(layer_class)
    x = torch.randn(2, 3, 22, 19, generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        expected = theirs(x)
        converted = convert_published_wtconv(theirs)
        assert isinstance(converted.down, OurWTConv2d) and isinstance(converted.body, OurWTConv2d)
        assert relative_error(converted(x), expected) < 1e-6
    checkpoint = tmp_path / "net.pth"
    torch.save(theirs.state_dict(), checkpoint)
    for load in (
        lambda model: model.load_state_dict(torch.load(checkpoint, weights_only=True), strict=True),
        lambda model: load_checkpoint(model, checkpoint),
    ):
        ours = Net(OurWTConv2d).eval()
        load(ours)
        with torch.no_grad():
            assert relative_error(ours(x), expected) < 1e-6


def test_exported_and_run_in_onnx_runtime_like_the_published_module(layer_class, tmp_path):
    """One WTConv2d node per layer, stride 2 on the first; ONNX Runtime against the module's own output. Today's
    version is exported by tests/test_own_model.py (a U-Net with a stride-2 layer)."""
    if not hasattr(layer_class(2, 2, stride=2), "stride_filter"):
        pytest.skip("today's version: exported in tests/test_own_model.py")
    pytest.importorskip("onnxruntime")
    from wtconv_export.onnx_export import export_onnx
    from wtconv_ort.session import make_ort_session

    model = make_net(layer_class, seed=1)
    path = tmp_path / "net.onnx"
    result = export_onnx(model, path, input_shape=(1, 3, 16, 16))
    assert result.num_wtconv_nodes == 2 and [layer.stride for layer in result.layers] == [2, 1]
    x = np.random.default_rng(2).standard_normal((2, 3, 21, 18), dtype=np.float32)
    got = make_ort_session(str(path)).run(None, {"input": x})[0]
    with torch.no_grad():
        expected = model(torch.from_numpy(x)).numpy()
    assert got.shape == expected.shape == (2, 8, 11, 9)
    assert np.abs(got - expected).max() / np.abs(expected).max() < 1e-5


def test_a_stride_filter_that_is_not_the_published_one_is_refused(tmp_path):
    """A stride filter changed from its ones (another computation), one at a stride-1 layer, or of another shape:
    one line naming the layer or the key, at export, conversion and loading alike."""
    from wtconv_export.onnx_export import export_onnx

    model = make_net(published_wtconv_f867135.WTConv2d)
    with torch.no_grad():
        model.down.stride_filter[3] = 2.0
    with pytest.raises(ModelError, match=r"^layer 'down' .*stride_filter holds values from 1 to 2, not the ones"):
        export_onnx(model, tmp_path / "m.onnx", input_shape=(1, 3, 16, 16))
    with pytest.raises(ModelError, match=r"^layer 'down' .*stride_filter holds values from 1 to 2"):
        convert_published_wtconv(model)
    assert not (tmp_path / "m.onnx").exists()
    state = model.state_dict()
    with pytest.raises(ModelError, match=r"parameter 'down.stride_filter'.*values from 1 to 2"):
        load_checkpoint(Net(OurWTConv2d), state)
    with pytest.raises(ModelError, match=r"parameter 'down.stride_filter'.*values from 1 to 2"):
        Net(OurWTConv2d).load_state_dict(state)
    state["down.stride_filter"] = torch.ones(4, 1, 1, 1)
    with pytest.raises(ModelError, match=r"stride_filter must have shape \(8, 1, 1, 1\), got \(4, 1, 1, 1\)"):
        load_checkpoint(Net(OurWTConv2d), state)
    state["down.stride_filter"] = torch.ones(8, 1, 1, 1)
    state["body.stride_filter"] = torch.ones(8, 1, 1, 1)
    with pytest.raises(ModelError, match=r"'body.stride_filter'.*but this layer has stride 1"):
        load_checkpoint(Net(OurWTConv2d), state)


def test_the_published_lambda_does_not_tie_a_copy_to_the_original():
    """The version before the fix binds do_stride to the original module; conversion of a model on another dtype
    still checks the copy against its own filter."""
    model = make_net(published_wtconv_f867135.WTConv2d).double()
    x = torch.randn(1, 3, 12, 12, dtype=torch.float64, generator=torch.Generator().manual_seed(9))
    with torch.no_grad():
        converted = convert_published_wtconv(model)
        error = float((converted(x) - model(x)).abs().max() / model(x).abs().max())
    assert error < 1e-13
