"""The Python API as a user meets it: ``import wtconv_trt`` is cheap and gives every job by name, each documented;
a job called from Python makes the checks and takes the defaults the command line does (the full table:
tests/test_api_bad_input.py), and returns typed results."""

from __future__ import annotations

import inspect
import subprocess
import sys

import pytest
from engine_helpers import fake_engine, tiny_onnx

import wtconv_trt
from wtconv_trt import api

JOBS = [
    "load_model",
    "export_onnx",
    "validate_onnx",
    "build_engine",
    "validate_engine",
    "benchmark_engine",
    "write_triton_repository",
    "write_serving_repository",
    "serve",
    "build_libraries",
    "doctor",
    "run_demo",
    "benchmark_layers",
]


def test_import_is_cheap_and_every_name_resolves():
    """In a fresh interpreter: every name of wtconv_trt.__all__ resolves, and neither torch, onnx, Polygraphy nor
    TensorRT has been imported (each job imports what it uses when it runs)."""
    code = (
        "import sys, wtconv_trt\n"
        "for name in wtconv_trt.__all__: getattr(wtconv_trt, name)\n"
        "heavy = ('torch', 'onnx', 'onnxruntime', 'polygraphy', 'tensorrt', 'tensorrt_rtx')\n"
        "print(sorted(m for m in heavy if m in sys.modules))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert done.stdout.strip() == "[]", done.stdout + done.stderr


def test_every_job_is_exported_and_documented():
    assert set(JOBS) <= set(wtconv_trt.__all__)
    for name in JOBS:
        job = getattr(wtconv_trt, name)
        assert callable(job) and job.__module__.startswith("wtconv_trt.api."), name
        assert job.__doc__ and len(job.__doc__.split()) > 15, f"{name} has no real docstring"
    assert issubclass(wtconv_trt.InputError, wtconv_trt.WtconvTrtError)


def test_every_public_function_and_class_of_the_api_has_a_docstring():
    import importlib
    import pkgutil

    missing = []
    for info in pkgutil.iter_modules(api.__path__):
        module = importlib.import_module(f"wtconv_trt.api.{info.name}")
        assert module.__doc__, module.__name__
        for name, value in vars(module).items():
            if name.startswith("_") or getattr(value, "__module__", None) != module.__name__:
                continue
            if inspect.isfunction(value) or inspect.isclass(value):
                if not inspect.getdoc(value):
                    missing.append(f"{module.__name__}.{name}")
    assert missing == [], missing


def test_job_options_are_keyword_only_after_the_files():
    """Options are named, never positional: a job's positional parameters are at most its files (and model)."""
    for name in JOBS:
        params = inspect.signature(getattr(wtconv_trt, name)).parameters.values()
        positional = [p.name for p in params if p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD]
        assert len(positional) <= 2, (name, positional)


def test_build_takes_the_exports_defaults_before_tensorrt(tmp_path):
    """The defaults the command line took in its own module, from Python: fp16 for an fp16 export, and batch
    1/8/32 at the export's size when height and width are dynamic (trt_engine.build.plan_build, no TensorRT)."""
    from trt_engine.build import BuildOptions, NoPluginNodesWarning, plan_build

    onnx = tiny_onnx(
        tmp_path / "m.onnx",
        dtype="float16",
        dims=("batch", 1, "height", "width"),
        metadata={"input_shape": "1,1,24,40"},
    )
    with pytest.warns(NoPluginNodesWarning, match="standard ONNX operators only"):
        plan = plan_build(BuildOptions(onnx=onnx))
    assert plan.opts.precision == "fp16" and plan.engine_path == tmp_path / "m.fp16.engine"
    assert plan.opts.shapes == ["input:1x1x24x40/8x1x24x40/32x1x24x40"]
    assert [p.inputs["input"].max for p in plan.profiles] == [(32, 1, 24, 40)]
    assert plan.notes[0].startswith("precision: fp16 (the export's") and plan.notes[1].startswith("profile: input:")
    with pytest.warns(NoPluginNodesWarning):
        given = plan_build(BuildOptions(onnx=onnx, precision="fp16", shapes=["input:1x1x8x8/2x1x8x8/4x1x8x8"]))
    assert given.notes == [] and given.opts.shapes == ["input:1x1x8x8/2x1x8x8/4x1x8x8"]
    assert not (tmp_path / "m.fp16.engine").exists()


@pytest.mark.usefixtures("no_tensorrt")
def test_build_from_python_refuses_what_the_command_line_refuses(tmp_path):
    """The checks that used to live in the build command, met by a direct call of trt_engine.build.build_engine."""
    from trt_engine.build import BuildOptions, build_engine
    from wtconv_core.errors import InputError

    onnx = tiny_onnx(
        tmp_path / "m.onnx", metadata={"source": "default", "input_shape": "1,1,32,32"}, dims=("batch", 1, "h", "w")
    )
    with pytest.raises(InputError, match="at least 16 for this model"):
        build_engine(BuildOptions(onnx=onnx, shapes=["input:1x1x8x8/1x1x8x8/1x1x8x8"]))
    with pytest.raises(InputError, match="elements, more than TensorRT's 2147483647"):
        build_engine(BuildOptions(onnx=onnx, shapes=["input:1x1x32x32/1x1x32x32/2097152x1x32x32"]))
    (tmp_path / "m.fp32.engine").write_bytes(b"earlier")
    with pytest.raises(InputError, match="already exists; pass force=True"):
        build_engine(BuildOptions(onnx=onnx))
    assert (tmp_path / "m.fp32.engine").read_bytes() == b"earlier"


def test_triton_repository_result(tmp_path):
    engine, _ = fake_engine(tmp_path, plugin=False)
    repo = wtconv_trt.write_triton_repository(engine, tmp_path / "repo", name="digits", instances=2)
    assert repo.name == "digits" and repo.max_batch_size == 32 and repo.config.is_file()
    assert repo.config.read_text() == repo.config_text and "count: 2" in repo.config_text
    assert repo.serve_script == tmp_path / "repo" / "serve.sh" and repo.serve_script.is_file()


def test_serving_plan_checks_everything_before_writing(tmp_path):
    pytest.importorskip("tritonclient.grpc")
    onnx = tiny_onnx(tmp_path / "m.onnx")
    from wtconv_trt.api import serving

    with pytest.raises(wtconv_trt.InputError, match="^concurrency: expected"):
        serving.plan_serving(onnx, tmp_path / "repo", concurrency=0)
    if not __import__("torch").cuda.is_available():  # with a GPU, torch-cuda may run here
        with pytest.raises(wtconv_trt.ConfigurationError, match="runtime torch-cuda cannot run here"):
            serving.plan_serving(onnx, tmp_path / "repo", runtime="torch-cuda")
    assert not (tmp_path / "repo").exists()
    # The load test is checked with the rest and kept in the plan, which the server's run takes as it is.
    plan = serving.plan_serving(
        onnx, tmp_path / "repo", serving=False, load_test=7, sweep=[16, 64], mixes=[[1, 64]], kill_backend=True
    )
    assert plan.load_test == serving.LoadTest(requests=7, sweep=(16, 64), mixes=((1, 64),), kill_backend=True)
    assert serving.plan_serving(onnx, tmp_path / "repo", serving=False).load_test is None
    with pytest.raises(wtconv_trt.InputError, match="^mixes: expected"):
        serving.plan_serving(onnx, tmp_path / "repo", serving=False, load_test=7, mixes=[[]])
    assert not (tmp_path / "repo").exists()
    written = wtconv_trt.write_serving_repository(onnx, tmp_path / "repo", runtime="onnxruntime")
    assert written.name == "m" and written.config.is_file() and 'backend: "python"' in written.config_text
