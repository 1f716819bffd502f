"""The activation check of ``build`` (trt_engine.activations): every tensor of an export at a profile's max shapes,
from ONNX shape inference over the weightless graph, checked against TensorRT's 2^31 - 1 elements per tensor and the
WTConv2d kernels' per-dimension limit before TensorRT is asked.

The oracle for the shapes is PyTorch: the shipped model run on the meta device at the same input shape, with a hook
on every module recording its output's shape.
"""

from __future__ import annotations

import math

import pytest
import torch
from engine_helpers import tiny_onnx

import wtconv_trt
from wtconv_core.errors import InputError
from wtconv_libs import contract
from wtconv_torch.wtconv2d import WTConv2d

onnx = pytest.importorskip("onnx")

SHAPE = (5, 1, 40, 24)  # batch, channels, and a non-square size other than the export's 32x32


def pytorch_module_outputs(shape) -> dict:
    """{module path: output shape} of the shipped model on the meta device at ``shape``; WTConv2d layers in order."""
    from wtconv_torch.models import build_model_from_config, read_default_config

    with torch.device("meta"):
        model = build_model_from_config(read_default_config()).eval()
    shapes = {}

    def record(name):
        def hook(module, inputs, output) -> None:
            shapes.setdefault(name, tuple(output.shape))

        return hook

    for name, module in model.named_modules():
        if name:
            module.register_forward_hook(record(name))
    with torch.no_grad():
        model(torch.empty(shape, device="meta"))
    wtconv = [name for name, module in model.named_modules() if isinstance(module, WTConv2d)]
    return shapes, wtconv


@pytest.mark.parametrize("ops, precision", [("plugin", "fp32"), ("plugin", "fp16"), ("standard", "fp32")])
def test_the_shapes_are_pytorchs(ops, precision, shipped_exports):
    """The largest tensor and every WTConv2d layer's output (plugin exports: the node's own) have PyTorch's shapes."""
    from trt_engine.activations import activations, weightless_model

    skeleton = weightless_model(onnx.load(str(shipped_exports[ops, precision]), load_external_data=False))
    found = activations(skeleton, {"input": SHAPE})
    expected, wtconv_layers = pytorch_module_outputs(SHAPE)
    largest = max(found, key=lambda a: a.elements)
    assert largest.elements == max(math.prod(s) for s in expected.values())
    assert largest.layer in expected and math.prod(expected[largest.layer]) == largest.elements
    by_tensor = {a.tensor: a for a in found}
    assert by_tensor["output"].dims == expected["head.fc"]
    if ops == "plugin":
        assert [layer for layer, _ in skeleton.wtconv_inputs] == wtconv_layers
        nodes = [n for n in skeleton.model.graph.node if n.name.startswith("node_onnx_wtconv2d")]
        assert [by_tensor[n.output[0]].dims for n in nodes] == [expected[name] for name in wtconv_layers]


def test_a_layer_beyond_the_limit_is_refused_in_one_line(shipped_exports, tmp_path):
    """The input of the issue (max batch 2,000,000 at 32x32: 2.0e9 input elements, within the limit) makes the
    first block's MLP output 2000000x16x16x64; the batch said to fit does, one more does not."""
    model = shipped_exports["plugin", "fp32"]
    with pytest.raises(InputError) as caught:
        wtconv_trt.build_engine(model, shapes="input:1x1x32x32/1000000x1x32x32/2000000x1x32x32", engine=tmp_path / "e")
    message = str(caught.value)
    assert caught.value.parameter == "shapes" and "\n" not in message
    assert "layer 'stages.0.blocks.0.mlp.fc1' (MatMul) would be 2000000x16x16x64 = 32768000000 elements" in message
    fits = int(message.split("max batch of at most ")[1].split()[0])
    assert fits * 16 * 16 * 64 <= 2**31 - 1 < (fits + 1) * 16 * 16 * 64
    from trt_engine.activations import activations, weightless_model

    skeleton = weightless_model(onnx.load(str(model), load_external_data=False))
    assert max(a.elements for a in activations(skeleton, {"input": (fits, 1, 32, 32)})) <= 2**31 - 1
    assert list(tmp_path.iterdir()) == []


def test_a_wtconv2d_input_beyond_the_kernels_dimension_limit_is_refused(tmp_path):
    """A batch within 2^31 - 1 elements (one channel, one pixel) but above the kernels' per-dimension limit."""
    model = tiny_onnx(tmp_path / "tiny.onnx", wtconv_nodes=1, dims=("batch", 1, 1, 1))
    batch = contract.MAX_DIM + 1
    with pytest.raises(InputError, match=rf"layer 'wtconv0' would take {batch}x1x1x1, and the WTConv2d kernels take"):
        wtconv_trt.build_engine(model, shapes=f"input:1x1x1x1/1x1x1x1/{batch}x1x1x1", engine=tmp_path / "e")
