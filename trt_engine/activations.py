"""Every tensor of an ONNX model at given input shapes, to check a build's profiles against the limits before
TensorRT is asked (docs/engines.md, "2. Build"): an input within TensorRT's 2^31 - 1 elements per tensor can still
make a layer's output exceed it (the default model's MLP holds 16x its input).

The shapes come from ONNX shape inference over the model's graph without its weights: large float initializers
become typed inputs, small and integer ones (shape operands) stay, and each WTConv2d node stands in as the standard
operator of the same output shape, a 1x1 AveragePool of its stride (docs/design.md §2.1: the output is subsampled
[::s, ::s]). Tensors whose shape inference cannot tell are not counted.
"""

from __future__ import annotations

import ast
import logging
import math
from dataclasses import dataclass
from typing import Any

from wtconv_core.errors import InputError
from wtconv_libs import contract

log = logging.getLogger(__name__)

__all__ = ["MAX_TENSOR_ELEMENTS", "Activation", "Skeleton", "activations", "check_activations", "weightless_model"]

MAX_TENSOR_ELEMENTS = 2**31 - 1  # TensorRT's limit per tensor
KEPT_INITIALIZER_ELEMENTS = 4096  # initializers kept with their data (shape operands, small constants)


@dataclass(frozen=True)
class Activation:
    """One tensor at the given input shapes: its name, the layer (module path) and operator that produce it."""

    tensor: str
    layer: str
    op_type: str
    dims: tuple

    @property
    def elements(self) -> int:
        return math.prod(self.dims)


@dataclass
class Skeleton:
    """The model without its weights (weightless_model) and, per WTConv2d node, its layer and input tensor."""

    model: Any
    wtconv_inputs: list  # (layer, input tensor name)


def weightless_model(proto) -> Skeleton:
    """The model's graph as ONNX shape inference needs it, without the weights (see the module docstring)."""
    from onnx import TensorProto, helper

    graph = proto.graph
    kept, typed = [], []
    for initializer in graph.initializer:
        small = math.prod(initializer.dims) <= KEPT_INITIALIZER_ELEMENTS
        if small or initializer.data_type in (TensorProto.INT64, TensorProto.INT32):
            kept.append(initializer)
        else:
            typed.append(helper.make_tensor_value_info(initializer.name, initializer.data_type, list(initializer.dims)))
    nodes, wtconv_inputs = [], []
    for node in graph.node:
        if node.op_type == contract.OP_TYPE and node.domain == contract.ONNX_DOMAIN:
            wtconv_inputs.append((_layer_of(node), node.input[0]))
            stride = next((a.i for a in node.attribute if a.name == "stride"), 1)
            stand_in = helper.make_node(
                "AveragePool", list(node.input), list(node.output), name=node.name, kernel_shape=[1, 1]
            )
            stand_in.attribute.append(helper.make_attribute("strides", [stride, stride]))
            stand_in.metadata_props.extend(node.metadata_props)
            nodes.append(stand_in)
        else:
            nodes.append(node)
    inputs = [value for value in graph.input if value.name not in {i.name for i in graph.initializer}]
    skeleton = helper.make_graph(nodes, graph.name or "model", inputs + typed, list(graph.output), initializer=kept)
    opsets = [o for o in proto.opset_import if o.domain != contract.ONNX_DOMAIN]
    model = helper.make_model(skeleton, opset_imports=opsets)
    model.ir_version = proto.ir_version
    return Skeleton(model, wtconv_inputs)


def _layer_of(node) -> str:
    """The module path the exporter recorded for a node (its name scopes), else the node's name."""
    for prop in node.metadata_props:
        if prop.key == "pkg.torch.onnx.name_scopes":
            try:
                scopes = ast.literal_eval(prop.value)
            except (ValueError, SyntaxError):
                break
            if isinstance(scopes, list) and len(scopes) >= 2 and scopes[-2]:
                return str(scopes[-2])
    return node.name or node.op_type


def activations(skeleton, input_shapes: dict) -> list[Activation] | None:
    """Every tensor a node produces whose shape ONNX infers at ``input_shapes`` ({input name: dims}), in node order;
    None when shape inference fails on the model."""
    import onnx
    from onnx import helper, shape_inference

    model = onnx.ModelProto()
    model.CopyFrom(skeleton.model)
    for value in model.graph.input:
        if value.name in input_shapes:
            value.CopyFrom(
                helper.make_tensor_value_info(
                    value.name, value.type.tensor_type.elem_type, list(input_shapes[value.name])
                )
            )
    try:
        inferred = shape_inference.infer_shapes(model, strict_mode=False, data_prop=True)
    except Exception as error:  # onnx raises InferenceError and others on graphs it cannot follow
        log.info("ONNX shape inference failed (%s); only the inputs are checked against the limits", error)
        return None
    shapes = {}
    for value in list(inferred.graph.value_info) + list(inferred.graph.output):
        tensor = value.type.tensor_type
        dims = [d.dim_value if d.HasField("dim_value") else None for d in tensor.shape.dim]
        if tensor.HasField("shape") and None not in dims:
            shapes[value.name] = tuple(dims)
    found = []
    for node in model.graph.node:
        for name in node.output:
            if name in shapes:
                found.append(Activation(name, _layer_of(node), node.op_type, shapes[name]))
    return found


def check_activations(skeleton, profiles: list) -> None:
    """InputError (one line, parameter "shapes") when, at any profile's max shapes, a tensor of the model exceeds
    TensorRT's MAX_TENSOR_ELEMENTS, or a WTConv2d layer's input a dimension the kernels take
    (contract.MAX_DIM)."""
    for profile in profiles:
        maxima = {name: tuple(r.max) for name, r in profile.inputs.items()}
        found = activations(skeleton, maxima)
        if not found:
            continue
        shown = ", ".join(f"{name}:{'x'.join(map(str, dims))}" for name, dims in maxima.items())
        largest = max(found, key=lambda a: a.elements)
        if largest.elements > MAX_TENSOR_ELEMENTS:
            hint = "give a smaller max batch or size"
            batch = next(iter(maxima.values()))[0] if len(maxima) == 1 else 0
            if batch > 1 and largest.elements % batch == 0:
                fits = MAX_TENSOR_ELEMENTS // (largest.elements // batch)
                hint = f"give a max batch of at most {fits} at this size, or a smaller size"
            raise InputError(
                f"shapes: at the max shape {shown} the output of layer '{largest.layer}' ({largest.op_type}) "
                f"would be {'x'.join(map(str, largest.dims))} = {largest.elements} elements, more than TensorRT's "
                f"{MAX_TENSOR_ELEMENTS} per tensor; {hint}",
                parameter="shapes",
            )
        dims = {**maxima, **{a.tensor: a.dims for a in found}}
        for layer, tensor in skeleton.wtconv_inputs:
            if tensor in dims and max(dims[tensor]) > contract.MAX_DIM:
                raise InputError(
                    f"shapes: at the max shape {shown} the WTConv2d layer '{layer}' would take "
                    f"{'x'.join(map(str, dims[tensor]))}, and the WTConv2d kernels take dimensions up to "
                    f"{contract.MAX_DIM}; give a smaller max shape",
                    parameter="shapes",
                )
