"""The export rendered for its runtime (docs/onnx_export.md, "Rendering for the runtime"), on the shipped default
model (a small WTConvNeXt: 5 blocks in 4 stages; seconds per export):

- the exported graph: GELU as ONNX Gelu (opset 20), fp16 LayerNorms reading and writing fp16 with no Cast for
  ONNX Runtime, a Cast pair around each for TensorRT, the exporter's value_info kept for every tensor;
- the graph ONNX Runtime's optimizer leaves on the CPU EP (its saved optimized model, our CPU op registered),
  counted by op type: every GELU fused with its bias into BiasGelu, nothing of the GELU's decomposition left;
- the fp16 exports against PyTorch in ONNX Runtime on our CPU op, within the fp16 contract.

The op-type counts are derived from the model's structure (blocks, stages), not copied from a run.
"""

import collections
import copy

import numpy as np
import pytest
import torch

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from wtconv_export.onnx_export import export_onnx  # noqa: E402
from wtconv_libs import contract  # noqa: E402
from wtconv_ort.session import make_ort_session  # noqa: E402

EXPORT_SHAPE = (1, 1, 32, 32)
FP16_FACTOR = 2.0  # fp16 exports: within 2x PyTorch-fp16's own error against float64 (docs/onnx_export.md, "fp16")


@pytest.fixture(scope="module")
def structure(shipped_model):
    """(blocks, stages, LayerNorms) of the shipped model: a LayerNorm per block, the stem's, one per downsampling
    stage, the head's."""
    blocks = sum(len(stage.blocks) for stage in shipped_model.stages)
    stages = len(shipped_model.stages)
    return blocks, stages, blocks + 1 + (stages - 1) + 1


@pytest.fixture(scope="module")
def rendered(shipped_export):
    """{(precision, rendering): path}: NCHW blocks rendered for "onnxruntime" or "tensorrt", or "channels_last"
    blocks rendered for ONNX Runtime (conftest's exports, shared with the TensorRT-RTX tests)."""
    renderings = {"onnxruntime": ("onnxruntime", "nchw"), "tensorrt": ("tensorrt", "nchw")}
    renderings["channels_last"] = ("onnxruntime", "channels_last")
    keys = [("fp32", "onnxruntime"), ("fp16", "onnxruntime"), ("fp16", "tensorrt")]
    keys += [("fp32", "channels_last"), ("fp16", "channels_last")]
    return {(p, r): shipped_export("plugin", p, *renderings[r]) for p, r in keys}


def op_types(proto) -> collections.Counter:
    return collections.Counter(f"{n.domain}::{n.op_type}" if n.domain else n.op_type for n in proto.graph.node)


def optimized_graph(path, library, tmp_path) -> onnx.ModelProto:
    """The model ONNX Runtime's CPU EP runs after its optimizer (all levels), our CPU op registered."""
    options = ort.SessionOptions()
    options.register_custom_ops_library(str(library))
    options.optimized_model_filepath = str(tmp_path / f"{path.stem}.optimized.onnx")
    options.log_severity_level = 3  # its note that an optimized model with NCHWc nodes is machine-specific
    ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    return onnx.load(options.optimized_model_filepath)


def test_gelu_is_onnx_gelu_at_opset_20(rendered, structure):
    blocks, _, _ = structure
    for key, path in rendered.items():
        proto = onnx.load(str(path))
        assert {(o.domain, o.version) for o in proto.opset_import} >= {("", 20), (contract.ONNX_DOMAIN, 1)}, key
        counts = op_types(proto)
        assert counts["Gelu"] == blocks, key
        assert counts["Erf"] == counts["Div"] == 0, key  # opset 18's spelling of GELU is gone


def test_fp16_layer_norms_for_onnxruntime_read_and_write_fp16(rendered, structure):
    _, _, norms = structure
    proto = onnx.load(str(rendered["fp16", "onnxruntime"]))
    types = {v.name: v.type.tensor_type.elem_type for v in proto.graph.value_info}
    types.update({i.name: i.data_type for i in proto.graph.initializer})
    layer_norms = [n for n in proto.graph.node if n.op_type == "LayerNormalization"]
    assert len(layer_norms) == norms
    for node in layer_norms:
        assert [types[name] for name in (*node.input, *node.output)] == [onnx.TensorProto.FLOAT16] * 4, node.name
        stash = [a.i for a in node.attribute if a.name == "stash_type"]
        assert stash in ([], [1]), node.name  # statistics in fp32 (ONNX's default)
    assert op_types(proto)["Cast"] == 0


def test_fp16_layer_norms_for_tensorrt_run_in_fp32_between_casts(rendered, structure):
    _, _, norms = structure
    proto = onnx.load(str(rendered["fp16", "tensorrt"]))
    producer = {out: n for n in proto.graph.node for out in n.output}
    consumers = collections.defaultdict(list)
    for n in proto.graph.node:
        for name in n.input:
            consumers[name].append(n)
    layer_norms = [n for n in proto.graph.node if n.op_type == "LayerNormalization"]
    assert len(layer_norms) == norms
    to = {"float": onnx.TensorProto.FLOAT, "half": onnx.TensorProto.FLOAT16}
    for node in layer_norms:  # LayerNorm2d's permutes may stand between a Cast and its LayerNormalization
        cast_in = producer[node.input[0]]
        while cast_in.op_type == "Transpose":
            cast_in = producer[cast_in.input[0]]
        (cast_out,) = consumers[node.output[0]]
        while cast_out.op_type == "Transpose":
            (cast_out,) = consumers[cast_out.output[0]]
        assert cast_in.op_type == cast_out.op_type == "Cast", node.name
        assert cast_in.attribute[0].i == to["float"] and cast_out.attribute[0].i == to["half"], node.name
    assert op_types(proto)["Cast"] == 2 * norms


def test_value_info_kept_for_every_tensor(rendered):
    """ONNX Runtime's shape-dependent fusions need every tensor's shape; the exporter's value_info gives them."""
    for key, path in rendered.items():
        proto = onnx.load(str(path))
        known = {v.name: v for v in (*proto.graph.value_info, *proto.graph.output)}
        for node in proto.graph.node:
            for name in node.output:
                assert name in known, (key, node.op_type, name)
                shape = known[name].type.tensor_type.shape
                assert known[name].type.tensor_type.elem_type and len(shape.dim) >= 0, (key, name)
        wtconv = [n for n in proto.graph.node if n.op_type == contract.OP_TYPE]
        for node in wtconv:  # rank 4 after our node, whose output ONNX cannot infer by itself
            assert len(known[node.output[0]].type.tensor_type.shape.dim) == 4, (key, node.name)


def test_onnxruntime_cpu_fuses_every_gelu_with_its_bias(rendered, structure, ort_library, tmp_path):
    """On the CPU EP (its fusions: BiasGelu, SkipLayerNormalization, NCHWc convolutions; docs/onnx_export.md): each
    block's fc1 bias and GELU become one com.microsoft BiasGelu, and no node of a decomposed GELU is left."""
    blocks, _, norms = structure
    counts = op_types(optimized_graph(rendered["fp32", "onnxruntime"], ort_library, tmp_path))
    assert counts["com.microsoft::BiasGelu"] == blocks, counts
    assert counts["Gelu"] == counts["Erf"] == counts["Div"] == counts["Cast"] == 0, counts
    assert counts[f"{contract.ONNX_DOMAIN}::{contract.OP_TYPE}"] == blocks
    assert counts["LayerNormalization"] + counts["com.microsoft::SkipLayerNormalization"] == norms, counts


@pytest.mark.parametrize("runtime", ["onnxruntime", "tensorrt"])
def test_fp16_renderings_match_pytorch_within_the_fp16_contract(runtime, shipped_model, rendered, ort_library):
    session = make_ort_session(rendered["fp16", runtime], op="native", library=ort_library)
    x = torch.randn((6, 1, 32, 32), generator=torch.Generator().manual_seed(3)).half()
    with torch.no_grad():
        ref64 = copy.deepcopy(shipped_model).double()(x.double()).numpy()
        own = copy.deepcopy(shipped_model).half()(x).double().numpy()
    y = session.run(None, {"input": x.numpy()})[0].astype(np.float64)
    error = np.abs(y - ref64).max() / np.abs(ref64).max()
    own_error = np.abs(own - ref64).max() / np.abs(ref64).max()
    assert error <= FP16_FACTOR * own_error, (runtime, error, own_error)


def test_channels_last_layout_refuses_a_model_that_is_not_a_wtconvnext(tmp_path):
    from wtconv_core.errors import InputError
    from wtconv_torch.wtconv2d import WTConv2d

    model = torch.nn.Sequential(WTConv2d(8, 8, kernel_size=5, wt_levels=2)).eval()
    with pytest.raises(InputError, match="layout: channels_last renders WTConvNeXt's blocks") as error:
        export_onnx(model, tmp_path / "m.onnx", layout="channels_last", input_shape=(1, 8, 16, 16))
    assert error.value.parameter == "layout" and not (tmp_path / "m.onnx").exists()


def test_building_an_engine_from_an_fp16_export_for_onnxruntime_says_how_to_render_it_for_tensorrt(rendered):
    from trt_engine.build import rendering_note
    from wtconv_export.exported import ExportedModel

    note = rendering_note(ExportedModel.read(rendered["fp16", "onnxruntime"]))
    assert note and "--runtime tensorrt" in note
    assert rendering_note(ExportedModel.read(rendered["fp16", "tensorrt"])) is None
    assert rendering_note(ExportedModel.read(rendered["fp32", "onnxruntime"])) is None  # fp32: one rendering for both


def test_channels_last_blocks_keep_nhwc_between_the_nodes(rendered, structure):
    """Every node reads and writes (N, H, W, C) with channels_last=1; the only Transposes are the stem's and the
    two around each downsampling convolution (ConvNeXt's rendering has a pair per block and per LayerNorm2d)."""
    blocks, stages, _ = structure
    for precision in ("fp32", "fp16"):
        proto = onnx.load(str(rendered[precision, "channels_last"]))
        shapes = {v.name: v.type.tensor_type.shape.dim for v in proto.graph.value_info}
        nodes = [n for n in proto.graph.node if n.op_type == contract.OP_TYPE]
        assert len(nodes) == blocks
        for node in nodes:
            attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
            assert attrs[contract.FIELD_CHANNELS_LAST] == 1, node.name
            channels = len(attrs[contract.FIELD_BASE_BIAS])
            for name in (node.input[0], node.output[0]):
                assert len(shapes[name]) == 4 and shapes[name][3].dim_value == channels, (precision, name)
        assert op_types(proto)["Transpose"] == 1 + 2 * (stages - 1), precision


def test_channels_last_blocks_run_in_onnxruntime_as_pytorch(shipped_model, rendered, ort_library, tmp_path):
    """The channels-last rendering against the PyTorch model, in ONNX Runtime on our CPU op: fp32 to fp32 rounding
    (1e-5 relative), fp16 within the fp16 contract; and what ONNX Runtime's CPU EP leaves of it (BiasGelu in every
    block, no more Transposes than exported)."""
    x = torch.randn((5, 1, 32, 32), generator=torch.Generator().manual_seed(4)).half().float()
    with torch.no_grad():
        ref32 = shipped_model(x).numpy().astype(np.float64)
        ref64 = copy.deepcopy(shipped_model).double()(x.double()).numpy()
        own16 = copy.deepcopy(shipped_model).half()(x.half()).double().numpy()
    y32 = make_ort_session(rendered["fp32", "channels_last"], op="native", library=ort_library).run(
        None, {"input": x.numpy()}
    )[0]
    assert np.abs(y32 - ref32).max() / np.abs(ref32).max() <= 1e-5
    y16 = make_ort_session(rendered["fp16", "channels_last"], op="native", library=ort_library).run(
        None, {"input": x.half().numpy()}
    )[0]
    error = np.abs(y16.astype(np.float64) - ref64).max() / np.abs(ref64).max()
    assert error <= FP16_FACTOR * np.abs(own16 - ref64).max() / np.abs(ref64).max()
    blocks = sum(len(stage.blocks) for stage in shipped_model.stages)
    counts = op_types(optimized_graph(rendered["fp32", "channels_last"], ort_library, tmp_path))
    assert counts["com.microsoft::BiasGelu"] == blocks, counts
    assert counts["Transpose"] <= op_types(onnx.load(str(rendered["fp32", "channels_last"])))["Transpose"], counts


@pytest.mark.parametrize("ops", ["plugin", "standard"])
def test_opset_18_still_exports_and_runs(ops, shipped_model, ort_library, tmp_path):
    """For a runtime that stops at opset 18: the standard-op WTConv2d needs 18, GELU is then the exporter's
    Div/Erf/Add/Mul/Mul; the file matches PyTorch in ONNX Runtime (fp32, 1e-5 relative)."""
    path = tmp_path / f"digits_{ops}_opset18.onnx"
    export_onnx(shipped_model, path, ops=ops, opset=18, input_shape=EXPORT_SHAPE, metadata={"source": "default"})
    proto = onnx.load(str(path))
    assert ("", 18) in {(o.domain, o.version) for o in proto.opset_import}
    assert op_types(proto)["Gelu"] == 0 and op_types(proto)["Erf"] > 0
    x = torch.randn((3, 1, 32, 32), generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        ref = shipped_model(x).numpy()
    y = make_ort_session(path, op="native", library=ort_library).run(None, {"input": x.numpy()})[0]
    assert np.abs(y - ref).max() / np.abs(ref).max() <= 1e-5
