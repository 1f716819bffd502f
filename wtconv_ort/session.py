"""ONNX Runtime sessions for our exports: WTConv2d nodes on the native op library libwtconv_ort.so, or, without it,
on the onnxruntime-extensions Python op in a model rewritten in memory (docs/onnx_runtime.md, "From wtconv-trt")."""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from wtconv_core.errors import ConfigurationError, ModelError
from wtconv_libs import contract, lookup
from wtconv_libs.build import build_libs_command

log = logging.getLogger(__name__)

ORT_DOMAIN = "ai.onnx.contrib"  # the domain onnxruntime-extensions' Python ops live in
ORT_OP_TYPE = "WTConv2dSpec"
OPS = ("auto", "native", "python")  # how make_ort_session runs WTConv2d nodes

_registered = False
_fallback_said = False  # the fallback to the Python op is said once per process, not once per session


def python_op_output(x: np.ndarray, base_weight, base_bias, wavelet_weight, attrs: dict) -> np.ndarray:
    """What the Python op computes: the spec (fp32) on ``x`` in either layout the node may declare, (N, C, H, W) or,
    with ``channels_last`` 1, (N, H, W, C) (docs/design.md §4). An empty input gives the empty output of its shape
    (PyTorch's convolution refuses a plane of height or width 0)."""
    import torch

    from wtconv_torch.fused_spec import fused_wtconv2d_spec

    k, levels, stride = (int(attrs[f]) for f in contract.INT_FIELDS)
    channels_last = bool(int(attrs.get(contract.FIELD_CHANNELS_LAST, 0)))
    planes = torch.from_numpy(np.ascontiguousarray(x))
    if channels_last:
        planes = planes.permute(0, 3, 1, 2)
    n, c, h, w = planes.shape
    if planes.numel() == 0:
        y = torch.zeros((n, c, -(-h // stride), -(-w // stride)), dtype=planes.dtype)
    else:
        with torch.no_grad():
            y = fused_wtconv2d_spec(
                planes,
                torch.from_numpy(base_weight),
                torch.from_numpy(base_bias),
                torch.from_numpy(wavelet_weight),
                k,
                levels,
                stride,
            )
    if channels_last:
        y = y.permute(0, 2, 3, 1)
    return np.ascontiguousarray(y.numpy())


def _register_python_op() -> None:
    """Register the spec as an onnxruntime-extensions Python op (once per process).

    onnxruntime-extensions lets no exception out of a Python op: one that escapes aborts the process ("terminate
    called ..."). So the op raises nothing. The inputs it can be given are fixed before it runs: the rewrite checks
    every attribute and puts a Reshape before the op that refuses any input but (N, C, H, W) (or (N, H, W, C)) with
    the node's C, and one after it. Should the op fail all the same (a bug), it logs the traceback and returns an
    empty array, which the Reshape after it refuses: ONNX Runtime raises its error and the process lives."""
    global _registered
    if _registered:
        return
    from onnxruntime_extensions import PyCustomOpDef, onnx_op

    @onnx_op(
        op_type=ORT_OP_TYPE,
        inputs=[PyCustomOpDef.dt_float] * 4,
        outputs=[PyCustomOpDef.dt_float],
        attrs={field: PyCustomOpDef.dt_int64 for field in (*contract.INT_FIELDS, contract.FIELD_CHANNELS_LAST)},
    )
    def wtconv2d_spec(x, base_weight, base_bias, wavelet_weight, **attrs):
        try:
            return python_op_output(x, base_weight, base_bias, wavelet_weight, attrs)
        except Exception:  # noqa: BLE001 - see the docstring: raising here would abort the process
            log.exception("the %s Python op failed on an input of shape %s", contract.OP_TYPE, np.shape(x))
            return np.zeros((0,), np.float32)

    _registered = True


def _load(model):
    import onnx

    if isinstance(model, (str, os.PathLike)):
        return onnx.load(os.fspath(model))
    if isinstance(model, bytes):
        return onnx.load_from_string(model)
    return model


def _elem_types(graph) -> dict:
    types = {}
    for value in list(graph.input) + list(graph.output) + list(graph.value_info):
        if value.type.HasField("tensor_type"):
            types[value.name] = value.type.tensor_type.elem_type
    for init in graph.initializer:
        types[init.name] = init.data_type
    return types


def node_attributes(node: Any) -> dict[str, Any]:
    """The attributes of one WTConv2d node as plain Python values."""
    import onnx

    return {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}


def _check_int_fields(node: Any, attrs: dict) -> None:
    """ModelError naming the node for an integer attribute out of the range the native op accepts
    (plugin/common/wtconvLayerFields.cpp), in its words."""
    k, levels, stride = (attrs[f] for f in contract.INT_FIELDS)
    layout = attrs.get(contract.FIELD_CHANNELS_LAST, 0)
    problems = (
        (
            not isinstance(k, int) or k < 1 or k > contract.MAX_KERNEL_SIZE or k % 2 == 0,
            f"field '{contract.FIELD_KERNEL_SIZE}': expected an odd integer in 1..{contract.MAX_KERNEL_SIZE}, "
            f"given {k}",
        ),
        (
            not isinstance(levels, int) or levels < 1 or levels > contract.MAX_WT_LEVELS,
            f"field '{contract.FIELD_WT_LEVELS}': expected an integer in 1..{contract.MAX_WT_LEVELS}, given {levels}",
        ),
        (
            not isinstance(stride, int) or stride < 1,
            f"field '{contract.FIELD_STRIDE}': expected an integer >= 1, given {stride}",
        ),
        (
            layout not in (0, 1),
            f"field '{contract.FIELD_CHANNELS_LAST}': expected 0 (x and y are (N, C, H, W)) or 1 (channels-last: "
            f"(N, H, W, C)), given {layout}",
        ),
    )
    for wrong, message in problems:
        if wrong:
            raise ModelError(f"{contract.OP_TYPE} node '{node.name}': {message}")


def folded_weights_of(node: Any) -> tuple:
    """(kernel_size, wt_levels, stride, base_weight (C,k,k), base_bias (C,), wavelet_weight (L,4C,k,k)) of a
    WTConv2d node, as fp32 numpy arrays; ModelError naming the node if an attribute is missing, out of range or the
    sizes do not agree."""
    attrs = node_attributes(node)
    missing = [f for f in contract.INT_FIELDS + contract.FLOAT_FIELDS if f not in attrs]
    if missing:
        raise ModelError(f"{contract.OP_TYPE} node '{node.name}' lacks attribute(s) {', '.join(missing)}")
    _check_int_fields(node, attrs)
    k, levels, stride = (int(attrs[f]) for f in contract.INT_FIELDS)
    bias = np.asarray(attrs[contract.FIELD_BASE_BIAS], dtype=np.float32)
    c = bias.size
    if c < 1:
        raise ModelError(
            f"{contract.OP_TYPE} node '{node.name}': field '{contract.FIELD_BASE_BIAS}': expected length C >= 1 (one "
            "value per channel), given 0"
        )
    expected = {contract.FIELD_BASE_WEIGHT: (c, k, k), contract.FIELD_WAVELET_WEIGHT: (levels, 4 * c, k, k)}
    arrays = {}
    for field, shape in expected.items():
        values = np.asarray(attrs[field], dtype=np.float32)
        if values.size != int(np.prod(shape)):
            raise ModelError(
                f"{contract.OP_TYPE} node '{node.name}': attribute {field} has {values.size} values, "
                f"expected {int(np.prod(shape))} = {' x '.join(map(str, shape))} for C={c} "
                f"(from base_bias), kernel_size={k}, wt_levels={levels}"
            )
        arrays[field] = values.reshape(shape)
    return k, levels, stride, arrays[contract.FIELD_BASE_WEIGHT], bias, arrays[contract.FIELD_WAVELET_WEIGHT]


def _shape_guard(graph: Any, name: str, source: str, target: str, channels: int, channels_last: bool) -> Any:
    """A Reshape from ``source`` to ``target`` that keeps a 4-D tensor of ``channels`` channels as it is (0 copies a
    dimension) and makes ONNX Runtime refuse anything else with its own error."""
    from onnx import helper, numpy_helper

    dims = [0, 0, 0, channels] if channels_last else [0, channels, 0, 0]
    graph.initializer.append(numpy_helper.from_array(np.array(dims, np.int64), f"{name}.dims"))
    return helper.make_node("Reshape", [source, f"{name}.dims"], [target], name=name)


def rewrite_for_ort(model: str | os.PathLike | bytes | Any) -> tuple[Any, int]:
    """A copy of ``model`` (path, bytes or ModelProto) with every WTConv2d node rewritten for
    onnxruntime-extensions, and the number of nodes rewritten. Each node becomes: a Cast to float for an fp16
    input, a Reshape that refuses any input but the node's (:func:`_shape_guard`), the Python op (which takes the
    node's layout attribute), a second Reshape, and a Cast back."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    model = _load(model)
    out = onnx.ModelProto()
    out.CopyFrom(model)
    graph = out.graph
    types = _elem_types(graph)
    new_nodes, count = [], 0
    for index, node in enumerate(graph.node):
        if not (node.op_type == contract.OP_TYPE and node.domain == contract.ONNX_DOMAIN):
            new_nodes.append(node)
            continue
        count += 1
        k, levels, stride, bw, bb, ww = folded_weights_of(node)
        channels_last = int(node_attributes(node).get(contract.FIELD_CHANNELS_LAST, 0))
        prefix = f"wtconv_ort_{index}_{node.name or 'node'}"
        for name, array in (
            (f"{prefix}.base_weight", bw),
            (f"{prefix}.base_bias", bb),
            (f"{prefix}.wavelet_weight", ww),
        ):
            graph.initializer.append(numpy_helper.from_array(array, name))
        x, y = node.input[0], node.output[0]
        # An undeclared type is taken as float: ONNX Runtime refuses the session if it is not.
        x_type = types.get(x, TensorProto.FLOAT)
        if x_type not in (TensorProto.FLOAT, TensorProto.FLOAT16):
            raise ModelError(
                f"{contract.OP_TYPE} node '{node.name}': input type "
                f"{TensorProto.DataType.Name(x_type)} is not float or float16"
            )
        x32, y32 = (f"{prefix}.x32", f"{prefix}.y32") if x_type != TensorProto.FLOAT else (x, y)
        if x_type != TensorProto.FLOAT:
            new_nodes.append(helper.make_node("Cast", [x], [x32], name=f"{prefix}.cast_in", to=TensorProto.FLOAT))
        c = bb.size
        new_nodes.append(_shape_guard(graph, f"{prefix}.check_in", x32, f"{prefix}.x_checked", c, channels_last))
        new_nodes.append(
            helper.make_node(
                ORT_OP_TYPE,
                [f"{prefix}.x_checked", f"{prefix}.base_weight", f"{prefix}.base_bias", f"{prefix}.wavelet_weight"],
                [f"{prefix}.y_unchecked"],
                name=node.name or prefix,
                domain=ORT_DOMAIN,
                **{
                    contract.FIELD_KERNEL_SIZE: k,
                    contract.FIELD_WT_LEVELS: levels,
                    contract.FIELD_STRIDE: stride,
                    contract.FIELD_CHANNELS_LAST: channels_last,
                },
            )
        )
        new_nodes.append(_shape_guard(graph, f"{prefix}.check_out", f"{prefix}.y_unchecked", y32, c, channels_last))
        if x_type != TensorProto.FLOAT:
            new_nodes.append(helper.make_node("Cast", [y32], [y], name=f"{prefix}.cast_out", to=x_type))
    del graph.node[:]
    graph.node.extend(new_nodes)
    if count:
        kept = [o for o in out.opset_import if o.domain != contract.ONNX_DOMAIN]
        del out.opset_import[:]
        out.opset_import.extend(kept)
        if not any(o.domain == ORT_DOMAIN for o in kept):
            out.opset_import.append(helper.make_opsetid(ORT_DOMAIN, 1))
    return out, count


def resolve_wtconv_op(op: str = "auto", library: str | os.PathLike | None = None) -> tuple[str, Path | None]:
    """("native", library path) or ("python", None): how :func:`make_ort_session` will run WTConv2d nodes.

    ``op``: "auto" (the native library when found, else the Python op), "native" (the library or a
    ConfigurationError saying how to build it), "python" (always the Python op). ``library``: a path to use instead
    of the lookup."""
    if op not in OPS:
        raise ValueError(f"op {op!r}: expected one of {', '.join(OPS)}")
    if op == "python":
        return "python", None
    path = Path(library).expanduser() if library is not None else lookup.ort_library()
    if path is not None and path.is_file():
        return "native", path
    if op == "native" or library is not None:
        where = (
            f"{path} does not exist"
            if path is not None
            else "not found (wtconv-trt doctor shows where it is looked for)"
        )
        raise ConfigurationError(
            f"the ONNX Runtime op library libwtconv_ort.so: {where}; build it with '{build_libs_command()}' or set "
            f"{lookup.ENV_VARS['ort']} to its path"
        )
    return "python", None


def cuda_provider(device_id: int = 0, tf32: bool = False, **options: Any) -> tuple[str, dict]:
    """onnxruntime-gpu's CUDA execution provider with its options, TF32 off unless asked: the CUDA EP enables TF32
    by default in recent releases, which changes fp32 convolutions and matrix products far beyond fp32 rounding."""
    values = {"device_id": str(device_id), "use_tf32": "1" if tf32 else "0"}
    values.update({k: str(v) for k, v in options.items()})
    return "CUDAExecutionProvider", values


_OUR_MESSAGE = re.compile(rf"{contract.OP_TYPE} node[^\n]*")


def _session(model_bytes_or_path, options, providers):
    import onnxruntime as ort

    try:
        return ort.InferenceSession(model_bytes_or_path, sess_options=options, providers=list(providers))
    except Exception as error:  # onnxruntime's own exception types are not importable by a stable name
        match = _OUR_MESSAGE.search(str(error))
        if match is None:
            raise
        raise ModelError(match.group(0).strip()) from error


def warn_python_op_fallback(count: int) -> None:
    """Log that ``count`` WTConv2d nodes run on the onnxruntime-extensions Python op because libwtconv_ort.so was not
    found: once per process, not once per session."""
    global _fallback_said
    if _fallback_said:
        return
    _fallback_said = True
    log.warning(
        "libwtconv_ort.so not found: the %d %s nodes run through the onnxruntime-extensions Python op (CPU only, "
        "several times slower); build the native op with '%s'",
        count,
        contract.OP_TYPE,
        build_libs_command(),
    )


def make_ort_session(
    model: str | os.PathLike | bytes | Any,
    providers: Sequence[Any] = ("CPUExecutionProvider",),
    session_options: Any = None,
    *,
    op: str = "auto",
    library: str | os.PathLike | None = None,
) -> Any:
    """An onnxruntime.InferenceSession for an exported model (path, bytes or ModelProto), with or without WTConv2d
    nodes. ``op`` / ``library``: how WTConv2d nodes run (:func:`resolve_wtconv_op`); with the native library the
    model is used as it is, with the Python op it is rewritten in memory (CPU only). ``providers``: names or
    (name, options) pairs, e.g. ``[cuda_provider(), "CPUExecutionProvider"]``. A node the library refuses raises
    ModelError with its one-line message."""
    import onnxruntime as ort

    how, path = resolve_wtconv_op(op, library)
    options = session_options or ort.SessionOptions()
    if how == "native":
        try:
            options.register_custom_ops_library(str(path))
        except Exception as error:  # onnxruntime raises its own Fail type
            raise ConfigurationError(
                f"ONNX Runtime could not load {path}: {str(error).strip()}; rebuild it with '{build_libs_command()}'"
            ) from error
        log.info("WTConv2d nodes run on the native ONNX Runtime op %s", path)
        wants_cuda = any((p[0] if isinstance(p, tuple) else p) == "CUDAExecutionProvider" for p in providers)
        if wants_cuda and lookup.ort_library_info(path).get("cuda") != "yes":
            log.warning(
                "%s was built without its CUDA op (no nvcc where it was built): ONNX Runtime runs the %s nodes on "
                "the CPU, copying their tensors to and from the GPU; rebuild it with the CUDA toolkit present",
                path,
                contract.OP_TYPE,
            )
        if isinstance(model, (str, os.PathLike)):
            return _session(os.fspath(model), options, providers)
        return _session(model if isinstance(model, bytes) else model.SerializeToString(), options, providers)

    rewritten, count = rewrite_for_ort(model)
    if count:
        try:
            from onnxruntime_extensions import get_library_path
        except ImportError as error:
            raise ConfigurationError(
                f"the model has {count} {contract.OP_TYPE} nodes; running them in ONNX Runtime needs libwtconv_ort.so "
                f"({build_libs_command()}) or onnxruntime-extensions (pip install onnxruntime-extensions)"
            ) from error
        if op == "auto":
            warn_python_op_fallback(count)
        _register_python_op()
        options.register_custom_ops_library(get_library_path())
    return _session(rewritten.SerializeToString(), options, providers)
