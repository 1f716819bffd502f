"""Build decisions made without TensorRT: typing mode per TensorRT major, ONNX checks, profiles, source model,
progress display (trt_engine.build)."""

import io
import re
import warnings
from pathlib import Path

import pytest
from engine_helpers import tiny_onnx

from trt_engine.build import (
    NoPluginNodesWarning,
    check_plugin_need,
    decide_typing,
    default_engine_path,
    plan_profiles,
)
from trt_engine.progress_board import ProgressBoard
from wtconv_core.errors import ConfigurationError, InputError
from wtconv_export.exported import ExportedModel, parse_source_model, source_from_metadata

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(
    "major, precision, onnx_dtype, expected",
    [
        # TensorRT 10: fp16 from an fp32 export = weakly typed + BuilderFlag.FP16; an fp16 export stays strongly typed.
        (10, "fp32", "float32", (True, False)),
        (10, "fp16", "float32", (False, True)),
        (10, "fp16", "float16", (True, False)),
        # TensorRT 11: always strongly typed, never the (removed) FP16 flag.
        (11, "fp32", "float32", (True, False)),
        (11, "fp16", "float16", (True, False)),
        (12, "fp16", "float16", (True, False)),
    ],
)
def test_decide_typing(major, precision, onnx_dtype, expected):
    assert decide_typing(major, precision, onnx_dtype) == expected


def test_decide_typing_errors():
    with pytest.raises(ValueError, match="TensorRT 11 has no FP16 builder flag.*export --precision fp16"):
        decide_typing(11, "fp16", "float32")
    for major in (10, 11):
        with pytest.raises(ValueError, match="precision fp32 was asked but the ONNX model is fp16"):
            decide_typing(major, "fp32", "float16")
    with pytest.raises(ValueError, match="precision must be one of"):
        decide_typing(10, "int8", "float32")
    with pytest.raises(ValueError, match="input is float64"):
        decide_typing(10, "fp32", "float64")
    with pytest.raises(ConfigurationError, match="not supported"):
        decide_typing(8, "fp32", "float32")


def _enum_block(header: Path, enum: str) -> str:
    text = header.read_text()
    start = text.index(f"enum class {enum}")
    return text[start : text.index("};", start)]


def test_typing_rule_matches_the_tensorrt_headers():
    """The facts decide_typing relies on, read from the TensorRT 10.16 and 11.1 headers (outside the repository,
    see docs/design.md §5; skipped when they are not there)."""
    from conftest import TENSORRT_HEADERS  # the header trees beside the checkout

    h10, h11 = ROOT / ".trt/v10.16/include/NvInfer.h", ROOT / ".trt/v11.1/include/NvInfer.h"
    if not (h10.is_file() and h11.is_file()):
        h10, h11 = TENSORRT_HEADERS / "10.16/include/NvInfer.h", TENSORRT_HEADERS / "11.1/include/NvInfer.h"
    if not (h10.is_file() and h11.is_file()):
        pytest.skip(f"TensorRT 10.16 and 11.1 headers found neither in .trt/ nor in {TENSORRT_HEADERS}")
    assert re.search(r"\bkFP16\b", _enum_block(h10, "BuilderFlag"))
    assert not re.search(r"\bkFP16\b", _enum_block(h11, "BuilderFlag"))
    flags11 = _enum_block(h11, "NetworkDefinitionCreationFlag")
    assert "Strongly typed mode is always enabled" in flags11
    assert re.search(r"kSTRONGLY_TYPED\s*=\s*1", _enum_block(h10, "NetworkDefinitionCreationFlag"))


def test_exported_model(tmp_path):
    path = tiny_onnx(tmp_path / "m.onnx", dtype="float16", wtconv_nodes=2, metadata={"source": "default"})
    info = ExportedModel.read(path)
    assert info.input_dims == {"input": (-1, 1, 8, 8)}
    assert info.input.fixed_dims == [None, 1, 8, 8]
    assert info.input_dtype == "float16" and info.precision == "fp16"
    assert info.wtconv_nodes == 2
    assert [t.name for t in info.outputs] == ["output"]
    assert info.source == source_from_metadata(info.metadata) == {"source": "default"}


def test_exported_model_errors(tmp_path):
    with pytest.raises(InputError, match="wtconv-trt export"):
        ExportedModel.read(tmp_path / "missing.onnx")
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"\x00\x01garbage")
    with pytest.raises(ValueError, match="cannot read .* as an ONNX model"):
        ExportedModel.read(bad)
    engine = tmp_path / "m.engine"
    engine.write_bytes(b"\x00\x01an engine")
    with pytest.raises(InputError, match="is a TensorRT engine, not an ONNX model"):
        ExportedModel.read(engine)


def test_plugin_need(tmp_path):
    no_nodes = ExportedModel.read(tiny_onnx(tmp_path / "a.onnx"))
    with pytest.warns(NoPluginNodesWarning, match="standard ONNX operators only"):
        check_plugin_need(no_nodes, None)
    with_nodes = ExportedModel.read(tiny_onnx(tmp_path / "b.onnx", wtconv_nodes=3))
    with pytest.raises(ValueError, match="3 WTConv2d nodes, which need our TensorRT plugin: pass --plugin"):
        check_plugin_need(with_nodes, None)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_plugin_need(with_nodes, "lib.so")


def test_plan_profiles(tmp_path):
    inputs = ExportedModel.read(tiny_onnx(tmp_path / "a.onnx")).input_dims
    [default] = plan_profiles([], inputs)
    assert default.inputs["input"].max == (32, 1, 8, 8)
    two = plan_profiles(["1x1x8x8/2x1x8x8/4x1x8x8", "input:4x1x8x8/16x1x8x8/64x1x8x8"], inputs)
    assert [p.inputs["input"].max[0] for p in two] == [4, 64]
    with pytest.raises(ValueError, match="fixed at 8"):
        plan_profiles(["1x1x16x16/2x1x16x16/4x1x16x16"], inputs)


def test_metadata_prefix_agrees_with_the_exporter():
    onnx_export = pytest.importorskip("wtconv_export.onnx_export")
    from wtconv_export import exported

    assert exported.METADATA_PREFIX == onnx_export.METADATA_PREFIX


def test_source_model_specs(tmp_path):
    assert parse_source_model("default") == {"source": "default", "weights": "shipped"}
    spec = parse_source_model("wtconvnext_tiny:ckpt.pth")
    assert spec["source"] == "wtconvnext_tiny" and spec["weights"].startswith("checkpoint:")
    assert Path(spec["weights"][len("checkpoint:") :]).is_absolute()
    assert parse_source_model('{"source": "default"}') == {"source": "default"}
    assert parse_source_model(None) is None
    with pytest.raises(ValueError, match="give the checkpoint too"):
        parse_source_model("wtconvnext_tiny")
    with pytest.raises(ValueError, match="expected 'default' or ARCH:CHECKPOINT"):
        parse_source_model("resnet50:x.pth")
    assert source_from_metadata({}) is None
    assert source_from_metadata({"ops": "plugin", "source": "wtconvnext_tiny", "weights": "random:3"}) == {
        "source": "wtconvnext_tiny",
        "weights": "random:3",
    }


def test_default_engine_path():
    assert default_engine_path("out/model.onnx", "fp16") == Path("out/model.fp16.engine")
    # A name that already says the precision is not told it twice (tiny_fp16.fp16.engine).
    assert default_engine_path("tiny_fp16.onnx", "fp16") == Path("tiny_fp16.engine")
    assert default_engine_path("tiny-FP32.onnx", "fp32") == Path("tiny-FP32.engine")
    assert default_engine_path("tiny_fp16.onnx", "fp32") == Path("tiny_fp16.fp32.engine")
    assert default_engine_path("notfp16.onnx", "fp16") == Path("notfp16.fp16.engine")


def test_progress_board_log_mode():
    stream = io.StringIO()
    board = ProgressBoard(stream, interactive=False)
    board.phase_start("Building engine", None, 3)
    board.phase_start("Tactic search", "Building engine", 10)
    for step in range(10):
        assert board.step_complete("Tactic search", step) is True
    board.phase_finish("Tactic search")
    board.phase_finish("Building engine")
    lines = stream.getvalue().splitlines()
    assert len(lines) == 1 and lines[0].startswith("[" + "=" * ProgressBoard.WIDTH + "] Building engine")


def test_progress_board_terminal_mode_and_cancel():
    stream = io.StringIO()
    board = ProgressBoard(stream, interactive=True)
    board.phase_start("Build", None, 4)
    board.phase_start("Layers", "Build", 2)
    board.step_complete("Layers", 1)
    assert board.lines() == ["[" + "-" * 20 + "] Build 0/4", "  [" + "=" * 10 + "-" * 10 + "] Layers 1/2"]
    assert "\x1b[2K" in stream.getvalue()
    board.cancelled = True  # what a Ctrl-C inside a callback sets
    assert board.step_complete("Layers", 2) is False
    board.close()
    assert board.lines() == []
