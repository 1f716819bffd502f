"""Optimisation profiles: parse ``--shapes``, check them against the network inputs, pick one for a shape.

A TensorRT optimisation profile gives, for every input with dynamic dimensions, a minimum, an optimum and a
maximum shape (``IOptimizationProfile.set_shape(input, min, opt, max)``); the engine accepts any shape
between min and max, dimension by dimension, and is tuned for opt. An engine may hold several profiles.

Command-line form (one ``--shapes`` per profile, repeatable)::

    --shapes input:1x3x224x224/8x3x224x224/32x3x224x224
    --shapes 1x1x32x32/8x1x32x32/32x1x32x32           # name may be left out when the model has one input
    --shapes a:1x3x8x8/1x3x8x8/4x3x8x8,b:1x4/1x4/4x4   # several inputs: comma-separated
    --shapes input:1,3,224,224/8,3,224,224/32,3,224,224  # B,C,H,W works too (wtconv_core.inputs.parse_dims)

A comma starts the next input only where a ``NAME:`` follows it, so both dimension syntaxes work with several
inputs; input names containing ',' or '/' cannot be given here.

No TensorRT here: everything in this module runs and is tested on the CPU.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from wtconv_core.errors import InputError
from wtconv_core.inputs import parse_dims as _parse_dims

Shape = tuple[int, ...]


@dataclass(frozen=True)
class InputRange:
    """min/opt/max shape of one input within one profile."""

    min: Shape
    opt: Shape
    max: Shape

    def contains(self, shape) -> bool:
        shape = tuple(int(d) for d in shape)
        return len(shape) == len(self.min) and all(
            lo <= d <= hi for lo, d, hi in zip(self.min, shape, self.max, strict=False)
        )

    def to_json(self) -> dict:
        return {"min": list(self.min), "opt": list(self.opt), "max": list(self.max)}

    @staticmethod
    def from_json(obj: dict) -> InputRange:
        return InputRange(tuple(obj["min"]), tuple(obj["opt"]), tuple(obj["max"]))


@dataclass(frozen=True)
class Profile:
    """One optimisation profile: input name -> InputRange (insertion order = the user's order)."""

    inputs: dict = field(default_factory=dict)

    def contains(self, shapes: dict) -> bool:
        return all(name in self.inputs and self.inputs[name].contains(shape) for name, shape in shapes.items())

    def to_json(self) -> dict:
        return {name: r.to_json() for name, r in self.inputs.items()}

    @staticmethod
    def from_json(obj: dict) -> Profile:
        return Profile({name: InputRange.from_json(r) for name, r in obj.items()})

    def describe(self) -> str:
        return ", ".join(
            f"{name}: {format_shape(r.min)} / {format_shape(r.opt)} / {format_shape(r.max)}"
            for name, r in self.inputs.items()
        )


# A comma followed by NAME: (text without ',' or '/' up to a ':') starts the next input's range.
_NEXT_INPUT = re.compile(r",(?=[^,/]*:)")


def format_shape(shape) -> str:
    return "x".join(str(int(d)) for d in shape)


def format_profile(profile: Profile) -> str:
    """The ``--shapes`` text of a profile (parse_profile reads it back)."""
    return ",".join(
        f"{name + ':' if name else ''}{format_shape(r.min)}/{format_shape(r.opt)}/{format_shape(r.max)}"
        for name, r in profile.inputs.items()
    )


def parse_dims(text: str, what: str) -> Shape:
    """'8x3x224x224' or '8,3,224,224' -> (8, 3, 224, 224); every dimension a positive integer (InputError)."""
    return _parse_dims(text, what)


def _shapes_error(message: str) -> InputError:
    return InputError(message, parameter="shapes")


def parse_profile(text: str, input_names=None) -> Profile:
    """Parse one ``--shapes`` value into a Profile (checks min <= opt <= max and equal ranks).

    ``input_names``: the model's input names, when known; a spec without a name is allowed only when the
    model has exactly one input (or, when the names are unknown, for a single spec)."""
    if not text or not text.strip():
        raise _shapes_error(
            "shapes: empty value; expected NAME:MIN/OPT/MAX, e.g. input:1x3x224x224/8x3x224x224/32x3x224x224"
        )
    ranges = {}
    parts = _NEXT_INPUT.split(text)
    for part in parts:
        part = part.strip()
        # The name may itself contain ':' (ONNX names are free text): split at the last one.
        name, sep, dims = part.rpartition(":")
        if not sep:
            name, dims = None, part
        pieces = dims.split("/")
        if len(pieces) != 3:
            raise _shapes_error(
                f"shapes {text!r}: expected three shapes MIN/OPT/MAX separated by '/' (several inputs: "
                f"NAME:MIN/OPT/MAX,NAME:...), got {len(pieces)} in {part!r}"
            )
        if name is None:
            if input_names is not None and len(input_names) != 1:
                raise _shapes_error(
                    f"shapes {text!r}: the model has {len(input_names)} inputs "
                    f"({', '.join(input_names)}); name each one: NAME:MIN/OPT/MAX,NAME:..."
                )
            if len(parts) > 1:
                raise _shapes_error(f"shapes {text!r}: with several inputs, name each one: NAME:MIN/OPT/MAX")
            name = input_names[0] if input_names else ""
        label = f"shapes {name or '(input)'}"
        mn, opt, mx = (parse_dims(p, f"{label} {what}") for p, what in zip(pieces, ("min", "opt", "max"), strict=False))
        if not (len(mn) == len(opt) == len(mx)):
            raise _shapes_error(
                f"{label}: min, opt and max must have the same rank, got "
                f"{format_shape(mn)} / {format_shape(opt)} / {format_shape(mx)}"
            )
        for i, (a, b, c) in enumerate(zip(mn, opt, mx, strict=False)):
            if not a <= b <= c:
                raise _shapes_error(
                    f"{label}: dimension {i} must satisfy min <= opt <= max, got {a} / {b} / {c} "
                    f"(in {format_shape(mn)} / {format_shape(opt)} / {format_shape(mx)})"
                )
        if name in ranges:
            raise _shapes_error(f"shapes {text!r}: input {name!r} appears twice in one profile")
        ranges[name] = InputRange(mn, opt, mx)
    return Profile(ranges)


def check_profile_against_inputs(profile: Profile, inputs: dict) -> Profile:
    """Check a profile against the network's inputs {name: shape with -1 (or None / a string) for dynamic dims}.

    Every dynamic input must be covered; names must exist; ranks must match; a static dimension must equal the
    profile's value. Returns the profile with an unnamed single-input spec bound to the input's name."""
    if "" in profile.inputs:
        if len(inputs) != 1:
            raise _shapes_error(f"shapes: the model has {len(inputs)} inputs ({', '.join(inputs)}); name each one")
        profile = Profile({next(iter(inputs)): profile.inputs[""]})
    for name in profile.inputs:
        if name not in inputs:
            raise _shapes_error(
                f"shapes: the model has no input named {name!r}; its inputs are {', '.join(repr(n) for n in inputs)}"
            )
    for name, dims in inputs.items():
        dims = tuple(dims)
        dynamic = [i for i, d in enumerate(dims) if not _is_static(d)]
        if name not in profile.inputs:
            if dynamic:
                raise _shapes_error(
                    f"shapes: input {name!r} has dynamic dimensions {_show(dims)} and no range; add {name}:MIN/OPT/MAX"
                )
            continue
        r = profile.inputs[name]
        if len(r.min) != len(dims):
            raise _shapes_error(
                f"shapes {name}: the model's input has rank {len(dims)} {_show(dims)}, the profile "
                f"gives rank {len(r.min)} ({format_shape(r.min)})"
            )
        for i, d in enumerate(dims):
            if _is_static(d) and not (r.min[i] == r.opt[i] == r.max[i] == int(d)):
                raise _shapes_error(
                    f"shapes {name}: dimension {i} of the model's input is fixed at {int(d)} "
                    f"{_show(dims)}, the profile gives {r.min[i]} / {r.opt[i]} / {r.max[i]}"
                )
    return profile


def default_profile(inputs: dict, batch=(1, 8, 32)) -> Profile:
    """The profile used when no ``--shapes`` is given: batch 1/8/32 when only the batch (first) dimension is
    dynamic; otherwise the user must say (a resolution range is a real choice)."""
    ranges = {}
    for name, dims in inputs.items():
        dims = tuple(dims)
        dynamic = [i for i, d in enumerate(dims) if not _is_static(d)]
        if not dynamic:
            ranges[name] = InputRange(*(tuple(int(d) for d in dims),) * 3)
        elif dynamic == [0]:
            rest = tuple(int(d) for d in dims[1:])
            ranges[name] = InputRange(*((b,) + rest for b in batch))
        else:
            example = "MIN/OPT/MAX"
            if len(dims) == 4:
                c, h, w = (str(d) if _is_static(d) else label for d, label in zip(dims[1:], "CHW", strict=False))
                example = "/".join(f"{b}x{c}x{h}x{w}" for b in batch)
            raise InputError(
                f"input {name!r} has dynamic dimensions {_show(dims)} beyond the batch; give the range "
                f"with shapes={name}:MIN/OPT/MAX, e.g. shapes={name}:{example} with the image size "
                f"for H and W (one per profile)"
            )
    return Profile(ranges)


def find_profile(profiles, shapes: dict) -> int:
    """Index of the first profile that accepts ``shapes`` ({input: shape}); InputError naming the ranges if none."""
    for index, profile in enumerate(profiles):
        if profile.contains(shapes):
            return index
    wanted = ", ".join(f"{n}: {format_shape(s)}" for n, s in shapes.items())
    have = "; ".join(f"profile {i}: {p.describe()}" for i, p in enumerate(profiles)) or "no profiles"
    raise InputError(
        f"shape {wanted} is outside every optimisation profile of the engine ({have}); use a shape in "
        f"range, or rebuild the engine with profiles covering it (wtconv-trt build --shapes)"
    )


def _is_static(d) -> bool:
    return isinstance(d, int) and d >= 0


def _show(dims) -> str:
    return "(" + ", ".join(str(d) if _is_static(d) else "?" for d in dims) + ")"
