"""Whole models on our CUDA kernels in PyTorch: the custom op's CUDA implementation inside WTConvNeXt.

Oracle: the same model with the reference WTConv2d layers in float64 on the CPU. Skipped (with the reason)
without a CUDA GPU or without the built kernel library (tests/conftest.py's require_cuda decides).
"""

import copy

import pytest
import torch

from wtconv_export import cuda_kernels
from wtconv_export.fused_module import FusedWTConv2d, fuse_wtconv_layers
from wtconv_export.models import accuracy, load_default_model, load_heldout_digits
from wtconv_export.wtconvnext import wtconvnext_tiny


def rel_error(value, expected):
    return (value.double().cpu() - expected).abs().max().item() / expected.abs().max().item()


@pytest.fixture(scope="module")
def registered(require_cuda):
    """Our CUDA kernels registered; TF32 off, so the models' other convolutions and matmuls run in true
    fp32 (cuDNN's default TF32 convolutions alone are ~3e-4 off float64, hiding what we test)."""
    cuda_kernels.register()
    saved = torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
    yield
    torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = saved


def test_default_model_on_kernels_keeps_accuracy(registered):
    model, config = load_default_model()
    inputs, labels = load_heldout_digits(config)
    reference = model.double()(inputs.double()).detach()
    fused = fuse_wtconv_layers(copy.deepcopy(model).float()).cuda()
    assert sum(isinstance(m, FusedWTConv2d) for m in fused.modules()) > 0
    with torch.no_grad():
        logits = fused(inputs.float().cuda())
    assert rel_error(logits, reference) <= 1e-5
    assert accuracy(fused, inputs.float().cuda(), labels.cuda()) == pytest.approx(config["heldout_accuracy"], abs=1e-9)


@pytest.mark.parametrize("dtype, bound", [(torch.float32, 1e-5), (torch.float16, None)])
def test_wtconvnext_tiny_on_kernels(registered, dtype, bound):
    """WTConvNeXt-T (random weights, 2x3x96x128): fp32 within 1e-5 of float64; fp16 within 2x PyTorch-fp16's error."""
    torch.manual_seed(0)
    model = wtconvnext_tiny(num_classes=10).eval()
    x = torch.randn(2, 3, 96, 128)
    with torch.no_grad():
        reference = copy.deepcopy(model).double()(x.double())
        fused = fuse_wtconv_layers(copy.deepcopy(model).cuda().to(dtype))
        ours = fused(x.cuda().to(dtype))
        if bound is None:
            bound = 2 * rel_error(copy.deepcopy(model).cuda().to(dtype)(x.cuda().to(dtype)), reference)
    assert torch.isfinite(ours).all()
    assert rel_error(ours, reference) <= bound
