"""Inputs for exports and validations: the shape syntax, user-given arrays, and the default inputs.

One shape syntax everywhere: ``B,C,H,W`` or ``BxCxHxW`` (the two are accepted alike and mean the same).
"""

from __future__ import annotations

import os

import numpy as np

from .errors import InputError

# Largest accepted dimension: TensorRT binds shapes as signed 32-bit values, and nothing larger is a real size.
MAX_DIM = 2**31 - 1
_SPACE = " \t\r\n"  # spaces allowed around numbers and separators (ASCII only)


def parse_dims(text: str, what: str, rank: int | None = None) -> tuple[int, ...]:
    """'8,3,224,224' or '8x3x224x224' -> (8, 3, 224, 224): positive integers separated by ',' or by 'x' (one
    separator per shape). ``rank``: the number of dimensions required. InputError naming ``what`` otherwise.

    The one element parser for every shape the user types (``--input-shape``, ``--shape``, each of the MIN/OPT/MAX
    of ``--shapes``)."""
    prefix = f"{what}: " if what else ""
    example = "B,C,H,W or BxCxHxW, e.g. 1,3,224,224" if rank == 4 else "dimensions like 8,3,224,224 or 8x3x224x224"
    raw = text if isinstance(text, str) else str(text)
    body = raw.strip(_SPACE).lower()
    separators = {c for c in body if c in "x,"}
    parts = [p.strip(_SPACE) for p in (body.split(separators.pop()) if len(separators) == 1 else [body])]
    if len(separators) > 0 or not all(p.isascii() and p.isdigit() for p in parts):
        raise InputError(f"{prefix}expected {example} (positive integers separated by ',' or 'x'), got {raw!r}")
    dims = tuple(int(p) for p in parts)
    if rank is not None and len(dims) != rank:
        raise InputError(f"{prefix}expected {rank} dimensions ({example}), got {len(dims)} in {raw!r}")
    if any(d < 1 or d > MAX_DIM for d in dims):
        raise InputError(f"{prefix}every dimension must be from 1 to {MAX_DIM}, got {raw!r}")
    return dims


def format_dims(shape, separator: str = ",") -> str:
    """(1, 3, 224, 224) -> '1,3,224,224' (parse_dims reads it back)."""
    return separator.join(str(int(d)) for d in shape)


def parse_shape(text: str, option: str = "--input-shape") -> tuple[int, int, int, int]:
    """'1,3,224,224' or '1x3x224x224' -> (1, 3, 224, 224); InputError naming ``option`` otherwise."""
    return parse_dims(text, option, rank=4)  # type: ignore[return-value]


def load_inputs(path: str) -> list[np.ndarray]:
    """Arrays from a .npy (one input) or .npz (each array an input); InputError when unreadable."""
    if not os.path.isfile(path):
        raise InputError(f"--inputs {path} does not exist")
    try:
        loaded = np.load(path, allow_pickle=False)
    except Exception as error:
        raise InputError(f"cannot read --inputs {path} as .npy/.npz: {error}") from error
    arrays = [loaded[k] for k in loaded.files] if hasattr(loaded, "files") else [loaded]
    for a in arrays:
        if a.ndim != 4 or not np.issubdtype(a.dtype, np.floating):
            raise InputError(f"--inputs {path}: each array must be a float (B, C, H, W) array, got {a.dtype} {a.shape}")
    return arrays


def default_inputs(description: dict, shape_text: str | None) -> list[np.ndarray]:
    """The shipped held-out digits for the default model, else two seeded random batches (B and max(B, 3))."""
    if shape_text is None and description.get("source") == "default":
        from .models import load_heldout_digits  # the shipped held-out digits, preprocessed

        images, _ = load_heldout_digits(count=9)
        images = images.numpy()
        return [images[:1], images[1:]]  # batch 1 and batch 8
    shape = parse_shape(shape_text or description.get("input_shape", "1,3,224,224"))
    rng = np.random.default_rng(0)
    batch3 = (max(shape[0], 3),) + shape[1:]
    return [rng.standard_normal(shape, dtype=np.float32), rng.standard_normal(batch3, dtype=np.float32)]
