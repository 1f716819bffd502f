"""The validation core (wtconv_validate/core.py): every measure against an explicit-loop oracle, the meaning of
each bound, and the comparison of two Polygraphy runners deciding pass or fail by those bounds."""

import itertools

import numpy as np
import pytest
import torch
import torch.nn as nn

pytest.importorskip("polygraphy")

from wtconv_core.errors import InputError  # noqa: E402
from wtconv_validate.core import (  # noqa: E402
    Tolerance,
    compare_runners,
    measure,
    polygraphy_severity,
    torch_runner,
)


def oracle(test, ref, atol, rtol):
    """The measures with plain Python loops over every element, in float64."""
    test, ref = np.asarray(test, np.float64), np.asarray(ref, np.float64)
    diffs, disagree = [], 0
    for index in itertools.product(*(range(n) for n in ref.shape)):
        d = abs(float(test[index]) - float(ref[index]))
        diffs.append(d)
        if d > atol and d > rtol * abs(float(ref[index])):
            disagree += 1
    scale = max(abs(float(v)) for v in ref.flat)
    same_rows = sum(int(np.argmax(test[r]) == np.argmax(ref[r])) for r in range(ref.shape[0]))
    return {
        "max_abs": max(diffs),
        "scale_error": max(diffs) / scale,
        "agreeing": 1 - disagree / len(diffs),
        "top1": same_rows / ref.shape[0],
    }


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_measures_match_the_explicit_loop_oracle(seed):
    rng = np.random.default_rng(seed)
    ref = rng.standard_normal((6, 10))
    test = ref + rng.standard_normal((6, 10)) * 0.05
    test[seed, :] = -test[seed, :]  # negating a row moves its arg-max to its arg-min: top-1 below 1
    row = measure(0, "logits", test, ref, Tolerance(atol=0.02, rtol=0.05))
    expected = oracle(test, ref, 0.02, 0.05)
    assert row.max_abs == pytest.approx(expected["max_abs"], rel=1e-12), f"seed {seed}"
    assert row.scale_error == pytest.approx(expected["scale_error"], rel=1e-12), f"seed {seed}"
    assert row.agreeing == pytest.approx(expected["agreeing"], abs=1e-12), f"seed {seed}"
    assert row.top1 == pytest.approx(expected["top1"], abs=1e-12) and row.rows == 6, f"seed {seed}"


def test_non_logit_outputs_have_no_top1_and_mismatched_shapes_fail():
    row = measure(0, "y", np.ones((2, 3, 4)), np.ones((2, 3, 4)), Tolerance(scale=0.0))
    assert row.top1 is None and row.max_abs == 0.0 and row.scale_error == 0.0
    bad = measure(0, "y", np.ones((2, 3)), np.ones((2, 4)), Tolerance(scale=1.0))
    assert bad.scale_error == float("inf") and bad.agreeing == 0.0


def test_tolerance_checks_its_own_values():
    with pytest.raises(InputError, match="atol and rtol together"):
        Tolerance(atol=1e-3)
    with pytest.raises(InputError, match="scale must be a number >= 0"):
        Tolerance(scale=-1.0)
    with pytest.raises(InputError, match="min_top1"):
        Tolerance(min_top1=float("nan"))
    assert "max |diff| / max |ref| <= 0.01" in Tolerance(scale=0.01).describe()


class Shifted(nn.Module):
    """y = x @ W + b (+ offset): the offset moves every output element by exactly ``offset``."""

    def __init__(self, offset=0.0):
        super().__init__()
        torch.manual_seed(0)
        self.linear = nn.Linear(16, 10)
        self.offset = offset

    def forward(self, x):
        return self.linear(x.flatten(1)) + self.offset


def feeds(n=2, batch=4):
    rng = np.random.default_rng(0)
    return [{"input": rng.standard_normal((batch, 1, 4, 4), dtype=np.float32)} for _ in range(n)]


def runners(offset):
    shape = {"input": (4, 1, 4, 4)}
    return torch_runner(Shifted(offset), shape, ["output"], name="test"), torch_runner(Shifted(), shape, ["output"])


@pytest.mark.parametrize("offset", [1e-3, 3e-2])
def test_scale_bound_decides_at_the_measured_error(offset):
    """The relative-to-scale bound passes just above the error the oracle computes and fails just below it."""
    data = feeds()
    reference = Shifted()
    with torch.no_grad():
        scale = min(float(reference(torch.from_numpy(f["input"])).abs().max()) for f in data)
    worst = offset / scale  # the batch with the smallest scale has the largest relative error
    report = compare_runners(*runners(offset), data, Tolerance(scale=worst * 1.01))
    assert report.passed and report.worst_scale_error == pytest.approx(worst, rel=1e-4)
    assert not compare_runners(*runners(offset), data, Tolerance(scale=worst * 0.99)).passed
    assert report.top1_agreement is not None  # reported although not bounded


def test_elementwise_bound_and_top1_bound():
    data = feeds()
    assert compare_runners(*runners(0.01), data, Tolerance(atol=0.011, rtol=0.0)).passed
    failed = compare_runners(*runners(0.01), data, Tolerance(atol=0.009, rtol=0.0))
    assert not failed.passed and all(r.agreeing == 0.0 for r in failed.rows)
    assert "FAILED" in failed.format() and "atol 0.009" in failed.format()
    # a constant offset never changes the arg-max: top-1 agreement is exactly 1
    assert compare_runners(*runners(0.5), data, Tolerance(min_top1=1.0)).top1_agreement == 1.0


def test_no_feeds_is_an_input_error():
    with pytest.raises(InputError, match="no inputs"):
        compare_runners(*runners(0.0), [], Tolerance(scale=1.0))


def test_polygraphy_severity_is_restored():
    from polygraphy.logger import G_LOGGER

    attr = "module_severity" if hasattr(G_LOGGER, "module_severity") else "severity"
    before = getattr(G_LOGGER, attr)
    with polygraphy_severity(report=True):
        pass
    with polygraphy_severity(report=False):
        pass
    assert getattr(G_LOGGER, attr) == before
