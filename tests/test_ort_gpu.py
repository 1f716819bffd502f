"""The ONNX Runtime custom-op library's CUDA op (plugin/onnxruntime/wtconvOrtCudaOp.cpp) on onnxruntime-gpu's CUDA
execution provider. Skipped with the reason (tests/conftest.py's ort_cuda) without onnxruntime-gpu, a GPU, or a
library built with CUDA.

Oracle as for the CPU op (tests/test_ort_cpu.py) and the kernels (tests/test_kernels_gpu.py): the spec in float64
on the float64-folded weights; fp32 within 1e-6 relative (TF32 off in the CUDA EP: `use_tf32=0`), fp16 within 1.0x
the error of the PyTorch reference module run in fp16 on the GPU. Each session is checked to have placed the node on
the CUDA EP (ONNX Runtime's profile names the provider of every node), so a silent fall-back to the CPU op fails.
"""

from __future__ import annotations

import itertools
import json
import os
import tempfile

import numpy as np
import pytest
import torch

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from test_ort_cpu import ELEM, check_against_spec, check_threads_agree, node_model, rel_error  # noqa: E402

from wtconv_libs import contract  # noqa: E402
from wtconv_ort.session import cuda_provider, make_ort_session  # noqa: E402
from wtconv_torch.folding import fold_wtconv  # noqa: E402
from wtconv_torch.fused_spec import fused_wtconv2d_spec  # noqa: E402
from wtconv_torch.wtconv2d import random_wtconv2d  # noqa: E402

# Profiles go to the temporary folder, not the working directory.
PROFILE_PREFIX = os.path.join(tempfile.gettempdir(), "wtconv_ort_gpu_profile")


def cuda_session(library, model, profile=False):
    options = ort.SessionOptions()
    options.enable_profiling = profile
    options.profile_file_prefix = PROFILE_PREFIX
    return make_ort_session(model, [cuda_provider(), "CPUExecutionProvider"], options, op="native", library=library)


def providers_of_wtconv_nodes(session) -> set:
    """Which execution providers ran the WTConv2d nodes, from the session's profile (ends profiling)."""
    with open(session.end_profiling()) as f:
        events = json.load(f)
    return {
        e["args"].get("provider")
        for e in events
        if e.get("cat") == "Node" and e.get("args", {}).get("op_name") == contract.OP_TYPE
    }


def check_cuda_layer(library, b, c, h, w, k, levels, stride, dtype, seed, report):
    def run(model, x):
        session = cuda_session(library, model, profile=True)
        y = session.run(None, {"x": x})[0]
        assert providers_of_wtconv_nodes(session) == {"CUDAExecutionProvider"}
        return y

    check_against_spec(run, b, c, h, w, k, levels, stride, dtype, seed, report, label="CUDA", device="cuda")


MATRIX = [
    pytest.param(*case, id="{}x{}x{}x{}-k{}-L{}-s{}".format(*case))
    for case in itertools.chain(
        ((2, 3, 37, 70, k, 2, 1) for k in (1, 3, 5, 7, 9, 11, 13, 15)),
        ((1, 2, 45, 29, k, lv, 1) for k in (3, 5, 7) for lv in range(1, contract.MAX_WT_LEVELS + 1)),
        ((3, 2, 67, 130, k, lv, s) for k in (3, 5, 7) for lv in (1, 4) for s in (2, 3)),
        ((2, 3, 1, 1, 5, 3, 1), (2, 1, 1, 9, 3, 5, 2), (1, 2, 7, 1, 7, 8, 1), (4, 2, 5, 3, 5, 8, 2)),
        ((64, c, hw, hw, 5, lv, 1) for c, hw, lv in ((96, 56, 5), (192, 28, 4), (384, 14, 3), (768, 7, 2))),
    )
]


@pytest.mark.parametrize("dtype", [np.float32, np.float16], ids=["fp32", "fp16"])
@pytest.mark.parametrize("b,c,h,w,k,levels,stride", MATRIX)
def test_matches_spec_on_cuda(ort_cuda, error_report, dtype, b, c, h, w, k, levels, stride):
    check_cuda_layer(
        ort_cuda, b, c, h, w, k, levels, stride, dtype, seed=k * 100 + levels * 10 + stride, report=error_report
    )


def test_inputs_and_outputs_bound_on_the_gpu(ort_cuda):
    """I/O binding with both tensors in device memory (no host copies): the same bits as a plain run."""
    folded = fold_wtconv(random_wtconv2d(96, 5, 5, 1, 1))
    session = cuda_session(ort_cuda, node_model(folded, np.float16))
    x = np.random.default_rng(0).standard_normal((8, 96, 56, 56)).astype(np.float16)
    plain = session.run(None, {"x": x})[0]
    binding = session.io_binding()
    binding.bind_ortvalue_input("x", ort.OrtValue.ortvalue_from_numpy(x, "cuda", 0))
    out = ort.OrtValue.ortvalue_from_shape_and_type(plain.shape, np.float16, "cuda", 0)
    binding.bind_ortvalue_output("y", out)
    session.run_with_iobinding(binding)
    assert out.device_name() == "cuda"
    assert np.array_equal(out.numpy(), plain)


def test_workspace_grows_and_shrinking_inputs_still_run(ort_cuda):
    """One session, batches 1 -> 64 -> 1 -> 17 (the per-kernel workspace grows once it is too small): every run
    agrees with the spec."""
    layer = random_wtconv2d(192, 5, 4, 1, 2)
    session = cuda_session(ort_cuda, node_model(fold_wtconv(layer)))
    folded64 = fold_wtconv(layer, dtype=torch.float64).tensors()
    for b in (1, 64, 1, 17):
        x = torch.randn((b, 192, 28, 29), generator=torch.Generator().manual_seed(b))
        y = session.run(None, {"x": x.numpy()})[0]
        expected = fused_wtconv2d_spec(x.double(), *folded64, 5, 4, 1).numpy()
        assert rel_error(y, expected) <= 1e-6, b


def test_four_threads_running_one_session_agree_on_cuda(ort_cuda):
    """Four threads run one CUDA session at once (each run on its own stream, one kernel instance per node, one
    workspace): each output equals, bit for bit, that input's output from a session used by one thread."""
    folded = fold_wtconv(random_wtconv2d(96, 5, 5, 1, 3))
    shared = cuda_session(ort_cuda, node_model(folded))
    alone = cuda_session(ort_cuda, node_model(folded))
    check_threads_agree(shared, alone, [(16, 96, 56, 56), (3, 96, 31, 31), (32, 96, 57, 57), (1, 96, 20, 20)], 20)


def test_cuda_op_agrees_with_cpu_op_on_an_export(ort_cuda, tmp_path, error_report):
    """A small WTConvNeXt's plugin export: the CUDA EP (TF32 off) and the CPU EP, both on the library, agree to
    fp32 rounding of the whole model, and the CUDA session ran every WTConv2d node on the GPU."""
    from wtconv_export.onnx_export import export_onnx
    from wtconv_export.onnx_models import randomize_weights
    from wtconv_torch.wtconvnext import create_wtconvnext

    model = randomize_weights(create_wtconvnext("wtconvnext_tiny", depths=(1, 1, 1, 1), num_classes=10), 0).eval()
    path = tmp_path / "small.onnx"
    export_onnx(model, path, input_shape=(1, 3, 64, 64))
    x = np.random.default_rng(1).standard_normal((4, 3, 72, 88)).astype(np.float32)
    gpu = cuda_session(ort_cuda, path, profile=True)
    y_gpu = gpu.run(None, {"input": x})[0]
    assert providers_of_wtconv_nodes(gpu) == {"CUDAExecutionProvider"}
    y_cpu = make_ort_session(path, op="native", library=ort_cuda).run(None, {"input": x})[0]
    error = rel_error(y_gpu, y_cpu)
    error_report.add("ONNX Runtime CUDA EP vs CPU EP, small WTConvNeXt fp32 (TF32 off)", error, "4x3x72x88")
    assert error <= 1e-5


# --- channels-last nodes and CUDA graphs (docs/onnx_runtime.md, "The CUDA kernel") ---------------------------------

CHANNELS_LAST = [
    pytest.param(*case, id="{}x{}x{}x{}-k{}-L{}-s{}".format(*case))
    for case in (
        (2, 3, 37, 70, 5, 2, 1),
        (3, 5, 67, 130, 3, 4, 2),  # the tiled path (planes above 64x64): transposes through the workspace
        (2, 16, 96, 80, 7, 3, 1),
        (1, 2, 7, 1, 7, 8, 1),
        (8, 96, 56, 56, 5, 5, 1),
    )
]


@pytest.mark.parametrize("dtype", [np.float32, np.float16], ids=["fp32", "fp16"])
@pytest.mark.parametrize("b,c,h,w,k,levels,stride", CHANNELS_LAST)
def test_channels_last_node_matches_spec_on_cuda(ort_cuda, error_report, dtype, b, c, h, w, k, levels, stride):
    """A channels_last = 1 node on the CUDA EP against the float64 spec on the NCHW input (the node sees it
    transposed; tests/test_ort_channels_last.py)."""
    from test_ort_channels_last import transposed_run

    def on_cuda(session):
        assert providers_of_wtconv_nodes(session) == {"CUDAExecutionProvider"}

    check_against_spec(
        transposed_run(lambda model: cuda_session(ort_cuda, model, profile=True), on_cuda),
        b,
        c,
        h,
        w,
        k,
        levels,
        stride,
        dtype,
        seed=k * 100 + levels * 10 + stride,
        report=error_report,
        label="CUDA channels-last",
        device="cuda",
    )


@pytest.fixture(params=["18", "17"], ids=["scratch-buffer", "ort-1.17-fallback"])
def ort_api(request, monkeypatch):
    """Each CUDA-op test below twice: with ONNX Runtime's scratch buffer for the workspace (C API 18, this
    onnxruntime-gpu), and with the library told to behave as in ONNX Runtime 1.17 (WTCONV_ORT_MAX_API=17: weights
    uploaded at the first run, one workspace per stream kept by the kernel)."""
    monkeypatch.setenv("WTCONV_ORT_MAX_API", request.param)
    return request.param


def wtconv_chain(dtype, b=2, c=16, h=96, w=80):
    """x (B, C, H, W) -> WTConv2d (NCHW) -> Transpose -> WTConv2d (channels_last = 1) -> WTConv2d (channels_last = 1,
    stride 2) -> Transpose -> y: every layer on planes above 64x64, where the kernels need a workspace (NCHW, and
    NHWC through the tiled path's transposes)."""
    from onnx import helper

    elem = ELEM[dtype]
    layers = [
        (fold_wtconv(random_wtconv2d(c, 5, 3, 1, 11)), 0),
        (fold_wtconv(random_wtconv2d(c, 5, 3, 1, 12)), 1),
        (fold_wtconv(random_wtconv2d(c, 3, 2, 2, 13)), 1),
    ]
    nodes = []
    for i, (folded, last) in enumerate(layers):
        attributes = dict(folded.attributes())
        attributes[contract.FIELD_CHANNELS_LAST] = last
        src, dst = {0: ("x", "a"), 1: ("a_nhwc", "b"), 2: ("b", "c")}[i]
        nodes.append(
            helper.make_node(contract.OP_TYPE, [src], [dst], domain=contract.ONNX_DOMAIN, name=f"wt{i}", **attributes)
        )
        if i == 0:
            nodes.append(helper.make_node("Transpose", ["a"], ["a_nhwc"], perm=[0, 2, 3, 1]))
    nodes.append(helper.make_node("Transpose", ["c"], ["y"], perm=[0, 3, 1, 2]))
    graph = helper.make_graph(
        nodes,
        "chain",
        [helper.make_tensor_value_info("x", elem, [b, c, h, w])],
        [helper.make_tensor_value_info("y", elem, None)],
    )
    opsets = [helper.make_opsetid("", 18), helper.make_opsetid(contract.ONNX_DOMAIN, 1)]
    return helper.make_model(graph, opset_imports=opsets, ir_version=9), (b, c, (h + 1) // 2, (w + 1) // 2)


def wtconv_node_events(session) -> int:
    """How many times the session's WTConv2d nodes ran through ONNX Runtime's executor (its profile; ends
    profiling). A CUDA-graph replay runs no node: the graph's kernels are launched as they were captured."""
    with open(session.end_profiling()) as f:
        events = json.load(f)
    return sum(1 for e in events if e.get("cat") == "Node" and e.get("args", {}).get("op_name") == contract.OP_TYPE)


def graph_session(library, model, graph, profile=False):
    """A CUDA-EP session, with ONNX Runtime's CUDA graph when `graph`. The arena grows only by what is asked
    (kSameAsRequested), so an allocation the capture would need and the warm-up run did not make cannot hide in
    spare arena memory; convolution algorithms are ONNX Runtime's heuristic choice (DEFAULT), the same in every
    session."""
    options = ort.SessionOptions()
    options.enable_profiling = profile
    options.profile_file_prefix = PROFILE_PREFIX
    settings = {"arena_extend_strategy": "kSameAsRequested", "cudnn_conv_algo_search": "DEFAULT"}
    if graph:
        settings["enable_cuda_graph"] = "1"
    return make_ort_session(model, [cuda_provider(**settings)], options, op="native", library=library)


def run_bound(session, x, output_shape, dtype, x_value=None, y_value=None):
    """One run with input and output bound to fixed device buffers (what a CUDA graph needs): new buffers, or the
    given ones with x copied into the input in place. Returns the output and the two OrtValues."""
    name_in, name_out = session.get_inputs()[0].name, session.get_outputs()[0].name
    if x_value is None:
        x_value = ort.OrtValue.ortvalue_from_numpy(x.copy(), "cuda", 0)  # a copy: x stays x after update_inplace
        y_value = ort.OrtValue.ortvalue_from_shape_and_type(output_shape, dtype, "cuda", 0)
    else:
        x_value.update_inplace(x)
    binding = session.io_binding()
    binding.bind_ortvalue_input(name_in, x_value)
    binding.bind_ortvalue_output(name_out, y_value)
    session.run_with_iobinding(binding)
    return y_value.numpy().copy(), x_value, y_value


def replays(session, x1, later, output_shape, dtype):
    """The first run at x1 (ONNX Runtime's regular run(s), then the captured one), then a run on the same device
    buffers at each input of `later`, the output filled with NaN before each. Returns the outputs."""
    y, x_value, y_value = run_bound(session, x1, output_shape, dtype)
    outputs = [y]
    for x in later:
        y_value.update_inplace(np.full(output_shape, np.nan, dtype))
        outputs.append(run_bound(session, x, output_shape, dtype, x_value, y_value)[0])
    return outputs


def check_graph_replays(library, model, output_shape, x1, x2, dtype, bound):
    """Capture, then replay at x2, x1, x2: each output must agree with an eager session's on that input (relative
    error <= bound; 0: the same bits). That the replays ran the captured graph, not the executor, is checked on
    two profiled sessions: the one that replayed counts as many WTConv2d node runs as one that only made the first
    run."""
    eager = graph_session(library, model, graph=False)
    expected = {1: run_bound(eager, x1, output_shape, dtype)[0], 2: run_bound(eager, x2, output_shape, dtype)[0]}
    assert rel_error(expected[1], expected[2]) > 10 * bound, "x1 and x2 must give outputs the comparison tells apart"
    graphed = graph_session(library, model, graph=True)
    assert graphed.get_provider_options()["CUDAExecutionProvider"]["enable_cuda_graph"] == "1"
    order = (1, 2, 1, 2)
    inputs = {1: x1, 2: x2}
    outputs = replays(graphed, x1, [inputs[k] for k in order[1:]], output_shape, dtype)
    for run, (which, y) in enumerate(zip(order, outputs, strict=True)):
        assert np.isfinite(y).all(), f"run {run}: NaN left in the output"
        if bound == 0:
            assert np.array_equal(y, expected[which]), f"run {run}: differs from the eager session"
        else:
            error = rel_error(y, expected[which])
            assert error <= bound, f"run {run}: relative error {error:.3e} against the eager session"
    once = graph_session(library, model, graph=True, profile=True)
    replays(once, x1, [], output_shape, dtype)
    again = graph_session(library, model, graph=True, profile=True)
    replays(again, x1, [x2, x1, x2], output_shape, dtype)
    captured, replayed = wtconv_node_events(once), wtconv_node_events(again)
    assert captured > 0 and replayed == captured, f"{replayed} WTConv2d node runs after the replays, {captured} before"


@pytest.mark.parametrize("dtype", [np.float32, np.float16], ids=["fp32", "fp16"])
def test_cuda_graph_capture_and_replay_of_wtconv_nodes(ort_cuda, ort_api, dtype):
    """ONNX Runtime's CUDA graph over WTConv2d nodes that need a workspace (NCHW and channels-last, the tiled path):
    capture works, and replays at two input values give the eager session's bits."""
    model, output_shape = wtconv_chain(dtype)
    gen = np.random.default_rng(3)
    x1 = gen.standard_normal((2, 16, 96, 80)).astype(dtype)
    x2 = gen.standard_normal((2, 16, 96, 80)).astype(dtype)
    check_graph_replays(ort_cuda, model, output_shape, x1, x2, dtype, bound=0)


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_cuda_graph_of_a_wtconvnext_export(ort_cuda, ort_api, tmp_path, precision):
    """A small WTConvNeXt's plugin export at 288x288 (its first stage's planes are 72x72: the tiled path, with a
    workspace) under ONNX Runtime's CUDA graph: replays at two input values agree with the eager session to the
    rounding of the export's precision."""
    from wtconv_export.onnx_export import export_onnx
    from wtconv_export.onnx_models import randomize_weights
    from wtconv_torch.wtconvnext import create_wtconvnext

    model = randomize_weights(create_wtconvnext("wtconvnext_tiny", depths=(1, 1, 1, 1), num_classes=10), 0).eval()
    path = tmp_path / f"small_{precision}.onnx"
    export_onnx(model, path, precision=precision, input_shape=(2, 3, 288, 288))
    dtype = np.float16 if precision == "fp16" else np.float32
    gen = np.random.default_rng(4)
    x1 = gen.standard_normal((2, 3, 288, 288)).astype(dtype)
    x2 = gen.standard_normal((2, 3, 288, 288)).astype(dtype)
    check_graph_replays(
        ort_cuda, onnx.load(str(path)), (2, 10), x1, x2, dtype, bound=1e-5 if precision == "fp32" else 5e-3
    )


def test_four_threads_with_workspaces_agree_on_cuda(ort_cuda, ort_api):
    """Four threads run one CUDA session whose shapes need a workspace (planes above 64x64), each run on its own
    stream: each output equals, bit for bit, a single-threaded session's."""
    folded = fold_wtconv(random_wtconv2d(96, 5, 4, 1, 5))
    shared = cuda_session(ort_cuda, node_model(folded))
    alone = cuda_session(ort_cuda, node_model(folded))
    check_threads_agree(shared, alone, [(4, 96, 72, 66), (2, 96, 130, 67), (1, 96, 65, 65), (3, 96, 20, 20)], 10)
