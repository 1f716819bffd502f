"""Argument syntax for every ``wtconv-trt`` subcommand: text to values, nothing more.

Each type here is an argparse ``type=``: it turns the text into a value or raises ArgumentTypeError with what was
expected (``--iterations many``: "expected an integer"), which argparse turns into one ``error:`` line and exit
status 2 (see ``cli.OneLineParser``). Whether a value is in range (``--iterations 0``, ``--tolerance nan``,
``--seed 99999999999999999999``) is decided by the job the command calls, in the library
(``wtconv_core.inputs.check_int`` and its kin): a Python caller gets the same check and the same message.
Commands use these types, never a bare ``type=int`` / ``type=float``.

``UsageError`` and ``only_with`` cover what argparse cannot say itself: options that apply only with another one.
"""

from __future__ import annotations

import argparse
import re

_INTEGER = re.compile(r"[ \t]*[+-]?[0-9]+[ \t]*")


class UsageError(SystemExit):
    """A command line argparse refused; ``cli.main`` prints it as one line and returns 2. A SystemExit with status 2,
    as argparse's own, for callers of ``build_parser().parse_args`` outside ``main``."""

    def __init__(self, prog: str, message: str):
        super().__init__(2)
        self.prog = prog
        self.message = message


def integer(text: str) -> int:
    """Decimal ASCII digits with an optional sign (int() would also take '1_000' and non-ASCII digits)."""
    if not _INTEGER.fullmatch(str(text)):
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}")
    return int(text)


integer.__name__ = "integer"


def number(text: str) -> float:
    """A decimal number ('nan' and 'inf' parse; the job refuses them with the option's range)."""
    try:
        return float(str(text).strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None


number.__name__ = "number"


def integer_list(text: str) -> list[int]:
    """Comma-separated integers, e.g. 1,2,4,8."""
    parts = [p.strip() for p in str(text).split(",")]
    if not all(_INTEGER.fullmatch(p) for p in parts):
        raise argparse.ArgumentTypeError(f"expected comma-separated integers such as 1,2,4,8, got {text!r}")
    return [int(p) for p in parts]


def gpu_list(text: str) -> list[int]:
    """Comma-separated GPU indices, e.g. 0,1 (each checked by the job: from 0 to 1023, no repeats)."""
    parts = [p.strip() for p in str(text).split(",")]
    if not all(p.isascii() and p.isdigit() for p in parts):
        raise argparse.ArgumentTypeError(f"expected comma-separated GPU indices such as 0,1, got {text!r}")
    return [int(p) for p in parts]


def word_list(text: str) -> tuple[str, ...]:
    """Comma-separated words, e.g. fp32,fp16 (empty items dropped; the job checks the words)."""
    return tuple(w.strip() for w in str(text).split(",") if w.strip())


def shape(text: str) -> tuple[int, int, int, int]:
    """An input shape B,C,H,W (or BxCxHxW): four positive integers."""
    from wtconv_core.errors import InputError
    from wtconv_core.inputs import parse_dims

    try:
        return parse_dims(text, "", rank=4)  # type: ignore[return-value]
    except InputError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def dims(text: str) -> tuple[int, ...]:
    """A shape of any rank, e.g. 8x1x32x32 or 8,1,32,32 (bench --shape, validate --engine --input-shape)."""
    from wtconv_core.errors import InputError
    from wtconv_core.inputs import parse_dims

    try:
        return parse_dims(text, "")
    except InputError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def only_with(args: argparse.Namespace, needed: str, dests, reason: str, shown: str | None = None) -> None:
    """UsageError when an option among ``dests`` (argparse destinations, None when not given) was given without
    ``--needed`` (``shown``: how to name it instead, e.g. a positional MODEL.onnx): e.g. validate's engine options
    on an ONNX model."""
    if getattr(args, needed, None):
        return
    given = [dest for dest in dests if getattr(args, dest, None) is not None]
    if given:
        option = "--" + given[0].replace("_", "-")
        raise UsageError(
            f"wtconv-trt {args.command}", f"{option} applies only with {shown or '--' + needed} ({reason})"
        )
