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


@pytest.mark.parametrize("layout", ["nchw", "channels_last"])
@pytest.mark.parametrize("dtype, bound", [(torch.float32, 1e-5), (torch.float16, None)])
def test_wtconvnext_tiny_on_kernels(registered, dtype, bound, layout):
    """WTConvNeXt-T (random weights, 2x3x96x128): fp32 within 1e-5 of float64; fp16 within 2x PyTorch-fp16's
    error (the same model on the reference layers in fp16; the layer itself is held to 1.0x in
    test_kernels_gpu.py, here the other layers' fp16 rounding dominates). channels_last: model and input
    converted; every fused layer then receives and returns channels-last tensors (read in place, no copy)."""
    torch.manual_seed(0)
    model = wtconvnext_tiny(num_classes=10).eval()
    x = torch.randn(2, 3, 96, 128)
    fmt = torch.channels_last if layout == "channels_last" else torch.contiguous_format
    seen = []
    with torch.no_grad():
        reference = copy.deepcopy(model).double()(x.double())
        fused = fuse_wtconv_layers(copy.deepcopy(model).cuda().to(dtype)).to(memory_format=fmt)
        for m in fused.modules():
            if isinstance(m, FusedWTConv2d):
                m.register_forward_hook(
                    lambda mod, args, out: seen.append(
                        (
                            args[0].is_contiguous(memory_format=torch.channels_last),
                            out.is_contiguous(memory_format=torch.channels_last),
                        )
                    )
                )
        ours = fused(x.cuda().to(dtype).contiguous(memory_format=fmt))
        if bound is None:
            bound = 2 * rel_error(copy.deepcopy(model).cuda().to(dtype)(x.cuda().to(dtype)), reference)
    assert torch.isfinite(ours).all()
    assert rel_error(ours, reference) <= bound
    assert len(seen) == 18  # WTConvNeXt-T: 3 + 3 + 9 + 3 blocks
    if layout == "channels_last":
        assert all(inp and out for inp, out in seen), seen
