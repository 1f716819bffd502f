"""No command may write over what it reads: an output that is one of the command's inputs (the same path, a symbolic
link or a hard link to it, or a new path that resolves to it), or an output folder that holds an input, is refused
in one line with exit status 2 and nothing touched (wtconv_core.paths.check_not_an_input; docs/design.md §1).

The oracle for "nothing touched" is the file system itself: every file's bytes and modification time, and every
name, before and after. The files are small stand-ins (a Relu-only ONNX model, an engine file with a valid
manifest): every case is refused before a model is loaded or TensorRT is imported.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from engine_helpers import fake_engine, tiny_onnx
from test_cli_bad_input import _snapshot as state

import wtconv_trt
from wtconv_core.errors import InputError
from wtconv_core.paths import check_not_an_input
from wtconv_trt import cli

pytest.importorskip("onnx")


@pytest.fixture
def work(tmp_path):
    """model.onnx (with a symbolic and a hard link to it, and a link named as an engine's manifest), a checkpoint
    file with a hard link, an engine with its manifest and a link to it, a repository folder holding a model and an
    engine, a folder standing in for headers."""
    w = tmp_path
    tiny_onnx(w / "model.onnx", dims=("batch", 1, 32, 32))
    (w / "link.onnx").symlink_to("model.onnx")
    os.link(w / "model.onnx", w / "hard.onnx")
    (w / "model.engine.json").symlink_to("model.onnx")  # where an engine model.engine keeps its manifest
    (w / "ckpt.pth").write_bytes(b"weights a user trained for a week\n")
    os.link(w / "ckpt.pth", w / "ckpt_hard.pth")
    engines = w / "engines"
    engines.mkdir()
    fake_engine(engines, plugin=False)
    (engines / "link.engine").symlink_to("model.fp16.engine")
    repo = w / "repo"
    (repo / "digits" / "1").mkdir(parents=True)
    tiny_onnx(repo / "digits" / "1" / "model.onnx", dims=("batch", 1, 32, 32))
    fake_engine(repo / "digits" / "1", plugin=False)
    (w / "headers" / "include").mkdir(parents=True)
    return w


def refused(argv: list[str], work: Path, capsys, phrase: str) -> str:
    """Run the command line in-process in ``work``; assert exit 2, one line naming ``phrase``, nothing touched."""
    before = state(work)
    capsys.readouterr()
    cwd = os.getcwd()
    os.chdir(work)
    try:
        status = cli.main(argv)
    finally:
        os.chdir(cwd)
    out, err = capsys.readouterr()
    lines = [line for line in err.splitlines() if line.strip()]
    assert status == 2, (status, err)
    assert len(lines) == 1 and "Traceback" not in err + out, err
    assert phrase in lines[0], lines[0]
    assert state(work) == before, "a file was created, changed or removed"
    return lines[0]


# (id, argv, phrase): run in the fixture's folder.
COMMANDS = [
    ("build/same-path", ["build", "model.onnx", "--engine", "model.onnx", "--force"], "(the same path)"),
    ("build/symlink", ["build", "model.onnx", "--engine", "link.onnx", "--force"], "(a symbolic link to it)"),
    ("build/hard-link", ["build", "model.onnx", "--engine", "hard.onnx", "--force"], "(a hard link to it)"),
    ("build/new-path-resolving", ["build", "model.onnx", "--engine", "new/../model.onnx", "--force"], "same path"),
    (
        "build/manifest",
        ["build", "model.onnx", "--engine", "model.engine", "--force"],
        "-o model.engine.json is the ONNX model model.onnx (a symbolic link to it)",
    ),
    ("build/timing-cache", ["build", "model.onnx", "--engine", "m.engine", "--timing-cache", "link.onnx"], "link"),
    (
        "export/checkpoint",
        ["export", "-o", "ckpt_hard.pth", "--arch", "wtconvnext_tiny", "--checkpoint", "ckpt.pth", "--force"],
        "-o ckpt_hard.pth is the checkpoint ckpt.pth (a hard link to it)",
    ),
    (
        "bench/json-is-engine",
        ["bench", "--engine", "engines/model.fp16.engine", "--json", "engines/link.engine", "--force"],
        "--json engines/link.engine is the engine",
    ),
    (
        "bench/json-is-manifest",
        ["bench", "--engine", "engines/model.fp16.engine", "--json", "engines/model.fp16.engine.json", "--force"],
        "is the engine manifest",
    ),
    (
        "validate/save-inputs-is-engine",
        ["validate", "--engine", "engines/model.fp16.engine", "--save-inputs", "engines/link.engine", "--force"],
        "--save-inputs engines/link.engine is the engine",
    ),
    (
        "triton-repo/engine-in-out",
        ["triton-repo", "--engine", "repo/digits/1/model.fp16.engine", "--out", "repo", "--force"],
        "--out repo holds the engine",
    ),
    (
        "triton-repo/onnx-in-out",
        ["triton-repo", "--onnx", "repo/digits/1/model.onnx", "--out", "repo", "--name", "digits", "--force"],
        "--out repo holds the ONNX model",
    ),
    (
        "serve/onnx-in-repo",
        ["serve", "repo/digits/1/model.onnx", "--repo", "repo", "--force", "--write-only"],
        "--repo repo holds the ONNX model",
    ),
    ("serve/log-is-model", ["serve", "model.onnx", "--repo", "r", "--log", "link.onnx"], "--log link.onnx is the"),
    (
        "build-libs/build-dir-is-headers",
        ["build-libs", "--tensorrt-headers", "headers", "--build-dir", "headers/include/.."],
        "--build-dir headers/include/.. holds the TensorRT headers",
    ),
]


@pytest.mark.parametrize("argv, phrase", [c[1:] for c in COMMANDS], ids=[c[0] for c in COMMANDS])
def test_a_command_refuses_to_write_over_its_input(argv, phrase, work, capsys):
    refused(argv, work, capsys, phrase)


def test_build_libs_refuses_its_own_sources_as_build_folder(work, capsys):
    """The CMake sources (plugin/ of this checkout) as --build-dir: refused before CMake writes its cache there."""
    from wtconv_libs.build import default_source_dir

    source = default_source_dir()
    if source is None:
        pytest.skip("not run from a checkout: no plugin/ sources")
    before = state(source)
    refused(["build-libs", "--no-cuda", "--build-dir", str(source)], work, capsys, "holds the sources")
    assert state(source) == before


# (id, API call, parameter named): each API function under those commands refuses the same way.
API = [
    (
        "export_onnx",
        lambda w: wtconv_trt.export_onnx(w / "link.onnx", wtconv_trt.ModelSource(checkpoint=w / "model.onnx")),
        "output",
    ),
    ("build_engine", lambda w: wtconv_trt.build_engine(w / "model.onnx", engine=w / "hard.onnx", force=True), "engine"),
    (
        "benchmark_engine",
        lambda w: wtconv_trt.benchmark_engine(w / "engines/link.engine", json_path=w / "engines/model.fp16.engine"),
        "json_path",
    ),
    (
        "validate_engine",
        lambda w: wtconv_trt.validate_engine(w / "engines/model.fp16.engine", save_outputs=w / "engines/link.engine"),
        "save_outputs",
    ),
    (
        "write_triton_repository",
        lambda w: wtconv_trt.write_triton_repository(w / "repo/digits/1/model.fp16.engine", w / "repo", force=True),
        "out",
    ),
    (
        "write_onnxruntime_repository",
        lambda w: wtconv_trt.write_onnxruntime_repository(w / "model.onnx", w, force=True),
        "out",
    ),
    (
        "write_serving_repository",
        lambda w: wtconv_trt.write_serving_repository(w / "repo/digits/1/model.onnx", w / "repo", force=True),
        "repository",
    ),
    ("serve", lambda w: wtconv_trt.serve(w / "model.onnx", w / "r", log=w / "hard.onnx"), "log"),
    (
        "build_libraries",
        lambda w: wtconv_trt.build_libraries(w / "headers" / "include", build_dir=w / "headers"),
        "build_dir",
    ),
]


@pytest.mark.parametrize("call, parameter", [c[1:] for c in API], ids=[c[0] for c in API])
def test_an_api_function_refuses_to_write_over_its_input(call, parameter, work):
    before = state(work)
    with pytest.raises(InputError) as caught:
        call(work)
    assert caught.value.parameter == parameter, str(caught.value)
    assert "\n" not in str(caught.value)
    assert state(work) == before


def test_outputs_that_are_other_files_pass(tmp_path):
    """A copy (same bytes, another inode), a sibling, a new file and a folder beside the input are all fine; a
    missing input is left to its own check, and arrays given in place of an input file are not paths."""
    source = tmp_path / "a.onnx"
    source.write_bytes(b"x")
    copy = tmp_path / "copy.onnx"
    copy.write_bytes(b"x")
    (tmp_path / "out").mkdir()
    inputs = [("ONNX model", source), ("missing", tmp_path / "nothing-here"), ("inputs", [b"arrays", 1.0])]
    check_not_an_input(inputs, files=[("output", copy), ("output", tmp_path / "new.onnx"), ("output", None)])
    check_not_an_input(inputs, folders=[("out", tmp_path / "out"), ("out", tmp_path / "new-folder")])
    check_not_an_input(inputs, files=[("output", tmp_path / "nothing-here")])


def test_a_folder_reached_through_a_link_still_holds_the_input(tmp_path):
    """The output folder given through a symbolic link, or not yet existing but resolving to the input's folder."""
    (tmp_path / "models" / "m").mkdir(parents=True)
    source = tmp_path / "models" / "m" / "x.onnx"
    source.write_bytes(b"x")
    (tmp_path / "alias").symlink_to("models")
    for folder in (tmp_path / "alias", tmp_path / "new" / ".." / "models", tmp_path / "models" / "m"):
        with pytest.raises(InputError, match=r"^out .* holds the ONNX model .*x\.onnx"):
            check_not_an_input([("ONNX model", source)], folders=[("out", folder)])
    # A folder inside the input's folder (a build folder inside the sources) is not refused.
    check_not_an_input([("sources", tmp_path / "models")], folders=[("build_dir", tmp_path / "models" / "build")])
