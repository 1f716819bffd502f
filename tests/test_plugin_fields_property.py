"""Property-based test (Hypothesis) of the plugin's field decoding: generated PluginField sets, valid and broken one
way at a time, through the C++ decoder createPlugin uses (plugin/trt/wtconvPluginFields.cpp) behind its extern "C"
entry (wtconvPluginFieldsCapi.cpp), called with ctypes. No TensorRT library and no GPU: the decoder is compiled
here from the sources with the TensorRT headers.

The oracle is the contract as wtconv_libs/contract.py states it, written again in Python: which field sets are
valid, what they decode to (kernel size, levels, stride, C from base_bias), and the FNV-1a checksum of the fp32
weights an engine serializes. A valid set must decode to exactly that; a set broken in one way must be refused
with one line starting "WTConv2d plugin: " that names the field at fault; nothing may crash.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

hypothesis = pytest.importorskip("hypothesis")
from conftest import REPO, TENSORRT_HEADERS  # noqa: E402
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from wtconv_libs import contract  # noqa: E402

# nvinfer1::PluginFieldType values (NvInferRuntimeBase.h / NvInferRuntimePlugin.h, stable since TensorRT 8).
FLOAT16, FLOAT32, INT8, INT32, CHAR, INT64 = 0, 1, 3, 5, 6, 10
SERIALIZATION_VERSION = "wtconv_serialization_version"
CHECKSUM = "wtconv_weights_checksum"


def _headers() -> Path | None:
    env = os.environ.get("WTCONV_TRT_HEADERS") or os.environ.get("TensorRT_ROOT")
    candidates = [Path(p) for p in env.split(os.pathsep)] if env else sorted(TENSORRT_HEADERS.glob("*"))
    return next((p / "include" for p in candidates if (p / "include" / "NvInferRuntime.h").is_file()), None)


def _cuda_include() -> Path | None:
    roots = [os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"]
    nvcc = shutil.which("nvcc")
    if nvcc:
        roots.append(str(Path(nvcc).resolve().parent.parent))
    return next(
        (Path(r) / "include" for r in roots if r and (Path(r) / "include" / "cuda_runtime_api.h").is_file()), None
    )


@pytest.fixture(scope="module")
def decoder(tmp_path_factory):
    headers, cuda, compiler = _headers(), _cuda_include(), shutil.which("g++") or shutil.which("c++")
    if headers is None:
        pytest.skip(f"TensorRT headers not found ({TENSORRT_HEADERS}/<version>/include or WTCONV_TRT_HEADERS)")
    if cuda is None or compiler is None:
        pytest.skip("a C++ compiler and the CUDA headers (cuda_runtime_api.h, included by TensorRT's) are needed")
    library = tmp_path_factory.mktemp("fields") / "libwtconv_plugin_fields.so"
    common, trt = REPO / "plugin" / "common", REPO / "plugin" / "trt"
    sources = [trt / "wtconvPluginFields.cpp", common / "wtconvLayerFields.cpp", trt / "wtconvPluginFieldsCapi.cpp"]
    build = subprocess.run(
        [
            compiler,
            "-std=c++17",
            "-O1",
            "-shared",
            "-fPIC",
            "-o",
            str(library),
            *map(str, sources),
            f"-I{common}",
            f"-I{trt}",
            "-isystem",
            str(headers),
            "-isystem",
            str(cuda),
        ],
        capture_output=True,
        text=True,
    )
    assert build.returncode == 0, build.stderr[-3000:]
    lib = ctypes.CDLL(str(library))
    lib.wtconvDecodePluginFields.restype = ctypes.c_int32
    lib.wtconvDecodePluginFields.argtypes = [
        ctypes.c_int32,
        ctypes.POINTER(ctypes.c_char_p),
        ctypes.POINTER(ctypes.c_int32),
        ctypes.POINTER(ctypes.c_int32),
        ctypes.POINTER(ctypes.c_void_p),
        ctypes.c_int32,
        ctypes.POINTER(ctypes.c_int32),
        ctypes.POINTER(ctypes.c_int32),
        ctypes.POINTER(ctypes.c_int32),
        ctypes.POINTER(ctypes.c_int64),
        ctypes.POINTER(ctypes.c_int32),
        ctypes.c_char_p,
        ctypes.c_size_t,
    ]
    return lib


def decode(lib, fields, runtime: bool):
    """fields: [(name, type, length, numpy buffer or None)] -> (status, (k, levels, stride, C, channels_last),
    message)."""
    n = len(fields)
    names = (ctypes.c_char_p * max(n, 1))(*[f[0].encode() for f in fields])
    types = (ctypes.c_int32 * max(n, 1))(*[f[1] for f in fields])
    lengths = (ctypes.c_int32 * max(n, 1))(*[f[2] for f in fields])
    data = (ctypes.c_void_p * max(n, 1))(*[None if f[3] is None else f[3].ctypes.data for f in fields])
    k, levels, stride, channels = ctypes.c_int32(), ctypes.c_int32(), ctypes.c_int32(), ctypes.c_int64()
    channels_last = ctypes.c_int32(-1)
    message = ctypes.create_string_buffer(4096)
    status = lib.wtconvDecodePluginFields(
        n,
        names,
        types,
        lengths,
        data,
        int(runtime),
        ctypes.byref(k),
        ctypes.byref(levels),
        ctypes.byref(stride),
        ctypes.byref(channels),
        ctypes.byref(channels_last),
        message,
        len(message),
    )
    decoded = (k.value, levels.value, stride.value, channels.value, channels_last.value)
    return status, decoded, message.value.decode()


def fnv1a(*arrays) -> int:
    """The serialized checksum: FNV-1a (32 bit) over the bytes of the fp32 weights, as a signed int32."""
    h = 2166136261
    for a in arrays:
        for byte in np.ascontiguousarray(a, dtype="<f4").tobytes():
            h = ((h ^ byte) * 16777619) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


@st.composite
def layer(draw):
    k = draw(st.sampled_from(range(1, contract.MAX_KERNEL_SIZE + 1, 2)))
    levels = draw(st.integers(1, contract.MAX_WT_LEVELS))
    stride = draw(st.integers(1, 4))
    channels = draw(st.integers(1, 3))
    channels_last = draw(st.sampled_from([None, 0, 1]))  # None: the optional field absent (read as 0)
    return k, levels, stride, channels, channels_last


def int_field(name, value, kind):
    return (name, kind, 1, np.array([value], dtype=np.int32 if kind == INT32 else np.int64))


def valid_fields(draw, k, levels, stride, channels, runtime, channels_last=None):
    """A valid field set for the layer, in a drawn order, with drawn int and float encodings."""
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    weights = {
        contract.FIELD_BASE_WEIGHT: rng.standard_normal(channels * k * k),
        contract.FIELD_BASE_BIAS: rng.standard_normal(channels),
        contract.FIELD_WAVELET_WEIGHT: rng.standard_normal(levels * 4 * channels * k * k),
    }
    fields, fp32 = [], {}
    for name, values in weights.items():
        half = draw(st.booleans())
        buffer = values.astype(np.float16 if half else np.float32)
        fp32[name] = buffer.astype(np.float32)  # what the decoder holds after reading
        fields.append((name, FLOAT16 if half else FLOAT32, len(buffer), buffer))
    for name, value in (
        (contract.FIELD_KERNEL_SIZE, k),
        (contract.FIELD_WT_LEVELS, levels),
        (contract.FIELD_STRIDE, stride),
    ):
        fields.append(int_field(name, value, draw(st.sampled_from([INT32, INT64]))))
    if channels_last is not None:
        fields.append(int_field(contract.FIELD_CHANNELS_LAST, channels_last, draw(st.sampled_from([INT32, INT64]))))
    if draw(st.booleans()):  # the ONNX parser may pass these on; the decoder skips them
        fields.append((contract.FIELD_PLUGIN_VERSION, CHAR, 1, np.frombuffer(b"1", dtype=np.uint8).copy()))
    if runtime:
        checksum = fnv1a(
            fp32[contract.FIELD_BASE_WEIGHT], fp32[contract.FIELD_BASE_BIAS], fp32[contract.FIELD_WAVELET_WEIGHT]
        )
        fields.append(int_field(SERIALIZATION_VERSION, 1, INT32))
        fields.append(int_field(CHECKSUM, checksum, INT32))
    return draw(st.permutations(fields))


@settings(max_examples=200, deadline=None)
@given(st.data(), layer(), st.booleans())
def test_valid_fields_decode_to_the_layer(decoder, data, config, runtime):
    k, levels, stride, channels, channels_last = config
    fields = valid_fields(data.draw, k, levels, stride, channels, runtime, channels_last)
    status, decoded, message = decode(decoder, fields, runtime)
    assert status == 0, message
    assert decoded == (k, levels, stride, channels, channels_last or 0)


def _replace(fields, name, new):
    return [new if f[0] == name else f for f in fields]


@st.composite
def broken(draw):
    """(fields, runtime, the field name the message must name) with exactly one thing wrong."""
    k, levels, stride, channels, channels_last = draw(layer())
    runtime = draw(st.booleans())
    fields = valid_fields(draw, k, levels, stride, channels, runtime, channels_last)
    ints = [contract.FIELD_KERNEL_SIZE, contract.FIELD_WT_LEVELS, contract.FIELD_STRIDE]
    floats = [contract.FIELD_BASE_WEIGHT, contract.FIELD_BASE_BIAS, contract.FIELD_WAVELET_WEIGHT]
    kinds = [
        "missing",
        "twice",
        "unknown",
        "int-value",
        "int-type",
        "int-length",
        "float-type",
        "float-length",
        "null-data",
        "int64-overflow",
        "channels_last-value",
    ] + (["version", "checksum", "runtime-missing"] if runtime else [])
    kind = draw(st.sampled_from(kinds))
    if kind == "missing":
        name = draw(st.sampled_from(ints + floats))
        return [f for f in fields if f[0] != name], runtime, name
    if kind == "twice":
        name = draw(st.sampled_from(ints + floats))
        return fields + [next(f for f in fields if f[0] == name)], runtime, name
    if kind == "unknown":
        name = draw(
            st.text(alphabet="abcdefghijklmnopqrstuvwxyz_", min_size=1, max_size=12).filter(
                lambda n: (
                    n
                    not in ints
                    + floats
                    + [contract.FIELD_CHANNELS_LAST, contract.FIELD_PLUGIN_VERSION, contract.FIELD_PLUGIN_NAMESPACE]
                    + [SERIALIZATION_VERSION, CHECKSUM]
                )
            )
        )
        return fields + [int_field(name, 1, INT32)], runtime, name
    if kind == "channels_last-value":  # the optional field, present with a value other than 0 or 1
        bad = draw(st.sampled_from([2, -1, 3, 2**31 - 1]))
        kept = [f for f in fields if f[0] != contract.FIELD_CHANNELS_LAST]
        return kept + [int_field(contract.FIELD_CHANNELS_LAST, bad, INT32)], runtime, contract.FIELD_CHANNELS_LAST
    if kind == "int-value":
        name, bad = draw(
            st.sampled_from(
                [(contract.FIELD_KERNEL_SIZE, v) for v in (0, -1, 2, k + 1, contract.MAX_KERNEL_SIZE + 2, 2**31 - 1)]
                + [(contract.FIELD_WT_LEVELS, v) for v in (0, -3, contract.MAX_WT_LEVELS + 1)]
                + [(contract.FIELD_STRIDE, v) for v in (0, -2)]
            )
        )
        return _replace(fields, name, int_field(name, bad, INT32)), runtime, name
    if kind == "int-type":
        name = draw(st.sampled_from(ints))
        kind_code = draw(st.sampled_from([FLOAT32, INT8, CHAR]))
        return _replace(fields, name, (name, kind_code, 1, np.zeros(2, np.int64))), runtime, name
    if kind == "int-length":
        name = draw(st.sampled_from(ints))
        length = draw(st.sampled_from([0, 2, 3]))
        return _replace(fields, name, (name, INT32, length, np.ones(4, np.int32))), runtime, name
    if kind == "float-type":
        name = draw(st.sampled_from(floats))
        old = next(f for f in fields if f[0] == name)
        return (
            _replace(
                fields,
                name,
                (name, draw(st.sampled_from([INT32, INT64, CHAR])), old[2], np.zeros(old[2] * 2 + 2, np.float32)),
            ),
            runtime,
            name,
        )
    if kind == "float-length":
        name = draw(st.sampled_from(floats))
        old = next(f for f in fields if f[0] == name)
        length = old[2] + draw(st.sampled_from([-1, 1, 7]))
        if name == contract.FIELD_BASE_BIAS:
            # base_bias defines C: a different length makes the other two fields the wrong length instead
            # (or, at 0, base_bias itself is refused).
            length = draw(st.sampled_from([0, old[2] + 1]))
            wrong = name if length == 0 else contract.FIELD_BASE_WEIGHT
            return _replace(fields, name, (name, FLOAT32, length, np.zeros(max(length, 1), np.float32))), runtime, wrong
        return _replace(fields, name, (name, FLOAT32, length, np.zeros(max(length, 1), np.float32))), runtime, name
    if kind == "null-data":
        name = draw(st.sampled_from(ints + floats))
        old = next(f for f in fields if f[0] == name)
        return _replace(fields, name, (name, old[1], old[2], None)), runtime, name
    if kind == "int64-overflow":
        name = draw(st.sampled_from(ints))
        value = draw(st.sampled_from([2**31, -(2**31) - 1, 2**62]))
        return _replace(fields, name, int_field(name, value, INT64)), runtime, name
    if kind == "version":
        value = draw(st.integers(-5, 100).filter(lambda v: v != 1))
        return (
            _replace(fields, SERIALIZATION_VERSION, int_field(SERIALIZATION_VERSION, value, INT32)),
            runtime,
            SERIALIZATION_VERSION,
        )
    if kind == "checksum":
        old = next(f for f in fields if f[0] == CHECKSUM)[3][0]
        value = draw(st.integers(-(2**31), 2**31 - 1).filter(lambda v: v != old))
        return _replace(fields, CHECKSUM, int_field(CHECKSUM, value, INT32)), runtime, CHECKSUM
    name = draw(st.sampled_from([SERIALIZATION_VERSION, CHECKSUM]))  # runtime-missing
    return [f for f in fields if f[0] != name], runtime, name


@settings(max_examples=400, deadline=None)
@given(broken())
def test_broken_fields_are_refused_naming_the_field(decoder, case):
    fields, runtime, name = case
    status, _, message = decode(decoder, fields, runtime)
    assert status == 1, f"accepted a field set with a bad {name!r}"
    assert message.startswith("WTConv2d plugin: ") and "\n" not in message, message
    assert f"'{name}'" in message, message


def test_no_fields_and_nonsense_counts(decoder):
    status, _, message = decode(decoder, [], False)
    assert status == 1 and f"missing field '{contract.FIELD_KERNEL_SIZE}'" in message
    # A negative field count with no arrays (a corrupted collection) is refused, not read.
    k = ctypes.c_int32()
    buffer = ctypes.create_string_buffer(512)
    status = decoder.wtconvDecodePluginFields(
        -3, None, None, None, None, 0, ctypes.byref(k), None, None, None, None, buffer, len(buffer)
    )
    assert status == 1 and buffer.value.decode().startswith("WTConv2d plugin: ")


def _fixed_fields(k=3, levels=2, stride=1, channels=2):
    """A valid build-phase field set without Hypothesis (fp32 weights, int32 integers)."""
    fields = [
        (contract.FIELD_BASE_WEIGHT, FLOAT32, channels * k * k, np.ones(channels * k * k, np.float32)),
        (contract.FIELD_BASE_BIAS, FLOAT32, channels, np.ones(channels, np.float32)),
        (
            contract.FIELD_WAVELET_WEIGHT,
            FLOAT32,
            levels * 4 * channels * k * k,
            np.ones(levels * 4 * channels * k * k, np.float32),
        ),
    ]
    return fields + [
        int_field(contract.FIELD_KERNEL_SIZE, k, INT32),
        int_field(contract.FIELD_WT_LEVELS, levels, INT32),
        int_field(contract.FIELD_STRIDE, stride, INT32),
    ]


@pytest.mark.parametrize("value", [2, -1])
def test_channels_last_other_than_0_or_1_is_refused_in_one_line(decoder, value):
    """The optional field channels_last takes 0 (NCHW) or 1 (channels-last) only (docs/design.md §4)."""
    for ok in (0, 1):
        status, decoded, message = decode(
            decoder, _fixed_fields() + [int_field(contract.FIELD_CHANNELS_LAST, ok, INT32)], False
        )
        assert status == 0 and decoded[4] == ok, message
    status, _, message = decode(
        decoder, _fixed_fields() + [int_field(contract.FIELD_CHANNELS_LAST, value, INT32)], False
    )
    assert status == 1, f"accepted channels_last = {value}"
    assert message == (
        "WTConv2d plugin: field 'channels_last': expected 0 (x and y are (N, C, H, W)) or 1 (channels-last: "
        f"(N, H, W, C)), given {value}"
    ), message


@pytest.mark.parametrize(
    "name, value",
    [
        (contract.FIELD_KERNEL_SIZE, 2),
        (contract.FIELD_KERNEL_SIZE, 4),
        (contract.FIELD_KERNEL_SIZE, 0),
        (contract.FIELD_KERNEL_SIZE, contract.MAX_KERNEL_SIZE + 2),
        (contract.FIELD_WT_LEVELS, 0),
        (contract.FIELD_WT_LEVELS, contract.MAX_WT_LEVELS + 1),
        (contract.FIELD_STRIDE, 0),
        (contract.FIELD_STRIDE, -1),
    ],
)
def test_each_out_of_range_integer_is_refused(decoder, name, value):
    """Every limit of the contract, one at a time (the generated cases above reach them only by chance)."""
    assert decode(decoder, _fixed_fields(), False)[0] == 0
    status, _, message = decode(decoder, _replace(_fixed_fields(), name, int_field(name, value, INT32)), False)
    assert status == 1 and f"'{name}'" in message and str(value) in message, message
