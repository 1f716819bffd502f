"""Property-based tests (Hypothesis) of what parses user text: the shape syntax (wtconv_core.inputs), the
optimisation-profile syntax (trt_engine.profiles), the command line's argument types (wtconv_trt.arguments) and the
jobs' checks of option values (wtconv_core.inputs).

Properties: formatting then parsing gives the value back (in both shape syntaxes, B,C,H,W and BxCxHxW); any text
either parses to a value that satisfies the documented constraints or raises the documented error (InputError,
argparse.ArgumentTypeError) and never any other exception; a Python value given to a job likewise.
"""

from __future__ import annotations

import argparse
import math
import re

import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from trt_engine.profiles import InputRange, Profile, format_profile, parse_profile  # noqa: E402
from wtconv_core.errors import InputError  # noqa: E402
from wtconv_core.inputs import (  # noqa: E402
    MAX_DIM,
    MAX_INT32,
    MAX_SEED,
    check_int,
    check_number,
    check_tolerance,
    format_dims,
    parse_dims,
    parse_shape,
)
from wtconv_trt import arguments  # noqa: E402

settings.register_profile("wtconv", max_examples=300, deadline=None)
settings.load_profile("wtconv")

dims = st.integers(min_value=1, max_value=MAX_DIM)
shapes = st.lists(dims, min_size=1, max_size=6).map(tuple)
# Text made of the characters shape and profile syntax uses, plus a few that it does not: finds the edge cases
# (empty parts, doubled separators, signs, whitespace, non-ASCII digits) far more often than arbitrary text.
shape_alphabet = st.sampled_from(list("0123456789x,X/: -+._") + ["١", "²", "\t", "e", "n"])
shape_like = st.text(alphabet=shape_alphabet, max_size=40)
any_text = st.one_of(shape_like, st.text(max_size=40))


@given(shapes, st.sampled_from([",", "x", "X", " , ", " x "]))
def test_shape_round_trip(shape, separator):
    text = separator.join(str(d) for d in shape)
    assert parse_dims(text, "shape") == shape
    assert parse_dims(format_dims(shape), "shape") == shape
    assert parse_dims(format_dims(shape, "x"), "shape") == shape


@given(st.tuples(dims, dims, dims, dims), st.sampled_from([",", "x"]))
def test_input_shape_round_trip(shape, separator):
    assert parse_shape(separator.join(map(str, shape))) == shape


@given(any_text)
def test_shape_parser_accepts_only_positive_integers(text):
    try:
        shape = parse_dims(text, "shape")
    except InputError as error:
        assert str(error).startswith("shape: ") and error.parameter == "shape" and "\n" not in str(error)
        return
    assert shape and all(isinstance(d, int) and 1 <= d <= MAX_DIM for d in shape)
    # Independent oracle: ASCII digit groups with optional spaces, one separator kind ('x' or ','), and the
    # values are exactly those groups (nothing guessed, nothing dropped).
    lowered = text.lower()
    assert re.fullmatch(r"[ \t\r\n]*[0-9]+[ \t\r\n]*(?:[x,][ \t\r\n]*[0-9]+[ \t\r\n]*)*", lowered)
    assert len(set(re.findall(r"[x,]", lowered))) <= 1
    assert shape == tuple(int(group) for group in re.findall(r"[0-9]+", lowered))


@given(any_text)
def test_input_shape_parser_is_rank_four_or_input_error(text):
    try:
        shape = parse_shape(text)
    except InputError as error:
        assert str(error).startswith("input_shape: ") and "B,C,H,W" in str(error)
        return
    assert len(shape) == 4 and min(shape) >= 1


def _range(rank):
    """(min, opt, max) of one input: same rank, min <= opt <= max in every dimension."""
    triple = st.tuples(dims, dims, dims).map(sorted)
    return st.lists(triple, min_size=rank, max_size=rank).map(
        lambda per_dim: InputRange(*(tuple(t[i] for t in per_dim) for i in range(3)))
    )


# Input names: anything without the characters the syntax reserves between inputs (',' and '/') and without
# surrounding whitespace; ':' is allowed (ONNX names are free text; the dimensions follow the last ':').
names = st.text(
    alphabet=st.characters(blacklist_characters=",/", blacklist_categories=("Cs", "Zs", "Cc")), min_size=1, max_size=12
).filter(lambda n: n == n.strip() and n[-1] != ":")


@st.composite
def profiles(draw):
    count = draw(st.integers(1, 3))
    input_names = draw(st.lists(names, min_size=count, max_size=count, unique=True))
    return Profile({name: draw(st.integers(1, 5).flatmap(_range)) for name in input_names})


@given(profiles())
def test_profile_round_trip(profile):
    assert parse_profile(format_profile(profile)) == profile


@given(profiles())
def test_profile_round_trip_with_comma_dimensions(profile):
    """B,C,H,W dimensions inside --shapes: a comma starts the next input only before NAME:."""
    text = ",".join(
        f"{name}:" + "/".join(format_dims(s) for s in (r.min, r.opt, r.max)) for name, r in profile.inputs.items()
    )
    assert parse_profile(text) == profile


@given(st.integers(1, 5).flatmap(_range))
def test_unnamed_profile_binds_to_the_only_input(r):
    text = "/".join(format_dims(s, "x") for s in (r.min, r.opt, r.max))
    assert parse_profile(text, ["input"]) == Profile({"input": r})


@given(st.one_of(any_text, st.builds(lambda a, b, c: f"input:{a}/{b}/{c}", shape_like, shape_like, shape_like)))
def test_profile_parser_raises_only_input_error(text):
    try:
        profile = parse_profile(text)
    except InputError as error:
        assert str(error).startswith("shapes") and error.parameter == "shapes" and "\n" not in str(error)
        return
    for r in profile.inputs.values():
        assert len(r.min) == len(r.opt) == len(r.max)
        assert all(a <= b <= c for a, b, c in zip(r.min, r.opt, r.max, strict=False))


# What the command line does with an option's text: the argument's syntax (wtconv_trt.arguments), then the job's
# check of the value (wtconv_core.inputs), the same check a Python caller of the job gets.
INT_OPTIONS = [
    ("positive", lambda v: check_int(v, "count", 1, MAX_INT32), 1, MAX_INT32),
    ("seed", lambda v: check_int(v, "seed", 0, MAX_SEED), 0, MAX_SEED),
    ("port", lambda v: check_int(v, "http_port", 1, 65535), 1, 65535),
    ("non_negative", lambda v: check_int(v, "threads", 0, MAX_INT32), 0, MAX_INT32),
]


@pytest.mark.parametrize("name, check, low, high", INT_OPTIONS, ids=[o[0] for o in INT_OPTIONS])
@given(st.one_of(any_text, st.integers().map(str), st.floats().map(str)))
def test_integer_options_in_range_or_one_error(name, check, low, high, text):
    try:
        value = check(arguments.integer(text))
    except (argparse.ArgumentTypeError, InputError) as error:
        assert "expected" in str(error) and "\n" not in str(error)
        return
    assert isinstance(value, int) and low <= value <= high
    digits = re.fullmatch(r"[ \t]*([+-]?)([0-9]+)[ \t]*", text)  # only decimal ASCII integers are accepted
    assert digits and value == int(digits.group(2)) * (-1 if digits.group(1) == "-" else 1)


FLOAT_OPTIONS = [
    ("positive", lambda v: check_number(v, "x", 0.0, above=True), 0.0),
    ("tolerance", check_tolerance, 0.0),
    ("non_negative", lambda v: check_number(v, "atol", 0.0), None),
]


@pytest.mark.parametrize("name, check, minimum", FLOAT_OPTIONS, ids=[o[0] for o in FLOAT_OPTIONS])
@given(st.one_of(any_text, st.floats().map(str), st.integers().map(str)))
def test_float_options_finite_and_in_range_or_one_error(name, check, minimum, text):
    try:
        value = check(arguments.number(text))
    except (argparse.ArgumentTypeError, InputError) as error:
        assert "expected" in str(error) and "\n" not in str(error)
        return
    assert math.isfinite(value)
    assert value > minimum if minimum is not None else value >= 0


@given(st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(), st.booleans(), st.text(max_size=5)))
def test_value_checks_take_python_values_too(value):
    """From Python a job gets values, not text: a bool, a string, NaN or an infinity is refused in one line."""
    try:
        got = check_number(value, "warmup_ms", 0.0, 600_000.0)
    except InputError as error:
        assert str(error).startswith("warmup_ms: expected") and error.parameter == "warmup_ms"
        assert "\n" not in str(error)
        return
    assert not isinstance(value, (bool, str)) and math.isfinite(got) and 0 <= got <= 600_000


@given(
    st.one_of(any_text, st.lists(st.integers(-5, 2000), min_size=1, max_size=5).map(lambda xs: ",".join(map(str, xs))))
)
def test_gpu_list_or_one_error(text):
    from wtconv_serving.repositories.triton_config import check_gpus

    try:
        gpus = check_gpus(arguments.gpu_list(text))
    except (argparse.ArgumentTypeError, InputError):
        return
    assert gpus and len(set(gpus)) == len(gpus) and all(0 <= g <= 1023 for g in gpus)
