"""What the user gives a job: the shape syntax (``B,C,H,W`` or ``BxCxHxW``), option values and user-given arrays,
checked by the job itself with one message whoever calls it, in the API's words (wtconv_core.errors)."""

from __future__ import annotations

import math
import numbers
import os
from collections.abc import Sequence

import numpy as np

from wtconv_core.errors import InputError

# Largest accepted dimension: TensorRT binds shapes as signed 32-bit values, and nothing larger is a real size.
MAX_DIM = 2**31 - 1
# TensorRT dimensions are signed 32-bit in engine bindings; a larger count or batch is never a real one.
MAX_INT32 = 2**31 - 1
# Largest integer seed: torch.Generator.manual_seed and numpy.random.default_rng both take any value below 2**63.
MAX_SEED = 2**63 - 1


def refuse(subject: str, problem: str) -> InputError:
    """InputError "``subject``: ``problem``", about the parameter named by the subject's first word."""
    first = subject.split()[0].rstrip(":") if subject.split() else ""
    return InputError(f"{subject}: {problem}", parameter=first if first.isidentifier() else None)


def check_int(value, option: str, low: int, high: int, what: str = "") -> int:
    """``value`` as an int from ``low`` to ``high`` (inclusive); InputError naming the parameter ``option``
    otherwise. A bool or a float is not an integer here (``iterations=2.5`` is a mistake, not 2)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or not low <= int(value) <= high:
        raise refuse(option, f"expected an integer from {low} to {high}{what}, got {value!r}")
    return int(value)


def check_number(value, option: str, low: float, high: float | None = None, *, above: bool = False, what: str = ""):
    """``value`` as a finite float, ``>= low`` (``> low`` with ``above``) and, when ``high`` is given, ``<= high``;
    InputError naming ``option`` otherwise (NaN and infinities included: they make every comparison pass or fail)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise refuse(option, f"expected a number, got {value!r}")
    number = float(value)
    if not math.isfinite(number):
        raise refuse(option, f"expected a finite number, got {value!r}")
    if high is not None:
        if not low <= number <= high:
            raise refuse(option, f"expected a number from {low:g} to {high:g}{what}, got {value!r}")
    elif number < low or (above and number == low):
        raise refuse(option, f"expected a finite number {'>' if above else '>='} {low:g}, got {value!r}")
    return number


def check_tolerance(value, option: str = "tolerance") -> float:
    """A tolerance in (0, 1e6]: ``0`` or NaN would make every comparison fail or pass."""
    number = check_number(value, option, 0.0, above=True)
    if number > 1e6:
        raise refuse(option, f"expected a tolerance > 0 and <= 1e6, got {value!r}")
    return number


def check_choice(value, option: str, choices: Sequence[str]) -> str:
    """``value`` must be one of ``choices`` (argparse's wording, for the same line from Python)."""
    if value not in choices:
        raise refuse(option, f"invalid choice: {value!r} (choose from {', '.join(repr(c) for c in choices)})")
    return value


def shape_of(value, what: str, rank: int | None = None) -> tuple[int, ...]:
    """A shape given as text (``'8,1,32,32'``, ``'8x1x32x32'``) or as a sequence of integers, checked by the one
    shape parser (parse_dims) so that both forms get the same message."""
    if isinstance(value, str):
        return parse_dims(value, what, rank)
    parts = list(value) if isinstance(value, Sequence) else None
    if not parts or any(isinstance(d, bool) or not isinstance(d, numbers.Integral) for d in parts):
        raise refuse(what, f"expected positive integers such as (1, 3, 224, 224), got {value!r}")
    return parse_dims(",".join(str(int(d)) for d in parts), what, rank)


_SPACE = " \t\r\n"  # spaces allowed around numbers and separators (ASCII only)


def parse_dims(text: str, what: str, rank: int | None = None) -> tuple[int, ...]:
    """'8,3,224,224' or '8x3x224x224' -> (8, 3, 224, 224): positive integers separated by ',' or by 'x' (one
    separator per shape). ``rank``: the number of dimensions required. InputError naming ``what`` otherwise.

    The one element parser for every shape the user gives (an input shape, a benchmark shape, each of the
    MIN/OPT/MAX of a profile)."""

    def error(problem: str) -> InputError:
        return refuse(what, problem) if what else InputError(problem)

    example = "B,C,H,W or BxCxHxW, e.g. 1,3,224,224" if rank == 4 else "dimensions like 8,3,224,224 or 8x3x224x224"
    raw = text if isinstance(text, str) else str(text)
    body = raw.strip(_SPACE).lower()
    separators = {c for c in body if c in "x,"}
    parts = [p.strip(_SPACE) for p in (body.split(separators.pop()) if len(separators) == 1 else [body])]
    if len(separators) > 0 or not all(p.isascii() and p.isdigit() for p in parts):
        raise error(f"expected {example} (positive integers separated by ',' or 'x'), got {raw!r}")
    dims = tuple(int(p) for p in parts)
    if rank is not None and len(dims) != rank:
        raise error(f"expected {rank} dimensions ({example}), got {len(dims)} in {raw!r}")
    if any(d < 1 or d > MAX_DIM for d in dims):
        raise error(f"every dimension must be from 1 to {MAX_DIM}, got {raw!r}")
    return dims


def format_dims(shape, separator: str = ",") -> str:
    """(1, 3, 224, 224) -> '1,3,224,224' (parse_dims reads it back)."""
    return separator.join(str(int(d)) for d in shape)


def parse_shape(text: str, option: str = "input_shape") -> tuple[int, int, int, int]:
    """'1,3,224,224' or '1x3x224x224' -> (1, 3, 224, 224); InputError naming ``option`` otherwise."""
    return parse_dims(text, option, rank=4)  # type: ignore[return-value]


# The first bytes of NumPy's two binary formats: .npy (numpy.lib.format) and .npz (a zip archive, empty or not).
_NPY_MAGIC = b"\x93NUMPY"
_ZIP_MAGICS = (b"PK\x03\x04", b"PK\x05\x06")
_SAVE_ADVICE = "save float (B, C, H, W) arrays with numpy.save (.npy) or numpy.savez (.npz)"


def load_inputs(path: str) -> list[np.ndarray]:
    """Arrays from a .npy (one input) or .npz (each array an input); InputError when unreadable. A file of another
    kind, or one holding Python objects, is refused in our words: NumPy's own message for both advises loading the
    file "unsafely" (allow_pickle), which would run code from the file."""
    if not os.path.isfile(path):
        raise InputError(f"inputs {path} does not exist", parameter="inputs")
    with open(path, "rb") as f:
        head = f.read(6)
    if not head.startswith(_NPY_MAGIC) and head[:4] not in _ZIP_MAGICS:
        raise refuse(f"inputs {path}", f"not a .npy or .npz file (NumPy's binary formats); {_SAVE_ADVICE}")
    try:
        loaded = np.load(path, allow_pickle=False)
        arrays = [loaded[k] for k in loaded.files] if hasattr(loaded, "files") else [loaded]
    except ValueError as error:
        if "pickle" not in str(error):
            raise refuse(f"inputs {path}", f"cannot be read as .npy/.npz ({error})") from None
        raise refuse(
            f"inputs {path}", f"holds Python objects (pickled data), which are not loaded; {_SAVE_ADVICE}"
        ) from None
    except Exception as error:
        raise refuse(f"inputs {path}", f"cannot be read as .npy/.npz ({error})") from None
    for a in arrays:
        if a.ndim != 4 or not np.issubdtype(a.dtype, np.floating):
            raise refuse(f"inputs {path}", f"each array must be a float (B, C, H, W) array, got {a.dtype} {a.shape}")
    return arrays
