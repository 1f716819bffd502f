"""Comparing an exported ONNX model with its PyTorch reference through Polygraphy (ONNX Runtime, CPU).

Polygraphy's Comparator runs a PyTorch runner (the original, unfolded model in fp32) and an ONNX Runtime
runner built on make_ort_session (WTConv2d nodes run the executable spec, onnx_ort.py) on the same
inputs, prints its report, and checks the outputs with ``CompareFunc.simple``:

    pass  <=>  max |onnx - torch| <= tolerance * max |torch|      (check_error_stat="max")

i.e. a relative error against the output's scale, not per element (logits near zero would make an
elementwise relative error meaningless). Tolerances per precision (TOLERANCES): fp32 1e-4 (we measure
~1e-6 on WTConvNeXt-T), fp16 2e-2 (fp16 keeps 11 bits, ~5e-4 per rounding, and a 18-block network
accumulates a few dozen roundings; we measure ~3e-3). A fp16 model is fed the fp16-rounded input and the
PyTorch reference gets the same rounded values in fp32.
"""

from __future__ import annotations

import contextlib
import dataclasses

import numpy as np

from .onnx_export import INPUT_NAME, read_metadata

TOLERANCES = {"fp32": 1e-4, "fp16": 2e-2}


def require_validation_packages() -> None:
    """ValueError with the install command when ONNX Runtime, onnxruntime-extensions or Polygraphy is absent."""
    import importlib.util
    missing = [name for module, name in (("onnxruntime", "onnxruntime"),
                                         ("onnxruntime_extensions", "onnxruntime-extensions"),
                                         ("polygraphy", "polygraphy"))
               if importlib.util.find_spec(module) is None]
    if missing:
        raise ValueError(f"validation needs {', '.join(missing)}: pip install 'wtconv-trt[onnxruntime]' "
                         f"(or pip install {' '.join(missing)})")


def _pyt_runner_class():
    import torch
    from polygraphy.backend.pyt import PytRunner

    class TorchRunner(PytRunner):
        """Polygraphy's PytRunner on the model's own device (PytRunner itself moves inputs to CUDA)."""

        def infer_impl(self, feed_dict):
            import time
            from collections import OrderedDict
            device = next(self.model.parameters()).device
            with torch.no_grad():
                inputs = [torch.from_numpy(np.asarray(value, dtype=np.float32)).to(device)
                          for value in feed_dict.values()]
                start = time.time()
                outputs = self.model(*inputs)
                end = time.time()
            self.inference_time = end - start
            return OrderedDict((name, out.detach().float().cpu().numpy())
                               for name, out in zip(self.output_names, outputs))

    return TorchRunner


def _tuple_output(model):
    import torch.nn as nn

    class TupleOutput(nn.Module):
        """PytRunner zips output names with the model's outputs: a bare tensor would be iterated."""

        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, x):
            out = self.inner(x)
            return tuple(out) if isinstance(out, (tuple, list)) else (out,)

    return TupleOutput(model).eval()


@contextlib.contextmanager
def _polygraphy_report():
    """Polygraphy's INFO-level report printed whatever severity another caller left set (restored after)."""
    from polygraphy.logger import G_LOGGER
    attr = "module_severity" if hasattr(G_LOGGER, "module_severity") else "severity"
    old = getattr(G_LOGGER, attr)
    setattr(G_LOGGER, attr, G_LOGGER.INFO)
    try:
        yield
    finally:
        setattr(G_LOGGER, attr, old)


@dataclasses.dataclass
class ValidationResult:
    passed: bool
    precision: str
    tolerance: float
    errors: list          # per input: max |onnx - torch| / max |torch|
    shapes: list          # per input: its shape

    def summary(self) -> str:
        worst = max(self.errors) if self.errors else float("nan")
        verdict = "PASSED" if self.passed else "FAILED"
        per_input = ", ".join(f"{tuple(s)}: {e:.2e}" for s, e in zip(self.shapes, self.errors))
        return (f"{verdict}: ONNX Runtime vs PyTorch, max |onnx - torch| / max |torch| = {worst:.2e} "
                f"(tolerance {self.tolerance:.0e}, precision {self.precision}; per input {per_input})")


def model_precision(model_proto) -> str:
    from onnx import TensorProto
    meta = read_metadata(model_proto).get("precision")
    if meta:
        return meta
    elem = model_proto.graph.input[0].type.tensor_type.elem_type
    return "fp16" if elem == TensorProto.FLOAT16 else "fp32"


def validate_onnx(onnx_path: str, torch_model, inputs, *, tolerance: float | None = None) -> ValidationResult:
    """Compare ``onnx_path`` in ONNX Runtime with ``torch_model`` (fp32) on ``inputs`` (arrays (B,C,H,W)).

    Polygraphy prints its report (G_LOGGER); returns a ValidationResult (passed, per-input errors).
    """
    require_validation_packages()
    import onnx
    from onnx import TensorProto
    from polygraphy.backend.onnxrt import OnnxrtRunner
    from polygraphy.common import TensorMetadata
    from polygraphy.comparator import Comparator, CompareFunc

    from .onnx_ort import make_ort_session

    proto = onnx.load(onnx_path, load_external_data=False)
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
            raise ValueError(f"each input must be 4-D (B, C, H, W), got shape {x.shape}")
        feeds.append({input_name: np.ascontiguousarray(x.astype(in_dtype))})
    if not feeds:
        raise ValueError("no inputs to validate on")

    torch_model = torch_model.float().eval()
    channels = feeds[0][input_name].shape[1]
    metadata = TensorMetadata().add(input_name, dtype=in_dtype, shape=("batch", channels, "height", "width"))
    wrapped = _tuple_output(torch_model)
    # A callable returning the module: Polygraphy calls a callable model argument (and nn.Module is one).
    torch_runner = _pyt_runner_class()(lambda: wrapped, metadata, output_names, name="pytorch")
    ort_runner = OnnxrtRunner(lambda: make_ort_session(onnx_path), name="onnxruntime")
    with _polygraphy_report():
        results = Comparator.run([torch_runner, ort_runner], data_loader=feeds)

    torch_outs = results[torch_runner.name]
    ort_outs = results[ort_runner.name]
    scale = {name: max(float(np.abs(it[name]).max()) for it in torch_outs) for name in output_names}
    errors = []
    for ref_it, ort_it in zip(torch_outs, ort_outs):
        errors.append(max(float(np.abs(ort_it[name].astype(np.float64) - ref_it[name]).max())
                          / max(float(np.abs(ref_it[name]).max()), 1e-30) for name in output_names))
    options = dict(check_error_stat="max", rtol=tol, atol={name: tol * max(s, 1e-30) for name, s in scale.items()})
    try:   # Polygraphy >= 0.53; CompareFunc.simple is deprecated there
        from polygraphy.comparator import SimpleCompareFunc
        compare = SimpleCompareFunc(**options)
    except ImportError:
        compare = CompareFunc.simple(**options)
    with _polygraphy_report():
        accuracy = Comparator.compare_accuracy(results, compare_func=compare)
    passed = bool(accuracy) and all(e <= tol for e in errors)
    return ValidationResult(passed=passed, precision=precision, tolerance=tol, errors=errors,
                            shapes=[f[input_name].shape for f in feeds])


def export_and_validate_default(out_dir, variants=(("plugin", "fp32"), ("plugin", "fp16"), ("standard", "fp32")),
                                verbose: bool = False) -> int:
    """The main job's ONNX step: export the shipped default model in each (ops, precision) variant into
    ``out_dir`` and validate each against PyTorch (Polygraphy, ONNX Runtime) on the shipped held-out digits.

    Prints one line per export and per validation (Polygraphy's full report with ``verbose``); returns 0 when
    every validation passed, else 1. ``wtconv-trt demo`` can call this after its own checks.
    """
    import contextlib
    import io
    import os

    from .inputs import default_inputs
    from .onnx_export import export_onnx
    from .onnx_models import DEFAULT_SOURCE, build_model

    require_validation_packages()
    os.makedirs(out_dir, exist_ok=True)
    model, description = build_model(DEFAULT_SOURCE)
    inputs = default_inputs(description, None)
    shape = tuple(int(d) for d in description.get("input_shape", "1,1,32,32").split(","))
    status = 0
    for ops, precision in variants:
        path = os.path.join(out_dir, f"default_{ops}_{precision}.onnx")
        result = export_onnx(model, path, ops=ops, precision=precision, input_shape=shape, metadata=description)
        print(result.summary())
        report = io.StringIO()
        with contextlib.redirect_stdout(report) if not verbose else contextlib.nullcontext():
            outcome = validate_onnx(path, model, inputs)
        print("  " + outcome.summary())
        status |= 0 if outcome.passed else 1
    return status
