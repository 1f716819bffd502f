"""The build / bench / triton-repo commands and engine validation through the wtconv-trt command line: argument
handling and every error path that can be reached without TensorRT (exit status 2, one clear line)."""

import argparse
import types

import pytest
from engine_helpers import fake_engine, tiny_onnx

from wtconv_trt import cli

OUR_COMMANDS = [
    ("build", "wtconv_trt.commands.build"),
    ("bench", "wtconv_trt.commands.bench"),
    ("triton-repo", "wtconv_trt.commands.triton_repo"),
]


def tensorrt_missing():
    from trt_engine.tensorrt_api import tensorrt_available

    return not tensorrt_available()


# These tests check the messages given without TensorRT: conftest's no_tensorrt hides any installed one.
needs_no_tensorrt = pytest.mark.usefixtures("no_tensorrt")


@pytest.fixture
def run_cli(monkeypatch, capsys):
    """Run 'wtconv-trt ARGS' with only this issue's subcommands registered (the others are tested elsewhere)."""
    monkeypatch.setattr(cli, "SUBCOMMANDS", OUR_COMMANDS)

    def run(*argv):
        status = cli.main([str(a) for a in argv])
        out = capsys.readouterr()
        return status, out.out, out.err

    return run


def test_subcommands_are_registered():
    names = [name for name, _ in cli.SUBCOMMANDS]
    for name, module in OUR_COMMANDS:
        assert (name, module) in cli.SUBCOMMANDS, f"{name} missing from wtconv_trt.cli.SUBCOMMANDS"
    assert names.index("build") < names.index("bench") < names.index("triton-repo")


@pytest.mark.parametrize("command", [name for name, _ in OUR_COMMANDS])
def test_help(command, run_cli, capsys):
    with pytest.raises(SystemExit) as exit_info:
        run_cli(command, "--help")
    assert exit_info.value.code == 0
    assert "usage: wtconv-trt " + command in capsys.readouterr().out


@needs_no_tensorrt
def test_build_without_tensorrt(tmp_path, run_cli):
    onnx = tiny_onnx(tmp_path / "m.onnx")
    status, out, err = run_cli("build", onnx, "--precision", "fp32", "--shapes", "input:1x1x8x8/2x1x8x8/4x1x8x8")
    assert status == 2
    assert "TensorRT is not installed" in err and "pip install tensorrt" in err
    assert "standard ONNX operators only" in err  # the no-WTConv2d warning still reaches the user
    assert not (tmp_path / "m.fp32.engine").exists()


def test_build_input_errors(tmp_path, run_cli, monkeypatch):
    from wtconv_libs import lookup

    monkeypatch.delenv(lookup.ENV_VARS["plugin"], raising=False)
    monkeypatch.setattr(lookup, "default_plugin", lambda **kwargs: None)  # none built anywhere
    status, _, err = run_cli("build", tmp_path / "missing.onnx")
    assert status == 2 and "does not exist; export one" in err
    with_nodes = tiny_onnx(tmp_path / "w.onnx", wtconv_nodes=2)
    status, _, err = run_cli("build", with_nodes)
    assert status == 2 and "2 WTConv2d nodes, which need our TensorRT plugin: pass --plugin" in err
    status, _, err = run_cli("build", with_nodes, "--plugin", tmp_path / "nope.so")
    assert status == 2 and "plugin library" in err and "does not exist" in err
    plain = tiny_onnx(tmp_path / "p.onnx")
    status, _, err = run_cli("build", plain, "--shapes", "input:4x1x8x8/2x1x8x8/8x1x8x8")
    assert status == 2 and "min <= opt <= max" in err
    status, _, err = run_cli("build", plain, "--shapes", "input:1x3x8x8/1x3x8x8/1x3x8x8")
    assert status == 2 and "fixed at 1" in err
    status, _, err = run_cli("build", plain, "--engine", tmp_path / "no" / "such" / "dir.engine")
    assert status == 2 and "does not exist" in err
    status, _, err = run_cli("build", plain, "--precision", "int8")  # argparse's refusal: one line, status 2
    assert status == 2 and "invalid choice: 'int8'" in err


@needs_no_tensorrt
def test_bench_without_tensorrt(tmp_path, run_cli):
    engine, _ = fake_engine(tmp_path)
    status, _, err = run_cli("bench", "--engine", engine)
    assert status == 2 and "TensorRT is not installed" in err


def test_bench_engine_errors(tmp_path, run_cli):
    engine, _ = fake_engine(tmp_path)
    status, _, err = run_cli("bench", "--engine", engine, "--shape", "64x1x32x32")
    assert status == 2 and "outside every optimisation profile" in err
    engine.write_bytes(engine.read_bytes()[:-1])
    status, _, err = run_cli("bench", "--engine", engine)
    assert status == 2 and "truncated, corrupt or was replaced" in err
    status, _, err = run_cli("bench", "--engine", tmp_path / "other.engine")
    assert status == 2 and "does not exist; build one" in err  # the engine itself is missing
    lonely = tmp_path / "lonely.engine"
    lonely.write_bytes(b"plan bytes without a manifest")
    status, _, err = run_cli("bench", "--engine", lonely)
    assert status == 2 and "no manifest" in err


@needs_no_tensorrt
def test_engine_validation_without_tensorrt(tmp_path):
    from trt_engine.tensorrt_api import TensorRTUnavailable
    from wtconv_validate.engine import validate_engine

    engine, _ = fake_engine(tmp_path)
    with pytest.raises(TensorRTUnavailable, match="TensorRT is not installed"):
        validate_engine(str(engine), iterations=1)
    with pytest.raises(ValueError, match="outside every optimisation profile"):
        validate_engine(str(engine), shape="1x1x99x99", iterations=1)


def test_validate_command_engine_options(tmp_path, monkeypatch, capsys):
    """'wtconv-trt validate --engine' (wtconv_trt/commands/validate.py) takes our engine options beside its own
    and hands them to validate_engine; without TensorRT it stops with the install message, exit 2."""
    validate_command = pytest.importorskip("wtconv_trt.commands.validate")
    parser = argparse.ArgumentParser()
    validate_command.add_arguments(parser)
    args = parser.parse_args(
        [
            "--engine",
            "e",
            "--plugin",
            "lib.so",
            "--save-inputs",
            "i.json",
            "--save-outputs",
            "o.json",
            "--atol",
            "0.1",
            "--rtol",
            "0.2",
            "--iterations",
            "3",
            "--input-shape",
            "8,1,32,32",
        ]
    )
    assert (args.plugin, args.save_inputs, args.save_outputs, args.atol, args.rtol, args.iterations) == (
        "lib.so",
        "i.json",
        "o.json",
        0.1,
        0.2,
        3,
    )
    if not tensorrt_missing():
        return
    engine, _ = fake_engine(tmp_path)
    monkeypatch.setattr(cli, "SUBCOMMANDS", [("validate", "wtconv_trt.commands.validate")])
    status = cli.main(["validate", "--engine", str(engine), "--input-shape", "8,1,32,32"])
    assert status == 2 and "TensorRT is not installed" in capsys.readouterr().err
    status = cli.main(["validate", "--engine", str(engine), "--input-shape", "8,1,99,99"])
    assert status == 2 and "outside every optimisation profile" in capsys.readouterr().err


def test_triton_repo_command(tmp_path, run_cli):
    engine, _ = fake_engine(tmp_path, plugin=False)
    status, out, err = run_cli(
        "triton-repo",
        "--engine",
        engine,
        "--out",
        tmp_path / "repo",
        "--name",
        "digits",
        "--instances",
        "2",
        "--gpus",
        "0",
    )
    assert status == 0, err
    assert "max_batch_size: 32" in out and (tmp_path / "repo" / "digits" / "config.pbtxt").is_file()
    status, _, err = run_cli("triton-repo", "--engine", engine, "--out", tmp_path / "repo2", "--gpus", "a")
    assert status == 2 and "--gpus" in err


@pytest.mark.parametrize("command", ["validate", "bench"])
def test_engine_runs_are_refused_without_a_gpu_that_runs_them(command, tmp_path, monkeypatch, capsys):
    """validate --engine and bench on a machine without a GPU: one line saying so (as doctor does), once the
    engine's TensorRT is known to be the installed one and before deserialization (the stand-in TensorRT has no
    Runtime: reaching it would fail differently)."""
    import types

    from trt_engine import environment, tensorrt_api

    engine, _ = fake_engine(tmp_path, plugin=False, trt_version="10.16.0.72")
    monkeypatch.setattr(tensorrt_api, "import_tensorrt", lambda: types.SimpleNamespace(__version__="10.16.0.72"))
    monkeypatch.setattr(tensorrt_api, "prefer_backend", lambda name: None)
    monkeypatch.setattr(tensorrt_api, "backend_of", lambda trt: "tensorrt")
    monkeypatch.setattr(environment, "_gpu", lambda: (None, None))
    capsys.readouterr()
    assert cli.main([command, "--engine", str(engine)] + (["--iterations", "1"] if command == "validate" else [])) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "this machine has no GPU that can run engines" in lines[0], lines
    assert "wtconv-trt validate MODEL.onnx" in lines[0]


def test_engine_gpu_problem_names_what_runs_where(monkeypatch):
    """Which GPU runs which engine (docs/engines.md, "Backends"): TensorRT on any CUDA GPU; TensorRT-RTX on compute
    capability 7.5-8.9 and 12.x, and only on the targets an engine was built for."""
    from trt_engine import environment

    def problem(gpu, backend, targets=None):
        monkeypatch.setattr(environment, "_gpu", lambda: gpu)
        return environment.engine_gpu_problem(types.SimpleNamespace(backend=backend, compute_capabilities=targets))

    h200, ada = ("NVIDIA H200", (9, 0)), ("NVIDIA L4", (8, 9))
    assert "no GPU that can run engines" in problem((None, None), "tensorrt")
    assert problem(h200, "tensorrt") is None
    assert "compute capability 9.0" in problem(h200, "tensorrt-rtx", ["8.0", "8.9"])
    assert problem(ada, "tensorrt-rtx", ["8.0", "8.9"]) is None
    assert problem(ada, "tensorrt-rtx", ["current"]) is None
    assert "built for compute capability 8.0, 8.6 and this NVIDIA L4 has 8.9" in problem(
        ada, "tensorrt-rtx", ["8.0", "8.6"]
    )


def test_replay_command_names_the_static_plugin_beside_the_engine_s(tmp_path):
    """The polygraphy line after 'validate --engine --save-*' loads the static-registration library installed beside
    the engine's dynamic one (build-libs installs both), not a build-tree path the user may not have."""
    from wtconv_validate.engine import replay_command

    _, manifest = fake_engine(tmp_path)
    static = tmp_path / "libwtconv_trt_plugin.so"  # beside the manifest's libwtconv_trt_plugin_dynamic.so
    static.write_bytes(b"\x7fELF")
    line = replay_command("m.engine", "i.json", "o.json", 0.05, 0.05, manifest)
    assert f"--plugins {static} --load-inputs i.json --load-outputs o.json --atol 0.05 --rtol 0.05" in line
    _, plain = fake_engine(tmp_path, plugin=False, name="plain.engine")
    assert "--plugins" not in replay_command("plain.engine", "i.json", None, 1e-3, 1e-3, plain)
