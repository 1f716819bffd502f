"""Each command reads its ONNX file once (docs/design.md §1, "Each fact is read in one place"): every job plans from
the one wtconv_export.exported.ExportedModel, so the file is parsed by the onnx package exactly once per command.
Counted by wrapping every onnx entry point that parses a model (onnx.load and its aliases, from a file or from
bytes) and keeping the calls that parse the exported file (its path, or its bytes); a model the job derives in
memory (ONNX shape inference of the graph without its weights returns one) is not the file. ONNX Runtime opening
the file itself for its session is not the onnx package and is not counted."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

PARSERS = ("load", "load_model", "load_from_string", "load_model_from_string")


def is_the_file(argument, file: Path) -> bool:
    """Whether one parse's argument is the exported file: its path (any spelling) or its bytes."""
    if isinstance(argument, (str, os.PathLike)):
        return os.path.exists(argument) and os.path.samefile(argument, file)
    if isinstance(argument, bytes):
        return argument == file.read_bytes()
    return (
        hasattr(argument, "read") and getattr(argument, "name", None) is not None and is_the_file(argument.name, file)
    )


@pytest.fixture
def parses(monkeypatch):
    """parses(file) -> the parses of ``file`` made so far (the entry points' names), by every onnx entry point."""
    calls: list[tuple[str, object]] = []
    for name in PARSERS:
        original = getattr(onnx, name)

        def counting(argument, *args, _original=original, _name=name, **kwargs):
            calls.append((_name, argument))
            return _original(argument, *args, **kwargs)

        monkeypatch.setattr(onnx, name, counting)
    return lambda file: [name for name, argument in calls if is_the_file(argument, Path(file))]


@pytest.fixture(scope="module")
def export(shipped_export):
    return shipped_export("plugin", "fp32")


def test_the_counter_sees_a_parse_of_the_file_and_no_other(parses, export):
    onnx.load(str(export))
    onnx.load_from_string(Path(export).read_bytes())
    onnx.load_from_string(onnx.helper.make_model(onnx.helper.make_graph([], "other", [], [])).SerializeToString())
    assert parses(export) == ["load", "load_from_string"]


def test_validate_reads_the_file_once(parses, export):
    import wtconv_trt

    result = wtconv_trt.validate_onnx(export, input_shape="2,1,32,32")
    assert result.passed
    assert len(parses(export)) == 1, parses(export)


def test_build_plans_from_one_read(parses, shipped_export, tmp_path):
    from trt_engine.build import BuildOptions, NoPluginNodesWarning, plan_build

    standard = shipped_export("standard", "fp32")  # no plugin needed: the plan is made without a plugin library
    with pytest.warns(NoPluginNodesWarning):
        plan = plan_build(BuildOptions(onnx=str(standard), engine=str(tmp_path / "m.engine")))
    assert plan.info.wtconv_nodes == 0 and plan.profiles
    assert len(parses(standard)) == 1, parses(standard)


def test_doctor_reads_the_file_once(parses, export):
    import wtconv_trt

    wtconv_trt.doctor().cannot_build(export)
    assert len(parses(export)) == 1, parses(export)


def test_triton_repo_for_onnxruntime_reads_the_file_once(parses, export, tmp_path, ort_library):
    import wtconv_trt

    wtconv_trt.write_onnxruntime_repository(export, tmp_path / "repo", name="digits", ort_library=ort_library)
    assert len(parses(export)) == 1, parses(export)


def test_serve_plans_from_one_read(parses, export, tmp_path):
    from wtconv_trt.api.serving import plan_serving

    plan = plan_serving(
        export,
        tmp_path / "repo",
        runtime="onnxruntime",
        device="cpu",
        http_port=0,
        grpc_port=0,
        metrics_port=0,
    )
    assert plan.runtime_here == "onnxruntime"
    assert len(parses(export)) == 1, parses(export)


def test_serve_write_only_reads_the_file_once(parses, export, tmp_path):
    import wtconv_trt

    wtconv_trt.write_serving_repository(export, tmp_path / "repo", runtime="auto")
    assert len(parses(export)) == 1, parses(export)


def test_the_runner_inside_triton_reads_the_file_once(parses, export):
    import numpy as np

    from wtconv_serving.runners.runtimes import load_runtime, make_runner

    runner = make_runner(load_runtime("onnxruntime", onnx_path=export, ort_device="cpu"))
    assert len(parses(export)) == 1, parses(export)
    assert runner(np.zeros((2, 1, 32, 32), np.float32)).shape == (2, 10)
