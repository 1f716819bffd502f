"""Malformed wtconv::WTConv2d nodes in ONNX Runtime with libwtconv_ort.so: each one is refused at session creation
or at run time with ONNX Runtime's error carrying our one line, which names the node and the field at fault; nothing
crashes, aborts or reads past a field.

The field messages are the shared decoder's (plugin/common/wtconvLayerFields.cpp), the same the TensorRT plugin gives
(tests/test_tensorrt_rtx_bad_input.py quotes them for TensorRT-RTX); only the words for the runtime's own types
differ (INT / FLOATS here, kINT32 / kFLOAT32 there) and the prefix names the node.

Every case runs in one child process (this file run as a script), which prints a line before and after each case:
a crash shows as the child's exit status, with the case it was in.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from onnx import AttributeProto, TensorProto, helper, numpy_helper  # noqa: E402

from wtconv_libs import contract  # noqa: E402

# IR version 9 (ONNX 1.15): read by every ONNX Runtime the library supports (1.17 and newer); onnx.helper would
# stamp its own newest IR version, which an older runtime refuses ("Unsupported model IR version").
ORT_IR_VERSION = 9

C, K, L = 4, 3, 2
NODE = "bad_layer"


def _weights():
    gen = np.random.default_rng(0)
    return {
        contract.FIELD_KERNEL_SIZE: K,
        contract.FIELD_WT_LEVELS: L,
        contract.FIELD_STRIDE: 1,
        contract.FIELD_BASE_WEIGHT: gen.standard_normal(C * K * K).astype(np.float32).tolist(),
        contract.FIELD_BASE_BIAS: gen.standard_normal(C).astype(np.float32).tolist(),
        contract.FIELD_WAVELET_WEIGHT: gen.standard_normal(L * 4 * C * K * K).astype(np.float32).tolist(),
        contract.FIELD_PLUGIN_VERSION: contract.PLUGIN_VERSION,
        contract.FIELD_PLUGIN_NAMESPACE: contract.PLUGIN_NAMESPACE,
    }


def _attribute(name, value):
    if isinstance(value, AttributeProto):
        value.name = name
        return value
    return helper.make_attribute(name, value)


def _empty_floats():
    a = AttributeProto()
    a.type = AttributeProto.FLOATS
    return a


def _tensor(array):
    a = AttributeProto()
    a.type = AttributeProto.TENSOR
    a.t.CopyFrom(numpy_helper.from_array(np.asarray(array)))
    return a


def model(changes=None, elem=TensorProto.FLOAT, shape=("B", C, "H", "W"), cast_to=None, inputs=1, upstream=None):
    """One WTConv2d node named NODE; `changes` maps attribute names to new values (None removes one). `upstream`
    puts a node in front whose output shape only ONNX Runtime's shape inference knows: "wtconv", a well-formed
    WTConv2d of C channels in front of a NODE made for C - 1; "reshape", a Reshape to rank 3."""
    attributes = _weights()
    for name, value in (changes or {}).items():
        if value is None:
            attributes.pop(name)
        else:
            attributes[name] = value
    nodes, x, initializers = [], "x", []
    if cast_to is not None:  # a model input of `elem` cast to `cast_to` in front of the node
        nodes.append(helper.make_node("Cast", ["x"], ["x_cast"], to=cast_to))
        x = "x_cast"
    if upstream == "wtconv":
        first = helper.make_node(contract.OP_TYPE, ["x"], ["t"], domain=contract.ONNX_DOMAIN, name="first")
        first.attribute.extend(_attribute(name, value) for name, value in _weights().items())
        nodes.append(first)
        x = "t"
        gen = np.random.default_rng(1)
        c = C - 1
        attributes[contract.FIELD_BASE_WEIGHT] = gen.standard_normal(c * K * K).astype(np.float32).tolist()
        attributes[contract.FIELD_BASE_BIAS] = gen.standard_normal(c).astype(np.float32).tolist()
        attributes[contract.FIELD_WAVELET_WEIGHT] = gen.standard_normal(L * 4 * c * K * K).astype(np.float32).tolist()
    if upstream == "reshape":
        initializers.append(numpy_helper.from_array(np.array([shape[0], C, -1], np.int64), "rank3"))
        nodes.append(helper.make_node("Reshape", ["x", "rank3"], ["r"]))
        x = "r"
    node = helper.make_node(contract.OP_TYPE, [x] + ["x"] * (inputs - 1), ["y"], domain=contract.ONNX_DOMAIN, name=NODE)
    node.attribute.extend(_attribute(name, value) for name, value in attributes.items())
    nodes.append(node)
    graph = helper.make_graph(
        nodes,
        "bad",
        [helper.make_tensor_value_info("x", elem, shape)],
        [helper.make_tensor_value_info("y", cast_to or elem, None)],
        initializers,
    )
    opsets = [helper.make_opsetid("", 18), helper.make_opsetid(contract.ONNX_DOMAIN, 1)]
    return helper.make_model(graph, opset_imports=opsets, ir_version=ORT_IR_VERSION)


FLOAT_TYPE = "FLOATS (or a float32/float16 TENSOR)"
WHO = f"{contract.OP_TYPE} node '{NODE}': "
# (id, model, input array or None, phase where it must fail, the message that must appear)
CASES = [
    (
        "base_weight-short",
        model({contract.FIELD_BASE_WEIGHT: [0.5] * (C * K * K - 1)}),
        None,
        "create",
        "field 'base_weight': expected length C*k*k with C=4 (length of base_bias), k=3 = 36, given 35",
    ),
    (
        "wavelet_weight-long",
        model({contract.FIELD_WAVELET_WEIGHT: [0.5] * (L * 4 * C * K * K + 1)}),
        None,
        "create",
        "field 'wavelet_weight': expected length L*4C*k*k with L=2, C=4, k=3 = 288, given 289",
    ),
    (
        "base_bias-empty",
        model({contract.FIELD_BASE_BIAS: _empty_floats()}),
        None,
        "create",
        "field 'base_bias': expected length C >= 1 (one value per channel), given 0",
    ),
    (
        "base_bias-longer-than-weights",
        model({contract.FIELD_BASE_BIAS: [0.0] * 1000}),
        None,
        "create",
        "field 'base_weight': expected length C*k*k with C=1000 (length of base_bias), k=3 = 9000, given 36",
    ),
    *[
        (
            f"missing-{field}",
            model({field: None}),
            None,
            "create",
            f"attributes: missing field '{field}' (the ONNX node attribute of that name)",
        )
        for field in contract.INT_FIELDS + contract.FLOAT_FIELDS
    ],
    (
        "kernel_size-even",
        model({contract.FIELD_KERNEL_SIZE: 4}),
        None,
        "create",
        "field 'kernel_size': expected an odd integer in 1..15, given 4",
    ),
    (
        "kernel_size-0",
        model({contract.FIELD_KERNEL_SIZE: 0}),
        None,
        "create",
        "field 'kernel_size': expected an odd integer in 1..15, given 0",
    ),
    (
        "kernel_size-17",
        model({contract.FIELD_KERNEL_SIZE: 17}),
        None,
        "create",
        "field 'kernel_size': expected an odd integer in 1..15, given 17",
    ),
    (
        "kernel_size-2^40",
        model({contract.FIELD_KERNEL_SIZE: 2**40}),
        None,
        "create",
        "field 'kernel_size': expected a value that fits int32, given 1099511627776",
    ),
    (
        "wt_levels-0",
        model({contract.FIELD_WT_LEVELS: 0}),
        None,
        "create",
        "field 'wt_levels': expected an integer in 1..8, given 0",
    ),
    (
        "wt_levels-9",
        model({contract.FIELD_WT_LEVELS: 9}),
        None,
        "create",
        "field 'wt_levels': expected an integer in 1..8, given 9",
    ),
    (
        "stride-0",
        model({contract.FIELD_STRIDE: 0}),
        None,
        "create",
        "field 'stride': expected an integer >= 1, given 0",
    ),
    (
        "stride-negative",
        model({contract.FIELD_STRIDE: -2}),
        None,
        "create",
        "field 'stride': expected an integer >= 1, given -2",
    ),
    (
        "kernel_size-float",
        model({contract.FIELD_KERNEL_SIZE: 3.0}),
        None,
        "create",
        "field 'kernel_size': expected type INT (one integer), given FLOAT",
    ),
    (
        "kernel_size-ints",
        model({contract.FIELD_KERNEL_SIZE: [3, 3]}),
        None,
        "create",
        "field 'kernel_size': expected length 1, given 2",
    ),
    (
        "stride-string",
        model({contract.FIELD_STRIDE: "1"}),
        None,
        "create",
        "field 'stride': expected type INT (one integer), given STRING",
    ),
    (
        "base_weight-string",
        model({contract.FIELD_BASE_WEIGHT: "weights"}),
        None,
        "create",
        f"field 'base_weight': expected type {FLOAT_TYPE}, given STRING",
    ),
    (
        "base_weight-ints",
        model({contract.FIELD_BASE_WEIGHT: list(range(C * K * K))}),
        None,
        "create",
        f"field 'base_weight': expected type {FLOAT_TYPE}, given INTS",
    ),
    (
        "base_weight-int64-tensor",
        model({contract.FIELD_BASE_WEIGHT: _tensor(np.zeros(C * K * K, np.int64))}),
        None,
        "create",
        f"field 'base_weight': expected type {FLOAT_TYPE}, given a TENSOR of another element type",
    ),
    (
        "plugin_version-2",
        model({contract.FIELD_PLUGIN_VERSION: "2"}),
        None,
        "create",
        'field \'plugin_version\': expected "1" (the WTConv2d this library implements), given "2"',
    ),
    (
        "plugin_version-int",
        model({contract.FIELD_PLUGIN_VERSION: 1}),
        None,
        "create",
        "field 'plugin_version': expected type STRING, given INT",
    ),
    (
        "plugin_namespace-other",
        model({contract.FIELD_PLUGIN_NAMESPACE: "mine"}),
        None,
        "create",
        'field \'plugin_namespace\': expected "" (the WTConv2d this library implements), given "mine"',
    ),
    (
        "input-int32",
        model(elem=TensorProto.INT32),
        None,
        "create",
        "input 0: expected float32 or float16, given int32",
    ),
    (
        "input-float64",
        model(elem=TensorProto.DOUBLE),
        None,
        "create",
        "input 0: expected float32 or float16, given float64",
    ),
    (
        "input-bfloat16",
        model(elem=TensorProto.FLOAT, cast_to=TensorProto.BFLOAT16),
        None,
        "create",
        "input 0: expected float32 or float16, given bfloat16",
    ),
    (
        "input-rank-3-declared",
        model(shape=("B", C, "H")),
        None,
        "create",
        "input 0: expected a 4-D tensor (B, C, H, W), the graph gives it rank 3",
    ),
    (
        "input-channels-declared",
        model(shape=("B", C + 1, "H", "W")),
        None,
        "create",
        "input 0: the graph gives it C = 5 channels (dim 1 of (B, C, H, W)), the field 'base_bias' gives C = 4",
    ),
    (
        "input-channels-at-run",
        model(shape=("B", "C", "H", "W")),
        np.zeros((1, C + 2, 8, 8), np.float32),
        "run",
        "input 0: expected C = 4 channels (the length of 'base_bias') in dim 1 of (B, C, H, W), given a tensor of "
        "shape (1, 6, 8, 8)",
    ),
    (
        "input-rank-at-run",
        model(shape=None),
        np.zeros((C, 8, 8), np.float32),
        "run",
        "input 0: expected a 4-D tensor (B, C, H, W), given rank 3",
    ),
    ("two-inputs", model(inputs=2), None, "create", NODE),
    *[
        (
            f"channels_last-{value}",
            model({contract.FIELD_CHANNELS_LAST: value}),
            None,
            "create",
            f"field 'channels_last': expected 0 (x and y are (N, C, H, W)) or 1 (channels-last: (N, H, W, C)), "
            f"given {value}",
        )
        for value in (2, -1)
    ],
    (
        "channels_last-float",
        model({contract.FIELD_CHANNELS_LAST: 1.0}),
        None,
        "create",
        "field 'channels_last': expected type INT (one integer), given FLOAT",
    ),
    (
        "channels_last-channels-declared",
        model({contract.FIELD_CHANNELS_LAST: 1}, shape=("B", "H", "W", C + 1)),
        None,
        "create",
        "input 0: the graph gives it C = 5 channels (dim 3 of (B, H, W, C) (channels_last = 1)), the field "
        "'base_bias' gives C = 4",
    ),
    (
        "channels_last-nchw-input-at-run",
        model({contract.FIELD_CHANNELS_LAST: 1}, shape=None),
        np.zeros((1, C, 8, 8), np.float32),
        "run",
        "input 0: expected C = 4 channels (the length of 'base_bias') in dim 3 of (B, H, W, C) (channels_last = 1), "
        "given a tensor of shape (1, 4, 8, 8)",
    ),
    (
        "channels-inferred",
        model(upstream="wtconv", shape=("B", C, "H", "W")),
        None,
        "create",
        "input 0: the graph gives it C = 4 channels (dim 1 of (B, C, H, W)), the field 'base_bias' gives C = 3",
    ),
    (
        "rank-inferred",
        model(upstream="reshape", shape=(2, C, 4, 4)),
        None,
        "create",
        "input 0: expected a 4-D tensor (B, C, H, W), the graph gives it rank 3",
    ),
]


def _run_cases(spec_path: Path, library: str) -> None:
    """The child: every case in the spec, one JSON line per event on stdout."""
    from wtconv_ort.session import make_ort_session

    for case in json.loads(spec_path.read_text()):
        print(json.dumps({"start": case["id"]}), flush=True)
        result = {"id": case["id"], "phase": "none", "message": ""}
        try:
            session = make_ort_session(case["model"], op="native", library=library)
        except Exception as error:  # noqa: BLE001 -- what the user would see is the point
            result.update(phase="create", message=str(error), type=type(error).__name__)
        else:
            feed = np.load(case["input"]) if case["input"] else np.zeros((1, C, 8, 8), np.float32)
            try:
                session.run(None, {"x": feed})
            except Exception as error:  # noqa: BLE001
                result.update(phase="run", message=str(error), type=type(error).__name__)
        print(json.dumps(result), flush=True)


@pytest.fixture(scope="module")
def outcomes(ort_library, tmp_path_factory):
    """{case id: {"phase", "message", "type"}} from one child process running every case."""
    folder = tmp_path_factory.mktemp("ort_bad_nodes")
    spec = []
    for case_id, proto, feed, _, _ in CASES:
        path = folder / f"{case_id}.onnx"
        onnx.save(proto, path)
        entry = {"id": case_id, "model": str(path), "input": ""}
        if feed is not None:
            entry["input"] = str(folder / f"{case_id}.npy")
            np.save(entry["input"], feed)
        spec.append(entry)
    (folder / "spec.json").write_text(json.dumps(spec))
    child = subprocess.run(
        [sys.executable, __file__, str(folder / "spec.json"), str(ort_library)],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=Path(__file__).resolve().parent.parent,
    )
    events = [json.loads(line) for line in child.stdout.splitlines() if line.startswith("{")]
    started = [e["start"] for e in events if "start" in e]
    assert child.returncode == 0, (
        f"the child process died (status {child.returncode}) in case {started[-1] if started else '?'}:\n"
        f"{child.stderr[-3000:]}"
    )
    return {e["id"]: e for e in events if "id" in e}


@pytest.mark.parametrize("case_id,phase,words", [(c[0], c[3], c[4]) for c in CASES], ids=[c[0] for c in CASES])
def test_malformed_node_is_refused_cleanly(outcomes, case_id, phase, words):
    outcome = outcomes[case_id]
    assert outcome["phase"] == phase, outcome
    assert words in outcome["message"], outcome["message"]
    if case_id != "two-inputs":  # that one is ONNX Runtime's own schema check
        assert WHO + words in outcome["message"], outcome["message"]
    if phase == "create" and case_id != "two-inputs":
        # make_ort_session hands our line over as a one-line ModelError.
        assert outcome["type"] == "ModelError" and "\n" not in outcome["message"], outcome


if __name__ == "__main__":
    _run_cases(Path(sys.argv[1]), sys.argv[2])
