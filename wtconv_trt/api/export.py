"""``export_onnx``: a model with WTConv2d layers to ONNX (``wtconv-trt export``; docs/onnx_export.md)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from wtconv_core.inputs import check_choice, check_int, shape_of

__all__ = [
    "DEFAULT_INPUT_SHAPE",
    "LAYOUTS",
    "MIN_OPSET",
    "OPS",
    "PRECISIONS",
    "RUNTIMES",
    "export_onnx",
    "newest_opset",
]

OPS = ("plugin", "standard")
PRECISIONS = ("fp32", "fp16")
RUNTIMES = ("onnxruntime", "tensorrt")  # wtconv_export.onnx_render.RUNTIMES (that module imports torch)
LAYOUTS = ("nchw", "channels_last")  # wtconv_export.onnx_render.LAYOUTS
MIN_OPSET = 18  # the oldest the standard-op WTConv2d formulation uses (opset-18 Pad/Slice forms)
DEFAULT_INPUT_SHAPE = "1,3,224,224"  # when the model's description gives none


def __getattr__(name: str):
    # NoWTConvWarning (the model has no WTConv2d layer) lives with the exporter, which imports torch: loaded on use.
    if name == "NoWTConvWarning":
        from wtconv_export.onnx_export import NoWTConvWarning

        return NoWTConvWarning
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def newest_opset() -> int:
    """The newest default-domain opset the installed onnx package knows."""
    import onnx

    return onnx.defs.onnx_opset_version()


def export_onnx(
    output: str | os.PathLike,
    model: Any = None,
    *,
    ops: str = "plugin",
    precision: str = "fp32",
    input_shape: str | Sequence[int] | None = None,
    static: bool = False,
    opset: int | None = None,
    runtime: str | None = None,
    layout: str | None = None,
    force: bool = False,
):
    """Export a model to the ONNX file ``output``; returns wtconv_export.onnx_export.ExportResult (``.summary()``
    is the line ``wtconv-trt export`` prints, ``.layers`` the WTConv2d layers found).

    The model: ``model``, any torch.nn.Module holding WTConv2d layers, or a ModelSource naming one of ours
    (wtconv_core.options; load_model), default the shipped default model. ops: "plugin"
    (one wtconv::WTConv2d node per layer) or "standard" (standard ONNX operators only). precision: "fp32" or "fp16".
    input_shape: the example input (B, C, H, W) or its text '1,3,224,224'; default the model's native size, batch 1.
    static: fix that shape in the graph (default: batch, height and width are dynamic). opset: 18 to newest_opset()
    (default 20, the first with ONNX Gelu). runtime: the runtime the graph is rendered for, "onnxruntime" (default)
    or "tensorrt" (fp16 LayerNorms in fp32 between Casts; docs/onnx_export.md, "Rendering for the runtime").
    layout: "nchw" or "channels_last" (a WTConvNeXt's blocks kept channels-last around channels_last WTConv2d
    nodes; ops="plugin"); default wtconv_export.onnx_render.DEFAULT_LAYOUT. force: replace an existing ``output``.

    Checked before the model is loaded or traced: the option values, where the file goes (an existing file is
    replaced only with ``force``), then the shape against the model (channels, smallest size, memory). Warns
    (wtconv_export.onnx_export.NoWTConvWarning) when the model has no WTConv2d layer."""
    import logging

    import onnx

    from wtconv_core.errors import ExportError
    from wtconv_core.inputs import parse_shape
    from wtconv_core.paths import check_not_an_input, check_output_file
    from wtconv_export.model_checks import check_input_shape
    from wtconv_export.onnx_export import DEFAULT_OPSET
    from wtconv_export.onnx_export import export_onnx as export_model
    from wtconv_export.onnx_render import DEFAULT_LAYOUT, DEFAULT_RUNTIME, check_layout
    from wtconv_trt.api.models import checkpoint_of, resolve_model

    check_choice(ops, "ops", OPS)
    check_choice(precision, "precision", PRECISIONS)
    if runtime is not None:
        check_choice(runtime, "runtime", RUNTIMES)
    if layout is not None:
        check_choice(layout, "layout", LAYOUTS)
    if opset is not None:
        opset = check_int(opset, "opset", MIN_OPSET, newest_opset(), " (ONNX opsets the installed onnx package knows)")
    shape = None if input_shape is None else shape_of(input_shape, "input_shape", rank=4)
    check_not_an_input([("checkpoint", checkpoint_of(model))], files=[("output", output)])
    path = check_output_file(output, option="output", force=force)
    model, description = resolve_model(model, default=True)
    description = description or {}  # a module given: the exporter records its class
    shape = shape or parse_shape(description.get("input_shape", DEFAULT_INPUT_SHAPE))
    check_input_shape(model, shape, "input_shape", dynamic=not static)
    layout = layout or DEFAULT_LAYOUT
    check_layout(layout, ops, model)
    if description:
        description["input_shape"] = ",".join(map(str, shape))
    opset = opset or DEFAULT_OPSET
    # onnxscript's version converter logs its failures with a traceback (lastResort handler); the failure is
    # reported in one line below instead.
    logging.getLogger("onnxscript").setLevel(logging.ERROR)
    try:
        return export_model(
            model,
            path,
            ops=ops,
            precision=precision,
            input_shape=shape,
            dynamic=not static,
            opset=opset,
            runtime=runtime or DEFAULT_RUNTIME,
            layout=layout,
            metadata=description,
        )
    except (RuntimeError, onnx.checker.ValidationError) as error:
        if opset == DEFAULT_OPSET:
            raise  # the default opset always converts: anything else is a bug, keep its traceback
        first = str(error).strip().splitlines()[-1][:200] if str(error).strip() else type(error).__name__
        raise ExportError(
            f"opset {opset}: PyTorch's exporter could not write the model in this opset "
            f"({first}); use the default ({DEFAULT_OPSET}) or an opset it supports",
            parameter="opset",
        ) from error
