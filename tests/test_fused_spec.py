"""The fused operator's executable spec (folding + on-the-fly analysis + closed-form synthesis) against the
reference WTConv2d: float64 to <= 1e-12 relative error over the whole configuration matrix, and fp32 figures.

Relative error throughout: max |got - expected| / max |expected| over the whole output tensor.
"""

import itertools
import random

import pytest
import torch

from wtconv_torch import haar
from wtconv_torch.folding import fold_wtconv
from wtconv_torch.fused_spec import fused_wtconv2d_spec
from wtconv_torch.wtconv2d import WTConv2d

# Heights x widths: 1x1, thin, even, odd, non-square, below 2^levels for every level > 1, and up to 2^6.
SIZES = [(1, 1), (1, 6), (2, 2), (3, 5), (6, 1), (8, 8), (7, 13), (16, 9), (33, 20), (64, 64), (45, 67)]
LEVELS = range(1, 7)
KERNELS = (1, 3, 5, 7)
STRIDES = (1, 2, 3)


def relative_error(got: torch.Tensor, expected: torch.Tensor) -> float:
    assert got.shape == expected.shape, (got.shape, expected.shape)
    return ((got.double() - expected.double()).abs().max() / expected.double().abs().max().clamp_min(1e-300)).item()


def random_module(channels, k, levels, stride, bias, seed, exact_filters=True):
    """A float64 WTConv2d with every weight and scale random; exact +-1/2 Haar filters unless told otherwise
    (the published float32-rounded filters differ from 1/2 by 3e-8 relative, docs/design.md §2.4)."""
    torch.manual_seed(seed)
    m = WTConv2d(channels, channels, kernel_size=k, stride=stride, bias=bias, wt_levels=levels).double()
    with torch.no_grad():
        for name, p in m.named_parameters():
            if name not in ("wt_filter", "iwt_filter"):
                p.copy_(torch.randn_like(p))
        if exact_filters:
            wt, iwt = haar.create_2d_haar_filters(channels, torch.float64)
            m.wt_filter.copy_(wt)
            m.iwt_filter.copy_(iwt)
    return m


def spec_of(module, x, dtype=torch.float64):
    folded = fold_wtconv(module, dtype)
    return fused_wtconv2d_spec(x.to(dtype), *folded.tensors(), folded.kernel_size, folded.wt_levels, folded.stride)


@pytest.mark.parametrize("levels,k,stride", list(itertools.product(LEVELS, KERNELS, STRIDES)))
def test_spec_matches_reference_float64(levels, k, stride, error_report):
    """Every (levels, k, stride) over every size; batch (1..3), channels (1..4) and bias drawn per size from
    a seeded generator, bias alternating so both occur for every (levels, k, stride)."""
    rng = random.Random(f"{levels}-{k}-{stride}")
    for i, (h, w) in enumerate(SIZES):
        batch, channels, bias = rng.randint(1, 3), rng.randint(1, 4), i % 2 == 0
        m = random_module(channels, k, levels, stride, bias, seed=rng.randrange(2**31))
        x = torch.randn(batch, channels, h, w, dtype=torch.float64)
        with torch.no_grad():
            expected = m(x)
            got = spec_of(m, x)
        assert got.shape == (batch, channels, -(-h // stride), -(-w // stride))
        err = relative_error(got, expected)
        error_report.add(
            "fused spec vs reference, float64, relative",
            err,
            f"B={batch} C={channels} {h}x{w} L={levels} k={k} s={stride} bias={bias}",
        )
        assert err <= 1e-12, f"{h}x{w} B={batch} C={channels} bias={bias}: relative error {err:.3e}"


FP32_CASES = [(levels, k) for levels in LEVELS for k in (3, 5, 7)]


@pytest.mark.parametrize("levels,k", FP32_CASES)
def test_spec_fp32_agreement(levels, k, error_report):
    """fp32 spec (fp32 input, folded fp32 weights) vs the float64 reference: <= 1e-5 relative; the published
    module run in fp32 is recorded alongside as the yardstick."""
    for (h, w), stride in (((64, 64), 1), ((45, 61), 2), ((32, 17), 1)):
        m64 = random_module(8, k, levels, stride, True, seed=levels * 10 + k)
        m32 = random_module(8, k, levels, stride, True, seed=levels * 10 + k, exact_filters=False).float()
        x = torch.randn(2, 8, h, w, dtype=torch.float64)
        with torch.no_grad():
            expected = m64(x)
            spec32 = spec_of(m32, x.float(), torch.float32)
            ref32 = m32(x.float())
        assert spec32.dtype == torch.float32
        err, ref_err = relative_error(spec32, expected), relative_error(ref32, expected)
        where = f"{h}x{w} L={levels} k={k} s={stride}"
        error_report.add("fused spec fp32 vs float64 reference, relative", err, where)
        error_report.add("published reference fp32 vs float64 reference, relative", ref_err, where)
        assert err <= 1e-5, f"{where}: {err:.3e} (published module in fp32: {ref_err:.3e})"


def test_spec_low_precision_inputs_compute_in_fp32():
    """fp16 / bf16 inputs are upcast, computed in fp32 and cast back (as the CUDA kernels do)."""
    m = random_module(4, 5, 3, 1, True, seed=3).float()
    x = torch.randn(1, 4, 20, 24)
    folded = fold_wtconv(m)
    ref = fused_wtconv2d_spec(x, *folded.tensors(), 5, 3, 1)
    for dtype, tol in ((torch.float16, 2e-3), (torch.bfloat16, 1.6e-2)):
        got = fused_wtconv2d_spec(x.to(dtype), *folded.tensors(), 5, 3, 1)
        assert got.dtype == dtype
        assert relative_error(got, ref) <= tol
