"""Inputs for exports and validations: the shape syntax, user-given arrays, and the default inputs.

One shape syntax everywhere: ``B,C,H,W`` or ``BxCxHxW`` (the two are accepted alike and mean the same).
"""

from __future__ import annotations

import os

import numpy as np

from .errors import InputError


def parse_shape(text: str, option: str = "--input-shape") -> tuple[int, int, int, int]:
    """'1,3,224,224' or '1x3x224x224' -> (1, 3, 224, 224); InputError naming ``option`` otherwise."""
    parts = text.replace("x", ",").split(",")
    try:
        shape = tuple(int(p) for p in parts)
    except ValueError:
        shape = ()
    if len(shape) != 4 or min(shape) < 1:
        raise InputError(f"{option} must be B,C,H,W with positive integers (e.g. 1,3,224,224), got {text!r}")
    return shape  # type: ignore[return-value]


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
