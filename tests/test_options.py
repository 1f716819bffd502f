"""Each option declared once (wtconv_core/options.py; docs/design.md §1): the commands that share an option show one
help text for it, the command line reads back what it was given (and the dataclass's default for what it was not),
and a job refuses, in one line naming it, an option of another job's repository rather than ignoring it.

The oracle for the help texts is argparse itself: the parsers the command line really builds, read option by option.
"""

from __future__ import annotations

import argparse
import dataclasses

import pytest
from engine_helpers import fake_engine

import wtconv_trt
from wtconv_core import options
from wtconv_core.errors import InputError
from wtconv_trt import cli


def subcommands() -> dict[str, argparse.ArgumentParser]:
    parser = cli.build_parser()
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


def helps(parser: argparse.ArgumentParser) -> dict[str, str]:
    """Every option string of ``parser`` -> its help text."""
    return {flag: action.help for action in parser._actions for flag in action.option_strings if flag != "-h"}


def flags(*classes) -> dict[str, str]:
    """The option string of every field of ``classes`` -> its help text."""
    return {options._flag(item): item.metadata["help"] for cls in classes for item in dataclasses.fields(cls)}


# The commands that share a concept's options, and the dataclasses that declare them.
SHARED = {
    ("serve", "triton-repo"): (options.RepositoryOptions, options.TuningOptions),
    ("export", "validate"): (options.ModelSource,),
}


@pytest.mark.parametrize("pair", list(SHARED), ids="-and-".join)
def test_an_option_two_commands_share_has_one_help_text(pair):
    parsers = subcommands()
    declared = flags(*SHARED[pair])
    first, second = (helps(parsers[name]) for name in pair)
    shared = sorted(set(first) & set(second) & set(declared))
    assert len(shared) >= 6, shared
    assert {flag: first[flag] for flag in shared} == {flag: second[flag] for flag in shared}
    for name in pair:  # and it is the dataclass field's, wherever the command shows it
        shown = helps(parsers[name])
        assert {f: shown[f] for f in declared if f in shown} == {f: declared[f] for f in declared if f in shown}


def test_the_command_line_reads_back_what_it_was_given():
    parser = subcommands()["triton-repo"]
    given = parser.parse_args(
        ["--onnx", "m.onnx", "--out", "r", "--gpus", "0,1", "--preferred-batch", "4", "--preferred-batch", "8"]
        + ["--no-warmup", "--cudnn-search", "HEURISTIC", "--max-queue-delay-us", "0"]
    )
    repository = options.from_args(options.RepositoryOptions, given, engine=None)
    assert repository.gpus == (0, 1) and repository.preferred_batch_sizes == (4, 8)
    assert repository.warmup is False and repository.max_queue_delay_us == 0
    assert options.from_args(options.TuningOptions, given).cudnn_search == "HEURISTIC"
    nothing = parser.parse_args(["--onnx", "m.onnx", "--out", "r"])
    assert options.from_args(options.RepositoryOptions, nothing, engine=None) == options.RepositoryOptions()
    assert options.from_args(options.TuningOptions, nothing) == options.TuningOptions()
    source = subcommands()["export"].parse_args(["-o", "m.onnx", "--arch", "wtconvnext_tiny", "--random-weights"])
    assert options.from_args(options.ModelSource, source) == options.ModelSource("wtconvnext_tiny", random_weights=True)


def test_a_job_refuses_an_option_of_another_repository(tmp_path):
    engine, _ = fake_engine(tmp_path, plugin=False)
    for call, parameter in [
        (lambda: wtconv_trt.write_triton_repository(engine, tmp_path / "r", server_path="/models"), "server_path"),
        (lambda: wtconv_trt.write_triton_repository(engine, tmp_path / "r", cudnn_search="EXHAUSTIVE"), "cudnn_search"),
        (lambda: wtconv_trt.write_triton_repository(engine, tmp_path / "r", runtime="onnxruntime"), "runtime"),
        (lambda: wtconv_trt.write_serving_repository(tmp_path / "m.onnx", tmp_path / "r", labels="l.txt"), "labels"),
    ]:
        with pytest.raises(InputError, match=f"^{parameter}: not an option of ") as caught:
            call()
        assert caught.value.parameter == parameter
    assert not (tmp_path / "r").exists()
    with pytest.raises(TypeError, match="not both"):
        wtconv_trt.write_triton_repository(engine, tmp_path / "r", options=options.RepositoryOptions(), name="m")
