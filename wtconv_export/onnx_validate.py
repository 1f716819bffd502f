"""Comparing an exported ONNX model with its PyTorch reference through Polygraphy (ONNX Runtime, CPU or GPU).

Polygraphy's Comparator runs ONNX Runtime on the export and the PyTorch runner of validation.py on the original,
unfolded model in fp32, on the same inputs, and compares them with the validation core (validation.py,
docs/onnx_export.md "Tolerances"):

    pass  <=>  max |onnx - torch| <= tolerance * max |torch|      for every output of every input

a relative error against the output's scale, not per element (logits near zero would make an element-wise
relative error meaningless); the element-wise figures and the top-1 agreement are reported beside it.
Tolerances per precision (TOLERANCES): fp32 1e-4, fp16 2e-2 (fp16 keeps 11 bits, ~5e-4 per rounding, and an
18-block network accumulates a few dozen roundings; docs/onnx_export.md gives the measured errors). A fp16
model is fed the fp16-rounded input and the PyTorch reference gets the same rounded values in fp32.

Where ONNX Runtime runs the export is planned once (plan_ort_execution, docs/onnx_runtime.md "From wtconv-trt"):
on the CPU, the WTConv2d nodes run on the native op library libwtconv_ort.so when it is found, else through the
onnxruntime-extensions Python op (said once per process); on a GPU (``device="cuda"``), on onnxruntime-gpu's CUDA
execution provider with TF32 off (fp32 results are compared) and the library's CUDA op, or a one-line
ConfigurationError saying which of the two is missing. The serving runtime (trt_engine/serving/runtimes.py) plans
its sessions the same way.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import logging
import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from . import contract
from .errors import ConfigurationError, InputError
from .validation import ComparisonReport, Tolerance, compare_runners, torch_runner

if TYPE_CHECKING:
    from .onnx_export import ExportResult

logger = logging.getLogger(__name__)

TOLERANCES = {"fp32": 1e-4, "fp16": 2e-2}  # max |onnx - torch| / max |torch| per precision

DEVICES = ("cpu", "cuda")  # where ONNX Runtime runs an export: its CPU or CUDA execution provider
MAX_GPU_INDEX = 1023

__all__ = [
    "DEVICES",
    "OrtExecution",
    "TOLERANCES",
    "check_ort_library",
    "ValidationResult",
    "export_and_validate_default",
    "model_precision",
    "parse_device",
    "plan_ort_execution",
    "require_validation_packages",
    "validate_onnx",
    "wtconv_node_count",
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


def parse_device(device: str) -> tuple[str, int]:
    """("cpu", 0) or ("cuda", N): where ONNX Runtime runs, from "cpu", "cuda" (GPU 0) or "cuda:N"; InputError
    naming ``--device`` for anything else."""
    match = re.fullmatch(r"(cpu|cuda)(?::([0-9]{1,4}))?", device.strip()) if isinstance(device, str) else None
    if match and not (match.group(1) == "cpu" and match.group(2)) and int(match.group(2) or 0) <= MAX_GPU_INDEX:
        return match.group(1), int(match.group(2) or 0)
    raise InputError(
        f"argument --device: expected cpu, cuda or cuda:N (N a GPU index from 0 to {MAX_GPU_INDEX}), got {device!r}"
    )


def check_ort_library(path: str | os.PathLike, option: str = "--ort-library") -> Path:
    """``path`` must be a libwtconv_ort.so (an existing file carrying the library's record,
    wtconv_export.libraries.ort_library_info); InputError naming ``option`` otherwise."""
    from .libraries import ort_library_info
    from .paths import check_input_file

    made_by = "give the libwtconv_ort.so 'wtconv-trt build-libs' builds ('wtconv-trt doctor --ort-library' prints it)"
    check_input_file(path, what=option, made_by=made_by)
    if not ort_library_info(path):
        raise InputError(
            f"{option} {os.fspath(path)} is not libwtconv_ort.so (it has no wtconv_ort_info record); {made_by}"
        )
    return Path(path)


def wtconv_node_count(model_proto: Any) -> int:
    """How many ``wtconv::WTConv2d`` nodes the model's graph has."""
    return sum(n.op_type == contract.OP_TYPE and n.domain == contract.ONNX_DOMAIN for n in model_proto.graph.node)


def _import_cuda_libraries() -> None:
    """Load PyTorch, when installed, before ONNX Runtime creates its CUDA execution provider: onnxruntime-gpu's
    provider library finds the CUDA and cuDNN libraries PyTorch has loaded (the documentation of
    ``onnxruntime.preload_dlls``), where a Python without them on its library path would fail to create it."""
    try:
        import torch  # noqa: F401
    except ImportError:
        pass


@dataclasses.dataclass
class OrtExecution:
    """Where ONNX Runtime runs an exported model and how its WTConv2d nodes run (plan_ort_execution)."""

    device: str  # "cpu" or "cuda"
    device_id: int  # the GPU, for "cuda"
    providers: list  # for onnxruntime.InferenceSession: names or (name, options)
    nodes: int  # WTConv2d nodes in the model
    op: str | None  # "native" (libwtconv_ort.so), "python" (onnxruntime-extensions), None: no WTConv2d node
    library: Path | None = None  # the native library, for "native"

    @property
    def fallback(self) -> bool:
        """The Python op runs the nodes because no library was found (plan_ort_execution takes the library whenever
        one is found, so the Python op is always the fallback)."""
        return self.op == "python"

    def describe(self) -> str:
        """One phrase: the execution provider, and what runs the WTConv2d nodes."""
        where = "CPU EP" if self.device == "cpu" else f"CUDA EP (GPU {self.device_id}, TF32 off)"
        text = f"ONNX Runtime {where}"
        if self.op == "native":
            text += f", {self.nodes} WTConv2d nodes on {self.library.name}" + (
                "'s CUDA op" if self.device == "cuda" else ""
            )
        elif self.op == "python":
            text += f", {self.nodes} WTConv2d nodes on the onnxruntime-extensions Python op"
            if self.fallback:
                text += " (libwtconv_ort.so not found)"
        return text

    def session(self, model: Any = None, session_options: Any = None) -> Any:
        """An onnxruntime.InferenceSession of ``model`` (a path, bytes or ModelProto) as planned. On the GPU,
        ConfigurationError when ONNX Runtime could not start its CUDA execution provider (it falls back to the CPU
        with a logged error otherwise)."""
        from .onnx_ort import make_ort_session, warn_python_op_fallback

        if self.device == "cuda":
            _import_cuda_libraries()
        if self.fallback:
            warn_python_op_fallback(self.nodes)
        # As planned, without a second lookup (op None: no WTConv2d node, nothing for either op to run).
        session = make_ort_session(model, self.providers, session_options, op=self.op or "python", library=self.library)
        if self.device == "cuda" and "CUDAExecutionProvider" not in session.get_providers():
            raise ConfigurationError(
                f"--device cuda:{self.device_id}: ONNX Runtime could not start its CUDA execution provider (its "
                f"log says why, usually a CUDA or cuDNN library it cannot load); the session has only "
                f"{', '.join(session.get_providers())}"
            )
        return session


def plan_ort_execution(model: Any, device: str = "cpu", library: str | os.PathLike | None = None) -> OrtExecution:
    """Where and how ONNX Runtime runs ``model`` (a path or ModelProto), checked before any session is made.

    ``device``: "cpu", "cuda" or "cuda:N" (parse_device). On the CPU, WTConv2d nodes run on the native library
    (``library``, else the one wtconv_export.libraries finds), else through the onnxruntime-extensions Python op. On
    a GPU, onnxruntime-gpu's CUDA execution provider with TF32 off, and the native library's CUDA op for WTConv2d
    nodes; ConfigurationError in one line when this onnxruntime has no CUDA execution provider, or the model has
    WTConv2d nodes and the library is missing or was built without its CUDA op. A ``library`` given that does not
    exist is a ConfigurationError too."""
    from .onnx_ort import cuda_provider, resolve_wtconv_op

    kind, index = parse_device(device)
    shown = device.strip()
    if isinstance(model, (str, os.PathLike)):
        import onnx

        model = onnx.load(os.fspath(model), load_external_data=False)
    nodes = wtconv_node_count(model)
    if kind == "cuda":
        import onnxruntime

        available = onnxruntime.get_available_providers()
        if "CUDAExecutionProvider" not in available:
            raise ConfigurationError(
                f"--device {shown}: onnxruntime {onnxruntime.__version__} here has no CUDAExecutionProvider (it "
                f"offers {', '.join(available)}): install onnxruntime-gpu in its place (pip uninstall onnxruntime; "
                "pip install onnxruntime-gpu)"
            )
    providers = (
        ["CPUExecutionProvider"] if kind == "cpu" else [cuda_provider(index, tf32=False), "CPUExecutionProvider"]
    )
    if not nodes:
        return OrtExecution(kind, index, providers, 0, None)
    try:
        how, path = resolve_wtconv_op("native" if kind == "cuda" else "auto", library)
    except ConfigurationError as error:
        if kind == "cpu":
            raise
        raise ConfigurationError(f"--device {shown}: the model's {nodes} WTConv2d nodes need {error}") from None
    if how == "python" and importlib.util.find_spec("onnxruntime_extensions") is None:
        raise ConfigurationError(
            f"the model has {nodes} WTConv2d nodes and no libwtconv_ort.so is built: build it with 'wtconv-trt "
            "build-libs', or pip install onnxruntime-extensions for the slower Python op"
        )
    if kind == "cuda":
        from .libraries import ort_library_info

        if ort_library_info(path).get("cuda") != "yes":
            raise ConfigurationError(
                f"--device {shown}: {path} has no CUDA op (it was built where nvcc was not found): rebuild it with "
                "the CUDA toolkit present (wtconv-trt build-libs), or validate on the CPU"
            )
    return OrtExecution(kind, index, providers, nodes, how, path)


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


def model_precision(model_proto: Any) -> str:
    """'fp16' or 'fp32': the exporter's metadata, else the graph input's element type."""
    from onnx import TensorProto

    from .onnx_export import read_metadata

    meta = read_metadata(model_proto).get("precision")
    if meta:
        return meta
    elem = model_proto.graph.input[0].type.tensor_type.elem_type
    return "fp16" if elem == TensorProto.FLOAT16 else "fp32"


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
    """Compare ``onnx_path`` in ONNX Runtime with ``torch_model`` (fp32) on ``inputs`` (arrays (B,C,H,W)).

    ``polygraphy_report``: Polygraphy prints its own report (G_LOGGER) too. ``device`` ("cpu", "cuda", "cuda:N")
    and ``ort_library``: where ONNX Runtime runs and the native op library (plan_ort_execution), or ``execution``:
    a plan made already. Returns a ValidationResult (passed, per-input errors, the full report, where it ran).
    """
    require_validation_packages()
    import onnx
    from onnx import TensorProto
    from polygraphy.backend.onnxrt import OnnxrtRunner

    from .onnx_export import INPUT_NAME

    onnx_path = os.fspath(onnx_path)
    proto = onnx.load(onnx_path, load_external_data=False)
    execution = execution or plan_ort_execution(proto, device, ort_library)
    precision = model_precision(proto)
    tol = TOLERANCES.get(precision, TOLERANCES["fp16"]) if tolerance is None else float(tolerance)
    input_name = proto.graph.input[0].name if proto.graph.input else INPUT_NAME
    output_names = [o.name for o in proto.graph.output]
    in_dtype = np.float16 if proto.graph.input[0].type.tensor_type.elem_type == TensorProto.FLOAT16 else np.float32
    del proto

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
    ort_runner = OnnxrtRunner(lambda: execution.session(onnx_path), name="onnxruntime")
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
    from .inputs import default_inputs
    from .onnx_export import export_onnx
    from .onnx_models import DEFAULT_SOURCE, build_model

    require_validation_packages()
    os.makedirs(out_dir, exist_ok=True)
    model, description = build_model(DEFAULT_SOURCE)
    inputs = default_inputs(description, None)
    shape = tuple(int(d) for d in description.get("input_shape", "1,1,32,32").split(","))
    outcomes = []
    for ops, precision in variants:
        path = os.path.join(out_dir, f"default_{ops}_{precision}.onnx")
        exported = export_onnx(model, path, ops=ops, precision=precision, input_shape=shape, metadata=description)
        # The caller prints both summaries (wtconv-trt demo does, on stdout): logged at INFO as well, every line
        # showed twice in a terminal.
        logger.debug("%s", exported.summary())
        outcome = validate_onnx(path, model, inputs, polygraphy_report=verbose)
        logger.debug("%s", outcome.summary())
        outcomes.append((exported, outcome))
    return outcomes
