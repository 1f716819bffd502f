"""A channels-last WTConv2d node (channels_last = 1: x is (B, H, W, C), y is (B, ceil(H/s), ceil(W/s), C), both
dense; docs/design.md §4) on the CPU op of libwtconv_ort.so, in a real ONNX Runtime session.

Oracle: the executable spec in float64 on the float64-folded weights (tests/test_ort_cpu.py's check_against_spec),
evaluated on the NCHW input; the node is given that input transposed to channels-last and its output is transposed
back before the comparison. Sizes are odd and non-square, below 2^L, with stride 2 and 3 and batches > 1.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from test_ort_cpu import check_against_spec, node_model, session  # noqa: E402

from wtconv_libs import contract  # noqa: E402
from wtconv_torch.folding import fold_wtconv  # noqa: E402
from wtconv_torch.wtconv2d import random_wtconv2d  # noqa: E402


def channels_last(model):
    """The one-node model of test_ort_cpu.node_model as a channels_last = 1 node with input (B, H, W, C)."""
    model = onnx.ModelProto.FromString(model.SerializeToString())
    (node,) = model.graph.node
    node.attribute.append(onnx.helper.make_attribute(contract.FIELD_CHANNELS_LAST, 1))
    dims = model.graph.input[0].type.tensor_type.shape.dim
    b, c, h, w = (onnx.TensorShapeProto.Dimension.FromString(d.SerializeToString()) for d in dims)
    del dims[:]
    dims.extend([b, h, w, c])
    return model


def transposed_run(make_session, check_session=None):
    """run(model, x) for check_against_spec, where x and y are NCHW: the session, made by make_session from the
    model as a channels_last node, sees them channels-last; check_session(session) runs after the run."""

    def run(model, x):
        session = make_session(channels_last(model))
        y = session.run(None, {"x": np.ascontiguousarray(x.transpose(0, 2, 3, 1))})[0]
        if check_session is not None:
            check_session(session)
        return np.ascontiguousarray(y.transpose(0, 3, 1, 2))

    return run


CASES = [
    pytest.param(*case, id="{}x{}x{}x{}-k{}-L{}-s{}".format(*case))
    for case in itertools.chain(
        ((2, 3, 37, 30, k, 2, 1) for k in (1, 3, 5, 7, 15)),
        ((3, 5, 33, 19, k, lv, s) for k in (3, 5) for lv in (1, 4) for s in (2, 3)),
        ((2, 3, 1, 1, 5, 3, 1), (2, 2, 1, 9, 3, 5, 2), (1, 4, 7, 1, 7, 8, 1), (4, 2, 5, 3, 5, 8, 2)),
        ((2, 96, 28, 28, 5, 4, 1),),
    )
]


@pytest.mark.parametrize("dtype", [np.float32, np.float16], ids=["fp32", "fp16"])
@pytest.mark.parametrize("b,c,h,w,k,levels,stride", CASES)
def test_channels_last_node_matches_spec(ort_library, error_report, dtype, b, c, h, w, k, levels, stride):
    check_against_spec(
        transposed_run(lambda model: session(ort_library, model)),
        b,
        c,
        h,
        w,
        k,
        levels,
        stride,
        dtype,
        seed=k * 100 + levels * 10 + stride,
        report=error_report,
        label="CPU channels-last",
    )


def test_channels_last_output_shape_and_threads(ort_library):
    """The output is (B, ceil(H/s), ceil(W/s), C), and the same bits for one and for two intra-op threads."""
    folded = fold_wtconv(random_wtconv2d(6, 5, 3, 2, 4))
    model = channels_last(node_model(folded))
    x = np.random.default_rng(2).standard_normal((3, 23, 18, 6)).astype(np.float32)
    one = session(ort_library, model, threads=1).run(None, {"x": x})[0]
    two = session(ort_library, model, threads=2).run(None, {"x": x})[0]
    assert one.shape == (3, 12, 9, 6)
    assert np.array_equal(one, two)


def test_nchw_input_to_a_channels_last_node_is_refused(ort_library):
    """A channels_last = 1 node given an NCHW tensor (C in dim 1) is refused at run time, naming dim 3."""
    folded = fold_wtconv(random_wtconv2d(4, 3, 2, 1, 0))
    model = channels_last(node_model(folded))
    model.graph.input[0].type.tensor_type.ClearField("shape")  # nothing declared: the check happens at run time
    sess = session(ort_library, model)
    with pytest.raises(Exception, match=r"expected C = 4 channels .* in dim 3 of \(B, H, W, C\)"):
        sess.run(None, {"x": np.zeros((1, 4, 9, 9), np.float32)})
