"""The validation core shared by ONNX and engine validation: one PyTorch runner for Polygraphy, one comparison.

A model under test (ONNX Runtime on an export, TensorRT on an engine) and its PyTorch reference run on the same
inputs through Polygraphy's ``Comparator``; every output of every batch is then measured the same way
(docs/onnx_export.md, "Tolerances"):

- **relative-to-scale error** ``max |test - ref| / max |ref|`` over the output of one batch: one number per
  output, meaningful for logits near zero where an element-wise relative error is not;
- **element-wise agreement** with Polygraphy's ``SimpleCompareFunc`` semantics: an element disagrees only when
  ``|test - ref| > atol`` *and* ``|test - ref| > rtol * |ref|``; for 2-D outputs (logits) also the top-1
  agreement, the fraction of rows whose arg-max is the same.

A ``Tolerance`` says which of these bounds decide pass or fail; the measures not bounded are still reported.
The reference runner always comes second, so relative errors are relative to the reference (Polygraphy divides
by the second runner's output).
"""

from __future__ import annotations

import contextlib
import functools
import logging
import time
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from wtconv_core.errors import InputError

logger = logging.getLogger(__name__)

__all__ = [
    "ComparisonReport",
    "OutputComparison",
    "Tolerance",
    "compare_runners",
    "measure",
    "polygraphy_severity",
    "torch_runner",
    "torch_runner_class",
]


@dataclass(frozen=True)
class Tolerance:
    """Pass criteria; a bound left ``None`` is not checked (its measure is still reported).

    scale: largest ``max |test - ref| / max |ref|`` per output and batch.
    atol, rtol: element-wise, Polygraphy's meaning: an element fails when it exceeds both (given together).
    min_top1: smallest top-1 agreement over every row of every 2-D output.
    """

    scale: float | None = None
    atol: float | None = None
    rtol: float | None = None
    min_top1: float | None = None

    def __post_init__(self) -> None:
        if (self.atol is None) != (self.rtol is None):
            raise InputError("give the element-wise tolerances atol and rtol together (or neither)")
        for name in ("scale", "atol", "rtol", "min_top1"):
            value = getattr(self, name)
            if value is not None and not value >= 0:
                raise InputError(f"tolerance {name} must be a number >= 0, got {value}")

    @property
    def elementwise(self) -> bool:
        return self.atol is not None

    def describe(self) -> str:
        parts = []
        if self.scale is not None:
            parts.append(f"max |diff| / max |ref| <= {self.scale:g}")
        if self.elementwise:
            parts.append(f"atol {self.atol:g}, rtol {self.rtol:g}")
        if self.min_top1 is not None:
            parts.append(f"top-1 agreement >= {self.min_top1:g}")
        return "; ".join(parts) or "no bound"


@dataclass
class OutputComparison:
    """One output of one batch, measured in float64."""

    iteration: int
    output: str
    max_abs: float
    mean_abs: float
    scale_error: float  # max |test - ref| / max |ref|
    max_rel: float  # max over elements of |test - ref| / |ref|
    agreeing: float  # fraction of elements within (atol, rtol); 1.0 when no element-wise bound
    top1: float | None  # fraction of rows with the same arg-max (2-D outputs with more than one column)
    rows: int = 0  # rows counted in top1


def measure(
    iteration: int, output: str, test: np.ndarray, reference: np.ndarray, tolerance: Tolerance
) -> OutputComparison:
    """Every measure of one output (see the module docstring for their meaning)."""
    a = np.asarray(test, dtype=np.float64)
    b = np.asarray(reference, dtype=np.float64)
    if a.shape != b.shape:  # a failed comparison, not an error: every measure is infinite
        logger.warning("output %r: shape %s, the reference's is %s", output, a.shape, b.shape)
        inf = float("inf")
        return OutputComparison(iteration, output, inf, inf, inf, inf, 0.0, 0.0 if b.ndim == 2 else None, 0)
    diff = np.abs(a - b)
    scale = float(np.abs(b).max()) if b.size else 0.0
    max_abs = float(diff.max()) if diff.size else 0.0
    agreeing = 1.0
    if tolerance.elementwise and diff.size:
        bad = (diff > tolerance.atol) & (diff > tolerance.rtol * np.abs(b))
        agreeing = 1.0 - float(bad.mean())
    top1, rows = None, 0
    if a.ndim == 2 and a.shape[1] > 1:
        same = a.argmax(1) == b.argmax(1)
        top1, rows = float(same.mean()), int(same.size)
    return OutputComparison(
        iteration=iteration,
        output=output,
        max_abs=max_abs,
        mean_abs=float(diff.mean()) if diff.size else 0.0,
        scale_error=max_abs / max(scale, 1e-30),
        max_rel=float((diff / np.maximum(np.abs(b), 1e-12)).max()) if diff.size else 0.0,
        agreeing=agreeing,
        top1=top1,
        rows=rows,
    )


@dataclass
class ComparisonReport:
    """The outcome of one comparison: per (batch, output) measures, the bounds applied and the verdict."""

    passed: bool
    tolerance: Tolerance
    rows: list[OutputComparison] = field(default_factory=list)
    top1_agreement: float | None = None  # over every row of every 2-D output, all batches
    polygraphy_passed: bool = True  # Polygraphy's own verdict (compare_accuracy), part of ``passed``
    test_name: str = "test"
    reference_name: str = "reference"
    header: list[str] = field(default_factory=list)  # lines printed before the table (what was compared)
    footer: list[str] = field(default_factory=list)  # lines printed after the verdict (how to replay it)

    @property
    def atol(self) -> float | None:
        return self.tolerance.atol

    @property
    def rtol(self) -> float | None:
        return self.tolerance.rtol

    @property
    def worst_scale_error(self) -> float:
        return max((r.scale_error for r in self.rows), default=float("nan"))

    def format(self, test_name: str | None = None, reference_name: str | None = None) -> str:
        """The report as text: a table of every measure, then PASSED or FAILED."""
        test_name = test_name or self.test_name
        reference_name = reference_name or self.reference_name
        lines = list(self.header)
        lines.append(f"{test_name} vs {reference_name}: {self.tolerance.describe()}")
        lines.append(
            f"  {'iter':>4} {'output':<12} {'max |diff|':>11} {'mean |diff|':>11} {'/max |ref|':>10} "
            f"{'max rel':>10} {'agree':>7} {'top-1 agree':>11}"
        )
        for r in self.rows:
            top1 = f"{r.top1:.4f}" if r.top1 is not None else "-"
            agree = f"{r.agreeing:.4f}" if self.tolerance.elementwise else "-"
            lines.append(
                f"  {r.iteration:>4} {r.output:<12} {r.max_abs:>11.3e} {r.mean_abs:>11.3e} {r.scale_error:>10.3e} "
                f"{r.max_rel:>10.3e} {agree:>7} {top1:>11}"
            )
        if self.top1_agreement is not None:
            required = f" (required >= {self.tolerance.min_top1})" if self.tolerance.min_top1 is not None else ""
            lines.append(f"  top-1 agreement over all images: {self.top1_agreement:.4f}{required}")
        lines.append("PASSED" if self.passed else "FAILED: outputs differ beyond tolerance")
        lines.extend(self.footer)
        return "\n".join(lines)


# -------------------------------------------------------------------------------------------------------------
# Polygraphy plumbing
# -------------------------------------------------------------------------------------------------------------


@contextlib.contextmanager
def polygraphy_severity(report: bool) -> Iterator[None]:
    """Polygraphy's logger at INFO (its full comparison report is printed) or WARNING (warnings and errors only)
    inside the block, whatever severity another caller left set; restored after."""
    from polygraphy.logger import G_LOGGER

    attr = "module_severity" if hasattr(G_LOGGER, "module_severity") else "severity"
    old = getattr(G_LOGGER, attr)
    setattr(G_LOGGER, attr, G_LOGGER.INFO if report else G_LOGGER.WARNING)
    try:
        yield
    finally:
        setattr(G_LOGGER, attr, old)


@functools.cache
def torch_runner_class() -> type:
    """The Polygraphy runner class for a ``torch.nn.Module`` (built on first use: Polygraphy is imported lazily).

    Why not ``polygraphy.backend.pyt.PytRunner``: it moves every input to CUDA and unpacks TensorMetadata values
    as (dtype, shape) pairs, which fails with Polygraphy >= 0.50's DataType entries. This runner runs wherever the
    model's parameters are (CPU or GPU), casts inputs to float32 (the reference runs in fp32 whatever the
    precision under test) and returns float32 NumPy arrays named ``output_names``; a single tensor output is
    taken as a one-element tuple.
    """
    from polygraphy.backend.base import BaseRunner
    from polygraphy.common import TensorMetadata

    class TorchRunner(BaseRunner):
        def __init__(
            self,
            model: Any,
            input_shapes: dict[str, Sequence[int | str]],
            output_names: Sequence[str],
            name: str | None = None,
            input_dtype: Any = np.float32,
        ) -> None:
            super().__init__(name=name, prefix="pytorch-runner")
            self._model = model
            self._input_shapes = dict(input_shapes)
            self._input_dtype = input_dtype
            self.output_names = list(output_names)

        def activate_impl(self) -> None:
            import torch

            self.model = self._model.eval()
            first = next(iter(self.model.parameters()), None)
            self.device = first.device if first is not None else torch.device("cpu")

        def get_input_metadata_impl(self):  # noqa: ANN202 (Polygraphy's TensorMetadata)
            meta = TensorMetadata()
            for input_name, shape in self._input_shapes.items():
                meta.add(input_name, self._input_dtype, tuple(shape))
            return meta

        def infer_impl(self, feed_dict: dict) -> OrderedDict:
            import torch

            with torch.no_grad():
                args = [torch.from_numpy(np.asarray(v, dtype=np.float32)).to(self.device) for v in feed_dict.values()]
                start = time.perf_counter()
                outputs = self.model(*args)
                if self.device.type == "cuda":
                    torch.cuda.synchronize()
                self.inference_time = time.perf_counter() - start
            if not isinstance(outputs, (tuple, list)):
                outputs = (outputs,)
            return OrderedDict(
                (output_name, out.detach().float().cpu().numpy())
                for output_name, out in zip(self.output_names, outputs, strict=False)
            )

        def deactivate_impl(self) -> None:
            del self.model

    return TorchRunner


def torch_runner(
    model: Any,
    input_shapes: dict[str, Sequence[int | str]],
    output_names: Sequence[str],
    name: str | None = "pytorch",
    input_dtype: Any = np.float32,
) -> Any:
    """A Polygraphy runner for ``model`` (see torch_runner_class)."""
    return torch_runner_class()(model, input_shapes, output_names, name=name, input_dtype=input_dtype)


def _polygraphy_compare_func(tolerance: Tolerance, scale: dict[str, float]) -> Any:
    """Polygraphy's SimpleCompareFunc for ``tolerance``: element-wise when atol/rtol are given, else the 'max'
    statistic against tolerance.scale * max |ref| (its report then shows the same bound as ours)."""
    if tolerance.elementwise:
        options: dict[str, Any] = dict(atol=tolerance.atol, rtol=tolerance.rtol, check_shapes=True)
    else:
        bound = tolerance.scale if tolerance.scale is not None else np.inf
        atol = {name: bound * max(s, 1e-30) for name, s in scale.items()}
        options = dict(check_error_stat="max", rtol=bound, atol=atol, check_shapes=True)
    try:  # Polygraphy >= 0.50; CompareFunc.simple is deprecated there (removal planned for 0.60)
        from polygraphy.comparator import SimpleCompareFunc

        return SimpleCompareFunc(**options)
    except ImportError:
        from polygraphy.comparator import CompareFunc

        return CompareFunc.simple(**options)


def compare_runners(
    test_runner: Any,
    reference_runner: Any,
    feeds: Sequence[dict],
    tolerance: Tolerance,
    *,
    save_inputs: Any = None,
    save_outputs: Any = None,
    polygraphy_report: bool = False,
) -> ComparisonReport:
    """Run both Polygraphy runners on ``feeds`` (a list of feed dicts) and compare every output of every batch.

    Passes when Polygraphy's compare_accuracy passes and every bound of ``tolerance`` holds. Saves the inputs
    (polygraphy.json.save_json) and the reference's outputs (RunResults.save) when asked, the formats that
    ``polygraphy run --load-inputs / --load-outputs`` read. ``polygraphy_report``: print Polygraphy's own
    INFO-level report (every runner, every output) besides returning ours.
    """
    from polygraphy.comparator import Comparator, RunResults
    from polygraphy.json import save_json

    if len(feeds) == 0:
        raise InputError("no inputs to compare on: give at least one input array")
    with polygraphy_severity(polygraphy_report):
        results = Comparator.run([test_runner, reference_runner], data_loader=list(feeds))
        (test_name, test_iters), (ref_name, ref_iters) = results[0], results[1]
        scale = {
            name: max(float(np.abs(np.asarray(it[name], dtype=np.float64)).max()) for it in ref_iters)
            for name in ref_iters[0].keys()
        }
        accuracy = Comparator.compare_accuracy(results, compare_func=_polygraphy_compare_func(tolerance, scale))
    polygraphy_passed = bool(accuracy)

    rows = [
        measure(i, name, out_t[name], out_r[name], tolerance)
        for i, (out_t, out_r) in enumerate(zip(test_iters, ref_iters, strict=True))
        for name in out_r.keys()
    ]
    counted = [r for r in rows if r.top1 is not None]
    total = sum(r.rows for r in counted)
    top1_agreement = sum(r.top1 * r.rows for r in counted) / total if total else None

    passed = polygraphy_passed
    if tolerance.scale is not None:
        passed = passed and all(r.scale_error <= tolerance.scale for r in rows)
    if tolerance.elementwise:
        passed = passed and all(r.agreeing == 1.0 for r in rows)
    if tolerance.min_top1 is not None and top1_agreement is not None:
        passed = passed and top1_agreement >= tolerance.min_top1
    logger.debug("compared %s with %s on %d batches: %s", test_name, ref_name, len(feeds), passed)

    if save_inputs:
        save_json(list(feeds), str(save_inputs), description="inference inputs")
    if save_outputs:
        reference_only = RunResults()
        reference_only.append((ref_name, ref_iters))
        reference_only.save(str(save_outputs))
    return ComparisonReport(
        passed=bool(passed),
        tolerance=tolerance,
        rows=rows,
        top1_agreement=top1_agreement,
        polygraphy_passed=polygraphy_passed,
        test_name=test_name,
        reference_name=ref_name,
    )
