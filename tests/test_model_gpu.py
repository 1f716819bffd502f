"""Whole models on our CUDA kernels in PyTorch: the custom op's CUDA implementation inside WTConvNeXt.

Oracle: the same model with the reference WTConv2d layers in float64 on the CPU. Skipped (with the reason)
without a CUDA GPU or without the built kernel library (tests/conftest.py's require_cuda decides).
"""

import copy

import pytest
import torch

from wtconv_torch import cuda_kernels
from wtconv_torch.fused_module import FusedWTConv2d, fuse_wtconv_layers
from wtconv_torch.models import accuracy, load_default_model, load_heldout_digits
from wtconv_torch.wtconvnext import wtconvnext_tiny


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


# ---- memory: a forward call leaves only its output; the model holds no more activations than ConvNeXt's ----


def _allocated():
    torch.cuda.synchronize()
    return torch.cuda.memory_allocated()


@pytest.mark.parametrize("layout", ["nchw", "channels_last"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.float32])
@pytest.mark.parametrize("shape,levels", [((2, 96, 56, 56), 5), ((1, 8, 130, 67), 3)], ids=["whole-plane", "tiled"])
def test_forward_allocates_its_output_and_workspace_only(registered, shape, levels, dtype, layout):
    """FusedWTConv2d, cast and converted the way a user converts a model (``.to(dtype)``, channels-last): per call it
    allocates its output and, on the tiled path, the workspace the kernels ask for (freed on return), nothing else
    (no conversion or copy of the weights, no buffer kept); calls leave nothing behind; the module holds its three
    folded fp32 weight tensors and nothing more. Oracle: PyTorch's allocator statistics, against the allocation of
    an empty tensor like the output and the library's workspace size."""
    from wtconv_torch.folding import fold_wtconv
    from wtconv_torch.wtconv2d import random_wtconv2d

    fmt = torch.channels_last if layout == "channels_last" else torch.contiguous_format
    layer = random_wtconv2d(shape[1], 5, levels, 1, 21)
    module = FusedWTConv2d.from_wtconv(layer).cuda().to(dtype).to(memory_format=fmt)
    folded = fold_wtconv(layer)
    assert not list(module.parameters())
    buffers = dict(module.named_buffers())
    assert list(buffers) == ["base_weight", "base_bias", "wavelet_weight"]
    for name, expected in zip(buffers, folded.tensors(), strict=True):
        b = buffers[name]
        assert b.dtype == torch.float32 and b.is_contiguous() and torch.equal(b.cpu(), expected), name
    x = torch.randn(shape, device="cuda").to(dtype).contiguous(memory_format=fmt)
    with torch.inference_mode():
        module(x)  # first call: plan made
        base = _allocated()
        probe = torch.empty_like(x)
        output_bytes = _allocated() - base
        del probe
        workspace = cuda_kernels.workspace_bytes(x, 5, levels, 1)
        workspace_bytes = 0
        if workspace:
            scratch = torch.empty(workspace, dtype=torch.uint8, device="cuda")
            workspace_bytes = _allocated() - base
            del scratch
        for call in range(4):
            torch.cuda.reset_peak_memory_stats()
            y = module(x)
            peak = torch.cuda.max_memory_allocated() - base
            assert _allocated() - base == output_bytes, f"call {call}: more than the output stays allocated"
            assert output_bytes <= peak <= output_bytes + workspace_bytes, (
                f"call {call}: peak {peak} bytes above the input, expected output {output_bytes} + workspace "
                f"{workspace_bytes}"
            )
            del y
            assert _allocated() == base, f"call {call}: {_allocated() - base} bytes left after the output is dropped"


@pytest.mark.parametrize("layout", ["nchw", "channels_last"])
def test_wtconvnext_peak_holds_no_more_activations_than_convnext(registered, layout):
    """WTConvNeXt-T fp16 on our kernels, B = 32, 224 x 224: the peak of a forward call above what was allocated before
    it. Oracle: ConvNeXt's structure, which WTConvNeXt shares. The peak is the GELU of a stage-1 block's MLP, where
    11 stage-1 activations (A = B x 96 x 56 x 56 elements) are alive: the stem's output (its stage's input), the
    block's input, the LayerNorm output and the MLP's fc1 and GELU outputs (4 A each). The block's convolution
    output must not be among them (it is dead once normalised), nor anything of our layer."""
    from wtconv_torch.wtconvnext import wtconvnext_tiny

    fmt = torch.channels_last if layout == "channels_last" else torch.contiguous_format
    torch.manual_seed(0)
    model = fuse_wtconv_layers(wtconvnext_tiny().eval().cuda().half()).to(memory_format=fmt)
    batch = 32
    activation = batch * 96 * 56 * 56 * 2
    x = torch.randn(batch, 3, 224, 224, device="cuda", dtype=torch.float16).contiguous(memory_format=fmt)
    with torch.inference_mode():
        model(x)  # first call: plans, cuBLAS and cuDNN workspaces
        base = _allocated()
        torch.cuda.reset_peak_memory_stats()
        y = model(x)
        peak = torch.cuda.max_memory_allocated() - base
        del y
    in_activations = peak / activation
    assert in_activations <= 11.25, (
        f"peak {peak / 2**20:.1f} MiB = {in_activations:.2f} stage-1 activations (11 expected)"
    )
