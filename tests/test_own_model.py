"""A user's own network built on the published WTConv2d: found, exported with one WTConv2d node per layer, run in
ONNX Runtime against the user's module; published layers the operator cannot compute refused in one line.

The published class is played by tests/published_wtconv.py (its code, statement for statement); when a checkout of
BGU-CS-VIL/WTConv is in third_party/WTConv the stand-in is compared with it, and the network is built from the real
class too. The oracles: the published layer's own forward (the user's module, run by PyTorch), and the folded node
attributes written out here from the published parameter names.
"""

import copy
import importlib.util
import sys
from pathlib import Path

import numpy as np
import published_wtconv
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from wtconv_core.errors import ModelError, WtconvTrtError
from wtconv_export.exported import metadata_of
from wtconv_export.onnx_export import export_onnx, find_wtconv_layers
from wtconv_libs import contract
from wtconv_libs.contract import count_wtconv_nodes
from wtconv_torch.published import convert_published_wtconv, is_published_wtconv
from wtconv_torch.wtconv2d import WTConv2d as OurWTConv2d

onnx = pytest.importorskip("onnx")

PUBLISHED_CHECKOUT = Path(__file__).resolve().parent.parent / "third_party" / "WTConv"
# (constructor arguments) of the U-Net's WTConv2d layers, in module order: channels, kernel sizes, levels, a
# stride-2 layer and a layer without bias.
UNET_LAYERS = [
    dict(in_channels=8, out_channels=8, kernel_size=5, wt_levels=2),
    dict(in_channels=8, out_channels=8, kernel_size=3, wt_levels=1, stride=2),
    dict(in_channels=16, out_channels=16, kernel_size=7, wt_levels=3),
    dict(in_channels=32, out_channels=32, kernel_size=3, wt_levels=2, bias=False),
    dict(in_channels=16, out_channels=16, kernel_size=5, wt_levels=1),
    dict(in_channels=8, out_channels=8, kernel_size=3, wt_levels=4),
]
UNET_PATHS = ["enc1", "down1.0", "enc2.0", "mid.0", "dec2.1", "dec1.1"]
# Height and width must be multiples of 4 (two down-samplings, skip connections); non-square and batch 3 included.
UNET_INPUTS = [(2, 3, 32, 32), (3, 3, 24, 40)]


def import_published_wtconv():
    """The published ``wtconv`` package from third_party/WTConv (skip when absent or PyWavelets is missing)."""
    init = PUBLISHED_CHECKOUT / "wtconv" / "__init__.py"
    if not init.is_file():
        pytest.skip(
            "no checkout of the published code: git clone https://github.com/BGU-CS-VIL/WTConv third_party/WTConv "
            "(ignored by git) to compare the stand-in with it"
        )
    pytest.importorskip("pywt", reason="the published wtconv package imports PyWavelets")
    if "wtconv" not in sys.modules:
        spec = importlib.util.spec_from_file_location("wtconv", init, submodule_search_locations=[str(init.parent)])
        module = importlib.util.module_from_spec(spec)
        sys.modules["wtconv"] = module
        spec.loader.exec_module(module)
    return sys.modules["wtconv"]


@torch.no_grad()
def randomize(model: nn.Module, seed: int) -> nn.Module:
    """Every learnable parameter random (seeded), scaled by its fan-in, the wavelet scales around their 0.1, so
    every branch of every layer shows in the output. The fixed wavelet filters are left alone."""
    generator = torch.Generator().manual_seed(seed)
    for name, param in model.named_parameters():
        if not param.requires_grad:
            continue
        noise = torch.randn(param.shape, generator=generator)
        if "wavelet_scale" in name:
            param.copy_(0.1 + 0.05 * noise)
        elif "base_scale" in name:
            param.copy_(1.0 + 0.2 * noise)
        else:
            param.copy_(noise / max(param[0].numel(), 1) ** 0.5)
    return model


class UNet(nn.Module):
    """A small U-Net: two down-samplings (one a stride-2 WTConv2d), skip connections by concatenation, an
    up-sampling by transposed convolution and one by interpolation; WTConv2d layers inside Sequential and
    ModuleList containers and directly as attributes."""

    def __init__(self, layer_class):
        super().__init__()
        a, b, c, d, e, f = (layer_class(**kwargs) for kwargs in UNET_LAYERS)
        self.stem = nn.Conv2d(3, 8, 3, padding=1)
        self.enc1 = a
        self.down1 = nn.Sequential(b, nn.Conv2d(8, 16, 1))
        self.enc2 = nn.ModuleList([c, nn.GELU()])
        self.down2 = nn.Conv2d(16, 32, 2, stride=2)
        self.mid = nn.Sequential(d, nn.ReLU())
        self.up2 = nn.ConvTranspose2d(32, 16, 2, stride=2)
        self.dec2 = nn.Sequential(nn.Conv2d(32, 16, 1), e)
        self.up1 = nn.Conv2d(16, 8, 1)
        self.dec1 = nn.Sequential(nn.Conv2d(16, 8, 1), f)
        self.head = nn.Conv2d(8, 2, 1)

    def forward(self, x):
        skip1 = self.enc1(self.stem(x))
        skip2 = self.enc2[1](self.enc2[0](self.down1(skip1)))
        x = self.up2(self.mid(self.down2(skip2)))
        x = self.dec2(torch.cat([x, skip2], 1))
        x = self.up1(F.interpolate(x, size=skip1.shape[-2:], mode="nearest"))
        return self.head(self.dec1(torch.cat([x, skip1], 1)))


def make_unet(layer_class=published_wtconv.WTConv2d, seed=0) -> UNet:
    torch.manual_seed(seed)
    return randomize(UNet(layer_class), seed).eval()


def random_inputs(shapes, seed=1):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(shape, dtype=np.float32) for shape in shapes]


def node_attributes(path) -> list[dict]:
    proto = onnx.load(str(path))
    return [
        {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
        for node in proto.graph.node
        if node.op_type == contract.OP_TYPE and node.domain == contract.ONNX_DOMAIN
    ]


def expected_attributes(layer) -> dict:
    """The plugin fields of a published layer, from its parameter names (docs/onnx_export.md's attribute table):
    scales times weights in float64, stored as float32."""
    c = layer.base_conv.in_channels
    k = layer.base_conv.kernel_size[0]
    sb = layer.base_scale.weight.detach().double().reshape(c)
    base = layer.base_conv.weight.detach().double().reshape(c, k, k) * sb[:, None, None]
    bias = layer.base_conv.bias
    bias = bias.detach().double() * sb if bias is not None else torch.zeros(c, dtype=torch.float64)
    wavelet = [
        conv.weight.detach().double().reshape(4 * c, k, k)
        * scale.weight.detach().double().reshape(4 * c)[:, None, None]
        for conv, scale in zip(layer.wavelet_convs, layer.wavelet_scale, strict=True)
    ]
    return {
        "kernel_size": k,
        "wt_levels": layer.wt_levels,
        "stride": layer.stride,
        "base_weight": base.float().flatten().numpy(),
        "base_bias": bias.float().numpy(),
        "wavelet_weight": torch.stack(wavelet).float().flatten().numpy(),
    }


# --------------------------------------------------------------------------------------------------------------
# The stand-in is the published code
# --------------------------------------------------------------------------------------------------------------


def test_stand_in_db1_is_pywavelets_db1():
    pywt = pytest.importorskip("pywt")
    w = pywt.Wavelet("db1")
    for ours, theirs in zip(published_wtconv._DB1, (w.dec_lo, w.dec_hi, w.rec_lo, w.rec_hi), strict=True):
        assert list(ours) == list(theirs)


@pytest.mark.parametrize("k,levels,stride,bias", [(5, 1, 1, True), (3, 3, 2, False), (7, 2, 3, True)])
def test_stand_in_matches_the_published_code(k, levels, stride, bias):
    """Same attributes, state_dict keys and shapes, filters and output, bit for bit, as BGU-CS-VIL/WTConv."""
    wtconv = import_published_wtconv()
    real = wtconv.WTConv2d(6, 6, kernel_size=k, stride=stride, bias=bias, wt_levels=levels)
    stand_in = published_wtconv.WTConv2d(6, 6, kernel_size=k, stride=stride, bias=bias, wt_levels=levels)
    assert type(real).__name__ == type(stand_in).__name__ == "WTConv2d"
    assert set(vars(real)) == set(vars(stand_in))
    assert {n: type(m).__name__ for n, m in real.named_modules()} == {
        n: type(m).__name__ for n, m in stand_in.named_modules()
    }
    real_state, stand_in_state = real.state_dict(), randomize(stand_in, k).state_dict()
    assert {n: t.shape for n, t in real_state.items()} == {n: t.shape for n, t in stand_in_state.items()}
    assert torch.equal(real_state["wt_filter"], stand_in_state["wt_filter"])
    assert torch.equal(real_state["iwt_filter"], stand_in_state["iwt_filter"])
    real.load_state_dict(stand_in_state)
    x = torch.randn(2, 6, 13, 10, generator=torch.Generator().manual_seed(k))
    with torch.no_grad():
        assert torch.equal(real(x), stand_in(x))


def test_stand_in_other_wavelets_match_the_published_code():
    wtconv = import_published_wtconv()
    real = wtconv.WTConv2d(2, 2, wt_type="db2")
    stand_in = published_wtconv.WTConv2d(2, 2, wt_type="db2")
    assert torch.equal(real.wt_filter, stand_in.wt_filter) and real.wt_filter.shape == (8, 1, 4, 4)


# --------------------------------------------------------------------------------------------------------------
# Found and converted
# --------------------------------------------------------------------------------------------------------------


def test_published_layers_are_found_in_module_order():
    unet = make_unet()
    layers = find_wtconv_layers(unet)
    assert [path for path, _ in layers] == UNET_PATHS
    assert all(type(layer) is published_wtconv.WTConv2d and is_published_wtconv(layer) for _, layer in layers)
    # Ours and the published class side by side; a layer as the whole model has the path ''.
    mixed = nn.Sequential(published_wtconv.WTConv2d(4, 4), OurWTConv2d(4, 4, kernel_size=3))
    assert [(path, type(layer)) for path, layer in find_wtconv_layers(mixed)] == [
        ("0", published_wtconv.WTConv2d),
        ("1", OurWTConv2d),
    ]
    bare = published_wtconv.WTConv2d(4, 4)
    assert find_wtconv_layers(bare) == [("", bare)]
    assert not is_published_wtconv(OurWTConv2d(4, 4))


def test_convert_published_wtconv_keeps_outputs_and_keys():
    unet = make_unet().double()
    x = torch.randn(2, 3, 24, 40, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        expected = unet(x)
        converted = convert_published_wtconv(unet)
        assert [type(layer) for _, layer in find_wtconv_layers(converted)] == [OurWTConv2d] * len(UNET_PATHS)
        assert [type(layer) for _, layer in find_wtconv_layers(unet)] == [published_wtconv.WTConv2d] * 6  # a copy
        assert list(converted.state_dict()) == list(unet.state_dict())
        assert all(p.dtype == torch.float64 for p in converted.parameters())
        error = float((converted(x) - expected).abs().max() / expected.abs().max())
        assert error < 1e-13, error

        in_place = convert_published_wtconv(unet, inplace=True)
        assert in_place is unet and isinstance(unet.enc1, OurWTConv2d)
        layer = published_wtconv.WTConv2d(4, 4, kernel_size=3, wt_levels=2, stride=2).train()
        single = convert_published_wtconv(layer)
        assert isinstance(single, OurWTConv2d) and single.training and single.stride == 2


def test_published_layers_run_on_the_fused_operator():
    """After convert_published_wtconv, fuse_wtconv_layers (our kernels' module; the executable spec on the CPU)
    fuses every layer; given the published layers themselves, it names the conversion instead of leaving them
    unfused."""
    from wtconv_torch.fused_module import FusedWTConv2d, fuse_wtconv_layers

    unet = make_unet()
    x = torch.randn(1, 3, 32, 32, generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        expected = unet(x)
        fused = fuse_wtconv_layers(convert_published_wtconv(unet))
        assert sum(isinstance(m, FusedWTConv2d) for m in fused.modules()) == len(UNET_PATHS)
        error = float((fused(x) - expected).abs().max() / expected.abs().max())
    assert error < 1e-5, error
    with pytest.raises(ModelError, match=r"layer 'enc1' is a published_wtconv.WTConv2d.*convert_published_wtconv"):
        fuse_wtconv_layers(copy.deepcopy(unet))


# --------------------------------------------------------------------------------------------------------------
# Exported and run in ONNX Runtime against the user's module
# --------------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module", params=["stand-in", "published"])
def unet(request):
    """The U-Net built from the stand-in, and from the published code itself when a checkout is present."""
    layer_class = published_wtconv.WTConv2d if request.param == "stand-in" else import_published_wtconv().WTConv2d
    return make_unet(layer_class)


@pytest.fixture(scope="module")
def unet_export(unet, tmp_path_factory):
    path = tmp_path_factory.mktemp("unet") / "unet.onnx"
    result = export_onnx(unet, path, input_shape=(1, 3, 32, 32))
    return path, result


def test_unet_exports_one_node_per_layer_with_the_folded_weights(unet, unet_export):
    path, result = unet_export
    proto = onnx.load(str(path))
    assert count_wtconv_nodes(proto) == result.num_wtconv_nodes == len(UNET_LAYERS)
    assert [layer.name for layer in result.layers] == UNET_PATHS
    dims = [d.dim_param or d.dim_value for d in proto.graph.input[0].type.tensor_type.shape.dim]
    assert dims == ["batch", 3, "height", "width"]
    nodes = node_attributes(path)
    for attrs, (name, layer) in zip(nodes, find_wtconv_layers(unet), strict=True):
        expected = expected_attributes(layer)
        for field in contract.INT_FIELDS:
            assert attrs[field] == expected[field], (name, field)
        for field in contract.FLOAT_FIELDS:
            np.testing.assert_array_equal(np.asarray(attrs[field], np.float32), expected[field], err_msg=name)
    assert [n["stride"] for n in nodes] == [kw.get("stride", 1) for kw in UNET_LAYERS]


def test_unet_runs_in_onnx_runtime_like_the_users_module(unet, unet_export, error_report):
    pytest.importorskip("onnxruntime")
    from wtconv_validate.ort import validate_onnx

    path, _ = unet_export
    result = validate_onnx(path, copy.deepcopy(unet), random_inputs(UNET_INPUTS), polygraphy_report=False)
    error_report.add("own U-Net (published WTConv2d), ONNX Runtime vs its module, fp32", max(result.errors))
    assert result.passed and max(result.errors) < 1e-5, result.summary()
    assert [tuple(s) for s in result.shapes] == UNET_INPUTS


def test_unet_metadata_says_it_came_from_a_python_module(unet, unet_export, capsys):
    """Without a source the export records the module's class; validate without the module says how to validate
    from Python, in one line, and that way works (inputs generated at the recorded example size)."""
    import wtconv_trt
    from wtconv_export.onnx_models import build_model_from_metadata
    from wtconv_trt.cli import main as cli_main

    path, _ = unet_export
    metadata = metadata_of(onnx.load(str(path), load_external_data=False))
    assert metadata["source"] == "module"
    assert metadata["module_class"] == f"{UNet.__module__}.UNet"
    assert metadata["input_shape"] == "1,3,32,32"
    with pytest.raises(ModelError, match=r"wtconv_trt.validate_onnx\(ONNX_FILE, module\)") as error:
        build_model_from_metadata(metadata)
    assert "test_own_model.UNet" in str(error.value) and "\n" not in str(error.value)
    assert cli_main(["validate", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "validate_onnx" in err and "module in hand" in err
    result = wtconv_trt.validate_onnx(path, copy.deepcopy(unet))
    assert result.passed and [tuple(s) for s in result.shapes] == [(1, 3, 32, 32), (3, 3, 32, 32)], result.summary()


@pytest.mark.parametrize("ops,precision", [("standard", "fp32"), ("plugin", "fp16")])
def test_unet_other_export_forms(ops, precision, tmp_path, error_report):
    """Standard ONNX ops (no WTConv2d node) and fp16 plugin nodes, each against the user's module."""
    pytest.importorskip("onnxruntime")
    from wtconv_validate.ort import TOLERANCES, validate_onnx

    unet = make_unet(seed=2)
    path = tmp_path / f"unet_{ops}_{precision}.onnx"
    result = export_onnx(unet, path, ops=ops, precision=precision, input_shape=(1, 3, 32, 32))
    assert result.num_wtconv_nodes == (len(UNET_LAYERS) if ops == "plugin" else 0)
    assert count_wtconv_nodes(onnx.load(str(path))) == result.num_wtconv_nodes
    outcome = validate_onnx(path, unet, random_inputs(UNET_INPUTS), polygraphy_report=False)
    error_report.add(f"own U-Net, ONNX Runtime vs its module, {ops} {precision}", max(outcome.errors))
    assert outcome.passed and max(outcome.errors) < TOLERANCES[precision] / 10, outcome.summary()


def test_a_published_layer_alone_exports(tmp_path):
    pytest.importorskip("onnxruntime")
    from wtconv_ort.session import make_ort_session

    layer = randomize(published_wtconv.WTConv2d(4, 4, kernel_size=3, wt_levels=3, stride=2), 5).eval()
    path = tmp_path / "layer.onnx"
    result = export_onnx(layer, path, input_shape=(1, 4, 16, 16))
    assert result.num_wtconv_nodes == 1 and result.layers[0].name == ""
    x = random_inputs([(2, 4, 13, 18)])[0]
    got = make_ort_session(str(path)).run(None, {"input": x})[0]
    with torch.no_grad():
        expected = layer.double()(torch.from_numpy(x).double()).numpy()
    assert got.shape == expected.shape == (2, 4, 7, 9)
    assert np.abs(got - expected).max() / np.abs(expected).max() < 1e-5


# --------------------------------------------------------------------------------------------------------------
# Published layers the operator cannot compute: one line naming the layer and why
# --------------------------------------------------------------------------------------------------------------


class ReluWTConv2d(published_wtconv.WTConv2d):
    """The published parameters, another computation."""

    def forward(self, x):
        return torch.relu(super().forward(x))


class ExtraWTConv2d(published_wtconv.WTConv2d):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.gate = nn.Parameter(torch.ones(1))


def fast_wtconv_layout(channels):
    """A layer of the published class name with the layout of the paper's fast_wtconv (base_weight, wt_weights)."""

    class WTConv2d(nn.Module):
        def __init__(self):
            super().__init__()
            self.base_weight = nn.Parameter(torch.zeros(channels, 1, 5, 5))
            self.wt_weights = nn.ParameterList([nn.Parameter(torch.zeros(4 * channels, 1, 5, 5))])

    return WTConv2d()


def _not_haar(layer):
    with torch.no_grad():
        layer.wt_filter.mul_(1.5)
    return layer


def _widened(layer):
    layer.base_conv = nn.Conv2d(8, 16, 5, padding="same", groups=8)
    return layer


BAD_LAYERS = [
    ("even kernel", lambda: published_wtconv.WTConv2d(8, 8, kernel_size=4), r"even kernel_size 4.*needs an odd one"),
    ("not Haar", lambda: _not_haar(published_wtconv.WTConv2d(8, 8)), r"wavelet other than Haar.*not the Haar"),
    ("in != out", lambda: _widened(published_wtconv.WTConv2d(8, 8)), r"in_channels 8 and out_channels 16.*depthwise"),
    ("other forward", lambda: ReluWTConv2d(8, 8), r"computes something else"),
    ("extra state", lambda: ExtraWTConv2d(8, 8), r"\+gate.*cannot be exported"),
    ("other layout", lambda: fast_wtconv_layout(8), r"lacks the published WTConv2d's base_conv.*load_checkpoint"),
]


@pytest.mark.parametrize("make_layer,pattern", [c[1:] for c in BAD_LAYERS], ids=[c[0] for c in BAD_LAYERS])
def test_layers_the_operator_cannot_compute_are_refused_in_one_line(make_layer, pattern, tmp_path):
    model = nn.Sequential(nn.Conv2d(3, 8, 1), nn.Sequential(nn.Identity(), make_layer()))
    for ops in ("plugin", "standard"):
        with pytest.raises(ModelError, match=pattern) as error:
            export_onnx(model, tmp_path / "m.onnx", ops=ops, input_shape=(1, 3, 16, 16))
        message = str(error.value)
        assert "layer '1.1'" in message and "\n" not in message, message
    assert not (tmp_path / "m.onnx").exists()
    with pytest.raises(WtconvTrtError, match=pattern):
        convert_published_wtconv(model)


def test_other_wavelets_are_refused(tmp_path):
    pytest.importorskip("pywt", reason="the stand-in builds wavelets other than db1 with PyWavelets, as published")
    model = nn.Sequential(published_wtconv.WTConv2d(4, 4, wt_type="db2"))
    with pytest.raises(
        ModelError,
        match=r"layer '0' \(published_wtconv.WTConv2d\) uses a wavelet other than Haar: "
        r"its wt_filter has 4x4 taps",
    ):
        export_onnx(model, tmp_path / "m.onnx", input_shape=(1, 4, 16, 16))


def test_kernel_beyond_the_plugin_exports_with_standard_ops(tmp_path):
    """k = 17 > the plugin's limit: the plugin export names the layer and the way out, the standard one works."""
    pytest.importorskip("onnxruntime")
    from wtconv_validate.ort import validate_onnx

    model = nn.Sequential(nn.Conv2d(3, 4, 1), randomize(published_wtconv.WTConv2d(4, 4, kernel_size=17), 6)).eval()
    with pytest.raises(ModelError, match=r"layer '1': kernel_size 17 exceeds the plugin's limit of 15.*ops='standard'"):
        export_onnx(model, tmp_path / "m.onnx", input_shape=(1, 3, 20, 20))
    path = tmp_path / "std.onnx"
    export_onnx(model, path, ops="standard", input_shape=(1, 3, 20, 20))
    assert validate_onnx(path, model, random_inputs([(1, 3, 20, 23)]), polygraphy_report=False).passed


# --------------------------------------------------------------------------------------------------------------
# WTConvNeXt: drop_path is a training setting
# --------------------------------------------------------------------------------------------------------------


def test_drop_path_is_ignored_at_export_and_validation(tmp_path):
    """A WTConvNeXt built with stochastic depth and left in training mode exports the eval-mode network, has the
    same state_dict keys as one without, and validates against itself."""
    pytest.importorskip("onnxruntime")
    from wtconv_torch.wtconvnext import WTConvNeXt
    from wtconv_validate.ort import validate_onnx

    config = dict(in_chans=2, num_classes=7, depths=(1, 1), dims=(8, 16), wt_levels=(2, 1))
    torch.manual_seed(0)
    trained = randomize(WTConvNeXt(**config, drop_path_rate=0.5, drop_rate=0.3), 7).train()
    plain = WTConvNeXt(**config)
    assert list(plain.state_dict()) == list(trained.state_dict())
    plain.load_state_dict(trained.state_dict())
    path = tmp_path / "dp.onnx"
    export_onnx(trained, path, input_shape=(1, 2, 32, 32))
    assert trained.training  # the export worked on a copy
    result = validate_onnx(path, plain.eval(), random_inputs([(2, 2, 32, 32)]), polygraphy_report=False)
    assert result.passed and max(result.errors) < 1e-5, result.summary()


# --------------------------------------------------------------------------------------------------------------
# A TensorRT-RTX engine with our plugin
# --------------------------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_unet_builds_with_tensorrt_rtx(unet, unet_export, rtx_plugin, tmp_path, build_times):
    """TensorRT-RTX's parser finds one plugin layer per WTConv2d; the output shapes it derives over a dynamic
    profile are PyTorch's; the plan carries every node's folded weights (test_tensorrt_rtx_build.build_and_check)."""
    from test_tensorrt_rtx_build import build_and_check

    path, _ = unet_export
    build_and_check(
        path,
        profile_text="input:1x3x16x16/2x3x32x32/4x3x64x48",
        precision="fp32",
        plugin=rtx_plugin["plugin"],
        pytorch_model=copy.deepcopy(unet),
        wtconv_layers=len(UNET_LAYERS),
        tmp_path=tmp_path,
        build_times=build_times,
        label=f"own U-Net ({type(unet.enc1).__module__}.WTConv2d) fp32, batch 1-4, 16-64 px",
    )


@pytest.mark.slow
def test_unet_through_the_python_api(unet, rtx_plugin, tmp_path, error_report):
    """What docs/onnx_export.md tells the owner of such a network: export, validate and build with
    ``import wtconv_trt``, the module in hand. The build takes its default profile from the recorded example size;
    the engine's manifest records the module's class, and validating the engine asks for the module, which
    validate_engine takes (here it stops at the GPU this machine does not have, never at the model)."""
    import json

    import wtconv_trt
    from wtconv_validate.engine import load_source_model

    path = tmp_path / "unet.onnx"
    exported = wtconv_trt.export_onnx(path, copy.deepcopy(unet), input_shape="1,3,32,32")
    assert exported.num_wtconv_nodes == len(UNET_LAYERS)
    checked = wtconv_trt.validate_onnx(path, copy.deepcopy(unet), inputs=random_inputs(UNET_INPUTS))
    error_report.add("own U-Net through wtconv_trt, ONNX Runtime vs its module, fp32", max(checked.errors))
    assert checked.passed and max(checked.errors) < 1e-5, checked.summary()

    built = wtconv_trt.build_engine(path, plugin=rtx_plugin["plugin"], backend="tensorrt-rtx", progress=False)
    manifest = json.loads(built.manifest_path.read_text())
    assert built.engine_path == tmp_path / "unet.fp32.engine" and built.engine_path.stat().st_size > 0
    assert manifest["build"]["plugin_layers"] == len(UNET_LAYERS)
    assert manifest["profiles"][0]["input"] == {"min": [1, 3, 32, 32], "opt": [8, 3, 32, 32], "max": [32, 3, 32, 32]}
    source = manifest["model"]["source"]
    assert source["source"] == "module" and source["module_class"].endswith(".UNet")
    with pytest.raises(ModelError, match=r"validate_engine\(ENGINE, module\)"):
        load_source_model(source)
    machine = wtconv_trt.doctor()
    if machine.cannot_run(built) is None:
        report = wtconv_trt.validate_engine(built.engine_path, copy.deepcopy(unet))
        assert report.passed, report.format()
    else:
        with pytest.raises(wtconv_trt.ConfigurationError, match="no GPU that can run"):
            wtconv_trt.validate_engine(built.engine_path, copy.deepcopy(unet), iterations=1)
