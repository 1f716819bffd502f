"""Output type and shape inference of the wtconv::WTConv2d op (plugin/onnxruntime/wtconvOrtShape.cpp) in a real ONNX
Runtime session on the CPU execution provider.

Oracle: the contract (docs/design.md §4) — y is (B, C, ceil(H/s), ceil(W/s)), or (B, ceil(H/s), ceil(W/s), C) for
channels_last = 1, in x's type — and what ONNX Runtime does with a shape it knows: its bias + GELU fusion
(com.microsoft BiasGelu) needs the shapes of the MatMul and bias before it, so it happens after our node only when
ONNX Runtime knows our output's shape. The same graph with an input of no declared shape, where there is nothing to
infer, keeps Add and Gelu apart; that is checked too, so the fusion test can fail.
"""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from wtconv_libs import contract  # noqa: E402
from wtconv_torch.folding import fold_wtconv  # noqa: E402
from wtconv_torch.wtconv2d import random_wtconv2d  # noqa: E402

ORT_IR_VERSION = 9  # read by every ONNX Runtime the library supports (tests/test_ort_cpu.py)
C, D = 8, 16


def wtconv_node(folded, inputs, outputs, channels_last=0, name="wtconv"):
    attributes = dict(folded.attributes())
    attributes[contract.FIELD_CHANNELS_LAST] = channels_last
    return helper.make_node(contract.OP_TYPE, inputs, outputs, domain=contract.ONNX_DOMAIN, name=name, **attributes)


def block(x_shape, stride=1, elem=TensorProto.FLOAT):
    """x (B, H, W, C) -> WTConv2d (channels_last = 1) -> MatMul (C x D) -> Add bias (D) -> Gelu -> y; every
    tensor after x without a declared shape."""
    folded = fold_wtconv(random_wtconv2d(C, 3, 2, stride, 0))
    dtype = np.float16 if elem == TensorProto.FLOAT16 else np.float32
    gen = np.random.default_rng(0)
    initializers = [
        numpy_helper.from_array(gen.standard_normal((C, D)).astype(dtype), "W"),
        numpy_helper.from_array(gen.standard_normal(D).astype(dtype), "bias"),
    ]
    nodes = [
        wtconv_node(folded, ["x"], ["t"], channels_last=1),
        helper.make_node("MatMul", ["t", "W"], ["m"]),
        helper.make_node("Add", ["m", "bias"], ["a"]),
        helper.make_node("Gelu", ["a"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "block",
        [helper.make_tensor_value_info("x", elem, x_shape)],
        [helper.make_tensor_value_info("y", elem, None)],
        initializers,
    )
    opsets = [helper.make_opsetid("", 20), helper.make_opsetid(contract.ONNX_DOMAIN, 1)]
    return helper.make_model(graph, opset_imports=opsets, ir_version=ORT_IR_VERSION)


def single_node(x_shape, stride=1, channels_last=0, elem=TensorProto.FLOAT):
    folded = fold_wtconv(random_wtconv2d(C, 3, 2, stride, 0))
    graph = helper.make_graph(
        [wtconv_node(folded, ["x"], ["y"], channels_last=channels_last)],
        "one",
        [helper.make_tensor_value_info("x", elem, x_shape)],
        [helper.make_tensor_value_info("y", elem, None)],
    )
    opsets = [helper.make_opsetid("", 18), helper.make_opsetid(contract.ONNX_DOMAIN, 1)]
    return helper.make_model(graph, opset_imports=opsets, ir_version=ORT_IR_VERSION)


def optimized(library, model, tmp_path):
    """The session and the graph ONNX Runtime's optimizer leaves (saved with optimized_model_filepath)."""
    options = ort.SessionOptions()
    options.register_custom_ops_library(str(library))
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.optimized_model_filepath = str(tmp_path / "optimized.onnx")
    options.log_severity_level = 3  # the warning that an ORT_ENABLE_ALL model is machine-specific
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return session, onnx.load(str(tmp_path / "optimized.onnx"))


def op_types(graph_model) -> list[str]:
    return [n.op_type for n in graph_model.graph.node]


def test_bias_gelu_fuses_after_our_node(ort_library, tmp_path):
    """ONNX Runtime knows the shapes after our node: it fuses the bias Add and the Gelu that follow it into
    BiasGelu, and reports the block's output as (B, H, W, D) with the input's names."""
    session, graph = optimized(ort_library, block(["B", "H", "W", C]), tmp_path)
    assert "BiasGelu" in op_types(graph) and "Gelu" not in op_types(graph), op_types(graph)
    assert session.get_outputs()[0].shape == ["B", "H", "W", D]
    x = np.random.default_rng(1).standard_normal((2, 9, 7, C)).astype(np.float32)
    assert session.run(None, {"x": x})[0].shape == (2, 9, 7, D)


def test_without_a_known_shape_the_fusion_does_not_happen(ort_library, tmp_path):
    """The control: the same block with an input of no declared shape keeps Add and Gelu apart."""
    _, graph = optimized(ort_library, block(None), tmp_path)
    assert "BiasGelu" not in op_types(graph) and "Gelu" in op_types(graph), op_types(graph)


@pytest.mark.parametrize(
    "x_shape, stride, channels_last, expected",
    [
        ([2, C, 9, 11], 1, 0, [2, C, 9, 11]),
        ([2, C, 9, 11], 2, 0, [2, C, 5, 6]),
        ([2, C, 9, 11], 3, 0, [2, C, 3, 4]),
        ([1, 9, 11, C], 2, 1, [1, 5, 6, C]),
        (["B", C, "H", "W"], 1, 0, ["B", C, "H", "W"]),
        (["B", C, "H", "W"], 2, 0, ["B", C, "ceil(H/2)", "ceil(W/2)"]),
        (["B", "H", "W", C], 2, 1, ["B", "ceil(H/2)", "ceil(W/2)", C]),
        (["B", "C", "H", "W"], 1, 0, ["B", C, "H", "W"]),  # C is the node's: the length of base_bias
    ],
)
def test_output_shape_follows_the_contract(ort_library, tmp_path, x_shape, stride, channels_last, expected):
    """Known sizes give (ceil) numbers, named sizes stay names (a strided one is named after its expression), and
    the output's type is the input's."""
    for elem in (TensorProto.FLOAT, TensorProto.FLOAT16):
        session, _ = optimized(ort_library, single_node(x_shape, stride, channels_last, elem), tmp_path)
        output = session.get_outputs()[0]
        assert output.shape == expected, (x_shape, stride, channels_last)
        assert output.type == ("tensor(float16)" if elem == TensorProto.FLOAT16 else "tensor(float)")


def test_unnamed_unknown_sizes_stay_unknown(ort_library, tmp_path):
    """Sizes ONNX Runtime does not know and has no name for (after a strided Conv on named sizes) come out as
    names of their own, never as a number: y's shape never claims a size the run does not have."""
    gen = np.random.default_rng(0)
    folded = fold_wtconv(random_wtconv2d(C, 3, 2, 1, 0))
    graph = helper.make_graph(
        [
            helper.make_node("Conv", ["x", "Wc"], ["c"], strides=[2, 2]),
            wtconv_node(folded, ["c"], ["t"]),
            helper.make_node("Relu", ["t"], ["y"]),
        ],
        "conv",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["B", 3, "H", "W"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(gen.standard_normal((C, 3, 2, 2)).astype(np.float32), "Wc")],
    )
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", 18), helper.make_opsetid(contract.ONNX_DOMAIN, 1)],
        ir_version=ORT_IR_VERSION,
    )
    session, _ = optimized(ort_library, model, tmp_path)
    shape = session.get_outputs()[0].shape
    assert shape[0] == "B" and shape[1] == C, shape
    assert all(isinstance(d, str) and d not in ("B", "H", "W") for d in shape[2:]), shape
    assert shape[2] != shape[3], shape  # two unknown sizes: no equality claimed between them
    y = session.run(None, {"x": gen.standard_normal((2, 3, 17, 20)).astype(np.float32)})[0]
    assert y.shape == (2, C, 8, 10)


def test_no_input_shape_leaves_the_output_unknown(ort_library, tmp_path):
    """An input with no shape at all: nothing to infer, and the node still runs."""
    session, _ = optimized(ort_library, single_node(None), tmp_path)
    assert session.get_outputs()[0].shape in ([], None)
    x = np.zeros((1, C, 5, 6), np.float32)
    assert session.run(None, {"x": x})[0].shape == (1, C, 5, 6)
