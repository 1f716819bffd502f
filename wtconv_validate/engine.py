"""Validate an engine against the PyTorch model it came from, with Polygraphy.

``wtconv-trt validate --engine ENGINE`` and ``wtconv_trt.validate_engine`` call validate_engine, which makes every
check (option values, the engine and its manifest, the model and the inputs against the engine, the files to save)
before anything runs: Polygraphy's Comparator runs a TrtRunner on the
engine and the PyTorch runner of wtconv_validate.core on the source model (rebuilt from the manifest: the
shipped default model, or ARCH + checkpoint) on the same inputs, and the validation core compares every output
(docs/engines.md, "Validation"; the meaning of each tolerance: docs/onnx_export.md, "Tolerances"):
element-wise atol/rtol per precision, top-1 agreement of the logits, and, when given, a bound on
max |engine - torch| / max |torch|.

``save_inputs`` / ``save_outputs`` write Polygraphy's own formats (the inputs as a JSON list of feed dicts,
polygraphy.json.save_json; the PyTorch outputs as a RunResults, RunResults.save), so the same comparison replays
with Polygraphy's command line (static-registration plugin library, as polygraphy --plugins is a plain dlopen):

    polygraphy run ENGINE --model-type engine --trt --plugins ~/.cache/wtconv-trt/lib/trt11/libwtconv_trt_plugin.so \
        --load-inputs inputs.json --load-outputs outputs.json --atol 0.05 --rtol 0.05
"""

from __future__ import annotations

import logging
import os
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

import numpy as np

from trt_engine.engine_file import OpenedEngine, load_engine_for_run, open_engine
from trt_engine.manifest import EngineManifest
from trt_engine.profiles import find_profile, format_shape
from wtconv_core.errors import EngineError, InputError, ModelError
from wtconv_core.inputs import check_int, check_number, check_tolerance, shape_of
from wtconv_export.exported import is_default_source, parse_source_model
from wtconv_validate.core import ComparisonReport, Tolerance, compare_runners, torch_runner

logger = logging.getLogger(__name__)

# (atol, rtol) per engine precision, element-wise (an element fails only when it exceeds both). fp32: TensorRT
# may use TF32 for convolutions and matrix products (BuilderFlag.TF32 is on by default, 10-bit mantissa
# products), hence 1e-3 rather than 1e-5. fp16: an fp16 network (11-bit mantissa) through a dozen residual blocks.
TOLERANCES = {"fp32": (1e-3, 1e-3), "fp16": (5e-2, 5e-2)}
MIN_TOP1_AGREEMENT = 0.99
MAX_ITERATIONS = 10000  # generated input batches per validation
DEFAULT_ITERATIONS = 4

__all__ = [
    "MIN_TOP1_AGREEMENT",
    "TOLERANCES",
    "check_engine_takes_model",
    "check_validation_options",
    "engine_tolerance",
    "load_source_model",
    "make_inputs",
    "prepare_reference",
    "replay_command",
    "tolerances_for",
    "validate_engine",
]


def tolerances_for(precision: str, atol: float | None = None, rtol: float | None = None) -> tuple[float, float]:
    """(atol, rtol) for an engine of ``precision``; a given value replaces the default."""
    if precision not in TOLERANCES:
        raise EngineError(
            f"unknown precision {precision!r} in the manifest; expected fp32 or fp16 (rebuild the "
            f"engine with wtconv-trt build)"
        )
    default_atol, default_rtol = TOLERANCES[precision]
    return (default_atol if atol is None else float(atol)), (default_rtol if rtol is None else float(rtol))


def engine_tolerance(
    precision: str, atol: float | None = None, rtol: float | None = None, scale: float | None = None
) -> Tolerance:
    """The pass criteria of an engine validation: element-wise (atol, rtol), top-1 agreement >= 0.99, and
    max |engine - torch| / max |torch| <= ``scale`` when given."""
    atol, rtol = tolerances_for(precision, atol, rtol)
    return Tolerance(scale=scale, atol=atol, rtol=rtol, min_top1=MIN_TOP1_AGREEMENT)


# -------------------------------------------------------------------------------------------------------------
# The PyTorch side
# -------------------------------------------------------------------------------------------------------------


def load_source_model(source: dict | None) -> Any:
    """The PyTorch model recorded in the manifest (the exporter's metadata: source / weights), rebuilt by
    wtconv_export.onnx_models.build_model_from_metadata, in eval mode, fp32, on CUDA when available."""
    from wtconv_export.onnx_models import build_model_from_metadata

    if not source:
        raise ModelError(
            "the manifest does not say which PyTorch model the engine came from; give it with arch=ARCH "
            "and checkpoint=FILE (or rebuild the engine from an ONNX model exported by wtconv-trt export)"
        )
    model, _ = build_model_from_metadata(source)
    return prepare_reference(model)


def prepare_reference(model: Any) -> Any:
    """``model`` in fp32 eval mode, on CUDA when available (the reference for every engine precision)."""
    import torch

    model = model.float().eval()
    return model.cuda() if torch.cuda.is_available() else model


def make_inputs(
    source: dict | None, input_name: str, shape: Sequence[int], dtype: str, iterations: int, seed: int
) -> list[OrderedDict]:
    """Feed dicts for the comparison. The shipped default model gets real held-out digits (a classification
    check means something on real images); any other model gets seeded standard-normal inputs."""
    shape = tuple(int(d) for d in shape)
    n = shape[0]
    feeds = []
    real = None
    if is_default_source(source):
        from wtconv_torch.models import load_heldout_digits

        images, _ = load_heldout_digits(count=n * iterations)
        if tuple(images.shape[1:]) == shape[1:] and images.shape[0] >= n * iterations:
            real = images.numpy()
    rng = np.random.default_rng(seed)
    for i in range(iterations):
        x = real[i * n : (i + 1) * n] if real is not None else rng.standard_normal(shape, dtype=np.float32)
        feeds.append(OrderedDict([(input_name, np.ascontiguousarray(x).astype(dtype))]))
    return feeds


# -------------------------------------------------------------------------------------------------------------
# Engine validation (needs TensorRT)
# -------------------------------------------------------------------------------------------------------------


def validate_engine(
    engine: str | os.PathLike | OpenedEngine,
    *,
    plugin: str | os.PathLike | None = None,
    shape: str | Sequence[int] | None = None,
    iterations: int = DEFAULT_ITERATIONS,
    seed: int = 0,
    atol: float | None = None,
    rtol: float | None = None,
    tolerance: float | None = None,
    source_model: dict | str | None = None,
    model: Any = None,
    inputs: str | os.PathLike | Sequence[np.ndarray] | None = None,
    save_inputs: str | os.PathLike | None = None,
    save_outputs: str | os.PathLike | None = None,
    force: bool = False,
) -> ComparisonReport:
    """Python API of ``wtconv-trt validate --engine``. Returns the report (``report.passed``; ``report.format()``
    is the text the command prints: what was compared, every measure, the verdict, the replay command).

    source_model: the PyTorch model as recorded by the exporter ({"source": ..., "weights": ...}) or a spec
    string ('default', 'ARCH:CHECKPOINT'); default: the manifest's. model: a torch.nn.Module to use instead.
    inputs: a .npy / .npz file or arrays (B, C, H, W), one comparison each, instead of generated ones; shape: the
    generated batches' shape ('8x1x32x32' or a tuple; default the first profile's opt shape). atol / rtol:
    element-wise tolerances (default per precision, TOLERANCES); tolerance: bound on max |engine - torch| /
    max |torch|. save_inputs / save_outputs: Polygraphy JSON files, replaced only with ``force``.

    Checked before TensorRT is imported, each with a WtconvTrtError that says what to change: the option values,
    the engine file and its manifest, the files to save, the model's input channels against the engine's, the
    inputs and the shape against the model and against the engine's fixed dimensions and profiles."""
    from polygraphy.backend.trt import TrtRunner

    from wtconv_core.inputs import load_inputs
    from wtconv_core.paths import check_output_file
    from wtconv_export.model_checks import check_arrays_fit_onnx, check_input_arrays, check_input_shape

    iterations, atol, rtol, tolerance = check_validation_options(iterations, atol, rtol, tolerance)
    shape = None if shape is None else shape_of(shape, "input_shape")
    opened = engine if isinstance(engine, OpenedEngine) else open_engine(engine)  # file, manifest, sha256: once
    engine = opened.path
    info = opened.manifest
    engine_input = opened.input
    # The engine's input dimensions as the manifest records them (None: dynamic).
    dims = [None if int(d) < 0 else int(d) for d in engine_input.shape]
    for option, path in (("save_inputs", save_inputs), ("save_outputs", save_outputs)):
        if path:
            check_output_file(path, option=option, force=force)
    if model is not None and len(dims) == 4:
        check_engine_takes_model(dims, model)
    shown_inputs = f"inputs {os.fspath(inputs)}" if isinstance(inputs, (str, os.PathLike)) else "inputs"
    if isinstance(inputs, (str, os.PathLike)):
        inputs = load_inputs(os.fspath(inputs))
    if inputs is not None and len(inputs) == 0:
        raise InputError("no inputs given: give at least one (B, C, H, W) array")
    if model is not None and inputs is not None:
        check_input_arrays(model, inputs, shown_inputs)
    if model is not None and shape is not None:
        check_input_shape(model, shape, "input_shape")
    if inputs is not None:
        check_arrays_fit_onnx(inputs, dims, shown_inputs, "the engine", "rebuild it for that shape")
    profile_index, run_shape = opened.place(np.shape(inputs[0]) if inputs is not None else shape)
    input_name, input_dtype = engine_input.name, engine_input.dtype
    if isinstance(source_model, str):
        source_model = parse_source_model(source_model)
    source = source_model or info.source_model
    criteria = engine_tolerance(info.precision, atol, rtol, tolerance)
    if inputs is not None:
        feeds = []
        for array in inputs:
            index = find_profile(info.profiles, {input_name: tuple(np.shape(array))})
            if index != profile_index:
                raise InputError(
                    f"input shapes {format_shape(np.shape(inputs[0]))} and "
                    f"{format_shape(np.shape(array))} fall in different optimisation profiles; "
                    f"validate them separately"
                )
            feeds.append(OrderedDict([(input_name, np.ascontiguousarray(array).astype(input_dtype))]))
    else:
        feeds = make_inputs(source, input_name, run_shape, input_dtype, iterations, seed)

    loaded = load_engine_for_run(opened, plugin)
    reference_model = prepare_reference(model) if model is not None else load_source_model(source)
    outputs = [t.name for t in info.outputs]
    engine_runner = TrtRunner(loaded.engine, name="tensorrt", optimization_profile=profile_index)
    reference_runner = torch_runner(reference_model, {input_name: run_shape}, outputs, name="pytorch")
    report = compare_runners(
        engine_runner, reference_runner, feeds, criteria, save_inputs=save_inputs, save_outputs=save_outputs
    )
    what = (source or {}).get("source", "given model") if model is None else "given model"
    report.test_name, report.reference_name = "TensorRT", f"PyTorch ({what})"
    report.header.append(
        f"engine {engine} ({info.precision}, TensorRT {info.tensorrt_version}), input {input_name} "
        f"{input_dtype}, profile {profile_index}, {len(feeds)} batches of "
        + ", ".join(sorted({format_shape(f[input_name].shape) for f in feeds}))
    )
    if save_inputs or save_outputs:
        report.footer.append(replay_command(engine, save_inputs, save_outputs, criteria.atol, criteria.rtol, info))
    return report


def check_validation_options(
    iterations: int | None = DEFAULT_ITERATIONS,
    atol: float | None = None,
    rtol: float | None = None,
    tolerance: float | None = None,
) -> tuple[int, float | None, float | None, float | None]:
    """The values of an engine validation checked (None: not given, the default applies): iterations 1 to
    MAX_ITERATIONS, atol and rtol finite and >= 0, tolerance in (0, 1e6]."""
    iterations = DEFAULT_ITERATIONS if iterations is None else check_int(iterations, "iterations", 1, MAX_ITERATIONS)
    atol = None if atol is None else check_number(atol, "atol", 0.0)
    rtol = None if rtol is None else check_number(rtol, "rtol", 0.0)
    tolerance = None if tolerance is None else check_tolerance(tolerance)
    return iterations, atol, rtol, tolerance


def check_engine_takes_model(dims: Sequence[int | None], model: Any) -> None:
    """The PyTorch model given for an engine must take the engine's input channels (``dims``: the engine's
    (B, C, H, W), None where dynamic): a model the engine was not built from would fail every comparison."""
    from wtconv_export.model_checks import input_channels

    channels = input_channels(model)
    if channels is not None and dims[1] is not None and dims[1] != channels:
        raise ModelError(
            f"the engine takes {dims[1]} input channels but the PyTorch model given (arch, checkpoint) takes "
            f"{channels}: is this the engine built from it? Give the matching model, or leave it out to use the one "
            f"recorded in the engine's manifest"
        )


def replay_command(
    engine: str | os.PathLike, save_inputs: Any, save_outputs: Any, atol: float, rtol: float, manifest: EngineManifest
) -> str:
    """The ``polygraphy run`` command that replays a saved comparison: the static-registration plugin library beside
    the engine's dynamic one, else the one the lookup finds (build-libs installs both), else its file name."""
    from trt_engine.plugins import static_plugin_for

    static_lib = static_plugin_for(manifest) or "libwtconv_trt_plugin.so"
    parts = [f"polygraphy run {engine} --model-type engine --trt"]
    if manifest.plugin:
        parts.append(f"--plugins {static_lib}")
    if save_inputs:
        parts.append(f"--load-inputs {save_inputs}")
    if save_outputs:
        parts.append(f"--load-outputs {save_outputs}")
    parts.append(f"--atol {atol:g} --rtol {rtol:g}")
    return "replay with Polygraphy's command line (static-registration plugin library):\n  " + " ".join(parts)
