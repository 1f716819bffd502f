"""ONNX export of WTConvNeXt-T: the plugin graph's nodes and attributes, the standard-op graph, and
both run in ONNX Runtime against PyTorch in fp32 and fp16.

The four exports (plugin / standard x fp32 / fp16) are made once per module with a 64x64 example and
dynamic batch, height and width (export time does not depend on the size); the comparisons run at batch 1
(64x64), batch 3 at 72x88, where stage 0 (18x22) takes odd sizes at levels 2..5, and batch 1 at the
published 224x224.
"""

import copy

import numpy as np
import pytest
import torch

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
pytest.importorskip("onnxruntime_extensions")

from wtconv_export.exported import metadata_of  # noqa: E402
from wtconv_export.onnx_export import export_onnx, find_wtconv_layers  # noqa: E402
from wtconv_export.onnx_models import build_model  # noqa: E402
from wtconv_libs import contract  # noqa: E402
from wtconv_ort.session import make_ort_session  # noqa: E402
from wtconv_torch.folding import fold_wtconv  # noqa: E402
from wtconv_trt.cli import main as cli_main  # noqa: E402

pytestmark = pytest.mark.slow  # exports WTConvNeXt-T in two forms and two precisions (about a minute)

EXPORT_SHAPE = (1, 3, 64, 64)
INPUT_SHAPES = [(1, 3, 64, 64), (3, 3, 72, 88), (1, 3, 224, 224)]
FP32_TOLERANCE = 1e-5  # max |ort - torch| / max |torch| (docs/onnx_export.md)
FP16_FACTOR = 2.0  # fp16: within 2x PyTorch-fp16's own error (docs/onnx_export.md, "fp16")


def rel_error(a, ref) -> float:
    a, ref = np.asarray(a, dtype=np.float64), np.asarray(ref, dtype=np.float64)
    return float(np.abs(a - ref).max() / np.abs(ref).max())


@pytest.fixture(scope="module")
def tiny():
    model, description = build_model("wtconvnext_tiny", random_weights=True, seed=0)
    return model, description


@pytest.fixture(scope="module")
def exports(tiny, tmp_path_factory):
    """{(ops, precision): path}. plugin/fp32 goes through the command line, the rest through export_onnx."""
    model, description = tiny
    out = tmp_path_factory.mktemp("onnx")
    paths = {}
    path = out / "tiny_plugin_fp32.onnx"
    assert (
        cli_main(
            [
                "export",
                "-o",
                str(path),
                "--arch",
                "wtconvnext_tiny",
                "--random-weights",
                "--seed",
                "0",
                "--input-shape",
                ",".join(map(str, EXPORT_SHAPE)),
            ]
        )
        == 0
    )
    paths[("plugin", "fp32")] = path
    for ops, precision in [("standard", "fp32"), ("plugin", "fp16"), ("standard", "fp16")]:
        path = out / f"tiny_{ops}_{precision}.onnx"
        export_onnx(model, path, ops=ops, precision=precision, input_shape=EXPORT_SHAPE, metadata=description)
        paths[(ops, precision)] = path
    return paths


@pytest.fixture(scope="module")
def references(tiny):
    """Per input shape: (input, float64 output, PyTorch fp32 output, PyTorch fp16 output)."""
    model, _ = tiny
    generator = torch.Generator().manual_seed(1)
    refs = []
    with torch.no_grad():
        m64 = copy.deepcopy(model).double()
        m16 = copy.deepcopy(model).half()
        for shape in INPUT_SHAPES:
            x = torch.randn(shape, generator=generator)
            x16 = x.half()  # every run sees the same fp16-representable input
            x = x16.float()
            refs.append((x, m64(x.double()).numpy(), model(x).numpy(), m16(x16).float().numpy()))
    return refs


def test_plugin_export_has_one_node_per_layer_with_folded_attributes(tiny, exports):
    model, _ = tiny
    proto = onnx.load(str(exports[("plugin", "fp32")]))
    onnx.checker.check_model(proto)
    nodes = [n for n in proto.graph.node if n.op_type == contract.OP_TYPE]
    layers = find_wtconv_layers(model)
    assert len(nodes) == len(layers) == 18
    assert all(n.domain == contract.ONNX_DOMAIN for n in nodes)
    assert not [f.name for f in proto.functions], "no ONNX local functions (TensorRT imports them before plugins)"
    assert {(o.domain, o.version) for o in proto.opset_import} >= {("", 20), (contract.ONNX_DOMAIN, 1)}
    assert all(n.domain in ("", contract.ONNX_DOMAIN) for n in proto.graph.node)

    types = {
        **{f: onnx.AttributeProto.INT for f in contract.INT_FIELDS},
        **{f: onnx.AttributeProto.FLOATS for f in contract.FLOAT_FIELDS},
        contract.FIELD_CHANNELS_LAST: onnx.AttributeProto.INT,
        contract.FIELD_PLUGIN_VERSION: onnx.AttributeProto.STRING,
        contract.FIELD_PLUGIN_NAMESPACE: onnx.AttributeProto.STRING,
    }
    for node, (path, layer) in zip(nodes, layers, strict=True):  # node order = module order
        assert {a.name: a.type for a in node.attribute} == types, path
        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
        expected = fold_wtconv(layer).attributes()
        for field in contract.INT_FIELDS:
            assert attrs[field] == expected[field], (path, field)
        for field in contract.FLOAT_FIELDS:  # bit-exact fp32
            np.testing.assert_array_equal(
                np.asarray(attrs[field], np.float32), np.asarray(expected[field], np.float32), err_msg=f"{path} {field}"
            )
        assert attrs[contract.FIELD_CHANNELS_LAST] == 0  # NCHW blocks (the default layout)
        assert attrs[contract.FIELD_PLUGIN_VERSION] == contract.PLUGIN_VERSION.encode()
        assert attrs[contract.FIELD_PLUGIN_NAMESPACE] == contract.PLUGIN_NAMESPACE.encode()
    # The published stage configuration: kernel 5, levels (5, 4, 3, 2) over 3 + 3 + 9 + 3 blocks.
    levels = [
        onnx.helper.get_attribute_value(next(a for a in n.attribute if a.name == contract.FIELD_WT_LEVELS))
        for n in nodes
    ]
    assert levels == [5] * 3 + [4] * 3 + [3] * 9 + [2] * 3
    # The WTConv2d weights travel only as attributes (no left-over initializers of the folded buffers).
    assert not [i.name for i in proto.graph.initializer if "conv_dw" in i.name]


def test_dynamic_axes_and_metadata(exports):
    for (ops, precision), path in exports.items():
        proto = onnx.load(str(path), load_external_data=False)
        (inp,), (out,) = proto.graph.input, proto.graph.output
        dims = [d.dim_param or d.dim_value for d in inp.type.tensor_type.shape.dim]
        assert dims == ["batch", 3, "height", "width"], (ops, precision)
        assert out.type.tensor_type.shape.dim[0].dim_param == "batch"
        elem = onnx.TensorProto.FLOAT16 if precision == "fp16" else onnx.TensorProto.FLOAT
        assert inp.type.tensor_type.elem_type == out.type.tensor_type.elem_type == elem
        meta = metadata_of(proto)
        assert (meta["ops"], meta["precision"]) == (ops, precision)
        assert (meta["source"], meta["weights"]) == ("wtconvnext_tiny", "random:0")


def test_standard_export_uses_only_standard_ops(exports):
    for precision in ("fp32", "fp16"):
        proto = onnx.load(str(exports[("standard", precision)]))
        onnx.checker.check_model(proto)
        assert {n.domain for n in proto.graph.node} <= {"", "ai.onnx"}
        assert [o.domain for o in proto.opset_import if o.domain not in ("", "ai.onnx")] == []
        assert not proto.functions
        ops = {n.op_type for n in proto.graph.node}
        assert {"Conv", "ConvTranspose"} <= ops and contract.OP_TYPE not in ops


def test_fp16_keeps_folded_weights_fp32_and_norms_fp16(exports):
    proto = onnx.load(str(exports[("plugin", "fp16")]))
    nodes = [n for n in proto.graph.node if n.op_type == contract.OP_TYPE]
    assert len(nodes) == 18
    value_types = {v.name: v.type.tensor_type.elem_type for v in proto.graph.value_info}
    for node in nodes:  # fp16 activations into and out of the node, fp32 FLOATS attributes
        assert value_types.get(node.input[0]) == onnx.TensorProto.FLOAT16
        assert value_types.get(node.output[0]) == onnx.TensorProto.FLOAT16
    norms = [n for n in proto.graph.node if n.op_type == "LayerNormalization"]
    assert norms, "LayerNormalization nodes expected"
    for norm in norms:  # rendered for ONNX Runtime: fp16 in, statistics in fp32 inside (tests/test_onnx_render.py)
        assert value_types.get(norm.input[0]) == onnx.TensorProto.FLOAT16


@pytest.mark.parametrize("ops", ["plugin", "standard"])
def test_fp32_matches_pytorch_in_onnxruntime(ops, exports, references, error_report):
    session = make_ort_session(exports[(ops, "fp32")])
    for x, _, ref32, _ in references:
        y = session.run(None, {"input": x.numpy()})[0]
        assert y.shape == ref32.shape
        error = rel_error(y, ref32)
        error_report.add(f"ONNX Runtime {ops} fp32 vs PyTorch fp32 (WTConvNeXt-T)", error, str(tuple(x.shape)))
        assert error <= FP32_TOLERANCE, (ops, tuple(x.shape), error)


@pytest.mark.parametrize("ops", ["plugin", "standard"])
def test_fp16_within_twice_pytorch_fp16_error(ops, exports, references, error_report):
    session = make_ort_session(exports[(ops, "fp16")])
    for x, ref64, _, ref16 in references:
        y = session.run(None, {"input": x.numpy().astype(np.float16)})[0]
        assert y.dtype == np.float16 and y.shape == ref64.shape
        error, own = rel_error(y, ref64), rel_error(ref16, ref64)
        error_report.add(f"ONNX Runtime {ops} fp16 vs float64 (WTConvNeXt-T)", error, str(tuple(x.shape)))
        error_report.add("PyTorch fp16 vs float64 (WTConvNeXt-T)", own, str(tuple(x.shape)))
        assert error <= FP16_FACTOR * own, (ops, tuple(x.shape), error, own)


def test_node_attribute_names_are_the_plugin_field_names(exports):
    """The exported attributes against the C++ plugin's field names (plugin/common/wtconvPluginContract.h),
    directly; tests/test_plugin_contract.py checks that header against contract.py."""
    import re
    from pathlib import Path

    header = Path(__file__).resolve().parent.parent / "plugin" / "common" / "wtconvPluginContract.h"
    if not header.is_file():
        pytest.skip(f"{header} not present")
    text = re.sub(r"//[^\n]*", "", re.sub(r"/\*.*?\*/", "", header.read_text(), flags=re.S))
    strings = dict(re.findall(r'constexpr\s+char\s+const\s*\*\s*(k[A-Z0-9_]+)\s*=\s*"([^"]*)"\s*;', text))
    cpp_fields = {value for name, value in strings.items() if name.startswith("kFIELD_")}
    proto = onnx.load(str(exports[("plugin", "fp32")]), load_external_data=False)
    node = next(n for n in proto.graph.node if n.op_type == strings["kPLUGIN_NAME"])
    assert {a.name for a in node.attribute} <= cpp_fields
    version = next(a for a in node.attribute if a.name == strings["kFIELD_PLUGIN_VERSION"])
    assert onnx.helper.get_attribute_value(version) == strings["kPLUGIN_VERSION"].encode()
