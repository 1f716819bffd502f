"""``run_demo``: the shipped default model through the published reference and the fused operator, layer by
layer, then exported to ONNX three ways and each export validated (``wtconv-trt demo``, the README's main job)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from wtconv_core.inputs import MAX_INT32, check_int, check_tolerance

__all__ = ["DEFAULT_ONNX_DIR", "DemoComparison", "DemoResult", "ONNX_FILES", "run_demo"]

DEFAULT_ONNX_DIR = "wtconv_trt_out"
# The files the ONNX step writes (wtconv_validate.ort.export_and_validate_default).
ONNX_FILES = ("default_plugin_fp32.onnx", "default_plugin_fp16.onnx", "default_standard_fp32.onnx")


@dataclass
class LayerRow:
    """One WTConv2d layer: its configuration and the fused operator's error against the reference."""

    name: str
    channels: int
    height: int
    width: int
    kernel_size: int
    wt_levels: int
    stride: int
    abs_error: float
    rel_error: float


@dataclass
class DemoComparison:
    """The PyTorch part: per-layer and logits agreement of the fused operator with the published reference."""

    model: str  # one line describing the default model
    batch: int
    tolerance: float
    layers: list[LayerRow]
    fused_layers: int
    logits_abs_error: float
    logits_rel_error: float
    same_predictions: int
    float64_rel_error: float
    accuracy_reference: float
    accuracy_fused: float
    seconds: float
    failures: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return not self.failures

    def text(self) -> str:
        """The comparison as ``wtconv-trt demo`` prints it: the table, the logits, the verdict."""
        header = f"{'layer':<32} {'C':>4} {'H x W':>7} {'k':>2} {'L':>2} {'s':>2} {'max abs err':>12} {'rel err':>10}"
        lines = [self.model, f"batch: {self.batch} shipped held-out images", "", header, "-" * len(header)]
        for r in self.layers:
            flag = "" if r.rel_error <= self.tolerance else "  <-- exceeds tolerance"
            lines.append(
                f"{r.name:<32} {r.channels:>4} {r.height:>3}x{r.width:<3} {r.kernel_size:>2} {r.wt_levels:>2} "
                f"{r.stride:>2} {r.abs_error:>12.3e} {r.rel_error:>10.3e}{flag}"
            )
        lines += [
            "",
            f"logits (fp32, {self.fused_layers} fused layers): max abs err {self.logits_abs_error:.3e}, rel err "
            f"{self.logits_rel_error:.3e}; same prediction on {self.same_predictions}/{self.batch} images",
            f"logits (float64, exact Haar taps): rel err {self.float64_rel_error:.3e}",
            f"accuracy on this batch: reference {self.accuracy_reference:.4f}, fused {self.accuracy_fused:.4f}",
            "",
        ]
        if self.failures:
            lines.append(
                f"FAIL: relative error above {self.tolerance:g} in {', '.join(self.failures)} ({self.seconds:.1f} s)"
            )
        else:
            lines.append(
                f"OK: reference and fused operator agree within {self.tolerance:g} relative error "
                f"in every layer and in the logits ({self.seconds:.1f} s)"
            )
        return "\n".join(lines)


@dataclass
class DemoResult:
    """The whole demo: the comparison, then (unless skipped or the comparison failed) each ONNX export with its
    validation, and the next command this machine can run."""

    comparison: DemoComparison
    onnx_dir: str | None
    exports: list = field(default_factory=list)  # (ExportResult, ValidationResult) per variant
    seconds: float = 0.0
    next_step: str = ""

    @property
    def passed(self) -> bool:
        return self.comparison.passed and all(outcome.passed for _, outcome in self.exports)


def _errors(got, expected) -> tuple[float, float]:
    diff = (got.double() - expected.double()).abs().max().item()
    scale = expected.double().abs().max().item()
    return diff, diff / scale if scale > 0 else diff


def compare_default_model(count: int = 64, tolerance: float = 1e-5) -> DemoComparison:
    """Run the shipped default model's reference WTConv2d layers and the fused operator on ``count`` held-out
    digits, layer by layer (each layer's captured input), for the whole model in fp32, and in float64 with exact
    Haar taps; ``tolerance`` bounds every relative error (max |fused - reference| / max |reference|)."""
    import copy

    import torch

    from wtconv_torch import haar
    from wtconv_torch.folding import fold_wtconv
    from wtconv_torch.fused_module import FusedWTConv2d, fuse_wtconv_layers
    from wtconv_torch.models import accuracy, load_default_model, load_heldout_digits
    from wtconv_torch.ops import fused_wtconv2d
    from wtconv_torch.wtconv2d import WTConv2d

    count = check_int(count, "count", 1, MAX_INT32)
    tolerance = check_tolerance(tolerance)
    # Tiny tensors: one thread is fastest, and OpenMP's spinning pool stalls on a busy machine.
    torch.set_num_threads(1)
    start = time.perf_counter()
    model, config = load_default_model()
    x, labels = load_heldout_digits(config, count=count)
    arch = config["model"]
    described = (
        f"default model: {config['name']} — depths {arch['depths']}, dims {arch['dims']}, kernel "
        f"{arch['kernel_sizes']}, wt_levels {arch['wt_levels']}, input {tuple(x.shape[1:])}; "
        f"recorded held-out accuracy {config['heldout_accuracy']:.4f} on {config['dataset']['test_count']} images"
    )
    # Reference run, capturing every WTConv2d's input and output.
    layers = [(name, m) for name, m in model.named_modules() if isinstance(m, WTConv2d)]
    captured = {}
    hooks = [
        m.register_forward_hook(lambda mod, inp, out, name=name: captured.__setitem__(name, (inp[0], out)))
        for name, m in layers
    ]
    with torch.no_grad():
        ref_logits = model(x)
    for h in hooks:
        h.remove()

    rows, failures = [], []
    with torch.no_grad():
        for name, layer in layers:
            inp, out = captured[name]
            folded = fold_wtconv(layer)
            got = fused_wtconv2d(inp, *folded.tensors(), folded.kernel_size, folded.wt_levels, folded.stride)
            abs_err, rel_err = _errors(got, out)
            rows.append(
                LayerRow(
                    name,
                    folded.channels,
                    inp.shape[2],
                    inp.shape[3],
                    folded.kernel_size,
                    folded.wt_levels,
                    folded.stride,
                    abs_err,
                    rel_err,
                )
            )
            if rel_err > tolerance:
                failures.append(name)

    # Whole model with every WTConv2d replaced by the fused operator.
    fused = fuse_wtconv_layers(copy.deepcopy(model)).eval()
    n_fused = sum(isinstance(m, FusedWTConv2d) for m in fused.modules())
    with torch.no_grad():
        fused_logits = fused(x)
    abs_err, rel_err = _errors(fused_logits, ref_logits)
    same = (fused_logits.argmax(1) == ref_logits.argmax(1)).sum().item()
    if rel_err > tolerance:
        failures.append("logits")

    # The same comparison in float64 with exact Haar filters: the fused formulation is exact.
    ref64 = copy.deepcopy(model).double()
    with torch.no_grad():
        for _, layer in ((n, m) for n, m in ref64.named_modules() if isinstance(m, WTConv2d)):
            wt, iwt = haar.create_2d_haar_filters(layer.in_channels, torch.float64)
            layer.wt_filter.copy_(wt)
            layer.iwt_filter.copy_(iwt)
        fused64 = copy.deepcopy(ref64)
        for name, child in [(n, m) for n, m in fused64.named_modules() if isinstance(m, WTConv2d)]:
            parent = fused64.get_submodule(name.rsplit(".", 1)[0])
            setattr(parent, name.rsplit(".", 1)[1], FusedWTConv2d(fold_wtconv(child, torch.float64)))
        _, rel64 = _errors(fused64(x.double()), ref64(x.double()))

    return DemoComparison(
        model=described,
        batch=len(labels),
        tolerance=tolerance,
        layers=rows,
        fused_layers=n_fused,
        logits_abs_error=abs_err,
        logits_rel_error=rel_err,
        same_predictions=same,
        float64_rel_error=rel64,
        accuracy_reference=accuracy(model, x, labels),
        accuracy_fused=accuracy(fused, x, labels),
        seconds=time.perf_counter() - start,
        failures=failures,
    )


def next_step(onnx_dir: str) -> str:
    """The next command this machine can run: a TensorRT build where TensorRT is installed (of the plugin export
    when the plugin library is found, else of the standard-op export, which needs none), else the validation of an
    export in ONNX Runtime (which runs anywhere)."""
    from trt_engine.tensorrt_api import tensorrt_available
    from wtconv_libs.lookup import default_plugin

    if tensorrt_available():
        if default_plugin() is not None:
            return (
                f"Next: build a TensorRT engine: wtconv-trt build "
                f"{os.path.join(onnx_dir, 'default_plugin_fp16.onnx')} (docs/engines.md)"
            )
        return (
            f"Next: build a TensorRT engine from the standard-op export (no plugin library found): wtconv-trt "
            f"build {os.path.join(onnx_dir, 'default_standard_fp32.onnx')} (docs/engines.md)"
        )
    return (
        f"Next: wtconv-trt validate {os.path.join(onnx_dir, 'default_plugin_fp32.onnx')} (ONNX Runtime, runs "
        f"here); TensorRT is not installed, so 'wtconv-trt build' needs a machine with it (docs/engines.md)"
    )


def run_demo(
    *,
    count: int = 64,
    tolerance: float = 1e-5,
    onnx_dir: str | os.PathLike = DEFAULT_ONNX_DIR,
    skip_onnx: bool = False,
    force: bool = False,
    on_comparison: Callable[[DemoComparison], None] | None = None,
) -> DemoResult:
    """The demo (``wtconv-trt demo``): compare_default_model(count, tolerance), then, unless ``skip_onnx`` or the
    comparison failed, export the default model to ``onnx_dir`` (plugin fp32 and fp16, standard ops fp32) and
    validate each export against PyTorch with Polygraphy in ONNX Runtime. ``on_comparison`` is called with the
    comparison before the exports start (they take tens of seconds), so a caller can show it at once.

    count: 1 to 2**31 - 1 held-out images (at most the split's size are used); tolerance: > 0. The values and
    ``onnx_dir`` (its earlier exports are replaced only with ``force``) are checked before anything runs."""
    from wtconv_core.paths import check_output_dir

    check_int(count, "count", 1, MAX_INT32)
    check_tolerance(tolerance)
    if not skip_onnx:  # before the PyTorch part, so a bad onnx_dir costs nothing
        check_output_dir(onnx_dir, option="onnx_dir", force=force, will_write=ONNX_FILES)
    start = time.perf_counter()
    comparison = compare_default_model(count, tolerance)
    if on_comparison is not None:
        on_comparison(comparison)
    result = DemoResult(comparison, None if skip_onnx else os.fspath(onnx_dir))
    if comparison.passed and not skip_onnx:
        from wtconv_validate.ort import export_and_validate_default

        result.exports = export_and_validate_default(onnx_dir)
        result.next_step = next_step(os.fspath(onnx_dir))
    result.seconds = time.perf_counter() - start
    return result
