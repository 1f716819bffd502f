"""The standard-op formulation (StandardWTConv2d: one pad to a multiple of 2^L, folded weights, exact 1/2 taps,
synthesis by linearity in ONNX) equals the fused spec in float64, and its ONNX form equals it in ONNX Runtime
at awkward sizes, including a static export."""

import numpy as np
import pytest
import torch

from wtconv_export.onnx_export import StandardWTConv2d, export_onnx
from wtconv_export.onnx_models import randomize_weights
from wtconv_torch.folding import fold_wtconv
from wtconv_torch.fused_spec import fused_wtconv2d_spec
from wtconv_torch.wtconv2d import WTConv2d

SIZES = [(2, 4, 1, 1), (1, 4, 7, 13), (2, 4, 33, 20), (1, 4, 3, 64)]


@pytest.mark.parametrize("levels", [1, 2, 3, 5])
@pytest.mark.parametrize("kernel_size, stride", [(1, 1), (3, 2), (5, 3)])
def test_standard_formulation_equals_spec_float64(levels, kernel_size, stride, error_report):
    layer = randomize_weights(WTConv2d(4, 4, kernel_size, stride=stride, wt_levels=levels), levels * 10 + kernel_size)
    folded = fold_wtconv(layer, torch.float64)
    standard = StandardWTConv2d(folded).double()
    generator = torch.Generator().manual_seed(levels)
    with torch.no_grad():
        for shape in SIZES:
            x = torch.randn(shape, dtype=torch.float64, generator=generator)
            ref = fused_wtconv2d_spec(x, *folded.tensors(), kernel_size, levels, stride)
            got = standard(x)
            assert got.shape == ref.shape
            error = ((got - ref).abs().max() / ref.abs().max()).item()
            error_report.add(
                "standard-op formulation vs fused spec, float64, relative",
                error,
                f"{shape} k={kernel_size} L={levels} s={stride}",
            )
            assert error <= 1e-13, (shape, error)


@pytest.mark.parametrize("dynamic", [True, False])
def test_standard_onnx_matches_at_awkward_sizes(dynamic, tmp_path):
    pytest.importorskip("onnxruntime")
    from wtconv_ort.session import make_ort_session

    layer = randomize_weights(WTConv2d(4, 4, 3, stride=2, wt_levels=3), 7).eval()
    model = torch.nn.Sequential(layer)
    path = tmp_path / "layer.onnx"
    example = (2, 4, 13, 7)
    export_onnx(model, path, ops="standard", input_shape=example, dynamic=dynamic)
    session = make_ort_session(path)
    shapes = [(1, 4, 1, 1), (3, 4, 13, 7), (1, 4, 9, 30)] if dynamic else [example]
    for shape in shapes:
        x = torch.randn(shape)
        with torch.no_grad():
            ref = model(x).numpy()
        y = session.run(None, {"input": x.numpy()})[0]
        assert y.shape == ref.shape, shape
        assert np.abs(y - ref).max() / np.abs(ref).max() <= 1e-5, shape


def test_already_fused_layers_export_as_plugin_nodes(tmp_path):
    """A model whose WTConv2d layers were replaced by FusedWTConv2d (fuse_wtconv_layers) exports the same node."""
    onnx = pytest.importorskip("onnx")
    from wtconv_libs import contract
    from wtconv_torch.fused_module import fuse_wtconv_layers

    layer = randomize_weights(WTConv2d(4, 4, 5, wt_levels=2), 3).eval()
    expected = fold_wtconv(layer).attributes()
    model = fuse_wtconv_layers(torch.nn.Sequential(layer))
    path = tmp_path / "fused.onnx"
    export_onnx(model, path, input_shape=(1, 4, 16, 16))
    (node,) = [n for n in onnx.load(str(path)).graph.node if n.op_type == contract.OP_TYPE]
    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
    for field in contract.FLOAT_FIELDS:
        np.testing.assert_array_equal(np.float32(attrs[field]), np.float32(expected[field]))
