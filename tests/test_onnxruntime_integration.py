"""libwtconv_ort.so wherever wtconv-trt runs ONNX Runtime: doctor lists it (and ONNX Runtime's versions and
providers), ``doctor --ort-library`` prints a path ONNX Runtime loads, build-libs builds and reports it, validate runs
plugin exports on it (the onnxruntime-extensions Python op only as the fallback, said once per process), and
``--device cuda`` runs on onnxruntime-gpu's CUDA execution provider or is refused in one line.

Oracles: ONNX Runtime itself (its version and providers; a session that registers the printed path and runs the
export, against the PyTorch model), the package's VERSION, and the Python-op path made to fail when the native one
must be taken. A machine without the library is simulated by an empty lookup (no WTCONV_ORT_LIB, an empty per-user
cache, no package or build-tree copy); one without onnxruntime-gpu is what the CPU wheel is, and a GPU one is
simulated only where the check comes before any session is made.
"""

from __future__ import annotations

import logging
import shutil

import numpy as np
import onnxruntime
import pytest
import torch
from conftest import REPO, ort_library_skip_reason

import wtconv_trt
from wtconv_core.errors import ConfigurationError
from wtconv_core.version import __version__
from wtconv_libs import build, lookup
from wtconv_ort import session
from wtconv_ort.execution import plan_ort_execution
from wtconv_trt import cli

NATIVE_CPU = "ONNX Runtime CPU EP, 5 WTConv2d nodes on libwtconv_ort.so"
PYTHON_OP = "ONNX Runtime CPU EP, 5 WTConv2d nodes on the onnxruntime-extensions Python op (libwtconv_ort.so not found)"
FALLBACK = "libwtconv_ort.so not found"


@pytest.fixture(scope="module")
def exports(tmp_path_factory):
    """The shipped model exported as a plugin export (fp32, fp16) and a standard-op one, with the model itself."""
    out = tmp_path_factory.mktemp("exports")
    paths = {
        "plugin": wtconv_trt.export_onnx(out / "digits.onnx").path,
        "plugin_fp16": wtconv_trt.export_onnx(out / "digits_fp16.onnx", precision="fp16").path,
        "standard": wtconv_trt.export_onnx(out / "digits_std.onnx", ops="standard").path,
    }
    model, _ = wtconv_trt.load_model()
    return paths, model


def no_library_anywhere(monkeypatch, tmp_path) -> None:
    """This process finds no libwtconv_ort.so (as on a machine where it was never built), and has not yet said so."""
    monkeypatch.delenv(lookup.ENV_VARS["ort"], raising=False)
    monkeypatch.setenv(lookup.ENV_CACHE, str(tmp_path / "empty-cache"))
    monkeypatch.setattr(lookup, "package_lib_dir", lambda: tmp_path / "no-package-lib")
    monkeypatch.setattr(lookup, "build_tree_dir", lambda: tmp_path / "no-build-tree")
    monkeypatch.setattr(session, "_fallback_said", False)
    assert lookup.ort_library() is None


def cpu_only_onnxruntime(monkeypatch) -> None:
    """onnxruntime's providers as the CPU wheel reports them, whatever is installed."""
    monkeypatch.setattr(onnxruntime, "get_available_providers", lambda: ["CPUExecutionProvider"])


def one_error_line(capsys, argv) -> str:
    capsys.readouterr()
    assert cli.main(argv) == 2, argv
    out, err = capsys.readouterr()
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in out + err, err
    return lines[0]


# --- doctor and ort_library


def test_doctor_lists_the_library_and_onnx_runtime(ort_library, monkeypatch, capsys):
    monkeypatch.setenv(lookup.ENV_VARS["ort"], str(ort_library))
    capsys.readouterr()
    assert cli.main(["doctor"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "  ort (libwtconv_ort.so):" in lines
    [row] = [line for line in lines if "environment WTCONV_ORT_LIB" in line]
    ops = "CPU and CUDA ops" if lookup.ort_library_info(ort_library)["cuda"] == "yes" else "CPU op only"
    assert row.strip().startswith("[found]") and str(ort_library) in row
    assert f"({ops}, version {__version__}, ONNX Runtime C API 17+)" in row
    [versions] = [line for line in lines if line.strip().startswith("[yes] ONNX Runtime ")]
    assert f"imports as onnxruntime {onnxruntime.__version__}" in versions
    assert all(provider in versions for provider in onnxruntime.get_available_providers())
    assert any(
        f"[yes] run plugin exports in ONNX Runtime on the CPU (validate, serve, demo): WTConv2d nodes on the native op "
        f"{ort_library}" in line
        for line in lines
    )
    [gpu] = [line for line in lines if "run plugin exports in ONNX Runtime on a GPU" in line]
    if "CUDAExecutionProvider" not in onnxruntime.get_available_providers():
        assert gpu.strip().startswith("[no ]") and "no CUDAExecutionProvider" in gpu
    survey = wtconv_trt.doctor().survey
    assert survey.ort_library == ort_library and survey.onnxruntime == onnxruntime.__version__


def test_doctor_without_the_library(monkeypatch, tmp_path, capsys):
    """Nothing found: doctor says the Python op runs the nodes; --ort-library and the API refuse in one line."""
    no_library_anywhere(monkeypatch, tmp_path)
    capsys.readouterr()
    assert cli.main(["doctor"]) == 0
    out = capsys.readouterr().out
    assert (
        "[no ] run plugin exports in ONNX Runtime on the CPU (validate, serve, demo): WTConv2d nodes through the "
        "onnxruntime-extensions Python op" in out
    )
    line = one_error_line(capsys, ["doctor", "--ort-library"])
    command = "wtconv-trt build-libs" + ("" if build.cuda_gpu_count() else " --no-cuda")  # the CUDA driver's count
    assert line.startswith(f"wtconv-trt doctor: error: libwtconv_ort.so is not built: '{command}' builds")
    with pytest.raises(ConfigurationError) as error:
        wtconv_trt.ort_library()
    assert line.endswith(str(error.value))
    # A path the user named is never passed over for another one.
    monkeypatch.setenv(lookup.ENV_VARS["ort"], str(tmp_path / "nowhere.so"))
    assert f"WTCONV_ORT_LIB={tmp_path / 'nowhere.so'}: no such file" in one_error_line(
        capsys, ["doctor", "--ort-library"]
    )


def test_doctor_ort_library_prints_a_path_onnx_runtime_loads(ort_library, exports, monkeypatch, capsys):
    """The path alone on stdout, as anyone's code passes it to register_custom_ops_library: a session made so runs
    the plugin export and agrees with PyTorch."""
    monkeypatch.setenv(lookup.ENV_VARS["ort"], str(ort_library))
    capsys.readouterr()
    assert cli.main(["doctor", "--ort-library"]) == 0
    out, err = capsys.readouterr()
    assert out == f"{ort_library}\n" and err == ""
    assert wtconv_trt.ort_library() == ort_library
    options = onnxruntime.SessionOptions()
    options.register_custom_ops_library(out.strip())
    paths, model = exports
    session = onnxruntime.InferenceSession(str(paths["plugin"]), options, providers=["CPUExecutionProvider"])
    x = np.random.default_rng(0).standard_normal((4, 1, 32, 32)).astype(np.float32)
    with torch.no_grad():
        expected = model(torch.from_numpy(x)).numpy()
    got = session.run(None, {"input": x})[0]
    assert np.abs(got - expected).max() <= 1e-5 * np.abs(expected).max()


# --- build-libs


@pytest.mark.slow  # a CMake build of the CPU op (about 15 s on two cores; a rebuild of the same sources is quick)
def test_build_libs_builds_installs_and_reports_the_library(exports, monkeypatch, tmp_path, capsys):
    """build-libs --no-cuda (a C++ compiler and ONNX Runtime's headers are all it needs): libwtconv_ort.so installed in
    the per-user cache, where doctor --ort-library finds it, reported with its ops; validate then runs on it."""
    reason = ort_library_skip_reason()
    if reason:
        pytest.skip(reason)
    # reused across runs, one per checkout: CMake refuses a build folder configured from another source tree
    build_dir = build.default_build_dir(REPO / "plugin", "test-build-libs-ort-cpu")
    no_library_anywhere(monkeypatch, tmp_path)
    built = wtconv_trt.build_libraries(cuda=False, build_dir=build_dir, source=REPO / "plugin")
    installed = tmp_path / "empty-cache" / "lib" / "libwtconv_ort.so"
    assert built.installed == {"ort": installed} and installed.is_file()
    assert built.note is None and built.ort_note is None  # --no-cuda: no plugin was asked for
    assert built.describe("ort") == "CPU op only, built without nvcc; ONNX Runtime C API 17+"
    assert wtconv_trt.ort_library() == installed
    capsys.readouterr()
    argv = ["build-libs", "--no-cuda", "--build-dir", str(build_dir), "--source", str(REPO / "plugin")]
    assert cli.main(argv) == 0
    out, err = capsys.readouterr()
    assert out == f"ort            {installed}  (CPU op only, built without nvcc; ONNX Runtime C API 17+)\n", out
    assert "without CUDA: building libwtconv_ort.so with its CPU op alone" in err
    result = wtconv_trt.validate_onnx(exports[0]["plugin"])
    assert result.passed and result.execution == NATIVE_CPU


# --- validate


def test_validate_runs_plugin_exports_on_the_native_library(ort_library, exports, monkeypatch, capsys, caplog):
    """Found in the lookup (or given with --ort-library), the library runs the nodes: the Python-op path is made to
    fail, and validation passes in fp32 and fp16 with the verdict saying where it ran, and no fallback said."""
    paths, _ = exports

    def no_python_op(*args, **kwargs):
        raise AssertionError("the onnxruntime-extensions Python op was used although libwtconv_ort.so is there")

    monkeypatch.setattr(session, "rewrite_for_ort", no_python_op)
    monkeypatch.setenv(lookup.ENV_VARS["ort"], str(ort_library))
    for argv in (["validate", str(paths["plugin"])], ["validate", str(paths["plugin_fp16"])]):
        capsys.readouterr()
        assert cli.main(argv) == 0
        out, err = capsys.readouterr()
        [line] = out.splitlines()
        assert line.startswith("PASSED: ONNX Runtime vs PyTorch") and line.endswith(NATIVE_CPU), line
        assert FALLBACK not in err
    monkeypatch.delenv(lookup.ENV_VARS["ort"])
    result = wtconv_trt.validate_onnx(paths["plugin"], ort_library=ort_library)
    assert result.passed and result.execution == NATIVE_CPU and result.errors[0] <= 1e-5


def test_validate_falls_back_to_the_python_op_and_says_so_once(exports, monkeypatch, tmp_path, caplog):
    """No library: the Python op runs the nodes, every verdict says so, and the log says it once per process (three
    validations here, as in the demo)."""
    no_library_anywhere(monkeypatch, tmp_path)
    paths, _ = exports
    with caplog.at_level(logging.WARNING, logger="wtconv_ort"):
        results = [wtconv_trt.validate_onnx(paths[k]) for k in ("plugin", "plugin_fp16", "plugin")]
    assert all(r.passed and r.execution == PYTHON_OP for r in results)
    said = [r.getMessage() for r in caplog.records if FALLBACK in r.getMessage()]
    assert len(said) == 1 and "wtconv-trt build-libs" in said[0], said
    # A standard-op export has no WTConv2d node: nothing to say about the library.
    assert wtconv_trt.validate_onnx(paths["standard"]).execution == "ONNX Runtime CPU EP"


def test_device_cuda_is_refused_on_a_cpu_only_onnxruntime(exports, monkeypatch, capsys):
    cpu_only_onnxruntime(monkeypatch)
    paths, _ = exports
    for device in ("cuda", "cuda:1"):
        line = one_error_line(capsys, ["validate", str(paths["plugin"]), "--device", device])
        expected = (
            f"--device {device}: onnxruntime {onnxruntime.__version__} here has no CUDAExecutionProvider (it offers "
            "CPUExecutionProvider): install onnxruntime-gpu in its place"
        )
        assert line.startswith(f"wtconv-trt validate: error: {expected}"), line
        with pytest.raises(ConfigurationError, match="has no CUDAExecutionProvider"):
            wtconv_trt.validate_onnx(paths["standard"], device=device)
    with pytest.raises(ConfigurationError, match="runtime onnxruntime cannot run here: device cuda: onnxruntime"):
        wtconv_trt.serve(paths["plugin"], runtime="onnxruntime", device="cuda", http_port=0, grpc_port=0)


def test_device_cuda_needs_the_library_cuda_op(exports, ort_library, monkeypatch, tmp_path, capsys):
    """With a CUDA execution provider (simulated: the check comes before any session), the WTConv2d nodes need the
    library's CUDA op: refused in one line without it; a standard-op export needs no library, and its plan asks
    for GPU N with TF32 off."""
    monkeypatch.setattr(
        onnxruntime, "get_available_providers", lambda: ["CUDAExecutionProvider", "CPUExecutionProvider"]
    )
    paths, _ = exports
    plan = plan_ort_execution(paths["standard"], "cuda:1")
    assert plan.providers == [("CUDAExecutionProvider", {"device_id": "1", "use_tf32": "0"}), "CPUExecutionProvider"]
    assert plan.op is None and plan.describe() == "ONNX Runtime CUDA EP (GPU 1, TF32 off)"
    if lookup.ort_library_info(ort_library)["cuda"] != "yes":
        line = one_error_line(
            capsys, ["validate", str(paths["plugin"]), "--device", "cuda", "--ort-library", str(ort_library)]
        )
        assert f"--device cuda: {ort_library} has no CUDA op (it was built where nvcc was not found)" in line
    no_library_anywhere(monkeypatch, tmp_path)
    line = one_error_line(capsys, ["validate", str(paths["plugin"]), "--device", "cuda:0"])
    assert (
        "--device cuda:0: the model's 5 WTConv2d nodes need the ONNX Runtime op library libwtconv_ort.so: not found"
        in line
    )


@pytest.mark.parametrize("which", ["plugin", "plugin_fp16"])
def test_validate_on_the_gpu(ort_cuda, exports, which, capsys):
    """onnxruntime-gpu's CUDA EP with the library's CUDA op (a GPU machine): the plugin exports pass against PyTorch
    with TF32 off, the nodes placed on the CUDA op."""
    paths, _ = exports
    capsys.readouterr()
    assert cli.main(["validate", str(paths[which]), "--device", "cuda", "--ort-library", str(ort_cuda)]) == 0
    line = capsys.readouterr().out.strip()
    assert line.startswith("PASSED") and line.endswith(
        "ONNX Runtime CUDA EP (GPU 0, TF32 off), 5 WTConv2d nodes on libwtconv_ort.so's CUDA op"
    ), line


# --- the serving repository


def test_serving_repository_carries_the_library(exports, ort_library, tmp_path):
    """serve's repository: the library copied into the model's folder and named by the config; where ONNX Runtime
    runs written as resolved here (cpu without a usable CUDA EP) or as asked (cuda: KIND_GPU instances)."""
    paths, _ = exports
    written = wtconv_trt.write_serving_repository(
        paths["plugin"], tmp_path / "repo", runtime="onnxruntime", ort_library=ort_library
    )
    copy = written.model_dir / "libwtconv_ort.so"
    assert written.ort_library == copy and copy.read_bytes() == ort_library.read_bytes()
    config = written.config_text
    assert 'key: "ort_library"\n  value: { string_value: "libwtconv_ort.so" }' in config
    usable = "CUDAExecutionProvider" in onnxruntime.get_available_providers()
    usable &= lookup.ort_library_info(ort_library)["cuda"] == "yes"
    assert written.ort_device == ("cuda" if usable else "cpu")
    assert ("kind: KIND_GPU" if usable else "kind: KIND_CPU") in config
    asked = wtconv_trt.write_serving_repository(
        paths["plugin"], tmp_path / "repo", name="gpu", runtime="onnxruntime", device="cuda", ort_library=ort_library
    )
    assert asked.ort_device == "cuda" and "kind: KIND_GPU" in asked.config_text
    plain = wtconv_trt.write_serving_repository(paths["standard"], tmp_path / "repo", name="std", runtime="onnxruntime")
    assert plain.ort_library is None and not (plain.model_dir / "libwtconv_ort.so").exists()
    assert "ort_library" not in plain.config_text
    shutil.rmtree(tmp_path / "repo")


def test_without_the_library_or_onnxruntime_extensions(exports, monkeypatch, tmp_path, capsys):
    """onnxruntime-extensions is needed only where the Python op must run the nodes: without it and without the
    library, validate says both ways out in one line; a standard-op export validates without either."""
    import importlib.util

    no_library_anywhere(monkeypatch, tmp_path)
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "onnxruntime_extensions" else find_spec(name, *a)
    )
    paths, _ = exports
    line = one_error_line(capsys, ["validate", str(paths["plugin"])])
    assert line.endswith(
        "the model has 5 WTConv2d nodes and no libwtconv_ort.so is built: build it with "
        f"'wtconv-trt build-libs{'' if build.cuda_gpu_count() else ' --no-cuda'}', or "
        "pip install onnxruntime-extensions for the slower Python op"
    ), line
    assert wtconv_trt.validate_onnx(paths["standard"]).passed
