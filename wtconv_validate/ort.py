"""Validating an exported ONNX model against its PyTorch reference in ONNX Runtime, through Polygraphy: pass when
max |onnx - torch| <= tolerance * max |torch| for every output (docs/onnx_export.md, "Tolerances"; where ONNX Runtime
runs it: wtconv_ort.execution)."""

from __future__ import annotations

import dataclasses
import importlib.util
import logging
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from wtconv_core.errors import ConfigurationError, InputError, WtconvTrtError
from wtconv_export.exported import ExportedModel
from wtconv_ort.execution import OrtExecution, plan_ort_execution
from wtconv_validate.core import ComparisonReport, Tolerance, compare_runners, torch_runner

if TYPE_CHECKING:
    from wtconv_export.onnx_export import ExportResult

logger = logging.getLogger(__name__)

TOLERANCES = {"fp32": 1e-4, "fp16": 2e-2}  # max |onnx - torch| / max |torch| per precision

__all__ = [
    "TOLERANCES",
    "ValidationResult",
    "export_and_validate_default",
    "model_precision",
    "require_validation_packages",
    "validate_onnx",
]


def require_validation_packages() -> None:
    """ConfigurationError with the install command when ONNX Runtime or Polygraphy is absent (dependencies of
    wtconv-trt: an environment without them is a broken install). onnxruntime-extensions, the third, is needed only
    where the Python op runs WTConv2d nodes (no libwtconv_ort.so): plan_ort_execution asks for it then."""
    missing = [
        name
        for module, name in (("onnxruntime", "onnxruntime"), ("polygraphy", "polygraphy"))
        if importlib.util.find_spec(module) is None
    ]
    if missing:
        raise ConfigurationError(
            f"validation needs {', '.join(missing)}, dependencies of wtconv-trt missing from this environment: "
            f"pip install {' '.join(missing)} (or reinstall wtconv-trt)"
        )


@dataclasses.dataclass
class ValidationResult:
    """The outcome of validate_onnx; ``report`` holds every measure (validation.ComparisonReport)."""

    passed: bool
    precision: str
    tolerance: float
    errors: list[float]  # per input: max |onnx - torch| / max |torch| (worst output)
    shapes: list[tuple[int, ...]]  # per input: its shape
    report: ComparisonReport | None = None
    execution: str = ""  # where ONNX Runtime ran the export (OrtExecution.describe)

    def summary(self) -> str:
        worst = max(self.errors) if self.errors else float("nan")
        verdict = "PASSED" if self.passed else "FAILED"
        per_input = ", ".join(f"{tuple(s)}: {e:.2e}" for s, e in zip(self.shapes, self.errors, strict=True))
        text = (
            f"{verdict}: ONNX Runtime vs PyTorch, max |onnx - torch| / max |torch| = {worst:.2e} "
            f"(tolerance {self.tolerance:.0e}, precision {self.precision}; per input {per_input})"
        )
        if self.report is not None and self.report.rows:
            # Not bounded by the verdict (docs/onnx_export.md, "Tolerances"): where PyTorch's output is near zero,
            # |onnx - torch| / |torch| is large for any rounding, so the line says so beside the figure.
            worst_element = max(r.max_rel for r in self.report.rows)
            text += f"; max element-wise relative error {worst_element:.2e} (not bounded: large where torch is near 0)"
            if self.report.top1_agreement is not None:
                text += f", top-1 agreement {self.report.top1_agreement:.4f}"
        if self.execution:
            text += f"; {self.execution}"
        return text


def model_precision(model: ExportedModel) -> str:
    """'fp16' or 'fp32': the exporter's metadata, else the graph input's element type."""
    return model.metadata.get("precision") or model.precision


def validate_onnx(
    onnx_path: str | os.PathLike,
    torch_model: Any,
    inputs: Sequence[np.ndarray],
    *,
    tolerance: float | None = None,
    polygraphy_report: bool = True,
    device: str = "cpu",
    ort_library: str | os.PathLike | None = None,
    execution: OrtExecution | None = None,
) -> ValidationResult:
    """Compare ``onnx_path`` (a path, or the ExportedModel read from it) in ONNX Runtime with ``torch_model``
    (fp32) on ``inputs`` (arrays (B,C,H,W)).

    ``polygraphy_report``: Polygraphy prints its own report (G_LOGGER) too. ``device`` ("cpu", "cuda", "cuda:N")
    and ``ort_library``: where ONNX Runtime runs and the native op library (plan_ort_execution), or ``execution``:
    a plan made already. Returns a ValidationResult (passed, per-input errors, the full report, where it ran).
    """
    require_validation_packages()
    from polygraphy.backend.onnxrt import OnnxrtRunner

    exported = ExportedModel.of(onnx_path)
    execution = execution or plan_ort_execution(exported, device, ort_library)
    precision = model_precision(exported)
    tol = TOLERANCES.get(precision, TOLERANCES["fp16"]) if tolerance is None else float(tolerance)
    input_name = exported.inputs[0].name
    output_names = [t.name for t in exported.outputs]
    in_dtype = np.float16 if exported.input_dtype == "float16" else np.float32

    feeds = []
    for x in inputs:
        x = np.asarray(x)
        if x.ndim != 4:
            raise InputError(f"each input must be 4-D (B, C, H, W), got shape {x.shape}")
        feeds.append({input_name: np.ascontiguousarray(x.astype(in_dtype))})
    if not feeds:
        raise InputError("no inputs to validate on: give at least one (B, C, H, W) array")

    torch_model = torch_model.float().eval()
    channels = feeds[0][input_name].shape[1]
    reference = torch_runner(
        torch_model, {input_name: ("batch", channels, "height", "width")}, output_names, input_dtype=in_dtype
    )
    ort_runner = OnnxrtRunner(lambda: execution.session(exported), name="onnxruntime")
    report = compare_runners(ort_runner, reference, feeds, Tolerance(scale=tol), polygraphy_report=polygraphy_report)
    errors = [max(r.scale_error for r in report.rows if r.iteration == i) for i in range(len(feeds))]
    return ValidationResult(
        passed=report.passed,
        precision=precision,
        tolerance=tol,
        errors=errors,
        shapes=[f[input_name].shape for f in feeds],
        report=report,
        execution=execution.describe(),
    )


def export_and_validate_default(
    out_dir: str | os.PathLike,
    variants: Sequence[tuple[str, str]] = (("plugin", "fp32"), ("plugin", "fp16"), ("standard", "fp32")),
    verbose: bool = False,
) -> list[tuple[ExportResult, ValidationResult]]:
    """Export the shipped default model in each (ops, precision) variant into ``out_dir`` and validate each against
    PyTorch (Polygraphy, ONNX Runtime) on the shipped held-out digits.

    Returns (export result, validation result) per variant, in order; the caller prints their summaries
    (``wtconv-trt demo`` does). ``verbose``: Polygraphy prints its full report for each validation.
    """
    from wtconv_export.onnx_export import export_onnx
    from wtconv_export.onnx_models import DEFAULT_SOURCE, build_model
    from wtconv_torch.models import default_inputs

    require_validation_packages()
    os.makedirs(out_dir, exist_ok=True)
    model, description = build_model(DEFAULT_SOURCE)
    inputs = default_inputs(description, None)
    shape = tuple(int(d) for d in description.get("input_shape", "1,1,32,32").split(","))
    outcomes = []
    for ops, precision in variants:
        path = os.path.join(out_dir, f"default_{ops}_{precision}.onnx")
        try:
            exported = export_onnx(model, path, ops=ops, precision=precision, input_shape=shape, metadata=description)
        except WtconvTrtError as error:
            if not outcomes:
                raise
            # The exports before this one stay (each is whole and validated): say which, so nobody takes the folder
            # for the demo's complete output.
            kept = ", ".join(os.path.basename(str(done.path)) for done, _ in outcomes)
            raise type(error)(
                f"{error}; {out_dir} keeps this run's {kept}, written before this failure", parameter=error.parameter
            ) from error
        # The caller prints both summaries (wtconv-trt demo does, on stdout): logged at INFO as well, every line
        # showed twice in a terminal.
        logger.debug("%s", exported.summary())
        outcome = validate_onnx(path, model, inputs, polygraphy_report=verbose)
        logger.debug("%s", outcome.summary())
        outcomes.append((exported, outcome))
    return outcomes
