"""Optimisation profile parsing and checks (trt_engine.profiles): CPU only."""

import pytest

from trt_engine.profiles import (
    InputRange,
    Profile,
    check_profile_against_inputs,
    default_profile,
    find_profile,
    format_profile,
    parse_dims,
    parse_profile,
)
from wtconv_core.errors import InputError


def test_named_profile():
    p = parse_profile("input:1x3x224x224/8x3x224x224/32x3x224x224")
    r = p.inputs["input"]
    assert (r.min, r.opt, r.max) == ((1, 3, 224, 224), (8, 3, 224, 224), (32, 3, 224, 224))
    assert p.to_json() == {"input": {"min": [1, 3, 224, 224], "opt": [8, 3, 224, 224], "max": [32, 3, 224, 224]}}
    assert Profile.from_json(p.to_json()) == p


def test_unnamed_profile_binds_to_the_single_input():
    assert list(parse_profile("1x1x32x32/8x1x32x32/32x1x32x32", ["input"]).inputs) == ["input"]
    p = check_profile_against_inputs(parse_profile("1x1x32x32/8x1x32x32/32x1x32x32"), {"x": (-1, 1, 32, 32)})
    assert list(p.inputs) == ["x"]


def test_several_inputs_and_names_with_colons():
    p = parse_profile("a:1x4/2x4/8x4,b:1x2/1x2/1x2")
    assert list(p.inputs) == ["a", "b"]
    assert parse_profile("ns:x:1x4/1x4/1x4").inputs["ns:x"].max == (1, 4)


@pytest.mark.parametrize(
    "text, message",
    [
        ("input:1x3x224x224/8x3x224x224", "three shapes"),
        ("input:1x3x224x224/8x3x224x224/4x3x224x224", "min <= opt <= max"),
        ("input:2x3x8x8/1x3x8x8/4x3x8x8", "min <= opt <= max"),
        ("input:1x3x8/1x3x8x8/4x3x8x8", "same rank"),
        ("input:1x3x8x8/1x3x8x8/4x3xAx8", "dimensions like"),
        ("input:0x3x8x8/1x3x8x8/4x3x8x8", "from 1 to"),
        ("input:1x3x8x8/1,3x8x8/4x3x8x8", "separated by ',' or 'x'"),
        ("1x4/1x4/1x4,1x4/1x4/1x4", "three shapes"),
        ("a:1x4/1x4/1x4,a:1x4/1x4/1x4", "twice"),
        ("", "empty"),
    ],
)
def test_profile_errors(text, message):
    with pytest.raises(ValueError, match=message):
        parse_profile(text)


def test_unnamed_spec_with_several_inputs_is_refused():
    with pytest.raises(ValueError, match="name each one"):
        parse_profile("1x4/1x4/1x4", ["a", "b"])


def test_checks_against_network_inputs():
    inputs = {"input": (-1, 3, 224, 224)}
    good = parse_profile("input:1x3x224x224/8x3x224x224/32x3x224x224")
    assert check_profile_against_inputs(good, inputs) == good
    with pytest.raises(ValueError, match="no input named 'images'"):
        check_profile_against_inputs(parse_profile("images:1x3x224x224/1x3x224x224/1x3x224x224"), inputs)
    with pytest.raises(ValueError, match="fixed at 3"):
        check_profile_against_inputs(parse_profile("input:1x1x224x224/1x1x224x224/1x1x224x224"), inputs)
    with pytest.raises(ValueError, match="rank 4"):
        check_profile_against_inputs(parse_profile("input:1x3x224/1x3x224/1x3x224"), inputs)
    with pytest.raises(ValueError, match="no range"):
        check_profile_against_inputs(parse_profile("a:1x4/1x4/1x4"), {"a": (1, 4), "b": (-1, 4)})


def test_default_profile():
    p = default_profile({"input": (-1, 1, 32, 32)})
    assert p.inputs["input"] == InputRange((1, 1, 32, 32), (8, 1, 32, 32), (32, 1, 32, 32))
    assert default_profile({"input": (2, 1, 32, 32)}).inputs["input"].opt == (2, 1, 32, 32)
    with pytest.raises(ValueError, match="shapes=input:MIN/OPT/MAX"):
        default_profile({"input": (-1, 3, -1, -1)})


def test_find_profile_and_out_of_range_message():
    profiles = [
        parse_profile("input:1x3x64x64/8x3x64x64/16x3x64x64"),
        parse_profile("input:1x3x224x224/8x3x224x224/32x3x224x224"),
    ]
    assert find_profile(profiles, {"input": (4, 3, 64, 64)}) == 0
    assert find_profile(profiles, {"input": (32, 3, 224, 224)}) == 1
    with pytest.raises(
        ValueError, match="outside every optimisation profile.*rebuild the engine with profiles covering"
    ):
        find_profile(profiles, {"input": (64, 3, 224, 224)})


def test_parse_dims():
    assert parse_dims("8X3x2x2", "x") == (8, 3, 2, 2)
    assert parse_dims("8,3", "--shape") == (8, 3)  # one shape syntax everywhere: B,C,H,W and BxCxHxW alike
    for bad in ("8,3x2", "8x", "", "-1x2", "2**3"):
        with pytest.raises(InputError, match="--shape"):
            parse_dims(bad, "--shape")


def test_comma_dimensions_in_profiles():
    """--shapes takes B,C,H,W dimensions too, also with several inputs (a comma before NAME: starts the next)."""
    assert parse_profile("input:1,3,8,8/2,3,8,8/4,3,8,8") == parse_profile("input:1x3x8x8/2x3x8x8/4x3x8x8")
    p = parse_profile("a:1,4/2,4/8,4,ns:b:1x2/1x2/1x2")
    assert p.inputs["a"] == InputRange((1, 4), (2, 4), (8, 4)) and p.inputs["ns:b"].max == (1, 2)
    assert parse_profile(format_profile(p)) == p
