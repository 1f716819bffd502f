"""The ONNX <-> TensorRT plugin contract is the same on both sides (docs/design.md §4).

Python defines it in wtconv_libs/contract.py, C++ in plugin/common/wtconvPluginContract.h; this test parses the
header (no compiler needed) and checks names, version, namespace, field names and limits agree, and that the
plugin sources spell no contract string literally (each side defines the names once).
"""

import re
from pathlib import Path

import pytest

from wtconv_libs import contract

ROOT = Path(__file__).resolve().parent.parent
HEADER = ROOT / "plugin" / "common" / "wtconvPluginContract.h"
KERNEL_HEADER = ROOT / "plugin" / "kernels" / "wtconvKernel.h"
PLUGIN_SOURCES = (
    [
        ROOT / "plugin" / "trt" / name
        for name in (
            "wtconvPlugin.cpp",
            "wtconvPlugin.h",
            "wtconvPluginEntry.cpp",
            "wtconvPluginRegistration.cpp",
            "wtconvPluginAbi.h",
            "wtconvPluginFields.cpp",
            "wtconvPluginFields.h",
            "wtconvPluginFieldsCapi.cpp",
        )
    ]
    + [
        ROOT / "plugin" / "common" / name
        for name in (
            "wtconvLayerFields.cpp",
            "wtconvLayerFields.h",
            "wtconvDeviceWeights.h",
            "wtconvDeviceWeights.cpp",
        )
    ]
    + sorted((ROOT / "plugin" / "onnxruntime").glob("wtconvOrt*"))
)

_STRING = re.compile(r'constexpr\s+char\s+const\s*\*\s*(k[A-Z0-9_]+)\s*=\s*"([^"]*)"\s*;')
_INT = re.compile(r"constexpr\s+int32_t\s+(k[A-Za-z0-9_]+)\s*=\s*(-?\d+)\s*;")


def _strip_comments(text: str) -> str:
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    return re.sub(r"//[^\n]*", "", text)


@pytest.fixture(scope="module")
def cpp():
    text = _strip_comments(HEADER.read_text())
    strings = dict(_STRING.findall(text))
    ints = {name: int(value) for name, value in _INT.findall(text)}
    assert strings, f"no string constants parsed from {HEADER}"
    return strings, ints


def test_identity_agrees(cpp):
    strings, _ = cpp
    assert strings["kPLUGIN_NAME"] == contract.PLUGIN_NAME == contract.OP_TYPE
    assert strings["kPLUGIN_VERSION"] == contract.PLUGIN_VERSION
    assert strings["kPLUGIN_NAMESPACE"] == contract.PLUGIN_NAMESPACE
    assert strings["kONNX_DOMAIN"] == contract.ONNX_DOMAIN


def test_every_python_field_has_the_same_cpp_field(cpp):
    strings, _ = cpp
    python_fields = {name: value for name, value in vars(contract).items() if name.startswith("FIELD_")}
    assert python_fields, "contract.py defines no FIELD_* names"
    for name, value in python_fields.items():
        assert f"k{name}" in strings, f"{HEADER.name} lacks k{name} (contract.py {name} = {value!r})"
        assert strings[f"k{name}"] == value, f"k{name}: C++ {strings[f'k{name}']!r} != Python {value!r}"
    assert set(contract.INT_FIELDS) | set(contract.FLOAT_FIELDS) <= set(strings.values())


def test_engine_only_fields_cannot_collide_with_attributes(cpp):
    strings, _ = cpp
    python_values = {value for name, value in vars(contract).items() if name.startswith("FIELD_")}
    cpp_only = {v for k, v in strings.items() if k.startswith("kFIELD_") and v not in python_values}
    # Only the serialization bookkeeping fields are C++-only, and no ONNX attribute can take their names.
    assert cpp_only == {strings["kFIELD_SERIALIZATION_VERSION"], strings["kFIELD_WEIGHTS_CHECKSUM"]}
    assert all(v.startswith("wtconv_") for v in cpp_only)


def test_limits_agree(cpp):
    _, ints = cpp
    assert ints["kMAX_KERNEL_SIZE"] == contract.MAX_KERNEL_SIZE
    assert ints["kMAX_WT_LEVELS"] == contract.MAX_WT_LEVELS
    assert ints["kSERIALIZATION_VERSION"] >= 1
    kernel = {
        name: int(value)
        for name, value in re.findall(
            r"constexpr\s+int32_t\s+(k\w+)\s*=\s*(\d+)\s*;", _strip_comments(KERNEL_HEADER.read_text())
        )
    }
    assert kernel["kMaxKernelSize"] == contract.MAX_KERNEL_SIZE
    assert kernel["kMaxLevels"] == contract.MAX_WT_LEVELS
    source = _strip_comments((KERNEL_HEADER.parent / "wtconvKernel.cu").read_text())
    shift, less = re.search(r"kMaxDim\s*=\s*\(int64_t\{1\}\s*<<\s*(\d+)\)\s*-\s*(\d+)\s*;", source).groups()
    assert (1 << int(shift)) - int(less) == contract.MAX_DIM


def test_plugin_sources_spell_no_contract_string(cpp):
    strings, _ = cpp
    names = {v for k, v in strings.items() if (k.startswith("kFIELD_") or k in ("kPLUGIN_NAME", "kONNX_DOMAIN")) and v}
    for source in PLUGIN_SOURCES:
        text = _strip_comments(source.read_text())
        literals = set(re.findall(r'"([^"\\]*)"', text))
        assert not (literals & names), f"{source.name} spells {sorted(literals & names)}; use wtconv::contract"
