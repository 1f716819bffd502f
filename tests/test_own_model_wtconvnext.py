"""A fine-tuned WTConvNeXt: num_classes and in_chans read from a torch.save'd checkpoint (or given, and checked
against it), recorded in the ONNX metadata, and the model rebuilt from that metadata for validation.

The slow tests take a 10-class WTConvNeXt-T through what a user types: ``wtconv-trt export --arch wtconvnext_tiny
--checkpoint ckpt10.pth`` (no class count given), ``wtconv-trt validate`` (the model rebuilt from the metadata, run
against ONNX Runtime), and a TensorRT-RTX engine build with our plugin.
"""

import copy

import pytest
import torch

from wtconv_core.errors import InputError, ModelError
from wtconv_export.onnx_models import build_model, build_model_from_metadata
from wtconv_torch.models import wtconvnext_options_from_state_dict
from wtconv_torch.wtconvnext import WTConvNeXt, create_wtconvnext


def assert_same_state(a: torch.nn.Module, b: torch.nn.Module) -> None:
    sa, sb = a.state_dict(), b.state_dict()
    assert list(sa) == list(sb)
    for name in sa:
        assert torch.equal(sa[name], sb[name]), name


@pytest.fixture(scope="module")
def gray_checkpoint(tmp_path_factory):
    """A torch.save'd WTConvNeXt-T state_dict with a 10-class head and a 1-channel stem (trained with stochastic
    depth: the rate leaves no trace in the checkpoint)."""
    torch.manual_seed(0)
    model = create_wtconvnext("wtconvnext_tiny", num_classes=10, in_chans=1, drop_path_rate=0.1)
    path = tmp_path_factory.mktemp("ckpt") / "tiny10_gray.pth"
    torch.save(model.state_dict(), path)
    return path, model


def test_num_classes_and_in_chans_come_from_the_checkpoint(gray_checkpoint):
    path, saved = gray_checkpoint
    model, description = build_model("wtconvnext_tiny", checkpoint=str(path))
    assert (model.num_classes, model.in_chans) == (10, 1)
    assert model.head.fc.out_features == 10 and model.stem[0].in_channels == 1
    assert_same_state(model, saved)
    assert not model.training
    with torch.no_grad():
        assert tuple(model(torch.randn(2, 1, 32, 32)).shape) == (2, 10)
    assert description["num_classes"] == "10" and description["in_chans"] == "1"
    assert description["input_shape"] == "1,1,224,224"
    assert description["weights"] == f"checkpoint:{path}"


def test_given_options_must_agree_with_the_checkpoint(gray_checkpoint):
    path, saved = gray_checkpoint
    model, _ = build_model("wtconvnext_tiny", checkpoint=str(path), num_classes=10, in_chans=1)
    assert_same_state(model, saved)
    with pytest.raises(
        InputError, match=r"num_classes 1000 was asked for, but checkpoint .*head.fc.weight has 10 rows"
    ):
        build_model("wtconvnext_tiny", checkpoint=str(path), num_classes=1000)
    with pytest.raises(InputError, match=r"in_chans 3 was asked for, but checkpoint .*stem.0.weight takes 1 channels"):
        build_model("wtconvnext_tiny", checkpoint=str(path), in_chans=3)


def test_the_metadata_rebuilds_the_model(gray_checkpoint):
    path, saved = gray_checkpoint
    _, description = build_model("wtconvnext_tiny", checkpoint=str(path))
    rebuilt, _ = build_model_from_metadata(description)
    assert_same_state(rebuilt, saved)

    source, description = build_model("wtconvnext_tiny", random_weights=True, seed=3, num_classes=10, in_chans=2)
    recorded = (description["num_classes"], description["in_chans"], description["input_shape"])
    assert recorded == ("10", "2", "1,2,224,224")
    rebuilt, _ = build_model_from_metadata(description)
    assert (rebuilt.num_classes, rebuilt.in_chans) == (10, 2)
    assert_same_state(rebuilt, source)
    # An export made before these keys were recorded: the published defaults.
    older, _ = build_model_from_metadata({"source": "wtconvnext_tiny", "weights": "random:3"})
    assert (older.num_classes, older.in_chans) == (1000, 3)


def test_options_read_from_a_state_dict():
    def options(**config):
        return wtconvnext_options_from_state_dict(
            WTConvNeXt(depths=(1,), dims=(8,), wt_levels=1, **config).state_dict()
        )

    assert options(num_classes=7, in_chans=5) == {"num_classes": 7, "in_chans": 5}
    assert options(num_classes=0, in_chans=2) == {"num_classes": 0, "in_chans": 2}  # no classifier: features
    assert wtconvnext_options_from_state_dict({"other.weight": torch.zeros(2, 2)}) == {}


@pytest.mark.parametrize(
    "kwargs,pattern",
    [
        (dict(num_classes=-1), r"num_classes must be an integer >= 0, got -1"),
        (dict(num_classes=True), r"num_classes must be an integer >= 0, got True"),
        (dict(in_chans="3"), r"in_chans must be an integer >= 1, got '3'"),
        (dict(in_chans=0), r"in_chans must be an integer >= 1, got 0"),
    ],
)
def test_bad_options_are_refused(kwargs, pattern):
    with pytest.raises(InputError, match=pattern):
        build_model("wtconvnext_tiny", random_weights=True, **kwargs)


def test_options_do_not_apply_to_the_default_model_and_bad_metadata_is_named():
    with pytest.raises(InputError, match="num_classes=N / in_chans=N need arch=ARCH"):
        build_model("default", num_classes=10)
    with pytest.raises(ModelError, match=r"wtconv_trt.num_classes metadata 'ten' is not an integer"):
        build_model_from_metadata({"source": "wtconvnext_tiny", "weights": "random:0", "num_classes": "ten"})


def test_the_engine_side_keeps_the_recorded_options():
    """What the build reads from an export: the architecture its profiles are checked against has the recorded
    input channels and classes, and the manifest's source record keeps them for validate --engine."""
    from wtconv_export.exported import source_from_metadata
    from wtconv_export.model_checks import architecture_of, check_input_shape

    metadata = {"source": "wtconvnext_tiny", "weights": "random:5", "input_shape": "1,1,64,64"}
    metadata.update(num_classes="10", in_chans="1", precision="fp32", ops="plugin")
    model = architecture_of(metadata)
    assert (model.in_chans, model.num_classes) == (1, 10)
    check_input_shape(model, (8, 1, 64, 64), "--shapes input opt", limit_memory=False)
    record = source_from_metadata(metadata)
    assert record == {k: metadata[k] for k in ("source", "weights", "input_shape", "num_classes", "in_chans")}
    rebuilt, _ = build_model_from_metadata(record)
    assert (rebuilt.in_chans, rebuilt.num_classes) == (1, 10)


def test_a_moved_checkpoint_is_named_as_the_metadata_s(tmp_path):
    moved = tmp_path / "gone" / "ckpt10.pth"
    with pytest.raises(InputError) as error:
        build_model_from_metadata({"source": "wtconvnext_tiny", "weights": f"checkpoint:{moved}"})
    message = str(error.value)
    assert f"{moved} (recorded in its metadata" in message
    assert message.endswith("give it with arch=wtconvnext_tiny checkpoint=NEWPATH")


# --------------------------------------------------------------------------------------------------------------
# A 10-class WTConvNeXt-T: export, validate and engine build, as a user runs them
# --------------------------------------------------------------------------------------------------------------

EXPORT_SHAPE = "1,3,64,64"


@pytest.fixture(scope="module")
def tiny10(tmp_path_factory):
    """(checkpoint path, the fine-tuned model, its ONNX export made by the command line)."""
    from wtconv_trt.cli import main as cli_main

    folder = tmp_path_factory.mktemp("tiny10")
    torch.manual_seed(1)
    model = create_wtconvnext("wtconvnext_tiny", num_classes=10)
    with torch.no_grad():  # layer scales large enough that every block shows in the logits
        for name, param in model.named_parameters():
            if name.endswith("gamma"):
                param.fill_(0.5)
    checkpoint = folder / "ckpt10.pth"
    torch.save(model.state_dict(), checkpoint)
    onnx_path = folder / "tiny10.onnx"
    argv = ["export", "-o", str(onnx_path), "--arch", "wtconvnext_tiny", "--checkpoint", str(checkpoint)]
    assert cli_main(argv + ["--input-shape", EXPORT_SHAPE]) == 0
    return checkpoint, model.eval(), onnx_path


@pytest.mark.slow
def test_fine_tuned_tiny_exports_with_its_head(tiny10):
    import onnx

    from wtconv_export.exported import metadata_of
    from wtconv_libs.contract import count_wtconv_nodes

    _, _, onnx_path = tiny10
    proto = onnx.load(str(onnx_path))
    assert count_wtconv_nodes(proto) == 18
    output = [d.dim_param or d.dim_value for d in proto.graph.output[0].type.tensor_type.shape.dim]
    assert output == ["batch", 10]
    metadata = metadata_of(proto)
    assert (metadata["source"], metadata["num_classes"], metadata["in_chans"]) == ("wtconvnext_tiny", "10", "3")


@pytest.mark.slow
def test_fine_tuned_tiny_validates_from_its_metadata(tiny10, capsys, error_report):
    """``wtconv-trt validate tiny10.onnx``: the model rebuilt from the metadata alone; and the same comparison from
    Python against the user's own module."""
    from wtconv_trt.cli import main as cli_main
    from wtconv_validate.ort import validate_onnx

    _, model, onnx_path = tiny10
    capsys.readouterr()
    assert cli_main(["validate", str(onnx_path)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("PASSED") and "per input (1, 3, 64, 64)" in out, out  # at the export's size
    inputs = [torch.randn(2, 3, 64, 80, generator=torch.Generator().manual_seed(2)).numpy()]
    result = validate_onnx(onnx_path, copy.deepcopy(model), inputs, polygraphy_report=False)
    error_report.add("10-class WTConvNeXt-T, ONNX Runtime vs its module, fp32", max(result.errors))
    assert result.passed and max(result.errors) < 1e-5, result.summary()


def cli_build_and_check(onnx_path, plugin, engine, model, shapes=None, layers=18):
    """``wtconv-trt build ONNX --backend tensorrt-rtx --plugin PLUGIN [--shapes ...]`` as a user types it; then
    the manifest (plugin layers, the source record that rebuilds ``model``) and the output shapes TensorRT-RTX's
    parser derives through every plugin layer against PyTorch's for the profile's shapes (meta device). Returns
    the manifest."""
    import json

    from test_tensorrt_rtx_build import torch_output_shape

    from trt_engine import tensorrt_api
    from wtconv_trt.cli import main as cli_main
    from wtconv_validate.engine import load_source_model

    argv = ["build", str(onnx_path), "--backend", "tensorrt-rtx", "--plugin", str(plugin), "-o", str(engine)]
    assert cli_main(argv + (["--shapes", shapes] if shapes else [])) == 0
    manifest = json.loads(engine.with_name(engine.name + ".json").read_text())
    assert manifest["tensorrt"]["backend"] == "tensorrt-rtx" and manifest["build"]["plugin_layers"] == layers
    # The manifest alone rebuilds the user's model (validate --engine's reference): same head, stem and weights.
    rebuilt = load_source_model(manifest["model"]["source"])
    assert (rebuilt.num_classes, rebuilt.in_chans) == (model.num_classes, model.in_chans)
    assert_same_state(rebuilt.cpu(), model)
    network = tensorrt_api.NetworkBuilder(strongly_typed=True)
    network.parse(onnx_path)
    assert network.plugin_layer_count() == layers
    profile = manifest["profiles"][0]["input"]
    for which in ("min", "opt", "max"):
        dims = tuple(profile[which])
        assert dims[1] == model.in_chans, (which, dims)
        derived = network.derived_output_shapes({"input": dims})
        assert derived == {"output": torch_output_shape(copy.deepcopy(model), dims)}, (which, dims)
    return manifest


@pytest.mark.slow
def test_fine_tuned_tiny_builds_with_tensorrt_rtx(tiny10, rtx_plugin, tmp_path):
    """``wtconv-trt build`` of the 10-class export: a dynamic batch and resolution profile, (B, 10) outputs."""
    _, model, onnx_path = tiny10
    manifest = cli_build_and_check(
        onnx_path,
        rtx_plugin["plugin"],
        tmp_path / "tiny10.engine",
        model,
        shapes="input:1x3x64x64/2x3x128x128/4x3x224x224",
    )
    assert manifest["io"][1]["shape"] == [-1, 10]


# --------------------------------------------------------------------------------------------------------------
# A one-channel 10-class WTConvNeXt-T given on the command line (--num-classes, --in-chans): export, validate, build
# --------------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def gray10(tmp_path_factory):
    """(the model, its export by ``wtconv-trt export --arch wtconvnext_tiny --random-weights --num-classes 10
    --in-chans 1``)."""
    from wtconv_trt.cli import main as cli_main

    onnx_path = tmp_path_factory.mktemp("gray10") / "gray10.onnx"
    argv = ["export", "-o", str(onnx_path), "--arch", "wtconvnext_tiny", "--random-weights", "--seed", "5"]
    assert cli_main(argv + ["--num-classes", "10", "--in-chans", "1", "--input-shape", "1,1,64,64"]) == 0
    model, _ = build_model("wtconvnext_tiny", random_weights=True, seed=5, num_classes=10, in_chans=1)
    return model, onnx_path


@pytest.mark.slow
def test_gray_tiny_exports_and_validates_from_the_command_line(gray10, capsys):
    import onnx

    from wtconv_export.exported import metadata_of
    from wtconv_trt.cli import main as cli_main

    model, onnx_path = gray10
    proto = onnx.load(str(onnx_path), load_external_data=False)
    metadata = metadata_of(proto)
    assert (metadata["num_classes"], metadata["in_chans"], metadata["input_shape"]) == ("10", "1", "1,1,64,64")
    dims = [d.dim_param or d.dim_value for d in proto.graph.input[0].type.tensor_type.shape.dim]
    assert dims == ["batch", 1, "height", "width"]
    capsys.readouterr()
    assert cli_main(["validate", str(onnx_path)]) == 0  # the 10-class, one-channel model rebuilt from the metadata
    assert capsys.readouterr().out.startswith("PASSED")
    # A shape of the published model's three channels is refused naming the model's one.
    assert cli_main(["validate", str(onnx_path), "--input-shape", "1,3,64,64"]) == 2
    assert "the model takes 1 input channel (dimension 1), not 3" in capsys.readouterr().err


@pytest.mark.slow
def test_gray_tiny_builds_with_tensorrt_rtx_from_the_command_line(gray10, rtx_plugin, tmp_path, capsys):
    """No --shapes: the default profile at the export's one-channel size (the architecture the build checks the
    profile against is rebuilt with the recorded in_chans); a three-channel profile is refused before TensorRT."""
    from wtconv_trt.cli import main as cli_main

    model, onnx_path = gray10
    manifest = cli_build_and_check(onnx_path, rtx_plugin["plugin"], tmp_path / "gray10.engine", model)
    assert manifest["io"][1]["shape"] == [-1, 10]
    assert manifest["profiles"][0]["input"]["opt"] == [8, 1, 64, 64]
    capsys.readouterr()
    argv = ["build", str(onnx_path), "--backend", "tensorrt-rtx", "--plugin", str(rtx_plugin["plugin"])]
    argv += ["-o", str(tmp_path / "rgb.engine"), "--shapes", "input:1x3x64x64/1x3x64x64/1x3x64x64"]
    assert cli_main(argv) == 2
    assert "fixed at 1" in capsys.readouterr().err  # the export's input has one channel
