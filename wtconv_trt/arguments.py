"""Argument types for every ``wtconv-trt`` subcommand: numbers are range-checked where they are parsed.

Each function here is an argparse ``type=``: it turns the text into a value or raises ArgumentTypeError with
what was expected, which argparse turns into one ``error:`` line and exit status 2 (see ``cli.OneLineParser``).
Commands use these, never a bare ``type=int`` / ``type=float``, so that ``--iterations -4``, ``--tolerance nan``
or ``--seed 99999999999999999999`` are refused before any work starts.
"""

from __future__ import annotations

import argparse
import math
import re
from collections.abc import Callable

# Largest integer seed: torch.Generator.manual_seed and numpy.random.default_rng both take any value below 2**63.
MAX_SEED = 2**63 - 1
# TensorRT dimensions are signed 32-bit in engine bindings; larger is never a real batch, size or count.
MAX_INT32 = 2**31 - 1


_INTEGER = re.compile(r"[ \t]*[+-]?[0-9]+[ \t]*")


def _int(text: str) -> int:
    """Decimal ASCII digits with an optional sign (int() would also take '1_000' and non-ASCII digits)."""
    if not _INTEGER.fullmatch(str(text)):
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}")
    return int(text)


def int_range(low: int, high: int, what: str = "") -> Callable[[str], int]:
    """An integer in [low, high] (inclusive)."""

    def parse(text: str) -> int:
        value = _int(text)
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"expected an integer from {low} to {high}{what}, got {text!r}")
        return value

    parse.__name__ = f"integer {low}..{high}"
    return parse


positive_int = int_range(1, MAX_INT32)
non_negative_int = int_range(0, MAX_INT32)
seed = int_range(0, MAX_SEED)
port = int_range(1, 65535, " (a TCP port)")
port_or_zero = int_range(0, 65535, " (a TCP port; 0: any free port)")


def opset(text: str) -> int:
    """An ONNX opset from 18 (the oldest the standard-op WTConv2d formulation uses) to the newest the installed
    onnx package knows."""
    import onnx

    return int_range(18, onnx.defs.onnx_opset_version(), " (ONNX opsets the installed onnx package knows)")(text)


def _float(text: str) -> float:
    try:
        value = float(str(text).strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"expected a finite number, got {text!r}")
    return value


def positive_float(text: str) -> float:
    """A finite number > 0 (tolerances, times)."""
    value = _float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"expected a finite number > 0, got {text!r}")
    return value


def non_negative_float(text: str) -> float:
    """A finite number >= 0 (warm-up times, delays)."""
    value = _float(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a finite number >= 0, got {text!r}")
    return value


def float_range(low: float, high: float, what: str = "") -> Callable[[str], float]:
    """A finite number in [low, high] (inclusive)."""

    def parse(text: str) -> float:
        value = _float(text)
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"expected a number from {low:g} to {high:g}{what}, got {text!r}")
        return value

    parse.__name__ = f"number {low:g}..{high:g}"
    return parse


def tolerance(text: str) -> float:
    """A finite tolerance in (0, 1e6]; ``nan`` or ``0`` would make every comparison pass or fail."""
    value = positive_float(text)
    if value > 1e6:
        raise argparse.ArgumentTypeError(f"expected a tolerance > 0 and <= 1e6, got {text!r}")
    return value


def shape(text: str) -> tuple[int, int, int, int]:
    """An input shape B,C,H,W (or BxCxHxW): four positive integers."""
    from wtconv_export.errors import InputError
    from wtconv_export.inputs import parse_dims

    try:
        return parse_dims(text, "", rank=4)  # type: ignore[return-value]
    except InputError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def dims(text: str) -> tuple[int, ...]:
    """A shape of any rank, e.g. 8x1x32x32 or 8,1,32,32 (bench --shape, validate --engine --input-shape)."""
    from wtconv_export.errors import InputError
    from wtconv_export.inputs import parse_dims

    try:
        return parse_dims(text, "")
    except InputError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def gpu_list(text: str) -> list[int]:
    """Comma-separated GPU indices, e.g. 0,1 (each from 0 to 1023, no repeats)."""
    parts = [p.strip() for p in str(text).split(",")]
    if not all(p.isascii() and p.isdigit() for p in parts):
        raise argparse.ArgumentTypeError(f"expected comma-separated GPU indices such as 0,1, got {text!r}")
    gpus = [int(p) for p in parts]
    if max(gpus) > 1023 or len(set(gpus)) != len(gpus):
        raise argparse.ArgumentTypeError(f"expected distinct GPU indices from 0 to 1023, got {text!r}")
    return gpus


def existing_file(text: str) -> str:
    """A path to an existing, readable, non-empty regular file."""
    import os

    if not os.path.exists(text):
        raise argparse.ArgumentTypeError(f"{text} does not exist")
    if os.path.isdir(text):
        raise argparse.ArgumentTypeError(f"{text} is a directory; give a file")
    if not os.access(text, os.R_OK):
        raise argparse.ArgumentTypeError(f"{text} is not readable")
    if os.path.getsize(text) == 0:
        raise argparse.ArgumentTypeError(f"{text} is empty (0 bytes)")
    return text
