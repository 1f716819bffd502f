"""WTConvNeXt: the published state_dict keys and shapes, strict round trips, checkpoint formats."""

import pytest
import torch

from wtconv_core.errors import InputError, ModelError
from wtconv_torch.models import load_checkpoint, read_state_dict
from wtconv_torch.wtconvnext import WTCONVNEXT_CONFIGS, WTConvNeXt, create_wtconvnext, wtconvnext_tiny

# The published sizes, restated from the paper / BGU-CS-VIL/WTConv README (not imported from the code under
# test): depths, dims, and the parameter count in millions the README gives (30M, 54M, 93M).
PUBLISHED = {
    "wtconvnext_tiny": ((3, 3, 9, 3), (96, 192, 384, 768), 30),
    "wtconvnext_small": ((3, 3, 27, 3), (96, 192, 384, 768), 54),
    "wtconvnext_base": ((3, 3, 27, 3), (128, 256, 512, 1024), 93),
}
PUBLISHED_WT_LEVELS = (5, 4, 3, 2)
PUBLISHED_KERNEL = 5


def expected_state_shapes(depths, dims, wt_levels, kernel=5, in_chans=3, num_classes=1000, patch=4):
    """Every key and shape of timm 1.0.7's ConvNeXt (patch stem, channels-last MLP, NormMlpClassifierHead,
    layer scale) with each block's conv_dw a published WTConv2d, enumerated from the architecture's rules."""
    shapes = {
        "stem.0.weight": (dims[0], in_chans, patch, patch),
        "stem.0.bias": (dims[0],),
        "stem.1.weight": (dims[0],),
        "stem.1.bias": (dims[0],),
    }
    for i, (depth, dim) in enumerate(zip(depths, dims, strict=True)):
        if i > 0:  # LayerNorm2d(prev) + Conv2d(prev -> dim, 2x2, stride 2)
            prev = dims[i - 1]
            shapes.update(
                {
                    f"stages.{i}.downsample.0.weight": (prev,),
                    f"stages.{i}.downsample.0.bias": (prev,),
                    f"stages.{i}.downsample.1.weight": (dim, prev, 2, 2),
                    f"stages.{i}.downsample.1.bias": (dim,),
                }
            )
        for j in range(depth):
            p = f"stages.{i}.blocks.{j}."
            shapes.update(
                {
                    p + "gamma": (dim,),
                    p + "conv_dw.wt_filter": (4 * dim, 1, 2, 2),
                    p + "conv_dw.iwt_filter": (4 * dim, 1, 2, 2),
                    p + "conv_dw.base_conv.weight": (dim, 1, kernel, kernel),
                    p + "conv_dw.base_conv.bias": (dim,),
                    p + "conv_dw.base_scale.weight": (1, dim, 1, 1),
                    p + "norm.weight": (dim,),
                    p + "norm.bias": (dim,),
                    p + "mlp.fc1.weight": (4 * dim, dim),
                    p + "mlp.fc1.bias": (4 * dim,),
                    p + "mlp.fc2.weight": (dim, 4 * dim),
                    p + "mlp.fc2.bias": (dim,),
                }
            )
            for level in range(wt_levels[i]):
                shapes[p + f"conv_dw.wavelet_convs.{level}.weight"] = (4 * dim, 1, kernel, kernel)
                shapes[p + f"conv_dw.wavelet_scale.{level}.weight"] = (1, 4 * dim, 1, 1)
    shapes.update(
        {
            "head.norm.weight": (dims[-1],),
            "head.norm.bias": (dims[-1],),
            "head.fc.weight": (num_classes, dims[-1]),
            "head.fc.bias": (num_classes,),
        }
    )
    return shapes


@pytest.mark.parametrize("name", list(PUBLISHED))
def test_published_keys_shapes_and_strict_round_trip(name):
    depths, dims, millions = PUBLISHED[name]
    with torch.device("meta"):  # no memory, no init cost: base is 94M parameters
        model = create_wtconvnext(name)
        other = create_wtconvnext(name)
    sd = model.state_dict()
    assert {k: tuple(v.shape) for k, v in sd.items()} == expected_state_shapes(depths, dims, PUBLISHED_WT_LEVELS)
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    assert int(trainable / 1e6) == millions, trainable
    assert sum(d for d in depths) == sum(1 for k in sd if k.endswith("conv_dw.base_conv.weight"))
    load_checkpoint(other, sd)  # strict
    other.load_state_dict(sd, strict=True)


def test_tiny_runs_and_round_trips_through_files(tmp_path):
    """Real tensors: tiny forward at a small resolution; .pth (bare, {'state_dict'}, {'model'}, 'module.'
    prefix) and .safetensors checkpoints load strictly and reproduce the output exactly."""
    torch.manual_seed(0)
    model = wtconvnext_tiny(num_classes=10).eval()
    x = torch.randn(1, 3, 64, 64)
    with torch.no_grad():
        expected = model(x)
    assert expected.shape == (1, 10)
    sd = model.state_dict()
    from safetensors.torch import save_file

    save_file({k: v.contiguous() for k, v in sd.items()}, str(tmp_path / "m.safetensors"))
    torch.save({"state_dict": sd, "epoch": 3}, tmp_path / "wrapped.pth")
    torch.save({"model": {"module." + k: v for k, v in sd.items()}}, tmp_path / "ddp.pth")
    for path in ("m.safetensors", "wrapped.pth", "ddp.pth"):
        fresh = wtconvnext_tiny(num_classes=10).eval()
        load_checkpoint(fresh, tmp_path / path)
        with torch.no_grad():
            assert torch.equal(fresh(x), expected), path


def test_small_config_matches_rules_and_head_options():
    cfg = dict(in_chans=1, num_classes=0, depths=(1, 2), dims=(8, 12), wt_levels=(2, 1), kernel_sizes=3, patch_size=2)
    model = WTConvNeXt(**cfg)
    shapes = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    expected = expected_state_shapes((1, 2), (8, 12), (2, 1), kernel=3, in_chans=1, num_classes=0, patch=2)
    expected = {k: v for k, v in expected.items() if not k.startswith("head.fc")}  # num_classes=0: no fc
    assert shapes == expected
    assert model(torch.randn(2, 1, 16, 16)).shape == (2, 12)
    assert "gamma" not in str(list(WTConvNeXt(depths=(1,), dims=(4,), wt_levels=(1,), ls_init_value=None).state_dict()))


def test_configs_are_the_published_ones():
    for name, (depths, dims, _) in PUBLISHED.items():
        assert tuple(WTCONVNEXT_CONFIGS[name]["depths"]) == depths
        assert tuple(WTCONVNEXT_CONFIGS[name]["dims"]) == dims
    with torch.device("meta"):
        m = create_wtconvnext("wtconvnext_tiny")
    assert m.kernel_sizes == (PUBLISHED_KERNEL,) * 4 and m.wt_levels == PUBLISHED_WT_LEVELS
    assert all(mod.eps == 1e-6 for mod in m.modules() if isinstance(mod, torch.nn.LayerNorm))


def test_timm_registration_when_timm_is_importable():
    timm = pytest.importorskip("timm", reason="timm not installed (optional)")
    assert "wtconvnext_tiny" in timm.list_models("wtconvnext_*")
    model = timm.create_model("wtconvnext_tiny", num_classes=5, pretrained=False)
    assert model.num_classes == 5


def test_read_state_dict_rejects_non_mappings(tmp_path):
    torch.save([1, 2, 3], tmp_path / "list.pth")
    with pytest.raises(ModelError, match="expected a state_dict"):
        read_state_dict(tmp_path / "list.pth")
    with pytest.raises(InputError, match="does not exist"):
        read_state_dict(tmp_path / "absent.pth")


def test_fast_wtconv_checkpoint_names_load(tmp_path):
    """A checkpoint from the paper's fast_wtconv WTConv2d (base_weight, base_bias, base_scale, wt_weights.{i},
    wt_scales.{i}; no Haar filters) loads into the reference model and gives the same output."""
    import re

    torch.manual_seed(0)
    model = WTConvNeXt(in_chans=1, num_classes=4, depths=(1, 1), dims=(8, 16), wt_levels=(2, 1)).eval()
    fast = {}
    for key, value in model.state_dict().items():
        if key.endswith(("wt_filter", "iwt_filter")):
            continue
        key = re.sub(r"base_conv\.weight$", "base_weight", key)
        key = re.sub(r"base_conv\.bias$", "base_bias", key)
        key = re.sub(r"base_scale\.weight$", "base_scale", key)
        key = re.sub(r"wavelet_convs\.(\d+)\.weight$", r"wt_weights.\1", key)
        key = re.sub(r"wavelet_scale\.(\d+)\.weight$", r"wt_scales.\1", key)
        fast[key] = value
    assert "stages.0.blocks.0.conv_dw.wt_weights.1" in fast
    torch.save(fast, tmp_path / "fast.pth")
    fresh = WTConvNeXt(in_chans=1, num_classes=4, depths=(1, 1), dims=(8, 16), wt_levels=(2, 1)).eval()
    load_checkpoint(fresh, tmp_path / "fast.pth")
    x = torch.randn(2, 1, 16, 16)
    with torch.no_grad():
        assert torch.equal(fresh(x), model(x))
    # A single layer's state_dict (no prefix) converts too.
    from wtconv_torch.models import convert_fast_wtconv_state_dict
    from wtconv_torch.wtconv2d import WTConv2d

    layer = WTConv2d(2, 2, 3, wt_levels=1)
    converted = convert_fast_wtconv_state_dict(
        {
            "base_weight": torch.zeros(2, 1, 3, 3),
            "base_scale": torch.ones(1, 2, 1, 1),
            "wt_weights.0": torch.zeros(8, 1, 3, 3),
            "wt_scales.0": torch.ones(1, 8, 1, 1),
        },
        layer,
    )
    assert set(converted) == set(layer.state_dict()) - {"base_conv.bias"}
