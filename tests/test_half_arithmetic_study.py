"""The packed-half emulator of benchmarks/half_arithmetic_study.py against independent oracles (CPU).

Oracles: numpy's float64 -> float16 conversion (one rounding to nearest even) and exact rational arithmetic
(fractions.Fraction) for the roundings; explicit Python loops with a rounding after every FMA for the half
accumulators; the executable spec (wtconv_torch/fused_spec.py) for the fp32 scheme.
"""

import itertools
import json
import math
from fractions import Fraction

import numpy as np
import pytest
import torch

from benchmarks import half_arithmetic_study as study
from wtconv_torch.folding import FoldedWTConv, fold_wtconv
from wtconv_torch.fused_spec import fused_wtconv2d_spec
from wtconv_torch.wtconv2d import random_wtconv2d

# (significand bits, smallest normal exponent) of IEEE binary16 and bfloat16
FORMATS = {torch.float16: (11, -14), torch.bfloat16: (8, -126)}


def round_fraction(q: Fraction, dtype: torch.dtype) -> Fraction:
    """q rounded to nearest even in ``dtype``'s format (finite range), in exact rational arithmetic."""
    if q == 0:
        return q
    bits, emin = FORMATS[dtype]
    a = abs(q)
    e = a.numerator.bit_length() - a.denominator.bit_length()  # within 1 of floor(log2 a)
    e += 1 if Fraction(2) ** (e + 1) <= a else 0
    e -= 1 if Fraction(2) ** e > a else 0
    ulp = Fraction(2) ** (max(e, emin) - bits + 1)
    return (1 if q > 0 else -1) * round(a / ulp) * ulp  # round() of a Fraction: ties to even


def oracle_round(value: float, dtype: torch.dtype) -> float:
    if dtype == torch.float16:
        with np.errstate(over="ignore"):  # beyond 65504 -> inf, as intended
            return float(np.float16(value))
    return float(round_fraction(Fraction(value), dtype))


def test_rounding_is_single_and_to_nearest_even():
    gen = torch.Generator().manual_seed(0)
    values = torch.randn(4000, generator=gen, dtype=torch.float64) * 2.0 ** torch.randint(
        -30, 18, (4000,), generator=gen
    )
    # exact midpoints between neighbours (ties) and midpoints + 2^-40 relative (where rounding through float32
    # first, as torch's float64 -> fp16/bf16 cast does, rounds twice and goes wrong)
    grid = torch.tensor([1.0, 1.5, 3.0, 1000.0, 2.0**-20], dtype=torch.float64)
    extra = []
    for bits, _ in FORMATS.values():
        for g in grid.tolist():
            for m in range(4):
                half_ulp = g * 2.0 ** (-bits)
                tie = g + (2 * m + 1) * half_ulp
                extra += [tie, -tie, tie * (1 + 2.0**-40), tie * (1 - 2.0**-40)]
    values = torch.cat([values, torch.tensor(extra, dtype=torch.float64)])
    for dtype in FORMATS:
        got = study.round_to_dtype(values, dtype).tolist()
        want = [oracle_round(v, dtype) for v in values.tolist()]
        mismatches = [(v, g, w) for v, g, w in zip(values.tolist(), got, want, strict=True) if g != w]
        assert not mismatches, f"{dtype}: {len(mismatches)} wrong roundings, e.g. {mismatches[:3]}"
    # the double-rounding case named above, by hand: 1 + 2^-11 + 2^-40 is above the tie between 1 and 1 + 2^-10
    assert study.round_to_dtype(torch.tensor([1 + 2.0**-11 + 2.0**-40], dtype=torch.float64), torch.float16).item() == (
        1 + 2.0**-10
    )


def test_rounding_overflows_to_infinity_like_numpy():
    values = torch.tensor([65504.0, 65519.99, 65520.0, -70000.0, 1e300], dtype=torch.float64)
    got = study.round_to_dtype(values, torch.float16).tolist()
    assert got == [oracle_round(v, torch.float16) for v in values.tolist()]
    assert got == [65504.0, 65504.0, math.inf, -math.inf, math.inf]


def loop_conv(x: np.ndarray, weight: np.ndarray, dtype: torch.dtype, row_split: bool) -> np.ndarray:
    """Depthwise 'same' convolution, one pixel and one tap at a time, rounding the accumulator after every FMA."""
    _, c, h, w = x.shape
    k = weight.shape[-1]
    r = k // 2
    out = np.zeros(x.shape, dtype=np.float64)
    for b, ch, y, xx in itertools.product(range(x.shape[0]), range(c), range(h), range(w)):
        acc, total = 0.0, np.float32(0.0)
        for dy in range(k):
            for dx in range(k):
                iy, ix = y + dy - r, xx + dx - r
                value = float(x[b, ch, iy, ix]) if 0 <= iy < h and 0 <= ix < w else 0.0
                tap = oracle_round(float(weight[ch, dy, dx]), dtype)
                acc = oracle_round(tap * value + acc, dtype)
            if row_split:
                total = np.float32(total + np.float32(acc))
                acc = 0.0
        out[b, ch, y, xx] = float(total) if row_split else acc
    return out


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
@pytest.mark.parametrize("row_split", [False, True], ids=["one-accumulator", "row-split"])
def test_half_fma_accumulator_matches_explicit_loop(dtype, row_split):
    gen = torch.Generator().manual_seed(7)
    # values over a wide range of magnitudes so that the per-step roundings matter
    x = (torch.randn(2, 3, 6, 7, generator=gen) * 2.0 ** torch.randint(-6, 7, (2, 3, 6, 7), generator=gen)).to(dtype)
    weight = torch.randn(3, 5, 5, generator=gen, dtype=torch.float64)
    got = study.half_fma_conv(x.double(), weight, dtype, row_split=row_split).double().numpy()
    want = loop_conv(x.double().numpy(), weight.numpy(), dtype, row_split)
    np.testing.assert_array_equal(got, want)
    # the case discriminates: rounding once at the end (exact sum) gives different values at some pixels
    exact = torch.nn.functional.conv2d(
        x.double(), study.round_to_dtype(weight, dtype).reshape(3, 1, 5, 5), padding=2, groups=3
    )
    assert (study.round_to_dtype(exact, dtype).numpy() != want).any()


@pytest.mark.parametrize("stride", [1, 2])
def test_fp32_scheme_is_the_spec_in_float32(stride):
    layer = random_wtconv2d(3, 3, 3, stride, seed=11)
    x = torch.randn(2, 3, 13, 10, generator=torch.Generator().manual_seed(12))
    folded = fold_wtconv(layer)
    got = study.emulate(x, folded, "fp32", torch.float16)
    want = fused_wtconv2d_spec(x, *folded.tensors(), 3, 3, stride)
    assert got.dtype == torch.float32 and got.shape == want.shape
    assert study.rel_error(got, want.double()) <= 4 * 2.0**-24


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
def test_case_errors_match_an_independent_evaluation(dtype):
    """run_case's errors against the spec in float32 (the fp32 scheme) and the reference module, each recomputed
    here from a freshly drawn layer and input; the fp32 scheme's only rounding is the output's, so its ratio is
    <= 1.0 (up to float32 noise); the half schemes round more and differ from it."""
    reason = study.dtype_supported(dtype, torch.device("cpu"))
    if reason is not None:
        pytest.skip(reason)
    case = study.Case("test", b=1, c=4, h=12, w=9, k=3, levels=2, stride=2, seed=5)
    row = study.run_case(case, dtype, torch.device("cpu"))
    layer = random_wtconv2d(case.c, case.k, case.levels, case.stride, case.seed)
    x = torch.randn((1, 4, 12, 9), generator=torch.Generator().manual_seed(case.seed + 1)).to(dtype)
    expected = fused_wtconv2d_spec(x.double(), *fold_wtconv(layer, dtype=torch.float64).tensors(), 3, 2, 2)
    ours = fused_wtconv2d_spec(x.float(), *fold_wtconv(layer).tensors(), 3, 2, 2).to(dtype)
    with torch.no_grad():
        reference = layer.to(dtype)(x)
    assert reference.shape == ours.shape == (1, 4, 6, 5)
    assert row["errors"]["fp32"] == pytest.approx(study.rel_error(ours, expected), rel=1e-6)
    assert row["reference_error"] == pytest.approx(study.rel_error(reference, expected), rel=1e-6)
    assert row["errors"]["fp32"] <= study.UNIT_ROUNDOFF[dtype] * (1 + 1e-5)
    assert row["ratios"]["fp32"] <= 1.0 + 1e-5
    assert all(row["errors"][s] != row["errors"]["fp32"] for s in ("base-half", "all-half", "row-split"))


@pytest.mark.parametrize("stride", [1, 2])
def test_every_scheme_is_the_operator_when_nothing_rounds(stride):
    """Small integer inputs and weights: every value the layer forms (dyadic, < 2^10 in units of 2^-L) is exact in
    fp16, so every scheme must equal the float64 spec exactly; a misplaced tap, sign or level shows here."""
    gen = torch.Generator().manual_seed(3)
    c, k, levels = 3, 3, 2
    folded = FoldedWTConv(
        kernel_size=k,
        wt_levels=levels,
        stride=stride,
        base_weight=torch.randint(-2, 3, (c, k, k), generator=gen).double(),
        base_bias=torch.randint(-2, 3, (c,), generator=gen).double(),
        wavelet_weight=torch.randint(-2, 3, (levels, 4 * c, k, k), generator=gen).double(),
    )
    x = torch.randint(-3, 4, (2, c, 9, 11), generator=gen).double()
    want = fused_wtconv2d_spec(x, *folded.tensors(), k, levels, stride)
    assert want.abs().max() > 8  # not trivially zero
    for scheme in study.SCHEMES:
        got = study.emulate(x.to(torch.float16), folded, scheme, torch.float16)
        assert torch.equal(got.double(), want), scheme


def test_half_fma_rounds_once_by_hand():
    """1 x 3 plane, k = 3, centre pixel: acc = 4100 * 1 = 4100, then 4100 + 1.998046875 * -1.0009765625
    = 4098 + 2^-19 exactly, just above the tie between the fp16 neighbours 4096 and 4100: one rounding gives 4100.
    Rounding through float32 first (4098, a tie, then to even) would give 4096."""
    x = torch.tensor([[[[4100.0, 1.998046875, 0.0]]]], dtype=torch.float64)
    weight = torch.zeros(1, 3, 3, dtype=torch.float64)
    weight[0, 1, 0], weight[0, 1, 1] = 1.0, -1.0009765625
    got = study.half_fma_conv(x, weight, torch.float16)
    assert got[0, 0, 0, 1].item() == 4100.0
    assert loop_conv(x.numpy(), weight.numpy(), torch.float16, row_split=False)[0, 0, 0, 1] == 4100.0


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
def test_each_scheme_rounds_the_parts_it_names(dtype):
    """With the wavelet weights zero only the base convolution is left, with the base weights zero only the bands:
    a scheme must match fp32 exactly where it leaves that part in fp32 and differ where it rounds it."""
    half_base = {"base-half", "all-half", "row-split"}
    half_bands = {"bands-half", "all-half", "row-split", "bands-row-split"}
    layer = random_wtconv2d(4, 5, 2, 1, seed=21)
    x = torch.randn(2, 4, 16, 16, generator=torch.Generator().manual_seed(22)).to(dtype)
    full = fold_wtconv(layer)
    for kept, rounded in (("base", half_base), ("bands", half_bands)):
        folded = FoldedWTConv(
            kernel_size=5,
            wt_levels=2,
            stride=1,
            base_weight=full.base_weight * (kept == "base"),
            base_bias=full.base_bias,
            wavelet_weight=full.wavelet_weight * (kept == "bands"),
        )
        fp32 = study.emulate(x, folded, "fp32", dtype)
        for scheme in study.SCHEMES:
            same = torch.equal(study.emulate(x, folded, scheme, dtype), fp32)
            assert same == (scheme not in rounded), f"{scheme} with only the {kept} part: equal to fp32 is {same}"


def test_command_writes_consistent_reports(tmp_path):
    """The command's --json and --markdown: every case written, the summary's counts agree with the cases."""
    out_json, out_md = tmp_path / "r.json", tmp_path / "r.md"
    argv = [
        "--groups",
        "awkward",
        "--seeds",
        "1",
        "--dtypes",
        "bf16",
        "--json",
        str(out_json),
        "--markdown",
        str(out_md),
    ]
    assert study.main(argv) == 0
    report = json.loads(out_json.read_text())
    columns, rows = report["cases"]["columns"], report["cases"]["bf16"]
    assert len(rows) == len(study.cases("awkward", 1, 2)) and all(len(r) == len(columns) for r in rows)
    summary = report["summary"]["awkward"]["bf16"]
    for scheme in study.SCHEMES:
        ratios = [r[columns.index(f"ratio {scheme}")] for r in rows]
        # ratios are written to 4 significant digits: 1.00001 becomes 1.0
        assert sum(v > 1.0 for v in ratios) <= summary[scheme]["over_1"] <= sum(v >= 1.0 for v in ratios)
        assert summary[scheme]["worst"] == pytest.approx(max(ratios), rel=1e-3)
    text = out_md.read_text()
    assert "ran on the CPU" in text and f"torch {torch.__version__}" in text
    assert all(f"| {scheme} | bf16 |" in text for scheme in study.SCHEMES)
