"""The custom operator wtconv::fused_wtconv2d (torch.library) and the FusedWTConv2d inference module."""

import copy

import pytest
import torch
from random_layers import random_wtconv

from wtconv_torch.folding import fold_wtconv
from wtconv_torch.fused_module import FusedWTConv2d, fuse_wtconv_layers
from wtconv_torch.fused_spec import fused_wtconv2d_spec
from wtconv_torch.models import load_default_model, load_heldout_digits
from wtconv_torch.wtconv2d import WTConv2d
from wtconv_torch.wtconvnext import WTConvNeXt


def relative_error(got, expected):
    return ((got.double() - expected.double()).abs().max() / expected.double().abs().max()).item()


def random_layer(c=4, k=5, levels=3, stride=1, bias=True, seed=0):
    return random_wtconv(c, k, levels, stride, bias, seed, dtype=torch.float32).eval()


@pytest.mark.parametrize(
    "shape,k,levels,stride,dtype",
    [
        ((2, 3, 16, 16), 5, 3, 1, torch.float32),
        ((1, 2, 7, 11), 3, 2, 2, torch.float32),
        ((3, 1, 1, 1), 1, 4, 1, torch.float64),
        ((1, 4, 9, 5), 7, 5, 3, torch.float64),
    ],
)
def test_opcheck(shape, k, levels, stride, dtype):
    """torch.library.opcheck: schema, fake (meta) implementation, dispatch under AOT with dynamic shapes."""
    folded = fold_wtconv(random_layer(shape[1], k, levels, stride), dtype if dtype == torch.float64 else torch.float32)
    x = torch.randn(shape, dtype=dtype)
    torch.library.opcheck(torch.ops.wtconv.fused_wtconv2d.default, (x, *folded.tensors(), k, levels, stride))


def test_op_is_the_spec_and_fake_shapes():
    m = random_layer(3, 5, 2, stride=2)
    folded = fold_wtconv(m)
    x = torch.randn(2, 3, 13, 10)
    got = torch.ops.wtconv.fused_wtconv2d(x, *folded.tensors(), 5, 2, 2)
    assert torch.equal(got, fused_wtconv2d_spec(x, *folded.tensors(), 5, 2, 2))
    assert got.shape == (2, 3, 7, 5)
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode() as mode:
        fake = torch.ops.wtconv.fused_wtconv2d(
            mode.from_tensor(x), *(mode.from_tensor(t) for t in folded.tensors()), 5, 2, 2
        )
    assert fake.shape == got.shape and fake.dtype == got.dtype


@pytest.mark.parametrize("stride,bias", [(1, True), (2, False), (3, True)])
def test_fused_module_matches_reference_fp32(stride, bias):
    m = random_layer(6, 5, 3, stride, bias)
    fused = FusedWTConv2d.from_wtconv(m)
    x = torch.randn(2, 6, 23, 30)
    with torch.no_grad():
        assert relative_error(fused(x), m(x)) <= 1e-5
    assert fused.folded().attributes()["stride"] == stride


def test_fuse_wtconv_layers_default_model():
    """Every WTConv2d of the shipped model replaced; logits agree in fp32; same predictions."""
    model, config = load_default_model()
    fused = fuse_wtconv_layers(copy.deepcopy(model))
    assert not any(isinstance(m, WTConv2d) for m in fused.modules())
    assert sum(isinstance(m, FusedWTConv2d) for m in fused.modules()) == sum(config["model"]["depths"])
    x, _ = load_heldout_digits(config, count=64)
    with torch.no_grad():
        ref, got = model(x), fused(x)
    assert relative_error(got, ref) <= 1e-5
    assert torch.equal(ref.argmax(1), got.argmax(1))


def test_fuse_wtconv_layers_random_wtconvnext():
    torch.manual_seed(0)
    model = WTConvNeXt(
        in_chans=3, num_classes=7, depths=(1, 2), dims=(8, 16), wt_levels=(3, 2), ls_init_value=1.0
    ).eval()
    with torch.no_grad():  # non-trivial WTConv2d weights (the timm init is tiny)
        for name, p in model.named_parameters():
            if "conv_dw" in name and "filter" not in name:
                p.copy_(torch.randn_like(p) * 0.3)
    x = torch.randn(3, 3, 37, 45)
    fused = fuse_wtconv_layers(copy.deepcopy(model))
    with torch.no_grad():
        assert relative_error(fused(x), model(x)) <= 1e-5
