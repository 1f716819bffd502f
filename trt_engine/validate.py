"""Validate an engine against the PyTorch model it came from, with Polygraphy.

``wtconv-trt validate --engine ENGINE`` (the validate command calls validate_engine):
Polygraphy's Comparator runs a TrtRunner on the engine and a PyTorch runner on the source model (rebuilt
from the manifest: the shipped default model, or ARCH + checkpoint) on the same inputs, compares every output
with SimpleCompareFunc under per-precision tolerances, prints a report and returns non-zero on mismatch.

``--save-inputs FILE.json --save-outputs FILE.json`` write Polygraphy's own formats (the inputs as a JSON
list of feed dicts, polygraphy.json.save_json; the PyTorch outputs as a RunResults, RunResults.save), so the
same comparison replays with the command line (static-registration plugin library, as polygraphy --plugins
is a plain dlopen):

    polygraphy run ENGINE --model-type engine --trt --plugins build/plugin/trt/libwtconv_trt_plugin.so \
        --load-inputs inputs.json --load-outputs outputs.json --atol 0.05 --rtol 0.05

Why our own PyTorch runner instead of polygraphy.backend.pyt.PytRunner: PytRunner moves every input to CUDA
and unpacks TensorMetadata values as (dtype, shape) pairs, which fails with Polygraphy >= 0.50's DataType
entries; a 20-line BaseRunner subclass runs wherever the model runs (and is tested on the CPU).
"""

from __future__ import annotations

import sys
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from trt_engine import manifest as mf
from trt_engine.build import is_default_source
from trt_engine.profiles import find_profile, format_shape, parse_dims

# (atol, rtol) per engine precision, for SimpleCompareFunc's "elemwise" check (an element fails only when it
# exceeds both). fp32: TensorRT may use TF32 for convolutions and matrix products (BuilderFlag.TF32 is on by
# default, 10-bit mantissa products), hence 1e-3 rather than 1e-5. fp16: an fp16 network (11-bit mantissa)
# through a dozen residual blocks.
TOLERANCES = {"fp32": (1e-3, 1e-3), "fp16": (5e-2, 5e-2)}
MIN_TOP1_AGREEMENT = 0.99


def tolerances_for(precision: str, atol=None, rtol=None) -> tuple[float, float]:
    if precision not in TOLERANCES:
        raise ValueError(f"unknown precision {precision!r} in the manifest; expected fp32 or fp16")
    default_atol, default_rtol = TOLERANCES[precision]
    return (default_atol if atol is None else float(atol)), (default_rtol if rtol is None else float(rtol))


# -------------------------------------------------------------------------------------------------------------
# The PyTorch side
# -------------------------------------------------------------------------------------------------------------

def load_source_model(source: dict | None):
    """The PyTorch model recorded in the manifest (the exporter's metadata: source / weights), rebuilt by
    wtconv_export.onnx_models.build_model_from_metadata, in eval mode, fp32, on CUDA when available."""
    from wtconv_export.onnx_models import build_model_from_metadata

    if not source:
        raise ValueError("the manifest does not say which PyTorch model the engine came from; give it with --arch "
                         "and --checkpoint (or rebuild the engine from an ONNX model exported by wtconv-trt export)")
    model, _ = build_model_from_metadata(source)
    return prepare_reference(model)


def prepare_reference(model):
    import torch
    model = model.float().eval()
    return model.cuda() if torch.cuda.is_available() else model


def make_runner_class():
    from polygraphy.backend.base import BaseRunner
    from polygraphy.common import TensorMetadata

    class TorchRunner(BaseRunner):
        """Runs a torch.nn.Module under Polygraphy. Inputs are cast to float32 (the reference runs in fp32 for
        every engine precision), outputs come back as float32 NumPy arrays named ``output_names``."""

        def __init__(self, model, input_shapes: dict, output_names, name=None):
            super().__init__(name=name, prefix="pytorch-runner")
            self._model = model
            self._input_shapes = dict(input_shapes)
            self.output_names = list(output_names)

        def activate_impl(self):
            import torch
            self.model = self._model.eval()
            first = next(iter(self.model.parameters()), None)
            self.device = first.device if first is not None else torch.device("cpu")

        def get_input_metadata_impl(self):
            meta = TensorMetadata()
            for name, shape in self._input_shapes.items():
                meta.add(name, np.float32, shape)
            return meta

        def infer_impl(self, feed_dict):
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
            return OrderedDict((name, out.detach().float().cpu().numpy())
                               for name, out in zip(self.output_names, outputs))

        def deactivate_impl(self):
            del self.model

    return TorchRunner


def make_inputs(source: dict | None, input_name: str, shape, dtype: str, iterations: int, seed: int) -> list:
    """Feed dicts for the comparison. The shipped default model gets real held-out digits (a classification
    check means something on real images); any other model gets seeded standard-normal inputs."""
    shape = tuple(int(d) for d in shape)
    n = shape[0]
    feeds = []
    real = None
    if is_default_source(source):
        from wtconv_export.models import load_heldout_digits
        images, _ = load_heldout_digits(count=n * iterations)
        if tuple(images.shape[1:]) == shape[1:] and images.shape[0] >= n * iterations:
            real = images.numpy()
    rng = np.random.default_rng(seed)
    for i in range(iterations):
        x = real[i * n:(i + 1) * n] if real is not None else rng.standard_normal(shape, dtype=np.float32)
        feeds.append(OrderedDict([(input_name, np.ascontiguousarray(x).astype(dtype))]))
    return feeds


# -------------------------------------------------------------------------------------------------------------
# Comparison (any two Polygraphy runners: TensorRT vs PyTorch in use, PyTorch vs PyTorch in the CPU tests)
# -------------------------------------------------------------------------------------------------------------

@dataclass
class ComparisonReport:
    passed: bool
    atol: float
    rtol: float
    rows: list = field(default_factory=list)   # per (iteration, output): max_abs, max_rel, mean_abs, top1
    top1_agreement: float | None = None

    def format(self, engine_name: str, reference_name: str) -> str:
        lines = [f"{engine_name} vs {reference_name}: atol {self.atol:g}, rtol {self.rtol:g}",
                 f"  {'iter':>4} {'output':<12} {'max |diff|':>11} {'mean |diff|':>11} {'max rel':>10} "
                 f"{'top-1 agree':>11}"]
        for r in self.rows:
            top1 = f"{r['top1']:.4f}" if r["top1"] is not None else "-"
            lines.append(f"  {r['iteration']:>4} {r['output']:<12} {r['max_abs']:>11.3e} {r['mean_abs']:>11.3e} "
                         f"{r['max_rel']:>10.3e} {top1:>11}")
        if self.top1_agreement is not None:
            lines.append(f"  top-1 agreement over all images: {self.top1_agreement:.4f} (required "
                         f">= {MIN_TOP1_AGREEMENT})")
        lines.append("PASSED" if self.passed else "FAILED: outputs differ beyond tolerance")
        return "\n".join(lines)


def _quiet_polygraphy() -> None:
    """Polygraphy prints every output array at INFO; our report has the figures. Keep its warnings and errors."""
    from polygraphy.logger import G_LOGGER
    if hasattr(G_LOGGER, "module_severity"):
        G_LOGGER.module_severity = G_LOGGER.WARNING
    else:
        G_LOGGER.severity = G_LOGGER.WARNING


def compare_runners(engine_runner, reference_runner, feeds: list, atol: float, rtol: float,
                    save_inputs=None, save_outputs=None) -> ComparisonReport:
    """Run both runners on ``feeds`` with Polygraphy's Comparator and compare them (engine first, reference
    second: relative errors are relative to the reference). Saves the inputs and the reference's outputs in
    Polygraphy's JSON formats when asked."""
    from polygraphy.comparator import Comparator, RunResults
    from polygraphy.json import save_json

    try:  # Polygraphy >= 0.50; CompareFunc.simple is deprecated there (removal planned for 0.60)
        from polygraphy.comparator import SimpleCompareFunc
        compare_func = SimpleCompareFunc(atol=atol, rtol=rtol, check_shapes=True)
    except ImportError:
        from polygraphy.comparator import CompareFunc
        compare_func = CompareFunc.simple(atol=atol, rtol=rtol, check_shapes=True)

    _quiet_polygraphy()
    results = Comparator.run([engine_runner, reference_runner], data_loader=feeds)
    accuracy = Comparator.compare_accuracy(results, compare_func=compare_func)
    passed = bool(accuracy)

    (_, engine_iters), (ref_name, ref_iters) = results[0], results[1]
    rows, agree, total = [], 0, 0
    for i, (out_e, out_r) in enumerate(zip(engine_iters, ref_iters)):
        for name in out_r.keys():
            a = np.asarray(out_e[name], dtype=np.float64)
            b = np.asarray(out_r[name], dtype=np.float64)
            diff = np.abs(a - b)
            top1 = None
            if a.ndim == 2 and a.shape[1] > 1:
                same = a.argmax(1) == b.argmax(1)
                top1 = float(same.mean())
                agree, total = agree + int(same.sum()), total + same.size
            rows.append({"iteration": i, "output": name, "max_abs": float(diff.max()),
                         "mean_abs": float(diff.mean()),
                         "max_rel": float((diff / np.maximum(np.abs(b), 1e-12)).max()), "top1": top1})
    top1_agreement = agree / total if total else None
    if top1_agreement is not None and top1_agreement < MIN_TOP1_AGREEMENT:
        passed = False

    if save_inputs:
        save_json(feeds, str(save_inputs), description="inference inputs")
    if save_outputs:
        reference_only = RunResults()
        reference_only.append((ref_name, ref_iters))
        reference_only.save(str(save_outputs))
    return ComparisonReport(passed, atol, rtol, rows, top1_agreement)


# -------------------------------------------------------------------------------------------------------------
# Engine validation (needs TensorRT)
# -------------------------------------------------------------------------------------------------------------


@dataclass
class EngineCheck:
    """What validate and bench need before running: manifest, profiles, chosen shape and profile."""
    manifest: dict
    profiles: list
    input_name: str
    input_dtype: str
    shape: tuple
    profile_index: int


def check_engine_request(engine, shape_text=None) -> EngineCheck:
    """CPU-side checks of an engine and a requested input shape: manifest present and well-formed, engine bytes
    match its sha256, the shape inside a profile. Raises with cause and fix."""
    manifest = mf.read_manifest(engine)
    mf.check_engine_file(engine, manifest)
    profiles = mf.profiles_of(manifest)
    inputs = [t for t in manifest["io"] if t["mode"] == "input"]
    if len(inputs) != 1:
        raise ValueError(f"the engine has {len(inputs)} inputs; validate and bench handle single-input models")
    name = inputs[0]["name"]
    shape = parse_dims(shape_text, "--shape") if shape_text else tuple(profiles[0].inputs[name].opt)
    index = find_profile(profiles, {name: shape})
    return EngineCheck(manifest, profiles, name, inputs[0]["dtype"], tuple(shape), index)


def load_engine_for_run(engine, manifest: dict, plugin=None):
    """TensorRT side of loading: version check (before deserialization), plugin, deserialize."""
    from trt_engine import tensorrt_api

    trt = tensorrt_api.import_tensorrt()
    mf.check_tensorrt_version(manifest, trt.__version__)
    library = plugin or (manifest.get("plugin") or {}).get("library")
    if manifest.get("plugin") and not plugin and not (library and Path(library).is_file()):
        from trt_engine.plugin_library import default_plugin
        library = default_plugin() or library
    if manifest.get("plugin"):
        if not library or not Path(library).is_file():
            raise FileNotFoundError(f"the engine uses the {manifest['plugin']['name']} plugin and its library "
                                    f"{library!r} is not there; pass --plugin PATH/TO/libwtconv_trt_plugin_dynamic.so "
                                    f"built for TensorRT {manifest['tensorrt']['major']}")
        tensorrt_api.load_plugin(library)
    elif plugin:
        tensorrt_api.load_plugin(plugin)
    return tensorrt_api.deserialize_engine(Path(engine).read_bytes(), f"engine {engine}")


def validate_engine(engine, *, plugin=None, shape=None, iterations=4, seed=0, atol=None, rtol=None,
                    source_model=None, model=None, inputs=None, save_inputs=None, save_outputs=None,
                    out=sys.stdout) -> ComparisonReport:
    """Python API of ``wtconv-trt validate --engine``. Returns the report (report.passed).

    source_model: the PyTorch model as recorded by the exporter ({"source": ..., "weights": ...}) or a spec
    string ('default', 'ARCH:CHECKPOINT'); default: the manifest's. model: a torch.nn.Module to use instead.
    inputs: arrays (B, C, H, W), one comparison each, instead of generated ones."""
    from polygraphy.backend.trt import TrtRunner

    from trt_engine.build import parse_source_model

    if iterations < 1:
        raise ValueError(f"--iterations must be >= 1, got {iterations}")
    if inputs is not None and len(inputs) == 0:
        raise ValueError("no inputs given")
    check = check_engine_request(engine, shape if inputs is None else format_shape(np.shape(inputs[0])))
    m = check.manifest
    if isinstance(source_model, str):
        source_model = parse_source_model(source_model)
    source = source_model or m.get("model", {}).get("source")
    atol, rtol = tolerances_for(m["precision"], atol, rtol)
    for path in (save_inputs, save_outputs):
        if path and not Path(path).resolve().parent.is_dir():
            raise ValueError(f"cannot write {path}: its directory does not exist")
    if inputs is not None:
        feeds = []
        for array in inputs:
            index = find_profile(check.profiles, {check.input_name: tuple(np.shape(array))})
            if index != check.profile_index:
                raise ValueError(f"input shapes {format_shape(np.shape(inputs[0]))} and "
                                 f"{format_shape(np.shape(array))} fall in different optimisation profiles; "
                                 f"validate them separately")
            feeds.append(OrderedDict([(check.input_name, np.ascontiguousarray(array).astype(check.input_dtype))]))
    else:
        feeds = make_inputs(source, check.input_name, check.shape, check.input_dtype, iterations, seed)

    loaded = load_engine_for_run(engine, m, plugin)
    reference_model = prepare_reference(model) if model is not None else load_source_model(source)
    outputs = [t["name"] for t in m["io"] if t["mode"] == "output"]
    TorchRunner = make_runner_class()
    engine_runner = TrtRunner(loaded.engine, name="tensorrt", optimization_profile=check.profile_index)
    reference_runner = TorchRunner(reference_model, {check.input_name: check.shape}, outputs, name="pytorch")
    report = compare_runners(engine_runner, reference_runner, feeds, atol, rtol, save_inputs, save_outputs)
    what = (source or {}).get("source", "given model") if model is None else "given model"
    print(f"engine {engine} ({m['precision']}, TensorRT {m['tensorrt']['version']}), input {check.input_name} "
          f"{check.input_dtype}, profile {check.profile_index}, {len(feeds)} batches of "
          + ", ".join(sorted({format_shape(f[check.input_name].shape) for f in feeds})), file=out)
    print(report.format("TensorRT", f"PyTorch ({what})"), file=out)
    if save_inputs or save_outputs:
        print(replay_command(engine, save_inputs, save_outputs, atol, rtol, m), file=out)
    return report


def replay_command(engine, save_inputs, save_outputs, atol, rtol, manifest) -> str:
    static_lib = "build/plugin/trt/libwtconv_trt_plugin.so"
    parts = [f"polygraphy run {engine} --model-type engine --trt"]
    if manifest.get("plugin"):
        parts.append(f"--plugins {static_lib}")
    if save_inputs:
        parts.append(f"--load-inputs {save_inputs}")
    if save_outputs:
        parts.append(f"--load-outputs {save_outputs}")
    parts.append(f"--atol {atol:g} --rtol {rtol:g}")
    return ("replay with Polygraphy's command line (static-registration plugin library):\n  " + " ".join(parts))



__all__ = ["TOLERANCES", "validate_engine", "compare_runners",
           "check_engine_request", "make_runner_class", "make_inputs", "load_source_model"]
