"""The reference WTConv2d against an independent explicit-loop oracle and PyWavelets (float64, CPU)."""

import numpy as np
import pytest
import torch
from oracle import (
    DB1_DEC_HI,
    DB1_DEC_LO,
    DB1_REC_HI,
    DB1_REC_LO,
    db1_filter_banks,
    haar_analysis,
    haar_synthesis,
    oracle_from_module,
)
from random_layers import random_wtconv

from wtconv_torch import haar
from wtconv_torch.wtconv2d import WTConv2d


def exact_filters_state(module):
    """The module's state with the Haar filters taken from the oracle's own float64 db1 banks."""
    analysis, synthesis = db1_filter_banks()
    c = module.in_channels
    state = module.state_dict()
    state["wt_filter"] = torch.from_numpy(np.tile(analysis[:, None], (c, 1, 1, 1)))
    state["iwt_filter"] = torch.from_numpy(np.tile(synthesis[:, None], (c, 1, 1, 1)))
    return state


# (B, C, H, W), kernel_size, wt_levels, stride, bias: odd, even, non-square, 1x1, below 2^levels.
ORACLE_CASES = [
    ((1, 1, 1, 1), 1, 1, 1, True),
    ((1, 2, 1, 1), 3, 3, 1, False),
    ((2, 1, 4, 4), 3, 2, 1, True),
    ((1, 2, 5, 7), 3, 2, 1, True),
    ((1, 1, 7, 5), 5, 3, 2, False),
    ((1, 1, 3, 9), 5, 4, 1, True),
    ((1, 1, 8, 8), 5, 3, 3, True),
    ((2, 1, 6, 3), 1, 2, 2, True),
    ((1, 1, 9, 6), 7, 2, 1, False),
    ((1, 1, 2, 11), 3, 5, 1, True),
]


@pytest.mark.parametrize("shape,k,levels,stride,bias", ORACLE_CASES)
def test_reference_matches_explicit_loop_oracle(shape, k, levels, stride, bias, error_report):
    m = random_wtconv(shape[1], k, levels, stride, bias, seed=sum(shape) + k)
    x = torch.randn(shape, dtype=torch.float64, generator=torch.Generator().manual_seed(1))

    # (a) The module as published: float32-rounded filters (0.49999997), the oracle given the same taps.
    taps = m.wt_filter.detach().numpy()[:4, 0], m.iwt_filter.detach().numpy()[:4, 0]
    expected = oracle_from_module(m, x, analysis=taps[0], synthesis=taps[1])
    got = m(x).detach().numpy()
    assert got.shape == expected.shape
    err = np.abs(got - expected).max() / max(np.abs(expected).max(), 1e-300)
    error_report.add("reference vs explicit-loop oracle, float64, relative", err, f"{shape} k={k} L={levels}")
    assert err <= 1e-12, err

    # (b) Exact db1 filters built by the oracle loaded into the module: the same to float64 rounding.
    m.load_state_dict(exact_filters_state(m))
    expected = oracle_from_module(m, x)
    err = np.abs(m(x).detach().numpy() - expected).max() / max(np.abs(expected).max(), 1e-300)
    assert err <= 1e-12, err


def test_published_filters_are_db1_rounded_through_float32():
    """wt_filter / iwt_filter equal the published construction from PyWavelets' db1, in float32, bit for bit."""
    pywt = pytest.importorskip("pywt")
    w = pywt.Wavelet("db1")
    analysis, synthesis = db1_filter_banks()
    # The oracle's written-out db1 constants are PyWavelets' own.
    for ours, theirs in (
        (DB1_DEC_LO, w.dec_lo),
        (DB1_DEC_HI, w.dec_hi),
        (DB1_REC_LO, w.rec_lo),
        (DB1_REC_HI, w.rec_hi),
    ):
        np.testing.assert_allclose(ours, theirs, rtol=1e-15, atol=0)
    dec_lo = torch.tensor(w.dec_lo[::-1], dtype=torch.float32)
    dec_hi = torch.tensor(w.dec_hi[::-1], dtype=torch.float32)
    rec_lo = torch.tensor(w.rec_lo, dtype=torch.float32)
    rec_hi = torch.tensor(w.rec_hi, dtype=torch.float32)

    def bank(lo, hi):  # the published create_2d_wavelet_filter, restated
        return torch.stack(
            [lo[None] * lo[:, None], lo[None] * hi[:, None], hi[None] * lo[:, None], hi[None] * hi[:, None]]
        )

    wt, iwt = haar.create_2d_haar_filters(3)
    assert wt.dtype == iwt.dtype == torch.float32 and wt.shape == iwt.shape == (12, 1, 2, 2)
    assert torch.equal(wt, bank(dec_lo, dec_hi)[:, None].repeat(3, 1, 1, 1))
    assert torch.equal(iwt, bank(rec_lo, rec_hi)[:, None].repeat(3, 1, 1, 1))
    # And to the oracle's float64 banks within float32 rounding of 1/2.
    np.testing.assert_allclose(wt[:4, 0].double().numpy(), analysis, rtol=1e-7, atol=0)
    np.testing.assert_allclose(iwt[:4, 0].double().numpy(), synthesis, rtol=1e-7, atol=0)


@pytest.mark.parametrize("h,w", [(1, 1), (2, 2), (4, 6), (5, 5), (7, 4), (3, 8), (9, 11)])
def test_haar_analysis_matches_pywavelets(h, w):
    """Our Haar analysis (module path and oracle) = pywt.dwt2('haar', mode='zero') including odd sizes:
    PyWavelets' zero extension of an odd length pads on the right/bottom, as the published module does."""
    pywt = pytest.importorskip("pywt")
    rng = np.random.default_rng(h * 100 + w)
    image = rng.standard_normal((h, w))
    ca, (ch, cv, cd) = pywt.dwt2(image, "haar", mode="zero")
    expected = np.stack([ca, ch, cv, cd])  # LL, LH (detail along rows), HL (along columns), HH

    analysis, _ = db1_filter_banks()
    np.testing.assert_allclose(haar_analysis(image, analysis), expected, rtol=0, atol=1e-14)

    # The module's transform (exact float64 filters), after the module's own odd-size padding.
    x = torch.from_numpy(image)[None, None]
    if h % 2 or w % 2:
        x = torch.nn.functional.pad(x, (0, w % 2, 0, h % 2))
    wt, _ = haar.create_2d_haar_filters(1, torch.float64)
    got = haar.wavelet_2d_transform(x, wt)[0, 0].numpy()
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-14)


@pytest.mark.parametrize("h,w", [(2, 2), (4, 6), (8, 2)])
def test_haar_synthesis_matches_pywavelets(h, w):
    pywt = pytest.importorskip("pywt")
    rng = np.random.default_rng(h + w)
    coeffs = rng.standard_normal((4, h // 2, w // 2))
    expected = pywt.idwt2((coeffs[0], (coeffs[1], coeffs[2], coeffs[3])), "haar", mode="zero")
    _, synthesis = db1_filter_banks()
    np.testing.assert_allclose(haar_synthesis(coeffs, synthesis), expected, rtol=0, atol=1e-14)
    _, iwt = haar.create_2d_haar_filters(1, torch.float64)
    got = haar.inverse_2d_wavelet_transform(torch.from_numpy(coeffs)[None, None], iwt)[0, 0].numpy()
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-14)


def test_state_dict_keys_and_strict_round_trip():
    """Published parameter names and shapes; a state_dict loads strictly into a fresh module, same output."""
    c, k, levels = 3, 5, 2
    m = random_wtconv(c, k, levels, dtype=torch.float32)
    expected = {
        "wt_filter": (4 * c, 1, 2, 2),
        "iwt_filter": (4 * c, 1, 2, 2),
        "base_conv.weight": (c, 1, k, k),
        "base_conv.bias": (c,),
        "base_scale.weight": (1, c, 1, 1),
    }
    for i in range(levels):
        expected[f"wavelet_convs.{i}.weight"] = (4 * c, 1, k, k)
        expected[f"wavelet_scale.{i}.weight"] = (1, 4 * c, 1, 1)
    sd = m.state_dict()
    assert {key: tuple(v.shape) for key, v in sd.items()} == expected
    fresh = WTConv2d(c, c, kernel_size=k, wt_levels=levels)
    fresh.load_state_dict(sd, strict=True)
    x = torch.randn(2, c, 9, 7)
    assert torch.equal(fresh(x), m(x))
    # No bias: the key disappears, as in the published module.
    assert "base_conv.bias" not in WTConv2d(c, c, 3, bias=False).state_dict()


def test_package_exports_are_lazy():
    import subprocess
    import sys

    code = (
        "import sys, wtconv_torch, wtconv_export; assert 'torch' not in sys.modules; "
        "from wtconv_torch import WTConv2d, WTConvNeXt, fold_wtconv, load_default_model; "
        "assert WTConv2d.__module__ == 'wtconv_torch.wtconv2d'"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
